/* The Lua binding of runtimes, scopes and calls, and the bodies of the
   Program methods that run tools. */
#include "lruntime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "call.h"
#include "callint.h"
#include "compat.h"
#include "drive.h"
#include "errors.h"
#include "lcall.h"
#include "lerror.h"
#include "ljson.h"
#include "luma_limits.h"

#define LR_RUNTIME "luma.Runtime"
#define LR_SCOPE "luma.Scope"
#define LR_CALL "luma.Call"

/* ------------------------------------------------------------ runtimes */

typedef struct lr_box {
  rt_runtime *rt;                 /* NULL once closed */
} lr_box;

static const char default_key = 0;

static int runtime_gc(lua_State *L) {
  lr_box *b = luaL_checkudata(L, 1, LR_RUNTIME);
  if (b->rt) {
    rt_close(b->rt);
    rt_unref(b->rt);
    b->rt = NULL;
  }
  return 0;
}

static lr_box *push_runtime(lua_State *L, const rt_options *o) {
  lr_box *b = lua_newuserdata(L, sizeof *b);
  b->rt = NULL;
  lc_setmetatable(L, LR_RUNTIME);
  char err[200];
  b->rt = rt_new(L, o, err, sizeof err);
  if (!b->rt) luaL_error(L, "cannot make a runtime: %s", err);
  return b;
}

static rt_runtime *check_runtime(lua_State *L, int idx) {
  lr_box *b = luaL_checkudata(L, idx, LR_RUNTIME);
  if (!b->rt) luaL_argerror(L, idx, "the runtime is closed");
  return b->rt;
}

rt_runtime *lr_runtime(lua_State *L, int idx) {
  if (idx != 0 && !lua_isnoneornil(L, idx)) return check_runtime(L, idx);
  lua_pushlightuserdata(L, (void *)&default_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    push_runtime(L, NULL);
    lua_pushlightuserdata(L, (void *)&default_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
  }
  rt_runtime *rt = check_runtime(L, -1);
  lua_pop(L, 1);
  return rt;
}

/* core.runtime([{ workers = n, inline = false | true | "slice" }]) -> a
   luma.Runtime (inline: rt_set_inline's RT_INLINE, RT_INLINE_SLICE) */
static int l_runtime(lua_State *L) {
  rt_options o = { 0 };
  int in_line = 0;
  if (!lua_isnoneornil(L, 1)) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "workers");
    if (!lua_isnil(L, -1)) {
      if (!lc_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > LIM_MAX_WORKERS)
        return luaL_error(L, "runtime: workers must be an integer from 1 to %d", LIM_MAX_WORKERS);
      o.workers = (int)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    lua_getfield(L, 1, "inline");
    if (lua_type(L, -1) == LUA_TBOOLEAN) in_line = lua_toboolean(L, -1) ? RT_INLINE : 0;
    else if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "slice") == 0) in_line = RT_INLINE_SLICE;
    else if (!lua_isnil(L, -1))
      return luaL_error(L, "runtime: inline must be false, true or \"slice\", not %s", lc_tolstring(L, -1, NULL));
    lua_pop(L, 1);
  }
  lr_box *b = push_runtime(L, &o);
  rt_set_inline(b->rt, in_line);
  return 1;
}

/* runtime:poll() -> calls in flight, ms the host may wait (or nil: until rt:fd() is readable) */
static int l_runtime_poll(lua_State *L) {
  rt_runtime *rt = check_runtime(L, 1);
  long long wait;
  int n = rt_poll(rt, &wait);
  lua_pushinteger(L, n);
  if (wait >= 0) lua_pushinteger(L, (lua_Integer)wait); else lua_pushnil(L);
  return 2;
}

/* Polls rt until `done(c)` (or every call, with c NULL) or timeout_ms (< 0:
   none) passes; returns whether it got there. */
static int call_done(void *c, int active) {
  return c ? cl_done(c) : active == 0;
}

static int wait_for(rt_runtime *rt, cl_call *c, long long timeout_ms) {
  return rt_poll_until(rt, call_done, c, timeout_ms);
}

