#include "pipeline.h"

#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>

#include "compat.h"
#include "crypto.h"
#include "idem.h"
#include "json.h"
#include "lerror.h"
#include "ljson.h"
#include "lprogram.h"
#include "sandbox.h"

/* ------------------------------------------------------------- runtime */

pl_runtime *pl_new(lua_State *L, pm_program *p, lv_program *v) {
  pl_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) return NULL;
  rt->p = p;
  rt->v = v;
  rt->kind = calloc((size_t)p->ntools + 1, sizeof *rt->kind);
  rt->module = calloc((size_t)p->ntools + 1, sizeof *rt->module);
  rt->idem = id_open_memory();
  rt->own_idem = 1;
  if (!rt->kind || !rt->module || !rt->idem) {
    pl_free(NULL, rt);
    return NULL;
  }
  rt->default_timeout_ms = 30000;
  sx_default_limits(&rt->limits);
  lua_createtable(L, 0, 8);
  lua_newtable(L);
  lua_setfield(L, -2, "modules");
  lua_newtable(L);
  lua_setfield(L, -2, "host");
  lua_newtable(L);
  lua_setfield(L, -2, "cache");
  rt->anchor = luaL_ref(L, LUA_REGISTRYINDEX);
  return rt;
}

void pl_free(lua_State *L, pl_runtime *rt) {
  if (!rt) return;
  if (L && rt->anchor) luaL_unref(L, LUA_REGISTRYINDEX, rt->anchor);
  if (rt->trace) fclose(rt->trace);
  if (rt->own_idem) id_close(rt->idem);
  free(rt->kind);
  free(rt->module);
  free(rt);
}

/* Pushes anchor[key]. */
static int push_anchor(lua_State *L, pl_runtime *rt, const char *key) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, rt->anchor);
  lua_getfield(L, -1, key);
  lua_remove(L, -2);
  return lua_type(L, -1);
}

int pl_register_host(lua_State *L, pl_runtime *rt, const pm_tool *t, int fn) {
  if (rt->kind[t->index] != PL_NONE) return -1;
  fn = lc_absindex(L, fn);
  push_anchor(L, rt, "host");
  lua_pushvalue(L, fn);
  lua_setfield(L, -2, t->name);
  lua_pop(L, 1);
  rt->kind[t->index] = PL_HOST;
  return 0;
}

int pl_register_module(lua_State *L, pl_runtime *rt, const pm_tool *t, sx_module *m, int module_idx) {
  if (rt->kind[t->index] != PL_NONE) return -1;
  module_idx = lc_absindex(L, module_idx);
  /* the runtime keeps the module's userdata alive */
  push_anchor(L, rt, "modules");
  lua_pushvalue(L, module_idx);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  rt->kind[t->index] = PL_MODULE;
  rt->module[t->index] = m;
  return 0;
}

/* --------------------------------------------------------------- clock */

