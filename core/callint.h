/*
 * What the parts of a tool call share: the call's record. call.c moves it
 * from state to state; the step units (steps.h lists them) read it and
 * return a verdict (verdict.h); the runtime's drivers hand its job to the
 * pool; lcall.c puts its input in and takes its outcome out. Types only: no
 * unit's functions are declared here.
 *
 * A step runs on the call's own thread T (a thread of the runtime's home
 * state), inside the protected call cl_step makes, where the call's values
 * sit at the fixed stack indices CV_*.
 */
#ifndef LUMA_CALLINT_H
#define LUMA_CALLINT_H

#include <lua.h>

#include "pool.h"
#include "sandbox.h"

struct ak_ask;
struct pl_program;
struct pl_scope;
struct pm_tool;
struct rt_runtime;

#ifndef LUMA_CL_CALL_T
#define LUMA_CL_CALL_T
typedef struct cl_call cl_call;   /* call.h's opaque handle */
#endif

/* The states of a call, in the order a call passes them. */
enum {
  CS_START,         /* STEP_REGISTRY to STEP_NEEDS to come (steps.h) */
  CS_LOOKUP,        /* STEP_CACHE and STEP_IDEMPOTENCY: cache, single flight, idempotency */
  CS_CACHE_WAIT,    /* another process computes the same cached call (cache_store): look again at wake_at */
  CS_IDEM_WAIT,     /* another call of this process or machine holds the key: retry at wake_at */
  CS_FOLLOW,        /* shares the run of `leader` */
  CS_RUN,           /* an attempt is due (STEP_RUN) */
  CS_STATE_WAIT,    /* every state of the module is busy: retry when woken (waiter), or give up at wake_at */
  CS_HANDLER,       /* the handler runs on the pool (job_out), or is ready to (job_ready) */
  CS_SUSPENDED,     /* the handler waits (signal:sleep) in its state (sx), holding no thread:
                       it resumes at wake_at, or when woken (waiter) once its state is free */
  CS_BACKOFF,       /* the next attempt is due at wake_at */
  CS_FINISH,        /* the outcome is known: STEP_OUTPUT and STEP_RECORD's writes to come */
  CS_STORE_WAIT,    /* the idempotency store cannot be reached to store the result: try again at wake_at */
  CS_END,           /* STEP_RECORD's breaker and telemetry */
  CS_DONE
};

/* The call's values on its thread's stack during a step. */
/* CV_TAGS: a table of the caller's fields for the call's telemetry event
   (program:start's opts.tags), or nil */
enum { CV_INPUT = 1, CV_NEEDS, CV_CKEY, CV_IKEY, CV_VALUE, CV_WARN, CV_SCOPE, CV_TAGS, CV_COUNT = CV_TAGS };

typedef struct st_event {
  int attempts;
  int cache_hit;
  int single_flight;
  int idempotent_replay;
} st_event;

struct cl_call {
  int refs;                       /* the caller's, the runtime's while it is polled, followers' */
  struct rt_runtime *rt;
  struct pl_program *pg;          /* counted */
  struct pl_scope *scope;         /* counted, or NULL */
  const struct pm_tool *t;
  lua_State *T;                   /* the call's own thread; registry ref tref */
  int tref;
  int state;
  int ok;                         /* CV_VALUE is the result (1) or the error (0) */
  int cancelled;                  /* read and written atomically */
  int stepping;
  st_event ev;
  long long start, timeout, deadline, wake_at;    /* the program's monotonic clock, ms */
  long long queued_at;            /* when it began waiting for a state of its module, or 0 */
  /* STEP_CACHE, with a cache_store: the entry this call computes (claimed in
     the store: cache_held), keyed by the hash of CV_CKEY */
  int cache_held;
  char chash[65];
  /* STEP_IDEMPOTENCY: the claim taken, settled in STEP_RECORD */
  int held;
  int claim_lost;                 /* the store's renewal lost the claim: read and written atomically */
  /* CS_IDEM_WAIT: the store's watch (wakes the call when a claim ends), on
     the store it was started on; iwoken is read and written atomically */
  struct id_watch *iwatch;
  struct id_store *iwatch_store;
  int iwoken;
  long long iwait_ms;             /* the next look is this long after the last (doubling) */
  char hash[65];
  char *ikey;
  size_t ikeylen;
  /* single flight */
  cl_call *leader;                /* CS_FOLLOW: counted */
  /* STEP_RUN: the handler's job */
  wp_job job;
  sx_module *module;              /* counted while a state is held, or being made */
  sx_state *sx;
  /* a module's new state is made by a job too (its code may take a while to
     load): the job writes `made` and `make_why`, the driver reads them once
     the job is done */
  int making;
  long long make_deadline_ns;
  sx_state *made;
  char make_why[200];
  sx_run run;
  /* CS_STATE_WAIT: in the queue of `waits` (counted), which wakes it when a
     state is free */
  sx_waiter waiter;
  sx_module *waits;
  int job_ready, job_out, job_done;   /* job_out and job_done are guarded by the runtime's lock */
  int inline_run;                     /* the handler runs inline, on the driver's thread: the same lock */
  int *gate;                      /* handlers of its batch running now (rt_drive), or NULL */
  int gate_limit;
  /* lists */
  cl_call *pg_next, *pg_prev;     /* the program's calls in flight */
  cl_call *rt_next, *rt_prev;     /* the runtime's polled calls */
  cl_call *done_next;             /* the runtime's finished jobs */
  int polled;                     /* written under the runtime's ready_lock */
  /* drive.c, for a polled call: its place in the runtime's ready queue
     (guarded by ready_lock; ready_seq: when it was put there), in its
     timers (heap_at: its index + 1, 0: none) or in its list of calls
     stepped at every poll (in_rest: 1 rest, 2 rest_todo, 0: neither) */
  cl_call *ready_next, *ready_prev;
  int in_ready;
  unsigned long long ready_seq;
  int heap_at;
  cl_call *rest_next, *rest_prev;
  int in_rest;
  int inline_ok;                  /* its handler runs inside the step: 1 a lone blocking call,
                                     2 a start of a runtime with rt_set_inline (not for a
                                     process-isolated module, whose waits would block) */
  int hold;                       /* stop at CS_RUN: rt_drive looks every call up before any runs */
  char ask_id[32];                /* the ask whose model made the call, or "" */
  struct ak_ask *ask;             /* that ask, which outlives the call (it frees it), or NULL:
                                     what a built-in tool's handler reads and records */
  char run_id[64];                /* its durable run (journal.h), or "" */
  int person_approved;            /* a person approved it (a durable run's decision): policy asks no one */
  /* the handler's last signal:progress (rt_progress; guarded by the
     runtime's lock): prog_seq counts the reports, 0: none yet */
  unsigned prog_seq;
  double prog_n, prog_total;      /* prog_total < 0: none */
  int prog_has_msg;
  char prog_msg[256];
};

#endif
