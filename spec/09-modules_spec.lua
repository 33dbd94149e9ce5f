local luma = require "luma"
local h = require "spec.helpers"

local CALC_TOOLS = h.read(h.root .. "/spec/fixtures/calc_tools.lua")

-- every project folder of this file, removed when the file is done
local made = {}
local function project(files)
  local dir = h.project(files)
  made[#made + 1] = dir
  return dir
end
teardown(function()
  for _, dir in ipairs(made) do os.execute("rm -rf " .. h.quote(dir)) end
end)

local function calc_project(extra)
  local files = { ["program.luma"] = h.calculate, ["tools.lua"] = CALC_TOOLS }
  for k, v in pairs(extra or {}) do files[k] = v end
  return project(files)
end

local function add(program)
  return (program:call("calculate", { a = 2, b = 3, operation = "add" })).result
end

describe("tool modules", function()
  it("load with --tool-module and run their handlers", function()
    local dir = calc_project()
    local r = h.run({ "run", "program.luma", "--tool-module", "tools.lua" }, { cwd = dir })
    assert.are.equal(0, r.status, r.stderr)
  end)

  it("load from tool_modules of luma.config.json next to the program, in the short form", function()
    local dir = calc_project { ["luma.config.json"] = '{ "tool_modules": ["./tools.lua"] }' }
    assert.are.equal(5, add(assert(h.load(dir))))
  end)

  it("load from the manifest form", function()
    local dir = calc_project { ["luma.config.json"] = '{ "tool_modules": [{ "path": "tools.lua", "version": "1.0.0" }] }' }
    assert.are.equal(5, add(assert(h.load(dir))))
  end)

  it("take the config named by --config instead", function()
    local dir = calc_project { ["other.json"] = '{ "tool_modules": ["tools.lua"] }' }
    local r = h.run({ "run", "program.luma", "--config", "other.json" }, { cwd = dir })
    assert.are.equal(0, r.status, r.stderr)
  end)

  it("resolve --tool-module paths against the current directory and config paths against the config's", function()
    local dir = calc_project { ["conf/luma.config.json"] = '{ "tool_modules": ["../tools.lua"] }' }
    local program = assert(h.load(dir, { config = dir .. "/conf/luma.config.json" }))
    assert.are.equal(5, add(program))
  end)

  it("look the exports up as lumaTools, then tools, then default, then the module table", function()
    local fn = "function(i) return { result = %d } end"
    local cases = {
      { "return { lumaTools = { calculate = " .. fn:format(1) .. " }, tools = { calculate = " .. fn:format(2) .. " } }", 1 },
      { "return { tools = { calculate = " .. fn:format(2) .. " }, default = { calculate = " .. fn:format(3) .. " } }", 2 },
      { "return { default = { calculate = " .. fn:format(3) .. " } }", 3 },
      { "return { calculate = " .. fn:format(4) .. " }", 4 },
    }
    for _, c in ipairs(cases) do
      local dir = project { ["program.luma"] = h.calculate, ["tools.lua"] = c[1] }
      assert.are.equal(c[2], add(assert(h.load(dir, { tool_modules = { dir .. "/tools.lua" } }))))
    end
  end)

  it("require every exported value to be a function", function()
    local dir = project { ["program.luma"] = h.calculate, ["tools.lua"] = "return { calculate = 5 }" }
    local _, err = h.load(dir, { tool_modules = { dir .. "/tools.lua" } })
    assert.are.equal("MODULE_INVALID", err.code)
    assert.matches("exports 'calculate' as a number; every value must be a function", err.message, 1, true)
  end)

  it("report a module that returns no table", function()
    local dir = project { ["program.luma"] = h.calculate, ["tools.lua"] = "return 42" }
    local _, err = h.load(dir, { tool_modules = { dir .. "/tools.lua" } })
    assert.matches("must return a table of handlers, not number", err.message, 1, true)
  end)

  it("say 'Tool registry conflict' when two modules export one name", function()
    local dir = calc_project { ["more.lua"] = CALC_TOOLS }
    local _, err = h.load(dir, { tool_modules = { dir .. "/tools.lua", dir .. "/more.lua" } })
    assert.are.equal("Tool registry conflict: calculate.", err.message)
    assert.are.same({ "calculate", { dir .. "/tools.lua", dir .. "/more.lua" } }, { err.details.tool, err.details.modules })
    local r = h.run({ "program.luma", "--tool-module", "tools.lua", "--tool-module", "more.lua" }, { cwd = dir })
    assert.are.equal(2, r.status)
    assert.are.equal("Error: Tool registry conflict: calculate.\n" ..
      "'calculate' is exported by both tools.lua and more.lua; keep one of the two handlers.\n", r.stderr)
  end)

  it("load the same file given twice only once", function()
    local dir = calc_project { ["luma.config.json"] = '{ "tool_modules": ["tools.lua"] }' }
    assert.are.equal(5, add(assert(h.load(dir, { tool_modules = { dir .. "/tools.lua" } }))))
  end)

  it("refuse the same file again with other metadata", function()
    local dir = calc_project { ["luma.config.json"] = [[{ "tool_modules": [
      { "path": "tools.lua", "version": "1.0.0" }, { "path": "./tools.lua", "version": "2.0.0" } ] }]] }
    local _, err = h.load(dir)
    assert.are.equal("MODULE_INVALID", err.code)
    assert.are.equal("tool module './tools.lua' is loaded twice with different version", err.message)
  end)

  it("stop a program whose contract has no handler before anything runs", function()
    local dir = project { ["program.luma"] = h.calculate .. 'x = tool calculate({ a: 1, b: 2, operation: "add" })' }
    local r = h.run({ "program.luma" }, { cwd = dir })
    assert.are.equal(2, r.status)
    -- SPEC.md's message, then where handlers were looked for
    assert.are.equal("Error: 'calculate' is not registered in the tool registry.\n" ..
      "No tool module is loaded: list one in luma.config.json's tool_modules (or pass --tool-module), " ..
      "or register a handler with program:register.\n", r.stderr)
    assert.are.equal("", r.stdout)
  end)

  it("leave a tool declared handler: \"host\" to the host, which registers it after the load", function()
    local dir = project { ["program.luma"] = 'schema R { v: int }\ntool lookup() -> R {}\n' ..
      'tool host_calc(a: int) -> R { handler: "host" }\nx = tool lookup({})',
      ["tools.lua"] = "return { lookup = function() return { v = 1 } end }" }
    local p = luma.load(dir .. "/program.luma", { tool_modules = { dir .. "/tools.lua" } })
    assert.are.same({}, p:missing_handlers())
    assert.are.equal("host", p:declaration("host_calc").handler)
    assert.are.equal("module", p:declaration("lookup").handler)
    -- the statements run: the host's tool is not looked for in the modules
    assert.are.same({ v = 1 }, p:run().x)
    -- a call before the host registers it has no handler yet
    assert.are.equal("TOOL_NOT_FOUND", h.raised(p.call, p, "host_calc", { a = 1 }).code)
    p:register("host_calc", function(input) return { v = input.a * 2 } end)
    assert.are.same({ v = 4 }, (p:call("host_calc", { a = 2 })))
  end)

  it("say which modules were loaded, and the closest export, when none has a contract's handler", function()
    local dir = project { ["program.luma"] = h.calculate .. 'x = tool calculate({ a: 1, b: 2, operation: "add" })',
      ["tools.lua"] = "return { calculat = function() end }" }
    local r = h.run({ "program.luma", "--tool-module", "tools.lua" }, { cwd = dir })
    assert.are.equal(2, r.status)
    assert.are.equal("Error: 'calculate' is not registered in the tool registry.\n" ..
      "Tool modules loaded: tools.lua; none exports 'calculate'. Did you mean 'calculat'?\n", r.stderr)
    local p = luma.load(dir .. "/program.luma", { tool_modules = { dir .. "/tools.lua" } })
    local err = h.raised(p.run, p)
    assert.are.equal("'calculate' is not registered in the tool registry.", err.message)
    assert.are.same({ dir .. "/tools.lua" }, err.details.modules)
  end)

  it("run in a Lua state of their own", function()
    local dir = project {
      ["program.luma"] = h.calculate,
      ["tools.lua"] = [[
        leaked_global = "module"
        return { calculate = function(i) return { result = (rawget(_G, "host_global") and 1 or 0) } end }]],
    }
    host_global = true
    local program = assert(h.load(dir, { tool_modules = { dir .. "/tools.lua" } }))
    assert.are.equal(0, add(program))
    assert.is_nil(rawget(_G, "leaked_global"))
    host_global = nil
  end)
end)

describe("the integrity of a tool module", function()
  -- computed with coreutils, not with luma's own code
  local function integrity(text)
    local src = h.write(h.tmpname(".txt"), text)
    local f = assert(io.popen("sha256sum " .. h.quote(src)))
    local hex = f:read("*l"):match("^(%x+)")
    f:close()
    local bin = h.write(h.tmpname(".bin"), (hex:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)))
    f = assert(io.popen("base64 -w0 " .. h.quote(bin)))
    local b64 = f:read("*l")
    f:close()
    os.remove(src)
    os.remove(bin)
    return "sha256-" .. b64
  end

  it("lets a module with the right sha256 load", function()
    local dir = calc_project { ["luma.config.json"] = '{ "tool_modules": [{ "path": "tools.lua", "integrity": "' .. integrity(CALC_TOOLS) .. '" }] }' }
    assert.are.equal(5, add(assert(h.load(dir))))
  end)

  it("refuses a module whose content does not match", function()
    local dir = calc_project { ["luma.config.json"] = '{ "tool_modules": [{ "path": "tools.lua", "integrity": "' .. integrity("other") .. '" }] }' }
    local _, err = h.load(dir)
    assert.are.equal("MODULE_INVALID", err.code)
    assert.matches("integrity check failed for '.*tools.lua': expected sha256%-", err.message)
  end)

  it("must be written sha256-<base64>", function()
    local dir = calc_project { ["luma.config.json"] = '{ "tool_modules": [{ "path": "tools.lua", "integrity": "md5-abc" }] }' }
    local _, err = h.load(dir)
    assert.are.equal("CONFIG_INVALID", err.code)
    assert.matches("tool_modules%[1%]%.integrity must be written sha256%-<base64>", err.message)
  end)
end)

