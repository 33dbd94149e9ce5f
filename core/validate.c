#include "validate.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"
#include "lerror.h"
#include "json.h"
#include "ljson.h"
#include "regex.h"
#include "strbuf.h"
#include "utf8.h"

/* Records up to this many fields find a key by a linear scan of pointers. */
#define LV_LINEAR_FIELDS 16

typedef struct lv_rec {
  const void **objs;          /* interned field names as lua_topointer sees them, by field index */
  int *defaults;              /* index in the anchor table, 0 when none */
  unsigned *hash;             /* bigger records: pointer hash -> field index + 1 */
  unsigned hmask;
  const char *tag;            /* unions: interned tag name */
} lv_rec;

struct lv_program {
  const pm_program *p;
  lv_rec *recs;               /* by schema index */
  int anchor;                 /* registry ref of the table keeping names and defaults */
  lv_limits lim;
};

void lv_default_limits(lv_limits *lim) {
  lim->max_depth = LIM_MAX_DEPTH;
  lim->max_string_bytes = LIM_MAX_STRING_BYTES;
  lim->max_violations = LIM_MAX_VIOLATIONS;
  lim->max_pattern_work = LIM_MAX_PATTERN_WORK;
}

/* ---------------------------------------------------------------- binding */

static size_t ptr_hash(const void *p) {
  uintptr_t x = (uintptr_t)p;
  x ^= x >> 17;
  x *= (uintptr_t)0x9E3779B97F4A7C15ull;
  return (size_t)(x ^ (x >> 29));
}

static const char *intern(lua_State *L, int anchor, int *n, const char *s, size_t len, const void **obj) {
  lua_pushlstring(L, s, len);
  const char *k = lua_tostring(L, -1);
  if (obj) *obj = lua_topointer(L, -1);
  lua_rawseti(L, anchor, ++*n);
  return k;
}

static void push_literal(lua_State *L, const ast_expr *e, int depth);

static void push_literal(lua_State *L, const ast_expr *e, int depth) {
  if (!lua_checkstack(L, 3) || depth > LIM_DEFAULT_VALUE_DEPTH) { lua_pushnil(L); return; }
  switch (e->kind) {
    case EX_NULL: lua_pushlightuserdata(L, NULL); break;
    case EX_TRUE: lua_pushboolean(L, 1); break;
    case EX_FALSE: lua_pushboolean(L, 0); break;
    case EX_INT: lua_pushinteger(L, (lua_Integer)e->ival); break;
    case EX_FLOAT: lua_pushnumber(L, e->fval); break;
    case EX_STRING: lua_pushlstring(L, e->str.s, e->str.len); break;
    case EX_UNARY:
      push_literal(L, e->a, depth + 1);
      if (lua_type(L, -1) == LUA_TNUMBER) {
#if LUA_VERSION_NUM >= 503
        if (lua_isinteger(L, -1)) { lua_Integer i = lua_tointeger(L, -1); lua_pop(L, 1); lua_pushinteger(L, (lua_Integer)(0u - (lua_Unsigned)i)); break; }
#endif
        lua_Number n = lua_tonumber(L, -1);
        lua_pop(L, 1);
        lua_pushnumber(L, -n);
      }
      break;
    case EX_ARRAY: {
      lua_createtable(L, e->nitems, 0);
      int i = 0;
      for (const ast_expr *x = e->items; x; x = x->next) {
        push_literal(L, x, depth + 1);
        lua_rawseti(L, -2, ++i);
      }
      if (i == 0) {
        /* [] prints as [] wherever it is filled, an `any` field too */
        lj_push_array_mt(L);
        lua_setmetatable(L, -2);
      }
      break;
    }
    case EX_OBJECT:
      lua_createtable(L, 0, e->nprops);
      for (const ast_prop *q = e->props; q; q = q->next) {
        push_literal(L, q->value, depth + 1);
        lua_setfield(L, -2, q->key);
      }
      break;
    default: lua_pushnil(L); break;
  }
}

lv_program *lv_bind(lua_State *L, const pm_program *p, const lv_limits *lim) {
  lv_program *v = calloc(1, sizeof *v);
  if (!v) return NULL;
  v->p = p;
  if (lim) v->lim = *lim; else lv_default_limits(&v->lim);
  if (v->lim.max_depth > LIM_MAX_DEPTH_CAP) v->lim.max_depth = LIM_MAX_DEPTH_CAP;
  if (v->lim.max_depth < 1) v->lim.max_depth = 1;
  if (v->lim.max_violations < 1) v->lim.max_violations = 1;
  v->recs = calloc((size_t)p->nschemas + 1, sizeof *v->recs);
  if (!v->recs) { free(v); return NULL; }
  luaL_checkstack(L, 8, "binding a program");
  lua_newtable(L);
  int anchor = lua_gettop(L), n = 0;
  for (int i = 0; i < p->nschemas; i++) {
    const pm_schema *s = p->schemas[i];
    lv_rec *r = &v->recs[i];
    if (s->is_union) {
      if (s->tag) r->tag = intern(L, anchor, &n, s->tag, strlen(s->tag), NULL);
      continue;
    }
    r->objs = calloc((size_t)s->nfields + 1, sizeof *r->objs);
    r->defaults = calloc((size_t)s->nfields + 1, sizeof *r->defaults);
    if (!r->objs || !r->defaults) goto fail;
    for (int j = 0; j < s->nfields; j++) {
      const pm_field *f = &s->fields[j];
      intern(L, anchor, &n, f->name, f->len, &r->objs[j]);
      if (f->default_value) {
        push_literal(L, f->default_value, 0);
        lua_rawseti(L, anchor, ++n);
        r->defaults[j] = n;
      }
    }
    if (s->nfields > LV_LINEAR_FIELDS) {
      unsigned cap = 32;
      while (cap < (unsigned)s->nfields * 2) cap *= 2;
      r->hash = calloc(cap, sizeof *r->hash);
      if (!r->hash) goto fail;
      r->hmask = cap - 1;
      for (int j = 0; j < s->nfields; j++) {
        size_t h = ptr_hash(r->objs[j]) & r->hmask;
        while (r->hash[h]) h = (h + 1) & r->hmask;
        r->hash[h] = (unsigned)j + 1;
      }
    }
  }
  v->anchor = luaL_ref(L, LUA_REGISTRYINDEX);
  return v;
fail:
  lua_pop(L, 1);
  v->anchor = LUA_NOREF;
  lv_free(L, v);
  return NULL;
}

