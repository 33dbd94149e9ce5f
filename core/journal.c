/* The journal of a durable ask (journal.h): its back end chosen, the
   reading that tells whole records from a torn tail, and each call handed
   to the back end's ops (journalint.h; what the back ends share is
   journal_base.c's). */
#include "journal.h"
#include "journalint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal_redis.h"
#include "journal_sqlite.h"

jr_journal *jr_open(const jr_options *o, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!o || !!(o->path && *o->path) == !!(o->url && *o->url)) {
    jr_seterr(err, errlen, "a journal is a SQLite file's path or a Redis url: one of the two");
    return NULL;
  }
  jr_journal *j = o->url && *o->url ? jr_open_redis(o, err, errlen) : jr_open_sqlite(o->path, o->sync, err, errlen);
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
                    size_t len, const char *step, char *err, size_t errlen) {
  jr_record r = { kind, body, len };
  return jr_append_batch(j, run, owner, &r, 1, step, err, errlen);
}

long long jr_append_batch(jr_journal *j, const char *run, const char *owner, const jr_record *recs, int n,
                          const char *step, char *err, size_t errlen) {
  if (!run || !*run || !recs || n < 1) {
    jr_seterr(err, errlen, "a journal record needs a run, a kind and a body");
    return -1;
  }
  for (int i = 0; i < n; i++)
    if (!recs[i].kind || !*recs[i].kind || (!recs[i].body && recs[i].len)) {
      jr_seterr(err, errlen, "a journal record needs a run, a kind and a body");
      return -1;
    }
  if (bad_run(run, err, errlen)) return -1;
  return j->ops->append(j->impl, run, owner, recs, n, step, err, errlen);
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
  return r->state == JR_RUNNING && r->abandoned ? "abandoned" : jr_state_word(r->state);
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
