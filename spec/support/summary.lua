-- A busted output handler: the usual terminal output, plus the counts
-- appended to $LUMA_TEST_RESULTS for the final "N passed, N failed" line.
return function(options)
  local busted = require "busted"
  local term = require "busted.outputHandlers.utfTerminal"
  local handler = term(options)

  busted.subscribe({ "suite", "end" }, function()
    local path = os.getenv("LUMA_TEST_RESULTS")
    if path then
      local f = assert(io.open(path, "a"))
      f:write(string.format("%d %d\n", handler.successesCount,
        handler.failuresCount + handler.errorsCount))
      f:close()
    end
    return nil, true
  end)

  return handler
end
