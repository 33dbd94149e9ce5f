/*
 * Inside the journal (journal.h): what its back ends share. Every journal
 * is a back end behind jr_ops (journal_sqlite.c, journal_redis.c); journal.c
 * opens one and dispatches each call to its ops, and owns the reading that
 * tells the whole records from a torn tail; journal_base.c (this header's
 * functions) owns the digest a back end stores with each record, and what
 * every back end decides alike. The back ends include this header and
 * journaltypes.h, never journal.h: journal.c depends on them, not the
 * reverse.
 */
#ifndef LUMA_JOURNALINT_H
#define LUMA_JOURNALINT_H

#include <stddef.h>

#include "journaltypes.h"

#define JR_NAME "luma-journal"   /* the stores' format name, and the digest's */

/* A record as stored: what the back end's walk gives journal.c to judge. */
typedef struct jr_row {
  long long seq;
  int v;                      /* its format */
  const char *kind;           /* NULL when missing */
  const char *body;
  size_t len;
  const char *digest;         /* NULL when missing */
} jr_row;

/* Each is journal.h's function of the same name, for the back end's impl;
   run, owner, kind and body are checked by journal.c first. */
typedef struct jr_ops {
  /* Stores the run's next n records (n >= 1; seqs: its last + 1 on,
     whole or not) with v JR_FORMAT and their digests (jr_digest), in one
     step: all or none. The seq of the last. */
  long long (*append)(void *impl, const char *run, const char *owner, const jr_record *recs, int n,
                      const char *step, char *err, size_t errlen);
  /* Calls row(arg, r) for each of the run's records in seq order, until it
     returns non-zero. 0, or -1 with err. */
  int (*walk)(void *impl, const char *run, int (*row)(void *arg, const jr_row *r), void *arg, char *err,
              size_t errlen);
  int (*cut)(void *impl, const char *run, const char *owner, long long keep, char *err, size_t errlen);
  int (*claim)(void *impl, const char *run, const char *owner, long long lease_ms, jr_run *now, char *err,
               size_t errlen);
  int (*renew)(void *impl, const char *run, const char *owner, long long lease_ms, char *err, size_t errlen);
  int (*set)(void *impl, const char *run, const char *owner, jr_state state, const char *step, char *err,
             size_t errlen);
  int (*get)(void *impl, const char *run, jr_run *out, char *err, size_t errlen);
  int (*list)(void *impl, int (*each)(void *arg, const jr_run *r), void *arg, char *err, size_t errlen);
  long long (*prune)(void *impl, long long before_ms, char *err, size_t errlen);
  long long (*decide)(void *impl, const char *run, const char *body, size_t len, char *err, size_t errlen);
  void (*close)(void *impl);
} jr_ops;

/* A journal: its back end's ops and state. */
struct jr_journal {
  const jr_ops *ops;
  void *impl;
};

/* A journal whose calls go to ops; NULL when memory runs out (impl is then
   closed with ops->close). */
jr_journal *jr_wrap(const jr_ops *ops, void *impl);

/* The digest of a record: SHA-256 of "luma-journal/<v>" NUL run NUL seq NUL
   kind NUL body, in hex. 0, or -1 when memory runs out. */
int jr_digest(int v, const char *run, long long seq, const char *kind, const char *body, size_t len, char out[65]);

/* Milliseconds since the epoch, by the machine's clock. */
long long jr_now_ms(void);

/* A state's word as the stores keep it ("running", "awaiting_approval",
   "completed", "failed"). */
const char *jr_state_word(jr_state state);

/* The state a store names (jr_state_name's words, without "abandoned"), or
   0 for a name it does not know. */
jr_state jr_state_of(const char *name);

/* Fills *r from a store's row (texts cut to r's fields at a character's
   start); abandoned: running with lease_until <= now. */
void jr_fill(jr_run *r, const char *id, jr_state state, const char *step, const char *owner, long long lease_until,
             long long created, long long updated, long long records, long long now);

/* What every back end decides alike, from the run's row as it read it in
   the step that changes it: */
/* may owner write to the run (append, cut)? has: the run has a row, holder
   its owner. 0, or JR_LOST with err naming the holder. */
int jr_fenced(const char *run, const char *owner, int has, const char *holder, char *err, size_t errlen);
/* may owner claim the run r at now: it holds it already, or its owner's
   lease ended, or it awaits approval? */
int jr_claimable(const jr_run *r, const char *owner, long long now);
/* may a decision be appended to r (NULL: no such run)? 1, or 0 with err. */
int jr_decidable(const jr_run *r, const char *run, char *err, size_t errlen);

/* A one-line reason into err (NULL or errlen 0: nothing). */
void jr_seterr(char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;

#endif
