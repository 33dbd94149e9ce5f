/* The backstops of a handler process (isolate.c), set in the child before
   it runs any code of the module: limits that hold even where the Lua
   state's own accounting does not reach (a C library's buffers, a bug in
   the VM). The Lua-level limits (max_memory_mb through the allocator, the
   deadline through the hook and the host's kill) stay the first line. */
#define _GNU_SOURCE
#include "isolate.h"

#include <stdio.h>

#if LUA_VERSION_NUM >= 504
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <seccomp.h>

#if defined(__SANITIZE_ADDRESS__)
#define ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ADDRESS_SANITIZER 1
#endif
#endif

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

/* Room for what the child holds besides its state: the input and the
   result as copies, as bytes on the wire and in a buffer, and its threads'
   stacks. */
#define CONFINE_ROOM ((size_t)64 << 20)

#ifndef ADDRESS_SANITIZER
/* The address space mapped now, in bytes (a forked child starts with all
   of its parent's, the other threads' stacks included). */
static size_t mapped_now(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f) {
    if (fscanf(f, "%lu", &pages) != 1) pages = 0;
    fclose(f);
  }
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}
#endif

static int limit_memory(const sx_policy *p, size_t copy_bytes, char *err, size_t errlen) {
  /* a sanitizer's shadow memory and valgrind's own heap live in the same
     address space: under them the allocator's limit is the only one */
#ifdef ADDRESS_SANITIZER
  (void)p; (void)copy_bytes; (void)err; (void)errlen;
  return 0;
#else
  if (!p->memory_limit || RUNNING_ON_VALGRIND) return 0;
  size_t now = mapped_now();
  if (!now) {
    snprintf(err, errlen, "cannot read the handler process's address space (/proc/self/statm)");
    return -1;
  }
  struct rlimit r;
  r.rlim_cur = r.rlim_max = (rlim_t)(now + p->memory_limit + 4 * copy_bytes + CONFINE_ROOM);
  if (setrlimit(RLIMIT_AS, &r) != 0) {
    snprintf(err, errlen, "cannot set RLIMIT_AS in the handler process: %s", strerror(errno));
    return -1;
  }
  return 0;
#endif
}

/* The sockets a handler process may make. Without the network, none. With
   it, IPv4 and IPv6 only: no Unix socket to connect to a daemon of the host's
   user, no netlink or packet socket. A Unix stream socketpair stays (libcurl's
   resolver signals through one); a datagram pair could still send to a path
   (/dev/log, a notify socket). */
static int socket_rules(scmp_filter_ctx ctx, int allow_network) {
  int rc = 0;
  if (!allow_network) {
    static const int sockets[] = {
      SCMP_SYS(socket), SCMP_SYS(socketpair), SCMP_SYS(connect), SCMP_SYS(bind), SCMP_SYS(listen),
      SCMP_SYS(accept), SCMP_SYS(accept4),
    };
    for (size_t i = 0; rc == 0 && i < sizeof sockets / sizeof sockets[0]; i++)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), sockets[i], 0);
    return rc;
  }
  rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_LT, AF_INET));
  for (int family = AF_INET + 1; rc == 0 && family < AF_INET6; family++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)family));
  if (rc == 0)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_GT, AF_INET6));
  if (rc == 0)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socketpair), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  for (int type = 0; rc == 0 && type <= 0xf; type++)
    if (type != SOCK_STREAM)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socketpair), 1,
                            SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, (scmp_datum_t)type));
  return rc;
}

#if defined(__s390__) || defined(__s390x__)
#define CLONE_FLAGS_ARG SCMP_A1
#else
#define CLONE_FLAGS_ARG SCMP_A0
#endif

#define LOW32 0xffffffffULL
#define IOPRIO_WHO_PROCESS 1   /* linux/ioprio.h, which glibc does not wrap */

/* The prctl options a handler process may use: the reads, its thread's
   name, and what only narrows it further (another filter, no new
   privileges). Not PR_SET_PDEATHSIG (the tie to the host), PR_SET_MM,
   PR_SET_DUMPABLE, PR_SET_PTRACER, PR_SCHED_CORE (which reaches other
   processes), capabilities or securebits. */
