#include "json.h"

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "luma_limits.h"
#include "map.h"
#include "utf8.h"

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

jv *jv_strcopy(ar_arena *a, const char *s, size_t len) {
  char *copy = ar_alloc(a, len + 1);
  if (!copy) return NULL;
  memcpy(copy, s, len);
  return jv_str(a, copy, len);
}
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

jv *jv_setn(jv *obj, const char *key, size_t keylen, jv *v) {
  if (obj && v) {
    v->key = key;
    v->keylen = keylen;
    append(obj, v);
  }
  return obj;
}

jv *jv_set(jv *obj, const char *key, jv *v) {
  return jv_setn(obj, key, key ? strlen(key) : 0, v);
}

jv *jv_get(const jv *obj, const char *key) {
  size_t len = strlen(key);
  for (jv *m = obj ? obj->first : NULL; m; m = m->next)
    if (m->keylen == len && memcmp(m->key, key, len) == 0) return m;
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
          json_write_string(b, m->key, m->keylen);
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

#define JP_SCAN_MAX 8         /* objects this small find duplicate keys by a scan */
#define JP_FRAMES 32          /* open containers tracked on the C stack; deeper go to the arena */

/* An array or object whose members are being parsed. */
typedef struct jp_frame {
  jv *c;
  const char *key;            /* JV_OBJ: key of the member being parsed */
  size_t keylen;
  mp_map *keys;               /* JV_OBJ: its keys, once it has JP_SCAN_MAX members */
} jp_frame;

typedef struct jp_state {
  ar_arena *a;
  const unsigned char *text, *end;
  char *err;
  size_t errlen;
  char point[8];              /* the locale's decimal point, read at the first fraction */
  size_t pointlen;
} jp_state;

/* Bytes that stand for themselves in a string: no quote, backslash or
   control character, and ASCII (other bytes go through the UTF-8 check). */
static const unsigned char jp_plain[256] = {
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
};

static void *jp_fail(jp_state *st, const unsigned char *at, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;

/* Where `at` is in the text: line and column (in characters), from 1. */
static void jp_where(const jp_state *st, const unsigned char *at, long *line, long *col) {
  *line = *col = 1;
  for (const unsigned char *c = st->text; c < at; c++) {
    if (*c == '\n') { ++*line; *col = 1; }
    else if ((*c & 0xC0) != 0x80) ++*col;
  }
}

/* Writes "<reason> at offset N (line L, column C)" into err; returns NULL
   for the caller to pass on. */
static void *jp_fail(jp_state *st, const unsigned char *at, const char *fmt, ...) {
  if (st->err && st->errlen) {
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t offset = (size_t)(at - st->text);
    long line, col;
    if (!strstr(msg, "(line ")) {
      jp_where(st, at, &line, &col);
      snprintf(st->err, st->errlen, "%s at offset %zu (line %ld, column %ld)", msg, offset, line, col);
    } else {
      snprintf(st->err, st->errlen, "%s at offset %zu", msg, offset);
    }
  }
  return NULL;
}

static void *jp_nomem(jp_state *st) {
  if (st->err && st->errlen) snprintf(st->err, st->errlen, "out of memory");
  return NULL;
}

static int jp_wordchar(const unsigned char *p, const unsigned char *end) {
  return p < end && ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z');
}

/* "unexpected 'x'" at p; a word (tru, yes) is named whole, from its start,
   and where a value goes (value set), with the words a value can be. */
static void *jp_unexpected_at(jp_state *st, const unsigned char *p, int value) {
  if (p == st->end) return jp_fail(st, p, "unexpected end of input");
  if (jp_wordchar(p, st->end)) {
    const unsigned char *e = p;
    while (jp_wordchar(e, st->end) && e - p < 40) e++;
    return jp_fail(st, p, "unexpected '%.*s'%s", (int)(e - p), p, value ? " (a value's words are true, false and null)" : "");
  }
  if (*p >= 0x20 && *p < 0x7F) return jp_fail(st, p, "unexpected '%c'", *p);
  return jp_fail(st, p, "unexpected byte 0x%02X", *p);
}

static void *jp_unexpected(jp_state *st, const unsigned char *p) { return jp_unexpected_at(st, p, 0); }

static const unsigned char *jp_space(const unsigned char *p, const unsigned char *end) {
  while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
  return p;
}

static int jp_digit(const unsigned char *p, const unsigned char *end) {
  return p < end && *p >= '0' && *p <= '9';
}

/* The word w at p; a word that is not w ("tru", "nulls") is unexpected
   from its start. */
static const unsigned char *jp_word(jp_state *st, const unsigned char *p, const char *w) {
  size_t n = strlen(w);
  if ((size_t)(st->end - p) < n || memcmp(p, w, n) != 0 || jp_wordchar(p + n, st->end)) {
    if (p + n > st->end && memcmp(p, w, (size_t)(st->end - p)) == 0) return jp_unexpected(st, st->end);
    return jp_unexpected_at(st, p, 1);
  }
  return p + n;
}

/* strtod on the literal [p, e), with the locale's decimal point for '.' as
   in lex.c's to_double; the grammar has been checked already. */
static const unsigned char *jp_double(jp_state *st, const unsigned char *p, const unsigned char *e, jv **out) {
  char buf[LIM_JSON_NUMBER_BYTES + sizeof st->point + 1], *stop;
  size_t n = 0;
  if (!st->pointlen) {
    const char *point = localeconv()->decimal_point;
    size_t len = point ? strlen(point) : 0;
    if (len == 0 || len >= sizeof st->point) { point = "."; len = 1; }
    memcpy(st->point, point, len);
    st->pointlen = len;
  }
  for (const unsigned char *q = p; q < e; q++) {
    if (*q == '.') { memcpy(buf + n, st->point, st->pointlen); n += st->pointlen; }
    else buf[n++] = (char)*q;
  }
  buf[n] = '\0';
  double d = strtod(buf, &stop);
  if (stop != buf + n) return jp_fail(st, p, "invalid number");
  if (!isfinite(d)) return jp_fail(st, p, "number out of range");
  *out = jv_num(st->a, d);
  return e;
}

/* An integer literal that fits in 64 bits is a JV_INT, except -0, which only
   a double can hold; any other number is a JV_NUM. An integer literal past
   -2^63 by less than 1024 would round to -2^63, a double that reads as the
   smallest 64-bit integer: it takes the next double away from zero instead,
   so that it is refused as an int as 9223372036854775808 and 1e19 are. */
static const unsigned char *jp_number(jp_state *st, const unsigned char *p, jv **out) {
  const unsigned char *start = p, *end = st->end;
  int neg = *p == '-', integral = 1, overflow = 0;
  unsigned long long u = 0, limit = neg ? 9223372036854775808ULL : 9223372036854775807ULL;
  if (neg) p++;
  if (!jp_digit(p, end)) return jp_unexpected(st, p);
  if (*p == '0') {
    p++;
    if (jp_digit(p, end)) return jp_fail(st, start, "leading zero in number");
  } else {
    for (; jp_digit(p, end); p++) {
      unsigned d = (unsigned)(*p - '0');
      if (u > (limit - d) / 10) overflow = 1;
      else u = u * 10 + d;
    }
  }
  if (p < end && *p == '.') {
    integral = 0;
    p++;
    if (!jp_digit(p, end)) return jp_unexpected(st, p);
    while (jp_digit(p, end)) p++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    integral = 0;
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (!jp_digit(p, end)) return jp_unexpected(st, p);
    while (jp_digit(p, end)) p++;
  }
  if (p - start > LIM_JSON_NUMBER_BYTES) return jp_fail(st, start, "number too long");
  if (overflow && integral && neg) {
    const unsigned char *e = jp_double(st, start, p, out);
    if (e && (*out)->n == -9223372036854775808.0) (*out)->n = nextafter((*out)->n, -INFINITY);
    return e;
  }
  if (!integral || overflow || (neg && u == 0)) return jp_double(st, start, p, out);
  *out = jv_int(st->a, neg ? -(long long)(u - 1) - 1 : (long long)u);
  return p;
}

static unsigned jp_hexval(unsigned c) {
  return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

/* Reads the four hex digits of the \u escape whose backslash is at p. */
static const unsigned char *jp_u4(jp_state *st, const unsigned char *p, unsigned *cp) {
  unsigned v = 0;
  for (int i = 2; i < 6; i++) {
    if (p + i == st->end) return jp_unexpected(st, p + i);
    unsigned c = p[i];
    if (!((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')))
      return jp_fail(st, p, "invalid \\u escape");
    v = v << 4 | jp_hexval(c);
  }
  *cp = v;
  return p + 6;
}

/* Whether [p, end) is the start of a valid UTF-8 sequence cut by the end of
   the text: completed with the lowest or the highest continuation bytes, one
   of the two is valid whatever the lead byte's range. */
static int jp_truncated_utf8(const unsigned char *p, const unsigned char *end) {
  size_t avail = (size_t)(end - p);
  if (avail >= 4) return 0;
  for (int fill = 0x80; fill <= 0xBF; fill += 0x3F) {
    unsigned char seq[4];
    memset(seq, fill, sizeof seq);
    memcpy(seq, p, avail);
    int n = (int)u8_decode(seq, sizeof seq, NULL);
    if (n > 0 && (size_t)n > avail) return 1;
  }
  return 0;
}

/* Checks the string literal whose opening quote is at q and returns the byte
   after its closing quote; *escapes tells whether there is one to decode. */
static const unsigned char *jp_scan_string(jp_state *st, const unsigned char *q, int *escapes) {
  const unsigned char *p = q + 1, *end = st->end;
  *escapes = 0;
  for (;;) {
    while (p < end && jp_plain[*p]) p++;
    if (p == end) return jp_unexpected(st, p);
    if (*p == '"') return p + 1;
    if (*p == '\\') {
      *escapes = 1;
      if (p + 1 == end) return jp_unexpected(st, end);
      switch (p[1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
          p += 2;
          break;
        case 'u': {
          unsigned hi, lo;
          const unsigned char *e = jp_u4(st, p, &hi);
          if (!e) return NULL;
          if (hi >= 0xDC00 && hi <= 0xDFFF) return jp_fail(st, p, "lone surrogate \\u%04X", hi);
          if (hi >= 0xD800 && hi <= 0xDBFF) {
            if (e == end || (*e == '\\' && e + 1 == end)) return jp_unexpected(st, end);
            if (e[0] != '\\' || e[1] != 'u') return jp_fail(st, p, "lone surrogate \\u%04X", hi);
            const unsigned char *e2 = jp_u4(st, e, &lo);
            if (!e2) return NULL;
            if (lo < 0xDC00 || lo > 0xDFFF) return jp_fail(st, p, "lone surrogate \\u%04X", hi);
            e = e2;
          }
          p = e;
          break;
        }
        default:
          if (p[1] > 0x20 && p[1] < 0x7F) return jp_fail(st, p, "invalid escape '\\%c'", p[1]);
          return jp_fail(st, p, "invalid escape");
      }
    } else if (*p < 0x20) {
      return jp_fail(st, p, "control character 0x%02X in string", *p);
    } else {
      int n = (int)u8_decode(p, (size_t)(end - p), NULL);
      if (!n) return jp_truncated_utf8(p, end) ? jp_unexpected(st, end) : jp_fail(st, p, "invalid UTF-8");
      p += n;
    }
  }
}

static unsigned jp_hex4(const unsigned char *p) {
  return jp_hexval(p[0]) << 12 | jp_hexval(p[1]) << 8 | jp_hexval(p[2]) << 4 | jp_hexval(p[3]);
}

/* Decodes the checked string body [p, close) into out, which never needs
   more bytes than the body has; returns the decoded length. */
static size_t jp_decode(char *out, const unsigned char *p, const unsigned char *close) {
  size_t n = 0;
  while (p < close) {
    const unsigned char *bs = memchr(p, '\\', (size_t)(close - p));
    size_t run = (size_t)((bs ? bs : close) - p);
    memcpy(out + n, p, run);
    n += run;
    if (!bs) break;
    p = bs + 2;
    switch (bs[1]) {
      case 'b': out[n++] = '\b'; break;
      case 'f': out[n++] = '\f'; break;
      case 'n': out[n++] = '\n'; break;
      case 'r': out[n++] = '\r'; break;
      case 't': out[n++] = '\t'; break;
      case 'u': {
        unsigned cp = jp_hex4(p);
        p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (jp_hex4(p + 2) - 0xDC00);
          p += 6;
        }
        n += u8_encode(out + n, cp);
        break;
      }
      default: out[n++] = (char)bs[1]; break;
    }
  }
  return n;
}

/* The string literal at q, decoded into the arena and NUL-terminated. */
static const unsigned char *jp_string(jp_state *st, const unsigned char *q, char **out, size_t *len) {
  int escapes;
  const unsigned char *p = jp_scan_string(st, q, &escapes);
  if (!p) return NULL;
  size_t raw = (size_t)(p - q) - 2;
  char *s = ar_alloc(st->a, raw + 1);
  if (!s) return jp_nomem(st);
  if (escapes) {
    *len = jp_decode(s, q + 1, p - 1);
  } else {
    memcpy(s, q + 1, raw);
    *len = raw;
  }
  s[*len] = '\0';
  *out = s;
  return p;
}

/* Whether the current object already has key: 1, 0, or -1 when memory runs
   out. Small objects are scanned; larger ones keep a hash of their keys. */
static int jp_seen(jp_state *st, jp_frame *f, const char *key, size_t len) {
  if (!f->keys) {
    if (f->c->count < JP_SCAN_MAX) {
      for (const jv *m = f->c->first; m; m = m->next)
        if (m->keylen == len && memcmp(m->key, key, len) == 0) return 1;
      return 0;
    }
    f->keys = ar_alloc(st->a, sizeof *f->keys);
    if (!f->keys) return -1;
    for (const jv *m = f->c->first; m; m = m->next)
      if (!mp_put(st->a, f->keys, m->key, m->keylen, f->c)) return -1;
  }
  if (mp_get(f->keys, key, len)) return 1;
  return mp_put(st->a, f->keys, key, len, f->c) ? 0 : -1;
}

/* The key as a JSON string literal for a message, cut short with "...". */
static void jp_quote(char *out, size_t cap, const char *key, size_t len) {
  static const char hex[] = "0123456789abcdef";
  size_t n = 0, i = 0;
  out[n++] = '"';
  while (i < len) {
    unsigned char c = (unsigned char)key[i];
    size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (n + 6 + 5 > cap) { memcpy(out + n, "...", 3); n += 3; break; }
    if (c < 0x20 || c == 0x7F) {
      char e[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
      memcpy(out + n, e, 6);
      n += 6;
    } else if (c == '"' || c == '\\') {
      out[n++] = '\\';
      out[n++] = (char)c;
    } else {
      memcpy(out + n, key + i, k);
      n += k;
    }
    i += k;
  }
  out[n++] = '"';
  out[n] = '\0';
}

/* Reads an object member's key and colon; returns where its value starts. */
static const unsigned char *jp_key(jp_state *st, jp_frame *f, const unsigned char *q) {
  char *key;
  size_t len;
  if (q == st->end || *q != '"') return jp_unexpected(st, q);
  const unsigned char *p = jp_string(st, q, &key, &len);
  if (!p) return NULL;
  int seen = jp_seen(st, f, key, len);
  if (seen < 0) return jp_nomem(st);
  if (seen) {
    /* the one error a reader fixes by finding the other copy: say where */
    char shown[64];
    jp_quote(shown, sizeof shown, key, len);
    long line, col;
    jp_where(st, q, &line, &col);
    return jp_fail(st, q, "duplicate key %s (line %ld, column %ld)", shown, line, col);
  }
  p = jp_space(p, st->end);
  if (p == st->end || *p != ':') return jp_unexpected(st, p);
  f->key = key;
  f->keylen = len;
  return jp_space(p + 1, st->end);
}

/* One pass over the text; open containers live on an explicit stack, so the
   C stack stays flat whatever the nesting. */
jv *json_parse(ar_arena *a, const char *text, size_t len, int max_depth, char *err, size_t errlen) {
  jp_state st;
  jp_frame local[JP_FRAMES], *stack = local;
  int depth = 0, cap = JP_FRAMES;
  if (!text) text = "";
  if (max_depth < 0) max_depth = 0;
  st.a = a;
  st.text = (const unsigned char *)text;
  st.end = st.text + len;
  st.err = err;
  st.errlen = errlen;
  st.pointlen = 0;
  if (err && errlen) err[0] = '\0';
  const unsigned char *p = jp_space(st.text, st.end), *end = st.end;
  if (p == end) return jp_fail(&st, p, "empty input");
  for (;;) {
    jv *v = NULL;
    if (p == end) return jp_unexpected(&st, p);
    switch (*p) {
      case '{': case '[': {
        if (depth >= max_depth) return jp_fail(&st, p, "nesting deeper than %d", max_depth);
        int obj = *p == '{';
        jv *c = obj ? jv_obj(a) : jv_arr(a);
        if (!c) return jp_nomem(&st);
        p = jp_space(p + 1, end);
        if (p < end && *p == (obj ? '}' : ']')) {
          p++;
          v = c;
          break;
        }
        if (depth == cap) {
          jp_frame *grown = ar_alloc(a, sizeof *grown * (size_t)cap * 2);
          if (!grown) return jp_nomem(&st);
          memcpy(grown, stack, sizeof *stack * (size_t)cap);
          stack = grown;
          cap *= 2;
        }
        jp_frame *f = &stack[depth++];
        f->c = c;
        f->key = NULL;
        f->keys = NULL;
        if (obj && !(p = jp_key(&st, f, p))) return NULL;
        continue;
      }
      case '"': {
        char *s;
        size_t n;
        if (!(p = jp_string(&st, p, &s, &n))) return NULL;
        v = jv_str(a, s, n);
        break;
      }
      case 't':
        if (!(p = jp_word(&st, p, "true"))) return NULL;
        v = jv_bool(a, 1);
        break;
      case 'f':
        if (!(p = jp_word(&st, p, "false"))) return NULL;
        v = jv_bool(a, 0);
        break;
      case 'n':
        if (!(p = jp_word(&st, p, "null"))) return NULL;
        v = jv_null(a);
        break;
      default:
        if (*p != '-' && (*p < '0' || *p > '9')) return jp_unexpected_at(&st, p, 1);
        if (!(p = jp_number(&st, p, &v))) return NULL;
        break;
    }
    if (!v) return jp_nomem(&st);
    /* v is complete: hang it on its container, close what ends here */
    for (;;) {
      p = jp_space(p, end);
      if (depth == 0) return p == end ? v : jp_unexpected(&st, p);
      jp_frame *f = &stack[depth - 1];
      int obj = f->c->type == JV_OBJ, closer = obj ? '}' : ']';
      if (obj) jv_setn(f->c, f->key, f->keylen, v); else jv_push(f->c, v);
      if (p < end && *p == ',') {
        const unsigned char *comma = p;
        p = jp_space(p + 1, end);
        if (p < end && *p == closer) return jp_fail(&st, comma, "trailing comma");
        if (obj && !(p = jp_key(&st, f, p))) return NULL;
        break;
      }
      if (p == end || *p != closer) return jp_unexpected(&st, p);
      p++;
      v = f->c;
      depth--;
    }
  }
}
