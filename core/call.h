/*
 * A tool call as an object. It is made from a program (pipeline.h), a tool
 * and an optional agent-method scope; it owns its values and holds counted
 * references to the program, the scope and the module it uses, so that
 * closing any of them while it is in flight is safe.
 *
 * cl_step advances it through the pipeline (SPEC §3) and never blocks: it
 * returns when the call is done, when it waits for a handler (its own, or
 * the one of the call whose run it shares), or when it waits until a time
 * (a retry's backoff, a busy idempotency key, a busy module). Any driver can
 * step it: program:call and the CLI block on it (rt_drive), a host loop polls
 * it (rt_poll).
 *
 * Threads: a call belongs to the thread that owns its runtime's home state,
 * except for cl_cancel, which any thread may call.
 */
#ifndef LUMA_CALL_H
#define LUMA_CALL_H

#include <stddef.h>

struct ak_ask;
struct pl_program;
struct pl_scope;
struct pm_tool;

#ifndef LUMA_CL_CALL_T
#define LUMA_CL_CALL_T
typedef struct cl_call cl_call;
#endif

typedef enum { CL_DONE, CL_WAIT_HANDLER, CL_WAIT_TIMER } cl_status;

/* A new call of tool t of pg (scope may be NULL), with no input yet: the
   binding puts it (lcall.h), or cl_set_input_json. NULL with a message in
   err when memory runs out or the program is closed. */
cl_call *cl_new(struct pl_program *pg, const struct pm_tool *t, struct pl_scope *scope, char *err, size_t errlen);
/* The input as JSON text; -1 with a reason in err when it is not JSON. */
int cl_set_input_json(cl_call *c, const char *json, size_t len, char *err, size_t errlen);

/* Advances the call as far as it can go now. For CL_WAIT_TIMER, *wait_ms
   says how long from now (on the program's clock). */
cl_status cl_step(cl_call *c, long long *wait_ms);
/* Whether a step of c now would leave it where it is (its handler runs, its
   leader is not done, no state of its module was freed for it), told
   without a protected call: rt_poll passes such a call by. now_ms: the
   monotonic clock, read once for the whole walk. *timer_ms: how long until
   its timer is due, or -1 (it waits for the descriptor). */
int cl_idle(const cl_call *c, long long now_ms, long long *timer_ms);

/* Cancels the call: its handler's signal fires (signal.reason "cancelled")
   and it ends with TOOL_CANCELLED. Any thread; idempotent; no effect on a
   call that is done. */
void cl_cancel(cl_call *c);

/* Marks the call as one the model of ask asked for: its event names the
   ask, and the ask's durable run (journal.h; NULL or "": none); a built-in
   tool's handler reads the ask. */
void cl_set_ask(cl_call *c, struct ak_ask *ask, const char *ask_id, const char *run_id);
/* A person approved the call (a durable run's decision): tool_policy
   approval asks no one. */
void cl_set_approved(cl_call *c);

int cl_done(const cl_call *c);
/* 1 when the call is done and succeeded. */
int cl_ok(const cl_call *c);

/* Drops a reference a driver (rt_start) or a follower took. */
void cl_release(cl_call *c);

/* Releases the caller's reference. A call whose handler is still running
   is cancelled and freed when the handler returns. */
void cl_free(cl_call *c);

#endif
