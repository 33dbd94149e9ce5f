/* The call's state machine: each state, what moves it on, and where it
   waits. The steps (steps.h) return verdicts; only this file moves a call's
   state or sets its outcome. */
#include "call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "attempt.h"
#include "breaker.h"
#include "cache.h"
#include "callint.h"
#include "idem.h"
#include "idempotent.h"
#include "ljson.h"
#include "needs.h"
#include "output.h"
#include "pipeline.h"
#include "policy.h"
#include "runtime.h"
#include "steps.h"
#include "telemetry.h"
#include "verdict.h"

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

static void destroy(lua_State *L, cl_call *c) {
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
  st_idem_unwatch(c);
  st_cache_release(c);
  st_unwait(c);
  if (c->sx && c->run.waiting) sx_abandon(c->sx, &c->run);
  else if (c->sx) sx_release(c->sx);
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
    destroy(pg->L, c);
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

void cl_set_approved(cl_call *c) {
  c->person_approved = 1;
}

void cl_set_ask(cl_call *c, struct ak_ask *ask, const char *ask_id, const char *run_id) {
  c->ask = ask;
  snprintf(c->ask_id, sizeof c->ask_id, "%s", ask_id);
  snprintf(c->run_id, sizeof c->run_id, "%s", run_id ? run_id : "");
}

int cl_done(const cl_call *c) {
  return c->state == CS_DONE;
}

int cl_ok(const cl_call *c) {
  return c->state == CS_DONE && c->ok;
}

/* ---------------------------------------------------------- states */

/* The value a verdict carries on top becomes the call's outcome. */
static void take_outcome(lua_State *T, cl_call *c, sv_kind kind) {
  if (kind != SV_RESULT) {
    lua_pushstring(T, c->t->name);
    lua_setfield(T, -2, "tool");
  }
  lua_replace(T, CV_VALUE);
  c->ok = kind == SV_RESULT;
}

/* Moves the call on a step's verdict: to `next` when the step lets it go
   on, to `wait` when the step says not yet. */
static void move(lua_State *T, cl_call *c, st_verdict v, int next, int wait) {
  switch (v.kind) {
    case SV_NEXT: c->state = next; break;
    case SV_RESULT:
    case SV_ERROR: take_outcome(T, c, v.kind); c->state = CS_FINISH; break;
    case SV_FOLLOW: c->state = CS_FOLLOW; break;
    case SV_WAIT: c->wake_at = v.at; c->state = wait; break;
    case SV_RETRY: take_outcome(T, c, SV_ERROR); c->state = CS_RUN; break;
    case SV_BACKOFF: take_outcome(T, c, SV_ERROR); c->wake_at = v.at; c->state = CS_BACKOFF; break;
    case SV_HANDLER: c->state = CS_HANDLER; break;
  }
}

/* STEP_INPUT: the input fits the tool's parameters. */
static st_verdict check_input(lua_State *T, cl_call *c) {
  const pm_tool *t = c->t;
  lv_result r;
  int bad = lv_validate(c->pg->v, T, CV_INPUT, t->input, t->input->display, LV_INPUT, &r);
  st_verdict v = bad ? st_fail_validation(T, LE_TOOL_INPUT_INVALID, &r) : sv_next();
  lv_result_free(&r);
  return v;
}

/* STEP_REGISTRY to STEP_NEEDS (the breaker's open state first), and the deadline. */
static void start(lua_State *T, cl_call *c) {
  const pm_tool *t = c->t;
  c->start = pl_mono_ms(T, c->pg);
  st_verdict v = st_breaker_open(T, c);
  if (v.kind == SV_NEXT) v = st_permissions(T, c);
  if (v.kind == SV_NEXT) v = check_input(T, c);
  if (v.kind == SV_NEXT) v = st_needs(T, c);
  if (v.kind == SV_NEXT && !lua_isnil(T, CV_NEEDS) && t->cache)
    v = st_fail(T, le_msg_code(LE_MSG_CACHE_WITH_NEEDS), le_msg_template(LE_MSG_CACHE_WITH_NEEDS), t->name);
  if (v.kind == SV_NEXT) {
    c->timeout = st_effective_timeout(c);
    c->deadline = c->start + c->timeout;
  }
  move(T, c, v, CS_LOOKUP, CS_START);
}

/* STEP_CACHE and STEP_IDEMPOTENCY. */
static void lookup(lua_State *T, cl_call *c) {
  st_verdict v = st_cache_lookup(T, c);
  if (v.kind == SV_NEXT && c->t->idempotent) {
    move(T, c, st_idem_lookup(T, c), CS_RUN, CS_IDEM_WAIT);
    return;
  }
  move(T, c, v, CS_RUN, CS_CACHE_WAIT);
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
    take_outcome(T, c, st_follow(T, c, lead).kind);
    c->state = CS_END;
  }
  cl_release(lead);
}

