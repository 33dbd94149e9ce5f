-- Embedding: libluma's exports, LuaJIT through the FFI binding, a C game loop
-- that never blocks a frame, and a C program running its own lua_State.
-- (The C API itself is tested by spec/c/test_libluma.c.)
local luma = require "luma"
local h = require "spec.helpers"

-- The frame bound: 5 ms; under ASan libluma itself is instrumented, slower at
-- everything (the child processes are never under valgrind).
-- Under `make valgrind` the game is not under valgrind either, but the
-- machine is: the suite runs in two valgrind processes at once, which
-- take both CPUs, so a frame's bound there is what preemption allows.
local FRAME_MS = h.by_instrumentation(5, 15, 50)
local mock = require "spec.support.mock_provider"

local build = h.root .. "/" .. (os.getenv("LUMA_BUILD") or "build")
local libluma = build .. "/libluma.so"

local sh = h.sh

-- A compiler run outside the sanitizer's preloaded runtime.
local function cc(args)
  local status, _, err = sh("env -u LD_PRELOAD -u ASAN_OPTIONS cc -std=c99 -Wall -Wextra -Werror " .. args)
  assert(status == 0, err)
end

local copy_example = h.copy_example

describe("libluma", function()
  it("exports only luma_* symbols, so it loads next to any other Lua", function()
    local status, out = sh("nm -D --defined-only " .. h.quote(libluma))
    assert.are.equal(0, status)
    local names = {}
    for name in out:gmatch("%x+ %a ([%w_@.]+)") do names[#names + 1] = name end
    assert.is_true(#names >= 16, out)
    for _, name in ipairs(names) do assert.matches("^luma_", name) end
    -- and needs no Lua library of the system
    local _, deps = sh("readelf -d " .. h.quote(libluma))
    assert.is_nil(deps:match("liblua"), deps)
  end)
end)

local PROGRAM = [[
schema Sum { total: int }
schema Text { v: string }
schema Pick { number: int }
schema Depth { depth: int }
tool add(a: int, b: int) -> Sum { }
tool echo(v: any) -> Depth { }
tool slow(ms: int) -> Text { timeout: 10000 }
tool spin() -> Text { timeout: 10000 }
tool hog() -> Text { timeout: 10000 }
tool forever() -> Text { timeout: 300 }
tool host_add(a: int, b: int) -> Sum { handler: "host" }
model M { provider: "openai"
  name: "gpt-test"
  base_url: "%s/v1/"
  api_key_env: "LUMA_TEST_KEY" }
agent A {
  model: M
  tools: [add]
  fn twice(x: int) -> int {
    s = tool add({ a: x, b: x })
    return s.total
  }
}
]]

local TOOLS = [[
return {
  add = function(i) return { total = i.a + i.b } end,
  echo = function(i)
    local function depth(v)
      if type(v) ~= "table" then return 0 end
      local d = 0
      for _, x in pairs(v) do d = math.max(d, depth(x)) end
      return d + 1
    end
    return { depth = depth(i.v) }
  end,
  slow = function(i, signal)
    local c = os.clock()
    while os.clock() - c < i.ms / 1000 and not signal.aborted do end
    return { v = "slept" }
  end,
  spin = function(i, signal) while not signal.aborted do end return { v = signal.reason } end,
  hog = function() local t = {} for i = 1, 1e8 do t[i] = ("x"):rep(64) .. i end return { v = "no" } end,
  forever = function() while true do end end,
}
]]

local CONFIG = [[
{ "tool_modules": ["tools.lua"],
  "tool_module_policy": { "sandbox": "strict", "allow_builtins": ["os"], "max_memory_mb": 32, "max_concurrency": 4 } }
]]

describe("LuaJIT through the FFI binding (luma.ffi)", function()
  local server

  setup(function() server = mock.start() end)
  teardown(function() if server then server:stop() end end)

  local function luajit(script)
    local dir = h.project {
      ["program.luma"] = PROGRAM:format(server.url),
      ["tools.lua"] = TOOLS,
      ["luma.config.json"] = CONFIG,
      ["host.lua"] = "package.path = " .. string.format("%q", h.root .. "/lua/?.lua;") .. " .. package.path\n" ..
        "local luma = require('luma.ffi').open(" .. string.format("%q", libluma) .. ")\n" ..
        "local dir = " .. string.format("%q", "") .. "\n" .. script,
    }
    local status, out, err = sh("cd " .. h.quote(dir) .. " && LUMA_TEST_KEY=sk-test luajit host.lua")
    os.execute("rm -rf " .. h.quote(dir))
    assert(status == 0, out .. err)
    return out
  end

  it("runs LuaJIT with libluma's private Lua 5.4: calls, methods, errors and futures", function()
    local out = luajit [[
      assert(jit and jit.version, "not LuaJIT")
      local rt = luma.runtime { workers = 2 }
      local p = rt:load("program.luma")
      local f = p:start("add", { a = 1, b = 2 })
      while not f:ready() do end
      print("add", f:result().total)
      local m = p:agent("A"):start("twice", { x = 21 })
      assert(m:wait(5000))
      print("twice", m:result())
      local ok, e = pcall(p.start, p, "add", "{bad")
      print("bad json", e.code)
      ok, e = pcall(p.start, p, "nope", {})
      print("unknown", e.code)
      local bad = p:start("add", { a = "x", b = 1 })
      bad:wait()
      ok, e = pcall(bad.result, bad)
      print("invalid", e.code)
      local s = p:start("spin")
      assert(not s:wait(20))
      s:cancel()
      assert(s:wait(2000))
      ok, e = pcall(s.result, s)
      print("cancel", e.code)
      -- await in a coroutine yields the future; a scheduler resumes it
      local co = coroutine.create(function() return p:start("add", { a = 2, b = 2 }):await().total end)
      local yields, r = 0, { coroutine.resume(co) }
      while coroutine.status(co) ~= "dead" do yields = yields + 1 r = { coroutine.resume(co) } end
      print("await", r[2])
      rt:close()
      ok, e = pcall(p.start, p, "add", {})
      print("closed", e.code)
    ]]
    assert.are.equal(table.concat({
      "add\t3", "twice\t42", "bad json\tJSON_INVALID", "unknown\tTOOL_NOT_FOUND", "invalid\tTOOL_INPUT_INVALID",
      "cancel\tTOOL_CANCELLED", "await\t4", "closed\tINVALID_ARGUMENT", "" }, "\n"), out)
  end)

  -- luma_start decodes the JSON into the call itself (core.start_json), with
  -- the bounds and messages of the Lua API given the decoded value: each
  -- case is a Lua expression of the JSON text
  local INPUTS = {
    [["{bad"]], [["null"]], [["[1, 2]"]], [['"text"']], [["{}"]], [['{"v": {"a": [1, "x", null]}}']],
    -- 100 levels (the object and 99 arrays): decoded; 101: JSON_INVALID
    [['{"v": ' .. ("["):rep(99) .. ("]"):rep(99) .. "}"]],
    [['{"v": ' .. ("["):rep(100) .. ("]"):rep(100) .. "}"]],
    -- a string one byte longer than the limits' max_string_bytes
    [['{"v": "' .. ("x"):rep(16 * 1024 * 1024 + 1) .. '"}']],
  }

  it("gives a JSON input the outcome the Lua API gives its decoded value: bad JSON, nesting, size, null", function()
    local dir = h.project {
      ["program.luma"] = PROGRAM:format(server.url),
      ["tools.lua"] = TOOLS,
      ["luma.config.json"] = CONFIG,
    }
    local p = luma.load(dir .. "/program.luma")
    local want = {}
    for i, expr in ipairs(INPUTS) do
      local ok, v = pcall(luma.json.decode, assert(load("return " .. expr))())
      local code, text
      if not ok then
        code, text = v.code, "the input is not JSON: " .. v.message
      else
        if v == luma.null then v = {} end
        local f = p:start("echo", v)
        assert(f:wait(10000))
        local fine, r = pcall(f.result, f)
        if fine then code, text = "ok", luma.json.encode(r) else code, text = r.code, r.message end
      end
      want[#want + 1] = i .. "\t" .. code .. "\t" .. text
    end
    p:close()
    os.execute("rm -rf " .. h.quote(dir))
    want = table.concat(want, "\n") .. "\n"
    local inputs = "local INPUTS = {"
    for _, expr in ipairs(INPUTS) do inputs = inputs .. "function() return " .. expr .. " end," end
    for _, inline in ipairs { "true", "false" } do
      local out = luajit(inputs .. "}\nlocal rt = luma.runtime { workers = 2, inline = " .. inline .. " }\n" .. [[
        local p = rt:load("program.luma")
        for i, json in ipairs(INPUTS) do
          local ok, f = pcall(p.start, p, "echo", json())
          if not ok then
            print(i, f.code, f.message)
          else
            assert(f:wait(10000))
            local fine, out, code, message = f:json()
            if fine then print(i, "ok", out) else print(i, code, message) end
          end
        end
        rt:close()
      ]])
      assert.are.equal(want, out)
    end
  end)

  it("runs the host's own handlers (luma_register), on the thread that polls", function()
    local out = luajit [[
      local rt = luma.runtime { workers = 2 }
      local p = rt:load("program.luma")
      local calls = 0
      p:register("host_add", function(input, needs)
        calls = calls + 1
        if input.a < 0 then error({ code = "TOOL_ERROR", message = "no negatives", retryable = false }) end
        if input.a == 0 then error("plain", 0) end
        assert(needs == nil or type(needs) == "table")
        return { total = input.a + input.b }
      end)
      -- polled in a loop the JIT would compile: the callback still works
      for i = 1, 200 do
        local f = p:start("host_add", { a = i, b = 1 })
        while not f:ready() do end
        assert(f:result().total == i + 1)
      end
      print("calls", calls)
      local f = p:start("host_add", { a = -1, b = 1 })
      f:wait()
      local ok, e = pcall(f.result, f)
      print("raised", e.code, e.message)
      f = p:start("host_add", { a = 0, b = 1 })
      f:wait()
      ok, e = pcall(f.result, f)
      print("plain", e.code, e.message)
      ok, e = pcall(p.register, p, "nope", function() end)
      print("unknown", e.code)
      ok, e = pcall(p.register, p, "add", function() end)
      print("taken", e.code)
      rt:close()
    ]]
    assert.are.equal(table.concat({ "calls\t200", "raised\tTOOL_ERROR\tno negatives",
      'plain\tTOOL_FAILED\tthe C handler of \'host_add\' failed: {"message":"plain"}',
      "unknown\tTOOL_NOT_FOUND", "taken\tTOOL_REGISTRY_CONFLICT", "" }, "\n"), out)
  end)

  it("enforces the sandbox's limits there: memory and deadline fail the call, the host lives on", function()
    local out = luajit [[
      local rt = luma.runtime { workers = 2 }
      local p = rt:load("program.luma")
      for _, tool in ipairs { "hog", "forever", "add" } do
        local f = p:start(tool, tool == "add" and { a = 1, b = 1 } or {})
        assert(f:wait(10000))
        local ok, e = pcall(f.result, f)
        print(tool, ok and "ok" or e.code)
      end
    ]]
    assert.are.equal("hog\tTOOL_MEMORY_LIMIT\nforever\tTOOL_TIMEOUT\nadd\tok\n", out)
  end)

  it("iterates an ask's events as it streams, in a coroutine that yields while it waits", function()
    server:reset()
    server:script { { stream = { delay_ms = 30 }, json = mock.chat('{"number":7}').json } }
    local out = luajit [[
      local rt = luma.runtime {}
      local p = rt:load("program.luma")
      local a = p:agent("A"):start_ask("Pick a number", "Pick", { events = true })
      local types, yields = {}, 0
      local co = coroutine.create(function()
        for ev in a:events() do types[#types + 1] = ev.type end
      end)
      while coroutine.status(co) ~= "dead" do
        assert(coroutine.resume(co))
        yields = yields + 1
      end
      print(table.concat(types, " "), yields > 3, a:result().number)
    ]]
    assert.matches("^text_delta text_delta .*usage turn_end finish\ttrue\t7\n$", out)
  end)

  it("gives the events of an ask started without events = true from then on, and a done one's finish alone", function()
    server:reset()
    server:script { { stream = { delay_ms = 30 }, json = mock.chat('{"number":7}').json },
      { json = mock.chat('{"number":8}').json } }
    local out = luajit [[
      local rt = luma.runtime {}
      local p = rt:load("program.luma")
      local a = p:agent("A"):start_ask("Pick a number", "Pick")
      local types = {}
      for ev in a:events() do types[#types + 1] = ev.type end
      print(table.concat(types, " "), a:result().number)
      local b = p:agent("A"):start_ask("Pick a number", "Pick")
      b:wait()
      types = {}
      for ev in b:events() do types[#types + 1] = ev.type .. " " .. tostring(ev.ok) .. " " .. ev.answer.number end
      print(table.concat(types, ","))
      local ok, e = pcall(function() return p:start("add", { a = 1, b = 2 }):events() end)
      print(ok, e.code, e.message)
    ]]
    assert.matches("^[%w_ ]*turn_end finish\t7\nfinish true 8\nfalse\tINVALID_ARGUMENT\tevents: only an ask has events %(agent:start_ask%)\n$", out)
  end)

  it("asks the model without blocking", function()
    server:reset()
    server:script { { delay_ms = 200, json = mock.chat('{"number":7}').json } }
    local out = luajit [[
      local rt = luma.runtime {}
      local p = rt:load("program.luma")
      local a = p:agent("A"):start_ask("Pick a number", "Pick")
      local polls = 0
      while not a:ready() do polls = polls + 1 rt:poll() local s = os.clock() while os.clock() - s < 0.001 do end end
      print(a:result().number, polls > 20)
    ]]
    assert.are.equal("7\ttrue\n", out)
  end)
end)

describe("a C game loop (examples/game-loop)", function()
  it("keeps every frame under 5 ms while a 500 ms tool, calls, a method and an ask run", function()
    local server = mock.start()
    local dir
    local ok, err = pcall(function()
      dir = copy_example("game-loop")
      local program = h.read(dir .. "/game.luma"):gsub("http://127.0.0.1:8080", server.url)
      h.write(dir .. "/game.luma", program)
      cc(h.quote(dir .. "/main.c") .. " -I" .. h.quote(h.root .. "/core") .. " -L" .. h.quote(build) ..
        " -lluma -Wl,-rpath," .. h.quote(build) .. " -o " .. h.quote(dir .. "/game-loop"))
      local out
      local worst = h.frames_within(FRAME_MS, function()
        server:reset()
        server:script { { delay_ms = 300, json = mock.chat('{"number":42}').json } }
        local status, stdout, stderr = sh("cd " .. h.quote(dir) .. " && GAME_API_KEY=sk-test ./game-loop game.luma 90 --ask")
        assert(status == 0, stdout .. stderr)
        out = stdout
        return tonumber(out:match("worst frame: ([%d.]+) ms")), out
      end)
      assert.matches("think %(500 ms%) %-> {\"idea\":\"thought for 500 ms\"}", out)
      assert.matches("Helper.two_dice %-> 5", out)
      assert.matches("ask %-> {\"number\":42}", out)
      local think = tonumber(out:match("frame (%d+): think"))
      assert.is_true(think >= 25, "the 500 ms tool finished at frame " .. think .. ": frames did not tick while it ran")
      assert.is_true(worst < FRAME_MS, "worst frame " .. worst .. " ms\n" .. out)
    end)
    server:stop()
    if dir then os.execute("rm -rf " .. h.quote(dir)) end
    assert(ok, err)
  end)
end)

describe("a C program with its own lua_State (examples/lua-host)", function()
  it("calls tools from its scripts through require 'luma'", function()
    local dir = copy_example("lua-host")
    cc(h.quote(dir .. "/host.c") .. " -I/usr/include/lua5.4 -llua5.4 -o " .. h.quote(dir .. "/lua-host"))
    local status, out, err = sh("cd " .. h.quote(dir) .. " && LUMA_LUADIR=" .. h.quote(h.root .. "/lua") ..
      " LUMA_CPATH=" .. h.quote(build .. "/?.so") .. " ./lua-host game.lua")
    os.execute("rm -rf " .. h.quote(dir))
    assert(status == 0, out .. err)
    assert.matches("frame %d+: greet %-> Hello, Ada!", out)
    assert.matches("frames while the call ran: %d+", out)
    local frames = tonumber(out:match("frames while the call ran: (%d+)"))
    assert.is_true(frames > 5, out)
  end)
end)

describe("the README's Embedding section", function()
  local section = h.read(h.root .. "/README.md"):match("\n## Embedding\n(.-)\n## ")
  local blocks = {}
  for lang, code in section:gmatch("```(%w+)\n(.-)```") do blocks[#blocks + 1] = { lang = lang, code = code } end

  local function in_example(fn)
    local dir = copy_example("lua-host")
    local ok, err = pcall(fn, dir)
    os.execute("rm -rf " .. h.quote(dir))
    assert(ok, err)
  end

  it("has a C snippet that compiles against luma.h and runs", function()
    assert.are.equal("c", blocks[1].lang)
    in_example(function(dir)
      h.write(dir .. "/snippet.c", blocks[1].code)
      cc(h.quote(dir .. "/snippet.c") .. " -I" .. h.quote(h.root .. "/core") .. " -L" .. h.quote(build) ..
        " -lluma -Wl,-rpath," .. h.quote(build) .. " -o " .. h.quote(dir .. "/snippet"))
      local status, out, err = sh("cd " .. h.quote(dir) .. " && ./snippet")
      assert(status == 0, out .. err)
      assert.are.equal('{"text":"Hello, Ada!"}\n', out)
    end)
  end)

  it("has a C snippet that stops with the error when the call cannot start", function()
    local code, n = blocks[1].code:gsub('luma_start%(p, "greet"', 'luma_start(p, "no_such_tool"')
    assert.are.equal(1, n, "the snippet starts no call of greet")
    in_example(function(dir)
      h.write(dir .. "/snippet.c", code)
      cc(h.quote(dir .. "/snippet.c") .. " -I" .. h.quote(h.root .. "/core") .. " -L" .. h.quote(build) ..
        " -lluma -Wl,-rpath," .. h.quote(build) .. " -o " .. h.quote(dir .. "/snippet"))
      -- a snippet that spins on a call it never had is stopped after 10 s (status 124)
      local status, out, err = sh("cd " .. h.quote(dir) .. " && timeout 10 ./snippet")
      assert.are.equal(1, status, out .. err)
      assert.matches("^TOOL_NOT_FOUND: .*no_such_tool", err)
    end)
  end)

  it("has a Lua 5.4 snippet and a LuaJIT snippet that run", function()
    assert.are.same({ "lua", "lua" }, { blocks[2].lang, blocks[3].lang })
    in_example(function(dir)
      h.write(dir .. "/host.lua", "package.path = " .. string.format("%q", h.root .. "/lua/?.lua;" .. h.root ..
        "/lua/?/init.lua;") .. " .. package.path\npackage.cpath = " .. string.format("%q", build .. "/?.so;") ..
        " .. package.cpath\n" .. blocks[2].code)
      local status, out, err = sh("cd " .. h.quote(dir) .. " && lua5.4 host.lua")
      assert(status == 0, out .. err)
      assert.are.equal("Hello, Ada!\n", out)
      h.write(dir .. "/jit.lua", "package.path = " .. string.format("%q", h.root .. "/lua/?.lua;") ..
        " .. package.path\n" .. blocks[3].code)
      status, out, err = sh("cd " .. h.quote(dir) .. " && LUMA_LIBRARY=" .. h.quote(libluma) .. " luajit jit.lua")
      assert(status == 0, out .. err)
      assert.are.equal("Hello, Ada!\n", out)
    end)
  end)
end)

describe("the README's concurrency settings", function()
  it("are those examples/openresty runs with (spec/24: 20 calls of 300 ms at once)", function()
    local section = h.read(h.root .. "/README.md"):match("\n## Embedding\n(.-)\n## ")
    local text = section:match("%*%*How many calls at once%.%*%*(.-)\n\n%*%*") or section:match("%*%*How many calls at once%.%*%*(.*)")
    assert.is_truthy(text, "no paragraph on how many calls run at once")
    assert.matches("max_concurrency`%s+is%s+1", text)
    assert.matches("one%s+thread%s+per%s+CPU", text)
    local policy = text:match("```json\n(.-)```")
    local config = luma.json.decode(h.read(h.root .. "/examples/openresty/luma.config.json"))
    assert.are.same(config.tool_module_policy, luma.json.decode(policy).tool_module_policy)
    local runtime = text:match("`(app%.runtime =%s*luma%.runtime%b())`")
    assert.is_truthy(runtime)
    assert.is_truthy(h.read(h.root .. "/examples/openresty/app.lua"):find(runtime:gsub("%s+", " "), 1, true))
  end)
end)

describe("the README's OpenResty snippet", function()
  it("is the location of examples/openresty, which spec/24 runs under nginx", function()
    local section = h.read(h.root .. "/README.md"):match("\n## Embedding\n(.-)\n## ")
    local snippet = select(2, section:match("%*%*OpenResty%*%*.-```(%w+)\n(.-)```"))
    assert.is_truthy(snippet)
    local app = h.read(h.root .. "/examples/openresty/app.lua")
    assert.is_truthy(app:find(snippet, 1, true), "the snippet is not in examples/openresty/app.lua")
  end)
end)
