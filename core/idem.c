/*
 * The idempotency stores (idem.h): the store handle and its dispatch to a
 * back end's ops (idemint.h), what the back ends share, the records' table
 * with the decisions of a begin and a commit (the memory and file stores keep
 * their records in one), and the memory store. The other back ends are
 * idem_file.c, idem_sqlite.c and idem_redis.c.
 */
#define _DEFAULT_SOURCE

#include "idemint.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "crypto.h"
#include "json.h"
#include "satadd.h"
#include "strbuf.h"
#include "utf8.h"

void id_seterr(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  if (!err || !errlen) return;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

#define seterr id_seterr

/* ---------------------------------------------------------- sealing */

/* "tool NUL key NUL hash": what a sealed result is bound to */
static char *aad_of(const char *tool, const char *key, size_t keylen, const char *hash, size_t *len) {
  size_t tl = strlen(tool);
  char *a = malloc(tl + keylen + 66);
  if (!a) return NULL;
  memcpy(a, tool, tl + 1);
  if (keylen) memcpy(a + tl + 1, key, keylen);
  a[tl + 1 + keylen] = '\0';
  memcpy(a + tl + 2 + keylen, hash, 64);
  *len = tl + 2 + keylen + 64;
  return a;
}

static unsigned char *seal_raw(const unsigned char key[32], const char *aad, size_t aadlen, const char *text,
                               size_t len, size_t *outlen) {
  unsigned char *out = malloc(ID_SEAL_OVERHEAD + len + 1);
  if (!out) return NULL;
  if (cr_random(out, 12) != 0 || cr_aes256gcm_encrypt(key, out, aad, aadlen, text, len, out + 28, out + 12) != 0) {
    free(out);
    return NULL;
  }
  *outlen = ID_SEAL_OVERHEAD + len;
  return out;
}

static char *unseal_raw(const unsigned char key[32], const char *aad, size_t aadlen, const unsigned char *blob,
                        size_t len) {
  if (len < ID_SEAL_OVERHEAD) return NULL;
  char *plain = malloc(len - ID_SEAL_OVERHEAD + 1);
  if (!plain) return NULL;
  if (cr_aes256gcm_decrypt(key, blob, aad, aadlen, blob + 28, len - ID_SEAL_OVERHEAD, blob + 12, plain) != 0) {
    free(plain);
    return NULL;
  }
  plain[len - ID_SEAL_OVERHEAD] = '\0';
  return plain;
}

unsigned char *id_seal(const unsigned char key[32], const char *tool, const char *k, size_t klen, const char *hash,
                       const char *text, size_t len, size_t *outlen) {
  size_t alen;
  char *aad = aad_of(tool, k, klen, hash, &alen);
  unsigned char *out = aad ? seal_raw(key, aad, alen, text, len, outlen) : NULL;
  free(aad);
  return out;
}

char *id_unseal(const unsigned char key[32], const char *tool, const char *k, size_t klen, const char *hash,
                const unsigned char *blob, size_t len) {
  size_t alen;
  char *aad = aad_of(tool, k, klen, hash, &alen);
  char *text = aad ? unseal_raw(key, aad, alen, blob, len) : NULL;
  free(aad);
  return text;
}

static const char CHECK[] = "luma idempotency key check";   /* 27 bytes with its NUL */

int id_check_make(const unsigned char key[32], unsigned char out[ID_CHECK_LEN]) {
  size_t len;
  unsigned char *sealed = seal_raw(key, NULL, 0, CHECK, sizeof CHECK, &len);
  if (!sealed) return -1;
  memcpy(out, sealed, ID_CHECK_LEN);
  free(sealed);
  return 0;
}

int id_check_ok(const unsigned char key[32], const void *check, size_t len) {
  if (len != ID_CHECK_LEN) return 0;
  char *plain = unseal_raw(key, NULL, 0, check, len);
  int good = plain && memcmp(plain, CHECK, sizeof CHECK) == 0;
  free(plain);
  return good;
}

int id_new_token(char token[17]) {
  unsigned char bytes[8];
  if (cr_random(bytes, sizeof bytes) != 0) return -1;
  for (int i = 0; i < 8; i++) snprintf(token + 2 * i, 3, "%02x", bytes[i]);
  return 0;
}


void id_rec_free(id_rec *r) {
  if (!r) return;
  free(r->k);
  free(r->result);
  free(r);
}

id_rec *id_rec_new(const char *k, size_t klen, const char *hash) {
  id_rec *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->k = malloc(klen ? klen : 1);
  if (!r->k) { free(r); return NULL; }
  memcpy(r->k, k, klen);
  r->klen = klen;
  memcpy(r->hash, hash, 64);
  return r;
}

static size_t tb_hash(const char *k, size_t len) {
  size_t h = 2166136261u;
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)k[i]) * 16777619u;
  return h;
}

