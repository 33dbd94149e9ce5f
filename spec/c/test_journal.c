/*
 * core/journal: a durable ask's records and runs. The records in SQLite: Appended records read
 * back whole and in order, per run; a record cut or changed (a torn write)
 * ends what is read whole, and so does a gap; a record of a later format
 * is refused naming both; a file of another program or a newer journal
 * version is refused and left as it was; two processes appending to one run
 * number its records with no gap; a version-1 file is upgraded with its
 * records kept. The runs, the same cases on every back end: of processes
 * racing to claim a run one wins; a run whose lease ended is taken over, and
 * its former owner is fenced off (append, cut, renew, set); a decision is
 * recorded only while the run awaits approval; the list is the most
 * recently changed first, and prune deletes what ended or was abandoned.
 * Everything happens in a mkdtemp directory that is removed at the end.
 */
#define _DEFAULT_SOURCE

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
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
    long long seq = jr_append(j, "run-1", NULL, kinds[i], bodies[i], strlen(bodies[i]), NULL, err, sizeof err);
    CT_CHECK(seq == i + 1, "record %d got seq %lld: %s", i, seq, err);
  }
  CT_CHECK(jr_append(j, "run-2", NULL, "ask", "{}", 2, NULL, err, sizeof err) == 1, "another run starts at 1");
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
  CT_CHECK(jr_append(j, "", NULL, "ask", "{}", 2, NULL, err, sizeof err) == -1 && strstr(err, "needs a run"), "no run name");
  jr_close(j);
}

