local luma = require "luma"
local h = require "spec.helpers"

local program = luma.compile(h.calculate .. [[
schema Invoice { invoice_number: string }
schema Receipt { reference: string, total?: float @range(0, null) }
schema Document = Invoice | Receipt tagged by kind

tool classify(text: string) -> Document {}
tool file_doc(doc: Document, note?: string) -> Document {}

schema Item {
  sku: string @length(3, 8) @pattern("^[A-Z]+-[0-9]+$")
  qty: int @range(1, 100)
}

schema Order {
  id: int
  price: float
  paid: bool
  status: enum["open", "closed"]
  note?: string
  limit?: int @default(10)
  tags?: string[] @items(1, 3) @length(1, null)
  items: Item[] @items(null, 5)
  meta?: any
}

schema Reading {
  celsius: float @range(-50, 60) @severity("soft")
  label: string @length(1, 10) @severity("soft")
  station: string @length(1, 4)
}
tool read_sensor(station: string) -> Reading {}
tool set_level(level: int @range(0, 10) @severity("soft")) -> Reading {}
]])

local function first_error(name, value, opts)
  local ok, err = program:validate(name, value, opts)
  assert.is_nil(ok)
  assert.is_true(luma.is_error(err))
  return err.message, err
end

local order = function(over)
  local o = { id = 1, price = 9.5, paid = false, status = "open", items = { { sku = "AB-12", qty = 2 } } }
  for k, v in pairs(over or {}) do o[k] = v end
  return o
end

describe("validation of tool input", function()
  it("accepts a valid calculate input", function()
    assert.is_true(program:validate("__tool_calculate_input", { a = 2, b = 3, operation = "add" }))
  end)

  it("names the path in the message, as calculate.input.a", function()
    assert.are.equal("calculate.input.a must be at most 1000000",
      first_error("__tool_calculate_input", { a = 2000000, b = 3, operation = "add" }))
  end)

  it("keeps every violation in details, the first one in the message", function()
    local message, err = first_error("__tool_calculate_input", { a = -1, b = 2e9, operation = "sub", extra = 1 })
    assert.are.equal("VALIDATION_FAILED", err.code)
    assert.are.equal(err.details.violations[1].message, message)
    local got = {}
    for i, v in ipairs(err.details.violations) do got[i] = v.message end
    assert.are.same({
      "calculate.input.a must be at least 0",
      "calculate.input.b must be at most 1000000",
      "calculate.input.extra is not allowed",
      'calculate.input.operation must be one of "add", "multiply"',
    }, got)
    assert.are.equal("minimum", err.details.violations[1].rule)
    assert.are.equal("calculate.input.a", err.details.violations[1].path)
  end)

  it("prints [CODE] message with tostring", function()
    local _, err = program:validate("__tool_calculate_input", { a = 1, b = 1 })
    assert.are.equal("[VALIDATION_FAILED] calculate.input.operation is required", tostring(err))
  end)
end)

