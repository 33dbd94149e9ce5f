-- luma for LuaJIT hosts (LÖVE, OpenResty, any LuaJIT 2.1): libluma's C API
-- through the FFI. The handlers still run in libluma's enforced Lua 5.4
-- sandboxes; nothing here blocks unless asked to (wait).
--
--   local luma = require "luma.ffi"
--   local rt = luma.runtime { workers = 2 }          -- luma.open(path) first to choose the library;
--               -- inline = true: a start runs its handler here until it returns or waits
--               -- (luma_set_inline; the default in nginx, false elsewhere)
--   local program = rt:load("program.luma")          -- { config =, tool_modules = { ... } }
--   local f = program:start("tool", { a = 1 })       -- or agent:start(method, args), agent:start_ask(prompt, schema)
--   f:ready()   -- steps the runtime once, never blocks -> done?
--   f:wait(ms)  -- blocks up to ms (nil: no limit) -> done?
--   f:result()  -- the value; raises { code, message, retryable, details }
--   f:cancel()
--   f:json()    -- true, result JSON | false, error JSON, code, message (no decoding)
--   f:await([sleep])  -- in a coroutine: yields the future until done; with
--                     -- sleep (e.g. love.timer.sleep), sleeps between polls instead;
--                     -- f:await(ngx) in OpenResty: the request sleeps until the
--                     -- runtime's wake socket says the call ended (no polling)
--   for ev in f:events([sleep]) do ... end   -- an ask's events (start_ask(..., { events = true })),
--                     -- waiting as await does: f:events(ngx) wakes on each event
--   program:register("tool", function(input, needs) return { ... } end)
--               -- a handler of the host's own (luma_register): it runs on the
--               -- thread that polls (f:ready, f:wait, rt:poll); raising
--               -- { code, message, retryable, details } fails the call with it
--
-- What luma.h has that this binding does not: luma_options' callbacks (the
-- clock now_ms/sleep_ms, approve, lookup, on_event), luma_program_close (a
-- program goes with its runtime), luma_set_deadline_signal and
-- luma_deadline_signal.
--
-- Values are Lua tables, encoded to JSON and decoded back here; luma.json is
-- the codec (luma.null is JSON null; luma.array(t) marks an empty array).
local ffi = require "ffi"

ffi.cdef [[
typedef struct luma_runtime luma_runtime;
typedef struct luma_program luma_program;
typedef struct luma_call luma_call;
typedef struct luma_error { char code[32]; char message[1024]; } luma_error;
typedef struct luma_options {
  int workers;
  void *ud;
  long long (*now_ms)(void *ud);
  void (*sleep_ms)(void *ud, long long ms);
  int (*approve)(void *ud, const char *tool, const char *agent);
  const char *(*lookup)(void *ud, const char *name);
  void (*on_event)(void *ud, const char *event_json, size_t len);
} luma_options;
const char *luma_version(void);
luma_runtime *luma_new(const luma_options *o, luma_error *err);
void luma_destroy(luma_runtime *rt);
luma_program *luma_load(luma_runtime *rt, const char *path, const char *config, const char *const *tool_modules, luma_error *err);
void luma_program_close(luma_program *p);
luma_call *luma_start(luma_program *p, const char *tool, const char *input_json, luma_error *err);
luma_call *luma_start_method(luma_program *p, const char *agent, const char *method, const char *args_json, luma_error *err);
luma_call *luma_start_ask(luma_program *p, const char *agent, const char *prompt, const char *schema, luma_error *err);
int luma_poll(luma_runtime *rt, long long *wait_ms);
int luma_fd(luma_runtime *rt);
int luma_wake_socket(luma_runtime *rt, char *path, size_t len, luma_error *err);
int luma_set_inline(luma_runtime *rt, int on);
int luma_ready(const luma_call *c);
int luma_wait(luma_call *c, long long timeout_ms);
int luma_result(luma_call *c, const char **json, size_t *len, luma_error *err);
void luma_cancel(luma_call *c);
void luma_call_free(luma_call *c);
int luma_listen(luma_call *c, luma_error *err);
const char *luma_next_event(luma_call *c, size_t *len);
typedef int (*luma_handler)(void *ud, const char *input_json, const char *needs_json, char **out);
int luma_register(luma_program *p, const char *tool, luma_handler fn, void *ud, luma_error *err);
]]
-- a handler's *out is freed by libluma: it is allocated with the C library's malloc
if not pcall(function() return ffi.C.malloc end) then ffi.cdef "void *malloc(size_t size);" end

