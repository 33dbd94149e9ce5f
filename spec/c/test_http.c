/*
 * luma.http against a tiny HTTP/1.1 server running in this process on
 * 127.0.0.1 (one thread, one connection at a time, canned responses by path).
 * Each case is a Lua snippet run in a state with the client tables as
 * globals, paired with the text it must return.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "ctest.h"
#include "http.h"
#include "lerror.h"
#include "json.h"
#include "strbuf.h"
#include "test_server.h"

/* ---- the server (test_server.h) and its routes ---- */

static void respond(int conn, int head_only, int status, const char *reason, const char *headers,
                    const char *body, size_t len) {
  sb_buf h;
  sb_init(&h);
  sb_printf(&h, "Connection: close\r\n%s", headers);
  ts_respond(conn, head_only, status, reason, h.data, body, len);
  sb_free(&h);
}

/* { method, path, headers = { lower-case name = value }, body } */
static void echo(int conn, const char *method, const char *path, char *req, size_t head_len, size_t body_len) {
  ar_arena a;
  ar_init(&a);
  jv *o = jv_obj(&a), *h = jv_obj(&a);
  jv_set(o, "method", jv_cstr(&a, method));
  jv_set(o, "path", jv_cstr(&a, path));
  char *end = req + head_len - 2;
  for (char *line = strstr(req, "\r\n") + 2; line < end;) {
    char *eol = strstr(line, "\r\n");
    char *colon = memchr(line, ':', (size_t)(eol - line));
    if (colon) {
      for (char *c = line; c < colon; c++) *c = ts_lower(*c);
      char *v = colon + 1;
      while (*v == ' ') v++;
      char *name = ar_strndup(&a, line, (size_t)(colon - line));
      if (!jv_get(h, name)) jv_set(h, name, jv_str(&a, v, (size_t)(eol - v)));
    }
    line = eol + 2;
  }
  jv_set(o, "headers", h);
  jv_set(o, "body", jv_str(&a, req + head_len, body_len));
  sb_buf out;
  sb_init(&out);
  jv_write(&out, o, 0);
  respond(conn, 0, 200, "OK", "Content-Type: application/json\r\n", out.data, out.len);
  sb_free(&out);
  ar_free(&a);
}

/* The /big bodies: filled once, before any connection reads them (the
   connections' threads each filled it, racing, as ThreadSanitizer said) */
static char big[65536];
static pthread_once_t big_once = PTHREAD_ONCE_INIT;
static void fill_big(void) { memset(big, 'x', sizeof big); }

