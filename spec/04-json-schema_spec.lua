local luma = require "luma"
local cjson = require "cjson"
local h = require "spec.helpers"

describe("the JSON Schema of a tool's input", function()
  it("is built as __tool_<name>_input from the parameters", function()
    local program = luma.compile(h.calculate)
    assert.are.same({
      type = "object",
      properties = {
        a = { type = "number", minimum = 0, maximum = 1000000 },
        b = { type = "number", minimum = 0, maximum = 1000000 },
        operation = { type = "string", description = "Operation to perform", enum = { "add", "multiply" } },
      },
      required = { "a", "b", "operation" },
      additionalProperties = false,
    }, program:json_schema("__tool_calculate_input"))
  end)

  it("leaves optional and defaulted parameters out of required", function()
    local program = luma.compile("schema R { v: int }\ntool search(q: string, limit?: int @default(10), page?: int) -> R {}")
    local schema = program:json_schema("__tool_search_input")
    assert.are.same({ "q" }, schema.required)
    assert.are.same({ type = "integer", default = 10 }, schema.properties.limit)
  end)

  it("gives a default as validation fills it: a union member with its tag, an int as an integer", function()
    local program = luma.compile([[
schema Invoice { number: string }
schema Receipt { reference: string }
schema Document = Invoice | Receipt tagged by kind
schema A { doc: Document @default({ reference: "r" }), n: int @default(2.0), xs: int[] @default([]) }
]])
    local text = program:json_schema("A", { format = "json" })
    assert.matches('"default": {\n%s*"kind": "Receipt",\n%s*"reference": "r"\n%s*}', text)
    assert.matches('"default": 2\n', text)
    assert.matches('"default": %[%]', text)
  end)

  it("puts referenced schemas under $defs, transitively, and only those", function()
    local program = luma.compile([[
schema Unused { z: int }
schema Leaf { v: int }
schema Mid { leaf: Leaf, leaves?: Leaf[] }
schema R { ok: bool }
tool t(m: Mid) -> R {}]])
    local schema = program:json_schema("__tool_t_input")
    assert.are.same({ ["$ref"] = "#/$defs/Mid" }, schema.properties.m)
    local names = {}
    for name in pairs(schema["$defs"]) do names[#names + 1] = name end
    table.sort(names)
    assert.are.same({ "Leaf", "Mid" }, names)
    assert.are.same({ ["$ref"] = "#/$defs/Leaf" }, schema["$defs"].Mid.properties.leaf)
  end)

  it("writes a tagged union as anyOf of its members, each with a const tag", function()
    local program = luma.compile([[
schema Invoice { invoice_number: string }
schema Receipt { reference: string }
schema Document = Invoice | Receipt tagged by kind
tool classify(text: string) -> Document {}]])
    assert.are.same({ anyOf = {
      { type = "object", additionalProperties = false, required = { "kind", "invoice_number" },
        properties = { kind = { type = "string", const = "Invoice" }, invoice_number = { type = "string" } } },
      { type = "object", additionalProperties = false, required = { "kind", "reference" },
        properties = { kind = { type = "string", const = "Receipt" }, reference = { type = "string" } } },
    } }, program:json_schema("Document"))
  end)

  it("keeps declaration order in JSON text", function()
    local program = luma.compile("schema R { v: int }\ntool t(zeta: int, alpha: int, mid: int) -> R {}")
    local text = program:json_schema("__tool_t_input", { format = "json" })
    assert.is_truthy(text:find('"zeta".*"alpha".*"mid"'))
    assert.is_truthy(text:find('^{\n  "type": "object",\n  "properties": {'))
  end)

  it("returns nil for a schema that does not exist", function()
    assert.is_nil(luma.compile(h.calculate):json_schema("Nope"))
  end)
end)

describe("declared schemas", function()
  it("each get a JSON Schema too", function()
    local program = luma.compile(h.calculate)
    assert.are.same({ type = "object", properties = { result = { type = "number" } },
      required = { "result" }, additionalProperties = false }, program:json_schema("CalcResult"))
  end)
end)

describe("tool declarations", function()
  local source = h.calculate .. [[
tool text_stats(text: string @desc("Text to measure")) -> CalcResult {
  description: "Counts the words and characters of a text"
}]]

  it("are { name, description, parameters } for every tool", function()
    local tools = luma.compile(source):tools()
    assert.are.equal(2, #tools)
    assert.are.equal("calculate", tools[1].name)
    assert.are.equal("", tools[1].description)
    assert.are.same(luma.compile(source):json_schema("__tool_calculate_input"), tools[1].parameters)
    assert.are.same({ name = "text_stats", description = "Counts the words and characters of a text",
      parameters = { type = "object", additionalProperties = false, required = { "text" },
        properties = { text = { type = "string", description = "Text to measure" } } } }, tools[2])
  end)

  it("print with luma-lua tools as the same JSON, in declaration order", function()
    local r = h.run { "tools", h.program_file(source) }
    assert.are.equal(0, r.status)
    assert.are.same(luma.compile(source):tools(), cjson.decode(r.stdout))
    assert.is_truthy(r.stdout:find('"name": "calculate",\n    "description": "",\n    "parameters"', 1, true))
    assert.is_truthy(r.stdout:find('"a".*"b".*"operation"'))
  end)

  it("print an empty array for a program without tools", function()
    local r = h.run { "tools", h.program_file("schema A { x: int }") }
    assert.are.equal("[]\n", r.stdout)
  end)

  it("escape strings as JSON", function()
    local program = luma.compile('schema R { v: int }\ntool t(x: string @desc("say \\"hi\\"\\n\\tnow \\u0001")) -> R {}')
    local text = program:tools { format = "json" }
    assert.is_truthy(text:find('"description": "say \\"hi\\"\\n\\tnow \\u0001"', 1, true))
    assert.are.same(program:tools(), cjson.decode(text))
  end)
end)
