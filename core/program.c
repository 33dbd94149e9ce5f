#include "program.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "luma_limits.h"
#include "map.h"
#include "parse.h"
#include "programint.h"
#include "regex.h"

/* -------------------------------------------------------------- context */

ast_decl *pm_lookup(pm_ctx *c, const char *name) { return mp_get(&c->decls, name, strlen(name)); }

void pm_rule(pm_ctx *c, ast_pos pos, le_msg m, const char *a, const char *b) {
  char msg[512];
  le_format_msg(msg, sizeof msg, m, a, b);
  ERR(c, pos, "%s", msg);
}

static const char *const builtin_types[] = { "string", "int", "float", "bool", "any" };

const char *pm_kind_word(dc_kind k) {
  switch (k) {
    case DC_SCHEMA: case DC_UNION: return "schema";
    case DC_TOOL: return "tool";
    case DC_AGENT: return "agent";
    case DC_PTOOL: return "provider_tool";
    case DC_MCP: return "mcp_server";
    default: return "model";
  }
}

const char *pm_suggestion(pm_ctx *c, const char *word, const char *const *names, int n) {
  if (c->d->count >= c->d->max) return "";   /* the message will not be kept */
  const char *s = dg_suggest(word, names, n < LIM_SUGGEST_CANDIDATES ? n : LIM_SUGGEST_CANDIDATES);
  return s ? ar_printf(c->a, " Did you mean '%s'?", s) : "";
}

/* Collects the declared names of each kind once; unions count as schemas, and
   the types list adds the built-in type names. */
static void collect_names(pm_ctx *c) {
  int count = 0;
  for (ast_decl *d = c->p->ast->decls; d; d = d->next) count++;
  size_t nb = sizeof builtin_types / sizeof builtin_types[0];
  for (int k = 0; k <= NAMES_TYPES; k++) {
    c->names[k] = ar_alloc(c->a, sizeof(char *) * ((size_t)count + nb + 1));
    if (!c->names[k]) return;
  }
  for (size_t i = 0; i < nb; i++) c->names[NAMES_TYPES][c->nnames[NAMES_TYPES]++] = builtin_types[i];
  for (ast_decl *d = c->p->ast->decls; d; d = d->next) {
    if (pm_lookup(c, d->name) != d) continue;
    int k = d->kind == DC_UNION ? DC_SCHEMA : (int)d->kind;
    c->names[k][c->nnames[k]++] = d->name;
    if (k == DC_SCHEMA) c->names[NAMES_TYPES][c->nnames[NAMES_TYPES]++] = d->name;
  }
}


/* The names other languages give luma's built-in types. */
static const char *type_suggestion(pm_ctx *c, const char *word) {
  static const char *const aliases[][2] = {
    { "integer", "int" }, { "long", "int" }, { "boolean", "bool" }, { "number", "float" }, { "double", "float" },
    { "str", "string" }, { "text", "string" }, { "object", "any" }, { "dict", "any" }, { NULL, NULL }
  };
  if (c->d->count >= c->d->max) return "";
  for (int i = 0; aliases[i][0]; i++)
    if (strcmp(word, aliases[i][0]) == 0 && !pm_lookup(c, word)) return ar_printf(c->a, " Did you mean '%s'?", aliases[i][1]);
  return SUGGEST(c, word, NAMES_TYPES);
}


/* --------------------------------------------------------------- literals */

int pm_lit_number(const ast_expr *e, pm_num *out) {
  int neg = 0;
  while (e && e->kind == EX_UNARY && e->op == OP_NEG) { neg = !neg; e = e->a; }
  if (!e) return 0;
  if (e->kind == EX_INT) {
    if (neg && e->ival == LLONG_MIN) return 0;
    out->is_int = 1;
    out->i = neg ? -e->ival : e->ival;
    out->d = (double)out->i;
    return 1;
  }
  if (e->kind == EX_FLOAT) {
    out->is_int = 0;
    out->d = neg ? -e->fval : e->fval;
    out->i = 0;
    return 1;
  }
  return 0;
}

static int is_literal(const ast_expr *e, int depth) {
  if (!e || depth > LIM_MODEL_DEPTH) return 0;
  pm_num n;
  switch (e->kind) {
    case EX_NULL: case EX_TRUE: case EX_FALSE: case EX_INT: case EX_FLOAT: case EX_STRING:
      return 1;
    case EX_UNARY:
      return pm_lit_number(e, &n);
    case EX_ARRAY:
      for (const ast_expr *i = e->items; i; i = i->next)
        if (!is_literal(i, depth + 1)) return 0;
      return 1;
    case EX_OBJECT:
      for (const ast_prop *q = e->props; q; q = q->next)
        if (!is_literal(q->value, depth + 1)) return 0;
      return 1;
    default:
      return 0;
  }
}

const char *pm_type_text(pm_ctx *c, const ast_type *t) {
  if (!t) return "?";
  switch (t->kind) {
    case TY_STRING: return "string";
    case TY_INT: return "int";
    case TY_FLOAT: return "float";
    case TY_BOOL: return "bool";
    case TY_ANY: return "any";
    case TY_ENUM: return "enum[...]";
    case TY_NAME: return t->name;
    case TY_ARRAY: return ar_printf(c->a, "%s[]", pm_type_text(c, t->elem));
    default: return "an inline type";
  }
}

/* ------------------------------------------------------------------ types */

