-- The validation benchmark: program:validate against api7/jsonschema (the
-- validator of Apache APISIX, which compiles a JSON Schema to Lua code) on
-- Lua 5.4 and on LuaJIT 2.1, and against Ajv, on the same schemas and data.
-- Run from the repository root by `make bench`:
--   LUMA_BUILD=build LUMA_JIT_BUILD=build/jit lua5.4 bench/validate/run.lua
-- LUMA_BUILD holds luma/core.so built for Lua 5.4, LUMA_JIT_BUILD one built
-- against LuaJIT's headers (the Makefile's bench target builds both); without
-- the second, the LuaJIT rows are skipped. LUMA_BENCH_PROCS (default 3) is
-- the number of fresh processes per VM. Prints validations per second (the
-- median of RUNS runs of about RUN_SECONDS of CPU time each, then the median
-- over the processes) and the ratios, each with its target.
-- With --child, the script times luma and api7 in its own process and VM only,
-- and prints one "rate" line per measurement for the parent to read.

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
local root = common.setup(here)
local CHILD = arg[1] == "--child"

-- api7/jsonschema and the net.url it requires: third-party code kept beside
-- the repository (../shared/anchors), for benchmarks only.
local ANCHORS = os.getenv("LUMA_ANCHORS") or (root .. "/../shared/anchors")
package.path = ANCHORS .. "/api7-jsonschema/lib/?.lua;" .. ANCHORS .. "/neturl/lib/?.lua;" .. package.path

local luma = require "luma"
local cjson = require "cjson"

local slurp, write, shell_quote = common.slurp, common.write, common.shell_quote
local sig3, rate3, median = common.sig3, common.rate3, common.median
local VM = jit and "LuaJIT" or _VERSION

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
    api7_violation = { '"a"', "at most" },
  },
  {
    name = "place_order",
    schema = "__tool_place_order_input",
    valid = order(),
    invalid = order(7),
    violation = "place_order.input.lines[7].qty",
    api7_violation = { '"lines"', "item 7", '"qty"', "at most" },
  },
}

