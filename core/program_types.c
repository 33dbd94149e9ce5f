/* The static types of the statements' values, and what a type checker
   proves from them at load time: fields that a schema does not have,
   operators on values that can never take them, literal arguments that a
   tool's input refuses, and schemas that no value can satisfy. Every rule
   reports only an error that every run would meet: a type that is not
   known (any, an error object, a join of two kinds) never reports. */
#include <math.h>
#include <string.h>

#include "json.h"
#include "programint.h"
#include "strbuf.h"

static const vt_type UNKNOWN = { VT_UNKNOWN, 0, NULL, NULL };

vt_type vt_from(const pm_type *t, int nullable) {
  vt_type v = { VT_UNKNOWN, nullable, NULL, NULL };
  if (!t) return UNKNOWN;
  switch (t->kind) {
    case PT_STRING: case PT_ENUM: v.kind = VT_STRING; break;
    case PT_INT: v.kind = VT_INT; break;
    case PT_FLOAT: v.kind = VT_FLOAT; break;
    case PT_BOOL: v.kind = VT_BOOL; break;
    case PT_SCHEMA: v.kind = t->schema ? VT_RECORD : VT_UNKNOWN; v.schema = t->schema; break;
    case PT_ARRAY: v.kind = VT_ARRAY; v.elem = t->elem; break;
    default: return UNKNOWN;
  }
  return v;
}

vt_type vt_kind_of(vt_kind k) {
  vt_type v = { k, 0, NULL, NULL };
  return v;
}

vt_type vt_join(vt_type a, vt_type b) {
  if (a.kind == VT_UNKNOWN || b.kind == VT_UNKNOWN) return UNKNOWN;
  if (a.kind == VT_NULL) { b.nullable = 1; return b.kind == VT_NULL ? a : b; }
  if (b.kind == VT_NULL) { a.nullable = 1; return a; }
  a.nullable = a.nullable || b.nullable;
  if (a.kind == b.kind) {
    if (a.kind == VT_RECORD && a.schema != b.schema) return UNKNOWN;
    if (a.kind == VT_ARRAY && a.elem != b.elem) a.elem = NULL;
    return a;
  }
  if ((a.kind == VT_INT || a.kind == VT_FLOAT) && (b.kind == VT_INT || b.kind == VT_FLOAT)) {
    a.kind = VT_FLOAT;
    return a;
  }
  return UNKNOWN;
}

/* The word the run-time errors use for a value of this type. */
static const char *word(vt_kind k) {
  switch (k) {
    case VT_NULL: return "null";
    case VT_BOOL: return "boolean";
    case VT_INT: case VT_FLOAT: return "number";
    case VT_STRING: return "string";
    case VT_ARRAY: return "array";
    default: return "object";
  }
}

static int known(vt_type t) { return t.kind != VT_UNKNOWN; }
static int number(vt_type t) { return t.kind == VT_INT || t.kind == VT_FLOAT; }
static int scalar(vt_type t) { return number(t) || t.kind == VT_STRING || t.kind == VT_BOOL || t.kind == VT_NULL; }

/* ------------------------------------------------------------ fields */

static const pm_field *record_field(const pm_schema *s, const char *name) {
  for (int i = 0; i < s->nfields; i++)
    if (strcmp(s->fields[i].name, name) == 0) return &s->fields[i];
  return NULL;
}

/* " Did you mean 'x'?" among the fields of s (a union's: its tag and its members'). */
static const char *near_field(pm_ctx *c, const pm_schema *s, const char *name) {
  int n = 0;
  if (s->is_union) {
    n = 1;
    for (int i = 0; i < s->nmembers; i++) n += s->members[i]->nfields;
  } else {
    n = s->nfields;
  }
  const char **names = ar_alloc(c->a, sizeof *names * (size_t)(n ? n : 1));
  if (!names) return "";
  int k = 0;
  if (s->is_union) {
    if (s->tag) names[k++] = s->tag;
    for (int i = 0; i < s->nmembers; i++)
      for (int j = 0; j < s->members[i]->nfields; j++) names[k++] = s->members[i]->fields[j].name;
  } else {
    for (int j = 0; j < s->nfields; j++) names[k++] = s->fields[j].name;
  }
  return pm_suggestion(c, name, names, k);
}

