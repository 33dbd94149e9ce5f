/* The program methods that run tools: registering handlers, configuring the
   runtime, and calling through the pipeline. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"
#include "idem.h"
#include "lerror.h"
#include "lmodule.h"
#include "lprogram.h"

#define LR_SCOPE "luma.Scope"

static const pm_tool *check_tool(lua_State *L, lp_program *lp, int idx) {
  luaL_checktype(L, idx, LUA_TSTRING);
  const pm_tool *t = lp_find_tool(L, lp, idx);
  if (!t) {
    lua_pushfstring(L, "Unknown tool '%s'.", lua_tostring(L, idx));
    le_raise(L, "TOOL_NOT_FOUND", lua_tostring(L, -1), 0);
  }
  return t;
}

static int conflict(lua_State *L, const pm_tool *t) {
  lua_pushfstring(L, "Tool registry conflict: %s.", t->name);
  return le_raise(L, "TOOL_REGISTRY_CONFLICT", lua_tostring(L, -1), 0);
}

/* program:register(name, fn) */
static int l_register(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  const pm_tool *t = check_tool(L, lp, 2);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  if (pl_register_host(L, lp->rt, t, 3) != 0) return conflict(L, t);
  lua_settop(L, 1);
  return 1;
}

/* program:attach(module) -> { tool names registered }; exports that no
   contract declares are left alone. */
static int l_attach(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  sx_module *m = lm_check(L, 2);
  int n;
  const char *const *names = sx_exports(m, &n);
  lua_newtable(L);
  int k = 0;
  for (int i = 0; i < n; i++) {
    const pm_tool *t = pm_find_tool(lp->p, names[i]);
    if (!t) continue;
    if (pl_register_module(L, lp->rt, t, m, 2) != 0) return conflict(L, t);
    lua_pushstring(L, t->name);
    lua_rawseti(L, -2, ++k);
  }
  return 1;
}

/* program:missing_handlers() -> { names of declared tools without a handler } */
static int l_missing(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  lua_newtable(L);
  int k = 0;
  for (int i = 0; i < lp->p->ntools; i++)
    if (lp->rt->kind[i] == PL_NONE) {
      lua_pushstring(L, lp->p->tools[i]->name);
      lua_rawseti(L, -2, ++k);
    }
  return 1;
}

/* program:configure{ contexts =, on_event =, trace =, clock =, default_timeout_ms = } */
static int l_configure(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  pl_runtime *rt = lp->rt;
  lua_rawgeti(L, LUA_REGISTRYINDEX, rt->anchor);
  int anchor = lua_gettop(L);
  static const char *const keys[] = { "contexts", "on_event", "clock" };
  static const int types[] = { LUA_TTABLE, LUA_TFUNCTION, LUA_TTABLE };
  for (int i = 0; i < 3; i++) {
    lua_getfield(L, 2, keys[i]);
    if (!lua_isnil(L, -1)) {
      if (lua_type(L, -1) != types[i])
        return luaL_error(L, "configure: '%s' must be a %s", keys[i], lua_typename(L, types[i]));
      lua_setfield(L, anchor, keys[i]);
      if (i == 1) rt->has_sink = 1;
      if (i == 2) rt->has_clock = 1;
    } else {
      lua_pop(L, 1);
    }
  }
  lua_getfield(L, 2, "trace");
  if (!lua_isnil(L, -1)) {
    const char *path = luaL_checkstring(L, -1);
    FILE *f = fopen(path, "a");
    if (!f) {
      lua_pushfstring(L, "cannot open the trace file '%s'", path);
      return le_raise(L, "IO_ERROR", lua_tostring(L, -1), 0);
    }
    if (rt->trace) fclose(rt->trace);
    rt->trace = f;
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "idempotency");
  if (!lua_isnil(L, -1)) {
    luaL_checktype(L, -1, LUA_TTABLE);
    lua_getfield(L, -1, "backend");
    const char *backend = luaL_optstring(L, -1, "memory");
    lua_getfield(L, -2, "path");
    const char *path = lua_tostring(L, -1);
    lua_getfield(L, -3, "encryption");
    int encrypt = !lua_isnil(L, -1);
    if (strcmp(backend, "file") == 0) {
      if (!path) return luaL_error(L, "configure: the file idempotency store needs a path");
      const char *pass = NULL;
      if (encrypt) {
        pass = getenv("LUMA_IDEMPOTENCY_KEY");
        if (!pass || !*pass)
          return le_raise(L, "IDEMPOTENCY_STORE_ERROR",
                          "The idempotency store is encrypted (aes-256-gcm), but LUMA_IDEMPOTENCY_KEY is not set.", 0);
      }
      char err[512];
      id_store *st = id_open_file(path, pass, pl_wall_ms(L, rt), err, sizeof err);
      if (!st) {
        lua_pushfstring(L, "Cannot open the idempotency store '%s': %s", path, err);
        return le_raise(L, "IDEMPOTENCY_STORE_ERROR", lua_tostring(L, -1), 0);
      }
      char moved[512];
      if (id_quarantined(st, moved, sizeof moved))
        fprintf(stderr, "luma: the idempotency store '%s' was corrupt: it was moved to '%s' and a new one created\n",
                path, moved);
      if (rt->own_idem) id_close(rt->idem);
      rt->idem = st;
      rt->own_idem = 1;
    } else if (strcmp(backend, "memory") != 0) {
      return luaL_error(L, "configure: unknown idempotency backend '%s'", backend);
    }
    lua_pop(L, 3);
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "default_timeout_ms");
  if (!lua_isnil(L, -1)) {
    if (!lc_isinteger(L, -1) || lua_tointeger(L, -1) <= 0)
      return luaL_error(L, "configure: 'default_timeout_ms' must be a positive integer");
    rt->default_timeout_ms = (long long)lua_tointeger(L, -1);
  }
  lua_settop(L, 1);
  return 1;
}

