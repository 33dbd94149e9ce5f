/* The server-sent events reader (adapters/sse.c): every case is read whole,
   cut in two at every byte, and a byte at a time, and gives the same events. */
#include <stdlib.h>

#include "ctest.h"
#include "luma_limits.h"
#include "sse.h"

static int record(void *ud, const sse_event *ev) {
  sb_buf *out = ud;
  sb_printf(out, "[%s|", ev->type);
  sb_add(out, ev->data, ev->len);
  sb_printf(out, "|%s|%lld]", ev->id, ev->retry);
  return 1;
}

/* The events of the text read in pieces at the cuts (offsets, ascending),
   then "!<error>" if the reader failed, "+" if an event was left open. */
static char *read_cut(const char *text, size_t len, const size_t *cuts, int ncuts, size_t max) {
  sb_buf out;
  sb_init(&out);
  sse_reader r;
  sse_init(&r, max, record, &out);
  size_t at = 0;
  int ok = 1;
  for (int i = 0; i <= ncuts && ok; i++) {
    size_t end = i < ncuts ? cuts[i] : len;
    ok = sse_feed(&r, text + at, end - at);
    at = end;
  }
  if (!ok) sb_printf(&out, "!%s", r.error);
  else if (sse_pending(&r)) sb_addc(&out, '+');
  sse_free(&r);
  char *s = strdup(sb_str(&out));
  sb_free(&out);
  return s;
}

typedef struct sse_case {
  const char *name, *text, *events;
} sse_case;

static const sse_case cases[] = {
  { "one event, LF", "data: hi\n\n", "[message|hi||-1]" },
  { "CRLF", "event: a\r\ndata: 1\r\n\r\ndata: 2\r\n\r\n", "[a|1||-1][message|2||-1]" },
  { "lone CR", "data: x\r\rdata: y\r\r", "[message|x||-1][message|y||-1]" },
  { "mixed line ends", "data: a\r\ndata: b\rdata: c\n\r\n", "[message|a\nb\nc||-1]" },
  { "a BOM at the start only", "\xEF\xBB\xBF" "data: a\n\n\xEF\xBB\xBF" "data: b\n\n", "[message|a||-1]" },
  { "a BOM's first byte alone is content", "\xEF" "data: a\n\ndata: b\n\n", "[message|b||-1]" },
  { "multi-line data", "data: {\"a\":\ndata:  1}\n\n", "[message|{\"a\":\n 1}||-1]" },
  { "keep-alives and comments", ": ping\n\n: OPENROUTER PROCESSING\ndata: x\n:\n\n", "[message|x||-1]" },
  { "no data fires nothing", "event: ping\n\nid: 7\n\ndata: y\n\n", "[message|y|7|-1]" },
  { "the id persists; one with NUL is ignored", "id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\n",
    "[message|a|1|-1][message|b|1|-1]" },
  { "retry of digits only", "retry: 3000\ndata: a\n\nretry: 1e3\ndata: b\n\n", "[message|a||3000][message|b||3000]" },
  { "a field without a colon, unknown fields", "data\nfoo: bar\ndata\n\n", "[message|\n||-1]" },
  { "one space dropped, not two", "data:  two\ndata:none\n\n", "[message| two\nnone||-1]" },
  { "an event type is case-sensitive and resets", "Event: x\nevent: message_start\ndata: {}\n\ndata: {}\n\n",
    "[message_start|{}||-1][message|{}||-1]" },
  { "UTF-8 is bytes", "data: caf\xC3\xA9 \xF0\x9F\x98\x80\n\n", "[message|caf\xC3\xA9 \xF0\x9F\x98\x80||-1]" },
  { "an event not closed at EOF is left open", "data: a\n\ndata: b\n", "[message|a||-1]+" },
  { "a line not ended at EOF is left open", "data: a\n\ndata: b", "[message|a||-1]+" },
  { "[DONE] is data like any", "data: [DONE]\n\n", "[message|[DONE]||-1]" },
};

