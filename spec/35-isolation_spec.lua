-- Process isolation (issue 16, item 3): with "isolation": "process" in
-- tool_module_policy, a module's handlers run in child processes started
-- ahead of time. Values and errors cross unchanged and under the same
-- limits; a child that does not answer by its deadline plus kill_grace_ms is
-- killed and replaced; a child that dies is reported and replaced; the host
-- keeps serving and keeps no zombie and no descriptor. Each hostile
-- mechanism that no hook can interrupt ends within its deadline plus 1 s.
local luma = require "luma"
local core = require "luma.core"
local h = require "spec.helpers"

-- handlers that no hook can stop in time, shared with spec/32
local HOSTILE = h.read(h.root .. "/spec/fixtures/hostile_kinds.lua")

-- How much later than the bound an instrumented run may be.
local SLACK_MS = h.by_instrumentation(0, 1000, 6000)
local DEADLINE_MS = 500
-- How much the host's resident memory may grow while the hostile handlers
-- run (instrumented runs keep freed memory and translations of their own).
local HOST_GROWTH_MB = h.by_instrumentation(64, 256, 512)

local POLICY = { sandbox = "strict", max_memory_mb = 64, max_concurrency = 2, isolation = "process",
  allow_builtins = { "os" } }

local SOURCE = [[
schema Any { v?: any }
tool evil(kind: string) -> Any { timeout: 500 }
tool roomy(kind: string) -> Any { timeout: 20000 }
tool copy(kind: string) -> Any { timeout: 3000 }
tool ping() -> Any {}
]]

