/*
 * libFuzzer harness for streamed answers: the SSE reader (adapters/sse.c)
 * and each family's stream parser (adapters/stream*.c). Byte 0 picks the
 * family (openai, azure, responses, anthropic, gemini), byte 1 seeds the
 * sizes of the pieces; the rest is the stream. The oracle is differential:
 * read whole and read in pieces, the reader gives the same events (with a
 * small bound on an event, to reach the bound's path too) and the stream
 * the same deltas and the same turn or error. A turn goes through the
 * conversation and the next request must be JSON; an error's message must
 * exist and must not hold the API key. Build with `make fuzz-sse`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapter.h"
#include "sse.h"
#include "fuzz_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The cuts: pieces of 1 to 64 bytes, from a small LCG seeded by byte 1. */
static size_t next_piece(unsigned *state) {
  *state = *state * 1103515245u + 12345u;
  return 1 + (*state >> 16) % 64;
}

static int record(void *ud, const sse_event *ev) {
  sb_buf *out = ud;
  sb_printf(out, "[%s|%zu|", ev->type, ev->len);
  sb_add(out, ev->data, ev->len);
  sb_printf(out, "|%s|%lld]", ev->id, ev->retry);
  return 1;
}

static void sse_read(const char *p, size_t n, unsigned seed, int whole, sb_buf *out) {
  sse_reader r;
  sse_init(&r, 64, record, out);
  int ok = 1;
  for (size_t at = 0; at < n && ok;) {
    size_t k = whole ? n : next_piece(&seed);
    if (k > n - at) k = n - at;
    ok = sse_feed(&r, p + at, k);
    at += k;
  }
  if (r.line.len + r.data.len + r.type.len > 64) {
    fprintf(stderr, "the reader holds more than its bound\n");
    abort();
  }
  if (ok) sb_printf(out, "ok %d", sse_pending(&r));
  else sb_printf(out, "failed %s", r.error);
  sse_free(&r);
}

static void on_delta(void *ud, const ad_delta *d) {
  sb_buf *log = ud;
  sb_printf(log, "%d %d %s %s ", (int)d->kind, d->call, d->id ? d->id : "-", d->name ? d->name : "-");
  if (d->text) sb_add(log, d->text, d->len);
  sb_printf(log, " %lld %lld %d %s\n", d->input_tokens, d->output_tokens, (int)d->stop,
            d->stop_reason ? d->stop_reason : "-");
}

static void describe(sb_buf *b, const ad_turn *t) {
  sb_printf(b, "text %zu ", t->text_len);
  if (t->text) sb_add(b, t->text, t->text_len);
  sb_printf(b, " stop %d %s %s %lld %lld %d\n", (int)t->stop, t->stop_reason ? t->stop_reason : "-",
            t->refusal ? t->refusal : "-", t->input_tokens, t->output_tokens, t->ncalls);
  for (int i = 0; i < t->ncalls; i++) {
    sb_printf(b, "%s %s ", t->calls[i].id ? t->calls[i].id : "-", t->calls[i].name);
    sb_add(b, t->calls[i].arguments, t->calls[i].arguments_len);
    sb_addc(b, '\n');
  }
  if (t->echo) jv_write(b, t->echo, 0);
}

/* Reads the stream; with a turn, takes it through the conversation. */
static void stream_read(const ad_model *m, const char *p, size_t n, unsigned seed, int whole, sb_buf *out) {
  ar_arena a;
  ar_init(&a);
  ad_stream *s = ad_stream_new(m, &a, on_delta, out);
  if (!s) abort();
  ad_error e;
  ad_turn turn;
  int ok = 1;
  for (size_t at = 0; at < n && ok;) {
    size_t k = whole ? n : next_piece(&seed);
    if (k > n - at) k = n - at;
    ok = ad_stream_feed(s, p + at, k, &e);
    at += k;
  }
  if (ok) ok = ad_stream_end(s, &turn, &e);
  if (ok) {
    describe(out, &turn);
    ad_conv c;
    ad_conv_init(&c, m);
    ad_conv_user(&c, "hello", 5);
    ad_conv_turn(&c, &turn);
    if (turn.ncalls > 0) {
      ad_result *res = calloc((size_t)turn.ncalls, sizeof *res);
      for (int i = 0; res && i < turn.ncalls; i++) res[i] = (ad_result){ "{\"v\":1}", 7, 0 };
      if (res) ad_conv_results(&c, &turn, res);
      free(res);
    } else {
      ad_conv_user(&c, "again", 5);
    }
    ad_ask q;
    memset(&q, 0, sizeof q);
    ad_request req;
    char err[200];
    if (ad_build(&c, &q, &a, &req, err, sizeof err)) {
      char why[200];
      if (!json_parse(&a, req.body, req.len, 200, why, sizeof why) && !a.failed) {
        fprintf(stderr, "the request is not JSON: %s\n%.*s\n", why, (int)req.len, req.body);
        abort();
      }
    }
    ad_conv_free(&c);
  } else {
    if (!e.message) abort();
    if (strstr(e.message, FUZZ_KEY)) {
      fprintf(stderr, "the key is in a message: %s\n", e.message);
      abort();
    }
    sb_printf(out, "error %s %d %d %s", le_name(e.code), e.status, e.retryable, e.message);
  }
  ad_stream_free(s);
  ar_free(&a);
}

static void same(const char *what, sb_buf *x, sb_buf *y) {
  if (strcmp(sb_str(x), sb_str(y)) != 0) {
    fprintf(stderr, "%s read whole and in pieces differ:\n%s\n---\n%s\n", what, sb_str(x), sb_str(y));
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  ad_model m;
  fuzz_model(&m, data[0]);
  const char *p = (const char *)data + 2;
  size_t n = size - 2;
  sb_buf x, y;
  sb_init(&x);
  sb_init(&y);
  sse_read(p, n, data[1], 1, &x);
  sse_read(p, n, data[1], 0, &y);
  same("the SSE reader's events", &x, &y);
  x.len = y.len = 0;
  stream_read(&m, p, n, data[1], 1, &x);
  stream_read(&m, p, n, data[1], 0, &y);
  same("the stream's deltas and turn", &x, &y);
  sb_free(&x);
  sb_free(&y);
  return 0;
}
