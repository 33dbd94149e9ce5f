/* The mcp_server declarations of the program model (program.h): their
   configuration checked, and the tools a started server listed made tools
   of the program. Their JSON Schemas become the program's own types, so the
   one validator checks a call's input (and, with an outputSchema, its
   result) and the provider declarations are written as a contract's are.
   What a server lists is data from outside the program: every size is
   bounded (LIM_MCP_*), names that cannot be offered to a model or that
   collide are refused, and a description is cut, never interpreted. */
#include "program.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common.h"
#include "json.h"
#include "luma_limits.h"
#include "programint.h"
#include "utf8.h"

/* The schema of one tool being made types: failures are reported once. */
typedef struct mc_ctx {
  pm_ctx *c;
  const pm_mcp *m;
  const char *tool;           /* the server's name of it */
  const char *which;          /* "inputSchema" or "outputSchema" */
  int output;                 /* records are open unless additionalProperties: false */
  int failed;
  int records;                /* nested records made, for their names */
} mc_ctx;

static void mc_fail(mc_ctx *x, const char *fmt, const char *a) {
  if (x->failed) return;
  x->failed = 1;
  char what[300];
  snprintf(what, sizeof what, fmt, a);
  ERR(x->c, x->m->pos, "mcp_server '%s': the %s of tool '%s' %s.", x->m->name, x->which, x->tool, what);
}

static int num_of(const jv *v, pm_num *out) {
  if (!v) return 0;
  if (v->type == JV_INT) { out->is_int = 1; out->i = v->i; out->d = (double)v->i; return 1; }
  if (v->type == JV_NUM) { out->is_int = 0; out->d = v->n; return 1; }
  return 0;
}

static int count_of(const jv *v, long long *out) {
  if (!v || v->type != JV_INT || v->i < 0) return 0;
  *out = v->i;
  return 1;
}

static pm_type *new_type(pm_ctx *c, pt_kind k) {
  pm_type *t = ar_alloc(c->a, sizeof *t);
  if (t) t->kind = k;
  return t;
}

/* A description as the model sees it: at most LIM_MCP_DESCRIPTION_BYTES,
   cut at a character boundary. */
static const char *description_of(ar_arena *a, const char *s, size_t len) {
  if (!s) return NULL;
  len = u8_cut(s, len, LIM_MCP_DESCRIPTION_BYTES);
  return ar_strndup(a, s, len);
}

static pm_type *type_of(mc_ctx *x, const jv *s, const char *display, int depth);

/* An object schema with properties as a record: its required fields are
   those `required` lists. */
static pm_schema *record_of(mc_ctx *x, const jv *s, const char *name, const char *display, int depth) {
  pm_ctx *c = x->c;
  pm_schema *r = pm_new_schema(c, name, display, x->m->decl->name_pos);
  if (!r) return NULL;
  r->internal = 1;
  const jv *props = jv_get(s, "properties"), *required = jv_get(s, "required");
  const jv *extra = jv_get(s, "additionalProperties");
  r->open = x->output && !(extra && extra->type == JV_BOOL && !extra->b);
  int n = props && props->type == JV_OBJ ? props->count : 0;
  r->fields = ar_alloc(c->a, sizeof *r->fields * (size_t)(n ? n : 1));
  if (!r->fields) return r;
  for (const jv *p = n ? props->first : NULL; p; p = p->next) {
    if (strlen(p->key) != p->keylen || p->keylen == 0) {
      mc_fail(x, "has a property name that is empty or holds a NUL character%s", "");
      continue;
    }
    pm_field *f = &r->fields[r->nfields];
    f->name = ar_strndup(c->a, p->key, p->keylen);
    f->len = p->keylen;
    f->pos = x->m->decl->name_pos;
    f->index = r->nfields;
    for (const jv *q = required && required->type == JV_ARR ? required->first : NULL; q; q = q->next)
      if (q->type == JV_STR && q->len == p->keylen && memcmp(q->s, p->key, q->len) == 0) f->required = 1;
    const jv *desc = p->type == JV_OBJ ? jv_get(p, "description") : NULL;
    if (desc && desc->type == JV_STR && strlen(desc->s) == desc->len) f->desc = description_of(c->a, desc->s, desc->len);
    f->type = type_of(x, p, ar_printf(c->a, "%s.%s", display, f->name), depth + 1);
    if (!f->type) return r;
    r->nfields++;
  }
  return r;
}

/* The type of a JSON Schema, as far as the program's types say it: what
   they cannot say (anyOf, formats, patterns, a union of types) is `any`
   here and left to the server, which validates its own input. */
