/* Secrets replaced by a marker (redact.h). */
#include "redact.h"

#include <string.h>

/* The length of the secret at s + i, or 0. */
static size_t match(const char *s, size_t len, size_t i, const char *const *secrets, int n) {
  for (int k = 0; k < n; k++) {
    if (!secrets[k] || secrets[k][0] != s[i]) continue;   /* most places: one byte compared */
    size_t m = strlen(secrets[k]);
    if (m >= RD_MIN && i + m <= len && memcmp(s + i, secrets[k], m) == 0) return m;
  }
  return 0;
}

void rd_text(sb_buf *out, const char *s, size_t len, const char *const *secrets, int n) {
  for (size_t i = 0; i < len;) {
    size_t m = match(s, len, i, secrets, n);
    if (m) {
      sb_adds(out, RD_MARKER);
      i += m;
    } else {
      sb_addc(out, s[i++]);
    }
  }
}

int rd_found(const char *s, size_t len, const char *const *secrets, int n) {
  for (size_t i = 0; i < len; i++)
    if (match(s, len, i, secrets, n)) return 1;
  return 0;
}

/* s redacted, in a (NULL: out of memory); *outlen its length. */
static char *redacted(ar_arena *a, const char *s, size_t len, const char *const *secrets, int n, size_t *outlen) {
  sb_buf b;
  sb_init(&b);
  rd_text(&b, s, len, secrets, n);
  char *t = b.failed ? NULL : ar_strndup(a, b.data ? b.data : "", b.len);
  *outlen = b.len;
  sb_free(&b);
  return t;
}

int rd_json(ar_arena *a, jv *v, const char *const *secrets, int n) {
  if (!v) return 0;
  if (v->key && rd_found(v->key, v->keylen, secrets, n)) {
    size_t m;
    if (!(v->key = redacted(a, v->key, v->keylen, secrets, n, &m))) return -1;
    v->keylen = m;
  }
  if (v->type == JV_STR && rd_found(v->s, v->len, secrets, n)) {
    size_t m;
    if (!(v->s = redacted(a, v->s, v->len, secrets, n, &m))) return -1;
    v->len = m;
  }
  if (v->type == JV_ARR || v->type == JV_OBJ)
    for (jv *c = v->first; c; c = c->next)
      if (rd_json(a, c, secrets, n) != 0) return -1;
  return 0;
}
