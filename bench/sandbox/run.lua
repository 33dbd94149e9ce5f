-- The sandbox benchmark (issue 4): what a strict state costs against a state
-- with no sandbox, measured in the same run. Run from the repository root by
-- `make bench`:
--   LUMA_BUILD=build lua5.4 bench/sandbox/run.lua
-- Prints the time to make a state and the memory of an idle one, the call
-- rate of a trivial and of a library-heavy handler in each kind of state, and
-- the wall-clock speed-up of two CPU-bound calls run together in two states
-- over the same two calls one at a time, with their targets.

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
common.setup(here)

local luma = require "luma"
local core = require "luma.core"

local slurp, write, shell_quote = common.slurp, common.write, common.shell_quote
local sig3, rate3 = common.sig3, common.rate3

local OVERHEAD_TARGET = 1.10    -- strict call time / none call time, at most
local IDLE_KIB_TARGET = 24       -- an idle strict state's memory, at most (issue 15)
local FULL_SPEED_TARGET = 1.10  -- a CPU-bound handler in a strict state / the same function in plain Lua, at most
local SPEEDUP_TARGET = 1.7      -- one at a time / two at once, at least
local PARALLEL_RUNS = 9
local ISOLATED_EXTRA_US_TARGET = 30  -- a process-isolated call's wall time over a strict call's, at most (issue 16)

