-- How a running handler is stopped (issue 15, handlers at full speed): it
-- starts under the count hook, and once it ran 20 µs it runs on with no hook,
-- and a signal sent to its thread when its deadline passes, or when it is
-- cancelled, sets the hook that stops it (sandbox/watch.c). luma.deadline_signal chooses the signal, or the count
-- hook of before. The hostile corpus of spec/14 runs both ways; this spec
-- covers what is particular to the signal: the Lua thread it must stop is a
-- coroutine as often as the handler's own.
local luma = require "luma"
local core = require "luma.core"
local h = require "spec.helpers"

local SLACK_MS = h.by_instrumentation(100, 400, 3000)
local TIMEOUT_MS = 200
local DEFAULT_SIGNAL = luma.deadline_signal()
-- ThreadSanitizer holds signals back until a thread calls into libc, which a
-- Lua loop may never do: such a build uses the count hook, always
local TSAN = core.thread_sanitizer
local NO_HOOK = TSAN and "true" or "false"

local CONTRACT = [[
schema Out { v?: string }
tool hook() -> Out {}
tool brief_hook() -> Out {}
tool hook_in_coroutine() -> Out {}
tool spin() -> Out { timeout: 200 }
tool spin_in_coroutine() -> Out { timeout: 200 }
tool spin_three_deep() -> Out { timeout: 200 }
tool ping_pong() -> Out { timeout: 200 }
tool spin_in_kept_coroutine() -> Out { timeout: 200 }
tool spin_in_close() -> Out { timeout: 200 }
tool spin_after_yield() -> Out { timeout: 200 }
tool spin_in_wrapped_pcall() -> Out { timeout: 200 }
tool spin_in_wrapped_close() -> Out { timeout: 200 }
tool make_kept() -> Out { timeout: 200 }
tool run_kept() -> Out { timeout: 200 }
tool endless() -> Out { timeout: 60000 }
]]

local HANDLERS = [[
local made   -- by make_kept, for run_kept
-- made while the module loads, kept across calls
local kept = coroutine.create(function() coroutine.yield() while true do end end)
coroutine.resume(kept)

local function gethook()
  return debug and debug.gethook and tostring(debug.gethook() ~= nil) or "no debug"
end

return {
  -- after 20 µs under the count hook, a handler runs on with none
  hook = function() local x = 0 for i = 1, 300000 do x = x + i end return { v = gethook() } end,
  brief_hook = function() return { v = gethook() } end,
  hook_in_coroutine = function()
    return coroutine.wrap(function() local x = 0 for i = 1, 300000 do x = x + i end return { v = gethook() } end)()
  end,
  spin = function() while true do end end,
  spin_in_coroutine = function() coroutine.wrap(function() while true do end end)() end,
  spin_three_deep = function()
    coroutine.wrap(function()
      coroutine.wrap(function()
        coroutine.wrap(function() while true do end end)()
      end)()
    end)()
  end,
  ping_pong = function()
    local co = coroutine.wrap(function() while true do local x = 0 for i = 1, 100 do x = x + i end coroutine.yield(x) end end)
    while true do co() end
  end,
  spin_in_kept_coroutine = function() coroutine.resume(kept) end,
  spin_in_close = function()
    local co = coroutine.create(function()
      local x <close> = setmetatable({}, { __close = function() while true do end end })
      coroutine.yield()
    end)
    coroutine.resume(co)
    coroutine.close(co)
  end,
  spin_after_yield = function()
    local co = coroutine.wrap(function() coroutine.yield() while true do end end)
    co()
    local x = 0
    for i = 1, 1000 do x = x + i end
    co()
  end,
  spin_in_wrapped_pcall = function()
    coroutine.wrap(function() while true do pcall(function() while true do end end) end end)()
  end,
  -- the error path of coroutine.wrap closes the dead coroutine: its __close runs in it
  spin_in_wrapped_close = function()
    coroutine.wrap(function()
      local x <close> = setmetatable({}, { __close = function() while true do end end })
      error("boom")
    end)()
  end,
  -- a coroutine made in one call (with no hook under the signal) and run in a later one
  make_kept = function() made = coroutine.create(function() while true do end end) return { v = "made" } end,
  run_kept = function() coroutine.resume(made) end,
  endless = function() while true do end end,
}
]]