void lv_free(lua_State *L, lv_program *v) {
  if (!v) return;
  if (L && v->anchor != LUA_NOREF && v->anchor != LUA_REFNIL) luaL_unref(L, LUA_REGISTRYINDEX, v->anchor);
  if (v->recs)
    for (int i = 0; i < v->p->nschemas; i++) {
      free(v->recs[i].objs);
      free(v->recs[i].defaults);
      free(v->recs[i].hash);
    }
  free(v->recs);
  free(v);
}

/* ---------------------------------------------------------------- context */

typedef struct lv_seg {
  const char *key;            /* a field name, or NULL for an index */
  size_t len;
  lua_Integer index;
  int raw;                    /* key is already rendered text, as "[true]" */
} lv_seg;

typedef struct lv_ctx {
  lua_State *L;
  const lv_program *v;
  const char *root;
  int output;
  int write;
  int trial;                  /* > 0: stop at the first error and record nothing */
  int failed;                 /* an error happened (trial) or the error cap was hit */
  char *why;                  /* in a trial, when set: gets the first error, with its path */
  size_t whylen;
  lv_result *r;
  int depth;
  lv_seg path[LIM_MAX_DEPTH_CAP + 2];
  int npath;
  const void *tables[LIM_MAX_DEPTH_CAP + 2];
  char keytext[64];           /* a rendered non-string key on the path */
} lv_ctx;

static void push_seg(lv_ctx *c, const char *key, size_t len, lua_Integer index) {
  lv_seg *s = &c->path[c->npath++];
  s->key = key;
  s->len = len;
  s->index = index;
  s->raw = 0;
}

static int is_ident(const char *s, size_t len) {
  if (len == 0 || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return 0;
  for (size_t i = 1; i < len; i++)
    if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9')))
      return 0;
  return 1;
}

/* Paths deeper than this show their first and last segments only. */
#define LV_PATH_SHOWN 8

/* Decimal digits of v into out (21 bytes at least); returns their count. */
static size_t fmt_int(long long v, char *out) {
  char tmp[24];
  size_t n = 0, len = 0;
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
  if (v < 0) out[len++] = '-';
  while (n) out[len++] = tmp[--n];
  out[len] = '\0';
  return len;
}

/* Where a path is written: a growable buffer, or a fixed one (sb NULL)
   that sets `over` rather than grow. */
typedef struct lv_out {
  sb_buf *sb;
  char *buf;
  size_t len, cap;
  int over;
} lv_out;

static void out_add(lv_out *o, const char *s, size_t n) {
  if (o->sb) { sb_add(o->sb, s, n); return; }
  if (o->over || n >= o->cap - o->len) { o->over = 1; return; }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
}

/* The path, then a NUL and `text` when text is not NULL. */
static void write_path(lv_ctx *c, const char *text, lv_out *o) {
  out_add(o, c->root, strlen(c->root));
  for (int i = 0; i < c->npath; i++) {
    const lv_seg *s = &c->path[i];
    char num[32];
    if (c->npath > 2 * LV_PATH_SHOWN && i == LV_PATH_SHOWN) {
      size_t n = fmt_int((long long)(c->npath - 2 * LV_PATH_SHOWN), num + 1);
      num[0] = '<';
      out_add(o, num, n + 1);
      out_add(o, " more levels>", 13);
      i = c->npath - LV_PATH_SHOWN - 1;
      continue;
    }
    if (s->raw) {
      out_add(o, s->key, s->len);
    } else if (!s->key) {
      size_t n = fmt_int((long long)s->index, num + 1);
      num[0] = '[';
      num[n + 1] = ']';
      out_add(o, num, n + 2);
    } else if (is_ident(s->key, s->len)) {
      out_add(o, ".", 1);
      out_add(o, s->key, s->len);
    } else if (o->sb) {
      sb_addc(o->sb, '[');
      json_write_string(o->sb, s->key, s->len > 60 ? 60 : s->len);
      sb_addc(o->sb, ']');
    } else {
      o->over = 1;            /* rare: the growable buffer does it */
    }
  }
  if (text) {
    out_add(o, "", 1);
    out_add(o, text, strlen(text));
  }
  if (!o->sb && !o->over) o->buf[o->len] = '\0';
}

/* The path, then a NUL and `text` when text is not NULL: one block, that
   lv_result_free frees through the path. */
static char *render_path_text(lv_ctx *c, const char *text) {
  sb_buf b;
  sb_init(&b);
  lv_out o = { &b, NULL, 0, 0, 0 };
  write_path(c, text, &o);
  char *out = b.failed ? NULL : b.data;
  if (!out) sb_free(&b);
  return out;
}

static char *render_path(lv_ctx *c) { return render_path_text(c, NULL); }

static void free_path(lv_result *r, char *path) {
  if (path != r->inline_text) free(path);
}

static void add_issue(lv_result *r, int warn, char *path, char *text, const char *rule, int seq) {
  lv_issue **list = warn ? &r->warnings : &r->errors;
  int *n = warn ? &r->nwarnings : &r->nerrors;
  if (!warn && *n == 0) {
    *list = &r->inline_error;   /* the first error: nothing to allocate */
  } else if ((*n & (*n - 1)) == 0) {
    /* grow at powers of two */
    int inline_list = *list == &r->inline_error;
    lv_issue *more = realloc(inline_list ? NULL : *list, sizeof **list * (size_t)(*n ? *n * 2 : 1));
    if (!more) { free_path(r, path); return; }
    if (inline_list) more[0] = r->inline_error;
    *list = more;
  }
  (*list)[*n].path = path;
  (*list)[*n].text = text;
  (*list)[*n].rule = rule;
  (*list)[*n].seq = seq;
  (*n)++;
}

/* Whether a broken rule reported now would be recorded (or explain a
   union); when not, *ret is what reporting it returns, and no text needs to
   be made: formatting waits until it is known to be needed. */
static int needs_text(lv_ctx *c, int soft, int *ret) {
  int warn = soft && c->output;
  if (c->trial) {
    if (warn) { *ret = 1; return 0; }
    if (c->why && !c->why[0]) return 1;
    c->failed = 1;
    *ret = 0;
    return 0;
  }
  if (!warn && c->r->nerrors >= c->v->lim.max_violations) {
    c->failed = 1;
    *ret = 0;
    return 0;
  }
  return 1;
}

/* Records a broken rule, after needs_text said so; `soft` ones are warnings
   on output. Returns 0 for an error, 1 for a warning. */
static int report_text(lv_ctx *c, int soft, const char *rule, const char *text) {
  int warn = soft && c->output;
  if (c->trial) {
    /* explaining why a union member did not fit */
    char *path = render_path(c);
    snprintf(c->why, c->whylen, "%s %s", path ? path : "?", text);
    free(path);
    c->failed = 1;
    return 0;
  }
  /* the first error's path and text go in the result itself when they fit */
  char *path = NULL;
  if (!warn && c->r->nerrors == 0) {
    lv_out o = { NULL, c->r->inline_text, 0, sizeof c->r->inline_text, 0 };
    write_path(c, text, &o);
    if (!o.over) path = c->r->inline_text;
  }
  if (!path) path = render_path_text(c, text);
  char *stored = path ? path + strlen(path) + 1 : NULL;
  int seq = c->r->nerrors + c->r->nwarnings;
  if (warn) {
    add_issue(c->r, 1, path, stored, rule, seq);
    return 1;
  }
  add_issue(c->r, 0, path, stored, rule, seq);
  if (c->r->nerrors >= c->v->lim.max_violations) c->failed = c->r->truncated = 1;
  return 0;
}

/* Records a broken rule; `soft` ones are warnings on output. Returns 0. */
static int report(lv_ctx *c, int soft, const char *rule, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 4, 5)))
#endif
  ;

