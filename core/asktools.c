/* The model's tool calls of one turn: each through the one pipeline, up to
   the agent's tool_concurrency at once, each with exactly one result for the
   model; and the ask's telemetry event. */
#include "asktools.h"
#include "askptools.h"

#include "askevents.h"
#include "askjournal.h"
#include "askpast.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callint.h"
#include "compat.h"
#include "drive.h"
#include "json.h"
#include "lcall.h"
#include "ljson.h"
#include "luma_limits.h"
#include "telemetry.h"
#include "utf8.h"

/* Errors the model can correct by calling again differently: they go back
   to it. Any other error that is not retryable ends the ask (SPEC §3). */
static int model_correctable(const char *code) {
  return strcmp(code, "TOOL_INPUT_INVALID") == 0 || strcmp(code, "TOOL_NOT_FOUND") == 0;
}

static void keep(ak_slot *s, sb_buf *b, int is_error) {
  s->content = b->failed ? NULL : b->data;
  s->len = b->failed ? 0 : b->len;
  if (b->failed) sb_free(b);
  s->is_error = is_error;
  s->answered = 1;
}

/* A result the pipeline never saw: a name the agent does not have, or
   arguments that are not JSON. */
static void error_result(ak_slot *s, const char *code, const char *message) {
  sb_buf b;
  sb_init(&b);
  sb_adds(&b, "{\"error\":{\"code\":");
  json_write_string(&b, code, strlen(code));
  sb_adds(&b, ",\"message\":");
  json_write_string(&b, message, strlen(message));
  sb_adds(&b, ",\"retryable\":false}}");
  keep(s, &b, 1);
}

static const pm_tool *agent_tool(const pm_agent *ag, const char *name) {
  for (int i = 0; i < ag->tools.n; i++)
    if (strcmp(ag->tools.items[i]->name, name) == 0) return ag->tools.items[i];
  return NULL;
}

static void prepare_slot(ak_ask *a, int i) {
  ak_slot *s = &a->slots[i];
  const ad_call *call = &a->turn.calls[i];
  char msg[600];
  if (ak_lazy_unloaded(a, call->name, msg, sizeof msg)) {
    error_result(s, "TOOL_NOT_FOUND", msg);
    return;
  }
  /* the agent's tool, or the discovery tool of its lazy ones */
  const pm_tool *t = call->name ? agent_tool(a->agent, call->name) : NULL;
  if (!t) t = ak_lazy_tool(a, call->name);
  if (!t) {
    /* the model's name, at most a third of the message, cut between two
       characters: the answer stays UTF-8 */
    const char *name = call->name ? call->name : "";
    int shown = (int)u8_cut(name, strlen(name), sizeof msg / 3);
    int n = snprintf(msg, sizeof msg, "'%.*s' is not a tool of agent '%s'. Its tools are:", shown, name, a->agent->name);
    for (int k = 0; k < a->agent->tools.n && n > 0 && (size_t)n < sizeof msg; k++)
      n += snprintf(msg + n, sizeof msg - (size_t)n, "%s %s", k ? "," : "", a->agent->tools.items[k]->name);
    if (a->agent->tools.n == 0 && n > 0 && (size_t)n < sizeof msg) snprintf(msg + n, sizeof msg - (size_t)n, " none");
    error_result(s, "TOOL_NOT_FOUND", msg);
    return;
  }
  char err[300];
  cl_call *c = cl_new(a->pg, t, a->scope, err, sizeof err);
  if (!c) {
    snprintf(msg, sizeof msg, "Tool '%s' cannot be called: %s.", t->name, err);
    error_result(s, "TOOL_CANCELLED", msg);
    return;
  }
  /* some servers send "" for a tool without parameters */
  const char *args = call->arguments_len ? call->arguments : "{}";
  size_t len = call->arguments_len ? call->arguments_len : 2;
  if (cl_set_input_json(c, args, len, err, sizeof err) != 0) {
    cl_free(c);
    snprintf(msg, sizeof msg, "The arguments of tool '%s' are not JSON: %s.", t->name, err);
    error_result(s, "TOOL_INPUT_INVALID", msg);
    return;
  }
  cl_set_ask(c, a, a->id, a->run_id);
  s->call = c;
}

