local h = require "spec.helpers"

-- Lines 1-9; the cases start on line 10.
local base = [[
schema Sum { total: int, note?: string }
schema Any { v?: any }
schema Point { x: float, y: float }
schema Invoice { number: string }
schema Receipt { reference: string, total?: float }
schema Document = Invoice | Receipt tagged by kind
tool add(a: int, b: int, op?: enum["add", "mul"] @default("add"), at?: Point, tags?: string[]) -> Sum {}
tool value(v?: any) -> Any {}
tool classify(text: string) -> Document {}
]]

-- "line:col: message" of every error of base .. source.
local function errors(source)
  local _, err = h.compile(base .. source)
  if not err then return {} end
  local list = {}
  for _, d in ipairs(err.details.diagnostics) do list[#list + 1] = d.line .. ":" .. d.col .. ": " .. d.message end
  return list
end

local function check_cases(cases)
  for _, c in ipairs(cases) do
    it(c[1], function()
      assert.are.same(c[3], errors(c[2]))
    end)
  end
end

describe("check: fields read on typed values", function()
  check_cases {
    { "report a field that the tool's return schema does not have, with a suggestion",
      "s = tool add({ a: 1, b: 2 })\ny = s.totl",
      { "11:6: Schema 'Sum' has no field 'totl'. Did you mean 'total'?" } },
    { "report it on an ask's answer, typed by its schema",
      'model M { provider: "openai"\n name: "m" }\nagent A { model: M\n fn run() { p = ask "where" -> Point\n z = p.z } }',
      { "14:7: Schema 'Point' has no field 'z'." } },
    { "report it on a method's parameter, typed by its declaration",
      "agent A { fn run(p: Point) { q = p.xx } }",
      { "10:35: Schema 'Point' has no field 'xx'. Did you mean 'x'?" } },
    { "report it on a typed assignment, and on a field of a field",
      "s: Sum = tool value({}).v\nt = s.total.digits",
      { "11:12: cannot read field 'digits' of number" } },
    { "report a field that no member of a union has",
      'd = tool classify({ text: "x" })\nr = d.refrence',
      { "11:6: Schema 'Document' has no field 'refrence'. Did you mean 'reference'?" } },
    { "accept a union's tag and a field of one of its members",
      'd = tool classify({ text: "x" })\nk = d.kind\nr = d.reference\nn = d.number', {} },
    { "accept optional fields, and any field of a value of type any",
      "s = tool add({ a: 1, b: 2 })\nn = s.note\nv = tool value({}).v\nw = v.anything.deeper", {} },
    { "accept a field of a variable that holds values of two types",
      "if true { s = tool add({ a: 1, b: 2 }) } else { s = { other: 1 } }\nn = s.other", {} },
  }
end)

describe("check: literal arguments against the tool's input", function()
  check_cases {
    { "report a missing required field", "s = tool add({ a: 1 })", { "10:14: add.input.b is required" } },
    { "report an unknown field, suggesting the field it stands for", "s = tool add({ a: 1, c: 2 })",
      { "10:14: add.input.b is required", "10:22: add.input.c is not allowed. Did you mean 'b'?" } },
    { "report an unknown field close to a declared one", "s = tool add({ a: 1, b: 2, opp: \"add\" })",
      { "10:28: add.input.opp is not allowed. Did you mean 'op'?" } },
    { "report a literal of the wrong type", 's = tool add({ a: 1, b: "2" })', { "10:26: add.input.b must be an integer" } },
    { "report a float that is not whole for an int", "s = tool add({ a: 1, b: 2.5 })",
      { "10:25: add.input.b must be an integer" } },
    { "report null on a required field", "s = tool add({ a: null, b: 2 })", { "10:19: add.input.a must be an integer" } },
    { "report an enum value outside the enum, with a suggestion", 's = tool add({ a: 1, b: 2, op: "mull" })',
      { '10:33: add.input.op must be one of "add", "mul". Did you mean "mul"?' } },
    { "report inside nested records and arrays, with the validator's paths",
      's = tool add({ a: 1, b: 2, at: { x: 1, z: 2 }, tags: ["a", 3] })',
      { "10:32: add.input.at.y is required", "10:40: add.input.at.z is not allowed. Did you mean 'y'?",
        "10:60: add.input.tags[2] must be a string" } },
    { "report a call without an argument that needs one", "s = tool add()",
      { "10:5: add.input.a is required", "10:5: add.input.b is required" } },
    { "report an argument that is not an object", 's = tool add("a=1")', { "10:15: add.input must be an object" } },
    { "report a value whose static type is wrong", 'd = tool classify({ text: "x" })\ns = tool add({ a: 1, b: d.kind })',
      { "11:25: add.input.b must be an integer" } },
    { "accept what the validator accepts: null on an optional field, 2.0 for an int, {} for an array",
      "s = tool add({ a: 2.0, b: -3, op: null, tags: {} })", {} },
    { "accept values known only at run time",
      "v = tool value({}).v\ns = tool add({ a: v, b: v.b, at: v })\nt = tool add(v)", {} },
    { "check a typed assignment's literal as its type", 'n: int = "x"\np: Point = { x: 1 }',
      { "10:11: n must be an integer", "11:12: p.y is required" } },
  }

  it("name the statement's position when the value is only known at run time", function()
    local dir = h.project {
      ["program.luma"] = base .. 'v = tool value({ v: "2" }).v\ns = tool add({ a: 1, b: v })',
      ["tools.lua"] = "return { value = function(i) return i end, add = function() return { total = 0 } end,\n" ..
      "  classify = function() return { kind = 'Invoice', number = '1' } end }",
      ["luma.config.json"] = '{ "tool_modules": ["tools.lua"] }',
    }
    local r = h.run({ "program.luma" }, { cwd = dir })
    assert.are.equal(1, r.status)
    assert.are.equal("Error: [TOOL_INPUT_INVALID] program.luma:11:5: add.input.b must be an integer\n", r.stderr)
  end)
end)

describe("check: variables read before any assignment", function()
  check_cases {
    { "report a read that comes before the first assignment", 'x = "v={later}"\nlater = 1',
      { "10:9: variable 'later' is read before it is assigned (first assigned at 11:1)" } },
    { "report a read on a path where no branch assigned it", "if true { w = 1 } else { v = w }",
      { "10:30: variable 'w' is read before it is assigned (first assigned at 10:11)" } },
    { "report a variable that reads itself first", "n = n + 1",
      { "10:5: variable 'n' is read before it is assigned (first assigned at 10:1)" } },
    { "report it in a method", "agent A { fn run() { y = z\n z = 1 } }",
      { "10:26: variable 'z' is read before it is assigned (first assigned at 11:2)" } },
    { "accept a variable that one branch may have assigned (it is null otherwise)",
      "if false { y = 1 }\nz = y\ntry { q = 1 } catch e { r = q }\nafter = e", {} },
    { "accept a method's parameters", "agent A { fn run(p: int) { q = p + 1 } }", {} },
  }
end)

describe("check: operators on values of the wrong type", function()
  check_cases {
    { "report a string added to a number", 'x = "a" + 1', { "10:9: cannot apply '+' to string and number" } },
    { "report arithmetic on a string", 'x = 2 * "a"', { "10:7: cannot apply '*' to number and string" } },
    { "report a boolean or null in arithmetic", "x = true - 1\ny = null + 1",
      { "10:10: cannot apply '-' to boolean and number", "11:10: cannot apply '+' to null and number" } },
    { "report a comparison of a string with a number", 'x = "a" < 1', { "10:9: cannot compare string and number with '<'" } },
    { "report negating a string", 'x = -"a"', { "10:5: cannot negate string" } },
    { "report a typed value in arithmetic", 's = tool add({ a: 1, b: 2 })\nx = s.total + "!"',
      { "11:13: cannot apply '+' to number and string" } },
    { "accept strings joined, numbers mixed, and values known only at run time",
      'a = "a" + "b"\nb = 1 + 2.5\nv = tool value({}).v\nc = v + 1\nd = v < "x"\ne = "a" == 1', {} },
  }
end)

describe("check: schemas that no value can satisfy", function()
  check_cases {
    { "report a required field of its own schema", "schema Loop { self: Loop }",
      { "10:15: Schema 'Loop' can never be satisfied: its required field 'self' needs a value of 'Loop', and none can be built. Make a field optional ('self?: ...'), or give the cycle a way out." } },
    { "report a cycle through two schemas, and through an array that must have items",
      "schema A { b: B }\nschema B { a: A[] @items(1, null) }",
      { "10:12: Schema 'A' can never be satisfied: its required field 'b' needs a value of 'B', and none can be built. Make a field optional ('b?: ...'), or give the cycle a way out.",
        "11:12: Schema 'B' can never be satisfied: its required field 'a' needs a value of 'A', and none can be built. Make a field optional ('a?: ...'), or give the cycle a way out." } },
    { "report a union whose every member is recursive", "schema U = C tagged by kind\nschema C { u: U }",
      { "10:8: Schema 'U' can never be satisfied: none of its members (C) can be built.",
        "11:12: Schema 'C' can never be satisfied: its required field 'u' needs a value of 'U', and none can be built. Make a field optional ('u?: ...'), or give the cycle a way out." } },
    { "accept a way out: an optional field, an array that may be empty, a member that ends the recursion",
      "schema L1 { next?: L1 }\nschema L2 { kids: L2[] }\nschema Leaf { v: int }\nschema Node { l: Tree, r: Tree }\nschema Tree = Node | Leaf tagged by kind", {} },
  }
end)

describe("check: no false errors", function()
  it("passes every example with `luma-lua check`", function()
    local examples = {}
    for path in io.popen("cd " .. h.quote(h.root) .. " && ls examples/*.luma examples/*/*.luma"):lines() do
      examples[#examples + 1] = path
    end
    assert.is_true(#examples >= 5)
    for _, path in ipairs(examples) do
      local r = h.run({ "check", path })
      assert.are.same({ 0, "" }, { r.status, r.stderr }, path)
    end
  end)
end)

describe("check: the README's section on it", function()
  it("shows the errors luma-lua check prints for its program", function()
    local readme = h.read(h.root .. "/README.md")
    local section = readme:match("### What `check` proves.-\n### ")
    -- the lines of an indented block, without their indentation
    local function indented(text)
      local lines = {}
      for line in (text .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line:sub(5) end
      return lines
    end
    local program = indented(section:match("This program\n\n(.-)\n\ngets"))
    local shown = indented(section:match("gets %b()%:\n\n(.-)\n\n"))
    assert.is_true(#program > 5 and #shown > 5)
    local r = h.run({ "check", h.program_file(table.concat(program, "\n") .. "\n") })
    local got = {}
    for line in r.stderr:gmatch("[^\n]+") do
      local message = line:match("^[^:]+%.luma(:%d+:%d+: .*)$")
      if message then got[#got + 1] = "program.luma" .. message end
    end
    assert.are.same(shown, got)
  end)
end)

