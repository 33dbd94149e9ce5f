-- The Lua side of libluma (core/embed.c, core/luma.h): the C API's
-- operations over the Lua API, with JSON text in and out. core/embed.c runs
-- it in the library's private Lua 5.4 state and passes the host's callbacks
-- as functions. A tool's call (luma_start) is core.start_json's, and its
-- result's JSON core/lruntime.c's lr_call_json: no Lua runs for them here.
local luma = require "luma"
local core = require "luma.core"
local approval = require "luma.approval"

local embed = {}

local decode, encode = core.json_decode, core.json_encode

-- A runtime's state: its luma.Runtime, the options every program gets, and
-- the method futures in flight (luma_poll steps them).
function embed.new(workers, hooks)
  local env = {
    runtime = luma.runtime(workers > 0 and { workers = workers } or nil),
    hooks = hooks,
    futures = {},
  }
  -- the library never prompts at a terminal: without an approve callback a
  -- write tool runs when it is listed in LUMA_APPROVED_TOOLS, else not
  env.approve = hooks.approve or function(tool)
    return approval.listed((hooks.lookup or os.getenv)("LUMA_APPROVED_TOOLS"), tool)
  end
  return env
end

local function modules(list)
  local specs = {}
  for i, path in ipairs(list) do specs[i] = path end
  return specs
end

-- config: a path, false (none), or nil (the luma.config.json next to the program)
function embed.load(env, path, config, tool_modules)
  local hooks = env.hooks
  return luma.load(path, {
    runtime = env.runtime,
    config = config,
    tool_modules = modules(tool_modules),
    on_event = hooks.on_event and function(event) hooks.on_event(encode(event)) end,
    approve = env.approve,
    lookup = hooks.lookup,
    clock = hooks.clock,
  })
end

-- A C handler: fn(input_json, needs_json) -> true, result_json | false, error_json or nil
function embed.register(program, tool, fn)
  program:register(tool, function(input, _, needs)
    local ok, out = fn(encode(input), needs and encode(needs) or "null")
    if ok then
      local fine, value = pcall(decode, out)
      if fine then return value end
      error("the C handler of '" .. tool .. "' returned text that is not JSON: " ..
        tostring(core.is_error(value) and value.message or value), 0)
    end
    local e = out and decode(out)
    if type(e) ~= "table" or type(e.code) ~= "string" then
      error("the C handler of '" .. tool .. "' failed" .. (out and (": " .. out) or ""), 0)
    end
    error(core.error { code = e.code, message = e.message or e.code, retryable = e.retryable, details = e.details }, 0)
  end)
end

local function input_of(json, what)
  local ok, v = pcall(decode, json)
  if not ok then
    error(core.error { code = "JSON_INVALID", message = "the " .. what .. " is not JSON: " .. tostring(core.is_error(v) and v.message or v) }, 0)
  end
  if v == core.null then v = {} end
  return v
end

function embed.start_method(env, program, agent, method, json)
  local f = program:agent(agent):start(method, input_of(json, "arguments"))
  if not f:done() then env.futures[f] = true end
  return f
end

function embed.start_ask(env, program, agent, prompt, schema)
  return program:agent(agent):start_ask(prompt, schema)
end

function embed.resume(env, program, run)
  return program:start_resume(run)
end

-- luma_listen, luma_next_event: an ask's events, as JSON text
function embed.listen(env, a)
  a:listen()
end

function embed.next_event(env, a)
  local ev = a:next_event()
  if ev == nil then return nil end
  if ev.type == "finish" and not ev.ok and core.is_error(ev.error) then
    local e = ev.error
    ev.error = { code = e.code, message = e.message, retryable = e.retryable, details = e.details }
  end
  return encode(ev)
end

-- Steps every call, ask and method of the runtime that can move. -> calls in
-- flight, ms the host may wait (nil: until the fd is readable)
function embed.poll(env)
  local n, wait
  repeat
    n, wait = env.runtime:poll()
    local moved = false
    for f in pairs(env.futures) do
      local was = f.pending
      if f:resume() then env.futures[f] = nil end
      if f.pending ~= was then moved = true end
    end
  until not moved
  for _ in pairs(env.futures) do n = n + 1 end
  return n, wait
end

-- -> true, result_json | false, code, message, error_json
function embed.outcome(f)
  local ok, value = pcall(f.result, f)
  if ok then
    local fine, json = pcall(encode, value)
    if fine then return true, json end
    value = core.error { code = "JSON_INVALID", message = "the result cannot be written as JSON: " .. tostring(json) }
  end
  if not core.is_error(value) then
    value = core.error { code = "RUNTIME_ERROR", message = tostring(value) }
  end
  local e = { code = value.code, message = value.message, retryable = value.retryable, details = value.details }
  local fine, json = pcall(encode, e)
  if not fine then json = encode { code = value.code, message = value.message, retryable = value.retryable } end
  return false, value.code, value.message, json
end

function embed.close(env)
  for f in pairs(env.futures) do f:cancel() end
  env.runtime:close()
end

return embed
