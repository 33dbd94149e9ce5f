-- luma-lua mcp: a program's tools served over MCP on stdio.
--
-- The peers are the official TypeScript clients from npm, installed under
-- spec/support/mcp (package.json + package-lock.json; `npm ci` runs when
-- node_modules is missing): @modelcontextprotocol/sdk 1.x, which speaks the
-- initialize era, and @modelcontextprotocol/client 2.x, in its legacy,
-- auto (probes server/discover) and pinned 2026-07-28 modes. The hostile
-- client is a raw pipe: lines written to the server's standard input.
local luma = require "luma"
local h = require "spec.helpers"

local json = luma.json
local SUPPORT = h.root .. "/spec/support/mcp"

local PROGRAM = [[
schema Sum { total: int }
schema Saved { id: string }
schema Waited { ms: int }

tool add(a: int, b: int) -> Sum {
  description: "Adds two integers"
  side_effects: "none"
}

tool save(id: string, text: string) -> Saved {
  description: "Saves a text"
  side_effects: "write"
  idempotent: true
  idempotency_key: id
}

tool slow(ms: int @range(0, 10000)) -> Waited {
  description: "Waits"
  timeout: 20000
}

tool fails(why: string) -> Sum {
  description: "Always fails"
}

model M {
  provider: "openai"
  name: "m"
  base_url: "http://127.0.0.1:9/v1/"
  api_key_env: null
}

agent Writer {
  model: M
  tools: [add, save]
  tool_policy: "approval"
}
]]

local TOOLS = [[
return {
  add = function(input) return { total = input.a + input.b } end,
  save = function(input) return { id = input.id } end,
  slow = function(input, signal)
    signal:sleep(input.ms)
    return { ms = input.ms }
  end,
  fails = function(input)
    error(luma.ToolError { code = "NOPE", message = "it fails: " .. input.why, retryable = false })
  end,
}
]]

local CONFIG = [[
{ "tool_modules": ["./tools.lua"],
  "tool_module_policy": { "sandbox": "strict", "max_concurrency": 8 } }
]]

local function project(program)
  return h.project { ["program.luma"] = program or PROGRAM, ["tools.lua"] = TOOLS, ["luma.config.json"] = CONFIG }
end

local function rpc(id, method, params)
  return json.encode { jsonrpc = "2.0", id = id, method = method, params = params }
end

local INIT = rpc(0, "initialize", { protocolVersion = "2025-06-18", capabilities = {},
  clientInfo = { name = "raw", version = "1" } })

local MODERN = { ["io.modelcontextprotocol/protocolVersion"] = "2026-07-28",
  ["io.modelcontextprotocol/clientCapabilities"] = {} }

