/* The Lua binding of tool modules: "luma.Module" userdata owning a sandbox
   module (its own Lua state). */
#include "lmodule.h"

#include <string.h>

#include "compat.h"
#include "lerror.h"
#include "luma_limits.h"

#define LM_METATABLE "luma.Module"

typedef struct lm_module {
  sx_module *m;               /* NULL once closed */
} lm_module;

sx_module *lm_check(lua_State *L, int idx) {
  lm_module *lm = luaL_checkudata(L, idx, LM_METATABLE);
  if (!lm->m) luaL_argerror(L, idx, "the tool module is closed");
  return lm->m;
}

/* module:close(): programs that attached it keep a reference, and their
   calls of its tools fail with TOOL_NOT_FOUND */
static int lm_close(lua_State *L) {
  lm_module *lm = luaL_checkudata(L, 1, LM_METATABLE);
  if (lm->m) {
    sx_close(lm->m);
    sx_unref(lm->m);
    lm->m = NULL;
  }
  return 0;
}

/* Collected: the programs that attached it go on using it. */
static int lm_gc(lua_State *L) {
  lm_module *lm = luaL_checkudata(L, 1, LM_METATABLE);
  sx_unref(lm->m);
  lm->m = NULL;
  return 0;
}

/* Reads a string field of the manifest table, or NULL. */
static const char *opt_field(lua_State *L, int t, const char *key) {
  lua_getfield(L, t, key);
  const char *s = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
  lua_pop(L, 1);  /* kept alive by the table */
  return s;
}

static int opt_flag(lua_State *L, int t, const char *key) {
  lua_getfield(L, t, key);
  int on = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return on;
}

/* policy[key], an integer from min to max, or dflt when it is nil. Read as
   a number: an integer past an int's range must not wrap into it. */