void ak_early_call(ak_ask *a, int i, const char *name, const char *args, size_t len) {
  const pm_tool *t = name ? agent_tool(a->agent, name) : NULL;
  char unloaded[300];
  if (i < 0 || !t || t->side_effects == SE_WRITE || ak_lazy_unloaded(a, name, unloaded, sizeof unloaded)) return;
  long long conc = a->agent->tool_concurrency > 0 ? a->agent->tool_concurrency : 1;
  long long limit = a->agent->tool_rate_limit;
  int running = 0;
  for (int k = 0; k < a->nearly; k++) running += a->early[k] != NULL;
  if (running >= conc || (limit >= 0 && a->rate_used + i + 1 > limit)) return;
  if (i >= a->nearly) {
    int n = i + 1 > 2 * a->nearly ? i + 1 : 2 * a->nearly;
    cl_call **grown = realloc(a->early, sizeof *grown * (size_t)n);
    if (!grown) return;
    memset(grown + a->nearly, 0, sizeof *grown * (size_t)(n - a->nearly));
    a->early = grown;
    a->nearly = n;
  }
  if (a->early[i]) return;
  char err[300];
  cl_call *c = cl_new(a->pg, t, a->scope, err, sizeof err);
  if (!c) return;
  /* arguments that are not JSON wait for the turn, which says so */
  if (cl_set_input_json(c, len ? args : "{}", len ? len : 2, err, sizeof err) != 0) {
    cl_free(c);
    return;
  }
  cl_set_ask(c, a, a->id, a->run_id);
  rt_start(a->rt, c);
  a->early[i] = c;
}

void ak_drop_early(ak_ask *a) {
  for (int i = 0; i < a->nearly; i++) {
    if (!a->early[i]) continue;
    cl_cancel(a->early[i]);
    cl_free(a->early[i]);
  }
  free(a->early);
  a->early = NULL;
  a->nearly = 0;
}

st_verdict ak_begin_tools(ak_ask *a) {
  const ad_turn *t = &a->turn;
  ad_conv_turn(&a->conv, t);
  a->tool_calls += t->ncalls;
  a->rate_used += t->ncalls;
  long long limit = a->agent->tool_rate_limit;
  if (limit >= 0 && a->rate_used > limit) {
    ak_drop_early(a);
    return st_fail(a->T, LE_ASK_TOOL_LIMIT,
                   "Agent '%s': the model asked for %d tool calls in this ask, more than its tool_rate_limit of %lld.",
                   a->agent->name, a->rate_used, limit);
  }
  a->slots = calloc((size_t)t->ncalls, sizeof *a->slots);
  if (!a->slots) {
    ak_drop_early(a);
    return st_fail(a->T, LE_ASK_PROVIDER_ERROR, "out of memory");
  }
  a->nslots = t->ncalls;
  a->fatal = 0;
  for (int i = 0; i < t->ncalls; i++) {
    /* a resumed run's call that has its outcome in the journal does not run again */
    ak_slot *s = &a->slots[i];
    if (ak_past_result(a, i, &s->content, &s->len, &s->is_error)) {
      s->answered = s->journaled = 1;
      ak_lazy_journaled(a, &t->calls[i], s->is_error);
      continue;
    }
    /* a person's decision on a call the run waited for: a denial is the
       model's error result; an approval runs it (with the person's input) */
    int approved;
    const char *reason, *input;
    size_t input_len;
    if (ak_past_decision(a, i, &approved, &reason, &input, &input_len)) {
      if (!approved) {
        char msg[600];
        snprintf(msg, sizeof msg, "A person denied the call: %s", reason && *reason ? reason : "no reason given");
        error_result(s, "TOOL_PERMISSION_DENIED", msg);
        continue;
      }
      if (input) {
        a->turn.calls[i].arguments = input;
        a->turn.calls[i].arguments_len = input_len;
      }
      prepare_slot(a, i);
      if (s->call) cl_set_approved(s->call);
      continue;
    }
    /* a call started while the turn streamed is this slot's, if it is the
       same tool */
    cl_call *early = i < a->nearly ? a->early[i] : NULL;
    if (early && t->calls[i].name && strcmp(early->t->name, t->calls[i].name) == 0) {
      a->slots[i].call = early;
      a->slots[i].started = 1;
      a->early[i] = NULL;
      a->starting = 1;
    } else {
      prepare_slot(a, i);
    }
  }
  ak_drop_early(a);
  return sv_next();
}

