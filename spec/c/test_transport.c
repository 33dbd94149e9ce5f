/*
 * base/transport.c against a small HTTP/1.1 server running in this process
 * on 127.0.0.1: a thread per connection, keep-alive unless a path closes,
 * canned responses by path (one of them slow, one sleeping 200 ms).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "isolate.h"
#include "ctest.h"
#include "luma_limits.h"
#include "strbuf.h"
#include "test_server.h"
#include "transport.h"

/* ---- the server (test_server.h) and its routes ---- */

static void respond(int conn, int head_only, int status, const char *headers, const char *body, size_t len) {
  ts_respond(conn, head_only, status, "Whatever", headers, body, len);
}

/* Answers one request; 1 when the connection stays open for the next. */
static int route(int conn, int serial, char *req, size_t head_len, size_t body_len) {
  char method[16] = "", path[256] = "";
  if (sscanf(req, "%15s %255s", method, path) != 2) return 0;
  int head = strcmp(method, "HEAD") == 0;
  static const char keep[] = "Connection: keep-alive\r\n";
  if (strcmp(path, "/text") == 0) {
    respond(conn, head, 200,
            "Content-Type: text/plain\r\nX-Custom-Header: Yes\r\nX-Dup: a\r\nX-Dup: b\r\nX-Folded: one\r\n two\r\n"
            "Connection: keep-alive\r\n", "hello", 5);
  } else if (strcmp(path, "/conn") == 0) {
    char body[32];
    snprintf(body, sizeof body, "%d", serial);
    respond(conn, head, 200, keep, body, strlen(body));
  } else if (strcmp(path, "/echo") == 0) {
    /* the method, the request's header lines in order, then the body */
    sb_buf b;
    sb_init(&b);
    sb_printf(&b, "%s\n", method);
    const char *line = strstr(req, "\r\n") + 2, *end = req + head_len - 2;
    while (line < end) {
      const char *eol = strstr(line, "\r\n");
      sb_add(&b, line, (size_t)(eol - line));
      sb_addc(&b, '\n');
      line = eol + 2;
    }
    sb_addc(&b, '\n');
    sb_add(&b, req + head_len, body_len);
    respond(conn, head, 200, keep, b.data, b.len);
    sb_free(&b);
  } else if (strcmp(path, "/big") == 0) {
    static char big[65536];
    memset(big, 'x', sizeof big);
    respond(conn, head, 200, keep, big, sizeof big);
  } else if (strcmp(path, "/big-stream") == 0) {
    static char chunk[4096];
    memset(chunk, 'y', sizeof chunk);
    const char *h = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
    if (ts_send_all(conn, h, strlen(h)) == 0)
      for (int i = 0; i < 16 && ts_send_all(conn, chunk, sizeof chunk) == 0; i++) {}
    return 0;
  } else if (strcmp(path, "/drip") == 0) {
    /* 20 lines 20 ms apart, the head first: a stream */
    const char *h = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
    if (ts_send_all(conn, h, strlen(h)) == 0)
      for (int i = 0; i < 20 && !ts_stopping() && !ts_client_gone(conn); i++) {
        char line[32];
        snprintf(line, sizeof line, "piece-%02d\n", i);
        if (ts_send_all(conn, line, strlen(line)) != 0) break;
        ts_sleep_ms(20);
      }
    return 0;
  } else if (strcmp(path, "/slow") == 0) {
    for (int i = 0; i < 250 && !ts_stopping() && !ts_client_gone(conn); i++) ts_sleep_ms(20);
    respond(conn, head, 200, "Connection: close\r\n", "late", 4);
    return 0;
  } else if (strcmp(path, "/hold") == 0) {
    /* no answer until the client goes (or 30 s) */
    for (int i = 0; i < 1500 && !ts_stopping() && !ts_client_gone(conn); i++) ts_sleep_ms(20);
    return 0;
  } else if (strcmp(path, "/sleep200") == 0) {
    ts_sleep_ms(200);
    respond(conn, head, 200, keep, "rested", 6);
  } else if (strcmp(path, "/redirect") == 0) {
    respond(conn, head, 302, "Location: /text\r\nConnection: keep-alive\r\n", "", 0);
  } else if (strcmp(path, "/redirect-file") == 0) {
    respond(conn, head, 302, "Location: file:///etc/passwd\r\n", "", 0);
  } else {
    respond(conn, head, 404, keep, "not found", 9);
  }
  return 1;
}

