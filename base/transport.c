/*
 * The HTTP transport: transfers handed to one I/O thread that drives a CURLM
 * with curl_multi_poll. Each transfer has its own lock and condvar, so that a
 * caller may keep one after tp_free; the transport's lock guards the queue of
 * new transfers and the flags the I/O thread reads.
 */
#include "transport.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "strbuf.h"

#define TP_MESSAGE_MAX (CURL_ERROR_SIZE + 160)
#define TP_SLICE_NS 10000000LL     /* how often tp_wait looks at *stop */
#define TP_POLL_MS 1000            /* curl_multi_poll's longest sleep while transfers run */

struct tp_transport {
  pthread_mutex_t lock;
  pthread_cond_t cond;             /* wakes the I/O thread while it has no transfer */
  CURLM *multi;                    /* made with the thread, at the first tp_start */
  pthread_t thread;
  int started, stopping;           /* under lock */
  int cancel_asked;                /* under lock: some transfer has an end_code */
  tp_transfer *pending, *pending_tail;   /* under lock: started, not yet taken by the I/O thread */
};

/* Until `ended`, the I/O thread owns everything but the fields under lock;
   once `ended` is set the I/O thread never touches the transfer again. */
struct tp_transfer {
  pthread_mutex_t lock;
  pthread_cond_t cond;             /* broadcast when ended */
  int ended;                       /* under lock */
  tp_code end_code;                /* under lock: an end a caller asked for; TP_OK: none */
  const char *end_message;
  tp_transport *tp;                /* valid while not ended */
  void (*done)(void *ud);
  void *ud;

  CURL *curl;
  struct curl_slist *headers;
  int added;                       /* in the multi */
  tp_transfer *next, *prev;        /* the pending queue, then the I/O thread's active list */
  sb_buf head, body;
  size_t max_response;
  long long timeout_ms;
  int too_large, out_of_memory;
  char error[CURL_ERROR_SIZE];

  tp_result result;
  tp_header *result_headers;
  char *header_text;
  char message[TP_MESSAGE_MAX];
};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CURLcode init_result;

