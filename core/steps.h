/*
 * What the call's state machine (call.c) and the units of the pipeline's
 * steps share: the call itself, and one function per step. Each step unit
 * owns one concern of SPEC §3:
 *
 *   policy.c      1-5   registry, credential, scope, tool_policy (deny_write, approval)
 *   call.c        6     input validation (one call of the validator)
 *   needs.c       7     needs, resolved through the host's lookup
 *   cache.c       8     the cache, and single flight between calls in flight
 *   idempotent.c  9, 12 idempotency claims, replays and records
 *   attempt.c     10    the handler's attempts, retries and backoff
 *   output.c      11    output validation, typed errors
 *   breaker.c     12    the circuit breaker of an agent method call
 *   telemetry.c   12    the one event per call
 *
 * A step runs on the call's own thread T (a thread of the runtime's home
 * state), inside the protected call cl_step makes, where the call's values
 * sit at the fixed stack indices CV_*. A step that fails stores its error in
 * CV_VALUE (st_fail) and returns -1.
 */
#ifndef LUMA_STEPS_H
#define LUMA_STEPS_H

#include <lua.h>

#include "call.h"
#include "errors.h"
#include "pipeline.h"
#include "pool.h"
#include "runtime.h"

/* Drops the caller's or a follower's reference (call.c). */
void cl_release(cl_call *c);
/* Frees a spare call for good. */
void cl_destroy(lua_State *L, cl_call *c);

/* The states of a call, in the order a call passes them. */
enum {
  CS_START,         /* steps 1-7 to come */
  CS_LOOKUP,        /* steps 8-9: cache, single flight, idempotency */
  CS_CACHE_WAIT,    /* another process computes the same cached call (cache_store): look again at wake_at */
  CS_IDEM_WAIT,     /* another call of this process or machine holds the key: retry at wake_at */
  CS_FOLLOW,        /* shares the run of `leader` */
  CS_RUN,           /* an attempt is due */
  CS_STATE_WAIT,    /* every state of the module is busy: retry at wake_at */
  CS_HANDLER,       /* the handler runs on the pool (job_out), or is ready to (job_ready) */
  CS_BACKOFF,       /* the next attempt is due at wake_at */
  CS_FINISH,        /* the outcome is known: steps 11-12 to come */
  CS_END,           /* breaker and telemetry */
  CS_DONE
};

/* The call's values on its thread's stack during a step. */
enum { CV_INPUT = 1, CV_NEEDS, CV_CKEY, CV_IKEY, CV_VALUE, CV_WARN, CV_SCOPE, CV_COUNT = CV_SCOPE };

typedef struct st_event {
  int attempts;
  int cache_hit;
  int single_flight;
  int idempotent_replay;
} st_event;

struct cl_call {
  int refs;                       /* the caller's, the runtime's while it is polled, followers' */
  rt_runtime *rt;
  pl_program *pg;                 /* counted */
  pl_scope *scope;                /* counted, or NULL */
  const pm_tool *t;
  lua_State *T;                   /* the call's own thread; registry ref tref */
  int tref;
  int state;
  int ok;                         /* CV_VALUE is the result (1) or the error (0) */
  int cancelled;                  /* read and written atomically */
  int stepping;
  st_event ev;
  long long start, timeout, deadline, wake_at;    /* the program's monotonic clock, ms */
  long long queued_at;            /* when it began waiting for a state of its module, or 0 */
  /* step 8, with a cache_store: the entry this call computes (claimed in
     the store: cache_held), keyed by the hash of CV_CKEY */
  int cache_held;
  char chash[65];
  /* step 9: the claim taken, settled in step 12 */
  int held;
  char hash[65];
  char *ikey;
  size_t ikeylen;
  /* single flight */
  cl_call *leader;                /* CS_FOLLOW: counted */
  /* step 10: the handler's job */
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
  int job_ready, job_out, job_done;   /* job_out and job_done are guarded by the runtime's lock */
  int *gate;                      /* handlers of its batch running now (rt_drive), or NULL */
  int gate_limit;
  /* lists */
  cl_call *pg_next, *pg_prev;     /* the program's calls in flight */
  cl_call *rt_next;               /* the runtime's polled calls */
  cl_call *done_next;             /* the runtime's finished jobs */
  int polled;
  int inline_ok;                  /* a lone blocking call: its handler runs inside the step */
  int hold;                       /* stop at CS_RUN: rt_drive looks every call up before any runs */
  char ask_id[32];                /* the ask whose model made the call, or "" */
};

