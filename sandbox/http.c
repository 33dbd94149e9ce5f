/*
 * luma.http on libcurl. Each request has an easy handle of its own, owned
 * with every other C buffer by a transfer userdata: a Lua error at any point
 * (a bad argument, or a state out of memory while the result is built) cannot
 * leak them, as __gc frees them. No Lua value is made while libcurl runs;
 * the result is built after curl_easy_perform returned, and the C side is
 * closed before an error is raised.
 */
#include "http.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#if LUA_VERSION_NUM >= 504
#include <curl/curl.h>

#include "compat.h"
#include "json.h"
#include "ljson.h"
#include "strbuf.h"

/* Upvalue 1 of request, get and post. */
typedef struct sh_config {
  sh_deadline_fn deadline;
  sh_limits limits;
} sh_config;

/* One request. Every pointer is NULL (or every buffer empty) once closed. */
typedef struct sh_transfer {
  CURL *curl;
  struct curl_slist *headers;
  sb_buf request;                 /* a table body, encoded as JSON */
  sb_buf body;
  sb_buf head;                    /* the header lines of the last response */
  ar_arena arena;                 /* the decoded JSON of the response */
  lua_State *L;
  sh_deadline_fn deadline;
  size_t max_response;
  int too_large, expired, out_of_memory;
  char error[CURL_ERROR_SIZE];
} sh_transfer;

/* What the caller asked for, as indices of values kept on the stack. */
typedef struct sh_request {
  const char *method;             /* one of `methods` */
  const char *url;
  size_t url_len;
  int headers;                    /* a table, or 0 */
  int body;                       /* a string or a table, or 0 */
  long long timeout_ms;           /* 0: the limit's */
} sh_request;

static const char *const methods[] = { "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", NULL };

static const char *const request_options[] = { "method", "url", "headers", "body", "timeout_ms", NULL };
static const char *const call_options[] = { "headers", "timeout_ms", NULL };

/* curl_global_init is not thread-safe: the first request of the process runs it. */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CURLcode init_result;

static void global_init(void) {
  init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static pthread_mutex_t pusher_lock = PTHREAD_MUTEX_INITIALIZER;
static sh_error_pusher pusher;    /* guarded by pusher_lock; NULL: plain tables */

void sh_set_error_pusher(sh_error_pusher push) {
  pthread_mutex_lock(&pusher_lock);
  pusher = push;
  pthread_mutex_unlock(&pusher_lock);
}

static void push_error(lua_State *L, const char *code, const char *message, int retryable) {
  pthread_mutex_lock(&pusher_lock);
  sh_error_pusher push = pusher;
  pthread_mutex_unlock(&pusher_lock);
  if (push) {
    int top = lua_gettop(L);
    push(L, code, message, retryable);
    lua_settop(L, top + 1);
    return;
  }
  lua_createtable(L, 0, 3);
  lua_pushstring(L, code);
  lua_setfield(L, -2, "code");
  lua_pushstring(L, message);
  lua_setfield(L, -2, "message");
  lua_pushboolean(L, retryable);
  lua_setfield(L, -2, "retryable");
}

static void transfer_close(sh_transfer *t) {
  if (t->curl) curl_easy_cleanup(t->curl);
  t->curl = NULL;
  curl_slist_free_all(t->headers);
  t->headers = NULL;
  sb_free(&t->request);
  sb_free(&t->body);
  sb_free(&t->head);
  ar_free(&t->arena);
}

static int transfer_gc(lua_State *L) {
  transfer_close(lua_touserdata(L, 1));
  return 0;
}

/* Closes t (when there is one), then raises; the message is formatted first,
   as its arguments may point into t. */
static int fail(lua_State *L, sh_transfer *t, const char *code, int retryable, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 5, 6)))
#endif
  ;

