/* Handler calls in three phases, so that the run itself can happen on
   another thread: prepare (the host's thread copies the inputs into the
   module's state, which it locks), execute (any thread runs the prepared
   calls, one after the other), collect (the host's thread copies results
   and errors back, then releases the state). */
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

/* The error value at index e of the module's state H, as a host error on L. */
static void push_handler_error(sx_module *m, lua_State *H, int e, const sx_run *run, lua_State *L) {
  char msg[512];
  const sx_call_opts *o = &run->opts;
  if (run->out_of_memory || run->status == LUA_ERRMEM) {
    snprintf(msg, sizeof msg, "Tool '%s' ran out of memory.", o->tool);
    le_push(L, "TOOL_MEMORY_LIMIT", msg, 0, 0);
    return;
  }
  (void)m;
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

static void prepare_failure(sx_run *run, const char *code, const char *fmt, const char *a, const char *b) {
  run->failed_code = code;
  snprintf(run->failed, sizeof run->failed, fmt, a, b);
}

int sx_prepare(sx_module *m, lua_State *L, sx_run *runs, int n) {
  pthread_mutex_lock(&m->lock);
  lua_State *H = m->L;
  m->base = lua_gettop(H);
  if (!lua_checkstack(H, 4 * n + 8)) {
    for (int i = 0; i < n; i++) prepare_failure(&runs[i], "TOOL_FAILED", "%s%s", "no stack space in the tool module's state", "");
    return 0;
  }
  for (int i = 0; i < n; i++) {
    sx_run *run = &runs[i];
    char why[200];
    run->failed_code = NULL;
    run->fn = run->input_slot = run->needs_slot = 0;
    lua_rawgeti(H, LUA_REGISTRYINDEX, m->exports_ref);
    lua_pushstring(H, run->name);
    lc_rawget(H, -2);
    lua_remove(H, -2);
    if (lua_type(H, -1) != LUA_TFUNCTION) {
      lua_pop(H, 1);
      prepare_failure(run, "TOOL_NOT_FOUND", "'%s' is not registered in the tool registry.%s", run->name, "");
      continue;
    }
    run->fn = lua_gettop(H);
    if (sx_copy(L, run->input, H, &run->opts.limits, why, sizeof why) != 0) {
      prepare_failure(run, "TOOL_INPUT_INVALID", "%s.input cannot be passed to the handler: %s", run->opts.tool, why);
      continue;
    }
    run->input_slot = lua_gettop(H);
    if (run->needs) {
      if (sx_copy(L, run->needs, H, &run->opts.limits, why, sizeof why) != 0) {
        prepare_failure(run, "TOOL_CONTEXT_INVALID", "the needs of %s cannot be passed to the handler: %s", run->opts.tool, why);
        continue;
      }
    } else {
      lua_newtable(H);
    }
    run->needs_slot = lua_gettop(H);
  }
  return 0;
}

void sx_execute(sx_module *m, sx_run *runs, int n) {
  lua_State *H = m->L;
  for (int i = 0; i < n; i++) {
    sx_run *run = &runs[i];
    run->result_slot = 0;
    if (run->failed_code) continue;
    lua_pushvalue(H, run->fn);
    lua_pushvalue(H, run->input_slot);
    lua_rawgeti(H, LUA_REGISTRYINDEX, m->signal_ref);
    lua_pushvalue(H, run->needs_slot);
    m->tool = run->opts.tool;
    m->timeout_ms = run->opts.timeout_ms;
    m->expired = 0;
    m->out_of_memory = 0;
    m->deadline_ns = run->opts.timeout_ms > 0 ? sx_now_ns() + run->opts.timeout_ms * 1000000LL : 0;
    run->status = lua_pcall(H, 3, 1, 0);
    /* a result that comes after the deadline is late: the call timed out */
    if (m->deadline_ns && sx_now_ns() >= m->deadline_ns) m->expired = 1;
    m->deadline_ns = 0;
    run->expired = m->expired;
    run->out_of_memory = m->out_of_memory;
    run->result_slot = lua_gettop(H);
  }
}

int sx_collect(sx_module *m, lua_State *L, const sx_run *run) {
  lua_State *H = m->L;
  char why[200];
  if (run->failed_code) {
    le_push(L, run->failed_code, run->failed, 0, 0);
    return -1;
  }
  if (run->expired) {
    snprintf(why, sizeof why, "Tool '%s' timed out after %lld ms.", run->opts.tool, run->opts.timeout_ms);
    le_push(L, "TOOL_TIMEOUT", why, 0, 0);
    return -1;
  }
  if (run->status != LUA_OK) {
    push_handler_error(m, H, run->result_slot, run, L);
    return -1;
  }
  if (sx_copy(H, run->result_slot, L, &run->opts.limits, why, sizeof why) != 0) {
    char msg[300];
    snprintf(msg, sizeof msg, "%s.output cannot be returned: %s", run->opts.tool, why);
    le_push(L, "TOOL_OUTPUT_INVALID", msg, 0, 0);
    return -1;
  }
  return 0;
}

void sx_release(sx_module *m) {
  lua_settop(m->L, m->base);
  pthread_mutex_unlock(&m->lock);
}

int sx_call(sx_module *m, const char *name, lua_State *L, int input, int needs, const sx_call_opts *o) {
  sx_run run;
  memset(&run, 0, sizeof run);
  run.name = name;
  run.input = lc_absindex(L, input);
  run.needs = needs ? lc_absindex(L, needs) : 0;
  run.opts = *o;
  sx_prepare(m, L, &run, 1);
  sx_execute(m, &run, 1);
  int r = sx_collect(m, L, &run);
  sx_release(m);
  return r;
}
