/* The journal of a durable ask (journal.h): the record format, and each
   call handed to its back end's ops (journalint.h). */
#include "journal.h"
#include "journalint.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto.h"
#include "journal_sqlite.h"

struct jr_journal {
  const jr_ops *ops;
  void *impl;
};

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
  size_t n = s ? strlen(s) : 0;
  if (n >= cap) {
    n = cap - 1;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
  }
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
  else jr_seterr(err, errlen, "run '%s' is %s, not awaiting approval", run, jr_state_name(r));
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

jr_journal *jr_open(const jr_options *o, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!o || !!(o->path && *o->path) == !!(o->url && *o->url)) {
    jr_seterr(err, errlen, "a journal is a SQLite file's path or a Redis url: one of the two");
    return NULL;
  }
  if (o->url) {
    jr_seterr(err, errlen, "journal '%s': Redis journals are not in this build", o->url);
    return NULL;
  }
  jr_journal *j = jr_open_sqlite(o->path, o->sync, err, errlen);
  if (!j && err && errlen && !err[0]) jr_seterr(err, errlen, "out of memory");
  return j;
}

void jr_close(jr_journal *j) {
  if (!j) return;
  j->ops->close(j->impl);
  free(j);
}

/* A back end without op: -1 with err. */
static int lacks(int has, const char *what, char *err, size_t errlen) {
  if (has) return 0;
  jr_seterr(err, errlen, "this journal's store cannot %s", what);
  return -1;
}

static int bad_run(const char *run, char *err, size_t errlen) {
  if (run && *run && strlen(run) < sizeof ((jr_run *)0)->id) return 0;
  jr_seterr(err, errlen, run && *run ? "a journal's run id is at most %zu bytes" : "a journal's run needs an id",
            sizeof ((jr_run *)0)->id - 1);
  return -1;
}

/* claim, renew, set: an owner (at most jr_run's owner's bytes) and a lease */
static int bad_owner(const char *owner, long long lease_ms, char *err, size_t errlen) {
  if (!owner || !*owner || strlen(owner) >= sizeof ((jr_run *)0)->owner) {
    jr_seterr(err, errlen, "a run's owner is a text of 1 to %zu bytes", sizeof ((jr_run *)0)->owner - 1);
    return -1;
  }
  if (lease_ms < 1) {
    jr_seterr(err, errlen, "a run's lease is at least 1 ms (it was %lld)", lease_ms);
    return -1;
  }
  return 0;
}

long long jr_append(jr_journal *j, const char *run, const char *owner, const char *kind, const char *body,
                    size_t len, char *err, size_t errlen) {
  if (!run || !*run || !kind || !*kind || (!body && len)) {
    jr_seterr(err, errlen, "a journal record needs a run, a kind and a body");
    return -1;
  }
  if (bad_run(run, err, errlen)) return -1;
  return j->ops->append(j->impl, run, owner, kind, body ? body : "", len, err, errlen);
}

/* jr_read's walk: judges each row as it comes. */
typedef struct reading {
  const char *run;
  int (*each)(void *arg, long long seq, const char *kind, const char *body, size_t len);
  void *arg;
  jr_status st;
  char *err;
  size_t errlen;
  int failed;
} reading;

static int judge(void *arg, const jr_row *r) {
  reading *rd = arg;
  if (rd->st.torn) {
    rd->st.torn++;
    return 0;
  }
  if (r->v > JR_FORMAT) {
    jr_seterr(rd->err, rd->errlen, "record %lld of run '%s' is of format %d; this luma reads format %d and older",
              r->seq, rd->run, r->v, JR_FORMAT);
    rd->failed = 1;
    return 1;
  }
  char want[65];
  int whole = r->kind && r->digest && r->seq == rd->st.whole + 1 && r->v >= 1 &&
              jr_digest(r->v, rd->run, r->seq, r->kind, r->body, r->len, want) == 0 && strcmp(want, r->digest) == 0;
  if (!whole) {
    rd->st.torn = 1;
    return 0;
  }
  rd->st.whole++;
  return rd->each ? rd->each(rd->arg, r->seq, r->kind, r->body, r->len) : 0;
}