local function fail(fmt, ...)
  io.stderr:write("bench/sandbox: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

-- ------------------------------------------------------------ the project

local CONTRACT = [[
schema Out { v: int }
tool echo(n: int) -> Out {}
tool text(n: int) -> Out {}
tool spin(n: int) -> Out { timeout: 600000 }
]]

-- echo: the pipeline and nothing else. text: library calls that a strict
-- state wraps (string.format and gmatch through the read-only library
-- tables and the bounded pattern matcher, table.concat bounded). spin: pure
-- Lua arithmetic, CPU-bound.
local HANDLERS = [[
return {
  echo = function(input) return { v = input.n } end,
  text = function(input)
    local parts = {}
    for i = 1, input.n do parts[i] = string.format("%d", i) end
    local count = 0
    for _ in table.concat(parts, ","):gmatch("%d+") do count = count + 1 end
    return { v = count }
  end,
  spin = function(input)
    local x = 0
    for i = 1, input.n do x = x + i % 7 end
    return { v = x }
  end,
}
]]

local dir = slurp("mktemp -d"):gsub("%s+$", "")
if dir == "" then fail("mktemp -d failed") end
write(dir .. "/program.luma", CONTRACT)
write(dir .. "/tools.lua", HANDLERS)

local POLICIES = {
  none = { sandbox = "none", max_concurrency = 2 },
  strict = { sandbox = "strict", max_concurrency = 2 },
}
local KINDS = { "none", "strict" }

local programs = {}
for _, kind in ipairs(KINDS) do
  programs[kind] = luma.load(dir .. "/program.luma",
    { tool_modules = { dir .. "/tools.lua" }, config = false, tool_module_policy = POLICIES[kind] })
end
-- the same strict module, each of its two states in a process of its own
programs.process = luma.load(dir .. "/program.luma", { tool_modules = { dir .. "/tools.lua" }, config = false,
  tool_module_policy = { sandbox = "strict", max_concurrency = 2, isolation = "process" } })

-- The expected results, checked before anything is timed.
local TEXT_N, SPIN_N = 100, 10000000
local function spin_expected(n)
  local x = 0
  for i = 1, n do x = x + i % 7 end
  return x
end
local SPIN_V = spin_expected(SPIN_N)
for _, kind in ipairs { "none", "strict", "process" } do
  local p = programs[kind]
  if p:call("echo", { n = 5 }).v ~= 5 then fail("%s: echo did not return 5", kind) end
  if p:call("text", { n = TEXT_N }).v ~= TEXT_N then fail("%s: text did not count %d", kind, TEXT_N) end
  if p:call("spin", { n = 1000 }).v ~= spin_expected(1000) then fail("%s: spin is wrong", kind) end
end

-- ------------------------------------------------------------- call rates

local function all_passed(passed, n) if passed ~= n then fail("%d of %d calls gave the expected result", passed, n) end end


local function loop_call(p, name, n_arg, expected)
  local call, input = p.call, { n = n_arg }
  return function(n)
    local passed = 0
    for _ = 1, n do
      if call(p, name, input).v == expected then passed = passed + 1 end
    end
    return passed
  end
end

-- The two kinds measured in turn, PAIRED_RUNS times, each run about
-- RUN_SECONDS / 3: a slow spell of the machine falls on both of a pair. The
-- rates are the medians of each kind's runs, the ratio the median of the
-- pairs' ratios.
local PAIRED_RUNS = 15

local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

local function paired(name, n_arg, expected)
  local loops, n, rates = {}, {}, { none = {}, strict = {}, ratio = {} }
  for _, kind in ipairs(KINDS) do
    loops[kind] = loop_call(programs[kind], name, n_arg, expected)
    n[kind] = common.calibrate(loops[kind], common.RUN_SECONDS / 3)
  end
  for i = 1, PAIRED_RUNS do
    for _, kind in ipairs(KINDS) do
      local rate, passed = common.rate(loops[kind], n[kind])
      all_passed(passed, n[kind])
      rates[kind][i] = rate
    end
    rates.ratio[i] = rates.none[i] / rates.strict[i]
  end
  return { none = median(rates.none), strict = median(rates.strict), ratio = median(rates.ratio) }
end

local rates = {
  echo = paired("echo", 5, 5),
  text = paired("text", TEXT_N, TEXT_N),
}

-- A process-isolated call against the same call of a strict state in this
-- process: wall time (the child's CPU is not this process's), microseconds
-- per call, in PAIRED_RUNS pairs of runs of ~0.1 s; the extra time is the
-- median of the pairs' differences.
local function wall_per_call(p, name, n_arg, expected, n)
  local call, input = p.call, { n = n_arg }
  local t0 = core.monotonic_ms()
  for _ = 1, n do
    if call(p, name, input).v ~= expected then fail("%s did not return %s", name, tostring(expected)) end
  end
  return (core.monotonic_ms() - t0) * 1000 / n
end

local function isolated(name, n_arg, expected)
  local per = wall_per_call(programs.strict, name, n_arg, expected, 200)
  local n = math.max(50, math.floor(100000 / math.max(per, 1)))
  local t = { strict = {}, process = {}, extra = {} }
  for i = 1, PAIRED_RUNS do
    t.strict[i] = wall_per_call(programs.strict, name, n_arg, expected, n)
    t.process[i] = wall_per_call(programs.process, name, n_arg, expected, n)
    t.extra[i] = t.process[i] - t.strict[i]
  end
  return { strict = median(t.strict), process = median(t.process), extra = median(t.extra) }
end

local walls = {
  echo = isolated("echo", 5, 5),
  text = isolated("text", TEXT_N, TEXT_N),
}

-- ------------------------------------------------------- making a state

-- core.load_module is what luma.load does per module: it reads the file,
-- makes the first state (the policy's libraries, the hook, the allocator)
-- and runs the module's code in it.
local manifests = {}
for _, kind in ipairs(KINDS) do
  manifests[kind] = { path = dir .. "/tools.lua", project_root = dir,
    policy = { sandbox = kind, max_concurrency = 1 } }
end

local function loop_make(kind)
  local manifest = manifests[kind]
  return function(n)
    for _ = 1, n do core.load_module(manifest):close() end
    return n
  end
end

local make_rate, idle_memory = {}, {}
for _, kind in ipairs(KINDS) do
  make_rate[kind] = common.measure(loop_make(kind), all_passed)
  local m = core.load_module(manifests[kind])
  collectgarbage()
  idle_memory[kind] = m:stats().idle_memory
  m:close()
end

-- ---------------------------------------------------------- parallel calls

-- Two CPU-bound calls in one call_all: with concurrency 2 they run on two
-- worker threads in the module's two states; with concurrency 1 one after
-- the other. Wall-clock time, the median of PARALLEL_RUNS, the two ways in
-- turn.
local batch = { { "spin", { n = SPIN_N } }, { "spin", { n = SPIN_N } } }

local function wall(p, concurrency)
  local t0 = core.monotonic_ms()
  local outcomes = p:call_all(batch, { concurrency = concurrency })
  local ms = core.monotonic_ms() - t0
  for i = 1, 2 do
    local o = outcomes[i]
    if not (o.ok and o.result.v == SPIN_V) then
      fail("spin %d: %s", i, o.ok and tostring(o.result.v) or tostring(o.error and o.error.message))
    end
  end
  return ms
end

-- The machine's own figure, for comparison: the same loop in two lua5.4
-- processes at once, against one after the other.
local LUA = arg[-1] or "lua5.4"
local SPIN_CMD = shell_quote(LUA) .. " -e " .. shell_quote("local x = 0 for i = 1, " .. SPIN_N .. " do x = x + i % 7 end")

local function wall_processes(together)
  local cmd = together and (SPIN_CMD .. " & " .. SPIN_CMD .. "; wait") or (SPIN_CMD .. "; " .. SPIN_CMD)
  local t0 = core.monotonic_ms()
  if not os.execute(cmd) then fail("%s failed", cmd) end
  return core.monotonic_ms() - t0
end

-- Each round times, in turn, every way one at a time and then two at once;
-- a way's figures are the medians of its rounds, its speed-up the median of
-- its rounds' speed-ups.
local ways = {
  none = function(together) return wall(programs.none, together and 2 or 1) end,
  strict = function(together) return wall(programs.strict, together and 2 or 1) end,
  process = function(together) return wall(programs.process, together and 2 or 1) end,
  processes = wall_processes,
}
local WAYS = { "none", "strict", "process", "processes" }
local rounds = {}
for _, way in ipairs(WAYS) do
  ways[way](true)   -- the module's two states made before anything is timed
  rounds[way] = { one = {}, two = {}, speedup = {} }
end
for i = 1, PARALLEL_RUNS do
  for _, way in ipairs(WAYS) do
    local r = rounds[way]
    r.one[i] = ways[way](false)
    r.two[i] = ways[way](true)
    r.speedup[i] = r.one[i] / r.two[i]
  end
end
local parallel, speedup = {}, {}
for _, way in ipairs(WAYS) do
  local r = rounds[way]
  parallel[way] = { one = median(r.one), two = median(r.two) }
  speedup[way] = median(r.speedup)
end

-- ------------------------------------------------- handlers at full speed

-- The spin handler's loop as a call of a strict state, against the same
-- function run here, in the bench's own lua5.4 state with no hook: CPU time.
-- The strict call runs once with the deadline signal (the default: no hook
-- until the deadline) and once with the count hook (luma.deadline_signal
-- (false)), each round timing the three in turn; the ratios are the medians
-- of the rounds' ratios.
local DEFAULT_SIGNAL = luma.deadline_signal()
local function spin_here(n)
  local x = 0
  for i = 1, n do x = x + i % 7 end
  return x
end
local function cpu(f)
  local t0 = os.clock()
  local v = f()
  return os.clock() - t0, v
end
local speed = { plain = {}, signal = {}, hook = {}, signal_ratio = {}, hook_ratio = {} }
local SPEED_RUNS = 9
for i = 1, SPEED_RUNS do
  local t, v = cpu(function() return spin_here(SPIN_N) end)
  if v ~= SPIN_V then fail("the plain spin is wrong") end
  speed.plain[i] = t
  for _, way in ipairs { "signal", "hook" } do
    if not luma.deadline_signal(way == "signal" and DEFAULT_SIGNAL or false) then fail("cannot choose %s", way) end
    t, v = cpu(function() return programs.strict:call("spin", { n = SPIN_N }).v end)
    if v ~= SPIN_V then fail("the strict spin (%s) is wrong", way) end
    speed[way][i] = t
    speed[way .. "_ratio"][i] = t / speed.plain[i]
  end
end
luma.deadline_signal(DEFAULT_SIGNAL)
local full_speed = {}
for k, v in pairs(speed) do full_speed[k] = median(v) end

os.execute("rm -rf " .. shell_quote(dir))

-- ----------------------------------------------------------------- report

local function row(name, a, b, c)
  io.write(string.format("%-30s%12s%12s%s", name, a, b, c and string.format("%12s", c) or ""):gsub("%s+$", ""), "\n")
end

io.write(string.format("bench/sandbox: %s. Making a state: median of %d runs of ~%.1f s; calls: median of %d " ..
  "pairs of runs of ~%.1f s (CPU time); parallel: median of %d rounds (wall time)\n\n",
  _VERSION, common.RUNS, common.RUN_SECONDS, PAIRED_RUNS, common.RUN_SECONDS / 3, PARALLEL_RUNS))

row("", "none", "strict", "strict/none")
row("make a state (µs)", sig3(1e6 / make_rate.none), sig3(1e6 / make_rate.strict),
  sig3(make_rate.none / make_rate.strict))
row("idle state memory (KiB)", sig3(idle_memory.none / 1024), sig3(idle_memory.strict / 1024),
  sig3(idle_memory.strict / idle_memory.none))
for _, name in ipairs { "echo", "text" } do
  local r = rates[name]
  row(name .. " calls/s", rate3(r.none), rate3(r.strict), sig3(r.ratio))
end
io.write("\n")
row("", "none", "strict", "2 processes")
row("2 spins one at a time (ms)", sig3(parallel.none.one), sig3(parallel.strict.one), sig3(parallel.processes.one))
row("2 spins at once (ms)", sig3(parallel.none.two), sig3(parallel.strict.two), sig3(parallel.processes.two))
row("speed-up", sig3(speedup.none), sig3(speedup.strict), sig3(speedup.processes))
io.write("\n")
row("", "strict", "isolated", "extra")
for _, name in ipairs { "echo", "text" } do
  local w = walls[name]
  row(name .. " call, wall (µs)", sig3(w.strict), sig3(w.process), sig3(w.extra))
end
row("2 spins one at a time (ms)", sig3(parallel.strict.one), sig3(parallel.process.one))
row("2 spins at once (ms)", sig3(parallel.strict.two), sig3(parallel.process.two))
row("speed-up", sig3(speedup.strict), sig3(speedup.process))

io.write("\n")
row("", "plain Lua", "strict", "strict/Lua")
row("spin, deadline signal (ms)", sig3(full_speed.plain * 1000), sig3(full_speed.signal * 1000),
  sig3(full_speed.signal_ratio))
row("spin, count hook (ms)", sig3(full_speed.plain * 1000), sig3(full_speed.hook * 1000), sig3(full_speed.hook_ratio))

local overhead, text_overhead = rates.echo.ratio, rates.text.ratio
io.write("\n")
local function target(what, value, ok, goal)
  io.write(string.format("%-44s %s  (target %s) %s\n", what, sig3(value), goal, ok and "met" or "MISSED"))
end
target("strict call time / none (echo)", overhead, overhead <= OVERHEAD_TARGET, "<= " .. sig3(OVERHEAD_TARGET))
target("strict call time / none (text)", text_overhead, text_overhead <= OVERHEAD_TARGET, "<= " .. sig3(OVERHEAD_TARGET))
target("strict parallel speed-up, 2 states, 2 cores", speedup.strict, speedup.strict >= SPEEDUP_TARGET,
  ">= " .. sig3(SPEEDUP_TARGET))
target("idle strict state memory (KiB)", idle_memory.strict / 1024, idle_memory.strict <= IDLE_KIB_TARGET * 1024,
  "<= " .. IDLE_KIB_TARGET)
target("strict CPU-bound handler / plain Lua", full_speed.signal_ratio, full_speed.signal_ratio <= FULL_SPEED_TARGET,
  "<= " .. sig3(FULL_SPEED_TARGET))
target("process-isolated call, extra wall time (µs, echo)", walls.echo.extra,
  walls.echo.extra <= ISOLATED_EXTRA_US_TARGET, "<= " .. ISOLATED_EXTRA_US_TARGET)
target("process-isolated parallel speed-up, 2 cores", speedup.process, speedup.process >= SPEEDUP_TARGET,
  ">= " .. sig3(SPEEDUP_TARGET))
io.write(string.format("(two lua5.4 processes on this machine, in the same run: %s; strict reaches %s of it)\n",
  sig3(speedup.processes), sig3(speedup.strict / speedup.processes)))
