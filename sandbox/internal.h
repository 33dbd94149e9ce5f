/* What the files of sandbox/ share: a module is a pool of states, each
   state one lua_State with its limits and the call in progress. */
#ifndef LUMA_SANDBOX_INTERNAL_H
#define LUMA_SANDBOX_INTERNAL_H

#include <pthread.h>

#include "sandbox.h"

/* One Lua state of a module. Its allocator's user data points here, which
   is how a hook or a C function running in the state finds it. A state is
   used by one thread at a time: the one that acquired it. */
struct sx_state {
  sx_module *module;
  lua_State *L;
  int busy;                       /* acquired (guarded by the module's lock) */
  int broken;                     /* hit a limit during its last call: replaced, not reused */
  size_t memory;                  /* bytes the state holds now */
  size_t memory_limit;            /* 0: none */
  int out_of_memory;              /* an allocation was refused during this call */
  long long deadline_ns;          /* monotonic; 0 while no call runs */
  int expired;                    /* the deadline passed during this call */
  long long hook_ns;              /* when the deadline hook last looked at the clock */
  int hook_pinned;                /* its interval no longer grows during this call */
  const char *tool;               /* the tool being called, for messages */
  long long timeout_ms;
  size_t printed;                 /* bytes print wrote during this call */
  int exports_ref;                /* registry ref of the export table */
  int signal_ref;                 /* registry ref of the signal object */
  int base;                       /* stack top before the prepared calls */
};

/* A module: where it comes from, what it may use, and its states. */
struct sx_module {
  pthread_mutex_t lock;           /* guards states, nstates and busy flags */
  pthread_cond_t freed;           /* a state became free */
  char *path, *source;
  size_t source_len;
  char **dependencies;            /* NULL: no allowlist */
  int ndependencies;
  char *dependency_root, *project_root;
  sx_policy policy;
  int has_policy;
  char **exports;                 /* sorted */
  int nexports;
  sx_state **states;
  int nstates;
  int making;                     /* states being made outside the lock */
};

/* Raises TOOL_TIMEOUT when the running call's deadline passed: for the
   loops of library functions, which the instruction hook does not see. */
void sx_tick(lua_State *L);

/* A new state of m, with the module's code loaded and its exports checked
   (the first time) or found, within deadline_ns (0: the load budget only).
   NULL with a message in err. */
sx_state *sx_state_new(sx_module *m, long long deadline_ns, char *err, size_t errlen);
void sx_state_free(sx_state *s);
sx_state *sx_state_of(lua_State *L);

/* Pushes the metatable of the state's luma.ToolError values. */
void sx_push_tool_error_mt(lua_State *L);

/* (Re)starts the deadline hook of the state's main thread at its shortest
   interval: at the start of each call. */
void sx_start_hook(sx_state *s);

/* Marks the call as stopped at its deadline and pushes its TOOL_TIMEOUT
   error; sx_raise_timeout raises it. */
void sx_push_timeout(lua_State *L);
int sx_raise_timeout(lua_State *L);

/* The libraries of a strict state, then (once everything is in place) its
   read-only library tables and hidden string metatable; after the module's
   code ran, its locked globals (strict.c). */
void sx_open_strict(lua_State *L, const sx_module *m);
void sx_freeze_strict(lua_State *L);
void sx_lock_globals(lua_State *L);
/* The library functions every state gets in a bounded form: text-only
   `load`, and those whose loops run in C (bounded.c, pattern.c). */
void sx_open_bounded(lua_State *L);
/* Runs the module's code in a new state and keeps its exports. */
int sx_module_run(sx_module *m, sx_state *s, long long deadline_ns, char *err, size_t errlen);
/* Loads text, never a binary chunk, in slices, checking the state's
   deadline between them (bounded.c): Lua's parser is quadratic on some
   inputs. */
int sx_load_text(lua_State *L, const char *text, size_t len, const char *chunkname);
/* The searcher that replaces all others when a module lists dependencies. */
int sx_dependency_searcher(lua_State *L);

#endif
