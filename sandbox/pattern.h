/*
 * Lua 5.4 pattern matching (string.find, match, gmatch, gsub) that can be
 * stopped: the matcher calls a tick every SP_TICK steps, so a handler's
 * deadline is met even inside a catastrophic backtracking pattern, where
 * the instruction-count hook never fires. Results and error messages are
 * those of Lua 5.4.4's string library.
 */
#ifndef LUMA_SANDBOX_PATTERN_H
#define LUMA_SANDBOX_PATTERN_H

#include "lua.h"

/* Steps between two ticks. A step is one attempt to match a pattern item at
   a position; bulk work (scanning a %b run, comparing a back-reference, a
   plain find, a long set) is charged about one step per 16 bytes. */
#ifndef SP_TICK
#define SP_TICK 1000
#endif

/* Called on the matcher's lua_State (the running thread) every SP_TICK
   steps. It returns to go on, or raises with lua_error to stop the match.
   It must leave the stack as it found it, and must not yield. */
typedef void (*sp_tick_fn)(lua_State *L);

/* Sets the tick of L's state, kept in its registry; NULL removes it. It
   takes effect at the next call of a pattern function (or of a gmatch
   iterator). Call it from the host, outside the state's running code or
   under lua_pcall: it may allocate, and so raise a memory error. */
void sp_set_tick(lua_State *L, sp_tick_fn tick);

/* Replaces find, match, gmatch and gsub in the string table that the string
   metatable's __index points to, and in package.loaded.string if that is
   another table, with rawset (so call it before those tables are frozen).
   Same allocation rule as sp_set_tick. */
void sp_open(lua_State *L);

#endif
