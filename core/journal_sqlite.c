/* The SQLite journal (journal_sqlite.h): a durable ask's records in one file
   shared by the processes of a machine. */
#include "journal_sqlite.h"
#include "journalint.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#define JR_VERSION 3            /* the file's tables (luma_meta's version) */
#define JR_BUSY_MS 2000

/* The statements, prepared once (st[]). */
enum {
  Q_LAST, Q_PUT, Q_WALK, Q_ROW, Q_TOUCH, Q_NEW, Q_TAKE, Q_RENEW, Q_SET, Q_OWNER, Q_LIST, Q_CUT, Q_PRUNE_RECORDS,
  Q_PRUNE_RUNS, Q_BEGIN, Q_COMMIT, Q_ROLLBACK, Q_N
};
static const char *const SQL[Q_N] = {
  [Q_LAST] = "SELECT COALESCE(MAX(seq), 0) FROM luma_journal WHERE run = ?",
  [Q_PUT] = "INSERT INTO luma_journal (run, seq, v, kind, body, digest) VALUES (?, ?, ?, ?, ?, ?)",
  [Q_WALK] = "SELECT seq, v, kind, body, digest FROM luma_journal WHERE run = ? ORDER BY seq",
  [Q_ROW] = "SELECT run, state, step, owner, lease_until, created, updated, "
            "(SELECT COUNT(*) FROM luma_journal WHERE luma_journal.run = luma_runs.run) FROM luma_runs WHERE run = ?",
  [Q_TOUCH] = "UPDATE luma_runs SET updated = ?, step = COALESCE(?, step) WHERE run = ?",
  [Q_NEW] = "INSERT INTO luma_runs (run, state, step, owner, lease_until, created, updated) "
            "VALUES (?1, 'running', '', ?2, ?3, ?4, ?4)",
  [Q_TAKE] = "UPDATE luma_runs SET state = 'running', owner = ?2, lease_until = ?3, updated = ?4 WHERE run = ?1",
  [Q_RENEW] = "UPDATE luma_runs SET lease_until = ?3 WHERE run = ?1 AND owner = ?2 AND state = 'running'",
  [Q_SET] = "UPDATE luma_runs SET state = :state, step = COALESCE(:step, step), updated = :now, "
            "lease_until = CASE WHEN :state = 'running' THEN lease_until ELSE 0 END WHERE run = :run AND owner = :owner",
  [Q_OWNER] = "SELECT owner FROM luma_runs WHERE run = ?",
  [Q_LIST] = "SELECT run, state, step, owner, lease_until, created, updated, "
             "(SELECT COUNT(*) FROM luma_journal WHERE luma_journal.run = luma_runs.run) FROM luma_runs "
             "ORDER BY updated DESC, run",
  [Q_CUT] = "DELETE FROM luma_journal WHERE run = ? AND seq > ?",
  [Q_PRUNE_RECORDS] = "DELETE FROM luma_journal WHERE run IN (SELECT run FROM luma_runs WHERE updated < ?1 AND "
                      "(state IN ('completed', 'failed') OR (state = 'running' AND lease_until <= ?2)))",
  [Q_PRUNE_RUNS] = "DELETE FROM luma_runs WHERE updated < ?1 AND "
                   "(state IN ('completed', 'failed') OR (state = 'running' AND lease_until <= ?2))",
  /* (prepared once too: sqlite3_exec would compile them at every change) */
  [Q_BEGIN] = "BEGIN IMMEDIATE",
  [Q_COMMIT] = "COMMIT",
  [Q_ROLLBACK] = "ROLLBACK",
};

typedef struct sq_journal {
  pthread_mutex_t lock;       /* one connection: one caller at a time */
  sqlite3 *db;
  char *path;
  sqlite3_stmt *st[Q_N];
} sq_journal;

static void sq_close(void *impl);
static long long sq_append(void *impl, const char *run, const char *owner, const jr_record *recs, int n,
                           const char *step, char *err, size_t errlen);
static int sq_walk(void *impl, const char *run, int (*row)(void *arg, const jr_row *r), void *arg, char *err,
                   size_t errlen);
static int sq_cut(void *impl, const char *run, const char *owner, long long keep, char *err, size_t errlen);
static int sq_claim(void *impl, const char *run, const char *owner, long long lease_ms, jr_run *now, char *err,
                    size_t errlen);
static int sq_renew(void *impl, const char *run, const char *owner, long long lease_ms, char *err, size_t errlen);
static int sq_set(void *impl, const char *run, const char *owner, jr_state state, const char *step, char *err,
                  size_t errlen);
