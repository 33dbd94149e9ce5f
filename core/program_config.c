/* The configuration blocks of the program model (program.h): which keys a
   tool, an agent and a model take, of what kind, and reading them from the
   syntax tree into the model, with the load-time messages of a bad key or
   value. */
#include "program.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "luma_limits.h"
#include "programint.h"

typedef enum {
  CK_BOOL, CK_INT, CK_POSITIVE, CK_NUMBER, CK_STRING, CK_ENVNAME, CK_CHOICE,
  CK_SCHEMA, CK_MODEL, CK_TOOLS, CK_STRINGS, CK_KEYPATH,
  CK_KEYVAR,                      /* an environment variable name, or null (flag: set for null) */
  CK_HEADERS,                     /* { "Name": "value", ... } */
  CK_LOCATION,                    /* { city: "...", region:, country:, timezone: } */
  CK_NAMES                        /* [a, b]: names, checked by the caller */
} ck_kind;

typedef struct ck_key {
  const char *key;
  ck_kind kind;
  long long min;                  /* CK_INT */
  const char *const *choices;     /* CK_CHOICE, NULL-terminated */
  size_t offset;
  size_t flag;                    /* offset of an int set to 1 when present, or 0 */
} ck_key;

static const char *const side_effect_choices[] = { "none", "read", "write", NULL };
static const char *const backoff_choices[] = { "none", "fixed", "exponential", NULL };
const char *const pm_handler_names[] = { "module", "host", NULL };
static const char *const policy_choices[] = { "allow", "deny_write", "approval", NULL };
const char *const pm_tool_search_names[] = { "auto", "regex", "bm25", "synthetic", NULL };

#define OFF(type, field) offsetof(type, field)

static const ck_key tool_keys[] = {
  { "description", CK_STRING, 0, NULL, OFF(pm_tool, description), 0 },
  { "side_effects", CK_CHOICE, 0, side_effect_choices, OFF(pm_tool, side_effects), 0 },
  { "handler", CK_CHOICE, 0, pm_handler_names, OFF(pm_tool, handler), 0 },
  { "cache", CK_BOOL, 0, NULL, OFF(pm_tool, cache), 0 },
  { "scope", CK_STRING, 0, NULL, OFF(pm_tool, scope), 0 },
  { "credential", CK_ENVNAME, 0, NULL, OFF(pm_tool, credential), 0 },
  { "error", CK_SCHEMA, 0, NULL, OFF(pm_tool, error), 0 },
  { "retries", CK_INT, 0, NULL, OFF(pm_tool, retries), 0 },
  { "retry_backoff", CK_CHOICE, 0, backoff_choices, OFF(pm_tool, retry_backoff), 0 },
  { "retry_delay", CK_INT, 0, NULL, OFF(pm_tool, retry_delay), 0 },
  { "timeout", CK_POSITIVE, 0, NULL, OFF(pm_tool, timeout), 0 },
  { "idempotent", CK_BOOL, 0, NULL, OFF(pm_tool, idempotent), 0 },
  { "idempotency_key", CK_KEYPATH, 0, NULL, OFF(pm_tool, idempotency_key), 0 },
  { "idempotency_ttl_ms", CK_POSITIVE, 0, NULL, OFF(pm_tool, idempotency_ttl_ms), 0 },
  { NULL, CK_BOOL, 0, NULL, 0, 0 }
};

