/* The backstops of a handler process (isolate.c), set in the child before
   it runs any code of the module: limits that hold even where the Lua
   state's own accounting does not reach (a C library's buffers, a bug in
   the VM), and a confinement that holds against machine code run there (a
   VM exploit): the child cannot reach the host, its files or the machine.
   The Lua-level limits (max_memory_mb through the allocator, the deadline
   through the hook and the host's kill) stay the first line. In order:
   the tie to the host (parent death), a session of its own, its pids
   cgroup, the environment, a user namespace and an IPC namespace, no capability,
   rlimits, Landlock, the seccomp filter (last: it refuses what the others
   need). spec/39 attacks each from inside the child. */
#define _GNU_SOURCE
#include "isolate.h"
#include "luma_limits.h"

#include <stdio.h>

#if LUA_VERSION_NUM >= 504
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <linux/capability.h>
#include <linux/userfaultfd.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <asm/termbits.h>   /* struct termios2, which TCSETS2 measures */
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <seccomp.h>

#if defined(__SANITIZE_ADDRESS__)
#define ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ADDRESS_SANITIZER 1
#endif
#endif

static int under_valgrind;
static pthread_once_t valgrind_once = PTHREAD_ONCE_INIT;

static void look_for_valgrind(void) {
  FILE *f = fopen("/proc/self/maps", "re");
  if (!f) return;
  char line[512];
  while (!under_valgrind && fgets(line, sizeof line, f)) under_valgrind = strstr(line, "vgpreload") != NULL;
  fclose(f);
}

int sx_under_valgrind(void) {
  pthread_once(&valgrind_once, look_for_valgrind);
  return under_valgrind;
}

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
  if (!p->memory_limit || sx_under_valgrind()) return 0;
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

/* The filter. Refused calls fail with EPERM (ENOSYS for clone3, so that
   the C library falls back to clone, whose flags a filter can read): the
   handler sees an error, the process lives. An argument the kernel reads
   as 32 bits (a pid, an ioctl request, a fcntl command, a prctl option) is
   compared so that high bits cannot hide it: either one exact 64-bit value
   is the only one let through (pid 0, this pid), or the comparison is
   masked to the low 32 bits. */
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

/* A file's metadata by path or descriptor: its mode, owner, times and
   extended attributes. Landlock checks opening, making and removing files,
   not these, so without the filter they reach every file of the host's
   user by path (and with root's capabilities, every file), outside the
   granted folders; the strict io and Lua's os and io library need none of
   them (os.rename and os.remove are rename and unlink). The xattr reads go
   too: a handler has no use for a file's labels. */
static const int metadata[] = {
  SCMP_SYS(chmod), SCMP_SYS(fchmod), SCMP_SYS(fchmodat), SCMP_SYS(chown), SCMP_SYS(fchown), SCMP_SYS(lchown),
  SCMP_SYS(fchownat), SCMP_SYS(utime), SCMP_SYS(utimes), SCMP_SYS(utimensat), SCMP_SYS(futimesat),
  SCMP_SYS(setxattr), SCMP_SYS(lsetxattr), SCMP_SYS(fsetxattr), SCMP_SYS(removexattr), SCMP_SYS(lremovexattr),
  SCMP_SYS(fremovexattr), SCMP_SYS(getxattr), SCMP_SYS(lgetxattr), SCMP_SYS(fgetxattr), SCMP_SYS(listxattr),
  SCMP_SYS(llistxattr), SCMP_SYS(flistxattr),
};

/* Kernel objects that are not files, so not Landlock's, which the runtime
   does not use: System V shared memory, message queues and semaphores, and
   POSIX message queues (named per machine, they outlive the process, and
   shared memory is not counted in RLIMIT_AS while unmapped); nor memory
   files. */
static const int ipc[] = {
  SCMP_SYS(shmget), SCMP_SYS(shmat), SCMP_SYS(shmdt), SCMP_SYS(shmctl), SCMP_SYS(msgget), SCMP_SYS(msgsnd),
  SCMP_SYS(msgrcv), SCMP_SYS(msgctl), SCMP_SYS(semget), SCMP_SYS(semop), SCMP_SYS(semtimedop), SCMP_SYS(semctl),
  SCMP_SYS(mq_open), SCMP_SYS(mq_unlink), SCMP_SYS(mq_timedsend), SCMP_SYS(mq_timedreceive), SCMP_SYS(mq_notify),
  SCMP_SYS(mq_getsetattr),
  /* memory files: a memfd's pages are not counted in RLIMIT_AS, however
     many (nothing in the runtime, the C library, libcurl or Lua makes one) */
  SCMP_SYS(memfd_create), SCMP_SYS(memfd_secret),
};

