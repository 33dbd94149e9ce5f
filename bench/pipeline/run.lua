-- The pipeline benchmark: a direct tool call through every step of the
-- pipeline, against the bare handler call and against the same pipeline in
-- Node (zod, and Ajv). Run from the repository root by `make bench`:
--   LUMA_BUILD=build lua5.4 bench/pipeline/run.lua
-- Prints calls per second (the median of RUNS runs of about RUN_SECONDS each)
-- and microseconds per call, then the pipeline's overhead over the bare call
-- and the luma/Node ratios, with their targets.

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local common = dofile(here .. "/../common.lua")
local root = common.setup(here)

local luma = require "luma"
local cjson = require "cjson"

local slurp, write, shell_quote = common.slurp, common.write, common.shell_quote
local sig3, rate3 = common.sig3, common.rate3

-- issue 32's target for the overhead (issue 15 had set 1 µs, issue 3 2 µs),
-- issue 15's for the ratio (issue 3 had set 2x)
local OVERHEAD_TARGET_US = 1.2
local ZOD_RATIO_TARGET = 1.5

local HOST_OVERHEAD_TARGET_US = 0.6   -- issue 32, a handler registered by the host
local CONTRACT = here .. "/calculate.luma"
local HANDLERS = here .. "/tools.lua"