static int sq_get(void *impl, const char *run, jr_run *out, char *err, size_t errlen);
static int sq_list(void *impl, int (*each)(void *arg, const jr_run *r), void *arg, char *err, size_t errlen);
static long long sq_prune(void *impl, long long before_ms, char *err, size_t errlen);
static long long sq_decide(void *impl, const char *run, const char *body, size_t len, char *err, size_t errlen);

static const jr_ops SQ_OPS = {
  .append = sq_append,
  .walk = sq_walk,
  .cut = sq_cut,
  .claim = sq_claim,
  .renew = sq_renew,
  .set = sq_set,
  .get = sq_get,
  .list = sq_list,
  .prune = sq_prune,
  .decide = sq_decide,
  .close = sq_close,
};

/* Version 1 had luma_meta and luma_journal; 2 added luma_runs (and an
   index on its updated, which each append wrote to as well); 3 has no such
   index (list and prune read the runs' table through). The records' table
   keeps its rowid: WITHOUT ROWID would save a b-tree write per record, but
   keeps only about a quarter of a page of a row on its page, so records of
   a kilobyte or more (a tool's outcome, a model's response) would each
   take overflow pages, the file three to four times larger. An older file
   is upgraded when opened (UPGRADE), its records kept where they are. */
static const char SCHEMA[] =
  "CREATE TABLE IF NOT EXISTS luma_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);"
  "CREATE TABLE IF NOT EXISTS luma_journal ("
  "  run TEXT NOT NULL, seq INTEGER NOT NULL, v INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL,"
  "  digest TEXT NOT NULL, PRIMARY KEY (run, seq));"
  "CREATE TABLE IF NOT EXISTS luma_runs ("
  "  run TEXT PRIMARY KEY, state TEXT NOT NULL, step TEXT NOT NULL, owner TEXT NOT NULL,"
  "  lease_until INTEGER NOT NULL, created INTEGER NOT NULL, updated INTEGER NOT NULL);"
  "INSERT OR IGNORE INTO luma_meta (name, value) VALUES ('format', '" JR_NAME "');";
/* (the second run of SCHEMA, on a journal, adds nothing: its tables are there) */

/* An older file (version 1 or 2; after SCHEMA, which gave a version-1 file
   its luma_runs): the index every append wrote goes. Instant whatever the
   file's size: no record is copied. */
static const char UPGRADE[] = "DROP INDEX IF EXISTS luma_runs_updated;";

/* The file is a journal of a version this luma reads: its version (older
   ones are upgraded by the caller), or -1 with err. */
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
    else if (version < 1 || version > JR_VERSION)
      jr_seterr(err, errlen, "its journal version is %d; this luma reads versions 1 to %d", version, JR_VERSION);
    else
      rc = version;
  } else {
    jr_seterr(err, errlen, "%s", sqlite3_errmsg(j->db));
  }
  sqlite3_finalize(st);
  return rc;
}

static void sq_close(void *impl) {
  sq_journal *j = impl;
  if (!j) return;
  for (int i = 0; i < Q_N; i++) sqlite3_finalize(j->st[i]);
  if (j->db) sqlite3_close(j->db);
  pthread_mutex_destroy(&j->lock);
  free(j->path);
  free(j);
}

/* WAL, the durability, and the file made a journal (or checked to be one,
   and upgraded) in one IMMEDIATE transaction: an SQLite result code, why
   set for a file that is not a journal. */
