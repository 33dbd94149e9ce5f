/*
 * Validation of Lua values against the program's schemas, in C, without
 * JSON text in between. A program is bound to one Lua state (field names
 * interned there, default values stored there); validation then walks the
 * value with raw accesses only, so no metamethod of the value ever runs.
 */
#ifndef LUMA_VALIDATE_H
#define LUMA_VALIDATE_H

#include <lua.h>

#include "luma_limits.h"
#include "program.h"

typedef struct lv_limits {
  int max_depth;              /* nesting of tables in a value */
  size_t max_string_bytes;    /* one string */
  int max_violations;         /* kept per validation; then the walk stops */
  double max_pattern_work;    /* bytes x pattern size, for one @pattern match */
} lv_limits;

/* max_depth may not exceed this; the old name, until lprogram.c reads
   LIM_MAX_DEPTH_CAP itself */

void lv_default_limits(lv_limits *lim);

typedef struct lv_program lv_program;

typedef struct lv_issue {
  char *path;                 /* "calculate.input.a" */
  char *text;                 /* "must be at most 1000000", in path's block (NULL with it) */
  const char *rule;           /* JSON Schema keyword it breaks: "maximum", "type", ... */
  int seq;                    /* discovery order, to keep sorting stable */
} lv_issue;

typedef struct lv_result {
  lv_issue *errors, *warnings;
  int nerrors, nwarnings;
  int truncated;              /* max_violations was reached and the walk stopped */
  /* the first error, and its path and text when they fit, are kept here:
     a failed validation allocates nothing more (errors may point here, so
     a result is never copied) */
  lv_issue inline_error;
  char inline_text[200];
} lv_result;

enum { LV_INPUT = 0, LV_OUTPUT = 1 };

/* Binds p to L. The default values of the program live in a table kept by
   a registry reference until lv_free. Returns NULL when memory runs out. */
lv_program *lv_bind(lua_State *L, const pm_program *p, const lv_limits *lim);
void lv_free(lua_State *L, lv_program *v);
/* The violations a validation keeps before it stops (the program's
   max_violations). */
int lv_max_violations(const lv_program *v);

/*
 * Validates the value at stack index idx against s. `root` names the value
 * in messages. On input, a union member is inferred and its tag written;
 * on output the tag must be present, and broken rules of soft fields are
 * warnings. Missing fields with a default are filled in, `null` on an optional
 * field is removed, and integral floats in int fields become integers: the
 * value is changed in place. Returns the number of errors; r must be freed
 * with lv_result_free. Needs a few free stack slots per level of nesting, and
 * checks for them itself.
 */
int lv_validate(lv_program *v, lua_State *L, int idx, const pm_schema *s, const char *root, int mode, lv_result *r);
/* Checks a value without changing it: for trial runs and @default checks of a field. */
int lv_validate_type(lv_program *v, lua_State *L, int idx, const pm_type *t, const char *root, int mode,
                     int write, lv_result *r);
void lv_result_free(lv_result *r);
/* Pushes a fresh copy of the default value of s's field, or nil. */
void lv_push_default(lv_program *v, lua_State *L, const pm_schema *s, int field);
/* Checks every @default of p against its own field, reporting into p->diag.
   Returns the number of defaults that do not fit. */
int lv_check_defaults(lv_program *v, lua_State *L, pm_program *p);

/* Pushes a list of { path, message, rule } tables. */
void lv_push_issues(lua_State *L, const lv_issue *list, int n);
/* Pushes the structured error of a failed validation, with this code: the
   first violation's message, and details.violations (and warnings). */
int lv_push_error(lua_State *L, const char *code, const lv_result *r);
/* The same error, lazily: its message and details are made when first read
   (base/lerror.h, le_push_lazy), from a copy of r's issues. */
int lv_push_lazy_error(lua_State *L, const char *code, const lv_result *r);

#endif
