local luma = require "luma"
local core = require "luma.core"
local h = require "spec.helpers"

-- The rows of the first Markdown table after `heading` in the README, as
-- lists of cells with their backticks removed.
local function readme_table(heading)
  local rows, inside, seen_table = {}, false, false
  for line in (h.read(h.root .. "/README.md") .. "\n"):gmatch("([^\n]*)\n") do
    if line == heading then
      inside = true
    elseif inside and line:match("^#") then
      break
    elseif inside and line:match("^|") then
      seen_table = true
      if not line:match("^|%-") then
        local cells = {}
        for cell in line:sub(2):gmatch("%s*(.-)%s*|") do cells[#cells + 1] = (cell:gsub("`", "")) end
        rows[#rows + 1] = cells
      end
    elseif inside and seen_table then
      break
    end
  end
  table.remove(rows, 1)  -- the header
  return rows
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- Every "CODE_LIKE" string literal of the files matching `pattern` (a shell
-- glob), as { [code] = "file:line" }.
local function quoted_codes(glob)
  local found = {}
  local files = assert(io.popen("cd " .. h.quote(h.root) .. " && ls " .. glob))
  for file in files:lines() do
    local n = 0
    for line in (h.read(h.root .. "/" .. file) .. "\n"):gmatch("([^\n]*)\n") do
      n = n + 1
      for code in line:gmatch("[\"']([A-Z][A-Z0-9]*_[A-Z0-9_]+)[\"']") do
        found[code] = found[code] or (file .. ":" .. n)
      end
    end
  end
  files:close()
  return found
end

describe("the catalogue of error codes", function()
  it("is luma.errors, the same table as core.errors", function()
    assert.are.equal(core.errors, luma.errors)
    assert.are.same({ meaning = "the handler did not finish before its deadline", retryable = false,
                      template = "Tool '%s' timed out after %d ms." }, luma.errors.TOOL_TIMEOUT)
  end)

  it("has a meaning and a boolean retryable for every code", function()
    for code, e in pairs(luma.errors) do
      assert.matches("^[A-Z][A-Z0-9]*_[A-Z0-9_]+$", code)
      assert.are.equal("string", type(e.meaning), code)
      assert.is_true(#e.meaning > 0, code)
      assert.are.equal("boolean", type(e.retryable), code)
    end
  end)

  it("lists TOOL_CANCELLED and no longer TOOL_NOT_REGISTERED", function()
    assert.are.equal("Tool 'fetch' was cancelled.", luma.errors.TOOL_CANCELLED.template:format("fetch"))
    assert.is_false(luma.errors.TOOL_CANCELLED.retryable)
    assert.is_nil(luma.errors.TOOL_NOT_REGISTERED)
  end)

  it("is the README's table of error codes, row for row", function()
    local rows = readme_table("### Error codes")
    local listed = {}
    for _, row in ipairs(rows) do
      assert.are.equal(3, #row, table.concat(row, " | "))
      assert.is_nil(listed[row[1]], "listed twice: " .. row[1])
      listed[row[1]] = row[3]
    end
    assert.are.same(sorted_keys(luma.errors), sorted_keys(listed))
    for code, e in pairs(luma.errors) do
      assert.are.equal(tostring(e.retryable), listed[code], code)
    end
  end)

  it("holds every code string of lua/luma/*.lua (environment variables aside)", function()
    local environment = { NO_COLOR = true }
    for code, where in pairs(quoted_codes("lua/luma/*.lua")) do
      if not code:match("^LUMA_") and not environment[code] then assert(luma.errors[code], where .. ": " .. code .. " is not in the catalogue (base/errors.h)") end
    end
  end)

  it("holds every code string of the C sources (environment variables aside)", function()
    -- (adapters/ quote the providers' words, not codes: SAFETY, MAX_TOKENS...)
    -- (and the variables a handler process keeps with the network: sandbox/confine.c)
    local environment = { LD_PRELOAD = true, HTTPS_PROXY = true, ALL_PROXY = true, NO_PROXY = true,
                          CURL_CA_BUNDLE = true, SSL_CERT_FILE = true, SSL_CERT_DIR = true }
    for code, where in pairs(quoted_codes("base/*.[ch] sandbox/*.[ch] core/*.[ch]")) do
      if not code:match("^LUMA_") and not code:match("_API_KEY$") and not environment[code] then
        assert(luma.errors[code], where .. ": " .. code .. " is not in the catalogue (base/errors.h)")
      end
    end
  end)
end)

describe("luma.error", function()
  it("takes the catalogue's retryable when none is given", function()
    local cases = {
      { { code = "HTTP_TIMEOUT" }, true },
      { { code = "HTTP_TIMEOUT", retryable = false }, false },
      { { code = "TOOL_TIMEOUT" }, false },
      { { code = "TOOL_TIMEOUT", retryable = true }, true },
      { { code = "UNSUPPORTED" }, false },
      { { code = "UNSUPPORTED", retryable = true }, true },
    }
    for _, c in ipairs(cases) do
      assert.are.equal(c[2], luma.error(c[1]).retryable, c[1].code .. " " .. tostring(c[1].retryable))
    end
  end)
end)

describe("a declared tool without a handler", function()
  it("is TOOL_NOT_FOUND before anything runs, with the specification's message", function()
    local program = luma.compile(h.calculate .. 'x = tool calculate({ a: 1, b: 2, operation: "add" })\n')
    for _, fn in ipairs { program.run, program.prepare, program.check_registry } do
      local err = h.raised(fn, program)
      assert.are.equal("TOOL_NOT_FOUND", err.code)
      assert.are.equal("'calculate' is not registered in the tool registry.", err.message)
    end
  end)
end)

describe("the command line's exit status", function()
  local function project(handler_body)
    return h.project {
      ["program.luma"] = h.calculate .. 'x = tool calculate({ a: 1, b: 2, operation: "add" })\n',
      ["tools.lua"] = "return { calculate = function(input) " .. handler_body .. " end }\n",
    }
  end

  it("is 1 for an error raised while the program runs, whatever its code", function()
    local dir = project('error(luma.ToolError { code = "DB_DOWN", message = "from the handler" })')
    local r = h.run({ "program.luma", "--tool-module", "tools.lua" }, { cwd = dir })
    assert.are.equal(1, r.status)
    assert.are.equal("Error: [DB_DOWN] from the handler\n", r.stderr)
    -- a handler cannot pass for the runtime with one of its codes
    dir = project('error(luma.ToolError { code = "AGENT_NOT_FOUND", message = "from the handler" })')
    r = h.run({ "program.luma", "--tool-module", "tools.lua" }, { cwd = dir })
    assert.are.equal(1, r.status)
    assert.matches("^Error: %[TOOL_FAILED%] Tool 'calculate' raised an error with the code 'AGENT_NOT_FOUND'", r.stderr)
  end)

  it("is 2 for a refusal before the first statement runs", function()
    local dir = project("return { result = 3 }")
    local r = h.run({ "program.luma" }, { cwd = dir })
    assert.are.equal(2, r.status)
    assert.matches("^Error: 'calculate' is not registered in the tool registry.\nNo tool module is loaded", r.stderr)
    r = h.run({ "program.luma", "--tool-module", "tools.lua" }, { cwd = dir })
    assert.are.equal(0, r.status, r.stderr)
  end)
end)
