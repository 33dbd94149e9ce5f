/*
 * sandbox/confine.c: the backstops of a process-isolated handler, checked in
 * a forked child as isolate.c sets them: execve, ptrace, fork and process
 * clones refused, threads allowed, sockets refused unless the policy allows
 * the network (and then IPv4, IPv6 and socket pairs only, with names
 * resolved from a thread), no core dumps, and an address space bounded near the memory
 * limit (not under AddressSanitizer or valgrind, as the limit is not set
 * there); limits, scheduling and I/O priority of this process only (never
 * the parent's, even with a pid whose high bits are set), no TIOCSTI or
 * USERFAULTFD_IOC_NEW whatever the high bits of the request, no namespace
 * (thread clones with a CLONE_NEW* bit, unshare, setns), no F_SETOWN or
 * F_SETSIG (nor FIOSETOWN, SIOCSPGRP, FIOASYNC), no mount (the new API included), no PR_SET_PDEATHSIG; no
 * change to a file's mode, owner, times or extended attributes, and no
 * capability left; a session of its own, and no ioctl that changes a
 * terminal; no System V IPC, POSIX message queue or memfd; no file lock
 * (flock, F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE), where
 * F_GETLK still answers; no sendmsg on the socket to the host, nor a copy
 * of it; and the host's end takes no descriptor (SO_PASSRIGHTS) where the
 * kernel has it; RLIMIT_NPROC at handler_max_tasks in a user namespace.
 * And the filter's program, run here on calls no kernel of this machine
 * may make: another architecture's (i386's int $0x80, x32's numbers) ends
 * the whole process (SECCOMP_RET_KILL_PROCESS), not only its thread.
 * Where the host makes pids cgroups (root), a confined child is in its
 * own, pids.max at handler_max_tasks, and the folder goes after it.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/userfaultfd.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"
#include "isolate.h"
#include "luma_limits.h"



static int instrumented(void);

enum {
  EXEC = 1, FORK = 2, PTRACE = 4, THREAD = 8, SOCKET = 16, CORE = 32, BIG = 64, SIGNAL = 128,
  LIMITS = 1 << 8, IOCTL = 1 << 9, NSCLONE = 1 << 10, FCNTL = 1 << 11, PRCTL = 1 << 12, MOUNT = 1 << 13,
  SCHED = 1 << 14, ENV = 1 << 15, FILES = 1 << 16, METADATA = 1 << 17, NOCAPS = 1 << 18, TERMINAL = 1 << 19, SYSV = 1 << 20,
  LOCKS = 1 << 21, HOSTSOCK = 1 << 22, NPROC = 1 << 23,
};

/* Nothing of the environment is left (but the proxy settings with the
   network): not in environ, not in the bytes /proc/self/environ shows
   (valgrind gives its client a stack of its own: not those bytes). */
static int environment_empty(int network) {
  extern char **environ;
  if (getenv("PATH") || getenv("HOME") || (!network && environ && environ[0])) return 0;
  if (sx_under_valgrind()) return 1;
  int fd = open("/proc/self/environ", O_RDONLY);
  if (fd < 0) return errno == EACCES;   /* Landlock may hide it: then nothing shows either */
  char buf[4096];
  ssize_t n;
  int zeros = 1;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; i++) zeros &= buf[i] == 0;
  close(fd);
  return zeros;
}

/* With Landlock: the parent's /proc entry and memory, the machine's files
   outside the system's libraries, and devices but /dev/null, unreachable;
   the libraries still readable. */
static int files_as_policy(pid_t host) {
  if (sx_landlock_abi() == 0) return 1;
  char mem[64];
  snprintf(mem, sizeof mem, "/proc/%d/mem", (int)host);
  int fd = open(mem, O_RDWR);
  int ok = fd < 0;
  if (fd >= 0) close(fd);
  snprintf(mem, sizeof mem, "/proc/%d/fd/1", (int)host);
  fd = open(mem, O_WRONLY);
  ok = ok && fd < 0;
  if (fd >= 0) close(fd);
  static const char *const unreachable[] = { "/etc/hostname", "/root", "/tmp", "/dev/userfaultfd", "/dev/tty", NULL };
  for (const char *const *path = unreachable; *path; path++) {
    fd = open(*path, O_RDONLY);
    ok = ok && fd < 0;
    if (fd >= 0) close(fd);
  }
  fd = open("/dev/null", O_WRONLY);
  ok = ok && fd >= 0;
  if (fd >= 0) close(fd);
  fd = open("/usr/lib/os-release", O_RDONLY);
  ok = ok && (fd >= 0 || errno == ENOENT);
  if (fd >= 0) close(fd);
  return ok;
}

