-- The ask bench/agent/run.lua and bench/peers time: TURNS turns of CALLS
-- calls of the tool `add`, then an answer { total } of their count; the mock
-- provider's script for it, and the program, with `add` as a host handler
-- (program:register) or a tool module's (tools.lua, in the module's states).
-- Needs the module paths of bench/common.lua's setup.
local luma = require "luma"

local M = { CALLS = 3, PROMPT = "Add the numbers the tools give you." }

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
M.TOOLS = here .. "/tools.lua"

local SOURCE = [[
schema Sum { sum: int }
schema Answer { total: int, note?: string }
tool add(a: int, b: int) -> Sum { description: "Adds two integers" }
model M {
  provider: "openai"
  name: "gpt-bench"
  base_url: "%s/v1"
  api_key_env: "BENCH_KEY"
}
agent A {
  model: M
  tools: [add]
  tool_rate_limit: 1000
  tool_concurrency: 3
}
]]

-- The mock's script of one ask with `turns` turns of CALLS calls each.
function M.script(turns)
  local steps = {}
  for t = 1, turns do
    local calls = {}
    for c = 1, M.CALLS do
      calls[c] = { id = ("call_%d_%d"):format(t, c), type = "function",
                   ["function"] = { name = "add", arguments = luma.json.encode { a = t, b = c } } }
    end
    steps[t] = { json = { choices = { { index = 0, finish_reason = "tool_calls",
      message = { role = "assistant", content = luma.null, tool_calls = calls } } },
      usage = { prompt_tokens = 100 * t, completion_tokens = 20 } } }
  end
  steps[turns + 1] = { json = { choices = { { index = 0, finish_reason = "stop",
    message = { role = "assistant", content = '{"total":' .. turns * M.CALLS .. '}' } } } } }
  return steps
end

local function lookup(name) if name == "BENCH_KEY" then return "sk-bench" end end

-- The program against the provider at url; handler "host" (the default) or
-- "module". opts: program:configure's (record, replay).
function M.program(url, handler, opts)
  local source = SOURCE:format(url)
  local p
  if handler == "module" then
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(source)
    f:close()
    local ok, loaded = pcall(luma.load, path, { tool_modules = { M.TOOLS }, config = false, lookup = lookup })
    os.remove(path)
    p = assert(ok and loaded, loaded)
  else
    p = luma.compile(source)
    p:register("add", function(i) return { sum = i.a + i.b } end)
    p:configure { lookup = lookup }
  end
  if opts then p:configure(opts) end
  return p
end

-- One ask; its answer's total (TURNS * CALLS when all went well).
function M.ask(p)
  return p:agent("A"):ask(M.PROMPT, "Answer").total
end

return M
