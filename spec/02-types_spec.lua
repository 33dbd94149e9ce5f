local luma = require "luma"
local h = require "spec.helpers"

-- The JSON Schema of the single field `x: <decl>` of schema A.
local function prop(decl)
  local program = assert(h.compile("schema Sub { v: int }\nschema A {\n  x: " .. decl .. "\n}"))
  return program:json_schema("A").properties.x, program
end

describe("types", function()
  local cases = {
    { "string", { type = "string" } },
    { "int", { type = "integer" } },
    { "float", { type = "number" } },
    { "bool", { type = "boolean" } },
    { "any", {} },
    { 'enum["a", "b"]', { type = "string", enum = { "a", "b" } } },
    { "Sub", { ["$ref"] = "#/$defs/Sub" } },
    { "string[]", { type = "array", items = { type = "string" } } },
    { "Sub[][]", { type = "array", items = { type = "array", items = { ["$ref"] = "#/$defs/Sub" } } } },
    { 'enum["a"][]', { type = "array", items = { type = "string", enum = { "a" } } } },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. " maps to its JSON Schema", function()
      assert.are.same(c[2], (prop(c[1])))
    end)
  end

  it("make a field optional with `name?:`", function()
    local program = assert(h.compile("schema A { a: int\n b?: int }"))
    assert.are.same({ "a" }, program:json_schema("A").required)
    assert.is_false(program:schema("A").fields[2].required)
  end)

  it("allow recursive schemas", function()
    local program = assert(h.compile("schema Tree { name: string\n children?: Tree[] }"))
    local schema = program:json_schema("Tree")
    assert.are.same({ ["$ref"] = "#/$defs/Tree" }, schema.properties.children.items)
    assert.are.equal("object", schema["$defs"].Tree.type)
    assert.is_true(program:validate("Tree", { name = "a", children = { { name = "b", children = {} } } }))
    assert.is_nil((program:validate("Tree", { name = "a", children = { { name = 1 } } })))
  end)
end)