/* Whether a raw call failed with EPERM: the filter's answer. */
static int eperm(long r) { return r < 0 && errno == EPERM; }

/* What the filter refuses on another process (the host: the parent here),
   and what it lets a process do to itself. */
static int limits_on_self_only(pid_t host) {
  struct rlimit r = { 0, 0 };
  int own = getrlimit(RLIMIT_NOFILE, &r) == 0 && setrlimit(RLIMIT_NOFILE, &r) == 0;
  return own && eperm(syscall(SYS_prlimit64, host, RLIMIT_FSIZE, &r, NULL)) &&
         eperm(syscall(SYS_prlimit64, (long)(((unsigned long)1 << 32) | (unsigned)host), RLIMIT_FSIZE, &r, NULL));
}

static int scheduling_on_self_only(pid_t host) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  struct sched_param sp = { 0 };
  return setpriority(PRIO_PROCESS, 0, 1) == 0 && eperm(setpriority(PRIO_PROCESS, (id_t)host, 19)) &&
         eperm(setpriority(PRIO_USER, 0, 19)) && eperm(sched_setaffinity(host, sizeof set, &set)) &&
         eperm(sched_setscheduler(host, SCHED_IDLE, &sp)) &&
         eperm(syscall(SYS_ioprio_set, 1, host, 7 << 13)) && eperm(syscall(SYS_ioprio_set, 3, 0, 7 << 13));
}

/* TIOCSTI with bit 32 set: the kernel reads the request as 32 bits. */
static int tiocsti_refused(void) {
  char c = 'x';
  return eperm(syscall(SYS_ioctl, 0, (long)(((unsigned long)1 << 32) | TIOCSTI), &c)) &&
         eperm(syscall(SYS_ioctl, 0, (long)TIOCSTI, &c)) &&
         eperm(syscall(SYS_ioctl, 0, (long)(((unsigned long)1 << 32) | USERFAULTFD_IOC_NEW), 0));
}

/* A session of its own (no controlling terminal), and the ioctls that change
   a terminal refused whatever the high bits of the request (valgrind warns
   of a request it does not know: there the session only). */
static int terminal_refused(void) {
  if (getsid(0) != getpid()) return 0;
  if (sx_under_valgrind()) return 1;
  static const unsigned long requests[] = { TIOCSPGRP, TIOCSCTTY, TIOCNOTTY, TCSETS, TCSETSW, TCSETSF, TCSETA,
                                            TCXONC, TCFLSH, TIOCSETD, TIOCSWINSZ, TIOCCONS, TIOCSTI };
  int pgrp = getpid();
  for (size_t i = 0; i < sizeof requests / sizeof requests[0]; i++)
    if (!eperm(syscall(SYS_ioctl, 0, (long)(((unsigned long)0xdead << 32) | requests[i]), &pgrp)) ||
        !eperm(syscall(SYS_ioctl, 0, (long)requests[i], &pgrp)))
      return 0;
  return 1;
}

/* System V shared memory, message queues, semaphores and POSIX message
   queues, memory files: none (valgrind answers shmat itself, after asking
   shmctl, and memfd_secret, which it does not know). */
