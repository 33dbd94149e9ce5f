/*
 * The runtime: what calls share. Its worker pool (made once, at the first
 * handler that runs on it), the completion a host loop waits on (a file
 * descriptor that turns readable when a handler finished), and the calls in
 * flight. One runtime serves many programs.
 *
 * The drivers that step calls, and rt_close, are in drive.h.
 *
 * Threads: the runtime belongs to the thread that owns its home Lua state;
 * every function here is called from it. Workers only run handlers (in the
 * modules' own states) and report back through rt_complete.
 */
#ifndef LUMA_RUNTIME_H
#define LUMA_RUNTIME_H

#include <lua.h>

#include "pool.h"
#include "transport.h"

struct cl_call;

/* Work the runtime steps besides calls (an ask and its exchanges with a
   model): rt_poll steps it until step returns 1, then calls release; rt_close
   calls cancel, then steps it to its end. */
typedef struct rt_task {
  int (*step)(struct rt_task *t, long long *wait_ms);   /* 1: done; else *wait_ms (-1: the descriptor) */
  void (*cancel)(struct rt_task *t);
  void (*release)(struct rt_task *t);
  struct rt_task *next;
} rt_task;

typedef struct rt_runtime rt_runtime;

typedef struct rt_options {
  int workers;                    /* threads of the pool; <= 0: the number of CPUs */
} rt_options;

/* A runtime whose calls keep their values in threads of `home`. NULL with a
   message in err on failure. */
rt_runtime *rt_new(lua_State *home, const rt_options *o, char *err, size_t errlen);
void rt_retain(rt_runtime *rt);
void rt_unref(rt_runtime *rt);
int rt_closed(const rt_runtime *rt);
lua_State *rt_home(const rt_runtime *rt);
int rt_workers(const rt_runtime *rt);
/* on (RT_INLINE): a started call's first attempt runs its handler on the
   thread that starts it, until the handler returns or waits (a wait resumes
   on the pool); RT_INLINE_SLICE: the same, but a handler still running
   after its first slice (SX_PROMOTE_NS of Lua, sx_call_opts.hand_off) goes
   on on the pool too, so that a thread serving a loop is held for no longer;
   off (the default): every handler runs on the pool. */
enum { RT_INLINE = 1, RT_INLINE_SLICE = 2 };
void rt_set_inline(rt_runtime *rt, int on);
int rt_inline_starts(const rt_runtime *rt);

/* The descriptor a host loop polls for reading: it turns readable when a
   handler finished. rt_poll clears it. */
int rt_fd(const rt_runtime *rt);


/* For a host that can only connect to a path (nginx's cosockets): a Unix
   stream socket, listening at a new path (in a folder of its own, 0700,
   under $TMPDIR or /tmp) written to `path`. Once the host connected, the
   next rt_drain accepts the connection and removes the path; from then on,
   every time the descriptor is made readable, a byte is written to the
   connection (the host reads them). A new call replaces the socket and the
   connection. 0, or -1 with a message in err. */
int rt_wake_socket(rt_runtime *rt, char *path, size_t len, char *err, size_t errlen);

/* Waits until a handler finished or timeout_ms passed (< 0: no limit). */
void rt_wait_fd(rt_runtime *rt, long long timeout_ms);

/* Adds a task to those rt_poll steps. */
void rt_add_task(rt_runtime *rt, rt_task *t);
/* Makes the descriptor readable: any thread (a transfer's end, say). */
void rt_notify(rt_runtime *rt);
/* The runtime's HTTP transport (provider requests), made at the first use;
   NULL with a message in err when it cannot be made. */
tp_transport *rt_transport(rt_runtime *rt, char *err, size_t errlen);

/* For the drivers (drive.h): hands a prepared job to the pool (or runs it
   here); runs it on this thread. */
int rt_submit(rt_runtime *rt, struct cl_call *c);
void rt_run_here(rt_runtime *rt, struct cl_call *c);
/* A handler that runs on the driver's thread, inline (attempt.c): on tells
   rt_cancel_job that its state may be interrupted, off that it may not. */
void rt_inline(rt_runtime *rt, struct cl_call *c, int on);
/* The sx_call_opts progress function of c's handler (ud: c): keeps the
   report (a message cut to 255 bytes, at a character's start) and makes the
   runtime's descriptor readable. Any thread. */
void rt_progress(void *ud, double n, double total, const char *message, size_t len);
/* The last report of c: its count (0: none; then nothing else is set). */
unsigned rt_progress_read(rt_runtime *rt, struct cl_call *c, double *n, double *total, char *msg, size_t msglen,
                          int *has_msg);
/* Puts c, if the runtime polls it, in the queue of calls rt_poll steps
   next, and makes the descriptor readable: what ends a wait of c (a state
   freed, a transfer's end). Any thread. */
void rt_wake(rt_runtime *rt, struct cl_call *c);
/* Cancels c (cl_cancel): any thread. */
void rt_cancel_job(rt_runtime *rt, struct cl_call *c);
/* For the pool's workers: the job of c finished. */
void rt_complete(rt_runtime *rt, struct cl_call *c);
/* Moves the finished jobs' calls to their "handler done" state. */
void rt_drain(rt_runtime *rt);

/* The depth of calls started from inside handlers running on this thread,
   bounded so that a handler calling tools recursively cannot exhaust the C
   stack. */
int rt_enter(rt_runtime *rt);
void rt_leave(rt_runtime *rt);

#endif
