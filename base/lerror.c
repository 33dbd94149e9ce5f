#include "lerror.h"

#include <stddef.h>
#include <string.h>

#include "compat.h"

void le_push(lua_State *L, const char *code, const char *message, int retryable, int details) {
  if (details) details = lc_absindex(L, details);
  luaL_checkstack(L, 4, "building an error");
  lua_createtable(L, 0, 5);
  lua_pushstring(L, code);
  lua_setfield(L, -2, "code");
  lua_pushstring(L, message);
  lua_setfield(L, -2, "message");
  lua_pushboolean(L, retryable);
  lua_setfield(L, -2, "retryable");
  if (details) {
    lua_pushvalue(L, details);
    lua_setfield(L, -2, "details");
  }
  le_push_metatable(L);
  lua_setmetatable(L, -2);
}

int le_raise(lua_State *L, const char *code, const char *message, int details) {
  le_push(L, code, message, 0, details);
  return lua_error(L);
}

void le_push_code(lua_State *L, le_code code, const char *message, int details) {
  le_push(L, le_name(code), message, le_default_retryable(code), details);
}

int le_raise_code(lua_State *L, le_code code, const char *message, int details) {
  le_push_code(L, code, message, details);
  return lua_error(L);
}

/* Lazy errors: an error not yet completed holds a userdata with its fill
   function and data under a private key (the address of lazy_key), which
   completing it removes; a completed error is an ordinary one. Holding the
   data in the error itself costs no weak table, whose entries the collector
   would have to walk and clear as ephemerons on every cycle. */
static const char lazy_key = 0;

/* The first field of a lazy error's data: the private key can be read from
   Lua (next on an unread error) and another userdata put under it, which
   must not be taken for the data. Lua code cannot write a userdata's bytes. */
#define LE_LAZY_MAGIC 0x6c756d614c617a79ull   /* "lumaLazy" */

typedef struct le_lazy {
  unsigned long long magic;
  le_fill fill;
  const char *code;           /* a constant */
  int retryable;
  /* the caller's data follows, aligned for any type */
  union { double d; void *p; long long i; } data[1];
} le_lazy;

static int error_index(lua_State *L);
#if LUA_VERSION_NUM >= 502
static int error_pairs(lua_State *L);
#endif

void *le_push_lazy(lua_State *L, const char *code, int retryable, le_fill fill, size_t len) {
  luaL_checkstack(L, 5, "building an error");
  /* one slot: the private key, until completed (then code, message,
     retryable and details take the table's room as it grows) */
  lua_createtable(L, 0, 1);
  le_push_metatable(L);
  lua_setmetatable(L, -2);
  lua_pushlightuserdata(L, (void *)&lazy_key);
  le_lazy *z = lua_newuserdata(L, offsetof(le_lazy, data) + (len ? len : 1));
  z->magic = LE_LAZY_MAGIC;
  z->fill = fill;
  z->code = code;
  z->retryable = retryable;
  lua_rawset(L, -3);
  return z->data;
}

/* Completes the lazy error at idx (absolute); 0 when it is not one. */
static int complete(lua_State *L, int idx) {
  lua_pushlightuserdata(L, (void *)&lazy_key);
  lc_rawget(L, idx);
  le_lazy *z = lua_type(L, -1) == LUA_TUSERDATA && lc_rawlen(L, -1) >= offsetof(le_lazy, data)
                   ? lua_touserdata(L, -1) : NULL;
  if (!z || z->magic != LE_LAZY_MAGIC) { lua_pop(L, 1); return 0; }
  /* forgotten first, so that reading the error while it is filled is plain;
     the userdata stays on the stack until the fill is done */
  lua_pushlightuserdata(L, (void *)&lazy_key);
  lua_pushnil(L);
  lua_rawset(L, idx);
  /* a field the caller set before reading any keeps its value */
  lua_pushliteral(L, "code");
  lc_rawget(L, idx);
  lua_pushliteral(L, "retryable");
  lc_rawget(L, idx);
  int code_set = !lua_isnil(L, -2), retryable_set = !lua_isnil(L, -1);
  lua_pop(L, 2);
  if (!code_set) {
    lua_pushstring(L, z->code);
    lua_setfield(L, idx, "code");
  }
  if (!retryable_set) {
    lua_pushboolean(L, z->retryable);
    lua_setfield(L, idx, "retryable");
  }
  z->fill(L, idx, z->data);
  lua_pop(L, 1);
  return 1;
}

