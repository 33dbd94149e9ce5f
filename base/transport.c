/*
 * The HTTP transport: transfers handed to one I/O thread that drives a CURLM
 * with curl_multi_socket_action and an epoll of the sockets libcurl asks to
 * watch, so that a wake costs what moved, not the transfers in flight
 * (curl_multi_perform and curl_multi_poll look at every transfer and every
 * socket at each wake). Each transfer has its own lock and condvar, so that a
 * caller may keep one after tp_free; the transport's lock guards the queue of
 * new transfers and the flags the I/O thread reads, and an eventfd in the
 * epoll wakes the thread.
 */
#include "transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "luma_limits.h"
#include "strbuf.h"
#include "tpmsg.h"

#define TP_SLICE_NS 10000000LL     /* how often tp_wait looks at *stop */
#define TP_EVENTS 64               /* socket events taken from the epoll at once */

struct tp_transport {
  pthread_mutex_t lock;
  CURLM *multi;                    /* made with the thread, at the first tp_start */
  int epfd, wakefd;                /* made with the thread: the epoll, and the eventfd in it */
  pthread_t thread;
  int started, stopping;           /* under lock */
  int woken;                       /* under lock: wakefd was written since the I/O thread last looked */
  int cancel_asked;                /* under lock: some transfer has an end_code */
  int resume_asked;                /* under lock: some paused stream has resume set */
  tp_transfer *pending, *pending_tail;   /* under lock: started, not yet taken by the I/O thread */
  /* the I/O thread's own */
  long long timer_ns;              /* when libcurl wants curl_multi_socket_action's timeout call; -1: never */
  size_t in_flight;                /* transfers in the multi */
};

long long tp_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

long long tp_deadline_ms(long long ms) {
  if (ms < 0) return -1;
  return tp_now_ns() / 1000000 + (ms > LIM_TIMEOUT_CAP_MS ? LIM_TIMEOUT_CAP_MS : ms);
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
  /* libcurl is loaded by the first transport of the process */
  if (cu_load(err, errlen) != 0) return NULL;
  tp_transport *tp = calloc(1, sizeof *tp);
  if (!tp) {
    tpm_say(err, errlen, "out of memory");
    return NULL;
  }
  if (pthread_mutex_init(&tp->lock, NULL) != 0) {
    free(tp);
    tpm_say(err, errlen, "cannot make a lock");
    return NULL;
  }
  tp->epfd = tp->wakefd = -1;
  return tp;
}

/* Wakes the I/O thread; under tp->lock. Returns whether the caller must
   write wakefd (after unlocking): not when a wake is already on its way. */
static int wake_locked(tp_transport *tp) {
  if (!tp->started || tp->woken) return 0;
  tp->woken = 1;
  return 1;
}

static void wake_write(tp_transport *tp) {
  uint64_t one = 1;
  /* EAGAIN: the counter is full, the thread is woken anyway */
  while (write(tp->wakefd, &one, sizeof one) < 0 && errno == EINTR) {}
}

void tp_free(tp_transport *tp) {
  if (!tp) return;
  pthread_mutex_lock(&tp->lock);
  int started = tp->started;
  tp->stopping = 1;
  tp->woken = 1;
  pthread_mutex_unlock(&tp->lock);
  if (started) {
    wake_write(tp);
    pthread_join(tp->thread, NULL);
    /* closing the cached connections may still call on_socket */
    cu.multi_cleanup(tp->multi);
    close(tp->epfd);
    close(tp->wakefd);
  }
  pthread_mutex_destroy(&tp->lock);
  free(tp);
}

/* ---- the I/O thread's side of a transfer: no caller's lock is held here ---- */

/* Ends t (its outcome set): frees what libcurl held, runs done, then marks
   it ended, after which this thread never touches it again. */
