return {
  greet = function(input)
    local start = os.clock()
    while os.clock() - start < 0.2 do end
    return { text = "Hello, " .. input.name .. "!" }
  end,
}
