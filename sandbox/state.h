/* The lowest layer of sandbox/: one lua_State with its counting allocator,
   the deadline hook, the stop (TOOL_TIMEOUT) and the signal a handler gets.
   It knows nothing of modules, policies or libraries. */
#ifndef LUMA_SANDBOX_STATE_H
#define LUMA_SANDBOX_STATE_H

#include "sandbox.h"

/* How long a handler runs under the count hook, at its shortest interval,
   before the hook hands it to the deadline watch (call.c, state.c). */
#define SX_PROMOTE_NS 20000LL

/* One Lua state. Its allocator's user data points here, which is how a hook
   or a C function running in the state finds it. A state is used by one
   thread at a time: the one that acquired it. */
struct sx_state {
  sx_module *module;              /* the owner (module.c); opaque here */
  lua_State *L;
  int busy;                       /* acquired: a thread runs or prepares a call in it (guarded by
                                     the owner's lock) */
  /* calls suspended in a wait (signal:sleep) that live on as coroutines of
     this state; a state with residents that may not serve new calls (it is
     broken, its module closed or unclaimed) leaves the module's list and
     goes when the last of them leaves (guarded by the owner's lock) */
  int residents;
  /* suspended calls waiting for this state to be free to resume (sx_waiter
     with want: this state); guarded by the owner's lock */
  sx_waiter *wait_head, *wait_tail;
  int *dropped;                   /* registry refs of abandoned residents' coroutines, unreferenced
                                     by the next holder (guarded by the owner's lock) */
  int ndropped, capdropped;
  sx_run *run;                    /* the call running now, NULL between calls (atomic: the
                                     signal handler and a canceller read it) */
  int broken;                     /* hit a limit during its last call: replaced, not reused */
  size_t memory;                  /* bytes the state holds now */
  size_t memory_limit;            /* 0: none */
  int out_of_memory;              /* an allocation was refused during this call */
  long long deadline_ns;          /* monotonic; 0 while no call runs */
  int expired;                    /* the deadline passed during this call */
  int cancelled;                  /* sx_interrupt: read and written atomically, from any thread */
  long long hook_ns;              /* when the deadline hook last looked at the clock */
  int hook_pinned;                /* its interval no longer grows during this call */
  /* a call still running at promote_ns (its start + SX_PROMOTE_NS; 0:
     never) is handed by the hook to promote (sx_watch_arm, set by call.c,
     since state.c knows nothing of the watch) and runs on with no hook */
  long long promote_ns;
  int (*promote)(struct sx_state *s);
  const char *tool;               /* the tool being called, for messages */
  long long timeout_ms;
  const struct sx_call_opts *opts;  /* the running call's, for signal:progress; NULL between calls */
  size_t printed;                 /* bytes print wrote during this call */
  int exports_ref;                /* registry ref of the handler table (module.c) */
  int signal_ref;                 /* registry ref of the signal object */
  int needs_ref;                  /* registry ref of the empty needs table (call.c), LUA_NOREF: none yet */
  /* a finished call's coroutine, kept for the next call (call.c): making
     one, its registry ref and its collection were a tenth of a direct call */
  lua_State *spare_co;
  int spare_ref;                  /* its registry ref; LUA_NOREF: none */
  int base;                       /* stack top before the prepared calls */
  /* the deadline watch (watch.c), while a handler runs without a hook */
  int watched;                    /* armed: no hook until a stop is due */
  int watch_slot;                 /* its slot (guarded by the watch's lock), -1: none */
  lua_State *current;             /* the Lua thread running now (atomic: the signal handler reads it) */
  int stopping;                   /* the signal handler set the stop's hook (atomic) */
  struct sx_child *child;         /* process isolation: L is a mirror holding copies only (isolate.c) */
};

/* Whether the state's running call was interrupted (sx_interrupt): the
   state's flag (a process-isolated state) or the call's. */
static inline int sx_cancelled(const sx_state *s) {
  if (__atomic_load_n(&s->cancelled, __ATOMIC_ACQUIRE)) return 1;
  const sx_run *run = __atomic_load_n(&s->run, __ATOMIC_ACQUIRE);
  return run && __atomic_load_n(&run->cancelled, __ATOMIC_ACQUIRE);
}

/* A bare state: the counting allocator (memory_limit bytes, 0: none), no
   library yet, no hook. NULL with a message in err. */
sx_state *sx_state_new(size_t memory_limit, char *err, size_t errlen);
/* Closes the state (its pending __close handlers get a deadline too). */
void sx_state_free(sx_state *s);
sx_state *sx_state_of(lua_State *L);
/* Makes now what every state's setup makes once per process (the stop
   wrappers' chunk): before a fork, so that a child never waits on a
   once-flag another thread of its parent held. */
void sx_state_prime(void);

/* Raises TOOL_TIMEOUT when the running call's deadline passed: for the
   loops of library functions, which the instruction hook does not see. */
void sx_tick(lua_State *L);

/* (Re)starts the deadline hook of the Lua thread L of s (its main thread,
   or a call's coroutine) at its shortest interval: when the state is made
   and at the start of each slice of a call. */
void sx_start_hook(sx_state *s, lua_State *L);

/* Lets the coroutine of a call that will not resume go (call.c), by the
   thread that holds s. */
void sx_drop_call(sx_state *s, sx_run *run);

#if LUA_VERSION_NUM >= 504
/* The coroutine a call runs as (call.c): its function, to be called with
   the handler and its three arguments, which returns the status of the
   handler's protected call and its result or error. */
int sx_call_body(lua_State *L);
#endif

/* In the signal handler, on the thread running s: when s's call passed its
   deadline or was cancelled, sets the hook that raises the stop on the Lua
   thread running now (and on the state's main thread). Async-signal-safe as
   lua.c's use of lua_sethook is. */
void sx_stop_now(sx_state *s);

/* Marks the call as stopped at its deadline and pushes its TOOL_TIMEOUT
   error; sx_raise_timeout raises it. */
void sx_push_timeout(lua_State *L);
int sx_raise_timeout(lua_State *L);

/* What every state gets, once its libraries are open (raise on error: call
   them protected): `print` to stderr, bounded per call; the wrappers that
   keep a stop from being swallowed (pcall, xpcall, coroutine.resume, close,
   wrap); the signal object a handler receives (signal_ref). */
void sx_open_print(lua_State *L);
void sx_open_stop(lua_State *L);
void sx_open_signal(lua_State *L);

#endif
