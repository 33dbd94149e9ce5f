#include "regex.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "luma_limits.h"
#include "utf8.h"

/* Bounds on untrusted patterns. Together they bound compile time and memory,
   and search time, which is at most input length times program size. */

#define LRE_MAX_CP 0x10FFFFu
#define LRE_NO_CP  0xFFFFFFFFu   /* the "code point" before the input and after it */
#define LRE_BAD_CP 0xFFFDu       /* what an invalid input byte reads as */

enum {
  OP_CHAR,    /* x: the code point */
  OP_ANY,     /* any code point but a line terminator */
  OP_CLASS,   /* x: index into lre.classes */
  OP_MATCH,
  OP_JMP,     /* to pc + x */
  OP_SPLIT,   /* to both pc + x and pc + y */
  OP_BOL,
  OP_EOL,
  OP_WORDB,
  OP_NWORDB
};

/* Jumps are relative to their own instruction, so that a fragment of code
   can be moved or copied without fixing it up. */
typedef struct lre_inst {
  int32_t op, x, y;
} lre_inst;

/* A set of code points: count sorted, disjoint, non-adjacent [lo, hi] pairs
   starting at lre.ranges[2 * first], plus a bitmap of its ASCII members. */
typedef struct lre_class {
  uint32_t ascii[4];
  size_t first, count;
} lre_class;

/* Immutable after lre_compile. */
struct lre {
  lre_inst *prog;
  size_t nprog;
  lre_class *classes;
  uint32_t *ranges;
  int anchored;         /* prog[0] is OP_BOL: no thread can start after offset 0 */
};

typedef struct lre_parser {
  const unsigned char *src;
  size_t len, pos;
  lre_inst *prog;
  size_t n, cap;
  lre_class *classes;
  size_t nclasses, capclasses;
  uint32_t *ranges;     /* pairs, for all classes */
  size_t nranges, capranges;
  uint32_t *set;        /* pairs, scratch for the class being parsed */
  size_t nset, capset;
  char *err;
  size_t errlen;
} lre_parser;

typedef struct lre_range {
  uint32_t lo, hi;
} lre_range;

