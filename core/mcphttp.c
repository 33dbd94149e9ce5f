/* MCP's Streamable HTTP transport: a bounded HTTP/1.1 server (see mcphttp.h). */
#define _GNU_SOURCE   /* POLLRDHUP: a client that left while its request is held */
#include "mcphttp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "crypto.h"
#include "luma_limits.h"

enum { C_FREE, C_READ, C_READY, C_HELD, C_WRITE, C_GONE, C_DRAIN };

#define MH_CHUNK 0x1000        /* bytes read at once while a head arrives; an idle buffer's size */
#define MH_IDLE_KEEP 0x10000   /* a kept connection's buffer past this shrinks back to MH_CHUNK */
/* How long a connection ended by the server reads what its client still
   sends before it closes: a close with unread bytes resets the connection,
   and the client may lose the reply that says why (a lingering close, as
   nginx's). What it reads is dropped. */
#define MH_LINGER_MS 2000

/* One client connection. Invariant: in[0..in_len) holds what was read and
   not yet consumed; once the head is parsed (head_len > 0) the request is
   in[0..head_len + body_len) and hdrs point into it. */
typedef struct conn {
  int fd;
  int state;
  char *in;
  size_t in_len, in_cap;
  size_t scanned;       /* in[0..scanned) holds no blank line */
  size_t head_len, body_len;
  mh_header hdrs[LIM_MCP_HTTP_MAX_HEADERS];
  int nhdrs;
  const char *method, *target;
  int keep;             /* keep the connection after the reply */
  uint64_t id;          /* the request given out (C_HELD, C_GONE) */
  int streaming;        /* C_HELD: its reply is an event stream, begun (mh_stream) */
  char *out;
  size_t out_len, out_off;
  long long deadline;   /* ms; 0: none */
} conn;

typedef struct session {
  char id[33];          /* "" when free */
  char version[16];
  char client[129];     /* the client's name from initialize ("" if none), cut to 128 bytes */
  unsigned flags;       /* the caller's (mh_session_flags) */
  long long used;
} session;

