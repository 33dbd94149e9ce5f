-- The game's script: starts a tool call on the first frame and polls it on
-- every frame after, without waiting.
local luma = require "luma"

local program = luma.load("greet.luma")
local game = {}
local call, started

function game.update(frame)
  if frame == 1 then
    call, started = program:start("greet", { name = "Ada" }), frame
  end
  if call:ready() then
    print(("frame %d: greet -> %s"):format(frame, call:result().text))
    print("frames while the call ran: " .. (frame - started))
    return false   -- the game is over
  end
  return true
end

return game
