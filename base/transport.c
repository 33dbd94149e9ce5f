/*
 * The HTTP transport: transfers handed to one I/O thread that drives a CURLM
 * with curl_multi_poll. Each transfer has its own lock and condvar, so that a
 * caller may keep one after tp_free; the transport's lock guards the queue of
 * new transfers and the flags the I/O thread reads.
 */
#include "transport.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "luma_limits.h"
#include "strbuf.h"
#include "tpmsg.h"

#define TP_SLICE_NS 10000000LL     /* how often tp_wait looks at *stop */
#define TP_POLL_MS 1000            /* curl_multi_poll's longest sleep while transfers run */

struct tp_transport {
  pthread_mutex_t lock;
  pthread_cond_t cond;             /* wakes the I/O thread while it has no transfer */
  CURLM *multi;                    /* made with the thread, at the first tp_start */
  pthread_t thread;
  int started, stopping;           /* under lock */
  int cancel_asked;                /* under lock: some transfer has an end_code */
  int resume_asked;                /* under lock: some paused stream has resume set */
  tp_transfer *pending, *pending_tail;   /* under lock: started, not yet taken by the I/O thread */
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
  if (cond_init(&tp->cond) != 0) {
    pthread_mutex_destroy(&tp->lock);
    free(tp);
    tpm_say(err, errlen, "cannot make a condition variable");
    return NULL;
  }
  return tp;
}

void tp_free(tp_transport *tp) {
  if (!tp) return;
  pthread_mutex_lock(&tp->lock);
  int started = tp->started;
  tp->stopping = 1;
  pthread_cond_signal(&tp->cond);
  pthread_mutex_unlock(&tp->lock);
  if (started) {
    cu.multi_wakeup(tp->multi);
    pthread_join(tp->thread, NULL);
    cu.multi_cleanup(tp->multi);
  }
  pthread_cond_destroy(&tp->cond);
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

static void *io_main(void *arg) {
  tp_transport *tp = arg;
  tp_transfer *active = NULL;
  for (;;) {
    pthread_mutex_lock(&tp->lock);
    while (!tp->pending && !tp->stopping && !tp->cancel_asked && !tp->resume_asked && !active)
      pthread_cond_wait(&tp->cond, &tp->lock);
    tp_transfer *fresh = tp->pending;
    tp->pending = tp->pending_tail = NULL;
    int stopping = tp->stopping, cancels = tp->cancel_asked, resumes = tp->resume_asked;
    tp->cancel_asked = tp->resume_asked = 0;
    pthread_mutex_unlock(&tp->lock);

    while (fresh) {
      tp_transfer *t = fresh;
      fresh = t->next;
      t->next = t->prev = NULL;
      if (stopping) {
        tpm_set_end(t, TP_HTTP_CANCELLED, 0, "the transport was closed before the request was sent");
        finish(tp, t, &active);
      } else if (!end_if_asked(tp, t, &active)) {
        CURLMcode mc = cu.multi_add_handle(tp->multi, t->curl);
        if (mc != CURLM_OK) {
          tpm_set_end(t, TP_HTTP_ERROR, 0, "libcurl cannot run the request: %s", cu.multi_strerror(mc));
          finish(tp, t, &active);
          continue;
        }
        t->added = 1;
        t->next = active;
        if (active) active->prev = t;
        active = t;
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
    int running;
    cu.multi_perform(tp->multi, &running);
    CURLMsg *m;
    int queued;
    while ((m = cu.multi_info_read(tp->multi, &queued))) {
      if (m->msg != CURLMSG_DONE) continue;
      CURLcode rc = m->data.result;
      char *priv = NULL;
      cu.easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
      tp_transfer *t = (tp_transfer *)(void *)priv;
      tpm_classify(t, rc);
      finish(tp, t, &active);
    }
    if (active) cu.multi_poll(tp->multi, NULL, 0, TP_POLL_MS, NULL);
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
  tp->multi = cu.multi_init();
  if (!tp->multi) {
    tpm_say(err, errlen, "libcurl cannot make a multi handle");
    return -1;
  }
  if (pthread_create(&tp->thread, NULL, io_main, tp) != 0) {
    cu.multi_cleanup(tp->multi);
    tp->multi = NULL;
    tpm_say(err, errlen, "cannot start the transport's I/O thread");
    return -1;
  }
  tp->started = 1;
  return 0;
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
  pthread_cond_signal(&tp->cond);
  pthread_mutex_unlock(&tp->lock);
  cu.multi_wakeup(tp->multi);
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
  pthread_cond_signal(&tp->cond);
  pthread_mutex_unlock(&tp->lock);
  cu.multi_wakeup(tp->multi);
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
    pthread_cond_signal(&tp->cond);
    pthread_mutex_unlock(&tp->lock);
    cu.multi_wakeup(tp->multi);
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
