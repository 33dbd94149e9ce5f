local h = require "spec.helpers"

describe("luma-lua check", function()
  it("prints ok and exits 0 for a valid program", function()
    local r = h.run { "check", h.program_file(h.calculate) }
    assert.are.equal(0, r.status)
    assert.are.equal("ok\n", r.stdout)
  end)

  it("prints every error with its source line and a caret, and exits 1", function()
    local path = h.program_file("schema A {\n  x: strng\n  y: int @rnage(1, 2)\n}\n")
    local r = h.run { "check", path }
    assert.are.equal(1, r.status)
    assert.are.equal("", r.stdout)
    assert.are.equal(
      path .. ":2:6: Unknown type 'strng'. Did you mean 'string'?\n" ..
      "  x: strng\n" ..
      "     ^\n" ..
      path .. ":3:10: Unknown annotation '@rnage'. Did you mean '@range'?\n" ..
      "  y: int @rnage(1, 2)\n" ..
      "         ^\n" ..
      "2 errors\n", r.stderr)
  end)

  it("ends with how many errors were not shown, past the cap of 50", function()
    local lines = {}
    for i = 1, 60 do lines[i] = "schema S" .. i .. " { x: nope }" end
    local r = h.run { "check", h.program_file(table.concat(lines, "\n")) }
    assert.are.equal(1, r.status)
    local last = r.stderr:match("([^\n]*)\n$")
    assert.are.equal("\226\128\166 and 10 more errors", last)
    assert.are.equal(50, select(2, r.stderr:gsub("Unknown type 'nope'", "")))
  end)

  it("reports a variable no statement assigns, in templates, conditions and call arguments too", function()
    local path = h.program_file('x = "hello {nobody}"\nif somebody { y = 1 }\n')
    local r = h.run { "check", path }
    assert.are.equal(1, r.status)
    assert.are.equal(path .. ":1:13: unknown variable 'nobody'\n" .. 'x = "hello {nobody}"\n' .. "            ^\n" ..
      path .. ":2:4: unknown variable 'somebody'\n" .. "if somebody { y = 1 }\n" .. "   ^\n" .. "2 errors\n", r.stderr)
    r = h.run { "run", path }
    assert.are.equal(2, r.status)
    assert.are.equal("", r.stdout)
  end)

  it("reports statements nested deeper than the Lua they compile to allows, as a run would", function()
    local path = h.program_file("x = 0\n" .. string.rep("try {\n", 60) .. "x = 1\n" .. string.rep("} catch { x = 2 }\n", 60))
    local r = h.run { "check", path }
    assert.are.equal(1, r.status)
    assert.matches("the statements are nested too deeply to run", r.stderr, 1, true)
    path = h.program_file("x = 0\n" .. string.rep("try {\n", 40) .. "x = 1\n" .. string.rep("} catch { x = 2 }\n", 40))
    r = h.run { "check", path }
    assert.are.equal(0, r.status, r.stderr)
  end)

  it("takes a mistyped command for one, not for a program", function()
    local r = h.run { "chekc", "x.luma" }
    assert.are.equal(2, r.status)
    assert.are.equal("luma-lua: no such command 'chekc' (did you mean 'check'?)\nRun 'luma-lua --help' for usage.\n", r.stderr)
  end)

  it("says when the file cannot be read", function()
    local r = h.run { "check", "/nonexistent/x.luma" }
    assert.are.equal(1, r.status)
    assert.are.equal("Error: cannot read '/nonexistent/x.luma': No such file or directory\n", r.stderr)
  end)
end)

