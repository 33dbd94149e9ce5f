/* MCP servers as tool sources, over stdio: a server is a child process the
   runtime starts, speaks to one JSON-RPC message per line (mcp.h's framing)
   and reaps. Lua-free; the protocol (initialize, tools/list, tools/call) is
   lua/luma/mcpclient.lua, the binding lmcpclient.c.

   The child is forked and execs at once, in a process group of its own (a
   server started through npx is a tree of processes: the group is stopped
   as one), with the parent-death signal set (a host that dies takes its
   servers with it), stdin on a socket (a write to a server that died is
   an error, not SIGPIPE), stdout on a pipe, stderr on /dev/null (a
   server's logs; a flood of them cannot fill a pipe nobody reads) and no
   other descriptor of the host. Every wait is bounded by a deadline, so a
   server that hangs, floods or dies costs its caller the time it was given,
   and nothing more. */
#ifndef LUMA_MCPCLIENT_H
#define LUMA_MCPCLIENT_H

#include <stddef.h>
#include <sys/types.h>

#include "mcp.h"

typedef struct mcc_server {
  pid_t pid;                  /* 0 once reaped */
  int in;                     /* its stdin (we write) */
  int out;                    /* its stdout (we read) */
  mcp_reader r;
  int status;                 /* waitpid's, once reaped */
  int reaped;
} mcc_server;

enum { MCC_LINE = 1, MCC_TOO_BIG, MCC_EOF, MCC_TIMEOUT, MCC_ERROR };

/* Starts argv[0] (looked up in PATH when it has no '/'; a relative path
   is from cwd) with argv and the host's environment, in cwd (NULL: the
   host's). 0, or -1 with a reason in err (the command not found, not
   executable, no process). */
int mcc_start(mcc_server *s, const char *const *argv, const char *cwd, size_t max_message, char *err, size_t errlen);
/* Writes line (no newline inside) and a newline by deadline (CLOCK_MONOTONIC
   ms, mcc_now_ms). 0, or MCC_TIMEOUT / MCC_ERROR (err says why). */
int mcc_send(mcc_server *s, const char *line, size_t len, long long deadline, char *err, size_t errlen);
/* The next line the server wrote, waiting until deadline: MCC_LINE (*line,
   *n valid until the next call), MCC_TOO_BIG (a line past max_message, its
   bytes dropped), MCC_EOF (its stdout closed: it exited), MCC_TIMEOUT, or
   MCC_ERROR with err. */
int mcc_next(mcc_server *s, const char **line, size_t *n, long long deadline, char *err, size_t errlen);
/* Stops it: its stdin closed, grace_ms to exit; then SIGTERM to its group
   and grace_ms more; then SIGKILL; reaped in every case. Safe twice. */
void mcc_stop(mcc_server *s, int grace_ms);
/* 1 while the process runs; 0 once it exited (it is reaped then). */
int mcc_alive(mcc_server *s);
/* The server's exit, once stopped or found dead: "exited with status N",
   "killed by signal N", into out. */
void mcc_status(const mcc_server *s, char *out, size_t n);
long long mcc_now_ms(void);

#endif
