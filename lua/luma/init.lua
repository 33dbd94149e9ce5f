-- The public Lua API of luma-lua: `local luma = require "luma"`.
-- Kept within what Lua 5.1/LuaJIT and 5.4 share.
local core = require "luma.core"
local config = require "luma.config"
local loader = require "luma.loader"
local compile = require "luma.compile"
local exec = require "luma.exec"
local approval = require "luma.approval"
local future = require "luma.future"
local mcpclient = require "luma.mcpclient"

local luma = {
  version = core.version,
  null = core.null,        -- JSON null, the same value as cjson.null
  array_mt = core.array_mt, -- marks a table as a JSON array (an empty one prints as [])
  error = core.error,      -- luma.error{ code =, message =, retryable =, details = }
  is_error = core.is_error,
  errors = core.errors,    -- the catalogue: { [code] = { meaning =, retryable = [, template =] } }
  limits = core.limits,    -- every bound's default: { [name] = n }
  json = { encode = core.json_encode, decode = core.json_decode },
}
luma.ToolError = core.error
luma.runtime = core.runtime   -- luma.runtime{ workers = n, inline = false|true|"slice" }: a pool and its calls, for luma.load's opts.runtime
-- luma.deadline_signal() -> the signal that stops handlers at their deadline, or false (the count hook);
-- luma.deadline_signal(n | false) chooses, for the whole process: true, or nil and why
luma.deadline_signal = core.deadline_signal


local function raise(code, message)
  error(core.error { code = code, message = message }, 0)
end

-- Compiles program text; raises a PROGRAM_INVALID error listing every problem.
function luma.compile(source, chunkname, opts)
  if type(source) ~= "string" then
    error("bad argument #1 to 'compile' (string expected, got " .. type(source) .. ")", 2)
  end
  return core.compile(source, chunkname or "program.luma", opts and { limits = opts.limits, runtime = opts.runtime,
    allow_unknown_models = opts.allow_unknown_models })
end

local function read_source(path, opts)
  local f, err = io.open(path, "rb")
  if not f then raise("IO_ERROR", "cannot read '" .. path .. "': " .. tostring(err):gsub("^[^:]*: ", "")) end
  local limit = opts and opts.limits and opts.limits.max_source_bytes or core.limits.max_source_bytes
  local readable, rerr = f:read(0)
  local size = f:seek("end")
  if (readable == nil and rerr) or not size then
    f:close()
    raise("IO_ERROR", "cannot read '" .. path .. "': " .. (rerr or "not a regular file"))
  end
  if size > limit then
    f:close()
    raise("PROGRAM_INVALID", path .. ": the program is " .. size .. " bytes; the limit is " .. limit)
  end
  f:seek("set", 0)
  local source = f:read("*a")
  f:close()
  if not source then raise("IO_ERROR", "cannot read '" .. path .. "'") end
  return source
end

local OPTIONS = {
  limits = true, config = true, tool_modules = true, on_event = true, trace = true, clock = true,
  default_timeout_ms = true, tool_module_policy = true, runtime = true, approve = true, lookup = true,
  record = true, replay = true, replay_seed = true, allow_unknown_models = true, journal = true,
  journal_lease_ms = true,
}

