/* Recording and replaying the exchanges with model providers. */
#include "record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "luma_limits.h"
#include "redact.h"
#include "transport.h"

#define RC_DEPTH 512            /* nesting of a recorded body */
#define RC_FILE_MAX (256u << 20) /* bytes of a recording */
#define RC_VERSION 2            /* the format this build writes and the latest it reads */
#define RC_PIECE_MAX 64         /* bytes of a piece of a replayed stream */

struct rc_recorder {
  FILE *f;
};

typedef struct rc_exchange {
  const jv *request;
  const jv *response;
  const char *body;           /* the request body as compact JSON text: most requests equal it */
  size_t body_len;
  int line;
  int stream;                 /* the request asked for a stream */
} rc_exchange;

struct rc_replay {
  ar_arena arena;
  rc_exchange *items;
  int n, next;
  char *path;
  unsigned long long rng;     /* the pieces' sizes (xorshift64) */
};

/* ------------------------------------------------------------ recording */

rc_recorder *rc_record_open(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "ab");
  if (!f) {
    snprintf(err, errlen, "cannot open the recording %s for writing", path);
    return NULL;
  }
  rc_recorder *r = calloc(1, sizeof *r);
  if (!r) {
    fclose(f);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  r->f = f;
  return r;
}

void rc_record_close(rc_recorder *r) {
  if (!r) return;
  fclose(r->f);
  free(r);
}

/* The text with every occurrence of secret replaced (redact.h). */
static jv *redacted(ar_arena *a, const char *s, size_t len, const char *secret) {
  sb_buf b;
  sb_init(&b);
  rd_text(&b, s, len, &secret, 1);
  jv *v = b.failed ? NULL : jv_strcopy(a, b.data ? b.data : "", b.len);
  sb_free(&b);
  return v;
}

static int is_auth_header(const char *name) {
  static const char *const auth[] = { "authorization", "api-key", "x-api-key", "x-goog-api-key", NULL };
  for (const char *const *h = auth; *h; h++)
    if (tp_equal_ci(name, strlen(name), *h)) return 1;
  return 0;
}

static jv *headers_obj(ar_arena *a, const ad_header *h, int n, const char *secret) {
  jv *o = jv_obj(a);
  for (int i = 0; i < n; i++) {
    char *name = ar_strdup(a, h[i].name);
    if (!name) return NULL;
    for (char *p = name; *p; p++)
      if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    if (jv_get(o, name)) continue;   /* a repeated header: the first is kept */
    jv_set(o, name, is_auth_header(name) ? jv_cstr(a, RD_MARKER) : redacted(a, h[i].value, strlen(h[i].value), secret));
  }
  return o;
}

/* A body as its JSON value when it is JSON, else as a string. */
static jv *body_value(ar_arena *a, const char *s, size_t len, const char *secret) {
  jv *text = redacted(a, s ? s : "", s ? len : 0, secret);
  if (!text) return NULL;
  char why[100];
  jv *v = text->len ? json_parse(a, text->s, text->len, RC_DEPTH, why, sizeof why) : NULL;
  return v ? v : text;
}

int rc_record(rc_recorder *r, const ad_request *req, const ad_response *resp, int stream, const char *secret,
              char *err, size_t errlen) {
  ar_arena a;
  ar_init(&a);
  jv *q = jv_obj(&a);
  jv_set(q, "method", jv_cstr(&a, req->method));
  jv_set(q, "url", redacted(&a, req->url, strlen(req->url), secret));
  jv_set(q, "headers", headers_obj(&a, req->headers, req->nheaders, secret));
  jv_set(q, "body", body_value(&a, req->body, req->len, secret));
  jv *p = jv_obj(&a);
  jv_set(p, "status", jv_int(&a, resp->status));
  jv_set(p, "headers", headers_obj(&a, resp->headers, resp->nheaders, secret));
  jv_set(p, "body", body_value(&a, resp->body, resp->len, secret));
  jv *line = jv_obj(&a);
  jv_set(line, "version", jv_int(&a, RC_VERSION));
  jv_set(line, "request", q);
  jv_set(line, "response", p);
  if (stream) jv_set(line, "stream", jv_bool(&a, 1));
  sb_buf b;
  sb_init(&b);
  if (!a.failed) jv_write(&b, line, 0);
  int bad = a.failed || b.failed;
  if (!bad) {
    sb_addc(&b, '\n');
    bad = b.failed || fwrite(b.data, 1, b.len, r->f) != b.len || fflush(r->f) != 0;
  }
  sb_free(&b);
  ar_free(&a);
  if (bad) snprintf(err, errlen, "cannot write the recording");
  return bad ? -1 : 0;
}

