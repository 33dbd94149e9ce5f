/* One handler call: copy in, run under the deadline, copy out, and turn
   whatever went wrong into a structured error of the host. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "compat.h"
#include "lerror.h"

/* Reads a string field raw, or NULL. */
static const char *raw_string(lua_State *L, int t, const char *key) {
  lua_pushstring(L, key);
  lc_rawget(L, t);
  const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  lua_pop(L, 1);  /* still referenced by the table */
  return s;
}

/* The error value on top of the module's state H, as a host error on L. */
static void push_handler_error(sx_module *m, lua_State *H, int status, lua_State *L, const sx_call_opts *o) {
  char msg[512];
  int e = lua_gettop(H);
  if (m->out_of_memory || status == LUA_ERRMEM) {
    snprintf(msg, sizeof msg, "Tool '%s' ran out of memory.", o->tool);
    le_push(L, "TOOL_MEMORY_LIMIT", msg, 0, 0);
    return;
  }
  if (lua_type(H, e) == LUA_TTABLE && sx_is_tool_error(H, e)) {
    const char *code = raw_string(H, e, "code");
    const char *message = raw_string(H, e, "message");
    lua_pushstring(H, "retryable");
    lc_rawget(H, e);
    int retryable = lua_toboolean(H, -1);
    lua_pop(H, 1);
    int details = 0;
    lua_pushstring(H, "details");
    lc_rawget(H, e);
    if (!lua_isnil(H, -1)) {
      char why[160];
      if (sx_copy(H, -1, L, &o->limits, why, sizeof why) == 0) details = lua_gettop(L);
    }
    lua_pop(H, 1);
    le_push(L, code ? code : "TOOL_FAILED", message ? message : "", retryable, details);
    if (details) lua_remove(L, details);
    return;
  }
  /* only strings are read as messages: no code of the handler's runs here */
  if (lua_type(H, e) == LUA_TSTRING) snprintf(msg, sizeof msg, "%s", lua_tostring(H, e));
  else snprintf(msg, sizeof msg, "Tool '%s' raised a %s value.", o->tool, luaL_typename(H, e));
  le_push(L, "TOOL_FAILED", msg, 0, 0);
}

int sx_call(sx_module *m, const char *name, lua_State *L, int input, int needs, const sx_call_opts *o) {
  char why[200];
  input = lc_absindex(L, input);
  if (needs) needs = lc_absindex(L, needs);
  pthread_mutex_lock(&m->lock);
  lua_State *H = m->L;
  int base = lua_gettop(H);
  int result = -1;
  if (!lua_checkstack(H, 8)) {
    le_push(L, "TOOL_FAILED", "no stack space in the tool module's state", 0, 0);
    goto done;
  }
  lua_rawgeti(H, LUA_REGISTRYINDEX, m->exports_ref);
  lua_pushstring(H, name);
  lc_rawget(H, -2);
  if (lua_type(H, -1) != LUA_TFUNCTION) {
    snprintf(why, sizeof why, "'%s' is not registered in the tool registry.", name);
    le_push(L, "TOOL_NOT_FOUND", why, 0, 0);
    goto done;
  }
  if (sx_copy(L, input, H, &o->limits, why, sizeof why) != 0) {
    char msg[300];
    snprintf(msg, sizeof msg, "%s.input cannot be passed to the handler: %s", o->tool, why);
    le_push(L, "TOOL_INPUT_INVALID", msg, 0, 0);
    goto done;
  }
  lua_rawgeti(H, LUA_REGISTRYINDEX, m->signal_ref);
  if (needs) {
    if (sx_copy(L, needs, H, &o->limits, why, sizeof why) != 0) {
      char msg[300];
      snprintf(msg, sizeof msg, "the needs of %s cannot be passed to the handler: %s", o->tool, why);
      le_push(L, "TOOL_CONTEXT_INVALID", msg, 0, 0);
      goto done;
    }
  } else {
    lua_newtable(H);
  }
  m->tool = o->tool;
  m->timeout_ms = o->timeout_ms;
  m->expired = 0;
  m->out_of_memory = 0;
  m->deadline_ns = o->timeout_ms > 0 ? sx_now_ns() + o->timeout_ms * 1000000LL : 0;
  int status = lua_pcall(H, 3, 1, 0);
  /* a result that comes after the deadline is late: the call timed out */
  if (m->deadline_ns && sx_now_ns() >= m->deadline_ns) m->expired = 1;
  m->deadline_ns = 0;
  if (m->expired) {
    /* even if the handler caught the stop and returned something */
    snprintf(why, sizeof why, "Tool '%s' timed out after %lld ms.", o->tool, o->timeout_ms);
    le_push(L, "TOOL_TIMEOUT", why, 0, 0);
  } else if (status != LUA_OK) {
    push_handler_error(m, H, status, L, o);
  } else if (sx_copy(H, -1, L, &o->limits, why, sizeof why) != 0) {
    char msg[300];
    snprintf(msg, sizeof msg, "%s.output cannot be returned: %s", o->tool, why);
    le_push(L, "TOOL_OUTPUT_INVALID", msg, 0, 0);
  } else {
    result = 0;
  }
done:
  lua_settop(H, base);
  pthread_mutex_unlock(&m->lock);
  return result;
}
