/*
 * An incremental reader of server-sent events (WHATWG's event stream
 * interpretation), free of I/O: bytes go in, in pieces of any size cut
 * anywhere (inside a line, a UTF-8 sequence, between CR and LF, inside the
 * BOM), and events come out through a callback. Lines end at CRLF, LF or a
 * lone CR; ":" lines (keep-alives) are skipped; data lines are joined with
 * LF; an event with no data fires nothing. What one event may hold (its
 * lines as they are being read, its data and its type) is bounded: past the
 * bound the reader fails, holding no more than the bound.
 */
#ifndef LUMA_SSE_H
#define LUMA_SSE_H

#include <stddef.h>

#include "strbuf.h"

typedef struct sse_event {
  const char *type;           /* the event field, "message" when none */
  const char *data;           /* the data lines joined with LF, NUL-terminated */
  size_t len;
  const char *id;             /* the last event id (it persists), "" when none */
  long long retry;            /* the last retry field, in ms; -1 when none */
} sse_event;

/* Returns 0 to stop the reader (sse_feed then returns 0 with no message). */
typedef int (*sse_on_event)(void *ud, const sse_event *ev);

typedef struct sse_reader {
  sb_buf line, data, type, id;
  size_t max;                 /* bytes one event may hold */
  long long retry;
  int bom;                    /* bytes of the BOM matched so far; 3: past it */
  int cr;                     /* the last byte was a CR: skip an LF after it */
  int started;                /* the line being read has bytes */
  int comment;                /* ... and starts with ':': its bytes are dropped */
  int has_type;
  int failed;                 /* 1 after an error or a stop: feed does nothing */
  char error[160];            /* why it failed; "" after a stop by the callback */
  sse_on_event on_event;
  void *ud;
} sse_reader;

/* max: the bound of one event, in bytes (LIM_SSE_MAX_EVENT_BYTES). */
void sse_init(sse_reader *r, size_t max, sse_on_event on_event, void *ud);
void sse_free(sse_reader *r);
/* Reads n bytes; 1, or 0 once the reader failed (r->error says why: an
   event past the bound, out of memory) or the callback stopped it. */
int sse_feed(sse_reader *r, const char *p, size_t n);
/* The end of the stream: an event not closed by a blank line is dropped
   (as the standard says). Returns 1 if it held one, so that a caller can
   tell a stream cut mid-event. */
int sse_pending(const sse_reader *r);

#endif