static pm_type *type_of(mc_ctx *x, const jv *s, const char *display, int depth) {
  pm_ctx *c = x->c;
  if (depth > LIM_MCP_SCHEMA_DEPTH) {
    mc_fail(x, "nests deeper than %s levels (mcp_schema_depth)", ar_printf(c->a, "%d", LIM_MCP_SCHEMA_DEPTH));
    return new_type(c, PT_ANY);
  }
  if (!s || s->type != JV_OBJ) return new_type(c, PT_ANY);
  const jv *en = jv_get(s, "enum"), *cst = jv_get(s, "const");
  if ((en && en->type == JV_ARR && en->count > 0) || (cst && cst->type == JV_STR)) {
    int n = en && en->type == JV_ARR ? en->count : 1;
    ast_str *values = ar_alloc(c->a, sizeof *values * (size_t)n);
    if (!values) return NULL;
    int i = 0;
    for (const jv *v = en && en->type == JV_ARR ? en->first : cst; v && i < n; v = v->next, i++) {
      if (v->type != JV_STR) return new_type(c, PT_ANY);
      values[i].s = ar_strndup(c->a, v->s, v->len);
      values[i].len = v->len;
    }
    pm_type *t = new_type(c, PT_ENUM);
    if (t) { t->values = values; t->nvalues = n; }
    return t;
  }
  const jv *ty = jv_get(s, "type");
  const char *k = ty && ty->type == JV_STR ? ty->s : "";
  pm_type *t;
  if (strcmp(k, "string") == 0) {
    if (!(t = new_type(c, PT_STRING))) return NULL;
    if (count_of(jv_get(s, "minLength"), &t->minlen)) t->rules |= PR_MINLEN;
    if (count_of(jv_get(s, "maxLength"), &t->maxlen)) t->rules |= PR_MAXLEN;
  } else if (strcmp(k, "integer") == 0 || strcmp(k, "number") == 0) {
    if (!(t = new_type(c, k[0] == 'i' ? PT_INT : PT_FLOAT))) return NULL;
    if (num_of(jv_get(s, "minimum"), &t->min)) t->rules |= PR_MIN;
    if (num_of(jv_get(s, "maximum"), &t->max)) t->rules |= PR_MAX;
  } else if (strcmp(k, "boolean") == 0) {
    t = new_type(c, PT_BOOL);
  } else if (strcmp(k, "array") == 0) {
    if (!(t = new_type(c, PT_ARRAY))) return NULL;
    t->elem = type_of(x, jv_get(s, "items"), ar_printf(c->a, "%s[]", display), depth + 1);
    if (!t->elem) return NULL;
    if (count_of(jv_get(s, "minItems"), &t->minitems)) t->rules |= PR_MINITEMS;
    if (count_of(jv_get(s, "maxItems"), &t->maxitems)) t->rules |= PR_MAXITEMS;
  } else if (strcmp(k, "object") == 0 && jv_get(s, "properties")) {
    if (!(t = new_type(c, PT_SCHEMA))) return NULL;
    t->schema = record_of(x, s, ar_printf(c->a, "__mcp_%s__%s_%d", x->m->name, x->tool, ++x->records), display, depth);
    if (!t->schema) return NULL;
  } else {
    t = new_type(c, PT_ANY);
  }
  return t;
}

/* A tool's inputSchema or outputSchema (JSON text from the server) as a
   record of the program; NULL after a reported failure. */
static pm_schema *schema_of(mc_ctx *x, const char *text, size_t len, const char *name, const char *display) {
  pm_ctx *c = x->c;
  if (len > LIM_MCP_SCHEMA_BYTES) {
    mc_fail(x, "%s (mcp_schema_bytes)",
            ar_printf(c->a, "is %zu bytes; the limit is %d", len, LIM_MCP_SCHEMA_BYTES));
    return NULL;
  }
  char why[200];
  const jv *s = json_parse(c->a, text, len, LIM_MCP_SCHEMA_DEPTH * 4 + 8, why, sizeof why);
  if (!s) {
    mc_fail(x, "cannot be read: %s", why);
    return NULL;
  }
  const jv *ty = s->type == JV_OBJ ? jv_get(s, "type") : NULL;
  if (!ty || ty->type != JV_STR || strcmp(ty->s, "object") != 0) {
    mc_fail(x, "must be an object schema (type \"object\")%s", "");
    return NULL;
  }
  pm_schema *r = record_of(x, s, name, display, 0);
  return x->failed ? NULL : r;
}

/* The result of a tool without an outputSchema: its content blocks. */
static pm_schema *content_schema(pm_ctx *c, const pm_mcp *m) {
  static const char name[] = "__mcp_content";
  pm_schema *r = pm_find_schema(c->p, name);
  if (r) return r;
  r = pm_new_schema(c, name, "mcp.output", m->decl->name_pos);
  if (!r) return NULL;
  r->internal = 1;
  r->open = 1;
  r->fields = ar_alloc(c->a, sizeof *r->fields);
  pm_type *items = new_type(c, PT_ARRAY);
  if (!r->fields || !items || !(items->elem = new_type(c, PT_ANY))) return NULL;
  r->fields[0].name = "content";
  r->fields[0].len = 7;
  r->fields[0].required = 1;
  r->fields[0].type = items;
  r->nfields = 1;
  return r;
}

