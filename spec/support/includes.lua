-- Import circles among the C units of a folder (core/ by default).
--
-- A unit is a .c file. A header belongs to the units that define the
-- functions it declares (not to the file its name suggests), so a header of
-- types only belongs to none. Unit A depends on unit B when A includes, itself
-- or through the folder's headers, a header that declares a function B
-- defines. A circle is a set of units that depend on each other (a strongly
-- connected component of more than one unit).
--
--   lua5.4 spec/support/includes.lua [dir]    prints each circle; exit 1 if any
--   require("spec.support.includes").circles(dir) -> { {unit, ...}, ... }

local M = {}

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function files(dir, ext)
  local out = {}
  local p = assert(io.popen("ls -1 '" .. dir .. "'"))
  for name in p:lines() do
    if name:sub(-#ext - 1) == "." .. ext then out[#out + 1] = name end
  end
  p:close()
  table.sort(out)
  return out
end

-- The text without comments, string literals and preprocessor lines; the
-- #include "x.h" names apart.
local function strip(src)
  local includes = {}
  for name in src:gmatch('#%s*include%s*"([^"]+)"') do includes[#includes + 1] = name end
  src = src:gsub("/%*.-%*/", " "):gsub("//[^\n]*", "")
  src = src:gsub('"[^"\n]*"', '""'):gsub("'[^'\n]*'", "''")
  -- preprocessor lines, with their continuations
  src = src:gsub("\\\n", " "):gsub("\n[ \t]*#[^\n]*", "\n")
  return src, includes
end

-- The text at brace depth 0, each nested block replaced by {}.
local function top_level(src)
  local out, depth = {}, 0
  for i = 1, #src do
    local ch = src:sub(i, i)
    if ch == "{" then
      if depth == 0 then out[#out + 1] = "{" end
      depth = depth + 1
    elseif ch == "}" then
      depth = depth - 1
      if depth == 0 then out[#out + 1] = "}" end
    elseif depth == 0 then
      out[#out + 1] = ch
    end
  end
  return table.concat(out)
end

-- Names of the functions a header declares.
local function declared(src)
  local names = {}
  for stmt in top_level(src):gmatch("[^;]+") do
    stmt = stmt:gsub("{}", " ")
    if not stmt:match("^%s*typedef") and not stmt:match("^%s*struct%s+[%w_]+%s*$") then
      local name = stmt:match("([%a_][%w_]*)%s*%(")
      if name and name ~= "__attribute__" then names[name] = true end
    end
  end
  return names
end

-- Names of the functions a .c file defines with external linkage.
local function defined(src)
  local names = {}
  for head in top_level(src):gmatch("([^;{}]+){}") do
    if not head:match("^%s*static") and not head:match("=") then
      local name = head:match("([%a_][%w_]*)%s*%b()%s*$")
      if name then names[name] = true end
    end
  end
  return names
end

-- unit -> { unit it depends on = true }
function M.graph(dir)
  dir = dir or "core"
  local headers, owner, units = {}, {}, {}
  for _, h in ipairs(files(dir, "h")) do
    local src, inc = strip(read(dir .. "/" .. h))
    headers[h] = { includes = inc, declares = declared(src) }
  end
  for _, c in ipairs(files(dir, "c")) do
    local src, inc = strip(read(dir .. "/" .. c))
    local unit = c:sub(1, -3)
    units[unit] = { includes = inc }
    for name in pairs(defined(src)) do owner[name] = unit end
  end
  local deps = {}
  for unit, u in pairs(units) do
    local seen, stack, d = {}, {}, {}
    for _, h in ipairs(u.includes) do stack[#stack + 1] = h end
    while #stack > 0 do
      local h = table.remove(stack)
      local hd = headers[h]
      if hd and not seen[h] then
        seen[h] = true
        for name in pairs(hd.declares) do
          local o = owner[name]
          if o and o ~= unit then d[o] = true end
        end
        for _, i in ipairs(hd.includes) do stack[#stack + 1] = i end
      end
    end
    deps[unit] = d
  end
  return deps
end

-- The circles: each a sorted list of units, in a sorted list (Tarjan).
function M.circles(dir)
  local deps = M.graph(dir)
  local index, low, on, stack, out, n = {}, {}, {}, {}, {}, 0
  local function visit(v)
    n = n + 1
    index[v], low[v] = n, n
    stack[#stack + 1] = v
    on[v] = true
    for w in pairs(deps[v]) do
      if deps[w] then
        if not index[w] then
          visit(w)
          low[v] = math.min(low[v], low[w])
        elseif on[w] then
          low[v] = math.min(low[v], index[w])
        end
      end
    end
    if low[v] == index[v] then
      local comp = {}
      repeat
        local w = table.remove(stack)
        on[w] = nil
        comp[#comp + 1] = w
      until w == v
      if #comp > 1 then
        table.sort(comp)
        out[#out + 1] = comp
      end
    end
  end
  local names = {}
  for v in pairs(deps) do names[#names + 1] = v end
  table.sort(names)
  for _, v in ipairs(names) do
    if not index[v] then visit(v) end
  end
  table.sort(out, function(a, b) return a[1] < b[1] end)
  return out
end

if arg and arg[0] and arg[0]:match("includes%.lua$") then
  local circles = M.circles(arg[1])
  for _, c in ipairs(circles) do print(table.concat(c, " ")) end
  os.exit(#circles == 0 and 0 or 1)
end

return M
