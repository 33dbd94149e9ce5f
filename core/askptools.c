/* The provider tools of an ask (askptools.h). */
#include "askptools.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "json.h"
#include "luma_limits.h"
#include "telemetry.h"

static const char *const *strings(const pm_strings *s) {
  return s->items;
}

int ak_ptools_prepare(ak_ask *a) {
  const pm_agent *ag = a->agent;
  a->cites_tail = &a->cites;
  a->nptools = ag->ptools.n;
  if (!a->nptools) return 0;
  a->ptools = ar_alloc(&a->arena, sizeof *a->ptools * (size_t)a->nptools);
  if (!a->ptools) return -1;
  ad_wire w = ad_wire_of((ad_provider)a->pm->provider, (ad_api)a->pm->api);
  for (int i = 0; i < a->nptools; i++) {
    const pm_ptool *t = ag->ptools.items[i];
    ad_ptool *p = &a->ptools[i];
    memset(p, 0, sizeof *p);
    p->kind = (ad_ptkind)t->kind;
    p->max_uses = t->max_uses;
    p->allowed_domains = strings(&t->allowed_domains);
    p->nallowed = t->allowed_domains.n;
    p->blocked_domains = strings(&t->blocked_domains);
    p->nblocked = t->blocked_domains.n;
    p->vector_stores = strings(&t->vector_stores);
    p->nvector_stores = t->vector_stores.n;
    p->container = t->container;
    if (t->user_location.n) {
      ad_header *h = ar_alloc(&a->arena, sizeof *h * (size_t)t->user_location.n);
      if (!h) return -1;
      for (int k = 0; k < t->user_location.n; k++) h[k] = (ad_header){ t->user_location.names[k], t->user_location.values[k] };
      p->location = h;
      p->nlocation = t->user_location.n;
    }
    /* a model the table does not know, let through by allow_unknown_model */
    ad_capability cap = ad_ptool_capability(w, a->pm->model, p->kind);
    if (cap.verdict == AD_CAP_UNKNOWN_MODEL) {
      char msg[400];
      snprintf(msg, sizeof msg, "Agent '%s': model '%s' is not one luma knows to run %s on %s; sent as %s unchecked (allow_unknown_model).",
               ag->name, a->pm->model ? a->pm->model : a->pm->deployment, ad_ptkind_names[p->kind], ad_wire_title(w),
               cap.entry ? cap.entry : "?");
      st_warn(a->T, a->pg, msg);
    }
  }
  return 0;
}

static const char *keep(ak_ask *a, const char *s) {
  return s ? ar_strdup(&a->arena, s) : NULL;
}

void ak_ptools_turn(ak_ask *a) {
  const ad_turn *t = &a->turn;
  for (int k = 0; k < AD_NPTKINDS; k++) a->ptool_uses[k] += t->ptool_uses[k];
  a->ptool_errors += t->ptool_errors;
  for (int i = 0; i < t->ncitations; i++) {
    ak_cite *c = ar_alloc(&a->arena, sizeof *c);
    if (!c) return;
    c->url = keep(a, t->citations[i].url);
    c->title = keep(a, t->citations[i].title);
    c->cited_text = keep(a, t->citations[i].cited_text);
    c->next = NULL;
    *a->cites_tail = c;
    a->cites_tail = &c->next;
    a->ncites++;
  }
}

void ak_push_citations(lua_State *L, const ak_ask *a) {
  lua_createtable(L, a->ncites, 0);
  int i = 0;
  for (const ak_cite *c = a->cites; c; c = c->next) {
    lua_createtable(L, 0, 3);
    lua_pushstring(L, c->url);
    lua_setfield(L, -2, "url");
    if (c->title) { lua_pushstring(L, c->title); lua_setfield(L, -2, "title"); }
    if (c->cited_text) { lua_pushstring(L, c->cited_text); lua_setfield(L, -2, "cited_text"); }
    lua_rawseti(L, -2, ++i);
  }
}

void ak_ptools_event(ak_ask *a, int e) {
  lua_State *T = a->T;
  int any = 0;
  for (int k = 0; k < AD_NPTKINDS; k++) any |= a->ptool_uses[k] > 0;
  if (any) {
    lua_createtable(T, 0, AD_NPTKINDS);
    for (int k = 0; k < AD_NPTKINDS; k++) {
      if (!a->ptool_uses[k]) continue;
      lua_pushinteger(T, a->ptool_uses[k]);
      lua_setfield(T, -2, ad_ptkind_names[k]);
    }
    lua_setfield(T, e, "provider_tools");
  }
  if (a->ptool_errors) {
    lua_pushinteger(T, a->ptool_errors);
    lua_setfield(T, e, "provider_tool_errors");
  }
  if (a->ncites) {
    ak_push_citations(T, a);
    lua_setfield(T, e, "citations");
  }
}

