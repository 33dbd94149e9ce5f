/* The Lua binding of the MCP stdio framing (mcp.h): core.mcp_reader and
   core.mcp_wait, for lua/luma/mcp.lua. */
#ifndef LUMA_LMCP_H
#define LUMA_LMCP_H

#include <lua.h>

/* Adds mcp_reader and mcp_wait to the table on top. */
void lmcp_open(lua_State *L);

#endif