static int report(lv_ctx *c, int soft, const char *rule, const char *fmt, ...) {
  int ret;
  if (!needs_text(c, soft, &ret)) return ret;
  if (!strchr(fmt, '%')) return report_text(c, soft, rule, fmt);
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return report_text(c, soft, rule, buf);
}

/* Stop walking: a trial already failed, or the error cap was reached. */
#define STOPPED(c) ((c)->failed && ((c)->trial || (c)->r->nerrors >= (c)->v->lim.max_violations))

/* ----------------------------------------------------------------- scalars */

static void format_num(pm_num n, char out[40]) {
  if (n.is_int) fmt_int(n.i, out);
  else if (!json_format_number(n.d, out)) snprintf(out, 40, "%g", n.d);
}

/* "<words> <bound>", made only when it is recorded. */
static int report_bound(lv_ctx *c, int soft, const char *rule, const char *words, pm_num bound) {
  int ret;
  if (!needs_text(c, soft, &ret)) return ret;
  char text[80];
  size_t n = strlen(words);
  memcpy(text, words, n);
  text[n] = ' ';
  format_num(bound, text + n + 1);
  return report_text(c, soft, rule, text);
}

/* Reads the number at idx once: as an integer when it is one. */
static pm_num read_number(lua_State *L, int idx) {
  pm_num n;
#if LUA_VERSION_NUM >= 503
  if (lua_isinteger(L, idx)) {
    n.is_int = 1;
    n.i = (long long)lua_tointeger(L, idx);
    n.d = (double)n.i;
    return n;
  }
#endif
  n.is_int = 0;
  n.i = 0;
  n.d = (double)lua_tonumber(L, idx);
  return n;
}

/* An integer against a double, exactly: never through a conversion of the
   integer to double, which rounds past 2^53. <0, 0, >0. */
static int cmp_int_double(long long i, double d) {
  if (d >= 9223372036854775808.0) return -1;
  if (d < -9223372036854775808.0) return 1;
  double f = floor(d);                /* an integer in [-2^63, 2^63): exact as long long */
  long long k = (long long)f;
  if (i != k) return i < k ? -1 : 1;
  return d > f ? -1 : 0;
}

/* Compares a number with a bound, exactly: <0, 0, >0. */
static int cmp_num(pm_num x, pm_num b) {
  if (x.is_int && b.is_int) return x.i < b.i ? -1 : x.i > b.i;
  /* an integer within 2^53 is exact as a double (a number of Lua 5.1 is one) */
  if (b.is_int && b.i >= -9007199254740992LL && b.i <= 9007199254740992LL) {
    double d = (double)b.i;
    if (!x.is_int) return x.d < d ? -1 : x.d > d;
  }
  if (x.is_int) return cmp_int_double(x.i, b.d);
  if (b.is_int) return -cmp_int_double(b.i, x.d);
  return x.d < b.d ? -1 : x.d > b.d;
}

static int check_range(lv_ctx *c, const pm_type *t, pm_num x) {
  int ok = 1;
  if ((t->rules & PR_MIN) && cmp_num(x, t->min) < 0)
    ok = report_bound(c, t->soft, "minimum", "must be at least", t->min);
  if ((t->rules & PR_MAX) && cmp_num(x, t->max) > 0)
    ok = report_bound(c, t->soft, "maximum", "must be at most", t->max) && ok;
  return ok;
}

/* u8_count, with ASCII taken eight bytes at a time: a string's characters,
   or -1 when it is not UTF-8. */
static long long count_chars(const char *s, size_t len) {
  size_t i = 0;
  while (i + 8 <= len) {
    uint64_t w;
    memcpy(&w, s + i, 8);
    if (w & 0x8080808080808080ull) break;
    i += 8;
  }
  if (i == len) return (long long)len;
  long long rest = u8_count(s + i, len - i);
  return rest < 0 ? -1 : (long long)i + rest;
}