/* Each connection answers one request. */
static int route(int conn, int serial, char *req, size_t head_len, size_t body_len) {
  (void)serial;
  char method[16] = "", path[256] = "";
  if (sscanf(req, "%15s %255s", method, path) != 2) return 0;
  int head = strcmp(method, "HEAD") == 0;
  pthread_once(&big_once, fill_big);
  if (strcmp(path, "/text") == 0) {
    respond(conn, head, 200, "OK",
            "Content-Type: text/plain\r\nX-Custom-Header: Yes\r\nX-Dup: a\r\nX-Dup: b\r\nX-Folded: one\r\n two\r\n",
            "hello", 5);
  } else if (strcmp(path, "/json") == 0) {
    const char *j = "{\"name\":\"luma\",\"n\":[1,2,3],\"ok\":true,\"nothing\":null}";
    respond(conn, head, 200, "OK", "Content-Type: application/json; charset=utf-8\r\n", j, strlen(j));
  } else if (strcmp(path, "/problem") == 0) {
    respond(conn, head, 422, "Unprocessable", "Content-Type: Application/Problem+JSON\r\n", "{\"title\":\"bad\"}", 15);
  } else if (strcmp(path, "/badjson") == 0) {
    respond(conn, head, 200, "OK", "Content-Type: application/json\r\n", "{\"a\":", 5);
  } else if (strcmp(path, "/big") == 0) {
    respond(conn, head, 200, "OK", "Content-Type: text/plain\r\n", big, sizeof big);
  } else if (strcmp(path, "/big-stream") == 0) {
    /* no Content-Length: the body ends when the connection does */
    const char *h = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\n";
    if (ts_send_all(conn, h, strlen(h)) == 0)
      for (size_t sent = 0; sent < sizeof big && ts_send_all(conn, big + sent, 4096) == 0; sent += 4096) {}
  } else if (strcmp(path, "/slow") == 0) {
    for (int i = 0; i < 250 && !ts_stopping() && !ts_client_gone(conn); i++) ts_sleep_ms(20);
    respond(conn, head, 200, "OK", "Content-Type: text/plain\r\n", "late", 4);
  } else if (strcmp(path, "/redirect") == 0) {
    respond(conn, head, 302, "Found", "Location: /text\r\n", "", 0);
  } else if (strcmp(path, "/redirect-file") == 0) {
    respond(conn, head, 302, "Found", "Location: file:///etc/passwd\r\n", "", 0);
  } else if (strcmp(path, "/redirect-ftp") == 0) {
    respond(conn, head, 302, "Found", "Location: ftp://127.0.0.1/x\r\n", "", 0);
  } else if (strcmp(path, "/redirect-loop") == 0) {
    respond(conn, head, 302, "Found", "Location: /redirect-loop\r\n", "", 0);
  } else if (strcmp(path, "/echo") == 0) {
    echo(conn, method, path, req, head_len, body_len);
  } else {
    respond(conn, head, 404, "Not Found", "Content-Type: text/plain\r\n", "not found", 9);
  }
  return 0;
}

/* ---- deadlines ---- */

static long long deadline_small(lua_State *L) { (void)L; return 200; }
static long long deadline_passed(lua_State *L) { (void)L; return 0; }
static long long deadline_none(lua_State *L) { (void)L; return -1; }

/* A signal that fires at a moment, long before the deadline itself;
   arm_signal(ms) arms it, arm_signal() disarms it. */
static long long signal_at;
static long long deadline_signal(lua_State *L) {
  (void)L;
  return signal_at && ts_now_ms() >= signal_at ? 0 : 60000;
}

static int l_arm_signal(lua_State *L) {
  signal_at = lua_isnoneornil(L, 1) ? 0 : ts_now_ms() + luaL_checkinteger(L, 1);
  return 0;
}

static int l_connections(lua_State *L) {
  lua_pushinteger(L, ts_connections());
  return 1;
}

/* ---- the Lua side ---- */

static const char prelude[] =
  "function fails(f, ...)\n"
  "  local ok, e = pcall(f, ...)\n"
  "  if ok then return 'no error' end\n"
  "  if type(e) ~= 'table' then return 'raw: ' .. tostring(e) end\n"
  "  if type(e.message) ~= 'string' or e.message == '' then return 'no message' end\n"
  "  return e.code .. '|' .. tostring(e.retryable)\n"
  "end\n"
  "function message(f, ...)\n"
  "  local ok, e = pcall(f, ...)\n"
  "  return ok and 'no error' or e.message\n"
  "end\n"
  /* the error, and how many connections the server saw meanwhile */
  "function unsent(f, ...)\n"
  "  local before = connections()\n"
  "  local r = fails(f, ...)\n"
  "  return r .. '|' .. (connections() - before)\n"
  "end\n"
  "function bad_headers(h) return unsent(http.get, URL .. '/echo', { headers = h }) end\n"
  "function bad_url(u) return unsent(http.get, u) end\n"
  "function bad_request(t) t.url = t.url or URL .. '/echo' return unsent(http.request, t) end\n";

/* ---- a state's own error values ---- */

static void tagged_error(lua_State *L, const char *code, const char *message, int retryable) {
  le_push(L, code, message, retryable, 0);
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "tagged");
}


