/*
 * A tiny test harness for the C units that have no Lua surface.
 * Each test program includes this header, writes checks with CT_CHECK /
 * CT_EQ_STR, and ends main() with `return ct_finish("name");`, which prints
 * "name: N passed, N failed" and appends "N M" to $LUMA_TEST_RESULTS if set.
 */
#ifndef LUMA_CTEST_H
#define LUMA_CTEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ct_passed, ct_failed;

#define CT_CHECK(cond, ...) do {                                          \
    if (cond) ct_passed++;                                                \
    else {                                                                \
      ct_failed++;                                                        \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                       \
      fputc('\n', stderr);                                                \
    }                                                                     \
  } while (0)

#define CT_EQ_STR(expected, actual) do {                                  \
    const char *ct_e_ = (expected), *ct_a_ = (actual);                    \
    CT_CHECK(ct_a_ != NULL && strcmp(ct_e_, ct_a_) == 0,                  \
             "expected \"%s\", got \"%s\"", ct_e_, ct_a_ ? ct_a_ : "(null)"); \
  } while (0)

static int ct_finish(const char *name) {
  const char *path = getenv("LUMA_TEST_RESULTS");
  printf("%s: %d passed, %d failed\n", name, ct_passed, ct_failed);
  if (path) {
    FILE *f = fopen(path, "a");
    if (f) { fprintf(f, "%d %d\n", ct_passed, ct_failed); fclose(f); }
  }
  return ct_failed ? 1 : 0;
}

#endif
