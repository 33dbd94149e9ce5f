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

static int resp_build(const ad_conv *c, const ad_ask *q, ar_arena *a, ad_request *out, char *err, size_t errlen) {
  const ad_model *m = c->model;
  if (!ad_openai_target(m, a, "responses", out, err, errlen)) return 0;
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
  if (q->ntools) {
    sb_adds(&b, ",\"tools\":[");
    ad_write_tools(&b, a, q, "{\"type\":\"function\",", "parameters", ad_schema_openai_strict, ",\"strict\":true}");
    sb_adds(&b, "],\"tool_choice\":");
    ad_write_choice(&b, q, ad_openai_choices, "{\"type\":\"function\",\"name\":", "}");
    sb_adds(&b, ",\"parallel_tool_calls\":true");
  }
  if (m->max_tokens > 0) sb_printf(&b, ",\"max_output_tokens\":%lld", m->max_tokens);
  if (m->has_temperature) {
    sb_adds(&b, ",\"temperature\":");
    ad_write_number(&b, m->temperature);
  }
  /* nothing is kept on the provider's side: reasoning comes back encrypted */
  sb_adds(&b, ",\"store\":false,\"include\":[\"reasoning.encrypted_content\"]");
  ad_openai_strict_format(&b, a, q, ",\"text\":{\"format\":{\"type\":\"json_schema\",", out);
  if (q->stream) sb_adds(&b, ",\"stream\":true");
  sb_addc(&b, '}');
  ad_body(a, out, &b);
  return 1;
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
        if (ptype && strcmp(ptype, "output_text") == 0 && text) ad_add_text(a, t, text->s, text->len);
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
