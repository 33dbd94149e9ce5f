/*
 * What a step of a call (steps.h) says, and the errors it says it with. A
 * step reads the call and may fill its values (CV_NEEDS, CV_CKEY...), but
 * never moves the call's state nor sets its outcome: it returns a verdict,
 * and call.c alone acts on it. A verdict that carries a value (SV_RESULT,
 * SV_ERROR, SV_RETRY, SV_BACKOFF) has it on top of the call's thread's
 * stack. The ask's tool calls (asktools.h) answer ask.c the same way.
 */
#ifndef LUMA_VERDICT_H
#define LUMA_VERDICT_H

#include <lua.h>

#include "errors.h"
#include "validate.h"

typedef enum {
  SV_NEXT,          /* go on to what follows the step */
  SV_RESULT,        /* the value on top is the call's result */
  SV_ERROR,         /* the error on top is the call's error */
  SV_FOLLOW,        /* another call in flight runs it (c->leader): share its outcome */
  SV_WAIT,          /* not yet: look again at `at` */
  SV_RETRY,         /* the error on top ended this attempt; the next one is due at once */
  SV_BACKOFF,       /* the same, with the next attempt due at `at` */
  SV_HANDLER        /* the handler's job is ready: wait until it is done */
} sv_kind;

typedef struct st_verdict {
  sv_kind kind;
  long long at;     /* SV_WAIT, SV_BACKOFF: on the program's monotonic clock */
} st_verdict;

static inline st_verdict sv_at(sv_kind kind, long long at) {
  st_verdict v = { kind, at };
  return v;
}

static inline st_verdict sv_is(sv_kind kind) {
  return sv_at(kind, 0);
}

static inline st_verdict sv_next(void) {
  return sv_at(SV_NEXT, 0);
}

/* Pushes an error of code whose message is fmt filled with the arguments,
   and returns SV_ERROR. Where the catalogue (errors.h) fixes the message,
   fmt is its template: le_template(code), or le_msg_template(msg) with
   le_msg_code(msg) for one of a code's several messages. */
st_verdict st_fail(lua_State *T, le_code code, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;
/* Pushes the error of a failed validation, with this code; SV_ERROR. */
st_verdict st_fail_validation(lua_State *T, le_code code, const lv_result *r);
/* The value on top as an error (a string or another value becomes a
   TOOL_FAILED error); SV_ERROR. */
st_verdict st_fail_top(lua_State *T);

/* The code and retryable flag of the error at index e, read raw. */
const char *st_error_code(lua_State *T, int e);
int st_error_retryable(lua_State *T, int e);

#endif