/* ------------------------------------------------------------ lazy tools */

int ak_lazy_prepare(ak_ask *a) {
  const pm_agent *ag = a->agent;
  if (!ag->lazy) return 0;
  a->discovered = ar_alloc(&a->arena, (size_t)a->ntools);
  if (!a->discovered) return -1;
  memset(a->discovered, 0, (size_t)a->ntools);
  /* a forced tool is sent from the first request */
  for (int i = 0; i < a->ntools; i++)
    if (a->forced && ag->tools.items[i] == a->forced) a->discovered[i] = 1;
  ad_wire w = ad_wire_of((ad_provider)a->pm->provider, (ad_api)a->pm->api);
  const char *native = ag->tool_search == TS_SYNTHETIC ? NULL : ad_tool_search(w, a->pm->model, ag->tool_search == TS_BM25);
  if (native) {
    a->lazy_mode = AK_LAZY_NATIVE;
    a->tool_search = native;
    return 0;
  }
  a->lazy_mode = AK_LAZY_SYNTHETIC;
  /* its description names what it can load */
  sb_buf d;
  sb_init(&d);
  sb_adds(&d, "Loads tools that are not loaded yet, so that you can call them. Give their names, or a query "
              "that their names or descriptions contain. It returns each one's name, description and input "
              "schema. Tools you can load:");
  for (int i = 0, n = 0; i < a->ntools; i++)
    if (ag->lazy[i]) sb_printf(&d, "%s %s", n++ ? "," : "", ag->tools.items[i]->name);
  sb_addc(&d, '.');
  const char *desc = d.failed ? NULL : ar_strndup(&a->arena, d.data, d.len);
  sb_free(&d);
  ar_arena *m = &a->arena;
  jv *names = jv_set(jv_obj(m), "type", jv_cstr(m, "array"));
  jv_set(names, "items", jv_set(jv_obj(m), "type", jv_cstr(m, "string")));
  jv_set(names, "description", jv_cstr(m, "the names of the tools to load"));
  jv *query = jv_set(jv_obj(m), "type", jv_cstr(m, "string"));
  jv_set(query, "description", jv_cstr(m, "words the tools' names or descriptions contain"));
  jv *props = jv_set(jv_obj(m), "names", names);
  jv_set(props, "query", query);
  jv *params = jv_set(jv_obj(m), "type", jv_cstr(m, "object"));
  jv_set(params, "properties", props);
  jv_set(params, "additionalProperties", jv_bool(m, 0));
  a->discover = (ad_tool){ PM_DISCOVER_TOOL, desc, params, 0 };
  return m->failed || !desc ? -1 : 0;
}

void ak_lazy_ask(ak_ask *a, ad_ask *q) {
  if (a->lazy_mode == AK_LAZY_NONE) return;
  const pm_agent *ag = a->agent;
  ad_tool *list = ar_alloc(&a->turn_arena, sizeof *list * (size_t)(a->ntools + 1));
  if (!list) return;   /* the request goes out with every tool */
  int n = 0;
  for (int i = 0; i < a->ntools; i++) {
    int lazy = ag->lazy[i] && !a->discovered[i];
    if (lazy && a->lazy_mode == AK_LAZY_SYNTHETIC) continue;
    list[n] = a->tools[i];
    list[n++].deferred = lazy;
  }
  if (a->lazy_mode == AK_LAZY_SYNTHETIC) list[n++] = a->discover;
  else q->tool_search = a->tool_search;
  q->tools = list;
  q->ntools = n;
}

static int lazy_index(const ak_ask *a, const char *name) {
  for (int i = 0; i < a->ntools; i++)
    if (strcmp(a->tools[i].name, name) == 0) return i;
  return -1;
}

static int contains(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  if (!hay || !n) return 0;
  for (; *hay; hay++) {
    size_t k = 0;
    while (k < n && hay[k] && (hay[k] | 32) == (needle[k] | 32)) k++;
    if (k == n) return 1;
  }
  return 0;
}

