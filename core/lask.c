/* The Lua binding of asks: program:ask (blocking, the `ask` of agent
   methods) and program:start_ask (a luma.Ask to poll, wait for or cancel). */
#include "lask.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "ask.h"
#include "askevents.h"
#include "askjournal.h"
#include "askpast.h"
#include "askptools.h"
#include "compat.h"
#include "drive.h"
#include "lerror.h"
#include "json.h"
#include "journal.h"
#include "lruntime.h"
#include "luma_limits.h"
#include "strbuf.h"

#define LA_ASK "luma.Ask"

typedef struct ask_box {
  ak_ask *a;                      /* NULL once closed */
} ask_box;

static int ask_gc(lua_State *L) {
  ask_box *b = luaL_checkudata(L, 1, LA_ASK);
  ak_free(b->a);
  b->a = NULL;
  return 0;
}

static ak_ask *check_ask(lua_State *L, int idx) {
  ask_box *b = luaL_checkudata(L, idx, LA_ASK);
  if (!b->a) luaL_argerror(L, idx, "the ask is closed");
  return b->a;
}

/* (scope, prompt, schema name [, using tool name [, listen]]) at 2..6 -> a
   new ask, owned by a luma.Ask pushed on L; listen: it queues its events
   from the start (README: Streaming). */
static ak_ask *new_ask(lua_State *L, pl_program *pg) {
  pl_scope *sc = lr_check_scope(L, pg, 2);
  if (!sc || !sc->agent) luaL_argerror(L, 2, "an ask needs the scope of an agent method (program:scope(agent))");
  size_t len;
  const char *prompt = luaL_checklstring(L, 3, &len);
  const char *schema = luaL_checkstring(L, 4);
  const pm_schema *s = pm_find_schema(pg->p, schema);
  if (!s || strncmp(schema, "__", 2) == 0) {
    lua_pushfstring(L, "Unknown schema '%s'.", schema);
    return le_raise(L, "VALIDATION_FAILED", lua_tostring(L, -1), 0), NULL;
  }
  const pm_tool *forced = NULL;
  if (!lua_isnoneornil(L, 5)) {
    const char *name = luaL_checkstring(L, 5);
    for (int i = 0; i < sc->agent->tools.n; i++)
      if (strcmp(sc->agent->tools.items[i]->name, name) == 0) forced = sc->agent->tools.items[i];
    if (!forced) {
      char msg[300];
      le_format_msg(msg, sizeof msg, LE_MSG_USING_TOOL_DENIED, sc->agent->name, name);
      return le_raise_code(L, LE_TOOL_PERMISSION_DENIED, msg, 0), NULL;
    }
  }
  int listen = lua_toboolean(L, 6);
  ask_box *b = lua_newuserdata(L, sizeof *b);
  b->a = NULL;
  lc_setmetatable(L, LA_ASK);
  ak_params p = { prompt, len, s, forced, listen, NULL };
  char err[200];
  le_code code;
  b->a = ak_new(pg, sc, &p, &code, err, sizeof err);
  if (!b->a) {
    if (code == LE_ASK_MODEL_MISSING) le_raise_code(L, code, err, 0);
    lua_pushfstring(L, "Agent '%s' cannot ask: %s.", sc->agent->name, err);
    le_raise_code(L, code, lua_tostring(L, -1), 0);
  }
  ak_start(b->a);
  return b->a;
}

/* Raises JOURNAL_ERROR: run cannot be resumed, because (printf). */
static int resume_error(lua_State *L, const char *run, const char *fmt, const char *arg, const char *arg2) {
  char why[500], msg[700];
  snprintf(why, sizeof why, fmt, arg, arg2);
  snprintf(msg, sizeof msg, "Cannot resume run '%s': %s.", run, why);
  return le_raise_code(L, LE_JOURNAL_ERROR, msg, 0);
}

/* (run id [, listen]) at 2..3 -> the ask that resumes it, from the program's
   journal: its agent, prompt, schema and forced tool as its "ask" record
   gives them, each of which the program must still have; owned by a
   luma.Ask pushed on L. */
