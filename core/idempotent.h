/* STEP_IDEMPOTENCY (steps.h), and its settlement in STEP_RECORD. */
#ifndef LUMA_IDEMPOTENT_H
#define LUMA_IDEMPOTENT_H

#include "callint.h"
#include "verdict.h"

/* SV_NEXT: the claim is held (or the store lets the handler run without
   one); SV_RESULT: a replay; SV_FOLLOW: a call of this program holds the
   key (c->leader); SV_WAIT: another call or process holds it; SV_ERROR. */
st_verdict st_idem_lookup(lua_State *T, cl_call *c);
/* The store's part of st_idem_lookup, again after SV_WAIT. */
st_verdict st_idem_begin(lua_State *T, cl_call *c);
/* Settles the claim: commits the result (CV_VALUE) when `result`, else
   lets the claim go. SV_NEXT, SV_WAIT when the store cannot be reached now
   (the claim is still held: settle again at v.at, until the deadline), or
   SV_ERROR when the result cannot be kept. */
st_verdict st_idem_settle(lua_State *T, cl_call *c, int result);
/* Stops the store's watch of a call that waited (CS_IDEM_WAIT). */
void st_idem_unwatch(cl_call *c);

#endif
