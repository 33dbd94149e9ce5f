/* Gemini streamGenerateContent?alt=sse: each event is a whole
   GenerateContentResponse holding the next parts of the first candidate.
   Runs of plain text parts (text, maybe thought: true) are joined; any
   other part (a functionCall, which comes whole, a part with a
   thoughtSignature, kept exactly and never merged) stays as it came. The
   last chunk has the finishReason; usageMetadata holds running totals, the
   last kept; the candidate's other members (groundingMetadata,
   urlContextMetadata, citationMetadata...: the last chunk has them, and
   none of the SDKs merges them) the last of each kept; a blocked prompt is a chunk with promptFeedback and no
   candidates. The stream ends at EOF. */
#include "stream.h"

#include <stdlib.h>
#include <string.h>

typedef struct ge_part {
  jv *part;                   /* a part kept whole, in s->out; NULL: a text run */
  sb_buf text;
  int thought;
} ge_part;

typedef struct ge_state {
  ge_part *parts;
  int nparts, cap, ncalls;
  int candidate;              /* a candidate came */
  jv *finish, *role;
  sb_buf usage, feedback;     /* the last ones, as JSON text: they come with every chunk */
  ad_members members;         /* the candidate's other members */
} ge_state;

/* {text} or {text, thought}: a part that may join its neighbours. */
static int plain_text(const jv *p, int *thought) {
  const jv *text = ad_get(p, "text", JV_STR);
  if (!text) return 0;
  *thought = 0;
  for (const jv *m = p->first; m; m = m->next) {
    if (strcmp(m->key, "text") == 0) continue;
    if (strcmp(m->key, "thought") == 0 && m->type == JV_BOOL) { *thought = m->b; continue; }
    return 0;
  }
  return 1;
}

static ge_part *new_part(ad_stream *s, ge_state *st) {
  if (st->nparts == st->cap) {
    int cap = st->cap ? st->cap * 2 : 8;
    ge_part *p = realloc(st->parts, sizeof *p * (size_t)cap);
    if (!p) { s->out->failed = 1; return NULL; }
    st->parts = p;
    st->cap = cap;
  }
  ge_part *p = &st->parts[st->nparts++];
  memset(p, 0, sizeof *p);
  return p;
}

static void part(ad_stream *s, ge_state *st, const jv *p) {
  int thought;
  if (plain_text(p, &thought)) {
    const jv *text = ad_get(p, "text", JV_STR);
    if (!text->len) return;
    ge_part *last = st->nparts ? &st->parts[st->nparts - 1] : NULL;
    if (!last || last->part || last->thought != thought) {
      last = new_part(s, st);
      if (!last) return;
      last->thought = thought;
    }
    sb_add(&last->text, text->s, text->len);
    ad_stream_text(s, thought ? AD_DELTA_REASONING : AD_DELTA_TEXT, text->s, text->len);
    return;
  }
  ge_part *kept = new_part(s, st);
  if (!kept) return;
  kept->part = ad_copy(s->out, p);
  const jv *text = ad_get(p, "text", JV_STR), *th = ad_get(p, "thought", JV_BOOL);
  if (text) ad_stream_text(s, th && th->b ? AD_DELTA_REASONING : AD_DELTA_TEXT, text->s, text->len);
  const jv *fc = ad_get(p, "functionCall", JV_OBJ);
  const char *name = ad_str(fc, "name");
  if (!name) return;   /* the parser says what is wrong with it */
  ad_delta d;
  memset(&d, 0, sizeof d);
  d.call = st->ncalls++;
  d.kind = AD_DELTA_CALL_START;
  d.id = ad_str(fc, "id");
  d.name = name;
  ad_stream_delta(s, &d);
  const jv *args = jv_get(fc, "args");
  size_t len = 2;
  const char *json = args ? ad_json_text(s->out, args, &len) : "{}";
  d.kind = AD_DELTA_CALL_ARGS;
  d.id = d.name = NULL;
  d.text = json ? json : "{}";
  d.len = json ? len : 2;
  ad_stream_delta(s, &d);
  d.kind = AD_DELTA_CALL_DONE;
  ad_stream_delta(s, &d);
}

static int ge_event(ad_stream *s, const char *sse_type, const jv *data) {
  (void)sse_type;
  ge_state *st = s->fam;
  if (!data) return ad_stream_fail(s, LE_ASK_STREAM_INVALID, "gemini's stream has a [DONE], which it never sends");
  if (ad_get(data, "error", JV_OBJ)) return ad_stream_error(s, data, NULL);
  const jv *v;
  if ((v = ad_get(data, "usageMetadata", JV_OBJ))) ad_keep(&st->usage, v);
  if ((v = ad_get(data, "promptFeedback", JV_OBJ))) {
    ad_keep(&st->feedback, v);
    if (ad_str(v, "blockReason")) s->complete = 1;
  }
  const jv *cands = ad_get(data, "candidates", JV_ARR);
  const jv *cand = cands ? cands->first : NULL;
  if (!cand) return 1;
  st->candidate = 1;
  const jv *content = ad_get(cand, "content", JV_OBJ);
  if ((v = ad_get(content, "role", JV_STR)) && !st->role) st->role = ad_copy(s->out, v);
  const jv *parts = ad_get(content, "parts", JV_ARR);
  for (const jv *p = parts ? parts->first : NULL; p; p = p->next) part(s, st, p);
  for (const jv *m = cand->first; m; m = m->next)
    if (strcmp(m->key, "content") != 0 && strcmp(m->key, "finishReason") != 0 && strcmp(m->key, "index") != 0)
      ad_keep_member(s, &st->members, m);
  if ((v = ad_get(cand, "finishReason", JV_STR)) && !st->finish) {
    st->finish = ad_copy(s->out, v);
    s->complete = 1;
  }
  return 1;
}

/* {candidates: [{content: {parts, role}, finishReason}], usageMetadata,
   promptFeedback?}: a whole response's shape. */
static jv *ge_body(ad_stream *s) {
  ge_state *st = s->fam;
  ar_arena *a = s->out;
  jv *body = jv_obj(a);
  if (st->candidate) {
    jv *cand = jv_obj(a);
    if (st->nparts) {
      jv *parts = jv_arr(a);
      for (int i = 0; i < st->nparts; i++) {
        ge_part *p = &st->parts[i];
        if (p->part) { jv_push(parts, p->part); continue; }
        jv *t = jv_obj(a);
        jv_set(t, "text", ad_sb_str(a, &p->text));
        if (p->thought) jv_set(t, "thought", jv_bool(a, 1));
        jv_push(parts, t);
      }
      jv *content = jv_obj(a);
      jv_set(content, "parts", parts);
      jv_set(content, "role", st->role ? st->role : jv_cstr(a, "model"));
      jv_set(cand, "content", content);
    }
    if (st->finish) jv_set(cand, "finishReason", st->finish);
    ad_put_members(a, cand, &st->members);
    jv_set(body, "candidates", jv_push(jv_arr(a), cand));
  }
  jv_set(body, "usageMetadata", ad_kept(a, &st->usage));
  jv_set(body, "promptFeedback", ad_kept(a, &st->feedback));
  return body;
}

static void ge_free(ad_stream *s) {
  ge_state *st = s->fam;
  for (int i = 0; i < st->nparts; i++) sb_free(&st->parts[i].text);
  free(st->parts);
  sb_free(&st->usage);
  sb_free(&st->feedback);
  ad_members_free(&st->members);
}

const ad_stream_family ad_stream_gemini = { sizeof(ge_state), ge_event, ge_body, ge_free, "a finishReason" };
