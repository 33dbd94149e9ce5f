-- Futures for Lua hosts: program:start, agent:start and agent:start_ask go on
-- without blocking; ready(), wait(), result(), cancel(), and await() inside a
-- coroutine.
local luma = require "luma"
local core = require "luma.core"
local h = require "spec.helpers"

local now = core.monotonic_ms

-- Instrumented runs are slower at everything: time bounds are scaled.
local SLOW = h.by_instrumentation(1, 3, 25)

local SOURCE = [[
schema R { v?: string, n?: int }
tool nap(ms: int, tag?: string) -> R { timeout: 5000 }
tool spin(x?: int) -> R { timeout: 5000 }
tool doze(ms: int) -> R { timeout: 5000 }
agent A {
  tools: [nap, spin]
  fn run(ms: int) -> string {
    a = tool nap({ ms: ms, tag: "one" })
    b = tool nap({ ms: ms, tag: "two" })
    return "{a.v}+{b.v}"
  }
  fn stuck() -> string {
    s = tool spin({})
    return s.v
  }
  fn caught() -> string {
    try {
      s = tool spin({})
      return "not cancelled"
    } catch e {
      return e.code
    }
  }
  fn bad(n: int) -> int { return n / 0 }
}
]]

local TOOLS = [[
local socket = require "socket"
return {
  nap = function(input) socket.sleep(input.ms / 1000) return { v = input.tag } end,
  spin = function(input, signal)
    while not signal.aborted do socket.sleep(0.002) end
    return { v = signal.reason }
  end,
  doze = function(input, signal)
    local cpu = os.clock()
    local slept = signal:sleep(input.ms)
    return { v = tostring(slept), n = math.floor((os.clock() - cpu) * 1000) }
  end,
}
]]

local function load(rt)
  local dir = h.project {
    ["program.luma"] = SOURCE,
    ["tools.lua"] = TOOLS,
    ["luma.config.json"] = '{ "tool_modules": ["tools.lua"], "tool_module_policy": { "max_concurrency": 8 } }',
  }
  return assert(h.load(dir, { runtime = rt }))
end

describe("a future of an agent method (agent:start)", function()
  it("runs the method's tool calls without blocking the caller", function()
    local rt = luma.runtime { workers = 2 }
    local p = load(rt)
    local t0 = now()
    local f = p:agent("A"):start("run", { ms = 150 })
    assert.is_true(now() - t0 < 100 * SLOW, "start blocked")
    assert.is_false(f:done())
    local frames = 0
    while not f:ready() do
      frames = frames + 1
      rt:wait(5)
    end
    assert.is_true(frames > 10, "only " .. frames .. " frames while two 150 ms calls ran")
    assert.are.equal("one+two", f:result())
    rt:close()
  end)

  it("waits with a timeout, then to the end", function()
    local p = load()
    local f = p:agent("A"):start("run", { ms = 100 })
    assert.is_false(f:wait(20))
    assert.is_true(f:wait(5000))
    assert.are.equal("one+two", f:result())
  end)

  -- now + 2^63-1, or + math.huge, did not fit an integer: wait raised
  -- "number has no integer representation" instead of waiting
  for _, huge in ipairs({ math.huge, math.maxinteger }) do
    it("waits a timeout too long to count (" .. tostring(huge) .. ") as timeout_cap_ms, until the end", function()
      local p = load()
      local f = p:agent("A"):start("run", { ms = 20 })
      assert.is_true(f:wait(huge))
      assert.are.equal("one+two", f:result())
      local t0 = now()
      assert.is_true(f:wait(huge))
      assert.is_true(now() - t0 < 100 * SLOW, "a done future waited")
    end)
  end

  it("refuses a timeout that is not a number of milliseconds >= 0, NaN among them", function()
    local p = load()
    local f = p:agent("A"):start("run", { ms = 1 })
    for _, bad in ipairs({ 0 / 0, -1, -math.huge, "10" }) do
      local err = h.raised(f.wait, f, bad)
      assert.matches("bad argument #1 to 'wait' (a number of milliseconds >= 0 expected, got ", err, 1, true)
    end
    assert.is_true(f:wait(5000))
  end)

  it("refuses at once what the method cannot take, and raises the method's error from result()", function()
    local p = load()
    local err = h.raised(p:agent("A").start, p:agent("A"), "run", { ms = "x" })
    assert.are.equal("INPUT_INVALID", err.code)
    err = h.raised(p:agent("A").start, p:agent("A"), "nope", {})
    assert.are.equal("METHOD_NOT_FOUND", err.code)
    local f = p:agent("A"):start("bad", { n = 1 })
    assert.is_true(f:wait(1000))
    err = h.raised(f.result, f)
    assert.are.equal("RUNTIME_ERROR", err.code)
    assert.matches("division by zero", err.message)
  end)

  it("says it is not done when asked for its result early", function()
    local p = load()
    local f = p:agent("A"):start("run", { ms = 100 })
    assert.matches("not done", tostring(h.raised(f.result, f)))
    f:wait()
  end)

  it("is cancelled: the handler's signal fires and the method ends with TOOL_CANCELLED", function()
    local p = load()
    local f = p:agent("A"):start("stuck", {})
    assert.is_false(f:wait(30))
    f:cancel()
    assert.is_true(f:wait(2000))
    local err = h.raised(f.result, f)
    assert.are.equal("TOOL_CANCELLED", err.code)
  end)

  it("lets the method catch the cancellation", function()
    local p = load()
    local f = p:agent("A"):start("caught", {})
    f:cancel()
    assert.is_true(f:wait(2000))
    assert.are.equal("TOOL_CANCELLED", f:result())
  end)
end)

