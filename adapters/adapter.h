/*
 * Provider adapters: pure functions between the agent loop and a model's
 * HTTP API. A conversation goes in and a request comes out (method, URL,
 * headers, JSON body); a response goes in (status, headers, body) and a turn
 * or a typed error comes out. No I/O, no Lua, no clock, no randomness of
 * their own: the loop sends the requests over the transport, and a recording
 * or an embedder may send them any other way. Wire facts: PROVIDERS.md.
 *
 * Memory: what ad_build and ad_parse return lives in the arena the caller
 * passes; a conversation owns its buffers until ad_conv_free.
 */
#ifndef LUMA_ADAPTER_H
#define LUMA_ADAPTER_H

#include <stddef.h>

#include "arena.h"
#include "errors.h"
#include "json.h"
#include "providers.h"
#include "ptools.h"
#include "strbuf.h"
typedef struct ad_header {
  const char *name;
  const char *value;
} ad_header;

typedef struct ad_model {
  ad_provider provider;
  ad_api api;
  const char *name;           /* the provider's model name; unused by azure */
  const char *base_url;       /* NULL: the provider's default (azure has none) */
  const char *api_key;        /* the key itself; NULL: no auth header */
  const char *deployment;     /* azure */
  const char *api_version;    /* azure; NULL: the v1 API */
  double temperature;
  int has_temperature;
  long long max_tokens;       /* <= 0: not sent (anthropic, which needs one: 4096) */
  const ad_header *headers;   /* extra headers, sent after the adapter's own */
  int nheaders;
} ad_model;

typedef struct ad_tool {
  const char *name;
  const char *description;    /* NULL: none */
  const jv *parameters;       /* the tool's input JSON Schema, as js_tool makes it */
  int deferred;               /* sent with defer_loading: true (the ask's tool_search finds it) */
} ad_tool;

/* A tool the provider runs (ptools.h): its kind and options; each family
   writes the entry the capability table names. */
typedef struct ad_ptool {
  ad_ptkind kind;
  long long max_uses;                 /* <= 0: not sent */
  const char *const *allowed_domains;
  int nallowed;
  const char *const *blocked_domains;
  int nblocked;
  const ad_header *location;          /* city, region, country, timezone: as written */
  int nlocation;
  const char *const *vector_stores;
  int nvector_stores;
  const char *container;              /* NULL: the provider's own (a new one, reused after) */
} ad_ptool;

typedef enum { AD_CHOICE_AUTO, AD_CHOICE_REQUIRED, AD_CHOICE_NONE, AD_CHOICE_TOOL } ad_choice;

/* What one request asks for, besides the conversation. */
typedef struct ad_ask {
  const ad_tool *tools;
  int ntools;
  ad_choice choice;
  const char *choice_tool;    /* AD_CHOICE_TOOL: the tool's name */
  const jv *final_schema;     /* non-NULL: the answer must be JSON of this schema */
  const char *final_name;     /* its name, [A-Za-z0-9_-] */
  int stream;                 /* ask for a stream (each family's flag; ad_stream_* reads it) */
  const ad_ptool *ptools;     /* the provider tools, sent with every request */
  int nptools;
  const char *tool_search;    /* the native tool search's entry (ad_tool_search), or NULL */
} ad_ask;

typedef struct ad_call {
  const char *id;             /* NULL when the provider gave none: match by position */
  const char *name;
  const char *arguments;      /* JSON text as the model wrote it: maybe invalid */
  size_t arguments_len;
} ad_call;

typedef enum {
  AD_STOP_END,                /* a final answer */
  AD_STOP_TOOLS,              /* tool calls to run (decided by content, not the reason) */
  AD_STOP_LENGTH,             /* cut at the token limit */
  AD_STOP_FILTER,             /* a safety or content filter stopped the answer */
  AD_STOP_BLOCKED,            /* the prompt was blocked: no answer at all */
  AD_STOP_REFUSAL,            /* the model refused */
  AD_STOP_OTHER,
  AD_STOP_PAUSE               /* the provider paused its own tool loop: send the turn back as it is */
} ad_stop;

/* A source the answer cites (a provider tool's result). */
typedef struct ad_citation {
  const char *url;
  const char *title;          /* NULL: none */
  const char *cited_text;     /* NULL: none */
} ad_citation;