/* ---- helpers ---- */

static tp_transport *tp;
static char url_base[64];

static const char *url(const char *path) {
  static char u[128];
  snprintf(u, sizeof u, "%s%s", url_base, path);
  return u;
}

static tp_request request(tp_method method, const char *path) {
  tp_request r;
  memset(&r, 0, sizeof r);
  r.method = method;
  r.url = url(path);
  r.timeout_ms = 5000;
  r.max_redirects = 5;
  return r;
}

/* The done callback counts its calls per transfer. */
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_done(void *ud) {
  pthread_mutex_lock(&done_lock);
  (*(int *)ud)++;
  pthread_mutex_unlock(&done_lock);
}

static int done_count(const int *n) {
  pthread_mutex_lock(&done_lock);
  int v = *n;
  pthread_mutex_unlock(&done_lock);
  return v;
}

/* Starts r and waits for it; its outcome (or NULL) stays with *t. */
static const tp_result *fetch(const tp_request *r, tp_transfer **t) {
  char err[256];
  *t = tp_start(tp, r, NULL, NULL, err, sizeof err);
  if (!*t) {
    fprintf(stderr, "tp_start refused %s: %s\n", r->url, err);
    return NULL;
  }
  tp_wait(*t, 0, NULL);
  return tp_outcome(*t);
}

static const char *header(const tp_result *res, const char *name) {
  for (size_t i = 0; i < res->n_headers; i++)
    if (strcmp(res->headers[i].name, name) == 0) return res->headers[i].value;
  return NULL;
}

/* ---- cases ---- */

/* Reads what t has now into b; the count. */
static size_t read_some(tp_transfer *t, sb_buf *b) {
  char buf[1000];
  size_t n, total = 0;
  while ((n = tp_read(t, buf, sizeof buf)) > 0) {
    sb_add(b, buf, n);
    total += n;
  }
  return total;
}

static void test_stream(void) {
  char err[256];
  int data = 0, done = 0;
  /* the head before the end, the pieces as they come, on_data called */
  tp_request r = request(TP_GET, "/drip");
  r.stream = 1;
  r.on_data = on_done;
  r.max_response_bytes = 4096;
  tp_transfer *t = tp_start(tp, &r, on_done, &data, err, sizeof err);
  CT_CHECK(t != NULL, "started: %s", err);
  if (!t) return;
  sb_buf b;
  sb_init(&b);
  long status = 0;
  const tp_header *h = NULL;
  size_t nh = 0;
  int head_early = 0, early = 0;
  while (!tp_outcome(t)) {
    if (!head_early && tp_head(t, &status, &h, &nh)) head_early = 1;
    if (read_some(t, &b) && !tp_outcome(t)) early = 1;
    ts_sleep_ms(5);
  }
  read_some(t, &b);
  const tp_result *res = tp_outcome(t);
  CT_CHECK(head_early && status == 200, "the head was known before the end (status %ld)", status);
  CT_CHECK(head_early && nh >= 1 && strcmp(h[0].name, "Content-Type") == 0 &&
           strcmp(h[0].value, "text/event-stream") == 0, "its headers");
  CT_CHECK(early, "bytes were read before the end");
  CT_CHECK(res->code == TP_OK && res->status == 200 && res->body_len == 0, "ended OK, no body in the outcome: %s",
           res->message);
  CT_CHECK(b.len == 20 * 9 && memcmp(b.data, "piece-00\npiece-01\n", 18) == 0 &&
           memcmp(b.data + 19 * 9, "piece-19\n", 9) == 0, "every piece in order (%zu bytes)", b.len);
  CT_CHECK(done_count(&data) > 2, "on_data and done were called (%d)", done_count(&data));
  tp_release(t);

  /* a reader that does not read: the transfer pauses at the bound */
  b.len = 0;
  r = request(TP_GET, "/big-stream");
  r.stream = 1;
  r.max_response_bytes = 8192;
  t = tp_start(tp, &r, on_done, &done, err, sizeof err);
  ts_sleep_ms(300);
  CT_CHECK(tp_outcome(t) == NULL, "a paused stream has not ended");
  /* one read takes every unread byte at once: read_some's reads of 1000
     resume the transfer half-way, and it would go on taking what comes */
  static char all[65536];
  size_t held = tp_read(t, all, sizeof all);
  sb_add(&b, all, held);
  CT_CHECK(held >= 4096 && held <= 8192 + 16384, "the unread bytes stay within the bound and a piece: %zu", held);
  while (!tp_outcome(t)) {
    read_some(t, &b);
    ts_sleep_ms(2);
  }
  read_some(t, &b);
  res = tp_outcome(t);
  CT_CHECK(res->code == TP_OK && b.len == 65536, "then it resumes and every byte comes: %s, %zu bytes", res->message,
           b.len);
  tp_release(t);

  /* cancelled mid-stream: at once */
  r = request(TP_GET, "/drip");
  r.stream = 1;
  t = tp_start(tp, &r, NULL, NULL, err, sizeof err);
  b.len = 0;
  while (b.len == 0) {
    read_some(t, &b);
    ts_sleep_ms(2);
  }
  long long start = ts_now_ms();
  tp_cancel(t);
  tp_wait(t, 0, NULL);
  res = tp_outcome(t);
  CT_CHECK(res->code == TP_HTTP_CANCELLED && ts_now_ms() - start < 100, "cancelled mid-stream in %lld ms",
           ts_now_ms() - start);
  tp_release(t);
  sb_free(&b);
}

