/* The Lua binding of the journal's runs (ljournal.h). */
#include "ljournal.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compat.h"
#include "lerror.h"
#include "ljson.h"

jr_journal *ljr_open(lua_State *L, int spec, pl_program *pg) {
  jr_options o = { 0 };
  int top = lua_gettop(L);
  spec = lc_absindex(L, spec);
  if (lua_type(L, spec) == LUA_TSTRING) {
    o.path = lua_tostring(L, spec);
  } else {
    luaL_checktype(L, spec, LUA_TTABLE);
    lua_getfield(L, spec, "type");
    int redis = lua_isstring(L, -1) && strcmp(lua_tostring(L, -1), "redis") == 0;
    lua_getfield(L, spec, redis ? "url" : "path");
    const char *where = luaL_checkstring(L, -1);
    if (redis) o.url = where;
    else o.path = where;
    lua_getfield(L, spec, "sync");
    o.sync = lua_toboolean(L, -1);
    lua_getfield(L, spec, "prefix");
    o.prefix = lua_tostring(L, -1);
    lua_getfield(L, spec, "password_env");
    if (lua_isstring(L, -1)) {
      const char *name = lua_tostring(L, -1);
      if (pg) {
        o.password = pl_lookup(L, pg, name);
      } else {
        o.password = getenv(name);
      }
      if (!o.password || !*o.password) {
        lua_pushfstring(L, "The redis journal takes its password from %s (journal.password_env), which is not set.",
                        name);
        le_raise(L, "JOURNAL_ERROR", lua_tostring(L, -1), 0);
        return NULL;
      }
    }
  }
  char err[512];
  jr_journal *j = jr_open(&o, err, sizeof err);
  if (!j) {
    le_raise(L, "JOURNAL_ERROR", err, 0);
    return NULL;
  }
  lua_settop(L, top);
  return j;
}

static long long wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct listing {
  lua_State *L;
  int n;
  long long now;
} listing;

static void set_str(lua_State *L, const char *k, const char *v) {
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

static void set_int(lua_State *L, const char *k, long long v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, k);
}

/* Each run as { id, status, step, owner, created_ms, updated_ms,
   lease_until_ms, age_ms, records } into the array on top. */
static int push_run(void *arg, const jr_run *r) {
  listing *ls = arg;
  lua_State *L = ls->L;
  lua_createtable(L, 0, 9);
  set_str(L, "id", r->id);
  set_str(L, "status", jr_state_name(r));
  set_str(L, "step", r->step);
  set_str(L, "owner", r->owner);
  set_int(L, "created_ms", r->created_ms);
  set_int(L, "updated_ms", r->updated_ms);
  set_int(L, "lease_until_ms", r->lease_until_ms);
  set_int(L, "age_ms", ls->now > r->created_ms ? ls->now - r->created_ms : 0);
  set_int(L, "records", r->records);
  lua_rawseti(L, -2, ++ls->n);
  return 0;
}

/* core.journal_runs(spec) -> { run, ... }, the most recently changed first */
static int l_runs(lua_State *L) {
  jr_journal *j = ljr_open(L, 1, NULL);
  char err[512];
  lua_newtable(L);
  lj_push_array_mt(L);   /* (an empty list is [] in JSON) */
  lua_setmetatable(L, -2);
  listing ls = { L, 0, wall_ms() };
  int rc = jr_list(j, push_run, &ls, err, sizeof err);
  jr_close(j);
  if (rc != 0) return le_raise(L, "JOURNAL_ERROR", err, 0);
  return 1;
}

/* core.journal_prune(spec, older_than_ms) -> how many runs were deleted */
static int l_prune(lua_State *L) {
  lua_Integer older = luaL_checkinteger(L, 2);
  luaL_argcheck(L, older >= 0, 2, "older_than_ms must be at least 0");
  jr_journal *j = ljr_open(L, 1, NULL);
  char err[512];
  long long n = jr_prune(j, wall_ms() - (long long)older, err, sizeof err);
  jr_close(j);
  if (n < 0) return le_raise(L, "JOURNAL_ERROR", err, 0);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

void ljr_open_lib(lua_State *L) {
  static const luaL_Reg fns[] = {
    { "journal_runs", l_runs },
    { "journal_prune", l_prune },
    { NULL, NULL },
  };
  lc_setfuncs(L, fns, 0);
}
