#include "utf8.h"

long long u8_count(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s, *end = p + len;
  long long n = 0;
  while (p < end) {
    if (*p < 0x80) { p++; n++; continue; }
    size_t k = u8_decode(p, (size_t)(end - p), NULL);
    if (!k) return -1;
    p += k;
    n++;
  }
  return n;
}

int u8_valid(const char *s, size_t len) {
  return u8_count(s, len) >= 0;
}

size_t u8_encode(char out[4], uint32_t cp) {
  if (cp < 0x80) { out[0] = (char)cp; return 1; }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | cp >> 12); out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | cp >> 18); out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
  out[2] = (char)(0x80 | (cp >> 6 & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

size_t u8_cut(const char *s, size_t len, size_t max) {
  if (len <= max) return len;
  size_t n = max;
  while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
  return n;
}
