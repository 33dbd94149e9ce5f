/* The adapters' entry points: the family of a model, the conversation, the
   shared request pieces, and what every family does alike with responses
   (statuses, retries, Retry-After). */
#include "common.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "luma_limits.h"

const ad_provider_info ad_providers[AD_NPROVIDERS] = {
#define AD_PROVIDER_INFO_(id, name, family, key_env, base_url, responses) { name, key_env, base_url, responses },
  AD_PROVIDERS(AD_PROVIDER_INFO_)
#undef AD_PROVIDER_INFO_
};

const char *const ad_provider_names[AD_NPROVIDERS + 1] = {
#define AD_PROVIDER_NAME_(id, name, family, key_env, base_url, responses) name,
  AD_PROVIDERS(AD_PROVIDER_NAME_)
#undef AD_PROVIDER_NAME_
  NULL
};

const char *const ad_api_names[] = { "chat", "responses", NULL };

static const ad_family *const families[AD_NPROVIDERS] = {
#define AD_PROVIDER_FAMILY_(id, name, family, key_env, base_url, responses) &family,
  AD_PROVIDERS(AD_PROVIDER_FAMILY_)
#undef AD_PROVIDER_FAMILY_
};

static const ad_family *family(const ad_model *m) {
  if (m->api == AD_RESPONSES && ad_providers[m->provider].responses) return &ad_openai_responses;
  return families[m->provider];
}

/* ------------------------------------------------------- conversation */

void ad_conv_init(ad_conv *c, const ad_model *m) {
  memset(c, 0, sizeof *c);
  c->model = m;
  sb_init(&c->system);
  sb_init(&c->items);
  sb_init(&c->container);
}

void ad_conv_free(ad_conv *c) {
  sb_free(&c->system);
  sb_free(&c->items);
  sb_free(&c->container);
}

int ad_conv_ok(const ad_conv *c) {
  return !c->system.failed && !c->items.failed && !c->container.failed;
}

void ad_conv_system(ad_conv *c, const char *text, size_t len) {
  c->system.len = 0;
  json_write_string(&c->system, text, len);
}

void ad_conv_user(ad_conv *c, const char *text, size_t len) {
  family(c->model)->user(c, text, len);
}

void ad_conv_turn(ad_conv *c, const ad_turn *t) {
  if (t->container) {
    c->container.len = 0;
    json_write_string(&c->container, t->container, strlen(t->container));
  }
  if (t->echo) family(c->model)->turn(c, t);
}

void ad_conv_results(ad_conv *c, const ad_turn *t, const ad_result *results) {
  family(c->model)->results(c, t, results);
}

void ad_item_begin(ad_conv *c) {
  if (c->nitems++) sb_addc(&c->items, ',');
}

void ad_item_json(ad_conv *c, const jv *v) {
  ad_item_begin(c);
  jv_write(&c->items, v, 0);
}

void ad_item_user(ad_conv *c, const char *text, size_t len) {
  ad_item_begin(c);
  sb_adds(&c->items, "{\"role\":\"user\",\"content\":");
  json_write_string(&c->items, text, len);
  sb_addc(&c->items, '}');
}

void ad_items_results(ad_conv *c, const ad_turn *t, const ad_result *r, const char *head, const char *id_key,
                      const char *content_key) {
  for (int i = 0; i < t->ncalls; i++) {
    const char *id = t->calls[i].id ? t->calls[i].id : "";
    ad_item_begin(c);
    sb_printf(&c->items, "{%s\"%s\":", head, id_key);
    json_write_string(&c->items, id, strlen(id));
    sb_printf(&c->items, ",\"%s\":", content_key);
    json_write_string(&c->items, r[i].content ? r[i].content : "", r[i].content ? r[i].len : 0);
    sb_addc(&c->items, '}');
  }
}

/* ------------------------------------------------------------ requests */

