#include "json.h"

#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static jv *node(ar_arena *a, jv_type t) {
  jv *v = ar_alloc(a, sizeof *v);
  if (v) v->type = t;
  return v;
}

jv *jv_null(ar_arena *a) { return node(a, JV_NULL); }

jv *jv_bool(ar_arena *a, int b) {
  jv *v = node(a, JV_BOOL);
  if (v) v->b = b != 0;
  return v;
}

jv *jv_int(ar_arena *a, long long i) {
  jv *v = node(a, JV_INT);
  if (v) v->i = i;
  return v;
}

jv *jv_num(ar_arena *a, double n) {
  jv *v = node(a, JV_NUM);
  if (v) v->n = n;
  return v;
}

jv *jv_str(ar_arena *a, const char *s, size_t len) {
  jv *v = node(a, JV_STR);
  if (v) { v->s = s; v->len = len; }
  return v;
}

jv *jv_cstr(ar_arena *a, const char *s) { return jv_str(a, s, strlen(s)); }
jv *jv_arr(ar_arena *a) { return node(a, JV_ARR); }
jv *jv_obj(ar_arena *a) { return node(a, JV_OBJ); }

static void append(jv *c, jv *v) {
  if (c->last) c->last->next = v; else c->first = v;
  c->last = v;
  c->count++;
}

jv *jv_push(jv *arr, jv *v) {
  if (arr && v) append(arr, v);
  return arr;
}

jv *jv_set(jv *obj, const char *key, jv *v) {
  if (obj && v) {
    v->key = key;
    append(obj, v);
  }
  return obj;
}

jv *jv_get(const jv *obj, const char *key) {
  for (jv *m = obj ? obj->first : NULL; m; m = m->next)
    if (strcmp(m->key, key) == 0) return m;
  return NULL;
}

void json_write_string(sb_buf *b, const char *s, size_t len) {
  static const char hex[] = "0123456789abcdef";
  sb_addc(b, '"');
  size_t run = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7F) continue;
    sb_add(b, s + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': sb_add(b, "\\\"", 2); break;
      case '\\': sb_add(b, "\\\\", 2); break;
      case '\n': sb_add(b, "\\n", 2); break;
      case '\r': sb_add(b, "\\r", 2); break;
      case '\t': sb_add(b, "\\t", 2); break;
      case '\b': sb_add(b, "\\b", 2); break;
      case '\f': sb_add(b, "\\f", 2); break;
      default: {
        char e[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
        sb_add(b, e, 6);
      }
    }
  }
  sb_add(b, s + run, len - run);
  sb_addc(b, '"');
}

int json_format_number(double d, char out[40]) {
  if (!isfinite(d)) return 0;
  if (d == 0) { strcpy(out, signbit(d) ? "-0" : "0"); return 1; }
  if (d == floor(d) && fabs(d) < 9007199254740992.0) {
    snprintf(out, 40, "%.0f", d);
    return 1;
  }
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(out, 40, "%.*g", prec, d);
    if (strtod(out, NULL) == d) break;
  }
  /* the C library writes the locale's decimal point; JSON wants '.' */
  const char *point = localeconv()->decimal_point;
  if (point && point[0] && point[0] != '.' && !point[1]) {
    char *p = strchr(out, point[0]);
    if (p) *p = '.';
  }
  return 1;
}

static void newline(sb_buf *b, int indent, int level) {
  if (indent <= 0) return;
  sb_addc(b, '\n');
  for (int i = 0; i < indent * level; i++) sb_addc(b, ' ');
}

static int scalars_only(const jv *arr) {
  for (const jv *m = arr->first; m; m = m->next)
    if (m->type == JV_ARR || m->type == JV_OBJ) return 0;
  return 1;
}

static void write_value(sb_buf *b, const jv *v, int indent, int level) {
  char num[40];
  switch (v->type) {
    case JV_NULL: sb_adds(b, "null"); break;
    case JV_BOOL: sb_adds(b, v->b ? "true" : "false"); break;
    case JV_INT: sb_printf(b, "%lld", v->i); break;
    case JV_NUM:
      if (json_format_number(v->n, num)) sb_adds(b, num); else sb_adds(b, "null");
      break;
    case JV_STR: json_write_string(b, v->s, v->len); break;
    case JV_ARR: case JV_OBJ: {
      int obj = v->type == JV_OBJ;
      sb_addc(b, obj ? '{' : '[');
      if (!v->first) { sb_addc(b, obj ? '}' : ']'); break; }
      if (!obj && indent > 0 && scalars_only(v)) {
        /* a list of scalars stays on one line: ["add", "multiply"] */
        for (const jv *m = v->first; m; m = m->next) {
          write_value(b, m, indent, level + 1);
          if (m->next) sb_adds(b, ", ");
        }
        sb_addc(b, ']');
        break;
      }
      for (const jv *m = v->first; m; m = m->next) {
        newline(b, indent, level + 1);
        if (obj) {
          json_write_string(b, m->key, strlen(m->key));
          sb_adds(b, indent > 0 ? ": " : ":");
        }
        write_value(b, m, indent, level + 1);
        if (m->next) sb_addc(b, ',');
      }
      newline(b, indent, level);
      sb_addc(b, obj ? '}' : ']');
      break;
    }
  }
}

void jv_write(sb_buf *b, const jv *v, int indent) {
  if (v) write_value(b, v, indent, 0);
  else sb_adds(b, "null");
}
