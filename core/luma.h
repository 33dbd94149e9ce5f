/*
 * luma-lua: the public C interface.
 *
 * libluma (the luma_* functions below) is for hosts that do not want to
 * know Lua, or that run a Lua of their own (LuaJIT in LÖVE and OpenResty).
 * The library carries a private Lua 5.4: it exports only luma_* symbols, so
 * it loads next to any other Lua, and tool handlers still run in enforced
 * Lua 5.4 sandboxes. Link with -lluma (pkg-config luma); every function
 * declared here is exported by it.
 *
 * A host that runs Lua 5.4 itself needs none of this: its scripts
 * `require "luma"`, which loads the luma.core module (lib/lua/5.4/luma/core.so).
 *
 * VALUES cross the API as JSON text: UTF-8, NUL-terminated.
 *
 * ERRORS: a function that can fail takes a `luma_error *` (which may be
 * NULL) and fills it with a code of the catalogue (README, "Error codes") and
 * a message that says what was wrong. Nothing here exits, longjmps into the
 * host, or crashes on bad input: NULL pointers, invalid JSON and unknown names
 * are INVALID_ARGUMENT, JSON_INVALID, TOOL_NOT_FOUND, ... errors.
 *
 * OWNERSHIP: every string the host passes in is copied before the function
 * returns. Every string luma hands out is owned by luma and valid until the
 * stated point (luma_result: until luma_call_free). Handles are freed by
 * their own functions: luma_program_close, luma_call_free, luma_destroy.
 * A call handle stays valid after its runtime is destroyed: a call that had
 * not finished then ends with TOOL_CANCELLED (ASK_CANCELLED for an ask), and
 * luma_result, luma_ready and luma_call_free keep working on it.
 *
 * THREADS: a runtime is locked inside; any thread may use it and its
 * handles, and luma_cancel never waits for the lock. Callbacks (handlers,
 * approve, lookup, on_event, the clock) run on the thread that called
 * luma_poll or luma_wait, with the lock held: they may call luma functions of
 * the same runtime, except luma_destroy. Tool modules' handlers run on the
 * runtime's worker threads; C handlers (luma_register) run in the polling
 * thread, so they should be short. Runtimes are independent of each other.
 * luma_destroy must not race with other use of the same runtime.
 */
#ifndef LUMA_H
#define LUMA_H

#include <stddef.h>

#if defined(__GNUC__)
#define LUMA_API __attribute__((visibility("default")))
#else
#define LUMA_API
#endif

#define LUMA_VERSION "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct luma_runtime luma_runtime;
typedef struct luma_program luma_program;
typedef struct luma_call luma_call;   /* a tool call, an agent method or an ask in flight */

/* What luma_result and the functions that start work return. */
enum { LUMA_OK = 0, LUMA_PENDING = 1, LUMA_FAILED = -1 };

typedef struct luma_error {
  char code[32];        /* "" when there is no error */
  char message[1024];   /* a longer message is cut, ending with "..." */
} luma_error;

typedef struct luma_options {
  int workers;          /* threads that run tool modules' handlers; <= 0: one per CPU */
  void *ud;             /* given to every callback */
  /* The clock, in milliseconds (retry backoff, TTLs); NULL: the system's
     monotonic clock. sleep_ms is how a blocking wait sleeps on it (NULL with
     now_ms: a real sleep). */
  long long (*now_ms)(void *ud);
  void (*sleep_ms)(void *ud, long long ms);
  /* tool_policy "approval": 1 lets `tool` run (agent may be NULL); NULL:
     only the tools listed in LUMA_APPROVED_TOOLS run. */
  int (*approve)(void *ud, const char *tool, const char *agent);
  /* Credentials, needs and API keys by name: the value or NULL. The string
     is copied at once; it may be overwritten by the next lookup. NULL:
     getenv. */
  const char *(*lookup)(void *ud, const char *name);
  /* One telemetry event per tool call (and per ask), as JSON, and the
     runtime's warnings ({"kind": "warning", "message": ...}: libluma never
     writes to stderr); the text is valid during the callback. */
  void (*on_event)(void *ud, const char *event_json, size_t len);
} luma_options;

/* The library's version, LUMA_VERSION. */
LUMA_API const char *luma_version(void);

