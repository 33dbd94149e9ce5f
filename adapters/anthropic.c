/* Anthropic Messages: system at the top level, tool_use blocks, the
   assistant content sent back verbatim, and one user message whose content
   starts with every tool_result. */
#include "common.h"

#include <stdio.h>
#include <string.h>

#define AD_ANTHROPIC_MAX_TOKENS 4096

static void an_turn(ad_conv *c, const ad_turn *t) {
  ad_item_json(c, t->echo);
}

static void an_results(ad_conv *c, const ad_turn *t, const ad_result *r) {
  ad_item_begin(c);
  sb_adds(&c->items, "{\"role\":\"user\",\"content\":[");
  for (int i = 0; i < t->ncalls; i++) {
    const char *id = t->calls[i].id ? t->calls[i].id : "";
    sb_adds(&c->items, i ? ",{\"type\":\"tool_result\",\"tool_use_id\":" : "{\"type\":\"tool_result\",\"tool_use_id\":");
    json_write_string(&c->items, id, strlen(id));
    sb_adds(&c->items, ",\"content\":");
    json_write_string(&c->items, r[i].content ? r[i].content : "", r[i].content ? r[i].len : 0);
    if (r[i].is_error) sb_adds(&c->items, ",\"is_error\":true");
    sb_addc(&c->items, '}');
  }
  sb_adds(&c->items, "]}");
}

/* The server tools' entries, after the function tools' (comma-led). */
static void an_ptools(sb_buf *b, const ad_conv *c, const ad_ask *q) {
  for (int i = 0; i < q->nptools; i++) {
    const ad_ptool *t = &q->ptools[i];
    const char *name = ad_ptkind_names[t->kind];
    if (i || q->ntools) sb_addc(b, ',');
    sb_adds(b, "{\"type\":");
    const char *entry = ad_ptool_entry(c->model, t->kind);
    json_write_string(b, entry, strlen(entry));
    sb_adds(b, ",\"name\":");
    json_write_string(b, name, strlen(name));
    if (t->max_uses > 0) sb_printf(b, ",\"max_uses\":%lld", t->max_uses);
    if (t->nallowed) { sb_adds(b, ",\"allowed_domains\":"); ad_write_strings(b, t->allowed_domains, t->nallowed); }
    if (t->nblocked) { sb_adds(b, ",\"blocked_domains\":"); ad_write_strings(b, t->blocked_domains, t->nblocked); }
    if (t->nlocation) { sb_adds(b, ",\"user_location\":"); ad_write_location(b, t, 1); }
    /* a fetched page's text is cited only when asked */
    if (t->kind == AD_PT_WEB_FETCH) sb_adds(b, ",\"citations\":{\"enabled\":true}");
    sb_addc(b, '}');
  }
}