static void test_torn(void) {
  char err[300];
  const char *path = path_of("torn.db");
  jr_journal *j = jr_open(&(jr_options){ .path = path, .sync = 0 }, err, sizeof err);
  if (!j) { CT_CHECK(0, "open: %s", err); return; }
  for (int i = 0; i < 5; i++) jr_append(j, "r", NULL, "tool", "{\"ok\":true}", 11, NULL, err, sizeof err);
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
  jr_append(j, "r", NULL, "ask", "{}", 2, NULL, err, sizeof err);
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
  CT_CHECK(jr_open(&(jr_options){ .path = path, .sync = 0 }, err, sizeof err) == NULL && strstr(err, "its journal version is 7; this luma reads versions 1 to 3"),
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
      for (int i = 0; i < 100 && mine; i++) bad += jr_append(mine, "shared", NULL, "tool", "{}", 2, NULL, NULL, 0) < 1;
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

/* ------------------------------------------------------------------- runs */

/* A back end for the run cases: each case has a store of its own (a file,
   or a key prefix). */
typedef struct backend {
  const char *name;
  jr_options (*options)(const char *kase);
} backend;

static jr_options sqlite_options(const char *kase) {
  static char buf[8][512];
  static int next;
  char *p = buf[next++ % 8];
  snprintf(p, sizeof buf[0], "%s/runs-%s.db", dir, kase);
  return (jr_options){ .path = p };
}

/* The redis-server of the Redis cases: on a free port of 127.0.0.1, its
   folder in dir, killed at the end. */
static pid_t redis_pid;
static int redis_port;

static jr_options redis_options(const char *kase) {
  static char urls[8][64], prefixes[8][64];
  static int next;
  int i = next++ % 8;
  snprintf(urls[i], sizeof urls[0], "redis://127.0.0.1:%d/0", redis_port);
  snprintf(prefixes[i], sizeof prefixes[0], "t:%s:", kase);
  return (jr_options){ .url = urls[i], .prefix = prefixes[i] };
}

static void sleep_ms(long ms);

static int start_redis(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t al = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &al) != 0)
    return -1;
  redis_port = ntohs(a.sin_port);
  close(fd);
  char rdir[300], port[16], logf[320];
  snprintf(rdir, sizeof rdir, "%s/redis", dir);
  snprintf(port, sizeof port, "%d", redis_port);
  snprintf(logf, sizeof logf, "%s/log", rdir);
  mkdir(rdir, 0700);
  redis_pid = fork();
  if (redis_pid == 0) {
    unsetenv("LD_PRELOAD");   /* (an ASan run's) */
    execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", rdir, "--save", "",
           "--appendonly", "no", "--daemonize", "no", "--logfile", logf, (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 200; i++) {
    redisContext *c = redisConnect("127.0.0.1", redis_port);
    redisReply *r = c && !c->err ? redisCommand(c, "PING") : NULL;
    int up = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    if (up) return 0;
    sleep_ms(25);
  }
  return -1;
}

static void stop_redis(void) {
  if (redis_pid <= 0) return;
  kill(redis_pid, SIGKILL);
  waitpid(redis_pid, NULL, 0);
}

/* A Redis journal of another version, or another format, is refused. */
static void test_redis_meta(void) {
  char err[300];
  jr_options o = redis_options("meta");
  jr_journal *j = jr_open(&o, err, sizeof err);
  CT_CHECK(j != NULL, "redis: open: %s", err);
  jr_close(j);
  redisContext *c = redisConnect("127.0.0.1", redis_port);
  redisReply *r = c && !c->err ? redisCommand(c, "HSET t:meta:journal:meta version 9") : NULL;
  if (r) freeReplyObject(r);
  CT_CHECK(jr_open(&o, err, sizeof err) == NULL &&
           strstr(err, "the journal under prefix 't:meta:' is version 9; this luma reads version 1"),
           "redis: a later version is refused: %s", err);
  r = c && !c->err ? redisCommand(c, "HSET t:meta:journal:meta format other version 1") : NULL;
  if (r) freeReplyObject(r);
  CT_CHECK(jr_open(&o, err, sizeof err) == NULL && strstr(err, "is not a luma journal's"),
           "redis: another format is refused: %s", err);
  if (c) redisFree(c);
  o = redis_options("torn");
  j = jr_open(&o, err, sizeof err);
  if (!j) { CT_CHECK(0, "redis: open: %s", err); return; }
  for (int i = 0; i < 4; i++) jr_append(j, "r:1 *", NULL, "tool", "{\"ok\":true}", 11, NULL, err, sizeof err);
  c = redisConnect("127.0.0.1", redis_port);
  r = c && !c->err ? redisCommand(c, "LSET t:torn:journal:run:r%%3A1%%20%%2A:records 2 %s", "1|x|tool|{}") : NULL;
  CT_CHECK(r && r->type == REDIS_REPLY_STATUS, "redis: the key layout is printable and documented");
  if (r) freeReplyObject(r);
  if (c) redisFree(c);
  jr_status st;
  CT_CHECK(jr_read(j, "r:1 *", NULL, NULL, &st, err, sizeof err) == 0 && st.whole == 2 && st.torn == 2,
           "redis: a changed record ends what is whole: %lld whole, %lld torn", st.whole, st.torn);
  jr_close(j);
}

static void sleep_ms(long ms) {
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) != 0) {}
}

static jr_journal *open_case(const backend *b, const char *kase) {
  char err[300];
  jr_options o = b->options(kase);
  jr_journal *j = jr_open(&o, err, sizeof err);
  CT_CHECK(j != NULL, "%s: open for %s: %s", b->name, kase, err);
  return j;
}

