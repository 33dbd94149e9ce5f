/* One telemetry event per call: to the program's on_event function and, with
   a trace file, as a JSON line. Inputs, results, secrets and needs are never
   in it. */
#include "telemetry.h"

#include "pipeline.h"

#include "verdict.h"

#include "luma_limits.h"

#include <stdio.h>

#include "compat.h"
#include "ljson.h"
#include "strbuf.h"

void st_emit(lua_State *T, cl_call *c) {
  pl_program *pg = c->pg;
  if (!pg->has_sink && !pg->trace) return;
  long long duration = pl_mono_ms(T, pg) - c->start;
  const char *code = c->ok ? NULL : st_error_code(T, CV_VALUE);
  lua_createtable(T, 0, 12);
  int e = lua_gettop(T);
  lua_pushstring(T, c->t->name);
  lua_setfield(T, e, "tool");
  if (c->scope && c->scope->agent) lua_pushstring(T, c->scope->agent->name); else lua_pushlightuserdata(T, NULL);
  lua_setfield(T, e, "agent");
  lua_pushstring(T, code ? "error" : "ok");
  lua_setfield(T, e, "status");
  if (code) lua_pushstring(T, code); else lua_pushlightuserdata(T, NULL);
  lua_setfield(T, e, "code");
  lua_pushinteger(T, c->ev.attempts);
  lua_setfield(T, e, "attempts");
  lua_pushinteger(T, (lua_Integer)duration);
  lua_setfield(T, e, "duration_ms");
  if (c->ask_id[0]) {
    lua_pushstring(T, c->ask_id);
    lua_setfield(T, e, "ask");
  }
  if (c->run_id[0]) {
    lua_pushstring(T, c->run_id);
    lua_setfield(T, e, "run");
  }
  lua_pushboolean(T, c->ev.cache_hit);
  lua_setfield(T, e, "cache_hit");
  lua_pushboolean(T, c->ev.single_flight);
  lua_setfield(T, e, "single_flight");
  lua_pushboolean(T, c->ev.idempotent_replay);
  lua_setfield(T, e, "idempotent_replay");
  lua_createtable(T, 0, 0);
  int w = lua_gettop(T);
  if (!lua_isnil(T, CV_WARN)) {
    int n = (int)lc_rawlen(T, CV_WARN);
    for (int i = 1; i <= n; i++) {
      lc_rawgeti(T, CV_WARN, i);
      lua_getfield(T, -1, "message");
      lua_rawseti(T, w, i);
      lua_pop(T, 1);
    }
  }
  lj_push_array_mt(T);
  lua_setmetatable(T, w);
  lua_setfield(T, e, "warnings");
  if (lua_istable(T, CV_TAGS)) {
    lua_pushvalue(T, CV_TAGS);
    lua_setfield(T, e, "tags");
  }
  if (c->t->builtin) {
    lua_pushboolean(T, 1);
    lua_setfield(T, e, "builtin");
  }
  if (pg->kind[c->t->index] == PL_MODULE && sx_isolated(pg->module[c->t->index])) {
    lua_pushliteral(T, "process");
    lua_setfield(T, e, "isolation");
    lua_pushinteger(T, sx_landlock_abi());   /* 0: the handler process has seccomp only */
    lua_setfield(T, e, "landlock_abi");
  }
  st_publish(T, pg, e);
  lua_settop(T, e - 1);
}

static void trace_line(lua_State *T, pl_program *pg, int e) {
  sb_buf b;
  sb_init(&b);
  char err[128];
  if (lj_encode(T, e, &b, 0, LIM_TRACE_DEPTH, err, sizeof err) == 0) {
    fwrite(b.data, 1, b.len, pg->trace);
    fputc('\n', pg->trace);
    fflush(pg->trace);
  }
  sb_free(&b);
}

static int push_warning(lua_State *T, const char *message) {
  lua_createtable(T, 0, 2);
  lua_pushliteral(T, "warning");
  lua_setfield(T, -2, "kind");
  lua_pushstring(T, message);
  lua_setfield(T, -2, "message");
  return lua_gettop(T);
}

void st_publish(lua_State *T, pl_program *pg, int e) {
  if (pg->trace) trace_line(T, pg, e);
  if (pg->has_sink) {
    pl_push_anchor(T, pg, "on_event");
    lua_pushvalue(T, e);
    if (lua_pcall(T, 1, 0, 0) != LUA_OK) {
      /* told to the trace only: the sink that failed is not asked again */
      if (pg->trace) {
        const char *msg = lua_type(T, -1) == LUA_TSTRING ? lua_tostring(T, -1) : "an error that is not a string";
        lua_pushfstring(T, "on_event failed: %s", msg);
        trace_line(T, pg, push_warning(T, lua_tostring(T, -1)));
        lua_pop(T, 2);
      }
      lua_pop(T, 1);
    }
  }
}

void st_warn(lua_State *T, pl_program *pg, const char *message) {
  if (!pg->has_sink && !pg->trace) return;
  int e = push_warning(T, message);
  st_publish(T, pg, e);
  lua_settop(T, e - 1);
}
