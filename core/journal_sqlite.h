/* The SQLite journal (journal_sqlite.c); its calls are journal.h's. */
#ifndef LUMA_JOURNAL_SQLITE_H
#define LUMA_JOURNAL_SQLITE_H

#include <stddef.h>

#include "journal.h"

/*
 * Opens (creating) the journal in the SQLite file at path: WAL, one
 * IMMEDIATE transaction per change, safe across the processes of a
 * machine. sync 1: synchronous FULL (an fsync per record), else NORMAL.
 * Its tables:
 *   luma_meta (name, value): format "luma-journal", version;
 *   luma_journal (run, seq, v, kind, body, digest), primary key (run, seq).
 * A file that is not a SQLite database, or a database of something else, or
 * a journal of another version, is refused (NULL, err names the file) and
 * left as it is.
 */
jr_journal *jr_open_sqlite(const char *path, int sync, char *err, size_t errlen);

#endif