long long lr_opt_wait_ms(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return -1;
  if (lc_isinteger(L, idx)) {
    lua_Integer ms = lua_tointeger(L, idx);
    return ms < 0 ? -1 : ms > LIM_TIMEOUT_CAP_MS ? LIM_TIMEOUT_CAP_MS : (long long)ms;
  }
  lua_Number ms = luaL_checknumber(L, idx);
  if (ms != ms) luaL_argerror(L, idx, "a number of milliseconds expected, got nan");
  return ms < 0 ? -1 : ms >= (lua_Number)LIM_TIMEOUT_CAP_MS ? LIM_TIMEOUT_CAP_MS : (long long)ms;
}

/* runtime:wait([timeout_ms]) -> true when every started call is done */
static int l_runtime_wait(lua_State *L) {
  rt_runtime *rt = check_runtime(L, 1);
  long long timeout = lr_opt_wait_ms(L, 2);
  lua_pushboolean(L, wait_for(rt, NULL, timeout));
  return 1;
}

static int l_runtime_fd(lua_State *L) {
  lua_pushinteger(L, rt_fd(check_runtime(L, 1)));
  return 1;
}

static int l_runtime_workers(lua_State *L) {
  lua_pushinteger(L, rt_workers(check_runtime(L, 1)));
  return 1;
}

/* --------------------------------------------------------------- scopes */

typedef struct scope_box {
  pl_scope *sc;
} scope_box;

static int scope_gc(lua_State *L) {
  scope_box *s = luaL_checkudata(L, 1, LR_SCOPE);
  pl_scope_unref(s->sc);
  s->sc = NULL;
  return 0;
}

int lr_scope(lua_State *L, pl_program *pg) {
  const char *name = luaL_checkstring(L, 2);
  const pm_agent *ag = pm_find_agent(pg->p, name);
  if (!ag) {
    char msg[300];
    le_format(msg, sizeof msg, LE_AGENT_NOT_FOUND, name);
    return le_raise_code(L, LE_AGENT_NOT_FOUND, msg, 0);
  }
  scope_box *s = lua_newuserdata(L, sizeof *s);
  s->sc = NULL;
  lc_setmetatable(L, LR_SCOPE);
  s->sc = pl_scope_new(pg, ag);
  if (!s->sc) return luaL_error(L, "out of memory");
  return 1;
}

/* The scope at idx (0 or nil: none), which must belong to pg. */
pl_scope *lr_check_scope(lua_State *L, pl_program *pg, int idx) {
  if (idx == 0 || lua_isnoneornil(L, idx)) return NULL;
  scope_box *s = luaL_checkudata(L, idx, LR_SCOPE);
  if (!s->sc) luaL_argerror(L, idx, "the scope is closed");
  if (s->sc->pg != pg) luaL_argerror(L, idx, "the scope belongs to another program");
  return s->sc;
}

/* ---------------------------------------------------------------- calls */

typedef struct call_box {
  cl_call *c;
} call_box;

static int call_gc(lua_State *L) {
  call_box *b = luaL_checkudata(L, 1, LR_CALL);
  cl_free(b->c);
  b->c = NULL;
  return 0;
}

static cl_call *check_call(lua_State *L, int idx) {
  call_box *b = luaL_checkudata(L, idx, LR_CALL);
  if (!b->c) luaL_argerror(L, idx, "the call is closed");
  return b->c;
}

/* A new call of t, its input from index `input` of L. */
static cl_call *new_call(lua_State *L, pl_program *pg, pl_scope *sc, int scope_idx, const pm_tool *t, int input,
                         int copy) {
  char err[200];
  cl_call *c = cl_new(pg, t, sc, err, sizeof err);
  if (!c) {
    lua_pushfstring(L, "Tool '%s' cannot be called: %s.", t->name, err);
    le_raise(L, "TOOL_CANCELLED", lua_tostring(L, -1), 0);
  }
  lcl_put_input(L, input, c, copy);
  if (scope_idx) lcl_put_scope_anchor(L, scope_idx, c);
  return c;
}

/* An owner on the stack for calls made here, so that an error frees them. */
static call_box *push_owner(lua_State *L) {
  call_box *b = lua_newuserdata(L, sizeof *b);
  b->c = NULL;
  lc_setmetatable(L, LR_CALL);
  return b;
}

int lr_call(lua_State *L, pl_program *pg, int scope, const pm_tool *t, int input) {
  pl_scope *sc = lr_check_scope(L, pg, scope);
  input = lc_absindex(L, input);
  luaL_checkstack(L, 8, "calling a tool");
  /* nothing between the call's making and its freeing can raise: no owner needed */
  cl_call *c = new_call(L, pg, sc, scope, t, input, 0);
  rt_drive(pg->rt, &c, 1, 0);
  st_event ev;
  int ok = lcl_take(L, c, &ev);
  cl_free(c);
  if (!ok) {
    lua_pop(L, 1);
    return lua_error(L);
  }
  lcl_push_meta(L, &ev, lua_gettop(L));
  lua_remove(L, -2);
  return 2;
}