describe("validation of types", function()
  local cases = {
    { "int must be integral", { id = 1.5 }, "Order.id must be an integer" },
    { "int is not a string", { id = "1" }, "Order.id must be an integer" },
    { "float is a number", { price = "9" }, "Order.price must be a number" },
    { "float must be finite", { price = 1 / 0 }, "Order.price must be a finite number" },
    { "NaN is not a number", { price = 0 / 0 }, "Order.price must be a finite number" },
    { "bool", { paid = 0 }, "Order.paid must be a boolean" },
    { "enum", { status = "pending" }, 'Order.status must be one of "open", "closed"' },
    { "enum is a string", { status = 1 }, 'Order.status must be one of "open", "closed"' },
    { "string", { note = 5 }, "Order.note must be a string" },
    { "string must be UTF-8", { note = "\xff\xfe" }, "Order.note must be valid UTF-8" },
    { "array", { tags = "a" }, "Order.tags must be an array" },
    { "array has no holes", { tags = { "a", nil, "c" } }, "Order.tags must be an array" },
    { "array has no string keys", { tags = { x = "a" } }, "Order.tags must be an array" },
    { "items of an array", { tags = { "a", 2 } }, "Order.tags[2] must be a string" },
    { "@items minimum", { tags = {} }, "Order.tags must have at least 1 item" },
    { "@items maximum", { tags = { "a", "b", "c", "d" } }, "Order.tags must have at most 3 items" },
    { "@length applies to the items of a string array", { tags = { "" } }, "Order.tags[1] must be at least 1 character long" },
    { "nested records", { items = { { sku = "AB-12", qty = 0 } } }, "Order.items[1].qty must be at least 1" },
    { "@length counts characters", { items = { { sku = "ÄB-1234567", qty = 1 } } }, "Order.items[1].sku must be at most 8 characters long" },
    { "@pattern", { items = { { sku = "ab-12", qty = 1 } } }, 'Order.items[1].sku must match the pattern "^[A-Z]+-[0-9]+$"' },
    { "unknown fields", { colour = "red" }, "Order.colour is not allowed" },
    { "keys that are not names", { ["two words"] = 1 }, 'Order["two words"] is not allowed' },
    { "keys that are not strings", { [1] = true }, "Order[1] is not allowed" },
    { "a record is a table", { items = { 5 } }, "Order.items[1] must be an object" },
    { "a record is not a table marked as an array", { items = { setmetatable({}, luma.array_mt) } },
      "Order.items[1] must be an object" },
    { "any rejects functions", { meta = { f = print } }, "Order.meta.f must be a JSON value, not a function" },
    { "any rejects coroutines", { meta = coroutine.create(print) }, "Order.meta must be a JSON value, not a thread" },
    { "any rejects mixed tables", { meta = { 1, x = 2 } }, "Order.meta must be a JSON value: a table needs string keys or the items 1..n" },
    { "any needs finite numbers", { meta = { n = 0 / 0 } }, "Order.meta.n must be a finite number" },
  }
  for _, c in ipairs(cases) do
    it(c[1], function()
      assert.are.equal(c[3], (first_error("Order", order(c[2]))))
    end)
  end

  it("requires the fields that are neither optional nor defaulted", function()
    local value = order()
    value.paid = nil
    assert.are.equal("Order.paid is required", (first_error("Order", value)))
  end)

  it("accepts a float with an integral value for int, and stores an integer", function()
    local value = order { id = 7.0 }
    assert.is_true(program:validate("Order", value))
    assert.are.equal(7, value.id)
    if math.type then assert.are.equal("integer", math.type(value.id)) end
  end)

  it("compares an integer with a float bound, and a float with an integer bound, exactly", function()
    local p = luma.compile([[
schema A { x: int @range(null, 9007199254740992.0) }
schema B { x: int @range(0, 9007199254740993) }
schema D { x: float @range(null, 9007199254740993) }]])
    local cases = {
      { "A", 9007199254740992, true }, { "A", 9007199254740993, false },
      { "B", 9007199254740993, true }, { "B", 9007199254740994, false },
      { "D", 9007199254740992.0, true }, { "D", 9007199254740994.0, false },
    }
    for _, c in ipairs(cases) do
      assert.are.equal(c[3], p:validate(c[1], { x = c[2] }) == true, c[1] .. " " .. string.format("%.0f", c[2]))
    end
  end)

  it("refuses an integral float beyond 64 bits for int, saying so", function()
    local p = luma.compile("schema C { x: int }")
    local ok, err = p:validate("C", { x = 1e19 })
    assert.is_nil(ok)
    assert.are.equal("C.x must be an integer that fits in 64 bits (from -2^63 to 2^63 - 1)", err.message)
    ok, err = p:validate("C", { x = -2 ^ 63 })
    assert.is_true(ok)
  end)

  it("refuses the JSON integers just past -2^63, which a double would round to -2^63, as it refuses 1e19", function()
    local p = luma.compile("schema C { x: int }\nschema F { x: float }")
    for _, text in ipairs { "-9223372036854775809", "-9223372036854776000", "-9223372036854776832" } do
      local ok, err = p:validate("C", luma.json.decode('{"x": ' .. text .. '}'))
      assert.is_nil(ok, text)
      assert.are.equal("C.x must be an integer that fits in 64 bits (from -2^63 to 2^63 - 1)", err.message)
      assert.is_true(p:validate("F", luma.json.decode('{"x": ' .. text .. '}')))
    end
    local v = luma.json.decode('{"x": -9223372036854775808}')
    assert.is_true(p:validate("C", v))
    assert.are.equal(math.mininteger, v.x)
  end)

  it("accepts an integer for float", function()
    assert.is_true(program:validate("Order", order { price = 3 }))
  end)

  it("fills a missing optional field that has a @default", function()
    local value = order()
    assert.is_true(program:validate("Order", value))
    assert.are.equal(10, value.limit)
  end)

  it("treats null on an optional field as absent", function()
    local value = order { note = luma.null, limit = luma.null }
    assert.is_true(program:validate("Order", value))
    assert.is_nil(value.note)
    assert.are.equal(10, value.limit)
  end)

  it("does not accept null for a required field", function()
    assert.are.equal("Order.id must be an integer", (first_error("Order", order { id = luma.null })))
  end)

  it("accepts any JSON value for any", function()
    local value = order { meta = { list = { 1, 2.5, "x", true, luma.null }, nested = { a = {} } } }
    assert.is_true(program:validate("Order", value))
  end)

  it("accepts an empty table as an empty array", function()
    assert.is_true(program:validate("Order", order { items = {} }))
  end)

  it("never runs the value's metamethods", function()
    local touched = false
    local trap = setmetatable({}, {
      __index = function() touched = true end,
      __pairs = function() touched = true end,
      __len = function() touched = true; return 1 end,
    })
    local value = order { meta = trap, items = setmetatable({ { sku = "AB-1", qty = 1 } }, getmetatable(trap)) }
    assert.is_true(program:validate("Order", value))
    assert.is_false(touched)
  end)
end)

