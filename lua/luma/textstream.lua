-- The text of an ask's events (README: Streaming) for a person watching it:
-- the command line and the REPL print the answers as the model writes them.
--
--   textstream.new(write, on_retry) -> on_event(ev)
--     write(s): prints a piece of text (and flushes it)
--     on_retry(ev): told when a retry voids the text shown since the last
--     turn_end (the line is ended first)
--
-- The text and refusal deltas are printed as they come; each turn's text
-- ends its line (at turn_end, retry or finish), so what follows starts on
-- a line of its own.
local textstream = {}

function textstream.new(write, on_retry)
  local open_line = false
  local function end_line()
    if open_line then write("\n") end
    open_line = false
  end
  return function(ev)
    local t = ev.type
    if (t == "text_delta" or t == "refusal_delta") and ev.text ~= "" then
      write(ev.text)
      open_line = ev.text:sub(-1) ~= "\n"
    elseif t == "turn_end" or t == "finish" then
      end_line()
    elseif t == "retry" then
      end_line()
      if on_retry then on_retry(ev) end
    end
  end
end

return textstream
