/* The runtime: the pool, the completion descriptor, the jobs of calls and
   the tasks; the drivers that step calls are in drive.c. */
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <lauxlib.h>

#include "callint.h"
#include "luma_limits.h"
#include "runtimeint.h"
#include "utf8.h"

/* Calls started from handlers, nested deeper than LIM_HOST_CALL_DEPTH,
   fail: each level holds a C stack frame of the driver. */

static void forget_listener(rt_runtime *rt);

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
  pthread_mutex_init(&rt->wake_lock, NULL);
  pthread_mutex_init(&rt->ready_lock, NULL);
  rt->wake_listen = rt->wake_conn = -1;
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
  forget_listener(rt);
  if (rt->wake_conn >= 0) close(rt->wake_conn);
  pthread_mutex_destroy(&rt->wake_lock);
  pthread_mutex_destroy(&rt->ready_lock);
  pthread_mutex_destroy(&rt->lock);
  free(rt->heap);
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

void rt_set_inline(rt_runtime *rt, int on) {
  rt->inline_starts = on == RT_INLINE_SLICE ? RT_INLINE_SLICE : on != 0;
}

int rt_inline_starts(const rt_runtime *rt) {
  return rt->inline_starts;
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

/* The host's connection to rt_wake_socket, if any, turns readable too. */
static void wake_host(rt_runtime *rt) {
  if (__atomic_load_n(&rt->wake_conn, __ATOMIC_ACQUIRE) < 0) return;
  pthread_mutex_lock(&rt->wake_lock);
  /* full: the bytes already there wake the host */
  if (rt->wake_conn >= 0) (void)send(rt->wake_conn, "!", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  pthread_mutex_unlock(&rt->wake_lock);
}

/* The listening socket and its path (and folder) go. */
static void forget_listener(rt_runtime *rt) {
  if (rt->wake_listen < 0) return;
  close(rt->wake_listen);
  rt->wake_listen = -1;
  unlink(rt->wake_path);
  char *slash = strrchr(rt->wake_path, '/');
  if (slash) {
    *slash = 0;
    rmdir(rt->wake_path);
  }
  rt->wake_path[0] = 0;
}

int rt_wake_socket(rt_runtime *rt, char *path, size_t len, char *err, size_t errlen) {
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  char dir[sizeof a.sun_path];
  if ((size_t)snprintf(dir, sizeof dir, "%s/luma-wake-XXXXXX", base) >= sizeof dir - 3) {
    snprintf(err, errlen, "the folder for the wake socket, %s, is too long for a socket's path", base);
    return -1;
  }
  if (!mkdtemp(dir)) {
    snprintf(err, errlen, "cannot make a folder in %s for the wake socket: %s", base, strerror(errno));
    return -1;
  }
  size_t n = strlen(dir);   /* room for "/s" was checked above */
  memcpy(a.sun_path, dir, n);
  memcpy(a.sun_path + n, "/s", 3);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1) != 0) {
    snprintf(err, errlen, "cannot listen at %s: %s", a.sun_path, strerror(errno));
    if (fd >= 0) close(fd);
    unlink(a.sun_path);
    rmdir(dir);
    return -1;
  }
  if (strlen(a.sun_path) >= len) {
    close(fd);
    unlink(a.sun_path);
    rmdir(dir);
    snprintf(err, errlen, "the wake socket's path does not fit in %zu bytes", len);
    return -1;
  }
  forget_listener(rt);
  rt->wake_listen = fd;
  snprintf(rt->wake_path, sizeof rt->wake_path, "%s", a.sun_path);
  snprintf(path, len, "%s", a.sun_path);
  return 0;
}

/* The host connected to the wake socket: its connection replaces the last. */
static void accept_host(rt_runtime *rt) {
  int fd = accept(rt->wake_listen, NULL, NULL);
  if (fd < 0) return;
  /* the handlers' children close every descriptor they did not make anyway */
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  pthread_mutex_lock(&rt->wake_lock);
  int old = rt->wake_conn;
  __atomic_store_n(&rt->wake_conn, fd, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&rt->wake_lock);
  if (old >= 0) close(old);
  forget_listener(rt);
}