/* The result of a call that is done, as JSON text for the model, cut at the
   agent's tool_result_max_bytes with a note the model can read. */
static void collect(ak_ask *a, int i) {
  ak_slot *s = &a->slots[i];
  lua_State *T = a->T;
  st_event ev;
  int ok = lcl_take(T, s->call, &ev);
  lua_pop(T, 1);   /* the warnings */
  cl_free(s->call);
  s->call = NULL;
  sb_buf b;
  sb_init(&b);
  char err[200];
  if (ok) {
    if (lj_encode(T, -1, &b, 0, LIM_MODEL_JSON_DEPTH, err, sizeof err) != 0) {
      sb_free(&b);
      lua_pop(T, 1);
      char msg[300];
      snprintf(msg, sizeof msg, "The result of the tool cannot be written as JSON: %s.", err);
      error_result(s, "TOOL_OUTPUT_INVALID", msg);
      return;
    }
  } else {
    lua_getfield(T, -1, "code");
    const char *code = lua_type(T, -1) == LUA_TSTRING ? lua_tostring(T, -1) : "TOOL_FAILED";
    /* a durable run's call that waits for a person: the run pauses */
    if (strcmp(code, "TOOL_AWAITING_APPROVAL") == 0) {
      lua_getfield(T, -2, "message");
      s->awaiting = 1;
      s->reason = strdup(lua_type(T, -1) == LUA_TSTRING ? lua_tostring(T, -1) : "");
      lua_pop(T, 1);
    }
    lua_getfield(T, -2, "retryable");
    int retryable = lua_toboolean(T, -1);
    if (!retryable && !s->awaiting && !model_correctable(code) && !a->fatal) {
      a->fatal = i + 1;
      lua_pushvalue(T, -3);
      lua_replace(T, AK_VALUE);
    }
    lua_pop(T, 2);
    sb_adds(&b, "{\"error\":");
    if (lj_encode(T, -1, &b, 0, LIM_MODEL_JSON_DEPTH, err, sizeof err) != 0) {
      b.len = 0;
      sb_adds(&b, "{\"error\":{\"code\":\"TOOL_FAILED\",\"message\":\"the error cannot be written as JSON\"}");
    }
    sb_addc(&b, '}');
  }
  lua_pop(T, 1);
  size_t max = a->agent->tool_result_max_bytes > 0 ? (size_t)a->agent->tool_result_max_bytes
                                                    : (size_t)LIM_TOOL_RESULT_MAX_BYTES;
  if (!b.failed && b.len > max) {
    size_t cut = u8_cut(b.data, b.len, max);   /* not inside a UTF-8 sequence */
    sb_buf n;
    sb_init(&n);
    sb_printf(&n, "{\"truncated\":true,\"bytes\":%zu,\"limit\":%zu,\"note\":", b.len, max);
    const char *note = "The result was longer than the limit: partial holds the start of its JSON text.";
    json_write_string(&n, note, strlen(note));
    sb_adds(&n, ",\"partial\":");
    json_write_string(&n, b.data, cut);
    sb_addc(&n, '}');
    sb_free(&b);
    b = n;
  }
  keep(s, &b, !ok);
}