pm_type *pm_resolve_type(pm_ctx *c, const ast_type *t, int depth) {
  if (!t || depth > LIM_MODEL_DEPTH) return NULL;
  pm_type *pt = ar_alloc(c->a, sizeof *pt);
  if (!pt) return NULL;
  switch (t->kind) {
    case TY_STRING: pt->kind = PT_STRING; break;
    case TY_INT: pt->kind = PT_INT; break;
    case TY_FLOAT: pt->kind = PT_FLOAT; break;
    case TY_BOOL: pt->kind = PT_BOOL; break;
    case TY_ANY: pt->kind = PT_ANY; break;
    case TY_ENUM: {
      pt->kind = PT_ENUM;
      pt->values = t->values;
      pt->nvalues = t->nvalues;
      mp_map seen = { 0 };
      for (int i = 0; i < t->nvalues; i++) {
        if (mp_get(&seen, t->values[i].s, t->values[i].len)) {
          ERR(c, t->pos, "enum value \"%s\" is listed twice", t->values[i].s);
          break;
        }
        mp_put(c->a, &seen, t->values[i].s, t->values[i].len, (void *)&t->values[i]);
      }
      break;
    }
    case TY_ARRAY:
      pt->kind = PT_ARRAY;
      pt->elem = pm_resolve_type(c, t->elem, depth + 1);
      if (!pt->elem) return NULL;
      break;
    case TY_INLINE:
      ERR(c, t->pos, "inline record types are not supported; declare a schema and use its name");
      return NULL;
    case TY_NAME: {
      ast_decl *d = pm_lookup(c, t->name);
      if (!d) {
        ERR(c, t->pos, "Unknown type '%s'.%s", t->name, type_suggestion(c, t->name));
        return NULL;
      }
      if (d->kind != DC_SCHEMA && d->kind != DC_UNION) {
        ERR(c, t->pos, "'%s' is a %s, not a schema.", t->name, pm_kind_word(d->kind));
        return NULL;
      }
      pt->kind = PT_SCHEMA;
      pt->schema = d->model;
      if (!pt->schema) return NULL;
      break;
    }
  }
  return pt;
}

/* ------------------------------------------------------------ annotations */

static const char *const annotation_names[] = {
  "desc", "range", "length", "items", "pattern", "default", "severity"
};

/* The names JSON Schema and other languages give luma's annotations. */
static const char *annotation_alias(const char *word) {
  static const char *const aliases[][2] = {
    { "minLength", "length" }, { "maxLength", "length" }, { "min_length", "length" }, { "max_length", "length" },
    { "minimum", "range" }, { "maximum", "range" }, { "exclusiveMinimum", "range" }, { "exclusiveMaximum", "range" },
    { "min", "range" }, { "max", "range" }, { "minItems", "items" }, { "maxItems", "items" },
    { "min_items", "items" }, { "max_items", "items" }, { "description", "desc" }, { "doc", "desc" },
    { "regex", "pattern" }, { NULL, NULL }
  };
  for (int i = 0; aliases[i][0]; i++)
    if (strcmp(word, aliases[i][0]) == 0) return aliases[i][1];
  return NULL;
}

static int leaf_is(const pm_type *t, pt_kind a, pt_kind b) { return t->kind == a || t->kind == b; }

/* Reads an optional bound: a number, or null for an open side. */
static int bound_arg(const ast_expr *e, pm_num *out, int *present) {
  if (e->kind == EX_NULL) { *present = 0; return 1; }
  *present = 1;
  return pm_lit_number(e, out);
}

static double num_d(pm_num n) { return n.is_int ? (double)n.i : n.d; }

static int num_less(pm_num a, pm_num b) {
  if (a.is_int && b.is_int) return a.i < b.i;
  return num_d(a) < num_d(b);
}

/* (min, max) of non-negative integers or null, for @length and @items */
static int count_bounds(pm_ctx *c, const ast_annot *an, long long *lo, long long *hi, unsigned *rules,
                        unsigned rmin, unsigned rmax) {
  const char *usage = ar_printf(c->a, "@%s takes (min, max) as whole numbers; write null for an open side", an->name);
  if (an->nargs != 2) { ERR(c, an->pos, "%s", usage); return 0; }
  pm_num v[2];
  int present[2];
  const ast_expr *e = an->args;
  for (int i = 0; i < 2; i++, e = e->next) {
    if (!bound_arg(e, &v[i], &present[i]) || (present[i] && !v[i].is_int)) {
      ERR(c, e->pos, "%s", usage);
      return 0;
    }
    if (present[i] && v[i].i < 0) {
      ERR(c, e->pos, "@%s %s must be non-negative (a count), not %lld", an->name, i ? "maximum" : "minimum", v[i].i);
      return 0;
    }
  }
  if (present[0]) { *lo = v[0].i; *rules |= rmin; }
  if (present[1]) { *hi = v[1].i; *rules |= rmax; }
  if (present[0] && present[1] && v[1].i < v[0].i) {
    ERR(c, an->pos, "@%s minimum %lld is greater than its maximum %lld", an->name, v[0].i, v[1].i);
    return 0;
  }
  return 1;
}

