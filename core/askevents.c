/* The ask's events (askevents.h): a queue in a registry table of the
   runtime's home state, filled on the ask's thread, emptied by the host. */
#include "askevents.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "ljson.h"
#include "luma_limits.h"

/* What an event counts against LIM_STREAM_QUEUE_BYTES besides its text. */
#define EV_COST 64

static const char *stop_word(ad_stop s) {
  switch (s) {
    case AD_STOP_END: return "stop";
    case AD_STOP_TOOLS: return "tool_calls";
    case AD_STOP_LENGTH: return "length";
    case AD_STOP_FILTER: return "filter";
    case AD_STOP_BLOCKED: return "blocked";
    case AD_STOP_REFUSAL: return "refusal";
    case AD_STOP_PAUSE: return "pause";
    case AD_STOP_OTHER: break;
  }
  return "other";
}

void ak_listen(ak_ask *a) {
  if (a->listen) return;
  lua_State *T = a->T;
  lua_newtable(T);
  a->qref = luaL_ref(T, LUA_REGISTRYINDEX);
  a->qhead = a->qtail = 0;
  a->listen = 1;
  if (a->state == AK_DONE) ak_ev_finish(a);
}

void ak_ev_free(ak_ask *a) {
  if (!a->listen) return;
  luaL_unref(a->T, LUA_REGISTRYINDEX, a->qref);
  a->listen = 0;
}

/* A new event table of this type and turn (turn 0: none) on T. */
static void open_event(ak_ask *a, const char *type, int turn) {
  lua_State *T = a->T;
  lua_createtable(T, 0, 6);
  lua_pushstring(T, type);
  lua_setfield(T, -2, "type");
  if (turn) {
    lua_pushinteger(T, turn);
    lua_setfield(T, -2, "turn");
  }
}

/* Queues the event on top of T, which holds `bytes` of text (its `text`
   field: ak_ev_take counts the same back; a call's input and a result are
   bounded by the stream's event and tool_result_max_bytes). */
static void queue_event(ak_ask *a, size_t bytes) {
  lua_State *T = a->T;
  lua_rawgeti(T, LUA_REGISTRYINDEX, a->qref);
  lua_insert(T, -2);
  lua_rawseti(T, -2, (lua_Integer)++a->qtail);
  lua_pop(T, 1);
  a->qbytes += EV_COST + bytes;
}

static void set_text(lua_State *T, const char *key, const char *s, size_t len) {
  lua_pushlstring(T, s ? s : "", s ? len : 0);
  lua_setfield(T, -2, key);
}

/* The id an event gives call i of the turn: the provider's, or one made
   from its position (Gemini gives none). */
static const char *call_id(ak_ask *a, int i, const char *given) {
  if (given) return given;
  if (i < a->ncallids && a->callids[i]) return a->callids[i];
  if (i < a->turn.ncalls && a->turn.calls && a->turn.calls[i].id) return a->turn.calls[i].id;
  return ar_printf(&a->turn_arena, "call_%d", i + 1);
}

/* Keeps call i's id and name for the deltas that name only its position. */
static void remember(ak_ask *a, int i, const char *id, const char *name) {
  if (i < 0) return;
  if (i >= a->ncallids) {
    int n = i + 1 > 2 * a->ncallids ? i + 1 : 2 * a->ncallids;
    const char **ids = ar_alloc(&a->turn_arena, sizeof *ids * (size_t)n);
    const char **names = ar_alloc(&a->turn_arena, sizeof *names * (size_t)n);
    if (!ids || !names) return;
    memset(ids, 0, sizeof *ids * (size_t)n);
    memset(names, 0, sizeof *names * (size_t)n);
    if (a->ncallids) {
      memcpy(ids, a->callids, sizeof *ids * (size_t)a->ncallids);
      memcpy(names, a->callnames, sizeof *names * (size_t)a->ncallids);
    }
    a->callids = ids;
    a->callnames = names;
    a->ncallids = n;
  }
  a->callids[i] = id ? ar_strdup(&a->turn_arena, id) : NULL;
  a->callids[i] = call_id(a, i, a->callids[i]);
  a->callnames[i] = name ? ar_strdup(&a->turn_arena, name) : NULL;
}

static const char *call_name(ak_ask *a, int i) {
  if (i >= 0 && i < a->ncallids && a->callnames[i]) return a->callnames[i];
  if (i >= 0 && i < a->turn.ncalls && a->turn.calls) return a->turn.calls[i].name;
  return NULL;
}

