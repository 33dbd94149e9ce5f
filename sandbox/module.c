/* A tool module: loading it (integrity, text only, the lookup of its
   exported handlers), composing each of its states (a bare state, the
   libraries its policy gives, its code run), and the pool of those states. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lualib.h>

#include "bounded.h"
#include "compat.h"
#include "crypto.h"
#include "isolate.h"
#include "luma_limits.h"
#include "require.h"
#include "watch.h"
#include "state.h"
#include "strict.h"
#include "transport.h"

/* A module: where it comes from, what it may use, and its states. */
struct sx_module {
  pthread_mutex_t lock;           /* guards states, nstates and busy flags */
  pthread_cond_t freed;           /* a state became free */
  char *path, *source;
  size_t source_len;
  char **dependencies;            /* NULL: no allowlist */
  int ndependencies;
  char *dependency_root, *project_root;
  sx_policy policy;
  int has_policy;
  char **exports;                 /* sorted */
  int nexports;
  sx_state **states;
  int nstates;
  int making;                     /* states being made outside the lock */
  sx_waiter *wait_head, *wait_tail;   /* calls waiting for a free state (sx_try_acquire) */
  int refs;                       /* counted references (atomic) */
  int closed;                     /* sx_close: no state is handed out (atomic) */
  int claims;                     /* open programs that attached it (sx_claim); at 0 no state
                                     is kept idle */
};

static sx_state *make_state(sx_module *m, long long deadline_ns, char *err, size_t errlen);
static void drop_state(sx_state *s);

/* "sha256-<base64>" of the bytes must equal the manifest's integrity. */
static int check_integrity(const char *path, const char *want, const char *src, size_t len, char *err, size_t errlen) {
  if (strncmp(want, "sha256-", 7) != 0) {
    snprintf(err, errlen, "the integrity of '%s' must be written sha256-<base64>", path);
    return -1;
  }
  unsigned char digest[32];
  char b64[64];
  cr_sha256(src, len, digest);
  size_t n = cr_base64_encode(digest, sizeof digest, b64, sizeof b64);
  if (n == 0 || strlen(want + 7) != n || memcmp(want + 7, b64, n) != 0) {
    snprintf(err, errlen, "integrity check failed for '%s': expected %s, got sha256-%.*s", path, want, (int)n, b64);
    return -1;
  }
  return 0;
}

/* Finds the export table (lumaTools, tools, default, or the module itself)
   under the chunk's result and checks it; leaves it on top. */
static int find_exports(sx_module *m, lua_State *L, char *err, size_t errlen) {
  if (lua_type(L, -1) != LUA_TTABLE) {
    snprintf(err, errlen, "tool module '%s' must return a table of handlers, not %s", m->path, luaL_typename(L, -1));
    return -1;
  }
  static const char *const names[] = { "lumaTools", "tools", "default" };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    lua_pushstring(L, names[i]);
    lc_rawget(L, -2);
    if (lua_type(L, -1) == LUA_TTABLE) { lua_remove(L, -2); break; }
    lua_pop(L, 1);
  }
  int t = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, t)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      lua_pop(L, 2);
      snprintf(err, errlen, "tool module '%s' exports a key that is not a string", m->path);
      return -1;
    }
    const char *key = lua_tostring(L, -2);
    if (strcmp(key, "datasources") != 0 && lua_type(L, -1) != LUA_TFUNCTION) {
      snprintf(err, errlen, "tool module '%s' exports '%s' as a %s; every value must be a function", m->path, key,
               luaL_typename(L, -1));
      lua_pop(L, 2);
      return -1;
    }
    lua_pop(L, 1);
  }
  return 0;
}

static int string_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static char *dup(const char *s) {
  if (!s) return NULL;
  char *d = malloc(strlen(s) + 1);
  if (d) strcpy(d, s);
  return d;
}

/* The module's export names, from the export table on top of the first
   state (the others have the same code, so the same names). */