int le_is_error(lua_State *L, int idx) {
  idx = lc_absindex(L, idx);
  if (!lua_getmetatable(L, idx)) return 0;
  le_push_metatable(L);
  int same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  if (same && lua_type(L, idx) == LUA_TTABLE) complete(L, idx);
  return same;
}

/* __index: only a field that is not there gets here */
static int error_index(lua_State *L) {
  if (lua_type(L, 1) != LUA_TTABLE || !complete(L, 1)) return 0;
  lua_settop(L, 2);
  lc_rawget(L, 1);
  return 1;
}

#if LUA_VERSION_NUM >= 502
static int error_next(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);
  if (lua_next(L, 1)) return 2;
  lua_pushnil(L);
  return 1;
}

static int error_pairs(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  complete(L, 1);
  lua_pushcfunction(L, error_next);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}
#endif

/* Reads fields raw: an error object never runs code of its own when printed. */
static const char *raw_string(lua_State *L, int t, const char *key, const char *fallback) {
  lua_pushstring(L, key);
  lc_rawget(L, t);
  const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : fallback;
  lua_pop(L, 1);  /* the string stays alive: it is still referenced by the table */
  return s;
}

static int error_tostring(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  complete(L, 1);
  const char *code = raw_string(L, 1, "code", "ERROR");
  const char *message = raw_string(L, 1, "message", "");
  lua_pushfstring(L, "[%s] %s", code, message);
  return 1;
}

/* Errors are made often (one per failed validation): the metatable is found
   by the address of this key rather than by its name. */
static const char metatable_key = 0;

void le_push_metatable(lua_State *L) {
  if (!lc_registry_table(L, &metatable_key)) return;
  lua_pushcfunction(L, error_tostring);
  lua_setfield(L, -2, "__tostring");
  /* what completes a lazy error; on any other error, __index finds no data
     and gives nil, and __pairs walks it as pairs would */
  lua_pushcfunction(L, error_index);
  lua_setfield(L, -2, "__index");
#if LUA_VERSION_NUM >= 502
  lua_pushcfunction(L, error_pairs);
  lua_setfield(L, -2, "__pairs");
#endif
  lua_pushstring(L, LE_METATABLE);
  lua_setfield(L, -2, "__name");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  /* also under its name, as luaL_newmetatable would */
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, LE_METATABLE);
}

/* core.error{ code=, message=, retryable=, details=, tool= } -> error object;
   without retryable, a code of the catalogue takes its default */
static int l_error(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  const char *code = raw_string(L, 1, "code", NULL);
  if (!code) return luaL_argerror(L, 1, "an error needs a string code");
  const char *message = raw_string(L, 1, "message", "");
  lua_pushstring(L, "retryable");
  lc_rawget(L, 1);
  le_code known;
  int retryable = lua_isnil(L, -1) ? le_lookup(code, &known) && le_default_retryable(known)
                                   : lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_pushstring(L, "details");
  lc_rawget(L, 1);
  int details = lua_isnil(L, -1) ? 0 : lua_gettop(L);
  le_push(L, code, message, retryable, details);
  lua_pushstring(L, "tool");
  lc_rawget(L, 1);
  if (lua_type(L, -1) == LUA_TSTRING) lua_setfield(L, -2, "tool");
  else lua_pop(L, 1);
  return 1;
}

static int l_is_error(lua_State *L) {
  lua_pushboolean(L, le_is_error(L, 1));
  return 1;
}

static void push_catalogue(lua_State *L) {
  lua_createtable(L, 0, LE_NCODES);
  for (int i = 0; i < LE_NCODES; i++) {
    le_code c = (le_code)i;
    lua_createtable(L, 0, 3);
    lua_pushstring(L, le_meaning(c));
    lua_setfield(L, -2, "meaning");
    lua_pushboolean(L, le_default_retryable(c));
    lua_setfield(L, -2, "retryable");
    if (le_template(c)) {
      /* as Lua's string.format reads it: it has no length modifiers */
      luaL_gsub(L, le_template(c), "%lld", "%d");
      lua_setfield(L, -2, "template");
    }
    lua_setfield(L, -2, le_name(c));
  }
}

void le_open(lua_State *L) {
  static const luaL_Reg fns[] = {
    { "error", l_error },
    { "is_error", l_is_error },
    { NULL, NULL }
  };
  lc_setfuncs(L, fns, 0);
  push_catalogue(L);
  lua_setfield(L, -2, "errors");
}