static const ck_key agent_keys[] = {
  { "description", CK_STRING, 0, NULL, OFF(pm_agent, description), 0 },
  { "model", CK_MODEL, 0, NULL, OFF(pm_agent, model), 0 },
  { "tools", CK_TOOLS, 0, NULL, OFF(pm_agent, tools), 0 },
  { "tool_rate_limit", CK_INT, 0, NULL, OFF(pm_agent, tool_rate_limit), 0 },
  { "tool_concurrency", CK_INT, 1, NULL, OFF(pm_agent, tool_concurrency), 0 },
  { "tool_failure_limit", CK_INT, 1, NULL, OFF(pm_agent, tool_failure_limit), 0 },
  { "tool_timeout", CK_POSITIVE, 0, NULL, OFF(pm_agent, tool_timeout), 0 },
  { "tool_timeout_max", CK_POSITIVE, 0, NULL, OFF(pm_agent, tool_timeout_max), 0 },
  { "tool_policy", CK_CHOICE, 0, policy_choices, OFF(pm_agent, tool_policy), 0 },
  { "tool_scopes", CK_STRINGS, 0, NULL, OFF(pm_agent, tool_scopes), 0 },
  { "tool_contexts", CK_STRINGS, 0, NULL, OFF(pm_agent, tool_contexts), 0 },
  { "retries", CK_INT, 0, NULL, OFF(pm_agent, retries), 0 },
  { "tool_result_max_bytes", CK_POSITIVE, 0, NULL, OFF(pm_agent, tool_result_max_bytes), 0 },
  { "lazy_tools", CK_NAMES, 0, NULL, OFF(pm_agent, lazy_tools), 0 },
  { "tool_search", CK_CHOICE, 0, pm_tool_search_names, OFF(pm_agent, tool_search), 0 },
  { "durable", CK_BOOL, 0, NULL, OFF(pm_agent, durable), 0 },
  { NULL, CK_BOOL, 0, NULL, 0, 0 }
};

static const ck_key model_keys[] = {
  { "provider", CK_CHOICE, 0, ad_provider_names, OFF(pm_model, provider), OFF(pm_model, has_provider) },
  { "name", CK_STRING, 0, NULL, OFF(pm_model, model), 0 },
  { "base_url", CK_STRING, 0, NULL, OFF(pm_model, base_url), 0 },
  { "api", CK_CHOICE, 0, ad_api_names, OFF(pm_model, api), OFF(pm_model, has_api) },
  { "api_key_env", CK_KEYVAR, 0, NULL, OFF(pm_model, api_key_env), OFF(pm_model, no_api_key) },
  { "deployment", CK_STRING, 0, NULL, OFF(pm_model, deployment), 0 },
  { "api_version", CK_STRING, 0, NULL, OFF(pm_model, api_version), 0 },
  { "temperature", CK_NUMBER, 0, NULL, OFF(pm_model, temperature), OFF(pm_model, has_temperature) },
  { "max_tokens", CK_INT, 1, NULL, OFF(pm_model, max_tokens), 0 },
  { "timeout", CK_POSITIVE, 0, NULL, OFF(pm_model, timeout), 0 },
  { "retries", CK_INT, 0, NULL, OFF(pm_model, retries), 0 },
  { "stream", CK_BOOL, 0, NULL, OFF(pm_model, stream), 0 },
  { "headers", CK_HEADERS, 0, NULL, OFF(pm_model, headers), 0 },
  { "allow_unknown_model", CK_BOOL, 0, NULL, OFF(pm_model, allow_unknown_model), 0 },
  { NULL, CK_BOOL, 0, NULL, 0, 0 }
};

static const ck_key ptool_keys[] = {
  { "kind", CK_CHOICE, 0, ad_ptkind_names, OFF(pm_ptool, kind), OFF(pm_ptool, has_kind) },
  { "max_uses", CK_POSITIVE, 0, NULL, OFF(pm_ptool, max_uses), 0 },
  { "allowed_domains", CK_STRINGS, 0, NULL, OFF(pm_ptool, allowed_domains), 0 },
  { "blocked_domains", CK_STRINGS, 0, NULL, OFF(pm_ptool, blocked_domains), 0 },
  { "user_location", CK_LOCATION, 0, NULL, OFF(pm_ptool, user_location), 0 },
  { "vector_stores", CK_STRINGS, 0, NULL, OFF(pm_ptool, vector_stores), 0 },
  { "container", CK_STRING, 0, NULL, OFF(pm_ptool, container), 0 },
  { NULL, CK_BOOL, 0, NULL, 0, 0 }
};

