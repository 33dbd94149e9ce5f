/*
 * An HTTP/1.1 server on 127.0.0.1 for bench/waiting: it answers every
 * request with {"ok":true} after DELAY_MS, to any number of connections at
 * once, on one thread: an epoll of its listening sockets and connections,
 * and one timerfd set to the earliest answer due. Every request waits the
 * same delay, so the answers due are a FIFO queue (ordered by when their
 * request ended), and the timer is set to its head.
 *   bench_slow_server PORTFILE [DELAY_MS [LIFETIME_S]]
 * It writes its port to PORTFILE once it listens, keeps a connection open
 * after its answer unless the request asked to close it (or was HTTP/1.0
 * without keep-alive), and exits by itself after LIFETIME_S (120 s by default), so that a bench
 * that failed half-way cannot leave it behind.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* The kernel caps a listening socket's queue at net.core.somaxconn (4,096
   here): 10,000 connections at once would overflow one, and the SYNs past
   it wait to be sent again (1 s, then 3 s). LISTENERS sockets share the
   port (SO_REUSEPORT), each with its own queue. */
#define LISTENERS 8
#define BACKLOG 65535
#define LIFETIME_S 120
#define REQ_MAX 4096

typedef struct conn {
  int fd;
  int waiting;                /* in the queue of answers due */
  int closed_by_peer;         /* read 0 while waiting: closed once answered */
  int close_after;            /* the request asked to close after the answer */
  long long due_ns;
  struct conn *next;          /* in the queue */
  size_t len;
  char req[REQ_MAX];
} conn;

