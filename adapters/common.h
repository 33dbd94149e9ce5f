/* What the adapters of the provider families share (internal to adapters/). */
#ifndef LUMA_ADAPTERS_COMMON_H
#define LUMA_ADAPTERS_COMMON_H

#include "adapter.h"
#include "luma_limits.h"

/* One family: how it writes the conversation, requests, and reads answers. */
typedef struct ad_family {
  void (*user)(ad_conv *c, const char *text, size_t len);
  void (*turn)(ad_conv *c, const ad_turn *t);
  void (*results)(ad_conv *c, const ad_turn *t, const ad_result *r);
  /* the URL, the auth and the body; returns 0 with a reason in err */
  int (*build)(const ad_conv *c, const ad_ask *q, ar_arena *a, ad_request *out, char *err, size_t errlen);
  /* a 2xx body, parsed: fills the turn, or returns 0 with a message in err */
  int (*turn_of)(const jv *body, ar_arena *a, ad_turn *t, char *err, size_t errlen);
  /* an error body (parsed, or NULL): its message and type */
  void (*error_of)(const jv *body, const char **message, const char **type, long long *retry_after_ms);
} ad_family;

extern const ad_family ad_openai_chat, ad_openai_responses, ad_anthropic_family, ad_gemini_family;

/* Appends the JSON text of one item to the conversation. */
void ad_item_begin(ad_conv *c);
void ad_item_json(ad_conv *c, const jv *v);

/* {"role":"user","content":"text"}: chat, responses and anthropic alike. */
void ad_item_user(ad_conv *c, const char *text, size_t len);
/* A tool's declaration fields, without braces: "name":…[,"description":…],
   then its parameters under params_key, in the family's dialect. */
typedef jv *(*ad_dialect)(ar_arena *a, const jv *schema);
void ad_write_decl(sb_buf *b, ar_arena *a, const ad_tool *t, const char *params_key, ad_dialect dialect);
/* Every tool's declaration, comma-separated, each as open + fields + close. */
void ad_write_tools(sb_buf *b, ar_arena *a, const ad_ask *q, const char *open, const char *params_key,
                    ad_dialect dialect, const char *close);

/* One item per call of the turn: {"<id_key>":id,"<content_key>":"content"},
   after the fields in `head` (JSON members with their trailing comma). */
void ad_items_results(ad_conv *c, const ad_turn *t, const ad_result *r, const char *head, const char *id_key,
                      const char *content_key);
/* tool_choice: words[] is the JSON of auto, required and none; a forced
   tool is tool_open + "name" + tool_close. */
void ad_write_choice(sb_buf *b, const ad_ask *q, const char *const words[3], const char *tool_open,
                     const char *tool_close);

/* Request pieces: the base URL without a trailing '/', then path appended. */
char *ad_url(ar_arena *a, const char *base, const char *fallback, const char *path);
/* Headers: Content-Type, then the given auth (name NULL: none), the
   family's extra ones (NULL-terminated pairs), then the model's. */
void ad_headers(const ad_model *m, ar_arena *a, ad_request *out, const char *auth_name, const char *auth_value,
                const char *const *extra);
/* The body: "{" + fields built by the family + "}". */
void ad_body(ar_arena *a, ad_request *out, sb_buf *b);

/* jv getters that accept a NULL and a wrong type. */
const jv *ad_get(const jv *o, const char *key, jv_type type);
const char *ad_str(const jv *o, const char *key);
long long ad_int(const jv *o, const char *key, long long fallback);
/* v as JSON text in the arena. */
const char *ad_json_text(ar_arena *a, const jv *v, size_t *len);
/* The tool name rule every provider accepts. */
int ad_valid_tool_name(const char *name);
/* Checks the tools' names and the forced tool; 0 with a reason. */
int ad_check_tools(const ad_ask *q, char *err, size_t errlen);
/* Appends the turn's text (joined) to t, from a run of text parts. */
void ad_add_text(ar_arena *a, ad_turn *t, const char *s, size_t len);
/* Room for n calls in t. */
int ad_calls_alloc(ar_arena *a, ad_turn *t, int n);
/* A node sharing v's contents, free to be put in another container (a
   node's links belong to the container it is in). */
jv *ad_share(ar_arena *a, const jv *v);
void ad_write_number(sb_buf *b, double d);

/* Provider tools (ptools.c): the entry of a kind for the model (NULL: its
   wire has none), checked for every tool of an ask (0 with a reason); a
   JSON array of strings; an approximate user location
   {"type":"approximate","city":...}; a citation added to a turn. */
const char *ad_ptool_entry(const ad_model *m, ad_ptkind kind);
int ad_ptool_check(const ad_model *m, const ad_ask *q, char *err, size_t errlen);
void ad_write_strings(sb_buf *b, const char *const *items, int n);
void ad_write_location(sb_buf *b, const ad_ptool *t, int typed);
void ad_add_citation(ar_arena *a, ad_turn *t, const char *url, const char *title, const char *text, size_t len);
/* A provider-run call whose result came, added to the turn and counted (its
   kind's uses, and a failure: error_code not NULL, error says it in words).
   kind -1: a call of no kind, named name. The strings must live as long as
   the turn. */
void ad_add_ptcall(ar_arena *a, ad_turn *t, int kind, const char *name, const char *id, const char *error_code,
                   const char *error);
/* What a family's parser reads of one block or item for the provider's own
   calls, for its stream parser too, which delivers them as they come: an
   Anthropic server tool's result block (content: the blocks so far, where
   its server_tool_use is), a Responses API output item. */
void ad_anthropic_server_result(ar_arena *a, ad_turn *t, const jv *content, const char *type, const jv *b);
void ad_responses_builtin(ar_arena *a, ad_turn *t, const char *type, const jv *item);
/* The kind a provider's name for its tool or call stands for ("web_search",
   "bash_code_execution", "GOOGLE_SEARCH_WEB"...), -1: none. */
int ad_ptkind_of(const char *name);

/* adapter.c's, for the streams (stream.c): the family of a model, its
   provider's name, whether an HTTP status is retried, a text with the key
   replaced, a printable excerpt, and the turn of a 2xx body (as ad_parse reads it). */
const ad_family *ad_family_of(const ad_model *m);
const char *ad_provider_name(const ad_model *m);
int ad_retryable_status(int status);
const char *ad_redact(ar_arena *a, const char *s, const char *key);
void ad_excerpt(const char *body, size_t len, char *out, size_t n);
int ad_turn_of_body(const ad_model *m, const jv *body, ar_arena *a, ad_turn *turn, ad_error *err);

/* The OpenAI families (openai.c): URL and auth of chat/completions or
   responses, the body's model field, and the error body. */
int ad_openai_target(const ad_model *m, ar_arena *a, const char *what, ad_request *out, char *err, size_t errlen);
void ad_openai_model_field(const ad_model *m, sb_buf *b);
/* Azure's classic chat path: /openai/deployments/{deployment}/...?api-version= */
int ad_azure_classic(const ad_model *m);
void ad_openai_error_of(const jv *body, const char **message, const char **type, long long *retry_after_ms);
extern const char *const ad_openai_choices[3];
/* The answer's strict format; a root that is not an object is wrapped,
   and out->answer_key says so. */
void ad_openai_strict_format(sb_buf *b, ar_arena *a, const ad_ask *q, const char *open, ad_request *out);

#endif
