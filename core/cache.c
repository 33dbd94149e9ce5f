/* Step 8: the cache (cache: true), keyed by the tool's name and its input's
   canonical JSON, kept for the program's life; and single flight: a call
   whose key matches a call in flight shares that call's run. */
#include "steps.h"

#include "luma_limits.h"

#include "ljson.h"
#include "strbuf.h"

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

int st_cache_lookup(lua_State *T, cl_call *c) {
  if (!c->t->cache) return 0;
  push_key(T, c->t);
  lua_replace(T, CV_CKEY);
  if (lua_isnil(T, CV_CKEY)) return 0;
  cl_call *lead = leader_for(T, c);
  if (lead) {
    c->leader = lead;
    lead->refs++;
    c->ev.single_flight = 1;
    return 1;
  }
  pl_push_anchor(T, c->pg, "cache");
  lua_pushvalue(T, CV_CKEY);
  lua_rawget(T, -2);
  char err[200];
  if (!lua_isnil(T, -1) && sx_copy(T, -1, T, &c->pg->limits, err, sizeof err) == 0) {
    c->ev.cache_hit = 1;
    st_ok_top(T, c);
    return 1;
  }
  return 0;
}

void st_cache_store(lua_State *T, cl_call *c) {
  if (lua_isnil(T, CV_CKEY)) return;
  char err[200];
  pl_push_anchor(T, c->pg, "cache");
  lua_pushvalue(T, CV_CKEY);
  if (sx_copy(T, CV_VALUE, T, &c->pg->limits, err, sizeof err) == 0) lua_rawset(T, -3);
  else lua_pop(T, 1);
  lua_pop(T, 1);
}
