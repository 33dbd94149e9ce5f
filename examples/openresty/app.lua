-- POST /tools/NAME with the tool's input as JSON: the result as JSON, or the
-- error { code, message, ... } with 400 (bad input), 404 (no such tool) or 500.
local luma = require "luma.ffi"

local app = {}
local program

function app.init_worker(prefix)
  luma.open()   -- $LUMA_LIBRARY, else the installed libluma.so
  -- the defaults: one pool thread per CPU, and inline starts (in nginx, a
  -- handler runs on the worker until it returns or waits)
  app.runtime = luma.runtime()
  program = app.runtime:load(prefix .. "program.luma")
end

local STATUS = { JSON_INVALID = 400, TOOL_INPUT_INVALID = 400, TOOL_NOT_FOUND = 404 }

local function reply(status, json)
  ngx.status = status
  ngx.header.content_type = "application/json"
  ngx.say(json)
end

function app.call(tool)
  ngx.req.read_body()
  local body = ngx.req.get_body_data() or "{}"
  local ok, f = pcall(program.start, program, tool, body)
  if not ok then
    local code = type(f) == "table" and f.code or "INVALID_ARGUMENT"
    local message = type(f) == "table" and f.message or tostring(f)
    return reply(STATUS[code] or 500, luma.json.encode { code = code, message = message })
  end
  -- the request sleeps until libluma says its call ended; the worker serves
  -- others meanwhile. await raises the call's error: the outcome is read as JSON
  pcall(f.await, f, ngx)
  local fine, json, code = f:json()
  reply(fine and 200 or STATUS[code] or 500, json)
end

return app
