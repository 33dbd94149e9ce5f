local h = require "spec.helpers"

describe("luma-lua check", function()
  it("prints ok and exits 0 for a valid program", function()
    local r = h.run { "check", h.program_file(h.calculate) }
    assert.are.equal(0, r.status)
    assert.are.equal("ok\n", r.stdout)
  end)

  it("prints every error with its source line and a caret, and exits 1", function()
    local path = h.program_file("schema A {\n  x: strng\n  y: int @rnage(1, 2)\n}\n")
    local r = h.run { "check", path }
    assert.are.equal(1, r.status)
    assert.are.equal("", r.stdout)
    assert.are.equal(
      path .. ":2:6: Unknown type 'strng'. Did you mean 'string'?\n" ..
      "  x: strng\n" ..
      "     ^\n" ..
      path .. ":3:10: Unknown annotation '@rnage'. Did you mean '@range'?\n" ..
      "  y: int @rnage(1, 2)\n" ..
      "         ^\n" ..
      "2 errors\n", r.stderr)
  end)

  it("takes a mistyped command for one, not for a program", function()
    local r = h.run { "chekc", "x.luma" }
    assert.are.equal(2, r.status)
    assert.are.equal("luma-lua: unknown command 'chekc' (did you mean 'check'?)\nRun 'luma-lua --help' for usage.\n", r.stderr)
  end)

  it("says when the file cannot be read", function()
    local r = h.run { "check", "/nonexistent/x.luma" }
    assert.are.equal(1, r.status)
    assert.are.equal("Error: cannot read '/nonexistent/x.luma': No such file or directory\n", r.stderr)
  end)
end)

describe("luma-lua tools", function()
  it("prints the tool declarations as a JSON array", function()
    local r = h.run { "tools", h.program_file(h.calculate) }
    assert.are.equal(0, r.status)
    local decls = require("cjson").decode(r.stdout)
    assert.are.equal(1, #decls)
    assert.are.equal("calculate", decls[1].name)
    assert.are.equal("", decls[1].description)
    assert.are.same({ "a", "b", "operation" }, decls[1].parameters.required)
  end)

  it("exits 2 with the load errors for a program that does not load", function()
    local r = h.run { "tools", h.program_file("tool t(a: int) -> string {}\n") }
    assert.are.equal(2, r.status)
    assert.matches("must return a declared schema, not 'string'", r.stderr, 1, true)
  end)
end)

describe("luma-lua options", function()
  it("prints the version with --version", function()
    local r = h.run { "--version" }
    assert.are.equal(0, r.status)
    assert.matches("^luma%-lua %d+%.%d+%.%d+ %(Lua 5%.4%.%d+%)\n$", r.stdout)
  end)

  it("prints usage with --help", function()
    local r = h.run { "--help" }
    assert.are.equal(0, r.status)
    assert.matches("usage: luma%-lua", r.stdout)
    assert.matches("check PROGRAM", r.stdout)
  end)

  it("rejects an unknown option with exit status 2", function()
    local r = h.run { "--frobnicate" }
    assert.are.equal(2, r.status)
    assert.matches("unknown option '--frobnicate'", r.stderr, 1, true)
  end)

  it("runs a program given without a command", function()
    local r = h.run { "/nonexistent/frobnicate.luma" }
    assert.are.equal(2, r.status)
    assert.are.equal("Error: cannot read '/nonexistent/frobnicate.luma': No such file or directory\n", r.stderr)
  end)
end)
