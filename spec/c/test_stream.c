/* Streamed answers (adapters/stream*.c): every recorded stream of
   spec/fixtures/streams, fed cut in two at every byte and a byte at a time,
   gives the same deltas and the same turn, and that turn is the one
   ad_parse gives for the equivalent whole response (the .json beside it).
   A stream cut anywhere before its final event is never a turn. */
#include <stdlib.h>

#include "adapter.h"
#include "ctest.h"
#include "luma_limits.h"

#define DIR "spec/fixtures/streams/"

typedef struct stream_case {
  const char *name;
  ad_provider provider;
  ad_api api;
  const char *error;          /* NULL: a turn, equal to <name>.json's; else the code */
  const char *message;        /* a part of the error's message */
  int retryable;
} stream_case;

static const stream_case cases[] = {
  { "chat-text", AD_OPENAI, AD_CHAT, NULL, NULL, 0 },
  { "chat-parallel-tools", AD_OPENAI, AD_CHAT, NULL, NULL, 0 },
  { "chat-compatible", AD_OPENAI, AD_CHAT, NULL, NULL, 0 },
  { "chat-late-name", AD_OPENAI, AD_CHAT, NULL, NULL, 0 },
  { "chat-refusal", AD_OPENAI, AD_CHAT, NULL, NULL, 0 },
  { "chat-search", AD_OPENAI, AD_CHAT, NULL, NULL, 0 },
  { "azure-length", AD_AZURE, AD_CHAT, NULL, NULL, 0 },
  { "chat-error", AD_OPENAI, AD_CHAT, "ASK_PROVIDER_ERROR",
    "openai sent an error in its stream (server_error): The server had an error", 1 },
  { "chat-truncated", AD_OPENAI, AD_CHAT, "ASK_TRUNCATED",
    "openai's stream ended before its final event ([DONE]): the answer is not complete", 1 },
  { "anthropic-tools", AD_ANTHROPIC, AD_CHAT, NULL, NULL, 0 },
  { "anthropic-length", AD_ANTHROPIC, AD_CHAT, NULL, NULL, 0 },
  { "anthropic-refusal", AD_ANTHROPIC, AD_CHAT, NULL, NULL, 0 },
  { "anthropic-server-tools", AD_ANTHROPIC, AD_CHAT, NULL, NULL, 0 },
  { "anthropic-error", AD_ANTHROPIC, AD_CHAT, "ASK_PROVIDER_ERROR",
    "anthropic sent an error in its stream (overloaded_error): Overloaded", 1 },
  { "anthropic-truncated", AD_ANTHROPIC, AD_CHAT, "ASK_TRUNCATED",
    "anthropic's stream ended before its final event (message_stop)", 1 },
  { "responses-tools", AD_OPENAI, AD_RESPONSES, NULL, NULL, 0 },
  { "responses-no-output", AD_OPENAI, AD_RESPONSES, NULL, NULL, 0 },
  { "responses-refusal", AD_OPENAI, AD_RESPONSES, NULL, NULL, 0 },
  { "responses-length", AD_OPENAI, AD_RESPONSES, NULL, NULL, 0 },
  { "responses-error", AD_OPENAI, AD_RESPONSES, "ASK_PROVIDER_ERROR",
    "openai sent an error in its stream (insufficient_quota): You exceeded your current quota.", 0 },
  { "gemini-tools", AD_GEMINI, AD_CHAT, NULL, NULL, 0 },
  { "gemini-signed-text", AD_GEMINI, AD_CHAT, NULL, NULL, 0 },
  { "gemini-blocked", AD_GEMINI, AD_CHAT, NULL, NULL, 0 },
  { "gemini-length", AD_GEMINI, AD_CHAT, NULL, NULL, 0 },
  { "gemini-grounding", AD_GEMINI, AD_CHAT, NULL, NULL, 0 },
  { "gemini-error", AD_GEMINI, AD_CHAT, "ASK_PROVIDER_ERROR",
    "gemini sent an error in its stream (UNAVAILABLE): The model is overloaded.", 1 },
  { "gemini-truncated", AD_GEMINI, AD_CHAT, "ASK_TRUNCATED", "gemini's stream ended before its final event (a finishReason)", 1 },
};

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  sb_buf b;
  sb_init(&b);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) sb_add(&b, buf, n);
  fclose(f);
  *len = b.len;
  char *s = malloc(b.len + 1);
  memcpy(s, b.data ? b.data : "", b.len);
  s[b.len] = 0;
  sb_free(&b);
  return s;
}

