local luma = require "luma"
local cjson = require "cjson"
local h = require "spec.helpers"

local SOURCE = [[
schema DbResult { ok: bool, run: int }
tool db_write(request_id: string, value: string, meta?: any) -> DbResult {
  side_effects: "write"
  idempotent: true
  idempotency_key: input.request_id
  idempotency_ttl_ms: 60000
}
]]

-- A handler that counts its runs.
local function counting(p)
  local runs = 0
  p:register("db_write", function(input)
    runs = runs + 1
    return { ok = true, run = runs }
  end)
  return function() return runs end
end

local function write(p, id, value)
  return p:call("db_write", { request_id = id, value = value or "v" })
end

describe("idempotency (the memory store)", function()
  local function program()
    local clock = h.clock()
    local dir = h.project { ["program.luma"] = SOURCE }
    local p = assert(h.load(dir, { config = false, clock = clock }))
    return p, clock
  end

  it("runs the handler once per key and replays the stored result", function()
    local p = program()
    local runs = counting(p)
    local events = {}
    p:configure { on_event = function(e) events[#events + 1] = e end }
    local first, m1 = write(p, "r1")
    local again, m2 = write(p, "r1")
    assert.are.equal(1, runs())
    assert.are.same(first, again)
    assert.is_false(m1.idempotent_replay)
    assert.is_true(m2.idempotent_replay)
    assert.is_true(events[2].idempotent_replay)
    write(p, "r2")
    assert.are.equal(2, runs())
  end)

  it("fails with TOOL_IDEMPOTENCY_CONFLICT for the same key with another input", function()
    local p = program()
    counting(p)
    write(p, "r1", "a")
    local err = h.raised(write, p, "r1", "b")
    assert.are.same({ "TOOL_IDEMPOTENCY_CONFLICT", "Tool 'db_write' was already called with idempotency key 'r1' and another input." },
      { err.code, err.message })
  end)

  it("compares inputs after defaults and whatever their key order", function()
    local p = program()
    local runs = counting(p)
    p:call("db_write", { request_id = "r", value = "v", meta = { a = 1, b = 2 } })
    p:call("db_write", { meta = { b = 2, a = 1 }, value = "v", request_id = "r" })
    assert.are.equal(1, runs())
  end)

  it("runs again once the TTL expired", function()
    local p, clock = program()
    local runs = counting(p)
    write(p, "r1")
    clock.t = clock.t + 59999
    write(p, "r1")
    assert.are.equal(1, runs())
    clock.t = clock.t + 2
    write(p, "r1")
    assert.are.equal(2, runs())
  end)

  it("does not keep a failure: the next call runs", function()
    local p = program()
    local calls = 0
    p:register("db_write", function()
      calls = calls + 1
      if calls == 1 then error("transient") end
      return { ok = true, run = calls }
    end)
    h.raised(write, p, "r1")
    assert.are.same({ ok = true, run = 2 }, (write(p, "r1")))
  end)

  it("reads a nested key path", function()
    local dir = h.project { ["program.luma"] = [[
schema R { n: int }
schema Meta { id: string }
tool t(meta: Meta, v: int) -> R { idempotent: true
  idempotency_key: meta.id }]] }
    local p = assert(h.load(dir, { config = false }))
    local runs = 0
    p:register("t", function() runs = runs + 1 return { n = runs } end)
    p:call("t", { meta = { id = "k" }, v = 1 })
    p:call("t", { meta = { id = "k" }, v = 1 })
    assert.are.equal(1, runs)
    assert.are.equal("TOOL_IDEMPOTENCY_CONFLICT", h.raised(p.call, p, "t", { meta = { id = "k" }, v = 2 }).code)
  end)
end)

-- A project whose db_write appends its key to run.log and whose store is a file.
local TOOLS = [[
return { db_write = function(input)
  local f = assert(io.open(os.getenv("LUMA_SPEC_LOG"), "a"))
  f:write(input.request_id, "\n")
  f:close()
  return { ok = true, run = 1 }
end }]]

local function file_project(store)
  local dir = h.project {
    ["program.luma"] = SOURCE .. 'a = tool db_write({ request_id: "r1", value: "x" })\n',
    ["tools.lua"] = TOOLS,
    ["luma.config.json"] = '{ "tool_modules": ["tools.lua"], "idempotency_store": ' .. store .. ' }',
  }
  return dir
end

local lines = h.lines

describe("idempotency (the file store)", function()
  it("keeps results between processes", function()
    local dir = file_project('{ "backend": "file", "path": "store.json" }')
    local env = { LUMA_SPEC_LOG = dir .. "/run.log" }
    local r1 = h.run({ "program.luma", "--trace", "t.jsonl" }, { cwd = dir, env = env })
    local r2 = h.run({ "program.luma", "--trace", "t.jsonl" }, { cwd = dir, env = env })
    assert.are.equal(0, r1.status, r1.stderr)
    assert.are.equal(r1.stdout, r2.stdout)
    assert.are.equal(1, #lines(dir .. "/run.log"))
    local trace = lines(dir .. "/t.jsonl")
    assert.is_true(cjson.decode(trace[2]).idempotent_replay)
    local store = cjson.decode(h.read(dir .. "/store.json"))
    assert.are.equal("luma-idempotency", store.format)
    assert.are.equal(1, store.version)
  end)

  it("runs the handler exactly once per key across 8 processes of 200 calls over 50 keys", function()
    local dir = file_project('{ "backend": "file", "path": "store.json" }')
    local script = h.write(dir .. "/worker.lua", [[
package.path = arg[1] .. "/lua/?.lua;" .. arg[1] .. "/lua/?/init.lua;" .. package.path
package.cpath = arg[2] .. "/?.so;" .. package.cpath
local luma = require "luma"
local p = luma.load("program.luma")
for i = 1, 200 do
  local key = "k" .. ((i * 7 + tonumber(arg[3])) % 50)
  p:call("db_write", { request_id = key, value = "same" })
end
]])
    local build = h.root .. "/" .. (os.getenv("LUMA_BUILD") or "build")
    local cmd = {}
    for w = 1, 8 do
      cmd[#cmd + 1] = string.format("(cd %s && LUMA_SPEC_LOG=%s lua5.4 %s %s %s %d) &", h.quote(dir),
        h.quote(dir .. "/run.log"), h.quote(script), h.quote(h.root), h.quote(build), w)
    end
    assert.is_truthy(os.execute(table.concat(cmd, " ") .. " wait"))
    local keys = lines(dir .. "/run.log")
    assert.are.equal(50, #keys)
    local seen = {}
    for _, k in ipairs(keys) do
      assert.is_nil(seen[k], "ran twice: " .. k)
      seen[k] = true
    end
  end)

  it("leaves a readable store and a usable lock after kill -9 during writes", function()
    local dir = file_project('{ "backend": "file", "path": "store.json" }')
    local script = h.write(dir .. "/writer.lua", [[
package.path = arg[1] .. "/lua/?.lua;" .. arg[1] .. "/lua/?/init.lua;" .. package.path
package.cpath = arg[2] .. "/?.so;" .. package.cpath
local p = require("luma").load("program.luma")
local i = 0
while true do
  i = i + 1
  p:call("db_write", { request_id = "w" .. i, value = "v" })
end
]])
    local build = h.root .. "/" .. (os.getenv("LUMA_BUILD") or "build")
    for round = 1, 3 do
      local pidfile = dir .. "/pid"
      os.execute(string.format("cd %s && (LUMA_SPEC_LOG=/dev/null lua5.4 %s %s %s & echo $! > %s)",
        h.quote(dir), h.quote(script), h.quote(h.root), h.quote(build), h.quote(pidfile)))
      os.execute("sleep 0.2" .. round)
      os.execute("kill -9 $(cat " .. h.quote(pidfile) .. ") 2>/dev/null; sleep 0.05")
      local r = h.run({ "program.luma" }, { cwd = dir, env = { LUMA_SPEC_LOG = "/dev/null" } })
      assert.are.equal(0, r.status, r.stderr)
      assert.are.equal("", r.stderr)
      assert.is_truthy(cjson.decode(h.read(dir .. "/store.json")))
    end
  end)

  it("moves a corrupt file aside and starts a new one", function()
    local dir = file_project('{ "backend": "file", "path": "store.json" }')
    h.write(dir .. "/store.json", "{ not json")
    local r = h.run({ "program.luma" }, { cwd = dir, env = { LUMA_SPEC_LOG = "/dev/null" } })
    assert.are.equal(0, r.status, r.stderr)
    assert.matches("^warning: the idempotency store '.*store.json' was corrupt: it was moved to '.*store.json.corrupt%-%d+'",
      r.stderr)
    local f = assert(io.popen("ls " .. h.quote(dir)))
    local listing = f:read("*a")
    f:close()
    assert.matches("store.json.corrupt%-%d+", listing)
  end)

  it("says so to the host's on_event, and writes nothing to stderr itself", function()
    local dir = file_project('{ "backend": "file", "path": "store.json" }')
    h.write(dir .. "/store.json", "{ not json")
    local script = h.write(dir .. "/host.lua", [[
package.path = arg[1] .. "/lua/?.lua;" .. arg[1] .. "/lua/?/init.lua;" .. package.path
package.cpath = arg[2] .. "/?.so;" .. package.cpath
local luma = require "luma"
luma.load("program.luma", { on_event = function(e) print(e.kind, e.message) end })
]])
    local build = h.root .. "/" .. (os.getenv("LUMA_BUILD") or "build")
    local status, out, err = h.sh("cd " .. h.quote(dir) .. " && lua5.4 " .. h.quote(script) .. " " .. h.quote(h.root) ..
      " " .. h.quote(build))
    assert.are.equal(0, status, err)
    assert.are.equal("", err)
    assert.matches("^warning\tthe idempotency store '.*store.json' was corrupt: it was moved to '.*store.json.corrupt%-%d+' " ..
      "and a new one created\n$", out)
  end)
end)

describe("idempotency (the encrypted file store)", function()
  local store = '{ "backend": "file", "path": "store.json", "encryption": "aes-256-gcm" }'

  it("encrypts the records with LUMA_IDEMPOTENCY_KEY", function()
    local dir = file_project(store)
    local env = { LUMA_SPEC_LOG = dir .. "/run.log", LUMA_IDEMPOTENCY_KEY = "correct horse battery staple" }
    local r1 = h.run({ "program.luma" }, { cwd = dir, env = env })
    local r2 = h.run({ "program.luma" }, { cwd = dir, env = env })
    assert.are.equal(0, r1.status, r1.stderr)
    assert.are.equal(0, r2.status, r2.stderr)
    assert.are.equal(1, #lines(dir .. "/run.log"))
    local text = h.read(dir .. "/store.json")
    local doc = cjson.decode(text)
    assert.are.equal("aes-256-gcm", doc.encryption)
    -- a record would name its tool: with ciphertext in base64 that cannot appear by chance
    assert.is_nil(text:find("db_write", 1, true))
    assert.is_nil(text:find('"records"', 1, true))
  end)

  it("refuses to run without the key", function()
    local dir = file_project(store)
    local r = h.run({ "program.luma" }, { cwd = dir, env = { LUMA_SPEC_LOG = "/dev/null" }, unset = { "LUMA_IDEMPOTENCY_KEY" } })
    assert.are.equal(2, r.status)
    assert.are.equal("Error: The idempotency store is encrypted (aes-256-gcm), but LUMA_IDEMPOTENCY_KEY is not set.\n", r.stderr)
  end)

  it("gives a clear error for a wrong key and keeps every record", function()
    local dir = file_project(store)
    local env = { LUMA_SPEC_LOG = "/dev/null", LUMA_IDEMPOTENCY_KEY = "right" }
    assert.are.equal(0, h.run({ "program.luma" }, { cwd = dir, env = env }).status)
    local before = h.read(dir .. "/store.json")
    env.LUMA_IDEMPOTENCY_KEY = "wrong"
    local r = h.run({ "program.luma" }, { cwd = dir, env = env })
    assert.are.equal(2, r.status)
    assert.matches("^Error: Cannot open the idempotency store '.*store.json': ", r.stderr)
    assert.matches("wrong", r.stderr)
    assert.are.equal(before, h.read(dir .. "/store.json"))
  end)

  it("gives a clear error for a tampered file", function()
    local dir = file_project(store)
    local env = { LUMA_SPEC_LOG = "/dev/null", LUMA_IDEMPOTENCY_KEY = "right" }
    assert.are.equal(0, h.run({ "program.luma" }, { cwd = dir, env = env }).status)
    local doc = cjson.decode(h.read(dir .. "/store.json"))
    local c = doc.ciphertext
    doc.ciphertext = (c:sub(1, 1) == "A" and "B" or "A") .. c:sub(2)
    h.write(dir .. "/store.json", cjson.encode(doc))
    local r = h.run({ "program.luma" }, { cwd = dir, env = env })
    assert.are.equal(2, r.status)
    assert.matches("the passphrase is wrong or the file was modified", r.stderr, 1, true)
  end)
end)
