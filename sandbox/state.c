/* Making a module's Lua state: its allocator, libraries, the handler-side
   `luma` table, the abort signal and the deadline hook. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lualib.h>

#include "compat.h"
#include "ljson.h"

/* The hook looks at the clock every this many VM instructions. */
#define SX_HOOK_COUNT 1000

long long sx_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Counts what the state holds, and refuses to grow past the limit. */
static void *sx_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  sx_module *m = ud;
  size_t old = ptr ? osize : 0;   /* with ptr NULL, osize is a type tag */
  if (nsize == 0) {
    free(ptr);
    m->memory -= old;
    return NULL;
  }
  if (nsize > old && m->memory_limit && m->memory - old + nsize > m->memory_limit) {
    m->out_of_memory = 1;
    return NULL;
  }
  void *p = realloc(ptr, nsize);
  if (!p) {
    /* shrinking never fails in the eyes of Lua: keep the old block */
    if (nsize <= old) return ptr;
    return NULL;
  }
  m->memory = m->memory - old + nsize;
  return p;
}

sx_module *sx_module_of(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  return ud;
}

static int aborted(const sx_module *m) {
  return m->expired || (m->deadline_ns && sx_now_ns() >= m->deadline_ns);
}

static const char tool_error_key = 0;

static void push_tool_error_mt(lua_State *L) {
  lua_pushlightuserdata(L, (void *)&tool_error_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
}

int sx_is_tool_error(lua_State *L, int idx) {
  if (!lua_getmetatable(L, idx)) return 0;
  push_tool_error_mt(L);
  int same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

static void set_field(lua_State *L, const char *key, const char *value) {
  lua_pushstring(L, value);
  lua_setfield(L, -2, key);
}

static void new_tool_error(lua_State *L, const char *code, const char *message, int retryable) {
  lua_createtable(L, 0, 4);
  set_field(L, "code", code);
  set_field(L, "message", message);
  lua_pushboolean(L, retryable);
  lua_setfield(L, -2, "retryable");
  push_tool_error_mt(L);
  lua_setmetatable(L, -2);
}

int sx_raise_timeout(lua_State *L) {
  sx_module *m = sx_module_of(L);
  m->expired = 1;
  lua_pushfstring(L, "Tool '%s' timed out after %d ms.", m->tool ? m->tool : "?", (int)m->timeout_ms);
  new_tool_error(L, "TOOL_TIMEOUT", lua_tostring(L, -1), 0);
  return lua_error(L);
}

static void deadline_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  sx_module *m = sx_module_of(L);
  /* sticky: once past the deadline every tick raises again, so a pcall
     inside the handler cannot swallow the stop for good */
  if (m->deadline_ns && sx_now_ns() >= m->deadline_ns) sx_raise_timeout(L);
}

/* luma.ToolError{ code =, message =, retryable =, details = } */
static int l_tool_error(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "code");
  if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "luma.ToolError needs a string code");
  lua_getfield(L, 1, "message");
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "luma.ToolError's message must be a string");
  lua_getfield(L, 1, "retryable");
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TBOOLEAN) return luaL_error(L, "luma.ToolError's retryable must be a boolean");
  new_tool_error(L, lua_tostring(L, -3), lua_isnil(L, -2) ? "" : lua_tostring(L, -2), lua_toboolean(L, -1));
  lua_getfield(L, 1, "details");
  lua_setfield(L, -2, "details");
  return 1;
}

static int l_tool_error_tostring(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_pushstring(L, "code");
  lc_rawget(L, 1);
  lua_pushstring(L, "message");
  lc_rawget(L, 1);
  lua_pushfstring(L, "[%s] %s", lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "ERROR",
                  lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "");
  return 1;
}

/* print writes to stderr: stdout belongs to the host (results, protocols). */
static int l_print(lua_State *L) {
  int n = lua_gettop(L);
  for (int i = 1; i <= n; i++) {
    size_t len;
    const char *s = lc_tolstring(L, i, &len);
    if (i > 1) fputc('\t', stderr);
    fwrite(s, 1, len, stderr);
    lua_pop(L, 1);
  }
  fputc('\n', stderr);
  fflush(stderr);
  return 0;
}

static int l_signal_check(lua_State *L) {
  if (aborted(sx_module_of(L))) return sx_raise_timeout(L);
  return 0;
}

