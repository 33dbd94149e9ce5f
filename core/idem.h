/*
 * The idempotency stores of the tool pipeline (SPEC §3), Lua-free: the
 * interface every store offers, and the memory store; the other stores are
 * opened through their own headers (idem_file.h, idem_sqlite.h,
 * idem_redis.h). A tool marked idempotent runs once per (tool, key): later
 * calls with the same key and input get the stored result, the same key with
 * another input is a conflict, and a record expires after its TTL.
 *
 * `memory` is process-local. `file` is shared by the processes of one
 * machine: every read-modify-write holds flock(LOCK_EX) on `<path>.lock`
 * (recovered by the kernel when its holder dies), the file is a versioned
 * JSON envelope replaced by atomic rename, pending claims name their owner
 * process so that a dead owner's claim is taken over, and the records may be
 * encrypted with AES-256-GCM under a key derived from a passphrase.
 *
 * Time is never read here: every call takes now_ms from the caller. Keys are
 * byte strings with a length; tool names are non-empty UTF-8 without NUL.
 *
 * Threads: every function may be called from any thread at once on the same
 * store, except id_close, which must be the last call on it. A file store
 * opened before fork() may be used in the child, provided no other thread was
 * inside an id_ call at that moment.
 */
#ifndef LUMA_IDEM_H
#define LUMA_IDEM_H

#include <stddef.h>

#include "luma_limits.h"

/* PBKDF2-HMAC-SHA256 iterations of a key derived from a passphrase (a new
   file's, sqlite's and redis's). */
#define ID_KDF_ITERATIONS 200000u

typedef struct id_store id_store;

/* ID_UNAVAILABLE: the store cannot be reached now (retryable);
   ID_RUN_UNGUARDED: it cannot, and it was told to run the handler anyway
   (without a claim: no commit or abort follows). */
typedef enum { ID_RUN, ID_REPLAY, ID_CONFLICT, ID_WAIT, ID_ERROR, ID_UNAVAILABLE, ID_RUN_UNGUARDED } id_status;

/* A new empty process-local store, or NULL when memory runs out. */
id_store *id_open_memory(void);

/* Releases the pending claims this store still holds, then frees it. NULL is
   fine. */
void id_close(id_store *s);

/*
 * input_hash: 64 lowercase hex digits identifying the input (the caller
 * hashes its canonical JSON).
 * ID_RUN: no live record; the caller now holds a pending claim and must call
 *   id_commit or id_abort.
 * ID_REPLAY: *result = a malloc'd, NUL-terminated copy of the stored result
 *   JSON text, which the caller frees.
 * ID_CONFLICT: a record or claim with this key has another input_hash.
 * ID_WAIT: a pending claim with the same input is held by another call that
 *   is still alive (another id_begin of this process, or a live process); the
 *   caller waits (id_watch_start wakes it when a claim ends) and calls again.
 *   lease_left (NULL: not wanted) is then the claim's time left unless its
 *   holder renews it (ms), or -1 when it is not known (a memory or file
 *   store's claim lasts as long as its process).
 * ID_ERROR: err says why.
 * Only ID_REPLAY sets *result; it is NULL otherwise.
 */
id_status id_begin(id_store *s, const char *tool, const char *key, size_t keylen, const char *input_hash,
                   long long now_ms, char **result, long long *lease_left, char *err, size_t errlen);

/*
 * Stores result_json (one JSON value, checked and kept in compact form) under
 * (tool, key) until now_ms + ttl_ms (ttl_ms > 0), replacing the claim. When a
 * record with the same input is already stored it is kept. Returns 0, or -1
 * with err for an invalid argument or result, a record with another input,
 * or an I/O error, or ID_COMMIT_UNREACHABLE with err (below).
 */
int id_commit(id_store *s, const char *tool, const char *key, size_t keylen, const char *input_hash,
              const char *result_json, size_t result_len, long long now_ms, long long ttl_ms, char *err,
              size_t errlen);

/* id_commit's answer when the store cannot be reached now (the redis
   store): nothing was stored, and the claim is left as it was (it ends with
   its lease). The caller may call id_commit again, or id_abort. */
#define ID_COMMIT_UNREACHABLE (-2)

/* Watching a store's claims end, so that a caller that got ID_WAIT looks
   again at once: wake(arg) is called, from any thread, each time a claim of
   s ends (a result stored or a claim released) in this process, or, for the
   redis store, in any process (a pub/sub channel). A claim whose holder died
   ends with its lease, unannounced: a waiter still looks again now and then.
   NULL when memory runs out. id_watch_stop ends it: after it returns, wake
   is not running and is never called. */
typedef struct id_watch id_watch;
id_watch *id_watch_start(id_store *s, void (*wake)(void *arg), void *arg);
void id_watch_stop(id_store *s, id_watch *w);

/*
 * Keeps the claim this store took on (tool, key) at ID_RUN while its handler
 * runs: a thread of the store renews it every third of the store's lease
 * (the redis store's lease_ms, the sqlite store's LIM_IDEM_LEASE_MS). When a renewal finds the claim lost (it
 * expired and another owner took it, or it is gone), or cannot reach the
 * store for a whole lease, on_lost(arg) is called once, from that thread;
 * id_commit then refuses to store a result (-1, err says the claim was
 * lost). id_commit and id_abort on (tool, key) stop the renewals: after they
 * return on_lost is not running and is never called. The sqlite store's
 * claims have a lease too (LIM_IDEM_LEASE_MS), renewed the same way. The
 * file store's claims have no lease (a claim lasts while its process lives):
 * they are looked at every second, so that a claim taken over (by a process
 * that judged its holder dead) or removed is lost the same way. The memory store's
 * cannot be lost: nothing is renewed. 0, or -1 when memory or a thread runs
 * out (the claim is then only as long as the lease). A child of fork() starts
 * its own thread at its first id_keep.
 */
int id_keep(id_store *s, const char *tool, const char *key, size_t keylen, const char *input_hash,
            void (*on_lost)(void *arg), void *arg);

/* Drops the pending claim on (tool, key) that this store holds, so that the
   next id_begin runs; a stored result stays. A failure to rewrite the file is
   not reported: the claim is released at id_close or when the process ends. */
void id_abort(id_store *s, const char *tool, const char *key, size_t keylen);

/* How many times this store moved a corrupt file aside since it was opened;
   when non-zero, the newest quarantine path is copied into path (truncated to
   pathcap) for the caller's log. */
int id_quarantined(id_store *s, char *path, size_t pathcap);

#endif
