-- Compiles the statements of a program (its syntax tree, program:ast()) to
-- Lua source. The generated chunk takes the runtime helpers (luma.exec) as
-- its argument and returns { main = fn(scope), agents = { A = { m = fn(scope, args) } } }.
-- `luma-lua run --emit-lua PROGRAM` prints it.
local compile = {}

local OPS = {
  ["+"] = "add", ["-"] = "sub", ["*"] = "mul", ["/"] = "div", ["%"] = "mod",
  ["=="] = "eq", ["!="] = "ne", ["<"] = "lt", ["<="] = "le", [">"] = "gt", [">="] = "ge",
}

-- A Lua string literal of s: control characters, quotes and backslashes escaped.
local function quote(s)
  return '"' .. (s:gsub('[%c"\\]', function(c) return string.format("\\%03d", c:byte()) end)) .. '"'
end

-- Every name a user writes becomes v_<name>: no clash with Lua keywords or
-- helpers. A function with more variables than Lua's locals allow (200, with
-- the temporaries) keeps them all in one table, V.
local MAX_LOCALS = 150
local function var(name) return "v_" .. name end

local function number(n, is_float)
  if is_float then
    local s = string.format("%.17g", n)
    if not s:find("[%.eEn]") then s = s .. ".0" end
    return s
  end
  -- the compiled chunk has no math: -2^63 written as Lua reads it, an integer
  if math.mininteger and n == math.mininteger then return "(-9223372036854775807 - 1)" end
  return string.format("%d", n)
end

local Gen = {}
Gen.__index = Gen

local function new_gen()
  return setmetatable({ out = {}, level = 1, try_depth = 0, temp = 0, spill = false }, Gen)
end

