/* The drivers of calls: rt_drive blocks until its calls are done, rt_poll
   steps what can move and returns; rt_close ends everything in flight. */
#include "drive.h"

#include <stdlib.h>

#include "call.h"
#include "callint.h"
#include "pipeline.h"
#include "runtimeint.h"

/* The ready queue (any thread puts calls in it: runtime.c's ready_push):
   c leaves it. Under ready_lock. */
static void ready_unlink(rt_runtime *rt, cl_call *c) {
  if (!c->in_ready) return;
  if (c->ready_prev) c->ready_prev->ready_next = c->ready_next;
  else rt->ready_head = c->ready_next;
  if (c->ready_next) c->ready_next->ready_prev = c->ready_prev;
  else rt->ready_tail = c->ready_prev;
  c->ready_next = c->ready_prev = NULL;
  c->in_ready = 0;
}

/* The oldest call of the queue put there no later than `upto`, taken out,
   or NULL. */
static cl_call *ready_pop(rt_runtime *rt, unsigned long long upto) {
  pthread_mutex_lock(&rt->ready_lock);
  cl_call *c = rt->ready_head;
  if (c && c->ready_seq <= upto) ready_unlink(rt, c);
  else c = NULL;
  pthread_mutex_unlock(&rt->ready_lock);
  return c;
}

/* The timers: a binary heap of parked calls, the earliest wake_at first. */
static void heap_put(rt_runtime *rt, int i, cl_call *c) {
  rt->heap[i] = c;
  c->heap_at = i + 1;
}