static int collect_exports(sx_module *m, lua_State *L, char *err, size_t errlen) {
  int t = lua_gettop(L), n = 0;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    n++;
  }
  m->exports = calloc((size_t)n + 1, sizeof *m->exports);
  if (!m->exports) { snprintf(err, errlen, "out of memory"); return -1; }
  lua_pushnil(L);
  while (lua_next(L, t)) {
    const char *key = lua_tostring(L, -2);
    if (strcmp(key, "datasources") != 0) {
      m->exports[m->nexports] = dup(key);
      if (!m->exports[m->nexports]) { lua_pop(L, 2); snprintf(err, errlen, "out of memory"); return -1; }
      m->nexports++;
    }
    lua_pop(L, 1);
  }
  qsort(m->exports, (size_t)m->nexports, sizeof *m->exports, string_cmp);
  return 0;
}

sx_module *sx_load(const sx_manifest *man, char *err, size_t errlen) {
  size_t len;
  char *src = sx_read_source(man->path, &len, err, errlen);
  if (!src) return NULL;
  if (man->integrity && check_integrity(man->path, man->integrity, src, len, err, errlen) != 0) {
    free(src);
    return NULL;
  }
  sx_module *m = calloc(1, sizeof *m);
  if (!m) { free(src); snprintf(err, errlen, "out of memory"); return NULL; }
  pthread_mutex_init(&m->lock, NULL);
  pthread_cond_init(&m->freed, NULL);
  m->source = src;
  m->source_len = len;
  m->path = dup(man->path);
  m->dependency_root = dup(man->dependency_root);
  m->project_root = dup(man->project_root);
  if (man->policy) {
    m->policy = *man->policy;
    m->has_policy = 1;
  }
  if (m->policy.max_concurrency < 1) m->policy.max_concurrency = 1;
  int ok = m->path != NULL;
  if (ok && man->dependencies) {
    m->dependencies = calloc((size_t)man->ndependencies + 1, sizeof *m->dependencies);
    ok = m->dependencies != NULL;
    for (int i = 0; ok && i < man->ndependencies; i++) {
      m->dependencies[i] = dup(man->dependencies[i]);
      ok = m->dependencies[i] != NULL;
      m->ndependencies = i + 1;
    }
  }
  m->states = ok ? calloc((size_t)m->policy.max_concurrency, sizeof *m->states) : NULL;
  if (!m->states) {
    snprintf(err, errlen, "out of memory");
    sx_free(m);
    return NULL;
  }
  sx_state *first = make_state(m, 0, err, errlen);
  if (!first) {
    sx_free(m);
    return NULL;
  }
  m->states[m->nstates++] = first;
  /* handler processes are started ahead of time, all of them: a call
     should not wait for a fork and a module load */
  while (sx_isolated(m) && m->nstates < m->policy.max_concurrency) {
    sx_state *s = make_state(m, 0, err, errlen);
    if (!s) {
      sx_free(m);
      return NULL;
    }
    m->states[m->nstates++] = s;
  }
  m->refs = 1;
  return m;
}

void sx_retain(sx_module *m) {
  __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
}

void sx_unref(sx_module *m) {
  if (m && __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) == 0) sx_free(m);
}

int sx_closed(const sx_module *m) {
  return __atomic_load_n(&m->closed, __ATOMIC_ACQUIRE);
}

/* Under the lock: takes the idle states out of m (a busy one goes when it
   is released) into a list, which drop_all empties once the lock is let go:
   closing a state runs its __gc (up to LIM_STATE_CLOSE_TIMEOUT_MS) and ends its
   process (up to a wait for the kill), and other threads need the lock
   meanwhile. Without memory for the list they go at once, under it. */
static sx_state **take_idle(sx_module *m, int *n) {
  sx_state **gone = m->nstates ? malloc(sizeof *gone * (size_t)m->nstates) : NULL;
  *n = 0;
  for (int i = 0; i < m->nstates;) {
    if (m->states[i]->busy) { i++; continue; }
    /* one with residents leaves the list, and goes with the last of them */
    if (m->states[i]->residents) { m->states[i] = m->states[--m->nstates]; continue; }
    if (gone) gone[(*n)++] = m->states[i];
    else drop_state(m->states[i]);
    m->states[i] = m->states[--m->nstates];
  }
  return gone;
}

