/*
 * Inside the idempotency stores (idem.h): what the back ends share. idem.c
 * holds the store handle and the memory store, idem_file.c the file store;
 * idem.c dispatches every call of a store with ops (idem_sqlite.c,
 * idem_redis.c) to it.
 */
#ifndef LUMA_IDEMINT_H
#define LUMA_IDEMINT_H

#include <stddef.h>

#include "idem.h"

typedef struct id_ops {
  id_status (*begin)(void *impl, const char *tool, const char *key, size_t keylen, const char *input_hash,
                     long long now_ms, char **result, char *err, size_t errlen);
  /* text: compact JSON (id_normalize), owned by the caller */
  int (*commit)(void *impl, const char *tool, const char *key, size_t keylen, const char *input_hash,
                const char *text, size_t len, long long now_ms, long long ttl_ms, char *err, size_t errlen);
  void (*abort)(void *impl, const char *tool, const char *key, size_t keylen);
  void (*close)(void *impl);
} id_ops;

/* A store whose calls go to ops; NULL when memory runs out (impl is then
   closed with ops->close). */
id_store *id_wrap(const id_ops *ops, void *impl);

/* The checks of every call: 0, or -1 with err. */
int id_check_args(const char *tool, const char *key, size_t keylen, const char *hash, char *err, size_t errlen);
/* This process's start time (from /proc; 0 when unreadable). */
long long id_self_start(void);
/* Whether the process pid, started at start (0: unknown), still runs. */
int id_pid_alive(long long pid, long long start);
/* now + ttl, saturated. */
long long id_add_ttl(long long now, long long ttl);
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

#endif
