/* The deadline watch: how a handler that runs with no hook is stopped.

   A count hook makes the Lua VM test a trap before every instruction, which
   halves the speed of a CPU-bound handler even when the hook never fires. So
   a handler runs with no hook. Its thread is armed here, with its state and
   deadline, and one watch thread sends that thread a signal when the
   deadline passes, or at once when the call is cancelled. The signal handler
   runs on the handler's own thread and sets a hook with a count of 1 on the
   Lua thread running there (sx_stop_now, state.c); the hook raises the stop.
   This is what lua.c does for Ctrl-C: lua_sethook may be called from a
   signal handler, and the VM rereads its trap at every jump and call.

   The signal is SIGRTMIN + 4 unless the host chooses another. It is taken
   only when nobody in the process handles it; otherwise, on a thread that
   blocks it, when more than SX_WATCH_SLOTS handlers run at once, and in
   builds under ThreadSanitizer (which holds a signal back until the thread
   calls into libc, which a Lua loop may never do), handlers get the count
   hook (sx_start_hook) as before. */
#define _GNU_SOURCE   /* pthread_sigqueue */
#include "watch.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "state.h"

#if defined(__SANITIZE_THREAD__)
#define SIGNALS_USABLE 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SIGNALS_USABLE 0
#endif
#endif
#ifndef SIGNALS_USABLE
#define SIGNALS_USABLE 1
#endif

#define SX_WATCH_SLOTS 512
/* A signal that found nothing to stop yet (it came between two Lua
   instructions that then ran in C for a while) is sent again this often. */
#define RESEND_NS 10000000LL
/* ... at most this many times (2 s): a thread that blocked the signal after
   it was armed would otherwise queue real-time signals without end. */
#define RESENDS_MAX 200

struct slot {
  sx_state *state;                /* read by the signal handler (atomic); NULL: free */
  pthread_t thread;               /* likewise */
  long long deadline_ns;          /* 0: none */
  int poked;                      /* cancelled: due now */
  int signo;                      /* the signal chosen when it was armed */
  int sent;                       /* how many times */
  long long next_send;            /* 0: not sent yet */
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  pthread_t thread;
  int started, quit;
  int configured;                 /* the signal was chosen (or the hook) */
  int signo;                      /* 0: the count hook for every handler */
  unsigned char ours[_NSIG];      /* our handler is installed for these */
  struct sigaction before[_NSIG]; /* what they had before it */
  int top;                        /* every slot in use is below top */
  long long wake_at;              /* when the watch thread wakes on its own */
  struct slot slots[SX_WATCH_SLOTS];
} w = { .lock = PTHREAD_MUTEX_INITIALIZER, .wake_at = LLONG_MAX };

static void on_signal(int sig, siginfo_t *si, void *ctx) {
  (void)sig; (void)ctx;
  int saved = errno;
  if (si && si->si_code == SI_QUEUE) {
    int i = si->si_value.sival_int;
    if (i >= 0 && i < SX_WATCH_SLOTS) {
      /* the slot's owner is the thread this runs on, or the signal is stale:
         only the owner frees a slot, and it is interrupted here */
      sx_state *s = __atomic_load_n(&w.slots[i].state, __ATOMIC_ACQUIRE);
      if (s && pthread_equal(__atomic_load_n(&w.slots[i].thread, __ATOMIC_ACQUIRE), pthread_self()))
        sx_stop_now(s);
    }
  }
  errno = saved;
}

static void send_to(int i, long long now) {
  struct slot *sl = &w.slots[i];
  sl->next_send = now + RESEND_NS;
  if (sl->sent >= RESENDS_MAX) return;
  sl->sent++;
  union sigval v;
  v.sival_int = i;
  pthread_sigqueue(sl->thread, sl->signo, v);
}

static long long deadline_of(const struct slot *sl) {
  if (sl->poked) return 0;
  return sl->deadline_ns ? sl->deadline_ns : LLONG_MAX;
}

static void *watch_main(void *arg) {
  (void)arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  pthread_mutex_lock(&w.lock);
  while (!w.quit) {
    long long now = sx_now_ns(), next = LLONG_MAX;
    for (int i = 0; i < w.top; i++) {
      struct slot *sl = &w.slots[i];
      if (!sl->state) continue;
      long long due = deadline_of(sl);
      if (due <= now) {
        if (now >= sl->next_send) send_to(i, now);
        due = sl->next_send;
      }
      if (due < next) next = due;
    }
    w.wake_at = next;
    if (next == LLONG_MAX) {
      pthread_cond_wait(&w.wake, &w.lock);
    } else {
      struct timespec ts = { (time_t)(next / 1000000000LL), (long)(next % 1000000000LL) };
      pthread_cond_timedwait(&w.wake, &w.lock, &ts);
    }
  }
  pthread_mutex_unlock(&w.lock);
  return NULL;
}

/* A forked child has no watch thread and none of the parent's handlers. */
static void after_fork_child(void) {
  pthread_mutex_init(&w.lock, NULL);
  w.started = w.quit = 0;
  w.top = 0;
  w.wake_at = LLONG_MAX;
  memset(w.slots, 0, sizeof w.slots);
}

