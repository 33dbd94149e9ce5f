/*
 * libluma through its C API only (core/luma.h), linked as a host links it:
 * loading, calls, C handlers, methods, polling without blocking, cancelling
 * (from another thread too), callbacks, a destroyed runtime's calls, bad
 * input of every kind, runtimes on several threads, and process-isolated
 * handlers in a host that reaps its children itself.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "luma.h"
#include "ctest.h"

static char dir[512];

static void write_file(const char *name, const char *text) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) { perror(path); exit(2); }
  fputs(text, f);
  fclose(f);
}

static const char *path_of(const char *name) {
  static char path[4][600];
  static int i;
  i = (i + 1) % 4;
  snprintf(path[i], sizeof path[i], "%s/%s", dir, name);
  return path[i];
}

/* Timing checks mean nothing under valgrind, which runs code 20-50 times slower. */
static int under_valgrind(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char line[512];
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, "vgpreload") != NULL;
  fclose(f);
  return found;
}

static void sleep_ms(long long ms) {
  struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
  nanosleep(&ts, NULL);
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char PROGRAM[] =
  "schema Sum { total: int }\n"
  "schema Text { v: string }\n"
  "tool add(a: int, b: int) -> Sum { }\n"
  "tool cadd(a: int, b: int) -> Sum { }\n"
  "tool slow(ms: int) -> Text { timeout: 10000 }\n"
  "tool spin() -> Text { timeout: 10000 }\n"
  "tool brief() -> Text { timeout: 200 }\n"
  "tool hooked() -> Text { }\n"
  "tool secret() -> Text { credential: \"LIBLUMA_TEST_TOKEN\" }\n"
  "tool sock() -> Text { }\n"
  "tool stuck() -> Text { timeout: 300 }\n"
  "tool nap(ms: int) -> Text { timeout: 10000 }\n"
  "agent A {\n"
  "  tools: [add, slow]\n"
  "  fn twice(x: int) -> int {\n"
  "    s = tool add({ a: x, b: x })\n"
  "    t = tool slow({ ms: 50 })\n"
  "    return s.total\n"
  "  }\n"
  "}\n";

/* pure Lua handlers: a module of libluma cannot load C libraries */
static const char TOOLS[] =
  "return {\n"
  "  add = function(i) return { total = i.a + i.b } end,\n"
  "  slow = function(i) local t = os.time() local c = os.clock()\n"
  "    while os.clock() - c < i.ms / 1000 do end return { v = 'slept' } end,\n"
  "  spin = function(i, signal) while not signal.aborted do end return { v = signal.reason } end,\n"
  "  brief = function() while true do end end,\n"
  "  hooked = function() local x = 0 for i = 1, 300000 do x = x + i end\n"
  "    return { v = debug and tostring(debug.gethook() ~= nil) or 'no debug' } end,\n"
  "  secret = function() return { v = 'ok' } end,\n"
  "  nap = function(i, signal) return { v = tostring(signal:sleep(i.ms)) } end,\n"
  "  sock = function() local ok, e = pcall(require, 'socket') return { v = tostring(e) } end,\n"
  /* one rehash of colliding integer keys: seconds in C, where no hook stops it */
  "  stuck = function() local t = {} for i = 1, 2^17 + 1 do t[i * (2^18 - 1)] = true end\n"
  "    return { v = 'done' } end,\n"
  "}\n";

/* ------------------------------------------------------------ helpers */

/* Waits for c and returns its result (or error) JSON, a copy. */
static char *outcome(luma_call *c, int *state, luma_error *err) {
  CT_CHECK(luma_wait(c, 10000) == 1, "the call did not finish in 10 s");
  const char *json;
  size_t len;
  *state = luma_result(c, &json, &len, err);
  return json ? strdup(json) : NULL;
}

static int count_events;
static char last_event[4096];

static void on_event(void *ud, const char *json, size_t len) {
  (void)ud;
  count_events++;
  snprintf(last_event, sizeof last_event, "%.*s", (int)len, json);
}

static const char *lookup(void *ud, const char *name) {
  (void)ud;
  if (strcmp(name, "LIBLUMA_TEST_TOKEN") == 0) return "t0k3n";
  return NULL;
}

static int c_add(void *ud, const char *input, const char *needs, char **out) {
  (void)needs;
  int *calls = ud;
  (*calls)++;
  long long a = 0, b = 0;
  const char *pa = strstr(input, "\"a\":"), *pb = strstr(input, "\"b\":");
  if (pa) a = atoll(pa + 4);
  if (pb) b = atoll(pb + 4);
  if (a < 0) {
    *out = strdup("{\"code\":\"NEGATIVE\",\"message\":\"a is negative\"}");
    return LUMA_FAILED;
  }
  if (a == 99) { *out = strdup("{not json"); return LUMA_OK; }
  *out = malloc(64);
  snprintf(*out, 64, "{\"total\":%lld}", a + b);
  return LUMA_OK;
}

static int shared_ccalls;

/* program.luma with its C handler */
static luma_program *load(luma_runtime *rt, int *ccalls, luma_error *err) {
  char path[600];   /* threads load too: no shared buffer */
  snprintf(path, sizeof path, "%s/program.luma", dir);
  luma_program *p = luma_load(rt, path, NULL, NULL, err);
  if (p && luma_register(p, "cadd", c_add, ccalls ? ccalls : &shared_ccalls, err) != LUMA_OK) {
    luma_program_close(p);
    return NULL;
  }
  return p;
}

/* -------------------------------------------------------------- tests */

static void test_bad_input(void) {
  luma_error err;
  CT_EQ_STR(LUMA_VERSION, luma_version());
  luma_options o = { 0 };
  o.workers = 1000;
  CT_CHECK(luma_new(&o, &err) == NULL, "workers 1000 accepted");
  CT_EQ_STR("INVALID_ARGUMENT", err.code);
  CT_CHECK(strstr(err.message, "workers") != NULL, "%s", err.message);
  CT_CHECK(luma_load(NULL, "x.luma", NULL, NULL, &err) == NULL, "NULL runtime");
  CT_EQ_STR("INVALID_ARGUMENT", err.code);
  /* every function takes NULL without crashing */
  long long wait = 5;
  CT_CHECK(luma_poll(NULL, &wait) == LUMA_FAILED && wait == -1, "poll NULL");
  CT_CHECK(luma_fd(NULL) == -1, "fd NULL");
  /* NULL is no call that is not done yet: a loop waiting on it must end */
  CT_CHECK(luma_ready(NULL) == LUMA_FAILED, "ready NULL: %d", luma_ready(NULL));
  CT_CHECK(luma_wait(NULL, 0) == LUMA_FAILED, "wait NULL");
  CT_CHECK(luma_result(NULL, NULL, NULL, &err) == LUMA_FAILED, "result NULL");
  CT_EQ_STR("INVALID_ARGUMENT", err.code);
  CT_CHECK(luma_start(NULL, "add", "{}", &err) == NULL, "start NULL");
  CT_CHECK(luma_start_method(NULL, "A", "m", "{}", &err) == NULL, "start_method NULL");
  CT_CHECK(luma_start_ask(NULL, "A", "p", "S", &err) == NULL, "start_ask NULL");
  CT_CHECK(luma_register(NULL, "add", c_add, NULL, &err) == LUMA_FAILED, "register NULL");
  luma_cancel(NULL);
  luma_call_free(NULL);
  luma_program_close(NULL);
  luma_destroy(NULL);

  luma_runtime *rt = luma_new(NULL, &err);
  CT_CHECK(rt != NULL, "luma_new: %s", err.message);
  CT_CHECK(luma_load(rt, NULL, NULL, NULL, &err) == NULL, "NULL path");
  CT_EQ_STR("INVALID_ARGUMENT", err.code);
  CT_CHECK(luma_load(rt, path_of("missing.luma"), "", NULL, &err) == NULL, "missing file");
  CT_EQ_STR("IO_ERROR", err.code);
  write_file("bad.luma", "tool t(x: int) -> Nope { }\n");
  CT_CHECK(luma_load(rt, path_of("bad.luma"), "", NULL, &err) == NULL, "bad program");
  CT_EQ_STR("PROGRAM_INVALID", err.code);
  CT_CHECK(strstr(err.message, "Nope") != NULL, "%s", err.message);
  luma_program *p = load(rt, NULL, &err);
  CT_CHECK(p != NULL, "load: %s %s", err.code, err.message);
  CT_CHECK(luma_start(p, "add", "{\"a\": 1,", &err) == NULL, "bad JSON");
  CT_EQ_STR("JSON_INVALID", err.code);
  CT_CHECK(luma_start(p, "nope", "{}", &err) == NULL, "unknown tool");
  CT_EQ_STR("TOOL_NOT_FOUND", err.code);
  CT_CHECK(luma_start_method(p, "Nobody", "run", "{}", &err) == NULL, "unknown agent");
  CT_EQ_STR("AGENT_NOT_FOUND", err.code);
  CT_CHECK(luma_start_method(p, "A", "nope", "{}", &err) == NULL, "unknown method");
  CT_EQ_STR("METHOD_NOT_FOUND", err.code);
  CT_CHECK(luma_start_method(p, "A", "twice", "{\"x\": \"two\"}", &err) == NULL, "bad arguments");
  CT_EQ_STR("INPUT_INVALID", err.code);
  CT_CHECK(luma_register(p, "undeclared", c_add, NULL, &err) == LUMA_FAILED, "register undeclared");
  CT_EQ_STR("TOOL_NOT_FOUND", err.code);
  CT_CHECK(luma_register(p, "cadd", c_add, NULL, &err) == LUMA_FAILED, "register twice");
  CT_EQ_STR("TOOL_REGISTRY_CONFLICT", err.code);

  /* a call that fails: the error as JSON and as code and message */
  luma_call *c = luma_start(p, "add", "{\"a\": \"one\", \"b\": 2}", &err);
  CT_CHECK(c != NULL, "start: %s", err.message);
  int state;
  char *json = outcome(c, &state, &err);
  CT_CHECK(state == LUMA_FAILED, "bad input succeeded");
  CT_EQ_STR("TOOL_INPUT_INVALID", err.code);
  CT_CHECK(json && strstr(json, "\"code\":\"TOOL_INPUT_INVALID\""), "%s", json ? json : "(null)");
  free(json);
  luma_call_free(c);
  luma_destroy(rt);
}

static void test_calls(void) {
  luma_error err;
  luma_options o = { 0 };
  o.workers = 2;
  o.on_event = on_event;
  o.lookup = lookup;
  luma_runtime *rt = luma_new(&o, &err);
  CT_CHECK(rt != NULL, "luma_new: %s", err.message);
  int ccalls = 0;
  luma_program *p = load(rt, &ccalls, &err);
  CT_CHECK(p != NULL, "load: %s", err.message);

  int state;
  count_events = 0;
  luma_call *c = luma_start(p, "add", "{\"a\": 2, \"b\": 40}", &err);
  char *json = outcome(c, &state, &err);
  CT_CHECK(state == LUMA_OK, "add: %s", err.message);
  CT_EQ_STR("{\"total\":42}", json);
  CT_CHECK(count_events == 1 && strstr(last_event, "\"tool\":\"add\""), "%d events, last %s", count_events, last_event);
  free(json);
  luma_call_free(c);

  /* a C handler, its ToolError, and a result that is not JSON */
  c = luma_start(p, "cadd", "{\"a\": 5, \"b\": 6}", &err);
  json = outcome(c, &state, &err);
  CT_CHECK(state == LUMA_OK && ccalls == 1, "cadd: %s", err.message);
  CT_EQ_STR("{\"total\":11}", json);
  free(json);
  luma_call_free(c);
  c = luma_start(p, "cadd", "{\"a\": -1, \"b\": 6}", &err);
  json = outcome(c, &state, &err);
  CT_CHECK(state == LUMA_FAILED, "a ToolError succeeded");
  CT_CHECK(strcmp(err.code, "NEGATIVE") == 0 || strcmp(err.code, "TOOL_ERROR_INVALID") == 0, "%s", err.code);
  free(json);
  luma_call_free(c);
  c = luma_start(p, "cadd", "{\"a\": 99, \"b\": 6}", &err);
  json = outcome(c, &state, &err);
  CT_CHECK(state == LUMA_FAILED, "a result that is not JSON succeeded");
  CT_EQ_STR("TOOL_FAILED", err.code);
  free(json);
  luma_call_free(c);

  /* the lookup callback gives the credential */
  c = luma_start(p, "secret", NULL, &err);
  json = outcome(c, &state, &err);
  CT_CHECK(state == LUMA_OK, "secret: %s %s", err.code, err.message);
  free(json);
  luma_call_free(c);

  /* a module cannot load a C library: the Lua is private */
  c = luma_start(p, "sock", NULL, &err);
  json = outcome(c, &state, &err);
  CT_CHECK(state == LUMA_OK && json && strstr(json, "socket"), "%s", json ? json : err.message);
  free(json);
  luma_call_free(c);

  /* an agent method, its tool calls started and awaited without blocking */
  c = luma_start_method(p, "A", "twice", "{\"x\": 21}", &err);
  CT_CHECK(c != NULL, "start_method: %s", err.message);
  json = outcome(c, &state, &err);
  CT_CHECK(state == LUMA_OK, "twice: %s", err.message);
  CT_EQ_STR("42", json);
  free(json);
  luma_call_free(c);

  /* polling never blocks while a 300 ms handler runs; the fd wakes the host */
  long long t0 = now_ms(), worst = 0;
  c = luma_start(p, "slow", "{\"ms\": 300}", &err);
  int polls = 0;
  while (!luma_ready(c)) {
    long long a = now_ms(), wait;
    luma_poll(rt, &wait);
    long long took = now_ms() - a;
    if (took > worst) worst = took;
    polls++;
    struct pollfd pfd = { luma_fd(rt), POLLIN, 0 };
    poll(&pfd, 1, 16);
    CT_CHECK(now_ms() - t0 < 10000, "slow did not finish");
    if (now_ms() - t0 >= 10000) break;
  }
  if (!under_valgrind()) {
    CT_CHECK(worst < 20, "a poll took %lld ms", worst);
    CT_CHECK(polls > 5, "only %d polls in 300 ms", polls);
  }
  CT_CHECK(luma_result(c, NULL, NULL, &err) == LUMA_OK, "slow: %s", err.message);
  luma_call_free(c);

  /* a timeout too long to count (now + it overflowed) waits to the end */
  c = luma_start(p, "slow", "{\"ms\": 20}", &err);
  CT_CHECK(luma_wait(c, LLONG_MAX) == 1, "a LLONG_MAX wait ended before the call");
  CT_CHECK(luma_result(c, NULL, NULL, &err) == LUMA_OK, "slow: %s", err.message);
  CT_CHECK(luma_wait(c, LLONG_MAX) == 1, "a LLONG_MAX wait on a done call");
  luma_call_free(c);

  /* cancel: the signal fires and the call ends with TOOL_CANCELLED */
  c = luma_start(p, "spin", NULL, &err);
  t0 = now_ms();
  CT_CHECK(luma_wait(c, 30) == 0, "spin finished on its own");
  if (!under_valgrind()) CT_CHECK(now_ms() - t0 < 1000, "a 30 ms wait took %lld ms", now_ms() - t0);
  CT_CHECK(luma_result(c, NULL, NULL, &err) == LUMA_PENDING, "not pending");
  luma_cancel(c);
  json = outcome(c, &state, &err);
  CT_CHECK(state == LUMA_FAILED, "a cancelled call succeeded");
  CT_EQ_STR("TOOL_CANCELLED", err.code);
  free(json);
  luma_call_free(c);

  /* freeing a call in flight cancels it */
  c = luma_start(p, "spin", NULL, &err);
  luma_call_free(c);
  long long wait;
  t0 = now_ms();
  while (luma_poll(rt, &wait) > 0 && now_ms() - t0 < 5000) sleep_ms(1);
  CT_CHECK(now_ms() - t0 < 5000, "the freed call kept running");

  luma_program_close(p);
  luma_destroy(rt);
}

/* ------------------------------------------------------------ threads */

struct canceller {
  luma_call *c;
  int delay_ms;
};

static void *cancel_later(void *arg) {
  struct canceller *k = arg;
  sleep_ms(k->delay_ms);
  luma_cancel(k->c);
  return NULL;
}

static void test_cancel_from_thread(void) {
  luma_error err;
  luma_runtime *rt = luma_new(NULL, &err);
  luma_program *p = load(rt, NULL, &err);
  luma_call *c = luma_start(p, "spin", NULL, &err);
  struct canceller k = { c, 50 };
  pthread_t th;
  pthread_create(&th, NULL, cancel_later, &k);
  long long t0 = now_ms();
  CT_CHECK(luma_wait(c, under_valgrind() ? 30000 : 5000) == 1, "the wait was not woken by the cancel");
  CT_CHECK(now_ms() - t0 < (under_valgrind() ? 30000 : 2000), "the cancel took %lld ms", now_ms() - t0);
  pthread_join(th, NULL);
  CT_CHECK(luma_result(c, NULL, NULL, &err) == LUMA_FAILED, "not cancelled");
  CT_EQ_STR("TOOL_CANCELLED", err.code);
  luma_call_free(c);
  luma_destroy(rt);
}

/* Handlers that wait hold no thread: many wait at once on one worker, in
   the module's one state; one cancelled from another thread while it
   waits ends at once, and the others still sleep their whole wait. */
static void test_waiting(void) {
  luma_error err;
  luma_options o = { 0 };
  o.workers = 1;
  luma_runtime *rt = luma_new(&o, &err);
  luma_program *p = load(rt, NULL, &err);
  CT_CHECK(p != NULL, "load: %s", err.message);
  enum { N = 100 };
  luma_call *c[N];
  long long t0 = now_ms();
  for (int i = 0; i < N; i++) c[i] = luma_start(p, "nap", i == 0 ? "{\"ms\": 8000}" : "{\"ms\": 300}", &err);
  struct canceller k = { c[0], 100 };
  pthread_t th;
  pthread_create(&th, NULL, cancel_later, &k);
  CT_CHECK(luma_wait(c[0], under_valgrind() ? 30000 : 5000) == 1, "the cancelled wait did not end");
  CT_CHECK(luma_result(c[0], NULL, NULL, &err) == LUMA_FAILED, "the cancelled call succeeded");
  CT_EQ_STR("TOOL_CANCELLED", err.code);
  pthread_join(th, NULL);
  int slept = 0;
  for (int i = 1; i < N; i++) {
    const char *json;
    if (luma_wait(c[i], 10000) == 1 && luma_result(c[i], &json, NULL, &err) == LUMA_OK && strcmp(json, "{\"v\":\"true\"}") == 0)
      slept++;
  }
  CT_CHECK(slept == N - 1, "%d of %d slept", slept, N - 1);
  /* one after the other, they would take 30 s */
  if (!under_valgrind()) CT_CHECK(now_ms() - t0 < 5000, "the waits took %lld ms", now_ms() - t0);
  for (int i = 0; i < N; i++) luma_call_free(c[i]);
  luma_destroy(rt);
}

/* luma_set_inline: a start runs its handler on the calling thread until it
   returns (done when luma_start returns, no hand-off to the pool) or waits
   (the wait resumes on the pool: the start does not block for it) */
static void test_inline(void) {
  luma_error err;
  luma_options o = { 0 };
  o.workers = 1;
  CT_CHECK(luma_set_inline(NULL, 1) == LUMA_FAILED, "a NULL runtime was accepted");
  luma_runtime *rt = luma_new(&o, &err);
  CT_CHECK(luma_set_inline(rt, 1) == LUMA_OK, "luma_set_inline failed");
  luma_program *p = load(rt, NULL, &err);
  CT_CHECK(p != NULL, "load: %s", err.message);
  for (int i = 0; i < 50; i++) {
    luma_call *c = luma_start(p, "add", "{\"a\": 1, \"b\": 2}", &err);
    CT_CHECK(c != NULL, "start: %s", err.message);
    CT_CHECK(luma_ready(c) == 1, "an inline call that does not wait was not done at its start (%d)", i);
    const char *json = NULL;
    CT_CHECK(luma_result(c, &json, NULL, &err) == LUMA_OK && json && strcmp(json, "{\"total\":3}") == 0,
             "inline result: %s %s", json ? json : "(none)", err.message);
    luma_call_free(c);
  }
  enum { N = 20 };
  luma_call *c[N];
  long long t0 = now_ms();
  for (int i = 0; i < N; i++) c[i] = luma_start(p, "nap", "{\"ms\": 300}", &err);
  long long started = now_ms() - t0;
  if (!under_valgrind()) CT_CHECK(started < 250, "20 inline starts of a waiting handler took %lld ms", started);
  int slept = 0;
  for (int i = 0; i < N; i++) {
    const char *json;
    if (c[i] && luma_wait(c[i], 10000) == 1 && luma_result(c[i], &json, NULL, &err) == LUMA_OK &&
        strcmp(json, "{\"v\":\"true\"}") == 0)
      slept++;
  }
  CT_CHECK(slept == N, "%d of %d slept", slept, N);
  if (!under_valgrind()) CT_CHECK(now_ms() - t0 < 5000, "the waits took %lld ms", now_ms() - t0);
  for (int i = 0; i < N; i++) luma_call_free(c[i]);
  /* a process-isolated module's handler is not run inline: its wait would
     block the starting thread (the child runs one call at a time) */
  luma_program *iso = luma_load(rt, path_of("program.luma"), path_of("isolated.config.json"), NULL, &err);
  CT_CHECK(iso != NULL, "load isolated: %s", err.message);
  if (iso) {
    t0 = now_ms();
    luma_call *w = luma_start(iso, "nap", "{\"ms\": 500}", &err);
    long long took = now_ms() - t0;
    CT_CHECK(w != NULL, "start isolated: %s", err.message);
    if (!under_valgrind()) CT_CHECK(took < 400, "an inline start of a process-isolated nap took %lld ms", took);
    CT_CHECK(w && luma_wait(w, 20000) == 1 && luma_result(w, NULL, NULL, &err) == LUMA_OK, "isolated nap: %s",
             err.message);
    luma_call_free(w);
  }
  /* off again: a start hands the handler to the pool */
  CT_CHECK(luma_set_inline(rt, 0) == LUMA_OK, "luma_set_inline off failed");
  luma_call *off = luma_start(p, "add", "{\"a\": 1, \"b\": 2}", &err);
  CT_CHECK(off && luma_wait(off, 10000) == 1, "the pool's call did not end");
  luma_call_free(off);
  luma_destroy(rt);
}

struct worker {
  luma_runtime *rt;     /* shared, or NULL: its own */
  luma_program *p;
  int ok;
};

static void *many_calls(void *arg) {
  struct worker *w = arg;
  luma_error err;
  luma_runtime *rt = w->rt;
  luma_program *p = w->p;
  if (!rt) {
    rt = luma_new(NULL, &err);
    p = rt ? load(rt, NULL, &err) : NULL;
    if (!p) return NULL;
  }
  for (int i = 0; i < 40; i++) {
    char in[64];
    snprintf(in, sizeof in, "{\"a\": %d, \"b\": 1}", i);
    luma_call *c = luma_start(p, "add", in, &err);
    if (!c) continue;
    const char *json;
    char want[64];
    snprintf(want, sizeof want, "{\"total\":%d}", i + 1);
    if (luma_wait(c, 10000) == 1 && luma_result(c, &json, NULL, &err) == LUMA_OK && strcmp(json, want) == 0) w->ok++;
    luma_call_free(c);
  }
  if (!w->rt) luma_destroy(rt);
  return NULL;
}

static void test_threads(void) {
  /* runtimes of their own, on two threads at once */
  struct worker ws[2] = { { NULL, NULL, 0 }, { NULL, NULL, 0 } };
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, many_calls, &ws[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  CT_CHECK(ws[0].ok == 40 && ws[1].ok == 40, "own runtimes: %d and %d of 40", ws[0].ok, ws[1].ok);

  /* one runtime, used by three threads at once (it is locked inside) */
  luma_error err;
  luma_runtime *rt = luma_new(NULL, &err);
  luma_program *p = load(rt, NULL, &err);
  struct worker shared[3] = { { rt, p, 0 }, { rt, p, 0 }, { rt, p, 0 } };
  pthread_t ts[3];
  for (int i = 0; i < 3; i++) pthread_create(&ts[i], NULL, many_calls, &shared[i]);
  for (int i = 0; i < 3; i++) pthread_join(ts[i], NULL);
  CT_CHECK(shared[0].ok + shared[1].ok + shared[2].ok == 120, "shared runtime: %d, %d, %d of 40", shared[0].ok,
           shared[1].ok, shared[2].ok);
  luma_destroy(rt);
}

/* A destroyed runtime's calls keep working: done ones keep their result,
   the others end cancelled. */
static void test_destroyed(void) {
  luma_error err;
  luma_runtime *rt = luma_new(NULL, &err);
  luma_program *p = load(rt, NULL, &err);
  luma_call *done = luma_start(p, "add", "{\"a\": 1, \"b\": 1}", &err);
  luma_wait(done, 5000);
  luma_call *running = luma_start(p, "spin", NULL, &err);
  luma_call *method = luma_start_method(p, "A", "twice", "{\"x\": 1}", &err);
  luma_destroy(rt);
  const char *json;
  CT_CHECK(luma_ready(done) && luma_result(done, &json, NULL, &err) == LUMA_OK, "the done call lost its result");
  CT_EQ_STR("{\"total\":2}", json);
  CT_CHECK(luma_ready(running), "a call of a destroyed runtime is not done");
  CT_CHECK(luma_result(running, &json, NULL, &err) == LUMA_FAILED, "cancelled call succeeded");
  CT_EQ_STR("TOOL_CANCELLED", err.code);
  CT_CHECK(json && strstr(json, "TOOL_CANCELLED"), "%s", json ? json : "(null)");
  CT_CHECK(luma_wait(method, 100) == 1, "wait on a destroyed runtime's call");
  luma_cancel(running);
  luma_call_free(done);
  luma_call_free(running);
  luma_call_free(method);
}

/* ------------------------------------------------ a host that reaps */

static void reap_all(int sig) {
  (void)sig;
  int saved = errno;
  while (waitpid(-1, NULL, WNOHANG) > 0) {}
  errno = saved;
}

/* A host may take its children's exit status itself: nginx reaps them in
   its SIGCHLD handler, and a host may ignore SIGCHLD. A process-isolated
   handler that no hook stops is still killed at its deadline, then
   replaced, and calls go on. (A guard of that path: that the kill goes
   through the child's pidfd, never to a pid the host freed and another
   process took, cannot be staged here.) */
static void test_reaping_host(void) {
  struct { const char *how; void (*handler)(int); } hosts[] = {
    { "a SIGCHLD handler that reaps", reap_all },
    { "SIGCHLD ignored", SIG_IGN },
  };
  for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hosts[i].handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, &old);
    luma_error err;
    luma_runtime *rt = luma_new(NULL, &err);
    luma_program *p = luma_load(rt, path_of("program.luma"), path_of("isolated.config.json"), NULL, &err);
    CT_CHECK(p != NULL, "%s: load: %s", hosts[i].how, p ? "" : err.message);
    for (int round = 0; p && round < 2; round++) {
      int state;
      long long t0 = now_ms();
      luma_call *c = luma_start(p, "stuck", NULL, &err);
      free(outcome(c, &state, &err));
      CT_CHECK(state == LUMA_FAILED && strcmp(err.code, "TOOL_TIMEOUT") == 0, "%s: stuck gave %s", hosts[i].how,
               state == LUMA_FAILED ? err.code : "a result");
      CT_CHECK(under_valgrind() || now_ms() - t0 < 5000, "%s: stuck took %lld ms", hosts[i].how, now_ms() - t0);
      luma_call_free(c);
      c = luma_start(p, "add", "{\"a\": 2, \"b\": 3}", &err);
      char *json = outcome(c, &state, &err);
      CT_CHECK(state == LUMA_OK, "%s: add after a kill failed", hosts[i].how);
      CT_EQ_STR("{\"total\":5}", json);
      free(json);
      luma_call_free(c);
    }
    if (p) luma_program_close(p);
    luma_destroy(rt);
    sigaction(SIGCHLD, &old, NULL);
  }
}