static void apply_annotations(pm_ctx *c, pm_field *f, const ast_field *af) {
  pm_type *leaf = f->type;
  while (leaf->kind == PT_ARRAY) leaf = leaf->elem;
  unsigned seen = 0;
  int soft = 0;
  for (const ast_annot *an = af->annots; an; an = an->next) {
    int which = -1;
    for (int i = 0; i < (int)(sizeof annotation_names / sizeof annotation_names[0]); i++)
      if (strcmp(an->name, annotation_names[i]) == 0) which = i;
    if (which < 0) {
      const char *s = annotation_alias(an->name);
      if (!s) s = dg_suggest(an->name, annotation_names, sizeof annotation_names / sizeof annotation_names[0]);
      ERR(c, an->pos, "Unknown annotation '@%s'.%s", an->name, s ? ar_printf(c->a, " Did you mean '@%s'?", s) : "");
      continue;
    }
    if (seen & (1u << which)) { ERR(c, an->pos, "@%s is given twice", an->name); continue; }
    seen |= 1u << which;
    const ast_expr *arg = an->args;
    switch (which) {
      case 0: /* desc */
        if (an->nargs != 1 || arg->kind != EX_STRING) { ERR(c, an->pos, "@desc takes one string"); break; }
        if (strlen(arg->str.s) != arg->str.len) { ERR(c, arg->pos, "@desc cannot contain a NUL character (\\u0000)"); break; }
        f->desc = arg->str.s;
        break;
      case 1: { /* range */
        if (!leaf_is(leaf, PT_INT, PT_FLOAT)) {
          ERR(c, an->pos, "@range applies to int or float fields");
          break;
        }
        pm_num v[2];
        int present[2], ok = an->nargs == 2;
        const ast_expr *e = arg;
        for (int i = 0; ok && i < 2; i++, e = e->next) ok = bound_arg(e, &v[i], &present[i]);
        if (!ok) { ERR(c, an->pos, "@range takes (min, max) as numbers; write null for an open side"); break; }
        if (present[0]) { leaf->min = v[0]; leaf->rules |= PR_MIN; }
        if (present[1]) { leaf->max = v[1]; leaf->rules |= PR_MAX; }
        if (present[0] && present[1] && num_less(v[1], v[0]))
          ERR(c, an->pos, "@range minimum is greater than its maximum");
        break;
      }
      case 2: /* length */
        if (leaf->kind != PT_STRING) { ERR(c, an->pos, "@length applies to string fields"); break; }
        count_bounds(c, an, &leaf->minlen, &leaf->maxlen, &leaf->rules, PR_MINLEN, PR_MAXLEN);
        break;
      case 3: /* items */
        if (f->type->kind != PT_ARRAY) { ERR(c, an->pos, "@items applies to array fields"); break; }
        count_bounds(c, an, &f->type->minitems, &f->type->maxitems, &f->type->rules, PR_MINITEMS, PR_MAXITEMS);
        break;
      case 4: { /* pattern */
        if (leaf->kind != PT_STRING) { ERR(c, an->pos, "@pattern applies to string fields"); break; }
        if (an->nargs != 1 || arg->kind != EX_STRING) { ERR(c, an->pos, "@pattern takes one string"); break; }
        char why[160];
        struct lre *re = lre_compile(arg->str.s, arg->str.len, why, sizeof why);
        if (!re) { ERR(c, arg->pos, "invalid @pattern: %s", why); break; }
        pm_program *p = c->p;
        if (p->nregexes == p->regexes_cap) {
          int cap = p->regexes_cap ? p->regexes_cap * 2 : 8;
          struct lre **items = realloc(p->regexes, sizeof *items * (size_t)cap);
          if (!items) { lre_free(re); break; }
          p->regexes = items;
          p->regexes_cap = cap;
        }
        p->regexes[p->nregexes++] = re;
        leaf->re = re;
        leaf->pattern = arg->str.s;
        leaf->pattern_len = arg->str.len;
        leaf->rules |= PR_PATTERN;
        break;
      }
      case 5: /* default */
        if (an->nargs != 1 || !is_literal(arg, 0)) {
          ERR(c, an->pos, "@default takes one literal value");
          break;
        }
        f->default_value = arg;
        f->required = 0;
        break;
      case 6: /* severity */
        if (an->nargs != 1 || arg->kind != EX_STRING ||
            (strcmp(arg->str.s, "soft") != 0 && strcmp(arg->str.s, "hard") != 0)) {
          ERR(c, an->pos, "@severity takes \"soft\" or \"hard\"");
          break;
        }
        soft = strcmp(arg->str.s, "soft") == 0;
        break;
    }
  }
  if (soft)
    for (pm_type *t = f->type; t; t = t->kind == PT_ARRAY ? t->elem : NULL) t->soft = 1;
}

/* Builds the fields of a record (schema fields, tool or method parameters). */
static pm_field *build_fields(pm_ctx *c, const ast_field *first, int *n, const char *owner) {
  int count = 0;
  for (const ast_field *f = first; f; f = f->next) count++;
  pm_field *fields = ar_alloc(c->a, sizeof *fields * (size_t)(count ? count : 1));
  *n = 0;
  if (!fields) return NULL;
  mp_map seen = { 0 };
  for (const ast_field *af = first; af; af = af->next) {
    if (mp_get(&seen, af->name, strlen(af->name))) {
      ERR(c, af->pos, "%s has two fields named '%s'", owner, af->name);
      continue;
    }
    mp_put(c->a, &seen, af->name, strlen(af->name), (void *)af);
    pm_field *f = &fields[*n];
    f->name = af->name;
    f->len = strlen(af->name);
    f->pos = af->pos;
    f->required = !af->optional;
    f->index = *n;
    f->type = pm_resolve_type(c, af->type, 0);
    if (!f->type) continue;
    apply_annotations(c, f, af);
    (*n)++;
  }
  return fields;
}

/* ----------------------------------------------------------- declarations */

static int add_ptr(ar_arena *a, void ***arr, int *n, void *item) {
  if ((*n & (*n - 1)) == 0) { /* grow at powers of two */
    int cap = *n ? *n * 2 : 4;
    void **more = ar_alloc(a, sizeof *more * (size_t)cap);
    if (!more) return 0;
    if (*n) memcpy(more, *arr, sizeof *more * (size_t)*n);
    *arr = more;
  }
  (*arr)[(*n)++] = item;
  return 1;
}

pm_schema *pm_new_schema(pm_ctx *c, const char *name, const char *display, ast_pos pos) {
  pm_schema *s = ar_alloc(c->a, sizeof *s);
  if (!s) return NULL;
  s->name = name;
  s->display = display;
  s->pos = pos;
  s->index = c->p->nschemas;
  add_ptr(c->a, (void ***)&c->p->schemas, &c->p->nschemas, s);
  return s;
}

static int is_builtin_type(const char *name) {
  for (size_t i = 0; i < sizeof builtin_types / sizeof builtin_types[0]; i++)
    if (strcmp(name, builtin_types[i]) == 0) return 1;
  return strcmp(name, "enum") == 0;
}

pm_tool *pm_new_tool(pm_ctx *c, const char *name, ast_pos pos, const ast_decl *d) {
  pm_tool *t = ar_alloc(c->a, sizeof *t);
  if (!t) return NULL;
  t->name = name;
  t->pos = pos;
  t->decl = d;
  t->timeout = -1;
  t->retry_delay = 100;
  t->idempotency_ttl_ms = 300000;
  t->index = c->p->ntools;
  if (!add_ptr(c->a, (void ***)&c->p->tools, &c->p->ntools, t)) return NULL;
  return t;
}

