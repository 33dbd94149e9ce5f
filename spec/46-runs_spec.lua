-- Durable runs in a journal, SQLite or Redis: luma.runs and luma.prune_runs,
-- `luma-lua runs` (its table, --json, --prune, a program's config), and
-- luma.load's journal given as a table (the Redis journal written by a
-- durable ask). The runs' rows are written as the journal keeps them (the
-- tables and keys journal_sqlite.h and journal_redis.h document), since no
-- public surface claims a run yet: their owner is resume's.
local luma = require "luma"
local h = require "spec.helpers"
local mock = require "spec.support.mock_provider"
local redis_server = require "spec.support.redis_server"

local DAY = 86400000
local PASSWORD = "pw-46-secret"

local redis

local function now_ms()
  local _, out = h.sh("date +%s%3N")
  return math.tointeger(tonumber(out:match("%d+")))
end

local function cli(args, opts)
  return h.run(args, opts)
end

local function redis_cmd(...)
  local words = { "redis-cli", "--no-auth-warning", "-a", PASSWORD, "-p", tostring(redis.port) }
  for _, w in ipairs { ... } do words[#words + 1] = h.quote(tostring(w)) end
  local status, out = h.sh(table.concat(words, " "))
  assert.are.equal(0, status, out)
  return out
end

-- The runs every case starts from: { id, state, step, owner, lease_until, updated } (created: updated).
local function seed_rows(now)
  return {
    { "r-done", "completed", "finish", "host-a:1", 0, now - 10 * DAY },
    { "r-failed", "failed", "turn 2", "host-a:2", 0, now - 3000 },
    { "r-dead", "running", "turn 1", "host-b:7", now - 1000, now - 2000 },
    { "r-wait", "awaiting_approval", "approve c1", "host-b:8", 0, now - 1000 },
    { "r-live", "running", "turn 3", "host-c:9", now + DAY, now },
  }
end

local BACKENDS = {
  sqlite = {
    journal = function(dir) return dir .. "/journal.db" end,
    cli_journal = function(dir) return dir .. "/journal.db" end,
    seed = function(dir, rows)
      luma.runs(dir .. "/journal.db")   -- makes the file a journal
      local sql = {}
      for _, r in ipairs(rows) do
        sql[#sql + 1] = ("INSERT INTO luma_runs VALUES ('%s', '%s', '%s', '%s', %d, %d, %d);"):format(
          r[1], r[2], r[3], r[4], r[5], r[6], r[6])
      end
      sql[#sql + 1] = "INSERT INTO luma_journal VALUES ('r-live', 1, 1, 'ask', '{}', 'x');"
      local status, out = h.sh("sqlite3 " .. h.quote(dir .. "/journal.db") .. " " .. h.quote(table.concat(sql)))
      assert.are.equal(0, status, out)
    end,
  },
  redis = {
    journal = function()
      return { type = "redis", url = "redis://:" .. PASSWORD .. "@127.0.0.1:" .. redis.port .. "/0" }
    end,
    cli_journal = function() return "redis://:" .. PASSWORD .. "@127.0.0.1:" .. redis.port .. "/0" end,
    seed = function(_, rows)
      local prefix = "luma:"
      redis_cmd("FLUSHALL")
      luma.runs { type = "redis", url = "redis://:" .. PASSWORD .. "@127.0.0.1:" .. redis.port .. "/0" }
      for _, r in ipairs(rows) do
        redis_cmd("HSET", prefix .. "journal:run:" .. r[1], "id", r[1], "state", r[2], "step", r[3], "owner", r[4],
          "lease_until", r[5], "created", r[6], "updated", r[6])
        redis_cmd("ZADD", prefix .. "journal:runs", r[6], r[1])
      end
      redis_cmd("RPUSH", prefix .. "journal:run:r-live:records", "1|x|ask|{}")
    end,
  },
}

setup(function() redis = redis_server.start { password = PASSWORD } end)
teardown(function() if redis then redis:remove() end end)

for _, name in ipairs { "sqlite", "redis" } do
  local b = BACKENDS[name]

  describe("the runs of a " .. name .. " journal", function()
    local dir, journal, now

    before_each(function()
      dir = h.project {}
      journal = b.journal(dir)
      now = now_ms()
      b.seed(dir, seed_rows(now))   -- (Redis: the default prefix, emptied first)
    end)
    after_each(function() os.execute("rm -rf " .. h.quote(dir)) end)

    it("are listed by luma.runs, the most recently changed first, an ended lease as abandoned", function()
      local runs = luma.runs(journal)
      local ids, statuses = {}, {}
      for i, r in ipairs(runs) do
        ids[i] = r.id
        statuses[i] = r.status
      end
      assert.are.same({ "r-live", "r-wait", "r-dead", "r-failed", "r-done" }, ids)
      assert.are.same({ "running", "awaiting_approval", "abandoned", "failed", "completed" }, statuses)
      local live = runs[1]
      assert.are.same({ "turn 3", "host-c:9", 1, now, now + DAY }, { live.step, live.owner, live.records,
        live.created_ms, live.lease_until_ms })
      assert.is_true(runs[5].age_ms >= 10 * DAY and runs[5].age_ms < 10 * DAY + 60000)
    end)

    it("are printed by luma-lua runs: a table, or --json", function()
      local r = cli { "runs", "--journal", b.cli_journal(dir) }
      assert.are.equal(0, r.status, r.stderr)
      local lines = {}
      for line in r.stdout:gmatch("[^\n]+") do lines[#lines + 1] = line end
      assert.are.equal(6, #lines)
      assert.matches("^ID +STATUS +STEP +AGE +OWNER$", lines[1])
      assert.matches("^r%-live +running +turn 3 +%d+s +host%-c:9$", lines[2])
      assert.matches("^r%-wait +awaiting_approval +approve c1 +%d+s +host%-b:8$", lines[3])
      assert.matches("^r%-dead +abandoned +turn 1 +%d+s +host%-b:7$", lines[4])
      assert.matches("^r%-done +completed +finish +10d +host%-a:1$", lines[6])
      r = cli { "runs", "--journal", b.cli_journal(dir), "--json" }
      assert.are.equal(0, r.status, r.stderr)
      local list = luma.json.decode(r.stdout)
      assert.are.equal(5, #list)
      assert.are.same({ "r-live", "awaiting_approval", "host-b:7" }, { list[1].id, list[2].status, list[3].owner })
    end)

    it("are pruned when they ended or were abandoned, past the retention or --older-than", function()
      local r = cli { "runs", "--journal", b.cli_journal(dir), "--prune" }
      assert.are.equal(0, r.status, r.stderr)
      assert.are.equal("pruned 1 run (ended or abandoned, last changed more than 7d ago)\n", r.stdout)
      r = cli { "runs", "--journal", b.cli_journal(dir), "--prune", "--older-than", "1s" }
      assert.are.equal(0, r.status, r.stderr)
      assert.are.equal("pruned 2 runs (ended or abandoned, last changed more than 1s ago)\n", r.stdout)
      -- what runs or awaits a person is kept, however old
      assert.are.equal(0, luma.prune_runs(journal, 0))
      local ids = {}
      for i, run in ipairs(luma.runs(journal)) do ids[i] = run.id end
      assert.are.same({ "r-live", "r-wait" }, ids)
    end)
  end)
end

describe("luma-lua runs", function()
  it("reads the journal of a program's config, a redis one with its password from password_env", function()
    local dir = h.project {
      ["p.luma"] = "schema A { x: int }\n",
      ["luma.config.json"] = ('{ "journal": { "type": "redis", "url": "redis://127.0.0.1:%d/0", ' ..
        '"password_env": "LUMA46_PASSWORD", "prefix": "cfg:" } }'):format(redis.port),
    }
    redis_cmd("DEL", "cfg:journal:runs")
    redis_cmd("HSET", "cfg:journal:run:c-1", "id", "c-1", "state", "completed", "step", "", "owner", "o",
      "lease_until", 0, "created", 1, "updated", 1)
    redis_cmd("ZADD", "cfg:journal:runs", 1, "c-1")
    local r = cli({ "runs", dir .. "/p.luma", "--json" }, { env = { LUMA46_PASSWORD = PASSWORD } })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ "c-1", "completed" }, { luma.json.decode(r.stdout)[1].id, luma.json.decode(r.stdout)[1].status })
    r = cli({ "runs", dir .. "/p.luma" }, { unset = { "LUMA46_PASSWORD" } })
    assert.are.equal(1, r.status)
    assert.matches("Error: %[JOURNAL_ERROR%] The redis journal takes its password from LUMA46_PASSWORD " ..
      "%(journal.password_env%), which is not set.", r.stderr)
    h.write(dir .. "/luma.config.json", '{ "journal": { "type": "sqlite", "url": "x" } }')
    r = cli { "runs", dir .. "/p.luma" }
    assert.are.equal(1, r.status)
    assert.matches("luma.config.json: journal.url is only for a redis journal", r.stderr, 1, true)
    h.write(dir .. "/luma.config.json", '{ "journal": {} }')
    r = cli { "runs", dir .. "/p.luma" }
    assert.are.equal(1, r.status)
    assert.are.equal("Error: there is no journal at '" .. dir .. "/.luma-journal.db'\n", r.stderr)
    assert.is_nil(io.open(dir .. "/.luma-journal.db"), "runs makes no journal")
    luma.runs(dir .. "/.luma-journal.db")   -- (a config's sqlite journal is .luma-journal.db by default)
    r = cli { "runs", dir .. "/p.luma" }
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal("no runs\n", r.stdout)
    h.write(dir .. "/luma.config.json", '{ }')
    r = cli { "runs", dir .. "/p.luma" }
    assert.are.equal(1, r.status)
    assert.matches('has no "journal" (give --journal PATH|URL)', r.stderr, 1, true)
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("refuses what it does not understand, with exit 2", function()
    for _, args in ipairs {
      { { "runs" }, "runs needs --journal PATH|URL, or a PROGRAM" },
      { { "runs", "--journal", "x.db", "--older-than", "3d" }, "--older-than goes with --prune" },
      { { "runs", "--journal", "x.db", "--prune", "--older-than", "3y" }, "--older-than must be a number followed by" },
      { { "runs", "--jsn" }, "unknown option '--jsn' of runs (did you mean '--json'?)" },
    } do
      local r = cli(args[1])
      assert.are.equal(2, r.status, table.concat(args[1], " "))
      assert.matches(args[2], r.stderr, 1, true)
    end
  end)
end)

describe("luma.load's journal as a table", function()
  local server

  setup(function() server = mock.start() end)
  teardown(function() if server then server:stop() end end)

  local function project()
    return h.project {
      ["flow.luma"] = ([[
schema Answer { total: int }
model M {
  provider: "openai"
  name: "gpt-test"
  base_url: "%s/v1"
  api_key_env: "LUMA46_KEY"
}
agent A {
  model: M
  durable: true
  fn run(x: int) -> Answer { ask "Add {x} and 2" -> Answer }
}
]]):format(server.url),
    }
  end
  local function lookup(name) return name == "LUMA46_KEY" and "sk-46-test" or nil end

  it("writes a durable ask's records to Redis, under its prefix", function()
    server:reset()
    server:script { mock.chat('{"total":3}') }
    local dir = project()
    local p = luma.load(dir .. "/flow.luma", { lookup = lookup, journal = {
      type = "redis", url = "redis://:" .. PASSWORD .. "@127.0.0.1:" .. redis.port .. "/0", prefix = "ask46:" } })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    p:close()
    local keys = redis_cmd("--scan", "--pattern", "ask46:journal:run:*:records")
    local key = keys:match("[^\n]+")
    assert.is_truthy(key, keys)
    assert.are.equal("3", redis_cmd("LLEN", key):match("%d+"))
    local first = redis_cmd("LINDEX", key, 0)
    assert.matches("^1|%x+|ask|{\"prompt\":\"Add 1 and 2\"", first)
    assert.are.same({ "format", "luma-journal", "version", "1" },
      (function() local t = {} for w in redis_cmd("HGETALL", "ask46:journal:meta"):gmatch("[^\n]+") do t[#t + 1] = w end return t end)())
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("writes to a SQLite file with sync, and names the key path of what is wrong", function()
    server:reset()
    server:script { mock.chat('{"total":3}') }
    local dir = project()
    local p = luma.load(dir .. "/flow.luma", { lookup = lookup, journal = { type = "sqlite", path = dir .. "/j.db", sync = true } })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    p:close()
    local _, out = h.sh("sqlite3 " .. h.quote(dir .. "/j.db") .. " 'SELECT COUNT(*) FROM luma_journal'")
    assert.are.equal("3", out:match("%d+"))
    for _, case in ipairs {
      { { type = "mysql" }, 'luma.load: journal.type must be "sqlite" or "redis", not "mysql"' },
      { { type = "sqlite", url = "redis://x" }, "luma.load: journal.url is only for a redis journal" },
      { { type = "redis", path = "x.db" }, "luma.load: journal.path is only for a sqlite journal" },
      { { type = "redis" }, "luma.load: journal.url is missing: it must be a string" },
      { { type = "sqlite", sync = "yes" }, "luma.load: journal.path is missing" },
      { { type = "sqlite", path = "j.db", sync = "yes" }, "luma.load: journal.sync must be a boolean" },
      { { tpye = "sqlite" }, "luma.load: journal has no key 'tpye'. Did you mean 'type'?" },
      { { type = "redis", url = "redis://127.0.0.1:1/0", password_env = "LUMA46_NONE" },
        "The redis journal takes its password from LUMA46_NONE (journal.password_env), which is not set." },
    } do
      local err = h.raised(luma.load, dir .. "/flow.luma", { lookup = lookup, journal = case[1] })
      assert.matches(case[2], err.message, 1, true)
    end
    os.execute("rm -rf " .. h.quote(dir))
  end)
end)
