/* The journal of a durable ask (journal.h): its records in a SQLite file. */
#include "journal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "crypto.h"

#define JR_NAME "luma-journal"
#define JR_VERSION 1            /* the file's tables (luma_meta's version) */
#define JR_BUSY_MS 2000

struct jr_journal {
  pthread_mutex_t lock;       /* one connection: one caller at a time */
  sqlite3 *db;
  char *path;
  sqlite3_stmt *last, *put, *walk;
};

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

/* The digest of a record: SHA-256 of "luma-journal/<v>" NUL run NUL seq NUL
   kind NUL body, in hex. 0, or -1 when memory runs out. */
static int digest(int v, const char *run, long long seq, const char *kind, const char *body, size_t len,
                  char out[65]) {
  char head[64], num[24];
  int hl = snprintf(head, sizeof head, JR_NAME "/%d", v);
  int nl = snprintf(num, sizeof num, "%lld", seq);
  size_t rl = strlen(run), kl = strlen(kind), n = (size_t)hl + rl + (size_t)nl + kl + len + 4;
  char *buf = malloc(n), *p = buf;
  if (!buf) return -1;
  memcpy(p, head, (size_t)hl + 1);
  p += hl + 1;
  memcpy(p, run, rl + 1);
  p += rl + 1;
  memcpy(p, num, (size_t)nl + 1);
  p += nl + 1;
  memcpy(p, kind, kl + 1);
  p += kl + 1;
  if (len) memcpy(p, body, len);
  cr_sha256_hex(buf, n, out);
  free(buf);
  return 0;
}

static const char SCHEMA[] =
  "CREATE TABLE IF NOT EXISTS luma_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);"
  "CREATE TABLE IF NOT EXISTS luma_journal ("
  "  run TEXT NOT NULL, seq INTEGER NOT NULL, v INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL,"
  "  digest TEXT NOT NULL, PRIMARY KEY (run, seq));"
  "INSERT OR IGNORE INTO luma_meta (name, value) VALUES ('format', '" JR_NAME "');";
/* (the second run of SCHEMA, on a journal, adds nothing: its format is there) */

/* The file is a journal of a version this luma reads: 0, or -1 with err. */
static int check_meta(jr_journal *j, char *err, size_t errlen) {
  sqlite3_stmt *st;
  const char *sql = "SELECT (SELECT value FROM luma_meta WHERE name = 'format'), "
                    "(SELECT value FROM luma_meta WHERE name = 'version')";
  if (sqlite3_prepare_v2(j->db, sql, -1, &st, NULL) != SQLITE_OK) {
    seterr(err, errlen, "%s", sqlite3_errmsg(j->db));
    return -1;
  }
  int rc = -1;
  if (sqlite3_step(st) == SQLITE_ROW) {
    const char *format = (const char *)sqlite3_column_text(st, 0);
    int version = sqlite3_column_type(st, 1) == SQLITE_NULL ? 0 : atoi((const char *)sqlite3_column_text(st, 1));
    if (!format || strcmp(format, JR_NAME) != 0)
      seterr(err, errlen, "it is a SQLite database of something else (its luma_meta format is not '" JR_NAME "')");
    else if (version != JR_VERSION)
      seterr(err, errlen, "its journal version is %d; this luma reads version %d", version, JR_VERSION);
    else
      rc = 0;
  } else {
    seterr(err, errlen, "%s", sqlite3_errmsg(j->db));
  }
  sqlite3_finalize(st);
  return rc;
}

void jr_close(jr_journal *j) {
  if (!j) return;
  sqlite3_finalize(j->last);
  sqlite3_finalize(j->put);
  sqlite3_finalize(j->walk);
  if (j->db) sqlite3_close(j->db);
  pthread_mutex_destroy(&j->lock);
  free(j->path);
  free(j);
}

