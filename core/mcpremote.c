#define _GNU_SOURCE
#include "mcpremote.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mcpclient.h"
#include "sse.h"
#include "strbuf.h"

/* A message of the event stream, waiting to be handed out. */
typedef struct mcr_msg {
  struct mcr_msg *next;
  size_t len;
  char text[];
} mcr_msg;

/* The transport's callbacks only set `woken` (under lock) and signal; the
   rest belongs to the caller's thread. */
struct mcr_exchange {
  pthread_mutex_t lock;
  pthread_cond_t cond;          /* on CLOCK_MONOTONIC */
  int woken;                    /* under lock: bytes, the head or the end came since the last wait */
  tp_transfer *t;
  size_t max;
  int kind;                     /* 0 until the head is read; then MR_JSON or MR_SSE */
  sse_reader sse;
  sb_buf body;                  /* a body that is not an event stream */
  mcr_msg *first, *last;        /* the events read and not handed out */
  mcr_msg *current;             /* the one handed out last */
  int too_big, ended;
};

enum { MR_JSON = 1, MR_SSE };

static void wake(void *ud) {
  mcr_exchange *x = ud;
  pthread_mutex_lock(&x->lock);
  x->woken = 1;
  pthread_cond_broadcast(&x->cond);
  pthread_mutex_unlock(&x->lock);
}

/* Waits for a callback until deadline: 0 at the deadline. */
static int wait_woken(mcr_exchange *x, long long deadline) {
  struct timespec ts = { (time_t)(deadline / 1000), (long)(deadline % 1000) * 1000000L };
  int got;
  pthread_mutex_lock(&x->lock);
  while (!x->woken) {
    if (pthread_cond_timedwait(&x->cond, &x->lock, &ts) == ETIMEDOUT) break;
  }
  got = x->woken;
  x->woken = 0;
  pthread_mutex_unlock(&x->lock);
  return got;
}

/* An event of the stream: a message unless it names another type (the
   protocol sends "message" events; an empty data is a keep-alive). */
static int on_event(void *ud, const sse_event *ev) {
  mcr_exchange *x = ud;
  if (strcmp(ev->type, "message") != 0 || ev->len == 0) return 1;
  mcr_msg *m = malloc(sizeof *m + ev->len + 1);
  if (!m) return 0;
  m->next = NULL;
  m->len = ev->len;
  memcpy(m->text, ev->data, ev->len + 1);
  if (x->last) x->last->next = m;
  else x->first = m;
  x->last = m;
  return 1;
}

mcr_exchange *mcr_start(tp_transport *tp, const tp_request *r, size_t max_message, char *err, size_t errlen) {
  mcr_exchange *x = calloc(1, sizeof *x);
  if (!x) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&x->cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&x->lock, NULL);
  x->max = max_message;
  sb_init(&x->body);
  sse_init(&x->sse, max_message, on_event, x);
  tp_request q = *r;
  q.stream = 1;
  q.on_data = wake;
  q.max_response_bytes = max_message;
  if (!(x->t = tp_start(tp, &q, wake, x, err, errlen))) {
    mcr_free(x);
    return NULL;
  }
  return x;
}

/* The transport's message of a transfer that ended without a response. */
static int ended_badly(mcr_exchange *x, char *err, size_t errlen) {
  const tp_result *o = tp_outcome(x->t);
  if (!o || o->code == TP_OK) return 0;
  snprintf(err, errlen, "%s (%s)", o->message, tp_code_name(o->code));
  return 1;
}

int mcr_head(mcr_exchange *x, long long deadline, long *status, const tp_header **h, size_t *n, char *err, size_t errlen) {
  for (;;) {
    if (tp_head(x->t, status, h, n)) {
      if (!x->kind) {
        x->kind = MR_JSON;
        for (size_t i = 0; i < *n; i++)
          if (tp_equal_ci((*h)[i].name, (*h)[i].name_len, "content-type") &&
              tp_prefix_ci((*h)[i].value, (*h)[i].value_len, "text/event-stream"))
            x->kind = MR_SSE;
      }
      return 1;
    }
    if (ended_badly(x, err, errlen)) return MCC_ERROR;
    if (tp_outcome(x->t)) {
      snprintf(err, errlen, "the transfer ended without a response");
      return MCC_ERROR;
    }
    if (!wait_woken(x, deadline) && mcc_now_ms() >= deadline) return MCC_TIMEOUT;
  }
}

/* Gives the bytes read to the event reader or the body. 0 once they are
   past the bound (the transfer is ended then) or out of memory. */
static int take(mcr_exchange *x, const char *p, size_t k, char *err, size_t errlen) {
  if (x->kind == MR_SSE) {
    if (sse_feed(&x->sse, p, k)) return 1;
    if (strstr(x->sse.error, "more than")) x->too_big = 1;
    snprintf(err, errlen, "its event stream cannot be read: %s", x->sse.error[0] ? x->sse.error : "out of memory");
    return 0;
  }
  if (x->body.len + k > x->max) {
    x->too_big = 1;
    return 0;
  }
  sb_add(&x->body, p, k);
  if (x->body.failed) {
    snprintf(err, errlen, "out of memory");
    return 0;
  }
  return 1;
}

int mcr_next(mcr_exchange *x, const char **msg, size_t *n, long long deadline, char *err, size_t errlen) {
  free(x->current);
  x->current = NULL;
  long status;
  const tp_header *h;
  size_t nh;
  if (!x->kind) {
    int r = mcr_head(x, deadline, &status, &h, &nh, err, errlen);
    if (r != 1) return r;
  }
  char buf[16384];
  for (;;) {
    if (x->first) {
      x->current = x->first;
      if (!(x->first = x->first->next)) x->last = NULL;
      *msg = x->current->text;
      *n = x->current->len;
      return MCC_LINE;
    }
    if (x->too_big) {
      tp_cancel(x->t);
      return MCC_TOO_BIG;
    }
    if (x->ended) return MCC_EOF;
    int done = tp_outcome(x->t) != NULL;   /* before the read: what came before the end is read then */
    size_t k = tp_read(x->t, buf, sizeof buf);
    if (k > 0) {
      if (!take(x, buf, k, err, errlen)) {
        if (x->too_big) continue;
        tp_cancel(x->t);
        return MCC_ERROR;
      }
      continue;
    }
    if (done) {
      if (ended_badly(x, err, errlen)) return MCC_ERROR;
      x->ended = 1;
      if (x->kind == MR_JSON && x->body.len > 0) {
        mcr_msg *m = malloc(sizeof *m + x->body.len + 1);
        if (!m) {
          snprintf(err, errlen, "out of memory");
          return MCC_ERROR;
        }
        m->next = NULL;
        m->len = x->body.len;
        memcpy(m->text, x->body.data, x->body.len);
        m->text[m->len] = 0;
        x->first = x->last = m;
        sb_free(&x->body);
      }
      continue;
    }
    if (!wait_woken(x, deadline) && mcc_now_ms() >= deadline) return MCC_TIMEOUT;
  }
}

void mcr_free(mcr_exchange *x) {
  if (!x) return;
  tp_release(x->t);   /* its callbacks have returned once this does */
  while (x->first) {
    mcr_msg *next = x->first->next;
    free(x->first);
    x->first = next;
  }
  free(x->current);
  sse_free(&x->sse);
  sb_free(&x->body);
  pthread_cond_destroy(&x->cond);
  pthread_mutex_destroy(&x->lock);
  free(x);
}