/* curl_global_init is not thread-safe: the first transport of the process runs it. */
static void global_init(void) {
  init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

long long tp_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

const char *tp_code_name(tp_code code) {
  switch (code) {
    case TP_OK: return "OK";
    case TP_HTTP_ERROR: return "HTTP_ERROR";
    case TP_HTTP_TIMEOUT: return "HTTP_TIMEOUT";
    case TP_HTTP_TOO_LARGE: return "HTTP_TOO_LARGE";
    case TP_HTTP_CANCELLED: return "HTTP_CANCELLED";
  }
  return "HTTP_ERROR";
}

static void say(char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;

static void say(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* A condvar on CLOCK_MONOTONIC, the clock of every deadline here. */
static int cond_init(pthread_cond_t *c) {
  pthread_condattr_t a;
  if (pthread_condattr_init(&a) != 0) return -1;
  int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  if (rc == 0) rc = pthread_cond_init(c, &a);
  pthread_condattr_destroy(&a);
  return rc;
}

static void timed_wait(pthread_cond_t *c, pthread_mutex_t *m, long long until_ns) {
  struct timespec ts = { (time_t)(until_ns / 1000000000LL), (long)(until_ns % 1000000000LL) };
  pthread_cond_timedwait(c, m, &ts);
}

/* ---- tp_new, tp_free ---- */

tp_transport *tp_new(char *err, size_t errlen) {
  pthread_once(&init_once, global_init);
  if (init_result != CURLE_OK) {
    say(err, errlen, "libcurl cannot start: %s", curl_easy_strerror(init_result));
    return NULL;
  }
  tp_transport *tp = calloc(1, sizeof *tp);
  if (!tp) {
    say(err, errlen, "out of memory");
    return NULL;
  }
  if (pthread_mutex_init(&tp->lock, NULL) != 0) {
    free(tp);
    say(err, errlen, "cannot make a lock");
    return NULL;
  }
  if (cond_init(&tp->cond) != 0) {
    pthread_mutex_destroy(&tp->lock);
    free(tp);
    say(err, errlen, "cannot make a condition variable");
    return NULL;
  }
  return tp;
}

void tp_free(tp_transport *tp) {
  if (!tp) return;
  pthread_mutex_lock(&tp->lock);
  int started = tp->started;
  tp->stopping = 1;
  pthread_cond_signal(&tp->cond);
  pthread_mutex_unlock(&tp->lock);
  if (started) {
    curl_multi_wakeup(tp->multi);
    pthread_join(tp->thread, NULL);
    curl_multi_cleanup(tp->multi);
  }
  pthread_cond_destroy(&tp->cond);
  pthread_mutex_destroy(&tp->lock);
  free(tp);
}

/* ---- the I/O thread's side of a transfer: no caller's lock is held here ---- */

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
  tp_transfer *t = ud;
  size_t len = size * n;
  if (len > t->max_response - t->body.len) {
    t->too_large = 1;
    return 0;
  }
  sb_add(&t->body, data, len);
  if (t->body.failed) {
    t->out_of_memory = 1;
    return 0;
  }
  return len;
}

static void sb_reset(sb_buf *b) {
  b->len = 0;
  if (b->data) b->data[0] = '\0';
}

/* Each response (a redirect, a 1xx) starts with its status line: only the
   last one's headers and body are kept. */
static size_t on_header(char *data, size_t size, size_t n, void *ud) {
  tp_transfer *t = ud;
  size_t len = size * n;
  if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
    sb_reset(&t->head);
    sb_reset(&t->body);
  }
  if (len > t->max_response - t->head.len) {
    t->too_large = 1;
    return 0;
  }
  sb_add(&t->head, data, len);
  if (t->head.failed) {
    t->out_of_memory = 1;
    return 0;
  }
  return len;
}

static int is_space(char c) {
  return c == ' ' || c == '\t';
}

/* Splits the header block into t->result_headers, names and values trimmed
   and NUL-terminated in t->header_text: each raw line is at least as long
   as what it becomes, so head.len + 1 bytes are enough. */
static int split_headers(tp_transfer *t) {
  const char *p = t->head.data, *end = p ? p + t->head.len : NULL;
  size_t lines = 1;
  for (const char *c = p; c && c < end; c++) lines += *c == '\n';
  t->header_text = malloc(t->head.len + 1);
  t->result_headers = malloc(lines * sizeof *t->result_headers);
  if (!t->header_text || !t->result_headers) return -1;
  char *out = t->header_text;
  size_t n = 0;
  tp_header *open = NULL;          /* the header whose value is still being written */
  while (p && p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    const char *next = eol ? eol + 1 : end;
    const char *e = eol ? eol : end;
    while (e > p && (e[-1] == '\r' || is_space(e[-1]))) e--;
    if (e == p || (e - p >= 5 && memcmp(p, "HTTP/", 5) == 0)) {
      p = next;
      continue;
    }
    if (is_space(*p)) {
      while (p < e && is_space(*p)) p++;
      if (open) {
        *out++ = ' ';
        memcpy(out, p, (size_t)(e - p));
        out += e - p;
        open->value_len += 1 + (size_t)(e - p);
      }
      p = next;
      continue;
    }
    const char *colon = memchr(p, ':', (size_t)(e - p));
    if (!colon || colon == p) {
      p = next;
      continue;
    }
    if (open) *out++ = '\0';
    const char *v = colon + 1;
    while (v < e && is_space(*v)) v++;
    open = &t->result_headers[n++];
    open->name = out;
    open->name_len = (size_t)(colon - p);
    memcpy(out, p, open->name_len);
    out += open->name_len;
    *out++ = '\0';
    open->value = out;
    open->value_len = (size_t)(e - v);
    memcpy(out, v, open->value_len);
    out += open->value_len;
    p = next;
  }
  *out = '\0';
  t->result.headers = t->result_headers;
  t->result.n_headers = n;
  return 0;
}

static void set_end(tp_transfer *t, tp_code code, int retryable, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 4, 5)))
#endif
  ;

static void set_end(tp_transfer *t, tp_code code, int retryable, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->message, sizeof t->message, fmt, ap);
  va_end(ap);
  t->result.code = code;
  t->result.retryable = retryable;
}

static int connection_failure(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_PROXY: case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR: case CURLE_RECV_ERROR: case CURLE_GOT_NOTHING: case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR: case CURLE_HTTP2: case CURLE_HTTP2_STREAM: case CURLE_HTTP3:
      return 1;
    default:
      return 0;
  }
}

