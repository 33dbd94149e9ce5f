/* The providers' dialects of the one JSON Schema luma generates: new trees,
   the canonical one is left as it is.

   Each family's strict answer format takes a subset of JSON Schema; a
   keyword outside it is refused with a 400 (OpenAI, Anthropic) or may be
   (Gemini). Such a keyword moves into the schema's description, as the
   providers' own SDKs do, and the answer is still validated locally against
   the whole schema. What each family takes (their references, 2026):
   - OpenAI strict mode (Chat Completions and Responses): type, properties,
     required (every property), additionalProperties false, items, enum,
     const, anyOf, $defs, $ref, description, title, pattern, format,
     minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf,
     minLength, maxLength, minItems, maxItems. Not: allOf, not, if/then/else,
     default.
   - Anthropic structured outputs: type, properties, required,
     additionalProperties false, items, enum, const, anyOf, allOf, $defs,
     $ref, description, title, default, pattern, format (a listed few),
     minItems of 0 or 1. Not: minimum, maximum, exclusive*, multipleOf,
     minLength, maxLength, maxItems, larger minItems.
   - Gemini responseJsonSchema (and parametersJsonSchema): $id, $defs, $ref,
     $anchor, type, format, title, description, enum, items, prefixItems,
     minItems, maxItems, minimum, maximum, anyOf, oneOf, properties,
     additionalProperties, required, propertyOrdering. Not: const (written
     as a one-value enum), default, pattern, minLength, maxLength.
   - All: a $ref has no sibling but other $ keywords (Gemini's rule; OpenAI's
     SDK inlines such a ref too): the referenced body is inlined there, with
     the siblings taking precedence. */
#include "common.h"

#include <string.h>

typedef enum { D_OPENAI, D_ANTHROPIC, D_GEMINI } dialect;

typedef struct sc_ctx {
  ar_arena *a;
  dialect d;
  const jv *root;             /* where "#/$defs/..." is resolved */
} sc_ctx;

static jv *convert(sc_ctx *c, const jv *s, int depth);

/* A copy of an object of schemas (properties, $defs), or a list of them
   (anyOf), each converted. */
static jv *convert_map(sc_ctx *c, const jv *m, int depth) {
  jv *o = jv_obj(c->a);
  for (const jv *p = m->first; p; p = p->next) jv_setn(o, p->key, p->keylen, convert(c, p, depth + 1));
  return o;
}

static jv *convert_list(sc_ctx *c, const jv *l, int depth) {
  jv *o = jv_arr(c->a);
  for (const jv *p = l->first; p; p = p->next) jv_push(o, convert(c, p, depth + 1));
  return o;
}

static int is(const char *k, const char *name) {
  return strcmp(k, name) == 0;
}

static int listed(const jv *list, const char *name) {
  for (const jv *p = list && list->type == JV_ARR ? list->first : NULL; p; p = p->next)
    if (p->type == JV_STR && strcmp(p->s, name) == 0) return 1;
  return 0;
}

static int one_of_words(const char *k, const char *const *words) {
  for (; *words; words++)
    if (is(k, *words)) return 1;
  return 0;
}

/* The string formats Anthropic and OpenAI take. */
static int known_format(const jv *v) {
  static const char *const formats[] = { "date-time", "time", "date", "duration", "email", "hostname", "uri",
                                         "ipv4", "ipv6", "uuid", NULL };
  return v->type == JV_STR && one_of_words(v->s, formats);
}

/* 1: the family's strict format takes keyword k with value v as it is. */
static int takes(dialect d, const char *k, const jv *v) {
  static const char *const openai[] = { "title", "pattern", "minimum", "maximum", "exclusiveMinimum",
                                        "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "minItems",
                                        "maxItems", NULL };
  static const char *const anthropic[] = { "title", "default", "pattern", "allOf", NULL };
  static const char *const gemini[] = { "title", "minimum", "maximum", "minItems", "maxItems", "prefixItems",
                                        "propertyOrdering", "format", "$id", "$anchor", NULL };
  switch (d) {
    case D_OPENAI: return one_of_words(k, openai) || (is(k, "format") && known_format(v));
    case D_ANTHROPIC:
      if (is(k, "minItems")) return v->type == JV_INT && (v->i == 0 || v->i == 1);
      return one_of_words(k, anthropic) || (is(k, "format") && known_format(v));
    default: return one_of_words(k, gemini);
  }
}