static void test_cases(void) {
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    const sse_case *k = &cases[c];
    /* the texts hold NUL in one case: their length is sizeof-free */
    size_t len = strlen(k->text);
    if (strcmp(k->name, "the id persists; one with NUL is ignored") == 0)
      len = strlen(k->text) + 1 + strlen(k->text + strlen(k->text) + 1);
    char *whole = read_cut(k->text, len, NULL, 0, 1 << 20);
    CT_CHECK(strcmp(whole, k->events) == 0, "%s: expected %s, got %s", k->name, k->events, whole);
    free(whole);
    for (size_t cut = 0; cut <= len; cut++) {
      char *s = read_cut(k->text, len, &cut, 1, 1 << 20);
      CT_CHECK(strcmp(s, k->events) == 0, "%s cut at %zu: expected %s, got %s", k->name, cut, k->events, s);
      free(s);
    }
    size_t *cuts = malloc(sizeof *cuts * (len + 1));
    for (size_t i = 0; i <= len; i++) cuts[i] = i;
    char *bytes = read_cut(k->text, len, cuts, (int)len + 1, 1 << 20);
    CT_CHECK(strcmp(bytes, k->events) == 0, "%s byte by byte: expected %s, got %s", k->name, k->events, bytes);
    free(bytes);
    free(cuts);
  }
}

/* A CR ending a piece and an LF starting the next are one line end. */
static void test_cr_lf_across_pieces(void) {
  const char *t = "data: a\r\n\r\ndata: b\r\n\r\n";
  size_t cuts[] = { 8, 10 };
  char *s = read_cut(t, strlen(t), cuts, 2, 1 << 20);
  CT_EQ_STR("[message|a||-1][message|b||-1]", s);
  free(s);
}

static void test_bound(void) {
  /* the bound counts the data joined and the line being read */
  const char *two = "data: 0123456789\ndata: 0123456789\n\n", *over_text = "data: 0123456789\ndata: 01234567890\n\n";
  char *ok = read_cut(two, strlen(two), NULL, 0, 27);
  CT_EQ_STR("[message|0123456789\n0123456789||-1]", ok);
  free(ok);
  char *over = read_cut(over_text, strlen(over_text), NULL, 0, 27);
  CT_EQ_STR("!an event of the stream holds more than 27 bytes (sse_max_event_bytes)", over);
  free(over);
  /* a comment is dropped as it is read: a long keep-alive holds nothing */
  const char *keepalive = ": ..........................................\ndata: x\n\n";
  char *comment = read_cut(keepalive, strlen(keepalive), NULL, 0, 21);
  CT_EQ_STR("[message|x||-1]", comment);
  free(comment);
  /* after an error, nothing more is read */
  sb_buf out;
  sb_init(&out);
  sse_reader r;
  sse_init(&r, 8, record, &out);
  CT_CHECK(!sse_feed(&r, "data: 123456789", 15), "over the bound");
  CT_CHECK(!sse_feed(&r, "\n\ndata: a\n\n", 11), "a failed reader reads nothing");
  CT_EQ_STR("", sb_str(&out));
  sse_free(&r);
  sb_free(&out);
}

/* One event past the table's bound, in 64 KiB pieces, with no line end:
   the reader fails once it holds the bound, and holds no more. */
static void test_huge_event(void) {
  size_t piece = 64 << 10;
  char *buf = malloc(piece);
  memset(buf, 'x', piece);
  memcpy(buf, "data: ", 6);
  sb_buf out;
  sb_init(&out);
  sse_reader r;
  sse_init(&r, LIM_SSE_MAX_EVENT_BYTES, record, &out);
  size_t fed = 0;
  int ok = 1;
  while (ok && fed < (size_t)LIM_SSE_MAX_EVENT_BYTES * 2) {
    ok = sse_feed(&r, buf, piece);
    memset(buf, 'x', 6);
    fed += piece;
  }
  CT_CHECK(!ok, "a huge event fails");
  CT_CHECK(fed <= (size_t)LIM_SSE_MAX_EVENT_BYTES + piece, "it fails at the bound: %zu bytes read", fed);
  CT_CHECK(r.line.cap + r.data.cap <= 2 * (size_t)LIM_SSE_MAX_EVENT_BYTES, "held %zu", r.line.cap + r.data.cap);
  CT_CHECK(strstr(r.error, "sse_max_event_bytes") != NULL, "%s", r.error);
  sse_free(&r);
  sb_free(&out);
  free(buf);
}

static int stop_first(void *ud, const sse_event *ev) {
  (void)ev;
  ++*(int *)ud;
  return 0;
}

static void test_stop(void) {
  int n = 0;
  sse_reader r;
  sse_init(&r, 100, stop_first, &n);
  CT_CHECK(!sse_feed(&r, "data: a\n\ndata: b\n\n", 18), "a callback stops the reader");
  CT_CHECK(n == 1, "one event, got %d", n);
  CT_EQ_STR("", r.error);
  sse_free(&r);
}

int main(void) {
  test_cases();
  test_cr_lf_across_pieces();
  test_bound();
  test_huge_event();
  test_stop();
  return ct_finish("sse");
}