static const char BODY[] = "{\"ok\":true}";
static char answer_keep[256], answer_close[256];
static size_t answer_keep_len, answer_close_len;
static conn **conns;          /* by fd */
static size_t n_conns;
static conn *due_head, *due_tail;
static int epfd, tfd;
static long long delay_ns;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *what) {
  fprintf(stderr, "bench_slow_server: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void arm(void) {
  struct itimerspec its;
  memset(&its, 0, sizeof its);
  if (due_head) {
    long long at = due_head->due_ns;
    its.it_value.tv_sec = at / 1000000000LL;
    its.it_value.tv_nsec = at % 1000000000LL;
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
  }
  timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void drop(conn *c) {
  close(c->fd);
  conns[c->fd] = NULL;
  free(c);
}

/* Whether the request's head (up to its blank line) asks to close after it. */
static int asks_close(const char *req, size_t len) {
  const char *eol = memchr(req, '\n', len);
  int http10 = eol && eol - req >= 9 && memcmp(eol - 9, "HTTP/1.0", 8) == 0;
  int close_it = 0, keep = 0;
  for (const char *p = eol ? eol + 1 : req + len; p < req + len;) {
    const char *e = memchr(p, '\n', (size_t)(req + len - p));
    if (!e) break;
    if ((size_t)(e - p) > 11 && strncasecmp(p, "connection:", 11) == 0) {
      const char *v = p + 11;
      while (v < e && (*v == ' ' || *v == '\t')) v++;
      if ((size_t)(e - v) >= 5 && strncasecmp(v, "close", 5) == 0) close_it = 1;
      if ((size_t)(e - v) >= 10 && strncasecmp(v, "keep-alive", 10) == 0) keep = 1;
    }
    p = e + 1;
  }
  return close_it || (http10 && !keep);
}

static void on_readable(conn *c) {
  for (;;) {
    if (c->len == REQ_MAX) {
      drop(c);
      return;
    }
    ssize_t n = read(c->fd, c->req + c->len, REQ_MAX - c->len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      if (c->waiting) {
        /* the peer is gone (an error or its end): answered (into a closed
           socket) and closed when due */
        c->closed_by_peer = 1;
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
      } else {
        drop(c);
      }
      return;
    }
    if (c->waiting) continue;      /* a pipelined request: not supported, ignored */
    size_t from = c->len >= 3 ? c->len - 3 : 0;
    c->len += (size_t)n;
    if (memmem(c->req + from, c->len - from, "\r\n\r\n", 4)) {
      c->close_after = asks_close(c->req, c->len);
      c->waiting = 1;
      c->due_ns = now_ns() + delay_ns;
      c->next = NULL;
      if (due_tail) due_tail->next = c;
      else {
        due_head = c;
        arm();
      }
      due_tail = c;
    }
  }
}

static void answer_due(void) {
  uint64_t expirations;
  if (read(tfd, &expirations, sizeof expirations) < 0 && errno != EAGAIN) die("read timerfd");
  long long now = now_ns();
  while (due_head && due_head->due_ns <= now) {
    conn *c = due_head;
    due_head = c->next;
    if (!due_head) due_tail = NULL;
    c->waiting = 0;
    c->len = 0;
    if (c->closed_by_peer) {
      drop(c);
      continue;
    }
    const char *a = c->close_after ? answer_close : answer_keep;
    size_t len = c->close_after ? answer_close_len : answer_keep_len;
    /* a fresh socket's buffer takes the whole answer */
    ssize_t n = send(c->fd, a, len, MSG_NOSIGNAL);
    if (n != (ssize_t)len || c->close_after) drop(c);
  }
  arm();
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_slow_server PORTFILE [DELAY_MS [LIFETIME_S]]\n");
    return 2;
  }
  delay_ns = (argc > 2 ? atoll(argv[2]) : 1000) * 1000000LL;
  signal(SIGPIPE, SIG_IGN);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  n_conns = rl.rlim_cur > 1048576 ? 1048576 : (size_t)rl.rlim_cur;
  conns = calloc(n_conns, sizeof *conns);
  if (!conns) die("calloc");
  answer_keep_len = (size_t)snprintf(answer_keep, sizeof answer_keep,
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", strlen(BODY), BODY);
  answer_close_len = (size_t)snprintf(answer_close, sizeof answer_close,
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
    strlen(BODY), BODY);

  epfd = epoll_create1(EPOLL_CLOEXEC);
  tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epfd < 0 || tfd < 0) die("epoll or timerfd");
  struct epoll_event ev = { .events = EPOLLIN, .data.fd = tfd };
  epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &ev);

  int listeners[LISTENERS];
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = 0;
  for (int i = 0; i < LISTENERS; i++) {
    int one = 1;
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) die("socket");
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&sa, sizeof sa) != 0) die("bind");
    if (listen(s, BACKLOG) != 0) die("listen");
    if (i == 0) {
      socklen_t len = sizeof sa;
      getsockname(s, (struct sockaddr *)&sa, &len);
    }
    listeners[i] = s;
    ev.events = EPOLLIN;
    ev.data.fd = s;
    epoll_ctl(epfd, EPOLL_CTL_ADD, s, &ev);
  }
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
  FILE *f = fopen(tmp, "w");
  if (!f) die(tmp);
  fprintf(f, "%d\n", ntohs(sa.sin_port));
  fclose(f);
  if (rename(tmp, argv[1]) != 0) die("rename");

  long long end = now_ns() + (argc > 3 ? atoll(argv[3]) : LIFETIME_S) * 1000000000LL;
  struct epoll_event events[256];
  while (now_ns() < end) {
    int n = epoll_wait(epfd, events, 256, 1000);
    if (n < 0 && errno != EINTR) die("epoll_wait");
    for (int i = 0; i < n; i++) {
      int fd = events[i].data.fd;
      if (fd == tfd) {
        answer_due();
        continue;
      }
      int listening = 0;
      for (int l = 0; l < LISTENERS; l++) listening |= fd == listeners[l];
      if (listening) {
        /* one connection from each listener in turn: the kernel spreads a
           client's connections over them at random, and draining one
           listener after the other would answer them (1 s after reading
           their requests, in the order accepted) far from the order the
           client opened them, which libcurl pays for: it looks for a
           closed connection from the oldest of its host */
        int pending[LISTENERS];
        for (int l = 0; l < LISTENERS; l++) pending[l] = 1;
        for (int progress = 1; progress;) {
          progress = 0;
          for (int l = 0; l < LISTENERS; l++) {
            if (!pending[l]) continue;
            int s = accept4(listeners[l], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (s < 0) {
              pending[l] = 0;        /* EAGAIN, or out of descriptors: the peer's SYN waits */
              continue;
            }
            progress = 1;
            if ((size_t)s >= n_conns) {
              close(s);
              continue;
            }
            int one = 1;
            setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            conn *c = calloc(1, sizeof *c);
            if (!c) {
              close(s);
              continue;
            }
            c->fd = s;
            conns[s] = c;
            ev.events = EPOLLIN;
            ev.data.fd = s;
            epoll_ctl(epfd, EPOLL_CTL_ADD, s, &ev);
          }
        }
        continue;
      }
      if ((size_t)fd < n_conns && conns[fd]) on_readable(conns[fd]);
    }
  }
  return 0;
}
