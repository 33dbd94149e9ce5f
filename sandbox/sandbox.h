/*
 * Tool modules and the Lua states they run in.
 *
 * Every tool module gets Lua states of its own, created here; the host never
 * shares a state with a handler. Values cross between states only by copying
 * in C (sx_copy). A module is a pool of up to max_concurrency states; a call
 * acquires one, and a state is used by one thread at a time.
 */
#ifndef LUMA_SANDBOX_H
#define LUMA_SANDBOX_H

#include <stddef.h>

#include <lua.h>

typedef struct sx_module sx_module;
typedef struct sx_state sx_state;

/* What a strict state may use besides its safe base (allow_builtins). */
enum { SX_OS = 1 << 0, SX_IO = 1 << 1, SX_JSON = 1 << 2, SX_CRYPTO = 1 << 3 };

/* tool_module_policy of luma.config.json. */
typedef struct sx_policy {
  int strict;                     /* sandbox: "strict" */
  unsigned builtins;              /* SX_* */
  int allow_env;
  int allow_network;
  size_t memory_limit;            /* bytes; 0: none */
  int max_concurrency;            /* states per module, >= 1 */
  int isolation;                  /* SX_ISOLATE_* */
  int kill_grace_ms;              /* process isolation: past the deadline, then SIGKILL */
} sx_policy;

/* Where a module's handlers run: in states of this process, on the
   runtime's worker threads (the default), or each state in a child process
   of its own (isolate.c), which a kill can stop whatever it does. */
enum { SX_ISOLATE_THREAD = 0, SX_ISOLATE_PROCESS = 1 };
#define SX_KILL_GRACE_MS 100

/* Where a module comes from and what it may use (a tool_modules entry). */
typedef struct sx_manifest {
  const char *path;               /* the file, already resolved */
  const char *integrity;          /* "sha256-<base64>" or NULL */
  const char *const *dependencies;    /* modules `require` may load; NULL: no list */
  int ndependencies;
  const char *dependency_root;    /* where they are read from (resolved) */
  const char *project_root;       /* files a strict module may open stay inside it (resolved) */
  const sx_policy *policy;        /* NULL: no policy, no sandbox */
} sx_manifest;

/* Limits on values copied between states. */
typedef struct sx_limits {
  int max_depth;
  size_t max_values;              /* tables, strings and scalars counted together */
  size_t max_bytes;               /* string bytes */
  int finite_numbers;             /* refuse NaN and infinities (error details: no validation follows) */
  long long deadline_ns;          /* sx_copy: monotonic; past it the copy stops (0: none) */
} sx_limits;

void sx_default_limits(sx_limits *lim);

/* Monotonic time in nanoseconds. */
long long sx_now_ns(void);
/* How many pairs a walk of values that may be hostile (sx_copy, the wire
   decoder) takes between two readings of its deadline's clock: inserting
   keys that all collide costs the square of their number. */
#define SX_CLOCK_EVERY 256

/* Loads the module: reads the file (checking its integrity), makes its first
   state and finds its exports: `lumaTools`, else `tools`, else `default`, else
   the returned table; every value must be a function. NULL with a message in
   err on failure. */
sx_module *sx_load(const sx_manifest *m, char *err, size_t errlen);
void sx_free(sx_module *m);

/* Counted references: sx_load gives one; the module is freed at zero.
   sx_close marks it closed: no more states are handed out. */
void sx_retain(sx_module *m);
void sx_unref(sx_module *m);
void sx_close(sx_module *m);
int sx_closed(const sx_module *m);
/* Claims: the open programs that attached the module (each once). When
   the last is closed (sx_unclaim to 0), the idle states end at once (a
   process-isolated one's process killed and reaped), and a state released
   while there is no claim ends too; a new claim makes states again as
   calls need them. */
void sx_claim(sx_module *m);
void sx_unclaim(sx_module *m);
/* A call that waits for a free state of a module, in the module's queue
   (first in, first woken): when a state is released, or the room to make one
   comes back, the first waiter leaves the queue, `woken` is set and wake(w)
   runs, on the releasing thread, with the module's lock held (it must only
   signal: rt_notify). The waiter's owner keeps it alive while it is queued. */
typedef struct sx_waiter {
  void (*wake)(struct sx_waiter *w);
  sx_state *want;                 /* the state it waits for (a suspended call's own), NULL: any */
  struct sx_waiter *next, *prev;  /* the module's queue: guarded by its lock */
  int queued;                     /* guarded by the module's lock */
  int woken;                      /* woken and not yet looked: read and written atomically */
} sx_waiter;

/* A free state, or NULL; *may_make says the caller may make one (sx_make).
   With w, a NULL without *may_make from a module still open leaves w queued
   (it stays where it was if it already was), anything else leaves it out of
   the queue; either way the wake it had is spent. */
sx_state *sx_try_acquire(sx_module *m, int *may_make, sx_waiter *w, char *err, size_t errlen);
/* Takes w out of the queue (a call that stops waiting); a wake it had and
   did not spend goes to the next waiter. */