/* Eight processes claim one run at once: one wins, seven see its owner. */
static void test_claim_race(const backend *b) {
  enum { N = 8 };
  int gate[2];
  if (pipe(gate) != 0) { CT_CHECK(0, "pipe"); return; }
  pid_t kids[N];
  for (int k = 0; k < N; k++) {
    kids[k] = fork();
    if (kids[k] == 0) {
      close(gate[1]);
      jr_options o = b->options("race");
      char owner[16], c, err[300] = "";
      jr_journal *mine = jr_open(&o, err, sizeof err);
      if (!mine) fprintf(stderr, "%s: child %d: %s\n", b->name, k, err);
      snprintf(owner, sizeof owner, "p%d", k);
      if (read(gate[0], &c, 1) < 0 || !mine) _exit(3);   /* 0: the gate closed */
      jr_run now;
      int rc = jr_claim(mine, "race", owner, 10000, &now, err, sizeof err);
      if (rc < 0) fprintf(stderr, "%s: child %d: %s\n", b->name, k, err);
      jr_close(mine);
      _exit(rc == 1 ? 0 : rc == 0 && now.owner[0] == 'p' && strcmp(now.owner, owner) != 0 ? 1 : 2);
    }
  }
  close(gate[0]);
  sleep_ms(200);   /* every child opened the store and waits at the gate */
  close(gate[1]);
  int won = 0, lost = 0;
  for (int k = 0; k < N; k++) {
    int status;
    waitpid(kids[k], &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) won++;
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 1) lost++;
  }
  CT_CHECK(won == 1 && lost == N - 1, "%s: one claim wins: %d won, %d lost", b->name, won, lost);
  jr_journal *j = open_case(b, "race");
  if (!j) return;
  jr_run r;
  char err[300];
  CT_CHECK(jr_get(j, "race", &r, err, sizeof err) == 1 && r.state == JR_RUNNING && !r.abandoned && r.owner[0] == 'p',
           "%s: the winner holds it: %s", b->name, err);
  jr_close(j);
}

/* A lease that ended: the run is abandoned, another owner takes it over,
   and the former owner can no longer write. */
static void test_takeover(const backend *b) {
  jr_journal *j = open_case(b, "takeover");
  if (!j) return;
  char err[300] = "";
  jr_run r;
  CT_CHECK(jr_claim(j, "t", "A", 150, &r, err, sizeof err) == 1 && strcmp(r.owner, "A") == 0 && r.state == JR_RUNNING,
           "%s: A claims a new run: %s", b->name, err);
  CT_CHECK(jr_append(j, "t", "A", "ask", "{}", 2, NULL, err, sizeof err) == 1, "%s: A appends: %s", b->name, err);
  CT_CHECK(jr_claim(j, "t", "B", 150, &r, err, sizeof err) == 0 && strcmp(r.owner, "A") == 0,
           "%s: B cannot while A's lease lasts (holder %s)", b->name, r.owner);
  CT_CHECK(jr_get(j, "t", &r, err, sizeof err) == 1 && !r.abandoned && r.records == 1 &&
           strcmp(jr_state_name(&r), "running") == 0, "%s: running, 1 record: %s", b->name, err);
  sleep_ms(250);
  CT_CHECK(jr_get(j, "t", &r, err, sizeof err) == 1 && r.abandoned && strcmp(jr_state_name(&r), "abandoned") == 0,
           "%s: abandoned once the lease ended", b->name);
  CT_CHECK(jr_claim(j, "t", "B", 10000, &r, err, sizeof err) == 1 && strcmp(r.owner, "B") == 0 && !r.abandoned &&
           r.records == 1, "%s: B takes it over: %s", b->name, err);
  err[0] = '\0';
  CT_CHECK(jr_append(j, "t", "A", "tool", "{}", 2, NULL, err, sizeof err) == JR_LOST && strstr(err, "held by 'B'"),
           "%s: A is fenced off: %s", b->name, err);
  CT_CHECK(jr_cut(j, "t", "A", 0, err, sizeof err) == JR_LOST, "%s: A cannot cut", b->name);
  CT_CHECK(jr_renew(j, "t", "A", 10000, err, sizeof err) == 0, "%s: A's renewal is lost", b->name);
  CT_CHECK(jr_set(j, "t", "A", JR_FAILED, "x", err, sizeof err) == 0, "%s: A cannot set", b->name);
  CT_CHECK(jr_append(j, "t", NULL, "tool", "{}", 2, NULL, err, sizeof err) == JR_LOST, "%s: no owner is fenced off too",
           b->name);
  CT_CHECK(jr_append(j, "t", "B", "tool", "{}", 2, "turn 1: request", err, sizeof err) == 2, "%s: B appends: %s",
           b->name, err);
  jr_run stepped;
  CT_CHECK(jr_get(j, "t", &stepped, err, sizeof err) == 1 && strcmp(stepped.step, "turn 1: request") == 0,
           "%s: an append sets the run's step with it: '%s'", b->name, stepped.step);
  CT_CHECK(jr_append(j, "t", "B", "tool", "{}", 2, NULL, err, sizeof err) == 3 &&
           jr_get(j, "t", &stepped, err, sizeof err) == 1 && strcmp(stepped.step, "turn 1: request") == 0,
           "%s: and one without a step leaves it: '%s'", b->name, stepped.step);
  CT_CHECK(jr_append(j, "none", "B", "ask", "{}", 2, NULL, err, sizeof err) == JR_LOST && strstr(err, "never claimed"),
           "%s: an owner appends only to a run it claimed: %s", b->name, err);
  long long until = 0;
  if (jr_get(j, "t", &r, err, sizeof err) == 1) until = r.lease_until_ms;
  sleep_ms(5);
  CT_CHECK(jr_renew(j, "t", "B", 20000, err, sizeof err) == 1 && jr_get(j, "t", &r, err, sizeof err) == 1 &&
           r.lease_until_ms > until, "%s: B renews", b->name);
  CT_CHECK(jr_claim(j, "t", "B", 10000, &r, err, sizeof err) == 1, "%s: its owner claims it again", b->name);
  CT_CHECK(jr_set(j, "t", "B", JR_RUNNING, "turn 2", err, sizeof err) == 1 && jr_get(j, "t", &r, err, sizeof err) == 1 &&
           strcmp(r.step, "turn 2") == 0 && r.lease_until_ms > 0, "%s: a step", b->name);
  jr_close(j);
}

