/* A durable ask's journal (journal.h): the records an ask of an agent with
   `durable: true` writes to its program's journal, each before the step
   that depends on it, its run's lease, and a run read back to resume it.
   Each writer returns 0 (also for an ask that is not durable), or -1 with
   err; the ask's units end the ask with JOURNAL_ERROR then. */
#ifndef LUMA_ASKJOURNAL_H
#define LUMA_ASKJOURNAL_H

#include <stddef.h>

#include "adapter.h"
#include "pipeline.h"

#ifndef LUMA_AK_ASK_T
#define LUMA_AK_ASK_T
typedef struct ak_ask ak_ask;
#endif

/* A run read back from the journal (ak_past_read): its inputs, its answered
   turns, its calls' outcomes and how it finished. */
typedef struct ak_past ak_past;

/* Reads run from pg's journal: NULL with err (no journal, no such run, a
   record of a later format, a run whose first record is no "ask"). */
ak_past *ak_past_read(pl_program *pg, const char *run, char *err, size_t errlen);
void ak_past_free(ak_past *p);
/* Its inputs, as the "ask" record gives them (schema and forced may be NULL). */
const char *ak_past_agent(const ak_past *p);
const char *ak_past_prompt(const ak_past *p, size_t *len);
const char *ak_past_schema(const ak_past *p);
const char *ak_past_forced(const ak_past *p);
/* Its id, its "finish" record's body (NULL: not finished), its answered
   turns, how its records read (whole, torn), and whether call id of turn
   waited for a person ("approval" recorded). */
const char *ak_past_run(const ak_past *p);
const struct jv *ak_past_finish(const ak_past *p);
int ak_past_turns(const ak_past *p);
const struct jr_status *ak_past_status(const ak_past *p);
int ak_past_awaited(const ak_past *p, int turn, const char *id);

/* A resumed ask's start, after its model is prepared: a run that finished
   gives its outcome (1: pushed on the ask's thread, *ok set); else the ask
   claims the run (an error naming the owner when a live one holds it), cuts
   a torn tail, and goes on (0). -1 with err. */
int ak_journal_resume(ak_ask *a, int *ok, char *err, size_t errlen);
/* The recorded response of the turn, when the journal has it (1, *r set:
   the ask takes it instead of sending the request), else 0. */
int ak_journal_response(ak_ask *a, int turn, ad_response *r);
/* The recorded outcome of call i of the current turn: 1 with a malloc'd
   copy of its content, else 0. */
int ak_journal_result(ak_ask *a, int i, char **content, size_t *len, int *is_error);

/* A person's decision on call i of the current turn, the first recorded for
   its id: 1 (*approved, *reason or NULL, *input: the person's input as JSON
   or NULL), else 0. */
int ak_journal_decision(ak_ask *a, int i, int *approved, const char **reason, const char **input, size_t *input_len);
/* "approval": call i waits for a person (its tool, input and why), and the
   run awaits approval; once per call. */
int ak_journal_approval(ak_ask *a, int i, const char *reason, char *err, size_t errlen);

/* "ask": the inputs (never a key), after the new run is claimed; before the
   first request. */
int ak_journal_ask(ak_ask *a, char *err, size_t errlen);
/* "exchange": an answered turn's response as the provider sent it; before
   its tool calls run or its answer is taken. */
int ak_journal_exchange(ak_ask *a, const ad_response *r, char *err, size_t errlen);
/* "tool": calls idx[0..n-1] of the turn (calls that ended together), each
   with what the model is given; as they end, before the next request, in
   one commit (jr_append_batch). */
int ak_journal_tools(ak_ask *a, const int *idx, int n, char *err, size_t errlen);
/* "finish": the outcome (ok, and the answer or the error, on the ask's
   thread at AK_VALUE), then the run's state; the lease ends. */
int ak_journal_finish(ak_ask *a, char *err, size_t errlen);
/* Stops the heartbeat, if any (the ask's end, or its free). */
void ak_journal_stop(ak_ask *a);
/* Whether the heartbeat or an append found the run taken over. */
int ak_journal_lost(const ak_ask *a);

#endif
