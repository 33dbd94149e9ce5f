#include "arena.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AR_CHUNK_SIZE 16384

struct ar_chunk {
  ar_chunk *next;
  size_t size, used;
  /* payload follows, aligned as max_align-ish */
  union { long double ld; void *p; long long ll; } align[];
};

void ar_init(ar_arena *a) {
  a->head = NULL;
  a->used = 0;
  a->failed = 0;
}

void ar_free(ar_arena *a) {
  ar_chunk *c = a->head;
  while (c) {
    ar_chunk *next = c->next;
    free(c);
    c = next;
  }
  ar_init(a);
}

void ar_reset(ar_arena *a) {
  ar_chunk *keep = NULL, *c = a->head;
  while (c) {
    ar_chunk *next = c->next;
    if (!keep && c->size == AR_CHUNK_SIZE) {
      keep = c;
    } else {
      free(c);
    }
    c = next;
  }
  ar_init(a);
  if (keep) {
    keep->next = NULL;
    keep->used = 0;
    a->head = keep;
  }
}

void *ar_alloc(ar_arena *a, size_t size) {
  const size_t align = sizeof(((ar_chunk *)0)->align[0]);
  size = (size + align - 1) / align * align;
  if (size == 0) size = align;
  ar_chunk *c = a->head;
  if (!c || c->size - c->used < size) {
    size_t payload = size > AR_CHUNK_SIZE ? size : AR_CHUNK_SIZE;
    if (payload > (size_t)-1 / 2) { a->failed = 1; return NULL; }
    c = malloc(sizeof(ar_chunk) + payload);
    if (!c) { a->failed = 1; return NULL; }
    c->size = payload;
    c->used = 0;
    /* a big block goes behind the head so the head's free space stays usable */
    if (a->head && size > AR_CHUNK_SIZE) {
      c->next = a->head->next;
      a->head->next = c;
    } else {
      c->next = a->head;
      a->head = c;
    }
  }
  void *p = (char *)c->align + c->used;
  c->used += size;
  a->used += size;
  memset(p, 0, size);
  return p;
}

char *ar_strndup(ar_arena *a, const char *s, size_t len) {
  char *p = ar_alloc(a, len + 1);
  if (!p) return NULL;
  if (len) memcpy(p, s, len);
  p[len] = '\0';
  return p;
}

char *ar_strdup(ar_arena *a, const char *s) {
  return ar_strndup(a, s, strlen(s));
}

char *ar_printf(ar_arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *p = ar_alloc(a, (size_t)n + 1);
  if (!p) return NULL;
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}
