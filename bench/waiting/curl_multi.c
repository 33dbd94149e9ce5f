/*
 * The bound of bench/waiting's http row: CALLS requests to one URL, all
 * started at once on a bare libcurl multi handle, driven on one thread with
 * curl_multi_socket_action and an epoll of the sockets libcurl asks to
 * watch, with the options luma's transport gives a luma.http.get
 * (base/tpmsg.c, base/transport.c). What libcurl and the kernel cost on
 * this machine, without luma.
 *   bench_curl_multi URL CALLS
 * Prints "ok=N wall_ms=W cpu_ms=C": the requests answered 200 with the
 * body {"ok":true}, the wall time from the first start to the last end,
 * and the process's CPU time (user and system) meanwhile.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>

#include "luma_limits.h"

typedef struct {
  CURL *curl;
  char body[64];
  size_t len;
  char error[CURL_ERROR_SIZE];
} req;

static int epfd;
static long long timer_ns = -1;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double cpu_ms(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
  req *r = ud;
  size_t len = size * n;
  size_t room = sizeof r->body - 1 - r->len;
  memcpy(r->body + r->len, p, len < room ? len : room);
  r->len += len < room ? len : room;
  return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
  (void)p;
  (void)ud;
  return size * n;
}

static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp) {
  (void)easy;
  (void)userp;
  (void)socketp;
  if (what == CURL_POLL_REMOVE) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, s, NULL);
    return 0;
  }
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
  ev.data.fd = s;
  if (epoll_ctl(epfd, EPOLL_CTL_MOD, s, &ev) != 0 && errno == ENOENT) epoll_ctl(epfd, EPOLL_CTL_ADD, s, &ev);
  return 0;
}

static int on_timer(CURLM *multi, long ms, void *userp) {
  (void)multi;
  (void)userp;
  timer_ns = ms < 0 ? -1 : now_ns() + (long long)ms * 1000000LL;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_curl_multi URL CALLS\n");
    return 2;
  }
  const char *url = argv[1];
  int calls = atoi(argv[2]);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  epfd = epoll_create1(EPOLL_CLOEXEC);
  CURLM *multi = curl_multi_init();
  curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, on_timer);
  req *reqs = calloc((size_t)calls, sizeof *reqs);
  CURL **done = calloc((size_t)calls, sizeof *done);
  if (!reqs || !done || epfd < 0 || !multi) return 1;

  long long t0 = now_ns();
  double cpu0 = cpu_ms();
  for (int i = 0; i < calls; i++) {
    req *r = &reqs[i];
    CURL *c = r->curl = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_PRIVATE, (char *)r);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->error);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)LIM_HTTP_MAX_REDIRECTS);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 60000L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "luma-lua");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)LIM_HTTP_MAX_BYTES);
    /* as the transport does past LIM_HTTP_REUSE_IN_FLIGHT in flight */
    long fresh = i >= LIM_HTTP_REUSE_IN_FLIGHT ? 1L : 0L;
    curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, fresh);
    curl_easy_setopt(c, CURLOPT_FORBID_REUSE, fresh);
    if (curl_multi_add_handle(multi, c) != CURLM_OK) return 1;
  }

  int running = calls, ended = 0, ok = 0;
  struct epoll_event events[64];
  while (ended < calls) {
    int timeout = -1;
    if (timer_ns >= 0) {
      long long left = timer_ns - now_ns();
      timeout = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
    }
    int n = epoll_wait(epfd, events, 64, timeout);
    for (int i = 0; i < n; i++) {
      int flags = 0;
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) flags |= CURL_CSELECT_IN;
      if (events[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) flags |= CURL_CSELECT_OUT;
      curl_multi_socket_action(multi, events[i].data.fd, flags, &running);
    }
    if (timer_ns >= 0 && now_ns() >= timer_ns) {
      timer_ns = -1;
      curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    CURLMsg *m;
    int queued;
    int n_done = 0;
    /* every message read before a handle is removed, as the transport does */
    while ((m = curl_multi_info_read(multi, &queued))) {
      if (m->msg != CURLMSG_DONE) continue;
      req *r;
      long status = 0;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
      curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
      if (m->data.result == CURLE_OK && status == 200 && r->len == 11 && memcmp(r->body, "{\"ok\":true}", 11) == 0) ok++;
      else if (m->data.result != CURLE_OK) fprintf(stderr, "bench_curl_multi: %s\n", r->error);
      ended++;
      done[n_done++] = m->easy_handle;
    }
    for (int i = 0; i < n_done; i++) {
      curl_multi_remove_handle(multi, done[i]);
      curl_easy_cleanup(done[i]);
    }
  }
  long long wall = now_ns() - t0;
  double cpu = cpu_ms() - cpu0;
  printf("ok=%d wall_ms=%.1f cpu_ms=%.1f\n", ok, wall / 1e6, cpu);
  curl_multi_cleanup(multi);
  free(reqs);
  free(done);
  return ok == calls ? 0 : 1;
}
