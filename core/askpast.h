/* A durable ask's run read back from its program's journal to resume it:
   its inputs, its answered turns, its calls' outcomes, the decisions made
   on them, and how it finished (askpast.c). The ask takes what the past
   holds instead of asking or running again. */
#ifndef LUMA_ASKPAST_H
#define LUMA_ASKPAST_H

#include <stddef.h>

#include "adapter.h"
#include "journaltypes.h"
#include "json.h"
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
const jv *ak_past_finish(const ak_past *p);
int ak_past_turns(const ak_past *p);
const jr_status *ak_past_status(const ak_past *p);
int ak_past_awaited(const ak_past *p, int turn, const char *id);

/* The recorded response of the turn, when the journal has it (1, *r set:
   the ask takes it instead of sending the request), else 0. */
int ak_past_response(ak_ask *a, int turn, ad_response *r);
/* The recorded outcome of call i of the current turn: 1 with a malloc'd
   copy of its content, else 0. */
int ak_past_result(ak_ask *a, int i, char **content, size_t *len, int *is_error);

/* A person's decision on call i of the current turn, the first recorded for
   its id: 1 (*approved, *reason or NULL, *input: the person's input as JSON
   or NULL), else 0. */
int ak_past_decision(ak_ask *a, int i, int *approved, const char **reason, const char **input, size_t *input_len);
#endif
