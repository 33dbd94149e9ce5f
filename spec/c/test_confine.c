/*
 * sandbox/confine.c: the backstops of a process-isolated handler, checked in
 * a forked child as isolate.c sets them: execve, ptrace, fork and process
 * clones refused, threads allowed, sockets refused unless the policy allows
 * the network, no core dumps, and an address space bounded near the memory
 * limit (not under AddressSanitizer or valgrind, as the limit is not set
 * there).
 */
#define _GNU_SOURCE

#include <errno.h>
#include <pthread.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"
#include "isolate.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif


static int instrumented(void);

enum { EXEC = 1, FORK = 2, PTRACE = 4, THREAD = 8, SOCKET = 16, CORE = 32, BIG = 64, SIGNAL = 128 };

static void *nothing(void *arg) { return arg; }

/* In the child: a bit for each thing that behaved as the policy says. */
static int probe(const sx_policy *p) {
  int ok = 0;
  char *argv[] = { (char *)"/bin/true", NULL };
  /* valgrind cannot go on after an execve it let through fails */
  if (RUNNING_ON_VALGRIND) ok |= EXEC;
  else if (execv("/bin/true", argv) < 0 && errno == EPERM) ok |= EXEC;
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (pid < 0 && errno == EPERM) ok |= FORK;
  if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0 && errno == EPERM) ok |= PTRACE;
  pthread_t t;
  if (pthread_create(&t, NULL, nothing, NULL) == 0 && pthread_join(t, NULL) == 0) ok |= THREAD;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (p->allow_network ? fd >= 0 : (fd < 0 && errno == EPERM)) ok |= SOCKET;
  if (fd >= 0) close(fd);
  /* signals reach this process only: not the parent (the host), not a group */
  if (kill(getppid(), 0) < 0 && errno == EPERM && kill(0, 0) < 0 && errno == EPERM && kill(getpid(), 0) == 0)
    ok |= SIGNAL;
  struct rlimit r;
  if (getrlimit(RLIMIT_CORE, &r) == 0 && r.rlim_cur == 0) ok |= CORE;
  /* far past the limit and the room for copies */
  void *big = malloc((size_t)4 << 30);
  if (!big) ok |= BIG;
  free(big);
  return ok;
}

static int confined(int allow_network) {
  sx_policy p;
  memset(&p, 0, sizeof p);
  p.strict = 1;
  p.allow_network = allow_network;
  p.memory_limit = (size_t)64 << 20;
  p.isolation = SX_ISOLATE_PROCESS;
  pid_t pid = fork();
  if (pid == 0) {
    char err[256];
    if (sx_confine(&p, (size_t)64 << 20, err, sizeof err) != 0) {
      fprintf(stderr, "%s\n", err);
      _exit(0);   /* no bit: every check fails */
    }
    _exit(probe(&p));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int instrumented(void) {
#if defined(__SANITIZE_ADDRESS__)
  return 1;
#else
  const char *preload = getenv("LD_PRELOAD");
  return (preload && strstr(preload, "asan")) || RUNNING_ON_VALGRIND;
#endif
}

int main(void) {
  int all = EXEC | FORK | PTRACE | THREAD | SOCKET | CORE | SIGNAL | (instrumented() ? 0 : BIG);
  int got = confined(0);
  CT_CHECK((got & all) == all, "without the network: got %#x, want %#x", got, all);
  got = confined(1);
  CT_CHECK((got & all) == all, "with the network: got %#x, want %#x", got, all);
  return ct_finish("confine");
}