/* OpenAI strict mode: an optional field is required and may be null. */
static jv *nullable(ar_arena *a, jv *p) {
  const jv *type = jv_get(p, "type");
  if (type && type->type == JV_STR && !jv_get(p, "enum") && !jv_get(p, "const")) {
    jv *both = jv_arr(a);
    jv_push(both, jv_str(a, type->s, type->len));
    jv_push(both, jv_cstr(a, "null"));
    jv *o = jv_obj(a);
    for (const jv *m = p->first; m; m = m->next)
      jv_setn(o, m->key, m->keylen, strcmp(m->key, "type") == 0 ? both : ad_share(a, m));
    return o;
  }
  jv *null = jv_obj(a);
  jv_set(null, "type", jv_cstr(a, "null"));
  jv *any = jv_arr(a);
  jv_push(any, p);
  jv_push(any, null);
  jv *o = jv_obj(a);
  jv_set(o, "anyOf", any);
  return o;
}

/* A keyword the family does not take, said in words in the description. */
static void note(sb_buf *desc, const char *k, const jv *v) {
  static const char *const words[][3] = {
    { "minimum", "At least ", "." },          { "maximum", "At most ", "." },
    { "exclusiveMinimum", "More than ", "." }, { "exclusiveMaximum", "Less than ", "." },
    { "multipleOf", "A multiple of ", "." },  { "minLength", "At least ", " characters." },
    { "maxLength", "At most ", " characters." }, { "minItems", "At least ", " items." },
    { "maxItems", "At most ", " items." },    { "pattern", "It matches the pattern ", "." },
    { "format", "Format: ", "." },            { "default", "Default: ", "." },
    { "const", "Always ", "." },              { "allOf", "It must match all of ", "." },
    { "not", "It must not match ", "." },     { "if", "Condition: ", "." },
  };
  const char *before = NULL, *after = ".";
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (is(k, words[i][0])) { before = words[i][1]; after = words[i][2]; }
  if (desc->len) sb_adds(desc, " ");
  if (before) {
    sb_adds(desc, before);
  } else {
    sb_adds(desc, k);
    sb_adds(desc, ": ");
  }
  jv_write(desc, v, 0);
  /* "At least 1 character.", not "1 characters." */
  size_t n = strlen(after);
  if (v->type == JV_INT && v->i == 1 && n > 2 && after[n - 2] == 's') {
    sb_add(desc, after, n - 2);
    sb_adds(desc, ".");
  } else {
    sb_adds(desc, after);
  }
}

/* The body a local "#/$defs/Name" (or "#/definitions/Name") names. */
static const jv *resolve(const sc_ctx *c, const jv *ref) {
  if (!ref || ref->type != JV_STR) return NULL;
  const char *r = ref->s, *group = NULL;
  if (strncmp(r, "#/$defs/", 8) == 0) group = "$defs", r += 8;
  else if (strncmp(r, "#/definitions/", 14) == 0) group = "definitions", r += 14;
  if (!group || strchr(r, '/') || strchr(r, '~')) return NULL;
  const jv *body = jv_get(jv_get(c->root, group), r);
  return body && body->type == JV_OBJ ? body : NULL;
}

/* A $ref with siblings: the body it names, with the siblings over it. */
static const jv *inlined(sc_ctx *c, const jv *s, const jv *ref) {
  const jv *body = resolve(c, ref);
  if (!body) return NULL;
  jv *m = jv_obj(c->a);
  for (const jv *p = body->first; p; p = p->next)
    if (!jv_get(s, p->key)) jv_setn(m, p->key, p->keylen, ad_share(c->a, p));
  for (const jv *p = s->first; p; p = p->next)
    if (!is(p->key, "$ref")) jv_setn(m, p->key, p->keylen, ad_share(c->a, p));
  return m;
}

static int has_sibling(const jv *s) {
  for (const jv *p = s->first; p; p = p->next)
    if (p->key[0] != '$') return 1;
  return 0;
}