/* First pass: every declaration gets its model object and its name. */
static void declare(pm_ctx *c) {
  pm_program *p = c->p;
  for (ast_decl *d = p->ast->decls; d; d = d->next) {
    ast_decl *prev = pm_lookup(c, d->name);
    if (prev) {
      ERR(c, d->name_pos, "'%s' is already declared at %d:%d", d->name, prev->name_pos.line, prev->name_pos.col);
      continue;
    }
    if (strncmp(d->name, "__", 2) == 0) {
      ERR(c, d->name_pos, "names starting with '__' are reserved: '%s'", d->name);
      continue;
    }
    if ((d->kind == DC_SCHEMA || d->kind == DC_UNION) && is_builtin_type(d->name)) {
      ERR(c, d->name_pos, "'%s' is a built-in type and cannot name a schema", d->name);
      continue;
    }
    if (!mp_put(c->a, &c->decls, d->name, strlen(d->name), d)) return;
    switch (d->kind) {
      case DC_SCHEMA: case DC_UNION: {
        pm_schema *s = pm_new_schema(c, d->name, d->name, d->name_pos);
        if (s) s->is_union = d->kind == DC_UNION;
        d->model = s;
        break;
      }
      case DC_TOOL: {
        pm_tool *t = pm_new_tool(c, d->name, d->name_pos, d);
        if (!t) return;
        d->model = t;
        break;
      }
      case DC_MCP: {
        pm_mcp *m = ar_alloc(c->a, sizeof *m);
        if (!m) return;
        m->name = d->name;
        m->pos = d->pos;
        m->decl = d;
        m->side_effects = SE_WRITE;
        m->timeout = m->start_timeout = -1;
        m->index = p->nmcps;
        add_ptr(c->a, (void ***)&p->mcps, &p->nmcps, m);
        d->model = m;
        break;
      }
      case DC_AGENT: {
        pm_agent *ag = ar_alloc(c->a, sizeof *ag);
        if (!ag) return;
        ag->name = d->name;
        ag->pos = d->name_pos;
        ag->decl = d;
        ag->tool_rate_limit = ag->tool_failure_limit = -1;
        ag->tool_timeout = ag->tool_timeout_max = ag->retries = ag->tool_result_max_bytes = -1;
        ag->tool_concurrency = 1;
        ag->index = p->nagents;
        add_ptr(c->a, (void ***)&p->agents, &p->nagents, ag);
        d->model = ag;
        break;
      }
      case DC_MODEL: {
        pm_model *m = ar_alloc(c->a, sizeof *m);
        if (!m) return;
        m->name = d->name;
        m->pos = d->name_pos;
        m->max_tokens = m->timeout = m->retries = -1;
        m->stream = 1;
        m->index = p->nmodels;
        add_ptr(c->a, (void ***)&p->models, &p->nmodels, m);
        d->model = m;
        break;
      }
      case DC_PTOOL: {
        pm_ptool *t = ar_alloc(c->a, sizeof *t);
        if (!t) return;
        t->name = d->name;
        t->pos = d->name_pos;
        t->max_uses = -1;
        t->index = p->nptools;
        add_ptr(c->a, (void ***)&p->ptools, &p->nptools, t);
        d->model = t;
        break;
      }
    }
  }
}

static void build_schemas(pm_ctx *c) {
  for (ast_decl *d = c->p->ast->decls; d; d = d->next) {
    pm_schema *s = d->model;
    if (!s || pm_lookup(c, d->name) != d) continue;
    if (d->kind == DC_SCHEMA) {
      s->fields = build_fields(c, d->fields, &s->nfields, ar_printf(c->a, "Schema '%s'", d->name));
    } else if (d->kind == DC_UNION) {
      int count = 0;
      for (ast_name *m = d->members; m; m = m->next) count++;
      s->members = ar_alloc(c->a, sizeof *s->members * (size_t)(count ? count : 1));
      s->tag = d->tag;
      if (!s->members) return;
      mp_map seen = { 0 };
      for (ast_name *m = d->members; m; m = m->next) {
        ast_decl *md = pm_lookup(c, m->name);
        if (!md && is_builtin_type(m->name)) {
          ERR(c, m->pos, "Union '%s' member '%s' must be a record schema.", d->name, m->name);
          continue;
        }
        if (!md) {
          ERR(c, m->pos, "Unknown type '%s'.%s", m->name, type_suggestion(c, m->name));
          continue;
        }
        if (md->kind != DC_SCHEMA) {
          ERR(c, m->pos, "Union '%s' member '%s' must be a record schema.", d->name, m->name);
          continue;
        }
        if (mp_get(&seen, m->name, strlen(m->name))) { ERR(c, m->pos, "Union '%s' lists '%s' twice.", d->name, m->name); continue; }
        mp_put(c->a, &seen, m->name, strlen(m->name), md);
        s->members[s->nmembers++] = md->model;
      }
    }
  }
  /* the tag cannot collide with a member's own field */
  for (ast_decl *d = c->p->ast->decls; d; d = d->next) {
    pm_schema *s = d->model;
    if (d->kind != DC_UNION || !s || !s->tag) continue;
    for (int i = 0; i < s->nmembers; i++)
      for (int j = 0; j < s->members[i]->nfields; j++)
        if (strcmp(s->members[i]->fields[j].name, s->tag) == 0)
          ERR(c, d->tag_pos, "Schema '%s' already has a field '%s', the tag of union '%s'.",
              s->members[i]->name, s->tag, d->name);
  }
}


/* ------------------------------------------------------------------ tools */

static int scalar_type(const pm_type *t) {
  return t->kind == PT_STRING || t->kind == PT_INT || t->kind == PT_FLOAT || t->kind == PT_BOOL || t->kind == PT_ENUM;
}