static const char *const location_keys[] = { "city", "region", "country", "timezone", NULL };

static const ck_key mcp_keys[] = {
  { "command", CK_STRING, 0, NULL, OFF(pm_mcp, command), 0 },
  { "args", CK_STRINGS, 0, NULL, OFF(pm_mcp, args), 0 },
  { "url", CK_STRING, 0, NULL, OFF(pm_mcp, url), 0 },
  { "token", CK_ENVNAME, 0, NULL, OFF(pm_mcp, token), 0 },
  { "headers", CK_HEADERS, 0, NULL, OFF(pm_mcp, headers), 0 },
  { "tools", CK_STRINGS, 0, NULL, OFF(pm_mcp, tools), 0 },
  { "side_effects", CK_CHOICE, 0, side_effect_choices, OFF(pm_mcp, side_effects), 0 },
  { "scope", CK_STRING, 0, NULL, OFF(pm_mcp, scope), 0 },
  { "timeout", CK_POSITIVE, 0, NULL, OFF(pm_mcp, timeout), 0 },
  { "start_timeout", CK_POSITIVE, 0, NULL, OFF(pm_mcp, start_timeout), 0 },
  { "retries", CK_INT, 0, NULL, OFF(pm_mcp, retries), 0 },
  { NULL, CK_BOOL, 0, NULL, 0, 0 }
};

