-- A fixed number of calls of one row of bench/pipeline, for a profiler:
--   valgrind --tool=callgrind lua5.4 bench/pipeline/profile.lua 200000 [ROW]
-- (from the repository root, with LUMA_BUILD set as for run.lua). ROW is
-- `pipeline` (program:call of the module's handler, the default), `host`
-- (program:call of the handler registered by the host, host.lua) or `bare`
-- (the handler called with no pipeline).
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
dofile(here .. "/../common.lua").setup(here)

local luma = require "luma"

local n = tonumber(arg[1]) or 200000
local row = arg[2] or "pipeline"
local input = { a = 2, b = 3, operation = "add" }
local passed = 0
if row == "bare" then
  local handler = assert(loadfile(here .. "/tools.lua", "t", setmetatable({ luma = luma }, { __index = _G })))().calculate
  for _ = 1, n do
    if handler(input).result == 5 then passed = passed + 1 end
  end
else
  local program
  if row == "host" then
    program = dofile(here .. "/host.lua")(luma, here)
  elseif row == "pipeline" then
    program = luma.load(here .. "/calculate.luma", { tool_modules = { here .. "/tools.lua" }, config = false })
  else
    error("profile.lua: no row " .. row .. " (pipeline, host or bare)")
  end
  local call = program.call
  for _ = 1, n do
    if call(program, "calculate", input).result == 5 then passed = passed + 1 end
  end
end
assert(passed == n, "a call did not return 5")
print(string.format("%d calls (%s)", n, row))