static void push_client(lua_State *L, const char *name, sh_deadline_fn deadline, const sh_limits *limits) {
  sh_push_http(L, deadline, NULL, limits);
  lua_setglobal(L, name);
}

static lua_State *new_state(int closed_port) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  sh_limits small = { 0, 1024, 0 }, small_request = { 0, 0, 1024 }, short_timeout = { 300, 0, 0 };
  push_client(L, "http", NULL, NULL);
  push_client(L, "small", NULL, &small);
  push_client(L, "small_request", NULL, &small_request);
  push_client(L, "short", NULL, &short_timeout);
  push_client(L, "dl_small", deadline_small, NULL);
  push_client(L, "dl_passed", deadline_passed, NULL);
  push_client(L, "dl_none", deadline_none, NULL);
  push_client(L, "dl_signal", deadline_signal, NULL);
  sh_push_http(L, NULL, tagged_error, NULL);
  lua_setglobal(L, "tagged");
  lua_pushlightuserdata(L, NULL);
  lua_setglobal(L, "null");
  lua_pushfstring(L, "http://127.0.0.1:%d", ts.port);
  lua_setglobal(L, "URL");
  lua_pushfstring(L, "http://127.0.0.1:%d", closed_port);
  lua_setglobal(L, "CLOSED");
  lua_pushcfunction(L, l_arm_signal);
  lua_setglobal(L, "arm_signal");
  lua_pushcfunction(L, l_connections);
  lua_setglobal(L, "connections");
  if (luaL_dostring(L, prelude) != LUA_OK) {
    fprintf(stderr, "prelude: %s\n", lua_tostring(L, -1));
    exit(1);
  }
  return L;
}

/* Runs a snippet; its result as text, or "error: ..." */
static const char *run(lua_State *L, const char *code) {
  lua_settop(L, 0);
  if (luaL_loadstring(L, code) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
    lua_pushfstring(L, "error: %s", lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1));
    return lua_tostring(L, -1);
  }
  return lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1);
}

typedef struct http_case {
  const char *name;
  const char *code;
  const char *expected;
  long max_ms;                    /* 0: no time limit */
} http_case;

