/* The provider tools of an ask (askptools.h). */
#include "askptools.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "callint.h"
#include "compat.h"
#include "json.h"
#include "jsonschema.h"
#include "ljson.h"
#include "luma_limits.h"
#include "telemetry.h"
#include "utf8.h"
#include "verdict.h"

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

static int discover(lua_State *T, cl_call *c);

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
  /* the program's built-in tool, whose handler is discover (once per program) */
  const pm_tool *t = a->pg->p->discover;
  if (!t) return -1;
  if (a->pg->kind[t->index] == PL_NONE) pl_register_builtin(a->pg, t, discover);
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
  jv *decl = js_tool(&a->arena, a->pg->p, t, JS_CANONICAL);
  a->discover = (ad_tool){ t->name, desc, jv_get(decl, "parameters"), 0 };
  return a->arena.failed || !desc || !a->discover.parameters ? -1 : 0;
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

const pm_tool *ak_lazy_tool(const ak_ask *a, const char *name) {
  return a->lazy_mode == AK_LAZY_SYNTHETIC && name && strcmp(name, PM_DISCOVER_TOOL) == 0 ? a->pg->p->discover : NULL;
}

int ak_lazy_unloaded(const ak_ask *a, const char *name, char *msg, size_t cap) {
  if (a->lazy_mode != AK_LAZY_SYNTHETIC || !name) return 0;
  int i = lazy_index(a, name);
  if (i < 0 || !a->agent->lazy[i] || a->discovered[i]) return 0;
  snprintf(msg, cap, "Tool '%s' is not loaded yet: call %s with {\"names\": [\"%s\"]} first, then call it.", name,
           PM_DISCOVER_TOOL, name);
  return 1;
}

static int contains(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  if (!hay || !n) return 0;
  for (; *hay; hay++) {
    size_t k = 0;
    while (k < n && hay[k] && u8_lower_ascii(hay[k]) == u8_lower_ascii(needle[k])) k++;
    if (k == n) return 1;
  }
  return 0;
}

/* Whether a discovery call's query finds tool i: a lazy one, not loaded
   before the call, that the call did not name, whose name or description
   holds the query. */
static int queried(const ak_ask *a, int i, const char *query, const char *listed) {
  return a->agent->lazy[i] && !a->discovered[i] && !listed[i] &&
         (contains(a->tools[i].name, query) || contains(a->tools[i].description, query));
}

/* One tool found: loaded from the next request on, and described to the
   model in the answer's list at index list. */
static void found(lua_State *T, ak_ask *a, int i, int list, int *count) {
  const ad_tool *t = &a->tools[i];
  a->discovered[i] = 1;
  lua_createtable(T, 0, 3);
  lua_pushstring(T, t->name);
  lua_setfield(T, -2, "name");
  if (t->description) {
    lua_pushstring(T, t->description);
    lua_setfield(T, -2, "description");
  }
  if (t->parameters) lj_push(T, t->parameters, 0); else lua_newtable(T);
  lua_setfield(T, -2, "input_schema");
  lua_rawseti(T, list, ++*count);
}

/* The discovery tool's handler (pl_builtin), as the pipeline runs it: its
   input validated ({ names: [string]?, query: string? }), the tools named
   or matched among the lazy tools of the agent of the ask that made the
   call, which are loaded from the ask's next request on. Each tool is
   described once however often it is named, and the first max_violations
   names that are no tool are said, then how many more. */