vt_type vt_field(pm_ctx *c, const ast_expr *e, vt_type obj) {
  const char *name = e->str.s;
  if (!name) return UNKNOWN;
  if (scalar(obj)) {
    ERR(c, e->pos, "cannot read field '%s' of %s", name, word(obj.kind));
    return UNKNOWN;
  }
  if (obj.kind != VT_RECORD) return UNKNOWN;
  const pm_schema *s = obj.schema;
  if (!s->is_union) {
    const pm_field *f = record_field(s, name);
    if (f) return vt_from(f->type, !f->required);
  } else {
    if (s->tag && strcmp(s->tag, name) == 0) return vt_kind_of(VT_STRING);
    vt_type t = { VT_NULL, 1, NULL, NULL };
    int found = 0;
    for (int i = 0; i < s->nmembers; i++) {
      const pm_field *f = record_field(s->members[i], name);
      vt_type ft = f ? vt_from(f->type, !f->required) : vt_kind_of(VT_NULL);
      t = i == 0 ? ft : vt_join(t, ft);
      found += f != NULL;
    }
    if (found) return t;
  }
  ERR(c, e->pos, "Schema '%s' has no field '%s'.%s", s->name, name, near_field(c, s, name));
  return UNKNOWN;
}

vt_type vt_index(pm_ctx *c, const ast_expr *e, vt_type obj) {
  if (scalar(obj)) {
    ERR(c, e->pos, "cannot index %s", word(obj.kind));
    return UNKNOWN;
  }
  if (obj.kind == VT_ARRAY && obj.elem) return vt_from(obj.elem, 1);   /* past the end: null */
  return UNKNOWN;
}

/* --------------------------------------------------------- operators */

