/* STEP_REGISTRY to STEP_APPROVAL (steps.h): may the call run at all. */
#ifndef LUMA_POLICY_H
#define LUMA_POLICY_H

#include "callint.h"
#include "verdict.h"

/* SV_NEXT, or SV_ERROR. */
st_verdict st_permissions(lua_State *T, cl_call *c);
/* The error of a tool whose module was closed (SV_ERROR). */
st_verdict st_module_closed(lua_State *T, cl_call *c);

#endif
