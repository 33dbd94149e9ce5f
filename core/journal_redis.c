/* The Redis journal (journal_redis.h): a durable ask's records and runs in
   Redis, shared by machines. The connection is redis.h's. */
#include "journal_redis.h"
#include "journalint.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "redis.h"

#define JR_REDIS_VERSION 1      /* the key layout (journal:meta's version) */
#define JR_REDIS_TRIES 64       /* appends that found another seq before theirs */
#define JR_REDIS_PAGE 128       /* records read per LRANGE */

/* What the scripts share: the server's time in ms, and a run's row. A
   script writes after TIME, so it is replicated by its effects. */
#define PRELUDE                                                                          \
  "if redis.replicate_commands then redis.replicate_commands() end\n"                  \
  "local function now() local t = redis.call('TIME') return t[1] * 1e3 + math.floor(t[2] / 1e3) end\n" \
  "local function row(k, r, t) local f = {'state', 'step', 'owner', 'lease_until', 'created', 'updated'} " \
  "local x = redis.call('HMGET', k, unpack(f)) for i = 1, #f do x[i] = x[i] or false end " \
  "x[#f + 1] = redis.call('LLEN', r) x[#f + 2] = t return x end\n"

/* KEYS: run, records, runs; ARGV: how ("owner": owner's append, "none": no
   owner's, "decide": a decision), owner, seq (the first record's), the
   run's step ("": as it was), and the records (one or more, all pushed in
   this one step) -> {"OK", the last's seq} |
   {"SEQ", the next seq} | {"LOST", has, holder} | {"STATE", state} */
static const char APPEND[] = PRELUDE
  "local has = redis.call('EXISTS', KEYS[1]) == 1\n"
  "local holder = has and redis.call('HGET', KEYS[1], 'owner') or ''\n"
  "if ARGV[1] == 'decide' then\n"
  "  local state = has and redis.call('HGET', KEYS[1], 'state') or false\n"
  "  if state ~= 'awaiting_approval' then return {'STATE', state} end\n"
  "elseif (has and (ARGV[1] ~= 'owner' or holder ~= ARGV[2])) or (not has and ARGV[1] == 'owner') then\n"
  "  return {'LOST', has and 1 or 0, holder}\n"
  "end\n"
  "local n = redis.call('LLEN', KEYS[2])\n"
  "if n + 1 ~= tonumber(ARGV[3]) then return {'SEQ', n + 1} end\n"
  "local m = n\n"
  "for i = 5, #ARGV, 1000 do\n"   /* unpack has a bound (about 8,000 values): in slices, still one step */
  "  m = redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))\n"
  "end\n"
  "if has then\n"
  "  local t = now()\n"
  "  redis.call('HSET', KEYS[1], 'updated', t)\n"
  "  local step = ARGV[4]\n"
  "  if step ~= '' then redis.call('HSET', KEYS[1], 'step', step) end\n"
  "  redis.call('ZADD', KEYS[3], t, redis.call('HGET', KEYS[1], 'id'))\n"
  "end\n"
  "return {'OK', m}\n";

/* KEYS: run, records; ARGV: how ("owner", "none"), owner, keep -> {"OK"} | {"LOST", has, holder} */
static const char CUT[] =
  "local has = redis.call('EXISTS', KEYS[1]) == 1\n"
  "local holder = has and redis.call('HGET', KEYS[1], 'owner') or ''\n"
  "if (has and (ARGV[1] ~= 'owner' or holder ~= ARGV[2])) or (not has and ARGV[1] == 'owner') then\n"
  "  return {'LOST', has and 1 or 0, holder}\n"
  "end\n"
  "local keep = tonumber(ARGV[3])\n"
  "if keep < 1 then redis.call('DEL', KEYS[2]) else redis.call('LTRIM', KEYS[2], 0, keep - 1) end\n"
  "return {'OK'}\n";

/* KEYS: run, records, runs; ARGV: owner, lease_ms, id -> {claimed (1, 0), row...}: a new run, or one
   that no live owner holds (journal.c's jr_claimable, said again here to be one step) */