/* ---------------------------------------------------------- deadlines */

static void host_handler(int sig) { (void)sig; }

/* A handler that ignores its signal is stopped at its deadline, and one
   that is cancelled at once, on a runtime made now. */
static void handlers_stop(const char *how, const char *hooked) {
  luma_error err;
  int state;
  luma_runtime *rt = luma_new(NULL, &err);
  luma_program *p = load(rt, NULL, &err);
  CT_CHECK(p != NULL, "%s: load: %s", how, err.message);
  if (!p) { luma_destroy(rt); return; }
  luma_call *h = luma_start(p, "hooked", NULL, &err);
  char *seen = outcome(h, &state, &err);
  CT_CHECK(seen && strstr(seen, hooked), "%s: the handler saw %s, not %s", how, seen ? seen : err.message, hooked);
  free(seen);
  luma_call_free(h);
  long long t0 = now_ms();
  luma_call *c = luma_start(p, "brief", NULL, &err);
  char *json = outcome(c, &state, &err);
  CT_CHECK(state == LUMA_FAILED, "%s: brief returned", how);
  CT_EQ_STR("TOOL_TIMEOUT", err.code);
  if (!under_valgrind()) CT_CHECK(now_ms() - t0 < 1000, "%s: brief took %lld ms", how, now_ms() - t0);
  free(json);
  luma_call_free(c);
  c = luma_start(p, "spin", NULL, &err);
  CT_CHECK(luma_wait(c, 30) == 0, "%s: spin finished on its own", how);
  luma_cancel(c);
  json = outcome(c, &state, &err);
  CT_EQ_STR("TOOL_CANCELLED", err.code);
  free(json);
  luma_call_free(c);
  luma_program_close(p);
  luma_destroy(rt);
}