void sx_unwait(sx_module *m, sx_waiter *w);
/* Whether w was woken and has not looked again yet (any thread). */
int sx_woken(const sx_waiter *w);
sx_state *sx_make(sx_module *m, long long deadline_ns, char *err, size_t errlen);
/* Gives back the right to make a state that sx_try_acquire gave, unused. */
void sx_unmake(sx_module *m);
/* Stops the call `run` of state s, as cancelled, if it is running (any
   thread); a call suspended in s sees it when it resumes. */
struct sx_run;
void sx_interrupt(sx_state *s, struct sx_run *run);

/* Whether the module's handlers run in processes of their own. */
int sx_isolated(const sx_module *m);

/* The exported tool names, in sorted order. Valid until sx_free. */
const char *const *sx_exports(const sx_module *m, int *n);

/* How many states the module has, how many are running a call, and the
   bytes the idle ones hold (a busy state's count is its thread's alone). */
void sx_stats(sx_module *m, int *states, int *busy, size_t *idle_memory);

/* A free state of the module, made (within deadline_ns) when there are fewer
   than max_concurrency; when all are busy and `wait` is set, waits until one
   is free or deadline_ns (monotonic, 0: no limit) passes; NULL then, or at
   once without `wait`. sx_release gives it back; a state that hit its memory
   limit or deadline is closed instead, to be replaced. */
sx_state *sx_acquire(sx_module *m, long long deadline_ns, int wait, char *err, size_t errlen);
void sx_release(sx_state *s);

/*
 * Waiting without a thread. A handler that waits (signal:sleep) in a call
 * whose opts.may_wait is set yields: sx_execute returns with run->waiting
 * set and run->wake_ns the monotonic time its wait ends (at the latest:
 * the deadline ends it sooner), and the call lives on as a coroutine of its
 * state, a resident. The caller gives the state back with sx_suspend (it
 * may run other calls meanwhile), and, once the wait is over, takes that
 * same state again with sx_try_acquire_state, then runs sx_execute on the
 * same run again: it resumes where it waited. A call that will not resume
 * (cancelled, or past its deadline while it waited) is let go with
 * sx_abandon: its coroutine is dropped without running again.
 */
void sx_suspend(sx_state *s);
/* s for the suspended call, if it is free now; else NULL, and w waits in
   the module's queue for it (woken when s is released). */
sx_state *sx_try_acquire_state(sx_state *s, sx_waiter *w);
/* The suspended call `run` of s ends without running again (any moment
   the caller does not hold s; s goes if it was its last resident). */
void sx_abandon(sx_state *s, struct sx_run *run);

/* How one handler call runs. */
typedef struct sx_call_opts {
  const char *tool;               /* the tool's name, for messages */
  long long timeout_ms;           /* the deadline, or <= 0 for none */
  sx_limits limits;
  /* the handler's signal:progress(n [, total [, message]]), told on the
     thread running it (total < 0: none; message NULL: none); NULL: ignored */
  void (*progress)(void *ud, double n, double total, const char *message, size_t len);
  void *progress_ud;
  /* a wait (signal:sleep) suspends the call instead of blocking its thread
     (see sx_suspend); 0: it blocks, as in a handler process */
  int may_wait;
  /* a luma.http request suspends the call too when this is set: wake(ud)
     runs on the transport's I/O thread when its transfer ended (it must only
     mark the call and signal: rt_notify); NULL: requests block */
  void (*wake)(void *ud);
  void *wake_ud;
  /* the run is inline on a thread that serves others (an event loop): a
     handler still running after SX_PROMOTE_NS yields there, when it runs in
     its own coroutine with no C call in between, and sx_execute returns
     with run->handed_off set; the caller, still holding the state, runs
     sx_execute on the same run again (elsewhere, this flag off) and it goes
     on where it stopped. Elsewhere (a coroutine of the handler's own, a
     callback of a C function) it runs on here until it is back in its own
     coroutine, where it yields then. 0: it runs to its end */
  int hand_off;
} sx_call_opts;

/*
 * A handler call in phases, so that the run can happen on another thread:
 *   sx_prepare  (the host's thread) copies each run's input (index `input` of
 *               L) and needs (index, or 0) into the acquired state;
 *   sx_execute  (any thread, one at a time) runs the prepared calls in order;
 *   sx_collect  (the host's thread) pushes a run's result, or its structured
 *               error, on L and returns 0 or -1.
 * The handler is export `name` called as handler(input, signal, needs). Errors
 * are the handler's luma.ToolError with its fields, TOOL_TIMEOUT when the
 * deadline passed (also for a handler that ignores its signal),
 * TOOL_MEMORY_LIMIT, TOOL_FAILED for anything else, and TOOL_OUTPUT_INVALID
 * for a result that cannot be copied. L is only touched by sx_prepare and
 * sx_collect; sx_release clears the state's stack after the collects.
 */
