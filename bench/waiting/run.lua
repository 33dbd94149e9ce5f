-- Waiting without a thread (issue 32): CALLS calls in flight at once from
-- one Lua host, each handler waiting WAIT_MS in signal:sleep, then each
-- making one luma.http request to a server on the loopback that answers
-- after WAIT_MS (slow_server.c, built as LUMA_BUILD/bench_slow_server,
-- started here on a free port and stopped after), on the default pool (one
-- worker thread per CPU), in one process. Printed against the targets: the
-- wall time from the first start to the last result, the process's peak
-- resident memory, and the memory each waiting call holds (the resident
-- memory once all are waiting, over that before the first start, per call).
-- The http row runs RUNS times, each after the same requests from a bare
-- libcurl multi client (curl_multi.c, LUMA_BUILD/bench_curl_multi), the
-- bound of what libcurl and the kernel cost here; it prints the medians and
-- luma's ratios to that bound.
-- Run from the repository root by `make bench` (which builds both):
--   LUMA_BUILD=build lua5.4 bench/waiting/run.lua
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
local root = common.setup(here)

local luma = require "luma"
local core = require "luma.core"

local CALLS = tonumber(os.getenv("LUMA_BENCH_CALLS") or "") or 10000
-- LUMA_BENCH_ROW=sleep or http: that row only; LUMA_BENCH_URL: the http
-- row's server, instead of slow_server.c (one answering after 1 s);
-- LUMA_BENCH_RUNS: runs of the http row (each beside the bare client's)
local ROW = os.getenv("LUMA_BENCH_ROW")
local URL = os.getenv("LUMA_BENCH_URL")
local RUNS = tonumber(os.getenv("LUMA_BENCH_RUNS") or "") or 5
local BUILD = os.getenv("LUMA_BUILD") or "build"
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

local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2, s[1], s[n]
end

local slept = ROW ~= "http" and table.pack(pcall(run, "nap", { ms = WAIT_MS }, { ms = 0 }))

local build = BUILD:sub(1, 1) == "/" and BUILD or root .. "/" .. BUILD
-- the http row: RUNS runs of luma, each after the bare libcurl client's
local fetched, bare, fetch_error = {}, {}, nil
if ROW ~= "sleep" then
  local url, pidfile = URL, nil
  if not url then
    -- a server on the loopback that answers after WAIT_MS (bench/waiting/slow_server.c);
    -- it exits by itself after the given seconds, should this script fail
    local portfile = dir .. "/port"
    pidfile = dir .. "/pid"
    assert(os.execute(("%s %s %d %d & echo $! > %s"):format(common.shell_quote(build .. "/bench_slow_server"),
      common.shell_quote(portfile), WAIT_MS, 120 + RUNS * 120, common.shell_quote(pidfile))))
    local t0 = core.monotonic_ms()
    while not io.open(portfile) and core.monotonic_ms() - t0 < 10000 do os.execute("sleep 0.05") end
    local port = common.slurp("cat " .. common.shell_quote(portfile)):match("%d+")
    if not port then fail("bench_slow_server did not start") end
    url = "http://127.0.0.1:" .. port .. "/"
  end
  for _ = 1, RUNS do
    local out = common.slurp(("%s %s %d"):format(common.shell_quote(build .. "/bench_curl_multi"),
      common.shell_quote(url), CALLS))
    local ok, wall, cpu = out:match("ok=(%d+) wall_ms=([%d.]+) cpu_ms=([%d.]+)")
    if tonumber(ok) ~= CALLS then fetch_error = "bench_curl_multi: " .. out break end
    bare[#bare + 1] = { wall = tonumber(wall), cpu = tonumber(cpu) }
    local r = table.pack(pcall(run, "fetch", { url = url }, { url = url }))
    if not r[1] then fetch_error = tostring(r[2]) break end
    fetched[#fetched + 1] = r
  end
  if pidfile then os.execute("kill " .. common.slurp("cat " .. common.shell_quote(pidfile)):gsub("%s+$", "") .. " 2>/dev/null") end
end
os.execute("rm -rf " .. common.shell_quote(dir))
if slept then report(("in signal:sleep(%d)"):format(WAIT_MS), table.unpack(slept, 1, slept.n)) end
if ROW ~= "sleep" then
  if fetch_error then fail("%s", fetch_error) end
  -- the median run of luma (by wall time) is reported in full, then the medians of every figure
  local walls, cpus, bare_walls, bare_cpus = {}, {}, {}, {}
  for i, r in ipairs(fetched) do
    walls[i], cpus[i] = r[2], r[8]
    if r[7] ~= CALLS then fail("%d of %d calls ended well", r[7], CALLS) end
  end
  for i, b in ipairs(bare) do bare_walls[i], bare_cpus[i] = b.wall, b.cpu end
  local wall, wall_lo, wall_hi = median(walls)
  local cpu, cpu_lo, cpu_hi = median(cpus)
  local bwall, bwall_lo, bwall_hi = median(bare_walls)
  local bcpu, bcpu_lo, bcpu_hi = median(bare_cpus)
  local mid = fetched[1]
  for _, r in ipairs(fetched) do if math.abs(r[2] - wall) < math.abs(mid[2] - wall) then mid = r end end
  -- the memory per waiting call is the first run's: later runs start on the heap the earlier ones grew
  report(("in one luma.http.get answered after %d ms (the run of median wall time, of %d; its memory per waiting call, the first run's)"):format(WAIT_MS, #fetched),
    true, mid[2], mid[3], fetched[1][4], fetched[1][5], mid[6], mid[7], mid[8])
  print(("  medians of %d runs (range), luma beside a bare libcurl multi client (bench_curl_multi) to the same server:"):format(#fetched))
  print(("    %-30s %8.0f ms (%.0f-%.0f)   bare libcurl %8.0f ms (%.0f-%.0f)   ratio %.2f; %.2f of the target"):format(
    "wall time", wall, wall_lo, wall_hi, bwall, bwall_lo, bwall_hi, wall / bwall, wall / TARGET_WALL_MS))
  print(("    %-30s %8.0f µs (%.0f-%.0f)   bare libcurl %8.0f µs (%.0f-%.0f)   ratio %.2f"):format(
    "CPU per call", cpu * 1000 / CALLS, cpu_lo * 1000 / CALLS, cpu_hi * 1000 / CALLS,
    bcpu * 1000 / CALLS, bcpu_lo * 1000 / CALLS, bcpu_hi * 1000 / CALLS, cpu / bcpu))
end
