/* STEP_RUN (steps.h): the handler's attempts. A host handler (program:register)
   and a built-in tool's (C) run here, on the driver's thread, in the home
   state; a module's handler runs in a state of its module, as a job of the
   runtime's pool. A retryable error is tried again after the backoff, as a
   timer of the call, never a sleep; no attempt starts past the deadline. */
#include "attempt.h"

#include "pipeline.h"

#include <limits.h>
#include <string.h>

#include <lauxlib.h>

#include "lerror.h"
#include "policy.h"
#include "runtime.h"

long long st_effective_timeout(const cl_call *c) {
  const pm_tool *t = c->t;
  const pm_agent *ag = c->scope ? c->scope->agent : NULL;
  long long eff = t->timeout >= 0 ? t->timeout : (ag && ag->tool_timeout >= 0 ? ag->tool_timeout : -1);
  if (ag && ag->tool_timeout_max >= 0 && (eff < 0 || eff > ag->tool_timeout_max)) eff = ag->tool_timeout_max;
  if (eff < 0) eff = c->pg->default_timeout_ms;
  /* a longer wait would overflow the clocks' arithmetic: it is forever here */
  return eff > LIM_TIMEOUT_CAP_MS ? LIM_TIMEOUT_CAP_MS : eff;
}

static long long backoff_ms(const pm_tool *t, int attempt) {
  switch (t->retry_backoff) {
    case BO_FIXED: return t->retry_delay;
    case BO_EXPONENTIAL: {
      long long d = t->retry_delay;
      for (int i = 1; i < attempt && d < LLONG_MAX / 2; i++) d *= 2;
      return d;
    }
    default: return 0;
  }
}

static st_verdict timed_out(lua_State *T, cl_call *c) {
  return st_fail(T, LE_TOOL_TIMEOUT, le_template(LE_TOOL_TIMEOUT), c->t->name, c->timeout);
}

/* After an attempt, whose outcome is on top: done, or tried again later. */
static st_verdict after_attempt(lua_State *T, cl_call *c, int status) {
  const pm_tool *t = c->t;
  if (__atomic_load_n(&c->cancelled, __ATOMIC_ACQUIRE))
    return st_fail(T, LE_TOOL_CANCELLED, le_template(LE_TOOL_CANCELLED), t->name);
  if (status == 0) return sv_is(SV_RESULT);
  st_verdict v = st_fail_top(T);
  int e = lua_gettop(T);
  if (!st_error_retryable(T, e) || strcmp(st_error_code(T, e), "TOOL_TIMEOUT") == 0 || c->ev.attempts > t->retries)
    return v;
  long long now = pl_mono_ms(T, c->pg), wait = backoff_ms(t, c->ev.attempts);
  /* a wait past the deadline would see the signal fire: stop here */
  if (wait >= c->deadline - now) return v;
  return wait > 0 ? sv_at(SV_BACKOFF, now + wait) : sv_is(SV_RETRY);
}

/* The host's signal: a table whose fields say whether the deadline passed. */
static int host_signal_check(lua_State *L) {
  lua_getfield(L, 1, "aborted");
  if (lua_toboolean(L, -1)) return le_raise_code(L, LE_TOOL_TIMEOUT, "The tool call's deadline passed.", 0);
  return 0;
}

/* One attempt of a handler registered from the host: it runs in the home
   state, so only its signal and the time it took bound it. SV_NEXT: it
   returned, with its result on top; SV_ERROR: it failed. */