/* The link that points at the record with key k, or at the end of its chain. */
static id_rec **tb_link(id_table *t, const char *k, size_t len) {
  id_rec **p = &t->slots[tb_hash(k, len) & (t->cap - 1)];
  while (*p && !((*p)->klen == len && memcmp((*p)->k, k, len) == 0)) p = &(*p)->next;
  return p;
}

id_rec *id_tb_find(id_table *t, const char *k, size_t len) {
  return t->cap ? *tb_link(t, k, len) : NULL;
}

static int tb_grow(id_table *t) {
  size_t cap = t->cap ? t->cap * 2 : 16;
  id_rec **slots = calloc(cap, sizeof *slots);
  if (!slots) return 0;
  for (size_t i = 0; i < t->cap; i++) {
    for (id_rec *r = t->slots[i], *next; r; r = next) {
      next = r->next;
      size_t j = tb_hash(r->k, r->klen) & (cap - 1);
      r->next = slots[j];
      slots[j] = r;
    }
  }
  free(t->slots);
  t->slots = slots;
  t->cap = cap;
  return 1;
}

/* Adds r, whose key must not be present; returns 0 when memory runs out. */
int id_tb_add(id_table *t, id_rec *r) {
  if (t->n >= t->cap && !tb_grow(t)) return 0;
  id_rec **p = tb_link(t, r->k, r->klen);
  r->next = NULL;
  *p = r;
  t->n++;
  return 1;
}

void id_tb_drop(id_table *t, id_rec *r) {
  id_rec **p = tb_link(t, r->k, r->klen);
  *p = r->next;
  id_rec_free(r);
  t->n--;
}

void id_tb_free(id_table *t) {
  for (size_t i = 0; i < t->cap; i++) {
    for (id_rec *r = t->slots[i], *next; r; r = next) {
      next = r->next;
      id_rec_free(r);
    }
  }
  free(t->slots);
  t->slots = NULL;
  t->cap = t->n = 0;
}

int id_hex_ok(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

int id_check_args(const char *tool, const char *key, size_t keylen, const char *hash, char *err, size_t errlen) {
  if (!tool || !*tool || !u8_valid(tool, strlen(tool))) {
    seterr(err, errlen, "idempotency: the tool name must be non-empty UTF-8");
    return -1;
  }
  if (!key && keylen) {
    seterr(err, errlen, "idempotency: tool '%s': no key", tool);
    return -1;
  }
  if (!hash || strlen(hash) != 64 || !id_hex_ok(hash, 64)) {
    seterr(err, errlen, "idempotency: tool '%s': input_hash must be 64 lowercase hex digits", tool);
    return -1;
  }
  return 0;
}

/* "tool NUL key", malloc'd. */
char *id_rec_key(const char *tool, const char *key, size_t keylen, size_t *len) {
  size_t tl = strlen(tool);
  char *k = malloc(tl + 1 + keylen);
  if (!k) return NULL;
  memcpy(k, tool, tl + 1);
  if (keylen) memcpy(k + tl + 1, key, keylen);
  *len = tl + 1 + keylen;
  return k;
}

/* State (field 3) and start time (field 22) from /proc/<pid>/stat. The
   command name in field 2 may hold spaces and ')', so count from the last ')'. */
static int proc_stat(long long pid, long long *start, char *state) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%lld/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) { errno = ENOENT; return -1; }
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') { errno = EINVAL; return -1; }
  p += 2;
  *state = *p;
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) { errno = EINVAL; return -1; }
    p++;
  }
  *start = strtoll(p, NULL, 10);
  return 0;
}