static int ipc_refused(void) {
  return eperm(syscall(SYS_shmget, 0 /* IPC_PRIVATE */, 4096, 01600)) && eperm(syscall(SYS_msgget, 0, 01600)) &&
         eperm(syscall(SYS_semget, 0, 1, 01600)) && (sx_under_valgrind() || eperm(syscall(SYS_shmat, 0, NULL, 0))) &&
         eperm(syscall(SYS_mq_open, "luma-confine", O_RDWR | O_CREAT, 0600, NULL)) &&
         eperm(syscall(SYS_mq_unlink, "luma-confine")) && eperm(syscall(SYS_memfd_create, "luma", 0)) &&
         eperm(syscall(SYS_memfd_create, "luma", (long)((unsigned long)1 << 32))) &&
         (sx_under_valgrind() || eperm(syscall(SYS_memfd_secret, 0)));
}

/* A thread's clone with a namespace bit: refused by the filter (EPERM),
   where the kernel alone would say EINVAL for this combination. */
static int namespaced_clone_refused(void) {
  unsigned long flags = CLONE_THREAD | CLONE_SIGHAND | CLONE_VM | CLONE_NEWUSER;
  return eperm(syscall(SYS_clone, flags, NULL, NULL, NULL, 0)) && eperm(unshare(CLONE_NEWUSER)) &&
         eperm(setns(0, 0));
}

static int owner_signals_refused(pid_t host) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  int ok = eperm(fcntl(fds[0], F_SETOWN, host)) && eperm(fcntl(fds[0], F_SETSIG, SIGKILL)) &&
           (sx_under_valgrind() || eperm(syscall(SYS_fcntl, fds[0], (long)(((unsigned long)1 << 32) | F_SETOWN), host)));
  struct f_owner_ex owner = { F_OWNER_PID, host };
  ok = ok && eperm(fcntl(fds[0], F_SETOWN_EX, &owner)) && fcntl(fds[0], F_GETFL) >= 0;
  /* the ioctls' way: FIOSETOWN, SIOCSPGRP, FIOASYNC, with high bits set
     (valgrind warns of FIOSETOWN, which it does not know, and of a request
     with high bits) */
  static const unsigned long requests[] = { FIOSETOWN, SIOCSPGRP, FIOASYNC };
  int arg = (int)host;
  for (size_t i = sx_under_valgrind() ? 1 : 0; ok && i < sizeof requests / sizeof requests[0]; i++)
    ok = eperm(syscall(SYS_ioctl, fds[0], (long)requests[i], &arg)) &&
         (sx_under_valgrind() || eperm(syscall(SYS_ioctl, fds[0], (long)(((unsigned long)1 << 32) | requests[i]), &arg)));
  close(fds[0]);
  close(fds[1]);
  return ok;
}

/* No lock on a file the host may lock, whatever the high bits of the
   command; F_GETLK still answers (the file is made before the filter is
   loaded, in the test's folder for temporary files). */
static int locks_refused(int fd) {
  struct flock l = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
  struct flock asked = l;
  int ok = eperm(flock(fd, LOCK_EX | LOCK_NB)) && eperm(flock(fd, LOCK_SH | LOCK_NB)) &&
           eperm(fcntl(fd, F_SETLK, &l)) && eperm(fcntl(fd, F_SETLKW, &l)) && eperm(fcntl(fd, F_OFD_SETLK, &l)) &&
           eperm(fcntl(fd, F_OFD_SETLKW, &l)) && eperm(fcntl(fd, F_SETLEASE, F_RDLCK)) &&
           (sx_under_valgrind() || eperm(syscall(SYS_fcntl, fd, (long)(((unsigned long)1 << 32) | F_SETLK), &l)));
  return ok && fcntl(fd, F_GETLK, &asked) == 0 && asked.l_type == F_UNLCK;
}

/* The socket to the host (its end set as isolate.c sets it): no sendmsg
   or sendmmsg on it, no copy of it to another number, whatever the high
   bits; write() still goes through, and a descriptor sent on a copy made
   before would be refused by the host's end where the kernel has
   SO_PASSRIGHTS. Another socket's sendmsg and dup still work. */
static int host_socket_fd = -1, host_end_fd = -1;