static st_verdict run_host(lua_State *T, cl_call *c, long long timeout_ms) {
  const pm_tool *t = c->t;
  char why[200];
  pl_push_anchor(T, c->pg, "host");
  lua_getfield(T, -1, t->name);
  lua_remove(T, -2);
  /* validated: a record of at most its fields, copied in one pass */
  if (sx_copy_record(T, CV_INPUT, T, &c->pg->limits, t->input->nfields, why, sizeof why) != 0)
    return st_fail(T, LE_TOOL_INPUT_INVALID, "%s.input cannot be passed to the handler: %s", t->name, why);
  lua_createtable(T, 0, 3);
  lua_pushboolean(T, 0);
  lua_setfield(T, -2, "aborted");
  lua_pushcfunction(T, host_signal_check);
  lua_setfield(T, -2, "check");
  /* what is left of the deadline: a handler that waits (an mcp_server's
     call) waits no longer than this */
  lua_pushinteger(T, (lua_Integer)timeout_ms);
  lua_setfield(T, -2, "timeout_ms");
  if (lua_isnil(T, CV_NEEDS)) lua_newtable(T); else lua_pushvalue(T, CV_NEEDS);
  long long start = pl_mono_ms(T, c->pg);
  if (rt_enter(c->rt) != 0) {
    lua_pop(T, 4);
    return st_fail(T, LE_TOOL_FAILED, "Tool '%s' was called from handlers nested too deeply.", t->name);
  }
  int status = lua_pcall(T, 3, 1, 0);
  rt_leave(c->rt);
  long long took = pl_mono_ms(T, c->pg) - start;
  /* a handler that waited out the whole of what was left (an mcp_server's
     call gives up at the deadline itself) reached the deadline: >=, or
     such a call reports its own timeout whenever both fall in one ms */
  if (timeout_ms > 0 && took >= timeout_ms) {
    lua_pop(T, 1);
    return timed_out(T, c);
  }
  if (status == LUA_OK) return sv_next();
  int e = lua_gettop(T);
  if (le_is_error(T, e)) return sv_is(SV_ERROR);
  if (lua_type(T, e) != LUA_TSTRING) {
    lua_pop(T, 1);
    lua_pushfstring(T, "Tool '%s' raised a %s value.", t->name, luaL_typename(T, e));
  }
  le_push_code(T, LE_TOOL_FAILED, lua_tostring(T, -1), 0);
  lua_remove(T, -2);
  return sv_is(SV_ERROR);
}

void st_job_run(wp_job *job) {
  cl_call *c = (cl_call *)((char *)job - offsetof(cl_call, job));
  if (c->making) {
    c->made = sx_make(c->module, c->make_deadline_ns, c->make_why, sizeof c->make_why);
    return;
  }
  sx_execute(c->sx, &c->run, 1);
  /* a handler that waits holds its state no longer than its thread: the
     state serves other calls from now on */
  if (c->run.waiting) sx_suspend(c->sx);
}

static st_verdict make_ready(cl_call *c);

/* The transfer a suspended handler waits for ended (on the transport's I/O
   thread): its driver looks again. */
static void transfer_ended(void *ud) {
  cl_call *c = ud;
  __atomic_store_n(&c->waiter.woken, 1, __ATOMIC_RELEASE);
  rt_wake(c->rt, c);
}

/* Whether c's handler runs inside its step (in_line), on module m */
static int in_line(const cl_call *c, const sx_module *m) {
  return c->inline_ok == 1 || (c->inline_ok == 2 && !sx_isolated(m));
}

/* The handler's job becomes ready (or it runs here, for a lone blocking
   call): c holds state s of module m. */
static st_verdict run_on(lua_State *T, cl_call *c, sx_module *m, sx_state *s, long long left) {
  const pm_tool *t = c->t;
  pl_program *pg = c->pg;
  sx_retain(m);
  c->module = m;
  c->sx = s;
  memset(&c->run, 0, sizeof c->run);
  c->run.name = t->name;
  c->run.input = CV_INPUT;
  c->run.input_keys = t->input->nfields;   /* validated: at most its fields */
  c->run.result_keys = t->output && !t->output->is_union ? t->output->nfields : 0;
  c->run.needs = lua_isnil(T, CV_NEEDS) ? 0 : CV_NEEDS;
  c->run.opts.tool = t->name;
  c->run.opts.timeout_ms = left;
  c->run.opts.limits = pg->limits;
  c->run.opts.progress = rt_progress;
  c->run.opts.progress_ud = c;
  /* a program on a host's clock has timers of that clock, not of the
     wait's: its handlers' waits block as they did */
  c->run.opts.may_wait = !pg->has_clock;
  c->run.opts.wake = transfer_ended;
  c->run.opts.wake_ud = c;
  sx_prepare(s, T, &c->run, 1);
  if (in_line(c, m)) {
    /* the driver would only wait for it: it runs here, where a cancel from
       another thread (a lost idempotency claim) still reaches its signal */
    c->run.opts.hand_off = c->inline_ok == 2 && rt_inline_starts(c->rt) == RT_INLINE_SLICE;
    rt_inline(c->rt, c, 1);
    sx_execute(s, &c->run, 1);
    rt_inline(c->rt, c, 0);
    if (c->run.handed_off) {
      /* it ran its slice (RT_INLINE_SLICE): it goes on on the pool, in the
         state it holds, as a resume after a wait does */
      c->run.opts.hand_off = 0;
      return make_ready(c);
    }
    if (c->run.waiting) sx_suspend(s);
    return st_collect(T, c);
  }
  return make_ready(c);
}

