/*
 * luma.http on the process's HTTP transport (base/transport.c). Each request
 * is a transport transfer owned, with every other C buffer, by a transfer
 * userdata: a Lua error at any point (a bad argument, or a state out of
 * memory while the result is built) cannot leak them, as __gc frees them.
 * The handler's thread blocks in tp_wait while the transport's I/O thread
 * runs the request; no Lua value is made while it waits, the result is built
 * after the transfer ended, and the C side is closed before an error is
 * raised.
 */
#include "http.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#if LUA_VERSION_NUM >= 504
#include "compat.h"
#include "json.h"
#include "lerror.h"
#include "ljson.h"
#include "luma_limits.h"
#include "strbuf.h"
#include "transport.h"

/* How often the state's deadline function is asked while a request runs. */
#define SH_WAIT_SLICE_MS 10

/* Upvalue 1 of request, get and post. */
typedef struct sh_config {
  sh_deadline_fn deadline;
  sh_error_fn error;
  const sh_wait *wait;            /* NULL: requests block */
  sh_limits limits;
} sh_config;

/* One request. Every pointer is NULL (or every buffer empty) once closed. */
typedef struct sh_transfer {
  tp_transfer *tp;                /* from tp_start until closed; its result too */
  sb_buf request;                 /* a table body, encoded as JSON */
  sb_buf text;                    /* the request headers' names and values, each NUL-terminated */
  tp_header *headers;             /* n_headers, pointing into text once sent */
  size_t n_headers, cap_headers;
  ar_arena arena;                 /* the decoded JSON of the response */
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

/* One transport for the process, made by its first request. It is freed at
   exit, or when this module is unloaded (a destructor runs at dlclose; an
   atexit handler may not, under a sanitizer that intercepts atexit): its I/O
   thread must not outlive the code it runs. */
static pthread_mutex_t transport_lock = PTHREAD_MUTEX_INITIALIZER;
static tp_transport *transport;   /* guarded by transport_lock */
static int transport_closed;      /* guarded by transport_lock */

#if defined(__GNUC__)
__attribute__((destructor))
#endif
static void transport_exit(void) {
  pthread_mutex_lock(&transport_lock);
  tp_free(transport);
  transport = NULL;
  transport_closed = 1;
  pthread_mutex_unlock(&transport_lock);
}

/* A forked handler process (isolate.c) has none of its parent's threads:
   the transport it inherited is dead weight, left alone, and its first
   request makes its own; the lock may have been held by a thread that is
   not there. */
void sh_after_fork(void) {
  pthread_mutex_init(&transport_lock, NULL);
  transport = NULL;
  transport_closed = 0;
}

/* Starts r on the process's transport (done(ud) at its end, on the I/O
   thread); NULL with a message in err. */
static tp_transfer *start(const tp_request *r, void (*done)(void *ud), void *ud, char *err, size_t errlen) {
  tp_transfer *t = NULL;
  pthread_mutex_lock(&transport_lock);
  if (!transport && !transport_closed) {
    transport = tp_new(err, errlen);
  } else if (!transport) {
    snprintf(err, errlen, "the HTTP transport is closed: the process is exiting");
  }
  if (transport) t = tp_start(transport, r, done, ud, err, errlen);
  pthread_mutex_unlock(&transport_lock);
  return t;
}

static void transfer_close(sh_transfer *t) {
  tp_release(t->tp);
  t->tp = NULL;
  free(t->headers);
  t->headers = NULL;
  t->n_headers = t->cap_headers = 0;
  sb_free(&t->request);
  sb_free(&t->text);
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
  char message[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  if (t) transfer_close(t);
  const sh_config *cfg = lua_touserdata(L, lua_upvalueindex(1));   /* fail runs inside request, get or post */
  int top = lua_gettop(L);
  if (cfg && cfg->error) cfg->error(L, code, message, retryable);
  else le_push(L, code, message, retryable, 0);
  lua_settop(L, top + 1);
  return lua_error(L);
}

#define invalid(L, t, ...) fail((L), (t), "HTTP_ERROR", 0, __VA_ARGS__)


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
  if (!tp_prefix_ci(r->url, r->url_len, "http://") && !tp_prefix_ci(r->url, r->url_len, "https://"))
    invalid(L, NULL, "only http:// and https:// URLs are allowed");
}

static void read_body(lua_State *L, int idx, sh_request *r) {
  switch (lua_type(L, idx)) {
    case LUA_TNONE: case LUA_TNIL: r->body = 0; break;
    case LUA_TSTRING: case LUA_TTABLE: r->body = lc_absindex(L, idx); break;
    default: invalid(L, NULL, "the body must be a string or a table (sent as JSON)");
  }
}


/* Keeps a header for the transport: its text in t->text, its lengths in
   t->headers (the pointers are set by point_headers, once text stops moving). */
static void add_header(lua_State *L, sh_transfer *t, const char *name, size_t nlen, const char *value, size_t vlen) {
  if (t->n_headers == t->cap_headers) {
    size_t cap = t->cap_headers ? 2 * t->cap_headers : 8;
    tp_header *more = realloc(t->headers, cap * sizeof *more);
    if (!more) fail(L, t, "HTTP_ERROR", 0, "out of memory");
    t->headers = more;
    t->cap_headers = cap;
  }
  sb_add(&t->text, name, nlen);
  sb_addc(&t->text, '\0');
  sb_add(&t->text, value, vlen);
  sb_addc(&t->text, '\0');
  if (t->text.failed) fail(L, t, "HTTP_ERROR", 0, "out of memory");
  tp_header *h = &t->headers[t->n_headers++];
  h->name_len = nlen;
  h->value_len = vlen;
}

static void point_headers(sh_transfer *t) {
  const char *p = t->text.data;
  for (size_t i = 0; i < t->n_headers; i++) {
    tp_header *h = &t->headers[i];
    h->name = p;
    p += h->name_len + 1;
    h->value = p;
    p += h->value_len + 1;
  }
}

/* Turns the caller's headers into t->headers; tells whether it set the content type. */
static void add_headers(lua_State *L, sh_transfer *t, int headers, int *content_type) {
  if (!headers) return;
  lua_pushnil(L);
  while (lua_next(L, headers)) {
    if (lua_type(L, -2) != LUA_TSTRING) invalid(L, t, "a header name is not a string");
    size_t nlen, vlen;
    const char *name = lua_tolstring(L, -2, &nlen);
    if (tp_has_line_break(name, nlen)) invalid(L, t, "a header name contains CR, LF or NUL");
    if (!tp_is_token(name, nlen)) invalid(L, t, "the header name '%.64s' is not a token", name);
    if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
      invalid(L, t, "the value of header '%.64s' is not a string", name);
    /* a copy, so that a number is not turned into a string inside the table */
    lua_pushvalue(L, -1);
    const char *value = lua_tolstring(L, -1, &vlen);
    if (tp_has_line_break(value, vlen)) invalid(L, t, "the value of header '%.64s' contains CR, LF or NUL", name);
    if (tp_equal_ci(name, nlen, "content-length") || tp_equal_ci(name, nlen, "transfer-encoding"))
      invalid(L, t, "the header '%.64s' is set by the client", name);
    if (tp_equal_ci(name, nlen, "content-type")) *content_type = 1;
    add_header(L, t, name, nlen, value, vlen);
    lua_pop(L, 2);
  }
}

/* ---- the response ---- */

static int is_space(char c) {
  return c == ' ' || c == '\t';
}

static void push_lower(lua_State *L, const char *s, size_t len) {
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, len);
  for (size_t i = 0; i < len; i++) p[i] = s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] - 'A' + 'a') : s[i];
  luaL_pushresultsize(&b, len);
}

