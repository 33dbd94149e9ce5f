/* A durable ask's records, its run's lease, and a run read back to resume
   it (askjournal.h). */
#include "askjournal.h"
#include "askint.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>

#include "crypto.h"
#include "journal.h"
#include "json.h"
#include "lerror.h"
#include "ljson.h"
#include "luma_limits.h"
#include "redact.h"
#include "strbuf.h"
#include "telemetry.h"

/* ---------------------------------------------------------- the past */

typedef struct past_exchange {
  int turn, status;
  const char *body;
  size_t len;
} past_exchange;

typedef struct past_tool {
  int turn, error, used;
  const char *id;             /* NULL: the call had none */
  const char *content;
  size_t len;
} past_tool;

typedef struct past_decision {
  const char *id, *reason, *input;
  size_t input_len;
  int approved;
} past_decision;

struct ak_past {
  ar_arena arena;
  char run[64];
  const char *agent, *prompt, *schema, *forced;
  size_t prompt_len;
  past_exchange *ex;
  int nex, capex;
  past_tool *tools;
  int ntools, captools;
  const jv *finish;           /* the "finish" record's body, or NULL */
  past_decision *decisions;   /* "decision" records, in order */
  int ndecisions, capdecisions;
  past_tool *approvals;       /* "approval" records (turn, id) */
  int napprovals, capapprovals;
  jr_status st;
  char bad[400];              /* a record that cannot be read */
};

static const char *str_of(const jv *o, const char *key, ar_arena *ar) {
  const jv *v = o ? jv_get(o, key) : NULL;
  if (!v || v->type != JV_STR) return NULL;
  return ar_strndup(ar, v->s, v->len);
}

static int int_of(const jv *o, const char *key) {
  const jv *v = o ? jv_get(o, key) : NULL;
  return v && v->type == JV_INT ? (int)v->i : v && v->type == JV_NUM ? (int)v->n : 0;
}

static int grow(void **items, int *cap, int n, size_t size) {
  if (n < *cap) return 0;
  int c = *cap ? *cap * 2 : 8;
  void *p = realloc(*items, size * (size_t)c);
  if (!p) return -1;
  *items = p;
  *cap = c;
  return 0;
}