void ad_write_tools(sb_buf *b, ar_arena *a, const ad_ask *q, const char *open, const char *params_key,
                    ad_dialect dialect, const char *close) {
  for (int i = 0; i < q->ntools; i++) {
    if (i) sb_addc(b, ',');
    sb_adds(b, open);
    ad_write_decl(b, a, &q->tools[i], params_key, dialect);
    if (q->tools[i].deferred) sb_adds(b, ",\"defer_loading\":true");
    sb_adds(b, close);
  }
}

void ad_write_choice(sb_buf *b, const ad_ask *q, const char *const words[3], const char *tool_open,
                     const char *tool_close) {
  switch (q->choice) {
    case AD_CHOICE_REQUIRED: sb_adds(b, words[1]); break;
    case AD_CHOICE_NONE: sb_adds(b, words[2]); break;
    case AD_CHOICE_TOOL:
      sb_adds(b, tool_open);
      json_write_string(b, q->choice_tool, strlen(q->choice_tool));
      sb_adds(b, tool_close);
      break;
    default: sb_adds(b, words[0]); break;
  }
}

void ad_write_decl(sb_buf *b, ar_arena *a, const ad_tool *t, const char *params_key, ad_dialect dialect) {
  sb_adds(b, "\"name\":");
  json_write_string(b, t->name, strlen(t->name));
  if (t->description && *t->description) {
    sb_adds(b, ",\"description\":");
    json_write_string(b, t->description, strlen(t->description));
  }
  sb_printf(b, ",\"%s\":", params_key);
  jv_write(b, dialect(a, t->parameters), 0);
}

char *ad_url(ar_arena *a, const char *base, const char *fallback, const char *path) {
  const char *b = base && *base ? base : fallback;
  size_t n = strlen(b);
  while (n > 0 && b[n - 1] == '/') n--;
  return ar_printf(a, "%.*s%s", (int)n, b, path);
}

void ad_headers(const ad_model *m, ar_arena *a, ad_request *out, const char *auth_name, const char *auth_value,
                const char *const *extra) {
  int n = 1 + (auth_name ? 1 : 0) + m->nheaders;
  for (const char *const *e = extra; e && *e; e += 2) n++;
  ad_header *h = ar_alloc(a, sizeof *h * (size_t)n);
  out->headers = h;
  out->nheaders = 0;
  if (!h) return;
  h[out->nheaders++] = (ad_header){ "Content-Type", "application/json" };
  if (auth_name) h[out->nheaders++] = (ad_header){ auth_name, auth_value };
  for (const char *const *e = extra; e && *e; e += 2) h[out->nheaders++] = (ad_header){ e[0], e[1] };
  for (int i = 0; i < m->nheaders; i++) h[out->nheaders++] = m->headers[i];
}

void ad_body(ar_arena *a, ad_request *out, sb_buf *b) {
  out->body = b->failed ? NULL : ar_strndup(a, b->data ? b->data : "", b->len);
  out->len = b->len;
  sb_free(b);
}

int ad_valid_tool_name(const char *name) {
  if (!name || !(isalpha((unsigned char)*name) || *name == '_')) return 0;
  size_t n = 1;
  for (const char *p = name + 1; *p; p++, n++)
    if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '-')) return 0;
  return n <= 64;
}

int ad_check_tools(const ad_ask *q, char *err, size_t errlen) {
  int forced_found = 0;
  for (int i = 0; i < q->ntools; i++) {
    if (!ad_valid_tool_name(q->tools[i].name)) {
      snprintf(err, errlen, "the tool name '%s' is not one providers accept (^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$)",
               q->tools[i].name ? q->tools[i].name : "");
      return 0;
    }
    if (q->choice == AD_CHOICE_TOOL && q->choice_tool && strcmp(q->tools[i].name, q->choice_tool) == 0) forced_found = 1;
  }
  if (q->choice == AD_CHOICE_TOOL && !forced_found) {
    snprintf(err, errlen, "the forced tool '%s' is not among the tools sent", q->choice_tool ? q->choice_tool : "");
    return 0;
  }
  if (q->final_schema && q->final_name && !ad_valid_tool_name(q->final_name)) {
    snprintf(err, errlen, "the schema name '%s' is not one providers accept", q->final_name);
    return 0;
  }
  return 1;
}

