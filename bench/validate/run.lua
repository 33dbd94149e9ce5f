-- The validation benchmark: program:validate against Ajv on the same schemas
-- and data. Run from the repository root by `make bench`:
--   LUMA_BUILD=build lua5.4 bench/validate/run.lua
-- Prints validations per second (the median of RUNS runs of about RUN_SECONDS
-- of CPU time each) for luma and for Ajv, and their ratio.

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
common.setup(here)

local luma = require "luma"
local cjson = require "cjson"

local slurp, write, shell_quote = common.slurp, common.write, common.shell_quote
local sig3, rate3 = common.sig3, common.rate3

local SOURCE = [[
schema CalcResult {
  result: float
}

tool calculate(
  a: float @range(0, 1000000),
  b: float @range(0, 1000000),
  operation: enum["add", "multiply"] @desc("Operation to perform")
) -> CalcResult {
  side_effects: "none"
  cache: true
}

schema Address {
  street: string @length(1, 200)
  city: string @length(1, 100)
  postcode: string @length(3, 12)
  country: string @length(2, 2)
}

schema Line {
  sku: string @length(3, 32)
  qty: int @range(1, 1000)
  price: float @range(0, 100000)
  taxable: bool
  note?: string @length(0, 200)
}

schema Receipt {
  order_id: string
}

tool place_order(
  id: string @length(8, 64),
  customer: string @length(1, 100),
  email: string @length(3, 254) @pattern("^[^@ ]+@[^@ ]+\\.[a-z]+$"),
  currency: enum["EUR", "USD", "GBP", "JPY"],
  total: float @range(0, 1000000000),
  discount: float @range(0, 1),
  tax_rate: float @range(0, 1),
  weight_kg: float,
  priority: int @range(0, 10),
  attempts: int @range(0, 100),
  created_at: int @range(0, null),
  express: bool,
  gift_wrap: bool,
  paid: bool,
  coupon?: string @length(1, 32),
  notes: string @length(0, 500),
  channel: string @length(1, 20),
  ref_code: string @length(0, 64),
  address: Address,
  lines: Line[] @items(1, 100)
) -> Receipt {
  side_effects: "write"
}
]]

-- Values are already normalized (ints are Lua integers, every required field
-- is present), so validation writes nothing and each call sees the same table.
local function order(bad_line)
  local lines = {}
  for i = 1, 10 do
    lines[i] = {
      sku = string.format("SKU-%04d", i),
      qty = i,
      price = 9.5 + i,
      taxable = i % 2 == 0,
      note = i % 3 == 0 and "fragile, keep upright" or nil,
    }
  end
  if bad_line then lines[bad_line].qty = 5000 end
  return {
    id = "ord-2024-000123",
    customer = "Ada Lovelace",
    email = "ada@example.org",
    currency = "EUR",
    total = 1234.5,
    discount = 0.1,
    tax_rate = 0.2,
    weight_kg = 3.25,
    priority = 3,
    attempts = 0,
    created_at = 1718000000,
    express = true,
    gift_wrap = false,
    paid = true,
    notes = "Leave the parcel with the neighbour if nobody is at home.",
    channel = "web",
    ref_code = "REF-7781",
    address = { street = "12 St James's Square", city = "London", postcode = "SW1Y 4JH", country = "GB" },
    lines = lines,
  }
end

local WORKLOADS = {
  {
    name = "calculate",
    schema = "__tool_calculate_input",
    valid = { a = 2, b = 3, operation = "add" },
    invalid = { a = 2000000, b = 3, operation = "add" },
    violation = "calculate.input.a",
  },
  {
    name = "place_order",
    schema = "__tool_place_order_input",
    valid = order(),
    invalid = order(7),
    violation = "place_order.input.lines[7].qty",
  },
}

