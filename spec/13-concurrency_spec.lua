local luma = require "luma"
local h = require "spec.helpers"

local SOURCE = h.calculate .. [[
tool meet_a(file: string, tries: int) -> CalcResult {}
tool meet_b(file: string, tries: int) -> CalcResult {}
]]

-- Each handler writes that it started, then looks for the other one's mark:
-- only calls that really run at the same time both see each other.
local MEET = [[
local function meet(me, other)
  return function(input)
    local f = assert(io.open(input.file, "a"))
    f:write(me, "\n")
    f:close()
    for _ = 1, input.tries do
      local r = io.open(input.file, "r")
      local text = r:read("*a")
      r:close()
      if text:find(other, 1, true) then return { result = 1 } end
    end
    return { result = 0 }
  end
end
return { %s = meet("%s", "%s") }
]]

local function project()
  local dir = h.project {
    ["program.luma"] = SOURCE,
    ["a.lua"] = MEET:format("meet_a", "A", "B"),
    ["b.lua"] = MEET:format("meet_b", "B", "A"),
    ["calc.lua"] = h.read(h.root .. "/spec/fixtures/calc_tools.lua"),
  }
  local p = assert(h.load(dir, { config = false, default_timeout_ms = 20000,
    tool_modules = { dir .. "/a.lua", dir .. "/b.lua", dir .. "/calc.lua" } }))
  return p, dir
end

describe("calls that run at once (program:call_all)", function()
  it("run the handlers of different modules in parallel", function()
    local p, dir = project()
    local file = dir .. "/meet.txt"
    local out = p:call_all({ { "meet_a", { file = file, tries = 10000000 } }, { "meet_b", { file = file, tries = 10000000 } } },
      { concurrency = 2 })
    assert.is_true(out[1].ok)
    assert.are.same({ result = 1 }, out[1].result)
    assert.are.same({ result = 1 }, out[2].result)
  end)

  it("run them one group at a time with concurrency 1", function()
    local p, dir = project()
    local file = dir .. "/meet.txt"
    -- sequential: the first never meets the second (it gives up), the second finds the first's mark
    local out = p:call_all({ { "meet_a", { file = file, tries = 100 } }, { "meet_b", { file = file, tries = 100 } } },
      { concurrency = 1 })
    assert.are.same({ result = 0 }, out[1].result)
    assert.are.same({ result = 1 }, out[2].result)
  end)

  it("share one execution between calls with the same cache key (single flight)", function()
    local p = luma.compile(h.calculate)
    local runs = 0
    p:register("calculate", function(i) runs = runs + 1 return { result = i.a + i.b } end)
    local events = {}
    p:configure { on_event = function(e) events[#events + 1] = e end }
    local input = { a = 1, b = 2, operation = "add" }
    local out = p:call_all({ { "calculate", input }, { "calculate", { operation = "add", b = 2, a = 1 } },
      { "calculate", { a = 5, b = 5, operation = "add" } } })
    assert.are.equal(2, runs)
    assert.are.same({ result = 3 }, out[2].result)
    assert.is_false(out[1].meta.single_flight)
    assert.is_true(out[2].meta.single_flight)
    assert.is_false(events[1].single_flight)
    assert.is_true(events[2].single_flight)
    assert.are.equal(0, events[2].attempts)
    out[1].result.result = 99
    assert.are.equal(3, out[2].result.result)
  end)

  it("share one execution between calls with the same idempotency key", function()
    local p = luma.compile([[
schema R { n: int }
tool once(id: string, v: int) -> R { idempotent: true
  idempotency_key: id }]])
    local runs = 0
    p:register("once", function() runs = runs + 1 return { n = runs } end)
    local out = p:call_all({ { "once", { id = "k", v = 1 } }, { "once", { id = "k", v = 1 } }, { "once", { id = "k", v = 2 } } })
    assert.are.equal(1, runs)
    assert.are.same({ n = 1 }, out[2].result)
    assert.is_true(out[2].meta.idempotent_replay)
    assert.is_false(out[3].ok)
    assert.are.equal("TOOL_IDEMPOTENCY_CONFLICT", out[3].error.code)
  end)

  it("report each call's error in its place", function()
    local p = luma.compile(h.calculate)
    p:register("calculate", function(i) return { result = i.a + i.b } end)
    local out = p:call_all({ { "calculate", { a = -1, b = 1, operation = "add" } }, { "calculate", { a = 1, b = 1, operation = "add" } } })
    assert.is_false(out[1].ok)
    assert.are.equal("TOOL_INPUT_INVALID", out[1].error.code)
    assert.are.same({ result = 2 }, out[2].result)
  end)
end)
