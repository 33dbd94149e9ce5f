/* Anthropic Messages streamed: message_start (the message, content empty),
   per block content_block_start, _delta and _stop, then message_delta (the
   stop reason, the usage so far) and message_stop. input_json_delta
   fragments are joined and parsed at the block's stop; a thinking block's
   signature_delta sets its signature, kept exactly; a text block's
   citations_delta appends to its citations; a server_tool_use's input comes
   as a tool_use's does, and the server tools' result blocks come whole in
   their start (their call is delivered then: AD_DELTA_PTOOL); message_delta's delta members replace the message's (a null
   container replaces nothing, as the SDKs do); ping and unknown events are
   ignored; an error event is the provider's error. */
#include "stream.h"

#include <stdlib.h>
#include <string.h>

typedef struct an_block {
  long long index;
  jv *start;                  /* content_block of content_block_start, in s->out */
  sb_buf text;                /* text, thinking: the block's text so far */
  sb_buf json;                /* the input_json_delta fragments joined */
  jv *signature;
  jv *citations;              /* citations_delta's, in s->out; NULL: none came */
  int call;                   /* tool_use: the call's position; -1 */
  int has_json;
} an_block;

typedef struct an_state {
  jv *message;                /* message_start's, in s->out */
  an_block *blocks;
  int nblocks, cap, ncalls;
  jv *delta, *usage;          /* the last message_delta's delta and usage */
  jv *container;              /* the last container a message_delta gave (null: none) */
} an_state;

static an_block *block_of(an_state *st, long long index) {
  for (int i = st->nblocks - 1; i >= 0; i--)
    if (st->blocks[i].index == index) return &st->blocks[i];
  return NULL;
}

static int start_block(ad_stream *s, an_state *st, const jv *data) {
  const jv *cb = ad_get(data, "content_block", JV_OBJ);
  if (!cb) return ad_stream_fail(s, LE_ASK_STREAM_INVALID, "anthropic's content_block_start has no content_block");
  if (st->nblocks == st->cap) {
    int cap = st->cap ? st->cap * 2 : 4;
    an_block *b = realloc(st->blocks, sizeof *b * (size_t)cap);
    if (!b) return ad_stream_fail(s, LE_ASK_RESPONSE_INVALID, "out of memory");
    st->blocks = b;
    st->cap = cap;
  }
  an_block *b = &st->blocks[st->nblocks++];
  memset(b, 0, sizeof *b);
  b->index = ad_int(data, "index", st->nblocks - 1);
  b->start = ad_copy(s->out, cb);
  b->call = -1;
  const char *type = ad_str(cb, "type");
  const jv *text = ad_get(cb, type && strcmp(type, "thinking") == 0 ? "thinking" : "text", JV_STR);
  if (text) {
    sb_add(&b->text, text->s, text->len);
    ad_stream_text(s, type && strcmp(type, "thinking") == 0 ? AD_DELTA_REASONING : AD_DELTA_TEXT, text->s, text->len);
  }
  size_t tn = type ? strlen(type) : 0;
  if (tn > 12 && strcmp(type + tn - 12, "_tool_result") == 0) {
    /* a server tool's result comes whole: its call is done. Its
       server_tool_use is among the blocks so far (or in a past turn) */
    jv *so_far = jv_arr(&s->scratch);
    for (int i = 0; i < st->nblocks - 1; i++) jv_push(so_far, ad_share(&s->scratch, st->blocks[i].start));
    ad_turn t;
    memset(&t, 0, sizeof t);
    ad_anthropic_server_result(s->out, &t, so_far, type, b->start);
    ad_stream_ptcalls(s, &t);
  }
  if (type && strcmp(type, "tool_use") == 0) {
    b->call = st->ncalls++;
    ad_delta d;
    memset(&d, 0, sizeof d);
    d.kind = AD_DELTA_CALL_START;
    d.call = b->call;
    d.id = ad_str(cb, "id");
    d.name = ad_str(cb, "name");
    if (!d.name) return ad_stream_fail(s, LE_ASK_RESPONSE_INVALID, "anthropic's response cannot be read: a tool_use block has no name");
    ad_stream_delta(s, &d);
  }
  return 1;
}

