local luma = require "luma"
local core = require "luma.core"
local h = require "spec.helpers"

local now = core.monotonic_ms

local SOURCE = [[
schema R { v?: string, n?: int }
tool nap(ms: int, tag?: string) -> R { timeout: 5000 }
tool spin(x?: int) -> R { timeout: 1500 }
tool busy(x?: int) -> R {
  timeout: 5000
  retries: 3
  retry_backoff: "fixed"
  retry_delay: 250
}
tool shared(k: string) -> R { cache: true
  timeout: 5000 }
tool once(id: string, ms: int) -> R {
  side_effects: "write"
  idempotent: true
  idempotency_key: id
  timeout: 5000
}
agent A {
  tools: [nap]
  fn run() { return tool nap({ ms: 0 }) }
}
]]

-- Handlers of a module without a sandbox policy: socket.sleep waits without
-- holding a CPU, as a handler waiting on a database or a network would.
local TOOLS = [[
local socket = require "socket"
local runs = 0
return {
  nap = function(input) socket.sleep(input.ms / 1000) runs = runs + 1 return { v = input.tag, n = runs } end,
  spin = function(input, signal)
    while not signal.aborted do socket.sleep(0.001) end
    return { v = signal.reason }
  end,
  busy = function() error(luma.ToolError { code = "BUSY", message = "busy", retryable = true }) end,
  shared = function(input) socket.sleep(0.2) return { v = input.k } end,
  once = function(input) socket.sleep(input.ms / 1000) return { v = input.id } end,
}
]]

local function project(concurrency, extra)
  local files = {
    ["program.luma"] = SOURCE,
    ["tools.lua"] = TOOLS,
    ["luma.config.json"] = '{ "tool_modules": ["tools.lua"], "tool_module_policy": { "max_concurrency": ' ..
      (concurrency or 8) .. ' } }',
  }
  for k, v in pairs(extra or {}) do files[k] = v end
  return h.project(files)
end

local function load(opts, concurrency)
  local dir = project(concurrency)
  local p = assert(h.load(dir, opts))
  return p, dir
end

-- Polls the runtime until fn() is true or 5 s pass.
local function until_true(rt, fn)
  local deadline = now() + 5000
  while not fn() do
    assert(now() < deadline, "timed out")
    rt:poll()
    rt:wait(5)
  end
end

