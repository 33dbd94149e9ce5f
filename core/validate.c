/* The validator's walk: a Lua value checked against a schema with raw
   reads only, scalars, records, unions and arrays, filling defaults and
   inferring tags in place; and the program's @defaults checked at load.
   What it found wrong is recorded by validate_issues.c; the program's names
   and defaults are bound by validate_bind.c. */
#include "validateint.h"

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

/* ----------------------------------------------------------------- scalars */

static void format_num(pm_num n, char out[40]) {
  if (n.is_int) lv_fmt_int(n.i, out);
  else if (!json_format_number(n.d, out)) snprintf(out, 40, "%g", n.d);
}

/* "<words> <bound>", made only when it is recorded. */
static int report_bound(lv_ctx *c, int soft, const char *rule, const char *words, pm_num bound) {
  int ret;
  if (!lv_needs_text(c, soft, &ret)) return ret;
  char text[80];
  size_t n = strlen(words);
  memcpy(text, words, n);
  text[n] = ' ';
  format_num(bound, text + n + 1);
  return lv_report_text(c, soft, rule, text);
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
    return lv_report(c, 0, "maxLength", "is too long (%zu bytes; the limit is %zu)", len, c->v->lim.max_string_bytes);
  long long n = count_chars(s, len);
  if (n < 0) return lv_report(c, 0, "type", "must be valid UTF-8");
  if (!t) return 1;
  int ok = 1;
  if ((t->rules & PR_MINLEN) && n < t->minlen)
    ok = lv_report(c, t->soft, "minLength", "must be at least %lld character%s long", t->minlen, t->minlen == 1 ? "" : "s");
  if ((t->rules & PR_MAXLEN) && n > t->maxlen)
    ok = lv_report(c, t->soft, "maxLength", "must be at most %lld character%s long", t->maxlen, t->maxlen == 1 ? "" : "s") && ok;
  if ((t->rules & PR_PATTERN) && (double)len * (double)lre_cost(t->re) > c->v->lim.max_pattern_work) {
    /* the matcher is linear, but a big pattern on a big string is still slow */
    ok = lv_report(c, 0, "pattern", "is too long to match against its pattern (%zu bytes)", len) && ok;
  } else if (t->rules & PR_PATTERN) {
    int m = lre_search(t->re, s, len);
    if (m < 0) ok = lv_report(c, 0, "pattern", "could not be matched against its pattern (out of memory)") && ok;
    else if (m == 0 && !lv_needs_text(c, t->soft, &m)) {
      ok = m && ok;
    } else if (m == 0) {
      sb_buf b;
      sb_init(&b);
      json_write_string(&b, t->pattern, t->pattern_len > 200 ? 200 : t->pattern_len);
      ok = lv_report(c, t->soft, "pattern", "must match the pattern %s", sb_str(&b)) && ok;
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
  if (!lv_needs_text(c, 0, &ret)) return ret;
  sb_buf b;
  sb_init(&b);
  for (int i = 0; i < t->nvalues && b.len < 300; i++) {
    if (i) sb_adds(&b, ", ");
    json_write_string(&b, t->values[i].s, t->values[i].len);
  }
  int ok = lv_report(c, 0, "enum", "must be one of %s", sb_str(&b));
  sb_free(&b);
  return ok;
}

/* ------------------------------------------------------------------ tables */

static int check_value(lv_ctx *c, const pm_type *t, int idx, int type, int parent, int key);

/* Enters a table: depth, cycles and stack space. Returns 0 after reporting. */
static int enter_table(lv_ctx *c, int idx) {
  const void *p = lua_topointer(c->L, idx);
  if (c->depth >= c->v->lim.max_depth)
    return lv_report(c, 0, "depth", "is nested too deeply (more than %d levels)", c->v->lim.max_depth);
  for (int i = 0; i < c->depth; i++)
    if (c->tables[i] == p) return lv_report(c, 0, "cycle", "contains a cycle");
  /* each level uses about three slots: reserve for the next few at once */
  if (c->depth % 4 == 0 && !lua_checkstack(c->L, 16))
    return lv_report(c, 0, "depth", "is nested too deeply (no stack space left)");
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
      if (!isfinite((double)lua_tonumber(L, idx))) return lv_report(c, 0, "type", "must be a finite number");
      return 1;
    case LUA_TSTRING: return check_string(c, NULL, idx);
    case LUA_TLIGHTUSERDATA:
      if (lc_isnull(L, idx)) return 1;
      break;
    case LUA_TTABLE: {
      /* an error whose fields are made when first read (lerror.h) gets them
         now, as the JSON encoder does: its private key is not JSON */
      le_is_error(L, idx);
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
        ok = lv_report(c, 0, "type", "must be a JSON value: a table needs string keys or the items 1..n") && ok;
      return ok;
    }
    default: break;
  }
  return lv_report(c, 0, "type", "must be a JSON value, not a %s", type_word(L, idx));
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


static void check_default(struct lv_dcheck *d, int schema, int field);

static void fill_default(lv_ctx *c, const pm_field *f, int def, int idx) {
  lua_State *L = c->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->v->anchor);
  lua_rawgeti(L, -1, def);
  lua_pushlstring(L, f->name, f->len);
  lv_push_copy(L, lua_gettop(L) - 1, 0);
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
  if (!is_object(L, idx)) return lv_report(c, 0, "type", "must be an object");
  if (!enter_table(c, idx)) return 0;
  const lv_rec *r = &c->v->recs[s->index];
  uint64_t small[8], *seen = small;
  size_t words = ((size_t)s->nfields + 63) / 64;
  if (words > 8) {
    seen = calloc(words, sizeof *seen);
    if (!seen) { c->depth--; return lv_report(c, 0, "type", "could not be checked (out of memory)"); }
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
      } else if (!s->open && !(tag && (k == tag || (len == strlen(tag) && memcmp(k, tag, len) == 0)))) {
        push_seg(c, k, len, 0);
        ok = lv_report(c, 0, "additionalProperties", "is not allowed") && ok;
        c->npath--;
      }
    } else {
      describe_key(c, top - 1);
      ok = lv_report(c, 0, "additionalProperties", "is not allowed") && ok;
      c->npath--;
    }
    lua_settop(L, top - 1);
    if (STOPPED(c)) { lua_pop(L, 1); break; }
  }
  for (int i = 0; nseen < s->nfields && i < s->nfields && !STOPPED(c); i++) {
    if (seen[i / 64] & ((uint64_t)1 << (i % 64))) continue;
    const pm_field *f = &s->fields[i];
    if (r->defaults[i]) {
      /* at load, a default is checked before it is copied into another */
      if (c->dc) check_default(c->dc, s->index, i);
      if (c->write) fill_default(c, f, r->defaults[i], idx);
    } else if (f->required) {
      push_seg(c, f->name, f->len, 0);
      ok = lv_report(c, 0, "required", "is required") && ok;
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
  if (!is_object(L, idx)) return lv_report(c, 0, "type", "must be an object");
  const char *tag = c->v->recs[u->index].tag;
  if (!lua_checkstack(L, 4)) return lv_report(c, 0, "depth", "is nested too deeply (no stack space left)");
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
    int ok = lv_report(c, 0, "required", "must identify a tagged union member.");
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
    ok = lv_report(c, 0, "anyOf", "must match a member of %s (%s)", u->name, sb_str(&names));
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
    ok = lv_report(c, 0, "anyOf", "must match a member of %s%s", u->name, sb_str(&why));
    sb_free(&why);
  } else {
    ok = lv_report(c, 0, "anyOf", "matches more than one member of %s (%s); set '%s' to choose", u->name,
                sb_str(&names), u->tag);
  }
  sb_free(&names);
  return ok;
}