local function fail(fmt, ...)
  io.stderr:write("bench/pipeline: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

-- No cache, so every call runs the handler in the module's own state.
local program = luma.load(CONTRACT, { tool_modules = { HANDLERS }, config = false })
local call = program.call
local call_all = program.call_all
-- The same contract with the handler registered from this state (host.lua).
local host_program = dofile(here .. "/host.lua")(luma, here)

-- The same handler, loaded into this state and called with no pipeline.
local handler = assert(loadfile(HANDLERS, "t", setmetatable({ luma = luma }, { __index = _G })))().calculate

local input = { a = 2, b = 3, operation = "add" }
local invalid = { a = 2000000, b = 3, operation = "add" }
local batch = { { "calculate", input } }

-- Every path must give 5, and the pipeline must refuse the invalid input,
-- before anything is timed.
do
  local result, meta = call(program, "calculate", input)
  if result.result ~= 5 then fail("program:call returned %s", cjson.encode(result)) end
  if meta.cache_hit or meta.attempts ~= 1 then fail("the call did not run the handler once") end
  local outcome = call_all(program, batch)[1]
  if not (outcome.ok and outcome.result.result == 5) then fail("program:call_all did not return 5") end
  if handler(input).result ~= 5 then fail("the bare handler did not return 5") end
  if call(host_program, "calculate", input).result ~= 5 then fail("the host handler did not return 5") end
  local ok, err = pcall(call, program, "calculate", invalid)
  if ok or not luma.is_error(err) or err.code ~= "TOOL_INPUT_INVALID" then
    fail("the invalid input was not refused: %s", ok and "it passed" or tostring(err.message or err))
  end
end

-- The three loops have one shape: n calls on the same input table, each
-- checked for the result 5; they return the count. They are written out, not
-- built around a callback, so that the only call timed is the measured one.
local function loop_call(n)
  local passed = 0
  for _ = 1, n do
    if call(program, "calculate", input).result == 5 then passed = passed + 1 end
  end
  return passed
end

local function loop_call_all(n)
  local passed = 0
  for _ = 1, n do
    if call_all(program, batch)[1].result.result == 5 then passed = passed + 1 end
  end
  return passed
end

local function loop_host(n)
  local passed = 0
  for _ = 1, n do
    if call(host_program, "calculate", input).result == 5 then passed = passed + 1 end
  end
  return passed
end

local function loop_bare(n)
  local passed = 0
  for _ = 1, n do
    if handler(input).result == 5 then passed = passed + 1 end
  end
  return passed
end

-- Calls per second (common.measure), every one of them returning 5.
local function measure(loop, what)
  return common.measure(loop, function(passed, n)
    if passed ~= n then fail("%s: %d of %d calls returned 5", what, passed, n) end
  end)
end

local rates = {
  call = measure(loop_call, "program:call"),
  call_all = measure(loop_call_all, "program:call_all"),
  host = measure(loop_host, "the host handler's program:call"),
  bare = measure(loop_bare, "the bare call"),
}

-- ------------------------------------------------------------------ Node

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function last_line(text)
  local line
  for l in text:gmatch("[^\n]+") do
    if l:find("%S") then line = l end
  end
  return line and (line:gsub("^%s+", ""):gsub("%s+$", "")) or "no output"
end

-- The first line of npm's error that says what went wrong, with its code.
local function npm_reason(out)
  local code = out:match("npm error code (%S+)")
  for line in out:gmatch("[^\n]+") do
    local text = line:match("^npm error (.*%S)")
    if text and not (text:match("^code ") or text:match("^syscall ") or text:match("^errno ")
        or text:match("^path ") or text:match("^%s*at ") or text:match("^A complete log")) then
      return (code and "(" .. code .. ") " or "") .. text
    end
  end
  return last_line(out)
end

-- zod lives in bench/node_modules; installs it from bench/package-lock.json
-- when it is missing. Returns nil, or the reason it is not there.
local function ensure_zod()
  local bench = root .. "/bench"
  if exists(bench .. "/node_modules/zod/package.json") then return nil end
  if not select(2, slurp("command -v npm >/dev/null 2>&1")) then return "npm not found" end
  io.stderr:write("bench/pipeline: installing zod into bench/node_modules (npm ci)\n")
  local out, ok = slurp("npm ci --prefix " .. shell_quote(bench) ..
    " --no-audit --no-fund --loglevel=error --fetch-retries=1 --fetch-timeout=30000 2>&1")
  if not ok then return "npm ci failed: " .. npm_reason(out) end
  if not exists(bench .. "/node_modules/zod/package.json") then return "npm ci did not install zod" end
  return nil
end

-- node[pipeline] = { rate = n } or { unavailable = reason }; node.cpushare.
local function run_node()
  local node = { zod = {}, ajv = {} }
  local version, has_node = slurp("node --version 2>/dev/null")
  if not has_node then
    node.zod.unavailable, node.ajv.unavailable = "node not found", "node not found"
    return node
  end
  node.version = version:gsub("%s+$", "")
  local zod_missing = ensure_zod()
  local dir = slurp("mktemp -d"):gsub("%s+$", "")
  if dir == "" then fail("mktemp -d failed") end
  write(dir .. "/input.json", cjson.encode(input))
  write(dir .. "/invalid.json", cjson.encode(invalid))
  write(dir .. "/input.schema.json", program:json_schema("__tool_calculate_input", { format = "json" }))
  write(dir .. "/output.schema.json", program:json_schema("CalcResult", { format = "json" }))
  local out, ok = slurp("NODE_PATH=/usr/share/nodejs node " .. shell_quote(here .. "/node.js") .. " " ..
    shell_quote(dir) .. " 2>" .. shell_quote(dir .. "/stderr"))
  local f = io.open(dir .. "/stderr", "rb")
  local err = f and f:read("a") or ""
  if f then f:close() end
  os.execute("rm -rf " .. shell_quote(dir))
  if not ok then fail("node bench/pipeline/node.js failed: %s", last_line(err)) end
  -- Lines of "<zod|ajv>\t<rate|version|unavailable>\t<value>" and "node\tcpushare\t<share>".
  for line in out:gmatch("[^\n]+") do
    local name, key, value = line:match("^(%S+)\t(%S+)\t(.*)$")
    if name == "node" then
      node[key] = value
    elseif node[name] then
      node[name][key] = key == "rate" and tonumber(value) or value
    end
  end
  if zod_missing then node.zod = { unavailable = zod_missing } end
  for _, name in ipairs { "zod", "ajv" } do
    if not (node[name].rate or node[name].unavailable) then fail("node.js printed nothing for %s", name) end
  end
  return node
end

local node = run_node()

-- ----------------------------------------------------------------- report

-- Pads to a width in characters (µ is two bytes).
local function pad(s, width, left)
  local fill = string.rep(" ", math.max(0, width - utf8.len(s)))
  return left and s .. fill or fill .. s
end

local function row(name, a, b)
  io.write((pad(name, 20, true) .. pad(a, 10) .. pad(b, 10)):gsub("%s+$", ""), "\n")
end

local function rate_row(name, rate, unavailable)
  if not rate then
    io.write(pad(name, 20, true), "unavailable: ", unavailable, "\n")
    return
  end
  row(name, rate3(rate), sig3(1e6 / rate))
end

row("pipeline", "calls/s", "µs/call")
rate_row("luma pipeline", rates.call)
rate_row("luma call_all(1)", rates.call_all)
rate_row("luma host handler", rates.host)
rate_row("bare Lua call", rates.bare)
rate_row("node zod pipeline", node.zod.rate, node.zod.unavailable)
rate_row("node ajv pipeline", node.ajv.rate, node.ajv.unavailable)

local overhead = 1e6 / rates.call - 1e6 / rates.bare
io.write(string.format("overhead over the bare call: %s µs (target <= %g µs) %s\n", sig3(overhead),
  OVERHEAD_TARGET_US, overhead <= OVERHEAD_TARGET_US and "met" or "MISS"))
local host_overhead = 1e6 / rates.host - 1e6 / rates.bare
io.write(string.format("host handler's overhead over the bare call: %s µs (target <= %g µs) %s\n", sig3(host_overhead),
  HOST_OVERHEAD_TARGET_US, host_overhead <= HOST_OVERHEAD_TARGET_US and "met" or "MISS"))
-- Without the Node rate there is no ratio, so no verdict on its target either.
local function ratio_line(name, n, target)
  if not n.rate then
    io.write(string.format("luma / node %s pipeline: unavailable: no %s baseline (%s)\n", name, name,
      n.unavailable or "no rate"))
    return
  end
  local ratio = rates.call / n.rate
  io.write(string.format("luma / node %s pipeline: %s x%s\n", name, sig3(ratio),
    target and string.format(" (target >= %gx) %s", target, ratio >= target and "met" or "MISS") or ""))
end
ratio_line("zod", node.zod, ZOD_RATIO_TARGET)
ratio_line("ajv", node.ajv)

-- Allocations per call, counted in a child process that has
-- bench_allocs.so preloaded (allocs.lua); LUMA_BENCH_ALLOCS names that file
-- (the Makefile's bench target builds it). Without it, the line says so.
local allocs_so = os.getenv("LUMA_BENCH_ALLOCS")
if allocs_so and exists(allocs_so) then
  local cmd = string.format("LD_PRELOAD=%s %s %s %s 2>&1", shell_quote(allocs_so), shell_quote(arg[-1] or "lua5.4"),
    shell_quote(here .. "/allocs.lua"), shell_quote(allocs_so))
  local out = slurp(cmd)
  local per = {}
  for name, a in out:gmatch("allocs ([^\n]-) (%d+%.%d) %d+%.%d") do per[#per + 1] = name .. " " .. a end
  if #per == 0 then fail("%s printed no count:\n%s", cmd, out) end
  io.write("allocations per call: ", table.concat(per, ", "), " (malloc, calloc and realloc of the whole process)\n")
else
  io.write("allocations per call: unavailable (LUMA_BENCH_ALLOCS does not name bench_allocs.so)\n")
end

local versions = {}
if node.zod.version then versions[#versions + 1] = "zod " .. node.zod.version end
if node.ajv.version then versions[#versions + 1] = "ajv " .. node.ajv.version end
io.write(string.format("(median of %d runs of ~%.1f s each; luma %s, CPU time; node %s%s, wall time, CPU/wall %s)\n",
  common.RUNS, common.RUN_SECONDS, luma.version or "?", node.version or "-",
  #versions > 0 and " with " .. table.concat(versions, ", ") or "", node.cpushare or "?"))
os.exit(0)
