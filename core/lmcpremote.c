/* core.mcp_remote(url, { { name, value }, ... }) -> remote: a server's URL
   and the headers every request to it carries (its bearer token among
   them: kept here, in C, and never given back to Lua, written to a message
   or logged). Its HTTP transport is its own, made by its first request.
     remote:post(method, text | nil, { name = value, ... }, timeout_ms) ->
       exchange, or nil and why (method: "POST", "GET" or "DELETE"; timeout_ms
       bounds the whole exchange, its answer's stream included)
     exchange:head(timeout_ms) -> status, { [lower-case name] = value }
       | nil, "timeout" | "error", why
     exchange:receive(timeout_ms) -> "message", value | "too_big", why
       | "bad_json", why, the text's start | "eof" | "timeout"
       | "error", why | "flood", why (past LIM_MCP_SERVER_LINES messages)
     exchange:close(); remote:close()
   A message is at most LIM_MCP_SERVER_MESSAGE_BYTES and parsed by the one
   codec within LIM_MCP_SERVER_JSON_DEPTH. Redirects are not followed: the
   token goes to the URL written, and nowhere else. */
#include "lmcpremote.h"

#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "compat.h"
#include "ljson.h"
#include "lmcpclient.h"
#include "lruntime.h"
#include "luma_limits.h"
#include "mcpclient.h"
#include "mcpremote.h"
#include "strbuf.h"
#include "transport.h"

#define LMCR_REMOTE "luma.mcp_remote"
#define LMCR_EXCHANGE "luma.mcp_exchange"
#define LMCR_MAX_HEADERS 64
#define LMCR_SHOWN_BYTES 160   /* of a text that is not JSON, for the error saying so */

typedef struct remote_box {
  tp_transport *tp;           /* NULL until the first post */
  char *url;
  sb_buf text;                /* the fixed headers' names and values, each NUL-terminated */
  int nheaders;
  int open;
} remote_box;

typedef struct exchange_box {
  mcr_exchange *x;            /* NULL once closed */
  int lines;
} exchange_box;

static void remote_release(remote_box *b) {
  if (!b->open) return;
  b->open = 0;
  tp_free(b->tp);
  b->tp = NULL;
  if (b->text.data) memset(b->text.data, 0, b->text.len);   /* the token goes with it */
  sb_free(&b->text);
  free(b->url);
  b->url = NULL;
}

static int remote_close(lua_State *L) {
  remote_release(luaL_checkudata(L, 1, LMCR_REMOTE));
  return 0;
}

static int exchange_close(lua_State *L) {
  exchange_box *e = luaL_checkudata(L, 1, LMCR_EXCHANGE);
  mcr_free(e->x);
  e->x = NULL;
  return 0;
}

static long long deadline_of(lua_State *L, int idx) {
  lua_Integer ms = luaL_checkinteger(L, idx);
  if (ms < 0) ms = 0;
  if (ms > LIM_TIMEOUT_CAP_MS) ms = LIM_TIMEOUT_CAP_MS;
  return mcc_now_ms() + ms;
}

static const char *checked_text(lua_State *L, int idx, size_t *len, const char *what) {
  const char *s = lua_type(L, idx) == LUA_TSTRING ? lua_tolstring(L, idx, len) : NULL;
  if (!s || strlen(s) != *len) luaL_error(L, "%s must be a string without NUL", what);
  return s;
}

