/* The runtime: the pool, the completion descriptor, and the drivers that
   step calls (rt_drive blocks, rt_poll does not). */
#include "runtime.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "luma_limits.h"
#include "steps.h"

#include <lauxlib.h>

/* Calls started from handlers, nested deeper than LIM_HOST_CALL_DEPTH,
   fail: each level holds a C stack frame of the driver. */
struct rt_runtime {
  int refs;
  int closed;
  lua_State *home;                /* a thread of its own in the host's state, never running */
  int home_ref;
  int workers;
  wp_pool *pool;                  /* made at the first job */
  int efd;                        /* readable when a job finished */
  pthread_mutex_t lock;           /* guards done, and the calls' job_out */
  cl_call *done;                  /* calls whose job finished, not yet drained */
  cl_call *polled;                /* calls started with rt_start, in flight */
  rt_task *tasks;                 /* tasks added with rt_add_task, in flight */
  int notified;                   /* rt_notify wrote the descriptor (atomic) */
  tp_transport *tp;               /* made at the first rt_transport */
  int depth;
};

static void run_here(rt_runtime *rt, cl_call *c);

static void on_done(void *ud, wp_job *job) {
  rt_complete(ud, (cl_call *)((char *)job - offsetof(cl_call, job)));
}

rt_runtime *rt_new(lua_State *home, const rt_options *o, char *err, size_t errlen) {
  rt_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) { snprintf(err, errlen, "out of memory"); return NULL; }
  rt->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (rt->efd < 0) {
    snprintf(err, errlen, "cannot make an eventfd: %s", strerror(errno));
    free(rt);
    return NULL;
  }
  pthread_mutex_init(&rt->lock, NULL);
  rt->refs = 1;
  /* calls make their threads and references from this one: the host's own
     thread may be a coroutine in the middle of something */
  rt->home = lua_newthread(home);
  rt->home_ref = luaL_ref(home, LUA_REGISTRYINDEX);
  rt->workers = o && o->workers > 0 ? o->workers : wp_cpus();
  return rt;
}

void rt_retain(rt_runtime *rt) {
  rt->refs++;
}

