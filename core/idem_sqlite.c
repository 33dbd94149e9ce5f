/*
 * The SQLite idempotency store (idem.h): durable, shared by the processes of
 * one machine, with a cost that stays flat as the records grow.
 *
 * One table keyed by (tool, key). WAL mode; every reserve and every complete
 * is one IMMEDIATE transaction, so two processes never both reserve a key. A
 * pending claim names its owner (store token, pid, start time, PID
 * namespace) and has a lease (expires, wall clock ms), renewed while its
 * handler runs (id_keep): a claim whose lease ran out is taken over by the
 * next caller, and so, at once, is one whose process died, when the caller
 * is in the claim's PID namespace (a pid means nothing in another one:
 * containers sharing the file on a volume wait for the lease). Completing purges a
 * few expired rows, so that expiry costs no sweep. With a passphrase, each
 * result is sealed with AES-256-GCM (a fresh nonce per record, the record's
 * tool, key and input hash as associated data) under a key derived with
 * PBKDF2 from the passphrase and the database's salt; a check value in the
 * meta table tells a wrong passphrase at open.
 *
 * A file that is not a SQLite database, or not one of ours, is an error
 * naming it: it is never recreated over the data.
 */
#define _DEFAULT_SOURCE   /* explicit_bzero */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "crypto.h"
#include "idem_sqlite.h"
#include "idemint.h"
#include "satadd.h"

#define SQ_FORMAT "luma-idempotency"
/* 2: claims have a lease (expires) and a PID namespace (ns); a version 1
   file is brought to 2 at open */
#define SQ_VERSION 2
#define SQ_BUSY_MS 2000

typedef struct sq_store {
  pthread_mutex_t lock;           /* one connection: one caller at a time */
  sqlite3 *db;
  char *path;
  long long pid, start, ns;
  long long lease_ms;
  char token[17];
  int encrypted;
  unsigned char key[32];
  sqlite3_stmt *get, *put, *drop, *purge, *release, *renew;
} sq_store;

/* The claims' leases are on the wall clock of the machine (every process
   sharing the file reads the same), not the caller's now. */
static long long wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define seterr id_seterr

static const char *why(sq_store *s) { return sqlite3_errmsg(s->db); }

static int exec(sq_store *s, const char *sql) {
  return sqlite3_exec(s->db, sql, NULL, NULL, NULL);
}

/* ------------------------------------------------------------ meta */

static int meta_get(sq_store *s, const char *name, const void **value, int *len, sqlite3_stmt **st) {
  *value = NULL;
  *len = 0;
  if (sqlite3_prepare_v2(s->db, "SELECT value FROM luma_meta WHERE name = ?", -1, st, NULL) != SQLITE_OK) return -1;
  sqlite3_bind_text(*st, 1, name, -1, SQLITE_STATIC);
  int rc = sqlite3_step(*st);
  if (rc == SQLITE_ROW) {
    *value = sqlite3_column_blob(*st, 0);
    *len = sqlite3_column_bytes(*st, 0);
    return 1;
  }
  return rc == SQLITE_DONE ? 0 : -1;
}

static int meta_put(sq_store *s, const char *name, const void *value, int len) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(s->db, "INSERT INTO luma_meta (name, value) VALUES (?, ?)", -1, &st, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_blob(st, 2, value, len, SQLITE_TRANSIENT);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : -1;
}

/* A new database gets its format, and its salt and check value when it is
   encrypted; an existing one must be ours and match the passphrase. */
