local luma = require "luma"
local cjson = require "cjson"
local h = require "spec.helpers"

-- A program with the given declarations after the calculate contract.
local function program(extra, opts)
  local dir = h.project { ["program.luma"] = h.calculate .. (extra or "") }
  return assert(h.load(dir, opts or { config = false }))
end

-- The calculate handler, for programs whose tests are about other tools.
local CALC = "calculate = function(i) return { result = i.a + i.b } end,"

local function add(p, input)
  return (p:call("calculate", input or { a = 2, b = 3, operation = "add" }))
end

local function events_of(p)
  local events = {}
  p:configure { on_event = function(e) events[#events + 1] = e end }
  return events
end

describe("pipeline step 1: the registry", function()
  it("knows only declared tools", function()
    local p = program()
    local err = h.raised(p.call, p, "nope", {})
    assert.are.same({ "TOOL_NOT_FOUND", "Unknown tool 'nope'." }, { err.code, err.message })
  end)
end)

describe("pipeline step 2: credentials", function()
  local source = [[
tool db_write(table: string, value: string) -> CalcResult {
  side_effects: "write"
  credential: "%s"
}]]

  it("never runs a tool whose credential variable is unset", function()
    local p = program(source:format("LUMA_SPEC_NOT_SET"))
    local ran = false
    p:register("db_write", function() ran = true return { result = 1 } end)
    local err = h.raised(p.call, p, "db_write", { table = "t", value = "v" })
    assert.are.same({ "TOOL_PERMISSION_DENIED", "Tool 'db_write' is missing credential: LUMA_SPEC_NOT_SET." }, { err.code, err.message })
    assert.is_false(ran)
  end)

  it("runs it once the variable is set", function()
    local p = program(source:format("PATH"))
    p:register("db_write", function() return { result = 1 } end)
    assert.are.same({ result = 1 }, (p:call("db_write", { table = "t", value = "v" })))
  end)
end)

-- An agent calling db_write, with configuration lines in `config`.
local function writer(config, tool_config)
  local p = program(([[
tool db_write(table: string) -> CalcResult {
  side_effects: "write"
  %s
}
agent Writer {
  tools: [db_write]
  %s
  fn run() { return tool db_write({ table: "t" }) }
}]]):format(tool_config or "", config))
  p:register("db_write", function() return { result = 1 } end)
  p:register("calculate", function() return { result = 0 } end)
  return p
end

local function write(p) return p:agent("Writer"):call("run") end

describe("pipeline step 3: scopes", function()
  it("denies a scope missing from the agent's tool_scopes", function()
    local p = writer('tool_scopes: ["db:read"]', 'scope: "db:write"')
    local err = h.raised(write, p)
    assert.are.same({ "TOOL_PERMISSION_DENIED", "Tool 'db_write' scope access was denied: db:write." }, { err.code, err.message })
  end)

  it("allows a listed scope", function()
    assert.are.same({ result = 1 }, write(writer('tool_scopes: ["db:write"]', 'scope: "db:write"')))
  end)

  it("does not check scopes when the agent has no tool_scopes", function()
    assert.are.same({ result = 1 }, write(writer("", 'scope: "db:write"')))
  end)
end)

describe("pipeline step 4: tool_policy deny_write", function()
  it("denies write tools", function()
    local err = h.raised(write, writer('tool_policy: "deny_write"'))
    assert.are.same({ "TOOL_PERMISSION_DENIED", "Tool 'db_write' writes, and agent 'Writer' has tool_policy deny_write." },
      { err.code, err.message })
  end)

  it("lets other tools run", function()
    local p = program([[
agent Reader {
  tools: [calculate]
  tool_policy: "deny_write"
  fn run() { return tool calculate({ a: 1, b: 2, operation: "add" }) }
}]])
    p:register("calculate", function() return { result = 3 } end)
    assert.are.same({ result = 3 }, p:agent("Reader"):call("run"))
  end)
end)

describe("pipeline step 5: tool_policy approval", function()
  local source = h.calculate .. [[
tool db_write(table: string) -> CalcResult { side_effects: "write" }
agent Writer {
  tools: [db_write]
  tool_policy: "approval"
  fn run() { return tool db_write({ table: "t" }) }
}]]
  local tools = 'return { ' .. CALC .. ' db_write = function() return { result = 1 } end }'

  it("denies a write tool not listed in LUMA_APPROVED_TOOLS when stdin is not a terminal", function()
    local dir = h.project { ["program.luma"] = source, ["tools.lua"] = tools }
    local r = h.run({ "program.luma", "--tool-module", "tools.lua", "--agent", "Writer" }, { cwd = dir })
    assert.are.equal(1, r.status)
    assert.are.equal("Error: [TOOL_PERMISSION_DENIED] Tool 'db_write' writes and was not approved: list it in " ..
      "LUMA_APPROVED_TOOLS (agent 'Writer' has tool_policy approval).\n", r.stderr)
  end)

  -- `script` (util-linux) gives the command a terminal; the answer comes through it
  local function at_terminal(dir, answer)
    local out = h.tmpname(".out")
    local cmd = string.format("cd %s && printf '%s\\n' | env -u LD_PRELOAD script -qec %s /dev/null > %s 2>&1", h.quote(dir), answer,
      h.quote(h.root .. "/bin/luma-lua program.luma --tool-module tools.lua --agent Writer"), h.quote(out))
    local ok = os.execute(cmd)
    return h.read(out), ok == true or ok == 0
  end

  it("asks on an interactive terminal, and runs the tool when the user says yes", function()
    if not os.execute("command -v script >/dev/null") then return pending("script is not installed") end
    local dir = h.project { ["program.luma"] = source, ["tools.lua"] = tools }
    local text, ok = at_terminal(dir, "y")
    assert.is_true(ok, text)
    assert.matches("Allow the write tool 'db_write' to run? [y/N]", text, 1, true)
    assert.matches('"result": 1', text, 1, true)
    text, ok = at_terminal(dir, "n")
    assert.is_false(ok)
    assert.matches("[TOOL_PERMISSION_DENIED] Tool 'db_write' writes and was not approved", text, 1, true)
  end)

  it("runs a write tool listed in LUMA_APPROVED_TOOLS", function()
    local dir = h.project { ["program.luma"] = source, ["tools.lua"] = tools }
    local r = h.run({ "program.luma", "--tool-module", "tools.lua", "--agent", "Writer" },
      { cwd = dir, env = { LUMA_APPROVED_TOOLS = "send_email, db_write" } })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ result = 1 }, cjson.decode(r.stdout))
  end)
end)