static int check_string(lv_ctx *c, const pm_type *t, int idx) {
  size_t len;
  const char *s = lua_tolstring(c->L, idx, &len);
  if (len > c->v->lim.max_string_bytes)
    return report(c, 0, "maxLength", "is too long (%zu bytes; the limit is %zu)", len, c->v->lim.max_string_bytes);
  long long n = count_chars(s, len);
  if (n < 0) return report(c, 0, "type", "must be valid UTF-8");
  if (!t) return 1;
  int ok = 1;
  if ((t->rules & PR_MINLEN) && n < t->minlen)
    ok = report(c, t->soft, "minLength", "must be at least %lld character%s long", t->minlen, t->minlen == 1 ? "" : "s");
  if ((t->rules & PR_MAXLEN) && n > t->maxlen)
    ok = report(c, t->soft, "maxLength", "must be at most %lld character%s long", t->maxlen, t->maxlen == 1 ? "" : "s") && ok;
  if ((t->rules & PR_PATTERN) && (double)len * (double)lre_cost(t->re) > c->v->lim.max_pattern_work) {
    /* the matcher is linear, but a big pattern on a big string is still slow */
    ok = report(c, 0, "pattern", "is too long to match against its pattern (%zu bytes)", len) && ok;
  } else if (t->rules & PR_PATTERN) {
    int m = lre_search(t->re, s, len);
    if (m < 0) ok = report(c, 0, "pattern", "could not be matched against its pattern (out of memory)") && ok;
    else if (m == 0 && !needs_text(c, t->soft, &m)) {
      ok = m && ok;
    } else if (m == 0) {
      sb_buf b;
      sb_init(&b);
      json_write_string(&b, t->pattern, t->pattern_len > 200 ? 200 : t->pattern_len);
      ok = report(c, t->soft, "pattern", "must match the pattern %s", sb_str(&b)) && ok;
      sb_free(&b);
    }
  }
  return ok;
}

static int check_enum(lv_ctx *c, const pm_type *t, int idx, int type) {
  if (type == LUA_TSTRING) {
    size_t len;
    const char *s = lua_tolstring(c->L, idx, &len);
    for (int i = 0; i < t->nvalues; i++)
      if (t->values[i].len == len && memcmp(t->values[i].s, s, len) == 0) return 1;
  }
  int ret;
  if (!needs_text(c, 0, &ret)) return ret;
  sb_buf b;
  sb_init(&b);
  for (int i = 0; i < t->nvalues && b.len < 300; i++) {
    if (i) sb_adds(&b, ", ");
    json_write_string(&b, t->values[i].s, t->values[i].len);
  }
  int ok = report(c, 0, "enum", "must be one of %s", sb_str(&b));
  sb_free(&b);
  return ok;
}

/* ------------------------------------------------------------------ tables */

static int check_value(lv_ctx *c, const pm_type *t, int idx, int type, int parent, int key);

/* Enters a table: depth, cycles and stack space. Returns 0 after reporting. */
static int enter_table(lv_ctx *c, int idx) {
  const void *p = lua_topointer(c->L, idx);
  if (c->depth >= c->v->lim.max_depth)
    return report(c, 0, "depth", "is nested too deeply (more than %d levels)", c->v->lim.max_depth);
  for (int i = 0; i < c->depth; i++)
    if (c->tables[i] == p) return report(c, 0, "cycle", "contains a cycle");
  /* each level uses about three slots: reserve for the next few at once */
  if (c->depth % 4 == 0 && !lua_checkstack(c->L, 16))
    return report(c, 0, "depth", "is nested too deeply (no stack space left)");
  c->tables[c->depth++] = p;
  return 1;
}

static const char *type_word(lua_State *L, int idx) {
  if (lc_isnull(L, idx)) return "null";
  return lua_typename(L, lua_type(L, idx));
}

/* Any JSON value: null, booleans, finite numbers, UTF-8 strings, arrays
   (tables with the keys 1..n) and objects (tables with string keys). */
static int check_json(lv_ctx *c, int idx) {
  lua_State *L = c->L;
  switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: return 1;
    case LUA_TNUMBER:
      if (!isfinite((double)lua_tonumber(L, idx))) return report(c, 0, "type", "must be a finite number");
      return 1;
    case LUA_TSTRING: return check_string(c, NULL, idx);
    case LUA_TLIGHTUSERDATA:
      if (lc_isnull(L, idx)) return 1;
      break;
    case LUA_TTABLE: {
      if (!enter_table(c, idx)) return 0;
      size_t n = lc_rawlen(L, idx);
      int ok = 1, strings = 0, items = 0, other = 0;
      lua_pushnil(L);
      while (lua_next(L, idx)) {
        int kt = lua_type(L, -2);
        if (kt == LUA_TSTRING) {
          strings++;
          size_t len;
          const char *k = lua_tolstring(L, -2, &len);
          push_seg(c, k, len, 0);
        } else if (kt == LUA_TNUMBER && lc_isinteger(L, -2) && lua_tointeger(L, -2) >= 1 &&
                   (size_t)lua_tointeger(L, -2) <= n) {
          items++;
          push_seg(c, NULL, 0, lua_tointeger(L, -2));
        } else {
          other++;
          lua_pop(L, 1);
          continue;
        }
        ok = check_json(c, lua_gettop(L)) && ok;
        c->npath--;
        lua_pop(L, 1);
        if (STOPPED(c)) { lua_pop(L, 1); break; }
      }
      c->depth--;
      if (!STOPPED(c) && (other || (strings && items) || (size_t)items != (items ? n : 0)))
        ok = report(c, 0, "type", "must be a JSON value: a table needs string keys or the items 1..n") && ok;
      return ok;
    }
    default: break;
  }
  return report(c, 0, "type", "must be a JSON value, not a %s", type_word(L, idx));
}

/* Finds the field named by the string key at -2, by interned pointer first. */
/* The field whose interned name is the object o (lua_topointer of a key,
   NULL for a number or a boolean), or -1: no other key is that object, as
   the anchor keeps the names alive. */
static int find_object(const pm_schema *s, const lv_rec *r, const void *o) {
  if (r->hash) {
    for (size_t h = ptr_hash(o) & r->hmask; r->hash[h]; h = (h + 1) & r->hmask)
      if (r->objs[r->hash[h] - 1] == o) return (int)r->hash[h] - 1;
  } else {
    for (int i = 0; i < s->nfields; i++)
      if (r->objs[i] == o) return i;
  }
  return -1;
}

/* A string key that is not an interned name (a long string, or a Lua that
   interns differently): the field of that name, or -1. */
