/*
 * The Redis idempotency store (idem.h), for many processes and machines.
 *
 * The protocol follows what the trusted implementations do (AWS Powertools'
 * idempotency, Stripe's keys, the IETF Idempotency-Key draft):
 *   - reserve: one script that, when the key is absent, sets it to
 *     "P|<owner token>|<input hash>" with a lease (PX lease_ms); a pending
 *     key with the same input answers "wait", with another "conflict"; a
 *     completed one with the same input replays its result;
 *   - complete and release: scripts that check the owner token, so that a
 *     process whose lease ran out cannot overwrite its successor; complete
 *     sets "C|<input hash>|<result>" with the record's TTL;
 *   - a holder that died leaves a key that expires with its lease: the next
 *     caller takes it over.
 * A record's key is printable: <prefix>idem:<tool>:<SHA-256 of the key, hex>
 * (key_of), so that redis-cli --scan and DEL reach it.
 * With a passphrase, each result is sealed (AES-256-GCM, idemint.h) under a
 * key derived with PBKDF2 from the passphrase and a salt kept in Redis with a
 * check value (<prefix>meta, written once by the first process); a store
 * opened without a passphrase writes "none" there, so that the two can never
 * share a prefix. A sealed result is stored as "~" and the sealed bytes (no
 * JSON text starts with "~").
 *
 * The connection has timeouts; when Redis cannot be reached the call is
 * ID_UNAVAILABLE (or ID_RUN_UNGUARDED with on_unavailable "run"), and the
 * store reconnects with a backoff that doubles up to 5 s. The password is
 * never in an error.
 *
 * Calls are round trips on the caller's thread (a loopback one is about
 * 0.1 ms); one connection per store, behind a lock. The scripts run by their
 * hash (EVALSHA, run_script), loaded again when the server says NOSCRIPT.
 * Complete and release publish the record's key on <prefix>idem:ended; a
 * store whose calls wait on another's claim subscribes to it on a second
 * connection, in a thread of its own (rd_watch), and wakes them. A commit
 * that cannot reach the server is ID_COMMIT_UNREACHABLE: the caller tries
 * again until its deadline. A server that refuses the credentials is as one
 * that is down, at load too: only <prefix>meta refusing this store fails the
 * load.
 */
#define _DEFAULT_SOURCE   /* explicit_bzero */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include <hiredis/hiredis.h>

#include "crypto.h"
#include "idem_redis.h"
#include "idemint.h"
#include "redis.h"

typedef struct rd_store {
  pthread_mutex_t lock;
  rc_conn r;                      /* the connection (redis.h) */
  char *prefix;
  long long lease_ms;
  int run_unavailable;
  char token[17];
  char *pass;                     /* the passphrase (sealing), or NULL */
  int ready;                      /* <prefix>meta was read: key is the sealing key */
  int wrong;                      /* <prefix>meta refuses this store: its message is in why */
  char why[300];
  unsigned char key[32];
  rc_script script[4];            /* SCRIPT[]'s, run by their hash */
  /* the watcher (rd_watch): a thread on a connection of its own, subscribed
     to <prefix>idem:ended, where complete and release publish */
  pthread_t sub;
  int subbing, sub_stop_fd;       /* sub_stop_fd: an eventfd that ends the thread */
  pid_t sub_pid;                  /* a child of fork() has no such thread (its waiters poll) */
  void (*announce)(void *arg);
  void *announce_arg;
} rd_store;

#define seterr id_seterr

/* A reply that is an error or missing (redis.h's rc_failed). */
static int failed(rd_store *s, redisReply *r, char *err, size_t errlen) {
  return rc_failed(&s->r, r, err, errlen);
}

static void hex(const unsigned char *p, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", p[i]);
}

static int unhex(const char *s, size_t n, unsigned char *out) {
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    char two[3] = { s[2 * i], s[2 * i + 1], 0 };
    if (!two[0] || !two[1] || sscanf(two, "%2x", &v) != 1) return -1;
    out[i] = (unsigned char)v;
  }
  return 0;
}

/* What <prefix>meta says of the store: "none", or
   "aes-256-gcm|<iterations>|<salt hex>|<check hex>". The first process
   writes it (SET NX); every other one must agree with it. 0, or -1 with err
   (and s->wrong when it is the store, not the connection, that refuses). */
