return {
  greet = function(input, signal)
    signal:sleep(200)   -- thinking about it, without holding a CPU
    return { text = "Hello, " .. input.name .. "!" }
  end,
}
