-- The game's tool handlers: they run on luma's worker threads, in Lua 5.4
-- sandboxes, never in the game's frame.
return {
  -- half a second of handler time, waiting as a handler on a slow service
  -- would (signal:sleep holds no CPU, and wakes at once if cancelled)
  think = function(input, signal)
    local slept = signal:sleep(input.ms)
    return { idea = slept and ("thought for " .. input.ms .. " ms") or "interrupted" }
  end,
  roll = function(input)
    return { value = input.seed % 6 + 1 }
  end,
}