/* The calls newer than libseccomp 2.5 (Debian 12's) that belong to the
   lists above, by their number, the same on these architectures: fchmodat2
   (Linux 6.6), the *xattrat calls (6.13), open_tree_attr (6.15: the whole
   new mount API is refused), file_getattr and file_setattr (6.17). */
#if defined(__x86_64__) || defined(__aarch64__) || defined(__i386__) || defined(__arm__)
static const int refused_by_number[] = { 452, 463, 464, 465, 466, 467, 468, 469 };
#endif

static int add_refused(scmp_filter_ctx ctx) {
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < sizeof refused / sizeof refused[0]; i++) {
    /* valgrind ends a process's other threads with tkill (its exit spun
       forever without it); under valgrind, as RLIMIT_AS, it is let be */
    if (refused[i] == SCMP_SYS(tkill) && sx_under_valgrind()) continue;
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), refused[i], 0);
  }
  for (size_t i = 0; rc == 0 && i < sizeof metadata / sizeof metadata[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), metadata[i], 0);
  for (size_t i = 0; rc == 0 && i < sizeof ipc / sizeof ipc[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), ipc[i], 0);
#if defined(__x86_64__) || defined(__aarch64__) || defined(__i386__) || defined(__arm__)
  for (size_t i = 0; rc == 0 && i < sizeof refused_by_number / sizeof refused_by_number[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), refused_by_number[i], 0);
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

static int host_socket_rules(scmp_filter_ctx ctx, int fd);

/* The filter's rules, in ctx: 0, or libseccomp's negative errno. */
static int rules(scmp_filter_ctx ctx, const sx_policy *p, int host_socket) {
  /* a call of another architecture the kernel runs in a 64-bit process
     (i386's through int $0x80, x32's numbers with bit 30 set on x86-64;
     32-bit ARM's on arm64) meets none of the rules below, which name this
     architecture's calls: libseccomp refuses it by its "bad architecture"
     action, whose default kills the calling thread only (the rest of the
     process runs on). It ends the whole process here, which the host
     reports with its signal (SIGSYS). Kernels before 4.14 have no
     process kill: there the thread's stays */
  int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (rc != 0) rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL);
  /* signals go to this process only (raise, the deadline watch's
     pthread_sigqueue): never to the host or another child */
  static const int to_self[] = {
    SCMP_SYS(kill), SCMP_SYS(tgkill), SCMP_SYS(rt_sigqueueinfo), SCMP_SYS(rt_tgsigqueueinfo),
  };
  scmp_datum_t me = (scmp_datum_t)getpid();
  if (rc == 0) rc = add_refused(ctx);
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
     console's selection pasted), no change to a terminal's settings, its
     foreground group, line discipline, size or modem lines (the child has
     left the host's session, so it has no controlling terminal: this is
     the belt), no userfaultfd from /dev/userfaultfd; the kernel reads the
     request as 32 bits */
  static const unsigned long ioctls[] = {
    TIOCSTI, TIOCLINUX, USERFAULTFD_IOC_NEW,
    TIOCSPGRP, TIOCSCTTY, TIOCNOTTY, TIOCCONS, TIOCSETD, TIOCSWINSZ, TIOCVHANGUP, TIOCSLCKTRMIOS,
    TCSETS, TCSETSW, TCSETSF, TCSETA, TCSETAW, TCSETAF, TCSETS2, TCSETSW2, TCSETSF2, TCSETX, TCSETXW, TCSETXF,
    TCXONC, TCFLSH, TCSBRK, TCSBRKP, TIOCSBRK, TIOCCBRK, TIOCEXCL, TIOCNXCL, TIOCPKT, TIOCMSET, TIOCMBIS,
    TIOCMBIC, TIOCSSOFTCAR, TIOCSSERIAL, TIOCSRS485, TIOCSIG,
    /* a socket's owner, F_SETOWN's way (FIOSETOWN, SIOCSPGRP): with the
       host as owner and FIOASYNC on, room coming free on the socket to the
       host sends the host SIGIO, whose default action ends it. Landlock's
       signal scoping (ABI 6) does not cover this before Linux 6.12 */
    FIOSETOWN, SIOCSPGRP, FIOASYNC,
  };
  for (size_t i = 0; rc == 0 && i < sizeof ioctls / sizeof ioctls[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                          SCMP_A1(SCMP_CMP_MASKED_EQ, LOW32, (scmp_datum_t)ioctls[i]));
  /* no signal on I/O sent to another process (F_SETOWN to the host with
     F_SETSIG SIGKILL kills it) */
  static const int fcntls[] = { F_SETOWN, F_SETOWN_EX, F_SETSIG };
  for (size_t i = 0; rc == 0 && i < sizeof fcntls / sizeof fcntls[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fcntl), 1,
                          SCMP_A1(SCMP_CMP_MASKED_EQ, LOW32, (scmp_datum_t)fcntls[i]));
  /* no lock on a file: the project is readable in the child, and a read
     descriptor is enough for flock(LOCK_EX), a POSIX or open-file read
     lock, or a lease, which the host then waits on (the file stores'
     flock with no timeout; a lease makes the host's open for writing wait
     lease-break-time). Nothing in the child takes one: Lua, lua-cjson,
     libcurl (no cookie jar or file it writes) and the C library's stdio
     lock in memory. F_GETLK only reads. fcntl64 is the same call on
     32-bit architectures, where F_SETLK64 and F_SETLKW64 are 13 and 14 */
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(flock), 0);
  static const int locks[] = {
    F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE,
#if __SIZEOF_LONG__ == 4
    13 /* F_SETLK64 */, 14 /* F_SETLKW64 */,
#endif
  };
  for (size_t i = 0; rc == 0 && i < sizeof locks / sizeof locks[0]; i++) {
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fcntl), 1,
                          SCMP_A1(SCMP_CMP_MASKED_EQ, LOW32, (scmp_datum_t)locks[i]));