/* The deadline signal: taken by default; refused when the host handles it
   (then the count hook); let through on the runtime's workers even when the
   host's thread that made them blocks every signal. */
static void test_deadlines(void) {
  int signo = luma_deadline_signal();
#ifdef __SANITIZE_THREAD__
  /* ThreadSanitizer holds signals back: the count hook, always */
  CT_CHECK(signo == 0, "a deadline signal (%d) under ThreadSanitizer", signo);
  handlers_stop("the count hook under ThreadSanitizer", "\"true\"");
  return;
#endif
  CT_CHECK(signo >= SIGRTMIN && signo <= SIGRTMAX, "the default deadline signal is %d", signo);
  handlers_stop("the deadline signal", "\"false\"");

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = host_handler;
  sigaction(SIGRTMIN + 5, &sa, NULL);
  CT_CHECK(luma_set_deadline_signal(SIGRTMIN + 5) == LUMA_FAILED, "a signal the host handles was taken");
  CT_CHECK(luma_deadline_signal() == 0, "refused, the count hook is not in use");
  handlers_stop("the count hook", "\"true\"");
  CT_CHECK(luma_set_deadline_signal(-1) == LUMA_FAILED, "a negative signal was taken");

  CT_CHECK(luma_set_deadline_signal(signo) == LUMA_OK, "the default signal cannot be chosen again");
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  handlers_stop("every signal blocked in the host's thread", "\"false\"");
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* A host that can only connect by path (nginx): the wake socket says when
   a call ended, and leaves nothing behind once connected. */
static void test_wake_socket(void) {
  luma_error err;
  luma_options o = { 0 };
  o.workers = 2;
  luma_runtime *rt = luma_new(&o, &err);
  CT_CHECK(rt != NULL, "luma_new: %s", err.message);
  int ccalls = 0;
  luma_program *p = load(rt, &ccalls, &err);
  CT_CHECK(p != NULL, "load: %s", err.message);
  char path[108];
  CT_CHECK(luma_wake_socket(NULL, path, sizeof path, &err) == LUMA_FAILED && strcmp(err.code, "INVALID_ARGUMENT") == 0,
           "a NULL runtime: %s", err.code);
  CT_CHECK(luma_wake_socket(rt, path, 4, &err) == LUMA_FAILED && strstr(err.message, "does not fit"),
           "a short buffer: %s", err.message);
  CT_CHECK(luma_wake_socket(rt, path, sizeof path, &err) == LUMA_OK, "luma_wake_socket: %s", err.message);
  struct stat st;
  char folder[108];
  snprintf(folder, sizeof folder, "%s", path);
  *strrchr(folder, '/') = 0;
  CT_CHECK(stat(folder, &st) == 0 && (st.st_mode & 0777) == 0700, "the folder %s is not 0700", folder);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  CT_CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect %s: %s", path, strerror(errno));
  luma_poll(rt, NULL);
  CT_CHECK(stat(path, &st) != 0 && stat(folder, &st) != 0, "%s is still there once connected", path);
  luma_call *c = luma_start(p, "slow", "{\"ms\": 50}", &err);
  CT_CHECK(c != NULL, "start: %s", err.message);
  long long t0 = now_ms();
  while (!luma_ready(c) && now_ms() - t0 < 10000) {
    long long wait;
    luma_poll(rt, &wait);
    if (luma_ready(c)) break;
    /* only the socket wakes this host: no timer while the handler runs */
    struct pollfd pfd = { fd, POLLIN, 0 };
    CT_CHECK(poll(&pfd, 1, wait < 0 ? 10000 : (int)wait) == 1, "the wake socket stayed silent");
    char bytes[64];
    CT_CHECK(read(fd, bytes, sizeof bytes) > 0, "read: %s", strerror(errno));
  }
  CT_CHECK(luma_result(c, NULL, NULL, &err) == LUMA_OK, "slow: %s", err.message);
  luma_call_free(c);
  close(fd);
  /* a second socket replaces the first, and goes with the runtime */
  CT_CHECK(luma_wake_socket(rt, path, sizeof path, &err) == LUMA_OK, "again: %s", err.message);
  luma_destroy(rt);
  CT_CHECK(stat(path, &st) != 0, "%s is still there after luma_destroy", path);
}

/* ------------------------------------------------------------ streams */

/* A provider on 127.0.0.1 that answers one request with a Chat Completions
   stream, one event every 30 ms, and keeps the request's body. */
static struct {
  int fd, port;
  char body[8192];
  pthread_t thread;
} sp = { -1, 0, "", 0 };

static const char *const SSE_EVENTS[] = {
  "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
  "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"{\\\"total\\\"\"}}]}\n\n",
  ": keep-alive\n\n",
  "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\":3}\"}}]}\n\n",
  "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
  "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
  "data: [DONE]\n\n",
};

static void *provider_main(void *arg) {
  (void)arg;
  int conn = accept(sp.fd, NULL, NULL);
  if (conn < 0) return NULL;
  char req[16384];
  size_t got = 0;
  long body_len = -1;
  char *head_end = NULL;
  while (got < sizeof req - 1) {
    ssize_t n = recv(conn, req + got, sizeof req - 1 - got, 0);
    if (n <= 0) break;
    got += (size_t)n;
    req[got] = '\0';
    if (!head_end && (head_end = strstr(req, "\r\n\r\n"))) {
      const char *cl = strstr(req, "Content-Length:");
      if (!cl) cl = strstr(req, "content-length:");
      body_len = cl ? strtol(cl + 15, NULL, 10) : 0;
    }
    if (head_end && got >= (size_t)(head_end + 4 - req) + (size_t)body_len) break;
  }
  if (head_end) snprintf(sp.body, sizeof sp.body, "%s", head_end + 4);
  const char *h = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
  if (send(conn, h, strlen(h), MSG_NOSIGNAL) > 0)
    for (size_t i = 0; i < sizeof SSE_EVENTS / sizeof *SSE_EVENTS; i++) {
      sleep_ms(30);
      if (send(conn, SSE_EVENTS[i], strlen(SSE_EVENTS[i]), MSG_NOSIGNAL) < 0) break;
    }
  close(conn);
  return NULL;
}

static int provider_start(void) {
  sp.fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (sp.fd < 0 || bind(sp.fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(sp.fd, 4) != 0 ||
      getsockname(sp.fd, (struct sockaddr *)&a, &len) != 0)
    return -1;
  sp.port = ntohs(a.sin_port);
  return pthread_create(&sp.thread, NULL, provider_main, NULL);
}

/* A game loop: one luma_poll per 5 ms frame, the frame's events taken. */
static void test_events(void) {
  if (provider_start() != 0) {
    CT_CHECK(0, "cannot start the streaming provider");
    return;
  }
  char prog[600];
  snprintf(prog, sizeof prog,
           "schema Sum { total: int }\n"
           "model M { provider: \"openai\"\n name: \"t\"\n base_url: \"http://127.0.0.1:%d/v1\"\n api_key_env: null }\n"
           "agent B { model: M }\n", sp.port);
  write_file("stream.luma", prog);
  luma_error err;
  luma_options o = { 0 };
  o.workers = 1;
  luma_runtime *rt = luma_new(&o, &err);
  luma_program *p = rt ? luma_load(rt, path_of("stream.luma"), NULL, NULL, &err) : NULL;
  CT_CHECK(p != NULL, "load: %s", err.message);
  if (!p) { luma_destroy(rt); return; }

  luma_call *t = luma_start(p, "add", "{}", &err);
  CT_CHECK(t == NULL || luma_listen(t, &err) == LUMA_FAILED, "a tool call has no events");

  luma_call *c = luma_start_ask(p, "B", "Add 1 and 2", "Sum", &err);
  CT_CHECK(c != NULL && luma_listen(c, &err) == LUMA_OK, "listen: %s", err.message);
  int frames = 0, texts = 0, early = 0, finished = 0;
  char text[64] = "", last[512] = "";
  long long start = now_ms();
  while (!finished && now_ms() - start < 10000) {
    long long wait;
    luma_poll(rt, &wait);
    frames++;
    const char *ev;
    size_t len;
    while ((ev = luma_next_event(c, &len))) {
      snprintf(last, sizeof last, "%s", ev);
      const char *tx = strstr(ev, "\"type\":\"text_delta\"") ? strstr(ev, "\"text\":\"") : NULL;
      if (tx) {
        texts++;
        if (luma_ready(c) == 0) early = 1;
        /* the fragment as JSON text, up to its closing quote */
        const char *from = tx + 8, *to = from;
        while (*to && !(*to == '"' && to[-1] != '\\')) to++;
        size_t have = strlen(text);
        if (have + (size_t)(to - from) < sizeof text) {
          memcpy(text + have, from, (size_t)(to - from));
          text[have + (size_t)(to - from)] = '\0';
        }
      }
      if (strstr(ev, "\"type\":\"finish\"")) finished = 1;
    }
    sleep_ms(5);
  }
  CT_CHECK(strstr(sp.body, "\"stream\":true") && strstr(sp.body, "\"include_usage\":true"),
           "the request asked for a stream: %s", sp.body);
  CT_CHECK(texts == 2 && early, "two text deltas, while the ask ran (%d)", texts);
  CT_EQ_STR("{\\\"total\\\":3}", text);
  CT_CHECK(finished && strstr(last, "\"ok\":true") && strstr(last, "\"answer\":{\"total\":3}"), "finish last: %s", last);
  CT_CHECK(frames > 5, "the loop ran frames while it streamed: %d", frames);
  const char *json;
  CT_CHECK(luma_result(c, &json, NULL, &err) == LUMA_OK && strcmp(json, "{\"total\":3}") == 0, "result %s",
           err.message);
  CT_CHECK(luma_next_event(c, NULL) == NULL, "nothing after finish");
  luma_call_free(c);
  luma_call_free(t);
  pthread_join(sp.thread, NULL);

  /* events not taken before the ask ended are kept for the host */
  pthread_create(&sp.thread, NULL, provider_main, NULL);
  c = luma_start_ask(p, "B", "Add 1 and 2", "Sum", &err);
  luma_listen(c, &err);
  CT_CHECK(luma_wait(c, 10000) == 1, "the ask ended");
  int n = 0;
  const char *ev = NULL, *prev = NULL;
  while ((ev = luma_next_event(c, NULL))) { n++; prev = ev; }
  CT_CHECK(n >= 4, "every event kept: %d", n);
  (void)prev;
  luma_call_free(c);
  pthread_join(sp.thread, NULL);
  close(sp.fd);
  luma_program_close(p);
  luma_destroy(rt);
}

/* The run id of the last "ask" event that names one. */
static char resume_run[64];

static void on_run_event(void *ud, const char *json, size_t len) {
  (void)ud;
  (void)len;
  const char *r = strstr(json, "\"kind\":\"ask\"") ? strstr(json, "\"run\":\"") : NULL;
  if (r) snprintf(resume_run, sizeof resume_run, "%.*s", (int)strcspn(r + 7, "\""), r + 7);
}

/* luma_resume: a durable agent's run, streamed and journaled, given again
   from the journal once it finished (no request); a run the journal does
   not have is refused at once. */
static void test_resume(void) {
  if (provider_start() != 0) {
    CT_CHECK(0, "cannot start the streaming provider");
    return;
  }
  char prog[600];
  snprintf(prog, sizeof prog,
           "schema Sum { total: int }\n"
           "model M { provider: \"openai\"\n name: \"t\"\n base_url: \"http://127.0.0.1:%d/v1\"\n api_key_env: null }\n"
           "agent D { model: M\n durable: true }\n", sp.port);
  write_file("durable.luma", prog);
  write_file("durable.config.json", "{ \"journal\": \"runs.db\" }");
  luma_error err;
  luma_options o = { 0 };
  o.workers = 1;
  o.on_event = on_run_event;
  luma_runtime *rt = luma_new(&o, &err);
  luma_program *p = rt ? luma_load(rt, path_of("durable.luma"), path_of("durable.config.json"), NULL, &err) : NULL;
  CT_CHECK(p != NULL, "load: %s", err.message);
  if (!p) { luma_destroy(rt); return; }
  CT_CHECK(luma_resume(NULL, "run-1", &err) == NULL && strcmp(err.code, "INVALID_ARGUMENT") == 0, "resume NULL");
  CT_CHECK(luma_resume(p, "run-0000", &err) == NULL && strcmp(err.code, "JOURNAL_ERROR") == 0 &&
           strcmp(err.message, "Cannot resume run 'run-0000': the journal has no run 'run-0000'.") == 0,
           "an unknown run: %s", err.message);
  luma_call *c = luma_start_ask(p, "D", "Add 1 and 2", "Sum", &err);
  CT_CHECK(c != NULL && luma_listen(c, &err) == LUMA_OK, "listen: %s", err.message);
  const char *json;
  CT_CHECK(c && luma_wait(c, 10000) == 1 && luma_result(c, &json, NULL, &err) == LUMA_OK &&
           strcmp(json, "{\"total\":3}") == 0, "the streamed durable ask: %s", err.message);
  luma_call_free(c);
  pthread_join(sp.thread, NULL);
  close(sp.fd);
  CT_CHECK(strncmp(resume_run, "run-", 4) == 0, "the ask's event names its run: '%s'", resume_run);
  /* the provider is gone: the answer comes from the journal */
  c = luma_resume(p, resume_run, &err);
  CT_CHECK(c != NULL, "resume: %s", err.message);
  CT_CHECK(c && luma_wait(c, 10000) == 1 && luma_result(c, &json, NULL, &err) == LUMA_OK &&
           strcmp(json, "{\"total\":3}") == 0, "the finished run's answer again: %s", err.message);
  luma_call_free(c);
  /* a decision: only on a run that awaits one, with JSON input */
  CT_CHECK(luma_decide(p, NULL, "c1", 1, NULL, NULL, &err) == LUMA_FAILED && strcmp(err.code, "INVALID_ARGUMENT") == 0,
           "decide NULL");
  CT_CHECK(luma_decide(p, resume_run, "c1", 1, NULL, "{nope", &err) == LUMA_FAILED &&
           strcmp(err.code, "JSON_INVALID") == 0, "decide with input that is not JSON: %s", err.code);
  CT_CHECK(luma_decide(p, resume_run, "c1", 0, "no", NULL, &err) == LUMA_FAILED && strcmp(err.code, "JOURNAL_ERROR") == 0 &&
           strstr(err.message, "Cannot record a decision on call 'c1'"), "decide on a finished run: %s", err.message);
  luma_program_close(p);
  luma_destroy(rt);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/libluma-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 2; }
  write_file("program.luma", PROGRAM);
  write_file("tools.lua", TOOLS);
  write_file("isolated.config.json", "{ \"tool_modules\": [\"tools.lua\"], \"tool_module_policy\": { \"sandbox\": "
             "\"strict\", \"isolation\": \"process\", \"max_concurrency\": 1, \"kill_grace_ms\": 100 } }");
  write_file("luma.config.json", "{ \"tool_modules\": [\"tools.lua\"], \"tool_module_policy\": { \"max_concurrency\": 4 } }");
  test_bad_input();
  test_calls();
  test_cancel_from_thread();
  test_waiting();
  test_inline();
  test_threads();
  test_destroyed();
  test_deadlines();
  test_reaping_host();
  test_wake_socket();
  test_events();
  test_resume();
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
  return ct_finish("libluma");
}
