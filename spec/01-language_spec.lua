local luma = require "luma"
local h = require "spec.helpers"

local function ast_of(source)
  return assert(h.compile(source)):ast()
end

-- The statements of `agent A { fn run() { <body> } }`, with a tool t.
local function body_of(body)
  local source = "schema R { v: int }\ntool t(v: int) -> R {}\nmodel M { provider: \"openai\"\nname: \"m\" }\n" ..
    "agent A {\n  model: M\n  tools: [t]\n  fn run(x: any, a: int, b: int, c: int) -> R {\n" .. body .. "\n  }\n}\n"
  return ast_of(source).agents[1].methods[1].body
end

-- Strips line/col so that trees can be compared by shape.
local function shape(node)
  if type(node) ~= "table" then return node end
  local out = {}
  for k, v in pairs(node) do
    if k ~= "line" and k ~= "col" then out[k] = shape(v) end
  end
  return out
end

describe("the contract language", function()
  it("compiles the calculate example of the specification", function()
    local program = luma.compile(h.calculate)
    assert.are.same({ schemas = { "CalcResult" }, tools = { "calculate" }, agents = {}, models = {}, provider_tools = {} },
      program:declarations())
  end)

  it("accepts comments written with #, // and /* */", function()
    assert.is_truthy(h.compile("# a\n// b\n/* c\n d */ schema A { x: int # e\n }"))
  end)

  it("separates fields by line breaks, commas or semicolons", function()
    local p = assert(h.compile("schema A { a: int, b: int; c: int\n d: int }"))
    assert.are.equal(4, #p:schema("A").fields)
  end)

  it("separates statements and declarations by ';' on one line", function()
    local p = assert(h.compile("x = 1; y = 2\nschema A { a: int }; schema B { b: int };\nagent G { fn run() { a = 1; b = 2; return a } }"))
    assert.are.equal(2, #p:ast().statements)
    assert.are.equal(3, #p:ast().agents[1].methods[1].body)
  end)

  it("keeps keywords usable as field names", function()
    local p = assert(h.compile("schema A { model: string\n tool: int\n by: bool\n schema: float }"))
    assert.are.equal("model", p:schema("A").fields[1].name)
  end)

  it("declares a tagged union", function()
    local p = assert(h.compile("schema I { n: string }\nschema R { r: string }\nschema D = I | R tagged by kind"))
    assert.are.same({ name = "D", kind = "union", members = { "I", "R" }, tag = "kind" }, p:schema("D"))
  end)

  it("declares a model", function()
    local p = assert(h.compile('model GPT54Mini {\n provider: "openai"\n name: "gpt-5.4-mini"\n api_key_env: "OPENAI_API_KEY"\n}'))
    local m = p:declaration("GPT54Mini")
    assert.are.equal("model", m.kind)
    assert.are.equal("openai", m.provider)
    assert.are.equal("gpt-5.4-mini", m.model)
    assert.are.equal("OPENAI_API_KEY", m.api_key_env)
  end)

  it("declares a model's API, retries, extra headers, and its default key variable", function()
    local p = assert(h.compile([[
model R { provider: "openai"
  name: "gpt"
  api: "responses"
  retries: 5
  headers: { "OpenAI-Organization": "org-1", "X-Trace": "on" } }
model C { provider: "anthropic"
  name: "claude" }
model L { provider: "openai"
  name: "llama"
  base_url: "http://127.0.0.1:11434/v1"
  api_key_env: null }
model Z { provider: "azure"
  base_url: "https://res.openai.azure.com"
  deployment: "d" }]]))
    local r = p:declaration("R")
    assert.are.same({ "responses", 5, { ["OpenAI-Organization"] = "org-1", ["X-Trace"] = "on" }, "OPENAI_API_KEY" },
      { r.api, r.retries, r.headers, r.api_key_env })
    local c = p:declaration("C")
    assert.are.same({ "chat", 2, "ANTHROPIC_API_KEY" }, { c.api, c.retries, c.api_key_env })
    assert.is_nil(p:declaration("L").api_key_env)
    assert.are.equal("AZURE_OPENAI_API_KEY", p:declaration("Z").api_key_env)
    assert.is_nil(p:declaration("Z").api_version)
  end)

  it("declares an agent with its configuration and methods", function()
    local p = assert(h.compile([[
schema Answer { text: string }
tool t(x: int) -> Answer {}
model M { provider: "anthropic"
  name: "claude" }
agent Flow {
  model: M
  tools: [t]
  tool_rate_limit: 5
  tool_concurrency: 2
  tool_failure_limit: 3
  tool_timeout: 5000
  tool_timeout_max: 30000
  tool_policy: "approval"
  tool_scopes: ["db:write"]
  tool_contexts: []
  fn run(text: string) -> Answer { ask "{text}" -> Answer }
  fn other() { return null }
}]]))
    local a = p:declaration("Flow")
    assert.are.same({ "t" }, a.tools)
    assert.are.equal("M", a.model)
    assert.are.equal(5, a.tool_rate_limit)
    assert.are.equal(2, a.tool_concurrency)
    assert.are.equal(3, a.tool_failure_limit)
    assert.are.equal(5000, a.tool_timeout)
    assert.are.equal(30000, a.tool_timeout_max)
    assert.are.equal("approval", a.tool_policy)
    assert.are.same({ "db:write" }, a.tool_scopes)
    assert.are.same({}, a.tool_contexts)
    assert.are.same({ "run", "other" }, a.methods)
  end)
end)

describe("statements", function()
  it("parse assignments and the three forms of direct tool calls", function()
    local body = shape(body_of([[
      a = tool t({ v: 1 })
      b = tool t(a)
      c: R = tool t({ v: x })
      tool t({ v: 2 })]]))
    assert.are.same({
      { kind = "assign", name = "a", value = { kind = "tool", tool = "t",
        arg = { kind = "object", props = { { key = "v", value = { kind = "int", value = 1 } } } } } },
      { kind = "assign", name = "b", value = { kind = "tool", tool = "t", arg = { kind = "name", name = "a" } } },
      { kind = "assign", name = "c", type = { kind = "name", name = "R" }, value = { kind = "tool", tool = "t",
        arg = { kind = "object", props = { { key = "v", value = { kind = "name", name = "x" } } } } } },
      { kind = "expr", value = { kind = "tool", tool = "t",
        arg = { kind = "object", props = { { key = "v", value = { kind = "int", value = 2 } } } } } },
    }, body)
  end)

  it("parse literals, field access and indexing", function()
    local body = shape(body_of('v = [1, 2.5, "s", true, false, null, { "k": x.y[0] }]'))
    assert.are.same({ kind = "array", items = {
      { kind = "int", value = 1 }, { kind = "float", value = 2.5 }, { kind = "string", value = "s" },
      { kind = "bool", value = true }, { kind = "bool", value = false }, { kind = "null" },
      { kind = "object", props = { { key = "k", value = { kind = "index",
        object = { kind = "field", object = { kind = "name", name = "x" }, name = "y" },
        index = { kind = "int", value = 0 } } } } },
    } }, body[1].value)
  end)

  local function expr(source) return shape(body_of("v = " .. source)[1].value) end
  local function bin(op, l, r) return { kind = "binary", op = op, left = l, right = r } end
  local function n(v) return { kind = "int", value = v } end
  local function name(v) return { kind = "name", name = v } end

  it("gives arithmetic the usual precedence", function()
    assert.are.same(bin("+", n(1), bin("*", n(2), n(3))), expr("1 + 2 * 3"))
    assert.are.same(bin("*", bin("+", n(1), n(2)), n(3)), expr("(1 + 2) * 3"))
    assert.are.same(bin("-", bin("-", n(1), n(2)), n(3)), expr("1 - 2 - 3"))
    assert.are.same(bin("%", bin("/", n(8), n(4)), n(3)), expr("8 / 4 % 3"))
    assert.are.same({ kind = "unary", op = "-", operand = name("x") }, expr("-x"))
  end)

  it("binds comparison tighter than and, and and tighter than or", function()
    assert.are.same(bin("or", bin("==", name("a"), n(1)), bin("and", bin("<", name("b"), n(2)), bin(">=", name("c"), n(3)))),
      expr("a == 1 or b < 2 and c >= 3"))
    assert.are.same(bin("or", bin("!=", name("a"), n(1)), bin("and", bin("<=", name("b"), n(2)), bin(">", name("c"), n(3)))),
      expr("a != 1 || b <= 2 && c > 3"))
    assert.are.same({ kind = "unary", op = "not", operand = name("a") }, expr("not a"))
    assert.are.same({ kind = "unary", op = "not", operand = name("a") }, expr("!a"))
  end)

  it("refuses chained comparisons", function()
    assert.are.same({ "comparisons cannot be chained; use 'and', found '<'" }, (h.errors("v = 1 < 2 < 3")))
  end)

  it("parse if, else if and else", function()
    local body = shape(body_of("if x > 3 { a = 1 } else if x > 1 { a = 2 } else { a = 3 }"))
    assert.are.equal("if", body[1].kind)
    assert.are.equal("if", body[1].orelse[1].kind)
    assert.are.same({ { kind = "assign", name = "a", value = n(3) } }, body[1].orelse[1].orelse)
  end)

  it("parse try and catch", function()
    local body = shape(body_of("try { a = tool t({ v: 1 }) } catch e { return e.code }"))
    assert.are.equal("try", body[1].kind)
    assert.are.equal("e", body[1].catch_name)
    assert.are.same({ { kind = "return", value = { kind = "field", object = name("e"), name = "code" } } }, body[1].catch_body)
  end)

  it("parse return with and without a value", function()
    local body = shape(body_of("if x { return }\nreturn x"))
    assert.are.same({ { kind = "return" } }, body[1].body)
    assert.are.same({ kind = "return", value = name("x") }, body[2])
  end)

  it("parse ask with interpolation, a result type and using tool", function()
    local body = shape(body_of('r = ask "Stats: {x}, twice: {x * 2}, brace: \\{" -> R using tool t'))
    assert.are.same({ kind = "ask", type = { kind = "name", name = "R" }, using = "t",
      prompt = { kind = "template", parts = {
        { kind = "string", value = "Stats: " }, name("x"), { kind = "string", value = ", twice: " },
        bin("*", name("x"), n(2)), { kind = "string", value = ", brace: {" } } } }, body[1].value)
  end)

  it("keeps a string without interpolation plain", function()
    assert.are.same({ kind = "string", value = "plain {not} here" }, expr('"plain \\{not\\} here"'))
  end)

  it("decodes string escapes", function()
    assert.are.same({ kind = "string", value = "q\"b\\s/n\nt\tu\195\169\240\159\152\128" },
      expr('"q\\"b\\\\s\\/n\\nt\\tu\\u00e9\\ud83d\\ude00"'))
  end)

  it("parse top-level statements", function()
    local ast = ast_of(h.calculate .. 'result = tool calculate({ a: 2, b: 3, operation: "add" })')
    assert.are.equal(1, #ast.statements)
    assert.are.equal("calculate", ast.statements[1].value.tool)
  end)

  it("record positions", function()
    local stmt = body_of("    a = 1")[1]
    assert.are.equal(9, stmt.line)
    assert.are.equal(5, stmt.col)
  end)

  it("take -9223372036854775808, the smallest 64-bit integer, as an integer literal", function()
    local r = h.run { h.program_file("x = -9223372036854775808\ny = x + 1\n") }
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ x = math.mininteger, y = math.mininteger + 1 }, luma.json.decode(r.stdout))
    assert.are.equal("integer", math.type(luma.json.decode(r.stdout).x))
  end)
end)

describe("a file with a UTF-8 byte order mark", function()
  it("loads as the same file without it: a program and its config", function()
    local dir = h.project {
      ["program.luma"] = "\239\187\191x = 1\nschema A { v: int }\n",
      ["luma.config.json"] = '\239\187\191{ "tool_modules": [] }',
    }
    local r = h.run { dir .. "/program.luma" }
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ x = 1 }, luma.json.decode(r.stdout))
    -- the positions of the first line do not count it
    r = h.run { "check", h.program_file("\239\187\191x = nope\n") }
    assert.matches(":1:5: unknown variable 'nope'", r.stderr, 1, true)
  end)
end)