#ifdef __NR_fcntl64
    if (rc == 0)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fcntl64), 1,
                            SCMP_A1(SCMP_CMP_MASKED_EQ, LOW32, (scmp_datum_t)locks[i]));
#endif
  }
  if (rc == 0) rc = prctl_rules(ctx);
  if (rc == 0) rc = host_socket_rules(ctx, host_socket);
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
  return rc;
}

static int filter(const sx_policy *p, int host_socket, char *err, size_t errlen) {
  /* valgrind knows prctl's way of loading a filter, not seccomp(2)'s */
  if (sx_under_valgrind()) seccomp_api_set(1);
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) {
    snprintf(err, errlen, "cannot make a seccomp filter (out of memory)");
    return -1;
  }
  int rc = rules(ctx, p, host_socket);
  if (rc == 0) rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc != 0) {
    snprintf(err, errlen, "cannot load the handler process's seccomp filter: %s", strerror(-rc));
    return -1;
  }
  return 0;
}

int sx_filter_export(const sx_policy *p, int host_socket, int fd) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return -1;
  int rc = rules(ctx, p, host_socket);
  if (rc == 0) rc = seccomp_export_bpf(ctx, fd);
  seccomp_release(ctx);
  return rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ no descriptor to the host */

/* SO_PASSRIGHTS is 83 in asm-generic/socket.h (Linux 6.16); Debian 12's
   headers lack it. alpha, mips, parisc and sparc number their options in
   their own socket.h: there the filter's rules alone hold */
#if !defined(SO_PASSRIGHTS) && !defined(__alpha__) && !defined(__mips__) && !defined(__hppa__) && !defined(__sparc__)
#define SO_PASSRIGHTS 83
#endif

int sx_refuse_rights(int fd) {
#ifdef SO_PASSRIGHTS
  int off = 0;
  return setsockopt(fd, SOL_SOCKET, SO_PASSRIGHTS, &off, sizeof off) == 0 ? 0 : -1;
#else
  (void)fd;
  return -1;
#endif
}

int sx_passrights(void) {
  static int known = -1;
  if (known < 0) {
    int sv[2];
    known = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0 && sx_refuse_rights(sv[0]) == 0;
    if (known) { close(sv[0]); close(sv[1]); }
  }
  return known;
}

/* The belt for kernels without SO_PASSRIGHTS: no sendmsg or sendmmsg (the
   only calls that carry SCM_RIGHTS) on the socket to the host, whose
   replies go by write(), and no copy of it to another number (dup, dup2,
   dup3, F_DUPFD, F_DUPFD_CLOEXEC). The kernel reads a descriptor as 32
   bits. Nothing else reaches the socket: pidfd_getfd and io_uring are
   refused, and /proc/self/fd/N does not open a socket */
