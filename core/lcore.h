/* The entry of the luma.core Lua module (lib/lua/5.4/luma/core.so), for
   the Lua 5.4 hosts that open it themselves: the luma-lua command
   (host.c) and libluma's private state (embed.c). It is not part of
   libluma's C API (luma.h): libluma exports only luma_*. */
#ifndef LUMA_LCORE_H
#define LUMA_LCORE_H

#include <lua.h>

#include "luma.h"

/* The luma.core module: compile(), error(), is_error(), null, version. */
LUMA_API int luaopen_luma_core(lua_State *L);

#endif
