/* core.mcp_spawn({ command, arg, ... } [, cwd]) -> server, or nil and why:
     server:send(text, timeout_ms [, request]) -> true, or nil, "timeout" | "closed", why
       (request: a request of ours, whose answer the next receives wait for)
     server:receive(timeout_ms) -> "message", value | "too_big" | "bad_json", why
       | "eof" | "timeout" | "error", why | "flood", why (past
       LIM_MCP_SERVER_LINES messages since the request: a server that floods)
     server:stop([grace_ms]) -> how it ended ("exited with status 0", ...)
     server:pid(); server:alive() -> false once it exited (reaped)
   A message is parsed by the one codec within LIM_MCP_SERVER_JSON_DEPTH;
   a line is at most LIM_MCP_SERVER_MESSAGE_BYTES. __gc and __close stop the
   server at once (SIGTERM, then SIGKILL, reaped). */
#include "lmcpclient.h"

#include <limits.h>
#include <string.h>

#include <lauxlib.h>

#include "compat.h"
#include "lruntime.h"
#include "ljson.h"
#include "luma_limits.h"
#include "mcpclient.h"

#define LMCC_SERVER "luma.mcp_server"

typedef struct server_box {
  mcc_server s;
  int open;
  int lines;                  /* received since the last request sent */
} server_box;

static server_box *check_server(lua_State *L) {
  server_box *b = luaL_checkudata(L, 1, LMCC_SERVER);
  if (!b->open) luaL_argerror(L, 1, "the server is stopped");
  return b;
}

static long long deadline_of(lua_State *L, int idx) {
  lua_Integer ms = luaL_checkinteger(L, idx);
  if (ms < 0) ms = 0;
  if (ms > LIM_TIMEOUT_CAP_MS) ms = LIM_TIMEOUT_CAP_MS;
  return mcc_now_ms() + ms;
}

static int server_close(lua_State *L) {
  server_box *b = luaL_checkudata(L, 1, LMCC_SERVER);
  if (b->open) {
    b->open = 0;
    mcc_stop(&b->s, 0);
  }
  return 0;
}

static int l_spawn(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  const char *cwd = luaL_optstring(L, 2, NULL);
  lua_Integer n = (lua_Integer)lc_rawlen(L, 1);
  luaL_argcheck(L, n >= 1 && n < INT_MAX / (lua_Integer)sizeof(char *), 1, "a command and its arguments");
  /* the table keeps the strings; the list is a userdata, freed by Lua */
  const char **argv = lua_newuserdata(L, sizeof *argv * (size_t)(n + 1));
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    size_t len;
    argv[i - 1] = luaL_checklstring(L, -1, &len);
    luaL_argcheck(L, strlen(argv[i - 1]) == len, 1, "an argument holds a NUL character");
    lua_pop(L, 1);
  }
  argv[n] = NULL;
  server_box *b = lua_newuserdata(L, sizeof *b);
  b->open = 0;
  lc_setmetatable(L, LMCC_SERVER);
  char err[300];
  if (mcc_start(&b->s, argv, cwd, LIM_MCP_SERVER_MESSAGE_BYTES, err, sizeof err) != 0) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  b->open = 1;
  return 1;
}

static int l_send(lua_State *L) {
  server_box *b = check_server(L);
  size_t len;
  const char *text = luaL_checklstring(L, 2, &len);
  luaL_argcheck(L, !memchr(text, '\n', len), 2, "a message is one line");
  char err[300];
  int r = mcc_send(&b->s, text, len, deadline_of(L, 3), err, sizeof err);
  if (r == 0 && lua_toboolean(L, 4)) b->lines = 0;
  if (r == 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushnil(L);
  lua_pushstring(L, r == MCC_TIMEOUT ? "timeout" : "closed");
  lua_pushstring(L, err);
  return 3;
}

/* mcc_next, as lmcc_push_next reads its source */
static int next_line(void *src, const char **msg, size_t *n, long long deadline, char *err, size_t errlen) {
  return mcc_next(src, msg, n, deadline, err, errlen);
}

int lmcc_push_next(lua_State *L, int *lines, int (*next)(void *src, const char **msg, size_t *n, long long deadline,
                   char *err, size_t errlen), void *src, long long deadline, size_t shown) {
  if (*lines >= LIM_MCP_SERVER_LINES) {
    lua_pushliteral(L, "flood");
    lua_pushfstring(L, "more than %d messages without the answer (mcp_server_lines)", (int)LIM_MCP_SERVER_LINES);
    return 2;
  }
  (*lines)++;
  const char *msg;
  size_t n;
  char err[300];
  err[0] = 0;
  switch (next(src, &msg, &n, deadline, err, sizeof err)) {
    case MCC_LINE:
      if (lj_push_text(L, msg, n, LIM_MCP_SERVER_JSON_DEPTH, err, sizeof err)) {
        lua_pushliteral(L, "message");
        lua_insert(L, -2);
        return 2;
      }
      lua_pushliteral(L, "bad_json");
      lua_pushstring(L, err);
      if (!shown) return 2;
      lua_pushlstring(L, msg, n > shown ? shown : n);
      return 3;
    case MCC_TOO_BIG:
      lua_pushliteral(L, "too_big");
      lua_pushfstring(L, "a message longer than %d bytes (mcp_server_message_bytes)", (int)LIM_MCP_SERVER_MESSAGE_BYTES);
      return 2;
    case MCC_EOF:
      lua_pushliteral(L, "eof");
      return 1;
    case MCC_TIMEOUT:
      lua_pushliteral(L, "timeout");
      return 1;
    default:
      lua_pushliteral(L, "error");
      lua_pushstring(L, err);
      return 2;
  }
}

static int l_receive(lua_State *L) {
  server_box *b = check_server(L);
  return lmcc_push_next(L, &b->lines, next_line, &b->s, deadline_of(L, 2), 0);
}

static int l_stop(lua_State *L) {
  server_box *b = luaL_checkudata(L, 1, LMCC_SERVER);
  lua_Integer grace = luaL_optinteger(L, 2, LIM_MCP_STOP_GRACE_MS);
  luaL_argcheck(L, grace >= 0 && grace <= LIM_MCP_STOP_GRACE_MS * 20LL, 2, "out of range");
  if (b->open) {
    b->open = 0;
    mcc_stop(&b->s, (int)grace);
  }
  char how[100];
  mcc_status(&b->s, how, sizeof how);
  lua_pushstring(L, how);
  return 1;
}

static int l_alive(lua_State *L) {
  lua_pushboolean(L, mcc_alive(&check_server(L)->s));
  return 1;
}

static int l_pid(lua_State *L) {
  lua_pushinteger(L, check_server(L)->s.pid);
  return 1;
}

void lmcpclient_open(lua_State *L) {
  static const luaL_Reg methods[] = {
    { "send", l_send },
    { "receive", l_receive },
    { "stop", l_stop },
    { "pid", l_pid },
    { "alive", l_alive },
    { NULL, NULL }
  };
  lr_new_metatable(L, LMCC_SERVER, server_close, methods);   /* also its close method */
  lua_pushcfunction(L, l_spawn);
  lua_setfield(L, -2, "mcp_spawn");
}