describe("validation of tagged unions", function()
  it("fills defaults with their union tags at any depth, whatever order the schemas are declared in", function()
    -- Box's defaults take in Holder's and Invoice's, which are declared after it
    local p = luma.compile([[
schema Box { d: Document @default({ number: "x" }), e: Holder @default({}), l: Holder[] @default([{}]) }
schema Holder { h: Inner @default({ b: 1 }) }
schema Document = Invoice | Receipt tagged by kind
schema Invoice { number: string, inner: Inner @default({ a: 1 }) }
schema Receipt { reference: string }
schema Inner = A | B tagged by t
schema A { a: int }
schema B { b: int }
tool t() -> Box {}]])
    local box = {}
    assert.is_true(p:validate("Box", box))
    local want = { d = { kind = "Invoice", number = "x", inner = { t = "A", a = 1 } }, e = { h = { t = "B", b = 1 } },
      l = { { h = { t = "B", b = 1 } } } }
    assert.are.same(want, box)
    -- the filled value is one the tool's own output validation takes
    assert.is_true(p:validate("Box", box, { mode = "output" }))
    p:register("t", function() return {} end)
    assert.are.same(want, (p:call("t", {})))
    -- and the JSON Schema's defaults are the same values
    local s = p:json_schema("Box")
    assert.are.same(want.d, s.properties.d.default)
    assert.are.same(want.e, s.properties.e.default)
  end)

  it("infers the member of an input and writes the tag", function()
    local input = { doc = { reference = "R-1" } }
    assert.is_true(program:validate("__tool_file_doc_input", input))
    assert.are.equal("Receipt", input.doc.kind)
  end)

  it("checks an input against the member its tag names", function()
    local input = { doc = { kind = "Invoice", reference = "R-1" } }
    local message, err = first_error("__tool_file_doc_input", input)
    assert.are.equal("file_doc.input.doc.invoice_number is required", message)
    assert.are.equal("file_doc.input.doc.reference is not allowed", err.details.violations[2].message)
  end)

  it("rejects an input tag that names no member", function()
    local message = first_error("__tool_file_doc_input", { doc = { kind = "Memo", reference = "R" } })
    assert.are.equal("file_doc.input.doc.kind must identify a tagged union member.", message)
  end)

  it("rejects an input that fits no member, saying for each member the first reason it did not fit", function()
    local message = first_error("__tool_file_doc_input", { doc = { title = "x" } })
    assert.are.equal("file_doc.input.doc must match a member of Document: " ..
      "as Invoice, file_doc.input.doc.title is not allowed; as Receipt, file_doc.input.doc.title is not allowed", message)
    message = first_error("__tool_file_doc_input", { doc = {} })
    assert.are.equal("file_doc.input.doc must match a member of Document: " ..
      "as Invoice, file_doc.input.doc.invoice_number is required; as Receipt, file_doc.input.doc.reference is required",
      message)
    message = first_error("__tool_file_doc_input", { doc = { reference = 5 } })
    assert.are.equal("file_doc.input.doc must match a member of Document: " ..
      "as Invoice, file_doc.input.doc.reference is not allowed; as Receipt, file_doc.input.doc.reference must be a string",
      message)
  end)

  it("requires the tag on output: nobody writes it for the handler", function()
    local message, err = first_error("Document", { invoice_number = "A-1" }, { mode = "output", root = "classify.output" })
    assert.are.equal("classify.output.kind must identify a tagged union member.", message)
    assert.are.equal("VALIDATION_FAILED", err.code)
  end)

  it("accepts a tagged output", function()
    assert.is_true(program:validate("Document", { kind = "Invoice", invoice_number = "A-1" }, { mode = "output" }))
  end)
end)