/* Calls anchor.clock[name](arg) and returns its integer result. */
static long long lua_clock(lua_State *L, pl_runtime *rt, const char *name, long long arg, int with_arg) {
  push_anchor(L, rt, "clock");
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  if (with_arg) lua_pushinteger(L, (lua_Integer)arg);
  long long v = 0;
  if (lua_pcall(L, with_arg, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TNUMBER) v = (long long)lua_tonumber(L, -1);
  lua_pop(L, 1);
  return v;
}

long long pl_wall_ms(lua_State *L, pl_runtime *rt) {
  if (rt->has_clock) return lua_clock(L, rt, "now", 0, 0);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long pl_mono_ms(lua_State *L, pl_runtime *rt) {
  if (rt->has_clock) return lua_clock(L, rt, "now", 0, 0);
  return sx_now_ns() / 1000000;
}

static void sleep_ms(lua_State *L, pl_runtime *rt, long long ms) {
  if (ms <= 0) return;
  if (rt->has_clock) { lua_clock(L, rt, "sleep", ms, 1); return; }
  struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* ------------------------------------------------------------- errors */

/* Pushes an error of this tool, with the tool's name in it. */
static int fail(lua_State *L, const pm_tool *t, const char *code, const char *message) {
  le_push(L, code, message, 0, 0);
  lua_pushstring(L, t->name);
  lua_setfield(L, -2, "tool");
  return -1;
}

static int failf(lua_State *L, const pm_tool *t, const char *code, const char *fmt, const char *a, const char *b) {
  char msg[512];
  snprintf(msg, sizeof msg, fmt, a, b);
  return fail(L, t, code, msg);
}

/* Reads err.field raw from the error on top. */
static const char *error_code(lua_State *L, int e) {
  lua_pushstring(L, "code");
  lc_rawget(L, e);
  const char *code = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "TOOL_FAILED";
  lua_pop(L, 1);
  return code;
}

static int error_retryable(lua_State *L, int e) {
  lua_pushstring(L, "retryable");
  lc_rawget(L, e);
  int r = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return r;
}

/* Replaces the error on top by a validation error with code `code`. */
static int push_invalid(lua_State *L, const pm_tool *t, const char *code, const lv_result *r) {
  lp_push_validation_error(L, code, r);
  lua_pushstring(L, t->name);
  lua_setfield(L, -2, "tool");
  return -1;
}

/* ----------------------------------------------------------- telemetry */

typedef struct pl_event {
  int attempts;
  int cache_hit;
  int single_flight;
  int idempotent_replay;
  int warnings;               /* stack index of the warnings list, or 0 */
} pl_event;

static void emit(lua_State *L, pl_runtime *rt, pl_scope *sc, const pm_tool *t, const pl_event *ev,
                 int ok, int result, long long start) {
  if (!rt->has_sink && !rt->trace) return;
  long long duration = pl_mono_ms(L, rt) - start;
  lua_createtable(L, 0, 10);
  int e = lua_gettop(L);
  lua_pushstring(L, t->name);
  lua_setfield(L, e, "tool");
  if (sc && sc->agent) lua_pushstring(L, sc->agent->name); else lua_pushlightuserdata(L, NULL);
  lua_setfield(L, e, "agent");
  lua_pushstring(L, ok ? "ok" : "error");
  lua_setfield(L, e, "status");
  if (ok) lua_pushlightuserdata(L, NULL); else lua_pushstring(L, error_code(L, result));
  lua_setfield(L, e, "code");
  lua_pushinteger(L, ev->attempts);
  lua_setfield(L, e, "attempts");
  lua_pushinteger(L, (lua_Integer)duration);
  lua_setfield(L, e, "duration_ms");
  lua_pushboolean(L, ev->cache_hit);
  lua_setfield(L, e, "cache_hit");
  lua_pushboolean(L, ev->single_flight);
  lua_setfield(L, e, "single_flight");
  lua_pushboolean(L, ev->idempotent_replay);
  lua_setfield(L, e, "idempotent_replay");
  lua_createtable(L, 0, 0);
  int w = lua_gettop(L);
  if (ev->warnings) {
    int n = (int)lc_rawlen(L, ev->warnings);
    for (int i = 1; i <= n; i++) {
      lc_rawgeti(L, ev->warnings, i);
      lua_getfield(L, -1, "message");
      lua_rawseti(L, w, i);
      lua_pop(L, 1);
    }
  }
  lj_push_array_mt(L);
  lua_setmetatable(L, w);
  lua_setfield(L, e, "warnings");
  if (rt->trace) {
    sb_buf b;
    sb_init(&b);
    char err[128];
    if (lj_encode(L, e, &b, 0, 10, err, sizeof err) == 0) {
      fwrite(b.data, 1, b.len, rt->trace);
      fputc('\n', rt->trace);
      fflush(rt->trace);
    }
    sb_free(&b);
  }
  if (rt->has_sink) {
    push_anchor(L, rt, "on_event");
    lua_pushvalue(L, e);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
      const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "an error that is not a string";
      fprintf(stderr, "luma: on_event failed: %s\n", msg);
      lua_pop(L, 1);
    }
  }
  lua_settop(L, e - 1);
}

/* --------------------------------------------------------- permissions */

static int listed(const pm_strings *list, const char *s) {
  for (int i = 0; i < list->n; i++)
    if (strcmp(list->items[i], s) == 0) return 1;
  return 0;
}

static int agent_allows(const pm_agent *ag, const pm_tool *t) {
  for (int i = 0; i < ag->tools.n; i++)
    if (ag->tools.items[i] == t) return 1;
  return 0;
}

/* LUMA_APPROVED_TOOLS is a comma-separated list of tool names. */
static int approved_by_env(const char *tool) {
  const char *env = getenv("LUMA_APPROVED_TOOLS");
  size_t n = strlen(tool);
  while (env && *env) {
    while (*env == ',' || *env == ' ' || *env == '\t') env++;
    const char *end = env;
    while (*end && *end != ',') end++;
    const char *last = end;
    while (last > env && (last[-1] == ' ' || last[-1] == '\t')) last--;
    if ((size_t)(last - env) == n && strncmp(env, tool, n) == 0) return 1;
    env = end;
  }
  return 0;
}

/* On an interactive terminal the user is asked; anywhere else: no. */
static int approved_by_user(const pm_tool *t) {
  if (!isatty(STDIN_FILENO) || !isatty(STDERR_FILENO)) return 0;
  fprintf(stderr, "Allow the write tool '%s' to run? [y/N] ", t->name);
  fflush(stderr);
  char line[64];
  if (!fgets(line, sizeof line, stdin)) return 0;
  return line[0] == 'y' || line[0] == 'Y';
}

/* Steps 1 to 5. */
static int check_permissions(lua_State *L, pl_runtime *rt, const pm_agent *ag, const pm_tool *t) {
  if (ag && !agent_allows(ag, t))
    return failf(L, t, "TOOL_PERMISSION_DENIED", "Agent '%s' does not allow tool '%s' to be called directly.", ag->name, t->name);
  if (rt->kind[t->index] == PL_NONE)
    return failf(L, t, "TOOL_NOT_FOUND", "'%s' is not registered in the tool registry.", t->name, "");
  if (t->credential && !getenv(t->credential))
    return failf(L, t, "TOOL_PERMISSION_DENIED", "Tool '%s' is missing credential: %s.", t->name, t->credential);
  if (ag && t->scope && ag->tool_scopes.present && !listed(&ag->tool_scopes, t->scope))
    return failf(L, t, "TOOL_PERMISSION_DENIED", "Tool '%s' scope access was denied: %s.", t->name, t->scope);
  if (ag && t->side_effects == SE_WRITE && ag->tool_policy == POL_DENY_WRITE)
    return failf(L, t, "TOOL_PERMISSION_DENIED", "Tool '%s' writes, and agent '%s' has tool_policy deny_write.", t->name, ag->name);
  if (ag && t->side_effects == SE_WRITE && ag->tool_policy == POL_APPROVAL && !approved_by_env(t->name) && !approved_by_user(t))
    return failf(L, t, "TOOL_PERMISSION_DENIED", "Tool '%s' writes and was not approved: list it in LUMA_APPROVED_TOOLS (agent '%s' has tool_policy approval).", t->name, ag->name);
  return 0;
}

/* --------------------------------------------------------------- needs */

/* Pushes the value of one context field read from its environment variable. */
static int push_context_field(lua_State *L, const pm_tool *t, const char *need, const char *field, int spec) {
  lua_getfield(L, spec, "env");
  const char *var = lua_tostring(L, -1);
  lua_getfield(L, spec, "parse");
  const char *parse = lua_isnil(L, -1) ? "string" : lua_tostring(L, -1);
  lua_pop(L, 2);  /* both strings stay alive in the spec table */
  char msg[512];
  const char *value = var ? getenv(var) : NULL;
  if (!value) {
    snprintf(msg, sizeof msg, "Tool '%s' needs '%s', but %s (for %s) is not set.", t->name, need, var ? var : "?", field);
    return fail(L, t, "TOOL_CONTEXT_INVALID", msg);
  }
  char *end;
  if (strcmp(parse, "string") == 0) {
    lua_pushstring(L, value);
    return 0;
  }
  if (strcmp(parse, "boolean") == 0) {
    if (strcmp(value, "true") == 0 || strcmp(value, "false") == 0) {
      lua_pushboolean(L, value[0] == 't');
      return 0;
    }
  } else if (strcmp(parse, "integer") == 0) {
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (*value && !*end && errno == 0) {
      lua_pushinteger(L, (lua_Integer)v);
      return 0;
    }
  } else if (strcmp(parse, "number") == 0) {
    errno = 0;
    double d = strtod(value, &end);
    if (*value && !*end && errno == 0 && isfinite(d)) {
      lua_pushnumber(L, d);
      return 0;
    }
  } else if (strcmp(parse, "json") == 0) {
    ar_arena a;
    ar_init(&a);
    char why[128];
    jv *v = json_parse(&a, value, strlen(value), 64, why, sizeof why);
    if (v) lj_push(L, v, 0);
    ar_free(&a);
    if (v) return 0;
  }
  snprintf(msg, sizeof msg, "Tool '%s' needs '%s', but %s (for %s) is not a valid %s.", t->name, need, var, field, parse);
  return fail(L, t, "TOOL_CONTEXT_INVALID", msg);
}

/* Step 7: pushes the needs table (or nothing when the tool has none). */
static int resolve_needs(lua_State *L, pl_runtime *rt, const pm_agent *ag, const pm_tool *t, int *needs) {
  *needs = 0;
  if (t->nneeds == 0) return 0;
  lua_newtable(L);
  int out = lua_gettop(L);
  for (int i = 0; i < t->nneeds; i++) {
    const pm_need *need = &t->needs[i];
    if (ag && ag->tool_contexts.present && !listed(&ag->tool_contexts, need->name))
      return failf(L, t, "TOOL_CONTEXT_INVALID", "Tool '%s' needs '%s', which the agent's tool_contexts do not allow.", t->name, need->name);
    int found = push_anchor(L, rt, "contexts") == LUA_TTABLE;
    if (found) {
      lua_getfield(L, -1, need->name);
      lua_remove(L, -2);
      found = lua_type(L, -1) == LUA_TTABLE;
    }
    if (!found)
      return failf(L, t, "TOOL_CONTEXT_INVALID", "Tool '%s' needs '%s', which no tool_contexts entry of the configuration provides.", t->name, need->name);
    int spec = lua_gettop(L);
    lua_newtable(L);
    int value = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, spec)) {
      const char *field = lua_tostring(L, -2);
      if (push_context_field(L, t, need->name, field, lua_gettop(L)) != 0) return -1;
      lua_pushvalue(L, -3);
      lua_insert(L, -2);
      lua_rawset(L, value);
      lua_pop(L, 1);
    }
    char root[300];
    snprintf(root, sizeof root, "%s.needs.%s", t->name, need->name);
    lv_result r;
    int bad = lv_validate(rt->v, L, value, need->schema, root, LV_INPUT, &r);
    if (bad) {
      push_invalid(L, t, "TOOL_CONTEXT_INVALID", &r);
      lv_result_free(&r);
      return -1;
    }
    lv_result_free(&r);
    lua_setfield(L, out, need->name);
    lua_settop(L, out);
  }
  *needs = out;
  return 0;
}