static int each_record(void *arg, long long seq, const char *kind, const char *body, size_t len) {
  ak_past *p = arg;
  char why[200];
  jv *v = json_parse(&p->arena, body, len, LIM_MODEL_JSON_DEPTH, why, sizeof why);
  if (!v || v->type != JV_OBJ) {
    snprintf(p->bad, sizeof p->bad, "record %lld (%s) of run '%s' is not a JSON object: %s", seq, kind, p->run,
             v ? "another value" : why);
    return 1;
  }
  if (seq == 1) {
    if (strcmp(kind, "ask") != 0) {
      snprintf(p->bad, sizeof p->bad, "run '%s' begins with a '%s' record, not its ask", p->run, kind);
      return 1;
    }
    const jv *prompt = jv_get(v, "prompt");
    p->agent = str_of(v, "agent", &p->arena);
    p->schema = str_of(v, "schema", &p->arena);
    p->forced = str_of(v, "forced", &p->arena);
    if (!p->agent || !prompt || prompt->type != JV_STR) {
      snprintf(p->bad, sizeof p->bad, "the ask record of run '%s' has no agent or prompt", p->run);
      return 1;
    }
    p->prompt = prompt->s;
    p->prompt_len = prompt->len;
  } else if (strcmp(kind, "exchange") == 0) {
    const jv *b = jv_get(v, "body");
    if (grow((void **)&p->ex, &p->capex, p->nex, sizeof *p->ex) != 0) return 1;
    p->ex[p->nex++] = (past_exchange){ int_of(v, "turn"), int_of(v, "status"), b && b->type == JV_STR ? b->s : "",
                                       b && b->type == JV_STR ? b->len : 0 };
  } else if (strcmp(kind, "tool") == 0) {
    sb_buf c;
    sb_init(&c);
    const jv *content = jv_get(v, "content");
    if (content) jv_write(&c, content, 0);
    const char *text = c.failed ? NULL : ar_strndup(&p->arena, c.data ? c.data : "null", c.data ? c.len : 4);
    size_t n = c.data ? c.len : 4;
    sb_free(&c);
    const jv *e = jv_get(v, "error");
    if (!text || grow((void **)&p->tools, &p->captools, p->ntools, sizeof *p->tools) != 0) return 1;
    p->tools[p->ntools++] = (past_tool){ int_of(v, "turn"), e && e->type == JV_BOOL && e->b, 0,
                                         str_of(v, "id", &p->arena), text, n };
  } else if (strcmp(kind, "finish") == 0) {
    p->finish = v;
  } else if (strcmp(kind, "decision") == 0) {
    const jv *ok = jv_get(v, "approved"), *input = jv_get(v, "input");
    sb_buf in;
    sb_init(&in);
    if (input && input->type != JV_NULL) jv_write(&in, input, 0);
    const char *text = in.data && !in.failed ? ar_strndup(&p->arena, in.data, in.len) : NULL;
    size_t n = in.len;
    sb_free(&in);
    if (grow((void **)&p->decisions, &p->capdecisions, p->ndecisions, sizeof *p->decisions) != 0) return 1;
    p->decisions[p->ndecisions++] = (past_decision){ str_of(v, "id", &p->arena), str_of(v, "reason", &p->arena),
                                                     text, text ? n : 0, ok && ok->type == JV_BOOL && ok->b };
  } else if (strcmp(kind, "approval") == 0) {
    if (grow((void **)&p->approvals, &p->capapprovals, p->napprovals, sizeof *p->approvals) != 0) return 1;
    p->approvals[p->napprovals++] = (past_tool){ int_of(v, "turn"), 0, 0, str_of(v, "id", &p->arena), NULL, 0 };
  }
  return 0;
}

ak_past *ak_past_read(pl_program *pg, const char *run, char *err, size_t errlen) {
  if (!pg->journal) {
    snprintf(err, errlen, "the program has no journal (luma.load's journal option)");
    return NULL;
  }
  if (!run || !*run || strlen(run) >= sizeof ((ak_past *)0)->run) {
    snprintf(err, errlen, "a run id is 1 to %d bytes", (int)sizeof ((ak_past *)0)->run - 1);
    return NULL;
  }
  ak_past *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  ar_init(&p->arena);
  snprintf(p->run, sizeof p->run, "%s", run);
  if (jr_read(pg->journal, run, each_record, p, &p->st, err, errlen) != 0) {
    ak_past_free(p);
    return NULL;
  }
  if (p->bad[0] || p->arena.failed) {
    snprintf(err, errlen, "%s", p->bad[0] ? p->bad : "out of memory");
    ak_past_free(p);
    return NULL;
  }
  if (!p->agent) {
    snprintf(err, errlen, "the journal has no run '%s'", run);
    ak_past_free(p);
    return NULL;
  }
  return p;
}

void ak_past_free(ak_past *p) {
  if (!p) return;
  free(p->ex);
  free(p->tools);
  free(p->decisions);
  free(p->approvals);
  ar_free(&p->arena);
  free(p);
}

const char *ak_past_agent(const ak_past *p) { return p->agent; }
const char *ak_past_prompt(const ak_past *p, size_t *len) { *len = p->prompt_len; return p->prompt; }
const char *ak_past_schema(const ak_past *p) { return p->schema; }
const char *ak_past_forced(const ak_past *p) { return p->forced; }

