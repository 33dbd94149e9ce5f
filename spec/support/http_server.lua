-- A tiny HTTP/1.1 server on 127.0.0.1 for the specs, run as a process of its
-- own (the spec's process is busy in the call that makes the request):
--   lua5.4 spec/support/http_server.lua PORTFILE
-- It writes its port to PORTFILE, then answers one request at a time:
--   /slow   never answers (the connection stays open until the client leaves)
--   /quit   answers, then exits
--   other   200, a JSON body { method, path, body, header } echoing the request
--           (header: the value of its X-Probe header)
-- It exits by itself after 60 s, so that a spec that failed half-way cannot
-- leave it behind for long.
local socket = require "socket"
local cjson = require "cjson"

local server = assert(socket.bind("127.0.0.1", 0))
local _, port = server:getsockname()
local f = assert(io.open(arg[1] .. ".tmp", "w"))
f:write(port)
f:close()
assert(os.rename(arg[1] .. ".tmp", arg[1]))

local stop_at = socket.gettime() + 60
server:settimeout(0.2)
local held = {}

while socket.gettime() < stop_at do
  local client = server:accept()
  if client then
    client:settimeout(2)
    local line = client:receive("*l") or ""
    local method, path = line:match("^(%u+) (%S+)")
    local length, probe = 0, nil
    while true do
      local h = client:receive("*l")
      if not h or h == "" then break end
      local name, value = h:match("^([^:]+):%s*(.*)$")
      if name and name:lower() == "content-length" then length = tonumber(value) or 0 end
      if name and name:lower() == "x-probe" then probe = value end
    end
    local body = length > 0 and client:receive(length) or ""
    if path == "/slow" then
      held[#held + 1] = client
    else
      local text = cjson.encode({ method = method, path = path, body = body, header = probe })
      client:send("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " .. #text ..
        "\r\nConnection: close\r\n\r\n" .. text)
      client:close()
      if path == "/quit" then break end
    end
  end
end
for _, c in ipairs(held) do c:close() end
server:close()