local function project(sandbox, concurrency)
  local dir = h.project {
    ["program.luma"] = CONTRACT,
    ["tools.lua"] = HANDLERS,
    ["luma.config.json"] = core.json_encode {
      tool_modules = { "tools.lua" },
      tool_module_policy = { sandbox = sandbox, max_concurrency = concurrency or 2 },
    },
  }
  local p, err = h.load(dir)
  assert(p, err and tostring(err))
  return p
end

-- Started and waited for with a bound, so that a handler the signal fails
-- to stop is reported as a failure (the process may then hang as it exits).
local function timed_call(p, name)
  local t0 = core.monotonic_ms()
  local c = p:start(name, {})
  assert(c:wait(TIMEOUT_MS + SLACK_MS + 5000), name .. " was not stopped")
  local ok, res = pcall(c.result, c)
  return ok, res, core.monotonic_ms() - t0
end

describe("luma.deadline_signal", function()
  after_each(function()
    assert.is_true(TSAN or luma.deadline_signal(DEFAULT_SIGNAL))
  end)

  it("is a signal by default: a handler that ran 20 µs runs on with no hook at all", function()
    assert.are.equal(TSAN and "boolean" or "number", type(DEFAULT_SIGNAL))
    local p = project("none")   -- its handlers can see the debug library
    assert.are.equal(NO_HOOK, p:call("hook", {}).v)
    -- handed to the watch in a coroutine too, which the signal then stops
    assert.are.equal(NO_HOOK, p:call("hook_in_coroutine", {}).v)
  end)

  it("leaves a brief handler under the count hook: arming the watch costs more than such a call", function()
    local p = project("none")
    -- (under valgrind, even a brief handler runs 20 µs)
    if h.by_instrumentation(true, true, false) then assert.are.equal("true", p:call("brief_hook", {}).v) end
  end)

  if not TSAN then it("can choose the count hook instead, and a signal again", function()
    local p = project("none")
    assert.is_true(luma.deadline_signal(false))
    assert.is_false(luma.deadline_signal())
    assert.are.equal("true", p:call("hook", {}).v)
    assert.is_true(luma.deadline_signal(DEFAULT_SIGNAL + 1))
    assert.are.equal(DEFAULT_SIGNAL + 1, luma.deadline_signal())
    assert.are.equal("false", p:call("hook", {}).v)
    local ok, err = timed_call(p, "spin")
    assert.is_false(ok)
    assert.are.equal("TOOL_TIMEOUT", err.code)
  end) end

  it("refuses a signal it cannot use, and says why; handlers then get the count hook", function()
    local ok, why = luma.deadline_signal(9)   -- SIGKILL
    assert.is_nil(ok)
    assert.matches("signal 9 cannot stop handlers", why, 1, true)
    assert.is_false(luma.deadline_signal())
    local p = project("none")
    assert.are.equal("true", p:call("hook", {}).v)
  end)

  if not TSAN then it("stops a coroutine made under the signal and run under the count hook", function()
    local p = project("strict", 1)   -- one state: both calls run in it
    assert.are.equal("made", p:call("make_kept", {}).v)
    assert.is_true(luma.deadline_signal(false))
    local ok, err, ms = timed_call(p, "run_kept")
    assert.is_false(ok)
    assert.are.equal("TOOL_TIMEOUT", err.code, err.message)
    assert.is_true(ms < TIMEOUT_MS + SLACK_MS, string.format("run_kept took %.0f ms", ms))
  end) end

  it("stops a call that was running when the choice changed", function()
    local p = project("strict")
    for _, choice in ipairs { false, DEFAULT_SIGNAL } do
      local c = p:start("spin", {})
      luma.deadline_signal(choice)
      assert(c:wait(TIMEOUT_MS + SLACK_MS + 5000), "spin was not stopped")
      local ok, err = pcall(c.result, c)
      assert.is_false(ok)
      assert.are.equal("TOOL_TIMEOUT", err.code, err.message)
    end
  end)

  it("takes real-time signals only", function()
    for _, n in ipairs { 2, 10, 15 } do   -- SIGINT, SIGUSR1, SIGTERM
      local ok, why = luma.deadline_signal(n)
      assert.is_nil(ok)
      assert.matches("signal " .. n .. " cannot stop handlers", why, 1, true)
    end
  end)

  it("refuses what is not a signal number", function()
    assert.matches("a signal number, or false", h.raised(luma.deadline_signal, 0), 1, true)
    assert.matches("a signal number, or false", h.raised(luma.deadline_signal, 1000), 1, true)
    assert.matches("number expected", h.raised(luma.deadline_signal, "SIGUSR1"), 1, true)
  end)
end)