describe("luma-lua check, with the config and tool modules a run would load", function()
  local CONTRACTS = "schema R { v: int }\ntool lookup() -> R {}\ntool store() -> R {}\n"
  local BOTH = "return { lookup = function() return { v = 1 } end, store = function() return { v = 2 } end }\n"

  local function project(tools, config)
    return h.project { ["program.luma"] = CONTRACTS, ["tools.lua"] = tools,
      ["luma.config.json"] = config or '{ "tool_modules": ["tools.lua"] }' }
  end

  it("is ok when every tool has a handler", function()
    local r = h.run { "check", project(BOTH) .. "/program.luma" }
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal("ok\n", r.stdout)
    assert.are.equal("", r.stderr)
  end)

  it("reports a tool without a handler, with the modules loaded and the closest export", function()
    local dir = project("return { lookup = function() end, stor = function() end }\n")
    local r = h.run { "check", dir .. "/program.luma" }
    assert.are.equal(1, r.status)
    assert.are.equal("", r.stdout)
    assert.matches("program.luma:3:6: tool 'store' has no handler: no tool module exports it (loaded: tools.lua). " ..
      "Did you mean 'stor'?", r.stderr, 1, true)
  end)

  describe("with a tool the embedding host handles (handler: \"host\")", function()
    local HOSTED = CONTRACTS .. 'tool host_calc() -> R { handler: "host" }\n'

    it("is ok though no tool module exports it", function()
      local dir = h.project { ["program.luma"] = HOSTED, ["tools.lua"] = BOTH,
        ["luma.config.json"] = '{ "tool_modules": ["tools.lua"] }' }
      local r = h.run { "check", dir .. "/program.luma" }
      assert.are.equal(0, r.status, r.stderr)
      assert.are.equal("ok\n", r.stdout)
      assert.are.equal("", r.stderr)
    end)

    it("reports a tool module that exports it, since the host's handler would conflict", function()
      local dir = h.project { ["program.luma"] = HOSTED,
        ["tools.lua"] = BOTH:gsub("^return {", "return { host_calc = function() end,"),
        ["luma.config.json"] = '{ "tool_modules": ["tools.lua"] }' }
      local r = h.run { "check", dir .. "/program.luma" }
      assert.are.equal(1, r.status)
      assert.matches("program.luma: tool 'host_calc' is declared handler: \"host\", but tools.lua exports it", r.stderr, 1, true)
    end)

    it("refuses another value, naming the two", function()
      local dir = h.project { ["program.luma"] = CONTRACTS .. 'tool host_calc() -> R { handler: "hots" }\n' }
      local r = h.run { "check", dir .. "/program.luma" }
      assert.are.equal(1, r.status)
      assert.matches("program.luma:4:34: Tool 'host_calc': 'handler' must be one of \"module\", \"host\". " ..
        "Did you mean \"host\"?", r.stderr, 1, true)
    end)
  end)

  it("warns about a handler that no tool declares, and is ok", function()
    local dir = project("return { lookup = function() end, store = function() end, stroe = function() end }\n")
    local r = h.run { "check", dir .. "/program.luma" }
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal("ok\n", r.stdout)
    assert.matches("warning: tools.lua exports 'stroe', which no tool of .*program.luma declares %(did you mean 'store'%?%)",
      r.stderr)
  end)

  it("takes --tool-module and --config as a run does", function()
    local dir = h.project { ["program.luma"] = CONTRACTS, ["tools.lua"] = BOTH,
      ["other.json"] = '{ "tool_modules": ["tools.lua"] }' }
    local r = h.run { "check", dir .. "/program.luma", "--tool-module", dir .. "/tools.lua" }
    assert.are.equal(0, r.status, r.stderr)
    r = h.run { "check", dir .. "/program.luma", "--config", dir .. "/other.json" }
    assert.are.equal(0, r.status, r.stderr)
    r = h.run { "check", dir .. "/program.luma", "--config", dir .. "/missing.json" }
    assert.are.equal(1, r.status)
    assert.matches("cannot read '.*missing.json'", r.stderr)
    r = h.run { "check", dir .. "/program.luma", "--frobnicate" }
    assert.are.equal(2, r.status)
    assert.matches("unknown option '--frobnicate' of check", r.stderr, 1, true)
  end)

  it("reports config errors with the file and the key path", function()
    local r = h.run { "check", project(BOTH, '{ "tool_modules": "tools.lua" }') .. "/program.luma" }
    assert.are.equal(1, r.status)
    assert.matches("luma.config.json: tool_modules must be an array of paths or manifests, not a string", r.stderr, 1, true)
    r = h.run { "check", project(BOTH, '{ "tool_modules": [{ "path": "tools.lua", "integrity": 5 }] }') .. "/program.luma" }
    assert.are.equal(1, r.status)
    assert.matches("luma.config.json: tool_modules[1].integrity must be a string of the form sha256-<base64>, not a number",
      r.stderr, 1, true)
    r = h.run { "check", project(BOTH, '{ "tool_modulez": [] }') .. "/program.luma" }
    assert.are.equal(1, r.status)
    assert.matches("no key 'tool_modulez'. Did you mean 'tool_modules'?", r.stderr, 1, true)
  end)

  it("gives a config's JSON syntax error its line and column", function()
    local r = h.run { "check", project(BOTH, '{\n  "tool_modules": ["tools.lua"],\n}\n') .. "/program.luma" }
    assert.are.equal(1, r.status)
    assert.matches("not valid JSON: trailing comma at offset 33 (line 2, column 32)", r.stderr, 1, true)
  end)

  it("reports a module whose integrity does not match", function()
    local config = '{ "tool_modules": [{ "path": "tools.lua", "integrity": "sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=" }] }'
    local r = h.run { "check", project(BOTH, config) .. "/program.luma" }
    assert.are.equal(1, r.status)
    assert.matches("integrity check failed for '.*tools.lua'", r.stderr)
  end)
end)

