/* STEP_CACHE (steps.h): the cache and single flight; its write in STEP_RECORD. */
#ifndef LUMA_CACHE_H
#define LUMA_CACHE_H

#include "callint.h"
#include "verdict.h"

/* The key goes to CV_CKEY (nil when the tool is not cached or the input has
   no key). SV_NEXT: a miss (with a cache_store, the entry may now be held
   by this call); SV_RESULT: a hit; SV_FOLLOW: c->leader computes it;
   SV_WAIT: another process computes it; SV_ERROR. */
st_verdict st_cache_lookup(lua_State *T, cl_call *c);
/* Keeps the call's result (CV_VALUE) for the next calls. */
void st_cache_store(lua_State *T, cl_call *c);
/* Lets a cache_store entry this call claimed go, unfilled. */
void st_cache_release(cl_call *c);

#endif
