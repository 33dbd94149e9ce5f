/* The Lua binding's side of a call (lcall.c), for lruntime.c and the ask's
   tool calls: putting a Lua value in as the input, and taking the outcome
   out. */
#ifndef LUMA_LCALL_H
#define LUMA_LCALL_H

#include <lua.h>

#include "call.h"

/* The value at idx of L (a thread of the call's home state) becomes the
   call's input: a copy when `copy` (the caller goes on and may change it),
   else the value itself (a blocking call, whose caller waits). */
void lcl_put_input(lua_State *L, int idx, cl_call *c, int copy);
/* Keeps the value at idx (the scope's userdata) alive as long as the call. */
void lcl_put_scope_anchor(lua_State *L, int idx, cl_call *c);
/* For a call that is done: pushes the result and its metadata table and
   returns 0, or pushes the error and returns -1. */
int lcl_push_outcome(lua_State *L, cl_call *c);
/* The same in two halves, so that the call can be freed in between: pushes
   its value and its warnings (or nil) without allocating on L (2 free slots
   needed) and returns whether it succeeded; then the metadata table. */
struct st_event;
int lcl_take(lua_State *L, cl_call *c, struct st_event *ev);
void lcl_push_meta(lua_State *L, const struct st_event *ev, int warnings);

#endif
