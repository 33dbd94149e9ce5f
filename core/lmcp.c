/* core.mcp_reader(fd [, max_bytes]) -> a reader of MCP messages, one per line:
     reader:next() -> "message", value | "too_big" | "bad_json", reason | nil
       (nil: no complete line held; read more)
     reader:fill() -> bytes read (0: end of file), or nil and why
     reader:eof()
     reader:admit() -> true, counting one more request in flight; false at
       LIM_MCP_MAX_IN_FLIGHT (the client's bound); reader:release() when one ends
   core.mcp_wait({ fd, ... }, timeout_ms) -> { [fd] = true for each readable }
   (timeout_ms < 0: no timeout).
   core.mcp_seal(text) -> a token that carries text with its HMAC-SHA256
   under a key made at random once per process; core.mcp_unseal(token) ->
   the text, or nil when the token was not made by this process (the
   2026-07-28 requestState, which comes back through the client).
   core.mcp_ignore_sigpipe(): a client that stops reading makes writes fail
   (EPIPE) instead of killing the process. The JSON of a message is parsed by the one
   codec (base/json.c) within LIM_MCP_JSON_DEPTH; its text is never a Lua
   string. */
#include "lmcp.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "compat.h"
#include "crypto.h"
#include "ljson.h"
#include "luma_limits.h"
#include "mcp.h"

#define LMCP_READER "luma.mcp_reader"

typedef struct reader_box {
  mcp_reader r;
  int fd;
  int open;
  int in_flight;
} reader_box;

static reader_box *check_reader(lua_State *L) {
  reader_box *b = luaL_checkudata(L, 1, LMCP_READER);
  if (!b->open) luaL_argerror(L, 1, "the reader is closed");
  return b;
}

static int reader_gc(lua_State *L) {
  reader_box *b = luaL_checkudata(L, 1, LMCP_READER);
  if (b->open) mcp_reader_free(&b->r);
  b->open = 0;
  return 0;
}

static int l_mcp_reader(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  lua_Integer max = luaL_optinteger(L, 2, LIM_MCP_MAX_MESSAGE_BYTES);
  luaL_argcheck(L, max > 0 && max <= LIM_MCP_MAX_MESSAGE_BYTES * 16LL, 2, "out of range");
  reader_box *b = lua_newuserdata(L, sizeof *b);
  b->open = 0;
  lc_setmetatable(L, LMCP_READER);
  if (mcp_reader_init(&b->r, (size_t)max) != 0) return luaL_error(L, "out of memory");
  b->fd = fd;
  b->open = 1;
  b->in_flight = 0;
  return 1;
}

static int l_reader_next(lua_State *L) {
  reader_box *b = check_reader(L);
  const char *line;
  size_t n;
  switch (mcp_reader_next(&b->r, &line, &n)) {
    case MCP_TOO_BIG:
      lua_pushliteral(L, "too_big");
      return 1;
    case MCP_LINE: {
      char err[200];
      if (lj_push_text(L, line, n, LIM_MCP_JSON_DEPTH, err, sizeof err)) {
        lua_pushliteral(L, "message");
        lua_insert(L, -2);
        return 2;
      }
      lua_pushliteral(L, "bad_json");
      lua_pushstring(L, err);
      return 2;
    }
    default:
      lua_pushnil(L);
      return 1;
  }
}

static int l_reader_fill(lua_State *L) {
  reader_box *b = check_reader(L);
  long got;
  do got = mcp_reader_fill(&b->r, b->fd);
  while (got < 0 && errno == EINTR);
  if (got < 0) {
    lua_pushnil(L);
    lua_pushstring(L, strerror(errno));
    return 2;
  }
  lua_pushinteger(L, got);
  return 1;
}

static int l_reader_eof(lua_State *L) {
  lua_pushboolean(L, check_reader(L)->r.eof);
  return 1;
}