-- Runs the server on `lines` (standard input ends after them); returns the
-- replies in order, those with an id by id, and the run.
local function serve(dir, lines, args, reused_ids, env)
  local r = h.run({ "mcp", dir .. "/program.luma", table.unpack(args or {}) },
    { stdin = table.concat(lines, "\n") .. "\n", env = env })
  local replies, by_id = {}, {}
  for line in r.stdout:gmatch("[^\n]+") do
    local m = json.decode(line)
    replies[#replies + 1] = m
    if m.id ~= nil then
      assert(reused_ids or by_id[m.id] == nil, "two replies for id " .. tostring(m.id))
      by_id[m.id] = by_id[m.id] or m
    end
  end
  return replies, by_id, r
end

local function position(replies, id)
  for i, m in ipairs(replies) do if m.id == id then return i end end
end

describe("luma-lua mcp with the official TypeScript clients", function()
  setup(function()
    local status = h.sh("command -v node && command -v npm")
    assert(status == 0, "node and npm are needed (Debian: nodejs npm)")
    if h.sh("test -d " .. h.quote(SUPPORT .. "/node_modules/@modelcontextprotocol/client")) ~= 0 then
      local st, out, err = h.sh("cd " .. h.quote(SUPPORT) .. " && env -u LD_PRELOAD npm ci --prefer-offline --no-audit --no-fund")
      assert(st == 0, "npm ci in spec/support/mcp failed: " .. out .. err)
    end
  end)

  local function client(flavour, dir)
    -- (node without the sanitizers' preloaded runtime: the server it starts is
    -- bin/luma-lua, instrumented itself in an ASan build)
    local status, out, err = h.sh("cd " .. h.quote(SUPPORT) .. " && env -u LD_PRELOAD node client.mjs " .. flavour ..
      " add '{\"a\":2,\"b\":3}' '{\"a\":\"x\",\"b\":3}' -- " .. h.quote(h.root .. "/bin/luma-lua") ..
      " mcp " .. h.quote(dir .. "/program.luma"))
    assert(status == 0, err)
    local r = json.decode(out)
    assert(r.failure == nil, tostring(r.failure) .. "\n" .. tostring(r.stderr))
    return r
  end

  for _, case in ipairs {
    { "v1", "@modelcontextprotocol/sdk 1.x (initialize)", nil },
    { "v2-legacy", "@modelcontextprotocol/client 2.x, legacy mode", "2025-11-25" },
    { "v2-auto", "@modelcontextprotocol/client 2.x, auto mode (probes server/discover)", "2026-07-28" },
    { "v2-pin", "@modelcontextprotocol/client 2.x, pinned to 2026-07-28", "2026-07-28" },
  } do
    it("lists and calls tools: " .. case[2], function()
      local r = client(case[1], project())
      if case[3] then assert.are.equal(case[3], r.version) end
      assert.are.equal("luma-lua", r.server.name)
      local by_name = {}
      for _, t in ipairs(r.tools) do by_name[t.name] = t end
      assert.are.same({ "add", "save", "slow", "fails" }, (function()
        local names = {}
        for _, t in ipairs(r.tools) do names[#names + 1] = t.name end
        return names
      end)())
      -- inputSchema from the contract, outputSchema from the return schema
      assert.are.same({ "a", "b" }, by_name.add.inputSchema.required)
      assert.are.equal("integer", by_name.add.inputSchema.properties.a.type)
      assert.are.same({ "total" }, by_name.add.outputSchema.required)
      -- annotations from the configuration (strict sandbox without network)
      assert.are.same({ readOnlyHint = true, idempotentHint = true, openWorldHint = false }, by_name.add.annotations)
      assert.are.same({ readOnlyHint = false, idempotentHint = true, destructiveHint = true, openWorldHint = false },
        by_name.save.annotations)
      -- a result: structuredContent plus the same as text
      assert.are.same({ total = 5 }, r.call.structuredContent)
      assert.are.same({ { type = "text", text = '{"total":5}' } }, r.call.content)
      assert.is_false(r.call.isError)
      -- a call the pipeline refuses: an isError result with the code
      assert.is_true(r.bad.isError)
      assert.matches("^%[TOOL_INPUT_INVALID%] add%.input%.a", r.bad.content[1].text)
      -- an unknown tool: a protocol error (the 1.x client turns it into an error)
      local text = r.unknown.error and r.unknown.error.message or r.unknown.content[1].text
      assert.matches("unknown tool 'no_such_tool'", text)
    end)
  end
end)

describe("luma-lua mcp against a hostile client (a raw pipe)", function()
  local dir
  setup(function() dir = project() end)

  it("answers bad JSON, batches, bad ids and unknown methods with JSON-RPC errors, and goes on", function()
    local replies, by_id, r = serve(dir, {
      "{not json",
      "[1, 2]",
      '{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
      '{"jsonrpc":"1.0","id":2,"method":"ping"}',
      '"a string"',
      INIT,
      rpc(3, "no/such/method", {}),
      rpc(4, "ping"),
      '{"jsonrpc":"2.0","id":5}',
      '{"jsonrpc":"2.0","id":6,"result":{}}',
      string.rep("[", 1000) .. string.rep("]", 1000),
    })
    assert.are.equal(0, r.status)
    assert.are.equal(-32700, replies[1].error.code)
    assert.is_nil(replies[1].id)
    assert.are.equal(-32600, replies[2].error.code)
    assert.matches("batches are not supported", replies[2].error.message)
    assert.are.equal(-32600, replies[3].error.code)
    assert.are.equal(-32600, by_id[2].error.code)
    assert.are.equal(-32600, replies[5].error.code)
    assert.are.equal("2025-06-18", by_id[0].result.protocolVersion)
    assert.are.same({ code = -32601, message = "unknown method 'no/such/method'" }, by_id[3].error)
    assert.are.same({}, by_id[4].result)
    assert.are.same({ code = -32600, message = "a request needs a method" }, by_id[5].error)
    assert.is_nil(by_id[6])                                   -- a response to nothing: ignored
    assert.are.equal(-32700, replies[#replies].error.code)   -- nested past mcp_json_depth
  end)

  it("drops a message longer than mcp_max_message_bytes and answers the next one", function()
    local max = luma.limits and luma.limits.mcp_max_message_bytes or require("luma.core").limits.mcp_max_message_bytes
    local huge = '{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"' .. string.rep("a", max) .. '"}}'
    local replies, by_id = serve(dir, { INIT, huge, rpc(10, "ping") })
    assert.are.equal(3, #replies)
    assert.are.equal(-32600, replies[2].error.code)
    assert.matches("longer than mcp_max_message_bytes", replies[2].error.message)
    assert.is_nil(by_id[9])
    assert.are.same({}, by_id[10].result)
  end)

  it("negotiates versions and says which it speaks", function()
    local _, by_id = serve(dir, {
      rpc(1, "tools/list"),                                         -- no version at all
      rpc(2, "tools/list", { _meta = { ["io.modelcontextprotocol/protocolVersion"] = "2099-01-01",
        ["io.modelcontextprotocol/clientCapabilities"] = {} } }),
      rpc(3, "tools/list", { _meta = { ["io.modelcontextprotocol/protocolVersion"] = "2026-07-28" } }),
      rpc(4, "server/discover", { _meta = MODERN }),
      rpc(5, "initialize", { protocolVersion = "2024-11-05", capabilities = {}, clientInfo = { name = "old", version = "1" } }),
      rpc(6, "tools/list"),
    })
    assert.are.equal(-32602, by_id[1].error.code)
    assert.matches("send initialize first", by_id[1].error.message)
    assert.are.same({ code = -32022, data = { supported = { "2026-07-28" }, requested = "2099-01-01" } },
      { code = by_id[2].error.code, data = by_id[2].error.data })
    assert.are.equal(-32602, by_id[3].error.code)
    assert.matches("clientCapabilities", by_id[3].error.message)
    assert.are.same({ "2025-06-18", "2025-11-25", "2026-07-28" }, by_id[4].result.supportedVersions)
    assert.are.equal("complete", by_id[4].result.resultType)
    -- an initialize with a version it does not speak: it offers its newest
    assert.are.equal("2025-11-25", by_id[5].result.protocolVersion)
    assert.are.equal(4, #by_id[6].result.tools)
  end)

  it("refuses a reused id in flight, a tool the agent does not expose, and denies approval it cannot ask for", function()
    local _, by_id = serve(dir, {
      INIT,
      rpc(1, "tools/call", { name = "add", arguments = { a = 1, b = 2 } }),
      rpc(2, "tools/call", { name = "slow", arguments = { ms = 10 } }),     -- not Writer's
      rpc(3, "tools/call", { name = "save", arguments = { id = "x", text = "t" } }),
      rpc(4, "tools/call", { name = "add", arguments = { 1, 2 } }),
    }, { "--agent", "Writer" })
    assert.are.same({ total = 3 }, by_id[1].result.structuredContent)
    assert.are.equal(-32602, by_id[2].error.code)
    assert.matches("unknown tool 'slow'", by_id[2].error.message)
    assert.is_true(by_id[3].result.isError)
    assert.matches("^%[TOOL_PERMISSION_DENIED%] Tool 'save' writes and was not approved: list it in LUMA_APPROVED_TOOLS",
      by_id[3].result.content[1].text)
    assert.are.equal(-32602, by_id[4].error.code)

    -- the one way to approve on stdio: LUMA_APPROVED_TOOLS
    _, by_id = serve(dir, { INIT, rpc(1, "tools/call", { name = "save", arguments = { id = "x", text = "t" } }) },
      { "--agent", "Writer" }, false, { LUMA_APPROVED_TOOLS = "save" })
    assert.are.same({ id = "x" }, by_id[1].result.structuredContent)

    local replies
    replies, by_id = serve(dir, {
      INIT,
      rpc(7, "tools/call", { name = "slow", arguments = { ms = 300 } }),
      rpc(7, "tools/call", { name = "add", arguments = { a = 1, b = 1 } }),
    }, nil, true)
    assert.are.equal(3, #replies)
    assert.are.equal(-32600, replies[2].error.code)
    assert.matches("already used by a request in flight", replies[2].error.message)
    assert.are.same({ ms = 300 }, replies[3].result.structuredContent)
  end)

  it("gives a tool error as an isError result with its code and message", function()
    local _, by_id = serve(dir, { INIT, rpc(1, "tools/call", { name = "fails", arguments = { why = "no" } }) })
    assert.is_true(by_id[1].result.isError)
    assert.are.equal("[NOPE] it fails: no", by_id[1].result.content[1].text)
  end)

  -- (calls share the runtime's workers, one per CPU: with every worker held by
  -- a slow call, the next call waits for one; tools/list never does)
  it("runs calls at once: a slow tool holds up neither tools/list nor other calls", function()
    local replies, by_id = serve(dir, {
      INIT,
      rpc(1, "tools/call", { name = "slow", arguments = { ms = 800 } }),
      rpc(3, "tools/list"),
      rpc(4, "tools/call", { name = "add", arguments = { a = 1, b = 1 } }),
    })
    assert.is_true(position(replies, 3) < position(replies, 1))
    assert.is_true(position(replies, 4) < position(replies, 1))
    assert.are.same({ total = 2 }, by_id[4].result.structuredContent)
    assert.are.same({ ms = 800 }, by_id[1].result.structuredContent)
  end)

  it("cancels a call on notifications/cancelled and sends no reply for it", function()
    local t0 = require("luma.core").monotonic_ms()
    local replies, by_id = serve(dir, {
      INIT,
      rpc(1, "tools/call", { name = "slow", arguments = { ms = 8000 } }),
      json.encode { jsonrpc = "2.0", method = "notifications/cancelled", params = { requestId = 1, reason = "user" } },
      json.encode { jsonrpc = "2.0", method = "notifications/cancelled", params = { requestId = 99 } },
      rpc(2, "ping"),
    })
    local elapsed = require("luma.core").monotonic_ms() - t0
    assert.is_nil(by_id[1])
    assert.are.equal(2, #replies)
    assert.is_true(elapsed < 4000, "the cancelled call ran on: " .. elapsed .. " ms")
  end)

  it("bounds a flood of calls by mcp_max_in_flight", function()
    local max = require("luma.core").limits.mcp_max_in_flight
    local lines = { INIT }
    for i = 1, max + 10 do lines[#lines + 1] = rpc(i, "tools/call", { name = "slow", arguments = { ms = 200 } }) end
    local replies, by_id, r = serve(dir, lines)
    assert.are.equal(0, r.status)
    local busy, done = 0, 0
    for i = 1, max + 10 do
      if by_id[i].error then
        assert.are.equal(-32000, by_id[i].error.code)
        busy = busy + 1
      else
        assert.are.same({ ms = 200 }, by_id[i].result.structuredContent)
        done = done + 1
      end
    end
    assert.are.equal(max, done)
    assert.are.equal(10, busy)
    assert.are.equal(max + 11, #replies)
  end)

  it("answers a flood of requests one by one, in order", function()
    local lines = { INIT }
    for i = 1, 20000 do lines[#lines + 1] = rpc(i, i % 2 == 0 and "ping" or "tools/list") end
    local replies, _, r = serve(dir, lines)
    assert.are.equal(0, r.status)
    assert.are.equal(20001, #replies)
    for i = 1, 20000 do assert.are.equal(i, replies[i + 1].id) end
  end)

  it("ends, without dying of SIGPIPE, when the client stops reading", function()
    local status_file, err_file = h.tmpname(".status"), h.tmpname(".err")
    local lines = { INIT }
    for i = 1, 200 do lines[#lines + 1] = rpc(i, "tools/list") end
    local input = h.write(h.tmpname(".in"), table.concat(lines, "\n") .. "\n")
    h.sh("{ " .. h.quote(h.root .. "/bin/luma-lua") .. " mcp " .. h.quote(dir .. "/program.luma") .. " < " ..
      h.quote(input) .. " 2> " .. h.quote(err_file) .. "; echo $? > " .. h.quote(status_file) ..
      "; } | head -c 100 > /dev/null")
    local status, stderr = h.read(status_file), h.read(err_file)
    os.remove(status_file)
    os.remove(err_file)
    os.remove(input)
    assert.are.equal("1\n", status)
    assert.are.equal("luma-lua mcp: the client stopped reading: cancelled the calls in flight\n", stderr)
  end)

  it("refuses at load a tool whose name MCP cannot serve", function()
    local long = string.rep("t", 129)
    local d = h.project { ["program.luma"] = "schema S { x: int }\ntool " .. long .. "(x: int) -> S {}\n",
      ["tools.lua"] = "return { " .. long .. " = function(i) return i end }",
      ["luma.config.json"] = '{ "tool_modules": ["./tools.lua"] }' }
    local r = h.run { "mcp", d .. "/program.luma" }
    assert.are.equal(2, r.status)
    assert.are.equal("Error: tool '" .. long .. "' cannot be served over MCP: a tool name is 1 to 128 of " ..
      "A-Z a-z 0-9 _ - . (it has 129 bytes)\n", r.stderr)
    assert.are.equal("", r.stdout)
  end)

  it("says what is wrong with its command line", function()
    local r = h.run { "mcp" }
    assert.are.equal(2, r.status)
    assert.matches("mcp needs one PROGRAM", r.stderr)
    r = h.run { "mcp", dir .. "/program.luma", "--agent", "Nobody" }
    assert.are.equal(2, r.status)
    assert.matches("no agent 'Nobody'", r.stderr)
  end)
end)