static void drop_all(sx_state **gone, int n) {
  for (int i = 0; i < n; i++) drop_state(gone[i]);
  free(gone);
}

/* The queues of waiters: the module's (for any state), and each state's
   (its suspended calls, to resume); the module's lock is held. */
static void queue(sx_module *m, sx_waiter *w) {
  sx_waiter **head = w->want ? &w->want->wait_head : &m->wait_head;
  sx_waiter **tail = w->want ? &w->want->wait_tail : &m->wait_tail;
  w->queued = 1;
  w->next = NULL;
  w->prev = *tail;
  if (*tail) (*tail)->next = w; else *head = w;
  *tail = w;
}

/* A waiter that was woken and found its state taken again goes first. */
static void queue_first(sx_waiter *w) {
  sx_waiter **head = &w->want->wait_head, **tail = &w->want->wait_tail;
  w->queued = 1;
  w->prev = NULL;
  w->next = *head;
  if (*head) (*head)->prev = w; else *tail = w;
  *head = w;
}

static void unqueue(sx_module *m, sx_waiter *w) {
  sx_waiter **head = w->want ? &w->want->wait_head : &m->wait_head;
  sx_waiter **tail = w->want ? &w->want->wait_tail : &m->wait_tail;
  if (w->prev) w->prev->next = w->next; else *head = w->next;
  if (w->next) w->next->prev = w->prev; else *tail = w->prev;
  w->next = w->prev = NULL;
  w->queued = 0;
}

static void wake(sx_module *m, sx_waiter *w) {
  unqueue(m, w);
  __atomic_store_n(&w->woken, 1, __ATOMIC_RELEASE);
  w->wake(w);
}

static void wake_first(sx_module *m) {
  if (m->wait_head) wake(m, m->wait_head);
}

/* A state became free, or the room to make one: one waiter looks again. */
static void state_freed(sx_module *m) {
  pthread_cond_signal(&m->freed);
  wake_first(m);
}

/* State s became free: a call suspended in it goes first, else (when s may
   serve new calls) one waiting for any state. */
static void freed_state(sx_module *m, sx_state *s, int listed) {
  if (s->wait_head) {
    pthread_cond_signal(&m->freed);
    wake(m, s->wait_head);
  } else if (listed) {
    state_freed(m);
  }
}

void sx_unwait(sx_module *m, sx_waiter *w) {
  pthread_mutex_lock(&m->lock);
  sx_state *want = w->want;
  if (w->queued) unqueue(m, w);
  if (__atomic_exchange_n(&w->woken, 0, __ATOMIC_ACQ_REL)) {
    if (want && want->wait_head) wake(m, want->wait_head);
    else wake_first(m);
  }
  w->want = NULL;
  pthread_mutex_unlock(&m->lock);
}

int sx_woken(const sx_waiter *w) {
  return __atomic_load_n(&w->woken, __ATOMIC_ACQUIRE);
}

void sx_close(sx_module *m) {
  pthread_mutex_lock(&m->lock);
  __atomic_store_n(&m->closed, 1, __ATOMIC_RELEASE);
  int n;
  sx_state **gone = take_idle(m, &n);
  pthread_cond_broadcast(&m->freed);
  while (m->wait_head) wake_first(m);
  pthread_mutex_unlock(&m->lock);
  drop_all(gone, n);
}

void sx_claim(sx_module *m) {
  pthread_mutex_lock(&m->lock);
  m->claims++;
  pthread_mutex_unlock(&m->lock);
}

void sx_unclaim(sx_module *m) {
  int n = 0;
  sx_state **gone = NULL;
  pthread_mutex_lock(&m->lock);
  if (m->claims > 0 && --m->claims == 0) gone = take_idle(m, &n);
  pthread_mutex_unlock(&m->lock);
  drop_all(gone, n);
}