static int l_reader_admit(lua_State *L) {
  reader_box *b = check_reader(L);
  int ok = b->in_flight < LIM_MCP_MAX_IN_FLIGHT;
  if (ok) b->in_flight++;
  lua_pushboolean(L, ok);
  return 1;
}

static int l_reader_release(lua_State *L) {
  reader_box *b = check_reader(L);
  luaL_argcheck(L, b->in_flight > 0, 1, "no request in flight");
  b->in_flight--;
  return 0;
}

static int l_mcp_wait(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer timeout = luaL_optinteger(L, 2, -1);
  struct pollfd fds[8];
  int n = 0;
  for (int i = 1; n < 8; i++) {
    lua_rawgeti(L, 1, i);
    if (lua_isnil(L, -1)) { lua_pop(L, 1); break; }
    fds[n].fd = (int)luaL_checkinteger(L, -1);
    fds[n].events = POLLIN;
    fds[n].revents = 0;
    n++;
    lua_pop(L, 1);
  }
  if (timeout > LIM_TIMEOUT_CAP_MS) timeout = LIM_TIMEOUT_CAP_MS;
  int r;
  do r = poll(fds, (nfds_t)n, timeout < 0 ? -1 : (int)timeout);
  while (r < 0 && errno == EINTR);
  lua_createtable(L, 0, n);
  for (int i = 0; r > 0 && i < n; i++) {
    if (fds[i].revents) {
      lua_pushboolean(L, 1);
      lua_rawseti(L, -2, fds[i].fd);
    }
  }
  return 1;
}

static unsigned char seal_key[32];
static int seal_ready;

static void seal_mac(lua_State *L, const char *text, size_t len, char hex[65]) {
  if (!seal_ready) {
    if (cr_random(seal_key, sizeof seal_key) != 0) luaL_error(L, "no random bytes for the seal's key");
    seal_ready = 1;
  }
  unsigned char mac[32];
  cr_hmac_sha256(seal_key, sizeof seal_key, text, len, mac);
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", mac[i]);
}

static int l_mcp_seal(lua_State *L) {
  size_t len;
  const char *text = luaL_checklstring(L, 1, &len);
  char hex[65];
  seal_mac(L, text, len, hex);
  lua_pushlstring(L, hex, 64);
  lua_pushliteral(L, ":");
  lua_pushvalue(L, 1);
  lua_concat(L, 3);
  return 1;
}

static int l_mcp_unseal(lua_State *L) {
  size_t len;
  const char *token = luaL_checklstring(L, 1, &len);
  if (len < 65 || token[64] != ':') return 0;
  char hex[65];
  seal_mac(L, token + 65, len - 65, hex);
  unsigned char diff = 0;
  for (int i = 0; i < 64; i++) diff |= (unsigned char)(hex[i] ^ token[i]);   /* the same time whatever differs */
  if (diff) return 0;
  lua_pushlstring(L, token + 65, len - 65);
  return 1;
}

static int l_mcp_ignore_sigpipe(lua_State *L) {
  (void)L;
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

void lmcp_open(lua_State *L) {
  static const luaL_Reg methods[] = {
    { "next", l_reader_next },
    { "fill", l_reader_fill },
    { "eof", l_reader_eof },
    { "admit", l_reader_admit },
    { "release", l_reader_release },
    { NULL, NULL }
  };
  if (luaL_newmetatable(L, LMCP_READER)) {
    lua_newtable(L);
    lc_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, reader_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_mcp_reader);
  lua_setfield(L, -2, "mcp_reader");
  lua_pushcfunction(L, l_mcp_wait);
  lua_setfield(L, -2, "mcp_wait");
  lua_pushcfunction(L, l_mcp_seal);
  lua_setfield(L, -2, "mcp_seal");
  lua_pushcfunction(L, l_mcp_unseal);
  lua_setfield(L, -2, "mcp_unseal");
  lua_pushcfunction(L, l_mcp_ignore_sigpipe);
  lua_setfield(L, -2, "mcp_ignore_sigpipe");
}
