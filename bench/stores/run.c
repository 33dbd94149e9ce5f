/*
 * Reserve-plus-complete per second of the idempotency stores (core/idem.h),
 * with 1k, 10k and 100k records already in the store: a store whose cost is
 * flat in its records keeps its rate; the file store, which rewrites its
 * whole file on every write, does not (it is measured up to 10k, past which
 * it takes minutes). Redis runs on loopback, a redis-server of the bench's
 * own. Medians of 5 rounds. Built and run by `make bench`:
 *   build/bench_stores [TMPDIR]
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "idem.h"

#define ROUNDS 5
#define TARGET_SQLITE 5000.0
#define TARGET_REDIS 10000.0

static int redis_port;   /* a redis-server of the bench's own, or 0 */

static const char HASH[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* one reserve and one complete of a new key; 0 on success */
static int write_one(id_store *s, long long n) {
  char key[32], err[256];
  char *stored = NULL;
  int len = snprintf(key, sizeof key, "key-%lld", n);
  if (id_begin(s, "bench", key, (size_t)len, HASH, wall_ms(), &stored, NULL, err, sizeof err) != ID_RUN) {
    fprintf(stderr, "begin: %s\n", err);
    free(stored);
    return -1;
  }
  static const char result[] = "{\"ok\":true,\"total\":42,\"note\":\"a result of a typical size\"}";
  if (id_commit(s, "bench", key, (size_t)len, HASH, result, sizeof result - 1, wall_ms(), 3600000, err, sizeof err) != 0) {
    fprintf(stderr, "commit: %s\n", err);
    return -1;
  }
  return 0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static id_store *open_store(const char *kind, const char *dir, char *path, size_t cap) {
  char err[300];
  id_store *s = NULL;
  if (strcmp(kind, "memory") == 0) return id_open_memory();
  snprintf(path, cap, "%s/bench-%s.%s", dir, kind, strcmp(kind, "file") == 0 ? "json" : "db");
  if (strcmp(kind, "file") == 0) {
    s = id_open_file(path, NULL, wall_ms(), err, sizeof err);
  } else if (strcmp(kind, "redis") == 0) {
    char url[64], prefix[64];
    static int run;
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/0", redis_port);
    snprintf(prefix, sizeof prefix, "bench%d:", ++run);
    id_redis_options o = { url, NULL, prefix, 60000, 0 };
    path[0] = '\0';
    s = id_open_redis(&o, err, sizeof err);
  } else {
    s = id_open_sqlite(path, NULL, err, sizeof err);
  }
  if (!s) fprintf(stderr, "%s: %s\n", kind, err);
  return s;
}

static void remove_store(const char *path) {
  char p[600];
  if (!path[0]) return;
  const char *suffix[] = { "", ".lock", "-wal", "-shm" };
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s%s", path, suffix[i]);
    unlink(p);
  }
}

/* writes per second with `records` records in the store, median of ROUNDS */
static double rate(const char *kind, const char *dir, long long records, int per_round) {
  char path[512] = "";
  id_store *s = open_store(kind, dir, path, sizeof path);
  if (!s) return -1;
  long long n = 0;
  for (; n < records; n++)
    if (write_one(s, n) != 0) { id_close(s); remove_store(path); return -1; }
  double rates[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    double t0 = now_s();
    for (int i = 0; i < per_round; i++)
      if (write_one(s, n++) != 0) { id_close(s); remove_store(path); return -1; }
    rates[r] = per_round / (now_s() - t0);
  }
  id_close(s);
  remove_store(path);
  qsort(rates, ROUNDS, sizeof rates[0], cmp);
  return rates[ROUNDS / 2];
}

/* redis-server on a free port, its data in dir (no persistence: loopback speed) */
static void start_redis(const char *dir) {
  char cmd[1024];
  redis_port = 20000 + (int)(getpid() % 20000);
  snprintf(cmd, sizeof cmd, "redis-server --port %d --bind 127.0.0.1 --dir '%s' --save '' --appendonly no "
           "--daemonize yes --pidfile '%s/redis.pid' --logfile '%s/redis.log' > /dev/null 2>&1",
           redis_port, dir, dir, dir);
  if (system(cmd) != 0) { redis_port = 0; return; }
  for (int i = 0; i < 100; i++) {
    snprintf(cmd, sizeof cmd, "redis-cli -p %d ping > /dev/null 2>&1", redis_port);
    if (system(cmd) == 0) return;
    struct timespec ts = { 0, 50000000L };
    nanosleep(&ts, NULL);
  }
  redis_port = 0;
}

static void stop_redis(const char *dir) {
  char cmd[600];
  /* and wait until it is gone, before its folder is removed */
  snprintf(cmd, sizeof cmd, "p=$(cat '%s/redis.pid') && kill $p && while kill -0 $p 2>/dev/null; do sleep 0.05; done",
           dir);
  if (redis_port && system(cmd) != 0) fprintf(stderr, "cannot stop redis-server\n");
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  static const long long sizes[] = { 1000, 10000, 100000 };
  static const char *kinds[] = { "memory", "sqlite", "redis", "file" };
  start_redis(dir);
  printf("idempotency stores: reserve+complete per second (median of %d rounds), by records in the store\n", ROUNDS);
  printf("%-8s %12s %12s %12s %10s\n", "store", "1k", "10k", "100k", "100k/1k");
  int failed = 0;
  for (int k = 0; k < 4; k++) {
    double r[3] = { 0, 0, 0 };
    if (strcmp(kinds[k], "redis") == 0 && !redis_port) {
      printf("%-8s (no redis-server)\n", kinds[k]);
      continue;
    }
    for (int i = 0; i < 3; i++) {
      int file = strcmp(kinds[k], "file") == 0;
      if (file && sizes[i] > 10000) { r[i] = -2; continue; }
      r[i] = rate(kinds[k], dir, sizes[i], file ? 20 : 2000);
      if (r[i] < 0) failed = 1;
    }
    printf("%-8s", kinds[k]);
    for (int i = 0; i < 3; i++) {
      if (r[i] == -2) printf(" %12s", "(minutes)");
      else printf(" %12.0f", r[i]);
    }
    if (r[2] > 0) printf(" %10.2f", r[2] / r[0]); else printf(" %10s", "-");
    printf("\n");
    double target = strcmp(kinds[k], "sqlite") == 0 ? TARGET_SQLITE : strcmp(kinds[k], "redis") == 0 ? TARGET_REDIS : 0;
    if (target > 0)
      printf("  %s target: >= %.0f/s at every size: %s\n", kinds[k], target,
             r[0] >= target && r[1] >= target && r[2] >= target ? "met" : "NOT met");
  }
  stop_redis(dir);
  return failed;
}
