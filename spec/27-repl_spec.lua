-- The luma-lua REPL, both ways a user meets it: under a pseudo-terminal
-- (typing keys, reading the screen: spec/support/pty_run.py) and through a
-- pipe (line by line, no prompts, the exit status says whether all went well).
local luma = require "luma"
local h = require "spec.helpers"
local mock = require "spec.support.mock_provider"

local PROGRAM = [[
schema Sum { total: int }
schema Out { v: string }
schema Pick { number: int }
tool add(a: int, b: int) -> Sum { description: "Adds two integers" }
tool spin() -> Out { description: "Waits until cancelled"
  timeout: 60000 }
model M { provider: "openai"
  name: "gpt-test"
  base_url: "%s/v1/"
  api_key_env: "LUMA_TEST_KEY" }
agent Helper {
  model: M
  tools: [add]
  fn double(x: int) -> int {
    s = tool add({ a: x, b: x })
    return s.total
  }
}
]]

local TOOLS = [[
return {
  add = function(i) return { total = i.a + i.b } end,
  spin = function(i, signal) signal:sleep(60000) return { v = tostring(signal.reason) } end,
}
]]

local function project(url)
  return h.project {
    ["program.luma"] = PROGRAM:format(url or "http://127.0.0.1:9"),
    ["tools.lua"] = TOOLS,
    ["luma.config.json"] = '{ "tool_modules": ["tools.lua"] }',
  }
end

local command = h.root .. "/bin/luma-lua"

-- The REPL through a pipe: -> status, stdout, stderr
local function piped(dir, input, args, env)
  local vars = ""
  for k, v in pairs(env or {}) do vars = vars .. k .. "=" .. h.quote(v) .. " " end
  local file = h.write(h.tmpname(".in"), input)
  local status, out, err = h.sh("cd " .. h.quote(dir) .. " && env " .. vars .. h.quote(command) .. " " ..
    (args or "repl program.luma") .. " < " .. h.quote(file))
  os.remove(file)
  return status, out, err
end

