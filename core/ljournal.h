/* The Lua binding of the journal's runs (journal.h): the one reading of a
   journal's spec (luma.load's journal option, as config.journal gives it),
   and core.journal_runs and core.journal_prune, for luma.runs,
   luma.prune_runs and `luma-lua runs`. */
#ifndef LUMA_LJOURNAL_H
#define LUMA_LJOURNAL_H

#include <lua.h>

#include "journal.h"
#include "pipeline.h"

/* Opens the journal the value at spec names: a SQLite file's path, or
   { type = "sqlite", path, sync } or { type = "redis", url, prefix,
   password_env } (the variable read through pg's lookup; pg NULL: the
   environment). The journal, or raises JOURNAL_ERROR. The stack is kept. */
jr_journal *ljr_open(lua_State *L, int spec, pl_program *pg);

/* Adds journal_runs(spec) and journal_prune(spec, older_than_ms) to the
   table on top. */
void ljr_open_lib(lua_State *L);

#endif