/* MCP allows 1-128 of A-Z a-z 0-9 _ - . in a name; the program's name of
   the tool must also be one a model accepts (adapters' one rule). */
static const char *bad_name(const char *name, const char *full) {
  size_t n = strlen(name);
  if (n == 0 || n > 128) return "is not 1 to 128 characters long";
  if (!ad_valid_tool_name(full)) return "makes a tool name a model does not accept (^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$)";
  return NULL;
}

static const pm_mcp_listing *listing_of(pm_ctx *c, const char *server) {
  for (int i = 0; i < c->nlistings; i++)
    if (strcmp(c->listings[i].server, server) == 0) return &c->listings[i];
  return NULL;
}

static int allowed(const pm_mcp *m, const char *name) {
  if (!m->tools.present) return 1;
  for (int i = 0; i < m->tools.n; i++)
    if (strcmp(m->tools.items[i], name) == 0) return 1;
  return 0;
}

static void add_tool(pm_ctx *c, pm_mcp *m, const pm_mcp_tool *lt) {
  const char *full = ar_printf(c->a, "%s__%s", m->name, lt->name);
  const char *why = bad_name(lt->name, full);
  if (why) {
    ERR(c, m->pos, "mcp_server '%s': tool '%.128s' %s; leave it out of the server's tools: [...].", m->name, lt->name, why);
    return;
  }
  ast_decl *same = pm_lookup(c, full);
  if (same) {
    ERR(c, m->pos, "mcp_server '%s': tool '%s' would be the program's tool '%s', which is declared at %d:%d.", m->name,
        lt->name, full, same->name_pos.line, same->name_pos.col);
    return;
  }
  if (pm_find_tool(c->p, full)) {
    ERR(c, m->pos, "mcp_server '%s': tool '%s' would be the program's tool '%s', which another server's tool already is.",
        m->name, lt->name, full);
    return;
  }
  pm_tool *t = pm_new_tool(c, full, m->decl->name_pos, m->decl);
  if (!t) return;
  t->mcp = m;
  t->mcp_tool = ar_strdup(c->a, lt->name);
  t->handler = HANDLER_HOST;
  t->side_effects = m->side_effects;
  t->scope = m->scope;
  t->timeout = m->timeout;
  t->retries = m->retries;
  t->description = description_of(c->a, lt->description, lt->description ? strlen(lt->description) : 0);
  t->output_root = ar_printf(c->a, "%s.output", full);
  mc_ctx x = { c, m, t->mcp_tool, "inputSchema", 0, 0, 0 };
  t->input = schema_of(&x, lt->input, lt->input_len, ar_printf(c->a, "__tool_%s_input", full),
                       ar_printf(c->a, "%s.input", full));
  if (!t->input) {
    /* a tool that fails its checks keeps a record, so that nothing after it reads NULL */
    t->input = pm_new_schema(c, ar_printf(c->a, "__tool_%s_input", full), ar_printf(c->a, "%s.input", full), m->pos);
    if (t->input) t->input->internal = 1;
  }
  if (lt->output) {
    mc_ctx y = { c, m, t->mcp_tool, "outputSchema", 1, 0, 0 };
    t->output = schema_of(&y, lt->output, lt->output_len, ar_printf(c->a, "__tool_%s_output", full),
                          ar_printf(c->a, "%s.output", full));
  }
  if (!t->output) t->output = content_schema(c, m);
}

