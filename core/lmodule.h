/* The Lua binding of tool modules ("luma.Module"). */
#ifndef LUMA_LMODULE_H
#define LUMA_LMODULE_H

#include <lua.h>

#include "sandbox.h"

/* Adds load_module to the table on top and registers the metatable. */
void lm_open(lua_State *L);
/* The module of the userdata at idx; raises if it is not an open module. */
sx_module *lm_check(lua_State *L, int idx);

#endif