/* A call a provider ran itself, once its result came (ad_turn.ptcalls). */
typedef struct ad_ptcall {
  const char *id;             /* the provider's (srvtoolu_..., ws_...); NULL: none given */
  const char *name;           /* the kind's name (ad_ptkind_names), or the provider's own
                                 name for one that is no kind (tool_search_tool_regex) */
  int kind;                   /* an ad_ptkind, -1: none */
  const char *error_code;     /* NULL: it completed; else the provider's code of its failure */
  const char *error;          /* then what failed, in words */
} ad_ptcall;

/* One answer of the model. */
typedef struct ad_turn {
  const char *text;           /* the text parts joined; NULL: none */
  size_t text_len;
  ad_call *calls;
  int ncalls;
  ad_stop stop;
  const char *stop_reason;    /* the provider's own word, NULL if none */
  const char *refusal;        /* NULL: none */
  long long input_tokens;     /* -1: not reported */
  long long output_tokens;
  const jv *echo;             /* what ad_conv_turn sends back, verbatim; NULL: nothing
                                 (every family refuses a message with no content) */
  ad_ptcall *ptcalls;         /* the provider's own tool calls whose result this turn has */
  int nptcalls;
  int ptool_uses[AD_NPTKINDS];  /* of them, those of a kind, by kind */
  int ptool_errors;           /* of them, those that failed (an error that came with HTTP 200) */
  ad_citation *citations;
  int ncitations;
  const char *container;      /* a code execution container to reuse, NULL: none */
} ad_turn;

/* A failed exchange. */
typedef struct ad_error {
  le_code code;               /* LE_ASK_PROVIDER_ERROR, LE_ASK_RESPONSE_INVALID, or
                                 LE_ASK_BLOCKED for a prompt a filter refused (azure's 400
                                 content_filter) */
  int status;                 /* the HTTP status */
  const char *type;           /* the provider's error code or type, NULL if none */
  const char *message;        /* says what went wrong; never holds the API key */
  int retryable;
  long long retry_after_ms;   /* what the provider asked for; -1: nothing */
} ad_error;

typedef struct ad_request {
  const char *method;
  const char *url;
  ad_header *headers;
  int nheaders;
  const char *body;
  size_t len;
  /* non-NULL: the answer format asked for {answer_key: the answer} (OpenAI's
     strict mode takes only an object at the root, and a tagged union is an
     anyOf); an answer that is such an object is the value under it */
  const char *answer_key;
} ad_request;

#define AD_ANSWER_KEY "answer"

typedef struct ad_response {
  int status;
  const ad_header *headers;   /* names in any case */
  int nheaders;
  const char *body;
  size_t len;
  long long now_ms;           /* wall clock when it came, for a Retry-After date */
} ad_response;

/* A conversation in the provider's own shape (messages, input items or
   contents), kept as JSON text item by item so that a request costs a
   concatenation, not a rewrite of the history. */
typedef struct ad_conv {
  const ad_model *model;
  sb_buf system;              /* the system text as a JSON string, or empty */
  sb_buf items;               /* the items, comma-separated */
  int nitems;
  int user_last;              /* gemini: the last item is a user content, whose
                                 parts a next user text joins */
  sb_buf container;           /* the code execution container the last turn used (a JSON
                                 string), or empty */
} ad_conv;

void ad_conv_init(ad_conv *c, const ad_model *m);
void ad_conv_free(ad_conv *c);
void ad_conv_system(ad_conv *c, const char *text, size_t len);
void ad_conv_user(ad_conv *c, const char *text, size_t len);
/* The model's turn, as it came: tool call ids, Anthropic's content blocks,
   Gemini's thoughtSignature and the Responses API's reasoning items go back
   unchanged. A turn with nothing in it (no echo) adds nothing. */
void ad_conv_turn(ad_conv *c, const ad_turn *t);
/* The results of the turn's calls, one per call in the turn's order:
   content is JSON text (the tool's value, or its error object). */
typedef struct ad_result {
  const char *content;
  size_t len;
  int is_error;
} ad_result;
void ad_conv_results(ad_conv *c, const ad_turn *t, const ad_result *results);
/* 0 once an allocation failed. */
int ad_conv_ok(const ad_conv *c);