jr_journal *jr_open(const char *path, int sync, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!path || !*path) {
    seterr(err, errlen, "the journal needs a file path");
    return NULL;
  }
  jr_journal *j = calloc(1, sizeof *j);
  if (!j || !(j->path = strdup(path)) || pthread_mutex_init(&j->lock, NULL) != 0) {
    if (j) free(j->path);
    free(j);
    seterr(err, errlen, "out of memory");
    return NULL;
  }
  char why[300] = "";
  int rc = sqlite3_open_v2(path, &j->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(j->db, JR_BUSY_MS);
    rc = sqlite3_exec(j->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL);
  }
  if (rc == SQLITE_OK)
    rc = sqlite3_exec(j->db, sync ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL", NULL, NULL, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_exec(j->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
  if (rc == SQLITE_OK) {
    /* an empty file becomes a journal; one with tables must be one (its
       luma_meta says so), and is never written otherwise */
    sqlite3_stmt *probe;
    int tables = -1, meta = 0;
    rc = sqlite3_prepare_v2(j->db, "SELECT COUNT(*), SUM(name = 'luma_meta') FROM sqlite_master WHERE type = 'table'",
                            -1, &probe, NULL);
    if (rc == SQLITE_OK) {
      if (sqlite3_step(probe) == SQLITE_ROW) {
        tables = sqlite3_column_int(probe, 0);
        meta = sqlite3_column_int(probe, 1);
      }
      rc = sqlite3_finalize(probe);
    }
    if (rc == SQLITE_OK && tables > 0 && !meta) {
      seterr(why, sizeof why, "it is a SQLite database of something else (it has no luma_meta)");
      rc = SQLITE_ERROR;
    }
    if (rc == SQLITE_OK && tables == 0) {
      char sql[96];
      rc = sqlite3_exec(j->db, SCHEMA, NULL, NULL, NULL);
      snprintf(sql, sizeof sql, "INSERT INTO luma_meta (name, value) VALUES ('version', '%d')", JR_VERSION);
      if (rc == SQLITE_OK) rc = sqlite3_exec(j->db, sql, NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK && check_meta(j, why, sizeof why) != 0) rc = SQLITE_ERROR;
    if (rc == SQLITE_OK) rc = sqlite3_exec(j->db, SCHEMA, NULL, NULL, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_exec(j->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
  }
  if (rc == SQLITE_OK) {
    const char *sql[] = {
      "SELECT COALESCE(MAX(seq), 0) FROM luma_journal WHERE run = ?",
      "INSERT INTO luma_journal (run, seq, v, kind, body, digest) VALUES (?, ?, ?, ?, ?, ?)",
      "SELECT seq, v, kind, body, digest FROM luma_journal WHERE run = ? ORDER BY seq",
    };
    sqlite3_stmt **st[] = { &j->last, &j->put, &j->walk };
    for (int i = 0; i < 3 && rc == SQLITE_OK; i++) rc = sqlite3_prepare_v2(j->db, sql[i], -1, st[i], NULL);
  }
  if (rc != SQLITE_OK) {
    if (rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT)
      seterr(err, errlen, "journal '%s' is not a SQLite database, or it is corrupt; it was left as it is", path);
    else
      seterr(err, errlen, "journal '%s': %s", path, why[0] ? why : j->db ? sqlite3_errmsg(j->db) : "cannot open");
    jr_close(j);
    return NULL;
  }
  return j;
}

static long long append(jr_journal *j, const char *run, const char *kind, const char *body, size_t len, char *err,
                        size_t errlen);

long long jr_append(jr_journal *j, const char *run, const char *kind, const char *body, size_t len, char *err,
                    size_t errlen) {
  pthread_mutex_lock(&j->lock);
  long long seq = append(j, run, kind, body, len, err, errlen);
  pthread_mutex_unlock(&j->lock);
  return seq;
}

static long long append(jr_journal *j, const char *run, const char *kind, const char *body, size_t len, char *err,
                        size_t errlen) {
  if (!run || !*run || !kind || !*kind || (!body && len)) {
    seterr(err, errlen, "a journal record needs a run, a kind and a body");
    return -1;
  }
  if (sqlite3_exec(j->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
    seterr(err, errlen, "journal '%s': %s", j->path, sqlite3_errmsg(j->db));
    return -1;
  }
  long long seq = -1;
  char dg[65];
  sqlite3_reset(j->last);
  sqlite3_bind_text(j->last, 1, run, -1, SQLITE_STATIC);
  if (sqlite3_step(j->last) == SQLITE_ROW) seq = sqlite3_column_int64(j->last, 0) + 1;
  sqlite3_reset(j->last);
  if (seq > 0 && digest(JR_FORMAT, run, seq, kind, body, len, dg) == 0) {
    sqlite3_reset(j->put);
    sqlite3_bind_text(j->put, 1, run, -1, SQLITE_STATIC);
    sqlite3_bind_int64(j->put, 2, seq);
    sqlite3_bind_int(j->put, 3, JR_FORMAT);
    sqlite3_bind_text(j->put, 4, kind, -1, SQLITE_STATIC);
    sqlite3_bind_blob(j->put, 5, len ? body : "", (int)len, SQLITE_STATIC);
    sqlite3_bind_text(j->put, 6, dg, 64, SQLITE_STATIC);
    if (sqlite3_step(j->put) != SQLITE_DONE) seq = -1;
    sqlite3_reset(j->put);
  } else {
    seq = -1;
  }
  if (seq > 0 && sqlite3_exec(j->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK) return seq;
  seterr(err, errlen, "journal '%s': %s", j->path, sqlite3_errmsg(j->db));
  sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
  return -1;
}

int jr_read(jr_journal *j, const char *run,
            int (*each)(void *arg, long long seq, const char *kind, const char *body, size_t len), void *arg,
            jr_status *st, char *err, size_t errlen) {
  jr_status s = { 0, 0 };
  int rc = 0;
  pthread_mutex_lock(&j->lock);
  sqlite3_reset(j->walk);
  sqlite3_bind_text(j->walk, 1, run ? run : "", -1, SQLITE_STATIC);
  int step;
  while ((step = sqlite3_step(j->walk)) == SQLITE_ROW) {
    long long seq = sqlite3_column_int64(j->walk, 0);
    int v = sqlite3_column_int(j->walk, 1);
    const char *kind = (const char *)sqlite3_column_text(j->walk, 2);
    const char *body = sqlite3_column_blob(j->walk, 3);
    size_t len = (size_t)sqlite3_column_bytes(j->walk, 3);
    const char *dg = (const char *)sqlite3_column_text(j->walk, 4);
    if (s.torn) { s.torn++; continue; }
    if (v > JR_FORMAT) {
      seterr(err, errlen, "journal '%s': record %lld of run '%s' is of format %d; this luma reads format %d and "
                          "older", j->path, seq, run, v, JR_FORMAT);
      rc = -1;
      break;
    }
    char want[65];
    int whole = kind && dg && seq == s.whole + 1 && v >= 1 &&
                digest(v, run, seq, kind, body ? body : "", len, want) == 0 && strcmp(want, dg) == 0;
    if (!whole) {
      s.torn = 1;
      continue;
    }
    s.whole++;
    if (each && each(arg, seq, kind, body ? body : "", len) != 0) break;
  }
  if (rc == 0 && step != SQLITE_DONE && step != SQLITE_ROW) {   /* SQLITE_ROW: each stopped it */
    seterr(err, errlen, "journal '%s': %s", j->path, sqlite3_errmsg(j->db));
    rc = -1;
  }
  sqlite3_reset(j->walk);
  pthread_mutex_unlock(&j->lock);
  if (st) *st = s;
  return rc;
}
