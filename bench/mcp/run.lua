-- What serving a tool over MCP costs (issue 28): tools/call round trips of a
-- trivial tool through `luma-lua mcp`, over stdio and over Streamable HTTP,
-- against baselines measured in the same run:
--   1. a direct program:call of the same tool, in this process (what the
--      pipeline costs without MCP);
--   2. the pipe floor: the same request line sent to `cat` over the same two
--      pipes and read back (what the operating system and this client cost
--      per round trip, with no server).
-- The MCP layer over stdio = the stdio round trip - the pipe floor - the
-- direct call (wall time). Also printed: the server's CPU time per call (from
-- /proc/PID/stat, every thread) minus the direct call's CPU time, which the
-- machine's other load moves less. Target: the layer under 30 µs a call.
-- Run from the repository root by `make bench`:
--   LUMA_BUILD=build lua5.4 bench/mcp/run.lua
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
local root = common.setup(here)

local luma = require "luma"
local cjson = require "cjson"
local socket = require "socket"

local RUNS = 7
local CALLS = 2000            -- round trips per run
local TARGET_LAYER_US = 30

local quote = common.shell_quote
local now = socket.gettime

local function fail(fmt, ...)
  io.stderr:write("bench/mcp: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

local SOURCE = [[
schema Echoed { n: int }
tool echo(n: int) -> Echoed { description: "Returns its input" }
]]
local TOOLS = [[
return { echo = function(i) return { n = i.n } end }
]]

local tmp = assert(os.getenv("TMPDIR") or "/tmp")
local dir = common.slurp("mktemp -d " .. quote(tmp .. "/luma-bench-mcp-XXXXXX")):gsub("%s+$", "")
common.write(dir .. "/program.luma", SOURCE)
common.write(dir .. "/tools.lua", TOOLS)
root = common.slurp("cd " .. quote(root) .. " && pwd"):gsub("%s+$", "")
-- LUMA_BENCH_MCP_PREFIX: a command the server runs under, such as
-- "perf record -g -o /tmp/mcp.perf --" (its CPU figures are then the prefix's)
local SERVE = (os.getenv("LUMA_BENCH_MCP_PREFIX") or "") .. " " .. quote(root .. "/bin/luma-lua") .. " mcp program.luma --tool-module tools.lua"

local function read_file(path)
  local f = io.open(path)
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

-- The CPU seconds of a process so far (utime + stime of all its threads).
local TICKS = tonumber((common.slurp("getconf CLK_TCK"):match("%d+"))) or 100
local function cpu_of(pid)
  local stat = read_file("/proc/" .. pid .. "/stat")
  local rest = stat:match("%) (.*)$")
  if not rest then return nil end
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  -- after "pid (comm) ": state is field 1, utime 12, stime 13
  return (tonumber(fields[12]) + tonumber(fields[13])) / TICKS
end

local function request(id, n)
  return cjson.encode { jsonrpc = "2.0", id = id, method = "tools/call",
    params = { name = "echo", arguments = { n = n } } }
end

local function check_reply(line, id, n)
  local ok, r = pcall(cjson.decode, line or "")
  if not ok or type(r) ~= "table" or r.id ~= id or type(r.result) ~= "table" or r.result.isError
      or type(r.result.structuredContent) ~= "table" or r.result.structuredContent.n ~= n then
    fail("call %d: unexpected reply %s", id, tostring(line))
  end
end

-- ------------------------------------------------------------- direct call

local function direct()
  local program = assert(luma.load(dir .. "/program.luma", { tool_modules = { dir .. "/tools.lua" }, config = false }))
  local call = program.call
  local r = call(program, "echo", { n = 1 })
  if r.n ~= 1 then fail("program:call returned %s", cjson.encode(r)) end
  local walls, cpus = {}, {}
  for k = 1, RUNS do
    local w0, c0 = now(), os.clock()
    for i = 1, CALLS do
      if call(program, "echo", { n = i }).n ~= i then fail("program:call: a wrong result") end
    end
    walls[k] = (now() - w0) / CALLS * 1e6
    cpus[k] = (os.clock() - c0) / CALLS * 1e6
  end
  program:close()
  return common.median(walls), common.median(cpus)
end

-- ------------------------------------------------------------- over pipes

-- `command` started with its stdin and stdout on two pipes of this process:
-- { send(line), receive() -> line, pid, close() }.
local function spawn(command)
  local fifo, pidfile = dir .. "/out.fifo", dir .. "/pid"
  os.remove(fifo)
  assert(os.execute("mkfifo " .. quote(fifo)))
  local inp = assert(io.popen("cd " .. quote(dir) .. " && sh -c " ..
    quote("echo $$ > " .. quote(pidfile) .. "; exec " .. command) .. " > " .. quote(fifo) .. " 2> " ..
    quote(dir .. "/err"), "w"))
  local out = assert(io.open(fifo, "r"))
  local p = {}
  for _ = 1, 400 do
    p.pid = read_file(pidfile):match("%d+")
    if p.pid then break end
    socket.sleep(0.005)
  end
  function p.send(line)
    assert(inp:write(line, "\n"))
    assert(inp:flush())
  end
  function p.receive() return out:read("l") end
  function p.close()
    inp:close()    -- end of input: the server exits; close waits for it
    out:close()
    os.remove(fifo)
    os.remove(pidfile)
  end
  return p
end

-- Round trips of tools/call through p (after `setup`): the median wall
-- µs per call, and of the process's CPU µs per call.
local function round_trips(p)
  local walls, cpus = {}, {}
  local id = 0
  for k = 1, RUNS + 1 do
    local w0, c0 = now(), cpu_of(p.pid)
    for i = 1, CALLS do
      id = id + 1
      p.send(request(id, i))
      check_reply(p.receive(), id, i)
    end
    -- the first run warms up
    if k > 1 then
      walls[k - 1] = (now() - w0) / CALLS * 1e6
      local c1 = cpu_of(p.pid)
      cpus[k - 1] = c0 and c1 and (c1 - c0) / CALLS * 1e6 or 0
    end
  end
  return common.median(walls), common.median(cpus)
end

local function stdio()
  local p = spawn(SERVE)
  p.send(cjson.encode { jsonrpc = "2.0", id = 0, method = "initialize", params = {
    protocolVersion = "2025-11-25", capabilities = {}, clientInfo = { name = "bench", version = "0" } } })
  local init = p.receive()
  if not (init and init:find('"protocolVersion"', 1, true)) then
    fail("initialize: %s %s", tostring(init), read_file(dir .. "/err"))
  end
  p.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
  local wall, cpu = round_trips(p)
  p.close()
  return wall, cpu
end

-- The pipe floor: `cat` gives back each request; the client decodes a reply
-- of the same shape, so that its own work is in the floor too.
local function floor()
  local p = spawn("cat")
  local walls = {}
  for k = 1, RUNS + 1 do
    local w0 = now()
    for i = 1, CALLS do
      p.send(request(i, i))
      if cjson.decode(p.receive()).id ~= i then fail("cat gave back another line") end
      check_reply(cjson.encode { jsonrpc = "2.0", id = i, result = { content = { { type = "text",
        text = '{"n":' .. i .. '}' } }, structuredContent = { n = i }, isError = false } }, i, i)
    end
    if k > 1 then walls[k - 1] = (now() - w0) / CALLS * 1e6 end
  end
  p.close()
  return common.median(walls)
end

-- ------------------------------------------------------------- over HTTP

local function http()
  local errfile, pidfile = dir .. "/http.err", dir .. "/http.pid"
  common.write(errfile, "")
  os.execute("cd " .. quote(dir) .. " && ( sh -c " .. quote("echo $$ > " .. quote(pidfile) .. "; exec " .. SERVE ..
    " --http 127.0.0.1:0") .. " < /dev/null > /dev/null 2> " .. quote(errfile) .. " & )")
  local port
  for _ = 1, 400 do
    port = read_file(errfile):match("serving http://127%.0%.0%.1:(%d+)/mcp")
    if port then break end
    socket.sleep(0.025)
  end
  local pid = read_file(pidfile):match("%d+")
  if not port then fail("the HTTP server did not start: %s", read_file(errfile)) end
  local c = assert(socket.tcp())
  c:settimeout(20)
  c:setoption("tcp-nodelay", true)
  assert(c:connect("127.0.0.1", tonumber(port)))
  local sid
  local function post(body)
    local head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:" .. port ..
      "\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" ..
      (sid and ("Mcp-Session-Id: " .. sid .. "\r\nMCP-Protocol-Version: 2025-11-25\r\n") or "") ..
      "Content-Length: " .. #body .. "\r\n\r\n"
    assert(c:send(head .. body))
    local status = assert(c:receive("*l"))
    local headers = {}
    while true do
      local l = assert(c:receive("*l"))
      if l == "" then break end
      local k, v = l:match("^([^:]+):%s*(.*)$")
      headers[k:lower()] = v
    end
    local n = tonumber(headers["content-length"] or "0")
    return status, headers, n > 0 and assert(c:receive(n)) or ""
  end
  local _, headers = post(cjson.encode { jsonrpc = "2.0", id = 0, method = "initialize", params = {
    protocolVersion = "2025-11-25", capabilities = {}, clientInfo = { name = "bench", version = "0" } } })
  sid = headers["mcp-session-id"] or fail("initialize gave no Mcp-Session-Id")
  post('{"jsonrpc":"2.0","method":"notifications/initialized"}')
  local p = { pid = pid }
  local last
  function p.send(line) last = line end
  function p.receive()
    local _, _, body = post(last)
    return body
  end
  local wall, cpu = round_trips(p)
  c:close()
  os.execute("kill " .. pid)
  os.remove(errfile)
  os.remove(pidfile)
  return wall, cpu
end

local ok, err = pcall(function()
  local direct_wall, direct_cpu = direct()
  local pipe = floor()
  local stdio_wall, stdio_cpu = stdio()
  local http_wall, http_cpu = http()
  local function row(name, us, base)
    print(("%-52s %9.1f µs %9s/s %8s"):format(name, us, common.rate3(1e6 / us),
      base and ("%.2fx"):format(us / base) or ""))
  end
  print(("%-52s %12s %11s %8s"):format("tools/call of a trivial tool", "per call", "rate", "ratio"))
  row("direct program:call (baseline)", direct_wall)
  row("pipe floor: the request through cat and back", pipe)
  row("luma-lua mcp over stdio, round trip", stdio_wall, direct_wall)
  row("luma-lua mcp --http (keep-alive, a session)", http_wall, direct_wall)
  row("  HTTP against stdio", http_wall, stdio_wall)
  local layer = stdio_wall - pipe - direct_wall
  print(("%-52s %9.1f µs  (target < %d)%s"):format("MCP layer over stdio: round trip - floor - direct",
    layer, TARGET_LAYER_US, layer < TARGET_LAYER_US and "" or "  MISSED"))
  print(("%-52s %9.1f µs  (server CPU %.1f - direct CPU %.1f)"):format("MCP layer over stdio, CPU of the server",
    stdio_cpu - direct_cpu, stdio_cpu, direct_cpu))
  print(("%-52s %9.1f µs  (server CPU %.1f - direct CPU %.1f)"):format("MCP layer over HTTP, CPU of the server",
    http_cpu - direct_cpu, http_cpu, direct_cpu))
end)
os.execute("rm -rf " .. quote(dir))
if not ok then fail("%s", tostring(err)) end
