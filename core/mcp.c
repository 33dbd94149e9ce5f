/* The framing of MCP's stdio transport (see mcp.h). */
#include "mcp.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mcp_reader_init(mcp_reader *r, size_t max) {
  memset(r, 0, sizeof *r);
  r->max = max;
  r->buf = malloc(max + 1);
  return r->buf ? 0 : -1;
}

void mcp_reader_free(mcp_reader *r) {
  free(r->buf);
  memset(r, 0, sizeof *r);
}

/* Forgets the line returned last. */
static void take_cut(mcp_reader *r) {
  if (!r->cut) return;
  memmove(r->buf, r->buf + r->cut, r->len - r->cut);
  r->len -= r->cut;
  r->cut = r->scan = 0;
}

static int has_newline(mcp_reader *r) {
  if (memchr(r->buf + r->scan, '\n', r->len - r->scan)) return 1;
  r->scan = r->len;
  return 0;
}

size_t mcp_reader_feed(mcp_reader *r, const char *p, size_t n) {
  size_t taken = 0;
  take_cut(r);
  while (taken < n) {
    if (r->dropping) {
      const char *nl = memchr(p + taken, '\n', n - taken);
      if (!nl) return n;
      taken = (size_t)(nl - p) + 1;
      r->dropping = 0;
      r->too_big = 1;   /* buf is empty: what follows comes after it */
      continue;
    }
    size_t room = r->max + 1 - r->len;
    if (room == 0) {
      if (has_newline(r)) return taken;
      r->len = r->scan = 0;          /* a line longer than max: drop it */
      r->dropping = 1;
      continue;
    }
    size_t k = n - taken < room ? n - taken : room;
    memcpy(r->buf + r->len, p + taken, k);
    r->len += k;
    taken += k;
  }
  return taken;
}

long mcp_reader_fill(mcp_reader *r, int fd) {
  char tmp[65536];
  take_cut(r);
  /* at most what feed takes at once: the room left, or a line's worth */
  size_t want = sizeof tmp;
  size_t room = r->max + 1 - r->len;
  if (r->dropping || room == 0) room = r->max + 1;
  if (room < want) want = room;
  ssize_t got = read(fd, tmp, want);
  if (got < 0) return -1;
  if (got == 0) { r->eof = 1; return 0; }
  mcp_reader_feed(r, tmp, (size_t)got);   /* takes it all: want <= room */
  return (long)got;
}

int mcp_reader_next(mcp_reader *r, const char **line, size_t *n) {
  take_cut(r);
  for (;;) {
    if (r->too_big) { r->too_big = 0; return MCP_TOO_BIG; }
    size_t end;
    char *nl = memchr(r->buf + r->scan, '\n', r->len - r->scan);
    if (nl) {
      end = (size_t)(nl - r->buf);
      r->cut = end + 1;
    } else if (r->eof && r->len > 0 && !r->dropping) {
      end = r->len;
      r->cut = r->len;
    } else {
      r->scan = r->len;
      return MCP_NONE;
    }
    size_t k = end;
    if (k > 0 && r->buf[k - 1] == '\r') k--;
    if (k == 0) { take_cut(r); continue; }
    *line = r->buf;
    *n = k;
    return MCP_LINE;
  }
}
