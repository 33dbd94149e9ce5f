-- ask against every provider family (PROVIDERS.md): the same behaviours,
-- each family's wire format, through the mock provider.
local luma = require "luma"
local socket = require "socket"
local h = require "spec.helpers"
local mock = require "spec.support.mock_provider"

local KEY = "key-test-0123456789"
local decode = luma.json.decode

local function find(list, pred)
  for _, v in ipairs(list or {}) do if pred(v) then return v end end
end

-- Each family: its model declaration, where requests go and how they are
-- authenticated, how the mock answers (text, calls, usage), and how a
-- request shows the tool results, the forced tool and the answer format.
local families = {}

families.openai = {
  model = 'provider: "openai"\n name: "gpt-test"\n base_url: "%s/v1"',
  path = "/v1/chat/completions",
  auth = function(hd) return hd.authorization == "Bearer " .. KEY end,
  text = function(s)
    return { json = { choices = { { index = 0, message = { role = "assistant", content = s }, finish_reason = "stop" } },
                      usage = { prompt_tokens = 3, completion_tokens = 2 } } }
  end,
  calls = function(list)
    local tc = {}
    for i, c in ipairs(list) do tc[i] = { id = c[1], type = "function", ["function"] = { name = c[2], arguments = c[3] } } end
    return { json = { choices = { { index = 0, message = { role = "assistant", content = luma.null, tool_calls = tc },
                                    finish_reason = "tool_calls" } } } }
  end,
  results = function(req)
    local out = {}
    for _, m in ipairs(req.messages) do
      if m.role == "tool" then out[#out + 1] = { id = m.tool_call_id, value = decode(m.content) } end
    end
    return out
  end,
  forced = function(req) return type(req.tool_choice) == "table" and req.tool_choice["function"].name or nil end,
  strict = function(req) return req.response_format ~= nil and req.response_format.type == "json_schema" end,
  last_user = function(req) return req.messages[#req.messages].content end,
  truncated = function() return { json = { choices = { { index = 0, message = { role = "assistant", content = '{"total":' }, finish_reason = "length" } } } } end,
  empty = function() return { json = { choices = { { index = 0, message = { role = "assistant", content = luma.null }, finish_reason = "stop" } } } } end,
  wraps = true,   -- strict mode takes only an object at the root: a union answer comes as {"answer": ...}
}

families.azure = setmetatable({
  model = 'provider: "azure"\n base_url: "%s"\n deployment: "dep1"\n api_version: "2024-10-21"',
  path = "/openai/deployments/dep1/chat/completions",
  query = "api-version=2024-10-21",
  auth = function(hd) return hd["api-key"] == KEY and hd.authorization == nil end,
}, { __index = families.openai })

families.azure_v1 = setmetatable({
  model = 'provider: "azure"\n base_url: "%s/"\n deployment: "dep1"',
  path = "/openai/v1/chat/completions",
  body_model = "dep1",
  auth = function(hd) return hd["api-key"] == KEY end,
}, { __index = families.openai })

families.responses = {
  model = 'provider: "openai"\n name: "gpt-test"\n api: "responses"\n base_url: "%s/v1"',
  path = "/v1/responses",
  auth = function(hd) return hd.authorization == "Bearer " .. KEY end,
  text = function(s)
    return { json = { status = "completed", output = { { type = "message", role = "assistant",
      content = { { type = "output_text", text = s } } } }, usage = { input_tokens = 3, output_tokens = 2 } } }
  end,
  calls = function(list)
    local out = { { type = "reasoning", id = "rs_1", summary = {}, encrypted_content = "opaque-1" } }
    for _, c in ipairs(list) do
      out[#out + 1] = { type = "function_call", id = "fc_" .. c[1], call_id = c[1], name = c[2], arguments = c[3] }
    end
    return { json = { status = "completed", output = out } }
  end,
  results = function(req)
    local out = {}
    for _, item in ipairs(type(req.input) == "table" and req.input or {}) do
      if item.type == "function_call_output" then out[#out + 1] = { id = item.call_id, value = decode(item.output) } end
    end
    return out
  end,
  forced = function(req) return type(req.tool_choice) == "table" and req.tool_choice.name or nil end,
  strict = function(req) return req.text ~= nil and req.text.format.type == "json_schema" end,
  last_user = function(req)
    local last = req.input[#req.input]
    return type(last.content) == "string" and last.content or last.content[1].text
  end,
  truncated = function() return { json = { status = "incomplete", incomplete_details = { reason = "max_output_tokens" },
    output = { { type = "message", content = { { type = "output_text", text = '{"total":' } } } } } } end,
  empty = function() return { json = { status = "completed", output = setmetatable({}, luma.array_mt) } } end,
  wraps = true,
}

-- Azure's Responses API is on its v1 path only, with the deployment as the
-- body's model, even when the model names an api_version (which is chat's)
families.azure_responses = setmetatable({
  model = 'provider: "azure"\n base_url: "%s"\n deployment: "dep1"\n api_version: "2024-10-21"\n api: "responses"',
  path = "/openai/v1/responses",
  body_model = "dep1",
  auth = function(hd) return hd["api-key"] == KEY and hd.authorization == nil end,
}, { __index = families.responses })

families.anthropic = {
  model = 'provider: "anthropic"\n name: "claude-test"\n base_url: "%s"',
  path = "/v1/messages",
  auth = function(hd) return hd["x-api-key"] == KEY and hd["anthropic-version"] == "2023-06-01" end,
  text = function(s)
    return { json = { type = "message", role = "assistant", content = { { type = "text", text = s } },
                      stop_reason = "end_turn", usage = { input_tokens = 3, output_tokens = 2 } } }
  end,
  calls = function(list)
    local content = { { type = "text", text = "Let me use the tools." } }
    for _, c in ipairs(list) do
      local ok, input = pcall(decode, c[3])
      content[#content + 1] = { type = "tool_use", id = c[1], name = c[2], input = ok and input or c[3] }
    end
    return { json = { type = "message", role = "assistant", content = content, stop_reason = "tool_use" } }
  end,
  results = function(req)
    local out = {}
    local last = req.messages[#req.messages]
    if last.role ~= "user" or type(last.content) ~= "table" then return out end
    for _, b in ipairs(last.content) do
      if b.type == "tool_result" then
        local content = type(b.content) == "table" and b.content[1].text or b.content
        out[#out + 1] = { id = b.tool_use_id, value = decode(content), is_error = b.is_error }
      end
    end
    return out
  end,
  forced = function(req) return type(req.tool_choice) == "table" and req.tool_choice.type == "tool" and req.tool_choice.name or nil end,
  strict = function(req) return req.output_config ~= nil and req.output_config.format.type == "json_schema" end,
  last_user = function(req)
    local c = req.messages[#req.messages].content
    return type(c) == "string" and c or c[#c].text
  end,
  truncated = function() return { json = { type = "message", role = "assistant", content = { { type = "text", text = '{"total":' } }, stop_reason = "max_tokens" } } end,
  empty = function() return { json = { type = "message", role = "assistant", content = setmetatable({}, luma.array_mt), stop_reason = "end_turn" } } end,
}

families.gemini = {
  model = 'provider: "gemini"\n name: "gemini-test"\n base_url: "%s"',
  path = "/v1beta/models/gemini-test:generateContent",
  auth = function(hd) return hd["x-goog-api-key"] == KEY end,
  text = function(s)
    return { json = { candidates = { { content = { role = "model", parts = { { text = s } } }, finishReason = "STOP" } },
                      usageMetadata = { promptTokenCount = 3, candidatesTokenCount = 2 } } }
  end,
  calls = function(list)
    local parts = {}
    for i, c in ipairs(list) do
      local ok, args = pcall(decode, c[3])
      parts[i] = { functionCall = { name = c[2], args = ok and args or c[3] } }
      if i == 1 then parts[i].thoughtSignature = "sig-" .. c[1] end
    end
    return { json = { candidates = { { content = { role = "model", parts = parts }, finishReason = "STOP" } } } }
  end,
  results = function(req)
    local out = {}
    local last = req.contents[#req.contents]
    if last.role ~= "user" then return out end
    for _, p in ipairs(last.parts) do
      if p.functionResponse then
        local r = p.functionResponse.response
        out[#out + 1] = { name = p.functionResponse.name, value = r.result or { error = r.error } }
      end
    end
    return out
  end,
  forced = function(req)
    local c = req.toolConfig and req.toolConfig.functionCallingConfig
    return c and c.mode == "ANY" and c.allowedFunctionNames and c.allowedFunctionNames[1] or nil
  end,
  strict = function(req) return req.generationConfig ~= nil and req.generationConfig.responseJsonSchema ~= nil end,
  last_user = function(req) local p = req.contents[#req.contents].parts return p[#p].text end,
  truncated = function() return { json = { candidates = { { content = { role = "model", parts = { { text = '{"total":' } } }, finishReason = "MAX_TOKENS" } } } } end,
  -- a call Gemini could not write: a finish reason and no content at all
  empty = function() return { json = { candidates = { { finishReason = "MALFORMED_FUNCTION_CALL", index = 0 } } } } end,
  no_ids = true,
}

local SOURCE = [[
schema Sum { sum: int }
schema Answer { total: int, note?: string }
schema Bounded { total: int @range(0, 100), label: string @length(1, 20) @pattern("^[a-z]+$"),
  parts: int[] @items(2, 5), sum: Sum @desc("the parts added"), extra?: Sum }
schema Cat { name: string }
schema Dog { name: string, good: bool }
schema Pet = Cat | Dog tagged by kind
tool add(a: int, b: int) -> Sum { }
tool fail_hard(a: int) -> Sum { }
tool fail_soft(a: int) -> Sum { }
model M { %s
  api_key_env: "LUMA_TEST_KEY" }
agent A { model: M
  tools: [add, fail_hard, fail_soft]
  tool_rate_limit: 3
  retries: 1
  fn run(x: int) -> Answer { ask "Add {x} and 2" -> Answer }
  fn bounded(x: int) -> Bounded { ask "Add {x} and 2" -> Bounded }
  fn pet(x: int) -> Pet { ask "Name pet {x}" -> Pet }
  fn forced(x: int) -> Answer { ask "Add {x} and 2" -> Answer using tool add } }
]]

for _, name in ipairs { "openai", "azure", "azure_v1", "responses", "azure_responses", "anthropic", "gemini" } do
  local f = families[name]
  describe("ask with " .. name, function()
    local server

    setup(function() server = mock.start() end)
    teardown(function() if server then server:stop() end end)
    before_each(function() server:reset() end)

    local function program()
      local p = assert(luma.compile(SOURCE:format(f.model:format(server.url))))
      p:register("add", function(i) return { sum = i.a + i.b } end)
      p:register("fail_hard", function() error(luma.ToolError { code = "DB_DOWN", message = "down", retryable = false }) end)
      p:register("fail_soft", function() error(luma.ToolError { code = "BUSY", message = "later", retryable = true }) end)
      p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end }
      return p
    end
    local function run(method) return program():agent("A"):call(method or "run", { x = 1 }) end

    it("sends its requests where the provider expects them, with its auth headers", function()
      server:script { f.text('{"total":3}') }
      assert.are.same({ total = 3 }, run())
      local r = server:requests()[1]
      assert.are.equal(f.path, r.path)
      if f.query then assert.are.equal(f.query, r.query) end
      assert.is_true(f.auth(r.headers), "auth headers: " .. luma.json.encode(r.headers))
      if f.body_model then assert.are.equal(f.body_model, r.json.model) end
    end)

    it("runs one tool call and returns its result to the model", function()
      server:script { f.calls { { "c1", "add", '{"a":1,"b":2}' } }, f.text('{"total":3}') }
      assert.are.same({ total = 3 }, run())
      local r = server:requests()
      local results = f.results(r[2].json)
      assert.are.equal(1, #results)
      assert.are.same({ sum = 3 }, results[1].value)
      if not f.no_ids then assert.are.equal("c1", results[1].id) end
      assert.is_false(f.strict(r[1].json))
      assert.is_true(f.strict(r[2].json))
    end)

    it("runs several calls of one turn, results in the calls' order", function()
      server:script { f.calls { { "c1", "add", '{"a":1,"b":1}' }, { "c2", "add", '{"a":2,"b":2}' } }, f.text('{"total":6}') }
      assert.are.same({ total = 6 }, run())
      local results = f.results(server:requests()[2].json)
      assert.are.same({ { sum = 2 }, { sum = 4 } }, { results[1].value, results[2].value })
    end)

    it("forces the tool of `using tool`", function()
      server:script { f.calls { { "c1", "add", '{"a":1,"b":2}' } }, f.text('{"total":3}') }
      assert.are.same({ total = 3 }, run("forced"))
      assert.are.equal("add", f.forced(server:requests()[1].json))
    end)

    it("re-asks an answer that does not fit, then takes the next one", function()
      server:script { f.text('{"total":"x"}'), f.text('{"total":3}') }
      assert.are.same({ total = 3 }, run())
      assert.matches("does not fit the schema Answer", f.last_user(server:requests()[2].json))
    end)

    it("returns malformed arguments and unknown tools to the model as errors", function()
      server:script { f.calls { { "c1", "add", '"one"' }, { "c2", "nope", '{}' } }, f.text('{"total":0}') }
      assert.are.same({ total = 0 }, run())
      local results = f.results(server:requests()[2].json)
      assert.are.equal("TOOL_INPUT_INVALID", results[1].value.error.code)
      assert.are.equal("TOOL_NOT_FOUND", results[2].value.error.code)
    end)

    it("ends the ask on a tool error that is not retryable", function()
      server:script { f.calls { { "c1", "fail_hard", '{"a":1}' } }, f.text('{"total":0}') }
      local err = h.raised(run)
      assert.are.equal("DB_DOWN", err.code)
    end)

    it("returns a retryable tool error to the model as an error result", function()
      server:script { f.calls { { "c1", "fail_soft", '{"a":1}' } }, f.text('{"total":0}') }
      assert.are.same({ total = 0 }, run())
      local results = f.results(server:requests()[2].json)
      assert.are.equal("BUSY", results[1].value.error.code)
    end)

    it("retries a 429 after its retry-after-ms", function()
      server:script { { status = 429, headers = { ["retry-after-ms"] = "25" }, json = { error = { message = "slow down" } } }, f.text('{"total":3}') }
      assert.are.same({ total = 3 }, run())
      assert.are.equal(2, #server:requests())
    end)

    it("is cancelled mid-ask", function()
      server:script { { delay_ms = 10000, json = {} } }
      local ask = program():agent("A"):start_ask("x", "Answer")
      local deadline = os.time() + 5
      while #server:requests() == 0 and os.time() < deadline do ask:wait(20) end
      ask:cancel()
      assert.is_true(ask:wait(2000))
      local ok, err = pcall(ask.result, ask)
      assert.are.same({ false, "ASK_CANCELLED" }, { ok, err.code })
      ask:close()
    end)

    it("stops past tool_rate_limit", function()
      server:script { f.calls { { "c1", "add", '{"a":1,"b":1}' }, { "c2", "add", '{"a":1,"b":1}' }, { "c3", "add", '{"a":1,"b":1}' }, { "c4", "add", '{"a":1,"b":1}' } } }
      assert.are.equal("ASK_TOOL_LIMIT", h.raised(run).code)
    end)

    it("retries a 503, then answers", function()
      server:script { { status = 503, headers = { ["retry-after-ms"] = "20" }, json = { error = { message = "overloaded" } } }, f.text('{"total":3}') }
      assert.are.same({ total = 3 }, run())
      assert.are.equal(2, #server:requests())
    end)

    it("asks for an answer with @range, @length, @pattern and a described schema field in a format the provider takes", function()
      -- the mock refuses what the provider refuses: Anthropic minimum, minLength...; Gemini
      -- pattern, minLength...; OpenAI strict a $ref with a description beside it
      local answer = '{"total":3,"label":"abc","parts":[1,2],"sum":{"sum":3}}'
      server:script { f.calls { { "c1", "add", '{"a":1,"b":2}' } }, f.text(answer) }
      local ok, got = pcall(run, "bounded")
      local r = server:requests()
      assert.is_true(ok, luma.json.encode(r[#r].refused or got))
      assert.are.same({ total = 3, label = "abc", parts = { 1, 2 }, sum = { sum = 3 } }, got)
      assert.are.equal(2, #r)
      assert.is_true(f.strict(r[2].json))
      -- what a provider does not take is in the description, in words
      if name == "anthropic" then
        local props = r[2].json.output_config.format.schema.properties
        assert.are.same({ "integer", "At least 0. At most 100." }, { props.total.type, props.total.description })
        assert.are.same({ "^[a-z]+$", "At least 1 character. At most 20 characters." }, { props.label.pattern, props.label.description })
        assert.are.equal("At least 2 items. At most 5 items.", props.parts.description)
        assert.are.same({ "object", "the parts added" }, { props.sum.type, props.sum.description })
      elseif name == "gemini" then
        local props = r[2].json.generationConfig.responseJsonSchema.properties
        assert.are.same({ 0, 100 }, { props.total.minimum, props.total.maximum })
        assert.are.equal('At least 1 character. At most 20 characters. It matches the pattern "^[a-z]+$".', props.label.description)
      end
    end)

    it("asks for a tagged union as the answer (an object at the root, where strict mode needs one)", function()
      local pet = '{"kind":"Dog","name":"Rex","good":true}'
      server:script { f.calls { { "c1", "add", '{"a":1,"b":2}' } }, f.text(f.wraps and '{"answer":' .. pet .. '}' or pet) }
      local ok, got = pcall(run, "pet")
      local r = server:requests()
      assert.is_true(ok, luma.json.encode(r[#r].refused or got))
      assert.are.same({ kind = "Dog", name = "Rex", good = true }, got)
      assert.is_true(f.strict(r[2].json))
    end)

    it("re-asks after an answer with nothing in it, and sends no empty message back", function()
      -- Anthropic refuses an assistant message with content [], Gemini a null content, Chat
      -- Completions an assistant message with neither content nor tool_calls
      server:script { f.calls { { "c1", "add", '{"a":1,"b":2}' } }, f.empty(), f.text('{"total":3}') }
      local ok, got = pcall(run)
      local r = server:requests()
      assert.is_true(ok, luma.json.encode(r[#r].refused or got))
      assert.are.same({ total = 3 }, got)
      assert.are.equal(3, #r)
      assert.matches("does not fit the schema Answer: the model gave no text", f.last_user(r[3].json))
    end)

    it("gives ASK_TRUNCATED for an answer cut at the token limit", function()
      server:script { f.truncated() }
      assert.are.equal("ASK_TRUNCATED", h.raised(run).code)
    end)

    it("gives ASK_RESPONSE_INVALID for an HTML page, an empty body or truncated JSON", function()
      for _, step in ipairs {
        { status = 200, body = "<html><body>Bad gateway</body></html>", content_type = "text/html" },
        { status = 200, body = "" },
        { status = 200, body = '{"choices": [' },
        { status = 200, json = { unexpected = true } },
      } do
        server:reset()
        server:script { step }
        local err = h.raised(run)
        assert.are.equal("ASK_RESPONSE_INVALID", err.code, luma.json.encode(step))
        assert.is_nil(err.message:find(KEY, 1, true))
      end
    end)
  end)
end

describe("ask with anthropic and gemini, their own rules", function()
  local server
  setup(function() server = mock.start() end)
  teardown(function() if server then server:stop() end end)
  before_each(function() server:reset() end)

  local function program(family)
    local p = assert(luma.compile(SOURCE:format(families[family].model:format(server.url))))
    p:register("add", function(i) return { sum = i.a + i.b } end)
    p:register("fail_hard", function() error(luma.ToolError { code = "DB_DOWN", message = "down", retryable = false }) end)
    p:register("fail_soft", function() end)
    p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end }
    return p
  end

  it("anthropic: the assistant content goes back verbatim, then one user message with every tool_result first", function()
    local f = families.anthropic
    server:script { f.calls { { "tu1", "add", '{"a":1,"b":1}' }, { "tu2", "add", '{"a":2,"b":2}' } }, f.text('{"total":6}') }
    assert.are.same({ total = 6 }, program("anthropic"):agent("A"):call("run", { x = 1 }))
    local req = server:requests()[2].json
    local n = #req.messages
    assert.are.equal("assistant", req.messages[n - 1].role)
    assert.are.equal("Let me use the tools.", req.messages[n - 1].content[1].text)
    assert.are.equal("tu1", req.messages[n - 1].content[2].id)
    local user = req.messages[n]
    assert.are.equal("user", user.role)
    assert.are.same({ "tool_result", "tool_result" }, { user.content[1].type, user.content[2].type })
    assert.are.same({ "tu1", "tu2" }, { user.content[1].tool_use_id, user.content[2].tool_use_id })
    assert.is_number(req.max_tokens)
    assert.is_table(req.tools)
  end)

  it("anthropic: a 529 overloaded_error is retried", function()
    local f = families.anthropic
    server:script { { status = 529, headers = { ["retry-after"] = "0" }, json = { type = "error", error = { type = "overloaded_error", message = "Overloaded" } } }, f.text('{"total":3}') }
    assert.are.same({ total = 3 }, program("anthropic"):agent("A"):call("run", { x = 1 }))
  end)

  it("gemini: calls without ids are answered by position, and the thoughtSignature goes back", function()
    local f = families.gemini
    server:script { f.calls { { "x", "add", '{"a":1,"b":1}' }, { "y", "add", '{"a":2,"b":2}' } }, f.text('{"total":6}') }
    assert.are.same({ total = 6 }, program("gemini"):agent("A"):call("run", { x = 1 }))
    local req = server:requests()[2].json
    local model_turn = req.contents[#req.contents - 1]
    assert.are.equal("model", model_turn.role)
    assert.are.equal("sig-x", model_turn.parts[1].thoughtSignature)
    local results = f.results(req)
    assert.are.same({ "add", "add" }, { results[1].name, results[2].name })
    assert.are.same({ { sum = 2 }, { sum = 4 } }, { results[1].value, results[2].value })
  end)

  local function raised(family)
    local a = program(family):agent("A")
    return h.raised(a.call, a, "run", { x = 1 })
  end

  it("gemini: a blocked prompt is ASK_BLOCKED, and the message says the prompt", function()
    server:script { { json = { promptFeedback = { blockReason = "SAFETY" } } } }
    local err = raised("gemini")
    assert.are.equal("ASK_BLOCKED", err.code)
    assert.are.equal("Agent 'A': the provider's safety filter blocked the prompt (SAFETY).", err.message)
  end)

  it("a filtered answer is ASK_BLOCKED, and the message says the answer, not the prompt", function()
    -- the answer's text is gone once a filter stops it: that is no sign the prompt was blocked
    server:script { { json = { candidates = { { finishReason = "SAFETY", index = 0 } } } } }
    local err = raised("gemini")
    assert.are.equal("ASK_BLOCKED", err.code)
    assert.are.equal("Agent 'A': the provider's safety filter blocked the answer (SAFETY).", err.message)
    server:reset()
    server:script { { json = { choices = { { index = 0, message = { role = "assistant", content = luma.null },
                                              finish_reason = "content_filter" } } } } }
    err = raised("openai")
    assert.are.equal("ASK_BLOCKED", err.code)
    assert.are.equal("Agent 'A': the provider's safety filter blocked the answer (content_filter).", err.message)
  end)

  it("azure: a prompt its content filter refuses (400 content_filter) is ASK_BLOCKED, not retried", function()
    server:script {
      { status = 400, json = { error = { message = "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
        type = luma.null, param = "prompt", code = "content_filter", status = 400,
        innererror = { code = "ResponsibleAIPolicyViolation", content_filter_result = { hate = { filtered = true, severity = "high" } } } } } },
      families.azure.text('{"total":3}'),
    }
    local err = raised("azure")
    assert.are.same({ "ASK_BLOCKED", false, 400 }, { err.code, err.retryable, err.details.status })
    assert.matches("^the provider's safety filter blocked the prompt %(azure answered 400 content_filter: The response was filtered", err.message)
    assert.are.equal(1, #server:requests())
  end)

  it("anthropic: a refusal with no text says so once", function()
    -- it said "the model refused: the model refused"
    server:script { { json = { type = "message", role = "assistant", content = setmetatable({}, luma.array_mt), stop_reason = "refusal" } } }
    local err = raised("anthropic")
    assert.are.equal("ASK_REFUSED", err.code)
    assert.are.equal("Agent 'A': the model refused, and gave no reason (refusal).", err.message)
    server:reset()
    server:script { { json = { type = "message", role = "assistant", content = { { type = "text", text = "I can't help with that." } }, stop_reason = "refusal" } } }
    assert.are.equal("Agent 'A': the model refused: I can't help with that.", raised("anthropic").message)
  end)

  it("gemini: a 429 waits for RetryInfo's retryDelay", function()
    local f = families.gemini
    server:script {
      { status = 429, json = { error = { code = 429, status = "RESOURCE_EXHAUSTED", message = "quota",
        details = { { ["@type"] = "type.googleapis.com/google.rpc.RetryInfo", retryDelay = "0.05s" } } } } },
      f.text('{"total":3}'),
    }
    assert.are.same({ total = 3 }, program("gemini"):agent("A"):call("run", { x = 1 }))
  end)

  it("gemini: a retry-after header that cannot be read leaves RetryInfo's retryDelay", function()
    -- an unreadable header used to stand for no wait at all: the backoff (250 to 500 ms) came instead
    local f = families.gemini
    server:script {
      { status = 429, headers = { ["retry-after"] = "soon" },
        json = { error = { code = 429, status = "RESOURCE_EXHAUSTED", message = "quota",
          details = { { ["@type"] = "type.googleapis.com/google.rpc.RetryInfo", retryDelay = "1.2s" } } } } },
      f.text('{"total":3}'),
    }
    local t0 = socket.gettime()
    assert.are.same({ total = 3 }, program("gemini"):agent("A"):call("run", { x = 1 }))
    local ms = (socket.gettime() - t0) * 1000
    assert.is_true(ms >= 1100, ms .. " ms: not the 1.2 s the body asked for")
  end)

  it("responses: reasoning items and calls go back in order, then the outputs", function()
    local f = families.responses
    server:script { f.calls { { "call_a", "add", '{"a":1,"b":2}' } }, f.text('{"total":3}') }
    local p = assert(luma.compile(SOURCE:format(f.model:format(server.url))))
    p:register("add", function(i) return { sum = i.a + i.b } end)
    p:register("fail_hard", function() end)
    p:register("fail_soft", function() end)
    p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end }
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local input = server:requests()[2].json.input
    local types = {}
    for i, item in ipairs(input) do types[i] = item.type or item.role end
    local r = find(input, function(i) return i.type == "reasoning" end)
    assert.are.equal("opaque-1", r.encrypted_content)
    local at = {}
    for i, t in ipairs(types) do at[t] = at[t] or i end
    assert.is_true(at.reasoning < at.function_call and at.function_call < at.function_call_output, table.concat(types, ","))
  end)
end)
