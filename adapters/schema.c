/* The providers' dialects of the one JSON Schema luma generates: new trees,
   the canonical one is left as it is. */
#include "common.h"

#include <string.h>

typedef enum { D_OPENAI, D_ANTHROPIC, D_GEMINI } dialect;

static jv *convert(ar_arena *a, const jv *s, dialect d, int depth);

/* A copy of v's node with its children converted (objects of schemas:
   properties, $defs), or of a list of schemas (anyOf). */
static jv *convert_map(ar_arena *a, const jv *m, dialect d, int depth) {
  jv *o = jv_obj(a);
  for (const jv *p = m->first; p; p = p->next) jv_set(o, p->key, convert(a, p, d, depth + 1));
  return o;
}

static jv *convert_list(ar_arena *a, const jv *l, dialect d, int depth) {
  jv *o = jv_arr(a);
  for (const jv *p = l->first; p; p = p->next) jv_push(o, convert(a, p, d, depth + 1));
  return o;
}

static int listed(const jv *list, const char *name) {
  for (const jv *p = list && list->type == JV_ARR ? list->first : NULL; p; p = p->next)
    if (p->type == JV_STR && strcmp(p->s, name) == 0) return 1;
  return 0;
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
      jv_set(o, m->key, strcmp(m->key, "type") == 0 ? both : ad_share(a, m));
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

static void note(ar_arena *a, sb_buf *desc, const char *what, const jv *v) {
  if (desc->len) sb_adds(desc, " ");
  sb_adds(desc, what);
  jv_write(desc, v, 0);
  sb_adds(desc, ".");
  (void)a;
}

static jv *convert(ar_arena *a, const jv *s, dialect d, int depth) {
  if (!s || s->type != JV_OBJ || depth > LIM_MODEL_JSON_DEPTH) return ad_share(a, s);
  jv *o = jv_obj(a);
  const jv *props = NULL, *required = NULL, *ref = jv_get(s, "$ref");
  sb_buf desc;
  sb_init(&desc);
  const jv *old_desc = jv_get(s, "description");
  if (old_desc && old_desc->type == JV_STR) sb_add(&desc, old_desc->s, old_desc->len);
  for (const jv *m = s->first; m; m = m->next) {
    const char *k = m->key;
    if (strcmp(k, "$schema") == 0 || strcmp(k, "description") == 0) continue;
    /* Gemini takes a $ref with no sibling */
    if (d == D_GEMINI && ref && strcmp(k, "$ref") != 0) continue;
    if (strcmp(k, "oneOf") == 0 || strcmp(k, "anyOf") == 0) {
      jv_set(o, "anyOf", m->type == JV_ARR ? convert_list(a, m, d, depth) : ad_share(a, m));
    } else if (strcmp(k, "properties") == 0 && m->type == JV_OBJ) {
      props = m;
    } else if (strcmp(k, "required") == 0) {
      required = m;
    } else if (strcmp(k, "$defs") == 0 || strcmp(k, "definitions") == 0 || strcmp(k, "patternProperties") == 0) {
      jv_set(o, k, m->type == JV_OBJ ? convert_map(a, m, d, depth) : ad_share(a, m));
    } else if (strcmp(k, "items") == 0 || strcmp(k, "additionalProperties") == 0 || strcmp(k, "not") == 0) {
      if (d == D_OPENAI && strcmp(k, "not") == 0) { note(a, &desc, "It must not match ", m); continue; }
      jv_set(o, k, convert(a, m, d, depth + 1));
    } else if (d == D_OPENAI && (strcmp(k, "allOf") == 0 || strcmp(k, "if") == 0 || strcmp(k, "then") == 0 ||
                                 strcmp(k, "else") == 0)) {
      note(a, &desc, strcmp(k, "allOf") == 0 ? "It must match all of " : "Condition: ", m);
    } else if (d == D_OPENAI && strcmp(k, "default") == 0) {
      note(a, &desc, "Default: ", m);
    } else {
      jv_set(o, k, ad_share(a, m));
    }
  }
  if (props) {
    jv *p = jv_obj(a);
    jv *req = jv_arr(a);
    for (const jv *f = props->first; f; f = f->next) {
      jv *c = convert(a, f, d, depth + 1);
      if (d == D_OPENAI) {
        if (!listed(required, f->key)) c = nullable(a, c);
        jv_push(req, jv_cstr(a, f->key));
      }
      jv_set(p, f->key, c);
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
  if (desc.len && !(d == D_GEMINI && ref)) {
    jv *text = desc.failed ? NULL : jv_strcopy(a, desc.data, desc.len);
    if (text) jv_set(o, "description", text);
  }
  sb_free(&desc);
  return o;
}

jv *ad_schema_openai_strict(ar_arena *a, const jv *schema) {
  return convert(a, schema, D_OPENAI, 0);
}

jv *ad_schema_anthropic(ar_arena *a, const jv *schema) {
  return convert(a, schema, D_ANTHROPIC, 0);
}

jv *ad_schema_gemini(ar_arena *a, const jv *schema) {
  return convert(a, schema, D_GEMINI, 0);
}
