/* The Program methods that set a program up (their table is in
   lprogram.c): its handlers (register, attach, missing_handlers) and its
   configuration (configure: sinks, clock, lookup, contexts, stores). */
#include "lconfigure.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "compat.h"
#include "errors.h"
#include "idem.h"
#include "idem_file.h"
#include "idem_redis.h"
#include "idem_sqlite.h"
#include "lerror.h"
#include "lmodule.h"
#include "luma_limits.h"
#include "journal.h"
#include "ljournal.h"
#include "record.h"
#include "telemetry.h"

static int conflict(lua_State *L, const pm_tool *t) {
  char msg[300];
  le_format(msg, sizeof msg, LE_TOOL_REGISTRY_CONFLICT, t->name);
  return le_raise_code(L, LE_TOOL_REGISTRY_CONFLICT, msg, 0);
}

int lg_register(lua_State *L, pl_program *pg, const pm_tool *t) {
  luaL_checktype(L, 3, LUA_TFUNCTION);
  if (pl_register_host(L, pg, t, 3) != 0) return conflict(L, t);
  lua_settop(L, 1);
  return 1;
}

int lg_attach(lua_State *L, pl_program *pg) {
  sx_module *m = lm_check(L, 2);
  int n;
  const char *const *names = sx_exports(m, &n);
  lua_newtable(L);
  int k = 0;
  for (int i = 0; i < n; i++) {
    const pm_tool *t = pm_find_tool(pg->p, names[i]);
    if (!t) continue;
    int r = pl_register_module(pg, t, m);
    if (r == -2) return luaL_error(L, "out of memory");
    if (r != 0) return conflict(L, t);
    lua_pushstring(L, t->name);
    lua_rawseti(L, -2, ++k);
  }
  return 1;
}

int lg_missing(lua_State *L, pl_program *pg) {
  lua_newtable(L);
  int k = 0;
  for (int i = 0; i < pg->p->ntools; i++)
    if (pg->kind[i] == PL_NONE && pg->p->tools[i]->handler != HANDLER_HOST) {
      lua_pushstring(L, pg->p->tools[i]->name);
      lua_rawseti(L, -2, ++k);
    }
  return 1;
}

/* Which of a program's stores configure sets: the idempotency records, or
   the cache shared across processes (cache_store). */
typedef struct store_kind {
  const char *what;         /* in messages */
  const char *key_env;      /* the encryption key's variable */
  const char *code;         /* of an error opening it */
} store_kind;

static const store_kind IDEMPOTENCY = { "idempotency store", "LUMA_IDEMPOTENCY_KEY", "IDEMPOTENCY_STORE_ERROR" };
static const store_kind CACHE = { "cache store", "LUMA_CACHE_KEY", "CACHE_STORE_ERROR" };

static void install_store(pl_program *pg, const store_kind *k, id_store *st, long long ttl_ms) {
  if (k == &IDEMPOTENCY) {
    id_close(pg->idem);
    pg->idem = st;
  } else {
    id_close(pg->cache);
    pg->cache = st;
    pg->cache_ttl_ms = ttl_ms > 0 ? ttl_ms : LIM_CACHE_TTL_MS;
  }
}

