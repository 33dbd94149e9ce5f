/* What the journal's back ends share (journalint.h): the record's digest,
   the wrapping of a back end, and the decisions every back end makes alike
   from a run's row. */
#include "journalint.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto.h"
#include "utf8.h"

void jr_seterr(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  if (!err || !errlen) return;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

int jr_digest(int v, const char *run, long long seq, const char *kind, const char *body, size_t len, char out[65]) {
  char head[64], num[24];
  int hl = snprintf(head, sizeof head, JR_NAME "/%d", v);
  int nl = snprintf(num, sizeof num, "%lld", seq);
  size_t rl = strlen(run), kl = strlen(kind), n = (size_t)hl + rl + (size_t)nl + kl + len + 4;
  char *buf = malloc(n), *p = buf;
  if (!buf) return -1;
  memcpy(p, head, (size_t)hl + 1);
  p += hl + 1;
  memcpy(p, run, rl + 1);
  p += rl + 1;
  memcpy(p, num, (size_t)nl + 1);
  p += nl + 1;
  memcpy(p, kind, kl + 1);
  p += kl + 1;
  if (len) memcpy(p, body, len);
  cr_sha256_hex(buf, n, out);
  free(buf);
  return 0;
}

long long jr_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *jr_state_word(jr_state state) {
  switch (state) {
  case JR_RUNNING: return "running";
  case JR_AWAITING_APPROVAL: return "awaiting_approval";
  case JR_COMPLETED: return "completed";
  case JR_FAILED: return "failed";
  }
  return "unknown";
}

jr_state jr_state_of(const char *name) {
  static const struct { const char *name; jr_state state; } names[] = {
    { "running", JR_RUNNING }, { "awaiting_approval", JR_AWAITING_APPROVAL },
    { "completed", JR_COMPLETED }, { "failed", JR_FAILED },
  };
  for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i].name) == 0) return names[i].state;
  return 0;
}

/* s into out (cap bytes), cut at a UTF-8 character's start. */
static void copy(char *out, size_t cap, const char *s) {
  size_t n = s ? u8_cut(s, strlen(s), cap - 1) : 0;
  if (n) memcpy(out, s, n);
  out[n] = '\0';
}

void jr_fill(jr_run *r, const char *id, jr_state state, const char *step, const char *owner, long long lease_until,
             long long created, long long updated, long long records, long long now) {
  memset(r, 0, sizeof *r);
  copy(r->id, sizeof r->id, id);
  copy(r->step, sizeof r->step, step);
  copy(r->owner, sizeof r->owner, owner);
  r->state = state;
  r->abandoned = state == JR_RUNNING && lease_until <= now;
  r->lease_until_ms = lease_until;
  r->created_ms = created;
  r->updated_ms = updated;
  r->records = records;
}

int jr_fenced(const char *run, const char *owner, int has, const char *holder, char *err, size_t errlen) {
  if (has && owner && strcmp(owner, holder) == 0) return 0;
  if (!has && !owner) return 0;
  if (!has)
    jr_seterr(err, errlen, "run '%s' has no owner (it was pruned, or never claimed): '%s' must claim it first", run,
              owner);
  else if (!owner)
    jr_seterr(err, errlen, "run '%s' is held by '%s': a write without an owner is refused", run, holder);
  else
    jr_seterr(err, errlen, "run '%s' is held by '%s', not '%s': its lease ended and another process took the run over",
              run, holder, owner);
  return JR_LOST;
}

int jr_claimable(const jr_run *r, const char *owner, long long now) {
  if (r->state == JR_AWAITING_APPROVAL) return 1;
  return r->state == JR_RUNNING && (strcmp(r->owner, owner) == 0 || r->lease_until_ms <= now);
}

int jr_decidable(const jr_run *r, const char *run, char *err, size_t errlen) {
  if (r && r->state == JR_AWAITING_APPROVAL) return 1;
  if (!r) jr_seterr(err, errlen, "there is no run '%s'", run);
  else jr_seterr(err, errlen, "run '%s' is %s, not awaiting approval", run,
                 r->state == JR_RUNNING && r->abandoned ? "abandoned" : jr_state_word(r->state));
  return 0;
}

jr_journal *jr_wrap(const jr_ops *ops, void *impl) {
  jr_journal *j = calloc(1, sizeof *j);
  if (!j) {
    ops->close(impl);
    return NULL;
  }
  j->ops = ops;
  j->impl = impl;
  return j;
}

