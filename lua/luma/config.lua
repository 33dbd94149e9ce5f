-- luma.config.json: reading it, checking every key, resolving its paths.
-- Errors are CONFIG_INVALID and name the file and the key.
local core = require "luma.core"

local config = {}

config.FILENAME = "luma.config.json"

local function fail(file, message)
  error(core.error { code = "CONFIG_INVALID", message = file .. ": " .. message }, 0)
end

local function dirname(path)
  return path:match("^(.*)/[^/]*$") or "."
end

-- An absolute form of path, relative to dir when it is relative.
local function join(dir, path)
  if path:sub(1, 1) == "/" then return path end
  return dir .. "/" .. path
end
config.join = join
config.dirname = dirname

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

-- Every key of t must be one of `known`; a near miss is named.
local function check_keys(file, where, t, known)
  local set = {}
  for _, k in ipairs(known) do set[k] = true end
  for _, k in ipairs(sorted_keys(t)) do
    if type(k) ~= "string" or not set[k] then
      local hint = type(k) == "string" and core.suggest(k, known)
      fail(file, string.format("%s has no key '%s'.%s", where, tostring(k),
        hint and (" Did you mean '" .. hint .. "'?") or ""))
    end
  end
end

-- value must be one of the strings in choices: the message lists them, says
-- what was given, and names the nearest.
local function one_of(file, where, value, choices)
  for _, c in ipairs(choices) do
    if value == c then return value end
  end
  local quoted = {}
  for i, c in ipairs(choices) do quoted[i] = '"' .. c .. '"' end
  local list = #quoted == 2 and (quoted[1] .. " or " .. quoted[2]) or ("one of " .. table.concat(quoted, ", "))
  local shown, given = pcall(core.json_encode, value == nil and core.null or value)
  local near = type(value) == "string" and core.suggest(value, choices)
  fail(file, where .. " must be " .. list .. ", not " .. (shown and given or tostring(value)) ..
    (near and ('. Did you mean "' .. near .. '"?') or ""))
end

-- JSON arrays come out of core.json_decode marked with core.array_mt.
local function is_array(v)
  if type(v) ~= "table" then return false end
  if getmetatable(v) == core.array_mt then return true end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  return n > 0 and n == #v
end

-- What a JSON value is, for a message: "a string", "an array", "null"...
local function what_is(v)
  if v == core.null then return "null" end
  if is_array(v) then return "an array" end
  if type(v) == "table" then return "an object" end
  if type(v) == "number" then return "a number" end
  return "a " .. type(v)
end

-- value must be of kind ("array", "object", "string", "boolean"); the message
-- says what was expected (`expected`, or the kind) and what was given.
local function expect(file, where, value, kind, expected)
  local ok
  if kind == "array" then ok = is_array(value)
  elseif kind == "object" then ok = type(value) == "table" and not is_array(value)
  else ok = type(value) == kind end
  if not ok then
    expected = expected or (((kind == "array" or kind == "object") and "an " or "a ") .. kind)
    if value == nil then fail(file, where .. " is missing: it must be " .. expected) end
    fail(file, where .. " must be " .. expected .. ", not " .. what_is(value))
  end
  return value
end

local function read_modules(file, dir, list)
  local modules = {}
  expect(file, "tool_modules", list, "array", "an array of paths or manifests")
  for i, entry in ipairs(list) do
    local where = "tool_modules[" .. i .. "]"
    if type(entry) == "string" then
      modules[i] = { path = join(dir, entry), given = entry }
    else
      expect(file, where, entry, "object", 'a path or a manifest ({ "path": "tools.lua", ... })')
      check_keys(file, where, entry, { "path", "version", "integrity", "dependencies", "dependency_root" })
      local m = { given = entry.path }
      m.path = join(dir, expect(file, where .. ".path", entry.path, "string", "a string (the module's file)"))
      if entry.version ~= nil then m.version = expect(file, where .. ".version", entry.version, "string") end
      if entry.integrity ~= nil then
        m.integrity = expect(file, where .. ".integrity", entry.integrity, "string", "a string of the form sha256-<base64>")
        if not m.integrity:match("^sha256%-[A-Za-z0-9+/]+=*$") then
          fail(file, where .. ".integrity must be written sha256-<base64>")
        end
      end
      if entry.dependencies ~= nil then
        m.dependencies = {}
        for j, dep in ipairs(expect(file, where .. ".dependencies", entry.dependencies, "array", "an array of module names")) do
          m.dependencies[j] = expect(file, where .. ".dependencies[" .. j .. "]", dep, "string", "a module name")
          if not dep:match("^[%w_][%w_%.%-]*$") then
            fail(file, where .. ".dependencies[" .. j .. "] is not a module name: '" .. dep .. "'")
          end
        end
      end
      if entry.dependency_root ~= nil then
        m.dependency_root = join(dir, expect(file, where .. ".dependency_root", entry.dependency_root, "string",
          "a string (a folder of the project)"))
      end
      modules[i] = m
    end
  end
  return modules