describe("a call's and a runtime's wait with a timeout too long to count", function()
  -- now + 2^63-1 ms overflowed: the deadline wrapped negative, which read as
  -- no timeout by accident (UBSan stops there); it is timeout_cap_ms now
  it("waits until the end, and a short one still times out", function()
    local rt = luma.runtime { workers = 2 }
    local p = load(rt)
    local c = p:start("nap", { ms = 20, tag = "x" })
    assert.is_true(c:wait(math.maxinteger))
    assert.are.equal("x", c:result().v)
    assert.is_true(c:wait(math.maxinteger))
    p:start("nap", { ms = 20 })
    assert.is_true(rt:wait(math.maxinteger))
    assert.are.equal(0, (rt:poll()))
    local stuck = p:start("spin", {})
    local t0 = now()
    assert.is_false(stuck:wait(30))
    assert.is_false(rt:wait(30))
    assert.is_true(now() - t0 < 1000 * SLOW, (now() - t0) .. " ms for two 30 ms waits")
    stuck:cancel()
    assert.is_true(stuck:wait(math.maxinteger))
    assert.are.equal("TOOL_CANCELLED", h.raised(stuck.result, stuck).code)
    rt:close()
  end)

  it("takes math.huge and fractions as Future:wait does, and refuses NaN", function()
    local rt = luma.runtime { workers = 2 }
    local p = load(rt)
    local c = p:start("nap", { ms = 20, tag = "y" })
    assert.is_true(c:wait(math.huge))
    assert.is_true(rt:wait(math.huge))
    assert.is_true(c:wait(2.5))
    local stuck = p:start("spin", {})
    assert.is_false(stuck:wait(10.75))
    for _, wait in ipairs { function() return stuck:wait(0 / 0) end, function() return rt:wait(0 / 0) end } do
      local ok, err = pcall(wait)
      assert.is_false(ok)
      assert.matches("a number of milliseconds expected, got nan", tostring(err), 1, true)
    end
    assert.has_error(function() stuck:wait("soon") end)
    stuck:cancel()
    assert.is_true(stuck:wait(math.huge))
    rt:close()
  end)
end)

describe("await inside a coroutine", function()
  it("yields until the call is done, so one thread drives many coroutines", function()
    local rt = luma.runtime { workers = 4 }
    local p = load(rt)
    local results, yields = {}, 0
    local tasks = {}
    for i = 1, 4 do
      tasks[i] = coroutine.create(function()
        local c = p:start("nap", { ms = 80, tag = "c" .. i })
        local v = c:await()
        local m = p:agent("A"):start("run", { ms = 20 }):await()
        results[i] = v.v .. "/" .. m
      end)
    end
    local t0 = now()
    repeat
      local alive = 0
      for _, co in ipairs(tasks) do
        if coroutine.status(co) ~= "dead" then
          local ok, waiting = coroutine.resume(co)
          assert(ok, waiting)
          if coroutine.status(co) ~= "dead" then
            alive = alive + 1
            yields = yields + 1
            assert.is_truthy(waiting.ready, "await yields the future")
          end
        end
      end
      if alive > 0 then rt:wait(2) end
    until alive == 0 or now() - t0 > 5000 * SLOW
    for i = 1, 4 do assert.are.equal("c" .. i .. "/one+two", results[i]) end
    assert.is_true(yields > 4)
    -- four 80 ms calls at once, then four methods of two 20 ms calls
    assert.is_true(now() - t0 < 400 * SLOW, (now() - t0) .. " ms: the coroutines did not overlap")
    rt:close()
  end)

  it("waits outside a coroutine", function()
    local p = load()
    assert.are.equal("x", p:start("nap", { ms = 10, tag = "x" }):await().v)
    assert.are.equal("one+two", p:agent("A"):start("run", { ms = 10 }):await())
  end)
end)

