-- A LÖVE game that starts luma tool calls and polls them every frame,
-- through libluma (the FFI binding, lua/luma/ffi.lua). One tool takes 500 ms
-- of handler time on luma's workers; the frames keep ticking meanwhile.
-- Beside them, a model's answer appears over the frames as it streams: the
-- ask's events (README's "The ask's events"), replayed offline from a
-- recording with their times (answer.events.jsonl).
-- It ends by itself once every call and the answer are done and prints what it saw.
--   LUMA_LIBRARY=/path/to/libluma.so LUMA_LUADIR=/path/to/lua love .
local dir = os.getenv("LUMA_LUADIR")
if dir then package.path = dir .. "/?.lua;" .. package.path end
local luma = require "luma.ffi"

local rt, program
local jobs = {}
local frame, worst_ms, started = 0, 0, nil

-- The answer as it streams: items { turn, kind = "text" | "tool", text }.
-- A retry voids what its turn showed; the finish ends it.
local answer = { items = {}, grew = 0, first = nil, finished = nil, dropped = {} }

local function item_of(turn, kind)
  local last = answer.items[#answer.items]
  if last and last.turn == turn and last.kind == kind and kind == "text" then return last end
  last = { turn = turn, kind = kind, text = "" }
  answer.items[#answer.items + 1] = last
  return last
end

local function call_of(id)
  for _, item in ipairs(answer.items) do
    if item.id == id then return item end
  end
end

local function on_event(ev)
  if ev.type == "text_delta" or ev.type == "refusal_delta" then
    local item = item_of(ev.turn, "text")
    item.text = item.text .. ev.text
    answer.first = answer.first or frame
    answer.grown = true
  elseif ev.type == "tool_call_start" then
    local item = item_of(ev.turn, "tool")
    item.id, item.name, item.args = ev.id, ev.name, ""
    item.text = "[" .. ev.name .. " ...]"
  elseif ev.type == "tool_call_delta" and call_of(ev.id) then
    local item = call_of(ev.id)
    item.args = item.args .. ev.text
    item.text = "[" .. item.name .. " " .. item.args .. " ...]"
  elseif ev.type == "tool_result" and call_of(ev.id) then
    local item = call_of(ev.id)
    local out = ev.ok and luma.json.encode(ev.output) or ("failed: " .. tostring(ev.error and ev.error.code))
    item.text = "[" .. item.name .. " " .. item.args .. " -> " .. out .. "]"
  elseif ev.type == "retry" then
    local kept = {}
    for _, item in ipairs(answer.items) do
      if item.turn == ev.turn then answer.dropped[#answer.dropped + 1] = item.text else kept[#kept + 1] = item end
    end
    answer.items = kept
  elseif ev.type == "finish" then
    answer.finished = frame
    answer.ok = ev.ok
  end
end

-- The recording ({ ms, event } lines) -> a function(t0) that gives the
-- iterator of the events whose time has come, by the clock, from t0 on
local function recording(path)
  local events = {}
  for line in love.filesystem.lines(path) do
    if line ~= "" then events[#events + 1] = luma.json.decode(line) end
  end
  return function(t0)
    local i = 1
    return function(now)
      local e = events[i]
      if e and (now - t0) * 1000 >= e.ms then
        i = i + 1
        return e.event
      end
    end
  end
end
local replay, next_event

local function answer_text()
  local parts = {}
  for _, item in ipairs(answer.items) do parts[#parts + 1] = item.text end
  return table.concat(parts, " ")
end

function love.load()
  luma.open()   -- $LUMA_LIBRARY, else the installed libluma.so
  rt = luma.runtime { workers = 2 }
  program = rt:load(love.filesystem.getSource() .. "/game.luma")
  replay = recording("answer.events.jsonl")
end

local function start(name, tool, input)
  jobs[#jobs + 1] = { name = name, future = program:start(tool, input), state = "running" }
end

function love.update(dt)
  local t0 = love.timer.getTime()
  frame = frame + 1
  if frame == 1 then
    started = t0
    start("think", "think", { ms = 500 })
    start("roll", "roll", { seed = 3 })
    next_event = replay(t0)
  elseif frame == 10 then
    start("roll again", "roll", { seed = 8 })
  end
  rt:poll()
  -- the events due this frame (an ask's own events come the same way)
  answer.grown = false
  for ev in next_event, love.timer.getTime() do on_event(ev) end
  if answer.grown then answer.grew = answer.grew + 1 end
  local running = 0
  for _, job in ipairs(jobs) do
    if job.state == "running" then
      if job.future:done() then
        local ok, value = pcall(job.future.result, job.future)
        job.state = ok and "done" or "failed"
        job.value = ok and (value.idea or value.value) or value.code
        job.frame = frame
      else
        running = running + 1
      end
    end
  end
  local took = (love.timer.getTime() - t0) * 1000
  if took > worst_ms then worst_ms = took end
  if running == 0 and frame > 10 and answer.finished or love.timer.getTime() - started > 10 then
    local failed = 0
    for _, job in ipairs(jobs) do
      print(("%s: %s %s at frame %s"):format(job.name, job.state, tostring(job.value), tostring(job.frame)))
      if job.state ~= "done" then failed = failed + 1 end
    end
    print("answer: " .. answer_text())
    print(("answer: first text at frame %s, finished at frame %s (%s), the text grew on %d frames; void: %s"):format(
      tostring(answer.first), tostring(answer.finished), answer.ok and "ok" or "failed", answer.grew,
      table.concat(answer.dropped, " ")))
    if not answer.ok then failed = failed + 1 end
    print(("frames: %d, worst update: %.2f ms"):format(frame, worst_ms))
    io.stdout:flush()
    rt:close()
    love.event.quit(failed == 0 and 0 or 1)
  end
end

function love.draw()
  for i, job in ipairs(jobs) do
    love.graphics.print(("%s: %s %s"):format(job.name, job.state, tostring(job.value or "")), 20, 20 * i)
  end
  love.graphics.print(("frame %d, worst update %.2f ms"):format(frame, worst_ms), 20, 160)
  love.graphics.printf(answer_text() .. (answer.finished and "" or " _"), 20, 200, 440)
end
