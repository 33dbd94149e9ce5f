-- OpenResty end to end (issue 32): one nginx worker on loopback, under wrk
-- with 1 and 32 connections. Three endpoints of one nginx, each taking
-- {"name": "..."} and answering {"text": "Hello, ...!"}:
--   luma   examples/openresty's greet through luma.ffi with its defaults
--          (untuned: the default pool and max_concurrency, inline starts:
--          the handler runs on the worker), awaited with f:await(ngx);
--   pool   the same on a runtime with inline = false: every handler goes to
--          a pool thread and back, the request woken by the wake socket;
--   poll   that, awaited as before: f:ready() and ngx.sleep(0.002);
--   plain  plain OpenResty: cjson, api7/jsonschema for the input and the
--          output, and the same handler logic in LuaJIT (the baseline).
-- Rows: requests/s and p50/p99 latency; ratios against plain (target: luma
-- at least 0.8x its requests/s) and of luma against poll; then the call
-- alone, from LuaJIT without nginx (call.lua).
-- api7/jsonschema is read from ../shared/anchors (LUMA_ANCHORS to change),
-- for this benchmark only. Run from the repository root by `make bench`:
--   LUMA_BUILD=build lua5.4 bench/nginx/run.lua
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
local root = common.setup(here)
local socket = require "socket"
-- nginx reads paths from its own prefix: the root must be absolute
root = common.slurp("cd " .. common.shell_quote(root) .. " && pwd"):gsub("%s+$", "")

local SECONDS = tonumber(os.getenv("LUMA_BENCH_SECONDS")) or 5
local TARGET = 0.8
local q = common.shell_quote