static void test_get(void) {
  tp_request r = request(TP_GET, "/text");
  tp_transfer *t;
  const tp_result *res = fetch(&r, &t);
  CT_CHECK(res && res->code == TP_OK, "GET /text: %s", res ? res->message : "not started");
  if (res && res->code == TP_OK) {
    CT_CHECK(res->status == 200, "status 200, got %ld", res->status);
    CT_EQ_STR("hello", res->body);
    CT_CHECK(res->body_len == 5, "body length 5, got %zu", res->body_len);
    sb_buf seen;
    sb_init(&seen);
    for (size_t i = 0; i < res->n_headers; i++)
      sb_printf(&seen, "%s=%s|", res->headers[i].name, res->headers[i].value);
    CT_EQ_STR("Content-Type=text/plain|X-Custom-Header=Yes|X-Dup=a|X-Dup=b|X-Folded=one two|"
              "Connection=keep-alive|Content-Length=5|", sb_str(&seen));
    sb_free(&seen);
    CT_CHECK(strlen(res->headers[4].value) == res->headers[4].value_len, "value_len matches the NUL");
  }
  tp_release(t);
}

static void test_post(void) {
  tp_request r = request(TP_POST, "/echo");
  tp_header h[] = { { "X-B", 3, "2", 1 }, { "X-A", 3, "1", 1 }, { "X-Empty", 7, "", 0 },
                    { "Content-Type", 12, "text/plain", 10 } };
  r.headers = h;
  r.n_headers = 4;
  r.body = "a=1\0b";
  r.body_len = 5;
  r.user_agent = "tp-test";
  tp_transfer *t;
  const tp_result *res = fetch(&r, &t);
  CT_CHECK(res && res->code == TP_OK, "POST /echo: %s", res ? res->message : "not started");
  if (res && res->code == TP_OK) {
    CT_CHECK(strncmp(res->body, "POST\n", 5) == 0, "method POST, got %.10s", res->body);
    const char *b = strstr(res->body, "X-B: 2\n"), *a = strstr(res->body, "X-A: 1\n");
    CT_CHECK(a && b && b < a, "request headers sent in order: %s", res->body);
    CT_CHECK(strstr(res->body, "X-Empty:") != NULL, "an empty header sent: %s", res->body);
    CT_CHECK(strstr(res->body, "User-Agent: tp-test\n") != NULL, "the user agent: %s", res->body);
    CT_CHECK(strstr(res->body, "Expect") == NULL, "no Expect header: %s", res->body);
    CT_CHECK(res->body_len >= 6 && memcmp(res->body + res->body_len - 6, "\na=1\0b", 6) == 0,
             "the body with its NUL arrives whole");
  }
  tp_release(t);

  /* PUT with a body, DELETE without, POST without (an empty body) */
  static const struct { tp_method m; const char *body; const char *expected; } more[] = {
    { TP_PUT, "data", "PUT\n" }, { TP_DELETE, NULL, "DELETE\n" }, { TP_POST, NULL, "POST\n" },
    { TP_PATCH, "{}", "PATCH\n" },
  };
  for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
    r = request(more[i].m, "/echo");
    r.body = more[i].body;
    r.body_len = r.body ? strlen(r.body) : 0;
    res = fetch(&r, &t);
    CT_CHECK(res && res->code == TP_OK && strncmp(res->body, more[i].expected, strlen(more[i].expected)) == 0,
             "%s: got %s", more[i].expected, res ? res->body : "nothing");
    if (more[i].m == TP_POST && res)
      CT_CHECK(strstr(res->body, "Content-Length: 0\n") != NULL, "POST without a body sends an empty one: %s", res->body);
    tp_release(t);
  }
}