/* ---------------------------------------------------- handler and retry */

static long long effective_timeout(pl_runtime *rt, const pm_agent *ag, const pm_tool *t) {
  long long eff = t->timeout >= 0 ? t->timeout : (ag && ag->tool_timeout >= 0 ? ag->tool_timeout : -1);
  if (ag && ag->tool_timeout_max >= 0 && (eff < 0 || eff > ag->tool_timeout_max)) eff = ag->tool_timeout_max;
  return eff < 0 ? rt->default_timeout_ms : eff;
}

static long long backoff_ms(const pm_tool *t, int attempt) {
  switch (t->retry_backoff) {
    case BO_FIXED: return t->retry_delay;
    case BO_EXPONENTIAL: {
      long long d = t->retry_delay;
      for (int i = 1; i < attempt && d < LLONG_MAX / 2; i++) d *= 2;
      return d;
    }
    default: return 0;
  }
}

/* Step 11 for errors: with `error: Schema`, a handler's own error must fit it. */
static int check_typed_error(lua_State *L, pl_runtime *rt, const pm_tool *t) {
  int e = lua_gettop(L);
  const char *code = error_code(L, e);
  if (!t->error || strncmp(code, "TOOL_", 5) == 0) return -1;
  lua_createtable(L, 0, 4);
  static const char *const fields[] = { "code", "message", "retryable", "details" };
  for (int i = 0; i < 4; i++) {
    lua_pushstring(L, fields[i]);
    lc_rawget(L, e);
    lua_setfield(L, -2, fields[i]);
  }
  char root[300];
  snprintf(root, sizeof root, "%s.error", t->name);
  lv_result r;
  int bad = lv_validate(rt->v, L, -1, t->error, root, LV_OUTPUT, &r);
  lua_pop(L, 1);
  if (bad) {
    lua_pop(L, 1);
    push_invalid(L, t, "TOOL_ERROR_INVALID", &r);
  }
  lv_result_free(&r);
  return -1;
}