/* ------------------------------------------------------------ replaying */

static void show(const jv *v, char *out, size_t n);

void rc_replay_close(rc_replay *r) {
  if (!r) return;
  ar_free(&r->arena);
  free(r->items);
  free(r->path);
  free(r);
}

static int add_line(rc_replay *r, const char *s, size_t len, int line, int *cap, char *err, size_t errlen) {
  char why[200];
  jv *v = json_parse(&r->arena, s, len, RC_DEPTH, why, sizeof why);
  const jv *q = v && v->type == JV_OBJ ? jv_get(v, "request") : NULL;
  const jv *p = v && v->type == JV_OBJ ? jv_get(v, "response") : NULL;
  if (!v || !q || !p || q->type != JV_OBJ || p->type != JV_OBJ) {
    snprintf(err, errlen, "%s:%d: not a recorded exchange: %s", r->path, line,
             v ? "it needs the objects request and response" : why);
    return -1;
  }
  const jv *version = jv_get(v, "version");
  if (version && (version->type != JV_INT || version->i < 1 || version->i > RC_VERSION)) {
    char was[100];
    show(version, was, sizeof was);
    snprintf(err, errlen, "%s:%d: a recording of format version %s; this luma reads versions 1 to %d", r->path, line,
             was, RC_VERSION);
    return -1;
  }
  const jv *stream = jv_get(v, "stream");
  const jv *status = jv_get(p, "status");
  if (!status || status->type != JV_INT) {
    snprintf(err, errlen, "%s:%d: the response has no integer status", r->path, line);
    return -1;
  }
  if (r->n == *cap) {
    *cap = *cap ? *cap * 2 : 16;
    rc_exchange *items = realloc(r->items, sizeof *items * (size_t)*cap);
    if (!items) { snprintf(err, errlen, "out of memory"); return -1; }
    r->items = items;
  }
  const jv *body = jv_get(q, "body");
  size_t body_len = 0;
  const char *text = NULL;
  if (body) {
    sb_buf b;
    sb_init(&b);
    if (body->type == JV_STR) sb_add(&b, body->s, body->len); else jv_write(&b, body, 0);
    text = b.failed ? NULL : ar_strndup(&r->arena, sb_str(&b), b.len);
    body_len = b.len;
    sb_free(&b);
  }
  r->items[r->n++] = (rc_exchange){ q, p, text, body_len, line, stream && stream->type == JV_BOOL && stream->b };
  return 0;
}

rc_replay *rc_replay_open(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot open the recording %s", path);
    return NULL;
  }
  rc_replay *r = calloc(1, sizeof *r);
  sb_buf b;
  sb_init(&b);
  char chunk[65536];
  size_t got;
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0 && b.len < RC_FILE_MAX) sb_add(&b, chunk, got);
  int bad = ferror(f) || b.failed || !r;
  fclose(f);
  if (bad || !(r->path = strdup(path))) {
    snprintf(err, errlen, "cannot read the recording %s", path);
    sb_free(&b);
    rc_replay_close(r);
    return NULL;
  }
  ar_init(&r->arena);
  rc_replay_seed(r, RC_SEED_DEFAULT);
  int cap = 0, line = 0;
  const char *s = b.data ? b.data : "", *end = s + b.len;
  while (s < end) {
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    const char *e = nl ? nl : end;
    line++;
    size_t len = (size_t)(e - s);
    int blank = 1;
    for (size_t i = 0; i < len; i++)
      if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') blank = 0;
    if (!blank && add_line(r, s, len, line, &cap, err, errlen) != 0) {
      sb_free(&b);
      rc_replay_close(r);
      return NULL;
    }
    s = nl ? nl + 1 : end;
  }
  sb_free(&b);
  return r;
}

