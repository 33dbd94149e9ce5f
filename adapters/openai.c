/* OpenAI Chat Completions: OpenAI, the compatible servers (vLLM, Ollama,
   llama.cpp, OpenRouter) and Azure OpenAI (classic and v1 URLs). */
#include "common.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------ shared with responses */

/* Where an OpenAI-family request goes, and its auth header. */
int ad_openai_target(const ad_model *m, ar_arena *a, const char *what, ad_request *out, char *err, size_t errlen) {
  if (m->provider == AD_AZURE) {
    if (!m->base_url || !*m->base_url) { snprintf(err, errlen, "an azure model needs base_url"); return 0; }
    if (!m->deployment || !*m->deployment) { snprintf(err, errlen, "an azure model needs deployment"); return 0; }
    /* the deployment is in the classic path; Azure's Responses API is on the
       v1 path only, which takes it as the body's model */
    if (ad_azure_classic(m)) {
      const char *path = ar_printf(a, "/openai/deployments/%s/chat/completions?api-version=%s", m->deployment,
                                   m->api_version);
      out->url = path ? ad_url(a, m->base_url, NULL, path) : NULL;
    } else {
      out->url = ad_url(a, m->base_url, NULL, ar_printf(a, "/openai/v1/%s", what));
    }
    ad_headers(m, a, out, m->api_key ? "api-key" : NULL, m->api_key, NULL);
  } else {
    out->url = ad_url(a, m->base_url, ad_providers[m->provider].base_url, ar_printf(a, "/%s", what));
    ad_headers(m, a, out, m->api_key ? "Authorization" : NULL, m->api_key ? ar_printf(a, "Bearer %s", m->api_key) : NULL, NULL);
  }
  return 1;
}

int ad_azure_classic(const ad_model *m) {
  return m->provider == AD_AZURE && m->api == AD_CHAT && m->api_version && *m->api_version;
}

/* The model field: the deployment on azure's v1 API, none on its classic one. */
void ad_openai_model_field(const ad_model *m, sb_buf *b) {
  const char *name = m->provider == AD_AZURE ? (ad_azure_classic(m) ? NULL : m->deployment) : m->name;
  if (!name) return;
  sb_adds(b, "\"model\":");
  json_write_string(b, name, strlen(name));
  sb_addc(b, ',');
}

void ad_write_number(sb_buf *b, double d) {
  char num[40];
  if (json_format_number(d, num)) sb_adds(b, num); else sb_adds(b, "null");
}

/* Strict mode refuses a root that is not an object (a tagged union is an
   anyOf): such a schema goes under the wrapper's "answer", with its $defs
   at the wrapper's root, where its references point. */
static jv *object_root(ar_arena *a, jv *schema, ad_request *out) {
  const jv *type = jv_get(schema, "type");
  if (!schema || (type && type->type == JV_STR && strcmp(type->s, "object") == 0)) return schema;
  jv *inner = jv_obj(a), *defs = NULL;
  for (jv *m = schema->first; m; m = m->next) {
    if (strcmp(m->key, "$defs") == 0) defs = ad_share(a, m);
    else jv_setn(inner, m->key, m->keylen, ad_share(a, m));
  }
  jv *w = jv_obj(a);
  jv_set(w, "type", jv_cstr(a, "object"));
  jv_set(w, "properties", jv_set(jv_obj(a), AD_ANSWER_KEY, inner));
  jv_set(w, "required", jv_push(jv_arr(a), jv_cstr(a, AD_ANSWER_KEY)));
  jv_set(w, "additionalProperties", jv_bool(a, 0));
  if (defs) jv_set(w, "$defs", defs);
  out->answer_key = AD_ANSWER_KEY;
  return w;
}

