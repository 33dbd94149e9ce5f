/* Process isolation: a module whose policy says "isolation": "process" runs
   each of its states in a child process, started ahead of time and reused
   from call to call. The host keeps a mirror state per child, which holds
   nothing but copies (the input going out, the reply coming back), so that
   call.c's prepare and collect, with their limits and error rules, stay
   what they are in-process. A call is a frame of bytes each way (wire.c)
   on a socket pair; the host waits for the reply until the deadline plus
   the policy's kill_grace_ms, or a cancel, and then kills the child with
   SIGKILL: that stops what no hook can (a rehash, a collection, a long
   comparison in C), and a child that dies takes nothing of the host with it.

   How the child is made. The host is multithreaded (the worker pool, the
   deadline watch, libcurl's threads) and may be any program that embeds
   luma (libluma in a C host, LuaJIT through FFI, nginx, LÖVE), so there is
   no executable on disk to run that is known to be ours. The child is a
   plain fork() of the thread that needs a state (the loader, or the worker
   that replaces a killed child), and it never execs. After fork only that
   thread exists, and whatever another thread held locked stays locked. So
   the child touches nothing another thread of the host may hold: glibc
   makes malloc, its stdio list and the dynamic loader's lock usable in a
   forked child; the libraries of ours that keep a process-wide lock reset
   it (the watch, the HTTP transport) or hold it across the fork (the random
   generator, which reseeds in the child); what a state's setup makes once
   per process is made in the host before the fork; the child writes to
   stderr through a stream of its own, not the parent's (whose lock another
   thread may hold); the host's Lua states and the module's own lock are
   never touched. The child (child.c) then closes every descriptor but its
   socket and stderr, puts /dev/null on stdin and stdout, unblocks signals
   and restores their default actions (but the deadline watch's), confines
   itself (confine.c) and only then runs the module's code. It ends when
   its socket closes, or it is killed. A zygote (one child forked early
   that forks the others) would not remove the hazard, as it is forked from
   the same multithreaded host at some point, and its children would not be
   the host's to reap and to read the signal of. */
#define _GNU_SOURCE
#include "isolate.h"
#include "child.h"

#include <stdio.h>

#if LUA_VERSION_NUM >= 504
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>

#include "crypto.h"
#include "errors.h"
#include "lerror.h"
#include "luma_limits.h"
#include "state.h"
#include "strbuf.h"
#include "wire.h"

struct sx_child {
  pid_t pid;                      /* 0 once reaped */
  int pidfd;                      /* the child's process descriptor; -1: none (Linux < 5.4) */
  int fd;                         /* the host's end of the socket pair (non-blocking) */
  int wake;                       /* an eventfd: the call was cancelled */
  int err;                        /* the read end of the child's stderr pipe (non-blocking); -1: none */
  size_t relayed;                 /* bytes of it relayed in this call (or load) */
  int mid_line;                   /* what was relayed last ended no line */
  int dropped;                    /* past the bound in this call: said once */
  int held_c2;                    /* a 0xc2 ended the last read: C1's first byte, maybe */
  size_t lost;                    /* bytes the host's stderr did not take, not said yet */
  char *mark;                     /* "[<module>] ", before each line relayed */
  char *cgroup;                   /* the child's pids cgroup (confine.c); NULL: none */
};

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* How long a new child may take to load the module, past the load budget
   (LIM_MODULE_LOAD_TIMEOUT_MS) or the call's deadline. */
#define SPAWN_SLACK_MS 1000
#define READY_MAX ((size_t)1 << 20)
/* After a child closed its socket, how long its exit status is waited for
   before it is killed (it may have closed the socket and gone on). */
#define REAP_WAIT_MS 500
/* After SIGKILL, how long the child's end is waited for: it is at once,
   unless the kernel holds the process in an uninterruptible wait (a hung
   file system), which the host does not wait out. */
#define KILL_WAIT_MS 2000

/* How a wait, a send or a receive ended. IO_BAD: a frame larger than it
   may be; IO_SHORT: cut short; IO_EXTRA: more bytes than the frame holds. */
enum { IO_OK = 0, IO_DEAD = -1, IO_LATE = -2, IO_CANCELLED = -3, IO_BAD = -4, IO_SHORT = -5, IO_EXTRA = -6,
       IO_NOMEM = -7 };

/* The least a reply holds: its kind and whether the child's state broke. */
#define REPLY_MIN 2

/* The most a reply may take: the values the copy limits allow, each with
   its tag and length, and room for an error's fields. */
static size_t reply_cap(const sx_limits *lim) {
  return lim->max_bytes + 24 * lim->max_values + ((size_t)1 << 20);
}

/* ------------------------------------------------------------ the child's stderr */

