/* JSON for Lua values (the binding side of base/json.c). */
#ifndef LUMA_LJSON_H
#define LUMA_LJSON_H

#include <lua.h>

#include "json.h"
#include "luma_limits.h"
#include "strbuf.h"

/* Writes the value at idx as canonical JSON: object keys sorted bytewise,
   integers exact, floats shortest-round-trip, luma.null and nil as null, a
   table with the keys 1..n (or an empty one marked with array_mt) as an
   array. Reads raw: no metamethod runs. indent > 0 pretty-prints. Returns 0,
   or -1 with a reason in err (cycles, NaN, functions, mixed tables, invalid
   UTF-8, nesting past max_depth). */
int lj_encode(lua_State *L, int idx, sb_buf *b, int indent, int max_depth, char *err, size_t errlen);
/* Pushes a JSON tree as Lua values; arrays get the array metatable. */
void lj_push(lua_State *L, const jv *v, int depth);
/* Pushes the value of JSON text, as lj_push does; or pushes nothing and
   returns 0 with the parser's reason in err. The parse tree is owned by a
   userdata while it is pushed, so a memory error raised there leaks nothing. */
int lj_push_text(lua_State *L, const char *text, size_t len, int max_depth, char *err, size_t errlen);
/* Pushes the metatable that marks tables as JSON arrays; tells whether the
   table at idx has it. */
void lj_push_array_mt(lua_State *L);
int lj_has_array_mt(lua_State *L, int idx);
/* Adds json_encode and array_mt to the table on top. */
void lj_open(lua_State *L);

#endif
