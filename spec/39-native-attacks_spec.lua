-- Native attacks from inside a handler process (issue 24): build/attack.so
-- (spec/c/attack.c), preloaded into a host, runs machine code in the
-- process-isolated handler's process after its confinement, when the
-- handler asks (require "luma_attack.NAME"), as a VM exploit would. Every
-- attack of the issue is refused, the host survives it, and its files,
-- output and scheduling are untouched; a handler process dies with its
-- host; no host environment variable or descriptor reaches it. As root, and
-- as an unprivileged user (nobody) when the specs run as root.
local core = require "luma.core"
local h = require "spec.helpers"

local BUILD = h.root .. "/" .. (os.getenv("LUMA_BUILD") or "build")
local ATTACK_SO = BUILD .. "/attack.so"
local LANDLOCK = core.confinement().landlock_abi
-- the tools the spec runs, without a sanitizer's runtime the run preloads
-- (its leak check fails them)
local UNPRELOADED = "env -u LD_PRELOAD "

local ATTACKS = { "mem", "config", "setown", "signals", "limits", "stdout", "mount", "tiocsti", "namespaces",
  "userfaultfd", "environ", "fds", "pid", "socket", "caps" }
-- envmem scans every readable mapping of the child for the host's secret:
-- under ASan those include its shadow memory, whose reads the sanitizer
-- stops, so the scan is proved in the plain run
if h.by_instrumentation(true, false, false) then ATTACKS[#ATTACKS + 1] = "envmem" end
-- The red team's attacks (branch redteam): each line of their reports must
-- say refused. Where one SUCCEEDED the confinement has a hole.
local REDTEAM = { "metadata", "sysv", "memfd", "proc", "sigio" }

-- What each attack must report: every try refused, and these lines.
local EXPECTED = {
  mem = { "open /proc/host/mem: refused", "process_vm_writev host: refused", "ptrace attach host: refused" },
  config = { "write luma.config.json: refused", "write tools.lua: refused", "create planted.lua: refused" },
  setown = { "fcntl F_SETOWN host: refused", "fcntl F_SETOWN host, high bits: refused",
    "fcntl F_SETOWN_EX host: refused", "fcntl F_SETSIG SIGKILL: refused" },
  signals = { "kill host SIGKILL: refused", "kill host SIGKILL, high bits: refused", "tgkill host SIGKILL: refused",
    "kill process group SIGKILL: refused" },
  limits = { "prlimit host RLIMIT_FSIZE 0: refused", "prlimit host, high bits: refused",
    "setpriority host 19: refused", "setpriority user 19: refused", "sched_setscheduler host SCHED_IDLE: refused",
    "sched_setaffinity host: refused", "ioprio_set host idle: refused", "write /proc/host/oom_score_adj: refused" },
  stdout = { "write /proc/host/fd/1: refused" },
  mount = { "fsopen tmpfs: refused", "open_tree /: refused", "fspick /: refused", "move_mount: refused",
    "mount_setattr /: refused", "umount2 /proc: refused", "mount tmpfs: refused", "pivot_root: refused" },
  tiocsti = { "TIOCSTI, bit 32 set, fd 0: refused", "TIOCSTI, bit 32 set, fd 2: refused" },
  namespaces = { "thread clone with CLONE_NEWNET: refused", "thread clone with CLONE_NEWNS: refused",
    "thread clone with CLONE_NEWUTS: refused", "unshare CLONE_NEWUSER: refused", "setns: refused" },
  userfaultfd = { "ioctl USERFAULTFD_IOC_NEW: refused", "ioctl USERFAULTFD_IOC_NEW, bit 32 set: refused",
    "userfaultfd(): refused" },
  environ = { "environ variables: 0", "/proc/self/environ bytes: 0" },
  -- the host's stderr is a file here: the child's fd 2 is a pipe of its own
  fds = { "fd 0: /dev/null", "fd 1: /dev/null", "fd 2: pipe:[" },
  socket = { "socket AF_UNIX: refused" },
  caps = {},
  -- (redteam2) the secret of the host's environment in none of the child's
  -- readable memory: not in the stack's strings, nor a copy elsewhere
  envmem = { "host secret in memory: refused (ENOENT)" },
}
-- In a user namespace of its own a root host's child holds no capability
-- outside it; as nobody, the file permissions refuse these anyway.
local USERNS = false
for _, layer in ipairs(core.confinement().holds) do USERNS = USERNS or layer:find("^user namespace") ~= nil end
if USERNS then
  EXPECTED.caps = { "read another user's mode-000 file: refused (EACCES)", "chown tools.lua: refused" }
end
-- Without Landlock the files of the host's user stay reachable: said in
-- README's "Limits, honestly", and these lines are not expected then.
if LANDLOCK > 0 then
  -- (redteam2) memory-backed folders, the root, and /proc/self's links out
  table.insert(ATTACKS, "reach")
  EXPECTED.reach = { "create /dev/shm/luma-attack: refused", "create /tmp/luma-attack-reach: refused",
    "open / to list it: refused", "open /proc/self/root/etc/hostname: refused", "open /proc/self/cwd/..: refused" }
  table.insert(EXPECTED.mem, "open /proc/host/mem: refused (EACCES)")
  table.insert(EXPECTED.userfaultfd, "open /dev/userfaultfd: refused")
else
  EXPECTED.config, EXPECTED.stdout = {}, {}
  EXPECTED.limits[#EXPECTED.limits] = nil
end

local SOURCE = [[
schema Report { text: string }
tool attack(name: string) -> Report { timeout: 5000 }
tool spin() -> Report { timeout: 20000 }
]]

local TOOLS = [[
return {
  attack = function(input) return { text = require("luma_attack." .. input.name) } end,
  spin = function() while true do end end,
}
]]

-- The host: a Lua program on `require "luma"` that loads the project and
-- calls the attacks named on its command line, printing each report; then,
-- with "kill" or "exit" first, starts a call that spins and dies with it in
-- flight (SIGKILL from a shell it starts, or os.exit), after printing the
-- handler process's pid.
local HOST = [[
local root, build, dir, mode = ...
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = build .. "/?.so;" .. package.cpath
local luma = require "luma"
local p = luma.load(dir .. "/program.luma")
local function attack(name)
  local ok, r = pcall(p.call, p, "attack", { name = name })
  return ok and r.text or ("ERROR " .. tostring(type(r) == "table" and r.message or r) .. "\n")
end
if mode == "kill" or mode == "exit" then
  io.write("child ", attack("pid"))
  io.flush()
  local c = p:start("spin", {})
  c:wait(300)
  if mode == "exit" then os.exit(0, false) end
  local f = assert(io.open("/proc/self/stat"))
  local me = f:read("l"):match("^(%d+)")
  f:close()
  os.execute("kill -KILL " .. me)
  return
end
for i = 5, select("#", ...) do
  local name = select(i, ...)
  io.write("== ", name, "\n", attack(name))
  io.flush()
end
local f = assert(io.open("/proc/self/stat"))
local stat = f:read("l")
f:close()
local fields = {}
for field in stat:match("%) (.*)"):gmatch("%S+") do fields[#fields + 1] = field end
f = assert(io.open("/proc/self/oom_score_adj"))
io.write("host nice ", fields[17], " policy ", fields[39], " oom_score_adj ", f:read("l"), "\n")
f:close()
io.write("host alive\n")
]]

local function project(user)
  -- a folder of its own, which an unprivileged user can reach and write
  -- (so that the confinement, not the permissions, refuses its files)
  local status, dir = h.sh(UNPRELOADED .. "mktemp -d /tmp/luma-attack-XXXXXX")
  assert(status == 0)
  dir = dir:gsub("%s+$", "")
  local files = { ["program.luma"] = SOURCE, ["tools.lua"] = TOOLS, ["host.lua"] = HOST,
    ["luma.config.json"] = core.json_encode({ tool_modules = { "tools.lua" },
      tool_module_policy = { sandbox = "strict", isolation = "process", max_concurrency = 1,
        max_memory_mb = 16 } }) }
  for _, name in ipairs(ATTACKS) do files["luma_attack/" .. name .. ".lua"] = "" end
  for _, name in ipairs(REDTEAM) do files["luma_attack/" .. name .. ".lua"] = "" end
  for _, name in ipairs { "stderr", "x32", "int80" } do files["luma_attack/" .. name .. ".lua"] = "" end
  files["luma_attack/sigiokill.lua"] = ""
  files["luma_attack/rootcaps.lua"] = ""
  files["luma_attack/terminal.lua"] = ""
  assert(os.execute(UNPRELOADED .. "mkdir -p " .. h.quote(dir .. "/luma_attack")))
  for name, content in pairs(files) do h.write(dir .. "/" .. name, content) end
  assert(os.execute(UNPRELOADED .. "chmod -R a+rwX " .. h.quote(dir)))
  -- a file of another user (nobody's for a root host, this user's for
  -- nobody), which only root's capabilities could read
  h.write(dir .. "/secret.txt", "hunter3")
  if not user then os.execute(UNPRELOADED .. "chown 65534:65534 " .. h.quote(dir .. "/secret.txt") .. " 2>/dev/null") end
  assert(os.execute(UNPRELOADED .. "chmod 000 " .. h.quote(dir .. "/secret.txt")))
  return dir
end

local function remove(dir)
  os.execute(UNPRELOADED .. "rm -rf " .. h.quote(dir))
end

local function is_root()
  return select(2, h.sh(UNPRELOADED .. "id -u")):match("^0") ~= nil
end

-- Runs the host in dir, as `user` ("nobody" or nil), with the attack
-- library preloaded after what the run already preloads (a sanitizer's
-- runtime), a secret in its environment, and `redirect` for stderr.
local function host_command(dir, args, user, redirect, env)
  local preload = os.getenv("LD_PRELOAD")
  preload = (preload and preload ~= "" and preload .. " " or "") .. ATTACK_SO
  local as = user and "setpriv --reuid=65534 --regid=65534 --clear-groups " or ""
  local quoted = {}
  for i, a in ipairs(args) do quoted[i] = h.quote(a) end
  -- (the shell waits rather than exec the host: a host that is killed is
  -- reported on the stderr of the run, not of busted)
  local cmd = string.format("cd %s && env " .. (env or "") .. " LUMA_ATTACK_SECRET=hunter2 LD_PRELOAD=%s %slua5.4 host.lua %s %s %s %s < /dev/null %s; exit $?",
    h.quote(dir), h.quote(preload), as, h.quote(h.root), h.quote(BUILD), h.quote(dir), table.concat(quoted, " "),
    redirect or "")
  return cmd
end

local function host(dir, args, user, redirect, env)
  return h.sh(host_command(dir, args, user, redirect, env))
end

-- The report of each attack: { name = text }.
local function reports(out)
  local by = {}
  local name
  for line in out:gmatch("[^\n]*") do
    local n = line:match("^== (%S+)$")
    if n then name = n; by[n] = ""
    elseif name and line ~= "" then by[name] = by[name] .. line .. "\n" end
  end
  return by
end

local function contains(haystack, needle)
  return haystack:find(needle, 1, true) ~= nil
end

-- Whether process pid is gone (or a zombie: dead, waiting for its reaper).
local function dead(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return true end
  local stat = f:read("a")
  f:close()
  return stat:match("%) (%a)") == "Z"
end

local function all_attacks(user)
  local dir = project(user)
  local config = h.read(dir .. "/luma.config.json")
  local code = h.read(dir .. "/tools.lua")
  local ok, err = pcall(function()
    local status, out, errout = host(dir, { "attacks", ATTACKS[1], table.unpack(ATTACKS, 2) }, user)
    assert.are.equal(0, status, errout)
    assert.is_truthy(contains(out, "host alive\n"), out)
    assert.is_falsy(contains(out, "FORGED"), out)
    assert.is_falsy(contains(out, "SUCCEEDED"), out)
    assert.is_falsy(contains(out, "hunter2"), out)
    assert.is_truthy(out:match("host nice 0 policy 0 oom_score_adj 0\n"), out)
    local by = reports(out)
    for _, name in ipairs(ATTACKS) do
      assert.is_truthy(by[name], "no report of " .. name .. ":\n" .. out)
      assert.is_falsy(contains(by[name], "ERROR"), by[name])
      for _, line in ipairs(EXPECTED[name] or {}) do
        assert.is_truthy(contains(by[name], line), name .. ": no '" .. line .. "' in:\n" .. by[name])
      end
    end
    assert.are.equal(config, h.read(dir .. "/luma.config.json"))
    assert.are.equal(code, h.read(dir .. "/tools.lua"))
    local _, owner = h.sh(UNPRELOADED .. "stat -c %u " .. h.quote(dir .. "/tools.lua"))
    local _, me = h.sh(UNPRELOADED .. "id -u")
    assert.are.equal(me, owner)
    assert.is_nil(io.open(dir .. "/planted.lua"))
  end)
  remove(dir)
  if not ok then error(err, 0) end
end

-- a ThreadSanitizer build cannot be loaded by a host that does not preload
-- its runtime, which luma.core takes out of the environment there; under
-- valgrind the child is confined less, as the README says (no Landlock,
-- which valgrind does not know, no RLIMIT_AS, its environment area left),
-- so these attacks are proved in the plain and the ASan runs
local describe_native = (core.thread_sanitizer or os.getenv("LUMA_VALGRIND")) and pending or describe

describe_native("native attacks from a process-isolated handler (issue 24)", function()
  setup(function()
    assert(io.open(ATTACK_SO), "no " .. ATTACK_SO .. ": make " .. ATTACK_SO)
  end)

  it("are all refused, as root, and the host survives unchanged", function()
    all_attacks(nil)
  end)

  it("are all refused as an unprivileged user (nobody)", function()
    if not is_root() then
      pending("needs root to run the host as nobody")
      return
    end
    all_attacks("nobody")
  end)

  it("the handler process gets no descriptor of a host started with stderr closed", function()
    local dir = project()
    local ok, err = pcall(function()
      local status, out = host(dir, { "attacks", "fds" }, nil, "2>&-")
      assert.are.equal(0, status, out)
      local fds = reports(out).fds
      assert.is_truthy(fds, out)
      for fd = 0, 2 do
        assert.is_truthy(fds:match("fd " .. fd .. ": /dev/null\n"), fds)
      end
    end)
    remove(dir)
    if not ok then error(err, 0) end
  end)

  it("luma-lua check --verbose says which layers hold on this machine", function()
    local dir = project()
    local ok, err = pcall(function()
      local r = h.run({ "check", dir .. "/program.luma", "--verbose" })
      assert.are.equal(0, r.status, r.stderr)
      assert.matches("process isolation on this machine:\n", r.stdout)
      assert.matches("\n  holds: seccomp: ", r.stdout)
      assert.matches("\n  holds: parent%-death signal: ", r.stdout)
      -- SO_PASSRIGHTS or the filter's rules alone, said either way
      assert.is_truthy(contains(r.stdout, "\n  holds: descriptors to the host: none (SO_PASSRIGHTS 0")
        or contains(r.stdout, "\n  missing: SO_PASSRIGHTS (Linux 6.16): "), r.stdout)
      if LANDLOCK >= 6 then
        assert.matches("\n  holds: Landlock signal and abstract%-socket scoping\n", r.stdout)
      elseif LANDLOCK == 0 then
        assert.matches("\n  missing: Landlock: none ", r.stdout)
      end
      assert.matches("\nok\n$", r.stdout)
    end)
    remove(dir)
    if not ok then error(err, 0) end
  end)

  for _, user in ipairs { false, "nobody" } do
    it("the red team's attacks are refused" .. (user and " as nobody" or " as root"), function()
      if user and not is_root() then
        pending("needs root to run the host as nobody")
        return
      end
      local dir = project(user or nil)
      -- the host's user owns its project, as it would
      if user then os.execute(UNPRELOADED .. "chown 65534:65534 " .. h.quote(dir .. "/luma.config.json")) end
      local config = h.read(dir .. "/luma.config.json")
      local _, mode = h.sh(UNPRELOADED .. "stat -c %a " .. h.quote(dir .. "/luma.config.json"))
      local ok, err = pcall(function()
        local status, out, errout = host(dir, { "attacks", table.unpack(REDTEAM) }, user or nil)
        assert.are.equal(0, status, errout)
        assert.is_truthy(contains(out, "host alive\n"), out)
        local by = reports(out)
        for _, name in ipairs(REDTEAM) do
          assert.is_truthy(by[name], "no report of " .. name .. ":\n" .. out)
          assert.is_falsy(contains(by[name], "ERROR"), by[name])
        end
        assert.is_falsy(contains(out, "SUCCEEDED"), out)
        assert.are.equal(config, h.read(dir .. "/luma.config.json"))
        local _, now = h.sh(UNPRELOADED .. "stat -c %a " .. h.quote(dir .. "/luma.config.json"))
        assert.are.equal(mode, now)
      end)
      remove(dir)
      if not ok then error(err, 0) end
    end)
  end

  -- Linux 6.10 and 6.11 have Landlock's ABI 5, Ubuntu 24.04's 6.8 ABI 4,
  -- Debian 12's 6.1 ABI 2: no signal scoping, the filter alone stands
  -- between a child and SIGIO to its host (FIOSETOWN on its socket).
  it("a child cannot send its host SIGIO without Landlock's signal scoping (ABI 5)", function()
    if LANDLOCK < 5 then
      pending("needs Landlock ABI 5 or later to stand for it")
      return
    end
    local dir = project()
    local ok, err = pcall(function()
      local status, out, errout = host(dir, { "attacks", "sigiokill", "pid" }, nil, nil, "LUMA_ATTACK_LANDLOCK_ABI=5")
      assert.are.equal(0, status, "host ended with " .. tostring(status) .. ": " .. errout .. out)
      assert.is_truthy(contains(out, "host alive\n"), out)
    end)
    remove(dir)
    if not ok then error(err, 0) end
  end)

  -- Where user namespaces are refused (a sysctl, a security module), a root
  -- host's child keeps root's capabilities; Landlock does not see chown or
  -- chmod, so they reach every file by path, not only the granted folders
  -- (LUMA_ATTACK_NO_USERNS makes the child's unshare fail).
  it("a root host's child without a user namespace cannot chown or chmod files outside its folders", function()
    if not is_root() then
      pending("needs root")
      return
    end
    local dir = project()
    local outside = dir .. ".outside"
    local ok, err = pcall(function()
      h.write(outside, "x")
      assert(os.execute(UNPRELOADED .. "chown 65534:65534 " .. h.quote(outside) .. " && chmod 600 " .. h.quote(outside)))
      local status, out, errout = host(dir, { "attacks", "rootcaps" }, nil, nil, "LUMA_ATTACK_NO_USERNS=1")
      assert.are.equal(0, status, errout)
      local report = reports(out).rootcaps
      assert.is_truthy(report, out)
      assert.is_falsy(contains(report, "SUCCEEDED"), report)
      local _, st = h.sh(UNPRELOADED .. "stat -c '%u %a' " .. h.quote(outside))
      assert.are.equal("65534 600", (st:gsub("%s+$", "")))
    end)
    os.remove(outside)
    remove(dir)
    if not ok then error(err, 0) end
  end)

  -- A host run from an interactive shell, its stderr the terminal: the
  -- child is in the host's session, so it can make a process group of its
  -- own the terminal's foreground one and set TOSTOP; the host's next write
  -- to the terminal stops it (SIGTTOU comes from the terminal: no filter
  -- rule or Landlock scope sees it).
  it("a child cannot stop a host on a terminal (TIOCSPGRP, TOSTOP)", function()
    local dir = project()
    local ok, err = pcall(function()
      local cmd = "( " .. host_command(dir, { "attacks", "terminal", "pid" }, nil, "") .. " ); echo \"host ended: $?\""
      local _, out = h.sh(UNPRELOADED .. "python3 " .. h.quote(h.root .. "/spec/support/pty_job.py") .. " 20 bash -c "
        .. h.quote("set -m; " .. cmd))
      assert.is_truthy(contains(out, "host alive"), out)
      assert.is_truthy(contains(out, "host ended: 0\n"), out)
    end)
    remove(dir)
    if not ok then error(err, 0) end
  end)

  -- Second red team (branch redteam2): the project is readable in every
  -- handler process, and flock(LOCK_EX) (or a POSIX read lock) needs only
  -- a read descriptor. The child locked the file idempotency store's lock
  -- file and idled; the host's next idempotent call waited in flock() with
  -- no timeout. The filter refuses flock and the fcntls that set a lock or
  -- a lease.
  it("a child cannot hold a lock the host waits on (the file store's flock)", function()
    local dir = project()
    local ok, err = pcall(function()
      h.write(dir .. "/luma_attack/flock.lua", "")
      h.write(dir .. "/program.luma", SOURCE .. [[
tool put(request_id: string) -> Report {
  side_effects: "write"
  idempotent: true
  idempotency_key: request_id
  timeout: 2000
}
]])
      h.write(dir .. "/tools.lua", [[
return {
  attack = function(input) return { text = require("luma_attack." .. input.name) } end,
  put = function(input) return { text = "put " .. input.request_id } end,
}
]])
      h.write(dir .. "/luma.config.json", core.json_encode({ tool_modules = { "tools.lua" },
        idempotency_store = { type = "file" },
        tool_module_policy = { sandbox = "strict", isolation = "process", max_concurrency = 1, max_memory_mb = 16 } }))
      h.write(dir .. "/host.lua", [[
local root, build, dir = ...
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = build .. "/?.so;" .. package.cpath
local luma = require "luma"
local p = luma.load(dir .. "/program.luma")
local function call(tool, input)
  local ok, r = pcall(p.call, p, tool, input)
  return ok and r.text or ("ERROR " .. tostring(type(r) == "table" and r.message or r))
end
print(call("put", { request_id = "a" }))
io.write("== flock", string.char(10), call("attack", { name = "flock" }))
io.flush()
print(call("put", { request_id = "b" }))
print("host alive")
]])
      local status, out, errout = h.sh(UNPRELOADED .. "timeout 15 sh -c " .. h.quote(host_command(dir, {})))
      assert.is_falsy(contains(out, "SUCCEEDED"), out)
      assert.is_truthy(contains(out, "put b\n"), "the host's idempotent call blocked (status "
        .. tostring(status) .. "):\n" .. out .. errout)
    end)
    remove(dir)
    if not ok then error(err, 0) end
  end)

  -- A handler process's fd 2 was the host's stderr (when it came across
  -- the host's exec): a file the child could seek, truncate and read back,
  -- or a pipe or terminal it wrote escape sequences to unchecked. It is a
  -- pipe of its own whose bytes the host relays: handler_stderr_max_bytes
  -- a call, each line marked, control characters as \xNN. As root and as
  -- nobody, the host's stderr a file, then a pipe (a FIFO a reader drains:
  -- the host reopens it without blocking, or, as nobody, cannot and polls).
  for _, user in ipairs { false, "nobody" } do
    for _, kind in ipairs { "file", "pipe" } do
      it("the handler process's stderr is a pipe the host relays, bounded (its stderr a " .. kind
        .. (user and ", nobody)" or ", root)"), function()
        if user and not is_root() then
          pending("needs root to run the host as nobody")
          return
        end
        local dir = project(user or nil)
        local ok, err = pcall(function()
          local errfile = dir .. "/host-stderr.txt"
          h.write(errfile, "the host's own line\n")
          local status, out, errout
          if kind == "file" then
            status, out, errout = host(dir, { "attacks", "stderr", "pid" }, user or nil, "2>>" .. h.quote(errfile))
          else
            local fifo = dir .. "/host-stderr.fifo"
            assert(os.execute(UNPRELOADED .. "mkfifo " .. h.quote(fifo)))
            status, out, errout = h.sh("cat " .. h.quote(fifo) .. " >> " .. h.quote(errfile) .. " & "
              .. host_command(dir, { "attacks", "stderr", "pid" }, user or nil, "2>" .. h.quote(fifo)) .. "; wait")
          end
          assert.are.equal(0, status, errout)
          assert.is_truthy(contains(out, "host alive\n"), out)
          local report = reports(out).stderr
          assert.is_truthy(report, out)
          for _, line in ipairs { "fd 2: a pipe\n", "lseek fd 2: refused (ESPIPE)", "ftruncate fd 2: refused (EINVAL)",
            "pread fd 2: refused (ESPIPE)", "wrote to fd 2: 262144 bytes" } do
            assert.is_truthy(contains(report, line), "no '" .. line .. "' in:\n" .. report)
          end
          local relayed = h.read(errfile)
          assert.are.equal("the host's own line\n", relayed:sub(1, 20))
          assert.is_truthy(contains(relayed, "\n[tools.lua] escape: \\x1b]52;c;aGFja2Vk\\x07 \\x1b]0;owned\\x07 "
            .. "\\xc2\\x9b done\n"), relayed:sub(1, 400))
          assert.is_falsy(relayed:find("[\0-\8\11-\31\127]"), "a control character reached the host's stderr")
          assert.is_falsy(contains(relayed, "\194\155"), "a C1 control reached the host's stderr")
          local limit = core.limits.handler_stderr_max_bytes
          local ys = select(2, relayed:gsub("y", ""))
          assert.is_true(ys <= limit, ys .. " bytes relayed")
          if kind == "file" then
            -- a file takes every write: the bound is reached and said
            assert.is_truthy(contains(relayed, "\n[tools.lua] (its stderr passed " .. limit
              .. " bytes in this call: the rest is dropped)\n"), relayed:sub(-300))
            assert.is_true(ys > limit / 2, ys .. " bytes relayed")
            for line in relayed:gmatch("[^\n]+") do
              assert.is_truthy(line == "the host's own line" or line:find("^%[tools%.lua%] "), line:sub(1, 200))
            end
          else
            -- a pipe takes what it has room for: the host never waits for
            -- its reader, and says what it dropped
            assert.is_truthy(contains(relayed, " bytes in this call: the rest is dropped)\n")
              or relayed:find("\n%[tools%.lua%] %(%d+ bytes of its stderr dropped: the host's stderr was full%)\n"),
              relayed:sub(-300))
          end
        end)
        remove(dir)
        if not ok then error(err, 0) end
      end)
    end
  end

  -- A system call of another architecture meets none of the filter's
  -- rules (they name this one's calls): libseccomp's "bad architecture"
  -- action, by default, killed only the calling thread, and the rest of
  -- the process ran on. It ends the whole process: x32's numbers (bit 30
  -- set) reach the filter on every x86-64 kernel; i386's int $0x80 does
  -- where the kernel runs 32-bit code (elsewhere it is SIGSEGV before any
  -- filter: test_confine runs the filter's program on i386's calls). The
  -- host reports the death and its next call gets a new process.
  it("a system call of another architecture ends the handler process, and the host goes on", function()
    local dir = project()
    local ok, err = pcall(function()
      local status, out, errout = host(dir, { "attacks", "x32", "int80", "pid" })
      assert.are.equal(0, status, errout)
      local by = reports(out)
      assert.are.equal("ERROR handler process died: signal 31 (SIGSYS: it made a system call of another "
        .. "architecture, which its seccomp filter ends the process for)\n", by.x32)
      assert.is_truthy(by.int80 == by.x32 or by.int80 == "ERROR handler process died: signal 11\n", by.int80)
      assert.is_truthy(by.pid and by.pid:match("^%d+\n"), out)
      assert.is_truthy(contains(out, "host alive\n"), out)
    end)
    remove(dir)
    if not ok then error(err, 0) end
  end)

  -- Second red team: a host whose stderr is a directory (started with 2</)
  -- passed it to the child, which listed that directory through it
  -- (Landlock checks listing when a directory is opened, not on a
  -- descriptor opened before). child_reset keeps fd 2 only when it is not
  -- a directory.
  it("the handler process gets no directory descriptor from the host's stderr", function()
    local dir = project()
    local ok, err = pcall(function()
      h.write(dir .. "/luma_attack/reach.lua", "")
      local _, out = host(dir, { "attacks", "reach" }, nil, "2</")
      assert.is_truthy(contains(out, "host alive\n"), out)
      assert.is_falsy(contains(out, "directory descriptor"), out)
    end)
    remove(dir)
    if not ok then error(err, 0) end
  end)

  -- Second red team: threads are allowed, and with small stacks RLIMIT_AS
  -- does not bound how many; nothing held the child, so it could take
  -- every pid of the machine (kernel.pid_max) and the host could start no
  -- thread or process. The attack makes 1,000 (the machine is shared) and
  -- says SUCCEEDED when all were made. The child sets RLIMIT_NPROC
  -- (handler_max_tasks) in its user namespace, where it counts the child's
  -- own tasks; the kernel exempts uid 0 (a root host's child, mapped to 0),
  -- which a pids cgroup of its own bounds where the host can make one
  -- (cgroup v1's pids hierarchy, or v2 with pids delegated): there the
  -- child is in it, and its folder is gone once the host has ended.
  local PIDS_BASE
  for _, layer in ipairs(core.confinement().holds) do
    PIDS_BASE = PIDS_BASE or layer:match("^pids cgroup: .* under (.-), removed when it ends")
  end
  for _, user in ipairs { false, "nobody" } do
    it("a handler process cannot make tasks without a bound" .. (user and " (nobody)" or " (root)"), function()
      if user and not is_root() then
        pending("needs root to run the host as nobody")
        return
      end
      if not user and is_root() and not PIDS_BASE then
        pending("the kernel does not enforce RLIMIT_NPROC for uid 0, and this root host can make no pids cgroup "
          .. "(luma-lua check --verbose says why)")
        return
      end
      if (user or not is_root()) and not USERNS then
        pending("needs a user namespace, where RLIMIT_NPROC counts the child's own tasks")
        return
      end
      local dir = project(user or nil)
      local ok, err = pcall(function()
        h.write(dir .. "/luma_attack/tasks.lua", "")
        local status, out, errout = host(dir, { "attacks", "tasks" }, user or nil)
        assert.are.equal(0, status, errout)
        assert.is_truthy(contains(out, "host alive\n"), out)
        assert.is_falsy(contains(out, "SUCCEEDED"), out)
        local made = tonumber(out:match("threads made: (%d+), then refused %(EAGAIN%)"))
        assert.is_truthy(made, out)
        assert.is_true(made < core.limits.handler_max_tasks, out)
        local cgroup = out:match("cgroup: (luma%-%d+%-%d+)\n")
        if not user and is_root() then
          -- the bound is the cgroup's: the host removed its folder when it ended
          assert.is_truthy(cgroup, out)
          assert.is_nil(io.open(PIDS_BASE .. "/" .. cgroup .. "/pids.max"), PIDS_BASE .. "/" .. cgroup .. " is left")
        end
      end)
      remove(dir)
      if not ok then error(err, 0) end
    end)
  end

  -- Second red team: with allow_network the child, after an honest reply,
  -- sent one byte out of turn on the Unix socket to the host with a
  -- descriptor attached (SCM_RIGHTS): a TCP socket with unsent data its
  -- peer never reads and SO_LINGER of an hour, and dropped its own
  -- reference. The host's close of its end purged it in the host's
  -- thread, whose last close of the TCP socket waited in tcp_close for the
  -- hour. The host's end has SO_PASSRIGHTS 0 (Linux 6.16), and the child's
  -- filter refuses sendmsg on its end and copies of it.
  it("a child cannot block its host with a descriptor sent on the socket", function()
    local dir = project()
    local ok, err = pcall(function()
      h.write(dir .. "/luma_attack/linger.lua", "")
      h.write(dir .. "/luma.config.json", core.json_encode({ tool_modules = { "tools.lua" },
        tool_module_policy = { sandbox = "strict", isolation = "process", max_concurrency = 1, max_memory_mb = 16,
          allow_network = true } }))
      local t = core.monotonic_ms()
      local _, out, errout = h.sh(UNPRELOADED .. "timeout 15 sh -c " .. h.quote(host_command(dir, { "attacks", "linger", "pid" })))
      assert.is_truthy(contains(out, "host alive\n"), "the host was held " .. (core.monotonic_ms() - t) .. " ms:\n"
        .. out .. errout)
    end)
    remove(dir)
    if not ok then error(err, 0) end
  end)

  for _, how in ipairs { "kill", "exit" } do
    local what = how == "kill" and "is SIGKILLed" or "calls os.exit"
    it("the handler process dies when its host " .. what .. " with a call in flight", function()
      local dir = project()
      local ok, err = pcall(function()
        local _, out = host(dir, { how })
        local pid = out:match("child (%d+)")
        assert.is_truthy(pid, out)
        local t = core.monotonic_ms()
        while not dead(pid) and core.monotonic_ms() - t < 3000 do os.execute(UNPRELOADED .. "sleep 0.05") end
        local alive = not dead(pid)
        if alive then os.execute(UNPRELOADED .. "kill -KILL " .. pid) end
        assert.is_false(alive, "handler process " .. pid .. " outlived its host")
        -- its pids cgroup's folder, left by the host that died, is removed
        -- by the next host that makes one
        if PIDS_BASE then
          local _, list = h.sh(UNPRELOADED .. "ls " .. h.quote(PIDS_BASE))
          local left = {}
          for name, owner in list:gmatch("(luma%-(%d+)%-%d+)") do
            if not io.open("/proc/" .. owner .. "/stat") then left[#left + 1] = name end
          end
          assert.is_true(#left > 0, "no folder left by the host that died in " .. PIDS_BASE .. ":\n" .. list)
          local status, out, errout = host(dir, { "attacks", "pid" })
          assert.are.equal(0, status, errout .. out)
          for _, name in ipairs(left) do
            assert.is_nil(io.open(PIDS_BASE .. "/" .. name .. "/pids.max"), name .. " is left")
          end
        end
      end)
      remove(dir)
      if not ok then error(err, 0) end
    end)
  end
end)