/* Writes a short form of v for a message. */
static void show(const jv *v, char *out, size_t n) {
  sb_buf b;
  sb_init(&b);
  if (v) jv_write(&b, v, 0); else sb_adds(&b, "nothing");
  const char *s = sb_str(&b);
  if (strlen(s) > 80) snprintf(out, n, "%.77s...", s);
  else snprintf(out, n, "%s", s);
  sb_free(&b);
}

static int numeric(const jv *v, double *d) {
  if (v->type == JV_INT) { *d = (double)v->i; return 1; }
  if (v->type == JV_NUM) { *d = v->n; return 1; }
  return 0;
}

/* The path of the first difference between a (recorded) and b (sent), or
   "" when they are equal. */
static int differs(const jv *a, const jv *b, sb_buf *path) {
  double x, y;
  if (numeric(a, &x) && numeric(b, &y)) return !(x == y && (a->type == b->type || x == (double)(long long)x));
  if (a->type != b->type) return 1;
  switch (a->type) {
    case JV_NULL: return 0;
    case JV_BOOL: return a->b != b->b;
    case JV_STR: return a->len != b->len || memcmp(a->s, b->s, a->len) != 0;
    case JV_ARR: {
      if (a->count != b->count) return 1;
      int i = 0;
      for (const jv *p = a->first, *q = b->first; p && q; p = p->next, q = q->next, i++) {
        size_t mark = path->len;
        sb_printf(path, "[%d]", i);   /* JSON's own index, from 0 */
        if (differs(p, q, path)) return 1;
        path->len = mark;
      }
      return 0;
    }
    case JV_OBJ: {
      for (const jv *p = a->first; p; p = p->next) {
        size_t mark = path->len;
        sb_printf(path, ".%s", p->key);
        const jv *q = jv_get(b, p->key);
        if (!q || differs(p, q, path)) return 1;
        path->len = mark;
      }
      for (const jv *q = b->first; q; q = q->next)
        if (!jv_get(a, q->key)) {
          sb_printf(path, ".%s", q->key);
          return 1;
        }
      return 0;
    }
    default: return 0;
  }
}

/* The value at a path of the form written by differs, for the message. */
static const jv *at(const jv *v, const char *path) {
  while (v && *path) {
    if (*path == '.') {
      const char *e = path + 1;
      while (*e && *e != '.' && *e != '[') e++;
      char key[256];
      snprintf(key, sizeof key, "%.*s", (int)(e - path - 1), path + 1);
      v = v->type == JV_OBJ ? jv_get(v, key) : NULL;
      path = e;
    } else if (*path == '[') {
      int i = atoi(path + 1);
      const jv *p = v->type == JV_ARR ? v->first : NULL;
      while (p && i-- > 0) p = p->next;
      v = p;
      path = strchr(path, ']');
      path = path ? path + 1 : "";
    } else {
      return NULL;
    }
  }
  return v;
}

static int serve(rc_replay *r, const rc_exchange *x, ad_response *out, char *err, size_t errlen);