static const lre_range digit_ranges[] = { {'0', '9'} };
static const lre_range word_ranges[] = { {'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'} };
static const lre_range space_ranges[] = {
  {0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
  {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}
};

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int fail(lre_parser *p, const char *fmt, ...) {
  va_list ap;
  if (p->err && p->errlen) {
    va_start(ap, fmt);
    vsnprintf(p->err, p->errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int peek(const lre_parser *p, size_t ahead) {
  return p->pos + ahead < p->len ? p->src[p->pos + ahead] : -1;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int is_digit(int c) { return c >= '0' && c <= '9'; }

static int is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

static int is_word(uint32_t c) { return c < 128 && (is_alpha((int)c) || is_digit((int)c) || c == '_'); }

/* Reallocates buf to hold at least need elements (doubling, at most limit);
   returns NULL, leaving buf and *cap as they were, if that fails. */
static void *grow(void *buf, size_t *cap, size_t need, size_t elem, size_t limit) {
  size_t ncap = *cap ? *cap : 16;
  void *nb;
  while (ncap < need) ncap *= 2;
  if (ncap > limit) ncap = limit;
  if ((nb = realloc(buf, ncap * elem)) != NULL) *cap = ncap;
  return nb;
}

/* Makes room for extra more instructions, within LIM_REGEX_MAX_PROGRAM. */
static int reserve(lre_parser *p, size_t extra) {
  lre_inst *np;
  if (extra > LIM_REGEX_MAX_PROGRAM - p->n)
    return fail(p, "pattern is too complex (over %d instructions)", LIM_REGEX_MAX_PROGRAM);
  if (p->n + extra <= p->cap) return 0;
  if (!(np = grow(p->prog, &p->cap, p->n + extra, sizeof *np, LIM_REGEX_MAX_PROGRAM)))
    return fail(p, "out of memory");
  p->prog = np;
  return 0;
}

static int emit(lre_parser *p, int op, int32_t x, int32_t y) {
  if (reserve(p, 1) < 0) return -1;
  p->prog[p->n].op = op;
  p->prog[p->n].x = x;
  p->prog[p->n].y = y;
  p->n++;
  return 0;
}

static int insert(lre_parser *p, size_t at, int op, int32_t x, int32_t y) {
  if (reserve(p, 1) < 0) return -1;
  memmove(p->prog + at + 1, p->prog + at, (p->n - at) * sizeof *p->prog);
  p->prog[at].op = op;
  p->prog[at].x = x;
  p->prog[at].y = y;
  p->n++;
  return 0;
}

/* Appends a copy of the fragment prog[from..from+count). */
static int copy(lre_parser *p, size_t from, size_t count) {
  if (reserve(p, count) < 0) return -1;
  if (count) memcpy(p->prog + p->n, p->prog + from, count * sizeof *p->prog);
  p->n += count;
  return 0;
}

/* Rewrites the fragment e = prog[a..n) as e{min,max}, max < 0 meaning no
   upper bound: e^min followed by e* or by (max - min) copies of e?. */
static int quantify(lre_parser *p, size_t a, int min, int max) {
  size_t sz = p->n - a, total, i;
  if (max == 0) { p->n = a; return 0; }
  if (max < 0) total = min == 0 ? sz + 2 : (size_t)min * sz + 1;
  else total = (size_t)min * sz + (size_t)(max - min) * (sz + 1);
  if (reserve(p, total - sz) < 0) return -1;
  if (max < 0 && min == 0) {
    if (insert(p, a, OP_SPLIT, 1, (int32_t)sz + 2) < 0) return -1;
    return emit(p, OP_JMP, -(int32_t)sz - 1, 0);
  }
  if (max < 0) {
    for (i = 1; i < (size_t)min; i++)
      if (copy(p, a, sz) < 0) return -1;
    return emit(p, OP_SPLIT, -(int32_t)sz, 1);
  }
  if (min == 0) {
    if (insert(p, a, OP_SPLIT, 1, (int32_t)sz + 1) < 0) return -1;
    for (i = 1, sz++; i < (size_t)max; i++)
      if (copy(p, a, sz) < 0) return -1;
    return 0;
  }
  for (i = 1; i < (size_t)min; i++)
    if (copy(p, a, sz) < 0) return -1;
  for (i = (size_t)min; i < (size_t)max; i++)
    if (emit(p, OP_SPLIT, 1, (int32_t)sz + 1) < 0 || copy(p, a, sz) < 0) return -1;
  return 0;
}

static int add_range(lre_parser *p, uint32_t lo, uint32_t hi) {
  uint32_t *ns;
  if (2 * (p->nset + 1) > p->capset) {
    if (!(ns = grow(p->set, &p->capset, 2 * (p->nset + 1), sizeof *ns, (size_t)-1)))
      return fail(p, "out of memory");
    p->set = ns;
  }
  p->set[2 * p->nset] = lo;
  p->set[2 * p->nset + 1] = hi;
  p->nset++;
  return 0;
}

static int add_ranges(lre_parser *p, const lre_range *r, size_t n, int negate) {
  uint32_t next = 0;
  size_t i;
  for (i = 0; i < n; i++) {
    if (!negate) {
      if (add_range(p, r[i].lo, r[i].hi) < 0) return -1;
    } else {
      if (r[i].lo > next && add_range(p, next, r[i].lo - 1) < 0) return -1;
      next = r[i].hi + 1;
    }
  }
  return negate ? add_range(p, next, LRE_MAX_CP) : 0;
}

/* Adds the set of \d \D \w \W \s \S, as named by c. */
static int add_escape_set(lre_parser *p, int c) {
  int negate = c == 'D' || c == 'W' || c == 'S';
  switch (c | 0x20) {
  case 'd': return add_ranges(p, digit_ranges, 1, negate);
  case 'w': return add_ranges(p, word_ranges, sizeof word_ranges / sizeof *word_ranges, negate);
  default: return add_ranges(p, space_ranges, sizeof space_ranges / sizeof *space_ranges, negate);
  }
}

static int is_escape_set(int c) {
  return c == 'd' || c == 'D' || c == 'w' || c == 'W' || c == 's' || c == 'S';
}

static int cmp_range(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Sorts and merges the scratch set, in place. */
static void normalize_set(lre_parser *p) {
  size_t i, out = 0;
  if (p->nset == 0) return;
  qsort(p->set, p->nset, 2 * sizeof *p->set, cmp_range);
  for (i = 1; i < p->nset; i++) {
    uint32_t lo = p->set[2 * i], hi = p->set[2 * i + 1];
    if (lo <= p->set[2 * out + 1] + 1) {
      if (hi > p->set[2 * out + 1]) p->set[2 * out + 1] = hi;
    } else {
      out++;
      p->set[2 * out] = lo;
      p->set[2 * out + 1] = hi;
    }
  }
  p->nset = out + 1;
}

/* Turns the scratch set into a class and emits OP_CLASS for it. */
static int finish_class(lre_parser *p, int negate) {
  lre_class *k;
  uint32_t *r;
  size_t i, need;
  normalize_set(p);
  if (negate) {
    size_t n = p->nset;
    uint32_t next = 0;
    for (i = 0; i < n; i++) {
      if (p->set[2 * i] > next && add_range(p, next, p->set[2 * i] - 1) < 0) return -1;
      next = p->set[2 * i + 1] + 1;
    }
    if (next <= LRE_MAX_CP && add_range(p, next, LRE_MAX_CP) < 0) return -1;
    memmove(p->set, p->set + 2 * n, 2 * (p->nset - n) * sizeof *p->set);
    p->nset -= n;
  }
  if (p->nclasses == p->capclasses) {
    if (!(k = grow(p->classes, &p->capclasses, p->nclasses + 1, sizeof *k, (size_t)-1)))
      return fail(p, "out of memory");
    p->classes = k;
  }
  need = 2 * (p->nranges + p->nset);
  if (need > p->capranges) {
    if (!(r = grow(p->ranges, &p->capranges, need, sizeof *r, (size_t)-1)))
      return fail(p, "out of memory");
    p->ranges = r;
  }
  k = &p->classes[p->nclasses];
  memset(k->ascii, 0, sizeof k->ascii);
  k->first = p->nranges;
  k->count = p->nset;
  if (p->nset) memcpy(p->ranges + 2 * p->nranges, p->set, 2 * p->nset * sizeof *p->set);
  p->nranges += p->nset;
  for (i = 0; i < p->nset && p->set[2 * i] < 128; i++) {
    uint32_t c, hi = p->set[2 * i + 1] < 127 ? p->set[2 * i + 1] : 127;
    for (c = p->set[2 * i]; c <= hi; c++) k->ascii[c >> 5] |= 1u << (c & 31);
  }
  p->nset = 0;
  return emit(p, OP_CLASS, (int32_t)p->nclasses++, 0);
}

/* Reads \uHHHH (joining a surrogate pair written as two escapes) or
   \u{H...}; p->pos is just past the 'u'. */
static int parse_unicode_escape(lre_parser *p, size_t at, uint32_t *cp) {
  uint32_t v = 0;
  int i, d;
  if (peek(p, 0) == '{') {
    p->pos++;
    for (i = 0; (d = hexval(peek(p, 0))) >= 0; i++, p->pos++) {
      v = v * 16 + (uint32_t)d;
      if (v > LRE_MAX_CP) return fail(p, "\\u{...} escape is above U+10FFFF at offset %zu", at);
    }
    if (i == 0 || peek(p, 0) != '}') return fail(p, "invalid \\u{...} escape at offset %zu", at);
    p->pos++;
    *cp = v;
    return 0;
  }
  for (i = 0; i < 4; i++) {
    if ((d = hexval(peek(p, (size_t)i))) < 0) return fail(p, "invalid \\u escape at offset %zu", at);
    v = v * 16 + (uint32_t)d;
  }
  p->pos += 4;
  if (v >= 0xD800 && v <= 0xDBFF && peek(p, 0) == '\\' && peek(p, 1) == 'u') {
    uint32_t lo = 0;
    for (i = 0; i < 4 && (d = hexval(peek(p, (size_t)i + 2))) >= 0; i++) lo = lo * 16 + (uint32_t)d;
    if (i == 4 && lo >= 0xDC00 && lo <= 0xDFFF) {
      v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
      p->pos += 6;
    }
  }
  *cp = v;
  return 0;
}

/* Reads an escape that stands for one code point; p->pos is at the '\'.
   \b means backspace here: callers handle it first where it is an assertion. */
static int parse_char_escape(lre_parser *p, uint32_t *cp) {
  size_t at = p->pos;
  int c = peek(p, 1), d;
  if (c < 0) return fail(p, "pattern ends with a lone backslash at offset %zu", at);
  p->pos += 2;
  switch (c) {
  case 'n': *cp = '\n'; return 0;
  case 't': *cp = '\t'; return 0;
  case 'r': *cp = '\r'; return 0;
  case 'f': *cp = '\f'; return 0;
  case 'v': *cp = '\v'; return 0;
  case 'b': *cp = '\b'; return 0;
  case '0':
    if (is_digit(peek(p, 0))) return fail(p, "octal escapes are not supported at offset %zu", at);
    *cp = 0;
    return 0;
  case 'c':
    if (!is_alpha(peek(p, 0))) return fail(p, "invalid \\c escape at offset %zu", at);
    *cp = (uint32_t)peek(p, 0) % 32;
    p->pos++;
    return 0;
  case 'x':
    if (hexval(peek(p, 0)) < 0 || (d = hexval(peek(p, 1))) < 0)
      return fail(p, "invalid \\x escape at offset %zu", at);
    *cp = (uint32_t)(hexval(peek(p, 0)) * 16 + d);
    p->pos += 2;
    return 0;
  case 'u':
    return parse_unicode_escape(p, at, cp);
  case 'k':
    return fail(p, "backreferences are not supported (\\k at offset %zu)", at);
  case 'p': case 'P':
    return fail(p, "unicode property escapes are not supported (\\%c at offset %zu)", c, at);
  }
  if (c >= '1' && c <= '9')
    return fail(p, "backreferences are not supported (\\%c at offset %zu)", c, at);
  if (c > 0x20 && c < 0x7F && !is_alpha(c) && !is_digit(c)) {
    *cp = (uint32_t)c;
    return 0;
  }
  if (c > 0x20 && c < 0x7F)
    return fail(p, "unsupported escape \\%c at offset %zu", c, at);
  return fail(p, "unsupported escape at offset %zu", at);
}

/* Reads a literal code point of the pattern source. */
static int parse_literal(lre_parser *p, uint32_t *cp) {
  size_t k = u8_decode(p->src + p->pos, p->len - p->pos, cp);
  if (!k) return fail(p, "invalid UTF-8 in pattern at offset %zu", p->pos);
  p->pos += k;
  return 0;
}

/* Reads one member of a class: returns 1 for \d-like escapes (added to the
   scratch set), 0 for a single code point (stored in *cp), -1 on error. */
static int parse_class_atom(lre_parser *p, uint32_t *cp) {
  if (peek(p, 0) == '\\') {
    int c = peek(p, 1);
    if (is_escape_set(c)) {
      p->pos += 2;
      return add_escape_set(p, c) < 0 ? -1 : 1;
    }
    if (c == 'B') return fail(p, "\\B is not allowed in a character class at offset %zu", p->pos);
    return parse_char_escape(p, cp);
  }
  return parse_literal(p, cp);
}

static int parse_class(lre_parser *p) {
  size_t at = p->pos;
  int negate = 0;
  p->pos++;
  if (peek(p, 0) == '^') { negate = 1; p->pos++; }
  p->nset = 0;
  for (;;) {
    size_t from = p->pos;
    uint32_t lo = 0, hi = 0;
    int lo_set, hi_set;
    if (p->pos >= p->len) return fail(p, "unterminated character class at offset %zu", at);
    if (peek(p, 0) == ']') break;
    if ((lo_set = parse_class_atom(p, &lo)) < 0) return -1;
    if (peek(p, 0) == '-' && peek(p, 1) >= 0 && peek(p, 1) != ']') {
      p->pos++;
      if ((hi_set = parse_class_atom(p, &hi)) < 0) return -1;
      if (lo_set || hi_set)
        return fail(p, "invalid character class range at offset %zu (a class escape cannot bound a range)", from);
      if (lo > hi) return fail(p, "character class range out of order at offset %zu", from);
      if (add_range(p, lo, hi) < 0) return -1;
    } else if (!lo_set && add_range(p, lo, lo) < 0) {
      return -1;
    }
  }
  p->pos++;
  return finish_class(p, negate);
}

/* Reads a count of {n,m}, saturating above LIM_REGEX_MAX_REPEAT. */
static int parse_count(lre_parser *p, int *n) {
  int digits = 0;
  *n = 0;
  for (; is_digit(peek(p, 0)); p->pos++, digits++)
    if (*n <= LIM_REGEX_MAX_REPEAT) *n = *n * 10 + (peek(p, 0) - '0');
  return digits;
}

/* Reads {n}, {n,} or {n,m}; p->pos is at the '{'. Any other '{' is an error
   (as in unicode mode), not a literal as in Annex B. */
static int parse_braces(lre_parser *p, int *min, int *max) {
  size_t at = p->pos;
  p->pos++;
  if (!parse_count(p, min)) goto stray;
  *max = *min;
  if (peek(p, 0) == ',') {
    p->pos++;
    *max = -1;
    if (is_digit(peek(p, 0))) parse_count(p, max);
  }
  if (peek(p, 0) != '}') goto stray;
  p->pos++;
  if (*min > LIM_REGEX_MAX_REPEAT || *max > LIM_REGEX_MAX_REPEAT)
    return fail(p, "repetition count over %d at offset %zu", LIM_REGEX_MAX_REPEAT, at);
  if (*max >= 0 && *min > *max)
    return fail(p, "numbers out of order in {} quantifier at offset %zu", at);
  return 0;
stray:
  return fail(p, "'{' does not start a quantifier at offset %zu (write \\{ for a literal brace)", at);
}

/* Returns 1 and the bounds if a quantifier follows, else 0; -1 on error. */
static int parse_quantifier(lre_parser *p, int *min, int *max) {
  switch (peek(p, 0)) {
  case '*': *min = 0; *max = -1; p->pos++; break;
  case '+': *min = 1; *max = -1; p->pos++; break;
  case '?': *min = 0; *max = 1; p->pos++; break;
  case '{': if (parse_braces(p, min, max) < 0) return -1; break;
  default: return 0;
  }
  /* Lazy and greedy quantifiers give the same yes/no answer. */
  if (peek(p, 0) == '?') p->pos++;
  return 1;
}

/* Accepts ASCII identifier characters and any non-ASCII UTF-8. */
static int parse_group_name(lre_parser *p, size_t at) {
  size_t start = p->pos;
  uint32_t cp;
  for (;;) {
    int c = peek(p, 0);
    if (c == '>' && p->pos > start) { p->pos++; return 0; }
    if (c >= 0x80 && u8_decode(p->src + p->pos, p->len - p->pos, &cp)) {
      p->pos += u8_decode(p->src + p->pos, p->len - p->pos, &cp);
      continue;
    }
    if (!(is_alpha(c) || c == '_' || c == '$' || (is_digit(c) && p->pos > start)))
      return fail(p, "invalid group name at offset %zu", at);
    p->pos++;
  }
}

static int parse_disjunction(lre_parser *p, int depth);

static int parse_group(lre_parser *p, int depth) {
  size_t at = p->pos;
  if (depth >= LIM_REGEX_MAX_DEPTH)
    return fail(p, "groups are nested too deeply at offset %zu (max %d)", at, LIM_REGEX_MAX_DEPTH);
  p->pos++;
  if (peek(p, 0) == '?') {
    int c1 = peek(p, 1), c2 = peek(p, 2);
    if (c1 == '=' || c1 == '!' || (c1 == '<' && (c2 == '=' || c2 == '!')))
      return fail(p, "lookahead and lookbehind are not supported (offset %zu)", at);
    if (c1 == ':') {
      p->pos += 2;
    } else if (c1 == '<') {
      p->pos += 2;
      if (parse_group_name(p, at) < 0) return -1;
    } else {
      return fail(p, "invalid group at offset %zu", at);
    }
  }
  if (parse_disjunction(p, depth + 1) < 0) return -1;
  if (peek(p, 0) != ')') return fail(p, "unbalanced parenthesis at offset %zu", at);
  p->pos++;
  return 0;
}

/* Returns 1 for an atom that can be quantified, 0 for an assertion, -1 on error. */
static int parse_atom(lre_parser *p, int depth) {
  size_t at = p->pos;
  int c = peek(p, 0), min, max;
  uint32_t cp = 0;
  switch (c) {
  case '^': p->pos++; return emit(p, OP_BOL, 0, 0);
  case '$': p->pos++; return emit(p, OP_EOL, 0, 0);
  case '.': p->pos++; return emit(p, OP_ANY, 0, 0) < 0 ? -1 : 1;
  case '(': return parse_group(p, depth) < 0 ? -1 : 1;
  case '[': return parse_class(p) < 0 ? -1 : 1;
  case '*': case '+': case '?':
    return fail(p, "nothing to repeat at offset %zu", at);
  case '{':
    if (parse_braces(p, &min, &max) < 0) return -1;
    return fail(p, "nothing to repeat at offset %zu", at);
  case '}':
    return fail(p, "lone '}' at offset %zu (write \\} for a literal brace)", at);
  case ']':
    return fail(p, "unbalanced bracket ']' at offset %zu (write \\] for a literal bracket)", at);
  case '\\':
    c = peek(p, 1);
    if (c == 'b' || c == 'B') {
      p->pos += 2;
      return emit(p, c == 'b' ? OP_WORDB : OP_NWORDB, 0, 0);
    }
    if (is_escape_set(c)) {
      p->pos += 2;
      p->nset = 0;
      if (add_escape_set(p, c) < 0) return -1;
      return finish_class(p, 0) < 0 ? -1 : 1;
    }
    if (parse_char_escape(p, &cp) < 0) return -1;
    return emit(p, OP_CHAR, (int32_t)cp, 0) < 0 ? -1 : 1;
  }
  if (parse_literal(p, &cp) < 0) return -1;
  return emit(p, OP_CHAR, (int32_t)cp, 0) < 0 ? -1 : 1;
}

static int parse_term(lre_parser *p, int depth) {
  size_t start = p->n, at;
  int min, max, q, kind = parse_atom(p, depth);
  if (kind < 0) return -1;
  at = p->pos;
  if ((q = parse_quantifier(p, &min, &max)) <= 0) return q;
  if (!kind) return fail(p, "nothing to repeat at offset %zu", at);
  if (quantify(p, start, min, max) < 0) return -1;
  at = p->pos;
  if ((q = parse_quantifier(p, &min, &max)) != 0)
    return q < 0 ? -1 : fail(p, "nothing to repeat at offset %zu", at);
  return 0;
}

static int parse_alternative(lre_parser *p, int depth) {
  while (p->pos < p->len && peek(p, 0) != '|' && peek(p, 0) != ')')
    if (parse_term(p, depth) < 0) return -1;
  return 0;
}

/* a|b|c becomes SPLIT(a, SPLIT(b, c)), each branch but the last ending in a
   jump to the end. Until the end is known, those jumps form a chain through
   their x fields (absolute index of the previous jump, or -1). */
static int parse_disjunction(lre_parser *p, int depth) {
  size_t start = p->n;
  int32_t jumps = -1;
  for (;;) {
    if (parse_alternative(p, depth) < 0) return -1;
    if (peek(p, 0) != '|') break;
    p->pos++;
    if (insert(p, start, OP_SPLIT, 1, (int32_t)(p->n - start) + 2) < 0 ||
        emit(p, OP_JMP, jumps, 0) < 0)
      return -1;
    jumps = (int32_t)p->n - 1;
    start = p->n;
  }
  while (jumps >= 0) {
    int32_t prev = p->prog[jumps].x;
    p->prog[jumps].x = (int32_t)p->n - jumps;
    jumps = prev;
  }
  return 0;
}

static void parser_free(lre_parser *p) {
  free(p->prog);
  free(p->classes);
  free(p->ranges);
  free(p->set);
}

lre *lre_compile(const char *pattern, size_t len, char *err, size_t errlen) {
  lre_parser p;
  lre *re;
  memset(&p, 0, sizeof p);
  p.src = (const unsigned char *)pattern;
  p.len = len;
  p.err = err;
  p.errlen = errlen;
  if (err && errlen) err[0] = '\0';
  if (len > LIM_REGEX_MAX_PATTERN) {
    fail(&p, "pattern is too long (%zu bytes, max %d)", len, LIM_REGEX_MAX_PATTERN);
    return NULL;
  }
  if (parse_disjunction(&p, 0) < 0 ||
      (p.pos < p.len && fail(&p, "unbalanced parenthesis at offset %zu", p.pos) < 0) ||
      emit(&p, OP_MATCH, 0, 0) < 0) {
    parser_free(&p);
    return NULL;
  }
  if (!(re = malloc(sizeof *re))) {
    fail(&p, "out of memory");
    parser_free(&p);
    return NULL;
  }
  re->prog = p.prog;
  re->nprog = p.n;
  re->classes = p.classes;
  re->ranges = p.ranges;
  re->anchored = p.prog[0].op == OP_BOL;
  free(p.set);
  return re;
}

void lre_free(lre *re) {
  if (!re) return;
  free(re->prog);
  free(re->classes);
  free(re->ranges);
  free(re);
}

static int class_has(const lre *re, const lre_class *k, uint32_t c) {
  const uint32_t *r;
  size_t lo = 0, hi = k->count;
  if (c < 128) return (k->ascii[c >> 5] >> (c & 31)) & 1;
  if (!hi) return 0;
  r = re->ranges + 2 * k->first;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (c < r[2 * mid]) hi = mid;
    else if (c > r[2 * mid + 1]) lo = mid + 1;
    else return 1;
  }
  return 0;
}

static int consumes(const lre *re, const lre_inst *in, uint32_t c) {
  switch (in->op) {
  case OP_CHAR: return c == (uint32_t)in->x;
  case OP_ANY: return c != '\n' && c != '\r' && c != 0x2028 && c != 0x2029;
  default: return class_has(re, &re->classes[in->x], c);
  }
}

/* Work space of one search. mark[pc] == gen means pc was already reached at
   the current input position, so each list and the stack hold at most nprog
   entries, and empty loops end. */
typedef struct lre_vm {
  const lre *re;
  size_t *mark;
  size_t gen;
  int32_t *stack;
} lre_vm;

/* Adds to list the consuming instructions reachable from pc without input,
   at the position between code points prev and next. Returns 1 if OP_MATCH
   is reachable. */
static int follow(lre_vm *vm, int32_t *list, size_t *n, int32_t pc, uint32_t prev, uint32_t next) {
  const lre_inst *prog = vm->re->prog;
  size_t top = 0;
#define LRE_PUSH(t) do { int32_t t_ = (t); \
    if (vm->mark[t_] != vm->gen) { vm->mark[t_] = vm->gen; vm->stack[top++] = t_; } } while (0)
  LRE_PUSH(pc);
  while (top) {
    const lre_inst *in = &prog[pc = vm->stack[--top]];
    switch (in->op) {
    case OP_MATCH: return 1;
    case OP_JMP: LRE_PUSH(pc + in->x); break;
    case OP_SPLIT: LRE_PUSH(pc + in->x); LRE_PUSH(pc + in->y); break;
    case OP_BOL: if (prev == LRE_NO_CP) LRE_PUSH(pc + 1); break;
    case OP_EOL: if (next == LRE_NO_CP) LRE_PUSH(pc + 1); break;
    case OP_WORDB: if (is_word(prev) != is_word(next)) LRE_PUSH(pc + 1); break;
    case OP_NWORDB: if (is_word(prev) == is_word(next)) LRE_PUSH(pc + 1); break;
    default: list[(*n)++] = pc; break;
    }
  }
#undef LRE_PUSH
  return 0;
}

static uint32_t next_cp(const unsigned char *s, size_t len, size_t pos, size_t *step) {
  uint32_t cp;
  if (pos >= len) { *step = 0; return LRE_NO_CP; }
  if (!(*step = u8_decode(s + pos, len - pos, &cp))) { *step = 1; cp = LRE_BAD_CP; }
  return cp;
}

/* Steps all threads through the input together, starting a new thread at
   each position, so each code point costs at most one visit per instruction. */
static int run(lre_vm *vm, int32_t *clist, int32_t *nlist, const unsigned char *s, size_t len) {
  const lre *re = vm->re;
  size_t pos = 0, step, nstep, nc = 0, nn, i;
  uint32_t prev = LRE_NO_CP, cur = next_cp(s, len, 0, &step), next;
  for (;;) {
    int32_t *t;
    if ((pos == 0 || !re->anchored) && follow(vm, clist, &nc, 0, prev, cur)) return 1;
    if (pos == len || (nc == 0 && re->anchored)) return 0;
    next = next_cp(s, len, pos + step, &nstep);
    vm->gen++;
    nn = 0;
    for (i = 0; i < nc; i++)
      if (consumes(re, &re->prog[clist[i]], cur) &&
          follow(vm, nlist, &nn, clist[i] + 1, cur, next))
        return 1;
    t = clist; clist = nlist; nlist = t;
    nc = nn;
    pos += step;
    step = nstep;
    prev = cur;
    cur = next;
  }
}

int lre_search(const lre *re, const char *s, size_t len) {
  size_t n = re->nprog;
  lre_vm vm;
  int32_t *lists;
  int r;
  /* One block: marks (zeroed), then the stack and two thread lists. */
  char *mem = calloc(1, n * sizeof(size_t) + 3 * n * sizeof(int32_t));
  if (!mem) return -1;
  vm.re = re;
  vm.mark = (size_t *)(void *)mem;
  vm.gen = 1;
  lists = (int32_t *)(void *)(mem + n * sizeof(size_t));
  vm.stack = lists + 2 * n;
  r = run(&vm, lists, lists + n, (const unsigned char *)s, len);
  free(mem);
  return r;
}

size_t lre_cost(const lre *re) {
  return re->nprog;
}
