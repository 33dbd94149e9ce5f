#include "errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct le_entry {
  const char *name, *meaning, *tmpl;
  int retryable;
} le_entry;

static const le_entry entries[LE_NCODES] = {
#define LE_ENTRY_(name, retryable, meaning, tmpl) { #name, meaning, tmpl, retryable },
  LE_CODES(LE_ENTRY_)
#undef LE_ENTRY_
};

typedef struct le_message {
  le_code code;
  const char *tmpl;
} le_message;

static const le_message messages[LE_NMSGS] = {
#define LE_MSG_ENTRY_(name, code, tmpl) { LE_##code, tmpl },
  LE_MESSAGES(LE_MSG_ENTRY_)
#undef LE_MSG_ENTRY_
};

static const le_entry *entry(le_code code) {
  return (unsigned)code < LE_NCODES ? &entries[code] : NULL;
}

const char *le_name(le_code code) {
  const le_entry *e = entry(code);
  return e ? e->name : "ERROR";
}

const char *le_meaning(le_code code) {
  const le_entry *e = entry(code);
  return e ? e->meaning : "";
}

int le_default_retryable(le_code code) {
  const le_entry *e = entry(code);
  return e ? e->retryable : 0;
}

const char *le_template(le_code code) {
  const le_entry *e = entry(code);
  return e ? e->tmpl : NULL;
}

/* A linear scan: there are few codes, and a lookup happens once per error
   made from Lua without a retryable field. */
int le_lookup(const char *name, le_code *out) {
  if (!name) return 0;
  for (int i = 0; i < LE_NCODES; i++) {
    if (strcmp(entries[i].name, name) == 0) {
      if (out) *out = (le_code)i;
      return 1;
    }
  }
  return 0;
}

static void vformat(char *out, size_t n, const char *tmpl, va_list ap) {
  if (n == 0) return;
  if (!tmpl) { out[0] = '\0'; return; }
  vsnprintf(out, n, tmpl, ap);
}

const char *le_vformat(char *out, size_t n, le_code code, va_list ap) {
  vformat(out, n, le_template(code), ap);
  return le_name(code);
}

const char *le_format(char *out, size_t n, le_code code, ...) {
  va_list ap;
  va_start(ap, code);
  const char *name = le_vformat(out, n, code, ap);
  va_end(ap);
  return name;
}

le_code le_msg_code(le_msg msg) {
  return (unsigned)msg < LE_NMSGS ? messages[msg].code : LE_RUNTIME_ERROR;
}

const char *le_msg_template(le_msg msg) {
  return (unsigned)msg < LE_NMSGS ? messages[msg].tmpl : NULL;
}

le_code le_vformat_msg(char *out, size_t n, le_msg msg, va_list ap) {
  vformat(out, n, le_msg_template(msg), ap);
  return le_msg_code(msg);
}

le_code le_format_msg(char *out, size_t n, le_msg msg, ...) {
  va_list ap;
  va_start(ap, msg);
  le_code code = le_vformat_msg(out, n, msg, ap);
  va_end(ap);
  return code;
}
