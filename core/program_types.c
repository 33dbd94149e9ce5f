/* The static types of the statements' values, and what a type checker
   proves from them at load time. Every rule reports only an error that
   every run would meet: a type that is not known (any, an error object, a
   join of two kinds) never reports. */
#include "programint.h"

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
