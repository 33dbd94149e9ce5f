-- Makes examples/flow.recording.jsonl, the recording `make demo` replays:
-- the Flow agent of calculate.luma runs against the specs' mock provider,
-- which plays a model that calls classify, then answers. Run from the
-- repository root after `make`:
--   lua5.4 examples/record-flow.lua
-- The recording holds the real endpoint's URL, so that replaying it needs
-- no change to the program.
package.path = "lua/?.lua;lua/?/init.lua;./?.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local luma = require "luma"
local mock = require "spec.support.mock_provider"

local OUT = "examples/flow.recording.jsonl"
local TEXT = "INV-2041 paid in full on the first of May"

local server = mock.start()
local ok, err = pcall(function()
  local source = assert(io.open("examples/calculate.luma")):read("a")
  source = source:gsub('name: "gpt%-5%.4%-mini"', '%0\n  base_url: "' .. server.url .. '/v1"', 1)
  local tmp = os.tmpname()
  os.remove(OUT)
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
  local f = assert(io.open(tmp, "w"))
  f:write(source)
  f:close()
  local program = luma.load(tmp, { config = "examples/luma.config.json", record = OUT,
    lookup = function(name) if name == "OPENAI_API_KEY" then return "sk-demo-not-a-key" end end })
  os.remove(tmp)
  print(luma.json.encode(program:agent("Flow"):call("run", { text = TEXT }), { indent = 2 }))
end)
server:stop()
if not ok then error(err, 0) end
-- the recording names the endpoint of the program as written
local text = assert(io.open(OUT)):read("a")
text = text:gsub(server.url:gsub("%p", "%%%0") .. "/v1", "https://api.openai.com/v1")
local f = assert(io.open(OUT, "w"))
f:write(text)
f:close()
print("wrote " .. OUT)
