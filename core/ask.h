/*
 * An ask: one question to an agent's model, answered through the provider's
 * native tool calling (SPEC §2). It is a task of the runtime (rt_task): it
 * sends the adapter's requests (adapters/adapter.h) over the runtime's
 * transport, runs the model's tool calls through the one pipeline (calls,
 * up to the agent's tool_concurrency at once), and ends with a value of its
 * schema, validated here, or with an error. It never blocks: it waits for a
 * transfer, for its calls, or until a time (a retry's backoff).
 *
 * It holds counted references to its program and scope, so closing either
 * while it is in flight is safe.
 *
 * Threads: an ask belongs to the thread that owns its runtime's home state;
 * ak_cancel may be called from any thread.
 */
#ifndef LUMA_ASK_H
#define LUMA_ASK_H

#include <stddef.h>

#include <lua.h>

#include "errors.h"
#include "pipeline.h"

#ifndef LUMA_AK_ASK_T
#define LUMA_AK_ASK_T
typedef struct ak_ask ak_ask;
#endif

typedef struct ak_params {
  const char *prompt;         /* the user's text */
  size_t prompt_len;
  const pm_schema *schema;    /* what the answer must be */
  const pm_tool *forced;      /* `using tool`: the first turn must call it; NULL: none */
  int listen;                 /* the host listens for events from the start (ak_listen) */
  struct ak_past *past;       /* a run to resume (askpast.h), or NULL: the ask owns it from
                                 here, made or not */
} ak_params;

/* A new ask of the scope's agent. NULL with its code and a message in err
   when it cannot be made (ASK_MODEL_MISSING; ASK_CANCELLED: no memory, a
   closed program). A missing API key is not an error here: the ask ends with
   ASK_KEY_MISSING before any request. */
ak_ask *ak_new(pl_program *pg, pl_scope *scope, const ak_params *p, le_code *code, char *err, size_t errlen);
/* Hands it to the runtime: rt_poll steps it from now on. */
void ak_start(ak_ask *a);
int ak_done(const ak_ask *a);
struct rt_runtime *ak_runtime(const ak_ask *a);
/* Ends it with ASK_CANCELLED: its transfer stops and its tools' signals
   fire. Any thread; no effect once it is done. */
void ak_cancel(ak_ask *a);
/* Pushes the answer (returns 1) or the error (returns 0) on L, a thread of
   the runtime's home state. Only once it is done. */
int ak_push_outcome(lua_State *L, ak_ask *a);
/* Releases the caller's reference; an ask in flight is cancelled first. */
void ak_free(ak_ask *a);

#endif