static int is_env_name(const char *s) {
  if (!(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z'))) return 0;
  for (; *s; s++)
    if (!(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9'))) return 0;
  return 1;
}

/* An RFC 9110 token. */
static int is_header_name(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || strchr("!#$%&'*+-.^_`|~", *s)))
      return 0;
  return 1;
}

/* A dotted name path (`a`, `input.a.b`) as a list of names, or 0 if the
   expression is anything else. */
static int name_path(pm_ctx *c, const ast_expr *e, pm_strings *out) {
  int n = 0;
  for (const ast_expr *x = e; x; x = x->kind == EX_FIELD ? x->a : NULL) {
    if (x->kind != EX_FIELD && x->kind != EX_NAME) return 0;
    n++;
  }
  out->items = ar_alloc(c->a, sizeof *out->items * (size_t)n);
  if (!out->items) return 0;
  out->n = n;
  for (const ast_expr *x = e; x; x = x->kind == EX_FIELD ? x->a : NULL) out->items[--n] = x->str.s;
  return 1;
}

/* Reads one configuration entry into the object at `obj`. */
static void read_entry(pm_ctx *c, const char *owner, const ck_key *k, const ast_config *e, void *obj) {
  char *slot = (char *)obj + k->offset;
  const ast_expr *v = e->value;
  const char *prefix = ar_printf(c->a, "%s: '%s'", owner, k->key);
  pm_num num;
  switch (k->kind) {
    case CK_BOOL:
      if (v->kind != EX_TRUE && v->kind != EX_FALSE) { ERR(c, v->pos, "%s must be true or false.", prefix); return; }
      *(int *)slot = v->kind == EX_TRUE;
      break;
    case CK_INT: case CK_POSITIVE:
      if (!pm_lit_number(v, &num) || !num.is_int) { ERR(c, v->pos, "%s must be an integer.", prefix); return; }
      if (k->kind == CK_POSITIVE && num.i <= 0) {
        ERR(c, v->pos, "%s %s must be greater than zero.", owner, k->key);
        return;
      }
      if (k->kind == CK_INT && num.i < k->min) { ERR(c, v->pos, "%s must be at least %lld.", prefix, k->min); return; }
      *(long long *)slot = num.i;
      break;
    case CK_NUMBER:
      if (!pm_lit_number(v, &num)) { ERR(c, v->pos, "%s must be a number.", prefix); return; }
      *(pm_num *)slot = num;
      break;
    case CK_STRING: case CK_ENVNAME:
      if (v->kind != EX_STRING) { ERR(c, v->pos, "%s must be a string.", prefix); return; }
      if (strlen(v->str.s) != v->str.len) { ERR(c, v->pos, "%s cannot contain a NUL character (\\u0000).", prefix); return; }
      if (k->kind == CK_ENVNAME && !is_env_name(v->str.s)) {
        ERR(c, v->pos, "%s must be an environment variable name.", prefix);
        return;
      }
      *(const char **)slot = v->str.s;
      break;
    case CK_KEYVAR:
      if (v->kind == EX_NULL) {
        *(int *)((char *)obj + k->flag) = 1;
        return;
      }
      if (v->kind != EX_STRING || strlen(v->str.s) != v->str.len || !is_env_name(v->str.s)) {
        ERR(c, v->pos, "%s must be an environment variable name, or null for no key.", prefix);
        return;
      }
      *(const char **)slot = v->str.s;
      return;
    case CK_HEADERS: {
      pm_headers *h = (pm_headers *)slot;
      if (v->kind != EX_OBJECT) { ERR(c, v->pos, "%s must be an object of header names and string values.", prefix); return; }
      size_t n = (size_t)(v->nprops ? v->nprops : 1);
      h->names = ar_alloc(c->a, sizeof *h->names * n);
      h->values = ar_alloc(c->a, sizeof *h->values * n);
      if (!h->names || !h->values) return;
      for (const ast_prop *pr = v->props; pr; pr = pr->next) {
        const ast_expr *x = pr->value;
        if (!is_header_name(pr->key)) {
          ERR(c, pr->pos, "%s: '%s' is not a header name (letters, digits and !#$%%&'*+-.^_`|~).", prefix, pr->key);
          continue;
        }
        if (x->kind != EX_STRING || strlen(x->str.s) != x->str.len || strpbrk(x->str.s, "\r\n")) {
          ERR(c, x->pos, "%s: the value of '%s' must be a string on one line.", prefix, pr->key);
          continue;
        }
        h->names[h->n] = pr->key;
        h->values[h->n++] = x->str.s;
      }
      break;
    }
    case CK_LOCATION: {
      pm_headers *h = (pm_headers *)slot;
      if (v->kind != EX_OBJECT) { ERR(c, v->pos, "%s must be an object of %s, as in { country: \"FR\" }.", prefix, pm_quoted(c->a, location_keys)); return; }
      size_t n = (size_t)(v->nprops ? v->nprops : 1);
      h->names = ar_alloc(c->a, sizeof *h->names * n);
      h->values = ar_alloc(c->a, sizeof *h->values * n);
      if (!h->names || !h->values) return;
      for (const ast_prop *pr = v->props; pr; pr = pr->next) {
        int known = 0;
        for (int i = 0; location_keys[i]; i++) known |= strcmp(pr->key, location_keys[i]) == 0;
        if (!known) {
          ERR(c, pr->pos, "%s has no field '%s': it takes %s.", prefix, pr->key, pm_quoted(c->a, location_keys));
          continue;
        }
        if (pr->value->kind != EX_STRING || strlen(pr->value->str.s) != pr->value->str.len) {
          ERR(c, pr->value->pos, "%s: '%s' must be a string.", prefix, pr->key);
          continue;
        }
        h->names[h->n] = pr->key;
        h->values[h->n++] = pr->value->str.s;
      }
      break;
    }
    case CK_CHOICE: {
      int found = -1, n = 0;
      for (; k->choices[n]; n++)
        if (v->kind == EX_STRING && strcmp(v->str.s, k->choices[n]) == 0) found = n;
      if (found < 0) {
        const char *list = pm_quoted(c->a, k->choices);
        const char *near = v->kind == EX_STRING ? dg_suggest(v->str.s, k->choices, n) : NULL;
        ERR(c, v->pos, "%s must be one of %s.%s", prefix, list, near ? ar_printf(c->a, " Did you mean \"%s\"?", near) : "");
        return;
      }
      *(int *)slot = found;
      break;
    }
    case CK_SCHEMA: case CK_MODEL: {
      int want = k->kind == CK_SCHEMA ? DC_SCHEMA : DC_MODEL;
      if (v->kind != EX_NAME) { ERR(c, v->pos, "%s must be the name of a declared %s.", prefix, pm_kind_word(want)); return; }
      ast_decl *d = pm_lookup(c, v->str.s);
      int ok = d && (d->kind == (dc_kind)want || (want == DC_SCHEMA && d->kind == DC_UNION));
      if (!ok) {
        ERR(c, v->pos, "%s names '%s', which is not a declared %s.%s", prefix, v->str.s, pm_kind_word(want),
            SUGGEST(c, v->str.s, want));
        return;
      }
      *(void **)slot = d->model;
      break;
    }
    case CK_TOOLS: {
      pm_toollist *list = (pm_toollist *)slot;
      /* the agent's provider tools, listed among its tools */
      pm_ptoollist *plist = &((pm_agent *)obj)->ptools;
      if (v->kind != EX_ARRAY) { ERR(c, v->pos, "%s must be a list of tool names, as in [a, b].", prefix); return; }
      /* srv.* may add every tool of the program once */
      list->items = ar_alloc(c->a, sizeof *list->items * (size_t)(v->nitems + c->p->ntools + 1));
      plist->items = ar_alloc(c->a, sizeof *plist->items * (size_t)(v->nitems ? v->nitems : 1));
      plist->pos = ar_alloc(c->a, sizeof *plist->pos * (size_t)(v->nitems ? v->nitems : 1));
      if (!list->items || !plist->items || !plist->pos) return;
      mp_map seen = { 0 };
      for (const ast_expr *i = v->items; i; i = i->next) {
        if (pm_mcp_tools_entry(c, owner, i, list, &seen)) continue;
        if (i->kind != EX_NAME) { ERR(c, i->pos, "%s must be a list of tool names, as in [a, b].", prefix); continue; }
        ast_decl *d = pm_lookup(c, i->str.s);
        if (d && d->kind == DC_PTOOL && d->model) {
          if (mp_get(&seen, i->str.s, strlen(i->str.s))) { ERR(c, i->pos, "%s lists tool '%s' twice.", owner, i->str.s); continue; }
          mp_put(c->a, &seen, i->str.s, strlen(i->str.s), d);
          plist->pos[plist->n] = i->pos;
          plist->items[plist->n++] = d->model;
          continue;
        }
        if (d && d->kind == DC_MCP) {
          ERR(c, i->pos, "%s lists mcp_server '%s': write %s.* for every tool it allows, or %s.NAME for one.", owner,
              i->str.s, i->str.s, i->str.s);
          continue;
        }
        if (!d || d->kind != DC_TOOL) {
          ERR(c, i->pos, "%s lists undeclared tool '%s'.%s", owner, i->str.s, SUGGEST(c, i->str.s, DC_TOOL));
          continue;
        }
        if (mp_get(&seen, i->str.s, strlen(i->str.s))) { ERR(c, i->pos, "%s lists tool '%s' twice.", owner, i->str.s); continue; }
        mp_put(c->a, &seen, i->str.s, strlen(i->str.s), d);
        list->items[list->n++] = d->model;
      }
      break;
    }
    case CK_STRINGS: {
      pm_strings *list = (pm_strings *)slot;
      if (v->kind != EX_ARRAY) { ERR(c, v->pos, "%s must be a list of strings.", prefix); return; }
      list->present = 1;
      list->items = ar_alloc(c->a, sizeof *list->items * (size_t)(v->nitems ? v->nitems : 1));
      if (!list->items) return;
      for (const ast_expr *i = v->items; i; i = i->next) {
        if (i->kind != EX_STRING) { ERR(c, i->pos, "%s must be a list of strings.", prefix); continue; }
        if (strlen(i->str.s) != i->str.len) { ERR(c, i->pos, "%s cannot contain a NUL character (\\u0000).", prefix); continue; }
        list->items[list->n++] = i->str.s;
      }
      break;
    }
    case CK_NAMES: {
      pm_strings *list = (pm_strings *)slot;
      if (v->kind != EX_ARRAY) { ERR(c, v->pos, "%s must be a list of tool names, as in [a, b].", prefix); return; }
      list->present = 1;
      list->items = ar_alloc(c->a, sizeof *list->items * (size_t)(v->nitems ? v->nitems : 1));
      if (!list->items) return;
      for (const ast_expr *i = v->items; i; i = i->next) {
        if (i->kind != EX_NAME) { ERR(c, i->pos, "%s must be a list of tool names, as in [a, b].", prefix); continue; }
        list->items[list->n++] = i->str.s;
      }
      break;
    }
    case CK_KEYPATH: {
      pm_strings *path = (pm_strings *)slot;
      if (!name_path(c, v, path)) {
        ERR(c, v->pos, "%s must name an input field, as in request_id or input.request_id.", prefix);
        return;
      }
      path->present = 1;
      if (path->n > 1 && strcmp(path->items[0], "input") == 0) { path->items++; path->n--; }
      break;
    }
  }
  if (k->flag) *(int *)((char *)obj + k->flag) = 1;
}

/* Reads a declaration's configuration entries against its key table. */
static void read_config(pm_ctx *c, const ast_decl *d, const ck_key *keys, void *obj, const char *owner) {
  const char *names[32];
  int nkeys = 0;
  for (; keys[nkeys].key; nkeys++) names[nkeys] = keys[nkeys].key;
  mp_map seen = { 0 };
  for (const ast_config *e = d->config; e; e = e->next) {
    if (e->needs_name) continue;
    const ast_config *prev = mp_get(&seen, e->key, strlen(e->key));
    if (prev) {
      ERR(c, e->pos, "%s sets '%s' twice (first at %d:%d).", owner, e->key, prev->pos.line, prev->pos.col);
      continue;
    }
    mp_put(c->a, &seen, e->key, strlen(e->key), (void *)e);
    const ck_key *k = NULL;
    for (int i = 0; i < nkeys; i++)
      if (strcmp(keys[i].key, e->key) == 0) k = &keys[i];
    if (!k) {
      const char *extra = (keys == tool_keys && strcmp(e->key, "needs") == 0) ? " Write it as: needs name: Schema" : "";
      ERR(c, e->pos, "%s has no option '%s'.%s%s", owner, e->key, pm_suggestion(c, e->key, names, nkeys), extra);
      continue;
    }
    read_entry(c, owner, k, e, obj);
  }
}

const char *pm_quoted(ar_arena *a, const char *const *names) {
  const char *s = "";
  for (int i = 0; names[i]; i++) s = ar_printf(a, "%s%s\"%s\"", s, i ? ", " : "", names[i]);
  return s;
}

const ast_config *pm_config_entry(const ast_decl *d, const char *key) {
  for (const ast_config *e = d->config; e; e = e->next)
    if (!e->needs_name && strcmp(e->key, key) == 0) return e;
  return NULL;
}
void pm_read_tool_config(pm_ctx *c, const ast_decl *d, pm_tool *t, const char *owner) {
  read_config(c, d, tool_keys, t, owner);
}

void pm_read_agent_config(pm_ctx *c, const ast_decl *d, pm_agent *a, const char *owner) {
  read_config(c, d, agent_keys, a, owner);
}

void pm_read_model_config(pm_ctx *c, const ast_decl *d, pm_model *m, const char *owner) {
  read_config(c, d, model_keys, m, owner);
}

void pm_read_ptool_config(pm_ctx *c, const ast_decl *d, pm_ptool *t, const char *owner) {
  read_config(c, d, ptool_keys, t, owner);
}

void pm_read_mcp_config(pm_ctx *c, const ast_decl *d, pm_mcp *m, const char *owner) {
  read_config(c, d, mcp_keys, m, owner);
}
