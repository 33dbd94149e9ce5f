/* The bytes a value crosses a process boundary in (isolate.c): a tagged,
   length-prefixed form of exactly the values sx_copy makes. */
#ifndef LUMA_SANDBOX_WIRE_H
#define LUMA_SANDBOX_WIRE_H

#include <stddef.h>

#include <lua.h>

#include "strbuf.h"

/* Appends the value at idx of L, read raw. L's value must be one sx_copy
   made (JSON-like, no cycle); -1 on anything else or when b failed. */
int sx_wire_put(lua_State *L, int idx, sb_buf *b);

/* Reads one value from p (at most len bytes; *used says how many it took)
   and pushes it on L. The bytes may come from a process that cannot be
   trusted: every length is checked against what is left and nesting is
   capped; -1 with nothing pushed when they are malformed, -2 when reading
   them passed deadline_ns (0: none). Allocates in L: call it protected. */
int sx_wire_get(lua_State *L, const char *p, size_t len, long long deadline_ns, size_t *used);

#endif
