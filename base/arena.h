/*
 * A bump allocator: everything a compiled program owns (syntax tree,
 * strings, program model, JSON trees) lives in one arena and is freed at once.
 */
#ifndef LUMA_ARENA_H
#define LUMA_ARENA_H

#include <stddef.h>

typedef struct ar_chunk ar_chunk;

typedef struct ar_arena {
  ar_chunk *head;
  size_t used;          /* total bytes handed out, for limits and benchmarks */
  int failed;           /* set once an allocation failed; callers check it once */
} ar_arena;

void ar_init(ar_arena *a);
void ar_free(ar_arena *a);
/* Empties the arena for another use: frees its chunks but one of the
   standard size, kept, so that a small use again costs no allocation. */
void ar_reset(ar_arena *a);
/* Returns zeroed memory aligned for any type, or NULL (and a->failed = 1). */
void *ar_alloc(ar_arena *a, size_t size);
/* A NUL-terminated copy of s[0..len). */
char *ar_strndup(ar_arena *a, const char *s, size_t len);
char *ar_strdup(ar_arena *a, const char *s);
char *ar_printf(ar_arena *a, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 2, 3)))
#endif
  ;

#endif
