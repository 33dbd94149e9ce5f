/*
 * A connection to Redis, the one that the Redis stores share (the
 * idempotency store, idem_redis.c; the journal, journal_redis.c): its URL,
 * redis://[user:password@]host[:port][/db] (no rediss://: this hiredis has
 * no TLS), AUTH and SELECT when it connects, timeouts, a reconnection
 * backoff that doubles up to 5 s, and scripts run by their hash (EVALSHA,
 * loaded again on NOSCRIPT). The password is never in an error.
 *
 * Not thread-safe: its owner holds a lock around every call.
 */
#ifndef LUMA_REDIS_H
#define LUMA_REDIS_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#define RC_TIMEOUT_MS 1000        /* connect and command timeout; a subscriber's wait between attempts */

typedef struct rc_conn {
  redisContext *c;                /* NULL when not connected */
  char *host, *user, *password;
  int port, db;
  char where[300];                /* host:port/db, for messages (no password) */
  long long retry_at, backoff;    /* monotonic ms: no connection attempt before retry_at */
  char last[600];                 /* why the last connection attempt failed, or "" */
  /* called on each new connection, after AUTH and SELECT: 0, or -1 with
     err (the connection is dropped); NULL: none */
  int (*ready)(void *arg, char *err, size_t errlen);
  void *ready_arg;
} rc_conn;

/* A script, run by its hash; sha is "" until SCRIPT LOAD gave it. */
typedef struct rc_script {
  const char *text;
  char sha[41];
} rc_script;

/* Reads url into r (zeroed first); password (NULL: the url's) overrides the
   url's. 0, or -1 with err (r is then to be rc_free'd). */
int rc_init(rc_conn *r, const char *url, const char *password, char *err, size_t errlen);
/* Closes the connection and frees (the password wiped). */
void rc_free(rc_conn *r);

/* A connection, made when there is none and the backoff allows: 0, or -1
   with err ("cannot be reached", or the server refused the credentials). */
int rc_connect(rc_conn *r, char *err, size_t errlen);
/* Drops the connection; the next attempt waits for the backoff. */
void rc_drop(rc_conn *r);
/* A reply that is an error or missing: 1 with err (the reply freed; the
   connection dropped when it broke), else 0. */
int rc_failed(rc_conn *r, redisReply *reply, char *err, size_t errlen);
/* A second connection of its own (AUTH, SELECT), with the timeouts, for a
   subscriber; NULL when the server cannot be reached or refuses. */
redisContext *rc_dial(const rc_conn *r);

/* Runs the script with its keys and arguments (lens NULL: strlen): the
   reply (an error reply is rc_failed: NULL with err), connected. */
redisReply *rc_run(rc_conn *r, rc_script *sc, int nkeys, const char *const *keys, const size_t *klens, int nargs,
                   const char *const *args, const size_t *lens, char *err, size_t errlen);

#endif