-- The REPL under a pseudo-terminal, driven by steps (see pty_run.py; the
-- patterns of `expect` are Python regular expressions).
local function typed(dir, steps, env, args)
  local e = { TERM = "xterm", LUMA_HISTORY = dir .. "/history", HOME = dir }
  for k, v in pairs(env or {}) do e[k] = v end
  local cmd = { command }
  for _, a in ipairs(args or { "repl", "program.luma" }) do cmd[#cmd + 1] = a end
  return h.pty(cmd, dir, e, steps)
end

local function expect(re, timeout) return { expect = re, timeout = timeout or 10 } end
local function send(s) return { send = s } end
local function pause(s) return { sleep = s } end

describe("the REPL at a terminal", function()
  local dir
  before_each(function() dir = project() end)
  after_each(function() os.execute("rm -rf " .. h.quote(dir)) end)

  it("completes commands and tool names, calls through the pipeline and shows the event", function()
    local r = typed(dir, {
      expect("luma> "),
      send(":ca\t"), pause(0.2), send("ad\t"), pause(0.2),
      send('{"a": 20, "b": 22}\r'), expect('"total".*?42'), expect('event: \\{.*?"tool":"add"'),
      expect("luma> $"), send(":quit\r"),
    })
    assert(r.ok, "step " .. tostring(r.step) .. ":\n" .. r.output)
    assert.are.equal(0, r.status)
  end)

  it("completes a table's name without a space after it, so that its fields can follow", function()
    local r = typed(dir, {
      expect("luma> "),
      send("tabl\t"), pause(0.3), send(".conc\t"), pause(0.3), send("({1, 2}, '+')\r"), expect("1\\+2"),
      expect("luma> $"), send(":quit\r"),
    })
    assert(r.ok, "step " .. tostring(r.step) .. ":\n" .. r.output)
    assert.is_nil(r.output:find("e .conc", 1, true), r.output)
    assert.are.equal(0, r.status)
  end)

  it("says validate reads standard input when it waits on the terminal, and not through a pipe", function()
    local r = typed(dir, {
      expect("reading the value of Sum from standard input; end it with Ctrl-D"),
      send('{"total": 3}\r'), pause(0.2), send("\4"), expect('"total": 3'),
    }, nil, { "validate", "program.luma", "Sum" })
    assert(r.ok, "step " .. tostring(r.step) .. ":\n" .. r.output)
    assert.are.equal(0, r.status, r.output)
    local status, out, err = piped(dir, '{"total": 3}', "validate program.luma Sum")
    assert.are.same({ 0, "" }, { status, err })
    assert.matches('"total": 3', out)
  end)

  it("cancels a running call with Ctrl-C (its signal fires) and goes on", function()
    local r = typed(dir, {
      expect("luma> "),
      send(":call spin {}\r"), pause(0.4), send("\3"),
      expect("TOOL_CANCELLED"), expect("luma> $"),
      send("1 + 1\r"), expect("2"), expect("luma> $"),
      send(":quit\r"),
    })
    assert(r.ok, "step " .. tostring(r.step) .. ":\n" .. r.output)
    assert.are.equal(0, r.status)
  end)

  it("interrupts Lua with Ctrl-C, clears a line with it, continues incomplete input, and leaves on Ctrl-D", function()
    local r = typed(dir, {
      expect("luma> "),
      send("while true do end\r"), pause(0.3), send("\3"), expect("interrupted"), expect("luma> $"),
      send("not this line"), pause(0.2), send("\3"), expect("luma> $"),
      send("function twice(x)\r"), expect(">> $"), send("return 2 * x end\r"), expect("luma> $"),
      send("twice(21)\r"), expect("42"), expect("luma> $"),
      send(':validate Sum {"total":\r'), expect(">> $"), send('3}\r'), expect('"total".*?3'), expect("luma> $"), pause(0.2),
      send("\4"),
    })
    assert(r.ok, "step " .. tostring(r.step) .. ":\n" .. r.output)
    assert.are.equal(0, r.status, r.output)
    -- the line Ctrl-C cleared never ran
    assert.is_nil(r.output:find("near 'this'", 1, true), r.output)
  end)

  it("keeps its history in LUMA_HISTORY: the up arrow brings back the last session's line", function()
    local r = typed(dir, { expect("luma> "), send("6 * 7\r"), expect("42"), expect("luma> $"), pause(0.2), send("\4") })
    assert(r.ok, r.output)
    assert.matches("6", h.read(dir .. "/history"))
    r = typed(dir, { expect("luma> "), send("\27[A\r"), expect("42"), expect("luma> $"), pause(0.2), send("\4") })
    assert(r.ok, "step " .. tostring(r.step) .. ":\n" .. r.output)
  end)

  it("colours its output at a terminal, and not with NO_COLOR", function()
    local r = typed(dir, { expect("luma> "), send(":tools\r"), expect("add"), send(":nope\r"), expect("unknown"),
      expect("luma> $"), pause(0.2), send("\4") })
    assert(r.ok, r.output)
    assert.matches("\27%[", r.output)
    r = typed(dir, { expect("luma> "), send(":tools\r"), expect("add"), send(":nope\r"), expect("unknown"),
      expect("luma> $"), pause(0.2), send("\4") }, { NO_COLOR = "1" })
    assert(r.ok, r.output)
    assert.is_nil(r.output:find("\27[3", 1, true), r.output)
  end)

  it("streams an ask's text as it comes, cancels the ask with Ctrl-C, and asks again", function()
    local server = mock.start()
    local ok, e = pcall(function()
      -- the first answer takes 10 s, a second an event: its first piece
      -- shows long before the ask could end
      server:script { { json = mock.chat('{"number": 12345678}').json, stream = { delay_ms = 1000 } },
                      mock.chat('{"number": 7}') }
      local pdir = project(server.url)
      local r = typed(pdir, {
        expect("luma> "),
        send(':ask "Pick a number" -> Pick\r'), expect('\\{"nu', 6), send("\3"),
        expect("ASK_CANCELLED", 5), expect("luma> $"),
        send(':ask "Pick again" -> Pick\r'), { expect = '"number".{0,8}: 7\r?\n\\}', timeout = 10, new = true },
        expect("luma> $"), send(":quit\r"),
      }, { LUMA_TEST_KEY = "sk-test" })
      os.execute("rm -rf " .. h.quote(pdir))
      assert(r.ok, "step " .. tostring(r.step) .. ":\n" .. r.output)
      assert.are.equal(0, r.status, r.output)
      -- the first answer never finished; the second's text came, then its value
      local plain = r.output:gsub("\27%[[%d;]*m", "")
      assert.is_nil(plain:find("12345678", 1, true), plain)
      assert.matches('{"number": 7}\r?\n{\r?\n  "number": 7\r?\n}', plain)
      local requests = server:requests()
      assert.are.equal(2, #requests)
      assert.is_true(requests[1].json.stream)
      assert.are.equal("Pick again", requests[2].json.messages[#requests[2].json.messages].content)
    end)
    server:stop()
    assert(ok, e)
  end)

  it("starts with no arguments", function()
    local r = typed(dir, { expect("luma> "), send(":help\r"), expect(":call TOOL"), expect("luma> $"), pause(0.2), send("\4") },
      nil, {})
    assert(r.ok, "step " .. tostring(r.step) .. ":\n" .. r.output)
  end)
end)

describe("the REPL through a pipe", function()
  local dir
  before_each(function() dir = project() end)
  after_each(function() os.execute("rm -rf " .. h.quote(dir)) end)

  it("reads commands line by line, without prompts or colours", function()
    local status, out, err = piped(dir, table.concat({
      ":tools",
      ':call add {"a": 1, "b": 2}',
      ":agent Helper",
      ':run double {"x": 21}',
      "x = 10",
      "x * 2, 'text', { a = 1 }",
      "program:tools()[1].name, luma.version",
      ":schema Sum",
      ":help call",
      "",
    }, "\n"), nil, { TERM = "xterm" })
    assert.are.equal(0, status, err)
    assert.are.equal("", err)
    assert.is_nil(out:find("luma>", 1, true))
    assert.is_nil(out:find("\27", 1, true))
    assert.matches("add  Adds two integers\n", out)
    assert.matches('{\n  "total": 3\n}\nevent: {', out)
    assert.matches("agent Helper: methods double\n42\n", out)
    assert.matches('\n20\ntext\n{\n  "a": 1\n}\n', out)
    assert.matches("add\t0.1.0\n", out)
    assert.matches('"required": %["total"%]', out)
    assert.matches(":call TOOL {json}\n  call a tool through the whole pipeline", out)
  end)

  it("goes on after an error and exits with 1 when any command failed", function()
    local status, out, err = piped(dir, table.concat({
      ':call add {"a": "one", "b": 2}',
      ":call nope {}",
      ":validate Sum {\"total\": \"x\"}",
      ":lod x.luma",
      "error('boom')",
      "1 + 1",
      "local y = ",
    }, "\n"))
    assert.are.equal(1, status)
    assert.matches("Error: %[TOOL_INPUT_INVALID%] add.input.a must be an integer", err)
    assert.matches("Error: %[TOOL_NOT_FOUND%]", err)
    assert.matches("Sum.total must be an integer", err)
    assert.matches("unknown command :lod %(did you mean :load%?%)", err)
    assert.matches("boom", err)
    -- a chunk the input ends in the middle of is an error too
    assert.matches("unexpected symbol near <eof>", err)
    assert.are.equal("2\n", (out:gsub("loaded[^\n]*\n", ""):gsub("event: [^\n]*\n", "")))
  end)

  it("loads and reloads a changed program, and says when there is none", function()
    local status, out, err = piped(dir, ":tools\n:load nowhere.luma\n", "repl")
    assert.are.equal(1, status)
    assert.matches("no program: :load PROGRAM first", err)
    assert.matches("IO_ERROR", err)
    status, out, err = piped(dir, table.concat({
      ":tools",
      "f = io.open('program.luma', 'a') f:write('tool extra() -> Sum { description: \"New\" }\\n') f:close()",
      ":reload",
      ":tools",
    }, "\n"))
    assert.are.equal(0, status, err)
    local before, after = out:match("^(.-)loaded program.luma.-\n(.-)loaded program.luma(.*)$")
    assert.is_truthy(after, out)
    assert.is_nil(after:find("extra", 1, true))
    assert.matches("extra  New", out:match("^.*loaded program.luma(.*)$"))
  end)

  it("says what is wrong, with the nearest name, for a schema, an agent or a model it has not got", function()
    local pdir = h.project { ["program.luma"] = PROGRAM:format("http://127.0.0.1:9") ..
      "agent Bare {\n  fn one() -> int { return 1 }\n}\n", ["tools.lua"] = TOOLS,
      ["luma.config.json"] = '{ "tool_modules": ["tools.lua"] }' }
    local status, _, err = piped(pdir, table.concat({
      ":validate Su {}",
      ":schema ad",
      ":agent Helpr",
      ":agent Bare",
      ':ask "hi" -> Sum',
    }, "\n"))
    os.execute("rm -rf " .. h.quote(pdir))
    assert.are.equal(1, status)
    assert.are.equal("Error: Unknown schema 'Su'. Did you mean 'Sum'?\n" ..
      "Error: Unknown schema 'ad'. Did you mean 'add'?\n" ..
      "no agent named 'Helpr'. Did you mean 'Helper'?\n" ..
      "Error: [ASK_MODEL_MISSING] Agent 'Bare' has no model to ask; name one with model: in the agent.\n", err)
  end)

  it("prints program:run()'s results as JSON, each on its lines", function()
    local pdir = h.project { ["program.luma"] = 'x = 1\ny = "two"\n' }
    local status, out, err = piped(pdir, "program:run()\n")
    os.execute("rm -rf " .. h.quote(pdir))
    assert.are.equal(0, status, err)
    local vars, names = out:match("^loaded [^\n]*\n(%b{})\n(%b[])\n$")
    assert.is_truthy(vars, out)
    assert.are.same({ x = 1, y = "two" }, luma.json.decode(vars))
    assert.are.same({ "x", "y" }, luma.json.decode(names))
  end)

  it("asks the current agent's model", function()
    local server = mock.start()
    local ok, e = pcall(function()
      server:script { mock.chat('{"number": 7}') }
      local pdir = project(server.url)
      local status, out, err = piped(pdir, ':ask "Pick a number" -> Pick\n:ask "no quotes -> Pick\n', nil,
        { LUMA_TEST_KEY = "sk-test" })
      os.execute("rm -rf " .. h.quote(pdir))
      assert.are.equal(1, status)
      assert.matches('{\n  "number": 7\n}', out)
      assert.matches(':ask needs "prompt" %-> Schema', err)
      local messages = server:requests()[1].json.messages
      assert.are.equal("Pick a number", messages[#messages].content)
      -- through a pipe, nothing streams
      assert.is_nil(server:requests()[1].json.stream)
    end)
    server:stop()
    assert(ok, e)
  end)
end)