static const char *op_text(ex_op op) {
  static const char *const texts[] = { "-", "not", "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "and", "or" };
  return texts[op];
}

vt_type vt_unary(pm_ctx *c, const ast_expr *e, vt_type a) {
  if (e->op == OP_NOT) return vt_kind_of(VT_BOOL);
  if (known(a) && !number(a)) {
    ERR(c, e->pos, "cannot negate %s", word(a.kind));
    return UNKNOWN;
  }
  return known(a) ? vt_kind_of(a.kind) : UNKNOWN;
}

vt_type vt_binary(pm_ctx *c, const ast_expr *e, vt_type a, vt_type b) {
  ex_op op = e->op;
  if (op == OP_AND || op == OP_OR || op == OP_EQ || op == OP_NE) return vt_kind_of(VT_BOOL);
  /* + and the comparisons take two numbers or two strings, the others two
     numbers; null takes none. A kind that fits neither way refuses every
     value of the other side. */
  int ordered = op == OP_LT || op == OP_LE || op == OP_GT || op == OP_GE, text = op == OP_ADD || ordered;
  int bad_a = known(a) && !number(a) && !(text && a.kind == VT_STRING);
  int bad_b = known(b) && !number(b) && !(text && b.kind == VT_STRING);
  int mixed = known(a) && known(b) && number(a) != number(b);
  if (bad_a || bad_b || mixed) {
    const char *l = word(a.kind), *r = word(b.kind);
    if (!known(a) || !known(b)) {
      const char *one = known(a) ? l : r;
      if (ordered) ERR(c, e->pos, "cannot compare %s with '%s'", one, op_text(op));
      else ERR(c, e->pos, "cannot apply '%s' to %s", op_text(op), one);
    } else if (ordered) {
      ERR(c, e->pos, "cannot compare %s and %s with '%s'", l, r, op_text(op));
    } else {
      ERR(c, e->pos, "cannot apply '%s' to %s and %s", op_text(op), l, r);
    }
    return UNKNOWN;
  }
  if (ordered) return vt_kind_of(VT_BOOL);
  if (a.kind == VT_STRING && b.kind == VT_STRING) return vt_kind_of(VT_STRING);
  if (number(a) && number(b))
    return vt_kind_of(op != OP_DIV && a.kind == VT_INT && b.kind == VT_INT ? VT_INT : VT_FLOAT);
  return UNKNOWN;
}

/* ------------------------------------------------- values against types */

static const char *enum_list(pm_ctx *c, const pm_type *t) {
  sb_buf b;
  sb_init(&b);
  for (int i = 0; i < t->nvalues && b.len < 300; i++) {
    if (i) sb_adds(&b, ", ");
    json_write_string(&b, t->values[i].s, t->values[i].len);
  }
  const char *s = ar_printf(c->a, "%s", b.failed || !b.data ? "" : sb_str(&b));
  sb_free(&b);
  return s;
}

/* What input validation says of a value that is not of type t. */
static void report_type(pm_ctx *c, ast_pos pos, const pm_type *t, const char *path) {
  switch (t->kind) {
    case PT_STRING: ERR(c, pos, "%s must be a string", path); break;
    case PT_INT: ERR(c, pos, "%s must be an integer", path); break;
    case PT_FLOAT: ERR(c, pos, "%s must be a number", path); break;
    case PT_BOOL: ERR(c, pos, "%s must be a boolean", path); break;
    case PT_ENUM: ERR(c, pos, "%s must be one of %s", path, enum_list(c, t)); break;
    case PT_ARRAY: ERR(c, pos, "%s must be an array", path); break;
    case PT_SCHEMA: ERR(c, pos, "%s must be an object", path); break;
    default: break;
  }
}

/* Where e begins: `d.kind` at `d`, not at its '.'. */
static ast_pos start_of(const ast_expr *e) {
  while ((e->kind == EX_FIELD || e->kind == EX_INDEX || e->kind == EX_BINARY) && e->a) e = e->a;
  return e->pos;
}

void vt_fits(pm_ctx *c, const ast_expr *e, vt_type have, const pm_type *want, int required, const char *path) {
  if (!want || want->kind == PT_ANY || !known(have)) return;
  ast_pos at = start_of(e);
  /* null on an optional field counts as missing; a value that may be null
     is refused on every run only when it is refused when it is not */
  if (have.kind == VT_NULL || have.nullable) {
    if (!required) return;
    if (have.kind == VT_NULL) { report_type(c, at, want, path); return; }
  }
  int ok = 1;
  switch (want->kind) {
    case PT_STRING: ok = have.kind == VT_STRING; break;
    case PT_ENUM:
      ok = have.kind == VT_STRING;
      if (ok && e->kind == EX_STRING) {
        const char **names = ar_alloc(c->a, sizeof *names * (size_t)(want->nvalues ? want->nvalues : 1));
        for (int i = 0; i < want->nvalues; i++) {
          if (want->values[i].len == e->str.len && memcmp(want->values[i].s, e->str.s, e->str.len) == 0) return;
          if (names) names[i] = want->values[i].s;
        }
        const char *near = names && strlen(e->str.s) == e->str.len ? dg_suggest(e->str.s, names, want->nvalues) : NULL;
        ERR(c, at, "%s must be one of %s%s%s%s", path, enum_list(c, want), near ? ". Did you mean \"" : "",
            near ? near : "", near ? "\"?" : "");
        return;
      }
      break;
    case PT_INT: {
      pm_num n;
      ok = number(have);
      if (ok && have.kind == VT_FLOAT && pm_lit_number(e, &n) && !n.is_int) {
        if (n.d != floor(n.d)) ok = 0;
        else if (!(n.d >= -9223372036854775808.0 && n.d < 9223372036854775808.0)) {
          ERR(c, at, "%s must be an integer that fits in 64 bits (from -2^63 to 2^63 - 1)", path);
          return;
        }
      }
      break;
    }
    case PT_FLOAT: ok = number(have); break;
    case PT_BOOL: ok = have.kind == VT_BOOL; break;
    /* an empty table is an empty array too */
    case PT_ARRAY: ok = !scalar(have) && !(e->kind == EX_OBJECT && e->nprops > 0); break;
    case PT_SCHEMA: ok = !scalar(have) && have.kind != VT_ARRAY; break;
    default: break;
  }
  if (!ok) report_type(c, at, want, path);
}

static const ast_prop *prop_named(const ast_expr *obj, const char *name) {
  const ast_prop *q = obj ? obj->props : NULL;
  while (q && strcmp(q->key, name) != 0) q = q->next;
  return q;
}

const pm_field *vt_input_field(pm_ctx *c, const pm_schema *s, const ast_expr *obj, const ast_prop *q,
                               const char *path) {
  const pm_field *f = record_field(s, q->key);
  if (f) return f;
  const char *near = near_field(c, s, q->key);
  /* no close name: a field given under a wrong name is likely the one
     required field the literal lacks */
  const pm_field *lacking = NULL;
  for (int i = 0; !*near && i < s->nfields; i++) {
    if (!s->fields[i].required || prop_named(obj, s->fields[i].name)) continue;
    if (lacking) { lacking = NULL; break; }
    lacking = &s->fields[i];
  }
  if (lacking) near = ar_printf(c->a, " Did you mean '%s'?", lacking->name);
  ERR(c, q->pos, "%s.%s is not allowed.%s", path, q->key, near);
  return NULL;
}

void vt_missing(pm_ctx *c, const pm_schema *s, const ast_expr *obj, ast_pos pos, const char *path) {
  for (int i = 0; i < s->nfields; i++) {
    const pm_field *f = &s->fields[i];
    if (!f->required) continue;
    if (!prop_named(obj, f->name)) ERR(c, pos, "%s.%s is required", path, f->name);
  }
}

/* ------------------------------------------------ schemas that hold values */

/* The schema a value of type t cannot do without: t itself, or the items
   of an array that must have some; NULL when t has a value of its own. */
static const pm_schema *needed_schema(const pm_type *t) {
  while (t && t->kind == PT_ARRAY && (t->rules & PR_MINITEMS) && t->minitems > 0) t = t->elem;
  return t && t->kind == PT_SCHEMA ? t->schema : NULL;
}

/* A schema can hold a value when a record's required fields all can, or
   when one member of a union can: a least fixed point, found by a worklist
   from the schemas that need nothing (linear in the fields). */
void vt_check_schemas(pm_ctx *c) {
  pm_program *p = c->p;
  int n = p->nschemas, nedges = 0;
  for (int i = 0; i < n; i++)
    nedges += p->schemas[i]->is_union ? p->schemas[i]->nmembers : p->schemas[i]->nfields;
  int *need = ar_alloc(c->a, sizeof *need * (size_t)(n + 1));
  int *head = ar_alloc(c->a, sizeof *head * (size_t)(n + 1));
  int *next = ar_alloc(c->a, sizeof *next * (size_t)(nedges + 1));
  int *to = ar_alloc(c->a, sizeof *to * (size_t)(nedges + 1));
  int *queue = ar_alloc(c->a, sizeof *queue * (size_t)(n + 1));
  char *holds = ar_alloc(c->a, (size_t)(n + 1));
  if (!need || !head || !next || !to || !queue || !holds) return;
  int e = 0, nq = 0;
  for (int i = 0; i < n; i++) head[i] = -1;
  for (int i = 0; i < n; i++) {
    const pm_schema *s = p->schemas[i];
    need[i] = 0;
    holds[i] = 0;
    if (s->is_union) {
      need[i] = s->nmembers > 0;
      for (int j = 0; j < s->nmembers; j++) {
        to[e] = i, next[e] = head[s->members[j]->index], head[s->members[j]->index] = e++;
      }
    } else {
      for (int j = 0; j < s->nfields; j++) {
        const pm_schema *dep = s->fields[j].required ? needed_schema(s->fields[j].type) : NULL;
        if (!dep) continue;
        need[i]++;
        to[e] = i, next[e] = head[dep->index], head[dep->index] = e++;
      }
    }
    if (need[i] == 0) { holds[i] = 1; queue[nq++] = i; }
  }
  for (int q = 0; q < nq; q++)
    for (int k = head[queue[q]]; k >= 0; k = next[k])
      if (!holds[to[k]] && --need[to[k]] == 0) { holds[to[k]] = 1; queue[nq++] = to[k]; }
  for (int i = 0; i < n; i++) {
    const pm_schema *s = p->schemas[i];
    if (holds[i] || s->internal) continue;
    if (s->is_union) {
      const char *names = "";
      for (int j = 0; j < s->nmembers && j < 8; j++)
        names = ar_printf(c->a, "%s%s%s", names, j ? ", " : "", s->members[j]->name);
      ERR(c, s->pos, "Schema '%s' can never be satisfied: none of its members (%s%s) can be built.", s->name, names,
          s->nmembers > 8 ? ", ..." : "");
      continue;
    }
    for (int j = 0; j < s->nfields; j++) {
      const pm_schema *dep = s->fields[j].required ? needed_schema(s->fields[j].type) : NULL;
      if (!dep || holds[dep->index]) continue;
      ERR(c, s->fields[j].pos,
          "Schema '%s' can never be satisfied: its required field '%s' needs a value of '%s', and none can be "
          "built. Make a field optional ('%s?: ...'), or give the cycle a way out.", s->name, s->fields[j].name,
          dep->name, s->fields[j].name);
      break;
    }
  }
}
