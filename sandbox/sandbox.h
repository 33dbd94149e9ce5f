/*
 * Tool modules and the Lua states they run in.
 *
 * Every tool module gets a Lua state of its own, created here; the host
 * never shares a state with a handler. Values cross between states only by
 * copying in C (sx_copy). A state is used by one thread at a time: each
 * module holds a mutex that sx_call takes for the length of a call.
 */
#ifndef LUMA_SANDBOX_H
#define LUMA_SANDBOX_H

#include <stddef.h>

#include <lua.h>

typedef struct sx_module sx_module;

/* Where a module comes from and what it may use (a tool_modules entry). */
typedef struct sx_manifest {
  const char *path;               /* the file, already resolved */
  const char *integrity;          /* "sha256-<base64>" or NULL */
  const char *const *dependencies;    /* modules `require` may load; NULL: no list */
  int ndependencies;
  const char *dependency_root;    /* where they are read from (resolved); NULL: next to the module */
  const char *project_root;       /* dependency_root may not leave it */
} sx_manifest;

/* Limits on values copied between states. */
typedef struct sx_limits {
  int max_depth;
  size_t max_values;              /* tables, strings and scalars counted together */
  size_t max_bytes;               /* string bytes */
} sx_limits;

void sx_default_limits(sx_limits *lim);

/* Loads and runs the module file in a new state, and finds its exports:
   `lumaTools`, else `tools`, else `default`, else the returned table; every
   value must be a function. NULL with a message in err on failure. */
sx_module *sx_load(const sx_manifest *m, char *err, size_t errlen);
void sx_free(sx_module *m);

/* The exported tool names, in sorted order. Valid until sx_free. */
const char *const *sx_exports(const sx_module *m, int *n);

/* How one handler call runs. */
typedef struct sx_call_opts {
  const char *tool;               /* the tool's name, for messages */
  long long timeout_ms;           /* the deadline, or <= 0 for none */
  sx_limits limits;
} sx_call_opts;

/*
 * Calls the export `name` as handler(input, signal, needs). The input (at
 * index `input` of L) and needs (index `needs`, or 0 for an empty table) are
 * copied into the module's state; on success the result is copied back and
 * pushed on L, and 0 is returned. On failure a structured error is pushed on
 * L and -1 returned: the handler's luma.ToolError with its fields, TOOL_TIMEOUT
 * when the deadline passed (also for a handler that ignores its signal),
 * TOOL_FAILED for any other error, TOOL_OUTPUT_INVALID for a result that
 * cannot be copied. L must be the calling thread's state.
 */
int sx_call(sx_module *m, const char *name, lua_State *L, int input, int needs, const sx_call_opts *o);

/*
 * The same call in phases, for running handlers on other threads:
 *   sx_prepare  (the host's thread) locks the module and copies each run's
 *               input (index `input` of L) and needs (index, or 0) into it;
 *   sx_execute  (any thread, one at a time) runs the prepared calls in order;
 *   sx_collect  (the host's thread) pushes a run's result or error on L,
 *               returning 0 or -1 as sx_call does;
 *   sx_release  (the host's thread) clears the module's stack and unlocks it.
 * L is only touched by sx_prepare and sx_collect.
 */
typedef struct sx_run {
  const char *name;               /* the export to call */
  int input, needs;               /* indices in L */
  sx_call_opts opts;
  /* filled by the phases */
  const char *failed_code;        /* set when preparing failed */
  char failed[300];
  int fn, input_slot, needs_slot, result_slot;
  int status, expired, out_of_memory;
} sx_run;

int sx_prepare(sx_module *m, lua_State *L, sx_run *runs, int n);
void sx_execute(sx_module *m, sx_run *runs, int n);
int sx_collect(sx_module *m, lua_State *L, const sx_run *run);
void sx_release(sx_module *m);

/*
 * Copies the value at index idx of `from` onto the top of `to`, reading raw
 * (no metamethod runs). JSON-like values only: nil, booleans, numbers,
 * strings, null, and tables of them with string or integer keys. Returns 0,
 * or -1 with a reason in err (then nothing is pushed on `to`).
 */
int sx_copy(lua_State *from, int idx, lua_State *to, const sx_limits *lim, char *err, size_t errlen);

/* The handler-side `luma` table (ToolError, null) in a state of a module, and
   the check whether a value raised there is a luma.ToolError. */
void sx_open_luma(lua_State *L);
int sx_is_tool_error(lua_State *L, int idx);

#endif
