/*
 * sandbox/confine.c: the backstops of a process-isolated handler, checked in
 * a forked child as isolate.c sets them: execve, ptrace, fork and process
 * clones refused, threads allowed, sockets refused unless the policy allows
 * the network (and then IPv4, IPv6 and socket pairs only, with names
 * resolved from a thread), no core dumps, and an address space bounded near the memory
 * limit (not under AddressSanitizer or valgrind, as the limit is not set
 * there).
 */
#define _GNU_SOURCE

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
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

/* Whether socket(family) was refused by the filter (EPERM). */
static int refused(int family, int type) {
  int fd = socket(family, type, 0);
  int was = fd < 0 && errno == EPERM;
  if (fd >= 0) close(fd);
  return was;
}

/* The machine's own name, resolved on another thread as libcurl's resolver
   does: the C library reads /etc/nsswitch.conf, loads its modules and may
   ask a name server, all under the filter. 1 when it resolved. */
static void *resolve_own_name(void *arg) {
  char name[256];
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  int *resolved = arg;
  *resolved = gethostname(name, sizeof name) == 0 && getaddrinfo(name, "80", &hints, &res) == 0;
  if (res) freeaddrinfo(res);
  return NULL;
}

static int own_name_resolves(void) {
  int resolved = 0;
  pthread_t t;
  if (pthread_create(&t, NULL, resolve_own_name, &resolved) != 0 || pthread_join(t, NULL) != 0) return 0;
  return resolved;
}

/* whether the machine's name resolves before any filter: then it must under one too */
static int name_resolves_unconfined;

/* Without the network every socket is refused; with it, IPv4 and IPv6 (which
   the kernel may lack, but the filter does not refuse) and socket pairs, and
   no other family: not a Unix socket, netlink or packet socket, nor a family
   with high bits set, which the kernel would read as AF_UNIX. */
static int sockets_as_policy(int network) {
  int sv[2];
  int pair = socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0;
  int pair_refused = !pair && errno == EPERM;
  if (pair) { close(sv[0]); close(sv[1]); }
  /* a datagram pair could send to a path: refused with the network too */
  int dgram = socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) == 0;
  int dgram_refused = !dgram && errno == EPERM;
  if (dgram) { close(sv[0]); close(sv[1]); }
  if (!network) return refused(AF_INET, SOCK_STREAM) && refused(AF_INET6, SOCK_STREAM) && pair_refused;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  close(fd);
  fd = socket(AF_INET6, SOCK_STREAM, 0);
  int inet6 = fd >= 0 || errno != EPERM;
  if (fd >= 0) close(fd);
  long high_unix = (long)(((unsigned long)1 << 32) | AF_UNIX);
  fd = (int)syscall(SYS_socket, high_unix, SOCK_STREAM, 0);
  int high_refused = fd < 0 && errno == EPERM;
  if (fd >= 0) close(fd);
  /* the C library's resolver copes with netlink refused (AI_ADDRCONFIG asks it) */
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  int resolved = getaddrinfo("localhost", "80", &hints, &res) == 0;
  if (res) freeaddrinfo(res);
  int by_name = !name_resolves_unconfined || own_name_resolves();
  return resolved && by_name && inet6 && pair && dgram_refused && high_refused && refused(AF_UNIX, SOCK_STREAM) && refused(AF_UNIX, SOCK_DGRAM) &&
         refused(AF_NETLINK, SOCK_RAW) && refused(AF_PACKET, SOCK_RAW) && refused(AF_UNSPEC, SOCK_STREAM) &&
         refused(AF_X25, SOCK_SEQPACKET);
}

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
  if (sockets_as_policy(p->allow_network)) ok |= SOCKET;
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
  /* asked in a child of its own, so that the confined children load the
     resolver's modules and read its files under the filter themselves */
  pid_t probe_pid = fork();
  if (probe_pid == 0) _exit(own_name_resolves());
  int probe_status = 0;
  waitpid(probe_pid, &probe_status, 0);
  name_resolves_unconfined = WIFEXITED(probe_status) && WEXITSTATUS(probe_status) == 1;
  if (!name_resolves_unconfined) fprintf(stderr, "confine: this machine's name does not resolve; not checked under the filter\n");
  int got = confined(0);
  CT_CHECK((got & all) == all, "without the network: got %#x, want %#x", got, all);
  got = confined(1);
  CT_CHECK((got & all) == all, "with the network: got %#x, want %#x", got, all);
  return ct_finish("confine");
}