/* The outcome of a transfer libcurl finished with rc. */
static void classify(tp_transfer *t, CURLcode rc) {
  const char *why = t->error[0] ? t->error : curl_easy_strerror(rc);
  if (t->too_large || rc == CURLE_FILESIZE_EXCEEDED) {
    set_end(t, TP_HTTP_TOO_LARGE, 0, "the response is larger than the limit of %zu bytes", t->max_response);
  } else if (t->out_of_memory) {
    set_end(t, TP_HTTP_ERROR, 0, "out of memory while reading the response");
  } else if (rc == CURLE_OK) {
    set_end(t, TP_OK, 0, "%s", "");
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &t->result.status);
  } else if (rc == CURLE_OPERATION_TIMEDOUT) {
    set_end(t, TP_HTTP_TIMEOUT, 1, "the request timed out after %lld ms", t->timeout_ms);
  } else if (rc == CURLE_UNSUPPORTED_PROTOCOL) {
    /* the URL itself was checked: this is where a redirect led */
    set_end(t, TP_HTTP_ERROR, 0, "a redirect led to a URL that is not http:// or https:// (%s)", why);
  } else {
    set_end(t, TP_HTTP_ERROR, connection_failure(rc), "the request failed: %s", why);
  }
}

/* Ends t (its outcome set): frees what libcurl held, runs done, then marks
   it ended, after which this thread never touches it again. */
static void finish(tp_transport *tp, tp_transfer *t, tp_transfer **active) {
  if (t->added) {
    curl_multi_remove_handle(tp->multi, t->curl);
    t->added = 0;
    if (t->prev) t->prev->next = t->next;
    else *active = t->next;
    if (t->next) t->next->prev = t->prev;
  }
  curl_easy_cleanup(t->curl);
  t->curl = NULL;
  curl_slist_free_all(t->headers);
  t->headers = NULL;
  if (t->result.code == TP_OK) {
    if (split_headers(t) != 0) {
      set_end(t, TP_HTTP_ERROR, 0, "out of memory while reading the response");
    } else {
      t->result.body = sb_str(&t->body);
      t->result.body_len = t->body.len;
    }
  }
  if (t->result.code != TP_OK) {
    t->result.status = 0;
    t->result.headers = NULL;
    t->result.n_headers = 0;
    t->result.body = "";
    t->result.body_len = 0;
  }
  t->result.message = t->message;
  sb_free(&t->head);
  if (t->done) t->done(t->ud);
  pthread_mutex_lock(&t->lock);
  t->ended = 1;
  pthread_cond_broadcast(&t->cond);
  pthread_mutex_unlock(&t->lock);
}

/* Ends t the way a caller asked, if one did. */
static int end_if_asked(tp_transport *tp, tp_transfer *t, tp_transfer **active) {
  pthread_mutex_lock(&t->lock);
  tp_code code = t->end_code;
  const char *message = t->end_message;
  pthread_mutex_unlock(&t->lock);
  if (code == TP_OK) return 0;
  set_end(t, code, code == TP_HTTP_TIMEOUT, "%s", message);
  finish(tp, t, active);
  return 1;
}

static void *io_main(void *arg) {
  tp_transport *tp = arg;
  tp_transfer *active = NULL;
  for (;;) {
    pthread_mutex_lock(&tp->lock);
    while (!tp->pending && !tp->stopping && !tp->cancel_asked && !active)
      pthread_cond_wait(&tp->cond, &tp->lock);
    tp_transfer *fresh = tp->pending;
    tp->pending = tp->pending_tail = NULL;
    int stopping = tp->stopping, cancels = tp->cancel_asked;
    tp->cancel_asked = 0;
    pthread_mutex_unlock(&tp->lock);

    while (fresh) {
      tp_transfer *t = fresh;
      fresh = t->next;
      t->next = t->prev = NULL;
      if (stopping) {
        set_end(t, TP_HTTP_CANCELLED, 0, "the transport was closed before the request was sent");
        finish(tp, t, &active);
      } else if (!end_if_asked(tp, t, &active)) {
        CURLMcode mc = curl_multi_add_handle(tp->multi, t->curl);
        if (mc != CURLM_OK) {
          set_end(t, TP_HTTP_ERROR, 0, "libcurl cannot run the request: %s", curl_multi_strerror(mc));
          finish(tp, t, &active);
          continue;
        }
        t->added = 1;
        t->next = active;
        if (active) active->prev = t;
        active = t;
      }
    }
    if (stopping) {
      while (active) {
        set_end(active, TP_HTTP_CANCELLED, 0, "the transport was closed while the request was in flight");
        finish(tp, active, &active);
      }
      return NULL;
    }
    if (cancels)
      for (tp_transfer *t = active, *next; t; t = next) {
        next = t->next;
        end_if_asked(tp, t, &active);
      }
    int running;
    curl_multi_perform(tp->multi, &running);
    CURLMsg *m;
    int queued;
    while ((m = curl_multi_info_read(tp->multi, &queued))) {
      if (m->msg != CURLMSG_DONE) continue;
      CURLcode rc = m->data.result;
      char *priv = NULL;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
      tp_transfer *t = (tp_transfer *)(void *)priv;
      classify(t, rc);
      finish(tp, t, &active);
    }
    if (active) curl_multi_poll(tp->multi, NULL, 0, TP_POLL_MS, NULL);
  }
}

