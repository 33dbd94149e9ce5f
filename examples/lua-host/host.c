/*
 * A C program that runs its own Lua 5.4 state, as games do, and lets its
 * scripts use luma through `require "luma"`. Each frame it calls the
 * script's update(frame); the script starts tool calls and polls them, so a
 * frame never waits for a handler.
 *
 *   cc host.c -I/usr/include/lua5.4 -llua5.4 -o lua-host
 *   ./lua-host game.lua
 *
 * LUMA_LUADIR and LUMA_CPATH say where luma's Lua files and its C module
 * are when they are not installed where Lua looks by default.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

/* package.path and package.cpath get the folders the environment names */
static void add_paths(lua_State *L) {
  const char *dir = getenv("LUMA_LUADIR"), *cpath = getenv("LUMA_CPATH");
  lua_getglobal(L, "package");
  if (dir) {
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir, lua_tostring(L, -1));
    lua_setfield(L, -3, "path");
    lua_pop(L, 1);
  }
  if (cpath) {
    lua_getfield(L, -1, "cpath");
    lua_pushfstring(L, "%s;%s", cpath, lua_tostring(L, -1));
    lua_setfield(L, -3, "cpath");
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

static void sleep_ms(long ms) {
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
  const char *script = argc > 1 ? argv[1] : "game.lua";
  lua_State *L = luaL_newstate();
  if (!L) return 1;
  luaL_openlibs(L);
  add_paths(L);
  if (luaL_dofile(L, script) != LUA_OK) {
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
    lua_close(L);
    return 1;
  }
  int game = lua_gettop(L), status = 0;
  for (int frame = 1; frame <= 600; frame++) {
    lua_getfield(L, game, "update");
    lua_pushinteger(L, frame);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
      fprintf(stderr, "frame %d: %s\n", frame, lua_tostring(L, -1));
      status = 1;
      break;
    }
    int more = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (!more) break;
    sleep_ms(16);   /* the rest of the frame: drawing, input */
  }
  lua_close(L);
  return status;
}