sx_state *sx_try_acquire(sx_module *m, int *may_make, sx_waiter *w, char *err, size_t errlen) {
  *may_make = 0;
  pthread_mutex_lock(&m->lock);
  if (w) __atomic_store_n(&w->woken, 0, __ATOMIC_RELEASE);
  sx_state *s = NULL;
  if (sx_closed(m)) {
    snprintf(err, errlen, "the tool module was closed");
  } else {
    /* a state free while calls suspended in it wait for it is theirs */
    for (int i = 0; i < m->nstates; i++)
      if (!m->states[i]->busy && !m->states[i]->wait_head) {
        s = m->states[i];
        s->busy = 1;
        break;
      }
    if (!s && m->nstates + m->making < m->policy.max_concurrency) {
      m->making++;   /* reserved for the caller's sx_make */
      *may_make = 1;
    }
    if (!s) snprintf(err, errlen, "every state of the module was busy until the deadline");
  }
  if (w && (s || *may_make || sx_closed(m))) {
    if (w->queued) unqueue(m, w);
  } else if (w && !w->queued) {
    w->want = NULL;
    queue(m, w);
  }
  pthread_mutex_unlock(&m->lock);
  return s;
}

sx_state *sx_make(sx_module *m, long long deadline_ns, char *err, size_t errlen) {
  sx_state *s = make_state(m, deadline_ns, err, errlen);
  pthread_mutex_lock(&m->lock);
  m->making--;
  if (s && sx_closed(m)) {
    drop_state(s);
    s = NULL;
    snprintf(err, errlen, "the tool module was closed");
  }
  if (s) {
    s->busy = 1;
    m->states[m->nstates++] = s;
  } else {
    state_freed(m);
  }
  pthread_mutex_unlock(&m->lock);
  return s;
}

void sx_unmake(sx_module *m) {
  pthread_mutex_lock(&m->lock);
  m->making--;
  state_freed(m);
  pthread_mutex_unlock(&m->lock);
}

void sx_interrupt(sx_state *s, sx_run *run) {
  if (s->child) {
    __atomic_store_n(&s->cancelled, 1, __ATOMIC_RELEASE);
    sx_remote_poke(s);
    return;
  }
  /* the call's own flag: other calls of the state go on */
  __atomic_store_n(&run->cancelled, 1, __ATOMIC_RELEASE);
  if (__atomic_load_n(&s->run, __ATOMIC_ACQUIRE) == run) sx_watch_poke(s);
}

int sx_isolated(const sx_module *m) {
  return m->has_policy && m->policy.isolation == SX_ISOLATE_PROCESS;
}

const sx_policy *sx_policy_of(const sx_module *m) {
  return &m->policy;
}

const char *sx_path_of(const sx_module *m) {
  return m->path;
}

void sx_roots_of(const sx_module *m, const char **project, const char **dependencies) {
  *project = m->project_root;
  *dependencies = m->dependencies ? m->dependency_root : NULL;
}

int sx_adopt_exports(sx_module *m, char **names, int n) {
  if (m->exports) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return 0;
  }
  qsort(names, (size_t)n, sizeof *names, string_cmp);
  m->exports = names;
  m->nexports = n;
  return 0;
}

/* A state goes: its child process too, when it has one. */
static void drop_state(sx_state *s) {
  if (s->child) sx_child_end(s);
  sx_state_free(s);
}

