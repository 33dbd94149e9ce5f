/* The ask's state machine: requests, responses, retries, and the final
   answer. Only this file moves the ask's state; the tool calls' unit
   (asktools.h) returns verdicts. */
#include "ask.h"
#include "askint.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "askevents.h"
#include "askptools.h"
#include "askjournal.h"
#include "askpast.h"
#include "asktools.h"
#include "compat.h"
#include "jsonschema.h"
#include "lerror.h"
#include "ljson.h"
#include "luma_limits.h"
#include "record.h"
#include "satadd.h"
#include "strbuf.h"
#include "telemetry.h"

static int step_task(rt_task *t, long long *wait_ms);
static void respond(ak_ask *a, const ad_response *r);
static void answer(ak_ask *a);
static void paused(ak_ask *a);
static void cancel_task(rt_task *t);
static void release_task(rt_task *t);

/* ------------------------------------------------------------ errors */

/* The error on top becomes the outcome, and the ask ends. */
static void fail_top(ak_ask *a) {
  lua_State *T = a->T;
  lua_pushstring(T, a->agent->name);
  lua_setfield(T, -2, "agent");
  lua_replace(T, AK_VALUE);
  a->ok = 0;
  a->state = AK_END;
}

/* An error of code, with this message (printf), ends the ask. */
static void fail(ak_ask *a, le_code code, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;
static void fail(ak_ask *a, le_code code, const char *fmt, ...) {
  char msg[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  le_push_code(a->T, code, msg, 0);
  fail_top(a);
}

/* Moves the ask on a verdict of its tool calls: to next, or to its end. */
static void move(ak_ask *a, st_verdict v, int next) {
  if (v.kind == SV_ERROR) fail_top(a);
  else if (v.kind == SV_NEXT) a->state = next;
}

/* ----------------------------------------------------------- journal */

/* A record's rc (askjournal.h): 0, or the ask ends with JOURNAL_ERROR. */
static int journaled(ak_ask *a, int rc, const char *err) {
  if (rc == 0) return 0;
  fail(a, LE_JOURNAL_ERROR, "Agent '%s' is durable, and its ask's journal cannot be written: %s", a->agent->name, err);
  return -1;
}

/* A resumed run's start (askjournal.h): on from its journal, or the
   outcome of a run that finished. */
static void resume(ak_ask *a) {
  char err[400];
  int ok = 0;
  int rc = ak_journal_resume(a, &ok, err, sizeof err);
  if (rc < 0) {
    fail(a, LE_JOURNAL_ERROR, "Agent '%s' cannot resume: %s", a->agent->name, err);
  } else if (rc == 0) {
    a->state = AK_SEND;
  } else if (ok) {
    lua_replace(a->T, AK_VALUE);
    a->ok = 1;
    a->state = AK_END;
  } else {
    fail_top(a);
  }
}

/* ---------------------------------------------------------- lifecycle */

static unsigned long long next_id;

ak_ask *ak_new(pl_program *pg, pl_scope *scope, const ak_params *p, le_code *code, char *err, size_t errlen) {
  const pm_agent *ag = scope ? scope->agent : NULL;
  *code = LE_ASK_CANCELLED;
  ak_ask *a = NULL;
  if (ag && !ag->model) {
    *code = LE_ASK_MODEL_MISSING;
    le_format(err, errlen, LE_ASK_MODEL_MISSING, ag->name);
  } else if (!ag) {
    snprintf(err, errlen, "an ask needs an agent");
  } else if (pg->closed || rt_closed(pg->rt)) {
    snprintf(err, errlen, pg->closed ? "the program is closed" : "the runtime is closed");
  } else if (!(a = calloc(1, sizeof *a))) {
    snprintf(err, errlen, "out of memory");
  } else {
    ar_init(&a->arena);
    ar_init(&a->turn_arena);
    a->prompt = ar_strndup(&a->arena, p->prompt, p->prompt_len);
    if (!a->prompt || !lua_checkstack(pg->L, 2)) {
      snprintf(err, errlen, a->prompt ? "no stack space" : "out of memory");
      ar_free(&a->arena);
      free(a);
      a = NULL;
    }
  }
  if (!a) {
    ak_past_free(p->past);   /* the ask owns it, made or not */
    return NULL;
  }
  lua_State *L = pg->L;
  a->T = lua_newthread(L);
  a->tref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_settop(a->T, AK_NVALUES);
  a->refs = 1;
  a->task.step = step_task;
  a->task.cancel = cancel_task;
  a->task.release = release_task;
  a->rt = pg->rt;
  a->pg = pg;
  pl_retain(pg);
  a->scope = scope;
  pl_scope_retain(scope);
  a->agent = ag;
  a->pm = ag->model;
  a->schema = p->schema;
  a->forced = p->forced;
  a->prompt_len = p->prompt_len;
  a->past = p->past;
  a->rng = (unsigned long long)(uintptr_t)a ^ (unsigned long long)pl_wall_ms(a->T, pg) * 0x9E3779B97F4A7C15ULL;
  if (!a->rng) a->rng = 1;
  snprintf(a->id, sizeof a->id, "ask-%llu", ++next_id);
  a->ttft = -1;
  sb_init(&a->whole);
  sb_init(&a->raw);
  if (p->listen) ak_listen(a);
  return a;
}

void ak_start(ak_ask *a) {
  a->refs++;
  rt_add_task(a->rt, &a->task);
  rt_notify(a->rt);
}

rt_runtime *ak_runtime(const ak_ask *a) {
  return a->rt;
}

int ak_done(const ak_ask *a) {
  return a->state == AK_DONE;
}

void ak_cancel(ak_ask *a) {
  if (__atomic_exchange_n(&a->cancelled, 1, __ATOMIC_ACQ_REL)) return;
  rt_notify(a->rt);
}

/* Ends the transfer in flight, if any, and drops its stream. */
static void drop_transfer(ak_ask *a) {
  tp_release(a->tp);
  a->tp = NULL;
  ad_stream_free(a->stream);
  a->stream = NULL;
  sb_free(&a->whole);
  sb_init(&a->whole);
  sb_free(&a->raw);
  sb_init(&a->raw);
  a->replayed = NULL;
  a->replayed_len = 0;
  a->streaming = a->head_seen = a->sse = a->stream_failed = a->whole_too_large = a->held = 0;
}

static void unref(ak_ask *a) {
  if (--a->refs > 0) return;
  ak_journal_stop(a);
  ak_past_free(a->past);
  ak_drop_early(a);
  ak_drop_slots(a);
  drop_transfer(a);
  ak_ev_free(a);
  ad_conv_free(&a->conv);
  ar_free(&a->turn_arena);
  ar_free(&a->arena);
  luaL_unref(a->pg->L, LUA_REGISTRYINDEX, a->tref);
  pl_scope_unref(a->scope);
  pl_unref(a->pg);
  free(a);
}

void ak_free(ak_ask *a) {
  if (!a) return;
  if (a->state != AK_DONE) ak_cancel(a);
  unref(a);
}

static void cancel_task(rt_task *t) {
  ak_cancel((ak_ask *)t);
}

static void release_task(rt_task *t) {
  ak_ask *a = (ak_ask *)t;
  unref(a);
}

int ak_push_outcome(lua_State *L, ak_ask *a) {
  lua_pushvalue(a->T, AK_VALUE);
  lua_xmove(a->T, L, 1);
  return a->ok;
}

/* ------------------------------------------------------- the model */

static int clock_jitter(ak_ask *a) {
  /* xorshift64: a different wait for every ask, no shared state */
  a->rng ^= a->rng << 13;
  a->rng ^= a->rng >> 7;
  a->rng ^= a->rng << 17;
  return (int)(a->rng % 1000);
}

/* The adapter's model, the tools and the schema, once, before the first request. */
static int prepare(ak_ask *a) {
  lua_State *T = a->T;
  const pm_model *m = a->pm;
  ad_model *am = &a->model;
  am->provider = (ad_provider)m->provider;
  am->api = (ad_api)m->api;
  am->name = m->model;
  am->base_url = m->base_url;
  am->deployment = m->deployment;
  am->api_version = m->api_version;
  am->temperature = m->temperature.is_int ? (double)m->temperature.i : m->temperature.d;
  am->has_temperature = m->has_temperature;
  am->max_tokens = m->max_tokens;
  if (m->headers.n) {
    ad_header *h = ar_alloc(&a->arena, sizeof *h * (size_t)m->headers.n);
    if (!h) return -1;
    for (int i = 0; i < m->headers.n; i++) h[i] = (ad_header){ m->headers.names[i], m->headers.values[i] };
    am->headers = h;
    am->nheaders = m->headers.n;
  }
  /* a replay needs no key: nothing goes out */
  const char *var = a->pg->replay ? NULL : pm_model_key_env(m);
  if (var) {
    const char *key = pl_lookup(T, a->pg, var);
    if (!key || !*key) {
      lua_pop(T, 1);
      char msg[300];
      le_format(msg, sizeof msg, LE_ASK_KEY_MISSING, m->name, var);
      fail(a, LE_ASK_KEY_MISSING, "%s", msg);
      return 1;
    }
    am->api_key = ar_strdup(&a->arena, key);
    lua_pop(T, 1);
    if (!am->api_key) return -1;
  }
  const pm_agent *ag = a->agent;
  a->ntools = ag->tools.n;
  if (a->ntools) {
    a->tools = ar_alloc(&a->arena, sizeof *a->tools * (size_t)a->ntools);
    if (!a->tools) return -1;
    for (int i = 0; i < a->ntools; i++) {
      const pm_tool *t = ag->tools.items[i];
      jv *decl = js_tool(&a->arena, a->pg->p, t, JS_CANONICAL);
      a->tools[i] = (ad_tool){ t->name, t->description, jv_get(decl, "parameters"), 0 };
    }
  }
  if (ak_ptools_prepare(a) < 0 || ak_lazy_prepare(a) < 0) return -1;
  a->final_schema = js_schema(&a->arena, a->pg->p, a->schema, JS_CANONICAL);
  if (a->arena.failed || !a->final_schema) return -1;
  ad_conv_init(&a->conv, &a->model);
  if (ag->description && *ag->description) ad_conv_system(&a->conv, ag->description, strlen(ag->description));
  ad_conv_user(&a->conv, a->prompt, a->prompt_len);
  a->start = pl_mono_ms(T, a->pg);
  return ad_conv_ok(&a->conv) ? 0 : -1;
}

static long long model_timeout(const ak_ask *a) {
  long long t = a->pm->timeout > 0 ? a->pm->timeout : LIM_MODEL_TIMEOUT_MS;
  return t > LIM_TIMEOUT_CAP_MS ? LIM_TIMEOUT_CAP_MS : t;
}

static void on_transfer_end(void *ud) {
  rt_notify(ud);
}

/* A delta of the stream, on the ask's thread: to the host's queue. */
static void on_delta(void *ud, const ad_delta *d) {
  ak_ask *a = ud;
  if (a->ttft < 0) a->ttft = pl_mono_ms(a->T, a->pg) - a->start;
  a->delivered = 1;
  ak_ev_delta(a, d);
  /* after the event, which keeps the call's name */
  if (d->kind == AD_DELTA_CALL_DONE && d->call >= 0 && d->call < a->ncallids)
    ak_early_call(a, d->call, a->callnames[d->call], d->text, d->len);
}

/* Builds the next request and starts it. */
static void send(ak_ask *a) {
  ar_free(&a->turn_arena);
  ar_init(&a->turn_arena);
  a->ncallids = 0;
  a->callids = a->callnames = NULL;
  a->ev_turn = a->turns + 1;
  a->delivered = 0;
  /* a replay asks as the recording did, listening or not */
  int stream = a->pg->replay ? rc_replay_streamed(a->pg->replay) : a->listen && a->pm->stream;
  ad_ask q = { a->tools, a->ntools, AD_CHOICE_AUTO, NULL, NULL, NULL, stream, a->ptools, a->nptools, NULL };
  ak_lazy_ask(a, &q);
  if (a->forced && !a->tool_rounds) {
    q.choice = AD_CHOICE_TOOL;
    q.choice_tool = a->forced->name;
  }
  /* SPEC §2: the strict answer format once a tool has run */
  if (a->tool_rounds) {
    q.final_schema = a->final_schema;
    q.final_name = a->schema->name;
  }
  ad_request r;
  char err[300];
  memset(&a->req, 0, sizeof a->req);
  if (!ad_build(&a->conv, &q, &a->turn_arena, &r, err, sizeof err)) {
    fail(a, LE_ASK_PROVIDER_ERROR, "Agent '%s' cannot ask model '%s': %s", a->agent->name, a->pm->name, err);
    return;
  }
  a->req = r;
  long long now = pl_mono_ms(a->T, a->pg);
  if (a->attempt == 0) a->exchange_start = now;
  /* a resumed run's answered turn is not asked again: the journal answers */
  ad_response had;
  if (ak_past_response(a, a->turns + 1, &had)) {
    respond(a, &had);
    return;
  }
  if (a->pg->replay) {
    ad_response resp;
    a->attempt++;
    if (rc_replay_next(a->pg->replay, &r, &resp, err, sizeof err) != 0) {
      fail(a, LE_ASK_REPLAY_MISMATCH, "Agent '%s': %s", a->agent->name, err);
      return;
    }
    resp.now_ms = pl_wall_ms(a->T, a->pg);
    if (stream && rc_replay_is_stream(&resp)) {
      /* the recorded event stream, through the stream parser in pieces of
         random sizes (pump), as a transfer would give it */
      a->replayed = resp.body;
      a->replayed_len = resp.len;
      a->streaming = a->head_seen = a->sse = 1;
      if (!(a->stream = ad_stream_new(&a->model, &a->turn_arena, on_delta, a))) {
        fail(a, LE_ASK_RESPONSE_INVALID, "out of memory");
        return;
      }
      a->state = AK_HTTP;
      return;
    }
    respond(a, &resp);
    return;
  }
  tp_header *h = ar_alloc(&a->turn_arena, sizeof *h * (size_t)(r.nheaders ? r.nheaders : 1));
  if (!h) { fail(a, LE_ASK_PROVIDER_ERROR, "out of memory"); return; }
  for (int i = 0; i < r.nheaders; i++)
    h[i] = (tp_header){ r.headers[i].name, strlen(r.headers[i].name), r.headers[i].value, strlen(r.headers[i].value) };
  long long left = a->exchange_start + model_timeout(a) - now;
  if (left < 1) left = 1;
  /* a stream's unread bytes are bounded, not its length (its events are) */
  tp_request req = { TP_POST, r.url, h, (size_t)r.nheaders, r.body, r.len, "luma-lua", left,
                     stream ? (size_t)LIM_STREAM_QUEUE_BYTES : (size_t)LIM_MODEL_MAX_RESPONSE_BYTES, 0,
                     stream, stream ? on_transfer_end : NULL };
  tp_transport *tp = rt_transport(a->rt, err, sizeof err);
  if (tp) a->tp = tp_start(tp, &req, on_transfer_end, a->rt, err, sizeof err);
  if (!tp || !a->tp) {
    fail(a, LE_ASK_PROVIDER_ERROR, "Agent '%s' cannot send the request to model '%s': %s", a->agent->name,
            a->pm->name, err);
    return;
  }
  a->attempt++;
  a->streaming = stream;
  a->state = AK_HTTP;
}

/* A failed exchange: wait and send again when it may be retried. */
static void exchange_failed(ak_ask *a, const ad_error *e) {
  /* what the failed stream started is void */
  ak_drop_early(a);
  long long retries = a->pm->retries >= 0 ? a->pm->retries : 2;
  long long now = pl_mono_ms(a->T, a->pg);
  /* what luma did about a retryable error, said after the provider's words */
  char why[300] = "";
  if (e->retryable && a->attempt <= retries) {
    double jitter = 0.5 + clock_jitter(a) / 2000.0;
    long long delay = ad_retry_delay(e, a->attempt - 1, jitter);
    long long left = a->exchange_start + model_timeout(a) - now;
    if (delay < left) {
      a->wake_at = now + delay;
      a->state = AK_BACKOFF;
      /* the host showed part of this answer: it is told to drop it */
      if (a->delivered) ak_ev_retry(a, e->message, a->attempt + 1);
      return;
    }
    snprintf(why, sizeof why, "; luma did not retry: %s %lld ms, longer than the %lld ms left of the model's timeout (%lld ms)",
             e->retry_after_ms >= 0 ? "the provider asked to wait" : "the backoff was", delay, left < 0 ? 0 : left,
             model_timeout(a));
  } else if (e->retryable) {
    if (a->attempt == 2) snprintf(why, sizeof why, "; luma retried once (the model's retries: %lld)", retries);
    else if (a->attempt > 2) snprintf(why, sizeof why, "; luma retried %d times (the model's retries: %lld)", a->attempt - 1, retries);
    else snprintf(why, sizeof why, "; luma did not retry (the model's retries: 0)");
  }
  char msg[1200];
  snprintf(msg, sizeof msg, "%s%s", e->message ? e->message : "the provider answered with an error", why);
  lua_State *T = a->T;
  lua_createtable(T, 0, 4);
  int d = lua_gettop(T);
  if (e->status) { lua_pushinteger(T, e->status); lua_setfield(T, d, "status"); }
  if (e->type) { lua_pushstring(T, e->type); lua_setfield(T, d, "type"); }
  lua_pushstring(T, ad_providers[a->pm->provider].name);
  lua_setfield(T, d, "provider");
  lua_pushinteger(T, a->attempt);
  lua_setfield(T, d, "attempts");
  le_push(T, le_name(e->code), msg, e->retryable, d);
  lua_remove(T, d);
  fail_top(a);
}

/* Reads a streamed transfer on: its head, then its bytes into the stream
   (or, for a body that is no stream, into `whole`), while the host's queue
   has room. 1 once the transfer ended and every byte was read, or the
   stream failed (the rest does not matter then). */
static int pump(ak_ask *a) {
  if (!a->head_seen) {
    long status;
    const tp_header *h;
    size_t n;
    if (!tp_head(a->tp, &status, &h, &n)) return tp_outcome(a->tp) != NULL;
    a->head_seen = 1;
    int event_stream = 0;
    for (size_t i = 0; i < n; i++)
      if (tp_equal_ci(h[i].name, h[i].name_len, "content-type") &&
          tp_prefix_ci(h[i].value, h[i].value_len, "text/event-stream"))
        event_stream = 1;
    a->sse = status >= 200 && status < 300 && event_stream;
    if (a->sse && !(a->stream = ad_stream_new(&a->model, &a->turn_arena, on_delta, a))) {
      a->stream_failed = 1;
      a->stream_error = (ad_error){ LE_ASK_RESPONSE_INVALID, 0, NULL, "out of memory", 0, -1 };
      return 1;
    }
  }
  int ended = a->replayed || tp_outcome(a->tp) != NULL;
  char buf[16384];
  a->held = 0;
  for (;;) {
    if (a->sse && ak_ev_full(a)) {
      /* a host that never takes its events does not hold the ask forever:
         the model's timeout still ends the exchange */
      if (pl_mono_ms(a->T, a->pg) >= a->exchange_start + model_timeout(a)) {
        a->stream_failed = 1;
        a->stream_error = (ad_error){ LE_ASK_TIMEOUT, 0, NULL,
                                      "the host did not take the ask's events before the model's timeout", 0, -1 };
        return 1;
      }
      a->held = 1;   /* ak_ev_take notifies when the host made room */
      return 0;
    }
    const char *bytes = buf;
    size_t n;
    if (a->replayed) {
      n = rc_replay_piece(a->pg->replay, a->replayed_len);
      bytes = a->replayed;
      a->replayed += n;
      a->replayed_len -= n;
    } else {
      n = tp_read(a->tp, buf, sizeof buf);
    }
    if (!n) break;
    if (a->sse) {
      /* a recording keeps the stream as it came (record.h) */
      if (a->pg->record && !a->replayed) sb_add(&a->raw, bytes, n);
      if (!ad_stream_feed(a->stream, bytes, n, &a->stream_error)) {
        a->stream_failed = 1;
        return 1;
      }
    } else if (!a->whole_too_large) {
      if (n > (size_t)LIM_MODEL_MAX_RESPONSE_BYTES - a->whole.len) a->whole_too_large = 1;
      else sb_add(&a->whole, bytes, n);
    }
  }
  return ended;
}

static void took_turn(ak_ask *a, const ad_response *r, int streamed);

/* A stream that ended: its turn, or a failed exchange (cut before its final
   event: ASK_TRUNCATED). A recording keeps the raw stream, whole or cut. */
static void streamed(ak_ask *a) {
  char msg[400];
  if (a->pg->record && !a->replayed) {
    static const ad_header sse_type = { "Content-Type", "text/event-stream" };
    ad_response r = { 200, &sse_type, 1, a->raw.data ? a->raw.data : "", a->raw.len, 0 };
    if (a->raw.failed) st_warn(a->T, a->pg, "cannot record the stream: out of memory");
    else if (rc_record(a->pg->record, &a->req, &r, 1, a->model.api_key, msg, sizeof msg) != 0)
      st_warn(a->T, a->pg, msg);
  }
  ad_turn turn;
  ad_error e;
  if (!ad_stream_end(a->stream, &turn, &e)) {
    exchange_failed(a, &e);
    return;
  }
  /* the response the stream stands for: what a journal keeps */
  sb_buf b;
  sb_init(&b);
  if (a->agent->durable) jv_write(&b, ad_stream_response(a->stream), 0);
  static const ad_header json_type = { "Content-Type", "application/json" };
  ad_response r = { 200, &json_type, 1, b.data ? b.data : "", b.len, pl_wall_ms(a->T, a->pg) };
  a->turn = turn;
  if (b.failed) fail(a, LE_ASK_RESPONSE_INVALID, "out of memory");
  else took_turn(a, &r, 1);
  sb_free(&b);
}

/* The transfer ended: a turn, or a failed exchange. */
static void received(ak_ask *a) {
  if (a->stream_failed) {
    exchange_failed(a, &a->stream_error);
    return;
  }
  if (a->replayed) {
    streamed(a);
    return;
  }
  const tp_result *res = tp_outcome(a->tp);
  ad_error e = { LE_ASK_PROVIDER_ERROR, 0, NULL, NULL, 0, -1 };
  char msg[400];
  if (res->code != TP_OK) {
    e.code = res->code == TP_HTTP_TIMEOUT ? LE_ASK_TIMEOUT : res->code == TP_HTTP_TOO_LARGE ? LE_ASK_RESPONSE_INVALID
                                                                                           : LE_ASK_PROVIDER_ERROR;
    e.retryable = res->code == TP_HTTP_TIMEOUT || res->retryable;
    snprintf(msg, sizeof msg, "Model '%s' (%s): %s", a->pm->name, ad_providers[a->pm->provider].name, res->message);
    e.message = msg;
    exchange_failed(a, &e);
    return;
  }
  if (a->streaming && a->sse) {
    streamed(a);
    return;
  }
  if (a->whole_too_large) {
    e.code = LE_ASK_RESPONSE_INVALID;
    snprintf(msg, sizeof msg, "Model '%s' (%s): the response is larger than the limit of %lld bytes", a->pm->name,
             ad_providers[a->pm->provider].name, (long long)LIM_MODEL_MAX_RESPONSE_BYTES);
    e.message = msg;
    exchange_failed(a, &e);
    return;
  }
  ad_header *h = ar_alloc(&a->turn_arena, sizeof *h * (res->n_headers ? res->n_headers : 1));
  if (!h) { fail(a, LE_ASK_RESPONSE_INVALID, "out of memory"); return; }
  for (size_t i = 0; i < res->n_headers; i++) h[i] = (ad_header){ res->headers[i].name, res->headers[i].value };
  /* a streamed request the server answered whole (an error, or no stream) */
  const char *body = a->streaming ? (a->whole.data ? a->whole.data : "") : res->body;
  size_t len = a->streaming ? a->whole.len : res->body_len;
  ad_response r = { (int)res->status, h, (int)res->n_headers, body, len, pl_wall_ms(a->T, a->pg) };
  if (a->pg->record && rc_record(a->pg->record, &a->req, &r, a->streaming, a->model.api_key, msg, sizeof msg) != 0)
    st_warn(a->T, a->pg, msg);
  respond(a, &r);
}

/* A response, from the transfer or a recording: a turn, or a failed exchange. */
static void respond(ak_ask *a, const ad_response *r) {
  ad_error e = { LE_ASK_PROVIDER_ERROR, 0, NULL, NULL, 0, -1 };
  if (!ad_parse(&a->model, r, &a->turn_arena, &a->turn, &e)) {
    exchange_failed(a, &e);
    return;
  }
  took_turn(a, r, 0);
}

/* A turn came, streamed or whole (r: the response it stands for): its
   events, its record in a durable ask's journal, then its calls or the answer. */
static void took_turn(ak_ask *a, const ad_response *r, int streamed) {
  if (a->ttft < 0) a->ttft = pl_mono_ms(a->T, a->pg) - a->start;
  /* the events are the same whether or not the provider streamed */
  if (!streamed) ak_ev_turn(a, &a->turn);
  a->attempt = 0;
  a->turns++;
  char err[400];
  if (journaled(a, ak_journal_exchange(a, r, err, sizeof err), err) != 0) return;
  /* a provider's counts are not trusted: held at LLONG_MAX */
  if (a->turn.input_tokens > 0) a->input_tokens = sat_add(a->input_tokens, a->turn.input_tokens);
  if (a->turn.output_tokens > 0) a->output_tokens = sat_add(a->output_tokens, a->turn.output_tokens);
  ak_ptools_turn(a);
  /* calls are read from the content, whatever the stop reason says */
  if (a->turn.ncalls > 0) move(a, ak_begin_tools(a), AK_TOOLS);
  else {
    ak_drop_early(a);
    if (a->turn.stop == AD_STOP_PAUSE) paused(a);
    else answer(a);
  }
}

/* The provider paused its own tool loop (Anthropic's pause_turn): the turn
   goes back as it is, the last message, and the provider goes on. */
static void paused(ak_ask *a) {
  if (++a->pauses > LIM_PAUSE_TURN_MAX) {
    fail(a, LE_ASK_TOOL_LIMIT, "Agent '%s': the provider paused its own tool loop %d times; luma continues it at most %d times (pause_turn_max).",
         a->agent->name, a->pauses, (int)LIM_PAUSE_TURN_MAX);
    return;
  }
  ad_conv_turn(&a->conv, &a->turn);
  a->state = AK_SEND;
}

/* The final answer: JSON of the ask's schema, else a re-ask or an error. */
static void answer(ak_ask *a) {
  lua_State *T = a->T;
  const ad_turn *t = &a->turn;
  const char *who = a->agent->name;
  switch (t->stop) {
    case AD_STOP_REFUSAL:
      if (t->refusal) fail(a, LE_ASK_REFUSED, "Agent '%s': the model refused: %s", who, t->refusal);
      else fail(a, LE_ASK_REFUSED, "Agent '%s': the model refused, and gave no reason (%s).", who,
                   t->stop_reason ? t->stop_reason : "refusal");
      return;
    case AD_STOP_FILTER:
    case AD_STOP_BLOCKED:
      fail(a, LE_ASK_BLOCKED, "Agent '%s': the provider's safety filter blocked the %s (%s).", who,
              t->stop == AD_STOP_BLOCKED ? "prompt" : "answer", t->stop_reason ? t->stop_reason : "no reason given");
      return;
    case AD_STOP_LENGTH:
      fail(a, LE_ASK_TRUNCATED, "Agent '%s': the model's answer was cut at its token limit%s.", who,
              a->pm->max_tokens > 0 ? " (max_tokens)" : "");
      return;
    default:
      break;
  }
  char why[500] = "";
  ar_arena scratch;
  ar_init(&scratch);
  jv *v = t->text ? json_parse(&scratch, t->text, t->text_len, LIM_MODEL_JSON_DEPTH, why, sizeof why) : NULL;
  if (!t->text) snprintf(why, sizeof why, "the model gave no text");
  /* the format asked for {"answer": T}: T is what is inside */
  const char *key = a->req.answer_key;
  if (v && key && v->type == JV_OBJ && v->count == 1 && jv_get(v, key)) v = (jv *)jv_get(v, key);
  int bad = 1;
  lv_result r;
  memset(&r, 0, sizeof r);
  if (v) {
    lj_push(T, v, 0);
    bad = lv_validate(a->pg->v, T, lua_gettop(T), a->schema, "answer", LV_OUTPUT, &r) > 0;
    if (!bad) {
      lua_replace(T, AK_VALUE);
      a->ok = 1;
      a->state = AK_END;
    } else {
      snprintf(why, sizeof why, "%s %s", r.errors[0].path, r.errors[0].text);
      lua_pop(T, 1);
    }
  } else if (t->text) {
    char tmp[sizeof why + 32];
    snprintf(tmp, sizeof tmp, "the answer is not JSON: %s", why);
    snprintf(why, sizeof why, "%.*s", (int)sizeof why - 1, tmp);
  }
  ar_free(&scratch);
  if (!bad) { lv_result_free(&r); return; }
  long long retries = a->agent->retries > 0 ? a->agent->retries : 0;
  if (a->reasks < retries) {
    a->reasks++;
    a->rate_used = 0;
    lv_result_free(&r);
    ad_conv_turn(&a->conv, t);
    char note[800];
    int n = snprintf(note, sizeof note,
                     "Your answer does not fit the schema %s: %s. Answer again with only JSON that fits it.",
                     a->schema->name, why);
    ad_conv_user(&a->conv, note, (size_t)(n < (int)sizeof note ? n : (int)sizeof note - 1));
    a->state = AK_SEND;
    return;
  }
  if (v) lv_push_error(T, "ASK_OUTPUT_INVALID", &r);
  else le_push(T, "ASK_OUTPUT_INVALID", why, 0, 0);
  lv_result_free(&r);
  /* the message says whose answer it is; details keep the answer itself */
  lua_pushfstring(T, "Agent '%s': the model's answer does not fit '%s': %s", who, a->schema->name, why);
  lua_setfield(T, -2, "message");
  lua_getfield(T, -1, "details");
  if (!lua_istable(T, -1)) {
    lua_pop(T, 1);
    lua_newtable(T);
    lua_pushvalue(T, -1);
    lua_setfield(T, -3, "details");
  }
  if (t->text) lua_pushlstring(T, t->text, t->text_len); else lua_pushnil(T);
  lua_setfield(T, -2, "answer");
  lua_pop(T, 1);
  fail_top(a);
}

/* ------------------------------------------------------- the machine */

static void end(ak_ask *a) {
  /* the outcome is given already: a "finish" that cannot be written is a warning */
  char err[400];
  if (ak_journal_finish(a, err, sizeof err) != 0) st_warn(a->T, a->pg, err);
  ak_emit(a);
  ak_ev_finish(a);
  a->state = AK_DONE;
}

static void run_states(ak_ask *a) {
  for (;;) {
    if (__atomic_load_n(&a->cancelled, __ATOMIC_ACQUIRE) && a->state < AK_END) {
      drop_transfer(a);
      ak_drop_early(a);
      if (!ak_cancel_tools(a)) return;   /* the tools stop first */
      fail(a, LE_ASK_CANCELLED, "Agent '%s': the ask was cancelled.", a->agent->name);
    }
    if (ak_journal_lost(a) && a->state < AK_END) {
      /* another process owns the run now: this one stops, and writes nothing more */
      drop_transfer(a);
      ak_drop_early(a);
      if (!ak_cancel_tools(a)) return;
      fail(a, LE_JOURNAL_ERROR, "Agent '%s' is durable, and %s.", a->agent->name, a->lost_why);
    }
    switch (a->state) {
      case AK_START: {
        char err[400];
        int r = prepare(a);
        if (r < 0) fail(a, LE_ASK_PROVIDER_ERROR, "out of memory");
        else if (r == 0 && a->past) resume(a);
        else if (r == 0 && journaled(a, ak_journal_ask(a, err, sizeof err), err) == 0) a->state = AK_SEND;
        break;
      }
      case AK_SEND: send(a); break;
      case AK_HTTP:
        if (a->streaming ? !pump(a) : !tp_outcome(a->tp)) return;
        received(a);
        drop_transfer(a);
        break;
      case AK_BACKOFF:
        if (pl_mono_ms(a->T, a->pg) < a->wake_at) return;
        a->state = AK_SEND;
        break;
      case AK_TOOLS: {
        st_verdict v = ak_step_tools(a);
        if (v.kind == SV_WAIT) return;
        move(a, v, AK_SEND);
        break;
      }
      case AK_END: end(a); return;
      default: return;
    }
  }
}

static int step_k(lua_State *T) {
  ak_ask *a = lua_touserdata(T, 2);
  luaL_checkstack(T, 30, "asking a model");
  lua_settop(T, AK_NVALUES);   /* a frame of its own: the outcome is at AK_VALUE here too */
  run_states(a);
  lua_settop(T, AK_NVALUES);
  return AK_NVALUES;
}

static int step_task(rt_task *t, long long *wait_ms) {
  ak_ask *a = (ak_ask *)t;
  if (wait_ms) *wait_ms = -1;
  if (a->state == AK_DONE) return 1;
  lua_State *T = a->T;
  lua_pushcfunction(T, step_k);
  lua_pushvalue(T, AK_VALUE);
  lua_pushlightuserdata(T, a);
  if (lua_pcall(T, 2, AK_NVALUES, 0) != LUA_OK) {
    char what[200];
    snprintf(what, sizeof what, "Agent '%s' could not ask its model", a->agent->name);
    pl_lost_values(T, AK_NVALUES, AK_VALUE, LE_ASK_PROVIDER_ERROR, what);
    a->ok = 0;
    drop_transfer(a);
    ak_drop_early(a);
    ak_cancel_tools(a);
    a->state = AK_DONE;
    return 1;
  }
  /* the step returned its values above the old ones: keep the new */
  for (int i = AK_NVALUES; i >= 1; i--) lua_replace(T, i);
  if (a->state == AK_DONE) return 1;
  if (wait_ms) {
    if (a->state == AK_BACKOFF) {
      long long left = a->wake_at - pl_mono_ms(T, a->pg);
      *wait_ms = left > 0 ? left : 0;
    } else if (a->state == AK_HTTP && a->held) {
      long long left = a->exchange_start + model_timeout(a) - pl_mono_ms(T, a->pg);
      *wait_ms = left > 0 ? left : 0;
    } else if (a->state == AK_TOOLS && a->starting) {
      *wait_ms = 0;   /* calls just started: rt_poll steps them next */
    }
  }
  return 0;
}
