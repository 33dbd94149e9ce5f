-- ask from the command line: an agent method that asks its model, traces
-- with the ask's event, and recordings made and replayed.
local luma = require "luma"
local h = require "spec.helpers"
local mock = require "spec.support.mock_provider"

local KEY = "sk-cli-test-0123456789"
local DEMO_INPUT = '{"text": "INV-2041 paid in full on the first of May"}'

local chat = mock.chat

describe("luma-lua with an agent that asks", function()
  local server, dir

  setup(function() server = mock.start() end)
  teardown(function()
    if server then server:stop() end
    if dir then os.execute("rm -rf " .. h.quote(dir)) end
  end)

  local function project()
    dir = dir or h.project {
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
  fn run(x: int) -> Answer { ask "Add {x} and 2" -> Answer }
}
]]):format(server.url),
      ["tools.lua"] = "return { add = function(i) return { sum = i.a + i.b } end }",
      ["luma.config.json"] = '{ "tool_modules": ["./tools.lua"] }',
    }
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
