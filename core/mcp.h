/* MCP over stdio: the framing of JSON-RPC messages, one per line, under a
   fixed size bound. Lua-free. A reader owns one buffer of max + 1 bytes
   (max: LIM_MCP_MAX_MESSAGE_BYTES); the bytes of a longer line are dropped
   as they arrive and the line is reported once as too big, in its place
   among the others. The protocol (versions, methods, ids in flight) is
   lua/luma/mcp.lua; the JSON is parsed by base/json.c under its depth bound. */
#ifndef LUMA_MCP_H
#define LUMA_MCP_H

#include <stddef.h>

typedef struct mcp_reader {
  char *buf;
  size_t len;       /* bytes held */
  size_t max;       /* the longest line accepted, newline excluded */
  size_t scan;      /* buf[0..scan) has no newline */
  size_t cut;       /* bytes of the line mcp_reader_next returned last */
  int dropping;     /* inside a line longer than max */
  int too_big;      /* too-big lines ended, not reported yet (0 or 1: one at a time) */
  int eof;
} mcp_reader;

enum { MCP_NONE = 0, MCP_LINE, MCP_TOO_BIG };

/* Returns 0, or -1 when out of memory. */
int mcp_reader_init(mcp_reader *r, size_t max);
void mcp_reader_free(mcp_reader *r);

/* Takes bytes: returns how many it took. It takes them all unless the
   buffer is full and holds a complete line: take the lines (mcp_reader_next
   until MCP_NONE), then feed the rest. */
size_t mcp_reader_feed(mcp_reader *r, const char *p, size_t n);

/* One read(2) of fd, of at most what the buffer can take: > 0 bytes read,
   0 at end of file (r->eof set), -1 with errno. Call it when
   mcp_reader_next has returned MCP_NONE. */
long mcp_reader_fill(mcp_reader *r, int fd);

/* The next line: MCP_LINE with *line, *n into the buffer (valid until the
   next call on r; a trailing \r is not counted), MCP_TOO_BIG for a line that
   was over max (its bytes are gone), MCP_NONE when no complete line is held.
   Empty lines are skipped. At end of file an unterminated last line counts
   as a line. */
int mcp_reader_next(mcp_reader *r, const char **line, size_t *n);

#endif