/* --------------------------------------------------------- idempotency */

/* A claim taken in step 9, settled in step 12. */
typedef struct pl_claim {
  int held;
  char hash[65];
  int key;                    /* stack index of the key string */
} pl_claim;

/* Pushes the idempotency key of the input as a string. */
static int push_idempotency_key(lua_State *L, const pm_tool *t, int input) {
  lua_pushvalue(L, input);
  for (int i = 0; i < t->idempotency_key.n; i++) {
    if (lua_type(L, -1) != LUA_TTABLE) break;
    lua_pushstring(L, t->idempotency_key.items[i]);
    lc_rawget(L, -2);
    lua_remove(L, -2);
  }
  switch (lua_type(L, -1)) {
    case LUA_TSTRING: return 0;
    case LUA_TBOOLEAN:
      lua_pushstring(L, lua_toboolean(L, -1) ? "true" : "false");
      lua_remove(L, -2);
      return 0;
    case LUA_TNUMBER: {
      sb_buf b;
      sb_init(&b);
      char why[64];
      int r = lj_encode(L, -1, &b, 0, 1, why, sizeof why);
      if (r == 0) lua_pushlstring(L, b.data ? b.data : "", b.len);
      sb_free(&b);
      if (r != 0) break;
      lua_remove(L, -2);
      return 0;
    }
    default: break;
  }
  lua_pop(L, 1);
  return failf(L, t, "TOOL_INPUT_INVALID", "Tool '%s' has no usable idempotency key in its input.", t->name, "");
}

/* Step 9, first half: pushes the key and computes the input's hash. */
static int idempotency_key(lua_State *L, const pm_tool *t, int input, pl_claim *c) {
  if (push_idempotency_key(L, t, input) != 0) return -1;
  c->key = lua_gettop(L);
  sb_buf b;
  sb_init(&b);
  char err[256];
  if (lj_encode(L, input, &b, 0, 100, err, sizeof err) != 0) {
    sb_free(&b);
    return failf(L, t, "TOOL_INPUT_INVALID", "%s.input cannot be hashed: %s", t->name, err);
  }
  cr_sha256_hex(b.data ? b.data : "", b.len, c->hash);
  sb_free(&b);
  return 0;
}

static int conflict(lua_State *L, const pm_tool *t, const char *key) {
  char msg[512];
  snprintf(msg, sizeof msg, "Tool '%s' was already called with idempotency key '%.200s' and another input.", t->name, key);
  return fail(L, t, "TOOL_IDEMPOTENCY_CONFLICT", msg);
}

/* Step 9, second half: a replay leaves the stored result on top and returns
   1; a claim returns 0 with c->held set; an error returns -1. */
static int idempotency_begin(lua_State *L, pl_runtime *rt, const pm_tool *t, pl_claim *c, long long deadline) {
  size_t keylen;
  const char *key = lua_tolstring(L, c->key, &keylen);
  char err[256];
  for (;;) {
    char *stored = NULL;
    id_status st = id_begin(rt->idem, t->name, key, keylen, c->hash, pl_wall_ms(L, rt), &stored, err, sizeof err);
    switch (st) {
      case ID_RUN:
        c->held = 1;
        return 0;
      case ID_REPLAY: {
        ar_arena a;
        ar_init(&a);
        jv *v = json_parse(&a, stored, strlen(stored), ID_MAX_DEPTH, err, sizeof err);
        free(stored);
        if (v) lj_push(L, v, 0);
        ar_free(&a);
        if (!v) return failf(L, t, "IDEMPOTENCY_STORE_ERROR", "A stored result of tool '%s' cannot be read: %s", t->name, err);
        return 1;
      }
      case ID_CONFLICT:
        return conflict(L, t, key);
      case ID_WAIT:
        /* another call with this key and input is running: wait for its result */
        if (pl_mono_ms(L, rt) + 10 >= deadline) {
          char msg[512];
          snprintf(msg, sizeof msg, "Tool '%s' timed out waiting for another call with idempotency key '%.200s'.",
                   t->name, key);
          return fail(L, t, "TOOL_TIMEOUT", msg);
        }
        sleep_ms(L, rt, 10);
        break;
      default:
        return failf(L, t, "IDEMPOTENCY_STORE_ERROR", "The idempotency store failed for tool '%s': %s", t->name, err);
    }
  }
}

/* Step 12 for idempotent tools: the result is stored, or the claim released. */
static int idempotency_settle(lua_State *L, pl_runtime *rt, const pm_tool *t, pl_claim *c, int result) {
  size_t keylen;
  const char *key = lua_tolstring(L, c->key, &keylen);
  if (result == 0) {
    id_abort(rt->idem, t->name, key, keylen);
    return 0;
  }
  sb_buf b;
  sb_init(&b);
  char err[256];
  int r = lj_encode(L, result, &b, 0, ID_MAX_DEPTH - 1, err, sizeof err);
  if (r == 0)
    r = id_commit(rt->idem, t->name, key, keylen, c->hash, b.data ? b.data : "null", b.len, pl_wall_ms(L, rt),
                  t->idempotency_ttl_ms, err, sizeof err);
  sb_free(&b);
  if (r != 0) {
    id_abort(rt->idem, t->name, key, keylen);
    return failf(L, t, "IDEMPOTENCY_STORE_ERROR", "The result of tool '%s' could not be stored: %s", t->name, err);
  }
  return 0;
}