local function fail(fmt, ...)
  io.stderr:write("bench/nginx: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("a")
  f:close()
  return s
end

local anchors = os.getenv("LUMA_ANCHORS") or (root .. "/../shared/anchors")
if not exists(anchors .. "/api7-jsonschema/lib/jsonschema.lua") then anchors = "/work/shared/anchors" end
if not exists(anchors .. "/api7-jsonschema/lib/jsonschema.lua") then
  fail("api7/jsonschema is not in %s (set LUMA_ANCHORS)", anchors)
end
for _, tool in ipairs { "nginx", "wrk" } do
  if not common.slurp("command -v " .. tool) :match("%S") then fail("%s is not installed (make deps)", tool) end
end

local build = os.getenv("LUMA_BUILD") or "build"
if build:sub(1, 1) ~= "/" then build = root .. "/" .. build end

local APP = [[
local luma = require "luma.ffi"
local cjson = require "cjson.safe"
local jsonschema = require "jsonschema"

local app = {}
local program

local input_ok = jsonschema.generate_validator {
  type = "object", additionalProperties = false, required = { "name" },
  properties = { name = { type = "string", minLength = 1, maxLength = 100 } },
}
local output_ok = jsonschema.generate_validator {
  type = "object", additionalProperties = false, required = { "text" },
  properties = { text = { type = "string" } },
}

local pooled

function app.init_worker(prefix)
  luma.open()
  app.runtime = luma.runtime()
  program = app.runtime:load(prefix .. "program.luma")
  app.pool = luma.runtime { inline = false }
  pooled = app.pool:load(prefix .. "program.luma")
end

local function reply(status, json)
  ngx.status = status
  ngx.header.content_type = "application/json"
  ngx.say(json)
end

function app.luma(poll, pool)
  ngx.req.read_body()
  local p = pool and pooled or program
  local ok, f = pcall(p.start, p, "greet", ngx.req.get_body_data() or "{}")
  if not ok then return reply(400, luma.json.encode { code = f.code, message = f.message }) end
  if poll then
    while not f:ready() do ngx.sleep(0.002) end
  else
    pcall(f.await, f, ngx)
  end
  local fine, json = f:json()
  reply(fine and 200 or 500, json)
end

function app.plain()
  ngx.req.read_body()
  local input = cjson.decode(ngx.req.get_body_data() or "{}")
  if type(input) ~= "table" then return reply(400, '{"code":"JSON_INVALID"}') end
  local ok, err = input_ok(input)
  if not ok then return reply(400, cjson.encode { code = "TOOL_INPUT_INVALID", message = err }) end
  local result = { text = "Hello, " .. input.name .. "!" }
  ok, err = output_ok(result)
  if not ok then return reply(500, cjson.encode { code = "TOOL_OUTPUT_INVALID", message = err }) end
  reply(200, cjson.encode(result))
end

return app
]]

local CONF = [[
worker_processes 1;
pid nginx.pid;
error_log error.log;
env LUMA_LIBRARY;

load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;

events { worker_connections 1024; }

http {
  access_log off;
  client_body_temp_path body_temp;
  proxy_temp_path proxy_temp;
  fastcgi_temp_path fastcgi_temp;
  uwsgi_temp_path uwsgi_temp;
  scgi_temp_path scgi_temp;
  lua_package_path "$prefix/?.lua;%s/lua/?.lua;%s/api7-jsonschema/lib/?.lua;%s/neturl/lib/?.lua;;";
  init_by_lua_block { require "app" }
  init_worker_by_lua_block { require("app").init_worker(ngx.config.prefix()) }
  server {
    listen 127.0.0.1:%d;
    location = /luma { content_by_lua_block { require("app").luma(false) } }
    location = /pool { content_by_lua_block { require("app").luma(false, true) } }
    location = /poll { content_by_lua_block { require("app").luma(true, true) } }
    location = /plain { content_by_lua_block { require("app").plain() } }
  }
}
]]

local WRK = [[
wrk.method = "POST"
wrk.body = '{"name": "Ada"}'
wrk.headers["Content-Type"] = "application/json"
]]

local function free_port()
  local s = assert(socket.bind("127.0.0.1", 0))
  local _, port = s:getsockname()
  s:close()
  return tonumber(port)
end

local tmp = os.getenv("TMPDIR") or "/tmp"
local dir = common.slurp("mktemp -d " .. q(tmp .. "/luma-bench-nginx-XXXXXX")):gsub("%s+$", "")
local example = root .. "/examples/openresty/"
for _, name in ipairs { "program.luma", "tools.lua", "luma.config.json" } do
  common.write(dir .. "/" .. name, read(example .. name))
end
common.write(dir .. "/app.lua", APP)
common.write(dir .. "/post.lua", WRK)
local port = free_port()
common.write(dir .. "/nginx.conf", CONF:format(root, anchors, anchors, port))
local user = os.execute("[ \"$(id -u)\" = 0 ]") and " -g 'user root;'" or ""
local cmd = "cd " .. q(dir) .. " && env LUMA_LIBRARY=" .. q(build .. "/libluma.so") .. " nginx -p " .. q(dir .. "/") ..
  " -c nginx.conf -e " .. q(dir .. "/error.log") .. user

-- "1.23ms" -> ms
local function ms_of(s)
  local n, unit = s:match("([%d.]+)(%a+)")
  n = tonumber(n)
  return unit == "us" and n / 1000 or unit == "ms" and n or unit == "s" and n * 1000 or unit == "m" and n * 60000 or n
end

local url = "http://127.0.0.1:" .. port
local TICK = tonumber((common.slurp("getconf CLK_TCK"))) or 100

-- The CPU time in s of the nginx worker (all its threads: libluma's pool
-- too), from /proc: on a machine shared with other jobs, the CPU a request
-- costs moves far less than requests/s
local worker
local function worker_cpu()
  if not worker then
    local master = read(dir .. "/nginx.pid"):match("%d+")
    worker = common.slurp("pgrep -P " .. master):match("%d+")
  end
  local f = worker and io.open("/proc/" .. worker .. "/stat")
  if not f then return nil end
  local stat = f:read("a"):gsub("^.-%) ", "")
  f:close()
  local fields = {}
  for v in stat:gmatch("%S+") do fields[#fields + 1] = v end
  return (tonumber(fields[12]) + tonumber(fields[13])) / TICK   -- utime, stime (fields 14, 15)
end

local function wrk(path, connections)
  local cpu0 = worker_cpu()
  local out, ok = common.slurp(("wrk -t1 -c%d -d%ds --latency -s %s %s 2>&1")
    :format(connections, SECONDS, q(dir .. "/post.lua"), q(url .. path)))
  local cpu1 = worker_cpu()
  if not ok then fail("wrk failed: %s", out) end
  local non2xx = out:match("Non%-2xx or 3xx responses: (%d+)")
  if non2xx then fail("%s answered %s requests with an error:\n%s", path, non2xx, out) end
  if not out:match("Requests/sec:%s*[%d.]+") or not out:match("99%%%s+%S+") then
    fail("wrk's report on %s cannot be read:\n%s", path, out)
  end
  local requests = tonumber(out:match("(%d+) requests in"))
  return { rps = tonumber(out:match("Requests/sec:%s*([%d.]+)")),
           p50 = ms_of(out:match("50%%%s+(%S+)")), p99 = ms_of(out:match("99%%%s+(%S+)")),
           cpu_us = cpu0 and cpu1 and requests and requests > 0 and (cpu1 - cpu0) / requests * 1e6 or 0 / 0 }
end

local ok, err = pcall(function()
  local out, started = common.slurp(cmd .. " 2>&1")
  if not started then error("nginx did not start: " .. out) end
  for _ = 1, 100 do
    local c = socket.tcp()
    c:settimeout(0.1)
    local up = c:connect("127.0.0.1", port)
    c:close()
    if up then break end
    socket.sleep(0.05)
  end
  for _, path in ipairs { "/luma", "/pool", "/poll", "/plain" } do
    local body = common.slurp(("curl -s -d '{\"name\": \"Ada\"}' %s"):format(q(url .. path)))
    if not body:find('"text":"Hello, Ada!"', 1, true) then
      error(path .. " answered " .. body .. "\n" .. read(dir .. "/error.log"))
    end
  end
  print(("%-42s %10s %9s %9s %8s %10s %9s"):format("nginx, one worker, wrk", "req/s", "p50 ms", "p99 ms", "ratio",
    "CPU µs/req", "CPU ratio"))
  for _, connections in ipairs { 1, 32 } do
    local plain = wrk("/plain", connections)
    local poll = wrk("/poll", connections)
    local pool = wrk("/pool", connections)
    local luma = wrk("/luma", connections)
    -- CPU ratio: plain's CPU per request over the row's, the requests/s
    -- ratio of a worker that had a CPU of its own
    local function row(name, r, ratio, target)
      local cpu_ratio = ratio and plain.cpu_us / r.cpu_us
      print(("%-42s %10.0f %9.3f %9.3f %8s %10.1f %9s%s"):format(("%s, %d connection%s"):format(name, connections,
        connections > 1 and "s" or ""), r.rps, r.p50, r.p99, ratio and ("%.2f"):format(ratio) or "", r.cpu_us,
        cpu_ratio and ("%.2f"):format(cpu_ratio) or "",
        target and (" (target >= %g: %s)"):format(target, ratio >= target and "met" or
          cpu_ratio >= target and "met in CPU per request, MISSED in requests/s" or "MISSED") or ""))
    end
    row("plain OpenResty (api7, cjson)", plain)
    row("luma on the pool, polled every 2 ms", poll, poll.rps / plain.rps)
    row("luma on the pool, f:await(ngx)", pool, pool.rps / plain.rps)
    row("luma, defaults (inline), f:await(ngx)", luma, luma.rps / plain.rps, TARGET)
    print(("  inline against the pool: %.2fx the requests/s, p50 %.3f ms against %.3f ms")
      :format(luma.rps / pool.rps, luma.p50, pool.p50))
  end
  -- the call alone, from LuaJIT without nginx (bench/nginx/call.lua)
  local out, fine = common.slurp(("luajit %s %s %s 2>&1"):format(q(here .. "/call.lua"), q(root), q(build .. "/libluma.so")))
  out = out:gsub("%s+$", "")
  if not fine or not tonumber(out) then error("bench/nginx/call.lua failed: " .. out) end
  print(("%-42s %10s CPU µs per call (start, f:json(); inline)"):format("luma.ffi from LuaJIT, no nginx", out))
  local log = read(dir .. "/error.log")
  if log:match("%[error%]") or log:match("%[alert%]") then error("nginx logged errors:\n" .. log) end
end)
os.execute(cmd .. " -s stop > /dev/null 2>&1")
socket.sleep(0.3)
os.execute("rm -rf " .. q(dir))
if not ok then fail("%s", tostring(err)) end
