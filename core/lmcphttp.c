/* core.mcp_http{ host =, port =, token =, origins = { ... } } -> a server of
   MCP's Streamable HTTP transport (mcphttp.h), or nil and why:
     server:port()
     server:wait(timeout_ms, { fd, ... }) -> { [fd] = true for each readable }
       (timeout_ms < 0: no timeout); accepts, reads, writes as it can
     server:next() -> the next request read whole, or nil:
       { id =, method =, target =, headers = { [lower-case name] = value },
         message = value | bad_json = reason | (neither: no body) }
       the body of a POST is parsed by the one codec (base/json.c) within
       LIM_MCP_JSON_DEPTH; its text is never a Lua string
     server:reply(id, status, headers, body) -> true, or nil when the
       request is no longer held (its client left); headers: { name = value }
     server:stream(id) -> true, or nil: the held request's reply becomes an
       event stream, begun now; server:event(id, text) -> true, false when
       dropped (its client reads too slowly), or nil; the reply is its last event
     server:gone() -> the id of a held request whose client left, or nil
     server:admit() / server:release(): requests in flight, as the stdio reader's
     server:session_new(version [, client [, elicit]]) -> id; server:session(id) -> version,
       client (the client's name given to session_new; nil when none), elicit (whether
       its client declared the elicitation capability), or nil;
     server:session_end(id) -> true when it ended one
     server:close()
   core.mcp_catch_stop() -> fd: SIGTERM and SIGINT no longer end the process;
   each makes fd readable (a byte a signal: the self-pipe way, which no wait
   can miss), for the HTTP loop to stop in order; core.mcp_stop_signal(fd)
   -> the name of the signal caught ("SIGTERM", "SIGINT"), or nil. */
#include "lmcphttp.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "compat.h"
#include "lruntime.h"
#include "ljson.h"
#include "luma_limits.h"
#include "mcphttp.h"
#include "strbuf.h"

#define LMH_SERVER "luma.mcp_http"
#define LMH_MAX_ORIGINS 32
#define LMH_ELICIT 1u          /* a session flag: its client declared elicitation */

typedef struct server_box {
  mh_server *s;
  int in_flight;
} server_box;

static server_box *check_server(lua_State *L) {
  server_box *b = luaL_checkudata(L, 1, LMH_SERVER);
  if (!b->s) luaL_argerror(L, 1, "the server is closed");
  return b;
}

static int server_close(lua_State *L) {
  server_box *b = luaL_checkudata(L, 1, LMH_SERVER);
  mh_close(b->s);
  b->s = NULL;
  return 0;
}

static int l_mcp_http(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  mh_config cfg;
  memset(&cfg, 0, sizeof cfg);
  lua_getfield(L, 1, "host");
  cfg.host = luaL_optstring(L, -1, "127.0.0.1");
  lua_getfield(L, 1, "port");
  lua_Integer port = luaL_optinteger(L, -1, 0);
  luaL_argcheck(L, port >= 0 && port <= 65535, 1, "port out of range");
  cfg.port = (int)port;
  lua_getfield(L, 1, "token");
  cfg.token = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
  lua_getfield(L, 1, "max_body");
  lua_Integer max = luaL_optinteger(L, -1, LIM_MCP_MAX_MESSAGE_BYTES);
  luaL_argcheck(L, max > 0 && max <= LIM_MCP_MAX_MESSAGE_BYTES * 16LL, 1, "max_body out of range");
  cfg.max_body = (size_t)max;
  lua_getfield(L, 1, "origins");
  int norigins = lua_istable(L, -1) ? (int)lc_rawlen(L, -1) : 0;
  if (norigins > LMH_MAX_ORIGINS) return luaL_argerror(L, 1, lua_pushfstring(L, "at most %d origins", LMH_MAX_ORIGINS));
  const char *origins[LMH_MAX_ORIGINS + 1];
  for (int i = 0; i < norigins; i++) {
    lua_rawgeti(L, -1 - i, i + 1);   /* each stays on the stack while cfg uses it */
    origins[i] = luaL_checkstring(L, -1);
  }
  origins[norigins] = NULL;
  cfg.origins = origins;
  server_box *b = lua_newuserdata(L, sizeof *b);
  b->s = NULL;
  b->in_flight = 0;
  lc_setmetatable(L, LMH_SERVER);
  char err[256];
  b->s = mh_open(&cfg, err, sizeof err);
  if (!b->s) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  return 1;
}