local function fail(fmt, ...)
  io.stderr:write("bench/validate: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

local ok_api7, jsonschema = pcall(require, "jsonschema")
if not ok_api7 then
  fail("api7/jsonschema is not found under %s (LUMA_ANCHORS): %s", ANCHORS, tostring(jsonschema))
end

-- api7/jsonschema matches `pattern` with lrexlib-pcre (or ngx.re in OpenResty),
-- which Debian does not package. Here it gets Lua's string.find instead, on a
-- translation of the regular expression into a Lua pattern, made once per
-- pattern. Only the part of the syntax that Lua patterns express the same way
-- is translated; anything else stops the run rather than match differently.
-- A Lua pattern is no slower than PCRE here, so this does not favour luma.
local lua_patterns = {}
local function to_lua_pattern(re)
  local out, i, in_class = {}, 1, false
  while i <= #re do
    local ch = re:sub(i, i)
    if ch == "\\" then
      local nxt = re:sub(i + 1, i + 1)
      if nxt:match("^[%.%-%+%*%?%[%]%^%$%(%)%%/@ ]$") then out[#out + 1] = "%" .. nxt
      elseif nxt == "d" then out[#out + 1] = "%d"
      else fail("pattern %q: \\%s has no Lua pattern here", re, nxt) end
      i = i + 2
    else
      if in_class then
        if ch == "]" then in_class = false
        elseif ch == "%" then ch = "%%" end
      elseif ch == "[" then in_class = true
      elseif ch == "%" or ch == "-" then ch = "%" .. ch
      elseif ch:match("^[|(){}]$") then fail("pattern %q: %s has no Lua pattern here", re, ch) end
      out[#out + 1] = ch
      i = i + 1
    end
  end
  return table.concat(out)
end
local find = string.find
local function match_pattern(s, re)
  local p = lua_patterns[re]
  if not p then p = to_lua_pattern(re); lua_patterns[re] = p end
  return find(s, p) ~= nil
end

local program = luma.compile(SOURCE, "bench.luma")
local validate = program.validate

-- api7 compiles the JSON Schema that luma emits for the same tool input.
-- It checks the properties in the `pairs` order of the decoded schema, kept
-- here to be reported.
for _, w in ipairs(WORKLOADS) do
  w.json_schema = program:json_schema(w.schema, { format = "json" })
  local decoded = cjson.decode(w.json_schema)
  w.api7_order = {}
  for name in pairs(decoded.properties) do w.api7_order[#w.api7_order + 1] = name end
  w.api7 = jsonschema.generate_validator(decoded, { match_pattern = match_pattern })
end

-- Both values must give the expected verdict before anything is timed, in
-- luma and in api7 (which stops at the first violation: its message must name
-- the field, and the array item, where luma found it).
for _, w in ipairs(WORKLOADS) do
  local ok, err = validate(program, w.schema, w.valid)
  if not ok then fail("%s: the valid value fails: %s", w.name, err.message) end
  ok, err = validate(program, w.schema, w.invalid)
  if ok then fail("%s: the invalid value passes", w.name) end
  local v = err.details.violations
  if #v ~= 1 or v[1].path ~= w.violation then
    fail("%s: expected one violation at %s, got %d (%s)", w.name, w.violation, #v, err.message)
  end
  ok, err = w.api7(w.valid)
  if not ok then fail("%s: api7 refuses the valid value: %s", w.name, tostring(err)) end
  ok, err = w.api7(w.invalid)
  if ok then fail("%s: api7 accepts the invalid value", w.name) end
  for _, part in ipairs(w.api7_violation) do
    if not tostring(err):find(part, 1, true) then
      fail("%s: api7's error does not name %s: %s", w.name, part, tostring(err))
    end
  end
  w.api7_message = err
end

-- Calls validate n times; returns how many passed.
local function loop(n, schema, value)
  local passed = 0
  for _ = 1, n do
    if validate(program, schema, value) then passed = passed + 1 end
  end
  return passed
end

local function loop_api7(n, check, value)
  local passed = 0
  for _ = 1, n do
    if check(value) then passed = passed + 1 end
  end
  return passed
end

-- Validations per second (common.measure); all of them pass if expect, none if not.
local function measure(what, run, expect)
  return common.measure(run, function(passed, n)
    if passed ~= (expect and n or 0) then fail("%s: %d of %d passed", what, passed, n) end
  end)
end

-- Times luma and api7 on each workload and case, one after the other, in this
-- process; returns { [workload] = { [case] = { luma = rate, api7 = rate } } }.
local function time_here()
  local rates = {}
  for _, w in ipairs(WORKLOADS) do
    rates[w.name] = {}
    for _, case in ipairs { "valid", "invalid" } do
      local value, expect = w[case], case == "valid"
      rates[w.name][case] = {
        luma = measure(w.name .. " luma " .. case, function(n) return loop(n, w.schema, value) end, expect),
        api7 = measure(w.name .. " api7 " .. case, function(n) return loop_api7(n, w.api7, value) end, expect),
      }
    end
  end
  return rates
end

if CHILD then
  -- "rate\t<workload>\t<case>\t<luma|api7>\t<validations/s>"
  local rates = time_here()
  for _, w in ipairs(WORKLOADS) do
    for _, case in ipairs { "valid", "invalid" } do
      for _, impl in ipairs { "luma", "api7" } do
        io.write(string.format("rate\t%s\t%s\t%s\t%.17g\n", w.name, case, impl, rates[w.name][case][impl]))
      end
    end
  end
  -- The floor of a failed validation: it returns a new error table, which
  -- costs at least a new empty table, and an error has a metatable
  -- (tostring, its fields made when read): "floor\t<empty>\t<with a
  -- metatable>", in ns more than returning true. (Each is kept in an
  -- upvalue, as a caller keeps an error: LuaJIT would not allocate a table
  -- nothing holds. Lua's call of setmetatable costs a little more than
  -- luma's C does.)
  local last
  local MT = { __index = function() end }
  local function yes() last = true return last end
  local function empty() last = {} return last end
  local function with_mt() last = setmetatable({}, MT) return last end
  local function calls(fn)
    return function(n)
      local passed = 0
      for _ = 1, n do if fn() then passed = passed + 1 end end
      return passed
    end
  end
  local plain = measure("return true", calls(yes), true)
  local bare = measure("a new table", calls(empty), true)
  local marked = measure("a new table with a metatable", calls(with_mt), true)
  io.write(string.format("floor\t%.17g\t%.17g\n", 1e9 / bare - 1e9 / plain, 1e9 / marked - 1e9 / plain))
  for _, w in ipairs(WORKLOADS) do io.write("order\t", w.name, "\t", table.concat(w.api7_order, ","), "\n") end
  io.write("version\t", VM, "\t", jit and jit.version or _VERSION, "\n")
  os.exit(0)
end

-- The VMs, each with its interpreter, the build of luma.core for it, and the
-- targets of luma/api7 (issue 15: at least 3x on Lua 5.4, at least 1x on LuaJIT).
local function abs(path)
  if path:sub(1, 1) == "/" then return path end
  return root .. "/" .. path
end
local VMS = {
  { name = "Lua 5.4", lua = os.getenv("LUA") or "lua5.4", build = abs(os.getenv("LUMA_BUILD") or "build"), target = 3 },
  { name = "LuaJIT", lua = os.getenv("LUAJIT") or "luajit", build = os.getenv("LUMA_JIT_BUILD"), target = 1 },
}
local PROCS = tonumber(os.getenv("LUMA_BENCH_PROCS") or "") or 3
local skipped = {}
for i = #VMS, 1, -1 do
  local vm = VMS[i]
  local f = vm.build and io.open(abs(vm.build) .. "/luma/core.so", "rb")
  if f then
    f:close()
    vm.build = abs(vm.build)
  else
    skipped[#skipped + 1] = string.format("%s (no luma/core.so under LUMA_%sBUILD: %s)", vm.name,
      vm.name == "LuaJIT" and "JIT_" or "", tostring(vm.build))
    table.remove(VMS, i)
  end
end

-- api7 generates its property checks in `pairs` order of the schema, which
-- changes with each process's string-hash seed: every VM runs PROCS fresh
-- processes, taking turns, and each rate and ratio is the median of theirs.
local per_vm = {}
for _, vm in ipairs(VMS) do per_vm[vm.name] = { procs = {} } end
for _ = 1, PROCS do
  for _, vm in ipairs(VMS) do
    local cmd = string.format("LUMA_BUILD=%s LUMA_ANCHORS=%s %s %s --child", shell_quote(vm.build),
      shell_quote(ANCHORS), vm.lua, shell_quote(here .. "/run.lua"))
    local out = slurp(cmd)
    local rates = {}
    for name, case, impl, rate in out:gmatch("rate\t(%S+)\t(%S+)\t(%S+)\t(%S+)\n") do
      rates[name .. "/" .. case .. "/" .. impl] = tonumber(rate)
    end
    for _, w in ipairs(WORKLOADS) do
      for _, case in ipairs { "valid", "invalid" } do
        for _, impl in ipairs { "luma", "api7" } do
          if not rates[w.name .. "/" .. case .. "/" .. impl] then
            fail("%s printed no %s rate for %s %s: %s", cmd, impl, w.name, case, out)
          end
        end
      end
    end
    local empty, marked = out:match("floor\t(%S+)\t(%S+)\n")
    rates.floor_empty, rates.floor_mt = tonumber(empty), tonumber(marked)
    if not (rates.floor_empty and rates.floor_mt) then fail("%s printed no floor: %s", cmd, out) end
    per_vm[vm.name].version = out:match("version\t[^\t]+\t([^\n]+)")
    -- whether api7 looked at calculate's `a`, the invalid field, first
    local order = out:match("order\tcalculate\t([^\n]+)") or ""
    if order:match("^a,") then per_vm[vm.name].a_first = (per_vm[vm.name].a_first or 0) + 1 end
    table.insert(per_vm[vm.name].procs, rates)
  end
end

-- The median over the processes of a rate, or of a ratio of two rates measured in one process.
local function rate_of(vm, key)
  local list = {}
  for i, rates in ipairs(per_vm[vm].procs) do list[i] = rates[key] end
  return median(list)
end
local function ratio_of(vm, a, b)
  local list = {}
  for i, rates in ipairs(per_vm[vm].procs) do list[i] = rates[a] / rates[b] end
  return median(list)
end

-- The same schemas (as luma emits them) and data, for Ajv.
local dir = slurp("mktemp -d \"${TMPDIR:-/tmp}/luma-bench-XXXXXX\""):gsub("%s+$", "")
if dir == "" then fail("mktemp -d failed") end
for _, w in ipairs(WORKLOADS) do
  write(dir .. "/" .. w.name .. ".schema.json", w.json_schema)
  write(dir .. "/" .. w.name .. ".valid.json", cjson.encode(w.valid))
  write(dir .. "/" .. w.name .. ".invalid.json", cjson.encode(w.invalid))
end

-- (LuaJIT's close of a pipe gives no exit status: missing lines are checked below.)
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
  io.write((string.format("%-8s %-12s %-8s %9s %9s %10s %-9s %9s %9s %13s %12s", ...):gsub("%s+$", "")), "\n")
end
row("vm", "workload", "case", "luma/s", "api7/s", "luma/api7", "target", "Ajv/s", "luma/Ajv", "Ajv allErr/s",
  "luma/allErr")
local missed = 0
for _, vm in ipairs(VMS) do
  for _, w in ipairs(WORKLOADS) do
    local a = ajv[w.name]
    for _, case in ipairs { "valid", "invalid" } do
      local key = w.name .. "/" .. case .. "/"
      local l, r = rate_of(vm.name, key .. "luma"), rate_of(vm.name, key .. "api7")
      local ratio = ratio_of(vm.name, key .. "luma", key .. "api7")
      local met = ratio >= vm.target
      if not met then missed = missed + 1 end
      local d, all = a[case .. "/default"], a[case .. "/allErrors"]
      row(vm.name, w.name, case, rate3(l), rate3(r), sig3(ratio), string.format(">=%g %s", vm.target, met and "ok" or "MISS"),
        rate3(d), ratio3(l, d), case == "invalid" and rate3(all) or "", case == "invalid" and ratio3(l, all) or "")
    end
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
  io.write(string.format("%-12s %d scalars, %d tables, %d bytes of JSON; invalid at %s (Ajv: %s; api7: %s)\n", w.name,
    scalars, tables, #cjson.encode(w.valid), w.violation, ajv[w.name]["invalid/path"], w.api7_message))
end
for _, vm in ipairs(VMS) do
  io.write(string.format("%s: api7 checked calculate's a first, so failed at once on the invalid value, in %d of %d processes\n",
    vm.name, per_vm[vm.name].a_first or 0, PROCS))
end
-- How far a failed validation can go: at best it costs a valid one plus
-- the new error table it returns.
for _, vm in ipairs(VMS) do
  local floors, bounds = { empty = {}, mt = {} }, { empty = {}, mt = {} }
  for i, rates in ipairs(per_vm[vm.name].procs) do
    for _, kind in ipairs { "empty", "mt" } do
      local ns = rates["floor_" .. kind]
      floors[kind][i] = ns
      bounds[kind][i] = (1 / rates["calculate/invalid/api7"]) / (1 / rates["calculate/valid/luma"] + ns * 1e-9)
    end
  end
  io.write(string.format("%s: a new table costs %.0f ns more than returning true, %.0f with a metatable; so luma/api7 " ..
    "on calculate invalid is at most %sx, %sx (api7's time / (luma's valid time + that); target %gx)\n",
    vm.name, median(floors.empty), median(floors.mt), sig3(median(bounds.empty)), sig3(median(bounds.mt)), vm.target))
end
for _, s in ipairs(skipped) do io.write("skipped: ", s, "\n") end
local versions = {}
for _, vm in ipairs(VMS) do versions[#versions + 1] = per_vm[vm.name].version or vm.name end
local share = ajv.ajv and ajv.ajv["all/cpushare"]
io.write(string.format("(luma and api7: median over %d fresh processes per VM of the median of %d runs of ~%.1f s, CPU time;\n" ..
  " ratios are taken within each process; %s; luma %s; node %s, wall time, CPU/wall %s; %d of %d ratios below target)\n",
  PROCS, common.RUNS, common.RUN_SECONDS, table.concat(versions, ", "), luma.version or "?",
  (slurp("node --version"):gsub("%s+$", "")), share and string.format("%.2f", share) or "?", missed, 4 * #VMS))
os.exit(0)