static int setup(sq_store *s, const char *pass, char *err, size_t errlen) {
  const void *v;
  int len;
  sqlite3_stmt *st = NULL;
  int have = meta_get(s, "format", &v, &len, &st);
  int ours = have == 1 && len == (int)strlen(SQ_FORMAT) && memcmp(v, SQ_FORMAT, (size_t)len) == 0;
  sqlite3_finalize(st);
  if (have < 0) { seterr(err, errlen, "%s", why(s)); return -1; }
  if (have == 1 && !ours) {
    seterr(err, errlen, "it is a SQLite database of something else (its luma_meta format is not '" SQ_FORMAT "')");
    return -1;
  }
  if (have == 0) {
    /* a new store: its format, its version, and how it is sealed */
    char version[16];
    snprintf(version, sizeof version, "%d", SQ_VERSION);
    if (meta_put(s, "format", SQ_FORMAT, (int)strlen(SQ_FORMAT)) != 0 ||
        meta_put(s, "version", version, (int)strlen(version)) != 0) {
      seterr(err, errlen, "%s", why(s));
      return -1;
    }
    if (pass) {
      unsigned char salt[16], sealed[ID_CHECK_LEN];
      unsigned iterations = ID_KDF_ITERATIONS;
      if (cr_random(salt, sizeof salt) != 0 ||
          cr_pbkdf2_sha256(pass, strlen(pass), salt, sizeof salt, iterations, s->key) != 0 ||
          id_check_make(s->key, sealed) != 0) {
        seterr(err, errlen, "cannot derive the encryption key");
        return -1;
      }
      char it[16];
      snprintf(it, sizeof it, "%u", iterations);
      if (meta_put(s, "encryption", "aes-256-gcm", 11) != 0 || meta_put(s, "salt", salt, sizeof salt) != 0 ||
          meta_put(s, "iterations", it, (int)strlen(it)) != 0 || meta_put(s, "check", sealed, sizeof sealed) != 0) {
        seterr(err, errlen, "%s", why(s));
        return -1;
      }
      s->encrypted = 1;
    } else if (meta_put(s, "encryption", "none", 4) != 0) {
      seterr(err, errlen, "%s", why(s));
      return -1;
    }
    return 0;
  }
  have = meta_get(s, "version", &v, &len, &st);
  char vtext[16] = "";
  if (have == 1 && len < 16) memcpy(vtext, v, (size_t)len);
  int version = atoi(vtext);
  sqlite3_finalize(st);
  if (version == 1) {
    /* version 1's claims had no lease and no namespace: they stay judged by
       their pid (ns NULL), with no end but their process's */
    if (exec(s, "ALTER TABLE luma_idem ADD COLUMN ns INTEGER") != SQLITE_OK ||
        exec(s, "UPDATE luma_meta SET value = '2' WHERE name = 'version'") != SQLITE_OK) {
      seterr(err, errlen, "cannot bring it from format version 1 to 2: %s", why(s));
      return -1;
    }
    version = SQ_VERSION;
  }
  if (version != SQ_VERSION) {
    seterr(err, errlen, "its format version is %d; this luma reads version %d", version, SQ_VERSION);
    return -1;
  }
  have = meta_get(s, "encryption", &v, &len, &st);
  int encrypted = have == 1 && len == 11 && memcmp(v, "aes-256-gcm", 11) == 0;
  sqlite3_finalize(st);
  if (encrypted && !pass) {
    seterr(err, errlen, "it is encrypted (aes-256-gcm), but no key was given (LUMA_IDEMPOTENCY_KEY)");
    return -1;
  }
  if (!encrypted && pass) {
    seterr(err, errlen, "it is not encrypted, but the config asks for aes-256-gcm");
    return -1;
  }
  if (!encrypted) return 0;
  unsigned char salt[16];
  unsigned iterations = 0;
  have = meta_get(s, "salt", &v, &len, &st);
  if (have == 1 && len == 16) memcpy(salt, v, 16);
  sqlite3_finalize(st);
  if (have != 1 || len != 16) { seterr(err, errlen, "its salt is missing"); return -1; }
  have = meta_get(s, "iterations", &v, &len, &st);
  if (have == 1 && len < 16) {
    char it[16];
    memcpy(it, v, (size_t)len);
    it[len] = '\0';
    iterations = (unsigned)strtoul(it, NULL, 10);
  }
  sqlite3_finalize(st);
  if (iterations < 1 || iterations > LIM_IDEM_KDF_MAX_ITERATIONS) {
    seterr(err, errlen, "its key derivation iteration count is out of range");
    return -1;
  }
  if (cr_pbkdf2_sha256(pass, strlen(pass), salt, 16, iterations, s->key) != 0) {
    seterr(err, errlen, "cannot derive the encryption key");
    return -1;
  }
  have = meta_get(s, "check", &v, &len, &st);
  int good = have == 1 && id_check_ok(s->key, v, (size_t)len);
  sqlite3_finalize(st);
  if (!good) {
    seterr(err, errlen, "the key does not open it (a wrong LUMA_IDEMPOTENCY_KEY?)");
    return -1;
  }
  s->encrypted = 1;
  return 0;
}