static int find_field(const pm_schema *s, const char *k, size_t len) {
  for (int i = 0; i < s->nfields; i++)
    if (s->fields[i].len == len && memcmp(s->fields[i].name, k, len) == 0) return i;
  return -1;
}

static void push_copy(lua_State *L, int idx, int depth) {
  if (lua_type(L, idx) != LUA_TTABLE || depth > LIM_DEFAULT_VALUE_DEPTH || !lua_checkstack(L, 4)) {
    lua_pushvalue(L, idx);
    return;
  }
  lua_newtable(L);
  int dst = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pushvalue(L, -2);
    push_copy(L, lua_gettop(L) - 1, depth + 1);
    lua_rawset(L, dst);
    lua_pop(L, 1);
  }
  /* a default's only metatable is the JSON array mark */
  if (lua_getmetatable(L, idx)) lua_setmetatable(L, dst);
}

static void fill_default(lv_ctx *c, const pm_field *f, int def, int idx) {
  lua_State *L = c->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->v->anchor);
  lua_rawgeti(L, -1, def);
  lua_pushlstring(L, f->name, f->len);
  push_copy(L, lua_gettop(L) - 1, 0);
  lua_rawset(L, idx);
  lua_pop(L, 2);
}

static void describe_key(lv_ctx *c, int kidx) {
  lua_State *L = c->L;
  char *text = c->keytext;
  size_t size = sizeof c->keytext;
  lv_seg *s = &c->path[c->npath++];
  s->raw = 1;
  s->index = 0;
  if (lua_type(L, kidx) == LUA_TNUMBER) {
    char num[40];
    if (lc_isinteger(L, kidx)) snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, kidx));
    else if (!json_format_number((double)lua_tonumber(L, kidx), num)) snprintf(num, sizeof num, "nan");
    snprintf(text, size, "[%s]", num);
  } else if (lua_type(L, kidx) == LUA_TBOOLEAN) {
    snprintf(text, size, "[%s]", lua_toboolean(L, kidx) ? "true" : "false");
  } else {
    snprintf(text, size, "[<%s>]", type_word(L, kidx));
  }
  s->key = text;
  s->len = strlen(text);
}

/* A record; a union member also accepts its tag field, already checked. */
/* A table is an object unless it is marked as a JSON array (luma.array_mt,
   which luma.json.decode gives "[]"): an unmarked empty table is both. */
static int is_object(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TTABLE && !lj_has_array_mt(L, idx);
}

static int check_record(lv_ctx *c, const pm_schema *s, int idx, const char *tag) {
  lua_State *L = c->L;
  if (!is_object(L, idx)) return report(c, 0, "type", "must be an object");
  if (!enter_table(c, idx)) return 0;
  const lv_rec *r = &c->v->recs[s->index];
  uint64_t small[8], *seen = small;
  size_t words = ((size_t)s->nfields + 63) / 64;
  if (words > 8) {
    seen = calloc(words, sizeof *seen);
    if (!seen) { c->depth--; return report(c, 0, "type", "could not be checked (out of memory)"); }
  } else {
    memset(small, 0, words * sizeof *small);
  }
  int ok = 1, nseen = 0;
  int top = lua_gettop(L) + 2;   /* where lua_next leaves the value */
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    /* a field's name is found by the string object, without reading it */
    int i = find_object(s, r, lua_topointer(L, top - 1)), string = i >= 0;
    size_t len = 0;
    const char *k = NULL;
    if (!string && lua_type(L, top - 1) == LUA_TSTRING) {
      string = 1;
      k = lua_tolstring(L, top - 1, &len);
      i = find_field(s, k, len);
    }
    if (string) {
      if (i >= 0) {
        const pm_field *f = &s->fields[i];
        int vtype = lua_type(L, top);
        if (vtype == LUA_TLIGHTUSERDATA && !f->required && lua_touserdata(L, top) == NULL) {
          /* null on an optional field means absent */
          if (c->write) { lua_pushvalue(L, top - 1); lua_pushnil(L); lua_rawset(L, idx); }
        } else {
          seen[i / 64] |= (uint64_t)1 << (i % 64);
          nseen++;
          push_seg(c, f->name, f->len, 0);
          ok = check_value(c, f->type, top, vtype, idx, top - 1) && ok;
          c->npath--;
        }
      } else if (!(tag && (k == tag || (len == strlen(tag) && memcmp(k, tag, len) == 0)))) {
        push_seg(c, k, len, 0);
        ok = report(c, 0, "additionalProperties", "is not allowed") && ok;
        c->npath--;
      }
    } else {
      describe_key(c, top - 1);
      ok = report(c, 0, "additionalProperties", "is not allowed") && ok;
      c->npath--;
    }
    lua_settop(L, top - 1);
    if (STOPPED(c)) { lua_pop(L, 1); break; }
  }
  for (int i = 0; nseen < s->nfields && i < s->nfields && !STOPPED(c); i++) {
    if (seen[i / 64] & ((uint64_t)1 << (i % 64))) continue;
    const pm_field *f = &s->fields[i];
    if (r->defaults[i]) {
      if (c->write) fill_default(c, f, r->defaults[i], idx);
    } else if (f->required) {
      push_seg(c, f->name, f->len, 0);
      ok = report(c, 0, "required", "is required") && ok;
      c->npath--;
    }
  }
  if (seen != small) free(seen);
  c->depth--;
  return ok;
}

static int member_index(const pm_schema *u, const char *s, size_t len) {
  for (int i = 0; i < u->nmembers; i++)
    if (strlen(u->members[i]->name) == len && memcmp(u->members[i]->name, s, len) == 0) return i;
  return -1;
}