/* tool_call: the call's arguments decoded (as text when they are no JSON). */
static void call_event(ak_ask *a, const char *id, const char *name, const char *args, size_t len) {
  lua_State *T = a->T;
  open_event(a, "tool_call", a->ev_turn);
  set_text(T, "id", id, id ? strlen(id) : 0);
  if (name) set_text(T, "name", name, strlen(name));
  char why[200];
  if (!len) lua_newtable(T);
  else if (!lj_push_text(T, args, len, LIM_MODEL_JSON_DEPTH, why, sizeof why)) lua_pushlstring(T, args, len);
  lua_setfield(T, -2, "input");
  queue_event(a, 0);
}

void ak_ev_delta(ak_ask *a, const ad_delta *d) {
  if (!a->listen) return;
  lua_State *T = a->T;
  switch (d->kind) {
    case AD_DELTA_TEXT:
    case AD_DELTA_REFUSAL:
    case AD_DELTA_REASONING:
      open_event(a, d->kind == AD_DELTA_TEXT ? "text_delta" : d->kind == AD_DELTA_REFUSAL ? "refusal_delta"
                                                                                          : "reasoning_delta",
                 a->ev_turn);
      set_text(T, "text", d->text, d->len);
      queue_event(a, d->len);
      return;
    case AD_DELTA_CALL_START: {
      remember(a, d->call, d->id, d->name);
      const char *id = call_id(a, d->call, d->id);
      open_event(a, "tool_call_start", a->ev_turn);
      set_text(T, "id", id, strlen(id));
      if (d->name) set_text(T, "name", d->name, strlen(d->name));
      queue_event(a, 0);
      return;
    }
    case AD_DELTA_CALL_ARGS: {
      const char *id = call_id(a, d->call, NULL);
      open_event(a, "tool_call_delta", a->ev_turn);
      set_text(T, "id", id, strlen(id));
      set_text(T, "text", d->text, d->len);
      queue_event(a, d->len);
      return;
    }
    case AD_DELTA_CALL_DONE:
      call_event(a, call_id(a, d->call, NULL), call_name(a, d->call), d->text, d->len);
      return;
    case AD_DELTA_PTOOL: {
      /* a call the provider ran, its result come: its id (made from its
         position when the provider gives none), its name, and its failure */
      const ad_ptcall *c = d->ptcall;
      const char *id = c->id ? c->id : ar_printf(&a->turn_arena, "provider_tool_%d_%d", a->ev_turn, d->call + 1);
      open_event(a, "provider_tool", a->ev_turn);
      set_text(T, "id", id, id ? strlen(id) : 0);
      set_text(T, "name", c->name, strlen(c->name));
      lua_pushstring(T, c->error_code ? "failed" : "completed");
      lua_setfield(T, -2, "status");
      if (c->error_code) {
        lua_createtable(T, 0, 2);
        set_text(T, "code", c->error_code, strlen(c->error_code));
        if (c->error) set_text(T, "message", c->error, strlen(c->error));
        lua_setfield(T, -2, "error");
      }
      queue_event(a, 0);
      return;
    }
    case AD_DELTA_USAGE:
      if (d->input_tokens < 0 && d->output_tokens < 0) return;
      open_event(a, "usage", a->ev_turn);
      if (d->input_tokens >= 0) {
        lua_pushinteger(T, (lua_Integer)d->input_tokens);
        lua_setfield(T, -2, "input_tokens");
      }
      if (d->output_tokens >= 0) {
        lua_pushinteger(T, (lua_Integer)d->output_tokens);
        lua_setfield(T, -2, "output_tokens");
      }
      queue_event(a, 0);
      return;
    case AD_DELTA_END:
      open_event(a, "turn_end", a->ev_turn);
      lua_pushstring(T, stop_word(d->stop));
      lua_setfield(T, -2, "stop");
      queue_event(a, 0);
      return;
  }
}

