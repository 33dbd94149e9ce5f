local luma = require "luma"
local core = require "luma.core"
local h = require "spec.helpers"

-- The rows of the README's table under "### Limits": { name, default, settable }.
local function readme_limits()
  local rows, inside = {}, false
  for line in (h.read(h.root .. "/README.md") .. "\n"):gmatch("([^\n]*)\n") do
    if line == "### Limits" then
      inside = true
    elseif inside and line:match("^#") then
      break
    elseif inside and line:match("^| `") then
      local cells = {}
      for cell in line:sub(2):gmatch("%s*(.-)%s*|") do cells[#cells + 1] = cell end
      local name, default = cells[1]:match("^`([%w_]+)`$"), (cells[2] or ""):match("^[%d,]+")
      assert(name and default and #cells == 4, "a row the spec cannot read: " .. line)
      rows[#rows + 1] = { name, tonumber((default:gsub(",", ""))), cells[3] == "yes" }
    end
  end
  return rows
end

describe("the table of limits", function()
  it("is luma.limits, the same table as core.limits", function()
    assert.are.equal(core.limits, luma.limits)
    assert.are.equal(8 * 1024 * 1024, luma.limits.max_source_bytes)
    assert.are.equal(500, luma.limits.max_depth_cap)
  end)

  it("is the README's table of limits, name for name and default for default", function()
    local listed = {}
    for _, row in ipairs(readme_limits()) do
      assert.is_nil(listed[row[1]], "listed twice: " .. row[1])
      listed[row[1]] = row[2]
    end
    assert.are.same(core.limits, listed)
  end)

  it("marks as settable exactly the limits opts.limits accepts", function()
    local source = "schema A { x: int }\n"
    for _, row in ipairs(readme_limits()) do
      local name, default, settable = row[1], row[2], row[3]
      local ok, err = pcall(luma.compile, source, "program.luma", { limits = { [name] = default } })
      assert.are.equal(settable, ok, name .. ": " .. tostring(err))
      if not ok then assert.matches("opts.limits has no limit '" .. name .. "'", err, 1, true) end
    end
  end)

  it("gives luma.load the default max_source_bytes", function()
    local dir = h.project { ["program.luma"] = "schema A { x: int }\n" .. string.rep(" ", luma.limits.max_source_bytes) }
    local _, err = h.load(dir)
    assert.are.equal("PROGRAM_INVALID", err.code)
    assert.matches("the limit is " .. luma.limits.max_source_bytes .. "$", err.message)
  end)

  it("bounds a tool_module_policy by the policy limits", function()
    local cases = {
      { { max_memory_mb = luma.limits.policy_min_memory_mb - 1 }, "max_memory_mb" },
      { { max_memory_mb = luma.limits.policy_max_memory_mb + 1 }, "must be at most " .. luma.limits.policy_max_memory_mb },
      { { max_concurrency = luma.limits.policy_max_concurrency + 1 }, "must be at most " .. luma.limits.policy_max_concurrency },
    }
    local dir = h.project { ["program.luma"] = "schema A { x: int }\n" }
    for _, c in ipairs(cases) do
      local _, err = h.load(dir, { tool_module_policy = c[1] })
      assert.are.equal("CONFIG_INVALID", err and err.code)
      assert.matches(c[2], err.message, 1, true)
    end
    assert.truthy(h.load(dir, { tool_module_policy = { max_memory_mb = luma.limits.policy_max_memory_mb,
                                                       max_concurrency = luma.limits.policy_max_concurrency } }))
  end)
end)

describe("copy_max_values", function()
  -- a value is a table, string, number, boolean or null of the data; a key
  -- is not one (its bytes count in copy_max_bytes)
  it("lets a result of 999,999 values through and stops one of 1,000,001", function()
    local dir = h.project {
      ["program.luma"] = "schema Big { items: int[] }\ntool big(n: int) -> Big { timeout: 60000 }\n",
      ["tools.lua"] = "return { big = function(input) local t = {} for i = 1, input.n do t[i] = i end " ..
        "return { items = t } end }\n",
      ["luma.config.json"] = '{ "tool_modules": ["tools.lua"], "tool_module_policy": { "sandbox": "strict" } }',
    }
    local program = assert(h.load(dir))
    assert.are.equal(1000000, luma.limits.copy_max_values)
    -- the object, the list and 999,997 integers
    local result = program:call("big", { n = 999997 })
    assert.are.same({ 999997, 999997 }, { #result.items, result.items[999997] })
    -- the object, the list and 999,999 integers
    local err = h.raised(program.call, program, "big", { n = 999999 })
    assert.are.equal("TOOL_OUTPUT_INVALID", err.code)
    assert.are.equal("big.output cannot be returned: it holds more than 1000000 values", err.message)
  end)
end)

-- The C sources of the runtime, each as { path, code, strings }: code is the
-- text with comments and string literals blanked (lines kept), strings the
-- text with only the string literals' contents left.
local function c_sources()
  local list, p = {}, assert(io.popen("cd " .. h.quote(h.root) ..
    " && ls base/*.[ch] core/*.[ch] sandbox/*.[ch] adapters/*.[ch]"))
  for path in p:lines() do
    if path ~= "base/luma_limits.h" then
      local src, code, strs, i = h.read(h.root .. "/" .. path), {}, {}, 1
      local function keep(text, as_code)
        code[#code + 1] = as_code and text or (text:gsub("[^\n]", " "))
        strs[#strs + 1] = as_code and (text:gsub("[^\n]", " ")) or text
      end
      while i <= #src do
        local two = src:sub(i, i + 1)
        if two == "/*" or two == "//" then
          local stop = two == "/*" and select(2, src:find("*/", i + 2, true)) or (src:find("\n", i, true) or #src + 1) - 1
          local blank = src:sub(i, stop):gsub("[^\n]", " ")
          code[#code + 1], strs[#strs + 1], i = blank, blank, stop + 1
        elseif two:sub(1, 1) == '"' or two:sub(1, 1) == "'" then
          local q, j = two:sub(1, 1), i + 1
          while j <= #src and src:sub(j, j) ~= q do j = j + (src:sub(j, j) == "\\" and 2 or 1) end
          keep(q, true)
          if q == '"' then keep(src:sub(i + 1, j - 1), false) else   -- a character ('5') is no number
            local blank = src:sub(i + 1, j - 1):gsub(".", " ")
            code[#code + 1], strs[#strs + 1] = blank, blank
          end
          keep(q, true)
          i = j + 1
        else
          keep(src:sub(i, i), true)
          i = i + 1
        end
      end
      list[#list + 1] = { path, table.concat(code), table.concat(strs), src }
    end
  end
  p:close()
  return list
end

local function lines_of(text)
  local t = {}
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do t[#t + 1] = line end
  return t
end

-- Numbers of the table that a C source may still write, each where it means
-- something else: { path, text on the line, reason }. An entry that no
-- longer matches anything fails too, so that the list stays true.
local OTHER_MEANINGS = {
  { "adapters/adapter.c", "delay_ms(v, 1000)", "Retry-After in seconds, scaled to milliseconds" },
  { "adapters/adapter.c", "status >= 500", "an HTTP status class" },
  { "adapters/adapter.c", "r->status < 200", "an HTTP status class" },
  { "adapters/adapter.c", "long long d = 500;", "the first backoff of a retried ask, in ms (PROVIDERS.md)" },
  { "adapters/adapter.c", "r->status == 400 && type", "an HTTP status: Azure's 400 content_filter" },
  { "adapters/adapter.c", "answered 400 content_filter", "an HTTP status: Azure's 400 content_filter, in its message" },
  { "core/program_types.c", "fits in 64 bits", "the width of an integer, in bits" },
  { "adapters/anthropic.c", "AD_ANTHROPIC_MAX_TOKENS 4096", "the max_tokens Anthropic needs when a model sets none" },
  { "base/crypto.c", "MBEDTLS_CIPHER_ID_AES, key, 256", "AES-256: a key size in bits" },
  { "adapters/stream.c", "s->error.status = 200;", "an HTTP status: an error inside a stream that answered 200" },
  { "adapters/stream.c", "{ \"invalid_request_error\", 400 }", "HTTP statuses: a stream's error types and their HTTP equivalents" },
  { "adapters/stream.c", "{ \"api_error\", 500 }", "HTTP statuses: a stream's error types and their HTTP equivalents" },
  { "adapters/stream.c", "{ \"server_error\", 500 }", "HTTP statuses: a stream's error types and their HTTP equivalents" },
  { "adapters/stream.c", "{ \"INVALID_ARGUMENT\", 400 }", "HTTP statuses: Gemini's error statuses and their HTTP equivalents" },
  { "adapters/stream.c", "{ \"INTERNAL\", 500 }", "HTTP statuses: Gemini's error statuses and their HTTP equivalents" },
  { "adapters/stream.c", "status < 400 || status > 599", "an HTTP status class" },
  { "adapters/stream.c", "status ? status : 200;", "an HTTP status: an error inside a stream that answered 200" },
  { "adapters/stream.c", "e.status = 200;", "an HTTP status: a stream that answered 200" },
  { "core/ask.c", "status >= 200 && status < 300", "an HTTP status class: a 2xx stream" },
  { "core/ask.c", "ad_response r = { 200,", "an HTTP status: a recorded stream's response" },
  { "sandbox/confine.c", "#define PRCTL_HIGHEST 100", "past the highest prctl option the kernel knows (the filter's range)" },
  { "sandbox/confine.c", "LL_FS_MAKE_REG (1ULL << 8)", "a bit of Landlock's access rights (kernel UAPI)" },
  { "core/redis.h", "RC_TIMEOUT_MS 1000", "Redis's connect and command timeout" },
  { "core/redis.c", "RD_BACKOFF_MIN_MS 100", "the first wait before reconnecting to Redis" },
  { "core/redis.c", "RD_BACKOFF_MAX_MS 5000", "the longest wait before reconnecting to Redis" },
  { "core/idem_redis.c", "redis.call('PUBLISH', ARGV[5], KEYS[1])", "the fifth argument of a Redis script" },
  { "core/journal_redis.c", "for i = 5, #ARGV, 1000", "the fifth argument of a Redis script: an append's first record, pushed in slices of a thousand" },
  { "core/idem_sqlite.c", "pid = ?5", "the fifth parameter of an SQL statement" },
  { "sandbox/wire.c", "WIRE_DEPTH_MAX 250", "nesting of a value on the wire to a handler process" },
  { "core/embed.c", "wait > 1000000 ? 1000000", "the longest one poll() of luma_wait sleeps, in ms" },
  { "core/idem.c", "must be 64 lowercase hex digits", "a SHA-256 in hex" },
  { "core/idem_sqlite.c", "64)", "a SHA-256 in hex (the table's CHECK)" },
  { "core/pipeline.c", "default_timeout_ms = 30000", "the default of the default_timeout_ms setting" },
  { "core/program.c", "retry_delay = 100", "the default of a tool's retry_delay setting" },
  { "core/program.c", "idempotency_ttl_ms = 300000", "the default of a tool's idempotency_ttl_ms setting" },
  { "core/record.c", "RC_DEPTH 512", "nesting of a recorded exchange (record/replay of asks)" },
  { "core/record.c", "resp->status < 200 || resp->status >= 300", "an HTTP status class: a recorded 2xx stream" },
  { "core/validate.c", "pattern_len > 200 ? 200", "bytes of a pattern quoted in a violation's message" },
  { "core/validate.c", "fits in 64 bits", "the width of an integer" },
  { "sandbox/bounded.c", "SX_TICK_ELEMENTS 4096", "elements between two looks at the deadline" },
  { "sandbox/bounded.c", "SX_LOAD_SLICE (4u << 10)", "bytes of source parsed between two looks at the deadline" },
  { "sandbox/child.c", "65536", "the descriptors a new child closes" },
  { "sandbox/child.c", "LUA_GCCOUNT, 0) > 4096", "KiB the child's state may hold before it collects" },
  { "sandbox/child.h", "FIRST_READ 4096", "bytes of a child's first read" },
  { "sandbox/confine.c", "CONFINE_ROOM ((size_t)64 << 20)", "memory a confined child needs besides its state" },
  { "sandbox/isolate.c", "SPAWN_SLACK_MS 1000", "time a new child may take past its load budget" },
  { "sandbox/isolate.c", "READY_MAX ((size_t)1 << 20)", "bytes of a child's ready message" },
  { "sandbox/isolate.c", "REAP_WAIT_MS 500", "how long a closed child's exit is waited for" },
  { "sandbox/isolate.c", "((size_t)1 << 20)", "room for an error's fields in a child's reply" },
  { "sandbox/isolate.c", "struct timespec one = { 0, 1000000 }", "a millisecond, in nanoseconds" },
  { "sandbox/pattern.h", "SP_TICK 1000", "matcher steps between two looks at the deadline" },
  { "sandbox/sandbox.h", "SX_KILL_GRACE_MS 100", "the default of kill_grace_ms" },
  { "sandbox/sandbox.h", "SX_CLOCK_EVERY 256", "values copied between two looks at the clock" },
  { "sandbox/sandbox.h", "SX_COPY_GRACE_MS 100", "time a copy may take past the deadline" },
  { "sandbox/state.c", "coroutine.close is nested more than 100 deep", "a bound of the strict state's Lua prelude" },
  { "sandbox/watch.c", "SX_WATCH_SLOTS 512", "slots of the deadline watcher" },
  { "sandbox/watch.c", "RESENDS_MAX 200", "how often the watcher repeats a stop signal" },
  { "core/mcphttp.c", "case 200:", "an HTTP status" },
  { "core/mcphttp.c", "case 400:", "an HTTP status" },
  { "core/mcphttp.c", "conn_refuse(s, c, 400,", "an HTTP status" },
  { "core/mcphttp.c", "HTTP/1.1 100 Continue", "an HTTP status: the interim reply to Expect: 100-continue" },
  { "core/mcphttp.c", "HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream", "an HTTP status: the head of an event-stream reply" },
  { "core/lmcphttp.c", "status >= 100 && status <= 599", "the range of HTTP statuses" },
}

describe("the table of limits in the C sources", function()
  it("has every LIM_ name read somewhere in the code, not only in the table", function()
    local code = {}
    for _, f in ipairs(c_sources()) do code[#code + 1] = f[2] end
    code = table.concat(code, "\n")
    local unread = {}
    for name in pairs(core.limits) do
      if not code:find("%f[%w_]LIM_" .. name:upper() .. "%f[^%w_]") then unread[#unread + 1] = name end
    end
    table.sort(unread)
    assert.are.same({}, unread)
  end)

  -- A number of the README's table written again in code is a second
  -- owner of its limit. Numbers below 100 are left out of the code (a base
  -- 10, 64 hex digits, 5 arguments): the LIM_ names stand for those. Not
  -- counted either: array sizes, operands of * / % (units: 1000 ms to a
  -- second), hexadecimal, and _NS constants (the table has no nanoseconds).
  -- Messages are checked for every number: they show the value, so they
  -- are built from it.
  it("writes no number of the README's table as a literal of its own", function()
    local numbers = {}
    for _, row in ipairs(readme_limits()) do numbers[row[2]] = row[1] end
    local found, used = {}, {}
    local function hit(path, lineno, line, value, text)
      for i, other in ipairs(OTHER_MEANINGS) do
        if other[1] == path and line:find(other[2], 1, true) then used[i] = true return end
      end
      found[#found + 1] = ("%s:%d: %s (%s) in: %s"):format(path, lineno, text, numbers[value], line:match("^%s*(.-)%s*$"))
    end
    for _, f in ipairs(c_sources()) do
      local path, code, strs, src = f[1], lines_of(f[2]), lines_of(f[3]), lines_of(f[4])
      for n, line in ipairs(code) do
        local skip_define = line:match("^%s*#%s*define%s+[%w_]+_NS%f[^%w_]")
        -- shifts first: 8u << 20; their operands are not read again
        line = line:gsub("%f[%w_]()(%d+)[uUlL]*%s*<<%s*(%d+)%f[^%w_]", function(at, a, b)
          local v = math.tointeger(tonumber(a) * 2 ^ tonumber(b))
          if numbers[v] and v >= 100 then hit(path, n, src[n], v, a .. " << " .. b) end
          return (" "):rep(#a + #b + 4)
        end)
        for at, digits, stop in line:gmatch("%f[%w_.]()(%d[%w_.]*)()") do
          local v = digits:match("^[1-9]%d*[uUlL]*$") and tonumber((digits:gsub("[uUlL]+$", "")))
          local before, after = line:sub(1, at - 1):match("(%S?)%s*$"), line:sub(stop):match("^%s*(%S?)")
          if v and numbers[v] and v >= 100 and not skip_define and not (before == "[" and after == "]")
              and not before:match("[*/%%]") and not after:match("[*/%%]") then
            hit(path, n, src[n], v, digits)
          end
        end
        for digits in strs[n]:gmatch("%f[%w_.%%%-]%d+%f[^%w_.%-]") do
          local v = tonumber(digits)
          if numbers[v] then hit(path, n, src[n], v, '"' .. digits .. '"') end
        end
      end
    end
    local stale = {}
    for i, other in ipairs(OTHER_MEANINGS) do
      if not used[i] then stale[#stale + 1] = other[1] .. ": " .. other[2] end
    end
    assert.are.same({}, found)
    assert.are.same({}, stale)
  end)
end)
