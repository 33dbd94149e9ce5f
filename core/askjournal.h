/* A durable ask's journal (journal.h): the records an ask of an agent with
   `durable: true` writes to its program's journal, each before the step
   that depends on it, and its run's lease (a run read back to resume it
   is askpast.h's).
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

/* A resumed ask's start, after its model is prepared: a run that finished
   gives its outcome (1: pushed on the ask's thread, *ok set); else the ask
   claims the run (an error naming the owner when a live one holds it), cuts
   a torn tail, and goes on (0). -1 with err. */
int ak_journal_resume(ak_ask *a, int *ok, char *err, size_t errlen);
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