static ak_ask *new_resume(lua_State *L, pl_program *pg) {
  const char *run = luaL_checkstring(L, 2);
  int listen = lua_toboolean(L, 3);
  char err[400];
  ak_past *past = ak_past_read(pg, run, err, sizeof err);
  if (!past) return resume_error(L, run, "%s", err, NULL), NULL;
  const char *agent = ak_past_agent(past), *schema = ak_past_schema(past), *using = ak_past_forced(past);
  const pm_agent *ag = pm_find_agent(pg->p, agent);
  const pm_schema *sc = schema ? pm_find_schema(pg->p, schema) : NULL;
  const pm_tool *forced = NULL;
  for (int i = 0; ag && using && i < ag->tools.n; i++)
    if (strcmp(ag->tools.items[i]->name, using) == 0) forced = ag->tools.items[i];
  const char *why = !ag ? "its agent '%s' is not in the program" : !sc ? "its answer's schema '%s' is not in the program"
                  : using && !forced ? "its forced tool '%s' is not a tool of agent '%s'" : NULL;
  if (why) {
    lua_pushstring(L, !ag ? agent : !sc ? (schema ? schema : "(none)") : using);
    lua_pushstring(L, agent);
    ak_past_free(past);
    return resume_error(L, run, why, lua_tostring(L, -2), lua_tostring(L, -1)), NULL;
  }
  pl_scope *scope = pl_scope_new(pg, ag);
  if (!scope) {
    ak_past_free(past);
    return luaL_error(L, "out of memory"), NULL;
  }
  ask_box *b = lua_newuserdata(L, sizeof *b);
  b->a = NULL;
  lc_setmetatable(L, LA_ASK);
  size_t len;
  const char *prompt = ak_past_prompt(past, &len);
  ak_params p = { prompt, len, sc, forced, listen, past };
  le_code code;
  b->a = ak_new(pg, scope, &p, &code, err, sizeof err);
  pl_scope_unref(scope);
  if (!b->a) {
    lua_pushfstring(L, "Agent '%s' cannot resume run '%s': %s.", ag->name, run, err);
    le_raise_code(L, code, lua_tostring(L, -1), 0);
  }
  ak_start(b->a);
  return b->a;
}

static int ask_done(void *a, int active) {
  (void)active;
  return ak_done(a);
}

/* Polls the ask's runtime until the ask is done or timeout_ms (< 0: none)
   passes; returns whether it is done. */
static int wait_for(ak_ask *a, rt_runtime *rt, long long timeout_ms) {
  return rt_poll_until(rt, ask_done, a, timeout_ms);
}

int la_ask(lua_State *L, pl_program *pg) {
  ak_ask *a = new_ask(L, pg);
  wait_for(a, pg->rt, -1);
  int ok = ak_push_outcome(L, a);
  if (!ok) return lua_error(L);
  ak_push_citations(L, a);
  return 2;
}

int la_start_ask(lua_State *L, pl_program *pg) {
  new_ask(L, pg);
  return 1;
}

int la_decide(lua_State *L, pl_program *pg) {
  const char *run = luaL_checkstring(L, 2), *call = luaL_checkstring(L, 3);
  int approved = lua_toboolean(L, 4);
  const char *reason = luaL_optstring(L, 5, NULL);
  size_t len = 0;
  const char *input = luaL_optlstring(L, 6, NULL, &len);
  char err[400];
  if (!pg->journal) return resume_error(L, run, "%s", "the program has no journal (luma.load's journal option)", NULL);
  sb_buf b;
  sb_init(&b);
  sb_adds(&b, "{\"id\":");
  json_write_string(&b, call, strlen(call));
  sb_adds(&b, approved ? ",\"approved\":true,\"reason\":" : ",\"approved\":false,\"reason\":");
  if (reason) json_write_string(&b, reason, strlen(reason));
  else sb_adds(&b, "null");
  sb_adds(&b, ",\"input\":");
  if (input) {
    ar_arena scratch;
    ar_init(&scratch);
    jv *v = json_parse(&scratch, input, len, LIM_MODEL_JSON_DEPTH, err, sizeof err);
    ar_free(&scratch);
    if (!v) {
      sb_free(&b);
      lua_pushfstring(L, "The input of the decision on call '%s' is not JSON: %s.", call, err);
      return le_raise_code(L, LE_JSON_INVALID, lua_tostring(L, -1), 0);
    }
    sb_add(&b, input, len);
  } else {
    sb_adds(&b, "null");
  }
  sb_addc(&b, '}');
  long long seq = b.failed ? -1 : jr_decide(pg->journal, run, b.data, b.len, err, sizeof err);
  if (b.failed) snprintf(err, sizeof err, "out of memory");
  sb_free(&b);
  if (seq <= 0) {
    char msg[600];
    snprintf(msg, sizeof msg, "Cannot record a decision on call '%s' of run '%s': %s.", call, run, err);
    return le_raise_code(L, LE_JOURNAL_ERROR, msg, 0);
  }
  lua_pushinteger(L, (lua_Integer)seq);
  return 1;
}