static void write_error(sb_buf *out, const char *message) {
  sb_adds(out, "{\"error\":{\"code\":\"TOOL_NOT_FOUND\",\"message\":");
  json_write_string(out, message, strlen(message));
  sb_adds(out, ",\"retryable\":false}}");
}

/* One tool found: loaded from the next request on, and described to the model. */
static void found(ak_ask *a, int i, sb_buf *out, int *count) {
  const ad_tool *t = &a->tools[i];
  a->discovered[i] = 1;
  sb_adds(out, (*count)++ ? ",{\"name\":" : "{\"name\":");
  json_write_string(out, t->name, strlen(t->name));
  if (t->description) {
    sb_adds(out, ",\"description\":");
    json_write_string(out, t->description, strlen(t->description));
  }
  sb_adds(out, ",\"input_schema\":");
  jv_write(out, t->parameters, 0);
  sb_addc(out, '}');
}

/* One violation of the discovery tool's input schema, as the pipeline's
   validator says it: { path, message = "path text", rule }. */
static void violation(sb_buf *v, int *n, const char *path, const char *text, const char *rule, char *first, size_t cap) {
  if (*n >= LIM_MAX_VIOLATIONS) {   /* as the validator: the first ones, then "truncated" */
    (*n)++;
    return;
  }
  char m[200];
  snprintf(m, sizeof m, "%.160s %.35s", path, text);
  if (!*n && cap) {
    size_t k = strlen(m) < cap ? strlen(m) : cap - 1;
    memcpy(first, m, k);
    first[k] = 0;
  }
  sb_adds(v, (*n)++ ? ",{\"path\":" : "{\"path\":");
  json_write_string(v, path, strlen(path));
  sb_adds(v, ",\"message\":");
  json_write_string(v, m, strlen(m));
  sb_adds(v, ",\"rule\":");
  json_write_string(v, rule, strlen(rule));
  sb_addc(v, '}');
}

/* The discovery call's input checked against its schema (ak_lazy_prepare's
   parameters): an object of names (an array of strings) and query (a
   string), each optional (null is no value), nothing else. 1 with the
   model's error result in out, as the pipeline's TOOL_INPUT_INVALID: the
   first violation's message and every one in details.violations. */
static int bad_input(const jv *in, char *first, size_t cap, sb_buf *out) {
  char path[160];
  const char *root = PM_DISCOVER_TOOL ".input";
  sb_buf v;
  sb_init(&v);
  int n = 0;
  if (in->type != JV_OBJ) {
    violation(&v, &n, root, "must be an object", "type", first, cap);
  } else {
    for (const jv *m = in->first; m; m = m->next) {
      snprintf(path, sizeof path, "%s.%.100s", root, m->key);
      if (strcmp(m->key, "query") == 0) {
        if (m->type != JV_STR && m->type != JV_NULL) violation(&v, &n, path, "must be a string", "type", first, cap);
      } else if (strcmp(m->key, "names") == 0) {
        if (m->type == JV_ARR) {
          int k = 0;
          for (const jv *x = m->first; x; x = x->next, k++) {
            if (x->type == JV_STR) continue;
            snprintf(path, sizeof path, "%s.names[%d]", root, k + 1);
            violation(&v, &n, path, "must be a string", "type", first, cap);
          }
        } else if (m->type != JV_NULL) {
          violation(&v, &n, path, "must be an array", "type", first, cap);
        }
      } else {
        violation(&v, &n, path, "is not allowed", "additionalProperties", first, cap);
      }
    }
  }
  if (n) {
    sb_adds(out, "{\"error\":{\"code\":\"TOOL_INPUT_INVALID\",\"message\":");
    json_write_string(out, first, strlen(first));
    sb_adds(out, ",\"tool\":\"" PM_DISCOVER_TOOL "\",\"details\":{\"violations\":[");
    sb_add(out, v.data, v.len);
    sb_adds(out, n > LIM_MAX_VIOLATIONS ? "],\"truncated\":true},\"retryable\":false}}" : "]},\"retryable\":false}}");
  }
  sb_free(&v);
  return n > 0;
}