for _, sandbox in ipairs { "strict", "none" } do
  describe("a handler stopped by the deadline signal (sandbox " .. sandbox .. ")", function()
    local p
    setup(function() p = project(sandbox) end)

    for _, name in ipairs { "spin", "spin_in_coroutine", "spin_three_deep", "ping_pong", "spin_in_kept_coroutine",
                            "spin_in_close", "spin_after_yield", "spin_in_wrapped_pcall", "spin_in_wrapped_close" } do
      it("in " .. name:gsub("_", " "), function()
        local ok, err, ms = timed_call(p, name)
        assert.is_false(ok, name .. " returned")
        assert.are.equal("TOOL_TIMEOUT", err.code, err.message)
        assert.is_true(ms < TIMEOUT_MS + SLACK_MS, string.format("%s took %.0f ms", name, ms))
        -- the next call on the module runs hook-free again
        assert.are.equal(sandbox == "none" and NO_HOOK or "no debug", p:call("hook", {}).v)
      end)
    end

    it("when it is cancelled, at once, whatever its deadline", function()
      local c = p:start("endless", {})
      assert.is_false(c:wait(100))
      local t0 = core.monotonic_ms()
      c:cancel()
      assert.is_true(c:wait(5000))
      local ms = core.monotonic_ms() - t0
      local ok, err = pcall(c.result, c)
      assert.is_false(ok)
      assert.are.equal("TOOL_CANCELLED", err.code, err.message)
      assert.is_true(ms < SLACK_MS, string.format("the cancel took %.0f ms", ms))
    end)
  end)
end

describe("a handler's first microseconds, under the count hook", function()
  it("are stopped at the deadline when fast code is followed by slow instructions", function()
    -- fast code would grow a count hook's interval, and the slow instructions
    -- after it would then run unchecked: until the call is handed to the
    -- watch, the interval stays at its shortest
    local dir = h.project {
      ["program.luma"] = "schema Out { v?: string }\ntool slow_after_fast() -> Out { timeout: 200 }",
      ["tools.lua"] = [[
-- two equal strings of a million NUL-separated chunks, distinct objects:
-- comparing them (strcoll chunk by chunk) is one instruction of about 10 ms
local big_a = ("a\0"):rep(1 << 21)
local big_b = ("a\0"):rep(1 << 20) .. ("a\0"):rep(1 << 20)
return {
  slow_after_fast = function()
    local x = 0
    for i = 1, 1000 do x = x + i end
    local a, b = big_a, big_b
    for _ = 1, 2000 do if a < b then end end   -- 3 instructions each
    return { v = "not stopped: " .. x }
  end,
}]],
      ["luma.config.json"] = core.json_encode {
        tool_modules = { "tools.lua" }, tool_module_policy = { sandbox = "strict", max_concurrency = 1 } },
    }
    local p = assert(h.load(dir))
    local ok, err, ms = timed_call(p, "slow_after_fast")
    assert.is_false(ok)
    assert.are.equal("TOOL_TIMEOUT", err.code, err.message)
    assert.is_true(ms < TIMEOUT_MS + SLACK_MS, string.format("slow_after_fast took %.0f ms", ms))
  end)
end)

