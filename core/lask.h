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
/* program:resume(run [, listen]) -> answer: continues a durable ask's run
   from the program's journal (askpast.h) until it ends; a run that
   finished gives its outcome again. Raises the ask's error. */
int la_resume(lua_State *L, pl_program *pg);
/* program:decide(run, call, approved [, reason [, input JSON]]) -> its
   record's seq: a person's decision on a call a durable run awaits
   (journal.h's jr_decide), from any process. */
int la_decide(lua_State *L, pl_program *pg);
/* program:start_resume(run [, listen]) -> a luma.Ask */
int la_start_resume(lua_State *L, pl_program *pg);
/* Registers the luma.Ask metatable. */
void la_open(lua_State *L);

#endif
