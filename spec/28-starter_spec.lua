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
    for _, cmd in ipairs { "run", "resume", "approve", "deny", "check", "tools", "schema", "validate", "runs", "repl", "init" } do
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

describe("the man page", function()
  -- the page as text: roff's escaped hyphens and font changes taken out
  local function page()
    return (h.read(h.root .. "/dist/luma-lua.1"):gsub("\\%-", "-"):gsub("\\f[BIRP]", ""))
  end

  it("has every command, option and variable that --help and each command's --help name", function()
    local man = page()
    local _, top = luma_lua(h.root, "--help")
    local commands = {}
    for line in top:match("\ncommands:\n(.-)\n\n"):gmatch("[^\n]+") do
      local entry = line:match("^  (%S.-)%s%s") or line:match("^  (%S.*)$")
      local word = entry and entry:gsub("^%(none%), ", ""):gsub("^%[", ""):match("^(%l+)")
      if word then commands[word] = true end
    end
    local names = {}
    for c in pairs(commands) do names[#names + 1] = c end
    table.sort(names)
    assert.are.same({ "approve", "check", "deny", "help", "init", "mcp", "repl", "resume", "run", "runs", "schema", "tools",
      "validate", "version" }, names)
    local synopsis = man:match("\n%.SH SYNOPSIS\n(.-)\n%.SH ")
    for _, c in ipairs(names) do
      -- in the synopsis, and an entry of its own under COMMANDS
      assert.matches("%f[%l]" .. c .. "%f[^%l]", synopsis, 1, false, c .. " is not in the synopsis")
      assert.matches("\n%.B[IR]? " .. c .. "[ \n]", man, 1, false, c .. " has no entry under COMMANDS")
    end
    local texts = { top }
    for _, c in ipairs { "run", "resume", "approve", "deny", "check", "tools", "schema", "validate", "mcp", "runs", "repl", "init", "version",
                         "help" } do
      local _, text = luma_lua(h.root, c .. " --help")
      texts[#texts + 1] = text
    end
    for _, text in ipairs(texts) do
      for option in text:gmatch("%-%-[%w-]+") do
        assert.is_truthy(man:find(option, 1, true), option .. " is not in the man page")
      end
      for option in text:gmatch("[ ,]%-(%a)[%s,]") do
        assert.is_truthy(man:find("-" .. option, 1, true), "-" .. option .. " is not in the man page")
      end
      for var in text:gmatch("%$([%u_][%u_]+)") do
        assert.matches("\n%.B " .. var .. "\n", man, 1, false, var .. " is not in ENVIRONMENT")
      end
      for file in text:gmatch("~/%.?[%w_-]+") do
        assert.is_truthy(man:find(file, 1, true), file .. " is not in FILES")
      end
    end
  end)
end)