static const int prctl_allowed[] = {
  PR_GET_PDEATHSIG, PR_GET_DUMPABLE, PR_GET_KEEPCAPS, PR_GET_TIMING, PR_SET_NAME, PR_GET_NAME,
  PR_GET_ENDIAN, PR_GET_SECCOMP, PR_SET_SECCOMP, PR_CAPBSET_READ, PR_GET_TSC, PR_GET_SECUREBITS,
  PR_GET_TIMERSLACK, PR_MCE_KILL_GET, PR_GET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS,
  PR_GET_TID_ADDRESS, PR_GET_THP_DISABLE, PR_GET_FP_MODE, PR_GET_SPECULATION_CTRL,
};
/* prctl options are small numbers; everything above this is refused */
#define PRCTL_HIGHEST 100

/* Calls whose first argument names a process: 0 (the caller) only, so that
   a handler process can change its own limits and scheduling but never the
   host's (prlimit RLIMIT_FSIZE 0 kills it at its next write; SCHED_IDLE,
   an affinity or memory migration slows it). */
static const int on_self_only[] = {
  SCMP_SYS(prlimit64), SCMP_SYS(sched_setparam), SCMP_SYS(sched_setscheduler),
  SCMP_SYS(sched_setaffinity), SCMP_SYS(sched_setattr), SCMP_SYS(migrate_pages), SCMP_SYS(move_pages),
};

/* New namespaces: each bit refused in clone's flags. */
static const unsigned long clone_new[] = {
  CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
};

/* The whole new mount API, open_tree_attr (Linux 6.15) included, which
   libseccomp 2.5 has no name for. */
#ifndef __NR_open_tree_attr
#if defined(__x86_64__) || defined(__aarch64__) || defined(__i386__) || defined(__arm__)
#define __NR_open_tree_attr 467
#endif
#endif

/* what could reach another process, the mounts, or the machine (a root
   host's child keeps its capabilities), or kernel surface a Lua handler
   has no use for */
static const int refused[] = {
  SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(ptrace), SCMP_SYS(fork), SCMP_SYS(vfork),
  SCMP_SYS(process_vm_readv), SCMP_SYS(process_vm_writev), SCMP_SYS(tkill),
  SCMP_SYS(pidfd_open), SCMP_SYS(pidfd_getfd), SCMP_SYS(pidfd_send_signal), SCMP_SYS(process_madvise),
  SCMP_SYS(process_mrelease), SCMP_SYS(kcmp), SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter),
  SCMP_SYS(io_uring_register), SCMP_SYS(unshare), SCMP_SYS(setns),
  SCMP_SYS(mount), SCMP_SYS(umount2), SCMP_SYS(pivot_root), SCMP_SYS(chroot), SCMP_SYS(fsopen),
  SCMP_SYS(fsconfig), SCMP_SYS(fsmount), SCMP_SYS(fspick), SCMP_SYS(move_mount), SCMP_SYS(open_tree),
  SCMP_SYS(mount_setattr),
  SCMP_SYS(bpf), SCMP_SYS(perf_event_open), SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key),
  SCMP_SYS(userfaultfd), SCMP_SYS(personality),
  SCMP_SYS(open_by_handle_at), SCMP_SYS(name_to_handle_at), SCMP_SYS(fanotify_init),
  SCMP_SYS(reboot), SCMP_SYS(kexec_load), SCMP_SYS(kexec_file_load), SCMP_SYS(init_module),
  SCMP_SYS(finit_module), SCMP_SYS(delete_module), SCMP_SYS(swapon), SCMP_SYS(swapoff),
  SCMP_SYS(sethostname), SCMP_SYS(setdomainname), SCMP_SYS(acct), SCMP_SYS(quotactl),
  SCMP_SYS(settimeofday), SCMP_SYS(clock_settime), SCMP_SYS(clock_adjtime), SCMP_SYS(adjtimex),
  SCMP_SYS(syslog), SCMP_SYS(iopl), SCMP_SYS(ioperm), SCMP_SYS(vhangup),
};

static int add_refused(scmp_filter_ctx ctx) {
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < sizeof refused / sizeof refused[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), refused[i], 0);
#ifdef __NR_open_tree_attr
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), __NR_open_tree_attr, 0);
#endif
  return rc;
}

static int prctl_rules(scmp_filter_ctx ctx) {
  int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(prctl), 1,
                            SCMP_A0(SCMP_CMP_GT, (scmp_datum_t)PRCTL_HIGHEST));
  for (int option = 0; rc == 0 && option <= PRCTL_HIGHEST; option++) {
    int allowed = 0;
    for (size_t i = 0; i < sizeof prctl_allowed / sizeof prctl_allowed[0]; i++)
      allowed |= prctl_allowed[i] == option;
    if (!allowed)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(prctl), 1,
                            SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)option));
  }
  return rc;
}