static int fail(lua_State *L, sh_transfer *t, const char *code, int retryable, const char *fmt, ...) {
  char message[CURL_ERROR_SIZE + 160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  if (t) transfer_close(t);
  push_error(L, code, message, retryable);
  return lua_error(L);
}

#define invalid(L, t, ...) fail((L), (t), "HTTP_ERROR", 0, __VA_ARGS__)

static char ascii_lower(char c) {
  return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static int equal_ci(const char *a, size_t alen, const char *b) {
  size_t blen = strlen(b);
  if (alen != blen) return 0;
  for (size_t i = 0; i < alen; i++)
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return 0;
  return 1;
}

static int prefix_ci(const char *s, size_t len, const char *prefix) {
  size_t n = strlen(prefix);
  return len >= n && equal_ci(s, n, prefix);
}

/* ---- arguments ---- */

static int push_field(lua_State *L, int t, const char *key) {
  t = lc_absindex(L, t);
  lua_pushstring(L, key);
  return lc_rawget(L, t);
}

static void check_option_names(lua_State *L, int opts, const char *const *allowed) {
  lua_pushnil(L);
  while (lua_next(L, opts)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) invalid(L, NULL, "an option's name is not a string");
    size_t len;
    const char *key = lua_tolstring(L, -1, &len);
    int known = 0;
    for (const char *const *a = allowed; *a && !known; a++) known = strlen(*a) == len && memcmp(*a, key, len) == 0;
    if (!known) invalid(L, NULL, "unknown option '%.64s'", key);
  }
}

/* Reads the options table at index opts (nil or none: no options); leaves
   the values it keeps on the stack. */
static void read_options(lua_State *L, int opts, const char *const *allowed, sh_request *r) {
  if (lua_isnoneornil(L, opts)) return;
  if (lua_type(L, opts) != LUA_TTABLE) invalid(L, NULL, "the options must be a table");
  opts = lc_absindex(L, opts);
  check_option_names(L, opts, allowed);
  switch (push_field(L, opts, "headers")) {
    case LUA_TNIL: lua_pop(L, 1); break;
    case LUA_TTABLE: r->headers = lua_gettop(L); break;
    default: invalid(L, NULL, "headers must be a table");
  }
  switch (push_field(L, opts, "timeout_ms")) {
    case LUA_TNIL: break;
    case LUA_TNUMBER: {
      lua_Number ms = lua_tonumber(L, -1);
      if (!(ms >= 1 && ms <= 1e15)) invalid(L, NULL, "timeout_ms must be a number of milliseconds, at least 1");
      r->timeout_ms = (long long)ms;
      break;
    }
    default: invalid(L, NULL, "timeout_ms must be a number");
  }
  lua_pop(L, 1);
}

static void read_url(lua_State *L, int idx, sh_request *r) {
  if (lua_type(L, idx) != LUA_TSTRING) invalid(L, NULL, "the URL must be a string");
  r->url = lua_tolstring(L, idx, &r->url_len);
  if (strlen(r->url) != r->url_len) invalid(L, NULL, "the URL contains a NUL byte");
  for (size_t i = 0; i < r->url_len; i++) {
    unsigned char c = (unsigned char)r->url[i];
    if (c <= ' ' || c == 0x7f) invalid(L, NULL, "the URL contains a space or a control character");
  }
  if (!prefix_ci(r->url, r->url_len, "http://") && !prefix_ci(r->url, r->url_len, "https://"))
    invalid(L, NULL, "only http:// and https:// URLs are allowed");
}

static void read_body(lua_State *L, int idx, sh_request *r) {
  switch (lua_type(L, idx)) {
    case LUA_TNONE: case LUA_TNIL: r->body = 0; break;
    case LUA_TSTRING: case LUA_TTABLE: r->body = lc_absindex(L, idx); break;
    default: invalid(L, NULL, "the body must be a string or a table (sent as JSON)");
  }
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

static void add_header_line(lua_State *L, sh_transfer *t, const char *line) {
  struct curl_slist *more = curl_slist_append(t->headers, line);
  if (!more) fail(L, t, "HTTP_ERROR", 0, "out of memory");
  t->headers = more;
}

/* Turns the caller's headers into t->headers; tells which ones it set. */
static void add_headers(lua_State *L, sh_transfer *t, int headers, int *content_type, int *expect) {
  if (!headers) return;
  lua_pushnil(L);
  while (lua_next(L, headers)) {
    if (lua_type(L, -2) != LUA_TSTRING) invalid(L, t, "a header name is not a string");
    size_t nlen, vlen;
    const char *name = lua_tolstring(L, -2, &nlen);
    if (has_line_break(name, nlen)) invalid(L, t, "a header name contains CR, LF or NUL");
    if (!is_token(name, nlen)) invalid(L, t, "the header name '%.64s' is not a token", name);
    if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
      invalid(L, t, "the value of header '%.64s' is not a string", name);
    /* a copy, so that a number is not turned into a string inside the table */
    lua_pushvalue(L, -1);
    const char *value = lua_tolstring(L, -1, &vlen);
    if (has_line_break(value, vlen)) invalid(L, t, "the value of header '%.64s' contains CR, LF or NUL", name);
    if (equal_ci(name, nlen, "content-length") || equal_ci(name, nlen, "transfer-encoding"))
      invalid(L, t, "the header '%.64s' is set by the client", name);
    if (equal_ci(name, nlen, "content-type")) *content_type = 1;
    if (equal_ci(name, nlen, "expect")) *expect = 1;
    /* "Name;" is libcurl's way to send a header with an empty value */
    sb_buf line;
    sb_init(&line);
    sb_add(&line, name, nlen);
    if (vlen) {
      sb_add(&line, ": ", 2);
      sb_add(&line, value, vlen);
    } else {
      sb_addc(&line, ';');
    }
    struct curl_slist *more = line.failed ? NULL : curl_slist_append(t->headers, line.data);
    sb_free(&line);
    if (!more) fail(L, t, "HTTP_ERROR", 0, "out of memory");
    t->headers = more;
    lua_pop(L, 2);
  }
}

/* ---- libcurl callbacks: no Lua in here ---- */

static void sb_reset(sb_buf *b) {
  b->len = 0;
  if (b->data) b->data[0] = '\0';
}

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
  sh_transfer *t = ud;
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

/* Each response (a redirect, a 1xx) starts with its status line: only the
   last one's headers and body are kept. */
static size_t on_header(char *data, size_t size, size_t n, void *ud) {
  sh_transfer *t = ud;
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

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
  sh_transfer *t = ud;
  (void)dltotal; (void)dlnow; (void)ultotal; (void)ulnow;
  if (t->deadline && t->deadline(t->L) == 0) {
    t->expired = 1;
    return 1;
  }
  return 0;
}

/* ---- the response ---- */

static int is_space(char c) {
  return c == ' ' || c == '\t';
}

/* Pushes the header table: names in lower case, values trimmed, repeated
   headers joined with ", ", folded lines joined with a space. */
static void push_headers(lua_State *L, sh_transfer *t) {
  lua_newtable(L);
  char *p = t->head.data, *end = p ? p + t->head.len : NULL;
  const char *last = NULL;
  size_t last_len = 0;
  while (p && p < end) {
    char *eol = memchr(p, '\n', (size_t)(end - p));
    char *next = eol ? eol + 1 : end;
    char *e = eol ? eol : end;
    while (e > p && (e[-1] == '\r' || is_space(e[-1]))) e--;
    if (e == p || (e - p >= 5 && memcmp(p, "HTTP/", 5) == 0)) {
      p = next;
      continue;
    }
    if (is_space(*p)) {
      while (p < e && is_space(*p)) p++;
      if (last) {
        lua_pushlstring(L, last, last_len);
        lua_pushvalue(L, -1);
        lc_rawget(L, -3);
        lua_pushliteral(L, " ");
        lua_pushlstring(L, p, (size_t)(e - p));
        lua_concat(L, 3);
        lua_rawset(L, -3);
      }
      p = next;
      continue;
    }
    char *colon = memchr(p, ':', (size_t)(e - p));
    if (!colon || colon == p) {
      p = next;
      continue;
    }
    for (char *c = p; c < colon; c++) *c = ascii_lower(*c);
    char *v = colon + 1;
    while (v < e && is_space(*v)) v++;
    last = p;
    last_len = (size_t)(colon - p);
    lua_pushlstring(L, last, last_len);
    lua_pushvalue(L, -1);
    if (lc_rawget(L, -3) == LUA_TNIL) {
      lua_pop(L, 1);
      lua_pushlstring(L, v, (size_t)(e - v));
    } else {
      lua_pushliteral(L, ", ");
      lua_pushlstring(L, v, (size_t)(e - v));
      lua_concat(L, 3);
    }
    lua_rawset(L, -3);
    p = next;
  }
}

/* application/json, or a structured syntax suffix such as application/problem+json. */
static int is_json_type(const char *s, size_t len) {
  const char *semi = memchr(s, ';', len);
  if (semi) len = (size_t)(semi - s);
  while (len && is_space(s[len - 1])) len--;
  while (len && is_space(*s)) { s++; len--; }
  if (equal_ci(s, len, "application/json")) return 1;
  return prefix_ci(s, len, "application/") && len > 17 && equal_ci(s + len - 5, 5, "+json");
}

static void push_response(lua_State *L, sh_transfer *t, long status) {
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, (lua_Integer)status);
  lua_setfield(L, -2, "status");
  push_headers(L, t);
  int json = push_field(L, -1, "content-type") == LUA_TSTRING && is_json_type(lua_tostring(L, -1), lc_rawlen(L, -1));
  lua_pop(L, 1);
  lua_setfield(L, -2, "headers");
  lua_pushlstring(L, sb_str(&t->body), t->body.len);
  lua_setfield(L, -2, "body");
  if (json) {
    char err[160];
    jv *v = json_parse(&t->arena, sb_str(&t->body), t->body.len, SH_JSON_MAX_DEPTH, err, sizeof err);
    if (v) {
      lj_push(L, v, 0);
      lua_setfield(L, -2, "json");
    }
  }
}

/* ---- the request ---- */

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

#define SET(opt, value) do { if (rc == CURLE_OK) rc = curl_easy_setopt(c, opt, value); } while (0)

static int perform(lua_State *L, const sh_config *cfg, const sh_request *r) {
  const sh_limits *lim = &cfg->limits;
  int head = strcmp(r->method, "HEAD") == 0;
  if (head && r->body) invalid(L, NULL, "a HEAD request has no body");
  if (r->body && lua_type(L, r->body) == LUA_TSTRING && lc_rawlen(L, r->body) > lim->max_request_bytes)
    fail(L, NULL, "HTTP_TOO_LARGE", 0, "the request body is larger than the limit of %zu bytes", lim->max_request_bytes);

  sh_transfer *t = lua_newuserdata(L, sizeof *t);
  t->curl = NULL;
  t->headers = NULL;
  sb_init(&t->request);
  sb_init(&t->body);
  sb_init(&t->head);
  ar_init(&t->arena);
  t->L = L;
  t->deadline = cfg->deadline;
  t->max_response = lim->max_response_bytes;
  t->too_large = t->expired = t->out_of_memory = 0;
  t->error[0] = '\0';
  lc_setmetatable(L, SH_TRANSFER_MT);

  const char *body = NULL;
  size_t body_len = 0;
  if (r->body && lua_type(L, r->body) == LUA_TTABLE) {
    char err[128];
    if (lj_encode(L, r->body, &t->request, 0, SH_JSON_MAX_DEPTH, err, sizeof err) != 0)
      invalid(L, t, "the body cannot be sent as JSON: %s", err);
    if (t->request.len > lim->max_request_bytes)
      fail(L, t, "HTTP_TOO_LARGE", 0, "the request body is larger than the limit of %zu bytes", lim->max_request_bytes);
    body = sb_str(&t->request);
    body_len = t->request.len;
  } else if (r->body) {
    body = lua_tolstring(L, r->body, &body_len);
  }

  int content_type = 0, expect = 0;
  add_headers(L, t, r->headers, &content_type, &expect);
  /* a table is sent as JSON; a string goes without the form type libcurl would add */
  if (body && !content_type)
    add_header_line(L, t, lua_type(L, r->body) == LUA_TTABLE ? "Content-Type: application/json" : "Content-Type:");
  /* waiting for "100 Continue" costs a round trip, or a second with a server that never sends it */
  if (body && !expect) add_header_line(L, t, "Expect:");

  pthread_once(&init_once, global_init);
  if (init_result != CURLE_OK)
    fail(L, t, "HTTP_ERROR", 0, "libcurl cannot start: %s", curl_easy_strerror(init_result));

  long long timeout = r->timeout_ms > 0 ? r->timeout_ms : lim->timeout_ms;
  long long left = cfg->deadline ? cfg->deadline(L) : -1;
  if (left == 0) fail(L, t, "HTTP_TIMEOUT", 1, "the call's deadline passed before the request was sent");
  int by_deadline = left > 0 && left < timeout;
  if (by_deadline) timeout = left;
  if (timeout > LONG_MAX) timeout = LONG_MAX;

  CURL *c = t->curl = curl_easy_init();
  if (!c) fail(L, t, "HTTP_ERROR", 0, "libcurl cannot make a request");
  CURLcode rc = CURLE_OK;
  SET(CURLOPT_ERRORBUFFER, t->error);
  SET(CURLOPT_URL, r->url);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_FOLLOWLOCATION, 1L);
  SET(CURLOPT_MAXREDIRS, (long)SH_MAX_REDIRECTS);
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_TIMEOUT_MS, (long)timeout);
  SET(CURLOPT_USERAGENT, "luma-lua");
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, t);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, t);
  if (cfg->deadline) {
    SET(CURLOPT_NOPROGRESS, 0L);
    SET(CURLOPT_XFERINFOFUNCTION, on_progress);
    SET(CURLOPT_XFERINFODATA, t);
  }
  if (t->headers) SET(CURLOPT_HTTPHEADER, t->headers);
  /* a HEAD of a large resource is fine: libcurl checks the size against Content-Length */
  if (!head && lim->max_response_bytes <= (size_t)LLONG_MAX)
    SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)lim->max_response_bytes);
  if (head) {
    SET(CURLOPT_NOBODY, 1L);
  } else if (body) {
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    SET(CURLOPT_POSTFIELDS, body);
    if (strcmp(r->method, "POST") != 0) SET(CURLOPT_CUSTOMREQUEST, r->method);
  } else if (strcmp(r->method, "POST") == 0) {
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
    SET(CURLOPT_POSTFIELDS, "");
  } else if (strcmp(r->method, "GET") != 0) {
    SET(CURLOPT_CUSTOMREQUEST, r->method);
  }
  if (rc != CURLE_OK) fail(L, t, "HTTP_ERROR", 0, "libcurl refused an option: %s", curl_easy_strerror(rc));

  rc = curl_easy_perform(c);

  const char *why = t->error[0] ? t->error : curl_easy_strerror(rc);
  if (t->expired || (rc == CURLE_OPERATION_TIMEDOUT && by_deadline))
    fail(L, t, "HTTP_TIMEOUT", 1, "the call's deadline passed during the request");
  if (t->too_large || rc == CURLE_FILESIZE_EXCEEDED)
    fail(L, t, "HTTP_TOO_LARGE", 0, "the response is larger than the limit of %zu bytes", lim->max_response_bytes);
  if (t->out_of_memory) fail(L, t, "HTTP_ERROR", 0, "out of memory while reading the response");
  switch (rc) {
    case CURLE_OK: break;
    case CURLE_OPERATION_TIMEDOUT:
      fail(L, t, "HTTP_TIMEOUT", 1, "the request timed out after %lld ms", timeout);
      break;
    case CURLE_UNSUPPORTED_PROTOCOL:
      /* the URL itself was checked: this is where a redirect led */
      invalid(L, t, "a redirect led to a URL that is not http:// or https:// (%s)", why);
      break;
    default:
      fail(L, t, "HTTP_ERROR", connection_failure(rc), "the request failed: %s", why);
  }

  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  /* the connection and the request go before the Lua values are made */
  curl_easy_cleanup(c);
  t->curl = NULL;
  curl_slist_free_all(t->headers);
  t->headers = NULL;
  sb_free(&t->request);
  push_response(L, t, status);
  transfer_close(t);
  return 1;
}