/* ----------------------------------------------------------- the steps */

/*
 * A call in flight. Calls go through the steps in phases so that several
 * can run at once: prepare (steps 1 to 9) and finish (steps 11 and 12) run
 * on the host's thread; the handler attempts of step 10 run in rounds, those
 * of different modules on threads of their own.
 */
enum { JOB_RUN, JOB_OK, JOB_ERR, JOB_FOLLOW };

typedef struct pl_job {
  const pm_tool *t;
  int input, needs, key;          /* stack indices; needs and key may be 0 */
  pl_claim claim;
  pl_event ev;
  long long start, timeout, deadline, not_before;
  int state;
  int value;                      /* the result (JOB_OK) or the error (JOB_ERR) */
  int leader;                     /* JOB_FOLLOW: the job whose execution it shares */
} pl_job;

static int job_fail(lua_State *L, pl_job *j) {
  j->state = JOB_ERR;
  j->value = lua_gettop(L);
  return -1;
}

static int job_ok(lua_State *L, pl_job *j) {
  j->state = JOB_OK;
  j->value = lua_gettop(L);
  return 0;
}

/* Pushes the cache key of the job, or returns 0 when it cannot have one. */
static int cache_key(lua_State *L, const pm_tool *t, int input) {
  sb_buf b;
  sb_init(&b);
  char why[128];
  int key = 0;
  if (lj_encode(L, input, &b, 0, 100, why, sizeof why) == 0) {
    lua_pushfstring(L, "%s\n", t->name);
    lua_pushlstring(L, b.data ? b.data : "", b.len);
    lua_concat(L, 2);
    key = lua_gettop(L);
  }
  sb_free(&b);
  return key;
}

/* Steps 1 to 9 for jobs[i]; earlier jobs of the batch may share its execution. */
static void prepare(lua_State *L, pl_runtime *rt, pl_scope *sc, pl_job *jobs, int i, long long now) {
  pl_job *j = &jobs[i];
  const pm_tool *t = j->t;
  const pm_agent *ag = sc ? sc->agent : NULL;
  luaL_checkstack(L, 24, "calling a tool");
  j->start = now;
  if (ag && ag->tool_failure_limit >= 0 && sc->failures >= ag->tool_failure_limit) {
    char msg[300];
    snprintf(msg, sizeof msg, "The circuit breaker of agent '%s' is open: %d tool calls failed in this method call.",
             ag->name, sc->failures);
    fail(L, t, "TOOL_CIRCUIT_OPEN", msg);
    job_fail(L, j);
    return;
  }
  if (check_permissions(L, rt, ag, t) != 0) { job_fail(L, j); return; }

  lv_result r;
  int bad = lv_validate(rt->v, L, j->input, t->input, t->input->display, LV_INPUT, &r);
  if (bad) push_invalid(L, t, "TOOL_INPUT_INVALID", &r);
  lv_result_free(&r);
  if (bad) { job_fail(L, j); return; }

  if (resolve_needs(L, rt, ag, t, &j->needs) != 0) { job_fail(L, j); return; }
  if (j->needs && t->cache) {
    failf(L, t, "TOOL_PERMISSION_DENIED", "Cache cannot be used on a tool that uses needs: %s", t->name, "");
    job_fail(L, j);
    return;
  }
  j->timeout = effective_timeout(rt, ag, t);
  j->deadline = j->start + j->timeout;

  /* step 8: the cache, keyed by the tool's name and its canonical input;
     a call of the batch with the same key shares the first one's run */
  if (t->cache && (j->key = cache_key(L, t, j->input))) {
    for (int k = 0; k < i; k++)
      if (jobs[k].state == JOB_RUN && jobs[k].key && lua_rawequal(L, jobs[k].key, j->key)) {
        j->state = JOB_FOLLOW;
        j->leader = k;
        j->ev.single_flight = 1;
        return;
      }
    push_anchor(L, rt, "cache");
    lua_pushvalue(L, j->key);
    lc_rawget(L, -2);
    char err[200];
    if (!lua_isnil(L, -1) && sx_copy(L, -1, L, &rt->limits, err, sizeof err) == 0) {
      j->ev.cache_hit = 1;
      job_ok(L, j);
      return;
    }
    lua_pop(L, 2);
  }

  /* step 9 */
  if (t->idempotent) {
    if (idempotency_key(L, t, j->input, &j->claim) != 0) { job_fail(L, j); return; }
    for (int k = 0; k < i; k++) {
      pl_job *o = &jobs[k];
      if (o->t != t || !o->claim.held || o->state != JOB_RUN || !lua_rawequal(L, o->claim.key, j->claim.key)) continue;
      if (strcmp(o->claim.hash, j->claim.hash) != 0) {
        conflict(L, t, lua_tostring(L, j->claim.key));
        job_fail(L, j);
        return;
      }
      j->state = JOB_FOLLOW;
      j->leader = k;
      j->ev.idempotent_replay = 1;
      return;
    }
    int found = idempotency_begin(L, rt, t, &j->claim, j->deadline);
    if (found < 0) { job_fail(L, j); return; }
    if (found > 0) {
      j->ev.idempotent_replay = 1;
      job_ok(L, j);
      return;
    }
  }
  j->state = JOB_RUN;
}