static void check_idempotency_key(pm_ctx *c, pm_tool *t) {
  const ast_config *e = pm_config_entry(t->decl, "idempotency_key");
  pm_schema *s = t->input;
  const pm_field *f = NULL;
  const char *shown = ar_printf(c->a, "%s", t->idempotency_key.items[0]);
  for (int i = 0; i < t->idempotency_key.n; i++) {
    if (i) shown = ar_printf(c->a, "%s.%s", shown, t->idempotency_key.items[i]);
    f = NULL;
    if (s && !s->is_union)
      for (int j = 0; j < s->nfields; j++)
        if (strcmp(s->fields[j].name, t->idempotency_key.items[i]) == 0) f = &s->fields[j];
    if (!f) {
      ERR(c, e->value->pos, "Tool '%s' idempotency_key '%s' is not an input field.", t->name, shown);
      return;
    }
    if (f->required == 0 && !f->default_value) {
      ERR(c, e->value->pos, "Tool '%s' idempotency_key '%s' must be a required input field.", t->name, shown);
      return;
    }
    s = f->type->kind == PT_SCHEMA ? f->type->schema : NULL;
  }
  if (!scalar_type(f->type))
    ERR(c, e->value->pos, "Tool '%s' idempotency_key '%s' must name a string, number, bool or enum field.", t->name, shown);
}

static void build_tool(pm_ctx *c, ast_decl *d) {
  pm_tool *t = d->model;
  const char *owner = ar_printf(c->a, "Tool '%s'", d->name);
  t->input = pm_new_schema(c, ar_printf(c->a, "__tool_%s_input", d->name), ar_printf(c->a, "%s.input", d->name), d->name_pos);
  if (!t->input) return;
  t->input->internal = 1;
  t->output_root = ar_printf(c->a, "%s.output", d->name);
  t->input->fields = build_fields(c, d->fields, &t->input->nfields, owner);
  const ast_type *r = d->ret;
  if (r) {
    if (r->kind == TY_NAME) {
      ast_decl *rd = pm_lookup(c, r->name);
      if (rd && (rd->kind == DC_SCHEMA || rd->kind == DC_UNION)) {
        t->output = rd->model;
      } else if (rd) {
        ERR(c, r->pos, "Tool '%s' returns '%s', which is a %s, not a schema.", d->name, r->name, pm_kind_word(rd->kind));
      } else {
        ERR(c, r->pos, "Tool '%s' returns '%s', which is not a declared schema.%s", d->name, r->name,
            SUGGEST(c, r->name, DC_SCHEMA));
      }
    } else {
      ERR(c, r->pos, "Tool '%s' must return a declared schema, not %s%s%s.", d->name,
          r->kind == TY_INLINE ? "" : "'", pm_type_text(c, r), r->kind == TY_INLINE ? "" : "'");
    }
  }
  pm_read_tool_config(c, d, t, owner);

  int nneeds = 0;
  for (const ast_config *e = d->config; e; e = e->next) nneeds += e->needs_name != NULL;
  t->needs = ar_alloc(c->a, sizeof *t->needs * (size_t)(nneeds ? nneeds : 1));
  mp_map seen = { 0 };
  for (const ast_config *e = d->config; e && t->needs; e = e->next) {
    if (!e->needs_name) continue;
    if (mp_get(&seen, e->needs_name, strlen(e->needs_name))) {
      ERR(c, e->pos, "Tool '%s' declares needs '%s' twice.", d->name, e->needs_name);
      continue;
    }
    mp_put(c->a, &seen, e->needs_name, strlen(e->needs_name), (void *)e);
    pm_type *nt = pm_resolve_type(c, e->needs_type, 0);
    if (!nt) continue;
    if (nt->kind != PT_SCHEMA || nt->schema->is_union) {
      ERR(c, e->needs_type->pos, "Tool '%s' needs '%s' must be a record schema.", d->name, e->needs_name);
      continue;
    }
    t->needs[t->nneeds].name = e->needs_name;
    t->needs[t->nneeds].schema = nt->schema;
    t->nneeds++;
  }

  /* the consistency rules of the contract language, with their exact messages */
  const ast_config *cache = pm_config_entry(d, "cache");
  ast_pos at_cache = cache ? cache->pos : d->name_pos;
  if (t->side_effects == SE_WRITE && t->cache)
    pm_rule(c, at_cache, LE_MSG_WRITE_CACHED, d->name, NULL);
  if (t->side_effects == SE_WRITE && t->retries > 0 && !(t->idempotent && t->idempotency_key.present)) {
    const ast_config *e = pm_config_entry(d, "retries");
    pm_rule(c, e ? e->pos : d->name_pos, LE_MSG_WRITE_RETRIED, d->name, NULL);
  }
  if (t->idempotent && !pm_config_entry(d, "idempotency_key")) {
    const ast_config *e = pm_config_entry(d, "idempotent");
    pm_rule(c, e ? e->pos : d->name_pos, LE_MSG_IDEMPOTENT_NO_KEY, d->name, NULL);
  }
  if (t->nneeds > 0 && t->cache)
    pm_rule(c, at_cache, LE_MSG_CACHE_WITH_NEEDS, d->name, NULL);
  if (t->idempotency_key.present && !t->idempotent) {
    const ast_config *e = pm_config_entry(d, "idempotency_key");
    ERR(c, e->pos, "Tool '%s' has an idempotency_key but is not idempotent: true.", d->name);
  }
  if (t->idempotency_key.present && t->idempotent) check_idempotency_key(c, t);
}

/* ---------------------------------------------------- agents and models */

/* "openai and azure": the providers that offer the Responses API. */
static const char *responses_providers(ar_arena *a) {
  const char *s = NULL;
  int left = 0;
  for (int i = 0; i < AD_NPROVIDERS; i++) left += ad_providers[i].responses;
  for (int i = 0; i < AD_NPROVIDERS; i++) {
    if (!ad_providers[i].responses) continue;
    left--;
    s = s ? ar_printf(a, "%s%s%s", s, left ? ", " : " and ", ad_providers[i].name) : ad_providers[i].name;
  }
  return s ? s : "none";
}