static void finish(tp_transport *tp, tp_transfer *t, tp_transfer **active) {
  if (t->added) {
    cu.multi_remove_handle(tp->multi, t->curl);
    t->added = 0;
    tp->in_flight--;
    if (t->prev) t->prev->next = t->next;
    else *active = t->next;
    if (t->next) t->next->prev = t->prev;
  }
  cu.easy_cleanup(t->curl);
  t->curl = NULL;
  cu.slist_free_all(t->headers);
  t->headers = NULL;
  if (t->result.code == TP_OK) {
    if (!t->head_known && tpm_split_headers(t) != 0) {
      tpm_set_end(t, TP_HTTP_ERROR, 0, "out of memory while reading the response");
    } else if (t->stream) {
      t->result.body = "";
      t->result.body_len = 0;
      pthread_mutex_lock(&t->lock);
      if (!t->head_known) {
        t->head_status = t->result.status;
        t->head_n = t->result.n_headers;
        t->head_known = 1;
      }
      pthread_mutex_unlock(&t->lock);
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
  /* the outcome is readable before done runs: done may wake a reader of it */
  pthread_mutex_lock(&t->lock);
  t->complete = 1;
  pthread_mutex_unlock(&t->lock);
  if (t->done) t->done(t->ud);
  pthread_mutex_lock(&t->lock);
  t->ended = 1;
  pthread_cond_broadcast(&t->cond);
  pthread_mutex_unlock(&t->lock);
}

/* Resumes t if a reader asked to (its queue has room again). */
static void resume_if_asked(tp_transfer *t) {
  pthread_mutex_lock(&t->lock);
  int resume = t->resume;
  t->resume = 0;
  if (resume) t->paused = 0;
  pthread_mutex_unlock(&t->lock);
  /* without t->lock: unpausing may deliver the held piece to on_body now */
  if (resume && t->curl) cu.easy_pause(t->curl, CURLPAUSE_CONT);
}

/* Ends t the way a caller asked, if one did. */
static int end_if_asked(tp_transport *tp, tp_transfer *t, tp_transfer **active) {
  pthread_mutex_lock(&t->lock);
  tp_code code = t->end_code;
  const char *message = t->end_message;
  pthread_mutex_unlock(&t->lock);
  if (code == TP_OK) return 0;
  tpm_set_end(t, code, code == TP_HTTP_TIMEOUT, "%s", message);
  finish(tp, t, active);
  return 1;
}

/* libcurl's CURLMOPT_SOCKETFUNCTION: what to watch on socket s. */
static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp) {
  (void)easy;
  (void)socketp;
  tp_transport *tp = userp;
  if (what == CURL_POLL_REMOVE) {
    /* fails when s was closed first, which took it out of the epoll */
    epoll_ctl(tp->epfd, EPOLL_CTL_DEL, s, NULL);
    return 0;
  }
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
  ev.data.fd = s;
  /* a socket libcurl watched before is changed; a new one (its number may
     be that of a socket closed without CURL_POLL_REMOVE) is added */
  if (epoll_ctl(tp->epfd, EPOLL_CTL_MOD, s, &ev) != 0 && errno == ENOENT)
    epoll_ctl(tp->epfd, EPOLL_CTL_ADD, s, &ev);
  return 0;
}

/* libcurl's CURLMOPT_TIMERFUNCTION: when to call it with CURL_SOCKET_TIMEOUT. */
static int on_timer(CURLM *multi, long ms, void *userp) {
  (void)multi;
  tp_transport *tp = userp;
  tp->timer_ns = ms < 0 ? -1 : tp_now_ns() + (long long)ms * 1000000LL;
  return 0;
}

/* Adds t to the multi, or ends it when libcurl refuses it. */
static void add(tp_transport *tp, tp_transfer *t, tp_transfer **active) {
  /* Past LIM_HTTP_REUSE_IN_FLIGHT transfers in flight, t neither looks for a
     connection to reuse nor leaves its own to the cache: libcurl looks
     through every connection to the host at each new transfer, in use or
     not, and through the whole cache at each return of a connection past
     its size, which made a burst of transfers to one host quadratic. */
  long fresh = tp->in_flight >= LIM_HTTP_REUSE_IN_FLIGHT ? 1L : 0L;
  cu.easy_setopt(t->curl, CURLOPT_FRESH_CONNECT, fresh);
  cu.easy_setopt(t->curl, CURLOPT_FORBID_REUSE, fresh);
  CURLMcode mc = cu.multi_add_handle(tp->multi, t->curl);
  if (mc != CURLM_OK) {
    tpm_set_end(t, TP_HTTP_ERROR, 0, "libcurl cannot run the request: %s", cu.multi_strerror(mc));
    finish(tp, t, active);
    return;
  }
  t->added = 1;
  tp->in_flight++;
  t->next = *active;
  if (*active) (*active)->prev = t;
  *active = t;
}

/* Ends the transfers libcurl finished. All its messages are read first:
   curl_multi_remove_handle looks through the messages not yet read. */
static void reap(tp_transport *tp, tp_transfer **active) {
  tp_transfer *done = NULL;
  CURLMsg *m;
  int queued;
  while ((m = cu.multi_info_read(tp->multi, &queued))) {
    if (m->msg != CURLMSG_DONE) continue;
    char *priv = NULL;
    cu.easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
    tp_transfer *t = (tp_transfer *)(void *)priv;
    tpm_classify(t, m->data.result);
    t->done_next = done;
    done = t;
  }
  while (done) {
    tp_transfer *t = done;
    done = t->done_next;
    finish(tp, t, active);
  }
}

/* The socket_action flags of an epoll event. */
static int event_flags(uint32_t events) {
  int flags = 0;
  /* an error or a hang-up is read (or written) to learn which it is */
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) flags |= CURL_CSELECT_IN;
  if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) flags |= CURL_CSELECT_OUT;
  return flags;
}

