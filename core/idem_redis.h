/* The Redis idempotency store (idem_redis.c); its calls are idem.h's. */
#ifndef LUMA_IDEM_REDIS_H
#define LUMA_IDEM_REDIS_H

#include <stddef.h>

#include "idem.h"

/* The Redis store (idem_redis.c): shared by processes and machines. */
typedef struct id_redis_options {
  const char *url;                /* redis://[user:password@]host:port/db */
  const char *password;           /* overrides the url's, or NULL */
  const char *prefix;             /* of every key; NULL: "luma:" */
  long long lease_ms;             /* how long a claim lives without its result; <= 0: 60000 */
  int run_when_unavailable;       /* 1: ID_RUN_UNGUARDED instead of ID_UNAVAILABLE */
  const char *passphrase;         /* seal every result (AES-256-GCM), or NULL */
} id_redis_options;

/* NULL with err for a bad url, rediss:// (this hiredis has no TLS), or
   credentials the server refuses. A server that is down is not an error
   here: its calls are unavailable until it is back. */
id_store *id_open_redis(const id_redis_options *o, char *err, size_t errlen);

#endif
