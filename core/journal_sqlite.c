/* The SQLite journal (journal_sqlite.h): a durable ask's records in one file
   shared by the processes of a machine. */
#include "journal_sqlite.h"
#include "journalint.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#define JR_VERSION 1            /* the file's tables (luma_meta's version) */
#define JR_BUSY_MS 2000

typedef struct sq_journal {
  pthread_mutex_t lock;       /* one connection: one caller at a time */
  sqlite3 *db;
  char *path;
  sqlite3_stmt *last, *put, *walk;
} sq_journal;

static void sq_close(void *impl);
static long long sq_append(void *impl, const char *run, const char *owner, const char *kind, const char *body,
                           size_t len, char *err, size_t errlen);
static int sq_walk(void *impl, const char *run, int (*row)(void *arg, const jr_row *r), void *arg, char *err,
                   size_t errlen);

static const jr_ops SQ_OPS = {
  .append = sq_append,
  .walk = sq_walk,
  .close = sq_close,
};

static const char SCHEMA[] =
  "CREATE TABLE IF NOT EXISTS luma_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);"
  "CREATE TABLE IF NOT EXISTS luma_journal ("
  "  run TEXT NOT NULL, seq INTEGER NOT NULL, v INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL,"
  "  digest TEXT NOT NULL, PRIMARY KEY (run, seq));"
  "INSERT OR IGNORE INTO luma_meta (name, value) VALUES ('format', '" JR_NAME "');";
/* (the second run of SCHEMA, on a journal, adds nothing: its format is there) */

/* The file is a journal of a version this luma reads: 0, or -1 with err. */
static int check_meta(sq_journal *j, char *err, size_t errlen) {
  sqlite3_stmt *st;
  const char *sql = "SELECT (SELECT value FROM luma_meta WHERE name = 'format'), "
                    "(SELECT value FROM luma_meta WHERE name = 'version')";
  if (sqlite3_prepare_v2(j->db, sql, -1, &st, NULL) != SQLITE_OK) {
    jr_seterr(err, errlen, "%s", sqlite3_errmsg(j->db));
    return -1;
  }
  int rc = -1;
  if (sqlite3_step(st) == SQLITE_ROW) {
    const char *format = (const char *)sqlite3_column_text(st, 0);
    int version = sqlite3_column_type(st, 1) == SQLITE_NULL ? 0 : atoi((const char *)sqlite3_column_text(st, 1));
    if (!format || strcmp(format, JR_NAME) != 0)
      jr_seterr(err, errlen, "it is a SQLite database of something else (its luma_meta format is not '" JR_NAME "')");
    else if (version != JR_VERSION)
      jr_seterr(err, errlen, "its journal version is %d; this luma reads version %d", version, JR_VERSION);
    else
      rc = 0;
  } else {
    jr_seterr(err, errlen, "%s", sqlite3_errmsg(j->db));
  }
  sqlite3_finalize(st);
  return rc;
}

static void sq_close(void *impl) {
  sq_journal *j = impl;
  if (!j) return;
  sqlite3_finalize(j->last);
  sqlite3_finalize(j->put);
  sqlite3_finalize(j->walk);
  if (j->db) sqlite3_close(j->db);
  pthread_mutex_destroy(&j->lock);
  free(j->path);
  free(j);
}

jr_journal *jr_open_sqlite(const char *path, int sync, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!path || !*path) {
    jr_seterr(err, errlen, "the journal needs a file path");
    return NULL;
  }
  sq_journal *j = calloc(1, sizeof *j);
  if (!j || !(j->path = strdup(path)) || pthread_mutex_init(&j->lock, NULL) != 0) {
    if (j) free(j->path);
    free(j);
    jr_seterr(err, errlen, "out of memory");
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
      jr_seterr(why, sizeof why, "it is a SQLite database of something else (it has no luma_meta)");
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
      jr_seterr(err, errlen, "journal '%s' is not a SQLite database, or it is corrupt; it was left as it is", path);
    else
      jr_seterr(err, errlen, "journal '%s': %s", path, why[0] ? why : j->db ? sqlite3_errmsg(j->db) : "cannot open");
    sq_close(j);
    return NULL;
  }
  return jr_wrap(&SQ_OPS, j);
}

static long long sq_append(void *impl, const char *run, const char *owner, const char *kind, const char *body,
                           size_t len, char *err, size_t errlen) {
  sq_journal *j = impl;
  (void)owner;
  pthread_mutex_lock(&j->lock);
  long long seq = -1;
  if (sqlite3_exec(j->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK) {
    char dg[65];
    sqlite3_reset(j->last);
    sqlite3_bind_text(j->last, 1, run, -1, SQLITE_STATIC);
    if (sqlite3_step(j->last) == SQLITE_ROW) seq = sqlite3_column_int64(j->last, 0) + 1;
    sqlite3_reset(j->last);
    if (seq > 0 && jr_digest(JR_FORMAT, run, seq, kind, body, len, dg) == 0) {
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
    if (seq > 0 && sqlite3_exec(j->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) seq = -1;
    if (seq < 0) {
      jr_seterr(err, errlen, "journal '%s': %s", j->path, sqlite3_errmsg(j->db));
      sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
    }
  } else {
    jr_seterr(err, errlen, "journal '%s': %s", j->path, sqlite3_errmsg(j->db));
  }
  pthread_mutex_unlock(&j->lock);
  return seq;
}

static int sq_walk(void *impl, const char *run, int (*row)(void *arg, const jr_row *r), void *arg, char *err,
                   size_t errlen) {
  sq_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  sqlite3_reset(j->walk);
  sqlite3_bind_text(j->walk, 1, run, -1, SQLITE_STATIC);
  int step, rc = 0;
  while ((step = sqlite3_step(j->walk)) == SQLITE_ROW) {
    jr_row r = {
      .seq = sqlite3_column_int64(j->walk, 0),
      .v = sqlite3_column_int(j->walk, 1),
      .kind = (const char *)sqlite3_column_text(j->walk, 2),
      .body = sqlite3_column_blob(j->walk, 3),
      .len = (size_t)sqlite3_column_bytes(j->walk, 3),
      .digest = (const char *)sqlite3_column_text(j->walk, 4),
    };
    if (!r.body) r.body = "";
    if (row(arg, &r) != 0) break;
  }
  if (step != SQLITE_DONE && step != SQLITE_ROW) {   /* SQLITE_ROW: row stopped it */
    jr_seterr(err, errlen, "journal '%s': %s", j->path, sqlite3_errmsg(j->db));
    rc = -1;
  }
  sqlite3_reset(j->walk);
  pthread_mutex_unlock(&j->lock);
  return rc;
}
