/*
 * An HTTP client transport on libcurl's multi interface, Lua-free.
 * One tp_transport runs every transfer on an I/O thread of its own (started
 * at the first tp_start: a program that never asks for HTTP starts none),
 * many at once on one CURLM whose connection cache reuses connections.
 * Only http:// and https:// are spoken, redirects included.
 *
 * Threads: any thread may call tp_start, tp_wait, tp_poll, tp_cancel,
 * tp_outcome, tp_head, tp_read and tp_release, also on the same transfer at
 * once. tp_free must not run at the same time as any other call on its
 * transport. The done and on_data callbacks run on the I/O thread: they must
 * be short and must not call any tp_ function (writing an eventfd or
 * signalling a condvar is their job).
 *
 * A streamed transfer (tp_request.stream) hands its body over in pieces:
 * the I/O thread appends what arrives to the transfer's queue and calls
 * on_data; the caller takes it with tp_read on its own thread, before and
 * after the end. The queue holds at most max_response_bytes not yet read
 * (one libcurl piece past it when it was empty): at that bound the transfer
 * pauses until the caller reads, so a slow reader holds that much and no
 * more, whatever the body's length.
 */
#ifndef LUMA_BASE_TRANSPORT_H
#define LUMA_BASE_TRANSPORT_H

#include <stddef.h>

typedef struct tp_transport tp_transport;
typedef struct tp_transfer tp_transfer;

typedef enum tp_method { TP_GET, TP_POST, TP_PUT, TP_PATCH, TP_DELETE, TP_HEAD } tp_method;

/* How a transfer ended; tp_code_name gives the stable name ("HTTP_ERROR"...). */
typedef enum tp_code {
  TP_OK,                /* a response (any status, 404 and 500 too) */
  TP_HTTP_ERROR,        /* no response: see retryable */
  TP_HTTP_TIMEOUT,      /* the request's timeout_ms, or the deadline of tp_wait */
  TP_HTTP_TOO_LARGE,    /* the response's headers or body went over max_response_bytes */
  TP_HTTP_CANCELLED     /* tp_cancel, tp_release in flight, or tp_free */
} tp_code;

/* A header: lengths are exact (no NUL inside); in a result, both strings are
   NUL-terminated too. */
typedef struct tp_header {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
} tp_header;

/* What tp_start sends; it copies everything, so the caller's buffers may be
   freed once it returns. */
typedef struct tp_request {
  tp_method method;
  const char *url;                /* NUL-terminated, http:// or https:// */
  const tp_header *headers;       /* n_headers, sent in order; names are tokens, no CR, LF or NUL */
  size_t n_headers;
  const char *body;               /* NULL: none (HEAD must have none); POST without one sends an empty body */
  size_t body_len;
  const char *user_agent;         /* NULL: no User-Agent header */
  long long timeout_ms;           /* the whole transfer, > 0 */
  size_t max_response_bytes;      /* the body's limit, and the header block's; 0: no limit */
  long max_redirects;             /* redirects followed; 0: none */
  int stream;                     /* the body goes to tp_read in pieces, not to the outcome;
                                     max_response_bytes bounds the unread bytes, not the body */
  void (*on_data)(void *ud);      /* stream: called (with tp_start's ud) when the head or
                                     bytes to read came; NULL: none */
} tp_request;

/* A transfer's outcome; valid from the end of the transfer until tp_release. */
typedef struct tp_result {
  tp_code code;
  int retryable;                  /* TP_HTTP_ERROR at the connection level, TP_HTTP_TIMEOUT */
  const char *message;            /* one line; "" for TP_OK */
  long status;                    /* TP_OK: the last response's status */
  const tp_header *headers;       /* TP_OK: the last response's, in order, names as received;
                                     folded lines joined with a space */
  size_t n_headers;
  const char *body;               /* TP_OK: NUL-terminated as well; "" for HEAD and a stream */
  size_t body_len;
} tp_result;

/* tp_wait's answers. */
#define TP_ENDED 0                /* the transfer ended; tp_outcome has it */
#define TP_STOPPED 1              /* *stop turned nonzero; the transfer goes on */

/* A transport, or NULL (with a message in err) when memory or libcurl's
   global init fails. Freed with tp_free. */
tp_transport *tp_new(char *err, size_t errlen);

/* Ends every transfer still in flight as TP_HTTP_CANCELLED (their done
   callbacks run), joins the I/O thread and frees the transport. Transfers the
   caller holds stay valid, ended, until their tp_release. NULL is fine. */
void tp_free(tp_transport *tp);

/* Starts a transfer; done(ud) (done may be NULL) is called exactly once on
   the I/O thread when it ends, once its outcome is readable (tp_outcome). Returns NULL and writes err (nothing sent,
   done never called) for an invalid request or when memory runs out. The
   caller owns the transfer and must tp_release it. */
tp_transfer *tp_start(tp_transport *tp, const tp_request *r, void (*done)(void *ud), void *ud,
                      char *err, size_t errlen);

/* Blocks until t ended (TP_ENDED), or *stop (stop may be NULL; read
   atomically about every 10 ms: write it with __atomic_store_n) is nonzero (TP_STOPPED; the transfer goes on). When
   deadline_ns (CLOCK_MONOTONIC; 0: none) passes first, t is ended as
   TP_HTTP_TIMEOUT saying that the call's deadline passed, and TP_ENDED is
   returned; a deadline already passed ends t at once. Once TP_ENDED is
   returned, done has returned too. */
int tp_wait(tp_transfer *t, long long deadline_ns, const int *stop);

/* Whether t ended, waiting for that at most until until_ns (CLOCK_MONOTONIC;
   0: not at all). Ends nothing. */
int tp_poll(tp_transfer *t, long long until_ns);

/* Ends t as TP_HTTP_CANCELLED unless it ended already; returns at once, the
   waiters wake when the I/O thread has stopped it (promptly). */
void tp_cancel(tp_transfer *t);

/* t's outcome once it ended (from just before its done callback runs),
   else NULL. Owned by t. */
const tp_result *tp_outcome(tp_transfer *t);

/* A stream's head: 1 and the last response's status and headers (owned by
   t, valid until tp_release) once its body started or the transfer ended
   with a response; else 0. */
int tp_head(tp_transfer *t, long *status, const tp_header **headers, size_t *n);

/* A stream's next bytes: copies up to cap of them into buf and returns how
   many (0: none now; the end is tp_outcome's). Reading resumes a transfer
   paused at the queue's bound. */
size_t tp_read(tp_transfer *t, char *buf, size_t cap);

/* Frees t and its outcome. A transfer in flight is cancelled first, and
   tp_release waits for its end (done has been called then). NULL is fine. */
void tp_release(tp_transfer *t);

const char *tp_code_name(tp_code code);

/* CLOCK_MONOTONIC in nanoseconds, the clock of the deadlines above. */
long long tp_now_ns(void);
/* The CLOCK_MONOTONIC millisecond at which a wait of ms from now ends, or -1
   (no end) for ms < 0. A wait past LIM_TIMEOUT_CAP_MS ends at the cap, so
   that now + ms never overflows. */
long long tp_deadline_ms(long long ms);

/* The checks a request's text passes, for callers that want to say what is
   wrong before building one (luma.http): ASCII case-insensitive equality and
   prefix, an RFC 9110 token (a header name), and CR, LF or NUL in text. */
int tp_equal_ci(const char *a, size_t alen, const char *b);
int tp_prefix_ci(const char *s, size_t len, const char *prefix);
int tp_is_token(const char *s, size_t len);
int tp_has_line_break(const char *s, size_t len);

#endif