/* configure's `idempotency` or `cache` for redis: { url, prefix, lease_ms, password_env, on_unavailable } */
static int configure_redis(lua_State *L, pl_program *pg, int spec, const store_kind *k, long long ttl_ms) {
  id_redis_options o = { 0 };
  lua_getfield(L, spec, "url");
  o.url = luaL_checkstring(L, -1);
  lua_getfield(L, spec, "prefix");
  o.prefix = lua_tostring(L, -1);
  lua_getfield(L, spec, "lease_ms");
  o.lease_ms = lc_isinteger(L, -1) ? (long long)lua_tointeger(L, -1) : 0;
  lua_getfield(L, spec, "on_unavailable");
  o.run_when_unavailable = lua_isstring(L, -1) && strcmp(lua_tostring(L, -1), "run") == 0;
  lua_getfield(L, spec, "encryption");
  if (!lua_isnil(L, -1)) {
    o.passphrase = pl_lookup(L, pg, k->key_env);
    if (!o.passphrase || !*o.passphrase) {
      lua_pushfstring(L, "The %s is encrypted (aes-256-gcm), but %s is not set.", k->what, k->key_env);
      return le_raise(L, k->code, lua_tostring(L, -1), 0);
    }
  }
  lua_getfield(L, spec, "password_env");
  if (lua_isstring(L, -1)) {
    const char *name = lua_tostring(L, -1);
    o.password = pl_lookup(L, pg, name);
    if (!o.password || !*o.password) {
      lua_pushfstring(L, "The redis %s takes its password from %s, which is not set.", k->what, name);
      return le_raise(L, k->code, lua_tostring(L, -1), 0);
    }
  }
  char err[512];
  id_store *st = id_open_redis(&o, err, sizeof err);
  if (!st) {
    lua_pushfstring(L, "Cannot open the %s: %s", k->what, err);
    return le_raise(L, k->code, lua_tostring(L, -1), 0);
  }
  install_store(pg, k, st, ttl_ms);
  return 0;
}

