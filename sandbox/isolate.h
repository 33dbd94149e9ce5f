/* Process isolation (isolate.c): a state of a module whose policy says
   "isolation": "process" is a mirror state in the host, holding only copied
   values, and a child process that holds the module's real state. module.c
   and call.c use this; isolate.c uses module.c's composition in the child. */
#ifndef LUMA_SANDBOX_ISOLATE_H
#define LUMA_SANDBOX_ISOLATE_H

#include <limits.h>
#include <sys/types.h>

#include "sandbox.h"

typedef struct sx_child sx_child;

/* A new state of m whose handlers run in a new child process, ready (its
   module loaded) within deadline_ns (0: the load budget). NULL with a
   message in err. */
sx_state *sx_spawn(sx_module *m, long long deadline_ns, char *err, size_t errlen);
/* Kills (SIGKILL) and reaps s's child, closes its descriptors. */
void sx_child_end(sx_state *s);
/* sx_execute for a state with a child: sends each prepared run, waits for
   its reply until the deadline plus the policy's kill_grace_ms, or a cancel;
   kills the child that does not answer. */
void sx_remote_execute(sx_state *s, sx_run *runs, int n);
/* Wakes the wait of sx_remote_execute (the call was cancelled). Any thread. */
void sx_remote_poke(sx_state *s);

/* call.c: whether a handler may raise an error with this code (capitals,
   digits, underscores, at most SX_CODE_MAX, not one of the runtime's). */
int sx_handler_code_ok(const char *code, size_t len);

/* module.c, for the child: a state of m made in this process (the module's
   code run, its exports found), within deadline_ns. */
sx_state *sx_compose(sx_module *m, long long deadline_ns, char *err, size_t errlen);
const sx_policy *sx_policy_of(const sx_module *m);
/* m's file, resolved. */
const char *sx_path_of(const sx_module *m);
/* The folders m's handlers read: the project's, and its dependencies' (NULL
   when m has no dependency list). */
void sx_roots_of(const sx_module *m, const char **project, const char **dependencies);
/* The exports a child found, when m has none yet (its first state):
   0, or -1 when memory runs out. Takes the strings. */
int sx_adopt_exports(sx_module *m, char **names, int n);

/* What confines a handler process. */
typedef struct sx_confinement {
  const sx_policy *policy;
  size_t copy_bytes;              /* the largest value a copy may hold */
  pid_t host;                     /* the host's pid, taken before the fork */
  const char *project_root;       /* readable (writable with "io"); NULL: none */
  const char *dependency_root;    /* readable; NULL: none */
  int host_socket;                /* the child's end of the socket to the host */
  const char *pids_cgroup;        /* the child's pids cgroup (sx_pids_cgroup_make); NULL: none */
} sx_confinement;

/* confine.c: the child's backstops, before it runs any code of the module:
   it dies with the host (and is ended now if the host already died); the
   environment emptied of what the policy does not let through; a user
   namespace of its own where the kernel allows one; RLIMIT_AS
   (its address space now, plus the memory limit, plus room for copies of
   copy_bytes); a Landlock domain where the kernel has one (files, other
   processes, signals, abstract sockets, TCP without the network); and a
   seccomp filter refusing execve, new processes and namespaces, mounts,
   what reaches another process, and new sockets unless the policy allows
   the network. */
int sx_confine(const sx_confinement *c, char *err, size_t errlen);

/* confine.c: the handler process's seccomp filter for policy p (its
   socket to the host host_socket, this process as itself), as the
   classic BPF program the kernel runs, written to fd: what spec/c's
   test_confine runs on calls no kernel here can make (another
   architecture's). 0, or -1. */
int sx_filter_export(const sx_policy *p, int host_socket, int fd);

/* pids.c: a pids cgroup of its own for a new child (its folder, to
   pass in sx_confinement and to sx_pids_cgroup_remove once the child is
   reaped), with pids.max at LIM_HANDLER_MAX_TASKS; NULL where this host
   can make none (sx_pids_cgroup_base is NULL). Before the fork. */
#define SX_PIDS_PATH_MAX PATH_MAX
char *sx_pids_cgroup_make(void);
void sx_pids_cgroup_remove(char *dir);
/* The child moves itself into dir (with the host's privileges still). 0, or -1. */
int sx_pids_cgroup_enter(const char *dir);
/* The folder where this host makes them (its own cgroup in the hierarchy
   with the pids controller, writable), or NULL. Looked for once. */
const char *sx_pids_cgroup_base(void);

/* confine.c: the host's end fd of a socket to a child takes no descriptor
   (SO_PASSRIGHTS 0, Linux 6.16): a descriptor sent with it is refused at
   the child's sendmsg (EPERM). 0, or -1 where the kernel has no such
   option (the child's filter then refuses sendmsg on its end, and copies
   of it). */
int sx_refuse_rights(int fd);
/* Whether this kernel has SO_PASSRIGHTS (asked once). */
int sx_passrights(void);

/* Whether this process runs under valgrind (its preload is mapped), looked
   at once, at run time: valgrind does not know every call the confinement
   makes, and its heap shares the address space RLIMIT_AS limits. Asked in
   the host before a fork, the answer is there for the child. */
int sx_under_valgrind(void);

#endif
