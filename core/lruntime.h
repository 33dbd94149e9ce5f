/* The Lua binding of runtimes ("luma.Runtime"), scopes ("luma.Scope") and
   calls ("luma.Call"), and the bodies of the Program methods that run tools
   (their table is in lprogram.c, with the others). */
#ifndef LUMA_LRUNTIME_H
#define LUMA_LRUNTIME_H

#include <lua.h>
#include <lauxlib.h>

#include "pipeline.h"
#include "runtime.h"

/* The runtime of the luma.Runtime at idx, or this Lua state's default one
   when idx holds nothing (made at the first use). Raises on a closed one. */
rt_runtime *lr_runtime(lua_State *L, int idx);
/* The optional timeout of a wait at idx, in ms: -1 (none) for nil or a
   negative number; a number past timeout_cap_ms (math.huge too) is the
   cap; a fraction is rounded down. Raises on NaN or another type. */
long long lr_opt_wait_ms(lua_State *L, int idx);
/* Adds runtime() to the table on top and registers the metatables. */
void lr_open(lua_State *L);
/* The scope at idx (0 or nil: NULL), which must belong to pg (raises). */
pl_scope *lr_check_scope(lua_State *L, pl_program *pg, int idx);
/* Registers a metatable `name` whose __gc, __close and close are gc, with
   the methods (or none) as __index. */
void lr_new_metatable(lua_State *L, const char *name, lua_CFunction gc, const luaL_Reg *methods);

/* program:scope(agent) */
int lr_scope(lua_State *L, pl_program *pg);
/* program:call(name, input) / program:invoke(scope, name, input): the
   scope (or 0) and the input are stack indices */
int lr_call(lua_State *L, pl_program *pg, int scope, const pm_tool *t, int input);
/* program:start(name, input [, { scope = }]) -> a luma.Call. opts: a stack
   index or 0 (none); copy: 0 when nothing else holds the input (it was
   just decoded), which the call then takes as it is */
int lr_start(lua_State *L, pl_program *pg, const pm_tool *t, int input, int opts, int copy);
/* For libluma (core/embed.c), which has a call's outcome as JSON: the
   luma.Call at index 1, done and succeeded, gives its result as JSON text,
   written as core.json_encode writes it, and is closed (its thread and
   record go back to the program's spares, not at a collection); nothing,
   the call left as it was, when it is not done, failed, or its result has
   no JSON form. */
int lr_call_json(lua_State *L);
/* program:call_all(calls [, opts]) */
int lr_call_all(lua_State *L, pl_program *pg);
/* program:check_return(agent, method, value) */
int lr_check_return(lua_State *L, pl_program *pg);

#endif