/* configure's `idempotency` or `cache` = { backend, path, encryption, ttl_ms (cache) } */
static int configure_store(lua_State *L, pl_program *pg, int spec, const store_kind *k) {
  lua_getfield(L, spec, "backend");
  const char *backend = luaL_optstring(L, -1, "memory");
  lua_getfield(L, spec, "path");
  const char *path = lua_tostring(L, -1);
  lua_getfield(L, spec, "encryption");
  int encrypt = !lua_isnil(L, -1);
  lua_getfield(L, spec, "ttl_ms");
  long long ttl_ms = lc_isinteger(L, -1) ? (long long)lua_tointeger(L, -1) : 0;
  if (strcmp(backend, "memory") == 0) {
    /* the cache's memory store is the program's own table (cache.c) */
    if (k == &CACHE) install_store(pg, k, NULL, ttl_ms);
    return 0;
  }
  if (strcmp(backend, "redis") == 0) return configure_redis(L, pg, spec, k, ttl_ms);
  int sqlite = strcmp(backend, "sqlite") == 0;
  if (!sqlite && strcmp(backend, "file") != 0)
    return luaL_error(L, "configure: unknown %s backend '%s' (memory, file, sqlite or redis)", k->what, backend);
  if (!path) return luaL_error(L, "configure: the %s %s needs a path", backend, k->what);
  const char *pass = NULL;
  if (encrypt) {
    pass = pl_lookup(L, pg, k->key_env);
    if (!pass || !*pass) {
      lua_pushfstring(L, "The %s is encrypted (aes-256-gcm), but %s is not set.", k->what, k->key_env);
      return le_raise(L, k->code, lua_tostring(L, -1), 0);
    }
  }
  char err[512];
  id_store *st = sqlite ? id_open_sqlite(path, pass, err, sizeof err) : id_open_file(path, pass, pl_wall_ms(L, pg), err, sizeof err);
  if (!st) {
    lua_pushfstring(L, "Cannot open the %s '%s': %s", k->what, path, err);
    return le_raise(L, k->code, lua_tostring(L, -1), 0);
  }
  char moved[512];
  int quarantined = id_quarantined(st, moved, sizeof moved);
  install_store(pg, k, st, ttl_ms);
  if (quarantined) {
    lua_pushfstring(L, "the %s '%s' was corrupt: it was moved to '%s' and a new one created", k->what, path, moved);
    st_warn(L, pg, lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  return 0;
}

/* program:configure{ contexts =, on_event =, clock =, approve =, lookup =,
   trace =, record =, replay =, replay_seed =, journal =, journal_lease_ms =, idempotency =, cache =, default_timeout_ms = } */
int lg_configure(lua_State *L, pl_program *pg) {
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_rawgeti(L, LUA_REGISTRYINDEX, pg->anchor);
  int anchor = lua_gettop(L);
  static const char *const keys[] = { "contexts", "on_event", "clock", "approve", "lookup" };
  static const int types[] = { LUA_TTABLE, LUA_TFUNCTION, LUA_TTABLE, LUA_TFUNCTION, LUA_TFUNCTION };
  int *flags[] = { NULL, &pg->has_sink, &pg->has_clock, &pg->has_approve, &pg->has_lookup };
  for (int i = 0; i < 5; i++) {
    lua_getfield(L, 2, keys[i]);
    if (!lua_isnil(L, -1)) {
      if (lua_type(L, -1) != types[i])
        return luaL_error(L, "configure: '%s' must be a %s", keys[i], lua_typename(L, types[i]));
      lua_setfield(L, anchor, keys[i]);
      if (flags[i]) *flags[i] = 1;
    } else {
      lua_pop(L, 1);
    }
  }
  lua_getfield(L, 2, "trace");
  if (!lua_isnil(L, -1)) {
    const char *path = luaL_checkstring(L, -1);
    FILE *f = fopen(path, "a");
    if (!f) {
      lua_pushfstring(L, "cannot open the trace file '%s'", path);
      return le_raise(L, "IO_ERROR", lua_tostring(L, -1), 0);
    }
    if (pg->trace) fclose(pg->trace);
    pg->trace = f;
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "record");
  if (!lua_isnil(L, -1)) {
    char err[300];
    rc_recorder *r = rc_record_open(luaL_checkstring(L, -1), err, sizeof err);
    if (!r) return le_raise(L, "IO_ERROR", err, 0);
    rc_record_close(pg->record);
    pg->record = r;
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "journal");
  if (!lua_isnil(L, -1)) {
    jr_journal *j = ljr_open(L, -1, pg);   /* (ljournal.h: a path, or { type, ... }) */
    jr_close(pg->journal);
    pg->journal = j;
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "journal_lease_ms");
  if (!lua_isnil(L, -1)) {
    lua_Integer ms = lc_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
    if (ms < LIM_JOURNAL_LEASE_MIN_MS || ms > LIM_TIMEOUT_CAP_MS)
      return luaL_error(L, "configure: 'journal_lease_ms' must be an integer from %d to %d", (int)LIM_JOURNAL_LEASE_MIN_MS,
                        (int)LIM_TIMEOUT_CAP_MS);
    pg->journal_lease_ms = ms;
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "replay");
  if (!lua_isnil(L, -1)) {
    char err[300];
    rc_replay *r = rc_replay_open(luaL_checkstring(L, -1), err, sizeof err);
    if (!r) return le_raise(L, "IO_ERROR", err, 0);
    rc_replay_close(pg->replay);
    pg->replay = r;
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "replay_seed");
  if (!lua_isnil(L, -1)) {
    if (!lc_isinteger(L, -1)) return luaL_error(L, "configure: 'replay_seed' must be an integer");
    if (!pg->replay) return luaL_error(L, "configure: 'replay_seed' goes with 'replay' (a recording to replay)");
    rc_replay_seed(pg->replay, (unsigned long long)lua_tointeger(L, -1));
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "idempotency");
  if (!lua_isnil(L, -1)) {
    luaL_checktype(L, -1, LUA_TTABLE);
    configure_store(L, pg, lua_gettop(L), &IDEMPOTENCY);
  }
  lua_settop(L, anchor);
  lua_getfield(L, 2, "cache");
  if (!lua_isnil(L, -1)) {
    luaL_checktype(L, -1, LUA_TTABLE);
    configure_store(L, pg, lua_gettop(L), &CACHE);
  }
  lua_settop(L, anchor);
  lua_getfield(L, 2, "default_timeout_ms");
  if (!lua_isnil(L, -1)) {
    if (!lc_isinteger(L, -1) || lua_tointeger(L, -1) <= 0)
      return luaL_error(L, "configure: 'default_timeout_ms' must be a positive integer");
    pg->default_timeout_ms = (long long)lua_tointeger(L, -1);
  }
  lua_settop(L, 1);
  return 1;
}