local C_OK, C_FAILED = 0, -1

local luma = {}
local lib

-- Loads libluma: a path, or $LUMA_LIBRARY, or the system's libluma.so.
function luma.open(path)
  lib = ffi.load(path or os.getenv("LUMA_LIBRARY") or "luma")
  luma.version = ffi.string(lib.luma_version())
  return luma
end

local function library()
  if not lib then luma.open() end
  return lib
end

-- ------------------------------------------------------------------ JSON

local null = setmetatable({}, { __name = "luma.null", __tostring = function() return "null" end })
local array_mt = { __name = "luma.array" }
luma.null = null
function luma.array(t) return setmetatable(t or {}, array_mt) end

local escapes = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }

local function encode_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return escapes[c] or string.format("\\u%04x", c:byte()) end) .. '"'
end

local function encode(v, out, depth)
  if depth > 200 then error("luma.json: the value nests more than 200 levels", 0) end
  local t = type(v)
  if v == nil or v == null then out[#out + 1] = "null"
  elseif t == "boolean" then out[#out + 1] = tostring(v)
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then error("luma.json: " .. tostring(v) .. " is not a JSON number", 0) end
    out[#out + 1] = (math.floor(v) == v and math.abs(v) < 2 ^ 53) and string.format("%d", v) or string.format("%.17g", v)
  elseif t == "string" then out[#out + 1] = encode_string(v)
  elseif t == "table" then
    local n = #v
    if getmetatable(v) == array_mt or n > 0 then
      out[#out + 1] = "["
      for i = 1, n do
        if i > 1 then out[#out + 1] = "," end
        encode(v[i], out, depth + 1)
      end
      out[#out + 1] = "]"
    else
      local keys = {}
      for k in pairs(v) do
        if type(k) ~= "string" then error("luma.json: an object key must be a string, not a " .. type(k), 0) end
        keys[#keys + 1] = k
      end
      table.sort(keys)
      out[#out + 1] = "{"
      for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = "," end
        out[#out + 1] = encode_string(k)
        out[#out + 1] = ":"
        encode(v[k], out, depth + 1)
      end
      out[#out + 1] = "}"
    end
  else
    error("luma.json: a " .. t .. " cannot be written as JSON", 0)
  end
end

-- The JSON luma gives is valid and canonical: the decoder trusts its shape
-- and reads it with string.find, fast on LuaJIT.
local decode_value

local function decode_string(s, i)
  local parts, start = {}, i + 1
  while true do
    local j = s:find('["\\]', start)
    if not j then error("luma.json: unterminated string", 0) end
    parts[#parts + 1] = s:sub(start, j - 1)
    if s:sub(j, j) == '"' then return table.concat(parts), j + 1 end
    local c = s:sub(j + 1, j + 1)
    if c == "u" then
      local code = tonumber(s:sub(j + 2, j + 5), 16)
      local nexti = j + 6
      if code >= 0xD800 and code < 0xDC00 and s:sub(nexti, nexti + 1) == "\\u" then
        local low = tonumber(s:sub(nexti + 2, nexti + 5), 16)
        code = 0x10000 + (code - 0xD800) * 0x400 + (low - 0xDC00)
        nexti = nexti + 6
      end
      if code < 0x80 then parts[#parts + 1] = string.char(code)
      elseif code < 0x800 then parts[#parts + 1] = string.char(0xC0 + math.floor(code / 64), 0x80 + code % 64)
      elseif code < 0x10000 then
        parts[#parts + 1] = string.char(0xE0 + math.floor(code / 4096), 0x80 + math.floor(code / 64) % 64, 0x80 + code % 64)
      else
        parts[#parts + 1] = string.char(0xF0 + math.floor(code / 262144), 0x80 + math.floor(code / 4096) % 64,
          0x80 + math.floor(code / 64) % 64, 0x80 + code % 64)
      end
      start = nexti
    else
      local map = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
      parts[#parts + 1] = map[c] or c
      start = j + 2
    end
  end
end

decode_value = function(s, i)
  i = s:find("%S", i)
  local c = s:sub(i, i)
  if c == "{" then
    local obj = {}
    i = s:find("%S", i + 1)
    if s:sub(i, i) == "}" then return obj, i + 1 end
    while true do
      local key
      key, i = decode_string(s, s:find('"', i))
      i = s:find(":", i) + 1
      obj[key], i = decode_value(s, i)
      i = s:find("%S", i)
      if s:sub(i, i) == "}" then return obj, i + 1 end
      i = i + 1
    end
  elseif c == "[" then
    local arr = luma.array {}
    i = s:find("%S", i + 1)
    if s:sub(i, i) == "]" then return arr, i + 1 end
    local n = 0
    while true do
      n = n + 1
      arr[n], i = decode_value(s, i)
      i = s:find("%S", i)
      if s:sub(i, i) == "]" then return arr, i + 1 end
      i = i + 1
    end
  elseif c == '"' then
    return decode_string(s, i)
  elseif s:sub(i, i + 3) == "true" then return true, i + 4
  elseif s:sub(i, i + 4) == "false" then return false, i + 5
  elseif s:sub(i, i + 3) == "null" then return null, i + 4
  end
  local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", i)
  if not num or num == "" then error("luma.json: unexpected '" .. c .. "' at offset " .. i, 0) end
  return tonumber(num), i + #num
end

luma.json = {
  encode = function(v) local out = {} encode(v, out, 0) return table.concat(out) end,
  decode = function(s) return (decode_value(s, 1)) end,
}

local Error = { __name = "luma.Error", __tostring = function(e) return e.code .. ": " .. e.message end }

local function to_json(v, what)
  if v == nil then return "{}" end
  if type(v) == "string" then return v end
  local ok, json = pcall(luma.json.encode, v)
  if not ok then error(setmetatable({ code = "JSON_INVALID", message = "the " .. what .. " cannot be written as JSON: " .. json }, Error), 3) end
  return json
end

-- ---------------------------------------------------------------- errors

local function raise(err, level)
  error(setmetatable({ code = ffi.string(err.code), message = ffi.string(err.message) }, Error), level or 3)
end

-- ---------------------------------------------------------------- futures

local Future = {}
Future.__index = Future

local jsonp, lenp = ffi.new("const char *[1]"), ffi.new("size_t[1]")
-- One luma_error for every call that takes one (1 KB: a new one a call
-- cost OpenResty's requests more than their whole JSON): each reads it
-- before any other Lua runs, and a call of libluma that runs Lua of this
-- VM (a host handler's callback) fills it only after that Lua returned
local errp = ffi.new("luma_error")

local function new_future(rt, c)
  return setmetatable({ rt = rt, c = ffi.gc(c, lib.luma_call_free) }, Future)
end

function Future:done() return lib.luma_ready(self.c) ~= 0 end

function Future:ready()
  if lib.luma_ready(self.c) ~= 0 then return true end
  if self.rt.ptr ~= nil then lib.luma_poll(self.rt.ptr, nil) end
  return lib.luma_ready(self.c) ~= 0
end
Future.poll = Future.ready

function Future:wait(timeout_ms)
  return lib.luma_wait(self.c, timeout_ms or -1) == 1
end

function Future:result()
  local err = errp
  local state = lib.luma_result(self.c, jsonp, lenp, err)
  if state == 1 then error("the call is not done: wait for it first", 2) end
  local json = jsonp[0] ~= nil and ffi.string(jsonp[0], lenp[0]) or nil
  if state == C_OK then return luma.json.decode(json) end
  local e = json and luma.json.decode(json) or {}
  e.code, e.message = ffi.string(err.code), ffi.string(err.message)
  error(setmetatable(e, Error), 2)
end

-- f:json() -> true, result_json | false, error_json, code, message; nil
-- when not done. No decoding: what a server passes on as it is.
function Future:json()
  local err = errp
  local state = lib.luma_result(self.c, jsonp, lenp, err)
  if state == 1 then return nil end
  local json = jsonp[0] ~= nil and ffi.string(jsonp[0], lenp[0]) or "null"
  if state == C_OK then return true, json end
  return false, json, ffi.string(err.code), ffi.string(err.message)
end

function Future:cancel() lib.luma_cancel(self.c) end

-- In a coroutine: yields the future until it is done (or, given sleep, sleeps
-- between polls: ngx.sleep in OpenResty). Elsewhere: waits.
local function in_coroutine()
  if coroutine.isyieldable then return coroutine.isyieldable() end
  local co, main = coroutine.running()
  return co ~= nil and not main
end

-- OpenResty: a request that awaits a future sleeps on a semaphore of its
-- own. One timer's light thread per runtime (started at the first await)
-- serves them: a light thread of its own holds a cosocket connected to the
-- runtime's wake socket (luma_wake_socket); at each read (a handler or a
-- transfer finished, a streamed transfer's bytes came) it polls the runtime
-- and posts the semaphores of the futures that are done, and of the asks
-- iterated with events(ngx) that queued an event. The dispatcher does the
-- same when `wake` is posted (a new waiter) or the runtime's next timer is
-- due.
-- Nothing sleeps on a timer to learn that a call ended: the dispatcher's
-- wait ends at the runtime's next timer (a backoff, a deadline), or after
-- NGX_IDLE_S to see whether the worker is exiting. (A semaphore's timeout,
-- unlike a cosocket's, logs nothing.)
local NGX_IDLE_S = 1
local NGX_WAIT_S = 60
local NGX_READ_MS = 2 ^ 31 - 1

-- One pending wake is enough: the dispatcher polls for every call at once.
local function ngx_wake(d)
  if d.wake and d.wake:count() <= 0 then d.wake:post(1) end
end

-- Polls the runtime and posts the semaphores of the waiters whose future
-- is ready for them (done; for events, an event queued).
-- -> ms until the runtime's next timer, or nil
local function ngx_serve(rt, d)
  local _, wait = rt:poll()   -- the first accepts the wake socket's connection
  for f, w in pairs(d.waiting) do
    if w.ready(f) then
      d.waiting[f] = nil
      w.sema:post(1)
    end
  end
  return wait
end

-- The reader: serves the waiters at each read itself (one hop less than
-- waking the dispatcher); a timer that poll reports goes to the dispatcher.
local function ngx_read(ngx, rt, path, wake, d)
  local sock = ngx.socket.tcp()
  local ok, why = sock:connect("unix:" .. path)
  d.connected = ok and true or false
  wake:post(1)
  if not ok then
    d.why = "cannot connect to " .. path .. ": " .. tostring(why)
    return
  end
  sock:settimeout(NGX_READ_MS)
  while true do
    local bytes, err = sock:receiveany(4096)
    if not bytes and err ~= "timeout" then
      sock:close()
      -- a runtime closed closes its end: nothing went wrong then
      d.why = rt.ptr ~= nil and "the wake socket failed: " .. tostring(err) or nil
      d.connected = false
      wake:post(1)
      return
    end
    if rt.ptr == nil then return end
    if ngx_serve(rt, d) then ngx_wake(d) end
  end
end

local function ngx_dispatch(premature, rt, d)
  local ngx = d.ngx
  if premature or rt.ptr == nil then
    d.running = false
    return
  end
  local buf, err = ffi.new("char[128]"), ffi.new("luma_error")
  local wake = d.semaphore.new()
  d.wake = wake
  local reader
  d.connected, d.why = false, nil
  if lib.luma_wake_socket(rt.ptr, buf, 128, err) == C_OK then
    reader = ngx.thread.spawn(ngx_read, ngx, rt, ffi.string(buf), wake, d)
    wake:wait(NGX_WAIT_S)
  else
    d.why = ffi.string(err.message)
  end
  if not d.connected then
    -- the requests fall back to polling (wait_ngx)
    ngx.log(ngx.ERR, "luma: no wake socket, requests poll instead: ", d.why)
    d.failed = true
  end
  while d.connected and rt.ptr ~= nil do
    local wait = ngx_serve(rt, d)
    if next(d.waiting) == nil and ngx.worker.exiting() then break end
    wake:wait(wait and math.max(wait, 1) / 1000 or NGX_IDLE_S)
  end
  d.wake = nil
  if reader and d.connected then ngx.thread.kill(reader) end
  if d.why and not d.failed then ngx.log(ngx.ERR, "luma: ", d.why) end
  d.running = false
  -- requests left waiting: a new dispatcher serves them
  for _, w in pairs(d.waiting) do w.sema:post(1) end
end

local function is_done(f) return f:done() end

-- The request sleeps until ready(self): the call is done (await), or an
-- event is queued too (events).
local function wait_ngx(self, ngx, ready)
  if ready(self) then return end
  local rt = self.rt
  local d = rt.ngx
  if not d then
    d = { ngx = ngx, waiting = {}, semaphore = require "ngx.semaphore" }
    rt.ngx = d
  end
  while not ready(self) do
    if d.failed then
      while not (self:ready() or ready(self)) do ngx.sleep(0.002) end
      return
    end
    if not d.running then
      d.running = true
      local ok, err = ngx.timer.at(0, ngx_dispatch, rt, d)
      if not ok then
        d.running = false
        error(setmetatable({ code = "INVALID_ARGUMENT", message = "cannot start luma's light thread: " .. tostring(err) }, Error), 3)
      end
    end
    local sema = d.semaphore.new()
    d.waiting[self] = { sema = sema, ready = ready }
    -- a call done at its start wrote nothing to the socket: the dispatcher
    -- polls once more for it (with every other new waiter)
    ngx_wake(d)
    sema:wait(NGX_WAIT_S)
    d.waiting[self] = nil
  end
end

local function is_ngx(sleep) return type(sleep) == "table" and sleep.timer and sleep.socket and true end

function Future:await(sleep)
  if is_ngx(sleep) then
    wait_ngx(self, sleep, is_done)
  elseif sleep then
    while not self:ready() do sleep(0.002) end
  elseif in_coroutine() then
    while not self:ready() do coroutine.yield(self) end
  else
    self:wait()
  end
  return self:result()
end

-- An ask's events (README: Streaming). f:next_event_json() -> the next
-- event as JSON text, or nil when none is queued now (a server passes it
-- on as it is); f:next_event() decodes it. f:events() iterates them, the
-- finish last, stepping the runtime as ready() does, and yielding (or, given
-- sleep, sleeping) while it waits, as await does; f:events(ngx) in
-- OpenResty: the request sleeps until the runtime's wake socket says an
-- event came (the ask's stream read on, a tool call ended), never polling.
function Future:next_event_json()
  local kept = self.peeked
  if kept then
    self.peeked = nil
    return kept
  end
  local ev = lib.luma_next_event(self.c, lenp)
  if ev == nil then return nil end
  return ffi.string(ev, lenp[0])
end

function Future:next_event()
  local json = self:next_event_json()
  return json and luma.json.decode(json)
end

-- OpenResty's dispatcher takes the event it finds for a waiter: it is kept
-- for next_event_json
local function event_or_done(f)
  if f.peeked then return true end
  f.peeked = f:next_event_json()
  return f.peeked ~= nil or f:done()
end

-- An ask started without { events = true } listens from its first
-- events() on (what it had already done is not shown); one already done
-- gives its finish alone. A call that is no ask has no events.
local function listen(self)
  if self.listening or self.finish_only then return end
  if not self.ask then
    error(setmetatable({ code = "INVALID_ARGUMENT", message = "events: only an ask has events (agent:start_ask)" }, Error), 3)
  end
  local err = errp
  if lib.luma_listen(self.c, err) == C_OK then
    self.listening = true
    return
  end
  if not self:done() then raise(err, 4) end
  local ok, json, code, message = self:json()
  local value = luma.json.decode(json)
  if not ok then
    if type(value) ~= "table" then value = {} end
    value.code, value.message = code, message
  end
  self.finish_only = { type = "finish", ok = ok, answer = ok and value or nil, error = not ok and value or nil }
end

function Future:events(sleep)
  local ngx = is_ngx(sleep) and sleep
  listen(self)
  return function()
    if self.finish_only then
      local finish = self.finish_only
      self.finish_only = true
      return finish ~= true and finish or nil
    end
    while true do
      local ev = self:next_event()
      if ev ~= nil then return ev end
      -- (events queued before it settled are kept for the host)
      if self:done() then return self:next_event() end
      if ngx then
        wait_ngx(self, ngx, event_or_done)
      else
        self:ready()
        ev = self:next_event()
        if ev ~= nil then return ev end
        if self:done() then return self:next_event() end
        if sleep then sleep(0.002)
        elseif in_coroutine() then coroutine.yield(self)
        else lib.luma_wait(self.c, 5) end
      end
    end
  end
end

-- ------------------------------------------------------ runtimes, programs

local Runtime, Program, Agent = {}, {}, {}
Runtime.__index, Program.__index, Agent.__index = Runtime, Program, Agent

-- In nginx's Lua module (OpenResty): its worker serves every request on one
-- thread, as an inline handler does
local function in_nginx()
  return type(ngx) == "table" and type(ngx.config) == "table" and type(ngx.config.subsystem) == "string"
end

-- luma.runtime{ workers = n, inline = bool }: inline (luma_set_inline), a
-- start runs its handler on the calling thread until it returns or waits;
-- by default true in OpenResty, false elsewhere (LÖVE's frames)
function luma.runtime(opts)
  opts = opts or {}
  local C = library()
  local o = ffi.new("luma_options")
  o.workers = opts.workers or 0
  local err = errp
  local ptr = C.luma_new(o, err)
  if ptr == nil then raise(err) end
  local inline = opts.inline
  if inline == nil then inline = in_nginx() end
  C.luma_set_inline(ptr, inline and 1 or 0)
  return setmetatable({ ptr = ffi.gc(ptr, C.luma_destroy) }, Runtime)
end

-- rt:poll() -> calls in flight, ms the host may wait (nil: until rt:fd() is readable)
function Runtime:poll()
  if self.ptr == nil then return 0, nil end
  local wait = ffi.new("long long[1]")
  local n = lib.luma_poll(self.ptr, wait)
  return n, wait[0] >= 0 and tonumber(wait[0]) or nil
end

function Runtime:fd() return self.ptr ~= nil and lib.luma_fd(self.ptr) or -1 end

-- Destroys the runtime now: its programs go; its futures end cancelled.
function Runtime:close()
  if self.ptr ~= nil then
    lib.luma_destroy(ffi.gc(self.ptr, nil))
    self.ptr = nil
    for _, cb in ipairs(self.callbacks or {}) do cb:free() end
    self.callbacks = nil
  end
end

-- rt:load(path [, { config = path | false, tool_modules = { paths } }])
function Runtime:load(path, opts)
  if self.ptr == nil then error(setmetatable({ code = "INVALID_ARGUMENT", message = "the runtime is closed" }, Error), 2) end
  opts = opts or {}
  local mods = opts.tool_modules or {}
  local list = ffi.new("const char *[?]", #mods + 1)
  for i, m in ipairs(mods) do list[i - 1] = m end
  local config = opts.config
  if config == false then config = "" end
  local err = errp
  local p = lib.luma_load(self.ptr, path, config, list, err)
  if p == nil then raise(err) end
  -- the runtime frees its programs: the program keeps the runtime alive
  return setmetatable({ ptr = p, rt = self }, Program)
end

-- A program of a closed runtime is gone with it.
local function live(program)
  if program.rt.ptr == nil then
    error(setmetatable({ code = "INVALID_ARGUMENT", message = "the program's runtime is closed" }, Error), 3)
  end
  return program.ptr
end

function Program:start(tool, input)
  live(self)
  local err = errp
  local c = lib.luma_start(self.ptr, tool, to_json(input, "input"), err)
  if c == nil then raise(err) end
  return new_future(self.rt, c)
end

-- ------------------------------------------------------- host handlers

local function error_json(e)
  if type(e) == "table" and type(e.code) == "string" then
    return luma.json.encode { code = e.code, message = tostring(e.message or e.code), retryable = e.retryable == true,
      details = e.details }
  end
  return luma.json.encode { message = tostring(e) }
end

-- A copy of s in memory of malloc's, which libluma frees.
local function c_string(s)
  local p = ffi.C.malloc(#s + 1)
  if p == nil then return nil end
  ffi.copy(p, s, #s + 1)
  return ffi.cast("char *", p)
end

-- libluma calls a handler from inside luma_poll or luma_wait: the Lua that
-- calls those must not be compiled by the JIT, which cannot call back.
local polling = { Future.ready, Future.wait, Future.await, Runtime.poll }

function Program:register(tool, fn)
  live(self)
  if type(fn) ~= "function" then error("register: the handler must be a function", 2) end
  local cb = ffi.cast("luma_handler", function(_, input, needs, out)
    local ok, r = pcall(function()
      local n = luma.json.decode(ffi.string(needs))
      return luma.json.encode(fn(luma.json.decode(ffi.string(input)), n ~= null and n or nil))
    end)
    out[0] = c_string(ok and r or error_json(r))
    return ok and C_OK or C_FAILED
  end)
  local err = errp
  if lib.luma_register(self.ptr, tool, cb, nil, err) ~= C_OK then
    cb:free()
    raise(err)
  end
  local rt = self.rt
  rt.callbacks = rt.callbacks or {}
  rt.callbacks[#rt.callbacks + 1] = cb
  for _, f in ipairs(polling) do jit.off(f) end
  return self
end

function Program:agent(name)
  return setmetatable({ program = self, name = name }, Agent)
end

function Agent:start(method, args)
  live(self.program)
  local err = errp
  local c = lib.luma_start_method(self.program.ptr, self.name, method, to_json(args, "arguments"), err)
  if c == nil then raise(err) end
  return new_future(self.program.rt, c)
end

-- opts.events: the ask queues its events (and streams) from its first request
function Agent:start_ask(prompt, schema, opts)
  live(self.program)
  local err = errp
  local c = lib.luma_start_ask(self.program.ptr, self.name, prompt, schema, err)
  if c == nil then raise(err) end
  local f = new_future(self.program.rt, c)
  f.ask = true
  if opts and opts.events then
    if lib.luma_listen(f.c, err) ~= C_OK then raise(err) end
    f.listening = true
  end
  return f
end

return luma
