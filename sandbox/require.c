#define _XOPEN_SOURCE 700
/* The rules of `require` in a module's state: the listed dependencies read
   as text from under their root, or (strict, with no list) any Lua file of
   the project; never a C library, never the current folder. */
#include "require.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "bounded.h"
#include "compat.h"
#include "luma_limits.h"

/* The rules of a state, kept in its registry. */
static const char deps_key = 0;

char *sx_read_source(const char *path, size_t *len, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) { snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno)); return NULL; }
  char *buf = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n == cap) {
      if (cap >= LIM_MODULE_MAX_SOURCE) {
        snprintf(err, errlen, "'%s' is larger than %d bytes", path, LIM_MODULE_MAX_SOURCE);
        free(buf);
        fclose(f);
        return NULL;
      }
      cap = cap ? cap * 2 : 8192;
      char *more = realloc(buf, cap + 1);
      if (!more) { free(buf); fclose(f); snprintf(err, errlen, "out of memory"); return NULL; }
      buf = more;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) { free(buf); snprintf(err, errlen, "cannot read '%s'", path); return NULL; }
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* Whether path (resolved) lies inside dir (resolved). */
static int inside(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0' || (n == 1 && dir[0] == '/'));
}

/* The searcher that replaces all others when a module lists dependencies:
   only those names, read as text from under dependency_root. */
static int dependency_searcher(lua_State *L) {
  size_t namelen;
  const char *name = luaL_checklstring(L, 1, &namelen);
  if (namelen == 0 || memchr(name, '\0', namelen)) {
    lua_pushliteral(L, "\n\tnot a module name");
    return 1;
  }
  lua_pushlightuserdata(L, (void *)&deps_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  int rules = lua_gettop(L);
  lua_getfield(L, rules, "allowed");
  if (!lua_isnil(L, -1)) {
    lua_getfield(L, -1, name);
    int allowed = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (!allowed) {
      lua_pushfstring(L, "\n\tmodule '%s' is not among the tool module's dependencies", name);
      return 1;
    }
  }
  lua_pop(L, 1);
  lua_getfield(L, rules, "root");
  const char *root = lua_tostring(L, -1);
  if (!root) {
    lua_pushliteral(L, "\n\tno folder to load modules from");
    return 1;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addstring(&b, root);
  luaL_addchar(&b, '/');
  for (size_t i = 0; i < namelen; i++) luaL_addchar(&b, name[i] == '.' ? '/' : name[i]);
  luaL_addstring(&b, ".lua");
  luaL_pushresult(&b);
  const char *file = lua_tostring(L, -1);
  char real[PATH_MAX];
  if (!realpath(file, real)) {
    lua_pushfstring(L, "\n\tno file '%s'", file);
    return 1;
  }
  if (!inside(real, root)) {
    lua_pushfstring(L, "\n\t'%s' lies outside '%s'", real, root);
    return 1;
  }
  lua_pushfstring(L, "@%s", real);   /* before the file is read: this may raise */
  lua_pushstring(L, real);
  char err[PATH_MAX + 128];
  size_t len;
  char *src = sx_read_source(real, &len, err, sizeof err);
  if (!src) return luaL_error(L, "%s", err);
  int status = sx_load_text(L, src, len, lua_tostring(L, -2));
  free(src);
  if (status != LUA_OK) return lua_error(L);
  lua_insert(L, -2);
  return 2;
}

void sx_set_searchers(lua_State *L, int package_idx) {
  package_idx = lc_absindex(L, package_idx);
  lua_newtable(L);
  lua_getfield(L, package_idx, LC_SEARCHERS);
  lua_rawgeti(L, -1, 1);     /* the preload searcher stays first */
  lua_rawseti(L, -3, 1);
  lua_pop(L, 1);
  lua_pushcfunction(L, dependency_searcher);
  lua_rawseti(L, -2, 2);
  lua_setfield(L, package_idx, LC_SEARCHERS);
}

/* In a state with the full library, the searcher becomes the only one
   after preload; a strict state has it already (its `package` is gone). */
void sx_open_require(lua_State *L, const sx_require *rules) {
  lua_pushlightuserdata(L, (void *)&deps_key);
  lua_createtable(L, 0, 2);
  if (rules->dependencies) {
    lua_newtable(L);
    for (int i = 0; i < rules->ndependencies; i++) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, rules->dependencies[i]);
    }
    lua_setfield(L, -2, "allowed");
  }
  if (rules->root) {
    lua_pushstring(L, rules->root);
    lua_setfield(L, -2, "root");
  }
  lua_rawset(L, LUA_REGISTRYINDEX);
  lua_getglobal(L, "package");
  if (lua_istable(L, -1)) {
    sx_set_searchers(L, -1);
    lua_pushnil(L);
    lua_setfield(L, -2, "loadlib");
  }
  lua_pop(L, 1);
}
