local luma = require "luma"
local core = require "luma.core"
local h = require "spec.helpers"

-- The rows of the README's table under "### Limits": { name, default, settable }.
local function readme_limits()
  local rows, inside = {}, false
  for line in (h.read(h.root .. "/README.md") .. "\n"):gmatch("([^\n]*)\n") do
    if line == "### Limits" then
      inside = true
    elseif inside and line:match("^#") then
      break
    elseif inside and line:match("^| `") then
      local cells = {}
      for cell in line:sub(2):gmatch("%s*(.-)%s*|") do cells[#cells + 1] = cell end
      local name, default = cells[1]:match("^`([%w_]+)`$"), (cells[2] or ""):match("^[%d,]+")
      assert(name and default and #cells == 4, "a row the spec cannot read: " .. line)
      rows[#rows + 1] = { name, tonumber((default:gsub(",", ""))), cells[3] == "yes" }
    end
  end
  return rows
end

describe("the table of limits", function()
  it("is luma.limits, the same table as core.limits", function()
    assert.are.equal(core.limits, luma.limits)
    assert.are.equal(8 * 1024 * 1024, luma.limits.max_source_bytes)
    assert.are.equal(500, luma.limits.max_depth_cap)
  end)

  it("is the README's table of limits, name for name and default for default", function()
    local listed = {}
    for _, row in ipairs(readme_limits()) do
      assert.is_nil(listed[row[1]], "listed twice: " .. row[1])
      listed[row[1]] = row[2]
    end
    assert.are.same(core.limits, listed)
  end)

  it("marks as settable exactly the limits opts.limits accepts", function()
    local source = "schema A { x: int }\n"
    for _, row in ipairs(readme_limits()) do
      local name, default, settable = row[1], row[2], row[3]
      local ok, err = pcall(luma.compile, source, "program.luma", { limits = { [name] = default } })
      assert.are.equal(settable, ok, name .. ": " .. tostring(err))
      if not ok then assert.matches("opts.limits has no limit '" .. name .. "'", err, 1, true) end
    end
  end)

  it("gives luma.load the default max_source_bytes", function()
    local dir = h.project { ["program.luma"] = "schema A { x: int }\n" .. string.rep(" ", luma.limits.max_source_bytes) }
    local _, err = h.load(dir)
    assert.are.equal("PROGRAM_INVALID", err.code)
    assert.matches("the limit is " .. luma.limits.max_source_bytes .. "$", err.message)
  end)

  it("bounds a tool_module_policy by the policy limits", function()
    local cases = {
      { { max_memory_mb = luma.limits.policy_min_memory_mb - 1 }, "max_memory_mb" },
      { { max_memory_mb = luma.limits.policy_max_memory_mb + 1 }, "must be at most " .. luma.limits.policy_max_memory_mb },
      { { max_concurrency = luma.limits.policy_max_concurrency + 1 }, "must be at most " .. luma.limits.policy_max_concurrency },
    }
    local dir = h.project { ["program.luma"] = "schema A { x: int }\n" }
    for _, c in ipairs(cases) do
      local _, err = h.load(dir, { tool_module_policy = c[1] })
      assert.are.equal("CONFIG_INVALID", err and err.code)
      assert.matches(c[2], err.message, 1, true)
    end
    assert.truthy(h.load(dir, { tool_module_policy = { max_memory_mb = luma.limits.policy_max_memory_mb,
                                                       max_concurrency = luma.limits.policy_max_concurrency } }))
  end)
end)

describe("copy_max_values", function()
  -- a value is a table, string, number, boolean or null of the data; a key
  -- is not one (its bytes count in copy_max_bytes)
  it("lets a result of 999,999 values through and stops one of 1,000,001", function()
    local dir = h.project {
      ["program.luma"] = "schema Big { items: int[] }\ntool big(n: int) -> Big { timeout: 60000 }\n",
      ["tools.lua"] = "return { big = function(input) local t = {} for i = 1, input.n do t[i] = i end " ..
        "return { items = t } end }\n",
      ["luma.config.json"] = '{ "tool_modules": ["tools.lua"], "tool_module_policy": { "sandbox": "strict" } }',
    }
    local program = assert(h.load(dir))
    assert.are.equal(1000000, luma.limits.copy_max_values)
    -- the object, the list and 999,997 integers
    local result = program:call("big", { n = 999997 })
    assert.are.same({ 999997, 999997 }, { #result.items, result.items[999997] })
    -- the object, the list and 999,999 integers
    local err = h.raised(program.call, program, "big", { n = 999999 })
    assert.are.equal("TOOL_OUTPUT_INVALID", err.code)
    assert.are.equal("big.output cannot be returned: it holds more than 1000000 values", err.message)
  end)
end)
