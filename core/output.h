/* STEP_OUTPUT (steps.h), and STEP_RECORD's writes; the copy a follower gets. */
#ifndef LUMA_OUTPUT_H
#define LUMA_OUTPUT_H

#include "callint.h"
#include "verdict.h"

/* Validates the outcome and records it (idempotency, cache). SV_NEXT: the
   outcome stands; SV_ERROR: the error on top replaces it. */
st_verdict st_finish(lua_State *T, cl_call *c);
/* Pushes a copy of the outcome of `leader` (CV_WARN gets its warnings):
   SV_RESULT or SV_ERROR. */
st_verdict st_follow(lua_State *T, cl_call *c, cl_call *leader);

#endif
