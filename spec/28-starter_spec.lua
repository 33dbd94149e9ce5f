-- luma-lua init, and the help of every command.
local h = require "spec.helpers"

local command = h.root .. "/bin/luma-lua"

local function luma_lua(dir, args)
  return h.sh("cd " .. h.quote(dir) .. " && " .. h.quote(command) .. " " .. args)
end

describe("luma-lua init", function()
  it("writes a starter project that checks, runs, runs its agent and passes its spec at once", function()
    local dir = h.tmpname("-starter")
    local status, out, err = luma_lua(h.root, "init " .. h.quote(dir))
    assert.are.equal(0, status, err)
    for _, f in ipairs { "program.luma", "tools.lua", "luma.config.json", "spec/greet_spec.lua" } do
      assert.matches("wrote " .. dir:gsub("%p", "%%%0") .. "/" .. f:gsub("%p", "%%%0"), out)
    end
    assert.matches('"sandbox": "strict"', h.read(dir .. "/luma.config.json"))
    status, out = luma_lua(dir, "check program.luma")
    assert.are.same({ 0, "ok\n" }, { status, out })
    status, out = luma_lua(dir, "program.luma")
    assert.are.equal(0, status)
    assert.matches('"Hello, world!"', out)
    status, out = luma_lua(dir, "program.luma --agent Greeter --input '{\"name\": \"Ada\"}'")
    assert.are.equal(0, status)
    assert.matches('"Hello, Ada!"', out)
    status, out, err = h.sh("cd " .. h.quote(dir) .. " && LUA_PATH=" .. h.quote(h.root .. "/lua/?.lua;" .. h.root ..
      "/lua/?/init.lua;;") .. " LUA_CPATH=" .. h.quote(h.root .. "/" .. (os.getenv("LUMA_BUILD") or "build") ..
      "/?.so;;") .. " busted --lua=lua5.4 -o plainTerminal spec")
    assert.are.equal(0, status, out .. err)
    assert.matches("3 successes / 0 failures", out)
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("prints next steps that work as printed, from a checkout without make install", function()
    local dir = h.tmpname("-starter")
    local status, out, err = luma_lua(h.root, "init " .. h.quote(dir))
    assert.are.equal(0, status, err)
    local steps = out:match("\nNext, in [^\n]*:\n(.*)$")
    assert.is_truthy(steps, out)
    assert.matches("make install", steps, 1, true)
    local n = 0
    for line in steps:gmatch("  ([^\n]+)") do
      n = n + 1
      -- run as a user would, with no luma-lua on PATH
      local s, o, e = h.sh("cd " .. h.quote(dir) .. " && PATH=/usr/bin:/bin " .. line .. " < /dev/null")
      assert.are.equal(0, s, line .. "\n" .. o .. e)
    end
    assert.are.equal(5, n)
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("never overwrites a file", function()
    local dir = h.project { ["tools.lua"] = "return {}" }
    local status, _, err = luma_lua(dir, "init")
    assert.are.equal(1, status)
    assert.matches("%./tools%.lua exists", err)
    assert.are.equal("return {}", h.read(dir .. "/tools.lua"))
    local f = io.open(dir .. "/program.luma")
    assert.is_nil(f)
    os.execute("rm -rf " .. h.quote(dir))
  end)
end)

describe("luma-lua CMD --help", function()
  it("documents each command, and every option run takes", function()
    for _, cmd in ipairs { "run", "check", "tools", "schema", "validate", "repl", "init" } do
      local status, out = luma_lua(h.root, cmd .. " --help")
      assert.are.equal(0, status, cmd)
      assert.matches("^usage: luma%-lua[^\n]*" .. cmd, out)
    end
    local _, help = luma_lua(h.root, "run --help")
    local _, top = luma_lua(h.root, "--help")
    local source = h.read(h.root .. "/lua/luma/cli.lua")
    local options = source:match("local function parse_run_args.-\nend\n")
    for option in options:gmatch('"(%-%-[%w-]+)"') do
      assert.matches(option:gsub("%p", "%%%0"), help)
      assert.matches(option:gsub("%p", "%%%0"), top)
    end
  end)
end)
