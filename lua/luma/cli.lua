-- The luma-lua command line. `main(arg)` returns the exit status.
local core = require "luma.core"
-- luma itself, and the modules it loads (the compiler, the loader, MCP...),
-- at the first use: --version and help start without reading them
local luma = setmetatable({}, { __index = function(self, key)
  setmetatable(self, { __index = require "luma" })
  return self[key]
end })

local cli = {}

local USAGE = [[
usage: luma-lua <command> [arguments]

commands:
  (none), repl [PROGRAM] [--config FILE] [--tool-module FILE]...
                           the REPL: :help lists its commands; Lua for the rest
  init [DIR]               write a starter project (a contract, its handlers, a
                           config with the strict sandbox, a spec)
  [run] PROGRAM [options]  run a .luma program: its top-level statements, or
                           an agent method; print the result as JSON
  check PROGRAM            check a program, its config and tool modules; print "ok", or every error
  tools PROGRAM            print the program's tool declarations as JSON
                           ({ name, description, parameters } for each tool)
  schema PROGRAM NAME      print the JSON Schema of one schema (of a tool's input,
                           for a tool's name)
  approve RUN CALL PROGRAM [--journal PATH|URL] [--input JSON]
                           approve a call a durable run awaits (with the person's
                           input); resume then runs it
  deny RUN CALL PROGRAM [--journal PATH|URL] --reason TEXT
                           deny it: resume gives the model the reason as its error
  resume RUN PROGRAM [--journal PATH|URL] [--trace FILE] [--stream | --stream-events]
                           continue a durable ask's run from its journal, and
                           print its answer as JSON (a finished run's again)
  mcp PROGRAM [--agent A] [--trace FILE] [--http [HOST:]PORT]
                           serve the program's tools (or agent A's) over MCP on
                           stdio, or Streamable HTTP, to any MCP client (both
                           protocol eras)
  runs [PROGRAM] [--journal PATH|URL] [--json] [--prune] [--older-than DURATION]
                           list the durable runs of a journal (the config's, or
                           --journal's): id, status, step, age and owner; --prune
                           deletes those that ended or were abandoned (default:
                           older than 7d)
  validate PROGRAM SCHEMA [JSON | @file | -]
                           validate a value (standard input when absent): print
                           it with its defaults filled (exit 0), or every
                           violation (exit 1)
  version, --version, -v   print the version
  help [CMD], --help, -h   print this help; help CMD or CMD --help: one command's

options of run:
  --tool-module FILE       load a Lua tool module (repeatable)
  --config FILE            use this luma.config.json (default: the one next to
                           the program, if any)
  --agent NAME             call a method of this agent instead of the top level
  --method NAME            the method to call (default: run)
  --input JSON             the method's arguments, as a JSON object (@file: read
                           from a file; -: from standard input)
  --trace FILE             append one telemetry event per tool call and ask (JSON lines)
  --record FILE            append every exchange with a model provider (JSON lines,
                           API keys redacted)
  --replay FILE            answer the model requests from a recording, without the
                           network; the first request that differs is an error
  --replay-seed N          the seed of the random sizes of the pieces a recorded
                           stream is replayed in (default 1)
  --journal FILE           the journal of durable agents' asks (README: Durable
                           asks), a SQLite file or a redis:// url; resume reads it
  --journal-lease-ms N     how long a durable ask's claim on its run lasts unless
                           renewed (default 10000)
  --stream                 print the answer's text to stdout as it streams, before
                           the result (default: to stderr when it is a terminal)
  --stream-events          print every event of the asks as a JSON line on stdout,
                           then the result as the last line
  --emit-lua               print the Lua the program compiles to, and stop
  --allow-unknown-models   let a model name the capability table of provider tools
                           does not know run them (a warning at each ask)
  --generate-tool-types OUT  write the handlers' types and stop: OUT.d.ts
                           (TypeScript) or OUT.lua (LuaCATS annotations)

Exit status: 0 on success; 1 when check finds errors or a run fails
("Error: [CODE] message"); 2 for a program that does not load ("Error: message")
or a command line that is not understood.
]]

local function out(s) io.stdout:write(s, "\n") end
local function err(s) io.stderr:write(s, "\n") end

-- --journal PATH|URL as luma.load's journal: a redis:// URL is a Redis journal
local function journal_arg(s)
  if s and s:match("^rediss?://") then return { type = "redis", url = s } end
  return s
end

local function usage_error(message)
  err("luma-lua: " .. message)
  err("Run 'luma-lua --help' for usage.")
  return 2
end

-- "unknown option '--agnet'", with the nearest of the command's options.
local function unknown_option(option, options, command)
  local near = core.suggest(option, options)
  return "unknown option '" .. option .. "'" .. (command and (" of " .. command) or "") ..
    (near and (" (did you mean '" .. near .. "'?)") or "")
end

-- Loads a program; on failure returns nil and the structured error.
-- The command is the host: the runtime's warnings (events of kind
-- "warning": a recording it cannot write, a corrupt store it replaced) go to
-- its stderr.
local function on_event(e)
  if e.kind == "warning" then err("warning: " .. e.message) end