static void test_head(void) {
  tp_request r = request(TP_HEAD, "/big");
  r.max_response_bytes = 1024;
  tp_transfer *t;
  const tp_result *res = fetch(&r, &t);
  CT_CHECK(res && res->code == TP_OK, "HEAD of a resource over the limit: %s", res ? res->message : "not started");
  if (res && res->code == TP_OK) {
    CT_CHECK(res->status == 200 && res->body_len == 0 && res->body[0] == '\0', "HEAD has an empty body");
    CT_EQ_STR("65536", header(res, "Content-Length"));
  }
  tp_release(t);
}

static void test_limits(void) {
  static const char *const paths[] = { "/big", "/big-stream" };
  for (int i = 0; i < 2; i++) {
    tp_request r = request(TP_GET, paths[i]);
    r.max_response_bytes = 1024;
    tp_transfer *t;
    const tp_result *res = fetch(&r, &t);
    CT_CHECK(res && res->code == TP_HTTP_TOO_LARGE && !res->retryable, "%s over 1024 bytes: %s", paths[i],
             res ? res->message : "not started");
    if (res) CT_EQ_STR("the response is larger than the limit of 1024 bytes", res->message);
    tp_release(t);
    r.max_response_bytes = 65536;
    res = fetch(&r, &t);
    CT_CHECK(res && res->code == TP_OK && res->body_len == 65536, "%s at the limit: %s", paths[i],
             res ? res->message : "not started");
    tp_release(t);
  }
}

static void test_timeout(void) {
  tp_request r = request(TP_GET, "/slow");
  r.timeout_ms = 200;
  long long start = ts_now_ms();
  tp_transfer *t;
  const tp_result *res = fetch(&r, &t);
  long long took = ts_now_ms() - start;
  CT_CHECK(res && res->code == TP_HTTP_TIMEOUT && res->retryable, "the request's timeout: %s",
           res ? res->message : "not started");
  if (res) CT_EQ_STR("the request timed out after 200 ms", res->message);
  CT_CHECK(took >= 190 && took < 1500, "ended after 200 ms, took %lld", took);
  tp_release(t);
}

static void test_deadline(void) {
  tp_request r = request(TP_GET, "/slow");
  r.timeout_ms = 10000;
  char err[256];
  int done = 0;
  long long start = ts_now_ms();
  tp_transfer *t = tp_start(tp, &r, on_done, &done, err, sizeof err);
  CT_CHECK(t != NULL, "started: %s", err);
  if (!t) return;
  int rc = tp_wait(t, tp_now_ns() + 200000000LL, NULL);
  long long took = ts_now_ms() - start;
  const tp_result *res = tp_outcome(t);
  CT_CHECK(rc == TP_ENDED && res && res->code == TP_HTTP_TIMEOUT && res->retryable, "the deadline ends it");
  if (res) CT_EQ_STR("the call's deadline passed during the request", res->message);
  CT_CHECK(took >= 190 && took < 1000, "ended at the deadline (200 ms), took %lld", took);
  CT_CHECK(done_count(&done) == 1, "done called once, %d times", done_count(&done));
  tp_release(t);

  /* a deadline already passed ends it at once */
  r = request(TP_GET, "/slow");
  t = tp_start(tp, &r, NULL, NULL, err, sizeof err);
  start = ts_now_ms();
  rc = t ? tp_wait(t, 1, NULL) : -1;
  res = t ? tp_outcome(t) : NULL;
  CT_CHECK(rc == TP_ENDED && res && res->code == TP_HTTP_TIMEOUT && ts_now_ms() - start < 500, "a past deadline");
  tp_release(t);
}