int la_resume(lua_State *L, pl_program *pg) {
  ak_ask *a = new_resume(L, pg);
  wait_for(a, pg->rt, -1);
  if (!ak_push_outcome(L, a)) return lua_error(L);
  return 1;
}

int la_start_resume(lua_State *L, pl_program *pg) {
  new_resume(L, pg);
  return 1;
}

/* ask:done() */
static int l_ask_done(lua_State *L) {
  lua_pushboolean(L, ak_done(check_ask(L, 1)));
  return 1;
}

/* ask:poll() -> done: steps the runtime once, without blocking */
static int l_ask_poll(lua_State *L) {
  ak_ask *a = check_ask(L, 1);
  if (!ak_done(a)) wait_for(a, ak_runtime(a), 0);
  lua_pushboolean(L, ak_done(a));
  return 1;
}

/* ask:wait([timeout_ms]) -> done */
static int l_ask_wait(lua_State *L) {
  ak_ask *a = check_ask(L, 1);
  long long timeout = lr_opt_wait_ms(L, 2);
  if (!ak_done(a)) wait_for(a, ak_runtime(a), timeout);
  lua_pushboolean(L, ak_done(a));
  return 1;
}

/* ask:result() -> the answer; raises the ask's error, or when not done */
static int l_ask_result(lua_State *L) {
  ak_ask *a = check_ask(L, 1);
  if (!ak_done(a)) return luaL_error(L, "the ask is not done: wait for it first");
  if (!ak_push_outcome(L, a)) return lua_error(L);
  return 1;
}

static int event_or_done(void *a, int active) {
  (void)active;
  return ak_ev_pending(a) || ak_done(a);
}

/* ask:listen(): its events are queued from now on (an ask started with
   { on_event } or { events = true } listens from its first request) */
static int l_ask_listen(lua_State *L) {
  ak_listen(check_ask(L, 1));
  return 0;
}

/* ask:next_event() -> the next event, or nil when none is queued now;
   steps nothing */
static int l_ask_next_event(lua_State *L) {
  ak_ask *a = check_ask(L, 1);
  if (!ak_ev_take(L, a)) lua_pushnil(L);
  return 1;
}

/* ask:wait_event([timeout_ms]) -> whether an event is queued or the ask is
   done: steps the runtime until one of them, or the timeout */
static int l_ask_wait_event(lua_State *L) {
  ak_ask *a = check_ask(L, 1);
  long long timeout = lr_opt_wait_ms(L, 2);
  if (!event_or_done(a, 0)) rt_poll_until(ak_runtime(a), event_or_done, a, timeout);
  lua_pushboolean(L, event_or_done(a, 0));
  return 1;
}

/* ask:citations() -> the sources its answer cites, a list of
   {url, title?, cited_text?} (provider tools'; empty without them) */
static int l_ask_citations(lua_State *L) {
  ak_ask *a = check_ask(L, 1);
  if (!ak_done(a)) return luaL_error(L, "the ask is not done: wait for it first");
  ak_push_citations(L, a);
  return 1;
}

/* ask:cancel() */
static int l_ask_cancel(lua_State *L) {
  ak_cancel(check_ask(L, 1));
  return 0;
}

void la_open(lua_State *L) {
  static const luaL_Reg methods[] = {
    { "done", l_ask_done },
    { "poll", l_ask_poll },
    { "ready", l_ask_poll },
    { "wait", l_ask_wait },
    { "result", l_ask_result },
    { "cancel", l_ask_cancel },
    { "listen", l_ask_listen },
    { "next_event", l_ask_next_event },
    { "wait_event", l_ask_wait_event },
    { "citations", l_ask_citations },
    { NULL, NULL }
  };
  lr_new_metatable(L, LA_ASK, ask_gc, methods);
  luaL_getmetatable(L, LA_ASK);
  lua_getfield(L, -1, "__index");
  lua_setfield(L, -3, "Ask");
  lua_pop(L, 1);
}