/* c goes at the end of the ready queue, once. */
static void ready_push(rt_runtime *rt, cl_call *c) {
  pthread_mutex_lock(&rt->ready_lock);
  if (c->polled && !c->in_ready) {
    c->in_ready = 1;
    c->ready_seq = ++rt->ready_seq;
    c->ready_next = NULL;
    c->ready_prev = rt->ready_tail;
    if (rt->ready_tail) rt->ready_tail->ready_next = c;
    else rt->ready_head = c;
    rt->ready_tail = c;
  }
  pthread_mutex_unlock(&rt->ready_lock);
}

void rt_wake(rt_runtime *rt, cl_call *c) {
  ready_push(rt, c);
  rt_notify(rt);
}

void rt_complete(rt_runtime *rt, cl_call *c) {
  pthread_mutex_lock(&rt->lock);
  c->done_next = rt->done;
  __atomic_store_n(&rt->done, c, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&rt->lock);
  uint64_t one = 1;
  while (write(rt->efd, &one, sizeof one) < 0 && errno == EINTR) {}
  wake_host(rt);
}

void rt_notify(rt_runtime *rt) {
  __atomic_store_n(&rt->notified, 1, __ATOMIC_RELEASE);
  uint64_t one = 1;
  while (write(rt->efd, &one, sizeof one) < 0 && errno == EINTR) {}
  wake_host(rt);
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
  if (rt->wake_listen >= 0) accept_host(rt);
  /* most drives have nothing to drain: no lock, no system call then */
  if (!__atomic_load_n(&rt->notified, __ATOMIC_ACQUIRE) && !__atomic_load_n(&rt->done, __ATOMIC_ACQUIRE)) return;
  /* the descriptor is cleared before the list is looked at: a job that
     finishes after the look writes it again. (Cleared after, it could
     swallow the write of a job finished in between, whose call then waited
     for the next timer: with calls suspended in their states, the deadline
     of one waiting for the state that job held.) */
  __atomic_store_n(&rt->notified, 0, __ATOMIC_RELEASE);
  uint64_t n;
  while (read(rt->efd, &n, sizeof n) < 0 && errno == EINTR) {}
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
    ready_push(rt, c);
    c = next;
  }
  pthread_mutex_unlock(&rt->lock);
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
  if ((c->job_out || c->inline_run) && c->sx) sx_interrupt(c->sx, &c->run);
  pthread_mutex_unlock(&rt->lock);
  /* a call suspended in a wait ends at its next step: its driver looks now */
  rt_wake(rt, c);
}

void rt_progress(void *ud, double n, double total, const char *message, size_t len) {
  cl_call *c = ud;
  rt_runtime *rt = c->rt;
  len = u8_cut(message, len, sizeof c->prog_msg - 1);   /* not inside a character */
  pthread_mutex_lock(&rt->lock);
  c->prog_n = n;
  c->prog_total = total;
  c->prog_has_msg = message != NULL;
  if (message) memcpy(c->prog_msg, message, len);
  c->prog_msg[message ? len : 0] = 0;
  c->prog_seq++;
  pthread_mutex_unlock(&rt->lock);
  rt_notify(rt);
}

unsigned rt_progress_read(rt_runtime *rt, cl_call *c, double *n, double *total, char *msg, size_t msglen,
                          int *has_msg) {
  pthread_mutex_lock(&rt->lock);
  unsigned seq = c->prog_seq;
  if (seq) {
    *n = c->prog_n;
    *total = c->prog_total;
    *has_msg = c->prog_has_msg;
    snprintf(msg, msglen, "%s", c->prog_msg);
  }
  pthread_mutex_unlock(&rt->lock);
  return seq;
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
