-- The helpers compiled statements call (see luma.compile): operators with
-- clear errors, field access, interpolation, tool calls through the
-- pipeline, and try/catch support. One set per program.
local core = require "luma.core"

local exec = {}

-- The coroutines of methods started with agent:start, and their futures.
exec.futures = setmetatable({}, { __mode = "k" })

local NULL = core.null
local RETURN = setmetatable({}, { __name = "luma.return" })

local function is_null(v) return v == nil or v == NULL end

local function kind(v)
  if is_null(v) then return "null" end
  local t = type(v)
  if t == "table" then return (getmetatable(v) == core.array_mt or (v[1] ~= nil)) and "array" or "object" end
  return t
end

local function eq(a, b)
  if is_null(a) and is_null(b) then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do
    if not eq(v, rawget(b, k)) then return false end
  end
  for k in pairs(b) do
    if rawget(a, k) == nil then return false end
  end
  return true
end

function exec.new(program)
  local chunk = program:chunkname()
  local R = { null = NULL, RETURN = RETURN, pcall = pcall }

  local function fail(line, col, message)
    error(core.error { code = "RUNTIME_ERROR", message = chunk .. ":" .. line .. ":" .. col .. ": " .. message }, 0)
  end

  -- the top level's variables and their names: one that no statement set is null
  function R.vars(vars, names)
    for _, name in ipairs(names) do
      if vars[name] == nil then vars[name] = NULL end
    end
    return vars, names
  end

  function R.truthy(v) return v ~= nil and v ~= false and v ~= NULL end
  function R.falsy(v) return v == nil or v == false or v == NULL end
  function R.discard() end

  -- {expr} in a string: text as is, numbers and the rest as JSON
  function R.text(v)
    if type(v) == "string" then return v end
    if v == nil then return "null" end
    local ok, s = pcall(core.json_encode, v)
    if ok then return s end
    return "<" .. type(v) .. ">"
  end

  function R.get(obj, name, line, col)
    if type(obj) ~= "table" then fail(line, col, "cannot read field '" .. name .. "' of " .. kind(obj)) end
    local v = rawget(obj, name)
    if v == nil then return NULL end   -- a missing field is null, as in JSON
    return v
  end

  function R.index(obj, i, line, col)
    if type(obj) ~= "table" then fail(line, col, "cannot index " .. kind(obj)) end
    if type(i) == "number" then
      if i ~= math.floor(i) then fail(line, col, "an index must be a whole number, not " .. tostring(i)) end
    elseif type(i) ~= "string" then
      fail(line, col, "cannot index with " .. kind(i))
    end
    local v = rawget(obj, i)
    if v == nil then return NULL end   -- past the end, or a missing key: null
    return v
  end

  function R.array(t)
    return setmetatable(t, core.array_mt)
  end

  local function numbers(op, a, b, line, col)
    if type(a) ~= "number" or type(b) ~= "number" then
      fail(line, col, "cannot apply '" .. op .. "' to " .. kind(a) .. " and " .. kind(b))
    end
  end

  local mtype = math.type

  function R.neg(a, line, col)
    if type(a) ~= "number" then fail(line, col, "cannot negate " .. kind(a)) end
    if mtype and a == math.mininteger and mtype(a) == "integer" then
      fail(line, col, "integer overflow: -(" .. tostring(a) .. ") does not fit a 64-bit integer")
    end
    return -a
  end

  -- Integers are 64-bit and wrap in Lua: a result that wrapped is an error.
  -- It is told by the float result, which cannot be farther than 2^11 from
  -- a true 64-bit one, while a wrapped one is at least 2^63 away from it.
  local function exact(op, a, b, r, f, line, col)
    if mtype and mtype(r) == "integer" and math.abs(r - f) > 2 ^ 32 then
      fail(line, col, "integer overflow: " .. tostring(a) .. " " .. op .. " " .. tostring(b) ..
        " does not fit a 64-bit integer")
    end
    return r
  end

  function R.add(a, b, line, col)
    if type(a) == "string" and type(b) == "string" then return a .. b end
    numbers("+", a, b, line, col)
    return exact("+", a, b, a + b, a * 1.0 + b, line, col)
  end
  function R.sub(a, b, line, col)
    numbers("-", a, b, line, col)
    return exact("-", a, b, a - b, a * 1.0 - b, line, col)
  end
  function R.mul(a, b, line, col)
    numbers("*", a, b, line, col)
    return exact("*", a, b, a * b, a * 1.0 * b, line, col)
  end
  function R.div(a, b, line, col)
    numbers("/", a, b, line, col)
    if b == 0 then fail(line, col, "division by zero") end
    return a / b
  end
  function R.mod(a, b, line, col)
    numbers("%", a, b, line, col)
    if b == 0 then fail(line, col, "division by zero") end
    return a % b
  end

  function R.eq(a, b) return eq(a, b) end
  function R.ne(a, b) return not eq(a, b) end

  local function ordered(op, a, b, line, col)
    local ta, tb = type(a), type(b)
    if not ((ta == "number" and tb == "number") or (ta == "string" and tb == "string")) then
      fail(line, col, "cannot compare " .. kind(a) .. " and " .. kind(b) .. " with '" .. op .. "'")
    end
  end
  function R.lt(a, b, line, col) ordered("<", a, b, line, col) return a < b end
  function R.le(a, b, line, col) ordered("<=", a, b, line, col) return a <= b end
  function R.gt(a, b, line, col) ordered(">", a, b, line, col) return a > b end
  function R.ge(a, b, line, col) ordered(">=", a, b, line, col) return a >= b end

  -- In a method started with agent:start, a tool call or an ask starts
  -- without blocking and the method's coroutine yields until it is done.
  -- An argument that input validation refused names the call's position
  -- too: `add.input.b is required` alone does not say which call it was.
  local function placed(name, line, col, ok, result)
    if ok then return result end
    if core.is_error(result) and result.code == "TOOL_INPUT_INVALID" and result.tool == name and
        type(result.details) == "table" and result.details.violations then
      result.message = chunk .. ":" .. line .. ":" .. col .. ": " .. result.message
    end
    error(result, 0)
  end

  function R.tool(scope, name, arg, line, col)
    local future = exec.futures[coroutine.running()]
    if future then
      return placed(name, line, col, pcall(function()
        return (future:await_step(program:start(name, arg == nil and {} or arg, { scope = scope })))
      end))
    end
    return placed(name, line, col, pcall(program.invoke, program, scope, name, arg == nil and {} or arg))
  end

  -- asked: the method's own table, where `ask.citations` is read from
  function R.ask(scope, prompt, schema, using, line, col, asked)
    local future = exec.futures[coroutine.running()]
    local answer, citations
    if future then
      -- a method started with { on_event } streams its asks to it
      local a = program:start_ask(scope, prompt, schema, using, future.on_event ~= nil)
      if future.on_event then future:listen(a) end
      answer = future:await_step(a)
      citations = a:citations()
    else
      answer, citations = program:ask(scope, prompt, schema, using)
    end
    asked.citations = setmetatable(citations, core.array_mt)
    return answer
  end

  -- `ask.citations`: the sources the method's last ask cites, [] before one
  function R.citations(asked)
    return asked.citations or setmetatable({}, core.array_mt)
  end

  -- `x: T = value`: the value must have type T
  local SCALARS = { string = "string", bool = "boolean" }
  local function check(value, t, path, line, col)
    if t.kind == "name" then
      local ok, err = program:validate(t.name, value, { mode = "output", root = path })
      if not ok then return err.message, err end
      return nil
    end
    if t.kind == "any" then return nil end
    if t.kind == "int" or t.kind == "float" then
      if type(value) ~= "number" or (t.kind == "int" and value ~= math.floor(value)) then
        return path .. " must be " .. (t.kind == "int" and "an integer" or "a number")
      end
      return nil
    end
    if t.kind == "enum" then
      for _, v in ipairs(t.values) do if v == value then return nil end end
      return path .. " must be one of the enum's values"
    end
    if t.kind == "array" then
      if type(value) ~= "table" then return path .. " must be an array" end
      for i, item in ipairs(value) do
        local msg, err = check(item, t.items, path .. "[" .. i .. "]", line, col)
        if msg then return msg, err end
      end
      return nil
    end
    if type(value) ~= SCALARS[t.kind] then return path .. " must be a " .. (t.kind == "bool" and "boolean" or t.kind) end
    return nil
  end

  function R.typed(value, t, name, from_tool, line, col)
    local msg, err = check(value, t, name, line, col)
    if msg then
      error(core.error {
        code = from_tool and "TOOL_OUTPUT_INVALID" or "VALIDATION_FAILED",
        message = chunk .. ":" .. line .. ":" .. col .. ": " .. msg,
        details = err and err.details or nil,
      }, 0)
    end
    return value
  end

  -- what `catch e` receives: the structured error unchanged
  function R.caught(e)
    if core.is_error(e) then return e end
    return core.error { code = "RUNTIME_ERROR", message = type(e) == "string" and e or ("an error of type " .. type(e)) }
  end

  return R
end

return exec
