/* A handler process's side of process isolation (the host's is
   isolate.c, whose comment says how the child is made and why): a clean
   process, confined before any code of the module runs, which loads the
   module and then answers one request at a time on its socket. */
#define _GNU_SOURCE
#include "child.h"

#include <stdio.h>
#include <stdlib.h>

#if LUA_VERSION_NUM >= 504
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <lauxlib.h>

#include "http.h"
#include "state.h"
#include "watch.h"
#include "wire.h"

static int read_full(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = read(fd, p, n);
    if (k > 0) { p += k; n -= (size_t)k; continue; }
    if (k < 0 && errno == EINTR) continue;
    return -1;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k > 0) { p += k; n -= (size_t)k; continue; }
    if (k < 0 && errno == EINTR) continue;
    return -1;
  }
  return 0;
}

static void child_send(int fd, sb_buf *b) {
  if (frame_end(b) != 0 || write_full(fd, b->data, b->len) != 0) _exit(0);
}

static void child_fail(int fd, const char *msg) {
  sb_buf b;
  sb_init(&b);
  frame_start(&b);
  sb_addc(&b, K_FAILED);
  sb_adds(&b, msg);
  child_send(fd, &b);
  _exit(0);
}

/* A clean process: only this thread, default signal actions, and no
   descriptor of the host's. fds 0 and 1 are /dev/null; fd 2 is pipe_end, the
   write end of a pipe whose other end the host reads and relays to its own
   stderr (isolate.c: bounded, each line marked with the module, control
   characters escaped), or /dev/null when pipe_end is -1 (the host has no stderr
   to relay to). Nothing the host had open reaches the child: not its
   stderr (a file the child could seek, truncate or read back, a
   terminal, a directory it could list), nor, for a host started with fd 2
   closed, what the host opened there (an eventfd, a socket, a database).
   The socket and the pipe move above 2 first if they were there. Returns
   the socket's fd. */
static int child_reset(int keep, int pipe_end) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  sx_watch_after_fork();
  sh_after_fork();
  int watch = sx_deadline_signal();
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig == watch || sig == SIGKILL || sig == SIGSTOP) continue;
    signal(sig, sig == SIGPIPE ? SIG_IGN : SIG_DFL);
  }
  if (keep <= 2) {
    int moved = fcntl(keep, F_DUPFD_CLOEXEC, 3);
    if (moved < 0) _exit(0);
    keep = moved;
  }
  if (pipe_end >= 0 && pipe_end <= 2) {
    int moved = fcntl(pipe_end, F_DUPFD_CLOEXEC, 3);
    if (moved < 0) _exit(0);
    pipe_end = moved;
  }
  int null = open("/dev/null", O_RDWR);
  if (null < 0) _exit(0);
  if (dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(pipe_end >= 0 ? pipe_end : null, 2) < 0) _exit(0);
  if (null > 2 && null != keep) close(null);
  for (int fd = 3; fd < keep; fd++) close(fd);
  if (close_range((unsigned)keep + 1, ~0U, 0) != 0) {
    long max = sysconf(_SC_OPEN_MAX);
    for (long fd = keep + 1; fd < (max > 0 && max < 65536 ? max : 65536); fd++) close((int)fd);
  }
  /* stderr's stream may be locked by a thread that is not here */
  FILE *err = fdopen(2, "w");
  if (err) stderr = err;
  return keep;
}

typedef struct child_req {
  const char *p;
  size_t left;
} child_req;

/* Protected, on the transfer state: pushes the input and the needs. */
static int child_values(lua_State *T) {
  child_req *q = lua_touserdata(T, 1);
  lua_settop(T, 0);
  for (int i = 0; i < 2; i++) {
    size_t used;
    if (sx_wire_get(T, q->p, q->left, 0, &used) != 0) return luaL_error(T, "malformed request");
    q->p += used;
    q->left -= used;
  }
  return 2;
}

/* Protected: the error on top of T as the reply's fields. */
static int child_error(lua_State *T) {
  sb_buf *b = lua_touserdata(T, 1);
  int e = 2;
  lua_getfield(T, e, "retryable");
  sb_addc(b, (char)lua_toboolean(T, -1));
  static const char *const fields[] = { "code", "message", "details" };
  for (int i = 0; i < 3; i++) {
    lua_getfield(T, e, fields[i]);
    if (i < 2 && lua_type(T, -1) != LUA_TSTRING) {
      lua_pop(T, 1);
      lua_pushstring(T, i == 0 ? "TOOL_FAILED" : "");
    }
    if (sx_wire_put(T, -1, b) != 0) {
      lua_pop(T, 1);
      lua_pushnil(T);
      sx_wire_put(T, -1, b);
    }
  }
  return 0;
}

