-- A differential test of luma's validator against Ajv 6 (Debian's node-ajv).
--
-- Programs in the contract language are generated from a fixed seed: record
-- schemas with every field type and annotation, arrays, defaults, optional
-- fields and tagged unions. Values are generated near the rules' edges (and
-- past them), as JSON text. luma validates each value (program:validate on
-- the decoded text); Ajv validates the same text against the JSON Schema luma
-- emits for the schema (program:json_schema). When luma accepts a value, the
-- value as luma normalised it (defaults filled, tags written) must pass Ajv
-- too: what luma hands a handler or a model fits its own schema.
--
-- Every disagreement must be one of the documented differences below, checked
-- precisely (the kind of each reason and the data at its path), or the spec
-- fails and prints the seed and program index that reproduce it:
--   LUMA_AJV_SEED=<seed> [LUMA_AJV_PROGRAM=<index>] busted spec/40-ajv-differential_spec.lua
--
-- Documented differences (README, "Validation and JSON Schema"):
--   * null on an optional field counts as missing (luma drops it; Ajv refuses null);
--   * a tagged-union value without its tag gets the tag inferred (Ajv requires it);
--   * an empty JSON object is accepted for an array: in Lua both are an empty
--     table (luma writes it back as []);
--   * an integral number beyond 64 bits is refused for `int` (Ajv accepts any
--     integral double);
--   * a string holding a lone surrogate (\ud800) is refused: it is not Unicode text;
--   * patterns match code points; Ajv 6 matches UTF-16 code units, so `.` and
--     negated classes see a character outside the BMP as two. The comparison
--     is with Ajv's patterns compiled with the u flag (code points, as JSON
--     Schema 2020-12 and Ajv 8 do); how often Ajv 6's own verdict differs is
--     counted (code_units).
-- `@severity("soft")` fields are generated too: validation keeps their rules
-- hard, like input (soft applies to a tool's output only), so they agree.
local luma = require "luma"
local h = require "spec.helpers"

local json = luma.json
local null = luma.null

local SEED = tonumber(os.getenv("LUMA_AJV_SEED") or "") or 20261204
local ONLY = tonumber(os.getenv("LUMA_AJV_PROGRAM") or "")
local PROGRAMS = h.by_instrumentation(300, 300, 60)
local VALUES = 12 -- per schema

-- xorshift64*: the same sequence on every machine and Lua 5.4 build.
local function rng(seed)
  local s = (seed * 0x9E3779B97F4A7C15) ~ 0x5DEECE66D
  if s == 0 then s = 1 end
  local r = {}
  function r.bits()
    s = s ~ (s >> 12)
    s = s ~ (s << 25)
    s = s ~ (s >> 27)
    return (s * 0x2545F4914F6CDD1D) >> 11
  end
  function r.int(lo, hi) return lo + r.bits() % (hi - lo + 1) end
  function r.chance(p) return r.bits() % 1000000 < p * 1000000 end
  function r.pick(list) return list[r.int(1, #list)] end
  return r
end

-- Patterns with strings that match and strings that do not. All of them
-- mean the same in luma's engine and in ECMAScript, for BMP text.
local PATTERNS = {
  { "^[a-z]+$", { "abc", "a", "zz" }, { "", "aB", "a1", "é" } },
  { "^a", { "a", "abc", "a😀" }, { "ba", "", "A" } },
  { "b$", { "b", "ab", "😀b" }, { "ba", "" } },
  { "[0-9]{2}", { "12", "a34b" }, { "1", "a1b2" } },
  { "^(ab|cd)*$", { "", "ab", "abcd", "cdab" }, { "a", "abc", "ba" } },
  { "^.{2,3}$", { "ab", "abc", "é日" }, { "a", "abcd", "😀", "a😀" } },
  { "\\d", { "1", "a2" }, { "a", "" } },
  { "^[^x]*$", { "", "abc", "😀" }, { "x", "axb" } },
  { "colou?r", { "color", "colour", "my colors" }, { "colr", "coloer" } },
  { "^\\w+@\\w+$", { "a@b", "ab_1@c2" }, { "a@", "@b", "a b@c" } },
  { "^[A-Z][a-z]*$", { "A", "Abc" }, { "a", "AB", "" } },
  { "^\\S+$", { "abc", "😀" }, { "a b", "" } },
}
local STRINGS = { "", "a", "ab", "abc", "abcd", "hello", "x y", "é", "日本", "😀", "a😀b", "\0", "tab\tx",
  "quote\"d", "back\\slash", "\u{ffff}", "\u{10ffff}" }
local ENUMS = { "a", "b", "c d", "é", "😀", "x" }
local LONE = { "\\ud800", "\\udfff", "a\\ud83d" }

-- JSON text of a Lua string.
local function jstr(s) return json.encode(s) end

-- A luma string literal (the same escapes as JSON).
local lstr = jstr

------------------------------------------------------------------------
-- Programs

local FIELD_NAMES = { "a", "b", "c", "e", "f", "g", "name", "count", "items", "when" }

local gen_type

local function int_bounds(r)
  local lo, hi = r.int(-5, 5), nil
  hi = lo + r.int(0, 10)
  local function text(v)
    if r.chance(0.2) then return string.format("%d.0", v) end
    return tostring(v)
  end
  local t = { k = "int" }
  if r.chance(0.7) then
    local open_lo, open_hi = r.chance(0.2), r.chance(0.2)
    t.lo = not open_lo and lo or nil
    t.hi = not open_hi and hi or nil
    -- a float bound between integers: 2.5 means "at least 3" for an int
    if t.lo and r.chance(0.15) then t.lo = lo + 0.5 end
    if t.hi and r.chance(0.15) then t.hi = hi + 0.5 end
    if t.lo and t.hi and t.lo > t.hi then t.lo = lo end
    t.ann = string.format("@range(%s, %s)", t.lo and (math.type(t.lo) == "float" and tostring(t.lo) or text(t.lo)) or "null",
      t.hi and (math.type(t.hi) == "float" and tostring(t.hi) or text(t.hi)) or "null")
  end
  return t
end

local function float_bounds(r)
  local t = { k = "float" }
  if r.chance(0.7) then
    local lo = r.pick { -1.5, 0, 0.25, 1, -100, 3 }
    local hi = lo + r.pick { 0, 0.5, 1, 2.75, 100 }
    t.lo = not r.chance(0.2) and lo or nil
    t.hi = not r.chance(0.2) and hi or nil
    t.ann = string.format("@range(%s, %s)", t.lo and tostring(t.lo) or "null", t.hi and tostring(t.hi) or "null")
  end
  return t
end

local function string_type(r)
  local t = { k = "string", anns = {} }
  if r.chance(0.5) then
    t.minl = r.chance(0.8) and r.int(0, 3) or nil
    t.maxl = r.chance(0.8) and (t.minl or 0) + r.int(0, 4) or nil
    if t.minl or t.maxl then
      t.anns[#t.anns + 1] = string.format("@length(%s, %s)", t.minl or "null", t.maxl or "null")
    end
  end
  if r.chance(0.35) then
    t.pattern = r.pick(PATTERNS)
    t.anns[#t.anns + 1] = "@pattern(" .. lstr(t.pattern[1]) .. ")"
  end
  t.ann = #t.anns > 0 and table.concat(t.anns, " ") or nil
  return t
end

local function enum_type(r)
  local vals, seen = {}, {}
  for _ = 1, r.int(1, 4) do
    local v = r.pick(ENUMS)
    if not seen[v] then
      seen[v] = true
      vals[#vals + 1] = v
    end
  end
  local quoted = {}
  for i, v in ipairs(vals) do quoted[i] = lstr(v) end
  return { k = "enum", vals = vals, text = "enum[" .. table.concat(quoted, ", ") .. "]" }
end

local function scalar_type(r, prog)
  local roll = r.int(1, 100)
  if roll <= 20 then return int_bounds(r) end
  if roll <= 35 then return float_bounds(r) end
  if roll <= 60 then return string_type(r) end
  if roll <= 68 then return { k = "bool" } end
  if roll <= 78 then return enum_type(r) end
  if roll <= 84 then return { k = "any" } end
  if #prog.named > 0 then return { k = "ref", def = r.pick(prog.named) } end
  return { k = "bool" }
end

function gen_type(r, prog)
  local t = scalar_type(r, prog)
  if r.chance(0.2) then
    local arr = { k = "array", of = t }
    if r.chance(0.1) and t.k ~= "ref" then arr = { k = "array", of = { k = "array", of = t } } end
    if r.chance(0.5) then
      arr.mini = r.chance(0.8) and r.int(0, 2) or nil
      arr.maxi = r.chance(0.8) and (arr.mini or 0) + r.int(0, 3) or nil
      if arr.mini or arr.maxi then arr.items_ann = string.format("@items(%s, %s)", arr.mini or "null", arr.maxi or "null") end
    end
    return arr
  end
  return t
end

-- The innermost item type of an array type.
local function inner(t)
  while t.k == "array" do t = t.of end
  return t
end

local function type_text(t)
  if t.k == "array" then return type_text(t.of) .. "[]" end
  if t.k == "enum" then return t.text end
  if t.k == "ref" then return t.def.name end
  return t.k
end

local gen_value

-- A value that satisfies t (for a default): nil when the generator has none.
local function good_value(r, t, depth)
  depth = depth or 0
  if depth > 4 then return nil end
  if t.k == "ref" then return good_value(r, t.def, depth + 1) end
  if t.k == "union" then
    -- a member without its tag: luma infers it, and must fill it with the tag
    return good_value(r, r.pick(t.members), depth + 1)
  end
  if t.k == "record" then
    local members = {}
    for _, f in ipairs(t.fields) do
      if not (f.optional or f.default) or r.chance(0.3) then
        local v = good_value(r, f.t, depth + 1)
        if not v then return nil end
        members[#members + 1] = f.name .. ": " .. v
      end
    end
    return "{ " .. table.concat(members, ", ") .. " }"
  end
  if t.k == "array" then
    local n = t.mini or r.int(0, 2)
    if t.maxi and n > t.maxi then return nil end
    local items = {}
    for i = 1, n do
      items[i] = good_value(r, t.of, depth + 1)
      if not items[i] then return nil end
    end
    return "[" .. table.concat(items, ", ") .. "]"
  end
  if t.k == "any" then return r.pick { "null", "1", "2.5", '"s"', "[1, 2]", "{ a: 1 }", "[]" } end
  if t.k == "int" then
    local lo = t.lo and math.ceil(t.lo) or (t.hi and math.floor(t.hi) - 3) or 0
    local hi = t.hi and math.floor(t.hi) or lo + 3
    if lo > hi then return nil end
    local v = r.int(lo, hi)
    return r.chance(0.3) and string.format("%d.0", v) or tostring(v)
  elseif t.k == "float" then
    local lo = t.lo or (t.hi and t.hi - 1) or 0
    return tostring(lo)
  elseif t.k == "bool" then
    return r.chance(0.5) and "true" or "false"
  elseif t.k == "enum" then
    return lstr(r.pick(t.vals))
  elseif t.k == "string" then
    local pool = t.pattern and t.pattern[2] or STRINGS
    for _ = 1, 8 do
      local s = r.pick(pool)
      local n = utf8.len(s)
      if (not t.minl or n >= t.minl) and (not t.maxl or n <= t.maxl) and not (t.pattern and s:find("[\240-\244]")) then
        return lstr(s)
      end
    end
  end
  return nil
end

local function gen_record(r, prog, name, depth)
  local def = { k = "record", name = name, fields = {} }
  local used = {}
  for _ = 1, r.int(1, 5) do
    local fname = r.pick(FIELD_NAMES)
    if not used[fname] then
      used[fname] = true
      local f = { t = gen_type(r, prog) }
      f.optional = r.chance(0.3)
      local anns = {}
      if f.t.k == "array" then
        if f.t.items_ann then anns[#anns + 1] = f.t.items_ann end
        local it = inner(f.t)
        if it.ann then anns[#anns + 1] = it.ann end
      elseif f.t.ann then
        anns[#anns + 1] = f.t.ann
      end
      if not f.optional and r.chance(0.2) then
        local d = good_value(r, f.t)
        if d then
          -- fields with a default are named d_*, so that the spec knows what luma may add
          fname = "d_" .. fname
          f.default = d
          anns[#anns + 1] = "@default(" .. d .. ")"
        end
      end
      if #anns > 0 and r.chance(0.1) then anns[#anns + 1] = '@severity("soft")' end
      f.name = fname
      f.text = fname .. (f.optional and "?" or "") .. ": " .. type_text(f.t) ..
        (#anns > 0 and " " .. table.concat(anns, " ") or "")
      def.fields[#def.fields + 1] = f
    end
  end
  local lines = {}
  for i, f in ipairs(def.fields) do lines[i] = "  " .. f.text end
  prog.source[#prog.source + 1] = "schema " .. name .. " {\n" .. table.concat(lines, "\n") .. "\n}"
  return def
end

local function gen_program(r)
  local prog = { source = {}, named = {}, checked = {} }
  local records = {}
  for i = 1, r.int(1, 4) do
    local def = gen_record(r, prog, "S" .. i)
    records[#records + 1] = def
    prog.named[#prog.named + 1] = def
    prog.checked[#prog.checked + 1] = def
  end
  if #records >= 2 and r.chance(0.5) then
    local a, b = records[#records - 1], records[#records]
    local u = { k = "union", name = "U", members = { a, b } }
    prog.source[#prog.source + 1] = string.format("schema U = %s | %s tagged by kind", a.name, b.name)
    prog.named[#prog.named + 1] = u
    prog.checked[#prog.checked + 1] = u
    local def = gen_record(r, prog, "T")
    prog.checked[#prog.checked + 1] = def
  end
  return prog
end

------------------------------------------------------------------------
-- Values, as JSON text

local function int_text(r, t)
  local lo, hi = t.lo and math.ceil(t.lo) or -3, t.hi and math.floor(t.hi) or 3
  local roll = r.int(1, 100)
  if roll <= 40 then return tostring(r.int(math.min(lo, hi), math.max(lo, hi))) end
  if roll <= 55 then return tostring(r.pick { lo - 1, lo, hi, hi + 1 }) end
  if roll <= 62 then return string.format("%d.0", r.int(lo, lo + 2)) end
  if roll <= 66 then return string.format("%de0", r.int(lo, lo + 2)) end
  if roll <= 72 then return r.pick { "2.5", "-0.5", "0.1" } end
  if roll <= 76 then return r.pick { "-0", "-0.0", "0e5" } end
  if roll <= 82 then
    return r.pick { "9007199254740991", "-9007199254740991", "9223372036854775807", "-9223372036854775808",
      "9223372036854775808", "1e19", "-1e19", "1e300", "18446744073709551616" }
  end
  return nil -- a wrong type, chosen by the caller
end

local function float_text(r, t)
  local lo, hi = t.lo or -10, t.hi or 10
  local roll = r.int(1, 100)
  if roll <= 40 then return string.format("%.17g", lo + (hi - lo) * (r.int(0, 100) / 100)) end
  if roll <= 60 then return string.format("%.17g", r.pick { lo, hi, lo - 0.5, hi + 0.25, lo - 1e-9 }) end
  if roll <= 70 then return r.pick { "1e308", "-1e308", "5e-324", "0", "-0.0" } end
  if roll <= 80 then return tostring(math.floor(lo)) end
  return nil
end

local function string_text(r, t)
  local roll = r.int(1, 100)
  if t.pattern and roll <= 40 then return lstr(r.pick(r.chance(0.6) and t.pattern[2] or t.pattern[3])) end
  if roll <= 75 then return lstr(r.pick(STRINGS)) end
  if roll <= 95 then
    -- a length at an edge, of mixed characters
    local n = r.pick { (t.minl or 1) - 1, t.minl or 0, t.maxl or 3, (t.maxl or 3) + 1 }
    local parts = {}
    for i = 1, math.max(n, 0) do parts[i] = r.pick { "a", "é", "日", "😀", "1", " " } end
    return lstr(table.concat(parts))
  end
  return '"' .. r.pick(LONE) .. '"'
end

local function any_text(r, depth)
  local roll = r.int(1, 9)
  if depth > 2 then roll = r.int(1, 5) end
  if roll == 1 then return "null" end
  if roll == 2 then return r.chance(0.5) and "true" or "false" end
  if roll == 3 then return r.pick { "0", "-1.5", "1e10", "42" } end
  if roll == 4 then return lstr(r.pick(STRINGS)) end
  if roll == 5 then return r.pick { "[]", "{}" } end
  if roll <= 7 then
    local items = {}
    for i = 1, r.int(0, 3) do items[i] = any_text(r, depth + 1) end
    return "[" .. table.concat(items, ",") .. "]"
  end
  local members = {}
  for i = 1, r.int(0, 3) do members[i] = lstr(r.pick(FIELD_NAMES)) .. ":" .. any_text(r, depth + 1) end
  -- a repeated key would be refused by luma's parser: keep the first of each
  local seen, kept = {}, {}
  for _, m in ipairs(members) do
    local k = m:match('^("[^"]*")')
    if not seen[k] then
      seen[k] = true
      kept[#kept + 1] = m
    end
  end
  return "{" .. table.concat(kept, ",") .. "}"
end

local WRONG = { "null", "true", "0", "1.5", '"s"', "[]", "{}", "[1]", '{"a":1}' }

local function record_text(r, def, depth, tag)
  local members = {}
  for _, f in ipairs(def.fields) do
    local roll = r.bits() % 1000
    if roll < 40 then
      -- missing
    elseif roll < 70 then
      members[#members + 1] = lstr(f.name) .. ":null"
    elseif not (f.optional or f.default) or roll >= 300 then
      members[#members + 1] = lstr(f.name) .. ":" .. gen_value(r, f.t, depth + 1)
    end
  end
  if tag then members[#members + 1] = '"kind":' .. tag end
  if r.chance(0.04) then members[#members + 1] = '"zz":1' end
  -- shuffle, so that field order is not always the declaration's
  for i = #members, 2, -1 do
    local j = r.int(1, i)
    members[i], members[j] = members[j], members[i]
  end
  return "{" .. table.concat(members, ",") .. "}"
end

function gen_value(r, t, depth)
  depth = depth or 0
  if r.chance(0.04) or depth > 6 then return r.pick(WRONG) end
  local text
  if t.k == "int" then text = int_text(r, t)
  elseif t.k == "float" then text = float_text(r, t)
  elseif t.k == "string" then text = string_text(r, t)
  elseif t.k == "bool" then text = r.pick { "true", "false", "true", "0" }
  elseif t.k == "enum" then text = lstr(r.chance(0.8) and r.pick(t.vals) or r.pick(ENUMS))
  elseif t.k == "any" then text = any_text(r, 0)
  elseif t.k == "ref" then return gen_value(r, t.def, depth)
  elseif t.k == "record" then text = record_text(r, t, depth)
  elseif t.k == "union" then
    local m = r.pick(t.members)
    local roll = r.int(1, 10)
    local tag = roll <= 6 and lstr(m.name) or roll <= 9 and nil or lstr(r.pick { "S9", "", "kind" })
    text = record_text(r, m, depth, tag)
  elseif t.k == "array" then
    if r.chance(0.06) then return "{}" end
    local n = r.pick { (t.mini or 1) - 1, t.mini or 0, t.maxi or 2, (t.maxi or 2) + 1, r.int(0, 3) }
    local items = {}
    for i = 1, math.max(n, 0) do items[i] = gen_value(r, t.of, depth + 1) end
    return "[" .. table.concat(items, ",") .. "]"
  end
  return text or r.pick(WRONG)
end

------------------------------------------------------------------------
-- Explaining a disagreement

-- The value at a JSON pointer (Ajv) in a decoded tree.
local function at_pointer(v, pointer)
  for part in pointer:gmatch("/([^/]*)") do
    part = part:gsub("~1", "/"):gsub("~0", "~")
    if type(v) ~= "table" then return nil end
    local n = tonumber(part)
    if n and v[n + 1] ~= nil and v[part] == nil then v = v[n + 1] else v = v[part] end
  end
  return v
end

-- The value at one of luma's paths (S1.a[2].b) in a decoded tree.
local function at_path(v, path)
  local rest = path:gsub("^[^.%[]*", "")
  for dot, name, index in rest:gmatch("(%.?)([%w_]*)%[?(%d*)%]?") do
    if name ~= "" then
      if type(v) ~= "table" then return nil end
      v = v[name]
    end
    if index ~= "" then
      if type(v) ~= "table" then return nil end
      v = v[tonumber(index)]
    end
  end
  return v
end

local function is_empty_table(v) return type(v) == "table" and next(v) == nil end

-- What luma changed between the text it was given (raw) and the value it
-- returned (norm): nil when each change is a documented normalisation
-- (recorded in kinds), else a description of the first other change.
local function normalisations(raw, norm, path, kinds)
  if type(raw) == "number" and type(norm) == "number" then
    if raw == norm then return nil end
    return path .. ": " .. tostring(raw) .. " became " .. tostring(norm)
  end
  if type(raw) ~= "table" or type(norm) ~= "table" then
    if raw == norm then return nil end
    return path .. ": " .. tostring(raw) .. " became " .. tostring(norm)
  end
  local raw_array, norm_array = getmetatable(raw) == luma.array_mt, getmetatable(norm) == luma.array_mt
  if raw_array ~= norm_array then
    if is_empty_table(raw) and is_empty_table(norm) and norm_array then
      kinds.empty_array = true
      return nil
    end
    return path .. ": an " .. (raw_array and "array" or "object") .. " became an " .. (norm_array and "array" or "object")
  end
  for k, v in pairs(raw) do
    local w = norm[k]
    if v == null and w ~= null and type(k) == "string" and k:match("^d_") then
      kinds.null_optional = true -- a field with a default is optional: null is missing, and filled
    elseif w == nil then
      if v ~= null then return path .. "." .. tostring(k) .. " was dropped" end
      kinds.null_optional = true
    else
      local why = normalisations(v, w, path .. "." .. tostring(k), kinds)
      if why then return why end
    end
  end
  for k in pairs(norm) do
    if raw[k] == nil then
      if k == "kind" then kinds.tag = true
      elseif type(k) == "string" and k:match("^d_") then kinds.default = true
      else return path .. "." .. tostring(k) .. " was added" end
    end
  end
  return nil
end

-- Whether luma's refusal of text (err, or a decode error) is documented.
local function luma_documented(err, text, value)
  if err.code == "JSON_INVALID" or not value then
    return text:find("\\ud[89abcdef]") ~= nil, "lone_surrogate"
  end
  local kind
  for _, v in ipairs(err.details and err.details.violations or {}) do
    local data = at_path(value, v.path)
    if v.rule == "type" and v.message:find("fits in 64 bits", 1, true) and math.type(data) == "float" then
      kind = "beyond_64_bits"
    else
      return false
    end
  end
  return kind ~= nil, kind
end

------------------------------------------------------------------------

describe("the validator against Ajv 6", function()
  local dir
  before_each(function()
    h.ensure_packages { "nodejs", "node-ajv" }
    dir = h.tmpname("-ajv")
    assert(os.execute("mkdir -p " .. h.quote(dir)))
  end)
  after_each(function()
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("agrees on generated schemas and values, but for the documented differences", function()
    local entries, cases = {}, {}
    for index = 1, PROGRAMS do
      if not ONLY or ONLY == index then
        local r = rng(SEED * 100003 + index)
        local prog = gen_program(r)
        local source = table.concat(prog.source, "\n")
        local ok, program = pcall(luma.compile, source)
        assert(ok, string.format("seed %d program %d does not load:\n%s\n%s", SEED, index, source, tostring(program)))
        for _, def in ipairs(prog.checked) do
          local entry = { schema = program:json_schema(def.name, { format = "json" }), values = {} }
          entries[#entries + 1] = entry
          for _ = 1, VALUES do
            local text = r.chance(0.03) and r.pick(WRONG) or gen_value(r, def)
            local c = { index = index, source = source, name = def.name, text = text, entry = #entries }
            local decoded, value = pcall(json.decode, text)
            if decoded then
              c.ok, c.err = program:validate(def.name, value)
              c.value = json.decode(text)
              if c.ok then c.norm = json.encode(value) end
            else
              c.err = { code = "JSON_INVALID", message = value }
            end
            entry.values[#entry.values + 1] = text
            c.slot = #entry.values
            if c.norm then
              entry.values[#entry.values + 1] = c.norm
              c.norm_slot = #entry.values
            end
            cases[#cases + 1] = c
          end
        end
      end
    end

    local input, output = dir .. "/in.json", dir .. "/out.json"
    h.write(input, json.encode(entries))
    local status, out, err = h.sh("env -u LD_PRELOAD NODE_PATH=/usr/share/nodejs node " .. h.quote(h.root .. "/spec/support/ajv_check.js") .. " " ..
      h.quote(input) .. " " .. h.quote(output))
    assert(status == 0, "ajv_check.js failed: " .. out .. err)
    local verdicts = json.decode(h.read(output))

    local counts = { checks = 0, agree = 0 }
    local bugs = {}
    local function count(kind) counts[kind] = (counts[kind] or 0) + 1 end
    local seen = {}
    local function bug(c, why, ajv)
      -- one example of each kind of disagreement is shown
      local kind = why:gsub("^luma changed the value beyond its documented normalisations: .-: ", "changed: ")
        .. " / " .. (c.ok and "accepted" or tostring(c.err.details and c.err.details.violations and
          c.err.details.violations[1] and c.err.details.violations[1].rule or c.err.code))
        .. " / " .. (ajv == true and "accepted" or tostring(ajv[1] and ajv[1][1]))
      seen[kind] = (seen[kind] or 0) + 1
      if seen[kind] > 1 then return end
      bugs[#bugs + 1] = string.format(
        "seed %d program %d, schema %s: %s (%s)\n  value: %s\n  luma: %s\n  Ajv: %s\n  program:\n%s",
        SEED, c.index, c.name, why, kind, c.text,
        c.ok and ("accepted as " .. c.norm) or (c.err.message or tostring(c.err)),
        ajv == true and "accepted" or json.encode(ajv), c.source)
    end
    for _, c in ipairs(cases) do
      counts.checks = counts.checks + 1
      local list = verdicts[c.entry]
      -- Ajv matching patterns on code points, as luma does; Ajv 6's own
      -- (code units) only counts how often the two differ
      local ajv_raw, ajv_units = list[c.slot][1], list[c.slot][2]
      local ajv_norm = c.norm_slot and list[c.norm_slot][1]
      if (ajv_raw == true) ~= (ajv_units == true) then count("code_units") end
      if c.ok then
        local kinds = {}
        local changed = normalisations(c.value, json.decode(c.norm), c.name, kinds)
        if changed then
          bug(c, "luma changed the value beyond its documented normalisations: " .. changed, ajv_raw)
        elseif ajv_norm ~= true then
          bug(c, "the value luma accepted and normalised does not fit luma's own JSON Schema", ajv_norm)
        elseif ajv_raw == true then
          count("agree")
        elseif kinds.null_optional or kinds.tag or kinds.empty_array then
          count(kinds.tag and "tag" or kinds.null_optional and "null_optional" or "empty_array")
        else
          bug(c, "luma accepts a value Ajv refuses", ajv_raw)
        end
      elseif ajv_raw == true then
        local documented, kind = luma_documented(c.err, c.text, c.value)
        if documented then count(kind) else bug(c, "luma refuses a value Ajv accepts", ajv_raw) end
      else
        count("agree")
      end
    end

    local summary = {}
    for k, n in pairs(counts) do summary[#summary + 1] = k .. " " .. n end
    table.sort(summary)
    if os.getenv("LUMA_AJV_VERBOSE") then io.stderr:write(table.concat(summary, ", "), "\n") end
    if #bugs > 0 then
      local total, shown = 0, {}
      for _, n in pairs(seen) do total = total + n end
      for i = 1, math.min(#bugs, 8) do shown[i] = bugs[i] end
      error(string.format("%d unexplained disagreements of %d checks (%s), of %d kinds; one of each:\n\n%s", total,
        counts.checks, table.concat(summary, ", "), #bugs, table.concat(shown, "\n\n")), 0)
    end
    if not ONLY then
      assert(counts.checks >= h.by_instrumentation(10000, 10000, 2000), table.concat(summary, ", "))
      -- the mix is near the edges: both verdicts are common
      local accepted = 0
      for _, c in ipairs(cases) do if c.ok then accepted = accepted + 1 end end
      assert(accepted > counts.checks * 0.2 and accepted < counts.checks * 0.8,
        accepted .. " accepted of " .. counts.checks)
    end
  end)
end)
