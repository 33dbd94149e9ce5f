-- A streamed ask, offline: the Flow agent of calculate.luma replays
-- examples/flow.stream.recording.jsonl (made by record-flow.lua), whose
-- exchanges hold the provider's raw event streams. The replay feeds them to
-- the stream parser in pieces of random sizes (from replay_seed), and the
-- host prints each event as it comes: the tool call as it starts, its
-- arguments' fragments, its result, then the answer's text. `make demo` runs
-- it from the repository root:
--   LUMA_BUILD=build lua5.4 examples/stream-replay.lua [SEED]
local build = os.getenv("LUMA_BUILD") or "build"
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = build .. "/?.so;" .. package.cpath
local luma = require "luma"

local program = luma.load("examples/calculate.luma", {
  config = "examples/luma.config.json",
  replay = "examples/flow.stream.recording.jsonl",
  replay_seed = tonumber(arg[1] or "1"),
})

local function say(fmt, ...) io.stderr:write(string.format(fmt, ...)) end
local last
local deltas = 0
local answer = program:agent("Flow"):call("run", { text = "INV-2041 paid in full on the first of May" }, {
  on_event = function(ev)
    local delta = ev.type:match("_delta$")
    if delta then deltas = deltas + 1 end
    if last and last ~= ev.type and last:match("_delta$") then say("\n") end
    if ev.type == "tool_call_start" then say("[turn %d] tool call %s %s\n", ev.turn, ev.id, ev.name)
    elseif ev.type == "tool_call_delta" then say("%s", last == ev.type and ev.text or "  arguments: " .. ev.text)
    elseif ev.type == "tool_result" then say("[turn %d] %s -> %s\n", ev.turn, ev.name, luma.json.encode(ev.output or ev.error))
    elseif ev.type == "text_delta" then say("%s", last == ev.type and ev.text or ("[turn %d] text: "):format(ev.turn) .. ev.text)
    elseif ev.type == "turn_end" then
      say("[turn %d] end: %s, after %d deltas\n", ev.turn, ev.stop, deltas)
      deltas = 0
    elseif not delta and ev.type ~= "usage" and ev.type ~= "tool_call" then say("[%s]\n", ev.type) end
    last = ev.type
  end,
})
print(luma.json.encode(answer, { indent = 2 }))
program:close()
