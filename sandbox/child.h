/* The protocol between the host and a handler process (isolate.c), and
   the handler process's side of it (child.c). A frame is its length (4
   bytes) and its bytes; the first byte of a reply says its kind. */
#ifndef LUMA_SANDBOX_CHILD_H
#define LUMA_SANDBOX_CHILD_H

#include <stdint.h>
#include <string.h>

#include "isolate.h"
#include "strbuf.h"

enum { K_READY = 'R', K_FAILED = 'F', K_OK = 'O', K_ERROR = 'E', K_TIMEOUT = 'X' };

/* What a request says besides its values (both ends are one build). */
typedef struct req_head {
  int64_t timeout_ms;
  uint64_t max_values, max_bytes;
  int32_t max_depth;
  uint32_t name_len;
  uint8_t has_needs;
} req_head;

/* A small frame comes in one read of this many bytes. */
#define FIRST_READ 4096

/* b is started with frame_start, ended with frame_end (-1 when b failed or
   is too long), and goes in one write. */
static inline void frame_start(sb_buf *b) {
  uint32_t len = 0;
  sb_add(b, (const char *)&len, sizeof len);
}

static inline int frame_end(sb_buf *b) {
  if (b->failed || b->len - sizeof(uint32_t) > UINT32_MAX) return -1;
  uint32_t len = (uint32_t)(b->len - sizeof len);
  memcpy(b->data, &len, sizeof len);
  return 0;
}

/* In the forked child, on the socket fd, with err_fd the write end of its
   stderr pipe (-1: none, stderr is /dev/null) and its pids cgroup
   (NULL: none): makes a clean process, confines
   it (tied to host, the pid of the process that forked it, taken before the
   fork), loads m's module within deadline_ns, says ready (or why not), then
   serves requests until the socket closes. Never returns. */
void sx_child_main(sx_module *m, int fd, int err_fd, const char *pids_cgroup, pid_t host, long long deadline_ns);

#endif
