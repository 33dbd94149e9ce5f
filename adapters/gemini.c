/* Gemini generateContent: camelCase keys, contents of parts, function calls
   that may have no id (answered by position), the model's content sent back
   verbatim (its thoughtSignature must return), and functionResponse parts. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "luma_limits.h"

/* A user text: a content of its own, or one more part of the user content
   before it (a model turn with nothing in it is not sent back, and the turns
   then alternate still). */
static void ge_user(ad_conv *c, const char *text, size_t len) {
  if (c->user_last && c->items.len >= 2) {
    c->items.len -= 2;   /* "]}" */
    sb_adds(&c->items, ",{\"text\":");
  } else {
    ad_item_begin(c);
    sb_adds(&c->items, "{\"role\":\"user\",\"parts\":[{\"text\":");
  }
  json_write_string(&c->items, text, len);
  sb_adds(&c->items, "}]}");
  c->user_last = 1;
}

static void ge_turn(ad_conv *c, const ad_turn *t) {
  ad_item_json(c, t->echo);
  c->user_last = 0;
}

static void ge_results(ad_conv *c, const ad_turn *t, const ad_result *r) {
  ad_item_begin(c);
  sb_adds(&c->items, "{\"role\":\"user\",\"parts\":[");
  for (int i = 0; i < t->ncalls; i++) {
    const ad_call *call = &t->calls[i];
    sb_adds(&c->items, i ? ",{\"functionResponse\":{\"name\":" : "{\"functionResponse\":{\"name\":");
    json_write_string(&c->items, call->name, strlen(call->name));
    if (call->id) {
      sb_adds(&c->items, ",\"id\":");
      json_write_string(&c->items, call->id, strlen(call->id));
    }
    sb_adds(&c->items, ",\"response\":");
    /* an error result is {"error": ...} already; a value goes under "result" */
    ar_arena a;
    ar_init(&a);
    char why[100];
    jv *v = r[i].content ? json_parse(&a, r[i].content, r[i].len, LIM_MODEL_JSON_DEPTH, why, sizeof why) : NULL;
    if (r[i].is_error && v && v->type == JV_OBJ && jv_get(v, "error")) {
      jv_write(&c->items, v, 0);
    } else {
      sb_adds(&c->items, r[i].is_error ? "{\"error\":" : "{\"result\":");
      if (v) jv_write(&c->items, v, 0);
      else json_write_string(&c->items, r[i].content ? r[i].content : "", r[i].content ? r[i].len : 0);
      sb_addc(&c->items, '}');
    }
    ar_free(&a);
    sb_adds(&c->items, "}}");
  }
  sb_adds(&c->items, "]}");
  c->user_last = 1;
}

/* Gemini 1.x and 2.x refuse tools together with a JSON answer format (and
   built-in tools next to function declarations: ptools.c). */
static int tools_with_json(const ad_model *m) {
  return ad_gemini_mixes_tools(m->name);
}