static int prepare_file(sq_journal *j, int sync, char *why, size_t whylen) {
  int rc = sqlite3_exec(j->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL);
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
      jr_seterr(why, whylen, "it is a SQLite database of something else (it has no luma_meta)");
      rc = SQLITE_ERROR;
    }
    if (rc == SQLITE_OK && tables == 0) {
      char sql[96];
      rc = sqlite3_exec(j->db, SCHEMA, NULL, NULL, NULL);
      snprintf(sql, sizeof sql, "INSERT INTO luma_meta (name, value) VALUES ('version', '%d')", JR_VERSION);
      if (rc == SQLITE_OK) rc = sqlite3_exec(j->db, sql, NULL, NULL, NULL);
    }
    int version = rc == SQLITE_OK ? check_meta(j, why, whylen) : -1;
    if (rc == SQLITE_OK && version < 0) rc = SQLITE_ERROR;
    if (rc == SQLITE_OK) rc = sqlite3_exec(j->db, SCHEMA, NULL, NULL, NULL);
    if (rc == SQLITE_OK && version < JR_VERSION) {
      char sql[96];
      rc = sqlite3_exec(j->db, UPGRADE, NULL, NULL, NULL);
      snprintf(sql, sizeof sql, "UPDATE luma_meta SET value = '%d' WHERE name = 'version'", JR_VERSION);
      if (rc == SQLITE_OK) rc = sqlite3_exec(j->db, sql, NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK) rc = sqlite3_exec(j->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
  }
  return rc;
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
    /* processes opening a new file at once: the change to WAL, or the
       first transaction, may be refused busy without waiting for the
       other (SQLite's busy handler is not called there); tried again */
    long long until = jr_now_ms() + JR_BUSY_MS;
    while ((rc = prepare_file(j, sync, why, sizeof why)) == SQLITE_BUSY && jr_now_ms() < until) {
      struct timespec nap = { 0, (long)(5 + rand() % 20) * 1000000L };
      nanosleep(&nap, NULL);
    }
  }
  for (int i = 0; i < Q_N && rc == SQLITE_OK; i++) rc = sqlite3_prepare_v2(j->db, SQL[i], -1, &j->st[i], NULL);
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

/* ------------------------------------------------------------- statements */

static sqlite3_stmt *stmt(sq_journal *j, int q) {
  sqlite3_reset(j->st[q]);
  sqlite3_clear_bindings(j->st[q]);
  return j->st[q];
}

/* The store's reason into err; rc. */
static int failure(sq_journal *j, int rc, char *err, size_t errlen) {
  jr_seterr(err, errlen, "journal '%s': %s", j->path, sqlite3_errmsg(j->db));
  return rc;
}

/* BEGIN IMMEDIATE: the write lock first, so that of racing processes one
   reads and writes at a time. 0, or -1 with err. */
static int begin(sq_journal *j, char *err, size_t errlen) {
  sqlite3_stmt *st = j->st[Q_BEGIN];
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE ? 0 : failure(j, -1, err, errlen);
}

/* COMMIT when ok (rc kept, or -1 with err when it fails), else ROLLBACK. */
static long long end(sq_journal *j, long long rc, int ok, char *err, size_t errlen) {
  if (ok) {
    sqlite3_stmt *st = j->st[Q_COMMIT];
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    if (step == SQLITE_DONE) return rc;
    rc = failure(j, -1, err, errlen);
  }
  /* (a COMMIT that failed may have ended the transaction already) */
  if (!sqlite3_get_autocommit(j->db)) {
    sqlite3_stmt *st = j->st[Q_ROLLBACK];
    sqlite3_step(st);
    sqlite3_reset(st);
  }
  return rc;
}

/* The run's row (Q_ROW or Q_LIST's columns) into *r (jr_fill reads a NULL text as ""). */
static void row_of(sqlite3_stmt *st, jr_run *r, long long now) {
  jr_fill(r, (const char *)sqlite3_column_text(st, 0), jr_state_of((const char *)sqlite3_column_text(st, 1)),
          (const char *)sqlite3_column_text(st, 2), (const char *)sqlite3_column_text(st, 3),
          sqlite3_column_int64(st, 4), sqlite3_column_int64(st, 5), sqlite3_column_int64(st, 6),
          sqlite3_column_int64(st, 7), now);
}

/* The run's row: 1 (*r), 0 none, -1 with err. */
static int read_row(sq_journal *j, const char *run, jr_run *r, char *err, size_t errlen) {
  sqlite3_stmt *st = stmt(j, Q_ROW);
  sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
  int step = sqlite3_step(st), rc = step == SQLITE_ROW ? 1 : step == SQLITE_DONE ? 0 : failure(j, -1, err, errlen);
  if (rc == 1) row_of(st, r, jr_now_ms());
  sqlite3_reset(st);
  return rc;
}

/* May owner write to run? 0 yes (*has: the run has a row), JR_LOST with
   err, -1 with err. In a transaction. */
static int fence(sq_journal *j, const char *run, const char *owner, int *has, char *err, size_t errlen) {
  sqlite3_stmt *st = stmt(j, Q_OWNER);
  sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
  int step = sqlite3_step(st), rc = 0;
  *has = step == SQLITE_ROW;
  if (step != SQLITE_ROW && step != SQLITE_DONE) {
    rc = failure(j, -1, err, errlen);
  } else {
    const char *holder = *has ? (const char *)sqlite3_column_text(st, 0) : NULL;
    rc = jr_fenced(run, owner, *has, holder ? holder : "", err, errlen);
  }
  sqlite3_reset(st);
  return rc;
}