/* A decision only while the run awaits approval; then any process claims it. */
static void test_decide(const backend *b) {
  jr_journal *j = open_case(b, "decide");
  if (!j) return;
  char err[300] = "";
  jr_run r;
  CT_CHECK(jr_decide(j, "d", "{\"id\":\"c1\"}", 11, err, sizeof err) == 0 && strstr(err, "there is no run 'd'"),
           "%s: no run: %s", b->name, err);
  jr_claim(j, "d", "A", 10000, &r, err, sizeof err);
  jr_append(j, "d", "A", "ask", "{}", 2, NULL, err, sizeof err);
  CT_CHECK(jr_decide(j, "d", "{\"id\":\"c1\"}", 11, err, sizeof err) == 0 &&
           strstr(err, "run 'd' is running, not awaiting approval"), "%s: running: %s", b->name, err);
  jr_append(j, "d", "A", "approval", "{\"id\":\"c1\"}", 11, NULL, err, sizeof err);
  CT_CHECK(jr_set(j, "d", "A", JR_AWAITING_APPROVAL, "approve c1", err, sizeof err) == 1, "%s: set: %s", b->name, err);
  CT_CHECK(jr_get(j, "d", &r, err, sizeof err) == 1 && r.state == JR_AWAITING_APPROVAL && !r.abandoned &&
           strcmp(r.step, "approve c1") == 0 && strcmp(jr_state_name(&r), "awaiting_approval") == 0,
           "%s: it awaits approval", b->name);
  jr_journal *other = open_case(b, "decide");
  if (other) {
    CT_CHECK(jr_decide(other, "d", "{\"id\":\"c1\",\"approved\":true}", 27, err, sizeof err) == 3,
             "%s: another process decides: %s", b->name, err);
    seen s = { 0 };
    jr_status st;
    CT_CHECK(jr_read(other, "d", collect, &s, &st, err, sizeof err) == 0 && st.whole == 3 && s.n == 3, "%s: read",
             b->name);
    if (s.n == 3) CT_EQ_STR("decision", s.kinds[2]);
    CT_CHECK(jr_claim(other, "d", "B", 10000, &r, err, sizeof err) == 1 && strcmp(r.owner, "B") == 0 &&
             r.state == JR_RUNNING, "%s: any process claims a run that awaits approval: %s", b->name, err);
    CT_CHECK(jr_set(other, "d", "B", JR_COMPLETED, NULL, err, sizeof err) == 1, "%s: completed", b->name);
    CT_CHECK(jr_claim(j, "d", "C", 10000, &r, err, sizeof err) == 0 && r.state == JR_COMPLETED &&
             strcmp(r.step, "approve c1") == 0, "%s: an ended run is not claimed (step kept)", b->name);
    CT_CHECK(jr_decide(j, "d", "{}", 2, err, sizeof err) == 0 && strstr(err, "is completed"), "%s: %s", b->name, err);
    jr_close(other);
  }
  jr_close(j);
}

