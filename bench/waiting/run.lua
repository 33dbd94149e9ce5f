-- Waiting without a thread (issue 32): CALLS calls in flight at once from
-- one Lua host, each handler waiting WAIT_MS in signal:sleep, then each
-- making one luma.http request to a server on the loopback that answers
-- after WAIT_MS (slow_server.py, started here on a free port and stopped
-- after), on the default pool (one worker thread per CPU), in one process.
-- Printed against the
-- targets: the wall time from the first start to the last result, the
-- process's peak resident memory, and the memory each waiting call holds
-- (the resident memory once all are waiting, over that before the first
-- start, per call).
-- Run from the repository root by `make bench`:
--   LUMA_BUILD=build lua5.4 bench/waiting/run.lua
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
common.setup(here)

local luma = require "luma"
local core = require "luma.core"

local CALLS = tonumber(os.getenv("LUMA_BENCH_CALLS") or "") or 10000
-- LUMA_BENCH_ROW=sleep or http: that row only; LUMA_BENCH_URL: the http
-- row's server, instead of slow_server.py (one answering after 1 s)
local ROW = os.getenv("LUMA_BENCH_ROW")
local URL = os.getenv("LUMA_BENCH_URL")
local WAIT_MS = 1000
local TARGET_WALL_MS = 2000
local TARGET_RSS_MIB = 512
-- calls of the module running at once (states); those that wait do not count
local CONCURRENCY = 256

local function fail(fmt, ...)
  io.stderr:write("bench/waiting: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

-- VmRSS or VmHWM of this process, in KiB
local function status_kib(field)
  local f = assert(io.open("/proc/self/status"))
  local text = f:read("a")
  f:close()
  return tonumber(text:match(field .. ":%s*(%d+)"))
end

local tmp = assert(os.getenv("TMPDIR") or "/tmp")
local dir = common.slurp("mktemp -d " .. common.shell_quote(tmp .. "/luma-bench-waiting-XXXXXX")):gsub("%s+$", "")
common.write(dir .. "/program.luma", [[
schema Slept { ok: bool }
tool nap(ms: int) -> Slept { timeout: 60000 }
tool fetch(url: string) -> Slept { timeout: 60000 }
]])
common.write(dir .. "/tools.lua", [[
return {
  nap = function(input, signal) return { ok = signal:sleep(input.ms) } end,
  fetch = function(input) return { ok = luma.http.get(input.url).json.ok } end,
}
]])

-- tool: "nap" (signal:sleep(ms)) or "fetch" (one luma.http.get of url)
local function run(tool, input, warm)
  local p = assert(luma.load(dir .. "/program.luma", {
    tool_modules = { dir .. "/tools.lua" },
    tool_module_policy = { sandbox = "strict", max_concurrency = CONCURRENCY, allow_network = true },
  }))
  -- a first call makes the runtime's pool and a state: not what is measured
  assert(p:call(tool, warm).ok)
  collectgarbage()
  local rss0 = status_kib("VmRSS")
  local calls = {}
  local t0, cpu0 = core.monotonic_ms(), os.clock()
  for i = 1, CALLS do calls[i] = p:start(tool, input) end
  local started = core.monotonic_ms() - t0
  -- every call has reached its wait once the first ones are about to end
  calls[1]:wait(WAIT_MS // 2)
  local rss_waiting = status_kib("VmRSS")
  local ok = 0
  for i = 1, CALLS do
    calls[i]:wait()
    local done, res = pcall(calls[i].result, calls[i])
    if done and res.ok then ok = ok + 1 elseif not done then error(("call %d failed: %s"):format(i, tostring(res))) end
  end
  local wall, cpu = core.monotonic_ms() - t0, (os.clock() - cpu0) * 1000
  p:close()
  return wall, started, rss0, rss_waiting, status_kib("VmHWM"), ok, cpu
end

local function report(what, ok, wall, started, rss0, rss_waiting, peak, passed, cpu)
  if not ok then fail("%s", tostring(wall)) end
  if passed ~= CALLS then fail("%d of %d calls ended well", passed, CALLS) end
  local function row(name, value, unit, target)
    print(("%-58s %10.1f %-4s (target <= %g)%s"):format(name, value, unit, target, value <= target and "" or "  MISSED"))
  end
  print(("%d calls in flight, each %s, max_concurrency %d, %d workers (one per CPU)"):format(
    CALLS, what, CONCURRENCY, tonumber((common.slurp("nproc"):gsub("%s+$", "")))))
  row("  wall time, first start to last result", wall, "ms", TARGET_WALL_MS)
  row("  peak resident memory of the process", peak / 1024, "MiB", TARGET_RSS_MIB)
  print(("%-58s %10.1f ms"):format(("  the %d starts"):format(CALLS), started))
  print(("%-58s %10.1f ms (%.0f µs per call)"):format("  CPU time of the process (every thread) meanwhile", cpu,
    cpu * 1000 / CALLS))
  print(("%-58s %10.2f KiB"):format("  memory per waiting call", (rss_waiting - rss0) / CALLS))
end

local slept = ROW ~= "http" and table.pack(pcall(run, "nap", { ms = WAIT_MS }, { ms = 0 }))

local results
if ROW ~= "sleep" and URL then
  results = table.pack(pcall(run, "fetch", { url = URL }, { url = URL }))
elseif ROW ~= "sleep" then
  -- the same with one luma.http request each, to a server on the loopback
  -- that answers after WAIT_MS (bench/waiting/slow_server.py)
  local portfile, pidfile = dir .. "/port", dir .. "/pid"
  assert(os.execute(("python3 %s/slow_server.py %s %g & echo $! > %s"):format(common.shell_quote(here),
    common.shell_quote(portfile), WAIT_MS / 1000, common.shell_quote(pidfile))))
  local t0 = core.monotonic_ms()
  while not io.open(portfile) and core.monotonic_ms() - t0 < 10000 do os.execute("sleep 0.05") end
  local port = common.slurp("cat " .. common.shell_quote(portfile)):match("%d+")
  local url = "http://127.0.0.1:" .. tostring(port) .. "/"
  results = table.pack(pcall(run, "fetch", { url = url }, { url = url }))
  os.execute("kill " .. common.slurp("cat " .. common.shell_quote(pidfile)):gsub("%s+$", "") .. " 2>/dev/null")
end
os.execute("rm -rf " .. common.shell_quote(dir))
if slept then report(("in signal:sleep(%d)"):format(WAIT_MS), table.unpack(slept, 1, slept.n)) end
if results then report(("in one luma.http.get answered after %d ms"):format(WAIT_MS), table.unpack(results, 1, results.n)) end