static void child_serve(sx_state *s, int fd) {
  lua_State *T = luaL_newstate();
  if (!T) _exit(0);
  char first[FIRST_READ];
  for (;;) {
    /* a small request comes in one read */
    ssize_t got;
    while ((got = read(fd, first, sizeof first)) < 0 && errno == EINTR) {}
    if (got <= 0) _exit(0);
    size_t have = (size_t)got;
    if (have < sizeof(uint32_t)) {
      if (read_full(fd, first + have, sizeof(uint32_t) - have) != 0) _exit(0);
      have = sizeof(uint32_t);
    }
    uint32_t len;
    memcpy(&len, first, sizeof len);
    req_head h;
    if (len < sizeof h || have - sizeof len > len) _exit(0);
    char *buf = malloc(len);
    if (!buf) _exit(0);
    memcpy(buf, first + sizeof len, have - sizeof len);
    if (read_full(fd, buf + (have - sizeof len), len - (have - sizeof len)) != 0) _exit(0);
    memcpy(&h, buf, sizeof h);
    if (h.name_len > len - sizeof h) _exit(0);
    char *name = malloc((size_t)h.name_len + 1);
    if (!name) _exit(0);
    memcpy(name, buf + sizeof h, h.name_len);
    name[h.name_len] = '\0';
    child_req q = { buf + sizeof h + h.name_len, len - sizeof h - h.name_len };
    lua_settop(T, 0);
    lua_pushcfunction(T, child_values);
    lua_pushlightuserdata(T, &q);
    if (lua_pcall(T, 1, 2, 0) != LUA_OK) _exit(0);
    sx_run run;
    memset(&run, 0, sizeof run);
    run.name = name;
    run.input = 1;
    run.needs = lua_isnil(T, 2) ? 0 : 2;
    run.opts.tool = name;
    run.opts.timeout_ms = h.timeout_ms;
    sx_default_limits(&run.opts.limits);
    run.opts.limits.max_values = (size_t)h.max_values;
    run.opts.limits.max_bytes = (size_t)h.max_bytes;
    run.opts.limits.max_depth = h.max_depth;
    sx_prepare(s, T, &run, 1);
    sx_execute(s, &run, 1);
    int st = sx_collect(s, T, &run);
    sb_buf b;
    sb_init(&b);
    frame_start(&b);
    if (run.expired) {
      sb_addc(&b, K_TIMEOUT);
      sb_addc(&b, 1);
    } else if (st == 0) {
      sb_addc(&b, K_OK);
      sb_addc(&b, (char)s->broken);
      if (sx_wire_put(T, -1, &b) != 0) b.failed = 1;
    } else {
      sb_addc(&b, K_ERROR);
      sb_addc(&b, (char)s->broken);
      lua_pushcfunction(T, child_error);
      lua_pushlightuserdata(T, &b);
      lua_pushvalue(T, -3);
      if (lua_pcall(T, 2, 0, 0) != LUA_OK) b.failed = 1;
    }
    child_send(fd, &b);
    sb_free(&b);
    free(name);
    free(buf);
    lua_settop(s->L, s->base);
    lua_settop(T, 0);
    if (lua_gc(T, LUA_GCCOUNT, 0) > 4096) lua_gc(T, LUA_GCCOLLECT, 0);
    /* a state that hit a limit is not used again: neither is its process */
    if (s->broken) _exit(0);
  }
}

void sx_child_main(sx_module *m, int fd, int err_fd, const char *pids_cgroup, pid_t host, long long deadline_ns) {
  char err[1024];
  fd = child_reset(fd, err_fd);
  sx_limits lim;
  sx_default_limits(&lim);
  sx_confinement c = { sx_policy_of(m), lim.max_bytes, host, NULL, NULL, fd, pids_cgroup };
  sx_roots_of(m, &c.project_root, &c.dependency_root);
  if (sx_confine(&c, err, sizeof err) != 0) child_fail(fd, err);
  sx_state *s = sx_compose(m, deadline_ns, err, sizeof err);
  if (!s) child_fail(fd, err);
  int n;
  const char *const *names = sx_exports(m, &n);
  sb_buf b;
  sb_init(&b);
  frame_start(&b);
  sb_addc(&b, K_READY);
  uint32_t count = (uint32_t)n;
  sb_add(&b, (const char *)&count, sizeof count);
  for (int i = 0; i < n; i++) {
    uint32_t k = (uint32_t)strlen(names[i]);
    sb_add(&b, (const char *)&k, sizeof k);
    sb_add(&b, names[i], k);
  }
  child_send(fd, &b);
  sb_free(&b);
  child_serve(s, fd);
  _exit(0);
}

#else /* LuaJIT and Lua 5.1: a policy is refused there (core/lmodule.c) */
void sx_child_main(sx_module *m, int fd, int err_fd, const char *pids_cgroup, pid_t host, long long deadline_ns) {
  (void)m; (void)fd; (void)err_fd; (void)pids_cgroup; (void)host; (void)deadline_ns;
  _Exit(0);
}
#endif
