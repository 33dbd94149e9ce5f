-- The tool module of bench/agent/ask.lua: `add` in the module's own states.
return {
  add = function(input) return { sum = input.a + input.b } end,
}