describe("a timeout too long to count", function()
  -- 2^63 - 1 ms: the deadline in ns (and the poll of a handler process) would
  -- overflow, which ended such calls at once as timed out
  for _, isolation in ipairs({ "thread", "process" }) do
    it("is waited as forever, not as already past (isolation " .. isolation .. ")", function()
      local dir = h.project {
        ["program.luma"] = "schema Out { v: int }\ntool work() -> Out { timeout: 9223372036854775807 }\n",
        ["tools.lua"] = "return { work = function() local x = 0 for i = 1, 300000 do x = x + 1 end return { v = x } end }",
        ["luma.config.json"] = core.json_encode {
          tool_modules = { "tools.lua" },
          tool_module_policy = { sandbox = "strict", isolation = isolation },
        },
      }
      local p = assert(h.load(dir))
      -- its handler process goes at close: spec/35 counts this process's children
      finally(function() p:close() end)
      assert.are.equal(300000, p:call("work", {}).v)
    end)
  end

  it("is refused for kill_grace_ms, which is at most ten seconds", function()
    local dir = h.project {
      ["program.luma"] = "schema Out { v: int }\ntool work() -> Out {}\n",
      ["tools.lua"] = "return { work = function() return { v = 1 } end }",
      ["luma.config.json"] = core.json_encode {
        tool_modules = { "tools.lua" },
        tool_module_policy = { sandbox = "strict", isolation = "process", kill_grace_ms = 4294967301 },
      },
    }
    local p, err = h.load(dir)
    assert.is_nil(p)
    assert.matches("tool_module_policy.kill_grace_ms must be at most 10000", tostring(err), 1, true)
  end)
end)

describe("core.load_module's numbers of a policy", function()
  -- the core's own checks, under luma.config's: a host that calls
  -- core.load_module directly gets them too (an int cast wrapped
  -- kill_grace_ms 4294967301 to 5, max_memory_mb was shifted by 20 bits
  -- unchecked, and max_concurrency cast to int)
  local dir
  setup(function()
    dir = h.project { ["tools.lua"] = "return { work = function() return { v = 1 } end }" }
  end)

  local function load_with(key, value)
    return pcall(core.load_module, { path = dir .. "/tools.lua",
      policy = { sandbox = "strict", isolation = "thread", [key] = value } })
  end

  local RANGES = { kill_grace_ms = "from 0 to 10000", max_memory_mb = "from 16 to 1048576",
    max_concurrency = "from 1 to 256" }
  for _, case in ipairs({
    { "kill_grace_ms", 4294967301, "4294967301" }, { "kill_grace_ms", -1, "-1" }, { "kill_grace_ms", 10001, "10001" },
    { "kill_grace_ms", math.maxinteger, tostring(math.maxinteger) }, { "kill_grace_ms", 1.5, "1.5" },
    { "kill_grace_ms", 0 / 0, "" }, { "kill_grace_ms", "100", "string" },
    { "max_memory_mb", 2^53, "9.007199254741e+15" }, { "max_memory_mb", math.maxinteger, tostring(math.maxinteger) },
    { "max_memory_mb", 15, "15" }, { "max_memory_mb", 1048577, "1048577" }, { "max_memory_mb", -1, "-1" },
    { "max_concurrency", 0, "0" }, { "max_concurrency", 257, "257" }, { "max_concurrency", 4294967297, "4294967297" },
    { "max_concurrency", 2.5, "2.5" }, { "max_concurrency", "4", "string" },
  }) do
    local shown = type(case[2]) == "string" and '"' .. case[2] .. '"' or tostring(case[2])
    it("refuses " .. case[1] .. " = " .. shown .. ", naming the key and the range", function()
      local ok, err = load_with(case[1], case[2])
      assert.is_false(ok)
      assert.matches("policy." .. case[1] .. " must be an integer " .. RANGES[case[1]] .. ", not " .. case[3],
        tostring(err), 1, true)
    end)
  end

  it("takes the ends of each range", function()
    for _, case in ipairs({ { "kill_grace_ms", 0 }, { "kill_grace_ms", 10000 }, { "max_memory_mb", 16 },
      { "max_memory_mb", 1048576 }, { "max_concurrency", 1 }, { "max_concurrency", 256 } }) do
      local ok, m = load_with(case[1], case[2])
      assert.is_true(ok, tostring(m))
      assert.are.same({ "work" }, m:exports())
      m:close()
    end
  end)
end)