void rt_unref(rt_runtime *rt) {
  if (!rt || --rt->refs > 0) return;
  rt_close(rt);
  luaL_unref(rt->home, LUA_REGISTRYINDEX, rt->home_ref);
  tp_free(rt->tp);
  close(rt->efd);
  pthread_mutex_destroy(&rt->lock);
  free(rt);
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
      if (c->job_ready) run_here(rt, c);
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

int rt_closed(const rt_runtime *rt) {
  return rt->closed;
}

lua_State *rt_home(const rt_runtime *rt) {
  return rt->home;
}

int rt_workers(const rt_runtime *rt) {
  return rt->workers;
}

int rt_fd(const rt_runtime *rt) {
  return rt->efd;
}

int rt_enter(rt_runtime *rt) {
  if (rt->depth >= LIM_HOST_CALL_DEPTH) return -1;
  rt->depth++;
  return 0;
}

void rt_leave(rt_runtime *rt) {
  rt->depth--;
}

void rt_complete(rt_runtime *rt, cl_call *c) {
  pthread_mutex_lock(&rt->lock);
  c->done_next = rt->done;
  __atomic_store_n(&rt->done, c, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&rt->lock);
  uint64_t one = 1;
  while (write(rt->efd, &one, sizeof one) < 0 && errno == EINTR) {}
}

void rt_notify(rt_runtime *rt) {
  __atomic_store_n(&rt->notified, 1, __ATOMIC_RELEASE);
  uint64_t one = 1;
  while (write(rt->efd, &one, sizeof one) < 0 && errno == EINTR) {}
}

tp_transport *rt_transport(rt_runtime *rt, char *err, size_t errlen) {
  if (!rt->tp && !rt->closed) rt->tp = tp_new(err, errlen);
  else if (!rt->tp) snprintf(err, errlen, "the runtime is closed");
  return rt->tp;
}

void rt_add_task(rt_runtime *rt, rt_task *t) {
  t->next = rt->tasks;
  rt->tasks = t;
}

void rt_drain(rt_runtime *rt) {
  /* most drives have nothing to drain: no lock, no system call then */
  if (__atomic_exchange_n(&rt->notified, 0, __ATOMIC_ACQ_REL) && !__atomic_load_n(&rt->done, __ATOMIC_ACQUIRE)) {
    uint64_t n;
    while (read(rt->efd, &n, sizeof n) < 0 && errno == EINTR) {}
    return;
  }
  if (!__atomic_load_n(&rt->done, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&rt->lock);
  cl_call *c = rt->done;
  rt->done = NULL;
  while (c) {
    cl_call *next = c->done_next;
    c->done_next = NULL;
    c->job_out = 0;
    c->job_done = 1;
    if (c->gate) (*c->gate)--;
    c = next;
  }
  pthread_mutex_unlock(&rt->lock);
  /* a completion after this read writes again: at worst one wake-up too many */
  uint64_t n;
  while (read(rt->efd, &n, sizeof n) < 0 && errno == EINTR) {}
}

/* Runs c's job on this thread. */
static void run_here(rt_runtime *rt, cl_call *c) {
  pthread_mutex_lock(&rt->lock);
  c->job_ready = 0;
  c->job_out = 1;
  pthread_mutex_unlock(&rt->lock);
  st_job_run(&c->job);
  pthread_mutex_lock(&rt->lock);
  c->job_out = 0;
  c->job_done = 1;
  if (c->gate) (*c->gate)--;
  pthread_mutex_unlock(&rt->lock);
}

int rt_submit(rt_runtime *rt, cl_call *c) {
  if (!rt->pool && !rt->closed) rt->pool = wp_new(rt->workers, on_done, rt);
  if (!rt->pool) { run_here(rt, c); return 0; }
  pthread_mutex_lock(&rt->lock);
  c->job_ready = 0;
  c->job_out = 1;
  pthread_mutex_unlock(&rt->lock);
  if (wp_submit(rt->pool, &c->job) != 0) {
    pthread_mutex_lock(&rt->lock);
    c->job_out = 0;
    pthread_mutex_unlock(&rt->lock);
    run_here(rt, c);
  }
  return 0;
}

void rt_cancel_job(rt_runtime *rt, cl_call *c) {
  pthread_mutex_lock(&rt->lock);
  __atomic_store_n(&c->cancelled, 1, __ATOMIC_RELEASE);
  if (c->job_out && c->sx) sx_interrupt(c->sx);
  pthread_mutex_unlock(&rt->lock);
}

void rt_wait_fd(rt_runtime *rt, long long timeout_ms) {
  struct pollfd p = { rt->efd, POLLIN, 0 };
  int ms = timeout_ms < 0 ? -1 : timeout_ms > 1000000000LL ? 1000000000 : (int)timeout_ms;
  while (poll(&p, 1, ms) < 0 && errno == EINTR) {}
}

void rt_start(rt_runtime *rt, cl_call *c) {
  c->refs++;
  c->polled = 1;
  c->rt_next = rt->polled;
  rt->polled = c;
}

int rt_poll(rt_runtime *rt, long long *wait_ms) {
  rt_drain(rt);
  long long wait = -1;
  int active = 0;
  cl_call **link = &rt->polled;
  while (*link) {
    cl_call *c = *link;
    long long w;
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
    int pending = 0, out = 0, ready = 0;
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
      if (st == CL_WAIT_TIMER && (wait < 0 || w < wait)) { wait = w; sleeper = c; }
    }
    if (!pending) break;
    if (ready == 1 && out == 0) {
      /* a lone handler: this thread would only wait for it */
      for (int i = 0; i < n; i++)
        if (calls[i]->job_ready) run_here(rt, calls[i]);
      continue;
    }
    for (int i = 0; i < n; i++)
      if (calls[i]->job_ready) { rt_submit(rt, calls[i]); out++; }
    if (out > 0) rt_wait_fd(rt, wait);
    else if (sleeper) pl_sleep_ms(sleeper->T, sleeper->pg, wait);
  }
  for (int i = 0; i < n; i++) calls[i]->gate = NULL;
}