static const char CLAIM[] = PRELUDE
  "local t = now()\n"
  "local x = redis.call('HMGET', KEYS[1], 'state', 'owner', 'lease_until')\n"
  "local lease = t + tonumber(ARGV[2])\n"
  "local won = 0\n"
  "if not x[1] then\n"
  "  redis.call('HSET', KEYS[1], 'id', ARGV[3], 'state', 'running', 'step', '', 'owner', ARGV[1], "
  "'lease_until', lease, 'created', t, 'updated', t)\n"
  "  won = 1\n"
  "elseif x[1] == 'awaiting_approval' or (x[1] == 'running' and (x[2] == ARGV[1] or tonumber(x[3]) <= t)) then\n"
  "  redis.call('HSET', KEYS[1], 'state', 'running', 'owner', ARGV[1], 'lease_until', lease, 'updated', t)\n"
  "  won = 1\n"
  "end\n"
  "if won == 1 then redis.call('ZADD', KEYS[3], t, ARGV[3]) end\n"
  "local r = row(KEYS[1], KEYS[2], t)\n"
  "table.insert(r, 1, won)\n"
  "return r\n";

/* KEYS: run; ARGV: owner, lease_ms -> 1 renewed, 0 lost */
static const char RENEW[] = PRELUDE
  "local x = redis.call('HMGET', KEYS[1], 'state', 'owner')\n"
  "if x[1] ~= 'running' or x[2] ~= ARGV[1] then return 0 end\n"
  "redis.call('HSET', KEYS[1], 'lease_until', now() + tonumber(ARGV[2]))\n"
  "return 1\n";

/* KEYS: run, runs; ARGV: owner, state, "1" and the step or "0" -> 1 set, 0 lost; any state but running
   releases the lease */
static const char SET[] = PRELUDE
  "if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end\n"
  "local t = now()\n"
  "redis.call('HSET', KEYS[1], 'state', ARGV[2], 'updated', t)\n"
  "if ARGV[2] ~= 'running' then redis.call('HSET', KEYS[1], 'lease_until', 0) end\n"
  "if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'step', ARGV[4]) end\n"
  "redis.call('ZADD', KEYS[2], t, redis.call('HGET', KEYS[1], 'id'))\n"
  "return 1\n";

/* KEYS: run, records -> row (its state false: no such run) */
static const char GET[] = PRELUDE
  "return row(KEYS[1], KEYS[2], now())\n";

/* KEYS: run, records, runs; ARGV: before_ms, id -> 1 deleted (it ended, or was abandoned, before), 0 kept */
static const char PRUNE[] = PRELUDE
  "local x = redis.call('HMGET', KEYS[1], 'state', 'lease_until', 'updated')\n"
  "if not x[1] then redis.call('ZREM', KEYS[3], ARGV[2]) return 0 end\n"
  "local ended = x[1] == 'completed' or x[1] == 'failed' or (x[1] == 'running' and tonumber(x[2]) <= now())\n"
  "if not ended or tonumber(x[3]) >= tonumber(ARGV[1]) then return 0 end\n"
  "redis.call('DEL', KEYS[1], KEYS[2])\n"
  "redis.call('ZREM', KEYS[3], ARGV[2])\n"
  "return 1\n";

enum { SC_APPEND, SC_CUT, SC_CLAIM, SC_RENEW, SC_SET, SC_GET, SC_PRUNE, SC_N };
static const char *const SCRIPT[SC_N] = { APPEND, CUT, CLAIM, RENEW, SET, GET, PRUNE };

typedef struct rj_journal {
  pthread_mutex_t lock;       /* one connection: one caller at a time */
  rc_conn r;
  char *prefix;
  int wrong;                  /* journal:meta refuses this luma */
  /* the run this process appended to last and its next seq, so that its
     next append is one round trip (the script refuses a stale one: SEQ) */
  char last_run[64];
  long long last_next;
  rc_script script[SC_N];
} rj_journal;

/* The keys of a run: its hash, its records, the runs' sorted set. */
typedef struct keys {
  char *k[3];
  size_t len[3];
} keys;

static void keys_free(keys *ks) {
  for (int i = 0; i < 3; i++) free(ks->k[i]);
}