/* The host's signal: a table whose fields say whether the deadline passed. */
static int host_signal_check(lua_State *L) {
  lua_getfield(L, 1, "aborted");
  if (lua_toboolean(L, -1)) return le_raise(L, "TOOL_TIMEOUT", "The tool call's deadline passed.", 0);
  return 0;
}

/* One attempt of a handler registered from the host: it runs in the host's
   state, so only its signal and the time it took bound it. */
static int run_host(lua_State *L, pl_runtime *rt, const pm_tool *t, int input, int needs, long long timeout_ms) {
  char why[200];
  push_anchor(L, rt, "host");
  lua_getfield(L, -1, t->name);
  lua_remove(L, -2);
  int fn = lua_gettop(L);
  if (sx_copy(L, input, L, &rt->limits, why, sizeof why) != 0) {
    lua_settop(L, fn - 1);
    return failf(L, t, "TOOL_INPUT_INVALID", "%s.input cannot be passed to the handler: %s", t->name, why);
  }
  lua_createtable(L, 0, 3);
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "aborted");
  lua_pushcfunction(L, host_signal_check);
  lua_setfield(L, -2, "check");
  if (needs) lua_pushvalue(L, needs); else lua_newtable(L);
  long long start = pl_mono_ms(L, rt);
  int status = lua_pcall(L, 3, 1, 0);
  long long took = pl_mono_ms(L, rt) - start;
  if (timeout_ms > 0 && took > timeout_ms) {
    lua_pop(L, 1);
    char msg[300];
    snprintf(msg, sizeof msg, "Tool '%s' timed out after %lld ms.", t->name, timeout_ms);
    return fail(L, t, "TOOL_TIMEOUT", msg);
  }
  if (status == LUA_OK) return 0;
  int e = lua_gettop(L);
  if (le_is_error(L, e)) {
    lua_pushstring(L, t->name);
    lua_setfield(L, e, "tool");
    return -1;
  }
  const char *msg = lua_type(L, e) == LUA_TSTRING ? lua_tostring(L, e) : NULL;
  char buf[300];
  if (!msg) snprintf(buf, sizeof buf, "Tool '%s' raised a %s value.", t->name, luaL_typename(L, e));
  lua_pushstring(L, msg ? msg : buf);
  lua_remove(L, e);
  int r = fail(L, t, "TOOL_FAILED", lua_tostring(L, -1));
  lua_remove(L, -2);
  return r;
}

/* After an attempt (its outcome on top): done, or retried later. */
static void after_attempt(lua_State *L, pl_runtime *rt, pl_job *j, int status, long long now) {
  const pm_tool *t = j->t;
  if (status == 0) { job_ok(L, j); return; }
  int e = lua_gettop(L);
  lua_pushstring(L, t->name);
  lua_setfield(L, e, "tool");
  if (!error_retryable(L, e) || strcmp(error_code(L, e), "TOOL_TIMEOUT") == 0 || j->ev.attempts > t->retries) {
    job_fail(L, j);
    return;
  }
  long long wait = backoff_ms(t, j->ev.attempts);
  /* a wait past the deadline would see the signal fire: stop here */
  if (now + wait >= j->deadline) { job_fail(L, j); return; }
  j->not_before = now + wait;
  (void)rt;
}

typedef struct pl_group {
  sx_module *m;
  sx_state *state;                /* acquired for the round */
  sx_run *runs;
  int *jobs;                      /* job index of each run */
  int n;
  pthread_t thread;
} pl_group;

static void *group_main(void *arg) {
  pl_group *g = arg;
  sx_execute(g->state, g->runs, g->n);
  return NULL;
}

/* The group a job of module m joins: a new one with a state of its own while
   the module can give one, else the module's group with the fewest runs. */
static int group_for(pl_group *groups, int *ngroups, sx_module *m, long long deadline_ns, char *err, size_t errlen) {
  int best = -1;
  for (int g = 0; g < *ngroups; g++)
    if (groups[g].m == m && (best < 0 || groups[g].n < groups[best].n)) best = g;
  /* a free state now, or (for the module's first group) one within the deadline */
  sx_state *s = sx_acquire(m, deadline_ns, best < 0, err, errlen);
  if (!s) return best;
  int g = (*ngroups)++;
  groups[g].m = m;
  groups[g].state = s;
  groups[g].n = 0;
  return g;
}

/* Step 10 for every job that is due: host handlers one by one, module
   handlers grouped by module, the groups at once (up to `concurrency`). */
/* Scratch arrays for a round: on the C stack for small batches, else in a
   userdata (so that an error cannot leak them). */
#define PL_SMALL 8

static void *scratch(lua_State *L, void *small, size_t size, int n) {
  return n <= PL_SMALL ? small : lua_newuserdata(L, size * (size_t)n);
}

