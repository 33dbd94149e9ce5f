-- Streaming asks: a host that listens (on_event, ask:events()) gets the
-- ask's events as the provider streams them, for every family, through the
-- mock provider (which serves each step as its family's stream when asked).
local luma = require "luma"
local h = require "spec.helpers"
local mock = require "spec.support.mock_provider"

local KEY = "key-test-0123456789"
local decode = luma.json.decode
local null = luma.null

local function now() return require("luma.core").monotonic_ms() end

-- Each family: its model, whether a request asked for a stream, and its
-- whole responses (the mock streams them): text, tool calls, a cut-off.
local families = {}

families.chat = {
  model = 'provider: "openai"\n name: "gpt-test"\n base_url: "%s/v1"',
  asked = function(r)
    return r.path == "/v1/chat/completions" and r.json.stream == true and r.json.stream_options.include_usage == true
  end,
  plain = function(r) return r.path == "/v1/chat/completions" and r.json.stream == nil end,
  text = function(s)
    return { json = { id = "c1", model = "gpt-test",
      choices = { { index = 0, message = { role = "assistant", content = s }, finish_reason = "stop" } },
      usage = { prompt_tokens = 3, completion_tokens = 2 } } }
  end,
  calls = function(list)
    local tc = {}
    for i, c in ipairs(list) do tc[i] = { id = c[1], type = "function", ["function"] = { name = c[2], arguments = c[3] } } end
    return { json = { choices = { { index = 0, message = { role = "assistant", content = null, tool_calls = tc },
                                    finish_reason = "tool_calls" } }, usage = { prompt_tokens = 3, completion_tokens = 2 } } }
  end,
  length = function(s)
    return { json = { choices = { { index = 0, message = { role = "assistant", content = s }, finish_reason = "length" } } } }
  end,
}

families.azure = setmetatable({
  model = 'provider: "azure"\n base_url: "%s"\n deployment: "dep1"\n api_version: "2024-10-21"',
  asked = function(r)
    return r.path == "/openai/deployments/dep1/chat/completions" and r.json.stream == true and
      r.json.stream_options.include_usage == true
  end,
  plain = function(r) return r.path == "/openai/deployments/dep1/chat/completions" and r.json.stream == nil end,
}, { __index = families.chat })

families.responses = {
  model = 'provider: "openai"\n name: "gpt-test"\n api: "responses"\n base_url: "%s/v1"',
  asked = function(r) return r.path == "/v1/responses" and r.json.stream == true end,
  plain = function(r) return r.path == "/v1/responses" and r.json.stream == nil end,
  text = function(s)
    return { json = { id = "resp_1", status = "completed", output = { { type = "message", id = "msg_1", role = "assistant",
      content = { { type = "output_text", text = s } } } }, usage = { input_tokens = 3, output_tokens = 2 } } }
  end,
  calls = function(list)
    local out = { { type = "reasoning", id = "rs_1", summary = setmetatable({}, luma.array_mt), encrypted_content = "opaque-1" } }
    for _, c in ipairs(list) do
      out[#out + 1] = { type = "function_call", id = "fc_" .. c[1], call_id = c[1], name = c[2], arguments = c[3] }
    end
    return { json = { id = "resp_2", status = "completed", output = out, usage = { input_tokens = 3, output_tokens = 2 } } }
  end,
  length = function(s)
    return { json = { id = "resp_3", status = "incomplete", incomplete_details = { reason = "max_output_tokens" },
      output = { { type = "message", id = "msg_3", content = { { type = "output_text", text = s } } } } } }
  end,
}

-- Azure's v1 path: the deployment as the body's model, no api-version
families.azure_v1 = setmetatable({
  model = 'provider: "azure"\n base_url: "%s/"\n deployment: "dep1"',
  asked = function(r)
    return r.path == "/openai/v1/chat/completions" and r.json.model == "dep1" and r.json.stream == true and
      r.json.stream_options.include_usage == true
  end,
  plain = function(r) return r.path == "/openai/v1/chat/completions" and r.json.stream == nil end,
}, { __index = families.chat })

-- Azure's Responses API, on its v1 path only
families.azure_responses = setmetatable({
  model = 'provider: "azure"\n base_url: "%s"\n deployment: "dep1"\n api_version: "2024-10-21"\n api: "responses"',
  asked = function(r) return r.path == "/openai/v1/responses" and r.json.model == "dep1" and r.json.stream == true end,
  plain = function(r) return r.path == "/openai/v1/responses" and r.json.stream == nil end,
}, { __index = families.responses })

families.anthropic = {
  model = 'provider: "anthropic"\n name: "claude-test"\n base_url: "%s"',
  asked = function(r) return r.path == "/v1/messages" and r.json.stream == true end,
  plain = function(r) return r.path == "/v1/messages" and r.json.stream == nil end,
  text = function(s)
    return { json = { id = "msg_1", type = "message", role = "assistant", content = { { type = "text", text = s } },
                      stop_reason = "end_turn", usage = { input_tokens = 3, output_tokens = 2 } } }
  end,
  calls = function(list)
    local content = { { type = "text", text = "Let me use the tools." } }
    for _, c in ipairs(list) do content[#content + 1] = { type = "tool_use", id = c[1], name = c[2], input = decode(c[3]) } end
    return { json = { id = "msg_2", type = "message", role = "assistant", content = content, stop_reason = "tool_use",
                      usage = { input_tokens = 3, output_tokens = 2 } } }
  end,
  length = function(s)
    return { json = { id = "msg_3", type = "message", role = "assistant", content = { { type = "text", text = s } },
                      stop_reason = "max_tokens", usage = { input_tokens = 3, output_tokens = 2 } } }
  end,
}

families.gemini = {
  model = 'provider: "gemini"\n name: "gemini-test"\n base_url: "%s"',
  asked = function(r)
    return r.path == "/v1beta/models/gemini-test:streamGenerateContent" and r.query == "alt=sse"
  end,
  plain = function(r) return r.path == "/v1beta/models/gemini-test:generateContent" end,
  text = function(s)
    return { json = { candidates = { { content = { role = "model", parts = { { text = s } } }, finishReason = "STOP" } },
                      usageMetadata = { promptTokenCount = 3, candidatesTokenCount = 2 } } }
  end,
  calls = function(list)
    local parts = {}
    for i, c in ipairs(list) do
      parts[i] = { functionCall = { name = c[2], args = decode(c[3]) } }
      if i == 1 then parts[i].thoughtSignature = "sig-" .. c[1] end
    end
    return { json = { candidates = { { content = { role = "model", parts = parts }, finishReason = "STOP" } },
                      usageMetadata = { promptTokenCount = 3, candidatesTokenCount = 2 } } }
  end,
  length = function(s)
    return { json = { candidates = { { content = { role = "model", parts = { { text = s } } }, finishReason = "MAX_TOKENS" } } } }
  end,
  no_ids = true,
}

local SOURCE = [[
schema Sum { sum: int }
schema Answer { total: int }
tool add(a: int, b: int) -> Sum { }
model M { %s
  api_key_env: "LUMA_TEST_KEY"
  retries: %d%s }
agent A { model: M
  tools: [add]
  fn run(x: int) -> Answer { ask "Add {x} and 2" -> Answer } }
]]

local function with(steps, opts)
  for _, s in ipairs(steps) do
    for k, v in pairs(opts) do s[k] = v end
  end
  return steps
end

-- The events' text of a type joined, and the other events' types in order.
local function shape(events)
  local text, types = {}, {}
  for _, ev in ipairs(events) do
    if ev.type:match("_delta$") then
      local key = ev.type .. (ev.id and (":" .. ev.id) or "")
      text[key] = (text[key] or "") .. ev.text
      if types[#types] ~= ev.type then types[#types + 1] = ev.type end
    else
      types[#types + 1] = ev.type
    end
  end
  return text, types
end

local function find_all(events, type)
  local out = {}
  for _, ev in ipairs(events) do if ev.type == type then out[#out + 1] = ev end end
  return out
end

for _, name in ipairs { "chat", "azure", "azure_v1", "responses", "azure_responses", "anthropic", "gemini" } do
  local f = families[name]
  describe("a streamed ask with " .. name, function()
    local server, telemetry

    setup(function() server = mock.start() end)
    teardown(function() if server then server:stop() end end)
    before_each(function() server:reset() end)

    local function program(opts)
      opts = opts or {}
      local p = assert(luma.compile(SOURCE:format(f.model:format(server.url), opts.retries or 0,
        opts.no_stream and "\n  stream: false" or "")))
      p:register("add", function(i) return { sum = i.a + i.b } end)
      telemetry = {}
      p:configure {
        lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end,
        on_event = function(e) telemetry[#telemetry + 1] = e end,
      }
      return p
    end

    -- agent:ask with on_event -> the answer (or the error), the events
    local function ask(p, prompt)
      local events = {}
      local ok, v = pcall(function()
        return p:agent("A"):ask(prompt or "Add 1 and 2", "Answer", { on_event = function(ev) events[#events + 1] = ev end })
      end)
      return ok, v, events
    end

    it("asks for a stream and gives the text as it comes, then usage, turn_end and finish", function()
      server:script { f.text('{"total":3}') }
      local ok, v, events = ask(program())
      assert.is_true(ok, tostring(v))
      assert.are.same({ total = 3 }, v)
      assert.is_true(f.asked(server:requests()[1]), "the request asked for a stream")
      local deltas = find_all(events, "text_delta")
      assert.is_true(#deltas > 1, "the text came in pieces: " .. #deltas)
      local text, types = shape(events)
      assert.are.equal('{"total":3}', text.text_delta)
      assert.are.same({ "text_delta", "usage", "turn_end", "finish" }, types)
      assert.are.same({ type = "usage", turn = 1, input_tokens = 3, output_tokens = 2 }, find_all(events, "usage")[1])
      assert.are.same({ type = "turn_end", turn = 1, stop = "stop" }, find_all(events, "turn_end")[1])
      assert.are.same({ type = "finish", ok = true, answer = { total = 3 } }, events[#events])
    end)

    it("assembles the answer a non-streamed ask of the same response gives, with the same events", function()
      server:script { f.calls { { "c1", "add", '{"a":1,"b":2}' } }, f.text('{"total":3}') }
      local ok, streamed, events = ask(program())
      assert.is_true(ok, tostring(streamed))
      server:reset()
      server:script { f.calls { { "c1", "add", '{"a":1,"b":2}' } }, f.text('{"total":3}') }
      assert.are.same(streamed, program():agent("A"):call("run", { x = 1 }))
      assert.is_true(f.plain(server:requests()[1]), "not listening: no stream asked for")
      server:reset()
      server:script { f.calls { { "c1", "add", '{"a":1,"b":2}' } }, f.text('{"total":3}') }
      local ok2, whole, whole_events = ask(program { no_stream = true })
      assert.is_true(ok2, tostring(whole))
      assert.are.same(streamed, whole)
      assert.is_true(f.plain(server:requests()[1]), "stream: false: no stream asked for")
      local t1, k1 = shape(events)
      local t2, k2 = shape(whole_events)
      assert.are.same(t1, t2)
      assert.are.same(k1, k2)
    end)

    it("names a tool call as it starts, its argument fragments, the call, then its result", function()
      server:script { f.calls { { "c1", "add", '{"a":1,"b":2}' } }, f.text('{"total":3}') }
      local ok, v, events = ask(program())
      assert.is_true(ok, tostring(v))
      local start, call, result = find_all(events, "tool_call_start")[1], find_all(events, "tool_call")[1],
        find_all(events, "tool_result")[1]
      local id = f.no_ids and "call_1" or "c1"
      assert.are.same({ type = "tool_call_start", turn = 1, id = id, name = "add" }, start)
      assert.are.same({ type = "tool_call", turn = 1, id = id, name = "add", input = { a = 1, b = 2 } }, call)
      assert.are.same({ type = "tool_result", turn = 1, id = id, name = "add", ok = true, output = { sum = 3 } }, result)
      local text = shape(events)
      assert.are.same({ a = 1, b = 2 }, decode(text["tool_call_delta:" .. id]))
      local _, types = shape(events)
      local order = table.concat(types, " ")
      assert.matches("tool_call_start tool_call_delta tool_call .*turn_end tool_result text_delta usage turn_end finish", order)
      assert.are.equal(2, find_all(events, "turn_end")[2].turn)
      assert.are.equal("tool_calls", find_all(events, "turn_end")[1].stop)
    end)

    it("keeps parallel calls apart when their argument fragments interleave", function()
      server:script { f.calls { { "c1", "add", '{"a":10,"b":20}' }, { "c2", "add", '{"a":300,"b":400}' } },
                      f.text('{"total":730}') }
      local ok, v, events = ask(program())
      assert.is_true(ok, tostring(v))
      local calls = find_all(events, "tool_call")
      assert.are.equal(2, #calls)
      assert.are.same({ { a = 10, b = 20 }, { a = 300, b = 400 } }, { calls[1].input, calls[2].input })
      local text = shape(events)
      local id1, id2 = f.no_ids and "call_1" or "c1", f.no_ids and "call_2" or "c2"
      assert.are.same({ a = 10, b = 20 }, decode(text["tool_call_delta:" .. id1]))
      assert.are.same({ a = 300, b = 400 }, decode(text["tool_call_delta:" .. id2]))
      local results = find_all(events, "tool_result")
      assert.are.same({ { sum = 30 }, { sum = 700 } }, { results[1].output, results[2].output })
    end)

    it("reads through keep-alives and events cut into pieces of 3 bytes", function()
      server:script { with({ f.text('{"total":3}') }, { stream = { keepalive = true, piece = 3 } })[1] }
      local ok, v, events = ask(program())
      assert.is_true(ok, tostring(v))
      assert.are.same({ total = 3 }, v)
      assert.are.equal('{"total":3}', (shape(events)).text_delta)
    end)

    it("records the raw event stream, and replays it through the stream parser in pieces: the same events and answer",
      function()
      local rec = h.tmpname(".jsonl")
      finally(function() os.remove(rec) end)
      server:script { f.calls { { "c1", "add", '{"a":1,"b":2}' } }, f.text('{"total":3}') }
      local function with_opts(opts)
        local p = assert(luma.compile(SOURCE:format(f.model:format(server.url), 0, "")))
        p:register("add", function(i) return { sum = i.a + i.b } end)
        p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end,
                      record = opts.record, replay = opts.replay, replay_seed = opts.seed }
        return p
      end
      local ok, live, events = ask(with_opts { record = rec })
      assert.is_true(ok, tostring(live))
      assert.are.same({ total = 3 }, live)
      local fh = assert(io.open(rec))
      local text = fh:read("a")
      fh:close()
      assert.is_nil(text:find(KEY, 1, true), "the key is never written")
      local lines = {}
      for line in text:gmatch("[^\n]+") do lines[#lines + 1] = decode(line) end
      assert.are.equal(2, #lines)
      for i, line in ipairs(lines) do
        assert.are.equal(2, line.version)
        assert.is_true(line.stream, "line " .. i .. " says the request asked for a stream")
        local path, query = line.request.url:match("^https?://[^/]+([^?]*)%??(.*)$")
        assert.is_true(f.asked { path = path, query = query, json = line.request.body })
        assert.are.equal("text/event-stream", line.response.headers["content-type"])
        assert.are.equal("string", type(line.response.body), "the raw stream, as it came")
        assert.matches("data: ", line.response.body, 1, true)
      end
      server:reset()
      local t1, k1 = shape(events)
      for _, seed in ipairs { 1, 7, 12345 } do
        local ok2, v, replayed = ask(with_opts { replay = rec, seed = seed })
        assert.is_true(ok2, tostring(v))
        assert.are.same(live, v)
        local t2, k2 = shape(replayed)
        assert.are.same(t1, t2)
        assert.are.same(k1, k2)
      end
      -- not listening, the recorded streams replay too
      assert.are.same(live, with_opts({ replay = rec }):agent("A"):ask("Add 1 and 2", "Answer"))
      assert.are.equal(0, #server:requests(), "nothing was sent")
    end)

    it("never takes a stream cut before its final event as an answer: ASK_TRUNCATED", function()
      server:script { with({ f.text('{"total":3}') }, { stream = { cut = true } })[1] }
      local ok, err, events = ask(program())
      assert.is_false(ok)
      assert.are.equal("ASK_TRUNCATED", err.code)
      assert.is_nil(find_all(events, "turn_end")[1])
      assert.are.same({ false, "ASK_TRUNCATED" }, { events[#events].ok, events[#events].error.code })
    end)

    it("retries a cut stream after telling the host with a retry event", function()
      server:script { with({ f.text('{"total":9}') }, { stream = { cut = true } })[1], f.text('{"total":3}') }
      local ok, v, events = ask(program { retries = 1 })
      assert.is_true(ok, tostring(v))
      assert.are.same({ total = 3 }, v)
      local retry = find_all(events, "retry")[1]
      assert.is_table(retry, "a retry event")
      assert.are.same({ 1, 2 }, { retry.turn, retry.attempt })
      assert.matches("final event", retry.reason)
      -- what was shown before the retry is void: the text after it is the answer
      local after = {}
      local seen = false
      for _, ev in ipairs(events) do
        if ev.type == "retry" then seen = true elseif seen and ev.type == "text_delta" then after[#after + 1] = ev.text end
      end
      assert.are.equal('{"total":3}', table.concat(after))
    end)

    it("ends with the provider's error sent in the middle of the stream", function()
      server:script { with({ f.text('{"total":3}') },
        { stream = { error = { type = "invalid_request_error", message = "bad thing mid-stream", code = 400 } } })[1] }
      local ok, err, events = ask(program { retries = 2 })
      assert.is_false(ok)
      assert.are.equal("ASK_PROVIDER_ERROR", err.code)
      assert.matches("bad thing mid%-stream", err.message)
      assert.are.equal(1, #server:requests(), "not retryable: asked once")
      assert.is_false(events[#events].ok)
    end)

    it("gives turn_end stop = length and ASK_TRUNCATED for an answer cut at the token limit", function()
      server:script { f.length('{"total":') }
      local ok, err, events = ask(program())
      assert.is_false(ok)
      assert.are.equal("ASK_TRUNCATED", err.code)
      assert.are.equal("length", find_all(events, "turn_end")[1].stop)
    end)

    it("puts ttft_ms, the time to the first delta, in the ask's telemetry", function()
      server:script { with({ f.text('{"total":3}') }, { stream = { delay_ms = 30 } })[1] }
      local ok, v = ask(program())
      assert.is_true(ok, tostring(v))
      local a
      for _, e in ipairs(telemetry) do if e.kind == "ask" then a = e end end
      assert.is_number(a.ttft_ms)
      assert.is_true(a.ttft_ms >= 30 and a.ttft_ms < a.duration_ms,
        ("ttft %d ms, duration %d ms"):format(a.ttft_ms, a.duration_ms))
    end)
  end)
end

describe("a streamed ask", function()
  local server

  setup(function() server = mock.start() end)
  teardown(function() if server then server:stop() end end)
  before_each(function() server:reset() end)

  local function program(extra)
    local p = assert(luma.compile(SOURCE:format(families.chat.model:format(server.url), 0, extra or "")))
    p:register("add", function(i) return { sum = i.a + i.b } end)
    p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end }
    return p
  end

  it("gives a refusal as refusal_delta events and ASK_REFUSED", function()
    server:script { { json = { choices = { { index = 0, finish_reason = "stop",
      message = { role = "assistant", content = null, refusal = "I cannot help with that." } } } } } }
    local events = {}
    local err = h.raised(function()
      return program():agent("A"):ask("x", "Answer", { on_event = function(ev) events[#events + 1] = ev end })
    end)
    assert.are.equal("ASK_REFUSED", err.code)
    local text = {}
    for _, ev in ipairs(events) do if ev.type == "refusal_delta" then text[#text + 1] = ev.text end end
    assert.is_true(#text > 1)
    assert.are.equal("I cannot help with that.", table.concat(text))
  end)

  it("is cancelled mid-stream at once: the transfer stops and the ask ends with ASK_CANCELLED", function()
    server:script { with({ families.chat.text(('{"total":3}'):rep(1) .. (" "):rep(200)) },
      { stream = { delay_ms = 100 } })[1] }
    local a = program():agent("A"):start_ask("x", "Answer", { events = true })
    local t0, first
    for ev in a:events() do
      if ev.type == "text_delta" and not first then
        first = ev
        t0 = now()
        a:cancel()
      end
      if ev.type == "finish" then
        assert.is_false(ev.ok)
        assert.are.equal("ASK_CANCELLED", ev.error.code)
      end
    end
    local ms = now() - t0
    assert.is_table(first)
    assert.is_true(ms < 100, ms .. " ms from the cancel to the end, with 100 ms between events")
    assert.are.equal("ASK_CANCELLED", h.raised(function() return a:result() end).code)
  end)

  it("lets a coroutine host iterate two asks' events at once, each yielding while it waits", function()
    server:script {
      with({ families.chat.text('{"total":1}') }, { stream = { delay_ms = 40 } })[1],
      with({ families.chat.text('{"total":2}') }, { stream = { delay_ms = 40 } })[1],
    }
    local p = program()
    local log, runs = {}, {}
    for i = 1, 2 do
      local a = p:agent("A"):start_ask("x" .. i, "Answer", { events = true })
      runs[i] = coroutine.create(function()
        for ev in a:events() do log[#log + 1] = i .. ":" .. ev.type end
        return a:result()
      end)
    end
    local results, yields = {}, 0
    while not (results[1] and results[2]) do
      for i = 1, 2 do
        if not results[i] then
          local ok, v = coroutine.resume(runs[i])
          assert.is_true(ok, tostring(v))
          if coroutine.status(runs[i]) == "dead" then results[i] = v else yields = yields + 1 end
        end
      end
    end
    -- the mock serves its steps in the order the requests came
    local totals = { results[1].total, results[2].total }
    table.sort(totals)
    assert.are.same({ 1, 2 }, totals)
    assert.is_true(yields > 2, "the iterators yielded while they waited: " .. yields)
    -- the events of the two asks came interleaved, not one ask after the other
    local first2, last1
    for k, e in ipairs(log) do
      if e:sub(1, 1) == "2" and not first2 then first2 = k end
      if e:sub(1, 1) == "1" then last1 = k end
    end
    assert.is_true(first2 < last1, table.concat(log, " "))
  end)

  it("a listener's error cancels the ask and is raised", function()
    server:script { with({ families.chat.text('{"total":3}') }, { stream = { delay_ms = 20 } })[1] }
    local err = h.raised(function()
      return program():agent("A"):ask("x", "Answer", { on_event = function() error("listener broke", 0) end })
    end)
    assert.are.equal("listener broke", err)
  end)

  it("a server that answers a streamed request whole is read whole", function()
    server:script { with({ families.chat.text('{"total":3}') }, { stream = false })[1] }
    local events = {}
    local v = program():agent("A"):ask("x", "Answer", { on_event = function(ev) events[#events + 1] = ev end })
    assert.are.same({ total = 3 }, v)
    assert.is_true(families.chat.asked(server:requests()[1]))
    assert.are.same({ type = "text_delta", turn = 1, text = '{"total":3}' }, events[1])
  end)

  it("reads a recording of version 1, where a streamed exchange was kept whole, listening or not", function()
    local rec = h.tmpname(".jsonl")
    finally(function() os.remove(rec) end)
    server:script { families.chat.calls { { "c1", "add", '{"a":1,"b":2}' } }, families.chat.text('{"total":3}') }
    local function with_opts(opts)
      local p = assert(luma.compile(SOURCE:format(families.chat.model:format(server.url), 0, "")))
      p:register("add", function(i) return { sum = i.a + i.b } end)
      p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end,
                    record = opts.record, replay = opts.replay }
      return p
    end
    local live = {}
    local v = with_opts { record = rec }:agent("A"):ask("x", "Answer", { on_event = function(ev) live[#live + 1] = ev end })
    assert.are.same({ total = 3 }, v)
    assert.is_true(families.chat.asked(server:requests()[1]))
    local f = assert(io.open(rec))
    local lines = {}
    for line in f:lines() do lines[#lines + 1] = decode(line) end
    f:close()
    assert.are.equal(2, #lines)
    -- a version 1 recording of the same exchanges: the requests as not streamed, the responses whole
    server:reset()
    server:script { families.chat.calls { { "c1", "add", '{"a":1,"b":2}' } }, families.chat.text('{"total":3}') }
    os.remove(rec)
    assert.are.same({ total = 3 }, with_opts({ record = rec }):agent("A"):ask("x", "Answer"))
    f = assert(io.open(rec))
    local old = {}
    for line in f:lines() do
      local l = decode(line)
      assert.is_nil(l.stream)
      assert.is_nil(l.request.body.stream)
      old[#old + 1] = luma.json.encode { request = l.request, response = l.response }
    end
    f:close()
    f = assert(io.open(rec, "w"))
    f:write(table.concat(old, "\n"), "\n")
    f:close()
    server:reset()
    -- replayed without listening, then listening: the same answer, no request sent
    assert.are.same({ total = 3 }, with_opts({ replay = rec }):agent("A"):ask("x", "Answer"))
    local replayed = {}
    v = with_opts({ replay = rec }):agent("A"):ask("x", "Answer", { on_event = function(ev) replayed[#replayed + 1] = ev end })
    assert.are.same({ total = 3 }, v)
    assert.are.equal(0, #server:requests())
    local t1, k1 = shape(live)
    local t2, k2 = shape(replayed)
    assert.are.same(t1, t2)
    assert.are.same(k1, k2)
  end)

  it("records a stream cut before its final event as it came, and replays the cut, the retry and the answer", function()
    local rec = h.tmpname(".jsonl")
    finally(function() os.remove(rec) end)
    local cut = families.chat.text('{"total":9}')
    cut.stream = { cut = true }
    server:script { cut, families.chat.text('{"total":3}') }
    local function run(opts)
      local p = assert(luma.compile(SOURCE:format(families.chat.model:format(server.url), 1, "")))
      p:register("add", function(i) return { sum = i.a + i.b } end)
      p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end,
                    record = opts.record, replay = opts.replay }
      local events = {}
      local v = p:agent("A"):ask("x", "Answer", { on_event = function(ev) events[#events + 1] = ev end })
      return v, events
    end
    local v, live = run { record = rec }
    assert.are.same({ total = 3 }, v)
    local lines = {}
    for line in io.lines(rec) do lines[#lines + 1] = decode(line) end
    assert.are.equal(2, #lines)
    assert.is_nil(lines[1].response.body:find("[DONE]", 1, true), "the cut stream, as it came")
    assert.matches("[DONE]", lines[2].response.body, 1, true)
    server:reset()
    local v2, replayed = run { replay = rec }
    assert.are.same(v, v2)
    assert.are.equal(0, #server:requests())
    local t1, k1 = shape(live)
    local t2, k2 = shape(replayed)
    assert.are.same(k1, k2)
    assert.are.same(t1, t2)
    assert.is_table(find_all(replayed, "retry")[1], "the replay retried the cut stream")
  end)

  it("refuses a recording of a later format version, and a replay_seed without a replay", function()
    local rec = h.tmpname(".jsonl")
    finally(function() os.remove(rec) end)
    local f = assert(io.open(rec, "w"))
    f:write('{"version":3,"request":{"method":"POST","url":"x","headers":{},"body":{}},',
            '"response":{"status":200,"headers":{},"body":{}}}\n')
    f:close()
    local p = assert(luma.compile(SOURCE:format(families.chat.model:format(server.url), 0, "")))
    local ok, e = pcall(p.configure, p, { replay = rec })
    assert.is_false(ok)
    assert.matches(rec .. ":1: a recording of format version 3; this luma reads versions 1 to 2", tostring(e.message), 1, true)
    ok, e = pcall(p.configure, p, { replay_seed = 3 })
    assert.is_false(ok)
    assert.matches("'replay_seed' goes with 'replay'", tostring(e), 1, true)
  end)

  it("streams the asks of a method called or started with on_event", function()
    server:script { families.chat.calls { { "c1", "add", '{"a":1,"b":2}' } }, families.chat.text('{"total":3}') }
    local events = {}
    local v = program():agent("A"):call("run", { x = 1 }, { on_event = function(ev) events[#events + 1] = ev end })
    assert.are.same({ total = 3 }, v)
    assert.is_true(families.chat.asked(server:requests()[1]))
    local _, types = shape(events)
    assert.are.same({ "tool_call_start", "tool_call_delta", "tool_call", "usage", "turn_end", "tool_result",
                      "text_delta", "usage", "turn_end", "finish" }, types)
    server:reset()
    server:script { families.chat.text('{"total":5}') }
    events = {}
    local f = program():agent("A"):start("run", { x = 3 }, { on_event = function(ev) events[#events + 1] = ev end })
    assert.is_true(f:wait(10000))
    assert.are.same({ total = 5 }, f:result())
    assert.are.same({ type = "finish", ok = true, answer = { total = 5 } }, events[#events])
  end)

  it("retries a failure before any delta without a retry event, and one after deltas with it", function()
    server:script { { status = 500, json = { error = { message = "boom", type = "server_error" } } },
                    families.chat.text('{"total":3}') }
    local events = {}
    local p = assert(luma.compile(SOURCE:format(families.chat.model:format(server.url), 1, "")))
    p:register("add", function(i) return { sum = i.a + i.b } end)
    p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end }
    assert.are.same({ total = 3 }, p:agent("A"):ask("x", "Answer", { on_event = function(ev) events[#events + 1] = ev end }))
    assert.are.equal(2, #server:requests())
    assert.is_nil(find_all(events, "retry")[1])
    server:reset()
    server:script { with({ families.chat.text('{"total":9}') },
                         { stream = { error = { type = "server_error", message = "overloaded mid-stream" } } })[1],
                    families.chat.text('{"total":3}') }
    events = {}
    assert.are.same({ total = 3 }, p:agent("A"):ask("x", "Answer", { on_event = function(ev) events[#events + 1] = ev end }))
    local retry = find_all(events, "retry")[1]
    assert.is_table(retry)
    assert.matches("overloaded mid%-stream", retry.reason)
  end)

  -- 100 KB of text in 4-byte deltas: more than stream_queue_bytes of events
  local long = '{"total":3' .. (" "):rep(100000) .. '}'

  it("holds a long stream for a host that takes its events late, and gives it every one", function()
    server:script { families.chat.text(long) }
    local a = program():agent("A"):start_ask("x", "Answer", { events = true })
    local parts, n = {}, 0
    while true do
      local ev = a:next_event()
      if ev == nil then
        a:wait_event(5000)
      else
        n = n + 1
        if ev.type == "text_delta" then parts[#parts + 1] = ev.text end
        if ev.type == "finish" then break end
      end
    end
    assert.are.equal(long, table.concat(parts))
    assert.is_true(n > 20000, n .. " events")
    assert.are.same({ total = 3 }, a:result())
  end)

  it("ends with ASK_TIMEOUT at the model's timeout when the host never takes the events", function()
    server:script { families.chat.text(long) }
    local a = program("\n  timeout: 1500"):agent("A"):start_ask("x", "Answer", { events = true })
    local t0 = now()
    assert.is_true(a:wait(10000))
    local ms = now() - t0
    assert.is_true(ms >= 1400 and ms < 5000, ms .. " ms")
    local err = h.raised(function() return a:result() end)
    assert.are.equal("ASK_TIMEOUT", err.code)
    assert.matches("did not take the ask's events", err.message)
    assert.are.equal("text_delta", a:next_event().type)
  end)

  it("starts a call that writes nothing once its arguments are complete, before the turn ends; one that writes waits",
      function()
    local p = assert(luma.compile(([[
schema Sum { sum: int }
schema Answer { total: int }
tool add(a: int, b: int) -> Sum { side_effects: "read" }
tool put(a: int, b: int) -> Sum { side_effects: "write" }
model M { %s
  api_key_env: "LUMA_TEST_KEY" }
agent A { model: M
  tools: [add, put] }
]]):format(families.anthropic.model:format(server.url))))
    local ran = {}
    p:register("add", function(i) ran.add = now() return { sum = i.a + i.b } end)
    p:register("put", function(i) ran.put = now() return { sum = i.a + i.b } end)
    p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end }
    for _, tool in ipairs { "add", "put" } do
      server:reset()
      server:script { with({ families.anthropic.calls { { "c1", tool, '{"a":1,"b":2}' } } }, { stream = { delay_ms = 60 } })[1],
                      families.anthropic.text('{"total":3}') }
      local ended
      local v = p:agent("A"):ask("x", "Answer", { on_event = function(ev)
        if ev.type == "turn_end" and not ended then ended = now() end
      end })
      assert.are.same({ total = 3 }, v)
      if tool == "add" then
        assert.is_true(ran.add < ended, ("ran at %s, the turn ended at %s"):format(ran.add, ended))
      else
        assert.is_true(ran.put >= ended, ("ran at %s, the turn ended at %s"):format(ran.put, ended))
      end
    end
  end)

  it("refuses an on_event that is not a function", function()
    local err = h.raised(function() return program():agent("A"):ask("x", "Answer", { on_event = 3 }) end)
    assert.matches("on_event must be a function", tostring(err))
  end)
end)
