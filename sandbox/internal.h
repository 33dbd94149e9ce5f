/* What the files of sandbox/ share: the module object and the state it owns. */
#ifndef LUMA_SANDBOX_INTERNAL_H
#define LUMA_SANDBOX_INTERNAL_H

#include <pthread.h>

#include "sandbox.h"

/* A module's state: its allocator's user data points here, which is how a
   hook or a C function running in the state finds its module. */
struct sx_module {
  lua_State *L;
  pthread_mutex_t lock;           /* one call at a time */
  size_t memory;                  /* bytes the state holds now */
  size_t memory_limit;            /* 0: none */
  int out_of_memory;              /* an allocation was refused during this call */
  long long deadline_ns;          /* monotonic; 0 while no call runs */
  int expired;                    /* the deadline passed during this call */
  const char *tool;               /* the tool being called, for messages */
  long long timeout_ms;
  char *path;
  char **exports;                 /* sorted */
  int nexports;
  int exports_ref;                /* registry ref of the export table */
  int signal_ref;                 /* registry ref of the signal object */
  int base;                       /* stack top before the prepared calls */
};

/* Monotonic time in nanoseconds. */
long long sx_now_ns(void);

/* A new state for m with the standard library, the handler-side `luma`
   table, print to stderr, the signal object and the deadline hook. */
int sx_state_open(sx_module *m, char *err, size_t errlen);
sx_module *sx_module_of(lua_State *L);

/* Raises TOOL_TIMEOUT in the module's state. */
int sx_raise_timeout(lua_State *L);

#endif
