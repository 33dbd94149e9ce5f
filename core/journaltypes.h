/*
 * The journal's types (journal.h is its contract): a header of types only,
 * so that the back ends (journal_sqlite.c, journal_redis.c) use them
 * without depending on journal.c, which opens them.
 */
#ifndef LUMA_JOURNALTYPES_H
#define LUMA_JOURNALTYPES_H

#include <stddef.h>

#define JR_FORMAT 1
#define JR_LOST (-2)            /* jr_append, jr_cut: another owner holds the run */

typedef struct jr_journal jr_journal;

/* Where a journal is: exactly one of path and url. */
typedef struct jr_options {
  const char *path;           /* a SQLite file */
  const char *url;            /* redis://[user:password@]host:port/db */
  const char *password;       /* Redis: overrides the url's, or NULL */
  const char *prefix;         /* Redis: of every key; NULL: "luma:" */
  int sync;                   /* SQLite: 1, synchronous FULL */
} jr_options;

/* One record to append (jr_append_batch): its kind and body (one JSON
   value, len bytes). */
typedef struct jr_record {
  const char *kind;
  const char *body;
  size_t len;
} jr_record;

/* What jr_read found. */
typedef struct jr_status {
  long long whole;            /* records read whole, from seq 1 */
  long long torn;             /* records after them that are not (0: none) */
} jr_status;

typedef enum jr_state {
  JR_RUNNING = 1,
  JR_AWAITING_APPROVAL,
  JR_COMPLETED,
  JR_FAILED,
} jr_state;

typedef struct jr_run {
  char id[64];
  jr_state state;
  int abandoned;              /* running, and its owner's lease has ended */
  char step[96];              /* where it is, as its owner last said */
  char owner[128];            /* its owner, or its last ("" for none) */
  long long created_ms, updated_ms, lease_until_ms;
  long long records;          /* its records, whole or not */
} jr_run;

#endif
