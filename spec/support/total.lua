-- Sums the counts each suite appended ("passed failed" per line) and prints
-- the line CI reads: "N passed, N failed". A suite that did not report
-- counts as one failure. Usage: lua total.lua RESULTS EXPECTED_SUITES
local path, expected = arg[1], tonumber(arg[2]) or 1
local passed, failed, suites = 0, 0, 0
local f = io.open(path, "r")
if f then
  for line in f:lines() do
    local p, q = line:match("^(%d+) (%d+)$")
    if p then
      passed, failed, suites = passed + tonumber(p), failed + tonumber(q), suites + 1
    end
  end
  f:close()
end
if suites < expected then
  io.stderr:write(string.format("%d of %d test suites did not report\n", expected - suites, expected))
  failed = failed + (expected - suites)
end
print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and passed > 0 and 0 or 1)
