-- Durable asks resumed (issue 30): a durable agent's ask killed with SIGKILL
-- at every step boundary, and at random ones, then resumed by another
-- process from its journal: the same answer as a run that was never
-- killed, every idempotent effect once, and only the turns the journal had
-- not answered asked of the provider again. Also a torn journal, a record
-- of a later format, a live owner, a finished run, telemetry.
local luma = require "luma"
local h = require "spec.helpers"
local mock = require "spec.support.mock_provider"
local redis = require "spec.support.redis_server"

local KEY = "sk-durable-test-0123456789"
local chat = mock.chat

-- The model's turns: two charges, one charge, the answer.
local TURNS = {
  chat(nil, { { "c1", "charge", '{"order":"o1","amount":10}' }, { "c2", "charge", '{"order":"o2","amount":20}' } }),
  chat(nil, { { "c3", "charge", '{"order":"o3","amount":30}' } }),
  chat('{"total":60}'),
}
-- The records an uncrashed run writes, by seq; the turn of each exchange.
local KINDS = { "ask", "exchange", "tool", "tool", "exchange", "tool", "exchange", "finish" }
local EXCHANGE_TURN = { [2] = 1, [5] = 2, [7] = 3 }

local function project(url)
  return h.project {
    ["flow.luma"] = ([[
schema Receipt { order: string, charged: int }
schema Answer { total: int }
tool charge(order: string, amount: int) -> Receipt {
  side_effects: "write"
  idempotent: true
  idempotency_key: order
}
model M {
  provider: "openai"
  name: "gpt-test"
  base_url: "%s/v1"
  api_key_env: "LUMA_DURABLE_KEY"
}
agent A {
  model: M
  tools: [charge]
  durable: true
  fn run(x: int) -> Answer { ask "Charge the orders of batch {x}" -> Answer }
}
]]):format(url),
    ["tools.lua"] = "",
    ["luma.config.json"] = '{ "tool_modules": ["./tools.lua"], "idempotency_store": { "type": "sqlite", "path": "idem.db" } }',
  }
end

-- Every real execution of the tool is a line of dir's effects file.
local function write_tools(dir)
  h.write(dir .. "/tools.lua", ([[
return { charge = function(i)
  local f = assert(io.open(%q, "a"))
  f:write(i.order, "\n")
  f:close()
  return { order = i.order, charged = i.amount }
end }
]]):format(dir .. "/effects.txt"))
end

local function sql(path, query)
  local status, out = h.sh("env -u LD_PRELOAD sqlite3 " .. h.quote(path) .. " " .. h.quote(query))
  assert(status == 0, out)
  return out
end

local function run_of(journal)
  return (sql(journal, "SELECT DISTINCT run FROM luma_journal"):match("run%-%x+"))
end

-- The requests of batch x, by turn: { [turn] = count }.
local function turns_asked(server, x)
  local asked = {}
  for _, r in ipairs(server:requests()) do
    if r.turn and r.body:find("batch " .. x .. "\"", 1, true) then asked[r.turn] = (asked[r.turn] or 0) + 1 end
  end
  return asked
end

