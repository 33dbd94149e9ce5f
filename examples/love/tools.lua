-- The game's tool handlers: they run on luma's worker threads, in Lua 5.4
-- sandboxes, never in the game's frame.
return {
  think = function(input, signal)
    local start = os.clock()
    local n = 0
    while os.clock() - start < input.ms / 1000 and not signal.aborted do n = n + 1 end
    return { idea = "thought " .. n .. " times" }
  end,
  roll = function(input)
    return { value = input.seed % 6 + 1 }
  end,
}
