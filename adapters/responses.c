/* The OpenAI Responses API (openai and azure, api: "responses"): input and
   output items, function_call and function_call_output, reasoning items
   sent back in order, and text.format for the answer's schema. */
#include "common.h"

#include <stdio.h>
#include <string.h>

/* Every output item of the response, in order: reasoning models refuse a
   function_call without its reasoning item. */
static void resp_turn(ad_conv *c, const ad_turn *t) {
  for (const jv *item = t->echo ? t->echo->first : NULL; item; item = item->next) ad_item_json(c, item);
}

static void resp_results(ad_conv *c, const ad_turn *t, const ad_result *r) {
  ad_items_results(c, t, r, "\"type\":\"function_call_output\",", "call_id", "output");
}

/* The built-in tools' entries, after the functions' (comma-led); what
   `include` then asks for goes to inc, and the sum of their max_uses
   (max_tool_calls caps the built-in calls of a response) is returned. */
static long long resp_ptools(sb_buf *b, const ad_conv *c, const ad_ask *q, sb_buf *inc) {
  long long cap = 0;
  for (int i = 0; i < q->nptools; i++) {
    const ad_ptool *t = &q->ptools[i];
    if (i || q->ntools) sb_addc(b, ',');
    sb_adds(b, "{\"type\":");
    const char *entry = ad_ptool_entry(c->model, t->kind);
    json_write_string(b, entry, strlen(entry));
    if (t->kind == AD_PT_WEB_SEARCH) {
      if (t->nallowed) { sb_adds(b, ",\"filters\":{\"allowed_domains\":"); ad_write_strings(b, t->allowed_domains, t->nallowed); sb_addc(b, '}'); }
      if (t->nlocation) { sb_adds(b, ",\"user_location\":"); ad_write_location(b, t, 1); }
      sb_adds(inc, ",\"web_search_call.action.sources\"");
    } else if (t->kind == AD_PT_CODE_EXECUTION) {
      /* the container of the last turn, else the one declared, else a new one */
      sb_adds(b, ",\"container\":");
      if (c->container.len) sb_add(b, c->container.data, c->container.len);
      else if (t->container) json_write_string(b, t->container, strlen(t->container));
      else sb_adds(b, "{\"type\":\"auto\"}");
      sb_adds(inc, ",\"code_interpreter_call.outputs\"");
    } else if (t->kind == AD_PT_FILE_SEARCH) {
      sb_adds(b, ",\"vector_store_ids\":");
      ad_write_strings(b, t->vector_stores, t->nvector_stores);
      sb_adds(inc, ",\"file_search_call.results\"");
    }
    sb_addc(b, '}');
    if (t->max_uses > 0) cap += t->max_uses;
  }
  return cap;
}

static int resp_build(const ad_conv *c, const ad_ask *q, ar_arena *a, ad_request *out, char *err, size_t errlen) {
  const ad_model *m = c->model;
  if (!ad_openai_target(m, a, "responses", out, err, errlen)) return 0;
  if (!ad_ptool_check(m, q, err, errlen)) return 0;
  sb_buf inc;
  sb_init(&inc);
  long long max_calls = 0;
  sb_buf b;
  sb_init(&b);
  sb_addc(&b, '{');
  ad_openai_model_field(m, &b);
  if (c->system.len) {
    sb_adds(&b, "\"instructions\":");
    sb_add(&b, c->system.data, c->system.len);
    sb_addc(&b, ',');
  }
  sb_adds(&b, "\"input\":[");
  if (c->items.len) sb_add(&b, c->items.data, c->items.len);
  sb_addc(&b, ']');
  if (q->ntools || q->nptools) {
    sb_adds(&b, ",\"tools\":[");
    ad_write_tools(&b, a, q, "{\"type\":\"function\",", "parameters", ad_schema_openai_strict, ",\"strict\":true}");
    max_calls = resp_ptools(&b, c, q, &inc);
    if (q->tool_search) sb_adds(&b, q->ntools || q->nptools ? ",{\"type\":\"tool_search\"}" : "{\"type\":\"tool_search\"}");
    sb_adds(&b, "],\"tool_choice\":");
    ad_write_choice(&b, q, ad_openai_choices, "{\"type\":\"function\",\"name\":", "}");
    sb_adds(&b, ",\"parallel_tool_calls\":true");
  }
  if (max_calls > 0) sb_printf(&b, ",\"max_tool_calls\":%lld", max_calls);
  if (m->max_tokens > 0) sb_printf(&b, ",\"max_output_tokens\":%lld", m->max_tokens);
  if (m->has_temperature) {
    sb_adds(&b, ",\"temperature\":");
    ad_write_number(&b, m->temperature);
  }
  /* nothing is kept on the provider's side: reasoning comes back encrypted */
  sb_adds(&b, ",\"store\":false,\"include\":[\"reasoning.encrypted_content\"");
  if (inc.len) sb_add(&b, inc.data, inc.len);
  sb_addc(&b, ']');
  sb_free(&inc);
  ad_openai_strict_format(&b, a, q, ",\"text\":{\"format\":{\"type\":\"json_schema\",", out);
  if (q->stream) sb_adds(&b, ",\"stream\":true");
  sb_addc(&b, '}');
  ad_body(a, out, &b);
  return 1;
}

/* A built-in tool's output item (web_search_call, code_interpreter_call,
   file_search_call, tool_search_call, mcp_call...: its call and result in
   one): a failed one has status "failed" (an mcp_call an error). The
   client's own calls (function_call, custom_tool_call) are not. */
