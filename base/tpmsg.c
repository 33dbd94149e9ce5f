/*
 * The messages of a transfer, transport.c's Lua-free other half: a request
 * checked and turned into libcurl options, the response read into buffers
 * and its header block split, and libcurl's outcome named with a code and a
 * one-line message.
 */
#include "tpmsg.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

void tpm_say(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* The libcurl callbacks, on the I/O thread: the limit holds for the body and
   for the header block alike. */
/* A stream's piece: the head is split at the first one (the last
   response's headers are complete then), the bytes queued for tp_read. */
static size_t on_stream(tp_transfer *t, char *data, size_t len) {
  if (!t->head_known) {
    long status = 0;
    cu.easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    if (tpm_split_headers(t) != 0) {
      t->out_of_memory = 1;
      return 0;
    }
    pthread_mutex_lock(&t->lock);
    t->head_status = status;
    t->head_n = t->result.n_headers;
    t->head_known = 1;
    pthread_mutex_unlock(&t->lock);
  }
  pthread_mutex_lock(&t->lock);
  size_t unread = t->queue.len - t->queue_at;
  if (unread && (unread >= t->max_response || len > t->max_response - unread)) {
    t->paused = 1;
    pthread_mutex_unlock(&t->lock);
    return CURL_WRITEFUNC_PAUSE;
  }
  /* moved down once the read part is the larger: amortized, and the buffer
     stays within twice the bound */
  if (t->queue_at && t->queue_at >= unread) {
    memmove(t->queue.data, t->queue.data + t->queue_at, unread);
    t->queue.len = unread;
    t->queue_at = 0;
  }
  sb_add(&t->queue, data, len);
  int failed = t->queue.failed;
  pthread_mutex_unlock(&t->lock);
  if (failed) {
    t->out_of_memory = 1;
    return 0;
  }
  if (t->on_data) t->on_data(t->ud);
  return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
  tp_transfer *t = ud;
  size_t len = size * n;
  if (t->stream) return on_stream(t, data, len);
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
int tpm_split_headers(tp_transfer *t) {
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

void tpm_set_end(tp_transfer *t, tp_code code, int retryable, const char *fmt, ...) {
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
void tpm_classify(tp_transfer *t, CURLcode rc) {
  const char *why = t->error[0] ? t->error : cu.easy_strerror(rc);
  if (t->too_large || rc == CURLE_FILESIZE_EXCEEDED) {
    tpm_set_end(t, TP_HTTP_TOO_LARGE, 0, "the response is larger than the limit of %zu bytes", t->max_response);
  } else if (t->out_of_memory) {
    tpm_set_end(t, TP_HTTP_ERROR, 0, "out of memory while reading the response");
  } else if (rc == CURLE_OK) {
    tpm_set_end(t, TP_OK, 0, "%s", "");
    cu.easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &t->result.status);
  } else if (rc == CURLE_OPERATION_TIMEDOUT) {
    tpm_set_end(t, TP_HTTP_TIMEOUT, 1, "the request timed out after %lld ms", t->timeout_ms);
  } else if (rc == CURLE_UNSUPPORTED_PROTOCOL) {
    /* the URL itself was checked: this is where a redirect led */
    tpm_set_end(t, TP_HTTP_ERROR, 0, "a redirect led to a URL that is not http:// or https:// (%s)", why);
  } else {
    tpm_set_end(t, TP_HTTP_ERROR, connection_failure(rc), "the request failed: %s", why);
  }
}

/* ---- the request ---- */

int tp_equal_ci(const char *a, size_t alen, const char *b) {
  if (strlen(b) != alen) return 0;
  for (size_t i = 0; i < alen; i++)
    if (u8_lower_ascii(a[i]) != u8_lower_ascii(b[i])) return 0;
  return 1;
}

int tp_prefix_ci(const char *s, size_t len, const char *prefix) {
  size_t n = strlen(prefix);
  return len >= n && tp_equal_ci(s, n, prefix);
}

int tp_is_token(const char *s, size_t len) {
  if (len == 0) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) continue;
    if (!c || !strchr("!#$%&'*+-.^_`|~", c)) return 0;
  }
  return 1;
}

int tp_has_line_break(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0') return 1;
  return 0;
}

static const char *const method_names[] = { "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD" };

/* Checks r; 0, or -1 with the reason in err. */
int tpm_check(const tp_request *r, char *err, size_t errlen) {
  if ((unsigned)r->method > TP_HEAD) {
    tpm_say(err, errlen, "the method must be one of GET, POST, PUT, PATCH, DELETE, HEAD");
    return -1;
  }
  if (!r->url || (!tp_prefix_ci(r->url, strlen(r->url), "http://") && !tp_prefix_ci(r->url, strlen(r->url), "https://"))) {
    tpm_say(err, errlen, "only http:// and https:// URLs are allowed");
    return -1;
  }
  for (const char *c = r->url; *c; c++)
    if ((unsigned char)*c <= ' ' || *c == 0x7f) {
      tpm_say(err, errlen, "the URL contains a space or a control character");
      return -1;
    }
  if (r->method == TP_HEAD && r->body) {
    tpm_say(err, errlen, "a HEAD request has no body");
    return -1;
  }
  if (r->timeout_ms <= 0) {
    tpm_say(err, errlen, "timeout_ms must be at least 1, not %lld", r->timeout_ms);
    return -1;
  }
  for (size_t i = 0; i < r->n_headers; i++) {
    const tp_header *h = &r->headers[i];
    int shown = (int)(h->name_len > 64 ? 64 : h->name_len);
    if (!h->name || tp_has_line_break(h->name, h->name_len)) {
      tpm_say(err, errlen, "a header name contains CR, LF or NUL");
      return -1;
    }
    if (!tp_is_token(h->name, h->name_len)) {
      tpm_say(err, errlen, "the header name '%.*s' is not a token", shown, h->name);
      return -1;
    }
    if ((!h->value && h->value_len) || (h->value && tp_has_line_break(h->value, h->value_len))) {
      tpm_say(err, errlen, "the value of header '%.*s' contains CR, LF or NUL", shown, h->name);
      return -1;
    }
    if (tp_equal_ci(h->name, h->name_len, "content-length") || tp_equal_ci(h->name, h->name_len, "transfer-encoding")) {
      tpm_say(err, errlen, "the header '%.*s' is set by the client", shown, h->name);
      return -1;
    }
  }
  return 0;
}

static int add_line(tp_transfer *t, const char *line) {
  struct curl_slist *more = cu.slist_append(t->headers, line);
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
    if (tp_equal_ci(h->name, h->name_len, "content-type")) content_type = 1;
    if (tp_equal_ci(h->name, h->name_len, "expect")) expect = 1;
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

#define SET(opt, value) do { if (rc == CURLE_OK) rc = cu.easy_setopt(c, opt, value); } while (0)

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
  if (r->method != TP_HEAD && !r->stream && t->max_response <= (size_t)LLONG_MAX)
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

int tpm_prepare(tp_transfer *t, const tp_request *r, char *err, size_t errlen) {
  if (build_headers(t, r) != 0) {
    tpm_say(err, errlen, "out of memory");
    return -1;
  }
  CURLcode rc = configure(t, r);
  if (rc != CURLE_OK) {
    tpm_say(err, errlen, "libcurl refused an option: %s", cu.easy_strerror(rc));
    return -1;
  }
  return 0;
}
