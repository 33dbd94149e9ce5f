/* The ask's events for a host that listens (README: Streaming): plain Lua
   tables with a `type`, made on the ask's thread from a stream's deltas, a
   whole turn, the tool results and the outcome, queued in order, and taken
   by the host on its own thread. The same events whether or not the
   provider streamed. Nothing here moves the ask: ask.c decides when. */
#ifndef LUMA_ASKEVENTS_H
#define LUMA_ASKEVENTS_H

#include "askint.h"

/* Events (askevents.c; README: Streaming). From ak_listen on, the ask
   queues its events, and asks the provider to stream (unless the model says
   stream: false) from its next request on; an ask already done queues its
   finish event. The queue is bounded (LIM_STREAM_QUEUE_BYTES): while it is
   full the stream's transfer pauses, so a host that does not take them
   makes the ask hold about twice that, whatever the answer's length.
   ak_ev_take pushes the next event on L (a thread of the runtime's home
   state) and returns 1, or returns 0 when none is queued now. */
void ak_listen(ak_ask *a);
int ak_ev_take(lua_State *L, ak_ask *a);
int ak_ev_pending(const ak_ask *a);

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
