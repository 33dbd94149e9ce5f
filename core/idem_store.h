/*
 * Inside the memory and file idempotency stores: the store handle, its
 * records and their table (idem.c), and the file store's side of a call
 * (idem_file.c). The other back ends see only idemint.h.
 */
#ifndef LUMA_IDEM_STORE_H
#define LUMA_IDEM_STORE_H

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "idemint.h"

/* One record, keyed by "tool NUL key" (a tool name holds no NUL). A done
   record has a result and an expiry; a pending one (a claim) has an owner. */
typedef struct id_rec {
  char *k;
  size_t klen;
  char hash[65];
  int pending;
  long long at;               /* created_at when done, claimed_at when pending */
  long long expires_at;       /* done */
  char *result;               /* done: compact JSON text, NUL-terminated */
  size_t result_len;
  long long pid, start;       /* pending, file store: owner process and its start time */
  char token[17];             /* pending, file store: the owner's store handle */
  struct id_rec *next;
} id_rec;

/* Chained hash table; cap is a power of two, or 0 when empty. */
typedef struct id_table {
  id_rec **slots;
  size_t cap, n;
} id_table;

struct id_store {
  const id_ops *ops;          /* another back end (idemint.h), or NULL */
  void *impl;
  pthread_mutex_t lock;       /* guards every field below */
  id_table t;                 /* memory: the records; file: the file's records as of the last load */
  int file;
  char *path, *lockpath, *dir, *base;
  int lockfd;
  pid_t pid;                  /* the process that lockfd and our claims belong to */
  long long start;            /* its start time, 0 when /proc is unreadable */
  char token[17];
  char *pass;                 /* NULL: plain file */
  size_t passlen;
  unsigned iterations;        /* of the key below, or for a new file when there is none */
  unsigned char salt[16], key[32];
  int have_key;
  /* t is the file with this identity and lock generation; the generation
     catches a rewrite that reused inode, size and mtime */
  int cached;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
  unsigned long long gen;
  unsigned long long lockgen; /* read from the lock file when it was taken */
  size_t expired;             /* records the last read of the file left out */
  int quarantines;
  char *quarantine;
};

/* idem.c: records and the table (keys are "tool NUL key") */
id_rec *id_rec_new(const char *k, size_t klen, const char *hash);
void id_rec_free(id_rec *r);
id_rec *id_tb_find(id_table *t, const char *k, size_t len);
/* Adds r, whose key must not be present; returns 0 when memory runs out. */
int id_tb_add(id_table *t, id_rec *r);
void id_tb_drop(id_table *t, id_rec *r);
void id_tb_free(id_table *t);
/* Whether s[0..len) is lowercase hex digits. */
int id_hex_ok(const char *s, size_t len);
/* Whether the process that made the claim r still runs. */
int id_owner_alive(const id_store *s, const id_rec *r);
id_store *id_store_new(int file);
void id_store_free(id_store *s);

/* idem_file.c, called with s->lock held: takes the lock file and makes s->t
   the file's records as of now (0), or -1 with err and the lock file not
   held; writes s->t to the file (0, or -1 with err); lets the lock file go. */
int id_file_enter(id_store *s, long long now, char *err, size_t errlen);
int id_file_save(id_store *s, char *err, size_t errlen);
void id_file_unlock(id_store *s);

#endif