describe("require inside a tool module", function()
  local uses = [[
    local helper = require "helper"
    return { calculate = function(i) return { result = helper.twice(i.a) } end }]]

  it("loads the modules listed in dependencies from dependency_root", function()
    local dir = calc_project {
      ["tools.lua"] = uses,
      ["vendor/helper.lua"] = "return { twice = function(x) return 2 * x end }",
      ["luma.config.json"] = '{ "tool_modules": [{ "path": "tools.lua", "dependencies": ["helper"], "dependency_root": "vendor" }] }',
    }
    assert.are.equal(4, add(assert(h.load(dir))))
  end)

  it("refuses a module that dependencies do not list", function()
    local dir = calc_project {
      ["tools.lua"] = 'local x = require "secret"\n' .. uses,
      ["vendor/helper.lua"] = "return {}",
      ["vendor/secret.lua"] = "return {}",
      ["luma.config.json"] = '{ "tool_modules": [{ "path": "tools.lua", "dependencies": ["helper"], "dependency_root": "vendor" }] }',
    }
    local _, err = h.load(dir)
    assert.are.equal("MODULE_INVALID", err.code)
    assert.matches("module 'secret' is not among the tool module's dependencies", err.message, 1, true)
  end)

  it("does not let a dependency_root leave the project", function()
    local dir = calc_project {
      ["luma.config.json"] = '{ "tool_modules": [{ "path": "tools.lua", "dependencies": ["x"], "dependency_root": "/tmp" }] }',
    }
    local _, err = h.load(dir)
    assert.are.equal("MODULE_INVALID", err.code)
    assert.matches("leaves the project", err.message, 1, true)
  end)

  it("does not let a dependency name climb out of dependency_root", function()
    local dir = calc_project {
      ["tools.lua"] = 'local x = require "..outside"\nreturn {}',
      ["outside.lua"] = "return {}",
      ["vendor/keep.lua"] = "return {}",
      ["luma.config.json"] = '{ "tool_modules": [{ "path": "tools.lua", "dependencies": ["..outside"], "dependency_root": "vendor" }] }',
    }
    local _, err = h.load(dir)
    assert.are.equal("CONFIG_INVALID", err.code)
  end)

  it("never loads a precompiled chunk", function()
    local dir = project { ["program.luma"] = h.calculate }
    h.write(dir .. "/tools.lua", string.dump(function() return {} end))
    local _, err = h.load(dir, { tool_modules = { dir .. "/tools.lua" } })
    assert.are.equal("MODULE_INVALID", err.code)
    assert.matches("attempt to load a binary chunk", err.message, 1, true)
  end)
end)