local TOOLS = [==[
local kinds = {}

kinds.values = function()
  return { v = { 1, 2.5, "two\0bytes", true, { nested = { deep = { -3 } } }, 2^53, "\u{e9}" } }
end

kinds.error = function()
  error(luma.ToolError { code = "OUT_OF_STOCK", message = "none left", retryable = true,
    details = { sku = "A-1", left = 0, tags = { "x", "y" } } })
end

kinds.lie = function() error(luma.ToolError { code = "TOOL_TIMEOUT", message = "forged" }) end

kinds.huge_message = function()
  error(luma.ToolError { code = "BIG", message = ("m"):rep(30 * 2^20) })
end

kinds.plain = function() error("plain failure", 0) end

kinds.print = function() print("from the handler", 42) return { v = "printed" } end

kinds.loop = function() while true do end end

-- one rehash of colliding integer keys: about 25 s in C, no hook inside
kinds.rehash = function()
  local t = {}
  for i = 1, 2^17 + 1 do t[i * (2^18 - 1)] = true end
  return { v = "done" }
end

-- the same through the parser's constant table
kinds.parser = function()
  local parts = { "return {" }
  for i = 1, 2^17 + 1 do parts[#parts + 1] = "[" .. (i * (2^18 - 1)) .. "]=true," end
  parts[#parts + 1] = "}"
  local f = load(table.concat(parts))
  f()
  return { v = "done" }
end

-- a chain of 50,000 ephemerons linked in shuffled order: a quadratic
-- collection cycle
kinds.ephemeron = function()
  local n = 50000
  local weak = setmetatable({}, { __mode = "k" })
  local keys = {}
  for i = 1, n do keys[i] = {} end
  local seed = 12345
  for i = n, 2, -1 do
    seed = (seed * 1103515245 + 12345) % 2147483648
    local j = seed % i + 1
    keys[i], keys[j] = keys[j], keys[i]
  end
  for i = 1, n - 1 do weak[keys[i]] = keys[i + 1] end
  local first = keys[1]
  keys = nil
  while true do local _ = { first } end
end

-- comparisons of strings of many NUL-separated chunks, in a sort
kinds.nul_sort = function()
  local s = ("a\0"):rep(8 << 20)
  local list = {}
  for i = 1, 1000 do list[i] = s end
  table.sort(list)
  return { v = "sorted" }
end

]==] .. HOSTILE .. [==[
kinds.gigabyte = function()
  local s = ("x"):rep(2^30)
  return { v = #s }
end

-- runs 300 ms of CPU
kinds.short = function()
  local t = os.clock()
  while os.clock() - t < 0.3 do end
  return { v = "done" }
end

-- waits to be killed from outside
kinds.wait = function()
  local t = os.clock()
  while os.clock() - t < 15 do end
  return { v = "not killed" }
end

-- 900,000 values returned 2 ms before the deadline: copying them out of
-- the state takes longer than the 100 ms a copy may run past it
kinds.late_copy = function(signal)
  local t = {}
  for i = 1, 900 do
    local row = {}
    for j = 1, 1000 do row[j] = j end
    t[i] = row
  end
  if signal.remaining_ms > 2 then signal:sleep(signal.remaining_ms - 2) end
  return { v = t }
end

-- replies that spec/c/attack.c, preloaded, forges once armed from inside
-- the child (require "luma_attack.forge_empty" / "luma_attack.forge_cut")
kinds.forge_empty = function() return { v = require "luma_attack.forge_empty" } end
kinds.forge_cut = function() return { v = require "luma_attack.forge_cut" } end

local function any(input, signal) return kinds[input.kind](signal) end
return { evil = any, roomy = any, copy = any, ping = function() return { v = "pong" } end }
]==]

local function config(policy)
  return core.json_encode({ tool_modules = { "tools.lua" }, tool_module_policy = policy })
end

local function project(policy, extra)
  local files = { ["program.luma"] = SOURCE, ["tools.lua"] = TOOLS, ["luma.config.json"] = config(policy) }
  for k, v in pairs(extra or {}) do files[k] = v end
  return h.project(files)
end

local function my_pid()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("l"):match("^(%d+)")
  f:close()
  return pid
end

-- The children of this process: { pid = state letter }
local function children()
  -- (ps with AddressSanitizer preloaded hangs at its start)
  local p = assert(io.popen("env -u LD_PRELOAD ps -o pid=,stat=,comm= --ppid " .. my_pid()))
  local kids = {}
  for line in p:lines() do
    local pid, stat, comm = line:match("^%s*(%d+)%s+(%S+)%s+(%S+)")
    -- the shell and ps of this very look are children too
    if pid and comm ~= "ps" and comm ~= "sh" and comm ~= "env" then kids[pid] = stat:sub(1, 1) end
  end
  p:close()
  return kids
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

local function descriptors()
  local p = assert(io.popen("ls /proc/" .. my_pid() .. "/fd"))
  local n = 0
  for _ in p:lines() do n = n + 1 end
  p:close()
  return n
end

-- This process's resident memory, in MiB.
local function rss_mb()
  local f = assert(io.open("/proc/self/status"))
  local kb = f:read("a"):match("VmRSS:%s+(%d+)")
  f:close()
  return tonumber(kb) / 1024
end

local function timed(p, tool, kind)
  local t0 = core.monotonic_ms()
  local ok, res = pcall(p.call, p, tool, { kind = kind })
  return ok, res, core.monotonic_ms() - t0
end

describe("tool_module_policy.isolation", function()
  local cases = {
    { { sandbox = "strict", isolation = "fork" }, 'tool_module_policy.isolation must be "thread" or "process"' },
    { { sandbox = "none", isolation = "process" }, 'tool_module_policy.isolation needs "sandbox": "strict"' },
    { { sandbox = "strict", kill_grace_ms = 50 }, 'tool_module_policy.kill_grace_ms needs "isolation": "process"' },
    { { sandbox = "strict", isolation = "process", kill_grace_ms = -1 }, "tool_module_policy.kill_grace_ms must be at least 0" },
    { { sandbox = "strict", isolation = "process", kill_grace_ms = 20000 }, "tool_module_policy.kill_grace_ms must be at most 10000" },
  }
  for _, c in ipairs(cases) do
    it("refuses " .. core.json_encode(c[1]) .. " naming the key", function()
      local dir = project(c[1])
      local _, err = h.load(dir)
      os.execute("rm -rf " .. h.quote(dir))
      assert.are.equal("CONFIG_INVALID", err.code)
      assert.matches(c[2], err.message, 1, true)
    end)
  end

  it("reports a module that cannot load in its process as it does in-process", function()
    local dir = project(POLICY, { ["tools.lua"] = "error('broken at load')" })
    local _, err = h.load(dir)
    os.execute("rm -rf " .. h.quote(dir))
    assert.are.equal("MODULE_INVALID", err.code)
    assert.matches("cannot load tool module '.-tools.lua': .-broken at load", err.message)
  end)
end)

describe("a process-isolated module", function()
  local dir, p, events
  local before_fds, before_kids, before_rss

  setup(function()
    before_fds = descriptors()
    before_kids = count(children())
    before_rss = rss_mb()
    dir = project(POLICY)
    p = assert(h.load(dir))
    events = {}
    p:configure { on_event = function(e) events[#events + 1] = e end }
  end)

  teardown(function()
    if p then p:close() end
    p = nil
    collectgarbage()
    collectgarbage()
    if dir then os.execute("rm -rf " .. h.quote(dir)) end
  end)

  it("has its processes started ahead of time, max_concurrency of them", function()
    local kids = children()
    assert.are.equal(before_kids + 2, count(kids))
  end)

  it("confines its processes: a seccomp filter, and an address-space limit outside sanitizers", function()
    for pid in pairs(children()) do
      local status = assert(io.open("/proc/" .. pid .. "/status")):read("a")
      assert.matches("\nSeccomp:%s+2\n", status)
      local limits = assert(io.open("/proc/" .. pid .. "/limits")):read("a")
      assert.matches("Max core file size%s+0%s+0", limits)
      if h.by_instrumentation(true, false, false) then
        local soft = limits:match("Max address space%s+(%d+)")
        assert.is_truthy(soft, limits)
        -- its address space at the fork (the host's) plus 64 MiB and room for copies
        assert.is_true(tonumber(soft) < 64 * 2^30, soft)
      end
    end
  end)

  it("returns values unchanged: integers, floats, NUL bytes, nesting", function()
    local r = p:call("evil", { kind = "values" })
    assert.are.same({ 1, 2.5, "two\0bytes", true, { nested = { deep = { -3 } } }, 2^53, "\u{e9}" }, r.v)
    assert.are.equal("integer", math.type(r.v[1]))
    assert.are.equal("float", math.type(r.v[2]))
  end)

  it("returns a ToolError as the same error object", function()
    local ok, err = timed(p, "evil", "error")
    assert.is_false(ok)
    assert.are.same({ "OUT_OF_STOCK", "none left", true, { sku = "A-1", left = 0, tags = { "x", "y" } } },
      { err.code, err.message, err.retryable, err.details })
  end)

  it("applies the in-process rules to errors: reserved codes, capped messages, plain errors", function()
    local _, err = timed(p, "evil", "lie")
    assert.are.equal("TOOL_FAILED", err.code)
    assert.are.equal("TOOL_TIMEOUT", err.details.attempted_code)
    _, err = timed(p, "roomy", "huge_message")
    assert.are.equal("BIG", err.code)
    assert.matches("^m+%.%.%. %(cut: 31457280 bytes%)$", err.message)
    _, err = timed(p, "evil", "plain")
    assert.are.same({ "TOOL_FAILED", "plain failure" }, { err.code, err.message })
  end)

  it("says so in its telemetry events", function()
    events = {}
    p:call("ping", {})
    assert.are.equal("process", events[1].isolation)
    assert.are.equal(core.confinement().landlock_abi, events[1].landlock_abi)
  end)

  -- each mechanism no hook can interrupt, with the code it must end with
  local hostile = {
    { "loop", "TOOL_TIMEOUT", "an infinite loop" },
    { "rehash", "TOOL_TIMEOUT", "a rehash of 2^17 colliding integer keys" },
    { "parser", "TOOL_TIMEOUT", "the parser's constant table of colliding keys" },
    { "ephemeron", "TOOL_TIMEOUT", "a chain of 50,000 ephemerons" },
    { "nul_sort", "TOOL_TIMEOUT", "a sort of strings of NUL-separated chunks" },
    { "coroutine", "TOOL_TIMEOUT", "slow C calls in a coroutine made after fast code" },
    { "closers", "TOOL_TIMEOUT", "300 pending <close> handlers of slow C work" },
    { "gigabyte", "TOOL_MEMORY_LIMIT", "a 1 GiB allocation" },
  }
  for _, c in ipairs(hostile) do
    it("ends " .. c[3] .. " with " .. c[2] .. " within its deadline plus 1 s", function()
      local ok, err, ms = timed(p, "evil", c[1])
      assert.is_false(ok)
      assert.are.equal(c[2], err.code, tostring(err))
      assert.is_true(ms < DEADLINE_MS + 1000 + SLACK_MS, ms .. " ms")
      assert.are.equal("pong", p:call("ping", {}).v)
      -- the work and the memory were the child's
      assert.is_true(rss_mb() - before_rss < HOST_GROWTH_MB, (rss_mb() - before_rss) .. " MiB more in the host")
    end)
  end

  it("survives 30,000 nested coroutine.close (a C stack overflow in Lua 5.4.4)", function()
    local ok, res, ms = timed(p, "roomy", "deep_close")
    local text = ok and res.v or tostring(res)
    assert.matches("nested more than 100 deep", text)
    assert.is_true(ms < 20000 + 1000 + SLACK_MS, ms .. " ms")
    assert.are.equal("pong", p:call("ping", {}).v)
  end)

  it("reports a process that dies on a signal, and replaces it", function()
    local call = p:start("roomy", { kind = "wait" })
    assert.is_false(call:wait(200))
    -- the process running the call is the one that uses CPU
    local busy
    for pid in pairs(children()) do
      local f = io.open("/proc/" .. pid .. "/stat")
      if f then
        local fields = {}
        for w in f:read("l"):gsub("^.-%) ", ""):gmatch("%S+") do fields[#fields + 1] = w end
        f:close()
        local cpu = tonumber(fields[12]) + tonumber(fields[13])
        if not busy or cpu > busy.cpu then busy = { pid = pid, cpu = cpu } end
      end
    end
    assert.is_truthy(busy)
    os.execute("kill -SEGV " .. busy.pid)
    assert.is_true(call:wait(5000))
    local err = h.raised(call.result, call)
    assert.are.same({ "TOOL_FAILED", "handler process died: signal 11" }, { err.code, err.message })
    call:close()
    assert.are.equal("pong", p:call("ping", {}).v)
  end)

  it("kills the process of a cancelled call: TOOL_CANCELLED at once", function()
    local call = p:start("roomy", { kind = "loop" })
    assert.is_false(call:wait(100))
    local t0 = core.monotonic_ms()
    call:cancel()
    assert.is_true(call:wait(3000))
    assert.is_true(core.monotonic_ms() - t0 < 500 + SLACK_MS)
    assert.are.equal("TOOL_CANCELLED", h.raised(call.result, call).code)
    call:close()
    assert.are.equal("pong", p:call("ping", {}).v)
  end)

  it("runs two calls at once in its two processes", function()
    local a, b = p:start("evil", { kind = "values" }), p:start("evil", { kind = "values" })
    assert.is_true(a:wait(5000) and b:wait(5000))
    assert.are.equal(2.5, a:result().v[2])
    assert.are.equal(2.5, b:result().v[2])
    a:close()
    b:close()
  end)

  it("leaves no zombie and no descriptor behind once closed", function()
    for pid, state in pairs(children()) do assert.are_not.equal("Z", state, "process " .. pid) end
    p:close()
    p = nil
    collectgarbage()
    collectgarbage()
    local kids = children()
    assert.are.equal(before_kids, count(kids), "children: " .. core.json_encode(kids))
    -- no more than before: other specs of this process may close theirs meanwhile
    local fds = descriptors()
    assert.is_true(fds <= before_fds, fds .. " descriptors, " .. before_fds .. " before:\n" ..
      io.popen("ls -l /proc/" .. my_pid() .. "/fd"):read("a"))
  end)
end)

describe("program:close of a process-isolated module", function()
  local dir, before

  -- The collector is stopped meanwhile: only close can end the processes.
  -- (luma.load's handle on the module is garbage at once, and collecting it
  -- ended them before close did; it also keeps a collection from ending
  -- another spec's processes while these are counted.)
  before_each(function()
    collectgarbage("stop")
    dir = project(POLICY)
    before = count(children())
  end)

  after_each(function()
    collectgarbage("restart")
    os.execute("rm -rf " .. h.quote(dir))
  end)

  local function kids_are(n)
    local kids = children()
    assert.are.equal(before + n, count(kids), "children: " .. core.json_encode(kids))
  end

  it("ends its processes before it returns: killed and reaped, no zombie", function()
    local p = assert(h.load(dir))
    finally(function() p:close() end)
    assert.are.equal("pong", p:call("ping", {}).v)
    kids_are(2)
    p:close()
    kids_are(0)
  end)

  it("may be done twice, and the program collected after, with nothing ended twice", function()
    local p, q = assert(h.load(dir)), nil
    -- (on a failure midway, the next tests' counts must still hold)
    finally(function()
      if p then p:close() end
      if q then q:close() end
    end)
    assert.are.equal("pong", p:call("ping", {}).v)
    p:close()
    p:close()
    kids_are(0)
    p = nil
    collectgarbage()
    collectgarbage()
    kids_are(0)
    -- and the next program's processes are not harmed
    q = assert(h.load(dir))
    assert.are.equal("pong", q:call("ping", {}).v)
    q:close()
    kids_are(0)
  end)

  it("lets a call in flight finish, and ends its process when the call is done", function()
    local p = assert(h.load(dir))
    finally(function() p:close() end)
    local call = p:start("roomy", { kind = "short" })
    assert.is_false(call:wait(100))
    p:close()
    -- the idle process is gone, the busy one runs its call to the end
    kids_are(1)
    assert.is_true(call:wait(5000))
    assert.are.equal("done", call:result().v)
    kids_are(0)
    call:close()
    assert.matches("the program is closed", tostring(h.raised(p.call, p, "ping", {})))
  end)

  it("keeps the processes of a module that another open program attached", function()
    local policy = { sandbox = "strict", max_memory_mb = 64, max_concurrency = 2, isolation = "process",
      allow_builtins = { "os" } }
    local m = core.load_module { path = dir .. "/tools.lua", project_root = dir, policy = policy }
    local p1, p2, p3 = luma.compile(SOURCE), luma.compile(SOURCE), nil
    finally(function()
      for _, p in ipairs { p1, p2, p3 } do if p then p:close() end end
      if m then m:close() end
    end)
    p1:attach(m)
    p2:attach(m)
    kids_are(2)
    p1:close()
    kids_are(2)
    assert.are.equal("pong", p2:call("ping", {}).v)
    p2:close()
    kids_are(0)
    -- a program that attaches it later gets new processes
    p3 = luma.compile(SOURCE)
    p3:attach(m)
    assert.are.equal("pong", p3:call("ping", {}).v)
    kids_are(1)
    p3:close()
    kids_are(0)
    m:close()
    m:close()
    m, p1, p2, p3 = nil, nil, nil, nil
    collectgarbage()
    collectgarbage()
    kids_are(0)
  end)
end)

describe("tool_module_policy.kill_grace_ms", function()
  it("is how long past its deadline a handler's process lives before it is killed", function()
    local took = {}
    for _, grace in ipairs { 0, 800 } do
      local policy = { sandbox = "strict", max_memory_mb = 64, isolation = "process", kill_grace_ms = grace }
      local dir = project(policy)
      local p = assert(h.load(dir))
      local ok, err, ms = timed(p, "evil", "rehash")
      p:close()
      os.execute("rm -rf " .. h.quote(dir))
      assert.is_false(ok)
      assert.are.equal("TOOL_TIMEOUT", err.code)
      took[grace] = ms
    end
    assert.is_true(took[0] >= DEADLINE_MS and took[0] < DEADLINE_MS + 400 + SLACK_MS, took[0] .. " ms")
    -- under valgrind the child is slow enough to be still in Lua code at its
    -- deadline, where its own deadline stops it before any kill: the grace
    -- shows only where the rehash really holds the child past it
    if not os.getenv("LUMA_VALGRIND") then
      assert.is_true(took[800] >= DEADLINE_MS + 800, took[800] .. " ms")
    end
  end)
end)

-- Issue 24, point 9: what the host answers is what happened in the child.
describe("the answers of a process-isolated module", function()
  local policy = { sandbox = "strict", max_memory_mb = 64, max_concurrency = 1, isolation = "process",
    kill_grace_ms = 2000 }

  -- A program of the module, and the pid of its one process.
  local function one_process()
    local before = children()
    local dir = project(policy)
    local p = assert(h.load(dir))
    for pid in pairs(children()) do
      if not before[pid] then return p, dir, pid end
    end
    error("no process was started")
  end

  local function done(p, dir)
    p:close()
    os.execute("rm -rf " .. h.quote(dir))
  end

  it("are TOOL_TIMEOUT for a result that comes 200 ms after the deadline, within kill_grace_ms", function()
    local p, dir, pid = one_process()
    finally(function() done(p, dir) end)
    -- stopped, the process reads the request only once continued, 700 ms
    -- after the call starts, and answers at once: 200 ms after its deadline
    assert(os.execute("kill -STOP " .. pid))
    assert(os.execute("env -u LD_PRELOAD sh -c 'sleep 0.7; kill -CONT " .. pid .. "' &"))
    local ok, err, ms = timed(p, "evil", "values")
    assert.is_false(ok, "the late result was taken")
    assert.are.equal("TOOL_TIMEOUT", err.code)
    assert.is_true(ms < DEADLINE_MS + 2000, ms .. " ms: the process was killed instead")
    assert.are.equal("pong", p:call("ping", {}).v)
  end)

  it("are TOOL_TIMEOUT when the process reports its own: its copy of the result passed the deadline", function()
    local p, dir = one_process()
    finally(function() done(p, dir) end)
    local ok, err = timed(p, "copy", "late_copy")
    assert.is_false(ok)
    assert.are.equal("TOOL_TIMEOUT", err.code, err.message)
    assert.are.equal("Tool 'copy' timed out after 3000 ms.", err.message)
  end)

  for _, signal in ipairs { "KILL", "TERM" } do
    it("come from a new process when the idle one ended (SIG" .. signal .. " from outside)", function()
      local p, dir, pid = one_process()
      finally(function() done(p, dir) end)
      assert.are.equal("pong", p:call("ping", {}).v)
      assert(os.execute("kill -" .. signal .. " " .. pid))
      -- until it has ended
      for _ = 1, 200 do
        local kids = children()
        if kids[pid] ~= "S" and kids[pid] ~= "R" then break end
        os.execute("sleep 0.01")
      end
      assert.are.equal("pong", p:call("ping", {}).v)
      local kids = children()
      assert.is_nil(kids[pid], "the ended process was not reaped")
      assert.are.equal(1, count(kids))
    end)
  end

  it("say a reply of 0 bytes, or one cut at 14 bytes, is truncated (a forged reply, through luma-lua)", function()
    local forge = h.root .. "/" .. (os.getenv("LUMA_BUILD") or "build") .. "/attack.so"
    assert(io.open(forge), forge .. " is not built: make " .. forge:sub(#h.root + 2))
    local preload = ((os.getenv("LD_PRELOAD") or "") .. " " .. forge):gsub("^ ", "")
    local dir = project(policy, {
      ["empty.luma"] = SOURCE .. 'r = tool evil({ kind: "forge_empty" })\n',
      ["cut.luma"] = SOURCE .. 'r = tool evil({ kind: "forge_cut" })\n',
      ["luma_attack/forge_empty.lua"] = "", ["luma_attack/forge_cut.lua"] = "",
    })
    finally(function() os.execute("rm -rf " .. h.quote(dir)) end)
    local empty = h.run({ "empty.luma", "--config", "luma.config.json" }, { cwd = dir, env = { LD_PRELOAD = preload } })
    assert.are.equal(1, empty.status, empty.stderr)
    assert.matches("[TOOL_FAILED] The handler process sent a truncated reply: 0 bytes, where a reply has at least 2.",
      empty.stderr, 1, true)
    local cut = h.run({ "cut.luma", "--config", "luma.config.json" }, { cwd = dir, env = { LD_PRELOAD = preload } })
    assert.are.equal(1, cut.status, cut.stderr)
    -- (under valgrind the child's own exit runs valgrind's leak check, whose
    -- findings in a process that ends mid-call change its status to 99)
    assert.matches("%[TOOL_FAILED%] The handler process sent a truncated reply: 14 of its %d+ bytes; " ..
      "handler process died: exit status " .. h.by_instrumentation("0", "0", "%d+") .. "%.", cut.stderr)
  end)
end)

describe("a process-isolated module through luma-lua", function()
  it("stops a colliding rehash at the deadline and exits cleanly", function()
    local dir = project(POLICY, { ["call.luma"] = SOURCE .. 'r = tool evil({ kind: "rehash" })\n' })
    local t0 = core.monotonic_ms()
    local r = h.run({ "call.luma", "--config", "luma.config.json" }, { cwd = dir })
    local ms = core.monotonic_ms() - t0
    os.execute("rm -rf " .. h.quote(dir))
    assert.are.equal(1, r.status, r.stderr)
    assert.matches("Error: %[TOOL_TIMEOUT%] Tool 'evil' timed out after 500 ms", r.stderr)
    assert.is_true(ms < DEADLINE_MS + 1000 + 1000 + SLACK_MS, ms .. " ms")
  end)

  -- the handler process's stderr is a pipe the host relays to its own,
  -- each line marked with the module (in-process, print writes the host's
  -- stderr itself)
  it("relays a handler's print to the host's stderr, marked with the module", function()
    for _, isolation in ipairs { "process", "thread" } do
      local policy = {}
      for k, v in pairs(POLICY) do policy[k] = v end
      policy.isolation = isolation
      local dir = project(policy, { ["call.luma"] = SOURCE .. 'r = tool copy({ kind: "print" })\n' })
      local r = h.run({ "call.luma", "--config", "luma.config.json" }, { cwd = dir })
      os.execute("rm -rf " .. h.quote(dir))
      assert.are.equal(0, r.status, r.stderr)
      assert.matches('"printed"', r.stdout)
      local want = (isolation == "process" and "[tools.lua] " or "") .. "from the handler\t42\n"
      assert.is_truthy(r.stderr:find(want, 1, true), isolation .. ": " .. r.stderr)
    end
  end)
end)

describe("the thread mode", function()
  it("stays the default: no process is started and events say nothing of isolation", function()
    local policy = { sandbox = "strict", max_memory_mb = 64 }
    local dir = project(policy)
    local kids = count(children())
    local p = assert(h.load(dir))
    local events = {}
    p:configure { on_event = function(e) events[#events + 1] = e end }
    assert.are.equal("pong", p:call("ping", {}).v)
    assert.are.equal(kids, count(children()))
    assert.is_nil(events[1].isolation)
    p:close()
    os.execute("rm -rf " .. h.quote(dir))
  end)
end)

describe("a process-isolated module in an embedding host (LuaJIT through libluma's FFI binding)", function()
  it("kills the colliding rehash at the deadline and goes on serving", function()
    local libluma = h.root .. "/" .. (os.getenv("LUMA_BUILD") or "build") .. "/libluma.so"
    local dir = project(POLICY, {
      ["host.lua"] = "package.path = " .. string.format("%q", h.root .. "/lua/?.lua;") .. " .. package.path\n" ..
        "local luma = require('luma.ffi').open(" .. string.format("%q", libluma) .. ")\n" .. [[
        local rt = luma.runtime { workers = 2 }
        local p = rt:load("program.luma")
        for _, kind in ipairs { "values", "rehash", "error", "values" } do
          local f = p:start("evil", { kind = kind })
          assert(f:wait(10000))
          local ok, r = pcall(f.result, f)
          print(kind, ok and r.v[2] or r.code)
        end
        rt:close()
      ]],
    })
    local status, out, err = h.sh("cd " .. h.quote(dir) .. " && luajit host.lua")
    os.execute("rm -rf " .. h.quote(dir))
    assert.are.equal(0, status, out .. err)
    assert.are.equal("values\t2.5\nrehash\tTOOL_TIMEOUT\nerror\tOUT_OF_STOCK\nvalues\t2.5\n", out)
  end)
end)