static void *io_main(void *arg) {
  tp_transport *tp = arg;
  tp_transfer *active = NULL;
  struct epoll_event events[TP_EVENTS];
  int running;
  for (;;) {
    pthread_mutex_lock(&tp->lock);
    tp_transfer *fresh = tp->pending;
    tp->pending = tp->pending_tail = NULL;
    int stopping = tp->stopping, cancels = tp->cancel_asked, resumes = tp->resume_asked;
    tp->cancel_asked = tp->resume_asked = 0;
    tp->woken = 0;
    pthread_mutex_unlock(&tp->lock);

    while (fresh) {
      tp_transfer *t = fresh;
      fresh = t->next;
      t->next = t->prev = NULL;
      if (stopping) {
        tpm_set_end(t, TP_HTTP_CANCELLED, 0, "the transport was closed before the request was sent");
        finish(tp, t, &active);
      } else if (!end_if_asked(tp, t, &active)) {
        add(tp, t, &active);
      }
    }
    if (stopping) {
      while (active) {
        tpm_set_end(active, TP_HTTP_CANCELLED, 0, "the transport was closed while the request was in flight");
        finish(tp, active, &active);
      }
      return NULL;
    }
    if (cancels)
      for (tp_transfer *t = active, *next; t; t = next) {
        next = t->next;
        end_if_asked(tp, t, &active);
      }
    if (resumes)
      for (tp_transfer *t = active; t; t = t->next) resume_if_asked(t);

    /* sleep until a socket moves, libcurl's timer, or a wake */
    int timeout = -1;
    if (tp->timer_ns >= 0) {
      long long left = tp->timer_ns - tp_now_ns();
      timeout = left <= 0 ? 0 : left >= (long long)INT32_MAX * 1000000LL ? INT32_MAX : (int)((left + 999999) / 1000000);
    }
    int n = epoll_wait(tp->epfd, events, TP_EVENTS, timeout);
    for (int i = 0; i < n; i++) {
      if (events[i].data.fd == tp->wakefd) {
        uint64_t count;
        while (read(tp->wakefd, &count, sizeof count) < 0 && errno == EINTR) {}
        continue;
      }
      cu.multi_socket_action(tp->multi, events[i].data.fd, event_flags(events[i].events), &running);
    }
    if (tp->timer_ns >= 0 && tp_now_ns() >= tp->timer_ns) {
      tp->timer_ns = -1;
      cu.multi_socket_action(tp->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    reap(tp, &active);
  }
}

/* ---- tp_start ---- */

static void transfer_free(tp_transfer *t) {
  if (t->curl) cu.easy_cleanup(t->curl);
  cu.slist_free_all(t->headers);
  sb_free(&t->head);
  sb_free(&t->body);
  sb_free(&t->queue);
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
    tpm_say(err, errlen, "the transport is closed");
    return -1;
  }
  tp->epfd = epoll_create1(EPOLL_CLOEXEC);
  tp->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN;
  ev.data.fd = tp->wakefd;
  if (tp->epfd < 0 || tp->wakefd < 0 || epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->wakefd, &ev) != 0) {
    tpm_say(err, errlen, "cannot make the transport's epoll: %s", strerror(errno));
    goto fail;
  }
  tp->timer_ns = -1;
  tp->multi = cu.multi_init();
  if (!tp->multi) {
    tpm_say(err, errlen, "libcurl cannot make a multi handle");
    goto fail;
  }
  if (cu.multi_setopt(tp->multi, CURLMOPT_SOCKETFUNCTION, on_socket) != CURLM_OK ||
      cu.multi_setopt(tp->multi, CURLMOPT_SOCKETDATA, tp) != CURLM_OK ||
      cu.multi_setopt(tp->multi, CURLMOPT_TIMERFUNCTION, on_timer) != CURLM_OK ||
      cu.multi_setopt(tp->multi, CURLMOPT_TIMERDATA, tp) != CURLM_OK) {
    tpm_say(err, errlen, "libcurl refused the transport's socket callbacks");
    goto fail;
  }
  if (pthread_create(&tp->thread, NULL, io_main, tp) != 0) {
    tpm_say(err, errlen, "cannot start the transport's I/O thread");
    goto fail;
  }
  tp->started = 1;
  return 0;
fail:
  if (tp->multi) cu.multi_cleanup(tp->multi);
  tp->multi = NULL;
  if (tp->epfd >= 0) close(tp->epfd);
  if (tp->wakefd >= 0) close(tp->wakefd);
  tp->epfd = tp->wakefd = -1;
  return -1;
}