typedef struct later {
  pthread_t thread;
  long ms;
  int *flag;
  tp_transfer *cancel;
} later;

static void *later_main(void *arg) {
  later *l = arg;
  ts_sleep_ms(l->ms);
  if (l->flag) __atomic_store_n(l->flag, 1, __ATOMIC_RELEASE);
  if (l->cancel) tp_cancel(l->cancel);
  return NULL;
}

static void test_stop(void) {
  tp_request r = request(TP_GET, "/slow");
  char err[256];
  int stop = 0, done = 0;
  tp_transfer *t = tp_start(tp, &r, on_done, &done, err, sizeof err);
  CT_CHECK(t != NULL, "started: %s", err);
  if (!t) return;
  later l = { 0, 100, &stop, NULL };
  long long start = ts_now_ms();
  pthread_create(&l.thread, NULL, later_main, &l);
  int rc = tp_wait(t, 0, &stop);
  long long took = ts_now_ms() - start;
  pthread_join(l.thread, NULL);
  CT_CHECK(rc == TP_STOPPED, "the stop flag ends the wait, got %d", rc);
  CT_CHECK(took >= 90 && took < 400, "noticed promptly: %lld ms after 100", took);
  CT_CHECK(tp_outcome(t) == NULL && tp_poll(t, 0) == 0, "the transfer goes on");
  tp_cancel(t);
  start = ts_now_ms();
  rc = tp_wait(t, 0, NULL);
  const tp_result *res = tp_outcome(t);
  CT_CHECK(rc == TP_ENDED && res && res->code == TP_HTTP_CANCELLED && ts_now_ms() - start < 400, "then cancelled");
  CT_CHECK(done_count(&done) == 1, "done called once, %d times", done_count(&done));
  tp_release(t);
}

static void test_cancel(void) {
  tp_request r = request(TP_GET, "/slow");
  char err[256];
  int done = 0;
  tp_transfer *t = tp_start(tp, &r, on_done, &done, err, sizeof err);
  CT_CHECK(t != NULL, "started: %s", err);
  if (!t) return;
  later l = { 0, 100, NULL, t };
  long long start = ts_now_ms();
  pthread_create(&l.thread, NULL, later_main, &l);
  int rc = tp_wait(t, 0, NULL);
  long long took = ts_now_ms() - start;
  pthread_join(l.thread, NULL);
  const tp_result *res = tp_outcome(t);
  CT_CHECK(rc == TP_ENDED && res && res->code == TP_HTTP_CANCELLED && !res->retryable, "tp_cancel ends it");
  if (res) CT_EQ_STR("the request was cancelled", res->message);
  CT_CHECK(took >= 90 && took < 400, "promptly: %lld ms after 100", took);
  tp_cancel(t);
  CT_CHECK(done_count(&done) == 1, "done called once, %d times", done_count(&done));
  tp_release(t);

  /* released while in flight: cancelled, done called before tp_release returns */
  done = 0;
  t = tp_start(tp, &r, on_done, &done, err, sizeof err);
  ts_sleep_ms(50);
  start = ts_now_ms();
  tp_release(t);
  CT_CHECK(done_count(&done) == 1 && ts_now_ms() - start < 400, "released in flight: done %d times", done_count(&done));
}

static void test_many(void) {
  enum { N = 20 };
  tp_transfer *t[N];
  int done[N];
  char err[256];
  long long start = ts_now_ms();
  for (int i = 0; i < N; i++) {
    done[i] = 0;
    tp_request r = request(TP_GET, "/sleep200");
    t[i] = tp_start(tp, &r, on_done, &done[i], err, sizeof err);
    CT_CHECK(t[i] != NULL, "transfer %d: %s", i, err);
  }
  int ok = 0;
  for (int i = 0; i < N; i++) {
    if (!t[i]) continue;
    tp_wait(t[i], 0, NULL);
    const tp_result *res = tp_outcome(t[i]);
    ok += res && res->code == TP_OK && strcmp(res->body, "rested") == 0;
  }
  long long took = ts_now_ms() - start;
  CT_CHECK(ok == N, "%d of %d transfers answered", ok, N);
  /* under valgrind, which runs one thread at a time, the bound is wider;
     one by one they would still take longer */
  long long bound = sx_under_valgrind() ? 3000 : 1500;
  CT_CHECK(took < bound, "20 transfers of 200 ms at once took %lld ms (bound %lld; one by one: 4000)", took, bound);
  for (int i = 0; i < N; i++) {
    CT_CHECK(done_count(&done[i]) == 1, "transfer %d: done called %d times", i, done_count(&done[i]));
    tp_release(t[i]);
  }
}