int jr_read(jr_journal *j, const char *run,
            int (*each)(void *arg, long long seq, const char *kind, const char *body, size_t len), void *arg,
            jr_status *st, char *err, size_t errlen) {
  reading rd = { .run = run ? run : "", .each = each, .arg = arg, .err = err, .errlen = errlen };
  int rc = j->ops->walk(j->impl, rd.run, judge, &rd, err, errlen);
  if (st) *st = rd.st;
  return rc != 0 || rd.failed ? -1 : 0;
}

int jr_cut(jr_journal *j, const char *run, const char *owner, long long keep, char *err, size_t errlen) {
  if (bad_run(run, err, errlen) || lacks(j->ops->cut != NULL, "cut a run's records", err, errlen)) return -1;
  return j->ops->cut(j->impl, run, owner, keep, err, errlen);
}

const char *jr_state_name(const jr_run *r) {
  switch (r->state) {
  case JR_RUNNING: return r->abandoned ? "abandoned" : "running";
  case JR_AWAITING_APPROVAL: return "awaiting_approval";
  case JR_COMPLETED: return "completed";
  case JR_FAILED: return "failed";
  }
  return "unknown";
}

int jr_claim(jr_journal *j, const char *run, const char *owner, long long lease_ms, jr_run *now, char *err,
             size_t errlen) {
  if (bad_run(run, err, errlen) || bad_owner(owner, lease_ms, err, errlen) || lacks(j->ops->claim != NULL, "claim a run", err, errlen)) return -1;
  jr_run ignored;
  return j->ops->claim(j->impl, run, owner, lease_ms, now ? now : &ignored, err, errlen);
}

int jr_renew(jr_journal *j, const char *run, const char *owner, long long lease_ms, char *err, size_t errlen) {
  if (bad_run(run, err, errlen) || bad_owner(owner, lease_ms, err, errlen) || lacks(j->ops->renew != NULL, "renew a run's lease", err, errlen)) return -1;
  return j->ops->renew(j->impl, run, owner, lease_ms, err, errlen);
}

int jr_set(jr_journal *j, const char *run, const char *owner, jr_state state, const char *step, char *err,
           size_t errlen) {
  if (bad_run(run, err, errlen) || bad_owner(owner, 1, err, errlen) ||
      lacks(j->ops->set != NULL, "set a run's state", err, errlen)) return -1;
  if (state < JR_RUNNING || state > JR_FAILED) {
    jr_seterr(err, errlen, "run '%s': %d is not a run's state", run, (int)state);
    return -1;
  }
  return j->ops->set(j->impl, run, owner, state, step, err, errlen);
}

int jr_get(jr_journal *j, const char *run, jr_run *out, char *err, size_t errlen) {
  if (bad_run(run, err, errlen) || lacks(j->ops->get != NULL, "read a run", err, errlen)) return -1;
  return j->ops->get(j->impl, run, out, err, errlen);
}

int jr_list(jr_journal *j, int (*each)(void *arg, const jr_run *r), void *arg, char *err, size_t errlen) {
  if (lacks(j->ops->list != NULL, "list its runs", err, errlen)) return -1;
  return j->ops->list(j->impl, each, arg, err, errlen);
}

long long jr_prune(jr_journal *j, long long before_ms, char *err, size_t errlen) {
  if (lacks(j->ops->prune != NULL, "prune its runs", err, errlen)) return -1;
  return j->ops->prune(j->impl, before_ms, err, errlen);
}

long long jr_decide(jr_journal *j, const char *run, const char *body, size_t len, char *err, size_t errlen) {
  if (bad_run(run, err, errlen) || lacks(j->ops->decide != NULL, "record a decision", err, errlen)) return -1;
  if (!body || !len) {
    jr_seterr(err, errlen, "a decision needs a body");
    return -1;
  }
  return j->ops->decide(j->impl, run, body, len, err, errlen);
}