static int host_socket_rules(scmp_filter_ctx ctx, int fd) {
  if (fd < 0) return 0;
  const int calls[] = { SCMP_SYS(sendmsg), SCMP_SYS(sendmmsg), SCMP_SYS(dup), SCMP_SYS(dup2), SCMP_SYS(dup3) };
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < sizeof calls / sizeof calls[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), calls[i], 1, SCMP_A0(SCMP_CMP_MASKED_EQ, LOW32, (scmp_datum_t)fd));
  static const int dups[] = { F_DUPFD, F_DUPFD_CLOEXEC };
  for (size_t i = 0; rc == 0 && i < sizeof dups / sizeof dups[0]; i++)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fcntl), 2,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, LOW32, (scmp_datum_t)fd),
                          SCMP_A1(SCMP_CMP_MASKED_EQ, LOW32, (scmp_datum_t)dups[i]));
  return rc;
}

/* ------------------------------------------------------------ the host's death */

/* The child dies with the thread that forked it (PR_SET_PDEATHSIG is tied
   to that thread, not to the host's process: the loader, or a worker of
   the pool, which live as long as the runtime), and the filter keeps it
   from clearing that. A host that died before the signal was set has
   already left the child with another parent. */
static int tie_to_host(pid_t host, char *err, size_t errlen) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    snprintf(err, errlen, "cannot set the handler process's parent-death signal: %s", strerror(errno));
    return -1;
  }
  if (getppid() != host) _exit(0);
  return 0;
}

/* ------------------------------------------------------------ the environment */

/* Whether the variable at name is one the policy lets through: all with
   allow_env; with the network, libcurl's proxy and certificate settings
   (luma.http follows them); with "os", TZ (os.date's zone). */
static int env_kept(const sx_policy *p, const char *name) {
  static const char *const network[] = {
    "http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY",
    "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", NULL,
  };
  if (p->allow_env) return 1;
  size_t n = strcspn(name, "=");
  if ((p->builtins & SX_OS) && n == 2 && strncmp(name, "TZ", 2) == 0) return 1;
  if (p->allow_network)
    for (const char *const *v = network; *v; v++)
      if (strlen(*v) == n && strncmp(name, *v, n) == 0) return 1;
  return 0;
}

/* Where the kernel's copy of the environment lies (the bytes
   /proc/self/environ shows): fields 50 and 51 of /proc/self/stat. */
static int environment_area(uintptr_t *start, uintptr_t *end) {
  char buf[4096];
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *p = strrchr(buf, ')');   /* the name before it may hold anything */
  if (!p) return -1;
  p++;
  for (int field = 3; field <= 51 && *p; field++) {
    while (*p == ' ') p++;
    if (field >= 50) *(field == 50 ? start : end) = (uintptr_t)strtoull(p, NULL, 10);
    while (*p && *p != ' ') p++;
  }
  return *end > *start ? 0 : -1;
}

/* Empties the environment of what the policy does not let through: the
   environ array, and the kernel's copy of the strings at the top of the
   stack, which /proc/self/environ reads (prctl(PR_SET_MM) would need
   CAP_SYS_RESOURCE: the bytes are zeroed in place). What is kept is copied
   out first. Strings the host's setenv made on the heap are left where they
   are, with the rest of the host's memory at the fork (a putenv'd string
   may be read-only). */
/* environ as valgrind's leak check sees it: it does not look at the C
   library's own variable */
static char **volatile kept_environment;

static int clear_environment(const sx_policy *p, char *err, size_t errlen) {
  if (p->allow_env) return 0;
  extern char **environ;
  size_t n = 0, kept = 0;
  for (char **e = environ; e && *e; e++) n++;
  char **keep = calloc(n + 1, sizeof *keep);
  for (size_t i = 0; keep && i < n; i++) {
    if (!env_kept(p, environ[i])) continue;
    if (!(keep[kept++] = strdup(environ[i]))) keep = NULL;   /* the child ends below */
  }
  if (!keep) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  /* valgrind's client runs on a stack of valgrind's making: the kernel's
     copy is valgrind's own */
  uintptr_t start = 0, end = 0;
  if (!sx_under_valgrind() && environment_area(&start, &end) != 0) {
    snprintf(err, errlen, "cannot find the handler process's environment (/proc/self/stat)");
    return -1;
  }
  if (end > start) memset((void *)start, 0, end - start);
  environ = kept_environment = keep;
  return 0;
}

