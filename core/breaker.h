/* STEP_RECORD's circuit breaker (steps.h), per agent method call. */
#ifndef LUMA_BREAKER_H
#define LUMA_BREAKER_H

#include "callint.h"
#include "verdict.h"

/* SV_ERROR when the breaker of the call's method call is open; else SV_NEXT. */
st_verdict st_breaker_open(lua_State *T, cl_call *c);
/* Counts the call's failure (CV_VALUE). SV_ERROR when the breaker opens
   now: its error on top replaces the call's; else SV_NEXT. */
st_verdict st_count_failure(lua_State *T, cl_call *c);

#endif
