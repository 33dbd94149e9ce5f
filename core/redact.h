/*
 * Secrets kept out of what luma writes down (Lua-free): the recordings of
 * the exchanges with providers (record.c) and the journals of durable asks
 * (askjournal.c). A secret is replaced by RD_MARKER wherever it occurs; one
 * shorter than RD_MIN bytes is not looked for (it would match ordinary text).
 */
#ifndef LUMA_REDACT_H
#define LUMA_REDACT_H

#include <stddef.h>

#include "arena.h"
#include "json.h"
#include "strbuf.h"

#define RD_MARKER "[REDACTED]"
#define RD_MIN 4

/* Appends s (len bytes) to out, every occurrence of each of the n secrets
   (NULL ones are skipped) replaced by RD_MARKER. */
void rd_text(sb_buf *out, const char *s, size_t len, const char *const *secrets, int n);
/* Whether any of the n secrets occurs in s. */
int rd_found(const char *s, size_t len, const char *const *secrets, int n);
/* Redacts every string in v, the members' keys too, in place (new text in
   a): 0, or -1 out of memory. */
int rd_json(ar_arena *a, jv *v, const char *const *secrets, int n);

#endif