void sx_watch_after_fork(void) {
  after_fork_child();
}

static int start_thread(void) {
  static int at_fork;
  if (!at_fork) {
    pthread_atfork(NULL, NULL, after_fork_child);
    at_fork = 1;
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&w.wake, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&w.thread, NULL, watch_main, NULL) != 0) return -1;
  w.started = 1;
  return 0;
}

/* The watch thread runs code of this library: it is stopped before the
   library is unloaded (a Lua state closing unloads its C modules) or the
   process exits, and our handler goes with it. */
__attribute__((destructor)) static void stop_watch(void) {
  pthread_mutex_lock(&w.lock);
  int started = w.started;
  w.quit = 1;
  if (started) pthread_cond_signal(&w.wake);
  pthread_mutex_unlock(&w.lock);
  if (started) pthread_join(w.thread, NULL);
  /* what the signal did before; a late one of ours is then ignored, as
     the default of a real-time signal would end the process */
  for (int signo = 1; signo < _NSIG; signo++) {
    if (!w.ours[signo]) continue;
    struct sigaction sa = w.before[signo];
    if (!(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL) sa.sa_handler = SIG_IGN;
    sigaction(signo, &sa, NULL);
  }
}

/* Under the lock. */
static int use_signal(int signo) {
  w.configured = 1;
  w.signo = 0;
  if (signo <= 0) return 0;
  /* a real-time signal: no other has a meaning of its own to lose */
  if (!SIGNALS_USABLE || signo < SIGRTMIN || signo > SIGRTMAX) return -1;
  if (!w.ours[signo]) {
    struct sigaction old, sa;
    if (sigaction(signo, NULL, &old) != 0) return -1;
    int ours = (old.sa_flags & SA_SIGINFO) && old.sa_sigaction == on_signal;
    int unowned = !(old.sa_flags & SA_SIGINFO) && (old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN);
    if (!ours && !unowned) return -1;   /* the host handles it */
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(signo, &sa, NULL) != 0) return -1;
    w.before[signo] = old;
    w.ours[signo] = 1;
  }
  w.signo = signo;
  return 0;
}

int sx_set_deadline_signal(int signo) {
  pthread_mutex_lock(&w.lock);
  int r = use_signal(signo);
  pthread_mutex_unlock(&w.lock);
  return r;
}

int sx_deadline_signal(void) {
  pthread_mutex_lock(&w.lock);
  if (!w.configured) use_signal(SX_DEFAULT_SIGNAL);
  int signo = w.signo;
  pthread_mutex_unlock(&w.lock);
  return signo;
}

/* A worker of the runtime lets the signal in use through, even when the
   host's thread that made it blocked every signal. (No thread-local
   variable here: LeakSanitizer misreads those of an unloaded library.) */
void sx_own_thread(void) {
  int signo = sx_deadline_signal();
  if (signo) {
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signo);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
  }
}

/* Whether the calling thread lets the signal through now: a host thread
   that blocks it gets the count hook. */
static int thread_takes(int signo) {
  sigset_t cur;
  return pthread_sigmask(SIG_SETMASK, NULL, &cur) == 0 && !sigismember(&cur, signo);
}

int sx_watch_arm(sx_state *s) {
  pthread_mutex_lock(&w.lock);
  if (!w.configured) use_signal(SX_DEFAULT_SIGNAL);
  if (!w.signo || w.quit || !thread_takes(w.signo) || (!w.started && start_thread() != 0)) {
    pthread_mutex_unlock(&w.lock);
    return 0;
  }
  int i = 0;
  while (i < w.top && w.slots[i].state) i++;
  if (i == SX_WATCH_SLOTS) {
    pthread_mutex_unlock(&w.lock);
    return 0;
  }
  if (i == w.top) w.top++;
  struct slot *sl = &w.slots[i];
  __atomic_store_n(&sl->thread, pthread_self(), __ATOMIC_RELEASE);
  sl->deadline_ns = s->deadline_ns;
  sl->poked = sx_cancelled(s);
  sl->signo = w.signo;
  sl->sent = 0;
  sl->next_send = 0;
  __atomic_store_n(&sl->state, s, __ATOMIC_RELEASE);
  s->watch_slot = i;
  if (deadline_of(sl) < w.wake_at) pthread_cond_signal(&w.wake);
  pthread_mutex_unlock(&w.lock);
  return 1;
}

void sx_watch_disarm(sx_state *s) {
  pthread_mutex_lock(&w.lock);
  int i = s->watch_slot;
  if (i >= 0) {
    __atomic_store_n(&w.slots[i].state, NULL, __ATOMIC_RELEASE);
    s->watch_slot = -1;
    while (w.top > 0 && !w.slots[w.top - 1].state) w.top--;
  }
  pthread_mutex_unlock(&w.lock);
}

void sx_watch_poke(sx_state *s) {
  pthread_mutex_lock(&w.lock);
  int i = s->watch_slot;
  if (i >= 0 && w.slots[i].state == s) {
    struct slot *sl = &w.slots[i];
    sl->poked = 1;
    send_to(i, sx_now_ns());
    pthread_cond_signal(&w.wake);
  }
  pthread_mutex_unlock(&w.lock);
}