/* Pushes the header table: names in lower case, values trimmed, repeated
   headers joined with ", " (the transport joined folded lines with a space). */
static void push_headers(lua_State *L, const tp_result *res) {
  lua_newtable(L);
  for (size_t i = 0; i < res->n_headers; i++) {
    const tp_header *h = &res->headers[i];
    push_lower(L, h->name, h->name_len);
    lua_pushvalue(L, -1);
    if (lc_rawget(L, -3) == LUA_TNIL) {
      lua_pop(L, 1);
      lua_pushlstring(L, h->value, h->value_len);
    } else {
      lua_pushliteral(L, ", ");
      lua_pushlstring(L, h->value, h->value_len);
      lua_concat(L, 3);
    }
    lua_rawset(L, -3);
  }
}

/* application/json, or a structured syntax suffix such as application/problem+json. */
static int is_json_type(const char *s, size_t len) {
  const char *semi = memchr(s, ';', len);
  if (semi) len = (size_t)(semi - s);
  while (len && is_space(s[len - 1])) len--;
  while (len && is_space(*s)) { s++; len--; }
  if (tp_equal_ci(s, len, "application/json")) return 1;
  return tp_prefix_ci(s, len, "application/") && len > 17 && tp_equal_ci(s + len - 5, 5, "+json");
}

