local h = require "spec.helpers"

-- The C sources of luma.core as the Makefile lists them.
local function makefile_sources()
  local text = h.read(h.root .. "/Makefile"):gsub("\\\n", " ")
  local sources = {}
  for _, var in ipairs { "BASE", "SANDBOX", "ADAPTERS", "CORE_PURE", "CORE_LUA" } do
    local list = assert(text:match("\n" .. var .. "%s*=%s*([^\n]*)"), var)
    for file in list:gmatch("%S+") do sources[#sources + 1] = file end
  end
  return sources
end

-- Runs a shell command outside the sanitizer run's preloaded runtime.
local function build(cmd)
  local ok = os.execute("env -u LD_PRELOAD -u ASAN_OPTIONS sh -c " .. h.quote(cmd))
  return ok == true or ok == 0
end

local function rockspec()
  local env = {}
  local chunk = assert(loadfile(h.root .. "/rockspec/luma-lua-scm-1.rockspec", "t", env))
  chunk()
  return env
end

describe("the rockspec", function()
  it("builds luma.core from the same sources as the Makefile", function()
    assert.are.same(makefile_sources(), rockspec().build.modules["luma.core"].sources)
  end)

  it("maps every Lua module of lua/luma", function()
    local modules = rockspec().build.modules
    local listed = {}
    for name, file in pairs(modules) do
      if type(file) == "string" then listed[#listed + 1] = file end
    end
    table.sort(listed)
    local present = {}
    local p = assert(io.popen("ls " .. h.root .. "/lua/luma/*.lua"))
    for line in p:lines() do present[#present + 1] = line:sub(#h.root + 2) end
    p:close()
    table.sort(present)
    assert.are.same(present, listed)
  end)

  -- luarocks make itself: spec/26-install_spec.lua
end)

describe("the C core", function()
  it("builds against LuaJIT's Lua 5.1 API and works there", function()
    local dir = h.tmpname("-jit")
    local sources = table.concat(makefile_sources(), " ")
    local script = h.write(dir .. ".lua", [[
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = arg[1] .. "/?.so;" .. package.cpath
local luma = require "luma"
local p = luma.compile('schema R { v: int }\ntool t(a: float @range(0, 10), n?: int @default(3)) -> R {}')
local input = { a = 2 }
assert(p:validate("__tool_t_input", input) == true and input.n == 3)
local ok, err = p:validate("__tool_t_input", { a = 11 })
assert(ok == nil and err.message == "t.input.a must be at most 10", tostring(err))
assert(#p:tools() == 1)
local good, bad = pcall(luma.compile, "schema A { x: Nope }")
assert(not good and bad.code == "PROGRAM_INVALID")
-- the sandbox needs Lua 5.4's hooks and allocator: a policy is refused here
local ok, refused = pcall(require("luma.core").load_module, { path = "tools.lua", policy = { sandbox = "strict" } })
assert(not ok and refused.code == "CONFIG_INVALID", tostring(refused))
io.write("ok")
]])
    local cmd = string.format(
      "mkdir -p %s/luma && cd %s && " .. "cc -std=c99 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -O1 -fPIC -shared " ..
      "-I/usr/include/luajit-2.1 -Ibase -Isandbox -Iadapters -Icore %s -lmbedcrypto -lsqlite3 -lhiredis -lpthread -lm -ldl -o %s/luma/core.so && " .. "luajit %s %s > %s/out.txt",
      dir, h.root, sources, dir, script, dir, dir)
    assert.is_true(build(cmd))
    assert.are.equal("ok", h.read(dir .. "/out.txt"))
    os.execute("rm -rf " .. h.quote(dir) .. " " .. h.quote(script))
  end)
end)

describe("libraries loaded at their first use", function()
  -- base/libcurl.c loads libcurl at the first HTTP request, core/lineedit.c
  -- libedit when the REPL starts: the command's start (--version, check,
  -- help) maps neither, nor the thirty-odd libraries they need
  local BUILD = h.root .. "/" .. (os.getenv("LUMA_BUILD") or "build")

  local function links(file)
    local status, out = h.sh("ldd " .. h.quote(BUILD .. "/" .. file))
    assert.are.equal(0, status, out)
    return out
  end

  it("libcurl is linked by none of the command, luma.core and libluma", function()
    for _, file in ipairs { "luma-lua", "luma/core.so", "libluma.so" } do
      local out = links(file)
      assert.is_nil(out:find("libcurl", 1, true), file .. " links libcurl:\n" .. out)
    end
  end)

  it("libedit is not linked by the command", function()
    local out = links("luma-lua")
    assert.is_nil(out:find("libedit", 1, true), "luma-lua links libedit:\n" .. out)
  end)

  it("libcurl is loaded by the first request, not by loading and compiling a program", function()
    local script = h.write(h.tmpname(".lua"), [[
package.path = arg[1] .. "/lua/?.lua;" .. arg[1] .. "/lua/?/init.lua;" .. package.path
package.cpath = arg[2] .. "/?.so;" .. package.cpath
local function mapped()
  for line in io.lines("/proc/self/maps") do if line:find("libcurl", 1, true) then return "mapped" end end
  return "absent"
end
local luma = require "luma"
-- a model on a port nothing listens on: the request fails, after libcurl is loaded
local p = luma.compile('schema A { v: int }\nmodel M { provider: "openai", name: "m", base_url: "http://127.0.0.1:1/v1", ' ..
  'api_key_env: "K", retries: 0 }\nagent G { model: M, tools: [] }')
p:configure { lookup = function() return "k" end }
io.write(mapped(), " ")
local ok, err = pcall(function() return p:agent("G"):ask("hi", "A") end)
io.write(mapped(), " ", tostring(not ok and err.code))
]])
    local status, out, err = h.sh("lua5.4 " .. h.quote(script) .. " " .. h.quote(h.root) .. " " .. h.quote(BUILD))
    os.remove(script)
    assert.are.equal(0, status, out .. err)
    assert.are.equal("absent mapped ASK_PROVIDER_ERROR", out)
  end)

  it("luma.load of a program that asks a model loads libcurl then, not in its first request (a game's frame)", function()
    local program = h.write(h.tmpname(".luma"), 'schema A { v: int }\nmodel M { provider: "openai", name: "m", ' ..
      'base_url: "http://127.0.0.1:1/v1", api_key_env: "K" }\nagent G { model: M, tools: [] }\n')
    local plain = h.write(h.tmpname(".luma"), 'schema A { v: int }\n')
    local script = h.write(h.tmpname(".lua"), [[
package.path = arg[1] .. "/lua/?.lua;" .. arg[1] .. "/lua/?/init.lua;" .. package.path
package.cpath = arg[2] .. "/?.so;" .. package.cpath
local function mapped()
  for line in io.lines("/proc/self/maps") do if line:find("libcurl", 1, true) then return "mapped" end end
  return "absent"
end
local luma = require "luma"
luma.load(arg[4])
io.write(mapped(), " ")
luma.load(arg[3])
io.write(mapped())
]])
    local status, out, err = h.sh("lua5.4 " .. h.quote(script) .. " " .. h.quote(h.root) .. " " .. h.quote(BUILD) ..
      " " .. h.quote(program) .. " " .. h.quote(plain))
    os.remove(script)
    os.remove(program)
    os.remove(plain)
    assert.are.equal(0, status, out .. err)
    assert.are.equal("absent mapped", out)
  end)
end)

describe("make test and make valgrind", function()
  -- The recipe that runs the suites, as make prints it (-n), run with a
  -- busted that leaves a file in TMPDIR and fails: the run must fail and
  -- leave nothing behind (issue 10 item 14).
  for _, target in ipairs { "test", "valgrind" } do
    it(target .. " leaves nothing in TMPDIR, even when a suite fails", function()
      local dir = h.tmpname("-make")
      assert(os.execute("mkdir -p " .. h.quote(dir .. "/tmp")))
      local ok, err = pcall(function()
        local fake = dir .. "/busted"
        h.write(fake, "#!/bin/sh\nmkdir -p \"$TMPDIR/luma-spec-left\" && echo x > \"$TMPDIR/luma-spec-left/f\"\nexit 1\n")
        assert(os.execute("chmod +x " .. h.quote(fake)))
        local results = dir .. "/results"
        local p = assert(io.popen("cd " .. h.quote(h.root) .. " && env -u LD_PRELOAD -u ASAN_OPTIONS -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -n -s " ..
          target .. " BUSTED=" .. h.quote(fake) .. " VALGRIND= CTESTS= RESULTS=" .. h.quote(results) .. " 2>&1"))
        local printed = p:read("*a")
        p:close()
        local recipe = printed:match("\n(rm %-f " .. results:gsub("%p", "%%%0") .. ".-exit %$status)")
        assert(recipe, "no suite recipe in make -n " .. target .. ":\n" .. printed)
        h.write(dir .. "/recipe.sh", recipe .. "\n")
        local status = os.execute("cd " .. h.quote(h.root) .. " && env -u LD_PRELOAD TMPDIR=" .. h.quote(dir .. "/tmp") ..
          " sh " .. h.quote(dir .. "/recipe.sh") .. " >/dev/null 2>&1")
        assert.is_not.equal(true, status)
        local ls = assert(io.popen("ls -A " .. h.quote(dir .. "/tmp")))
        local left = ls:read("*a")
        ls:close()
        assert.are.equal("", left)
      end)
      os.execute("rm -rf " .. h.quote(dir))
      assert(ok, err)
    end)
  end
end)