static int check_union(lv_ctx *c, const pm_schema *u, int idx) {
  lua_State *L = c->L;
  if (!is_object(L, idx)) return report(c, 0, "type", "must be an object");
  const char *tag = c->v->recs[u->index].tag;
  if (!lua_checkstack(L, 4)) return report(c, 0, "depth", "is nested too deeply (no stack space left)");
  lua_pushstring(L, u->tag);
  lc_rawget(L, idx);
  int member = -1, has_tag = !lua_isnil(L, -1);
  if (lua_type(L, -1) == LUA_TSTRING) {
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    member = member_index(u, s, len);
  }
  lua_pop(L, 1);
  if (member >= 0) return check_record(c, u->members[member], idx, tag);
  if (has_tag || c->output) {
    push_seg(c, u->tag, strlen(u->tag), 0);
    int ok = report(c, 0, "required", "must identify a tagged union member.");
    c->npath--;
    return ok;
  }
  /* input without a tag: the one member that fits gets the tag written */
  int found = -1, matches = 0;
  int write = c->write;
  c->write = 0;
  c->trial++;
  for (int i = 0; i < u->nmembers; i++) {
    c->failed = 0;
    check_record(c, u->members[i], idx, tag);
    if (!c->failed) { matches++; if (found < 0) found = i; }
  }
  c->trial--;
  c->write = write;
  c->failed = 0;
  sb_buf names;
  sb_init(&names);
  for (int i = 0; i < u->nmembers && names.len < 300; i++) sb_printf(&names, "%s%s", i ? ", " : "", u->members[i]->name);
  int ok;
  if (matches == 1) {
    ok = check_record(c, u->members[found], idx, tag);
    if (ok && c->write) {
      lua_pushstring(L, u->tag);
      lua_pushstring(L, u->members[found]->name);
      lua_rawset(L, idx);
    }
  } else if (matches == 0 && c->trial) {
    ok = report(c, 0, "anyOf", "must match a member of %s (%s)", u->name, sb_str(&names));
  } else if (matches == 0) {
    /* the error path: each member again, to say the first reason it did not fit */
    sb_buf why;
    sb_init(&why);
    char first[300];
    c->write = 0;
    c->trial++;
    c->why = first;
    c->whylen = sizeof first;
    for (int i = 0; i < u->nmembers && why.len < 800; i++) {
      first[0] = '\0';
      c->failed = 0;
      check_record(c, u->members[i], idx, tag);
      sb_printf(&why, "%s as %s, %s", i ? ";" : ":", u->members[i]->name, first[0] ? first : "it does not fit");
    }
    c->why = NULL;
    c->trial--;
    c->write = write;
    c->failed = 0;
    ok = report(c, 0, "anyOf", "must match a member of %s%s", u->name, sb_str(&why));
    sb_free(&why);
  } else {
    ok = report(c, 0, "anyOf", "matches more than one member of %s (%s); set '%s' to choose", u->name,
                sb_str(&names), u->tag);
  }
  sb_free(&names);
  return ok;
}

static int check_array(lv_ctx *c, const pm_type *t, int idx) {
  lua_State *L = c->L;
  if (lua_type(L, idx) != LUA_TTABLE) return report(c, 0, "type", "must be an array");
  if (!enter_table(c, idx)) return 0;
  size_t n = lc_rawlen(L, idx), count = 0;
  int ok = 1, shape = 1;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int top = lua_gettop(L);
    lua_Integer k;
    if (lua_type(L, -2) != LUA_TNUMBER || !lc_isinteger(L, -2) || (k = lua_tointeger(L, -2)) < 1 || (size_t)k > n) {
      shape = 0;
      lua_pop(L, 2);
      break;
    }
    count++;
    push_seg(c, NULL, 0, k);
    ok = check_value(c, t->elem, top, lua_type(L, top), idx, top - 1) && ok;
    c->npath--;
    lua_settop(L, top - 1);
    if (STOPPED(c)) { lua_pop(L, 1); break; }
  }
  c->depth--;
  if (STOPPED(c)) return 0;
  if (!shape || count != n) return report(c, 0, "type", "must be an array");
  /* an empty table is written back marked, so that it prints as [] (as the
     schema says) and not as {} */
  if (n == 0 && c->write && !lua_getmetatable(L, idx)) {
    lj_push_array_mt(L);
    lua_setmetatable(L, idx);
  } else if (n == 0 && c->write) {
    lua_pop(L, 1);
  }
  if ((t->rules & PR_MINITEMS) && (long long)n < t->minitems)
    ok = report(c, t->soft, "minItems", "must have at least %lld item%s", t->minitems, t->minitems == 1 ? "" : "s") && ok;
  if ((t->rules & PR_MAXITEMS) && (long long)n > t->maxitems)
    ok = report(c, t->soft, "maxItems", "must have at most %lld item%s", t->maxitems, t->maxitems == 1 ? "" : "s") && ok;
  return ok;
}

/* The value at idx (of Lua type `type`) against t; parent/key locate it so
   int normalisation can write it back (0 when it has no parent). */
static int check_value(lv_ctx *c, const pm_type *t, int idx, int type, int parent, int key) {
  lua_State *L = c->L;
  pm_num x;
  switch (t->kind) {
    case PT_STRING:
      if (type != LUA_TSTRING) return report(c, 0, "type", "must be a string");
      return check_string(c, t, idx);
    case PT_INT:
      if (type != LUA_TNUMBER) return report(c, 0, "type", "must be an integer");
      x = read_number(L, idx);
      if (!x.is_int) {
        if (x.d != floor(x.d)) return report(c, 0, "type", "must be an integer");
        if (!(x.d >= -9223372036854775808.0 && x.d < 9223372036854775808.0))
          return report(c, 0, "type", "must be an integer that fits in 64 bits (from -2^63 to 2^63 - 1)");
        x.is_int = 1;
        x.i = (long long)x.d;
#if LUA_VERSION_NUM >= 503
        if (c->write && parent) {
          lua_pushvalue(L, key);
          lua_pushinteger(L, (lua_Integer)x.i);
          lua_rawset(L, parent);
        }
#else
        (void)parent;
        (void)key;
#endif
      }
      return t->rules ? check_range(c, t, x) : 1;
    case PT_FLOAT:
      if (type != LUA_TNUMBER) return report(c, 0, "type", "must be a number");
      x = read_number(L, idx);
      if (!x.is_int && !isfinite(x.d)) return report(c, 0, "type", "must be a finite number");
      return t->rules ? check_range(c, t, x) : 1;
    case PT_BOOL:
      return type == LUA_TBOOLEAN ? 1 : report(c, 0, "type", "must be a boolean");
    case PT_ENUM:
      return check_enum(c, t, idx, type);
    case PT_ANY:
      return check_json(c, idx);
    case PT_ARRAY:
      return check_array(c, t, idx);
    case PT_SCHEMA:
      return t->schema->is_union ? check_union(c, t->schema, idx) : check_record(c, t->schema, idx, NULL);
  }
  return 1;
}