describe("luma-lua tools", function()
  it("prints the tool declarations as a JSON array", function()
    local r = h.run { "tools", h.program_file(h.calculate) }
    assert.are.equal(0, r.status)
    local decls = require("cjson").decode(r.stdout)
    assert.are.equal(1, #decls)
    assert.are.equal("calculate", decls[1].name)
    assert.are.equal("", decls[1].description)
    assert.are.same({ "a", "b", "operation" }, decls[1].parameters.required)
  end)

  it("exits 2 with the load errors for a program that does not load", function()
    local r = h.run { "tools", h.program_file("tool t(a: int) -> string {}\n") }
    assert.are.equal(2, r.status)
    assert.matches("must return a declared schema, not 'string'", r.stderr, 1, true)
  end)
end)

describe("luma-lua options", function()
  it("prints the version with --version", function()
    local r = h.run { "--version" }
    assert.are.equal(0, r.status)
    assert.matches("^luma%-lua %d+%.%d+%.%d+ %(Lua 5%.4%.%d+%)\n$", r.stdout)
  end)

  it("prints usage with --help", function()
    local r = h.run { "--help" }
    assert.are.equal(0, r.status)
    assert.matches("usage: luma%-lua", r.stdout)
    assert.matches("check PROGRAM", r.stdout)
  end)

  it("rejects an unknown option with exit status 2", function()
    local r = h.run { "--frobnicate" }
    assert.are.equal(2, r.status)
    assert.matches("unknown option '--frobnicate'", r.stderr, 1, true)
  end)

  it("runs a program given without a command", function()
    local r = h.run { "/nonexistent/frobnicate.luma" }
    assert.are.equal(2, r.status)
    assert.are.equal("Error: cannot read '/nonexistent/frobnicate.luma': No such file or directory\n", r.stderr)
  end)

  it("takes version and help CMD as the conventional commands", function()
    local v, dashed = h.run { "version" }, h.run { "--version" }
    assert.are.equal(0, v.status, v.stderr)
    assert.are.equal(dashed.stdout, v.stdout)
    local help, check_help = h.run { "help", "check" }, h.run { "check", "--help" }
    assert.are.equal(0, help.status, help.stderr)
    assert.matches("^usage: luma%-lua check PROGRAM", help.stdout)
    assert.are.equal(check_help.stdout, help.stdout)
    for _, c in ipairs { "help", "version" } do
      local own, dashed_help = h.run { "help", c }, h.run { c, "--help" }
      assert.are.equal(0, own.status, own.stderr)
      assert.matches("^usage: luma%-lua " .. c, own.stdout)
      assert.are.equal(own.stdout, dashed_help.stdout)
    end
    local r = h.run { "help", "chek" }
    assert.are.equal(2, r.status)
    assert.matches("no such command 'chek' (did you mean 'check'?)", r.stderr, 1, true)
  end)

  it("says a bare word that is no file and no command is no such command, listing them", function()
    local r = h.run { "frobnicate", "x.luma" }
    assert.are.equal(2, r.status)
    assert.are.equal("luma-lua: no such command 'frobnicate'; the commands are approve, check, deny, help, init, mcp, repl, " ..
      "resume, run, runs, schema, tools, validate, version\nRun 'luma-lua --help' for usage.\n", r.stderr)
  end)

  it("suggests the nearest option, of run and of check", function()
    local path = h.program_file(h.calculate)
    for _, case in ipairs {
      { { path, "--agnet", "A" }, "unknown option '--agnet' (did you mean '--agent'?)" },
      { { path, "--tool-modul", "t.lua" }, "unknown option '--tool-modul' (did you mean '--tool-module'?)" },
      { { "check", path, "--confg", "c.json" }, "unknown option '--confg' of check (did you mean '--config'?)" },
    } do
      local r = h.run(case[1])
      assert.are.equal(2, r.status)
      assert.are.equal("luma-lua: " .. case[2] .. "\nRun 'luma-lua --help' for usage.\n", r.stderr)
    end
  end)

  it("suggests the nearest method of the agent", function()
    local path = h.program_file(h.calculate .. "\nagent A {\n  tools: [calculate]\n  fn run(a: float) -> CalcResult { " ..
      "tool calculate({ a: a, b: 1, operation: \"add\" }) }\n}\n")
    local handlers = h.write(h.tmpname(".lua"), "return { calculate = function(i) return { result = i.a + i.b } end }")
    local r = h.run { path, "--tool-module", handlers, "--agent", "A", "--method", "rn", "--input", '{"a": 1}' }
    os.remove(handlers)
    assert.are.equal(2, r.status)
    assert.are.equal("Error: Agent 'A' has no method 'rn'. Did you mean 'run'?\n", r.stderr)
  end)

  it("says a tool module, a config or a JSON @file that is a folder is a folder", function()
    local dir = h.project { ["program.luma"] = h.calculate .. "\nagent A {\n  fn run(x: int) -> int { return x }\n}\n",
      ["somedir/x"] = "" }
    for _, case in ipairs {
      { { "check", dir .. "/program.luma", "--config", dir .. "/somedir" }, 1 },
      { { "validate", dir .. "/program.luma", "CalcResult", "@" .. dir .. "/somedir" }, 1 },
      { { dir .. "/program.luma", "--agent", "A", "--input", "@" .. dir .. "/somedir" }, 2 },
    } do
      local r = h.run(case[1])
      assert.are.equal(case[2], r.status, r.stderr)
      assert.matches("^Error: [^\n]*cannot read '?[^\n]*/somedir'?: Is a directory\n$", r.stderr)
    end
    local r = h.run { dir .. "/program.luma", "--tool-module", dir .. "/somedir" }
    assert.are.equal(2, r.status)
    assert.matches("cannot read '.*/somedir': Is a directory\n$", r.stderr)
    r = h.run { "check", dir .. "/program.luma", "--tool-module", dir .. "/somedir" }
    assert.are.equal(1, r.status)
    assert.matches("cannot read '.*/somedir': Is a directory\n$", r.stderr)
  end)
end)

describe("luma-lua validate and schema", function()
  local source = "schema Order { qty: int @range(1, 10), note?: string, unit?: string @default(\"pc\") }\n"

  it("prints the validated value with its defaults, from an argument, a file or standard input", function()
    local path = h.program_file(source)
    local value = h.write(h.tmpname(".json"), '{"qty": 2}')
    for _, r in ipairs {
      h.run { "validate", path, "Order", '{"qty": 2}' },
      h.run { "validate", path, "Order", "@" .. value },
      h.run({ "validate", path, "Order", "-" }, { stdin = '{"qty": 2}' }),
      h.run({ "validate", path, "Order" }, { stdin = '{"qty": 2}' }),
    } do
      assert.are.equal(0, r.status, r.stderr)
      assert.are.same({ qty = 2, unit = "pc" }, require("cjson").decode(r.stdout))
    end
    os.remove(value)
  end)

  it("prints every violation and exits 1", function()
    local r = h.run { "validate", h.program_file(source), "Order", '{"qty": 20, "note": 5}' }
    assert.are.equal(1, r.status)
    assert.are.equal("", r.stdout)
    assert.are.equal("Order.note must be a string\nOrder.qty must be at most 10\n", r.stderr)
  end)

  it("says what is wrong with the value's text or the schema's name", function()
    local path = h.program_file(source)
    local r = h.run { "validate", path, "Order", "{qty: 2}" }
    assert.are.equal(1, r.status)
    assert.matches("^Error: not JSON: ", r.stderr)
    r = h.run { "validate", path, "Ordr", "{}" }
    assert.are.equal("Error: Unknown schema 'Ordr'. Did you mean 'Order'?\n", r.stderr)
    r = h.run { "validate", path, "Order", "@/nonexistent/v.json" }
    assert.are.equal("Error: cannot read /nonexistent/v.json: No such file or directory\n", r.stderr)
  end)

  it("gives a JSON error's line and column, at the bad word, in validate and --input", function()
    local path = h.program_file(source .. "agent A {\n  fn run(qty: int) -> int { return qty }\n}\n")
    local r = h.run { "validate", path, "Order", '{"qty": tru}' }
    assert.are.equal(1, r.status)
    assert.are.equal("Error: not JSON: unexpected 'tru' (a value's words are true, false and null) at offset 8 " ..
      "(line 1, column 9)\n", r.stderr)
    r = h.run { "validate", path, "Order", '{\n  "qty": 2,\n  "note": nul\n}' }
    assert.matches("unexpected 'nul' (a value's words are true, false and null) at offset 24 (line 3, column 11)",
      r.stderr, 1, true)
    r = h.run { path, "--agent", "A", "--input", '{"qty": yes}' }
    assert.are.equal(2, r.status)
    assert.are.equal("Error: --input is not valid JSON: unexpected 'yes' (a value's words are true, false and null) " ..
      "at offset 8 (line 1, column 9)\n", r.stderr)
  end)

  it("prints one schema's JSON Schema", function()
    local r = h.run { "schema", h.program_file(source), "Order" }
    assert.are.equal(0, r.status)
    local s = require("cjson").decode(r.stdout)
    assert.are.equal(10, s.properties.qty.maximum)
    assert.are.same({ "qty" }, s.required)
  end)

  it("prints a tool's input schema for a tool's name, as the REPL's :schema does, in the same key order", function()
    local path = h.program_file(h.calculate)
    local r = h.run { "schema", path, "calculate" }
    assert.are.equal(0, r.status, r.stderr)
    local keys = {}
    for k in r.stdout:gmatch('\n  "([%w_]+)":') do keys[#keys + 1] = k end
    assert.are.same({ "type", "properties", "required", "additionalProperties" }, keys)
    assert.matches('"operation"', r.stdout, 1, true)
    local repl = h.run({ "repl", path }, { stdin = ":schema calculate\n" })
    assert.are.equal(0, repl.status, repl.stderr)
    assert.are.equal(r.stdout, repl.stdout:gsub("^loaded [^\n]*\n", ""))
    r = h.run { "schema", path, "calculat" }
    assert.are.equal(1, r.status)
    assert.are.equal("Error: Unknown schema 'calculat'. Did you mean 'calculate'?\n", r.stderr)
  end)

  it("reads --input from a file or from standard input", function()
    local path = h.program_file(h.calculate .. "\nagent A {\n  tools: [calculate]\n  fn add(a: float, b: float) -> CalcResult { tool calculate({ a: a, b: b, operation: \"add\" }) }\n}\n")
    local input = h.write(h.tmpname(".json"), '{"a": 2, "b": 3}')
    local handlers = h.write(h.tmpname(".lua"),
      "return { calculate = function(i) return { result = i.a + i.b } end }")
    for _, r in ipairs {
      h.run { path, "--tool-module", handlers, "--agent", "A", "--method", "add", "--input", "@" .. input },
      h.run({ path, "--tool-module", handlers, "--agent", "A", "--method", "add", "--input", "-" }, { stdin = '{"a": 2, "b": 3}' }),
    } do
      assert.are.equal(0, r.status, r.stderr)
      assert.are.same({ result = 5 }, require("cjson").decode(r.stdout))
    end
    os.remove(input)
    os.remove(handlers)
  end)
end)