static st_verdict make_ready(cl_call *c) {
  c->job_ready = 1;
  c->job_done = 0;
  if (c->gate) (*c->gate)++;
  return sv_is(SV_HANDLER);
}

/* No state for the call: its module was closed, or none was free in time. */
static st_verdict no_state(lua_State *T, cl_call *c, sx_module *m, const char *why) {
  if (sx_closed(m)) return st_module_closed(T, c);
  return st_fail(T, LE_TOOL_TIMEOUT, "Tool '%s' could not run: %s.", c->t->name, why);
}

/* A state of the module the call waits for is free: its driver steps it. */
static void state_freed(sx_waiter *w) {
  cl_call *c = (cl_call *)((char *)w - offsetof(cl_call, waiter));
  rt_wake(c->rt, c);
}

void st_unwait(cl_call *c) {
  if (!c->waits) return;
  sx_unwait(c->waits, &c->waiter);
  sx_unref(c->waits);
  c->waits = NULL;
}

st_verdict st_attempt(lua_State *T, cl_call *c) {
  const pm_tool *t = c->t;
  pl_program *pg = c->pg;
  long long now = pl_mono_ms(T, pg), left = c->deadline - now;
  c->ev.attempts++;
  if (left <= 0 && !c->queued_at) return timed_out(T, c);
  if (pg->kind[t->index] == PL_HOST) {
    st_verdict v = run_host(T, c, left);
    return after_attempt(T, c, v.kind == SV_NEXT ? 0 : -1);
  }
  /* luma's own (the discovery tool): C, quick, on this thread */
  if (pg->kind[t->index] == PL_BUILTIN) return after_attempt(T, c, pg->discover(T, c));
  sx_module *m = pg->module[t->index];
  char why[200];
  int wait_room = 0;
  /* set once: a waiter still queued from the last attempt is read by the
     thread that frees a state */
  if (!c->waiter.wake) c->waiter.wake = state_freed;
  sx_state *s = sx_try_acquire(m, &wait_room, &c->waiter, why, sizeof why);
  if (!s && !wait_room && !c->waits) {
    /* perhaps in its queue now: st_unwait takes it out */
    sx_retain(m);
    c->waits = m;
  }
  if ((s || wait_room) && c->queued_at) {
    c->deadline += now - c->queued_at;
    left = c->deadline - now;
    c->queued_at = 0;
  }
  if (!s && !wait_room && !sx_closed(m)) {
    if (!c->queued_at) c->queued_at = now;
    if (now < c->queued_at + c->timeout) {
      /* every state is busy: not an attempt yet; it is in the module's
         queue until a state is free, at most its timeout, and the time it
         waits does not count against it */
      c->ev.attempts--;
      return sv_at(SV_WAIT, c->queued_at + c->timeout);
    }
  }
  st_unwait(c);
  if (!s && wait_room) {
    if (!in_line(c, m)) {
      /* a job makes the state, off the driver's thread: loading a module's
         code can take longer than a host's frame */
      sx_retain(m);
      c->module = m;
      c->making = 1;
      c->made = NULL;
      c->make_deadline_ns = sx_now_ns() + left * 1000000LL;
      return make_ready(c);
    }
    s = sx_make(m, sx_now_ns() + left * 1000000LL, why, sizeof why);
  }
  if (!s) return no_state(T, c, m, why);
  return run_on(T, c, m, s, left);
}