int ak_journal_response(ak_ask *a, int turn, ad_response *r) {
  const ak_past *p = a->past;
  static const ad_header json_type = { "Content-Type", "application/json" };
  for (int i = 0; p && i < p->nex; i++) {
    if (p->ex[i].turn != turn) continue;
    *r = (ad_response){ p->ex[i].status, &json_type, 1, p->ex[i].body, p->ex[i].len, pl_wall_ms(a->T, a->pg) };
    return 1;
  }
  return 0;
}

static int same_id(const char *x, const char *y) {
  return (!x && !y) || (x && y && strcmp(x, y) == 0);
}

int ak_journal_result(ak_ask *a, int i, char **content, size_t *len, int *is_error) {
  ak_past *p = a->past;
  const ad_call *call = &a->turn.calls[i];
  for (int k = 0; p && k < p->ntools; k++) {
    past_tool *t = &p->tools[k];
    if (t->used || t->turn != a->turns || !same_id(t->id, call->id)) continue;
    if (!(*content = malloc(t->len + 1))) return 0;
    memcpy(*content, t->content, t->len);
    (*content)[t->len] = '\0';
    *len = t->len;
    *is_error = t->error;
    t->used = 1;
    return 1;
  }
  return 0;
}

int ak_journal_decision(ak_ask *a, int i, int *approved, const char **reason, const char **input, size_t *input_len) {
  const ak_past *p = a->past;
  const ad_call *call = &a->turn.calls[i];
  /* a decision answers a call the run waited for, at this turn */
  int waited = 0;
  for (int k = 0; p && k < p->napprovals; k++)
    if (p->approvals[k].turn == a->turns && same_id(p->approvals[k].id, call->id)) waited = 1;
  for (int k = 0; waited && k < p->ndecisions; k++) {
    const past_decision *d = &p->decisions[k];
    if (!same_id(d->id, call->id)) continue;
    *approved = d->approved;
    *reason = d->reason;
    *input = d->input;
    *input_len = d->input_len;
    return 1;
  }
  return 0;
}

/* --------------------------------------------------------- the lease */

struct ak_beat {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  ak_ask *a;
};

static long long lease(const ak_ask *a) {
  return a->pg->journal_lease_ms > 0 ? a->pg->journal_lease_ms : LIM_JOURNAL_LEASE_MS;
}

int ak_journal_lost(const ak_ask *a) {
  return __atomic_load_n(&a->lost, __ATOMIC_ACQUIRE);
}

/* The run was taken over: said once (by the heartbeat's thread or the
   ask's, whichever saw it first), then the ask is woken to end. */
static void lose(ak_ask *a, const char *why) {
  if (__atomic_exchange_n(&a->losing, 1, __ATOMIC_ACQ_REL)) return;
  snprintf(a->lost_why, sizeof a->lost_why, "another process took run '%s' over%s%s", a->run_id, why ? ": " : "",
           why ? why : "");
  __atomic_store_n(&a->lost, 1, __ATOMIC_RELEASE);
  rt_notify(a->rt);
}

/* Renews the lease a third of it apart until told to stop; a lost lease
   wakes the ask, which ends. An unreachable store is tried at the next beat. */
