/*
 * The journal of a durable ask (issue 30), Lua-free: its record format and
 * the SQLite store that writes and reads it. An ask of an agent with
 * `durable: true` writes one (ask.c) to the program's journal (luma.load's
 * `journal` option); resume, which will read it, is to come.
 *
 * Where it lives: one SQLite file (the journal store's, shared by the
 * processes of a machine as the idempotency store is), with
 *   luma_meta (name, value): format "luma-journal", version 1;
 *   luma_journal (run, seq, v, kind, body, digest), primary key (run, seq).
 * A run's records are numbered from 1 with no gap, each appended in its own
 * IMMEDIATE transaction, committed before the step that depends on it: the
 * ask's inputs before its first request, an exchange's response before its
 * tool calls run, every tool call's outcome before the next request.
 *
 * A record: v (the record format, JR_FORMAT), kind, and body, one compact
 * JSON value (askjournal.c writes them):
 *   "ask"       { prompt, agent, model, schema, forced }: the inputs, never
 *               an API key
 *   "exchange"  { turn, status, body }: a model turn that was answered, its
 *               response body as the provider sent it (a string), which the
 *               model's adapter reads again on resume
 *   "tool"      { turn, error, id, name, content }: a tool call's outcome,
 *               as the model is given it (content: its JSON)
 *   "finish"    { ok }
 * digest: SHA-256 (hex) of "luma-journal/<v>" NUL run NUL seq NUL kind NUL
 * body. A record is whole when its digest matches and its seq follows the
 * last whole one; reading stops at the first record that is not: it and the
 * records after it are a torn tail (a write cut short, a file copied
 * mid-write), read as never written, so that its step runs again (at least
 * once). A record of a higher v than this luma reads is refused with both
 * versions named.
 *
 * Durability: WAL, synchronous NORMAL (jr_open's sync 0): a committed record
 * survives the process's crash; the last ones may be lost with the machine's
 * power, and their steps run again. sync 1: synchronous FULL, every record
 * on disk before its step (an fsync per record).
 *
 * Threads: any thread may call jr_append and jr_read at once (a lock); jr_read's
 * each must not call the journal.
 */
#ifndef LUMA_JOURNAL_H
#define LUMA_JOURNAL_H

#include <stddef.h>

#define JR_FORMAT 1

typedef struct jr_journal jr_journal;

/* Opens (creating) the journal at path; NULL with err. A file that is not a
   SQLite database, or not a journal, is refused and left as it is. */
jr_journal *jr_open(const char *path, int sync, char *err, size_t errlen);
void jr_close(jr_journal *j);

/* Appends a record of kind to run: body is one JSON value (len bytes, kept
   as given). Its seq (>= 1), or -1 with err. */
long long jr_append(jr_journal *j, const char *run, const char *kind, const char *body, size_t len, char *err,
                    size_t errlen);

/* What jr_read found. */
typedef struct jr_status {
  long long whole;            /* records read whole, from seq 1 */
  long long torn;             /* records after them that are not (0: none) */
} jr_status;

/* Calls each(arg, seq, kind, body, len) for the run's whole records in
   order (NULL: none), and says how many were whole and how many torn; each
   may return non-zero to stop there (the counts are then of what was read). 0, or -1 with err: the file cannot be read, or a record
   is of a format this luma does not read. */
int jr_read(jr_journal *j, const char *run,
            int (*each)(void *arg, long long seq, const char *kind, const char *body, size_t len), void *arg,
            jr_status *st, char *err, size_t errlen);

#endif