static int block_delta(ad_stream *s, an_state *st, const jv *data) {
  an_block *b = block_of(st, ad_int(data, "index", -1));
  const jv *delta = ad_get(data, "delta", JV_OBJ);
  const char *type = ad_str(delta, "type");
  if (!b || !type) return ad_stream_fail(s, LE_ASK_STREAM_INVALID, "anthropic's content_block_delta is for no block started");
  const jv *v;
  if (strcmp(type, "text_delta") == 0 && (v = ad_get(delta, "text", JV_STR))) {
    sb_add(&b->text, v->s, v->len);
    ad_stream_text(s, AD_DELTA_TEXT, v->s, v->len);
  } else if (strcmp(type, "thinking_delta") == 0 && (v = ad_get(delta, "thinking", JV_STR))) {
    sb_add(&b->text, v->s, v->len);
    ad_stream_text(s, AD_DELTA_REASONING, v->s, v->len);
  } else if (strcmp(type, "input_json_delta") == 0 && (v = ad_get(delta, "partial_json", JV_STR))) {
    sb_add(&b->json, v->s, v->len);
    b->has_json = 1;
    if (b->call >= 0 && v->len) {
      ad_delta d;
      memset(&d, 0, sizeof d);
      d.kind = AD_DELTA_CALL_ARGS;
      d.call = b->call;
      d.text = v->s;
      d.len = v->len;
      ad_stream_delta(s, &d);
    }
  } else if (strcmp(type, "signature_delta") == 0 && (v = ad_get(delta, "signature", JV_STR))) {
    b->signature = ad_copy(s->out, v);   /* set, not appended */
  } else if (strcmp(type, "citations_delta") == 0 && (v = ad_get(delta, "citation", JV_OBJ))) {
    if (!b->citations) b->citations = jv_arr(s->out);
    jv_push(b->citations, ad_copy(s->out, v));
  }
  return 1;
}

static int stop_block(ad_stream *s, an_state *st, const jv *data) {
  an_block *b = block_of(st, ad_int(data, "index", -1));
  if (!b) return ad_stream_fail(s, LE_ASK_STREAM_INVALID, "anthropic's content_block_stop is for no block started");
  if (b->call < 0) return 1;
  ad_delta d;
  memset(&d, 0, sizeof d);
  d.kind = AD_DELTA_CALL_DONE;
  d.call = b->call;
  d.text = b->json.len ? sb_str(&b->json) : "{}";
  d.len = b->json.len ? b->json.len : 2;
  ad_stream_delta(s, &d);
  return 1;
}

static int an_event(ad_stream *s, const char *sse_type, const jv *data) {
  an_state *st = s->fam;
  const char *type = ad_str(data, "type");
  if (!type) type = sse_type;
  if (strcmp(type, "message_start") == 0) {
    const jv *m = ad_get(data, "message", JV_OBJ);
    if (!m) return ad_stream_fail(s, LE_ASK_STREAM_INVALID, "anthropic's message_start has no message");
    st->message = ad_copy(s->out, m);
  } else if (strcmp(type, "content_block_start") == 0) {
    return start_block(s, st, data);
  } else if (strcmp(type, "content_block_delta") == 0) {
    return block_delta(s, st, data);
  } else if (strcmp(type, "content_block_stop") == 0) {
    return stop_block(s, st, data);
  } else if (strcmp(type, "message_delta") == 0) {
    const jv *delta = ad_get(data, "delta", JV_OBJ), *v;
    if (delta) st->delta = ad_copy(s->out, delta);   /* the last one's members */
    if ((v = ad_get(delta, "container", JV_OBJ))) st->container = ad_copy(s->out, v);
    if ((v = ad_get(data, "usage", JV_OBJ))) st->usage = ad_copy(s->out, v);   /* cumulative: replaced */
  } else if (strcmp(type, "message_stop") == 0) {
    if (!st->message) return ad_stream_fail(s, LE_ASK_STREAM_INVALID, "anthropic's stream has no message_start");
    return ad_stream_finish(s);
  } else if (strcmp(type, "error") == 0) {
    return ad_stream_error(s, data, NULL);
  }
  return 1;   /* ping, and what a newer API adds */
}

/* A block as a whole response has it: the start's members, with the text,
   the thinking and its signature, or the parsed input in place. */
