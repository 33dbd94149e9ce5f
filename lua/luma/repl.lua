-- The luma-lua REPL: `:commands` for programs, tools and agents, and Lua
-- for everything else, with `program` and `luma` in scope.
--
-- At a terminal it edits lines with libedit (luma.lineedit, built into the
-- command): history in $LUMA_HISTORY or ~/.luma_history, tab completion,
-- asks stream their text, Ctrl-C cancels what runs (or clears the line),
-- Ctrl-D leaves. Otherwise it
-- reads commands line by line, without prompts or colours, and exits with 1
-- when any command failed, so that it can be scripted.
local luma = require "luma"
local core = require "luma.core"

local repl = {}

local COMMANDS = {
  { "load", "PROGRAM", "load a .luma program, with its config and tool modules" },
  { "reload", "", "load the program, its config and its modules again" },
  { "tools", "", "list the program's tools" },
  { "schema", "NAME", "print the JSON Schema of a schema (or of a tool's input)" },
  { "call", "TOOL {json}", "call a tool through the whole pipeline: its result and its telemetry event" },
  { "validate", "SCHEMA {json}", "validate a value: it with its defaults filled, or every violation" },
  { "agent", "NAME", "choose the agent of :run and :ask" },
  { "run", "METHOD {json}", "run a method of the current agent" },
  { "ask", "\"prompt\" -> Schema", "ask the current agent's model for a value of the schema" },
  { "trace", "on|off", "print every telemetry event as it happens" },
  { "help", "[COMMAND]", "this list, or one command's help" },
  { "quit", "", "leave (Ctrl-D too)" },
}
local BY_NAME = {}
for _, c in ipairs(COMMANDS) do BY_NAME[c[1]] = c end

local HELP_MORE = {
  load = "The program's luma.config.json is read from its folder unless --config said otherwise.",
  call = "The JSON may span lines: the REPL reads on until it is complete. Ctrl-C cancels the call\n" ..
    "(its handler's signal fires).",
  run = "The arguments are a JSON object; the method runs without blocking the REPL: Ctrl-C cancels it.\n" ..
    "At a terminal, the text of its asks' answers shows as the model writes it.",
  ask = "Needs the model's API key in its variable (api_key_env). At a terminal, the answer's text shows\n" ..
    "as the model writes it, then the value; Ctrl-C cancels the ask.",
}

-- ------------------------------------------------------------- output

local S   -- the session

local function paint(code, s)
  if not S.color then return s end
  return "\27[" .. code .. "m" .. s .. "\27[0m"
end

local function say(s) io.stdout:write(s, "\n") io.stdout:flush() end

local function fail(message)
  S.failed = true
  io.stderr:write(paint("31", message), "\n")
  io.stderr:flush()
end