static void *beat_main(void *arg) {
  struct ak_beat *b = arg;
  ak_ask *a = b->a;
  long long every = lease(a) / 3;
  pthread_mutex_lock(&b->mu);
  while (!b->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += every / 1000;
    ts.tv_nsec += (every % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    while (!b->stop && pthread_cond_timedwait(&b->cv, &b->mu, &ts) == 0) {}
    if (b->stop) break;
    pthread_mutex_unlock(&b->mu);
    char err[300] = "";
    if (jr_renew(a->pg->journal, a->run_id, a->owner, lease(a), err, sizeof err) == 0) lose(a, NULL);
    pthread_mutex_lock(&b->mu);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

static int beat_start(ak_ask *a) {
  struct ak_beat *b = calloc(1, sizeof *b);
  if (!b) return -1;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, &ca);
  pthread_condattr_destroy(&ca);
  b->a = a;
  if (pthread_create(&b->thread, NULL, beat_main, b) != 0) {
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
    return -1;
  }
  a->beat = b;
  return 0;
}

void ak_journal_stop(ak_ask *a) {
  struct ak_beat *b = a->beat;
  if (!b) return;
  pthread_mutex_lock(&b->mu);
  b->stop = 1;
  pthread_cond_signal(&b->cv);
  pthread_mutex_unlock(&b->mu);
  pthread_join(b->thread, NULL);
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  free(b);
  a->beat = NULL;
}

/* This process's name for its claim: host:pid:nonce. */
static int make_owner(ak_ask *a) {
  char host[64] = "";
  unsigned char nonce[4];
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
  if (cr_random(nonce, sizeof nonce) != 0) return -1;
  snprintf(a->owner, sizeof a->owner, "%s:%ld:%02x%02x%02x%02x", host, (long)getpid(), nonce[0], nonce[1], nonce[2],
           nonce[3]);
  return 0;
}

/* Claims the run for this process: 1, 0 (*now: who holds it, or how it
   ended), -1 with err; the heartbeat starts with the claim. */
static int claim(ak_ask *a, jr_run *now, char *err, size_t errlen) {
  if (!a->owner[0] && make_owner(a) != 0) {
    snprintf(err, errlen, "no random bytes for its owner's name");
    return -1;
  }
  int rc = jr_claim(a->pg->journal, a->run_id, a->owner, lease(a), now, err, errlen);
  if (rc == 1 && beat_start(a) != 0) {
    snprintf(err, errlen, "cannot start the lease's heartbeat");
    return -1;
  }
  return rc;
}

/* --------------------------------------------------------- the records */

/* The crash specs' kill point (README: Durable asks): LUMA_JOURNAL_CRASH =
   "before:N" or "after:N" kills this process with SIGKILL just before or
   just after its Nth journal record is written. Records are counted one by
   one; records committed together (a turn's tool outcomes, one commit) are
   written at once, so that "before:N" kills before the commit that holds
   record N (none of it kept) and "after:N" after it (all of it kept).
   Called with the commit's records (count) before it (after 0), and again
   once it is kept (after 1). */
static void crash_point(int count, int after) {
  static long long n, at = -1;
  static int when_after;
  if (at < 0) {
    const char *v = getenv("LUMA_JOURNAL_CRASH");
    at = 0;
    if (v && strncmp(v, "before:", 7) == 0) at = atoll(v + 7);
    else if (v && strncmp(v, "after:", 6) == 0) {
      at = atoll(v + 6);
      when_after = 1;
    }
  }
  if (!after) n += count;
  if (at > 0 && after == when_after && at > n - count && at <= n) raise(SIGKILL);
}

/* s as the text of a JSON string (no quotes), in the ask's arena */
static const char *escaped(ak_ask *a, const char *s) {
  sb_buf b;
  sb_init(&b);
  json_write_string(&b, s, strlen(s));
  const char *t = b.failed || b.len < 2 ? NULL : ar_strndup(&a->arena, b.data + 1, b.len - 2);
  sb_free(&b);
  return t;
}

/* What the run's records must not hold (journal.h): the model's API key and
   the values of the credentials of the program's tools, read through the
   lookup. Each as it is, and JSON-escaped once to three times: JSON text
   in a string (a response body), in which a call's arguments are JSON text
   in a string, all in a record's text. Once, on the ask's thread, after
   prepare read the key. 0, -1 out of memory. */
#define AK_ESCAPES 3
static int gather_secrets(ak_ask *a) {
  pm_program *p = a->pg->p;
  int n = 1 + (p ? p->ntools : 0);
  const char **raw = ar_alloc(&a->arena, sizeof *raw * (size_t)n);
  a->secrets = ar_alloc(&a->arena, sizeof *a->secrets * (size_t)n * (AK_ESCAPES + 1));
  if (!raw || !a->secrets) return -1;
  int m = 0;
  if (a->model.api_key) raw[m++] = a->model.api_key;
  for (int i = 0; p && i < p->ntools; i++) {
    if (!p->tools[i]->credential) continue;
    const char *v = pl_lookup(a->T, a->pg, p->tools[i]->credential);
    const char *copy = v && strlen(v) >= RD_MIN ? ar_strdup(&a->arena, v) : NULL;
    lua_pop(a->T, 1);
    if (copy) raw[m++] = copy;
  }
  a->nsecrets = 0;
  for (int i = 0; i < m; i++) {
    const char *s = raw[i];
    a->secrets[a->nsecrets++] = s;
    for (int k = 0; k < AK_ESCAPES; k++) {
      const char *e = escaped(a, s);
      if (!e) return -1;
      if (strcmp(e, s) == 0) break;   /* nothing to escape: the same at every depth */
      a->secrets[a->nsecrets++] = s = e;
    }
  }
  return 0;
}

/* b's JSON with every secret replaced by the marker (redact.h), wherever it
   is: in a value, a key, or JSON text kept in a string. Parsed and written
   again only when one occurs. 0, -1 out of memory. */
static int redact(ak_ask *a, sb_buf *b) {
  if (b->failed || !rd_found(b->data, b->len, a->secrets, a->nsecrets)) return 0;
  ar_arena scratch;
  ar_init(&scratch);
  char why[200];
  jv *v = json_parse(&scratch, b->data, b->len, LIM_MODEL_JSON_DEPTH, why, sizeof why);
  int rc = -1;
  if (v && rd_json(&scratch, v, a->secrets, a->nsecrets) == 0 && !scratch.failed) {
    sb_buf out;
    sb_init(&out);
    jv_write(&out, v, 0);
    if (!out.failed) {
      sb_free(b);
      *b = out;
      rc = 0;
    } else {
      sb_free(&out);
    }
  }
  ar_free(&scratch);
  return rc;
}

/* Appends n records of kind with bodies bs (freed) in one commit, as the
   run's owner, with the secrets redacted; step (NULL: as it was) is where
   the run is once they are kept, set with them. */
static int append_n(ak_ask *a, const char *kind, sb_buf *bs, int n, const char *step, char *err, size_t errlen) {
  long long seq = -1;
  snprintf(err, errlen, "out of memory");
  jr_record one, *recs = n == 1 ? &one : calloc((size_t)n, sizeof *recs);
  int failed = !recs;
  for (int i = 0; i < n; i++) {
    if (redact(a, &bs[i]) != 0) bs[i].failed = 1;
    failed |= bs[i].failed;
    if (recs) recs[i] = (jr_record){ kind, bs[i].data, bs[i].len };
  }
  crash_point(n, 0);
  if (!failed) seq = jr_append_batch(a->pg->journal, a->run_id, a->owner, recs, n, step, err, errlen);
  if (seq > 0) crash_point(n, 1);
  for (int i = 0; i < n; i++) sb_free(&bs[i]);
  if (recs != &one) free(recs);
  if (seq == JR_LOST) {
    char why[300];
    snprintf(why, sizeof why, "%s", err);
    lose(a, why);
    snprintf(err, errlen, "another process took run '%s' over: %s", a->run_id, why);
  }
  return seq > 0 ? 0 : -1;
}

/* Appends a record of kind with body b (freed): append_n of one. */
static int append(ak_ask *a, const char *kind, sb_buf *b, const char *step, char *err, size_t errlen) {
  return append_n(a, kind, b, 1, step, err, errlen);
}

/* `,"key":` and s as a JSON string (NULL: null) */
static void field(sb_buf *b, const char *key, const char *s) {
  sb_printf(b, ",\"%s\":", key);
  if (s) json_write_string(b, s, strlen(s));
  else sb_adds(b, "null");
}

int ak_journal_ask(ak_ask *a, char *err, size_t errlen) {
  if (!a->agent->durable) return 0;
  unsigned char run[8];
  if (!a->pg->journal) {
    snprintf(err, errlen, "the program has no journal (luma.load's journal option)");
    return -1;
  }
  if (cr_random(run, sizeof run) != 0) {
    snprintf(err, errlen, "no random bytes for its run id");
    return -1;
  }
  if (gather_secrets(a) != 0) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  int n = snprintf(a->run_id, sizeof a->run_id, "run-");
  for (size_t i = 0; i < sizeof run; i++) n += snprintf(a->run_id + n, sizeof a->run_id - (size_t)n, "%02x", run[i]);
  jr_run now;
  int rc = claim(a, &now, err, errlen);
  if (rc == 0) snprintf(err, errlen, "run '%s' is held by %s", a->run_id, now.owner);
  if (rc != 1) {
    a->run_id[0] = '\0';
    return -1;
  }
  sb_buf b;
  sb_init(&b);
  sb_adds(&b, "{\"prompt\":");
  json_write_string(&b, a->prompt, a->prompt_len);
  field(&b, "agent", a->agent->name);
  field(&b, "model", a->pm->name);
  field(&b, "schema", a->schema ? a->schema->name : NULL);
  field(&b, "forced", a->forced ? a->forced->name : NULL);
  sb_addc(&b, '}');
  return append(a, "ask", &b, "turn 1: request", err, errlen);
}

int ak_journal_exchange(ak_ask *a, const ad_response *r, char *err, size_t errlen) {
  if (!a->agent->durable) return 0;
  ad_response had;
  if (ak_journal_response(a, a->turns, &had)) return 0;   /* read back: written once */
  sb_buf b;
  sb_init(&b);
  sb_printf(&b, "{\"turn\":%d,\"status\":%d,\"body\":", a->turns, r->status);
  json_write_string(&b, r->body ? r->body : "", r->body ? r->len : 0);
  sb_addc(&b, '}');
  char step[64];
  snprintf(step, sizeof step, "turn %d: answered", a->turns);
  return append(a, "exchange", &b, step, err, errlen);
}

int ak_journal_tools(ak_ask *a, const int *idx, int n, char *err, size_t errlen) {
  if (!a->agent->durable || n < 1) return 0;
  sb_buf one, *bs = n == 1 ? &one : calloc((size_t)n, sizeof *bs);
  if (!bs) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (int k = 0; k < n; k++) {
    int i = idx[k];
    const ak_slot *s = &a->slots[i];
    const ad_call *call = i < a->turn.ncalls ? &a->turn.calls[i] : NULL;
    sb_buf *b = &bs[k];
    sb_init(b);
    sb_printf(b, "{\"turn\":%d,\"error\":%s", a->turns, s->is_error ? "true" : "false");
    field(b, "id", call ? call->id : NULL);
    field(b, "name", call ? call->name : NULL);
    sb_adds(b, ",\"content\":");
    if (s->content) sb_add(b, s->content, s->len);
    else sb_adds(b, "null");
    sb_addc(b, '}');
  }
  /* the turn's last outcomes kept: the next request is the step (the
     caller marked these journaled) */
  int left = 0;
  for (int k = 0; k < a->nslots; k++) left += !a->slots[k].journaled && !a->slots[k].awaiting;
  char step[64];
  if (left) snprintf(step, sizeof step, "turn %d: tools, %d to go", a->turns, left);
  else snprintf(step, sizeof step, "turn %d: request", a->turns + 1);
  int rc = append_n(a, "tool", bs, n, step, err, errlen);
  if (bs != &one) free(bs);
  return rc;
}

int ak_journal_approval(ak_ask *a, int i, const char *reason, char *err, size_t errlen) {
  if (!a->agent->durable) return 0;
  const ad_call *call = &a->turn.calls[i];
  int had = 0;
  for (int k = 0; a->past && k < a->past->napprovals; k++)
    if (a->past->approvals[k].turn == a->turns && same_id(a->past->approvals[k].id, call->id)) had = 1;
  if (!had) {
    sb_buf b;
    sb_init(&b);
    sb_printf(&b, "{\"turn\":%d", a->turns);
    field(&b, "id", call->id);
    field(&b, "name", call->name);
    sb_adds(&b, ",\"input\":");
    ar_arena scratch;
    ar_init(&scratch);
    char why[200];
    jv *in = call->arguments_len ? json_parse(&scratch, call->arguments, call->arguments_len, LIM_MODEL_JSON_DEPTH, why,
                                              sizeof why) : NULL;
    if (in) jv_write(&b, in, 0);
    else if (call->arguments_len) json_write_string(&b, call->arguments, call->arguments_len);
    else sb_adds(&b, "{}");
    ar_free(&scratch);
    field(&b, "reason", reason);
    sb_addc(&b, '}');
    if (append(a, "approval", &b, NULL, err, errlen) != 0) return -1;
  }
  char step[96];
  snprintf(step, sizeof step, "turn %d: awaiting approval of %.40s", a->turns, call->id ? call->id : "a call");
  int rc = jr_set(a->pg->journal, a->run_id, a->owner, JR_AWAITING_APPROVAL, step, err, errlen);
  if (rc == 0) lose(a, NULL);
  return rc == 1 ? 0 : -1;
}

/* The run's step, as `runs` shows it, set on its own (a record sets it
   with itself): a resume's; a failure is the heartbeat's to notice. */
static void journal_step(ak_ask *a, const char *fmt, int turn) {
  if (!a->agent->durable || !a->beat) return;
  char step[96], err[300];
  snprintf(step, sizeof step, fmt, turn);
  if (jr_set(a->pg->journal, a->run_id, a->owner, JR_RUNNING, step, err, sizeof err) == 0) lose(a, NULL);
}

int ak_journal_finish(ak_ask *a, char *err, size_t errlen) {
  /* an ask that ended before its first record has no run; one that lost
     it writes nothing more; a finished run read back is not finished again */
  if (!a->agent->durable || !a->beat || ak_journal_lost(a) || a->awaiting) {
    ak_journal_stop(a);
    return 0;
  }
  lua_State *T = a->T;
  sb_buf b;
  sb_init(&b);
  char why[200];
  sb_adds(&b, a->ok ? "{\"ok\":true,\"answer\":" : "{\"ok\":false,\"error\":{\"code\":");
  if (a->ok) {
    if (lj_encode(T, AK_VALUE, &b, 0, LIM_MODEL_JSON_DEPTH, why, sizeof why) != 0) b.failed = 1;
  } else {
    lua_getfield(T, AK_VALUE, "code");
    lua_getfield(T, AK_VALUE, "message");
    const char *code = lua_type(T, -2) == LUA_TSTRING ? lua_tostring(T, -2) : "ASK_PROVIDER_ERROR";
    const char *msg = lua_type(T, -1) == LUA_TSTRING ? lua_tostring(T, -1) : "";
    json_write_string(&b, code, strlen(code));
    sb_adds(&b, ",\"message\":");
    json_write_string(&b, msg, strlen(msg));
    lua_pop(T, 2);
  }
  sb_adds(&b, a->ok ? "}" : "}}");
  int rc = append(a, "finish", &b, NULL, err, errlen);
  /* the state after the record: a run whose finish is written has ended */
  if (rc == 0 && jr_set(a->pg->journal, a->run_id, a->owner, a->ok ? JR_COMPLETED : JR_FAILED, "finished", err,
                        errlen) != 1)
    rc = -1;
  ak_journal_stop(a);
  return rc;
}

/* ------------------------------------------------------------ resuming */

/* The outcome of a finished run, pushed on T: 1 ok, 0 its error. */
static int push_finish(ak_ask *a, const jv *f) {
  lua_State *T = a->T;
  const jv *ok = jv_get(f, "ok");
  if (ok && ok->type == JV_BOOL && ok->b) {
    const jv *answer = jv_get(f, "answer");
    if (answer) {
      lj_push(T, answer, 0);
      return 1;
    }
  }
  const jv *e = jv_get(f, "error");
  const jv *code = e ? jv_get(e, "code") : NULL, *msg = e ? jv_get(e, "message") : NULL;
  char text[700];
  snprintf(text, sizeof text, "Run '%s' of agent '%s' has finished%s: %s", a->run_id, a->agent->name,
           ok && ok->type == JV_BOOL && ok->b ? "" : " and failed", msg && msg->type == JV_STR ? msg->s
                                                                    : "its journal does not keep its outcome");
  le_push(T, code && code->type == JV_STR ? code->s : "JOURNAL_ERROR", text, 0, 0);
  return 0;
}

/* One event, { kind = "resume", run, agent, ask, owner, takeover, previous_owner, records, torn } */
static void emit_resume(ak_ask *a, const jr_run *was, int takeover) {
  pl_program *pg = a->pg;
  if (!pg->has_sink && !pg->trace) return;
  lua_State *T = a->T;
  lua_createtable(T, 0, 9);
  int e = lua_gettop(T);
  lua_pushliteral(T, "resume");
  lua_setfield(T, e, "kind");
  lua_pushstring(T, a->run_id);
  lua_setfield(T, e, "run");
  lua_pushstring(T, a->agent->name);
  lua_setfield(T, e, "agent");
  lua_pushstring(T, a->id);
  lua_setfield(T, e, "ask");
  lua_pushstring(T, a->owner);
  lua_setfield(T, e, "owner");
  lua_pushboolean(T, takeover);
  lua_setfield(T, e, "takeover");
  lua_pushstring(T, was->owner);
  lua_setfield(T, e, "previous_owner");
  lua_pushinteger(T, (lua_Integer)a->past->st.whole);
  lua_setfield(T, e, "records");
  lua_pushinteger(T, (lua_Integer)a->past->st.torn);
  lua_setfield(T, e, "torn");
  st_publish(T, pg, e);
  lua_settop(T, e - 1);
}

int ak_journal_resume(ak_ask *a, int *ok, char *err, size_t errlen) {
  ak_past *p = a->past;
  snprintf(a->run_id, sizeof a->run_id, "%s", p->run);
  jr_run was;
  int got = jr_get(a->pg->journal, a->run_id, &was, err, errlen);
  if (got < 0) return -1;
  if (p->finish) {
    *ok = push_finish(a, p->finish);
    return 1;
  }
  if (got == 0) memset(&was, 0, sizeof was);
  if (gather_secrets(a) != 0) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  jr_run now;
  int rc = claim(a, &now, err, errlen);
  if (rc < 0) return -1;
  if (rc == 0) {
    if (now.state == JR_COMPLETED || now.state == JR_FAILED)
      snprintf(err, errlen, "run '%s' has %s, and its journal has no finish record", a->run_id, jr_state_name(&now));
    else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      long long left = now.lease_until_ms - ((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
      snprintf(err, errlen, "run '%s' is held by %s, whose lease ends in %lld ms (a live process; resume it once "
               "its lease has ended)", a->run_id, now.owner, left > 0 ? left : 0);
    }
    return -1;
  }
  /* a torn tail was never written: its step runs again */
  if (p->st.torn && jr_cut(a->pg->journal, a->run_id, a->owner, p->st.whole, err, errlen) != 1) return -1;
  emit_resume(a, &was, got == 1 && was.state == JR_RUNNING && was.owner[0]);
  journal_step(a, "turn %d: resumed", p->nex + 1);
  return 0;
}
