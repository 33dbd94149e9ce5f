-- An ask's events as the Vercel AI SDK's UI message stream: luma.uistream
-- (the encoder) and luma.nginx (OpenResty's answer to useChat).
--
-- The client is the `ai` package itself (spec/support/ai: package.json +
-- package-lock.json; `npm ci` runs when node_modules is missing): its
-- AbstractChat, the state machine under useChat, with its
-- DefaultChatTransport, reads the stream and rebuilds the messages; its
-- parseJsonEventStream and readUIMessageStream read the same bytes.
local luma = require "luma"
local uistream = require "luma.uistream"
local h = require "spec.helpers"
local mock = require "spec.support.mock_provider"

local json = luma.json
local SUPPORT = h.root .. "/spec/support/ai"

local function ensure_ai()
  local status = h.sh("command -v node && command -v npm")
  assert(status == 0, "node and npm are needed (Debian: nodejs npm)")
  if h.sh("test -d " .. h.quote(SUPPORT .. "/node_modules/ai")) ~= 0 then
    local st, out, err = h.sh("cd " .. h.quote(SUPPORT) .. " && env -u LD_PRELOAD npm ci --prefer-offline --no-audit --no-fund")
    assert(st == 0, "npm ci in spec/support/ai failed: " .. out .. err)
  end
end

-- args for chat.mjs (a URL, or "-" with the stream on stdin) -> its report
local function ai_chat(args, stdin)
  local input = stdin and h.write(h.tmpname(".sse"), stdin)
  local status, out, err = h.sh("cd " .. h.quote(SUPPORT) .. " && env -u LD_PRELOAD node chat.mjs " .. args ..
    (input and (" < " .. h.quote(input)) or ""))
  if input then os.remove(input) end
  assert(status == 0, "chat.mjs failed: " .. out .. err)
  return json.decode(out)
end

-- the chunks events make, in order, with "[DONE]" where the stream ends
local function chunks_of(events, opts)
  local enc = uistream.new(opts)
  local all = {}
  for _, ev in ipairs(events) do
    local was = enc.done
    for _, c in ipairs(enc:chunks(ev)) do all[#all + 1] = c end
    if enc.done and not was then all[#all + 1] = "[DONE]" end
  end
  return all
end

local null = luma.null

local function text(turn, s) return { type = "text_delta", turn = turn, text = s } end
local OK = { type = "finish", ok = true, answer = "done" }

-- { name, events, expected chunks }
local CASES = {
  { "text deltas as one text part in one step, then the finish and [DONE]",
    { text(1, "Hel"), text(1, "lo"), { type = "turn_end", turn = 1, stop = "stop" }, OK },
    { { type = "start" }, { type = "start-step" }, { type = "text-start", id = "t1" },
      { type = "text-delta", id = "t1", delta = "Hel" }, { type = "text-delta", id = "t1", delta = "lo" },
      { type = "text-end", id = "t1" }, { type = "finish-step" }, { type = "finish", finishReason = "stop" }, "[DONE]" } },
  { "a refusal as a text part of its own, marked; its stop as content-filter",
    { { type = "refusal_delta", turn = 1, text = "I can't." }, { type = "turn_end", turn = 1, stop = "refusal" },
      { type = "finish", ok = true, answer = "I can't." } },
    { { type = "start" }, { type = "start-step" },
      { type = "text-start", id = "t1", providerMetadata = { luma = { refusal = true } } },
      { type = "text-delta", id = "t1", delta = "I can't." }, { type = "text-end", id = "t1" },
      { type = "finish-step" }, { type = "finish", finishReason = "content-filter" }, "[DONE]" } },
  { "reasoning, then text: each a part, the first ended when the second starts",
    { { type = "reasoning_delta", turn = 1, text = "think" }, text(1, "Yes."), { type = "turn_end", turn = 1, stop = "length" },
      { type = "finish", ok = true, answer = "Yes." } },
    { { type = "start" }, { type = "start-step" }, { type = "reasoning-start", id = "r1" },
      { type = "reasoning-delta", id = "r1", delta = "think" }, { type = "reasoning-end", id = "r1" },
      { type = "text-start", id = "t2" }, { type = "text-delta", id = "t2", delta = "Yes." }, { type = "text-end", id = "t2" },
      { type = "finish-step" }, { type = "finish", finishReason = "length" }, "[DONE]" } },
  { "a tool call: its start ends the text, fragments, the input, the output in its turn's step, the next turn a new step",
    { text(1, "Adding."), { type = "tool_call_start", turn = 1, id = "c1", name = "add" },
      { type = "tool_call_delta", turn = 1, id = "c1", text = '{"a":' }, { type = "tool_call_delta", turn = 1, id = "c1", text = "1}" },
      { type = "tool_call", turn = 1, id = "c1", name = "add", input = { a = 1 } },
      { type = "turn_end", turn = 1, stop = "tool_calls" },
      { type = "tool_result", turn = 1, id = "c1", name = "add", ok = true, output = { total = 1 } },
      text(2, "1."), { type = "turn_end", turn = 2, stop = "stop" }, { type = "finish", ok = true, answer = "1." } },
    { { type = "start" }, { type = "start-step" }, { type = "text-start", id = "t1" },
      { type = "text-delta", id = "t1", delta = "Adding." }, { type = "text-end", id = "t1" },
      { type = "tool-input-start", toolCallId = "c1", toolName = "add" },
      { type = "tool-input-delta", toolCallId = "c1", inputTextDelta = '{"a":' },
      { type = "tool-input-delta", toolCallId = "c1", inputTextDelta = "1}" },
      { type = "tool-input-available", toolCallId = "c1", toolName = "add", input = { a = 1 } },
      { type = "tool-output-available", toolCallId = "c1", output = { total = 1 } },
      { type = "finish-step" }, { type = "start-step" }, { type = "text-start", id = "t2" },
      { type = "text-delta", id = "t2", delta = "1." }, { type = "text-end", id = "t2" },
      { type = "finish-step" }, { type = "finish", finishReason = "stop" }, "[DONE]" } },
  { "parallel calls with interleaved fragments, a failed one as tool-output-error, a nil output as null",
    { { type = "tool_call_start", turn = 1, id = "a", name = "x" }, { type = "tool_call_start", turn = 1, id = "b", name = "y" },
      { type = "tool_call_delta", turn = 1, id = "b", text = "{}" }, { type = "tool_call_delta", turn = 1, id = "a", text = "{}" },
      { type = "tool_call_delta", turn = 1, id = "zz", text = "{}" },
      { type = "tool_call", turn = 1, id = "b", name = "y", input = {} }, { type = "tool_call", turn = 1, id = "a", name = "x", input = {} },
      { type = "turn_end", turn = 1, stop = "tool_calls" },
      { type = "tool_result", turn = 1, id = "a", name = "x", ok = false, error = { code = "TOOL_TIMEOUT", message = "x took too long" } },
      { type = "tool_result", turn = 1, id = "b", name = "y", ok = true } },
    { { type = "start" }, { type = "start-step" },
      { type = "tool-input-start", toolCallId = "a", toolName = "x" }, { type = "tool-input-start", toolCallId = "b", toolName = "y" },
      { type = "tool-input-delta", toolCallId = "b", inputTextDelta = "{}" },
      { type = "tool-input-delta", toolCallId = "a", inputTextDelta = "{}" },
      { type = "tool-input-available", toolCallId = "b", toolName = "y", input = {} },
      { type = "tool-input-available", toolCallId = "a", toolName = "x", input = {} },
      { type = "tool-output-error", toolCallId = "a", errorText = "[TOOL_TIMEOUT] x took too long" },
      { type = "tool-output-available", toolCallId = "b", output = null } } },
  { "a retry after text and an unfinished call: both end, the step ends, a data-luma-retry part marks it void",
    { text(1, "Hal"), { type = "tool_call_start", turn = 1, id = "c1", name = "add" },
      { type = "retry", turn = 1, reason = "ASK_TRUNCATED", attempt = 2 }, text(1, "Hello"),
      { type = "turn_end", turn = 1, stop = "stop" }, OK },
    { { type = "start" }, { type = "start-step" }, { type = "text-start", id = "t1" },
      { type = "text-delta", id = "t1", delta = "Hal" }, { type = "text-end", id = "t1" },
      { type = "tool-input-start", toolCallId = "c1", toolName = "add" },
      { type = "tool-input-error", toolCallId = "c1", toolName = "add",
        errorText = "void: the turn is asked again (ASK_TRUNCATED)" },
      { type = "finish-step" }, { type = "data-luma-retry", data = { turn = 1, reason = "ASK_TRUNCATED", attempt = 2 } },
      { type = "start-step" }, { type = "text-start", id = "t2" }, { type = "text-delta", id = "t2", delta = "Hello" },
      { type = "text-end", id = "t2" }, { type = "finish-step" }, { type = "finish", finishReason = "stop" }, "[DONE]" } },
  { "a retry of a turn that showed nothing sends nothing",
    { text(1, "A"), { type = "turn_end", turn = 1, stop = "tool_calls" }, { type = "retry", turn = 2, reason = "HTTP_502", attempt = 2 } },
    { { type = "start" }, { type = "start-step" }, { type = "text-start", id = "t1" },
      { type = "text-delta", id = "t1", delta = "A" }, { type = "text-end", id = "t1" } } },
  { "a failed ask: its parts end, error, finish-step, finish error",
    { text(1, "Hal"), { type = "tool_call", turn = 1, id = "c1", name = "add", input = { a = 1 } },
      { type = "finish", ok = false, error = { code = "ASK_CANCELLED", message = "the ask was cancelled" } } },
    { { type = "start" }, { type = "start-step" }, { type = "text-start", id = "t1" },
      { type = "text-delta", id = "t1", delta = "Hal" }, { type = "text-end", id = "t1" },
      { type = "tool-input-available", toolCallId = "c1", toolName = "add", input = { a = 1 } },
      { type = "tool-output-error", toolCallId = "c1", errorText = "[ASK_CANCELLED] the ask was cancelled" },
      { type = "error", errorText = "[ASK_CANCELLED] the ask was cancelled" }, { type = "finish-step" },
      { type = "finish", finishReason = "error" }, "[DONE]" } },
  { "an answer no delta showed comes as text; a typed answer as a data-luma-answer part",
    { { type = "turn_end", turn = 1, stop = "stop" }, { type = "finish", ok = true, answer = "Plain." } },
    { { type = "start" }, { type = "start-step" }, { type = "text-start", id = "t1" },
      { type = "text-delta", id = "t1", delta = "Plain." }, { type = "text-end", id = "t1" }, { type = "finish-step" },
      { type = "finish", finishReason = "stop" }, "[DONE]" } },
  { "a typed answer as a data-luma-answer part after the text",
    { text(1, '{"n":1}'), { type = "turn_end", turn = 1, stop = "stop" }, { type = "finish", ok = true, answer = { n = 1 } } },
    { { type = "start" }, { type = "start-step" }, { type = "text-start", id = "t1" },
      { type = "text-delta", id = "t1", delta = '{"n":1}' }, { type = "text-end", id = "t1" },
      { type = "data-luma-answer", data = { n = 1 } }, { type = "finish-step" },
      { type = "finish", finishReason = "stop" }, "[DONE]" } },
  { "a call the provider ran as a provider-executed tool part in its turn's step: completed, failed, failed without a message",
    { text(1, "Searching."),
      { type = "provider_tool", turn = 1, id = "srvtoolu_1", name = "web_search", status = "completed" },
      { type = "provider_tool", turn = 1, id = "srvtoolu_2", name = "web_fetch", status = "failed",
        error = { code = "url_not_allowed", message = "the URL is not allowed" } },
      { type = "provider_tool", turn = 1, id = "ci_3", name = "code_execution", status = "failed" },
      { type = "usage", turn = 1, input_tokens = 3, output_tokens = 4 },
      { type = "turn_end", turn = 1, stop = "stop" },
      { type = "retry", turn = 1, reason = "HTTP_502", attempt = 2 }, OK },
    { { type = "start" }, { type = "start-step" }, { type = "text-start", id = "t1" },
      { type = "text-delta", id = "t1", delta = "Searching." }, { type = "text-end", id = "t1" },
      { type = "tool-input-available", toolCallId = "srvtoolu_1", toolName = "web_search", input = {}, providerExecuted = true },
      { type = "tool-output-available", toolCallId = "srvtoolu_1", output = null, providerExecuted = true },
      { type = "tool-input-available", toolCallId = "srvtoolu_2", toolName = "web_fetch", input = {}, providerExecuted = true },
      { type = "tool-output-error", toolCallId = "srvtoolu_2", errorText = "[url_not_allowed] the URL is not allowed",
        providerExecuted = true },
      { type = "tool-input-available", toolCallId = "ci_3", toolName = "code_execution", input = {}, providerExecuted = true },
      { type = "tool-output-error", toolCallId = "ci_3", errorText = "[failed] code_execution failed at the provider",
        providerExecuted = true },
      { type = "finish-step" }, { type = "finish", finishReason = "stop" }, "[DONE]" } },
  { "usage sends nothing by default; unknown types are skipped; nothing after the finish",
    { { type = "usage", turn = 1, input_tokens = 3, output_tokens = 4 }, { type = "thinking_hard", turn = 1 },
      { type = "finish", ok = true, answer = "" }, text(1, "late") },
    { { type = "start" }, { type = "finish", finishReason = "stop" }, "[DONE]" } },
}

describe("luma.uistream: an ask's events as UI message chunks", function()
  for _, case in ipairs(CASES) do
    it(case[1], function()
      assert.are.same(case[3], chunks_of(case[2]))
    end)
  end

  it("sends usage totals as message metadata when asked, and the message id in start", function()
    assert.are.same({ { type = "start", messageId = "m-1" }, { type = "start-step" },
      { type = "message-metadata", messageMetadata = { usage = { inputTokens = 3, outputTokens = 4 } } },
      { type = "message-metadata", messageMetadata = { usage = { inputTokens = 8, outputTokens = 10 } } } },
      chunks_of({ { type = "usage", turn = 1, input_tokens = 3, output_tokens = 4 },
        { type = "usage", turn = 1, input_tokens = 5, output_tokens = 6 } }, { message_id = "m-1", metadata = true }))
  end)

  it("frames each chunk as an SSE data line, and ends a cut stream as a failed one", function()
    local enc = uistream.new()
    assert.are.equal('data: {"type":"start"}\n\ndata: {"type":"start-step"}\n\ndata: {"id":"t1","type":"text-start"}\n\n' ..
      'data: {"delta":"a\\nb","id":"t1","type":"text-delta"}\n\n', enc:push(text(1, "a\nb")))
    assert.are.equal('data: {"id":"t1","type":"text-end"}\n\n' ..
      'data: {"errorText":"[ASK_TRUNCATED] the ask\'s events ended before its finish","type":"error"}\n\n' ..
      'data: {"type":"finish-step"}\n\ndata: {"finishReason":"error","type":"finish"}\n\ndata: [DONE]\n\n', enc:close())
    assert.are.equal("", enc:close())
    assert.are.equal("", enc:push(text(1, "more")))
  end)
end)

-- every kind of event in one stream
local ALL = {
  { type = "reasoning_delta", turn = 1, text = "The user wants a sum." },
  text(1, "Let me "), text(1, "add."),
  { type = "tool_call_start", turn = 1, id = "c1", name = "add" },
  { type = "tool_call_start", turn = 1, id = "c2", name = "fails" },
  { type = "tool_call_delta", turn = 1, id = "c1", text = '{"a": 2, ' },
  { type = "tool_call_delta", turn = 1, id = "c2", text = '{"why": "x"}' },
  { type = "tool_call_delta", turn = 1, id = "c1", text = '"b": 3}' },
  { type = "tool_call", turn = 1, id = "c1", name = "add", input = { a = 2, b = 3 } },
  { type = "tool_call", turn = 1, id = "c2", name = "fails", input = { why = "x" } },
  { type = "usage", turn = 1, input_tokens = 10, output_tokens = 5 },
  { type = "turn_end", turn = 1, stop = "tool_calls" },
  { type = "tool_result", turn = 1, id = "c1", name = "add", ok = true, output = { total = 5 } },
  { type = "tool_result", turn = 1, id = "c2", name = "fails", ok = false, error = { code = "NOPE", message = "it fails: x" } },
  text(2, "The sum is"),
  { type = "retry", turn = 2, reason = "ASK_TRUNCATED", attempt = 2 },
  { type = "refusal_delta", turn = 2, text = "" },
  text(2, "The sum "), text(2, "is 5 ✓."),
  { type = "turn_end", turn = 2, stop = "stop" },
  { type = "finish", ok = true, answer = "The sum is 5 ✓." },
}

local function parts_of(message, kind)
  local out = {}
  for _, p in ipairs(message.parts) do
    if p.type == kind then out[#out + 1] = p end
  end
  return out
end

describe("the ai package's own reader of luma.uistream's output", function()
  setup(ensure_ai)

  it("takes every chunk, rebuilds the assistant's message, and ends ready with the finish reason", function()
    local r = ai_chat("-", uistream.encode(ALL, { message_id = "answer-1", metadata = true }))
    assert.are.same({}, r.invalid)
    assert.are.same({}, r.readErrors)
    assert.are.equal("ready", r.status)
    assert.is_nil(r.error)
    assert.are.equal("stop", r.finishReason)
    assert.is_true(r.done)
    local m = r.messages[2]
    assert.are.equal("assistant", m.role)
    assert.are.equal("answer-1", m.id)
    assert.are.same({ usage = { inputTokens = 10, outputTokens = 5 } }, m.metadata)
    local types = {}
    for _, p in ipairs(m.parts) do types[#types + 1] = p.type end
    assert.are.same({ "step-start", "reasoning", "text", "tool-add", "tool-fails", "step-start", "text", "data-luma-retry",
      "step-start", "text" }, types)
    assert.are.same({ "The user wants a sum.", "done" }, { m.parts[2].text, m.parts[2].state })
    assert.are.same({ "Let me add.", "done" }, { m.parts[3].text, m.parts[3].state })
    assert.are.same({ "c1", "output-available", { a = 2, b = 3 }, { total = 5 } },
      { m.parts[4].toolCallId, m.parts[4].state, m.parts[4].input, m.parts[4].output })
    assert.are.same({ "c2", "output-error", { why = "x" }, "[NOPE] it fails: x" },
      { m.parts[5].toolCallId, m.parts[5].state, m.parts[5].input, m.parts[5].errorText })
    assert.are.equal("The sum is", m.parts[7].text)
    assert.are.same({ turn = 2, reason = "ASK_TRUNCATED", attempt = 2 }, m.parts[8].data)
    assert.are.same({ "The sum is 5 ✓.", "done" }, { m.parts[10].text, m.parts[10].state })
    -- readUIMessageStream rebuilds the same message
    assert.are.same(m, r.read)
  end)

  it("takes the provider's calls as provider-executed tool parts, which it does not run", function()
    local r = ai_chat("-", uistream.encode({ text(1, "Looking it up."),
      { type = "provider_tool", turn = 1, id = "srvtoolu_1", name = "web_search", status = "completed" },
      { type = "provider_tool", turn = 1, id = "srvtoolu_2", name = "web_fetch", status = "failed",
        error = { code = "url_not_allowed", message = "the URL is not allowed" } },
      text(1, "Found it."), { type = "turn_end", turn = 1, stop = "stop" },
      { type = "finish", ok = true, answer = "Looking it up.Found it." } }, { message_id = "answer-p" }))
    assert.are.same({}, r.invalid)
    assert.are.same({}, r.readErrors)
    assert.are.equal("ready", r.status, tostring(r.error))
    local m = r.messages[2]
    local types = {}
    for _, p in ipairs(m.parts) do types[#types + 1] = p.type end
    assert.are.same({ "step-start", "text", "tool-web_search", "tool-web_fetch", "text" }, types)
    local search, fetch = m.parts[3], m.parts[4]
    assert.are.same({ "srvtoolu_1", "output-available", true, {} },
      { search.toolCallId, search.state, search.providerExecuted, search.input })
    assert.are.same({ "srvtoolu_2", "output-error", true, "[url_not_allowed] the URL is not allowed" },
      { fetch.toolCallId, fetch.state, fetch.providerExecuted, fetch.errorText })
    assert.are.same(m, r.read)
  end)

  it("shows a failed ask as useChat's error, with the code and message", function()
    local r = ai_chat("-", uistream.encode({ text(1, "Hal"),
      { type = "finish", ok = false, error = { code = "ASK_PROVIDER_ERROR", message = "the provider answered 500" } } }))
    assert.are.same({}, r.invalid)
    assert.are.equal("error", r.status)
    assert.are.equal("[ASK_PROVIDER_ERROR] the provider answered 500", r.error)
    assert.is_true(r.isError)
    assert.are.equal("Hal", r.messages[2].parts[2].text)
    assert.are.same({ "[ASK_PROVIDER_ERROR] the provider answered 500" }, r.readErrors)
  end)

  it("rejects what luma.uistream never sends: a delta without its start (the reader is strict)", function()
    local r = ai_chat("-", 'data: {"type":"start"}\n\ndata: {"type":"text-delta","id":"t9","delta":"x"}\n\ndata: [DONE]\n\n')
    assert.are.equal("error", r.status)
    assert.matches('missing text part with ID "t9"', r.error)
    r = ai_chat("-", 'data: {"type":"start"}\n\ndata: {"type":"luma-thing"}\n\ndata: [DONE]\n\n')
    assert.are.equal("error", r.status)
    assert.are.equal(1, #r.invalid)
  end)
end)

describe("luma.nginx under a real nginx, read by the ai package over HTTP", function()
  local nginx, server

  -- spec/fixtures/uistream: scripted asks, and a real ask of its
  -- program.luma (through libluma) whose model is the mock provider
  setup(function()
    ensure_ai()
    server = mock.start()
    local dir = h.tmpname("-uistream")
    -- (cp without the sanitizers' preloaded runtime, as helpers.copy_example)
    local status, out, err = h.sh("env -u LD_PRELOAD cp -r " .. h.quote(h.root .. "/spec/fixtures/uistream") .. " " .. h.quote(dir))
    assert(status == 0, "cannot copy spec/fixtures/uistream: " .. out .. err)
    h.write(dir .. "/program.luma", (h.read(dir .. "/program.luma"):gsub("MOCK_URL", server.url)))
    nginx = h.nginx(dir)
  end)
  teardown(function()
    if nginx then nginx:stop() end
    if server then server:stop() end
  end)

  -- -> body, status
  local function post(url, body)
    local http, ltn12 = require "socket.http", require "ltn12"
    local out = {}
    local _, status = http.request { url = url, method = "POST", source = ltn12.source.string(body),
      headers = { ["content-length"] = #body }, sink = ltn12.sink.table(out) }
    return table.concat(out), status
  end

  local function check_sum(r, id)
    assert.are.same({}, r.invalid, nginx:log())
    assert.are.equal("ready", r.status, tostring(r.error) .. "\n" .. nginx:log())
    assert.are.equal("stop", r.finishReason)
    assert.are.equal("text/event-stream", r.headers["content-type"])
    assert.are.equal("v1", r.headers["x-vercel-ai-ui-message-stream"])
    assert.are.equal("no", r.headers["x-accel-buffering"])
    local m = r.messages[2]
    assert.are.equal(id, m.id)
    local texts = parts_of(m, "text")
    assert.are.same({ "Let me add them.", "The sum is 5." }, { texts[1].text, texts[2].text })
    local call = parts_of(m, "tool-add")[1]
    assert.are.same({ "output-available", { a = 2, b = 3 }, { total = 5 } }, { call.state, call.input, call.output })
    assert.are.same(m, r.read)
  end

  -- the text appeared piece by piece as the events came, 50 ms apart
  local function check_streamed(r, whole, ms)
    local first, last
    for _, u in ipairs(r.updates) do
      if u.text ~= "" and not first then first = u.ms end
      if u.text == (whole or "Let me add them.The sum is 5.") and not last then last = u.ms end
    end
    assert.is_truthy(first and last, json.encode(r.updates))
    -- (the events are 50 ms apart: 550 ms from the first text to the last; 8 ms when not streamed)
    assert.is_true(last - first >= (ms or 300), string.format("the text came in %d ms: not streamed", last - first))
  end

  for _, case in ipairs {
    { "iterator", "an iterator of events", "answer-1" },
    { "ask", "an ask's events()", "answer-2" },
    { "callback", "on_event called from the ask's own light thread", "answer-3" },
  } do
    it("streams " .. case[2] .. " one event per 50 ms to useChat, and answers another request meanwhile", function()
      -- (the second request goes once the first text has shown)
      local r = ai_chat(h.quote(nginx.url .. "/api/" .. case[1]) .. " --ping " .. h.quote(nginx.url .. "/ping"))
      check_sum(r, case[3])
      check_streamed(r)
      assert.are.equal("pong\n", r.ping.text)
      assert.is_false(r.ping.streamDone, string.format("the second request was answered at %d ms, after the stream's end (%d ms)",
        r.ping.at, r.ms))
      assert.is_true(r.ping.ms < h.by_instrumentation(250, 500, 1500), "the second request took " .. r.ping.ms .. " ms")
    end)
  end

  -- the worker's ngx.sleep calls so far
  local function sleeps()
    local body, status = require("socket.http").request(nginx.url .. "/api/sleeps")
    assert.are.equal(200, status, nginx:log())
    return tonumber(body)
  end

  -- mock.chat's step streamed, one event per ms
  local function streamed(step, ms)
    step.stream = { delay_ms = ms }
    return step
  end

  it("streams a real ask (the README's snippet) as the provider streams it, woken by the runtime, never polling", function()
    local section = h.read(h.root .. "/README.md"):match("%*%*Serving an ask to a browser's useChat%*%*(.-)\n%*%*")
    assert.is_truthy(section, "the README has no paragraph on serving an ask to useChat")
    local snippet = section:match("```lua\n(.-)```")
    assert.is_truthy(h.read(h.root .. "/spec/fixtures/uistream/app.lua"):find(snippet, 1, true),
      "the README's snippet is not in spec/fixtures/uistream/app.lua")
    -- turn 1 says it adds and calls add; turn 2 answers: each streamed
    -- (Chat Completions' deltas: 4 characters of text, 5 of arguments) one event per 50 ms
    server:reset()
    server:script {
      streamed(mock.chat("Let me add them.", { { "call_1", "add", '{"a": 2, "b": 3}' } }), 50),
      streamed(mock.chat('{"text":"The sum is 5."}'), 50),
    }
    local before = sleeps()
    local r = ai_chat(h.quote(nginx.url .. "/api/chat") .. " --ping " .. h.quote(nginx.url .. "/ping") ..
      " --text 'add two and three'")
    assert.are.same({}, r.invalid, nginx:log())
    assert.are.equal("ready", r.status, tostring(r.error) .. "\n" .. nginx:log())
    assert.are.equal("stop", r.finishReason)
    assert.are.equal("text/event-stream", r.headers["content-type"])
    -- the ask's text, its call with the input the model gave and the output
    -- the handler gave, in a step per turn, and its typed answer
    local m = r.messages[2]
    local types = {}
    for _, p in ipairs(m.parts) do types[#types + 1] = p.type end
    assert.are.same({ "step-start", "text", "tool-add", "step-start", "text", "data-luma-answer" }, types)
    local texts = parts_of(m, "text")
    assert.are.same({ "Let me add them.", '{"text":"The sum is 5."}' }, { texts[1].text, texts[2].text })
    local call = parts_of(m, "tool-add")[1]
    assert.are.same({ "call_1", "output-available", { a = 2, b = 3 }, { total = 5 } },
      { call.toolCallId, call.state, call.input, call.output })
    assert.are.same({ text = "The sum is 5." }, parts_of(m, "data-luma-answer")[1].data)
    -- (useChat sent no messageId: each reader made one up)
    m.id, r.read.id = nil, nil
    assert.are.same(m, r.read)
    -- what the provider was asked: a stream, useChat's prompt, then the handler's output
    local asked = server:requests()
    assert.are.equal(2, #asked)
    assert.is_true(asked[1].json.stream)
    assert.are.equal("add two and three", asked[1].json.messages[#asked[1].json.messages].content)
    local back = asked[2].json.messages[#asked[2].json.messages]
    assert.are.same({ "tool", "call_1", { total = 5 } }, { back.role, back.tool_call_id, json.decode(back.content) })
    -- the text grew as the provider streamed it (about 20 events, 50 ms apart),
    -- and a request sent meanwhile was answered at once
    check_streamed(r, 'Let me add them.{"text":"The sum is 5."}', 300)
    assert.are.equal("pong\n", r.ping.text)
    assert.is_false(r.ping.streamDone, string.format("the second request was answered at %d ms, after the stream's end (%d ms)",
      r.ping.at, r.ms))
    assert.is_true(r.ping.ms < h.by_instrumentation(250, 500, 1500), "the second request took " .. r.ping.ms .. " ms")
    -- each event woke the request through the runtime's wake socket: no ngx.sleep
    assert.are.equal(before, sleeps())
  end)

  it("answers a body that is not useChat's with a 400 saying what was wrong (the README's snippet)", function()
    local out, status = post(nginx.url .. "/api/chat", "not json")
    assert.are.equal(400, status)
    assert.matches("^the request's body is not a JSON object: ", out)
    out, status = post(nginx.url .. "/api/chat", '{"messages": []}')
    assert.are.equal(400, status)
    assert.are.equal("the request's messages hold no user message\n", out)
  end)

  it("cancels a real ask when the client goes away: its stream from the provider ends at once", function()
    local socket = require "socket"
    -- 400 characters of text in 4-character deltas, one per 50 ms: 5 s
    server:reset()
    server:script { streamed(mock.chat(("word "):rep(80)), 50) }
    local c = assert(socket.connect("127.0.0.1", nginx.port))
    c:settimeout(5)
    local body = '{"messages":[{"role":"user","parts":[{"type":"text","text":"talk"}]}]}'
    c:send("POST /api/kept HTTP/1.1\r\nHost: localhost\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body)
    local line
    repeat line = assert(c:receive("*l")) until line:find('"text-delta"', 1, true)
    local t0 = socket.gettime()
    c:close()
    local state
    for _ = 1, 100 do
      state = post(nginx.url .. "/api/state", "")
      if state:match(" ASK_CANCELLED\n$") then break end
      socket.sleep(0.05)
    end
    -- respond said why it stopped (nginx could not send); the ask ended
    -- cancelled, well before its stream's 5 s
    assert.matches(" nil [^\n]+ ASK_CANCELLED\n$", state, nginx:log())
    local ms = (socket.gettime() - t0) * 1000
    assert.is_true(ms < h.by_instrumentation(1000, 2000, 4000), string.format("the ask ended %.0f ms after the client left", ms))
    assert.are.equal(1, #server:requests())
  end)

  it("sends a failed ask as useChat's error, and a source that raises as one", function()
    local r = ai_chat(h.quote(nginx.url .. "/api/fails"))
    assert.are.same({}, r.invalid)
    assert.are.equal("error", r.status)
    assert.are.equal("[ASK_PROVIDER_ERROR] the provider answered 500", r.error)
    r = ai_chat(h.quote(nginx.url .. "/api/raises"))
    assert.are.same({}, r.invalid)
    assert.are.equal("error", r.status)
    assert.are.equal("[HOST_FAILED] the host's iterator failed", r.error)
    assert.matches("luma.nginx: the ask's events failed: %[HOST_FAILED%]", nginx:log())
  end)

  it("cancels the ask when the client goes away", function()
    local socket = require "socket"
    local c = assert(socket.connect("127.0.0.1", nginx.port))
    c:settimeout(2)
    c:send("POST /api/long HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n")
    local seen = {}
    repeat seen[#seen + 1] = assert(c:receive("*l")) until seen[#seen]:find("word 3 ", 1, true)
    c:close()   -- the stream was still going: 200 events, 20 ms apart
    local state
    for _ = 1, 100 do
      state = post(nginx.url .. "/api/state", "")
      if state:match("^true nil") then break end
      socket.sleep(0.05)
    end
    assert.matches("^true nil ", state)
  end)
end)