static int an_build(const ad_conv *c, const ad_ask *q, ar_arena *a, ad_request *out, char *err, size_t errlen) {
  const ad_model *m = c->model;
  if (!ad_ptool_check(m, q, err, errlen)) return 0;
  static const char *const version[] = { "anthropic-version", "2023-06-01", NULL };
  out->url = ad_url(a, m->base_url, ad_providers[m->provider].base_url, "/v1/messages");
  ad_headers(m, a, out, m->api_key ? "x-api-key" : NULL, m->api_key, version);
  sb_buf b;
  sb_init(&b);
  sb_adds(&b, "{\"model\":");
  json_write_string(&b, m->name ? m->name : "", m->name ? strlen(m->name) : 0);
  sb_printf(&b, ",\"max_tokens\":%lld", m->max_tokens > 0 ? m->max_tokens : AD_ANTHROPIC_MAX_TOKENS);
  if (c->system.len) {
    sb_adds(&b, ",\"system\":");
    sb_add(&b, c->system.data, c->system.len);
  }
  sb_adds(&b, ",\"messages\":[");
  if (c->items.len) sb_add(&b, c->items.data, c->items.len);
  sb_addc(&b, ']');
  if (q->ntools || q->nptools) {
    sb_adds(&b, ",\"tools\":[");
    ad_write_tools(&b, a, q, "{", "input_schema", ad_schema_anthropic, "}");
    an_ptools(&b, c, q);
    if (q->tool_search) {
      const char *name = ad_tool_search_name(q->tool_search);
      sb_printf(&b, "%s{\"type\":", q->ntools || q->nptools ? "," : "");
      json_write_string(&b, q->tool_search, strlen(q->tool_search));
      sb_adds(&b, ",\"name\":");
      json_write_string(&b, name, strlen(name));
      sb_addc(&b, '}');
    }
    sb_adds(&b, "],\"tool_choice\":");
    static const char *const words[3] = { "{\"type\":\"auto\"}", "{\"type\":\"any\"}", "{\"type\":\"none\"}" };
    ad_write_choice(&b, q, words, "{\"type\":\"tool\",\"name\":", "}");
  }
  /* code execution: the container of the last turn, else the one declared */
  const char *container = NULL;
  for (int i = 0; i < q->nptools; i++)
    if (q->ptools[i].kind == AD_PT_CODE_EXECUTION && q->ptools[i].container) container = q->ptools[i].container;
  if (c->container.len) {
    sb_adds(&b, ",\"container\":");
    sb_add(&b, c->container.data, c->container.len);
  } else if (container) {
    sb_adds(&b, ",\"container\":");
    json_write_string(&b, container, strlen(container));
  }
  if (m->has_temperature) {
    sb_adds(&b, ",\"temperature\":");
    ad_write_number(&b, m->temperature);
  }
  if (q->final_schema) {
    sb_adds(&b, ",\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":");
    jv_write(&b, ad_schema_anthropic(a, q->final_schema), 0);
    sb_adds(&b, "}}");
  }
  if (q->stream) sb_adds(&b, ",\"stream\":true");
  sb_addc(&b, '}');
  ad_body(a, out, &b);
  return 1;
}

static ad_stop stop_of(const char *reason) {
  if (!reason || strcmp(reason, "end_turn") == 0 || strcmp(reason, "stop_sequence") == 0) return AD_STOP_END;
  if (strcmp(reason, "tool_use") == 0) return AD_STOP_TOOLS;
  if (strcmp(reason, "max_tokens") == 0) return AD_STOP_LENGTH;
  if (strcmp(reason, "refusal") == 0) return AD_STOP_REFUSAL;
  if (strcmp(reason, "pause_turn") == 0) return AD_STOP_PAUSE;
  return AD_STOP_OTHER;
}

/* A server tool's result block (web_search_tool_result...: a call whose
   result came), named by its server_tool_use (in this content, or, for one
   left pending beside a client call, the block type's name); an error comes
   with HTTP 200 as content {type: "..._error", error_code}. */
void ad_anthropic_server_result(ar_arena *a, ad_turn *t, const jv *content, const char *type, const jv *b) {
  size_t n = strlen(type);
  if (n <= 12 || strcmp(type + n - 12, "_tool_result") != 0 || strcmp(type, "tool_result") == 0) return;
  const char *id = ad_str(b, "tool_use_id"), *name = NULL;
  for (const jv *u = content->first; u && id && !name; u = u->next) {
    const char *ut = ad_str(u, "type"), *uid = ad_str(u, "id");
    if (ut && uid && strcmp(uid, id) == 0 && strcmp(ut + (strlen(ut) > 8 ? strlen(ut) - 8 : 0), "tool_use") == 0)
      name = ad_str(u, "name");
  }
  if (!name) name = ar_strndup(a, type, n - 12);
  const jv *c = ad_get(b, "content", JV_OBJ);
  const char *ctype = ad_str(c, "type");
  size_t cn = ctype ? strlen(ctype) : 0;
  const char *code = NULL;
  if (cn > 6 && strcmp(ctype + cn - 6, "_error") == 0) {
    code = ad_str(c, "error_code");
    if (!code) code = ctype;
  }
  ad_add_ptcall(a, t, ad_ptkind_of(name), name, id, code, NULL);
}

/* A text block's citations: web_search_result_location and the others. */
static void an_citations(ar_arena *a, ad_turn *t, const jv *list) {
  for (const jv *c = list ? list->first : NULL; c; c = c->next) {
    const jv *text = ad_get(c, "cited_text", JV_STR);
    ad_add_citation(a, t, ad_str(c, "url"), ad_str(c, "title"), text ? text->s : NULL, text ? text->len : 0);
  }
}

static int an_turn_of(const jv *body, ar_arena *a, ad_turn *t, char *err, size_t errlen) {
  const jv *content = ad_get(body, "content", JV_ARR);
  if (!content) { snprintf(err, errlen, "it has no content"); return 0; }
  int ncalls = 0;
  for (const jv *b = content->first; b; b = b->next) {
    const char *type = ad_str(b, "type");
    if (type && strcmp(type, "tool_use") == 0) ncalls++;
  }
  if (!ad_calls_alloc(a, t, ncalls)) return 0;
  for (const jv *b = content->first; b; b = b->next) {
    const char *type = ad_str(b, "type");
    if (!type) continue;
    const jv *text = ad_get(b, "text", JV_STR);
    if (strcmp(type, "text") == 0 && text) ad_add_text(a, t, text->s, text->len);
    if (strcmp(type, "text") == 0) an_citations(a, t, ad_get(b, "citations", JV_ARR));
    ad_anthropic_server_result(a, t, content, type, b);
    if (strcmp(type, "tool_use") != 0) continue;
    const char *name = ad_str(b, "name");
    if (!name) { snprintf(err, errlen, "a tool_use block has no name"); return 0; }
    ad_call *call = &t->calls[t->ncalls++];
    call->id = ad_str(b, "id");
    call->name = name;
    const jv *input = jv_get(b, "input");
    call->arguments = input ? ad_json_text(a, input, &call->arguments_len) : "";
  }
  t->stop_reason = ad_str(body, "stop_reason");
  t->stop = stop_of(t->stop_reason);
  if (t->stop == AD_STOP_REFUSAL) t->refusal = t->text;   /* NULL: it gave no reason */
  t->container = ad_str(ad_get(body, "container", JV_OBJ), "id");
  const jv *usage = ad_get(body, "usage", JV_OBJ);
  t->input_tokens = ad_int(usage, "input_tokens", -1);
  t->output_tokens = ad_int(usage, "output_tokens", -1);
  /* an end_turn with content [] goes back as nothing: the API refuses an
     assistant message with empty content, but for a final one */
  if (content->count) {
    jv *echo = jv_obj(a);
    jv_set(echo, "role", jv_cstr(a, "assistant"));
    jv_set(echo, "content", ad_share(a, content));
    t->echo = echo;
  }
  return 1;
}

/* {type: "error", error: {type, message}} */
static void an_error_of(const jv *body, const char **message, const char **type, long long *retry_after_ms) {
  (void)retry_after_ms;
  const jv *e = ad_get(body, "error", JV_OBJ);
  *message = ad_str(e, "message");
  *type = ad_str(e, "type");
}

const ad_family ad_anthropic_family = {
  ad_item_user, an_turn, an_results, an_build, an_turn_of, an_error_of
};