/* <prefix>journal:run:<id, escaped>[:records], <prefix>journal:runs: 0, or -1 (out of memory). */
static int keys_of(rj_journal *j, const char *run, keys *ks) {
  size_t pl = strlen(j->prefix), rl = strlen(run);
  memset(ks, 0, sizeof *ks);
  char *esc = malloc(3 * rl + 1);
  if (!esc) return -1;
  size_t n = 0;
  for (size_t i = 0; i < rl; i++) {
    unsigned char b = (unsigned char)run[i];
    if (b <= 0x20 || b == 0x7f || strchr("*?[]\\%:", b)) n += (size_t)snprintf(esc + n, 4, "%%%02X", b);
    else esc[n++] = (char)b;
  }
  esc[n] = '\0';
  size_t cap = pl + n + 32;
  for (int i = 0; i < 3; i++)
    if (!(ks->k[i] = malloc(cap))) { free(esc); keys_free(ks); return -1; }
  ks->len[0] = (size_t)snprintf(ks->k[0], cap, "%sjournal:run:%s", j->prefix, esc);
  ks->len[1] = (size_t)snprintf(ks->k[1], cap, "%sjournal:run:%s:records", j->prefix, esc);
  ks->len[2] = (size_t)snprintf(ks->k[2], cap, "%sjournal:runs", j->prefix);
  free(esc);
  return 0;
}

/* rc_conn's ready hook: journal:meta says a journal this luma reads
   (written by the first process). */
static int on_ready(void *arg, char *err, size_t errlen) {
  rj_journal *j = arg;
  char key[300], version[16];
  snprintf(key, sizeof key, "%sjournal:meta", j->prefix);
  snprintf(version, sizeof version, "%d", JR_REDIS_VERSION);
  redisReply *x = redisCommand(j->r.c, "HSETNX %s format %s", key, JR_NAME);
  if (rc_failed(&j->r, x, err, errlen)) return -1;
  freeReplyObject(x);
  x = redisCommand(j->r.c, "HSETNX %s version %s", key, version);
  if (rc_failed(&j->r, x, err, errlen)) return -1;
  freeReplyObject(x);
  x = redisCommand(j->r.c, "HMGET %s format version", key);
  if (rc_failed(&j->r, x, err, errlen)) return -1;
  int ok = x->type == REDIS_REPLY_ARRAY && x->elements == 2 && x->element[0]->type == REDIS_REPLY_STRING &&
           strcmp(x->element[0]->str, JR_NAME) == 0 && x->element[1]->type == REDIS_REPLY_STRING;
  int v = ok ? atoi(x->element[1]->str) : 0;
  freeReplyObject(x);
  j->wrong = 1;
  if (!ok) {
    jr_seterr(err, errlen, "Redis at %s: %s is not a luma journal's (its format is not '" JR_NAME "')", j->r.where, key);
    return -1;
  }
  if (v < 1 || v > JR_REDIS_VERSION) {
    jr_seterr(err, errlen, "Redis at %s: the journal under prefix '%s' is version %d; this luma reads version %d",
              j->r.where, j->prefix, v, JR_REDIS_VERSION);
    return -1;
  }
  j->wrong = 0;
  return 0;
}

/* Runs script which on the run's keys (nkeys of them): the reply, or NULL with err. j->lock held. */
static redisReply *script(rj_journal *j, int which, const keys *ks, int nkeys, int nargs, const char *const *args,
                       const size_t *lens, char *err, size_t errlen) {
  if (rc_connect(&j->r, err, errlen) != 0) return NULL;
  if (!j->script[which].text) j->script[which].text = SCRIPT[which];
  return rc_run(&j->r, &j->script[which], nkeys, (const char *const *)ks->k, ks->len, nargs, args, lens, err, errlen);
}

static int unexpected(rj_journal *j, redisReply *x, char *err, size_t errlen) {
  jr_seterr(err, errlen, "Redis at %s gave an unexpected answer", j->r.where);
  if (x) freeReplyObject(x);
  return -1;
}

static const char *str_at(const redisReply *x, size_t i) {
  return i < x->elements && x->element[i]->type == REDIS_REPLY_STRING ? x->element[i]->str : NULL;
}

static long long int_at(const redisReply *x, size_t i) {
  if (i >= x->elements) return 0;
  const redisReply *e = x->element[i];
  return e->type == REDIS_REPLY_INTEGER ? e->integer : e->type == REDIS_REPLY_STRING ? atoll(e->str) : 0;
}

/* A row as the scripts give it from index at: state, step, owner,
   lease_until, created, updated, records, now. 1 (*r), 0 no such run. */
static int row_of(const redisReply *x, size_t at, const char *id, jr_run *r) {
  const char *state = str_at(x, at);
  if (!state) return 0;
  jr_fill(r, id, jr_state_of(state), str_at(x, at + 1), str_at(x, at + 2), int_at(x, at + 3), int_at(x, at + 4),
          int_at(x, at + 5), int_at(x, at + 6), int_at(x, at + 7));
  return 1;
}

