/* The syntax tree of a program as Lua tables (last.c), for lprogram.c. */
#ifndef LUMA_LAST_H
#define LUMA_LAST_H

#include <lua.h>

#include "ast.h"
#include "program.h"

/* Pushes a list of (possibly NUL-holding) strings. */
void lt_push_strs(lua_State *L, const ast_str *items, int n);
/* Pushes the syntax tree of p as plain tables (see last.c for the shape). */
void lt_push_program(lua_State *L, const pm_program *p);

#endif
