/* luaopen_luma_core: one entry that opens each concern's binding. */
#include "luma.h"

#include "compat.h"
#include "lerror.h"
#include "lprogram.h"

LUMA_API int luaopen_luma_core(lua_State *L) {
  lua_newtable(L);
  lp_open(L);
  le_open(L);
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  lua_pushstring(L, LUMA_VERSION);
  lua_setfield(L, -2, "version");
  lua_pushstring(L, LUA_RELEASE);
  lua_setfield(L, -2, "lua_release");
  return 1;
}