st_verdict ak_step_tools(ak_ask *a) {
  a->starting = 0;
  long long conc = a->agent->tool_concurrency > 0 ? a->agent->tool_concurrency : 1;
  int running = 0, answered = 0;
  for (int i = 0; i < a->nslots; i++) {
    ak_slot *s = &a->slots[i];
    if (s->started && !s->answered && cl_done(s->call)) collect(a, i);
    if (s->started && !s->answered) running++;
  }
  for (int i = 0; i < a->nslots; i++) {
    ak_slot *s = &a->slots[i];
    if (s->started || s->answered || !s->call) continue;
    if (a->fatal) {
      /* the ask ends: a call not started yet gets its result without running */
      cl_free(s->call);
      s->call = NULL;
      error_result(s, "TOOL_CANCELLED", "The tool did not run: an earlier call of this turn ended the ask.");
      continue;
    }
    if (running >= conc) break;
    rt_start(a->rt, s->call);
    s->started = 1;
    running++;
    a->starting = 1;
  }
  char err[400];
  /* the outcomes in a durable ask's journal as they come, before the next
     request: those that ended together in one commit */
  int few[8], *ended = NULL, nended = 0, first = -1, rc = 0;
  for (int i = 0; i < a->nslots; i++) {
    ak_slot *s = &a->slots[i];
    if (!s->answered || s->journaled || s->awaiting) continue;
    if (first < 0) {
      first = i;
      ended = a->nslots <= (int)(sizeof few / sizeof few[0]) ? few : malloc(sizeof *ended * (size_t)a->nslots);
      if (!ended) {
        snprintf(err, sizeof err, "out of memory");
        rc = -1;
      }
    }
    s->journaled = 1;
    if (ended) ended[nended++] = i;
  }
  if (rc == 0 && nended) rc = ak_journal_tools(a, ended, nended, err, sizeof err);
  if (rc != 0) {
    for (int k = 0; k < a->nslots; k++)
      if (a->slots[k].started && !a->slots[k].answered) cl_cancel(a->slots[k].call);
    if (!a->fatal) {
      /* the error that ends the ask, kept in the first outcome's place */
      a->fatal = first + 1;
      st_fail(a->T, LE_JOURNAL_ERROR, "Agent '%s' is durable, and its ask's journal cannot be written: %s",
              a->agent->name, err);
      lua_replace(a->T, AK_VALUE);
    }
  }
  if (ended != few) free(ended);
  for (int i = 0; i < a->nslots; i++) {
    ak_slot *s = &a->slots[i];
    if (!s->answered) continue;
    answered++;
    /* each result as it comes, for a host that listens */
    if (!s->reported) {
      s->reported = 1;
      ak_ev_result(a, i);
    }
  }
  if (a->fatal && answered < a->nslots)
    for (int i = 0; i < a->nslots; i++)
      if (a->slots[i].started && !a->slots[i].answered) cl_cancel(a->slots[i].call);
  if (answered < a->nslots) return sv_is(SV_WAIT);
  if (a->fatal) {
    /* the error that ended it was kept in the outcome's place */
    ak_drop_slots(a);
    lua_pushvalue(a->T, AK_VALUE);
    return sv_is(SV_ERROR);
  }
  /* calls that wait for a person: their "approval" records, and the run
     awaits a decision; the ask ends saying so */
  int waiting = -1;
  for (int i = 0; i < a->nslots; i++) {
    if (!a->slots[i].awaiting) continue;
    if (waiting < 0) waiting = i;
    if (ak_journal_approval(a, i, a->slots[i].reason, err, sizeof err) != 0) {
      ak_drop_slots(a);
      return st_fail(a->T, LE_JOURNAL_ERROR, "Agent '%s' is durable, and its ask's journal cannot be written: %s",
                     a->agent->name, err);
    }
  }
  if (waiting >= 0) {
    const ad_call *call = &a->turn.calls[waiting];
    const char *id = call->id ? call->id : "";
    st_verdict v = st_fail(a->T, LE_TOOL_AWAITING_APPROVAL,
                           "Agent '%s': run '%s' awaits a person's decision on call '%s' of tool '%s' (%s) Approve it "
                           "(luma-lua approve %s %s) or deny it (luma-lua deny %s %s --reason TEXT), then resume the run.",
                           a->agent->name, a->run_id, id, call->name ? call->name : "", a->slots[waiting].reason,
                           a->run_id, id, a->run_id, id);
    a->awaiting = 1;
    ak_drop_slots(a);
    return v;
  }
  ad_result *r = calloc((size_t)(a->nslots > 0 ? a->nslots : 1), sizeof *r);
  if (!r) return st_fail(a->T, LE_ASK_PROVIDER_ERROR, "out of memory");
  for (int i = 0; i < a->nslots; i++) r[i] = (ad_result){ a->slots[i].content, a->slots[i].len, a->slots[i].is_error };
  ad_conv_results(&a->conv, &a->turn, r);
  free(r);
  ak_drop_slots(a);
  a->tool_rounds++;
  if (!ad_conv_ok(&a->conv)) return st_fail(a->T, LE_ASK_PROVIDER_ERROR, "out of memory");
  return sv_next();
}

