-- The handlers of examples/calculate.luma.
return {
  calculate = function(input, signal, needs)
    if input.operation == "add" then return { result = input.a + input.b } end
    if input.operation == "multiply" then return { result = input.a * input.b } end
    error(luma.ToolError { code = "UNSUPPORTED", message = "Unsupported operation", retryable = false })
  end,

  text_stats = function(input)
    local words = 0
    for _ in input.text:gmatch("%S+") do words = words + 1 end
    return { words = words, characters = #input.text }
  end,

  classify = function(input)
    local number = input.text:match("INV%-%d+")
    if number then return { kind = "Invoice", invoice_number = number } end
    return { kind = "Receipt", reference = input.text:sub(1, 40) }
  end,
}