static int discover(lua_State *T, cl_call *c) {
  ak_ask *a = c->ask;
  if (!a || a->lazy_mode != AK_LAZY_SYNTHETIC) {
    st_fail(T, LE_TOOL_NOT_FOUND, le_template(LE_TOOL_NOT_FOUND), c->t->name);
    return -1;
  }
  const pm_agent *ag = a->agent;
  luaL_checkstack(T, 8, "the discovery tool's answer");
  lua_pushliteral(T, "names");
  int names = lc_rawget(T, CV_INPUT) == LUA_TTABLE ? lua_gettop(T) : 0;
  lua_pushliteral(T, "query");
  const char *query = lc_rawget(T, CV_INPUT) == LUA_TSTRING ? lua_tostring(T, -1) : NULL;
  char *listed = lua_newuserdata(T, (size_t)a->ntools + 1);
  memset(listed, 0, (size_t)a->ntools + 1);
  lua_createtable(T, 0, 2);
  int out = lua_gettop(T);
  lua_createtable(T, 0, 0);
  int list = lua_gettop(T);
  lj_push_array_mt(T);
  lua_setmetatable(T, list);
  lua_createtable(T, 0, 0);
  int errs = lua_gettop(T);
  int count = 0, nerr = 0, most = lv_max_violations(a->pg->v);
  char msg[400];
  size_t n = names ? lc_rawlen(T, names) : 0;
  for (size_t k = 1; k <= n; k++) {
    lc_rawgeti(T, names, (lua_Integer)k);
    const char *name = lua_tostring(T, -1);
    int i = name ? lazy_index(a, name) : -1;
    if (i >= 0 && !listed[i]) found(T, a, i, list, &count);
    if (i >= 0) listed[i] = 1;
    else if (nerr++ < most) {
      /* the model's name, its first 100 bytes cut between two characters:
         the answer stays UTF-8 */
      char shown[101];
      size_t cut = name ? u8_cut(name, strlen(name), sizeof shown - 1) : 0;
      if (cut) memcpy(shown, name, cut);
      shown[cut] = 0;
      snprintf(msg, sizeof msg, "'%s' is not a tool of agent '%s'.", shown, ag->name);
      lua_pushstring(T, msg);
      lua_rawseti(T, errs, nerr);
    }
    lua_pop(T, 1);
  }
  for (int i = 0; query && i < a->ntools; i++)
    if (queried(a, i, query, listed)) found(T, a, i, list, &count);
  lua_pushvalue(T, list);
  lua_setfield(T, out, "tools");
  if (nerr > most) {
    snprintf(msg, sizeof msg, "and %d more names that are no tool of agent '%s'.", nerr - most, ag->name);
    lua_pushstring(T, msg);
    lua_rawseti(T, errs, most + 1);
  }
  if (nerr) {
    lua_pushvalue(T, errs);
    lua_setfield(T, out, "errors");
  }
  lua_settop(T, out);
  return 0;
}

void ak_lazy_journaled(ak_ask *a, const ad_call *call, int is_error) {
  if (a->lazy_mode != AK_LAZY_SYNTHETIC || is_error || !call->name || strcmp(call->name, PM_DISCOVER_TOOL) != 0) return;
  /* from its input, which the journal holds whole, as the handler found
     them: the answer the model read may have been cut */
  ar_arena scratch;
  ar_init(&scratch);
  char why[200];
  const jv *in = json_parse(&scratch, call->arguments_len ? call->arguments : "{}",
                            call->arguments_len ? call->arguments_len : 2, LIM_MODEL_JSON_DEPTH, why, sizeof why);
  const jv *names = in && in->type == JV_OBJ ? jv_get(in, "names") : NULL;
  const jv *query = in && in->type == JV_OBJ ? jv_get(in, "query") : NULL;
  char *listed = ar_alloc(&scratch, (size_t)a->ntools + 1);
  if (listed) memset(listed, 0, (size_t)a->ntools + 1);
  for (const jv *n = listed && names && names->type == JV_ARR ? names->first : NULL; n; n = n->next) {
    int i = n->type == JV_STR ? lazy_index(a, n->s) : -1;
    if (i >= 0) a->discovered[i] = listed[i] = 1;
  }
  for (int i = 0; listed && query && query->type == JV_STR && i < a->ntools; i++)
    if (queried(a, i, query->s, listed)) a->discovered[i] = 1;
  ar_free(&scratch);
}
