/* A growable byte buffer, Lua-free (as lua-cjson's strbuf). */
#ifndef LUMA_STRBUF_H
#define LUMA_STRBUF_H

#include <stddef.h>

typedef struct sb_buf {
  char *data;
  size_t len, cap;
  int failed;                 /* an allocation failed; contents are incomplete */
} sb_buf;

void sb_init(sb_buf *b);
void sb_free(sb_buf *b);
void sb_add(sb_buf *b, const char *s, size_t len);
void sb_adds(sb_buf *b, const char *s);
void sb_addc(sb_buf *b, char c);
void sb_printf(sb_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 2, 3)))
#endif
  ;
/* NUL-terminated contents (never NULL; "" after a failure). */
const char *sb_str(sb_buf *b);

#endif