end


local function read_contexts(file, contexts)
  expect(file, "tool_contexts", contexts, "object", "an object of contexts, each an object of fields")
  local out = {}
  for _, name in ipairs(sorted_keys(contexts)) do
    local where = "tool_contexts." .. tostring(name)
    local fields = expect(file, where, contexts[name], "object", 'an object of fields ({ "user": { "env": "NAME" } })')
    out[name] = {}
    for _, field in ipairs(sorted_keys(fields)) do
      local fwhere = where .. "." .. tostring(field)
      local spec = expect(file, fwhere, fields[field], "object", '{ "env": "NAME", "parse": "string" }')
      check_keys(file, fwhere, spec, { "env", "parse" })
      local env = expect(file, fwhere .. ".env", spec.env, "string", "a string (an environment variable name)")
      if not env:match("^[%a_][%w_]*$") then fail(file, fwhere .. ".env must be an environment variable name") end
      local parse = one_of(file, fwhere .. ".parse", spec.parse or "string",
        { "string", "json", "number", "integer", "boolean" })
      out[name][field] = { env = env, parse = parse }
    end
  end
  return out
end

local function integer_at_least(file, where, value, min)
  if math.type(value) ~= "integer" and not (type(value) == "number" and value == math.floor(value) and value < 2^53) then
    fail(file, where .. " must be an integer, not " .. (type(value) == "number" and tostring(value) or what_is(value)))
  end
  if value < min then fail(file, where .. " must be at least " .. min) end
  return math.tointeger(value)
end

-- idempotency_store and cache_store: { type = "memory" | "file" | "sqlite" |
-- "redis", path =, encryption =, url =, ... }; the cache also takes ttl_ms.
-- ("backend" is the older name of "type")
local STORES = { memory = true, file = true, sqlite = true, redis = true }
local STORE_PATHS = {
  idempotency_store = { file = ".luma-idempotency.json", sqlite = ".luma-idempotency.db" },
  cache_store = { file = ".luma-cache.json", sqlite = ".luma-cache.db" },
}
local STORE_KEYS = { "type", "backend", "path", "encryption", "url", "prefix", "lease_ms", "password_env",
  "on_unavailable" }

