#define _XOPEN_SOURCE 700
/* Loading a tool module: integrity, text-only chunks, the dependency
   allowlist for `require`, and the lookup of its exported handlers. */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "compat.h"
#include "crypto.h"

/* A module or dependency file larger than this is refused. */
#define SX_MAX_SOURCE (16u << 20)
/* Running a module's top-level code may take this long. */
#define SX_LOAD_TIMEOUT_MS 10000

/* The dependency rules of a module's state, kept in its registry. */
static const char deps_key = 0;

static char *read_file(const char *path, size_t *len, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) { snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno)); return NULL; }
  char *buf = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n == cap) {
      if (cap >= SX_MAX_SOURCE) {
        snprintf(err, errlen, "'%s' is larger than %u bytes", path, SX_MAX_SOURCE);
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

/* "sha256-<base64>" of the bytes must equal the manifest's integrity. */
static int check_integrity(const char *path, const char *want, const char *src, size_t len, char *err, size_t errlen) {
  if (strncmp(want, "sha256-", 7) != 0) {
    snprintf(err, errlen, "the integrity of '%s' must be written sha256-<base64>", path);
    return -1;
  }
  unsigned char digest[32];
  char b64[64];
  cr_sha256(src, len, digest);
  size_t n = cr_base64_encode(digest, sizeof digest, b64, sizeof b64);
  if (n == 0 || strlen(want + 7) != n || memcmp(want + 7, b64, n) != 0) {
    snprintf(err, errlen, "integrity check failed for '%s': expected %s, got sha256-%.*s", path, want, (int)n, b64);
    return -1;
  }
  return 0;
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
  lua_pushlightuserdata(L, (void *)&deps_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  int rules = lua_gettop(L);
  lua_getfield(L, rules, "allowed");
  lua_getfield(L, -1, name);
  int allowed = lua_toboolean(L, -1);
  lua_pop(L, 2);
  if (!allowed) {
    lua_pushfstring(L, "\n\tmodule '%s' is not among the tool module's dependencies", name);
    return 1;
  }
  lua_getfield(L, rules, "root");
  const char *root = lua_tostring(L, -1);
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
    lua_pushfstring(L, "\n\t'%s' lies outside the dependency root '%s'", real, root);
    return 1;
  }
  char err[PATH_MAX + 128];
  size_t len;
  char *src = read_file(real, &len, err, sizeof err);
  if (!src) return luaL_error(L, "%s", err);
  lua_pushfstring(L, "@%s", real);
  int status = luaL_loadbufferx(L, src, len, lua_tostring(L, -1), "t");
  free(src);
  if (status != LUA_OK) return lua_error(L);
  lua_pushstring(L, real);
  return 2;
}

/* Keeps the rules in the registry and makes the searcher the only one. */
static int install_dependencies(lua_State *L) {
  const sx_manifest *man = lua_touserdata(L, 1);
  lua_pushlightuserdata(L, (void *)&deps_key);
  lua_createtable(L, 0, 2);
  lua_newtable(L);
  for (int i = 0; i < man->ndependencies; i++) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, man->dependencies[i]);
  }
  lua_setfield(L, -2, "allowed");
  lua_pushstring(L, man->dependency_root);
  lua_setfield(L, -2, "root");
  lua_rawset(L, LUA_REGISTRYINDEX);
  lua_getglobal(L, "package");
  lua_newtable(L);
  lua_getfield(L, -2, LC_SEARCHERS);
  lua_rawgeti(L, -1, 1);     /* the preload searcher stays first */
  lua_rawseti(L, -3, 1);
  lua_pop(L, 1);
  lua_pushcfunction(L, dependency_searcher);
  lua_rawseti(L, -2, 2);
  lua_setfield(L, -2, LC_SEARCHERS);
  lua_pushnil(L);
  lua_setfield(L, -2, "loadlib");
  return 0;
}

static int string_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Finds the export table (lumaTools, tools, default, or the module itself)
   under the chunk's result and checks it; leaves it on top. */
