-- One contract for every idempotency store (memory, file, sqlite, redis),
-- through the public surfaces; then what only the shared stores promise:
-- many processes, kill -9, (sqlite) corrupt files and encryption, (redis)
-- a server that goes away and comes back.
local luma = require "luma"
local h = require "spec.helpers"
local redis_server = require "spec.support.redis_server"

local SOURCE = [[
schema DbResult { ok: bool, run: int, key: string }
tool db_write(request_id: string, value: string) -> DbResult {
  side_effects: "write"
  idempotent: true
  idempotency_key: input.request_id
  idempotency_ttl_ms: 60000
  timeout: 20000
}
tool quick_write(request_id: string, value: string) -> DbResult {
  side_effects: "write"
  idempotent: true
  idempotency_key: input.request_id
  idempotency_ttl_ms: 60000
  timeout: 1500
}
tool short_write(request_id: string) -> DbResult {
  side_effects: "write"
  idempotent: true
  idempotency_key: request_id
  idempotency_ttl_ms: 1000
}
]]

-- db_write appends its key to $LUMA_SPEC_LOG (a side channel luma does not
-- see), sleeps $LUMA_SPEC_SLEEP seconds, and fails for values "fail".
local TOOLS = [[
local runs = 0
return { db_write = function(input, signal)
  local f = assert(io.open(os.getenv("LUMA_SPEC_LOG"), "a"))
  f:write(input.request_id, "\n")
  f:close()
  local nap = tonumber(os.getenv("LUMA_SPEC_SLEEP") or "0")
  if nap > 0 then signal:sleep(nap * 1000) end
  if input.value == "fail" then error(luma.ToolError { code = "BOOM", message = "failed", retryable = false }) end
  runs = runs + 1
  return { ok = true, run = runs, key = input.request_id }
end,
quick_write = function(input, signal)
  local f = assert(io.open(os.getenv("LUMA_SPEC_LOG"), "a"))
  f:write(input.request_id, "\n")
  f:close()
  local nap = tonumber(os.getenv("LUMA_SPEC_SLEEP") or "0")
  if nap > 0 then signal:sleep(nap * 1000) end
  return { ok = true, run = 1, key = input.request_id }
end,
short_write = function(input)
  local f = assert(io.open(os.getenv("LUMA_SPEC_LOG"), "a"))
  f:write(input.request_id, "\n")
  f:close()
  return { ok = true, run = 1, key = input.request_id }
end }]]

-- The redis-server of this file's specs, started at the first use.
local redis
local function redis_url()
  redis = redis or redis_server.start()
  return redis.url
end

local STORES = {
  memory = function() return '{ "type": "memory" }' end,
  file = function() return '{ "type": "file", "path": "store.json" }' end,
  sqlite = function() return '{ "type": "sqlite", "path": "store.db" }' end,
  -- a short lease: a killed holder's key is taken over after it
  redis = function()
    return '{ "type": "redis", "url": "' .. redis_url() .. '", "prefix": "' .. h.tmpname(":") .. '", "lease_ms": 1500 }'
  end,
}

local function project(store)
  return h.project {
    ["program.luma"] = SOURCE .. 'a = tool db_write({ request_id: "r1", value: "x" })\n',
    ["tools.lua"] = TOOLS,
    ["luma.config.json"] = '{ "tool_modules": ["tools.lua"], "idempotency_store": ' .. store .. ' }',
  }
end

local lines = h.lines

