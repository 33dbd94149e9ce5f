/* A connection to Redis (redis.h), shared by the Redis stores. */
#define _DEFAULT_SOURCE   /* explicit_bzero */

#include "redis.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RD_BACKOFF_MIN_MS 100
#define RD_BACKOFF_MAX_MS 5000
#define RD_ARGV_ON_STACK 16       /* EVALSHA's keys and arguments kept on the stack */

static void seterr(char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;
static void seterr(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  if (!err || !errlen) return;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static long long mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rc_drop(rc_conn *r) {
  if (r->c) redisFree(r->c);
  r->c = NULL;
  long long now = mono_ms();
  r->backoff = r->backoff ? (r->backoff * 2 > RD_BACKOFF_MAX_MS ? RD_BACKOFF_MAX_MS : r->backoff * 2) : RD_BACKOFF_MIN_MS;
  r->retry_at = now + r->backoff;
}

int rc_failed(rc_conn *r, redisReply *reply, char *err, size_t errlen) {
  if (reply && reply->type != REDIS_REPLY_ERROR) return 0;
  if (reply) {
    seterr(err, errlen, "Redis at %s answered: %.200s", r->where, reply->str);
    freeReplyObject(reply);
  } else {
    snprintf(r->last, sizeof r->last, "Redis at %s cannot be reached: %s", r->where,
             r->c ? r->c->errstr : "no connection");
    seterr(err, errlen, "%s", r->last);
    rc_drop(r);
  }
  return 1;
}

/* AUTH and SELECT on c: 0, or -1 with err. */
static int greet(const rc_conn *r, redisContext *c, char *err, size_t errlen) {
  redisReply *reply;
  if (r->password) {
    reply = r->user ? redisCommand(c, "AUTH %s %s", r->user, r->password) : redisCommand(c, "AUTH %s", r->password);
    if (!reply || reply->type == REDIS_REPLY_ERROR) {
      /* the server's words may not name the password: they are kept */
      if (reply) seterr(err, errlen, "Redis at %s refused the credentials: %.200s", r->where, reply->str);
      else seterr(err, errlen, "Redis at %s cannot be reached: %s", r->where, c->errstr);
      if (reply) freeReplyObject(reply);
      return -1;
    }
    freeReplyObject(reply);
  }
  if (r->db) {
    reply = redisCommand(c, "SELECT %d", r->db);
    if (!reply || reply->type == REDIS_REPLY_ERROR) {
      seterr(err, errlen, "Redis at %s: SELECT %d: %.200s", r->where, r->db, reply ? reply->str : c->errstr);
      if (reply) freeReplyObject(reply);
      return -1;
    }
    freeReplyObject(reply);
  }
  return 0;
}

/* One connection attempt (rc_connect's); 0, or -1 with err. */
static int try_connect(rc_conn *r, char *err, size_t errlen) {
  struct timeval tv = { RC_TIMEOUT_MS / 1000, (RC_TIMEOUT_MS % 1000) * 1000 };
  r->c = redisConnectWithTimeout(r->host, r->port, tv);
  if (!r->c || r->c->err) {
    seterr(err, errlen, "Redis at %s cannot be reached: %s", r->where, r->c ? r->c->errstr : "out of memory");
    rc_drop(r);
    return -1;
  }
  redisSetTimeout(r->c, tv);
  if (greet(r, r->c, err, errlen) != 0 || (r->ready && r->ready(r->ready_arg, err, errlen) != 0)) {
    rc_drop(r);
    return -1;
  }
  r->backoff = 0;
  return 0;
}

int rc_connect(rc_conn *r, char *err, size_t errlen) {
  if (r->c) return 0;
  if (mono_ms() < r->retry_at) {
    /* the last attempt's words: refused credentials are not "down" */
    seterr(err, errlen, "%s (retrying in %lld ms)", r->last[0] ? r->last : "Redis cannot be reached",
           r->retry_at - mono_ms());
    return -1;
  }
  char why[400] = "";
  int rc = try_connect(r, why, sizeof why);
  if (rc != 0) {
    snprintf(r->last, sizeof r->last, "%s", why);
    seterr(err, errlen, "%s", why);
  }
  return rc;
}

redisContext *rc_dial(const rc_conn *r) {
  struct timeval tv = { RC_TIMEOUT_MS / 1000, (RC_TIMEOUT_MS % 1000) * 1000 };
  redisContext *c = redisConnectWithTimeout(r->host, r->port, tv);
  if (!c || c->err || greet(r, c, NULL, 0) != 0) {
    if (c) redisFree(c);
    return NULL;
  }
  redisSetTimeout(c, tv);
  return c;
}

/* SCRIPT LOAD: the script's SHA-1 into sc->sha; 0, or -1 with err. */
static int load_script(rc_conn *r, rc_script *sc, char *err, size_t errlen) {
  redisReply *reply = redisCommand(r->c, "SCRIPT LOAD %s", sc->text);
  if (rc_failed(r, reply, err, errlen)) return -1;
  int ok = reply->type == REDIS_REPLY_STRING && reply->len == 40;
  if (ok) memcpy(sc->sha, reply->str, 41);
  else seterr(err, errlen, "Redis at %s gave an unexpected answer to SCRIPT LOAD", r->where);
  freeReplyObject(reply);
  return ok ? 0 : -1;
}

redisReply *rc_run(rc_conn *r, rc_script *sc, int nkeys, const char *const *keys, const size_t *klens, int nargs,
                   const char *const *args, const size_t *lens, char *err, size_t errlen) {
  /* EVALSHA, the script, the count of keys, then the keys and arguments:
     on the stack for the usual few, else on the heap (a journal's batch
     of a turn's outcomes has one argument per record) */
  const char *stack_argv[3 + RD_ARGV_ON_STACK];
  size_t stack_argl[3 + RD_ARGV_ON_STACK];
  const char **argv = stack_argv;
  size_t *argl = stack_argl;
  char nk[16];
  if (nkeys < 0 || nargs < 0 || nkeys > INT_MAX - 3 - nargs) {
    seterr(err, errlen, "a Redis script with %d keys and %d arguments", nkeys, nargs);
    return NULL;
  }
  if (nkeys + nargs > RD_ARGV_ON_STACK) {
    argv = malloc(sizeof *argv * (size_t)(3 + nkeys + nargs));
    argl = malloc(sizeof *argl * (size_t)(3 + nkeys + nargs));
    if (!argv || !argl) {
      free(argv);
      free(argl);
      seterr(err, errlen, "out of memory for a Redis script of %d keys and arguments", nkeys + nargs);
      return NULL;
    }
  }
  redisReply *out = NULL;
  snprintf(nk, sizeof nk, "%d", nkeys);
  argv[0] = "EVALSHA";
  argl[0] = 7;
  argv[2] = nk;
  argl[2] = strlen(nk);
  for (int i = 0; i < nkeys; i++) {
    argv[3 + i] = keys[i];
    argl[3 + i] = klens ? klens[i] : strlen(keys[i]);
  }
  for (int i = 0; i < nargs; i++) {
    argv[3 + nkeys + i] = args[i];
    argl[3 + nkeys + i] = lens ? lens[i] : strlen(args[i]);
  }
  for (int attempt = 0; attempt < 2; attempt++) {
    if (!r->c) {
      seterr(err, errlen, "Redis at %s cannot be reached", r->where);
      break;
    }
    if (!sc->sha[0] && load_script(r, sc, err, errlen) != 0) break;
    argv[1] = sc->sha;
    argl[1] = 40;
    redisReply *reply = redisCommandArgv(r->c, 3 + nkeys + nargs, argv, argl);
    if (reply && reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0 && attempt == 0) {
      /* restarted, or SCRIPT FLUSH: given again */
      freeReplyObject(reply);
      sc->sha[0] = '\0';
      continue;
    }
    if (!rc_failed(r, reply, err, errlen)) out = reply;
    break;
  }
  if (argv != stack_argv) {
    free(argv);
    free(argl);
  }
  return out;
}

/* %XX in the user and password of a URL */
static char *unescape(const char *p, size_t n) {
  char *out = malloc(n + 1), *o = out;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++) {
    if (p[i] == '%' && i + 2 < n) {
      char hex[3] = { p[i + 1], p[i + 2], 0 };
      char *end;
      long v = strtol(hex, &end, 16);
      if (*end == '\0' && v > 0) { *o++ = (char)v; i += 2; continue; }
    }
    *o++ = p[i];
  }
  *o = '\0';
  return out;
}

int rc_init(rc_conn *r, const char *url, const char *password, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  if (!url) {
    seterr(err, errlen, "the url is missing (redis://[user:password@]host:port/db)");
    return -1;
  }
  if (strncmp(url, "rediss://", 9) == 0) {
    seterr(err, errlen, "rediss:// (Redis over TLS) needs a hiredis with TLS, and the one this luma is built "
                        "with (%d.%d.%d) has none; use redis:// through a TLS tunnel", HIREDIS_MAJOR, HIREDIS_MINOR,
           HIREDIS_PATCH);
    return -1;
  }
  if (strncmp(url, "redis://", 8) != 0) {
    seterr(err, errlen, "the url must start with redis:// (redis://[user:password@]host:port/db)");
    return -1;
  }
  const char *p = url + 8, *at = strrchr(p, '@');
  if (at) {
    const char *colon = memchr(p, ':', (size_t)(at - p));
    if (colon) {
      if (colon > p) r->user = unescape(p, (size_t)(colon - p));
      r->password = unescape(colon + 1, (size_t)(at - colon - 1));
    } else {
      r->password = unescape(p, (size_t)(at - p));
    }
    p = at + 1;
  }
  if (password) {
    if (r->password) explicit_bzero(r->password, strlen(r->password));
    free(r->password);
    r->password = strdup(password);
    if (!r->password) { seterr(err, errlen, "out of memory"); return -1; }
  }
  const char *end = p + strcspn(p, ":/");
  if (end == p) { seterr(err, errlen, "the url names no host (redis://host:port/db)"); return -1; }
  r->host = malloc((size_t)(end - p) + 1);
  if (!r->host) { seterr(err, errlen, "out of memory"); return -1; }
  memcpy(r->host, p, (size_t)(end - p));
  r->host[end - p] = '\0';
  r->port = 6379;
  p = end;
  if (*p == ':') {
    char *e;
    long port = strtol(p + 1, &e, 10);
    if (e == p + 1 || port < 1 || port > 65535 || (*e && *e != '/')) {
      seterr(err, errlen, "the url's port must be a number from 1 to 65535");
      return -1;
    }
    r->port = (int)port;
    p = e;
  }
  if (*p == '/' && p[1]) {
    char *e;
    long db = strtol(p + 1, &e, 10);
    if (e == p + 1 || *e || db < 0 || db > 100000) {
      seterr(err, errlen, "the url's database must be a number (redis://host:port/0)");
      return -1;
    }
    r->db = (int)db;
  }
  snprintf(r->where, sizeof r->where, "%s:%d/%d", r->host, r->port, r->db);
  return 0;
}

void rc_free(rc_conn *r) {
  if (r->c) redisFree(r->c);
  r->c = NULL;
  if (r->password) explicit_bzero(r->password, strlen(r->password));
  free(r->host);
  free(r->user);
  free(r->password);
  r->host = r->user = r->password = NULL;
}