typedef struct listed {
  int n;
  char ids[8][96];
} listed;

static int list_one(void *arg, const jr_run *r) {
  listed *l = arg;
  if (l->n < 8) snprintf(l->ids[l->n], sizeof l->ids[0], "%s:%s", r->id, jr_state_name(r));
  l->n++;
  return 0;
}

/* The list, the most recently changed first; prune deletes what ended or
   was abandoned before the time it is given, not what runs or waits. */
static void test_list_prune(const backend *b) {
  jr_journal *j = open_case(b, "prune");
  if (!j) return;
  char err[300] = "";
  jr_run r;
  static const char *const ids[] = { "done", "failed", "live", "dead", "wait" };
  for (int i = 0; i < 5; i++) {
    jr_claim(j, ids[i], "A", i == 3 ? 1 : 60000, &r, err, sizeof err);
    jr_append(j, ids[i], "A", "ask", "{}", 2, NULL, err, sizeof err);
    if (i == 0) jr_set(j, ids[i], "A", JR_COMPLETED, "end", err, sizeof err);
    if (i == 1) jr_set(j, ids[i], "A", JR_FAILED, "end", err, sizeof err);
    if (i == 4) jr_set(j, ids[i], "A", JR_AWAITING_APPROVAL, "approve", err, sizeof err);
    sleep_ms(3);
  }
  listed l = { 0 };
  CT_CHECK(jr_list(j, list_one, &l, err, sizeof err) == 0 && l.n == 5, "%s: 5 runs listed: %d %s", b->name, l.n, err);
  if (l.n == 5) {
    CT_EQ_STR("wait:awaiting_approval", l.ids[0]);
    CT_EQ_STR("dead:abandoned", l.ids[1]);
    CT_EQ_STR("live:running", l.ids[2]);
    CT_EQ_STR("failed:failed", l.ids[3]);
    CT_EQ_STR("done:completed", l.ids[4]);
  }
  CT_CHECK(jr_prune(j, jr_get(j, "done", &r, err, sizeof err) == 1 ? r.updated_ms : 0, err, sizeof err) == 0,
           "%s: nothing changed before the first", b->name);
  CT_CHECK(jr_prune(j, r.updated_ms + 3600000, err, sizeof err) == 3, "%s: 3 pruned: %s", b->name, err);
  l.n = 0;
  CT_CHECK(jr_list(j, list_one, &l, err, sizeof err) == 0 && l.n == 2, "%s: 2 left: %d", b->name, l.n);
  if (l.n == 2) {
    CT_EQ_STR("wait:awaiting_approval", l.ids[0]);
    CT_EQ_STR("live:running", l.ids[1]);
  }
  jr_status st;
  CT_CHECK(jr_read(j, "done", NULL, NULL, &st, err, sizeof err) == 0 && st.whole == 0 && st.torn == 0,
           "%s: a pruned run's records went with it", b->name);
  CT_CHECK(jr_get(j, "dead", &r, err, sizeof err) == 0, "%s: no such run", b->name);
  jr_close(j);
}

