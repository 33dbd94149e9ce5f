/* What the families' stream parsers share (internal to adapters/): the
   stream, the events a family reads, and the assembly of its turn. */
#ifndef LUMA_ADAPTERS_STREAM_H
#define LUMA_ADAPTERS_STREAM_H

#include "common.h"
#include "sse.h"

typedef struct ad_stream_family ad_stream_family;

struct ad_stream {
  const ad_model *model;
  const ad_stream_family *sf;
  ar_arena *out;              /* the turn's, the errors' and what the turn is made of */
  ar_arena scratch;           /* one event's JSON, freed after it */
  sse_reader sse;
  ad_on_delta on_delta;
  void *ud;
  ad_error error;
  ad_turn turn;
  int failed;
  int complete;               /* the final event came: the stream may end */
  int ended;                  /* the turn is made and END was delivered */
  void *fam;                  /* the family's state */
  jv *fam_body;               /* a family's whole response, when one came (responses) */
  jv *whole;                  /* the response the stream stood for, once it ended with a turn */
  int ptold;                  /* the provider's own calls delivered as they came (AD_DELTA_PTOOL) */
};

struct ad_stream_family {
  size_t state_size;
  /* One event: type is SSE's event field, data its JSON (NULL for [DONE]).
     0 once the stream failed (ad_stream_fail, ad_stream_error). */
  int (*event)(ad_stream *s, const char *type, const jv *data);
  /* The whole response the events stand for, in s->out. */
  jv *(*body)(ad_stream *s);
  void (*free)(ad_stream *s);
  const char *final;          /* the final event, as the truncation error names it */
};

extern const ad_stream_family ad_stream_chat, ad_stream_responses, ad_stream_anthropic, ad_stream_gemini;

void ad_stream_delta(ad_stream *s, const ad_delta *d);
void ad_stream_text(ad_stream *s, ad_delta_kind kind, const char *text, size_t len);
/* Fails the stream with code and a message (printf). Returns 0. */
int ad_stream_fail(ad_stream *s, le_code code, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;
/* Fails the stream with the provider's error event (its family's error
   body), classified by its HTTP equivalent. Returns 0. */
int ad_stream_error(ad_stream *s, const jv *body, const char *type);
/* Delivers the provider's own calls t lists (AD_DELTA_PTOOL), those whose
   result just came; at the end ad_stream_finish delivers those of the turn
   that were not, in the turn's order, which the family's parser and its
   stream parser must agree on. */
void ad_stream_ptcalls(ad_stream *s, const ad_turn *t);
/* The final event came: makes the turn from the family's body and delivers
   USAGE and END. Returns 0 if the body is no turn. */
int ad_stream_finish(ad_stream *s);

/* A deep copy of v in a (keys and strings too). */
jv *ad_copy(ar_arena *a, const jv *v);
/* A value that each event may replace (Gemini's running usage), kept as
   JSON text in b so that a long stream does not pile up copies; ad_kept
   reads it back in a (NULL if none was kept). */
void ad_keep(sb_buf *b, const jv *v);
jv *ad_kept(ar_arena *a, const sb_buf *b);
/* Members that each event may give anew (Gemini's candidate metadata,
   Chat's annotations): the last value of each key, as JSON text, in the
   order the keys first came. */
typedef struct ad_member {
  char *key;
  size_t keylen;
  sb_buf json;
} ad_member;

typedef struct ad_members {
  ad_member *items;
  int n, cap;
} ad_members;

void ad_keep_member(ad_stream *s, ad_members *ms, const jv *m);
/* Sets each kept member on obj, in a. */
void ad_put_members(ar_arena *a, jv *obj, const ad_members *ms);
void ad_members_free(ad_members *ms);
/* A string node holding a copy of the buffer's bytes. */
jv *ad_sb_str(ar_arena *a, sb_buf *b);

#endif