end

local function load_program(path, opts)
  opts.on_event = on_event
  local ok, result = pcall(luma.load, path, opts)
  if ok then return result end
  if not luma.is_error(result) then error(result, 0) end
  return nil, result
end

local function print_load_error(e)
  local diagnostics = e.details and e.details.diagnostics
  if diagnostics then
    for _, d in ipairs(diagnostics) do err(d.text) end
    -- past the cap, the last line says how many were not shown
    local more = e.details.more or 0
    if more > 0 then err("\226\128\166 and " .. more .. " more errors")
    elseif #diagnostics > 1 then err(#diagnostics .. " errors") end
  else
    err("Error: " .. e.message)
    if type(e.details) == "table" and type(e.details.hint) == "string" then err(e.details.hint) end
  end
end

-- JSON text given as itself, as @file, or as - (standard input): the text,
-- or nil and why.
local function json_text(arg)
  if arg == "-" then return io.stdin:read("a") end
  if arg:sub(1, 1) == "@" then
    local f, why = io.open(arg:sub(2), "rb")
    local text
    if f then
      text, why = f:read("a")   -- a folder opens, and its read fails: Is a directory
      f:close()
    end
    if not text then return nil, "cannot read " .. arg:sub(2) .. ": " .. tostring(why):gsub("^[^:]*: ", "") end
    return text
  end
  return arg
end

-- The program named by a command's one argument, or nil and the exit status
-- after saying what is wrong.
local function program_argument(args, command, failure_status, count)
  if #args ~= (count or 1) then
    return nil, usage_error(command .. " needs " .. (count == 2 and "PROGRAM NAME" or "one PROGRAM"))
  end
  local program, e = load_program(args[1], { config = false })
  if not program then
    print_load_error(e)
    return nil, failure_status
  end
  return program
end

local commands = {}

-- luma.mcp owns the command: its options, the protocol and the stdio loop.
function commands.mcp(args)
  return require("luma.mcp").main(args, err, print_load_error)
end

