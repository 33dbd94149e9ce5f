/* A durable ask's records and its run's lease (askjournal.h); a run read
   back to resume it is askpast.c's. */
#include "askjournal.h"
#include "askpast.h"
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
  if (ak_past_response(a, a->turns, &had)) return 0;   /* read back: written once */
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
  if (!ak_past_awaited(a->past, a->turns, call->id)) {
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
  lua_pushinteger(T, (lua_Integer)ak_past_status(a->past)->whole);
  lua_setfield(T, e, "records");
  lua_pushinteger(T, (lua_Integer)ak_past_status(a->past)->torn);
  lua_setfield(T, e, "torn");
  st_publish(T, pg, e);
  lua_settop(T, e - 1);
}

int ak_journal_resume(ak_ask *a, int *ok, char *err, size_t errlen) {
  const ak_past *p = a->past;
  snprintf(a->run_id, sizeof a->run_id, "%s", ak_past_run(p));
  jr_run was;
  int got = jr_get(a->pg->journal, a->run_id, &was, err, errlen);
  if (got < 0) return -1;
  if (ak_past_finish(p)) {
    *ok = push_finish(a, ak_past_finish(p));
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
  const jr_status *st = ak_past_status(p);
  if (st->torn && jr_cut(a->pg->journal, a->run_id, a->owner, st->whole, err, errlen) != 1) return -1;
  emit_resume(a, &was, got == 1 && was.state == JR_RUNNING && was.owner[0]);
  journal_step(a, "turn %d: resumed", ak_past_turns(p) + 1);
  return 0;
}
