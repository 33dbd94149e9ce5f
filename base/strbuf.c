#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sb_init(sb_buf *b) {
  b->data = NULL;
  b->len = b->cap = 0;
  b->failed = 0;
}

void sb_free(sb_buf *b) {
  free(b->data);
  sb_init(b);
}

static int reserve(sb_buf *b, size_t extra) {
  if (b->failed) return 0;
  if (extra > (size_t)-1 / 2 - b->len) { b->failed = 1; return 0; }
  size_t need = b->len + extra + 1;
  if (need <= b->cap) return 1;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < need) cap *= 2;
  char *d = realloc(b->data, cap);
  if (!d) { b->failed = 1; return 0; }
  b->data = d;
  b->cap = cap;
  return 1;
}

void sb_add(sb_buf *b, const char *s, size_t len) {
  if (!reserve(b, len)) return;
  if (len) memcpy(b->data + b->len, s, len);
  b->len += len;
  b->data[b->len] = '\0';
}

void sb_adds(sb_buf *b, const char *s) { sb_add(b, s, strlen(s)); }

void sb_addc(sb_buf *b, char c) {
  if (!reserve(b, 1)) return;
  b->data[b->len++] = c;
  b->data[b->len] = '\0';
}

void sb_printf(sb_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

const char *sb_str(sb_buf *b) {
  return b->data && !b->failed ? b->data : "";
}
