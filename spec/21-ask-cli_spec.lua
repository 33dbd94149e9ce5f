-- ask from the command line: an agent method that asks its model, traces
-- with the ask's event, and recordings made and replayed.
local luma = require "luma"
local h = require "spec.helpers"
local mock = require "spec.support.mock_provider"

local KEY = "sk-cli-test-0123456789"
local DEMO_INPUT = '{"text": "INV-2041 paid in full on the first of May"}'

local chat = mock.chat

-- A project of one agent asking the mock at url, with extra lines in the agent.
local function flow_project(url, agent_extra)
  return h.project {
    ["flow.luma"] = ([[
schema Sum { sum: int }
schema Answer { total: int }
tool add(a: int, b: int) -> Sum { }
model M {
  provider: "openai"
  name: "gpt-test"
  base_url: "%s/v1"
  api_key_env: "LUMA_CLI_KEY"
}
agent A {
  model: M
  tools: [add]
%s  fn run(x: int) -> Answer { ask "Add {x} and 2" -> Answer }
}
]]):format(url, agent_extra or ""),
    ["tools.lua"] = "return { add = function(i) return { sum = i.a + i.b } end }",
    ["luma.config.json"] = '{ "tool_modules": ["./tools.lua"] }',
  }
end

describe("luma-lua with an agent that asks", function()
  local server, dir

  setup(function() server = mock.start() end)
  teardown(function()
    if server then server:stop() end
    if dir then os.execute("rm -rf " .. h.quote(dir)) end
  end)

  local function project()
    dir = dir or flow_project(server.url)
    return dir
  end

  it("runs the method, the model's tool calls through the pipeline, and prints the answer", function()
    server:reset()
    server:script { chat(nil, { { "c1", "add", '{"a":1,"b":2}' } }), chat('{"total":3}') }
    local d = project()
    local r = h.run({ d .. "/flow.luma", "--agent", "A", "--input", '{"x": 1}', "--trace", d .. "/trace.jsonl",
                      "--record", d .. "/rec.jsonl" }, { env = { LUMA_CLI_KEY = KEY } })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ total = 3 }, luma.json.decode(r.stdout))
    -- the trace: the tool's event with the ask's id, then the ask's own
    local events = {}
    for line in h.read(d .. "/trace.jsonl"):gmatch("[^\n]+") do events[#events + 1] = luma.json.decode(line) end
    assert.are.equal(2, #events)
    assert.are.equal("add", events[1].tool)
    assert.are.equal("ask", events[2].kind)
    assert.are.equal(events[2].ask, events[1].ask)
    -- the recording: both exchanges, and the key nowhere
    local rec = h.read(d .. "/rec.jsonl")
    assert.are.equal(2, select(2, rec:gsub("\n", "")))
    assert.is_nil(rec:find(KEY, 1, true))
    assert.truthy(rec:find("[REDACTED]", 1, true))
  end)

  it("tells the host through its events when the recording cannot be written, and goes on", function()
    server:reset()
    server:script { chat(nil, { { "c1", "add", '{"a":1,"b":2}' } }), chat('{"total":3}') }
    local d = project()
    os.remove(d .. "/trace.jsonl")
    local r = h.run({ d .. "/flow.luma", "--agent", "A", "--input", '{"x": 1}', "--trace", d .. "/trace.jsonl",
                      "--record", "/dev/full" }, { env = { LUMA_CLI_KEY = KEY } })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ total = 3 }, luma.json.decode(r.stdout))
    -- the command, as the host, prints the runtime's warnings
    assert.are.equal("warning: cannot write the recording\nwarning: cannot write the recording\n", r.stderr)
    local warnings = 0
    for line in h.read(d .. "/trace.jsonl"):gmatch("[^\n]+") do
      local e = luma.json.decode(line)
      if e.kind == "warning" then
        assert.are.same({ kind = "warning", message = "cannot write the recording" }, e)
        warnings = warnings + 1
      end
    end
    assert.are.equal(2, warnings)
  end)

  it("replays the recording without the network or a key", function()
    local d = project()
    server:reset()
    local r = h.run({ d .. "/flow.luma", "--agent", "A", "--input", '{"x": 1}', "--replay", d .. "/rec.jsonl" },
                    { unset = { "LUMA_CLI_KEY" } })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ total = 3 }, luma.json.decode(r.stdout))
    assert.are.equal(0, #server:requests())
  end)

  it("says which field of a replayed request differs", function()
    local d = project()
    local r = h.run({ d .. "/flow.luma", "--agent", "A", "--input", '{"x": 5}', "--replay", d .. "/rec.jsonl" })
    assert.are.equal(1, r.status)
    assert.matches("%[ASK_REPLAY_MISMATCH%] Agent 'A': request 1 differs from .*rec%.jsonl:1 at body%.messages%[0%]%.content: " ..
                   'recorded "Add 1 and 2", sent "Add 5 and 2"', r.stderr)
  end)

  it("names the missing key variable before any request", function()
    local d = project()
    server:reset()
    local r = h.run({ d .. "/flow.luma", "--agent", "A", "--input", '{"x": 1}' }, { unset = { "LUMA_CLI_KEY" } })
    assert.are.equal(1, r.status)
    assert.matches("Error: %[ASK_KEY_MISSING%] Model 'M' needs the environment variable LUMA_CLI_KEY, which is not set%.", r.stderr)
    assert.are.equal(0, #server:requests())
  end)

  it("runs the shipped demo offline, from its recording", function()
    local r = h.run({ "examples/calculate.luma", "--agent", "Flow", "--input", DEMO_INPUT,
                      "--replay", "examples/flow.recording.jsonl" }, { unset = { "OPENAI_API_KEY" } })
    assert.are.equal(0, r.status, r.stderr)
    assert.matches("INV%-2041", luma.json.decode(r.stdout).summary)
  end)
end)

