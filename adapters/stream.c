/* Streamed answers (adapter.h's ad_stream): the SSE reader feeds the
   family's stream parser one event at a time, each event's JSON in a
   scratch arena freed after it; the parser delivers deltas and keeps what
   the turn is made of, and at the final event the stream is assembled into
   the response it stands for, which the family's own parser reads. */
#include "stream.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "luma_limits.h"

static const ad_stream_family *stream_family(const ad_model *m) {
  const ad_family *f = ad_family_of(m);
  if (f == &ad_anthropic_family) return &ad_stream_anthropic;
  if (f == &ad_gemini_family) return &ad_stream_gemini;
  if (f == &ad_openai_responses) return &ad_stream_responses;
  return &ad_stream_chat;
}

int ad_stream_fail(ad_stream *s, le_code code, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  s->failed = 1;
  memset(&s->error, 0, sizeof s->error);
  s->error.code = code;
  s->error.status = 200;
  s->error.retry_after_ms = -1;
  /* a cut stream is a failure of the transfer: asked again, it may come whole */
  s->error.retryable = code == LE_ASK_TRUNCATED;
  const char *m = ar_strdup(s->out, msg);
  s->error.message = m ? ad_redact(s->out, m, s->model->api_key) : "the stream failed";
  return 0;
}

/* An error's type as the HTTP status it stands for (PROVIDERS.md). */
static int status_of(const char *type) {
  static const struct { const char *type; int status; } known[] = {
    { "invalid_request_error", 400 }, { "authentication_error", 401 }, { "permission_error", 403 },
    { "not_found_error", 404 }, { "request_too_large", 413 }, { "rate_limit_error", 429 },
    { "rate_limit_exceeded", 429 }, { "insufficient_quota", 429 }, { "api_error", 500 },
    { "server_error", 500 }, { "overloaded_error", 529 }, { "timeout_error", 504 },
    { "INVALID_ARGUMENT", 400 }, { "PERMISSION_DENIED", 403 }, { "NOT_FOUND", 404 },
    { "RESOURCE_EXHAUSTED", 429 }, { "INTERNAL", 500 }, { "UNAVAILABLE", 503 }, { "DEADLINE_EXCEEDED", 504 },
  };
  for (size_t i = 0; type && i < sizeof known / sizeof *known; i++)
    if (strcmp(type, known[i].type) == 0) return known[i].status;
  return 0;
}

int ad_stream_error(ad_stream *s, const jv *body, const char *type) {
  const char *message = NULL, *t = NULL;
  long long delay = -1;
  ad_family_of(s->model)->error_of(body, &message, &t, &delay);
  if (!t) t = type;
  int status = (int)ad_int(ad_get(body, "error", JV_OBJ), "code", 0);   /* gemini's */
  if (status < 400 || status > 599) status = status_of(t);
  ad_stream_fail(s, LE_ASK_PROVIDER_ERROR, "%s sent an error in its stream%s%s%s%s", ad_provider_name(s->model),
                 t ? " (" : "", t ? t : "", t ? ")" : "", message ? ar_printf(s->out, ": %s", message) : "");
  s->error.status = status ? status : 200;
  s->error.type = t ? ar_strdup(s->out, t) : NULL;
  s->error.retryable = status && ad_retryable_status(status) && !(t && strstr(t, "insufficient_quota"));
  s->error.retry_after_ms = delay;
  return 0;
}

void ad_stream_delta(ad_stream *s, const ad_delta *d) {
  if (s->on_delta) s->on_delta(s->ud, d);
}

void ad_stream_text(ad_stream *s, ad_delta_kind kind, const char *text, size_t len) {
  if (!len) return;
  ad_delta d;
  memset(&d, 0, sizeof d);
  d.kind = kind;
  d.text = text;
  d.len = len;
  ad_stream_delta(s, &d);
}

