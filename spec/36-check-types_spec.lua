local h = require "spec.helpers"

-- Lines 1-9; the cases start on line 10.
local base = [[
schema Sum { total: int, note?: string }
schema Any { v?: any }
schema Point { x: float, y: float }
schema Invoice { number: string }
schema Receipt { reference: string, total?: float }
schema Document = Invoice | Receipt tagged by kind
tool add(a: int, b: int, op?: enum["add", "mul"] @default("add"), at?: Point, tags?: string[]) -> Sum {}
tool value(v?: any) -> Any {}
tool classify(text: string) -> Document {}
]]

-- "line:col: message" of every error of base .. source.
local function errors(source)
  local _, err = h.compile(base .. source)
  if not err then return {} end
  local list = {}
  for _, d in ipairs(err.details.diagnostics) do list[#list + 1] = d.line .. ":" .. d.col .. ": " .. d.message end
  return list
end

local function check_cases(cases)
  for _, c in ipairs(cases) do
    it(c[1], function()
      assert.are.same(c[3], errors(c[2]))
    end)
  end
end

describe("check: variables read before any assignment", function()
  check_cases {
    { "report a read that comes before the first assignment", 'x = "v={later}"\nlater = 1',
      { "10:9: variable 'later' is read before it is assigned (first assigned at 11:1)" } },
    { "report a read on a path where no branch assigned it", "if true { w = 1 } else { v = w }",
      { "10:30: variable 'w' is read before it is assigned (first assigned at 10:11)" } },
    { "report a variable that reads itself first", "n = n + 1",
      { "10:5: variable 'n' is read before it is assigned (first assigned at 10:1)" } },
    { "report it in a method", "agent A { fn run() { y = z\n z = 1 } }",
      { "10:26: variable 'z' is read before it is assigned (first assigned at 11:2)" } },
    { "accept a variable that one branch may have assigned (it is null otherwise)",
      "if false { y = 1 }\nz = y\ntry { q = 1 } catch e { r = q }\nafter = e", {} },
    { "accept a method's parameters", "agent A { fn run(p: int) { q = p + 1 } }", {} },
  }
end)

describe("check: no false errors", function()
  it("passes every example with `luma-lua check`", function()
    local examples = {}
    for path in io.popen("cd " .. h.quote(h.root) .. " && ls examples/*.luma examples/*/*.luma"):lines() do
      examples[#examples + 1] = path
    end
    assert.is_true(#examples >= 5)
    for _, path in ipairs(examples) do
      local r = h.run({ "check", path })
      assert.are.same({ 0, "" }, { r.status, r.stderr }, path)
    end
  end)
end)