/* signal.aborted, signal.reason, signal:check(), signal.remaining_ms */
static int l_signal_index(lua_State *L) {
  sx_module *m = sx_module_of(L);
  const char *key = lua_tostring(L, 2);
  if (!key) return 0;
  if (strcmp(key, "aborted") == 0) {
    lua_pushboolean(L, aborted(m));
  } else if (strcmp(key, "reason") == 0) {
    if (aborted(m)) lua_pushstring(L, "timeout"); else lua_pushnil(L);
  } else if (strcmp(key, "check") == 0) {
    lua_pushcfunction(L, l_signal_check);
  } else if (strcmp(key, "remaining_ms") == 0) {
    if (!m->deadline_ns) return 0;
    long long left = (m->deadline_ns - sx_now_ns()) / 1000000;
    lua_pushinteger(L, left > 0 ? (lua_Integer)left : 0);
  } else {
    return 0;
  }
  return 1;
}

void sx_open_luma(lua_State *L) {
  lua_pushlightuserdata(L, (void *)&tool_error_key);
  lua_createtable(L, 0, 3);
  lua_pushcfunction(L, l_tool_error_tostring);
  lua_setfield(L, -2, "__tostring");
  set_field(L, "__name", "luma.ToolError");
  lua_rawset(L, LUA_REGISTRYINDEX);

  lua_createtable(L, 0, 4);
  lua_pushcfunction(L, l_tool_error);
  lua_setfield(L, -2, "ToolError");
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  lj_push_array_mt(L);
  lua_setfield(L, -2, "array_mt");
  lua_pushvalue(L, -1);
  lua_setglobal(L, "luma");
  /* require "luma" in a module gives the same table */
  lua_getglobal(L, "package");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "loaded");
    if (lua_istable(L, -1)) {
      lua_pushvalue(L, -3);
      lua_setfield(L, -2, "luma");
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
}

static int l_expired(lua_State *L) {
  lua_pushboolean(L, sx_module_of(L)->expired);
  return 1;
}

/* A stop at the deadline must not be swallowed: once it happened, pcall,
   xpcall and coroutine.resume pass the error on instead of returning it. The
   wrappers are Lua functions so that yields through them still work. */
static const char rethrow_chunk[] =
  "local expired, pcall, xpcall, resume, error = ...\n"
  "local function pass(ok, ...)\n"
  "  if not ok and expired() then error((...), 0) end\n"
  "  return ok, ...\n"
  "end\n"
  "_G.pcall = function(f, ...) return pass(pcall(f, ...)) end\n"
  "_G.xpcall = function(f, h, ...) return pass(xpcall(f, h, ...)) end\n"
  "coroutine.resume = function(co, ...) return pass(resume(co, ...)) end\n";

static void wrap_protected_calls(lua_State *L) {
  if (luaL_loadbufferx(L, rethrow_chunk, sizeof rethrow_chunk - 1, "=luma", "t") != LUA_OK) lua_error(L);
  lua_pushcfunction(L, l_expired);
  lua_getglobal(L, "pcall");
  lua_getglobal(L, "xpcall");
  lua_getglobal(L, "coroutine");
  lua_getfield(L, -1, "resume");
  lua_remove(L, -2);
  lua_getglobal(L, "error");
  lua_call(L, 5, 0);
}

static int open_libs(lua_State *L) {
  sx_module *m = lua_touserdata(L, 1);
  luaL_openlibs(L);
  sx_open_luma(L);
  lua_pushcfunction(L, l_print);
  lua_setglobal(L, "print");
  wrap_protected_calls(L);
  lua_newuserdata(L, 1);
  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, l_signal_index);
  lua_setfield(L, -2, "__index");
  set_field(L, "__name", "luma.Signal");
  lua_setmetatable(L, -2);
  m->signal_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

int sx_state_open(sx_module *m, char *err, size_t errlen) {
  m->L = lua_newstate(sx_alloc, m);
  if (!m->L) { snprintf(err, errlen, "out of memory"); return -1; }
  lua_pushcfunction(m->L, open_libs);
  lua_pushlightuserdata(m->L, m);
  if (lua_pcall(m->L, 1, 0, 0) != LUA_OK) {
    snprintf(err, errlen, "cannot open a Lua state: %s", lua_tostring(m->L, -1));
    return -1;
  }
  lua_sethook(m->L, deadline_hook, LUA_MASKCOUNT, SX_HOOK_COUNT);
  return 0;
}