describe("luma.config.json", function()
  local cases = {
    { "{", "not valid JSON" },
    { "[]", "the configuration must be a JSON object, not an array" },
    { '{ "tool_module": [] }', "the configuration has no key 'tool_module'. Did you mean 'tool_modules'?" },
    { '{ "tool_modules": "tools.lua" }', "tool_modules must be an array of paths or manifests, not a string" },
    { '{ "tool_modules": null }', "tool_modules must be an array of paths or manifests, not null" },
    { '{ "tool_modules": [5] }', 'tool_modules[1] must be a path or a manifest ({ "path": "tools.lua", ... }), not a number' },
    { '{ "tool_modules": [{ "version": "1" }] }', "tool_modules[1].path is missing: it must be a string (the module's file)" },
    { '{ "tool_modules": [{ "path": "t.lua", "integrity": 5 }] }', "tool_modules[1].integrity must be a string of the form sha256-<base64>, not a number" },
    { '{ "tool_modules": [{ "path": "t.lua", "dependencies": "a" }] }', "tool_modules[1].dependencies must be an array of module names, not a string" },
    { '{ "tool_contexts": { "db": { "user": "DB_USER" } } }', 'tool_contexts.db.user must be { "env": "NAME", "parse": "string" }, not a string' },
    { '{ "tool_contexts": ["db"] }', "tool_contexts must be an object of contexts, each an object of fields, not an array" },
    { '{ "tool_modules": [{ "path": "t.lua", "verison": "1" }] }', "tool_modules[1] has no key 'verison'. Did you mean 'version'?" },
    { '{ "tool_contexts": { "db": { "port": { "env": "P", "parse": "float" } } } }', 'tool_contexts.db.port.parse must be one of "string", "json", "number", "integer", "boolean"' },
    { '{ "tool_contexts": { "db": { "port": { "env": "1P" } } } }', "tool_contexts.db.port.env must be an environment variable name" },
    { '{ "idempotency_store": { "backend": "mongo" } }', 'idempotency_store.backend must be "memory", "file", "sqlite" or "redis", not "mongo"' },
    { '{ "idempotency_store": { "type": "redis" } }', 'idempotency_store.url is missing: it must be a string' },
    { '{ "idempotency_store": { "type": "redis", "url": "redis://h", "lease_ms": 1.5 } }', 'idempotency_store.lease_ms must be an integer, not 1.5' },
    { '{ "idempotency_store": "sqlite" }', 'idempotency_store must be { "type": "memory" | "file" | "sqlite" | "redis", ... }, not a string' },
    { '{ "idempotency_store": { "type": "redis", "url": "http://x" } }', 'idempotency_store.url must be redis://[user:password@]host:port/db' },
    { '{ "idempotency_store": { "type": "redis", "url": "redis://h", "lease_ms": 5 } }', 'idempotency_store.lease_ms must be at least 100' },
    { '{ "idempotency_store": { "type": "redis", "url": "redis://h", "on_unavailable": "skip" } }', 'idempotency_store.on_unavailable must be "fail" (the default) or "run"' },
    { '{ "idempotency_store": { "type": "sqlite", "url": "redis://h" } }', 'idempotency_store.url is only for the redis store' },
    { '{ "idempotency_store": { "type": "memory", "encryption": "aes-256-gcm" } }', 'idempotency_store.encryption is only for the file, sqlite and redis stores' },
    { '{ "idempotency_store": { "backend": "file", "encryption": "rot13" } }', 'idempotency_store.encryption must be "aes-256-gcm"' },
    { '{ "tool_module_policy": { "sandbox": "jail" } }', 'tool_module_policy.sandbox must be "none" or "strict"' },
  }
  for _, c in ipairs(cases) do
    it("rejects " .. c[1], function()
      local dir = project { ["program.luma"] = "schema A { x: int }", ["luma.config.json"] = c[1] }
      local _, err = h.load(dir)
      assert.are.equal("CONFIG_INVALID", err.code)
      assert.matches(c[2], err.message, 1, true)
      assert.matches("luma.config.json: ", err.message, 1, true)
    end)
  end

  it("is not read when opts.config is false", function()
    local dir = project { ["program.luma"] = "schema A { x: int }", ["luma.config.json"] = "{" }
    assert.is_truthy(h.load(dir, { config = false }))
  end)
end)
