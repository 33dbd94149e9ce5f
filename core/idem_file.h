/* The file idempotency store (idem_file.c); its calls are idem.h's. */
#ifndef LUMA_IDEM_FILE_H
#define LUMA_IDEM_FILE_H

#include <stddef.h>

#include "idem.h"

/*
 * Opens the file store at path, creating it (mode 0600) when absent.
 * passphrase NULL: the records are plain JSON; otherwise (non-empty) they are
 * encrypted with AES-256-GCM under PBKDF2-HMAC-SHA256(passphrase, the file's
 * salt, the file's iteration count: ID_KDF_ITERATIONS for a new file), derived
 * once here, again only if another process recreates the file with a new
 * salt. Under the lock it removes the temp files of dead writers, expired
 * records and claims of dead processes. A file that is not JSON or not an
 * envelope is moved aside (see id_quarantined) and replaced by an empty
 * store; that is not an error. Errors (NULL, with a one-line reason in err):
 * I/O, an empty passphrase, an envelope version this code does not know, an
 * encrypted file without a passphrase or a plain one with a passphrase, and a
 * file that fails authentication (wrong passphrase or tampering), which is
 * left exactly as it was.
 */
id_store *id_open_file(const char *path, const char *passphrase, long long now_ms, char *err, size_t errlen);
/* id_open_file with another iteration count for a new file: tests only. */
id_store *id_open_file_kdf(const char *path, const char *passphrase, unsigned iterations, long long now_ms,
                           char *err, size_t errlen);

#endif