int ak_cancel_tools(ak_ask *a) {
  int left = 0;
  for (int i = 0; i < a->nslots; i++) {
    ak_slot *s = &a->slots[i];
    if (s->answered) continue;
    if (!s->started) {
      cl_free(s->call);
      s->call = NULL;
      error_result(s, "TOOL_CANCELLED", "The tool did not run: the ask was cancelled.");
      continue;
    }
    if (cl_done(s->call)) { collect(a, i); continue; }
    cl_cancel(s->call);
    left++;
  }
  return left == 0;
}

void ak_drop_slots(ak_ask *a) {
  for (int i = 0; i < a->nslots; i++) {
    cl_free(a->slots[i].call);
    free(a->slots[i].content);
    free(a->slots[i].reason);
  }
  free(a->slots);
  a->slots = NULL;
  a->nslots = 0;
}

/* One event per ask: { kind = "ask", ask, agent, model, provider, turns,
   tool_calls, input_tokens, output_tokens, duration_ms, ttft_ms (to the first
   delta or turn, when one came), status, code }. */
void ak_emit(ak_ask *a) {
  pl_program *pg = a->pg;
  if (!pg->has_sink && !pg->trace) return;
  lua_State *T = a->T;
  lua_createtable(T, 0, 12);
  int e = lua_gettop(T);
  lua_pushliteral(T, "ask");
  lua_setfield(T, e, "kind");
  lua_pushstring(T, a->id);
  lua_setfield(T, e, "ask");
  lua_pushstring(T, a->agent->name);
  lua_setfield(T, e, "agent");
  if (a->run_id[0]) {
    lua_pushstring(T, a->run_id);
    lua_setfield(T, e, "run");
  }
  lua_pushstring(T, a->pm->model ? a->pm->model : a->pm->deployment);
  lua_setfield(T, e, "model");
  lua_pushstring(T, ad_providers[a->pm->provider].name);
  lua_setfield(T, e, "provider");
  lua_pushinteger(T, a->turns);
  lua_setfield(T, e, "turns");
  lua_pushinteger(T, a->tool_calls);
  lua_setfield(T, e, "tool_calls");
  lua_pushinteger(T, (lua_Integer)a->input_tokens);
  lua_setfield(T, e, "input_tokens");
  lua_pushinteger(T, (lua_Integer)a->output_tokens);
  lua_setfield(T, e, "output_tokens");
  lua_pushinteger(T, (lua_Integer)(a->start ? pl_mono_ms(T, pg) - a->start : 0));
  lua_setfield(T, e, "duration_ms");
  if (a->ttft >= 0) {
    lua_pushinteger(T, (lua_Integer)a->ttft);
    lua_setfield(T, e, "ttft_ms");
  }
  lua_pushstring(T, a->ok ? "ok" : "error");
  lua_setfield(T, e, "status");
  if (a->ok) lua_pushlightuserdata(T, NULL);
  else lua_getfield(T, AK_VALUE, "code");
  lua_setfield(T, e, "code");
  ak_ptools_event(a, e);
  st_publish(T, pg, e);
  lua_settop(T, e - 1);
}
