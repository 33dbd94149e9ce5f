/* The Lua binding of programs ("luma.Program"). */
#ifndef LUMA_LPROGRAM_H
#define LUMA_LPROGRAM_H

#include <lua.h>
#include <lauxlib.h>

#include "pipeline.h"
#include "program.h"
#include "validate.h"

#define LP_CACHE 16

/* Schema lookups by name, keyed by the address of the interned name string.
   The names are kept alive in a table (registry ref `names`), so an address
   cannot be reused by another string while it is in the cache. */
typedef struct lp_cache {
  const char *key;
  const pm_schema *schema;
  const pm_tool *tool;
} lp_cache;

/* The "luma.Program" userdata. */
typedef struct lp_program {
  pm_program *p;              /* NULL once closed; owned by pg once it is made */
  lv_program *v;
  pl_program *pg;             /* the program ready to run (counted) */
  int names;                  /* registry ref of the table keeping cached names alive */
  lp_cache cache[LP_CACHE];
} lp_program;

/* The program at idx; raises unless it is an open program. Only for
   functions whose upvalue 1 is the program metatable (the methods). */
lp_program *lp_check(lua_State *L, int idx);

/* Adds compile() to the table on top and registers the metatable. */
void lp_open(lua_State *L);
/* The tool named by the string at idx, or NULL (cached by name). */
const pm_tool *lp_find_tool(lua_State *L, lp_program *lp, int idx);

#endif
