/* The model's tool calls of one turn, and the ask's telemetry event
   (asktools.c). They return verdicts (verdict.h): ask.c moves the ask. */
#ifndef LUMA_ASKTOOLS_H
#define LUMA_ASKTOOLS_H

#include "askint.h"
#include "verdict.h"

/* Makes the turn's calls. SV_NEXT: they are to run; SV_ERROR: the error on
   top ends the ask (the agent's tool_rate_limit, memory). */
st_verdict ak_begin_tools(ak_ask *a);
/* Starts and collects the calls. SV_WAIT: some still run; SV_NEXT: every
   call answered and the results are in the conversation, for the next
   request; SV_ERROR: the error on top ends the ask. */
st_verdict ak_step_tools(ak_ask *a);
/* Call i of a streaming turn has its whole arguments: it starts at once
   on the pool when its tool writes nothing (so that a run for a stream
   that then fails changes nothing), within the agent's tool_concurrency and
   tool_rate_limit; ak_begin_tools adopts it. Else it waits for the turn. */
void ak_early_call(ak_ask *a, int i, const char *name, const char *args, size_t len);
/* Cancels and drops the calls started early (the exchange failed). */
void ak_drop_early(ak_ask *a);
/* Cancels the turn's calls; 1 once none is left running. */
int ak_cancel_tools(ak_ask *a);
void ak_drop_slots(ak_ask *a);
void ak_emit(ak_ask *a);

#endif
