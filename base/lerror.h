/* Structured errors: { code, message, retryable, details, tool } tables with
   the "luma.Error" metatable, whose __tostring prints "[CODE] message". */
#ifndef LUMA_LERROR_H
#define LUMA_LERROR_H

#include <lua.h>

#define LE_METATABLE "luma.Error"

/* Pushes a new error. details is a stack index of a table, or 0 for none. */
void le_push(lua_State *L, const char *code, const char *message, int retryable, int details);
/* Raises a new error (never returns). */
int le_raise(lua_State *L, const char *code, const char *message, int details);
int le_is_error(lua_State *L, int idx);
void le_open(lua_State *L);   /* pushes the module's error functions into the table on top */

#endif
