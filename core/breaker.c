/* The circuit breaker: failures are counted within one agent method call
   (its scope); at tool_failure_limit the error becomes TOOL_CIRCUIT_OPEN
   (retryable false), and later calls of that method call fail at once. */
#include "breaker.h"

#include "pipeline.h"

#include <stdio.h>
#include <string.h>

#include "compat.h"
#include "lerror.h"

st_verdict st_breaker_open(lua_State *T, cl_call *c) {
  pl_scope *sc = c->scope;
  const pm_agent *ag = sc ? sc->agent : NULL;
  if (!ag || ag->tool_failure_limit < 0 || sc->failures < ag->tool_failure_limit) return sv_next();
  return st_fail(T, LE_TOOL_CIRCUIT_OPEN,
                 "The circuit breaker of agent '%s' is open: %d tool calls failed in this method call.", ag->name,
                 sc->failures);
}

st_verdict st_count_failure(lua_State *T, cl_call *c) {
  pl_scope *sc = c->scope;
  if (!sc || !sc->agent) return sv_next();
  const char *code = st_error_code(T, CV_VALUE);
  if (strcmp(code, "TOOL_CANCELLED") == 0) return sv_next();   /* the caller's decision, not the tool's failure */
  sc->failures++;
  const pm_agent *ag = sc->agent;
  if (ag->tool_failure_limit < 0 || sc->failures < ag->tool_failure_limit || strcmp(code, "TOOL_CIRCUIT_OPEN") == 0)
    return sv_next();
  char msg[400];
  lua_pushstring(T, "message");
  lc_rawget(T, CV_VALUE);
  snprintf(msg, sizeof msg, "The circuit breaker of agent '%s' opened after %d failed tool calls: %s", ag->name,
           sc->failures, lua_type(T, -1) == LUA_TSTRING ? lua_tostring(T, -1) : "");
  lua_pop(T, 1);
  lua_pushstring(T, "details");
  lc_rawget(T, CV_VALUE);
  int details = lua_isnil(T, -1) ? 0 : lua_gettop(T);
  le_push(T, "TOOL_CIRCUIT_OPEN", msg, 0, details);
  return sv_is(SV_ERROR);
}