local function fail_error(e)
  if luma.is_error(e) then
    local text = "Error: [" .. e.code .. "] " .. e.message
    local diagnostics = e.details and e.details.diagnostics
    if diagnostics and #diagnostics > 1 then
      local lines = {}
      for _, d in ipairs(diagnostics) do lines[#lines + 1] = d.text end
      text = table.concat(lines, "\n")
    end
    fail(text)
  else
    fail("Error: " .. tostring(e))
  end
end

-- JSON text, its keys coloured at a terminal
local function paint_keys(text)
  if S.color then text = text:gsub('\n(%s*)("[^"\n]-"):', function(sp, k) return "\n" .. sp .. paint("36", k) .. ":" end) end
  return text
end

-- JSON, indented, keys coloured at a terminal
local function json(v)
  return paint_keys(core.json_encode(v == nil and luma.null or v, { indent = 2 }))
end

local function show(v)
  if type(v) == "table" then
    local ok, text = pcall(json, v)
    if ok then return text end
  end
  if type(v) == "string" then return v end
  return tostring(v)
end

-- ------------------------------------------------------------ programs

local function on_event(e)
  if e.kind == "warning" then io.stderr:write(paint("33", "warning: " .. e.message), "\n") return end
  S.events[#S.events + 1] = e
  if S.trace then say(paint("2", "event: " .. core.json_encode(e))) end
end

local function load_program(path)
  local ok, p = pcall(luma.load, path, {
    config = S.config, tool_modules = S.modules, on_event = on_event,
  })
  if not ok then return fail_error(p) end
  if S.program then S.program:close() end
  S.program, S.path = p, path
  S.env.program = p
  local d = p:declarations()
  if not (S.agent and p:declaration(S.agent)) then S.agent = d.agents[1] end
  say(("loaded %s: %d tools, %d schemas, %d agents%s"):format(path, #d.tools, #d.schemas, #d.agents,
    S.agent and (" (agent " .. S.agent .. ")") or ""))
  return true
end

local function need_program()
  if S.program then return S.program end
  fail("no program: :load PROGRAM first")
end

-- Waits for a future; Ctrl-C cancels it. -> ok, results of f:result()
local function drive(f)
  local lineedit = S.lineedit
  local ok, err
  if lineedit then
    ok, err = lineedit.interruptible(function() while not f:wait(50) do end end)
  else
    ok, err = pcall(f.wait, f)
  end
  if not ok then
    if tostring(err):find("interrupted!", 1, true) then
      f:cancel()
      f:wait(5000)
    else
      return false, err
    end
  end
  return pcall(f.result, f)
end

-- What a start (pcall of it) gave: its future waited for, then its result
-- shown, or the error of either.
local function show_future(started, f)
  if not started then return fail_error(f) end
  local ok, result = drive(f)
  if ok then say(json(result)) else fail_error(result) end
end

-- At a terminal, what :ask and :run pass as on_event: the answers' text,
-- dimmed, as the model writes it (README: Streaming); through a pipe, nil:
-- the asks do not stream, and the output is the result alone.
local function streaming()
  if not S.tty then return nil end
  return { on_event = require("luma.textstream").new(function(s)
    io.stdout:write(paint("2", s))
    io.stdout:flush()
  end, function(ev)
    io.stderr:write(paint("33", "retrying (" .. tostring(ev.reason) .. "); the text above is void"), "\n")
  end) }
end

-- "NAME rest" -> NAME, rest
local function word(rest)
  local w, more = rest:match("^%s*(%S+)%s*(.-)%s*$")
  return w, more or ""
end

local function decode(text, what)
  if text == "" then return {} end
  local ok, v = pcall(core.json_decode, text)
  if ok then return v end
  fail("the " .. what .. " is not JSON: " .. (luma.is_error(v) and v.message or tostring(v)))
end

-- ------------------------------------------------------------ commands

local run_command = {}

function run_command.help(rest)
  local name = word(rest)
  if name then
    name = name:gsub("^:", "")
    local c = BY_NAME[name]
    if not c then return fail("no command :" .. name .. " (:help lists them)") end
    say(":" .. c[1] .. (c[2] ~= "" and (" " .. c[2]) or "") .. "\n  " .. c[3])
    if HELP_MORE[name] then say("  " .. HELP_MORE[name]:gsub("\n", "\n  ")) end
    return
  end
  for _, c in ipairs(COMMANDS) do
    say(("  :%-28s %s"):format(c[1] .. (c[2] ~= "" and (" " .. c[2]) or ""), c[3]))
  end
  say("Anything else is Lua, with `program` and `luma` in scope; an expression prints its value.")
end

function run_command.quit() S.quit = true end

function run_command.load(rest)
  local path = word(rest)
  if not path then return fail(":load needs a PROGRAM") end
  load_program(path)
end

function run_command.reload()
  if not S.path then return fail("no program: :load PROGRAM first") end
  load_program(S.path)
end

function run_command.tools()
  local p = need_program()
  if not p then return end
  for _, t in ipairs(p:tools()) do
    say(paint("1", t.name) .. (t.description and t.description ~= "" and ("  " .. t.description) or ""))
  end
end

function run_command.schema(rest)
  local p = need_program()
  if not p then return end
  local name = word(rest)
  if not name then return fail(":schema needs a NAME") end
  local target, why = p:schema_target(name)
  if not target then return fail("Error: " .. why) end
  say(paint_keys(p:json_schema(target, { format = "json" })))
end

function run_command.validate(rest)
  local p = need_program()
  if not p then return end
  local name, text = word(rest)
  if not name then return fail(":validate needs SCHEMA {json}") end
  local target, why = p:schema_target(name)
  if not target then return fail("Error: " .. why) end
  local value = decode(text, "value")
  if value == nil then return end
  local ok, v, err = pcall(p.validate, p, target, value)
  if not ok then return fail_error(v) end
  if not v then
    for _, violation in ipairs(err.details and err.details.violations or { { message = err.message } }) do
      fail(violation.message)
    end
    return
  end
  say(json(value))
end

function run_command.call(rest)
  local p = need_program()
  if not p then return end
  local tool, text = word(rest)
  if not tool then return fail(":call needs TOOL {json}") end
  local input = decode(text, "input")
  if input == nil then return end
  S.events = {}
  show_future(pcall(p.start, p, tool, input))
  for _, e in ipairs(S.events) do say(paint("2", "event: " .. core.json_encode(e))) end
end

function run_command.agent(rest)
  local p = need_program()
  if not p then return end
  local name = word(rest)
  if not name then return say(S.agent and ("agent " .. S.agent) or "no agent") end
  local d = p:declaration(name)
  if not d or d.kind ~= "agent" then
    local near = core.suggest(name, p:declarations().agents)
    return fail("no agent named '" .. name .. "'" .. (near and (". Did you mean '" .. near .. "'?") or ""))
  end
  S.agent = name
  say("agent " .. name .. ": methods " .. table.concat(d.methods, ", "))
end

function run_command.run(rest)
  local p = need_program()
  if not p then return end
  if not S.agent then return fail("the program has no agent") end
  local method, text = word(rest)
  local args = decode(text, "arguments")
  if args == nil then return end
  show_future(pcall(function() return p:agent(S.agent):start(method or "run", args, streaming()) end))
end

function run_command.ask(rest)
  local p = need_program()
  if not p then return end
  if not S.agent then return fail("the program has no agent") end
  local prompt, schema = rest:match('^%s*"(.-)"%s*%->%s*([%w_]+)%s*$')
  if not prompt then return fail(':ask needs "prompt" -> Schema') end
  prompt = prompt:gsub('\\"', '"')
  show_future(pcall(function() return p:agent(S.agent):start_ask(prompt, schema, streaming()) end))
end

function run_command.trace(rest)
  local v = word(rest)
  if v == "on" then S.trace = true elseif v == "off" then S.trace = false
  else return fail(":trace on|off") end
  say("trace " .. v)
end

-- ------------------------------------------------------------------ Lua

-- Compiles a chunk as lua5.4 does: an expression first, then statements.
-- -> function | nil, message, incomplete?
local function compile(text)
  local fn, why = load("return " .. text, "=stdin", "t", S.env)
  if fn then return fn end
  local err
  fn, err = load(text, "=stdin", "t", S.env)
  if fn then return fn end
  -- more is to come when either reading stopped at the end of the text
  return nil, err, err:sub(-5) == "<eof>" or why:sub(-5) == "<eof>"
end

local function run_lua(fn)
  local results
  local function collect(...) results = table.pack(...) end
  local ok, err
  if S.lineedit then
    ok, err = S.lineedit.interruptible(function() collect(fn()) end)
  else
    ok, err = pcall(function() collect(fn()) end)
  end
  if not ok then
    if not luma.is_error(err) and tostring(err):find("interrupted!", 1, true) then return fail("interrupted") end
    return fail("Error: " .. (luma.is_error(err) and ("[" .. err.code .. "] " .. err.message) or tostring(err)))
  end
  if results and results.n > 0 then
    -- values on one line, tab-separated, as lua5.4 prints them; a table's
    -- JSON takes lines of its own (program:run() gives the variables, then
    -- their names)
    local parts, tables = {}, false
    for i = 1, results.n do
      parts[i] = show(results[i])
      tables = tables or type(results[i]) == "table"
    end
    say(table.concat(parts, tables and "\n" or "\t"))
  end
end

-- ----------------------------------------------------------- the loop

-- Whether a command's text is complete (a JSON value may span lines).
local function complete_command(text)
  local name, rest = text:match("^:(%a+)%s*(.*)$")
  if not (name == "call" or name == "validate" or name == "run") then return true end
  local _, value = word(rest)
  if value == "" then return true end
  local ok, e = pcall(core.json_decode, value)
  return ok or not tostring(luma.is_error(e) and e.message or e):find("end of input", 1, true)
end

-- One entry (perhaps several lines): a command or Lua.
local function execute(text)
  if text:match("^%s*$") then return end
  local name, rest = text:match("^%s*:(%a*)%s*(.-)%s*$")
  if name then
    local fn = run_command[name]
    if not fn then
      local names = {}
      for _, c in ipairs(COMMANDS) do names[#names + 1] = c[1] end
      local near = core.suggest(name, names)
      return fail("unknown command :" .. name .. (near and (" (did you mean :" .. near .. "?)") or "") ..
        "; :help lists them")
    end
    return fn(rest)
  end
  local fn, err = compile(text)
  if not fn then return fail(err) end
  run_lua(fn)
end

-- What completes the word at the cursor; then what follows a unique match:
-- nothing after a table, whose fields come next (libedit's default is a space).
local function completer(w, before)
  local out = {}
  local function add(list, prefix)
    for _, s in ipairs(list) do
      if s:sub(1, #w - #(prefix or "")) == w:sub(#(prefix or "") + 1) then out[#out + 1] = (prefix or "") .. s end
    end
  end
  local p = S.program
  if before:match("^%s*$") and w:sub(1, 1) == ":" then
    local names = {}
    for _, c in ipairs(COMMANDS) do names[#names + 1] = c[1] end
    add(names, ":")
    return out
  end
  local cmd = before:match("^%s*:(%a+)%s+$")
  if cmd and p then
    local d = p:declarations()
    if cmd == "call" then add(d.tools)
    elseif cmd == "schema" or cmd == "validate" then add(d.schemas) add(d.tools)
    elseif cmd == "agent" then add(d.agents)
    elseif cmd == "run" and S.agent then add(p:declaration(S.agent).methods)
    elseif cmd == "help" then
      local names = {}
      for _, c in ipairs(COMMANDS) do names[#names + 1] = c[1] end
      add(names)
    end
    return out
  end
  -- Lua: globals, or the fields of a table (a.b.c)
  local path, last = w:match("^(.*)%.([%w_]*)$")
  local scope = S.env
  if path then
    for part in path:gmatch("[^.]+") do
      scope = type(scope) == "table" and scope[part] or nil
    end
  end
  local seen, names = {}, {}
  local function keys(t)
    if type(t) ~= "table" then return end
    for k in pairs(t) do
      if type(k) == "string" and not seen[k] then seen[k] = true names[#names + 1] = k end
    end
  end
  keys(scope)
  if not path then keys(_G) end
  if type(scope) == "table" and getmetatable(scope) and type(getmetatable(scope).__index) == "table" then
    keys(getmetatable(scope).__index)
  end
  table.sort(names)
  local prefix = path and (path .. ".") or ""
  local want = path and last or w
  local tables = 0
  for _, k in ipairs(names) do
    if k:sub(1, #want) == want then
      out[#out + 1] = prefix .. k
      local ok, v = pcall(function() return scope[k] end)
      if ok and type(v) == "table" then tables = tables + 1 end
    end
  end
  return out, (#out == 1 and tables == 1) and "" or nil
end

local function history_file()
  local f = os.getenv("LUMA_HISTORY")
  if f and f ~= "" then return f end
  local home = os.getenv("HOME")
  return home and (home .. "/.luma_history") or nil
end

-- opts: { program, config, tool_modules } -> exit status
function repl.main(opts)
  local tty = core.isatty(0) and core.isatty(1)
  local ok, lineedit = pcall(require, "luma.lineedit")
  S = {
    modules = opts.tool_modules or {}, config = opts.config, events = {}, failed = false,
    tty = tty, color = tty and (os.getenv("NO_COLOR") or "") == "" and os.getenv("TERM") ~= "dumb",
    lineedit = tty and ok and lineedit or nil,
  }
  S.env = setmetatable({ luma = luma }, { __index = _G })
  if opts.program then load_program(opts.program) end
  local history = S.lineedit and history_file()
  if S.lineedit then
    if history then S.lineedit.read_history(history) end
    S.lineedit.set_completer(completer)
    say("luma-lua " .. luma.version .. " REPL: :help for the commands, Ctrl-D to leave")
  end
  local lines = not S.lineedit and io.stdin:lines() or nil
  local function read(prompt)
    if S.lineedit then return S.lineedit.readline(prompt) end
    return lines()
  end
  while not S.quit do
    local line = read("luma> ")
    if line == nil then break end
    if line ~= false then
      local text = line
      -- more lines while a Lua chunk or a command's JSON is incomplete
      while true do
        local more
        if text:match("^%s*:") then
          more = not complete_command(text)
        else
          local fn, _, incomplete = compile(text)
          more = not fn and incomplete
        end
        if not more then break end
        local next_line = read("   >> ")
        if next_line == false then text = nil break end   -- Ctrl-C drops it
        if next_line == nil then break end   -- the input ends: what there is runs, and fails
        text = text .. "\n" .. next_line
      end
      if text then
        if S.lineedit and text:match("%S") then
          S.lineedit.add_history(text)
          if history then S.lineedit.write_history(history) end
        end
        local fine, err = pcall(execute, text)
        if not fine then fail("Error: " .. tostring(err)) end
      end
    end
  end
  if S.lineedit then io.stdout:write("\n") end
  if S.program then S.program:close() end
  return (not S.tty and S.failed) and 1 or 0
end

return repl