/* The answer's schema in strict mode, after `open`: name, strict, schema. */
void ad_openai_strict_format(sb_buf *b, ar_arena *a, const ad_ask *q, const char *open, ad_request *out) {
  if (!q->final_schema) return;
  const char *name = q->final_name ? q->final_name : "answer";
  sb_adds(b, open);
  sb_adds(b, "\"name\":");
  json_write_string(b, name, strlen(name));
  sb_adds(b, ",\"strict\":true,\"schema\":");
  jv_write(b, object_root(a, ad_schema_openai_strict(a, q->final_schema), out), 0);
  sb_adds(b, "}}");
}

/* {error: {message, type, param, code}} */
void ad_openai_error_of(const jv *body, const char **message, const char **type, long long *retry_after_ms) {
  (void)retry_after_ms;
  const jv *e = ad_get(body, "error", JV_OBJ);
  if (!e) {
    *message = ad_str(body, "error");   /* some compatible servers: {"error": "text"} */
    if (!*message) *message = ad_str(body, "message");
    return;
  }
  *message = ad_str(e, "message");
  const char *code = ad_str(e, "code"), *t = ad_str(e, "type");
  /* the codes that decide what the error is come first: a quota (not
     retried) and azure's content filter (ASK_BLOCKED) */
  int decides = code && (strcmp(code, "insufficient_quota") == 0 || strcmp(code, "content_filter") == 0);
  *type = decides ? code : t ? t : code;
}

/* ------------------------------------------------------------ messages */

static void chat_turn(ad_conv *c, const ad_turn *t) {
  ad_item_json(c, t->echo);
}

static void chat_results(ad_conv *c, const ad_turn *t, const ad_result *r) {
  ad_items_results(c, t, r, "\"role\":\"tool\",", "tool_call_id", "content");
}

/* ------------------------------------------------------------ requests */

/* The words of tool_choice, also the Responses API's. */
const char *const ad_openai_choices[3] = { "\"auto\"", "\"required\"", "\"none\"" };