static int l_port(lua_State *L) {
  lua_pushinteger(L, mh_port(check_server(L)->s));
  return 1;
}

static int l_wait(lua_State *L) {
  server_box *b = check_server(L);
  lua_Integer timeout = luaL_optinteger(L, 2, -1);
  int extra[8], ready[8], n = 0;
  if (lua_istable(L, 3)) {
    for (int i = 1; n < 8; i++) {
      lua_rawgeti(L, 3, i);
      if (lua_isnil(L, -1)) { lua_pop(L, 1); break; }
      extra[n++] = (int)luaL_checkinteger(L, -1);
      lua_pop(L, 1);
    }
  }
  if (timeout > LIM_TIMEOUT_CAP_MS) timeout = LIM_TIMEOUT_CAP_MS;
  if (mh_wait(b->s, timeout < 0 ? -1 : (int)timeout, extra, n, ready) != 0)
    return luaL_error(L, "mcp http: poll failed");
  lua_createtable(L, 0, n);
  for (int i = 0; i < n; i++) {
    if (ready[i]) {
      lua_pushboolean(L, 1);
      lua_rawseti(L, -2, extra[i]);
    }
  }
  return 1;
}

static int l_next(lua_State *L) {
  server_box *b = check_server(L);
  mh_request r;
  if (!mh_next(b->s, &r)) {
    lua_pushnil(L);
    return 1;
  }
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, (lua_Integer)r.id);
  lua_setfield(L, -2, "id");
  lua_pushstring(L, r.method);
  lua_setfield(L, -2, "method");
  lua_pushstring(L, r.target);
  lua_setfield(L, -2, "target");
  lua_createtable(L, 0, r.nheaders);
  for (int i = 0; i < r.nheaders; i++) {
    lua_getfield(L, -1, r.headers[i].name);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_pushstring(L, r.headers[i].value);
    } else {   /* a header given twice: its values joined, as HTTP reads them */
      lua_pushliteral(L, ", ");
      lua_pushstring(L, r.headers[i].value);
      lua_concat(L, 3);
    }
    lua_setfield(L, -2, r.headers[i].name);
  }
  lua_setfield(L, -2, "headers");
  if (r.body_len > 0) {
    char err[200];
    if (lj_push_text(L, r.body, r.body_len, LIM_MCP_JSON_DEPTH, err, sizeof err)) {
      lua_setfield(L, -2, "message");
    } else {
      lua_pushstring(L, err);
      lua_setfield(L, -2, "bad_json");
    }
  }
  return 1;
}

static int l_reply(lua_State *L) {
  server_box *b = check_server(L);
  lua_Integer id = luaL_checkinteger(L, 2);
  lua_Integer status = luaL_checkinteger(L, 3);
  luaL_argcheck(L, status >= 100 && status <= 599, 3, "not an HTTP status");
  size_t len = 0;
  const char *body = luaL_optlstring(L, 5, "", &len);
  sb_buf h;
  sb_init(&h);
  if (lua_istable(L, 4)) {
    lua_pushnil(L);
    while (lua_next(L, 4)) {
      size_t kn, vn;
      if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING) {
        sb_free(&h);
        return luaL_argerror(L, 4, "headers must be { name = value } strings");
      }
      const char *k = lua_tolstring(L, -2, &kn), *v = lua_tolstring(L, -1, &vn);
      if (strpbrk(k, "\r\n:") || memchr(v, '\r', vn) || memchr(v, '\n', vn)) {
        sb_free(&h);
        return luaL_argerror(L, 4, "a header name or value holds a line break");
      }
      sb_add(&h, k, kn);
      sb_add(&h, ": ", 2);
      sb_add(&h, v, vn);
      sb_add(&h, "\r\n", 2);
      lua_pop(L, 1);
    }
  }
  int ok = !h.failed && mh_reply(b->s, (uint64_t)id, (int)status, sb_str(&h), body, len) == 0;
  sb_free(&h);
  if (!ok) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* server:stream(id) -> true, or nil when the request is not held;
   server:event(id, text) -> true, false when dropped (its client does not
   read), or nil when not held */
static int l_stream(lua_State *L) {
  server_box *b = check_server(L);
  lua_Integer id = luaL_checkinteger(L, 2);
  if (mh_stream(b->s, (uint64_t)id, NULL) != 0) lua_pushnil(L);
  else lua_pushboolean(L, 1);
  return 1;
}

