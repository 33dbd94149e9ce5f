/*
 * libFuzzer harness for json_parse: each input is a JSON document. A document
 * that parses is written compactly, the text is parsed again, and the second
 * writing must equal the first; a document that does not parse must come
 * with a reason. Build:
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *     -Ibase spec/fuzz/json_fuzz.c base/json.c base/arena.c base/strbuf.c base/utf8.c \
 *     base/map.c -lm -o json_fuzz
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

#define MAX_DEPTH 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes v, parses the text back and writes that: the two texts must agree.
   Running out of memory ends the check without a verdict. */
static void check_round_trip(ar_arena *a, const jv *v) {
  sb_buf first, second;
  char err[256];
  sb_init(&first);
  sb_init(&second);
  jv_write(&first, v, 0);
  jv *w = first.failed ? NULL : json_parse(a, first.data, first.len, MAX_DEPTH, err, sizeof err);
  if (!first.failed && !w && !a->failed) {
    fprintf(stderr, "written text does not parse: %s\n%s\n", err, sb_str(&first));
    abort();
  }
  if (w) {
    jv_write(&second, w, 0);
    if (!second.failed && (second.len != first.len || memcmp(second.data, first.data, first.len) != 0)) {
      fprintf(stderr, "second writing differs:\n%s\n%s\n", sb_str(&first), sb_str(&second));
      abort();
    }
  }
  sb_free(&second);
  sb_free(&first);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ar_arena a;
  char err[256];
  ar_init(&a);
  jv *v = json_parse(&a, (const char *)data, size, MAX_DEPTH, err, sizeof err);
  if (v) {
    check_round_trip(&a, v);
  } else if (!a.failed && !err[0]) {
    fprintf(stderr, "json_parse failed without a reason\n");
    abort();
  }
  ar_free(&a);
  return 0;
}
