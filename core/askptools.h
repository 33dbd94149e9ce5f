/* The provider tools of an ask (askint.h): their entries, from the agent's
   declarations; what each turn's provider-run calls and citations add up
   to; and the ask event's fields for them. The adapters write and read the
   wire; ask.c moves the state. */
#ifndef LUMA_ASKPTOOLS_H
#define LUMA_ASKPTOOLS_H

#include "askint.h"

/* The entries, once before the first request: 0, or -1 when out of memory. */
int ak_ptools_prepare(ak_ask *a);
/* Counts the current turn's provider tool calls and keeps its citations. */
void ak_ptools_turn(ak_ask *a);
/* Sets provider_tools, provider_tool_errors and citations on the ask's
   event at e (each only when there is something to say). */
void ak_ptools_event(ak_ask *a, int e);
/* Pushes the sources the answer cites: a list of {url, title?,
   cited_text?}, empty when none (luma.Ask:citations). */
void ak_push_citations(lua_State *L, const ak_ask *a);

#endif