static int ge_build(const ad_conv *c, const ad_ask *q, ar_arena *a, ad_request *out, char *err, size_t errlen) {
  const ad_model *m = c->model;
  const char *name = m->name && strncmp(m->name, "models/", 7) == 0 ? m->name + 7 : m->name;
  if (!name || !*name || strpbrk(name, "/?#: %")) {
    snprintf(err, errlen, "the gemini model name '%s' cannot be put in a URL", m->name ? m->name : "");
    return 0;
  }
  if (!ad_ptool_check(m, q, err, errlen)) return 0;
  out->url = ad_url(a, m->base_url, ad_providers[m->provider].base_url,
                    ar_printf(a, q->stream ? "/v1beta/models/%s:streamGenerateContent?alt=sse"
                                              : "/v1beta/models/%s:generateContent", name));
  ad_headers(m, a, out, m->api_key ? "x-goog-api-key" : NULL, m->api_key, NULL);
  sb_buf b;
  sb_init(&b);
  sb_adds(&b, "{\"contents\":[");
  if (c->items.len) sb_add(&b, c->items.data, c->items.len);
  sb_addc(&b, ']');
  if (c->system.len) {
    sb_adds(&b, ",\"systemInstruction\":{\"parts\":[{\"text\":");
    sb_add(&b, c->system.data, c->system.len);
    sb_adds(&b, "}]}");
  }
  int tools = (q->ntools || q->nptools) && (!q->final_schema || tools_with_json(m));
  if (tools) {
    sb_adds(&b, ",\"tools\":[");
    if (q->ntools) {
      sb_adds(&b, "{\"functionDeclarations\":[");
      ad_write_tools(&b, a, q, "{", "parametersJsonSchema", ad_schema_gemini, "}");
      sb_adds(&b, "]}");
    }
    /* the built-in tools: {"google_search": {}}, ...; file search with its
       stores, {"file_search": {"file_search_store_names": [...]}} */
    for (int i = 0; i < q->nptools; i++) {
      const ad_ptool *t = &q->ptools[i];
      const char *entry = ad_ptool_entry(m, t->kind);
      if (i || q->ntools) sb_addc(&b, ',');
      sb_addc(&b, '{');
      json_write_string(&b, entry, strlen(entry));
      if (t->kind == AD_PT_FILE_SEARCH) {
        sb_adds(&b, ":{\"file_search_store_names\":");
        ad_write_strings(&b, t->vector_stores, t->nvector_stores);
        sb_adds(&b, "}}");
      } else {
        sb_adds(&b, ":{}}");
      }
    }
    sb_addc(&b, ']');
  }
  if (tools && q->ntools) {
    static const char *const modes[] = { "AUTO", "ANY", "NONE", "ANY" };
    sb_printf(&b, ",\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"%s\"", modes[q->choice]);
    if (q->choice == AD_CHOICE_TOOL) {
      sb_adds(&b, ",\"allowedFunctionNames\":[");
      json_write_string(&b, q->choice_tool, strlen(q->choice_tool));
      sb_addc(&b, ']');
    }
    sb_addc(&b, '}');
    /* built-in tools beside functions (Gemini 3): their calls come back as
       toolCall and toolResponse parts, echoed with the content */
    if (q->nptools) sb_adds(&b, ",\"includeServerSideToolInvocations\":true");
    sb_addc(&b, '}');
  }
  if (m->has_temperature || m->max_tokens > 0 || q->final_schema) {
    sb_adds(&b, ",\"generationConfig\":{");
    const char *sep = "";
    if (m->has_temperature) {
      sb_adds(&b, "\"temperature\":");
      ad_write_number(&b, m->temperature);
      sep = ",";
    }
    if (m->max_tokens > 0) {
      sb_printf(&b, "%s\"maxOutputTokens\":%lld", sep, m->max_tokens);
      sep = ",";
    }
    if (q->final_schema) {
      sb_printf(&b, "%s\"responseMimeType\":\"application/json\",\"responseJsonSchema\":", sep);
      jv_write(&b, ad_schema_gemini(a, q->final_schema), 0);
    }
    sb_addc(&b, '}');
  }
  sb_addc(&b, '}');
  ad_body(a, out, &b);
  return 1;
}

static ad_stop stop_of(const char *reason) {
  if (!reason || strcmp(reason, "STOP") == 0) return AD_STOP_END;
  if (strcmp(reason, "MAX_TOKENS") == 0) return AD_STOP_LENGTH;
  static const char *const filters[] = { "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
                                         "IMAGE_SAFETY", NULL };
  for (const char *const *f = filters; *f; f++)
    if (strcmp(reason, *f) == 0) return AD_STOP_FILTER;
  return AD_STOP_OTHER;
}

/* A grounding chunk's source: a web page's uri and title, or a file
   search's retrieved document (its uri, else the fileSearchStore it is in;
   its title is the document's display name). */
static const jv *chunk_source(const jv *ch) {
  const jv *web = ad_get(ch, "web", JV_OBJ);
  return web ? web : ad_get(ch, "retrievedContext", JV_OBJ);
}
static const char *chunk_url(const jv *ch) {
  const jv *s = chunk_source(ch);
  const char *uri = ad_str(s, "uri");
  return uri ? uri : ad_str(s, "fileSearchStore");
}
static const char *chunk_title(const jv *ch) { return ad_str(chunk_source(ch), "title"); }

/* The built-in tools' traces: toolCall parts (Gemini 3, beside functions)
   or else the candidate's metadata; executableCode and codeExecutionResult
   parts; the grounding's sources as citations. There are no error parts:
   a failed URL retrieval or code run is its status or outcome. */
