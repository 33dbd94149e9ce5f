-- The `luma host handler` row's program: calculate.luma with `handler:
-- "host"`, and the handler of tools.lua registered from this state
-- (program:register), so that a call runs it in the caller's own state with
-- no copy into a module's state. Shared by run.lua, allocs.lua and
-- profile.lua:
--   local host_program = dofile(here .. "/host.lua")(luma, here)
return function(luma, here)
  local f = assert(io.open(here .. "/calculate.luma", "rb"))
  local source = f:read("a")
  f:close()
  local n
  source, n = source:gsub('side_effects: "none"', 'side_effects: "none"\n  handler: "host"', 1)
  assert(n == 1, "calculate.luma: no side_effects line to add the host handler after")
  local program = luma.compile(source, here .. "/calculate.luma (handler: host)")
  local handler = assert(loadfile(here .. "/tools.lua", "t", setmetatable({ luma = luma }, { __index = _G })))()
  program:register("calculate", handler.calculate)
  return program
end