local function fail(fmt, ...)
  io.stderr:write("bench/validate: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

local program = luma.compile(SOURCE, "bench.luma")
local validate = program.validate

-- Both values must give the expected verdict before anything is timed.
for _, w in ipairs(WORKLOADS) do
  local ok, err = validate(program, w.schema, w.valid)
  if not ok then fail("%s: the valid value fails: %s", w.name, err.message) end
  ok, err = validate(program, w.schema, w.invalid)
  if ok then fail("%s: the invalid value passes", w.name) end
  local v = err.details.violations
  if #v ~= 1 or v[1].path ~= w.violation then
    fail("%s: expected one violation at %s, got %d (%s)", w.name, w.violation, #v, err.message)
  end
end

-- Calls validate n times; returns how many passed.
local function loop(n, schema, value)
  local passed = 0
  for _ = 1, n do
    if validate(program, schema, value) then passed = passed + 1 end
  end
  return passed
end

-- Validations per second (common.measure); all of them pass if expect, none if not.
local function measure(schema, value, expect)
  return common.measure(function(n) return loop(n, schema, value) end, function(passed, n)
    if passed ~= (expect and n or 0) then fail("%s: %d of %d passed", schema, passed, n) end
  end)
end

local results = {}
for _, w in ipairs(WORKLOADS) do
  results[w.name] = {
    valid = measure(w.schema, w.valid, true),
    invalid = measure(w.schema, w.invalid, false),
  }
end

-- The same schemas (as luma emits them) and data, for Ajv.
local dir = slurp("mktemp -d"):gsub("%s+$", "")
if dir == "" then fail("mktemp -d failed") end
for _, w in ipairs(WORKLOADS) do
  write(dir .. "/" .. w.name .. ".schema.json", program:json_schema(w.schema, { format = "json" }))
  write(dir .. "/" .. w.name .. ".valid.json", cjson.encode(w.valid))
  write(dir .. "/" .. w.name .. ".invalid.json", cjson.encode(w.invalid))
end

local out, ok = slurp("NODE_PATH=/usr/share/nodejs node " .. shell_quote(here .. "/ajv.js") .. " " .. shell_quote(dir))
os.execute("rm -rf " .. shell_quote(dir))
if not ok then fail("node bench/validate/ajv.js failed") end

-- Lines of "<workload>\t<case>\t<options>\t<validations/s>", and
-- "<workload>\tinvalid\tpath\t<where Ajv found the violation>", and
-- "ajv\tall\tcpushare\t<process CPU seconds per wall second of its loops>".
local ajv = {}
for line in out:gmatch("[^\n]+") do
  local name, case, options, value = line:match("^(%S+)\t(%S+)\t(%S+)\t(%S+)$")
  if name then
    ajv[name] = ajv[name] or {}
    ajv[name][case .. "/" .. options] = options == "path" and value or tonumber(value)
  end
end
for _, w in ipairs(WORKLOADS) do
  for _, key in ipairs { "valid/default", "invalid/default", "invalid/allErrors", "invalid/path" } do
    if not (ajv[w.name] and ajv[w.name][key]) then fail("ajv.js printed no %s for %s", key, w.name) end
  end
end

local function ratio3(a, b)
  if not (a and b) then return "-" end
  return sig3(a / b)
end

local function row(...)
  io.write((string.format("%-12s %-8s %10s %10s %10s %14s %14s", ...):gsub("%s+$", "")), "\n")
end
row("workload", "case", "luma/s", "Ajv/s", "luma/Ajv", "Ajv allErr/s", "luma/allErr")
for _, w in ipairs(WORKLOADS) do
  local a = ajv[w.name] or {}
  for _, case in ipairs { "valid", "invalid" } do
    local l = results[w.name][case]
    local d, all = a[case .. "/default"], a[case .. "/allErrors"]
    row(w.name, case, rate3(l), rate3(d), ratio3(l, d),
      case == "invalid" and rate3(all) or "", case == "invalid" and ratio3(l, all) or "")
  end
end

-- Scalars and tables in a value, to say how big each workload is.
local function count(v)
  if type(v) ~= "table" then return 1, 0 end
  local scalars, tables = 0, 1
  for _, x in pairs(v) do
    local s, t = count(x)
    scalars, tables = scalars + s, tables + t
  end
  return scalars, tables
end

for _, w in ipairs(WORKLOADS) do
  local scalars, tables = count(w.valid)
  io.write(string.format("%-12s %d scalars, %d tables, %d bytes of JSON; invalid at %s (Ajv: %s)\n", w.name,
    scalars, tables, #cjson.encode(w.valid), w.violation, ajv[w.name]["invalid/path"]))
end
local share = ajv.ajv and ajv.ajv["all/cpushare"]
io.write(string.format("(median of %d runs of ~%.1f s each; luma %s, CPU time; node %s, wall time, CPU/wall %s)\n",
  common.RUNS, common.RUN_SECONDS, luma.version or "?", (slurp("node --version"):gsub("%s+$", "")),
  share and string.format("%.2f", share) or "?"))
os.exit(0)
