/*
 * The journal of a durable ask (issue 30), Lua-free: its record format, its
 * runs, and the stores that keep them. An ask of an agent with
 * `durable: true` writes one (askjournal.c) to the program's journal
 * (luma.load's `journal` option); resume reads it back.
 *
 * A journal is a back end behind jr_ops (journalint.h): a SQLite file
 * (journal_sqlite.c), shared by the processes of a machine as the
 * idempotency store is; Redis (journal_redis.c), shared by machines.
 * journal.c owns what they share: the record format and its digest, the
 * reading that tells a torn tail, the run states' names.
 *
 * Records. A run's records are numbered from 1 with no gap, each appended
 * in a step of its own (a transaction, a script) or with others in one
 * (jr_append_batch: all kept or none), committed before the step that
 * depends on it: the ask's inputs before its first request, an exchange's
 * response before its tool calls run, every tool call's outcome before the
 * next request. A record: v (the record format, JR_FORMAT), kind, and body,
 * one compact JSON value (askjournal.c writes them):
 *   "ask"       { prompt, agent, model, schema, forced }: the inputs, never
 *               an API key
 *   "exchange"  { turn, status, body }: a model turn that was answered, its
 *               response body as the provider sent it (a string), which the
 *               model's adapter reads again on resume
 *   "tool"      { turn, error, id, name, content }: a tool call's outcome,
 *               as the model is given it (content: its JSON)
 *   "approval"  { turn, id, name, input, reason }: a call that waits for a
 *               person (the run then awaits approval)
 *   "decision"  { id, approved, reason, input }: a person's answer to it,
 *               written by any process (jr_decide)
 *   "finish"    { ok, answer | error: { code, message } }: the outcome, which
 *               a resume of the finished run gives again
 * Every body askjournal.c writes has the secrets redacted (redact.h): the
 * model's API key and the values of the credentials of the program's tools,
 * read through the lookup, are "[REDACTED]" wherever they appear (a value,
 * a key, JSON text in a string); a resume reads the marker as written.
 * digest: SHA-256 (hex) of "luma-journal/<v>" NUL run NUL seq NUL kind NUL
 * body. A record is whole when its digest matches and its seq follows the
 * last whole one; reading stops at the first record that is not: it and the
 * records after it are a torn tail (a write cut short, a file copied
 * mid-write), read as never written, so that its step runs again (at least
 * once); the run's next owner cuts it (jr_cut) before appending. A record
 * of a higher v than this luma reads is refused with both versions named.
 *
 * Runs. Beside its records each run has a row: its state, the step it is
 * at (a short text its owner sets), its owner and the owner's lease, when
 * it was created and last changed. Its owner is the one process that may
 * append to it: it claims the run (jr_claim: a new run, or one whose
 * owner's lease ended), renews the lease while it works (jr_renew, a third
 * of the lease apart), and leaves it in a state (jr_set). An append by an
 * owner that lost the run is refused (JR_LOST): a process that was thought
 * dead cannot write after another took over. Times are milliseconds since
 * the epoch: the store's own clock where it has one (Redis TIME), else the
 * machine's.
 *
 * Durability (SQLite): WAL, synchronous NORMAL (jr_options.sync 0): a
 * committed record survives the process's crash; the last ones may be lost
 * with the machine's power, and their steps run again. sync 1: synchronous
 * FULL, every record on disk before its step (an fsync per commit: a
 * record, or the records of a jr_append_batch).
 *
 * Threads: any thread may call a journal's functions at once (each back end
 * serialises its connection); a callback must not call the journal.
 */
#ifndef LUMA_JOURNAL_H
#define LUMA_JOURNAL_H

#include <stddef.h>

#include "journaltypes.h"   /* JR_FORMAT, JR_LOST, jr_options, jr_status, jr_state, jr_run */

/* Opens (creating) the journal; NULL with err. A file that is not a SQLite
   database, or not a journal, or a Redis whose journal is of another
   version, is refused and left as it is. */
jr_journal *jr_open(const jr_options *o, char *err, size_t errlen);
void jr_close(jr_journal *j);

/* ---------------------------------------------------------------- records */