for _, name in ipairs { "memory", "file", "sqlite", "redis" } do
  describe("the " .. name .. " store's contract", function()
    local dir, log, p

    before_each(function()
      dir = project(STORES[name]())
      log = dir .. "/run.log"
      -- the handler's side channel is this process's LUMA_SPEC_LOG: a
      -- lookup cannot reach a module's os.getenv, so the module is
      -- rewritten with the path
      h.write(dir .. "/tools.lua", TOOLS:gsub('os%.getenv%("LUMA_SPEC_LOG"%)', string.format("%q", log))
        :gsub('os%.getenv%("LUMA_SPEC_SLEEP"%) or ', ""))
      p = assert(luma.load(dir .. "/program.luma"))
    end)
    after_each(function()
      p:close()
      os.execute("rm -rf " .. h.quote(dir))
    end)

    it("runs the handler once per key and replays its result", function()
      local r1, m1 = p:call("db_write", { request_id = "k1", value = "v" })
      local r2, m2 = p:call("db_write", { request_id = "k1", value = "v" })
      assert.are.same(r1, r2)
      assert.is_false(m1.idempotent_replay)
      assert.is_true(m2.idempotent_replay)
      p:call("db_write", { request_id = "k2", value = "v" })
      assert.are.same({ "k1", "k2" }, lines(log))
    end)

    it("refuses the same key with another input", function()
      p:call("db_write", { request_id = "k1", value = "a" })
      local err = h.raised(p.call, p, "db_write", { request_id = "k1", value = "b" })
      assert.are.equal("TOOL_IDEMPOTENCY_CONFLICT", err.code)
      assert.are.equal(1, #lines(log))
    end)

    it("runs again after the TTL", function()
      p:call("short_write", { request_id = "k1" })
      local _, meta = p:call("short_write", { request_id = "k1" })
      assert.is_true(meta.idempotent_replay)
      assert.are.equal(1, #lines(log))
      os.execute("sleep 1.1")
      _, meta = p:call("short_write", { request_id = "k1" })
      assert.is_false(meta.idempotent_replay)
      assert.are.equal(2, #lines(log))
    end)

    it("keeps nothing of a failed call: the next one runs", function()
      assert.are.equal("BOOM", h.raised(p.call, p, "db_write", { request_id = "k1", value = "fail" }).code)
      local r = p:call("db_write", { request_id = "k1", value = "fail2" })
      assert.are.equal("k1", r.key)
      assert.are.equal(2, #lines(log))
    end)

    it("keys by tool and key bytes, NUL and all", function()
      p:call("db_write", { request_id = "a\0b", value = "v" })
      p:call("db_write", { request_id = "a\0c", value = "v" })
      p:call("db_write", { request_id = "a\0b", value = "v" })
      assert.are.equal(2, #lines(log))
    end)
  end)
end

-- ------------------------------------------------------- across processes

local build = h.root .. "/" .. (os.getenv("LUMA_BUILD") or "build")

local WORKER = [[
package.path = arg[1] .. "/lua/?.lua;" .. arg[1] .. "/lua/?/init.lua;" .. package.path
package.cpath = arg[2] .. "/?.so;" .. package.cpath
local luma = require "luma"
local p = luma.load("program.luma")
local mode = arg[3]
if mode == "burst" then
  for i = 1, 200 do
    local key = "k" .. ((i * 7 + tonumber(arg[4])) % 50)
    local r = p:call("db_write", { request_id = key, value = "same" })
    assert(r.key == key)
  end
elseif mode == "one" then
  -- the worker tells its own pid (its parent is a shell), for kill -9
  if os.getenv("LUMA_SPEC_PIDFILE") then
    local f = assert(io.open("/proc/self/stat"))
    local pid = f:read("l"):match("^(%d+)")
    f:close()
    f = assert(io.open(os.getenv("LUMA_SPEC_PIDFILE"), "w"))
    f:write(pid)
    f:close()
  end
  local ok, r, meta = pcall(p.call, p, arg[5] or "db_write", { request_id = arg[4], value = "same" })
  if ok then io.write(r.key, " ", tostring(meta.idempotent_replay), "\n")
  else io.write(tostring(r.code), ": ", tostring(r.message), "\n") end
  -- "why": the error's retryable flag and details; "timed": when the call ended
  if not ok and arg[6] == "why" then
    io.write("retryable=", tostring(r.retryable), " lease_left_ms=", tostring(r.details and r.details.lease_left_ms), "\n")
  end
  if arg[6] == "timed" then io.write("ended ", string.format("%.0f", require("socket").gettime() * 1000), "\n") end
  -- before the exit: a sanitizer's leak check that fails there (in a PID
  -- namespace, where the host's /proc has no entry of its pids) ends it unflushed
  io.stdout:flush()
end
]]

local function spawn(dir, args, env)
  local vars = ""
  for k, v in pairs(env or {}) do vars = vars .. k .. "=" .. h.quote(v) .. " " end
  return string.format("(cd %s && env %s lua5.4 worker.lua %s %s %s)", h.quote(dir), vars, h.quote(h.root),
    h.quote(build), args)
end

for _, name in ipairs { "file", "sqlite", "redis" } do
  describe("the " .. name .. " store across processes", function()
    it("runs the handler exactly once per key for 8 processes of 200 calls over 50 keys", function()
      local dir = project(STORES[name]())
      h.write(dir .. "/worker.lua", WORKER)
      local cmd = {}
      for w = 1, 8 do cmd[#cmd + 1] = spawn(dir, "burst " .. w, { LUMA_SPEC_LOG = dir .. "/run.log" }) .. " &" end
      assert.is_truthy(os.execute(table.concat(cmd, " ") .. " wait"))
      local keys = lines(dir .. "/run.log")
      local seen = {}
      for _, k in ipairs(keys) do
        assert.is_nil(seen[k], "ran twice: " .. k)
        seen[k] = true
      end
      assert.are.equal(50, #keys)
      os.execute("rm -rf " .. h.quote(dir))
    end)

    it("lets the next process take over a key whose holder was killed mid-handler, and run it once", function()
      local dir = project(STORES[name]())
      h.write(dir .. "/worker.lua", WORKER)
      local log = dir .. "/run.log"
      -- the holder starts the handler, which sleeps: kill -9 it then
      local pidfile = dir .. "/holder.pid"
      os.execute(spawn(dir, "one held", { LUMA_SPEC_LOG = log, LUMA_SPEC_SLEEP = "30", LUMA_SPEC_PIDFILE = pidfile }) ..
        " > /dev/null 2>&1 &")
      for _ = 1, 100 do
        if #lines(log) > 0 then break end
        os.execute("sleep 0.05")
      end
      assert.are.equal(1, #lines(log), "the holder did not start its handler")
      -- a second process waits for the holder while it lives
      local status, out, errout = h.sh(spawn(dir, "one held", { LUMA_SPEC_LOG = log }) .. " & sleep 0.3; kill -9 $(cat " ..
        h.quote(pidfile) .. "); wait")
      assert.are.equal(0, status, out .. errout)
      assert.are.equal("held false\n", out)
      assert.are.same({ "held", "held" }, lines(log))
      -- and its result is kept: a third process replays it
      local errout
      status, out, errout = h.sh(spawn(dir, "one held", { LUMA_SPEC_LOG = log }))
      assert.are.equal("held true\n", out, "status " .. status .. ", stderr: " .. errout)
      assert.are.equal(2, #lines(log))
      os.execute("rm -rf " .. h.quote(dir))
    end)
  end)
end

-- ------------------------------------------------- the cache across processes

local CACHED = [[
schema Answer { q: string, pid: string }
tool lookup(q: string) -> Answer {
  cache: true
  timeout: 20000
}
]]

-- lookup appends q to the log, naps $LUMA_SPEC_SLEEP seconds (so that
-- processes overlap), and fails for q = "fail"
local CACHED_TOOLS = [[
return { lookup = function(input, signal)
  local f = assert(io.open(LOG, "a"))
  f:write(input.q, "\n")
  f:close()
  if NAP > 0 then signal:sleep(NAP * 1000) end
  if input.q == "fail" then error(luma.ToolError { code = "BOOM", message = "failed", retryable = false }) end
  local stat = assert(io.open("/proc/self/stat"))
  local pid = stat:read("l"):match("^(%d+)")
  stat:close()
  return { q = input.q, pid = pid }
end }]]

local CACHE_WORKER = [[
package.path = arg[1] .. "/lua/?.lua;" .. arg[1] .. "/lua/?/init.lua;" .. package.path
package.cpath = arg[2] .. "/?.so;" .. package.cpath
local luma = require "luma"
local p = luma.load("program.luma")
if arg[3] == "burst" then
  for i = 1, 100 do
    local q = "q" .. ((i * 7 + tonumber(arg[4])) % 20)
    assert(p:call("lookup", { q = q }).q == q)
  end
else
  local ok, r, meta = pcall(p.call, p, "lookup", { q = arg[4] })
  if ok then io.write(r.q, " ", r.pid, " ", tostring(meta.cache_hit), "\n") else io.write(r.code, "\n") end
end
]]

local function cached_project(store, nap)
  local dir = h.project {
    ["program.luma"] = CACHED,
    ["luma.config.json"] = '{ "tool_modules": ["tools.lua"], "cache_store": ' .. store .. ' }',
  }
  h.write(dir .. "/tools.lua", "local LOG, NAP = " .. string.format("%q", dir .. "/run.log") .. ", " .. nap .. "\n" ..
    CACHED_TOOLS)
  h.write(dir .. "/worker.lua", CACHE_WORKER)
  return dir
end

local CACHE_STORES = {
  file = function() return '{ "type": "file", "path": "cache.json" }' end,
  sqlite = function() return '{ "type": "sqlite", "path": "cache.db" }' end,
  redis = function() return '{ "type": "redis", "url": "' .. redis_url() .. '", "prefix": "' .. h.tmpname(":") .. '" }' end,
}

local function worker(dir, args)
  return string.format("(cd %s && lua5.4 worker.lua %s %s %s)", h.quote(dir), h.quote(h.root), h.quote(build), args)
end

for _, name in ipairs { "file", "sqlite", "redis" } do
  describe("a " .. name .. " cache_store", function()
    it("is shared by 8 processes of 100 calls over 20 inputs: each input runs once", function()
      local dir = cached_project(CACHE_STORES[name](), 0.05)
      local cmd = {}
      for w = 1, 8 do cmd[#cmd + 1] = worker(dir, "burst " .. w) .. " &" end
      assert.is_truthy(os.execute(table.concat(cmd, " ") .. " wait"))
      local runs, seen = lines(dir .. "/run.log"), {}
      for _, q in ipairs(runs) do
        assert.is_nil(seen[q], "ran twice: " .. q)
        seen[q] = true
      end
      assert.are.equal(20, #runs)
      os.execute("rm -rf " .. h.quote(dir))
    end)

    it("gives a later process the result, and keeps no failure", function()
      local dir = cached_project(CACHE_STORES[name](), 0)
      local _, first = h.sh(worker(dir, "one a"))
      local _, second = h.sh(worker(dir, "one a"))
      local q, pid, hit = second:match("^(%S+) (%S+) (%S+)\n$")
      assert.are.equal("a " .. pid .. " false\n", first)
      assert.are.same({ "a", "true" }, { q, hit })
      assert.are.equal("BOOM\n", select(2, h.sh(worker(dir, "one fail"))))
      assert.are.equal("BOOM\n", select(2, h.sh(worker(dir, "one fail"))))
      assert.are.same({ "a", "fail", "fail" }, lines(dir .. "/run.log"))
      os.execute("rm -rf " .. h.quote(dir))
    end)
  end)
end

describe("the cache_store", function()
  it("forgets an entry after its ttl_ms", function()
    -- long enough for a second process to start under ASan or valgrind (500 ms was not)
    local dir = cached_project('{ "type": "sqlite", "path": "cache.db", "ttl_ms": 2500 }', 0)
    h.sh(worker(dir, "one a"))
    assert.matches(" true\n$", select(2, h.sh(worker(dir, "one a"))))
    os.execute("sleep 2.6")
    assert.matches(" false\n$", select(2, h.sh(worker(dir, "one a"))))
    assert.are.same({ "a", "a" }, lines(dir .. "/run.log"))
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("that cannot be reached is passed by: the calls run uncached", function()
    local url = "redis://127.0.0.1:" .. h.free_port() .. "/0"
    local dir = cached_project('{ "type": "redis", "url": "' .. url .. '" }', 0)
    assert.matches("^a %d+ false\n$", select(2, h.sh(worker(dir, "one a"))))
    assert.matches("^a %d+ false\n$", select(2, h.sh(worker(dir, "one a"))))
    assert.are.same({ "a", "a" }, lines(dir .. "/run.log"))
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("has config errors that say what was expected", function()
    local cases = {
      { '{ "type": "sqlite", "ttl_ms": "soon" }', "cache_store.ttl_ms must be an integer" },
      { '{ "type": "sqlite", "ttl_ms": 0 }', "cache_store.ttl_ms must be at least 1" },
      { '{ "type": "disk" }', 'cache_store.type must be "memory", "file", "sqlite" or "redis", not "disk"' },
      { '{ "type": "redis", "url": "redis://x:1/0", "on_unavailable": "run" }', "on_unavailable" },
      { '{ "type": "memory", "path": "x" }', "cache_store.path is only for the file and sqlite stores" },
    }
    for _, case in ipairs(cases) do
      local dir = cached_project(case[1], 0)
      local ok, err = pcall(luma.load, dir .. "/program.luma")
      assert.is_false(ok, case[1])
      assert.are.equal("CONFIG_INVALID", err.code, case[1])
      assert.is_truthy(err.message:find(case[2], 1, true), err.message)
      os.execute("rm -rf " .. h.quote(dir))
    end
  end)

  it("is encrypted with LUMA_CACHE_KEY, and refuses to open without it", function()
    local dir = cached_project('{ "type": "sqlite", "path": "cache.db", "encryption": "aes-256-gcm" }', 0)
    local ok, err = pcall(luma.load, dir .. "/program.luma", { lookup = function() return nil end })
    assert.is_false(ok)
    assert.are.equal("CACHE_STORE_ERROR", err.code)
    assert.are.equal("The cache store is encrypted (aes-256-gcm), but LUMA_CACHE_KEY is not set.", err.message)
    local p = assert(luma.load(dir .. "/program.luma", { lookup = function(n) return n == "LUMA_CACHE_KEY" and "k3y" or nil end }))
    p:call("lookup", { q = "secret-input" })
    p:close()
    local f = assert(io.open(dir .. "/cache.db", "rb"))
    local bytes = f:read("a")
    f:close()
    assert.is_nil(bytes:find("secret-input", 1, true))
    os.execute("rm -rf " .. h.quote(dir))
  end)
end)

-- ----------------------------------------------------------------- sqlite

describe("the sqlite store", function()
  local function run(dir, env)
    env = env or {}
    env.LUMA_SPEC_LOG = env.LUMA_SPEC_LOG or "/dev/null"
    return h.run({ "program.luma" }, { cwd = dir, env = env, unset = env.LUMA_IDEMPOTENCY_KEY and {} or { "LUMA_IDEMPOTENCY_KEY" } })
  end

  it("is one file that survives kill -9 in the middle of its transactions", function()
    local dir = project(STORES.sqlite())
    h.write(dir .. "/writer.lua", [[
package.path = arg[1] .. "/lua/?.lua;" .. arg[1] .. "/lua/?/init.lua;" .. package.path
package.cpath = arg[2] .. "/?.so;" .. package.cpath
local p = require("luma").load("program.luma")
local i = 0
while true do
  i = i + 1
  p:call("db_write", { request_id = "w" .. i, value = "v" })
end
]])
    for round = 1, 3 do
      os.execute(string.format("cd %s && (LUMA_SPEC_LOG=/dev/null lua5.4 writer.lua %s %s & echo $! > pid)",
        h.quote(dir), h.quote(h.root), h.quote(build)))
      os.execute("sleep 0.3" .. round)
      os.execute("kill -9 $(cat " .. h.quote(dir .. "/pid") .. ") 2>/dev/null; sleep 0.05")
      local r = run(dir)
      assert.are.equal(0, r.status, r.stderr)
      assert.are.equal("", r.stderr)
    end
    local status, out = h.sh("cd " .. h.quote(dir) .. " && lua5.4 -e 'io.write(1)'")
    assert.are.equal(0, status, out)
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("refuses a file that is not a database, naming it, and leaves it as it was", function()
    local dir = project(STORES.sqlite())
    h.write(dir .. "/store.db", "these are my notes, not a database\n")
    local r = run(dir)
    assert.are.equal(2, r.status)
    assert.matches("Cannot open the idempotency store '.*store%.db': '.*store%.db' is not a SQLite database, or it is corrupt", r.stderr)
    assert.are.equal("these are my notes, not a database\n", h.read(dir .. "/store.db"))
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("seals each result with LUMA_IDEMPOTENCY_KEY, and tells a wrong key", function()
    local dir = project('{ "type": "sqlite", "path": "store.db", "encryption": "aes-256-gcm" }')
    local log = dir .. "/run.log"
    local r = run(dir, { LUMA_IDEMPOTENCY_KEY = "right", LUMA_SPEC_LOG = log })
    assert.are.equal(0, r.status, r.stderr)
    r = run(dir, { LUMA_IDEMPOTENCY_KEY = "right", LUMA_SPEC_LOG = log })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal(1, #lines(log))
    -- the result ({"key":"r1",...}) is not in the file in clear
    assert.is_nil(h.read(dir .. "/store.db"):find('"key":"r1"', 1, true))
    r = run(dir, { LUMA_IDEMPOTENCY_KEY = "wrong" })
    assert.are.equal(2, r.status)
    assert.matches("a wrong LUMA_IDEMPOTENCY_KEY", r.stderr)
    r = run(dir)
    assert.are.equal(2, r.status)
    assert.matches("LUMA_IDEMPOTENCY_KEY is not set", r.stderr)
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("keeps results in clear without encryption, and refuses to be opened as encrypted then", function()
    local dir = project(STORES.sqlite())
    assert.are.equal(0, run(dir).status)
    assert.is_truthy(h.read(dir .. "/store.db"):find('"key":"r1"', 1, true))
    h.write(dir .. "/luma.config.json", '{ "tool_modules": ["tools.lua"], "idempotency_store": ' ..
      '{ "type": "sqlite", "path": "store.db", "encryption": "aes-256-gcm" } }')
    local r = run(dir, { LUMA_IDEMPOTENCY_KEY = "k" })
    assert.are.equal(2, r.status)
    assert.matches("it is not encrypted, but the config asks for aes%-256%-gcm", r.stderr)
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("has config errors that say what was expected", function()
    local dir = project('{ "type": "redis2" }')
    local r = run(dir)
    assert.are.equal(2, r.status)
    assert.matches('idempotency_store.type must be "memory", "file", "sqlite" or "redis", not "redis2"', r.stderr)
    os.execute("rm -rf " .. h.quote(dir))
  end)
end)

describe("the sqlite store's claims", function()
  it("fail the handler's call, storing nothing, when another takes the claim from it", function()
    local dir = project(STORES.sqlite())
    h.write(dir .. "/worker.lua", WORKER)
    local log = dir .. "/run.log"
    local env = { LUMA_SPEC_LOG = log, LUMA_SPEC_SLEEP = "8" }
    -- the claim is deleted under the handler (as an operator would, or a
    -- process that found its lease run out)
    local clear = "sqlite3 " .. h.quote(dir .. "/store.db") .. " 'DELETE FROM luma_idem WHERE pending = 1'"
    local status, out, errout = h.sh("start=$(date +%s%N); " .. spawn(dir, "one lost-2", env) .. " & sleep 0.5; " ..
      clear .. "; wait; echo took $(( ($(date +%s%N) - start) / 1000000 ))")
    assert.are.equal(0, status, out .. errout)
    assert.matches("^IDEMPOTENCY_STORE_ERROR: Tool 'db_write' lost its claim on idempotency key 'lost%-2' while its " ..
      "handler ran", out)
    local took = tonumber(out:match("took (%d+)"))
    -- the claim's renewal (every third of the 10 s lease) finds it gone
    -- about 3.4 s after the claim (and the process's start), well before 8 s
    assert.is_true(took < 7000, "the handler was not stopped: " .. took .. " ms")
    status, out = h.sh(spawn(dir, "one lost-2", { LUMA_SPEC_LOG = log }))
    assert.are.equal("lost-2 false\n", out)
    assert.are.same({ "lost-2", "lost-2" }, lines(log))
    os.execute("rm -rf " .. h.quote(dir))
  end)
end)

describe("the sqlite store across PID namespaces", function()
  -- containers sharing the file on a volume: a pid names a process only in
  -- its own namespace, so a claim of another one is judged by its lease
  it("waits for a live holder of another PID namespace, and replays its result", function()
    h.ensure_packages { "util-linux" }
    local dir = project(STORES.sqlite())
    h.write(dir .. "/worker.lua", WORKER)
    local log = dir .. "/run.log"
    -- the holder runs in a new PID namespace, after 300 processes there, so
    -- that its pid there names no process of the host's
    h.write(dir .. "/holder.sh", string.format([=[
i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done
sh -c 'echo $$ > nspid; exec "$@"' sh env LUMA_SPEC_LOG=%s LUMA_SPEC_SLEEP=3 lua5.4 worker.lua %s %s one ns-1
]=], h.quote(log), h.quote(h.root), h.quote(build)))
    -- (stderr apart: a sanitizer's leak check cannot read the namespace's pids in the host's /proc)
    os.execute("(cd " .. h.quote(dir) .. " && unshare --pid --fork sh holder.sh) > " .. h.quote(dir .. "/holder.out") ..
      " 2> " .. h.quote(dir .. "/holder.err") .. " &")
    for _ = 1, 200 do
      if #lines(log) > 0 then break end
      os.execute("sleep 0.05")
    end
    assert.are.equal(1, #lines(log), "the holder did not start its handler: " .. (h.read(dir .. "/holder.err") or ""))
    local nspid = h.read(dir .. "/nspid"):match("%d+")
    assert.is_truthy(nspid)
    -- (the inner sh's pid there is the holder's: exec keeps it)
    assert.are_not.equal(true, os.execute("kill -0 " .. nspid .. " 2>/dev/null"),
      "pid " .. nspid .. " is a process of the host's too: the spec cannot tell")
    local status, out, errout = h.sh(spawn(dir, "one ns-1", { LUMA_SPEC_LOG = log }))
    assert.are.equal(0, status, errout)
    assert.are.equal("ns-1 true\n", out, errout)
    assert.are.same({ "ns-1" }, lines(log))
    for _ = 1, 100 do
      if (h.read(dir .. "/holder.out") or "") ~= "" then break end
      os.execute("sleep 0.05")
    end
    assert.are.equal("ns-1 false\n", h.read(dir .. "/holder.out"))
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("takes over a killed holder's key of another PID namespace when its lease ends", function()
    local dir = project(STORES.sqlite())
    h.write(dir .. "/worker.lua", WORKER)
    local log = dir .. "/run.log"
    -- the worker writes its pid as the host sees it (/proc is the host's)
    local pidfile = dir .. "/holder.pid"
    local holder = string.format("cd %s && unshare --pid --fork sh -c 'exec env LUMA_SPEC_LOG=%s LUMA_SPEC_SLEEP=30 " ..
      "LUMA_SPEC_PIDFILE=%s lua5.4 worker.lua %s %s one ns-2'", h.quote(dir), h.quote(log), h.quote(pidfile),
      h.quote(h.root), h.quote(build))
    os.execute("(" .. holder .. ") > /dev/null 2>&1 &")
    for _ = 1, 200 do
      if #lines(log) > 0 then break end
      os.execute("sleep 0.05")
    end
    assert.are.equal(1, #lines(log), "the holder did not start its handler")
    -- the holder is the namespace's first process: it ends, and the namespace with it
    os.execute("kill -9 $(cat " .. h.quote(pidfile) .. "); sleep 0.2")
    local db = h.quote(dir .. "/store.db")
    local _, left = h.sh("sqlite3 " .. db .. " \"SELECT expires - CAST((julianday('now') - 2440587.5) * 86400000 " ..
      "AS INTEGER) FROM luma_idem WHERE pending = 1\"")
    left = tonumber(left)
    assert.is_truthy(left, "no claim left")
    assert.is_true(left > 0 and left <= 10000, "the claim's lease: " .. left .. " ms")
    -- a caller waits for the lease (db_write's timeout is 20 s), then runs it
    local status, out, errout = h.sh(spawn(dir, "one ns-2", { LUMA_SPEC_LOG = log }))
    assert.are.equal(0, status, errout)
    assert.are.equal("ns-2 false\n", out, errout)
    assert.are.same({ "ns-2", "ns-2" }, lines(log))
    os.execute("rm -rf " .. h.quote(dir))
  end)
end)

-- ------------------------------------------------------------------ redis

describe("the redis store", function()
  local function load(dir, opts)
    return luma.load(dir .. "/program.luma", opts)
  end

  local function logged(dir)
    h.write(dir .. "/tools.lua", TOOLS:gsub('os%.getenv%("LUMA_SPEC_LOG"%)', string.format("%q", dir .. "/run.log"))
      :gsub('os%.getenv%("LUMA_SPEC_SLEEP"%) or ', ""))
  end

  it("fails calls with TOOL_IDEMPOTENCY_UNAVAILABLE while the server is down, and runs no key twice across a restart", function()
    local server = redis_server.start()
    local ok, e = pcall(function()
      local dir = project('{ "type": "redis", "url": "' .. server.url .. '" }')
      logged(dir)
      local p = load(dir)
      for i = 1, 5 do p:call("db_write", { request_id = "k" .. i, value = "v" }) end
      server:stop()
      local err = h.raised(p.call, p, "db_write", { request_id = "k6", value = "v" })
      assert.are.equal("TOOL_IDEMPOTENCY_UNAVAILABLE", err.code)
      assert.is_true(err.retryable)
      assert.matches("Redis at 127%.0%.0%.1:%d+/0 cannot be reached", err.message)
      server:start_again()
      -- the store reconnects, after a backoff of at most 5 s
      local done
      for _ = 1, 80 do
        local fine, r = pcall(p.call, p, "db_write", { request_id = "k6", value = "v" })
        if fine then done = r break end
        assert.are.equal("TOOL_IDEMPOTENCY_UNAVAILABLE", r.code)
        os.execute("sleep 0.1")
      end
      assert.is_truthy(done, "the store did not reconnect")
      for i = 1, 6 do
        local _, meta = p:call("db_write", { request_id = "k" .. i, value = "v" })
        assert.is_true(meta.idempotent_replay, "k" .. i .. " ran again")
      end
      assert.are.same({ "k1", "k2", "k3", "k4", "k5", "k6" }, lines(dir .. "/run.log"))
      p:close()
      os.execute("rm -rf " .. h.quote(dir))
    end)
    server:remove()
    assert(ok, e)
  end)

  it("seals each result with LUMA_IDEMPOTENCY_KEY, replays it in another load, and tells a wrong key", function()
    local url = redis_url()
    local prefix = h.tmpname(":")
    local function store(extra)
      return '{ "type": "redis", "url": "' .. url .. '", "prefix": "' .. prefix .. '"' .. extra .. ' }'
    end
    local dir = project(store(', "encryption": "aes-256-gcm"'))
    logged(dir)
    local function key(value)
      return { lookup = function(name) return name == "LUMA_IDEMPOTENCY_KEY" and value or nil end }
    end
    local err = h.raised(load, dir, key(nil))
    assert.are.equal("IDEMPOTENCY_STORE_ERROR", err.code)
    assert.are.equal("The idempotency store is encrypted (aes-256-gcm), but LUMA_IDEMPOTENCY_KEY is not set.", err.message)
    local p = load(dir, key("right"))
    local first = p:call("db_write", { request_id = "k1", value = "v" })
    p:close()
    p = load(dir, key("right"))
    local again, meta = p:call("db_write", { request_id = "k1", value = "v" })
    p:close()
    assert.are.same(first, again)
    assert.is_true(meta.idempotent_replay)
    assert.are.same({ "k1" }, lines(dir .. "/run.log"))
    -- what Redis holds: the meta record and a sealed result, no JSON
    local status, raw = h.sh("env -u LD_PRELOAD redis-cli -p " .. redis.port .. " --raw EVAL " .. h.quote(
      "local out = {} for _, k in ipairs(redis.call('KEYS', ARGV[1])) do out[#out + 1] = redis.call('GET', k) end " ..
      "table.sort(out) return table.concat(out, '\\n')") .. " 0 " .. h.quote(prefix .. "*"))
    assert.are.equal(0, status)
    assert.matches("^C|%x+|~", raw)
    assert.matches("\naes%-256%-gcm|200000|%x+|%x+\n$", raw)
    assert.is_nil(raw:find('"ok"', 1, true))
    err = h.raised(load, dir, key("wrong"))
    assert.are.equal("IDEMPOTENCY_STORE_ERROR", err.code)
    assert.matches("the key does not open the store under prefix", err.message, 1, true)
    -- the same prefix in clear is refused, and an encrypted store on a clear prefix too
    local clear = project(store(""))
    err = h.raised(load, clear)
    assert.matches("is encrypted %(aes%-256%-gcm%), but no key was given", err.message)
    local other = h.tmpname(":")
    local plain = project('{ "type": "redis", "url": "' .. url .. '", "prefix": "' .. other .. '" }')
    load(plain):close()
    local sealed = project('{ "type": "redis", "url": "' .. url .. '", "prefix": "' .. other ..
      '", "encryption": "aes-256-gcm" }')
    err = h.raised(load, sealed, key("right"))
    assert.matches("keeps its results in clear, but the config asks for aes%-256%-gcm", err.message)
    for _, d in ipairs { dir, clear, plain, sealed } do os.execute("rm -rf " .. h.quote(d)) end
  end)

  it("runs the handler without the guarantee when told to (on_unavailable: run)", function()
    local port = h.free_port()
    local dir = project('{ "type": "redis", "url": "redis://127.0.0.1:' .. port .. '", "on_unavailable": "run" }')
    logged(dir)
    local p = load(dir)
    p:call("db_write", { request_id = "k1", value = "v" })
    p:call("db_write", { request_id = "k1", value = "v" })
    assert.are.same({ "k1", "k1" }, lines(dir .. "/run.log"))
    p:close()
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("takes its password from password_env, never shows it, and loads when the server refuses it", function()
    local server = redis_server.start { password = "s3cret-pw" }
    local ok, e = pcall(function()
      local dir = project('{ "type": "redis", "url": "' .. server.url .. '", "password_env": "LUMA_SPEC_REDIS_PW" }')
      logged(dir)
      local p = load(dir, { lookup = function(n) return n == "LUMA_SPEC_REDIS_PW" and "s3cret-pw" or nil end })
      assert.are.equal("k1", p:call("db_write", { request_id = "k1", value = "v" }).key)
      p:close()
      -- a password the server refuses (rotated on the server first) is as
      -- the server being down: the program loads, and its calls are
      -- unavailable (retryable) until the server lets them in
      p = load(dir, { lookup = function(n) return n == "LUMA_SPEC_REDIS_PW" and "wrong-pw" or nil end })
      local err = h.raised(p.call, p, "db_write", { request_id = "k2", value = "v" })
      assert.are.equal("TOOL_IDEMPOTENCY_UNAVAILABLE", err.code)
      assert.is_true(err.retryable)
      assert.matches("refused the credentials", err.message)
      assert.is_nil(err.message:find("wrong-pw", 1, true))
      p:close()
      err = h.raised(load, dir, { lookup = function() return nil end })
      assert.matches("takes its password from LUMA_SPEC_REDIS_PW, which is not set", err.message)
      -- a password in the url stays out of messages too
      h.write(dir .. "/luma.config.json", '{ "tool_modules": ["tools.lua"], "idempotency_store": ' ..
        '{ "type": "redis", "url": "redis://:url-pw-9@127.0.0.1:' .. server.port .. '/0" } }')
      p = load(dir)
      err = h.raised(p.call, p, "db_write", { request_id = "k2", value = "v" })
      assert.are.equal("TOOL_IDEMPOTENCY_UNAVAILABLE", err.code)
      assert.is_nil(err.message:find("url-pw-9", 1, true), err.message)
      p:close()
      assert.are.same({ "k1" }, lines(dir .. "/run.log"))
      os.execute("rm -rf " .. h.quote(dir))
    end)
    server:remove()
    assert(ok, e)
  end)

  -- the lease (1000 ms) is shorter than the handler (2.5 s): the holder
  -- renews its claim while the handler runs
  local function leased(prefix)
    local dir = project('{ "type": "redis", "url": "' .. redis_url() .. '", "prefix": "' .. prefix ..
      '", "lease_ms": 1000 }')
    h.write(dir .. "/worker.lua", WORKER)
    return dir
  end

  it("renews a claim while its handler runs past the lease: one run, and the second caller replays it", function()
    local dir = leased(h.tmpname(":"))
    local log = dir .. "/run.log"
    local env = { LUMA_SPEC_LOG = log, LUMA_SPEC_SLEEP = "2.5" }
    local status, out, errout = h.sh(spawn(dir, "one lease-1", env) .. " & sleep 0.3; " ..
      spawn(dir, "one lease-1", env) .. "; wait")
    assert.are.equal(0, status, out .. errout)
    assert.are.same({ "lease-1" }, lines(log))
    local said = {}
    for line in out:gmatch("[^\n]+") do said[#said + 1] = line end
    table.sort(said)
    assert.are.same({ "lease-1 false", "lease-1 true" }, said)
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("fails the handler's call, storing nothing, when its claim is taken from it", function()
    local prefix = h.tmpname(":")
    local dir = leased(prefix)
    local log = dir .. "/run.log"
    local env = { LUMA_SPEC_LOG = log, LUMA_SPEC_SLEEP = "2.5" }
    -- an operator deletes the claim while the handler runs
    local clear = "env -u LD_PRELOAD redis-cli -p " .. redis.port .. " EVAL " .. h.quote(
      "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end return 0") .. " 0 " ..
      h.quote(prefix .. "idem*") .. " > /dev/null"
    local status, out, errout = h.sh("start=$(date +%s%N); " .. spawn(dir, "one lost-1", env) .. " & sleep 0.5; " ..
      clear .. "; wait; echo took $(( ($(date +%s%N) - start) / 1000000 ))")
    local took = tonumber(out:match("took (%d+)"))
    assert.are.equal(0, status, out .. errout)
    assert.matches("^IDEMPOTENCY_STORE_ERROR: Tool 'db_write' lost its claim on idempotency key 'lost%-1' while its " ..
      "handler ran", out)
    -- the handler's signal fired: it did not sleep its 2.5 s out
    assert.is_true(took < 2400, "the handler was not stopped: " .. took .. " ms" .. out .. errout)
    -- nothing was stored: the next call runs it
    status, out = h.sh(spawn(dir, "one lost-1", { LUMA_SPEC_LOG = log }))
    assert.are.equal("lost-1 false\n", out)
    assert.are.same({ "lost-1", "lost-1" }, lines(log))
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("keeps each key under a printable name that an operator can find and delete to clear a stuck claim", function()
    local prefix = h.tmpname(":")
    local dir = project('{ "type": "redis", "url": "' .. redis_url() .. '", "prefix": "' .. prefix .. '" }')
    h.write(dir .. "/worker.lua", WORKER)
    local log = dir .. "/run.log"
    local cli = "env -u LD_PRELOAD redis-cli -p " .. redis.port .. " "
    -- a holder killed mid-handler leaves its claim for the lease (10 s by default)
    local pidfile = dir .. "/holder.pid"
    os.execute(spawn(dir, "one order-1", { LUMA_SPEC_LOG = log, LUMA_SPEC_SLEEP = "30", LUMA_SPEC_PIDFILE = pidfile }) ..
      " > /dev/null 2>&1 &")
    for _ = 1, 100 do
      if #lines(log) > 0 then break end
      os.execute("sleep 0.05")
    end
    assert.are.equal(1, #lines(log), "the holder did not start its handler")
    os.execute("kill -9 $(cat " .. h.quote(pidfile) .. ")")
    -- the README's way: find the claim by tool, look at it, delete it
    local status, found = h.sh(cli .. "--scan --pattern " .. h.quote(prefix .. "idem:db_write:*"))
    assert.are.equal(0, status)
    local _, digest = h.sh("printf %s order-1 | sha256sum")
    local want = prefix .. "idem:db_write:" .. digest:match("^%x+")
    assert.are.equal(want .. "\n", found)
    local _, value = h.sh(cli .. "--raw GET " .. h.quote(want))
    assert.matches("^P|%x+|%x+\n$", value)
    -- the default lease: idem_lease_ms (10 s), renewed while a holder lives
    local _, pttl = h.sh(cli .. "PTTL " .. h.quote(want))
    assert.is_true(tonumber(pttl) > 0 and tonumber(pttl) <= 10000, "PTTL " .. pttl)
    assert.are.equal(0, (h.sh(cli .. "DEL " .. h.quote(want))))
    -- the next call runs at once, and its result is under the same name
    local out, errout
    status, out, errout = h.sh(spawn(dir, "one order-1", { LUMA_SPEC_LOG = log }))
    assert.are.equal("order-1 false\n", out, errout)
    assert.are.same({ "order-1", "order-1" }, lines(log))
    _, value = h.sh(cli .. "--raw GET " .. h.quote(want))
    assert.matches("^C|%x+|{", value)
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("sends each script once and its hash afterwards (EVALSHA), and gives it again to a server that forgot it", function()
    local server = redis_server.start()
    local ok, e = pcall(function()
      local dir = project('{ "type": "redis", "url": "' .. server.url .. '" }')
      logged(dir)
      local cli = "env -u LD_PRELOAD redis-cli -p " .. server.port .. " "
      local function calls(name)
        local _, info = h.sh(cli .. "INFO commandstats")
        return tonumber(info:match("cmdstat_" .. name .. ":calls=(%d+)") or "0")
      end
      local p = load(dir)
      for i = 1, 20 do p:call("db_write", { request_id = "k" .. (i % 5), value = "v" }) end
      assert.are.equal(0, calls("eval"))
      -- 20 reserves and 5 completes, each with the script's hash
      assert.are.equal(25, calls("evalsha"))
      assert.is_true(calls("script") <= 2, "SCRIPT LOAD " .. calls("script") .. " times")
      -- a server that forgot its scripts is given them again
      assert.are.equal(0, (h.sh(cli .. "SCRIPT FLUSH")))
      local r, meta = p:call("db_write", { request_id = "after-flush", value = "v" })
      assert.are.equal("after-flush", r.key)
      assert.is_false(meta.idempotent_replay)
      r, meta = p:call("db_write", { request_id = "after-flush", value = "v" })
      assert.is_true(meta.idempotent_replay)
      assert.are.equal(0, calls("eval"))
      p:close()
      assert.are.same({ "k1", "k2", "k3", "k4", "k0", "after-flush" }, lines(dir .. "/run.log"))
      os.execute("rm -rf " .. h.quote(dir))
    end)
    server:remove()
    assert(ok, e)
  end)

  it("wakes waiting callers when the claim ends, rather than each polling every 10 ms", function()
    local server = redis_server.start()
    local ok, e = pcall(function()
      local dir = project('{ "type": "redis", "url": "' .. server.url .. '" }')
      h.write(dir .. "/worker.lua", WORKER)
      local log = dir .. "/run.log"
      local cli = "env -u LD_PRELOAD redis-cli -p " .. server.port .. " "
      local function calls()
        local _, info = h.sh(cli .. "INFO commandstats")
        return tonumber(info:match("cmdstat_evalsha:calls=(%d+)") or "0")
      end
      -- the holder's handler runs 2 s; 6 waiters of other processes wait for it
      local waiters = 6
      local cmd = { spawn(dir, "one wake-1 db_write timed", { LUMA_SPEC_LOG = log, LUMA_SPEC_SLEEP = "2" }) ..
        " > " .. h.quote(dir .. "/holder.out") .. " &", "sleep 0.4;" }
      for w = 1, waiters do
        cmd[#cmd + 1] = spawn(dir, "one wake-1 db_write timed", { LUMA_SPEC_LOG = log }) .. " > " ..
          h.quote(dir .. "/waiter" .. w .. ".out") .. " &"
      end
      local before = calls()
      assert.is_truthy(os.execute(table.concat(cmd, " ") .. " wait"))
      local used = calls() - before
      assert.are.same({ "wake-1" }, lines(log))
      local held = h.read(dir .. "/holder.out")
      assert.matches("^wake%-1 false\nended %d+\n$", held)
      local done = tonumber(held:match("ended (%d+)"))
      local late = 0
      for w = 1, waiters do
        local said = h.read(dir .. "/waiter" .. w .. ".out")
        assert.matches("^wake%-1 true\nended %d+\n$", said)
        late = math.max(late, tonumber(said:match("ended (%d+)")) - done)
      end
      -- woken by the holder's announcement: polling alone (every 250 ms at
      -- most) would leave the last waiter about 200 ms behind
      assert.is_true(late < 120, "the last waiter ended " .. late .. " ms after the holder")
      -- polling every 10 ms, 6 waiters cost about 6 x 160 scripts in 1.6 s;
      -- a wait that doubles up to 250 ms costs about 6 x 12
      print(string.format("\n    [redis: %d waiters over 1.6 s ran %d scripts (%.0f a second), the holder 2]",
        waiters, used - 2, (used - 2) / 1.6))
      assert.is_true(used < 2 + waiters * 20, used .. " scripts")
      os.execute("rm -rf " .. h.quote(dir))
    end)
    server:remove()
    assert(ok, e)
  end)

  it("ends a wait on a killed holder with a retryable TOOL_TIMEOUT that gives the lease left", function()
    local dir = project('{ "type": "redis", "url": "' .. redis_url() .. '", "prefix": "' .. h.tmpname(":") ..
      '", "lease_ms": 4000 }')
    h.write(dir .. "/worker.lua", WORKER)
    local log = dir .. "/run.log"
    local pidfile = dir .. "/holder.pid"
    os.execute(spawn(dir, "one dead-1 quick_write", { LUMA_SPEC_LOG = log, LUMA_SPEC_SLEEP = "30",
      LUMA_SPEC_PIDFILE = pidfile }) .. " > /dev/null 2>&1 &")
    for _ = 1, 100 do
      if #lines(log) > 0 then break end
      os.execute("sleep 0.05")
    end
    assert.are.equal(1, #lines(log), "the holder did not start its handler")
    os.execute("kill -9 $(cat " .. h.quote(pidfile) .. ")")
    -- quick_write's timeout is 1.5 s, shorter than the lease left
    local status, out, errout = h.sh(spawn(dir, "one dead-1 quick_write why", { LUMA_SPEC_LOG = log }))
    assert.are.equal(0, status, errout)
    assert.matches("^TOOL_TIMEOUT: Tool 'quick_write' timed out waiting for another call with idempotency key " ..
      "'dead%-1': its holder may have died, and its claim ends in %d+ ms unless renewed; retry then%.\n", out)
    local left = tonumber(out:match("lease_left_ms=(%d+)"))
    assert.matches("retryable=true", out)
    assert.is_true(left and left > 0 and left < 4000, out)
    -- a retry after the lease runs the handler
    os.execute(string.format("sleep %.2f", left / 1000 + 0.1))
    status, out = h.sh(spawn(dir, "one dead-1 quick_write", { LUMA_SPEC_LOG = log }))
    assert.are.equal("dead-1 false\n", out)
    assert.are.same({ "dead-1", "dead-1" }, lines(log))
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("stores a result once the server is back, when it went down while the handler ran", function()
    local server = redis_server.start()
    local ok, e = pcall(function()
      local dir = project('{ "type": "redis", "url": "' .. server.url .. '" }')
      h.write(dir .. "/worker.lua", WORKER)
      local log = dir .. "/run.log"
      -- the handler runs 1.5 s; the server is down from 0.3 s to 1 s
      os.execute(spawn(dir, "one down-1", { LUMA_SPEC_LOG = log, LUMA_SPEC_SLEEP = "1.5" }) .. " > " ..
        h.quote(dir .. "/first.out") .. " 2>&1 &")
      for _ = 1, 100 do
        if #lines(log) > 0 then break end
        os.execute("sleep 0.05")
      end
      os.execute("sleep 0.3")
      server:stop()
      os.execute("sleep 0.7")
      server:start_again()
      for _ = 1, 200 do
        if (h.read(dir .. "/first.out") or ""):find("\n") then break end
        os.execute("sleep 0.05")
      end
      assert.are.equal("down-1 false\n", h.read(dir .. "/first.out"))
      local _, out = h.sh(spawn(dir, "one down-1", { LUMA_SPEC_LOG = log }))
      assert.are.equal("down-1 true\n", out)
      assert.are.same({ "down-1" }, lines(log))
      -- a server that stays down past the deadline: the one case that may repeat
      os.execute(spawn(dir, "one down-2 quick_write why", { LUMA_SPEC_LOG = log, LUMA_SPEC_SLEEP = "0.5" }) .. " > " ..
        h.quote(dir .. "/second.out") .. " 2>&1 &")
      for _ = 1, 100 do
        if #lines(log) > 1 then break end
        os.execute("sleep 0.05")
      end
      server:stop()
      for _ = 1, 100 do
        if (h.read(dir .. "/second.out") or ""):find("retryable") then break end
        os.execute("sleep 0.05")
      end
      local said = h.read(dir .. "/second.out")
      assert.matches("^IDEMPOTENCY_STORE_ERROR: The handler of tool 'quick_write' ran, but its result could not be " ..
        "stored before the call's deadline: Redis at 127%.0%.0%.1:%d+/0 cannot be reached.-%. This is the one case " ..
        "where the key may run again: a call with idempotency key 'down%-2' runs the handler again once the claim's " ..
        "lease ends%.\nretryable=false", said)
      os.execute("rm -rf " .. h.quote(dir))
    end)
    server:remove()
    assert(ok, e)
  end)

  it("refuses rediss:// with a clear message, as this hiredis has no TLS", function()
    local dir = project('{ "type": "redis", "url": "rediss://127.0.0.1:6380/0" }')
    local err = h.raised(load, dir)
    assert.are.equal("IDEMPOTENCY_STORE_ERROR", err.code)
    assert.matches("rediss:// %(Redis over TLS%) needs a hiredis with TLS", err.message)
    os.execute("rm -rf " .. h.quote(dir))
  end)
end)

teardown(function() if redis then redis:remove() end end)
