#define _XOPEN_SOURCE 700
/* Loading a tool module: integrity, text-only chunks, the dependency
   allowlist for `require`, and the lookup of its exported handlers. */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Keeps the rules of `require` in the registry: the listed dependencies
   under dependency_root, or (strict, with no list) any Lua file of the
   project. In a state with the full library, the searcher becomes the only
   one after preload; a strict state has it already. */
static int install_require_rules(lua_State *L) {
  const sx_module *m = lua_touserdata(L, 1);
  lua_pushlightuserdata(L, (void *)&deps_key);
  lua_createtable(L, 0, 2);
  if (m->dependencies) {
    lua_newtable(L);
    for (int i = 0; i < m->ndependencies; i++) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, m->dependencies[i]);
    }
    lua_setfield(L, -2, "allowed");
  }
  const char *root = m->dependencies ? m->dependency_root : m->project_root;
  if (root) {
    lua_pushstring(L, root);
    lua_setfield(L, -2, "root");
  }
  lua_rawset(L, LUA_REGISTRYINDEX);
  lua_getglobal(L, "package");
  if (!lua_istable(L, -1)) return 0;
  lua_newtable(L);
  lua_getfield(L, -2, LC_SEARCHERS);
  lua_rawgeti(L, -1, 1);     /* the preload searcher stays first */
  lua_rawseti(L, -3, 1);
  lua_pop(L, 1);
  lua_pushcfunction(L, sx_dependency_searcher);
  lua_rawseti(L, -2, 2);
  lua_setfield(L, -2, LC_SEARCHERS);
  lua_pushnil(L);
  lua_setfield(L, -2, "loadlib");
  return 0;
}

/* Finds the export table (lumaTools, tools, default, or the module itself)
   under the chunk's result and checks it; leaves it on top. */
static int find_exports(sx_module *m, lua_State *L, char *err, size_t errlen) {
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
  int t = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, t)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      lua_pop(L, 2);
      snprintf(err, errlen, "tool module '%s' exports a key that is not a string", m->path);
      return -1;
    }
    const char *key = lua_tostring(L, -2);
    if (strcmp(key, "datasources") != 0 && lua_type(L, -1) != LUA_TFUNCTION) {
      snprintf(err, errlen, "tool module '%s' exports '%s' as a %s; every value must be a function", m->path, key,
               luaL_typename(L, -1));
      lua_pop(L, 2);
      return -1;
    }
    lua_pop(L, 1);
  }
  return 0;
}

/* The searcher that replaces all others when a module lists dependencies:
   only those names, read as text from under dependency_root. */
int sx_dependency_searcher(lua_State *L) {
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
  char *src = read_file(real, &len, err, sizeof err);
  if (!src) return luaL_error(L, "%s", err);
  int status = sx_load_text(L, src, len, lua_tostring(L, -2));
  free(src);
  if (status != LUA_OK) return lua_error(L);
  lua_insert(L, -2);
  return 2;
}

static int string_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static char *dup(const char *s) {
  if (!s) return NULL;
  char *d = malloc(strlen(s) + 1);
  if (d) strcpy(d, s);
  return d;
}

/* The module's export names, from the export table on top of the first
   state (the others have the same code, so the same names). */
