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
/* Whether the value at idx is an error object; a lazy one is completed first,
   so that the caller may read its fields raw. */
int le_is_error(lua_State *L, int idx);
/*
 * A lazy error: pushes an error that holds nothing but its packed data,
 * under a private key, until any field of it is read (or it is printed,
 * walked with pairs, or passed to le_is_error). Then the key goes, `code`
 * (a constant string) and `retryable` are set, and
 * fill(L, err, data) sets `message` and `details` raw in the table at stack
 * index err, each unless the caller already set it. data is len bytes that
 * the caller writes through the pointer returned, before anything else runs
 * on L.
 */
typedef void (*le_fill)(lua_State *L, int err, const void *data);
void *le_push_lazy(lua_State *L, const char *code, int retryable, le_fill fill, size_t len);
/* Pushes the metatable of error objects (made at the first use). */
void le_push_metatable(lua_State *L);
/* Sets the module's error functions, and `errors` (the catalogue: { [code] =
   { meaning, retryable [, template] } }), in the table on top. */
void le_open(lua_State *L);

#endif
