/*
 * core/journal: a durable ask's records in SQLite. Appended records read
 * back whole and in order, per run; a record cut or changed (a torn write)
 * ends what is read whole, and so does a gap; a record of a later format
 * is refused naming both; a file of another program or a newer journal
 * version is refused and left as it was; two processes appending to one run
 * number its records with no gap. Everything happens in a mkdtemp directory
 * that is removed at the end.
 */
#define _DEFAULT_SOURCE

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"
#include "journal.h"

static char dir[256];

static const char *path_of(const char *name) {
  static char buf[4][512];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

/* Runs one statement on the file behind the journal's back. */
static int poke(const char *path, const char *sql) {
  sqlite3 *db;
  if (sqlite3_open(path, &db) != SQLITE_OK) return -1;
  int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
  sqlite3_close(db);
  return rc == SQLITE_OK ? 0 : -1;
}

typedef struct seen {
  int n;
  char kinds[8][16];
  char bodies[8][64];
} seen;

static int collect(void *arg, long long seq, const char *kind, const char *body, size_t len) {
  seen *s = arg;
  if (s->n < 8 && seq == s->n + 1) {
    snprintf(s->kinds[s->n], sizeof s->kinds[0], "%s", kind);
    snprintf(s->bodies[s->n], sizeof s->bodies[0], "%.*s", (int)len, body);
  }
  s->n++;
  return 0;
}

static void test_append_and_read(void) {
  char err[300];
  const char *path = path_of("a.db");
  jr_journal *j = jr_open(&(jr_options){ .path = path, .sync = 0 }, err, sizeof err);
  CT_CHECK(j != NULL, "open: %s", err);
  if (!j) return;
  static const char *const kinds[] = { "ask", "exchange", "tool", "finish" };
  static const char *const bodies[] = { "{\"agent\":\"a\",\"prompt\":\"hi\"}", "{\"turn\":1}", "{\"id\":\"c1\",\"ok\":true}",
                                        "{\"ok\":true,\"answer\":\"x\"}" };
  for (int i = 0; i < 4; i++) {
    long long seq = jr_append(j, "run-1", NULL, kinds[i], bodies[i], strlen(bodies[i]), err, sizeof err);
    CT_CHECK(seq == i + 1, "record %d got seq %lld: %s", i, seq, err);
  }
  CT_CHECK(jr_append(j, "run-2", NULL, "ask", "{}", 2, err, sizeof err) == 1, "another run starts at 1");
  jr_close(j);
  j = jr_open(&(jr_options){ .path = path, .sync = 1 }, err, sizeof err);
  CT_CHECK(j != NULL, "reopen: %s", err);
  if (!j) return;
  seen s = { 0 };
  jr_status st;
  CT_CHECK(jr_read(j, "run-1", collect, &s, &st, err, sizeof err) == 0, "read: %s", err);
  CT_CHECK(st.whole == 4 && st.torn == 0 && s.n == 4, "4 whole records: %lld whole, %lld torn", st.whole, st.torn);
  for (int i = 0; i < 4 && i < s.n; i++) {
    CT_EQ_STR(kinds[i], s.kinds[i]);
    CT_EQ_STR(bodies[i], s.bodies[i]);
  }
  CT_CHECK(jr_read(j, "none", NULL, NULL, &st, err, sizeof err) == 0 && st.whole == 0 && st.torn == 0, "no run");
  CT_CHECK(jr_append(j, "", NULL, "ask", "{}", 2, err, sizeof err) == -1 && strstr(err, "needs a run"), "no run name");
  jr_close(j);
}

static void test_torn(void) {
  char err[300];
  const char *path = path_of("torn.db");
  jr_journal *j = jr_open(&(jr_options){ .path = path, .sync = 0 }, err, sizeof err);
  if (!j) { CT_CHECK(0, "open: %s", err); return; }
  for (int i = 0; i < 5; i++) jr_append(j, "r", NULL, "tool", "{\"ok\":true}", 11, err, sizeof err);
  jr_close(j);
  /* record 3 cut mid-body: 3, 4 and 5 are the torn tail */
  CT_CHECK(poke(path, "UPDATE luma_journal SET body = substr(body, 1, 5) WHERE seq = 3") == 0, "cut");
  j = jr_open(&(jr_options){ .path = path, .sync = 0 }, err, sizeof err);
  if (!j) { CT_CHECK(0, "reopen: %s", err); return; }
  seen s = { 0 };
  jr_status st;
  CT_CHECK(jr_read(j, "r", collect, &s, &st, err, sizeof err) == 0, "read: %s", err);
  CT_CHECK(st.whole == 2 && st.torn == 3 && s.n == 2, "a cut record: %lld whole, %lld torn", st.whole, st.torn);
  /* a record whose digest was written but not its body (or the reverse) */
  CT_CHECK(poke(path, "UPDATE luma_journal SET body = '{\"ok\":false}' WHERE seq = 2") == 0, "change");
  CT_CHECK(jr_read(j, "r", NULL, NULL, &st, err, sizeof err) == 0 && st.whole == 1 && st.torn == 4,
           "a changed record: %lld whole, %lld torn", st.whole, st.torn);
  /* a gap: record 1 lost */
  CT_CHECK(poke(path, "DELETE FROM luma_journal WHERE seq = 1") == 0, "delete");
  CT_CHECK(jr_read(j, "r", NULL, NULL, &st, err, sizeof err) == 0 && st.whole == 0 && st.torn == 4,
           "a gap: %lld whole, %lld torn", st.whole, st.torn);
  jr_close(j);
}

static void test_versions(void) {
  char err[300];
  const char *path = path_of("v.db");
  jr_journal *j = jr_open(&(jr_options){ .path = path, .sync = 0 }, err, sizeof err);
  if (!j) { CT_CHECK(0, "open: %s", err); return; }
  jr_append(j, "r", NULL, "ask", "{}", 2, err, sizeof err);
  jr_close(j);
  CT_CHECK(poke(path, "INSERT INTO luma_journal VALUES ('r', 2, 2, 'exchange', '{}', 'x')") == 0, "a v2 record");
  j = jr_open(&(jr_options){ .path = path, .sync = 0 }, err, sizeof err);
  if (!j) { CT_CHECK(0, "reopen: %s", err); return; }
  jr_status st;
  err[0] = '\0';
  CT_CHECK(jr_read(j, "r", NULL, NULL, &st, err, sizeof err) == -1 &&
           strstr(err, "record 2 of run 'r' is of format 2; this luma reads format 1 and older"),
           "a later format is refused: %s", err);
  jr_close(j);
  CT_CHECK(poke(path, "UPDATE luma_meta SET value = '7' WHERE name = 'version'") == 0, "version 7");
  CT_CHECK(jr_open(&(jr_options){ .path = path, .sync = 0 }, err, sizeof err) == NULL && strstr(err, "its journal version is 7; this luma reads version 1"),
           "a later journal version is refused: %s", err);
  const char *other = path_of("other.db");
  CT_CHECK(poke(other, "CREATE TABLE t (x); INSERT INTO t VALUES (1)") == 0, "another program's database");
  CT_CHECK(jr_open(&(jr_options){ .path = other, .sync = 0 }, err, sizeof err) == NULL && strstr(err, "a SQLite database of something else"), "another's: %s", err);
  CT_CHECK(poke(other, "SELECT x FROM t") == 0, "left as it was");
  FILE *f = fopen(path_of("text.db"), "w");
  if (f) { fputs("not a database, but long enough to be read as one's header.....................\n", f); fclose(f); }
  CT_CHECK(jr_open(&(jr_options){ .path = path_of("text.db"), .sync = 0 }, err, sizeof err) == NULL && strstr(err, "not a SQLite database"),
           "a text file: %s", err);
}

/* Two processes append 100 records each to one run: 200, numbered 1..200. */
static void test_two_writers(void) {
  char err[300];
  const char *path = path_of("two.db");
  jr_journal *j = jr_open(&(jr_options){ .path = path, .sync = 0 }, err, sizeof err);
  if (!j) { CT_CHECK(0, "open: %s", err); return; }
  jr_close(j);
  pid_t kids[2];
  for (int k = 0; k < 2; k++) {
    kids[k] = fork();
    if (kids[k] == 0) {
      jr_journal *mine = jr_open(&(jr_options){ .path = path, .sync = 0 }, NULL, 0);
      int bad = !mine;
      for (int i = 0; i < 100 && mine; i++) bad += jr_append(mine, "shared", NULL, "tool", "{}", 2, NULL, 0) < 1;
      jr_close(mine);
      _exit(bad ? 1 : 0);
    }
  }
  int ok = 1;
  for (int k = 0; k < 2; k++) {
    int status;
    waitpid(kids[k], &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  CT_CHECK(ok, "both writers appended every record");
  j = jr_open(&(jr_options){ .path = path, .sync = 0 }, err, sizeof err);
  if (!j) { CT_CHECK(0, "reopen: %s", err); return; }
  jr_status st;
  CT_CHECK(jr_read(j, "shared", NULL, NULL, &st, err, sizeof err) == 0 && st.whole == 200 && st.torn == 0,
           "200 records with no gap: %lld whole, %lld torn", st.whole, st.torn);
  jr_close(j);
}

int main(void) {
  const char *base = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/luma-journal-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_append_and_read();
  test_torn();
  test_versions();
  test_two_writers();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return ct_finish("journal");
}