/* The next request of the conversation. Returns 0 with a reason in err for
   what cannot be sent (azure without base_url or deployment, a forced tool
   not among the tools...). */
int ad_build(const ad_conv *c, const ad_ask *ask, ar_arena *a, ad_request *out, char *err, size_t errlen);

/* 1 and a turn, or 0 and an error: for a status >= 400, or a body that is not
   what the provider sends (HTML, empty, truncated JSON, no choices). */
int ad_parse(const ad_model *m, const ad_response *r, ar_arena *a, ad_turn *turn, ad_error *err);

/* Streaming: a 2xx text/event-stream answer (Chat Completions with
   stream: true, the Responses API, Anthropic Messages, Gemini's
   streamGenerateContent?alt=sse), read from bytes in pieces of any size. The
   deltas come as the events do; at the end the turn is the one ad_parse
   gives for the same content (the stream is assembled into the response it
   stands for, which the family's parser reads). A stream cut before its
   final event is never a turn: LE_ASK_TRUNCATED, retryable. An error event
   is LE_ASK_PROVIDER_ERROR, classified by its HTTP equivalent; a stream
   that is not the API's (an event past sse_max_event_bytes, data that is
   not JSON) LE_ASK_STREAM_INVALID. */
typedef enum {
  AD_DELTA_TEXT,              /* text: a fragment of the answer */
  AD_DELTA_REFUSAL,           /* text: a fragment of a refusal */
  AD_DELTA_REASONING,         /* text: a fragment of reasoning or of its summary */
  AD_DELTA_CALL_START,        /* call, id (NULL: none given), name */
  AD_DELTA_CALL_ARGS,         /* call, text: a fragment of its JSON arguments */
  AD_DELTA_CALL_DONE,         /* call, text: its whole arguments */
  AD_DELTA_PTOOL,             /* ptcall, call (its position among the turn's ptcalls): a
                                 provider-run call's result came (as it comes where the
                                 family's stream shows it, else at the end, before USAGE) */
  AD_DELTA_USAGE,             /* input_tokens, output_tokens (-1: not reported) */
  AD_DELTA_END                /* stop, stop_reason: the turn is complete */
} ad_delta_kind;

/* One delta; its pointers live until the callback returns. */
typedef struct ad_delta {
  ad_delta_kind kind;
  int call;                   /* the call's position among the turn's calls */
  const char *id, *name;
  const char *text;
  size_t len;
  long long input_tokens, output_tokens;
  ad_stop stop;
  const char *stop_reason;
  const ad_ptcall *ptcall;
} ad_delta;

typedef void (*ad_on_delta)(void *ud, const ad_delta *d);
typedef struct ad_stream ad_stream;

/* A stream of one answer of model m; its turn and errors will live in a.
   NULL when out of memory. */
ad_stream *ad_stream_new(const ad_model *m, ar_arena *a, ad_on_delta on_delta, void *ud);
/* 1, or 0 and an error: the stream has failed, and stays so. */
int ad_stream_feed(ad_stream *s, const char *bytes, size_t n, ad_error *err);
/* The stream's end (EOF): 1 and the turn, or 0 and an error. */
int ad_stream_end(ad_stream *s, ad_turn *turn, ad_error *err);
void ad_stream_free(ad_stream *s);
/* The whole response the stream stood for, once it ended with a turn (in
   the stream's arena), as the non-streaming API would have sent it; else
   NULL. A durable ask's journal keeps it. */
const jv *ad_stream_response(const ad_stream *s);

/* The wait before retry number `attempt` (0 for the first) of a retryable
   error: what the provider asked for, else exponential backoff from 500 ms
   doubling to at most 8000 ms, scaled by jitter (in [0.5, 1]). */
long long ad_retry_delay(const ad_error *e, int attempt, double jitter);

/* The provider's dialects of one generated JSON Schema: OpenAI's strict
   mode (every property required, optional ones nullable, additionalProperties
   false, refused keywords moved into description), Anthropic's and Gemini's. */
jv *ad_schema_openai_strict(ar_arena *a, const jv *schema);
jv *ad_schema_anthropic(ar_arena *a, const jv *schema);
jv *ad_schema_gemini(ar_arena *a, const jv *schema);

#endif