/* ------------------------------------------------------------ the user namespace */

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A user namespace of its own, where the kernel allows one (unprivileged
   ones may be off: then nothing changes). The child keeps its user and
   group ids (each mapped to itself), but holds no capability over anything
   outside the namespace: a root host's child can no longer pass file
   permissions (CAP_DAC_OVERRIDE), change the machine or other users'
   processes. 1 when it is in one. */
static int enter_user_namespace(void) {
  if (sx_under_valgrind()) return 0;
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER) != 0) return 0;
  char map[64];
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
  int rc = write_file("/proc/self/uid_map", map);
  if (rc == 0) rc = write_file("/proc/self/setgroups", "deny");
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
  if (rc == 0) rc = write_file("/proc/self/gid_map", map);
  /* unmapped, the child would be nobody to the file system: worse than
     before for its own files, so a failed map ends it (it is not started) */
  return rc == 0 ? 1 : -1;
}

/* No capability left: the bounding set emptied (where the child may: it
   needs CAP_SETPCAP, which an unprivileged one lacks and then never gets),
   no ambient one, and none permitted, effective or inheritable. Without a
   user namespace a root host's child would keep root's over every file by
   path (Landlock does not see chown or chmod) and over its own limits. Done
   before the filter, which refuses the prctl and capset this needs. */
static int drop_capabilities(char *err, size_t errlen) {
  struct __user_cap_header_struct head = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capget, &head, data) != 0) {
    snprintf(err, errlen, "cannot read the handler process's capabilities: %s", strerror(errno));
    return -1;
  }
  int setpcap = (data[0].effective >> CAP_SETPCAP) & 1;
  for (int cap = 0; cap < 64 && prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
    if (setpcap && prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      snprintf(err, errlen, "cannot drop capability %d from the handler process's bounding set: %s", cap,
               strerror(errno));
      return -1;
    }
  /* ambient capabilities are Linux 4.3's: EINVAL before */
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    snprintf(err, errlen, "cannot clear the handler process's ambient capabilities: %s", strerror(errno));
    return -1;
  }
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &head, data) != 0) {
    snprintf(err, errlen, "cannot drop the handler process's capabilities: %s", strerror(errno));
    return -1;
  }
  return 0;
}

int sx_user_namespaces(void) {
  if (sx_under_valgrind()) return 0;
  static int known = -1;
  int ok = __atomic_load_n(&known, __ATOMIC_RELAXED);
  if (ok >= 0) return ok;
  /* Debian's switch, and the count every kernel has */
  char buf[32] = "";
  int fd = open("/proc/sys/kernel/unprivileged_userns_clone", O_RDONLY | O_CLOEXEC);
  ok = 1;
  if (fd >= 0) {
    if (read(fd, buf, sizeof buf - 1) > 0 && buf[0] == '0' && geteuid() != 0) ok = 0;
    close(fd);
  }
  fd = open("/proc/sys/user/max_user_namespaces", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    memset(buf, 0, sizeof buf);
    if (read(fd, buf, sizeof buf - 1) > 0 && buf[0] == '0') ok = 0;
    close(fd);
  }
  __atomic_store_n(&known, ok, __ATOMIC_RELAXED);
  return ok;
}

/* ------------------------------------------------------------ Landlock */

/* Landlock's interface (linux/landlock.h): Debian 12's headers (Linux 6.1)
   stop at its ABI 2, so the later rights are defined here, under names of
   their own. The kernel takes the whole attribute struct from any ABI, as
   long as what an older one does not know is zero. */
#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_RULE_PATH_BENEATH 1
#define LL_FS_EXECUTE (1ULL << 0)
#define LL_FS_WRITE_FILE (1ULL << 1)
#define LL_FS_READ_FILE (1ULL << 2)
#define LL_FS_READ_DIR (1ULL << 3)
#define LL_FS_MAKE_REG (1ULL << 8)
#define LL_FS_ABI1 ((1ULL << 13) - 1)    /* EXECUTE to MAKE_SYM */
#define LL_FS_REFER (1ULL << 13)         /* ABI 2 */
#define LL_FS_TRUNCATE (1ULL << 14)      /* ABI 3 */
#define LL_FS_IOCTL_DEV (1ULL << 15)     /* ABI 5 */
#define LL_FILE_RIGHTS (LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)
#define LL_NET_BIND_TCP (1ULL << 0)      /* ABI 4 */
#define LL_NET_CONNECT_TCP (1ULL << 1)
#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)   /* ABI 6 */
#define LL_SCOPE_SIGNAL (1ULL << 1)

