/* Spec-only (spec/35): preloaded (LD_PRELOAD) into a luma-lua whose tools
   are process-isolated, it makes a handler process send a reply that no
   honest child sends, as code that took over the child could. The child
   writes its reply with write(); the host never writes a frame with it.
   A reply whose bytes hold one of these marks, which a handler puts in its
   result, is replaced:
     LUMA-FORGE-EMPTY   a frame of 0 bytes, then the child goes on;
     LUMA-FORGE-CUT14   the reply's first 14 bytes only, then the child
                        exits with status 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

ssize_t write(int fd, const void *buf, size_t n) {
  ssize_t (*real)(int, const void *, size_t) = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  if (memmem(buf, n, "LUMA-FORGE-EMPTY", 16)) {
    uint32_t zero = 0;
    return real(fd, &zero, sizeof zero) == (ssize_t)sizeof zero ? (ssize_t)n : -1;
  }
  if (n > 14 && memmem(buf, n, "LUMA-FORGE-CUT14", 16)) {
    if (real(fd, buf, 14) == 14) _exit(0);
    return -1;
  }
  return real(fd, buf, n);
}
