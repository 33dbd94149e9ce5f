-- Type generation (SPEC §6): --generate-tool-types writes TypeScript (.d.ts)
-- that tsc --strict holds handlers to, or LuaCATS annotations (.lua), and
-- runs nothing.
local h = require "spec.helpers"

local PROGRAM = h.root .. "/spec/fixtures/types/program.luma"

local function generate(out)
  return h.run({ PROGRAM, "--generate-tool-types", out })
end

-- tsc --strict on the generated file and a handler module (lib: es2017,dom
-- unless told); -> status, output
local function tsc(dts, handlers, lib)
  local dir = h.tmpname("-ts")
  assert(os.execute("mkdir -p " .. h.quote(dir)))
  h.write(dir .. "/tools.generated.d.ts", h.read(dts))
  h.write(dir .. "/tools.ts", handlers)
  local status, out, err = h.sh("cd " .. h.quote(dir) .. " && env -u LD_PRELOAD tsc --strict --noEmit --lib " ..
    (lib or "es2017,dom") .. " --target es2017 --moduleResolution node tools.ts")
  os.execute("rm -rf " .. h.quote(dir))
  return status, out .. err
end

local GOOD = [[
import type { GeneratedToolModule } from "./tools.generated";

export const tools: GeneratedToolModule = {
  file_doc: async (input, signal, needs) => {
    const ref = input.doc.kind === "Invoice" ? input.doc.invoice_number : input.doc.reference;
    return {
      doc: { kind: "Receipt", reference: ref + (needs ? needs.db.url : "") },
      tags: [String(input.copies)],
      level: input.urgent ? "high" : "low",
    };
  },
  ping: () => ({ reference: "pong" }),
};
]]

describe("--generate-tool-types", function()
  setup(function() h.ensure_packages { "node-typescript" } end)

  it("writes TypeScript that tsc --strict accepts with well-typed handlers, and runs nothing", function()
    local out = h.tmpname(".d.ts")
    local r = generate(out)
    assert.are.same({ 0, "", "" }, { r.status, r.stdout, r.stderr })
    local text = h.read(out)
    assert.matches("export type Document =\n  %(Invoice & { kind: \"Invoice\" }%)\n  | %(Receipt & { kind: \"Receipt\" }%);", text)
    assert.matches("/%*%* What to file %*/\n  doc: Document;", text)
    assert.matches("export type FileDocHandler = ToolHandler<FileDocInput, Filed, FileDocNeeds>;", text)
    local status, log = tsc(out, GOOD)
    assert.are.equal(0, status, log)
    os.remove(out)
  end)

  it("makes a handler that forgets a union's tag, or returns a wrong field type, fail to compile", function()
    local out = h.tmpname(".d.ts")
    assert.are.equal(0, generate(out).status)
    local no_tag = GOOD:gsub('doc: { kind: "Receipt", reference:', 'doc: { reference:')
    local status, log = tsc(out, no_tag)
    assert.are_not.equal(0, status)
    assert.matches("error TS", log)
    local wrong = GOOD:gsub('ping: %(%) => %({ reference: "pong" }%)', 'ping: () => ({ reference: 42 })')
    assert.are_not.equal(GOOD, wrong)
    status, log = tsc(out, wrong)
    assert.are_not.equal(0, status)
    assert.matches("Type 'number' is not assignable to type 'string'", log)
    os.remove(out)
  end)

  it("declares the handler's signal itself: no DOM lib nor @types/node is needed", function()
    local out = h.tmpname(".d.ts")
    assert.are.equal(0, generate(out).status)
    local with_signal = GOOD:gsub("ping: %(%) => %(", 'ping: (_input, signal) => (signal?.addEventListener("abort", () => {}), ' ..
      'signal?.aborted ? { reference: String(signal.reason) } : ')
    assert.are_not.equal(GOOD, with_signal)
    local status, log = tsc(out, with_signal, "es2020")
    assert.are.equal(0, status, log)
    -- and a DOM AbortSignal is one
    status, log = tsc(out, with_signal .. "tools.ping({}, new AbortController().signal);\n")
    assert.are.equal(0, status, log)
    os.remove(out)
  end)

  it("gives a handler the fields of nested schemas that have a default as present, and lets it return them left out", function()
    local program = h.program_file [[
schema Money { amount: float, currency: string @default("EUR") }
schema Line { price: Money, note?: string }
schema Priced = Line | Money tagged by kind
schema Order { lines: Line[], first?: Priced }
tool total(order: Order, fee: Money) -> Money { }
]]
    local out = h.tmpname(".d.ts")
    local r = h.run({ program, "--generate-tool-types", out })
    assert.are.same({ 0, "", "" }, { r.status, r.stdout, r.stderr })
    local text = h.read(out)
    assert.matches("export interface Money {\n  amount: number;\n  currency%?: string;\n}", text)
    assert.matches("export declare namespace Filled {\n  export interface Money {\n    amount: number;\n    currency: string;\n  }", text)
    assert.matches("  export interface Order {\n    lines: Filled.Line%[%];\n    first%?: Filled.Priced;\n  }", text)
    assert.matches("export interface TotalInput {\n  order: Filled.Order;\n  fee: Filled.Money;\n}", text)
    local handlers = [[
import type { GeneratedToolModule } from "./tools.generated";
export const tools: GeneratedToolModule = {
  total: (input) => {
    const currency: string = input.order.lines[0].price.currency + input.fee.currency;
    const first = input.order.first;
    const more: string = first && first.kind === "Line" ? first.price.currency : "";
    return { amount: currency.length + more.length };
  },
};
]]
    local status, log = tsc(out, handlers)
    assert.are.equal(0, status, log)
    os.remove(out)
  end)

  it("writes LuaCATS annotations: the fixture written by hand, byte for byte, every time", function()
    local out = h.tmpname(".lua")
    assert.are.equal(0, generate(out).status)
    local first = h.read(out)
    assert.are.equal(h.read(h.root .. "/spec/fixtures/types/expected.lua"), first)
    assert.are.equal(0, generate(out).status)
    assert.are.equal(first, h.read(out))
    -- and it is Lua: annotations only
    assert.is_truthy(load(first))
    os.remove(out)
  end)

  it("refuses another extension, and a program that does not compile", function()
    local r = generate(h.tmpname(".ts"))
    assert.are.equal(2, r.status)
    assert.matches("must end in %.d%.ts %(TypeScript%) or %.lua %(LuaCATS%)", r.stderr)
    local bad = h.program_file("tool t(x: Nope) -> Nope { }\n")
    r = h.run({ bad, "--generate-tool-types", h.tmpname(".lua") })
    assert.are.equal(2, r.status)
    assert.matches("Nope", r.stderr)
  end)
end)