/* A handler process's fd 2 is a pipe the host reads (or /dev/null when the
   host has no stderr): never a descriptor of the host's, which the child
   could seek, truncate, read back or list. The host relays what comes to
   its own stderr while it waits for the child (a call, a load), and what
   is left when the child ends: each line marked with the module's name,
   control characters written as \xNN (a terminal's escape sequences
   would reach the user's terminal emulator), at most
   LIM_HANDLER_STDERR_MAX_BYTES a call, past which the rest is read and
   dropped with a note. The host never waits on its stderr for it: a write
   that would block is dropped. */

/* Whether the host has a stderr to relay to: fd 2 open across its exec (a
   stderr never has FD_CLOEXEC; a host started with fd 2 closed has its own
   descriptors there) and not a directory. */
static int host_has_stderr(void) {
  int flags = fcntl(2, F_GETFD);
  struct stat st;
  return flags >= 0 && !(flags & FD_CLOEXEC) && fstat(2, &st) == 0 && !S_ISDIR(st.st_mode);
}

/* Relays of different children write one at a time, so that their lines
   do not mix within a write. */
static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;

/* Writes n bytes to the host's stderr, as many as it takes without waiting
   (a broken pipe raises no SIGPIPE): how many it did not take. fd 2 itself
   for a file (it never waits for a reader, and shares fd 2's offset) or a
   socket (MSG_DONTWAIT); for a pipe or a terminal, fd 2 opened again with
   O_NONBLOCK for this write (its own file description: fd 2's flags stay
   the host's; none is kept open), or where that is refused (a pipe of
   another user's), writes of PIPE_BUF at most where poll says there is
   room. */