static void check_model(pm_ctx *c, ast_decl *d) {
  pm_model *m = d->model;
  pm_read_model_config(c, d, m, ar_printf(c->a, "Model '%s'", d->name));
  if (!m->has_provider) {
    if (!pm_config_entry(d, "provider"))
      ERR(c, d->name_pos, "Model '%s' must set provider: one of %s.", d->name, pm_quoted(c->a, ad_provider_names));
    return;
  }
  if (m->provider == AD_AZURE && !m->deployment) ERR(c, d->name_pos, "Model '%s' uses azure and must set deployment.", d->name);
  if (!ad_providers[m->provider].base_url && !m->base_url)
    ERR(c, d->name_pos, "Model '%s' uses %s and must set base_url.", d->name, ad_providers[m->provider].name);
  if (m->provider != AD_AZURE && !m->model) ERR(c, d->name_pos, "Model '%s' must set name: the provider's model name.", d->name);
  if (m->api == AD_RESPONSES && !ad_providers[m->provider].responses)
    ERR(c, pm_config_entry(d, "api")->value->pos, "Model '%s': api \"responses\" is the OpenAI Responses API: only for %s.", d->name,
        responses_providers(c->a));
  if (m->base_url && strncmp(m->base_url, "http://", 7) != 0 && strncmp(m->base_url, "https://", 8) != 0)
    ERR(c, pm_config_entry(d, "base_url")->value->pos, "Model '%s': base_url must start with http:// or https://.", d->name);
}

static void check_ptool(pm_ctx *c, ast_decl *d) {
  pm_ptool *t = d->model;
  pm_read_ptool_config(c, d, t, ar_printf(c->a, "Provider tool '%s'", d->name));
  if (!t->has_kind) {
    if (!pm_config_entry(d, "kind"))
      ERR(c, d->name_pos, "Provider tool '%s' must set kind: one of %s.", d->name, pm_quoted(c->a, ad_ptkind_names));
    return;
  }
  if (t->allowed_domains.present && t->blocked_domains.present)
    ERR(c, pm_config_entry(d, "blocked_domains")->pos, "Provider tool '%s' sets both allowed_domains and blocked_domains: set one.", d->name);
  if (t->kind == AD_PT_FILE_SEARCH && !t->vector_stores.n)
    ERR(c, d->name_pos, "Provider tool '%s' (file_search) must set vector_stores: the ids of the vector stores (on Gemini, the fileSearchStores/... names) to search.", d->name);
}

/* "a,b,c" as "a, b, c", for a message. */
static const char *spaced(ar_arena *a, const char *list) {
  const char *s = "";
  for (const char *p = list; *p;) {
    size_t n = strcspn(p, ",");
    s = ar_printf(a, "%s%s%.*s", s, *s ? ", " : "", (int)n, p);
    p += n + (p[n] == ',');
  }
  return s;
}

/* The provider options a provider tool sets, by name, for the capability's list. */
static const char *const ptool_options[] = { "max_uses", "allowed_domains", "blocked_domains", "user_location",
                                             "vector_stores", "container", NULL };

/* The agent's provider tools against its model's row of the capability
   table (adapters/ptools.h): refused at load, where the agent lists them. */
static void check_ptools(pm_ctx *c, const pm_agent *ag) {
  const pm_model *m = ag->model;
  if (!m || !m->has_provider || !ag->ptools.n) return;
  ad_wire w = ad_wire_of((ad_provider)m->provider, (ad_api)m->api);
  const char *name = m->model ? m->model : "";
  const char *shown = m->model ? ar_printf(c->a, "'%s'", m->model) : ar_printf(c->a, "deployment '%s'", m->deployment ? m->deployment : "");
  for (int i = 0; i < ag->ptools.n; i++) {
    const pm_ptool *t = ag->ptools.items[i];
    ast_pos at = ag->ptools.pos[i];
    if (!t->has_kind) continue;
    const char *kind = ad_ptkind_names[t->kind];
    ad_capability cap = ad_ptool_capability(w, name, (ad_ptkind)t->kind);
    const char *hint = *cap.hint ? ar_printf(c->a, "; %s", cap.hint) : "";
    switch (cap.verdict) {
      case AD_CAP_NO_WIRE:
        ERR(c, at, "Agent '%s': %s is not available on %s%s.", ag->name, kind, ad_wire_title(w), hint);
        continue;
      case AD_CAP_NO_MODEL:
        if (*hint)
          ERR(c, at, "Agent '%s': %s is not available on %s for model %s (model %s)%s.", ag->name, kind, ad_wire_title(w),
              shown, m->name, hint);
        else
          ERR(c, at, "Agent '%s': %s is not available on %s for model %s (model %s); it runs on %s.", ag->name, kind,
              ad_wire_title(w), shown, m->name, spaced(c->a, cap.models));
        continue;
      case AD_CAP_UNKNOWN_MODEL:
        if (!m->allow_unknown_model && !c->p->allow_unknown_models)
          ERR(c, at, "Agent '%s': model %s (model %s) is not one luma knows to run %s on %s (%s); set allow_unknown_model: true in model %s (or use --allow-unknown-models) to send it anyway.",
              ag->name, shown, m->name, kind, ad_wire_title(w), spaced(c->a, cap.models), m->name);
        break;
      case AD_CAP_OK:
        break;
    }
    const pm_strings *set[] = { NULL, &t->allowed_domains, &t->blocked_domains, NULL, &t->vector_stores, NULL };
    for (int o = 0; ptool_options[o]; o++) {
      int present = set[o] ? set[o]->present : o == 0 ? t->max_uses > 0 : o == 3 ? t->user_location.n > 0 : t->container != NULL;
      if (present && !ad_ptool_takes(&cap, ptool_options[o]))
        ERR(c, at, "Agent '%s': provider tool '%s' sets %s, which %s on %s does not take%s%s.", ag->name, t->name,
            ptool_options[o], kind, ad_wire_title(w), *cap.options ? "; it takes " : "", spaced(c->a, cap.options));
    }
  }
  if (w == AD_WIRE_GEMINI && ag->tools.n && !ad_gemini_mixes_tools(name))
    ERR(c, ag->ptools.pos[0], "Agent '%s': Gemini 2.x cannot combine built-in tools (%s) with function declarations (%s); use a Gemini 3 model, or give them to two agents.",
        ag->name, ag->ptools.items[0]->name, ag->tools.items[0]->name);
}

