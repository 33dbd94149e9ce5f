/* transport.c's internal half (tpmsg.c): not for other callers. */
#ifndef LUMA_BASE_TPMSG_H
#define LUMA_BASE_TPMSG_H

#include <pthread.h>
#include <stddef.h>

#include "libcurl.h"
#include "strbuf.h"
#include "transport.h"

#define TP_MESSAGE_MAX (CURL_ERROR_SIZE + 160)

/* Until `ended`, the I/O thread owns everything but the fields under lock;
   once `ended` is set the I/O thread never touches the transfer again. */
struct tp_transfer {
  pthread_mutex_t lock;
  pthread_cond_t cond;             /* broadcast when ended */
  int complete;                    /* under lock: the outcome is set (done runs after) */
  int ended;                       /* under lock: done returned */
  tp_code end_code;                /* under lock: an end a caller asked for; TP_OK: none */
  const char *end_message;
  tp_transport *tp;                /* valid while not ended */
  void (*done)(void *ud);
  void *ud;

  CURL *curl;
  struct curl_slist *headers;
  int added;                       /* in the multi */
  tp_transfer *next, *prev;        /* the pending queue, then the I/O thread's active list */
  tp_transfer *done_next;          /* the I/O thread's list of transfers libcurl finished */
  sb_buf head, body;
  size_t max_response;
  long long timeout_ms;
  int too_large, out_of_memory;
  /* a stream (`stream`): the I/O thread appends to queue under lock, the
     caller reads from queue_at; at max_response unread bytes the transfer
     pauses (`paused`) until a read asks to resume it (`resume`) */
  int stream;
  void (*on_data)(void *ud);
  sb_buf queue;                    /* under lock */
  size_t queue_at;                 /* under lock */
  int paused, resume;              /* under lock */
  int head_known;                  /* under lock: result_headers and head_status are set */
  long head_status;
  size_t head_n;
  char error[CURL_ERROR_SIZE];

  tp_result result;
  tp_header *result_headers;
  char *header_text;
  char message[TP_MESSAGE_MAX];
};

#if defined(__GNUC__)
#define TPM_FORMAT(f, a) __attribute__((format(printf, f, a)))
#else
#define TPM_FORMAT(f, a)
#endif

/* Writes a message into err (which may be NULL). */
void tpm_say(char *err, size_t errlen, const char *fmt, ...) TPM_FORMAT(3, 4);

/* Checks r: the method, an http:// or https:// URL without spaces or
   control characters, header names that are tokens and values without CR, LF
   or NUL, no HEAD body, a timeout. 0, or -1 with the reason in err. */
int tpm_check(const tp_request *r, char *err, size_t errlen);

/* Sets t's header list and easy handle (made by the caller) from r;
   0, or -1 with the reason in err. */
int tpm_prepare(tp_transfer *t, const tp_request *r, char *err, size_t errlen);

/* Sets t's outcome (its code, retryable and message). */
void tpm_set_end(tp_transfer *t, tp_code code, int retryable, const char *fmt, ...) TPM_FORMAT(4, 5);

/* The outcome of a transfer libcurl finished with rc. */
void tpm_classify(tp_transfer *t, CURLcode rc);

/* Splits the header block into t->result's headers; 0, or -1 out of memory. */
int tpm_split_headers(tp_transfer *t);

#endif
