/*
 * Inside the idempotency stores (idem.h): what the back ends share. Every
 * store is a back end behind id_ops (memory in idem.c, idem_file.c,
 * idem_sqlite.c, idem_redis.c); idem.c dispatches each call of a store to
 * its ops, and holds what the back ends share, including the records' table
 * that the memory and file stores keep their records in.
 */
#ifndef LUMA_IDEMINT_H
#define LUMA_IDEMINT_H

#include <stddef.h>
#include <sys/types.h>

#include "idem.h"

typedef struct id_ops {
  /* *lease_left: on ID_WAIT, the holder's claim's time left (ms), or -1
     when this back end's claims have no lease (it is -1 when called) */
  id_status (*begin)(void *impl, const char *tool, const char *key, size_t keylen, const char *input_hash,
                     long long now_ms, char **result, long long *lease_left, char *err, size_t errlen);
  /* text: compact JSON (id_normalize), owned by the caller */
  int (*commit)(void *impl, const char *tool, const char *key, size_t keylen, const char *input_hash,
                const char *text, size_t len, long long now_ms, long long ttl_ms, char *err, size_t errlen);
  void (*abort)(void *impl, const char *tool, const char *key, size_t keylen);
  void (*close)(void *impl);
  /* id_quarantined, or NULL for a back end that never moves a file aside */
  int (*quarantined)(void *impl, char *path, size_t pathcap);
  /* Extends this store's claim on (tool, key) by its lease: 1 renewed, 0
     lost (the claim is gone or another owner holds it), -1 err (unreachable:
     tried again at the next beat). NULL for a back end whose claims have no
     lease. */
  int (*renew)(void *impl, const char *tool, const char *key, size_t keylen, const char *input_hash, char *err,
               size_t errlen);
  /* Starts telling announce(arg), from a thread of the back end's, each
     time another process says a claim ended (a result stored or a claim
     released); called once, at the store's first watcher (id_watch_start),
     and stopped by close. 0, or -1 (the watchers then only poll). NULL for
     a back end whose processes cannot tell each other. */
  int (*watch)(void *impl, void (*announce)(void *arg), void *arg);
} id_ops;

/* A store whose calls go to ops; NULL when memory runs out (impl is then
   closed with ops->close). */
id_store *id_wrap(const id_ops *ops, void *impl);
/* The lease of s's claims (ms): id_keep renews them a third of it apart. */
void id_set_lease(id_store *s, long long lease_ms);

/* The checks of every call: 0, or -1 with err. */
int id_check_args(const char *tool, const char *key, size_t keylen, const char *hash, char *err, size_t errlen);
/* This process's start time (from /proc; 0 when unreadable). */
long long id_self_start(void);
/* This process's PID namespace (the inode of /proc/self/ns/pid; 0 when
   unreadable): a pid names a process only within it. */
long long id_self_pidns(void);
/* Whether the process pid, started at start (0: unknown), still runs. */
int id_pid_alive(long long pid, long long start);
/* A one-line reason into err (NULL or errlen 0: nothing). */
void id_seterr(char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;
/* A random owner token of a store handle: 16 hex digits. 0, or -1 when the
   system gives no random bytes. */
int id_new_token(char token[17]);

/* Sealing a result (the sqlite and redis stores): AES-256-GCM under key, a
   fresh nonce per record, bound to "tool NUL key NUL hash" as associated
   data. A sealed record is nonce(12) || tag(16) || cipher, malloc'd. */
#define ID_SEAL_OVERHEAD 28
unsigned char *id_seal(const unsigned char key[32], const char *tool, const char *k, size_t klen, const char *hash,
                       const char *text, size_t len, size_t *outlen);
/* The text of a sealed record, malloc'd and NUL-terminated; NULL when it does
   not open (another key, another record's place, tampered with). */
char *id_unseal(const unsigned char key[32], const char *tool, const char *k, size_t klen, const char *hash,
                const unsigned char *blob, size_t len);
/* The check value a store keeps to tell a wrong key at open: a constant
   sealed under key (ID_CHECK_LEN bytes); 0, or -1 without random bytes. */
#define ID_CHECK_LEN (ID_SEAL_OVERHEAD + 27)
int id_check_make(const unsigned char key[32], unsigned char out[ID_CHECK_LEN]);
/* Whether check (len bytes) was made under key. */
int id_check_ok(const unsigned char key[32], const void *check, size_t len);

/* One record, keyed by "tool NUL key" (a tool name holds no NUL). A done
   record has a result and an expiry; a pending one (a claim) has an owner. */
typedef struct id_rec {
  char *k;
  size_t klen;
  char hash[65];
  int pending;
  long long at;               /* created_at when done, claimed_at when pending */
  long long expires_at;       /* done */
  char *result;               /* done: compact JSON text, NUL-terminated */
  size_t result_len;
  long long pid, start;       /* pending, shared table: owner process and its start time */
  char token[17];             /* pending, shared table: the owner's store handle */
  struct id_rec *next;
} id_rec;

/* Chained hash table; cap is a power of two, or 0 when empty. */
typedef struct id_table {
  id_rec **slots;
  size_t cap, n;
} id_table;

/* Who takes a claim in a table. A table shared by processes (the file
   store's) names the process (its pid, and its start time: 0 when /proc is
   unreadable) and the store handle (token), and a claim whose process died
   is no claim; a process's own table (the memory store's) has no owner
   (shared 0), and every claim in it is the process's own. */
typedef struct id_owner {
  int shared;
  pid_t pid;
  long long start;
  char token[17];
} id_owner;

/* The records and the table; keys are "tool NUL key" (id_rec_key, malloc'd). */
char *id_rec_key(const char *tool, const char *key, size_t keylen, size_t *len);
id_rec *id_rec_new(const char *k, size_t klen, const char *hash);
void id_rec_free(id_rec *r);
id_rec *id_tb_find(id_table *t, const char *k, size_t len);
/* Adds r, whose key must not be present; returns 0 when memory runs out. */
int id_tb_add(id_table *t, id_rec *r);
void id_tb_drop(id_table *t, id_rec *r);
void id_tb_free(id_table *t);
/* Whether s[0..len) is lowercase hex digits. */
int id_hex_ok(const char *s, size_t len);
/* Whether the process that made the claim r still runs. */
int id_owner_alive(const id_owner *me, const id_rec *r);

/* The decisions on a table (its owner holds the table's lock): id_begin's
   (a claim for me on ID_RUN), id_commit's (text is copied; 1: stored, 0: a
   record with the same input was kept, -1: err), and id_abort's (1 when a
   claim of mine was dropped); id_tb_release_all drops all my claims (at
   close) and counts them. */
id_status id_tb_begin(id_table *t, const id_owner *me, const char *k, size_t klen, const char *hash, long long now,
                      char **result, char *err, size_t errlen);
int id_tb_commit(id_table *t, const id_owner *me, const char *tool, const char *k, size_t klen, const char *hash,
                 const char *text, size_t len, long long now, long long ttl, char *err, size_t errlen);
int id_tb_release(id_table *t, const id_owner *me, const char *k, size_t klen);
size_t id_tb_release_all(id_table *t, const id_owner *me);

#endif