static jv *convert(sc_ctx *c, const jv *s, int depth) {
  ar_arena *a = c->a;
  dialect d = c->d;
  if (!s || s->type != JV_OBJ || depth > LIM_MODEL_JSON_DEPTH) return ad_share(a, s);
  const jv *ref = jv_get(s, "$ref");
  if (ref && has_sibling(s)) {
    const jv *m = inlined(c, s, ref);
    if (m) return convert(c, m, depth + 1);
  }
  jv *o = jv_obj(a);
  const jv *props = NULL, *required = NULL;
  sb_buf desc;
  sb_init(&desc);
  const jv *old_desc = jv_get(s, "description");
  if (old_desc && old_desc->type == JV_STR) sb_add(&desc, old_desc->s, old_desc->len);
  for (const jv *m = s->first; m; m = m->next) {
    const char *k = m->key;
    if (is(k, "$schema") || is(k, "description")) continue;
    if (ref && !is(k, "$ref") && k[0] != '$') continue;   /* an unresolved ref keeps no sibling */
    if (is(k, "oneOf") || is(k, "anyOf")) {
      jv_set(o, "anyOf", m->type == JV_ARR ? convert_list(c, m, depth) : ad_share(a, m));
    } else if (is(k, "properties") && m->type == JV_OBJ) {
      props = m;
    } else if (is(k, "required")) {
      required = m;
    } else if (is(k, "$defs") || is(k, "definitions")) {
      jv_set(o, k, m->type == JV_OBJ ? convert_map(c, m, depth) : ad_share(a, m));
    } else if (is(k, "items") || is(k, "additionalProperties")) {
      jv_set(o, k, convert(c, m, depth + 1));
    } else if (is(k, "type") || is(k, "enum") || is(k, "$ref")) {
      jv_set(o, k, ad_share(a, m));
    } else if (is(k, "const")) {
      /* Gemini: a one-value enum, which it takes for strings and numbers */
      if (d != D_GEMINI) {
        jv_set(o, k, ad_share(a, m));
      } else if (m->type == JV_STR || m->type == JV_INT || m->type == JV_NUM) {
        jv_set(o, "enum", jv_push(jv_arr(a), ad_share(a, m)));
      } else {
        note(&desc, k, m);
      }
    } else if (is(k, "allOf") && d == D_ANTHROPIC && m->type == JV_ARR) {
      jv_set(o, k, convert_list(c, m, depth));
    } else if (takes(d, k, m)) {
      jv_set(o, k, ad_share(a, m));
    } else {
      note(&desc, k, m);
    }
  }
  if (props) {
    jv *p = jv_obj(a);
    jv *req = jv_arr(a);
    for (const jv *f = props->first; f; f = f->next) {
      jv *fc = convert(c, f, depth + 1);
      if (d == D_OPENAI) {
        if (!listed(required, f->key)) fc = nullable(a, fc);
        jv_push(req, jv_cstr(a, f->key));
      }
      jv_setn(p, f->key, f->keylen, fc);
    }
    jv_set(o, "properties", p);
    if (d == D_OPENAI) jv_set(o, "required", req);
    else if (required) jv_set(o, "required", ad_share(a, required));
  } else if (required) {
    jv_set(o, "required", ad_share(a, required));
  }
  const jv *type = jv_get(s, "type");
  int object = props || (type && type->type == JV_STR && strcmp(type->s, "object") == 0);
  if (object && d != D_GEMINI && !jv_get(o, "additionalProperties")) jv_set(o, "additionalProperties", jv_bool(a, 0));
  if (desc.len && !ref) {
    jv *text = desc.failed ? NULL : jv_strcopy(a, desc.data, desc.len);
    if (text) jv_set(o, "description", text);
  }
  sb_free(&desc);
  return o;
}

static jv *dialect_of(ar_arena *a, const jv *schema, dialect d) {
  sc_ctx c = { a, d, schema };
  return convert(&c, schema, 0);
}

jv *ad_schema_openai_strict(ar_arena *a, const jv *schema) {
  return dialect_of(a, schema, D_OPENAI);
}

jv *ad_schema_anthropic(ar_arena *a, const jv *schema) {
  return dialect_of(a, schema, D_ANTHROPIC);
}

jv *ad_schema_gemini(ar_arena *a, const jv *schema) {
  return dialect_of(a, schema, D_GEMINI);
}