struct ll_ruleset_attr {
  uint64_t handled_access_fs, handled_access_net, scoped;
};

struct ll_path_beneath {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

#define LL_READ (LL_FS_READ_FILE | LL_FS_READ_DIR)

int sx_landlock_abi(void) {
#ifdef SYS_landlock_create_ruleset
  /* asked once per process (and its forks): the kernel does not change */
  static int known = -1;
  int abi = __atomic_load_n(&known, __ATOMIC_RELAXED);
  if (abi >= 0) return abi;
  /* valgrind (3.19) knows no Landlock call, and says so at each */
  long got = sx_under_valgrind() ? 0 : syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
  abi = got > 0 ? (int)got : 0;
  __atomic_store_n(&known, abi, __ATOMIC_RELAXED);
  return abi;
#else
  return 0;
#endif
}

/* Grants access beneath path (a file: its file rights only); a path that
   does not exist is skipped. */
static int grant(int ruleset, const char *path, uint64_t access, uint64_t handled) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ENOTDIR || errno == EACCES ? 0 : -1;
  struct stat st;
  int rc = -1;
  if (fstat(fd, &st) == 0) {
    struct ll_path_beneath rule = { access & handled, fd };
    if (!S_ISDIR(st.st_mode)) rule.allowed_access &= LL_FILE_RIGHTS;
    rc = rule.allowed_access ? (int)syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &rule, 0) : 0;
  }
  close(fd);
  return rc;
}

/* The files a handler process may reach: the system's libraries and the
   files the C library reads after the fork (the loader's cache, the time
   zone; with the network, name resolution and certificates), /dev/null and
   the random devices, its own /proc entry, and the module's folders:
   readable, and the project's writable with "io". Nothing else: not the
   host's /proc entry, nor another device, nor the user's files. The domain
   also keeps it from tracing (or opening the memory of) any process
   outside it, and, from ABI 6, from signalling one or reaching an abstract
   Unix socket outside it; without the network, from TCP at all (ABI 4). */
static int landlock(const sx_confinement *c, int abi, char *err, size_t errlen) {
  const sx_policy *p = c->policy;
  struct ll_ruleset_attr attr = { LL_FS_ABI1, 0, 0 };
  if (abi >= 2) attr.handled_access_fs |= LL_FS_REFER;
  if (abi >= 3) attr.handled_access_fs |= LL_FS_TRUNCATE;
  if (abi >= 5) attr.handled_access_fs |= LL_FS_IOCTL_DEV;
  if (abi >= 4 && !p->allow_network) attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
  if (abi >= 6) attr.scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL;
  uint64_t fs = attr.handled_access_fs;
  int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
  if (rs < 0) {
    snprintf(err, errlen, "cannot make the handler process's Landlock ruleset (ABI %d): %s", abi, strerror(errno));
    return -1;
  }
  static const char *const system[] = { "/usr", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache",
                                        "/etc/localtime", "/dev/urandom", "/dev/random", "/proc/self", NULL };
  static const char *const network[] = { "/etc/nsswitch.conf", "/etc/resolv.conf", "/etc/hosts", "/etc/host.conf",
                                         "/etc/gai.conf", "/etc/services", "/etc/protocols", "/etc/ssl",
                                         "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/pki",
                                         "/etc/crypto-policies", "/etc/passwd", "/etc/group", NULL };
  int rc = grant(rs, "/dev/null", LL_FS_READ_FILE | LL_FS_WRITE_FILE | LL_FS_TRUNCATE, fs);
  for (const char *const *path = system; rc == 0 && *path; path++) rc = grant(rs, *path, LL_READ, fs);
  for (const char *const *path = network; rc == 0 && p->allow_network && *path; path++)
    rc = grant(rs, *path, LL_READ, fs);
  uint64_t project = LL_READ;
  if (p->builtins & SX_IO) project |= LL_FS_WRITE_FILE | LL_FS_MAKE_REG | LL_FS_TRUNCATE;
  if (rc == 0 && c->project_root) rc = grant(rs, c->project_root, project, fs);
  if (rc == 0 && c->dependency_root) rc = grant(rs, c->dependency_root, LL_READ, fs);
  if (rc != 0) {
    snprintf(err, errlen, "cannot add a Landlock rule in the handler process: %s", strerror(errno));
    close(rs);
    return -1;
  }
  if (syscall(SYS_landlock_restrict_self, rs, 0) != 0) {
    snprintf(err, errlen, "cannot enter the handler process's Landlock domain: %s", strerror(errno));
    close(rs);
    return -1;
  }
  close(rs);
  return 0;
}

