#include "diag.h"

#include "luma_limits.h"
#include "utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void dg_init(dg_list *d, ar_arena *a, const char *chunk, const char *src, size_t len, int max) {
  memset(d, 0, sizeof *d);
  d->arena = a;
  d->chunk = chunk;
  d->src = src;
  d->len = len;
  d->max = max > 0 ? max : 1;
}

/* Text from a hostile file must not drive the terminal that shows it:
   control characters and broken UTF-8 become '?'. */
static void clean(char *s, size_t len) {
  for (size_t i = 0; i < len;) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x80) {
      size_t n = u8_decode((const unsigned char *)s + i, len - i, NULL);
      if (n == 0) { s[i++] = '?'; continue; }
      i += (size_t)n;
      continue;
    }
    if ((c < 0x20 && c != '\t') || c == 0x7F) s[i] = '?';
    i++;
  }
}

void dg_error(dg_list *d, int line, int col, const char *fmt, ...) {
  if (d->count >= d->max) { d->dropped++; return; }
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  clean(buf, strlen(buf));
  dg_item *it = ar_alloc(d->arena, sizeof *it);
  if (!it) return;
  it->line = line;
  it->col = col;
  it->msg = ar_strdup(d->arena, buf);
  if (d->last) d->last->next = it; else d->first = it;
  d->last = it;
  d->count++;
}

static int before(const dg_item *a, const dg_item *b) {
  return a->line < b->line || (a->line == b->line && a->col < b->col);
}

/* insertion sort on the list: stable, and error counts are small */
void dg_sort(dg_list *d) {
  dg_item *sorted = NULL, *it = d->first;
  while (it) {
    dg_item *next = it->next, **p = &sorted;
    while (*p && !before(it, *p)) p = &(*p)->next;
    it->next = *p;
    *p = it;
    it = next;
  }
  d->first = sorted;
  d->last = sorted;
  while (d->last && d->last->next) d->last = d->last->next;
}

const char *dg_format(dg_list *d, const dg_item *it) {
  const char *p = d->src, *end = d->src + d->len;
  for (int line = 1; line < it->line && p < end; p++)
    if (*p == '\n') line++;
  const char *eol = p;
  while (eol < end && *eol != '\n' && *eol != '\r') eol++;
  size_t linelen = (size_t)(eol - p);
  if (linelen > LIM_DIAG_LINE_BYTES) linelen = LIM_DIAG_LINE_BYTES;
  /* the caret line copies tabs so it lines up under the same character */
  char caret[LIM_DIAG_LINE_BYTES + 2];
  size_t n = 0;
  int col = 1;
  for (const char *q = p; q < p + linelen && col < it->col && n < sizeof caret - 2; q++) {
    if (((unsigned char)*q & 0xC0) == 0x80) continue;
    caret[n++] = *q == '\t' ? '\t' : ' ';
    col++;
  }
  caret[n++] = '^';
  caret[n] = '\0';
  if (it->line <= 0)
    return ar_printf(d->arena, "%s: %s", d->chunk, it->msg);
  char *shown = ar_strndup(d->arena, p, linelen);
  if (!shown) return it->msg;
  clean(shown, linelen);
  return ar_printf(d->arena, "%s:%d:%d: %s\n%s\n%s", d->chunk, it->line, it->col, it->msg, shown, caret);
}

/* Optimal string alignment distance: edits and adjacent transpositions. */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > LIM_SUGGEST_WORD_BYTES || lb > LIM_SUGGEST_WORD_BYTES) return (size_t)-1;
  size_t rows[3][LIM_SUGGEST_WORD_BYTES + 1], *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
  for (size_t j = 0; j <= lb; j++) prev[j] = j;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t best = prev[j - 1] + (a[i - 1] != b[j - 1]);
      if (prev[j] + 1 < best) best = prev[j] + 1;
      if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && prev2[j - 2] + 1 < best)
        best = prev2[j - 2] + 1;
      cur[j] = best;
    }
    size_t *t = prev2;
    prev2 = prev;
    prev = cur;
    cur = t;
  }
  return prev[lb];
}

/* The edits a typo of word may hold, against a name: a third of the longer
   of the two (1 to 3), so that "strik" reaches "strict"; but it must keep
   something of the word: "R" is no typo of "M". */
static size_t typo_limit(size_t word, size_t name) {
  size_t limit = (word > name ? word : name) / 3;
  if (limit < 1) limit = 1;
  if (limit > 3) limit = 3;
  if (limit >= word) limit = word - 1;
  return limit;
}

const char *dg_suggest(const char *word, const char *const *names, int n) {
  if (!*word) return NULL;
  size_t len = strlen(word);
  const char *best = NULL;
  size_t bestd = (size_t)-1;
  for (int i = 0; i < n; i++) {
    size_t dist = edit_distance(word, names[i]);
    if (dist <= typo_limit(len, strlen(names[i])) && dist < bestd) { bestd = dist; best = names[i]; }
  }
  return best;
}