/* On a transport of its own, whose connection cache starts empty. */
static void test_reuse(void) {
  char err[256];
  tp_transport *shared = tp;
  tp = tp_new(err, sizeof err);
  CT_CHECK(tp != NULL, "tp_new: %s", err);
  if (!tp) {
    tp = shared;
    return;
  }
  tp_request r = request(TP_GET, "/conn");
  tp_transfer *a, *b;
  int before = ts_connections();
  const tp_result *ra = fetch(&r, &a);
  const tp_result *rb = fetch(&r, &b);
  CT_CHECK(ra && rb && ra->code == TP_OK && rb->code == TP_OK, "two requests");
  if (ra && rb && ra->code == TP_OK && rb->code == TP_OK)
    CT_CHECK(strcmp(ra->body, rb->body) == 0, "one connection: served on %s then %s", ra->body, rb->body);
  CT_CHECK(ts_connections() - before == 1, "the server saw %d connections, expected 1", ts_connections() - before);
  tp_release(a);
  tp_release(b);
  tp_free(tp);
  tp = shared;
}

/* Past LIM_HTTP_REUSE_IN_FLIGHT transfers in flight, a new one neither
   looks for a connection to reuse nor leaves its own: two requests one
   after the other get a connection each (below it they share one, above). */
static void test_reuse_bound(void) {
  /* a few more than the bound: one that fails to connect (seen under
     valgrind) leaves the others past it */
  enum { N = LIM_HTTP_REUSE_IN_FLIGHT + 8 };
  char err[256];
  tp_transport *shared = tp;
  tp = tp_new(err, sizeof err);
  tp_transfer **hold = calloc(N, sizeof *hold);
  CT_CHECK(tp != NULL && hold != NULL, "tp_new: %s", err);
  if (!tp || !hold) {
    if (tp) tp_free(tp);
    free(hold);
    tp = shared;
    return;
  }
  int before = ts_connections();
  tp_request held_request = request(TP_GET, "/hold");
  held_request.timeout_ms = 30000;
  int held = 0;
  for (int i = 0; i < N; i++) held += (hold[i] = tp_start(tp, &held_request, NULL, NULL, err, sizeof err)) != NULL;
  CT_CHECK(held == N, "%d of %d transfers started: %s", held, N, err);
  /* once the server took them all (its queue holds 64: the others' SYNs
     are sent again), /conn's connection does not queue behind them */
  long long until = ts_now_ms() + 20000;
  while (ts_connections() - before < N && ts_now_ms() < until) ts_sleep_ms(10);
  CT_CHECK(ts_connections() - before >= LIM_HTTP_REUSE_IN_FLIGHT, "the server took %d of the %d connections",
           ts_connections() - before, N);
  tp_request r = request(TP_GET, "/conn");
  r.timeout_ms = 20000;
  tp_transfer *a, *b;
  const tp_result *ra = fetch(&r, &a);
  const tp_result *rb = fetch(&r, &b);
  CT_CHECK(ra && rb && ra->code == TP_OK && rb->code == TP_OK, "two requests past the bound");
  if (ra && rb && ra->code == TP_OK && rb->code == TP_OK)
    CT_CHECK(strcmp(ra->body, rb->body) != 0, "a connection each: served on %s then %s", ra->body, rb->body);
  int flying = 0;
  for (int i = 0; i < N; i++) flying += hold[i] && !tp_poll(hold[i], 0);
  CT_CHECK(flying >= LIM_HTTP_REUSE_IN_FLIGHT, "%d of the %d transfers were still in flight", flying, N);
  tp_release(a);
  tp_release(b);
  for (int i = 0; i < N; i++) tp_release(hold[i]);
  free(hold);
  tp_free(tp);
  tp = shared;
}