describe("a call as an object (program:start)", function()
  it("runs through the poll interface and gives its result, metadata and one event", function()
    local rt = luma.runtime { workers = 2 }
    local events = {}
    local p = load({ runtime = rt, on_event = function(e) events[#events + 1] = e end })
    local c = p:start("nap", { ms = 50, tag = "x" })
    assert.is_false(c:done())
    assert.is_true(c:wait(5000))
    local result, meta = c:result()
    assert.are.same({ v = "x", n = 1 }, result)
    assert.are.equal(1, meta.attempts)
    assert.are.equal(1, #events)
    assert.are.equal("ok", events[1].status)
    rt:close()
  end)

  it("owns a copy of its input: changing the table after the start changes nothing", function()
    local p = load()
    local input = { ms = 30, tag = "before" }
    local c = p:start("nap", input)
    input.tag = "after"
    assert.is_true(c:wait(5000))
    assert.are.equal("before", c:result().v)
  end)

  it("says it is not done yet when asked for its result early", function()
    local p = load()
    local c = p:start("nap", { ms = 200 })
    local ok, err = pcall(c.result, c)
    assert.is_false(ok)
    assert.matches("not done", tostring(err))
    c:wait(5000)
  end)

  it("overlaps 200 calls on a pool of 8, driven by one thread (64 under valgrind)", function()
    -- under valgrind, which runs one thread at a time, the pipeline's own CPU
    -- time for 200 calls passes the tail calls' 5 s deadline while they wait
    -- for a state; the overlap is what is measured, so fewer calls show it
    local n = h.by_instrumentation(200, 200, 64)
    local rt = luma.runtime { workers = 8 }
    local p = load({ runtime = rt }, 8)
    local t0 = now()
    local calls = {}
    for i = 1, n do calls[i] = p:start("nap", { ms = 100, tag = tostring(i) }) end
    assert.is_true(rt:wait(60000))
    local took = now() - t0
    for i = 1, n do assert.are.equal(tostring(i), calls[i]:result().v) end
    local sequential = n * 100
    -- 8 at a time: about an eighth; one at a time: all of it
    assert.is_true(took / sequential < 0.4, string.format("%.0f ms for %d calls (ratio %.2f)", took, n, took / sequential))
    rt:close()
  end)

  it("waits for its backoff on a timer of the program's clock, not in a sleep", function()
    local rt = luma.runtime { workers = 1 }
    local clock = h.clock()
    local p = luma.compile(SOURCE, "program.luma", { runtime = rt })
    p:configure { clock = clock }
    local runs = 0
    p:register("busy", function()
      runs = runs + 1
      error(luma.error { code = "BUSY", message = "busy " .. runs, retryable = true })
    end)
    local c = p:start("busy", {})
    assert.are.equal(1, runs)
    for n = 2, 4 do
      -- the next attempt is 250 ms away on the program's clock: polling runs nothing
      local active, wait = rt:poll()
      assert.are.same({ 1, 250, n - 1 }, { active, wait, runs })
      assert.is_false(c:poll())
      clock.t = clock.t + 250
      rt:poll()
      assert.are.equal(n, runs)
    end
    assert.is_true(c:done())
    local err = h.raised(c.result, c)
    assert.are.same({ "BUSY", "busy 4" }, { err.code, err.message })
    assert.are.same({}, clock.sleeps)
  end)

  it("steps only the call it starts: the calls in flight move when the host polls", function()
    -- a start costs the same with 10 or 10,000 calls in flight
    local rt = luma.runtime { workers = 1 }
    local clock = h.clock()
    local p = luma.compile(SOURCE, "program.luma", { runtime = rt })
    p:configure { clock = clock }
    local runs = 0
    p:register("busy", function()
      runs = runs + 1
      error(luma.error { code = "BUSY", message = "busy " .. runs, retryable = true })
    end)
    p:register("nap", function(input) return { v = input.tag } end)
    local c = p:start("busy", {})
    assert.are.equal(1, runs)
    clock.t = clock.t + 250
    -- its next attempt is due, but starting another call does not run it
    local other = p:start("nap", { ms = 0, tag = "other" })
    assert.is_true(other:done())
    assert.are.equal(1, runs)
    assert.is_false(c:poll())
    assert.are.equal(2, runs)
  end)
end)

describe("starting a call inline (luma.runtime's inline)", function()
  local function inline_program(mode)
    local rt = luma.runtime { workers = 1, inline = mode }
    local dir = h.project {
      ["program.luma"] = "schema N { n: int }\ntool quick(n: int) -> N {}\ntool compute(ms: int) -> N { timeout: 5000 }\n" ..
        "tool after(first: string, ms: int) -> N { timeout: 5000 }\n",
      ["tools.lua"] = [[
local function compute(ms)
  local t, n = os.clock() + ms / 1000, 0
  while os.clock() < t do n = n + 1 end
  return n
end
-- 2 ms where no yield is possible (the slice ends there), then plain Lua
local first = {
  coroutine = function() coroutine.wrap(compute)(2) end,
  sort = function() table.sort({ 2, 1 }, function(a, b) compute(2) return a < b end) end,
}
return {
  quick = function(input) return { n = input.n } end,
  compute = function(input) return { n = compute(input.ms) } end,
  after = function(input)
    first[input.first]()
    return { n = compute(input.ms) }
  end,
}
]],
      ["luma.config.json"] = '{ "tool_modules": ["tools.lua"] }',
    }
    return assert(h.load(dir, { runtime = rt })), rt
  end

  for _, mode in ipairs { true, "slice" } do
    it("runs a handler that does not wait in the start itself (inline = " .. tostring(mode) .. ")", function()
      local p, rt = inline_program(mode)
      -- "slice": one of five starts (the first makes the state) is done
      -- within its 20 µs under a sanitizer's load; under valgrind each may
      -- be handed off
      local done = false
      for i = 1, mode == "slice" and 5 or 1 do
        local c = p:start("quick", { n = i })
        done = done or c:done()
        assert.is_true(c:wait(5000))
        assert.are.same({ n = i }, c:result())
      end
      if not (mode == "slice" and os.getenv("LUMA_VALGRIND")) then assert.is_true(done) end
      rt:close()
    end)
  end

  -- a "slice" start of tool with input returns before the handler has
  -- ended, and the call ends on the pool
  local function handed_off(tool, input)
    local p, rt = inline_program("slice")
    local t0 = now()
    local c = p:start(tool, input)
    local took = now() - t0
    assert.is_false(c:done())
    assert.is_true(took < 300, "the start held its thread " .. took .. " ms")
    assert.is_true(c:wait(5000))
    assert.is_true(c:result().n > 0)
    rt:close()
  end

  it("hands a handler that computes past its first slice to the pool (\"slice\"); true runs it to its end", function()
    handed_off("compute", { ms = 600 })
    local p, rt = inline_program(true)
    local t0 = now()
    local c = p:start("compute", { ms = 300 })
    assert.is_true(c:done())
    assert.is_true(now() - t0 >= 250)
    rt:close()
  end)

  -- (the slice ends in a coroutine of the handler's own or a C function's
  -- callback, where it cannot yield: the run is handed off once back in
  -- its own code, not kept on the thread to its end)
  for _, first in ipairs { "coroutine", "sort" } do
    it("hands a handler off when its slice ended where it could not yield (" .. first .. ")", function()
      handed_off("after", { first = first, ms = 600 })
    end)
  end

  it("refuses an inline that is not false, true or \"slice\"", function()
    local ok, err = pcall(luma.runtime, { inline = "always" })
    assert.is_false(ok)
    assert.matches('runtime: inline must be false, true or "slice", not always', err, 1, true)
  end)
end)

describe("cancelling a call", function()
  local function cancelled(c)
    assert.is_true(c:wait(5000))
    local ok, err = pcall(c.result, c)
    assert.is_false(ok)
    return err
  end

  it("while its handler runs: TOOL_CANCELLED, not retryable, with one event", function()
    local events = {}
    local p = load({ on_event = function(e) events[#events + 1] = e end })
    local c = p:start("spin", {})
    c:poll()
    local t0 = now()
    c:cancel()
    local err = cancelled(c)
    -- stopped like a handler at its deadline, long before its timeout (1500 ms)
    assert.is_true(now() - t0 < 500, string.format("%.0f ms", now() - t0))
    assert.are.same({ "TOOL_CANCELLED", "Tool 'spin' was cancelled.", false }, { err.code, err.message, err.retryable })
    assert.are.equal(1, #events)
    assert.are.equal("TOOL_CANCELLED", events[1].code)
  end)

  it("while it waits for its backoff", function()
    local p = load()
    local c = p:start("busy", {})
    c:poll()
    local t0 = now()
    c:cancel()
    assert.are.equal("TOOL_CANCELLED", cancelled(c).code)
    assert.is_true(now() - t0 < 200)
  end)

  it("while it waits for a busy state of its module", function()
    local p = load(nil, 1)
    local first = p:start("nap", { ms = 300, tag = "first" })
    local second = p:start("nap", { ms = 0, tag = "second" })
    second:poll()
    second:cancel()
    local t0 = now()
    assert.are.equal("TOOL_CANCELLED", cancelled(second).code)
    assert.is_true(now() - t0 < 250)
    assert.is_true(first:wait(5000))
    assert.are.equal("first", first:result().v)
  end)

  it("while it shares another call's run: the other goes on", function()
    local p = load()
    local leader = p:start("shared", { k = "a" })
    local follower = p:start("shared", { k = "a" })
    follower:cancel()
    assert.are.equal("TOOL_CANCELLED", cancelled(follower).code)
    assert.is_true(leader:wait(5000))
    assert.are.equal("a", leader:result().v)
  end)

  it("that others share: they run on their own", function()
    local p = load()
    local leader = p:start("shared", { k = "b" })
    local follower = p:start("shared", { k = "b" })
    leader:cancel()
    assert.are.equal("TOOL_CANCELLED", cancelled(leader).code)
    assert.is_true(follower:wait(5000))
    local result, meta = follower:result()
    assert.are.equal("b", result.v)
    assert.is_false(meta.single_flight)
  end)

  it("that is done changes nothing", function()
    local p = load()
    local c = p:start("nap", { ms = 0, tag = "done" })
    assert.is_true(c:wait(5000))
    c:cancel()
    assert.are.equal("done", c:result().v)
  end)
end)

describe("closing what calls use", function()
  it("a tool module a program attached: its tools are not found, nothing is freed under them", function()
    local dir = h.project { ["program.luma"] = SOURCE, ["tools.lua"] = TOOLS }
    local p = assert(luma.compile(SOURCE))
    local m = core.load_module { path = dir .. "/tools.lua" }
    p:attach(m)
    assert.are.equal("x", p:call("nap", { ms = 0, tag = "x" }).v)
    m:close()
    local err = h.raised(p.call, p, "nap", { ms = 0 })
    assert.are.same({ "TOOL_NOT_FOUND", "'nap' is not registered in the tool registry: its tool module was closed." },
      { err.code, err.message })
    m:close()
  end)

  it("a program whose scope another program is given: refused, nothing read after free", function()
    local p1, p2 = luma.compile(SOURCE), luma.compile(SOURCE)
    p2:register("nap", function() return { v = "p2" } end)
    local s = p1:scope("A")
    p1:close()
    collectgarbage()
    local ok, err = pcall(p2.invoke, p2, s, "nap", { ms = 0 })
    assert.is_false(ok)
    assert.matches("the scope belongs to another program", tostring(err))
    -- the program's own scope still works
    assert.are.equal("p2", p2:invoke(p2:scope("A"), "nap", { ms = 0 }).v)
  end)

  local orders = {
    { "module", "program", "runtime" }, { "module", "runtime", "program" },
    { "program", "module", "runtime" }, { "program", "runtime", "module" },
    { "runtime", "module", "program" }, { "runtime", "program", "module" },
  }
  for _, order in ipairs(orders) do
    it("in the order " .. table.concat(order, ", ") .. " while calls are in flight on the pool", function()
      local rt = luma.runtime { workers = 4 }
      local dir = project(4)
      local p = assert(luma.load(dir .. "/program.luma", { runtime = rt, config = false }))
      local m = core.load_module { path = dir .. "/tools.lua" }
      p:attach(m)
      local calls = {}
      for i = 1, 6 do calls[i] = p:start("nap", { ms = 50, tag = tostring(i) }) end
      rt:poll()
      local close = { module = function() m:close() end, program = function() p:close() end,
        runtime = function() rt:close() end }
      for _, what in ipairs(order) do close[what]() end
      collectgarbage()
      for i = 1, 6 do
        local c = calls[i]
        -- a call of a closed runtime is cancelled; one that finished keeps its result
        assert.is_true(c:wait(2000))
        local ok, res = pcall(c.result, c)
        if ok then
          assert.are.equal(tostring(i), res.v)
        else
          assert.is_true(res.code == "TOOL_CANCELLED" or res.code == "TOOL_NOT_FOUND", tostring(res))
        end
        c:close()
      end
      collectgarbage()
    end)
  end
end)