static size_t stderr_write(const char *p, size_t n) {
  sigset_t pipe_sig, old, pending;
  sigemptyset(&pipe_sig);
  sigaddset(&pipe_sig, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_sig, &old);
  sigpending(&pending);
  int was_pending = sigismember(&pending, SIGPIPE);
  pthread_mutex_lock(&sink_lock);
  struct stat st;
  int broken = 0, sink = -1, reopen_refused = 0;
  if (fstat(2, &st) == 0) {
    while (n > 0) {
      ssize_t k;
      if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) k = write(2, p, n);
      else if (S_ISSOCK(st.st_mode)) k = send(2, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
      else {
        if (sink < 0 && !reopen_refused) {
          sink = open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
          reopen_refused = sink < 0;
        }
        if (sink >= 0) k = write(sink, p, n);
        else {
          struct pollfd w = { 2, POLLOUT, 0 };
          size_t most = n < PIPE_BUF ? n : PIPE_BUF;
          if (poll(&w, 1, 0) == 1 && (w.revents & POLLOUT)) k = write(2, p, most);
          else {
            k = -1;
            errno = EAGAIN;
          }
        }
      }
      if (k > 0) { p += k; n -= (size_t)k; continue; }
      if (k < 0 && errno == EINTR) continue;
      broken = k < 0 && errno == EPIPE;
      break;
    }
  }
  if (sink >= 0) close(sink);
  pthread_mutex_unlock(&sink_lock);
  if (broken && !was_pending) {
    struct timespec zero = { 0, 0 };
    while (sigtimedwait(&pipe_sig, NULL, &zero) < 0 && errno == EINTR) {}
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return n;
}

/* What came, as relayed: each line after c->mark, control characters (C0
   but tab and newline, DEL, and C1 as UTF-8 encodes it: 0xc2 then 0x80 to
   0x9f, held across reads) as \xNN. */
static void relay_bytes(sx_child *c, const char *p, size_t n) {
  char out[8192];
  size_t used = 0, mark = strlen(c->mark);
  for (size_t i = 0; i < n; i++) {
    if (used + mark + 8 > sizeof out) {
      c->lost += stderr_write(out, used);
      used = 0;
    }
    unsigned char b = (unsigned char)p[i];
    if (b == 0xc2 && !c->held_c2) {
      c->held_c2 = 1;
      continue;
    }
    if (!c->mid_line) {
      memcpy(out + used, c->mark, mark);
      used += mark;
      c->mid_line = 1;
    }
    int c1 = c->held_c2 && b >= 0x80 && b <= 0x9f;
    if (c->held_c2) {
      c->held_c2 = 0;
      if (c1) used += (size_t)snprintf(out + used, sizeof out - used, "\\xc2");
      else out[used++] = (char)0xc2;
      if (b == 0xc2) { c->held_c2 = 1; continue; }
    }
    if ((b < 0x20 && b != '\t' && b != '\n') || b == 0x7f || c1) {
      used += (size_t)snprintf(out + used, sizeof out - used, "\\x%02x", b);
    } else {
      out[used++] = (char)b;
      if (b == '\n') c->mid_line = 0;
    }
  }
  if (used) c->lost += stderr_write(out, used);
}

/* Says how many bytes the host's stderr did not take, once it takes that. */
static void say_lost(sx_child *c) {
  if (!c->lost) return;
  char note[200];
  int n = snprintf(note, sizeof note, "\n%s(%zu bytes of its stderr dropped: the host's stderr was full)\n", c->mark,
                   c->lost);
  if (n > 0 && stderr_write(note, (size_t)n) == 0) {
    c->lost = 0;
    c->mid_line = 0;
  }
}

/* Reads what the child wrote to its stderr, relaying it within the bound;
   at its end (the child gone), closes the pipe. */
static void relay_stderr(sx_child *c) {
  char buf[4096];
  for (int round = 0; c->err >= 0 && round < 64; round++) {
    ssize_t k = read(c->err, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (k <= 0) {
      close(c->err);
      c->err = -1;
      break;
    }
    size_t room = c->relayed < (size_t)LIM_HANDLER_STDERR_MAX_BYTES ? (size_t)LIM_HANDLER_STDERR_MAX_BYTES - c->relayed : 0;
    size_t take = (size_t)k < room ? (size_t)k : room;
    if (take) relay_bytes(c, buf, take);
    c->relayed += take;
    if (take < (size_t)k && !c->dropped) {
      /* (relay_bytes writes the mark after a newline) */
      char note[200];
      snprintf(note, sizeof note, "%s(its stderr passed %d bytes in this call: the rest is dropped)\n",
               c->mid_line ? "\n" : "", LIM_HANDLER_STDERR_MAX_BYTES);
      relay_bytes(c, note, strlen(note));
      c->dropped = 1;
    }
  }
  say_lost(c);
}

/* The child is gone (or going): what is left in its pipe, then its end. */
static void end_stderr(sx_child *c) {
  if (c->err < 0) return;
  relay_stderr(c);
  if (c->held_c2) {
    c->held_c2 = 0;
    relay_bytes(c, "\\xc2", 4);
  }
  if (c->err >= 0) close(c->err);
  c->err = -1;
}

/* ------------------------------------------------------------ the host's side */

/* Waits until fd is ready for ev, until_ns passes (0: never), or the call
   is cancelled. */
static int wait_fd(sx_state *s, int fd, short ev, long long until_ns) {
  sx_child *c = s->child;
  for (;;) {
    if (sx_cancelled(s)) return IO_CANCELLED;
    int ms = -1;
    if (until_ns) {
      long long left = until_ns - sx_now_ns();
      if (left <= 0) return IO_LATE;
      long long left_ms = (left + 999999) / 1000000;
      ms = left_ms > INT_MAX ? INT_MAX : (int)left_ms;   /* and poll again */
    }
    /* the child's stderr is relayed as it comes: a child that fills its
       pipe would wait for the host (and miss its deadline) */
    struct pollfd p[3] = { { fd, ev, 0 }, { c->wake, POLLIN, 0 }, { c->err, POLLIN, 0 } };
    int r = poll(p, c->err >= 0 ? 3 : 2, ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      return IO_DEAD;
    }
    if (p[1].revents) return IO_CANCELLED;
    if (c->err >= 0 && p[2].revents) relay_stderr(c);
    if (p[0].revents & ev) return IO_OK;
    if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) return IO_DEAD;
  }
}

static int send_all(sx_state *s, const char *p, size_t n, long long until_ns) {
  int fd = s->child->fd;
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) { p += k; n -= (size_t)k; continue; }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int r = wait_fd(s, fd, POLLOUT, until_ns);
      if (r != IO_OK) return r;
      continue;
    }
    return IO_DEAD;
  }
  return IO_OK;
}

/* Reads n bytes to p; *got counts those that came. */
static int recv_all(sx_state *s, char *p, size_t n, long long until_ns, size_t *got) {
  int fd = s->child->fd;
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k > 0) { p += k; n -= (size_t)k; *got += (size_t)k; continue; }
    if (k == 0) return IO_DEAD;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int r = wait_fd(s, fd, POLLIN, until_ns);
      if (r != IO_OK) return r;
      continue;
    }
    return IO_DEAD;
  }
  return IO_OK;
}

/* A frame of at least min and at most cap bytes, malloc'd in *out. A small
   frame comes in one read: the wait comes first, as the reply is never
   there at once. When the frame is cut short (IO_SHORT: the child ended
   in it, or its length is below min), *n is how many of its bytes came and
   *want how many it needed. */