void ak_ev_turn(ak_ask *a, const ad_turn *t) {
  if (!a->listen) return;
  ad_delta d;
  memset(&d, 0, sizeof d);
  if (t->refusal) {
    d.kind = AD_DELTA_REFUSAL;
    d.text = t->refusal;
    d.len = strlen(t->refusal);
    ak_ev_delta(a, &d);
  }
  if (t->text && t->text_len) {
    d.kind = AD_DELTA_TEXT;
    d.text = t->text;
    d.len = t->text_len;
    ak_ev_delta(a, &d);
  }
  for (int i = 0; i < t->ncalls; i++) {
    const ad_call *c = &t->calls[i];
    memset(&d, 0, sizeof d);
    d.call = i;
    d.kind = AD_DELTA_CALL_START;
    d.id = c->id;
    d.name = c->name;
    ak_ev_delta(a, &d);
    if (c->arguments_len) {
      d.kind = AD_DELTA_CALL_ARGS;
      d.text = c->arguments;
      d.len = c->arguments_len;
      ak_ev_delta(a, &d);
    }
    d.kind = AD_DELTA_CALL_DONE;
    d.text = c->arguments;
    d.len = c->arguments_len;
    ak_ev_delta(a, &d);
  }
  memset(&d, 0, sizeof d);
  d.kind = AD_DELTA_PTOOL;
  for (int i = 0; i < t->nptcalls; i++) {
    d.call = i;
    d.ptcall = &t->ptcalls[i];
    ak_ev_delta(a, &d);
  }
  memset(&d, 0, sizeof d);
  d.kind = AD_DELTA_USAGE;
  d.input_tokens = t->input_tokens;
  d.output_tokens = t->output_tokens;
  ak_ev_delta(a, &d);
  d.kind = AD_DELTA_END;
  d.stop = t->stop;
  d.stop_reason = t->stop_reason;
  ak_ev_delta(a, &d);
}

void ak_ev_result(ak_ask *a, int i) {
  if (!a->listen) return;
  lua_State *T = a->T;
  const ak_slot *s = &a->slots[i];
  const char *id = call_id(a, i, NULL), *name = call_name(a, i);
  open_event(a, "tool_result", a->ev_turn);
  set_text(T, "id", id, strlen(id));
  if (name) set_text(T, "name", name, strlen(name));
  lua_pushboolean(T, !s->is_error);
  lua_setfield(T, -2, "ok");
  char why[200];
  if (!s->content || !lj_push_text(T, s->content, s->len, LIM_MODEL_JSON_DEPTH + 2, why, sizeof why)) lua_pushnil(T);
  if (s->is_error && lua_istable(T, -1)) {
    /* the model's copy is {"error": {...}}: the event holds the error */
    lua_getfield(T, -1, "error");
    lua_replace(T, -2);
  }
  lua_setfield(T, -2, s->is_error ? "error" : "output");
  queue_event(a, 0);
}

void ak_ev_retry(ak_ask *a, const char *reason, int attempt) {
  if (!a->listen) return;
  lua_State *T = a->T;
  open_event(a, "retry", a->ev_turn);
  lua_pushstring(T, reason ? reason : "the exchange failed");
  lua_setfield(T, -2, "reason");
  lua_pushinteger(T, attempt);
  lua_setfield(T, -2, "attempt");
  queue_event(a, 0);
}

void ak_ev_finish(ak_ask *a) {
  if (!a->listen) return;
  lua_State *T = a->T;
  open_event(a, "finish", 0);
  lua_pushboolean(T, a->ok);
  lua_setfield(T, -2, "ok");
  lua_pushvalue(T, AK_VALUE);
  lua_setfield(T, -2, a->ok ? "answer" : "error");
  queue_event(a, 0);
}

int ak_ev_full(const ak_ask *a) {
  return a->listen && a->qbytes >= (size_t)LIM_STREAM_QUEUE_BYTES;
}

int ak_ev_pending(const ak_ask *a) {
  return a->listen && a->qhead < a->qtail;
}

int ak_ev_take(lua_State *L, ak_ask *a) {
  if (!ak_ev_pending(a)) return 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->qref);
  lua_Integer k = (lua_Integer)++a->qhead;
  lua_rawgeti(L, -1, k);
  lua_pushnil(L);
  lua_rawseti(L, -3, k);
  lua_remove(L, -2);
  size_t len = 0;
  lua_pushliteral(L, "text");
  lua_rawget(L, -2);
  if (lua_type(L, -1) == LUA_TSTRING) lua_tolstring(L, -1, &len);
  lua_pop(L, 1);
  size_t cost = EV_COST + len;
  int was_full = ak_ev_full(a);
  a->qbytes = a->qbytes > cost ? a->qbytes - cost : 0;
  if (a->qhead == a->qtail) a->qbytes = 0;
  /* the stream waits for room: the next step reads it on */
  if (was_full && !ak_ev_full(a) && a->held) rt_notify(a->rt);
  return 1;
}
