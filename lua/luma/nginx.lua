-- OpenResty: answers the current request with an ask's events as a UI
-- message stream (luma.uistream), the protocol of the Vercel AI SDK's
-- useChat: a browser front-end built on that SDK talks to nginx directly.
--
--   location /api/chat {
--     content_by_lua_block {
--       local stream = require "luma.nginx"
--       local req = stream.request()            -- useChat's POST; req.prompt: the last user text
--       stream.respond(ask)                     -- an ask: for ev in ask:events(ngx)
--                                               -- (luma.ffi: agent:start_ask(req.prompt, "string", { events = true }))
--       -- or stream.respond(iterator | { events })
--       -- or stream.respond_callback(function(on_event)
--       --      return agent:ask(req.prompt, { on_event = on_event })
--       --    end)
--     }
--   }
--
-- Each event is written with ngx.print and flushed with ngx.flush(true): the
-- request's coroutine yields until nginx has handed the bytes to the socket,
-- and the worker serves other requests meanwhile. Nothing here sleeps or
-- polls: waiting for the next event is the source's (a luma.ffi ask's
-- events(ngx) sleeps on an ngx.semaphore that the runtime's wake socket
-- posts, as f:await(ngx) does; respond_callback waits on an ngx.semaphore
-- that on_event posts).
local uistream = require "luma.uistream"

local nginx = {}

-- What useChat POSTs ({ id, messages, trigger, messageId }) -> { prompt = the
-- text of the last user message, messages, id, trigger, message_id, body },
-- or nil and what was wrong with it.
function nginx.request()
  ngx.req.read_body()
  local data = ngx.req.get_body_data()
  if not data then
    local path = ngx.req.get_body_file()
    local f = path and io.open(path, "rb")
    if f then
      data = f:read("*a")
      f:close()
    end
  end
  if not data or data == "" then return nil, "the request has no body: useChat POSTs { id, messages }" end
  local body, err = require("cjson.safe").decode(data)
  if type(body) ~= "table" then return nil, "the request's body is not a JSON object: " .. tostring(err or body) end
  if type(body.messages) ~= "table" then return nil, "the request's body has no messages array" end
  local prompt
  for i = #body.messages, 1, -1 do
    local m = body.messages[i]
    if type(m) == "table" and m.role == "user" then
      local text = {}
      for _, part in ipairs(type(m.parts) == "table" and m.parts or {}) do
        if type(part) == "table" and part.type == "text" and type(part.text) == "string" then text[#text + 1] = part.text end
      end
      prompt = table.concat(text)
      break
    end
  end
  if not prompt then return nil, "the request's messages hold no user message" end
  local function str(v) return type(v) == "string" and v or nil end
  return { prompt = prompt, messages = body.messages, id = str(body.id), trigger = str(body.trigger),
    message_id = str(body.messageId), body = body }
end

-- Headers, status, and an encoder for the request.
local function open(opts)
  opts = opts or {}
  if not ngx.headers_sent then
    ngx.status = opts.status or 200
    for k, v in pairs(uistream.HEADERS) do ngx.header[k] = v end
  end
  return uistream.new { message_id = opts.message_id, json = opts.json, metadata = opts.metadata }
end

-- Writes text and waits until nginx has sent it -> true | nil, err (the client is gone)
local function write(text, wait)
  if text == "" then return true end
  local ok, err = ngx.print(text)
  if not ok then return nil, err end
  ok, err = ngx.flush(wait)
  if not ok then return nil, err end
  return true
end

-- The events of source, one by one: an ask (or anything with :events(),
-- called as source:events(ngx): a luma.ffi ask then sleeps until an event
-- comes, woken by the runtime), an iterator function, or a list.
local function iterate(source)
  if type(source) == "function" then return source end
  if type(source) == "table" and type(source.events) == "function" then
    local f, s, c = source:events(ngx)
    return function()
      local ev = f(s, c)
      c = ev
      return ev
    end
  end
  if type(source) == "table" then
    local i = 0
    return function()
      i = i + 1
      return source[i]
    end
  end
  error("luma.nginx.respond: an ask, an iterator of events or a list of events expected, got " .. type(source), 3)
end

-- Answers the request with source's events (see above). opts: status (200),
-- message_id, json, metadata (as luma.uistream.new). -> true, or nil and why
-- (the client went away: the source's cancel() is called when it has one;
-- the source raised: its error ends the stream, as a failed finish does).
function nginx.respond(source, opts)
  local next_event = iterate(source)
  local enc = open(opts)
  while true do
    local ok, ev = pcall(next_event)
    if not ok then
      ngx.log(ngx.ERR, "luma.nginx: the ask's events failed: ", uistream.error_text(ev))
      write(enc:close(ev), true)
      return nil, ev
    end
    if ev == nil then break end
    local sent, err = write(enc:push(ev), true)
    if not sent then
      if type(source) == "table" and type(source.cancel) == "function" then pcall(source.cancel, source) end
      return nil, err
    end
    if enc.done then return true end
  end
  local sent, err = write(enc:close(), true)
  if not sent then return nil, err end
  return true
end

-- Answers the request with the events that start(on_event) delivers to
-- on_event. start runs in a light thread (ngx.thread.spawn); on_event only
-- queues the event and posts a semaphore, so it may be called from anywhere
-- in the worker, a callback that cannot yield included; the request's thread
-- writes. When start returns without a finish event, its return value is the
-- answer (an error it raises, the failure). Once the client is gone,
-- on_event returns false and the light thread is killed. -> as respond.
function nginx.respond_callback(start, opts)
  if type(start) ~= "function" then
    error("luma.nginx.respond_callback: a function(on_event) expected, got " .. type(start), 2)
  end
  local semaphore = require "ngx.semaphore"
  local sem = semaphore.new()
  local queue, head, tail, gone = {}, 1, 0, false
  local function push(ev)
    tail = tail + 1
    queue[tail] = ev
    sem:post(1)
  end
  local function on_event(ev)
    if gone then return false end
    push(ev)
    return true
  end
  local thread = ngx.thread.spawn(function()
    local ok, answer = pcall(start, on_event)
    if ok then push { type = "finish", ok = true, answer = answer }
    else push { type = "finish", ok = false, error = answer } end
  end)
  local enc = open(opts)
  while not enc.done do
    if head > tail then
      local waited, err = sem:wait(3600)
      if not waited and err ~= "timeout" then
        ngx.log(ngx.ERR, "luma.nginx: waiting for the ask's events: ", err)
      end
    else
      local ev = queue[head]
      queue[head] = nil
      head = head + 1
      local sent, err = write(enc:push(ev), true)
      if not sent then
        gone = true
        ngx.thread.kill(thread)
        return nil, err
      end
    end
  end
  return true
end

return nginx
