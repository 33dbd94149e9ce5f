-- A busted output handler: the usual terminal output, plus the counts
-- appended to $LUMA_TEST_RESULTS for the final "N passed, N failed" line,
-- and the ten spec files that took longest (wall time), so that a run that
-- grows slow says where.
return function(options)
  local busted = require "busted"
  local term = require "busted.outputHandlers.utfTerminal"
  local handler = term(options)
  local ok, socket = pcall(require, "socket")
  local now = ok and socket.gettime or os.time
  local took, started = {}, {}

  busted.subscribe({ "file", "start" }, function(file)
    started[file.name] = now()
    return nil, true
  end)
  busted.subscribe({ "file", "end" }, function(file)
    if started[file.name] then took[#took + 1] = { file.name, now() - started[file.name] } end
    return nil, true
  end)

  busted.subscribe({ "suite", "end" }, function()
    table.sort(took, function(a, b) return a[2] > b[2] end)
    local lines = {}
    for i = 1, math.min(10, #took) do lines[#lines + 1] = string.format("  %7.1f s  %s", took[i][2], took[i][1]) end
    if #lines > 0 then io.write("\nslowest spec files:\n", table.concat(lines, "\n"), "\n") end
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