/* DEADLINES. How a tool module's handler is stopped at its deadline or when
   it is cancelled; one choice for the whole process. signo > 0 (the default
   is SIGRTMIN + 4): handlers run with no hook, at the speed of plain Lua; a
   thread of luma sends signal signo to the thread running a handler whose
   deadline passed (at once when it is cancelled), and luma's handler for
   that signal stops it. luma takes only a real-time signal (SIGRTMIN to
   SIGRTMAX) that nothing in the process handles, restores it when the
   library is unloaded, and lets it through on its own worker threads. 0: a
   count hook looks at the clock every few instructions instead, about half
   the speed of plain Lua for CPU-bound handlers. A host that uses the
   signal itself, or blocks it in a thread that runs handlers, chooses
   another or 0 before its first call. Returns LUMA_OK, or LUMA_FAILED when
   signo is handled already or cannot be used (then the count hook). */
LUMA_API int luma_set_deadline_signal(int signo);
/* The signal in use, or 0: the count hook. */
LUMA_API int luma_deadline_signal(void);

/* A runtime: its worker pool, its programs and calls. o may be NULL (the
   defaults). NULL with err filled when it cannot be made. */
LUMA_API luma_runtime *luma_new(const luma_options *o, luma_error *err);
/* Cancels every call in flight, waits for the handlers running on the pool
   to stop, and frees the runtime and its programs. Call handles stay valid
   (see OWNERSHIP). NULL is ignored. */
LUMA_API void luma_destroy(luma_runtime *rt);

/* Reads and compiles a .luma file, its config and its tool modules. It
   BLOCKS until each tool module's top-level code has run in its sandbox
   (at most module_load_timeout_ms, 10 s, a module): load at start-up, not
   in a frame or a request.
   config: a luma.config.json path; NULL: the one next to the program, if
   any; "": none. tool_modules: more module paths, NULL-terminated (or NULL).
   NULL with err filled on failure (PROGRAM_INVALID lists every problem). */
LUMA_API luma_program *luma_load(luma_runtime *rt, const char *path, const char *config,
                                 const char *const *tool_modules, luma_error *err);
/* Frees the program; its calls in flight finish or fail cleanly. */
LUMA_API void luma_program_close(luma_program *p);

/* A C tool handler. input_json is the validated input, needs_json the
   tool's resolved needs ("null" without). Return LUMA_OK with *out the
   result as JSON, or LUMA_FAILED with *out a ToolError as JSON
   ({"code", "message", "retryable", "details"}) or NULL. *out is allocated
   with malloc; luma frees it. Runs on the polling thread. */
typedef int (*luma_handler)(void *ud, const char *input_json, const char *needs_json, char **out);
/* Makes fn the handler of the declared tool. LUMA_OK, or LUMA_FAILED. */
LUMA_API int luma_register(luma_program *p, const char *tool, luma_handler fn, void *ud, luma_error *err);

/* Starts a tool call (input: JSON object; NULL: {}). It runs through the
   whole pipeline without blocking: the host steps it with luma_poll or
   luma_wait. NULL with err filled when it cannot start (TOOL_NOT_FOUND,
   JSON_INVALID, ...); failures of the call itself come from luma_result. */
LUMA_API luma_call *luma_start(luma_program *p, const char *tool, const char *input_json, luma_error *err);
/* Starts an agent method (args: JSON object; NULL: {}). */
LUMA_API luma_call *luma_start_method(luma_program *p, const char *agent, const char *method,
                                      const char *args_json, luma_error *err);
/* Starts an ask of an agent's model: the answer is a value of `schema`. */
LUMA_API luma_call *luma_start_ask(luma_program *p, const char *agent, const char *prompt, const char *schema,
                                   luma_error *err);
/* Continues the run of a durable agent's ask from the program's journal
   (the config's "journal"; README: Durable asks), as an ask: its answered
   turns are not asked again, its calls with an outcome do not run again; a
   run that finished gives its outcome again. NULL with err (JOURNAL_ERROR)
   when the run cannot be read or its agent, schema or tool is not in the
   program; a run another live process holds fails in luma_result. */
LUMA_API luma_call *luma_resume(luma_program *p, const char *run_id, luma_error *err);
/* Records a person's decision on call call_id, which the durable run awaits
   (README: Durable asks), from any process sharing the journal: approved
   (input_json: the person's edit of its input, or NULL) or denied (reason:
   what the model is told). LUMA_OK, or LUMA_FAILED with err (JOURNAL_ERROR:
   the run does not await approval; JSON_INVALID). */
