/* A durable ask's run read back from its journal (askpast.h): its
   inputs, answered turns, calls' outcomes, decisions and how it finished,
   which a resumed ask takes instead of asking or running again. */
#include "askpast.h"
#include "askint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "json.h"
#include "luma_limits.h"
#include "strbuf.h"

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
const char *ak_past_run(const ak_past *p) { return p->run; }
const jv *ak_past_finish(const ak_past *p) { return p->finish; }
int ak_past_turns(const ak_past *p) { return p->nex; }
const jr_status *ak_past_status(const ak_past *p) { return &p->st; }

int ak_past_response(ak_ask *a, int turn, ad_response *r) {
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

int ak_past_awaited(const ak_past *p, int turn, const char *id) {
  for (int k = 0; p && k < p->napprovals; k++)
    if (p->approvals[k].turn == turn && same_id(p->approvals[k].id, id)) return 1;
  return 0;
}

int ak_past_result(ak_ask *a, int i, char **content, size_t *len, int *is_error) {
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

int ak_past_decision(ak_ask *a, int i, int *approved, const char **reason, const char **input, size_t *input_len) {
  const ak_past *p = a->past;
  const ad_call *call = &a->turn.calls[i];
  /* a decision answers a call the run waited for, at this turn */
  int waited = ak_past_awaited(p, a->turns, call->id);
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