/* ---------------------------------------------------------------- records */

/* APPEND as how: the seq of the last of recs (n of them), JR_LOST, 0
   (decide: not awaiting approval), -1; err. */
static long long put(rj_journal *j, const char *run, const char *how, const char *owner, const jr_record *recs,
                     int n, const char *step, char *err, size_t errlen) {
  if (n < 1 || n > INT_MAX - 4) {
    jr_seterr(err, errlen, "a journal append is of at least one record (it was %d)", n);
    return -1;
  }
  for (int i = 0; i < n; i++)
    if (strchr(recs[i].kind, '|')) {
      jr_seterr(err, errlen, "a journal record's kind has no '|' ('%s')", recs[i].kind);
      return -1;
    }
  keys ks;
  if (keys_of(j, run, &ks) != 0) { jr_seterr(err, errlen, "out of memory"); return -1; }
  long long seq = -1, next = 0;
  /* the script's arguments: how, owner, seq, step, then each record
     "<v>|<digest>|<kind>|<body>" */
  int nargs = 4 + n;
  char **rec = calloc((size_t)n, sizeof *rec);
  const char **args = calloc((size_t)nargs, sizeof *args);
  size_t *lens = calloc((size_t)nargs, sizeof *lens);
  int oom = !rec || !args || !lens;
  for (int i = 0; !oom && i < n; i++) oom = !(rec[i] = malloc(recs[i].len + strlen(recs[i].kind) + 96));
  if (oom) { jr_seterr(err, errlen, "out of memory"); goto out_free; }
  pthread_mutex_lock(&j->lock);
  if (rc_connect(&j->r, err, errlen) != 0) goto out;
  redisReply *x;
  if (j->last_next > 0 && strcmp(j->last_run, run) == 0) {
    next = j->last_next;
  } else {
    x = redisCommand(j->r.c, "LLEN %b", ks.k[1], ks.len[1]);
    if (rc_failed(&j->r, x, err, errlen)) goto out;
    next = x->type == REDIS_REPLY_INTEGER ? x->integer + 1 : 0;
    freeReplyObject(x);
  }
  j->last_next = 0;
  for (int tries = 0; next > 0 && tries < JR_REDIS_TRIES; tries++) {
    char num[24];
    int failed = 0;
    for (int i = 0; i < n && !failed; i++) {
      char dg[65];
      const jr_record *r = &recs[i];
      if (jr_digest(JR_FORMAT, run, next + i, r->kind, r->body, r->len, dg) != 0) { failed = 1; break; }
      int hl = sprintf(rec[i], "%d|%s|%s|", JR_FORMAT, dg, r->kind);
      if (r->len) memcpy(rec[i] + hl, r->body, r->len);
      args[4 + i] = rec[i];
      lens[4 + i] = (size_t)hl + r->len;
    }
    if (failed) { jr_seterr(err, errlen, "out of memory"); break; }
    snprintf(num, sizeof num, "%lld", next);
    args[0] = how; lens[0] = strlen(how);
    args[1] = owner ? owner : ""; lens[1] = owner ? strlen(owner) : 0;
    args[2] = num; lens[2] = strlen(num);
    args[3] = step ? step : ""; lens[3] = step ? strlen(step) : 0;
    x = script(j, SC_APPEND, &ks, 3, nargs, args, lens, err, errlen);
    if (!x) break;
    const char *what = x->type == REDIS_REPLY_ARRAY ? str_at(x, 0) : NULL;
    if (what && strcmp(what, "OK") == 0) {
      seq = int_at(x, 1);
      if (strlen(run) < sizeof j->last_run) {
        memcpy(j->last_run, run, strlen(run) + 1);
        j->last_next = seq + 1;
      }
    } else if (what && strcmp(what, "SEQ") == 0) {
      next = int_at(x, 1);   /* another appended first: these are numbered again */
      freeReplyObject(x);
      continue;
    } else if (what && strcmp(what, "LOST") == 0) {
      const char *holder = str_at(x, 2);
      seq = jr_fenced(run, owner, (int)int_at(x, 1), holder ? holder : "", err, errlen);
    } else if (what && strcmp(what, "STATE") == 0) {
      jr_run r = { .state = jr_state_of(str_at(x, 1)) };
      seq = jr_decidable(r.state ? &r : NULL, run, err, errlen);
    } else {
      unexpected(j, NULL, err, errlen);
    }
    freeReplyObject(x);
    break;
  }
  if (next > 0 && seq == -1 && err && !err[0])
    jr_seterr(err, errlen, "run '%s': %d appends in a row found another record numbered first", run, JR_REDIS_TRIES);
out:
  pthread_mutex_unlock(&j->lock);
out_free:
  for (int i = 0; rec && i < n; i++) free(rec[i]);
  free(rec);
  free(args);
  free(lens);
  keys_free(&ks);
  return seq;
}

