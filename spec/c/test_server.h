/*
 * The loopback HTTP/1.1 server of the C tests that make requests
 * (test_http.c, test_transport.c). A thread accepts on 127.0.0.1 at an
 * ephemeral port (ts_port); each connection is served by a thread of its
 * own, which reads one request at a time (its head, then Content-Length
 * bytes) and hands it to the test's route function. Nothing leaves the
 * machine; ts_stop ends every thread.
 *
 * Include it once, after ctest.h and strbuf.h.
 */
#ifndef LUMA_TEST_SERVER_H
#define LUMA_TEST_SERVER_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "strbuf.h"

/* Answers the request in req (head_len bytes of head, then body_len of
   body; the route may write into it). serial counts the connections, from
   0. Returns 1 to keep the connection open for the next request. */
typedef int (*ts_route)(int conn, int serial, char *req, size_t head_len, size_t body_len);

static struct {
  int fd, port;
  ts_route route;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t idle;            /* signalled when a connection's thread ends */
  int stop;                       /* guarded by lock */
  int connections;                /* accepted so far, guarded by lock */
  int live;                       /* connection threads running, guarded by lock */
} ts = { -1, 0, NULL, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0 };

static long long ts_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void ts_sleep_ms(long ms) {
  struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
  nanosleep(&t, NULL);
}

static int ts_stopping(void) {
  pthread_mutex_lock(&ts.lock);
  int stop = ts.stop;
  pthread_mutex_unlock(&ts.lock);
  return stop;
}

/* The connections accepted so far. */
static int ts_connections(void) {
  pthread_mutex_lock(&ts.lock);
  int n = ts.connections;
  pthread_mutex_unlock(&ts.lock);
  return n;
}

static int ts_send_all(int conn, const char *p, size_t len) {
  while (len) {
    ssize_t n = send(conn, p, len, MSG_NOSIGNAL);
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* A response with its Content-Length; headers are whole lines ("" for none). */
static void ts_respond(int conn, int head_only, int status, const char *reason, const char *headers,
                       const char *body, size_t len) {
  sb_buf b;
  sb_init(&b);
  sb_printf(&b, "HTTP/1.1 %d %s\r\n%sContent-Length: %zu\r\n\r\n", status, reason, headers, len);
  if (!head_only) sb_add(&b, body, len);
  ts_send_all(conn, b.data, b.len);
  sb_free(&b);
}

static char ts_lower(char c) {
  return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* s starts with prefix (lower case), in any case. */
static int ts_has_prefix_ci(const char *s, const char *prefix) {
  for (; *prefix; s++, prefix++)
    if (ts_lower(*s) != *prefix) return 0;
  return 1;
}

/* True once the client closed its end. */
static int ts_client_gone(int conn) {
  struct pollfd p = { conn, POLLIN, 0 };
  char c;
  return poll(&p, 1, 0) > 0 && recv(conn, &c, 1, MSG_PEEK) <= 0;
}

/* Reads one request into req (which may hold the start of the next one):
   the head up to the blank line, then Content-Length bytes. 0, or -1 when
   the client went away, sent more than 4 MiB, or the server stops. */
static int ts_read_request(int conn, sb_buf *req, size_t *head_len, size_t *body_len) {
  *head_len = *body_len = 0;
  for (;;) {
    if (*head_len) {
      if (req->len >= *head_len + *body_len) return 0;
    } else {
      const char *end = strstr(sb_str(req), "\r\n\r\n");
      if (end) {
        *head_len = (size_t)(end - req->data) + 4;
        for (const char *line = strstr(req->data, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n"))
          if (ts_has_prefix_ci(line + 2, "content-length:")) *body_len = strtoul(line + 2 + 15, NULL, 10);
        continue;
      }
    }
    if (req->len > ((size_t)4 << 20) || ts_stopping()) return -1;
    struct pollfd p = { conn, POLLIN, 0 };
    if (poll(&p, 1, 50) <= 0) continue;
    char chunk[4096];
    ssize_t n = recv(conn, chunk, sizeof chunk, 0);
    if (n <= 0) return -1;
    sb_add(req, chunk, (size_t)n);
  }
}

typedef struct ts_conn {
  int fd, serial;
} ts_conn;

static void *ts_conn_main(void *arg) {
  ts_conn c = *(ts_conn *)arg;
  free(arg);
  sb_buf req;
  sb_init(&req);
  size_t head_len, body_len;
  while (ts_read_request(c.fd, &req, &head_len, &body_len) == 0) {
    int again = ts.route(c.fd, c.serial, req.data, head_len, body_len);
    size_t used = head_len + body_len;
    memmove(req.data, req.data + used, req.len - used);
    req.len -= used;
    req.data[req.len] = '\0';
    if (!again) break;
  }
  sb_free(&req);
  shutdown(c.fd, SHUT_WR);
  close(c.fd);
  pthread_mutex_lock(&ts.lock);
  ts.live--;
  pthread_cond_signal(&ts.idle);
  pthread_mutex_unlock(&ts.lock);
  return NULL;
}

static void *ts_main(void *arg) {
  (void)arg;
  pthread_attr_t detached;
  pthread_attr_init(&detached);
  pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
  while (!ts_stopping()) {
    struct pollfd p = { ts.fd, POLLIN, 0 };
    if (poll(&p, 1, 50) <= 0) continue;
    int fd = accept(ts.fd, NULL, NULL);
    if (fd < 0) continue;
    ts_conn *c = malloc(sizeof *c);
    pthread_t thread;
    pthread_mutex_lock(&ts.lock);
    if (c) {
      c->fd = fd;
      c->serial = ts.connections;
      if (pthread_create(&thread, &detached, ts_conn_main, c) == 0) {
        ts.connections++;
        ts.live++;
        c = NULL;
        fd = -1;
      }
    }
    pthread_mutex_unlock(&ts.lock);
    free(c);
    if (fd >= 0) close(fd);
  }
  pthread_attr_destroy(&detached);
  return NULL;
}

/* A socket bound to an ephemeral port of 127.0.0.1, its port in *port; -1
   when it cannot be made. (Closed at once, it gives a port nothing listens on.) */
static int ts_bind_loopback(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

/* The requests go straight to the server, whatever proxy the environment names. */
static void ts_unset_proxies(void) {
  static const char *const proxies[] = { "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                                         "ALL_PROXY", NULL };
  for (const char *const *p = proxies; *p; p++) unsetenv(*p);
}

/* Starts the server with its routes: 0, or -1. */
static int ts_start(ts_route route) {
  ts.route = route;
  ts.fd = ts_bind_loopback(&ts.port);
  if (ts.fd < 0 || listen(ts.fd, 64) != 0) return -1;
  return pthread_create(&ts.thread, NULL, ts_main, NULL) == 0 ? 0 : -1;
}

/* Stops accepting, and waits for every connection's thread to end. */
static void ts_stop(void) {
  pthread_mutex_lock(&ts.lock);
  ts.stop = 1;
  pthread_mutex_unlock(&ts.lock);
  pthread_join(ts.thread, NULL);
  pthread_mutex_lock(&ts.lock);
  while (ts.live > 0) pthread_cond_wait(&ts.idle, &ts.lock);
  pthread_mutex_unlock(&ts.lock);
  close(ts.fd);
}

#endif