static int recv_frame(sx_state *s, char **out, size_t *n, size_t *want, size_t min, size_t cap, long long until_ns) {
  char first[FIRST_READ];
  *out = NULL;
  *n = 0;
  *want = sizeof(uint32_t);
  int r = wait_fd(s, s->child->fd, POLLIN, until_ns);
  if (r != IO_OK) return r;
  ssize_t got;
  while ((got = recv(s->child->fd, first, sizeof first, 0)) < 0 && errno == EINTR) {}
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) got = 0;
  else if (got <= 0) return IO_DEAD;
  size_t have = (size_t)got;
  if (have < sizeof(uint32_t)) {
    *n = have;
    r = recv_all(s, first + have, sizeof(uint32_t) - have, until_ns, n);
    if (r == IO_DEAD && *n > 0) return IO_SHORT;
    if (r != IO_OK) return r;
    have = sizeof(uint32_t);
  }
  uint32_t len;
  memcpy(&len, first, sizeof len);
  *n = have;
  *want = sizeof len + (size_t)len;
  if (len > cap) return IO_BAD;
  if (have > *want) return IO_EXTRA;
  if (len < min) return IO_SHORT;
  char *buf = malloc(len);
  if (!buf) return IO_NOMEM;
  memcpy(buf, first + sizeof len, have - sizeof len);
  r = recv_all(s, buf + (have - sizeof len), len - (have - sizeof len), until_ns, n);
  if (r != IO_OK) {
    free(buf);
    return r == IO_DEAD ? IO_SHORT : r;
  }
  *out = buf;
  *n = len;
  return IO_OK;
}

/* The child is signalled and reaped through its process descriptor when
   the kernel has them: a host may take its children's exit status itself
   (nginx reaps them in its SIGCHLD handler, or SIGCHLD is ignored), which
   frees the pid for another process to take, and a kill by pid could then
   reach that one. The descriptor is opened right after the fork, and
   checked to be our child's (waitid answers for children only). */