void sx_free(sx_module *m) {
  if (!m) return;
  for (int i = 0; i < m->nstates; i++) drop_state(m->states[i]);
  free(m->states);
  for (int i = 0; i < m->nexports; i++) free(m->exports[i]);
  free(m->exports);
  for (int i = 0; i < m->ndependencies; i++) free(m->dependencies[i]);
  free(m->dependencies);
  free(m->path);
  free(m->source);
  free(m->dependency_root);
  free(m->project_root);
  pthread_cond_destroy(&m->freed);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

const char *const *sx_exports(const sx_module *m, int *n) {
  *n = m->nexports;
  return (const char *const *)m->exports;
}

void sx_stats(sx_module *m, int *states, int *busy, size_t *idle_memory) {
  pthread_mutex_lock(&m->lock);
  *states = m->nstates;
  *busy = 0;
  *idle_memory = 0;
  for (int i = 0; i < m->nstates; i++) {
    if (m->states[i]->busy) (*busy)++;
    else *idle_memory += m->states[i]->memory;
  }
  pthread_mutex_unlock(&m->lock);
}

sx_state *sx_acquire(sx_module *m, long long deadline_ns, int wait, char *err, size_t errlen) {
  pthread_mutex_lock(&m->lock);
  for (;;) {
    for (int i = 0; i < m->nstates; i++)
      if (!m->states[i]->busy) {
        m->states[i]->busy = 1;
        pthread_mutex_unlock(&m->lock);
        return m->states[i];
      }
    if (m->nstates + m->making < m->policy.max_concurrency) {
      /* made outside the lock (running the module's code takes a while);
         `making` keeps others from making one too many */
      m->making++;
      pthread_mutex_unlock(&m->lock);
      sx_state *s = make_state(m, deadline_ns, err, errlen);
      pthread_mutex_lock(&m->lock);
      m->making--;
      if (s) {
        s->busy = 1;
        m->states[m->nstates++] = s;
      } else {
        state_freed(m);   /* the room is there for another */
      }
      pthread_mutex_unlock(&m->lock);
      return s;
    }
    if (!wait) break;
    if (deadline_ns) {
      long long now = sx_now_ns();
      if (now >= deadline_ns) break;
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      long long left = deadline_ns - now, ns = ts.tv_nsec + left % 1000000000LL;
      ts.tv_sec += (time_t)(left / 1000000000LL + ns / 1000000000LL);
      ts.tv_nsec = (long)(ns % 1000000000LL);
      pthread_cond_timedwait(&m->freed, &m->lock, &ts);
    } else {
      pthread_cond_wait(&m->freed, &m->lock);
    }
  }
  pthread_mutex_unlock(&m->lock);
  snprintf(err, errlen, "every state of the module was busy until the deadline");
  return NULL;
}

/* Under the lock, by s's holder: the coroutines of the residents that were
   abandoned while s was busy go (no allocation: a registry slot freed). */
static void drop_abandoned(sx_state *s) {
  while (s->ndropped > 0) {
    luaL_unref(s->L, LUA_REGISTRYINDEX, s->dropped[--s->ndropped]);
    s->residents--;
  }
}

/* Under the lock: takes s out of the module's list; whether it was there. */
static int unlist(sx_module *m, sx_state *s) {
  for (int i = 0; i < m->nstates; i++)
    if (m->states[i] == s) {
      m->states[i] = m->states[--m->nstates];
      return 1;
    }
  return 0;
}

static int listed(const sx_module *m, const sx_state *s) {
  for (int i = 0; i < m->nstates; i++)
    if (m->states[i] == s) return 1;
  return 0;
}

/* Gives s back; `suspended`: its call waits in it as a resident. */
static void give_back(sx_state *s, int suspended) {
  sx_module *m = s->module;
  lua_settop(s->L, s->base);
  pthread_mutex_lock(&m->lock);
  drop_abandoned(s);
  if (suspended) s->residents++;
  if (s->broken || sx_cancelled(s) || sx_closed(m) || m->claims == 0) {
    /* it ran out of memory or time, or a cancel reached it (perhaps after
       its call was done: the next call must not inherit it): it is closed,
       and a new one is made when one is needed; nor is a state kept for a
       module that is closed, or that no open program uses any more (the
       call of a program closed while it ran). One with residents serves
       them until the last is done (or abandoned), and no other call. */
    if (unlist(m, s)) state_freed(m);
  }
  s->busy = 0;
  int is_listed = listed(m, s), gone = !is_listed && s->residents == 0;
  freed_state(m, s, is_listed);
  pthread_mutex_unlock(&m->lock);
  /* out of the list, it is this thread's alone: it goes without the lock */
  if (gone) drop_state(s);
}

void sx_release(sx_state *s) {
  give_back(s, 0);
}

void sx_suspend(sx_state *s) {
  give_back(s, 1);
}

sx_state *sx_try_acquire_state(sx_state *s, sx_waiter *w) {
  sx_module *m = s->module;
  sx_state *got = NULL;
  pthread_mutex_lock(&m->lock);
  int woken = __atomic_exchange_n(&w->woken, 0, __ATOMIC_ACQ_REL);
  /* first come, first served: a call whose wait just ended queues behind
     those already waiting for the state */
  if (!s->busy && (woken || !s->wait_head || s->wait_head == w)) {
    s->busy = 1;
    s->residents--;
    got = s;
    if (w->queued) unqueue(m, w);
    w->want = NULL;
  } else if (!w->queued) {
    w->want = s;
    if (woken) queue_first(w); else queue(m, w);
    /* free, with others before it: the first of them looks (again) */
    if (!s->busy && s->wait_head != w) wake(m, s->wait_head);
  }
  pthread_mutex_unlock(&m->lock);
  if (got) s->base = lua_gettop(s->L);
  return got;
}

void sx_abandon(sx_state *s, sx_run *run) {
  sx_module *m = s->module;
  if (run->transfer) {
    /* its request ends now, and its end's callback has run before the call
       may go (the transfer itself is its coroutine's, freed with it) */
    tp_cancel(run->transfer);
    tp_wait(run->transfer, 0, NULL);
    run->transfer = NULL;
  }
  pthread_mutex_lock(&m->lock);
  if (!s->busy) {
    /* no thread uses it: held for the moment, under the lock */
    s->busy = 1;
    pthread_mutex_unlock(&m->lock);
    s->base = lua_gettop(s->L);
    sx_drop_call(s, run);
    pthread_mutex_lock(&m->lock);
    s->residents--;
    pthread_mutex_unlock(&m->lock);
    run->waiting = 0;
    give_back(s, 0);
    return;
  }
  /* its holder lets the coroutine go when it gives s back */
  if (s->ndropped == s->capdropped) {
    int cap = s->capdropped ? 2 * s->capdropped : 8;
    int *grown = realloc(s->dropped, sizeof *grown * (size_t)cap);
    if (grown) {
      s->dropped = grown;
      s->capdropped = cap;
    }
  }
  /* without memory for the note, the coroutine stays until the state goes */
  if (s->ndropped < s->capdropped) s->dropped[s->ndropped++] = run->co_ref;
  else s->residents--;
  run->co = NULL;
  run->co_ref = LUA_NOREF;
  run->waiting = 0;
  pthread_mutex_unlock(&m->lock);
}

static int lock_globals(lua_State *L) {
  sx_lock_globals(L);
  return 0;
}

static int strict_of(const sx_module *m) {
  return m->has_policy && m->policy.strict;
}

static int open_require(lua_State *L) {
  const sx_module *m = lua_touserdata(L, 1);
  sx_require rules = { (const char *const *)m->dependencies, m->ndependencies,
                       m->dependencies ? m->dependency_root : m->project_root };
  sx_open_require(L, &rules);
  return 0;
}

/* Runs the module's code in a new state and leaves its export table in the
   registry; the first state also records the export names. */
static int run_module(sx_module *m, sx_state *s, long long deadline_ns, char *err, size_t errlen) {
  lua_State *L = s->L;
  if (m->dependencies || strict_of(m)) {
    lua_pushcfunction(L, open_require);
    lua_pushlightuserdata(L, m);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
      snprintf(err, errlen, "tool module '%s': %s", m->path, lua_tostring(L, -1));
      return -1;
    }
  }
  lua_pushfstring(L, "@%s", m->path);
  /* at most LIM_MODULE_LOAD_TIMEOUT_MS, and never past the deadline of the call
     that needs the state; the parse counts too */
  long long limit = sx_now_ns() + (long long)LIM_MODULE_LOAD_TIMEOUT_MS * 1000000LL;
  if (deadline_ns && deadline_ns < limit) limit = deadline_ns;
  s->tool = "(module load)";
  s->timeout_ms = (limit - sx_now_ns()) / 1000000LL;
  s->deadline_ns = limit;
  /* text only: a precompiled (binary) chunk is never loaded */
  int status = sx_load_text(L, m->source, m->source_len, lua_tostring(L, -1));
  if (status == LUA_OK) status = lua_pcall(L, 0, 1, 0);
  s->deadline_ns = 0;
  if (status != LUA_OK) {
    const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "an error that is not a string";
    if (s->expired) msg = "its top-level code ran out of time";
    if (s->out_of_memory || status == LUA_ERRMEM) msg = "its top-level code ran out of memory";
    snprintf(err, errlen, "cannot load tool module '%s': %s", m->path, msg);
    return -1;
  }
  if (find_exports(m, L, err, errlen) != 0) return -1;
  if (!m->exports && collect_exports(m, L, err, errlen) != 0) return -1;
  s->exports_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_settop(L, 0);
  if (strict_of(m)) {
    lua_pushcfunction(L, lock_globals);
    if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
      snprintf(err, errlen, "cannot load tool module '%s': out of memory", m->path);
      return -1;
    }
  }
  lua_gc(L, LUA_GCCOLLECT, 0);
  return 0;
}