static int policy_int(lua_State *L, int t, const char *key, int min, int max, int dflt) {
  lua_getfield(L, t, key);
  int v = dflt;
  if (!lua_isnil(L, -1)) {
    lua_Number n = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : (lua_Number)min - 1;
    if (!(n >= min && n <= max) || n != (int)n)
      luaL_error(L, "policy.%s must be an integer from %d to %d, not %s", key, min, max,
                 lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
    v = (int)n;
  }
  lua_pop(L, 1);
  return v;
}

/* The manifest's policy table (checked by luma.config) as an sx_policy. */
static void read_policy(lua_State *L, int t, sx_policy *p) {
  memset(p, 0, sizeof *p);
  const char *sandbox = opt_field(L, t, "sandbox");
  p->strict = sandbox && strcmp(sandbox, "strict") == 0;
  p->allow_env = opt_flag(L, t, "allow_env");
  p->allow_network = opt_flag(L, t, "allow_network");
  /* the ranges config.lua checks, for callers of core.load_module too */
  p->memory_limit = (size_t)policy_int(L, t, "max_memory_mb", LIM_POLICY_MIN_MEMORY_MB, LIM_POLICY_MAX_MEMORY_MB, 0) << 20;
  p->max_concurrency = policy_int(L, t, "max_concurrency", 1, LIM_POLICY_MAX_CONCURRENCY, 1);
  const char *isolation = opt_field(L, t, "isolation");
  p->isolation = isolation && strcmp(isolation, "process") == 0 ? SX_ISOLATE_PROCESS : SX_ISOLATE_THREAD;
  p->kill_grace_ms = policy_int(L, t, "kill_grace_ms", 0, LIM_POLICY_MAX_KILL_GRACE_MS, SX_KILL_GRACE_MS);
  static const struct { const char *name; unsigned bit; } builtins[] = {
    { "os", SX_OS }, { "io", SX_IO }, { "json", SX_JSON }, { "crypto", SX_CRYPTO },
  };
  lua_getfield(L, t, "allow_builtins");
  if (lua_istable(L, -1)) {
    int n = (int)lc_rawlen(L, -1);
    for (int i = 1; i <= n; i++) {
      lc_rawgeti(L, -1, i);
      const char *name = lua_tostring(L, -1);
      for (size_t b = 0; name && b < sizeof builtins / sizeof builtins[0]; b++)
        if (strcmp(name, builtins[b].name) == 0) p->builtins |= builtins[b].bit;
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
}

/* core.load_module{ path =, integrity =, dependencies = {...}, dependency_root =,
   project_root =, policy = { sandbox =, allow_builtins =, allow_env =,
   allow_network =, max_memory_mb =, max_concurrency =, isolation =,
   kill_grace_ms = } } -> module;
   raises MODULE_INVALID. Paths must already be resolved. */
static int l_load_module(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  sx_manifest man;
  memset(&man, 0, sizeof man);
  man.path = opt_field(L, 1, "path");
  if (!man.path) return luaL_argerror(L, 1, "the manifest needs a path");
  man.integrity = opt_field(L, 1, "integrity");
  man.dependency_root = opt_field(L, 1, "dependency_root");
  lua_getfield(L, 1, "dependencies");
  const char *deps[LIM_MODULE_MAX_DEPENDENCIES];
  if (!lua_isnil(L, -1)) {
    luaL_checktype(L, -1, LUA_TTABLE);
    int n = (int)lc_rawlen(L, -1);
    if (n > LIM_MODULE_MAX_DEPENDENCIES)
      return luaL_error(L, "a tool module may list at most %d dependencies", LIM_MODULE_MAX_DEPENDENCIES);
    for (int i = 0; i < n; i++) {
      lc_rawgeti(L, -1, i + 1);
      deps[i] = luaL_checkstring(L, -1);
      lua_pop(L, 1);
    }
    man.dependencies = deps;
    man.ndependencies = n;
    if (!man.dependency_root) return luaL_error(L, "a manifest with dependencies needs a dependency_root");
  }
  man.project_root = opt_field(L, 1, "project_root");
  sx_policy policy;
  lua_getfield(L, 1, "policy");
  if (!lua_isnil(L, -1)) {
    luaL_checktype(L, -1, LUA_TTABLE);
#if LUA_VERSION_NUM < 504
    return le_raise(L, "CONFIG_INVALID", "tool_module_policy cannot be enforced on this Lua "
                    "(its limits need Lua 5.4's hooks and allocator): build luma.core against Lua 5.4", 0);
#endif
    read_policy(L, lua_gettop(L), &policy);
    man.policy = &policy;
  }
  lua_pop(L, 1);
  lm_module *lm = lua_newuserdata(L, sizeof *lm);
  lm->m = NULL;
  lc_setmetatable(L, LM_METATABLE);
  char err[1024];
  lm->m = sx_load(&man, err, sizeof err);
  if (!lm->m) return le_raise(L, "MODULE_INVALID", err, 0);
  return 1;
}

/* module:exports() -> { "name", ... } (sorted) */
static int l_exports(lua_State *L) {
  sx_module *m = lm_check(L, 1);
  int n;
  const char *const *names = sx_exports(m, &n);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushstring(L, names[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* module:stats() -> { states =, busy =, idle_memory = bytes } */
static int l_stats(lua_State *L) {
  sx_module *m = lm_check(L, 1);
  int states, busy;
  size_t memory;
  sx_stats(m, &states, &busy, &memory);
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, states);
  lua_setfield(L, -2, "states");
  lua_pushinteger(L, busy);
  lua_setfield(L, -2, "busy");
  lua_pushinteger(L, (lua_Integer)memory);
  lua_setfield(L, -2, "idle_memory");
  return 1;
}

void lm_open(lua_State *L) {
  static const luaL_Reg methods[] = {
    { "exports", l_exports },
    { "stats", l_stats },
    { "close", lm_close },
    { NULL, NULL }
  };
  if (luaL_newmetatable(L, LM_METATABLE)) {
    lua_pushcfunction(L, lm_gc);
    lua_setfield(L, -2, "__gc");
    lc_newlib(L, methods);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_load_module);
  lua_setfield(L, -2, "load_module");
}