long long id_self_pidns(void) {
  char link[64];
  ssize_t n = readlink("/proc/self/ns/pid", link, sizeof link - 1);
  if (n <= 0) return 0;
  link[n] = '\0';
  const char *p = strchr(link, '[');
  return p ? strtoll(p + 1, NULL, 10) : 0;
}

long long id_self_start(void) {
  long long start = 0;
  char state;
  if (proc_stat((long long)getpid(), &start, &state) != 0) return 0;
  return start;
}

/* Whether the process that made a claim still runs: a pid that is gone, a
   zombie, or a pid reused by a process that started at another time cannot
   finish the call. Without /proc (s->start is 0), kill() alone decides. */
int id_pid_alive(long long pid, long long want_start) {
  if (pid <= 0 || pid > INT_MAX) return 0;
  if (kill((pid_t)pid, 0) == -1 && errno == ESRCH) return 0;
  long long start;
  char state;
  if (proc_stat(pid, &start, &state) != 0) return errno != ENOENT;
  if (state == 'Z' || state == 'X') return 0;
  return want_start == 0 || start == want_start;
}

int id_owner_alive(const id_owner *me, const id_rec *r) {
  if (!me->start) return r->pid > 0 && r->pid <= INT_MAX && !(kill((pid_t)r->pid, 0) == -1 && errno == ESRCH);
  return id_pid_alive(r->pid, r->start);
}

static int owned_here(const id_owner *me, const id_rec *r) {
  return !me->shared || (r->pid == (long long)me->pid && r->start == me->start && strcmp(r->token, me->token) == 0);
}

/* A record that can no longer answer is absent: expired, or claimed by a
   process that died. */
static id_rec *live_find(id_table *t, const id_owner *me, const char *k, size_t klen, long long now) {
  id_rec *r = id_tb_find(t, k, klen);
  if (r && !r->pending && r->expires_at <= now) { id_tb_drop(t, r); r = NULL; }
  if (r && r->pending && me->shared && !id_owner_alive(me, r)) { id_tb_drop(t, r); r = NULL; }
  return r;
}

id_status id_tb_begin(id_table *t, const id_owner *me, const char *k, size_t klen, const char *hash, long long now,
                      char **result, char *err, size_t errlen) {
  id_rec *r = live_find(t, me, k, klen, now);
  if (r) {
    if (memcmp(r->hash, hash, 64) != 0) return ID_CONFLICT;
    if (r->pending) return ID_WAIT;
    char *copy = malloc(r->result_len + 1);
    if (!copy) goto nomem;
    memcpy(copy, r->result, r->result_len + 1);
    *result = copy;
    return ID_REPLAY;
  }
  r = id_rec_new(k, klen, hash);
  if (!r) goto nomem;
  r->pending = 1;
  r->at = now;
  r->pid = (long long)me->pid;
  r->start = me->start;
  memcpy(r->token, me->token, sizeof r->token);
  if (!id_tb_add(t, r)) { id_rec_free(r); goto nomem; }
  return ID_RUN;
nomem:
  seterr(err, errlen, "idempotency: out of memory");
  return ID_ERROR;
}