static const char *const kinds[] = { "text", "refusal", "reasoning", "start", "args", "done", "ptool", "usage", "end" };

/* Every delta as a line of text: what a host would see. */
static void on_delta(void *ud, const ad_delta *d) {
  sb_buf *log = ud;
  sb_printf(log, "%s", kinds[d->kind]);
  switch (d->kind) {
    case AD_DELTA_CALL_START: sb_printf(log, " %d %s %s", d->call, d->id ? d->id : "-", d->name); break;
    case AD_DELTA_CALL_ARGS:
    case AD_DELTA_CALL_DONE: sb_printf(log, " %d ", d->call); sb_add(log, d->text, d->len); break;
    case AD_DELTA_USAGE: sb_printf(log, " %lld %lld", d->input_tokens, d->output_tokens); break;
    case AD_DELTA_PTOOL:
      sb_printf(log, " %s %s %s %s", d->ptcall->id ? d->ptcall->id : "-", d->ptcall->name,
                d->ptcall->error_code ? d->ptcall->error_code : "-", d->ptcall->error ? d->ptcall->error : "-");
      break;
    case AD_DELTA_END: sb_printf(log, " %d %s", (int)d->stop, d->stop_reason ? d->stop_reason : "-"); break;
    default: sb_addc(log, ' '); sb_add(log, d->text, d->len); break;
  }
  sb_addc(log, '\n');
}

/* A turn as text, every field of it, the echo as JSON. */
static void describe(sb_buf *b, const ad_turn *t) {
  sb_printf(b, "text=%s[", t->text ? "" : "NULL");
  if (t->text) sb_add(b, t->text, t->text_len);
  sb_printf(b, "] stop=%d reason=%s refusal=%s in=%lld out=%lld calls=%d\n", (int)t->stop,
            t->stop_reason ? t->stop_reason : "NULL", t->refusal ? t->refusal : "NULL", t->input_tokens,
            t->output_tokens, t->ncalls);
  for (int i = 0; i < t->ncalls; i++) {
    sb_printf(b, "call %s %s ", t->calls[i].id ? t->calls[i].id : "NULL", t->calls[i].name);
    sb_add(b, t->calls[i].arguments, t->calls[i].arguments_len);
    sb_addc(b, '\n');
  }
  /* what provider tools leave: their counts, the citations, the container */
  sb_printf(b, "ptools=");
  for (int k = 0; k < AD_NPTKINDS; k++) sb_printf(b, "%d,", t->ptool_uses[k]);
  sb_printf(b, " errors=%d container=%s\n", t->ptool_errors, t->container ? t->container : "NULL");
  for (int i = 0; i < t->nptcalls; i++)
    sb_printf(b, "ptcall %s %s %d %s %s\n", t->ptcalls[i].id ? t->ptcalls[i].id : "NULL", t->ptcalls[i].name, t->ptcalls[i].kind,
              t->ptcalls[i].error_code ? t->ptcalls[i].error_code : "NULL", t->ptcalls[i].error ? t->ptcalls[i].error : "NULL");
  for (int i = 0; i < t->ncitations; i++)
    sb_printf(b, "cite %s %s %s\n", t->citations[i].url, t->citations[i].title ? t->citations[i].title : "NULL",
              t->citations[i].cited_text ? t->citations[i].cited_text : "NULL");
  sb_adds(b, "echo=");
  if (t->echo) jv_write(b, t->echo, 0); else sb_adds(b, "NULL");
}

