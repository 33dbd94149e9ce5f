-- mcp_server: MCP servers as tool sources for a program's agents, over
-- stdio (command) or Streamable HTTP (url). luma.load starts or reaches each
-- server a program declares, agrees on a protocol version with it, lists its
-- tools and gives them to the compiler, which makes them tools of the
-- program (core/program_mcp.c): their JSON Schemas become the program's
-- types. Each such tool's handler, registered in the host, is a tools/call
-- to its server, so a call passes the one pipeline (policy, approval,
-- validation of input and output, timeout, retries, breaker, telemetry) as
-- any other.
--
-- The versions: over stdio, `initialize` (the initialize era: 2025-11-25
-- down to 2024-11-05). Over HTTP, `server/discover` first, with the
-- 2026-07-28 `_meta`: a server that lists 2026-07-28 is spoken to
-- statelessly (each request its own `_meta` and headers); one that refuses
-- it in any way (a JSON-RPC error, a 4xx) is asked `initialize`, and its
-- `Mcp-Session-Id` is sent back on each later request.
--
-- The process, its pipes, the HTTP exchanges and every wait are C
-- (core/mcpclient.c, core/mcpremote.c): a server that hangs costs the time
-- its call was given, one that floods or writes what is not JSON-RPC is
-- stopped, one that died (or whose session ended) is started again on the
-- next call; each is MCP_SERVER_FAILED naming the server (and its URL). A
-- url server's token and headers stay in C: no message, log or journal
-- holds them. What a server sends is data: a tool's description or result
-- reaches the model as such, never as an instruction to the runtime. A
-- server that says its tools changed (notifications/tools/list_changed) is
-- listed again before its next call: the same tools go on, other ones are
-- refused until the program is loaded again (its tools and their types were
-- compiled from the first listing).
local core = require "luma.core"

local mcpclient = {}

-- newest first; the tools methods are the same in each
local VERSIONS = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" }
local MODERN = "2026-07-28"
local META = "io.modelcontextprotocol/"
local LIM = core.limits
local array_mt = core.array_mt

