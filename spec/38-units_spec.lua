-- The C units of core/ depend on each other in one direction: no unit of
-- the call, the ask or the stores includes the header of a unit that
-- includes its own, directly or around a longer circle (spec/support/
-- includes.lua says how a header's unit is found).
local h = require "spec.helpers"
local includes = require "spec.support.includes"

-- The units of the call (its state machine, its steps, its drivers and its
-- binding), of the ask, of the stores, and of the MCP client's HTTP.
local OWNED = {
  "call", "verdict", "policy", "needs", "cache", "idempotent", "attempt", "output", "breaker", "telemetry",
  "pipeline", "runtime", "drive", "lcall", "lruntime", "lconfigure", "ljournal",
  "ask", "asktools", "askevents", "askptools", "askjournal", "askpast", "lask",
  "idem", "idem_file", "idem_sqlite", "idem_redis", "redis", "journal", "journal_base", "journal_sqlite", "journal_redis",
  "mcpremote", "lmcpremote",
}

describe("core/'s units", function()
  it("put none of the call, the ask or the stores in an import circle", function()
    local owned = {}
    for _, u in ipairs(OWNED) do owned[u] = true end
    local found = {}
    for _, circle in ipairs(includes.circles(h.root .. "/core")) do
      for _, u in ipairs(circle) do
        if owned[u] then
          found[#found + 1] = table.concat(circle, " <-> ")
          break
        end
      end
    end
    assert.are.same({}, found)
  end)

  it("are each in the graph the checker reads", function()
    local graph = includes.graph(h.root .. "/core")
    local missing = {}
    for _, u in ipairs(OWNED) do
      if not graph[u] then missing[#missing + 1] = u end
    end
    assert.are.same({}, missing)
  end)

  -- the checker itself, on units made for it
  local cases = {
    { "two units that include each other's header",
      { ["a.h"] = "int a(void);\n", ["a.c"] = '#include "a.h"\n#include "b.h"\nint a(void) { return b(); }\n',
        ["b.h"] = "int b(void);\n", ["b.c"] = '#include "b.h"\n#include "a.h"\nint b(void) { return 0; }\n' },
      { { "a", "b" } } },
    { "three units around a circle, one through a header that includes another",
      { ["a.h"] = '#include "c.h"\nint a(void);\n', ["a.c"] = '#include "a.h"\nint a(void) { return c(); }\n',
        ["b.h"] = "int b(void);\n", ["b.c"] = '#include "b.h"\n#include "a.h"\nint b(void) { return a(); }\n',
        ["c.h"] = "int c(void);\n", ["c.c"] = '#include "c.h"\n#include "b.h"\nint c(void) { return b(); }\n' },
      { { "a", "b", "c" } } },
    { "a header of types only, which belongs to no unit",
      { ["t.h"] = "typedef struct t { int x; } t;\n",
        ["a.h"] = '#include "t.h"\nint a(const t *v);\n', ["a.c"] = '#include "a.h"\nint a(const t *v) { return v->x; }\n',
        ["b.h"] = "int b(void);\n", ["b.c"] = '#include "b.h"\n#include "a.h"\nint b(void) { return 0; }\n',
        ["t.c"] = '#include "t.h"\n#include "b.h"\nstatic int f(void) { return b(); }\n' },
      {} },
    { "a header named after one unit that declares another's function",
      { ["a.h"] = "int a(void);\nint b(void);\n", ["a.c"] = '#include "a.h"\nint a(void) { return 1; }\n',
        ["b.c"] = '#include "a.h"\nint b(void) { return a(); }\n' },
      { { "a", "b" } } },
  }
  for _, case in ipairs(cases) do
    it("finds the circles of " .. case[1], function()
      local dir = h.project(case[2])
      assert.are.same(case[3], includes.circles(dir))
    end)
  end
end)
