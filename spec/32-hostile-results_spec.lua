-- What a hostile handler hands back cannot cost the host more than the
-- limits say (issue 16, items 1 and 5): results and errors are copied with
-- work bounded by the keys copied and by the deadline, host tables are sized
-- from real keys, and a handler's error code cannot pass for the runtime's.
-- Through luma-lua, with the strict policy.
local core = require "luma.core"
local h = require "spec.helpers"

-- handlers that no hook can stop in time, shared with spec/35
local HOSTILE = h.read(h.root .. "/spec/fixtures/hostile_kinds.lua")

-- Instrumented runs are slower at everything (under valgrind the command
-- itself starts in seconds): the bounds get this much more.
local SLACK_MS = h.by_instrumentation(0, 1500, 30000)

local SOURCE = [[
tool evil(kind: string) -> Any { timeout: 500 }
tool roomy(kind: string) -> Any { timeout: 120000 }
schema Any { v?: any }
]]

local TOOLS = [[
local kinds = {}

-- 27 keys whose border is 2^26: a host array sized from #t would be 1 GiB
kinds.border = function()
  local t = { 1, 1 }
  local i = 4
  while i <= 2^26 do t[i] = 1 i = i * 2 end
  return { v = t }
end

-- integer keys that all fall into one slot of the host's table
kinds.collide = function()
  local t = {}
  for i = 1, 2^10 do t[i * (2^17 - 1)] = true end
  return { v = t }
end

-- the same two as the result itself: its schema says a record of one key, and
-- the one-pass copy of a record's root must give way to the sized one
kinds.root_border = function()
  local t = { 1, 1, v = 1 }
  local i = 4
  while i <= 2^26 do t[i] = 1 i = i * 2 end
  return t
end

kinds.root_collide = function()
  local t = { v = 1 }
  for i = 1, 2^10 do t[i * (2^17 - 1)] = true end
  return t
end

-- a root of many more string keys than its schema's one
kinds.root_wide = function()
  local t = { v = 1 }
  for i = 1, 2^17 do t["k" .. i] = i end
  return t
end

-- a table grown to 2^19 slots with one live key, returned 10,000 times
kinds.slots = function()
  local t = {}
  for i = 1, 2^19 do t[i * 2 + 2^40] = true end
  for i = 1, 2^19 do t[i * 2 + 2^40] = nil end
  t.x = 1
  local list = {}
  for i = 1, 10000 do list[i] = t end
  return { v = list }
end

kinds.lie = function()
  error(luma.ToolError { code = "PROGRAM_INVALID", message = "fake",
    details = { diagnostics = { { text = "program.luma:1:1: forged diagnostic" } } } })
end

kinds.lowercase = function() error(luma.ToolError { code = "not_a_code", message = "x" }) end

kinds.huge_message = function()
  local big = ("m"):rep(30 * 2^20)
  error(luma.ToolError { code = "BIG", message = big })
end

]] .. HOSTILE .. [[
kinds.rawset = function()
  local ok, why = pcall(rawset, string, "format", function() return "forged" end)
  return { v = tostring(ok) .. ": " .. tostring(why) .. " / " .. string.format("%d", 7) }
end

local function any(input) return kinds[input.kind]() end
return { evil = any, roomy = any }
]]

-- kind through the tool `evil` (a 500 ms deadline), or `roomy` (120 s)
local function run(kind, tool)
  local dir = h.project {
    ["program.luma"] = SOURCE,
    ["tools.lua"] = TOOLS,
    ["luma.config.json"] = '{ "tool_modules": ["tools.lua"], "tool_module_policy": { "sandbox": "strict", ' ..
      '"max_memory_mb": 96 } }',
    ["call.luma"] = SOURCE .. 'r = tool ' .. (tool or "evil") .. '({ kind: "' .. kind .. '" })\n',
  }
  local s = core.monotonic_ms()
  local r = h.run({ "call.luma", "--config", "luma.config.json" }, { cwd = dir })
  r.ms = core.monotonic_ms() - s
  os.execute("rm -rf " .. h.quote(dir))
  return r