static void test_redirects(void) {
  tp_request r = request(TP_GET, "/redirect");
  tp_transfer *t;
  const tp_result *res = fetch(&r, &t);
  CT_CHECK(res && res->code == TP_OK && res->status == 200 && strcmp(res->body, "hello") == 0 &&
           header(res, "Location") == NULL, "a redirect followed, the last response kept");
  tp_release(t);
  r.max_redirects = 0;
  res = fetch(&r, &t);
  CT_CHECK(res && res->code == TP_OK && res->status == 302, "max_redirects 0: the 302 itself");
  tp_release(t);
  r = request(TP_GET, "/redirect-file");
  res = fetch(&r, &t);
  CT_CHECK(res && res->code == TP_HTTP_ERROR && !res->retryable && strstr(res->message, "redirect"),
           "a redirect to file:// refused: %s", res ? res->message : "not started");
  tp_release(t);
}

static void test_refused(int closed_port) {
  char u[64];
  snprintf(u, sizeof u, "http://127.0.0.1:%d/x", closed_port);
  tp_request r = request(TP_GET, "/");
  r.url = u;
  tp_transfer *t;
  const tp_result *res = fetch(&r, &t);
  CT_CHECK(res && res->code == TP_HTTP_ERROR && res->retryable, "a refused connection is retryable: %s",
           res ? res->message : "not started");
  tp_release(t);
}

typedef struct bad_case {
  const char *name;
  const char *url;                /* NULL: /echo */
  tp_header header;
  tp_method method;
  const char *body;
  long long timeout_ms;
  const char *expected;
} bad_case;

static void test_refusals(void) {
  static const bad_case bad[] = {
    { "file://", "file:///etc/passwd", { 0 }, TP_GET, NULL, 5000, "only http:// and https:// URLs are allowed" },
    { "ftp://", "ftp://127.0.0.1/x", { 0 }, TP_GET, NULL, 5000, "only http:// and https:// URLs are allowed" },
    { "no scheme", "127.0.0.1/x", { 0 }, TP_GET, NULL, 5000, "only http:// and https:// URLs are allowed" },
    { "CR LF in the URL", "http://127.0.0.1/x\r\nX-Evil: 1", { 0 }, TP_GET, NULL, 5000,
      "the URL contains a space or a control character" },
    { "CR LF in a value", NULL, { "X-A", 3, "b\r\nX-Evil: 1", 13 }, TP_GET, NULL, 5000,
      "the value of header 'X-A' contains CR, LF or NUL" },
    { "LF in a value", NULL, { "X-A", 3, "b\nX", 3 }, TP_GET, NULL, 5000,
      "the value of header 'X-A' contains CR, LF or NUL" },
    { "NUL in a value", NULL, { "X-A", 3, "b\0c", 3 }, TP_GET, NULL, 5000,
      "the value of header 'X-A' contains CR, LF or NUL" },
    { "CR LF in a name", NULL, { "X-A\r\nX-Evil", 11, "1", 1 }, TP_GET, NULL, 5000, "a header name contains CR, LF or NUL" },
    { "NUL in a name", NULL, { "X-A\0", 4, "1", 1 }, TP_GET, NULL, 5000, "a header name contains CR, LF or NUL" },
    { "a colon in a name", NULL, { "X-A:", 4, "1", 1 }, TP_GET, NULL, 5000, "the header name 'X-A:' is not a token" },
    { "Content-Length", NULL, { "content-length", 14, "5", 1 }, TP_GET, NULL, 5000,
      "the header 'content-length' is set by the client" },
    { "HEAD with a body", NULL, { 0 }, TP_HEAD, "x", 5000, "a HEAD request has no body" },
    { "no timeout", NULL, { 0 }, TP_GET, NULL, 0, "timeout_ms must be at least 1, not 0" },
  };
  int before = ts_connections();
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tp_request r = request(bad[i].method, "/echo");
    if (bad[i].url) r.url = bad[i].url;
    r.headers = &bad[i].header;
    r.n_headers = bad[i].header.name ? 1 : 0;
    r.body = bad[i].body;
    r.body_len = r.body ? strlen(r.body) : 0;
    r.timeout_ms = bad[i].timeout_ms;
    char err[256] = "";
    int done = 0;
    tp_transfer *t = tp_start(tp, &r, on_done, &done, err, sizeof err);
    CT_CHECK(t == NULL, "%s: refused", bad[i].name);
    CT_CHECK(strcmp(err, bad[i].expected) == 0, "%s: expected \"%s\", got \"%s\"", bad[i].name, bad[i].expected, err);
    CT_CHECK(done == 0, "%s: done never called", bad[i].name);
    tp_release(t);
  }
  ts_sleep_ms(50);
  CT_CHECK(ts_connections() == before, "nothing was sent: %d connections", ts_connections() - before);
}

