/* The Program methods that set a program up (lconfigure.c); their table is
   in lprogram.c, with the others. */
#ifndef LUMA_LCONFIGURE_H
#define LUMA_LCONFIGURE_H

#include <lua.h>

#include "pipeline.h"

/* program:register(name, fn): t is the tool, fn at index 3 */
int lg_register(lua_State *L, pl_program *pg, const pm_tool *t);
/* program:attach(module) -> { names registered } */
int lg_attach(lua_State *L, pl_program *pg);
/* program:missing_handlers(): the tools without a handler that are not
   declared handler: "host" */
int lg_missing(lua_State *L, pl_program *pg);
/* program:configure{ ... } */
int lg_configure(lua_State *L, pl_program *pg);

#endif