/* Stores an error of the call's tool in CV_VALUE and marks the call failed;
   each returns -1. st_fail: a message of its own (fmt is a printf format);
   st_fail_fixed: the code's message in the catalogue (errors.h), filled with
   the arguments; st_fail_msg: one of the catalogue's fixed messages. */
int st_fail(lua_State *T, cl_call *c, le_code code, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 4, 5)))
#endif
  ;
int st_fail_fixed(lua_State *T, cl_call *c, le_code code, ...);
int st_fail_msg(lua_State *T, cl_call *c, le_msg msg, ...);
/* Takes the value on top as the call's error (adding the tool's name). */
int st_fail_top(lua_State *T, cl_call *c);
/* Takes the value on top as the call's result. */
void st_ok_top(lua_State *T, cl_call *c);
/* The code and retryable flag of the error at index e, read raw. */
const char *st_error_code(lua_State *T, int e);
int st_error_retryable(lua_State *T, int e);
/* Stores the error of a failed validation, with this code. */
int st_fail_validation(lua_State *T, cl_call *c, le_code code, const lv_result *r);

/* policy.c: steps 1 to 5; and the error of a tool whose module was closed. */
int st_permissions(lua_State *T, cl_call *c);
int st_module_closed(lua_State *T, cl_call *c);
/* needs.c: step 7; CV_NEEDS gets the needs table, or stays nil. */
int st_needs(lua_State *T, cl_call *c);
/* cache.c: step 8. The key goes to CV_CKEY (nil when the tool is not cached
   or the input has no key); 1 when the call now follows another, or got a
   cache hit (CV_VALUE holds it), 0 to go on. */
int st_cache_lookup(lua_State *T, cl_call *c);
void st_cache_store(lua_State *T, cl_call *c);
/* Lets a cache_store entry this call claimed go, unfilled. */
void st_cache_release(cl_call *c);
/* idempotent.c: step 9 (1: replayed or following; 0: claim held; -1:
   failed), waiting (CS_IDEM_WAIT) is set here; step 12's settlement. */
int st_idem_lookup(lua_State *T, cl_call *c);
int st_idem_begin(lua_State *T, cl_call *c);
int st_idem_settle(lua_State *T, cl_call *c, int result);
/* attempt.c: step 10. */
long long st_effective_timeout(const cl_call *c);
void st_attempt(lua_State *T, cl_call *c);
void st_collect(lua_State *T, cl_call *c);
void st_job_run(wp_job *job);
/* Gives back the state of a job that was made ready but never ran. */
void st_abandon(cl_call *c);
/* output.c: step 11, and the copy a follower gets. */
void st_finish(lua_State *T, cl_call *c);
void st_follow(lua_State *T, cl_call *c, cl_call *leader);
/* breaker.c */
int st_breaker_open(lua_State *T, cl_call *c);
void st_count_failure(lua_State *T, cl_call *c);
/* telemetry.c */
void st_emit(lua_State *T, cl_call *c);
/* Sends the event at index e to the program's sinks (on_event, trace). */
void st_publish(lua_State *T, pl_program *pg, int e);
/* What the runtime has to tell the host that is no call's outcome (a
   recording it cannot write, a corrupt store it replaced): an event
   { kind = "warning", message } to the same sinks. The library never
   writes to the host's stderr itself. */
void st_warn(lua_State *T, pl_program *pg, const char *message);

#endif