void pm_build_mcp_server(pm_ctx *c, ast_decl *d) {
  pm_mcp *m = d->model;
  const char *owner = ar_printf(c->a, "mcp_server '%s'", d->name);
  pm_read_mcp_config(c, d, m, owner);
  if (strstr(d->name, "__")) {
    ERR(c, d->name_pos, "%s: a server's name cannot hold '__', which joins it to its tools' names.", owner);
    return;
  }
  if (!m->command && !m->url) {
    ERR(c, d->name_pos, "%s must set command (a program to start, spoken to over stdio) or url (Streamable HTTP).", owner);
    return;
  }
  if (m->command && m->url) { ERR(c, d->name_pos, "%s sets both command and url; it is one or the other.", owner); return; }
  if (m->args.present && !m->command) ERR(c, pm_config_entry(d, "args")->pos, "%s: args go with command.", owner);
  if (m->token && !m->url) ERR(c, pm_config_entry(d, "token")->pos, "%s: token is the bearer token of a url server.", owner);
  if (m->headers.n && !m->url) ERR(c, pm_config_entry(d, "headers")->pos, "%s: headers go with url.", owner);
  for (int i = 0; i < m->headers.n; i++) {
    /* the protocol's own headers are the client's to set */
    static const char *const own[] = { "content-type", "accept", "mcp-session-id", "mcp-protocol-version", "mcp-method",
                                       "mcp-name", "content-length", "host", NULL };
    const char *name = m->headers.names[i];
    int taken = strncasecmp(name, "mcp-param-", 10) == 0 || (m->token && strcasecmp(name, "authorization") == 0);
    for (int k = 0; own[k] && !taken; k++) taken = strcasecmp(name, own[k]) == 0;
    if (taken)
      ERR(c, pm_config_entry(d, "headers")->value->pos, "%s: the header '%s' is set by the client%s.", owner, name,
          strcasecmp(name, "authorization") == 0 ? " from token" : "");
  }
  if (m->url && strncmp(m->url, "http://", 7) != 0 && strncmp(m->url, "https://", 8) != 0)
    ERR(c, pm_config_entry(d, "url")->value->pos, "%s: url must start with http:// or https://.", owner);
  if (m->side_effects == SE_WRITE && m->retries > 0)
    ERR(c, pm_config_entry(d, "retries")->pos,
        "%s: its tools write (side_effects), and a write tool is retried only when idempotent; say side_effects: \"read\" or drop retries.",
        owner);
  const pm_mcp_listing *l = listing_of(c, d->name);
  if (!l) return;
  m->listed = 1;
  if (l->ntools > LIM_MCP_SERVER_TOOLS) {
    ERR(c, m->pos, "%s lists %d tools; the limit is %d (mcp_server_tools): name the ones to use in tools: [...].", owner,
        l->ntools, LIM_MCP_SERVER_TOOLS);
    return;
  }
  for (int i = 0; i < m->tools.n; i++) {
    int found = 0;
    for (int j = 0; j < l->ntools && !found; j++) found = strcmp(l->tools[j].name, m->tools.items[i]) == 0;
    if (!found) ERR(c, pm_config_entry(d, "tools")->value->pos, "%s allows tool '%s', which the server does not list.", owner,
                    m->tools.items[i]);
  }
  mp_map seen = { 0 };
  for (int j = 0; j < l->ntools; j++) {
    const pm_mcp_tool *lt = &l->tools[j];
    if (!allowed(m, lt->name)) continue;
    if (mp_get(&seen, lt->name, strlen(lt->name))) {
      ERR(c, m->pos, "%s lists tool '%.128s' twice.", owner, lt->name);
      continue;
    }
    mp_put(c->a, &seen, lt->name, strlen(lt->name), (void *)lt);
    add_tool(c, m, lt);
  }
}

int pm_mcp_tools_entry(pm_ctx *c, const char *owner, const ast_expr *e, pm_toollist *list, mp_map *seen) {
  const char *server, *name;
  if (e->kind == EX_FIELD && e->a && e->a->kind == EX_NAME) {
    server = e->a->str.s;
    name = e->str.s;
  } else if (e->kind == EX_STRING && strlen(e->str.s) == e->str.len && strchr(e->str.s, '.')) {
    const char *dot = strchr(e->str.s, '.');
    server = ar_strndup(c->a, e->str.s, (size_t)(dot - e->str.s));
    name = dot + 1;
  } else {
    return 0;
  }
  ast_decl *d = pm_lookup(c, server);
  if (!d || d->kind != DC_MCP || !d->model) {
    ERR(c, e->pos, "%s lists '%s.%s', but '%s' is not a declared mcp_server.%s", owner, server, name, server,
        SUGGEST(c, server, DC_MCP));
    return 1;
  }
  const pm_mcp *m = d->model;
  if (!m->listed) {
    ERR(c, e->pos, "%s lists '%s.%s', but the tools of mcp_server '%s' are not known: it was not started (luma.load starts it).",
        owner, server, name, server);
    return 1;
  }
  int all = strcmp(name, "*") == 0, found = 0;
  for (int i = 0; i < c->p->ntools; i++) {
    pm_tool *t = c->p->tools[i];
    if (t->mcp != m || (!all && strcmp(t->mcp_tool, name) != 0)) continue;
    found++;
    if (mp_get(seen, t->name, strlen(t->name))) {
      if (!all) ERR(c, e->pos, "%s lists tool '%s.%s' twice.", owner, server, name);
      continue;
    }
    mp_put(c->a, seen, t->name, strlen(t->name), t);
    list->items[list->n++] = t;
  }
  if (!found && !all) ERR(c, e->pos, "%s lists '%s.%s', a tool mcp_server '%s' does not offer.", owner, server, name, server);
  return 1;
}