int ad_build(const ad_conv *c, const ad_ask *ask, ar_arena *a, ad_request *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  out->method = "POST";
  if (!ad_check_tools(ask, err, errlen)) return 0;
  if (!ad_conv_ok(c)) {
    snprintf(err, errlen, "out of memory");
    return 0;
  }
  if (!family(c->model)->build(c, ask, a, out, err, errlen)) return 0;
  if (a->failed || !out->url || !out->body || !out->headers) {
    snprintf(err, errlen, "out of memory");
    return 0;
  }
  return 1;
}

/* ------------------------------------------------------------ responses */

const jv *ad_get(const jv *o, const char *key, jv_type type) {
  const jv *v = o && o->type == JV_OBJ ? jv_get(o, key) : NULL;
  return v && v->type == type ? v : NULL;
}

const char *ad_str(const jv *o, const char *key) {
  const jv *v = ad_get(o, key, JV_STR);
  return v ? v->s : NULL;
}

long long ad_int(const jv *o, const char *key, long long fallback) {
  const jv *v = o && o->type == JV_OBJ ? jv_get(o, key) : NULL;
  if (v && v->type == JV_INT) return v->i;
  /* a number past a long long's range is held at its end (casting it is
     undefined); NaN is no number */
  if (v && v->type == JV_NUM && v->n == v->n) {
    if (v->n >= 9223372036854775807.0) return LLONG_MAX;
    if (v->n <= -9223372036854775807.0) return LLONG_MIN;
    return (long long)v->n;
  }
  return fallback;
}

const char *ad_json_text(ar_arena *a, const jv *v, size_t *len) {
  sb_buf b;
  sb_init(&b);
  jv_write(&b, v, 0);
  const char *s = b.failed ? NULL : ar_strndup(a, b.data ? b.data : "", b.len);
  *len = b.len;
  sb_free(&b);
  return s;
}

void ad_add_text(ar_arena *a, ad_turn *t, const char *s, size_t len) {
  char *joined = ar_alloc(a, t->text_len + len + 1);
  if (!joined) return;
  if (t->text) memcpy(joined, t->text, t->text_len);
  memcpy(joined + t->text_len, s, len);
  t->text = joined;
  t->text_len += len;
}

jv *ad_share(ar_arena *a, const jv *v) {
  if (!v) return NULL;
  jv *n = ar_alloc(a, sizeof *n);
  if (!n) return NULL;
  *n = *v;
  n->key = NULL;
  n->next = NULL;
  return n;
}

int ad_calls_alloc(ar_arena *a, ad_turn *t, int n) {
  t->calls = n ? ar_alloc(a, sizeof *t->calls * (size_t)n) : NULL;
  t->ncalls = 0;
  return n == 0 || t->calls != NULL;
}

static const char *header(const ad_response *r, const char *name) {
  size_t n = strlen(name);
  for (int i = 0; i < r->nheaders; i++) {
    const char *h = r->headers[i].name;
    if (strlen(h) != n) continue;
    size_t k = 0;
    while (k < n && tolower((unsigned char)h[k]) == name[k]) k++;
    if (k == n) return r->headers[i].value;
  }
  return NULL;
}