/* ------------------------------------------------------------------- entry */

static int issue_cmp(const void *a, const void *b) {
  const lv_issue *x = a, *y = b;
  int r = strcmp(x->path ? x->path : "", y->path ? y->path : "");
  return r ? r : (x->seq > y->seq) - (x->seq < y->seq);
}

static void init_ctx(lv_ctx *c, lv_program *v, lua_State *L, const char *root, int mode, int write, lv_result *r) {
  c->L = L;
  c->v = v;
  c->root = root;
  c->output = mode == LV_OUTPUT;
  c->write = write;
  c->trial = 0;
  c->failed = 0;
  c->why = NULL;
  c->whylen = 0;
  c->r = r;
  c->depth = 0;
  c->npath = 0;
  r->errors = r->warnings = NULL;
  r->nerrors = r->nwarnings = r->truncated = 0;
}

/* Errors come out in a stable order whatever order the table walk took. */
static int finish(lv_result *r) {
  if (r->nerrors > 1) qsort(r->errors, (size_t)r->nerrors, sizeof *r->errors, issue_cmp);
  if (r->nwarnings > 1) qsort(r->warnings, (size_t)r->nwarnings, sizeof *r->warnings, issue_cmp);
  return r->nerrors;
}

int lv_validate(lv_program *v, lua_State *L, int idx, const pm_schema *s, const char *root, int mode, lv_result *r) {
  lv_ctx c;
  init_ctx(&c, v, L, root, mode, 1, r);
  idx = lc_absindex(L, idx);
  int top = lua_gettop(L);
  if (s->is_union) check_union(&c, s, idx);
  else check_record(&c, s, idx, NULL);
  lua_settop(L, top);
  return finish(r);
}

int lv_validate_type(lv_program *v, lua_State *L, int idx, const pm_type *t, const char *root, int mode,
                     int write, lv_result *r) {
  lv_ctx c;
  init_ctx(&c, v, L, root, mode, write, r);
  idx = lc_absindex(L, idx);
  int top = lua_gettop(L);
  check_value(&c, t, idx, lua_type(L, idx), 0, 0);
  lua_settop(L, top);
  return finish(r);
}

void lv_result_free(lv_result *r) {
  if (!r->errors && !r->warnings) return;
  /* a text lives in its path's block */
  for (int i = 0; i < r->nerrors; i++) free_path(r, r->errors[i].path);
  for (int i = 0; i < r->nwarnings; i++) free_path(r, r->warnings[i].path);
  if (r->errors != &r->inline_error) free(r->errors);
  free(r->warnings);
  r->errors = r->warnings = NULL;
  r->nerrors = r->nwarnings = r->truncated = 0;
}

int lv_check_defaults(lv_program *v, lua_State *L, pm_program *p) {
  int bad = 0;
  luaL_checkstack(L, 4, "checking defaults");
  lua_rawgeti(L, LUA_REGISTRYINDEX, v->anchor);
  for (int i = 0; i < p->nschemas; i++) {
    const pm_schema *s = p->schemas[i];
    const lv_rec *r = &v->recs[i];
    for (int j = 0; !s->is_union && j < s->nfields; j++) {
      if (!r->defaults[j]) continue;
      const pm_field *f = &s->fields[j];
      int anchor = lua_gettop(L);
      lua_rawgeti(L, anchor, r->defaults[j]);
      if (f->type->kind != PT_ANY && lc_isnull(L, -1)) {
        bad++;
        dg_error(&p->diag, f->default_value->pos.line, f->default_value->pos.col,
                 "@default of '%s' cannot be null: a default fills a missing field with a value (to let '%s' be "
                 "missing, remove the default and write '%s?:')", f->name, f->name, f->name);
        lua_pop(L, 1);
        continue;
      }
      char root[160];
      snprintf(root, sizeof root, "@default of '%.100s'", f->name);
      /* validated as an input is, writing in place: the default is filled as
         a validated value would be (int 2.0 as 2, a union member's tag
         written) */
      lv_result res;
      lv_ctx c;
      init_ctx(&c, v, L, root, LV_INPUT, 1, &res);
      lua_pushinteger(L, r->defaults[j]);
      int value = anchor + 1, key = anchor + 2;
      check_value(&c, f->type, value, lua_type(L, value), anchor, key);
      lua_settop(L, anchor);
      if (finish(&res)) {
        bad++;
        const lv_issue *e = &res.errors[0];
        dg_error(&p->diag, f->default_value->pos.line, f->default_value->pos.col, "%s %s",
                 e->path ? e->path : root, e->text ? e->text : "is invalid");
      } else {
        /* the JSON Schema's "default" is the value as filled (its tag, its integers) */
        sb_buf b;
        char why[64];
        sb_init(&b);
        lua_rawgeti(L, anchor, r->defaults[j]);
        if (lj_encode(L, -1, &b, 0, LIM_DEFAULT_VALUE_DEPTH + 1, why, sizeof why) == 0 && !b.failed) {
          pm_field *mf = (pm_field *)f;
          mf->default_json = ar_strndup(&p->arena, b.data ? b.data : "null", b.data ? b.len : 4);
          mf->default_json_len = b.data ? b.len : 4;
        }
        lua_pop(L, 1);
        sb_free(&b);
      }
      lv_result_free(&res);
    }
  }
  lua_pop(L, 1);
  if (bad) dg_sort(&p->diag);
  return bad;
}

void lv_push_default(lv_program *v, lua_State *L, const pm_schema *s, int field) {
  const lv_rec *r = &v->recs[s->index];
  if (s->is_union || !r->defaults[field]) { lua_pushnil(L); return; }
  luaL_checkstack(L, 4, "copying a default");
  lua_rawgeti(L, LUA_REGISTRYINDEX, v->anchor);
  lua_rawgeti(L, -1, r->defaults[field]);
  push_copy(L, lua_gettop(L), 0);
  lua_replace(L, -3);
  lua_pop(L, 1);
}

