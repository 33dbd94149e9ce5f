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
#include <linux/userfaultfd.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define HIGH ((unsigned long)1 << 32)

static pid_t host;          /* the process the library was loaded in */
static char report[16384];
static size_t used;

__attribute__((constructor)) static void remember_host(void) { host = getpid(); }

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
static enum { HONEST, FORGE_EMPTY, FORGE_CUT } forge;

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

ssize_t write(int fd, const void *buf, size_t n) {
  ssize_t (*real)(int, const void *, size_t) = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  int how = getpid() == host ? HONEST : forge;
  forge = HONEST;
  if (how == FORGE_EMPTY) {
    uint32_t zero = 0;
    return real(fd, &zero, sizeof zero) == (ssize_t)sizeof zero ? (ssize_t)n : -1;
  }
  if (how == FORGE_CUT && n > 14) {
    if (real(fd, buf, 14) == 14) _exit(0);
    return -1;
  }
  return real(fd, buf, n);
}

static const struct { const char *name; void (*run)(const char *root); } attacks[] = {
  { "mem", host_memory }, { "config", config }, { "setown", owner_signal }, { "signals", signals },
  { "limits", host_limits }, { "stdout", host_stdout }, { "mount", mounts }, { "tiocsti", tiocsti },
  { "namespaces", namespaces }, { "userfaultfd", userfault }, { "environ", environment },
  { "fds", descriptors }, { "pid", pid }, { "socket", abstract_socket }, { "caps", capabilities },
  { "forge_empty", forge_empty }, { "forge_cut", forge_cut },
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