/* -------------------------------------------------------- the store */

static void sq_free(sq_store *s) {
  sqlite3_finalize(s->get);
  sqlite3_finalize(s->put);
  sqlite3_finalize(s->drop);
  sqlite3_finalize(s->purge);
  sqlite3_finalize(s->release);
  sqlite3_finalize(s->renew);
  if (s->db) sqlite3_close(s->db);
  explicit_bzero(s->key, sizeof s->key);
  free(s->path);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

static int bind_key(sqlite3_stmt *st, const char *tool, const char *key, size_t keylen) {
  sqlite3_bind_text(st, 1, tool, -1, SQLITE_STATIC);
  return sqlite3_bind_blob(st, 2, keylen ? key : "", (int)keylen, SQLITE_STATIC);
}

/* Whether the claim s->get is on still holds: its lease has not run out,
   and, in the caller's PID namespace (or a version 1 claim's, which has none
   and no lease), its process runs. */
static int claim_live(sq_store *s) {
  int v1 = sqlite3_column_type(s->get, 7) == SQLITE_NULL;
  if (!v1 && sqlite3_column_int64(s->get, 5) <= wall_ms()) return 0;
  if (v1 || sqlite3_column_int64(s->get, 7) == s->ns)
    return id_pid_alive(sqlite3_column_int64(s->get, 2), sqlite3_column_int64(s->get, 3));
  return 1;
}

/* The live row of (tool, key): 1 with the statement on it (reset by the
   caller), 0 when none is live (dead claims and expired records count as
   none), -1 on an error. */
static int live_row(sq_store *s, const char *tool, const char *key, size_t keylen, long long now) {
  sqlite3_reset(s->get);
  bind_key(s->get, tool, key, keylen);
  int rc = sqlite3_step(s->get);
  if (rc == SQLITE_DONE) return 0;
  if (rc != SQLITE_ROW) return -1;
  int pending = sqlite3_column_int(s->get, 1);
  if (pending) return claim_live(s) ? 1 : 0;
  return sqlite3_column_int64(s->get, 5) > now ? 1 : 0;
}

static int begin_immediate(sq_store *s) {
  return exec(s, "BEGIN IMMEDIATE");
}

static void rollback(sq_store *s) {
  exec(s, "ROLLBACK");
}

/* put: tool, key, hash, pending, pid, start, token, expires, result, ns; a
   claim expires with its lease */
static int put(sq_store *s, const char *tool, const char *key, size_t keylen, const char *hash, int pending,
               long long expires, const void *result, size_t rlen) {
  sqlite3_reset(s->put);
  sqlite3_clear_bindings(s->put);
  bind_key(s->put, tool, key, keylen);
  sqlite3_bind_text(s->put, 3, hash, 64, SQLITE_STATIC);
  sqlite3_bind_int(s->put, 4, pending);
  if (pending) {
    sqlite3_bind_int64(s->put, 5, s->pid);
    sqlite3_bind_int64(s->put, 6, s->start);
    sqlite3_bind_text(s->put, 7, s->token, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s->put, 8, sat_add(wall_ms(), s->lease_ms));
    sqlite3_bind_int64(s->put, 10, s->ns);
  } else {
    sqlite3_bind_int64(s->put, 8, expires);
    sqlite3_bind_blob(s->put, 9, result, (int)rlen, SQLITE_STATIC);
  }
  int rc = sqlite3_step(s->put);
  sqlite3_reset(s->put);
  return rc == SQLITE_DONE ? 0 : -1;
}

static id_status sq_begin(void *impl, const char *tool, const char *key, size_t keylen, const char *hash,
                          long long now, char **result, long long *lease_left, char *err, size_t errlen) {
  sq_store *s = impl;
  id_status st = ID_ERROR;
  pthread_mutex_lock(&s->lock);
  int rc = begin_immediate(s);
  if (rc == SQLITE_BUSY) { st = ID_WAIT; goto out; }
  if (rc != SQLITE_OK) { seterr(err, errlen, "idempotency store %s: %s", s->path, why(s)); goto out; }
  int live = live_row(s, tool, key, keylen, now);
  if (live < 0) {
    seterr(err, errlen, "idempotency store %s: %s", s->path, why(s));
    sqlite3_reset(s->get);
    rollback(s);
    goto out;
  }
  if (live) {
    const char *h = (const char *)sqlite3_column_text(s->get, 0);
    if (!h || strlen(h) != 64 || memcmp(h, hash, 64) != 0) st = ID_CONFLICT;
    else if (sqlite3_column_int(s->get, 1)) {
      st = ID_WAIT;
      if (sqlite3_column_type(s->get, 7) != SQLITE_NULL) {
        long long left = sqlite3_column_int64(s->get, 5) - wall_ms();
        *lease_left = left > 0 ? left : 0;
      }
    }
    else {
      const void *blob = sqlite3_column_blob(s->get, 6);
      size_t len = (size_t)sqlite3_column_bytes(s->get, 6);
      char *text = NULL;
      if (s->encrypted) {
        text = id_unseal(s->key, tool, key, keylen, hash, blob, len);
        if (!text) seterr(err, errlen, "idempotency store %s: a stored result does not open (tampered with?)", s->path);
      } else if ((text = malloc(len + 1)) != NULL) {
        if (len) memcpy(text, blob, len);
        text[len] = '\0';
      } else {
        seterr(err, errlen, "idempotency: out of memory");
      }
      if (text) {
        *result = text;
        st = ID_REPLAY;
      }
    }
    sqlite3_reset(s->get);
    rollback(s);
    goto out;
  }
  sqlite3_reset(s->get);
  if (put(s, tool, key, keylen, hash, 1, 0, NULL, 0) != 0 || exec(s, "COMMIT") != SQLITE_OK) {
    seterr(err, errlen, "idempotency store %s: %s", s->path, why(s));
    rollback(s);
    goto out;
  }
  st = ID_RUN;
out:
  pthread_mutex_unlock(&s->lock);
  return st;
}

static int sq_commit(void *impl, const char *tool, const char *key, size_t keylen, const char *hash,
                     const char *text, size_t len, long long now, long long ttl, char *err, size_t errlen) {
  sq_store *s = impl;
  int r = -1;
  unsigned char *sealed = NULL;
  size_t slen = len;
  const void *value = text;
  if (s->encrypted) {
    sealed = id_seal(s->key, tool, key, keylen, hash, text, len, &slen);
    if (!sealed) {
      seterr(err, errlen, "idempotency store %s: cannot encrypt the result", s->path);
      return -1;
    }
    value = sealed;
  }
  pthread_mutex_lock(&s->lock);
  if (begin_immediate(s) != SQLITE_OK) {
    seterr(err, errlen, "idempotency store %s: %s", s->path, why(s));
    goto out;
  }
  int live = live_row(s, tool, key, keylen, now);
  if (live > 0) {
    const char *h = (const char *)sqlite3_column_text(s->get, 0);
    int pending = sqlite3_column_int(s->get, 1);
    int same = h && strlen(h) == 64 && memcmp(h, hash, 64) == 0;
    sqlite3_reset(s->get);
    if (!same) {
      seterr(err, errlen, "idempotency: tool '%s': the key is %s with another input", tool, pending ? "claimed" : "stored");
      rollback(s);
      goto out;
    }
    if (!pending) {   /* stored already, with the same input: it stays */
      rollback(s);
      r = 0;
      goto out;
    }
  }
  sqlite3_reset(s->get);
  if (live < 0 || put(s, tool, key, keylen, hash, 0, sat_add(now, ttl), value, slen) != 0) {
    seterr(err, errlen, "idempotency store %s: %s", s->path, why(s));
    rollback(s);
    goto out;
  }
  /* a few expired records go with each write */
  sqlite3_reset(s->purge);
  sqlite3_bind_int64(s->purge, 1, now);
  sqlite3_step(s->purge);
  sqlite3_reset(s->purge);
  if (exec(s, "COMMIT") != SQLITE_OK) {
    seterr(err, errlen, "idempotency store %s: %s", s->path, why(s));
    rollback(s);
    goto out;
  }
  r = 0;
out:
  pthread_mutex_unlock(&s->lock);
  free(sealed);
  return r;
}

static void sq_abort(void *impl, const char *tool, const char *key, size_t keylen) {
  sq_store *s = impl;
  pthread_mutex_lock(&s->lock);
  sqlite3_reset(s->drop);
  bind_key(s->drop, tool, key, keylen);
  sqlite3_bind_int64(s->drop, 3, s->pid);
  sqlite3_bind_int64(s->drop, 4, s->start);
  sqlite3_bind_text(s->drop, 5, s->token, -1, SQLITE_STATIC);
  sqlite3_step(s->drop);
  sqlite3_reset(s->drop);
  pthread_mutex_unlock(&s->lock);
}

/* Releases the claims this store still holds, then closes it. */
static void sq_close(void *impl) {
  sq_store *s = impl;
  if (s->release) {
    sqlite3_bind_int64(s->release, 1, s->pid);
    sqlite3_bind_int64(s->release, 2, s->start);
    sqlite3_bind_text(s->release, 3, s->token, -1, SQLITE_STATIC);
    sqlite3_step(s->release);
  }
  sq_free(s);
}

/* Extends this store's claim on (tool, key) by the lease: 1, 0 when the
   claim is gone or another's, -1 when the database cannot be written now. */
static int sq_renew(void *impl, const char *tool, const char *key, size_t keylen, const char *hash, char *err,
                    size_t errlen) {
  sq_store *s = impl;
  pthread_mutex_lock(&s->lock);
  sqlite3_reset(s->renew);
  bind_key(s->renew, tool, key, keylen);
  sqlite3_bind_int64(s->renew, 3, sat_add(wall_ms(), s->lease_ms));
  sqlite3_bind_text(s->renew, 4, hash, 64, SQLITE_STATIC);
  sqlite3_bind_int64(s->renew, 5, s->pid);
  sqlite3_bind_int64(s->renew, 6, s->start);
  sqlite3_bind_text(s->renew, 7, s->token, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s->renew), held = -1;
  if (rc == SQLITE_DONE) held = sqlite3_changes(s->db) == 1;
  else seterr(err, errlen, "idempotency store %s: %s", s->path, why(s));
  sqlite3_reset(s->renew);
  pthread_mutex_unlock(&s->lock);
  return held;
}

static const id_ops SQ_OPS = { sq_begin, sq_commit, sq_abort, sq_close, NULL, sq_renew, NULL };

static const char SCHEMA[] =
  "CREATE TABLE IF NOT EXISTS luma_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);"
  "CREATE TABLE IF NOT EXISTS luma_idem ("
  "  tool TEXT NOT NULL, key BLOB NOT NULL, hash TEXT NOT NULL, pending INTEGER NOT NULL,"
  "  pid INTEGER, start INTEGER, token TEXT, expires INTEGER, result BLOB, ns INTEGER,"
  "  PRIMARY KEY (tool, key));"
  "CREATE INDEX IF NOT EXISTS luma_idem_expiry ON luma_idem (expires) WHERE pending = 0;";

id_store *id_open_sqlite(const char *path, const char *passphrase, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!path || !*path) {
    seterr(err, errlen, "idempotency: the sqlite store needs a file path");
    return NULL;
  }
  if (passphrase && !*passphrase) {
    seterr(err, errlen, "idempotency: the passphrase is empty");
    return NULL;
  }
  sq_store *s = calloc(1, sizeof *s);
  if (!s || !(s->path = strdup(path)) || pthread_mutex_init(&s->lock, NULL) != 0) {
    if (s) { free(s->path); free(s); }
    seterr(err, errlen, "idempotency: out of memory");
    return NULL;
  }
  s->pid = (long long)getpid();
  s->start = id_self_start();
  s->ns = id_self_pidns();
  s->lease_ms = LIM_IDEM_LEASE_MS;
  if (id_new_token(s->token) != 0) {
    seterr(err, errlen, "idempotency: no random bytes");
    sq_free(s);
    return NULL;
  }
  char reason[300] = "";
  int rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(s->db, SQ_BUSY_MS);
    sqlite3_extended_result_codes(s->db, 0);
    /* the first statement that reads the file tells a file that is no database */
    rc = exec(s, "PRAGMA journal_mode = WAL");
  }
  if (rc == SQLITE_OK) rc = exec(s, "PRAGMA synchronous = NORMAL");
  if (rc == SQLITE_OK) rc = begin_immediate(s);
  if (rc == SQLITE_OK) {
    /* a version 1 file's table gets its ns column in setup */
    rc = exec(s, SCHEMA);
    if (rc == SQLITE_OK && setup(s, passphrase, reason, sizeof reason) != 0) rc = SQLITE_ERROR;
    if (rc == SQLITE_OK) rc = exec(s, "COMMIT");
    if (rc != SQLITE_OK) rollback(s);
  }
  if (rc == SQLITE_OK) {
    const char *sql[] = {
      "SELECT hash, pending, pid, start, token, expires, result, ns FROM luma_idem WHERE tool = ? AND key = ?",
      "INSERT OR REPLACE INTO luma_idem (tool, key, hash, pending, pid, start, token, expires, result, ns) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      "DELETE FROM luma_idem WHERE tool = ? AND key = ? AND pending = 1 AND pid = ? AND start = ? AND token = ?",
      "DELETE FROM luma_idem WHERE rowid IN (SELECT rowid FROM luma_idem WHERE pending = 0 AND expires <= ? LIMIT "
      "64)",
      "DELETE FROM luma_idem WHERE pending = 1 AND pid = ? AND start = ? AND token = ?",
      "UPDATE luma_idem SET expires = ?3 WHERE tool = ?1 AND key = ?2 AND pending = 1 AND hash = ?4 AND pid = ?5 "
      "AND start = ?6 AND token = ?7",
    };
    sqlite3_stmt **st[] = { &s->get, &s->put, &s->drop, &s->purge, &s->release, &s->renew };
    for (int i = 0; i < 6 && rc == SQLITE_OK; i++) rc = sqlite3_prepare_v3(s->db, sql[i], -1, SQLITE_PREPARE_PERSISTENT, st[i], NULL);
  }
  if (rc != SQLITE_OK) {
    if (rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT)
      seterr(err, errlen, "'%s' is not a SQLite database, or it is corrupt (%s); it was left as it is", path,
             s->db ? why(s) : "cannot open");
    else if (reason[0])
      seterr(err, errlen, "'%s': %s", path, reason);
    else
      seterr(err, errlen, "'%s': %s", path, s->db ? why(s) : "cannot open");
    sq_free(s);
    return NULL;
  }
  long long lease = s->lease_ms;
  id_store *st = id_wrap(&SQ_OPS, s);
  id_set_lease(st, lease);
  return st;
}