static int c_libraries_forbidden;

void sx_forbid_c_libraries(void) {
  __atomic_store_n(&c_libraries_forbidden, 1, __ATOMIC_RELEASE);
}

static int refuse_loadlib(lua_State *L) {
  return luaL_error(L, "C libraries cannot be loaded here: luma's Lua is private to libluma (%s)",
                    luaL_optstring(L, 1, "?"));
}

/* package without its C searchers and loadlib: preload and Lua files only */
static void no_c_libraries(lua_State *L) {
  lua_getglobal(L, "package");
  lua_pushliteral(L, "");
  lua_setfield(L, -2, "cpath");
  lua_pushcfunction(L, refuse_loadlib);
  lua_setfield(L, -2, "loadlib");
  lua_getfield(L, -1, "searchers");
  lua_pushnil(L);
  lua_rawseti(L, -2, 4);   /* the all-in-one C searcher */
  lua_pushnil(L);
  lua_rawseti(L, -2, 3);   /* the C searcher */
  lua_pop(L, 2);
}

/* The libraries a state of m gets: the strict ones or the full ones, the
   bounded versions, print, the stop wrappers, the signal. */
static int open_libs(lua_State *L) {
  const sx_module *m = lua_touserdata(L, 1);
  if (strict_of(m)) {
    sx_strict conf = { &m->policy, m->project_root };
    sx_open_strict(L, &conf);
  } else {
    luaL_openlibs(L);
    if (__atomic_load_n(&c_libraries_forbidden, __ATOMIC_ACQUIRE)) no_c_libraries(L);
    sx_open_luma(L);
  }
  sx_open_bounded(L);
  sx_open_print(L);
  sx_open_stop(L);
  if (strict_of(m)) sx_freeze_strict(L);
  sx_open_signal(L);
  return 0;
}

