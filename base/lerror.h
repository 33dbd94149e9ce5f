/* Structured errors: { code, message, retryable, details, tool } tables with
   the "luma.Error" metatable, whose __tostring prints "[CODE] message". */
#ifndef LUMA_LERROR_H
#define LUMA_LERROR_H

#include <lua.h>

#include "errors.h"

#define LE_METATABLE "luma.Error"

/* Pushes a new error. details is a stack index of a table, or 0 for none. */
void le_push(lua_State *L, const char *code, const char *message, int retryable, int details);
/* Raises a new error, retryable false (never returns). */
int le_raise(lua_State *L, const char *code, const char *message, int details);
/* The same for a code of the catalogue, with the code's default retryable. */
void le_push_code(lua_State *L, le_code code, const char *message, int details);
int le_raise_code(lua_State *L, le_code code, const char *message, int details);
int le_is_error(lua_State *L, int idx);
/* Pushes the metatable of error objects (made at the first use). */
void le_push_metatable(lua_State *L);
/* Sets the module's error functions, and `errors` (the catalogue: { [code] =
   { meaning, retryable [, template] } }), in the table on top. */
void le_open(lua_State *L);

#endif