/* ---- tp_start ---- */

static int prefix_ci(const char *s, const char *prefix) {
  for (; *prefix; s++, prefix++) {
    char c = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s;
    if (c != *prefix) return 0;
  }
  return 1;
}

static int equal_ci(const char *a, size_t alen, const char *b) {
  return strlen(b) == alen && prefix_ci(a, b);
}

/* A header name is an RFC 9110 token. */
static int is_token(const char *s, size_t len) {
  if (len == 0) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) continue;
    if (!c || !strchr("!#$%&'*+-.^_`|~", c)) return 0;
  }
  return 1;
}

static int has_line_break(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0') return 1;
  return 0;
}

static const char *const method_names[] = { "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD" };

/* Checks r; 0, or -1 with the reason in err. */
static int check_request(const tp_request *r, char *err, size_t errlen) {
  if ((unsigned)r->method > TP_HEAD) {
    say(err, errlen, "the method must be one of GET, POST, PUT, PATCH, DELETE, HEAD");
    return -1;
  }
  if (!r->url || (!prefix_ci(r->url, "http://") && !prefix_ci(r->url, "https://"))) {
    say(err, errlen, "only http:// and https:// URLs are allowed");
    return -1;
  }
  for (const char *c = r->url; *c; c++)
    if ((unsigned char)*c <= ' ' || *c == 0x7f) {
      say(err, errlen, "the URL contains a space or a control character");
      return -1;
    }
  if (r->method == TP_HEAD && r->body) {
    say(err, errlen, "a HEAD request has no body");
    return -1;
  }
  if (r->timeout_ms <= 0) {
    say(err, errlen, "timeout_ms must be at least 1, not %lld", r->timeout_ms);
    return -1;
  }
  for (size_t i = 0; i < r->n_headers; i++) {
    const tp_header *h = &r->headers[i];
    int shown = (int)(h->name_len > 64 ? 64 : h->name_len);
    if (!h->name || has_line_break(h->name, h->name_len)) {
      say(err, errlen, "a header name contains CR, LF or NUL");
      return -1;
    }
    if (!is_token(h->name, h->name_len)) {
      say(err, errlen, "the header name '%.*s' is not a token", shown, h->name);
      return -1;
    }
    if ((!h->value && h->value_len) || (h->value && has_line_break(h->value, h->value_len))) {
      say(err, errlen, "the value of header '%.*s' contains CR, LF or NUL", shown, h->name);
      return -1;
    }
    if (equal_ci(h->name, h->name_len, "content-length") || equal_ci(h->name, h->name_len, "transfer-encoding")) {
      say(err, errlen, "the header '%.*s' is set by the client", shown, h->name);
      return -1;
    }
  }
  return 0;
}

static int add_line(tp_transfer *t, const char *line) {
  struct curl_slist *more = curl_slist_append(t->headers, line);
  if (!more) return -1;
  t->headers = more;
  return 0;
}

/* The caller's headers, then "Content-Type:" and "Expect:" (libcurl's way to
   send none) unless given: a body goes without the form type libcurl would
   add, and waiting for "100 Continue" costs a round trip. */
