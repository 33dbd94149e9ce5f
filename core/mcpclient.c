#define _GNU_SOURCE
#include "mcpclient.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

long long mcc_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The file to exec: found in PATH here, before the fork, so that the child
   only calls what is safe after a fork of a multithreaded process. */
static int resolve(const char *cmd, char *out, size_t n) {
  if (strchr(cmd, '/')) {
    if (snprintf(out, n, "%s", cmd) >= (int)n) return -1;
    return access(out, X_OK);
  }
  const char *path = getenv("PATH");
  if (!path) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path; *p;) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 0 && snprintf(out, n, "%.*s/%s", (int)len, p, cmd) < (int)n) {
      struct stat st;
      if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return 0;
    }
    if (!end) break;
    p = end + 1;
  }
  return -1;
}

int mcc_start(mcc_server *s, const char *const *argv, const char *cwd, size_t max_message, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  s->in = s->out = -1;
  char file[PATH_MAX], rel[PATH_MAX];
  const char *cmd = argv[0];
  if (cwd && strchr(cmd, '/') && cmd[0] != '/') {
    /* a relative path is the child's, which starts in cwd */
    if (snprintf(rel, sizeof rel, "%s/%s", cwd, cmd) >= (int)sizeof rel) {
      snprintf(err, errlen, "the path '%s' is too long", cmd);
      return -1;
    }
    cmd = rel;
  }
  if (resolve(cmd, file, sizeof file) != 0) {
    snprintf(err, errlen, "'%s' is not an executable file%s", argv[0], strchr(argv[0], '/') ? "" : " in PATH");
    return -1;
  }
  if (mcp_reader_init(&s->r, max_message) != 0) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  /* its input is a socket: a write to a server that died is EPIPE
     (MSG_NOSIGNAL), where a pipe would raise SIGPIPE in the host */
  int to[2], from[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, to) != 0) goto fail_pipe;
  if (pipe2(from, O_CLOEXEC) != 0) {
    close(to[0]);
    close(to[1]);
    goto fail_pipe;
  }
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    /* async-signal-safe calls only, up to the exec */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (cwd && chdir(cwd) != 0) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (dup2(to[0], 0) < 0 || dup2(from[1], 1) < 0 || (devnull >= 0 && dup2(devnull, 2) < 0)) _exit(127);
    /* dup2 leaves the copies without O_CLOEXEC; everything else closes at exec */
    execve(file, (char *const *)argv, environ);
    _exit(127);
  }
  int saved = errno;
  close(to[0]);
  close(from[1]);
  if (devnull >= 0) close(devnull);
  if (pid < 0) {
    close(to[1]);
    close(from[0]);
    mcp_reader_free(&s->r);
    snprintf(err, errlen, "no process could be made: %s", strerror(saved));
    return -1;
  }
  setpgid(pid, pid);   /* as the child does: whichever runs first */
  shutdown(to[1], SHUT_RD);
  s->pid = pid;
  s->in = to[1];
  s->out = from[0];
  fcntl(s->in, F_SETFL, fcntl(s->in, F_GETFL) | O_NONBLOCK);
  fcntl(s->out, F_SETFL, fcntl(s->out, F_GETFL) | O_NONBLOCK);
  return 0;
fail_pipe:
  snprintf(err, errlen, "no pipe could be made: %s", strerror(errno));
  mcp_reader_free(&s->r);
  return -1;
}

/* Waits for fd to be ready until deadline: 1, 0 at the deadline, -1 on error. */
static int wait_for(int fd, short events, long long deadline) {
  for (;;) {
    long long left = deadline - mcc_now_ms();
    if (left <= 0) return 0;
    struct pollfd p = { fd, events, 0 };
    int r = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return -1;
  }
}