/* The stream read in the pieces the cuts make; the result (the turn or the
   error) is written to out, the deltas to log. */
static void run(const ad_model *m, const char *text, size_t len, const size_t *cuts, int ncuts, sb_buf *out,
                sb_buf *log) {
  ar_arena a;
  ar_init(&a);
  ad_stream *s = ad_stream_new(m, &a, on_delta, log);
  ad_error err;
  ad_turn turn;
  size_t at = 0;
  int ok = 1;
  for (int i = 0; i <= ncuts && ok; i++) {
    size_t end = i < ncuts ? cuts[i] : len;
    ok = ad_stream_feed(s, text + at, end - at, &err);
    at = end;
  }
  if (ok) ok = ad_stream_end(s, &turn, &err);
  if (ok) describe(out, &turn);
  else sb_printf(out, "error %s retryable=%d: %s", le_name(err.code), err.retryable, err.message);
  ad_stream_free(s);
  ar_free(&a);
}

static void test_case(const stream_case *k) {
  char path[200];
  size_t len, jlen = 0;
  snprintf(path, sizeof path, DIR "%s.sse", k->name);
  char *text = slurp(path, &len);
  CT_CHECK(text != NULL, "%s cannot be read", path);
  if (!text) return;
  ad_model m;
  memset(&m, 0, sizeof m);
  m.provider = k->provider;
  m.api = k->api;
  m.name = "model-1";
  m.api_key = "secret-key-123";
  if (k->provider == AD_AZURE) { m.base_url = "https://x"; m.deployment = "d"; }
  sb_buf expected;
  sb_init(&expected);
  if (!k->error) {
    snprintf(path, sizeof path, DIR "%s.json", k->name);
    char *json = slurp(path, &jlen);
    CT_CHECK(json != NULL, "%s cannot be read", path);
    if (!json) { free(text); return; }
    ar_arena a;
    ar_init(&a);
    ad_response r = { 200, NULL, 0, json, jlen, 0 };
    ad_turn turn;
    ad_error err;
    if (ad_parse(&m, &r, &a, &turn, &err)) describe(&expected, &turn);
    else sb_printf(&expected, "the whole response does not parse: %s", err.message);
    ar_free(&a);
    free(json);
  }
  /* whole, then the deltas of a whole read are those of every cut */
  sb_buf whole, whole_log;
  sb_init(&whole);
  sb_init(&whole_log);
  run(&m, text, len, NULL, 0, &whole, &whole_log);
  if (k->error) {
    char want[400];
    snprintf(want, sizeof want, "error %s retryable=%d: ", k->error, k->retryable);
    CT_CHECK(strncmp(sb_str(&whole), want, strlen(want)) == 0 && strstr(sb_str(&whole), k->message),
             "%s: expected %s...%s, got %s", k->name, want, k->message, sb_str(&whole));
  } else {
    CT_CHECK(strcmp(sb_str(&whole), sb_str(&expected)) == 0, "%s: the stream's turn\n%s\nis not the response's\n%s",
             k->name, sb_str(&whole), sb_str(&expected));
  }
  int bad = 0;
  for (size_t cut = 0; cut <= len && bad < 3; cut++) {
    sb_buf out, log;
    sb_init(&out);
    sb_init(&log);
    run(&m, text, len, &cut, 1, &out, &log);
    int same = strcmp(sb_str(&out), sb_str(&whole)) == 0 && strcmp(sb_str(&log), sb_str(&whole_log)) == 0;
    CT_CHECK(same, "%s cut at %zu:\n%s\n%s\nwhole:\n%s\n%s", k->name, cut, sb_str(&out), sb_str(&log), sb_str(&whole),
             sb_str(&whole_log));
    bad += !same;
    sb_free(&out);
    sb_free(&log);
  }
  size_t *cuts = malloc(sizeof *cuts * (len + 1));
  for (size_t i = 0; i <= len; i++) cuts[i] = i;
  sb_buf out, log;
  sb_init(&out);
  sb_init(&log);
  run(&m, text, len, cuts, (int)len + 1, &out, &log);
  CT_CHECK(strcmp(sb_str(&out), sb_str(&whole)) == 0 && strcmp(sb_str(&log), sb_str(&whole_log)) == 0,
           "%s byte by byte:\n%s\n%s", k->name, sb_str(&out), sb_str(&log));
  sb_free(&out);
  sb_free(&log);
  /* every prefix: the whole turn or ASK_TRUNCATED, never another turn */
  bad = 0;
  for (size_t end = 0; end < len && !k->error && bad < 3; end++) {
    sb_init(&out);
    sb_init(&log);
    run(&m, text, end, NULL, 0, &out, &log);
    int fine = strcmp(sb_str(&out), sb_str(&whole)) == 0 ||
               strncmp(sb_str(&out), "error ASK_TRUNCATED retryable=1: ", 33) == 0;
    CT_CHECK(fine, "%s ending at %zu: %s", k->name, end, sb_str(&out));
    bad += !fine;
    sb_free(&out);
    sb_free(&log);
  }
  free(cuts);
  sb_free(&whole);
  sb_free(&whole_log);
  sb_free(&expected);
  free(text);
}

