/* A string-keyed hash map in an arena, for names and duplicate checks.
   Keys are byte strings with a length (string literals may hold NUL). */
#ifndef LUMA_MAP_H
#define LUMA_MAP_H

#include <stddef.h>

#include "arena.h"

typedef struct mp_map {
  const char **keys;
  size_t *lens;
  void **vals;
  size_t cap;                 /* a power of two, or 0 */
  size_t n;
} mp_map;

/* A zeroed mp_map is empty and ready. Keys are not copied. */
void *mp_get(const mp_map *m, const char *key, size_t len);
/* Adds key (which must not be present); returns 0 when memory runs out. */
int mp_put(ar_arena *a, mp_map *m, const char *key, size_t len, void *val);

#endif
