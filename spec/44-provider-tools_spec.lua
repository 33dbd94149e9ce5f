-- Provider tools: declared in .luma, checked against the model's row of the
-- capability table at load, sent as each family's entry, and their calls,
-- results, failures and citations kept and echoed as each family requires
-- (PROVIDER-TOOLS.md), through the mock provider, which refuses what the
-- real providers refuse.
local luma = require "luma"
local h = require "spec.helpers"
local mock = require "spec.support.mock_provider"

local KEY = "key-test-0123456789"
local A = luma.array_mt

local function arr(t) return setmetatable(t, A) end

local function find(list, pred)
  for _, v in ipairs(list or {}) do if pred(v) then return v end end
end

local BASE = [[
schema Sum { sum: int }
schema Answer { total: int }
tool add(a: int, b: int) -> Sum { }
]]

describe("provider_tool declarations", function()
  local function one(source)
    local messages, err = h.errors(BASE .. source)
    return messages, err
  end

  it("take a kind and the options of that kind, and an agent lists them among its tools", function()
    local p = assert(h.compile(BASE .. [[
provider_tool search {
  kind: "web_search"
  max_uses: 3
  allowed_domains: ["example.com"]
  user_location: { country: "FR", city: "Paris" }
}
model M { provider: "anthropic", name: "claude-sonnet-4-5" }
agent A { model: M
  tools: [search, add] }
]]))
    assert.are.same({ "search" }, p:declarations().provider_tools)
    assert.are.same({ kind = "provider_tool", name = "search", tool_kind = "web_search", max_uses = 3,
                      allowed_domains = { "example.com" }, user_location = { country = "FR", city = "Paris" } },
                    p:declaration("search"))
    local a = p:declaration("A")
    assert.are.same({ { "add" }, { "search" } }, { a.tools, a.provider_tools })
  end)

  local refused = {
    { "a kind that is none of the five",
      'provider_tool s { kind: "web_serch" }',
      [[Provider tool 's': 'kind' must be one of "web_search", "web_fetch", "code_execution", "file_search", "url_context". Did you mean "web_search"?]] },
    { "no kind",
      "provider_tool s { max_uses: 2 }",
      [[Provider tool 's' must set kind: one of "web_search", "web_fetch", "code_execution", "file_search", "url_context".]] },
    { "both allowed and blocked domains",
      'provider_tool s { kind: "web_search", allowed_domains: ["a.com"], blocked_domains: ["b.com"] }',
      "Provider tool 's' sets both allowed_domains and blocked_domains: set one." },
    { "file_search without vector stores",
      'provider_tool s { kind: "file_search" }',
      "Provider tool 's' (file_search) must set vector_stores: the ids of the vector stores (on Gemini, the fileSearchStores/... names) to search." },
    { "a direct call of a provider tool",
      'provider_tool s { kind: "web_search" }\nmodel M { provider: "anthropic", name: "claude-sonnet-4-5" }\nagent A { model: M\n tools: [s]\n fn run() -> Sum { return tool s({ q: "x" }) } }',
      "'s' is a provider tool: the provider runs it when the model asks, and it cannot be called with tool, nor forced with using tool." },
    { "a user_location field that is not one",
      'provider_tool s { kind: "web_search", user_location: { planet: "Mars" } }',
      [[Provider tool 's': 'user_location' has no field 'planet': it takes "city", "region", "country", "timezone".]] },
  }
  for _, c in ipairs(refused) do
    it("refuses " .. c[1], function()
      assert.are.same({ c[3] }, (one(c[2])))
    end)
  end
end)

describe("the capability check at load", function()
  -- model declaration, tools, the message, and where it points (line, col of the tools entry)
  local cases = {
    { "web search on Chat Completions with a model that is not a search model",
      'model M { provider: "openai", name: "gpt-5.4-mini" }', "search, add",
      [[Agent 'A': web_search is not available on Chat Completions for model 'gpt-5.4-mini' (model M); use api: "responses" or a search model (gpt-5-search-api, gpt-4o-search-preview).]] },
    { "code execution on Chat Completions",
      'model M { provider: "openai", name: "gpt-5.4-mini" }', "code",
      [[Agent 'A': code_execution is not available on Chat Completions; use api: "responses".]] },
    { "file search on Anthropic",
      'model M { provider: "anthropic", name: "claude-sonnet-4-5" }', "files",
      "Agent 'A': file_search is not available on Anthropic Messages." },
    { "url_context on Anthropic, which has web_fetch",
      'model M { provider: "anthropic", name: "claude-sonnet-4-5" }', "url",
      [[Agent 'A': url_context is not available on Anthropic Messages; use kind: "web_fetch".]] },
    { "web search on a model of the Responses API that has none",
      'model M { provider: "openai", name: "gpt-4.1-nano", api: "responses" }', "search",
      "Agent 'A': web_search is not available on the Responses API for model 'gpt-4.1-nano' (model M); it runs on gpt-4o, gpt-4.1, gpt-5, o3, o4." },
    { "code execution on a Claude model before 4.5",
      'model M { provider: "anthropic", name: "claude-sonnet-4-20250514" }', "code",
      "Agent 'A': code_execution is not available on Anthropic Messages for model 'claude-sonnet-4-20250514' (model M); it runs on claude-opus-4-5, claude-opus-4-6, claude-opus-4-7, claude-sonnet-4-5, claude-sonnet-4-6, claude-haiku-4-5, claude-opus-5, claude-sonnet-5, claude-haiku-5." },
    { "built-in tools beside function declarations on Gemini 2.x",
      'model M { provider: "gemini", name: "gemini-2.5-flash" }', "plain, add",
      "Agent 'A': Gemini 2.x cannot combine built-in tools (plain) with function declarations (add); use a Gemini 3 model, or give them to two agents." },
    { "an option the entry does not take (Gemini's take none)",
      'model M { provider: "gemini", name: "gemini-3-flash" }', "search",
      "Agent 'A': provider tool 'search' sets max_uses, which web_search on Gemini generateContent does not take." },
    { "file search on a Gemini model before 2.5",
      'model M { provider: "gemini", name: "gemini-2.0-flash" }', "files",
      "Agent 'A': file_search is not available on Gemini generateContent for model 'gemini-2.0-flash' (model M); it runs on gemini-2.5, gemini-3." },
    { "blocked domains on the Responses API (its filters allow only)",
      'model M { provider: "openai", name: "gpt-5.4", api: "responses" }', "blocked",
      "Agent 'A': provider tool 'blocked' sets blocked_domains, which web_search on the Responses API does not take; it takes max_uses, allowed_domains, user_location." },
    { "a model name the table does not know",
      'model M { provider: "anthropic", name: "claude-next" }', "plain",
      "Agent 'A': model 'claude-next' (model M) is not one luma knows to run web_search on Anthropic Messages (claude-opus-4, claude-sonnet-4, claude-haiku-4-5, claude-opus-5, claude-sonnet-5, claude-haiku-5, claude-3-7-sonnet); set allow_unknown_model: true in model M (or use --allow-unknown-models) to send it anyway." },
  }
  local TOOLS = [[
provider_tool search { kind: "web_search", max_uses: 2 }
provider_tool plain { kind: "web_search" }
provider_tool blocked { kind: "web_search", blocked_domains: ["b.com"] }
provider_tool code { kind: "code_execution" }
provider_tool files { kind: "file_search", vector_stores: ["vs_1"] }
provider_tool url { kind: "url_context" }
]]
  for _, c in ipairs(cases) do
    it("refuses " .. c[1], function()
      local source = BASE .. TOOLS .. c[2] .. "\nagent A { model: M\n  tools: [" .. c[3] .. "] }\n"
      local messages, err = h.errors(source)
      assert.are.same({ c[4] }, messages)
      -- at the agent's tools entry: the line after "agent A {", column 11
      local d = err.details.diagnostics[1]
      assert.are.same({ select(2, (BASE .. TOOLS):gsub("\n", "")) + 3, 11 }, { d.line, d.col })
    end)
  end

  it("lets a model name it does not know through with allow_unknown_model", function()
    assert.is_truthy(h.compile(BASE .. 'provider_tool s { kind: "web_search" }\nmodel M { provider: "anthropic", name: "claude-next", allow_unknown_model: true }\nagent A { model: M\n tools: [s] }'))
  end)

  it("lets every unknown model name through with --allow-unknown-models (luma-lua check) or opts.allow_unknown_models", function()
    local src = BASE .. 'provider_tool s { kind: "web_search" }\nmodel M { provider: "anthropic", name: "claude-next" }\nagent A { model: M\n  tools: [s] }\n'
    local path = h.program_file(src)
    local refused = h.run { "check", path }
    local allowed = h.run { "check", path, "--allow-unknown-models" }
    os.remove(path)
    assert.are.equal(1, refused.status)
    assert.matches("(or use --allow-unknown-models)", refused.stderr, 1, true)
    assert.are.same({ 0, "ok\n" }, { allowed.status, allowed.stdout })
    assert.is_truthy(h.compile(src, { allow_unknown_models = true }))
    assert.is_nil(h.compile(src))
  end)

  it("is what `luma-lua check` reports, with file:line:col", function()
    local path = h.program_file(BASE .. 'provider_tool s { kind: "web_search" }\nmodel M { provider: "openai", name: "gpt-5.4-mini" }\nagent A { model: M\n  tools: [add, s] }\n')
    local r = h.run { "check", path }
    os.remove(path)
    assert.are_not.equal(0, r.status)
    assert.matches(path:gsub("%p", "%%%0") .. ":7:16: Agent 'A': web_search is not available on Chat Completions", r.stdout .. r.stderr)
  end)
end)