/* opts.tags: a copy of its string keys with string, integer or boolean
   values (the caller's own fields for the call's telemetry event), pushed;
   0 when there is none. */
static int copy_tags(lua_State *L, int opts) {
  lua_getfield(L, opts, "tags");
  if (lua_isnil(L, -1)) { lua_pop(L, 1); return 0; }
  if (!lua_istable(L, -1)) luaL_error(L, "opts.tags: expected a table, got %s", luaL_typename(L, -1));
  int src = lua_gettop(L);
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, src)) {
    int vt = lua_type(L, -1);
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "opts.tags: keys must be strings, not %s", luaL_typename(L, -2));
    if (!(vt == LUA_TSTRING || vt == LUA_TBOOLEAN || (vt == LUA_TNUMBER && lc_isinteger(L, -1))))
      luaL_error(L, "opts.tags.%s: expected a string, an integer or a boolean, got %s", lua_tostring(L, -2),
                 luaL_typename(L, -1));
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, src + 1);
  }
  lua_remove(L, src);
  return lua_gettop(L);
}

int lr_start(lua_State *L, pl_program *pg, const pm_tool *t, int input, int opts, int copy) {
  int scope = 0, tags = 0;
  if (opts && !lua_isnoneornil(L, opts)) {
    luaL_checktype(L, opts, LUA_TTABLE);
    lua_getfield(L, opts, "scope");
    scope = lua_isnil(L, -1) ? 0 : lua_gettop(L);
    tags = copy_tags(L, opts);
  }
  pl_scope *sc = lr_check_scope(L, pg, scope);
  call_box *b = push_owner(L);
  b->c = new_call(L, pg, sc, scope, t, input, copy);
  if (tags) {
    lua_pushvalue(L, tags);
    lua_xmove(L, b->c->T, 1);
    lua_replace(b->c->T, CV_TAGS);
  }
  rt_track(pg->rt, b->c);
  /* rt_set_inline: the first attempt runs the handler here, until it
     returns or waits; what follows (a resume, a retry) is the pool's */
  b->c->inline_ok = rt_inline_starts(pg->rt) ? 2 : 0;
  rt_kick(pg->rt, b->c);
  b->c->inline_ok = 0;
  /* one in flight turns the descriptor readable, as a start always did: a
     host sleeping on it polls and learns the call's timers; one done at
     its start costs no write */
  if (!cl_done(b->c)) rt_notify(pg->rt);
  return 1;
}

/* call:done() */
static int l_call_done(lua_State *L) {
  lua_pushboolean(L, cl_done(check_call(L, 1)));
  return 1;
}

/* call:poll() -> done: steps every started call of the runtime once */
static int l_call_poll(lua_State *L) {
  cl_call *c = check_call(L, 1);
  if (!cl_done(c)) rt_poll(c->rt, NULL);
  lua_pushboolean(L, cl_done(c));
  return 1;
}

/* call:wait([timeout_ms]) -> done */
static int l_call_wait(lua_State *L) {
  cl_call *c = check_call(L, 1);
  long long timeout = lr_opt_wait_ms(L, 2);
  if (!cl_done(c)) wait_for(c->rt, c, timeout);
  lua_pushboolean(L, cl_done(c));
  return 1;
}

/* call:result() -> result, meta; raises the call's error, or when not done */
static int l_call_result(lua_State *L) {
  cl_call *c = check_call(L, 1);
  if (!cl_done(c)) return luaL_error(L, "the call is not done: wait for it first");
  if (lcl_push_outcome(L, c) != 0) return lua_error(L);
  return 2;
}

int lr_call_json(lua_State *L) {
  call_box *b = luaL_checkudata(L, 1, LR_CALL);
  cl_call *c = b->c;
  if (!c || !cl_ok(c)) return 0;
  luaL_checkstack(L, 4, "writing a tool's result");
  st_event ev;
  lcl_take(L, c, &ev);
  sb_buf out;
  sb_init(&out);
  char err[128];
  if (lj_encode(L, -2, &out, 0, LIM_JSON_DEPTH, err, sizeof err) != 0) {
    sb_free(&out);
    return 0;
  }
  lua_pushlstring(L, out.data ? out.data : "", out.len);
  sb_free(&out);
  cl_free(c);
  b->c = NULL;
  return 1;
}

