/* STEP_OUTPUT (steps.h): the result is validated against the tool's return
   schema (soft rules become warnings), a handler's own error against its
   `error` schema; then STEP_RECORD's writes: the idempotency record and the
   cache. */
#include "output.h"

#include "pipeline.h"

#include <stdio.h>
#include <string.h>

#include "cache.h"
#include "compat.h"
#include "idempotent.h"

/* With `error: Schema`, a handler's own error (not one of the runtime's
   TOOL_ codes) must fit it. */
static st_verdict check_typed_error(lua_State *T, cl_call *c) {
  const pm_tool *t = c->t;
  const char *code = st_error_code(T, CV_VALUE);
  if (!t->error || strncmp(code, "TOOL_", 5) == 0) return sv_next();
  lua_createtable(T, 0, 4);
  static const char *const fields[] = { "code", "message", "retryable", "details" };
  for (int i = 0; i < 4; i++) {
    lua_pushstring(T, fields[i]);
    lc_rawget(T, CV_VALUE);
    lua_setfield(T, -2, fields[i]);
  }
  char root[300];
  snprintf(root, sizeof root, "%s.error", t->name);
  lv_result r;
  int bad = lv_validate(c->pg->v, T, -1, t->error, root, LV_OUTPUT, &r);
  lua_pop(T, 1);
  st_verdict v = bad ? st_fail_validation(T, LE_TOOL_ERROR_INVALID, &r) : sv_next();
  lv_result_free(&r);
  return v;
}

st_verdict st_finish(lua_State *T, cl_call *c) {
  const pm_tool *t = c->t;
  if (!c->ok) {
    /* a claim lost under the handler says so, rather than its cancel */
    st_verdict lost = st_idem_settle(T, c, 0);
    st_cache_release(c);
    if (lost.kind == SV_ERROR) return lost;
    return check_typed_error(T, c);
  }
  if (c->ev.cache_hit || c->ev.idempotent_replay) {
    st_cache_release(c);
    return sv_next();
  }
  /* a built-in tool's answer is luma's own, made to its type: the
     program's limits bound what handlers return, not it (a lazy tool's
     description longer than max_string_bytes, or its schema deeper than
     max_depth, would end the ask) */
  if (t->builtin) return sv_next();
  /* a return type is a schema: what is not a table (a handler that
     returned nothing) is said as such, with the schema to return */
  int type = lua_type(T, CV_VALUE);
  if (type != LUA_TTABLE) {
    st_idem_settle(T, c, 0);
    st_cache_release(c);
    return st_fail(T, LE_TOOL_OUTPUT_INVALID, "%s returned %s%s; a handler must return a table matching %s", t->name,
                   type == LUA_TNIL ? "" : "a ", lua_typename(T, type), t->output->name);
  }
  lv_result r;
  int bad = lv_validate(c->pg->v, T, CV_VALUE, t->output, t->output_root, LV_OUTPUT, &r);
  if (bad) {
    st_idem_settle(T, c, 0);
    st_cache_release(c);
    st_verdict v = st_fail_validation(T, LE_TOOL_OUTPUT_INVALID, &r);
    lv_result_free(&r);
    return v;
  }
  if (r.nwarnings) {
    lv_push_issues(T, r.warnings, r.nwarnings);
    lua_replace(T, CV_WARN);
  }
  lv_result_free(&r);
  /* the idempotency store and the cache keep their own copies */
  st_verdict v = st_idem_settle(T, c, 1);
  if (v.kind == SV_WAIT) return v;   /* stored later: STEP_OUTPUT runs again then */
  if (v.kind != SV_NEXT) {
    st_cache_release(c);
    return v;
  }
  st_cache_store(T, c);
  return v;
}

st_verdict st_follow(lua_State *T, cl_call *c, cl_call *lead) {
  char err[200];
  lua_pushvalue(lead->T, CV_WARN);
  lua_xmove(lead->T, T, 1);
  lua_replace(T, CV_WARN);
  lua_pushvalue(lead->T, CV_VALUE);
  lua_xmove(lead->T, T, 1);
  if (sx_copy(T, -1, T, &c->pg->limits, err, sizeof err) == 0) lua_remove(T, -2);
  return sv_is(lead->ok ? SV_RESULT : SV_ERROR);
}