local function read_store(file, dir, store, name)
  local keys = { table.unpack(STORE_KEYS) }
  if name == "cache_store" then
    keys[#keys] = "ttl_ms" -- a cache that cannot be reached is skipped: no on_unavailable
  end
  expect(file, name, store, "object", '{ "type": "memory" | "file" | "sqlite" | "redis", ... }')
  check_keys(file, name, store, keys)
  if store.type ~= nil and store.backend ~= nil then
    fail(file, name .. ": give type or backend (its older name), not both")
  end
  local kind = store.type or store.backend or "memory"
  local key = store.backend ~= nil and "backend" or "type"
  if type(kind) ~= "string" or not STORES[kind] then
    fail(file, name .. "." .. key .. ' must be "memory", "file", "sqlite" or "redis", not ' ..
      (type(kind) == "string" and ('"' .. kind .. '"') or "a " .. type(kind)))
  end
  local out = { backend = kind }
  if store.ttl_ms ~= nil then out.ttl_ms = integer_at_least(file, name .. ".ttl_ms", store.ttl_ms, 1) end
  if STORE_PATHS[name][kind] then
    out.path = join(dir, expect(file, name .. ".path", store.path or STORE_PATHS[name][kind], "string"))
  elseif store.path ~= nil then
    fail(file, name .. ".path is only for the file and sqlite stores")
  end
  if store.encryption ~= nil then
    if store.encryption ~= "aes-256-gcm" then fail(file, name .. '.encryption must be "aes-256-gcm"') end
    if kind == "memory" then fail(file, name .. ".encryption is only for the file, sqlite and redis stores") end
    out.encryption = store.encryption
  end
  local redis_only = { "url", "prefix", "lease_ms", "password_env", "on_unavailable" }
  if kind ~= "redis" then
    for _, k in ipairs(redis_only) do
      if store[k] ~= nil then fail(file, name .. "." .. k .. " is only for the redis store") end
    end
    return out
  end
  out.url = expect(file, name .. ".url", store.url, "string")
  if not out.url:match("^rediss?://") then
    fail(file, name .. ".url must be redis://[user:password@]host:port/db")
  end
  if store.prefix ~= nil then out.prefix = expect(file, name .. ".prefix", store.prefix, "string") end
  if name == "cache_store" and not out.prefix then out.prefix = "luma:cache:" end
  if store.lease_ms ~= nil then out.lease_ms = integer_at_least(file, name .. ".lease_ms", store.lease_ms, 100) end
  if store.password_env ~= nil then
    out.password_env = expect(file, name .. ".password_env", store.password_env, "string")
  end
  if store.on_unavailable ~= nil then
    if store.on_unavailable ~= "fail" and store.on_unavailable ~= "run" then
      fail(file, name .. '.on_unavailable must be "fail" (the default) or "run"')
    end
    out.on_unavailable = store.on_unavailable
  end
  return out
end

-- A durable agent's journal (luma.load's journal option, the config's
-- "journal"): a SQLite file's path, or { type = "sqlite", path =, sync = },
-- or { type = "redis", url =, password_env =, prefix = }. The path is
-- relative to dir (the config's folder; nil: as given); a config's sqlite
-- journal without one is .luma-journal.db there. What program:configure's
-- journal takes: { type, path, sync } or { type, url, password_env, prefix }.
local JOURNAL_KEYS = { "type", "path", "sync", "url", "password_env", "prefix" }
config.JOURNAL_PATH = ".luma-journal.db"

function config.journal(file, dir, spec, where)
  if type(spec) == "string" then return { type = "sqlite", path = dir and join(dir, spec) or spec } end
  expect(file, where, spec, "object", 'a SQLite file\'s path, or { type = "sqlite" | "redis", ... }')
  check_keys(file, where, spec, JOURNAL_KEYS)
  local kind = one_of(file, where .. ".type", spec.type == nil and "sqlite" or spec.type, { "sqlite", "redis" })
  local out = { type = kind }
  local only = kind == "sqlite" and { "url", "password_env", "prefix" } or { "path", "sync" }
  for _, k in ipairs(only) do
    if spec[k] ~= nil then
      fail(file, where .. "." .. k .. " is only for a " .. (kind == "sqlite" and "redis" or "sqlite") .. " journal")
    end
  end
  if kind == "sqlite" then
    local path = spec.path
    if path == nil and dir then path = config.JOURNAL_PATH end
    path = expect(file, where .. ".path", path, "string")
    out.path = dir and join(dir, path) or path
    if spec.sync ~= nil then out.sync = expect(file, where .. ".sync", spec.sync, "boolean") end
    return out
  end
  out.url = expect(file, where .. ".url", spec.url, "string")
  if not out.url:match("^rediss?://") then fail(file, where .. ".url must be redis://[user:password@]host:port/db") end
  if spec.prefix ~= nil then out.prefix = expect(file, where .. ".prefix", spec.prefix, "string") end
  if spec.password_env ~= nil then
    out.password_env = expect(file, where .. ".password_env", spec.password_env, "string")
  end
  return out
end

local BUILTINS = { "os", "io", "json", "crypto" }
local POLICY_KEYS = { "sandbox", "allow_builtins", "allow_env", "allow_network", "max_memory_mb", "max_concurrency",
  "isolation", "kill_grace_ms" }


-- tool_module_policy: what every tool module's state may use. With
-- "sandbox": "none" the state has the whole standard library, so the
-- capability settings could not be enforced there: giving them is an error.
function config.policy(file, policy)
  expect(file, "tool_module_policy", policy, "object")
  check_keys(file, "tool_module_policy", policy, POLICY_KEYS)
  local out = { sandbox = one_of(file, "tool_module_policy.sandbox", policy.sandbox or "none", { "none", "strict" }) }
  local strict = out.sandbox == "strict"
  local function capability(key)
    if policy[key] ~= nil and not strict then
      fail(file, "tool_module_policy." .. key .. ' needs "sandbox": "strict"; with no sandbox the state has the whole standard library')
    end
  end
  capability("allow_builtins")
  capability("allow_env")
  capability("allow_network")
  capability("isolation")
  out.allow_builtins = {}
  if policy.allow_builtins ~= nil then
    local known = {}
    for _, b in ipairs(BUILTINS) do known[b] = true end
    for i, b in ipairs(expect(file, "tool_module_policy.allow_builtins", policy.allow_builtins, "array")) do
      local where = "tool_module_policy.allow_builtins[" .. i .. "]"
      expect(file, where, b, "string")
      if not known[b] then
        local hint = core.suggest(b, BUILTINS)
        fail(file, string.format("%s is not a builtin: '%s'.%s Builtins: %s.", where, b,
          hint and (" Did you mean '" .. hint .. "'?") or "", table.concat(BUILTINS, ", ")))
      end
      out.allow_builtins[#out.allow_builtins + 1] = b
    end
  end
  for _, key in ipairs { "allow_env", "allow_network" } do
    if policy[key] ~= nil then out[key] = expect(file, "tool_module_policy." .. key, policy[key], "boolean") end
  end
  if policy.max_memory_mb ~= nil then
    out.max_memory_mb = integer_at_least(file, "tool_module_policy.max_memory_mb", policy.max_memory_mb,
      core.limits.policy_min_memory_mb)
    if out.max_memory_mb > core.limits.policy_max_memory_mb then
      fail(file, "tool_module_policy.max_memory_mb must be at most " .. core.limits.policy_max_memory_mb)
    end
  end
  if policy.isolation ~= nil then
    out.isolation = expect(file, "tool_module_policy.isolation", policy.isolation, "string")
    if out.isolation ~= "thread" and out.isolation ~= "process" then
      fail(file, 'tool_module_policy.isolation must be "thread" or "process"')
    end
  end
  if policy.kill_grace_ms ~= nil then
    if out.isolation ~= "process" then
      fail(file, 'tool_module_policy.kill_grace_ms needs "isolation": "process"')
    end
    out.kill_grace_ms = integer_at_least(file, "tool_module_policy.kill_grace_ms", policy.kill_grace_ms, 0)
    if out.kill_grace_ms > core.limits.policy_max_kill_grace_ms then
      fail(file, "tool_module_policy.kill_grace_ms must be at most " .. core.limits.policy_max_kill_grace_ms)
    end
  end
  if policy.max_concurrency ~= nil then
    out.max_concurrency = integer_at_least(file, "tool_module_policy.max_concurrency", policy.max_concurrency, 1)
    if out.max_concurrency > core.limits.policy_max_concurrency then
      fail(file, "tool_module_policy.max_concurrency must be at most " .. core.limits.policy_max_concurrency)
    end
  end
  return out
end

-- Reads and checks a configuration file; paths in it become absolute.
function config.read(path)
  local f, err = io.open(path, "rb")
  if not f then
    error(core.error { code = "IO_ERROR", message = "cannot read '" .. path .. "': " .. tostring(err):gsub("^[^:]*: ", "") }, 0)
  end
  local text, rerr = f:read("*a")
  f:close()
  if not text then   -- a folder opens, and its read fails
    error(core.error { code = "IO_ERROR", message = "cannot read '" .. path .. "': " .. tostring(rerr) }, 0)
  end
  -- a byte order mark, as some editors write, is no part of the JSON
  text = text:gsub("^\239\187\191", "")
  local ok, data = pcall(core.json_decode, text)
  if not ok then fail(path, "not valid JSON: " .. (type(data) == "table" and data.message or tostring(data))) end
  expect(path, "the configuration", data, "object", "a JSON object")
  check_keys(path, "the configuration", data,
    { "tool_modules", "tool_contexts", "idempotency_store", "cache_store", "tool_module_policy", "journal" })
  local dir = dirname(path)
  return {
    path = path,
    dir = dir,
    tool_modules = data.tool_modules and read_modules(path, dir, data.tool_modules) or {},
    tool_contexts = data.tool_contexts and read_contexts(path, data.tool_contexts) or nil,
    idempotency_store = data.idempotency_store and read_store(path, dir, data.idempotency_store, "idempotency_store") or nil,
    cache_store = data.cache_store and read_store(path, dir, data.cache_store, "cache_store") or nil,
    journal = data.journal ~= nil and config.journal(path, dir, data.journal, "journal") or nil,
    tool_module_policy = data.tool_module_policy ~= nil and config.policy(path, data.tool_module_policy) or nil,
  }
end

-- The configuration next to a program, if there is one.
function config.find(program_path)
  local candidate = join(dirname(program_path), config.FILENAME)
  local f = io.open(candidate, "rb")
  if not f then return nil end
  f:close()
  return candidate
end

return config