static int setup(rd_store *s, char *err, size_t errlen) {
  char mkey[300];
  snprintf(mkey, sizeof mkey, "%smeta", s->prefix);
  char mine[32 + 2 * 16 + 2 * ID_CHECK_LEN + 8];
  unsigned char salt[16];
  int derived = 0;
  s->wrong = 0;
  redisReply *r = redisCommand(s->r.c, "GET %s", mkey);
  if (failed(s, r, err, errlen)) return -1;
  int absent = r->type == REDIS_REPLY_NIL;
  freeReplyObject(r);
  if (absent) {
    if (s->pass) {
      unsigned char check[ID_CHECK_LEN];
      if (cr_random(salt, sizeof salt) != 0 ||
          cr_pbkdf2_sha256(s->pass, strlen(s->pass), salt, sizeof salt, ID_KDF_ITERATIONS, s->key) != 0 ||
          id_check_make(s->key, check) != 0) {
        seterr(err, errlen, "cannot derive the encryption key");
        return -1;
      }
      derived = 1;
      int n = snprintf(mine, sizeof mine, "aes-256-gcm|%u|", ID_KDF_ITERATIONS);
      hex(salt, sizeof salt, mine + n);
      mine[n + 32] = '|';
      hex(check, sizeof check, mine + n + 33);
    } else {
      snprintf(mine, sizeof mine, "none");
    }
    r = redisCommand(s->r.c, "SET %s %s NX", mkey, mine);
    if (failed(s, r, err, errlen)) return -1;
    freeReplyObject(r);
  }
  r = redisCommand(s->r.c, "GET %s", mkey);
  if (failed(s, r, err, errlen)) return -1;
  char meta[sizeof mine];
  int ok = r->type == REDIS_REPLY_STRING && r->len < sizeof meta;
  if (ok) {
    memcpy(meta, r->str, r->len);
    meta[r->len] = '\0';
  }
  freeReplyObject(r);
  s->wrong = 1;
  if (!ok) {
    seterr(err, errlen, "Redis at %s: %s is not a luma store's record", s->r.where, mkey);
    return -1;
  }
  if (strcmp(meta, "none") == 0) {
    if (s->pass) {
      seterr(err, errlen, "Redis at %s: the store under prefix '%s' keeps its results in clear, but the config asks "
                          "for aes-256-gcm (give it another prefix)", s->r.where, s->prefix);
      return -1;
    }
    s->wrong = 0;
    s->ready = 1;
    return 0;
  }
  unsigned iterations = 0;
  unsigned char check[ID_CHECK_LEN];
  char salthex[33], checkhex[2 * ID_CHECK_LEN + 1];
  /* 110: 2 * ID_CHECK_LEN */
  if (sscanf(meta, "aes-256-gcm|%u|%32[0-9a-f]|%110[0-9a-f]", &iterations, salthex, checkhex) != 3 ||
      strlen(salthex) != 32 || strlen(checkhex) != 2 * ID_CHECK_LEN || unhex(salthex, 16, salt) != 0 ||
      unhex(checkhex, ID_CHECK_LEN, check) != 0 || iterations < 1 || iterations > LIM_IDEM_KDF_MAX_ITERATIONS) {
    seterr(err, errlen, "Redis at %s: %s is not a luma store's record", s->r.where, mkey);
    return -1;
  }
  if (!s->pass) {
    seterr(err, errlen, "Redis at %s: the store under prefix '%s' is encrypted (aes-256-gcm), but no key was given",
           s->r.where, s->prefix);
    return -1;
  }
  if (!(derived && strcmp(meta, mine) == 0) &&
      cr_pbkdf2_sha256(s->pass, strlen(s->pass), salt, sizeof salt, iterations, s->key) != 0) {
    seterr(err, errlen, "cannot derive the encryption key");
    return -1;
  }
  if (!id_check_ok(s->key, check, sizeof check)) {
    seterr(err, errlen, "Redis at %s: the key does not open the store under prefix '%s' (a wrong key?)", s->r.where,
           s->prefix);
    return -1;
  }
  s->wrong = 0;
  s->ready = 1;
  return 0;
}

/* The store's connection, made when there is none and the backoff allows
   (redis.h); a first one reads <prefix>meta (setup, its ready hook). */
static int connect_now(rd_store *s, char *err, size_t errlen) {
  return rc_connect(&s->r, err, errlen);
}

