/* The Lua binding of programs ("luma.Program") and of their syntax trees. */
#ifndef LUMA_LPROGRAM_H
#define LUMA_LPROGRAM_H

#include <lua.h>

#include "program.h"
#include "validate.h"

/* Adds compile() to the table on top and registers the metatable. */
void lp_open(lua_State *L);
/* Pushes a structured error with the given code from a failed validation. */
int lp_push_validation_error(lua_State *L, const char *code, const lv_result *r);
/* Pushes a list of (possibly NUL-holding) strings. */
void la_push_strs(lua_State *L, const ast_str *items, int n);
/* Pushes the syntax tree of p as plain tables (see last.c for the shape). */
void la_push_program(lua_State *L, const pm_program *p);

#endif