static jv *block_body(ad_stream *s, an_block *b) {
  ar_arena *a = s->out;
  const char *type = ad_str(b->start, "type");
  int thinking = type && strcmp(type, "thinking") == 0;
  const char *text_key = thinking ? "thinking" : type && strcmp(type, "text") == 0 ? "text" : NULL;
  /* a call (tool_use, server_tool_use, mcp_tool_use) has an input, {} when
     nothing came: the whole response always gives one */
  int call = type && (strcmp(type, "tool_use") == 0 || strcmp(type, "server_tool_use") == 0 ||
                      strcmp(type, "mcp_tool_use") == 0);
  jv *input = NULL;
  if (b->has_json || call || jv_get(b->start, "input")) {
    if (b->json.len) {
      char why[200];
      input = json_parse(a, b->json.data, b->json.len, LIM_MODEL_JSON_DEPTH, why, sizeof why);
      if (!input) {
        ad_stream_fail(s, LE_ASK_STREAM_INVALID, "anthropic's input_json_delta fragments of block %lld are not JSON (%s)",
                       b->index, why);
        return NULL;
      }
    } else {
      input = jv_obj(a);   /* nothing sent: {} */
    }
  }
  jv *out = jv_obj(a);
  int has_sig = 0;
  for (jv *m = b->start->first; m; m = m->next) {
    jv *v = m;
    if (text_key && strcmp(m->key, text_key) == 0) v = ad_sb_str(a, &b->text);
    else if (input && strcmp(m->key, "input") == 0) v = input, input = NULL;
    else if (thinking && b->signature && strcmp(m->key, "signature") == 0) v = b->signature, has_sig = 1;
    else if (b->citations && strcmp(m->key, "citations") == 0) v = b->citations, b->citations = NULL;
    else v = ad_share(a, m);
    jv_setn(out, m->key, m->keylen, v);
  }
  if (input) jv_set(out, "input", input);
  if (b->citations) jv_set(out, "citations", b->citations);
  if (thinking && b->signature && !has_sig) jv_set(out, "signature", b->signature);
  return out;
}

/* What message_delta says of a member of the message: the container's last
   non-null value, the delta's other members; NULL: the message's stands. */
static jv *delta_member(an_state *st, const char *key) {
  if (strcmp(key, "container") == 0) return st->container;
  return st->delta ? jv_get(st->delta, key) : NULL;
}

static jv *an_body(ad_stream *s) {
  an_state *st = s->fam;
  ar_arena *a = s->out;
  jv *content = jv_arr(a);
  for (int i = 0; i < st->nblocks; i++) {
    jv *b = block_body(s, &st->blocks[i]);
    if (!b) return NULL;
    jv_push(content, b);
  }
  jv *body = jv_obj(a);
  int has_content = 0, has_usage = 0;
  for (jv *m = st->message->first; m; m = m->next) {
    jv *v, *d;
    if (strcmp(m->key, "content") == 0) v = content, has_content = 1;
    else if ((d = delta_member(st, m->key))) v = ad_share(a, d);
    else if (strcmp(m->key, "usage") == 0 && st->usage && m->type == JV_OBJ) {
      /* message_start's usage, each member message_delta gives replaced
         (as the SDKs do: a null there replaces nothing) */
      v = jv_obj(a);
      for (jv *u = m->first; u; u = u->next) {
        jv *n = jv_get(st->usage, u->key);
        jv_setn(v, u->key, u->keylen, ad_share(a, n && n->type != JV_NULL ? n : u));
      }
      for (jv *n = st->usage->first; n; n = n->next)
        if (!jv_get(m, n->key)) jv_setn(v, n->key, n->keylen, ad_share(a, n));
      has_usage = 1;
    } else v = ad_share(a, m);
    jv_setn(body, m->key, m->keylen, v);
  }
  if (!has_content) jv_set(body, "content", content);
  for (jv *d = st->delta ? st->delta->first : NULL; d; d = d->next)
    if (!jv_get(st->message, d->key) && strcmp(d->key, "container") != 0) jv_setn(body, d->key, d->keylen, ad_share(a, d));
  if (st->container && !jv_get(st->message, "container")) jv_set(body, "container", st->container);
  if (!has_usage && st->usage) jv_set(body, "usage", st->usage);
  return body;
}

static void an_free(ad_stream *s) {
  an_state *st = s->fam;
  for (int i = 0; i < st->nblocks; i++) {
    sb_free(&st->blocks[i].text);
    sb_free(&st->blocks[i].json);
  }
  free(st->blocks);
}

const ad_stream_family ad_stream_anthropic = { sizeof(an_state), an_event, an_body, an_free, "message_stop" };
