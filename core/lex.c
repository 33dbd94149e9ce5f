#include "lex.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

void lx_init(lx_state *lx, const char *src, size_t start, size_t end, int line, int col, dg_list *diag) {
  lx->src = src;
  lx->pos = start;
  lx->end = end;
  lx->line = line;
  lx->col = col;
  lx->diag = diag;
  lx->saw_newline = 0;
}

static int peekc(lx_state *lx, size_t ahead) {
  return lx->pos + ahead < lx->end ? (unsigned char)lx->src[lx->pos + ahead] : -1;
}

/* Advances one byte, keeping line and column (in code points) current. */
static void advance(lx_state *lx) {
  unsigned char c = (unsigned char)lx->src[lx->pos++];
  if (c == '\n') { lx->line++; lx->col = 1; lx->saw_newline = 1; }
  else if ((c & 0xC0) != 0x80) lx->col++;
}

static void skip_space(lx_state *lx) {
  for (;;) {
    int c = peekc(lx, 0);
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') {
      advance(lx);
    } else if (c == '#' || (c == '/' && peekc(lx, 1) == '/')) {
      while (lx->pos < lx->end && lx->src[lx->pos] != '\n') advance(lx);
    } else if (c == '/' && peekc(lx, 1) == '*') {
      int line = lx->line, col = lx->col;
      advance(lx); advance(lx);
      while (lx->pos < lx->end && !(peekc(lx, 0) == '*' && peekc(lx, 1) == '/')) advance(lx);
      if (lx->pos >= lx->end) { dg_error(lx->diag, line, col, "unterminated comment"); return; }
      advance(lx); advance(lx);
    } else {
      return;
    }
  }
}

static int is_name_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* The bytes of a non-ASCII letter at the position, or 0: a valid UTF-8
   sequence outside Latin-1's signs and the punctuation and symbol blocks
   (so that "café" reads as one word, and a curly quote does not). */
static int foreign_letter(lx_state *lx) {
  if (peekc(lx, 0) < 0x80) return 0;
  uint32_t cp;
  size_t n = u8_decode((const unsigned char *)lx->src + lx->pos, lx->end - lx->pos, &cp);
  if (!n || cp < 0xC0 || cp == 0xD7 || cp == 0xF7 || (cp >= 0x2000 && cp <= 0x2BFF) ||
      (cp >= 0x3000 && cp <= 0x303F) || cp == 0xFEFF)
    return 0;
  return (int)n;
}

/* strtod with '.' whatever the process locale says, as Lua's own l_str2d does */
static double to_double(const char *s, size_t len, int *ok) {
  char buf[128];
  if (len >= sizeof buf) { *ok = 0; return 0; }
  memcpy(buf, s, len);
  buf[len] = '\0';
  const char *point = localeconv()->decimal_point;
  if (point && point[0] != '.' && point[0] && !point[1]) {
    char *dot = strchr(buf, '.');
    if (dot) *dot = point[0];
  }
  char *end;
  errno = 0;
  double d = strtod(buf, &end);
  *ok = *end == '\0' && isfinite(d);
  return d;
}

static lx_token lex_number(lx_state *lx, lx_token t) {
  int is_float = 0;
  while (is_digit(peekc(lx, 0))) advance(lx);
  if (peekc(lx, 0) == '.' && is_digit(peekc(lx, 1))) {
    is_float = 1;
    advance(lx);
    while (is_digit(peekc(lx, 0))) advance(lx);
  }
  if (peekc(lx, 0) == 'e' || peekc(lx, 0) == 'E') {
    int k = 1;
    if (peekc(lx, 1) == '+' || peekc(lx, 1) == '-') k = 2;
    if (is_digit(peekc(lx, k))) {
      is_float = 1;
      while (k-- > 0) advance(lx);
      while (is_digit(peekc(lx, 0))) advance(lx);
    }
  }
  t.len = lx->pos - t.start;
  if (is_name_start(peekc(lx, 0)) || is_digit(peekc(lx, 0))) {
    while (is_name_start(peekc(lx, 0)) || is_digit(peekc(lx, 0))) advance(lx);
    dg_error(lx->diag, t.line, t.col, "malformed number '%.*s'", (int)(lx->pos - t.start), lx->src + t.start);
    t.kind = TK_ERROR;
    return t;
  }
  const char *s = lx->src + t.start;
  if (!is_float) {
    unsigned long long v = 0;
    for (size_t i = 0; i < t.len; i++) {
      unsigned d = (unsigned)(s[i] - '0');
      if (v > (9223372036854775808ULL - d) / 10) {
        dg_error(lx->diag, t.line, t.col, "integer %.*s is too large", (int)t.len, s);
        t.kind = TK_ERROR;
        return t;
      }
      v = v * 10 + d;
    }
    t.kind = TK_INT;
    t.int_min = v == 9223372036854775808ULL;
    t.ival = t.int_min ? -9223372036854775807LL - 1 : (long long)v;
    return t;
  }
  int ok;
  t.fval = to_double(s, t.len, &ok);
  if (!ok) {
    dg_error(lx->diag, t.line, t.col, "number %.*s is out of range", (int)(t.len > 60 ? 60 : t.len), s);
    t.kind = TK_ERROR;
    return t;
  }
  t.kind = TK_FLOAT;
  return t;
}