static int find_exports(sx_module *m, char *err, size_t errlen) {
  lua_State *L = m->L;
  if (lua_type(L, -1) != LUA_TTABLE) {
    snprintf(err, errlen, "tool module '%s' must return a table of handlers, not %s", m->path, luaL_typename(L, -1));
    return -1;
  }
  static const char *const names[] = { "lumaTools", "tools", "default" };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    lua_pushstring(L, names[i]);
    lc_rawget(L, -2);
    if (lua_type(L, -1) == LUA_TTABLE) { lua_remove(L, -2); break; }
    lua_pop(L, 1);
  }
  int t = lua_gettop(L), n = 0;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    n++;
  }
  m->exports = calloc((size_t)n + 1, sizeof *m->exports);
  if (!m->exports) { snprintf(err, errlen, "out of memory"); return -1; }
  lua_pushnil(L);
  while (lua_next(L, t)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      snprintf(err, errlen, "tool module '%s' exports a key that is not a string", m->path);
      return -1;
    }
    const char *key = lua_tostring(L, -2);
    if (strcmp(key, "datasources") != 0) {
      if (lua_type(L, -1) != LUA_TFUNCTION) {
        snprintf(err, errlen, "tool module '%s' exports '%s' as a %s; every value must be a function", m->path, key,
                 luaL_typename(L, -1));
        return -1;
      }
      m->exports[m->nexports] = malloc(strlen(key) + 1);
      if (!m->exports[m->nexports]) { snprintf(err, errlen, "out of memory"); return -1; }
      strcpy(m->exports[m->nexports++], key);
    }
    lua_pop(L, 1);
  }
  qsort(m->exports, (size_t)m->nexports, sizeof *m->exports, string_cmp);
  return 0;
}

sx_module *sx_load(const sx_manifest *man, char *err, size_t errlen) {
  size_t len;
  char *src = read_file(man->path, &len, err, errlen);
  if (!src) return NULL;
  if (man->integrity && check_integrity(man->path, man->integrity, src, len, err, errlen) != 0) {
    free(src);
    return NULL;
  }
  sx_module *m = calloc(1, sizeof *m);
  if (!m) { free(src); snprintf(err, errlen, "out of memory"); return NULL; }
  pthread_mutex_init(&m->lock, NULL);
  m->exports_ref = m->signal_ref = LUA_NOREF;
  m->path = malloc(strlen(man->path) + 1);
  if (!m->path || sx_state_open(m, err, errlen) != 0) {
    if (m->path) snprintf(err, errlen, "out of memory");
    free(src);
    sx_free(m);
    return NULL;
  }
  strcpy(m->path, man->path);
  lua_State *L = m->L;
  if (man->dependencies) {
    lua_pushcfunction(L, install_dependencies);
    lua_pushlightuserdata(L, (void *)man);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
      snprintf(err, errlen, "tool module '%s': %s", man->path, lua_tostring(L, -1));
      free(src);
      sx_free(m);
      return NULL;
    }
  }
  lua_pushfstring(L, "@%s", man->path);
  /* mode "t": a precompiled (binary) chunk is never loaded */
  int status = luaL_loadbufferx(L, src, len, lua_tostring(L, -1), "t");
  free(src);
  if (status == LUA_OK) {
    m->tool = "(module load)";
    m->timeout_ms = SX_LOAD_TIMEOUT_MS;
    m->deadline_ns = sx_now_ns() + (long long)SX_LOAD_TIMEOUT_MS * 1000000LL;
    status = lua_pcall(L, 0, 1, 0);
    m->deadline_ns = 0;
  }
  if (status != LUA_OK) {
    const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "an error that is not a string";
    if (m->expired) msg = "its top-level code ran out of time";
    snprintf(err, errlen, "cannot load tool module '%s': %s", man->path, msg);
    sx_free(m);
    return NULL;
  }
  if (find_exports(m, err, errlen) != 0) {
    sx_free(m);
    return NULL;
  }
  m->exports_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_settop(L, 0);
  lua_gc(L, LUA_GCCOLLECT, 0);
  return m;
}

void sx_free(sx_module *m) {
  if (!m) return;
  if (m->L) lua_close(m->L);
  for (int i = 0; i < m->nexports; i++) free(m->exports[i]);
  free(m->exports);
  free(m->path);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

const char *const *sx_exports(const sx_module *m, int *n) {
  *n = m->nexports;
  return (const char *const *)m->exports;
}
