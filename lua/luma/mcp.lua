-- luma-lua mcp: a program's tools served over the Model Context Protocol, on
-- stdio or Streamable HTTP (--http). Both eras: a client that sends
-- `initialize` (2025-06-18, 2025-11-25) gets a session (for the life of the
-- process on stdio; an Mcp-Session-Id over HTTP); a request whose
-- params._meta names the 2026-07-28 revision is answered on its own
-- (stateless, with server/discover and resultType). Every tools/call is a
-- program:start through the one pipeline. Its handler starts on this loop's
-- thread (the runtime's inline "slice"): one that returns within its first
-- slice is done when the start returns; one that waits (signal:sleep,
-- luma.http) or computes longer goes on on the worker pool, and the loop
-- waits on stdin and the runtime's fd at once, so a slow tool holds up
-- neither tools/list nor other calls.
--
-- Where the bounds are: the framing (one message a line, at most
-- mcp_max_message_bytes, never held whole when longer), the JSON parsing (the
-- core's codec, at most mcp_json_depth) and the count of calls in flight
-- (mcp_max_in_flight) are C (core/mcp.c, core/lmcp.c): they meet the client's
-- bytes first. The protocol is a handful of table lookups per message and
-- stays here, where it reads the program's declarations: `handle` writes
-- nothing and reads nothing; given a message and the state (the era, the
-- calls pending) it returns the replies, and `finished` those of calls that
-- ended. The stdio loop and the HTTP loop are the only I/O. Over HTTP each
-- POST is an exchange of its own (one message, one reply): a state that
-- shares the server's tables and holds that request's call; the HTTP server
-- (core/mcphttp.c) bounds what reaches it and checks Origin and the token.
local luma = require "luma"
local core = require "luma.core"
local approval = require "luma.approval"

local mcp = {}

local LEGACY = { "2025-11-25", "2025-06-18" }       -- newest first
local MODERN = { "2026-07-28" }
local SUPPORTED = { "2025-06-18", "2025-11-25", "2026-07-28" }
local META_VERSION = "io.modelcontextprotocol/protocolVersion"
local META_CAPS = "io.modelcontextprotocol/clientCapabilities"
local META_SERVER = "io.modelcontextprotocol/serverInfo"
local META_CLIENT = "io.modelcontextprotocol/clientInfo"
local CLIENT_NAME_BYTES = 128   -- a client's name in telemetry is cut to this

local PARSE, INVALID, NO_METHOD, BAD_PARAMS, INTERNAL = -32700, -32600, -32601, -32602, -32603
local BUSY = -32000
local UNSUPPORTED_VERSION = -32022

local MAX_MESSAGE = core.limits.mcp_max_message_bytes

local array_mt = core.array_mt
local function array(t) return setmetatable(t, array_mt) end
local function contains(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

-- ------------------------------------------------------------- tool table

-- MCP's tool name rule (2025-11-25 and later).
function mcp.valid_name(name)
  return #name >= 1 and #name <= 128 and not name:find("[^A-Za-z0-9_.-]")
end

-- The annotations the configuration supports: hints, never promises.
local function annotations(decl, network)
  local a = {
    readOnlyHint = decl.side_effects ~= "write",
    idempotentHint = decl.side_effects ~= "write" or decl.idempotent == true,
  }
  if decl.side_effects == "write" then a.destructiveHint = true end
  if network ~= nil then a.openWorldHint = network end
  return a
end

-- The tools served: every tool of the program, or of one agent. Returns the
-- list in declaration order and a map by name; or nil and why.
-- `network`: true, false or nil (unknown) for what the handlers may reach.
function mcp.tools(program, agent, network)
  local names
  if agent then
    local d = program:declaration(agent)
    if not d or d.kind ~= "agent" then
      return nil, "no agent '" .. agent .. "' in the program"
    end
    names = d.tools or {}
  else
    names = {}
    for _, t in ipairs(program:tools()) do names[#names + 1] = t.name end
  end
  local params = {}
  for _, t in ipairs(program:tools()) do params[t.name] = t.parameters end
  local list, by_name = {}, {}
  for _, name in ipairs(names) do
    if not mcp.valid_name(name) then
      return nil, "tool '" .. name .. "' cannot be served over MCP: a tool name is 1 to 128 of " ..
        "A-Z a-z 0-9 _ - . (it has " .. #name .. " bytes)"
    end
    local decl = program:declaration(name)
    local tool = {
      name = name,
      description = decl.description ~= "" and decl.description or nil,
      inputSchema = params[name],
      annotations = annotations(decl, network),
    }
    local out = decl.output and program:json_schema(decl.output)
    -- an outputSchema must have an object root (2025-11-25); a union has none
    if type(out) == "table" and out.type == "object" then tool.outputSchema = out end
    list[#list + 1] = tool
    by_name[name] = tool
  end
  return array(list), by_name
end

-- ------------------------------------------------------------- the protocol

local function reply(id, result) return { jsonrpc = "2.0", id = id, result = result } end
local function fail(id, code, message, data)
  return { jsonrpc = "2.0", id = id, error = { code = code, message = message, data = data } }
end

-- pending calls are keyed by type and value: 1 and "1" are two ids
local function key(id) return type(id) .. ":" .. tostring(id) end

local function text_of(v)
  local ok, s = pcall(core.json_encode, v)
  return ok and s or tostring(v)
end

-- The client's name in clientInfo (of initialize, or of a 2026-07-28
-- request's _meta), cut to CLIENT_NAME_BYTES; nil when it gives none.
local function client_name(info)
  local name = type(info) == "table" and info.name
  if type(name) ~= "string" or name == "" then return nil end
  return name:sub(1, CLIENT_NAME_BYTES)
end

-- What a finished call gives the client.
function mcp.call_result(ok, result)
  if ok then
    local r = { content = array { { type = "text", text = text_of(result) } } }
    if type(result) == "table" and getmetatable(result) ~= array_mt then r.structuredContent = result end
    r.isError = false
    return r
  end
  local e = result
  if luma.is_error(e) then return mcp.error_result(tostring(e.code), tostring(e.message)) end
  return mcp.error_result("TOOL_FAILED", tostring(e))
end

-- A tool error as the client gets it: its text is "[CODE] message".
function mcp.error_result(code, message)
  return { content = array { { type = "text", text = "[" .. code .. "] " .. message } }, isError = true }
end

-- A new server state for `program` (and `agent`, or nil: every tool), for
-- the client whose messages `reader` (core.mcp_reader) frames: it also
-- bounds the requests in flight.
function mcp.new(program, reader, opts)
  local tools, by_name = assert(mcp.tools(program, opts.agent, opts.network))
  -- the tools whose calls need approval: write tools of an agent with
  -- tool_policy "approval"
  local needs_approval = {}
  local ad = opts.agent and program:declaration(opts.agent)
  if ad and ad.tool_policy == "approval" then
    for _, t in ipairs(tools) do
      if program:declaration(t.name).side_effects == "write" then needs_approval[t.name] = true end
    end
  end
  local S = {
    program = program,
    tools = tools,
    by_name = by_name,
    scope = opts.agent and program:scope(opts.agent) or nil,
    session = nil,        -- the legacy version agreed by initialize
    reader = reader,
    pending = {},         -- key(id) -> { id, call, modern }
    needs_approval = needs_approval,
    asking = {},          -- the id of an elicitation/create sent -> { msg, key }: a call waiting for approval
    waiting = {},         -- key(id) of a call waiting for approval -> the elicitation's id
    asked = { n = 0 },    -- elicitations sent (one counter for every exchange of --http)
    server_info = { name = "luma-lua", version = core.version },
  }
  return S
end

local function modern_result(S, result)
  result.resultType = "complete"
  result._meta = { [META_SERVER] = S.server_info }
  return result
end

local function capabilities() return { tools = { listChanged = false } } end

-- Which era a request speaks: "modern", "legacy", or nil and an error.
local function era(S, msg)
  local params = msg.params
  local meta = type(params) == "table" and params._meta or nil
  local version = nil
  if type(meta) == "table" then version = meta[META_VERSION] end
  if version ~= nil then
    if type(version) ~= "string" or not contains(MODERN, version) then
      return nil, fail(msg.id, UNSUPPORTED_VERSION,
        "protocol version " .. text_of(version) .. " is not supported: this server speaks " ..
        table.concat(SUPPORTED, ", ") .. " (2026-07-28 per request; the others after initialize)",
        { supported = array { table.unpack(MODERN) }, requested = version })
    end
    if type(meta[META_CAPS]) ~= "table" then
      return nil, fail(msg.id, BAD_PARAMS, "params._meta[\"" .. META_CAPS .. "\"] is required with " ..
        META_VERSION .. " (an object; {} for none)")
    end
    return "modern"
  end
  if S.session then return "legacy" end
  return nil, fail(msg.id, BAD_PARAMS, "no protocol version: send initialize first (" ..
    table.concat(LEGACY, ", ") .. "), or give params._meta[\"" .. META_VERSION .. "\"] = \"" ..
    MODERN[1] .. "\" on each request", { supported = array { table.unpack(SUPPORTED) } })
end

local methods = {}

function methods.initialize(S, msg)
  local p = msg.params
  if type(p) ~= "table" or type(p.protocolVersion) ~= "string" then
    return fail(msg.id, BAD_PARAMS, "initialize: params.protocolVersion must be a string",
      { supported = array { table.unpack(LEGACY) } })
  end
  -- the client's version when this server speaks it, else the newest it
  -- speaks: the client then decides whether to go on
  local version = contains(LEGACY, p.protocolVersion) and p.protocolVersion or LEGACY[1]
  S.session = version
  S.client = client_name(p.clientInfo)
  S.elicitation = type(p.capabilities) == "table" and type(p.capabilities.elicitation) == "table"
  return reply(msg.id, {
    protocolVersion = version,
    capabilities = capabilities(),
    serverInfo = S.server_info,
  })
end

function methods.ping(S, msg)
  return reply(msg.id, {})
end

methods["server/discover"] = function(S, msg, modern)
  return reply(msg.id, modern_result(S, {
    supportedVersions = array { table.unpack(SUPPORTED) },
    capabilities = capabilities(),
    serverInfo = S.server_info,
    ttlMs = 3600000,
    cacheScope = "public",
  }))
end

methods["tools/list"] = function(S, msg, modern)
  local p = msg.params
  if type(p) == "table" and p.cursor ~= nil then
    -- every tool fits one page: no cursor was ever given out
    return fail(msg.id, BAD_PARAMS, "tools/list: unknown cursor " .. text_of(p.cursor))
  end
  local result = { tools = S.tools }
  if modern then
    result.ttlMs = 3600000
    result.cacheScope = "public"
    modern_result(S, result)
  end
  return reply(msg.id, result)
end

-- The approval the pipeline asks for (mcp.main's approve): given to the one
-- call being started (the permission step runs within program:start).
local granted = nil
function mcp.granted(tool) return granted == tool end

local function denied(S, msg, modern, why)
  local r = mcp.error_result("TOOL_PERMISSION_DENIED", why)
  return reply(msg.id, modern and modern_result(S, r) or r)
end

local APPROVAL_TTL_S = 600   -- how long a 2026-07-28 requestState asking for approval holds

local function same(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  if getmetatable(a) ~= getmetatable(b) then return false end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local function approval_request(name, args)
  return { method = "elicitation/create", params = {
    message = "Allow the tool '" .. name .. "' to run? It writes. Arguments: " .. text_of(args),
    requestedSchema = { type = "object", properties = {} } } }
end

-- 2026-07-28's way to ask (input_required): true when the request carries
-- the user's accept under the requestState this server gave for the same
-- call; else the reply (the question, or the denial).
local function ask_modern(S, msg, p, args)
  local name = p.name
  if p.inputResponses ~= nil or p.requestState ~= nil then
    local payload = type(p.requestState) == "string" and core.mcp_unseal(p.requestState)
    local ok, st = pcall(core.json_decode, payload or "")
    if not payload or not ok or type(st) ~= "table" or st.tool ~= name or type(st.expires) ~= "number"
        or st.expires < os.time() or not same(st.arguments, args) then
      return denied(S, msg, true, "Tool '" .. name .. "' was not approved: requestState is not one this server " ..
        "gave for this call with these arguments, or it expired: send the call again without it")
    end
    local answer = type(p.inputResponses) == "table" and p.inputResponses.approve or nil
    local action = type(answer) == "table" and answer.action or nil
    if action == "accept" then return true end
    return denied(S, msg, true, "Tool '" .. name .. "' was not approved: the user answered " .. text_of(action))
  end
  local r = modern_result(S, {
    inputRequests = { approve = approval_request(name, args) },
    requestState = core.mcp_seal(core.json_encode { tool = name, arguments = args, expires = os.time() + APPROVAL_TTL_S }),
  })
  r.resultType = "input_required"
  return reply(msg.id, r)
end

methods["tools/call"] = function(S, msg, modern, approved)
  local p = msg.params
  if type(p) ~= "table" or type(p.name) ~= "string" then
    return fail(msg.id, BAD_PARAMS, "tools/call: params.name must be a string")
  end
  if not S.by_name[p.name] then
    local names = {}
    for _, t in ipairs(S.tools) do names[#names + 1] = t.name end
    local hint = core.suggest(p.name, names)
    return fail(msg.id, BAD_PARAMS, "tools/call: unknown tool '" .. p.name .. "'" ..
      (hint and (". Did you mean '" .. hint .. "'?") or "") ..
      " (this server has: " .. table.concat(names, ", ") .. ")")
  end
  local args = p.arguments
  if args == nil or args == core.null then args = {} end
  if type(args) ~= "table" or getmetatable(args) == array_mt then
    return fail(msg.id, BAD_PARAMS, "tools/call: params.arguments must be an object")
  end
  if S.needs_approval[p.name] and not approved and not approval.listed(os.getenv("LUMA_APPROVED_TOOLS"), p.name) then
    -- ask the user through the client: input_required in 2026-07-28;
    -- elicitation in the initialize era (over HTTP on the call's reply,
    -- an event stream, when the client takes one)
    local how
    if modern and type(p._meta[META_CAPS].elicitation) ~= "table" then
      how = "the client cannot be asked: the request's clientCapabilities has no elicitation"
    elseif modern then
      local verdict = ask_modern(S, msg, p, args)
      if verdict ~= true then return verdict end
      approved = true
    elseif not S.elicit then
      how = "this transport cannot ask the client (over HTTP the request's Accept must take text/event-stream)"
    elseif not S.elicitation then
      how = "the client cannot be asked: it did not declare the elicitation capability at initialize"
    end
    if how then
      return denied(S, msg, modern, "Tool '" .. p.name .. "' writes and needs approval, and " .. how ..
        ": list it in LUMA_APPROVED_TOOLS to run it")
    end
  end
  if S.needs_approval[p.name] and not approved and not approval.listed(os.getenv("LUMA_APPROVED_TOOLS"), p.name) then
    -- a call waiting for its answer counts as one in flight
    if not S.reader:admit() then
      return fail(msg.id, BUSY, "too many tools/call requests in flight (mcp_max_in_flight = " ..
        core.limits.mcp_max_in_flight .. "): wait for one to end")
    end
    S.asked.n = S.asked.n + 1
    local eid = "luma-approval-" .. S.asked.n
    S.asking[eid] = { msg = msg, key = key(msg.id) }
    S.waiting[key(msg.id)] = eid
    local ask = approval_request(p.name, args)
    return { jsonrpc = "2.0", id = eid, method = ask.method, params = ask.params }
  end
  if not S.reader:admit() then
    return fail(msg.id, BUSY, "too many tools/call requests in flight (mcp_max_in_flight = " ..
      core.limits.mcp_max_in_flight .. "): wait for one to end")
  end
  -- the call's telemetry event says which client asked, and its request id
  local client = S.client
  if modern then client = client_name(p._meta[META_CLIENT]) end
  local opts = { scope = S.scope, tags = { mcp_client = client, mcp_request = msg.id } }
  granted = approved and p.name or nil
  local ok, call = pcall(S.program.start, S.program, p.name, args, opts)
  granted = nil
  if not ok then
    S.reader:release()
    local r = mcp.call_result(false, call)
    return reply(msg.id, modern and modern_result(S, r) or r)
  end
  -- a progress token (string or integer) asks for notifications/progress
  local meta = p._meta
  local token = type(meta) == "table" and meta.progressToken or nil
  if not (type(token) == "string" or math.type(token) == "integer") then token = nil end
  S.pending[key(msg.id)] = { id = msg.id, call = call, modern = modern, token = token, seq = 0, sent = -1 }
  return nil
end

-- One message in; the replies to write out (a list, maybe empty).
function mcp.handle(S, msg)
  if type(msg) ~= "table" or getmetatable(msg) == array_mt then
    if type(msg) == "table" then
      return { fail(nil, INVALID, "batches are not supported: send one message a line") }
    end
    return { fail(nil, INVALID, "a message must be a JSON object") }
  end
  local id = msg.id
  if id ~= nil and not (type(id) == "string" or math.type(id) == "integer") then
    return { fail(nil, INVALID, "id must be a string or an integer, not " .. text_of(id)) }
  end
  if msg.jsonrpc ~= "2.0" then
    return { fail(id, INVALID, "jsonrpc must be \"2.0\"") }
  end
  if msg.method == nil then
    -- a response: to an elicitation asking for a call's approval, or to nothing
    local asked = id ~= nil and S.asking[id]
    if asked and (msg.result ~= nil or msg.error ~= nil) then
      S.asking[id] = nil
      S.waiting[asked.key] = nil
      S.reader:release()
      local res = msg.result
      local action = type(res) == "table" and res.action or nil
      if action == "accept" then
        local r = methods["tools/call"](S, asked.msg, false, true)
        return r and { r } or {}
      end
      local why = msg.error ~= nil and ("the client could not ask (" .. text_of(msg.error) .. ")")
        or ("the user answered " .. text_of(action))
      return { denied(S, asked.msg, false, "Tool '" .. asked.msg.params.name .. "' was not approved: " .. why) }
    end
    if msg.result ~= nil or msg.error ~= nil then return {} end
    return { fail(id, INVALID, "a request needs a method") }
  end
  if type(msg.method) ~= "string" then
    return { fail(id, INVALID, "method must be a string") }
  end
  if msg.params ~= nil and (type(msg.params) ~= "table" or getmetatable(msg.params) == array_mt) then
    return { fail(id, INVALID, "params must be an object") }
  end
  if id == nil then
    -- notifications: no reply, ever
    if msg.method == "notifications/cancelled" and type(msg.params) == "table" then
      local rid = msg.params.requestId
      local eid = rid ~= nil and S.waiting[key(rid)]
      if eid then   -- waiting for approval: it never starts
        S.waiting[key(rid)] = nil
        S.asking[eid] = nil
        S.reader:release()
      end
      local p = rid ~= nil and S.pending[key(rid)]
      if p then
        p.call:cancel()
        p.cancelled = true   -- it ends as TOOL_CANCELLED; no reply is sent
      end
    end
    return {}
  end
  if S.pending[key(id)] or S.waiting[key(id)] then
    return { fail(id, INVALID, "id " .. text_of(id) .. " is already used by a request in flight") }
  end
  local method = methods[msg.method]
  local meta = msg.params and msg.params._meta
  if (msg.method == "initialize" or msg.method == "ping") and type(meta) == "table" and meta[META_VERSION] ~= nil then
    return { fail(id, NO_METHOD, "'" .. msg.method .. "' is not a method of " .. MODERN[1] ..
      ", which the request's _meta names (that revision has neither initialize nor ping)") }
  end
  if msg.method == "initialize" then return { method(S, msg) } end
  if not method then
    return { fail(id, NO_METHOD, "unknown method '" .. msg.method .. "'") }
  end
  local e, problem = era(S, msg)
  if not e then
    if msg.method == "ping" then return { method(S, msg) } end
    return { problem }
  end
  local r = method(S, msg, e == "modern")
  return r and { r } or {}
end

-- The progress notifications of the calls in flight that asked for them:
-- the last report of each handler's signal:progress since the previous
-- look, when its count rose (the protocol wants it rising; reports in
-- between are not kept).
function mcp.progress(S)
  local out = {}
  for _, p in pairs(S.pending) do
    if p.token ~= nil and not p.cancelled then
      local seq, n, total, message = p.call:progress()
      if seq and seq ~= p.seq then
        p.seq = seq
        if n > p.sent then
          p.sent = n
          out[#out + 1] = { jsonrpc = "2.0", method = "notifications/progress", params = {
            progressToken = p.token, progress = math.tointeger(n) or n,
            total = total and (math.tointeger(total) or total), message = message } }
        end
      end
    end
  end
  return out
end

-- The calls that ended: their replies (cancelled ones give none).
function mcp.finished(S)
  local out = {}
  for k, p in pairs(S.pending) do
    if p.call:done() then
      S.pending[k] = nil
      S.reader:release()
      if not p.cancelled then
        local r = mcp.call_result(pcall(p.call.result, p.call))
        out[#out + 1] = reply(p.id, p.modern and modern_result(S, r) or r)
      end
    end
  end
  return out
end

-- ------------------------------------------------------------- the stdio loop

-- Writes replies; false once the client has stopped reading.
local function write(msgs)
  for _, m in ipairs(msgs) do
    local ok, text = pcall(core.json_encode, m)
    if not ok and m.method then
      text = nil    -- a notification that cannot be written (a message that is not UTF-8): left out
    elseif not ok then
      text = core.json_encode(fail(m.id, INTERNAL, "the reply cannot be written as JSON: " .. tostring(text)))
    end
    if text and not io.stdout:write(text, "\n") then return false end
  end
  if #msgs > 0 and not io.stdout:flush() then return false end
  return true
end

-- Serves S on fds 0 and 1 until standard input ends and the calls in flight
-- are done (or cancelled). Returns the exit status.
-- A client that stops reading ends the server: its calls are cancelled.
function mcp.serve(S, runtime)
  core.mcp_ignore_sigpipe()
  S.elicit = true    -- stdio: this server can send the client a request
  local reader = S.reader
  local rtfd = runtime:fd()
  local function gone()
    for _, p in pairs(S.pending) do p.call:cancel() end
    io.stderr:write("luma-lua mcp: the client stopped reading: cancelled the calls in flight\n")
    return 1
  end
  while true do
    -- every complete message held
    while true do
      local what, value = reader:next()
      if what == nil then break end
      local replies
      if what == "message" then replies = mcp.handle(S, value)
      elseif what == "too_big" then
        replies = { fail(nil, INVALID, "message longer than mcp_max_message_bytes (" .. MAX_MESSAGE .. " bytes): dropped") }
      else
        replies = { fail(nil, PARSE, "parse error: " .. tostring(value)) }
      end
      if not write(replies) then return gone() end
    end
    local _, wait_ms = runtime:poll()
    if not write(mcp.progress(S)) then return gone() end
    if not write(mcp.finished(S)) then return gone() end
    if reader:eof() and next(S.pending) == nil then return 0 end
    local fds = { rtfd }
    if not reader:eof() then fds[2] = 0 end
    local ready = core.mcp_wait(fds, next(S.pending) and (wait_ms or -1) or -1)
    if ready[0] then
      local n, why = reader:fill()
      if not n then
        io.stderr:write("luma-lua mcp: cannot read standard input: ", why, "\n")
        return 1
      end
    end
  end
end

-- ------------------------------------------------------------- the HTTP loop

local HEADER_MISMATCH = -32020
local NO_SESSION = -32001

-- --http's value: [HOST:]PORT, HOST a numeric address, [v6] or localhost.
-- -> { host, port, loopback } or nil and why.
function mcp.http_address(v)
  local host, port = v:match("^%[([%x:.]+)%]:(%d+)$")
  if not host then host, port = v:match("^([^:]+):(%d+)$") end
  if not host then host, port = "127.0.0.1", v:match("^(%d+)$") end
  port = tonumber(port)
  if not port or port > 65535 then
    return nil, "expected [HOST:]PORT (127.0.0.1:8080, [::1]:8080, or 8080 for 127.0.0.1:8080)"
  end
  if host == "localhost" then host = "127.0.0.1" end
  local loopback = host:match("^127%.") ~= nil or host == "::1"
  return { host = host, port = port, loopback = loopback }
end

-- A new exchange: one POST's state, sharing the server's tables.
local function exchange(S, version)
  return setmetatable({ pending = {}, session = version }, { __index = S })
end

-- The HTTP status of a reply (2026-07-28 says which errors are 400 and 404;
-- the initialize era sends its protocol errors with 200).
local function status_of(r, modern)
  local e = r.error
  if not e then return 200 end
  if e.code == PARSE or e.code == INVALID then return 400 end
  if modern then
    if e.code == NO_METHOD then return 404 end
    if e.code == BAD_PARAMS or (e.code <= HEADER_MISMATCH and e.code >= UNSUPPORTED_VERSION) then return 400 end
  end
  return 200
end

local function accepts(accept, what)
  if not accept then return true end
  accept = accept:lower()
  return accept:find(what, 1, true) or accept:find("*/*", 1, true) or
    accept:find(what:match("^[^/]+") .. "/*", 1, true)
end

-- Serves S over HTTP until SIGTERM or SIGINT: then the calls in flight are
-- cancelled (their clients get no reply), and it returns 0.
function mcp.serve_http(S, runtime, server, listen)
  core.mcp_ignore_sigpipe()
  local stopfd = core.mcp_catch_stop()
  local rtfd = runtime:fd()
  local exchanges = {}       -- HTTP request id -> the exchange whose call runs (or waits for its approval)
  local asking = {}          -- the id of an elicitation sent -> the exchange of the call that waits for it
  local in_session = {}      -- session id -> { key(id) -> exchange }: the calls of each session
  local host = listen.host:find(":", 1, true) and ("[" .. listen.host .. "]") or listen.host
  io.stderr:write("luma-lua mcp: serving http://", host, ":", server:port(), "/mcp\n")
  io.stderr:flush()

  -- (streaming: the reply is the last event of the stream its progress began)
  local function send(req_id, status, body, extra, sse, streaming)
    local headers = extra or {}
    if body then
      local ok, text = pcall(core.json_encode, body)
      if not ok then
        text = core.json_encode(fail(body.id, INTERNAL, "the reply cannot be written as JSON: " .. tostring(text)))
      end
      if streaming then
        server:reply(req_id, 200, headers, text)
      elseif sse then
        headers["Content-Type"] = "text/event-stream"
        headers["Cache-Control"] = "no-cache"
        text = "event: message\ndata: " .. text .. "\n\n"
      else
        headers["Content-Type"] = "application/json"
      end
      server:reply(req_id, status, headers, text)
    else
      server:reply(req_id, status, headers)
    end
  end

  -- One POST: its one message, in the era it speaks.
  local function post(req)
    local h = req.headers
    local ctype = (h["content-type"] or ""):lower():match("^%s*([^;%s]+)")
    if ctype ~= "application/json" then
      return send(req.id, 415, fail(nil, INVALID, "Content-Type must be application/json, not " ..
        (h["content-type"] and ("'" .. h["content-type"] .. "'") or "absent")))
    end
    local json_ok, sse_ok = accepts(h.accept, "application/json"), accepts(h.accept, "text/event-stream")
    if not json_ok and not sse_ok then
      return send(req.id, 406, fail(nil, INVALID, "Accept must list application/json and text/event-stream"))
    end
    local sse = not json_ok
    if req.bad_json then return send(req.id, 400, fail(nil, PARSE, "parse error: " .. req.bad_json), nil, sse) end
    local msg = req.message
    if msg == nil then
      return send(req.id, 400, fail(nil, INVALID, "the body is empty: send one JSON-RPC message"), nil, sse)
    end
    local is_object = type(msg) == "table" and getmetatable(msg) ~= array_mt
    local id = is_object and msg.id or nil
    local params = is_object and type(msg.params) == "table" and msg.params or nil
    local meta = params and type(params._meta) == "table" and params._meta or nil
    local modern_version = nil
    if meta then modern_version = meta[META_VERSION] end
    local X, extra = nil, {}
    if modern_version ~= nil then
      -- 2026-07-28: the headers repeat what routes the body
      local function mismatch(name, want)
        local got = h[name:lower()]
        if got ~= want then
          send(req.id, 400, fail(id, HEADER_MISMATCH, name .. " header " ..
            (got and ("'" .. got .. "'") or "absent") .. " does not match the body's " .. text_of(want)), nil, sse)
          return true
        end
      end
      if mismatch("MCP-Protocol-Version", modern_version) then return end
      if type(msg.method) == "string" and mismatch("Mcp-Method", msg.method) then return end
      if msg.method == "tools/call" and type(params.name) == "string" and mismatch("Mcp-Name", params.name) then
        return
      end
      X = exchange(S, nil)
    elseif is_object and msg.method == "initialize" then
      X = exchange(S, nil)
    elseif not is_object then
      X = exchange(S, nil)     -- a batch, or not an object: mcp.handle says which
    else
      local sid = h["mcp-session-id"]
      if not sid then
        return send(req.id, 400, fail(id, BAD_PARAMS,
          "no protocol version and no Mcp-Session-Id header: send initialize first (" .. table.concat(LEGACY, ", ") ..
          "), or give params._meta[\"" .. META_VERSION .. "\"] = \"" .. MODERN[1] .. "\" on each request",
          { supported = array { table.unpack(SUPPORTED) } }), nil, sse)
      end
      local version, client, elicitation = server:session(sid)
      if not version then
        return send(req.id, 404, fail(id, NO_SESSION,
          "session not found (it ended or expired): send initialize again"), nil, sse)
      end
      local asked = h["mcp-protocol-version"]
      if asked and asked ~= version then
        return send(req.id, 400, fail(id, INVALID,
          "MCP-Protocol-Version " .. asked .. " is not this session's (" .. version .. ")"), nil, sse)
      end
      X = exchange(S, version)
      X.sid = sid
      X.client = client
      -- an elicitation goes on the call's reply, which must be able to be a stream
      X.elicitation, X.elicit = elicitation, sse_ok
      if id ~= nil and msg.method == nil then
        -- a response: to an elicitation of a call that waits for it, in this session
        local W = asking[id]
        if W and W.sid == sid then
          asking[id] = nil
          W.http.asking = nil
          local out = mcp.handle(W, msg)
          if out[1] then W.http.answer = out[1] end
          return send(req.id, 202)
        end
      end
      local calls = in_session[sid]
      if id ~= nil and calls and calls[key(id)] then
        return send(req.id, 200, fail(id, INVALID, "id " .. text_of(id) ..
          " is already used by a request in flight"), nil, sse)
      end
      if id == nil and msg.method == "notifications/cancelled" and params and params.requestId ~= nil then
        local other = calls and calls[key(params.requestId)]
        if other then mcp.handle(other, msg) end
        return send(req.id, 202)
      end
    end
    local replies = mcp.handle(X, msg)
    if is_object and msg.method == "initialize" and replies[1] and replies[1].result then
      extra["Mcp-Session-Id"] = server:session_new(X.session, X.client, X.elicitation)
    end
    local ask = replies[1] and replies[1].method and replies[1]
    if ask then
      -- the call waits for the client's answer to the elicitation, sent as
      -- the first event of its reply
      X.http = { sse = sse, sse_ok = true, modern = false, keys = {}, asking = ask.id, asking_for = id,
        streaming = server:stream(req.id) }
      server:event(req.id, core.json_encode(ask))
      asking[ask.id] = X
      exchanges[req.id] = X
      in_session[X.sid] = in_session[X.sid] or {}
      in_session[X.sid][key(id)] = X
      X.http.keys[1] = key(id)
      return
    end
    if next(X.pending) then
      X.http = { sse = sse, sse_ok = sse_ok, modern = modern_version ~= nil, keys = {} }
      exchanges[req.id] = X
      if X.sid then
        in_session[X.sid] = in_session[X.sid] or {}
        for k in pairs(X.pending) do
          in_session[X.sid][k] = X
          X.http.keys[#X.http.keys + 1] = k
        end
      end
      return
    end
    if replies[1] then return send(req.id, status_of(replies[1], modern_version ~= nil), replies[1], extra, sse) end
    return send(req.id, 202)   -- a notification, or a response
  end

  local function request(req)
    local path = req.target:match("^[^?#]*")
    if path ~= "/mcp" then
      return send(req.id, 404, fail(nil, INVALID, "no MCP endpoint at " .. path .. ": it is /mcp"))
    end
    if req.method == "POST" then return post(req) end
    local modern = contains(MODERN, req.headers["mcp-protocol-version"])
    if req.method == "DELETE" and not modern then
      local sid = req.headers["mcp-session-id"]
      if not sid then
        return send(req.id, 400, fail(nil, INVALID, "DELETE ends a session: it needs an Mcp-Session-Id header"))
      end
      if not server:session_end(sid) then
        return send(req.id, 404, fail(nil, NO_SESSION, "session not found (it ended or expired)"))
      end
      for _, X in pairs(in_session[sid] or {}) do
        for _, p in pairs(X.pending) do p.call:cancel() p.cancelled = true end
      end
      return send(req.id, 204)
    end
    -- GET would open a stream of the server's own messages: it sends none;
    -- 2026-07-28 has no session to DELETE
    if modern then
      return send(req.id, 405, fail(nil, INVALID, req.method .. " is not served: POST one JSON-RPC message " ..
        "(" .. MODERN[1] .. " has no sessions)"), { Allow = "POST" })
    end
    return send(req.id, 405, fail(nil, INVALID, req.method .. " is not served: POST one JSON-RPC message " ..
      "(DELETE ends a session)"), { Allow = "POST, DELETE" })
  end

  -- the calls in flight cancelled; waits (a while) for them to end, so that
  -- no handler runs on as the process exits; the server closed
  local function stop(signal)
    local n = 0
    for _, X in pairs(exchanges) do
      for _, p in pairs(X.pending) do p.call:cancel() n = n + 1 end
    end
    local deadline = core.monotonic_ms() + core.limits.mcp_http_request_ms
    while next(exchanges) and core.monotonic_ms() < deadline do
      local _, ms = runtime:poll()
      for id, X in pairs(exchanges) do
        mcp.finished(X)
        if next(X.pending) == nil then exchanges[id] = nil end
      end
      if next(exchanges) then core.mcp_wait({ rtfd }, ms or 100) end
    end
    server:close()
    io.stderr:write("luma-lua mcp: stopped by ", signal, n > 0 and (": cancelled " .. n .. " calls in flight") or "", "\n")
    return 0
  end

  local wait_ms
  while true do
    local ready = server:wait(next(exchanges) and (wait_ms or -1) or -1, { rtfd, stopfd })
    if ready[stopfd] then
      local signal = core.mcp_stop_signal(stopfd)
      if signal then return stop(signal) end
    end
    while true do
      local req = server:next()
      if not req then break end
      -- a fault of this code answers its request, and the others go on
      local ok, why = pcall(request, req)
      if not ok then
        io.stderr:write("luma-lua mcp: internal error: ", tostring(why), "\n")
        send(req.id, 500, fail(nil, INTERNAL, "internal error: " .. tostring(why)))
      end
    end
    while true do   -- a client that left: its call stops (2026-07-28's way to cancel)
      local id = server:gone()
      if not id then break end
      local X = exchanges[id]
      if X then
        X.http.gone = true
        for _, p in pairs(X.pending) do p.call:cancel() p.cancelled = true end
        if X.http.asking then   -- its approval is asked no more
          mcp.handle(X, { jsonrpc = "2.0", method = "notifications/cancelled", params = { requestId = X.http.asking_for } })
          asking[X.http.asking] = nil
          X.http.asking = nil
        end
      end
    end
    local _, ms = runtime:poll()
    wait_ms = ms
    -- progress of a call whose client takes an event stream: its reply
    -- becomes one, the notifications its events, the reply the last
    for id, X in pairs(exchanges) do
      if X.http.sse_ok and not X.http.gone then
        for _, note in ipairs(mcp.progress(X)) do
          if not X.http.streaming then X.http.streaming = server:stream(id) end
          if X.http.streaming then server:event(id, core.json_encode(note)) end
        end
      end
    end
    for id, X in pairs(exchanges) do
      local out = mcp.finished(X)
      if X.http.answer then out[1], X.http.answer = X.http.answer, nil end
      if next(X.pending) == nil and not X.http.asking then
        exchanges[id] = nil
        local calls = X.sid and in_session[X.sid]
        if calls then
          for _, k in ipairs(X.http.keys) do calls[k] = nil end
          if next(calls) == nil then in_session[X.sid] = nil end
        end
        if not X.http.gone then
          if out[1] then send(id, status_of(out[1], X.http.modern), out[1], nil, X.http.sse, X.http.streaming)
          else send(id, 204) end   -- cancelled: no reply is sent for it (a stream ends with no event)
        end
      end
    end
  end
end

-- luma-lua mcp PROGRAM [--agent A] [--config FILE] [--tool-module FILE]... [--trace FILE]
--   [--http [HOST:]PORT [--token-env NAME] [--allow-origin ORIGIN]...]
-- Returns the exit status; `err` writes a line to stderr.
function mcp.main(args, err, print_load_error)
  local path, agent, config, modules, trace = nil, nil, nil, {}, nil
  local http, token_env, origins = nil, nil, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--agent" or a == "--config" or a == "--tool-module" or a == "--http" or a == "--token-env"
        or a == "--allow-origin" or a == "--trace" then
      local v = args[i + 1]
      if not v then err("luma-lua: " .. a .. " needs a value") return 2 end
      if a == "--agent" then agent = v elseif a == "--config" then config = v
      elseif a == "--http" then http = v elseif a == "--token-env" then token_env = v
      elseif a == "--allow-origin" then origins[#origins + 1] = v
      elseif a == "--trace" then trace = v
      else modules[#modules + 1] = v end
      i = i + 2
    elseif a:sub(1, 1) == "-" then
      err("luma-lua: mcp: unknown option '" .. a .. "'")
      return 2
    elseif path then
      err("luma-lua: mcp needs one PROGRAM")
      return 2
    else
      path = a
      i = i + 1
    end
  end
  if not path then err("luma-lua: mcp needs one PROGRAM") return 2 end
  if not http and (token_env or #origins > 0) then
    err("luma-lua: mcp: " .. (token_env and "--token-env" or "--allow-origin") .. " goes with --http")
    return 2
  end
  local listen
  if http then
    local why
    listen, why = mcp.http_address(http)
    if not listen then err("luma-lua: mcp: --http " .. http .. ": " .. why) return 2 end
    -- the token is read through the lookup (the environment), never given
    -- on the command line, where any user of the machine could read it
    if token_env then
      listen.token = os.getenv(token_env)
      if not listen.token or listen.token == "" then
        err("luma-lua: mcp: --token-env " .. token_env .. ": the variable is not set, or empty")
        return 2
      end
    elseif not listen.loopback then
      err("luma-lua: mcp: --http " .. http .. " listens beyond loopback: give --token-env NAME, " ..
        "so that only clients with the token can call the tools")
      return 2
    end
    listen.origins = origins
  end
  -- a tools/call runs on this loop's thread for its first slice (20 µs of
  -- Lua): a handler that does not wait is done when program:start
  -- returns, with no hand-off to a worker; one that waits, or computes
  -- longer, goes on on the pool (README: luma-lua mcp)
  local runtime = luma.runtime { inline = "slice" }
  -- stdin is the protocol: approval is never asked at the terminal; a
  -- write tool of an agent with tool_policy "approval" runs when
  -- LUMA_APPROVED_TOOLS lists it, or when the client's user accepted it
  -- (elicitation: tools/call asks before it starts the call)
  local approve = function(tool)
    return approval.listed(os.getenv("LUMA_APPROVED_TOOLS"), tool) or mcp.granted(tool)
  end
  local ok, program = pcall(luma.load, path, {
    runtime = runtime, config = config, tool_modules = modules, approve = approve, trace = trace,
  })
  if not ok then
    if luma.is_error(program) then print_load_error(program) return 2 end
    error(program, 0)
  end
  local network
  local cfg = (require "luma.config")
  local cpath = config or cfg.find(path)
  if cpath then
    local c = cfg.read(cpath)
    local pol = c and c.tool_module_policy
    if pol and pol.sandbox == "strict" then network = pol.allow_network == true end
  end
  local tools, why = mcp.tools(program, agent, network)
  if not tools then err("Error: " .. why) return 2 end
  local check_ok, check_err = pcall(program.check_registry, program)
  if not check_ok then
    if luma.is_error(check_err) then print_load_error(check_err) return 2 end
    error(check_err, 0)
  end
  if listen then
    local server, why = core.mcp_http(listen)
    if not server then err("luma-lua: mcp: " .. why) return 1 end
    return mcp.serve_http(mcp.new(program, server, { agent = agent, network = network }), runtime, server, listen)
  end
  local reader = core.mcp_reader(0, MAX_MESSAGE)
  return mcp.serve(mcp.new(program, reader, { agent = agent, network = network }), runtime)
end

return mcp