static const http_case cases[] = {
  { "GET of a text resource",
    "local r = http.get(URL .. '/text') return r.status .. '|' .. r.body .. '|' .. tostring(r.json)",
    "200|hello|nil", 0 },
  { "response header names in lower case",
    "local h = http.get(URL .. '/text').headers\n"
    "return h['x-custom-header'] .. '|' .. tostring(h['X-Custom-Header']) .. '|' .. h['content-type']",
    "Yes|nil|text/plain", 0 },
  { "repeated response headers joined with a comma",
    "return http.get(URL .. '/text').headers['x-dup']", "a, b", 0 },
  { "a folded response header joined with a space",
    "return http.get(URL .. '/text').headers['x-folded']", "one two", 0 },
  { "GET of JSON decoded into r.json",
    "local r = http.get(URL .. '/json') local j = r.json\n"
    "return r.headers['content-type'] .. '|' .. j.name .. '|' .. #j.n .. '|' .. math.type(j.n[3]) .. '|' ..\n"
    "  tostring(j.ok) .. '|' .. tostring(j.nothing == null)",
    "application/json; charset=utf-8|luma|3|integer|true|true", 0 },
  { "a +json media type decoded, and a 422 returned",
    "local r = http.get(URL .. '/problem') return r.status .. '|' .. r.json.title", "422|bad", 0 },
  { "invalid JSON leaves r.json nil",
    "local r = http.get(URL .. '/badjson') return tostring(r.json) .. '|' .. r.body", "nil|{\"a\":", 0 },
  { "POST of a table sends JSON with its content type",
    "local j = http.post(URL .. '/echo', { b = { 'x', 2 }, a = 1 }).json\n"
    "return j.method .. '|' .. j.headers['content-type'] .. '|' .. j.body",
    "POST|application/json|{\"a\":1,\"b\":[\"x\",2]}", 0 },
  { "POST of a string sends no content type unless given",
    "local j = http.post(URL .. '/echo', 'a=1').json\n"
    "local k = http.post(URL .. '/echo', 'a=1', { headers = { ['Content-Type'] = 'text/plain' } }).json\n"
    "return j.body .. '|' .. tostring(j.headers['content-type']) .. '|' .. k.headers['content-type']",
    "a=1|nil|text/plain", 0 },
  { "a caller's content type kept for a table body",
    "local j = http.post(URL .. '/echo', { x = 1 }, { headers = { ['content-type'] = 'application/vnd.x+json' } }).json\n"
    "return j.headers['content-type'] .. '|' .. j.body",
    "application/vnd.x+json|{\"x\":1}", 0 },
  { "custom request headers reach the server",
    "local j = http.request{ method = 'PUT', url = URL .. '/echo', body = 'data',\n"
    "  headers = { ['X-A'] = 'b', ['X-Num'] = 5, ['X-Empty'] = '' } }.json\n"
    "return j.method .. '|' .. j.headers['x-a'] .. '|' .. j.headers['x-num'] .. '|' .. j.headers['x-empty'] .. '|' ..\n"
    "  j.headers['user-agent'] .. '|' .. j.body",
    "PUT|b|5||luma-lua|data", 0 },
  { "GET with options passes headers",
    "return http.get(URL .. '/echo', { headers = { Authorization = 'Bearer t' }, timeout_ms = 5000 }).json.headers.authorization",
    "Bearer t", 0 },
  { "no Expect header, even for a large body",
    "local j = http.post(URL .. '/echo', string.rep('y', 4000)).json return #j.body .. '|' .. tostring(j.headers.expect)",
    "4000|nil", 0 },
  { "PATCH and DELETE (a method in any case)",
    "local a = http.request{ method = 'PATCH', url = URL .. '/echo', body = { k = true } }.json\n"
    "local b = http.request{ method = 'delete', url = URL .. '/echo' }.json\n"
    "return a.method .. a.body .. '|' .. b.method .. '|' .. b.body",
    "PATCH{\"k\":true}|DELETE|", 0 },
  { "POST without a body sends an empty one",
    "local j = http.request{ method = 'POST', url = URL .. '/echo' }.json return j.method .. '|' .. j.headers['content-length']",
    "POST|0", 0 },
  { "request defaults to GET",
    "return http.request{ url = URL .. '/echo' }.json.method", "GET", 0 },
  { "HEAD has an empty body",
    "local r = http.request{ method = 'HEAD', url = URL .. '/text' }\n"
    "return r.status .. '|' .. r.body .. '|' .. r.headers['content-length']",
    "200||5", 0 },
  { "HEAD of a resource larger than the limit",
    "local r = small.request{ method = 'HEAD', url = URL .. '/big' } return r.status .. '|' .. r.headers['content-length']",
    "200|65536", 0 },
  { "status 404 is a response, not an error",
    "local r = http.get(URL .. '/missing') return r.status .. '|' .. r.body", "404|not found", 0 },
  { "a redirect is followed, and only the last response is kept",
    "local r = http.get(URL .. '/redirect') return r.status .. '|' .. r.body .. '|' .. tostring(r.headers.location)",
    "200|hello|nil", 0 },
  { "a redirect to file:// is refused",
    "return fails(http.get, URL .. '/redirect-file')", "HTTP_ERROR|false", 0 },
  { "a redirect to ftp:// is refused",
    "return fails(http.get, URL .. '/redirect-ftp')", "HTTP_ERROR|false", 0 },
  { "redirects stop after 5",
    "return fails(http.get, URL .. '/redirect-loop')", "HTTP_ERROR|false", 0 },
  { "timeout_ms is honoured",
    "return fails(http.get, URL .. '/slow', { timeout_ms = 200 })", "HTTP_TIMEOUT|true", 1500 },
  { "timeout_ms in request{}",
    "return fails(http.request, { url = URL .. '/slow', timeout_ms = 200 })", "HTTP_TIMEOUT|true", 1500 },
  { "the limit's timeout_ms applies without one",
    "return fails(short.get, URL .. '/slow')", "HTTP_TIMEOUT|true", 1500 },
  { "a near deadline wins over timeout_ms",
    "return fails(dl_small.get, URL .. '/slow', { timeout_ms = 10000 }) .. '|' ..\n"
    "  message(dl_small.get, URL .. '/slow')",
    "HTTP_TIMEOUT|true|the call's deadline passed during the request", 2500 },
  { "a signal firing during the transfer stops it",
    "arm_signal(300) return fails(dl_signal.get, URL .. '/slow')", "HTTP_TIMEOUT|true", 2500 },
  { "a deadline already passed fails before connecting",
    "return unsent(dl_passed.get, URL .. '/echo')", "HTTP_TIMEOUT|true|0", 200 },
  { "no deadline at all",
    "arm_signal() return dl_none.get(URL .. '/text').body .. dl_signal.get(URL .. '/text').body", "hellohello", 0 },
  { "a response over the limit (Content-Length)",
    "return fails(small.get, URL .. '/big')", "HTTP_TOO_LARGE|false", 0 },
  { "a response over the limit (streamed)",
    "return fails(small.get, URL .. '/big-stream')", "HTTP_TOO_LARGE|false", 0 },
  { "responses within the limit",
    "return #http.get(URL .. '/big').body .. '|' .. #http.get(URL .. '/big-stream').body", "65536|65536", 0 },
  { "a request body over the limit is refused",
    "return unsent(small_request.post, URL .. '/echo', string.rep('x', 1025))", "HTTP_TOO_LARGE|false|0", 0 },
  { "a table body over the limit is refused",
    "return unsent(small_request.post, URL .. '/echo', { data = string.rep('x', 2000) })", "HTTP_TOO_LARGE|false|0", 0 },
  { "a body at the limit is sent",
    "return tostring(#small_request.post(URL .. '/echo', string.rep('x', 1024)).json.body)", "1024", 0 },
  { "header injection: CR LF in a value", "return bad_headers{ ['X-A'] = 'b\\r\\nX-Evil: 1' }", "HTTP_ERROR|false|0", 0 },
  { "header injection: LF in a value", "return bad_headers{ ['X-A'] = 'b\\nX-Evil: 1' }", "HTTP_ERROR|false|0", 0 },
  { "header injection: CR LF in a name", "return bad_headers{ ['X-A\\r\\nX-Evil'] = '1' }", "HTTP_ERROR|false|0", 0 },
  { "header injection: NUL in a value", "return bad_headers{ ['X-A'] = 'b\\0c' }", "HTTP_ERROR|false|0", 0 },
  { "header injection: NUL in a name", "return bad_headers{ ['X-A\\0'] = 'b' }", "HTTP_ERROR|false|0", 0 },
  { "a header name with a colon", "return bad_headers{ ['X-A:'] = 'b' }", "HTTP_ERROR|false|0", 0 },
  { "a header name with a space", "return bad_headers{ ['X A'] = 'b' }", "HTTP_ERROR|false|0", 0 },
  { "an empty header name", "return bad_headers{ [''] = 'b' }", "HTTP_ERROR|false|0", 0 },
  { "a header value that is a table", "return bad_headers{ ['X-A'] = {} }", "HTTP_ERROR|false|0", 0 },
  { "a header name that is not a string", "return bad_headers{ 'positional' }", "HTTP_ERROR|false|0", 0 },
  { "Content-Length is the client's", "return bad_headers{ ['content-length'] = '5' }", "HTTP_ERROR|false|0", 0 },
  { "Transfer-Encoding is the client's", "return bad_headers{ ['Transfer-Encoding'] = 'chunked' }", "HTTP_ERROR|false|0", 0 },
  { "the scheme in any case", "return http.get((URL:gsub('^http', 'HTTP')) .. '/text').body", "hello", 0 },
  { "file:// URLs are refused", "return bad_url('file:///etc/passwd')", "HTTP_ERROR|false|0", 0 },
  { "FILE:// URLs are refused", "return bad_url('FILE:///etc/passwd')", "HTTP_ERROR|false|0", 0 },
  { "ftp:// URLs are refused", "return bad_url('ftp://127.0.0.1/x')", "HTTP_ERROR|false|0", 0 },
  { "gopher:// URLs are refused", "return bad_url('gopher://127.0.0.1/x')", "HTTP_ERROR|false|0", 0 },
  { "a URL without a scheme is refused", "return bad_url((URL:gsub('^http://', '')))", "HTTP_ERROR|false|0", 0 },
  { "a URL with CR LF is refused", "return bad_url(URL .. '/echo\\r\\nX-Evil: 1')", "HTTP_ERROR|false|0", 0 },
  { "a URL with a space is refused", "return bad_url(URL .. '/echo x')", "HTTP_ERROR|false|0", 0 },
  { "a URL with NUL is refused", "return bad_url(URL .. '/echo\\0')", "HTTP_ERROR|false|0", 0 },
  { "a URL that is not a string", "return bad_url(42)", "HTTP_ERROR|false|0", 0 },
  { "a URL without a host", "return fails(http.get, 'http://')", "HTTP_ERROR|false", 0 },
  { "request{} without a URL", "return unsent(http.request, {})", "HTTP_ERROR|false|0", 0 },
  { "request() without options", "return unsent(http.request)", "HTTP_ERROR|false|0", 0 },
  { "a method off the list", "return bad_request{ method = 'TRACE' }", "HTTP_ERROR|false|0", 0 },
  { "a method that is not a string", "return bad_request{ method = 1 }", "HTTP_ERROR|false|0", 0 },
  { "an unknown option", "return bad_request{ timeout = 5 }", "HTTP_ERROR|false|0", 0 },
  { "an unknown option of get", "return unsent(http.get, URL .. '/echo', { body = 'x' })", "HTTP_ERROR|false|0", 0 },
  { "options that are not a table", "return unsent(http.get, URL .. '/echo', 'x')", "HTTP_ERROR|false|0", 0 },
  { "timeout_ms of 0", "return bad_request{ timeout_ms = 0 }", "HTTP_ERROR|false|0", 0 },
  { "timeout_ms that is not a number", "return bad_request{ timeout_ms = '5' }", "HTTP_ERROR|false|0", 0 },
  { "timeout_ms NaN", "return bad_request{ timeout_ms = 0/0 }", "HTTP_ERROR|false|0", 0 },
  { "headers that are not a table", "return bad_request{ headers = 'X-A: b' }", "HTTP_ERROR|false|0", 0 },
  { "a body that is a number", "return unsent(http.post, URL .. '/echo', 5)", "HTTP_ERROR|false|0", 0 },
  { "a body with no JSON form", "return unsent(http.post, URL .. '/echo', { f = print })", "HTTP_ERROR|false|0", 0 },
  { "a body that contains itself", "local t = {} t.t = t return unsent(http.post, URL .. '/echo', t)", "HTTP_ERROR|false|0", 0 },
  { "a HEAD request with a body", "return bad_request{ method = 'HEAD', body = 'x' }", "HTTP_ERROR|false|0", 0 },
  { "a refused connection is retryable",
    "return fails(http.get, CLOSED .. '/text')", "HTTP_ERROR|true", 0 },
  { "a failure is an error object",
    "local ok, e = pcall(http.get, 'file:///x')\n"
    "return tostring(ok) .. '|' .. tostring(e)",
    "false|[HTTP_ERROR] only http:// and https:// URLs are allowed", 0 },
  { "a request from a coroutine",
    "return coroutine.wrap(function() return dl_none.get(URL .. '/text').body end)()", "hello", 0 },
};

