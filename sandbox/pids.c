/* A handler process's pids cgroup (isolate.h): made by the host before the
   fork, entered by the child (confine.c), removed by the host once it has
   reaped the child. Linux with Lua 5.4 only, as the isolation itself. */
#define _GNU_SOURCE
#include "isolate.h"
#include "luma_limits.h"

#if LUA_VERSION_NUM >= 504
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandbox.h"

/* RLIMIT_NPROC does not bind a task whose real uid is the machine's root
   (the kernel exempts INIT_USER, capabilities or not): a root host's
   child, mapped to 0 in its user namespace, or a child without one, could
   make threads until the machine's pids ran out. A pids cgroup binds any
   uid. Where the host may make one (the folder of its own cgroup in the
   hierarchy with the pids controller is writable: cgroup v1's pids, or v2
   where that cgroup's subtree_control lists pids; a root host, or a
   delegated subtree), each child gets a cgroup of its own there,
   luma-<host pid>-<n>, with pids.max at LIM_HANDLER_MAX_TASKS; the child
   moves itself in before anything else (it still has the host's
   privileges), and the host removes the folder when it has reaped the
   child. Folders a host left when it died are removed by the next host
   that looks (an empty cgroup only: rmdir refuses one in use). */
static char pids_base[SX_PIDS_PATH_MAX];
static pthread_once_t pids_once = PTHREAD_ONCE_INIT;

/* Whether word is one of the comma-separated items of list. */
static int listed(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (strncmp(p, word, n) == 0 && (p[n] == ',' || p[n] == '\0' || p[n] == '\n')) return 1;
  return 0;
}

/* The mount point of the cgroup hierarchy (v1 with the pids controller,
   or v2) and the root of it that is mounted there. */
static int cgroup_mount(int v2, char *point, size_t plen, char *root, size_t rlen) {
  FILE *f = fopen("/proc/self/mountinfo", "re");
  if (!f) return -1;
  char line[8192];
  int found = -1;
  while (found < 0 && fgets(line, sizeof line, f)) {
    char *dash = strstr(line, " - ");
    if (!dash) continue;
    char type[64], source[256], options[2048], mroot[2048], mpoint[2048];
    if (sscanf(dash + 3, "%63s %255s %2047s", type, source, options) < 3) continue;
    if (sscanf(line, "%*s %*s %*s %2047s %2047s", mroot, mpoint) != 2) continue;
    if (v2 ? strcmp(type, "cgroup2") != 0 : (strcmp(type, "cgroup") != 0 || !listed(options, "pids"))) continue;
    snprintf(point, plen, "%s", mpoint);
    snprintf(root, rlen, "%s", mroot);
    found = 0;
  }
  fclose(f);
  return found;
}

/* This process's cgroup in the hierarchy: v1's line naming pids, or v2's "0::". */
static int own_cgroup(int v2, char *path, size_t len) {
  FILE *f = fopen("/proc/self/cgroup", "re");
  if (!f) return -1;
  char line[4096];
  int found = -1;
  while (found < 0 && fgets(line, sizeof line, f)) {
    char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
    if (!b) continue;
    *b = '\0';
    if (v2 ? strcmp(line, "0") != 0 || a[1] != '\0' : !listed(a + 1, "pids")) continue;
    b[strcspn(b + 1, "\n") + 1] = '\0';
    snprintf(path, len, "%s", b + 1);
    found = 0;
  }
  fclose(f);
  return found;
}

static int read_small(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, len - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = '\0';
  return 0;
}

/* The folders luma-<pid>-<n> of hosts that are gone, left when they died. */
static void remove_stale(const char *base) {
  DIR *d = opendir(base);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    int pid;
    unsigned n;
    char proc[64], dir[sizeof pids_base + sizeof e->d_name + 2];
    if (sscanf(e->d_name, "luma-%d-%u", &pid, &n) != 2 || pid <= 0) continue;
    snprintf(proc, sizeof proc, "/proc/%d", pid);
    if (access(proc, F_OK) == 0) continue;
    snprintf(dir, sizeof dir, "%s/%s", base, e->d_name);
    (void)rmdir(dir);
  }
  closedir(d);
}

static void find_pids_base(void) {
  char point[2048], root[2048], own[2048], base[sizeof pids_base], controls[512];
  for (int v2 = 0; v2 <= 1 && !pids_base[0]; v2++) {
    if (cgroup_mount(v2, point, sizeof point, root, sizeof root) != 0 || own_cgroup(v2, own, sizeof own) != 0) continue;
    /* the mount shows the hierarchy from root: own is below it, or out of reach */
    size_t r = strcmp(root, "/") == 0 ? 0 : strlen(root);
    if (r && (strncmp(own, root, r) != 0 || (own[r] != '/' && own[r] != '\0'))) continue;
    if (snprintf(base, sizeof base, "%s%s", point, own + r) >= (int)sizeof base) continue;
    size_t n = strlen(base);
    while (n > 1 && base[n - 1] == '/') base[--n] = '\0';
    if (v2) {
      char path[sizeof base + 32];
      snprintf(path, sizeof path, "%s/cgroup.subtree_control", base);
      if (read_small(path, controls, sizeof controls) != 0 || !strstr(controls, "pids")) continue;
    }
    if (access(base, W_OK) != 0) continue;
    memcpy(pids_base, base, sizeof base);
  }
  if (pids_base[0]) remove_stale(pids_base);
}

const char *sx_pids_cgroup_base(void) {
  /* where RLIMIT_NPROC binds (a host that is not root, in a user
     namespace) the cgroup is not made: moving a process into one waits
     for the kernel (an RCU grace period on cgroup v1, ~30 ms) */
  if (sx_under_valgrind() || (geteuid() != 0 && sx_user_namespaces())) return NULL;
  pthread_once(&pids_once, find_pids_base);
  return pids_base[0] ? pids_base : NULL;
}

static int write_text(const char *dir, const char *file, const char *text) {
  char path[2 * sizeof pids_base];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

char *sx_pids_cgroup_make(void) {
  const char *base = sx_pids_cgroup_base();
  if (!base) return NULL;
  static unsigned made;
  unsigned n = __atomic_fetch_add(&made, 1, __ATOMIC_RELAXED);
  char dir[sizeof pids_base + 64], max[32];
  snprintf(dir, sizeof dir, "%s/luma-%d-%u", base, (int)getpid(), n);
  if (mkdir(dir, 0755) != 0) return NULL;
  snprintf(max, sizeof max, "%d\n", LIM_HANDLER_MAX_TASKS);
  char *copy = write_text(dir, "pids.max", max) == 0 ? strdup(dir) : NULL;
  if (!copy) (void)rmdir(dir);
  return copy;
}

void sx_pids_cgroup_remove(char *dir) {
  if (!dir) return;
  /* the child is reaped: its cgroup is empty, but for a moment after its
     exit on some kernels */
  for (int i = 0; rmdir(dir) != 0 && errno == EBUSY && i < 50; i++) {
    struct timespec ms = { 0, 1000 * 1000 };
    nanosleep(&ms, NULL);
  }
  free(dir);
}

int sx_pids_cgroup_enter(const char *dir) {
  return write_text(dir, "cgroup.procs", "0\n");
}

#else /* LuaJIT and Lua 5.1: no isolation (core/lmodule.c) */
const char *sx_pids_cgroup_base(void) {
  return NULL;
}

char *sx_pids_cgroup_make(void) {
  return NULL;
}

void sx_pids_cgroup_remove(char *dir) {
  (void)dir;
}

int sx_pids_cgroup_enter(const char *dir) {
  (void)dir;
  return -1;
}
#endif
