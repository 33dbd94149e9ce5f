/*
 * The luma-lua executable: a Lua 5.4 host with luma.core built in. It finds
 * the Lua half of luma (the lua/luma folder) next to itself, then hands the
 * command line to luma.cli.
 */
#define _POSIX_C_SOURCE 200809L

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "lineedit.h"
#include "lcore.h"

#ifndef LUMA_LUADIR
#define LUMA_LUADIR "/usr/local/share/lua/5.4"
#endif

/* The directory holding luma/init.lua: $LUMA_LUADIR, ../lua next to a
   development build, ../share/lua/5.4 next to an installed command (so that
   any PREFIX works, whatever the build was told), or the share directory
   the build was told. */
static void lua_dir(char *out, size_t n) {
  const char *env = getenv("LUMA_LUADIR");
  if (env && *env) { snprintf(out, n, "%s", env); return; }
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      char probe[PATH_MAX + 32];
      static const char *const near[] = { "/../lua", "/../share/lua/5.4" };
      for (int i = 0; i < 2; i++) {
        snprintf(probe, sizeof probe, "%s%s/luma/init.lua", exe, near[i]);
        size_t a = strlen(exe), b = strlen(near[i]);
        if (access(probe, R_OK) == 0 && a + b < n) {
          memcpy(out, exe, a);
          memcpy(out + a, near[i], b + 1);
          return;
        }
      }
    }
  }
  snprintf(out, n, "%s", LUMA_LUADIR);
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

static int run(lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = lua_touserdata(L, 2);
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_luma_core);
  lua_setfield(L, -2, "luma.core");
  lua_pushcfunction(L, luaopen_luma_lineedit);
  lua_setfield(L, -2, "luma.lineedit");
  lua_pop(L, 1);
  char dir[PATH_MAX];
  lua_dir(dir, sizeof dir);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 2);
  lua_getglobal(L, "require");
  lua_pushstring(L, "luma.cli");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "main");
  lua_createtable(L, argc, 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i);
  }
  lua_call(L, 1, 1);
  return 1;
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (!L) { fputs("luma-lua: cannot create a Lua state (out of memory)\n", stderr); return 70; }
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, run);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = lua_pcall(L, 2, 1, 1);
  int code;
  if (status != LUA_OK) {
    fprintf(stderr, "luma-lua: internal error: %s\n", lua_tostring(L, -1));
    code = 70;
  } else {
    code = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
  }
  fflush(stdout);
  lua_close(L);
  return code;
}
