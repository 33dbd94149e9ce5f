-- Allocations per call of bench/pipeline's rows, run by run.lua in a child
-- process with $(BUILD)/bench_allocs.so preloaded (LD_PRELOAD), which counts
-- every malloc, calloc and realloc of the process (allocs.c):
--   LD_PRELOAD=build/bench_allocs.so LUMA_BUILD=build lua5.4 bench/pipeline/allocs.lua build/bench_allocs.so
-- Prints one line per row: "allocs <row> <allocations per call> <frees per call>".
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
dofile(here .. "/../common.lua").setup(here)

local luma = require "luma"

local counts = assert(package.loadlib(assert(arg[1], "the path of bench_allocs.so"), "luaopen_bench_allocs"))()
local N = 20000

local program = luma.load(here .. "/calculate.luma", { tool_modules = { here .. "/tools.lua" }, config = false })
local handler = assert(loadfile(here .. "/tools.lua", "t", setmetatable({ luma = luma }, { __index = _G })))().calculate
local call, call_all = program.call, program.call_all
local host_program = dofile(here .. "/host.lua")(luma, here)
local input = { a = 2, b = 3, operation = "add" }
local batch = { { "calculate", input } }

local rows = {
  { "luma pipeline", function() return call(program, "calculate", input).result end },
  { "luma call_all(1)", function() return call_all(program, batch)[1].result.result end },
  { "luma host handler", function() return call(host_program, "calculate", input).result end },
  { "bare Lua call", function() return handler(input).result end },
}

for _, row in ipairs(rows) do
  local name, f = row[1], row[2]
  for _ = 1, 1000 do assert(f() == 5) end   -- states made, tables grown
  -- the collector frees at its own pace: start and end on a full collection
  collectgarbage()
  local a0, f0 = counts()
  for _ = 1, N do if f() ~= 5 then error(name .. " did not return 5") end end
  collectgarbage()
  local a1, f1 = counts()
  print(string.format("allocs %s %.1f %.1f", name, (a1 - a0) / N, (f1 - f0) / N))
end
