/* The Lua binding of MCP's Streamable HTTP server (mcphttp.h): core.mcp_http,
   for lua/luma/mcp.lua. */
#ifndef LUMA_LMCPHTTP_H
#define LUMA_LMCPHTTP_H

#include <lua.h>

/* Adds mcp_http to the table on top. */
void lmcphttp_open(lua_State *L);

#endif