static int host_socket_guarded(void) {
  int fd = host_socket_fd;
  char byte = 'x';
  struct iovec io = { &byte, 1 };
  struct msghdr msg = { .msg_iov = &io, .msg_iovlen = 1 };
  struct mmsghdr mm = { .msg_hdr = msg };
  int ok = eperm(sendmsg(fd, &msg, 0)) && eperm(syscall(SYS_sendmmsg, fd, &mm, 1, 0)) && eperm(dup(fd)) &&
           eperm(dup2(fd, 100)) && eperm(dup3(fd, 100, 0)) && eperm(fcntl(fd, F_DUPFD, 100)) &&
           eperm(fcntl(fd, F_DUPFD_CLOEXEC, 100)) &&
           (sx_under_valgrind() || eperm(syscall(SYS_dup, (long)(((unsigned long)1 << 32) | (unsigned)fd)))) &&
           write(fd, &byte, 1) == 1;
  int other = dup(host_end_fd);
  ok = ok && other >= 0 && sendmsg(other, &msg, 0) == 1;
  if (other >= 0) close(other);
  return ok;
}

/* The parent-death signal cannot be cleared; reads and the thread's name
   still work. */
static int prctl_limited(void) {
  int sig = -1;
  return prctl(PR_GET_PDEATHSIG, &sig) == 0 && prctl(PR_SET_NAME, "probe") == 0 &&
         eperm(prctl(PR_SET_PDEATHSIG, 0)) &&
         eperm(syscall(SYS_prctl, (long)(((unsigned long)1 << 32) | PR_SET_PDEATHSIG), 0L, 0L, 0L, 0L)) &&
         eperm(prctl(PR_SET_DUMPABLE, 1)) && eperm(prctl(PR_SET_MM, PR_SET_MM_ENV_START, 0, 0, 0)) &&
         eperm(prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY));
}

/* valgrind answers the new mount API itself (ENOSYS), before the kernel */
static int mounts_refused(void) {
  if (sx_under_valgrind()) return eperm(syscall(SYS_umount2, "/", MNT_DETACH)) && eperm(mount("none", "/", "tmpfs", 0, NULL));
  return eperm(syscall(SYS_fsopen, "tmpfs", 0)) && eperm(syscall(SYS_fspick, AT_FDCWD, "/", 0)) &&
         eperm(syscall(SYS_open_tree, AT_FDCWD, "/", 0)) && eperm(syscall(SYS_umount2, "/", MNT_DETACH)) &&
         eperm(syscall(SYS_move_mount, -1, "", -1, "", 0)) && eperm(syscall(SYS_mount_setattr, -1, "", 0, NULL, 0)) &&
         eperm(syscall(SYS_pivot_root, "/", "/")) && eperm(mount("none", "/", "tmpfs", 0, NULL))
#if defined(__x86_64__) || defined(__aarch64__)
         && eperm(syscall(467 /* open_tree_attr */, AT_FDCWD, "/", 0, NULL, 0))
#endif
         ;
}

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

/* A file's mode, owner, times and extended attributes, by path or
   descriptor: refused before the kernel looks for the file (EPERM, not
   ENOENT), the raw calls newer than libseccomp 2.5 too. */
static int metadata_refused(void) {
  static const char *const none = "/nonexistent-luma-confine";
  struct timespec times[2] = { { 0, 0 }, { 0, 0 } };
  char buf[16];
  int ok = eperm(chmod(none, 0)) && eperm(fchmod(0, 0)) && eperm(fchmodat(AT_FDCWD, none, 0, 0)) &&
           eperm(chown(none, 0, 0)) && eperm(fchown(0, 0, 0)) && eperm(lchown(none, 0, 0)) &&
           eperm(fchownat(AT_FDCWD, none, 0, 0, 0)) && eperm(utimensat(AT_FDCWD, none, times, 0)) &&
           eperm(syscall(SYS_utimes, none, NULL)) && eperm(syscall(SYS_setxattr, none, "user.x", "x", 1, 0)) &&
           eperm(syscall(SYS_fsetxattr, 0, "user.x", "x", 1, 0)) && eperm(syscall(SYS_removexattr, none, "user.x")) &&
           eperm(syscall(SYS_getxattr, none, "user.x", buf, sizeof buf));
#if defined(__x86_64__) || defined(__aarch64__)
  /* fchmodat2, setxattrat, removexattrat, file_setattr; valgrind answers
     a number it does not know itself */
  if (!sx_under_valgrind())
    ok = ok && eperm(syscall(452, AT_FDCWD, none, 0, 0)) && eperm(syscall(463, AT_FDCWD, none, 0, "user.x", NULL, 0)) &&
         eperm(syscall(466, AT_FDCWD, none, 0, "user.x")) && eperm(syscall(469, AT_FDCWD, none, NULL, 0, 0));
#endif
  return ok;
}