local function contains(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

local Server = {}
Server.__index = Server

-- A server of a declaration (core.mcp_servers' row), not started yet;
-- lookup reads its token's variable.
function mcpclient.server(decl, chunk, lookup)
  return setmetatable({ decl = decl, chunk = chunk, lookup = lookup or os.getenv, next_id = 0, stale = false }, Server)
end

-- A URL as messages show it: without user information or query, which may
-- hold a secret.
local function shown_url(url)
  local scheme, rest = url:match("^(https?://)(.*)$")
  if not scheme then return url end
  rest = rest:gsub("^[^/?#]*@", ""):gsub("[?#].*$", "")
  return scheme .. rest
end

function Server:where()
  return self.chunk .. ":" .. self.decl.line .. ":" .. self.decl.col
end

function Server:stop(grace_ms)
  if self.proc then
    local proc = self.proc
    self.proc = nil
    return proc:stop(grace_ms)
  end
  if self.remote then
    local remote, session = self.remote, self.session
    self.remote, self.session = nil, nil
    if self.stream then
      self.stream:close()
      self.stream = nil
    end
    if session and grace_ms ~= 0 then
      -- the session ends (best effort: a server that does not answer soon is left to expire
      -- it; one that failed is left to, at once)
      local ex = remote:post("DELETE", nil, { ["Mcp-Session-Id"] = session, ["MCP-Protocol-Version"] = self.version },
        math.min(grace_ms or LIM.mcp_stop_grace_ms, LIM.mcp_stop_grace_ms))
      if ex then
        ex:head(LIM.mcp_stop_grace_ms)
        ex:close()
      end
    end
    remote:close()
  end
end

-- The server is stopped (it is not trusted to be in step any more) and the
-- error says why; it starts again on the next call.
function Server:fail(why)
  local ended = self:stop(0)
  local url = self.decl.url and shown_url(self.decl.url)
  return core.error {
    code = "MCP_SERVER_FAILED", retryable = true,
    message = "mcp_server '" .. self.decl.name .. "'" .. (url and (" (" .. url .. ")") or "") .. " " .. why ..
      (ended and ended ~= "still running" and (" (it " .. ended .. ")") or "") .. ".",
    details = { server = self.decl.name, url = url },
  }
end

local function left_of(deadline)
  return math.max(0, math.ceil(deadline - core.monotonic_ms()))
end

-- The headers of an HTTP request carrying `message`: the session's, and
-- in the 2026-07-28 era the ones that repeat the body.
local function http_headers(self, message)
  local h = { ["Content-Type"] = "application/json", Accept = "application/json, text/event-stream" }
  if self.session then h["Mcp-Session-Id"] = self.session end
  if self.version and message.method ~= "initialize" then h["MCP-Protocol-Version"] = self.version end
  if self.version == MODERN and message.method then
    h["Mcp-Method"] = message.method
    if message.method == "tools/call" then h["Mcp-Name"] = message.params.name end
  end
  return h
end

-- What an HTTP answer with status `status` that ended with no message of
-- ours says.
local function http_status(status, text)
  return "HTTP " .. tostring(status) .. (text and text ~= "" and (": " .. text:gsub("%s+", " ")) or "")
end

-- POSTs message; the exchange and its status and headers, or nil and an error.
local function post(self, message, deadline)
  local ex, why = self.remote:post("POST", core.json_encode(message), http_headers(self, message), left_of(deadline))
  if not ex then return nil, self:fail("cannot be sent a request: " .. tostring(why)) end
  local status, head, why = ex:head(left_of(deadline))
  if not status then
    ex:close()
    local what = message.method or "a reply"
    return nil, self:fail(head == "timeout" and ("did not answer " .. what .. " in time") or ("cannot be reached: " .. tostring(why)))
  end
  return ex, status, head
end

-- A notification or a reply of ours: true, or nil and an error.
local function send(self, message, deadline)
  if self.remote then
    local ex, status, head = post(self, message, deadline)
    if not ex then return nil, status end
    ex:close()
    if status >= 200 and status < 300 then return true end
    return nil, self:fail("refused " .. (message.method or "a reply") .. " with " .. http_status(status, head["content-type"] ~= nil and "" or nil))
  end
  local ok, kind, why = self.proc:send(core.json_encode(message), left_of(deadline), message.method ~= nil and message.id ~= nil)
  if ok then return true end
  return nil, self:fail(kind == "timeout" and "did not read its input in time" or ("cannot be written to: " .. tostring(why)))
end

-- One message the server sent while we wait for the answer to `id`: the
-- answer's result (or nil, nil, rpc_error) when it is the answer; nothing
-- when it is something else, dealt with; nil and an error when it breaks
-- the protocol.
local function take(self, v, id, method, deadline)
  if type(v) ~= "table" or v.jsonrpc ~= "2.0" then
    return false, nil, self:fail("sent a message that is not JSON-RPC 2.0")
  end
  if v.method == nil and v.id == id then
    if type(v.error) == "table" then return true, nil, nil, v.error end
    if type(v.result) ~= "table" then return false, nil, self:fail("answered " .. method .. " without a result object") end
    return true, v.result
  elseif type(v.method) == "string" and v.id ~= nil then
    -- a request of the server's: ping is answered, the rest (sampling,
    -- elicitation, roots) is a capability this client does not declare
    local reply = v.method == "ping" and { jsonrpc = "2.0", id = v.id, result = {} }
      or { jsonrpc = "2.0", id = v.id, error = { code = -32601, message = "luma-lua does not offer " .. v.method } }
    local ok, err = send(self, reply, deadline)
    if not ok then return false, nil, err end
  elseif type(v.method) == "string" then
    if v.method == "notifications/tools/list_changed" then self.stale = true end
  elseif v.id == nil then
    return false, nil, self:fail("sent a message that is neither a request, a notification nor an answer")
  end
  -- an answer to another id: not one of ours in flight; skipped
  return false
end

-- The answer to a request over HTTP: the messages of the exchange (one
-- JSON body, or the events of a stream) until ours.
local function http_request(self, message, deadline)
  local method = message.method
  local ex, status, head = post(self, message, deadline)
  if not ex then return nil, status end
  if method == "initialize" and head["mcp-session-id"] then self.session = head["mcp-session-id"] end
  local ok_status = status >= 200 and status < 300
  while true do
    local kind, v, start = ex:receive(left_of(deadline))
    if kind == "message" then
      if not ok_status and type(v) == "table" and v.id == core.null and type(v.error) == "table" then
        -- an error the server could not tie to a request (the SDKs' 400s): ours
        v.id = message.id
      end
      local answered, result, err, rpc = take(self, v, message.id, method, deadline)
      if answered then
        ex:close()
        if rpc then return nil, nil, rpc, status end
        if not ok_status then
          return nil, self:fail("answered " .. method .. " with " .. http_status(status))
        end
        return result
      elseif err then
        ex:close()
        return nil, err
      end
    else
      ex:close()
      if not ok_status and status == 404 and self.session then
        return nil, self:fail("ended its session (HTTP 404): it is initialized again on the next call")
      elseif not ok_status then
        return nil, self:fail("answered " .. method .. " with " .. http_status(status, kind == "bad_json" and start or nil))
      elseif kind == "eof" then
        return nil, self:fail("ended its answer to " .. method .. " without it")
      elseif kind == "bad_json" then
        return nil, self:fail("sent a message that is not JSON (" .. tostring(v) .. ")")
      elseif kind == "too_big" or kind == "flood" then
        return nil, self:fail("sent " .. tostring(v) .. " to " .. method)
      elseif kind == "timeout" then
        return nil, self:fail("did not answer " .. method .. " in time")
      else
        return nil, self:fail("cannot be read: " .. tostring(v))
      end
    end
  end
end

-- A request and its answer: the result table, or nil and an error. An
-- answer that is a JSON-RPC error is returned as `nil, nil, rpc_error`.
function Server:request(method, params, deadline)
  self.next_id = self.next_id + 1
  local id = self.next_id
  local message = { jsonrpc = "2.0", id = id, method = method, params = params }
  if self.version == MODERN then
    params._meta = {
      [META .. "protocolVersion"] = MODERN,
      [META .. "clientCapabilities"] = {},
      [META .. "clientInfo"] = { name = "luma-lua", version = core.version },
    }
  end
  if self.remote then return http_request(self, message, deadline) end
  local ok, err = send(self, message, deadline)
  if not ok then return nil, err end
  while true do
    local left = math.ceil(deadline - core.monotonic_ms())
    if left <= 0 then return nil, self:fail("did not answer " .. method .. " in time") end
    local kind, v = self.proc:receive(left)
    if kind == "message" then
      local answered, result, failure, rpc = take(self, v, id, method, deadline)
      if answered then return result, nil, rpc end
      if failure then return nil, failure end
    elseif kind == "bad_json" then
      return nil, self:fail("sent a line that is not JSON (" .. tostring(v) .. ")")
    elseif kind == "too_big" then
      return nil, self:fail("sent " .. tostring(v))
    elseif kind == "eof" then
      return nil, self:fail("closed its output before answering " .. method)
    elseif kind == "timeout" then
      return nil, self:fail("did not answer " .. method .. " in time")
    elseif kind == "flood" then
      return nil, self:fail("sent " .. tostring(v) .. " to " .. method)
    else
      return nil, self:fail("cannot be read: " .. tostring(v))
    end
  end
end

local function rpc_text(e)
  return "[" .. tostring(e.code) .. "] " .. tostring(e.message)
end

-- Starts the process and says initialize; true, or nil and an error.
function Server:start(deadline)
  local d = self.decl
  self.next_id, self.version, self.session = 0, nil, nil
  if d.url then return self:reach(deadline) end
  local argv = { d.command }
  for _, a in ipairs(d.args or {}) do argv[#argv + 1] = a end
  -- in the program's folder, where its relative paths are
  local proc, why = core.mcp_spawn(argv, self.chunk:match("^(.*)/[^/]*$") or ".")
  if not proc then return nil, self:fail("could not start: " .. why) end
  self.proc = proc
  return self:initialize(deadline)
end

-- The initialize era's handshake: true, or nil and an error.
function Server:initialize(deadline)
  local result, err, rpc = self:request("initialize", {
    protocolVersion = VERSIONS[1],
    capabilities = {},
    clientInfo = { name = "luma-lua", version = core.version },
  }, deadline)
  if rpc then return nil, self:fail("refused initialize: " .. rpc_text(rpc)) end
  if not result then return nil, err end
  if not contains(VERSIONS, result.protocolVersion) then
    return nil, self:fail("speaks protocol version " .. tostring(result.protocolVersion) ..
      ", and luma-lua speaks " .. table.concat(VERSIONS, ", ") .. " after initialize")
  end
  self.version = result.protocolVersion
  local ok, err2 = send(self, { jsonrpc = "2.0", method = "notifications/initialized" }, deadline)
  if ok then self:open_stream() end
  return ok, err2
end

-- A url server: its headers (the token's from its variable, through the
-- lookup) kept in C, then the version agreed: server/discover in the
-- 2026-07-28 era, and initialize when the server refuses it.
function Server:reach(deadline)
  local d = self.decl
  local headers = {}
  for _, h in ipairs(d.headers or {}) do headers[#headers + 1] = { h[1], h[2] } end
  if d.token then
    local token = self.lookup(d.token)
    if type(token) ~= "string" or token == "" then
      return nil, self:fail("needs its bearer token in the variable " .. d.token .. ", which is not set")
    end
    if token:find("[%c]") then return nil, self:fail("has a token (in " .. d.token .. ") that holds a control character") end
    headers[#headers + 1] = { "Authorization", "Bearer " .. token }
  end
  self.remote = core.mcp_remote(d.url, headers)
  self.version = MODERN
  local result, err, rpc, status = self:request("server/discover", {}, deadline)
  if result then
    if type(result.supportedVersions) == "table" and contains(result.supportedVersions, MODERN) then return true end
    return nil, self:fail("answered server/discover without listing " .. MODERN .. " in supportedVersions")
  end
  if not rpc then
    -- a 4xx that says nothing JSON-RPC (an initialize-era server that wants
    -- a session first) is a refusal too; 401, 403 and 5xx are not
    local unreachable = not self.remote
    if unreachable then
      local st = err.message:match("with HTTP (%d+)")
      if not st or st == "401" or st == "403" or st:sub(1, 1) ~= "4" then return nil, err end
      self.remote = core.mcp_remote(d.url, headers)
    end
  elseif status == 401 or status == 403 then
    return nil, self:fail("refused server/discover with HTTP " .. status .. ": " .. rpc_text(rpc))
  end
  self.version, self.session = nil, nil
  return self:initialize(deadline)
end

-- Its tools, every page: a list of { name, description, inputSchema,
-- outputSchema }, or nil and an error. Each page adds a tool, so the pages
-- are bounded as the tools are (mcp_server_tools).
function Server:list(deadline)
  local tools, cursor = {}, nil
  while true do
    local result, err, rpc = self:request("tools/list", cursor and { cursor = cursor } or {}, deadline)
    if rpc then return nil, self:fail("refused tools/list: " .. rpc_text(rpc)) end
    if not result then return nil, err end
    if type(result.tools) ~= "table" then return nil, self:fail("answered tools/list without a tools list") end
    local before = #tools
    for _, t in ipairs(result.tools) do
      if type(t) ~= "table" or type(t.name) ~= "string" then
        return nil, self:fail("listed a tool without a name")
      end
      if #tools >= LIM.mcp_server_tools then
        return nil, self:fail("lists more than " .. LIM.mcp_server_tools .. " tools (mcp_server_tools)")
      end
      tools[#tools + 1] = {
        name = t.name,
        description = type(t.description) == "string" and t.description or nil,
        inputSchema = t.inputSchema,
        outputSchema = type(t.outputSchema) == "table" and t.outputSchema or nil,
      }
    end
    cursor = result.nextCursor
    if type(cursor) ~= "string" then
      self.stale = false
      return tools
    end
    if #tools == before then return nil, self:fail("answered tools/list with a page of no tools and a next cursor") end
  end
end

-- Starts the server and lists its tools, for loading: the tools, or raises
-- MCP_SERVER_FAILED naming the declaration (file:line:col).
function Server:open()
  local deadline = core.monotonic_ms() + self.decl.start_timeout
  local ok, err = self:start(deadline)
  local tools
  if ok then tools, err = self:list(deadline) end
  if not tools then
    err.message = self:where() .. ": " .. err.message
    error(err, 0)
  end
  self.listed = core.json_encode(tools)
  return tools
end

local function changed_error(self)
  return core.error {
    code = "MCP_SERVER_FAILED", retryable = false,
    message = "mcp_server '" .. self.decl.name .. "' changed its tools since the program was loaded " ..
      "(notifications/tools/list_changed); load the program again to use them.",
    details = { server = self.decl.name },
  }
end

-- After notifications/tools/list_changed: the tools listed again. The
-- program was compiled with the first listing, so a server whose tools
-- changed is refused until the program is loaded again (or it lists them
-- as they were); one that lists the same tools goes on. true, or nil and
-- an error.
function Server:relist(deadline)
  self.relisted_at = core.monotonic_ms()
  local tools, err = self:list(deadline)
  if not tools then return nil, err end
  self.changed = core.json_encode(tools) ~= self.listed
  if not self.changed then return true end
  return nil, changed_error(self)
end

-- Before a call: the tools listed again when the server said they changed,
-- at most once per mcp_relist_interval_ms (the first time at once): the
-- notifications in between are one listing, and a server that says it
-- with every answer costs a tools/list a second at most. Meanwhile calls
-- go on with the tools listed last (refused when those had changed).
function Server:check_tools(deadline)
  if not (self.stale or self.changed) then return true end
  if not self.relisted_at or core.monotonic_ms() - self.relisted_at >= self.decl.relist_interval then
    return self:relist(deadline)
  end
  if self.changed then return nil, changed_error(self) end
  return true
end

-- A session's own stream (GET, the initialize era over HTTP), where a
-- server sends what belongs to no request: notifications/tools/list_changed
-- among them. Opened after initialize; read without waiting before each
-- call. A server that does not offer one (405) is not asked again.
function Server:open_stream()
  if not (self.remote and self.session) then return end
  self.stream = self.remote:post("GET", nil, { Accept = "text/event-stream", ["Mcp-Session-Id"] = self.session,
    ["MCP-Protocol-Version"] = self.version }, LIM.timeout_cap_ms)
  self.streaming = false
end

-- What the session's stream holds now: nil, or an error when the server
-- broke the protocol there (it is stopped then).
function Server:drain(deadline)
  local ex = self.stream
  if not ex then return nil end
  local function drop()
    ex:close()
    self.stream = nil
  end
  if not self.streaming then
    local status, kind = ex:head(0)
    if not status then
      if kind ~= "timeout" then drop() end
      return nil
    end
    if status < 200 or status >= 300 then return drop() end
    self.streaming = true
  end
  local nobody = {}   -- no answer is waited for on this stream
  while self.stream do
    local kind, v = ex:receive(0)
    if kind == "timeout" then return nil end
    if kind ~= "message" then return drop() end
    local _, _, err = take(self, v, nobody, "its stream", deadline)
    if err then return err end
  end
end

local function text_of(content)
  local parts = {}
  for _, block in ipairs(type(content) == "table" and content or {}) do
    if type(block) == "table" and block.type == "text" and type(block.text) == "string" then parts[#parts + 1] = block.text end
  end
  return table.concat(parts, "\n")
end

-- The handler of the program's tool `t` (a program:declaration row): a
-- tools/call, within what is left of the call's deadline.
function Server:handler(t)
  local structured = t.output ~= "__mcp_content"
  return function(input, signal)
    local deadline = core.monotonic_ms() + math.max(1, signal.timeout_ms or self.decl.start_timeout)
    if self.proc and not self.proc:alive() then self:stop(0) end
    if not self.proc and not self.remote then
      -- it exited, failed or was never started here: started again
      local ok, err = self:start(deadline)
      if not ok then error(err, 0) end
    end
    local broke = self:drain(deadline)
    if broke then error(broke, 0) end
    local same, changed = self:check_tools(deadline)
    if not same then error(changed, 0) end
    local result, err, rpc = self:request("tools/call", { name = t.mcp_tool, arguments = input }, deadline)
    if rpc then
      error(core.error { code = "MCP_TOOL_ERROR", retryable = true,
        message = "mcp_server '" .. self.decl.name .. "' refused tools/call of '" .. t.mcp_tool .. "': " .. rpc_text(rpc),
        details = { server = self.decl.name, tool = t.mcp_tool, rpc = rpc } }, 0)
    end
    if not result then error(err, 0) end
    if result.resultType ~= nil and result.resultType ~= "complete" then
      -- input_required: this client declares no capability to answer with
      error(self:fail("answered tools/call of '" .. t.mcp_tool .. "' with resultType " .. tostring(result.resultType) ..
        ", which luma-lua cannot fulfil (it declares no client capabilities)"), 0)
    end
    if result.isError == true then
      local text = text_of(result.content)
      error(core.error { code = "MCP_TOOL_ERROR", retryable = true,
        message = text ~= "" and text or ("mcp_server '" .. self.decl.name .. "' tool '" .. t.mcp_tool .. "' failed"),
        details = { server = self.decl.name, tool = t.mcp_tool, content = result.content } }, 0)
    end
    if structured then return result.structuredContent end
    return { content = type(result.content) == "table" and result.content or setmetatable({}, array_mt) }
  end
end

-- For luma.load: the program's mcp_servers started and their tools listed
-- (opts.mcp of core.compile), and the servers by name; nothing when the
-- program declares none.
function mcpclient.open(source, chunk, opts)
  if not source:find("mcp_server", 1, true) then return nil, nil end
  local listings, servers = {}, {}
  local ok, err = pcall(function()
    for _, decl in ipairs(core.mcp_servers(source, chunk, { limits = opts.limits })) do
      local s = mcpclient.server(decl, chunk, opts.lookup)
      servers[decl.name] = s
      listings[decl.name] = s:open()
    end
  end)
  if not ok then
    mcpclient.close(servers)
    error(err, 0)
  end
  return listings, servers
end

-- Registers the handlers of the program's tools of these servers.
function mcpclient.register(program, servers)
  for _, name in ipairs(program:declarations().tools) do
    local t = program:declaration(name)
    local s = t.mcp_server and servers[t.mcp_server]
    if s then program:register(name, s:handler(t)) end
  end
end

function mcpclient.describe(servers)
  local list = {}
  for name, s in pairs(servers or {}) do
    list[#list + 1] = { name = name, transport = s.decl.url and "http" or "stdio", protocol_version = s.version }
  end
  table.sort(list, function(a, b) return a.name < b.name end)
  return list
end

function mcpclient.close(servers)
  for _, s in pairs(servers or {}) do s:stop() end
end

return mcpclient