static void ge_builtins(ar_arena *a, ad_turn *t, const jv *cand, const jv *parts) {
  /* Gemini 3 beside functions: a toolCall part per call (its toolResponse
     follows), a failed code run's codeExecutionResult marking the code call
     before it */
  int calls = 0, code = -1;
  for (const jv *p = parts->first; p && !calls; p = p->next) calls = ad_str(ad_get(p, "toolCall", JV_OBJ), "toolType") != NULL;
  for (const jv *p = parts->first; p; p = p->next) {
    const jv *tc = ad_get(p, "toolCall", JV_OBJ);
    const char *type = ad_str(tc, "toolType");
    if (type) {
      ad_add_ptcall(a, t, ad_ptkind_of(type), type, ad_str(tc, "id"), NULL, NULL);
      if (ad_ptkind_of(type) == AD_PT_CODE_EXECUTION) code = t->nptcalls - 1;
      continue;
    }
    const jv *result = ad_get(p, "codeExecutionResult", JV_OBJ);
    if (!result) continue;
    const char *outcome = ad_str(result, "outcome");
    const char *failed = outcome && strcmp(outcome, "OUTCOME_OK") != 0 ? outcome : NULL;
    const char *why = failed ? ad_str(result, "output") : NULL;
    if (failed && (!why || !*why)) why = ar_printf(a, "The code did not run to its end: %s.", failed);
    if (!calls) {
      ad_add_ptcall(a, t, AD_PT_CODE_EXECUTION, NULL, ad_str(result, "id"), failed, why);
    } else if (failed && code >= 0 && !t->ptcalls[code].error_code) {
      t->ptcalls[code].error_code = failed;
      t->ptcalls[code].error = why;
      t->ptool_errors++;
    }
  }
  /* else the candidate's metadata: a search per query, a retrieval per URL */
  const jv *gm = ad_get(cand, "groundingMetadata", JV_OBJ);
  const jv *queries = ad_get(gm, "webSearchQueries", JV_ARR);
  for (const jv *q = !calls && queries ? queries->first : NULL; q; q = q->next)
    ad_add_ptcall(a, t, AD_PT_WEB_SEARCH, NULL, NULL, NULL, NULL);
  if (!calls && queries && !queries->count) ad_add_ptcall(a, t, AD_PT_WEB_SEARCH, NULL, NULL, NULL, NULL);
  /* a file search: the chunks it retrieved (retrievedContext), one call per
     retrieval query when the metadata lists them */
  const jv *chunks = ad_get(gm, "groundingChunks", JV_ARR);
  int retrieved = 0;
  for (const jv *ch = chunks ? chunks->first : NULL; ch && !retrieved; ch = ch->next)
    retrieved = ad_get(ch, "retrievedContext", JV_OBJ) != NULL;
  const jv *rq = ad_get(gm, "retrievalQueries", JV_ARR);
  for (int k = 0, n = rq && rq->count ? rq->count : 1; !calls && retrieved && k < n; k++)
    ad_add_ptcall(a, t, AD_PT_FILE_SEARCH, NULL, NULL, NULL, NULL);
  const jv *urls = ad_get(ad_get(cand, "urlContextMetadata", JV_OBJ), "urlMetadata", JV_ARR);
  for (const jv *u = urls ? urls->first : NULL; u; u = u->next) {
    const char *status = ad_str(u, "urlRetrievalStatus"), *url = ad_str(u, "retrievedUrl");
    const char *failed = status && strcmp(status, "URL_RETRIEVAL_STATUS_SUCCESS") != 0 ? status : NULL;
    const char *why = failed ? ar_printf(a, "%s could not be retrieved (%s).", url ? url : "a URL", failed) : NULL;
    if (!calls) ad_add_ptcall(a, t, AD_PT_URL_CONTEXT, NULL, NULL, failed, why);
    else if (failed) t->ptool_errors++;
  }
  /* groundingSupports: a segment of the answer and the chunks it rests on */
  const jv *supports = ad_get(gm, "groundingSupports", JV_ARR);
  int cited = 0;
  for (const jv *s = supports ? supports->first : NULL; s && chunks; s = s->next) {
    const jv *text = ad_get(ad_get(s, "segment", JV_OBJ), "text", JV_STR);
    const jv *idx = ad_get(s, "groundingChunkIndices", JV_ARR);
    for (const jv *i = idx ? idx->first : NULL; i; i = i->next) {
      if (i->type != JV_INT || i->i < 0 || i->i >= chunks->count) continue;
      const jv *ch = chunks->first;
      for (long long k = i->i; k > 0 && ch; k--) ch = ch->next;
      ad_add_citation(a, t, chunk_url(ch), chunk_title(ch), text ? text->s : NULL, text ? text->len : 0);
      cited = 1;
    }
  }
  for (const jv *ch = cited || !chunks ? NULL : chunks->first; ch; ch = ch->next)
    ad_add_citation(a, t, chunk_url(ch), chunk_title(ch), NULL, 0);
}

