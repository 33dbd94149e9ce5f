-- A streamed ask's own costs, against the specs' mock provider on loopback
-- (Chat Completions chunks, 4 characters of text each):
--   1. latency: the mock writes each delta 1 ms apart with its
--      CLOCK_MONOTONIC time (ns) as the delta's text, taken just before the
--      write; the host's on_event reads the same clock. The difference is
--      the time from the delta's last byte leaving the server to the host's
--      callback: the runtime (transport thread, parser, event queue, the
--      ask's loop handing the event to Lua) plus the loopback write itself,
--      so an upper bound. Median and p99; target under 20 µs.
--   2. cost per delta: a stream of 1,000 or 10,000 deltas, recorded from the
--      mock, then replayed (no network, no server: the recorded stream goes
--      through the stream parser in pieces of 1 to 64 bytes, the events to
--      the host's on_event): the whole ask's CPU time (the process's: a
--      replay runs on the caller's thread), the best of RUNS asks
--      (the one a job sharing the machine interrupted least), less that of
--      an ask of 10 deltas in the same run (the fixed cost), per delta.
--      Linear work: the same per delta.
--   3. memory: a child process asks for 10,000 and 100,000 deltas; the
--      growth of its peak RSS (VmHWM) over a warm-up ask, against the
--      answer text it holds. Bounded: the growth from 10k to 100k deltas is
--      a few copies of the answer text added, far from the raw stream.
-- Run from the repository root by `make bench`:
--   LUMA_BUILD=build lua5.4 bench/agent/stream.lua
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
common.setup(here)

local luma = require "luma"
local core = require "luma.core"

local LATENCY_DELTAS = 1000
local LATENCY_TARGET_US = 20
local RUNS = 9
local FLAT_TARGET = 1.3      -- per-delta cost at 10k over at 1k
local MEMORY_TARGET = 8      -- RSS growth 100k -> 300k over the answer text it adds
local MEMORY_SIZES = { 10000, 100000, 300000 }
local PREFIX = '{"ttt":"'    -- 8 characters: the deltas after it are whole pieces

local SOURCE = [[
schema Text { ttt: string }
model M {
  provider: "openai"
  name: "gpt-bench"
  base_url: "%s/v1"
  api_key_env: "BENCH_KEY"
}
agent A { model: M }
]]

-- raised, so that the mock is stopped before the bench exits with 1
local function fail(fmt, ...)
  error(string.format(fmt, ...), 0)
end

local function program(url, opts)
  local p = luma.compile(SOURCE:format(url))
  opts = opts or {}
  opts.lookup = function(name) if name == "BENCH_KEY" then return "sk-bench" end end
  p:configure(opts)
  return p
end

-- A mock step: a text answer of n deltas of `piece` (4 characters), streamed
-- with the stream options given.
local function step(n, piece, stream)
  local text = PREFIX .. piece:rep(n) .. '"}'
  return { json = { choices = { { index = 0, finish_reason = "stop", message = { role = "assistant", content = text } } },
                    usage = { prompt_tokens = 10, completion_tokens = n } }, stream = stream }
end

local function hwm_kib()
  local f = assert(io.open("/proc/self/status"))
  local s = f:read("a")
  f:close()
  return tonumber(s:match("VmHWM:%s*(%d+)"))
end

-- The child of part 3: a warm-up ask, then one of n deltas; prints the
-- growth of the peak RSS in KiB and the answer's length.
if arg[1] == "--memory" then
  local p = program(arg[2])
  local agent = p:agent("A")
  local function ask()
    local count = 0
    local answer = agent:ask("Stream.", "Text", { on_event = function(ev)
      if ev.type == "text_delta" then count = count + 1 end
    end })
    return answer, count
  end
  ask()
  collectgarbage()
  local before = hwm_kib()
  local answer, count = ask()
  print(hwm_kib() - before, #answer.ttt, count)
  os.exit(0)
end

local mock = require "spec.support.mock_provider"

local function percentile(sorted, q)
  return sorted[math.max(1, math.ceil(#sorted * q))]
end

local server = mock.start()
local temps = {}   -- removed at the end, whatever happened
local ok, err = pcall(function()
  local p = program(server.url)
  local agent = p:agent("A")

  -- 1: latency
  server:reset()
  server:script { step(LATENCY_DELTAS, "@@@@", { delay_ms = 1, stamp = true }) }
  local lat = {}
  agent:ask("Stream.", "Text", { on_event = function(ev)
    if ev.type == "text_delta" then
      local now = core.monotonic_ms()
      local stamp = tonumber(ev.text:match("^(%d+)$"))
      if stamp then lat[#lat + 1] = (now - stamp / 1e6) * 1000 end
    end
  end })
  if #lat ~= LATENCY_DELTAS then fail("%d of the %d stamped deltas came", #lat, LATENCY_DELTAS) end
  table.sort(lat)
  local med, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
  -- the baseline, in the same run: a plain reader blocked in recv on the same stream
  server:reset()
  server:script { step(LATENCY_DELTAS, "@@@@", { delay_ms = 1, stamp = true }) }
  local out, done = common.slurp(("python3 %s/stream_reader.py %s"):format(here, server.url))
  local base = {}
  for ns in out:gmatch("%d+") do base[#base + 1] = tonumber(ns) / 1000 end
  if not done or #base ~= LATENCY_DELTAS then fail("the baseline reader read %d of %d deltas: %s", #base, LATENCY_DELTAS, out) end
  table.sort(base)
  local bmed, bp99 = percentile(base, 0.5), percentile(base, 0.99)
  print(("stream latency, a delta's last byte written to the host's on_event (%d deltas, 1 ms apart, loopback):")
    :format(LATENCY_DELTAS))
  print(("  luma:     median %6.1f µs, p99 %7.1f µs"):format(med, p99))
  print(("  baseline: median %6.1f µs, p99 %7.1f µs (a Python reader blocked in recv on the same stream)"):format(bmed, bp99))
  print(("  luma's own, over the baseline: median %.1f µs, p99 %.1f µs (target: under %d µs)")
    :format(med - bmed, p99 - bp99, LATENCY_TARGET_US))

  -- 2: cost per delta, replayed from a recording of the stream
  local per, total = {}, {}
  for _, n in ipairs { 10, 1000, 10000 } do
    local rec = os.tmpname()
    temps[#temps + 1] = rec
    server:reset()
    server:script { step(n, "abcd", { batch = true }) }
    program(server.url, { record = rec }):agent("A"):ask("Stream.", "Text", { on_event = function() end })
    local times = {}
    for r = 1, RUNS do
      local q = program(server.url, { replay = rec })
      local count = 0
      local t0 = os.clock()
      local answer = q:agent("A"):ask("Stream.", "Text", { on_event = function(ev)
        if ev.type == "text_delta" then count = count + 1 end
      end })
      times[r] = (os.clock() - t0) * 1e6 / n
      q:close()
      if #answer.ttt ~= 4 * n then fail("the answer of %d deltas has %d characters", n, #answer.ttt) end
      if count < n then fail("%d of %d deltas came", count, n) end
    end
    table.sort(times)
    total[n] = times[1] * n
    if n == 10 then
      print(("a replayed ask of 10 deltas (the fixed cost): best %.0f µs"):format(total[n]))
    else
      -- over the ask of 10 deltas in the same run: what each delta adds
      per[n] = (total[n] - total[10]) / (n - 10)
      print(("cost per delta, a replayed stream of %6d deltas: %.2f µs over the fixed cost (%.2f µs with it; median %.2f µs)")
        :format(n, per[n], times[1], common.median(times)))
    end
  end
  print(("  per delta at 10,000 / at 1,000 = %.2f (flat: about 1; target <= %.1f)"):format(per[10000] / per[1000], FLAT_TARGET))
  p:close()

  -- 3: memory, each size in a child process of its own
  local lua = os.getenv("LUA") or "lua5.4"
  local grown = {}
  for _, n in ipairs(MEMORY_SIZES) do
    server:reset()
    server:script { step(10, "abcd", { batch = true }), step(n, "abcd", { batch = true }) }
    local out, done = common.slurp(("%s %s/stream.lua --memory %s %d"):format(lua, here, server.url, n))
    local kib, len, count = out:match("^(%d+)%s+(%d+)%s+(%d+)")
    if not done or not kib then fail("the memory child for %d deltas failed: %s", n, out) end
    grown[n] = { kib = tonumber(kib), len = tonumber(len), count = tonumber(count) }
    print(("memory, a stream of %6d deltas: peak RSS +%5d KiB over a warm-up ask; answer text %4d KiB")
      :format(n, grown[n].kib, grown[n].len // 1024))
  end
  local a, b = grown[MEMORY_SIZES[2]], grown[MEMORY_SIZES[3]]
  local raw = #("data: " .. luma.json.encode { id = "chatcmpl-s", object = "chat.completion.chunk", model = "gpt-test",
    usage = luma.null, choices = { { index = 0, delta = { content = "abcd" }, finish_reason = luma.null } } } .. "\n\n")
  print(("  the queues (stream_queue_bytes = %d KiB for the bytes, the same for the events) fill between 10k and 100k")
    :format(core.limits.stream_queue_bytes // 1024))
  print(("  growth from 100k to 300k deltas / answer text added = %.2f (target <= %d; the raw stream is %.0f times the text)")
    :format((b.kib - a.kib) * 1024 / (b.len - a.len), MEMORY_TARGET, raw / 4))
end)
server:stop()
for _, path in ipairs(temps) do os.remove(path) end
if not ok then
  io.stderr:write("bench/agent/stream: ", tostring(err), "\n")
  os.exit(1)
end