describe("signal:sleep(ms) in a handler", function()
  it("waits without using the CPU", function()
    local p = load()
    local t0 = now()
    local r = p:call("doze", { ms = 200 })
    assert.is_true(now() - t0 >= 195)
    assert.are.equal("true", r.v)
    if SLOW == 1 then   -- os.clock counts the whole process: under valgrind, the busy host too
      assert.is_true(r.n < 60, r.n .. " ms of CPU for a 200 ms sleep")
    end
  end)

  it("wakes at once when the call is cancelled", function()
    local p = load()
    local c = p:start("doze", { ms = 4000 })
    assert.is_false(c:wait(30))
    local t0 = now()
    c:cancel()
    assert.is_true(c:wait(2000))
    assert.is_true(now() - t0 < 500 * SLOW, (now() - t0) .. " ms to notice the cancel")
    assert.are.equal("TOOL_CANCELLED", h.raised(c.result, c).code)
  end)
end)

describe("a module's new state", function()
  it("is made on a worker: starting a call never waits for a module's code to load", function()
    local dir = h.project {
      ["program.luma"] = "schema R { v: string }\ntool slow_load(ms: int) -> R { timeout: 5000 }\n",
      -- the module's own code takes 150 ms to run, in every new state
      ["tools.lua"] = [[
        local socket = require "socket"
        socket.sleep(0.15)
        return { slow_load = function(i) socket.sleep(i.ms / 1000) return { v = "ok" } end }
      ]],
      ["luma.config.json"] = '{ "tool_modules": ["tools.lua"], "tool_module_policy": { "max_concurrency": 3 } }',
    }
    local rt = luma.runtime { workers = 3 }
    local p = assert(h.load(dir, { runtime = rt }))   -- the first state is made here
    local first = p:start("slow_load", { ms = 300 })
    local worst = 0
    local calls = { first }
    for i = 2, 3 do
      local t0 = now()
      calls[i] = p:start("slow_load", { ms = 10 })   -- the first state is busy: a new one is needed
      worst = math.max(worst, now() - t0)
    end
    assert.is_true(worst < 50 * SLOW, worst .. " ms to start a call that needs a new state")
    for _, c in ipairs(calls) do
      assert.is_true(c:wait(5000))
      assert.are.equal("ok", c:result().v)
    end
    rt:close()
  end)
end)

describe("program:start's opts.tags and call:progress()", function()
  local PROGRESS_SOURCE = "schema R { n: int }\ntool steps(n: int) -> R { timeout: 5000 }\n"
  local PROGRESS_TOOLS = [[
return { steps = function(input, signal)
  for i = 1, input.n do signal:progress(i, input.n, i == input.n and "done" or nil) end
  return { n = input.n }
end }
]]
  local function program(events)
    local dir = h.project {
      ["program.luma"] = PROGRESS_SOURCE,
      ["tools.lua"] = PROGRESS_TOOLS,
      ["luma.config.json"] = '{ "tool_modules": ["tools.lua"] }',
    }
    return assert(h.load(dir, { on_event = function(e) events[#events + 1] = e end }))
  end

  it("puts the tags into the call's telemetry event, and refuses tags that are not scalars under string keys", function()
    local events = {}
    local p = program(events)
    local c = p:start("steps", { n = 1 }, { tags = { mcp_client = "ide", mcp_request = 7, replay = false } })
    c:wait()
    assert.are.same({ n = 1 }, c:result())
    assert.are.same({ mcp_client = "ide", mcp_request = 7, replay = false }, events[1].tags)
    p:start("steps", { n = 1 }):wait()
    assert.is_nil(events[2].tags)
    assert.has_error(function() p:start("steps", { n = 1 }, { tags = "x" }) end, "opts.tags: expected a table, got string")
    assert.has_error(function() p:start("steps", { n = 1 }, { tags = { 1 } }) end, "opts.tags: keys must be strings, not number")
    assert.has_error(function() p:start("steps", { n = 1 }, { tags = { k = {} } }) end,
      "opts.tags.k: expected a string, an integer or a boolean, got table")
    assert.has_error(function() p:start("steps", { n = 1 }, { tags = { k = 1.5 } }) end,
      "opts.tags.k: expected a string, an integer or a boolean, got number")
  end)

  it("gives the handler's last signal:progress, and nil before the first", function()
    local p = program({})
    local c = p:start("steps", { n = 3 })
    c:wait()
    local count, n, total, message = c:progress()
    assert.are.same({ 3, 3, 3, "done" }, { count, n, total, message })
    c = p:start("steps", { n = 0 })
    c:wait()
    assert.is_nil(c:progress())
  end)

  it("refuses a progress that is not a finite number >= 0", function()
    local dir = h.project {
      ["program.luma"] = PROGRESS_SOURCE,
      ["tools.lua"] = "return { steps = function(input, signal) signal:progress(input.n == 0 and 0 / 0 or -1) return { n = 1 } end }",
      ["luma.config.json"] = '{ "tool_modules": ["tools.lua"] }',
    }
    local p = assert(h.load(dir))
    for _, n in ipairs { 0, 1 } do
      local ok, err = pcall(p.call, p, "steps", { n = n })
      assert.is_false(ok)
      assert.are.equal("TOOL_FAILED", err.code)
      assert.matches("a finite number >= 0 expected", err.message, 1, true)
    end
  end)
end)
