/* The drivers of calls (drive.c), over a runtime (runtime.h). Threads: the
   thread that owns the runtime's home state. */
#ifndef LUMA_DRIVE_H
#define LUMA_DRIVE_H

#include "runtime.h"

struct cl_call;

/* Cancels every call in flight and waits for the handlers running on the
   pool to stop; later calls fail. Idempotent. */
void rt_close(rt_runtime *rt);

/* Steps every call started with rt_start that can move, without blocking.
   Returns the number of those calls still in flight, and in *wait_ms how
   long the host may sleep (-1: until the descriptor turns readable) before
   calling again. */
int rt_poll(rt_runtime *rt, long long *wait_ms);

/* Calls rt_poll, sleeping on the descriptor between steps, until
   done(arg, active) (active: what rt_poll returned) or timeout_ms passes
   (< 0: none; 0: one step). Returns whether done said so: the wait of
   call:wait, ask:wait, runtime:wait and their poll. */
int rt_poll_until(rt_runtime *rt, int (*done)(void *arg, int active), void *arg, long long timeout_ms);

/* Adds a call to those rt_poll steps (the runtime holds a reference until
   it is done and collected). */
void rt_start(rt_runtime *rt, struct cl_call *c);
/* rt_start without the wake-up, for a call that rt_kick steps at once
   (lr_start: a call done at its first step costs no write to the
   descriptor) */
void rt_track(rt_runtime *rt, struct cl_call *c);
/* Steps c alone, as far as it goes now (its job to the pool when it has
   one): a start that costs the same however many calls are in flight. */
void rt_kick(rt_runtime *rt, struct cl_call *c);

/* Drives the given calls to their end, blocking this thread: the driver of
   program:call, call_all and the CLI. At most `concurrency` of their handlers
   run at once (<= 0: no limit beyond the pool); a lone handler with nothing
   else to wait for runs on this thread. */
void rt_drive(rt_runtime *rt, struct cl_call **calls, int n, int concurrency);

#endif