/* No capability left, whatever user ran the test (root without a user
   namespace included): none effective, permitted or inheritable. */
static int no_capabilities(void) {
  struct { unsigned version; int pid; } head = { 0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0 };
  struct { unsigned effective, permitted, inheritable; } data[2];
  memset(data, 0xff, sizeof data);
  if (syscall(SYS_capget, &head, data) != 0) return 0;
  for (int i = 0; i < 2; i++)
    if (data[i].effective || data[i].permitted || data[i].inheritable) return 0;
  return 1;
}

/* In the child: a bit for each thing that behaved as the policy says. */
static int lock_fd = -1;

static int probe(const sx_policy *p) {
  int ok = 0;
  char *argv[] = { (char *)"/bin/true", NULL };
  /* valgrind cannot go on after an execve it let through fails */
  if (sx_under_valgrind()) ok |= EXEC;
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
  pid_t host = getppid();
  if (limits_on_self_only(host)) ok |= LIMITS;
  /* valgrind refuses a clone that is neither a thread nor a fork itself,
     and warns of ioctls and fcntls it does not know */
  if (sx_under_valgrind() || tiocsti_refused()) ok |= IOCTL;
  if (sx_under_valgrind() ? eperm(unshare(CLONE_NEWUSER)) : namespaced_clone_refused()) ok |= NSCLONE;
  if (owner_signals_refused(host)) ok |= FCNTL;
  if (prctl_limited()) ok |= PRCTL;
  if (mounts_refused()) ok |= MOUNT;
  if (scheduling_on_self_only(host)) ok |= SCHED;
  if (environment_empty(p->allow_network)) ok |= ENV;
  if (files_as_policy(host)) ok |= FILES;
  if (metadata_refused()) ok |= METADATA;
  if (terminal_refused()) ok |= TERMINAL;
  if (ipc_refused()) ok |= SYSV;
  if (no_capabilities()) ok |= NOCAPS;
  if (lock_fd >= 0 && locks_refused(lock_fd)) ok |= LOCKS;
  if (host_socket_fd >= 0 && host_socket_guarded()) ok |= HOSTSOCK;
  /* a bound on its tasks in its user namespace (where there is one; not
     under valgrind, which enters none) */
  if (!sx_user_namespaces() || sx_under_valgrind() ||
      (getrlimit(RLIMIT_NPROC, &r) == 0 && r.rlim_cur == LIM_HANDLER_MAX_TASKS && r.rlim_max == LIM_HANDLER_MAX_TASKS))
    ok |= NPROC;
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
  int bits[2];
  if (pipe(bits) != 0) return -1;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  sx_refuse_rights(sv[0]);
  host_socket_fd = sv[1];
  host_end_fd = sv[0];
  sx_confinement c = { &p, (size_t)64 << 20, getpid(), NULL, NULL, sv[1], NULL };
  pid_t pid = fork();
  if (pid == 0) {
    char err[256];
    close(bits[0]);
    int got = 0;   /* no bit: every check fails */
    if (sx_confine(&c, err, sizeof err) != 0) fprintf(stderr, "%s\n", err);
    else got = probe(&p);
    _exit(write(bits[1], &got, sizeof got) == sizeof got ? 0 : 1);
  }
  close(bits[1]);
  close(sv[0]);
  close(sv[1]);
  int got = 0;
  if (read(bits[0], &got, sizeof got) != sizeof got) got = 0;
  close(bits[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? got : 0;
}

static int instrumented(void) {
#if defined(__SANITIZE_ADDRESS__)
  return 1;
#else
  const char *preload = getenv("LD_PRELOAD");
  return (preload && strstr(preload, "asan")) || sx_under_valgrind();
#endif
}

/* The host's end takes no descriptor where the kernel has SO_PASSRIGHTS:
   the sender's sendmsg fails with EPERM; without a descriptor it goes. */
static void passrights_checked(void) {
  if (!sx_passrights()) {
    fprintf(stderr, "confine: this kernel has no SO_PASSRIGHTS; the filter's rules alone hold\n");
    return;
  }
  int sv[2];
  CT_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
  CT_CHECK(sx_refuse_rights(sv[0]) == 0, "SO_PASSRIGHTS: %s", strerror(errno));
  char byte = 'x';
  struct iovec io = { &byte, 1 };
  union { struct cmsghdr h; char room[CMSG_SPACE(sizeof(int))]; } u;
  memset(&u, 0, sizeof u);
  struct msghdr msg = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = u.room, .msg_controllen = sizeof u.room };
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  int sent = 0;
  memcpy(CMSG_DATA(c), &sent, sizeof sent);
  errno = 0;
  ssize_t r = sendmsg(sv[1], &msg, 0);
  CT_CHECK(r < 0 && errno == EPERM, "a descriptor sent to the host's end: %zd (%s), want EPERM", r, strerror(errno));
  struct msghdr plain = { .msg_iov = &io, .msg_iovlen = 1 };
  CT_CHECK(sendmsg(sv[1], &plain, 0) == 1, "a plain sendmsg to the host's end: %s", strerror(errno));
  close(sv[0]);
  close(sv[1]);
}

/* Runs the classic BPF program prog (a seccomp filter) on one call, as the
   kernel does: its action, or -1 for an instruction this runner does not
   know (libseccomp emits loads, ALU with constants, jumps and returns). */
static long run_bpf(const struct sock_filter *prog, size_t n, const struct seccomp_data *d) {
  uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = { 0 };
  for (size_t pc = 0; pc < n; pc++) {
    const struct sock_filter *f = &prog[pc];
    uint32_t src = BPF_SRC(f->code) == BPF_X ? x : f->k;
    switch (BPF_CLASS(f->code)) {
      case BPF_LD:
        if (BPF_MODE(f->code) == BPF_ABS && BPF_SIZE(f->code) == BPF_W && f->k + 4 <= sizeof *d)
          memcpy(&a, (const char *)d + f->k, 4);
        else if (BPF_MODE(f->code) == BPF_IMM) a = f->k;
        else if (BPF_MODE(f->code) == BPF_MEM && f->k < BPF_MEMWORDS) a = mem[f->k];
        else return -1;
        break;
      case BPF_LDX:
        if (BPF_MODE(f->code) == BPF_IMM) x = f->k;
        else if (BPF_MODE(f->code) == BPF_MEM && f->k < BPF_MEMWORDS) x = mem[f->k];
        else return -1;
        break;
      case BPF_ST: if (f->k >= BPF_MEMWORDS) return -1; mem[f->k] = a; break;
      case BPF_STX: if (f->k >= BPF_MEMWORDS) return -1; mem[f->k] = x; break;
      case BPF_ALU:
        switch (BPF_OP(f->code)) {
          case BPF_AND: a &= src; break;
          case BPF_OR: a |= src; break;
          case BPF_XOR: a ^= src; break;
          case BPF_ADD: a += src; break;
          case BPF_SUB: a -= src; break;
          case BPF_LSH: a <<= src; break;
          case BPF_RSH: a >>= src; break;
          case BPF_NEG: a = -a; break;
          default: return -1;
        }
        break;
      case BPF_JMP: {
        int taken;
        switch (BPF_OP(f->code)) {
          case BPF_JA: pc += f->k; continue;
          case BPF_JEQ: taken = a == src; break;
          case BPF_JGT: taken = a > src; break;
          case BPF_JGE: taken = a >= src; break;
          case BPF_JSET: taken = (a & src) != 0; break;
          default: return -1;
        }
        pc += taken ? f->jt : f->jf;
        break;
      }
      case BPF_RET: return BPF_RVAL(f->code) == BPF_A ? a : f->k;
      case BPF_MISC: if (BPF_MISCOP(f->code) == BPF_TAX) x = a; else a = x; break;
      default: return -1;
    }
  }
  return -1;
}

/* The filter a handler process loads, run on: this architecture's calls
   (one allowed, one refused: the runner reads the program as the kernel
   does), then another architecture's and, on x86-64, x32's, each of which
   must end the process. Where the kernel reports no process kill (before
   4.14, or under valgrind, which knows no seccomp(2)), confine.c falls
   back to the thread's kill, and that is what the filter must hold. */
static void other_architectures_end_the_process(void) {
  uint32_t action = SECCOMP_RET_KILL_PROCESS;
  long want_kill = SECCOMP_RET_KILL_PROCESS;
  if (syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) != 0) {
    want_kill = SECCOMP_RET_KILL_THREAD;
    printf("confine: this kernel reports no process kill (%s): a bad architecture kills the thread\n", strerror(errno));
    fflush(stdout);   /* once, not again from each child forked after */
  }
  sx_policy p;
  memset(&p, 0, sizeof p);
  p.strict = 1;
  p.isolation = SX_ISOLATE_PROCESS;
  char path[4096];
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/luma-confine-bpf-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(path);
  CT_CHECK(fd >= 0, "mkstemp %s: %s", path, strerror(errno));
  if (fd < 0) return;
  unlink(path);
  CT_CHECK(sx_filter_export(&p, 9, fd) == 0, "the filter could not be exported");
  struct stat st;
  fstat(fd, &st);
  size_t n = (size_t)st.st_size / sizeof(struct sock_filter);
  struct sock_filter *prog = malloc((size_t)st.st_size + 1);
  CT_CHECK(prog && pread(fd, prog, (size_t)st.st_size, 0) == st.st_size && n > 0, "the exported filter: %zu instructions", n);
  close(fd);
  if (!prog || n == 0) { free(prog); return; }
#if defined(__x86_64__)
  const uint32_t native = AUDIT_ARCH_X86_64, other = AUDIT_ARCH_I386;
  const int other_kill = 37, other_socketcall = 102;   /* i386's numbers */
#elif defined(__aarch64__)
  const uint32_t native = AUDIT_ARCH_AARCH64, other = AUDIT_ARCH_ARM;
  const int other_kill = 37, other_socketcall = 102;   /* 32-bit ARM's (socketcall is none there) */
#else
  const uint32_t native = 0, other = 0;
  const int other_kill = 0, other_socketcall = 0;
#endif
  if (native) {
    struct seccomp_data d;
    memset(&d, 0, sizeof d);
    d.arch = native;
    d.nr = SYS_getppid;
    long r = run_bpf(prog, n, &d);
    CT_CHECK(r == SECCOMP_RET_ALLOW, "getppid: %#lx, want ALLOW", r);
    d.nr = SYS_kill;
    d.args[0] = (uint64_t)getpid() + 1;
    r = run_bpf(prog, n, &d);
    CT_CHECK(r == (long)(SECCOMP_RET_ERRNO | EPERM), "kill of another process: %#lx, want ERRNO(EPERM)", r);
    d.arch = other;
    d.nr = other_kill;
    r = run_bpf(prog, n, &d);
    CT_CHECK(r == want_kill, "another architecture's kill: %#lx, want %#lx", r, want_kill);
    d.nr = other_socketcall;
    r = run_bpf(prog, n, &d);
    CT_CHECK(r == want_kill, "another architecture's socketcall: %#lx, want %#lx", r, want_kill);
    d.nr = SYS_getppid;
    r = run_bpf(prog, n, &d);
    CT_CHECK(r == want_kill, "another architecture's call %d: %#lx, want %#lx", SYS_getppid, r, want_kill);
#if defined(__x86_64__)
    /* x32: the x86-64 architecture, with bit 30 set in the number */
    d.arch = native;
    d.nr = 0x40000000 | SYS_kill;
    r = run_bpf(prog, n, &d);
    CT_CHECK(r == want_kill, "x32's kill: %#lx, want %#lx", r, want_kill);
    d.nr = 0x40000000 | SYS_getppid;
    r = run_bpf(prog, n, &d);
    CT_CHECK(r == want_kill, "x32's getppid: %#lx, want %#lx", r, want_kill);
#endif
  }
  free(prog);
}