static int open_pidfd(sx_child *c) {
#ifdef SYS_pidfd_open
  /* valgrind (3.19) knows no pidfd_open, and says so on stderr at each
     call: under it, children are killed and reaped by pid */
  if (sx_under_valgrind()) return -1;
  int fd = (int)syscall(SYS_pidfd_open, c->pid, 0);
  if (fd < 0) {
    /* a zombie keeps its pid: gone means reaped already, its pid free.
       Out of descriptors (EMFILE), the pid path stays. */
    if (errno == ESRCH) c->pid = 0;
    return -1;
  }
  siginfo_t info;
  memset(&info, 0, sizeof info);
  if (waitid((idtype_t)P_PIDFD, (id_t)fd, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    int e = errno;
    close(fd);
    /* the child is gone, and its pid taken already */
    if (e == ECHILD) c->pid = 0;
    return -1;
  }
  return fd;
#else
  (void)c;
  return -1;
#endif
}

static void forget(sx_child *c) {
  end_stderr(c);
  sx_pids_cgroup_remove(c->cgroup);
  c->cgroup = NULL;
  c->pid = 0;
  if (c->pidfd >= 0) close(c->pidfd);
  c->pidfd = -1;
}

/* Waits up to ms for the child to end, and reaps it: 1 (how it ended in
   *sig, or *code), 0 when it runs on, -1 when its exit status was taken
   by another part of this process. */
static int wait_end(sx_child *c, int ms, int *sig, int *code) {
  *sig = 0;
  *code = -1;
  if (c->pidfd >= 0) {
    struct pollfd p = { c->pidfd, POLLIN, 0 };
    long long until = sx_now_ns() + ms * 1000000LL;
    for (;;) {
      siginfo_t info;
      memset(&info, 0, sizeof info);
      if (waitid((idtype_t)P_PIDFD, (id_t)c->pidfd, &info, WEXITED | WNOHANG) != 0) {
        if (errno == EINTR) continue;
        return -1;
      }
      if (info.si_pid != 0) {
        if (info.si_code == CLD_EXITED) *code = info.si_status;
        else *sig = info.si_status;
        return 1;
      }
      long long left = until - sx_now_ns();
      if (left <= 0) return 0;
      if (poll(&p, 1, (int)((left + 999999) / 1000000)) < 0 && errno != EINTR) return 0;
    }
  }
  for (int i = 0;; i++) {
    int status = 0;
    pid_t r = waitpid(c->pid, &status, WNOHANG);
    if (r == c->pid) {
      if (WIFSIGNALED(status)) *sig = WTERMSIG(status);
      else if (WIFEXITED(status)) *code = WEXITSTATUS(status);
      return 1;
    }
    if (r < 0 && errno != EINTR) return -1;
    if (i >= ms) return 0;
    struct timespec one = { 0, 1000000 };
    nanosleep(&one, NULL);
  }
}

static void kill_child(sx_child *c) {
  if (c->pid <= 0) return;
  int sig, code;
#ifdef SYS_pidfd_send_signal
  if (c->pidfd >= 0) syscall(SYS_pidfd_send_signal, c->pidfd, SIGKILL, NULL, 0);
  else
#endif
    kill(c->pid, SIGKILL);
  /* past the wait, a child the kernel holds stays a zombie: better than a host held with it */
  wait_end(c, KILL_WAIT_MS, &sig, &code);
  forget(c);
}

/* The child closed its socket: how it ended, for the message. */
static void died(sx_child *c, char *msg, size_t len) {
  int sig, code;
  int r = c->pid > 0 ? wait_end(c, REAP_WAIT_MS, &sig, &code) : -1;
  if (r == 1) {
    forget(c);
    /* SIGSYS is the filter's: a call of another architecture (i386's
       int $0x80, x32's numbers), which ends the process */
    if (sig == SIGSYS)
      snprintf(msg, len, "handler process died: signal %d (SIGSYS: it made a system call of another architecture, "
               "which its seccomp filter ends the process for)", sig);
    else if (sig) snprintf(msg, len, "handler process died: signal %d", sig);
    else snprintf(msg, len, "handler process died: exit status %d", code);
    return;
  }
  if (r < 0) {
    /* the host reaps children itself (a SIGCHLD handler, or SIGCHLD ignored) */
    forget(c);
    snprintf(msg, len, "handler process died (its exit status was taken by another part of this process)");
    return;
  }
  kill_child(c);
  snprintf(msg, len, "handler process closed its connection and was killed");
}

void sx_child_end(sx_state *s) {
  sx_child *c = s->child;
  if (!c) return;
  if (c->fd >= 0) close(c->fd);
  kill_child(c);
  end_stderr(c);
  sx_pids_cgroup_remove(c->cgroup);
  c->cgroup = NULL;
  if (c->wake >= 0) close(c->wake);
  free(c->mark);
  free(c);
  s->child = NULL;
}

void sx_remote_poke(sx_state *s) {
  uint64_t one = 1;
  if (s->child && write(s->child->wake, &one, sizeof one) < 0) {
    /* the wait also reads the cancelled flag before each poll */
  }
}

typedef struct reply {
  const char *p;
  size_t len;
  sx_run *run;
  sx_state *s;
  const char *failure;            /* a failure of the host's to push instead */
  int malformed;
  int late;                       /* reading it passed the copy's deadline */
} reply;

/* One value of a reply: 0 when it is there, on top of M. */
static int get_value(reply *r, lua_State *M, const char *p, size_t left, size_t *used) {
  long long deadline = r->run->deadline_ns ? r->run->deadline_ns + SX_COPY_GRACE_MS * 1000000LL : 0;
  int got = sx_wire_get(M, p, left, deadline, used);
  if (got == -2) r->late = 1;
  else if (got != 0) r->malformed = 1;
  return got;
}

/* Protected, on the mirror state: pushes the reply's value (a result, or
   an error object whose code and message are checked: the child is not
   trusted to follow the rules), or the host's failure. */
static int push_reply(lua_State *M) {
  reply *r = lua_touserdata(M, 1);
  lua_settop(M, 0);
  if (r->failure) {
    le_push(M, "TOOL_FAILED", r->failure, 0, 0);
    return 1;
  }
  if (r->len < 2) { r->malformed = 1; return 0; }
  char kind = r->p[0];
  if (r->p[1]) r->s->broken = 1;
  const char *p = r->p + 2;
  size_t left = r->len - 2, used;
  if (kind == K_TIMEOUT) {
    r->run->expired = 1;
    lua_pushnil(M);
    return 1;
  }
  if (kind == K_OK) {
    if (get_value(r, M, p, left, &used) != 0) return 0;
    if (used != left) { r->malformed = 1; return 0; }
    return 1;
  }
  if (kind != K_ERROR || left < 1) { r->malformed = 1; return 0; }
  int retryable = p[0] != 0;
  p++;
  left--;
  for (int i = 0; i < 3; i++) {
    if (get_value(r, M, p, left, &used) != 0) return 0;
    p += used;
    left -= used;
  }
  size_t codelen, msglen;
  if (left != 0 || lua_type(M, 1) != LUA_TSTRING || lua_type(M, 2) != LUA_TSTRING ||
      (lua_type(M, 3) != LUA_TNIL && lua_type(M, 3) != LUA_TTABLE)) {
    r->malformed = 1;
    return 0;
  }
  const char *code = lua_tolstring(M, 1, &codelen);
  lua_tolstring(M, 2, &msglen);
  /* the child's own collect ran out of time copying the result: its call
     expired, as with K_TIMEOUT (a handler's ToolError cannot carry this
     code: the child refuses it as the host would) */
  if (codelen == sizeof "TOOL_TIMEOUT" - 1 && memcmp(code, "TOOL_TIMEOUT", codelen) == 0) {
    r->run->expired = 1;
    lua_settop(M, 0);
    lua_pushnil(M);
    return 1;
  }
  /* a handler's own code, or one the sandbox reports for it */
  static const char *const runtime[] = { "TOOL_FAILED", "TOOL_MEMORY_LIMIT", "TOOL_OUTPUT_INVALID",
                                         "TOOL_INPUT_INVALID", "TOOL_CONTEXT_INVALID", "TOOL_NOT_FOUND" };
  int ok = sx_handler_code_ok(code, codelen);
  for (size_t i = 0; !ok && i < sizeof runtime / sizeof runtime[0]; i++) ok = strcmp(code, runtime[i]) == 0;
  if (!ok || strlen(code) != codelen || msglen > SX_MESSAGE_MAX + 64) { r->malformed = 1; return 0; }
  le_push(M, code, lua_tostring(M, 2), retryable, lua_isnil(M, 3) ? 0 : 3);
  return 1;
}

/* The value the run's collect reads goes on top of the mirror; 0 when the
   reply was malformed, or reading it passed the deadline (the run expired),
   with nothing pushed then. */
static int take_reply(sx_state *s, sx_run *run, const char *p, size_t len, const char *failure) {
  lua_State *M = s->L;
  reply r = { p, len, run, s, failure, 0, 0 };
  lua_pushcfunction(M, push_reply);
  lua_pushlightuserdata(M, &r);
  int status = lua_pcall(M, 1, 1, 0);
  if (status != LUA_OK) {
    /* the host's own memory ran out */
    lua_pop(M, 1);
    lua_pushnil(M);
    run->status = LUA_ERRMEM;
    return 1;
  }
  if (r.malformed || r.late) {
    lua_pop(M, 1);
    if (r.late) run->expired = 1;
    return 0;
  }
  run->status = !failure && p[0] == K_OK ? LUA_OK : LUA_ERRRUN;
  return 1;
}

static void put_request(sx_state *s, const sx_run *run, sb_buf *b) {
  lua_State *M = s->L;
  req_head h;
  memset(&h, 0, sizeof h);
  h.timeout_ms = run->opts.timeout_ms;
  h.max_values = run->opts.limits.max_values;
  h.max_bytes = run->opts.limits.max_bytes;
  h.max_depth = run->opts.limits.max_depth;
  h.name_len = (uint32_t)strlen(run->name);
  h.has_needs = 1;
  sb_add(b, (const char *)&h, sizeof h);
  sb_add(b, run->name, h.name_len);
  if (sx_wire_put(M, run->input_slot, b) != 0 || sx_wire_put(M, run->needs_slot, b) != 0) b->failed = 1;
}

/* Whether an idle child has ended, or sent something out of turn: between
   calls a child says nothing. */
static int idle_child_gone(const sx_child *c) {
  struct pollfd p = { c->fd, POLLIN, 0 };
  return c->pid <= 0 || poll(&p, 1, 0) > 0;
}

static int start_child(sx_state *s, long long deadline_ns, char *err, size_t errlen);

/* Ends s's child process (killed, reaped, its socket closed), keeping the
   rest of s->child for a new one. */
static void end_process(sx_child *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  kill_child(c);
  end_stderr(c);
  sx_pids_cgroup_remove(c->cgroup);
  c->cgroup = NULL;
}

/* The failure of a reply cut short, in msg. */
static void short_reply(sx_child *c, size_t got, size_t want, char *msg, size_t len) {
  char why[160];
  if (got >= sizeof(uint32_t) && want - sizeof(uint32_t) < REPLY_MIN) {
    kill_child(c);
    snprintf(msg, len, "The handler process sent a truncated reply: %zu bytes, where a reply has at least %d.",
             want - sizeof(uint32_t), REPLY_MIN);
    return;
  }
  if (c->pid > 0) died(c, why, sizeof why);
  else snprintf(why, sizeof why, "handler process is gone");
  snprintf(msg, len, "The handler process sent a truncated reply: %zu of its %zu bytes; %s.", got, want, why);
}

void sx_remote_execute(sx_state *s, sx_run *runs, int n) {
  sx_child *c = s->child;
  const sx_policy *pol = sx_policy_of(s->module);
  for (int i = 0; i < n; i++) {
    sx_run *run = &runs[i];
    run->result_slot = 0;
    if (run->failed_code) continue;
    run->status = LUA_ERRRUN;
    run->expired = run->out_of_memory = 0;
    run->deadline_ns = run->opts.timeout_ms > 0 ? sx_now_ns() + run->opts.timeout_ms * 1000000LL : 0;
    c->relayed = 0;
    c->dropped = 0;
    long long until = run->deadline_ns ? run->deadline_ns + (long long)pol->kill_grace_ms * 1000000LL : 0;
    char why[300];
    const char *failure = NULL;
    char *frame = NULL;
    size_t len = 0, want = 0;
    int r = IO_DEAD;
    /* a child that ended while idle (killed from outside, or gone on its
       own) is replaced before the request is sent: nothing of the call
       reached it */
    if (!s->broken && c->fd >= 0 && idle_child_gone(c)) {
      end_process(c);
      char err[200];
      if (start_child(s, run->deadline_ns, err, sizeof err) != 0) {
        snprintf(why, sizeof why, "handler process had ended, and a new one did not start: %s", err);
        failure = why;
        r = IO_OK;
      }
    }
    if (!failure && c->pid > 0 && !s->broken) {
      sb_buf b;
      sb_init(&b);
      frame_start(&b);
      put_request(s, run, &b);
      r = frame_end(&b) != 0 ? IO_BAD : send_all(s, b.data, b.len, until);
      sb_free(&b);
      if (r == IO_OK) r = recv_frame(s, &frame, &len, &want, REPLY_MIN, reply_cap(&run->opts.limits), until);
      /* a reply later than the copy of a result may take is late, even
         within kill_grace_ms (which only bounds how long the child lives) */
      if (r == IO_OK && run->deadline_ns && sx_now_ns() > run->deadline_ns + SX_COPY_GRACE_MS * 1000000LL) {
        free(frame);
        frame = NULL;
        r = IO_LATE;
      }
    }
    switch (r) {
      case IO_OK: break;
      case IO_LATE:
        kill_child(c);
        run->expired = 1;
        break;
      case IO_CANCELLED:
        kill_child(c);
        failure = "The tool call was cancelled.";
        break;
      case IO_BAD:
        kill_child(c);
        failure = "The handler process sent a reply larger than the copy limits allow.";
        break;
      case IO_EXTRA:
        kill_child(c);
        failure = "The handler process sent a malformed reply.";
        break;
      case IO_NOMEM:
        kill_child(c);
        failure = "The host ran out of memory for the handler process's reply.";
        break;
      case IO_SHORT:
        short_reply(c, len, want, why, sizeof why);
        failure = why;
        break;
      default:
        if (c->pid > 0) died(c, why, sizeof why);
        else snprintf(why, sizeof why, "handler process is gone");
        failure = why;
        break;
    }
    if (r != IO_OK || failure) s->broken = 1;
    if (r == IO_LATE) {
      lua_pushnil(s->L);
    } else if (!take_reply(s, run, frame, len, failure)) {
      kill_child(c);
      s->broken = 1;
      if (run->expired) lua_pushnil(s->L);
      else take_reply(s, run, NULL, 0, "The handler process sent a malformed reply.");
    }
    free(frame);
    if (run->expired || sx_cancelled(s)) s->broken = 1;
    run->result_slot = lua_gettop(s->L);
  }
}

/* The ready frame's export names, or NULL (malformed) */
static char **ready_names(const char *p, size_t len, int *n) {
  uint32_t count;
  if (len < 1 + sizeof count) return NULL;
  memcpy(&count, p + 1, sizeof count);
  p += 1 + sizeof count;
  len -= 1 + sizeof count;
  if (count > len / sizeof count) return NULL;
  char **names = calloc((size_t)count + 1, sizeof *names);
  if (!names) return NULL;
  for (uint32_t i = 0; i < count; i++) {
    uint32_t k;
    if (len < sizeof k) goto bad;
    memcpy(&k, p, sizeof k);
    p += sizeof k;
    len -= sizeof k;
    if (k > len || !(names[i] = malloc((size_t)k + 1))) goto bad;
    memcpy(names[i], p, k);
    names[i][k] = '\0';
    p += k;
    len -= k;
  }
  *n = (int)count;
  return names;
bad:
  for (uint32_t i = 0; i < count; i++) free(names[i]);
  free(names);
  return NULL;
}

/* Forks s's child (s->child holds no process) and waits until it is ready:
   its module loaded within deadline_ns (0: the load budget). -1 with a
   message in err, and no process left. */
static int start_child(sx_state *s, long long deadline_ns, char *err, size_t errlen) {
  sx_module *m = s->module;
  const sx_policy *pol = sx_policy_of(m);
  sx_child *c = s->child;
  int sv[2] = { -1, -1 }, ep[2] = { -1, -1 };
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
      (host_has_stderr() && pipe2(ep, O_CLOEXEC) != 0)) {
    snprintf(err, errlen, "cannot start a handler process: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
      if (sv[i] >= 0) close(sv[i]);
    }
    return -1;
  }
  /* the host never takes a descriptor from the child: one sent out of
     turn (a TCP socket lingering an hour) would be closed in the host's
     thread when its end is closed or a recv drops it, which then waits for
     the linger. Where the kernel cannot refuse it, the child's filter
     refuses sendmsg on its end */
  (void)sx_refuse_rights(sv[0]);
  /* what a state's setup makes once per process is made here, not in the
     child, where another thread of the host may have been making it at the
     fork: the stop wrappers' chunk, and the random generator (which then
     reseeds in each child, its fork handlers keeping its lock sane) */
  sx_state_prime();
  /* looked at here, where /proc/self/maps is readable: the confined child
     asks it again */
  (void)sx_under_valgrind();
  unsigned char seed;
  cr_random(&seed, 1);
  /* a pids cgroup where this host may make one (a root host's child is
     not bound by RLIMIT_NPROC) */
  c->cgroup = sx_pids_cgroup_make();
  pid_t host = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errlen, "cannot start a handler process: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
      close(sv[i]);
      if (ep[i] >= 0) close(ep[i]);
    }
    sx_pids_cgroup_remove(c->cgroup);
    c->cgroup = NULL;
    return -1;
  }
  if (pid == 0) {
    close(sv[0]);
    if (ep[0] >= 0) close(ep[0]);
    sx_child_main(m, sv[1], ep[1], c->cgroup, host, deadline_ns);
  }
  close(sv[1]);
  if (ep[1] >= 0) close(ep[1]);
  c->err = ep[0];
  if (c->err >= 0) fcntl(c->err, F_SETFL, fcntl(c->err, F_GETFL) | O_NONBLOCK);
  c->relayed = 0;
  c->dropped = c->mid_line = c->held_c2 = 0;
  c->pid = pid;
  c->pidfd = open_pidfd(c);
  c->fd = sv[0];
  fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
  long long until = (deadline_ns ? deadline_ns : sx_now_ns() + (long long)LIM_MODULE_LOAD_TIMEOUT_MS * 1000000LL) +
                    ((long long)pol->kill_grace_ms + SPAWN_SLACK_MS) * 1000000LL;
  char *frame = NULL;
  size_t len = 0, want = 0;
  int r = recv_frame(s, &frame, &len, &want, 1, READY_MAX, until);
  if (r == IO_OK && frame[0] == K_READY) {
    int n = 0;
    char **names = ready_names(frame, len, &n);
    free(frame);
    if (names && sx_adopt_exports(m, names, n) == 0) return 0;
    snprintf(err, errlen, "the handler process sent a malformed list of its tools");
    end_process(c);
    return -1;
  }
  if (r == IO_OK && frame[0] == K_FAILED) snprintf(err, errlen, "%.*s", (int)(len - 1), frame + 1);
  else if (r == IO_LATE) snprintf(err, errlen, "the handler process did not load the module in time");
  else if (r == IO_DEAD) {
    char why[160];
    died(c, why, sizeof why);
    snprintf(err, errlen, "%s while loading the module", why);
  } else snprintf(err, errlen, "the handler process sent a malformed greeting");
  free(frame);
  end_process(c);
  return -1;
}

