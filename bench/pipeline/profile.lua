-- A fixed number of program:call's of bench/pipeline, for a profiler:
--   valgrind --tool=callgrind lua5.4 bench/pipeline/profile.lua 200000
-- (from the repository root, with LUMA_BUILD set as for run.lua).
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
dofile(here .. "/../common.lua").setup(here)

local luma = require "luma"

local n = tonumber(arg[1]) or 200000
local program = luma.load(here .. "/calculate.luma", { tool_modules = { here .. "/tools.lua" }, config = false })
local call = program.call
local input = { a = 2, b = 3, operation = "add" }
local passed = 0
for _ = 1, n do
  if call(program, "calculate", input).result == 5 then passed = passed + 1 end
end
assert(passed == n, "a call did not return 5")
print(string.format("%d calls", n))
