/*
 * libFuzzer harness for core/regex. The input is a pattern, a NUL byte, and
 * a subject: compile, search, free. Beyond crashes and sanitizer reports it
 * checks that a compiled pattern always answers 0 or 1, and that wrapping it
 * in (?:...) does not change the answer.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Icore \
 *     spec/fuzz/regex_fuzz.c core/regex.c -o /tmp/regex_fuzz
 *   /tmp/regex_fuzz -max_total_time=180
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "regex.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *pat = (const char *)data, *subject;
  const char *nul = memchr(data, 0, size);
  size_t plen = nul ? (size_t)(nul - pat) : size;
  size_t slen = nul ? size - plen - 1 : 0;
  char err[128], *wrapped;
  lre *re, *wre;
  int r;
  subject = nul ? nul + 1 : pat + size;
  re = lre_compile(pat, plen, err, sizeof err);
  if (!re) {
    if (!memchr(err, 0, sizeof err) || !err[0]) abort();
    return 0;
  }
  r = lre_search(re, subject, slen);
  if (r != 0 && r != 1) abort();
  wrapped = malloc(plen + 5);
  if (wrapped) {
    memcpy(wrapped, "(?:", 3);
    memcpy(wrapped + 3, pat, plen);
    wrapped[plen + 3] = ')';
    wre = lre_compile(wrapped, plen + 4, err, sizeof err);
    if (wre && lre_search(wre, subject, slen) != r) abort();
    lre_free(wre);
    free(wrapped);
  }
  lre_free(re);
  return 0;
}
