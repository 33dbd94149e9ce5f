/* The provider tools of an ask (askptools.h). */
#include "askptools.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

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
