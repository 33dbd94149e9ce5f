/* The SQLite journal (journal_sqlite.c); its calls are journal.h's. */
#ifndef LUMA_JOURNAL_SQLITE_H
#define LUMA_JOURNAL_SQLITE_H

#include <stddef.h>

#include "journaltypes.h"

/*
 * Opens (creating) the journal in the SQLite file at path: WAL, one
 * IMMEDIATE transaction per change, safe across the processes of a
 * machine. sync 1: synchronous FULL (an fsync per commit), else NORMAL.
 * Its tables (version 3):
 *   luma_meta (name, value): format "luma-journal", version;
 *   luma_journal (run, seq, v, kind, body, digest), primary key (run, seq);
 *   luma_runs (run, state, step, owner, lease_until, created, updated): a
 *     run's row; state is jr_state_name's word (never "abandoned": that is
 *     read from lease_until), times are ms since the epoch by the machine's
 *     clock, lease_until 0 when no owner holds a lease.
 * A claim, an append (of one record or a batch), a cut, a decision and a
 * prune are each one IMMEDIATE transaction that reads the run's row and
 * writes: of processes racing, one at a time. An older file is upgraded
 * when opened, in one transaction, its records and runs kept: version 1
 * (no luma_runs) gains luma_runs; versions 1 and 2 (an index on
 * luma_runs' updated that every append wrote) lose the index, no record
 * copied. A process of
 * an older luma then refuses the file naming both versions. A file that is not a SQLite database, or a database of
 * something else, or a journal of a later version, is refused (NULL, err
 * names the file and both versions) and left as it is.
 */
jr_journal *jr_open_sqlite(const char *path, int sync, char *err, size_t errlen);

#endif
