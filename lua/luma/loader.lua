-- Loading tool modules into a program: resolving their files, refusing the
-- same file with other metadata, keeping dependency roots inside the project,
-- and registering their handlers.
local core = require "luma.core"
local config = require "luma.config"

local loader = {}

local function fail(code, message)
  error(core.error { code = code, message = message }, 0)
end

local function same_list(a, b)
  if a == nil or b == nil then return a == b end
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local METADATA = { "version", "integrity", "dependency_root" }

local function differs(a, b)
  for _, key in ipairs(METADATA) do
    if a[key] ~= b[key] then return key end
  end
  if not same_list(a.dependencies, b.dependencies) then return "dependencies" end
end

local function inside(path, dir)
  return path == dir or path:sub(1, #dir + 1) == dir .. "/" or dir == "/"
end

-- A tool that two modules export: the error names both (details.modules,
-- and details.hint, which the command prints under it).
local function conflict(err, loaded, m, module)
  local mine = {}
  for _, name in ipairs(module:exports()) do mine[name] = true end
  for _, before in ipairs(loaded) do
    for _, name in ipairs(before.exports) do
      if mine[name] and err.message == core.errors.TOOL_REGISTRY_CONFLICT.template:format(name) then
        error(core.error { code = err.code, message = err.message, details = {
          tool = name, modules = { before.path, m.given },
          hint = "'" .. name .. "' is exported by both " .. before.path .. " and " .. m.given ..
            "; keep one of the two handlers." } }, 0)
      end
    end
  end
end

-- specs: { path = absolute or relative to the cwd, version, integrity,
-- dependencies, dependency_root }; project_root bounds dependency roots and
-- the files a strict module may open; policy (checked by config.policy) is
-- the tool_module_policy every module runs under, or nil. Returns the
-- modules loaded: { { path = as given, exports = { name, ... } }, ... }.
function loader.load(program, specs, project_root, policy)
  local root = core.realpath(project_root) or project_root
  local seen = {}
  local modules = {}
  for _, spec in ipairs(specs) do
    local real, why = core.realpath(spec.path)
    if not real then fail("MODULE_INVALID", "cannot read tool module '" .. (spec.given or spec.path) .. "': " .. why) end
    local resolved = {
      path = real, version = spec.version, integrity = spec.integrity,
      dependencies = spec.dependencies, given = spec.given or spec.path,
    }
    if spec.dependency_root then
      local dep_root = core.realpath(spec.dependency_root)
      if not dep_root then
        fail("MODULE_INVALID", "the dependency_root of tool module '" .. resolved.given .. "' does not exist: " .. spec.dependency_root)
      end
      if not inside(dep_root, root) then
        fail("MODULE_INVALID", "the dependency_root of tool module '" .. resolved.given ..
          "' leaves the project: " .. dep_root .. " is not inside " .. root)
      end
      resolved.dependency_root = dep_root
    elseif spec.dependencies then
      resolved.dependency_root = config.dirname(real)
    end
    local before = seen[real]
    if before then
      local key = differs(before, resolved)
      if key then
        fail("MODULE_INVALID", "tool module '" .. resolved.given .. "' is loaded twice with different " .. key)
      end
    else
      seen[real] = resolved
      modules[#modules + 1] = resolved
    end
  end
  local loaded = {}
  for _, m in ipairs(modules) do
    m.project_root, m.policy = root, policy
    local module = core.load_module(m)
    local attached, err = pcall(program.attach, program, module)
    if not attached then
      if core.is_error(err) and err.code == "TOOL_REGISTRY_CONFLICT" then conflict(err, loaded, m, module) end
      error(err, 0)
    end
    loaded[#loaded + 1] = { path = m.given, exports = module:exports() }
  end
  return loaded
end

return loader
