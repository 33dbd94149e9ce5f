local h = require "spec.helpers"

-- Declarations most cases build on.
local base = [[
schema R { v: int }
schema Database { user: string, port: int }
schema ToolError { code: string, message: string, retryable: bool, details?: any }
model M { provider: "openai"
  name: "gpt" }
]]

local function errors(source) return (h.errors(base .. source)) end

describe("consistency rules", function()
  local exact = {
    { "a write tool cannot be cached",
      'tool x(a: int) -> R { side_effects: "write"\n cache: true }',
      "Write tool 'x' cannot use cache." },
    { "a retried write tool must be idempotent",
      'tool x(a: int) -> R { side_effects: "write"\n retries: 3 }',
      "A write tool 'x' must be idempotent and specify an idempotency_key to be retried." },
    { "idempotent needs a key",
      "tool x(a: int) -> R { idempotent: true }",
      "Idempotent tool 'x' must specify an idempotency_key." },
    { "timeout 0 is invalid",
      "tool x(a: int) -> R { timeout: 0 }",
      "Tool 'x' timeout must be greater than zero." },
    { "a negative timeout is invalid too",
      "tool x(a: int) -> R { timeout: -5 }",
      "Tool 'x' timeout must be greater than zero." },
    { "a tool with needs cannot be cached",
      "tool x(a: int) -> R { needs db: Database\n cache: true }",
      "Cache cannot be used on a tool that uses needs: x" },
    { "using tool needs the tool in the agent's tools",
      'tool calculate(a: int) -> R {}\nagent A { model: M\n tools: []\n fn run() -> R { ask "hi" -> R using tool calculate } }',
      "Agent 'A' does not allow the tool 'calculate' required by using tool." },
  }
  for _, c in ipairs(exact) do
    it(c[1] .. ": " .. c[3], function()
      assert.are.same({ c[3] }, errors(c[2]))
    end)
  end

  it("accept a retried write tool that is idempotent with a key", function()
    assert.are.same({}, errors([[
tool db_write(request_id: string, value: string) -> R {
  side_effects: "write"
  error: ToolError
  idempotent: true
  idempotency_key: request_id
  idempotency_ttl_ms: 300000
  retries: 3
  retry_backoff: "exponential"
  retry_delay: 100
  timeout: 3000
}]]))
  end)

  it("report a broken rule at the key that breaks it", function()
    local _, err = h.compile(base .. 'tool x(a: int) -> R {\n  side_effects: "write"\n  cache: true\n}')
    local d = err.details.diagnostics[1]
    assert.are.same({ 8, 3 }, { d.line, d.col })
  end)
end)