-- One agent per family, with its provider tools, against the mock.
local SOURCE = BASE .. [[
provider_tool search {
  kind: "web_search"
  %s
}
provider_tool code { kind: "code_execution" }
provider_tool fetch { kind: "web_fetch", max_uses: 2, blocked_domains: ["evil.example"] }
provider_tool docs { kind: "file_search", vector_stores: ["vs_1", "vs_2"], max_uses: 4 }
provider_tool pages { kind: "url_context" }
model M { %s
  base_url: "%s"
  api_key_env: "LUMA_TEST_KEY" }
agent A { model: M
  tools: [%s]
  fn run(x: int) -> Answer { ask "Add {x} and 2" -> Answer }
  fn sources(x: int) {
    before = ask.citations
    a = ask "Add {x} and 2" -> Answer
    return { total: a.total, before: before, citations: ask.citations }
  } }
]]

local function program(server, opts)
  local p = assert(luma.compile(SOURCE:format(opts.search or "", opts.model, server.url .. (opts.path or ""), opts.tools)))
  p:register("add", function(i) return { sum = i.a + i.b } end)
  local events = {}
  p:configure {
    lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end,
    on_event = function(e) events[#events + 1] = e end,
    record = opts.record, replay = opts.replay,
  }
  return p, events
end

local function ask_event(events)
  return find(events, function(e) return e.kind == "ask" end)
end

describe("provider tools on Anthropic Messages", function()
  local server
  setup(function() server = mock.start() end)
  teardown(function() if server then server:stop() end end)
  before_each(function() server:reset() end)

  local MODEL = 'provider: "anthropic", name: "claude-sonnet-4-5"'
  local SEARCH = 'max_uses: 3\n allowed_domains: ["example.com"]\n user_location: { country: "FR", city: "Paris" }'

  local function search_blocks(id, results)
    return { type = "server_tool_use", id = id, name = "web_search", input = { query = "sums" } },
           { type = "web_search_tool_result", tool_use_id = id, content = results or arr {
             { type = "web_search_result", url = "https://example.com/sum", title = "Sums", page_age = "1 day",
               encrypted_content = "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2ISDCmrVQ" } } }
  end

  local function cited(text)
    return { type = "text", text = text, citations = arr { {
      type = "web_search_result_location", url = "https://example.com/sum", title = "Sums",
      encrypted_index = "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm", cited_text = "one and two make three" } } }
  end

  it("sends the versioned entry with its options, and gives the citations to the host", function()
    local use, result = search_blocks("srvtoolu_01")
    server:script { { json = { type = "message", role = "assistant", stop_reason = "end_turn",
      content = { use, result, cited('{"total":3}') },
      usage = { input_tokens = 30, output_tokens = 9, server_tool_use = { web_search_requests = 1 } } } } }
    local p, events = program(server, { model = MODEL, search = SEARCH, tools = "search, add" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local req = server:requests()[1]
    assert.is_nil(req.refused)
    local entry = find(req.json.tools, function(t) return t.name == "web_search" end)
    assert.are.same({ type = "web_search_20250305", name = "web_search", max_uses = 3, allowed_domains = { "example.com" },
                      user_location = { type = "approximate", country = "FR", city = "Paris" } }, entry)
    assert.is_truthy(find(req.json.tools, function(t) return t.name == "add" and t.input_schema end))
    local e = ask_event(events)
    assert.are.same({ web_search = 1 }, e.provider_tools)
    assert.are.same({ { url = "https://example.com/sum", title = "Sums", cited_text = "one and two make three" } }, e.citations)
  end)

  it("echoes a pending server_tool_use beside a client tool unchanged, and answers only the client call", function()
    local use, result = search_blocks("srvtoolu_02")
    local turn1 = { use, result, { type = "text", text = "Adding." },
                    { type = "tool_use", id = "toolu_1", name = "add", input = { a = 1, b = 2 } } }
    server:script {
      { json = { type = "message", role = "assistant", stop_reason = "tool_use", content = turn1 } },
      { json = { type = "message", role = "assistant", stop_reason = "end_turn", content = { { type = "text", text = '{"total":3}' } } } },
    }
    local p, events = program(server, { model = MODEL, search = SEARCH, tools = "search, add" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    assert.are.equal(2, #r)
    assert.is_nil(r[2].refused, r[2].refused and luma.json.encode(r[2].refused))
    local msgs = r[2].json.messages
    assert.are.same(turn1, msgs[2].content)   -- the encrypted content as it came
    local results = msgs[3].content
    assert.are.equal(1, #results)
    assert.are.same({ "tool_result", "toolu_1" }, { results[1].type, results[1].tool_use_id })
    -- the same tools in every request
    assert.are.same(r[1].json.tools, r[2].json.tools)
    assert.are.same({ web_search = 1 }, ask_event(events).provider_tools)
  end)

  it("continues a pause_turn by sending the paused content back as the last message", function()
    local use, result = search_blocks("srvtoolu_03")
    local paused = { { type = "text", text = "Searching." }, use, result }
    server:script {
      { json = { type = "message", role = "assistant", stop_reason = "pause_turn", content = paused } },
      { json = { type = "message", role = "assistant", stop_reason = "end_turn", content = { cited('{"total":3}') } } },
    }
    local p, events = program(server, { model = MODEL, search = SEARCH, tools = "search" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    assert.are.equal(2, #r)
    local msgs = r[2].json.messages
    assert.are.equal(2, #msgs)
    assert.are.same({ role = "assistant", content = paused }, msgs[2])
    assert.are.equal(2, ask_event(events).turns)
  end)

  it("stops continuing pause_turn past pause_turn_max", function()
    local steps = {}
    for i = 1, 7 do
      local use, result = search_blocks("srvtoolu_p" .. i)
      steps[i] = { json = { type = "message", role = "assistant", stop_reason = "pause_turn", content = { use, result } } }
    end
    server:script(steps)
    local p = program(server, { model = MODEL, search = SEARCH, tools = "search" })
    local err = h.raised(function() return p:agent("A"):call("run", { x = 1 }) end)
    assert.are.equal("ASK_TOOL_LIMIT", err.code)
    assert.matches("paused its own tool loop 6 times; luma continues it at most 5 times", err.message, 1, true)
    assert.are.equal(6, #server:requests())
  end)

  it("reuses the code execution container the response names", function()
    local turn1 = {
      { type = "server_tool_use", id = "srvtoolu_c1", name = "bash_code_execution", input = { command = "echo 3" } },
      { type = "bash_code_execution_tool_result", tool_use_id = "srvtoolu_c1",
        content = { type = "bash_code_execution_result", stdout = "3\n", stderr = "", return_code = 0 } },
      { type = "tool_use", id = "toolu_1", name = "add", input = { a = 1, b = 2 } },
    }
    server:script {
      { json = { type = "message", role = "assistant", stop_reason = "tool_use", content = turn1,
                 container = { id = "container_011", expires_at = "2026-12-05T08:00:00Z" } } },
      { json = { type = "message", role = "assistant", stop_reason = "end_turn", content = { { type = "text", text = '{"total":3}' } } } },
    }
    local p, events = program(server, { model = MODEL, tools = "code, add" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    assert.is_nil(r[1].json.container)
    assert.are.same({ type = "code_execution_20250825", name = "code_execution" },
                    find(r[1].json.tools, function(t) return t.name == "code_execution" end))
    assert.are.equal("container_011", r[2].json.container)
    assert.is_nil(r[2].refused)
    assert.are.same({ code_execution = 1 }, ask_event(events).provider_tools)
  end)

  it("keeps a provider tool's error that came with HTTP 200 in the conversation, and counts it", function()
    local failed = { type = "web_search_tool_result", tool_use_id = "srvtoolu_e1",
                     content = { type = "web_search_tool_result_error", error_code = "max_uses_exceeded" } }
    local turn1 = { { type = "server_tool_use", id = "srvtoolu_e1", name = "web_search", input = { query = "x" } }, failed,
                    { type = "tool_use", id = "toolu_1", name = "add", input = { a = 1, b = 2 } } }
    server:script {
      { json = { type = "message", role = "assistant", stop_reason = "tool_use", content = turn1 } },
      { json = { type = "message", role = "assistant", stop_reason = "end_turn", content = { { type = "text", text = '{"total":3}' } } } },
    }
    local p, events = program(server, { model = MODEL, search = SEARCH, tools = "search, add" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    assert.are.same(failed, server:requests()[2].json.messages[2].content[2])
    local e = ask_event(events)
    assert.are.equal(1, e.provider_tool_errors)
    assert.are.same({ web_search = 1 }, e.provider_tools)
  end)

  it("keeps all of it in a recording, and replays it", function()
    local rec = h.tmpname(".jsonl")
    local use, result = search_blocks("srvtoolu_r1")
    server:script { { json = { type = "message", role = "assistant", stop_reason = "end_turn",
      content = { use, result, cited('{"total":3}') } } } }
    local p = program(server, { model = MODEL, search = SEARCH, tools = "search", record = rec })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local q, events = program(server, { model = MODEL, search = SEARCH, tools = "search", replay = rec })
    assert.are.same({ total = 3 }, q:agent("A"):call("run", { x = 1 }))
    os.remove(rec)
    assert.are.equal(1, #server:requests())
    local e = ask_event(events)
    assert.are.same({ web_search = 1 }, e.provider_tools)
    assert.are.equal("one and two make three", e.citations[1].cited_text)
  end)

  it("sends the entry to a model it does not know, with allow_unknown_model, and warns", function()
    server:script { { json = { type = "message", role = "assistant", stop_reason = "end_turn", content = { { type = "text", text = '{"total":3}' } } } } }
    local p, events = program(server, { model = 'provider: "anthropic", name: "claude-next", allow_unknown_model: true', tools = "search" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    assert.are.equal("web_search_20250305", server:requests()[1].json.tools[1].type)
    local w = find(events, function(e) return e.kind == "warning" end)
    assert.are.equal("Agent 'A': model 'claude-next' is not one luma knows to run web_search on Anthropic Messages; sent as web_search_20250305 unchecked (allow_unknown_model).", w and w.message)
  end)

  it("sends web_fetch with citations on, and counts a fetch that failed", function()
    server:script { { json = { type = "message", role = "assistant", stop_reason = "end_turn", content = {
      { type = "server_tool_use", id = "srvtoolu_f1", name = "web_fetch", input = { url = "https://example.com/x" } },
      { type = "web_fetch_tool_result", tool_use_id = "srvtoolu_f1", content = { type = "web_fetch_tool_result_error", error_code = "url_not_accessible" } },
      { type = "text", text = '{"total":3}' } } } } }
    local p, events = program(server, { model = MODEL, tools = "fetch" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local req = server:requests()[1]
    assert.is_nil(req.refused)
    assert.are.same({ type = "web_fetch_20250910", name = "web_fetch", max_uses = 2, blocked_domains = { "evil.example" },
                      citations = { enabled = true } }, req.json.tools[1])
    local e = ask_event(events)
    assert.are.same({ { web_fetch = 1 }, 1 }, { e.provider_tools, e.provider_tool_errors })
  end)

  it("gives the citations on a luma.Ask too", function()
    server:script { { json = { type = "message", role = "assistant", stop_reason = "end_turn",
      content = { cited('{"total":3}') } } } }
    local p = program(server, { model = MODEL, search = SEARCH, tools = "search" })
    local ask = p:start_ask(p:scope("A"), "Add 1 and 2", "Answer")
    ask:wait()
    assert.are.same({ total = 3 }, ask:result())
    assert.are.same({ { url = "https://example.com/sum", title = "Sums", cited_text = "one and two make three" } }, ask:citations())
  end)

  it("gives a method's statements the citations of its last ask as ask.citations, [] before one", function()
    local function script()
      server:script { { json = { type = "message", role = "assistant", stop_reason = "end_turn",
        content = { cited('{"total":3}') } } } }
    end
    local want = { total = 3, before = {},
                   citations = { { url = "https://example.com/sum", title = "Sums", cited_text = "one and two make three" } } }
    script()
    local p = program(server, { model = MODEL, search = SEARCH, tools = "search" })
    local got = p:agent("A"):call("sources", { x = 1 })
    assert.are.same(want, got)
    assert.are.equal(A, getmetatable(got.before))
    -- the answer of the ask itself is unchanged
    script()
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    -- a method started (a future) too
    script()
    local f = p:agent("A"):start("sources", { x = 1 })
    assert.is_true(f:wait(10000))
    assert.are.same(want, f:result())
  end)

  it("refuses ask.citations outside an agent method, and another name after ask.", function()
    assert.are.same({ "ask.citations can only be used inside an agent method." },
                    (h.errors(BASE .. "c = ask.citations\n")))
    local messages = h.errors(BASE .. 'model M { provider: "anthropic", name: "claude-sonnet-4-5" }\n' ..
      'agent A { model: M\n fn run() { return ask.sources } }\n')
    assert.are.same({ "expected 'citations' after 'ask.', found 'sources'" }, messages)
  end)
end)

describe("provider tools on the Responses API", function()
  local server
  setup(function() server = mock.start() end)
  teardown(function() if server then server:stop() end end)
  before_each(function() server:reset() end)

  local MODEL = 'provider: "openai", name: "gpt-5.4", api: "responses"'

  it("sends web_search and code_interpreter entries, echoes their items and reuses the container", function()
    local out1 = {
      { type = "web_search_call", id = "ws_1", status = "completed",
        action = { type = "search", query = "sums", sources = { { type = "url", url = "https://example.com/sum" } } } },
      { type = "code_interpreter_call", id = "ci_1", status = "completed", code = "print(1+2)", container_id = "cntr_9",
        outputs = { { type = "logs", logs = "3" } } },
      { type = "function_call", id = "fc_1", call_id = "call_1", name = "add", arguments = '{"a":1,"b":2}' },
    }
    server:script {
      { json = { status = "completed", output = out1 } },
      { json = { status = "completed", output = { { type = "message", role = "assistant", content = { {
        type = "output_text", text = '{"total":3}',
        annotations = { { type = "url_citation", url = "https://example.com/sum", title = "Sums", start_index = 2, end_index = 7 } } } } } } } },
    }
    local p, events = program(server, { model = MODEL, path = "/v1", search = 'allowed_domains: ["example.com"]\n user_location: { country: "FR" }',
                                        tools = "search, code, add" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    assert.are.equal(2, #r)
    for i = 1, 2 do assert.is_nil(r[i].refused, r[i].refused and luma.json.encode(r[i].refused)) end
    local t1 = r[1].json.tools
    assert.are.same({ type = "web_search", filters = { allowed_domains = { "example.com" } },
                      user_location = { type = "approximate", country = "FR" } },
                    find(t1, function(t) return t.type == "web_search" end))
    assert.are.same({ type = "code_interpreter", container = { type = "auto" } }, find(t1, function(t) return t.type == "code_interpreter" end))
    assert.are.same({ "reasoning.encrypted_content", "web_search_call.action.sources", "code_interpreter_call.outputs" }, r[1].json.include)
    -- every output item back in order, then one output for the function call only
    local input = r[2].json.input
    assert.are.same(out1, { input[2], input[3], input[4] })
    assert.are.same({ "function_call_output", "call_1" }, { input[5].type, input[5].call_id })
    assert.is_nil(input[6])
    assert.are.equal("cntr_9", find(r[2].json.tools, function(t) return t.type == "code_interpreter" end).container)
    local e = ask_event(events)
    assert.are.same({ web_search = 1, code_execution = 1 }, e.provider_tools)
    assert.are.same({ { url = "https://example.com/sum", title = "Sums", cited_text = "total" } }, e.citations)
  end)

  it("sends file_search with its vector stores, and max_tool_calls from max_uses", function()
    server:script { { json = { status = "completed", output = {
      { type = "file_search_call", id = "fs_1", status = "completed", queries = { "sums" } },
      { type = "message", role = "assistant", content = { { type = "output_text", text = '{"total":3}' } } } } } } }
    local p, events = program(server, { model = MODEL, path = "/v1", tools = "docs, add" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local req = server:requests()[1]
    assert.is_nil(req.refused)
    assert.are.same({ type = "file_search", vector_store_ids = { "vs_1", "vs_2" } }, find(req.json.tools, function(t) return t.type == "file_search" end))
    assert.are.equal(4, req.json.max_tool_calls)
    assert.are.same({ "reasoning.encrypted_content", "file_search_call.results" }, req.json.include)
    assert.are.same({ file_search = 1 }, ask_event(events).provider_tools)
  end)

  it("counts a failed built-in call", function()
    server:script { { json = { status = "completed", output = {
      { type = "web_search_call", id = "ws_1", status = "failed", action = { type = "search", query = "x" } },
      { type = "message", role = "assistant", content = { { type = "output_text", text = '{"total":3}' } } } } } } }
    local p, events = program(server, { model = MODEL, path = "/v1", tools = "search" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    assert.are.equal(1, ask_event(events).provider_tool_errors)
  end)
end)

describe("provider tools on Chat Completions (search models)", function()
  local server
  setup(function() server = mock.start() end)
  teardown(function() if server then server:stop() end end)
  before_each(function() server:reset() end)

  it("sends web_search_options with the location, and reads the url_citation annotations", function()
    server:script { { json = { choices = { { index = 0, finish_reason = "stop", message = { role = "assistant", content = '{"total":3}',
      annotations = { { type = "url_citation", url_citation = { url = "https://example.com/sum", title = "Sums", start_index = 0, end_index = 11 } } } } } } } } }
    local p, events = program(server, { model = 'provider: "openai", name: "gpt-5-search-api"', path = "/v1",
                                        search = 'user_location: { country: "FR", city: "Paris" }', tools = "search" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local req = server:requests()[1]
    assert.is_nil(req.refused)
    assert.are.same({ user_location = { type = "approximate", approximate = { country = "FR", city = "Paris" } } }, req.json.web_search_options)
    assert.is_nil(req.json.tools)
    assert.are.same({ { url = "https://example.com/sum", title = "Sums", cited_text = '{"total":3}' } }, ask_event(events).citations)
  end)
end)

describe("provider tools on Gemini", function()
  local server
  setup(function() server = mock.start() end)
  teardown(function() if server then server:stop() end end)
  before_each(function() server:reset() end)

  it("combines google_search with functions on Gemini 3, echoes toolCall parts and answers only the functionCall", function()
    local parts1 = {
      { toolCall = { id = "tc_1", toolType = "GOOGLE_SEARCH_WEB", args = { queries = { "sums" } } }, thoughtSignature = "sig-a" },
      { toolResponse = { id = "tc_1", toolType = "GOOGLE_SEARCH_WEB", response = { search_suggestions = "..." } }, thoughtSignature = "sig-b" },
      { functionCall = { name = "add", args = { a = 1, b = 2 }, id = "fc_1" }, thoughtSignature = "sig-c" },
    }
    server:script {
      { json = { candidates = { { content = { role = "model", parts = parts1 }, finishReason = "STOP" } } } },
      { json = { candidates = { { content = { role = "model", parts = { { text = '{"total":3}' } } }, finishReason = "STOP",
        groundingMetadata = {
          groundingChunks = { { web = { uri = "https://example.com/sum", title = "example.com" } } },
          groundingSupports = { { segment = { startIndex = 0, endIndex = 11, text = '{"total":3}' }, groundingChunkIndices = { 0 } } } } } } } },
    }
    local p, events = program(server, { model = 'provider: "gemini", name: "gemini-3-flash"', tools = "search, add" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    for i = 1, 2 do assert.is_nil(r[i].refused, r[i].refused and luma.json.encode(r[i].refused)) end
    assert.are.same({ true, true }, { r[1].json.tools[2].google_search ~= nil, r[1].json.tools[1].functionDeclarations ~= nil })
    assert.is_true(r[1].json.toolConfig.includeServerSideToolInvocations)
    local contents = r[2].json.contents
    assert.are.same(parts1, contents[2].parts)
    assert.are.equal(1, #contents[3].parts)
    assert.are.equal("add", contents[3].parts[1].functionResponse.name)
    local e = ask_event(events)
    assert.are.same({ web_search = 1 }, e.provider_tools)
    assert.are.same({ { url = "https://example.com/sum", title = "example.com", cited_text = '{"total":3}' } }, e.citations)
  end)

  it("sends url_context, and counts the URLs it could not retrieve", function()
    server:script { { json = { candidates = { { content = { role = "model", parts = { { text = '{"total":3}' } } }, finishReason = "STOP",
      urlContextMetadata = { urlMetadata = {
        { retrievedUrl = "https://example.com/a", urlRetrievalStatus = "URL_RETRIEVAL_STATUS_SUCCESS" },
        { retrievedUrl = "https://example.com/b", urlRetrievalStatus = "URL_RETRIEVAL_STATUS_ERROR" } } } } } } } }
    local p, events = program(server, { model = 'provider: "gemini", name: "gemini-2.5-flash"', tools = "pages" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local req = server:requests()[1]
    assert.is_nil(req.refused)
    assert.are.same({ { url_context = {} } }, req.json.tools)
    assert.is_nil(req.json.toolConfig)
    local e = ask_event(events)
    assert.are.same({ { url_context = 2 }, 1 }, { e.provider_tools, e.provider_tool_errors })
  end)

  it("sends file_search with its stores, and reads the documents it retrieved as citations", function()
    server:script { { json = { candidates = { { content = { role = "model", parts = { { text = '{"total":3}' } } }, finishReason = "STOP",
      groundingMetadata = {
        groundingChunks = {
          { retrievedContext = { title = "sums.pdf", text = "1 + 2 = 3", fileSearchStore = "fileSearchStores/maths-1" } },
          { retrievedContext = { uri = "https://example.com/tables", title = "tables.md", text = "3" } } },
        groundingSupports = { { segment = { startIndex = 0, endIndex = 11, text = '{"total":3}' }, groundingChunkIndices = { 0, 1 } } } } } } } } }
    local source = SOURCE:format("", 'provider: "gemini", name: "gemini-2.5-flash"', server.url, "docs")
      :gsub('vector_stores: %["vs_1", "vs_2"%], max_uses: 4', 'vector_stores: ["fileSearchStores/maths-1", "fileSearchStores/tables-2"]')
    local p = assert(luma.compile(source))
    p:register("add", function(i) return { sum = i.a + i.b } end)
    local events = {}
    p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end,
                  on_event = function(e) events[#events + 1] = e end }
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local req = server:requests()[1]
    assert.is_nil(req.refused, req.refused and luma.json.encode(req.refused))
    assert.are.same({ { file_search = { file_search_store_names = { "fileSearchStores/maths-1", "fileSearchStores/tables-2" } } } },
      req.json.tools)
    local e = ask_event(events)
    assert.are.same({ file_search = 1 }, e.provider_tools)
    assert.are.same({ { url = "fileSearchStores/maths-1", title = "sums.pdf", cited_text = '{"total":3}' },
      { url = "https://example.com/tables", title = "tables.md", cited_text = '{"total":3}' } }, e.citations)
  end)

  it("counts code execution parts, and a failed outcome as an error", function()
    server:script { { json = { candidates = { { content = { role = "model", parts = {
      { executableCode = { language = "PYTHON", code = "print(1/0)" } },
      { codeExecutionResult = { outcome = "OUTCOME_FAILED", output = "ZeroDivisionError" } },
      { text = '{"total":3}' } } }, finishReason = "STOP" } } } } }
    local p, events = program(server, { model = 'provider: "gemini", name: "gemini-2.5-flash"', tools = "code" })
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local req = server:requests()[1]
    assert.is_nil(req.refused)
    assert.are.same({ { code_execution = {} } }, req.json.tools)
    local e = ask_event(events)
    assert.are.same({ code_execution = 1 }, e.provider_tools)
    assert.are.equal(1, e.provider_tool_errors)
  end)
end)

-- A host that listens (on_event) makes the ask stream: the response the
-- stream is assembled into must carry all that the whole response carries,
-- for the next request's echo, the citations and the counts.
describe("provider tools streamed and not streamed", function()
  local server
  setup(function() server = mock.start() end)
  teardown(function() if server then server:stop() end end)
  before_each(function() server:reset() end)

  -- The same script run not streamed (agent:call, and agent:ask with on_event
  -- and stream: false) and streamed (agent:ask with on_event): the runs'
  -- answers, requests, ask events and events must agree.
  local function provider_events(events)
    local out = {}
    for _, e in ipairs(events) do if e.type == "provider_tool" then out[#out + 1] = e end end
    return out
  end

  local function both(opts, steps)
    local runs = {}
    for _, mode in ipairs { "call", "whole", "streamed" } do
      server:reset()
      server:script(luma.json.decode(luma.json.encode(steps)))
      local o = setmetatable({ model = opts.model .. (mode == "whole" and "\n stream: false" or "") }, { __index = opts })
      local p, telemetry = program(server, o)
      local events, answer = {}, nil
      if mode == "call" then
        answer = p:agent("A"):call("run", { x = 1 })
      else
        answer = p:agent("A"):ask("Add 1 and 2", "Answer", { on_event = function(e) events[#events + 1] = e end })
      end
      local reqs = server:requests()
      for i, r in ipairs(reqs) do assert.is_nil(r.refused, i .. ": " .. (r.refused and luma.json.encode(r.refused) or "")) end
      runs[mode] = { answer = answer, reqs = reqs, ask = ask_event(telemetry), events = events }
    end
    local whole, streamed = runs.call, runs.streamed
    local function asked(r) return r.json.stream == true or r.path:match(":streamGenerateContent$") ~= nil end
    assert.is_true(asked(streamed.reqs[1]), "the listening ask streamed")
    assert.is_false(asked(whole.reqs[1]))
    assert.is_false(asked(runs.whole.reqs[1]), "stream: false")
    for _, run in ipairs { runs.whole, streamed } do
      assert.are.same(whole.answer, run.answer)
      assert.are.equal(#whole.reqs, #run.reqs)
      for _, k in ipairs { "provider_tools", "provider_tool_errors", "citations", "turns" } do
        assert.are.same(whole.ask[k], run.ask[k], k)
      end
    end
    -- a provider_tool event per provider-run call, streamed or not
    streamed.ptools = provider_events(streamed.events)
    -- in its turn, before its usage and turn_end; not streamed, after its calls
    for _, run in ipairs { runs.whole, streamed } do
      local last = {}
      for i, e in ipairs(run.events) do last[e.type .. (e.turn or "")] = i end
      for _, e in ipairs(provider_events(run.events)) do
        local at = last["provider_tool" .. e.turn]
        assert.is_true(at < last["turn_end" .. e.turn] and at < (last["usage" .. e.turn] or math.huge))
        if run ~= streamed then assert.is_true(at > (last["tool_call" .. e.turn] or 0)) end
      end
    end
    assert.are.same(provider_events(runs.whole.events), streamed.ptools)
    return whole, streamed
  end

  -- The conversation a request carries (its messages, input or contents).
  local function conversation(req)
    return req.json.messages or req.json.input or req.json.contents
  end

  it("on Anthropic: citations_delta, server_tool_use and its result, the container, a search error", function()
    local turn1 = {
      { type = "server_tool_use", id = "srvtoolu_s1", name = "web_search", input = { query = "sums" } },
      { type = "web_search_tool_result", tool_use_id = "srvtoolu_s1", content = arr {
        { type = "web_search_result", url = "https://example.com/sum", title = "Sums", page_age = "1 day",
          encrypted_content = "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2ISDCmrVQ" } } },
      { type = "server_tool_use", id = "srvtoolu_s2", name = "web_search", input = { query = "more sums" } },
      { type = "web_search_tool_result", tool_use_id = "srvtoolu_s2",
        content = { type = "web_search_tool_result_error", error_code = "max_uses_exceeded" } },
      { type = "server_tool_use", id = "srvtoolu_c1", name = "bash_code_execution", input = { command = "echo 3" } },
      { type = "bash_code_execution_tool_result", tool_use_id = "srvtoolu_c1",
        content = { type = "bash_code_execution_result", stdout = "3\n", stderr = "", return_code = 0 } },
      { type = "text", text = "One and two make three.", citations = arr { {
        type = "web_search_result_location", url = "https://example.com/sum", title = "Sums",
        encrypted_index = "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm", cited_text = "one and two make three" } } },
      { type = "tool_use", id = "toolu_1", name = "add", input = { a = 1, b = 2 } },
    }
    local whole, streamed = both({ model = 'provider: "anthropic", name: "claude-sonnet-4-5"', tools = "search, code, add" }, {
      { json = { id = "msg_1", type = "message", role = "assistant", stop_reason = "tool_use", content = turn1,
                 container = { id = "container_s1", expires_at = "2026-12-05T08:00:00Z" },
                 usage = { input_tokens = 30, output_tokens = 9, server_tool_use = { web_search_requests = 2 } } } },
      { json = { id = "msg_2", type = "message", role = "assistant", stop_reason = "end_turn",
                 content = { { type = "text", text = '{"total":3}' } }, usage = { input_tokens = 40, output_tokens = 5 } } },
    })
    assert.are.same(turn1, conversation(whole.reqs[2])[2].content)
    assert.are.same(turn1, conversation(streamed.reqs[2])[2].content)
    assert.are.same({ "container_s1", "container_s1" }, { whole.reqs[2].json.container, streamed.reqs[2].json.container })
    assert.are.same({ { url = "https://example.com/sum", title = "Sums", cited_text = "one and two make three" } },
                    streamed.ask.citations)
    assert.are.same({ web_search = 2, code_execution = 1 }, streamed.ask.provider_tools)
    assert.are.equal(1, streamed.ask.provider_tool_errors)
    assert.are.same({
      { type = "provider_tool", turn = 1, id = "srvtoolu_s1", name = "web_search", status = "completed" },
      { type = "provider_tool", turn = 1, id = "srvtoolu_s2", name = "web_search", status = "failed",
        error = { code = "max_uses_exceeded", message = "The provider's web_search failed: max_uses_exceeded." } },
      { type = "provider_tool", turn = 1, id = "srvtoolu_c1", name = "code_execution", status = "completed" },
    }, streamed.ptools)
    -- streamed, each as its result block came: before the text after it and the client call
    local order = {}
    for _, e in ipairs(streamed.events) do
      if e.turn == 1 and (e.type == "provider_tool" or e.type == "tool_call_start" or
                          (e.type == "text_delta" and #order > 0 and order[#order] ~= "text")) then
        order[#order + 1] = e.type == "text_delta" and "text" or e.type == "provider_tool" and e.id or e.type
      end
    end
    assert.are.same({ "srvtoolu_s1", "srvtoolu_s2", "srvtoolu_c1", "text", "tool_call_start" }, order)
  end)

  it("on the Responses API: web_search_call and code_interpreter_call items, url_citation annotations", function()
    local out1 = {
      { type = "web_search_call", id = "ws_1", status = "completed",
        action = { type = "search", query = "sums", sources = { { type = "url", url = "https://example.com/sum" } } } },
      { type = "web_search_call", id = "ws_2", status = "failed", action = { type = "search", query = "more" } },
      { type = "code_interpreter_call", id = "ci_1", status = "completed", code = "print(1+2)", container_id = "cntr_9",
        outputs = { { type = "logs", logs = "3" } } },
      { type = "message", id = "msg_1", role = "assistant", status = "completed", content = { {
        type = "output_text", text = "Adding 1 and 2.",
        annotations = { { type = "url_citation", url = "https://example.com/sum", title = "Sums", start_index = 0, end_index = 6 } } } } },
      { type = "function_call", id = "fc_1", call_id = "call_1", name = "add", arguments = '{"a":1,"b":2}' },
    }
    local whole, streamed = both({ model = 'provider: "openai", name: "gpt-5.4", api: "responses"', path = "/v1",
                                   tools = "search, code, add" }, {
      { json = { id = "resp_1", status = "completed", output = out1, usage = { input_tokens = 3, output_tokens = 2 } } },
      { json = { id = "resp_2", status = "completed", output = { { type = "message", id = "msg_2", role = "assistant",
        content = { { type = "output_text", text = '{"total":3}', annotations = arr {} } } } } } },
    })
    local function echoed(req) local c = conversation(req) return { c[2], c[3], c[4], c[5], c[6] } end
    assert.are.same(out1, echoed(whole.reqs[2]))
    assert.are.same(out1, echoed(streamed.reqs[2]))
    assert.are.equal("cntr_9", find(streamed.reqs[2].json.tools, function(t) return t.type == "code_interpreter" end).container)
    assert.are.same({ { url = "https://example.com/sum", title = "Sums", cited_text = "Adding" } }, streamed.ask.citations)
    assert.are.same({ web_search = 2, code_execution = 1 }, streamed.ask.provider_tools)
    assert.are.equal(1, streamed.ask.provider_tool_errors)
    assert.are.same({
      { type = "provider_tool", turn = 1, id = "ws_1", name = "web_search", status = "completed" },
      { type = "provider_tool", turn = 1, id = "ws_2", name = "web_search", status = "failed",
        error = { code = "failed", message = "The provider's web_search call failed." } },
      { type = "provider_tool", turn = 1, id = "ci_1", name = "code_execution", status = "completed" },
    }, streamed.ptools)
    -- streamed, each as its item is done: before the message's text and the function call
    local first = {}
    for i, e in ipairs(streamed.events) do first[e.type] = first[e.type] or i end
    assert.is_true(first.provider_tool < first.text_delta and first.provider_tool < first.tool_call_start)
  end)

  it("on Chat Completions: a search model's annotations", function()
    local _, streamed = both({ model = 'provider: "openai", name: "gpt-5-search-api"', path = "/v1", tools = "search" }, {
      { json = { choices = { { index = 0, finish_reason = "stop", message = { role = "assistant", content = '{"total":3}',
        annotations = { { type = "url_citation", url_citation = { url = "https://example.com/sum", title = "Sums",
                                                                   start_index = 0, end_index = 11 } } } } } } } },
    })
    assert.are.same({ { url = "https://example.com/sum", title = "Sums", cited_text = '{"total":3}' } }, streamed.ask.citations)
    assert.are.same({}, streamed.ptools)   -- a search model's calls are not seen
  end)

  it("on Gemini: groundingMetadata and urlContextMetadata, and toolCall parts echoed", function()
    local parts1 = {
      { toolCall = { id = "tc_1", toolType = "GOOGLE_SEARCH_WEB", args = { queries = { "sums" } } }, thoughtSignature = "sig-a" },
      { toolResponse = { id = "tc_1", toolType = "GOOGLE_SEARCH_WEB", response = { search_suggestions = "..." } }, thoughtSignature = "sig-b" },
      { functionCall = { name = "add", args = { a = 1, b = 2 }, id = "fc_1" }, thoughtSignature = "sig-c" },
    }
    local whole, streamed = both({ model = 'provider: "gemini", name: "gemini-3-flash"', tools = "search, pages, add" }, {
      { json = { candidates = { { content = { role = "model", parts = parts1 }, finishReason = "STOP" } } } },
      { json = { candidates = { { content = { role = "model", parts = { { text = '{"total":3}' } } }, finishReason = "STOP",
        groundingMetadata = {
          groundingChunks = { { web = { uri = "https://example.com/sum", title = "example.com" } } },
          groundingSupports = { { segment = { startIndex = 0, endIndex = 11, text = '{"total":3}' }, groundingChunkIndices = { 0 } } } },
        urlContextMetadata = { urlMetadata = {
          { retrievedUrl = "https://example.com/b", urlRetrievalStatus = "URL_RETRIEVAL_STATUS_ERROR" } } } } } } },
    })
    assert.are.same(parts1, conversation(whole.reqs[2])[2].parts)
    assert.are.same(parts1, conversation(streamed.reqs[2])[2].parts)
    assert.are.same({ { url = "https://example.com/sum", title = "example.com", cited_text = '{"total":3}' } }, streamed.ask.citations)
    assert.are.same({ web_search = 1, url_context = 1 }, streamed.ask.provider_tools)
    assert.are.equal(1, streamed.ask.provider_tool_errors)
    assert.are.same({
      { type = "provider_tool", turn = 1, id = "tc_1", name = "web_search", status = "completed" },
      { type = "provider_tool", turn = 2, id = "provider_tool_2_1", name = "url_context", status = "failed",
        error = { code = "URL_RETRIEVAL_STATUS_ERROR",
                  message = "https://example.com/b could not be retrieved (URL_RETRIEVAL_STATUS_ERROR)." } },
    }, streamed.ptools)
  end)
end)

describe("the mock provider refuses what the providers refuse in provider-tool requests", function()
  local server
  setup(function() server = mock.start() end)
  teardown(function() if server then server:stop() end end)
  before_each(function() server:reset() end)

  local http = require "socket.http"
  local ltn12 = require "ltn12"
  local function post(path, body)
    local out = {}
    local text = luma.json.encode(body)
    local _, status = http.request { url = server.url .. path, method = "POST", source = ltn12.source.string(text),
      headers = { ["content-type"] = "application/json", ["content-length"] = #text, ["anthropic-version"] = "2023-06-01" },
      sink = ltn12.sink.table(out) }
    return status, table.concat(out)
  end
  local user = { { role = "user", content = "hi" } }
  local cases = {
    { "Anthropic: allowed and blocked domains together", "/v1/messages",
      { model = "claude-sonnet-4-5", max_tokens = 10, messages = user,
        tools = { { type = "web_search_20250305", name = "web_search", allowed_domains = { "a" }, blocked_domains = { "b" } } } },
      "Cannot specify both" },
    { "Anthropic: a tool_result for a server tool's call", "/v1/messages",
      { model = "claude-sonnet-4-5", max_tokens = 10, messages = { user[1],
        { role = "assistant", content = { { type = "server_tool_use", id = "srvtoolu_1", name = "web_search", input = {} } } },
        { role = "user", content = { { type = "tool_result", tool_use_id = "srvtoolu_1", content = "x" } } } } },
      "server tool use" },
    { "Responses: web search on gpt-4.1-nano", "/v1/responses",
      { model = "gpt-4.1-nano", input = "hi", tools = { { type = "web_search" } } }, "not supported with gpt-4.1-nano" },
    { "Responses: a function_call_output without its function_call", "/v1/responses",
      { model = "gpt-5.4", input = { { role = "user", content = "hi" }, { type = "web_search_call", id = "ws_1", status = "completed" },
        { type = "function_call_output", call_id = "ws_1", output = "x" } } }, "No tool call found" },
    { "Gemini 2.x: a built-in tool beside functions", "/v1beta/models/gemini-2.5-flash:generateContent",
      { contents = { { role = "user", parts = { { text = "hi" } } } },
        tools = { { functionDeclarations = { { name = "f" } } }, { google_search = {} } } }, "function calling is unsupported" },
    { "Gemini 3: a built-in tool beside functions without includeServerSideToolInvocations", "/v1beta/models/gemini-3-flash:generateContent",
      { contents = { { role = "user", parts = { { text = "hi" } } } },
        tools = { { functionDeclarations = { { name = "f" } } }, { google_search = {} } } }, "include_server_side_tool_invocations" },
    { "Gemini: file_search without its store names", "/v1beta/models/gemini-2.5-flash:generateContent",
      { contents = { { role = "user", parts = { { text = "hi" } } } }, tools = { { file_search = {} } } },
      "file search store name" },
    { "Chat: web_search_options on a model that does not search", "/v1/chat/completions",
      { model = "gpt-5.4-mini", messages = user, web_search_options = {} }, "search models" },
  }
  for _, c in ipairs(cases) do
    it(c[1], function()
      local status, body = post(c[2], c[3])
      assert.are.equal(400, status)
      assert.matches(c[4], body, 1, true)
    end)
  end
end)

-- Lazy tools: withheld until found, by the wire's own search or by the
-- synthetic discovery tool.
local LAZY = BASE .. [[
tool mul(a: int, b: int) -> Sum { description: "multiplies two integers" }
tool sub(a: int, b: int) -> Sum { description: "subtracts b from a" }
model M { %s
  base_url: "%s"
  api_key_env: "LUMA_TEST_KEY" }
agent A { model: M
  tools: [add, mul, sub]
  lazy_tools: [mul, sub]
  %s
  fn run(x: int) -> Answer { ask "Multiply {x} by 3" -> Answer } }
]]

local function lazy_program(server, model, path, extra)
  local p = assert(luma.compile(LAZY:format(model, server.url .. (path or ""), extra or "")))
  p:register("add", function(i) return { sum = i.a + i.b } end)
  p:register("mul", function(i) return { sum = i.a * i.b } end)
  p:register("sub", function(i) return { sum = i.a - i.b } end)
  local events = {}
  p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end,
                on_event = function(e) events[#events + 1] = e end }
  return p, events
end

local function names(tools, get)
  local out = {}
  for _, t in ipairs(tools or {}) do out[#out + 1] = get(t) end
  table.sort(out)
  return out
end

describe("lazy tools", function()
  local server
  setup(function() server = mock.start() end)
  teardown(function() if server then server:stop() end end)
  before_each(function() server:reset() end)

  it("are found with the synthetic tool where the wire has no search; an undiscovered call gets an error the model can act on", function()
    server:script {
      mock.chat(nil, { { "c1", "mul", '{"a":1,"b":3}' } }),
      mock.chat(nil, { { "c2", "__discover_tools", '{"names":["mul","nope"],"query":null}' } }),
      mock.chat(nil, { { "c3", "mul", '{"a":1,"b":3}' } }),
      mock.chat('{"total":3}'),
    }
    local p = lazy_program(server, 'provider: "openai", name: "gpt-5.4-mini"', "/v1")
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    assert.are.equal(4, #r)
    for i = 1, 4 do assert.is_nil(r[i].refused, r[i].refused and luma.json.encode(r[i].refused)) end
    local fname = function(t) return t["function"].name end
    assert.are.same({ "__discover_tools", "add" }, names(r[1].json.tools, fname))
    assert.matches("Tools you can load: mul, sub.", find(r[1].json.tools, function(t) return fname(t) == "__discover_tools" end)["function"].description, 1, true)
    -- the undiscovered call's result
    local function result(req, id)
      local m = find(req.json.messages, function(x) return x.role == "tool" and x.tool_call_id == id end)
      return luma.json.decode(m.content)
    end
    assert.are.same({ error = { code = "TOOL_NOT_FOUND", retryable = false,
      message = 'Tool \'mul\' is not loaded yet: call __discover_tools with {"names": ["mul"]} first, then call it.' } }, result(r[2], "c1"))
    assert.are.same({ "__discover_tools", "add" }, names(r[2].json.tools, fname))
    local found = result(r[3], "c2")
    assert.are.equal("mul", found.tools[1].name)
    assert.are.equal("multiplies two integers", found.tools[1].description)
    assert.are.same({ "a", "b" }, found.tools[1].input_schema.required)
    assert.are.same({ "'nope' is not a tool of agent 'A'." }, found.errors)
    assert.are.same({ "__discover_tools", "add", "mul" }, names(r[3].json.tools, fname))
    assert.are.same({ sum = 3 }, result(r[4], "c3"))
  end)

  it("show the discovery call like any other: its input checked against its schema, its telemetry and its events", function()
    server:script {
      mock.chat(nil, { { "c1", "__discover_tools", '{"nams":["mul"],"names":["mul",3]}' } }),
      mock.chat(nil, { { "c2", "__discover_tools", '{"names":["mul"]}' } }),
      mock.chat(nil, { { "c3", "mul", '{"a":1,"b":3}' } }),
      mock.chat('{"total":3}'),
    }
    local rec = h.tmpname(".jsonl")
    local p, telemetry = lazy_program(server, 'provider: "openai", name: "gpt-5.4-mini"', "/v1")
    p:configure { record = rec }
    local events = {}
    local f = p:agent("A"):start("run", { x = 1 }, { on_event = function(ev) events[#events + 1] = ev end })
    assert.is_true(f:wait(10000))
    assert.are.same({ total = 3 }, f:result())
    local r = server:requests()
    -- the invalid input: the validator's error, every violation, which the model acts on
    local m = find(r[2].json.messages, function(x) return x.role == "tool" and x.tool_call_id == "c1" end)
    local e = luma.json.decode(m.content).error
    assert.are.same({ "TOOL_INPUT_INVALID", "__discover_tools.input.names[2] must be a string", false },
      { e.code, e.message, e.retryable })
    local paths = {}
    for _, v in ipairs(e.details.violations) do paths[#paths + 1] = v.path .. " " .. v.rule end
    table.sort(paths)
    assert.are.same({ "__discover_tools.input.names[2] type", "__discover_tools.input.nams additionalProperties" }, paths)
    -- nothing was found by it; the next one found mul
    local fname = function(t) return t["function"].name end
    assert.are.same({ "__discover_tools", "add" }, names(r[2].json.tools, fname))
    assert.are.same({ "__discover_tools", "add", "mul" }, names(r[3].json.tools, fname))
    -- telemetry: one event per call, the discovery calls among them; the
    -- pipeline's (an input refused at STEP_INPUT made no attempt)
    local calls = {}
    for _, ev in ipairs(telemetry) do
      if ev.tool then calls[#calls + 1] = { ev.tool, ev.status, ev.code ~= luma.null and ev.code or nil, ev.agent, ev.attempts } end
    end
    assert.are.same({ { "__discover_tools", "error", "TOOL_INPUT_INVALID", "A", 0 }, { "__discover_tools", "ok", nil, "A", 1 },
      { "mul", "ok", nil, "A", 1 } }, calls)
    -- the host's events: each discovery call and its result
    local seen = {}
    for _, ev in ipairs(events) do
      if ev.type == "tool_call" or ev.type == "tool_result" then
        seen[#seen + 1] = ev.type .. " " .. ev.id .. " " .. ev.name .. (ev.type == "tool_result" and (ev.ok and " ok" or " error") or "")
      end
    end
    assert.are.same({ "tool_call c1 __discover_tools", "tool_result c1 __discover_tools error",
      "tool_call c2 __discover_tools", "tool_result c2 __discover_tools ok",
      "tool_call c3 mul", "tool_result c3 mul ok" }, seen)
    -- replayed from its recording: the same requests (the replay refuses one
    -- that differs), the same answer, the same discovery calls
    local q, replayed = lazy_program(server, 'provider: "openai", name: "gpt-5.4-mini"', "/v1")
    q:configure { replay = rec }
    assert.are.same({ total = 3 }, q:agent("A"):call("run", { x = 1 }))
    os.remove(rec)
    assert.are.equal(4, #server:requests())
    local again = {}
    for _, ev in ipairs(replayed) do if ev.tool then again[#again + 1] = ev.tool .. " " .. ev.status end end
    assert.are.same({ "__discover_tools error", "__discover_tools ok", "mul ok" }, again)
  end)

  it("run the discovery call through the pipeline: the breaker counts its failure, its telemetry says builtin", function()
    server:script {
      mock.chat(nil, { { "c1", "__discover_tools", '{"nams":["mul"]}' } }),
      mock.chat(nil, { { "c2", "__discover_tools", '{"names":["mul"]}' } }),
      mock.chat('{"total":3}'),
    }
    local p, telemetry = lazy_program(server, 'provider: "openai", name: "gpt-5.4-mini"', "/v1", "tool_failure_limit: 1")
    local agent = p:agent("A")
    local ok, err = pcall(agent.call, agent, "run", { x = 1 })
    -- STEP_INPUT refused it, and the agent's one allowed failure opened the
    -- breaker (STEP_RECORD), which ends the ask as for any of its tools
    assert.is_false(ok)
    assert.are.equal("TOOL_CIRCUIT_OPEN", err.code, tostring(err))
    assert.matches("opened after 1 failed tool calls: __discover_tools.input.nams is not allowed", err.message, 1, true)
    assert.are.equal(1, #server:requests())
    local calls = {}
    for _, ev in ipairs(telemetry) do
      if ev.tool then calls[#calls + 1] = { ev.tool, ev.code, ev.attempts, ev.builtin, ev.cache_hit, ev.ask ~= nil } end
    end
    assert.are.same({ { "__discover_tools", "TOOL_CIRCUIT_OPEN", 0, true, false, true } }, calls)
  end)

  it("do not start a lazy tool not found yet while its turn streams", function()
    server:script {
      mock.chat(nil, { { "c1", "mul", '{"a":1,"b":3}' } }),
      mock.chat('{"total":3}'),
    }
    local p = assert(luma.compile(LAZY:format('provider: "openai", name: "gpt-5.4-mini"', server.url .. "/v1", "")))
    local ran = 0
    p:register("add", function(i) return { sum = i.a + i.b } end)
    p:register("mul", function(i) ran = ran + 1 return { sum = i.a * i.b } end)
    p:register("sub", function(i) return { sum = i.a - i.b } end)
    p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end }
    local f = p:agent("A"):start("run", { x = 1 }, { on_event = function() end })
    assert.is_true(f:wait(10000))
    assert.are.same({ total = 3 }, f:result())
    local r = server:requests()
    assert.is_true(r[1].json.stream)   -- the turn streamed: its calls could start before its end
    assert.are.equal(0, ran)
    local m = find(r[2].json.messages, function(x) return x.role == "tool" and x.tool_call_id == "c1" end)
    assert.matches("Tool 'mul' is not loaded yet", luma.json.decode(m.content).error.message, 1, true)
  end)

  it("keep the discovery tool hidden: not in tools(), the tools command, an MCP listing or the handlers' types", function()
    local source = LAZY:format('provider: "openai", name: "gpt-5.4-mini"', server.url .. "/v1", "")
    local p = assert(luma.compile(source))
    local listed = {}
    for _, t in ipairs(p:tools()) do listed[#listed + 1] = t.name end
    table.sort(listed)
    assert.are.same({ "add", "mul", "sub" }, listed)
    assert.is_nil(p:declaration("__discover_tools"))
    -- a call from outside an ask: no tool of that name, as for any other
    local ok, err = pcall(p.call, p, "__discover_tools", { names = { "mul" } })
    assert.is_false(ok)
    assert.are.same({ "TOOL_NOT_FOUND", "Unknown tool '__discover_tools'." }, { err.code, err.message })
    local dir = h.project {
      ["flow.luma"] = source,
      ["tools.lua"] = [[return { add = function(i) return { sum = i.a + i.b } end,
        mul = function(i) return { sum = i.a * i.b } end, sub = function(i) return { sum = i.a - i.b } end }]],
      ["luma.config.json"] = '{ "tool_modules": ["./tools.lua"] }',
    }
    local r = h.run({ "check", dir .. "/flow.luma" }, { cwd = dir })
    assert.are.same({ 0, "ok\n" }, { r.status, r.stdout }, r.stderr)
    r = h.run({ "tools", dir .. "/flow.luma" }, { cwd = dir })
    assert.are.equal(0, r.status, r.stderr)
    listed = {}
    for _, t in ipairs(luma.json.decode(r.stdout)) do listed[#listed + 1] = t.name end
    table.sort(listed)
    assert.are.same({ "add", "mul", "sub" }, listed)
    for _, out in ipairs { dir .. "/types.d.ts", dir .. "/types.lua" } do
      r = h.run({ dir .. "/flow.luma", "--generate-tool-types", out }, { cwd = dir })
      assert.are.equal(0, r.status, r.stderr)
      local f = assert(io.open(out))
      local text = f:read("a")
      f:close()
      assert.is_truthy(text:find("mul", 1, true))
      assert.is_nil(text:find("discover", 1, true))
    end
    local rpc = function(id, method, params)
      return luma.json.encode { jsonrpc = "2.0", id = id, method = method, params = params }
    end
    r = h.run({ "mcp", dir .. "/flow.luma" }, { cwd = dir, stdin = table.concat({
      rpc(0, "initialize", { protocolVersion = "2025-06-18", capabilities = {}, clientInfo = { name = "raw", version = "1" } }),
      rpc(1, "tools/list"),
      rpc(2, "tools/call", { name = "__discover_tools", arguments = { names = { "mul" } } }) }, "\n") .. "\n" })
    local by_id = {}
    for line in r.stdout:gmatch("[^\n]+") do
      local m = luma.json.decode(line)
      by_id[m.id] = m
    end
    listed = {}
    for _, t in ipairs(by_id[1].result.tools) do listed[#listed + 1] = t.name end
    table.sort(listed)
    assert.are.same({ "add", "mul", "sub" }, listed)
    assert.matches("unknown tool '__discover_tools'", by_id[2].error.message, 1, true)
  end)

  it("bound what a hostile discovery input makes: violations and unknown names capped, each tool described once", function()
    local many_bad, many_same, many_unknown = {}, {}, {}
    for i = 1, 3000 do
      many_bad[i] = "0"
      many_same[i] = '"mul"'
      many_unknown[i] = '"no' .. i .. '"'
    end
    server:script {
      mock.chat(nil, { { "c1", "__discover_tools", '{"names":[' .. table.concat(many_bad, ",") .. ']}' } }),
      mock.chat(nil, { { "c2", "__discover_tools", '{"names":[' .. table.concat(many_same, ",") .. ']}' } }),
      mock.chat(nil, { { "c3", "__discover_tools", '{"names":[' .. table.concat(many_unknown, ",") .. ']}' } }),
      mock.chat('{"total":3}'),
    }
    local p = lazy_program(server, 'provider: "openai", name: "gpt-5.4-mini"', "/v1")
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    local function result(i, id)
      local m = find(r[i].json.messages, function(x) return x.role == "tool" and x.tool_call_id == id end)
      return m.content, luma.json.decode(m.content)
    end
    local text, bad = result(2, "c1")
    assert.are.equal("TOOL_INPUT_INVALID", bad.error.code)
    assert.are.equal(luma.limits.max_violations, #bad.error.details.violations)
    assert.is_true(bad.error.details.truncated)
    assert.is_true(#text < 40000, #text)
    text, bad = result(3, "c2")
    assert.are.equal(1, #bad.tools)
    assert.are.equal("mul", bad.tools[1].name)
    text, bad = result(4, "c3")
    assert.are.equal(0, #bad.tools)
    assert.are.equal(luma.limits.max_violations + 1, #bad.errors)
    assert.is_truthy(bad.errors[#bad.errors]:find("and " .. (3000 - luma.limits.max_violations) .. " more names", 1, true))
    assert.is_true(#text < 40000, #text)
  end)

  it("say at most the program's max_violations names that are no tool, then how many more", function()
    local unknown = {}
    for i = 1, 10 do unknown[i] = "no" .. i end
    server:script {
      mock.chat(nil, { { "c1", "__discover_tools", luma.json.encode { names = unknown } } }),
      mock.chat('{"total":3}'),
    }
    local p = assert(luma.compile(LAZY:format('provider: "openai", name: "gpt-5.4-mini"', server.url .. "/v1", ""), nil,
      { limits = { max_violations = 3 } }))
    p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end }
    for _, t in ipairs { "add", "mul", "sub" } do p:register(t, function(i) return { sum = i.a + i.b } end) end
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    local m = find(r[2].json.messages, function(x) return x.role == "tool" and x.tool_call_id == "c1" end)
    local answer = luma.json.decode(m.content)
    assert.are.same({ "'no1' is not a tool of agent 'A'.", "'no2' is not a tool of agent 'A'.",
                      "'no3' is not a tool of agent 'A'.", "and 7 more names that are no tool of agent 'A'." },
                    answer.errors)
  end)

  it("name a long unknown tool the model called cut between two characters: the request stays UTF-8", function()
    local name = "a" .. string.rep("\u{e9}", 400)   -- one byte more would cut a character in 600
    server:script {
      mock.chat(nil, { { "c1", name, "{}" } }),
      mock.chat('{"total":3}'),
    }
    local p = lazy_program(server, 'provider: "openai", name: "gpt-5.4-mini"', "/v1")
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    local m = find(r[2].json.messages, function(x) return x.role == "tool" and x.tool_call_id == "c1" end)
    assert.is_truthy(utf8.len(m.content), m.content)
    assert.is_truthy(m.content:find("is not a tool of agent 'A'", 1, true))
  end)

  it("answer a long name that is no tool, cut between two characters, without ending the ask", function()
    local name = "a" .. string.rep("\u{e9}", 60)   -- byte 100 of it is inside a character
    server:script {
      mock.chat(nil, { { "c1", "__discover_tools", luma.json.encode { names = { name, "mul" } } } }),
      mock.chat('{"total":3}'),
    }
    local p = lazy_program(server, 'provider: "openai", name: "gpt-5.4-mini"', "/v1")
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    local m = find(r[2].json.messages, function(x) return x.role == "tool" and x.tool_call_id == "c1" end)
    local answer = luma.json.decode(m.content)
    assert.are.same({ "'a" .. string.rep("\u{e9}", 49) .. "' is not a tool of agent 'A'." }, answer.errors)
    assert.are.equal("mul", answer.tools[1].name)
  end)

  it("answer whatever limits the program sets on the values its handlers return", function()
    -- the answer holds mul's description (23 bytes) and its schema (deeper than 5)
    for _, limits in ipairs { { max_string_bytes = 12 }, { max_depth = 5 } } do
      server:reset()
      server:script {
        mock.chat(nil, { { "c1", "__discover_tools", '{"names":["mul"]}' } }),
        mock.chat(nil, { { "c2", "mul", '{"a":1,"b":3}' } }),
        mock.chat('{"total":3}'),
      }
      local p = assert(luma.compile(LAZY:format('provider: "openai", name: "gpt-5.4-mini"', server.url .. "/v1", ""), nil,
        { limits = limits }))
      p:register("add", function(i) return { sum = i.a + i.b } end)
      p:register("mul", function(i) return { sum = i.a * i.b } end)
      p:register("sub", function(i) return { sum = i.a - i.b } end)
      p:configure { lookup = function(n) if n == "LUMA_TEST_KEY" then return KEY end end }
      local ok, res = pcall(p:agent("A").call, p:agent("A"), "run", { x = 1 })
      assert.are.same({ true, { total = 3 } }, { ok, ok and res or tostring(res) }, next(limits))
      local m = find(server:requests()[2].json.messages, function(x) return x.role == "tool" and x.tool_call_id == "c1" end)
      assert.are.equal("multiplies two integers", luma.json.decode(m.content).tools[1].description)
    end
  end)

  it("are found again the same way when the ask is replayed from its recording", function()
    local rec = h.tmpname(".jsonl")
    server:script {
      mock.chat(nil, { { "c1", "__discover_tools", '{"names":["sub"],"query":null}' } }),
      mock.chat(nil, { { "c2", "sub", '{"a":4,"b":1}' } }),
      mock.chat('{"total":3}'),
    }
    local p = lazy_program(server, 'provider: "openai", name: "gpt-5.4-mini"', "/v1")
    p:configure { record = rec }
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local q = lazy_program(server, 'provider: "openai", name: "gpt-5.4-mini"', "/v1")
    q:configure { replay = rec }
    assert.are.same({ total = 3 }, q:agent("A"):call("run", { x = 1 }))
    os.remove(rec)
    assert.are.equal(3, #server:requests())
  end)

  local function resumed(extra)
    server:script {
      mock.chat(nil, { { "c1", "__discover_tools", '{"names":["mul"]}' } }),
      mock.chat(nil, { { "c2", "mul", '{"a":1,"b":3}' } }),
      mock.chat('{"total":3}'),
    }
    local dir = h.project {
      ["flow.luma"] = LAZY:format('provider: "openai", name: "gpt-5.4-mini"', server.url .. "/v1", "durable: true\n  " .. extra),
      ["tools.lua"] = [[return { add = function(i) return { sum = i.a + i.b } end,
        mul = function(i) return { sum = i.a * i.b } end, sub = function(i) return { sum = i.a - i.b } end }]],
      ["luma.config.json"] = '{ "tool_modules": ["./tools.lua"] }',
    }
    -- records: the ask, turn 1's exchange, the discovery call's outcome: killed after it
    local r = h.run({ dir .. "/flow.luma", "--agent", "A", "--input", '{"x": 1}', "--journal", dir .. "/j.db",
                      "--journal-lease-ms", "30" },
                    { cwd = dir, env = { LUMA_TEST_KEY = KEY, LUMA_JOURNAL_CRASH = "after:3" } })
    assert.are.equal(137, r.status, r.stderr)
    os.execute("sleep 0.1")   -- the killed owner's lease ends
    local status, out = h.sh("env -u LD_PRELOAD sqlite3 " .. h.quote(dir .. "/j.db") .. " 'SELECT DISTINCT run FROM luma_journal'")
    assert.are.equal(0, status, out)
    local run = out:match("run%-%x+")
    r = h.run({ "resume", run, dir .. "/flow.luma", "--journal", dir .. "/j.db" }, { cwd = dir, env = { LUMA_TEST_KEY = KEY } })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.same({ total = 3 }, luma.json.decode(r.stdout))
    local asked = server:requests()
    assert.are.equal(3, #asked)
    -- the resumed run's first request has mul, and mul ran
    local fname = function(t) return t["function"].name end
    assert.are.same({ "__discover_tools", "add", "mul" }, names(asked[2].json.tools, fname))
    local m = find(asked[3].json.messages, function(x) return x.role == "tool" and x.tool_call_id == "c2" end)
    assert.are.same({ sum = 3 }, luma.json.decode(m.content))
    return asked
  end

  it("stay found when a durable run is resumed after the discovery call's outcome was journaled", function()
    resumed("")
  end)

  it("stay found when resumed though the discovery answer the model read was cut at tool_result_max_bytes", function()
    local asked = resumed("tool_result_max_bytes: 60")
    local m = find(asked[2].json.messages, function(x) return x.role == "tool" and x.tool_call_id == "c1" end)
    assert.is_true(luma.json.decode(m.content).truncated)
  end)

  it("are found by a query over their names and descriptions, on Gemini too", function()
    local calls = function(name, args)
      return { json = { candidates = { { content = { role = "model", parts = { { functionCall = { name = name, args = args } } } }, finishReason = "STOP" } } } }
    end
    server:script {
      calls("__discover_tools", { query = "SUBTRACT" }),
      calls("sub", { a = 4, b = 1 }),
      { json = { candidates = { { content = { role = "model", parts = { { text = '{"total":3}' } } }, finishReason = "STOP" } } } },
    }
    local p = lazy_program(server, 'provider: "gemini", name: "gemini-3-flash"')
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    local gname = function(t) return t.name end
    assert.are.same({ "__discover_tools", "add" }, names(r[1].json.tools[1].functionDeclarations, gname))
    assert.are.same({ "__discover_tools", "add", "sub" }, names(r[2].json.tools[1].functionDeclarations, gname))
  end)

  it("are deferred with Anthropic's tool search where the model has it", function()
    local turn1 = {
      { type = "server_tool_use", id = "srvtoolu_s1", name = "tool_search_tool_regex", input = { pattern = "mul" } },
      { type = "tool_search_tool_result", tool_use_id = "srvtoolu_s1", content = { type = "tool_search_tool_search_result",
        tool_references = { { type = "tool_reference", tool_name = "mul" } } } },
      { type = "tool_use", id = "toolu_1", name = "mul", input = { a = 1, b = 3 } },
    }
    server:script {
      { json = { type = "message", role = "assistant", stop_reason = "tool_use", content = turn1 } },
      { json = { type = "message", role = "assistant", stop_reason = "end_turn", content = { { type = "text", text = '{"total":3}' } } } },
    }
    local p = lazy_program(server, 'provider: "anthropic", name: "claude-sonnet-4-5"', nil, 'tool_search: "bm25"')
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    for i = 1, 2 do assert.is_nil(r[i].refused, r[i].refused and luma.json.encode(r[i].refused)) end
    local tools = r[1].json.tools
    assert.are.same({ type = "tool_search_tool_bm25_20251119", name = "tool_search_tool_bm25" },
                    find(tools, function(t) return t.type and t.type:match("^tool_search") end))
    assert.is_true(find(tools, function(t) return t.name == "mul" end).defer_loading)
    assert.is_nil(find(tools, function(t) return t.name == "add" end).defer_loading)
    assert.are.same(turn1, r[2].json.messages[2].content)
    local results = r[2].json.messages[3].content
    assert.are.same({ 1, "toolu_1" }, { #results, results[1].tool_use_id })
  end)

  it("are deferred with the Responses API's tool_search on the models that have it", function()
    local out1 = {
      { type = "tool_search_call", id = "ts_1", status = "completed", arguments = { query = "multiply" } },
      { type = "tool_search_output", id = "tso_1", status = "completed", tools = { { type = "function", name = "mul" } } },
      { type = "function_call", id = "fc_1", call_id = "call_1", name = "mul", arguments = '{"a":1,"b":3}' },
    }
    server:script {
      { json = { status = "completed", output = out1 } },
      { json = { status = "completed", output = { { type = "message", role = "assistant", content = { { type = "output_text", text = '{"total":3}' } } } } } },
    }
    local p = lazy_program(server, 'provider: "openai", name: "gpt-5.4", api: "responses"', "/v1")
    assert.are.same({ total = 3 }, p:agent("A"):call("run", { x = 1 }))
    local r = server:requests()
    for i = 1, 2 do assert.is_nil(r[i].refused, r[i].refused and luma.json.encode(r[i].refused)) end
    assert.is_truthy(find(r[1].json.tools, function(t) return t.type == "tool_search" end))
    assert.is_true(find(r[1].json.tools, function(t) return t.name == "mul" end).defer_loading)
    assert.are.same(out1, { r[2].json.input[2], r[2].json.input[3], r[2].json.input[4] })
  end)

  it("are refused at load when lazy_tools names no tool of the agent, or tool_search is not the model's", function()
    local src = BASE .. 'model M { provider: "openai", name: "gpt-5.4-mini" }\nagent A { model: M\n tools: [add]\n lazy_tools: [mul]\n tool_search: "regex" }'
    assert.are.same({
      "Agent 'A': lazy_tools lists 'mul', which is not one of its tools.",
      [[Agent 'A': tool_search "regex" is Anthropic's tool search, which model 'M' does not have; use "auto" or "synthetic".]],
    }, (h.errors(src)))
  end)

  it("keep 300 tools out of every request but those found: the first request is at least 20 times smaller", function()
    local decls, list = {}, {}
    for i = 1, 300 do
      decls[#decls + 1] = ("tool t%d(city: string @desc(\"the city to look up, by its full name\"), days: int @range(1, 14), units?: enum[\"metric\", \"imperial\"]) -> Sum { description: \"Looks up forecast number %d for a city, for the given number of days, in the given units.\" }"):format(i, i)
      list[#list + 1] = "t" .. i
    end
    local function source(lazy)
      return BASE .. table.concat(decls, "\n") .. ("\nmodel M { provider: \"openai\", name: \"gpt-5.4-mini\", base_url: \"%s/v1\", api_key_env: \"LUMA_TEST_KEY\" }\n"):format(server.url) ..
        "agent A { model: M\n tools: [add, " .. table.concat(list, ", ") .. "]\n" .. (lazy and ("lazy_tools: [" .. table.concat(list, ", ") .. "]\n") or "") ..
        " fn run(x: int) -> Answer { ask \"Weather {x}\" -> Answer } }"
    end
    local function run(lazy, steps)
      server:reset()
      server:script(steps)
      local p = assert(luma.compile(source(lazy)))
      p:register("add", function(i) return { sum = i.a + i.b } end)
      for i = 1, 300 do p:register("t" .. i, function() return { sum = i } end) end
      p:configure { lookup = function() return KEY end }
      assert.are.same({ total = 7 }, p:agent("A"):call("run", { x = 1 }))
      return server:requests()
    end
    local all = run(false, { mock.chat(nil, { { "c1", "t7", '{"city":"Paris","days":2,"units":null}' } }), mock.chat('{"total":7}') })
    local lazy = run(true, {
      mock.chat(nil, { { "c1", "__discover_tools", '{"names":["t7","t8"],"query":null}' } }),
      mock.chat(nil, { { "c2", "t7", '{"city":"Paris","days":2,"units":null}' } }),
      mock.chat('{"total":7}') })
    for _, r in ipairs(lazy) do assert.is_nil(r.refused, r.refused and luma.json.encode(r.refused)) end
    local fname = function(t) return t["function"].name end
    assert.are.same({ "__discover_tools", "add" }, names(lazy[1].json.tools, fname))
    assert.are.same({ "__discover_tools", "add", "t7", "t8" }, names(lazy[2].json.tools, fname))
    assert.are.equal(301, #all[1].json.tools)
    local ratio = #all[1].body / #lazy[1].body
    assert.is_true(ratio >= 20, ("all sent: %d bytes, lazy: %d bytes, %.1f times"):format(#all[1].body, #lazy[1].body, ratio))
    assert.is_true(#all[2].body / #lazy[3].body >= 20)
  end)
end)