describe("syntax errors", function()
  it("read program.luma:LINE:COL: message, then the source line and a caret", function()
    local _, err = h.compile("schema A {\n  x int\n}\n")
    assert.are.equal("PROGRAM_INVALID", err.code)
    assert.are.equal("program.luma:2:5: expected ':' and a type after the field name, found 'int'\n" ..
      "  x int\n" ..
      "    ^", err.message)
    assert.are.same({ file = "program.luma", line = 2, col = 5,
      message = "expected ':' and a type after the field name, found 'int'", text = err.message },
      err.details.diagnostics[1])
  end)

  it("count columns in characters and keep tabs under the caret", function()
    local _, err = h.compile('schema A {\n\tx: int @desc("näme") $\n}')
    assert.are.equal('program.luma:2:23: unexpected character \'$\'\n\tx: int @desc("näme") $\n\t                     ^', err.message)
  end)

  it("are all reported, not only the first", function()
    local messages = h.errors([[
schema A {
  x: int @
  y: string
  z int
}
tool t(a: int) -> A { side_effects: "none" cache true }
schema B { ok: int }
b = (1 +
]])
    assert.are.same({
      "expected an annotation name after '@', found 'y'",
      "expected ':' and a type after the field name, found 'int'",
      "expected a line break after the configuration entry, found 'cache'",
      "expected an expression, found end of file",
    }, messages)
  end)

  local cases = {
    { 'schema A { x: "s" }', "expected a type, found a string" },
    { "schema A { x: [int] }", "array types are written T[], as in string[]" },
    { "schema A { x: enum[] }", "enum[...] needs at least one value" },
    { "schema A { x: enum[1] }", "expected a string in enum[...], found '1'" },
    { "schema A {}\nschema B {}\nschema D = A | B", "expected 'tagged by <field>' after the union's members, found end of file" },
    { "tool t(a: int) {}", "expected '->' and the tool's return schema, found '{'" },
    { 'v = "abc', "unterminated string" },
    { 'v = "a\\qb"', "unknown escape '\\q'" },
    { 'v = "\\ud800"', "unpaired surrogate \\uD800" },
    { 'v = "{x"', "unclosed '{' in string (write \\{ for a literal brace)" },
    { 'v = "{}"', "empty '{}' in string (write \\{ for a literal brace)" },
    { 'v = "{x y}"', "expected '}' to end the interpolation, found 'y'" },
    { "v = 12abc", "malformed number '12abc'" },
    { "v = 99999999999999999999", "integer 99999999999999999999 is too large" },
    { "v = 9223372036854775808", "integer 9223372036854775808 is too large" },
    { "v = 1 - 9223372036854775808", "integer 9223372036854775808 is too large" },
    { "v = -9223372036854775809", "integer 9223372036854775809 is too large" },
    { "v = 1e999", "number 1e999 is out of range" },
    { "v = { a: 1, a: 2 }", "duplicate key 'a' in the object" },
    { "v = 1 w = 2", "expected a line break or ';' after the statement, found 'w'" },
    { "/* never closed", "unterminated comment" },
    { "v = \1", "unexpected control character 0x01" },
    { "v = \255", "invalid UTF-8 byte 0xFF" },
    { 'v = "\255"', "invalid UTF-8 in string" },
    { "if = 3", "expected an expression, found '='" },
    { "v = if", "expected an expression, found 'if'" },
    { "agent A { fn run() { else } }", "expected a statement ('else' and 'catch' follow a block), found 'else'" },
    { "agent A { fn run() { try { } } }", "expected 'catch' after the try block, found '}'" },
  }
  -- a misspelled keyword: the nearest, at the word
  local misspelled = {
    { "shema A { x: int }", "1:1: Unknown keyword 'shema'. Did you mean 'schema'?" },
    { "schema R { v: int }\ntol f() -> R {}", "2:1: Unknown keyword 'tol'. Did you mean 'tool'?" },
    { "agnet A {\n  fn run() -> int { return 1 }\n}", "1:1: Unknown keyword 'agnet'. Did you mean 'agent'?" },
    { "x = 1\nif x > 0 { y = 1 } esle { y = 2 }", "2:20: Unknown keyword 'esle'. Did you mean 'else'?" },
    { "agent A {\n  fn run() -> int {\n    retrun 1\n  }\n}", "3:5: Unknown keyword 'retrun'. Did you mean 'return'?" },
    { "x = ture", "1:5: unknown variable 'ture' (did you mean 'true'?)" },
    -- names past ASCII: one error for the name, not one per letter
    { "schema Café_été { x: int }", "1:8: 'Café_été' is not a name: names are ASCII (letters a-z and A-Z, digits, '_')" },
    { "x = ñandú", "1:5: 'ñandú' is not a name: names are ASCII (letters a-z and A-Z, digits, '_')" },
    -- a schema's missing '}': where its '{' is
    { "schema A {\n  x: int\n\nschema B { y: int }",
      "1:10: the '{' of schema 'A' is not closed: expected '}' before 'schema' on line 4" },
    { "schema A {\n  x: int\n", "1:10: the '{' of schema 'A' is never closed: expected '}' before the end of the file" },
  }
  for _, c in ipairs(misspelled) do
    it("say where and what was meant: " .. c[2], function()
      local _, err = h.compile(c[1])
      assert.is_truthy(err, "expected an error")
      local d = err.details.diagnostics
      assert.are.equal(1, #d, c[1])
      assert.are.equal(c[2], d[1].line .. ":" .. d[1].col .. ": " .. d[1].message)
    end)
  end

  for _, c in ipairs(cases) do
    it("say what is wrong: " .. c[2], function()
      local messages = h.errors(c[1])
      assert.are.equal(c[2], messages[1])
    end)
  end

  it("bound the nesting depth instead of overflowing the stack", function()
    local messages = h.errors("v = " .. string.rep("(", 100000) .. "1" .. string.rep(")", 100000))
    assert.are.equal("nesting is too deep (more than 200 levels)", messages[1])
    messages = h.errors("v = " .. string.rep("[", 5000))
    assert.are.equal("nesting is too deep (more than 200 levels)", messages[1])
    messages = h.errors("v = " .. string.rep("-", 5000) .. "1")
    assert.are.equal("nesting is too deep (more than 200 levels)", messages[1])
    -- a chain nests the tree too: everything after the parser walks it
    messages = h.errors("v = 1" .. string.rep(" + 1", 5000))
    assert.are.equal("nesting is too deep (more than 200 levels)", messages[1])
    assert.are.same({}, (h.errors("v = 1" .. string.rep(" + 1", 150))))
  end)

  it("count one level for what nests, not one per precedence level: 100 parentheses and 100 ifs load", function()
    assert.are.same({}, (h.errors("v = " .. string.rep("(", 100) .. "1" .. string.rep(")", 100))))
    assert.are.same({}, (h.errors("v = " .. string.rep("(", 198) .. "1" .. string.rep(")", 198))))
    assert.are.same({}, (h.errors("x = 0\n" .. string.rep("if x < 1 {\n", 100) .. "x = 1\n" .. string.rep("}\n", 100))))
    local body = string.rep("if n < 1 {\n", 100) .. "n = 1\n" .. string.rep("}\n", 100)
    assert.are.same({}, (h.errors("agent A { fn run(n: int) {\n" .. body .. "n\n} }")))
    -- a.b.c and l[1][2] nest the tree as operators do: bounded, not a crash
    assert.are.equal("nesting is too deep (more than 200 levels)", h.errors("a = {}\nv = a" .. string.rep(".b", 300000))[1])
    assert.are.equal("nesting is too deep (more than 200 levels)", h.errors("a = []\nv = a" .. string.rep("[1]", 300000))[1])
    assert.are.same({}, (h.errors("a = {}\nv = a" .. string.rep(".b", 150))))
  end)

  it("recover from a stray closing bracket inside a block", function()
    -- found by the fuzzer: recovery used to stop without moving on
    local messages = h.errors("try{]\184")
    assert.are.same({ "expected an expression, found ']'", "invalid UTF-8 byte 0xB8",
      "expected '}' to close the block, found end of file" }, messages)
  end)

  it("never echo control characters or broken UTF-8 to the terminal", function()
    local _, err = h.compile('schema A { x: enum["\\u001b[31m", "\\u001b[31m"] } \27[2J\255')
    for _, d in ipairs(err.details.diagnostics) do
      assert.is_nil(d.text:find("[%z\1-\8\11-\31\127]"), d.text)
      assert.is_nil(d.text:find("\255", 1, true))
    end
    assert.are.equal('enum value "?[31m" is listed twice', err.details.diagnostics[1].message)
  end)

  it("keep at most max_errors of them", function()
    local source = string.rep("schema A { x: Nope }\n", 10)
    local _, err = h.compile(source, { limits = { max_errors = 3 } })
    assert.are.equal(3, #err.details.diagnostics)
    assert.is_true(err.details.more > 0)
    assert.matches("\n\226\128\166 and " .. err.details.more .. " more errors$", err.message)
  end)

  it("refuse a program above max_source_bytes", function()
    local _, err = h.compile(string.rep(" ", 101), { limits = { max_source_bytes = 100 } })
    assert.are.equal("program.luma: the program is 101 bytes; the limit is 100", err.message)
  end)
end)