-- Each command's own help (luma-lua CMD --help).
local HELP = {
  run = [[
usage: luma-lua [run] PROGRAM [options]
Runs a .luma program's top-level statements and prints their variables as one
JSON object; with --agent, calls a method and prints what it returns.
  --tool-module FILE   load a Lua tool module (repeatable)
  --config FILE        use this luma.config.json (default: the one next to the program)
  --agent NAME         call a method of this agent
  --method NAME        the method (default: run)
  --input JSON         its arguments, a JSON object (@file: from a file; -: standard input)
  --trace FILE         append one telemetry event per tool call and ask (JSON lines)
  --record FILE        append every exchange with a model provider (JSON lines, keys redacted)
  --replay FILE        answer the model requests from a recording, without the network
  --replay-seed N      the seed of the pieces' sizes a recorded stream is replayed in (default 1)
  --journal FILE       the journal of durable agents' asks: a SQLite file or a redis:// url
  --journal-lease-ms N how long a durable ask's claim on its run lasts unless renewed (default 10000)
  --stream             print the answer's text to stdout as it streams, then the result
                       (without it, the text goes to stderr when stderr is a terminal)
  --stream-events      print every event of the asks as a JSON line on stdout, then the
                       result as the last line (one line of JSON)
  --emit-lua           print the Lua the program compiles to, and stop
  --allow-unknown-models  let a model name the capability table of provider tools does
                       not know run them (a warning at each ask)
  --generate-tool-types OUT
                       write the types of the program's schemas and handlers to OUT and
                       stop: TypeScript for a .d.ts, LuaCATS annotations for a .lua
Exit status: 0; 1 when the run fails; 2 when the program does not load.
]],
  approve = [[
usage: luma-lua approve RUN CALL PROGRAM [--journal PATH|URL] [--config FILE] [--input JSON]
Records a person's approval of call CALL, which the durable run RUN awaits
(README: Durable asks), in the journal (--journal's, else PROGRAM's
config's), from any process sharing it. --input: the person's edit of the
call's input (a JSON object; @file, or - for standard input), validated again
when the run is resumed. Prints "approved".
Exit status: 0; 1 when the run does not await approval or the journal cannot
be written; 2 when the program does not load.
]],
  deny = [[
usage: luma-lua deny RUN CALL PROGRAM [--journal PATH|URL] [--config FILE] --reason TEXT
Records a person's denial of call CALL, which the durable run RUN awaits; when
the run is resumed the model gets the reason as the call's error. Prints
"denied".
Exit status: 0; 1 when the run does not await approval or the journal cannot
be written; 2 when the program does not load.
]],
  resume = [[
usage: luma-lua resume RUN PROGRAM [--journal PATH|URL] [--journal-lease-ms N] [--config FILE]
                       [--tool-module FILE]... [--trace FILE] [--stream | --stream-events]
Continues the run RUN of a durable agent's ask (README: Durable asks) from the
journal (--journal's, else PROGRAM's config's), with PROGRAM's agent, tools and model: a turn the journal
answered is not asked again, a tool call whose outcome it holds does not run
again, a call that was in flight runs again (its idempotency key makes the
repeat harmless). Prints the answer as JSON; a run that finished prints its
answer again (or fails with its error). A run another live process holds is
an error naming it and the lease it has left.
Exit status: 0; 1 when the run fails or cannot be resumed; 2 when the program
does not load.
]],
  check = [[
usage: luma-lua check PROGRAM [--config FILE] [--tool-module FILE]... [--verbose]
                      [--allow-unknown-models]
Checks what a run would load: the program, its config (the one next to it, or
--config) and its tool modules (the config's and --tool-module's), and that
every tool has a handler when modules are loaded. Prints "ok" (exit 0, with
warnings on stderr: a handler that no tool declares), or every error with
where it is on stderr (exit 1; 2 for a usage error). With --verbose, also
which layers confine a process-isolated handler on this machine, and which
this machine lacks. With --allow-unknown-models, a model name the capability
table of provider tools does not know may run them.
]],
  tools = [[
usage: luma-lua tools PROGRAM
Prints the program's tool declarations as JSON: { name, description, parameters } each.
]],
  schema = [[
usage: luma-lua schema PROGRAM NAME
Prints the JSON Schema of one schema of the program; for a tool's name, the
schema of its input (as the REPL's :schema does).
]],
  mcp = [[
usage: luma-lua mcp PROGRAM [--agent A] [--config FILE] [--tool-module FILE]...
                    [--trace FILE] [--http [HOST:]PORT [--token-env NAME] [--allow-origin ORIGIN]...]
Serves the program's tools over the Model Context Protocol on standard input
and output (one JSON-RPC message a line; logs go to standard error). Clients
may initialize (2025-06-18, 2025-11-25) or send 2026-07-28 requests as they
are. Every tools/call runs through the pipeline; --agent A serves only A's
tools, under A's policy. Exits when standard input ends.
  --trace FILE           append one telemetry event per tool call (JSON lines);
                         tags.mcp_client and tags.mcp_request say who asked
  --http [HOST:]PORT     serve Streamable HTTP at http://HOST:PORT/mcp instead
                         (HOST 127.0.0.1 when absent; PORT 0: any free port,
                         printed on stderr) until SIGTERM or SIGINT. An address
                         beyond loopback (0.0.0.0, a LAN address) must be
                         given here and needs --token-env
  --token-env NAME       clients must send Authorization: Bearer with the value
                         of the environment variable NAME
  --allow-origin ORIGIN  a browser Origin allowed beside loopback ones
                         (repeatable); any other Origin is refused (403)
]],
  runs = [[
usage: luma-lua runs [PROGRAM] [--config FILE] [--journal PATH|URL] [--json]
                     [--prune] [--older-than DURATION]
Lists the durable runs of a journal, the most recently changed first: id,
status (running, awaiting_approval, completed, failed, or abandoned: running
with its owner's lease ended), the step it is at, its age and its owner. The
journal is --journal's (a SQLite file, or a redis:// URL), else the "journal"
of PROGRAM's config (the luma.config.json next to it, or --config's).
  --config FILE        use this luma.config.json
  --journal PATH|URL   the journal: a SQLite file, or redis://[user:password@]host:port/db
  --json               print the runs as a JSON array instead
  --prune              delete the runs that ended (completed, failed) or were
                       abandoned, last changed longer ago than --older-than; print how many
  --older-than DURATION  with --prune: N followed by s, m, h or d (default 7d)
Exit status: 0; 1 when the journal cannot be read (a SQLite path that names no file
included: runs makes no journal); 2 for a usage error.
]],
  validate = [[
usage: luma-lua validate PROGRAM SCHEMA [JSON | @file | -]
Validates a value (standard input when absent) against a schema: prints it
with its defaults filled (exit 0), or every violation on stderr (exit 1).
]],
  repl = [[
usage: luma-lua [repl [PROGRAM] [--config FILE] [--tool-module FILE]...]
The REPL: :help lists its commands (:load, :call, :run, :ask, ...); anything
else is Lua, with program and luma in scope. Ctrl-C cancels what runs, Ctrl-D
leaves. Reading from a pipe, it runs commands line by line and exits 1 when
one failed. History: $LUMA_HISTORY, else ~/.luma_history.
]],
  version = [[
usage: luma-lua version (or --version, -v)
Prints the version of luma-lua and of the Lua it runs.
]],
  help = [[
usage: luma-lua help [COMMAND] (or --help, -h; COMMAND --help)
Prints the usage, or one command's help.
]],
  init = [[
usage: luma-lua init [DIR]
Writes a starter project into DIR (default: the current folder): program.luma,
tools.lua, luma.config.json (the strict sandbox) and spec/greet_spec.lua. An
existing file is never overwritten.
]],
}

-- init [DIR]: the starter project (luma.starter)
function commands.init(args)
  if #args > 1 then return usage_error("init takes one DIR") end
  local dir = args[1] or "."
  local files = require "luma.starter"
  for _, f in ipairs(files) do
    local existing = io.open(dir .. "/" .. f[1], "r")
    if existing then
      existing:close()
      err("Error: " .. dir .. "/" .. f[1] .. " exists; init writes only into a folder without its files")
      return 1
    end
  end
  local function mkdir(path)
    local ok = os.execute("mkdir -p '" .. path:gsub("'", "'\\''") .. "'")
    return ok == true or ok == 0
  end
  for _, f in ipairs(files) do
    local sub = (dir .. "/" .. f[1]):match("^(.*)/[^/]*$")
    if not mkdir(sub) then
      err("Error: cannot make the folder " .. sub)
      return 1
    end
    local h, why = io.open(dir .. "/" .. f[1], "w")
    if not h then
      err("Error: cannot write " .. dir .. "/" .. f[1] .. ": " .. tostring(why))
      return 1
    end
    h:write(f[2])
    h:close()
    out("wrote " .. dir .. "/" .. f[1])
  end
  -- run from a checkout (bin/luma-lua), the steps name its command and
  -- where busted finds luma, which make install would have put in place
  local checkout, build, luadir = os.getenv("LUMA_COMMAND"), os.getenv("LUMA_BUILD"), os.getenv("LUMA_LUADIR")
  local function q(s) return s:match("^[%w/._-]+$") and s or ("'" .. s:gsub("'", "'\\''") .. "'") end
  local cmd = checkout and q(checkout) or "luma-lua"
  out("")
  out("Next, in " .. dir .. ":")
  out("  " .. cmd .. " check program.luma")
  out("  " .. cmd .. " program.luma")
  out("  " .. cmd .. " program.luma --agent Greeter --input '{\"name\": \"Ada\"}'")
  out("  " .. cmd .. " repl program.luma")
  if checkout and build and luadir then
    out("  LUA_PATH=" .. q(luadir .. "/?.lua;" .. luadir .. "/?/init.lua;;") .. " LUA_CPATH=" .. q(build .. "/?.so;;") ..
      " busted --lua=lua5.4 spec")
    out("(luma-lua runs from its checkout here: make install puts luma-lua on PATH and luma where busted finds it)")
  else
    out("  busted --lua=lua5.4 spec")
  end
  return 0
end

-- PROGRAM [--config FILE] [--tool-module FILE]..., the arguments of repl
-- and check: { program, config, tool_modules }, or nil and the exit status
-- of a usage error.
local function program_options(args, command)
  local o = { tool_modules = {} }
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--verbose" and command == "check" then
      o.verbose = true
      i = i + 1
    elseif a == "--allow-unknown-models" then
      o.allow_unknown_models = true
      i = i + 1
    elseif a == "--config" or a == "--tool-module" then
      if not args[i + 1] then return nil, usage_error(a .. " needs a value") end
      if a == "--config" then o.config = args[i + 1] else o.tool_modules[#o.tool_modules + 1] = args[i + 1] end
      i = i + 2
    elseif a:sub(1, 1) == "-" then
      return nil, usage_error(unknown_option(a, { "--config", "--tool-module", "--allow-unknown-models" }, command))
    elseif o.program then
      return nil, usage_error(command .. " takes one PROGRAM, not '" .. o.program .. "' and '" .. a .. "'")
    else
      o.program = a
      i = i + 1
    end
  end
  return o
end

-- repl [PROGRAM] [--config FILE] [--tool-module FILE]...
function commands.repl(args)
  local o, status = program_options(args, "repl")
  if not o then return status end
  return require("luma.repl").main(o)
end

-- check PROGRAM [--config FILE] [--tool-module FILE]...: what a run would
-- load (the program, its config, its tool modules), and whether every tool
-- has a handler (but those declared handler: "host", which the embedding
-- host registers, and which no module may export); a handler no tool
-- declares is a warning.
function commands.check(args)
  local o, status = program_options(args, "check")
  if not o then return status end
  if not o.program then return usage_error("check needs one PROGRAM") end
  local program, e = load_program(o.program, { config = o.config, tool_modules = o.tool_modules,
    allow_unknown_models = o.allow_unknown_models })
  if not program then
    print_load_error(e)
    return 1
  end
  local compiled, why = pcall(program.compile_statements, program)
  if not compiled then
    print_load_error(why)
    return 1
  end
  local modules = program:modules()
  local errors = 0
  if #modules > 0 then
    for _, name in ipairs(program:missing_handlers()) do
      local _, paths, near = program:handler_hint(name)
      local d = program:declaration(name)
      err(string.format("%s:%d:%d: tool '%s' has no handler: no tool module exports it (loaded: %s)%s",
        o.program, d.line, d.col, name, table.concat(paths, ", "), near and (". Did you mean '" .. near .. "'?") or ""))
      errors = errors + 1
    end
    local tools = program:declarations().tools
    local declared = {}
    for _, name in ipairs(tools) do declared[name] = true end
    for _, m in ipairs(modules) do
      for _, name in ipairs(m.exports) do
        if not declared[name] then
          local near = core.suggest(name, tools)
          err(string.format("warning: %s exports '%s', which no tool of %s declares%s", m.path, name, o.program,
            near and (" (did you mean '" .. near .. "'?)") or ""))
        elseif program:declaration(name).handler == "host" then
          err(string.format("%s: tool '%s' is declared handler: \"host\", but %s exports it (the host's " ..
            "luma_register would conflict with it)", o.program, name, m.path))
          errors = errors + 1
        end
      end
    end
  end
  if errors > 0 then
    if errors > 1 then err(errors .. " errors") end
    return 1
  end
  if o.verbose then
    local c = core.confinement()
    out("process isolation on this machine:")
    for _, layer in ipairs(c.holds) do out("  holds: " .. layer) end
    for _, layer in ipairs(c.missing) do out("  missing: " .. layer) end
  end
  out("ok")
  return 0
end

-- schema PROGRAM NAME: the JSON Schema of a schema, or of a tool's input (as
-- the REPL's :schema prints it)
function commands.schema(args)
  local program, status = program_argument(args, "schema", 2, 2)
  if not program then return status end
  local target, why = program:schema_target(args[2])
  if not target then
    err("Error: " .. why)
    return 1
  end
  out(program:json_schema(target, { format = "json" }))
  return 0
end

-- validate PROGRAM SCHEMA [JSON | @file | -]: the value (standard input when
-- absent), validated in place (defaults filled), or every violation.
function commands.validate(args)
  if #args < 2 or #args > 3 then return usage_error("validate needs PROGRAM SCHEMA [JSON | @file | -]") end
  local program, status = program_argument({ args[1] }, "validate", 1)
  if not program then return status end
  local name, why = program:schema_target(args[2])
  if not name then
    err("Error: " .. why)
    return 1
  end
  -- at a terminal, reading what is typed would look like a hang
  if (args[3] or "-") == "-" and core.isatty(0) then
    err("luma-lua: reading the value of " .. args[2] .. " from standard input; end it with Ctrl-D")
  end
  local text, why = json_text(args[3] or "-")
  if not text then
    err("Error: " .. why)
    return 1
  end
  local decoded, value = pcall(core.json_decode, text)
  if not decoded then
    err("Error: not JSON: " .. tostring(value.message))
    return 1
  end
  local ok, e = program:validate(name, value)
  if not ok then
    for _, v in ipairs(e.details.violations) do err(v.message) end
    return 1
  end
  if type(e) == "table" then
    for _, w in ipairs(e) do err("warning: " .. w.message) end
  end
  out(core.json_encode(value == nil and luma.null or value, { indent = 2 }))
  return 0
end

-- "90s", "15m", "12h", "7d" as ms, or nil.
local function duration_ms(text)
  local n, unit = text:match("^(%d+)([smhd])$")
  if not n then return nil end
  return math.tointeger(tonumber(n) * ({ s = 1000, m = 60000, h = 3600000, d = 86400000 })[unit])
end

-- An age in ms, short: 42s, 5m, 3h, 2d.
local function age_text(ms)
  local s = ms // 1000
  if s < 60 then return s .. "s" end
  if s < 3600 then return s // 60 .. "m" end
  if s < 48 * 3600 then return s // 3600 .. "h" end
  return s // 86400 .. "d"
end

-- runs [PROGRAM] [--config FILE] [--journal PATH|URL] [--json] [--prune] [--older-than DURATION]
function commands.runs(args)
  local o, i = {}, 1
  local options = { "--config", "--journal", "--json", "--prune", "--older-than" }
  while i <= #args do
    local a = args[i]
    if a == "--config" or a == "--journal" or a == "--older-than" then
      if not args[i + 1] then return usage_error(a .. " needs a value") end
      o[a:sub(3)] = args[i + 1]
      i = i + 2
    elseif a == "--json" or a == "--prune" then
      o[a:sub(3)] = true
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      return usage_error(unknown_option(a, options, "runs"))
    elseif o.program then
      return usage_error("runs takes one PROGRAM, not '" .. o.program .. "' and '" .. a .. "'")
    else
      o.program = a
      i = i + 1
    end
  end
  local older = luma.RUNS_RETENTION_MS
  if o["older-than"] then
    if not o.prune then return usage_error("--older-than goes with --prune") end
    older = duration_ms(o["older-than"])
    if not older then
      return usage_error("--older-than must be a number followed by s, m, h or d (7d), not '" .. o["older-than"] .. "'")
    end
  end
  local journal = journal_arg(o.journal)
  if not journal then
    local config = require "luma.config"
    local path = o.config or (o.program and config.find(o.program))
    if not path then
      return usage_error("runs needs --journal PATH|URL, or a PROGRAM whose luma.config.json has a \"journal\"")
    end
    local ok, cfg = pcall(config.read, path)
    if not ok then
      print_load_error(cfg)
      return 1
    end
    journal = cfg.journal
    if not journal then
      err("Error: " .. path .. " has no \"journal\" (give --journal PATH|URL)")
      return 1
    end
  end
  -- a SQLite path that names no file is a mistake, not a new journal to make
  local file = type(journal) == "string" and journal or journal.type ~= "redis" and journal.path
  if file and not io.open(file, "rb") then
    err("Error: there is no journal at '" .. file .. "'")
    return 1
  end
  local ok, result
  if o.prune then
    ok, result = pcall(luma.prune_runs, journal, older)
  else
    ok, result = pcall(luma.runs, journal)
  end
  if not ok then
    err("Error: " .. (luma.is_error(result) and ("[" .. result.code .. "] " .. result.message) or tostring(result)))
    return 1
  end
  if o.prune then
    out("pruned " .. result .. (result == 1 and " run" or " runs") .. " (ended or abandoned, last changed more than " ..
      age_text(older) .. " ago)")
    return 0
  end
  if o.json then
    out(core.json_encode(result))
    return 0
  end
  if #result == 0 then
    out("no runs")
    return 0
  end
  local rows, widths = { { "ID", "STATUS", "STEP", "AGE", "OWNER" } }, {}
  for _, r in ipairs(result) do
    rows[#rows + 1] = { r.id, r.status, r.step ~= "" and r.step or "-", age_text(r.age_ms), r.owner ~= "" and r.owner or "-" }
  end
  for _, row in ipairs(rows) do
    for c, cell in ipairs(row) do widths[c] = math.max(widths[c] or 0, utf8.len(cell) or #cell) end
  end
  for _, row in ipairs(rows) do
    local cells = {}
    for c, cell in ipairs(row) do
      cells[c] = c < #row and cell .. string.rep(" ", widths[c] - (utf8.len(cell) or #cell)) or cell
    end
    out(table.concat(cells, "  "))
  end
  return 0
end

function commands.tools(args)
  local program, status = program_argument(args, "tools", 2)
  if not program then return status end
  out(program:tools { format = "json" })
  return 0
end

local RUN_OPTIONS = { "--tool-module", "--config", "--agent", "--method", "--input", "--trace", "--record",
  "--replay", "--replay-seed", "--journal", "--journal-lease-ms", "--stream", "--stream-events", "--emit-lua",
  "--generate-tool-types", "--allow-unknown-models" }

local function parse_run_args(args)
  local o = { tool_modules = {} }
  local i = 1
  local function value(flag)
    i = i + 1
    if args[i] == nil then error({ usage = flag .. " needs a value" }) end
    return args[i]
  end
  while i <= #args do
    local a = args[i]
    if a == "--tool-module" then o.tool_modules[#o.tool_modules + 1] = value(a)
    elseif a == "--config" then o.config = value(a)
    elseif a == "--agent" then o.agent = value(a)
    elseif a == "--method" then o.method = value(a)
    elseif a == "--input" then o.input = value(a)
    elseif a == "--trace" then o.trace = value(a)
    elseif a == "--record" then o.record = value(a)
    elseif a == "--replay" then o.replay = value(a)
    elseif a == "--journal" then o.journal = value(a)
    elseif a == "--journal-lease-ms" then
      o.journal_lease_ms = math.tointeger(tonumber(value(a)))
      if not o.journal_lease_ms then error({ usage = "--journal-lease-ms needs an integer, got '" .. args[i] .. "'" }) end
    elseif a == "--stream" then o.stream = true
    elseif a == "--stream-events" then o.stream_events = true
    elseif a == "--replay-seed" then
      o.replay_seed = math.tointeger(tonumber(value(a)))
      if not o.replay_seed then error({ usage = "--replay-seed needs an integer, got '" .. args[i] .. "'" }) end
    elseif a == "--emit-lua" then o.emit_lua = true
    elseif a == "--allow-unknown-models" then o.allow_unknown_models = true
    elseif a == "--generate-tool-types" then o.types = value(a)
    elseif a:sub(1, 2) == "--" then error({ usage = unknown_option(a, RUN_OPTIONS) })
    elseif o.program then error({ usage = "more than one PROGRAM: '" .. o.program .. "' and '" .. a .. "'" })
    else o.program = a end
    i = i + 1
  end
  if not o.program then error({ usage = "run needs a PROGRAM" }) end
  if (o.method or o.input) and not o.agent then error({ usage = "--method and --input go with --agent" }) end
  if o.stream and o.stream_events then
    error({ usage = "--stream and --stream-events do not go together: one prints the text, the other every event" })
  end
  if o.replay_seed and not o.replay then error({ usage = "--replay-seed goes with --replay" }) end
  return o
end

-- A failure before the program runs (loading it, its handlers, the agent, the
-- method and its arguments) exits 2 with the message; one while it runs
-- exits 1 with the code as well. Which one is told by where it was raised.
local function report(e, before_run)
  if not luma.is_error(e) then
    err("Error: " .. tostring(e))
    return 1
  end
  if before_run then
    print_load_error(e)
    return 2
  end
  err("Error: [" .. tostring(e.code) .. "] " .. tostring(e.message))
  return 1
end

-- How a run shows its asks' events (README: Streaming) -> on_event, or nil
-- when it does not listen (then the asks do not stream, as before there was
-- streaming): --stream-events prints every event as a JSON line on stdout;
-- --stream prints the answer's text to stdout, and without a flag it goes to
-- stderr when that is a terminal. The text of each turn ends its line, and
-- a retry says that what was shown is void.
local function streamer(o)
  if o.stream_events then
    return function(ev)
      io.stdout:write(core.json_encode(ev, { max_depth = core.limits.json_depth_cap }), "\n")
      io.stdout:flush()
    end
  end
  local sink = o.stream and io.stdout or (core.isatty(2) and io.stderr) or nil
  if not sink then return nil end
  return require("luma.textstream").new(function(s)
    sink:write(s)
    sink:flush()
  end, function(ev)
    err("luma-lua: retrying (" .. tostring(ev.reason) .. "); the text above is void")
  end)
end

-- The answer (or the outcome's value) as the command prints it: 0, or 1 with
-- the error.
local function print_result(result, one_line)
  -- what the statements built may nest deeper than json_encode's default;
  -- after JSON lines of events, the result is one line too
  local encoded, text = pcall(core.json_encode, result == nil and luma.null or result,
    { indent = (not one_line) and 2 or nil, max_depth = core.limits.json_depth_cap })
  if not encoded then
    return report(luma.error { code = "JSON_INVALID", message = "the result cannot be printed as JSON: " ..
      tostring(luma.is_error(text) and text.message or text) })
  end
  out(text)
  return 0
end

function commands.run(args)
  local ok, o = pcall(parse_run_args, args)
  if not ok then
    if type(o) == "table" and o.usage then return usage_error(o.usage) end
    error(o, 0)
  end
  if o.types then
    -- the contracts only: no config, no module, nothing runs
    local compiled, program = pcall(luma.load, o.program, { config = false })
    if not compiled then return report(program, true) end
    local text, why = require("luma.types").for_file(program, o.types)
    if not text then return usage_error(why) end
    local f, ferr = io.open(o.types, "wb")
    if not f then return report(luma.error { code = "IO_ERROR", message = "cannot write '" .. o.types .. "': " ..
      tostring(ferr):gsub("^[^:]*: ", "") }, true) end
    f:write(text)
    f:close()
    return 0
  end
  local loaded, program = pcall(luma.load, o.program, {
    tool_modules = o.tool_modules, config = o.config, trace = o.trace, record = o.record, replay = o.replay,
    replay_seed = o.replay_seed, journal = journal_arg(o.journal), journal_lease_ms = o.journal_lease_ms,
    on_event = on_event, allow_unknown_models = o.allow_unknown_models,
  })
  if not loaded then return report(program, true) end
  if o.emit_lua then
    io.stdout:write(program:emit_lua())
    return 0
  end
  local input = {}
  if o.input then
    local text, why = json_text(o.input)
    if not text then return report(luma.error { code = "INPUT_INVALID", message = "--input: " .. why }, true) end
    local decoded, value = pcall(core.json_decode, text)
    if not decoded then
      return report(luma.error { code = "INPUT_INVALID", message = "--input is not valid JSON: " .. value.message }, true)
    end
    if type(value) ~= "table" or getmetatable(value) == core.array_mt then
      return report(luma.error { code = "INPUT_INVALID", message = "--input must be a JSON object of the method's arguments" }, true)
    end
    input = value
  end
  local prepared, run = pcall(function()
    if o.agent then return program:agent(o.agent):prepare(o.method or "run", input) end
    return program:prepare()
  end)
  if not prepared then return report(run, true) end
  local listener = streamer(o)
  local ran, result
  if listener then
    -- the method runs as a future, its asks streaming to the listener
    ran, result = pcall(function()
      local f = require("luma.future").start(run, listener)
      f:wait()
      return f:result()
    end)
  else
    ran, result = pcall(run)
  end
  if not ran then return report(result) end
  return print_result(result, o.stream_events)
end

local RESUME_OPTIONS = { "--journal", "--journal-lease-ms", "--config", "--tool-module", "--trace", "--stream",
  "--stream-events" }

-- luma-lua resume RUN PROGRAM [--journal PATH|URL] [...]
function commands.resume(args)
  local o, positional, i = { tool_modules = {} }, {}, 1
  while i <= #args do
    local a = args[i]
    local function value()
      i = i + 1
      if args[i] == nil then return nil, usage_error(a .. " needs a value") end
      return args[i]
    end
    local v, status
    if a == "--journal" or a == "--config" or a == "--trace" or a == "--tool-module" or a == "--journal-lease-ms" then
      v, status = value()
      if not v then return status end
      if a == "--tool-module" then o.tool_modules[#o.tool_modules + 1] = v
      elseif a == "--journal-lease-ms" then
        o.journal_lease_ms = math.tointeger(tonumber(v))
        if not o.journal_lease_ms then return usage_error("--journal-lease-ms needs an integer, got '" .. v .. "'") end
      else o[a:sub(3)] = v end
    elseif a == "--stream" then o.stream = true
    elseif a == "--stream-events" then o.stream_events = true
    elseif a:sub(1, 2) == "--" then return usage_error(unknown_option(a, RESUME_OPTIONS, "resume"))
    else positional[#positional + 1] = a end
    i = i + 1
  end
  if #positional ~= 2 then return usage_error("resume needs RUN PROGRAM") end
  if o.stream and o.stream_events then
    return usage_error("--stream and --stream-events do not go together: one prints the text, the other every event")
  end
  local loaded, program = pcall(luma.load, positional[2], {
    tool_modules = o.tool_modules, config = o.config, trace = o.trace, journal = journal_arg(o.journal),
    journal_lease_ms = o.journal_lease_ms, on_event = on_event,
  })
  if not loaded then return report(program, true) end
  local listener = streamer(o)
  local ran, result = pcall(program.resume, program, positional[1], listener and { on_event = listener } or nil)
  if not ran then return report(result) end
  return print_result(result, o.stream_events)
end

-- luma-lua approve RUN CALL PROGRAM [--journal PATH|URL] [--config FILE] [--input JSON]
-- luma-lua deny RUN CALL PROGRAM [--journal PATH|URL] [--config FILE] --reason TEXT
local function decide(command, args)
  local options = command == "approve" and { "--journal", "--config", "--input" } or { "--journal", "--config", "--reason" }
  local o, positional, i = {}, {}, 1
  while i <= #args do
    local a = args[i]
    local known = false
    for _, k in ipairs(options) do known = known or k == a end
    if known then
      i = i + 1
      if args[i] == nil then return usage_error(a .. " needs a value") end
      o[a:sub(3)] = args[i]
    elseif a:sub(1, 2) == "--" then return usage_error(unknown_option(a, options, command))
    else positional[#positional + 1] = a end
    i = i + 1
  end
  if #positional ~= 3 then return usage_error(command .. " needs RUN CALL PROGRAM") end
  if command == "deny" and not o.reason then return usage_error("deny needs --reason TEXT: the model is told it") end
  local input
  if o.input then
    local text, why = json_text(o.input)
    if not text then return report(luma.error { code = "INPUT_INVALID", message = "--input: " .. why }, true) end
    input = text
  end
  local loaded, program = pcall(luma.load, positional[3], { config = o.config, journal = journal_arg(o.journal) })
  if not loaded then return report(program, true) end
  local ok, e = pcall(program.decide, program, positional[1], positional[2], command == "approve", o.reason, input)
  if not ok then return report(e) end
  out(command == "approve" and "approved" or "denied")
  return 0
end

function commands.approve(args) return decide("approve", args) end
function commands.deny(args) return decide("deny", args) end

-- The words the command takes for commands of its own, for did-you-mean.
local function command_names()
  local names = { "help", "version" }
  for name in pairs(commands) do names[#names + 1] = name end
  table.sort(names)
  return names
end

-- A word that is not a command: the nearest one, or the list.
local function no_such_command(word)
  local near = core.suggest(word, command_names())
  return usage_error("no such command '" .. word .. "'" ..
    (near and (" (did you mean '" .. near .. "'?)") or ("; the commands are " .. table.concat(command_names(), ", "))))
end

-- help [COMMAND]: the usage, or one command's help.
local function help(name)
  if name == nil then
    io.stdout:write(USAGE)
    return 0
  end
  if not HELP[name] then return no_such_command(name) end
  io.stdout:write(HELP[name])
  return 0
end

function cli.main(arg)
  local first = arg[1]
  if first == nil then return commands.repl({}) end
  if first == "--help" or first == "-h" then return help(nil) end
  if (first == "help" or first == "version") and (arg[2] == "--help" or arg[2] == "-h") then return help(first) end
  if first == "help" then
    if #arg > 2 then return usage_error("help takes one COMMAND") end
    return help(arg[2])
  end
  if first == "--version" or first == "-v" or first == "version" then
    if #arg > 1 then return usage_error(first .. " takes no arguments") end
    out("luma-lua " .. core.version .. " (" .. core.lua_release .. ")")
    return 0
  end
  local args = {}
  local command = commands[first]
  if command and (arg[2] == "--help" or arg[2] == "-h") then return help(first) end
  if command then
    for i = 2, #arg do args[#args + 1] = arg[i] end
  elseif first:sub(1, 1) ~= "-" then
    -- a bare word that names no file is a command mistyped, not a program
    -- (a path has a '/' or a '.', as program.luma has)
    local f = io.open(first, "r")
    if f then
      f:close()
    elseif not first:find("[/.]") then
      return no_such_command(first)
    end
    command = commands.run
    for i = 1, #arg do args[#args + 1] = arg[i] end
  else
    return usage_error("unknown option '" .. first .. "'")
  end
  return command(args)
end

return cli