/* rc_conn's ready hook: <prefix>meta read once. */
static int on_ready(void *arg, char *err, size_t errlen) {
  rd_store *s = arg;
  return s->ready ? 0 : setup(s, err, errlen);
}

/* The key of (tool, key), printable so that an operator can find and clear
   it with redis-cli: prefix + "idem:" + tool + ":" + the SHA-256 of the key
   bytes in hex. Bytes of the tool name that redis-cli or a --pattern would
   take for something else (controls, space, DEL, * ? [ ] \ and %) are %XX;
   the hash has a fixed length, so the last ':' ends the tool name. */
static char *key_of(rd_store *s, const char *tool, const char *key, size_t keylen, size_t *len) {
  size_t pl = strlen(s->prefix), tl = strlen(tool);
  char *k = malloc(pl + 5 + 3 * tl + 1 + 64 + 1);
  if (!k) return NULL;
  memcpy(k, s->prefix, pl);
  memcpy(k + pl, "idem:", 5);
  size_t n = pl + 5;
  for (size_t i = 0; i < tl; i++) {
    unsigned char b = (unsigned char)tool[i];
    if (b <= 0x20 || b == 0x7f || strchr("*?[]\\%", b)) n += (size_t)snprintf(k + n, 4, "%%%02X", b);
    else k[n++] = (char)b;
  }
  k[n++] = ':';
  cr_sha256_hex(keylen ? key : "", keylen, k + n);
  n += 64;
  k[n] = '\0';
  *len = n;
  return k;
}

/* KEYS[1]; ARGV: token, hash, lease_ms -> { "RUN" } | { "WAIT", lease left (ms) } | { "CONFLICT" } |
   { "REPLAY", result } */
static const char RESERVE[] =
  "local v = redis.call('GET', KEYS[1])\n"
  "if not v then\n"
  "  redis.call('SET', KEYS[1], 'P|' .. ARGV[1] .. '|' .. ARGV[2], 'PX', ARGV[3])\n"
  "  return {'RUN'}\n"
  "end\n"
  "if string.sub(v, 1, 2) == 'P|' then\n"
  "  if string.sub(v, 20, 83) ~= ARGV[2] then return {'CONFLICT'} end\n"
  "  return {'WAIT', redis.call('PTTL', KEYS[1])}\n"
  "end\n"
  "if string.sub(v, 3, 66) ~= ARGV[2] then return {'CONFLICT'} end\n"
  "return {'REPLAY', string.sub(v, 68)}\n";

/* KEYS[1]; ARGV: token, hash, result, ttl_ms, channel -> 1 stored, 0 kept (same input), -1 lost to a
   successor; a stored result is announced on the channel (its waiters look again) */
static const char COMPLETE[] =
  "local v = redis.call('GET', KEYS[1])\n"
  "local record = 'C|' .. ARGV[2] .. '|' .. ARGV[3]\n"
  "if v and string.sub(v, 1, 19) == 'P|' .. ARGV[1] .. '|' then\n"
  "  redis.call('SET', KEYS[1], record, 'PX', ARGV[4])\n"
  "  redis.call('PUBLISH', ARGV[5], KEYS[1])\n"
  "  return 1\n"
  "end\n"
  "if v and string.sub(v, 1, 2) == 'C|' and string.sub(v, 3, 66) == ARGV[2] then return 0 end\n"
  "if not v then\n"
  "  redis.call('SET', KEYS[1], record, 'PX', ARGV[4], 'NX')\n"
  "  redis.call('PUBLISH', ARGV[5], KEYS[1])\n"
  "  return 1\n"
  "end\n"
  "return -1\n";

/* KEYS[1]; ARGV: token, channel -> deletes the claim when it is ours, and announces it */
static const char RELEASE[] =
  "local v = redis.call('GET', KEYS[1])\n"
  "if v and string.sub(v, 1, 19) == 'P|' .. ARGV[1] .. '|' then\n"
  "  redis.call('DEL', KEYS[1])\n"
  "  redis.call('PUBLISH', ARGV[2], KEYS[1])\n"
  "  return 1\n"
  "end\n"
  "return 0\n";

/* The channel where complete and release announce a claim's end. */
static void channel_of(rd_store *s, char *out, size_t cap) {
  snprintf(out, cap, "%sidem:ended", s->prefix);
}