--[[ Reads and compiles a .luma file and gets it ready to run:
  opts.config        a luma.config.json path; by default the one next to the
                     program is used if there is one; false: none
  opts.tool_modules  more modules: paths (relative to the current directory)
                     or manifests { path, version, integrity, dependencies, dependency_root }
  opts.on_event      function(event) receiving one telemetry event per tool call
  opts.trace         a file to append the events to, as JSON lines
  opts.clock         { now = fn() -> ms, sleep = fn(ms) }: a clock tests control
  opts.tool_module_policy  the sandbox of the tool modules, as in the config
                     file (which it replaces there)
  opts.runtime       a luma.runtime{ workers = n } to run in (default: one per Lua state)
  opts.approve       function(tool, agent) -> boolean: tool_policy "approval" (default:
                     LUMA_APPROVED_TOOLS, then a prompt at an interactive terminal); false
                     and a reason: no one could be asked (a durable ask's run then waits)
  opts.lookup        function(name) -> string or nil: credentials, needs and API keys (default: os.getenv)
  opts.record        a file to append every exchange with a model to (JSON lines, keys redacted)
  opts.allow_unknown_models  true: a model name the capability table of provider tools does not
                     know may run them (as each model's allow_unknown_model), with a warning
  opts.replay        a recording to answer the model requests from, without the network
  opts.replay_seed   the seed of the pieces' sizes a recorded stream is replayed in (default 1)
  opts.journal       where durable agents' asks keep their journals (journal.h): a SQLite
                     file's path, { type = "sqlite", path =, sync = true|false } or
                     { type = "redis", url =, password_env =, prefix = }; it replaces the
                     config's "journal"
  opts.journal_lease_ms  how long a durable ask's claim on its run lasts unless its
                     heartbeat renews it (default journal_lease_ms, 10 s)
  opts.limits        see the README ]]
local modules_of = setmetatable({}, { __mode = "k" })
local servers_of = setmetatable({}, { __mode = "k" })

function luma.load(path, opts)
  if type(path) ~= "string" then
    error("bad argument #1 to 'load' (string expected, got " .. type(path) .. ")", 2)
  end
  opts = opts or {}
  for k in pairs(opts) do
    if not OPTIONS[k] then error("luma.load: unknown option '" .. tostring(k) .. "'", 2) end
  end
  local source = read_source(path, opts)
  -- the mcp_servers are started first: their tools are part of the program
  local listings, servers = mcpclient.open(source, path, { limits = opts.limits, lookup = opts.lookup })
  local compiled, program = pcall(core.compile, source, path, { limits = opts.limits, runtime = opts.runtime,
    allow_unknown_models = opts.allow_unknown_models, mcp = listings })
  if not compiled then
    mcpclient.close(servers)
    error(program, 0)
  end
  if servers then
    mcpclient.register(program, servers)
    servers_of[program] = servers
  end
  local config_path = opts.config
  if config_path == nil then config_path = config.find(path) end
  local cfg = config_path and config.read(config_path) or nil
  local specs = {}
  for _, m in ipairs(opts.tool_modules or {}) do
    specs[#specs + 1] = type(m) == "string" and { path = m } or m
  end
  for _, m in ipairs(cfg and cfg.tool_modules or {}) do specs[#specs + 1] = m end
  local policy = cfg and cfg.tool_module_policy
  if opts.tool_module_policy ~= nil then policy = config.policy("luma.load", opts.tool_module_policy) end
  modules_of[program] = loader.load(program, specs, cfg and cfg.dir or config.dirname(path), policy)
  program:configure {
    contexts = cfg and cfg.tool_contexts,
    on_event = opts.on_event,
    trace = opts.trace,
    clock = opts.clock,
    default_timeout_ms = opts.default_timeout_ms,
    approve = opts.approve or approval.default(opts.lookup),
    lookup = opts.lookup,
    record = opts.record,
    replay = opts.replay,
    replay_seed = opts.replay_seed,
    journal = opts.journal ~= nil and config.journal("luma.load", nil, opts.journal, "journal")
      or cfg and cfg.journal,
    journal_lease_ms = opts.journal_lease_ms,
  }
  -- after the clock, so that the store purges with the time the program sees
  if cfg and cfg.idempotency_store then program:configure { idempotency = cfg.idempotency_store } end
  if cfg and cfg.cache_store then program:configure { cache = cfg.cache_store } end
  -- a program that asks models loads the HTTP stack now, not at its first
  -- request: that may come in a game's frame (a failure is the request's to say)
  if not opts.replay and #program:declarations().models > 0 then core.load_http() end
  return program
end

-- ---------------------------------------------------------- durable runs

-- The runs of a journal (luma.load's journal option: a SQLite file's path,
-- or { type = "sqlite" | "redis", ... }), the most recently changed first:
-- { id, status, step, owner, created_ms, updated_ms, lease_until_ms, age_ms,
-- records } each; status is "running", "awaiting_approval", "completed",
-- "failed" or "abandoned" (running, its owner's lease ended).
function luma.runs(journal)
  return core.journal_runs(config.journal("luma.runs", nil, journal, "journal"))
end

-- The runs' retention: what luma.prune_runs and `luma-lua runs --prune`
-- delete by default is older than this (7 days, in ms).
luma.RUNS_RETENTION_MS = 7 * 24 * 3600 * 1000

-- Deletes the runs of a journal that ended (completed, failed) or were
-- abandoned, last changed more than older_than_ms ago (default
-- luma.RUNS_RETENTION_MS); runs that run or await approval are kept.
-- Returns how many were deleted.
function luma.prune_runs(journal, older_than_ms)
  if older_than_ms ~= nil and (math.type(older_than_ms) ~= "integer" or older_than_ms < 0) then
    error("luma.prune_runs: older_than_ms must be an integer >= 0, not " .. tostring(older_than_ms), 2)
  end
  return core.journal_prune(config.journal("luma.prune_runs", nil, journal, "journal"),
    older_than_ms or luma.RUNS_RETENTION_MS)
end

-- ------------------------------------------------------------ running programs

local Program = core.Program
local compiled = setmetatable({}, { __mode = "k" })

-- The Lua source the program's statements compile to.
function Program:emit_lua()
  return compile.program(self:ast(), self:chunkname())
end

local function compiled_of(program)
  local c = compiled[program]
  if c then return c end
  local source = program:emit_lua()
  local chunk, why = load(source, "=" .. program:chunkname() .. " (compiled)", "t", {})
  if not chunk then
    -- the statements nest deeper than Lua's own parser allows
    raise("PROGRAM_INVALID", program:chunkname() .. ": the statements are nested too deeply to run (" .. tostring(why) .. ")")
  end
  c = chunk(exec.new(program))
  compiled[program] = c
  return c
end

-- Compiles the statements to Lua, as the first run does; raises
-- PROGRAM_INVALID when they nest deeper than Lua's parser allows.
function Program:compile_statements()
  compiled_of(self)
end

-- Closing the program stops the mcp_servers luma.load started for it (its
-- collection does too: each server's process is a userdata that stops it).
local close_program = Program.close
function Program:close()
  mcpclient.close(servers_of[self])
  servers_of[self] = nil
  return close_program(self)
end

-- The tool modules luma.load loaded: { { path = as given, exports = { name, ... } }, ... }.
function Program:modules()
  local list = {}
  for i, m in ipairs(modules_of[self] or {}) do
    local exports = {}
    for j, name in ipairs(m.exports) do exports[j] = name end
    list[i] = { path = m.path, exports = exports }
  end
  return list
end

-- The mcp_servers luma.load started or reached, by name order: { { name,
-- transport = "stdio" | "http", protocol_version (nil while not started) } }.
function Program:mcp_servers()
  return mcpclient.describe(servers_of[self])
end

-- Where a handler for the tool `name` was looked for: a sentence to print
-- under the error, the paths of the tool modules loaded, and the name they
-- export that is closest to `name` (or nil).
function Program:handler_hint(name)
  local paths, exported = {}, {}
  for _, m in ipairs(modules_of[self] or {}) do
    paths[#paths + 1] = m.path
    for _, export in ipairs(m.exports) do exported[#exported + 1] = export end
  end
  if #paths == 0 then
    return "No tool module is loaded: list one in luma.config.json's tool_modules (or pass --tool-module), " ..
      "or register a handler with program:register.", paths, nil
  end
  local near = core.suggest(name, exported)
  return "Tool modules loaded: " .. table.concat(paths, ", ") .. "; none exports '" .. name .. "'" ..
    (near and (". Did you mean '" .. near .. "'?") or "."), paths, near
end

-- Before anything runs, every contract needs its handler.
-- The error says where handlers were looked for (details.hint, which the
-- command prints under it): the modules loaded and the closest export.
function Program:check_registry()
  local missing = self:missing_handlers()
  if #missing == 0 then return end
  local name = missing[1]
  local hint, paths = self:handler_hint(name)
  error(core.error { code = "TOOL_NOT_FOUND", message = core.errors.TOOL_NOT_FOUND.template:format(name),
    details = { missing = missing, modules = paths, hint = hint } }, 0)
end

-- Runs the top-level statements; returns their variables as a table (and the
-- list of their names, in order).
function Program:run()
  return self:prepare()()
end

-- program:prepare() -> run(): what can refuse the top-level statements before
-- the first of them runs (handlers, the compiled chunk).
function Program:prepare()
  self:check_registry()
  local main = compiled_of(self).main
  return function() return main(nil) end
end

-- The schema a user names (`luma-lua schema` and `validate`, the REPL's
-- :schema and :validate): a schema, or a tool for its input. -> the name to
-- give json_schema and validate, or nil and "Unknown schema 'x'." with the
-- nearest schema or tool.
function Program:schema_target(name)
  local d = self:declaration(name)
  if d and d.kind == "schema" then return name end
  if d and d.kind == "tool" then return d.input end
  local all = self:declarations()
  local names = {}
  for _, list in ipairs { all.schemas, all.tools } do
    for _, n in ipairs(list) do names[#names + 1] = n end
  end
  local near = core.suggest(name, names)
  return nil, "Unknown schema '" .. name .. "'." .. (near and (" Did you mean '" .. near .. "'?") or "")
end

local Agent = {}
Agent.__index = Agent

function Program:agent(name)
  if not self:declaration(name) or self:declaration(name).kind ~= "agent" then
    local near = type(name) == "string" and core.suggest(name, self:declarations().agents)
    raise("AGENT_NOT_FOUND", core.errors.AGENT_NOT_FOUND.template:format(tostring(name)) ..
      (near and (" Did you mean '" .. near .. "'?") or ""))
  end
  return setmetatable({ program = self, name = name }, Agent)
end

-- agent:prepare(method, args) -> run(): everything that can refuse the call
-- before the method's first statement (handlers, method, arguments).
function Agent:prepare(method, args)
  local program = self.program
  method = method or "run"
  program:check_registry()
  local fn = compiled_of(program).agents[self.name][method]
  if not fn then
    local near = type(method) == "string" and core.suggest(method, program:declaration(self.name).methods)
    raise("METHOD_NOT_FOUND", core.errors.METHOD_NOT_FOUND.template:format(self.name, tostring(method)) ..
      (near and (" Did you mean '" .. near .. "'?") or ""))
  end
  args = args or {}
  local ok, err = program:validate("__method_" .. self.name .. "_" .. method .. "_input", args)
  if not ok then
    err = core.error { code = "INPUT_INVALID", message = err.message, details = err.details }
    error(err, 0)
  end
  local name = self.name
  return function()
    local result = fn(program:scope(name), args)
    local fits, why = program:check_return(name, method, result)
    if not fits then error(why, 0) end
    return result
  end
end

local function check_on_event(opts, level)
  local f = opts and opts.on_event
  if f ~= nil and type(f) ~= "function" and not (getmetatable(f) or {}).__call then
    error("bad argument #3 (on_event must be a function, got " .. type(f) .. ")", level + 1)
  end
  return f
end

-- agent:call(method, args [, { on_event = f }]): runs a method; the circuit
-- breaker counts the tool failures of this one call. on_event gets the
-- events of each ask the method makes (README: Streaming).
function Agent:call(method, args, opts)
  local on_event = check_on_event(opts, 2)
  if on_event then
    local f = future.start(self:prepare(method, args), on_event)
    f:wait()
    return f:result()
  end
  return self:prepare(method, args)()
end

-- agent:start(method, args [, { on_event = f }]) -> a luma.Future: the
-- method runs without blocking, its tool calls and asks started and awaited
-- in a coroutine (see luma.future). What agent:prepare refuses is raised
-- here, at once.
function Agent:start(method, args, opts)
  return future.start(self:prepare(method, args), check_on_event(opts, 2))
end

-- agent:ask(prompt, schema [, { using = tool, on_event = f }]) -> the
-- model's answer, a value of the schema; raises the ask's error. on_event
-- gets each event (README: Streaming) as it comes, the provider streaming.
function Agent:ask(prompt, schema, opts)
  local program = self.program
  program:check_registry()
  local on_event = check_on_event(opts, 2)
  if on_event then
    local a = program:start_ask(program:scope(self.name), prompt, schema, opts.using, true)
    future.listen(a, on_event)
    a:wait()
    return a:result()
  end
  return (program:ask(program:scope(self.name), prompt, schema, opts and opts.using))
end

-- agent:start_ask(prompt, schema [, { using = tool, on_event = f, events = true }])
-- -> a luma.Ask with poll(), wait([ms]), done(), result(), cancel(),
-- close() and events(); with on_event or events it listens (and streams)
-- from its first request.
function Agent:start_ask(prompt, schema, opts)
  local program = self.program
  program:check_registry()
  local on_event = check_on_event(opts, 2)
  local a = program:start_ask(program:scope(self.name), prompt, schema, opts and opts.using,
    on_event ~= nil or (opts and opts.events) == true)
  if on_event then future.listen(a, on_event) end
  return a
end

-- program:resume(run [, { on_event = f }]) -> the answer of a durable ask's
-- run (README: Durable asks), continued from the program's journal: its
-- answered turns are not asked again, its calls with an outcome do not run
-- again; a run that finished gives its outcome again. Raises its error.
local core_resume, core_start_resume = Program.resume, Program.start_resume

function Program:resume(run, opts)
  self:check_registry()
  local on_event = check_on_event(opts, 2)
  if on_event then
    local a = core_start_resume(self, run, true)
    future.listen(a, on_event)
    a:wait()
    return a:result()
  end
  return core_resume(self, run)
end

-- program:approve(run, call [, { input = value }]) and program:deny(run,
-- call, reason): a person's decision on a call a durable run awaits
-- (README: Durable asks), from any process that shares the journal; the
-- run goes on when it is resumed. The edited input is validated again then.
function Program:approve(run, call, opts)
  local input = opts and opts.input
  if input ~= nil then input = core.json_encode(input) end
  return self:decide(run, call, true, nil, input)
end

function Program:deny(run, call, reason)
  return self:decide(run, call, false, reason)
end

-- program:start_resume(run [, { on_event = f, events = true }]) -> a luma.Ask
function Program:start_resume(run, opts)
  self:check_registry()
  local on_event = check_on_event(opts, 2)
  local a = core_start_resume(self, run, on_event ~= nil or (opts and opts.events) == true)
  if on_event then future.listen(a, on_event) end
  return a
end

return luma
