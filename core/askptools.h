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
/* Lazy tools: how the ask finds them, once before the first request (0, or
   -1 when out of memory), registering the handler of the program's
   discovery tool (pm_program.discover) when the ask offers it; the tools of
   the next request (all of them with the lazy ones deferred and the wire's
   search, or the loaded ones and the discovery tool), in the turn's arena;
   the discovery tool when the ask offers it and the model names it, which
   the pipeline runs like the agent's tools (its handler records what it
   finds in the ask of the call, cl_set_ask), or NULL; and whether a call
   names a lazy tool not found yet: 1 with the model's message in msg. */
int ak_lazy_prepare(ak_ask *a);
void ak_lazy_ask(ak_ask *a, ad_ask *q);
const pm_tool *ak_lazy_tool(const ak_ask *a, const char *name);
int ak_lazy_unloaded(const ak_ask *a, const char *name, char *msg, size_t cap);
/* A resumed run's discovery call whose outcome the journal holds: the tools
   it found (when it succeeded) are loaded again, as when it ran, found
   again from its input. */
void ak_lazy_journaled(ak_ask *a, const ad_call *call, int is_error);

/* Pushes the sources the answer cites: a list of {url, title?,
   cited_text?}, empty when none (luma.Ask:citations). */
void ak_push_citations(lua_State *L, const ak_ask *a);

#endif