static int l_event(lua_State *L) {
  server_box *b = check_server(L);
  lua_Integer id = luaL_checkinteger(L, 2);
  size_t len;
  const char *text = luaL_checklstring(L, 3, &len);
  luaL_argcheck(L, !memchr(text, '\n', len) && !memchr(text, '\r', len), 3, "an event's data is one line");
  int r = mh_event(b->s, (uint64_t)id, text, len);
  if (r < 0) lua_pushnil(L);
  else lua_pushboolean(L, r == 0);
  return 1;
}

static int l_gone(lua_State *L) {
  uint64_t id;
  if (!mh_gone(check_server(L)->s, &id)) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushinteger(L, (lua_Integer)id);
  return 1;
}

static int l_admit(lua_State *L) {
  server_box *b = check_server(L);
  int ok = b->in_flight < LIM_MCP_MAX_IN_FLIGHT;
  if (ok) b->in_flight++;
  lua_pushboolean(L, ok);
  return 1;
}

static int l_release(lua_State *L) {
  server_box *b = check_server(L);
  luaL_argcheck(L, b->in_flight > 0, 1, "no request in flight");
  b->in_flight--;
  return 0;
}

static int l_session_new(lua_State *L) {
  server_box *b = check_server(L);
  const char *version = luaL_checkstring(L, 2);
  const char *client = luaL_optstring(L, 3, "");
  char id[33];
  if (mh_session_new(b->s, version, client, id) != 0) return luaL_error(L, "no random bytes for a session id");
  if (lua_toboolean(L, 4)) *mh_session_flags(b->s, id) |= LMH_ELICIT;
  lua_pushstring(L, id);
  return 1;
}

static int l_session(lua_State *L) {
  server_box *b = check_server(L);
  const char *client = NULL;
  const char *v = mh_session(b->s, luaL_checkstring(L, 2), &client);
  if (!v) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, v);
  if (client && client[0]) lua_pushstring(L, client);
  else lua_pushnil(L);
  lua_pushboolean(L, (*mh_session_flags(b->s, luaL_checkstring(L, 2)) & LMH_ELICIT) != 0);
  return 3;
}

static int l_session_end(lua_State *L) {
  server_box *b = check_server(L);
  lua_pushboolean(L, mh_session_end(b->s, luaL_checkstring(L, 2)));
  return 1;
}

/* The self-pipe of core.mcp_catch_stop: written by a signal handler only,
   which may touch nothing else. Set once, for the process. */
static int stop_pipe[2] = { -1, -1 };

static void on_stop(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  ssize_t k = write(stop_pipe[1], &b, 1);
  (void)k;   /* a full pipe already says stop */
  errno = saved;
}

static int l_catch_stop(lua_State *L) {
  if (stop_pipe[0] < 0) {
    if (pipe(stop_pipe) != 0) return luaL_error(L, "pipe: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
      fcntl(stop_pipe[i], F_SETFD, FD_CLOEXEC);
      fcntl(stop_pipe[i], F_SETFL, fcntl(stop_pipe[i], F_GETFL) | O_NONBLOCK);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
  }
  lua_pushinteger(L, stop_pipe[0]);
  return 1;
}

static int l_stop_signal(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  unsigned char b;
  if (read(fd, &b, 1) != 1) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, b == SIGINT ? "SIGINT" : b == SIGTERM ? "SIGTERM" : "a signal");
  return 1;
}

void lmcphttp_open(lua_State *L) {
  static const luaL_Reg methods[] = {
    { "port", l_port },
    { "wait", l_wait },
    { "next", l_next },
    { "reply", l_reply },
    { "stream", l_stream },
    { "event", l_event },
    { "gone", l_gone },
    { "admit", l_admit },
    { "release", l_release },
    { "session_new", l_session_new },
    { "session", l_session },
    { "session_end", l_session_end },
    { NULL, NULL }
  };
  lr_new_metatable(L, LMH_SERVER, server_close, methods);   /* also its close method */
  lua_pushcfunction(L, l_mcp_http);
  lua_setfield(L, -2, "mcp_http");
  lua_pushcfunction(L, l_catch_stop);
  lua_setfield(L, -2, "mcp_catch_stop");
  lua_pushcfunction(L, l_stop_signal);
  lua_setfield(L, -2, "mcp_stop_signal");
}