/* KEYS[1]; ARGV: token, lease_ms -> 1 renewed, 0 the claim is gone or another's */
static const char RENEW[] =
  "local v = redis.call('GET', KEYS[1])\n"
  "if v and string.sub(v, 1, 19) == 'P|' .. ARGV[1] .. '|' then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end\n"
  "return 0\n";

enum { SC_RESERVE, SC_COMPLETE, SC_RELEASE, SC_RENEW };
static const char *const SCRIPT[] = { RESERVE, COMPLETE, RELEASE, RENEW };

/* Runs a script on KEYS[1] = k with its arguments, by its hash (redis.h's
   rc_run: a server that does not know it is given it again). The reply, or
   NULL with err. s->lock held, connected. */
static redisReply *run_script(rd_store *s, int which, const char *k, size_t klen, int nargs, const char **args,
                              const size_t *lens, char *err, size_t errlen) {
  if (!s->script[which].text) s->script[which].text = SCRIPT[which];
  return rc_run(&s->r, &s->script[which], 1, &k, &klen, nargs, args, lens, err, errlen);
}

static id_status rd_begin(void *impl, const char *tool, const char *key, size_t keylen, const char *hash,
                          long long now, char **result, long long *lease_left, char *err, size_t errlen) {
  (void)now;
  rd_store *s = impl;
  size_t klen;
  char *k = key_of(s, tool, key, keylen, &klen);
  if (!k) { seterr(err, errlen, "idempotency: out of memory"); return ID_ERROR; }
  char lease[24];
  snprintf(lease, sizeof lease, "%lld", s->lease_ms);
  id_status st = ID_ERROR;
  pthread_mutex_lock(&s->lock);
  if (connect_now(s, err, errlen) != 0) {
    st = s->run_unavailable ? ID_RUN_UNGUARDED : ID_UNAVAILABLE;
    goto out;
  }
  const char *args[] = { s->token, hash, lease };
  redisReply *r = run_script(s, SC_RESERVE, k, klen, 3, args, NULL, err, errlen);
  if (!r) {
    if (!s->r.c) st = s->run_unavailable ? ID_RUN_UNGUARDED : ID_UNAVAILABLE;
    goto out;
  }
  if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_STRING) {
    const char *what = r->element[0]->str;
    if (strcmp(what, "RUN") == 0) st = ID_RUN;
    else if (strcmp(what, "WAIT") == 0) {
      st = ID_WAIT;
      if (r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER && r->element[1]->integer >= 0)
        *lease_left = r->element[1]->integer;
    }
    else if (strcmp(what, "CONFLICT") == 0) st = ID_CONFLICT;
    else if (strcmp(what, "REPLAY") == 0 && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING) {
      const char *stored = r->element[1]->str;
      size_t len = r->element[1]->len;
      int sealed = len > 0 && stored[0] == '~';
      char *text = NULL;
      if (sealed != (s->pass != NULL)) {
        seterr(err, errlen, "Redis at %s: a stored result of tool '%s' is %s", s->r.where, tool,
               sealed ? "encrypted, and this store has no key" : "in clear in an encrypted store");
      } else if (sealed) {
        text = id_unseal(s->key, tool, key, keylen, hash, (const unsigned char *)stored + 1, len - 1);
        if (!text) seterr(err, errlen, "Redis at %s: a stored result of tool '%s' does not open (tampered with?)",
                          s->r.where, tool);
      } else if ((text = malloc(len + 1)) != NULL) {
        memcpy(text, stored, len);
        text[len] = '\0';
      } else {
        seterr(err, errlen, "idempotency: out of memory");
      }
      if (text) {
        *result = text;
        st = ID_REPLAY;
      }
    }
  }
  if (st == ID_ERROR && !(err && err[0])) seterr(err, errlen, "Redis at %s gave an unexpected answer", s->r.where);
  freeReplyObject(r);
out:
  pthread_mutex_unlock(&s->lock);
  free(k);
  return st;
}

