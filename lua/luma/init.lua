-- The public Lua API of luma-lua: `local luma = require "luma"`.
-- Kept within what Lua 5.1/LuaJIT and 5.4 share.
local core = require "luma.core"

local luma = {
  version = core.version,
  null = core.null,        -- JSON null, the same value as cjson.null
  error = core.error,      -- luma.error{ code =, message =, retryable =, details = }
  is_error = core.is_error,
}

local DEFAULT_MAX_SOURCE_BYTES = 8 * 1024 * 1024

-- Compiles program text; raises a PROGRAM_INVALID error listing every problem.
function luma.compile(source, chunkname, opts)
  if type(source) ~= "string" then
    error("bad argument #1 to 'compile' (string expected, got " .. type(source) .. ")", 2)
  end
  return core.compile(source, chunkname or "program.luma", opts)
end

local function io_error(message)
  error(core.error { code = "IO_ERROR", message = message }, 0)
end

-- Reads and compiles a .luma file; the path names it in messages.
function luma.load(path, opts)
  if type(path) ~= "string" then
    error("bad argument #1 to 'load' (string expected, got " .. type(path) .. ")", 2)
  end
  local f, err = io.open(path, "rb")
  if not f then io_error("cannot read '" .. path .. "': " .. tostring(err):gsub("^[^:]*: ", "")) end
  local limit = opts and opts.limits and opts.limits.max_source_bytes or DEFAULT_MAX_SOURCE_BYTES
  local readable, rerr = f:read(0)
  local size = f:seek("end")
  if (readable == nil and rerr) or not size then
    f:close()
    io_error("cannot read '" .. path .. "': " .. (rerr or "not a regular file"))
  end
  if size > limit then
    f:close()
    error(core.error {
      code = "PROGRAM_INVALID",
      message = path .. ": the program is " .. size .. " bytes; the limit is " .. limit,
    }, 0)
  end
  f:seek("set", 0)
  local source = f:read("*a")
  f:close()
  if not source then io_error("cannot read '" .. path .. "'") end
  return core.compile(source, path, opts)
end

return luma
