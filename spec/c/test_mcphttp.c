/*
 * core/mcphttp.c: MCP's Streamable HTTP server, driven in one thread over
 * loopback. A request comes out whole however its bytes are cut (here one
 * at a time); two sent at once on a kept connection come out one after the
 * other; names are lowered and values trimmed; the refusals (a bad
 * Content-Length, a body over max, two Host headers, a foreign Origin, a
 * wrong token, a head over mcp_http_max_head_bytes) answer with their status
 * and close; a client that leaves a held request makes it gone; sessions
 * are found, ended, and the least recently used makes room.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctest.h"
#include "luma_limits.h"
#include "mcphttp.h"

static int dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { close(fd); return -1; }
  return fd;
}

static void pump(mh_server *s, int rounds) {
  int ready[1];
  for (int i = 0; i < rounds; i++) mh_wait(s, 5, NULL, 0, ready);
}

/* The next request, pumping the server until one is whole (at most ~1 s). */
static int next(mh_server *s, mh_request *r) {
  for (int i = 0; i < 200; i++) {
    if (mh_next(s, r)) return 1;
    pump(s, 1);
  }
  return 0;
}

/* What the client reads within ~1 s, pumping the server meanwhile. */
static size_t drain(mh_server *s, int fd, char *buf, size_t cap) {
  size_t n = 0;
  for (int i = 0; i < 200 && n + 1 < cap; i++) {
    pump(s, 1);
    struct pollfd p = { fd, POLLIN, 0 };
    if (poll(&p, 1, 0) <= 0) continue;
    ssize_t k = recv(fd, buf + n, cap - 1 - n, MSG_DONTWAIT);
    if (k <= 0) break;
    n += (size_t)k;
  }
  buf[n] = 0;
  return n;
}

static const char *hdr(const mh_request *r, const char *name) {
  for (int i = 0; i < r->nheaders; i++)
    if (strcmp(r->headers[i].name, name) == 0) return r->headers[i].value;
  return NULL;
}

static const char REQ[] = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type:  application/json \r\n"
                          "Content-Length: 7\r\n\r\n{\"a\":1}";

static void cut_at_every_byte(mh_server *s) {
  int fd = dial(mh_port(s));
  for (size_t i = 0; i < sizeof REQ - 1; i++) {
    CT_CHECK(send(fd, REQ + i, 1, 0) == 1, "send");
    mh_request r;
    pump(s, 1);
    if (i + 2 < sizeof REQ) CT_CHECK(!mh_next(s, &r), "a request before its last byte (at %zu)", i);
  }
  mh_request r;
  CT_CHECK(next(s, &r), "the request");
  CT_EQ_STR("POST", r.method);
  CT_EQ_STR("/mcp", r.target);
  CT_EQ_STR("application/json", hdr(&r, "content-type"));
  CT_CHECK(r.body_len == 7 && memcmp(r.body, "{\"a\":1}", 7) == 0, "body %.*s", (int)r.body_len, r.body);
  CT_CHECK(mh_reply(s, r.id, 200, "X-A: b\r\n", "ok", 2) == 0, "reply");
  CT_CHECK(mh_reply(s, r.id, 200, NULL, "ok", 2) == -1, "a second reply");
  char buf[1024];
  drain(s, fd, buf, sizeof buf);
  CT_CHECK(strstr(buf, "HTTP/1.1 200 OK\r\nX-A: b\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok") == buf,
           "%s", buf);
  close(fd);
}

static void pipelined(mh_server *s) {
  int fd = dial(mh_port(s));
  char two[2 * sizeof REQ];
  snprintf(two, sizeof two, "%s%s", REQ, REQ);
  CT_CHECK(send(fd, two, strlen(two), 0) == (ssize_t)strlen(two), "send");
  for (int k = 0; k < 2; k++) {
    mh_request r;
    CT_CHECK(next(s, &r), "request %d", k);
    mh_request other;
    CT_CHECK(!mh_next(s, &other), "the second before the first's reply");
    mh_reply(s, r.id, 202, NULL, NULL, 0);
  }
  char buf[1024];
  drain(s, fd, buf, sizeof buf);
  CT_CHECK(strstr(buf, "202") && strstr(strstr(buf, "202") + 3, "202"), "two replies: %s", buf);
  close(fd);
}