static void test_error_fn(lua_State *L) {
  CT_EQ_STR("HTTP_ERROR|true", run(L, "local ok, e = pcall(tagged.get, 'ftp://x') return e.code .. '|' .. tostring(e.tagged)"));
  CT_EQ_STR("HTTP_ERROR|nil", run(L, "local ok, e = pcall(http.get, 'ftp://x') return e.code .. '|' .. tostring(e.tagged)"));
}

/* ---- a state out of memory while the response is built ---- */

typedef struct budget {
  size_t used, limit;
} budget;

static void *budget_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  budget *b = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    free(ptr);
    b->used -= old;
    return NULL;
  }
  if (b->limit && nsize > old && b->used - old + nsize > b->limit) return NULL;
  void *p = realloc(ptr, nsize);
  if (p) b->used = b->used - old + nsize;
  return p;
}

static void test_out_of_memory(void) {
  budget b = { 0, 0 };
  lua_State *L = lua_newstate(budget_alloc, &b);
  luaL_openlibs(L);
  push_client(L, "http", NULL, NULL);
  lua_pushfstring(L, "http://127.0.0.1:%d", ts.port);
  lua_setglobal(L, "URL");
  CT_CHECK(luaL_loadstring(L, "return http.get(URL .. '/big')") == LUA_OK, "loading");
  lua_gc(L, LUA_GCCOLLECT, 0);
  int before = ts_connections();
  b.limit = b.used + 16384;
  int status = lua_pcall(L, 0, 1, 0);
  CT_CHECK(status == LUA_ERRMEM, "a 64 KiB body in a state with 16 KiB left: status %d", status);
  CT_CHECK(ts_connections() == before + 1, "the memory ran out after the request, not before it");
  b.limit = 0;
  /* the transfer's C buffers go with its userdata */
  lua_close(L);
}