/* Stores the run's next n records and marks its row changed (in a
   transaction): the seq of the last, or -1 with err. */
static long long put(sq_journal *j, const char *run, int has, const jr_record *recs, int n, const char *step_text,
                     char *err, size_t errlen) {
  long long seq = -1;
  char dg[65];
  sqlite3_stmt *st = stmt(j, Q_LAST);
  sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) seq = sqlite3_column_int64(st, 0);
  sqlite3_reset(st);
  if (seq < 0) return failure(j, -1, err, errlen);
  int step;
  for (int i = 0; i < n; i++) {
    const jr_record *r = &recs[i];
    seq++;
    if (jr_digest(JR_FORMAT, run, seq, r->kind, r->body, r->len, dg) != 0) {
      jr_seterr(err, errlen, "out of memory");
      return -1;
    }
    st = stmt(j, Q_PUT);
    sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, seq);
    sqlite3_bind_int(st, 3, JR_FORMAT);
    sqlite3_bind_text(st, 4, r->kind, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 5, r->len ? r->body : "", (int)r->len, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, dg, 64, SQLITE_STATIC);
    step = sqlite3_step(st);
    sqlite3_reset(st);
    if (step != SQLITE_DONE) return failure(j, -1, err, errlen);
  }
  if (has) {
    st = stmt(j, Q_TOUCH);
    sqlite3_bind_int64(st, 1, jr_now_ms());
    if (step_text) sqlite3_bind_text(st, 2, step_text, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, run, -1, SQLITE_STATIC);
    step = sqlite3_step(st);
    sqlite3_reset(st);
    if (step != SQLITE_DONE) return failure(j, -1, err, errlen);
  }
  return seq;
}

/* ---------------------------------------------------------------- records */

static long long sq_append(void *impl, const char *run, const char *owner, const jr_record *recs, int n,
                           const char *step, char *err, size_t errlen) {
  sq_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  long long seq = -1;
  if (begin(j, err, errlen) == 0) {
    int has;
    seq = fence(j, run, owner, &has, err, errlen);
    if (seq == 0) seq = put(j, run, has, recs, n, step, err, errlen);
    seq = end(j, seq, seq > 0, err, errlen);
  }
  pthread_mutex_unlock(&j->lock);
  return seq;
}

static int sq_walk(void *impl, const char *run, int (*row)(void *arg, const jr_row *r), void *arg, char *err,
                   size_t errlen) {
  sq_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  sqlite3_stmt *st = stmt(j, Q_WALK);
  sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
  int step, rc = 0;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    jr_row r = {
      .seq = sqlite3_column_int64(st, 0),
      .v = sqlite3_column_int(st, 1),
      .kind = (const char *)sqlite3_column_text(st, 2),
      .body = sqlite3_column_blob(st, 3),
      .len = (size_t)sqlite3_column_bytes(st, 3),
      .digest = (const char *)sqlite3_column_text(st, 4),
    };
    if (!r.body) r.body = "";
    if (row(arg, &r) != 0) break;
  }
  if (step != SQLITE_DONE && step != SQLITE_ROW)   /* SQLITE_ROW: row stopped it */
    rc = failure(j, -1, err, errlen);
  sqlite3_reset(st);
  pthread_mutex_unlock(&j->lock);
  return rc;
}

static int sq_cut(void *impl, const char *run, const char *owner, long long keep, char *err, size_t errlen) {
  sq_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  int rc = -1;
  if (begin(j, err, errlen) == 0) {
    int has;
    rc = fence(j, run, owner, &has, err, errlen);
    if (rc == 0) {
      sqlite3_stmt *st = stmt(j, Q_CUT);
      sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
      sqlite3_bind_int64(st, 2, keep);
      rc = sqlite3_step(st) == SQLITE_DONE ? 1 : failure(j, -1, err, errlen);
      sqlite3_reset(st);
    }
    rc = (int)end(j, rc, rc == 1, err, errlen);
  }
  pthread_mutex_unlock(&j->lock);
  return rc;
}

/* ------------------------------------------------------------------- runs */