/* "[<module>] ": its path under the project's folder, or its whole path. */
static char *mark_of(const sx_module *m) {
  const char *project, *deps, *path = sx_path_of(m);
  sx_roots_of(m, &project, &deps);
  size_t n = project ? strlen(project) : 0;
  if (n && strncmp(path, project, n) == 0 && path[n] == '/') path += n + 1;
  size_t len = strlen(path) + 4;
  char *mark = malloc(len);
  if (mark) snprintf(mark, len, "[%s] ", path);
  return mark;
}

sx_state *sx_spawn(sx_module *m, long long deadline_ns, char *err, size_t errlen) {
  sx_state *s = sx_state_new(0, err, errlen);
  if (!s) return NULL;
  s->module = m;
  sx_child *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    sx_state_free(s);
    return NULL;
  }
  c->fd = c->wake = c->pidfd = c->err = -1;
  s->child = c;
  c->mark = mark_of(m);
  c->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!c->mark) snprintf(err, errlen, "out of memory");
  else if (c->wake < 0) snprintf(err, errlen, "cannot start a handler process: %s", strerror(errno));
  else if (start_child(s, deadline_ns, err, errlen) == 0) return s;
  sx_child_end(s);
  sx_state_free(s);
  return NULL;
}

#else /* LuaJIT and Lua 5.1: a policy is refused there (core/lmodule.c) */
sx_state *sx_spawn(sx_module *m, long long deadline_ns, char *err, size_t errlen) {
  (void)m; (void)deadline_ns;
  snprintf(err, errlen, "process isolation needs Lua 5.4");
  return NULL;
}
void sx_child_end(sx_state *s) { (void)s; }
void sx_remote_execute(sx_state *s, sx_run *runs, int n) { (void)s; (void)runs; (void)n; }
void sx_remote_poke(sx_state *s) { (void)s; }
#endif
