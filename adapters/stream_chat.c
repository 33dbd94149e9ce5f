/* Chat Completions streamed (stream: true): chunks of deltas for the first
   choice, tool calls keyed by their index and their arguments joined,
   finish_reason once, then (stream_options.include_usage) a last chunk with
   empty choices and the usage, then [DONE]. Azure's first chunk has empty
   choices too, and its annotation chunks a choice without a delta, even
   after the finish_reason (its filter may be late): the turn is complete at
   [DONE] only. */
#include "stream.h"

#include <stdlib.h>
#include <string.h>

typedef struct chat_call {
  long long index;
  sb_buf id, type, name, args;
  int has_id, has_name;
  int started;                /* CALL_START was delivered */
  size_t told;                /* bytes of args delivered */
} chat_call;

typedef struct chat_state {
  sb_buf content, refusal;
  int has_content, has_refusal;
  chat_call *calls;
  int ncalls, cap;
  long long next_unindexed;   /* a call with no index (a compatible server's whole call) */
  jv *finish;
  sb_buf usage;               /* the last usage, as JSON text */
  ad_members message;         /* the delta's other members (a search model's annotations): the last of each */
} chat_state;

/* What a delta holds that is not the message's own member as it came (those
   are joined or assembled): the SDK's assignOwnProperties of the rest. */
static int joined(const char *key) {
  static const char *const keys[] = { "role", "content", "refusal", "tool_calls", "function_call", "audio",
                                      "reasoning_content", "reasoning", NULL };
  for (const char *const *k = keys; *k; k++)
    if (strcmp(key, *k) == 0) return 1;
  return 0;
}

static chat_call *call_of(chat_state *st, long long index) {
  for (int i = st->ncalls - 1; i >= 0; i--)
    if (st->calls[i].index == index) return &st->calls[i];
  if (st->ncalls == st->cap) {
    int cap = st->cap ? st->cap * 2 : 4;
    chat_call *c = realloc(st->calls, sizeof *c * (size_t)cap);
    if (!c) return NULL;
    st->calls = c;
    st->cap = cap;
  }
  chat_call *c = &st->calls[st->ncalls++];
  memset(c, 0, sizeof *c);
  c->index = index;
  sb_init(&c->id);
  sb_init(&c->type);
  sb_init(&c->name);
  sb_init(&c->args);
  return c;
}

/* Delivers the call's start once its name is known, and its arguments so far. */
static void tell(ad_stream *s, chat_state *st, chat_call *c) {
  ad_delta d;
  memset(&d, 0, sizeof d);
  d.call = (int)(c - st->calls);
  if (!c->started && c->has_name) {
    c->started = 1;
    d.kind = AD_DELTA_CALL_START;
    d.id = c->has_id ? sb_str(&c->id) : NULL;
    d.name = sb_str(&c->name);
    ad_stream_delta(s, &d);
  }
  if (c->started && c->args.len > c->told) {
    d.kind = AD_DELTA_CALL_ARGS;
    d.id = d.name = NULL;
    d.text = c->args.data + c->told;
    d.len = c->args.len - c->told;
    c->told = c->args.len;
    ad_stream_delta(s, &d);
  }
}

static void tool_call(ad_stream *s, chat_state *st, const jv *tc) {
  long long index = ad_int(tc, "index", -1);
  if (index < 0) index = -1 - st->next_unindexed++;
  chat_call *c = call_of(st, index);
  if (!c) { s->out->failed = 1; return; }
  const jv *id = ad_get(tc, "id", JV_STR), *type = ad_get(tc, "type", JV_STR);
  if (id && !c->has_id) { sb_add(&c->id, id->s, id->len); c->has_id = 1; }
  if (type && !c->type.len) sb_add(&c->type, type->s, type->len);
  const jv *fn = ad_get(tc, "function", JV_OBJ);
  const jv *name = ad_get(fn, "name", JV_STR);
  if (name && !c->has_name) { sb_add(&c->name, name->s, name->len); c->has_name = 1; }
  const jv *args = fn ? jv_get(fn, "arguments") : NULL;
  if (args && args->type == JV_STR) sb_add(&c->args, args->s, args->len);
  else if (args && args->type == JV_OBJ) jv_write(&c->args, args, 0);
  tell(s, st, c);
}