/* Where this host makes pids cgroups (a root host): a confined child is
   in its own, with pids.max at handler_max_tasks, and the folder goes once
   the child is reaped. */
static void pids_cgroup_checked(void) {
  if (!sx_pids_cgroup_base()) {
    fprintf(stderr, "confine: this host makes no pids cgroup (not root, or no pids controller it may write)\n");
    return;
  }
  char *dir = sx_pids_cgroup_make();
  CT_CHECK(dir != NULL, "no pids cgroup made under %s: %s", sx_pids_cgroup_base(), strerror(errno));
  if (!dir) return;
  char path[8192], buf[64] = "";
  snprintf(path, sizeof path, "%s/pids.max", dir);
  FILE *f = fopen(path, "r");
  CT_CHECK(f && fgets(buf, sizeof buf, f) && atoi(buf) == LIM_HANDLER_MAX_TASKS, "%s: %s", path, buf);
  if (f) fclose(f);
  sx_policy p;
  memset(&p, 0, sizeof p);
  p.strict = 1;
  p.isolation = SX_ISOLATE_PROCESS;
  sx_confinement c = { &p, (size_t)64 << 20, getpid(), NULL, NULL, -1, dir };
  int bits[2];
  CT_CHECK(pipe(bits) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) {
    char err[256];
    int in = 0;
    close(bits[0]);
    if (sx_confine(&c, err, sizeof err) != 0) fprintf(stderr, "%s\n", err);
    else {
      /* its own cgroup, by the folder's name */
      FILE *g = fopen("/proc/self/cgroup", "r");
      char line[1024];
      const char *name = strrchr(c.pids_cgroup, '/');
      while (g && fgets(line, sizeof line, g)) in |= strstr(line, name) != NULL;
      if (g) fclose(g);
    }
    _exit(write(bits[1], &in, sizeof in) == sizeof in ? 0 : 1);
  }
  close(bits[1]);
  int in = 0;
  if (read(bits[0], &in, sizeof in) != sizeof in) in = 0;
  close(bits[0]);
  waitpid(pid, NULL, 0);
  CT_CHECK(in, "the confined child is not in its pids cgroup %s", dir);
  snprintf(path, sizeof path, "%s", dir);
  sx_pids_cgroup_remove(dir);
  struct stat st;
  CT_CHECK(stat(path, &st) != 0, "%s is left once the child is reaped", path);
}

