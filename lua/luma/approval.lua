-- The host's side of tool_policy "approval": the core asks, the host
-- decides. This is the decision luma.load and the CLI give by default: a
-- write tool runs when it is listed in LUMA_APPROVED_TOOLS (comma-separated),
-- or when the user says yes at an interactive terminal; otherwise it does not.
local core = require "luma.core"

local approval = {}

local function trim(s) return (s:gsub("^%s+", ""):gsub("%s+$", "")) end

-- Whether `tool` is listed in the comma-separated `list`.
function approval.listed(list, tool)
  for name in (list or ""):gmatch("[^,]+") do
    if trim(name) == tool then return true end
  end
  return false
end

-- Asks at the terminal; anywhere else the answer is no, and why: no one could
-- be asked (a durable ask's run then waits for a person's decision).
function approval.ask(tool)
  if not (core.isatty(0) and core.isatty(2)) then return false, "no terminal to ask at" end
  io.stderr:write("Allow the write tool '", tool, "' to run? [y/N] ")
  io.stderr:flush()
  local line = io.stdin:read("l")
  return line ~= nil and (line:sub(1, 1) == "y" or line:sub(1, 1) == "Y")
end

-- approve(tool, agent) -> boolean, reading the environment through `getenv`.
function approval.default(getenv)
  getenv = getenv or os.getenv
  return function(tool)
    if approval.listed(getenv("LUMA_APPROVED_TOOLS"), tool) then return true end
    return approval.ask(tool)
  end
end

return approval