/* Scans to the closing quote; escapes are only skipped here and decoded later. */
static lx_token lex_string(lx_state *lx, lx_token t) {
  advance(lx);
  t.start = lx->pos;
  for (;;) {
    int c = peekc(lx, 0);
    if (c < 0) {
      dg_error(lx->diag, t.line, t.col, "unterminated string");
      t.kind = TK_ERROR;
      t.len = lx->pos - t.start;
      return t;
    }
    if (c == '"') break;
    if (c == '\\' && lx->pos + 1 < lx->end) { advance(lx); advance(lx); continue; }
    if (c >= 0x80) {
      int n = (int)u8_decode((const unsigned char *)lx->src + lx->pos, lx->end - lx->pos, NULL);
      if (n == 0) {
        dg_error(lx->diag, lx->line, lx->col, "invalid UTF-8 in string");
        advance(lx);
        t.kind = TK_ERROR;
        continue;
      }
      while (n-- > 0) advance(lx);
      continue;
    }
    advance(lx);
  }
  t.len = lx->pos - t.start;
  advance(lx);
  if (t.kind != TK_ERROR) t.kind = TK_STRING;
  return t;
}

lx_token lx_next(lx_state *lx) {
  lx->saw_newline = 0;
  skip_space(lx);
  lx_token t;
  memset(&t, 0, sizeof t);
  t.nl_before = lx->saw_newline;
  t.start = lx->pos;
  t.line = lx->line;
  t.col = lx->col;
  int c = peekc(lx, 0);
  if (c < 0) { t.kind = TK_EOF; return t; }
  if (is_name_start(c) || foreign_letter(lx)) {
    /* a name with letters past ASCII is one word and one error */
    int foreign = 0;
    for (;;) {
      int k;
      if (is_name_start(peekc(lx, 0)) || is_digit(peekc(lx, 0))) advance(lx);
      else if ((k = foreign_letter(lx)) > 0) for (foreign = 1; k > 0; k--) advance(lx);
      else break;
    }
    t.kind = foreign ? TK_ERROR : TK_NAME;
    t.len = lx->pos - t.start;
    if (foreign)
      dg_error(lx->diag, t.line, t.col, "'%.*s' is not a name: names are ASCII (letters a-z and A-Z, digits, '_')",
               (int)(t.len > 60 ? 60 : t.len), lx->src + t.start);
    return t;
  }
  if (is_digit(c)) return lex_number(lx, t);
  if (c == '"') return lex_string(lx, t);
  int c1 = peekc(lx, 1);
  lx_kind k;
  int n = 1;
  switch (c) {
    case '(': k = TK_LPAREN; break;
    case ')': k = TK_RPAREN; break;
    case '{': k = TK_LBRACE; break;
    case '}': k = TK_RBRACE; break;
    case '[': k = TK_LBRACKET; break;
    case ']': k = TK_RBRACKET; break;
    case ',': k = TK_COMMA; break;
    case ';': k = TK_SEMI; break;
    case ':': k = TK_COLON; break;
    case '.': k = TK_DOT; break;
    case '?': k = TK_QUESTION; break;
    case '@': k = TK_AT; break;
    case '+': k = TK_PLUS; break;
    case '*': k = TK_STAR; break;
    case '/': k = TK_SLASH; break;
    case '%': k = TK_PERCENT; break;
    case '-': if (c1 == '>') { k = TK_ARROW; n = 2; } else k = TK_MINUS; break;
    case '=': if (c1 == '=') { k = TK_EQ; n = 2; } else k = TK_ASSIGN; break;
    case '!': if (c1 == '=') { k = TK_NE; n = 2; } else k = TK_NOT; break;
    case '<': if (c1 == '=') { k = TK_LE; n = 2; } else k = TK_LT; break;
    case '>': if (c1 == '=') { k = TK_GE; n = 2; } else k = TK_GT; break;
    case '&': if (c1 == '&') { k = TK_AND; n = 2; } else k = TK_ERROR; break;
    case '|': if (c1 == '|') { k = TK_OR; n = 2; } else k = TK_PIPE; break;
    default: k = TK_ERROR; break;
  }
  if (k == TK_ERROR) {
    int len = c >= 0x80 ? (int)u8_decode((const unsigned char *)lx->src + lx->pos, lx->end - lx->pos, NULL) : 1;
    if (len == 0) {
      dg_error(lx->diag, t.line, t.col, "invalid UTF-8 byte 0x%02X", (unsigned)c);
      len = 1;
    } else if (c < 0x20 || c == 0x7F) {
      dg_error(lx->diag, t.line, t.col, "unexpected control character 0x%02X", (unsigned)c);
    } else {
      dg_error(lx->diag, t.line, t.col, "unexpected character '%.*s'", len, lx->src + lx->pos);
    }
    while (len-- > 0) advance(lx);
    t.kind = TK_ERROR;
    t.len = lx->pos - t.start;
    return t;
  }
  while (n-- > 0) advance(lx);
  t.kind = k;
  t.len = lx->pos - t.start;
  return t;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int read_hex4(const char *s, size_t i, size_t len) {
  if (i + 4 > len) return -1;
  int v = 0;
  for (size_t k = 0; k < 4; k++) {
    int h = hexval((unsigned char)s[i + k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

char *lx_decode_string(const char *src, size_t start, size_t len, int line, int col,
                       ar_arena *a, dg_list *diag, size_t *outlen) {
  const char *s = src + start;
  char *out = ar_alloc(a, len + 1);
  if (!out) return NULL;
  size_t n = 0;
  int ok = 1;
  col++; /* the opening quote */
  for (size_t i = 0; i < len;) {
    unsigned char c = (unsigned char)s[i];
    if (c != '\\') {
      out[n++] = (char)c;
      if (c == '\n') { line++; col = 1; }
      else if ((c & 0xC0) != 0x80) col++;
      i++;
      continue;
    }
    int ecol = col;
    if (i + 1 >= len) { dg_error(diag, line, ecol, "unfinished escape"); ok = 0; break; }
    char e = s[i + 1];
    i += 2;
    col += 2;
    switch (e) {
      case '"': out[n++] = '"'; break;
      case '\\': out[n++] = '\\'; break;
      case '/': out[n++] = '/'; break;
      case '{': out[n++] = '{'; break;
      case '}': out[n++] = '}'; break;
      case 'n': out[n++] = '\n'; break;
      case 't': out[n++] = '\t'; break;
      case 'r': out[n++] = '\r'; break;
      case 'b': out[n++] = '\b'; break;
      case 'f': out[n++] = '\f'; break;
      case 'u': {
        int cp = read_hex4(s, i, len);
        if (cp < 0) { dg_error(diag, line, ecol, "\\u needs four hex digits"); ok = 0; break; }
        i += 4;
        col += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          int lo = (i + 1 < len && s[i] == '\\' && s[i + 1] == 'u') ? read_hex4(s, i + 2, len) : -1;
          if (lo < 0xDC00 || lo > 0xDFFF) { dg_error(diag, line, ecol, "unpaired surrogate \\u%04X", cp); ok = 0; break; }
          i += 6;
          col += 6;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          dg_error(diag, line, ecol, "unpaired surrogate \\u%04X", cp);
          ok = 0;
          break;
        }
        n += u8_encode(out + n, (uint32_t)cp);
        break;
      }
      default:
        dg_error(diag, line, ecol, "unknown escape '\\%c'", (e >= 0x20 && e < 0x7F) ? e : '?');
        ok = 0;
        break;
    }
  }
  out[n] = '\0';
  if (outlen) *outlen = n;
  return ok ? out : NULL;
}

const char *lx_kind_name(lx_kind k) {
  static const char *const names[] = {
    "end of file", "invalid token", "name", "integer", "number", "string",
    "'('", "')'", "'{'", "'}'", "'['", "']'",
    "','", "';'", "':'", "'.'", "'?'", "'='", "'->'", "'@'", "'|'",
    "'+'", "'-'", "'*'", "'/'", "'%'",
    "'=='", "'!='", "'<'", "'<='", "'>'", "'>='", "'&&'", "'||'", "'!'"
  };
  return (size_t)k < sizeof names / sizeof names[0] ? names[k] : "token";
}
