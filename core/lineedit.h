/* luma.lineedit: line editing for the luma-lua REPL (core/lineedit.c), built
   into the command only. */
#ifndef LUMA_LINEEDIT_H
#define LUMA_LINEEDIT_H

#include <lua.h>

int luaopen_luma_lineedit(lua_State *L);

#endif