static int build_headers(tp_transfer *t, const tp_request *r) {
  int content_type = 0, expect = 0;
  for (size_t i = 0; i < r->n_headers; i++) {
    const tp_header *h = &r->headers[i];
    if (equal_ci(h->name, h->name_len, "content-type")) content_type = 1;
    if (equal_ci(h->name, h->name_len, "expect")) expect = 1;
    sb_buf line;
    sb_init(&line);
    sb_add(&line, h->name, h->name_len);
    /* "Name;" is libcurl's way to send a header with an empty value */
    if (h->value_len) {
      sb_add(&line, ": ", 2);
      sb_add(&line, h->value, h->value_len);
    } else {
      sb_addc(&line, ';');
    }
    int rc = line.failed ? -1 : add_line(t, line.data);
    sb_free(&line);
    if (rc) return -1;
  }
  if (r->body && !content_type && add_line(t, "Content-Type:")) return -1;
  if (r->body && !expect && add_line(t, "Expect:")) return -1;
  return 0;
}

#define SET(opt, value) do { if (rc == CURLE_OK) rc = curl_easy_setopt(c, opt, value); } while (0)

static CURLcode configure(tp_transfer *t, const tp_request *r) {
  CURL *c = t->curl;
  CURLcode rc = CURLE_OK;
  SET(CURLOPT_PRIVATE, (char *)(void *)t);
  SET(CURLOPT_ERRORBUFFER, t->error);
  SET(CURLOPT_URL, r->url);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_FOLLOWLOCATION, r->max_redirects > 0 ? 1L : 0L);
  SET(CURLOPT_MAXREDIRS, r->max_redirects > 0 ? r->max_redirects : 0L);
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_TIMEOUT_MS, r->timeout_ms > LONG_MAX ? LONG_MAX : (long)r->timeout_ms);
  if (r->user_agent) SET(CURLOPT_USERAGENT, r->user_agent);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, t);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, t);
  if (t->headers) SET(CURLOPT_HTTPHEADER, t->headers);
  /* a HEAD of a large resource is fine: libcurl checks the size against Content-Length */
  if (r->method != TP_HEAD && t->max_response <= (size_t)LLONG_MAX)
    SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)t->max_response);
  if (r->method == TP_HEAD) {
    SET(CURLOPT_NOBODY, 1L);
  } else if (r->body || r->method == TP_POST) {
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(r->body ? r->body_len : 0));
    SET(CURLOPT_COPYPOSTFIELDS, r->body ? r->body : "");
    if (r->method != TP_POST) SET(CURLOPT_CUSTOMREQUEST, method_names[r->method]);
  } else if (r->method != TP_GET) {
    SET(CURLOPT_CUSTOMREQUEST, method_names[r->method]);
  }
  return rc;
}

static void transfer_free(tp_transfer *t) {
  if (t->curl) curl_easy_cleanup(t->curl);
  curl_slist_free_all(t->headers);
  sb_free(&t->head);
  sb_free(&t->body);
  free(t->result_headers);
  free(t->header_text);
  pthread_cond_destroy(&t->cond);
  pthread_mutex_destroy(&t->lock);
  free(t);
}

/* Starts the I/O thread (and makes the multi) if it is not running; under tp->lock. */
static int start_thread(tp_transport *tp, char *err, size_t errlen) {
  if (tp->started) return 0;
  if (tp->stopping) {
    say(err, errlen, "the transport is closed");
    return -1;
  }
  tp->multi = curl_multi_init();
  if (!tp->multi) {
    say(err, errlen, "libcurl cannot make a multi handle");
    return -1;
  }
  if (pthread_create(&tp->thread, NULL, io_main, tp) != 0) {
    curl_multi_cleanup(tp->multi);
    tp->multi = NULL;
    say(err, errlen, "cannot start the transport's I/O thread");
    return -1;
  }
  tp->started = 1;
  return 0;
}

