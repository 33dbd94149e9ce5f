/* The server-sent events reader (sse.h): a line at a time, with the line
   being read kept across pieces. */
#include "sse.h"

#include <stdio.h>
#include <string.h>

void sse_init(sse_reader *r, size_t max, sse_on_event on_event, void *ud) {
  memset(r, 0, sizeof *r);
  sb_init(&r->line);
  sb_init(&r->data);
  sb_init(&r->type);
  sb_init(&r->id);
  r->max = max;
  r->retry = -1;
  r->on_event = on_event;
  r->ud = ud;
}

void sse_free(sse_reader *r) {
  sb_free(&r->line);
  sb_free(&r->data);
  sb_free(&r->type);
  sb_free(&r->id);
}

int sse_pending(const sse_reader *r) {
  return r->data.len > 0 || r->started || r->has_type;
}

static int fail(sse_reader *r, const char *why) {
  r->failed = 1;
  snprintf(r->error, sizeof r->error, "%s", why);
  return 0;
}

static int too_long(sse_reader *r) {
  r->failed = 1;
  snprintf(r->error, sizeof r->error, "an event of the stream holds more than %zu bytes (sse_max_event_bytes)",
           r->max);
  return 0;
}

/* What the event being read holds, the line being read included. */
static size_t held(const sse_reader *r) {
  return r->line.len + r->data.len + r->type.len;
}

/* Bytes of the line being read (no CR or LF among them). */
static int add(sse_reader *r, const char *s, size_t n) {
  if (n == 0) return 1;
  if (!r->started) {
    r->started = 1;
    r->comment = s[0] == ':';
  }
  if (r->comment) return 1;
  if (n > r->max || held(r) > r->max - n) return too_long(r);
  sb_add(&r->line, s, n);
  return r->line.failed ? fail(r, "out of memory") : 1;
}

static int dispatch(sse_reader *r) {
  if (r->data.len == 0) {
    r->type.len = 0;
    r->has_type = 0;
    return 1;
  }
  r->data.len--;   /* the LF after the last data line */
  sse_event ev;
  ev.data = sb_str(&r->data);
  ev.len = r->data.len;
  ev.type = r->has_type && r->type.len ? sb_str(&r->type) : "message";
  ev.id = sb_str(&r->id);
  ev.retry = r->retry;
  if (r->data.failed || r->type.failed || r->id.failed) return fail(r, "out of memory");
  int go_on = r->on_event(r->ud, &ev);
  r->data.len = 0;
  r->type.len = 0;
  r->has_type = 0;
  if (!go_on) {
    r->failed = 1;
    r->error[0] = 0;
    return 0;
  }
  return 1;
}

static int field(sse_reader *r, const char *name, size_t nlen, const char *v, size_t vlen) {
  if (nlen == 4 && memcmp(name, "data", 4) == 0) {
    sb_add(&r->data, v, vlen);
    sb_addc(&r->data, '\n');
    if (r->data.failed) return fail(r, "out of memory");
  } else if (nlen == 5 && memcmp(name, "event", 5) == 0) {
    r->type.len = 0;
    sb_add(&r->type, v, vlen);
    r->has_type = 1;
    if (r->type.failed) return fail(r, "out of memory");
  } else if (nlen == 2 && memcmp(name, "id", 2) == 0) {
    if (!memchr(v, 0, vlen)) {
      r->id.len = 0;
      sb_add(&r->id, v, vlen);
      if (r->id.failed) return fail(r, "out of memory");
    }
  } else if (nlen == 5 && memcmp(name, "retry", 5) == 0) {
    long long ms = 0;
    size_t k = 0;
    while (k < vlen && k < 15 && v[k] >= '0' && v[k] <= '9') ms = ms * 10 + (v[k++] - '0');
    if (k == vlen && vlen > 0) r->retry = ms;
  }
  return 1;
}

/* The line ends: a blank one dispatches, a comment is dropped, any other
   is a field. */
static int end_line(sse_reader *r) {
  int started = r->started, comment = r->comment;
  r->started = r->comment = 0;
  if (!started) return dispatch(r);
  if (comment) return 1;
  const char *s = r->line.data;
  size_t n = r->line.len;
  r->line.len = 0;
  const char *colon = memchr(s, ':', n);
  size_t nlen = colon ? (size_t)(colon - s) : n;
  const char *v = colon ? colon + 1 : s + n;
  size_t vlen = colon ? n - nlen - 1 : 0;
  if (vlen && *v == ' ') v++, vlen--;
  if (!field(r, s, nlen, v, vlen)) return 0;
  if (held(r) > r->max) return too_long(r);
  return 1;
}

static int scan(sse_reader *r, const char *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (r->cr) {
      r->cr = 0;
      if (p[i] == '\n') { i++; continue; }
    }
    size_t j = i;
    while (j < n && p[j] != '\n' && p[j] != '\r') j++;
    if (!add(r, p + i, j - i)) return 0;
    if (j == n) break;
    r->cr = p[j] == '\r';
    i = j + 1;
    if (!end_line(r)) return 0;
  }
  return 1;
}

int sse_feed(sse_reader *r, const char *p, size_t n) {
  static const char bom[3] = { '\xEF', '\xBB', '\xBF' };
  if (r->failed) return 0;
  size_t i = 0;
  while (r->bom < 3 && i < n) {
    if (p[i] == bom[r->bom]) {
      r->bom++;
      i++;
      continue;
    }
    /* not a BOM: the bytes matched so far were the stream's */
    int k = r->bom;
    r->bom = 3;
    if (!scan(r, bom, (size_t)k)) return 0;
  }
  return scan(r, p + i, n - i);
}
