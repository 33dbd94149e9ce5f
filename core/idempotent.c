/* STEP_IDEMPOTENCY (steps.h) and its settlement in STEP_RECORD: idempotent tools run once per key.
   A call whose key (and input) matches a call in flight of this program
   shares its run; otherwise the store decides: run (a claim is held),
   replay, conflict, or wait for the claim of another process or call. */
#include "idempotent.h"

#include "pipeline.h"

#include "luma_limits.h"

#include <stdlib.h>
#include <string.h>

#include "compat.h"
#include "crypto.h"
#include "idem.h"
#include "lerror.h"
#include "json.h"
#include "ljson.h"
#include "runtime.h"
#include "strbuf.h"


/* Pushes the idempotency key of the input as a string (SV_NEXT). */
static st_verdict push_key(lua_State *T, cl_call *c) {
  const pm_tool *t = c->t;
  lua_pushvalue(T, CV_INPUT);
  for (int i = 0; i < t->idempotency_key.n; i++) {
    if (lua_type(T, -1) != LUA_TTABLE) break;
    lua_pushstring(T, t->idempotency_key.items[i]);
    lua_rawget(T, -2);
    lua_remove(T, -2);
  }
  switch (lua_type(T, -1)) {
    case LUA_TSTRING: return sv_next();
    case LUA_TBOOLEAN:
      lua_pushstring(T, lua_toboolean(T, -1) ? "true" : "false");
      lua_remove(T, -2);
      return sv_next();
    case LUA_TNUMBER: {
      sb_buf b;
      sb_init(&b);
      char why[64];
      int r = lj_encode(T, -1, &b, 0, 1, why, sizeof why);
      if (r == 0) lua_pushlstring(T, b.data ? b.data : "", b.len);
      sb_free(&b);
      if (r != 0) break;
      lua_remove(T, -2);
      return sv_next();
    }
    default: break;
  }
  return st_fail(T, LE_TOOL_INPUT_INVALID, "Tool '%s' has no usable idempotency key in its input.", t->name);
}

static st_verdict conflict(lua_State *T, cl_call *c) {
  return st_fail(T, LE_TOOL_IDEMPOTENCY_CONFLICT,
                 "Tool '%s' was already called with idempotency key '%.200s' and another input.", c->t->name, c->ikey);
}

st_verdict st_idem_lookup(lua_State *T, cl_call *c) {
  const pm_tool *t = c->t;
  st_verdict v = push_key(T, c);
  if (v.kind != SV_NEXT) return v;
  lua_replace(T, CV_IKEY);
  size_t len;
  const char *key = lua_tolstring(T, CV_IKEY, &len);
  free(c->ikey);
  c->ikey = malloc(len + 1);
  if (!c->ikey) return st_fail(T, LE_TOOL_FAILED, "out of memory");
  memcpy(c->ikey, key, len + 1);
  c->ikeylen = len;
  sb_buf b;
  sb_init(&b);
  char err[256];
  if (lj_encode(T, CV_INPUT, &b, 0, LIM_INPUT_KEY_DEPTH, err, sizeof err) != 0) {
    sb_free(&b);
    return st_fail(T, LE_TOOL_INPUT_INVALID, "%s.input cannot be hashed: %s", t->name, err);
  }
  cr_sha256_hex(b.data ? b.data : "", b.len, c->hash);
  sb_free(&b);
  /* a call in flight of this program holding the same key */
  for (cl_call *o = c->pg->active; o; o = o->pg_next) {
    if (o == c || o->t != t || !o->held || o->ikeylen != len || memcmp(o->ikey, key, len) != 0) continue;
    if (strcmp(o->hash, c->hash) != 0) return conflict(T, c);
    c->leader = o;
    o->refs++;
    c->ev.idempotent_replay = 1;
    return sv_is(SV_FOLLOW);
  }
  return st_idem_begin(T, c);
}

/* From the store's renewing thread: the claim expired under the handler, and
   another call may run it now. The handler's signal fires (as a cancel
   does); STEP_RECORD then says why. */
static void claim_lost(void *arg) {
  cl_call *c = arg;
  __atomic_store_n(&c->claim_lost, 1, __ATOMIC_RELEASE);
  rt_cancel_job(c->rt, c);
}

/* From any thread: a claim of the store ended; the waiting call looks again. */
static void claim_ended(void *arg) {
  cl_call *c = arg;
  __atomic_store_n(&c->iwoken, 1, __ATOMIC_RELEASE);
  rt_notify(c->rt);
}

void st_idem_unwatch(cl_call *c) {
  if (!c->iwatch) return;
  id_watch_stop(c->iwatch_store, c->iwatch);
  c->iwatch = NULL;
  c->iwatch_store = NULL;
}

/* A wait that reached the call's deadline: retryable, as the claim ends
   with its holder (a holder that died stops renewing it). */
static st_verdict waited_out(lua_State *T, cl_call *c, long long lease_left) {
  char msg[600];
  int n = snprintf(msg, sizeof msg, "Tool '%s' timed out waiting for another call with idempotency key '%.200s'",
                   c->t->name, c->ikey);
  if (lease_left >= 0)
    snprintf(msg + n, sizeof msg - (size_t)n, ": its holder may have died, and its claim ends in %lld ms unless "
             "renewed; retry then.", lease_left);
  else
    snprintf(msg + n, sizeof msg - (size_t)n, ", whose process still runs; retry later.");
  lua_createtable(T, 0, 1);
  lua_pushinteger(T, lease_left);
  lua_setfield(T, -2, "lease_left_ms");
  le_push(T, le_name(LE_TOOL_TIMEOUT), msg, 1, -1);
  lua_remove(T, -2);
  return sv_is(SV_ERROR);
}

