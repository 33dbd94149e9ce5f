/* A durable ask's journal (journal.h): the records an ask of an agent with
   `durable: true` writes to its program's journal, each before the step
   that depends on it. Each returns 0 (also for an ask that is not durable),
   or -1 with err; the ask's units end the ask with JOURNAL_ERROR then. */
#ifndef LUMA_ASKJOURNAL_H
#define LUMA_ASKJOURNAL_H

#include <stddef.h>

#include "adapter.h"

#ifndef LUMA_AK_ASK_T
#define LUMA_AK_ASK_T
typedef struct ak_ask ak_ask;
#endif

/* "ask": the inputs (never a key); before the first request. */
int ak_journal_ask(ak_ask *a, char *err, size_t errlen);
/* "exchange": an answered turn's response as the provider sent it; before
   its tool calls run or its answer is taken. */
int ak_journal_exchange(ak_ask *a, const ad_response *r, char *err, size_t errlen);
/* "tool": each call of the turn, with what the model is given; before the
   next request. */
int ak_journal_tools(ak_ask *a, char *err, size_t errlen);
/* "finish": the outcome's ok. */
int ak_journal_finish(ak_ask *a, char *err, size_t errlen);

#endif