static int chat_event(ad_stream *s, const char *type, const jv *data) {
  (void)type;
  chat_state *st = s->fam;
  if (!data) {   /* [DONE] */
    if (!st->finish)
      return ad_stream_fail(s, LE_ASK_TRUNCATED, "%s's stream ended with [DONE] but no finish_reason: the answer is not complete",
                            ad_provider_name(s->model));
    return ad_stream_finish(s);
  }
  const jv *error = jv_get(data, "error");
  if (error && error->type != JV_NULL && !(error->type == JV_BOOL && !error->b)) return ad_stream_error(s, data, NULL);
  const jv *usage = ad_get(data, "usage", JV_OBJ);
  if (usage) ad_keep(&st->usage, usage);
  const jv *choices = ad_get(data, "choices", JV_ARR);
  for (const jv *ch = choices ? choices->first : NULL; ch; ch = ch->next) {
    if (ad_int(ch, "index", 0) != 0) continue;   /* the turn is the first choice's */
    const jv *delta = ad_get(ch, "delta", JV_OBJ);
    const jv *content = ad_get(delta, "content", JV_STR), *refusal = ad_get(delta, "refusal", JV_STR);
    if (content) {
      st->has_content = 1;
      sb_add(&st->content, content->s, content->len);
      ad_stream_text(s, AD_DELTA_TEXT, content->s, content->len);
    }
    if (refusal) {
      st->has_refusal = 1;
      sb_add(&st->refusal, refusal->s, refusal->len);
      ad_stream_text(s, AD_DELTA_REFUSAL, refusal->s, refusal->len);
    }
    /* the compatible servers' reasoning (DeepSeek, vLLM, OpenRouter): shown,
       not part of the turn, as in a whole response */
    const jv *reasoning = ad_get(delta, "reasoning_content", JV_STR);
    if (!reasoning) reasoning = ad_get(delta, "reasoning", JV_STR);
    if (reasoning) ad_stream_text(s, AD_DELTA_REASONING, reasoning->s, reasoning->len);
    for (const jv *m = delta ? delta->first : NULL; m; m = m->next)
      if (!joined(m->key) && m->type != JV_NULL) ad_keep_member(s, &st->message, m);
    const jv *calls = ad_get(delta, "tool_calls", JV_ARR);
    for (const jv *tc = calls ? calls->first : NULL; tc; tc = tc->next) tool_call(s, st, tc);
    const jv *finish = ad_get(ch, "finish_reason", JV_STR);
    if (finish && !st->finish) {
      st->finish = ad_copy(s->out, finish);
      for (int i = 0; i < st->ncalls; i++) {
        chat_call *c = &st->calls[i];
        if (!c->started) continue;
        ad_delta d;
        memset(&d, 0, sizeof d);
        d.kind = AD_DELTA_CALL_DONE;
        d.call = i;
        d.text = sb_str(&c->args);
        d.len = c->args.len;
        ad_stream_delta(s, &d);
      }
    }
  }
  return 1;
}

static int by_index(const void *x, const void *y) {
  const chat_call *a = x, *b = y;
  return a->index < b->index ? -1 : a->index > b->index;
}

/* {choices: [{index: 0, message: {role, content, refusal?, tool_calls?},
   finish_reason}], usage?}: the shape of a whole response. */
static jv *chat_body(ad_stream *s) {
  chat_state *st = s->fam;
  ar_arena *a = s->out;
  jv *msg = jv_obj(a);
  jv_set(msg, "role", jv_cstr(a, "assistant"));
  jv_set(msg, "content", st->has_content ? ad_sb_str(a, &st->content) : jv_null(a));
  if (st->has_refusal) jv_set(msg, "refusal", ad_sb_str(a, &st->refusal));
  ad_put_members(a, msg, &st->message);
  if (st->ncalls) {
    /* stable: the calls in the order of their index (as they came, in every
       stream seen) */
    chat_call *sorted = malloc(sizeof *sorted * (size_t)st->ncalls);
    if (!sorted) return NULL;
    memcpy(sorted, st->calls, sizeof *sorted * (size_t)st->ncalls);
    qsort(sorted, (size_t)st->ncalls, sizeof *sorted, by_index);
    jv *calls = jv_arr(a);
    for (int i = 0; i < st->ncalls; i++) {
      chat_call *c = &sorted[i];
      jv *tc = jv_obj(a), *fn = jv_obj(a);
      if (c->has_id) jv_set(tc, "id", ad_sb_str(a, &c->id));
      jv_set(tc, "type", c->type.len ? ad_sb_str(a, &c->type) : jv_cstr(a, "function"));
      if (c->has_name) jv_set(fn, "name", ad_sb_str(a, &c->name));
      jv_set(fn, "arguments", ad_sb_str(a, &c->args));
      jv_set(tc, "function", fn);
      jv_push(calls, tc);
    }
    free(sorted);
    jv_set(msg, "tool_calls", calls);
  }
  jv *choice = jv_obj(a);
  jv_set(choice, "index", jv_int(a, 0));
  jv_set(choice, "message", msg);
  jv_set(choice, "finish_reason", st->finish ? st->finish : jv_null(a));
  jv *body = jv_obj(a);
  jv_set(body, "choices", jv_push(jv_arr(a), choice));
  jv_set(body, "usage", ad_kept(a, &st->usage));
  return body;
}

static void chat_free(ad_stream *s) {
  chat_state *st = s->fam;
  for (int i = 0; i < st->ncalls; i++) {
    sb_free(&st->calls[i].id);
    sb_free(&st->calls[i].type);
    sb_free(&st->calls[i].name);
    sb_free(&st->calls[i].args);
  }
  free(st->calls);
  sb_free(&st->content);
  sb_free(&st->refusal);
  sb_free(&st->usage);
  ad_members_free(&st->message);
}

const ad_stream_family ad_stream_chat = { sizeof(chat_state), chat_event, chat_body, chat_free, "[DONE]" };