describe("luma-lua streaming an agent's ask", function()
  local server, dir

  setup(function()
    server = mock.start()
    dir = h.project {
      ["flow.luma"] = ([[
schema Sum { sum: int }
schema Answer { total: int }
tool add(a: int, b: int) -> Sum { }
model M {
  provider: "openai"
  name: "gpt-test"
  base_url: "%s/v1"
  api_key_env: "LUMA_CLI_KEY"
  retries: 1
}
agent A {
  model: M
  tools: [add]
  fn run(x: int) -> Answer { ask "Add {x} and 2" -> Answer }
}
]]):format(server.url),
      ["tools.lua"] = "return { add = function(i) return { sum = i.a + i.b } end }",
      ["luma.config.json"] = '{ "tool_modules": ["./tools.lua"] }',
    }
  end)
  teardown(function()
    if server then server:stop() end
    if dir then os.execute("rm -rf " .. h.quote(dir)) end
  end)
  before_each(function() server:reset() end)

  local ARGS = { "flow.luma", "--agent", "A", "--input", '{"x": 1}' }
  local function run(extra, env)
    local args = {}
    for _, a in ipairs(ARGS) do args[#args + 1] = a end
    for _, a in ipairs(extra or {}) do args[#args + 1] = a end
    return h.run(args, { cwd = dir, env = env or { LUMA_CLI_KEY = KEY } })
  end
  local function script()
    server:script { chat("Let me add.", { { "c1", "add", '{"a":1,"b":2}' } }), chat('{"total":3}') }
  end

  it("without a terminal or a flag, asks without a stream and prints only the answer, as before streaming", function()
    script()
    local r = run()
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal('{\n  "total": 3\n}\n', r.stdout)
    assert.are.equal("", r.stderr)
    assert.is_nil(server:requests()[1].json.stream)
  end)

  it("with --stream, prints the text to stdout as it streams, each turn on its line, then the answer", function()
    script()
    local r = run { "--stream" }
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal('Let me add.\n{"total":3}\n{\n  "total": 3\n}\n', r.stdout)
    assert.are.equal("", r.stderr)
    assert.is_true(server:requests()[1].json.stream)
  end)

  it("with --stream-events, prints every event as a JSON line, then the answer as the last line", function()
    script()
    local r = run { "--stream-events" }
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal("", r.stderr)
    local lines = {}
    for line in r.stdout:gmatch("[^\n]+") do lines[#lines + 1] = luma.json.decode(line) end
    assert.are.same({ total = 3 }, lines[#lines])
    local types, text, result = {}, "", nil
    for i = 1, #lines - 1 do
      local ev = lines[i]
      if types[#types] ~= ev.type then types[#types + 1] = ev.type end
      if ev.type == "text_delta" and ev.turn == 2 then text = text .. ev.text end
      if ev.type == "tool_result" then result = ev end
    end
    assert.are.same({ "text_delta", "tool_call_start", "tool_call_delta", "tool_call", "usage", "turn_end",
      "tool_result", "text_delta", "usage", "turn_end", "finish" }, types)
    assert.are.equal('{"total":3}', text)
    assert.are.same({ type = "tool_result", turn = 1, id = "c1", name = "add", ok = true, output = { sum = 3 } },
      result)
    assert.are.same({ type = "finish", ok = true, answer = { total = 3 } }, lines[#lines - 1])
  end)

  it("with --stream-events, prints the events of an ask that fails, its finish last, and the error on stderr", function()
    server:script { { json = chat('{"total":3}').json,
      stream = { error = { type = "invalid_request_error", message = "bad thing mid-stream", code = 400 } } } }
    local r = run { "--stream-events" }
    assert.are.equal(1, r.status)
    assert.matches("^Error: %[ASK_PROVIDER_ERROR%] .*bad thing mid%-stream", r.stderr)
    local last
    for line in r.stdout:gmatch("[^\n]+") do last = luma.json.decode(line) end
    assert.are.same({ false, "ASK_PROVIDER_ERROR" }, { last.ok, last.error.code })
  end)

  it("says when a stream is retried that the text shown is void", function()
    server:script { { json = chat('{"total":9}').json, stream = { cut = true } }, chat('{"total":3}') }
    local r = run { "--stream" }
    assert.are.equal(0, r.status, r.stderr)
    assert.matches("^luma%-lua: retrying %(.*final event.*%); the text above is void\n$", r.stderr)
    assert.matches('\n{"total":3}\n{\n  "total": 3\n}\n$', r.stdout)
  end)

  it("refuses --stream with --stream-events", function()
    local r = run { "--stream", "--stream-events" }
    assert.are.equal(2, r.status)
    assert.matches("%-%-stream and %-%-stream%-events do not go together", r.stderr)
  end)

  it("at a terminal, prints the text to stderr as it streams and the answer alone on stdout", function()
    server:script { chat("Let me add.", { { "c1", "add", '{"a":1,"b":2}' } }),
      { json = chat('{"total":3}').json, stream = { delay_ms = 50 } } }
    local cmd = h.quote(h.root .. "/bin/luma-lua") .. " flow.luma --agent A --input '{\"x\": 1}' > out.json"
    local r = h.pty({ "sh", "-c", cmd }, dir, { LUMA_CLI_KEY = KEY }, {
      { expect = 'Let me add\\.\r?\n\\{"total":3\\}\r?\n', timeout = 10 },
    })
    assert(r.ok, "step " .. tostring(r.step) .. ":\n" .. r.output)
    assert.are.equal(0, r.status, r.output)
    assert.are.equal('{\n  "total": 3\n}\n', h.read(dir .. "/out.json"))
    os.remove(dir .. "/out.json")
    assert.is_true(server:requests()[1].json.stream)
  end)
end)

describe("a durable agent's ask", function()
  local server, dir

  setup(function() server = mock.start() end)
  teardown(function()
    if server then server:stop() end
    if dir then os.execute("rm -rf " .. h.quote(dir)) end
  end)

  local function project()
    dir = dir or flow_project(server.url, "  durable: true\n")
    return dir
  end

  local function lookup(name) return name == "LUMA_CLI_KEY" and KEY or nil end

  -- the journal's rows, in order: { seq, v, kind, body, digest }
  local function rows(path)
    local status, out = h.sh("sqlite3 -separator '\31' -newline '\30' " .. h.quote(path) ..
      " 'SELECT run, seq, v, kind, body, digest FROM luma_journal ORDER BY run, seq'")
    assert.are.equal(0, status)
    local list = {}
    for row in out:gmatch("([^\30]+)\30") do
      local f = {}
      for field in (row .. "\31"):gmatch("([^\31]*)\31") do f[#f + 1] = field end
      list[#list + 1] = { run = f[1], seq = tonumber(f[2]), v = tonumber(f[3]), kind = f[4], body = f[5], digest = f[6] }
    end
    return list
  end

  it("writes its journal: the inputs, each answered exchange and each tool call, before the step after it", function()
    server:reset()
    server:script { chat(nil, { { "c1", "add", '{"a":1,"b":2}' } }), chat('{"total":3}') }
    local d = project()
    local journal = d .. "/journal.db"
    local p = luma.load(d .. "/flow.luma", { journal = journal, lookup = lookup })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    p:close()
    local list = rows(journal)
    local kinds = {}
    for i, r in ipairs(list) do
      kinds[i] = r.kind
      assert.are.equal(i, r.seq)
      assert.are.equal(1, r.v)
      assert.are.equal(list[1].run, r.run)
    end
    assert.are.same({ "ask", "exchange", "tool", "exchange", "finish" }, kinds)
    assert.matches("^run%-%x+$", list[1].run)
    local ask = luma.json.decode(list[1].body)
    assert.are.same({ prompt = "Add 1 and 2", agent = "A", model = "M", schema = "Answer", forced = luma.null }, ask)
    local first = luma.json.decode(list[2].body)
    assert.are.same({ 1, 200 }, { first.turn, first.status })
    assert.matches('"add"', first.body)
    assert.are.same({ turn = 1, error = false, id = "c1", name = "add", content = { sum = 3 } },
      luma.json.decode(list[3].body))
    assert.matches('total', luma.json.decode(list[4].body).body)
    assert.are.same({ ok = true, answer = { total = 3 } }, luma.json.decode(list[5].body))
    -- the key is in no record
    assert.is_nil(h.read(journal):find(KEY, 1, true))
    -- each digest is the SHA-256 of "luma-journal/1" NUL run NUL seq NUL kind NUL body
    for _, r in ipairs(list) do
      local pre = d .. "/preimage"
      h.write(pre, "luma-journal/1\0" .. r.run .. "\0" .. r.seq .. "\0" .. r.kind .. "\0" .. r.body)
      local _, sum = h.sh("sha256sum " .. h.quote(pre))
      assert.are.equal(r.digest, sum:match("^%x+"), r.kind)
    end
  end)

  it("fails with JOURNAL_ERROR, before any request, when the program has no journal", function()
    server:reset()
    server:script { chat('{"total":3}') }
    local p = luma.load(project() .. "/flow.luma", { lookup = lookup })
    local err = h.raised(p:agent("A").call, p:agent("A"), "run", { x = 1 })
    assert.are.equal("JOURNAL_ERROR", err.code)
    assert.are.equal("Agent 'A' is durable, and its ask's journal cannot be written: the program has no journal " ..
      "(luma.load's journal option)", err.message)
    assert.are.equal(0, #server:requests())
    p:close()
  end)

  it("refuses a journal file that is another program's database", function()
    local d = project()
    local other = d .. "/other.db"
    assert.are.equal(0, (h.sh("sqlite3 " .. h.quote(other) .. " 'CREATE TABLE t (x)'")))
    local err = h.raised(luma.load, d .. "/flow.luma", { journal = other, lookup = lookup })
    assert.are.equal("JOURNAL_ERROR", err.code)
    assert.matches("is a SQLite database of something else", err.message)
  end)
end)
