/* Library functions in a bounded form, for every state (bounded.c). */
#ifndef LUMA_SANDBOX_BOUNDED_H
#define LUMA_SANDBOX_BOUNDED_H

#include <stddef.h>

#include <lua.h>

/* Text-only `load`, and the library functions whose loops run in C
   (string.rep, table.*, the pattern functions), made to look at the state's
   deadline. */
void sx_open_bounded(lua_State *L);
/* Loads text, never a binary chunk, in slices, checking the state's
   deadline between them: Lua's parser is quadratic on some inputs. */
int sx_load_text(lua_State *L, const char *text, size_t len, const char *chunkname);

#endif