/* The deltas say what the turn holds: the text joined, each call's
   arguments joined. */
static void test_deltas(void) {
  size_t len;
  char *text = slurp(DIR "chat-parallel-tools.sse", &len);
  ad_model m;
  memset(&m, 0, sizeof m);
  m.provider = AD_OPENAI;
  sb_buf out, log;
  sb_init(&out);
  sb_init(&log);
  run(&m, text, len, NULL, 0, &out, &log);
  CT_EQ_STR("start 0 call_a get_weather\nstart 1 call_b get_time\nargs 0 {\"city\":\nargs 1 {\"tz\":\"Europe/\n"
            "args 0 \"Paris\"}\nargs 1 Paris\"}\ndone 0 {\"city\":\"Paris\"}\ndone 1 {\"tz\":\"Europe/Paris\"}\n"
            "usage 40 22\nend 1 tool_calls\n", sb_str(&log));
  sb_free(&out);
  sb_free(&log);
  free(text);
  /* Anthropic: thinking is reasoning, a call's fragments are joined when it
     stops, a call with no input_json_delta is {} */
  text = slurp(DIR "anthropic-tools.sse", &len);
  m.provider = AD_ANTHROPIC;
  sb_init(&out);
  sb_init(&log);
  run(&m, text, len, NULL, 0, &out, &log);
  CT_EQ_STR("reasoning The user wants the weather\nreasoning  in Paris and the time.\ntext Let me check \ntext both.\n"
            "start 0 toolu_01A get_weather\nargs 0 {\"city\": \"Pa\nargs 0 ris\", \"unit\": \"c\"}\n"
            "done 0 {\"city\": \"Paris\", \"unit\": \"c\"}\nstart 1 toolu_01B get_time\ndone 1 {}\n"
            "usage 472 89\nend 1 tool_use\n", sb_str(&log));
  sb_free(&out);
  sb_free(&log);
  free(text);
}

/* An error event is the provider's error, as its HTTP status would be. */
static void test_error_status(void) {
  size_t len;
  char *text = slurp(DIR "anthropic-error.sse", &len);
  ad_model m;
  memset(&m, 0, sizeof m);
  m.provider = AD_ANTHROPIC;
  ar_arena a;
  ar_init(&a);
  ad_stream *s = ad_stream_new(&m, &a, NULL, NULL);
  ad_error err;
  CT_CHECK(!ad_stream_feed(s, text, len, &err), "an error event fails the stream");
  CT_CHECK(err.status == 529 && err.retryable && err.type && strcmp(err.type, "overloaded_error") == 0,
           "status %d retryable %d type %s", err.status, err.retryable, err.type ? err.type : "NULL");
  ad_turn turn;
  CT_CHECK(!ad_stream_end(s, &turn, &err) && err.code == LE_ASK_PROVIDER_ERROR, "and stays failed");
  ad_stream_free(s);
  ar_free(&a);
  free(text);
}

