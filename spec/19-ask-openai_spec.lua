-- ask with OpenAI Chat Completions (and the compatible servers): the agent
-- loop against the mock provider, which records every request.
local luma = require "luma"
local h = require "spec.helpers"
local mock = require "spec.support.mock_provider"
local now = require("luma.core").monotonic_ms

local KEY = "sk-test-0123456789"

local SOURCE = [[
schema Sum { sum: int }
schema Answer { total: int, note?: string }
tool add(a: int, b: int) -> Sum { }
tool fail_hard(a: int) -> Sum { }
tool fail_soft(a: int) -> Sum { }
tool scaled(a: int, factor?: int @default(2) @desc("how much"), label?: string) -> Sum { timeout: 600000 }
model M { provider: "openai"
  name: "gpt-test"
  base_url: "%s/v1/"
  api_key_env: "LUMA_TEST_KEY" }
agent A { model: M
  tools: [add, fail_hard, fail_soft, scaled]
  tool_rate_limit: %d
  retries: %d
  description: "You add numbers."
  fn run(x: int) -> Answer { ask "Add {x} and 2" -> Answer }
  fn forced(x: int) -> Answer { ask "Add {x} and 2" -> Answer using tool add } }
]]

local chat = mock.chat

describe("ask with openai chat", function()
  local server, events

  setup(function() server = mock.start() end)
  teardown(function() if server then server:stop() end end)

  local function program(opts)
    opts = opts or {}
    local source = SOURCE
    if opts.timeout then
      source = source:gsub('api_key_env: "LUMA_TEST_KEY" }', 'api_key_env: "LUMA_TEST_KEY"\n  timeout: ' .. opts.timeout .. " }")
    end
    if opts.model_retries then
      source = source:gsub('api_key_env: "LUMA_TEST_KEY" }', 'api_key_env: "LUMA_TEST_KEY"\n  retries: ' .. opts.model_retries .. " }")
    end
    local p = assert(luma.compile(source:format(server.url, opts.rate or 10, opts.retries or 0)))
    p:register("add", function(i) return { sum = i.a + i.b } end)
    p:register("fail_hard", function() error(luma.ToolError { code = "DB_DOWN", message = "the database is down", retryable = false }) end)
    p:register("fail_soft", function() error(luma.ToolError { code = "BUSY", message = "try later", retryable = true }) end)
    p:register("scaled", function(i) return { sum = i.a * i.factor } end)
    events = {}
    p:configure {
      lookup = function(name) if name == "LUMA_TEST_KEY" then return KEY end end,
      on_event = function(e) events[#events + 1] = e end,
    }
    return p
  end

  local function run(p, method)
    return p:agent("A"):call(method or "run", { x = 1 })
  end

  before_each(function() server:reset() end)

  it("runs one tool call, then asks for the answer in the strict format", function()
    server:script { chat(nil, { { "call_1", "add", '{"a":1,"b":2}' } }), chat('{"total":3}') }
    assert.are.same({ total = 3 }, run(program()))
    local r = server:requests()
    assert.are.equal(2, #r)
    assert.are.equal("/v1/chat/completions", r[1].path)
    assert.are.equal("Bearer " .. KEY, r[1].headers.authorization)
    local first, second = r[1].json, r[2].json
    assert.are.equal("gpt-test", first.model)
    assert.are.same({ "system", "user" }, { first.messages[1].role, first.messages[2].role })
    assert.are.equal("Add 1 and 2", first.messages[2].content)
    assert.are.equal("add", first.tools[1]["function"].name)
    assert.is_true(first.tools[1]["function"].strict)
    assert.is_nil(first.response_format)
    -- reasoning models (o-series, gpt-5) refuse a temperature other than 1: none unless the model sets it
    assert.is_nil(first.temperature)
    -- the assistant's calls unchanged, then one tool message per id
    assert.are.equal("call_1", second.messages[3].tool_calls[1].id)
    assert.are.same({ role = "tool", tool_call_id = "call_1", content = '{"sum":3}' }, second.messages[4])
    assert.are.equal("json_schema", second.response_format.type)
    assert.are.equal("Answer", second.response_format.json_schema.name)
    assert.is_true(second.response_format.json_schema.strict)
  end)

  it("declares the tools in strict mode: every field required, optional ones nullable, defaults described", function()
    server:script { chat(nil, { { "c1", "scaled", '{"a":3,"factor":null,"label":null}' } }), chat('{"total":6}') }
    assert.are.same({ total = 6 }, run(program()))
    local r = server:requests()
    local scaled
    for _, t in ipairs(r[1].json.tools) do if t["function"].name == "scaled" then scaled = t["function"] end end
    local params = scaled.parameters
    assert.are.same({ "a", "factor", "label" }, params.required)
    assert.is_false(params.additionalProperties)
    assert.are.same({ "integer", "null" }, params.properties.factor.type)
    assert.are.equal("how much Default: 2.", params.properties.factor.description)
    assert.are.same({ "string", "null" }, params.properties.label.type)
    assert.are.same({ role = "tool", tool_call_id = "c1", content = '{"sum":6}' }, r[2].json.messages[4])
  end)

  it("takes an answer given without any tool call, validated locally", function()
    server:script { chat('{"total":7,"note":"seven"}') }
    assert.are.same({ total = 7, note = "seven" }, run(program()))
    assert.are.equal(1, #server:requests())
  end)

  it("counts a null optional field of the answer as missing", function()
    server:script { chat('{"total":7,"note":null}') }
    assert.are.same({ total = 7 }, run(program()))
  end)

  it("runs several calls of one turn and answers each in order", function()
    server:script {
      chat(nil, { { "c1", "add", '{"a":1,"b":1}' }, { "c2", "add", '{"a":2,"b":2}' }, { "c3", "add", '{"a":3,"b":3}' } }),
      chat('{"total":12}'),
    }
    assert.are.same({ total = 12 }, run(program()))
    local m = server:requests()[2].json.messages
    assert.are.same({ "c1", "c2", "c3" }, { m[4].tool_call_id, m[5].tool_call_id, m[6].tool_call_id })
    assert.are.same({ '{"sum":2}', '{"sum":4}', '{"sum":6}' }, { m[4].content, m[5].content, m[6].content })
  end)

  it("forces the tool of `using tool` in the first request only", function()
    server:script { chat(nil, { { "c1", "add", '{"a":1,"b":2}' } }), chat('{"total":3}') }
    assert.are.same({ total = 3 }, run(program(), "forced"))
    local r = server:requests()
    assert.are.same({ type = "function", ["function"] = { name = "add" } }, r[1].json.tool_choice)
    assert.are_not.same({ type = "function", ["function"] = { name = "add" } }, r[2].json.tool_choice)
  end)

  it("re-asks an answer that does not fit, with the reason, up to the agent's retries", function()
    server:script { chat('{"total":"three"}'), chat('{"total":3}') }
    assert.are.same({ total = 3 }, run(program { retries = 1 }))
    local m = server:requests()[2].json.messages
    assert.matches("does not fit the schema Answer", m[#m].content)
  end)

  it("fails with ASK_OUTPUT_INVALID and the last answer once the retries are spent", function()
    server:script { chat('{"total":"three"}'), chat("not json") }
    local err = h.raised(run, program { retries = 1 })
    assert.are.equal("ASK_OUTPUT_INVALID", err.code)
    assert.are.equal("not json", err.details.answer)
    assert.matches("^Agent 'A': the model's answer does not fit 'Answer': the answer is not JSON", err.message)
  end)

  it("sends malformed arguments and unknown tools back to the model as error results", function()
    server:script {
      chat(nil, { { "c1", "add", '{"a":1,' }, { "c2", "multiply", '{}' }, { "c3", "add", '{"a":"x","b":1}' } }),
      chat('{"total":0}'),
    }
    assert.are.same({ total = 0 }, run(program()))
    local m = server:requests()[2].json.messages
    local e1, e2, e3 = luma.json.decode(m[4].content), luma.json.decode(m[5].content), luma.json.decode(m[6].content)
    assert.are.equal("TOOL_INPUT_INVALID", e1.error.code)
    assert.matches("not JSON", e1.error.message)
    assert.are.equal("TOOL_NOT_FOUND", e2.error.code)
    assert.matches("'multiply' is not a tool of agent 'A'", e2.error.message)
    assert.are.equal("TOOL_INPUT_INVALID", e3.error.code)
  end)

  it("returns a retryable tool error to the model, which can act on it", function()
    server:script { chat(nil, { { "c1", "fail_soft", '{"a":1}' } }), chat('{"total":0,"note":"busy"}') }
    assert.are.same({ total = 0, note = "busy" }, run(program()))
    local m = server:requests()[2].json.messages
    local e = luma.json.decode(m[4].content)
    assert.are.same({ "BUSY", "try later" }, { e.error.code, e.error.message })
  end)

  it("ends the ask at once on a tool error that is not retryable", function()
    server:script { chat(nil, { { "c1", "fail_hard", '{"a":1}' } }), chat('{"total":0}') }
    local err = h.raised(run, program())
    assert.are.same({ "DB_DOWN", "the database is down" }, { err.code, err.message })
    assert.are.equal(1, #server:requests())
  end)

  it("stops past the agent's tool_rate_limit", function()
    server:script { chat(nil, { { "c1", "add", '{"a":1,"b":1}' }, { "c2", "add", '{"a":1,"b":1}' } }) }
    local err = h.raised(run, program { rate = 1 })
    assert.are.equal("ASK_TOOL_LIMIT", err.code)
    assert.matches("more than its tool_rate_limit of 1", err.message)
  end)

  it("retries a 429 after the retry-after-ms it asks for", function()
    server:script {
      { status = 429, headers = { ["retry-after-ms"] = "30" }, json = { error = { message = "slow down", type = "rate_limit" } } },
      chat('{"total":3}'),
    }
    assert.are.same({ total = 3 }, run(program()))
    assert.are.equal(2, #server:requests())
  end)

  -- a wait past a day is ignored, as retry-after seconds are: the backoff
  -- (250 to 500 ms before the first retry) is waited instead. strtoll took
  -- 2^63-1 ms, a year past 9999 made a wait of millennia (and one past
  -- 2^31/366 overflowed), and neither was retried.
  local ignored = {
    { ["retry-after-ms"] = "99999999999999999999" },
    { ["retry-after-ms"] = "86400000" },
    { ["retry-after-ms"] = "-5" },
    { ["retry-after-ms"] = "12abc" },
    { ["retry-after"] = "86400" },
    { ["retry-after"] = "Wed, 21 Oct 99999999 07:28:00 GMT" },
    { ["retry-after"] = "Wed, 21 Oct 2147483647 07:28:00 GMT" },
  }
  for _, headers in ipairs(ignored) do
    local name, value = next(headers)
    it("ignores " .. name .. ": " .. value .. " and retries after its backoff", function()
      local p = program { timeout = 5000 }
      server:script {
        { status = 429, headers = headers, json = { error = { message = "slow down", type = "rate_limit" } } },
        chat('{"total":3}'),
      }
      local t0 = now()
      assert.are.same({ total = 3 }, run(p))
      local ms = now() - t0
      assert.are.equal(2, #server:requests())
      assert.is_true(ms >= 200 and ms < 5000, ms .. " ms: not the backoff")
    end)
  end

  it("retries a 503 at the retry-after date it asks for", function()
    -- "%3s %d" stopped at the comma of "Wed, 21 Oct": no date was ever read
    local p = program { timeout = 5000 }
    local at = os.date("!%a, %d %b %Y %H:%M:%S GMT", os.time() + 2)
    server:script {
      { status = 503, headers = { ["retry-after"] = at }, json = { error = { message = "later" } } },
      chat('{"total":3}'),
    }
    local t0 = now()
    assert.are.same({ total = 3 }, run(p))
    local ms = now() - t0
    assert.are.equal(2, #server:requests())
    assert.is_true(ms >= 900 and ms < 5000, ms .. " ms: not the time to " .. at)
  end)

  it("fails at once with ASK_PROVIDER_ERROR when the wait asked for is past the model's timeout", function()
    local p = program { timeout = 500 }
    server:script {
      { status = 429, headers = { ["retry-after-ms"] = "60000" }, json = { error = { message = "slow down" } } },
      chat('{"total":3}'),
    }
    local t0 = now()
    local err = h.raised(run, p)
    assert.are.same({ "ASK_PROVIDER_ERROR", 429, 1 }, { err.code, err.details.status, err.details.attempts })
    assert.is_true(now() - t0 < 500, "it waited")
    assert.are.equal(1, #server:requests())
    -- and says why it did not wait
    assert.matches("^openai answered 429: slow down; luma did not retry: the provider asked to wait 60000 ms, " ..
                   "longer than the %d+ ms left of the model's timeout %(500 ms%)$", err.message)
  end)

  it("says how many times it retried once the model's retries are spent", function()
    local p = program { model_retries = 2 }
    local busy = { status = 503, headers = { ["retry-after-ms"] = "5" }, json = { error = { message = "overloaded" } } }
    server:script { busy, busy, busy, chat('{"total":3}') }
    local err = h.raised(run, p)
    assert.are.same({ "ASK_PROVIDER_ERROR", 503, 3 }, { err.code, err.details.status, err.details.attempts })
    assert.are.equal("openai answered 503: overloaded; luma retried 2 times (the model's retries: 2)", err.message)
    server:reset()
    p = program { model_retries = 0 }
    server:script { busy, chat('{"total":3}') }
    assert.are.equal("openai answered 503: overloaded; luma did not retry (the model's retries: 0)", h.raised(run, p).message)
  end)

  it("does not retry a 429 for insufficient_quota", function()
    server:script {
      { status = 429, json = { error = { message = "You exceeded your current quota", type = "insufficient_quota", code = "insufficient_quota" } } },
      chat('{"total":3}'),
    }
    local err = h.raised(run, program())
    assert.are.equal("ASK_PROVIDER_ERROR", err.code)
    assert.is_false(err.retryable)
    assert.are.equal(429, err.details.status)
    assert.are.equal(1, #server:requests())
  end)

  it("takes x-should-retry over the status", function()
    server:script { { status = 503, headers = { ["x-should-retry"] = "false" }, json = { error = { message = "down" } } }, chat('{"total":3}') }
    local err = h.raised(run, program())
    assert.are.same({ "ASK_PROVIDER_ERROR", false, 503 }, { err.code, err.retryable, err.details.status })
    assert.are.equal(1, #server:requests())
    server:reset()
    server:script { { status = 400, headers = { ["x-should-retry"] = "true" }, json = { error = { message = "flaky" } } }, chat('{"total":3}') }
    assert.are.same({ total = 3 }, run(program()))
  end)

  it("opens the agent's breaker on tools that keep failing, which ends the ask", function()
    local source = SOURCE:gsub("  retries: %%d\n", "  retries: %%d\n  tool_failure_limit: 2\n")
    local p = assert(luma.compile(source:format(server.url, 10, 0)))
    p:register("add", function() error(luma.ToolError { code = "FLAKY", message = "again", retryable = true }) end)
    for _, n in ipairs { "fail_hard", "fail_soft", "scaled" } do p:register(n, function() return { sum = 0 } end) end
    p:configure { lookup = function(name) if name == "LUMA_TEST_KEY" then return KEY end end }
    server:script { chat(nil, { { "c1", "add", '{"a":1,"b":1}' }, { "c2", "add", '{"a":1,"b":1}' }, { "c3", "add", '{"a":1,"b":1}' } }),
                    chat('{"total":0}') }
    local err = h.raised(p:agent("A").call, p:agent("A"), "run", { x = 1 })
    assert.are.equal("TOOL_CIRCUIT_OPEN", err.code)
    assert.are.equal(1, #server:requests())
  end)

  it("never shows the API key in an error", function()
    server:script { { status = 401, json = { error = { message = "Incorrect API key provided: " .. KEY, type = "invalid_request_error" } } } }
    local err = h.raised(run, program())
    assert.are.equal("ASK_PROVIDER_ERROR", err.code)
    assert.is_nil(tostring(err.message):find(KEY, 1, true))
  end)

  it("emits one ask event, and the tool events carry the ask's id", function()
    server:script { chat(nil, { { "c1", "add", '{"a":1,"b":2}' } }, { prompt_tokens = 11, completion_tokens = 4 }),
                    chat('{"total":3}', nil, { prompt_tokens = 20, completion_tokens = 6 }) }
    run(program())
    local asks, tools = {}, {}
    for _, e in ipairs(events) do
      if e.kind == "ask" then asks[#asks + 1] = e else tools[#tools + 1] = e end
    end
    assert.are.equal(1, #asks)
    local a = asks[1]
    assert.are.same({ "A", "gpt-test", "openai", 2, 1, 31, 10, "ok" },
      { a.agent, a.model, a.provider, a.turns, a.tool_calls, a.input_tokens, a.output_tokens, a.status })
    assert.are.equal(1, #tools)
    assert.are.equal(a.ask, tools[1].ask)
  end)

  it("holds token counts past an integer's range at math.maxinteger, summed over the turns", function()
    -- 2e22 cannot be cast to an integer, and math.maxinteger + 20 overflowed the sum; a
    -- negative count is no count
    server:script { chat(nil, { { "c1", "add", '{"a":1,"b":2}' } }, { prompt_tokens = 2e22, completion_tokens = -5 }),
                    chat('{"total":3}', nil, { prompt_tokens = 20, completion_tokens = 6 }) }
    assert.are.same({ total = 3 }, run(program()))
    local a
    for _, e in ipairs(events) do if e.kind == "ask" then a = e end end
    assert.are.same({ math.maxinteger, 6 }, { a.input_tokens, a.output_tokens })
  end)

  it("is cancelled mid-ask: the transfer stops and the ask ends with ASK_CANCELLED", function()
    server:script { { delay_ms = 10000, json = {} } }
    local p = program()
    local ask = p:agent("A"):start_ask("Add 1 and 2", "Answer")
    local deadline = os.time() + 5
    while #server:requests() == 0 and os.time() < deadline do ask:wait(20) end
    assert.are.equal(1, #server:requests())
    local t0 = os.clock()
    ask:cancel()
    assert.is_true(ask:wait(2000))
    local ok, err = pcall(ask.result, ask)
    assert.is_false(ok)
    assert.are.equal("ASK_CANCELLED", err.code)
    ask:close()
    assert.is_true(os.clock() - t0 < 1)
  end)

  it("waits a timeout too long to count (math.maxinteger) until the answer, and a short one times out", function()
    -- now + 2^63-1 ms overflowed: it read as no timeout by accident
    server:script { chat('{"total":3}') }
    local p = program()
    local ask = p:agent("A"):start_ask("Add 1 and 2", "Answer")
    assert.is_true(ask:wait(math.maxinteger))
    assert.are.same({ total = 3 }, ask:result())
    assert.is_true(ask:wait(math.maxinteger))
    assert.is_true(ask:wait(math.huge))
    assert.has_error(function() ask:wait(0 / 0) end)
    ask:close()
    server:reset()
    server:script { { delay_ms = 10000, json = {} } }
    ask = p:agent("A"):start_ask("Add 1 and 2", "Answer")
    local t0 = now()
    assert.is_false(ask:wait(30))
    ask:cancel()
    assert.is_true(ask:wait(math.maxinteger))
    assert.are.equal("ASK_CANCELLED", h.raised(ask.result, ask).code)
    ask:close()
    local ms = now() - t0
    assert.is_true(ms < 2000, ms .. " ms for a 30 ms wait and a cancel")
  end)

  it("gives ASK_REFUSED for a refusal, with the model's words", function()
    server:script { { json = { choices = { { index = 0, finish_reason = "stop",
      message = { role = "assistant", content = luma.null, refusal = "I cannot help with that." } } } } } }
    local err = h.raised(run, program())
    assert.are.equal("ASK_REFUSED", err.code)
    assert.matches("I cannot help with that%.", err.message)
  end)

  it("sends the model's extra headers, and no auth header with api_key_env: null", function()
    local p = assert(luma.compile(([[
schema Answer { total: int }
model L { provider: "openai"
  name: "llama"
  base_url: "%s/v1"
  api_key_env: null
  headers: { "X-Team": "blue", "OpenAI-Organization": "org-7" } }
agent A { model: L
  fn run() -> Answer { ask "two" -> Answer } }]]):format(server.url)))
    server:script { chat('{"total":2}') }
    assert.are.same({ total = 2 }, p:agent("A"):call("run", {}))
    local hd = server:requests()[1].headers
    assert.are.same({ "blue", "org-7" }, { hd["x-team"], hd["openai-organization"] })
    assert.is_nil(hd.authorization)
  end)

  it("runs a sandboxed module's handler for the model, and cancelling the ask fires its signal", function()
    local dir = h.project {
      ["tools.lua"] = [[
return {
  add = function(i) return { sum = i.a + i.b } end,
  fail_hard = function() return { sum = 0 } end,
  fail_soft = function() return { sum = 0 } end,
  scaled = function(i, signal)
    while not signal.aborted do end
    error(luma.ToolError { code = "STOPPED", message = signal.reason, retryable = false })
  end,
}]],
    }
    local p = assert(luma.compile(SOURCE:format(server.url, 10, 0)))
    p:attach(require("luma.core").load_module { path = dir .. "/tools.lua", policy = { sandbox = "strict" } })
    p:configure { lookup = function(name) if name == "LUMA_TEST_KEY" then return KEY end end }
    server:reset()
    server:script { chat(nil, { { "c1", "add", '{"a":2,"b":5}' } }), chat('{"total":7}') }
    assert.are.same({ total = 7 }, p:agent("A"):call("run", { x = 1 }))
    server:reset()
    server:script { chat(nil, { { "c1", "scaled", '{"a":1}' } }), chat('{"total":0}') }
    local ask = p:agent("A"):start_ask("go", "Answer")
    local deadline = os.time() + 5
    while #server:requests() < 1 and os.time() < deadline do ask:wait(20) end
    ask:wait(200)   -- the handler is spinning now
    ask:cancel()
    assert.is_true(ask:wait(3000))
    local ok, err = pcall(ask.result, ask)
    assert.is_false(ok)
    assert.are.equal("ASK_CANCELLED", err.code)
    assert.are.equal(1, #server:requests())
    ask:close()
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("refuses a forced tool the agent does not have", function()
    local p = program()
    local err = h.raised(p.start_ask, p, p:scope("A"), "x", "Answer", "nope")
    assert.are.equal("TOOL_PERMISSION_DENIED", err.code)
  end)
end)
