-- bench/peers: luma's client, one process (run.lua starts it as it starts the
-- Node ones): WARM asks, then ASKS asks timed in the process's CPU time
-- (os.clock: user + system of every thread, the pool's workers included),
-- against the mock at MOCK_URL; prints the JSON line harness.mjs prints.
--   lua5.4 bench/peers/luma.lua host|module
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
common.setup(here)

local luma = require "luma"
local A = dofile(here .. "/../agent/ask.lua")

local handler = arg[1] or "host"
local url = assert(os.getenv("MOCK_URL"), "MOCK_URL is not set")
local warm, asks = tonumber(os.getenv("WARM") or 3), tonumber(os.getenv("ASKS") or 10)
local turns = tonumber(os.getenv("TURNS") or 10)

local p = A.program(url, handler)
local function ask()
  local total = A.ask(p)
  if total ~= turns * A.CALLS then error(("the ask answered a total of %s, not %d"):format(total, turns * A.CALLS)) end
end

for _ = 1, warm do ask() end
local cpu_us = setmetatable({}, luma.array_mt)
for i = 1, asks do
  local c0 = os.clock()
  ask()
  cpu_us[i] = math.floor((os.clock() - c0) * 1e6 + 0.5)
end
p:close()

local f = assert(io.open("/proc/self/status"))
local rss_kb = tonumber(f:read("a"):match("VmHWM:%s*(%d+)"))
f:close()
local version = luma.version
print(luma.json.encode {
  name = handler == "module" and "luma, tool module" or "luma, host handler",
  version = ("luma-lua %s, %s"):format(tostring(version), _VERSION),
  cpu_us = cpu_us, rss_kb = rss_kb,
})
