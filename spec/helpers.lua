-- Shared helpers for the specs: running the luma-lua command, compiling
-- programs, and temporary files.
local luma = require "luma"

local helpers = {}

local root = assert(io.popen("pwd")):read("*l")
helpers.root = root

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
helpers.quote = shell_quote

-- The folders helpers.project and helpers.copy_example made, and the files
-- named by helpers.tmpname, go when the spec file that made them ends,
-- whether or not it removed them itself.
local made = {}
do
  local ok, busted = pcall(require, "busted")
  if ok and type(busted) == "table" and busted.subscribe then
    busted.subscribe({ "file", "end" }, function()
      for _, dir in ipairs(made) do os.execute("rm -rf " .. shell_quote(dir)) end
      made = {}
      return nil, true
    end)
  end
end

local tmp_counter = 0
function helpers.tmpname(suffix)
  tmp_counter = tmp_counter + 1
  local dir = os.getenv("TMPDIR") or "/tmp"
  local path = string.format("%s/luma-spec-%d-%d%s", dir, math.random(1, 1e9), tmp_counter, suffix or "")
  made[#made + 1] = path
  return path
end

function helpers.read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

function helpers.write(path, content)
  local f = assert(io.open(path, "wb"))
  f:write(content)
  f:close()
  return path
end

-- Writes source to a temporary .luma file and returns its path.
function helpers.program_file(source, name)
  local path = helpers.tmpname(name or ".luma")
  return helpers.write(path, source)
end

-- Runs bin/luma-lua with the given arguments (a list); returns
-- { status = exit code, stdout = ..., stderr = ... }.
function helpers.run(args, opts)
  opts = opts or {}
  local out, err = helpers.tmpname(".out"), helpers.tmpname(".err")
  local parts = {}
  for _, a in ipairs(args) do parts[#parts + 1] = shell_quote(a) end
  local env = ""
  for _, k in ipairs(opts.unset or {}) do env = env .. "-u " .. k .. " " end
  for k, v in pairs(opts.env or {}) do env = env .. k .. "=" .. shell_quote(v) .. " " end
  if env ~= "" then env = "env " .. env end
  local input = opts.stdin and helpers.write(helpers.tmpname(".in"), opts.stdin)
  local stdin = input and ("< " .. shell_quote(input)) or "< /dev/null"
  -- under `make valgrind` the command itself runs under valgrind too
  local command = root .. "/bin/luma-lua"
  if os.getenv("LUMA_VALGRIND") then
    command = "LUMA_LUADIR=" .. shell_quote(root .. "/lua") .. " valgrind -q --error-exitcode=99 --leak-check=full " ..
      shell_quote(root .. "/" .. (os.getenv("LUMA_BUILD") or "build") .. "/luma-lua")
  end
  local cmd = string.format("cd %s && %s%s %s %s > %s 2> %s",
    shell_quote(opts.cwd or root), env, command, table.concat(parts, " "), stdin, out, err)
  local ok, how, code = os.execute(cmd)
  local status = code
  if type(ok) == "number" then status = ok / 256 end -- Lua 5.1
  local result = { status = status, stdout = helpers.read(out), stderr = helpers.read(err) }
  os.remove(out)
  os.remove(err)
  if input then os.remove(input) end
  return result
end

-- Runs a command under a pseudo-terminal, typing keys and reading the
-- screen (spec/support/pty_run.py): cmd is a list, steps are { send = s },
-- { expect = python_regex, timeout = s } and { sleep = s }. -> { ok, step
-- (the one that failed), output (all the command wrote), status }
function helpers.pty(cmd, cwd, env, steps)
  local script = helpers.write(helpers.tmpname(".json"), luma.json.encode {
    cmd = setmetatable(cmd, luma.array_mt), cwd = cwd, env = env, steps = setmetatable(steps, luma.array_mt),
  })
  local status, out, err = helpers.sh("env -u LD_PRELOAD python3 " .. shell_quote(root .. "/spec/support/pty_run.py") ..
    " " .. shell_quote(script))
  os.remove(script)
  assert(status == 0, out .. err)
  return luma.json.decode(out)
end

-- Compiles source; returns the program, or nil and the error object.
function helpers.compile(source, opts)
  local ok, result = pcall(luma.compile, source, "program.luma", opts)
  if ok then return result end
  return nil, result
end

-- The messages (without position) of every error in source.
function helpers.errors(source)
  local program, err = helpers.compile(source)
  if program then return {} end
  assert(luma.is_error(err), "expected a structured error, got " .. tostring(err))
  local messages = {}
  for _, d in ipairs(err.details.diagnostics) do messages[#messages + 1] = d.message end
  return messages, err
end

-- The single error message of source (fails if there is not exactly one).
function helpers.error(source)
  local messages = helpers.errors(source)
  assert(#messages == 1, "expected one error, got " .. #messages .. ":\n" .. table.concat(messages, "\n"))
  return messages[1]
end

-- A temporary project folder holding the given files ({ name = content });
-- sub-folders in names are created. Returns its path.
function helpers.project(files)
  local dir = helpers.tmpname("-project")
  assert(os.execute("mkdir -p " .. shell_quote(dir)))
  made[#made + 1] = dir
  for name, content in pairs(files) do
    local sub = name:match("^(.*)/[^/]*$")
    if sub then assert(os.execute("mkdir -p " .. shell_quote(dir .. "/" .. sub))) end
    helpers.write(dir .. "/" .. name, content)
  end
  return dir
end

-- luma.load of dir/program.luma; returns the program or nil and the error.
function helpers.load(dir, opts)
  local ok, result = pcall(luma.load, dir .. "/program.luma", opts)
  if ok then return result end
  return nil, result
end

-- The error raised by fn (which must raise one).
function helpers.raised(fn, ...)
  local ok, err = pcall(fn, ...)
  assert(not ok, "expected an error")
  return err
end

-- A clock tests control: now() advances only by sleep(ms), which it records.
function helpers.clock(start)
  local clock = { t = start or 1000000, sleeps = {} }
  clock.now = function() return clock.t end
  clock.sleep = function(ms)
    clock.sleeps[#clock.sleeps + 1] = ms
    clock.t = clock.t + ms
  end
  return clock
end

-- One of three values for the run at hand: plain, under AddressSanitizer
-- (SANITIZE=1 make test preloads its runtime), or under valgrind (make
-- valgrind): instrumented runs are slower at everything, so time bounds differ.
function helpers.by_instrumentation(plain, asan, valgrind)
  if os.getenv("LUMA_VALGRIND") then return valgrind end
  if (os.getenv("LD_PRELOAD") or ""):find("asan", 1, true) then return asan end
  return plain
end

-- A frame-time check of a game loop that run() runs once: it returns the
-- worst frame (ms) and the output. A frame over bound but under ten times it
-- is the machine taking the CPU away (a loaded machine preempts a process for
-- several ms), not the loop waiting on a call (which would take the tool's or
-- the ask's hundreds of ms): such a run is tried again, up to three in all.
-- Returns the last run's worst frame and output.
function helpers.frames_within(bound, run)
  local worst, out
  for _ = 1, 3 do
    worst, out = run()
    if not worst or worst < bound or worst >= 10 * bound then break end
  end
  return worst, out
end

-- A port of 127.0.0.1 free now, for a server a spec starts.
function helpers.free_port()
  local s = assert(require("socket").bind("127.0.0.1", 0))
  local _, port = s:getsockname()
  s:close()
  return port
end

-- The lines of a file ({} when there is no file).
function helpers.lines(path)
  local out = {}
  local f = io.open(path, "r")
  if not f then return out end
  for line in f:lines() do out[#out + 1] = line end
  f:close()
  return out
end

-- Runs a shell command; -> exit status (0: success), stdout, stderr.
function helpers.sh(cmd)
  local out, err = helpers.tmpname(".out"), helpers.tmpname(".err")
  local ok, _, code = os.execute("(" .. cmd .. ") > " .. shell_quote(out) .. " 2> " .. shell_quote(err))
  local status = (ok == true or ok == 0) and 0 or (type(code) == "number" and code or 1)
  local o, e = helpers.read(out), helpers.read(err)
  os.remove(out)
  os.remove(err)
  return status, o, e
end

-- The Debian packages a spec needs (a real nginx, LÖVE): installed when
-- missing and run as root; otherwise the spec fails saying what to install.
function helpers.ensure_packages(packages)
  local missing = {}
  for _, p in ipairs(packages) do
    if helpers.sh("dpkg-query -W -f='${Status}' " .. p .. " | grep -q 'ok installed'") ~= 0 then
      missing[#missing + 1] = p
    end
  end
  if #missing == 0 then return end
  local list = table.concat(missing, " ")
  local status, out, err = helpers.sh("[ \"$(id -u)\" = 0 ] && apt-get update -qq && " ..
    "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq " .. list)
  assert(status == 0, "cannot install " .. list .. " (run as root): " .. out .. err)
end

-- A copy of examples/NAME in a temporary folder; returns its path.
function helpers.copy_example(name)
  local dir = helpers.tmpname("-" .. name)
  -- (cp without the sanitizers' preloaded runtime, under which it can fail on large files)
  assert(os.execute("env -u LD_PRELOAD cp -r " .. shell_quote(root .. "/examples/" .. name) .. " " .. shell_quote(dir)))
  made[#made + 1] = dir
  return dir
end

-- A real nginx with its Lua module, started from dir (its nginx.conf listens
-- on 127.0.0.1:8080, replaced by a free port) with LUMA_LIBRARY and
-- LUMA_LUADIR set; stop() stops it and removes dir. One worker.
local Nginx = {}
Nginx.__index = Nginx
helpers.Nginx = Nginx

function helpers.nginx(dir)
  helpers.ensure_packages { "nginx", "libnginx-mod-http-lua", "luajit2" }
  local build = root .. "/" .. (os.getenv("LUMA_BUILD") or "build")
  local port = helpers.free_port()
  local conf = helpers.read(dir .. "/nginx.conf"):gsub("127%.0%.0%.1:8080", "127.0.0.1:" .. port)
  helpers.write(dir .. "/nginx.conf", conf)
  local self = setmetatable({ dir = dir, port = port, url = "http://127.0.0.1:" .. port }, Nginx)
  -- as root, the worker must run as root to read the run's private temporary folder
  local user = helpers.sh("[ \"$(id -u)\" = 0 ]") == 0 and " -g 'user root;'" or ""
  -- (under the sanitizers, nginx keeps the preloaded runtime libluma needs,
  -- without leak detection: nginx's own allocations are not ours to judge)
  self.cmd = "cd " .. shell_quote(dir) .. " && env ASAN_OPTIONS=detect_leaks=0 LUMA_LIBRARY=" .. shell_quote(build .. "/libluma.so") ..
    " LUMA_LUADIR=" .. shell_quote(root .. "/lua") .. " nginx -p " .. shell_quote(dir .. "/") .. " -c nginx.conf -e " ..
    shell_quote(dir .. "/error.log") .. user
  local status, out, err = helpers.sh(self.cmd)
  if status ~= 0 then
    local log = io.open(dir .. "/error.log") and helpers.read(dir .. "/error.log") or ""
    os.execute("rm -rf " .. shell_quote(dir))
    error("nginx did not start: " .. out .. err .. log)
  end
  local socket = require "socket"
  for _ = 1, 100 do
    local c = socket.tcp()
    c:settimeout(0.1)
    local ok = c:connect("127.0.0.1", port)
    c:close()
    if ok then break end
    socket.sleep(0.05)
  end
  return self
end

function Nginx:signal(name)
  local status, out, err = helpers.sh(self.cmd .. " -s " .. name)
  return status, out .. err
end

function Nginx:stop()
  if self.stopped then return end
  self.stopped = true
  local pid = io.open(self.dir .. "/nginx.pid") and helpers.read(self.dir .. "/nginx.pid"):match("%d+")
  self:signal("stop")
  for _ = 1, 100 do
    if not pid or helpers.sh("kill -0 " .. pid .. " 2>/dev/null") ~= 0 then break end
    require("socket").sleep(0.05)
  end
  if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
  os.execute("rm -rf " .. shell_quote(self.dir))
end

function Nginx:log()
  local f = io.open(self.dir .. "/error.log")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

helpers.calculate = [[
schema CalcResult {
  result: float
}

tool calculate(
  a: float @range(0, 1000000),
  b: float @range(0, 1000000),
  operation: enum["add", "multiply"] @desc("Operation to perform")
) -> CalcResult {
  side_effects: "none"
  cache: true
}
]]

return helpers
