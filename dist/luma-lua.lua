#!/usr/bin/env lua5.4
-- The luma-lua command as a Lua script, for installs by luarocks (which
-- cannot build the C host): the same command line, through luma.cli.
local status = require("luma.cli").main(arg)
io.stdout:flush()
os.exit(status or 0, true)