void ad_stream_ptcalls(ad_stream *s, const ad_turn *t) {
  ad_delta d;
  memset(&d, 0, sizeof d);
  d.kind = AD_DELTA_PTOOL;
  for (int i = 0; i < t->nptcalls; i++) {
    d.call = s->ptold++;
    d.ptcall = &t->ptcalls[i];
    ad_stream_delta(s, &d);
  }
}

int ad_stream_finish(ad_stream *s) {
  jv *body = s->sf->body(s);
  if (!body || s->out->failed) return ad_stream_fail(s, LE_ASK_RESPONSE_INVALID, "out of memory");
  memset(&s->turn, 0, sizeof s->turn);
  s->turn.input_tokens = s->turn.output_tokens = -1;
  ad_error e;
  memset(&e, 0, sizeof e);
  if (!ad_turn_of_body(s->model, body, s->out, &s->turn, &e)) {
    s->failed = 1;
    e.status = 200;
    e.retry_after_ms = -1;
    e.message = ad_redact(s->out, e.message, s->model->api_key);
    s->error = e;
    return 0;
  }
  s->ended = 1;
  s->whole = body;
  ad_delta d;
  memset(&d, 0, sizeof d);
  /* the provider's own calls not delivered as they came, read from the
     whole response as ad_parse reads them */
  d.kind = AD_DELTA_PTOOL;
  for (int i = s->ptold; i < s->turn.nptcalls; i++) {
    d.call = i;
    d.ptcall = &s->turn.ptcalls[i];
    ad_stream_delta(s, &d);
  }
  s->ptold = s->turn.nptcalls;
  d.ptcall = NULL;
  d.call = 0;
  d.kind = AD_DELTA_USAGE;
  d.input_tokens = s->turn.input_tokens;
  d.output_tokens = s->turn.output_tokens;
  ad_stream_delta(s, &d);
  d.kind = AD_DELTA_END;
  d.stop = s->turn.stop;
  d.stop_reason = s->turn.stop_reason;
  ad_stream_delta(s, &d);
  return 1;
}

static int on_event(void *ud, const sse_event *ev) {
  ad_stream *s = ud;
  if (s->ended || s->failed) return !s->failed;   /* after the final event: nothing more counts */
  const jv *data = NULL;
  if (!(ev->len == 6 && memcmp(ev->data, "[DONE]", 6) == 0)) {
    char why[200];
    data = json_parse(&s->scratch, ev->data, ev->len, LIM_MODEL_JSON_DEPTH, why, sizeof why);
    if (!data) {
      char ex[160];
      ad_excerpt(ev->data, ev->len, ex, sizeof ex);
      ar_free(&s->scratch);
      ar_init(&s->scratch);
      return ad_stream_fail(s, LE_ASK_STREAM_INVALID, "%s's stream has an event whose data is not JSON (%s): %s",
                            ad_provider_name(s->model), why, ex);
    }
  }
  int ok = s->sf->event(s, ev->type, data);
  ar_free(&s->scratch);
  ar_init(&s->scratch);
  if (ok && s->out->failed) return ad_stream_fail(s, LE_ASK_RESPONSE_INVALID, "out of memory");
  return ok;
}

ad_stream *ad_stream_new(const ad_model *m, ar_arena *a, ad_on_delta on_delta, void *ud) {
  ad_stream *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->model = m;
  s->sf = stream_family(m);
  s->out = a;
  s->on_delta = on_delta;
  s->ud = ud;
  ar_init(&s->scratch);
  sse_init(&s->sse, LIM_SSE_MAX_EVENT_BYTES, on_event, s);
  s->fam = calloc(1, s->sf->state_size);
  if (!s->fam) {
    ad_stream_free(s);
    return NULL;
  }
  return s;
}

void ad_stream_free(ad_stream *s) {
  if (!s) return;
  if (s->fam) s->sf->free(s);
  free(s->fam);
  sse_free(&s->sse);
  ar_free(&s->scratch);
  free(s);
}

