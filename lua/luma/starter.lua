-- The starter project `luma-lua init [DIR]` writes: a contract, its
-- handlers, a config with the strict sandbox, and a spec. Everything in it
-- runs at once: check, a run, an agent method, the REPL, busted.
return {
  { "program.luma", [[
# A starter luma program: one tool contract, and an agent that calls it.
# Try:  luma-lua check program.luma
#       luma-lua program.luma
#       luma-lua program.luma --agent Greeter --input '{"name": "Ada"}'
#       luma-lua repl program.luma

schema Greeting {
  text: string @length(1, 200)
}

tool greet(name: string @length(1, 100) @desc("Who to greet")) -> Greeting {
  description: "Greets someone by name"
  side_effects: "none"
  timeout: 1000
}

agent Greeter {
  tools: [greet]

  fn run(name: string) -> Greeting {
    return tool greet({ name: name })
  }
}

# what `luma-lua program.luma` runs: its variables are printed as JSON
hello = tool greet({ name: "world" })
]] },
  { "tools.lua", [[
-- The handlers of program.luma's tools: function(input, signal, needs).
-- input has been validated against the contract; the result is validated
-- against its return schema. They run in a sandboxed Lua 5.4 state
-- (luma.config.json: tool_module_policy).
return {
  greet = function(input)
    return { text = "Hello, " .. input.name .. "!" }
  end,
}
]] },
  { "luma.config.json", [[
{
  "tool_modules": ["tools.lua"],
  "tool_module_policy": { "sandbox": "strict", "max_memory_mb": 64, "max_concurrency": 2 }
}
]] },
  { "spec/greet_spec.lua", [[
-- Run from the project's folder: busted --lua=lua5.4 spec
local luma = require "luma"

describe("greet", function()
  local program = luma.load("program.luma")

  it("greets by name", function()
    assert.are.same({ text = "Hello, Ada!" }, program:call("greet", { name = "Ada" }))
  end)

  it("refuses an empty name before the handler runs", function()
    local ok, err = pcall(program.call, program, "greet", { name = "" })
    assert.is_false(ok)
    assert.are.equal("TOOL_INPUT_INVALID", err.code)
  end)

  it("runs through the agent", function()
    assert.are.same({ text = "Hello, Bo!" }, program:agent("Greeter"):call("run", { name = "Bo" }))
  end)
end)
]] },
}
