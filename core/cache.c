/* STEP_CACHE (steps.h): the cache (cache: true), keyed by the tool's name and its input's
   canonical JSON; and single flight: a call whose key matches a call in
   flight shares that call's run.

   Without a cache_store the entries live in the program's own table for its
   life. With one (file, sqlite, redis: an id_store, as for idempotency), they
   are shared by every process using the store, for cache_ttl_ms: the key is
   the hash of the canonical input, and a process that finds the entry being
   computed by another waits for it (single flight across processes). A store
   that cannot be reached or read is passed by: the call runs uncached. */
#include "cache.h"

#include "pipeline.h"

#include "luma_limits.h"

#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "idem.h"
#include "ljson.h"
#include "strbuf.h"

/* An entry being computed elsewhere is looked at again after this long. */
#define ST_CACHE_WAIT_MS 10

/* Pushes the cache key of the input, or nil when it cannot have one. */
static void push_key(lua_State *T, const pm_tool *t) {
  sb_buf b;
  sb_init(&b);
  char why[128];
  if (lj_encode(T, CV_INPUT, &b, 0, LIM_INPUT_KEY_DEPTH, why, sizeof why) == 0) {
    lua_pushfstring(T, "%s\n", t->name);
    lua_pushlstring(T, b.data ? b.data : "", b.len);
    lua_concat(T, 2);
  } else {
    lua_pushnil(T);
  }
  sb_free(&b);
}

/* The call in flight with the same key that runs the handler (not itself a
   follower, not yet done). */
static cl_call *leader_for(lua_State *T, cl_call *c) {
  for (cl_call *o = c->pg->active; o; o = o->pg_next) {
    if (o == c || o->t != c->t || o->leader || o->state < CS_RUN || o->state >= CS_FINISH) continue;
    lua_pushvalue(o->T, CV_CKEY);
    lua_xmove(o->T, T, 1);
    int same = lua_rawequal(T, -1, CV_CKEY);
    lua_pop(T, 1);
    if (same) return o;
  }
  return NULL;
}

/* The cache_store's answer for the key in c->chash (see st_cache_lookup). */
static st_verdict shared_lookup(lua_State *T, cl_call *c) {
  pl_program *pg = c->pg;
  const pm_tool *t = c->t;
  char err[256];
  char *stored = NULL;
  id_status st = id_begin(pg->cache, t->name, c->chash, 64, c->chash, pl_wall_ms(T, pg), &stored, NULL, err,
                          sizeof err);
  switch (st) {
    case ID_RUN:
      c->cache_held = 1;
      return sv_next();
    case ID_REPLAY: {
      int read = lj_push_text(T, stored, strlen(stored), LIM_IDEM_MAX_DEPTH, err, sizeof err);
      free(stored);
      if (!read) return sv_next();   /* an entry that cannot be read is a miss */
      c->ev.cache_hit = 1;
      return sv_is(SV_RESULT);
    }
    case ID_WAIT: {
      long long now = pl_mono_ms(T, pg);
      if (now + ST_CACHE_WAIT_MS >= c->deadline)
        return st_fail(T, LE_TOOL_TIMEOUT, "Tool '%s' timed out waiting for another process computing the same call.",
                       t->name);
      return sv_at(SV_WAIT, now + ST_CACHE_WAIT_MS);
    }
    default:
      return sv_next();   /* unavailable, or failing: the call runs uncached */
  }
}

st_verdict st_cache_lookup(lua_State *T, cl_call *c) {
  if (!c->t->cache) return sv_next();
  /* a call that polls another process's entry (CS_CACHE_WAIT) looks again
     with the key and hash it made the first time */
  if (lua_isnil(T, CV_CKEY)) {
    push_key(T, c->t);
    lua_replace(T, CV_CKEY);
    if (lua_isnil(T, CV_CKEY)) return sv_next();
  }
  cl_call *lead = leader_for(T, c);
  if (lead) {
    c->leader = lead;
    lead->refs++;
    c->ev.single_flight = 1;
    return sv_is(SV_FOLLOW);
  }
  if (c->pg->cache) {
    if (!c->chash[0]) {
      size_t len;
      const char *key = lua_tolstring(T, CV_CKEY, &len);
      cr_sha256_hex(key, len, c->chash);
    }
    return shared_lookup(T, c);
  }
  pl_push_anchor(T, c->pg, "cache");
  lua_pushvalue(T, CV_CKEY);
  lua_rawget(T, -2);
  char err[200];
  if (!lua_isnil(T, -1) && sx_copy(T, -1, T, &c->pg->limits, err, sizeof err) == 0) {
    c->ev.cache_hit = 1;
    return sv_is(SV_RESULT);
  }
  return sv_next();
}

void st_cache_release(cl_call *c) {
  if (!c->cache_held) return;
  c->cache_held = 0;
  id_abort(c->pg->cache, c->t->name, c->chash, 64);
}

void st_cache_store(lua_State *T, cl_call *c) {
  if (lua_isnil(T, CV_CKEY)) return;
  char err[200];
  if (c->pg->cache) {
    if (!c->cache_held) return;
    sb_buf b;
    sb_init(&b);
    int r = lj_encode(T, CV_VALUE, &b, 0, LIM_IDEM_MAX_DEPTH - 1, err, sizeof err);
    if (r == 0)
      r = id_commit(c->pg->cache, c->t->name, c->chash, 64, c->chash, b.data ? b.data : "null", b.len,
                    pl_wall_ms(T, c->pg), c->pg->cache_ttl_ms, err, sizeof err);
    sb_free(&b);
    if (r == 0) c->cache_held = 0;
    else st_cache_release(c);
    return;
  }
  pl_push_anchor(T, c->pg, "cache");
  lua_pushvalue(T, CV_CKEY);
  if (sx_copy(T, CV_VALUE, T, &c->pg->limits, err, sizeof err) == 0) lua_rawset(T, -3);
  else lua_pop(T, 1);
  lua_pop(T, 1);
}