local function effects(dir)
  local f = io.open(dir .. "/effects.txt")
  if not f then return {} end
  local list = {}
  for line in f:lines() do list[#list + 1] = line end
  f:close()
  table.sort(list)
  return list
end

describe("a durable ask killed and resumed", function()
  local server, base

  setup(function()
    server = mock.start()
    server:turns(TURNS)
    base = project(server.url)
    write_tools(base)
  end)
  teardown(function()
    if server then server:stop() end
    if base then os.execute("rm -rf " .. h.quote(base)) end
  end)

  -- A fresh copy of the project for one run.
  local copies = 0
  local function fresh()
    copies = copies + 1
    local dir = base .. "/run" .. copies
    assert(os.execute("mkdir -p " .. h.quote(dir)))
    for _, name in ipairs { "flow.luma", "luma.config.json" } do h.write(dir .. "/" .. name, h.read(base .. "/" .. name)) end
    write_tools(dir)
    return dir
  end

  local LUMA = h.quote(h.root .. "/bin/luma-lua")

  -- The shell lines of one chain: the ask started, killed at kills[1], then
  -- resumed and killed at kills[2], ..., then resumed to its end. A resume
  -- that finds the killed owner's lease not ended yet tries again. Each
  -- process's exit status goes to statuses; the answer to answer.json.
  local function chain_script(c)
    local lines = {
      -- (under ASan the luma-lua built with it needs no preload; the tools the script runs want none)
      "unset LD_PRELOAD",
      "cd " .. h.quote(c.dir),
      "export LUMA_DURABLE_KEY=" .. KEY,
      -- every third chain streams: a streamed turn is journaled as the response it stands for
      "OPTS='--journal " .. (c.redis and c.redis.url or "j.db") .. " --journal-lease-ms 60" ..
        (c.x % 3 == 0 and " --stream-events'" or "'"),
      ("env LUMA_JOURNAL_CRASH=%s %s flow.luma --agent A --input '{\"x\": %d}' $OPTS > answer.json 2> err.txt; " ..
        "echo $? >> statuses"):format(c.kills[1] or "none", LUMA, c.x),
      c.redis and ("run=$(env -u LD_PRELOAD redis-cli -p %d -n %d --scan --pattern 'luma:journal:run:*:records' | " ..
        "sed 's/^luma:journal:run://; s/:records$//')"):format(c.redis.port, c.redis.db)
        or "run=$(sqlite3 j.db 'SELECT DISTINCT run FROM luma_journal')",
    }
    local kills = c.kills
    local function resume(crash)
      return ("while :; do env LUMA_JOURNAL_CRASH=%s %s resume \"$run\" flow.luma $OPTS > answer.json 2> err.txt; " ..
        "s=$?; if [ $s = 1 ] && grep -q 'is held by' err.txt; then sleep 0.03; continue; fi; echo $s >> statuses; " ..
        "break; done"):format(crash, LUMA)
    end
    for i = 2, #kills do lines[#lines + 1] = resume(kills[i]) end
    if #kills > 0 then lines[#lines + 1] = resume("none") end
    lines[#lines + 1] = "echo \"$run\" > run.txt; echo done > finished"
    return table.concat(lines, "\n") .. "\n"
  end

  -- Runs the chains at once, in the background; waits for them all.
  local function run_chains(chains)
    for _, c in ipairs(chains) do
      h.write(c.dir .. "/chain.sh", chain_script(c))
      assert(os.execute("sh " .. h.quote(c.dir .. "/chain.sh") .. " > /dev/null 2>&1 &"))
    end
    for _, c in ipairs(chains) do
      for _ = 1, 6000 do
        if io.open(c.dir .. "/finished") then break end
        os.execute("sleep 0.02")
      end
      assert(io.open(c.dir .. "/finished"), "chain " .. c.x .. " did not finish")
    end
  end

  -- Which global seq each kill fell on, from the kill points (a process
  -- killed "after:n" wrote n records, "before:n" n - 1).
  local function kill_seqs(kills)
    local written, seqs = 0, {}
    for _, k in ipairs(kills) do
      local when, n = k:match("^(%a+):(%d+)$")
      n = tonumber(n)
      if written + n > #KINDS or (when == "before" and written + n > #KINDS) then break end
      seqs[#seqs + 1] = { when = when, seq = written + n }
      written = written + (when == "after" and n or n - 1)
    end
    return seqs
  end

  -- Checks one chain's outcome; returns how many processes it killed.
  local function check_chain(c)
    local statuses = {}
    for line in io.lines(c.dir .. "/statuses") do statuses[#statuses + 1] = tonumber(line) end
    local killed = 0
    for i, s in ipairs(statuses) do
      if s == 137 then killed = killed + 1
      else assert.are.equal(#statuses, i, "chain " .. c.x .. ": a process that was not killed ended before the last: " ..
        h.read(c.dir .. "/err.txt")) end
    end
    assert.are.equal(0, statuses[#statuses], "chain " .. c.x .. ": " .. h.read(c.dir .. "/err.txt"))
    -- the answer of a run that was never killed
    -- (after the events of a streaming chain, the result is the last line)
    local text = h.read(c.dir .. "/answer.json")
    if c.x % 3 == 0 then text = text:match("([^\n]+)\n*$") end
    assert.are.same({ total = 60 }, luma.json.decode(text))
    -- every charge happened once
    assert.are.same({ "o1", "o2", "o3" }, effects(c.dir), "chain " .. c.x)
    -- each turn was asked once, and again only after a process died between
    -- its answer and its exchange record
    local expected = { 1, 1, 1 }
    for _, k in ipairs(kill_seqs(c.kills)) do
      local turn = EXCHANGE_TURN[k.seq]
      if turn and k.when == "before" then expected[turn] = expected[turn] + 1 end
    end
    local asked = turns_asked(server, c.x)
    assert.are.same(expected, { asked[1] or 0, asked[2] or 0, asked[3] or 0 }, "chain " .. c.x .. " " ..
      table.concat(c.kills, ","))
    -- the journal: each record once
    if c.redis then
      local run = h.read(c.dir .. "/run.txt"):match("run%-%x+")
      local _, n = h.sh(("env -u LD_PRELOAD redis-cli -p %d -n %d LLEN 'luma:journal:run:%s:records'"):format(
        c.redis.port, c.redis.db, run))
      assert.are.equal(#KINDS, tonumber(n), "chain " .. c.x)
    else
      local kinds = {}
      for kind in sql(c.dir .. "/j.db", "SELECT kind FROM luma_journal ORDER BY seq"):gmatch("%a+") do
        kinds[#kinds + 1] = kind
      end
      assert.are.same(KINDS, kinds, "chain " .. c.x)
    end
    return killed
  end

  local total_kills = 0
  local next_x = 0

  local function chains_of(kill_lists, store)
    local chains = {}
    for i, kills in ipairs(kill_lists) do
      next_x = next_x + 1
      -- on Redis, each chain in a database of its own
      chains[#chains + 1] = { dir = fresh(), x = next_x, kills = kills,
                              redis = store and { url = store.url:gsub("/0$", "/" .. (i - 1)), port = store.port, db = i - 1 } }
    end
    return chains
  end

  local function every_boundary()
    local lists = {}
    for n = 1, #KINDS - 1 do lists[#lists + 1] = { "after:" .. n } end
    for n = 2, #KINDS do lists[#lists + 1] = { "before:" .. n } end
    return lists
  end

  it("resumes from every step boundary: before and after each record", function()
    local chains = chains_of(every_boundary())
    run_chains(chains)
    for _, c in ipairs(chains) do total_kills = total_kills + check_chain(c) end
    assert.are.equal(2 * (#KINDS - 1), total_kills)
  end)

  it("resumes from every step boundary with a Redis journal", function()
    local store = redis.start()
    local ok, err = pcall(function()
      local chains = chains_of(every_boundary(), store)
      run_chains(chains)
      local killed = 0
      for _, c in ipairs(chains) do killed = killed + check_chain(c) end
      assert.are.equal(2 * (#KINDS - 1), killed)
      total_kills = total_kills + killed
    end)
    store:remove()
    assert(ok, err)
  end)

  -- 200 kill points in all; under valgrind, which checks the memory of the
  -- same paths at a tenth of the speed, 60 (the plain and ASan runs make 200)
  local KILLS = h.by_instrumentation(200, 200, 60)

  it("resumes runs killed again and again at random points (seeded)", function()
    local seed = tonumber(os.getenv("LUMA_DURABLE_SEED") or "") or 45
    math.randomseed(seed)
    local lists = {}
    -- each chain kills until the run has no step left; about 4 a chain
    while true do
      local kills, written = {}, 0
      while written < #KINDS - 1 do
        local when = math.random(2) == 1 and "before" or "after"
        local left = #KINDS - written
        local n = when == "before" and math.random(2, math.max(2, left)) or math.random(1, left - 1)
        if when == "before" and n > left then break end
        kills[#kills + 1] = when .. ":" .. n
        written = written + (when == "after" and n or n - 1)
      end
      lists[#lists + 1] = kills
      local count = 0
      for _, l in ipairs(lists) do count = count + #l end
      if count + total_kills >= KILLS then break end
    end
    local killed = 0
    -- in batches of 16 chains at once
    for first = 1, #lists, 16 do
      local batch = {}
      for i = first, math.min(first + 15, #lists) do batch[#batch + 1] = lists[i] end
      local chains = chains_of(batch)
      run_chains(chains)
      for _, c in ipairs(chains) do killed = killed + check_chain(c) end
    end
    total_kills = total_kills + killed
    assert.is_true(total_kills >= KILLS, "kill points: " .. total_kills .. " (seed " .. seed .. ")")
    print(("\n  %d processes killed in all (seed %d)"):format(total_kills, seed))
  end)
end)

describe("a durable ask's journal when resumed", function()
  local server, dir

  setup(function()
    server = mock.start()
    server:turns(TURNS)
    dir = project(server.url)
    write_tools(dir)
  end)
  teardown(function()
    if server then server:stop() end
    if dir then os.execute("rm -rf " .. h.quote(dir)) end
  end)

  local function lookup(name) return name == "LUMA_DURABLE_KEY" and KEY or nil end

  -- a run killed after its record n, in a fresh journal; its id
  local function killed_at(n, x)
    os.remove(dir .. "/j.db")
    os.remove(dir .. "/j.db-wal")
    os.remove(dir .. "/j.db-shm")
    os.remove(dir .. "/idem.db")
    os.remove(dir .. "/idem.db-wal")
    os.remove(dir .. "/idem.db-shm")
    os.remove(dir .. "/effects.txt")
    local r = h.run({ dir .. "/flow.luma", "--agent", "A", "--input", '{"x": ' .. x .. '}', "--journal", dir .. "/j.db",
                      "--journal-lease-ms", "30" },
                    { cwd = dir, env = { LUMA_DURABLE_KEY = KEY, LUMA_JOURNAL_CRASH = "after:" .. n } })
    assert.are.equal(137, r.status, r.stderr)
    os.execute("sleep 0.1")   -- the killed owner's lease ends
    return run_of(dir .. "/j.db")
  end

  it("cuts a torn tail and runs its step again: a record cut mid-write", function()
    local run = killed_at(6, 101)   -- the ask, turn 1 and its two calls, turn 2 and its call
    -- the call's record cut short behind the journal's back, as a torn write leaves it
    sql(dir .. "/j.db", "UPDATE luma_journal SET body = substr(body, 1, 12) WHERE seq = 6")
    os.remove(dir .. "/trace.jsonl")
    local r = h.run({ "resume", run, dir .. "/flow.luma", "--journal", dir .. "/j.db", "--trace", dir .. "/trace.jsonl" },
                    { cwd = dir, env = { LUMA_DURABLE_KEY = KEY } })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ total = 60 }, luma.json.decode(r.stdout))
    local events = {}
    for line in io.lines(dir .. "/trace.jsonl") do events[#events + 1] = luma.json.decode(line) end
    -- the call ran again (at least once); its idempotency key made it one charge
    assert.are.same({ "o1", "o2", "o3" }, effects(dir))
    local kinds = sql(dir .. "/j.db", "SELECT group_concat(kind, ' ') FROM (SELECT kind FROM luma_journal ORDER BY seq)")
    assert.are.equal("ask exchange tool tool exchange tool exchange finish\n", kinds)
    -- the run's row: ended, by the resumer, which set its steps as it went
    assert.matches("^completed|finished|[^|]+:%d+:%x+\n$", sql(dir .. "/j.db", "SELECT state, step, owner FROM luma_runs"))
    -- the resume's event, with the records read whole and the torn one
    local resume
    for _, e in ipairs(events) do if e.kind == "resume" then resume = e end end
    assert.is_truthy(resume)
    assert.are.same({ run, 5, 1, true }, { resume.run, resume.records, resume.torn, resume.takeover })
    -- every event of the run carries its id
    for _, e in ipairs(events) do
      if e.kind == "ask" or e.tool then assert.are.equal(run, e.run, e.kind or e.tool) end
    end
    -- turn 3 only was asked of the provider after the resume
    assert.are.same({ [1] = 1, [2] = 1, [3] = 1 }, (function()
      local asked = {}
      for _, r in ipairs(server:requests()) do
        if r.body:find("batch 101\"", 1, true) then asked[r.turn] = (asked[r.turn] or 0) + 1 end
      end
      return asked
    end)())
  end)

  it("refuses a record of a later format, naming both versions", function()
    local run = killed_at(3, 102)
    sql(dir .. "/j.db", "UPDATE luma_journal SET v = 9 WHERE seq = 2")
    local r = h.run({ "resume", run, dir .. "/flow.luma", "--journal", dir .. "/j.db" },
                    { cwd = dir, env = { LUMA_DURABLE_KEY = KEY } })
    assert.are.equal(1, r.status)
    assert.are.equal("Error: [JOURNAL_ERROR] Cannot resume run '" .. run .. "': record 2 of run '" .. run ..
      "' is of format 9; this luma reads format 1 and older.\n", r.stderr)
  end)

  it("names the live owner and the lease it has left, and gives a finished run's answer again", function()
    local run = killed_at(4, 103)
    -- a process that holds the run: its claim, with a long lease
    local p1 = luma.load(dir .. "/flow.luma", { journal = dir .. "/j.db", lookup = lookup, journal_lease_ms = 60000 })
    local a = p1:start_resume(run)
    a:poll()
    local r = h.run({ "resume", run, dir .. "/flow.luma", "--journal", dir .. "/j.db" },
                    { cwd = dir, env = { LUMA_DURABLE_KEY = KEY } })
    assert.are.equal(1, r.status)
    assert.matches("Error: %[JOURNAL_ERROR%] Agent 'A' cannot resume: run '" .. run:gsub("%-", "%%-") ..
      "' is held by [^:]+:%d+:%x+, whose lease ends in %d+ ms %(a live process; resume it once its lease has ended%)",
      r.stderr)
    a:wait()
    assert.are.same({ total = 60 }, a:result())
    p1:close()
    -- finished: its answer again, from the journal, with no request
    local before = #server:requests()
    r = h.run({ "resume", run, dir .. "/flow.luma", "--journal", dir .. "/j.db" },
              { cwd = dir, env = { LUMA_DURABLE_KEY = KEY } })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ total = 60 }, luma.json.decode(r.stdout))
    assert.are.equal(before, #server:requests())
  end)

  it("takes an abandoned run over; the process that lost it stops with JOURNAL_ERROR and writes nothing more",
    function()
    local run = killed_at(4, 105)   -- the ask, turn 1 and its two calls
    -- turn 2 answers slowly: the first resumer waits on it when it is stopped
    local slow = { json = TURNS[2].json, delay_ms = 1500 }
    server:turns { TURNS[1], slow, TURNS[3] }
    local function asked_turn2()
      local n = 0
      for _, r in ipairs(server:requests()) do
        if r.turn == 2 and r.body:find("batch 105\"", 1, true) then n = n + 1 end
      end
      return n
    end
    local function start(name, lease)
      assert(os.execute(("cd %s && LUMA_DURABLE_KEY=%s %s resume %s flow.luma --journal j.db --journal-lease-ms %d " ..
        "--trace %s.jsonl > %s.out 2> %s.err & echo $! > %s"):format(h.quote(dir), KEY, h.quote(h.root .. "/bin/luma-lua"),
        run, lease, name, name, name, h.quote(dir .. "/" .. name .. ".pid"))))
      return h.read(dir .. "/" .. name .. ".pid"):match("%d+")
    end
    local function wait_for(what, f)
      for _ = 1, 1000 do
        if f() then return end
        os.execute("sleep 0.01")
      end
      error("timed out waiting for " .. what)
    end
    local function exited(pid) return not os.execute("kill -0 " .. pid .. " 2>/dev/null") end
    local first = start("first", 60)
    wait_for("the first resumer's request", function() return asked_turn2() == 1 end)
    -- stopped while it waits: its heartbeat stops, its lease ends
    assert(os.execute("kill -STOP " .. first))
    os.execute("sleep 0.2")
    local second = start("second", 60000)
    wait_for("the second resumer's request", function() return asked_turn2() == 2 end)
    assert(os.execute("kill -CONT " .. first))
    wait_for("both to end", function() return exited(first) and exited(second) end)
    server:turns(TURNS)
    assert.matches("^Error: %[JOURNAL_ERROR%] Agent 'A' is durable, and.*another process took run '" ..
      run:gsub("%-", "%%-") .. "' over", h.read(dir .. "/first.err"))
    assert.are.equal("", h.read(dir .. "/second.err"))
    assert.are.same({ total = 60 }, luma.json.decode(h.read(dir .. "/second.out")))
    assert.are.same({ "o1", "o2", "o3" }, effects(dir))
    local kinds = sql(dir .. "/j.db", "SELECT group_concat(kind, ' ') FROM (SELECT kind FROM luma_journal ORDER BY seq)")
    assert.are.equal("ask exchange tool tool exchange tool exchange finish\n", kinds)
    -- one resume event each: the second took the run over from the first
    local events = {}
    for line in io.lines(dir .. "/second.jsonl") do
      local e = luma.json.decode(line)
      if e.kind == "resume" then events[#events + 1] = e end
    end
    assert.are.equal(1, #events)
    assert.is_true(events[1].takeover)
    assert.matches(":" .. first .. ":", events[1].previous_owner)
    for _, f in ipairs { "first.out", "first.err", "first.pid", "first.jsonl", "second.out", "second.err", "second.pid",
                         "second.jsonl" } do
      os.remove(dir .. "/" .. f)
    end
  end)

  it("lets exactly one of two processes racing for an abandoned run on Redis take it over", function()
    local store = redis.start()
    local ok, err = pcall(function()
      for _, f in ipairs { "effects.txt", "idem.db", "idem.db-wal", "idem.db-shm" } do os.remove(dir .. "/" .. f) end
      local r = h.run({ dir .. "/flow.luma", "--agent", "A", "--input", '{"x": 106}', "--journal", store.url,
                        "--journal-lease-ms", "30" },
                      { cwd = dir, env = { LUMA_DURABLE_KEY = KEY, LUMA_JOURNAL_CRASH = "after:4" } })
      assert.are.equal(137, r.status, r.stderr)
      local _, keys = h.sh(("env -u LD_PRELOAD redis-cli -p %d --scan --pattern 'luma:journal:run:*:records'"):format(
        store.port))
      local run = keys:match("luma:journal:run:(run%-%x+):records")
      os.execute("sleep 0.1")   -- the killed owner's lease ends
      -- turn 2 answers slowly: the winner holds the run while the other tries
      server:turns { TURNS[1], { json = TURNS[2].json, delay_ms = 1000 }, TURNS[3] }
      local cmd = ("cd %s && LUMA_DURABLE_KEY=%s %s resume %s flow.luma --journal %s --trace %%s.jsonl > %%s.out " ..
        "2> %%s.err; echo $? > %%s.status"):format(h.quote(dir), KEY, h.quote(h.root .. "/bin/luma-lua"), run, store.url)
      for _, name in ipairs { "one", "two" } do
        assert(os.execute("(" .. cmd:format(name, name, name, name) .. ") > /dev/null 2>&1 &"))
      end
      for _ = 1, 3000 do
        if io.open(dir .. "/one.status") and io.open(dir .. "/two.status") then break end
        os.execute("sleep 0.01")
      end
      server:turns(TURNS)
      local claimed, answered = 0, 0
      for _, name in ipairs { "one", "two" } do
        local status = tonumber(h.read(dir .. "/" .. name .. ".status"))
        local resumes = 0
        for line in io.lines(dir .. "/" .. name .. ".jsonl") do
          if luma.json.decode(line).kind == "resume" then resumes = resumes + 1 end
        end
        claimed = claimed + resumes
        if status == 0 then
          answered = answered + 1
          assert.are.same({ total = 60 }, luma.json.decode(h.read(dir .. "/" .. name .. ".out")))
        else
          -- the loser: told who holds the run
          assert.are.equal(0, resumes)
          assert.matches("is held by [^:]+:%d+:%x+, whose lease ends in %d+ ms", h.read(dir .. "/" .. name .. ".err"))
        end
        for _, ext in ipairs { ".out", ".err", ".status", ".jsonl" } do os.remove(dir .. "/" .. name .. ext) end
      end
      assert.are.equal(1, claimed)
      assert.are.equal(1, answered)   -- the other was refused while the winner held the run
      assert.are.same({ "o1", "o2", "o3" }, effects(dir))
      local _, n = h.sh(("env -u LD_PRELOAD redis-cli -p %d LLEN 'luma:journal:run:%s:records'"):format(store.port, run))
      assert.are.equal(#KINDS, tonumber(n))
    end)
    store:remove()
    assert(ok, err)
  end)

  it("waits for a person's decision across processes: a denial goes to the model, an approval runs its edited input",
    function()
    -- the agent asks before each write; no one can be asked here
    local d = project(server.url)
    h.write(d .. "/flow.luma", h.read(d .. "/flow.luma"):gsub("  durable: true\n", "  durable: true\n  tool_policy: \"approval\"\n"))
    write_tools(d)
    local function resume_cli(run)
      return h.run({ "resume", run, d .. "/flow.luma", "--journal", d .. "/j.db" },
                   { cwd = d, env = { LUMA_DURABLE_KEY = KEY }, unset = { "LUMA_APPROVED_TOOLS" } })
    end
    local r = h.run({ d .. "/flow.luma", "--agent", "A", "--input", '{"x": 107}', "--journal", d .. "/j.db" },
                    { cwd = d, env = { LUMA_DURABLE_KEY = KEY }, unset = { "LUMA_APPROVED_TOOLS" } })
    assert.are.equal(1, r.status)
    local run = r.stderr:match("run '(run%-%x+)'")
    assert.is_truthy(run, r.stderr)
    assert.matches("%[TOOL_AWAITING_APPROVAL%] Agent 'A': run '" .. run:gsub("%-", "%%-") .. "' awaits a person's " ..
      "decision on call 'c1' of tool 'charge'", r.stderr)
    assert.are.same({}, effects(d))
    assert.matches("^awaiting_approval|turn 1: awaiting approval of c%d\n$",
      sql(d .. "/j.db", "SELECT state, step FROM luma_runs"))
    local approvals = sql(d .. "/j.db", "SELECT body FROM luma_journal WHERE kind = 'approval' ORDER BY seq")
    local first = luma.json.decode(approvals:match("[^\n]+"))
    assert.are.same({ turn = 1, id = "c1", name = "charge", input = { order = "o1", amount = 10 } },
      { turn = first.turn, id = first.id, name = first.name, input = first.input })
    -- another process decides: c1 approved with a person's edit, c2 denied
    local p = luma.load(d .. "/flow.luma", { journal = d .. "/j.db", lookup = lookup })
    p:approve(run, "c1", { input = { order = "o1", amount = 11 } })
    p:close()
    -- and another, from the command line
    r = h.run({ "deny", run, "c2", d .. "/flow.luma", "--journal", d .. "/j.db", "--reason", "over the budget" }, { cwd = d })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal("denied\n", r.stdout)
    -- resumed: turn 2's call waits in its turn
    r = resume_cli(run)
    assert.are.equal(1, r.status)
    assert.matches("awaits a person's decision on call 'c3'", r.stderr)
    assert.are.same({ "o1" }, effects(d))
    -- an edit that does not fit the tool is validated again: the model is told
    r = h.run({ "approve", run, "c3", d .. "/flow.luma", "--journal", d .. "/j.db", "--input",
                '{"order": "o3", "amount": "thirty"}' }, { cwd = d })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal("approved\n", r.stdout)
    r = resume_cli(run)
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ total = 60 }, luma.json.decode(r.stdout))
    assert.are.same({ "o1" }, effects(d))
    -- what the model was given for each call
    local last
    for _, q in ipairs(server:requests()) do
      if q.body:find("batch 107\"", 1, true) and q.turn == 3 then last = q.json end
    end
    local results = {}
    for _, m in ipairs(last.messages) do
      if m.role == "tool" then results[m.tool_call_id] = m.content end
    end
    assert.are.same({ order = "o1", charged = 11 }, luma.json.decode(results.c1))
    assert.matches("A person denied the call: over the budget", results.c2)
    assert.matches("TOOL_INPUT_INVALID", results.c3)
    -- a decision on a run that awaits none is refused, saying its state
    r = h.run({ "approve", run, "c3", d .. "/flow.luma", "--journal", d .. "/j.db" }, { cwd = d })
    assert.are.equal(1, r.status)
    assert.matches("^Error: %[JOURNAL_ERROR%] Cannot record a decision on call 'c3' of run '" .. run:gsub("%-", "%%-") ..
      "': .*completed", r.stderr)
    os.execute("rm -rf " .. h.quote(d))
  end)

  it("says which run and why when it cannot be resumed", function()
    local r = h.run({ "resume", "run-0000000000000000", dir .. "/flow.luma", "--journal", dir .. "/j.db" },
                    { cwd = dir })
    assert.are.equal(1, r.status)
    assert.are.equal("Error: [JOURNAL_ERROR] Cannot resume run 'run-0000000000000000': the journal has no run " ..
      "'run-0000000000000000'.\n", r.stderr)
    local run = killed_at(2, 104)
    -- the program no longer has the agent
    local other = h.project { ["flow.luma"] = "schema Answer { total: int }\n" }
    r = h.run({ "resume", run, other .. "/flow.luma", "--journal", dir .. "/j.db" }, { cwd = dir })
    os.execute("rm -rf " .. h.quote(other))
    assert.are.equal(1, r.status)
    assert.are.equal("Error: [JOURNAL_ERROR] Cannot resume run '" .. run .. "': its agent 'A' is not in the program.\n",
      r.stderr)
    -- no --journal, and the program's config names none
    r = h.run({ "resume", run, dir .. "/flow.luma" }, { cwd = dir })
    assert.are.equal(1, r.status)
    assert.are.equal("Error: [JOURNAL_ERROR] Cannot resume run '" .. run .. "': the program has no journal " ..
      "(luma.load's journal option).\n", r.stderr)
  end)
end)

describe("a durable ask's journal and secrets", function()
  -- the tool's credential: quoted, so that it is escaped in JSON text
  local TOKEN = 'tok-"peek"-secret-0042'
  local server, dir

  setup(function()
    server = mock.start()
    -- the model repeats the API key in its arguments, the handler returns its credential
    server:turns {
      chat(nil, { { "p1", "peek", luma.json.encode { note = "my key is " .. KEY .. ", the token " .. TOKEN } } }),
      chat('{"total":7}'),
    }
    dir = h.project {
      ["flow.luma"] = ([[
schema Seen { seen: string }
schema Answer { total: int }
tool peek(note: string) -> Seen {
  credential: "LUMA_PEEK_TOKEN"
}
model M {
  provider: "openai"
  name: "gpt-test"
  base_url: "%s/v1"
  api_key_env: "LUMA_DURABLE_KEY"
}
agent A {
  model: M
  tools: [peek]
  durable: true
  fn run(x: int) -> Answer { ask "Peek for batch {x}" -> Answer }
}
]]):format(server.url),
      ["tools.lua"] = ("return { peek = function(i) return { seen = %q .. ' for ' .. i.note } end }"):format(TOKEN),
      ["luma.config.json"] = '{ "tool_modules": ["./tools.lua"] }',
    }
  end)
  teardown(function()
    if server then server:stop() end
    if dir then os.execute("rm -rf " .. h.quote(dir)) end
  end)

  local env = { LUMA_DURABLE_KEY = KEY, LUMA_PEEK_TOKEN = TOKEN }

  -- every record's body, as sqlite3 prints them
  local function bodies()
    return sql(dir .. "/j.db", "SELECT group_concat(body, char(10)) FROM (SELECT body FROM luma_journal ORDER BY seq)")
  end

  -- the token as it is, and escaped as deep as a record's text holds it: in
  -- a call's arguments, in a response body, in the record
  local function holds_no_secret(text)
    local forms = { KEY, TOKEN }
    for i = 1, 3 do forms[#forms + 1] = luma.json.encode(forms[#forms]):sub(2, -2) end
    for _, s in ipairs(forms) do
      assert.is_falsy(text:find(s, 1, true), s)
    end
    assert.is_truthy(text:find("[REDACTED]", 1, true))
  end

  it("holds neither the API key nor a tool's credential, and the run resumes to the same answer", function()
    -- killed after the ask, the exchange that echoes the key and the call's outcome that holds the token
    local r = h.run({ dir .. "/flow.luma", "--agent", "A", "--input", '{"x": 201}', "--journal", dir .. "/j.db",
                      "--journal-lease-ms", "30" },
                    { cwd = dir, env = { LUMA_DURABLE_KEY = KEY, LUMA_PEEK_TOKEN = TOKEN, LUMA_JOURNAL_CRASH = "after:3" } })
    assert.are.equal(137, r.status, r.stderr)
    local kinds = sql(dir .. "/j.db", "SELECT group_concat(kind, ' ') FROM (SELECT kind FROM luma_journal ORDER BY seq)")
    assert.are.equal("ask exchange tool\n", kinds)
    holds_no_secret(bodies())
    os.execute("sleep 0.1")   -- the killed owner's lease ends
    local run = run_of(dir .. "/j.db")
    r = h.run({ "resume", run, dir .. "/flow.luma", "--journal", dir .. "/j.db" }, { cwd = dir, env = env })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ total = 7 }, luma.json.decode(r.stdout))
    holds_no_secret(bodies())
    -- the resumed turn gives the model the marker where the journal has it
    local last
    for _, q in ipairs(server:requests()) do
      if q.turn == 2 and q.body:find("batch 201\"", 1, true) then last = q.body end
    end
    assert.is_truthy(last and last:find("[REDACTED]", 1, true))
    -- an uncrashed run: the same answer, a journal as clean
    for _, f in ipairs { "j.db", "j.db-wal", "j.db-shm" } do os.remove(dir .. "/" .. f) end
    r = h.run({ dir .. "/flow.luma", "--agent", "A", "--input", '{"x": 202}', "--journal", dir .. "/j.db" },
              { cwd = dir, env = env })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ total = 7 }, luma.json.decode(r.stdout))
    assert.are.equal("ask exchange tool exchange finish\n",
      sql(dir .. "/j.db", "SELECT group_concat(kind, ' ') FROM (SELECT kind FROM luma_journal ORDER BY seq)"))
    holds_no_secret(bodies())
  end)
end)