/* call:progress() -> count, n, total, message: the handler's last
   signal:progress (count: how many it made; total and message nil when not
   given); nil before the first */
static int l_call_progress(lua_State *L) {
  cl_call *c = check_call(L, 1);
  double n = 0, total = -1;
  char msg[sizeof c->prog_msg];
  int has_msg = 0;
  unsigned seq = rt_progress_read(c->rt, c, &n, &total, msg, sizeof msg, &has_msg);
  if (!seq) return 0;
  lua_pushinteger(L, (lua_Integer)seq);
  lua_pushnumber(L, n);
  if (total >= 0) lua_pushnumber(L, total); else lua_pushnil(L);
  if (has_msg) lua_pushstring(L, msg); else lua_pushnil(L);
  return 4;
}

/* call:cancel() */
static int l_call_cancel(lua_State *L) {
  cl_cancel(check_call(L, 1));
  return 0;
}

/* ------------------------------------------------------------- batches */

int lr_call_all(lua_State *L, pl_program *pg) {
  luaL_checktype(L, 2, LUA_TTABLE);
  int concurrency = 0, scope = 0;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_getfield(L, 3, "concurrency");
    if (!lua_isnil(L, -1)) {
      if (!lc_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
        return luaL_error(L, "call_all: concurrency must be a positive integer");
      /* more than the calls there can be is all of them at once */
      concurrency = lua_tointeger(L, -1) > LIM_CALL_ALL_MAX_CALLS ? LIM_CALL_ALL_MAX_CALLS : (int)lua_tointeger(L, -1);
    }
    lua_getfield(L, 3, "scope");
    scope = lua_isnil(L, -1) ? 0 : lua_gettop(L);
  }
  pl_scope *sc = lr_check_scope(L, pg, scope);
  int n = (int)lc_rawlen(L, 2);
  if (n > LIM_CALL_ALL_MAX_CALLS) return luaL_error(L, "call_all: at most %d calls at once", LIM_CALL_ALL_MAX_CALLS);
  luaL_checkstack(L, 3 * n + 16, "calling tools");
  /* scratch without finalizers (a finalizer costs more than a small call):
     nothing can raise between the first call's making and the last one's
     freeing, so no owner is needed */
  const pm_tool **tools = lua_newuserdata(L, sizeof *tools * (size_t)(n ? n : 1));
  cl_call **calls = lua_newuserdata(L, sizeof *calls * (size_t)(n ? n : 1));
  st_event *events = lua_newuserdata(L, sizeof *events * (size_t)(n ? n : 1));
  char *oks = lua_newuserdata(L, (size_t)(n ? n : 1));
  int inputs = lua_gettop(L) + 1;
  for (int i = 0; i < n; i++) {
    lc_rawgeti(L, 2, i + 1);
    int item = lua_gettop(L);
    if (!lua_istable(L, item)) return luaL_error(L, "call_all: call %d must be a table { name, input }", i + 1);
    lua_getfield(L, item, "tool");
    if (lua_isnil(L, -1)) { lua_pop(L, 1); lc_rawgeti(L, item, 1); }
    if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "call_all: call %d needs a tool name", i + 1);
    tools[i] = pm_find_tool(pg->p, lua_tostring(L, -1));
    if (!tools[i]) {
      const char *near = pm_near_tool(pg->p, lua_tostring(L, -1));
      if (near) lua_pushfstring(L, "Unknown tool '%s'. Did you mean '%s'?", lua_tostring(L, -1), near);
      else lua_pushfstring(L, "Unknown tool '%s'.", lua_tostring(L, -1));
      return le_raise(L, "TOOL_NOT_FOUND", lua_tostring(L, -1), 0);
    }
    lua_getfield(L, item, "input");
    if (lua_isnil(L, -1)) { lua_pop(L, 1); lc_rawgeti(L, item, 2); }
    if (lua_isnil(L, -1)) { lua_pop(L, 1); lua_newtable(L); }
    lua_replace(L, item);
    lua_settop(L, item);
  }
  char err[200];
  for (int i = 0; i < n; i++) {
    calls[i] = cl_new(pg, tools[i], sc, err, sizeof err);
    if (!calls[i]) {
      while (i-- > 0) cl_free(calls[i]);
      lua_pushfstring(L, "Tools cannot be called: %s.", err);
      return le_raise(L, "TOOL_CANCELLED", lua_tostring(L, -1), 0);
    }
    lcl_put_input(L, inputs + i, calls[i], 0);
    if (scope) lcl_put_scope_anchor(L, scope, calls[i]);
  }
  rt_drive(pg->rt, calls, n, concurrency);
  int taken = lua_gettop(L) + 1;
  for (int i = 0; i < n; i++) {
    oks[i] = (char)lcl_take(L, calls[i], &events[i]);
    cl_free(calls[i]);
  }
  lua_createtable(L, n, 0);
  int out = lua_gettop(L);
  for (int i = 0; i < n; i++) {
    int value = taken + 2 * i, ok = oks[i];
    lua_createtable(L, 0, 3);
    lua_pushvalue(L, value);
    lua_setfield(L, -2, ok ? "result" : "error");
    if (ok) {
      lcl_push_meta(L, &events[i], value + 1);
      lua_setfield(L, -2, "meta");
    }
    lua_pushboolean(L, ok);
    lua_setfield(L, -2, "ok");
    lua_rawseti(L, out, i + 1);
  }
  return 1;
}