static int sq_claim(void *impl, const char *run, const char *owner, long long lease_ms, jr_run *now, char *err,
                    size_t errlen) {
  sq_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  int rc = -1;
  if (begin(j, err, errlen) == 0) {
    int found = read_row(j, run, now, err, errlen);
    long long t = jr_now_ms();
    int q = found == 0 ? Q_NEW : found == 1 && jr_claimable(now, owner, t) ? Q_TAKE : -1;
    rc = found < 0 ? -1 : 0;
    if (q >= 0) {
      sqlite3_stmt *st = stmt(j, q);
      sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
      sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
      sqlite3_bind_int64(st, 3, t + lease_ms);
      sqlite3_bind_int64(st, 4, t);
      rc = sqlite3_step(st) == SQLITE_DONE ? 1 : failure(j, -1, err, errlen);
      sqlite3_reset(st);
      if (rc == 1 && read_row(j, run, now, err, errlen) != 1) rc = -1;
    }
    rc = (int)end(j, rc, rc >= 0, err, errlen);
  }
  pthread_mutex_unlock(&j->lock);
  return rc;
}

/* Runs q (one UPDATE) bound by bind: 1 a row changed, 0 none, -1 with err. */
static int update(sq_journal *j, sqlite3_stmt *st, char *err, size_t errlen) {
  int step = sqlite3_step(st);
  sqlite3_reset(st);
  if (step != SQLITE_DONE) return failure(j, -1, err, errlen);
  return sqlite3_changes(j->db) > 0 ? 1 : 0;
}

static int sq_renew(void *impl, const char *run, const char *owner, long long lease_ms, char *err, size_t errlen) {
  sq_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  sqlite3_stmt *st = stmt(j, Q_RENEW);
  sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, jr_now_ms() + lease_ms);
  int rc = update(j, st, err, errlen);
  pthread_mutex_unlock(&j->lock);
  return rc;
}

static int sq_set(void *impl, const char *run, const char *owner, jr_state state, const char *step, char *err,
                  size_t errlen) {
  sq_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  sqlite3_stmt *st = stmt(j, Q_SET);
  sqlite3_bind_text(st, sqlite3_bind_parameter_index(st, ":run"), run, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, sqlite3_bind_parameter_index(st, ":owner"), owner, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, sqlite3_bind_parameter_index(st, ":state"), jr_state_word(state), -1, SQLITE_STATIC);
  if (step) sqlite3_bind_text(st, sqlite3_bind_parameter_index(st, ":step"), step, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, sqlite3_bind_parameter_index(st, ":now"), jr_now_ms());
  int rc = update(j, st, err, errlen);
  pthread_mutex_unlock(&j->lock);
  return rc;
}

static int sq_get(void *impl, const char *run, jr_run *out, char *err, size_t errlen) {
  sq_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  int rc = read_row(j, run, out, err, errlen);
  pthread_mutex_unlock(&j->lock);
  return rc;
}

static int sq_list(void *impl, int (*each)(void *arg, const jr_run *r), void *arg, char *err, size_t errlen) {
  sq_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  sqlite3_stmt *st = stmt(j, Q_LIST);
  long long t = jr_now_ms();
  int step, rc = 0;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    jr_run r;
    row_of(st, &r, t);
    if (each(arg, &r) != 0) break;
  }
  if (step != SQLITE_DONE && step != SQLITE_ROW) rc = failure(j, -1, err, errlen);
  sqlite3_reset(st);
  pthread_mutex_unlock(&j->lock);
  return rc;
}

static long long sq_prune(void *impl, long long before_ms, char *err, size_t errlen) {
  sq_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  long long n = -1;
  if (begin(j, err, errlen) == 0) {
    long long t = jr_now_ms();
    sqlite3_stmt *st = stmt(j, Q_PRUNE_RECORDS);
    sqlite3_bind_int64(st, 1, before_ms);
    sqlite3_bind_int64(st, 2, t);
    if (update(j, st, err, errlen) >= 0) {
      st = stmt(j, Q_PRUNE_RUNS);
      sqlite3_bind_int64(st, 1, before_ms);
      sqlite3_bind_int64(st, 2, t);
      if (update(j, st, err, errlen) >= 0) n = sqlite3_changes(j->db);
    }
    n = end(j, n, n >= 0, err, errlen);
  }
  pthread_mutex_unlock(&j->lock);
  return n;
}

static long long sq_decide(void *impl, const char *run, const char *body, size_t len, char *err, size_t errlen) {
  sq_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  long long seq = -1;
  if (begin(j, err, errlen) == 0) {
    jr_run r;
    int found = read_row(j, run, &r, err, errlen);
    seq = found < 0 ? -1 : jr_decidable(found ? &r : NULL, run, err, errlen) ? put(j, run, 1, &(jr_record){ "decision", body, len }, 1, NULL, err, errlen) : 0;
    seq = end(j, seq, seq >= 0, err, errlen);
  }
  pthread_mutex_unlock(&j->lock);
  return seq;
}