static int check_array(lv_ctx *c, const pm_type *t, int idx) {
  lua_State *L = c->L;
  if (lua_type(L, idx) != LUA_TTABLE) return lv_report(c, 0, "type", "must be an array");
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
  if (!shape || count != n) return lv_report(c, 0, "type", "must be an array");
  /* an empty table is written back marked, so that it prints as [] (as the
     schema says) and not as {} */
  if (n == 0 && c->write && !lua_getmetatable(L, idx)) {
    lj_push_array_mt(L);
    lua_setmetatable(L, idx);
  } else if (n == 0 && c->write) {
    lua_pop(L, 1);
  }
  if ((t->rules & PR_MINITEMS) && (long long)n < t->minitems)
    ok = lv_report(c, t->soft, "minItems", "must have at least %lld item%s", t->minitems, t->minitems == 1 ? "" : "s") && ok;
  if ((t->rules & PR_MAXITEMS) && (long long)n > t->maxitems)
    ok = lv_report(c, t->soft, "maxItems", "must have at most %lld item%s", t->maxitems, t->maxitems == 1 ? "" : "s") && ok;
  return ok;
}

/* The value at idx (of Lua type `type`) against t; parent/key locate it so
   int normalisation can write it back (0 when it has no parent). */
static int check_value(lv_ctx *c, const pm_type *t, int idx, int type, int parent, int key) {
  lua_State *L = c->L;
  pm_num x;
  switch (t->kind) {
    case PT_STRING:
      if (type != LUA_TSTRING) return lv_report(c, 0, "type", "must be a string");
      return check_string(c, t, idx);
    case PT_INT:
      if (type != LUA_TNUMBER) return lv_report(c, 0, "type", "must be an integer");
      x = read_number(L, idx);
      if (!x.is_int) {
        if (x.d != floor(x.d)) return lv_report(c, 0, "type", "must be an integer");
        if (!(x.d >= -9223372036854775808.0 && x.d < 9223372036854775808.0))
          return lv_report(c, 0, "type", "must be an integer that fits in 64 bits (from -2^63 to 2^63 - 1)");
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
      if (type != LUA_TNUMBER) return lv_report(c, 0, "type", "must be a number");
      x = read_number(L, idx);
      if (!x.is_int && !isfinite(x.d)) return lv_report(c, 0, "type", "must be a finite number");
      return t->rules ? check_range(c, t, x) : 1;
    case PT_BOOL:
      return type == LUA_TBOOLEAN ? 1 : lv_report(c, 0, "type", "must be a boolean");
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
  c->dc = NULL;
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


/* The check of a program's @defaults: where each one is (0 not checked,
   1 being checked, 2 checked), so that each is checked once, and before its
   copy is filled into another default (whatever the order of declaration). */
struct lv_dcheck {
  lv_program *v;
  lua_State *L;
  pm_program *p;
  unsigned char **state;      /* [schema][field] */
  int bad;
  int depth;                  /* defaults being checked, each inside the one before (a C frame each) */
};

/* Checks one @default as an input is, writing in place: it is filled as a
   validated value would be (int 2.0 as 2, a union member's tag written, at
   any depth, the defaults it takes in checked first). */
static void check_default(struct lv_dcheck *d, int i, int j) {
  if (d->state[i][j]) return;   /* checked, or being checked (a default that holds itself) */
  d->state[i][j] = 1;
  lv_program *v = d->v;
  lua_State *L = d->L;
  pm_program *p = d->p;
  const pm_field *f = &p->schemas[i]->fields[j];
  const lv_rec *r = &v->recs[i];
  if (d->depth >= LIM_DEFAULT_VALUE_DEPTH) {
    /* each default filled into the one before nests the value one level more */
    d->bad++;
    dg_error(&p->diag, f->default_value->pos.line, f->default_value->pos.col,
             "@default of '%s' fills defaults nested more than %d levels deep (a default whose type has fields "
             "with defaults of their own, and so on)",
             f->name, LIM_DEFAULT_VALUE_DEPTH);
    d->state[i][j] = 2;
    return;
  }
  int top = lua_gettop(L);
  luaL_checkstack(L, 6, "checking defaults");
  /* large (its path), and this recurses: a userdata, which an error frees */
  lv_ctx *c = lua_newuserdata(L, sizeof *c);
  lua_rawgeti(L, LUA_REGISTRYINDEX, v->anchor);
  int anchor = lua_gettop(L);
  lua_rawgeti(L, anchor, r->defaults[j]);
  if (f->type->kind != PT_ANY && lc_isnull(L, -1)) {
    d->bad++;
    dg_error(&p->diag, f->default_value->pos.line, f->default_value->pos.col,
             "@default of '%s' cannot be null: a default fills a missing field with a value (to let '%s' be "
             "missing, remove the default and write '%s?:')", f->name, f->name, f->name);
    lua_settop(L, top);
    d->state[i][j] = 2;
    return;
  }
  char root[160];
  snprintf(root, sizeof root, "@default of '%.100s'", f->name);
  lv_result res;
  init_ctx(c, v, L, root, LV_INPUT, 1, &res);
  c->dc = d;
  lua_pushinteger(L, r->defaults[j]);
  int value = anchor + 1, key = anchor + 2;
  d->depth++;
  check_value(c, f->type, value, lua_type(L, value), anchor, key);
  d->depth--;
  lua_settop(L, anchor);
  if (finish(&res)) {
    d->bad++;
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
    sb_free(&b);
  }
  lv_result_free(&res);
  lua_settop(L, top);
  d->state[i][j] = 2;
}

int lv_check_defaults(lv_program *v, lua_State *L, pm_program *p) {
  struct lv_dcheck d = { v, L, p, NULL, 0, 0 };
  /* the states, in a userdata that an error frees: a row per schema */
  size_t nfields = 0;
  for (int i = 0; i < p->nschemas; i++) nfields += (size_t)p->schemas[i]->nfields;
  size_t rows = sizeof *d.state * ((size_t)p->nschemas + 1);
  char *block = lua_newuserdata(L, rows + nfields + 1);
  memset(block, 0, rows + nfields + 1);
  d.state = (unsigned char **)(void *)block;
  unsigned char *cell = (unsigned char *)block + rows;
  for (int i = 0; i < p->nschemas; i++) {
    d.state[i] = cell;
    cell += p->schemas[i]->nfields;
  }
  for (int i = 0; i < p->nschemas; i++) {
    const pm_schema *s = p->schemas[i];
    for (int j = 0; !s->is_union && j < s->nfields; j++)
      if (v->recs[i].defaults[j]) check_default(&d, i, j);
  }
  lua_pop(L, 1);
  if (d.bad) dg_sort(&p->diag);
  return d.bad;
}
