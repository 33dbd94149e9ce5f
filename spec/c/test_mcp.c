/*
 * core/mcp.c: the framing of MCP's stdio transport. Lines come out whole and
 * in order however the bytes are cut; a line longer than max is reported
 * once, in its place, without ever holding more than max + 1 bytes; \r\n
 * and empty lines; an unterminated last line at end of file; reading from a
 * pipe with mcp_reader_fill.
 */
#include <unistd.h>

#include "ctest.h"
#include "mcp.h"

/* Feeds text in pieces of `step` bytes, taking lines as they come; writes
   them to out as "line|line|#|..." (# for a too-big one). */
static void run(size_t max, const char *text, size_t step, int eof, char *out, size_t outlen) {
  mcp_reader r;
  mcp_reader_init(&r, max);
  out[0] = 0;
  size_t n = strlen(text), at = 0;
  for (;;) {
    const char *line;
    size_t len;
    int what;
    while ((what = mcp_reader_next(&r, &line, &len)) != MCP_NONE) {
      size_t o = strlen(out);
      if (what == MCP_TOO_BIG) snprintf(out + o, outlen - o, "#|");
      else snprintf(out + o, outlen - o, "%.*s|", (int)len, line);
      CT_CHECK(r.len <= max + 1, "held %zu bytes", r.len);
    }
    if (at == n) {
      if (!eof || r.eof) break;
      r.eof = 1;
      continue;
    }
    size_t k = n - at < step ? n - at : step;
    size_t took = mcp_reader_feed(&r, text + at, k);
    CT_CHECK(r.len <= max + 1, "held %zu bytes", r.len);
    at += took;
  }
  mcp_reader_free(&r);
}

int main(void) {
  char out[4096];
  const char *text = "{\"a\":1}\n\r\n\n{\"b\":2}\r\n0123456789ABCDEF\nxy\n";
  for (size_t step = 1; step <= 40; step++) {
    run(10, text, step, 0, out, sizeof out);
    CT_EQ_STR("{\"a\":1}|{\"b\":2}|#|xy|", out);
    run(100, text, step, 0, out, sizeof out);
    CT_EQ_STR("{\"a\":1}|{\"b\":2}|0123456789ABCDEF|xy|", out);
  }
  /* exactly max is a line; max + 1 is too big */
  run(4, "abcd\nabcde\nz\n", 3, 0, out, sizeof out);
  CT_EQ_STR("abcd|#|z|", out);
  /* two too-big lines in a row, and one at the start */
  run(3, "aaaaaa\nbbbbbbbbb\nc\n", 2, 0, out, sizeof out);
  CT_EQ_STR("#|#|c|", out);
  /* an unterminated last line counts at end of file; without eof it waits */
  run(10, "a\nlast", 2, 1, out, sizeof out);
  CT_EQ_STR("a|last|", out);
  run(10, "a\nlast", 2, 0, out, sizeof out);
  CT_EQ_STR("a|", out);

  /* from a pipe: a line of 100 KiB over max = 64 KiB, then a short one */
  int fds[2];
  CT_CHECK(pipe(fds) == 0, "pipe");
  if (fork() == 0) {
    close(fds[0]);
    static char big[100 * 1024];
    memset(big, 'x', sizeof big);
    if (write(fds[1], big, sizeof big) < 0) _exit(1);
    if (write(fds[1], "\nok\n", 4) < 0) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  mcp_reader r;
  mcp_reader_init(&r, 64 * 1024);
  int big = 0, ok = 0;
  for (;;) {
    const char *line;
    size_t len;
    int what;
    while ((what = mcp_reader_next(&r, &line, &len)) != MCP_NONE) {
      if (what == MCP_TOO_BIG) big++;
      else if (len == 2 && memcmp(line, "ok", 2) == 0) ok++;
    }
    if (r.eof) break;
    CT_CHECK(mcp_reader_fill(&r, fds[0]) >= 0, "fill");
    CT_CHECK(r.len <= 64 * 1024 + 1, "held %zu", r.len);
  }
  CT_CHECK(big == 1 && ok == 1, "big %d ok %d", big, ok);
  mcp_reader_free(&r);
  close(fds[0]);
  return ct_finish("test_mcp");
}
