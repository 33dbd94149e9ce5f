/*
 * libFuzzer harness for the provider adapters' response parsers: each input
 * is one response of a provider. Byte 0 picks the family (openai, azure,
 * responses, anthropic, gemini), byte 1 the status (200, 400, 429, 503,
 * 529); a line "name: value\n" prefix up to a blank line gives headers; the
 * rest is the body. A response that parses into a turn goes through the
 * conversation (the turn, one result per call) and the next request is
 * built and must be JSON. Build with `make fuzz-adapters`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapter.h"
#include "fuzz_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A schema with what the dialects rewrite: bounds, a default, a const, and
   a $ref with a description beside it. */
static const jv *tool_schema(ar_arena *a) {
  char err[100];
  static const char text[] =
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},"
    "\"n\":{\"type\":\"string\",\"default\":\"x\",\"minLength\":1,\"pattern\":\"^x\"},"
    "\"k\":{\"type\":\"string\",\"const\":\"k\"},\"s\":{\"$ref\":\"#/$defs/S\",\"description\":\"an S\"},"
    "\"l\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/S\"},\"minItems\":2,\"maxItems\":4}},"
    "\"required\":[\"a\",\"k\"],\"additionalProperties\":false,"
    "\"$defs\":{\"S\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},"
    "\"required\":[\"x\"],\"additionalProperties\":false}}}";
  return json_parse(a, text, sizeof text - 1, 10, err, sizeof err);
}

/* The conversation of a request body, which must hold no null item (a turn
   with nothing in it goes back as nothing). */
static void check_items(const jv *body) {
  static const char *const keys[] = { "messages", "contents", "input" };
  for (int k = 0; k < 3; k++) {
    const jv *list = jv_get(body, keys[k]);
    for (const jv *i = list && list->type == JV_ARR ? list->first : NULL; i; i = i->next)
      if (i->type != JV_OBJ) {
        fprintf(stderr, "the request's %s holds an item that is not an object\n", keys[k]);
        abort();
      }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  static const int statuses[] = { 200, 200, 200, 400, 429, 503, 529, 401 };
  ad_model m;
  fuzz_model(&m, data[0]);
  const char *rest = (const char *)data + 2;
  size_t len = size - 2;
  ad_header headers[8];
  int nheaders = 0;
  char *copy = malloc(len + 1);
  if (!copy) return 0;
  memcpy(copy, rest, len);
  copy[len] = 0;
  char *body = copy;
  char *blank = strstr(copy, "\n\n");
  if (blank && memchr(copy, 0, (size_t)(blank - copy)) == NULL) {
    *blank = 0;
    body = blank + 2;
    for (char *line = copy; line && *line && nheaders < 8;) {
      char *nl = strchr(line, '\n');
      if (nl) *nl = 0;
      char *colon = strchr(line, ':');
      if (colon) {
        *colon = 0;
        headers[nheaders++] = (ad_header){ line, colon + 1 };
      }
      line = nl ? nl + 1 : NULL;
    }
  }
  ad_response r = { statuses[data[1] % 8], headers, nheaders, body, len - (size_t)(body - copy), 1700000000000LL };
  ar_arena a;
  ar_init(&a);
  ad_turn turn;
  ad_error e;
  ad_conv c;
  ad_conv_init(&c, &m);
  ad_conv_system(&c, "be brief", 8);
  ad_conv_user(&c, "hello", 5);
  if (ad_parse(&m, &r, &a, &turn, &e)) {
    ad_conv_turn(&c, &turn);
    if (turn.ncalls > 0) {
      ad_result *res = calloc((size_t)turn.ncalls, sizeof *res);
      for (int i = 0; res && i < turn.ncalls; i++)
        res[i] = (ad_result){ i % 2 ? "{\"error\":{\"code\":\"X\"}}" : "{\"v\":1}", i % 2 ? 23 : 7, i % 2 };
      if (res) ad_conv_results(&c, &turn, res);
      free(res);
    } else {
      ad_conv_user(&c, "again", 5);   /* the re-ask */
    }
    ad_tool tool = { "t", "a tool", tool_schema(&a) };
    ad_ask q = { .tools = &tool, .ntools = 1, .choice = AD_CHOICE_AUTO, .final_schema = tool.parameters, .final_name = "Answer" };
    ad_request req;
    char err[200];
    if (ad_build(&c, &q, &a, &req, err, sizeof err)) {
      char why[200];
      const jv *sent = json_parse(&a, req.body, req.len, 200, why, sizeof why);
      if (!sent && !a.failed) {
        fprintf(stderr, "the request is not JSON: %s\n%.*s\n", why, (int)req.len, req.body);
        abort();
      }
      if (sent) check_items(sent);
    }
  } else {
    if (!e.message) abort();
    if (strstr(e.message, FUZZ_KEY)) {
      fprintf(stderr, "the key is in a message: %s\n", e.message);
      abort();
    }
    (void)ad_retry_delay(&e, data[1] % 6, 0.75);
  }
  ad_conv_free(&c);
  ar_free(&a);
  free(copy);
  return 0;
}
