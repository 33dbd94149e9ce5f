-- OpenResty: a real nginx with its Lua module (on LuaJIT) runs
-- examples/openresty, which calls tools through libluma. One worker; the
-- spec starts it on a free port in a temporary folder and stops it after
-- (helpers.nginx).
local luma = require "luma"
local socket = require "socket"
local h = require "spec.helpers"

local Nginx = h.Nginx

-- prepare(dir), when given, changes the copy of the example before nginx starts
local function start_nginx(prepare)
  local dir = h.copy_example("openresty")
  if prepare then prepare(dir) end
  return h.nginx(dir)
end

-- POSTs to /tools/NAME -> status, decoded body
function Nginx:post(tool, body)
  local http = require "socket.http"
  local ltn12 = require "ltn12"
  local out = {}
  local _, status = http.request {
    url = self.url .. "/tools/" .. tool, method = "POST",
    headers = { ["content-type"] = "application/json", ["content-length"] = #body },
    source = ltn12.source.string(body), sink = ltn12.sink.table(out),
  }
  local text = table.concat(out)
  local ok, value = pcall(luma.json.decode, text)
  return status, ok and value or text
end

-- n requests at once -> { total_ms, results = { { status, body, ms } } }
function Nginx:burst(tool, n, body, background)
  local cmd = "env -u LD_PRELOAD python3 " .. h.quote(h.root .. "/spec/support/http_burst.py") .. " " ..
    h.quote(self.url .. "/tools/" .. tool) .. " " .. n .. " " .. h.quote(body)
  if background then
    local file = h.tmpname(".burst")
    os.execute(cmd .. " --out " .. h.quote(file) .. " > /dev/null 2>&1 &")
    return file
  end
  local status, out, err = h.sh(cmd)
  assert(status == 0, out .. err)
  return luma.json.decode(out)
end

local function read_burst(file)
  for _ = 1, 300 do
    local f = io.open(file)
    if f then
      local s = f:read("*a")
      f:close()
      os.remove(file)
      return luma.json.decode(s)
    end
    socket.sleep(0.05)
  end
  error("the requests did not finish")
end

describe("OpenResty under a real nginx (examples/openresty)", function()
  local nginx

  -- the copy counts the worker's ngx.sleep calls, at /sleeps
  setup(function()
    nginx = start_nginx(function(dir)
      h.write(dir .. "/app.lua", (h.read(dir .. "/app.lua"):gsub("\nreturn app%s*$", [[

local sleeps, sleep = 0, ngx.sleep
ngx.sleep = function(s) sleeps = sleeps + 1 return sleep(s) end
function app.sleeps() ngx.say(sleeps) end

return app
]])))
      h.write(dir .. "/nginx.conf", (h.read(dir .. "/nginx.conf"):gsub("    location ~", [[
    location = /sleeps {
      content_by_lua_block { require("app").sleeps() }
    }
    location ~]], 1)))
    end)
  end)
  teardown(function() if nginx then nginx:stop() end end)

  local function post(tool, body)
    local status, value = nginx:post(tool, body)
    return status, value
  end

  it("calls a tool and returns its result as JSON", function()
    local status, body = post("greet", '{"name": "Ada"}')
    assert.are.equal(200, status, nginx:log())
    assert.are.same({ text = "Hello, Ada!" }, body)
  end)

  it("answers bad input with a 400 and the error as JSON, an unknown tool with a 404", function()
    local status, body = post("greet", '{"name": 5}')
    assert.are.equal(400, status)
    assert.are.equal("TOOL_INPUT_INVALID", body.code)
    assert.are.equal("greet.input.name must be a string", body.message)
    status, body = post("greet", "{not json")
    assert.are.equal(400, status)
    assert.are.equal("JSON_INVALID", body.code)
    status, body = post("nope", "{}")
    assert.are.equal(404, status)
    assert.are.equal("TOOL_NOT_FOUND", body.code)
  end)

  it("serves 20 requests at once, each waiting 300 ms in its tool, in under 1.5 s: the worker never blocks", function()
    local r = nginx:burst("wait", 20, '{"ms": 300}')
    for i, one in ipairs(r.results) do
      assert.are.equal(200, one.status, "request " .. i .. ": " .. one.body)
      assert.are.same({ ms = 300 }, luma.json.decode(one.body))
    end
    assert.is_true(r.total_ms < 1500, string.format("20 requests took %.0f ms", r.total_ms))
  end)

  it("survives a tool that hits its memory limit and one that hits its deadline", function()
    local status, body = post("hog", "{}")
    assert.are.equal(500, status)
    assert.are.equal("TOOL_MEMORY_LIMIT", body.code)
    status, body = post("forever", "{}")
    assert.are.equal(500, status)
    assert.are.equal("TOOL_TIMEOUT", body.code)
    status, body = post("greet", '{"name": "Bo"}')
    assert.are.equal(200, status)
    assert.are.equal("Hello, Bo!", body.text)
    assert.is_nil(nginx:log():match("signal %d+ %(SIG"), nginx:log())
  end)

  it("wakes a request when its call ends: nginx never sleeps on a timer to learn it", function()
    local function sleeps()
      local http = require "socket.http"
      local body, status = http.request(nginx.url .. "/sleeps")
      assert.are.equal(200, status, nginx:log())
      return tonumber(body)
    end
    local before = sleeps()
    local r = nginx:burst("wait", 10, '{"ms": 100}')
    for i, one in ipairs(r.results) do assert.are.equal(200, one.status, "request " .. i .. ": " .. one.body) end
    local status, body = post("greet", '{"name": "Di"}')
    assert.are.equal(200, status)
    assert.are.equal("Hello, Di!", body.text)
    assert.are.equal(before, sleeps())
  end)

  it("finishes the calls in flight across nginx -s reload, then serves from the new worker", function()
    local file = nginx:burst("wait", 5, '{"ms": 800}', true)
    socket.sleep(0.3)
    local status, out = nginx:signal("reload")
    assert.are.equal(0, status, out)
    local r = read_burst(file)
    for i, one in ipairs(r.results) do assert.are.equal(200, one.status, "request " .. i .. ": " .. one.body) end
    local s, body = post("greet", '{"name": "Cy"}')
    assert.are.equal(200, s)
    assert.are.equal("Hello, Cy!", body.text)
    assert.is_nil(nginx:log():match("signal %d+ %(SIG"), nginx:log())
  end)
end)

-- nginx reaps every child of a worker in its SIGCHLD handler, handler
-- processes included: killing one at its deadline must still end the call
-- as TOOL_TIMEOUT, and a new one must take its place. (luma signals and
-- reaps it by its pidfd, never by a pid nginx may have freed; this spec
-- guards the path, it cannot stage a pid taken by another process.)
describe("OpenResty with process-isolated handlers", function()
  local nginx

  setup(function()
    nginx = start_nginx(function(dir)
      h.write(dir .. "/luma.config.json", luma.json.encode {
        tool_modules = { "tools.lua" },
        tool_module_policy = { sandbox = "strict", max_memory_mb = 32, max_concurrency = 2, isolation = "process",
          kill_grace_ms = 100 },
      })
      h.write(dir .. "/program.luma", h.read(dir .. "/program.luma") .. [[

tool stuck() -> Greeting {
  description: "One rehash of colliding keys: seconds in C, where no hook stops it"
  timeout: 300
}
]])
      h.write(dir .. "/tools.lua", (h.read(dir .. "/tools.lua"):gsub("}%s*$", [[
  stuck = function()
    local t = {}
    for i = 1, 2^17 + 1 do t[i * (2^18 - 1)] = true end
    return { text = "unreachable" }
  end,
}
]])))
    end)
  end)
  teardown(function() if nginx then nginx:stop() end end)

  it("kills a handler process past its deadline, answers TOOL_TIMEOUT, and serves from a new one", function()
    local status, body = nginx:post("greet", '{"name": "Ada"}')
    assert.are.equal(200, status, nginx:log())
    assert.are.same({ text = "Hello, Ada!" }, body)
    for round = 1, 2 do
      local t0 = socket.gettime()
      status, body = nginx:post("stuck", "{}")
      local ms = (socket.gettime() - t0) * 1000
      assert.are.equal(500, status, nginx:log())
      assert.are.equal("TOOL_TIMEOUT", body.code, "round " .. round)
      assert.is_true(ms < h.by_instrumentation(3000, 6000, 20000), string.format("stuck took %.0f ms", ms))
      status, body = nginx:post("greet", '{"name": "Bo"}')
      assert.are.equal(200, status, nginx:log())
      assert.are.equal("Hello, Bo!", body.text)
    end
    local s, body2 = nginx:post("forever", "{}")
    assert.are.equal(500, s)
    assert.are.equal("TOOL_TIMEOUT", body2.code)
  end)
end)