/* lazy_tools names tools of the agent's own; a search by regex or BM25 is
   Anthropic's, on the models that have it. */
static void check_lazy(pm_ctx *c, ast_decl *d, pm_agent *ag) {
  const ast_config *e = pm_config_entry(d, "lazy_tools");
  const ast_expr *item = e && e->value->kind == EX_ARRAY ? e->value->items : NULL;
  for (int i = 0; i < ag->lazy_tools.n; i++, item = item ? item->next : NULL) {
    int found = -1;
    for (int k = 0; k < ag->tools.n; k++)
      if (strcmp(ag->tools.items[k]->name, ag->lazy_tools.items[i]) == 0) found = k;
    ast_pos at = item ? item->pos : d->name_pos;
    if (found < 0) {
      ERR(c, at, "Agent '%s': lazy_tools lists '%s', which is not one of its tools.", d->name, ag->lazy_tools.items[i]);
      continue;
    }
    if (!ag->lazy) ag->lazy = ar_alloc(c->a, (size_t)ag->tools.n);
    if (ag->lazy) ag->lazy[found] = 1;
  }
  const ast_config *ts = pm_config_entry(d, "tool_search");
  if (!ts || (ag->tool_search != TS_REGEX && ag->tool_search != TS_BM25) || !ag->model || !ag->model->has_provider) return;
  ad_wire w = ad_wire_of((ad_provider)ag->model->provider, (ad_api)ag->model->api);
  if (!ad_tool_search(w, ag->model->model, 0) || w != AD_WIRE_ANTHROPIC)
    ERR(c, ts->value->pos, "Agent '%s': tool_search \"%s\" is Anthropic's tool search, which model '%s' does not have; use \"auto\" or \"synthetic\".",
        d->name, pm_tool_search_names[ag->tool_search], ag->model->name);
}

static void check_agent(pm_ctx *c, ast_decl *d) {
  pm_agent *ag = d->model;
  pm_read_agent_config(c, d, ag, ar_printf(c->a, "Agent '%s'", d->name));
  check_ptools(c, ag);
  check_lazy(c, d, ag);
  int asks = 0;
  mp_map seen = { 0 };
  int count = 0;
  for (const ast_method *m = d->methods; m; m = m->next) count++;
  ag->methods = ar_alloc(c->a, sizeof *ag->methods * (size_t)(count ? count : 1));
  if (!ag->methods) return;
  for (const ast_method *m = d->methods; m; m = m->next) {
    if (mp_get(&seen, m->name, strlen(m->name))) { ERR(c, m->pos, "Agent '%s' has two methods named '%s'.", d->name, m->name); continue; }
    mp_put(c->a, &seen, m->name, strlen(m->name), (void *)m);
    pm_method *pm = &ag->methods[ag->nmethods++];
    pm->name = m->name;
    pm->input = pm_new_schema(c, ar_printf(c->a, "__method_%s_%s_input", d->name, m->name),
                           ar_printf(c->a, "%s.%s.input", d->name, m->name), m->pos);
    if (!pm->input) return;
    pm->input->internal = 1;
    pm->input->fields = build_fields(c, m->params, &pm->input->nfields, ar_printf(c->a, "Method '%s.%s'", d->name, m->name));
    if (m->ret) pm->ret = pm_resolve_type(c, m->ret, 0);
    asks += pc_check_block(c, ag, m->params, pm->input, m->body);
  }
  if (asks > 0 && !ag->model && !pm_config_entry(d, "model") && !d->broken)
    ERR(c, d->name_pos, "Agent '%s' uses ask but has no model.", d->name);
}

/* --------------------------------------------------------- built-in tools */

static pm_type *builtin_type(pm_ctx *c, pt_kind k, pm_type *elem, pm_schema *schema) {
  pm_type *t = ar_alloc(c->a, sizeof *t);
  if (!t) return NULL;
  t->kind = k;
  t->elem = elem;
  t->schema = schema;
  return t;
}

/* An internal record of the built-in tool, whose fields are given as
   name, required, type, description. */
typedef struct bt_field {
  const char *name;
  int required;
  pm_type *type;
  const char *desc;
} bt_field;

static pm_schema *builtin_record(pm_ctx *c, const char *name, const char *display, const bt_field *fields, int n) {
  pm_schema *s = pm_new_schema(c, name, display, (ast_pos){ 0, 0 });
  if (!s) return NULL;
  s->internal = 1;
  s->fields = ar_alloc(c->a, sizeof *s->fields * (size_t)n);
  if (!s->fields) return NULL;
  for (int i = 0; i < n; i++) {
    if (!fields[i].type) return NULL;
    s->fields[i] = (pm_field){ .name = fields[i].name, .len = strlen(fields[i].name), .required = fields[i].required,
                               .type = fields[i].type, .desc = fields[i].desc, .index = i };
  }
  s->nfields = n;
  return s;
}

/* The synthetic discovery tool (pm_program.discover): after every declared
   tool, so that its index is ntools and no declared one's changes. Its
   input { names: [string]?, query: string? } and output { tools: [{ name,
   description?, input_schema }], errors: [string]? } are the program's
   types, so the one validator checks its calls. */