tp_transfer *tp_start(tp_transport *tp, const tp_request *r, void (*done)(void *ud), void *ud,
                      char *err, size_t errlen) {
  if (tpm_check(r, err, errlen) != 0) return NULL;
  tp_transfer *t = calloc(1, sizeof *t);
  if (!t) {
    tpm_say(err, errlen, "out of memory");
    return NULL;
  }
  if (pthread_mutex_init(&t->lock, NULL) != 0) {
    free(t);
    tpm_say(err, errlen, "cannot make a lock");
    return NULL;
  }
  if (cond_init(&t->cond) != 0) {
    pthread_mutex_destroy(&t->lock);
    free(t);
    tpm_say(err, errlen, "cannot make a condition variable");
    return NULL;
  }
  t->tp = tp;
  t->done = done;
  t->ud = ud;
  t->end_code = TP_OK;
  sb_init(&t->head);
  sb_init(&t->body);
  sb_init(&t->queue);
  t->stream = r->stream;
  t->on_data = r->stream ? r->on_data : NULL;
  t->max_response = r->max_response_bytes ? r->max_response_bytes : SIZE_MAX;
  t->timeout_ms = r->timeout_ms;
  t->curl = cu.easy_init();
  if (!t->curl) {
    tpm_say(err, errlen, "libcurl cannot make a request");
    transfer_free(t);
    return NULL;
  }
  if (tpm_prepare(t, r, err, errlen) != 0) {
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
  int wake = wake_locked(tp);
  pthread_mutex_unlock(&tp->lock);
  if (wake) wake_write(tp);
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
  int wake = wake_locked(tp);
  pthread_mutex_unlock(&tp->lock);
  if (wake) wake_write(tp);
}

int tp_wait(tp_transfer *t, long long deadline_ns, const int *stop) {
  pthread_mutex_lock(&t->lock);
  while (!t->ended) {
    if (t->end_code == TP_OK) {
      if (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
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
  if (!t->complete) ask_end(t, TP_HTTP_CANCELLED, "the request was cancelled");
  pthread_mutex_unlock(&t->lock);
}

const tp_result *tp_outcome(tp_transfer *t) {
  pthread_mutex_lock(&t->lock);
  int complete = t->complete;
  pthread_mutex_unlock(&t->lock);
  return complete ? &t->result : NULL;
}

int tp_head(tp_transfer *t, long *status, const tp_header **headers, size_t *n) {
  pthread_mutex_lock(&t->lock);
  int known = t->head_known;
  if (known) {
    *status = t->head_status;
    *headers = t->result_headers;
    *n = t->head_n;
  }
  pthread_mutex_unlock(&t->lock);
  return known;
}

size_t tp_read(tp_transfer *t, char *buf, size_t cap) {
  pthread_mutex_lock(&t->lock);
  size_t unread = t->queue.len - t->queue_at;
  size_t n = unread < cap ? unread : cap;
  if (n) memcpy(buf, t->queue.data + t->queue_at, n);
  t->queue_at += n;
  int wake = 0;
  /* resumed at half the bound: not a wake-up per piece read */
  if (t->paused && !t->resume && !t->ended && t->queue.len - t->queue_at <= t->max_response / 2) {
    t->resume = 1;
    wake = 1;
  }
  if (wake) {
    tp_transport *tp = t->tp;
    pthread_mutex_lock(&tp->lock);
    tp->resume_asked = 1;
    int wake_io = wake_locked(tp);
    pthread_mutex_unlock(&tp->lock);
    if (wake_io) wake_write(tp);
  }
  pthread_mutex_unlock(&t->lock);
  return n;
}

void tp_release(tp_transfer *t) {
  if (!t) return;
  pthread_mutex_lock(&t->lock);
  if (!t->complete) ask_end(t, TP_HTTP_CANCELLED, "the request was released before it ended");
  while (!t->ended) pthread_cond_wait(&t->cond, &t->lock);
  pthread_mutex_unlock(&t->lock);
  transfer_free(t);
}
