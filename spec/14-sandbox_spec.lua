-- The sandbox (SPEC.md §5): tool_module_policy in luma.config.json, each
-- setting both granting and refusing, and a corpus of hostile handlers that
-- must each end in one specific, clean outcome.
local luma = require "luma"
local core = require "luma.core"
local h = require "spec.helpers"

-- How late the host may get control back after a deadline. Instrumented
-- runs are slower at everything, the clock checks included.
local SLACK_MS = h.by_instrumentation(50, 400, 3000)

local TIMEOUT_MS = 200
-- The timeout of a handler that must do real work before it meets the limit
-- under test (fill memory, build a large value, make a request): it must
-- end on that limit, not on its deadline, even in an instrumented run
-- (under valgrind, whose fair scheduling slows threads further, copying a
-- result of a million values back took more than 5 s).
local WORK_MS = h.by_instrumentation(5000, 5000, 20000)

local function config(policy, extra)
  local text = core.json_encode({ tool_modules = { "tools.lua" }, tool_module_policy = policy })
  if extra then text = text:gsub("}$", ", " .. extra .. "}") end
  return text
end

-- A project whose tools.lua exports `handlers` (name -> Lua function source),
-- each declared as `tool <name>(x?: string) -> Out` with a timeout of
-- TIMEOUT_MS, or timeouts[name].
local function sandboxed(policy, handlers, files, timeouts)
  local names, decls, bodies = {}, {}, {}
  for name in pairs(handlers) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    decls[#decls + 1] = string.format("tool %s(x?: string) -> Out { timeout: %d }", name,
      timeouts and timeouts[name] or TIMEOUT_MS)
    bodies[#bodies + 1] = string.format("  %s = function(input, signal, needs)\n%s\n  end,", name, handlers[name])
  end
  local project = {
    ["program.luma"] = "schema Out { v?: string, n?: float, t?: Out[] }\n" ..
      "tool ping() -> Out {}\n" .. table.concat(decls, "\n") .. "\n",
    ["tools.lua"] = "return {\n  ping = function() return { v = 'pong' } end,\n" .. table.concat(bodies, "\n") .. "\n}\n",
    ["luma.config.json"] = config(policy),
  }
  for k, v in pairs(files or {}) do project[k] = v end
  local dir = h.project(project)
  local p, err = h.load(dir)
  assert(p, err and tostring(err))
  return p, dir
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function call(p, name, input)
  local t0 = core.monotonic_ms()
  local ok, res = pcall(p.call, p, name, input or {})
  return ok, res, core.monotonic_ms() - t0
end

local STRICT = { sandbox = "strict", allow_builtins = { "os", "io", "json", "crypto" }, max_memory_mb = 32,
  max_concurrency = 2 }

-- ------------------------------------------------------------ the policy

describe("tool_module_policy", function()
  local cases = {
    { { sandbox = "jail" }, 'tool_module_policy.sandbox must be "none" or "strict", not "jail"' },
    { { sandbox = "strik" }, 'tool_module_policy.sandbox must be "none" or "strict", not "strik". Did you mean "strict"?' },
    { { sandbox = true }, 'tool_module_policy.sandbox must be "none" or "strict", not true' },
    { { sandbox = "strict", allow_net = true }, "tool_module_policy has no key 'allow_net'. Did you mean 'allow_env'?" },
    { { sandbox = "strict", max_memory_mb = 8 }, "tool_module_policy.max_memory_mb must be at least 16" },
    { { sandbox = "strict", max_memory_mb = 16.5 }, "tool_module_policy.max_memory_mb must be an integer" },
    { { sandbox = "strict", max_memory_mb = "64" }, "tool_module_policy.max_memory_mb must be an integer" },
    { { sandbox = "strict", max_concurrency = 0 }, "tool_module_policy.max_concurrency must be at least 1" },
    { { sandbox = "strict", allow_env = "yes" }, "tool_module_policy.allow_env must be a boolean" },
    { { sandbox = "strict", allow_network = 1 }, "tool_module_policy.allow_network must be a boolean" },
    { { sandbox = "strict", allow_builtins = "os" }, "tool_module_policy.allow_builtins must be an array" },
    { { sandbox = "strict", allow_builtins = { "os", "socket" } },
      "tool_module_policy.allow_builtins[2] is not a builtin: 'socket'. Builtins: os, io, json, crypto." },
    { { sandbox = "strict", allow_builtins = { "jsn" } },
      "tool_module_policy.allow_builtins[1] is not a builtin: 'jsn'. Did you mean 'json'? Builtins: os, io, json, crypto." },
    { { allow_env = false }, 'tool_module_policy.allow_env needs "sandbox": "strict"' },
    { { sandbox = "none", allow_builtins = { "os" } }, 'tool_module_policy.allow_builtins needs "sandbox": "strict"' },
  }
  for _, c in ipairs(cases) do
    it("refuses " .. core.json_encode(c[1]) .. " naming the key", function()
      local dir = h.project { ["program.luma"] = "schema A { x: int }", ["tools.lua"] = "return {}",
        ["luma.config.json"] = config(c[1]) }
      local _, err = h.load(dir)
      assert.are.equal("CONFIG_INVALID", err.code)
      assert.matches(c[2], err.message, 1, true)
    end)
  end

  it("is checked the same way when given to luma.load", function()
    local dir = h.project { ["program.luma"] = "schema A { x: int }" }
    local _, err = h.load(dir, { tool_module_policy = { sandbox = "strict", max_concurrency = -1 } })
    assert.are.same({ "CONFIG_INVALID", "luma.load: tool_module_policy.max_concurrency must be at least 1" },
      { err.code, err.message })
  end)

  it("is enforced through the luma-lua command too", function()
    local dir = h.project {
      ["program.luma"] = "schema Out { v?: string }\ntool probe() -> Out {}\nx = tool probe({})\n",
      ["tools.lua"] = "return { probe = function() return { v = type(os) .. ' ' .. type(debug) } end }",
      ["luma.config.json"] = config { sandbox = "strict" },
    }
    local r = h.run({ "program.luma" }, { cwd = dir })
    assert.are.equal('{\n  "x": {\n    "v": "nil nil"\n  }\n}\n', r.stdout)
    assert.are.equal(0, r.status, r.stderr)
  end)
end)

-- ----------------------------------------------- every setting, both ways

describe("a strict state", function()
  it("has the safe base and nothing else", function()
    local p = sandboxed({ sandbox = "strict" }, { probe = [[
      local present = {}
      for _, name in ipairs { "assert", "error", "getmetatable", "ipairs", "next", "pairs", "pcall", "rawequal",
          "rawget", "rawlen", "rawset", "select", "setmetatable", "tonumber", "tostring", "type", "xpcall",
          "load", "collectgarbage", "print", "require", "string", "table", "math", "utf8", "coroutine", "luma",
          "os", "io", "json", "crypto", "debug", "package", "dofile", "loadfile", "warn" } do
        if _ENV[name] ~= nil then present[#present + 1] = name end
      end
      return { v = table.concat(present, " ") }]] })
    assert.are.equal("assert error getmetatable ipairs next pairs pcall rawequal rawget rawlen rawset select " ..
      "setmetatable tonumber tostring type xpcall load collectgarbage print require string table math utf8 " ..
      "coroutine luma", p:call("probe", {}).v)
  end)

  it("runs the module's own code with the same library", function()
    local p = sandboxed({ sandbox = "strict" }, { probe = "return { v = SEEN }" })
    assert.is_nil(p:call("probe", {}).v)
  end)

  local builtins = {
    os = { "return { v = type(os) == 'table' and type(os.time()) .. type(os.clock()) .. type(os.date('%Y')) }",
      "numbernumberstring" },
    json = { "return { v = json.encode(json.decode('{\"a\":[1,2]}')) }", '{"a":[1,2]}' },
    crypto = { "return { v = crypto.sha256('abc') .. ' ' .. crypto.base64_encode('hi') .. ' ' .. " ..
      "crypto.base64_decode('aGk=') .. ' ' .. #crypto.random_bytes(16) .. ' ' .. #crypto.hmac_sha256('k', 'm') }",
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad aGk= hi 16 64" },
    io = { [[
      local f = assert(io.open("note.txt", "w")) f:write("kept") f:close()
      local r = assert(io.open("note.txt")) local text = r:read("a") r:close()
      local n = 0 for _ in io.lines("note.txt") do n = n + 1 end
      return { v = text .. n .. io.type(r) }]], "kept1closed file" },
  }
  for name, case in pairs(builtins) do
    it("gets " .. name .. " only when allow_builtins names it", function()
      local p, dir = sandboxed({ sandbox = "strict", allow_builtins = { name } }, { probe = case[1] })
      assert.are.equal(case[2], p:call("probe", {}).v)
      local q = sandboxed({ sandbox = "strict" }, { probe = "return { v = type(" .. name .. ") }" })
      assert.are.equal("nil", q:call("probe", {}).v)
      if name == "io" then assert.is_true(exists(dir .. "/note.txt")) end
    end)
  end

  it("gives os only its clock and date functions", function()
    local p = sandboxed({ sandbox = "strict", allow_builtins = { "os" } }, { probe = [[
      local names = {}
      for k in pairs(os) do names[#names + 1] = k end
      table.sort(names)
      return { v = table.concat(names, " ") }]] })
    assert.are.equal("clock date difftime time", p:call("probe", {}).v)
  end)

  it("reads the environment only with allow_env", function()
    local handler = { probe = "return { v = os and os.getenv and os.getenv('PATH') or 'absent' }" }
    local p = sandboxed({ sandbox = "strict", allow_env = true }, handler)
    assert.are.equal(os.getenv("PATH"), p:call("probe", {}).v)
    local q = sandboxed({ sandbox = "strict", allow_builtins = { "os" }, allow_env = false }, handler)
    assert.are.equal("absent", q:call("probe", {}).v)
  end)

  it("has no luma.http without allow_network", function()
    local p = sandboxed({ sandbox = "strict" }, { probe = "return { v = type(luma.http) }" })
    assert.are.equal("nil", p:call("probe", {}).v)
  end)

  describe("with allow_network", function()
    -- the server runs in a process of its own: this one is busy in the call
    local portfile, pidfile, pid, base = h.tmpname("-port"), h.tmpname("-pid"), nil, nil
    setup(function()
      -- started by a shell outside the sanitizer run's preloaded runtime
      local inner = string.format("lua5.4 %s/spec/support/http_server.lua %s & echo $! > %s",
        h.quote(h.root), h.quote(portfile), h.quote(pidfile))
      assert(os.execute("env -u LD_PRELOAD -u ASAN_OPTIONS sh -c " .. h.quote(inner)))
      pid = h.read(pidfile):match("%d+")
      local t0 = core.monotonic_ms()
      while not exists(portfile) and core.monotonic_ms() - t0 < 10000 do os.execute("sleep 0.05") end
      base = "http://127.0.0.1:" .. assert(h.read(portfile), "the test server did not start")
    end)
    teardown(function()
      if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
      os.remove(portfile)
      os.remove(pidfile)
    end)

    local function http_project(handlers, timeouts)
      -- the server is on the loopback: no proxy of the environment in between
      return sandboxed({ sandbox = "strict", allow_network = true, allow_builtins = { "json" } }, handlers, nil,
        timeouts or { probe = WORK_MS })
    end

    it("makes GET and POST requests, with headers and a JSON body", function()
      local p = http_project { probe = [[
        local base = input.x
        local g = luma.http.get(base .. "/a?b=1", { headers = { ["X-Probe"] = "yes" } })
        local q = luma.http.post(base .. "/p", { n = 1 })
        local r = luma.http.request { method = "PUT", url = base .. "/r", body = "raw" }
        return { v = table.concat({ g.status, g.json.method, g.json.path, g.json.header,
          q.json.method, q.json.body, q.headers["content-type"] or "?", r.json.method, r.json.body }, " ") }]] }
      assert.are.equal('200 GET /a?b=1 yes POST {"n":1} application/json PUT raw', p:call("probe", { x = base }).v)
    end)

    it("makes requests from a handler process, by name", function()
      -- the child's filter allows IPv4 and IPv6 sockets and socket pairs, and
      -- refuses the other families
      local p = sandboxed({ sandbox = "strict", allow_network = true, isolation = "process" },
        { probe = "return { v = luma.http.get(input.x .. '/named').status .. ' ' .. luma.http.get(input.x .. '/again').status }" },
        nil, { probe = WORK_MS })
      -- its handler process goes at close: spec/35 counts this process's children
      finally(function() p:close() end)
      assert.are.equal("200 200", p:call("probe", { x = base:gsub("127%.0%.0%.1", "localhost") }).v)
    end)

    it("stops a request at the call's deadline", function()
      local p = http_project({ probe = "luma.http.get(input.x .. '/slow') return { v = 'answered' }" }, { probe = 300 })
      local ok, err, ms = call(p, "probe", { x = base })
      assert.is_false(ok)
      assert.are.equal("TOOL_TIMEOUT", err.code, err.message)
      assert.is_true(ms < 300 + SLACK_MS, ms .. " ms")
    end)

    it("holds no thread while it waits for a response: 20 requests of a max_concurrency 1 module end together", function()
      local p = sandboxed({ sandbox = "strict", allow_network = true, max_concurrency = 1 }, { wait = [[
        local ok, e = pcall(luma.http.get, input.x .. "/slow", { timeout_ms = 300 })
        return { v = ok and "answered" or e.code }]] }, nil, { wait = 20000 })
      local t0 = core.monotonic_ms()
      local calls = {}
      for i = 1, 20 do calls[i] = p:start("wait", { x = base }) end
      for i = 1, 20 do
        assert.is_true(calls[i]:wait(20000))
        assert.are.equal("HTTP_TIMEOUT", calls[i]:result().v)
      end
      -- one after the other, they would take 6 s
      local took = core.monotonic_ms() - t0
      assert.is_true(took < h.by_instrumentation(3000, 5000, 12000), string.format("took %.0f ms", took))
    end)

    it("ends a call cancelled while its request waits at once, TOOL_CANCELLED, aborting the request", function()
      local p = sandboxed({ sandbox = "strict", allow_network = true, max_concurrency = 1 }, {
        wait = "luma.http.get(input.x .. '/slow', { timeout_ms = 15000 }) return { v = 'answered' }",
      }, nil, { wait = 20000 })
      local c = p:start("wait", { x = base })
      c:wait(300)
      local t0 = core.monotonic_ms()
      c:cancel()
      assert.is_true(c:wait(5000))
      assert.is_true(core.monotonic_ms() - t0 < SLACK_MS + 100, string.format("%.0f ms", core.monotonic_ms() - t0))
      assert.are.equal("TOOL_CANCELLED", h.raised(c.result, c).code)
      assert.are.equal("pong", p:call("ping", {}).v)
    end)

    it("refuses what is not an http or https URL", function()
      local p = http_project { probe = "local ok, e = pcall(luma.http.get, 'file:///etc/passwd') return { v = e.code .. ': ' .. e.message }" }
      assert.are.equal("HTTP_ERROR: only http:// and https:// URLs are allowed", p:call("probe", {}).v)
    end)
  end)

  it("loads text with load, in its own environment or the one given", function()
    local p = sandboxed({ sandbox = "strict" }, { probe = [[
      local f = assert(load("return 1 + 2"))
      local g = assert(load("return x", "chunk", "t", { x = "env" }))
      local pieces = { "return ", "'read'", nil }
      local i = 0
      local r = assert(load(function() i = i + 1 return pieces[i] end))
      return { v = f() .. g() .. r() }]] })
    assert.are.equal("3envread", p:call("probe", {}).v)
  end)

  it("requires Lua files of the project, and luma", function()
    local p = sandboxed({ sandbox = "strict" }, { probe = [[
      local util = require "lib.util"
      return { v = util.name .. " " .. tostring(require("luma") == luma) }]] },
      { ["lib/util.lua"] = "return { name = 'util' }" })
    assert.are.equal("util true", p:call("probe", {}).v)
  end)

  it("refuses allocation past max_memory_mb, and without it the same work succeeds", function()
    local handler = { probe = "local t = {} for i = 1, 2e6 do t[i] = i end return { n = #t }" }
    local p = sandboxed({ sandbox = "strict", max_memory_mb = 16 }, handler, nil, { probe = WORK_MS })
    local ok, err = call(p, "probe")
    assert.is_false(ok)
    assert.are.same({ "TOOL_MEMORY_LIMIT", "Tool 'probe' ran out of memory.", false },
      { err.code, err.message, err.retryable })
    local q = sandboxed({ sandbox = "strict", max_memory_mb = 64 }, handler, nil, { probe = WORK_MS })
    assert.are.equal(2e6, q:call("probe", {}).n)
  end)
end)

describe("a state with no sandbox", function()
  it("has the whole standard library, still in a state of the module's own", function()
    local p = sandboxed({ max_memory_mb = 64 }, { probe = [[
      SHARED = (SHARED or 0) + 1
      return { v = type(debug) .. type(os.execute) .. type(io.popen) .. type(package.loadlib) .. SHARED .. tostring(luma_host) }]] })
    assert.are.equal("tablefunctionfunctionfunction1nil", p:call("probe", {}).v)
    assert.are.equal("tablefunctionfunctionfunction2nil", p:call("probe", {}).v)
  end)

  it("still has its memory limit and deadline enforced", function()
    local p = sandboxed({ sandbox = "none", max_memory_mb = 16 }, {
      bomb = "local t = {} for i = 1, 1e8 do t[i] = i end",
      spin = "local s = ('a'):rep(40) return { v = tostring(s:find(('a*'):rep(30) .. 'b')) }",
    }, nil, { bomb = WORK_MS })
    assert.are.equal("TOOL_MEMORY_LIMIT", select(2, call(p, "bomb")).code)
    local ok, err, ms = call(p, "spin")
    assert.is_false(ok)
    assert.are.equal("TOOL_TIMEOUT", err.code)
    assert.is_true(ms < TIMEOUT_MS + SLACK_MS, ms .. " ms")
  end)

  it("loads no bytecode either", function()
    local p = sandboxed({}, { probe = "local f, e = load(string.dump(function() end)) return { v = tostring(f) .. ' ' .. e }" })
    assert.matches("^nil .*attempt to load a binary chunk", p:call("probe", {}).v)
  end)
end)

-- ----------------------------------------------------- max_concurrency

describe("max_concurrency", function()
  local MEET = [[
    local me, other = input.x:sub(1, 1), input.x:sub(2, 2)
    local file = input.x:sub(4)
    local f = assert(io.open(file, "a")) f:write(me, "\n") f:close()
    for _ = 1, 200000 do
      local r = assert(io.open(file)) local text = r:read("a") r:close()
      if text:find(other, 1, true) then return { v = "met" } end
    end
    return { v = "alone" }]]

  local function meet(n)
    local p, dir = sandboxed({ sandbox = "strict", allow_builtins = { "io" }, max_concurrency = n }, { meet = MEET })
    local file = dir .. "/meet.txt"
    return p:call_all({ { "meet", { x = "AB:" .. file } }, { "meet", { x = "BA:" .. file } } }, { concurrency = 2 })
  end

  it("runs calls to one module at once in that many states", function()
    local out = meet(2)
    assert.are.same({ "met", "met" }, { out[1].result.v, out[2].result.v })
  end)

  it("makes a call wait for a busy state: with 1 they run one after the other", function()
    local out = meet(1)
    -- the first gives up (or times out) alone; the second finds its mark
    assert.is_true(not out[1].ok or out[1].result.v == "alone")
    assert.are.equal("met", out[2].ok and out[2].result.v or out[2].error.code)
  end)

  it("wakes a call waiting for a busy state when the state is freed: it never sleeps to look again", function()
    local dir = h.project {
      ["program.luma"] = "schema Out { v?: string }\ntool ping(x: string) -> Out {}\n",
      ["tools.lua"] = "return { ping = function(input) return { v = input.x } end }\n",
      ["luma.config.json"] = config { sandbox = "strict", max_concurrency = 1 },
    }
    local clock = h.clock()
    local p = assert(h.load(dir, { clock = clock }))
    for _ = 1, 5 do
      local out = p:call_all({ { "ping", { x = "a" } }, { "ping", { x = "b" } }, { "ping", { x = "c" } } })
      assert.are.same({ "a", "b", "c" }, { out[1].result.v, out[2].result.v, out[3].result.v })
    end
    assert.are.same({}, clock.sleeps)
  end)

  -- holds its state for x ms on its thread: a handler that waited
  -- (signal:sleep) would leave the state to other calls meanwhile
  local HOLD = "local left = signal.remaining_ms - tonumber(input.x) " ..
    "while signal.remaining_ms > left do end return { v = 'held' }"

  it("gives up a call that waited its whole timeout for a state, and says why", function()
    local p = sandboxed({ sandbox = "strict", max_concurrency = 1 }, { hold = HOLD, quick = "return { v = 'quick' }" },
      nil, { hold = 5000, quick = 200 })
    local held = p:start("hold", { x = "1500" })
    local quick = p:start("quick", {})
    assert.is_true(quick:wait(5000))
    local err = h.raised(quick.result, quick)
    assert.are.same({ "TOOL_TIMEOUT", "Tool 'quick' could not run: every state of the module was busy until the deadline." },
      { err.code, err.message })
    assert.is_true(held:wait(5000))
    assert.are.equal("held", held:result().v)
  end)

  it("takes a cancelled waiting call out of the queue: the next one runs when the state is freed", function()
    local p = sandboxed({ sandbox = "strict", max_concurrency = 1 }, { hold = HOLD }, nil, { hold = 5000 })
    local first = p:start("hold", { x = "300" })
    local second = p:start("hold", { x = "0" })
    local third = p:start("hold", { x = "0" })
    second:cancel()
    local t0 = require("luma.core").monotonic_ms()
    assert.is_true(third:wait(5000))
    assert.are.equal("held", third:result().v)
    assert.is_true(require("luma.core").monotonic_ms() - t0 < h.by_instrumentation(2000, 4000, 8000))
    assert.are.equal("TOOL_CANCELLED", h.raised(second.result, second).code)
    assert.are.equal("held", first:result().v)
  end)
end)

-- ------------------------------------------------ waiting without a thread

describe("a handler that waits (signal:sleep)", function()
  -- counts itself in a table of the module's (lib/count.lua, loaded once
  -- per state), waits, and says what the count is then
  local NAP = "local count = require('lib.count') count.n = count.n + 1 " ..
    "local slept = signal:sleep(tonumber(input.x)) return { v = tostring(slept), n = count.n }"
  local COUNT = { ["lib/count.lua"] = "return { n = 0 }" }

  it("holds no worker thread: 200 calls of a module with max_concurrency 1 each waiting 300 ms end together", function()
    local p = sandboxed({ sandbox = "strict", max_concurrency = 1 }, { nap = NAP }, COUNT, { nap = 20000 })
    local t0 = core.monotonic_ms()
    local calls = {}
    for i = 1, 200 do calls[i] = p:start("nap", { x = "300" }) end
    for i = 1, 200 do
      assert.is_true(calls[i]:wait(20000))
      assert.are.equal("true", calls[i]:result().v)
    end
    -- one after the other they would take 60 s; on the pool's threads, 30 s
    local took = core.monotonic_ms() - t0
    assert.is_true(took < h.by_instrumentation(5000, 10000, 20000), string.format("took %.0f ms", took))
  end)

  it("shares its state's module-level globals with the calls waiting in it, as OpenResty's requests share a VM", function()
    local p = sandboxed({ sandbox = "strict", max_concurrency = 1 }, { nap = NAP }, COUNT, { nap = 5000 })
    local a, b, c = p:start("nap", { x = "300" }), p:start("nap", { x = "300" }), p:start("nap", { x = "300" })
    assert.is_true(a:wait(5000) and b:wait(5000) and c:wait(5000))
    -- each counted itself in before it waited, and all three were in the one state
    assert.are.same({ 3, 3, 3 }, { a:result().n, b:result().n, c:result().n })
  end)

  it("ends at once, TOOL_CANCELLED, when its call is cancelled while it waits; its state serves on", function()
    local p = sandboxed({ sandbox = "strict", max_concurrency = 1 }, { nap = NAP }, COUNT, { nap = 20000 })
    local held = p:start("nap", { x = "15000" })
    held:wait(200)
    local t0 = core.monotonic_ms()
    held:cancel()
    assert.is_true(held:wait(5000))
    assert.is_true(core.monotonic_ms() - t0 < SLACK_MS + 100, string.format("%.0f ms", core.monotonic_ms() - t0))
    assert.are.equal("TOOL_CANCELLED", h.raised(held.result, held).code)
    assert.are.equal("true", p:call("nap", { x = "1" }).v)
  end)

  it("ends at once when cancelled, also when it ignores what its waits return and spins between them", function()
    local p = sandboxed({ sandbox = "strict", max_concurrency = 1 }, {
      stubborn = "while true do signal:sleep(30) for _ = 1, 1e5 do end end",
    }, nil, { stubborn = 20000 })
    local c = p:start("stubborn", {})
    c:wait(300)
    local t0 = core.monotonic_ms()
    c:cancel()
    assert.is_true(c:wait(5000))
    assert.is_true(core.monotonic_ms() - t0 < SLACK_MS + 100, string.format("%.0f ms", core.monotonic_ms() - t0))
    assert.are.equal("TOOL_CANCELLED", h.raised(c.result, c).code)
    assert.are.equal("pong", p:call("ping", {}).v)
  end)

  it("ends at its deadline, TOOL_TIMEOUT, when the wait is longer than what is left", function()
    local p = sandboxed({ sandbox = "strict", max_concurrency = 1 }, { nap = NAP }, COUNT, { nap = 300 })
    local ok, res, ms = call(p, "nap", { x = "5000" })
    assert.is_false(ok)
    assert.are.equal("TOOL_TIMEOUT", res.code)
    assert.is_true(ms >= 280 and ms < 300 + SLACK_MS, string.format("%.0f ms", ms))
  end)
end)

-- ------------------------------------------- files other processes change

describe("strict io.lines", function()
  -- A coroutine's stack starts small: io.lines copies each of its formats,
  -- and must make room for them (ASan and valgrind saw it write past the
  -- stack's end with about 15 formats).
  it("takes any number of formats Lua's own takes, in a coroutine", function()
    local dir = h.project({
      ["program.luma"] = "schema Out { n: int }\ntool probe() -> Out { timeout: 10000 }\n",
      ["tools.lua"] = [[return { probe = function()
        local f = assert(io.open("note.txt", "w")) f:write(("x\n"):rep(300)) f:close()
        local fm = {} for i = 1, 240 do fm[i] = "l" end
        local n = 0
        for k = 1, 240, 7 do for pad = 0, 3 do
          coroutine.wrap(function(...)
            for _ in io.lines("note.txt", table.unpack(fm, 1, k)) do n = n + 1 end
          end)(table.unpack(fm, 1, pad * 7))
        end end
        return { n = n } end }
]],
      ["luma.config.json"] = require("luma.core").json_encode({ tool_modules = { "tools.lua" },
        tool_module_policy = { sandbox = "strict", allow_builtins = { "io" }, max_memory_mb = 64 } }),
    })
    local p = assert(h.load(dir))
    local expected = 0
    for k = 1, 240, 7 do expected = expected + 4 * math.ceil(300 / k) end
    assert.are.equal(expected, p:call("probe", {}).n)
  end)
end)

describe("strict io against other processes", function()
  -- (valgrind runs the threads of a process one at a time: a round of
  -- creators waiting on each other takes it far longer)
  local ROUNDS, FILES = h.by_instrumentation(500, 500, 50), 10
  -- Each round, every creator marks its arrival and waits for the others'
  -- marks, then all open the same FILES new files, <round>.txt,
  -- <round>-2.txt..., one after the other, to append their letter to each.
  -- x = "<me>:<the others>:<rounds>".
  local CREATE = [[
    local me, others, rounds = input.x:match("^(%a):(%a+):(%d+)$")
    local function there(name) local f = io.open(name) if f then f:close() end return f ~= nil end
    local refused = {}
    for i = 1, tonumber(rounds) do
      assert(io.open(me .. i .. ".mark", "w")):close()
      for other in others:gmatch("%a") do while not there(other .. i .. ".mark") do end end
      for k = 1, FILES do
        local f, e = io.open(i .. (k > 1 and "-" .. k or "") .. ".txt", "a")
        if f then f:write(me) f:close() else refused[#refused + 1] = e end
      end
    end
    return { v = table.concat(refused, "\n") }]]
  local TIMEOUT = h.by_instrumentation(30000, 90000, 300000)

  -- A project of creators: A and B in this process, C in a luma-lua process
  -- of its own; `attack`, when given, is a shell command started in the
  -- project's folder with them. -> the creators' refusals, and the folder.
  local function race(attack)
    local dir = h.project {
      ["program.luma"] = "schema Out { v?: string }\n" ..
        string.format("tool create(x: string) -> Out { timeout: %d }\n", TIMEOUT) ..
        "agent Racer {\n  tools: [create]\n  fn run(x: string) -> Out { tool create({ x: x }) }\n}\n",
      ["tools.lua"] = "local FILES = " .. FILES .. " return { create = function(input)\n" .. CREATE .. "\nend }\n",
      ["luma.config.json"] = config { sandbox = "strict", allow_builtins = { "io" }, max_concurrency = 2 },
    }
    local p = assert(h.load(dir))
    local attacker = attack and assert(io.popen("cd " .. h.quote(dir) .. " && " .. attack .. " 2>&1; echo \"exit $?\""))
    local other = assert(io.popen(string.format("cd %s && %s/bin/luma-lua run program.luma --agent Racer " ..
      "--input '{\"x\": \"C:AB:%d\"}' 2>&1; echo \"exit $?\"", h.quote(dir), h.quote(h.root), ROUNDS)))
    local out = p:call_all({ { "create", { x = "A:BC:" .. ROUNDS } }, { "create", { x = "B:AC:" .. ROUNDS } } },
      { concurrency = 2 })
    local text = other:read("a")
    other:close()
    assert.matches("exit 0\n$", text)
    local refused = {}
    for _, v in ipairs { assert(core.json_decode(text:match("^(.*\n)exit"))).v, out[1].ok and out[1].result.v,
      out[2].ok and out[2].result.v } do
      if v ~= "" then refused[#refused + 1] = v end
    end
    for i = 1, 2 do assert.is_true(out[i].ok, out[i].error and out[i].error.message) end
    if attacker then
      local said = attacker:read("a")
      attacker:close()
      assert.are.equal("exit 0\n", said)
    end
    return table.concat(refused, "\n"), dir
  end

  it("lets every creator of the same new file open it, round after round", function()
    local refused, dir = race()
    assert.are.equal("", refused)
    for i = 1, ROUNDS do
      for k = 1, FILES do
        local name = i .. (k > 1 and "-" .. k or "") .. ".txt"
        local letters = h.read(dir .. "/" .. name)
        assert.are.equal(3, #letters, name .. ": " .. letters)
      end
    end
  end)

  it("refuses a symlink to a file outside swapped in during the race, and never writes through it", function()
    local outside = h.project { ["target.txt"] = "" }
    -- each round, once A has marked it, the file becomes a link outside
    local swap = string.format("env -u LD_PRELOAD perl -e '" ..
      "my ($rounds, $target) = @ARGV; my $end = time + 300;" ..
      "for my $i (1 .. $rounds) { until (-e \"A$i.mark\") { die \"no round $i\" if time > $end }" ..
      " symlink($target, \"$i.tmp\") or die $!; rename(\"$i.tmp\", \"$i.txt\") or die $! }' %d %s",
      ROUNDS, h.quote(outside .. "/target.txt"))
    local refused = race(swap)
    assert.are.equal("", h.read(outside .. "/target.txt"))
    local n = 0
    for line in refused:gmatch("[^\n]+") do
      n = n + 1
      assert.matches("^%d+%.txt: outside the project, not available to a strict tool module$", line)
    end
    assert.is_true(n > 0, "the link was never seen")
  end)
end)

-- ------------------------------------------------------ the hostile corpus

-- Each entry: handler body, and the one outcome it must end in: `v` (the
-- result's v), or the error's `code` and a `message` it contains.
local BINARY = "'\\27LuaT\\0\\25\\147\\r\\n\\26\\n\\4\\8\\8x\\86\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0(w@'"

local CORPUS = {
  -- bytecode
  bytecode_load = { "local f, e = load(" .. BINARY .. ") return { v = tostring(f) .. ' ' .. e }",
    v = "nil attempt to load a binary chunk (mode is 't')" },
  bytecode_mode_b = { "local f, e = load(" .. BINARY .. ", 'x', 'b') return { v = tostring(f) .. ' ' .. e }",
    v = "nil attempt to load a binary chunk (mode is 't')" },
  bytecode_reader = { "local done local f, e = load(function() if done then return nil end done = true return " ..
    BINARY .. " end) return { v = tostring(f) .. ' ' .. e }", v = "nil attempt to load a binary chunk (mode is 't')" },
  bytecode_no_dump = { "return { v = tostring(string.dump) .. tostring(('').dump) }", v = "nilnil" },

  -- routes to what strict mode removes
  removed_globals = { [[
    local found = {}
    for _, name in ipairs { "debug", "package", "dofile", "loadfile", "warn", "newproxy", "setfenv", "getfenv", "module" } do
      if _G[name] ~= nil then found[#found + 1] = name end
    end
    return { v = "[" .. table.concat(found, ",") .. "]" }]], v = "[]" },
  removed_os_io = { [[
    local found = {}
    for _, name in ipairs { "execute", "exit", "remove", "rename", "tmpname", "getenv", "setlocale" } do
      if os[name] then found[#found + 1] = "os." .. name end
    end
    for _, name in ipairs { "popen", "tmpfile", "read", "write", "input", "output", "stdin", "stdout", "stderr" } do
      if io[name] then found[#found + 1] = "io." .. name end
    end
    return { v = "[" .. table.concat(found, ",") .. "]" }]], v = "[]" },
  removed_require_std = { [[
    local got = {}
    for _, name in ipairs { "debug", "package", "os", "io", "_G" } do
      local ok, m = pcall(require, name)
      got[#got + 1] = name .. "=" .. (ok and type(m) or "refused")
    end
    return { v = table.concat(got, " ") }]], v = "debug=refused package=refused os=table io=table _G=table" },
  removed_require_c = { [[
    for _, name in ipairs { "cjson", "lfs", "socket.core", "lpeg", "luma.core" } do
      if pcall(require, name) then return { v = name } end
    end
    return { v = "none" }]], v = "none" },
  removed_walk = { [[
    -- everything reachable from the globals, metatables included
    local bad = { execute = 1, popen = 1, loadlib = 1, getenv = 1, dump = 1, sethook = 1, getregistry = 1,
      exit = 1, remove = 1, rename = 1, tmpname = 1, upvalueid = 1, setupvalue = 1, cpath = 1 }
    local seen, found = {}, {}
    local function walk(v)
      if type(v) ~= "table" or seen[v] then return end
      seen[v] = true
      for k, x in next, v do
        if bad[k] then found[#found + 1] = tostring(k) end
        walk(k) walk(x)
      end
      walk(getmetatable(v))
    end
    walk(_G) walk(getmetatable("")) walk(getmetatable(io.stdout or {}))
    local f = io.open("probe.txt", "w") walk(getmetatable(f)) f:close()
    return { v = "[" .. table.concat(found, ",") .. "]" }]], v = "[]" },
  removed_string_metatable = { "return { v = tostring(getmetatable('')) .. tostring(('').__index) }", v = "falsenil" },
  removed_setmetatable_string = { "setmetatable('', {})", code = "TOOL_FAILED",
    message = "bad argument #1 to 'setmetatable' (table expected, got string)" },
  removed_load_escape = { "local f = load('return os, io, debug', 'x', 't', {}) return { v = select('#', f()) .. tostring(f()) }",
    v = "3nil" },
  removed_gc_option = { "collectgarbage('stop')", code = "TOOL_FAILED",
    message = "collectgarbage('stop') is not available in a strict tool module" },
  shared_global_write = { "leaked = true", code = "TOOL_FAILED",
    message = "cannot set the global 'leaked' in a strict tool module (use a local)" },
  shared_rawset_globals = { "rawset(_G, 'leaked', true)", code = "TOOL_FAILED",
    message = "rawset on the globals is not available in a strict tool module" },
  shared_globals_metatable = { "setmetatable(_G, nil)", code = "TOOL_FAILED", message = "cannot change a protected metatable" },
  shared_library_write = { "string.upper = string.lower", code = "TOOL_FAILED",
    message = "the library tables of a strict tool module are read-only" },
  shared_required_library = { "require('string').upper = string.lower", code = "TOOL_FAILED",
    message = "the library tables of a strict tool module are read-only" },

  -- the environment and the file system
  env_routes = { [[
    local leaks = {}
    if os.getenv then leaks[#leaks + 1] = "os.getenv" end
    for _, path in ipairs { "/proc/self/environ", "/proc/1/environ", "env_link", "/dev/stdin" } do
      local f = io.open(path) if f then leaks[#leaks + 1] = path f:close() end
    end
    return { v = "[" .. table.concat(leaks, ",") .. "]" }]], v = "[]" },
  file_outside = { [[
    local opened = {}
    for _, path in ipairs { "/etc/passwd", "../escape.txt", "/tmp/luma-escape.txt", "link_out", "sub/../../escape.txt", "escape_link" } do
      local f = io.open(path, path:find("escape") and "w" or "r")
      if f then opened[#opened + 1] = path f:close() end
    end
    return { v = "[" .. table.concat(opened, ",") .. "]" }]], v = "[]" },
  file_not_regular = { [[
    local said = {}
    for _, case in ipairs { { "sub", "r" }, { "sub/..", "a" }, { "fifo", "r" }, { "fifo", "w" } } do
      local f, e = io.open(case[1], case[2])
      said[#said + 1] = f and "opened" or e:match("[^/]*$")
    end
    return { v = table.concat(said, "; ") }]],
    v = "sub: Is a directory; ..: Is a directory; fifo: not a regular file, not available to a strict tool module; " ..
      "fifo: not a regular file, not available to a strict tool module" },
  file_lines_outside = { "for l in io.lines('/etc/passwd') do end", code = "TOOL_FAILED",
    message = "/etc/passwd: outside the project, not available to a strict tool module" },
  file_write_code = { [[
    local refused = {}
    for _, name in ipairs { "tools.lua", "program.luma", "luma.config.json", ".luma-idempotency.json", "lib/new.lua" } do
      local f, e = io.open(name, "a")
      if not f and e:find("cannot write code or configuration", 1, true) then refused[#refused + 1] = name end
    end
    return { v = #refused .. " " .. tostring(io.open("lib/keep.lua", "r") ~= nil) }]], v = "5 true" },
  file_descriptors = { [[
    local kept, last = {}
    for i = 1, 100 do
      local f, e = io.open("lib/keep.lua")
      if not f then last = e break end
      kept[i] = f
    end
    return { v = #kept .. " " .. last }]], v = "32 lib/keep.lua: too many open files (at most 32 in a strict tool module)" },
  file_close_stdout = { "io.close()", code = "TOOL_FAILED", message = "bad argument #1 to 'close'" },
  network_absent = { [[
    local found = {}
    if luma.http then found[#found + 1] = "luma.http" end
    for _, name in ipairs { "socket", "ssl", "http" } do if pcall(require, name) then found[#found + 1] = name end end
    return { v = "[" .. table.concat(found, ",") .. "]" }]], v = "[]" },

  -- memory bombs
  memory_table = { "local t = {} for i = 1, 1e9 do t[i] = i end", code = "TOOL_MEMORY_LIMIT" },
  memory_string_doubling = { "local s = 'x' while true do s = s .. s end", code = "TOOL_MEMORY_LIMIT" },
  memory_rep = { "return { v = string.rep('x', 1e9) }", code = "TOOL_MEMORY_LIMIT" },
  memory_concat = { "local s = ('x'):rep(1e6) local t = {} for i = 1, 40 do t[i] = s end return { v = table.concat(t) }",
    code = "TOOL_MEMORY_LIMIT" },
  memory_coroutines = { "local t = {} for i = 1, 1e8 do t[i] = coroutine.create(print) end", code = "TOOL_MEMORY_LIMIT" },
  memory_closures = { "local f = function() end for i = 1, 1e8 do local g = f f = function() return g end end",
    code = "TOOL_MEMORY_LIMIT" },
  memory_json_decode = { "return { n = #json.decode('[' .. ('0,'):rep(2e6) .. '0]') }", code = "TOOL_FAILED",
    message = "may need more memory than the state has left", timeout = WORK_MS },
  memory_caught = { "pcall(function() local s = 'x' while true do s = s .. s end end) return { v = 'survived' }",
    code = "TOOL_MEMORY_LIMIT" },
  memory_recursion = { "local function f(n) return 1 + f(n + 1) end return { n = f(1) }", code = "TOOL_MEMORY_LIMIT" },
  memory_c_recursion = { "local function f() return tostring(setmetatable({}, { __tostring = f })) end f()",
    code = "TOOL_FAILED", message = "stack overflow" }, 

  -- CPU bombs, in Lua and inside library calls
  cpu_loop = { "while true do end", code = "TOOL_TIMEOUT" },
  cpu_pcall = { "while true do pcall(function() while true do end end) end", code = "TOOL_TIMEOUT" },
  cpu_error_in_handler = { "xpcall(function() while true do end end, function() while true do end end)",
    code = "TOOL_TIMEOUT" },
  cpu_find = { "local s = ('a'):rep(40) return { v = tostring(s:find(('a*'):rep(30) .. 'b')) }", code = "TOOL_TIMEOUT" },
  cpu_gsub = { "local s = ('a'):rep(5000) return { v = s:gsub('(.-)(.-)(.-)(.-)x', '%1') }", code = "TOOL_TIMEOUT" },
  cpu_gmatch = { "for _ in (('a'):rep(40)):gmatch(('a?'):rep(40) .. ('a'):rep(40) .. 'b') do end", code = "TOOL_TIMEOUT" },
  cpu_rep = { "while true do local s = ('ab'):rep(2e6, ',') end", code = "TOOL_TIMEOUT" },
  cpu_sort = { "local t = {} for i = 1, 3e5 do t[i] = i % 13 end table.sort(t, function() return true end) " ..
    "while true do table.sort(t) end", code = "TOOL_TIMEOUT" },
  cpu_concat = { "local t = {} for i = 1, 1e5 do t[i] = 'x' end while true do table.concat(t, ',') end", code = "TOOL_TIMEOUT" },
  cpu_load = { "local src = ('local a = 1 '):rep(2e5) while true do load(src) end", code = "TOOL_TIMEOUT" },
  cpu_coroutine_forever = { "local co = coroutine.wrap(function() while true do coroutine.yield() end end) while true do co() end",
    code = "TOOL_TIMEOUT" },
  cpu_close = { "local x <close> = setmetatable({}, { __close = function() while true do end end }) error('first')",
    code = "TOOL_TIMEOUT" },
  cpu_string_compare = { "local a, b = ('x'):rep(8e6), ('x'):rep(8e6 - 1) .. 'x' while true do local _ = a == b end",
    code = "TOOL_TIMEOUT" },
  cpu_big_upper = { "local s = ('x'):rep(4e6) while true do local u = s:upper() end", code = "TOOL_TIMEOUT" },
  cpu_crypto_loop = { "local s = ('x'):rep(4e6) while true do crypto.sha256(s) end", code = "TOOL_TIMEOUT" },
  cpu_gc_loop = { "local t = {} for i = 1, 2e5 do t[i] = {} end while true do collectgarbage() end", code = "TOOL_TIMEOUT" },
  cpu_load_quadratic = { "load('return a' .. (' or a'):rep(4e5))", code = "TOOL_TIMEOUT" },
  cpu_close_killed_coroutine = { [[
    local co = coroutine.create(function()
      local x <close> = setmetatable({}, { __close = function() while true do end end })
      while true do end
    end)
    local y <close> = setmetatable({}, { __close = function() coroutine.close(co) end })
    coroutine.resume(co)]], code = "TOOL_TIMEOUT" },
  cpu_close_wrapped_coroutine = { [[
    coroutine.wrap(function()
      local x <close> = setmetatable({}, { __close = function() while true do end end })
      while true do end
    end)()]], code = "TOOL_TIMEOUT" },
  cpu_json_encode = { "local t = {} for i = 1, 3.7e5 do t[i] = 1 end return { v = json.encode({ t, t, t }) }",
    code = "TOOL_FAILED",
    message = "json.encode: the value is larger than 1000000 values", timeout = WORK_MS },

  -- finalizers and error objects
  finalizer_refused = { "setmetatable({}, { __gc = function() while true do end end })", code = "TOOL_FAILED",
    message = "__gc metamethods are not allowed in a strict tool module" },
  error_tostring_loops = { "error(setmetatable({}, { __tostring = function() while true do end end }))",
    code = "TOOL_FAILED", message = "Tool 'error_tostring_loops' raised a table value." },
  error_tostring_raises = { "error(setmetatable({}, { __tostring = function() error('again') end }))",
    code = "TOOL_FAILED", message = "Tool 'error_tostring_raises' raised a table value." },
  error_fake_tool_error = { "error(setmetatable({ code = 'X' }, { __name = 'luma.ToolError' }))",
    code = "TOOL_FAILED", message = "raised a table value" },
  error_nil = { "error(nil)", code = "TOOL_FAILED", message = "raised a nil value" },
  error_details_nan = { "error(luma.ToolError { code = 'X', message = 'm', details = { n = 0/0, i = math.huge } })",
    code = "X", message = "m", no_details = true },

  -- the metatables of the core's values, where a __gc would run with hooks off
  core_metatables_hidden = { [[
    local f = io.open("lib/keep.lua")
    local seen = tostring(getmetatable(luma.ToolError { code = "X" })) .. tostring(getmetatable(f)) ..
      tostring(getmetatable(setmetatable({}, luma.array_mt)))
    f:close()
    return { v = seen }]], v = "falsefalsefalse" },
  core_metatable_gc = { "luma.array_mt.__gc = function() while true do end end", code = "TOOL_FAILED",
    message = "the metatables of a strict tool module's values are read-only" },
  core_metatable_rawset = { "rawset(luma.array_mt, '__gc', function() while true do end end)", code = "TOOL_FAILED",
    message = "the metatables of a strict tool module's values are read-only" },
  core_metatable_unlock = { "setmetatable(luma.array_mt, nil)", code = "TOOL_FAILED",
    message = "cannot change a protected metatable" },
  library_through_pairs = { "local _, real = pairs(string) real.upper = string.lower", code = "TOOL_FAILED",
    message = "the library tables of a strict tool module are read-only" },

  -- what comes back
  result_cyclic = { "local t = {} t.t = { t } return t", code = "TOOL_OUTPUT_INVALID", message = "a table contains itself" },
  result_deep = { "local t = {} local c = t for i = 1, 1000 do c.t = { {} } c = c.t[1] end return t",
    code = "TOOL_OUTPUT_INVALID", message = "it is nested more than 100 levels deep" },
  result_many = { "local row = {} for i = 1, 1100 do row[i] = {} end local t = {} for i = 1, 1000 do t[i] = { t = row } end " ..
    "return { t = t }", code = "TOOL_OUTPUT_INVALID",
    message = "it holds more than 1000000 values", timeout = WORK_MS },
  result_nan = { "return { n = 0/0 }", code = "TOOL_OUTPUT_INVALID", message = "output.n must be a finite number" },
  result_infinity = { "return { t = { { n = -math.huge } } }", code = "TOOL_OUTPUT_INVALID",
    message = "output.t[1].n must be a finite number" },
  result_function = { "return { v = print }", code = "TOOL_OUTPUT_INVALID", message = "it holds a function" },
  result_metamethods = { "return setmetatable({}, { __index = function() while true do end end, __pairs = error })", v = nil },

  -- require tricks
  require_slow_parse = { "require('lib.slow')", code = "TOOL_TIMEOUT" },
  require_parent = { "return { v = tostring(pcall(require, '..escape')) }", v = "false" },
  require_absolute = { "local ok, e = pcall(require, '/etc/passwd') return { v = tostring(ok) }", v = "false" },
  require_symlink = { "local ok, e = pcall(require, 'link_mod') return { v = tostring(ok) .. ' ' .. tostring(e:find('lies outside') ~= nil) }",
    v = "false true" },
  require_nul = { "return { v = tostring(pcall(require, 'lib\\0evil')) }", v = "false" },

  -- yields across the boundary
  yield_top = { "coroutine.yield(1)", code = "TOOL_FAILED", message = "attempt to yield from outside a coroutine" },
  yield_thread_result = { "return { v = coroutine.create(print) }", code = "TOOL_OUTPUT_INVALID", message = "it holds a thread" },
  yield_through_pcall = { [[
    local co = coroutine.wrap(function() pcall(function() coroutine.yield("in") end) return "out" end)
    return { v = co() .. co() }]], v = "inout" },
  yield_own_coroutine = { [[
    local me, main = coroutine.running()
    local ok, e = pcall(coroutine.resume, me)
    return { v = tostring(main) .. " " .. tostring(ok) .. " " .. tostring(e:find("cannot be resumed", 1, true) ~= nil) }]],
    v = "true false true" },
  yield_own_coroutine_close = { "local me = coroutine.running() coroutine.close(me)", code = "TOOL_FAILED",
    message = "a tool call's own coroutine cannot be resumed or closed by a handler" },

  -- waits (issue 32): each is stopped by its deadline, none holds the host
  wait_many_in_a_loop = { "for _ = 1, 100000 do signal:sleep(1) end return { v = 'slept' }", code = "TOOL_TIMEOUT" },
  wait_in_coroutines = { [[
    for _ = 1, 5000 do coroutine.wrap(function() signal:sleep(1000) end)() end]], code = "TOOL_TIMEOUT" },
  wait_nested_coroutine = { [[
    local co = coroutine.wrap(function() return signal:sleep(5) end)
    local inner = coroutine.wrap(function() return coroutine.wrap(function() return signal:sleep(5) end)() end)
    return { v = tostring(co()) .. " " .. tostring(inner()) .. " " .. tostring(signal:sleep(5)) }]], v = "true true true" },
  wait_in_a_callback = { [[
    local t = { 3, 2, 1 }
    table.sort(t, function(a, b) signal:sleep(1) return a < b end)
    return { v = table.concat(t, ",") .. " " .. tostring(signal:sleep(1)) }]], v = "1,2,3 true" },
  wait_ignoring_the_end = { "while true do signal:sleep(50) end", code = "TOOL_TIMEOUT" },
  wait_swallowed = { "while true do pcall(signal.sleep, signal, 50) pcall(error, 'x') end", code = "TOOL_TIMEOUT" },
  wait_then_spin = { "signal:sleep(20) while true do end", code = "TOOL_TIMEOUT" },
  wait_then_close_spin = { [[
    local x <close> = setmetatable({}, { __close = function() while true do end end })
    signal:sleep(20) error('after the wait')]], code = "TOOL_TIMEOUT" },
  wait_in_close = { [[
    local x <close> = setmetatable({}, { __close = function() while true do signal:sleep(10) end end })
    error('first')]], code = "TOOL_TIMEOUT" },
}

-- A memory bomb must end on its memory limit, not on its deadline.
for _, case in pairs(CORPUS) do
  if case.code == "TOOL_MEMORY_LIMIT" then case.timeout = WORK_MS end
end

-- Both ways a handler is stopped (luma.deadline_signal): the watch's signal,
-- the default, and the count hook, which hosts that own the signal get.
local DEFAULT_SIGNAL = luma.deadline_signal()

for _, mechanism in ipairs { "the deadline signal", "the count hook" } do
describe("a hostile corpus of handlers, each ending cleanly, stopped by " .. mechanism, function()
  local handlers, names, timeouts = {}, {}, {}
  for name, case in pairs(CORPUS) do
    handlers[name] = case[1]
    timeouts[name] = case.timeout
    names[#names + 1] = name
  end
  table.sort(names)
  local outside = h.project { ["mod.lua"] = "return { v = 'escaped' }" }
  local p, dir
  setup(function()
    assert.is_true(luma.deadline_signal(mechanism == "the count hook" and false or DEFAULT_SIGNAL))
    p, dir = sandboxed(STRICT, handlers, { ["lib/keep.lua"] = "return {}", ["sub/keep.txt"] = "",
      ["lib/slow.lua"] = "return a" .. (" or a"):rep(3e5) }, timeouts)
    assert(os.execute(string.format("ln -s /proc/self/environ %s/env_link && ln -s /etc/passwd %s/link_out && " ..
      "ln -s %s/mod.lua %s/link_mod.lua && ln -s /tmp/luma-escape.txt %s/escape_link && mkfifo %s/fifo",
      h.quote(dir), h.quote(dir), h.quote(outside), h.quote(dir), h.quote(dir), h.quote(dir))))
  end)

  it("has at least 40 attacks", function()
    assert.is_true(#names >= 40, #names .. " attacks")
  end)

  for _, name in ipairs(names) do
    local case = CORPUS[name]
    it(name, function()
      local ok, res, ms = call(p, name)
      if case.code then
        assert.is_false(ok, "expected " .. case.code)
        assert.is_true(luma.is_error(res), tostring(res))
        assert.are.equal(case.code, res.code, res.message)
        if case.message then assert.matches(case.message, res.message, 1, true) end
        assert.is_false(res.retryable)
        if case.no_details then assert.is_nil(res.details) end
      else
        assert.is_true(ok, tostring(res))
        assert.are.equal(case.v, res.v)
      end
      -- the time bound held, whatever the handler did
      assert.is_true(ms < (case.timeout or TIMEOUT_MS) + SLACK_MS, string.format("%s took %.0f ms", name, ms))
      -- and the host and the module still work
      assert.are.equal("pong", p:call("ping", {}).v)
    end)
  end

  it("left no file outside the project", function()
    assert.is_false(exists(dir .. "/../escape.txt"))
    assert.is_false(exists("/tmp/luma-escape.txt"))
    assert.is_true(exists(dir .. "/probe.txt"))
  end)

  teardown(function()
    assert.is_true(luma.deadline_signal(DEFAULT_SIGNAL))
  end)
end)
end

describe("a hostile module", function()
  it("that is bytecode is refused at load", function()
    local dir = h.project { ["program.luma"] = "schema A { x: int }", ["luma.config.json"] = config(STRICT) }
    h.write(dir .. "/tools.lua", string.dump(load("return {}")))
    local _, err = h.load(dir)
    assert.are.equal("MODULE_INVALID", err.code)
    assert.matches("attempt to load a binary chunk", err.message, 1, true)
  end)

  it("whose top-level code never ends is stopped", function()
    local dir = h.project { ["program.luma"] = "schema A { x: int }", ["luma.config.json"] = config(STRICT),
      ["tools.lua"] = "local s = ('a'):rep(40) s:find(('a*'):rep(30) .. 'b') return {}" }
    local _, err = h.load(dir)
    assert.are.equal("MODULE_INVALID", err.code)
    assert.matches("its top-level code ran out of time", err.message, 1, true)
  end)

  it("whose top-level code runs out of memory is refused", function()
    local dir = h.project { ["program.luma"] = "schema A { x: int }",
      ["luma.config.json"] = config { sandbox = "strict", max_memory_mb = 16 },
      ["tools.lua"] = "local t = {} for i = 1, 1e8 do t[i] = i end return {}" }
    local _, err = h.load(dir)
    assert.are.equal("MODULE_INVALID", err.code)
    assert.matches("its top-level code ran out of memory", err.message, 1, true)
  end)

  it("whose top-level code is slow makes no call wait past its deadline for a new state", function()
    local dir = h.project {
      ["program.luma"] = "schema A { x?: int }\ntool spin() -> A { timeout: 200 }",
      ["luma.config.json"] = config { sandbox = "strict", allow_builtins = { "os" } },
      ["tools.lua"] = "local t0 = os.clock() while os.clock() - t0 < 1 do end\n" ..
        "return { spin = function() while true do end end }",
    }
    local p = assert(h.load(dir))
    -- the first call's state hit its deadline and is replaced by the next call
    assert.are.equal("TOOL_TIMEOUT", select(2, call(p, "spin")).code)
    local ok, err, ms = call(p, "spin")
    assert.is_false(ok)
    assert.are.equal("TOOL_TIMEOUT", err.code)
    assert.matches("its top-level code ran out of time", err.message, 1, true)
    assert.is_true(ms < 200 + SLACK_MS, ms .. " ms")
  end)

  it("may require only its listed dependencies, from its dependency_root", function()
    local dir = h.project {
      ["program.luma"] = "schema Out { v?: string }\ntool probe() -> Out {}",
      ["tools.lua"] = "return { probe = function() return { v = require('dep').v .. ' ' .. tostring(pcall(require, 'other')) } end }",
      ["deps/dep.lua"] = "return { v = 'dep' }",
      ["deps/other.lua"] = "return { v = 'other' }",
      ["luma.config.json"] = '{ "tool_modules": [{ "path": "tools.lua", "dependencies": ["dep"], "dependency_root": "deps" }],' ..
        ' "tool_module_policy": { "sandbox": "strict" } }',
    }
    local p = assert(h.load(dir))
    assert.are.equal("dep false", p:call("probe", {}).v)
  end)
end)

describe("a handler's needs", function()
  -- a tool without needs gets an empty table that states keep from call to
  -- call: what a handler puts in it or on it must not reach the next call
  local FILL = [[
    local seen = next(needs) ~= nil or getmetatable(needs) ~= nil
    rawset(needs, "left", "by an earlier call")
    setmetatable(needs, { __index = function() return "forged" end })
    return { v = tostring(seen) }]]

  for _, policy in ipairs { { sandbox = "none" }, { sandbox = "strict", max_concurrency = 1 } } do
    it("are empty in every call without needs, whatever the last one did to them (" .. policy.sandbox .. ")",
      function()
        local p = sandboxed(policy, { fill = FILL })
        for _ = 1, 3 do assert.are.equal("false", p:call("fill", {}).v) end
      end)
  end
end)
