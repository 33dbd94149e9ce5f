/* A step's verdict and the errors it carries (verdict.h). */
#include "verdict.h"

#include <stdarg.h>
#include <stdio.h>

#include "compat.h"
#include "lerror.h"

st_verdict st_fail(lua_State *T, le_code code, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt ? fmt : "", ap);
  va_end(ap);
  le_push_code(T, code, msg, 0);
  return sv_is(SV_ERROR);
}

st_verdict st_fail_validation(lua_State *T, le_code code, const lv_result *r) {
  lv_push_error(T, le_name(code), r);
  return sv_is(SV_ERROR);
}

st_verdict st_fail_top(lua_State *T) {
  if (!le_is_error(T, -1)) {
    const char *msg = lua_type(T, -1) == LUA_TSTRING ? lua_tostring(T, -1) : "an error that is not a string";
    le_push_code(T, LE_TOOL_FAILED, msg, 0);
    lua_remove(T, -2);
  }
  return sv_is(SV_ERROR);
}

const char *st_error_code(lua_State *T, int e) {
  lua_pushstring(T, "code");
  lc_rawget(T, e);
  const char *code = lua_type(T, -1) == LUA_TSTRING ? lua_tostring(T, -1) : "TOOL_FAILED";
  lua_pop(T, 1);  /* kept alive by the error */
  return code;
}

int st_error_retryable(lua_State *T, int e) {
  lua_pushstring(T, "retryable");
  lc_rawget(T, e);
  int r = lua_toboolean(T, -1);
  lua_pop(T, 1);
  return r;
}