/* Appends a record of kind to run for owner (the run's claimer; NULL: a run
   that has no row, as the C tests write): body is one JSON value (len
   bytes, kept as given). Its seq (>= 1); JR_LOST when another owner holds
   the run (err says who), or when owner is not NULL and the run has no row
   (pruned, or never claimed), or NULL and it has one; -1 with err. A run's
   id is 1 to 63 bytes (jr_run's id), an owner 1 to 127. An append marks the
   run changed (updated_ms) and, in the same step, sets its step (NULL: as it
   was; a run with a row only), so that saying where a run is costs no write
   of its own. */
long long jr_append(jr_journal *j, const char *run, const char *owner, const char *kind, const char *body,
                    size_t len, const char *step, char *err, size_t errlen);
/* Appends the n records of recs (n >= 1) to run for owner as jr_append
   does each, all in one step (a transaction, a script): all of them are
   kept, numbered in order with no gap, or none is. The seq of the last;
   JR_LOST, or -1 with err, as jr_append. An ask commits the outcomes of the
   tool calls that ended together so (a commit, not one per record). */
long long jr_append_batch(jr_journal *j, const char *run, const char *owner, const jr_record *recs, int n,
                          const char *step, char *err, size_t errlen);

/* Calls each(arg, seq, kind, body, len) for the run's whole records in
   order (NULL: none), and says how many were whole and how many torn; each
   may return non-zero to stop there (the counts are then of what was read).
   0, or -1 with err: the store cannot be read, or a record is of a format
   this luma does not read. */
int jr_read(jr_journal *j, const char *run,
            int (*each)(void *arg, long long seq, const char *kind, const char *body, size_t len), void *arg,
            jr_status *st, char *err, size_t errlen);

/* Deletes the run's records after seq keep (its torn tail), for owner: 1,
   JR_LOST, or -1 with err. */
int jr_cut(jr_journal *j, const char *run, const char *owner, long long keep, char *err, size_t errlen);

/* ------------------------------------------------------------------- runs */

/* "running", "awaiting_approval", "completed", "failed"; "abandoned" for a
   running run whose lease has ended (r->abandoned). */
const char *jr_state_name(const jr_run *r);

/* Claims run for owner for lease_ms: a new run (created running), or one
   that no live owner holds: running with its lease ended (a takeover), or
   awaiting approval. Of processes racing for one run, one wins. 1 claimed
   (*now: the run as claimed), 0 not (*now: who holds it, or a run that has
   ended: completed or failed), -1 with err. now may be NULL. */
int jr_claim(jr_journal *j, const char *run, const char *owner, long long lease_ms, jr_run *now, char *err,
             size_t errlen);
/* Extends owner's lease: 1 renewed, 0 lost (another owner holds the run),
   -1 with err (unreachable: tried again at the next beat). */
int jr_renew(jr_journal *j, const char *run, const char *owner, long long lease_ms, char *err, size_t errlen);
/* Sets the run's state and step (NULL: as it was), for owner; any state
   but running releases the lease. 1 set, 0 lost, -1 with err. */
int jr_set(jr_journal *j, const char *run, const char *owner, jr_state state, const char *step, char *err,
           size_t errlen);
/* The run's row: 1 found (*out), 0 no such run, -1 with err. */
int jr_get(jr_journal *j, const char *run, jr_run *out, char *err, size_t errlen);
/* Calls each(arg, run) for every run, the most recently changed first;
   each may return non-zero to stop. 0, or -1 with err. */
int jr_list(jr_journal *j, int (*each)(void *arg, const jr_run *r), void *arg, char *err, size_t errlen);
/* Deletes the runs (rows and records) that ended (completed, failed) or
   were abandoned, last changed before before_ms. How many, or -1 with err. */
long long jr_prune(jr_journal *j, long long before_ms, char *err, size_t errlen);

/* Appends a "decision" record (body) to a run that awaits approval, from
   any process, without owning it: its seq; 0 when the run does not await
   approval (err says its state, or that there is no such run); -1 with err.
   The record's body names the call it decides; the run's next owner reads
   it (the first decision for a call counts). */
long long jr_decide(jr_journal *j, const char *run, const char *body, size_t len, char *err, size_t errlen);

#endif