static void push_response(lua_State *L, sh_transfer *t, const tp_result *res) {
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, (lua_Integer)res->status);
  lua_setfield(L, -2, "status");
  push_headers(L, res);
  int json = push_field(L, -1, "content-type") == LUA_TSTRING && is_json_type(lua_tostring(L, -1), lc_rawlen(L, -1));
  lua_pop(L, 1);
  lua_setfield(L, -2, "headers");
  lua_pushlstring(L, res->body, res->body_len);
  lua_setfield(L, -2, "body");
  if (json) {
    char err[160];
    jv *v = json_parse(&t->arena, res->body, res->body_len, LIM_HTTP_JSON_DEPTH, err, sizeof err);
    if (v) {
      lj_push(L, v, 0);
      lua_setfield(L, -2, "json");
    }
  }
}

/* ---- the request ---- */

/* Waits for the transfer on the state's thread, asking the state's deadline
   every SH_WAIT_SLICE_MS (its signal may fire long before the deadline), and
   ends it at the deadline. No Lua value is made here. */
static void wait_for(lua_State *L, sh_deadline_fn deadline, tp_transfer *t) {
  if (!deadline) {
    tp_wait(t, 0, NULL);
    return;
  }
  for (;;) {
    long long left = deadline(L), now = tp_now_ns();
    if (left == 0) {
      tp_wait(t, now, NULL);      /* a deadline that passed ends it at once */
      return;
    }
    if (left > 0 && left <= SH_WAIT_SLICE_MS) {
      tp_wait(t, now + left * 1000000LL, NULL);
      return;
    }
    if (tp_poll(t, now + SH_WAIT_SLICE_MS * 1000000LL)) return;
  }
}

static int finish(lua_State *L, const sh_config *cfg, sh_transfer *t, int by_deadline);

/* The request resumed after a wait: its transfer (at the stack index ctx >>
   1) has its outcome (set just before the end's callback runs, which is
   what woke the call; tp_poll says "ended" only after it returned), or it
   waits again (a resume before that). The outcome is read once the
   callback returned (tp_wait). */
static int perform_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  const sh_config *cfg = lua_touserdata(L, lua_upvalueindex(1));
  sh_transfer *t = lua_touserdata(L, (int)(ctx >> 1));
  if (!tp_outcome(t->tp)) return cfg->wait->yield(L, t->tp, ctx, perform_k);
  tp_wait(t->tp, 0, NULL);
  return finish(L, cfg, t, (int)(ctx & 1));
}

