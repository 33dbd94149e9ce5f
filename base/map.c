#include "map.h"

#include <string.h>

static size_t hash(const char *s, size_t len) {
  size_t h = 2166136261u;
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

static int grow(ar_arena *a, mp_map *m) {
  size_t cap = m->cap ? m->cap * 2 : 16;
  const char **keys = ar_alloc(a, sizeof *keys * cap);
  size_t *lens = ar_alloc(a, sizeof *lens * cap);
  void **vals = ar_alloc(a, sizeof *vals * cap);
  if (!keys || !lens || !vals) return 0;
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    size_t j = hash(m->keys[i], m->lens[i]) & (cap - 1);
    while (keys[j]) j = (j + 1) & (cap - 1);
    keys[j] = m->keys[i];
    lens[j] = m->lens[i];
    vals[j] = m->vals[i];
  }
  m->keys = keys;
  m->lens = lens;
  m->vals = vals;
  m->cap = cap;
  return 1;
}

void *mp_get(const mp_map *m, const char *key, size_t len) {
  if (!m->cap) return NULL;
  for (size_t j = hash(key, len) & (m->cap - 1); m->keys[j]; j = (j + 1) & (m->cap - 1))
    if (m->lens[j] == len && memcmp(m->keys[j], key, len) == 0) return m->vals[j];
  return NULL;
}

int mp_put(ar_arena *a, mp_map *m, const char *key, size_t len, void *val) {
  if ((m->n + 1) * 2 > m->cap && !grow(a, m)) return 0;
  size_t j = hash(key, len) & (m->cap - 1);
  while (m->keys[j]) j = (j + 1) & (m->cap - 1);
  m->keys[j] = key;
  m->lens[j] = len;
  m->vals[j] = val;
  m->n++;
  return 1;
}
