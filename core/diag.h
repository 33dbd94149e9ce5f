/*
 * Diagnostics of one program: every error found while loading it, with its
 * position, so that all of them can be reported at once.
 */
#ifndef LUMA_DIAG_H
#define LUMA_DIAG_H

#include <stddef.h>

#include "arena.h"

typedef struct dg_item {
  int line, col;            /* 1-based; col counts code points */
  const char *msg;
  struct dg_item *next;
} dg_item;

typedef struct dg_list {
  ar_arena *arena;
  const char *chunk;        /* file name shown in messages */
  const char *src;
  size_t len;
  dg_item *first, *last;
  int count;                /* errors kept */
  int max;                  /* keep at most this many */
  int dropped;              /* errors past max */
} dg_list;

void dg_init(dg_list *d, ar_arena *a, const char *chunk, const char *src, size_t len, int max);
void dg_error(dg_list *d, int line, int col, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 4, 5)))
#endif
  ;
/* Orders the errors by position, keeping discovery order for equal ones. */
void dg_sort(dg_list *d);
/* "chunk:line:col: msg\n<source line>\n<caret>" in the arena. */
const char *dg_format(dg_list *d, const dg_item *it);
/* "Did you mean 'x'?" candidate: the closest of names[0..n) within a small
   edit distance of word, or NULL. */
const char *dg_suggest(const char *word, const char *const *names, int n);

#endif