int rc_replay_next(rc_replay *r, const ad_request *req, ad_response *out, char *err, size_t errlen) {
  int k = r->next + 1;
  if (r->next >= r->n) {
    snprintf(err, errlen, "%s holds %d exchanges; request %d (%s %s) is not in it", r->path, r->n, k, req->method,
             req->url);
    return -1;
  }
  const rc_exchange *x = &r->items[r->next];
  const jv *method = jv_get(x->request, "method"), *url = jv_get(x->request, "url");
  if (!method || method->type != JV_STR || strcmp(method->s, req->method) != 0 || !url || url->type != JV_STR ||
      strcmp(url->s, req->url) != 0) {
    snprintf(err, errlen, "request %d differs from %s:%d: recorded %s %s, sent %s %s", k, r->path, x->line,
             method && method->type == JV_STR ? method->s : "?", url && url->type == JV_STR ? url->s : "?",
             req->method, req->url);
    return -1;
  }
  if (x->body && x->body_len == req->len && memcmp(x->body, req->body, req->len) == 0) return serve(r, x, out, err, errlen);
  char why[100];
  jv *sent = req->len ? json_parse(&r->arena, req->body, req->len, RC_DEPTH, why, sizeof why) : NULL;
  if (!sent) sent = jv_str(&r->arena, req->body ? req->body : "", req->len);
  const jv *recorded = jv_get(x->request, "body");
  sb_buf path;
  sb_init(&path);
  sb_adds(&path, "body");
  if (!recorded || differs(recorded, sent, &path)) {
    char was[100], now[100];
    const char *p = sb_str(&path);
    show(recorded ? at(recorded, p + 4) : NULL, was, sizeof was);
    show(at(sent, p + 4), now, sizeof now);
    snprintf(err, errlen, "request %d differs from %s:%d at %s: recorded %s, sent %s", k, r->path, x->line, p, was, now);
    sb_free(&path);
    return -1;
  }
  sb_free(&path);
  return serve(r, x, out, err, errlen);
}

/* The recorded response of x, and the replay moves on. */
static int serve(rc_replay *r, const rc_exchange *x, ad_response *out, char *err, size_t errlen) {
  const jv *hs = jv_get(x->response, "headers");
  int nh = hs && hs->type == JV_OBJ ? hs->count : 0;
  ad_header *h = ar_alloc(&r->arena, sizeof *h * (size_t)(nh ? nh : 1));
  int i = 0;
  for (const jv *p = nh ? hs->first : NULL; p && h; p = p->next)
    if (p->type == JV_STR) h[i++] = (ad_header){ p->key, p->s };
  const jv *body = jv_get(x->response, "body");
  const char *text = "";
  size_t len = 0;
  if (body && body->type == JV_STR) {
    text = body->s;
    len = body->len;
  } else if (body) {
    sb_buf b;
    sb_init(&b);
    jv_write(&b, body, 0);
    text = ar_strndup(&r->arena, sb_str(&b), b.len);
    len = b.len;
    sb_free(&b);
  }
  if (!h || !text || r->arena.failed) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  *out = (ad_response){ (int)jv_get(x->response, "status")->i, h, i, text, len, 0 };
  r->next++;
  return 0;
}

int rc_replay_streamed(const rc_replay *r) {
  return r->next < r->n && r->items[r->next].stream;
}

int rc_replay_is_stream(const ad_response *resp) {
  if (resp->status < 200 || resp->status >= 300) return 0;
  for (int i = 0; i < resp->nheaders; i++)
    if (tp_equal_ci(resp->headers[i].name, strlen(resp->headers[i].name), "content-type") &&
        tp_prefix_ci(resp->headers[i].value, strlen(resp->headers[i].value), "text/event-stream"))
      return 1;
  return 0;
}

void rc_replay_seed(rc_replay *r, unsigned long long seed) {
  /* splitmix64 of the seed: any seed, 0 too, gives a good start */
  unsigned long long z = seed + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  r->rng = (z ^ (z >> 31)) | 1;
}

size_t rc_replay_piece(rc_replay *r, size_t left) {
  r->rng ^= r->rng << 13;
  r->rng ^= r->rng >> 7;
  r->rng ^= r->rng << 17;
  size_t n = 1 + (size_t)(r->rng % RC_PIECE_MAX);
  return n < left ? n : left;
}