static int filter(const sx_policy *p, char *err, size_t errlen) {
  /* valgrind knows prctl's way of loading a filter, not seccomp(2)'s */
  if (RUNNING_ON_VALGRIND) seccomp_api_set(1);
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) {
    snprintf(err, errlen, "cannot make a seccomp filter (out of memory)");
    return -1;
  }
  /* signals go to this process only (raise, the deadline watch's
     pthread_sigqueue): never to the host or another child */
  static const int to_self[] = {
    SCMP_SYS(kill), SCMP_SYS(tgkill), SCMP_SYS(rt_sigqueueinfo), SCMP_SYS(rt_tgsigqueueinfo),
  };
  scmp_datum_t me = (scmp_datum_t)getpid();
  int rc = add_refused(ctx);
  for (size_t i = 0; rc == 0 && i < sizeof to_self / sizeof to_self[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), to_self[i], 1, SCMP_A0(SCMP_CMP_NE, me));
  for (size_t i = 0; rc == 0 && i < sizeof on_self_only / sizeof on_self_only[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), on_self_only[i], 1, SCMP_A0(SCMP_CMP_NE, 0));
  /* setpriority and ioprio_set name the process second, after a kind
     (process, group, user): this process (0) only */
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(setpriority), 1, SCMP_A0(SCMP_CMP_NE, PRIO_PROCESS));
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(setpriority), 1, SCMP_A1(SCMP_CMP_NE, 0));
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioprio_set), 1, SCMP_A0(SCMP_CMP_NE, IOPRIO_WHO_PROCESS));
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioprio_set), 1, SCMP_A1(SCMP_CMP_NE, 0));
  /* no keystrokes pushed into a terminal the child inherited (nor a
     console's selection pasted), no userfaultfd from /dev/userfaultfd; the
     kernel reads the request as 32 bits */
  static const unsigned long ioctls[] = { TIOCSTI, TIOCLINUX, USERFAULTFD_IOC_NEW };
  for (size_t i = 0; rc == 0 && i < sizeof ioctls / sizeof ioctls[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                          SCMP_A1(SCMP_CMP_MASKED_EQ, LOW32, (scmp_datum_t)ioctls[i]));
  /* no signal on I/O sent to another process (F_SETOWN to the host with
     F_SETSIG SIGKILL kills it) */
  static const int fcntls[] = { F_SETOWN, F_SETOWN_EX, F_SETSIG };
  for (size_t i = 0; rc == 0 && i < sizeof fcntls / sizeof fcntls[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fcntl), 1,
                          SCMP_A1(SCMP_CMP_MASKED_EQ, LOW32, (scmp_datum_t)fcntls[i]));
  if (rc == 0) rc = prctl_rules(ctx);
  /* threads are fine (the deadline watch, libcurl's resolver); processes
     and namespaces are not. clone's flags are its first argument, but its
     second on s390 */
  if (rc == 0)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                          CLONE_FLAGS_ARG(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
  for (size_t i = 0; rc == 0 && i < sizeof clone_new / sizeof clone_new[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                          CLONE_FLAGS_ARG(SCMP_CMP_MASKED_EQ, clone_new[i], clone_new[i]));
  /* glibc 2.34 and later try clone3 first and fall back to clone on ENOSYS */
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  if (rc == 0) rc = socket_rules(ctx, p->allow_network);
  if (rc == 0) rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc != 0) {
    snprintf(err, errlen, "cannot load the handler process's seccomp filter: %s", strerror(-rc));
    return -1;
  }
  return 0;
}

int sx_confine(const sx_policy *p, size_t copy_bytes, char *err, size_t errlen) {
  /* a crash is reported by its signal; a core image of the host's whole
     address space would only take time and disk */
  struct rlimit none = { 0, 0 };
  setrlimit(RLIMIT_CORE, &none);
  if (limit_memory(p, copy_bytes, err, errlen) != 0) return -1;
  return filter(p, err, errlen);
}

#else /* LuaJIT and Lua 5.1: no policy, so no isolation (core/lmodule.c) */
int sx_confine(const sx_policy *p, size_t copy_bytes, char *err, size_t errlen) {
  (void)p; (void)copy_bytes;
  snprintf(err, errlen, "process isolation needs Lua 5.4");
  return -1;
}
#endif
