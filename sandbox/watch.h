/* The deadline watch (watch.c): a handler runs with no hook, and a signal
   sent to its thread when its deadline passes, or when it is cancelled,
   sets the hook that stops it. */
#ifndef LUMA_SANDBOX_WATCH_H
#define LUMA_SANDBOX_WATCH_H

#include <signal.h>

#include "sandbox.h"

#define SX_DEFAULT_SIGNAL (SIGRTMIN + 4)

/* Arms the watch for s, whose deadline_ns is set, on the calling thread,
   which is about to run its handler: 1, or 0 when the handler must use the
   count hook (no usable signal, the thread blocks it, too many at once). */
int sx_watch_arm(sx_state *s);
/* Before the thread does anything else than run s. */
void sx_watch_disarm(sx_state *s);
/* The call running in s was cancelled: its thread is signalled now (any
   thread; nothing happens when s is not armed). */
void sx_watch_poke(sx_state *s);

/* In a forked child (isolate.c), whether or not a watch ran: no slot is
   armed, no thread runs, and the lock is free. */
void sx_watch_after_fork(void);

#endif