static long long rj_append(void *impl, const char *run, const char *owner, const jr_record *recs, int n,
                           const char *step, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  return put(impl, run, owner ? "owner" : "none", owner, recs, n, step, err, errlen);
}

static long long rj_decide(void *impl, const char *run, const char *body, size_t len, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  return put(impl, run, "decide", NULL, &(jr_record){ "decision", body, len }, 1, NULL, err, errlen);
}

/* A stored record, "<v>|<digest>|<kind>|<body>", into *r (kind NULL when
   it is not one). */
static void record_of(const char *s, size_t n, long long seq, jr_row *r, char *kind, size_t kcap, char digest[65]) {
  memset(r, 0, sizeof *r);
  r->seq = seq;
  r->body = "";
  const char *end = s + n, *p = memchr(s, '|', n);
  if (!p) return;
  r->v = atoi(s);
  const char *d = p + 1;
  if (end - d < 66 || d[64] != '|') return;
  const char *k = d + 65, *q = memchr(k, '|', (size_t)(end - k));
  if (!q || (size_t)(q - k) >= kcap) return;
  memcpy(kind, k, (size_t)(q - k));
  kind[q - k] = '\0';
  r->kind = kind;
  r->body = q + 1;
  r->len = (size_t)(end - q - 1);
  memcpy(digest, d, 64);
  digest[64] = '\0';
  r->digest = digest;
}

static int rj_walk(void *impl, const char *run, int (*row)(void *arg, const jr_row *r), void *arg, char *err,
                   size_t errlen) {
  rj_journal *j = impl;
  keys ks;
  if (keys_of(j, run, &ks) != 0) { jr_seterr(err, errlen, "out of memory"); return -1; }
  int rc = 0, stop = 0;
  pthread_mutex_lock(&j->lock);
  if (rc_connect(&j->r, err, errlen) != 0) rc = -1;
  for (long long from = 0; rc == 0 && !stop; from += JR_REDIS_PAGE) {
    redisReply *x = redisCommand(j->r.c, "LRANGE %b %lld %lld", ks.k[1], ks.len[1], from, from + JR_REDIS_PAGE - 1);
    if (rc_failed(&j->r, x, err, errlen)) { rc = -1; break; }
    if (x->type != REDIS_REPLY_ARRAY) { rc = unexpected(j, x, err, errlen); break; }
    for (size_t i = 0; i < x->elements && !stop; i++) {
      char kind[64], digest[65];
      jr_row r;
      const redisReply *e = x->element[i];
      if (e->type == REDIS_REPLY_STRING) record_of(e->str, e->len, from + (long long)i + 1, &r, kind, sizeof kind, digest);
      else record_of("", 0, from + (long long)i + 1, &r, kind, sizeof kind, digest);
      stop = row(arg, &r) != 0;
    }
    if (x->elements < JR_REDIS_PAGE) stop = 1;
    freeReplyObject(x);
  }
  pthread_mutex_unlock(&j->lock);
  keys_free(&ks);
  return rc;
}

static int rj_cut(void *impl, const char *run, const char *owner, long long keep, char *err, size_t errlen) {
  rj_journal *j = impl;
  keys ks;
  if (keys_of(j, run, &ks) != 0) { jr_seterr(err, errlen, "out of memory"); return -1; }
  char num[24];
  snprintf(num, sizeof num, "%lld", keep);
  const char *args[] = { owner ? "owner" : "none", owner ? owner : "", num };
  pthread_mutex_lock(&j->lock);
  j->last_next = 0;
  redisReply *x = script(j, SC_CUT, &ks, 2, 3, args, NULL, err, errlen);
  int rc = -1;
  if (x) {
    const char *what = x->type == REDIS_REPLY_ARRAY ? str_at(x, 0) : NULL;
    if (what && strcmp(what, "OK") == 0) rc = 1;
    else if (what && strcmp(what, "LOST") == 0)
      rc = jr_fenced(run, owner, (int)int_at(x, 1), str_at(x, 2) ? str_at(x, 2) : "", err, errlen);
    else rc = unexpected(j, NULL, err, errlen);
    freeReplyObject(x);
  }
  pthread_mutex_unlock(&j->lock);
  keys_free(&ks);
  return rc;
}