static int month_of(const char *s) {
  static const char *const months[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
  for (int i = 0; i < 12; i++)
    if (strncmp(s, months[i], 3) == 0) return i;
  return -1;
}

/* Days from 1970-01-01 to a civil date (Howard Hinnant's algorithm). */
static long long days_from_civil(long long y, int m, int d) {
  y -= m <= 2;
  long long era = (y >= 0 ? y : y - 399) / 400;
  long long yoe = y - era * 400;
  long long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

/* A wait the provider asks for, v units of unit_ms each, in ms: -1 (ignored)
   unless v is a number >= 0 shorter than LIM_RETRY_AFTER_MAX_MS. */
static long long delay_ms(const char *v, double unit_ms) {
  while (*v == ' ') v++;
  if (!isdigit((unsigned char)*v)) return -1;
  char *end;
  double ms = strtod(v, &end) * unit_ms;
  while (*end == ' ') end++;
  return *end == 0 && ms < LIM_RETRY_AFTER_MAX_MS ? (long long)ms : -1;
}

/* Retry-After: delta seconds, or an IMF-fixdate ("Wed, 21 Oct 2015 07:28:00
   GMT"), whose fields are read with their width: a longer year would
   overflow the milliseconds. */
static long long retry_after(const char *v, long long now_ms) {
  while (*v == ' ') v++;
  if (isdigit((unsigned char)*v)) return delay_ms(v, 1000);
  char wd[4], mon[4];
  int d, y, hh, mm, ss;
  if (sscanf(v, "%3s, %2d %3s %4d %2d:%2d:%2d", wd, &d, mon, &y, &hh, &mm, &ss) != 7) return -1;
  int m = month_of(mon);
  if (m < 0 || d < 1 || d > 31 || y < 0 || hh < 0 || hh > 23 || mm < 0 || mm > 59 || ss < 0 || ss > 60) return -1;
  long long t = (days_from_civil(y, m + 1, d) * 86400 + hh * 3600 + mm * 60 + ss) * 1000;
  long long wait = t - now_ms;
  if (wait >= LIM_RETRY_AFTER_MAX_MS) return -1;
  return wait < 0 ? 0 : wait;
}

static int retryable_status(int status) {
  return status == 408 || status == 409 || status == 429 || (status >= 500 && status <= 599);
}

/* A short, printable excerpt of a body that is not what was expected. */
static void excerpt(const char *body, size_t len, char *out, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < len && k + 4 < n && i < 120; i++) {
    unsigned char ch = (unsigned char)body[i];
    out[k++] = ch >= 0x20 && ch < 0x7f ? (char)ch : ' ';
  }
  if (len > 120 && k + 4 < n) { out[k++] = '.'; out[k++] = '.'; out[k++] = '.'; }
  out[k] = 0;
}

static const char *provider_name(const ad_model *m) {
  return (unsigned)m->provider < AD_NPROVIDERS ? ad_providers[m->provider].name : "provider";
}

/* s with every occurrence of the key replaced: a provider may quote it back. */
static const char *redact(ar_arena *a, const char *s, const char *key) {
  size_t k = key ? strlen(key) : 0;
  if (!s || k < 4 || !strstr(s, key)) return s;
  sb_buf b;
  sb_init(&b);
  for (const char *p = s; *p;) {
    if (strncmp(p, key, k) == 0) {
      sb_adds(&b, "[REDACTED]");
      p += k;
    } else {
      sb_addc(&b, *p++);
    }
  }
  const char *out = b.failed ? "the provider answered with an error" : ar_strdup(a, sb_str(&b));
  sb_free(&b);
  return out ? out : "the provider answered with an error";
}

static int parse(const ad_model *m, const ad_response *r, ar_arena *a, ad_turn *turn, ad_error *err);

int ad_parse(const ad_model *m, const ad_response *r, ar_arena *a, ad_turn *turn, ad_error *err) {
  int ok = parse(m, r, a, turn, err);
  if (!ok) err->message = redact(a, err->message, m->api_key);
  return ok;
}

static int parse(const ad_model *m, const ad_response *r, ar_arena *a, ad_turn *turn, ad_error *err) {
  memset(turn, 0, sizeof *turn);
  turn->input_tokens = turn->output_tokens = -1;
  memset(err, 0, sizeof *err);
  err->status = r->status;
  err->retry_after_ms = -1;
  const ad_family *f = family(m);
  char why[200] = "";
  jv *body = r->len ? json_parse(a, r->body, r->len, LIM_MODEL_JSON_DEPTH, why, sizeof why) : NULL;
  if (r->status < 200 || r->status >= 300) {
    const char *message = NULL, *type = NULL;
    long long delay = -1;
    if (body) f->error_of(body, &message, &type, &delay);
    err->code = LE_ASK_PROVIDER_ERROR;
    err->type = type;
    char ex[160];
    excerpt(r->body ? r->body : "", r->len, ex, sizeof ex);
    err->message = message ? ar_printf(a, "%s answered %d: %s", provider_name(m), r->status, message)
                           : ar_printf(a, "%s answered %d with %s%s%s", provider_name(m), r->status,
                                       r->len ? "a body that is not its JSON error: " : "an empty body",
                                       r->len ? ex : "", "");
    err->retryable = retryable_status(r->status);
    if (r->status == 429 && type && strstr(type, "insufficient_quota")) err->retryable = 0;
    const char *should = header(r, "x-should-retry");
    if (should && strcmp(should, "true") == 0) err->retryable = 1;
    if (should && strcmp(should, "false") == 0) err->retryable = 0;
    const char *ms = header(r, "retry-after-ms"), *after = header(r, "retry-after");
    /* the first of these that says a wait: a header that cannot be read
       leaves the body's */
    long long asked = ms ? delay_ms(ms, 1) : -1;
    if (asked < 0 && after) asked = retry_after(after, r->now_ms);
    err->retry_after_ms = asked >= 0 ? asked : delay;
    if (r->status == 400 && type && strcmp(type, "content_filter") == 0) {
      /* azure's filter refused the prompt: a safety block, never retried */
      err->code = LE_ASK_BLOCKED;
      err->retryable = 0;
      err->message = ar_printf(a, "the provider's safety filter blocked the prompt (%s answered 400 content_filter%s%s)",
                               provider_name(m), message ? ": " : "", message ? message : "");
    }
    if (!err->message) err->message = "the provider answered with an error";
    return 0;
  }
  err->code = LE_ASK_RESPONSE_INVALID;
  if (!body) {
    char ex[160];
    excerpt(r->body ? r->body : "", r->len, ex, sizeof ex);
    err->message = r->len ? ar_printf(a, "%s's response is not JSON (%s): %s", provider_name(m), why, ex)
                          : ar_printf(a, "%s's response is empty", provider_name(m));
    if (!err->message) err->message = "the response is not JSON";
    return 0;
  }
  return ad_turn_of_body(m, body, a, turn, err);
}

/* The turn of a 2xx body (a response, or the one a stream stands for). */
int ad_turn_of_body(const ad_model *m, const jv *body, ar_arena *a, ad_turn *turn, ad_error *err) {
  char why[200] = "";
  err->code = LE_ASK_RESPONSE_INVALID;
  if (body->type != JV_OBJ) {
    err->message = ar_printf(a, "%s's response is not a JSON object", provider_name(m));
    if (!err->message) err->message = "the response is not a JSON object";
    return 0;
  }
  if (!family(m)->turn_of(body, a, turn, why, sizeof why)) {
    err->message = ar_printf(a, "%s's response cannot be read: %s", provider_name(m), why);
    if (!err->message) err->message = "the response cannot be read";
    return 0;
  }
  if (a->failed) {
    err->message = "out of memory";
    return 0;
  }
  if (turn->ncalls > 0 && turn->stop == AD_STOP_END) turn->stop = AD_STOP_TOOLS;
  return 1;
}

const ad_family *ad_family_of(const ad_model *m) {
  return family(m);
}

const char *ad_provider_name(const ad_model *m) {
  return provider_name(m);
}

int ad_retryable_status(int status) {
  return retryable_status(status);
}

const char *ad_redact(ar_arena *a, const char *s, const char *key) {
  return redact(a, s, key);
}

void ad_excerpt(const char *body, size_t len, char *out, size_t n) {
  excerpt(body, len, out, n);
}

long long ad_retry_delay(const ad_error *e, int attempt, double jitter) {
  if (e->retry_after_ms >= 0) return e->retry_after_ms;
  if (jitter < 0.5) jitter = 0.5;
  if (jitter > 1) jitter = 1;
  long long d = 500;
  for (int i = 0; i < attempt && d < 8000; i++) d *= 2;
  if (d > 8000) d = 8000;
  return (long long)((double)d * jitter);
}