int mcc_send(mcc_server *s, const char *line, size_t len, long long deadline, char *err, size_t errlen) {
  if (s->in < 0) { snprintf(err, errlen, "the server is stopped"); return MCC_ERROR; }
  const char *parts[2] = { line, "\n" };
  size_t sizes[2] = { len, 1 };
  for (int i = 0; i < 2; i++) {
    size_t done = 0;
    while (done < sizes[i]) {
      ssize_t k = send(s->in, parts[i] + done, sizes[i] - done, MSG_NOSIGNAL);
      if (k > 0) { done += (size_t)k; continue; }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        int r = wait_for(s->in, POLLOUT, deadline);
        if (r == 0) { snprintf(err, errlen, "it did not read its input in time"); return MCC_TIMEOUT; }
        if (r < 0) { snprintf(err, errlen, "its input cannot be written: %s", strerror(errno)); return MCC_ERROR; }
        continue;
      }
      snprintf(err, errlen, "its input is closed (%s)", k < 0 ? strerror(errno) : "no progress");
      return MCC_ERROR;
    }
  }
  return 0;
}

int mcc_next(mcc_server *s, const char **line, size_t *n, long long deadline, char *err, size_t errlen) {
  for (;;) {
    switch (mcp_reader_next(&s->r, line, n)) {
      case MCP_LINE: return MCC_LINE;
      case MCP_TOO_BIG: return MCC_TOO_BIG;
      default: break;
    }
    if (s->r.eof || s->out < 0) return MCC_EOF;
    long got = mcp_reader_fill(&s->r, s->out);
    if (got > 0) continue;
    if (got == 0) continue;           /* eof is set: what is left is read above */
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      snprintf(err, errlen, "its output cannot be read: %s", strerror(errno));
      return MCC_ERROR;
    }
    int r = wait_for(s->out, POLLIN, deadline);
    if (r == 0) return MCC_TIMEOUT;
    if (r < 0) {
      snprintf(err, errlen, "its output cannot be waited for: %s", strerror(errno));
      return MCC_ERROR;
    }
  }
}

/* Reaps the child if it has exited, waiting up to grace_ms: 1 when reaped. */
static int reap_within(mcc_server *s, int grace_ms) {
  long long until = mcc_now_ms() + grace_ms;
  for (;;) {
    pid_t r = waitpid(s->pid, &s->status, WNOHANG);
    if (r == s->pid || (r < 0 && errno == ECHILD)) {
      s->reaped = 1;
      return 1;
    }
    if (mcc_now_ms() >= until) return 0;
    struct timespec ts = { 0, 5 * 1000000L };
    nanosleep(&ts, NULL);
  }
}

void mcc_stop(mcc_server *s, int grace_ms) {
  if (s->in >= 0) { close(s->in); s->in = -1; }
  if (s->pid > 0 && !s->reaped) {
    if (!reap_within(s, grace_ms)) {
      kill(-s->pid, SIGTERM);
      if (!reap_within(s, grace_ms)) {
        kill(-s->pid, SIGKILL);
        while (waitpid(s->pid, &s->status, 0) < 0 && errno == EINTR) {}
        s->reaped = 1;
      }
    }
    /* what the server started in its group goes with it */
    kill(-s->pid, SIGKILL);
  }
  if (s->out >= 0) { close(s->out); s->out = -1; mcp_reader_free(&s->r); }
}

int mcc_alive(mcc_server *s) {
  if (s->pid <= 0 || s->reaped) return 0;
  if (waitpid(s->pid, &s->status, WNOHANG) == s->pid) {
    s->reaped = 1;
    return 0;
  }
  return 1;
}

void mcc_status(const mcc_server *s, char *out, size_t n) {
  if (!s->reaped) snprintf(out, n, "still running");
  else if (WIFEXITED(s->status)) snprintf(out, n, "exited with status %d", WEXITSTATUS(s->status));
  else if (WIFSIGNALED(s->status)) snprintf(out, n, "was killed by signal %d", WTERMSIG(s->status));
  else snprintf(out, n, "ended");
}
