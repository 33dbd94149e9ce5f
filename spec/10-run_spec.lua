local luma = require "luma"
local cjson = require "cjson"
local h = require "spec.helpers"

local CALC_TOOLS = h.read(h.root .. "/spec/fixtures/calc_tools.lua")

local STATS_TOOLS = [[
return {
  calculate = function(input)
    if input.operation == "add" then return { result = input.a + input.b } end
    if input.operation == "multiply" then return { result = input.a * input.b } end
    error(luma.ToolError { code = "UNSUPPORTED", message = "Unsupported operation", retryable = false })
  end,
  text_stats = function(input)
    local words = 0
    for _ in input.text:gmatch("%S+") do words = words + 1 end
    return { words = words, characters = #input.text }
  end,
}]]

local FLOW = h.calculate .. [[
schema Stats { words: int, characters: int }
tool text_stats(text: string) -> Stats {}
schema Answer { words: int, bonus?: float, note: string }

agent Flow {
  tools: [text_stats, calculate]
  fn run(text: string) -> Answer {
    stats = tool text_stats({ text: text })
    if stats.words > 3 {
      bonus = tool calculate({ a: stats.words, b: 2, operation: "multiply" })
    }
    note = "words={stats.words} bonus={bonus}"
    if bonus == null {
      return { words: stats.words, note: note }
    }
    { words: stats.words, bonus: bonus.result, note: note }
  }
  fn only_stats() -> CalcResult {
    tool calculate({ a: 1, b: 2, operation: "add" })
  }
}
]]

local function project(program, tools)
  return h.project { ["program.luma"] = program, ["tools.lua"] = tools or STATS_TOOLS,
    ["luma.config.json"] = '{ "tool_modules": ["tools.lua"] }' }
end

describe("luma-lua PROGRAM", function()
  it("runs the top-level statements and prints their variables as JSON with sorted keys", function()
    local dir = project(h.calculate .. [[
zeta = tool calculate({ a: 2, b: 3, operation: "add" })
alpha = tool calculate({ a: 2, b: 3, operation: "multiply" })
n = 1 + 2 * 3
]])
    local r = h.run({ "program.luma" }, { cwd = dir })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal('{\n  "alpha": {\n    "result": 6\n  },\n  "n": 7,\n  "zeta": {\n    "result": 5\n  }\n}\n', r.stdout)
  end)

  it("is also `luma-lua run PROGRAM`", function()
    local dir = project(h.calculate .. 'x = tool calculate({ a: 1, b: 1, operation: "add" })')
    local r = h.run({ "run", "program.luma" }, { cwd = dir })
    assert.are.same({ x = { result = 2 } }, cjson.decode(r.stdout))
  end)

  it("calls an agent method with --agent, --method and --input", function()
    local dir = project(FLOW)
    local r = h.run({ "program.luma", "--agent", "Flow", "--input", '{"text": "one two three four five"}' }, { cwd = dir })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ words = 5, bonus = 10, note = 'words=5 bonus={"result":10}' }, cjson.decode(r.stdout))
    r = h.run({ "program.luma", "--agent", "Flow", "--input", '{"text": "short"}' }, { cwd = dir })
    assert.are.same({ words = 1, note = "words=1 bonus=null" }, cjson.decode(r.stdout))
  end)

  it("prints an uncaught error as Error: [CODE] message and exits 1", function()
    local dir = project(h.calculate .. 'x = tool calculate({ a: -1, b: 1, operation: "add" })')
    local r = h.run({ "program.luma" }, { cwd = dir })
    assert.are.equal(1, r.status)
    assert.are.equal("Error: [TOOL_INPUT_INVALID] program.luma:13:5: calculate.input.a must be at least 0\n", r.stderr)
    assert.are.equal("", r.stdout)
  end)

  it("prints load errors as Error: message and exits 2", function()
    local dir = project("schema A { x: Nope }")
    local r = h.run({ "program.luma" }, { cwd = dir })
    assert.are.equal(2, r.status)
    assert.matches("^program.luma:1:15: Unknown type 'Nope'.", r.stderr)
    dir = project(h.calculate)
    r = h.run({ "program.luma", "--config", "missing.json" }, { cwd = dir })
    assert.are.equal(2, r.status)
    assert.are.equal("Error: cannot read 'missing.json': No such file or directory\n", r.stderr)
  end)

  it("refuses a tool outside the agent's tools", function()
    local dir = project(FLOW)
    local r = h.run({ "program.luma", "--agent", "Flow", "--method", "only_stats" }, { cwd = dir })
    assert.are.equal(0, r.status, r.stderr)
    local dir2 = project((FLOW:gsub("tools: %[text_stats, calculate%]", "tools: [text_stats]")))
    r = h.run({ "program.luma", "--agent", "Flow", "--method", "only_stats" }, { cwd = dir2 })
    assert.are.equal(1, r.status)
    assert.are.equal("Error: [TOOL_PERMISSION_DENIED] Agent 'Flow' does not allow tool 'calculate' to be called directly.\n", r.stderr)
  end)

  it("says what is wrong with the command line", function()
    local dir = project(FLOW)
    local cases = {
      { { "program.luma", "--frob" }, "unknown option '--frob'" },
      { { "program.luma", "--input", "{}" }, "--method and --input go with --agent" },
      { { "program.luma", "--tool-module" }, "--tool-module needs a value" },
      { { "run" }, "run needs a PROGRAM" },
    }
    for _, c in ipairs(cases) do
      local r = h.run(c[1], { cwd = dir })
      assert.are.equal(2, r.status)
      assert.matches(c[2], r.stderr, 1, true)
    end
    local r = h.run({ "program.luma", "--agent", "Flow", "--input", "[1]" }, { cwd = dir })
    assert.are.equal("Error: --input must be a JSON object of the method's arguments\n", r.stderr)
    r = h.run({ "program.luma", "--agent", "Nope" }, { cwd = dir })
    assert.are.equal(2, r.status)
    assert.are.equal("Error: Unknown agent 'Nope'.\n", r.stderr)
    r = h.run({ "program.luma", "--agent", "Flow", "--method", "nope" }, { cwd = dir })
    assert.are.equal("Error: Agent 'Flow' has no method 'nope'.\n", r.stderr)
  end)

  it("checks --input against the method's parameters", function()
    local dir = project(FLOW)
    local r = h.run({ "program.luma", "--agent", "Flow", "--input", '{"txt": "x"}' }, { cwd = dir })
    assert.are.equal(2, r.status)
    assert.are.equal("Error: Flow.run.input.text is required\n", r.stderr)
  end)

  it("checks a method's result against its return type", function()
    local dir = project((FLOW:gsub('return { words: stats.words, note: note }', 'return { words: "many", note: note }')))
    local r = h.run({ "program.luma", "--agent", "Flow", "--input", '{"text": "x"}' }, { cwd = dir })
    assert.are.equal(1, r.status)
    assert.are.equal("Error: [VALIDATION_FAILED] Flow.run.output.words must be an integer\n", r.stderr)
  end)

  it("shows the Lua the program compiles to with --emit-lua", function()
    local dir = project(FLOW)
    local r = h.run({ "run", "--emit-lua", "program.luma" }, { cwd = dir })
    assert.are.equal(0, r.status)
    assert.matches("function M.main(scope)", r.stdout, 1, true)
    assert.matches('R.tool(scope, "text_stats", { ["text"] = v_text }', r.stdout, 1, true)
    assert.is_truthy(load(r.stdout, "=emitted", "t", {}))
  end)