describe("pipeline step 6: input validation", function()
  it("fails with TOOL_INPUT_INVALID and every violation in details", function()
    local p = program()
    local ran = false
    p:register("calculate", function() ran = true end)
    local err = h.raised(p.call, p, "calculate", { a = 2000000, b = -1, operation = "add" })
    assert.are.equal("TOOL_INPUT_INVALID", err.code)
    assert.are.equal("calculate.input.a must be at most 1000000", err.message)
    assert.are.equal(2, #err.details.violations)
    assert.are.equal("calculate", err.tool)
    assert.is_false(ran)
  end)

  it("hands the handler its input with defaults filled and tags written", function()
    local p = program([[
schema Invoice { number: string }
schema Receipt { reference: string }
schema Doc = Invoice | Receipt tagged by kind
tool file_doc(doc: Doc, limit?: int @default(10)) -> CalcResult {}]])
    local seen
    p:register("file_doc", function(input) seen = input return { result = 1 } end)
    p:call("file_doc", { doc = { reference = "R-1" } })
    assert.are.same({ doc = { kind = "Receipt", reference = "R-1" }, limit = 10 }, seen)
  end)
end)

describe("pipeline step 7: needs and tool_contexts", function()
  local source = h.calculate .. [[
schema Database { user: string, port: int, debug: bool, opts: any, ratio: float }
tool db_read(q: string) -> CalcResult { needs db: Database }
agent Reader {
  tools: [db_read]
  %s
  fn run() { return tool db_read({ q: "x" }) }
}
x = tool db_read({ q: "x" })]]
  local contexts = [[{ "tool_modules": ["tools.lua"], "tool_contexts": { "db": {
    "user": { "env": "DB_USER" },
    "port": { "env": "DB_PORT", "parse": "integer" },
    "debug": { "env": "DB_DEBUG", "parse": "boolean" },
    "opts": { "env": "DB_OPTS", "parse": "json" },
    "ratio": { "env": "DB_RATIO", "parse": "number" } } } }]]
  local tools = [[return { ]] .. CALC .. [[ db_read = function(input, signal, needs)
    return { result = needs.db.port + needs.db.ratio + (needs.db.debug and 1000 or 0) + #needs.db.user + needs.db.opts.n }
  end }]]
  local env = { DB_USER = "ada", DB_PORT = "5432", DB_DEBUG = "true", DB_OPTS = '{"n": 7}', DB_RATIO = "0.5", DB_PASSWORD = "s3cret" }

  local function run(agent_config, overrides, args)
    local dir = h.project { ["program.luma"] = source:format(agent_config or ""), ["tools.lua"] = tools,
      ["luma.config.json"] = contexts }
    local e = {}
    for k, v in pairs(env) do e[k] = v end
    for k, v in pairs(overrides or {}) do e[k] = v end
    return h.run(args or { "program.luma", "--trace", "trace.jsonl" }, { cwd = dir, env = e }), dir
  end

  it("resolve each field from its variable with its parse, as the handler's third argument", function()
    local r, dir = run()
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ x = { result = 5432 + 0.5 + 1000 + 3 + 7 } }, cjson.decode(r.stdout))
    -- needs never appear in telemetry
    local trace = h.read(dir .. "/trace.jsonl")
    assert.is_nil(trace:find("ada", 1, true))
    assert.is_nil(trace:find("5432", 1, true))
  end)

  local failures = {
    { "an unset variable", { DB_USER = false }, "Tool 'db_read' needs 'db', but DB_USER (for user) is not set." },
    { "an integer that is not one", { DB_PORT = "54x" }, "Tool 'db_read' needs 'db', but DB_PORT (for port) is not a valid integer." },
    { "a boolean other than true or false", { DB_DEBUG = "yes" }, "Tool 'db_read' needs 'db', but DB_DEBUG (for debug) is not a valid boolean." },
    { "invalid JSON", { DB_OPTS = "{" }, "Tool 'db_read' needs 'db', but DB_OPTS (for opts) is not a valid json." },
    { "a number that is not finite", { DB_RATIO = "inf" }, "Tool 'db_read' needs 'db', but DB_RATIO (for ratio) is not a valid number." },
  }
  for _, c in ipairs(failures) do
    it("fail with TOOL_CONTEXT_INVALID for " .. c[1], function()
      local e, unset = {}, {}
      for k, v in pairs(env) do e[k] = v end
      for k, v in pairs(c[2]) do
        if v then e[k] = v else e[k] = nil; unset[#unset + 1] = k end
      end
      local dir = h.project { ["program.luma"] = source:format(""), ["tools.lua"] = tools, ["luma.config.json"] = contexts }
      local r = h.run({ "program.luma" }, { cwd = dir, env = e, unset = unset })
      assert.are.equal(1, r.status)
      assert.are.equal("Error: [TOOL_CONTEXT_INVALID] " .. c[3] .. "\n", r.stderr)
    end)
  end

  it("check the value against the declared schema", function()
    local dir = h.project { ["program.luma"] = (source:format(""):gsub("port: int", "port: int @range(1, 100)")),
      ["tools.lua"] = tools, ["luma.config.json"] = contexts }
    local r = h.run({ "program.luma" }, { cwd = dir, env = env })
    assert.are.equal("Error: [TOOL_CONTEXT_INVALID] db_read.needs.db.port must be at most 100\n", r.stderr)
  end)

  it("let an agent without tool_contexts use every context", function()
    local r = run(nil, nil, { "program.luma", "--agent", "Reader" })
    assert.are.equal(0, r.status, r.stderr)
  end)

  it("narrow to the agent's tool_contexts: an empty list allows none", function()
    local r = run("tool_contexts: []", nil, { "program.luma", "--agent", "Reader" })
    assert.are.equal("Error: [TOOL_CONTEXT_INVALID] Tool 'db_read' needs 'db', which the agent's tool_contexts do not allow.\n", r.stderr)
    r = run('tool_contexts: ["db"]', nil, { "program.luma", "--agent", "Reader" })
    assert.are.equal(0, r.status, r.stderr)
  end)

  it("fail when no configuration provides the context", function()
    local dir = h.project { ["program.luma"] = source:format(""), ["tools.lua"] = tools,
      ["luma.config.json"] = '{ "tool_modules": ["tools.lua"] }' }
    local r = h.run({ "program.luma" }, { cwd = dir, env = env })
    assert.are.equal("Error: [TOOL_CONTEXT_INVALID] Tool 'db_read' needs 'db', which no tool_contexts entry of the configuration provides.\n", r.stderr)
  end)
end)

describe("pipeline step 8: the cache", function()
  it("keeps a result for the same input and skips the handler", function()
    local p = program()
    local events = events_of(p)
    local runs = 0
    p:register("calculate", function(i) runs = runs + 1 return { result = i.a + i.b } end)
    local _, m1 = p:call("calculate", { a = 2, b = 3, operation = "add" })
    local r2, m2 = p:call("calculate", { operation = "add", b = 3, a = 2 })
    assert.are.equal(1, runs)
    assert.are.same({ result = 5 }, r2)
    assert.is_false(m1.cache_hit)
    assert.is_true(m2.cache_hit)
    assert.is_true(events[2].cache_hit)
    p:call("calculate", { a = 2, b = 4, operation = "add" })
    assert.are.equal(2, runs)
  end)

  it("hands out copies: changing one result does not change the cache", function()
    local p = program()
    p:register("calculate", function(i) return { result = i.a + i.b } end)
    local first = add(p)
    first.result = 99
    assert.are.equal(5, add(p).result)
  end)

  it("does not keep failures", function()
    local p = program()
    local runs = 0
    p:register("calculate", function() runs = runs + 1 error("boom") end)
    h.raised(add, p)
    h.raised(add, p)
    assert.are.equal(2, runs)
  end)
end)

describe("pipeline step 10: the handler", function()
  local slow = h.calculate .. [[
tool spin(mode: string) -> CalcResult { timeout: 150 }
agent Capped {
  tools: [spin]
  tool_timeout_max: 60
  fn run() { return tool spin({ mode: "ignore" }) }
}]]
  local spin_tools = [[return { ]] .. CALC .. [[
    spin = function(input, signal)
      if input.mode == "ignore" then while true do end end
      if input.mode == "pcall" then while true do pcall(function() while true do end end) end end
      if input.mode == "check" then while true do signal:check() end end
      if input.mode == "poll" then while not signal.aborted do end return { result = signal.reason == "timeout" and 1 or 0 } end
      if input.mode == "fresh" then return { result = signal.aborted and 1 or 0 } end
    end,
  }]]

  local function spin_program()
    local dir = h.project { ["program.luma"] = slow, ["tools.lua"] = spin_tools }
    return assert(h.load(dir, { tool_modules = { dir .. "/tools.lua" } }))
  end

  it("gets an abort signal that has not fired", function()
    assert.are.same({ result = 0 }, (spin_program():call("spin", { mode = "fresh" })))
  end)

  it("stops a CPU-bound handler that ignores its signal at the deadline: TOOL_TIMEOUT", function()
    local err = h.raised(spin_program().call, spin_program(), "spin", { mode = "ignore" })
    assert.are.same({ "TOOL_TIMEOUT", "Tool 'spin' timed out after 150 ms." }, { err.code, err.message })
  end)

  it("stops it even when it catches the stop with pcall", function()
    local p = spin_program()
    local err = h.raised(p.call, p, "spin", { mode = "pcall" })
    assert.are.equal("TOOL_TIMEOUT", err.code)
  end)

  it("lets signal:check() raise TOOL_TIMEOUT, and signal.aborted turn true", function()
    local p = spin_program()
    assert.are.equal("TOOL_TIMEOUT", h.raised(p.call, p, "spin", { mode = "check" }).code)
    assert.are.equal("TOOL_TIMEOUT", h.raised(p.call, p, "spin", { mode = "poll" }).code)
  end)

  it("caps the timeout with the agent's tool_timeout_max", function()
    local p = spin_program()
    local err = h.raised(p:agent("Capped").call, p:agent("Capped"), "run")
    assert.are.same({ "TOOL_TIMEOUT", "Tool 'spin' timed out after 60 ms." }, { err.code, err.message })
  end)

  it("fails a handler registered from the host that returns past its timeout with TOOL_TIMEOUT", function()
    local dir = h.project { ["program.luma"] = slow }
    local p = assert(h.load(dir, { config = false }))
    p:register("spin", function()
      local t = os.clock()
      while os.clock() - t < 0.3 do end
      return { result = 1 }
    end)
    local err = h.raised(p.call, p, "spin", { mode = "ignore" })
    assert.are.same({ "TOOL_TIMEOUT", "Tool 'spin' timed out after 150 ms." }, { err.code, err.message })
  end)

  it("keeps the module usable after a timeout", function()
    local p = spin_program()
    h.raised(p.call, p, "spin", { mode = "ignore" })
    assert.are.same({ result = 0 }, (p:call("spin", { mode = "fresh" })))
  end)

  it("turns a plain error into TOOL_FAILED", function()
    local dir = h.project { ["program.luma"] = h.calculate, ["tools.lua"] = "return { calculate = function() error('boom') end }" }
    local p = assert(h.load(dir, { tool_modules = { dir .. "/tools.lua" } }))
    local err = h.raised(add, p)
    assert.are.equal("TOOL_FAILED", err.code)
    assert.matches("tools.lua:1: boom$", err.message)
    assert.is_false(err.retryable)
  end)

  it("reads a raised non-string value without running its code", function()
    local dir = h.project { ["program.luma"] = h.calculate, ["tools.lua"] = [[return { calculate = function()
      error(setmetatable({}, { __tostring = function() while true do end end }))
    end }]] }
    local p = assert(h.load(dir, { tool_modules = { dir .. "/tools.lua" } }))
    assert.are.same({ "TOOL_FAILED", "Tool 'calculate' raised a table value." }, { h.raised(add, p).code, h.raised(add, p).message })
  end)

  it("passes a luma.ToolError through with its fields", function()
    local dir = h.project { ["program.luma"] = h.calculate, ["tools.lua"] = [[return { calculate = function()
      error(luma.ToolError { code = "DB_TIMEOUT", message = "Database timeout", retryable = false, details = { table = "t" } })
    end }]] }
    local p = assert(h.load(dir, { tool_modules = { dir .. "/tools.lua" } }))
    local err = h.raised(add, p)
    assert.are.same({ "DB_TIMEOUT", "Database timeout", false, { table = "t" }, "calculate" },
      { err.code, err.message, err.retryable, err.details, err.tool })
    assert.are.equal("[DB_TIMEOUT] Database timeout", tostring(err))
  end)
end)

describe("pipeline step 10: retries", function()
  local function retrying(config)
    return h.calculate .. ([[
tool flaky(n: int) -> CalcResult {
  %s
}]]):format(config)
  end

  -- fails `failures` times with the given retryable flag, then succeeds
  local function flaky(p, failures, retryable)
    local calls = 0
    p:register("flaky", function()
      calls = calls + 1
      if calls <= failures then error(luma.error { code = "BUSY", message = "busy " .. calls, retryable = retryable }) end
      return { result = calls }
    end)
    return function() return calls end
  end

  local function load_with_clock(source)
    local clock = h.clock()
    local dir = h.project { ["program.luma"] = source }
    return assert(h.load(dir, { config = false, clock = clock })), clock
  end

  it("retries a retryable error up to `retries` more times", function()
    local p = load_with_clock(retrying("retries: 2"))
    local calls = flaky(p, 2, true)
    local result, meta = p:call("flaky", { n = 1 })
    assert.are.same({ result = 3 }, result)
    assert.are.equal(3, meta.attempts)
    assert.are.equal(3, calls())
  end)

  it("gives up after `retries` and returns the last error", function()
    local p = load_with_clock(retrying("retries: 2"))
    local calls = flaky(p, 5, true)
    local err = h.raised(p.call, p, "flaky", { n = 1 })
    assert.are.same({ "BUSY", "busy 3" }, { err.code, err.message })
    assert.are.equal(3, calls())
  end)

  it("stops at once on retryable = false", function()
    local p = load_with_clock(retrying("retries: 5"))
    local calls = flaky(p, 5, false)
    assert.are.equal("BUSY", h.raised(p.call, p, "flaky", { n = 1 }).code)
    assert.are.equal(1, calls())
  end)

  it("waits 0 ms between attempts by default (backoff none)", function()
    local p, clock = load_with_clock(retrying("retries: 3"))
    flaky(p, 3, true)
    p:call("flaky", { n = 1 })
    assert.are.same({}, clock.sleeps)
  end)

  it("waits d, d, d with backoff fixed", function()
    local p, clock = load_with_clock(retrying('retries: 3\n retry_backoff: "fixed"\n retry_delay: 250'))
    flaky(p, 3, true)
    p:call("flaky", { n = 1 })
    assert.are.same({ 250, 250, 250 }, clock.sleeps)
  end)

  it("waits d, 2d, 4d with backoff exponential (default d = 100)", function()
    local p, clock = load_with_clock(retrying('retries: 3\n retry_backoff: "exponential"'))
    flaky(p, 3, true)
    p:call("flaky", { n = 1 })
    assert.are.same({ 100, 200, 400 }, clock.sleeps)
  end)

  it("stops retrying once the signal fired: no wait past the deadline", function()
    local p, clock = load_with_clock(retrying('retries: 5\n retry_backoff: "exponential"\n timeout: 250'))
    local calls = flaky(p, 9, true)
    assert.are.equal("BUSY", h.raised(p.call, p, "flaky", { n = 1 }).code)
    assert.are.same({ 100 }, clock.sleeps)
    assert.are.equal(2, calls())
  end)

  it("does not wait a delay past the deadline, however long the delay", function()
    local p, clock = load_with_clock(retrying('retries: 3\n retry_backoff: "fixed"\n retry_delay: 9223372036854775807'))
    local calls = flaky(p, 9, true)
    assert.are.equal("BUSY", h.raised(p.call, p, "flaky", { n = 1 }).code)
    assert.are.same({}, clock.sleeps)
    assert.are.equal(1, calls())
  end)

  it("waits a timeout too long to count as forever, not as already past", function()
    local p = load_with_clock(retrying("timeout: 9223372036854775807"))
    flaky(p, 0, true)
    assert.are.same({ result = 1 }, (p:call("flaky", { n = 1 })))
  end)
end)

describe("pipeline step 11: output validation", function()
  it("fails with TOOL_OUTPUT_INVALID", function()
    local p = program()
    p:register("calculate", function() return { result = "five" } end)
    local err = h.raised(add, p)
    assert.are.same({ "TOOL_OUTPUT_INVALID", "calculate.output.result must be a number" }, { err.code, err.message })
  end)

  it("requires the union tag of an output", function()
    local p = program([[
schema Invoice { invoice_number: string }
schema Receipt { reference: string }
schema Document = Invoice | Receipt tagged by kind
tool classify(text: string) -> Document {}]])
    p:register("classify", function() return { invoice_number = "A-1" } end)
    local err = h.raised(p.call, p, "classify", { text = "x" })
    assert.are.equal("[TOOL_OUTPUT_INVALID] classify.output.kind must identify a tagged union member.", tostring(err))
  end)

  it("turns soft rules into warnings in the metadata and in telemetry", function()
    local p = program([[
schema Reading { celsius: float @range(-50, 60) @severity("soft") }
tool read_sensor(id: string) -> Reading {}]])
    local events = events_of(p)
    p:register("read_sensor", function() return { celsius = 80 } end)
    local result, meta = p:call("read_sensor", { id = "s" })
    assert.are.same({ celsius = 80 }, result)
    assert.are.equal("read_sensor.output.celsius must be at most 60", meta.warnings[1].message)
    assert.are.same({ "read_sensor.output.celsius must be at most 60" }, events[1].warnings)
  end)

  it("checks a handler's error against the tool's error schema: TOOL_ERROR_INVALID", function()
    local p = program([[
schema ToolError { code: enum["DB_TIMEOUT", "DB_DOWN"], message: string, retryable: bool, details?: any }
tool db_read(q: string) -> CalcResult { error: ToolError }]])
    p:register("db_read", function(i)
      error(luma.error { code = i.q == "ok" and "DB_DOWN" or "OTHER", message = "x" })
    end)
    assert.are.equal("DB_DOWN", h.raised(p.call, p, "db_read", { q = "ok" }).code)
    local err = h.raised(p.call, p, "db_read", { q = "bad" })
    assert.are.same({ "TOOL_ERROR_INVALID", 'db_read.error.code must be one of "DB_TIMEOUT", "DB_DOWN"' }, { err.code, err.message })
  end)
end)

describe("pipeline step 12: the circuit breaker", function()
  local source = [[
agent Fragile {
  tools: [calculate]
  tool_failure_limit: 2
  fn run() {
    try { tool calculate({ a: 1, b: 1, operation: "add" }) } catch e { c1 = e.code }
    try { tool calculate({ a: 1, b: 1, operation: "add" }) } catch e { c2 = e.code
      r2 = e.retryable }
    try { tool calculate({ a: 1, b: 1, operation: "add" }) } catch e { c3 = e.code }
    return [c1, c2, r2, c3]
  }
}]]

  it("opens at tool_failure_limit failures of one method call, and stays open for it", function()
    local p = program(source)
    local calls = 0
    p:register("calculate", function() calls = calls + 1 error("down") end)
    local r = p:agent("Fragile"):call("run")
    assert.are.same({ "TOOL_FAILED", "TOOL_CIRCUIT_OPEN", false, "TOOL_CIRCUIT_OPEN" }, r)
    assert.are.equal(2, calls)
  end)

  it("counts afresh in each method call", function()
    local p = program(source)
    local calls = 0
    p:register("calculate", function() calls = calls + 1 error("down") end)
    p:agent("Fragile"):call("run")
    p:agent("Fragile"):call("run")
    assert.are.equal(4, calls)
  end)
end)

describe("telemetry", function()
  it("gives one event per call with the documented fields", function()
    local p = program()
    local events = events_of(p)
    p:register("calculate", function(i) return { result = i.a + i.b } end)
    add(p)
    h.raised(add, p, { a = -1, b = 1, operation = "add" })
    local e = events[1]
    assert.are.same({ "agent", "attempts", "cache_hit", "code", "duration_ms", "idempotent_replay", "single_flight",
      "status", "tool", "warnings" }, (function()
      local keys = {}
      for k in pairs(e) do keys[#keys + 1] = k end
      table.sort(keys)
      return keys
    end)())
    assert.are.same({ "calculate", luma.null, "ok", luma.null, 1, false, false, false, {} },
      { e.tool, e.agent, e.status, e.code, e.attempts, e.cache_hit, e.single_flight, e.idempotent_replay, e.warnings })
    assert.are.equal("number", type(e.duration_ms))
    assert.are.same({ "error", "TOOL_INPUT_INVALID", 0 }, { events[2].status, events[2].code, events[2].attempts })
  end)

  it("names the agent of a method call", function()
    local p = program("agent A {\n tools: [calculate]\n fn run() { return tool calculate({ a: 1, b: 1, operation: \"add\" }) } }")
    local events = events_of(p)
    p:register("calculate", function() return { result = 2 } end)
    p:agent("A"):call("run")
    assert.are.equal("A", events[1].agent)
  end)

  it("writes JSON lines with --trace", function()
    local dir = h.project { ["program.luma"] = h.calculate .. 'x = tool calculate({ a: 1, b: 2, operation: "add" })\ny = tool calculate({ a: 1, b: 2, operation: "add" })',
      ["tools.lua"] = h.read(h.root .. "/spec/fixtures/calc_tools.lua") }
    local r = h.run({ "program.luma", "--tool-module", "tools.lua", "--trace", "trace.jsonl" }, { cwd = dir })
    assert.are.equal(0, r.status, r.stderr)
    local lines = {}
    for line in h.read(dir .. "/trace.jsonl"):gmatch("[^\n]+") do lines[#lines + 1] = cjson.decode(line) end
    assert.are.equal(2, #lines)
    assert.is_false(lines[1].cache_hit)
    assert.is_true(lines[2].cache_hit)
    assert.are.equal("calculate", lines[2].tool)
  end)

  it("keeps going when on_event fails", function()
    local p = program()
    p:configure { on_event = function() error("sink down") end }
    p:register("calculate", function() return { result = 1 } end)
    assert.are.same({ result = 1 }, add(p))
  end)

  it("tells a failure of on_event to the trace, as a warning, and not to stderr", function()
    local trace = h.tmpname("-trace")
    local p = program()
    p:configure { on_event = function() error("sink down", 0) end, trace = trace }
    p:register("calculate", function() return { result = 1 } end)
    add(p)
    local lines = {}
    for line in h.read(trace):gmatch("[^\n]+") do lines[#lines + 1] = cjson.decode(line) end
    os.remove(trace)
    assert.are.equal(2, #lines)
    assert.are.equal("calculate", lines[1].tool)
    assert.are.same({ kind = "warning", message = "on_event failed: sink down" }, lines[2])
  end)
end)