static void run_round(lua_State *L, pl_runtime *rt, pl_job *jobs, int n, int concurrency, long long now) {
  pl_group small_groups[PL_SMALL];
  sx_run small_runs[PL_SMALL], small_sorted[PL_SMALL];
  int small_owner[PL_SMALL], small_sorted_owner[PL_SMALL], small_owner_group[PL_SMALL];
  pl_group *groups = scratch(L, small_groups, sizeof *groups, n);
  sx_run *runs = scratch(L, small_runs, sizeof *runs, n);
  int *owner = scratch(L, small_owner, sizeof *owner, n);
  int *owner_group = scratch(L, small_owner_group, sizeof *owner_group, n);
  int ngroups = 0, nruns = 0;
  for (int i = 0; i < n; i++) {
    pl_job *j = &jobs[i];
    if (j->state != JOB_RUN || j->not_before > now) continue;
    j->ev.attempts++;
    long long left = j->deadline - now;
    if (left <= 0) {
      char msg[300];
      snprintf(msg, sizeof msg, "Tool '%s' timed out after %lld ms.", j->t->name, j->timeout);
      fail(L, j->t, "TOOL_TIMEOUT", msg);
      job_fail(L, j);
      continue;
    }
    if (rt->kind[j->t->index] == PL_HOST) {
      int r = run_host(L, rt, j->t, j->input, j->needs, left);
      after_attempt(L, rt, j, r, pl_mono_ms(L, rt));
      continue;
    }
    char why[200];
    int g = group_for(groups, &ngroups, rt->module[j->t->index], sx_now_ns() + left * 1000000LL, why, sizeof why);
    if (g < 0) {
      char msg[400];
      snprintf(msg, sizeof msg, "Tool '%s' could not run: %s.", j->t->name, why);
      fail(L, j->t, "TOOL_TIMEOUT", msg);
      job_fail(L, j);
      continue;
    }
    groups[g].n++;
    owner_group[nruns] = g;
    sx_run *run = &runs[nruns];
    memset(run, 0, sizeof *run);
    run->name = j->t->name;
    run->input = j->input;
    run->needs = j->needs;
    run->opts.tool = j->t->name;
    run->opts.timeout_ms = left;
    run->opts.limits = rt->limits;
    owner[nruns++] = i;
  }
  if (ngroups == 0) return;
  /* each group's runs, contiguous, in job order */
  sx_run *sorted = scratch(L, small_sorted, sizeof *sorted, nruns);
  int *sorted_owner = scratch(L, small_sorted_owner, sizeof *sorted_owner, nruns);
  int k = 0;
  if (ngroups == 1) {
    groups[0].runs = runs;
    groups[0].jobs = owner;
  }
  for (int g = 0; g < ngroups && ngroups > 1; g++) {
    groups[g].runs = &sorted[k];
    groups[g].jobs = &sorted_owner[k];
    for (int r = 0; r < nruns; r++)
      if (owner_group[r] == g) {
        sorted[k] = runs[r];
        sorted_owner[k++] = owner[r];
      }
  }
  for (int first = 0; first < ngroups; first += concurrency) {
    int last = first + concurrency < ngroups ? first + concurrency : ngroups;
    for (int g = first; g < last; g++) sx_prepare(groups[g].state, L, groups[g].runs, groups[g].n);
    if (last - first == 1) {
      sx_execute(groups[first].state, groups[first].runs, groups[first].n);
    } else {
      for (int g = first; g < last; g++)
        if (pthread_create(&groups[g].thread, NULL, group_main, &groups[g]) != 0) {
          groups[g].thread = 0;
          sx_execute(groups[g].state, groups[g].runs, groups[g].n);
        }
      for (int g = first; g < last; g++)
        if (groups[g].thread) pthread_join(groups[g].thread, NULL);
    }
    long long after = pl_mono_ms(L, rt);
    for (int g = first; g < last; g++) {
      for (int r = 0; r < groups[g].n; r++) {
        int status = sx_collect(groups[g].state, L, &groups[g].runs[r]);
        after_attempt(L, rt, &jobs[groups[g].jobs[r]], status, after);
      }
      sx_release(groups[g].state);
    }
  }
}

/* Steps 11 and 12 for a job that has its outcome. */
static void finish(lua_State *L, pl_runtime *rt, pl_job *j) {
  const pm_tool *t = j->t;
  if (j->state == JOB_ERR) {
    if (j->claim.held) idempotency_settle(L, rt, t, &j->claim, 0);
    lua_pushvalue(L, j->value);
    check_typed_error(L, rt, t);
    j->value = lua_gettop(L);
    return;
  }
  if (j->ev.cache_hit || j->ev.idempotent_replay) return;
  lv_result r;
  int bad = lv_validate(rt->v, L, j->value, t->output, t->output_root, LV_OUTPUT, &r);
  if (bad) {
    if (j->claim.held) idempotency_settle(L, rt, t, &j->claim, 0);
    push_invalid(L, t, "TOOL_OUTPUT_INVALID", &r);
    lv_result_free(&r);
    job_fail(L, j);
    return;
  }
  if (r.nwarnings) {
    lp_push_issues(L, r.warnings, r.nwarnings);
    j->ev.warnings = lua_gettop(L);
  }
  lv_result_free(&r);
  /* the idempotency store and the cache keep their own copies */
  if (j->claim.held && idempotency_settle(L, rt, t, &j->claim, j->value) != 0) {
    job_fail(L, j);
    return;
  }
  if (j->key) {
    char err[200];
    push_anchor(L, rt, "cache");
    lua_pushvalue(L, j->key);
    if (sx_copy(L, j->value, L, &rt->limits, err, sizeof err) == 0) lua_rawset(L, -3);
    else lua_pop(L, 1);
    lua_pop(L, 1);
  }
}

/* A follower gets its own copy of the leader's outcome. */
static void follow(lua_State *L, pl_runtime *rt, pl_job *jobs, pl_job *j) {
  pl_job *lead = &jobs[j->leader];
  char err[200];
  if (sx_copy(L, lead->value, L, &rt->limits, err, sizeof err) != 0) lua_pushvalue(L, lead->value);
  j->state = lead->state;
  j->value = lua_gettop(L);
  j->ev.warnings = lead->ev.warnings;
}

