-- `make profile`: the direct call of bench/pipeline under callgrind. Runs
-- profile.lua twice, with N and 2N calls, so that what loading costs cancels
-- out: instructions per call = (I(2N) - I(N)) / N, and likewise for each
-- function, from callgrind_annotate's counts of instructions of its own.
-- Instruction counts do not depend on the machine's load: quote them before
-- and after a change.
--   LUMA_BUILD=build lua5.4 bench/pipeline/callgrind.lua [N] [TOP] [ROW]
-- ROW: pipeline (the default), host or bare, as for profile.lua.
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
local shell_quote, slurp = common.shell_quote, common.slurp

local N = tonumber(arg[1]) or 20000
local TOP = tonumber(arg[2]) or 25
local ROW = arg[3] or "pipeline"
local LUA = arg[-1] or "lua5.4"

local dir = slurp("mktemp -d \"${TMPDIR:-/tmp}/luma-profile-XXXXXX\""):gsub("%s+$", "")
assert(dir ~= "", "mktemp -d failed")

local function fail(fmt, ...)
  os.execute("rm -rf " .. shell_quote(dir))
  io.stderr:write("bench/pipeline/callgrind: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

-- Runs n calls under callgrind; returns the output file and its total instructions.
local function run(n)
  local out = dir .. "/callgrind." .. n
  local cmd = string.format("valgrind --tool=callgrind --callgrind-out-file=%s %s %s %d %s > %s 2>&1",
    shell_quote(out), shell_quote(LUA), shell_quote(here .. "/profile.lua"), n, shell_quote(ROW), shell_quote(dir .. "/log"))
  if not os.execute(cmd) then fail("%s failed:\n%s", cmd, slurp("cat " .. shell_quote(dir .. "/log"))) end
  local f = assert(io.open(out))
  local text = f:read("a")
  f:close()
  local total = text:match("\nsummary:%s*(%d+)") or text:match("\ntotals:%s*(%d+)")
  if not total then fail("no total in %s", out) end
  return out, tonumber(total)
end

-- { [function] = its own instructions } of a callgrind output file.
local function by_function(out)
  local annotate = slurp(string.format("callgrind_annotate --inclusive=no --auto=no --threshold=100 %s 2>/dev/null",
    shell_quote(out)))
  local counts = {}
  for line in annotate:gmatch("[^\n]+") do
    local count, name = line:match("^%s*([%d,]+)%s+%(%s*[%d.]+%%%)%s+(.+)$")
    if not count then count, name = line:match("^%s*([%d,]+)%s+(%S.*)$") end
    if count and name and not name:find("PROGRAM TOTALS", 1, true) then
      counts[name] = (counts[name] or 0) + tonumber((count:gsub(",", "")))
    end
  end
  return counts
end

local out1, one = run(N)
local out2, two = run(2 * N)
local per_call = (two - one) / N
local f1, f2 = by_function(out1), by_function(out2)
local rows = {}
for name, count in pairs(f2) do
  local d = (count - (f1[name] or 0)) / N
  if d > 0 then rows[#rows + 1] = { name = name, per_call = d } end
end
table.sort(rows, function(a, b) return a.per_call > b.per_call end)
if #rows == 0 then fail("callgrind_annotate printed no function") end

io.write(string.format("make profile: %s, %d and %d calls of bench/pipeline's calculate (row %s) under callgrind\n\n",
  _VERSION, N, 2 * N, ROW))
io.write(string.format("instructions per call: %.0f\n\n", per_call))
io.write(string.format("the %d functions that run the most instructions of their own per call " ..
  "(the difference between the two runs; ??? is lua5.4, which Debian ships stripped):\n", TOP))
for i = 1, math.min(TOP, #rows) do
  local r = rows[i]
  io.write(string.format("%6.2f%%  %7.0f  %s\n", 100 * r.per_call / per_call, r.per_call, r.name))
end
os.execute("rm -rf " .. shell_quote(dir))
