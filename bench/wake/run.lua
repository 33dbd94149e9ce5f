-- How calls wait on each other (issue 32): what a call pays for waiting for
-- a free state of its module, and what a start pays for the calls already in
-- flight. Each row is a ratio against a baseline measured in the same run:
--   1. three zero-work calls (program:call_all) on a module with
--      max_concurrency 1, against the same on a module allowing 3: the
--      median wall time of RUNS batches;
--   2. an ask of TURNS turns of 3 tool calls (tool_concurrency 3) against the
--      mock provider on loopback, the tools in a module with max_concurrency
--      1, against a module allowing 3: the median wall time per ask;
--   3. STARTS calls started with program:start, all in flight at once (each
--      handler waits until it is cancelled): the time of the last 1,000
--      starts against the first 1,000.
-- Run from the repository root by `make bench`:
--   LUMA_BUILD=build lua5.4 bench/wake/run.lua
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
common.setup(here)

local luma = require "luma"
local core = require "luma.core"
local mock = require "spec.support.mock_provider"

local RUNS = 51
local ASKS = 7
local TURNS = 5
local STARTS = 10000
local SLICE = 1000
-- the targets: waiting for a state costs at most this many times the run
-- that does not wait; the last starts cost at most this many times the first
local TARGET_STATE = 3
local TARGET_ASK = 3   -- its 3 calls run one after the other: 3 hand-offs to the pool, not 1
local TARGET_STARTS = 1.5

local function now() return core.monotonic_ms() end

local function fail(fmt, ...)
  io.stderr:write("bench/wake: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

local SOURCE = [[
schema Sum { sum: int }
schema Answer { total: int }
tool add(a: int, b: int) -> Sum { description: "Adds two integers" }
tool hold(a: int) -> Sum {}
model M {
  provider: "openai"
  name: "gpt-bench"
  base_url: "%s/v1"
  api_key_env: "BENCH_KEY"
}
agent A {
  model: M
  tools: [add]
  tool_rate_limit: 100000
  tool_concurrency: 3
}
]]

local TOOLS = [[
return {
  add = function(i) return { sum = i.a + i.b } end,
  -- waits until its call is cancelled
  hold = function(i, signal) signal:sleep(3600000) return { sum = i.a } end,
}
]]

local tmp = assert(os.getenv("TMPDIR") or "/tmp")
local dir = common.slurp("mktemp -d " .. common.shell_quote(tmp .. "/luma-bench-wake-XXXXXX")):gsub("%s+$", "")
common.write(dir .. "/tools.lua", TOOLS)

local function program(url, concurrency)
  common.write(dir .. "/program.luma", SOURCE:format(url))
  return assert(luma.load(dir .. "/program.luma", {
    tool_modules = { dir .. "/tools.lua" },
    tool_module_policy = { sandbox = "strict", max_concurrency = concurrency },
    lookup = function(name) if name == "BENCH_KEY" then return "sk-bench" end end,
    default_timeout_ms = 600000,
  }))
end

local function batch_ms(p)
  local calls = { { "add", { a = 1, b = 2 } }, { "add", { a = 3, b = 4 } }, { "add", { a = 5, b = 6 } } }
  local times = {}
  for r = 1, RUNS do
    local t0 = now()
    local out = p:call_all(calls)
    times[r] = now() - t0
    for i = 1, 3 do
      if not out[i].ok then fail("a call of the batch failed: %s", tostring(out[i].error)) end
    end
  end
  return common.median(times)
end

local function script()
  local steps = {}
  for t = 1, TURNS do
    steps[t] = mock.chat(nil, {
      { ("c%d_1"):format(t), "add", '{"a":1,"b":1}' },
      { ("c%d_2"):format(t), "add", '{"a":1,"b":2}' },
      { ("c%d_3"):format(t), "add", '{"a":1,"b":3}' },
    })
  end
  steps[TURNS + 1] = mock.chat('{"total":' .. TURNS * 9 .. '}')
  return steps
end

local function ask_ms(server, p)
  local times = {}
  for r = 1, ASKS do
    server:reset()
    server:script(script())
    local t0 = now()
    local answer = p:agent("A"):ask("Add.", "Answer")
    times[r] = now() - t0
    if answer.total ~= TURNS * 9 then fail("the ask answered %s", tostring(answer.total)) end
  end
  return common.median(times)
end

local function starts(p)
  local calls, t_first, t_last = {}, 0, 0
  for i = 1, STARTS do
    local t0 = os.clock()
    calls[i] = p:start("hold", { a = i })
    local t = os.clock() - t0
    if i <= SLICE then t_first = t_first + t end
    if i > STARTS - SLICE then t_last = t_last + t end
  end
  local polls = {}
  for k = 1, 21 do
    local t0 = os.clock()
    calls[STARTS]:poll()
    polls[k] = (os.clock() - t0) * 1e6
  end
  for i = 1, STARTS do calls[i]:cancel() end
  for i = 1, STARTS do calls[i]:wait() end
  return t_first * 1000, t_last * 1000, common.median(polls)
end

local function row(name, value, base, unit, target)
  local ratio = value / base
  print(("%-44s %10.3f %10.3f %s %8.2f  (target <= %g)%s"):format(name, value, base, unit, ratio, target,
    ratio <= target and "" or "  MISSED"))
end

local server = mock.start()
local ok, err = pcall(function()
  print(("%-44s %10s %10s %s %8s"):format("wait", "measured", "baseline", "  ", "ratio"))
  local one, three = program(server.url, 1), program(server.url, 3)
  row("3 zero-work calls, max_concurrency 1 (ms)", batch_ms(one), batch_ms(three), "ms", TARGET_STATE)
  row(("ask of %d turns x 3 calls, max_concurrency 1"):format(TURNS), ask_ms(server, one), ask_ms(server, three),
    "ms", TARGET_ASK)
  one:close()
  three:close()
  local p = program(server.url, 1)
  local first, last, poll = starts(p)
  row(("%d starts: the last %d against the first"):format(STARTS, SLICE), last, first, "ms", TARGET_STARTS)
  print(("a poll of the runtime with %d calls in flight: %.0f µs (%.3f µs per call)"):format(STARTS, poll,
    poll / STARTS))
  p:close()
end)
server:stop()
os.execute("rm -rf " .. common.shell_quote(dir))
if not ok then fail("%s", tostring(err)) end
