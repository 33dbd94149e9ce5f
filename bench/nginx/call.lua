-- The call itself, without nginx: luma.ffi's start and f:json() of
-- examples/openresty's greet from LuaJIT, on a runtime with inline starts
-- (as in nginx). Prints the CPU µs a call costs, the median of 5 runs of
-- 50,000 calls (os.clock: every thread of the process). bench/nginx/run.lua
-- runs it: luajit bench/nginx/call.lua ROOT LIBLUMA
local root, library = arg[1] or ".", arg[2] or os.getenv("LUMA_LIBRARY")
package.path = root .. "/lua/?.lua;" .. package.path
local luma = require "luma.ffi"
luma.open(library)
local rt = luma.runtime { inline = true }
local program = rt:load(root .. "/examples/openresty/program.luma")
local BODY, N, RUNS = '{"name": "Ada"}', 50000, 5

local function loop(n)
  for _ = 1, n do
    local f = program:start("greet", BODY)
    local ok, json = f:json()
    if not ok then error(json) end
  end
end

loop(2000)
local us = {}
for i = 1, RUNS do
  local t0 = os.clock()
  loop(N)
  us[i] = (os.clock() - t0) / N * 1e6
end
table.sort(us)
print(("%.2f"):format(us[math.ceil(RUNS / 2)]))
rt:close()