/* A torn tail cut by the run's owner, and by no one else. */
static void test_cut(const backend *b) {
  jr_journal *j = open_case(b, "cut");
  if (!j) return;
  char err[300] = "";
  jr_run r;
  jr_claim(j, "c", "A", 60000, &r, err, sizeof err);
  for (int i = 0; i < 5; i++) jr_append(j, "c", "A", "tool", "{}", 2, NULL, err, sizeof err);
  CT_CHECK(jr_cut(j, "c", "B", 3, err, sizeof err) == JR_LOST && strstr(err, "held by 'A'"), "%s: B: %s", b->name, err);
  CT_CHECK(jr_cut(j, "c", "A", 3, err, sizeof err) == 1, "%s: A cuts: %s", b->name, err);
  jr_status st;
  CT_CHECK(jr_read(j, "c", NULL, NULL, &st, err, sizeof err) == 0 && st.whole == 3 && st.torn == 0, "%s: 3 left",
           b->name);
  CT_CHECK(jr_append(j, "c", "A", "tool", "{}", 2, NULL, err, sizeof err) == 4, "%s: the next is 4: %s", b->name, err);
  CT_CHECK(jr_get(j, "c", &r, err, sizeof err) == 1 && r.records == 4, "%s: 4 records", b->name);
  jr_close(j);
}

/* Two handles appending to one run in turn: each numbers its record after
   the other's (Redis keeps its next seq: a stale one is numbered again). */
static void test_two_handles(const backend *b) {
  jr_journal *x = open_case(b, "handles"), *y = open_case(b, "handles");
  char err[300] = "";
  for (int i = 0; x && y && i < 6; i++) {
    long long seq = jr_append(i % 3 == 2 ? y : x, "h", NULL, "tool", "{}", 2, NULL, err, sizeof err);
    CT_CHECK(seq == i + 1, "%s: append %d got %lld: %s", b->name, i + 1, seq, err);
  }
  jr_status st;
  if (x) CT_CHECK(jr_read(x, "h", NULL, NULL, &st, err, sizeof err) == 0 && st.whole == 6 && st.torn == 0,
                  "%s: 6 whole: %lld, %lld", b->name, st.whole, st.torn);
  jr_close(x);
  jr_close(y);
}

/* Records appended together are numbered in order and read whole; a batch
   of a lost owner, or with a record that has no kind, keeps none. */
static void test_batch(const backend *b) {
  jr_journal *j = open_case(b, "batch");
  if (!j) return;
  char err[300] = "";
  jr_run r;
  CT_CHECK(jr_claim(j, "b", "A", 60000, &r, err, sizeof err) == 1, "%s: claimed: %s", b->name, err);
  CT_CHECK(jr_append(j, "b", "A", "ask", "{}", 2, NULL, err, sizeof err) == 1, "%s: the ask: %s", b->name, err);
  jr_record three[] = { { "tool", "{\"i\":1}", 7 }, { "tool", "{\"i\":2}", 7 }, { "tool", "{\"i\":3}", 7 } };
  CT_CHECK(jr_append_batch(j, "b", "A", three, 3, "turn 2: request", err, sizeof err) == 4,
           "%s: three together are 2 to 4: %s", b->name, err);
  seen s = { 0 };
  jr_status st;
  CT_CHECK(jr_read(j, "b", collect, &s, &st, err, sizeof err) == 0 && st.whole == 4 && st.torn == 0 && s.n == 4 &&
           strcmp(s.bodies[1], "{\"i\":1}") == 0 && strcmp(s.bodies[3], "{\"i\":3}") == 0,
           "%s: read whole, in order: %lld whole", b->name, st.whole);
  CT_CHECK(jr_get(j, "b", &r, err, sizeof err) == 1 && strcmp(r.step, "turn 2: request") == 0 && r.records == 4,
           "%s: the step set with them: '%s'", b->name, r.step);
  jr_record bad[] = { { "tool", "{}", 2 }, { "", "{}", 2 } };
  CT_CHECK(jr_append_batch(j, "b", "A", bad, 2, NULL, err, sizeof err) == -1, "%s: a record without a kind", b->name);
  CT_CHECK(jr_append_batch(j, "b", "A", three, 0, NULL, err, sizeof err) == -1, "%s: no records", b->name);
  CT_CHECK(jr_claim(j, "b", "B", 60000, &r, err, sizeof err) == 0, "%s: B does not take a live run", b->name);
  CT_CHECK(jr_set(j, "b", "A", JR_AWAITING_APPROVAL, NULL, err, sizeof err) == 1 &&
           jr_claim(j, "b", "B", 60000, &r, err, sizeof err) == 1, "%s: B takes it: %s", b->name, err);
  CT_CHECK(jr_append_batch(j, "b", "A", three, 3, NULL, err, sizeof err) == JR_LOST, "%s: A's batch is refused",
           b->name);
  CT_CHECK(jr_read(j, "b", NULL, NULL, &st, err, sizeof err) == 0 && st.whole == 4 && st.torn == 0,
           "%s: none of them kept: %lld", b->name, st.whole);
  jr_close(j);
}

