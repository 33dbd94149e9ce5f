-- The agent loop's own cost per provider round trip: an ask of TURNS turns,
-- each with CALLS tool calls, then a final answer.
--   1. replayed from a recording (no network, no server): all that is left
--      is the runtime (adapters, conversation, tool calls through the
--      pipeline, validation); per round trip, with the median of RUNS asks;
--   2. the same against the mock provider on loopback, minus the time the
--      server says it spent (an upper bound of the overhead: it includes
--      the server's HTTP parsing and the loopback);
--   3. how the replayed cost grows from 1 to 50 turns: linear work gives a
--      per-turn cost that stays flat;
--   4. the request bytes per turn of an agent with 300 tools, all sent
--      versus lazy (found with the synthetic discovery tool): target at
--      least 20 times smaller.
-- Run from the repository root by `make bench`:
--   LUMA_BUILD=build lua5.4 bench/agent/run.lua
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
common.setup(here)

local luma = require "luma"
local mock = require "spec.support.mock_provider"
local A = dofile(here .. "/ask.lua")

local CALLS = A.CALLS
local RUNS = 7
local TARGET_US = 200
local MODULE_TARGET_US = 100

local function fail(fmt, ...)
  io.stderr:write("bench/agent: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

local script, program, ask = A.script, A.program, A.ask

local function now() return require("luma.core").monotonic_ms() end

-- 4: an agent with 300 tools, each with a schema as a real one has
local LAZY_TOOLS = 300
local LAZY_TARGET = 20

local function many_tools(url, lazy)
  local decls, names = {}, {}
  for i = 1, LAZY_TOOLS do
    decls[i] = ('tool t%d(city: string @desc("the city to look up, by its full name"), days: int @range(1, 14), ' ..
                'units?: enum["metric", "imperial"]) -> Sum { description: "Looks up forecast number %d for a city, ' ..
                'for the given number of days, in the given units." }'):format(i, i)
    names[i] = "t" .. i
  end
  local list = table.concat(names, ", ")
  local source = "schema Sum { sum: int }\nschema Answer { total: int, note?: string }\n" .. table.concat(decls, "\n") ..
    ('\nmodel M { provider: "openai", name: "gpt-bench", base_url: "%s/v1", api_key_env: "BENCH_KEY" }\n'):format(url) ..
    "agent A { model: M\n tools: [" .. list .. "]\n" .. (lazy and ("lazy_tools: [" .. list .. "]\n") or "") .. "}"
  local p = luma.compile(source)
  for i = 1, LAZY_TOOLS do p:register("t" .. i, function() return { sum = i } end) end
  p:configure { lookup = function() return "sk-bench" end }
  return p
end

local function chat_call(id, name, args)
  return { json = { choices = { { index = 0, finish_reason = "tool_calls", message = { role = "assistant", content = luma.null,
    tool_calls = { { id = id, type = "function", ["function"] = { name = name, arguments = args } } } } } } } }
end

local function request_bytes(server, lazy)
  server:reset()
  local call = chat_call("c2", "t7", '{"city":"Paris","days":2,"units":null}')
  local final = { json = { choices = { { index = 0, finish_reason = "stop", message = { role = "assistant", content = '{"total":7}' } } } } }
  server:script(lazy and { chat_call("c1", "__discover_tools", '{"names":["t7"],"query":null}'), call, final } or { call, final })
  local answer = many_tools(server.url, lazy):agent("A"):ask("Weather in Paris?", "Answer")
  if answer.total ~= 7 then fail("the ask with %d tools answered %s", LAZY_TOOLS, tostring(answer.total)) end
  local sizes = {}
  for i, q in ipairs(server:requests()) do
    if q.refused then fail("the mock refused a request: %s", luma.json.encode(q.refused)) end
    sizes[i] = #q.body
  end
  return sizes
end

local function median(list)
  table.sort(list)
  return list[(#list + 1) // 2]
end

local server = mock.start()
local tmp = os.tmpname()
local ok, err = pcall(function()
  -- recordings of 1 to 50 turns, made against the mock
  local recordings = {}
  local sizes = { 1, 5, 10, 20, 50 }
  for _, turns in ipairs(sizes) do
    server:reset()
    server:script(script(turns))
    local path = ("%s-%d.jsonl"):format(tmp, turns)
    os.remove(path)
    local total = ask(program(server.url, "host", { record = path }))
    if total ~= turns * CALLS then fail("the recorded ask of %d turns answered %s", turns, tostring(total)) end
    recordings[turns] = path
  end

  -- 1 and 3: replayed
  print(("%-28s %12s %14s"):format("replayed ask", "ms per ask", "µs per request"))
  local per_request = {}
  for _, turns in ipairs(sizes) do
    local times = {}
    for r = 1, RUNS do
      local p = program(server.url, "host", { replay = recordings[turns] })
      local t0 = now()
      local total = ask(p)
      times[r] = now() - t0
      if total ~= turns * CALLS then fail("the replayed ask of %d turns answered %s", turns, tostring(total)) end
      p:close()
    end
    local ms = median(times)
    per_request[turns] = ms * 1000 / (turns + 1)
    print(("%-28s %12.3f %14.1f"):format(("%d turns x %d calls"):format(turns, CALLS), ms, per_request[turns]))
  end

  -- 1, the handler's row: the 10-turn ask replayed by a warm program (a
  -- module's states are made at its first calls): a recording of two asks,
  -- the first untimed; wall time and the process's CPU time (every thread:
  -- the pool's workers run a module's handlers) per round trip
  local twice = tmp .. "-twice.jsonl"
  os.remove(twice)
  server:reset()
  local steps = script(10)
  for i, step in ipairs(script(10)) do steps[#steps + 1] = step end
  server:script(steps)
  local recorder = program(server.url, "host", { record = twice })
  ask(recorder)
  ask(recorder)
  recorder:close()
  print(("%-28s %12s %14s"):format("replayed, 10 turns", "µs wall", "µs CPU"))
  local cpu_per = {}
  for _, handler in ipairs { "host", "module" } do
    local walls, cpus = {}, {}
    for r = 1, RUNS do
      local p = program(server.url, handler, { replay = twice })
      ask(p)
      local t0, c0 = now(), os.clock()
      local total = ask(p)
      cpus[r], walls[r] = (os.clock() - c0) * 1e6 / 11, (now() - t0) * 1000 / 11
      p:close()
      if total ~= 10 * CALLS then fail("the replayed ask (%s handler) answered %s", handler, tostring(total)) end
    end
    cpu_per[handler] = median(cpus)
    print(("%-28s %12.1f %14.1f"):format(handler == "host" and "host handler" or "tool module (tools.lua)",
      median(walls), cpu_per[handler]))
  end

  -- 2: on loopback
  local overheads = {}
  for r = 1, RUNS do
    server:reset()
    server:script(script(10))
    local p = program(server.url, "host")
    local t0 = now()
    ask(p)
    local total = now() - t0
    local in_server = 0
    for _, q in ipairs(server:requests()) do in_server = in_server + (q.server_ms or 0) end
    overheads[r] = (total - in_server) * 1000 / 11
    p:close()
  end
  print(("loopback, 10 turns: %.1f µs per round trip outside the server (an upper bound)"):format(median(overheads)))
  print(("overhead per round trip at 10 turns, replayed: %.1f µs (target < %d µs)"):format(per_request[10], TARGET_US))
  print(("tool-module round trip at 10 turns, replayed: %.1f µs CPU (target <= %d µs); host handler %.1f µs")
    :format(cpu_per.module, MODULE_TARGET_US, cpu_per.host))
  print(("growth: per-request cost at 50 turns / at 10 turns = %.2f (linear work: about 1; quadratic: about 5)")
    :format(per_request[50] / per_request[10]))
  for _, turns in ipairs(sizes) do os.remove(recordings[turns]) end
  os.remove(twice)

  local all, lazy = request_bytes(server, false), request_bytes(server, true)
  print(("request bytes per turn, %d tools all sent: %s"):format(LAZY_TOOLS, table.concat(all, ", ")))
  print(("request bytes per turn, %d lazy tools (discover, call, answer): %s"):format(LAZY_TOOLS, table.concat(lazy, ", ")))
  local ratio = all[1] / lazy[1]
  print(("first request %.1f times smaller with lazy tools (target >= %d)"):format(ratio, LAZY_TARGET))
  if ratio < LAZY_TARGET then fail("lazy tools: the first request is only %.1f times smaller", ratio) end
end)
server:stop()
os.remove(tmp)
if not ok then fail("%s", tostring(err)) end