/* What holds on this machine, layer by layer, as sentences; and what does
   not. The child checks each again when it confines itself, and fails to
   start if one that is there cannot be set. */
int sx_confine_layers(const char **holds, int max_holds, const char **missing, int max_missing, int *nmissing) {
  int n = 0, m = 0;
#define HOLDS(s) do { if (n < max_holds) holds[n++] = (s); } while (0)
#define MISSING(s) do { if (m < max_missing) missing[m++] = (s); } while (0)
  HOLDS("parent-death signal: the handler process dies with the host's thread that started it");
  HOLDS("environment: emptied but for what the policy lets through");
  HOLDS("descriptors: only the socket to the host, /dev/null, and a stderr pipe of its own, which the host relays "
        "(bounded, lines marked, control characters escaped); a session of its own (no controlling terminal)");
  HOLDS("capabilities: none (dropped before the filter, whatever the host's user)");
  if (sx_passrights())
    HOLDS("descriptors to the host: none (SO_PASSRIGHTS 0 on the host's end, and the filter refuses sendmsg on "
          "the child's end and copies of it)");
  else
    MISSING("SO_PASSRIGHTS (Linux 6.16): the host's end cannot refuse descriptors; the filter still refuses sendmsg "
            "on the child's end and copies of it");
  HOLDS("rlimits: no core dumps; RLIMIT_AS near max_memory_mb (not under a sanitizer or valgrind)");
  /* libseccomp asks the kernel once (seccomp(2) or prctl) */
  if (seccomp_api_get() >= 1 || sx_under_valgrind())
    HOLDS("seccomp: no exec, process, namespace, mount, ptrace; signals, limits and scheduling on itself only; no "
          "change to a file's mode, owner, times or xattrs; no terminal ioctl that changes one, no socket owner; no "
          "System V IPC, POSIX message queue or memfd; no file lock or lease; a call of another architecture "
          "(int $0x80, x32) ends the process");
  else
    MISSING("seccomp: this kernel has no seccomp filters; process isolation cannot start");
  if (sx_user_namespaces())
    HOLDS("user namespace: the same ids, but no capability outside it (a root host's child cannot pass file "
          "permissions); RLIMIT_NPROC bounds the child's tasks there (handler_max_tasks), but for a root host's "
          "child, which the kernel exempts");
  else
    MISSING("user namespace: the kernel allows none here; a root host's handler process is still root to the "
            "file system (its capabilities are dropped: it passes no permission, and the filter refuses chown and "
            "chmod), and shares the machine's IPC namespace (the filter refuses System V IPC); no bound on the "
            "child's tasks (RLIMIT_NPROC would count every task of the host's user)");
  static char cgroup_line[2 * SX_PIDS_PATH_MAX];
  const char *base = sx_pids_cgroup_base();
  if (base) {
    snprintf(cgroup_line, sizeof cgroup_line, "pids cgroup: the handler process's tasks bounded at handler_max_tasks "
             "whatever its uid (a cgroup of its own under %s, removed when it ends)", base);
    HOLDS(cgroup_line);
  } else if (geteuid() == 0) {
    MISSING("pids cgroup: this root host can make none (no pids controller it may write under: cgroup v1's pids "
            "hierarchy, or v2 with pids in its cgroup's subtree_control); the kernel does not apply RLIMIT_NPROC to "
            "uid 0, so nothing bounds a root host's handler process's tasks but the host's own cgroup");
  }
  int abi = sx_landlock_abi();
  if (abi >= 1) HOLDS("Landlock files: the system's libraries, /dev/null, and the module's folders only");
  if (abi >= 1) HOLDS("Landlock ptrace scoping: no /proc/<pid>/mem of the host or any process outside");
  if (abi >= 4) HOLDS("Landlock TCP: no connect or bind without allow_network");
  if (abi >= 6) HOLDS("Landlock signal and abstract-socket scoping");
  if (abi == 0)
    MISSING("Landlock: none (Linux 5.13 and later with landlock among the LSMs; not under valgrind): the "
            "handler process can open every file the host's user can, the host's /proc entry included");
  else if (abi < 6)
    MISSING("Landlock signal and abstract-socket scoping (ABI 6, Linux 6.12): the filter still refuses signals "
            "to other processes");
#undef HOLDS
#undef MISSING
  *nmissing = m;
  return n;
}