static int threads(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Before the server runs: no thread until the first request; tp_free joins it. */
static void test_lazy_thread(int closed_port) {
  int before = threads();
  char err[256];
  tp_transport *own = tp_new(err, sizeof err);
  CT_CHECK(own != NULL, "tp_new: %s", err);
  if (!own) return;
  CT_CHECK(threads() == before, "no thread before the first request: %d, then %d", before, threads());
  tp_free(own);
  own = tp_new(err, sizeof err);
  char u[64];
  snprintf(u, sizeof u, "http://127.0.0.1:%d/x", closed_port);
  tp_request r;
  memset(&r, 0, sizeof r);
  r.url = u;
  r.timeout_ms = 1000;
  tp_transfer *t = tp_start(own, &r, NULL, NULL, err, sizeof err);
  /* ThreadSanitizer starts a thread of its own meanwhile: no count then */
#ifndef __SANITIZE_THREAD__
  CT_CHECK(t != NULL && threads() == before + 1, "one I/O thread after the first request: %d", threads() - before);
#endif
  tp_wait(t, 0, NULL);
  tp_release(t);
  tp_free(own);
#ifndef __SANITIZE_THREAD__
  CT_CHECK(threads() == before, "tp_free joined it: %d threads left over", threads() - before);
#endif
}

/* tp_free with transfers in flight, some released, some kept: each ends
   cancelled with its done called once; the kept ones stay readable. */
static void test_free_in_flight(void) {
  enum { N = 6 };
  char err[256];
  tp_transport *own = tp_new(err, sizeof err);
  CT_CHECK(own != NULL, "tp_new: %s", err);
  if (!own) return;
  tp_transfer *t[N];
  int done[N];
  for (int i = 0; i < N; i++) {
    done[i] = 0;
    tp_request r = request(TP_GET, i % 2 ? "/slow" : "/sleep200");
    t[i] = tp_start(own, &r, on_done, &done[i], err, sizeof err);
  }
  ts_sleep_ms(50);
  tp_release(t[0]);
  long long start = ts_now_ms();
  tp_free(own);
  CT_CHECK(ts_now_ms() - start < 1000, "tp_free returns promptly: %lld ms", ts_now_ms() - start);
  for (int i = 0; i < N; i++) {
    CT_CHECK(done_count(&done[i]) == 1, "transfer %d: done called %d times", i, done_count(&done[i]));
    if (i == 0) continue;
    const tp_result *res = tp_outcome(t[i]);
    CT_CHECK(res && res->code == TP_HTTP_CANCELLED, "transfer %d cancelled by tp_free", i);
    CT_CHECK(tp_wait(t[i], 0, NULL) == TP_ENDED, "waiting after tp_free returns");
    tp_release(t[i]);
  }
  /* a transport freed with a transfer started but never taken by its thread */
  own = tp_new(err, sizeof err);
  tp_request r = request(TP_GET, "/text");
  tp_transfer *u = tp_start(own, &r, NULL, NULL, err, sizeof err);
  tp_free(own);
  const tp_result *res = tp_outcome(u);
  CT_CHECK(res && (res->code == TP_HTTP_CANCELLED || res->code == TP_OK), "ended either way");
  tp_release(u);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  ts_unset_proxies();
  int closed_port = 0;
  int closed = ts_bind_loopback(&closed_port);
  close(closed);
  test_lazy_thread(closed_port);

  if (ts_start(route) != 0) {
    fprintf(stderr, "cannot start the test server\n");
    return 1;
  }
  snprintf(url_base, sizeof url_base, "http://127.0.0.1:%d", ts.port);
  char err[256];
  tp = tp_new(err, sizeof err);
  CT_CHECK(tp != NULL, "tp_new: %s", err);
  if (tp) {
    test_get();
    test_post();
    test_head();
    test_limits();
    test_timeout();
    test_deadline();
    test_stop();
    test_cancel();
    test_stream();
    test_many();
    test_reuse();
    test_reuse_bound();
    test_redirects();
    test_refused(closed_port);
    test_refusals();
    test_free_in_flight();
    tp_free(tp);
  }
  ts_stop();
  return ct_finish("transport");
}