static int ge_turn_of(const jv *body, ar_arena *a, ad_turn *t, char *err, size_t errlen) {
  const jv *usage = ad_get(body, "usageMetadata", JV_OBJ);
  t->input_tokens = ad_int(usage, "promptTokenCount", -1);
  t->output_tokens = ad_int(usage, "candidatesTokenCount", -1);
  const jv *cands = ad_get(body, "candidates", JV_ARR);
  if (!cands || !cands->first) {
    const char *blocked = ad_str(ad_get(body, "promptFeedback", JV_OBJ), "blockReason");
    if (!blocked) { snprintf(err, errlen, "it has no candidates"); return 0; }
    t->stop = AD_STOP_BLOCKED;
    t->stop_reason = blocked;
    return 1;
  }
  const jv *cand = cands->first;
  t->stop_reason = ad_str(cand, "finishReason");
  t->stop = stop_of(t->stop_reason);
  const jv *content = ad_get(cand, "content", JV_OBJ);
  const jv *parts = ad_get(content, "parts", JV_ARR);
  if (!parts) {
    if (t->stop == AD_STOP_END) { snprintf(err, errlen, "its candidate has no content"); return 0; }
    return 1;   /* a safety stop, a length stop, MALFORMED_FUNCTION_CALL: nothing to send back */
  }
  ge_builtins(a, t, cand, parts);
  int ncalls = 0;
  for (const jv *p = parts->first; p; p = p->next)
    if (ad_get(p, "functionCall", JV_OBJ)) ncalls++;
  if (!ad_calls_alloc(a, t, ncalls)) return 0;
  for (const jv *p = parts->first; p; p = p->next) {
    const jv *thought = ad_get(p, "thought", JV_BOOL);
    const jv *text = ad_get(p, "text", JV_STR);
    if (text && !(thought && thought->b)) ad_add_text(a, t, text->s, text->len);
    const jv *fc = ad_get(p, "functionCall", JV_OBJ);
    if (!fc) continue;
    const char *name = ad_str(fc, "name");
    if (!name) { snprintf(err, errlen, "a functionCall has no name"); return 0; }
    ad_call *call = &t->calls[t->ncalls++];
    call->id = ad_str(fc, "id");
    call->name = name;
    const jv *args = jv_get(fc, "args");
    call->arguments = args ? ad_json_text(a, args, &call->arguments_len) : "{}";
    if (!args) call->arguments_len = 2;
  }
  /* sent back as it came: the thoughtSignature of the first call with it;
     a content with no parts is not (Gemini refuses empty parts) */
  if (!parts->count) {
    t->echo = NULL;
  } else if (ad_str(content, "role")) {
    t->echo = content;
  } else {
    jv *echo = jv_obj(a);
    jv_set(echo, "role", jv_cstr(a, "model"));
    jv_set(echo, "parts", ad_share(a, parts));
    t->echo = echo;
  }
  return 1;
}

/* "37s", "0.5s"; -1 (ignored) unless shorter than LIM_RETRY_AFTER_MAX_MS */
static long long duration_ms(const char *s) {
  char *end;
  double ms = strtod(s, &end) * 1000;
  if (end == s || *end != 's' || !(ms >= 0 && ms < LIM_RETRY_AFTER_MAX_MS)) return -1;
  return (long long)ms;
}

/* {error: {code, message, status, details: [{"@type": "...RetryInfo", retryDelay}]}} */
static void ge_error_of(const jv *body, const char **message, const char **type, long long *retry_after_ms) {
  const jv *e = ad_get(body, "error", JV_OBJ);
  *message = ad_str(e, "message");
  *type = ad_str(e, "status");
  const jv *details = ad_get(e, "details", JV_ARR);
  for (const jv *d = details ? details->first : NULL; d; d = d->next) {
    const char *t = ad_str(d, "@type");
    const char *delay = ad_str(d, "retryDelay");
    if (t && strstr(t, "RetryInfo") && delay) *retry_after_ms = duration_ms(delay);
  }
}

const ad_family ad_gemini_family = {
  ge_user, ge_turn, ge_results, ge_build, ge_turn_of, ge_error_of
};
