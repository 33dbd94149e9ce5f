/* The Lua binding of the stdio MCP client (mcpclient.h): core.mcp_spawn,
   for lua/luma/mcpclient.lua. */
#ifndef LUMA_LMCPCLIENT_H
#define LUMA_LMCPCLIENT_H

#include <lua.h>

/* Adds mcp_spawn to the table on top. */
void lmcpclient_open(lua_State *L);

#endif