function Gen:line(s)
  self.out[#self.out + 1] = string.rep("  ", self.level) .. s
end

function Gen:var(name)
  return self.spill and ("V." .. var(name)) or var(name)
end

function Gen:tmp()
  self.temp = self.temp + 1
  return "t" .. self.temp
end

local function pos(node) return node.line .. ", " .. node.col end

function Gen:expr(e)
  local k = e.kind
  if k == "null" then return "NULL" end
  if k == "bool" then return e.value and "true" or "false" end
  if k == "int" then return number(e.value, false) end
  if k == "float" then return number(e.value, true) end
  if k == "string" then return quote(e.value) end
  if k == "name" then return self:var(e.name) end
  if k == "template" then
    local parts = {}
    for i, p in ipairs(e.parts) do
      parts[i] = p.kind == "string" and quote(p.value) or ("R.text(" .. self:expr(p) .. ")")
    end
    return "(" .. table.concat(parts, " .. ") .. ")"
  end
  if k == "field" then return "R.get(" .. self:expr(e.object) .. ", " .. quote(e.name) .. ", " .. pos(e) .. ")" end
  if k == "index" then return "R.index(" .. self:expr(e.object) .. ", " .. self:expr(e.index) .. ", " .. pos(e) .. ")" end
  if k == "array" then
    local items = {}
    for i, item in ipairs(e.items) do items[i] = self:expr(item) end
    -- R.array{ ... }: a call on a table constructor costs Lua's parser one
    -- level of nesting, not two
    return "R.array{ " .. table.concat(items, ", ") .. " }"
  end
  if k == "object" then
    local props = {}
    for i, p in ipairs(e.props) do props[i] = "[" .. quote(p.key) .. "] = " .. self:expr(p.value) end
    return "{ " .. table.concat(props, ", ") .. " }"
  end
  if k == "unary" then
    if e.op == "not" then return "R.falsy(" .. self:expr(e.operand) .. ")" end
    return "R.neg(" .. self:expr(e.operand) .. ", " .. pos(e) .. ")"
  end
  if k == "binary" then
    if e.op == "and" then return "(R.truthy(" .. self:expr(e.left) .. ") and R.truthy(" .. self:expr(e.right) .. "))" end
    if e.op == "or" then return "(R.truthy(" .. self:expr(e.left) .. ") or R.truthy(" .. self:expr(e.right) .. "))" end
    return "R." .. OPS[e.op] .. "(" .. self:expr(e.left) .. ", " .. self:expr(e.right) .. ", " .. pos(e) .. ")"
  end
  if k == "tool" then
    return "R.tool(scope, " .. quote(e.tool) .. ", " .. (e.arg and self:expr(e.arg) or "nil") .. ", " .. pos(e) .. ")"
  end
  if k == "ask" then
    return "R.ask(scope, " .. self:expr(e.prompt) .. ", " .. quote(e.type.name or e.type.kind) .. ", " ..
      (e.using and quote(e.using) or "nil") .. ", " .. pos(e) .. ", ASKED)"
  end
  if k == "ask_citations" then return "R.citations(ASKED)" end
  error("cannot compile an expression of kind " .. tostring(k))
end

-- The type of `x: T = ...` as a Lua table literal the runtime checks with.
local function type_literal(t)
  local fields = { "kind = " .. quote(t.kind) }
  if t.name then fields[#fields + 1] = "name = " .. quote(t.name) end
  if t.items then fields[#fields + 1] = "items = " .. type_literal(t.items) end
  if t.values then
    local vals = {}
    for i, v in ipairs(t.values) do vals[i] = quote(v) end
    fields[#fields + 1] = "values = { " .. table.concat(vals, ", ") .. " }"
  end
  return "{ " .. table.concat(fields, ", ") .. " }"
end

function Gen:ret(value)
  if self.try_depth > 0 then
    self:line("do return RETURN, " .. value .. " end")
  else
    self:line("do return " .. value .. " end")
  end
end

function Gen:block(stmts, final_returns)
  for i, s in ipairs(stmts) do
    self:stmt(s, final_returns and i == #stmts)
  end
end

function Gen:stmt(s, is_last)
  local k = s.kind
  if k == "assign" then
    local value = self:expr(s.value)
    if s.type then
      value = "R.typed(" .. value .. ", " .. type_literal(s.type) .. ", " .. quote(s.name) .. ", " ..
        (s.value.kind == "tool" and "true" or "false") .. ", " .. pos(s) .. ")"
    end
    self:line(self:var(s.name) .. " = " .. value)
  elseif k == "expr" then
    if is_last then self:ret(self:expr(s.value))
    else self:line("R.discard(" .. self:expr(s.value) .. ")") end
  elseif k == "return" then
    self:ret(s.value and self:expr(s.value) or "nil")
  elseif k == "if" then
    self:line("if R.truthy(" .. self:expr(s.cond) .. ") then")
    self.level = self.level + 1
    self:block(s.body, is_last)
    self.level = self.level - 1
    local orelse = s.orelse
    while orelse and #orelse == 1 and orelse[1].kind == "if" do
      self:line("elseif R.truthy(" .. self:expr(orelse[1].cond) .. ") then")
      self.level = self.level + 1
      self:block(orelse[1].body, is_last)
      self.level = self.level - 1
      orelse = orelse[1].orelse
    end
    if orelse then
      self:line("else")
      self.level = self.level + 1
      self:block(orelse, is_last)
      self.level = self.level - 1
    end
    self:line("end")
  elseif k == "try" then
    -- the block runs protected; a `return` inside it comes out as RETURN, value
    -- in a do block, so that its temporaries do not count against the locals
    local ok, tag, val = self:tmp(), self:tmp(), self:tmp()
    self:line("do")
    self.level = self.level + 1
    self:line("local " .. ok .. ", " .. tag .. ", " .. val .. " = pcall(function()")
    self.level = self.level + 1
    self.try_depth = self.try_depth + 1
    self:block(s.body, is_last)
    self.try_depth = self.try_depth - 1
    self.level = self.level - 1
    self:line("end)")
    self:line("if " .. ok .. " then")
    self.level = self.level + 1
    self:line("if " .. tag .. " == RETURN then")
    self.level = self.level + 1
    self:ret(val)
    self.level = self.level - 1
    self:line("end")
    self.level = self.level - 1
    self:line("else")
    self.level = self.level + 1
    self:line((s.catch_name and self:var(s.catch_name) or "local _") .. " = R.caught(" .. tag .. ")")
    self:block(s.catch_body, is_last)
    self.level = self.level - 1
    self:line("end")
    self.level = self.level - 1
    self:line("end")
  else
    error("cannot compile a statement of kind " .. tostring(k))
  end
end

-- Names assigned (or caught) anywhere in a block, in order, so that they are
-- variables of the whole function: one set inside an `if` is seen after it.
local function assigned(stmts, names, seen)
  for _, s in ipairs(stmts) do
    local name = s.kind == "assign" and s.name or s.kind == "try" and s.catch_name
    if name and not seen[name] then
      seen[name] = true
      names[#names + 1] = name
    end
    if s.body then assigned(s.body, names, seen) end
    if s.orelse then assigned(s.orelse, names, seen) end
    if s.catch_body then assigned(s.catch_body, names, seen) end
  end
  return names
end

function Gen:locals(names, nparams)
  self.spill = #names + nparams > MAX_LOCALS
  if self.spill then
    self:line("local V = {}")
    return
  end
  for i = 1, #names, 50 do
    local chunk = {}
    for j = i, math.min(i + 49, #names) do chunk[#chunk + 1] = var(names[j]) end
    self:line("local " .. table.concat(chunk, ", "))
  end
end

-- The Lua source of a program's statements.
function compile.program(ast, chunkname)
  local g = new_gen()
  g.level = 0
  g:line("-- compiled from " .. chunkname .. " by luma-lua")
  g:line("local R = ...")
  g:line("local NULL, RETURN, pcall = R.null, R.RETURN, R.pcall")
  g:line("local M = { agents = {} }")
  g:line("")
  g:line("function M.main(scope)")
  g.level = 1
  local names = assigned(ast.statements, {}, {})
  g:locals(names, 0)
  g:block(ast.statements, false)
  -- every variable is in the result: one that holds null, or that no
  -- statement set (a branch that did not run), as null
  local vars, quoted = {}, {}
  for i, n in ipairs(names) do
    vars[i] = "[" .. quote(n) .. "] = " .. g:var(n)
    quoted[i] = quote(n)
  end
  g:line("return R.vars({ " .. table.concat(vars, ", ") .. " }, { " .. table.concat(quoted, ", ") .. " })")
  g.level = 0
  g:line("end")
  for _, agent in ipairs(ast.agents) do
    g:line("")
    g:line("M.agents[" .. quote(agent.name) .. "] = {}")
    for _, m in ipairs(agent.methods) do
      g:line("M.agents[" .. quote(agent.name) .. "][" .. quote(m.name) .. "] = function(scope, args)")
      g.level = 1
      local params, seen = {}, {}
      for i, p in ipairs(m.params) do params[i] = p.name; seen[p.name] = true end
      g:locals(assigned(m.body, {}, seen), #params)
      -- what the method's asks leave for `ask.citations`
      g:line("local ASKED = {}")
      for _, p in ipairs(params) do
        g:line((g.spill and "" or "local ") .. g:var(p) .. " = args[" .. quote(p) .. "]")
      end
      g:block(m.body, true)
      g.level = 0
      g:line("end")
    end
  end
  g:line("")
  g:line("return M")
  return table.concat(g.out, "\n") .. "\n"
end

return compile
