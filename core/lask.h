/* The Lua binding of asks ("luma.Ask"); the Program methods' bodies (their
   table is in lprogram.c, with the others). */
#ifndef LUMA_LASK_H
#define LUMA_LASK_H

#include <lua.h>

#include "pipeline.h"

/* program:ask(scope, prompt, schema [, using]) -> answer: blocks until the
   model answered; raises the ask's error. */
int la_ask(lua_State *L, pl_program *pg);
/* program:start_ask(scope, prompt, schema [, using]) -> a luma.Ask */
int la_start_ask(lua_State *L, pl_program *pg);
/* Registers the luma.Ask metatable. */
void la_open(lua_State *L);

#endif
