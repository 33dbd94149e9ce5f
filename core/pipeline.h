/*
 * The tool pipeline: the one C entry every tool call goes through (direct
 * calls of programs, host calls, and later the model's native calls), with
 * the twelve steps of SPEC.md §3 in their order.
 *
 * A runtime belongs to one program bound to one Lua state (the host's); it is
 * used from the thread that owns that state.
 */
#ifndef LUMA_PIPELINE_H
#define LUMA_PIPELINE_H

#include <stdio.h>

#include <lua.h>

#include "program.h"
#include "validate.h"
#include "sandbox.h"

struct id_store;

enum { PL_NONE, PL_MODULE, PL_HOST };

typedef struct pl_runtime {
  pm_program *p;
  lv_program *v;
  int *kind;                  /* by tool index: PL_NONE, PL_MODULE or PL_HOST */
  sx_module **module;         /* by tool index, for PL_MODULE */
  int anchor;                 /* registry ref of a table holding the runtime's Lua values:
                                 modules, host handlers, contexts, cache, sinks, clock */
  FILE *trace;                /* telemetry as JSON lines, or NULL */
  struct id_store *idem;      /* the idempotency store */
  int own_idem;
  long long default_timeout_ms;
  sx_limits limits;
  int has_clock;              /* anchor.clock = { now = fn, sleep = fn } replaces the real one */
  int has_sink;               /* anchor.on_event is a function */
} pl_runtime;

/* An agent method call in progress: the circuit breaker counts its failures. */
typedef struct pl_scope {
  const pm_agent *agent;      /* NULL for calls outside an agent */
  int failures;
} pl_scope;

/* Makes the runtime of p (bound to L as v). NULL when memory runs out. */
pl_runtime *pl_new(lua_State *L, pm_program *p, lv_program *v);
void pl_free(lua_State *L, pl_runtime *rt);

/* Registers a handler: a function of the host state (at index fn) or an
   export of a loaded module. Returns -1 when the tool already has one. */
int pl_register_host(lua_State *L, pl_runtime *rt, const pm_tool *t, int fn);
int pl_register_module(lua_State *L, pl_runtime *rt, const pm_tool *t, sx_module *m, int module_idx);

/*
 * Calls tool t with the input at index `input` of L. On success pushes the
 * result and a metadata table { warnings, attempts, cache_hit,
 * idempotent_replay } and returns 0; on failure pushes the structured error
 * and returns -1. scope may be NULL.
 */
int pl_call(lua_State *L, pl_runtime *rt, pl_scope *scope, const pm_tool *t, int input);

/*
 * Calls several tools at once, as a model's turn does: the handlers of
 * different modules run in parallel on threads (up to `concurrency` modules
 * at a time), and calls with the same cache key or the same idempotency key
 * share one execution (single flight). The inputs are stack indices. Pushes
 * a list of { ok = true, result, meta } or { ok = false, error }.
 */
int pl_call_all(lua_State *L, pl_runtime *rt, pl_scope *scope, const pm_tool *const *tools, const int *inputs, int n,
                int concurrency);

/* The runtime's clocks, in milliseconds: wall time (for records that outlive
   the process) and a monotonic one (for durations and deadlines). */
long long pl_wall_ms(lua_State *L, pl_runtime *rt);
long long pl_mono_ms(lua_State *L, pl_runtime *rt);

#endif
