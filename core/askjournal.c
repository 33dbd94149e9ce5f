/* A durable ask's records (askjournal.h). */
#include "askjournal.h"
#include "askint.h"

#include <stdio.h>
#include <string.h>

#include "crypto.h"
#include "journal.h"
#include "json.h"
#include "strbuf.h"

/* Appends a record of kind with body b (freed); the run's id is made at its
   first record. */
static int append(ak_ask *a, const char *kind, sb_buf *b, char *err, size_t errlen) {
  if (!a->agent->durable) { sb_free(b); return 0; }
  unsigned char run[8];
  long long seq = -1;
  snprintf(err, errlen, "out of memory");
  if (!a->pg->journal) {
    snprintf(err, errlen, "the program has no journal (luma.load's journal option)");
  } else if (!a->run_id[0] && cr_random(run, sizeof run) != 0) {
    snprintf(err, errlen, "no random bytes for its run id");
  } else if (!b->failed) {
    if (!a->run_id[0]) {
      int n = snprintf(a->run_id, sizeof a->run_id, "run-");
      for (size_t i = 0; i < sizeof run; i++) n += snprintf(a->run_id + n, sizeof a->run_id - (size_t)n, "%02x", run[i]);
    }
    seq = jr_append(a->pg->journal, a->run_id, NULL, kind, b->data, b->len, err, errlen);
  }
  sb_free(b);
  return seq > 0 ? 0 : -1;
}

/* `,"key":` and s as a JSON string (NULL: null) */
static void field(sb_buf *b, const char *key, const char *s) {
  sb_printf(b, ",\"%s\":", key);
  if (s) json_write_string(b, s, strlen(s));
  else sb_adds(b, "null");
}

int ak_journal_ask(ak_ask *a, char *err, size_t errlen) {
  if (!a->agent->durable) return 0;
  sb_buf b;
  sb_init(&b);
  sb_adds(&b, "{\"prompt\":");
  json_write_string(&b, a->prompt, a->prompt_len);
  field(&b, "agent", a->agent->name);
  field(&b, "model", a->pm->name);
  field(&b, "schema", a->schema ? a->schema->name : NULL);
  field(&b, "forced", a->forced ? a->forced->name : NULL);
  sb_addc(&b, '}');
  return append(a, "ask", &b, err, errlen);
}

int ak_journal_exchange(ak_ask *a, const ad_response *r, char *err, size_t errlen) {
  if (!a->agent->durable) return 0;
  sb_buf b;
  sb_init(&b);
  sb_printf(&b, "{\"turn\":%d,\"status\":%d,\"body\":", a->turns, r->status);
  json_write_string(&b, r->body ? r->body : "", r->body ? r->len : 0);
  sb_addc(&b, '}');
  return append(a, "exchange", &b, err, errlen);
}

int ak_journal_tools(ak_ask *a, char *err, size_t errlen) {
  if (!a->agent->durable) return 0;
  for (int i = 0; i < a->nslots; i++) {
    const ak_slot *s = &a->slots[i];
    const ad_call *call = i < a->turn.ncalls ? &a->turn.calls[i] : NULL;
    sb_buf b;
    sb_init(&b);
    sb_printf(&b, "{\"turn\":%d,\"error\":%s", a->turns, s->is_error ? "true" : "false");
    field(&b, "id", call ? call->id : NULL);
    field(&b, "name", call ? call->name : NULL);
    sb_adds(&b, ",\"content\":");
    if (s->content) sb_add(&b, s->content, s->len);
    else sb_adds(&b, "null");
    sb_addc(&b, '}');
    if (append(a, "tool", &b, err, errlen) != 0) return -1;
  }
  return 0;
}

int ak_journal_finish(ak_ask *a, char *err, size_t errlen) {
  /* an ask that ended before its first record has no run */
  if (!a->agent->durable || !a->run_id[0]) return 0;
  sb_buf b;
  sb_init(&b);
  sb_adds(&b, a->ok ? "{\"ok\":true}" : "{\"ok\":false}");
  return append(a, "finish", &b, err, errlen);
}