/* ------------------------------------------------------------------- runs */

static int rj_claim(void *impl, const char *run, const char *owner, long long lease_ms, jr_run *now, char *err,
                    size_t errlen) {
  rj_journal *j = impl;
  keys ks;
  if (keys_of(j, run, &ks) != 0) { jr_seterr(err, errlen, "out of memory"); return -1; }
  char lease[24];
  snprintf(lease, sizeof lease, "%lld", lease_ms);
  const char *args[] = { owner, lease, run };
  pthread_mutex_lock(&j->lock);
  redisReply *x = script(j, SC_CLAIM, &ks, 3, 3, args, NULL, err, errlen);
  int rc = -1;
  if (x) {
    if (x->type == REDIS_REPLY_ARRAY && x->elements == 9 && row_of(x, 1, run, now)) rc = (int)int_at(x, 0);
    else unexpected(j, NULL, err, errlen);
    freeReplyObject(x);
  }
  pthread_mutex_unlock(&j->lock);
  keys_free(&ks);
  return rc;
}

/* A script that answers 1 or 0 (renew, set). */
static int yes_no(rj_journal *j, int which, const char *run, int nkeys, int nargs, const char *const *args,
                  char *err, size_t errlen) {
  keys ks;
  if (keys_of(j, run, &ks) != 0) { jr_seterr(err, errlen, "out of memory"); return -1; }
  if (nkeys == 2) {   /* run, runs */
    free(ks.k[1]);
    ks.k[1] = ks.k[2];
    ks.len[1] = ks.len[2];
    ks.k[2] = NULL;
  }
  pthread_mutex_lock(&j->lock);
  redisReply *x = script(j, which, &ks, nkeys, nargs, args, NULL, err, errlen);
  int rc = -1;
  if (x) {
    if (x->type == REDIS_REPLY_INTEGER) rc = x->integer == 1 ? 1 : 0;
    else unexpected(j, NULL, err, errlen);
    freeReplyObject(x);
  }
  pthread_mutex_unlock(&j->lock);
  keys_free(&ks);
  return rc;
}

static int rj_renew(void *impl, const char *run, const char *owner, long long lease_ms, char *err, size_t errlen) {
  char lease[24];
  snprintf(lease, sizeof lease, "%lld", lease_ms);
  const char *args[] = { owner, lease };
  return yes_no(impl, SC_RENEW, run, 1, 2, args, err, errlen);
}

static int rj_set(void *impl, const char *run, const char *owner, jr_state state, const char *step, char *err,
                  size_t errlen) {
  const char *args[] = { owner, jr_state_word(state), step ? "1" : "0", step ? step : "" };
  return yes_no(impl, SC_SET, run, 2, 4, args, err, errlen);
}

/* GET on the run: 1 (*out), 0, -1. j->lock held. */
static int get_locked(rj_journal *j, const char *run, jr_run *out, char *err, size_t errlen) {
  keys ks;
  if (keys_of(j, run, &ks) != 0) { jr_seterr(err, errlen, "out of memory"); return -1; }
  redisReply *x = script(j, SC_GET, &ks, 2, 0, NULL, NULL, err, errlen);
  int rc = -1;
  if (x) {
    if (x->type == REDIS_REPLY_ARRAY && x->elements == 8) rc = row_of(x, 0, run, out);
    else unexpected(j, NULL, err, errlen);
    freeReplyObject(x);
  }
  keys_free(&ks);
  return rc;
}

static int rj_get(void *impl, const char *run, jr_run *out, char *err, size_t errlen) {
  rj_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  int rc = get_locked(j, run, out, err, errlen);
  pthread_mutex_unlock(&j->lock);
  return rc;
}

/* The runs' ids, most recently changed first (or those last changed before
   before_ms, when >= 0): a reply whose elements are them, or NULL with err. */