st_verdict st_idem_begin(lua_State *T, cl_call *c) {
  pl_program *pg = c->pg;
  const pm_tool *t = c->t;
  char err[256];
  char *stored = NULL;
  long long lease_left = -1;
  /* cleared before the look: a claim that ends after it wakes the call */
  __atomic_store_n(&c->iwoken, 0, __ATOMIC_RELEASE);
  id_status st = id_begin(pg->idem, t->name, c->ikey, c->ikeylen, c->hash, pl_wall_ms(T, pg), &stored, &lease_left,
                          err, sizeof err);
  if (st != ID_WAIT) st_idem_unwatch(c);
  switch (st) {
    case ID_RUN:
      c->held = 1;
      __atomic_store_n(&c->claim_lost, 0, __ATOMIC_RELEASE);
      /* renewed while the handler runs; a lost claim fires its signal */
      id_keep(pg->idem, t->name, c->ikey, c->ikeylen, c->hash, claim_lost, c);
      return sv_next();
    case ID_REPLAY: {
      int read = lj_push_text(T, stored, strlen(stored), LIM_IDEM_MAX_DEPTH, err, sizeof err);
      free(stored);
      if (!read) return st_fail(T, LE_IDEMPOTENCY_STORE_ERROR, "A stored result of tool '%s' cannot be read: %s", t->name, err);
      c->ev.idempotent_replay = 1;
      return sv_is(SV_RESULT);
    }
    case ID_CONFLICT:
      return conflict(T, c);
    case ID_RUN_UNGUARDED:
      return sv_next();   /* the store said so: the handler runs without the guarantee */
    case ID_UNAVAILABLE:
      return st_fail(T, LE_TOOL_IDEMPOTENCY_UNAVAILABLE, "Tool '%s' did not run: %s.", t->name, err);
    case ID_WAIT: {
      /* another process, or another call, runs it: look again when a claim
         ends (the store says so), or after a wait that doubles up to a cap,
         or when the holder's lease ends */
      long long now = pl_mono_ms(T, pg);
      if (now >= c->deadline) { st_idem_unwatch(c); return waited_out(T, c, lease_left); }
      if (!c->iwatch) {
        c->iwatch = id_watch_start(pg->idem, claim_ended, c);
        c->iwatch_store = c->iwatch ? pg->idem : NULL;
      }
      c->iwait_ms = c->iwait_ms ? c->iwait_ms * 2 : LIM_IDEM_WAIT_MIN_MS;
      if (c->iwait_ms > LIM_IDEM_WAIT_MAX_MS) c->iwait_ms = LIM_IDEM_WAIT_MAX_MS;
      long long at = now + c->iwait_ms;
      if (lease_left >= 0 && now + lease_left + 1 < at) at = now + lease_left + 1;
      if (at > c->deadline) at = c->deadline;
      return sv_at(SV_WAIT, at);
    }
    default:
      return st_fail(T, LE_IDEMPOTENCY_STORE_ERROR, "The idempotency store failed for tool '%s': %s", t->name, err);
  }
}

st_verdict st_idem_settle(lua_State *T, cl_call *c, int result) {
  pl_program *pg = c->pg;
  const pm_tool *t = c->t;
  if (!c->held) return sv_next();
  c->held = 0;
  if (__atomic_load_n(&c->claim_lost, __ATOMIC_ACQUIRE)) {
    id_abort(pg->idem, t->name, c->ikey, c->ikeylen);
    return st_fail(T, LE_IDEMPOTENCY_STORE_ERROR,
                   "Tool '%s' lost its claim on idempotency key '%.200s' while its handler ran (the claim was not "
                   "renewed in time, was removed, or another call holds it now); its result was not stored.",
                   t->name, c->ikey);
  }
  if (!result) {
    id_abort(pg->idem, t->name, c->ikey, c->ikeylen);
    return sv_next();
  }
  sb_buf b;
  sb_init(&b);
  char err[256];
  int r = lj_encode(T, CV_VALUE, &b, 0, LIM_IDEM_MAX_DEPTH - 1, err, sizeof err);
  if (r == 0)
    r = id_commit(pg->idem, t->name, c->ikey, c->ikeylen, c->hash, b.data ? b.data : "null", b.len, pl_wall_ms(T, pg),
                  t->idempotency_ttl_ms, err, sizeof err);
  sb_free(&b);
  if (r == ID_COMMIT_UNREACHABLE) {
    /* the effect happened: the result is tried again until the deadline */
    long long now = pl_mono_ms(T, pg);
    if (now + LIM_IDEM_STORE_RETRY_MS < c->deadline && !__atomic_load_n(&c->cancelled, __ATOMIC_ACQUIRE)) {
      c->held = 1;
      return sv_at(SV_WAIT, now + LIM_IDEM_STORE_RETRY_MS);
    }
    return st_fail(T, LE_IDEMPOTENCY_STORE_ERROR,
                   "The handler of tool '%s' ran, but its result could not be stored before the call's deadline: %s. "
                   "This is the one case where the key may run again: a call with idempotency key '%.200s' runs the "
                   "handler again once the claim's lease ends.", t->name, err, c->ikey);
  }
  if (r != 0) {
    id_abort(pg->idem, t->name, c->ikey, c->ikeylen);
    return st_fail(T, LE_IDEMPOTENCY_STORE_ERROR, "The result of tool '%s' could not be stored: %s", t->name, err);
  }
  return sv_next();
}