describe("@severity(\"soft\")", function()
  it("turns a broken rule of an output into a warning", function()
    local ok, warnings = program:validate("Reading", { celsius = 80, label = "x", station = "S1" }, { mode = "output", root = "read_sensor.output" })
    assert.is_true(ok)
    assert.are.equal(1, #warnings)
    assert.are.equal("read_sensor.output.celsius must be at most 60", warnings[1].message)
    assert.are.equal("maximum", warnings[1].rule)
  end)

  it("keeps hard rules of the same output hard, and reports soft ones beside", function()
    local message, err = first_error("Reading", { celsius = 80, label = "", station = "TOOLONG" }, { mode = "output" })
    assert.are.equal("Reading.station must be at most 4 characters long", message)
    assert.are.equal(2, #err.details.warnings)
  end)

  it("stays hard on input", function()
    assert.are.equal("set_level.input.level must be at most 10",
      (first_error("__tool_set_level_input", { level = 11 })))
  end)

  it("does not soften a wrong type", function()
    assert.are.equal("Reading.celsius must be a number",
      (first_error("Reading", { celsius = "hot", label = "x", station = "S1" }, { mode = "output" })))
  end)
end)

describe("validation of hostile values", function()
  it("reports a table with a cycle", function()
    local t = {}
    t.self = t
    assert.are.equal("Order.meta.self contains a cycle", (first_error("Order", order { meta = t })))
  end)

  it("reports a depth of 10,000 without crashing", function()
    local deep = {}
    local cur = deep
    for _ = 1, 10000 do cur.x = {}; cur = cur.x end
    local message, err = first_error("Order", order { meta = deep })
    assert.matches("is nested too deeply %(more than 100 levels%)$", message)
    assert.are.equal("depth", err.details.violations[1].rule)
    assert.matches("<%d+ more levels>", message)
  end)

  it("reports a 100 MB string", function()
    local message = first_error("Order", order { note = string.rep("x", 100 * 1024 * 1024) })
    assert.are.equal("Order.note is too long (104857600 bytes; the limit is 16777216)", message)
  end)

  it("reports userdata", function()
    assert.are.equal("Order.meta must be a JSON value, not a userdata",
      (first_error("Order", order { meta = io.stdout })))
  end)

  it("reports a value that is not a table", function()
    assert.are.equal("Order must be an object", (first_error("Order", "text")))
    assert.are.equal("Order must be an object", (first_error("Order", nil)))
  end)

  it("keeps at most max_violations errors and says the list is cut", function()
    local p = luma.compile("schema L { xs: int[] }", "l.luma", { limits = { max_violations = 3 } })
    local xs = {}
    for i = 1, 1000 do xs[i] = "s" end
    local ok, err = p:validate("L", { xs = xs })
    assert.is_nil(ok)
    assert.are.equal(3, #err.details.violations)
    assert.is_true(err.details.truncated)
  end)

  it("refuses to match a pattern when the work would exceed max_pattern_work", function()
    local p = luma.compile('schema L { v: string @pattern(".{0,1000}x") }')
    local ok, err = p:validate("L", { v = string.rep("y", 1000000) })
    assert.is_nil(ok)
    assert.are.equal("L.v is too long to match against its pattern (1000000 bytes)", err.message)
    local small = luma.compile('schema L { v: string @pattern("^y+$") }', "l.luma", { limits = { max_pattern_work = 10 } })
    assert.is_nil((small:validate("L", { v = "yyyyyy" })))
    assert.is_true(small:validate("L", { v = "y" }))
  end)

  it("honours max_depth and max_string_bytes", function()
    local p = luma.compile("schema L { v: any }", "l.luma", { limits = { max_depth = 2, max_string_bytes = 4 } })
    assert.is_nil((p:validate("L", { v = "12345" })))
    assert.is_true(p:validate("L", { v = "1234" }))
    assert.is_nil((p:validate("L", { v = { { {} } } })))
  end)
end)

describe("empty tables (found by the Ajv differential, spec/40)", function()
  it("refuses the JSON array [] for a record", function()
    local message = first_error("Item", luma.json.decode("[]"))
    assert.are.equal("Item must be an object", message)
  end)

  it("takes an empty table for an array and writes it back as [], as the JSON Schema says", function()
    local value = luma.json.decode('{"id": 1, "price": 1, "paid": true, "status": "open", "items": {}}')
    assert.is_true(program:validate("Order", value))
    assert.are.equal(luma.array_mt, getmetatable(value.items))
    assert.are.equal('{"id":1,"items":[],"limit":10,"paid":true,"price":1,"status":"open"}', luma.json.encode(value))
  end)

  it("leaves an empty array's own metatable alone", function()
    local mt = {}
    local value = order { items = setmetatable({}, mt) }
    assert.is_true(program:validate("Order", value))
    assert.are.equal(mt, getmetatable(value.items))
  end)
end)

describe("program:validate", function()
  it("raises for a schema that does not exist, with the closest name", function()
    local ok, err = pcall(program.validate, program, "Nope", {})
    assert.is_false(ok)
    assert.is_truthy(err:find("(no schema named 'Nope')", 1, true), err)
    ok, err = pcall(program.validate, program, "Ordr", {})
    assert.matches("no schema named 'Ordr'. Did you mean 'Order'?", err, 1, true)
  end)

  -- its error is made when first read: the same fields and values as any other
  local bad = { a = -1, b = 2e9, operation = "add" }
  local expected = {
    code = "VALIDATION_FAILED",
    message = "calculate.input.a must be at least 0",
    retryable = false,
    details = { violations = {
      { path = "calculate.input.a", message = "calculate.input.a must be at least 0", rule = "minimum" },
      { path = "calculate.input.b", message = "calculate.input.b must be at most 1000000", rule = "maximum" },
    } },
  }
  local function raw_copy(t)
    local out = {}
    for k, v in next, t do out[k] = type(v) == "table" and raw_copy(v) or v end
    return out
  end

  it("returns an error whose fields are all there once one is read", function()
    local _, err = program:validate("__tool_calculate_input", bad)
    assert.are.equal("VALIDATION_FAILED", err.code)
    assert.are.same(expected, raw_copy(err))
    assert.are.equal("[VALIDATION_FAILED] calculate.input.a must be at least 0", tostring(err))
  end)

  it("completes the error when it is printed or checked with is_error", function()
    local _, err = program:validate("__tool_calculate_input", bad)
    assert.are.equal("[VALIDATION_FAILED] calculate.input.a must be at least 0", tostring(err))
    assert.are.same(expected, raw_copy(err))
    _, err = program:validate("__tool_calculate_input", bad)
    assert.is_true(luma.is_error(err))
    assert.are.same(expected, raw_copy(err))
  end)

  it("completes the error when luma.json.encode writes it", function()
    local _, err = program:validate("__tool_calculate_input", bad)
    assert.are.same(expected, luma.json.decode(luma.json.encode(err)))
  end)

  -- the check of any saw the private key of its data, not a string key
  it("completes the error when it is a value of an any field, at any depth, so the handler gets its fields", function()
    local p = luma.compile("schema S { n: int }\nschema Got { got: any }\ntool take(v: any) -> Got { }\ntool give() -> Got { }\n")
    local seen
    p:register("take", function(input) seen = input.v return { got = input.v } end)
    for _, wrap in ipairs({
      function(e) return e end,
      function(e) return { inner = { e } } end,
    }) do
      local _, err = program:validate("__tool_calculate_input", bad)
      local got = p:call("take", { v = wrap(err) }).got
      local received = seen.inner and seen.inner[1] or seen
      assert.are.same(expected, raw_copy(received))
      assert.are.same(expected, raw_copy(got.inner and got.inner[1] or got))
    end
    -- and as a value of an any field of the result
    p:register("give", function() local _, err = program:validate("__tool_calculate_input", bad) return { got = err } end)
    assert.are.same(expected, raw_copy(p:call("give", {}).got))
  end)

  it("completes the error when pairs walks it (Lua 5.2 and later)", function()
    if _VERSION == "Lua 5.1" then return end
    local _, err = program:validate("__tool_calculate_input", bad)
    local seen = {}
    for k, v in pairs(err) do seen[k] = v end
    assert.are.same(expected, raw_copy(seen))
  end)

  it("gives each failure an error of its own, which outlives its program", function()
    local p = luma.compile("schema A { n: int @range(0, 9) }")
    local _, first = p:validate("A", { n = 10 })
    local _, second = p:validate("A", { n = -1 })
    assert.are_not.equal(first, second)
    p = nil
    collectgarbage()
    collectgarbage()
    assert.are.equal("A.n must be at least 0", second.message)
    assert.are.equal("A.n must be at most 9", first.message)
    assert.are.equal("maximum", first.details.violations[1].rule)
    first.message = "changed"
    assert.are.equal("changed", first.message)
    assert.are.equal("A.n must be at least 0", second.message)
  end)

  it("lets an error that was never read go, with its data", function()
    collectgarbage()
    collectgarbage()
    local before = collectgarbage("count")
    for _ = 1, 20000 do program:validate("__tool_calculate_input", bad) end
    collectgarbage()
    collectgarbage()
    -- 20,000 errors with their data would hold megabytes
    assert.is_true(collectgarbage("count") - before < 64)
  end)

  it("takes nothing but its own data for an error's data", function()
    local _, first = program:validate("__tool_calculate_input", bad)
    local key, data = next(first)
    assert.are.equal("userdata", type(data))
    for _, foreign in ipairs({ io.stdout, key, "text", 7 }) do
      local _, err = program:validate("__tool_calculate_input", bad)
      rawset(err, key, foreign)
      assert.is_nil(err.code)
      assert.are.equal("[ERROR] ", tostring(err))
    end
    -- data put under another unread error's key is read there too
    local _, other = program:validate("__tool_calculate_input", { a = 1, b = -1, operation = "add" })
    rawset(other, key, data)
    assert.are.equal("calculate.input.a must be at least 0", other.message)
    assert.are.equal("calculate.input.a must be at least 0", first.message)
    -- the metamethods taken out with the debug library and called on anything
    local mt = debug.getmetatable(first)
    assert.is_nil(mt.__index(5, "x"))
    assert.is_nil(mt.__index("s", "x"))
  end)

  it("keeps a field set on the error before any was read", function()
    local _, err = program:validate("__tool_calculate_input", bad)
    err.message = "mine"
    err.code = "MINE"
    assert.are.equal("calculate.input.a", err.details.violations[1].path)
    assert.are.equal("mine", err.message)
    assert.are.equal("MINE", err.code)
    assert.is_false(err.retryable)
    assert.are.equal("[MINE] mine", tostring(err))
  end)
end)

describe("strings that hold NUL (\\u0000) in a program", function()
  local luma = require "luma"

  it("keep it in @pattern: emitted, matched and named whole", function()
    local p = luma.compile('schema A { s: string @pattern("^a\\u0000b$") }')
    assert.are.equal("^a\0b$", p:json_schema("A").properties.s.pattern)
    assert.is_true(p:validate("A", { s = "a\0b" }))
    local ok, err = p:validate("A", { s = "ab" })
    assert.is_nil(ok)
    assert.are.equal('A.s must match the pattern "^a\\u0000b$"', err.message)
    assert.are.equal("^a\0b$", p:schema("A").fields[1].type.pattern)
  end)

  it("keep it in enum values and defaults", function()
    local p = luma.compile('schema A { e: enum["x\\u0000y", "z"], d?: string @default("q\\u0000r") }')
    local v = { e = "x\0y" }
    assert.is_true(p:validate("A", v))
    assert.are.equal("q\0r", v.d)
    assert.is_nil(p:validate("A", { e = "x" }))
  end)

  it("refuse it where C needs a plain string, saying so", function()
    local err = h.raised(luma.compile, 'schema B { s: string @desc("w\\u0000v") }\ntool t() -> B { description: "x\\u0000y" }')
    assert.matches("@desc cannot contain a NUL character", err.message, 1, true)
    assert.matches("'description' cannot contain a NUL character", err.message, 1, true)
  end)
end)
