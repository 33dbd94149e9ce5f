-- Futures: work that goes on without blocking the host.
--
-- program:start(tool, input) gives a luma.Call and agent:start_ask a
-- luma.Ask (both in C); agent:start(method, args) gives a luma.Future: the
-- method runs in a coroutine, each tool call or ask it makes starts without
-- blocking, and the coroutine yields until that one is done. All three have
--   ready()        steps the runtime once, without blocking -> done?
--   done()         done? (steps nothing)
--   wait([ms])     steps until done or the timeout passes -> done?
--   result()       the value (a call: value, meta); raises the error
--   cancel()       the handler's signal fires; the result is the cancellation
--   await()        inside a coroutine, yields until done, then result();
--                  elsewhere, wait() then result()
local core = require "luma.core"
local exec = require "luma.exec"

local future = {}

local function now_ms() return core.monotonic_ms() end

-- What a coroutine-based host scheduler sees: await yields the future
-- itself, so the scheduler may wait on it (or on the runtime's fd).
local function await(self)
  local co, main = coroutine.running()
  if not main and coroutine.isyieldable() and not exec.futures[co] then
    while not self:ready() do coroutine.yield(self) end
  else
    self:wait()
  end
  return self:result()
end

core.Call.await = await
core.Ask.await = await

-- The ask's events (README: Streaming). An ask with a listener (on_event)
-- hands its queued events to it each time it is stepped: poll, ready,
-- wait and result. A listener's error cancels the ask and is raised once
-- the ask ended.
local Ask = core.Ask
local listeners = setmetatable({}, { __mode = "k" })
local c_poll, c_wait, c_result = Ask.poll, Ask.wait, Ask.result

local function dispatch(a)
  local f = listeners[a]
  if not f then return end
  while true do
    local ev = a:next_event()
    if ev == nil then return end
    local ok, err = pcall(f, ev)
    if not ok then
      listeners[a] = nil
      a:cancel()
      c_wait(a)
      error(err, 0)
    end
  end
end

-- Gives a's events to f from now on (from its first request when a was
-- started listening).
function future.listen(a, f)
  a:listen()
  listeners[a] = f
  dispatch(a)
  return a
end

function Ask:poll()
  local done = c_poll(self)
  dispatch(self)
  return done
end
Ask.ready = Ask.poll

function Ask:wait(timeout_ms)
  if not listeners[self] then return c_wait(self, timeout_ms) end
  local deadline = timeout_ms and now_ms() + math.min(math.floor(timeout_ms), core.limits.timeout_cap_ms)
  while true do
    dispatch(self)
    if self:done() then return true end
    local left = deadline and math.max(0, math.ceil(deadline - now_ms()))
    if left == 0 then return false end
    self:wait_event(left)
  end
end

function Ask:result()
  dispatch(self)
  return c_result(self)
end

-- for ev in a:events() do ... end: each event as it comes, the finish last.
-- In a coroutine (not a method's), waiting yields the ask, as await does,
-- so other work goes on; elsewhere it steps the runtime until the next.
function Ask:events()
  self:listen()
  return function()
    while true do
      local ev = self:next_event()
      if ev ~= nil then return ev end
      if self:done() then return nil end
      local co, main = coroutine.running()
      if not main and coroutine.isyieldable() and not exec.futures[co] then
        c_poll(self)
        if not self:done() and not self:wait_event(0) then coroutine.yield(self) end
      else
        self:wait_event()
      end
    end
  end
end

local Future = { await = await }
Future.__index = Future
Future.__name = "luma.Future"

-- A future running `run` (what agent:prepare returns) in a coroutine; it
-- runs now up to its first tool call or ask. on_event (or nil) gets the
-- events of every ask the method makes.
function future.start(run, on_event)
  local self = setmetatable({ co = coroutine.create(run), on_event = on_event }, Future)
  exec.futures[self.co] = self
  self:resume()
  return self
end

-- In the method's coroutine, with the call or ask it started: yields until
-- that is done, then gives its result (or raises its error).
function Future:await_step(pending)
  if self.cancelled then pending:cancel() end
  self.pending = pending
  while not pending:done() do coroutine.yield() end
  self.pending = nil
  return pending:result()
end

-- Runs the coroutine while what it waits for is done. -> finished?
function Future:resume()
  while not self.finished and (self.pending == nil or self.pending:done()) do
    local ok, value = coroutine.resume(self.co)
    if coroutine.status(self.co) == "dead" then
      self.finished = true
      self.pending = nil
      exec.futures[self.co] = nil
      if ok then self.value = value else self.error = value end
    end
  end
  return self.finished == true
end

function Future:done() return self.finished == true end

-- An ask of the method: its events go to the future's on_event.
function Future:listen(a)
  future.listen(a, self.on_event)
end

function Future:ready()
  if self.finished then return true end
  if self.pending then self.pending:poll() end
  return self:resume()
end
Future.poll = Future.ready

-- A timeout past core.limits.timeout_cap_ms (math.huge among them) is
-- waited as the cap: now + it would not fit an integer.
function Future:wait(timeout_ms)
  if timeout_ms ~= nil and (type(timeout_ms) ~= "number" or not (timeout_ms >= 0)) then
    error("bad argument #1 to 'wait' (a number of milliseconds >= 0 expected, got "
      .. (type(timeout_ms) == "number" and tostring(timeout_ms) or type(timeout_ms)) .. ")", 2)
  end
  local deadline = timeout_ms and now_ms() + math.min(math.floor(timeout_ms), core.limits.timeout_cap_ms)
  while not self:resume() do
    local left = deadline and math.ceil(deadline - now_ms())
    if left and left <= 0 then return false end
    self.pending:wait(left)
  end
  return true
end

function Future:result()
  if not self.finished then error("the method is not done: wait for it first", 2) end
  if self.error ~= nil then error(self.error, 0) end
  return self.value
end

-- The call or ask in flight is cancelled, and so is every one the method
-- starts after: it ends with their error, unless it catches them.
function Future:cancel()
  self.cancelled = true
  if self.pending then self.pending:cancel() end
end

function Future:close()
  if not self.finished then self:cancel() end
end

return future
