/* STEP_NEEDS (steps.h): the tool's needs, through the host's lookup. */
#ifndef LUMA_NEEDS_H
#define LUMA_NEEDS_H

#include "callint.h"
#include "verdict.h"

/* CV_NEEDS gets the needs table, or stays nil; SV_NEXT, or SV_ERROR. */
st_verdict st_needs(lua_State *T, cl_call *c);

#endif