static int chat_build(const ad_conv *c, const ad_ask *q, ar_arena *a, ad_request *out, char *err, size_t errlen) {
  const ad_model *m = c->model;
  if (!ad_openai_target(m, a, "chat/completions", out, err, errlen)) return 0;
  if (!ad_ptool_check(m, q, err, errlen)) return 0;
  sb_buf b;
  sb_init(&b);
  sb_addc(&b, '{');
  ad_openai_model_field(m, &b);
  sb_adds(&b, "\"messages\":[");
  if (c->system.len) {
    sb_adds(&b, "{\"role\":\"system\",\"content\":");
    sb_add(&b, c->system.data, c->system.len);
    sb_adds(&b, c->nitems ? "}," : "}");
  }
  if (c->items.len) sb_add(&b, c->items.data, c->items.len);
  sb_addc(&b, ']');
  if (q->ntools) {
    sb_adds(&b, ",\"tools\":[");
    ad_write_tools(&b, a, q, "{\"type\":\"function\",\"function\":{", "parameters", ad_schema_openai_strict,
                   ",\"strict\":true}}");
    sb_adds(&b, "],\"tool_choice\":");
    ad_write_choice(&b, q, ad_openai_choices, "{\"type\":\"function\",\"function\":{\"name\":", "}}");
    sb_adds(&b, ",\"parallel_tool_calls\":true");
  }
  /* web search: a search model's options ({"approximate": {...}} nests the location) */
  for (int i = 0; i < q->nptools; i++) {
    const ad_ptool *t = &q->ptools[i];
    if (t->kind != AD_PT_WEB_SEARCH) continue;
    sb_adds(&b, ",\"web_search_options\":{");
    if (t->nlocation) {
      sb_adds(&b, "\"user_location\":{\"type\":\"approximate\",\"approximate\":");
      ad_write_location(&b, t, 0);
      sb_addc(&b, '}');
    }
    sb_addc(&b, '}');
  }
  if (m->max_tokens > 0) sb_printf(&b, ",\"max_completion_tokens\":%lld", m->max_tokens);
  if (m->has_temperature) {
    sb_adds(&b, ",\"temperature\":");
    ad_write_number(&b, m->temperature);
  }
  ad_openai_strict_format(&b, a, q, ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{", out);
  /* usage comes in a last chunk only when asked for */
  if (q->stream) sb_adds(&b, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
  sb_addc(&b, '}');
  ad_body(a, out, &b);
  return 1;
}

/* ------------------------------------------------------------ responses */

static ad_stop stop_of(const char *reason) {
  if (!reason || strcmp(reason, "stop") == 0) return AD_STOP_END;
  if (strcmp(reason, "tool_calls") == 0 || strcmp(reason, "function_call") == 0) return AD_STOP_TOOLS;
  if (strcmp(reason, "length") == 0) return AD_STOP_LENGTH;
  if (strcmp(reason, "content_filter") == 0) return AD_STOP_FILTER;
  return AD_STOP_OTHER;
}

static int chat_turn_of(const jv *body, ar_arena *a, ad_turn *t, char *err, size_t errlen) {
  const jv *choices = ad_get(body, "choices", JV_ARR);
  if (!choices || !choices->first) { snprintf(err, errlen, "it has no choices"); return 0; }
  const jv *choice = choices->first;
  const jv *msg = ad_get(choice, "message", JV_OBJ);
  if (!msg) { snprintf(err, errlen, "its first choice has no message"); return 0; }
  const jv *content = ad_get(msg, "content", JV_STR);
  if (content) ad_add_text(a, t, content->s, content->len);
  /* a search model's url_citation annotations */
  const jv *notes = ad_get(msg, "annotations", JV_ARR);
  for (const jv *n = notes ? notes->first : NULL; n; n = n->next) {
    const jv *u = ad_get(n, "url_citation", JV_OBJ);
    long long s = ad_int(u, "start_index", -1), e = ad_int(u, "end_index", -1);
    int ok = content && s >= 0 && e >= s && (size_t)e <= content->len;
    ad_add_citation(a, t, ad_str(u, "url"), ad_str(u, "title"), ok ? content->s + s : NULL, ok ? (size_t)(e - s) : 0);
  }
  t->stop_reason = ad_str(choice, "finish_reason");
  t->stop = stop_of(t->stop_reason);
  t->refusal = ad_str(msg, "refusal");
  if (t->refusal) t->stop = AD_STOP_REFUSAL;
  const jv *calls = ad_get(msg, "tool_calls", JV_ARR);
  if (calls && !ad_calls_alloc(a, t, calls->count)) return 0;
  for (const jv *c = calls ? calls->first : NULL; c; c = c->next) {
    const jv *fn = ad_get(c, "function", JV_OBJ);
    const char *name = ad_str(fn, "name");
    if (!name) { snprintf(err, errlen, "a tool call has no function name"); return 0; }
    ad_call *call = &t->calls[t->ncalls++];
    call->id = ad_str(c, "id");
    call->name = name;
    const jv *args = fn ? jv_get(fn, "arguments") : NULL;
    if (args && args->type == JV_STR) {
      call->arguments = args->s;
      call->arguments_len = args->len;
    } else if (args && args->type == JV_OBJ) {
      call->arguments = ad_json_text(a, args, &call->arguments_len);
    } else {
      call->arguments = "";
    }
  }
  const jv *usage = ad_get(body, "usage", JV_OBJ);
  t->input_tokens = ad_int(usage, "prompt_tokens", -1);
  t->output_tokens = ad_int(usage, "completion_tokens", -1);
  /* what goes back: the assistant message with its tool calls unchanged
     (other fields of the response message are not request fields); one
     needs content or tool_calls, so an empty answer goes back as nothing */
  if (!content && !(calls && calls->count)) return 1;
  jv *echo = jv_obj(a);
  jv_set(echo, "role", jv_cstr(a, "assistant"));
  jv_set(echo, "content", content ? jv_str(a, content->s, content->len) : jv_null(a));
  if (calls && calls->count) jv_set(echo, "tool_calls", ad_share(a, calls));
  t->echo = echo;
  return 1;
}

const ad_family ad_openai_chat = {
  ad_item_user, chat_turn, chat_results, chat_build, chat_turn_of, ad_openai_error_of
};