static int l_remote(lua_State *L) {
  size_t len;
  const char *url = luaL_checklstring(L, 1, &len);
  luaL_argcheck(L, strlen(url) == len, 1, "the URL holds a NUL character");
  luaL_checktype(L, 2, LUA_TTABLE);
  remote_box *b = lua_newuserdata(L, sizeof *b);
  memset(b, 0, sizeof *b);
  sb_init(&b->text);
  lc_setmetatable(L, LMCR_REMOTE);
  b->open = 1;
  if (!(b->url = strdup(url))) return luaL_error(L, "out of memory");
  int n = (int)lc_rawlen(L, 2);
  luaL_argcheck(L, n <= LMCR_MAX_HEADERS, 2, "too many headers");
  for (int i = 1; i <= n; i++) {
    lc_rawgeti(L, 2, i);
    luaL_argcheck(L, lua_istable(L, -1), 2, "a header is { name, value }");
    for (int k = 1; k <= 2; k++) {
      lc_rawgeti(L, -1, k);
      size_t l;
      const char *s = checked_text(L, -1, &l, k == 1 ? "a header's name" : "a header's value");
      sb_add(&b->text, s, l + 1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    b->nheaders++;
  }
  if (b->text.failed) return luaL_error(L, "out of memory");
  return 1;
}

static int l_post(lua_State *L) {
  remote_box *b = luaL_checkudata(L, 1, LMCR_REMOTE);
  luaL_argcheck(L, b->open, 1, "the remote server is closed");
  const char *method = luaL_checkstring(L, 2);
  tp_method m = strcmp(method, "POST") == 0 ? TP_POST : strcmp(method, "DELETE") == 0 ? TP_DELETE
               : strcmp(method, "GET") == 0 ? TP_GET : (tp_method)-1;
  luaL_argcheck(L, m == TP_POST || m == TP_DELETE || m == TP_GET, 2, "POST, GET or DELETE");
  size_t body_len = 0;
  const char *body = luaL_optlstring(L, 3, NULL, &body_len);
  luaL_checktype(L, 4, LUA_TTABLE);
  long long deadline = deadline_of(L, 5);
  tp_header h[2 * LMCR_MAX_HEADERS];
  size_t nh = 0;
  const char *p = b->text.data;
  for (int i = 0; i < b->nheaders; i++) {
    const char *name = p;
    p += strlen(p) + 1;
    h[nh++] = (tp_header){ name, strlen(name), p, strlen(p) };
    p += strlen(p) + 1;
  }
  lua_pushnil(L);
  while (lua_next(L, 4)) {
    luaL_argcheck(L, nh < sizeof h / sizeof *h, 4, "too many headers");
    size_t nl, vl;
    const char *name = checked_text(L, -2, &nl, "a header's name");
    const char *value = checked_text(L, -1, &vl, "a header's value");
    h[nh++] = (tp_header){ name, nl, value, vl };   /* the table keeps them */
    lua_pop(L, 1);
  }
  char err[300];
  if (!b->tp && !(b->tp = tp_new(err, sizeof err))) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  long long left = deadline - mcc_now_ms();
  tp_request r = { m, b->url, h, nh, body, body_len, "luma-lua", left > 0 ? left : 1, 0, 0, 1, NULL };
  exchange_box *e = lua_newuserdata(L, sizeof *e);
  e->x = NULL;
  e->lines = 0;
  lc_setmetatable(L, LMCR_EXCHANGE);
  if (!(e->x = mcr_start(b->tp, &r, LIM_MCP_SERVER_MESSAGE_BYTES, err, sizeof err))) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  return 1;
}

static exchange_box *check_exchange(lua_State *L) {
  exchange_box *e = luaL_checkudata(L, 1, LMCR_EXCHANGE);
  luaL_argcheck(L, e->x != NULL, 1, "the exchange is closed");
  return e;
}

static int l_head(lua_State *L) {
  exchange_box *e = check_exchange(L);
  long status;
  const tp_header *h;
  size_t n;
  char err[300];
  int r = mcr_head(e->x, deadline_of(L, 2), &status, &h, &n, err, sizeof err);
  if (r != 1) {
    lua_pushnil(L);
    lua_pushstring(L, r == MCC_TIMEOUT ? "timeout" : "error");
    lua_pushstring(L, r == MCC_TIMEOUT ? "no answer in time" : err);
    return 3;
  }
  lua_pushinteger(L, status);
  lua_createtable(L, 0, (int)n);
  for (size_t i = 0; i < n; i++) {
    char name[64];
    if (h[i].name_len >= sizeof name) continue;   /* no header the protocol reads is that long */
    for (size_t k = 0; k < h[i].name_len; k++) {
      char c = h[i].name[k];
      name[k] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    lua_pushlstring(L, name, h[i].name_len);
    lua_pushlstring(L, h[i].value, h[i].value_len);
    lua_rawset(L, -3);
  }
  return 2;
}

/* mcr_next, as lmcc_push_next reads its source */
static int next_message(void *src, const char **msg, size_t *n, long long deadline, char *err, size_t errlen) {
  return mcr_next(src, msg, n, deadline, err, errlen);
}

static int l_receive(lua_State *L) {
  exchange_box *e = check_exchange(L);
  return lmcc_push_next(L, &e->lines, next_message, e->x, deadline_of(L, 2), LMCR_SHOWN_BYTES);
}

void lmcpremote_open(lua_State *L) {
  static const luaL_Reg remote_methods[] = { { "post", l_post }, { NULL, NULL } };
  static const luaL_Reg exchange_methods[] = { { "head", l_head }, { "receive", l_receive }, { NULL, NULL } };
  lr_new_metatable(L, LMCR_REMOTE, remote_close, remote_methods);
  lr_new_metatable(L, LMCR_EXCHANGE, exchange_close, exchange_methods);
  lua_pushcfunction(L, l_remote);
  lua_setfield(L, -2, "mcp_remote");
}