static void heap_up(rt_runtime *rt, int i) {
  cl_call *c = rt->heap[i];
  while (i > 0 && c->wake_at < rt->heap[(i - 1) / 2]->wake_at) {
    heap_put(rt, i, rt->heap[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  heap_put(rt, i, c);
}

static void heap_down(rt_runtime *rt, int i) {
  cl_call *c = rt->heap[i];
  for (;;) {
    int m = 2 * i + 1;
    if (m >= rt->heap_n) break;
    if (m + 1 < rt->heap_n && rt->heap[m + 1]->wake_at < rt->heap[m]->wake_at) m++;
    if (rt->heap[m]->wake_at >= c->wake_at) break;
    heap_put(rt, i, rt->heap[m]);
    i = m;
  }
  heap_put(rt, i, c);
}

static int heap_add(rt_runtime *rt, cl_call *c) {
  if (rt->heap_n == rt->heap_cap) {
    int cap = rt->heap_cap ? rt->heap_cap * 2 : 64;
    cl_call **h = realloc(rt->heap, (size_t)cap * sizeof *h);
    if (!h) return -1;
    rt->heap = h;
    rt->heap_cap = cap;
  }
  rt->heap[rt->heap_n++] = c;
  heap_up(rt, rt->heap_n - 1);
  return 0;
}

static void heap_remove(rt_runtime *rt, cl_call *c) {
  int i = c->heap_at - 1;
  if (i < 0) return;
  c->heap_at = 0;
  cl_call *last = rt->heap[--rt->heap_n];
  if (i == rt->heap_n) return;
  heap_put(rt, i, last);
  heap_up(rt, i);
  heap_down(rt, last->heap_at - 1);
}

/* The calls stepped at every poll: rest, and rest_todo, those of this poll
   not stepped yet (in_rest says which list). */
static void rest_add(rt_runtime *rt, cl_call *c, int which) {
  if (c->in_rest) return;
  cl_call **head = which == 1 ? &rt->rest : &rt->rest_todo;
  c->rest_prev = NULL;
  c->rest_next = *head;
  if (*head) (*head)->rest_prev = c;
  *head = c;
  c->in_rest = which;
}

static void rest_remove(rt_runtime *rt, cl_call *c) {
  if (!c->in_rest) return;
  cl_call **head = c->in_rest == 1 ? &rt->rest : &rt->rest_todo;
  if (c->rest_prev) c->rest_prev->rest_next = c->rest_next;
  else *head = c->rest_next;
  if (c->rest_next) c->rest_next->rest_prev = c->rest_prev;
  c->rest_next = c->rest_prev = NULL;
  c->in_rest = 0;
}

/* A polled call no longer is: it leaves every list, and the runtime's
   reference goes. */
static void forget(rt_runtime *rt, cl_call *c) {
  heap_remove(rt, c);
  rest_remove(rt, c);
  pthread_mutex_lock(&rt->ready_lock);
  ready_unlink(rt, c);
  c->polled = 0;
  pthread_mutex_unlock(&rt->ready_lock);
  if (c->rt_prev) c->rt_prev->rt_next = c->rt_next;
  else rt->polled = c->rt_next;
  if (c->rt_next) c->rt_next->rt_prev = c->rt_prev;
  c->rt_next = c->rt_prev = NULL;
  rt->npolled--;
  cl_release(c);
}

/* Where a call waits after a step: parked (until its wake_at, in the
   timers, or with no timer) when only an event that puts it in the ready
   queue or its timer can move it (cl_idle); else stepped at every poll.
   A follower waits for its leader's end, which puts nothing in the queue. */
static void place(rt_runtime *rt, cl_call *c, long long now_ms) {
  long long w;
  if (c->state != CS_FOLLOW && cl_idle(c, now_ms, &w)) {
    if (w < 0 || heap_add(rt, c) == 0) return;
  }
  rest_add(rt, c, 1);
}

/* Steps c (taken out of the timers and the rest first) and places it;
   *wait: how long the host may sleep for it. */
static void visit(rt_runtime *rt, cl_call *c, long long now_ms, long long *wait) {
  heap_remove(rt, c);
  rest_remove(rt, c);
  long long w;
  cl_status st = cl_step(c, &w);
  if (st == CL_DONE) {
    /* a call stepped by an outer poll is not done here (cl_step says so) */
    forget(rt, c);
    return;
  }
  if (c->job_ready) rt_submit(rt, c);
  place(rt, c, now_ms);
  if (c->in_rest && st == CL_WAIT_TIMER && (*wait < 0 || w < *wait)) *wait = w;
}

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
  while (rt->polled) forget(rt, rt->polled);
}

void rt_track(rt_runtime *rt, cl_call *c) {
  c->refs++;
  pthread_mutex_lock(&rt->ready_lock);
  c->polled = 1;
  pthread_mutex_unlock(&rt->ready_lock);
  c->rt_prev = NULL;
  c->rt_next = rt->polled;
  if (rt->polled) rt->polled->rt_prev = c;
  rt->polled = c;
  rt->npolled++;
}

void rt_start(rt_runtime *rt, cl_call *c) {
  rt_track(rt, c);
  /* its first step is the next poll's */
  rt_wake(rt, c);
}

void rt_kick(rt_runtime *rt, cl_call *c) {
  if (cl_step(c, NULL) == CL_DONE) {
    /* done at its start (bad input, a cache hit, a handler run inline):
       forgotten now, for a host that never polls (OpenResty's requests
       whose calls all end inline) */
    forget(rt, c);
    return;
  }
  if (c->job_ready) rt_submit(rt, c);
  if (!c->polled) return;
  pthread_mutex_lock(&rt->ready_lock);
  ready_unlink(rt, c);
  pthread_mutex_unlock(&rt->ready_lock);
  place(rt, c, sx_now_ns() / 1000000);
}

/* Steps the calls that can move: those in the ready queue (put there
   before this poll began: a call woken while it is stepped waits for the
   next), those whose timer is due, and those stepped at every poll; the
   parked calls cost nothing. */
int rt_poll(rt_runtime *rt, long long *wait_ms) {
  rt_drain(rt);
  long long wait = -1;
  long long now_ms = sx_now_ns() / 1000000;
  /* the rest of the last poll is this one's to step (a nested poll, from
     a handler on this thread, shares it) */
  while (rt->rest) {
    cl_call *c = rt->rest;
    rest_remove(rt, c);
    rest_add(rt, c, 2);
  }
  while (rt->heap_n > 0 && rt->heap[0]->wake_at <= now_ms) visit(rt, rt->heap[0], now_ms, &wait);
  pthread_mutex_lock(&rt->ready_lock);
  unsigned long long upto = rt->ready_seq;
  pthread_mutex_unlock(&rt->ready_lock);
  for (cl_call *c; (c = ready_pop(rt, upto));) visit(rt, c, now_ms, &wait);
  while (rt->rest_todo) visit(rt, rt->rest_todo, now_ms, &wait);
  if (rt->heap_n > 0) {
    long long w = rt->heap[0]->wake_at - now_ms;
    if (w < 0) w = 0;
    if (wait < 0 || w < wait) wait = w;
  }
  pthread_mutex_lock(&rt->ready_lock);
  if (rt->ready_head) wait = 0;
  pthread_mutex_unlock(&rt->ready_lock);
  int active = rt->npolled;
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
