-- The README cannot rot: every fenced code block in it is compiled, run or
-- checked here (the Embedding section's blocks by spec/23).
local luma = require "luma"
local core = require "luma.core"
local config = require "luma.config"
local h = require "spec.helpers"

local README = h.read(h.root .. "/README.md")

-- { { lang, code, line, section } } for every fenced block
local function blocks()
  local list, line, section, open = {}, 0, nil, nil
  for text in (README .. "\n"):gmatch("(.-)\n") do
    line = line + 1
    if not open and text:match("^## ") then section = text:sub(4) end
    local lang = text:match("^```(%w*)$")
    if lang then
      if open then
        list[#list + 1] = open
        open = nil
      else
        open = { lang = lang, code = "", line = line, section = section }
      end
    elseif open then
      open.code = open.code .. text .. "\n"
    end
  end
  return list
end

local BLOCKS = blocks()

local function of(lang, section)
  local list = {}
  for _, b in ipairs(BLOCKS) do
    if b.lang == lang and (section == nil or b.section == section) then list[#list + 1] = b end
  end
  return list
end

-- What the examples refer to without declaring it themselves.
local PRELUDE = [[
schema DbResult { ok: bool }
schema ToolError { code: string, message: string }
schema Database { url: string }
schema Answer { summary: string }
schema Stats { words: int }
tool text_stats(text: string) -> Stats { }
]]

describe("the README's code blocks", function()
  it("are all checked: luma, lua, json and c, and no other kind", function()
    local kinds = {}
    for _, b in ipairs(BLOCKS) do kinds[b.lang] = (kinds[b.lang] or 0) + 1 end
    for lang in pairs(kinds) do
      assert.is_truthy(({ luma = true, lua = true, json = true, c = true })[lang],
        "a ```" .. lang .. " block is not checked by any spec")
    end
    assert.is_true(#of("luma") >= 5)
  end)

  it("compile, every luma block together, as one program", function()
    local source = PRELUDE
    for _, b in ipairs(of("luma")) do source = source .. "\n# README line " .. b.line .. "\n" .. b.code end
    -- the mcp_server's tools as server-filesystem lists them: luma.compile
    -- starts no server, the compiler takes a listing (luma.load's)
    local path = { type = "object", properties = { path = { type = "string" } }, required = { "path" } }
    local listed = { files = { { name = "read_text_file", inputSchema = path }, { name = "list_directory", inputSchema = path } } }
    local ok, err = pcall(core.compile, source, "README.md", { mcp = listed })
    assert(ok, tostring(err) .. "\n" .. (type(err) == "table" and err.details and
      core.json_encode(err.details.diagnostics) or ""))
  end)

  it("run the handler module against the first contract", function()
    local contract, module
    for _, b in ipairs(of("luma")) do contract = contract or (b.code:find("tool calculate", 1, true) and b.code) end
    for _, b in ipairs(of("lua")) do module = module or (b.code:match("^%-%- tools%.lua") and b.code) end
    assert.is_truthy(contract and module)
    local dir = h.project { ["program.luma"] = contract, ["tools.lua"] = module }
    local p = luma.load(dir .. "/program.luma", { tool_modules = { dir .. "/tools.lua" } })
    assert.are.same({ result = 5 }, (p:call("calculate", { a = 2, b = 3, operation = "add" })))
    assert.are.same({ result = 6 }, (p:call("calculate", { a = 2, b = 3, operation = "multiply" })))
    os.execute("rm -rf " .. h.quote(dir))
  end)

  it("name only methods that exist, in the Lua API listing", function()
    local listing
    for _, b in ipairs(of("lua", "The Lua API")) do listing = listing or b.code end
    assert.is_truthy(listing)
    local program = luma.compile("schema S { x: int }\nagent A { fn run() -> int { return 1 } }")
    local objects = {
      program = program,
      c = program.start and luma.runtime and core.Call,
      a = core.Ask,
      rt = luma.runtime(),
      f = getmetatable(program:agent("A"):start("run", {})),
      luma = luma,
    }
    local checked = 0
    for object, sep, method in listing:gmatch("%f[%w_]([%a_]+)([:%.])([%a_]+)%(") do
      local target = objects[object]
      if target then
        local found = target[method]
        if object == "f" then found = target.__index[method] end
        if object == "program" and not found then found = program:agent("A")[method] end
        assert.is_truthy(found, "the README names " .. object .. sep .. method .. ", which does not exist")
        checked = checked + 1
      end
    end
    assert.is_true(checked >= 30, checked .. " names checked")
    objects.rt:close()
  end)

  it("have a config that the config reader accepts", function()
    local list = of("json")
    assert.is_true(#list >= 1)
    for _, b in ipairs(list) do
      -- an MCP client's configuration (Serving tools over MCP) runs luma-lua
      -- mcp, or names the URL luma-lua mcp --http serves
      if b.code:find('"mcpServers"', 1, true) then
        local servers = luma.json.decode(b.code).mcpServers
        for _, server in pairs(servers) do
          if server.type == "http" then
            assert.matches("^http://127%.0%.0%.1:%d+/mcp$", server.url)
          else
            assert.are.same({ "luma-lua", "mcp" }, { server.command, server.args[1] })
          end
        end
        goto next
      end
      local dir = h.project { ["luma.config.json"] = b.code }
      local ok, err = pcall(config.read, dir .. "/luma.config.json")
      assert(ok, "README line " .. b.line .. ": " .. tostring(err))
      os.execute("rm -rf " .. h.quote(dir))
      ::next::
    end
  end)

  it("have their C and Lua embedding snippets run by spec/23", function()
    local embedding = h.read(h.root .. "/spec/23-embedding_spec.lua")
    assert.matches("README's Embedding section", embedding)
    for _, b in ipairs(BLOCKS) do
      if b.lang == "c" then assert.are.equal("Embedding", b.section, "a C block outside Embedding: line " .. b.line) end
    end
  end)
end)

describe("the README's models", function()
  -- the program model's providers are adapters/providers.h's rows; they
  -- show in the message for a model that names none
  it("list every provider a model may name, in the table's order", function()
    local ok, err = pcall(luma.compile, 'model N { name: "x" }\n', "models.luma")
    assert.is_false(ok)
    local accepted = {}
    for name in tostring(err):match("must set provider: one of ([^\n]*)%."):gmatch('"([%w_]+)"') do
      accepted[#accepted + 1] = name
    end
    local listed = {}
    for name in README:match('provider: "openai" *# ([^\n]*)'):gmatch("[%w_]+") do listed[#listed + 1] = name end
    assert.are.same(accepted, listed)
  end)
end)