static redisReply *ids(rj_journal *j, long long before_ms, char *err, size_t errlen) {
  char key[300];
  snprintf(key, sizeof key, "%sjournal:runs", j->prefix);
  if (rc_connect(&j->r, err, errlen) != 0) return NULL;
  redisReply *x = before_ms < 0 ? redisCommand(j->r.c, "ZREVRANGE %s 0 -1", key)
                                : redisCommand(j->r.c, "ZRANGEBYSCORE %s -inf (%lld", key, before_ms);
  if (rc_failed(&j->r, x, err, errlen)) return NULL;
  if (x->type != REDIS_REPLY_ARRAY) {
    unexpected(j, x, err, errlen);
    return NULL;
  }
  return x;
}

static int rj_list(void *impl, int (*each)(void *arg, const jr_run *r), void *arg, char *err, size_t errlen) {
  rj_journal *j = impl;
  pthread_mutex_lock(&j->lock);
  redisReply *x = ids(j, -1, err, errlen);
  int rc = x ? 0 : -1;
  for (size_t i = 0; x && i < x->elements; i++) {
    const char *id = str_at(x, i);
    jr_run r;
    int found = id ? get_locked(j, id, &r, err, errlen) : 0;
    if (found < 0) { rc = -1; break; }
    if (found && each(arg, &r) != 0) break;   /* (a run pruned meanwhile is not listed) */
  }
  if (x) freeReplyObject(x);
  pthread_mutex_unlock(&j->lock);
  return rc;
}

static long long rj_prune(void *impl, long long before_ms, char *err, size_t errlen) {
  rj_journal *j = impl;
  char before[24];
  snprintf(before, sizeof before, "%lld", before_ms);
  pthread_mutex_lock(&j->lock);
  redisReply *x = ids(j, before_ms, err, errlen);
  long long n = x ? 0 : -1;
  for (size_t i = 0; x && i < x->elements; i++) {
    const char *id = str_at(x, i);
    keys ks;
    if (!id) continue;
    if (keys_of(j, id, &ks) != 0) { n = -1; jr_seterr(err, errlen, "out of memory"); break; }
    const char *args[] = { before, id };
    redisReply *y = script(j, SC_PRUNE, &ks, 3, 2, args, NULL, err, errlen);
    keys_free(&ks);
    if (!y) { n = -1; break; }
    if (y->type == REDIS_REPLY_INTEGER) n += y->integer;
    freeReplyObject(y);
  }
  if (x) freeReplyObject(x);
  pthread_mutex_unlock(&j->lock);
  return n;
}

static void rj_close(void *impl) {
  rj_journal *j = impl;
  if (!j) return;
  rc_free(&j->r);
  free(j->prefix);
  pthread_mutex_destroy(&j->lock);
  free(j);
}

static const jr_ops RJ_OPS = {
  .append = rj_append,
  .walk = rj_walk,
  .cut = rj_cut,
  .claim = rj_claim,
  .renew = rj_renew,
  .set = rj_set,
  .get = rj_get,
  .list = rj_list,
  .prune = rj_prune,
  .decide = rj_decide,
  .close = rj_close,
};

jr_journal *jr_open_redis(const jr_options *o, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  rj_journal *j = calloc(1, sizeof *j);
  if (!j || pthread_mutex_init(&j->lock, NULL) != 0) {
    free(j);
    jr_seterr(err, errlen, "out of memory");
    return NULL;
  }
  char why[400] = "";
  if (rc_init(&j->r, o->url, o->password, why, sizeof why) != 0) {
    jr_seterr(err, errlen, "journal %s", why);
    rj_close(j);
    return NULL;
  }
  j->r.ready = on_ready;
  j->r.ready_arg = j;
  if (!(j->prefix = strdup(o->prefix ? o->prefix : "luma:"))) {
    jr_seterr(err, errlen, "out of memory");
    rj_close(j);
    return NULL;
  }
  /* a first connection tells at open a journal this luma does not read; a
     server that is down is not an error here (its calls are, until it is
     back) */
  pthread_mutex_lock(&j->lock);
  int down = rc_connect(&j->r, why, sizeof why);
  pthread_mutex_unlock(&j->lock);
  if (down && j->wrong) {
    jr_seterr(err, errlen, "journal %s", why);
    rj_close(j);
    return NULL;
  }
  return jr_wrap(&RJ_OPS, j);
}
