/* The SQLite idempotency store (idem_sqlite.c); its calls are idem.h's. */
#ifndef LUMA_IDEM_SQLITE_H
#define LUMA_IDEM_SQLITE_H

#include <stddef.h>

#include "idem.h"

/*
 * Opens the SQLite store at path (idem_sqlite.c), creating it when absent:
 * WAL mode, one transaction per reserve or complete, safe across the
 * processes of a machine; a claim whose process died is taken over. With a
 * passphrase, each stored result is sealed with AES-256-GCM. Errors (NULL,
 * err names the file): not a SQLite database or corrupt (never recreated),
 * a database of something else, a wrong passphrase, encryption that differs
 * from what was asked, I/O.
 */
id_store *id_open_sqlite(const char *path, const char *passphrase, char *err, size_t errlen);

#endif