LUMA_API int luma_decide(luma_program *p, const char *run_id, const char *call_id, int approved, const char *reason,
                         const char *input_json, luma_error *err);

/* Events (README: Streaming). luma_listen makes an ask (of luma_start_ask)
   queue its events; called before the runtime's next luma_poll, the ask
   streams from its first request (unless its model says stream: false).
   LUMA_OK, or LUMA_FAILED (INVALID_ARGUMENT: not an ask). luma_next_event
   takes the next event as JSON text ({"type": "text_delta", ...}; the last
   is "finish"), valid until the next luma_next_event or luma_call_free of
   c, or returns NULL when none is queued now (luma_poll and luma_wait queue
   more; a done ask keeps its events until they are taken). It never blocks:
   a game loop reads a frame's events after its luma_poll. MEMORY: while
   the host does not take them, an ask holds at most stream_queue_bytes
   (1 MiB) of events and as much of the stream's unread bytes (its transfer
   pauses there), plus one event of up to sse_max_event_bytes, whatever the
   answer's length. */
LUMA_API int luma_listen(luma_call *c, luma_error *err);
LUMA_API const char *luma_next_event(luma_call *c, size_t *len);

/* Steps every call of the runtime that can move, without blocking. Returns
   the number still in flight (or LUMA_FAILED for a NULL runtime); *wait_ms
   (may be NULL) is how long the host may sleep before it polls again: -1
   means until luma_fd turns readable. */
LUMA_API int luma_poll(luma_runtime *rt, long long *wait_ms);
/* A descriptor that turns readable when a handler or a transfer finished:
   put it in the host's event loop. -1 for a NULL runtime. */
LUMA_API int luma_fd(luma_runtime *rt);
/* For a host that can only connect to a path, not poll a descriptor
   (nginx's cosockets): writes to `path` (len bytes; 108 are enough) a Unix
   socket's path, in a new folder (mode 0700) under $TMPDIR or /tmp. The
   host connects to it as a stream; its next luma_poll accepts the
   connection and removes the path and the folder. From then on a byte
   arrives on the connection each time luma_fd turns readable: the host
   reads them (any number at once) and polls. A new call replaces the socket
   and the connection. LUMA_OK, or LUMA_FAILED with err filled. */
LUMA_API int luma_wake_socket(luma_runtime *rt, char *path, size_t len, luma_error *err);
/* on (1): luma_start runs a tool module's handler on the calling thread
   until it returns or waits (signal:sleep, a luma.http request): a handler
   that does not wait is done when luma_start returns, with no hand-off to
   a worker thread; one that waits resumes on the pool, as every call does
   with off (0, the default). A handler computes on the caller's thread up
   to its deadline: for hosts whose thread serves others the same way
   (OpenResty's worker), not for a frame loop. A process-isolated module's
   handlers still run on the pool (their waits block). LUMA_OK, or
   LUMA_FAILED for a NULL runtime. */
LUMA_API int luma_set_inline(luma_runtime *rt, int on);
/* 1 when the call is done (luma_poll steps it), else 0; LUMA_FAILED for a
   NULL call (a luma_start that failed), so that a loop `while
   (luma_ready(c) == 0)` ends instead of spinning. */
LUMA_API int luma_ready(const luma_call *c);
/* Steps the runtime until the call is done or timeout_ms passed (< 0: no
   limit; more than timeout_cap_ms, 2^31-1: the cap). 1 when done, 0 on
   timeout, LUMA_FAILED for a NULL call. */
LUMA_API int luma_wait(luma_call *c, long long timeout_ms);
/* LUMA_OK: *json is the result. LUMA_FAILED: *json is the error as a JSON
   object and err is filled. LUMA_PENDING: not done yet. json and len may be
   NULL; the text is valid until luma_call_free. */
LUMA_API int luma_result(luma_call *c, const char **json, size_t *len, luma_error *err);
/* Cancels the call: its handler's signal fires and it ends with
   TOOL_CANCELLED (ASK_CANCELLED). Any thread; never blocks; no effect on a
   call that is done. */
LUMA_API void luma_cancel(luma_call *c);
/* Frees the handle; a call still in flight is cancelled. NULL is ignored. */
LUMA_API void luma_call_free(luma_call *c);

#ifdef __cplusplus
}
#endif

#endif