end)

describe("statements", function()
  -- After the body, so that positions in it do not move: `tool value({ v: x }).v`
  -- is x as a value of type any, whose kind only the run knows.
  local ANY = "\nschema Any { v?: any }\ntool value(v?: any) -> Any {}"
  local function run(body, tools)
    local program = luma.compile(h.calculate .. body .. ANY)
    program:register("calculate", function(i)
      if i.operation == "add" then return { result = i.a + i.b } end
      return { result = i.a * i.b }
    end)
    program:register("value", function(i) return i end)
    for name, fn in pairs(tools or {}) do program:register(name, fn) end
    return program:run()
  end

  it("compute with numbers and strings", function()
    local v = run('a = 7 / 2\nb = 7 % 3\nc = -(2 - 5)\nd = "ab" + "cd"\ne = 2 * (3 + 4)')
    assert.are.same({ a = 3.5, b = 1, c = 3, d = "abcd", e = 14 }, v)
  end)

  it("compare values, JSON-equal tables included", function()
    local v = run('a = { x: [1, 2] } == { x: [1, 2] }\nb = 1 != 2\nc = "a" < "b"\nd = null == null\ne = 2 >= 3')
    assert.are.same({ a = true, b = true, c = true, d = true, e = false }, v)
  end)

  it("treat null and false as false", function()
    local v = run('if null { a = 1 } else { a = 2 }\nif 0 { b = 1 } else { b = 2 }\nc = not null\nd = true and null\ne = false or "x"')
    assert.are.same({ a = 2, b = 1, c = true, d = false, e = true }, v)
  end)

  it("read fields and 1-based indexes", function()
    local v = run('r = tool calculate({ a: 1, b: 2, operation: "add" })\nx = r.result\nl = [10, 20, 30]\ny = l[2]')
    assert.are.equal(3, v.x)
    assert.are.equal(20, v.y)
  end)

  it("give null for a missing field or an index past the end, and keep the variable in the output", function()
    local v = run('l = [1, 2]\ny = l[99]\nr = { a: 1 }\nz = r.missing\nw = z == null\nif z { q = 1 } else { q = 2 }')
    assert.are.same({ luma.null, luma.null, true, 2 }, { v.y, v.z, v.w, v.q })
  end)

  it("print a variable that holds null, or that a branch did not set, as null in the run's JSON", function()
    local dir = project('if false { y = 1 }\nz = y\nn = null\ntry { q = 1 } catch e { q = 2 }\nafter = e')
    local r = h.run({ "program.luma" }, { cwd = dir })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal('{\n  "after": null,\n  "e": null,\n  "n": null,\n  "q": 1,\n  "y": null,\n  "z": null\n}\n', r.stdout)
    local v = run("if false { y = 1 }\nz = y")
    assert.are.same({ luma.null, luma.null }, { v.y, v.z })
  end)

  it("fail with the position on indexing what is not a list or an object, and on modulo by zero", function()
    local cases = {
      { "x = tool value({ v: 5 }).v\ny = x[1]", "program.luma:14:6: cannot index number" },
      { 'x = tool value({ v: "abc" }).v\ny = x.length', "program.luma:14:6: cannot read field 'length' of string" },
      { "x = 7 % 0", "program.luma:13:7: division by zero" },
      { "x = 7.5 / 0", "program.luma:13:9: division by zero" },
    }
    for _, c in ipairs(cases) do
      local err = h.raised(run, c[1])
      assert.are.equal("RUNTIME_ERROR", err.code)
      assert.are.equal(c[2], err.message)
    end
  end)

  it("run a method with 300 variables and a top level with 1,000, try blocks among them", function()
    local lines = { "agent A {", " fn run(p: int) {" }
    for i = 1, 300 do lines[#lines + 1] = ("  v%d = %d"):format(i, i) end
    lines[#lines + 1] = "  try { q = v1 + p } catch e { q = 0 }"
    lines[#lines + 1] = "  v300 + q"
    lines[#lines + 1] = " }"
    lines[#lines + 1] = "}"
    for i = 1, 1000 do lines[#lines + 1] = ("w%d = %d"):format(i, i) end
    lines[#lines + 1] = "try { u = w1000 + w1 } catch e { u = 0 }"
    local program = luma.compile(table.concat(lines, "\n"))
    local v = program:run()
    assert.are.same({ 1, 1000, 1001 }, { v.w1, v.w1000, v.u })
    assert.are.equal(306, program:agent("A"):call("run", { p = 5 }))
  end)

  it("fail clearly on a field of null", function()
    local err = h.raised(run, "x = tool value({}).v\ny = x.field")
    assert.are.equal("RUNTIME_ERROR", err.code)
    assert.are.equal("program.luma:14:6: cannot read field 'field' of null", err.message)
  end)

  it("fail clearly on arithmetic with the wrong types", function()
    local err = h.raised(run, 'a = tool value({ v: "a" }).v\nx = 1 + a')
    assert.are.equal("program.luma:14:7: cannot apply '+' to number and string", err.message)
    err = h.raised(run, "x = 1 / 0")
    assert.are.equal("program.luma:13:7: division by zero", err.message)
  end)

  it("stop on integer arithmetic that does not fit 64 bits, instead of wrapping", function()
    local cases = {
      { "x = 9223372036854775807 + 1", "program.luma:13:25: integer overflow: 9223372036854775807 + 1 does not fit a 64-bit integer" },
      { "m = -9223372036854775807 - 1\nx = m - 1", "program.luma:14:7: integer overflow: -9223372036854775808 - 1 does not fit a 64-bit integer" },
      { "x = 4294967296 * 4294967296", "program.luma:13:16: integer overflow: 4294967296 * 4294967296 does not fit a 64-bit integer" },
      { "m = -9223372036854775807 - 1\nx = -m", "program.luma:14:5: integer overflow: -(-9223372036854775808) does not fit a 64-bit integer" },
    }
    for _, c in ipairs(cases) do
      local err = h.raised(run, c[1])
      assert.are.equal("RUNTIME_ERROR", err.code)
      assert.are.equal(c[2], err.message)
    end
    local v = run("a = 9223372036854775806 + 1\nb = 3037000499 * 3037000499\nc = -9223372036854775807 - 1\nd = 2.0 * 4611686018427387904")
    assert.are.same({ 9223372036854775807, 9223372030926249001, math.mininteger, 2.0 ^ 63 }, { v.a, v.b, v.c, v.d })
  end)

  it("hand the typed error to catch unchanged", function()
    local program = luma.compile(h.calculate .. [[
agent A {
  tools: [calculate]
  fn run() {
    try {
      tool calculate({ a: 1, b: 2, operation: "add" })
    } catch e {
      return { code: e.code, message: e.message, retryable: e.retryable, details: e.details }
    }
  }
}]])
    program:register("calculate", function()
      error(luma.ToolError { code = "DB_TIMEOUT", message = "Database timeout", retryable = false, details = { table = "t" } })
    end)
    assert.are.same({ code = "DB_TIMEOUT", message = "Database timeout", retryable = false, details = { table = "t" } },
      program:agent("A"):call("run"))
  end)

  it("return from inside try, and from nested try and catch", function()
    local program = luma.compile([[
agent A {
  fn run(x: int) {
    try {
      try {
        if x == 1 { return "inner" }
        y = 1 / 0
      } catch e {
        if x == 2 { return "caught" }
      }
      return "outer"
    } catch e { return "never" }
  }
}]])
    assert.are.equal("inner", program:agent("A"):call("run", { x = 1 }))
    assert.are.equal("caught", program:agent("A"):call("run", { x = 2 }))
    assert.are.equal("outer", program:agent("A"):call("run", { x = 3 }))
  end)

  it("check `x: T = tool ...` against T", function()
    local program = luma.compile(h.calculate .. [[
schema Other { value: string }
agent A {
  tools: [calculate]
  fn run() {
    x: Other = tool calculate({ a: 1, b: 2, operation: "add" })
    return x
  }
}]])
    program:register("calculate", function(i) return { result = 3 } end)
    local err = h.raised(program:agent("A").call, program:agent("A"), "run")
    assert.are.equal("TOOL_OUTPUT_INVALID", err.code)
    assert.matches("x%.result is not allowed$", err.message)
  end)

  it("an ask whose model has no key fails before any request, naming the variable", function()
    local program = luma.compile('schema R { v: int }\nmodel M { provider: "openai"\n name: "m"\n base_url: "http://127.0.0.1:9"\n api_key_env: "LUMA_TEST_NO_SUCH_KEY" }\nagent A { model: M\n fn run() -> R { ask "hi" -> R } }')
    local err = h.raised(program:agent("A").call, program:agent("A"), "run")
    assert.are.equal("ASK_KEY_MISSING", err.code)
    assert.are.equal("Model 'M' needs the environment variable LUMA_TEST_NO_SUCH_KEY, which is not set.", err.message)
    assert.are.equal("A", err.agent)
  end)
end)

describe("the Lua API", function()
  it("program:call runs a direct call and returns the result and its metadata", function()
    local program = luma.compile(h.calculate)
    program:register("calculate", function(input) return { result = input.a + input.b } end)
    local result, meta = program:call("calculate", { a = 2, b = 3, operation = "add" })
    assert.are.same({ result = 5 }, result)
    assert.are.equal(1, meta.attempts)
    assert.is_false(meta.cache_hit)
    assert.is_nil(meta.warnings)
  end)

  it("program:register refuses a second handler and unknown tools", function()
    local program = luma.compile(h.calculate)
    program:register("calculate", function() end)
    assert.are.equal("Tool registry conflict: calculate.", h.raised(program.register, program, "calculate", function() end).message)
    assert.are.equal("Unknown tool 'nope'.", h.raised(program.register, program, "nope", function() end).message)
  end)

  it("program:agent(name):call(method, args) calls a method", function()
    local dir = project(FLOW)
    local program = assert(h.load(dir))
    assert.are.same({ words = 1, note = "words=1 bonus=null" }, program:agent("Flow"):call("run", { text = "hi" }))
  end)

  it("an unknown tool or agent name gets the closest declared one", function()
    local program = luma.compile(h.calculate .. "agent Planner { tools: [calculate] }")
    local err = h.raised(program.call, program, "calculat", {})
    assert.are.same({ "TOOL_NOT_FOUND", "Unknown tool 'calculat'. Did you mean 'calculate'?" }, { err.code, err.message })
    err = h.raised(program.register, program, "calculat", function() end)
    assert.are.equal("Unknown tool 'calculat'. Did you mean 'calculate'?", err.message)
    err = h.raised(program.call_all, program, { { "calculat", {} } })
    assert.are.equal("Unknown tool 'calculat'. Did you mean 'calculate'?", err.message)
    err = h.raised(program.agent, program, "Planer")
    assert.are.same({ "AGENT_NOT_FOUND", "Unknown agent 'Planer'. Did you mean 'Planner'?" }, { err.code, err.message })
    err = h.raised(program.call, program, "zzzzzzzz", {})
    assert.are.equal("Unknown tool 'zzzzzzzz'.", err.message)
  end)

  it("program:call of a tool without a handler is TOOL_NOT_FOUND", function()
    local program = luma.compile(h.calculate)
    local err = h.raised(program.call, program, "calculate", { a = 1, b = 1, operation = "add" })
    assert.are.equal("TOOL_NOT_FOUND", err.code)
    assert.are.equal("'calculate' is not registered in the tool registry.", err.message)
    assert.are.equal("calculate", err.tool)
  end)
end)

describe("the example of make demo", function()
  it("checks, lists its tools and runs", function()
    local cwd = h.root
    assert.are.equal("ok\n", h.run({ "check", "examples/calculate.luma" }, { cwd = cwd }).stdout)
    assert.are.same({ total = { result = 42 } }, cjson.decode(h.run({ "examples/calculate.luma" }, { cwd = cwd }).stdout))
    local r = h.run({ "examples/calculate.luma", "--agent", "Flow", "--method", "measure",
      "--input", '{"text": "INV-2041 paid in full on the first of May"}' }, { cwd = cwd })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ words = 9, bonus = 18, kind = "Invoice" }, cjson.decode(r.stdout))
  end)
end)