int ad_stream_feed(ad_stream *s, const char *bytes, size_t n, ad_error *err) {
  if (!s->failed && !sse_feed(&s->sse, bytes, n) && !s->failed)
    ad_stream_fail(s, LE_ASK_STREAM_INVALID, "%s's stream: %s", ad_provider_name(s->model), s->sse.error);
  if (s->failed) *err = s->error;
  return !s->failed;
}

int ad_stream_end(ad_stream *s, ad_turn *turn, ad_error *err) {
  if (!s->failed && !s->ended) {
    if (s->complete) ad_stream_finish(s);
    else
      ad_stream_fail(s, LE_ASK_TRUNCATED, "%s's stream ended before its final event (%s): the answer is not complete",
                     ad_provider_name(s->model), s->sf->final);
  }
  if (s->failed) {
    *err = s->error;
    return 0;
  }
  *turn = s->turn;
  return 1;
}

const jv *ad_stream_response(const ad_stream *s) {
  return s->ended ? s->whole : NULL;
}

jv *ad_copy(ar_arena *a, const jv *v) {
  jv *n;
  switch (v->type) {
    case JV_STR: return jv_strcopy(a, v->s, v->len);
    case JV_ARR:
      n = jv_arr(a);
      for (const jv *i = v->first; i; i = i->next) jv_push(n, ad_copy(a, i));
      return n;
    case JV_OBJ:
      n = jv_obj(a);
      for (const jv *m = v->first; m; m = m->next) jv_setn(n, ar_strndup(a, m->key, m->keylen), m->keylen, ad_copy(a, m));
      return n;
    default:
      n = ar_alloc(a, sizeof *n);
      if (!n) return NULL;
      *n = *v;
      n->key = NULL;
      n->next = NULL;
      return n;
  }
}

void ad_keep(sb_buf *b, const jv *v) {
  b->len = 0;
  jv_write(b, v, 0);
}

jv *ad_kept(ar_arena *a, const sb_buf *b) {
  char why[200];
  return b->len && !b->failed ? json_parse(a, b->data, b->len, LIM_MODEL_JSON_DEPTH + 1, why, sizeof why) : NULL;
}

jv *ad_sb_str(ar_arena *a, sb_buf *b) {
  return jv_strcopy(a, b->data ? b->data : "", b->len);
}

void ad_keep_member(ad_stream *s, ad_members *ms, const jv *m) {
  ad_member *k = NULL;
  for (int i = 0; i < ms->n && !k; i++)
    if (ms->items[i].keylen == m->keylen && memcmp(ms->items[i].key, m->key, m->keylen) == 0) k = &ms->items[i];
  if (!k) {
    if (ms->n == ms->cap) {
      int cap = ms->cap ? ms->cap * 2 : 4;
      ad_member *more = realloc(ms->items, sizeof *more * (size_t)cap);
      if (!more) { s->out->failed = 1; return; }
      ms->items = more;
      ms->cap = cap;
    }
    k = &ms->items[ms->n];
    memset(k, 0, sizeof *k);
    k->key = malloc(m->keylen + 1);
    if (!k->key) { s->out->failed = 1; return; }
    memcpy(k->key, m->key, m->keylen);
    k->key[m->keylen] = 0;
    k->keylen = m->keylen;
    ms->n++;
  }
  ad_keep(&k->json, m);
}

void ad_put_members(ar_arena *a, jv *obj, const ad_members *ms) {
  for (int i = 0; i < ms->n; i++) {
    jv *v = ad_kept(a, &ms->items[i].json);
    if (v) jv_setn(obj, ar_strndup(a, ms->items[i].key, ms->items[i].keylen), ms->items[i].keylen, v);
  }
}

void ad_members_free(ad_members *ms) {
  for (int i = 0; i < ms->n; i++) {
    free(ms->items[i].key);
    sb_free(&ms->items[i].json);
  }
  free(ms->items);
  memset(ms, 0, sizeof *ms);
}
