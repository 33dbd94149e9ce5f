/* The rules of `require` in a module's state (require.c): which names it
   may load and from where, read as text. */
#ifndef LUMA_SANDBOX_REQUIRE_H
#define LUMA_SANDBOX_REQUIRE_H

#include <stddef.h>

#include <lua.h>

typedef struct sx_require {
  const char *const *dependencies;    /* the names require may load; NULL: no list */
  int ndependencies;
  const char *root;                   /* where they are read from; NULL: nowhere */
} sx_require;

/* A whole file (at most LIM_MODULE_MAX_SOURCE bytes), NUL-terminated, to free; NULL
   with a message in err. */
char *sx_read_source(const char *path, size_t *len, char *err, size_t errlen);

/* Keeps the rules in the state's registry and, when the state has a
   `package` library, makes the dependency searcher the only one after
   preload and removes package.loadlib. Raises on error: call it protected. */
void sx_open_require(lua_State *L, const sx_require *rules);

/* Replaces package.searchers of the package table at idx by { preload,
   the dependency searcher }. */
void sx_set_searchers(lua_State *L, int package_idx);

#endif