/* A new state of m, with the module's code loaded and its exports checked
   (the first time) or found, within deadline_ns (0: the load budget only):
   in a child process of its own when the policy isolates the module. */
static sx_state *make_state(sx_module *m, long long deadline_ns, char *err, size_t errlen) {
  if (sx_isolated(m)) return sx_spawn(m, deadline_ns, err, errlen);
  return sx_compose(m, deadline_ns, err, errlen);
}

sx_state *sx_compose(sx_module *m, long long deadline_ns, char *err, size_t errlen) {
  sx_state *s = sx_state_new(m->has_policy ? m->policy.memory_limit : 0, err, errlen);
  if (!s) return NULL;
  s->module = m;
  lua_pushcfunction(s->L, open_libs);
  lua_pushlightuserdata(s->L, m);
  if (lua_pcall(s->L, 1, 0, 0) != LUA_OK) {
    snprintf(err, errlen, "cannot open a Lua state: %s",
             lua_type(s->L, -1) == LUA_TSTRING ? lua_tostring(s->L, -1) : "out of memory");
    sx_state_free(s);
    return NULL;
  }
  sx_start_hook(s, s->L);
  if (run_module(m, s, deadline_ns, err, errlen) != 0) {
    sx_state_free(s);
    return NULL;
  }
  return s;
}