/* A handler's error: its code is at most SX_CODE_MAX characters, its message
   is cut past SX_MESSAGE_MAX bytes; copying a result or an error may take
   SX_COPY_GRACE_MS past the handler's deadline. */
#define SX_CODE_MAX 64
#define SX_MESSAGE_MAX 8192
#define SX_COPY_GRACE_MS 100

typedef struct sx_run {
  const char *name;               /* the export to call */
  int input, needs;               /* indices in L */
  int input_keys, result_keys;    /* the input and the result should be records of so many keys
                                     (0: unknown): sx_copy_record */
  sx_call_opts opts;
  /* filled by the phases */
  const char *failed_code;        /* set when preparing failed */
  char failed[300];
  int fn, input_slot, needs_slot, result_slot;
  int status, expired, out_of_memory;
  long long deadline_ns;          /* when the handler's time ran out (0: no deadline) */
  /* the coroutine the handler runs as (in-process states), anchored by a
     registry ref of its state while the call lives */
  lua_State *co;
  int co_ref;
  int started;                    /* its first slice ran: the next sx_execute resumes it */
  int waiting;                    /* it is suspended in a wait, or handed off */
  int handed_off;                 /* its slice ended with opts.hand_off (waiting is set too) */
  long long wake_ns;              /* when that wait ends (monotonic); LLONG_MAX: when
                                     opts.wake is called (a transfer) or the deadline */
  void *transfer;                 /* the tp_transfer it waits for, NULL: none */
  size_t printed;                 /* what print wrote, across its slices */
  int cancelled;                  /* sx_interrupt: read and written atomically */
} sx_run;

void sx_prepare(sx_state *s, lua_State *L, sx_run *runs, int n);
void sx_execute(sx_state *s, sx_run *runs, int n);
int sx_collect(sx_state *s, lua_State *L, const sx_run *run);

/*
 * Copies the value at index idx of `from` onto the top of `to`, reading raw
 * (no metamethod runs). JSON-like values only: nil, booleans, numbers,
 * strings, null, and tables of them with string keys, or integer keys 1..n
 * of a table of n keys (an array; other numeric keys cannot be JSON). Its
 * cost is bounded: by the limits, by sizing each new table from the keys
 * actually copied (never from `#t`), and by lim->deadline_ns, looked at for
 * every table and every SX_CLOCK_EVERY pairs. Returns 0; -1 with a reason in err (then nothing is pushed on
 * `to`); -2 when the deadline passed. Allocations in `to` may raise a memory
 * error: run it protected when `to` is limited.
 */
int sx_copy(lua_State *from, int idx, lua_State *to, const sx_limits *lim, char *err, size_t errlen);
/* The same for a value that should be a record of about `keys` string keys
   (0: unknown): a tool's input, which validation found to be one, or a
   result whose schema is one. Its root table is copied in one pass, sized
   from `keys`, without counting its keys first. What it copies and refuses
   is sx_copy's: a root with a key that is not a string goes sx_copy's way. */
int sx_copy_record(lua_State *from, int idx, lua_State *to, const sx_limits *lim, int keys, char *err,
                   size_t errlen);

/* The handler-side `luma` table (ToolError, null) of a module's state. A
   luma.ToolError is the error object of base/lerror.h, made in that state. */
void sx_open_luma(lua_State *L);

/* From now on, modules without a policy cannot load C libraries either: the
   Lua of this process is private (libluma), so a C library, built against
   another Lua's symbols, would run against the wrong one. Any thread, before
   the first module loads. */
void sx_forbid_c_libraries(void);

/* How a running handler is stopped at its deadline or when cancelled (the
   whole process; any thread, any time: it counts from the next call).
   signo > 0: the handler runs with no hook at full speed, and the watch
   thread sends signal signo to its thread, whose handler sets the hook that
   stops it (watch.c). The default is SIGRTMIN + 4. 0: a count hook looks at
   the clock every few instructions (about half the speed of plain Lua for
   CPU-bound code). Returns 0; -1 when signo cannot be used (not a
   real-time signal, the process already handles it, or a ThreadSanitizer
   build): then the count hook. A call keeps the choice made when it began. */
int sx_set_deadline_signal(int signo);
/* The signal in use, or 0: the count hook. */
int sx_deadline_signal(void);
/* Called by a thread the runtime made to run handlers (a pool worker): it
   lets the deadline signal through, even if the host's thread that made it
   blocked every signal. */
void sx_own_thread(void);

/* Process isolation on this machine (confine.c): the Landlock ABI of the
   running kernel, 0 when it has none (or under valgrind, which does not
   know its calls); and the layers of confinement a handler process gets,
   as sentences: up to max_holds of those that hold (the count is
   returned), up to max_missing of those that do not (*nmissing). */
int sx_landlock_abi(void);
/* Whether the kernel lets a handler process make a user namespace (1), as
   far as its settings say (a security module may still refuse: then the
   child goes on without one). */
int sx_user_namespaces(void);
int sx_confine_layers(const char **holds, int max_holds, const char **missing, int max_missing, int *nmissing);

#endif
