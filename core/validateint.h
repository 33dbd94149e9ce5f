/* What the parts of the validator share (validate.c, validate_bind.c,
   validate_issues.c): the program as bound to a Lua state, and the walk's
   context. Not for other files: they use validate.h. */
#ifndef LUMA_VALIDATEINT_H
#define LUMA_VALIDATEINT_H

#include <stddef.h>
#include <stdint.h>

#include "validate.h"

/* Records up to this many fields find a key by a linear scan of pointers. */
#define LV_LINEAR_FIELDS 16

typedef struct lv_rec {
  const void **objs;          /* interned field names as lua_topointer sees them, by field index */
  int *defaults;              /* index in the anchor table, 0 when none */
  unsigned *hash;             /* bigger records: pointer hash -> field index + 1 */
  unsigned hmask;
  const char *tag;            /* unions: interned tag name */
} lv_rec;

struct lv_program {
  const pm_program *p;
  lv_rec *recs;               /* by schema index */
  int anchor;                 /* registry ref of the table keeping names and defaults */
  lv_limits lim;
};

static inline size_t ptr_hash(const void *p) {
  uintptr_t x = (uintptr_t)p;
  x ^= x >> 17;
  x *= (uintptr_t)0x9E3779B97F4A7C15ull;
  return (size_t)(x ^ (x >> 29));
}

typedef struct lv_seg {
  const char *key;            /* a field name, or NULL for an index */
  size_t len;
  lua_Integer index;
  int raw;                    /* key is already rendered text, as "[true]" */
} lv_seg;

typedef struct lv_ctx {
  lua_State *L;
  const lv_program *v;
  const char *root;
  int output;
  int write;
  int trial;                  /* > 0: stop at the first error and record nothing */
  int failed;                 /* an error happened (trial) or the error cap was hit */
  char *why;                  /* in a trial, when set: gets the first error, with its path */
  size_t whylen;
  lv_result *r;
  int depth;
  lv_seg path[LIM_MAX_DEPTH_CAP + 2];
  int npath;
  const void *tables[LIM_MAX_DEPTH_CAP + 2];
  char keytext[64];           /* a rendered non-string key on the path */
} lv_ctx;
static inline void push_seg(lv_ctx *c, const char *key, size_t len, lua_Integer index) {
  lv_seg *s = &c->path[c->npath++];
  s->key = key;
  s->len = len;
  s->index = index;
  s->raw = 0;
}

/* Stop walking: a trial already failed, or the error cap was reached. */
#define STOPPED(c) ((c)->failed && ((c)->trial || (c)->r->nerrors >= (c)->v->lim.max_violations))

/* validate_issues.c: recording what is wrong, where. */

/* Decimal digits of v into out (21 bytes at least); returns their count. */
size_t lv_fmt_int(long long v, char *out);
/* Whether a broken rule reported now would be recorded (or explain a
   union); when not, *ret is what reporting it returns, and no text needs to
   be made: formatting waits until it is known to be needed. */
int lv_needs_text(lv_ctx *c, int soft, int *ret);
/* Records a broken rule, after lv_needs_text said so; `soft` ones are
   warnings on output. Returns 0 for an error, 1 for a warning. */
int lv_report_text(lv_ctx *c, int soft, const char *rule, const char *text);
/* Records a broken rule; `soft` ones are warnings on output. Returns 0. */
int lv_report(lv_ctx *c, int soft, const char *rule, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 4, 5)))
#endif
  ;

/* validate_bind.c: a fresh copy of the table at idx (a default value). */
void lv_push_copy(lua_State *L, int idx, int depth);

#endif