describe("load-time checks", function()
  local cases = {
    { "unknown types, with a suggestion", "schema A { x: strng }", "Unknown type 'strng'. Did you mean 'string'?" },
    { "unknown schema names", "schema A { x: Databse }", "Unknown type 'Databse'. Did you mean 'Database'?" },
    { "types that are not schemas", "tool t(a: int) -> R {}\nschema A { x: t }", "'t' is a tool, not a schema." },
    { "an undeclared return schema", "tool t(a: int) -> Nope {}", "Tool 't' returns 'Nope', which is not a declared schema." },
    { "a primitive return type", "tool t(a: int) -> string {}", "Tool 't' must return a declared schema, not 'string'." },
    { "an array return type", "tool t(a: int) -> R[] {}", "Tool 't' must return a declared schema, not 'R[]'." },
    { "an inline return type", "tool t(a: int) -> { v: int } {}", "Tool 't' must return a declared schema, not an inline type." },
    { "a return type that is a model", "tool t(a: int) -> M {}", "Tool 't' returns 'M', which is a model, not a schema." },
    { "an inline field type", "schema A { x: { y: int } }", "inline record types are not supported; declare a schema and use its name" },
    { "duplicate declarations", "schema R { w: int }", "'R' is already declared at 1:8" },
    { "a tool named like a schema", "tool R(a: int) -> R {}", "'R' is already declared at 1:8" },
    { "reserved names", "schema __x { a: int }", "names starting with '__' are reserved: '__x'" },
    { "built-in type names", "schema string { a: int }", "'string' is a built-in type and cannot name a schema" },
    { "duplicate fields", "schema A { a: int\n a: string }", "Schema 'A' has two fields named 'a'" },
    { "duplicate parameters", "tool t(a: int, a: int) -> R {}", "Tool 't' has two fields named 'a'" },
    { "duplicate enum values", 'schema A { a: enum["x", "x"] }', 'enum value "x" is listed twice' },
    { "an unknown config key, with a suggestion", "tool t(a: int) -> R { cahce: true }", "Tool 't' has no option 'cahce'. Did you mean 'cache'?" },
    { "an unknown config key, without a close match", "tool t(a: int) -> R { colour: true }", "Tool 't' has no option 'colour'." },
    { "an unknown agent key", "agent A { tool_timout: 5 }", "Agent 'A' has no option 'tool_timout'. Did you mean 'tool_timeout'?" },
    { "an unknown model key", 'model N { provider: "openai"\n name: "x"\n temprature: 1 }', "Model 'N' has no option 'temprature'. Did you mean 'temperature'?" },
    { "a config key set twice", "tool t(a: int) -> R { cache: true\n cache: false }", "Tool 't' sets 'cache' twice (first at 6:23)." },
    { "a bool of the wrong type", 'tool t(a: int) -> R { cache: "yes" }', "Tool 't': 'cache' must be true or false." },
    { "an int of the wrong type", 'tool t(a: int) -> R { retries: "3" }', "Tool 't': 'retries' must be an integer." },
    { "a float where an int belongs", "tool t(a: int) -> R { retries: 1.5 }", "Tool 't': 'retries' must be an integer." },
    { "a negative count", "tool t(a: int) -> R { retries: -1 }", "Tool 't': 'retries' must be at least 0." },
    { "a choice outside its values", 'tool t(a: int) -> R { side_effects: "delete" }', "Tool 't': 'side_effects' must be one of \"none\", \"read\", \"write\"." },
    { "a bare word for a choice", "tool t(a: int) -> R { retry_backoff: fixed }", "Tool 't': 'retry_backoff' must be one of \"none\", \"fixed\", \"exponential\"." },
    { "a string of the wrong type", "tool t(a: int) -> R { scope: 5 }", "Tool 't': 'scope' must be a string." },
    { "a credential that is not an env var name", 'tool t(a: int) -> R { credential: "DB PASSWORD" }', "Tool 't': 'credential' must be an environment variable name." },
    { "an error schema that is not declared", "tool t(a: int) -> R { error: ToolEror }", "Tool 't': 'error' names 'ToolEror', which is not a declared schema. Did you mean 'ToolError'?" },
    { "an error given as a string", 'tool t(a: int) -> R { error: "ToolError" }', "Tool 't': 'error' must be the name of a declared schema." },
    { "a zero idempotency TTL", "tool t(a: int) -> R { idempotency_ttl_ms: 0 }", "Tool 't' idempotency_ttl_ms must be greater than zero." },
    { "an idempotency_key that is not an input field", "tool t(a: int) -> R { idempotent: true\n idempotency_key: request_id }", "Tool 't' idempotency_key 'request_id' is not an input field." },
    { "an idempotency_key written as input.x that is not a field", "tool t(a: int) -> R { idempotent: true\n idempotency_key: input.b }", "Tool 't' idempotency_key 'b' is not an input field." },
    { "an idempotency_key that is an expression", "tool t(a: int) -> R { idempotent: true\n idempotency_key: a + 1 }", "Tool 't': 'idempotency_key' must name an input field, as in request_id or input.request_id." },
    { "an idempotency_key on an optional field", "tool t(a?: string) -> R { idempotent: true\n idempotency_key: a }", "Tool 't' idempotency_key 'a' must be a required input field." },
    { "an idempotency_key on an object", "tool t(a: R) -> R { idempotent: true\n idempotency_key: a }", "Tool 't' idempotency_key 'a' must name a string, number, bool or enum field." },
    { "an idempotency_key without idempotent", "tool t(a: int) -> R { idempotency_key: a }", "Tool 't' has an idempotency_key but is not idempotent: true." },
    { "needs of a type that is not a record", "tool t(a: int) -> R { needs db: string }", "Tool 't' needs 'db' must be a record schema." },
    { "needs declared twice", "tool t(a: int) -> R { needs db: Database\n needs db: Database }", "Tool 't' declares needs 'db' twice." },
    { "an agent listing an undeclared tool", "tool calculate(a: int) -> R {}\nagent A { tools: [calculat] }", "Agent 'A' lists undeclared tool 'calculat'. Did you mean 'calculate'?" },
    { "an agent listing a tool twice", "tool t(a: int) -> R {}\nagent A { tools: [t, t] }", "Agent 'A' lists tool 't' twice." },
    { "an agent with an undeclared model", "agent A { model: GPT }", "Agent 'A': 'model' names 'GPT', which is not a declared model." },
    { "an agent whose model is a schema", "agent A { model: R }", "Agent 'A': 'model' names 'R', which is not a declared model." },
    { "an agent tool_policy outside its values", 'agent A { tool_policy: "deny" }', "Agent 'A': 'tool_policy' must be one of \"allow\", \"deny_write\", \"approval\"." },
    { "an agent tool_concurrency below 1", "agent A { tool_concurrency: 0 }", "Agent 'A': 'tool_concurrency' must be at least 1." },
    { "an agent tool_timeout of zero", "agent A { tool_timeout: 0 }", "Agent 'A' tool_timeout must be greater than zero." },
    { "tool_scopes that are not strings", "agent A { tool_scopes: [db] }", "Agent 'A': 'tool_scopes' must be a list of strings." },
    { "an agent that asks without a model", 'agent A { fn run() -> R { ask "x" -> R } }', "Agent 'A' uses ask but has no model." },
    { "an ask whose result is not a schema", 'agent A { model: M\n fn run() { v = ask "x" -> string } }', "ask must name a declared schema as its result, not 'string'." },
    { "an ask at top level", 'v = ask "x" -> R', "ask can only be used inside an agent method." },
    { "a call to an undeclared tool", "tool calculate(a: int) -> R {}\nv = tool calculat({ a: 1 })", "Unknown tool 'calculat'. Did you mean 'calculate'?" },
    { "a using tool that is not declared", 'agent A { model: M\n fn run() -> R { ask "x" -> R using tool nope } }', "Unknown tool 'nope'." },
    { "methods with the same name", "agent A { fn run() { }\n fn run() { } }", "Agent 'A' has two methods named 'run'." },
    { "a typed assignment with an unknown type", "v: Nope = 1", "Unknown type 'Nope'." },
    { "an unknown variable in a statement", "x = nobody", "unknown variable 'nobody'" },
    { "an unknown variable in a template", 'x = "hello {nobody}"', "unknown variable 'nobody'" },
    { "an unknown variable in a condition", "if nobody { x = 1 }", "unknown variable 'nobody'" },
    { "an unknown variable in a call's argument", "tool t(a: int) -> R {}\nv = tool t({ a: nobody })", "unknown variable 'nobody'" },
    { "a misspelt variable", "total = 1\nx = totl + 1", "unknown variable 'totl' (did you mean 'total'?)" },
    { "a method's variable read at top level", 'tool t(a: int) -> R {}\nagent A { tools: [t]\n fn run(n: int) { m = n } }\nx = m', "unknown variable 'm'" },
    { "integer for int", "schema S { a: integer }", "Unknown type 'integer'. Did you mean 'int'?" },
    { "boolean for bool", "schema S { a: boolean }", "Unknown type 'boolean'. Did you mean 'bool'?" },
    { "number for float", "schema S { a: number }", "Unknown type 'number'. Did you mean 'float'?" },
    { "JSON Schema's maxLength for @length", "schema S { a: string @maxLength(3) }", "Unknown annotation '@maxLength'. Did you mean '@length'?" },
    { "JSON Schema's minimum for @range", "schema S { a: int @minimum(3) }", "Unknown annotation '@minimum'. Did you mean '@range'?" },
    { "JSON Schema's minItems for @items", "schema S { a: int[] @minItems(1) }", "Unknown annotation '@minItems'. Did you mean '@items'?" },
    { "description for @desc", 'schema S { a: int @description("x") }', "Unknown annotation '@description'. Did you mean '@desc'?" },
    { "a misspelt provider", 'model N { provider: "antropic"\n name: "c" }', "Model 'N': 'provider' must be one of \"openai\", \"azure\", \"anthropic\", \"gemini\". Did you mean \"anthropic\"?" },
    { "a misspelt side_effects", 'tool t(a: int) -> R { side_effects: "writes" }', "Tool 't': 'side_effects' must be one of \"none\", \"read\", \"write\". Did you mean \"write\"?" },
    { "a model without a provider", 'model N { name: "x" }', "Model 'N' must set provider: one of \"openai\", \"azure\", \"anthropic\", \"gemini\"." },
    { "a model without a name", 'model N { provider: "gemini" }', "Model 'N' must set name: the provider's model name." },
    { "an azure model without a deployment", 'model N { provider: "azure"\n base_url: "https://x"\n api_version: "2024-10-21" }', "Model 'N' uses azure and must set deployment." },
    { "an azure model without a base_url", 'model N { provider: "azure"\n deployment: "d" }', "Model 'N' uses azure and must set base_url." },
    { "the Responses API on anthropic", 'model N { provider: "anthropic"\n name: "c"\n api: "responses" }', "Model 'N': api \"responses\" is the OpenAI Responses API: only for openai and azure." },
    { "an api outside its values", 'model N { provider: "openai"\n name: "g"\n api: "completions" }', "Model 'N': 'api' must be one of \"chat\", \"responses\"." },
    { "a base_url that is not http", 'model N { provider: "openai"\n name: "g"\n base_url: "ftp://x" }', "Model 'N': base_url must start with http:// or https://." },
    { "an api_key_env that is not a name", 'model N { provider: "openai"\n name: "g"\n api_key_env: "A-B" }', "Model 'N': 'api_key_env' must be an environment variable name, or null for no key." },
    { "headers that are not an object", 'model N { provider: "openai"\n name: "g"\n headers: ["x"] }', "Model 'N': 'headers' must be an object of header names and string values." },
    { "a header name with a space", 'model N { provider: "openai"\n name: "g"\n headers: { "X Y": "1" } }', "Model 'N': 'headers': 'X Y' is not a header name (letters, digits and !#$%&'*+-.^_`|~)." },
    { "a header value that is not a string", 'model N { provider: "openai"\n name: "g"\n headers: { "X-Y": 1 } }', "Model 'N': 'headers': the value of 'X-Y' must be a string on one line." },
    { "negative model retries", 'model N { provider: "openai"\n name: "g"\n retries: -1 }', "Model 'N': 'retries' must be at least 0." },
    { "negative agent retries", 'agent A { retries: -1 }', "Agent 'A': 'retries' must be at least 0." },
    { "a union member that is a union", "schema A { a: int }\nschema U = A tagged by kind\nschema V = U | A tagged by kind", "Union 'V' member 'U' must be a record schema." },
    { "a union member that is a built-in type", "schema A { a: int }\nschema U = A | int tagged by kind", "Union 'U' member 'int' must be a record schema." },
    { "a union member listed twice", "schema A { a: int }\nschema U = A | A tagged by kind", "Union 'U' lists 'A' twice." },
    { "a union tag that clashes with a field", "schema A { kind: string }\nschema U = A tagged by kind", "Schema 'A' already has a field 'kind', the tag of union 'U'." },
  }
  for _, c in ipairs(cases) do
    it("report " .. c[1], function()
      assert.are.same({ c[3] }, errors(c[2]))
    end)
  end

  it("report every error of the file, in source order", function()
    local messages = errors([[
tool a(x: int) -> Nope { cahce: true }
tool b(x: int) -> R { side_effects: "write"
  cache: true }
agent A { tools: [c] }]])
    assert.are.same({
      "Tool 'a' returns 'Nope', which is not a declared schema.",
      "Tool 'a' has no option 'cahce'. Did you mean 'cache'?",
      "Write tool 'b' cannot use cache.",
      "Agent 'A' lists undeclared tool 'c'.",
    }, messages)
  end)
end)