int sx_confine(const sx_confinement *c, char *err, size_t errlen) {
  const sx_policy *p = c->policy;
  if (tie_to_host(c->host, err, errlen) != 0) return -1;
  /* a session of its own, so no controlling terminal: the child can no
     longer make its group the host's terminal's foreground one (the host's
     next write would stop it) */
  if (setsid() < 0) {
    snprintf(err, errlen, "cannot start the handler process's session: %s", strerror(errno));
    return -1;
  }
  /* into its pids cgroup while it has the host's privileges */
  if (c->pids_cgroup && sx_pids_cgroup_enter(c->pids_cgroup) != 0) {
    snprintf(err, errlen, "cannot enter the handler process's pids cgroup %s: %s", c->pids_cgroup, strerror(errno));
    return -1;
  }
  if (clear_environment(p, err, errlen) != 0) return -1;
  int in_userns = enter_user_namespace();
  if (in_userns < 0) {
    snprintf(err, errlen, "cannot map the handler process's ids in its user namespace: %s", strerror(errno));
    return -1;
  }
  /* a bound on its tasks: threads are allowed, and with small stacks
     RLIMIT_AS does not bound how many, so a child could take every pid of
     the machine. RLIMIT_NPROC counts the tasks of the real uid in the
     user namespace (Linux 5.14), here the child's own, where the kernel
     enforces it for any uid but root's (a root host's child, mapped to 0,
     is exempt: its pids cgroup bounds it, where one could be made).
     Without a user namespace it would count every task of the host's
     user, the host's threads included, so it is not set there */
  if (in_userns > 0) {
    struct rlimit tasks = { LIM_HANDLER_MAX_TASKS, LIM_HANDLER_MAX_TASKS };
    if (setrlimit(RLIMIT_NPROC, &tasks) != 0) {
      snprintf(err, errlen, "cannot bound the handler process's tasks: %s", strerror(errno));
      return -1;
    }
  }
  /* an IPC namespace of its own where it may (in its user namespace, or
     with a root host's capabilities): System V objects and POSIX message
     queues of its own, none of the machine's. Where it may not, the filter
     still refuses them all */
  (void)unshare(CLONE_NEWIPC);
  /* in a user namespace the capabilities reach only inside it; dropped
     there too, as nothing after this needs them */
  if (drop_capabilities(err, errlen) != 0) return -1;
  /* a crash is reported by its signal; a core image of the host's whole
     address space would only take time and disk */
  struct rlimit none = { 0, 0 };
  setrlimit(RLIMIT_CORE, &none);
  if (limit_memory(p, c->copy_bytes, err, errlen) != 0) return -1;
  /* Landlock without privileges needs it; the filter sets it too */
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    snprintf(err, errlen, "cannot set no_new_privs in the handler process: %s", strerror(errno));
    return -1;
  }
  int abi = sx_landlock_abi();
  if (abi > 0 && landlock(c, abi, err, errlen) != 0) return -1;
  return filter(p, c->host_socket, err, errlen);
}

#else /* LuaJIT and Lua 5.1: no policy, so no isolation (core/lmodule.c) */
int sx_refuse_rights(int fd) {
  (void)fd;
  return -1;
}

int sx_passrights(void) {
  return 0;
}

int sx_landlock_abi(void) {
  return 0;
}

int sx_user_namespaces(void) {
  return 0;
}

int sx_confine_layers(const char **holds, int max_holds, const char **missing, int max_missing, int *nmissing) {
  (void)holds; (void)max_holds;
  *nmissing = 0;
  if (max_missing > 0) {
    missing[0] = "process isolation needs Lua 5.4";
    *nmissing = 1;
  }
  return 0;
}

int sx_filter_export(const sx_policy *p, int host_socket, int fd) {
  (void)p; (void)host_socket; (void)fd;
  return -1;
}

int sx_confine(const sx_confinement *c, char *err, size_t errlen) {
  (void)c;
  snprintf(err, errlen, "process isolation needs Lua 5.4");
  return -1;
}
#endif