/* What is not the API's stream: an event past sse_max_event_bytes (the
   reader holds no more than the bound), data that is not JSON. */
static void test_invalid(void) {
  ad_model m;
  memset(&m, 0, sizeof m);
  m.provider = AD_ANTHROPIC;
  ar_arena a;
  ar_init(&a);
  ad_stream *s = ad_stream_new(&m, &a, NULL, NULL);
  ad_error err;
  size_t piece = 1 << 20, fed = 0;
  char *buf = malloc(piece);
  memset(buf, 'x', piece);
  int ok = ad_stream_feed(s, ": keep-alive\n\ndata: ", 21, &err);
  while (ok && fed <= (size_t)LIM_SSE_MAX_EVENT_BYTES) {
    ok = ad_stream_feed(s, buf, piece, &err);
    fed += piece;
  }
  CT_CHECK(!ok && err.code == LE_ASK_STREAM_INVALID && !err.retryable, "a huge event: %s", le_name(err.code));
  CT_CHECK(strstr(err.message, "anthropic's stream: an event of the stream holds more than 33554432 bytes (sse_max_event_bytes)") != NULL,
           "%s", err.message);
  ad_stream_free(s);
  free(buf);
  s = ad_stream_new(&m, &a, NULL, NULL);
  const char *html = "event: message_start\ndata: <html>oops</html>\n\n";
  CT_CHECK(!ad_stream_feed(s, html, strlen(html), &err) && err.code == LE_ASK_STREAM_INVALID, "HTML");
  CT_CHECK(strstr(err.message, "anthropic's stream has an event whose data is not JSON (") != NULL, "%s", err.message);
  ad_stream_free(s);
  /* only keep-alives, then EOF: no answer */
  s = ad_stream_new(&m, &a, NULL, NULL);
  ad_turn turn;
  CT_CHECK(ad_stream_feed(s, ": ping\n\n: ping\n\n", 16, &err), "keep-alives");
  CT_CHECK(!ad_stream_end(s, &turn, &err) && err.code == LE_ASK_TRUNCATED, "keep-alives only: %s", le_name(err.code));
  ad_stream_free(s);
  ar_free(&a);
}

/* A long stream holds its answer, not its events: 10,000 Gemini chunks of
   one character, each with its running usage, leave the turn's arena with
   about the text (the usage is kept once, not 10,000 times). */
static void test_flat_memory(void) {
  ad_model m;
  memset(&m, 0, sizeof m);
  m.provider = AD_GEMINI;
  ar_arena a;
  ar_init(&a);
  ad_stream *s = ad_stream_new(&m, &a, NULL, NULL);
  ad_error err;
  char chunk[300];
  int ok = 1;
  for (int i = 0; i < 10000 && ok; i++) {
    int n = snprintf(chunk, sizeof chunk,
                     "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}],\"role\":\"model\"},\"index\":0%s}],"
                     "\"usageMetadata\":{\"promptTokenCount\":5,\"candidatesTokenCount\":%d,\"totalTokenCount\":%d}}\r\n\r\n",
                     i == 9999 ? ",\"finishReason\":\"STOP\"" : "", i + 1, i + 6);
    ok = ad_stream_feed(s, chunk, (size_t)n, &err);
  }
  CT_CHECK(ok && a.used < 16 * 1024, "10,000 chunks hold %zu bytes of the turn's arena", a.used);
  ad_turn turn;
  CT_CHECK(ad_stream_end(s, &turn, &err) && turn.text_len == 10000 && turn.output_tokens == 10000, "the turn");
  ad_stream_free(s);
  ar_free(&a);
}

int main(void) {
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) test_case(&cases[i]);
  test_deltas();
  test_error_status();
  test_invalid();
  test_flat_memory();
  return ct_finish("stream");
}