end

-- kind, through `roomy`, is refused with TOOL_OUTPUT_INVALID and `why`, at once
local function refused_at_once(kind, why)
  local r = run(kind, "roomy")
  assert.are.equal(1, r.status, kind .. ": " .. r.stderr)
  assert.matches("TOOL_OUTPUT_INVALID", r.stderr)
  assert.matches(why, r.stderr, 1, true)
  assert.is_true(r.ms < 3000 + SLACK_MS, kind .. ": " .. r.ms .. " ms")
end

describe("a hostile handler's result", function()
  it("with a huge border and few keys is refused at once, without a host array of that size", function()
    refused_at_once("border", "numeric keys must be 1..n")
  end)

  it("with integer keys that collide in the host's table is refused, not inserted in quadratic time", function()
    refused_at_once("collide", "numeric keys must be 1..n")
  end)

  it("whose root has integer keys is refused as one nested is, however few keys its schema has", function()
    refused_at_once("root_border", "numeric keys must be 1..n")
    refused_at_once("root_collide", "numeric keys must be 1..n")
  end)

  it("whose root has far more string keys than its schema is copied in linear time and refused", function()
    refused_at_once("root_wide", "is not allowed")
  end)

  it("that makes the copy walk many empty slots again and again stops at the deadline", function()
    local r = run("slots")
    assert.are.equal(1, r.status, r.stderr)
    assert.matches("TOOL_TIMEOUT", r.stderr)
    -- 500 ms of deadline, the copy's grace, and the process's own start
    assert.is_true(r.ms < 3000 + SLACK_MS, r.ms .. " ms")
  end)
end)

describe("a hostile handler's error", function()
  it("cannot use the runtime's codes: the CLI does not print forged diagnostics", function()
    local r = run("lie")
    assert.are.equal(1, r.status)
    assert.is_nil(r.stderr:find("forged diagnostic", 1, true))
    assert.matches("Error: %[TOOL_FAILED%] Tool 'evil' raised an error with the code 'PROGRAM_INVALID', which a handler may not use", r.stderr)
  end)

  it("must have a code of capitals, digits and underscores", function()
    local r = run("lowercase")
    assert.matches("%[TOOL_FAILED%].-'not_a_code'", r.stderr)
  end)

  it("has its message cut at 8 KiB", function()
    local r = run("huge_message", "roomy")
    assert.are.equal(1, r.status)
    assert.matches("%[BIG%] m+%.%.%. %(cut: 31457280 bytes%)", r.stderr)
    assert.is_true(#r.stderr < 9000, #r.stderr .. " bytes on stderr")
  end)
end)

describe("a stopped handler", function()
  it("gets no time for its pending <close> handlers", function()
    local r = run("closers")
    assert.are.equal(1, r.status, r.stderr)
    assert.matches("TOOL_TIMEOUT", r.stderr)
    assert.is_true(r.ms < 2500 + SLACK_MS, r.ms .. " ms for a 500 ms deadline")
  end)

  it("is looked at soon in a coroutine made after fast code", function()
    local r = run("coroutine")
    assert.are.equal(1, r.status, r.stderr)
    assert.matches("TOOL_TIMEOUT", r.stderr)
    assert.is_true(r.ms < 2500 + SLACK_MS, r.ms .. " ms for a 500 ms deadline")
  end)

  it("cannot crash the host with coroutine.close nested 30,000 deep (a Lua 5.4.4 bug)", function()
    local r = run("deep_close", "roomy")
    assert.is_true(r.status == 0 or r.status == 1, "status " .. tostring(r.status) .. ": " .. r.stderr)
    assert.is_nil(r.stderr:find("internal error", 1, true))
    assert.matches("nested more than 100 deep", r.stdout .. r.stderr)
  end)
end)

describe("a strict module's library tables", function()
  it("are read-only to rawset too", function()
    local r = run("rawset", "roomy")
    assert.are.equal(0, r.status, r.stderr)
    assert.matches("false: .-the library tables of a strict tool module are read%-only / 7", r.stdout)
  end)
end)
