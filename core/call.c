/* The call's state machine: each state, what moves it on, and where it waits. */
#include "steps.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "compat.h"
#include "idem.h"
#include "lcall.h"
#include "lerror.h"
#include "ljson.h"

/* ---------------------------------------------------------- errors */

static int set_failed(lua_State *T, cl_call *c) {
  lua_pushstring(T, c->t->name);
  lua_setfield(T, -2, "tool");
  lua_replace(T, CV_VALUE);
  c->ok = 0;
  return -1;
}

int st_fail(lua_State *T, cl_call *c, le_code code, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  le_push_code(T, code, msg, 0);
  return set_failed(T, c);
}

int st_fail_fixed(lua_State *T, cl_call *c, le_code code, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, code);
  le_vformat(msg, sizeof msg, code, ap);
  va_end(ap);
  le_push_code(T, code, msg, 0);
  return set_failed(T, c);
}

int st_fail_msg(lua_State *T, cl_call *c, le_msg m, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, m);
  le_code code = le_vformat_msg(msg, sizeof msg, m, ap);
  va_end(ap);
  le_push_code(T, code, msg, 0);
  return set_failed(T, c);
}

int st_fail_top(lua_State *T, cl_call *c) {
  if (!le_is_error(T, -1)) {
    const char *msg = lua_type(T, -1) == LUA_TSTRING ? lua_tostring(T, -1) : "an error that is not a string";
    le_push_code(T, LE_TOOL_FAILED, msg, 0);
    lua_remove(T, -2);
  }
  return set_failed(T, c);
}

int st_fail_validation(lua_State *T, cl_call *c, le_code code, const lv_result *r) {
  lv_push_error(T, le_name(code), r);
  return set_failed(T, c);
}