struct mh_server {
  int lfd, port, loopback;
  unsigned char token_hash[32];
  int has_token;
  char **origins;
  int norigins;
  size_t max_body;
  conn conns[LIM_MCP_HTTP_MAX_CONNECTIONS];
  int rotate;           /* where mh_next looks first: fairness */
  uint64_t next_id;
  session sessions[LIM_MCP_HTTP_MAX_SESSIONS];
};

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *status_text(int status) {
  switch (status) {
    case 200: return "OK";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -1;
  return fcntl(fd, F_SETFD, FD_CLOEXEC);
}

mh_server *mh_open(const mh_config *cfg, char *err, size_t errlen) {
  struct sockaddr_storage ss;
  socklen_t sslen;
  memset(&ss, 0, sizeof ss);
  struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
  int loopback;
  if (inet_pton(AF_INET, cfg->host, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((uint16_t)cfg->port);
    sslen = sizeof *v4;
    loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  } else if (inet_pton(AF_INET6, cfg->host, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((uint16_t)cfg->port);
    sslen = sizeof *v6;
    loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
  } else {
    snprintf(err, errlen, "'%s' is not a numeric IPv4 or IPv6 address", cfg->host);
    return NULL;
  }
  mh_server *s = calloc(1, sizeof *s);
  if (!s) { snprintf(err, errlen, "out of memory"); return NULL; }
  s->lfd = -1;
  for (int i = 0; i < LIM_MCP_HTTP_MAX_CONNECTIONS; i++) s->conns[i].fd = -1;
  s->loopback = loopback;
  s->max_body = cfg->max_body;
  s->next_id = 1;
  if (cfg->token) {
    cr_sha256(cfg->token, strlen(cfg->token), s->token_hash);
    s->has_token = 1;
  }
  int n = 0;
  while (cfg->origins && cfg->origins[n]) n++;
  s->origins = calloc((size_t)n + 1, sizeof *s->origins);
  if (!s->origins) { mh_close(s); snprintf(err, errlen, "out of memory"); return NULL; }
  for (int i = 0; i < n; i++) {
    s->origins[i] = strdup(cfg->origins[i]);
    if (!s->origins[i]) { mh_close(s); snprintf(err, errlen, "out of memory"); return NULL; }
    s->norigins++;
  }
  s->lfd = socket(ss.ss_family, SOCK_STREAM, 0);
  int one = 1;
  if (s->lfd < 0 || setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(s->lfd, (struct sockaddr *)&ss, sslen) < 0 || listen(s->lfd, LIM_MCP_HTTP_MAX_CONNECTIONS) < 0 ||
      set_nonblock(s->lfd) < 0) {
    snprintf(err, errlen, "cannot listen on %s port %d: %s", cfg->host, cfg->port, strerror(errno));
    mh_close(s);
    return NULL;
  }
  if (getsockname(s->lfd, (struct sockaddr *)&ss, &sslen) == 0)
    s->port = ntohs(ss.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
  return s;
}

static void conn_close(conn *c) {
  if (c->fd >= 0) close(c->fd);
  free(c->in);
  free(c->out);
  memset(c, 0, sizeof *c);
  c->fd = -1;
  c->state = C_FREE;
}

void mh_close(mh_server *s) {
  if (!s) return;
  for (int i = 0; i < LIM_MCP_HTTP_MAX_CONNECTIONS; i++) conn_close(&s->conns[i]);
  if (s->lfd >= 0) close(s->lfd);
  for (int i = 0; i < s->norigins; i++) free(s->origins[i]);
  free(s->origins);
  memset(s->token_hash, 0, sizeof s->token_hash);
  free(s);
}

int mh_port(const mh_server *s) { return s->port; }

/* Writes what is queued; the connection ends when it is written and not kept. */
static void conn_flush(conn *c) {
  while (c->out_off < c->out_len) {
    ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (k <= 0 && c->state == C_HELD) {
      /* an event stream's client left: its request is reported gone */
      close(c->fd);
      c->fd = -1;
      c->state = C_GONE;
      return;
    }
    if (k <= 0) { conn_close(c); return; }
    c->out_off += (size_t)k;
  }
}

static void conn_parse(mh_server *s, conn *c);

/* After a reply: the next request of a kept connection, or the end. */
static void conn_next(mh_server *s, conn *c) {
  if (!c->keep) {
    if (shutdown(c->fd, SHUT_WR) != 0) { conn_close(c); return; }
    c->state = C_DRAIN;
    c->deadline = now_ms() + MH_LINGER_MS;
    return;
  }
  size_t used = c->head_len + c->body_len;
  memmove(c->in, c->in + used, c->in_len - used);
  c->in_len -= used;
  c->head_len = c->body_len = c->scanned = 0;
  c->nhdrs = 0;
  free(c->out);
  c->out = NULL;
  c->out_len = c->out_off = 0;
  if (c->in_cap > MH_IDLE_KEEP && c->in_len < MH_CHUNK) {   /* an idle connection holds little */
    char *smaller = realloc(c->in, MH_CHUNK + 1);
    if (smaller) { c->in = smaller; c->in_cap = MH_CHUNK; }
  }
  c->state = C_READ;
  c->deadline = now_ms() + (c->in_len ? LIM_MCP_HTTP_REQUEST_MS : LIM_MCP_HTTP_IDLE_MS);
  if (c->in_len) conn_parse(s, c);
}

/* Queues a whole response; the reply is written as the socket takes it. */
static int conn_respond(mh_server *s, conn *c, int status, const char *headers, const char *body, size_t len) {
  char head[256];
  int hn = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\n", status, status_text(status));
  char tail[128];
  int tn = snprintf(tail, sizeof tail, "Content-Length: %zu\r\nConnection: %s\r\n\r\n", len,
                    c->keep ? "keep-alive" : "close");
  size_t hl = headers ? strlen(headers) : 0;
  size_t total = (size_t)hn + hl + (size_t)tn + len;
  char *out = malloc(total);
  if (!out) { conn_close(c); return -1; }
  memcpy(out, head, (size_t)hn);
  if (hl) memcpy(out + hn, headers, hl);
  memcpy(out + hn + hl, tail, (size_t)tn);
  if (len) memcpy(out + hn + hl + tn, body, len);
  free(c->out);
  c->out = out;
  c->out_len = total;
  c->out_off = 0;
  c->state = C_WRITE;
  c->deadline = now_ms() + LIM_MCP_HTTP_REQUEST_MS;
  conn_flush(c);
  if (c->state == C_WRITE && c->out_off == c->out_len) conn_next(s, c);
  return 0;
}

/* Adds a, then b, then c to what is queued for c's client, and writes what
   the socket takes. -1 out of memory (the connection is closed then). */
static int conn_queue(conn *c, const char *a, size_t an, const char *b, size_t bn, const char *t, size_t tn) {
  size_t left = c->out_len - c->out_off;
  char *out = malloc(left + an + bn + tn + 1);
  if (!out) { conn_close(c); return -1; }
  if (left) memcpy(out, c->out + c->out_off, left);
  memcpy(out + left, a, an);
  if (bn) memcpy(out + left + an, b, bn);
  if (tn) memcpy(out + left + an + bn, t, tn);
  free(c->out);
  c->out = out;
  c->out_len = left + an + bn + tn;
  c->out_off = 0;
  conn_flush(c);
  return 0;
}

static const char sse_open[] = "event: message\ndata: ", sse_close[] = "\n\n";

/* A refusal of the transport, before the protocol sees the request: a
   JSON-RPC error with no id, and the connection ends (its body may be unread). */
static void conn_refuse(mh_server *s, conn *c, int status, const char *extra, const char *fmt, ...)
  __attribute__((format(printf, 5, 6)));
static void conn_refuse(mh_server *s, conn *c, int status, const char *extra, const char *fmt, ...) {
  char msg[512], body[768], headers[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* the messages are ASCII without quotes or backslashes: no escaping needed */
  int n = snprintf(body, sizeof body, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,\"message\":\"%s\"}}",
                   status == 503 || status == 408 ? -32000 : -32600, msg);
  if (n < 0 || (size_t)n >= sizeof body) n = 0;
  snprintf(headers, sizeof headers, "Content-Type: application/json\r\n%s", extra ? extra : "");
  c->keep = 0;
  conn_respond(s, c, status, headers, body, (size_t)n);
}

static const char *header(const conn *c, const char *name) {
  for (int i = 0; i < c->nhdrs; i++)
    if (strcmp(c->hdrs[i].name, name) == 0) return c->hdrs[i].value;
  return NULL;
}

/* host[:port] or [v6][:port] names a loopback address. */
static int loopback_host(const char *h, size_t n) {
  static const char *names[] = { "localhost", "127.0.0.1", "[::1]" };
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    size_t k = strlen(names[i]);
    if (n >= k && strncasecmp(h, names[i], k) == 0 && (n == k || h[k] == ':')) {
      for (size_t j = k + 1; j < n; j++) if (h[j] < '0' || h[j] > '9') return 0;
      return 1;
    }
  }
  return 0;
}

static int origin_allowed(const mh_server *s, const char *origin) {
  for (int i = 0; i < s->norigins; i++)
    if (strcmp(origin, s->origins[i]) == 0) return 1;
  const char *rest = NULL;
  if (strncmp(origin, "http://", 7) == 0) rest = origin + 7;
  else if (strncmp(origin, "https://", 8) == 0) rest = origin + 8;
  return rest && loopback_host(rest, strlen(rest));
}

static int token_matches(const mh_server *s, const char *auth) {
  if (!auth || strncasecmp(auth, "Bearer ", 7) != 0) return 0;
  const char *t = auth + 7;
  while (*t == ' ') t++;
  unsigned char h[32];
  cr_sha256(t, strlen(t), h);
  unsigned char diff = 0;
  for (int i = 0; i < 32; i++) diff |= (unsigned char)(h[i] ^ s->token_hash[i]);
  return diff == 0;
}

static int is_token_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || strchr("!#$%&'*+-.^_`|~", ch);
}

/* Parses in[0..head_len): the request line and the headers, in place
   (names lowered, lines cut). 0, or -1 when it is not HTTP/1.1. */
static int parse_head(mh_server *s, conn *c) {
  char *p = c->in, *end = c->in + c->head_len - 2;   /* the last line's \r\n stays */
  char *eol = strstr(p, "\r\n");
  if (!eol || eol >= end) return -1;
  *eol = 0;
  char *sp1 = strchr(p, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
  if (!sp1 || !sp2 || sp1 == p) return -1;
  *sp1 = *sp2 = 0;
  for (char *q = p; *q; q++) if (!is_token_char(*q)) return -1;
  if (strcmp(sp2 + 1, "HTTP/1.1") != 0 && strcmp(sp2 + 1, "HTTP/1.0") != 0) return -1;
  c->method = p;
  c->target = sp1 + 1;
  c->keep = strcmp(sp2 + 1, "HTTP/1.1") == 0;
  c->nhdrs = 0;
  p = eol + 2;
  while (p < end) {
    eol = strstr(p, "\r\n");
    if (!eol) return -1;
    *eol = 0;
    char *colon = strchr(p, ':');
    if (!colon || colon == p) return -1;   /* obs-fold, or no name */
    *colon = 0;
    for (char *q = p; *q; q++) {
      if (!is_token_char(*q)) return -1;
      if (*q >= 'A' && *q <= 'Z') *q = (char)(*q + 32);
    }
    char *v = colon + 1, *ve = eol;
    while (*v == ' ' || *v == '\t') v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) *--ve = 0;
    for (char *q = v; *q; q++) if ((unsigned char)*q < 0x20 && *q != '\t') return -1;
    if (c->nhdrs == LIM_MCP_HTTP_MAX_HEADERS) return -2;
    c->hdrs[c->nhdrs].name = p;
    c->hdrs[c->nhdrs].value = v;
    c->nhdrs++;
    p = eol + 2;
  }
  (void)s;
  return 0;
}

/* Parses what was read: the head once whole, then the body; refuses what
   breaks a bound or a check. */
static void conn_parse(mh_server *s, conn *c) {
  if (c->state != C_READ) return;
  if (!c->head_len) {
    size_t from = c->scanned > 3 ? c->scanned - 3 : 0;
    char *blank = NULL;
    for (size_t i = from; i + 4 <= c->in_len; i++)
      if (memcmp(c->in + i, "\r\n\r\n", 4) == 0) { blank = c->in + i; break; }
    if (!blank) {
      c->scanned = c->in_len;
      if (c->in_len > LIM_MCP_HTTP_MAX_HEAD_BYTES)
        conn_refuse(s, c, 431, NULL, "the request line and headers are over mcp_http_max_head_bytes (%d bytes)",
                    LIM_MCP_HTTP_MAX_HEAD_BYTES);
      return;
    }
    c->head_len = (size_t)(blank - c->in) + 4;
    if (c->head_len > LIM_MCP_HTTP_MAX_HEAD_BYTES) {
      conn_refuse(s, c, 431, NULL, "the request line and headers are over mcp_http_max_head_bytes (%d bytes)",
                  LIM_MCP_HTTP_MAX_HEAD_BYTES);
      return;
    }
    char saved = c->in[c->head_len - 1];
    c->in[c->head_len - 1] = 0;   /* strstr stays inside the head */
    int r = parse_head(s, c);
    c->in[c->head_len - 1] = saved;
    if (r == -2) {
      conn_refuse(s, c, 431, NULL, "more than mcp_http_max_headers (%d) headers", LIM_MCP_HTTP_MAX_HEADERS);
      return;
    }
    if (r < 0) {
      c->keep = 0;
      conn_refuse(s, c, 400, NULL, "not an HTTP/1.1 request: a request line METHOD TARGET HTTP/1.1, then name: value headers");
      return;
    }
    const char *connection = header(c, "connection");
    if (connection && strcasestr(connection, "close")) c->keep = 0;
    const char *te = header(c, "transfer-encoding"), *cl = header(c, "content-length");
    if (te) {
      conn_refuse(s, c, 411, NULL, "Transfer-Encoding bodies are not read: send the body with a Content-Length");
      return;
    }
    c->body_len = 0;
    if (cl) {
      unsigned long long v = 0;
      const char *q = cl;
      if (!*q) q = "x";
      for (; *q; q++) {
        if (*q < '0' || *q > '9' || v > (unsigned long long)s->max_body) break;
        v = v * 10 + (unsigned long long)(*q - '0');
      }
      if (*q && (*q < '0' || *q > '9')) {
        conn_refuse(s, c, 400, NULL, "Content-Length must be a decimal number of bytes");
        return;
      }
      if (v > s->max_body) {
        conn_refuse(s, c, 413, NULL, "the body is over mcp_max_message_bytes (%zu bytes)", s->max_body);
        return;
      }
      c->body_len = (size_t)v;
    } else if (strcmp(c->method, "POST") == 0) {
      conn_refuse(s, c, 411, NULL, "a POST needs a Content-Length");
      return;
    }
    const char *host = header(c, "host"), *origin = header(c, "origin");
    int hosts = 0;
    for (int i = 0; i < c->nhdrs; i++) hosts += strcmp(c->hdrs[i].name, "host") == 0;
    if (hosts > 1) {
      conn_refuse(s, c, 400, NULL, "more than one Host header");
      return;
    }
    if (s->loopback && !(host && loopback_host(host, strlen(host)))) {
      conn_refuse(s, c, 403, NULL, "the Host header must name a loopback address (localhost, 127.0.0.1, [::1]): "
                  "this server listens on loopback only");
      return;
    }
    if (origin && !origin_allowed(s, origin)) {
      conn_refuse(s, c, 403, NULL, "Origin is not allowed: only loopback origins and those given by --allow-origin");
      return;
    }
    if (s->has_token && !token_matches(s, header(c, "authorization"))) {
      conn_refuse(s, c, 401, "WWW-Authenticate: Bearer\r\n",
                  "this server needs Authorization: Bearer with its token");
      return;
    }
    const char *expect = header(c, "expect");
    if (expect && strcasecmp(expect, "100-continue") == 0 && c->in_len < c->head_len + c->body_len) {
      static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
      ssize_t k = send(c->fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)k;   /* a socket that cannot take 25 bytes now: the client sends anyway after its wait */
    }
  }
  if (c->in_len >= c->head_len + c->body_len) {
    c->state = C_READY;
    c->deadline = 0;
  }
}

static void conn_read(mh_server *s, conn *c) {
  size_t want;
  if (c->head_len) want = c->head_len + c->body_len - c->in_len;
  else want = MH_CHUNK;
  size_t need = c->in_len + want;
  if (need > c->in_cap) {
    size_t cap = c->in_cap ? c->in_cap : MH_CHUNK;
    while (cap < need) cap *= 2;
    char *bigger = realloc(c->in, cap + 1);
    if (!bigger) { conn_close(c); return; }
    c->in = bigger;
    c->in_cap = cap;
  }
  ssize_t k;
  do k = recv(c->fd, c->in + c->in_len, want, 0);
  while (k < 0 && errno == EINTR);
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (k <= 0) { conn_close(c); return; }
  if (c->in_len == 0) c->deadline = now_ms() + LIM_MCP_HTTP_REQUEST_MS;
  c->in_len += (size_t)k;
  c->in[c->in_len] = 0;
  conn_parse(s, c);
}

static void accept_all(mh_server *s) {
  for (int tries = 0; tries < LIM_MCP_HTTP_MAX_CONNECTIONS; tries++) {
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0) return;
    if (set_nonblock(fd) < 0) { close(fd); continue; }
    conn *c = NULL, *idle = NULL;
    for (int i = 0; i < LIM_MCP_HTTP_MAX_CONNECTIONS && !c; i++) {
      conn *x = &s->conns[i];
      if (x->state == C_FREE) c = x;
      else if (((x->state == C_READ && !x->in_len) || x->state == C_DRAIN) && (!idle || x->deadline < idle->deadline))
        idle = x;
    }
    if (!c && idle) {   /* at capacity, a connection that waits for nothing makes room */
      conn_close(idle);
      c = idle;
    }
    if (!c) {
      static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n"
                                 "Retry-After: 1\r\n\r\n";
      ssize_t k = send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)k;   /* at capacity: the best it can do is say so once */
      close(fd);
      continue;
    }
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->state = C_READ;
    c->deadline = now_ms() + LIM_MCP_HTTP_IDLE_MS;
  }
}

int mh_wait(mh_server *s, int timeout_ms, const int *extra, int nextra, int *ready) {
  struct pollfd fds[1 + 8 + LIM_MCP_HTTP_MAX_CONNECTIONS];
  int map[LIM_MCP_HTTP_MAX_CONNECTIONS];
  long long now = now_ms();
  if (nextra > 8) nextra = 8;
  /* what is past its time first */
  for (int i = 0; i < LIM_MCP_HTTP_MAX_CONNECTIONS; i++) {
    conn *c = &s->conns[i];
    if (!c->deadline || c->deadline > now) continue;
    if (c->state == C_READ && c->in_len)
      conn_refuse(s, c, 408, NULL, "the request did not arrive whole within mcp_http_request_ms (%d ms)",
                  LIM_MCP_HTTP_REQUEST_MS);
    else if (c->state == C_READ || c->state == C_WRITE || c->state == C_DRAIN)
      conn_close(c);
  }
  int n = 0;
  fds[n].fd = s->lfd;
  fds[n].events = POLLIN;
  n++;
  for (int i = 0; i < nextra; i++) {
    fds[n].fd = extra[i];
    fds[n].events = POLLIN;
    ready[i] = 0;
    n++;
  }
  int first = n;
  long long soonest = -1;
  for (int i = 0; i < LIM_MCP_HTTP_MAX_CONNECTIONS; i++) {
    conn *c = &s->conns[i];
    short ev;
    if (c->state == C_READ || c->state == C_DRAIN) ev = POLLIN;
    else if (c->state == C_WRITE) ev = POLLOUT;
    else if (c->state == C_HELD) ev = POLLRDHUP | (c->out_off < c->out_len ? POLLOUT : 0);
    else continue;
    if (c->deadline && (soonest < 0 || c->deadline < soonest)) soonest = c->deadline;
    map[n - first] = i;
    fds[n].fd = c->fd;
    fds[n].events = ev;
    n++;
  }
  /* a request already read whole is not waited for */
  for (int i = 0; i < LIM_MCP_HTTP_MAX_CONNECTIONS; i++)
    if (s->conns[i].state == C_READY) timeout_ms = 0;
  if (soonest >= 0) {
    long long left = soonest - now;
    if (left < 0) left = 0;
    if (timeout_ms < 0 || left < timeout_ms) timeout_ms = (int)left;
  }
  for (int i = 0; i < n; i++) fds[i].revents = 0;
  int r = poll(fds, (nfds_t)n, timeout_ms);
  if (r < 0) return errno == EINTR ? 0 : -1;
  for (int i = 0; i < nextra; i++) ready[i] = fds[1 + i].revents != 0;
  for (int k = first; k < n; k++) {
    if (!fds[k].revents) continue;
    conn *c = &s->conns[map[k - first]];
    if (c->state == C_HELD && !(fds[k].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      conn_flush(c);   /* an event stream's bytes */
    } else if (c->state == C_HELD) {
      close(c->fd);
      c->fd = -1;
      c->state = C_GONE;
    } else if (c->state == C_READ) {
      conn_read(s, c);
    } else if (c->state == C_DRAIN) {
      char sink[MH_CHUNK];
      ssize_t got = recv(c->fd, sink, sizeof sink, 0);
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) conn_close(c);
    } else if (c->state == C_WRITE) {
      if (fds[k].revents & (POLLERR | POLLHUP)) { conn_close(c); continue; }
      conn_flush(c);
      if (c->state == C_WRITE && c->out_off == c->out_len) conn_next(s, c);
    }
  }
  if (fds[0].revents) accept_all(s);
  return 0;
}

int mh_next(mh_server *s, mh_request *r) {
  for (int k = 0; k < LIM_MCP_HTTP_MAX_CONNECTIONS; k++) {
    int i = (s->rotate + k) % LIM_MCP_HTTP_MAX_CONNECTIONS;
    conn *c = &s->conns[i];
    if (c->state != C_READY) continue;
    s->rotate = i + 1;
    c->state = C_HELD;
    c->id = s->next_id++;
    r->id = c->id;
    r->method = c->method;
    r->target = c->target;
    r->headers = c->hdrs;
    r->nheaders = c->nhdrs;
    r->body = c->in + c->head_len;
    r->body_len = c->body_len;
    return 1;
  }
  return 0;
}

static conn *held(mh_server *s, uint64_t id) {
  for (int i = 0; i < LIM_MCP_HTTP_MAX_CONNECTIONS; i++)
    if (s->conns[i].state == C_HELD && s->conns[i].id == id) return &s->conns[i];
  return NULL;
}

int mh_reply(mh_server *s, uint64_t id, int status, const char *headers, const char *body, size_t len) {
  conn *c = held(s, id);
  if (!c) return -1;
  if (!c->streaming) {
    conn_respond(s, c, status, headers, body, len);
    return 0;
  }
  /* the last event of the stream, which ends with the connection */
  c->streaming = 0;
  if (len && conn_queue(c, sse_open, sizeof sse_open - 1, body, len, sse_close, sizeof sse_close - 1) != 0) return 0;
  if (c->fd < 0) return 0;
  c->state = C_WRITE;
  c->deadline = now_ms() + LIM_MCP_HTTP_REQUEST_MS;
  if (c->out_off == c->out_len) conn_next(s, c);
  return 0;
}

int mh_stream(mh_server *s, uint64_t id, const char *headers) {
  conn *c = held(s, id);
  if (!c) return -1;
  if (c->streaming) return 0;
  char head[256];
  /* no length: the stream ends with the connection */
  int hn = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n");
  static const char tail[] = "Connection: close\r\n\r\n";
  c->keep = 0;
  c->streaming = 1;
  return conn_queue(c, head, (size_t)hn, headers ? headers : "", headers ? strlen(headers) : 0, tail, sizeof tail - 1) == 0 &&
         c->fd >= 0 ? 0 : -1;
}

int mh_event(mh_server *s, uint64_t id, const char *data, size_t len) {
  conn *c = held(s, id);
  if (!c || !c->streaming) return -1;
  /* a client that does not read holds this much, and misses what comes past it */
  if (c->out_len - c->out_off + len > LIM_MCP_MAX_MESSAGE_BYTES) return 1;
  return conn_queue(c, sse_open, sizeof sse_open - 1, data, len, sse_close, sizeof sse_close - 1) == 0 && c->fd >= 0 ? 0 : -1;
}

int mh_gone(mh_server *s, uint64_t *id) {
  for (int i = 0; i < LIM_MCP_HTTP_MAX_CONNECTIONS; i++) {
    conn *c = &s->conns[i];
    if (c->state != C_GONE) continue;
    *id = c->id;
    conn_close(c);
    return 1;
  }
  return 0;
}

static session *find_session(mh_server *s, const char *id) {
  if (!id || strlen(id) != 32) return NULL;
  long long now = now_ms();
  for (int i = 0; i < LIM_MCP_HTTP_MAX_SESSIONS; i++) {
    session *x = &s->sessions[i];
    if (!x->id[0] || memcmp(x->id, id, 32) != 0) continue;
    if (now - x->used > LIM_MCP_HTTP_SESSION_IDLE_MS) { x->id[0] = 0; return NULL; }
    return x;
  }
  return NULL;
}

int mh_session_new(mh_server *s, const char *version, const char *client, char out[33]) {
  unsigned char raw[16];
  if (cr_random(raw, sizeof raw) != 0) return -1;
  for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", raw[i]);
  session *slot = &s->sessions[0];
  for (int i = 0; i < LIM_MCP_HTTP_MAX_SESSIONS; i++) {
    session *x = &s->sessions[i];
    if (!x->id[0]) { slot = x; break; }
    if (x->used < slot->used) slot = x;   /* the least recently used ends */
  }
  memcpy(slot->id, out, 33);
  snprintf(slot->version, sizeof slot->version, "%s", version);
  snprintf(slot->client, sizeof slot->client, "%s", client ? client : "");
  slot->flags = 0;
  slot->used = now_ms();
  return 0;
}

unsigned *mh_session_flags(mh_server *s, const char *id) {
  session *x = find_session(s, id);
  return x ? &x->flags : NULL;
}

const char *mh_session(mh_server *s, const char *id, const char **client) {
  session *x = find_session(s, id);
  if (!x) return NULL;
  x->used = now_ms();
  if (client) *client = x->client;
  return x->version;
}

int mh_session_end(mh_server *s, const char *id) {
  session *x = find_session(s, id);
  if (!x) return 0;
  x->id[0] = 0;
  return 1;
}
