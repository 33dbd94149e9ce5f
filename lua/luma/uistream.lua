-- An ask's events as the Vercel AI SDK's UI message stream (the protocol of
-- its useChat, `ai` 5.0.92 and later): pure Lua, no I/O, for Lua 5.4 and LuaJIT.
--
--   local uistream = require "luma.uistream"
--   local enc = uistream.new { message_id = "m1" }   -- json = an encoder, metadata = true
--   for ev in ask:events() do send(enc:push(ev)) end  -- SSE text ("" when nothing to send)
--   if not enc.done then send(enc:close(err)) end     -- a stream cut before its finish
--
-- What the browser sees, event by event (the events are README's "The ask's events"):
--   the first event       start {messageId}, then start-step for its turn
--   a new turn            finish-step of the last one, start-step
--   text_delta            text-start/-delta; the part ends at turn_end, at a tool call, or when
--                         reasoning or a refusal comes between
--   refusal_delta         a text part of its own, providerMetadata {luma = {refusal = true}}
--   reasoning_delta       reasoning-start/-delta/-end
--   tool_call_start       tool-input-start {toolCallId, toolName}
--   tool_call_delta       tool-input-delta {toolCallId, inputTextDelta}
--   tool_call             tool-input-available {toolCallId, toolName, input}
--   tool_result           tool-output-available {toolCallId, output}, or tool-output-error
--                         {toolCallId, errorText = "[CODE] message"}; in its turn's step
--   provider_tool         a call the provider ran (web search...), shown once its result came:
--                         tool-input-available {toolCallId, toolName = its kind, input = {},
--                         providerExecuted = true}, then tool-output-available {output = null}
--                         or, failed, tool-output-error {errorText = "[CODE] message"}, both
--                         providerExecuted = true (useChat's onToolCall skips such a call);
--                         the event has neither its input nor its output (its citations are
--                         the ask's)
--   usage                 with metadata = true: message-metadata {usage = {inputTokens, outputTokens}},
--                         the totals so far (off by default: an app's messageMetadataSchema judges it)
--   turn_end              the turn's parts end; its stop is the finish's finishReason
--   retry                 when the turn showed something: its open parts end (an unfinished tool
--                         call as tool-input-error or tool-output-error "void: ..."), finish-step,
--                         then a data-luma-retry part {turn, reason, attempt}: the parts from the
--                         step-start before it are void. The retried turn comes as a new step.
--   finish ok             finish {finishReason}; an answer that is a string when the last turn showed
--                         no text comes as text first, any other answer as a data-luma-answer part
--   finish not ok         the open parts end, error {errorText = "[CODE] message"}, finish-step,
--                         finish {finishReason = "error"}
--   after the finish      data: [DONE]
-- An event of a type this does not know is skipped, as is a tool_call_delta
-- of a call that did not start.
local uistream = {}

uistream.HEADERS = {
  ["content-type"] = "text/event-stream",
  ["cache-control"] = "no-cache",
  ["x-vercel-ai-ui-message-stream"] = "v1",
  ["x-accel-buffering"] = "no",
}
uistream.DONE = "data: [DONE]\n\n"

local FINISH_REASON = {
  stop = "stop", tool_calls = "tool-calls", length = "length", refusal = "content-filter", filter = "content-filter",
  content_filter = "content-filter",
}

-- luma's own JSON codec: luma.core's on Lua 5.4, luma.ffi's on LuaJIT
local function default_json()
  if rawget(_G, "jit") then return require("luma.ffi").json.encode end
  return require("luma.core").json_encode
end

local function error_text(e)
  if type(e) == "table" then
    local code, message = e.code, e.message
    if code ~= nil and message ~= nil then return "[" .. tostring(code) .. "] " .. tostring(message) end
    if message ~= nil then return tostring(message) end
    if code ~= nil then return "[" .. tostring(code) .. "]" end
  end
  if e == nil then return "the ask failed" end
  return tostring(e)
end
uistream.error_text = error_text

local Encoder = {}
Encoder.__index = Encoder

-- opts: message_id (the assistant message's id: start's messageId), json (an
-- encoder of Lua values to JSON text; luma's own by default), metadata (true:
-- usage as message metadata)
function uistream.new(opts)
  opts = opts or {}
  return setmetatable({
    json = opts.json or default_json(),
    message_id = opts.message_id,
    metadata = opts.metadata == true,
    started = false,   -- start sent
    step = nil,        -- the open step: { turn, ended, order = { ids of its calls }, text_shown }
    part = nil,        -- the open text or reasoning part: { kind = "text"|"refusal"|"reasoning", id }
    tools = {},        -- every call shown: id -> { name, state = "input"|"available"|"done" }
    parts = 0,         -- parts made, for their ids
    usage = nil,
    stop = nil,        -- the last turn's stop
    done = false,      -- [DONE] sent
    out = nil,         -- the chunks of the event being encoded
  }, Encoder)
end

function Encoder:emit(chunk) self.out[#self.out + 1] = chunk end

function Encoder:end_part()
  local p = self.part
  if not p then return end
  self:emit { type = p.kind == "reasoning" and "reasoning-end" or "text-end", id = p.id }
  self.part = nil
end

function Encoder:finish_step()
  self:end_part()
  if self.step then
    self:emit { type = "finish-step" }
    self.step = nil
  end
end

-- The step of turn n, opened when its first event comes.
function Encoder:enter(turn)
  if not self.started then
    self.started = true
    self:emit { type = "start", messageId = self.message_id }
  end
  local step = self.step
  if step and step.turn == turn then return step end
  self:finish_step()
  self:emit { type = "start-step" }
  self.step = { turn = turn }
  return self.step
end

function Encoder:delta(ev, kind)
  if type(ev.text) ~= "string" or ev.text == "" then return end
  local step = self:enter(ev.turn)
  local p = self.part
  if not p or p.kind ~= kind then
    self:end_part()
    self.parts = self.parts + 1
    p = { kind = kind, id = (kind == "reasoning" and "r" or "t") .. self.parts }
    self.part = p
    if kind == "reasoning" then
      self:emit { type = "reasoning-start", id = p.id }
    elseif kind == "refusal" then
      self:emit { type = "text-start", id = p.id, providerMetadata = { luma = { refusal = true } } }
    else
      self:emit { type = "text-start", id = p.id }
    end
  end
  if kind ~= "reasoning" then step.text_shown = true end
  self:emit { type = kind == "reasoning" and "reasoning-delta" or "text-delta", id = p.id, delta = ev.text }
end

-- The calls of the open step that have no result: each ends with why.
function Encoder:end_tools(why)
  local step = self.step
  if not step then return end
  for _, id in ipairs(step.order or {}) do
    local call = self.tools[id]
    if call.state == "input" then
      self:emit { type = "tool-input-error", toolCallId = id, toolName = call.name, errorText = why }
    elseif call.state == "available" then
      self:emit { type = "tool-output-error", toolCallId = id, errorText = why }
    end
    call.state = "done"
  end
end

function Encoder:call(ev, state)
  local step = self:enter(ev.turn)
  self:end_part()
  local id = tostring(ev.id)
  local call = self.tools[id]
  if not call then
    call = { name = ev.name }
    self.tools[id] = call
    step.order = step.order or {}
    step.order[#step.order + 1] = id
  end
  call.name = ev.name or call.name
  call.state = state
  return id, call
end

local handle = {}

handle.text_delta = function(self, ev) self:delta(ev, "text") end
handle.refusal_delta = function(self, ev) self:delta(ev, "refusal") end
handle.reasoning_delta = function(self, ev) self:delta(ev, "reasoning") end

handle.tool_call_start = function(self, ev)
  local id, call = self:call(ev, "input")
  self:emit { type = "tool-input-start", toolCallId = id, toolName = tostring(call.name) }
end

handle.tool_call_delta = function(self, ev)
  local call = self.tools[tostring(ev.id)]
  if not call or call.state ~= "input" or type(ev.text) ~= "string" or ev.text == "" then return end
  self:emit { type = "tool-input-delta", toolCallId = tostring(ev.id), inputTextDelta = ev.text }
end

handle.tool_call = function(self, ev)
  local id, call = self:call(ev, "available")
  local input = ev.input
  if input == nil then input = {} end
  self:emit { type = "tool-input-available", toolCallId = id, toolName = tostring(call.name), input = input }
end

handle.tool_result = function(self, ev)
  local id = tostring(ev.id)
  local call = self.tools[id]
  if not call then
    -- a result the browser never saw called: its call first
    id, call = self:call(ev, "available")
    self:emit { type = "tool-input-available", toolCallId = id, toolName = tostring(call.name), input = {} }
  end
  call.state = "done"
  if ev.ok == false or ev.error ~= nil then
    self:emit { type = "tool-output-error", toolCallId = id, errorText = error_text(ev.error) }
  else
    local output = ev.output
    if output == nil then output = uistream.null end
    self:emit { type = "tool-output-available", toolCallId = id, output = output }
  end
end

-- a call the provider ran, whole: the browser must not run it (providerExecuted)
handle.provider_tool = function(self, ev)
  local id, call = self:call(ev, "done")
  self:emit { type = "tool-input-available", toolCallId = id, toolName = tostring(call.name), input = {},
    providerExecuted = true }
  if ev.status == "failed" or ev.error ~= nil then
    local e = ev.error or { code = "failed", message = tostring(call.name) .. " failed at the provider" }
    self:emit { type = "tool-output-error", toolCallId = id, errorText = error_text(e), providerExecuted = true }
  else
    self:emit { type = "tool-output-available", toolCallId = id, output = uistream.null, providerExecuted = true }
  end
end

handle.usage = function(self, ev)
  local u = self.usage or { inputTokens = 0, outputTokens = 0 }
  self.usage = u
  u.inputTokens = u.inputTokens + (tonumber(ev.input_tokens) or 0)
  u.outputTokens = u.outputTokens + (tonumber(ev.output_tokens) or 0)
  if self.metadata then
    self:enter(ev.turn)
    self:emit { type = "message-metadata", messageMetadata = { usage = { inputTokens = u.inputTokens, outputTokens = u.outputTokens } } }
  end
end

handle.turn_end = function(self, ev)
  self.stop = ev.stop
  local step = self.step
  if step and step.turn == ev.turn then
    self:end_part()
    step.ended = true
  end
end

handle.retry = function(self, ev)
  local step = self.step
  if not step or step.turn ~= ev.turn or step.ended then return end
  self:end_part()
  self:end_tools("void: the turn is asked again (" .. tostring(ev.reason) .. ")")
  self:finish_step()
  self:emit { type = "data-luma-retry", data = { turn = ev.turn, reason = ev.reason, attempt = ev.attempt } }
end

handle.finish = function(self, ev)
  if not self.started then
    self.started = true
    self:emit { type = "start", messageId = self.message_id }
  end
  if ev.ok == false then
    self:end_part()
    local text = error_text(ev.error)
    self:end_tools(text)
    self:emit { type = "error", errorText = text }
    self:finish_step()
    self:emit { type = "finish", finishReason = "error" }
  else
    local answer = ev.answer
    if type(answer) == "string" and answer ~= "" and not (self.step and self.step.text_shown) then
      self:delta({ turn = self.step and self.step.turn or 0, text = answer }, "text")
    elseif answer ~= nil and type(answer) ~= "string" then
      self:end_part()
      self:emit { type = "data-luma-answer", data = answer }
    end
    self:finish_step()
    self:emit { type = "finish", finishReason = FINISH_REASON[self.stop or "stop"] or "other" }
  end
  self.done = true
end

-- ev -> the UI message chunks it makes (a list of tables; after the finish, none)
function Encoder:chunks(ev)
  self.out = {}
  if not self.done and type(ev) == "table" then
    local f = handle[ev.type]
    if f then f(self, ev) end
  end
  local out = self.out
  self.out = nil
  return out
end

function Encoder:frame(chunks, finished)
  local text = {}
  for i, chunk in ipairs(chunks) do text[i] = "data: " .. self.json(chunk) .. "\n\n" end
  if finished then text[#text + 1] = uistream.DONE end
  return table.concat(text)
end

-- ev -> the SSE text to send for it ("" when none); the finish's ends with data: [DONE]
function Encoder:push(ev)
  local was = self.done
  local chunks = self:chunks(ev)
  return self:frame(chunks, self.done and not was)
end

-- Ends a stream whose events stopped before their finish: as a failed
-- finish with err (by default, that the stream ended early). "" when done.
function Encoder:close(err)
  if self.done then return "" end
  return self:push { type = "finish", ok = false,
    error = err or { code = "ASK_TRUNCATED", message = "the ask's events ended before its finish" } }
end

-- events (a list) -> the whole SSE text
function uistream.encode(events, opts)
  local enc = uistream.new(opts)
  local text = {}
  for _, ev in ipairs(events) do text[#text + 1] = enc:push(ev) end
  text[#text + 1] = enc:close()
  return table.concat(text)
end

-- JSON null for the codec in use (a tool's output may be nothing)
if rawget(_G, "jit") then
  uistream.null = require("luma.ffi").null
else
  uistream.null = require("luma.core").null
end

return uistream