/* One protected step: moves through the states until the call must wait. */
static void run_states(lua_State *T, cl_call *c) {
  for (;;) {
    if (lua_gettop(T) != CV_COUNT) lua_settop(T, CV_COUNT);
    if (cancelled(c) && c->state < CS_FINISH && !(c->state == CS_HANDLER && (c->job_out || c->job_done))) {
      /* a job made ready, never run; a handler suspended in a wait */
      if (c->state == CS_HANDLER || c->state == CS_SUSPENDED) st_abandon(c);
      st_unwait(c);
      if (c->leader) { cl_release(c->leader); c->leader = NULL; }
      move(T, c, st_fail(T, LE_TOOL_CANCELLED, le_template(LE_TOOL_CANCELLED), c->t->name), CS_FINISH, CS_FINISH);
    }
    switch (c->state) {
      case CS_START: start(T, c); break;
      case CS_LOOKUP: lookup(T, c); break;
      case CS_CACHE_WAIT:
        if (pl_mono_ms(T, c->pg) < c->wake_at) return;
        c->state = CS_LOOKUP;
        break;
      case CS_IDEM_WAIT:
        if (pl_mono_ms(T, c->pg) < c->wake_at && !__atomic_load_n(&c->iwoken, __ATOMIC_ACQUIRE)) return;
        move(T, c, st_idem_begin(T, c), CS_RUN, CS_IDEM_WAIT);
        break;
      case CS_FOLLOW:
        follow(T, c);
        if (c->state == CS_FOLLOW) return;
        break;
      case CS_RUN:
      case CS_STATE_WAIT:
      case CS_BACKOFF:
        if (c->state != CS_RUN && pl_mono_ms(T, c->pg) < c->wake_at &&
            !(c->state == CS_STATE_WAIT && sx_woken(&c->waiter)))
          return;
        c->state = CS_RUN;
        if (c->hold || (c->gate && *c->gate >= c->gate_limit)) return;
      {
        st_verdict v = st_attempt(T, c);
        move(T, c, v, CS_RUN, c->run.waiting ? CS_SUSPENDED : CS_STATE_WAIT);
        if (c->state == CS_HANDLER || c->state == CS_STATE_WAIT || c->state == CS_SUSPENDED) return;
        break;
      }
      case CS_HANDLER: {
        if (!c->job_done) return;
        st_verdict v = st_collect(T, c);
        move(T, c, v, CS_RUN, c->run.waiting ? CS_SUSPENDED : CS_STATE_WAIT);
        break;
      }
      case CS_SUSPENDED:
        if (pl_mono_ms(T, c->pg) < c->wake_at && !sx_woken(&c->waiter)) return;
        move(T, c, st_resume(T, c), CS_RUN, CS_SUSPENDED);
        if (c->state == CS_HANDLER || c->state == CS_SUSPENDED) return;
        break;
      case CS_STORE_WAIT:
        if (pl_mono_ms(T, c->pg) < c->wake_at) return;
        /* fall through */
      case CS_FINISH: {
        st_verdict v = st_finish(T, c);
        if (v.kind == SV_WAIT) {
          c->wake_at = v.at;
          c->state = CS_STORE_WAIT;
          return;
        }
        if (v.kind == SV_ERROR) take_outcome(T, c, SV_ERROR);
        c->state = CS_END;
        break;
      }
      case CS_END:
        if (!c->ok && st_count_failure(T, c).kind == SV_ERROR) take_outcome(T, c, SV_ERROR);
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

int cl_idle(const cl_call *c, long long now_ms, long long *timer_ms) {
  *timer_ms = -1;
  if (c->stepping || cancelled(c)) return 0;
  switch (c->state) {
    case CS_HANDLER: return !c->job_ready && !c->job_done;
    case CS_FOLLOW: return c->leader && c->leader->state != CS_DONE;
    case CS_STATE_WAIT:
    case CS_SUSPENDED: {
      /* a clock of the host's is a Lua function: only a protected step reads it */
      if (c->pg->has_clock || sx_woken(&c->waiter)) return 0;
      long long left = c->wake_at - now_ms;
      if (left <= 0) return 0;
      *timer_ms = left;
      return 1;
    }
    default: return 0;
  }
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
    case CS_CACHE_WAIT: case CS_IDEM_WAIT: case CS_STATE_WAIT: case CS_BACKOFF: case CS_STORE_WAIT:
    case CS_SUSPENDED:
      if (wait_ms) {
        long long left = c->wake_at - pl_mono_ms(T, c->pg);
        *wait_ms = left > 0 ? left : 0;
      }
      return CL_WAIT_TIMER;
    default: return CL_WAIT_HANDLER;
  }
}

int cl_set_input_json(cl_call *c, const char *json, size_t len, char *err, size_t errlen) {
  if (!lj_push_text(c->T, json, len, c->pg->limits.max_depth, err, errlen)) return -1;
  lua_replace(c->T, CV_INPUT);
  return 0;
}