int lr_check_return(lua_State *L, pl_program *pg) {
  const pm_agent *ag = pm_find_agent(pg->p, luaL_checkstring(L, 2));
  const char *name = luaL_checkstring(L, 3);
  const pm_method *m = NULL;
  for (int i = 0; ag && i < ag->nmethods; i++)
    if (strcmp(ag->methods[i].name, name) == 0) m = &ag->methods[i];
  if (!m) return luaL_argerror(L, 3, "no such method");
  if (!m->ret) { lua_pushboolean(L, 1); return 1; }
  lua_pushfstring(L, "%s.%s.output", ag->name, m->name);
  lv_result r;
  int bad = lv_validate_type(pg->v, L, 4, m->ret, lua_tostring(L, -1), LV_OUTPUT, 1, &r);
  if (bad) {
    lua_pushnil(L);
    lv_push_error(L, "VALIDATION_FAILED", &r);
    lv_result_free(&r);
    return 2;
  }
  lua_pushboolean(L, 1);
  int results = 1;
  if (r.nwarnings) { lv_push_issues(L, r.warnings, r.nwarnings); results = 2; }
  lv_result_free(&r);
  return results;
}

/* ------------------------------------------------------------ metatables */

void lr_new_metatable(lua_State *L, const char *name, lua_CFunction gc, const luaL_Reg *methods) {
  if (luaL_newmetatable(L, name)) {
    lua_pushstring(L, name);
    lua_setfield(L, -2, "__name");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__close");
    if (methods) {
      lua_newtable(L);
      lua_setfield(L, -2, "__index");
    }
  }
  /* the methods at every opening: the metatable outlives a package.loaded
     that is emptied (busted's insulation), and a second luma/init.lua must
     wrap these, not the first one's wrappers */
  if (methods) {
    lua_getfield(L, -1, "__index");
    lc_setfuncs(L, methods, 0);
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "close");
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

void lr_open(lua_State *L) {
  static const luaL_Reg runtime_methods[] = {
    { "poll", l_runtime_poll },
    { "wait", l_runtime_wait },
    { "fd", l_runtime_fd },
    { "workers", l_runtime_workers },
    { NULL, NULL }
  };
  static const luaL_Reg call_methods[] = {
    { "done", l_call_done },
    { "poll", l_call_poll },
    { "ready", l_call_poll },
    { "wait", l_call_wait },
    { "result", l_call_result },
    { "cancel", l_call_cancel },
    { "progress", l_call_progress },
    { NULL, NULL }
  };
  lr_new_metatable(L, LR_RUNTIME, runtime_gc, runtime_methods);
  lr_new_metatable(L, LR_SCOPE, scope_gc, NULL);
  lr_new_metatable(L, LR_CALL, call_gc, call_methods);
  lua_pushcfunction(L, l_runtime);
  lua_setfield(L, -2, "runtime");
  /* core.Call: the methods, so that the Lua side can add its own (await) */
  luaL_getmetatable(L, LR_CALL);
  lua_getfield(L, -1, "__index");
  lua_setfield(L, -3, "Call");
  lua_pop(L, 1);
}
