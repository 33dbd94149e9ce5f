-- What a durable ask's journal costs per provider round trip: the same
-- ask of TURNS turns of CALLS tool calls, replayed from a recording (no
-- network: what is left is the runtime), with and without `durable: true`,
-- in pairs; the journal a SQLite file in its default durability (WAL,
-- synchronous NORMAL: a record survives the process's crash, not the
-- machine's power loss) and with sync (synchronous FULL: an fsync per
-- commit). A round trip commits twice: its exchange, then its calls'
-- outcomes together. Target: under 100 µs per round trip in the default
-- mode (measured: 120-180 µs, 320-470 µs with sync; README: Durable asks).
-- Then the time to resume a run of 50 turns: an ask killed (SIGKILL, through
-- LUMA_JOURNAL_CRASH) just before its last record, resumed by this process
-- from its journal once its lease (50 ms here) has ended: every turn and
-- call is read back, none asked or run again. Target: under 10 ms.
-- Run from the repository root by `make bench`:
--   LUMA_BUILD=build lua5.4 bench/agent/durable.lua
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
common.setup(here)

local luma = require "luma"
local mock = require "spec.support.mock_provider"

local TURNS, CALLS, PAIRS = 10, 3, 9
local TARGET_US = 100
local RESUME_TURNS, RESUME_RUNS, RESUME_TARGET_MS = 50, 7, 10

local SOURCE = [[
schema Sum { sum: int }
schema Answer { total: int }
tool add(a: int, b: int) -> Sum { description: "Adds two integers" }
model M {
  provider: "openai"
  name: "gpt-bench"
  base_url: "%s/v1"
  api_key_env: "BENCH_KEY"
}
agent A {
  model: M
  tools: [add]
  tool_rate_limit: 1000
  tool_concurrency: 3
  %s
}
]]

-- (raised: the folder is removed before the bench exits with 1)
local function fail(fmt, ...)
  error(string.format(fmt, ...), 0)
end

local function script(turns)
  turns = turns or TURNS
  local steps = {}
  for t = 1, turns do
    local calls = {}
    for c = 1, CALLS do
      calls[c] = { id = ("call_%d_%d"):format(t, c), type = "function",
                   ["function"] = { name = "add", arguments = luma.json.encode { a = t, b = c } } }
    end
    steps[t] = { json = { choices = { { index = 0, finish_reason = "tool_calls",
      message = { role = "assistant", content = luma.null, tool_calls = calls } } } } }
  end
  steps[turns + 1] = { json = { choices = { { index = 0, finish_reason = "stop",
    message = { role = "assistant", content = '{"total":' .. turns * CALLS .. '}' } } } } }
  return steps
end

local function program(url, durable, opts)
  local p = luma.compile(SOURCE:format(url, durable and "durable: true" or ""))

  p:register("add", function(i) return { sum = i.a + i.b } end)
  opts.lookup = function(name) if name == "BENCH_KEY" then return "sk-bench" end end
  p:configure(opts)
  return p
end

-- One ask's CPU time (ms), the process's (its threads' too: the pool's, the
-- lease's heartbeat): on a shared machine wall time measures the others.
local function timed(p)
  local t0 = os.clock()
  local answer = p:agent("A"):ask("Add the numbers the tools give you.", "Answer")
  local ms = (os.clock() - t0) * 1000
  if answer.total ~= TURNS * CALLS then fail("the ask answered %s", tostring(answer.total)) end
  p:close()
  return ms
end

local server = mock.start()
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. common.shell_quote(dir)))
local ok, err = pcall(function()
  server:script(script())
  local recording = dir .. "/ask.jsonl"
  timed(program(server.url, false, { record = recording }))
  local rows = { { "default (synchronous NORMAL)", false }, { "sync (synchronous FULL)", true } }
  print(("durable ask, %d turns x %d calls, replayed: journal cost per round trip (median of %d pairs)")
    :format(TURNS, CALLS, PAIRS))
  for _, row in ipairs(rows) do
    local diffs = {}
    for i = 1, PAIRS do
      local journal = { type = "sqlite", path = ("%s/j%s%d.db"):format(dir, row[2] and "s" or "", i), sync = row[2] }
      local plain = timed(program(server.url, false, { replay = recording }))
      local durable = timed(program(server.url, true, { replay = recording, journal = journal }))
      diffs[i] = (durable - plain) * 1000 / (TURNS + 1)
    end
    local us = common.median(diffs)
    print(("  %-30s %8.1f µs per round trip (target < %d µs)"):format(row[1], us, TARGET_US))
  end

  -- resume: a run of RESUME_TURNS turns killed before its finish record
  server:reset()
  server:script(script(RESUME_TURNS))
  local long = dir .. "/long.jsonl"
  local source = dir .. "/flow.luma"
  common.write(source, SOURCE:format(server.url, "durable: true"))
  local p = program(server.url, false, { record = long })
  p:agent("A"):ask("Add the numbers the tools give you.", "Answer")
  p:close()
  local records = 1 + RESUME_TURNS * (1 + CALLS) + 1 + 1   -- ask, turns, the answer, finish
  local child = dir .. "/child.lua"
  common.write(child, ([[
package.path = %q
package.cpath = %q
local luma = require "luma"
local p = luma.load(%q, { replay = %q, journal = %q, journal_lease_ms = 50,
  lookup = function() return "sk-bench" end })
p:register("add", function(i) return { sum = i.a + i.b } end)
p:agent("A"):ask("Add the numbers the tools give you.", "Answer")
]]):format(package.path, package.cpath, source, long, dir .. "/resume.db"))
  local times = {}
  for r = 1, RESUME_RUNS do
    for _, ext in ipairs { "", "-wal", "-shm" } do os.remove(dir .. "/resume.db" .. ext) end
    os.execute(("exec 2>/dev/null; LUMA_JOURNAL_CRASH=before:%d %s %s"):format(records, common.shell_quote(arg[-1] or "lua5.4"),
      common.shell_quote(child)))
    local run = luma.runs(dir .. "/resume.db")[1]
    if not run then fail("the killed ask left no run") end
    os.execute("sleep 0.1")   -- its lease (50 ms) ends: the run is abandoned
    local q = luma.load(source, { journal = dir .. "/resume.db", lookup = function() return "sk-bench" end })
    q:register("add", function(i) return { sum = i.a + i.b } end)
    local t0 = require("luma.core").monotonic_ms()
    local answer = q:resume(run.id)
    times[r] = require("luma.core").monotonic_ms() - t0
    if answer.total ~= RESUME_TURNS * CALLS then fail("the resumed run answered %s", tostring(answer.total)) end
    q:close()
  end
  print(("resume of a %d-turn run killed before its last record: %.2f ms (median of %d; target < %d ms)")
    :format(RESUME_TURNS, common.median(times), RESUME_RUNS, RESUME_TARGET_MS))
end)
server:stop()
os.execute("rm -rf " .. common.shell_quote(dir))
if not ok then
  io.stderr:write("bench/agent/durable: ", tostring(err), "\n")
  os.exit(1)
end
