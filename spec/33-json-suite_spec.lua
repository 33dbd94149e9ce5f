-- nst/JSONTestSuite against luma's JSON parser (spec/fixtures/JSONTestSuite).
local luma = require "luma"
local h = require "spec.helpers"

local DIR = h.root .. "/spec/fixtures/JSONTestSuite/test_parsing/"
-- refused on purpose: a duplicate key is an ambiguity (README)
local REFUSED = { ["y_object_duplicated_key.json"] = true, ["y_object_duplicated_key_and_value.json"] = true }

local function cases(prefix)
  local list = {}
  local p = assert(io.popen("ls " .. h.quote(DIR)))
  for name in p:lines() do
    if name:sub(1, #prefix) == prefix then list[#list + 1] = name end
  end
  p:close()
  return list
end

local function parse(name)
  return pcall(luma.json.decode, h.read(DIR .. name))
end

describe("JSONTestSuite", function()
  it("has its 95 y_, 188 n_ and 35 i_ cases here", function()
    assert.are.same({ 95, 188, 35 }, { #cases("y_"), #cases("n_"), #cases("i_") })
  end)

  it("accepts every y_ case but the two duplicate keys", function()
    local wrong = {}
    for _, name in ipairs(cases("y_")) do
      local ok, err = parse(name)
      if ok == (REFUSED[name] ~= nil) then wrong[#wrong + 1] = name .. ": " .. tostring(ok and "accepted" or err.message) end
    end
    assert.are.same({}, wrong)
  end)

  it("refuses every n_ case with a JSON_INVALID error", function()
    local wrong = {}
    for _, name in ipairs(cases("n_")) do
      local ok, err = parse(name)
      if ok or not (luma.is_error(err) and err.code == "JSON_INVALID") then wrong[#wrong + 1] = name end
    end
    assert.are.same({}, wrong)
  end)

  it("ends every i_ case with a value or a clear error", function()
    for _, name in ipairs(cases("i_")) do
      local ok, err = parse(name)
      assert(ok or (luma.is_error(err) and err.code == "JSON_INVALID" and err.message:match("offset %d+")),
        name .. ": " .. tostring(err))
    end
  end)

  it("keeps an escaped NUL in a key, and tells such keys apart", function()
    local v = luma.json.decode('{"a\\u0000b": 1, "a": 2, "a\\u0000c": 3}')
    assert.are.same({ ["a\0b"] = 1, a = 2, ["a\0c"] = 3 }, v)
    assert.are.equal('{"a":2,"a\\u0000b":1,"a\\u0000c":3}', luma.json.encode(v))
    local ok, err = pcall(luma.json.decode, '{"a\\u0000b": 1, "a\\u0000b": 2}')
    assert.is_false(ok)
    assert.matches('duplicate key "a\\u0000b"', err.message, 1, true)
  end)
end)
