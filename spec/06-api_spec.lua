local luma = require "luma"
local h = require "spec.helpers"

describe("require 'luma'", function()
  it("offers load, compile, null, error, is_error and version", function()
    assert.are.equal("function", type(luma.load))
    assert.are.equal("function", type(luma.compile))
    assert.are.equal(require("cjson").null, luma.null)
    assert.matches("^%d+%.%d+%.%d+$", luma.version)
  end)
end)

describe("luma.load", function()
  it("compiles a file and names it in messages", function()
    local good = h.program_file(h.calculate)
    assert.are.same({ "calculate" }, luma.load(good):declarations().tools)
    local bad = h.program_file("schema A { x: Nope }")
    local ok, err = pcall(luma.load, bad)
    assert.is_false(ok)
    assert.are.equal(bad .. ":1:15: Unknown type 'Nope'.\nschema A { x: Nope }\n              ^", err.message)
    assert.are.equal(bad, err.details.diagnostics[1].file)
  end)

  it("raises IO_ERROR for a file it cannot read", function()
    local ok, err = pcall(luma.load, "/nonexistent/p.luma")
    assert.is_false(ok)
    assert.are.equal("IO_ERROR", err.code)
    assert.are.equal("[IO_ERROR] cannot read '/nonexistent/p.luma': No such file or directory", tostring(err))
  end)

  it("refuses a directory", function()
    local ok, err = pcall(luma.load, "/tmp")
    assert.is_false(ok)
    assert.are.equal("IO_ERROR", err.code)
  end)

  it("refuses a file above max_source_bytes before reading it", function()
    local path = h.program_file(string.rep("# comment\n", 20))
    local ok, err = pcall(luma.load, path, { limits = { max_source_bytes = 100 } })
    assert.is_false(ok)
    assert.are.equal("PROGRAM_INVALID", err.code)
    assert.are.equal(path .. ": the program is 200 bytes; the limit is 100", err.message)
  end)
end)

describe("luma.compile", function()
  it("defaults the chunk name to program.luma", function()
    local ok, err = pcall(luma.compile, "schema A { x: Nope }")
    assert.is_false(ok)
    assert.matches("^program%.luma:1:15: ", err.message)
  end)

  it("raises a structured PROGRAM_INVALID error listing every problem", function()
    local ok, err = pcall(luma.compile, "schema A { x: Nope\n y: Nada }", "mine.luma")
    assert.is_false(ok)
    assert.is_true(luma.is_error(err))
    assert.are.equal("PROGRAM_INVALID", err.code)
    assert.is_false(err.retryable)
    assert.are.equal(2, #err.details.diagnostics)
    assert.are.same({ file = "mine.luma", line = 2, col = 5, message = "Unknown type 'Nada'.",
      text = "mine.luma:2:5: Unknown type 'Nada'.\n y: Nada }\n    ^" }, err.details.diagnostics[2])
    assert.are.equal(err.details.diagnostics[1].text .. "\n" .. err.details.diagnostics[2].text, err.message)
    assert.are.equal("[PROGRAM_INVALID] " .. err.message, tostring(err))
  end)

  it("rejects a source that is not a string", function()
    assert.has_error(function() luma.compile(42) end, "bad argument #1 to 'compile' (string expected, got number)")
  end)

  it("rejects unknown limits and limits of the wrong type", function()
    assert.has_error(function() luma.compile("", nil, { limits = { max_dept = 3 } }) end, "opts.limits has no limit 'max_dept'")
    assert.has_error(function() luma.compile("", nil, { limits = { max_depth = 0 } }) end, "opts.limits.max_depth must be a positive integer")
    assert.has_error(function() luma.compile("", nil, { limits = 5 }) end, "opts.limits must be a table")
  end)

  it("compiles an empty program", function()
    assert.are.same({ schemas = {}, tools = {}, agents = {}, models = {}, provider_tools = {} }, luma.compile(""):declarations())
  end)
end)

describe("structured errors", function()
  it("are made with luma.error and print as [CODE] message", function()
    local err = luma.error { code = "DB_TIMEOUT", message = "Database timed out", retryable = true, details = { table = "t" } }
    assert.is_true(luma.is_error(err))
    assert.are.same({ code = "DB_TIMEOUT", message = "Database timed out", retryable = true, details = { table = "t" } },
      { code = err.code, message = err.message, retryable = err.retryable, details = err.details })
    assert.are.equal("[DB_TIMEOUT] Database timed out", tostring(err))
    local ok, caught = pcall(error, err)
    assert.is_false(ok)
    assert.are.equal(err, caught)
  end)

  it("need a code", function()
    assert.has_error(function() luma.error { message = "x" } end)
  end)

  it("keep their metatable", function()
    local err = luma.error { code = "X" }
    assert.has_error(function() setmetatable(err, nil) end)
    assert.is_false(luma.is_error({ code = "X", message = "m" }))
  end)
end)

describe("a program", function()
  local program = luma.compile(h.calculate .. [[
schema Database { user: string, port: int }
tool db_write(request_id: string, value: string) -> CalcResult {
  description: "Writes a value"
  side_effects: "write"
  scope: "db:write"
  credential: "DB_PASSWORD"
  idempotent: true
  idempotency_key: input.request_id
  retries: 3
  retry_backoff: "exponential"
  timeout: 3000
  needs db: Database
}]], "prog.luma")

  it("describes a tool's configuration", function()
    local t = program:declaration("db_write")
    assert.are.equal("tool", t.kind)
    assert.are.equal("Writes a value", t.description)
    assert.are.equal("__tool_db_write_input", t.input)
    assert.are.equal("CalcResult", t.output)
    assert.are.equal("write", t.side_effects)
    assert.are.equal("db:write", t.scope)
    assert.are.equal("DB_PASSWORD", t.credential)
    assert.is_true(t.idempotent)
    assert.are.same({ "request_id" }, t.idempotency_key)
    assert.are.equal(300000, t.idempotency_ttl_ms)
    assert.are.equal(3, t.retries)
    assert.are.equal("exponential", t.retry_backoff)
    assert.are.equal(100, t.retry_delay)
    assert.are.equal(3000, t.timeout)
    assert.is_false(t.cache)
    assert.are.same({ { name = "db", schema = "Database" } }, t.needs)
    assert.are.same({ "request_id", "value" }, { t.params[1].name, t.params[2].name })
  end)

  it("describes a schema as a declaration", function()
    local s = program:declaration("Database")
    assert.are.equal("schema", s.kind)
    assert.are.equal("record", s.form)
  end)

  it("returns nil for names it does not declare", function()
    assert.is_nil(program:declaration("nope"))
    assert.is_nil(program:schema("nope"))
  end)

  it("knows its chunk name and prints it", function()
    assert.are.equal("prog.luma", program:chunkname())
    assert.are.equal("luma.Program (prog.luma)", tostring(program))
  end)

  it("can be closed, after which its methods raise", function()
    local p = luma.compile(h.calculate)
    p:close()
    p:close()
    assert.has_error(function() p:tools() end)
    assert.are.equal("luma.Program (closed)", tostring(p))
  end)
end)

describe("luma.json.decode", function()
  it("refuses a duplicate key, naming it with its line and column", function()
    local ok, err = pcall(luma.json.decode, '{"a": 1,\n "a": 2}')
    assert.is_false(ok)
    assert.are.equal("JSON_INVALID", err.code)
    assert.matches('duplicate key "a" %(line 2, column 2%) at offset 10', err.message)
  end)
end)
