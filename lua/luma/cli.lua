-- The luma-lua command line. `main(arg)` returns the exit status.
local luma = require "luma"

local cli = {}

local USAGE = [[
usage: luma-lua <command> [arguments]

commands:
  check PROGRAM        check a .luma program; print "ok", or every error
  tools PROGRAM        print the program's tool declarations as JSON
                       ({ name, description, parameters } for each tool)
  --version, -v        print the version
  --help, -h           print this help

Exit status: 0 on success, 1 when check finds errors, 2 for a program that
does not load or a command line that is not understood.
]]

local function out(s) io.stdout:write(s, "\n") end
local function err(s) io.stderr:write(s, "\n") end

local function usage_error(message)
  err("luma-lua: " .. message)
  err("Run 'luma-lua --help' for usage.")
  return 2
end

-- Loads a program; on failure returns nil and the structured error.
local function load_program(path)
  local ok, result = pcall(luma.load, path)
  if ok then return result end
  if not luma.is_error(result) then error(result, 0) end
  return nil, result
end

local function print_load_error(e)
  local diagnostics = e.details and e.details.diagnostics
  if diagnostics then
    for _, d in ipairs(diagnostics) do err(d.text) end
    if #diagnostics > 1 then err(#diagnostics .. " errors") end
  else
    err("Error: " .. e.message)
  end
end

-- The program named by a command's one argument, or nil and the exit status
-- after saying what is wrong.
local function program_argument(args, command, failure_status)
  if #args ~= 1 then return nil, usage_error(command .. " needs one PROGRAM") end
  local program, e = load_program(args[1])
  if not program then
    print_load_error(e)
    return nil, failure_status
  end
  return program
end

local commands = {}

function commands.check(args)
  local program, status = program_argument(args, "check", 1)
  if not program then return status end
  out("ok")
  return 0
end

function commands.tools(args)
  local program, status = program_argument(args, "tools", 2)
  if not program then return status end
  out(program:tools { format = "json" })
  return 0
end

function cli.main(arg)
  local first = arg[1]
  if first == nil then
    io.stderr:write(USAGE)
    return 2
  end
  if first == "--help" or first == "-h" or first == "help" then
    io.stdout:write(USAGE)
    return 0
  end
  if first == "--version" or first == "-v" then
    out("luma-lua " .. luma.version .. " (" .. (require "luma.core").lua_release .. ")")
    return 0
  end
  local command = commands[first]
  if not command then return usage_error("unknown command '" .. first .. "'") end
  local args = {}
  for i = 2, #arg do args[#args + 1] = arg[i] end
  return command(args)
end

return cli