/* ------------------------------------------------- results as Lua values */

/* One { path, message, rule } at index i of the table on top. */
static void push_issue(lua_State *L, const char *path, const char *text, const char *rule, int i) {
  lua_createtable(L, 0, 3);
  lua_pushstring(L, path ? path : "?");
  lua_setfield(L, -2, "path");
  lua_pushfstring(L, "%s %s", path ? path : "?", text ? text : "is invalid");
  lua_setfield(L, -2, "message");
  if (rule) {
    lua_pushstring(L, rule);
    lua_setfield(L, -2, "rule");
  }
  lua_rawseti(L, -2, i);
}

void lv_push_issues(lua_State *L, const lv_issue *list, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) push_issue(L, list[i].path, list[i].text, list[i].rule, i + 1);
}

/* The first violation's message becomes the error's: read from the details at idx. */
static void push_first_message(lua_State *L, int details) {
  lua_getfield(L, details, "violations");
  lua_rawgeti(L, -1, 1);
  lua_getfield(L, -1, "message");
  lua_replace(L, -3);
  lua_pop(L, 1);
}

int lv_push_error(lua_State *L, const char *code, const lv_result *r) {
  lua_createtable(L, 0, 3);
  int details = lua_gettop(L);
  lv_push_issues(L, r->errors, r->nerrors);
  lua_setfield(L, details, "violations");
  if (r->nwarnings) {
    lv_push_issues(L, r->warnings, r->nwarnings);
    lua_setfield(L, details, "warnings");
  }
  if (r->truncated) {
    lua_pushboolean(L, 1);
    lua_setfield(L, details, "truncated");
  }
  /* the message is the first violation's, already built */
  push_first_message(L, details);
  le_push(L, code, lua_tostring(L, -1), 0, details);
  lua_replace(L, details);
  lua_settop(L, details);
  return 1;
}

/* ------------------------------------------------------ the lazy error */

/* A result packed into the lazy error's data: this header, then each error
   and each warning as an lv_packed followed by its path and text with their
   NULs, padded to the alignment of a pointer. */
typedef struct lv_packed_result {
  int nerrors, nwarnings, truncated;
} lv_packed_result;

typedef struct lv_packed {
  const char *rule;           /* a constant of this file */
  int pathlen, textlen;       /* -1: none */
} lv_packed;

#define LV_ALIGN(n) (((n) + sizeof(void *) - 1) & ~(sizeof(void *) - 1))

static size_t packed_size(const lv_issue *e) {
  return LV_ALIGN(sizeof(lv_packed) + (e->path ? strlen(e->path) + 1 : 0) + (e->text ? strlen(e->text) + 1 : 0));
}

static unsigned char *pack_issue(unsigned char *out, const lv_issue *e) {
  lv_packed *k = (lv_packed *)(void *)out;
  unsigned char *at = out + sizeof *k;
  size_t pathlen = e->path ? strlen(e->path) : 0, textlen = e->text ? strlen(e->text) : 0;
  k->rule = e->rule;
  k->pathlen = e->path ? (int)pathlen : -1;
  k->textlen = e->text ? (int)textlen : -1;
  if (e->path) { memcpy(at, e->path, pathlen + 1); at += pathlen + 1; }
  if (e->text) { memcpy(at, e->text, textlen + 1); at += textlen + 1; }
  return out + LV_ALIGN((size_t)(at - out));
}

static const unsigned char *push_packed_issues(lua_State *L, const unsigned char *in, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    const lv_packed *k = (const lv_packed *)(const void *)in;
    const char *at = (const char *)(in + sizeof *k);
    const char *path = k->pathlen >= 0 ? at : NULL;
    if (path) at += k->pathlen + 1;
    const char *text = k->textlen >= 0 ? at : NULL;
    if (text) at += k->textlen + 1;
    push_issue(L, path, text, k->rule, i + 1);
    in += LV_ALIGN((size_t)((const unsigned char *)at - in));
  }
  return in;
}

/* le_fill of a validation error: details and message, as lv_push_error makes them. */
static void fill_error(lua_State *L, int err, const void *data) {
  const lv_packed_result *h = data;
  const unsigned char *in = (const unsigned char *)data + LV_ALIGN(sizeof *h);
  luaL_checkstack(L, 8, "building an error");
  lua_createtable(L, 0, 3);
  int details = lua_gettop(L);
  in = push_packed_issues(L, in, h->nerrors);
  lua_setfield(L, details, "violations");
  if (h->nwarnings) {
    push_packed_issues(L, in, h->nwarnings);
    lua_setfield(L, details, "warnings");
  }
  if (h->truncated) {
    lua_pushboolean(L, 1);
    lua_setfield(L, details, "truncated");
  }
  /* a field the caller set before reading any keeps its value */
  lua_pushliteral(L, "message");
  lc_rawget(L, err);
  if (lua_isnil(L, -1)) {
    lua_pushliteral(L, "message");
    push_first_message(L, details);
    lua_rawset(L, err);
  }
  lua_pushliteral(L, "details");
  lc_rawget(L, err);
  if (lua_isnil(L, -1)) {
    lua_pushliteral(L, "details");
    lua_pushvalue(L, details);
    lua_rawset(L, err);
  }
  lua_settop(L, details - 1);
}

int lv_push_lazy_error(lua_State *L, const char *code, const lv_result *r) {
  size_t len = LV_ALIGN(sizeof(lv_packed_result));
  for (int i = 0; i < r->nerrors; i++) len += packed_size(&r->errors[i]);
  for (int i = 0; i < r->nwarnings; i++) len += packed_size(&r->warnings[i]);
  unsigned char *out = le_push_lazy(L, code, 0, fill_error, len);
  lv_packed_result *h = (lv_packed_result *)(void *)out;
  h->nerrors = r->nerrors;
  h->nwarnings = r->nwarnings;
  h->truncated = r->truncated;
  out += LV_ALIGN(sizeof *h);
  for (int i = 0; i < r->nerrors; i++) out = pack_issue(out, &r->errors[i]);
  for (int i = 0; i < r->nwarnings; i++) out = pack_issue(out, &r->warnings[i]);
  return 1;
}