static int rd_commit(void *impl, const char *tool, const char *key, size_t keylen, const char *hash, const char *text,
                     size_t len, long long now, long long ttl, char *err, size_t errlen) {
  (void)now;
  rd_store *s = impl;
  size_t klen;
  char *k = key_of(s, tool, key, keylen, &klen);
  if (!k) { seterr(err, errlen, "idempotency: out of memory"); return -1; }
  char ttls[24];
  snprintf(ttls, sizeof ttls, "%lld", ttl);
  int rc = -1;
  char *value = NULL;
  size_t vlen = len;
  if (s->pass) {
    /* "~" and the sealed bytes */
    size_t slen;
    unsigned char *sealed = id_seal(s->key, tool, key, keylen, hash, text, len, &slen);
    if (sealed && (value = malloc(slen + 1)) != NULL) {
      value[0] = '~';
      memcpy(value + 1, sealed, slen);
      vlen = slen + 1;
    }
    free(sealed);
    if (!value) {
      seterr(err, errlen, "idempotency: cannot encrypt the result");
      free(k);
      return -1;
    }
    text = value;
  }
  char chan[300];
  channel_of(s, chan, sizeof chan);
  pthread_mutex_lock(&s->lock);
  if (connect_now(s, err, errlen) != 0) {
    if (!s->wrong) rc = ID_COMMIT_UNREACHABLE;
    goto out;
  }
  const char *args[] = { s->token, hash, text, ttls, chan };
  const size_t lens[] = { strlen(s->token), strlen(hash), vlen, strlen(ttls), strlen(chan) };
  redisReply *r = run_script(s, SC_COMPLETE, k, klen, 5, args, lens, err, errlen);
  if (!r) {
    if (!s->r.c) rc = ID_COMMIT_UNREACHABLE;
    goto out;
  }
  if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0) rc = 0;
  else seterr(err, errlen, "idempotency: tool '%s': the lease ran out and another call holds the key now", tool);
  freeReplyObject(r);
out:
  pthread_mutex_unlock(&s->lock);
  free(value);
  free(k);
  return rc;
}

static void rd_abort(void *impl, const char *tool, const char *key, size_t keylen) {
  rd_store *s = impl;
  size_t klen;
  char *k = key_of(s, tool, key, keylen, &klen);
  if (!k) return;
  pthread_mutex_lock(&s->lock);
  char chan[300];
  channel_of(s, chan, sizeof chan);
  if (connect_now(s, NULL, 0) == 0) {
    const char *args[] = { s->token, chan };
    redisReply *r = run_script(s, SC_RELEASE, k, klen, 2, args, NULL, NULL, 0);
    if (r) freeReplyObject(r);
  }
  pthread_mutex_unlock(&s->lock);
  free(k);
}

static int rd_renew(void *impl, const char *tool, const char *key, size_t keylen, const char *hash, char *err,
                    size_t errlen) {
  (void)hash;
  rd_store *s = impl;
  size_t klen;
  char *k = key_of(s, tool, key, keylen, &klen);
  if (!k) { seterr(err, errlen, "idempotency: out of memory"); return -1; }
  char lease[24];
  snprintf(lease, sizeof lease, "%lld", s->lease_ms);
  int rc = -1;
  pthread_mutex_lock(&s->lock);
  if (connect_now(s, err, errlen) == 0) {
    const char *args[] = { s->token, lease };
    redisReply *r = run_script(s, SC_RENEW, k, klen, 2, args, NULL, err, errlen);
    if (r) {
      rc = r->type == REDIS_REPLY_INTEGER && r->integer == 1 ? 1 : 0;
      freeReplyObject(r);
    }
  }
  pthread_mutex_unlock(&s->lock);
  free(k);
  return rc;
}

