-- What a durable ask's journal costs per provider round trip: the same
-- ask of TURNS turns of CALLS tool calls, replayed from a recording (no
-- network: what is left is the runtime), with and without `durable: true`,
-- in pairs; the journal a SQLite file in its default durability (WAL,
-- synchronous NORMAL: a record survives the process's crash, not the
-- machine's power loss) and with sync (synchronous FULL: an fsync per
-- record). Target: under 100 µs per round trip in the default mode.
-- Run from the repository root by `make bench`:
--   LUMA_BUILD=build lua5.4 bench/agent/durable.lua
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
common.setup(here)

local luma = require "luma"
local mock = require "spec.support.mock_provider"

local TURNS, CALLS, PAIRS = 10, 3, 9
local TARGET_US = 100

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

local function fail(fmt, ...)
  io.stderr:write("bench/agent/durable: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

local function script()
  local steps = {}
  for t = 1, TURNS do
    local calls = {}
    for c = 1, CALLS do
      calls[c] = { id = ("call_%d_%d"):format(t, c), type = "function",
                   ["function"] = { name = "add", arguments = luma.json.encode { a = t, b = c } } }
    end
    steps[t] = { json = { choices = { { index = 0, finish_reason = "tool_calls",
      message = { role = "assistant", content = luma.null, tool_calls = calls } } } } }
  end
  steps[TURNS + 1] = { json = { choices = { { index = 0, finish_reason = "stop",
    message = { role = "assistant", content = '{"total":' .. TURNS * CALLS .. '}' } } } } }
  return steps
end

local function program(url, durable, opts)
  local p = luma.compile(SOURCE:format(url, durable and "durable: true" or ""))
  p:register("add", function(i) return { sum = i.a + i.b } end)
  opts.lookup = function(name) if name == "BENCH_KEY" then return "sk-bench" end end
  p:configure(opts)
  return p
end

local function now() return require("luma.core").monotonic_ms() end

-- One ask's wall time (ms).
local function timed(p)
  local t0 = now()
  local answer = p:agent("A"):ask("Add the numbers the tools give you.", "Answer")
  local ms = now() - t0
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
  local rows = { { "default (synchronous NORMAL)", false } }
  print(("durable ask, %d turns x %d calls, replayed: journal cost per round trip (median of %d pairs)")
    :format(TURNS, CALLS, PAIRS))
  for _, row in ipairs(rows) do
    local diffs = {}
    for i = 1, PAIRS do
      local journal = ("%s/j%d.db"):format(dir, i)
      local plain = timed(program(server.url, false, { replay = recording }))
      local durable = timed(program(server.url, true, { replay = recording, journal = journal }))
      diffs[i] = (durable - plain) * 1000 / (TURNS + 1)
    end
    local us = common.median(diffs)
    print(("  %-30s %8.1f µs per round trip (target < %d µs)"):format(row[1], us, TARGET_US))
  end
end)
server:stop()
os.execute("rm -rf " .. common.shell_quote(dir))
if not ok then fail("%s", tostring(err)) end