int ak_lazy_answer(ak_ask *a, const ad_call *call, sb_buf *out, int *is_error) {
  if (a->lazy_mode != AK_LAZY_SYNTHETIC || !call->name) return 0;
  const pm_agent *ag = a->agent;
  char msg[400];
  *is_error = 0;
  if (strcmp(call->name, PM_DISCOVER_TOOL) != 0) {
    int i = lazy_index(a, call->name);
    if (i < 0 || !ag->lazy[i] || a->discovered[i]) return 0;
    snprintf(msg, sizeof msg, "Tool '%s' is not loaded yet: call %s with {\"names\": [\"%s\"]} first, then call it.",
             call->name, PM_DISCOVER_TOOL, call->name);
    write_error(out, msg);
    *is_error = 1;
    return 1;
  }
  ar_arena scratch;
  ar_init(&scratch);
  char why[200];
  jv *in = json_parse(&scratch, call->arguments_len ? call->arguments : "{}", call->arguments_len ? call->arguments_len : 2,
                      LIM_MODEL_JSON_DEPTH, why, sizeof why);
  if (!in || bad_input(in, why, sizeof why, out)) {
    if (!in) {
      snprintf(msg, sizeof msg, "The arguments of tool '%s' are not JSON: %s.", PM_DISCOVER_TOOL, why);
      sb_adds(out, "{\"error\":{\"code\":\"TOOL_INPUT_INVALID\",\"message\":");
      json_write_string(out, msg, strlen(msg));
      sb_adds(out, ",\"retryable\":false}}");
    }
    ar_free(&scratch);
    *is_error = 1;
    return 1;
  }
  const jv *names = jv_get(in, "names");
  const jv *query = jv_get(in, "query");
  int count = 0, nerr = 0;
  /* each tool described once in an answer, whatever the model repeats,
     and the first LIM_MAX_VIOLATIONS names that are no tool said */
  char *listed = ar_alloc(&scratch, (size_t)a->ntools + 1);
  if (!listed) {
    ar_free(&scratch);
    sb_adds(out, "{\"error\":{\"code\":\"TOOL_FAILED\",\"message\":\"Out of memory for the discovery call.\",\"retryable\":true}}");
    *is_error = 1;
    return 1;
  }
  memset(listed, 0, (size_t)a->ntools + 1);
  sb_buf errs;
  sb_init(&errs);
  sb_adds(out, "{\"tools\":[");
  for (const jv *n = names && names->type == JV_ARR ? names->first : NULL; n; n = n->next) {
    int i = n->type == JV_STR ? lazy_index(a, n->s) : -1;
    if (i >= 0) {
      if (!listed[i]) found(a, i, out, &count);
      listed[i] = 1;
      continue;
    }
    if (nerr++ >= LIM_MAX_VIOLATIONS) continue;
    snprintf(msg, sizeof msg, "'%.100s' is not a tool of agent '%s'.", n->type == JV_STR ? n->s : "(not a string)", ag->name);
    if (nerr > 1) sb_addc(&errs, ',');
    json_write_string(&errs, msg, strlen(msg));
  }
  for (int i = 0; query && query->type == JV_STR && i < a->ntools; i++)
    if (ag->lazy[i] && !a->discovered[i] && !listed[i] &&
        (contains(a->tools[i].name, query->s) || contains(a->tools[i].description, query->s)))
      found(a, i, out, &count);
  sb_addc(out, ']');
  if (nerr) {
    sb_adds(out, ",\"errors\":[");
    sb_add(out, errs.data, errs.len);
    if (nerr > LIM_MAX_VIOLATIONS) {
      snprintf(msg, sizeof msg, "and %d more names that are no tool of agent '%s'.", nerr - LIM_MAX_VIOLATIONS, ag->name);
      sb_addc(out, ',');
      json_write_string(out, msg, strlen(msg));
    }
    sb_addc(out, ']');
  }
  sb_addc(out, '}');
  sb_free(&errs);
  ar_free(&scratch);
  return 1;
}

void ak_lazy_journaled(ak_ask *a, const ad_call *call, const char *content, size_t len, int is_error) {
  if (a->lazy_mode != AK_LAZY_SYNTHETIC || is_error || !call->name || strcmp(call->name, PM_DISCOVER_TOOL) != 0) return;
  ar_arena scratch;
  ar_init(&scratch);
  char why[200];
  const jv *out = json_parse(&scratch, content, len, LIM_MODEL_JSON_DEPTH, why, sizeof why);
  const jv *tools = out && out->type == JV_OBJ ? jv_get(out, "tools") : NULL;
  for (const jv *t = tools && tools->type == JV_ARR ? tools->first : NULL; t; t = t->next) {
    const jv *name = t->type == JV_OBJ ? jv_get(t, "name") : NULL;
    int i = name && name->type == JV_STR ? lazy_index(a, name->s) : -1;
    if (i >= 0) a->discovered[i] = 1;
  }
  ar_free(&scratch);
}
