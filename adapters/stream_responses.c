/* The Responses API streamed: typed events with a sequence_number; text,
   refusal and reasoning deltas; a function_call item added (its call_id and
   name), its arguments' deltas, the item done (a built-in call's item done
   delivers its call: AD_DELTA_PTOOL); then response.completed,
   .incomplete or .failed, which carries the whole response. Its output is
   the turn's; if it came without one, the items of output_item.done (whole,
   encrypted reasoning included) stand in, by output_index. */
#include "stream.h"

#include <stdlib.h>
#include <string.h>

typedef struct resp_item {
  long long index;            /* output_index */
  jv *item;                   /* output_item.done's, in s->out; NULL until then */
  const char *id;             /* the item's id, in s->out */
  int call;                   /* a function_call: its position; -1 */
} resp_item;

typedef struct resp_state {
  resp_item *items;
  int nitems, cap, ncalls;
} resp_state;

static resp_item *item_of(resp_state *st, long long index, const char *id) {
  for (int i = st->nitems - 1; i >= 0; i--) {
    resp_item *it = &st->items[i];
    if (id ? it->id && strcmp(it->id, id) == 0 : it->index == index) return it;
  }
  return NULL;
}

static resp_item *add_item(ad_stream *s, resp_state *st, long long index, const jv *item) {
  if (st->nitems == st->cap) {
    int cap = st->cap ? st->cap * 2 : 4;
    resp_item *r = realloc(st->items, sizeof *r * (size_t)cap);
    if (!r) { s->out->failed = 1; return NULL; }
    st->items = r;
    st->cap = cap;
  }
  resp_item *it = &st->items[st->nitems++];
  memset(it, 0, sizeof *it);
  it->index = index;
  const char *id = ad_str(item, "id");
  it->id = id ? ar_strdup(s->out, id) : NULL;
  it->call = -1;
  return it;
}

static void call_delta(ad_stream *s, ad_delta_kind kind, int call, const char *id, const char *name, const jv *text) {
  ad_delta d;
  memset(&d, 0, sizeof d);
  d.kind = kind;
  d.call = call;
  d.id = id;
  d.name = name;
  d.text = text ? text->s : "";
  d.len = text ? text->len : 0;
  if (kind != AD_DELTA_CALL_ARGS || d.len) ad_stream_delta(s, &d);
}

static int is(const char *type, const char *name) {
  return strcmp(type, name) == 0;
}

static int resp_event(ad_stream *s, const char *sse_type, const jv *data) {
  resp_state *st = s->fam;
  const char *type = ad_str(data, "type");
  if (!type) type = sse_type;
  const jv *delta = ad_get(data, "delta", JV_STR);
  long long index = ad_int(data, "output_index", -1);
  if (is(type, "response.output_text.delta") && delta) {
    ad_stream_text(s, AD_DELTA_TEXT, delta->s, delta->len);
  } else if (is(type, "response.refusal.delta") && delta) {
    ad_stream_text(s, AD_DELTA_REFUSAL, delta->s, delta->len);
  } else if ((is(type, "response.reasoning_summary_text.delta") || is(type, "response.reasoning_text.delta")) && delta) {
    ad_stream_text(s, AD_DELTA_REASONING, delta->s, delta->len);
  } else if (is(type, "response.output_item.added")) {
    const jv *item = ad_get(data, "item", JV_OBJ);
    resp_item *it = add_item(s, st, index, item);
    const char *itype = ad_str(item, "type");
    if (it && itype && is(itype, "function_call")) {
      it->call = st->ncalls++;
      const char *name = ad_str(item, "name");
      if (!name) return ad_stream_fail(s, LE_ASK_RESPONSE_INVALID, "%s's response cannot be read: a function_call has no name",
                                       ad_provider_name(s->model));
      call_delta(s, AD_DELTA_CALL_START, it->call, ad_str(item, "call_id"), name, NULL);
    }
  } else if (is(type, "response.function_call_arguments.delta") && delta) {
    resp_item *it = item_of(st, index, ad_str(data, "item_id"));
    if (it && it->call >= 0) call_delta(s, AD_DELTA_CALL_ARGS, it->call, NULL, NULL, delta);
  } else if (is(type, "response.output_item.done")) {
    const jv *item = ad_get(data, "item", JV_OBJ);
    if (!item) return ad_stream_fail(s, LE_ASK_STREAM_INVALID, "%s's response.output_item.done has no item",
                                     ad_provider_name(s->model));
    resp_item *it = item_of(st, index, NULL);
    if (!it) it = add_item(s, st, index, item);
    if (!it) return 1;
    it->item = ad_copy(s->out, item);
    if (it->call >= 0) call_delta(s, AD_DELTA_CALL_DONE, it->call, NULL, NULL, ad_get(item, "arguments", JV_STR));
    const char *itype = ad_str(it->item, "type");
    if (it->call < 0 && itype) {
      /* a built-in call's item done: its result came */
      ad_turn t;
      memset(&t, 0, sizeof t);
      ad_responses_builtin(s->out, &t, itype, it->item);
      ad_stream_ptcalls(s, &t);
    }
  } else if (is(type, "response.completed") || is(type, "response.incomplete")) {
    const jv *r = ad_get(data, "response", JV_OBJ);
    if (!r) return ad_stream_fail(s, LE_ASK_STREAM_INVALID, "%s's %s has no response", ad_provider_name(s->model), type);
    s->fam_body = ad_copy(s->out, r);
    return ad_stream_finish(s);
  } else if (is(type, "response.failed")) {
    return ad_stream_error(s, ad_get(data, "response", JV_OBJ), NULL);
  } else if (is(type, "error")) {
    return ad_stream_error(s, data, ad_str(data, "code"));
  }
  return 1;
}

static int by_output_index(const void *x, const void *y) {
  const resp_item *a = x, *b = y;
  return a->index < b->index ? -1 : a->index > b->index;
}

static jv *resp_body(ad_stream *s) {
  resp_state *st = s->fam;
  jv *r = s->fam_body;
  if (!r) return NULL;
  const jv *output = ad_get(r, "output", JV_ARR);
  if (output && output->count) return r;
  /* the response without its output: the items as they were done */
  ar_arena *a = s->out;
  if (st->nitems) qsort(st->items, (size_t)st->nitems, sizeof *st->items, by_output_index);
  jv *items = jv_arr(a);
  for (int i = 0; i < st->nitems; i++)
    if (st->items[i].item) jv_push(items, st->items[i].item);
  jv *body = jv_obj(a);
  for (jv *m = r->first; m; m = m->next)
    if (strcmp(m->key, "output") != 0) jv_setn(body, m->key, m->keylen, ad_share(a, m));
  jv_set(body, "output", items);
  return body;
}

static void resp_free(ad_stream *s) {
  resp_state *st = s->fam;
  free(st->items);
}

const ad_stream_family ad_stream_responses = { sizeof(resp_state), resp_event, resp_body, resp_free,
                                               "response.completed, .incomplete or .failed" };