static void refused(mh_server *s) {
  char big[LIM_MCP_HTTP_MAX_HEAD_BYTES + 64];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  memcpy(big, "GET /mcp HTTP/1.1\r\nX: ", 22);
  const struct { const char *text; const char *status; } cases[] = {
    { "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1x\r\n\r\n", "HTTP/1.1 400 " },
    { "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999999999999999\r\n\r\n", "HTTP/1.1 413 " },
    { "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "HTTP/1.1 411 " },
    { "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 400 " },
    { "POST /mcp HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 403 " },
    { "POST /mcp HTTP/1.1\r\nHost: localhost:80\r\nOrigin: http://evil.example\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 403 " },
    { "POST /mcp HTTP/1.1\r\nHost: [::1]:80\r\nContent-Length: 0\r\nAuthorization: Bearer nope\r\n\r\n", "HTTP/1.1 401 " },
    { "GET /mcp HTTP/1.1\r\n folded: x\r\n\r\n", "HTTP/1.1 400 " },
    { "G@T /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "HTTP/1.1 400 " },
    { "GET /mcp HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", "HTTP/1.1 400 " },
    { big, "HTTP/1.1 431 " },
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int fd = dial(mh_port(s));
    send(fd, cases[i].text, strlen(cases[i].text), MSG_NOSIGNAL);
    char buf[2048];
    drain(s, fd, buf, sizeof buf);
    CT_CHECK(strncmp(buf, cases[i].status, strlen(cases[i].status)) == 0, "case %zu: %.60s", i, buf);
    CT_CHECK(strstr(buf, "Connection: close") != NULL, "case %zu ends the connection", i);
    close(fd);
  }
  /* the right token, and an allowed origin */
  int fd = dial(mh_port(s));
  const char *ok = "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:9\r\nOrigin: https://app.example\r\n"
                   "Authorization: bearer s3cret\r\n\r\n";
  send(fd, ok, strlen(ok), 0);
  mh_request r;
  CT_CHECK(next(s, &r), "a request with the token");
  mh_reply(s, r.id, 204, NULL, NULL, 0);
  close(fd);
}

static void gone(mh_server *s) {
  int fd = dial(mh_port(s));
  send(fd, REQ, sizeof REQ - 1, 0);
  mh_request r;
  CT_CHECK(next(s, &r), "the request");
  close(fd);
  uint64_t id = 0;
  for (int i = 0; i < 200 && !mh_gone(s, &id); i++) pump(s, 1);
  CT_CHECK(id == r.id, "gone: %llu, not %llu", (unsigned long long)id, (unsigned long long)r.id);
  CT_CHECK(mh_reply(s, r.id, 200, NULL, "x", 1) == -1, "no reply to a gone request");
}

static void sessions(mh_server *s) {
  char first[33], id[33];
  const char *client = NULL;
  CT_CHECK(mh_session_new(s, "2025-06-18", "inspector", first) == 0, "a session");
  CT_CHECK(strlen(first) == 32, "32 hex digits: %s", first);
  CT_EQ_STR("2025-06-18", mh_session(s, first, &client));
  CT_EQ_STR("inspector", client);
  CT_CHECK(mh_session(s, "0123", NULL) == NULL, "a short id");
  CT_CHECK(mh_session_end(s, first) == 1 && mh_session(s, first, NULL) == NULL, "ended");
  CT_CHECK(mh_session_end(s, first) == 0, "ended twice");
  char name[300];
  memset(name, 'n', sizeof name - 1);
  name[sizeof name - 1] = 0;
  mh_session_new(s, "2025-11-25", name, first);
  mh_session(s, first, &client);
  CT_CHECK(strlen(client) == 128, "a long client name cut to 128 bytes: %zu", strlen(client));
  for (int i = 0; i < LIM_MCP_HTTP_MAX_SESSIONS; i++) {
    usleep(i == 0 ? 2000 : 0);   /* the first is the least recently used */
    mh_session_new(s, "2025-11-25", NULL, id);
  }
  CT_CHECK(mh_session(s, first, NULL) == NULL, "the least recently used made room");
  CT_EQ_STR("2025-11-25", mh_session(s, id, &client));
  CT_EQ_STR("", client);
}

int main(void) {
  const char *origins[] = { "https://app.example", NULL };
  mh_config cfg = { "127.0.0.1", 0, "s3cret", origins, 64 };
  char err[256];
  mh_config bad = cfg;
  bad.host = "localhost";
  CT_CHECK(mh_open(&bad, err, sizeof err) == NULL, "a name is not an address");
  CT_EQ_STR("'localhost' is not a numeric IPv4 or IPv6 address", err);
  mh_server *s = mh_open(&cfg, err, sizeof err);
  CT_CHECK(s != NULL, "%s", err);
  if (!s) return ct_finish("test_mcphttp");
  /* the token is asked for: the cases that expect a request send it */
  mh_close(s);
  cfg.token = NULL;
  s = mh_open(&cfg, err, sizeof err);
  cut_at_every_byte(s);
  pipelined(s);
  gone(s);
  sessions(s);
  mh_close(s);
  cfg.token = "s3cret";
  s = mh_open(&cfg, err, sizeof err);
  refused(s);
  mh_close(s);
  return ct_finish("test_mcphttp");
}