static void rd_close(void *impl) {
  rd_store *s = impl;
  if (s->subbing && s->sub_pid == getpid()) {
    uint64_t one = 1;
    while (write(s->sub_stop_fd, &one, sizeof one) < 0 && errno == EINTR) {}
    pthread_join(s->sub, NULL);
  }
  if (s->sub_stop_fd >= 0 && s->sub_pid == getpid()) close(s->sub_stop_fd);
  rc_free(&s->r);
  if (s->pass) explicit_bzero(s->pass, strlen(s->pass));
  explicit_bzero(s->key, sizeof s->key);
  free(s->pass);
  free(s->prefix);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* A connection of the watcher's own, subscribed to the channel; NULL when
   the server cannot be reached or refuses (the thread tries again later). */
static redisContext *sub_connect(rd_store *s, const char *chan) {
  redisContext *c = rc_dial(&s->r);
  if (!c) return NULL;
  redisReply *r = redisCommand(c, "SUBSCRIBE %s", chan);
  if (r && r->type == REDIS_REPLY_ARRAY) {
    freeReplyObject(r);
    return c;
  }
  if (r) freeReplyObject(r);
  redisFree(c);
  return NULL;
}

/* The watcher: every message on the channel is a claim that ended; the
   store's watchers look again. A lost connection is made again (a second
   apart); the watchers poll meanwhile. */
static void *subscriber(void *arg) {
  rd_store *s = arg;
  char chan[300];
  channel_of(s, chan, sizeof chan);
  redisContext *c = NULL;
  for (;;) {
    if (!c) c = sub_connect(s, chan);
    struct pollfd p[2] = { { s->sub_stop_fd, POLLIN, 0 }, { c ? c->fd : -1, POLLIN, 0 } };
    int n = poll(p, 2, c ? -1 : RC_TIMEOUT_MS);
    if (n < 0 && errno != EINTR) break;
    if (p[0].revents) break;
    if (!c || !p[1].revents) continue;
    if (redisBufferRead(c) != REDIS_OK) { redisFree(c); c = NULL; continue; }
    void *reply;
    int heard = 0;
    while (redisGetReplyFromReader(c, &reply) == REDIS_OK && reply) {
      heard = 1;
      freeReplyObject(reply);
    }
    if (heard) s->announce(s->announce_arg);
  }
  if (c) redisFree(c);
  return NULL;
}

static int rd_watch(void *impl, void (*announce)(void *arg), void *arg) {
  rd_store *s = impl;
  s->announce = announce;
  s->announce_arg = arg;
  s->sub_stop_fd = eventfd(0, EFD_CLOEXEC);
  if (s->sub_stop_fd < 0) return -1;
  s->sub_pid = getpid();
  if (pthread_create(&s->sub, NULL, subscriber, s) != 0) return -1;
  s->subbing = 1;
  return 0;
}

static const id_ops RD_OPS = { rd_begin, rd_commit, rd_abort, rd_close, NULL, rd_renew, rd_watch };

id_store *id_open_redis(const id_redis_options *o, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!o || !o->url) { seterr(err, errlen, "idempotency: the redis store needs a url"); return NULL; }
  rd_store *s = calloc(1, sizeof *s);
  if (!s || pthread_mutex_init(&s->lock, NULL) != 0) {
    free(s);
    seterr(err, errlen, "idempotency: out of memory");
    return NULL;
  }
  s->sub_stop_fd = -1;
  char why[400];
  if (rc_init(&s->r, o->url, o->password, why, sizeof why) != 0) {
    seterr(err, errlen, "idempotency store redis: %s", why);
    rd_close(s);
    return NULL;
  }
  s->r.ready = on_ready;
  s->r.ready_arg = s;
  s->prefix = strdup(o->prefix ? o->prefix : "luma:");
  if (o->passphrase && (!*o->passphrase || !(s->pass = strdup(o->passphrase)))) {
    seterr(err, errlen, *o->passphrase ? "idempotency: out of memory" : "idempotency: the passphrase is empty");
    rd_close(s);
    return NULL;
  }
  s->lease_ms = o->lease_ms > 0 ? o->lease_ms : LIM_IDEM_LEASE_MS;
  s->run_unavailable = o->run_when_unavailable;
  if (!s->prefix) {
    seterr(err, errlen, "idempotency: out of memory");
    rd_close(s);
    return NULL;
  }
  if (id_new_token(s->token) != 0) {
    seterr(err, errlen, "idempotency: no random bytes");
    rd_close(s);
    return NULL;
  }
  /* a first connection tells at load a store that refuses this config (its
     meta: encrypted or not, another key); a server that is down, or that
     refuses the credentials (a password rotated on the server before the
     config), makes the calls unavailable until it lets them in, the same in
     a process that was running and in one that starts then */
  char cerr[400] = "";
  pthread_mutex_lock(&s->lock);
  int down = connect_now(s, cerr, sizeof cerr);
  pthread_mutex_unlock(&s->lock);
  if (down && s->wrong) {
    seterr(err, errlen, "idempotency store %s", cerr);
    rd_close(s);
    return NULL;
  }
  long long lease = s->lease_ms;
  id_store *st = id_wrap(&RD_OPS, s);
  id_set_lease(st, lease);
  return st;
}