static void build_discover(pm_ctx *c) {
  pm_tool *t = ar_alloc(c->a, sizeof *t);
  if (!t) return;
  t->name = PM_DISCOVER_TOOL;
  t->builtin = 1;
  t->side_effects = SE_NONE;
  t->timeout = -1;
  t->index = c->p->ntools;
  bt_field in[] = {
    { "names", 0, builtin_type(c, PT_ARRAY, builtin_type(c, PT_STRING, NULL, NULL), NULL), "the names of the tools to load" },
    { "query", 0, builtin_type(c, PT_STRING, NULL, NULL), "words the tools' names or descriptions contain" },
  };
  t->input = builtin_record(c, "__tool_" PM_DISCOVER_TOOL "_input", PM_DISCOVER_TOOL ".input", in, 2);
  bt_field one[] = {
    { "name", 1, builtin_type(c, PT_STRING, NULL, NULL), NULL },
    { "description", 0, builtin_type(c, PT_STRING, NULL, NULL), NULL },
    { "input_schema", 1, builtin_type(c, PT_ANY, NULL, NULL), NULL },
  };
  pm_schema *found = builtin_record(c, "__tool_" PM_DISCOVER_TOOL "_found", PM_DISCOVER_TOOL ".output.tools", one, 3);
  bt_field out[] = {
    { "tools", 1, found ? builtin_type(c, PT_ARRAY, builtin_type(c, PT_SCHEMA, NULL, found), NULL) : NULL, NULL },
    { "errors", 0, builtin_type(c, PT_ARRAY, builtin_type(c, PT_STRING, NULL, NULL), NULL), NULL },
  };
  t->output = builtin_record(c, "__tool_" PM_DISCOVER_TOOL "_output", PM_DISCOVER_TOOL ".output", out, 2);
  t->output_root = PM_DISCOVER_TOOL ".output";
  if (t->input && t->output) c->p->discover = t;
}

/* ------------------------------------------------------------------ build */

void pm_default_limits(pm_limits *lim) {
  lim->max_source_bytes = LIM_MAX_SOURCE_BYTES;
  lim->max_errors = LIM_MAX_ERRORS;
  lim->max_parse_depth = LIM_MAX_PARSE_DEPTH;
  lim->allow_unknown_models = 0;
}

pm_program *pm_build(const char *src, size_t len, const char *chunk, const pm_limits *lim) {
  return pm_build_mcp(src, len, chunk, lim, NULL, 0);
}

pm_program *pm_build_mcp(const char *src, size_t len, const char *chunk, const pm_limits *lim,
                         const pm_mcp_listing *listings, int nlistings) {
  pm_limits defaults;
  if (!lim) { pm_default_limits(&defaults); lim = &defaults; }
  pm_program *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  ar_init(&p->arena);
  p->chunk = ar_strdup(&p->arena, chunk ? chunk : "program.luma");
  p->allow_unknown_models = lim->allow_unknown_models;
  int too_big = len > lim->max_source_bytes;
  p->len = too_big ? 0 : len;
  p->src = ar_strndup(&p->arena, too_big ? "" : src, p->len);
  if (p->arena.failed) { pm_free(p); return NULL; }
  dg_init(&p->diag, &p->arena, p->chunk, p->src, p->len, lim->max_errors);
  if (too_big) {
    dg_error(&p->diag, 0, 0, "the program is %zu bytes; the limit is %zu", len, lim->max_source_bytes);
    return p;
  }
  p->ast = ps_parse(p->src, p->len, &p->arena, &p->diag, lim->max_parse_depth);
  if (!p->ast) { pm_free(p); return NULL; }

  pm_ctx ctx = { 0 }, *c = &ctx;
  c->p = p;
  c->a = &p->arena;
  c->d = &p->diag;
  c->listings = listings;
  c->nlistings = nlistings;
  declare(c);
  collect_names(c);
  build_schemas(c);
  vt_check_schemas(c);
  for (ast_decl *d = p->ast->decls; d; d = d->next) {
    if (!d->model || pm_lookup(c, d->name) != d) continue;
    if (d->kind == DC_TOOL) build_tool(c, d);
    else if (d->kind == DC_MODEL) check_model(c, d);
    else if (d->kind == DC_PTOOL) check_ptool(c, d);
  }
  /* after the program's own tools, whose names its servers' tools may not take */
  for (ast_decl *d = p->ast->decls; d; d = d->next)
    if (d->kind == DC_MCP && d->model && pm_lookup(c, d->name) == d) pm_build_mcp_server(c, d);
  for (ast_decl *d = p->ast->decls; d; d = d->next)
    if (d->kind == DC_AGENT && d->model && pm_lookup(c, d->name) == d) check_agent(c, d);
  pc_check_block(c, NULL, NULL, NULL, p->ast->stmts);
  build_discover(c);
  if (p->arena.failed) { pm_free(p); return NULL; }
  dg_sort(&p->diag);
  return p;
}

void pm_free(pm_program *p) {
  if (!p) return;
  for (int i = 0; i < p->nregexes; i++) lre_free(p->regexes[i]);
  free(p->regexes);
  ar_free(&p->arena);
  free(p);
}

pm_schema *pm_find_schema(const pm_program *p, const char *name) {
  for (int i = 0; i < p->nschemas; i++)
    if (strcmp(p->schemas[i]->name, name) == 0) return p->schemas[i];
  return NULL;
}

pm_tool *pm_find_tool(const pm_program *p, const char *name) {
  for (int i = 0; i < p->ntools; i++)
    if (strcmp(p->tools[i]->name, name) == 0) return p->tools[i];
  return NULL;
}

pm_agent *pm_find_agent(const pm_program *p, const char *name) {
  for (int i = 0; i < p->nagents; i++)
    if (strcmp(p->agents[i]->name, name) == 0) return p->agents[i];
  return NULL;
}

pm_model *pm_find_model(const pm_program *p, const char *name) {
  for (int i = 0; i < p->nmodels; i++)
    if (strcmp(p->models[i]->name, name) == 0) return p->models[i];
  return NULL;
}

const char *pm_near_tool(const pm_program *p, const char *name) {
  int n = p->ntools < LIM_SUGGEST_CANDIDATES ? p->ntools : LIM_SUGGEST_CANDIDATES;
  if (n == 0) return NULL;
  const char **names = malloc(sizeof *names * (size_t)n);
  if (!names) return NULL;
  for (int i = 0; i < n; i++) names[i] = p->tools[i]->name;
  const char *near = dg_suggest(name, names, n);
  free(names);
  return near;
}

const char *pm_model_key_env(const pm_model *m) {
  if (m->no_api_key) return NULL;
  return m->api_key_env ? m->api_key_env : ad_providers[m->provider].key_env;
}