describe("annotations", function()
  local cases = {
    { 'string @desc("Who")', { type = "string", description = "Who" } },
    { "int @range(0, 10)", { type = "integer", minimum = 0, maximum = 10 } },
    { "float @range(-1.5, 2.25)", { type = "number", minimum = -1.5, maximum = 2.25 } },
    { "int @range(5, null)", { type = "integer", minimum = 5 } },
    { "int @range(null, 5)", { type = "integer", maximum = 5 } },
    { "string @length(1, 80)", { type = "string", minLength = 1, maxLength = 80 } },
    { "string @length(null, 3)", { type = "string", maxLength = 3 } },
    { 'string @pattern("^[a-z]+$")', { type = "string", pattern = "^[a-z]+$" } },
    { "int[] @items(1, 3)", { type = "array", items = { type = "integer" }, minItems = 1, maxItems = 3 } },
    { "int[] @range(0, 9) @items(null, 2)", { type = "array", items = { type = "integer", minimum = 0, maximum = 9 }, maxItems = 2 } },
    { 'string[] @length(2, 2) @pattern("x")', { type = "array", items = { type = "string", minLength = 2, maxLength = 2, pattern = "x" } } },
    { 'Sub @desc("A sub")', { ["$ref"] = "#/$defs/Sub", description = "A sub" } },
    { "int @default(10)", { type = "integer", default = 10 } },
    { 'string @default("x") @desc("d")', { type = "string", description = "d", default = "x" } },
    { "int[] @default([1, 2])", { type = "array", items = { type = "integer" }, default = { 1, 2 } } },
    { "Sub @default({ v: 3 })", { ["$ref"] = "#/$defs/Sub", default = { v = 3 } } },
    { 'float @range(0, 1) @severity("soft")', { type = "number", minimum = 0, maximum = 1 } },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. " shows in the JSON Schema", function()
      assert.are.same(c[2], (prop(c[1])))
    end)
  end

  it("@default makes a field not required and fills it", function()
    local program = assert(h.compile("schema A { limit?: int @default(10)\n n: int @default(3) }"))
    assert.is_nil(program:json_schema("A").required)
    local v = {}
    assert.is_true(program:validate("A", v))
    assert.are.same({ limit = 10, n = 3 }, v)
  end)

  it("fills a default as a validated value: an int written 2.0 as the integer 2, a union member with its tag", function()
    local program = assert(h.compile([[
schema Invoice { number: string }
schema Receipt { reference: string }
schema Document = Invoice | Receipt tagged by kind
schema A { n: int @default(2.0), ns: int[] @default([1.0, 2]), doc: Document @default({ reference: "r" }), any: any @default(null) }
]]))
    local v = {}
    assert.is_true(program:validate("A", v))
    assert.are.equal("integer", math.type(v.n))
    assert.are.same({ "integer", "integer" }, { math.type(v.ns[1]), math.type(v.ns[2]) })
    assert.are.same({ kind = "Receipt", reference = "r" }, v.doc)
    assert.are.equal(luma.null, v.any)
  end)

  it("fills an empty array default as an array: it prints as []", function()
    local program = assert(h.compile("schema A { xs: int[] @default([]), free: any @default([]) }"))
    local v = {}
    assert.is_true(program:validate("A", v))
    assert.are.equal('{"free":[],"xs":[]}', luma.json.encode(v))
  end)

  it("fills a fresh copy of a table default each time", function()
    local program = assert(h.compile("schema A { tags?: string[] @default([\"a\"]) }"))
    local one, two = {}, {}
    program:validate("A", one)
    table.insert(one.tags, "changed")
    program:validate("A", two)
    assert.are.same({ "a" }, two.tags)
  end)

  it("describe themselves through program:schema", function()
    local program = assert(h.compile('schema A { x?: int[] @range(1, 5) @items(null, 4) @severity("soft") @default([1]) @desc("xs") }'))
    assert.are.same({ name = "A", kind = "record", fields = { {
      name = "x", required = false, description = "xs", default = { 1 },
      type = { kind = "array", max_items = 4, soft = true,
        items = { kind = "int", minimum = 1, maximum = 5, soft = true } },
    } } }, program:schema("A"))
  end)

  local misuse = {
    { "int @rnage(1, 2)", "Unknown annotation '@rnage'. Did you mean '@range'?" },
    { "int @colour", "Unknown annotation '@colour'." },
    { "int @range(1, 2) @range(1, 2)", "@range is given twice" },
    { "string @range(1, 2)", "@range applies to int or float fields" },
    { "int @range(1)", "@range takes (min, max) as numbers; write null for an open side" },
    { 'int @range("a", 2)', "@range takes (min, max) as numbers; write null for an open side" },
    { "int @range(5, 1)", "@range minimum is greater than its maximum" },
    { "int @length(1, 2)", "@length applies to string fields" },
    { "string @length(-1, 2)", "@length minimum must be non-negative (a count), not -1" },
    { "int[] @items(0, -2)", "@items maximum must be non-negative (a count), not -2" },
    { "string @length(1.5, 2)", "@length takes (min, max) as whole numbers; write null for an open side" },
    { "string @length(3, 2)", "@length minimum 3 is greater than its maximum 2" },
    { "int @items(1, 2)", "@items applies to array fields" },
    { "int[] @items(1)", "@items takes (min, max) as whole numbers; write null for an open side" },
    { "int @pattern(\"x\")", "@pattern applies to string fields" },
    { "string @pattern(1)", "@pattern takes one string" },
    { 'string @pattern("a(")', "invalid @pattern: unbalanced parenthesis at offset 1" },
    { 'string @pattern("(a)\\\\1")', "invalid @pattern: backreferences are not supported (\\1 at offset 3)" },
    { "string @desc(1)", "@desc takes one string" },
    { "int @default()", "@default takes one literal value" },
    { "int @default(x)", "@default takes one literal value" },
    { 'int @severity("loud")', "@severity takes \"soft\" or \"hard\"" },
    { 'int @default("ten")', "@default of 'x' must be an integer" },
    { "int @range(0, 5) @default(10)", "@default of 'x' must be at most 5" },
    { "int @default(1.5)", "@default of 'x' must be an integer" },
    { 'enum["a", "b"] @default("c")', "@default of 'x' must be one of \"a\", \"b\"" },
    { "Sub @default({ w: 1 })", "@default of 'x'.v is required" },
    { 'string @length(3, null) @default("ab")', "@default of 'x' must be at least 3 characters long" },
    { "int[] @items(2, null) @default([1])", "@default of 'x' must have at least 2 items" },
    { "int @default(null)", "@default of 'x' cannot be null: a default fills a missing field with a value " ..
      "(to let 'x' be missing, remove the default and write 'x?:')" },
    { "Sub @default(null)", "@default of 'x' cannot be null: a default fills a missing field with a value " ..
      "(to let 'x' be missing, remove the default and write 'x?:')" },
  }
  for _, c in ipairs(misuse) do
    it("report " .. c[1] .. ": " .. c[2], function()
      assert.are.same({ c[2] }, (h.errors("schema Sub { v: int }\nschema A {\n  x: " .. c[1] .. "\n}")))
    end)
  end

  -- each level was a C frame: a 20,000-level chain overflowed the stack (a crash of check and load)
  it("report defaults that fill defaults more than 200 levels deep, at the one past the bound", function()
    local function chain(n)
      local src = {}
      for i = 1, n - 1 do src[i] = ("schema S%d { s: S%d @default({}) }"):format(i, i + 1) end
      src[n] = ("schema S%d { v: int @default(1) }"):format(n)
      return table.concat(src, "\n")
    end
    assert.truthy(h.compile(chain(200)))
    local _, err = h.compile(chain(20000))
    local d = err.details.diagnostics[1]
    assert.are.same({ 201, 32, "@default of 's' fills defaults nested more than 200 levels deep (a default " ..
      "whose type has fields with defaults of their own, and so on)" }, { d.line, d.col, d.message })
  end)

  it("report a bad @default at the value", function()
    local _, err = h.compile("schema A {\n  x: int @range(0, 5) @default(10)\n}")
    local d = err.details.diagnostics[1]
    assert.are.same({ 2, 32 }, { d.line, d.col })
  end)
end)