static int collect_exports(sx_module *m, lua_State *L, char *err, size_t errlen) {
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
    const char *key = lua_tostring(L, -2);
    if (strcmp(key, "datasources") != 0) {
      m->exports[m->nexports] = dup(key);
      if (!m->exports[m->nexports]) { lua_pop(L, 2); snprintf(err, errlen, "out of memory"); return -1; }
      m->nexports++;
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
  pthread_cond_init(&m->freed, NULL);
  m->source = src;
  m->source_len = len;
  m->path = dup(man->path);
  m->dependency_root = dup(man->dependency_root);
  m->project_root = dup(man->project_root);
  if (man->policy) {
    m->policy = *man->policy;
    m->has_policy = 1;
  }
  if (m->policy.max_concurrency < 1) m->policy.max_concurrency = 1;
  int ok = m->path != NULL;
  if (ok && man->dependencies) {
    m->dependencies = calloc((size_t)man->ndependencies + 1, sizeof *m->dependencies);
    ok = m->dependencies != NULL;
    for (int i = 0; ok && i < man->ndependencies; i++) {
      m->dependencies[i] = dup(man->dependencies[i]);
      ok = m->dependencies[i] != NULL;
      m->ndependencies = i + 1;
    }
  }
  m->states = ok ? calloc((size_t)m->policy.max_concurrency, sizeof *m->states) : NULL;
  if (!m->states) {
    snprintf(err, errlen, "out of memory");
    sx_free(m);
    return NULL;
  }
  sx_state *first = sx_state_new(m, 0, err, errlen);
  if (!first) {
    sx_free(m);
    return NULL;
  }
  m->states[m->nstates++] = first;
  return m;
}

void sx_free(sx_module *m) {
  if (!m) return;
  for (int i = 0; i < m->nstates; i++) sx_state_free(m->states[i]);
  free(m->states);
  for (int i = 0; i < m->nexports; i++) free(m->exports[i]);
  free(m->exports);
  for (int i = 0; i < m->ndependencies; i++) free(m->dependencies[i]);
  free(m->dependencies);
  free(m->path);
  free(m->source);
  free(m->dependency_root);
  free(m->project_root);
  pthread_cond_destroy(&m->freed);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

const char *const *sx_exports(const sx_module *m, int *n) {
  *n = m->nexports;
  return (const char *const *)m->exports;
}

void sx_stats(sx_module *m, int *states, int *busy, size_t *idle_memory) {
  pthread_mutex_lock(&m->lock);
  *states = m->nstates;
  *busy = 0;
  *idle_memory = 0;
  for (int i = 0; i < m->nstates; i++) {
    if (m->states[i]->busy) (*busy)++;
    else *idle_memory += m->states[i]->memory;
  }
  pthread_mutex_unlock(&m->lock);
}

sx_state *sx_acquire(sx_module *m, long long deadline_ns, int wait, char *err, size_t errlen) {
  pthread_mutex_lock(&m->lock);
  for (;;) {
    for (int i = 0; i < m->nstates; i++)
      if (!m->states[i]->busy) {
        m->states[i]->busy = 1;
        pthread_mutex_unlock(&m->lock);
        return m->states[i];
      }
    if (m->nstates + m->making < m->policy.max_concurrency) {
      /* made outside the lock (running the module's code takes a while);
         `making` keeps others from making one too many */
      m->making++;
      pthread_mutex_unlock(&m->lock);
      sx_state *s = sx_state_new(m, deadline_ns, err, errlen);
      pthread_mutex_lock(&m->lock);
      m->making--;
      if (s) {
        s->busy = 1;
        m->states[m->nstates++] = s;
      } else {
        pthread_cond_signal(&m->freed);   /* the room is there for another */
      }
      pthread_mutex_unlock(&m->lock);
      return s;
    }
    if (!wait) break;
    if (deadline_ns) {
      long long now = sx_now_ns();
      if (now >= deadline_ns) break;
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      long long left = deadline_ns - now, ns = ts.tv_nsec + left % 1000000000LL;
      ts.tv_sec += (time_t)(left / 1000000000LL + ns / 1000000000LL);
      ts.tv_nsec = (long)(ns % 1000000000LL);
      pthread_cond_timedwait(&m->freed, &m->lock, &ts);
    } else {
      pthread_cond_wait(&m->freed, &m->lock);
    }
  }
  pthread_mutex_unlock(&m->lock);
  snprintf(err, errlen, "every state of the module was busy until the deadline");
  return NULL;
}

void sx_release(sx_state *s) {
  sx_module *m = s->module;
  lua_settop(s->L, s->base);
  pthread_mutex_lock(&m->lock);
  if (s->broken) {
    /* it ran out of memory or time: it is closed, and a new one is made
       when one is needed */
    for (int i = 0; i < m->nstates; i++)
      if (m->states[i] == s) {
        m->states[i] = m->states[--m->nstates];
        break;
      }
    sx_state_free(s);
  } else {
    s->busy = 0;
  }
  pthread_cond_signal(&m->freed);
  pthread_mutex_unlock(&m->lock);
}

static int lock_globals(lua_State *L) {
  sx_lock_globals(L);
  return 0;
}

/* Runs the module's code in a new state and leaves its export table in the
   registry; the first state also records the export names. */
int sx_module_run(sx_module *m, sx_state *s, long long deadline_ns, char *err, size_t errlen) {
  lua_State *L = s->L;
  if (m->dependencies || (m->has_policy && m->policy.strict)) {
    lua_pushcfunction(L, install_require_rules);
    lua_pushlightuserdata(L, m);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
      snprintf(err, errlen, "tool module '%s': %s", m->path, lua_tostring(L, -1));
      return -1;
    }
  }
  lua_pushfstring(L, "@%s", m->path);
  /* at most SX_LOAD_TIMEOUT_MS, and never past the deadline of the call
     that needs the state; the parse counts too */
  long long limit = sx_now_ns() + (long long)SX_LOAD_TIMEOUT_MS * 1000000LL;
  if (deadline_ns && deadline_ns < limit) limit = deadline_ns;
  s->tool = "(module load)";
  s->timeout_ms = (limit - sx_now_ns()) / 1000000LL;
  s->deadline_ns = limit;
  /* text only: a precompiled (binary) chunk is never loaded */
  int status = sx_load_text(L, m->source, m->source_len, lua_tostring(L, -1));
  if (status == LUA_OK) status = lua_pcall(L, 0, 1, 0);
  s->deadline_ns = 0;
  if (status != LUA_OK) {
    const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "an error that is not a string";
    if (s->expired) msg = "its top-level code ran out of time";
    if (s->out_of_memory || status == LUA_ERRMEM) msg = "its top-level code ran out of memory";
    snprintf(err, errlen, "cannot load tool module '%s': %s", m->path, msg);
    return -1;
  }
  if (find_exports(m, L, err, errlen) != 0) return -1;
  if (!m->exports && collect_exports(m, L, err, errlen) != 0) return -1;
  s->exports_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_settop(L, 0);
  if (m->has_policy && m->policy.strict) {
    lua_pushcfunction(L, lock_globals);
    if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
      snprintf(err, errlen, "cannot load tool module '%s': out of memory", m->path);
      return -1;
    }
  }
  lua_gc(L, LUA_GCCOLLECT, 0);
  return 0;
}
