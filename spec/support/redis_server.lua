-- A redis-server of the specs' own: on a free port of 127.0.0.1, with its
-- data (appendonly) in a temporary folder, stopped and removed afterwards.
--   local redis = require "spec.support.redis_server"
--   local server = redis.start { password = "..." }   -- server.url, server.port
--   server:stop(); server:start_again()   -- a restart keeps the data
--   server:remove()                       -- stops it and removes its folder
local socket = require "socket"
local h = require "spec.helpers"

local M = {}
local Server = {}
Server.__index = Server

local free_port = h.free_port

local function up(port)
  local c = socket.tcp()
  c:settimeout(0.2)
  local ok = c:connect("127.0.0.1", port)
  c:close()
  return ok ~= nil
end

function Server:start_again()
  local args = {
    "--port", tostring(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--appendonly", "yes",
    "--appendfsync", "always", "--save", "''", "--daemonize", "no", "--logfile", self.dir .. "/log",
  }
  if self.password then args[#args + 1] = "--requirepass " .. h.quote(self.password) end
  os.execute("env -u LD_PRELOAD redis-server " .. table.concat(args, " ") .. " > /dev/null 2>&1 & echo $! > " ..
    h.quote(self.dir .. "/pid"))
  self.pid = h.read(self.dir .. "/pid"):match("%d+")
  for _ = 1, 100 do
    if up(self.port) then return self end
    socket.sleep(0.05)
  end
  error("redis-server did not start: " .. (io.open(self.dir .. "/log") and h.read(self.dir .. "/log") or ""))
end

function Server:stop()
  if not self.pid then return end
  os.execute("kill -9 " .. self.pid .. " 2>/dev/null")
  for _ = 1, 100 do
    if os.execute("kill -0 " .. self.pid .. " 2>/dev/null") ~= true then break end
    socket.sleep(0.02)
  end
  for _ = 1, 100 do
    if not up(self.port) then break end
    socket.sleep(0.02)
  end
  self.pid = nil
end

function Server:remove()
  self:stop()
  os.execute("rm -rf " .. h.quote(self.dir))
end

function M.start(opts)
  opts = opts or {}
  h.ensure_packages { "redis-server" }
  local dir = h.tmpname("-redis")
  assert(os.execute("mkdir -p " .. h.quote(dir)))
  local self = setmetatable({ dir = dir, port = free_port(), password = opts.password }, Server)
  self.url = "redis://127.0.0.1:" .. self.port .. "/0"
  return self:start_again()
end

return M