static int perform(lua_State *L, const sh_config *cfg, const sh_request *r) {
  const sh_limits *lim = &cfg->limits;
  int head = strcmp(r->method, "HEAD") == 0;
  if (head && r->body) invalid(L, NULL, "a HEAD request has no body");
  if (r->body && lua_type(L, r->body) == LUA_TSTRING && lc_rawlen(L, r->body) > lim->max_request_bytes)
    fail(L, NULL, "HTTP_TOO_LARGE", 0, "the request body is larger than the limit of %zu bytes", lim->max_request_bytes);

  sh_transfer *t = lua_newuserdata(L, sizeof *t);
  int tidx = lua_gettop(L);
  t->tp = NULL;
  sb_init(&t->request);
  sb_init(&t->text);
  t->headers = NULL;
  t->n_headers = t->cap_headers = 0;
  ar_init(&t->arena);
  lc_setmetatable(L, SH_TRANSFER_MT);

  const char *body = NULL;
  size_t body_len = 0;
  if (r->body && lua_type(L, r->body) == LUA_TTABLE) {
    char err[128];
    if (lj_encode(L, r->body, &t->request, 0, LIM_HTTP_JSON_DEPTH, err, sizeof err) != 0)
      invalid(L, t, "the body cannot be sent as JSON: %s", err);
    if (t->request.len > lim->max_request_bytes)
      fail(L, t, "HTTP_TOO_LARGE", 0, "the request body is larger than the limit of %zu bytes", lim->max_request_bytes);
    body = sb_str(&t->request);
    body_len = t->request.len;
  } else if (r->body) {
    body = lua_tolstring(L, r->body, &body_len);
  }

  int content_type = 0;
  add_headers(L, t, r->headers, &content_type);
  /* a table is sent as JSON; a string goes without a type (the transport sends none) */
  if (body && !content_type && lua_type(L, r->body) == LUA_TTABLE)
    add_header(L, t, "Content-Type", 12, "application/json", 16);
  point_headers(t);

  long long timeout = r->timeout_ms > 0 ? r->timeout_ms : lim->timeout_ms;
  long long left = cfg->deadline ? cfg->deadline(L) : -1;
  if (left == 0) fail(L, t, "HTTP_TIMEOUT", 1, "the call's deadline passed before the request was sent");
  int by_deadline = left > 0 && left < timeout;
  if (by_deadline) timeout = left;

  tp_request req;
  memset(&req, 0, sizeof req);
  static const tp_method codes[] = { TP_GET, TP_POST, TP_PUT, TP_PATCH, TP_DELETE, TP_HEAD };
  for (size_t i = 0; methods[i]; i++)
    if (strcmp(methods[i], r->method) == 0) req.method = codes[i];
  req.url = r->url;
  req.headers = t->headers;
  req.n_headers = t->n_headers;
  req.body = body;
  req.body_len = body_len;
  req.user_agent = "luma-lua";
  req.timeout_ms = timeout;
  req.max_response_bytes = lim->max_response_bytes;
  req.max_redirects = LIM_HTTP_MAX_REDIRECTS;
  char err[256];
  void (*done)(void *) = NULL;
  void *ud = NULL;
  int yielding = cfg->wait && cfg->wait->may_yield(L, &done, &ud);
  t->tp = start(&req, done, ud, err, sizeof err);
  if (!t->tp) invalid(L, t, "%s", err);
  if (yielding) return cfg->wait->yield(L, t->tp, (lua_KContext)tidx << 1 | by_deadline, perform_k);
  wait_for(L, cfg->deadline, t->tp);
  return finish(L, cfg, t, by_deadline);
}

/* The request after its transfer ended: its response, or its error. */
static int finish(lua_State *L, const sh_config *cfg, sh_transfer *t, int by_deadline) {
  (void)cfg;
  const tp_result *res = tp_outcome(t->tp);
  if (res->code == TP_HTTP_TIMEOUT && by_deadline)
    fail(L, t, "HTTP_TIMEOUT", 1, "the call's deadline passed during the request");
  if (res->code != TP_OK) fail(L, t, tp_code_name(res->code), res->retryable, "%s", res->message);
  /* the request's buffers go before the Lua values are made */
  sb_free(&t->request);
  sb_free(&t->text);
  free(t->headers);
  t->headers = NULL;
  t->n_headers = t->cap_headers = 0;
  push_response(L, t, res);
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
        if (tp_equal_ci(m, len, *k)) r.method = *k;
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

void sh_push_http(lua_State *L, sh_deadline_fn deadline, sh_error_fn error, const sh_limits *limits) {
  sh_push_http_waiting(L, deadline, error, NULL, limits);
}

void sh_push_http_waiting(lua_State *L, sh_deadline_fn deadline, sh_error_fn error, const sh_wait *wait,
                          const sh_limits *limits) {
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
  cfg->error = error;
  cfg->wait = wait;
  cfg->limits.timeout_ms = limits && limits->timeout_ms > 0 ? limits->timeout_ms : LIM_HTTP_TIMEOUT_MS;
  cfg->limits.max_response_bytes = limits && limits->max_response_bytes ? limits->max_response_bytes : (size_t)LIM_HTTP_MAX_BYTES;
  cfg->limits.max_request_bytes = limits && limits->max_request_bytes ? limits->max_request_bytes : (size_t)LIM_HTTP_MAX_BYTES;
  lc_setfuncs(L, fns, 1);
}

#else /* LuaJIT and Lua 5.1: no luma.http (a policy is refused there) */
typedef int sh_unused;
#endif
