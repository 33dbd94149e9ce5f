-- What the benchmarks in bench/*/ share: the module paths of the build, the
-- timing protocol, and helpers for files, the shell and numbers. A script in
-- bench/<name>/ loads it with dofile(here .. "/../common.lua"). It runs on
-- Lua 5.4 and on LuaJIT (bench/validate times both).
local common = {}

local RUNS = 7
local RUN_SECONDS = 0.3
local CALIBRATE_SECONDS = 0.05
common.RUNS, common.RUN_SECONDS = RUNS, RUN_SECONDS

-- Puts the repository's lua/ and the build (LUMA_BUILD, relative to the root
-- unless absolute) on the module paths of a script in the directory here.
-- Returns the repository root.
function common.setup(here)
  local root = here .. "/../.."
  local build = os.getenv("LUMA_BUILD") or "build"
  if build:sub(1, 1) ~= "/" then build = root .. "/" .. build end
  -- the repository root too: the benches that ask use spec.support.mock_provider
  package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/?.lua;" .. package.path
  package.cpath = build .. "/?.so;" .. package.cpath
  return root
end

local clock = os.clock

local function run(loop, n)
  local t0 = clock()
  local passed = loop(n)
  return clock() - t0, passed
end

-- The number of calls loop(n) makes in about `seconds` of CPU time, found by
-- doubling n until one loop takes CALIBRATE_SECONDS.
function common.calibrate(loop, seconds)
  local n, elapsed = 1, 0
  while true do
    elapsed = run(loop, n)
    if elapsed >= CALIBRATE_SECONDS then break end
    n = n * 2
  end
  return math.max(1, math.floor(n * seconds / elapsed))
end

-- Calls per CPU second of one run of loop(n), and how many passed.
function common.rate(loop, n)
  local t, passed = run(loop, n)
  return n / t, passed
end

-- loop(n) makes n calls and returns how many passed. Returns calls per CPU
-- second, the median of RUNS runs of about RUN_SECONDS each; check(passed, n)
-- sees every one of those runs.
function common.measure(loop, check)
  local n = common.calibrate(loop, RUN_SECONDS)
  local rates = {}
  for i = 1, RUNS do
    local t, passed = run(loop, n)
    check(passed, n)
    rates[i] = n / t
  end
  return common.median(rates)
end

-- The median of a list of numbers (the lower middle one of an even count).
function common.median(list)
  local sorted = {}
  for i, x in ipairs(list) do sorted[i] = x end
  table.sort(sorted)
  return sorted[math.floor((#sorted + 1) / 2)]
end

-- A command's output, and whether it exited with 0.
function common.slurp(cmd)
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  local ok = f:close()
  return out, ok
end

function common.write(path, text)
  local f = assert(io.open(path, "wb"))
  assert(f:write(text))
  assert(f:close())
end

function common.shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Three significant digits, trailing zeros kept: 4.50, 0.0390, 123.
function common.sig3(x)
  return (string.format("%#.3g", x):gsub("%.$", ""))
end

-- A rate to three significant digits, with a k or M suffix; "-" for none.
function common.rate3(x)
  if not x then return "-" end
  x = tonumber(string.format("%.3g", x))
  if x >= 1e6 then return common.sig3(x / 1e6) .. "M" end
  if x >= 1e3 then return common.sig3(x / 1e3) .. "k" end
  return common.sig3(x)
end

return common
