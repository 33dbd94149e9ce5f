/*
 * The one place where Lua versions differ for luma's C code. Everything else
 * calls these lc_ names, so that a LuaJIT (Lua 5.1 API) host needs changes
 * here only.
 */
#ifndef LUMA_COMPAT_H
#define LUMA_COMPAT_H

#include <lua.h>
#include <lauxlib.h>

#if LUA_VERSION_NUM >= 503

#define lc_rawlen(L, i) ((size_t)lua_rawlen((L), (i)))
#define lc_rawgeti(L, t, n) lua_rawgeti((L), (t), (n))
#define lc_rawget(L, t) lua_rawget((L), (t))
#define lc_isinteger(L, i) lua_isinteger((L), (i))
#define lc_setfuncs(L, l, nup) luaL_setfuncs((L), (l), (nup))
#define lc_newlib(L, l) luaL_newlib((L), (l))
#define lc_absindex(L, i) lua_absindex((L), (i))
#define lc_setmetatable(L, name) luaL_setmetatable((L), (name))
#define LC_SEARCHERS "searchers"
#define lc_tolstring(L, i, len) luaL_tolstring((L), (i), (len))

#else /* Lua 5.1 and LuaJIT: numbers are doubles; integral ones count as integers */

#include <math.h>

static inline size_t lc_rawlen(lua_State *L, int i) { return lua_objlen(L, i); }
static inline int lc_rawgeti(lua_State *L, int t, lua_Integer n) { lua_rawgeti(L, t, (int)n); return lua_type(L, -1); }
static inline int lc_rawget(lua_State *L, int t) { lua_rawget(L, t); return lua_type(L, -1); }
static inline int lc_isinteger(lua_State *L, int i) {
  if (lua_type(L, i) != LUA_TNUMBER) return 0;
  lua_Number n = lua_tonumber(L, i);
  return n == floor(n) && n >= -9007199254740992.0 && n <= 9007199254740992.0;
}
static inline void lc_setfuncs(lua_State *L, const luaL_Reg *l, int nup) {
  for (; l->name; l++) {
    for (int i = 0; i < nup; i++) lua_pushvalue(L, -nup);
    lua_pushcclosure(L, l->func, nup);
    lua_setfield(L, -(nup + 2), l->name);
  }
  lua_pop(L, nup);
}
#define lc_newlib(L, l) (lua_newtable(L), lc_setfuncs((L), (l), 0))
#define lc_absindex(L, i) (((i) > 0 || (i) <= LUA_REGISTRYINDEX) ? (i) : lua_gettop(L) + (i) + 1)
#define lc_setmetatable(L, name) (luaL_getmetatable((L), (name)), lua_setmetatable((L), -2))
#define LC_SEARCHERS "loaders"
/* luaL_tolstring of 5.2: __tostring, else the value's usual text */
static inline const char *lc_tolstring(lua_State *L, int i, size_t *len) {
  if (!luaL_callmeta(L, i, "__tostring")) {
    switch (lua_type(L, i)) {
      case LUA_TNUMBER: case LUA_TSTRING: lua_pushvalue(L, i); break;
      case LUA_TBOOLEAN: lua_pushstring(L, lua_toboolean(L, i) ? "true" : "false"); break;
      case LUA_TNIL: lua_pushliteral(L, "nil"); break;
      default: lua_pushfstring(L, "%s: %p", luaL_typename(L, i), lua_topointer(L, i)); break;
    }
  }
  return lua_tolstring(L, -1, len);
}
#ifndef LUA_OK
#define LUA_OK 0
#endif

#endif

/* Pushes the table kept in the registry under the address `key`, and
   returns 0; when there is none yet, pushes a new one, keeps it there and
   returns 1, for the caller to fill (a metatable made once per state, found
   without a lookup by name). */
static inline int lc_registry_table(lua_State *L, const void *key) {
  lua_pushlightuserdata(L, (void *)key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  if (!lua_isnil(L, -1)) return 0;
  lua_pop(L, 1);
  lua_newtable(L);
  lua_pushlightuserdata(L, (void *)key);
  lua_pushvalue(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
  return 1;
}

/* JSON null, as lua-cjson represents it: a light userdata holding NULL. */
static inline int lc_isnull(lua_State *L, int i) {
  return lua_type(L, i) == LUA_TLIGHTUSERDATA && lua_touserdata(L, i) == NULL;
}

#endif
