#define _XOPEN_SOURCE 700
/* io in a strict state: files inside the project only, no writes to code or
   configuration, at most 32 open at once, and never the host's stdout. */
#include "strict.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>
#include <lualib.h>

#include "compat.h"
#include "luma_limits.h"

#if LUA_VERSION_NUM >= 504

/* The project's root, for io: kept in the registry under this key's address. */
static const char root_key = 0;

/* What a strict module may not write, even inside the project: code and
   configuration, which the next load would trust. */
static int holds_code_or_config(const char *name) {
  size_t n = strlen(name);
  return (n >= 4 && strcmp(name + n - 4, ".lua") == 0) || (n >= 5 && strcmp(name + n - 5, ".luma") == 0) ||
         strcmp(name, "luma.config.json") == 0 || strncmp(name, ".luma", 5) == 0;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* The path a strict module names, made absolute against the project's root
   (the process's working folder is the host's, not the module's), pushed
   on the stack; or NULL with the reason in *why. Refused: what does not lie
   inside the project, and, for writing, code and configuration. A file that
   exists is resolved with its symlinks; a new one by its folder, and a
   symlink that leads nowhere is refused, as opening it would create its
   target. The kernel's views of processes and devices are never inside,
   whatever the project (the environment of the process can be read from
   /proc). */
static const char *project_path(lua_State *L, const char *path, int write, const char **why) {
  *why = "outside the project, not available to a strict tool module";
  lua_pushlightuserdata(L, (void *)&root_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  const char *root = lua_tostring(L, -1);
  if (!root || !*path) {
    lua_pop(L, 1);
    return NULL;
  }
  if (path[0] == '/') lua_pushstring(L, path);
  else lua_pushfstring(L, "%s/%s", root, path);
  const char *full = lua_tostring(L, -1);
  char real[PATH_MAX];
  struct stat st;
  int exists = realpath(full, real) != NULL;
  if (!exists) {
    char dir[PATH_MAX];
    const char *slash = strrchr(full, '/');
    if (slash == full) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - full), full);
    if (lstat(full, &st) == 0 || !realpath(dir, real)) goto refused;
  }
  static const char *const never[] = { "/proc", "/sys", "/dev", NULL };
  for (const char *const *n = never; *n; n++) {
    size_t k = strlen(*n);
    if (strncmp(real, *n, k) == 0 && (real[k] == '/' || real[k] == '\0')) goto refused;
  }
  size_t n = strlen(root);
  if (!((n == 1 && root[0] == '/') || (strncmp(real, root, n) == 0 && (real[n] == '/' || real[n] == '\0'))))
    goto refused;
  if (write && holds_code_or_config(base_name(exists ? real : full))) {
    *why = "a strict tool module cannot write code or configuration (*.lua, *.luma, luma.config.json, .luma*)";
    goto refused;
  }
  lua_remove(L, -2);
  return full;
refused:
  lua_pop(L, 2);
  return NULL;
}

/* The files a strict module has opened, in a weak table: at most
   LIM_MAX_OPEN_FILES are open at once, so that a module cannot take every
   file descriptor of the process. */
static const char files_key = 0;

static int open_files(lua_State *L) {
  lua_pushlightuserdata(L, (void *)&files_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushlightuserdata(L, (void *)&files_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
  }
  int files = lua_gettop(L), count = 0;
  lua_pushnil(L);
  while (lua_next(L, files)) {
    luaL_Stream *f = luaL_testudata(L, -2, LUA_FILEHANDLE);
    if (f && f->closef) count++;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return count;
}

static int room_for_a_file(lua_State *L) {
  if (open_files(L) < LIM_MAX_OPEN_FILES) return 1;
  lua_gc(L, LUA_GCCOLLECT, 0);   /* files no longer reachable are closed */
  return open_files(L) < LIM_MAX_OPEN_FILES;
}

static void remember_file(lua_State *L, int idx) {
  if (!luaL_testudata(L, idx, LUA_FILEHANDLE)) return;
  idx = lua_absindex(L, idx);
  lua_pushlightuserdata(L, (void *)&files_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, idx);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

#define TOO_MANY_FILES "too many open files (at most %d in a strict tool module)"

/* Calls the original function (upvalue 1) with the first argument replaced
   by the checked path on the top of the stack. */
static int call_with_path(lua_State *L) {
  lua_replace(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

static int s_io_open(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  const char *mode = luaL_optstring(L, 2, "r");
  int write = strpbrk(mode, "wa+") != NULL;
  const char *why;
  const char *full = project_path(L, path, write, &why);
  if (!full) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", path, why);
    return 2;
  }
  if (!room_for_a_file(L)) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: " TOO_MANY_FILES, path, LIM_MAX_OPEN_FILES);
    return 2;
  }
  int n = call_with_path(L);
  remember_file(L, 1);
  return n;
}

static int s_io_lines(lua_State *L) {
  if (lua_isnoneornil(L, 1)) return luaL_error(L, "io.lines needs a file name in a strict tool module");
  const char *path = luaL_checkstring(L, 1);
  const char *why;
  const char *full = project_path(L, path, 0, &why);
  if (!full) return luaL_error(L, "%s: %s", path, why);
  if (!room_for_a_file(L)) return luaL_error(L, "%s: " TOO_MANY_FILES, path, LIM_MAX_OPEN_FILES);
  int n = call_with_path(L);
  if (n >= 4) remember_file(L, 4);   /* Lua 5.4 returns the file as its fourth value */
  return n;
}

/* io.close(file): with no file, the original would close the host's stdout */
static int s_io_close(lua_State *L) {
  luaL_checkudata(L, 1, LUA_FILEHANDLE);
  lua_settop(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* Keeps only `names` of the table on top. */
static void keep(lua_State *L, const char *const *names) {
  lua_newtable(L);
  for (; *names; names++) {
    lua_getfield(L, -2, *names);
    lua_setfield(L, -2, *names);
  }
  lua_remove(L, -2);
}

/* Pushes the io table of a strict state: type, and open, lines and close
   checked; files are looked up from project_root (NULL: nowhere). */
void sx_push_strict_io(lua_State *L, const char *project_root) {
  static const char *const io_names[] = { "type", NULL };
  lua_pushlightuserdata(L, (void *)&root_key);
  lua_pushstring(L, project_root ? project_root : "/nonexistent");
  lua_rawset(L, LUA_REGISTRYINDEX);
  luaL_requiref(L, "io", luaopen_io, 0);
  int full = lua_gettop(L);
  lua_pushvalue(L, full);
  keep(L, io_names);
  lua_getfield(L, full, "open");
  lua_pushcclosure(L, s_io_open, 1);
  lua_setfield(L, -2, "open");
  lua_getfield(L, full, "lines");
  lua_pushcclosure(L, s_io_lines, 1);
  lua_setfield(L, -2, "lines");
  lua_getfield(L, full, "close");
  lua_pushcclosure(L, s_io_close, 1);
  lua_setfield(L, -2, "close");
  lua_remove(L, full);
}

#endif