/* The job that made a state is done: the handler's job follows. */
static st_verdict made(lua_State *T, cl_call *c) {
  sx_module *m = c->module;
  sx_state *s = c->made;
  c->making = 0;
  c->made = NULL;
  c->module = NULL;
  c->job_done = 0;
  long long left = c->deadline - pl_mono_ms(T, c->pg);
  st_verdict v;
  if (!s) {
    v = no_state(T, c, m, c->make_why);
  } else if (left <= 0) {
    sx_release(s);
    v = timed_out(T, c);
  } else {
    v = run_on(T, c, m, s, left);
  }
  sx_unref(m);
  return v;
}

static void give_back(cl_call *c) {
  sx_release(c->sx);
  sx_unref(c->module);
  c->sx = NULL;
  c->module = NULL;
}

/* The call holds its state no more. */
static void let_go(cl_call *c) {
  sx_unref(c->module);
  c->sx = NULL;
  c->module = NULL;
}

void st_abandon(cl_call *c) {
  if (c->making) {
    /* its state was never made: the right to make it goes back */
    c->making = 0;
    c->job_ready = 0;
    if (c->gate) (*c->gate)--;
    sx_unmake(c->module);
    sx_unref(c->module);
    c->module = NULL;
    return;
  }
  if (!c->sx) return;
  if (c->run.waiting) {
    /* suspended, or its resume made ready: its coroutine goes */
    st_unwait(c);
    if (c->job_ready) sx_suspend(c->sx);
    c->job_ready = 0;
    sx_abandon(c->sx, &c->run);
    if (c->gate) (*c->gate)--;
    let_go(c);
    return;
  }
  c->job_ready = 0;
  if (c->gate) (*c->gate)--;
  give_back(c);
}

/* The handler waits (signal:sleep): its state serves other calls (it was
   given back where the handler ran), and this one looks again when the wait ends, or at its deadline if that comes
   first. It keeps its place in its batch (the gate) meanwhile. */
static st_verdict suspended(lua_State *T, cl_call *c) {
  c->job_done = 0;
  if (c->gate) (*c->gate)++;
  (void)T;
  /* the program's clock is sx_now_ns's (may_wait): the first millisecond
     at or after the wait's end, so that it never resumes early */
  long long wake = c->run.wake_ns == LLONG_MAX ? c->deadline : (c->run.wake_ns + 999999) / 1000000;
  return sv_at(SV_WAIT, wake < c->deadline ? wake : c->deadline);
}

st_verdict st_resume(lua_State *T, cl_call *c) {
  if (pl_mono_ms(T, c->pg) >= c->deadline) {
    /* the wait ran into the deadline: the handler would only be stopped */
    st_abandon(c);
    return timed_out(T, c);
  }
  sx_state *s = sx_try_acquire_state(c->sx, &c->waiter);
  if (!s) {
    /* queued for its state: st_unwait takes it out */
    if (!c->waits) {
      sx_retain(c->module);
      c->waits = c->module;
    }
    return sv_at(SV_WAIT, c->deadline);
  }
  st_unwait(c);
  if (c->gate) (*c->gate)--;
  return make_ready(c);
}

st_verdict st_collect(lua_State *T, cl_call *c) {
  if (c->making) return made(T, c);
  if (c->run.waiting) return suspended(T, c);
  int status = sx_collect(c->sx, T, &c->run);
  give_back(c);
  c->job_done = 0;
  if (c->run.expired && !__atomic_load_n(&c->cancelled, __ATOMIC_ACQUIRE)) {
    /* the handler had what was left of the deadline; the message names the
       tool's timeout, as the specification writes it */
    lua_pop(T, 1);
    return timed_out(T, c);
  }
  return after_attempt(T, c, status);
}