int main(void) {
  passrights_checked();
  other_architectures_end_the_process();
  pids_cgroup_checked();
  int all = EXEC | FORK | PTRACE | THREAD | SOCKET | CORE | SIGNAL | LIMITS | IOCTL | NSCLONE | FCNTL | PRCTL |
            MOUNT | SCHED | ENV | FILES | METADATA | NOCAPS | TERMINAL | SYSV | LOCKS | HOSTSOCK | NPROC | (instrumented() ? 0 : BIG);
  /* asked in a child of its own, so that the confined children load the
     resolver's modules and read its files under the filter themselves */
  pid_t probe_pid = fork();
  if (probe_pid == 0) _exit(own_name_resolves());
  int probe_status = 0;
  waitpid(probe_pid, &probe_status, 0);
  name_resolves_unconfined = WIFEXITED(probe_status) && WEXITSTATUS(probe_status) == 1;
  if (!name_resolves_unconfined) fprintf(stderr, "confine: this machine's name does not resolve; not checked under the filter\n");
  const char *tmp = getenv("TMPDIR");
  char lock_path[4096];
  snprintf(lock_path, sizeof lock_path, "%s/luma-confine-lock-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  lock_fd = mkstemp(lock_path);
  if (lock_fd >= 0) unlink(lock_path);
  int got = confined(0);
  CT_CHECK((got & all) == all, "without the network: got %#x, want %#x", got, all);
  got = confined(1);
  CT_CHECK((got & all) == all, "with the network: got %#x, want %#x", got, all);
  return ct_finish("confine");
}