/* Batches as large as a turn may end together: 50 records, then 10,000
   (a Redis script takes them as arguments, beyond what its stack and
   Lua's unpack hold at once), each kept whole and in order. */
static void test_big_batch(const backend *b) {
  jr_journal *j = open_case(b, "bigbatch");
  if (!j) return;
  char err[300] = "";
  jr_run r;
  CT_CHECK(jr_claim(j, "big", "A", 60000, &r, err, sizeof err) == 1, "%s: claimed: %s", b->name, err);
  enum { MANY = 10000 };
  static char bodies[MANY][24];
  jr_record *recs = calloc(MANY, sizeof *recs);
  if (!recs) { jr_close(j); return; }
  for (int i = 0; i < MANY; i++) {
    int len = snprintf(bodies[i], sizeof bodies[i], "{\"i\":%d}", i + 1);
    recs[i] = (jr_record){ "tool", bodies[i], (size_t)len };
  }
  long long got = jr_append_batch(j, "big", "A", recs, 50, NULL, err, sizeof err);
  CT_CHECK(got == 50, "%s: 50 together are 1 to 50: %lld %s", b->name, got, err);
  got = jr_append_batch(j, "big", "A", recs + 50, MANY - 50, NULL, err, sizeof err);
  CT_CHECK(got == MANY, "%s: %d together are 51 to %d: %lld %s", b->name, MANY - 50, MANY, got, err);
  seen s = { 0 };
  jr_status st;
  CT_CHECK(jr_read(j, "big", collect, &s, &st, err, sizeof err) == 0 && st.whole == MANY && st.torn == 0 &&
           s.n == MANY && strcmp(s.bodies[7], "{\"i\":8}") == 0,
           "%s: read whole, in order: %lld whole, %d read: %s", b->name, st.whole, s.n, err);
  free(recs);
  jr_close(j);
}

static void test_runs(const backend *b) {
  test_two_handles(b);
  test_claim_race(b);
  test_takeover(b);
  test_decide(b);
  test_list_prune(b);
  test_cut(b);
  test_batch(b);
  test_big_batch(b);
}

/* One text the file at path answers to sql ("" for none). */
static void ask_file(const char *path, const char *sql, char *out, size_t cap) {
  sqlite3 *db;
  sqlite3_stmt *q = NULL;
  out[0] = '\0';
  if (sqlite3_open(path, &db) == SQLITE_OK && sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK &&
      sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0))
    snprintf(out, cap, "%s", (const char *)sqlite3_column_text(q, 0));
  sqlite3_finalize(q);
  sqlite3_close(db);
}

/* The file at path is a journal of this luma's tables: version 3, its
   records' table with its rowid (records of a kilobyte stay on their
   pages), no index on the runs' updated. */
