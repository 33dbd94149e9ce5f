/* The ask's events for a host that listens (README: Streaming): plain Lua
   tables with a `type`, made on the ask's thread from a stream's deltas, a
   whole turn, the tool results and the outcome, queued in order, and taken
   by the host on its own thread. The same events whether or not the
   provider streamed. Nothing here moves the ask: ask.c decides when. */
#ifndef LUMA_ASKEVENTS_H
#define LUMA_ASKEVENTS_H

#include "ask.h"
#include "askint.h"

void ak_ev_free(ak_ask *a);
/* A delta of the stream of turn a->ev_turn. */
void ak_ev_delta(ak_ask *a, const ad_delta *d);
/* The deltas a whole (non-streamed) turn stands for. */
void ak_ev_turn(ak_ask *a, const ad_turn *t);
/* Slot i's result (tool_result). */
void ak_ev_result(ak_ask *a, int i);
/* What was shown since the last turn_end is void: the exchange is retried. */
void ak_ev_retry(ak_ask *a, const char *reason, int attempt);
/* The outcome (at AK_VALUE): always the last event. */
void ak_ev_finish(ak_ask *a);
/* Whether the queue holds LIM_STREAM_QUEUE_BYTES or more. */
int ak_ev_full(const ak_ask *a);

#endif
