-- The handler of SPEC.md §4, loaded as a tool module by bench/pipeline/run.lua.
return {
  calculate = function(input, signal, needs)
    if input.operation == "add" then return { result = input.a + input.b } end
    if input.operation == "multiply" then return { result = input.a * input.b } end
    error(luma.ToolError{ code = "UNSUPPORTED", message = "Unsupported operation", retryable = false })
  end,
}