int id_tb_commit(id_table *t, const id_owner *me, const char *tool, const char *k, size_t klen, const char *hash,
                 const char *text, size_t len, long long now, long long ttl, char *err, size_t errlen) {
  id_rec *r = live_find(t, me, k, klen, now);
  if (r && memcmp(r->hash, hash, 64) != 0) {
    seterr(err, errlen, "idempotency: tool '%s': the key is %s with another input", tool,
           r->pending ? "claimed" : "stored");
    return -1;
  }
  if (r && !r->pending) return 0;
  char *copy = malloc(len + 1);
  if (copy && !r) {
    r = id_rec_new(k, klen, hash);
    if (!r || !id_tb_add(t, r)) {
      id_rec_free(r);
      r = NULL;
    }
  }
  if (!copy || !r) {
    free(copy);
    seterr(err, errlen, "idempotency: out of memory");
    return -1;
  }
  memcpy(copy, text, len);
  copy[len] = '\0';
  r->pending = 0;
  r->at = now;
  r->expires_at = sat_add(now, ttl);
  r->result = copy;
  r->result_len = len;
  r->pid = r->start = 0;
  r->token[0] = '\0';
  return 1;
}

int id_tb_release(id_table *t, const id_owner *me, const char *k, size_t klen) {
  id_rec *r = id_tb_find(t, k, klen);
  if (!r || !r->pending || !owned_here(me, r)) return 0;
  id_tb_drop(t, r);
  return 1;
}

size_t id_tb_release_all(id_table *t, const id_owner *me) {
  size_t dropped = 0;
  for (size_t i = 0; i < t->cap; i++) {
    for (id_rec *r = t->slots[i], *next; r; r = next) {
      next = r->next;
      if (r->pending && owned_here(me, r)) {
        id_tb_drop(t, r);
        dropped++;
      }
    }
  }
  return dropped;
}

/* ------------------------------------------------ the memory store */

typedef struct mem_store {
  pthread_mutex_t lock;       /* guards t */
  id_table t;
} mem_store;

static const id_owner nobody;

static id_status mem_begin(void *impl, const char *tool, const char *key, size_t keylen, const char *hash,
                           long long now, char **result, long long *lease_left, char *err, size_t errlen) {
  (void)lease_left;
  mem_store *m = impl;
  size_t klen;
  char *k = id_rec_key(tool, key, keylen, &klen);
  if (!k) {
    seterr(err, errlen, "idempotency: out of memory");
    return ID_ERROR;
  }
  pthread_mutex_lock(&m->lock);
  id_status st = id_tb_begin(&m->t, &nobody, k, klen, hash, now, result, err, errlen);
  pthread_mutex_unlock(&m->lock);
  free(k);
  return st;
}

static int mem_commit(void *impl, const char *tool, const char *key, size_t keylen, const char *hash,
                      const char *text, size_t len, long long now, long long ttl, char *err, size_t errlen) {
  mem_store *m = impl;
  size_t klen;
  char *k = id_rec_key(tool, key, keylen, &klen);
  if (!k) {
    seterr(err, errlen, "idempotency: out of memory");
    return -1;
  }
  pthread_mutex_lock(&m->lock);
  int rc = id_tb_commit(&m->t, &nobody, tool, k, klen, hash, text, len, now, ttl, err, errlen);
  pthread_mutex_unlock(&m->lock);
  free(k);
  return rc < 0 ? -1 : 0;
}

static void mem_abort(void *impl, const char *tool, const char *key, size_t keylen) {
  mem_store *m = impl;
  size_t klen;
  char *k = id_rec_key(tool, key, keylen, &klen);
  if (!k) return;
  pthread_mutex_lock(&m->lock);
  id_tb_release(&m->t, &nobody, k, klen);
  pthread_mutex_unlock(&m->lock);
  free(k);
}