/* The circuit breaker counts failures within one agent method call. */
static void count_failure(lua_State *L, pl_scope *sc, pl_job *j) {
  if (!sc || !sc->agent) return;
  sc->failures++;
  const pm_agent *ag = sc->agent;
  if (ag->tool_failure_limit < 0 || sc->failures < ag->tool_failure_limit ||
      strcmp(error_code(L, j->value), "TOOL_CIRCUIT_OPEN") == 0)
    return;
  char msg[400];
  lua_pushstring(L, "message");
  lc_rawget(L, j->value);
  snprintf(msg, sizeof msg, "The circuit breaker of agent '%s' opened after %d failed tool calls: %s",
           ag->name, sc->failures, lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "");
  lua_pop(L, 1);
  lua_pushstring(L, "details");
  lc_rawget(L, j->value);
  int details = lua_isnil(L, -1) ? 0 : lua_gettop(L);
  le_push(L, "TOOL_CIRCUIT_OPEN", msg, 0, details);
  lua_pushstring(L, j->t->name);
  lua_setfield(L, -2, "tool");
  j->value = lua_gettop(L);
}

static void push_meta(lua_State *L, const pl_job *j) {
  lua_createtable(L, 0, 5);
  if (j->ev.warnings) {
    lua_pushvalue(L, j->ev.warnings);
    lua_setfield(L, -2, "warnings");
  }
  lua_pushinteger(L, j->ev.attempts);
  lua_setfield(L, -2, "attempts");
  lua_pushboolean(L, j->ev.cache_hit);
  lua_setfield(L, -2, "cache_hit");
  lua_pushboolean(L, j->ev.single_flight);
  lua_setfield(L, -2, "single_flight");
  lua_pushboolean(L, j->ev.idempotent_replay);
  lua_setfield(L, -2, "idempotent_replay");
}

/* Every step for jobs[0..n), concurrency handler groups at a time. */
static void run_jobs(lua_State *L, pl_runtime *rt, pl_scope *sc, pl_job *jobs, int n, int concurrency) {
  long long now = pl_mono_ms(L, rt);
  for (int i = 0; i < n; i++) prepare(L, rt, sc, jobs, i, now);
  for (int first = 1;; first = 0) {
    long long next = -1;
    int due = 0, running = 0;
    for (int i = 0; i < n; i++) running |= jobs[i].state == JOB_RUN;
    if (!running) break;
    if (!first) now = pl_mono_ms(L, rt);
    for (int i = 0; i < n; i++) {
      if (jobs[i].state != JOB_RUN) continue;
      if (jobs[i].not_before <= now) due = 1;
      else if (next < 0 || jobs[i].not_before < next) next = jobs[i].not_before;
    }
    if (due) {
      run_round(L, rt, jobs, n, concurrency, now);
      continue;
    }
    if (next < 0) break;
    sleep_ms(L, rt, next - now);
  }
  for (int i = 0; i < n; i++) {
    if (jobs[i].state == JOB_FOLLOW) continue;
    finish(L, rt, &jobs[i]);
  }
  for (int i = 0; i < n; i++) {
    pl_job *j = &jobs[i];
    if (j->state == JOB_FOLLOW) follow(L, rt, jobs, j);
    if (j->state == JOB_ERR) count_failure(L, sc, j);
    emit(L, rt, sc, j->t, &j->ev, j->state == JOB_OK, j->value, j->start);
  }
}

int pl_call(lua_State *L, pl_runtime *rt, pl_scope *sc, const pm_tool *t, int input) {
  input = lc_absindex(L, input);
  luaL_checkstack(L, 24, "calling a tool");
  int base = lua_gettop(L);
  pl_job job, *j = &job;
  memset(j, 0, sizeof *j);
  j->t = t;
  j->input = input;
  run_jobs(L, rt, sc, j, 1, 1);
  if (j->state == JOB_ERR) {
    lua_pushvalue(L, j->value);
    lua_replace(L, base + 1);
    lua_settop(L, base + 1);
    return -1;
  }
  lua_pushvalue(L, j->value);
  push_meta(L, j);
  /* result and metadata go to base+1, base+2 (the result was at or above base+1) */
  int top = lua_gettop(L);
  lua_pushvalue(L, top - 1);
  lua_replace(L, base + 1);
  lua_pushvalue(L, top);
  lua_replace(L, base + 2);
  lua_settop(L, base + 2);
  return 0;
}

int pl_call_all(lua_State *L, pl_runtime *rt, pl_scope *sc, const pm_tool *const *tools, const int *inputs, int n,
                int concurrency) {
  luaL_checkstack(L, 24, "calling tools");
  int base = lua_gettop(L);
  pl_job *jobs = lua_newuserdata(L, sizeof *jobs * (size_t)(n ? n : 1));
  memset(jobs, 0, sizeof *jobs * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) {
    jobs[i].t = tools[i];
    jobs[i].input = lc_absindex(L, inputs[i]);
  }
  run_jobs(L, rt, sc, jobs, n, concurrency < 1 ? 1 : concurrency);
  lua_createtable(L, n, 0);
  int out = lua_gettop(L);
  for (int i = 0; i < n; i++) {
    lua_createtable(L, 0, 3);
    lua_pushboolean(L, jobs[i].state == JOB_OK);
    lua_setfield(L, -2, "ok");
    lua_pushvalue(L, jobs[i].value);
    lua_setfield(L, -2, jobs[i].state == JOB_OK ? "result" : "error");
    if (jobs[i].state == JOB_OK) {
      push_meta(L, &jobs[i]);
      lua_setfield(L, -2, "meta");
    }
    lua_rawseti(L, out, i + 1);
  }
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
  return 0;
}
