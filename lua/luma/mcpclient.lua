-- mcp_server: MCP servers as tool sources for a program's agents, over
-- stdio. luma.load starts each server a program declares, says `initialize`
-- (the initialize era: 2025-11-25 down to 2024-11-05), lists its tools and
-- gives them to the compiler, which makes them tools of the program
-- (core/program_mcp.c): their JSON Schemas become the program's types. Each
-- such tool's handler, registered in the host, is a tools/call to its
-- server, so a call passes the one pipeline (policy, approval, validation of
-- input and output, timeout, retries, breaker, telemetry) as any other.
--
-- The process, its pipes and every wait are C (core/mcpclient.c): a server
-- that hangs costs the time its call was given, one that floods or writes
-- what is not JSON-RPC is stopped, one that died is started again on the
-- next call; each is MCP_SERVER_FAILED. What a server sends is data: a
-- tool's description or result reaches the model as such, never as an
-- instruction to the runtime. A server that says its tools changed
-- (notifications/tools/list_changed) is listed again before its next call:
-- the same tools go on, other ones are refused until the program is loaded
-- again (its tools and their types were compiled from the first listing).
local core = require "luma.core"

local mcpclient = {}

-- newest first; the tools methods are the same in each
local VERSIONS = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" }
local LIM = core.limits
local array_mt = core.array_mt

local function contains(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

local Server = {}
Server.__index = Server

-- A server of a declaration (core.mcp_servers' row), not started yet.
function mcpclient.server(decl, chunk)
  return setmetatable({ decl = decl, chunk = chunk, next_id = 0, stale = false }, Server)
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
end

-- The server is stopped (it is not trusted to be in step any more) and the
-- error says why; it starts again on the next call.
function Server:fail(why)
  local ended = self.proc and self:stop(0)
  return core.error {
    code = "MCP_SERVER_FAILED", retryable = true,
    message = "mcp_server '" .. self.decl.name .. "' " .. why .. (ended and ended ~= "still running" and (" (it " .. ended .. ")") or "") .. ".",
    details = { server = self.decl.name },
  }
end

local function send(self, message, deadline)
  local ok, kind, why = self.proc:send(core.json_encode(message), math.max(0, math.floor(deadline - core.monotonic_ms())),
    message.method ~= nil and message.id ~= nil)
  if ok then return true end
  return nil, self:fail(kind == "timeout" and "did not read its input in time" or ("cannot be written to: " .. tostring(why)))
end

-- A request and its answer: the result table, or nil and an error. An
-- answer that is a JSON-RPC error is returned as `nil, nil, rpc_error`.
function Server:request(method, params, deadline)
  self.next_id = self.next_id + 1
  local id = self.next_id
  local ok, err = send(self, { jsonrpc = "2.0", id = id, method = method, params = params }, deadline)
  if not ok then return nil, err end
  while true do
    local left = math.floor(deadline - core.monotonic_ms())
    if left <= 0 then return nil, self:fail("did not answer " .. method .. " in time") end
    local kind, v = self.proc:receive(left)
    if kind == "message" then
      if type(v) ~= "table" or v.jsonrpc ~= "2.0" then
        return nil, self:fail("sent a message that is not JSON-RPC 2.0")
      end
      if v.method == nil and v.id == id then
        if type(v.error) == "table" then return nil, nil, v.error end
        if type(v.result) ~= "table" then return nil, self:fail("answered " .. method .. " without a result object") end
        return v.result
      elseif type(v.method) == "string" and v.id ~= nil then
        -- a request of the server's: ping is answered, the rest (sampling,
        -- elicitation, roots) is a capability this client does not declare
        local reply = v.method == "ping" and { jsonrpc = "2.0", id = v.id, result = {} }
          or { jsonrpc = "2.0", id = v.id, error = { code = -32601, message = "luma-lua does not offer " .. v.method } }
        ok, err = send(self, reply, deadline)
        if not ok then return nil, err end
      elseif type(v.method) == "string" then
        if v.method == "notifications/tools/list_changed" then self.stale = true end
      elseif v.id == nil then
        return nil, self:fail("sent a message that is neither a request, a notification nor an answer")
      end
      -- an answer to another id: not one of ours in flight; skipped
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
  if d.url then
    return nil, self:fail("is a url server: luma-lua speaks to mcp_servers over stdio only so far (command and args)")
  end
  local argv = { d.command }
  for _, a in ipairs(d.args or {}) do argv[#argv + 1] = a end
  -- in the program's folder, where its relative paths are
  local proc, why = core.mcp_spawn(argv, self.chunk:match("^(.*)/[^/]*$") or ".")
  if not proc then return nil, self:fail("could not start: " .. why) end
  self.proc = proc
  self.next_id = 0
  local result, err, rpc = self:request("initialize", {
    protocolVersion = VERSIONS[1],
    capabilities = {},
    clientInfo = { name = "luma-lua", version = core.version },
  }, deadline)
  if rpc then return nil, self:fail("refused initialize: " .. rpc_text(rpc)) end
  if not result then return nil, err end
  if not contains(VERSIONS, result.protocolVersion) then
    return nil, self:fail("speaks protocol version " .. tostring(result.protocolVersion) ..
      ", and luma-lua speaks " .. table.concat(VERSIONS, ", "))
  end
  self.version = result.protocolVersion
  return send(self, { jsonrpc = "2.0", method = "notifications/initialized" }, deadline)
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

-- After notifications/tools/list_changed: the tools listed again. The
-- program was compiled with the first listing, so a server whose tools
-- changed is refused until the program is loaded again; one that lists the
-- same tools goes on. true, or nil and an error.
function Server:relist(deadline)
  local tools, err = self:list(deadline)
  if not tools then return nil, err end
  if core.json_encode(tools) == self.listed then return true end
  self.stale = true   -- and so every call asks again, and is refused
  return nil, core.error {
    code = "MCP_SERVER_FAILED", retryable = false,
    message = "mcp_server '" .. self.decl.name .. "' changed its tools since the program was loaded " ..
      "(notifications/tools/list_changed); load the program again to use them.",
    details = { server = self.decl.name },
  }
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
    if not self.proc then
      -- it exited, failed or was never started here: started again
      local ok, err = self:start(deadline)
      if not ok then error(err, 0) end
    end
    if self.stale then
      local same, changed = self:relist(deadline)
      if not same then error(changed, 0) end
    end
    local result, err, rpc = self:request("tools/call", { name = t.mcp_tool, arguments = input }, deadline)
    if rpc then
      error(core.error { code = "MCP_TOOL_ERROR", retryable = true,
        message = "mcp_server '" .. self.decl.name .. "' refused tools/call of '" .. t.mcp_tool .. "': " .. rpc_text(rpc),
        details = { server = self.decl.name, tool = t.mcp_tool, rpc = rpc } }, 0)
    end
    if not result then error(err, 0) end
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
    for _, decl in ipairs(core.mcp_servers(source, chunk, opts)) do
      local s = mcpclient.server(decl, chunk)
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

function mcpclient.close(servers)
  for _, s in pairs(servers or {}) do s:stop() end
end

return mcpclient