/* program:scope(agent) -> a scope for one agent method call */
static int l_scope(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  const char *name = luaL_checkstring(L, 2);
  const pm_agent *ag = pm_find_agent(lp->p, name);
  if (!ag) {
    lua_pushfstring(L, "Unknown agent '%s'.", name);
    return le_raise(L, "AGENT_NOT_FOUND", lua_tostring(L, -1), 0);
  }
  pl_scope *sc = lua_newuserdata(L, sizeof *sc);
  sc->agent = ag;
  sc->failures = 0;
  lc_setmetatable(L, LR_SCOPE);
  return 1;
}

/* program:invoke(scope or nil, name, input) -> result, meta; raises the error */
static int l_invoke(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  pl_scope *sc = lua_isnil(L, 2) ? NULL : luaL_checkudata(L, 2, LR_SCOPE);
  const pm_tool *t = check_tool(L, lp, 3);
  luaL_checkany(L, 4);
  if (pl_call(L, lp->rt, sc, t, 4) != 0) return lua_error(L);
  return 2;
}

/* program:call(name, input) -> result, meta: a direct call outside any agent */
static int l_call(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  const pm_tool *t = check_tool(L, lp, 2);
  luaL_checkany(L, 3);
  if (pl_call(L, lp->rt, NULL, t, 3) != 0) return lua_error(L);
  return 2;
}

/* program:call_all({ { name, input }, ... } [, { concurrency = n, scope = s }])
   -> { { ok = true, result =, meta = } | { ok = false, error = }, ... } */
static int l_call_all(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  int concurrency = 1 << 20;
  pl_scope *sc = NULL;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_getfield(L, 3, "concurrency");
    if (!lua_isnil(L, -1)) {
      if (!lc_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
        return luaL_error(L, "call_all: concurrency must be a positive integer");
      concurrency = (int)lua_tointeger(L, -1);
    }
    lua_getfield(L, 3, "scope");
    if (!lua_isnil(L, -1)) sc = luaL_checkudata(L, -1, LR_SCOPE);
    lua_pop(L, 2);
  }
  int n = (int)lc_rawlen(L, 2);
  if (n > 10000) return luaL_error(L, "call_all: at most 10000 calls at once");
  luaL_checkstack(L, n + 8, "calling tools");
  const pm_tool **tools = lua_newuserdata(L, sizeof *tools * (size_t)(n ? n : 1));
  int *inputs = lua_newuserdata(L, sizeof *inputs * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) {
    lc_rawgeti(L, 2, i + 1);
    int call = lua_gettop(L);
    if (!lua_istable(L, call)) return luaL_error(L, "call_all: call %d must be a table { name, input }", i + 1);
    lua_getfield(L, call, "tool");
    if (lua_isnil(L, -1)) { lua_pop(L, 1); lc_rawgeti(L, call, 1); }
    tools[i] = check_tool(L, lp, lua_gettop(L));
    lua_pop(L, 1);
    lua_getfield(L, call, "input");
    if (lua_isnil(L, -1)) { lua_pop(L, 1); lc_rawgeti(L, call, 2); }
    if (lua_isnil(L, -1)) { lua_pop(L, 1); lua_newtable(L); }
    lua_replace(L, call);
    inputs[i] = call;
  }
  pl_call_all(L, lp->rt, sc, tools, inputs, n, concurrency);
  return 1;
}

/* program:check_return(agent, method, value) -> true [, warnings] | nil, err:
   the value a method returns against its declared return type */
static int l_check_return(lua_State *L) {
  lp_program *lp = lp_check(L, 1);
  const pm_agent *ag = pm_find_agent(lp->p, luaL_checkstring(L, 2));
  const char *name = luaL_checkstring(L, 3);
  const pm_method *m = NULL;
  for (int i = 0; ag && i < ag->nmethods; i++)
    if (strcmp(ag->methods[i].name, name) == 0) m = &ag->methods[i];
  if (!m) return luaL_argerror(L, 3, "no such method");
  if (!m->ret) { lua_pushboolean(L, 1); return 1; }
  lua_pushfstring(L, "%s.%s.output", ag->name, m->name);
  lv_result r;
  int bad = lv_validate_type(lp->v, L, 4, m->ret, lua_tostring(L, -1), LV_OUTPUT, 1, &r);
  if (bad) {
    lua_pushnil(L);
    lp_push_validation_error(L, "VALIDATION_FAILED", &r);
    lv_result_free(&r);
    return 2;
  }
  lua_pushboolean(L, 1);
  int results = 1;
  if (r.nwarnings) { lp_push_issues(L, r.warnings, r.nwarnings); results = 2; }
  lv_result_free(&r);
  return results;
}

const luaL_Reg lr_methods[] = {
  { "call_all", l_call_all },
  { "check_return", l_check_return },
  { "register", l_register },
  { "attach", l_attach },
  { "missing_handlers", l_missing },
  { "configure", l_configure },
  { "scope", l_scope },
  { "invoke", l_invoke },
  { "call", l_call },
  { NULL, NULL }
};

void lr_open(lua_State *L) {
  if (luaL_newmetatable(L, LR_SCOPE)) {
    lua_pushstring(L, LR_SCOPE);
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);
}
