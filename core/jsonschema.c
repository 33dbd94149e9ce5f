#include "jsonschema.h"

#include <string.h>

#include "luma_limits.h"

/*
 * One canonical JSON Schema per declared schema. References go through
 * "$defs" by schema name; a tagged union is an "anyOf" of its members, each
 * inlined with its tag as a required "const" property.
 */

typedef struct js_ctx {
  ar_arena *a;
  const pm_program *p;
  unsigned char *used;        /* by schema index: referenced from the root */
  int *work;                  /* used schemas whose bodies are not emitted yet */
  int nwork;
} js_ctx;

static jv *schema_body(js_ctx *c, const pm_schema *s);

static jv *num(js_ctx *c, pm_num n) { return n.is_int ? jv_int(c->a, n.i) : jv_num(c->a, n.d); }

static jv *ref(js_ctx *c, const pm_schema *s) {
  if (!c->used[s->index]) {
    c->used[s->index] = 1;
    c->work[c->nwork++] = s->index;
  }
  return jv_set(jv_obj(c->a), "$ref", jv_cstr(c->a, ar_printf(c->a, "#/$defs/%s", s->name)));
}

/* A literal of the contract language (a @default value) as JSON. */
static jv *literal(js_ctx *c, const ast_expr *e) {
  switch (e->kind) {
    case EX_NULL: return jv_null(c->a);
    case EX_TRUE: return jv_bool(c->a, 1);
    case EX_FALSE: return jv_bool(c->a, 0);
    case EX_INT: return jv_int(c->a, e->ival);
    case EX_FLOAT: return jv_num(c->a, e->fval);
    case EX_STRING: return jv_str(c->a, e->str.s, e->str.len);
    case EX_UNARY: {
      jv *v = literal(c, e->a);
      if (v && v->type == JV_INT) v->i = -v->i;
      else if (v && v->type == JV_NUM) v->n = -v->n;
      return v;
    }
    case EX_ARRAY: {
      jv *arr = jv_arr(c->a);
      for (const ast_expr *i = e->items; i; i = i->next) jv_push(arr, literal(c, i));
      return arr;
    }
    case EX_OBJECT: {
      jv *obj = jv_obj(c->a);
      for (const ast_prop *q = e->props; q; q = q->next) jv_set(obj, q->key, literal(c, q->value));
      return obj;
    }
    default: return jv_null(c->a);
  }
}

/* The schema of a type; `desc` is the field's @desc, shown on the outermost level. */
static jv *type_schema(js_ctx *c, const pm_type *t, const char *desc) {
  jv *o;
  if (t->kind == PT_SCHEMA) {
    o = ref(c, t->schema);
    if (desc) jv_set(o, "description", jv_cstr(c->a, desc));
    return o;
  }
  o = jv_obj(c->a);
  static const char *const names[] = { "string", "integer", "number", "boolean", NULL, "string", NULL, "array" };
  if (names[t->kind]) jv_set(o, "type", jv_cstr(c->a, names[t->kind]));
  if (desc) jv_set(o, "description", jv_cstr(c->a, desc));
  if (t->kind == PT_ENUM) {
    jv *vals = jv_arr(c->a);
    for (int i = 0; i < t->nvalues; i++) jv_push(vals, jv_str(c->a, t->values[i].s, t->values[i].len));
    jv_set(o, "enum", vals);
  }
  if (t->rules & PR_MIN) jv_set(o, "minimum", num(c, t->min));
  if (t->rules & PR_MAX) jv_set(o, "maximum", num(c, t->max));
  if (t->rules & PR_MINLEN) jv_set(o, "minLength", jv_int(c->a, t->minlen));
  if (t->rules & PR_MAXLEN) jv_set(o, "maxLength", jv_int(c->a, t->maxlen));
  if (t->rules & PR_PATTERN) jv_set(o, "pattern", jv_str(c->a, t->pattern, t->pattern_len));
  if (t->kind == PT_ARRAY) {
    jv_set(o, "items", type_schema(c, t->elem, NULL));
    if (t->rules & PR_MINITEMS) jv_set(o, "minItems", jv_int(c->a, t->minitems));
    if (t->rules & PR_MAXITEMS) jv_set(o, "maxItems", jv_int(c->a, t->maxitems));
  }
  return o;
}

