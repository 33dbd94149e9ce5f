return {
  greet = function(input) return { text = "Hello, " .. input.name .. "!" } end,
  wait = function(input, signal)
    signal:sleep(input.ms)
    return { ms = input.ms }
  end,
  hog = function()
    local t = {}
    for i = 1, 1e8 do t[i] = ("x"):rep(64) .. i end
    return { text = "unreachable" }
  end,
  forever = function() while true do end end,
}