static void check_current(const char *path, const char *what) {
  char out[600];
  ask_file(path, "SELECT value FROM luma_meta WHERE name = 'version'", out, sizeof out);
  CT_CHECK(strcmp(out, "3") == 0, "%s: its version is 3 now: '%s'", what, out);
  ask_file(path, "SELECT sql FROM sqlite_master WHERE name = 'luma_journal'", out, sizeof out);
  CT_CHECK(strstr(out, "PRIMARY KEY (run, seq)") != NULL && strstr(out, "WITHOUT ROWID") == NULL,
           "%s: its records' table keeps its rowid: %s", what, out);
  ask_file(path, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'luma_runs_updated'", out, sizeof out);
  CT_CHECK(strcmp(out, "0") == 0, "%s: it has no index on the runs' updated: %s", what, out);
}

/* A version-1 file (no luma_runs) is upgraded in place, its records kept. */
static void test_upgrade(void) {
  char err[300];
  const char *path = path_of("v1.db");
  jr_journal *j = jr_open(&(jr_options){ .path = path }, err, sizeof err);
  if (!j) { CT_CHECK(0, "open: %s", err); return; }
  check_current(path, "a new file");
  jr_append(j, "old", NULL, "ask", "{}", 2, NULL, err, sizeof err);
  jr_close(j);
  CT_CHECK(poke(path, "DROP TABLE luma_runs; UPDATE luma_meta SET value = '1' WHERE name = 'version'") == 0, "v1");
  j = jr_open(&(jr_options){ .path = path }, err, sizeof err);
  CT_CHECK(j != NULL, "a version-1 file opens: %s", err);
  if (!j) return;
  jr_status st;
  CT_CHECK(jr_read(j, "old", NULL, NULL, &st, err, sizeof err) == 0 && st.whole == 1, "its record is read");
  jr_run r;
  CT_CHECK(jr_claim(j, "old", "A", 1000, &r, err, sizeof err) == 1 && r.records == 1, "and claimed: %s", err);
  CT_CHECK(jr_append(j, "old", "A", "tool", "{}", 2, NULL, err, sizeof err) == 2, "and appended to: %s", err);
  jr_close(j);
  check_current(path, "a version-1 file");
}

/* A version-2 file (an index on the runs' updated) is upgraded in place:
   its records kept whole, its runs too. */
static void test_upgrade_v2(void) {
  char err[300];
  const char *path = path_of("v2.db");
  jr_journal *j = jr_open(&(jr_options){ .path = path }, err, sizeof err);
  if (!j) { CT_CHECK(0, "open: %s", err); return; }
  jr_run r;
  jr_claim(j, "two", "A", 60000, &r, err, sizeof err);
  jr_append(j, "two", "A", "ask", "{\"prompt\":\"p\"}", 14, "turn 1: request", err, sizeof err);
  jr_append(j, "two", "A", "exchange", "{}", 2, NULL, err, sizeof err);
  jr_close(j);
  CT_CHECK(poke(path, "CREATE INDEX luma_runs_updated ON luma_runs (updated);"
                      "UPDATE luma_meta SET value = '2' WHERE name = 'version'") == 0, "v2");
  char out[600];
  ask_file(path, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'luma_runs_updated'", out, sizeof out);
  CT_CHECK(strcmp(out, "1") == 0, "the version-2 file has its index: %s", out);
  j = jr_open(&(jr_options){ .path = path }, err, sizeof err);
  CT_CHECK(j != NULL, "a version-2 file opens: %s", err);
  if (!j) return;
  jr_status st;
  CT_CHECK(jr_read(j, "two", NULL, NULL, &st, err, sizeof err) == 0 && st.whole == 2 && st.torn == 0,
           "its records are read whole: %lld, %lld torn", st.whole, st.torn);
  CT_CHECK(jr_get(j, "two", &r, err, sizeof err) == 1 && r.records == 2 && strcmp(r.owner, "A") == 0 &&
           strcmp(r.step, "turn 1: request") == 0, "its run is kept: %s", err);
  jr_record two[] = { { "tool", "{}", 2 }, { "tool", "{\"x\":1}", 7 } };
  CT_CHECK(jr_append_batch(j, "two", "A", two, 2, NULL, err, sizeof err) == 4, "and appended to: %s", err);
  jr_close(j);
  check_current(path, "a version-2 file");
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
  test_upgrade();
  test_upgrade_v2();
  static const backend sqlite = { "sqlite", sqlite_options };
  test_runs(&sqlite);
  if (start_redis() != 0) {
    CT_CHECK(0, "redis-server did not start (on port %d)", redis_port);
  } else {
    static const backend redis = { "redis", redis_options };
    test_redis_meta();
    test_runs(&redis);
  }
  stop_redis();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return ct_finish("journal");
}