static const sh_config *config(lua_State *L) {
  luaL_checkstack(L, 24, "making an HTTP request");
  return lua_touserdata(L, lua_upvalueindex(1));
}

static void init_request(sh_request *r, const char *method) {
  r->method = method;
  r->url = NULL;
  r->url_len = 0;
  r->headers = 0;
  r->body = 0;
  r->timeout_ms = 0;
}

/* http.request{ method =, url =, headers =, body =, timeout_ms = } */
static int l_request(lua_State *L) {
  const sh_config *cfg = config(L);
  sh_request r;
  init_request(&r, "GET");
  if (lua_type(L, 1) != LUA_TTABLE) invalid(L, NULL, "http.request needs a table of options");
  read_options(L, 1, request_options, &r);
  switch (push_field(L, 1, "method")) {
    case LUA_TNIL: break;
    case LUA_TSTRING: {
      size_t len;
      const char *m = lua_tolstring(L, -1, &len);
      r.method = NULL;
      for (const char *const *k = methods; *k && !r.method; k++)
        if (equal_ci(m, len, *k)) r.method = *k;
      if (!r.method) invalid(L, NULL, "the method must be one of GET, POST, PUT, PATCH, DELETE, HEAD");
      break;
    }
    default: invalid(L, NULL, "the method must be a string");
  }
  push_field(L, 1, "url");
  read_url(L, -1, &r);
  push_field(L, 1, "body");
  read_body(L, -1, &r);
  return perform(L, cfg, &r);
}

