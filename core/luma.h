/*
 * luma-lua: the public C interface for embedders.
 *
 * Open the runtime in a Lua state with luaopen_luma_core (it returns the
 * `luma.core` module table, as `require "luma.core"` does). Programs,
 * validation and errors are then used through that table from Lua, or from
 * C through the Lua API. A lua_State is single-threaded: use one state per
 * thread, as Lua requires; programs are read-only once compiled.
 */
#ifndef LUMA_H
#define LUMA_H

#include <lua.h>

#if defined(__GNUC__)
#define LUMA_API __attribute__((visibility("default")))
#else
#define LUMA_API
#endif

#define LUMA_VERSION "0.1.0"

/* The luma.core module: compile(), error(), is_error(), null, version. */
LUMA_API int luaopen_luma_core(lua_State *L);

#endif
