/* The libraries of a strict state (strict.c), from what the policy allows;
   its io, json and crypto are in files of their own. */
#ifndef LUMA_SANDBOX_STRICT_H
#define LUMA_SANDBOX_STRICT_H

#include <lua.h>

#include "sandbox.h"

/* What a strict state's libraries depend on. */
typedef struct sx_strict {
  const sx_policy *policy;
  const char *project_root;       /* files io may open stay inside it; NULL: none */
} sx_strict;

/* The libraries, from an allowlist; then (once everything is in place) the
   read-only library tables and hidden metatables; after the module's code
   ran, the locked globals. Each raises on error: call them protected. */
void sx_open_strict(lua_State *L, const sx_strict *conf);
void sx_freeze_strict(lua_State *L);
void sx_lock_globals(lua_State *L);

/* Push the io, json and crypto tables of a strict state (strict_io.c,
   strict_json.c, strict_crypto.c). */
void sx_push_strict_io(lua_State *L, const char *project_root);
void sx_push_strict_json(lua_State *L);
void sx_push_strict_crypto(lua_State *L);

#endif
