-- Makes examples/flow.recording.jsonl and examples/flow.stream.recording.jsonl,
-- the recordings `make demo` replays: the Flow agent of calculate.luma runs
-- against the specs' mock provider, which plays a model that calls classify,
-- then answers; the second time a host listens, so that the asks stream and
-- the recording keeps the raw event streams. Run from the repository root
-- after `make`:
--   lua5.4 examples/record-flow.lua
-- The recording holds the real endpoint's URL, so that replaying it needs
-- no change to the program.
package.path = "lua/?.lua;lua/?/init.lua;./?.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local luma = require "luma"
local mock = require "spec.support.mock_provider"

local OUTS = { "examples/flow.recording.jsonl", "examples/flow.stream.recording.jsonl" }
local TEXT = "INV-2041 paid in full on the first of May"

local server = mock.start()
local ok, err = pcall(function()
  local source = assert(io.open("examples/calculate.luma")):read("a")
  source = source:gsub('name: "gpt%-5%.4%-mini"', '%0\n  base_url: "' .. server.url .. '/v1"', 1)
  local tmp = os.tmpname()
  local f = assert(io.open(tmp, "w"))
  f:write(source)
  f:close()
  for i, out in ipairs(OUTS) do
    os.remove(out)
    server:reset()
    server:script {
      { json = { id = "chatcmpl-demo-1", object = "chat.completion", model = "gpt-5.4-mini",
        choices = { { index = 0, finish_reason = "tool_calls", message = { role = "assistant", content = luma.null,
          tool_calls = { { id = "call_classify_1", type = "function",
            ["function"] = { name = "classify", arguments = luma.json.encode { text = TEXT } } } } } } },
        usage = { prompt_tokens = 412, completion_tokens = 23, total_tokens = 435 } } },
      { json = { id = "chatcmpl-demo-2", object = "chat.completion", model = "gpt-5.4-mini",
        choices = { { index = 0, finish_reason = "stop", message = { role = "assistant",
          content = '{"summary":"Invoice INV-2041 (9 words), paid in full on 1 May.","confidence":0.92}' } } },
        usage = { prompt_tokens = 530, completion_tokens = 31, total_tokens = 561 } } },
    }
    local program = luma.load(tmp, { config = "examples/luma.config.json", record = out,
      lookup = function(name) if name == "OPENAI_API_KEY" then return "sk-demo-not-a-key" end end })
    -- the second recording listens: its asks stream
    local opts = i == 2 and { on_event = function() end } or nil
    print(luma.json.encode(program:agent("Flow"):call("run", { text = TEXT }, opts), { indent = 2 }))
    program:close()
  end
  os.remove(tmp)
end)
server:stop()
if not ok then error(err, 0) end
-- the recordings name the endpoint of the program as written
for _, out in ipairs(OUTS) do
  local text = assert(io.open(out)):read("a")
  text = text:gsub(server.url:gsub("%p", "%%%0") .. "/v1", "https://api.openai.com/v1")
  local f = assert(io.open(out, "w"))
  f:write(text)
  f:close()
  print("wrote " .. out)
end