static void mem_close(void *impl) {
  mem_store *m = impl;
  id_tb_free(&m->t);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

static const id_ops mem_ops = { mem_begin, mem_commit, mem_abort, mem_close, NULL, NULL, NULL };

id_store *id_open_memory(void) {
  mem_store *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  if (pthread_mutex_init(&m->lock, NULL) != 0) {
    free(m);
    return NULL;
  }
  return id_wrap(&mem_ops, m);
}

/* ------------------------------------------------------ the handle */

/* A claim kept while its handler runs (id_keep). */
typedef struct id_kept {
  char *tool, *key;
  size_t keylen;
  char hash[65];
  void (*on_lost)(void *arg);
  void *arg;
  long long due, last_ok;     /* monotonic ms */
  int lost;
  struct id_kept *next;
} id_kept;

/* A watcher of the claims' ends (id_watch_start). */
struct id_watch {
  void (*wake)(void *arg);
  void *arg;
  struct id_watch *next;
};

struct id_store {
  const id_ops *ops;
  void *impl;
  long long lease_ms;         /* 0: the claims have no lease */
  /* the renewals: the thread runs while kept is not empty (or until stop) */
  pthread_mutex_t klock;      /* guards kept, lost, stop, thread; held through a beat */
  pthread_cond_t kwake;
  id_kept *kept;
  id_kept *lost;              /* lost claims not yet committed or aborted */
  int running, stop;
  pthread_t thread;
  pid_t thread_pid;           /* a child of fork() has no such thread: it starts its own */
  pthread_mutex_t wlock;      /* guards watchers and watching; held while they are woken */
  id_watch *watchers;
  int watching;               /* ops->watch was started */
};

static long long mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void kept_free(id_kept *k) {
  if (!k) return;
  free(k->tool);
  free(k->key);
  free(k);
}

static int kept_is(const id_kept *k, const char *tool, const char *key, size_t keylen) {
  return k->keylen == keylen && strcmp(k->tool, tool) == 0 && (!keylen || memcmp(k->key, key, keylen) == 0);
}

/* Unlinks the kept claim on (tool, key) from list; s->klock held. */
static id_kept *kept_take(id_kept **list, const char *tool, const char *key, size_t keylen) {
  for (id_kept **p = list; *p; p = &(*p)->next) {
    if (!kept_is(*p, tool, key, keylen)) continue;
    id_kept *k = *p;
    *p = k->next;
    k->next = NULL;
    return k;
  }
  return NULL;
}

/* The renewals: each kept claim a third of the lease apart. A claim found
   lost, or not renewed for a whole lease, moves to s->lost and its owner is
   told. klock is held through a beat, so that id_commit and id_abort wait
   for on_lost to return. */
static void *renewer(void *arg) {
  id_store *s = arg;
  long long every = s->lease_ms / 3 > 0 ? s->lease_ms / 3 : 1;
  pthread_mutex_lock(&s->klock);
  while (!s->stop) {
    long long now = mono_ms(), next = now + every;
    for (id_kept **p = &s->kept; *p;) {
      id_kept *k = *p;
      if (k->due <= now) {
        char err[256] = "";
        int r = s->ops->renew(s->impl, k->tool, k->key, k->keylen, k->hash, err, sizeof err);
        now = mono_ms();
        if (r > 0) k->last_ok = now;
        if (r == 0 || (r < 0 && now - k->last_ok >= s->lease_ms)) {
          *p = k->next;
          k->next = s->lost;
          s->lost = k;
          k->lost = 1;
          k->on_lost(k->arg);
          continue;
        }
        k->due = now + every;
      }
      if (k->due < next) next = k->due;
      p = &k->next;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long long wait = next - mono_ms();
    if (wait < 1) wait = 1;
    until.tv_sec += wait / 1000;
    until.tv_nsec += (wait % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) { until.tv_sec++; until.tv_nsec -= 1000000000; }
    pthread_cond_timedwait(&s->kwake, &s->klock, &until);
  }
  pthread_mutex_unlock(&s->klock);
  return NULL;
}

id_store *id_wrap(const id_ops *ops, void *impl) {
  id_store *s = calloc(1, sizeof *s);
  if (!s || pthread_mutex_init(&s->klock, NULL) != 0) {
    free(s);
    ops->close(impl);
    return NULL;
  }
  if (pthread_cond_init(&s->kwake, NULL) != 0 || pthread_mutex_init(&s->wlock, NULL) != 0) {
    pthread_mutex_destroy(&s->klock);
    free(s);
    ops->close(impl);
    return NULL;
  }
  s->ops = ops;
  s->impl = impl;
  return s;
}

void id_set_lease(id_store *s, long long lease_ms) {
  if (s) s->lease_ms = lease_ms > 0 ? lease_ms : 0;
}

int id_keep(id_store *s, const char *tool, const char *key, size_t keylen, const char *input_hash,
            void (*on_lost)(void *arg), void *arg) {
  if (!s->ops->renew || s->lease_ms <= 0) return 0;
  if (!tool || (!key && keylen) || !input_hash || strlen(input_hash) != 64 || !on_lost) return -1;
  id_kept *k = calloc(1, sizeof *k);
  if (!k) return -1;
  k->tool = strdup(tool);
  k->key = malloc(keylen ? keylen : 1);
  if (!k->tool || !k->key) { kept_free(k); return -1; }
  if (keylen) memcpy(k->key, key, keylen);
  k->keylen = keylen;
  memcpy(k->hash, input_hash, 65);
  k->on_lost = on_lost;
  k->arg = arg;
  k->last_ok = mono_ms();
  k->due = k->last_ok + (s->lease_ms / 3 > 0 ? s->lease_ms / 3 : 1);
  pthread_mutex_lock(&s->klock);
  int rc = 0;
  if (!s->running || s->thread_pid != getpid()) {
    s->stop = 0;
    s->thread_pid = getpid();
    if (pthread_create(&s->thread, NULL, renewer, s) == 0) s->running = 1;
    else { s->running = 0; rc = -1; }
  }
  if (rc == 0) {
    k->next = s->kept;
    s->kept = k;
    pthread_cond_signal(&s->kwake);
  }
  pthread_mutex_unlock(&s->klock);
  if (rc != 0) kept_free(k);
  return rc;
}

/* Stops the renewals of (tool, key); 1 when its claim was found lost. */
static int unkeep(id_store *s, const char *tool, const char *key, size_t keylen) {
  if (!s->ops->renew) return 0;
  pthread_mutex_lock(&s->klock);
  id_kept *k = kept_take(&s->kept, tool, key, keylen);
  if (!k) k = kept_take(&s->lost, tool, key, keylen);
  pthread_mutex_unlock(&s->klock);
  int lost = k && k->lost;
  kept_free(k);
  return lost;
}

void id_close(id_store *s) {
  if (!s) return;
  if (s->running && s->thread_pid == getpid()) {
    pthread_mutex_lock(&s->klock);
    s->stop = 1;
    pthread_cond_signal(&s->kwake);
    pthread_mutex_unlock(&s->klock);
    pthread_join(s->thread, NULL);
  }
  for (id_kept *l = s->kept; l;) { id_kept *n = l->next; kept_free(l); l = n; }
  for (id_kept *l = s->lost; l;) { id_kept *n = l->next; kept_free(l); l = n; }
  /* the back end's watching thread stops with it, before the watchers go */
  s->ops->close(s->impl);
  for (id_watch *w = s->watchers; w;) { id_watch *n = w->next; free(w); w = n; }
  pthread_cond_destroy(&s->kwake);
  pthread_mutex_destroy(&s->klock);
  pthread_mutex_destroy(&s->wlock);
  free(s);
}

/* A claim ended (here, or in another process as the back end heard): every
   watcher looks again. */
static void announce(void *arg) {
  id_store *s = arg;
  pthread_mutex_lock(&s->wlock);
  for (id_watch *w = s->watchers; w; w = w->next) w->wake(w->arg);
  pthread_mutex_unlock(&s->wlock);
}

id_watch *id_watch_start(id_store *s, void (*wake)(void *arg), void *arg) {
  id_watch *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->wake = wake;
  w->arg = arg;
  pthread_mutex_lock(&s->wlock);
  w->next = s->watchers;
  s->watchers = w;
  int start = !s->watching && s->ops->watch;
  s->watching = 1;
  pthread_mutex_unlock(&s->wlock);
  /* outside wlock: the back end's thread may announce at once */
  if (start) s->ops->watch(s->impl, announce, s);
  return w;
}

void id_watch_stop(id_store *s, id_watch *w) {
  if (!w) return;
  pthread_mutex_lock(&s->wlock);
  for (id_watch **p = &s->watchers; *p; p = &(*p)->next) {
    if (*p == w) { *p = w->next; break; }
  }
  pthread_mutex_unlock(&s->wlock);
  free(w);
}

id_status id_begin(id_store *s, const char *tool, const char *key, size_t keylen, const char *input_hash,
                   long long now_ms, char **result, long long *lease_left, char *err, size_t errlen) {
  long long left = -1;
  if (lease_left) *lease_left = -1;
  if (result) *result = NULL;
  if (err && errlen) err[0] = '\0';
  if (!result) {
    seterr(err, errlen, "idempotency: id_begin needs a result pointer");
    return ID_ERROR;
  }
  if (id_check_args(tool, key, keylen, input_hash, err, errlen) != 0) return ID_ERROR;
  id_status st = s->ops->begin(s->impl, tool, key, keylen, input_hash, now_ms, result, &left, err, errlen);
  if (lease_left && st == ID_WAIT) *lease_left = left;
  return st;
}

/* The result as compact JSON text, malloc'd; NULL with err if it is not JSON. */
static char *normalize(const char *json, size_t len, size_t *outlen, char *err, size_t errlen) {
  ar_arena a;
  char perr[128];
  sb_buf b;
  ar_init(&a);
  sb_init(&b);
  const jv *v = json ? json_parse(&a, json, len, LIM_IDEM_MAX_DEPTH, perr, sizeof perr) : NULL;
  if (!v) seterr(err, errlen, "idempotency: the result is not one JSON value (%s)", json ? perr : "NULL");
  else jv_write(&b, v, 0);
  ar_free(&a);
  if (!v || b.failed) {
    if (v) seterr(err, errlen, "idempotency: out of memory");
    sb_free(&b);
    return NULL;
  }
  *outlen = b.len;
  return b.data;
}

int id_commit(id_store *s, const char *tool, const char *key, size_t keylen, const char *input_hash,
              const char *result_json, size_t result_len, long long now_ms, long long ttl_ms, char *err,
              size_t errlen) {
  size_t tlen;
  if (err && errlen) err[0] = '\0';
  if (id_check_args(tool, key, keylen, input_hash, err, errlen) != 0) return -1;
  if (ttl_ms <= 0) {
    seterr(err, errlen, "idempotency: tool '%s': ttl_ms must be greater than zero", tool);
    return -1;
  }
  if (unkeep(s, tool, key, keylen)) {
    /* the claim expired under the handler: another call may hold it now */
    seterr(err, errlen, "idempotency: tool '%s': the claim on the key was lost while the handler ran (not renewed "
                        "within %lld ms, removed, or another's now); the result is not stored", tool, s->lease_ms);
    s->ops->abort(s->impl, tool, key, keylen);
    return -1;
  }
  char *text = normalize(result_json, result_len, &tlen, err, errlen);
  if (!text) return -1;
  int rc = s->ops->commit(s->impl, tool, key, keylen, input_hash, text, tlen, now_ms, ttl_ms, err, errlen);
  free(text);
  if (rc == 0) announce(s);
  return rc;
}

void id_abort(id_store *s, const char *tool, const char *key, size_t keylen) {
  if (!tool || (!key && keylen)) return;
  unkeep(s, tool, key, keylen);
  s->ops->abort(s->impl, tool, key, keylen);
  announce(s);
}

int id_quarantined(id_store *s, char *path, size_t pathcap) {
  return s->ops->quarantined ? s->ops->quarantined(s->impl, path, pathcap) : 0;
}
