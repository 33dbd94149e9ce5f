/* The Lua binding of the stdio MCP client (mcpclient.h): core.mcp_spawn,
   for lua/luma/mcpclient.lua. */
#ifndef LUMA_LMCPCLIENT_H
#define LUMA_LMCPCLIENT_H

#include <lua.h>

/* Adds mcp_spawn to the table on top. */
void lmcpclient_open(lua_State *L);

/* What a server's receive gives mcpclient.lua, for the stdio client and the
   remote one (lmcpremote.c) alike: *lines counts the messages since the last
   request; past mcp_server_lines it is ("flood", why). Else r, msg, n and
   err are what mcc_next or mcr_next said: ("message", value) | ("bad_json",
   why[, the message's first shown bytes; 0: not given]) | ("too_big", why)
   | ("eof") | ("timeout") | ("error", why). Returns how many it pushed. */
int lmcc_push_next(lua_State *L, int *lines, int (*next)(void *src, const char **msg, size_t *n, long long deadline,
                   char *err, size_t errlen), void *src, long long deadline, size_t shown);

#endif