/* http.get(url [, { headers =, timeout_ms = }]) */
static int l_get(lua_State *L) {
  const sh_config *cfg = config(L);
  sh_request r;
  init_request(&r, "GET");
  read_url(L, 1, &r);
  read_options(L, 2, call_options, &r);
  return perform(L, cfg, &r);
}

/* http.post(url, body [, { headers =, timeout_ms = }]) */
static int l_post(lua_State *L) {
  const sh_config *cfg = config(L);
  sh_request r;
  init_request(&r, "POST");
  read_url(L, 1, &r);
  read_body(L, 2, &r);
  read_options(L, 3, call_options, &r);
  return perform(L, cfg, &r);
}

void sh_push_http(lua_State *L, sh_deadline_fn deadline, const sh_limits *limits) {
  static const luaL_Reg fns[] = {
    { "request", l_request },
    { "get", l_get },
    { "post", l_post },
    { NULL, NULL }
  };
  if (luaL_newmetatable(L, SH_TRANSFER_MT)) {
    lua_pushcfunction(L, transfer_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  lua_createtable(L, 0, 3);
  sh_config *cfg = lua_newuserdata(L, sizeof *cfg);
  cfg->deadline = deadline;
  cfg->limits.timeout_ms = limits && limits->timeout_ms > 0 ? limits->timeout_ms : SH_DEFAULT_TIMEOUT_MS;
  cfg->limits.max_response_bytes = limits && limits->max_response_bytes ? limits->max_response_bytes : SH_DEFAULT_MAX_BYTES;
  cfg->limits.max_request_bytes = limits && limits->max_request_bytes ? limits->max_request_bytes : SH_DEFAULT_MAX_BYTES;
  lc_setfuncs(L, fns, 1);
}

#else /* LuaJIT and Lua 5.1: no luma.http (a policy is refused there) */
typedef int sh_unused;
#endif
