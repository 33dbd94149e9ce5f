/*
 * A program made ready to run: its model and validation binding, the
 * handlers registered for its tools, its stores (cache, idempotency), its
 * sinks (on_event, trace), its clock and the host's callbacks (approval,
 * lookup). Calls (call.h) are made from one of these.
 *
 * It lives in the runtime's home Lua state and is used from the thread that
 * owns that state. It is counted: the Lua program, each scope and each call
 * in flight hold a reference, so closing the program while calls or scopes
 * still use it is safe.
 */
#ifndef LUMA_PIPELINE_H
#define LUMA_PIPELINE_H

#include <stdio.h>

#include <lua.h>

#include "errors.h"
#include "program.h"
#include "sandbox.h"
#include "validate.h"

struct id_store;
struct rc_recorder;
struct rc_replay;
struct rt_runtime;
struct cl_call;

enum { PL_NONE, PL_MODULE, PL_HOST, PL_BUILTIN };

/* The handler of a built-in tool (pm_tool.builtin): C, run on the call's
   thread like a host handler, its input validated at CV_INPUT. It pushes
   the result and returns 0, or pushes an error (st_fail) and returns -1. */
typedef int (*pl_builtin)(lua_State *T, struct cl_call *c);

typedef struct pl_program {
  int refs;
  int closed;                 /* the Lua program was closed (pl_close): no new calls */
  struct rt_runtime *rt;      /* counted */
  lua_State *L;               /* the runtime's home state */
  pm_program *p;
  lv_program *v;
  int *kind;                  /* by tool index: PL_NONE, PL_MODULE, PL_HOST, or PL_BUILTIN
                                 (pm_program.discover, at index ntools) */
  pl_builtin discover;        /* the handler of pm_program.discover, once registered */
  sx_module **module;         /* by tool index, for PL_MODULE (counted) */
  sx_module **claimed;        /* each module of `module` once: the program's claims (sx_claim),
                                 given back by pl_close */
  int nclaimed;
  int anchor;                 /* registry ref of a table holding the program's Lua values:
                                 host handlers, contexts, cache, clock, on_event, approve, lookup */
  FILE *trace;                /* telemetry as JSON lines, or NULL */
  struct rc_recorder *record; /* the model exchanges are written there, or NULL */
  struct jr_journal *journal; /* durable asks' records (journal.h), or NULL */
  long long journal_lease_ms; /* a durable ask's lease on its run; 0: LIM_JOURNAL_LEASE_MS */
  struct rc_replay *replay;   /* the model exchanges are served from there (no network), or NULL */
  struct id_store *idem;      /* the idempotency store */
  struct id_store *cache;     /* cache_store: the cache shared across processes, or NULL (the anchor's table) */
  long long cache_ttl_ms;     /* how long its entries live */
  long long default_timeout_ms;
  sx_limits limits;
  int has_clock;              /* anchor.clock = { now = fn, sleep = fn } replaces the real one */
  int has_sink;               /* anchor.on_event is a function */
  int has_approve;            /* anchor.approve(tool, agent) decides tool_policy approval */
  int has_lookup;             /* anchor.lookup(name) replaces the process environment */
  struct cl_call *active;     /* calls in flight, for single flight */
  struct cl_call *spare;      /* calls done, kept for reuse (linked by pg_next) */
  int nspare;
} pl_program;

/* An agent method call in progress: the circuit breaker counts its failures.
   It is counted too (its Lua userdata and the calls made in it), and holds
   a reference to its program. */
typedef struct pl_scope {
  int refs;
  pl_program *pg;
  const pm_agent *agent;      /* NULL for calls outside an agent */
  int failures;
} pl_scope;

/* Makes the program ready to run in rt (whose home state is L), taking
   ownership of p and v. NULL when memory runs out (p and v are then freed). */
pl_program *pl_new(struct rt_runtime *rt, pm_program *p, lv_program *v);
void pl_retain(pl_program *pg);
void pl_unref(pl_program *pg);
/* The Lua program was closed: no new calls, and the tool modules no other
   open program attached keep no idle state (sx_unclaim): their handler
   processes end now, or when the call in flight that holds one is done.
   Once; pl_unref does it too. */
void pl_close(pl_program *pg);

/* A new scope of agent ag of pg, or NULL when memory runs out. */
pl_scope *pl_scope_new(pl_program *pg, const pm_agent *ag);
void pl_scope_retain(pl_scope *sc);
void pl_scope_unref(pl_scope *sc);

/* Registers a handler: a function of the home state (at index fn of L) or a
   tool module (retained, and claimed once by the program). Returns -1 when
   the tool already has one, -2 when memory runs out. */
int pl_register_host(lua_State *L, pl_program *pg, const pm_tool *t, int fn);
int pl_register_module(pl_program *pg, const pm_tool *t, sx_module *m);
/* Registers the handler of the built-in tool t (the ask registers the
   discovery tool's, askptools.h): -1 when it has one. */
int pl_register_builtin(pl_program *pg, const pm_tool *t, pl_builtin fn);

/* Pushes anchor[key] on L (any thread of the home state) and returns its type. */
int pl_push_anchor(lua_State *L, pl_program *pg, const char *key);

/* The program's clocks, in milliseconds: wall time (for records that outlive
   the process) and a monotonic one (for durations and deadlines); and a
   sleep, which a controllable clock turns into a jump of its time. L is a
   thread of the home state. */
long long pl_wall_ms(lua_State *L, pl_program *pg);
long long pl_mono_ms(lua_State *L, pl_program *pg);
void pl_sleep_ms(lua_State *L, pl_program *pg, long long ms);

/* The host's lookup (credentials, needs): pushes the value of `name` as a
   string, or nil, and returns it (valid while it is on the stack). */
const char *pl_lookup(lua_State *L, pl_program *pg, const char *name);

/* After a memory error in the protected step of a call or an ask, whose
   values on T (nvalues of them) are lost with it: T gets nvalues again, the
   one at `slot` an error of `code` saying "<what>: <the error>". */
void pl_lost_values(lua_State *T, int nvalues, int slot, le_code code, const char *what);

#endif
