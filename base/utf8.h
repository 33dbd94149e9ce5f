/* UTF-8, once: decoding one code point, checking and counting a string, and
   encoding a code point. Lua-free. Valid means RFC 3629: shortest form, no
   surrogates, nothing past U+10FFFF. */
#ifndef LUMA_UTF8_H
#define LUMA_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define U8_MAX_CP 0x10FFFFu

/* Decodes the code point at s[0..avail), avail > 0, into *cp (which may be
   NULL) and returns its length in bytes (1..4), or 0 if s does not start with
   valid UTF-8. Inline: the validator and the regex engine call it per
   character. */
static inline size_t u8_decode(const unsigned char *s, size_t avail, uint32_t *cp) {
  uint32_t c = s[0], min;
  size_t k;
  if (c < 0x80) { if (cp) *cp = c; return 1; }
  if (c >= 0xC2 && c <= 0xDF) { k = 2; min = 0x80; c &= 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) { k = 3; min = 0x800; c &= 0x0F; }
  else if (c >= 0xF0 && c <= 0xF4) { k = 4; min = 0x10000; c &= 0x07; }
  else return 0;
  if (k > avail) return 0;
  for (size_t i = 1; i < k; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    c = (c << 6) | (s[i] & 0x3F);
  }
  if (c < min || c > U8_MAX_CP || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  if (cp) *cp = c;
  return k;
}

/* The number of code points in s[0..len), or -1 if it is not valid UTF-8. */
long long u8_count(const char *s, size_t len);
/* Whether s[0..len) is valid UTF-8. */
int u8_valid(const char *s, size_t len);
/* c lowercased if it is an ASCII capital; any other byte (those of UTF-8
   sequences too) as it is. */
static inline char u8_lower_ascii(char c) {
  return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}
/* How much of s[0..len) to keep to hold at most max bytes without cutting a
   character: len when it fits, else the start of the character at or
   before s[max] (a byte that begins none, or the end, counts as a start). */
size_t u8_cut(const char *s, size_t len, size_t max);
/* Writes cp (<= U8_MAX_CP, not a surrogate) as UTF-8 into out; returns 1..4. */
size_t u8_encode(char out[4], uint32_t cp);

#endif