/* ---- requests from several threads, each with its own state ---- */

typedef struct worker {
  pthread_t thread;
  int ok;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  push_client(L, "http", NULL, NULL);
  lua_pushfstring(L, "http://127.0.0.1:%d", ts.port);
  lua_setglobal(L, "URL");
  const char *code = "local n = 0 for i = 1, 3 do n = n + #http.get(URL .. '/text').body end return n";
  if (luaL_loadstring(L, code) == LUA_OK && lua_pcall(L, 0, 1, 0) == LUA_OK) w->ok = lua_tointeger(L, -1) == 15;
  lua_close(L);
  return NULL;
}

static void test_threads(void) {
  worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i].ok = 0;
    CT_CHECK(pthread_create(&w[i].thread, NULL, worker_main, &w[i]) == 0, "thread %d", i);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(w[i].thread, NULL);
    CT_CHECK(w[i].ok, "thread %d made its requests", i);
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  ts_unset_proxies();
  if (ts_start(route) != 0) {
    fprintf(stderr, "cannot start the test server\n");
    return 1;
  }
  int closed_port = 0;
  int closed = ts_bind_loopback(&closed_port);
  close(closed);

  test_threads();
  lua_State *L = new_state(closed_port);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const http_case *c = &cases[i];
    long long start = ts_now_ms();
    const char *got = run(L, c->code);
    long long took = ts_now_ms() - start;
    CT_CHECK(strcmp(c->expected, got) == 0, "%s: expected \"%s\", got \"%s\"", c->name, c->expected, got);
    if (c->max_ms) CT_CHECK(took <= c->max_ms, "%s: took %lld ms, more than %ld", c->name, took, c->max_ms);
  }
  test_error_fn(L);
  lua_close(L);
  test_out_of_memory();

  ts_stop();
  return ct_finish("http");
}
