/* The Lua binding of the Streamable HTTP MCP client (mcpremote.h):
   core.mcp_remote, for lua/luma/mcpclient.lua. */
#ifndef LUMA_LMCPREMOTE_H
#define LUMA_LMCPREMOTE_H

#include <lua.h>

/* Adds mcp_remote to the table on top. */
void lmcpremote_open(lua_State *L);

#endif
