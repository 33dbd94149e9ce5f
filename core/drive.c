/* The drivers of calls: rt_drive blocks until its calls are done, rt_poll
   steps what can move and returns; rt_close ends everything in flight. */
#include "drive.h"

#include "call.h"
#include "callint.h"
#include "pipeline.h"
#include "runtimeint.h"

void rt_close(rt_runtime *rt) {
  if (rt->closed) return;
  rt->closed = 1;
  for (rt_task *t = rt->tasks; t; t = t->next) t->cancel(t);
  for (cl_call *c = rt->polled; c; c = c->rt_next) cl_cancel(c);
  /* every handler on the pool stops (cancelled ones promptly), then the threads go */
  wp_free(rt->pool);
  rt->pool = NULL;
  rt_drain(rt);
  /* each ends now, cancelled (a job made ready runs here: none is left) */
  for (cl_call *c = rt->polled; c; c = c->rt_next) {
    while (cl_step(c, NULL) != CL_DONE) {
      if (c->job_ready) rt_run_here(rt, c);
      else break;
    }
  }
  /* the tasks end now: cancelled, with their calls done */
  while (rt->tasks) {
    rt_task *t = rt->tasks;
    rt->tasks = t->next;
    t->next = NULL;
    while (!t->step(t, NULL)) rt_wait_fd(rt, 10);
    t->release(t);
  }
  /* the polled calls are the runtime's no longer: their owners still have them */
  cl_call *c = rt->polled;
  rt->polled = NULL;
  while (c) {
    cl_call *next = c->rt_next;
    c->polled = 0;
    c->rt_next = NULL;
    cl_release(c);
    c = next;
  }
}

void rt_start(rt_runtime *rt, cl_call *c) {
  c->refs++;
  c->polled = 1;
  c->rt_next = rt->polled;
  rt->polled = c;
}

void rt_kick(rt_runtime *rt, cl_call *c) {
  cl_step(c, NULL);
  if (c->job_ready) rt_submit(rt, c);
}

int rt_poll(rt_runtime *rt, long long *wait_ms) {
  rt_drain(rt);
  long long wait = -1;
  int active = 0;
  cl_call **link = &rt->polled;
  long long now_ms = sx_now_ns() / 1000000;
  while (*link) {
    cl_call *c = *link;
    long long w;
    if (cl_idle(c, now_ms, &w)) {
      if (w >= 0 && (wait < 0 || w < wait)) wait = w;
      active++;
      link = &c->rt_next;
      continue;
    }
    cl_status st = cl_step(c, &w);
    if (st == CL_DONE) {
      *link = c->rt_next;
      c->rt_next = NULL;
      c->polled = 0;
      cl_release(c);
      continue;
    }
    if (c->job_ready) rt_submit(rt, c);
    if (st == CL_WAIT_TIMER && (wait < 0 || w < wait)) wait = w;
    active++;
    link = &c->rt_next;
  }
  rt_task **tlink = &rt->tasks;
  while (*tlink) {
    rt_task *t = *tlink;
    long long w = -1;
    if (t->step(t, &w)) {
      *tlink = t->next;
      t->next = NULL;
      t->release(t);
      continue;
    }
    if (w >= 0 && (wait < 0 || w < wait)) wait = w;
    active++;
    tlink = &t->next;
  }
  if (wait_ms) *wait_ms = wait;
  return active;
}

int rt_poll_until(rt_runtime *rt, int (*done)(void *arg, int active), void *arg, long long timeout_ms) {
  long long end = tp_deadline_ms(timeout_ms);
  for (;;) {
    long long wait;
    int active = rt_poll(rt, &wait);
    if (done(arg, active)) return 1;
    long long now = tp_now_ns() / 1000000;
    if (end >= 0 && now >= end) return 0;
    if (end >= 0 && (wait < 0 || wait > end - now)) wait = end - now;
    rt_wait_fd(rt, wait);
  }
}

void rt_drive(rt_runtime *rt, cl_call **calls, int n, int concurrency) {
  int gate = 0;
  for (int i = 0; i < n; i++) {
    calls[i]->gate = concurrency > 0 ? &gate : NULL;
    calls[i]->gate_limit = concurrency;
    calls[i]->hold = n > 1;
    calls[i]->inline_ok = n == 1;
  }
  /* every call looks its cache and idempotency key up before any runs, so
     that calls of one batch with the same key share a run */
  if (n > 1) {
    for (int i = 0; i < n; i++) cl_step(calls[i], NULL);
    for (int i = 0; i < n; i++) calls[i]->hold = 0;
  }
  for (;;) {
    rt_drain(rt);
    int pending = 0, out = 0, ready = 0, queued = 0;
    long long wait = -1;
    cl_call *sleeper = NULL;
    for (int i = 0; i < n; i++) {
      cl_call *c = calls[i];
      long long w;
      cl_status st = cl_step(c, &w);
      if (st == CL_DONE) continue;
      pending++;
      out += c->job_out;
      ready += c->job_ready;
      /* on a host's clock, its give-up is a sleep of that clock, as any timer */
      queued += (c->state == CS_STATE_WAIT || c->state == CS_SUSPENDED) && !c->pg->has_clock;
      if (st == CL_WAIT_TIMER && (wait < 0 || w < wait)) { wait = w; sleeper = c; }
    }
    if (!pending) break;
    if (ready == 1 && out == 0) {
      /* a lone handler: this thread would only wait for it */
      for (int i = 0; i < n; i++)
        if (calls[i]->job_ready) rt_run_here(rt, calls[i]);
      continue;
    }
    for (int i = 0; i < n; i++)
      if (calls[i]->job_ready) { rt_submit(rt, calls[i]); out++; }
    /* a finished job, a state freed for a queued call, or a claim's end (an
       idempotency waiter) writes the descriptor; a program's own clock
       sleeps its way */
    if (out > 0 || queued > 0 || (sleeper && !sleeper->pg->has_clock)) rt_wait_fd(rt, wait);
    else if (sleeper) pl_sleep_ms(sleeper->T, sleeper->pg, wait);
  }
  for (int i = 0; i < n; i++) calls[i]->gate = NULL;
}
