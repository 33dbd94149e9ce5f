-- A LÖVE game that starts luma tool calls and polls them every frame,
-- through libluma (the FFI binding, lua/luma/ffi.lua). One tool takes 500 ms
-- of handler time on luma's workers; the frames keep ticking meanwhile.
-- It ends by itself once every call is done and prints what it saw.
--   LUMA_LIBRARY=/path/to/libluma.so LUMA_LUADIR=/path/to/lua love .
local dir = os.getenv("LUMA_LUADIR")
if dir then package.path = dir .. "/?.lua;" .. package.path end
local luma = require "luma.ffi"

local rt, program
local jobs = {}
local frame, worst_ms, started = 0, 0, nil

function love.load()
  luma.open()   -- $LUMA_LIBRARY, else the installed libluma.so
  rt = luma.runtime { workers = 2 }
  program = rt:load(love.filesystem.getSource() .. "/game.luma")
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
  elseif frame == 10 then
    start("roll again", "roll", { seed = 8 })
  end
  rt:poll()
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
  if running == 0 and frame > 10 or love.timer.getTime() - started > 10 then
    local failed = 0
    for _, job in ipairs(jobs) do
      print(("%s: %s %s at frame %s"):format(job.name, job.state, tostring(job.value), tostring(job.frame)))
      if job.state ~= "done" then failed = failed + 1 end
    end
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
end
