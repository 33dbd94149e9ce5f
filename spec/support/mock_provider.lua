-- The mock model provider (spec/support/mock_provider.py) for the specs:
--   local mock = require "spec.support.mock_provider"
--   local server = mock.start()        -- server.url is http://127.0.0.1:PORT
--   server:script { step, ... }        -- see mock_provider.py for the steps
--   server:turns { step, ... }         -- steps by turn, each as often as asked
--   server:requests()                  -- what the runtime sent, decoded; a request the real
--                                      -- provider would refuse got its 400 and has `refused`
--   server:reset(); server:stop()      -- stop also removes its folder; twice is fine
-- Steps are written as JSON by luma.json: luma.null is null, and an empty
-- table marked with luma.array_mt is [] (an unmarked one is {}... or []: mark it).
local luma = require "luma"
local http = require "socket.http"
local ltn12 = require "ltn12"

local M = {}
local Server = {}
Server.__index = Server

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "spec/support"

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function sleep(s) os.execute("sleep " .. s) end

local function own_pid()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("*l"):match("^(%d+)")
  f:close()
  return pid
end

local function read_file(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- A Chat Completions answer as a step: text, or tool calls { id, name,
-- arguments as JSON text }, with its usage (default 10 in, 5 out).
function M.chat(content, calls, usage)
  local message = { role = "assistant", content = content or luma.null }
  if calls then
    message.tool_calls = {}
    for i, c in ipairs(calls) do
      message.tool_calls[i] = { id = c[1], type = "function", ["function"] = { name = c[2], arguments = c[3] } }
    end
  end
  return { json = {
    id = "chatcmpl-1", object = "chat.completion", model = "gpt-test",
    choices = { { index = 0, message = message, finish_reason = calls and "tool_calls" or "stop" } },
    usage = usage or { prompt_tokens = 10, completion_tokens = 5, total_tokens = 15 },
  } }
end

function M.start()
  local base = os.getenv("TMPDIR") or "/tmp"
  local p = assert(io.popen("mktemp -d " .. quote(base .. "/luma-mock-XXXXXX")))
  local dir = p:read("*l")
  p:close()
  assert(dir and dir ~= "", "cannot make a folder for the mock provider")
  local cmd = ("python3 %s --port-file %s --parent %s > %s 2>&1 & echo $! > %s"):format(
    quote(here .. "/mock_provider.py"), quote(dir .. "/port"), own_pid(), quote(dir .. "/log"), quote(dir .. "/pid"))
  assert(os.execute(cmd))
  local port
  for _ = 1, 100 do
    port = read_file(dir .. "/port")
    if port then break end
    sleep(0.05)
  end
  local server = setmetatable({ dir = dir, pid = read_file(dir .. "/pid"):match("%d+") }, Server)
  if not port then
    local log = read_file(dir .. "/log") or ""
    server:stop()
    error("the mock provider did not start (is python3 installed?): " .. log)
  end
  server.url = "http://127.0.0.1:" .. port
  return server
end

function Server:call(method, path, body)
  local out = {}
  local ok, status = http.request {
    url = self.url .. path, method = method,
    headers = { ["content-type"] = "application/json", ["content-length"] = body and #body or 0 },
    source = body and ltn12.source.string(body) or nil,
    sink = ltn12.sink.table(out),
  }
  assert(ok and status == 200, "mock provider " .. path .. ": " .. tostring(status))
  return luma.json.decode(table.concat(out))
end

function Server:script(steps)
  setmetatable(steps, luma.array_mt)
  return self:call("POST", "/_mock/script", luma.json.encode(steps))
end

function Server:turns(steps)
  setmetatable(steps, luma.array_mt)
  return self:call("POST", "/_mock/turns", luma.json.encode(steps))
end

function Server:requests()
  return self:call("GET", "/_mock/requests")
end

function Server:reset()
  return self:call("POST", "/_mock/reset", "")
end

function Server:stop()
  if self.stopped then return end
  self.stopped = true
  if self.url then pcall(self.call, self, "POST", "/_mock/shutdown", "") end
  if self.pid then
    for _ = 1, 50 do
      if not os.execute("kill -0 " .. self.pid .. " 2>/dev/null") then break end
      sleep(0.05)
    end
    os.execute("kill " .. self.pid .. " 2>/dev/null")
  end
  os.execute("rm -rf " .. quote(self.dir))
end

return M