/* An object schema of fields; a union member also gets its tag first. */
static jv *record(js_ctx *c, const pm_schema *s, const char *tag, const char *tag_value) {
  jv *o = jv_obj(c->a);
  jv_set(o, "type", jv_cstr(c->a, "object"));
  jv *props = jv_obj(c->a), *required = jv_arr(c->a);
  if (tag) {
    jv *t = jv_obj(c->a);
    jv_set(t, "type", jv_cstr(c->a, "string"));
    jv_set(t, "const", jv_cstr(c->a, tag_value));
    jv_set(props, tag, t);
    jv_push(required, jv_cstr(c->a, tag));
  }
  for (int i = 0; i < s->nfields; i++) {
    const pm_field *f = &s->fields[i];
    jv *prop = type_schema(c, f->type, f->desc);
    if (f->default_value) {
      char why[64];
      jv *v = f->default_json ? json_parse(c->a, f->default_json, f->default_json_len, LIM_DEFAULT_VALUE_DEPTH + 2, why,
                                            sizeof why)
                              : NULL;
      jv_set(prop, "default", v ? v : literal(c, f->default_value));
    }
    jv_set(props, f->name, prop);
    if (f->required) jv_push(required, jv_cstr(c->a, f->name));
  }
  jv_set(o, "properties", props);
  if (required->count) jv_set(o, "required", required);
  if (!s->open) jv_set(o, "additionalProperties", jv_bool(c->a, 0));
  return o;
}

static jv *schema_body(js_ctx *c, const pm_schema *s) {
  if (!s->is_union) return record(c, s, NULL, NULL);
  jv *any = jv_arr(c->a);
  for (int i = 0; i < s->nmembers; i++) jv_push(any, record(c, s->members[i], s->tag, s->members[i]->name));
  return jv_set(jv_obj(c->a), "anyOf", any);
}

static jv *with_defs(js_ctx *c, jv *root) {
  int n = c->p->nschemas;
  jv **bodies = ar_alloc(c->a, sizeof *bodies * ((size_t)n + 1));
  if (!bodies) return NULL;
  /* emitting a body can use more schemas, which join the worklist */
  while (c->nwork > 0) {
    int i = c->work[--c->nwork];
    bodies[i] = schema_body(c, c->p->schemas[i]);
    if (!bodies[i]) return NULL;
  }
  jv *defs = jv_obj(c->a);
  for (int i = 0; i < n; i++)
    if (bodies[i]) jv_set(defs, c->p->schemas[i]->name, bodies[i]);
  if (defs->count) jv_set(root, "$defs", defs);
  return root;
}

/* Where provider dialects plug in: each is a transformation of the canonical
   tree (OpenAI strict mode: every property required, optional ones nullable;
   Gemini: its subset, `const` as a one-value `enum`, no `$defs`). */
static jv *dialect(js_ctx *c, jv *schema, js_dialect d) {
  (void)c;
  switch (d) {
    case JS_CANONICAL: default: return schema;
  }
}

jv *js_schema(ar_arena *a, const pm_program *p, const pm_schema *s, js_dialect d) {
  js_ctx c = { a, p, ar_alloc(a, (size_t)p->nschemas + 1), ar_alloc(a, sizeof(int) * ((size_t)p->nschemas + 1)), 0 };
  if (!c.used || !c.work) return NULL;
  jv *root = schema_body(&c, s);
  return root ? dialect(&c, with_defs(&c, root), d) : NULL;
}

jv *js_tool(ar_arena *a, const pm_program *p, const pm_tool *t, js_dialect d) {
  jv *o = jv_obj(a);
  jv_set(o, "name", jv_cstr(a, t->name));
  jv_set(o, "description", jv_cstr(a, t->description ? t->description : ""));
  jv_set(o, "parameters", js_schema(a, p, t->input, d));
  return o;
}

jv *js_tools(ar_arena *a, const pm_program *p, js_dialect d) {
  jv *arr = jv_arr(a);
  for (int i = 0; i < p->ntools; i++) jv_push(arr, js_tool(a, p, p->tools[i], d));
  return arr;
}
