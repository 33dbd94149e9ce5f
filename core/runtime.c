/* The runtime: the pool, the completion descriptor, the jobs of calls and
   the tasks; the drivers that step calls are in drive.c. */
#include "runtime.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <lauxlib.h>

#include "callint.h"
#include "luma_limits.h"
#include "runtimeint.h"

/* Calls started from handlers, nested deeper than LIM_HOST_CALL_DEPTH,
   fail: each level holds a C stack frame of the driver. */

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

/* The last reference goes when no program is left, hence no call nor task
   (each holds its program, which holds the runtime): only the pool stops. */
void rt_unref(rt_runtime *rt) {
  if (!rt || --rt->refs > 0) return;
  rt->closed = 1;
  wp_free(rt->pool);
  rt->pool = NULL;
  rt_drain(rt);
  luaL_unref(rt->home, LUA_REGISTRYINDEX, rt->home_ref);
  tp_free(rt->tp);
  close(rt->efd);
  pthread_mutex_destroy(&rt->lock);
  free(rt);
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

void rt_run_here(rt_runtime *rt, cl_call *c) {
  pthread_mutex_lock(&rt->lock);
  c->job_ready = 0;
  c->job_out = 1;
  pthread_mutex_unlock(&rt->lock);
  c->job.run(&c->job);
  pthread_mutex_lock(&rt->lock);
  c->job_out = 0;
  c->job_done = 1;
  if (c->gate) (*c->gate)--;
  pthread_mutex_unlock(&rt->lock);
}

int rt_submit(rt_runtime *rt, cl_call *c) {
  if (!rt->pool && !rt->closed) rt->pool = wp_new(rt->workers, on_done, rt);
  if (!rt->pool) { rt_run_here(rt, c); return 0; }
  pthread_mutex_lock(&rt->lock);
  c->job_ready = 0;
  c->job_out = 1;
  pthread_mutex_unlock(&rt->lock);
  if (wp_submit(rt->pool, &c->job) != 0) {
    pthread_mutex_lock(&rt->lock);
    c->job_out = 0;
    pthread_mutex_unlock(&rt->lock);
    rt_run_here(rt, c);
  }
  return 0;
}

void rt_cancel_job(rt_runtime *rt, cl_call *c) {
  pthread_mutex_lock(&rt->lock);
  __atomic_store_n(&c->cancelled, 1, __ATOMIC_RELEASE);
  if ((c->job_out || c->inline_run) && c->sx) sx_interrupt(c->sx);
  pthread_mutex_unlock(&rt->lock);
}

void rt_inline(rt_runtime *rt, cl_call *c, int on) {
  pthread_mutex_lock(&rt->lock);
  c->inline_run = on;
  pthread_mutex_unlock(&rt->lock);
}

void rt_wait_fd(rt_runtime *rt, long long timeout_ms) {
  struct pollfd p = { rt->efd, POLLIN, 0 };
  int ms = timeout_ms < 0 ? -1 : timeout_ms > 1000000000LL ? 1000000000 : (int)timeout_ms;
  while (poll(&p, 1, ms) < 0 && errno == EINTR) {}
}
