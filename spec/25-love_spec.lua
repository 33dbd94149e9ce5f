-- LÖVE, a real game engine (Debian's love 11.4, on LuaJIT): examples/love
-- runs headless (no window, no graphics: conf.lua) and polls luma calls
-- through the FFI binding in love.update while a 500 ms tool runs, and shows
-- a recorded ask's answer appearing over the frames as its events come.
local h = require "spec.helpers"

-- The frame bound: 5 ms; under ASan libluma itself is instrumented, slower at
-- everything (the child processes are never under valgrind).
-- Under `make valgrind` the game is not under valgrind either, but the
-- machine is: the suite runs in two valgrind processes at once, which
-- take both CPUs, so a frame's bound there is what preemption allows.
local FRAME_MS = h.by_instrumentation(5, 15, 50)

local build = h.root .. "/" .. (os.getenv("LUMA_BUILD") or "build")

describe("a LÖVE game (examples/love)", function()
  it("gets every tool result and shows a streamed answer while its frames keep ticking, each update under 5 ms", function()
    h.ensure_packages { "love" }
    local dir = h.copy_example("love")
    local status, out, err
    local worst = h.frames_within(FRAME_MS, function()
      status, out, err = h.sh("cd " .. h.quote(dir) .. " && env ASAN_OPTIONS=detect_leaks=0 LUMA_HEADLESS=1" ..
        " XDG_RUNTIME_DIR=" .. h.quote(dir) .. " HOME=" .. h.quote(dir) ..
        " LUMA_LIBRARY=" .. h.quote(build .. "/libluma.so") .. " LUMA_LUADIR=" .. h.quote(h.root .. "/lua") ..
        " timeout 60 love .")
      return status == 0 and tonumber(out:match("worst update: ([%d.]+) ms")) or nil, out
    end)
    os.execute("rm -rf " .. h.quote(dir))
    assert(status == 0, out .. err)
    assert.matches("think: done thought for 500 ms at frame %d+", out)
    assert.matches("roll: done 4 at frame", out)
    assert.matches("roll again: done 3 at frame", out)
    local think = tonumber(out:match("think: done thought for 500 ms at frame (%d+)"))
    assert.is_true(think > 30, "the 500 ms tool finished at frame " .. think .. ": the frames did not tick")
    -- the recorded answer appeared over the frames, its void attempt dropped
    assert.matches('answer: Let me roll for you. [roll {"seed": 3} -> {"value":4}] You rolled a 4: the door opens.\n', out, 1, true)
    local first, finished, grew, void = out:match("answer: first text at frame (%d+), finished at frame (%d+) %(ok%), " ..
      "the text grew on (%d+) frames; void: ([^\n]*)")
    assert.is_truthy(first, out)
    assert.are.equal(12, tonumber(grew), "the text did not grow frame by frame")
    assert.is_true(tonumber(finished) - tonumber(first) > 30, "the answer came whole: frames " .. first .. " to " .. finished)
    assert.are.equal("You rol", void)
    assert.is_true(worst < FRAME_MS, "worst update " .. worst .. " ms\n" .. out)
  end)
end)