void st_ok_top(lua_State *T, cl_call *c) {
  lua_replace(T, CV_VALUE);
  c->ok = 1;
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

/* ------------------------------------------------------- lifecycle */

/* Calls that are done kept per program for reuse: a thread and its memory. */
#define CL_SPARE 8

static int cancelled(const cl_call *c) {
  return __atomic_load_n(&c->cancelled, __ATOMIC_ACQUIRE);
}

cl_call *cl_new(pl_program *pg, const pm_tool *t, pl_scope *scope, char *err, size_t errlen) {
  if (pg->closed || rt_closed(pg->rt)) {
    snprintf(err, errlen, pg->closed ? "the program is closed" : "the runtime is closed");
    return NULL;
  }
  cl_call *c = pg->spare;
  if (c) {
    /* a call that is done leaves its thread and memory for the next one */
    pg->spare = c->pg_next;
    pg->nspare--;
    lua_State *T = c->T;
    int tref = c->tref;
    memset(c, 0, sizeof *c);
    c->T = T;
    c->tref = tref;
  } else {
    c = calloc(1, sizeof *c);
    if (!c) { snprintf(err, errlen, "out of memory"); return NULL; }
    lua_State *L = pg->L;
    if (!lua_checkstack(L, 2)) { free(c); snprintf(err, errlen, "no stack space"); return NULL; }
    c->T = lua_newthread(L);
    c->tref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_settop(c->T, CV_COUNT);
  }
  c->refs = 1;
  c->rt = pg->rt;
  c->pg = pg;
  pl_retain(pg);
  c->scope = scope;
  if (scope) pl_scope_retain(scope);
  c->t = t;
  c->job.run = st_job_run;
  /* in the program's list of calls in flight */
  c->pg_next = pg->active;
  if (pg->active) pg->active->pg_prev = c;
  pg->active = c;
  return c;
}

/* Frees a call kept as a spare (pl_unref, when the program goes). */
void cl_destroy(lua_State *L, cl_call *c) {
  luaL_unref(L, LUA_REGISTRYINDEX, c->tref);
  free(c);
}

static void unlink_call(cl_call *c) {
  pl_program *pg = c->pg;
  if (!pg) return;
  if (c->pg_prev) c->pg_prev->pg_next = c->pg_next; else if (pg->active == c) pg->active = c->pg_next;
  if (c->pg_next) c->pg_next->pg_prev = c->pg_prev;
  c->pg_next = c->pg_prev = NULL;
}

/* Frees what the call holds once nothing refers to it. */
void cl_release(cl_call *c) {
  if (!c || --c->refs > 0) return;
  pl_program *pg = c->pg;
  unlink_call(c);
  if (c->held) {
    id_abort(pg->idem, c->t->name, c->ikey, c->ikeylen);
    c->held = 0;
  }
  st_cache_release(c);
  if (c->sx) sx_release(c->sx);
  if (c->module) sx_unref(c->module);
  if (c->leader) cl_release(c->leader);
  free(c->ikey);
  if (c->scope) pl_scope_unref(c->scope);
  if (!pg->closed && pg->nspare < CL_SPARE) {
    lua_settop(c->T, 0);
    lua_settop(c->T, CV_COUNT);
    c->pg_next = pg->spare;
    pg->spare = c;
    pg->nspare++;
  } else {
    cl_destroy(pg->L, c);
  }
  pl_unref(pg);
}

void cl_free(cl_call *c) {
  if (!c) return;
  if (c->state != CS_DONE) cl_cancel(c);
  cl_release(c);
}

void cl_cancel(cl_call *c) {
  rt_cancel_job(c->rt, c);
}

void cl_set_ask(cl_call *c, const char *ask_id) {
  snprintf(c->ask_id, sizeof c->ask_id, "%s", ask_id);
}

int cl_done(const cl_call *c) {
  return c->state == CS_DONE;
}

int cl_ok(const cl_call *c) {
  return c->state == CS_DONE && c->ok;
}

/* ---------------------------------------------------------- states */

/* Steps 1 to 7, and the deadline. */
static void start(lua_State *T, cl_call *c) {
  const pm_tool *t = c->t;
  c->start = pl_mono_ms(T, c->pg);
  c->state = CS_FINISH;
  if (st_breaker_open(T, c) != 0 || st_permissions(T, c) != 0) return;
  lv_result r;
  int bad = lv_validate(c->pg->v, T, CV_INPUT, t->input, t->input->display, LV_INPUT, &r);
  if (bad) st_fail_validation(T, c, LE_TOOL_INPUT_INVALID, &r);
  lv_result_free(&r);
  if (bad || st_needs(T, c) != 0) return;
  if (!lua_isnil(T, CV_NEEDS) && t->cache) {
    st_fail_msg(T, c, LE_MSG_CACHE_WITH_NEEDS, t->name);
    return;
  }
  c->timeout = st_effective_timeout(c);
  c->deadline = c->start + c->timeout;
  c->state = CS_LOOKUP;
}

/* Steps 8 and 9. */
static void lookup(lua_State *T, cl_call *c) {
  c->state = CS_FINISH;
  int r = st_cache_lookup(T, c);
  if (r != 0) {
    if (c->leader) c->state = CS_FOLLOW;
    return;
  }
  if (c->state == CS_CACHE_WAIT) return;
  if (c->t->idempotent) {
    r = st_idem_lookup(T, c);
    if (r < 0) return;
    if (r > 0) {
      if (c->leader) c->state = CS_FOLLOW;
      return;
    }
    if (c->state == CS_IDEM_WAIT) return;
  }
  c->state = CS_RUN;
}

/* A follower gets its own copy of its leader's outcome; a leader that was
   cancelled leaves its followers to look again. */
static void follow(lua_State *T, cl_call *c) {
  cl_call *lead = c->leader;
  if (lead->state != CS_DONE) return;
  c->leader = NULL;
  if (lead->cancelled && !(lead->ok)) {
    c->ev.single_flight = c->ev.idempotent_replay = 0;
    c->state = CS_LOOKUP;
  } else {
    st_follow(T, c, lead);
    c->state = CS_END;
  }
  cl_release(lead);
}

/* One protected step: moves through the states until the call must wait. */
static void run_states(lua_State *T, cl_call *c) {
  for (;;) {
    if (lua_gettop(T) != CV_COUNT) lua_settop(T, CV_COUNT);
    if (cancelled(c) && c->state < CS_FINISH && !(c->state == CS_HANDLER && (c->job_out || c->job_done))) {
      if (c->state == CS_HANDLER) st_abandon(c);   /* a job made ready, never run */
      if (c->leader) { cl_release(c->leader); c->leader = NULL; }
      st_fail_fixed(T, c, LE_TOOL_CANCELLED, c->t->name);
      c->state = CS_FINISH;
    }
    switch (c->state) {
      case CS_START: start(T, c); break;
      case CS_LOOKUP: lookup(T, c); break;
      case CS_CACHE_WAIT:
        if (pl_mono_ms(T, c->pg) < c->wake_at) return;
        c->state = CS_LOOKUP;
        break;
      case CS_IDEM_WAIT:
        if (pl_mono_ms(T, c->pg) < c->wake_at) return;
        c->state = CS_FINISH;
        if (st_idem_begin(T, c) == 0 && c->state == CS_FINISH) c->state = CS_RUN;
        break;
      case CS_FOLLOW:
        follow(T, c);
        if (c->state == CS_FOLLOW) return;
        break;
      case CS_RUN:
      case CS_STATE_WAIT:
      case CS_BACKOFF:
        if (c->state != CS_RUN && pl_mono_ms(T, c->pg) < c->wake_at) return;
        c->state = CS_RUN;
        if (c->hold || (c->gate && *c->gate >= c->gate_limit)) return;
        st_attempt(T, c);
        if (c->state == CS_HANDLER || c->state == CS_STATE_WAIT) return;
        break;
      case CS_HANDLER:
        if (!c->job_done) return;
        st_collect(T, c);
        break;
      case CS_FINISH:
        st_finish(T, c);
        c->state = CS_END;
        break;
      case CS_END:
        if (!c->ok) st_count_failure(T, c);
        st_emit(T, c);
        c->state = CS_DONE;
        unlink_call(c);
        return;
      default:
        return;
    }
  }
}

static int step_k(lua_State *T) {
  cl_call *c = lua_touserdata(T, CV_COUNT + 1);
  luaL_checkstack(T, 24, "calling a tool");
  run_states(T, c);
  lua_settop(T, CV_COUNT);
  return CV_COUNT;
}

cl_status cl_step(cl_call *c, long long *wait_ms) {
  if (wait_ms) *wait_ms = 0;
  if (c->state == CS_DONE) return CL_DONE;
  if (c->stepping) return CL_WAIT_HANDLER;
  lua_State *T = c->T;
  c->stepping = 1;
  lua_pushcfunction(T, step_k);
  lua_insert(T, 1);
  lua_pushlightuserdata(T, c);
  if (lua_pcall(T, CV_COUNT + 1, CV_COUNT, 0) != LUA_OK) {
    /* only a memory error gets here: the call's values are lost with it */
    char what[200];
    snprintf(what, sizeof what, "Tool '%s' could not be called", c->t->name);
    pl_lost_values(T, CV_COUNT, CV_VALUE, LE_TOOL_FAILED, what);
    c->ok = 0;
    if (c->held) { id_abort(c->pg->idem, c->t->name, c->ikey, c->ikeylen); c->held = 0; }
    st_cache_release(c);
    c->state = CS_DONE;
    unlink_call(c);
  }
  c->stepping = 0;
  switch (c->state) {
    case CS_DONE: return CL_DONE;
    case CS_CACHE_WAIT: case CS_IDEM_WAIT: case CS_STATE_WAIT: case CS_BACKOFF:
      if (wait_ms) {
        long long left = c->wake_at - pl_mono_ms(T, c->pg);
        *wait_ms = left > 0 ? left : 0;
      }
      return CL_WAIT_TIMER;
    default: return CL_WAIT_HANDLER;
  }
}

/* -------------------------------------------------- the Lua binding */

void lcl_put_input(lua_State *L, int idx, cl_call *c, int copy) {
  lua_State *T = c->T;
  idx = lc_absindex(L, idx);
  if (copy) {
    char why[200];
    sx_limits lim = c->pg->limits;
    if (sx_copy(L, idx, T, &lim, why, sizeof why) != 0) {
      /* validation will say what is wrong with it */
      lua_pushvalue(L, idx);
      lua_xmove(L, T, 1);
    }
  } else {
    lua_pushvalue(L, idx);
    lua_xmove(L, T, 1);
  }
  lua_replace(T, CV_INPUT);
}

void lcl_put_scope_anchor(lua_State *L, int idx, cl_call *c) {
  lua_pushvalue(L, idx);
  lua_xmove(L, c->T, 1);
  lua_replace(c->T, CV_SCOPE);
}

int lcl_take(lua_State *L, cl_call *c, st_event *ev) {
  lua_pushvalue(c->T, CV_VALUE);
  lua_pushvalue(c->T, CV_WARN);
  lua_xmove(c->T, L, 2);
  *ev = c->ev;
  return c->ok;
}

void lcl_push_meta(lua_State *L, const st_event *ev, int warnings) {
  int warned = warnings && !lua_isnil(L, warnings);
  lua_createtable(L, 0, warned ? 5 : 4);   /* 4 fields fit 4 slots; a fifth takes 8 */
  if (warned) {
    lua_pushvalue(L, warnings);
    lua_setfield(L, -2, "warnings");
  }
  lua_pushinteger(L, ev->attempts);
  lua_setfield(L, -2, "attempts");
  lua_pushboolean(L, ev->cache_hit);
  lua_setfield(L, -2, "cache_hit");
  lua_pushboolean(L, ev->single_flight);
  lua_setfield(L, -2, "single_flight");
  lua_pushboolean(L, ev->idempotent_replay);
  lua_setfield(L, -2, "idempotent_replay");
}

int lcl_push_outcome(lua_State *L, cl_call *c) {
  luaL_checkstack(L, 4, "returning a tool's result");
  st_event ev;
  int ok = lcl_take(L, c, &ev);
  if (!ok) {
    lua_pop(L, 1);
    return -1;
  }
  lcl_push_meta(L, &ev, lua_gettop(L));
  lua_remove(L, -2);
  return 0;
}

int cl_set_input_json(cl_call *c, const char *json, size_t len, char *err, size_t errlen) {
  if (!lj_push_text(c->T, json, len, c->pg->limits.max_depth, err, errlen)) return -1;
  lua_replace(c->T, CV_INPUT);
  return 0;
}