tp_transfer *tp_start(tp_transport *tp, const tp_request *r, void (*done)(void *ud), void *ud,
                      char *err, size_t errlen) {
  if (check_request(r, err, errlen) != 0) return NULL;
  tp_transfer *t = calloc(1, sizeof *t);
  if (!t) {
    say(err, errlen, "out of memory");
    return NULL;
  }
  if (pthread_mutex_init(&t->lock, NULL) != 0) {
    free(t);
    say(err, errlen, "cannot make a lock");
    return NULL;
  }
  if (cond_init(&t->cond) != 0) {
    pthread_mutex_destroy(&t->lock);
    free(t);
    say(err, errlen, "cannot make a condition variable");
    return NULL;
  }
  t->tp = tp;
  t->done = done;
  t->ud = ud;
  t->end_code = TP_OK;
  sb_init(&t->head);
  sb_init(&t->body);
  t->max_response = r->max_response_bytes ? r->max_response_bytes : SIZE_MAX;
  t->timeout_ms = r->timeout_ms;
  t->curl = curl_easy_init();
  if (!t->curl) {
    say(err, errlen, "libcurl cannot make a request");
    transfer_free(t);
    return NULL;
  }
  if (build_headers(t, r) != 0) {
    say(err, errlen, "out of memory");
    transfer_free(t);
    return NULL;
  }
  CURLcode rc = configure(t, r);
  if (rc != CURLE_OK) {
    say(err, errlen, "libcurl refused an option: %s", curl_easy_strerror(rc));
    transfer_free(t);
    return NULL;
  }
  pthread_mutex_lock(&tp->lock);
  if (start_thread(tp, err, errlen) != 0) {
    pthread_mutex_unlock(&tp->lock);
    transfer_free(t);
    return NULL;
  }
  if (tp->pending_tail) tp->pending_tail->next = t;
  else tp->pending = t;
  tp->pending_tail = t;
  pthread_cond_signal(&tp->cond);
  pthread_mutex_unlock(&tp->lock);
  curl_multi_wakeup(tp->multi);
  return t;
}

/* ---- waiting, cancelling, releasing ---- */

/* Asks the I/O thread to end t; under t->lock, t not ended (so that the
   transport is still there: tp_free ends every transfer before it goes). */
static void ask_end(tp_transfer *t, tp_code code, const char *message) {
  if (t->end_code != TP_OK) return;
  t->end_code = code;
  t->end_message = message;
  tp_transport *tp = t->tp;
  pthread_mutex_lock(&tp->lock);
  tp->cancel_asked = 1;
  pthread_cond_signal(&tp->cond);
  pthread_mutex_unlock(&tp->lock);
  curl_multi_wakeup(tp->multi);
}

int tp_wait(tp_transfer *t, long long deadline_ns, const int *stop) {
  pthread_mutex_lock(&t->lock);
  while (!t->ended) {
    if (t->end_code == TP_OK) {
      if (stop && *(const volatile int *)stop) {
        pthread_mutex_unlock(&t->lock);
        return TP_STOPPED;
      }
      long long now = tp_now_ns();
      if (deadline_ns && now >= deadline_ns) {
        ask_end(t, TP_HTTP_TIMEOUT, "the call's deadline passed during the request");
        continue;
      }
      long long until = now + TP_SLICE_NS;
      timed_wait(&t->cond, &t->lock, deadline_ns && deadline_ns < until ? deadline_ns : until);
    } else {
      /* an end was asked: the I/O thread is about to stop t */
      timed_wait(&t->cond, &t->lock, tp_now_ns() + TP_SLICE_NS);
    }
  }
  pthread_mutex_unlock(&t->lock);
  return TP_ENDED;
}

int tp_poll(tp_transfer *t, long long until_ns) {
  pthread_mutex_lock(&t->lock);
  while (!t->ended && until_ns && tp_now_ns() < until_ns) timed_wait(&t->cond, &t->lock, until_ns);
  int ended = t->ended;
  pthread_mutex_unlock(&t->lock);
  return ended;
}

void tp_cancel(tp_transfer *t) {
  pthread_mutex_lock(&t->lock);
  if (!t->ended) ask_end(t, TP_HTTP_CANCELLED, "the request was cancelled");
  pthread_mutex_unlock(&t->lock);
}

const tp_result *tp_outcome(tp_transfer *t) {
  pthread_mutex_lock(&t->lock);
  int ended = t->ended;
  pthread_mutex_unlock(&t->lock);
  return ended ? &t->result : NULL;
}

void tp_release(tp_transfer *t) {
  if (!t) return;
  pthread_mutex_lock(&t->lock);
  if (!t->ended) ask_end(t, TP_HTTP_CANCELLED, "the request was released before it ended");
  while (!t->ended) pthread_cond_wait(&t->cond, &t->lock);
  pthread_mutex_unlock(&t->lock);
  transfer_free(t);
}