void ad_responses_builtin(ar_arena *a, ad_turn *t, const char *type, const jv *item) {
  size_t n = strlen(type);
  if (n <= 5 || strcmp(type + n - 5, "_call") != 0 || strcmp(type, "custom_tool_call") == 0 ||
      strcmp(type, "computer_call") == 0 || strcmp(type, "local_shell_call") == 0 || strcmp(type, "shell_call") == 0 ||
      strcmp(type, "apply_patch_call") == 0)
    return;
  const char *name = ar_strndup(a, type, n - 5);
  const char *status = ad_str(item, "status");
  const jv *err = jv_get(item, "error");
  const char *code = status && strcmp(status, "failed") == 0 ? "failed" : NULL;
  const char *why = NULL;
  if (err && err->type == JV_STR) code = "error", why = err->s;
  else if (err && err->type == JV_OBJ) code = "error", why = ad_str(err, "message");
  if (code && !why) why = ar_printf(a, "The provider's %s call failed.", name);
  ad_add_ptcall(a, t, ad_ptkind_of(type), name, ad_str(item, "id"), code, why);
  if (strcmp(type, "code_interpreter_call") == 0 && ad_str(item, "container_id")) t->container = ad_str(item, "container_id");
}

/* The byte offset of code point number n of s, or -1 past its end. */
static long long byte_at(const jv *s, long long n) {
  long long cp = 0;
  for (size_t i = 0; i < s->len; i++) {
    if (((unsigned char)s->s[i] & 0xC0) == 0x80) continue;
    if (cp++ == n) return (long long)i;
  }
  return cp == n ? (long long)s->len : -1;
}

/* url_citation annotations: the cited text is the answer's, from
   start_index to end_index (in characters). */
static void resp_citations(ar_arena *a, ad_turn *t, const jv *text, const jv *list) {
  for (const jv *c = list ? list->first : NULL; c; c = c->next) {
    const char *type = ad_str(c, "type");
    if (!type || strcmp(type, "url_citation") != 0) continue;
    long long s = ad_int(c, "start_index", -1), e = ad_int(c, "end_index", -1);
    long long bs = s >= 0 ? byte_at(text, s) : -1, be = e >= s ? byte_at(text, e) : -1;
    int ok = bs >= 0 && be >= bs;
    ad_add_citation(a, t, ad_str(c, "url"), ad_str(c, "title"), ok ? text->s + bs : NULL, ok ? (size_t)(be - bs) : 0);
  }
}

static int resp_turn_of(const jv *body, ar_arena *a, ad_turn *t, char *err, size_t errlen) {
  const char *status = ad_str(body, "status");
  if (status && strcmp(status, "failed") == 0) {
    const char *why = ad_str(ad_get(body, "error", JV_OBJ), "message");
    snprintf(err, errlen, "the response failed: %s", why ? why : "no reason given");
    return 0;
  }
  const jv *output = ad_get(body, "output", JV_ARR);
  if (!output) { snprintf(err, errlen, "it has no output"); return 0; }
  int ncalls = 0;
  for (const jv *item = output->first; item; item = item->next) {
    const char *type = ad_str(item, "type");
    if (type && strcmp(type, "function_call") == 0) ncalls++;
  }
  if (!ad_calls_alloc(a, t, ncalls)) return 0;
  for (const jv *item = output->first; item; item = item->next) {
    const char *type = ad_str(item, "type");
    if (!type) continue;
    if (strcmp(type, "message") == 0) {
      const jv *content = ad_get(item, "content", JV_ARR);
      for (const jv *p = content ? content->first : NULL; p; p = p->next) {
        const char *ptype = ad_str(p, "type");
        const jv *text = ad_get(p, "text", JV_STR);
        if (ptype && strcmp(ptype, "output_text") == 0 && text) {
          ad_add_text(a, t, text->s, text->len);
          resp_citations(a, t, text, ad_get(p, "annotations", JV_ARR));
        }
        if (ptype && strcmp(ptype, "refusal") == 0) t->refusal = ad_str(p, "refusal");
      }
    } else if (strcmp(type, "function_call") == 0) {
      const char *name = ad_str(item, "name");
      if (!name) { snprintf(err, errlen, "a function_call has no name"); return 0; }
      ad_call *call = &t->calls[t->ncalls++];
      call->id = ad_str(item, "call_id");
      call->name = name;
      const jv *args = ad_get(item, "arguments", JV_STR);
      call->arguments = args ? args->s : "";
      call->arguments_len = args ? args->len : 0;
    } else {
      ad_responses_builtin(a, t, type, item);
    }
  }
  t->stop_reason = status;
  t->stop = AD_STOP_END;
  if (status && strcmp(status, "incomplete") == 0) {
    const char *reason = ad_str(ad_get(body, "incomplete_details", JV_OBJ), "reason");
    t->stop_reason = reason ? reason : status;
    t->stop = reason && strcmp(reason, "max_output_tokens") == 0 ? AD_STOP_LENGTH
            : reason && strcmp(reason, "content_filter") == 0   ? AD_STOP_FILTER
                                                                 : AD_STOP_OTHER;
  }
  if (t->refusal) t->stop = AD_STOP_REFUSAL;
  const jv *usage = ad_get(body, "usage", JV_OBJ);
  t->input_tokens = ad_int(usage, "input_tokens", -1);
  t->output_tokens = ad_int(usage, "output_tokens", -1);
  t->echo = output;
  return 1;
}

const ad_family ad_openai_responses = {
  ad_item_user, resp_turn, resp_results, resp_build, resp_turn_of, ad_openai_error_of
};
