/*
 * The file store of idempotency records (idem.h): one JSON file, rewritten
 * whole under a lock file on every write (temp file, fsync, rename), optionally
 * encrypted per file with AES-256-GCM; a corrupt file is moved aside. Its
 * records sit in a table of idem.c (idemint.h), as the memory store's do.
 */
#define _DEFAULT_SOURCE

#include "idem_file.h"
#include "idemint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "crypto.h"
#include "json.h"
#include "utf8.h"
#include "strbuf.h"

#define ID_FORMAT "luma-idempotency"
#define ID_VERSION 1
#define ID_CIPHER "aes-256-gcm"
#define ID_KDF "pbkdf2-sha256"

#define seterr id_seterr

typedef struct fs_store {
  pthread_mutex_t lock;       /* guards every field below */
  id_table t;                 /* the file's records as of the last load */
  id_owner me;                /* pid: the process that lockfd and our claims belong to */
  char *path, *lockpath, *dir, *base;
  int lockfd;
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
} fs_store;

/* id_keep looks at a claim held by a running handler every third of this. */
#define FS_CHECK_MS 3000

static int syserr(const fs_store *s, char *err, size_t errlen, const char *what) {
  seterr(err, errlen, "idempotency store %s: %s: %s", s->path, what, strerror(errno));
  return -1;
}

static char *str_printf(const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 1, 2)))
#endif
  ;

static char *str_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = n < 0 ? NULL : malloc((size_t)n + 1);
  if (!p) return NULL;
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}


static void put_key(sb_buf *b, const id_rec *r) {
  size_t tl = strlen(r->k);
  const char *key = r->k + tl + 1;
  size_t keylen = r->klen - tl - 1;
  sb_adds(b, "{\"tool\":");
  json_write_string(b, r->k, tl);
  if (u8_valid(key, keylen)) {
    sb_adds(b, ",\"key\":");
    json_write_string(b, key, keylen);
    return;
  }
  /* JSON text cannot carry bytes that are not UTF-8 */
  size_t cap = 4 * ((keylen + 2) / 3) + 1;
  char *b64 = malloc(cap);
  if (!b64) { b->failed = 1; return; }
  cr_base64_encode((const unsigned char *)key, keylen, b64, cap);
  sb_printf(b, ",\"key_b64\":\"%s\"", b64);
  free(b64);
}

static void put_rec(sb_buf *b, const id_rec *r) {
  put_key(b, r);
  sb_printf(b, ",\"input_hash\":\"%s\"", r->hash);
  if (r->pending) {
    sb_printf(b, ",\"state\":\"pending\",\"claimed_at\":%lld,\"owner\":{\"pid\":%lld,\"start_time\":%lld,"
                 "\"token\":\"%s\"}}", r->at, r->pid, r->start, r->token);
  } else {
    sb_printf(b, ",\"state\":\"done\",\"created_at\":%lld,\"expires_at\":%lld,\"result\":", r->at, r->expires_at);
    sb_add(b, r->result, r->result_len);
    sb_addc(b, '}');
  }
}

/* One record per line, so that the file reads and diffs well. */
static void put_records(sb_buf *b, const id_table *t) {
  size_t left = t->n;
  sb_adds(b, "[");
  for (size_t i = 0; i < t->cap; i++) {
    for (const id_rec *r = t->slots[i]; r; r = r->next) {
      sb_adds(b, "\n");
      put_rec(b, r);
      if (--left) sb_addc(b, ',');
    }
  }
  sb_adds(b, t->n ? "\n]" : "]");
}

/* The authenticated header of an encrypted file: its text up to (without) the
   closing brace. The AAD is this text with the brace. */
static void put_header(sb_buf *b, unsigned iterations, const char *salt, const char *nonce) {
  sb_printf(b, "{\"format\":\"" ID_FORMAT "\",\"version\":%d,\"encryption\":\"" ID_CIPHER "\","
               "\"kdf\":{\"name\":\"" ID_KDF "\",\"iterations\":%u,\"salt\":\"%s\"},\"nonce\":\"%s\"",
            ID_VERSION, iterations, salt, nonce);
}

static int derive_key(fs_store *s, const unsigned char salt[16], unsigned iterations, char *err, size_t errlen) {
  if (cr_pbkdf2_sha256(s->pass, s->passlen, salt, 16, iterations, s->key) != 0) {
    s->have_key = 0;
    seterr(err, errlen, "idempotency store %s: key derivation failed", s->path);
    return -1;
  }
  memcpy(s->salt, salt, 16);
  s->iterations = iterations;
  s->have_key = 1;
  return 0;
}

/* The whole file for the current table; 0, or -1 with err. */
static int render(fs_store *s, sb_buf *out, char *err, size_t errlen) {
  sb_buf recs;
  sb_init(&recs);
  put_records(&recs, &s->t);
  if (!s->pass) {
    sb_printf(out, "{\"format\":\"" ID_FORMAT "\",\"version\":%d,\"records\":", ID_VERSION);
    sb_add(out, recs.data ? recs.data : "", recs.len);
    sb_adds(out, "}\n");
    sb_free(&recs);
  } else {
    unsigned char nonce[12], tag[16], salt[16];
    char salt64[25], nonce64[17], tag64[25];
    unsigned char *cipher = malloc(recs.len ? recs.len : 1);
    size_t cap64 = 4 * ((recs.len + 2) / 3) + 1;
    char *cipher64 = malloc(cap64);
    int rc = -1;
    if (!cipher || !cipher64 || recs.failed) {
      seterr(err, errlen, "idempotency: out of memory");
    } else if ((!s->have_key && (cr_random(salt, sizeof salt) != 0 ||
                                 derive_key(s, salt, s->iterations, err, errlen) != 0)) ||
               cr_random(nonce, sizeof nonce) != 0) {
      if (err && !*err) seterr(err, errlen, "idempotency store %s: no random bytes", s->path);
    } else {
      cr_base64_encode(s->salt, sizeof s->salt, salt64, sizeof salt64);
      cr_base64_encode(nonce, sizeof nonce, nonce64, sizeof nonce64);
      put_header(out, s->iterations, salt64, nonce64);
      sb_addc(out, '}');
      if (!out->failed &&
          cr_aes256gcm_encrypt(s->key, nonce, out->data, out->len, recs.data, recs.len, cipher, tag) == 0) {
        out->data[--out->len] = '\0';
        cr_base64_encode(cipher, recs.len, cipher64, cap64);
        cr_base64_encode(tag, sizeof tag, tag64, sizeof tag64);
        sb_printf(out, ",\"ciphertext\":\"%s\",\"tag\":\"%s\"}\n", cipher64, tag64);
        rc = 0;
      } else {
        seterr(err, errlen, "idempotency store %s: encryption failed", s->path);
      }
    }
    if (recs.data) explicit_bzero(recs.data, recs.len);
    sb_free(&recs);
    free(cipher);
    free(cipher64);
    if (rc) return -1;
  }
  if (out->failed) {
    seterr(err, errlen, "idempotency: out of memory");
    return -1;
  }
  return 0;
}

/* jv_get for any node: arrays and scalars have no members. */
static const jv *member(const jv *o, const char *name) {
  return o && o->type == JV_OBJ ? jv_get(o, name) : NULL;
}

static int str_is(const jv *v, const char *lit) {
  return v && v->type == JV_STR && v->len == strlen(lit) && memcmp(v->s, lit, v->len) == 0;
}

static int get_int(const jv *o, const char *name, long long *out) {
  const jv *v = member(o, name);
  if (!v || v->type != JV_INT) return 0;
  *out = v->i;
  return 1;
}

static const jv *get_str(const jv *o, const char *name) {
  const jv *v = member(o, name);
  return v && v->type == JV_STR ? v : NULL;
}

static int get_b64(const jv *o, const char *name, unsigned char *out, size_t want) {
  const jv *v = get_str(o, name);
  size_t n;
  return v && cr_base64_decode(v->s, v->len, out, want, &n) == 0 && n == want;
}

/* One record of the file, or NULL when it is malformed (why in *why). */
static id_rec *read_rec(const jv *o, const char **why) {
  const jv *tool = get_str(o, "tool"), *key = get_str(o, "key"), *key64 = get_str(o, "key_b64");
  const jv *hash = get_str(o, "input_hash"), *state = get_str(o, "state");
  *why = "a record lacks a field or has a wrong one";
  if (!tool || !tool->len || memchr(tool->s, 0, tool->len) || !(key || key64) ||
      (key && key64) || !hash || hash->len != 64 || !id_hex_ok(hash->s, 64) || !state)
    return NULL;
  size_t keylen = key ? key->len : key64->len / 4 * 3;
  char *k = malloc(tool->len + 1 + keylen + 1);
  if (!k) { *why = "out of memory"; return NULL; }
  memcpy(k, tool->s, tool->len + 1);
  if (key) {
    memcpy(k + tool->len + 1, key->s, keylen);
  } else if (cr_base64_decode(key64->s, key64->len, (unsigned char *)k + tool->len + 1, keylen, &keylen) != 0) {
    free(k);
    return NULL;
  }
  id_rec *r = id_rec_new(k, tool->len + 1 + keylen, hash->s);
  free(k);
  if (!r) { *why = "out of memory"; return NULL; }
  const jv *owner = member(o, "owner"), *token = get_str(owner, "token");
  if (str_is(state, "done")) {
    const jv *result = member(o, "result");
    sb_buf text;
    if (!get_int(o, "created_at", &r->at) || !get_int(o, "expires_at", &r->expires_at) || !result) goto bad;
    sb_init(&text);
    jv_write(&text, result, 0);
    if (text.failed) { sb_free(&text); *why = "out of memory"; goto bad; }
    r->result = text.data;
    r->result_len = text.len;
    return r;
  }
  if (str_is(state, "pending") && get_int(o, "claimed_at", &r->at) && owner &&
      get_int(owner, "pid", &r->pid) && get_int(owner, "start_time", &r->start) && token &&
      token->len < sizeof r->token && !memchr(token->s, 0, token->len)) {
    r->pending = 1;
    memcpy(r->token, token->s, token->len + 1);
    return r;
  }
bad:
  id_rec_free(r);
  return NULL;
}

/* Fills t from the records array, leaving out (and counting in s->expired)
   the expired records. 0, or 1 when the array is malformed. */
static int read_records(fs_store *s, const jv *records, long long now, id_table *t, char *why, size_t whylen) {
  if (!records || records->type != JV_ARR) {
    seterr(why, whylen, "no records array");
    return 1;
  }
  for (const jv *o = records->first; o; o = o->next) {
    const char *reason;
    id_rec *r = read_rec(o, &reason);
    if (!r) {
      seterr(why, whylen, "%s", reason);
      return 1;
    }
    if (id_tb_find(t, r->k, r->klen)) {
      id_rec_free(r);
      seterr(why, whylen, "a key appears twice");
      return 1;
    }
    if (!r->pending && r->expires_at <= now) {
      id_rec_free(r);
      s->expired++;
      continue;
    }
    if (!id_tb_add(t, r)) {
      id_rec_free(r);
      seterr(why, whylen, "out of memory");
      return 1;
    }
  }
  return 0;
}

/* The records of an encrypted envelope. 0: t filled; 1: malformed (why);
   -1: refused (err), for a failed authentication above all. */
static int read_encrypted(fs_store *s, const jv *root, long long now, id_table *t, char *why, size_t whylen,
                          char *err, size_t errlen) {
  const jv *kdf = member(root, "kdf"), *salt64 = get_str(kdf, "salt");
  const jv *nonce64 = get_str(root, "nonce"), *data64 = get_str(root, "ciphertext");
  unsigned char salt[16], nonce[12], tag[16];
  long long iterations;
  if (!str_is(member(root, "encryption"), ID_CIPHER)) {
    seterr(err, errlen, "idempotency store %s: unknown encryption (this luma-lua knows " ID_CIPHER ")", s->path);
    return -1;
  }
  if (!str_is(get_str(kdf, "name"), ID_KDF) || !get_int(kdf, "iterations", &iterations) || iterations < 1 ||
      !get_b64(kdf, "salt", salt, sizeof salt) || !get_b64(root, "nonce", nonce, sizeof nonce) ||
      !get_b64(root, "tag", tag, sizeof tag) || !salt64 || !nonce64 || !data64) {
    seterr(why, whylen, "an incomplete encryption header");
    return 1;
  }
  if ((unsigned long long)iterations > LIM_IDEM_KDF_MAX_ITERATIONS) {
    seterr(err, errlen, "idempotency store %s asks for %lld key derivation iterations, more than %u", s->path,
           iterations, LIM_IDEM_KDF_MAX_ITERATIONS);
    return -1;
  }
  size_t cap = data64->len / 4 * 3 + 1, len;
  unsigned char *data = malloc(cap), *plain = malloc(cap);
  sb_buf aad;
  sb_init(&aad);
  int rc = 1;
  if (!data || !plain) {
    seterr(why, whylen, "out of memory");
  } else if (cr_base64_decode(data64->s, data64->len, data, cap, &len) != 0) {
    seterr(why, whylen, "the ciphertext is not base64");
  } else if ((!s->have_key || s->iterations != (unsigned)iterations || memcmp(s->salt, salt, 16) != 0) &&
             derive_key(s, salt, (unsigned)iterations, err, errlen) != 0) {
    rc = -1;
  } else {
    put_header(&aad, (unsigned)iterations, salt64->s, nonce64->s);
    sb_addc(&aad, '}');
    if (aad.failed) {
      seterr(why, whylen, "out of memory");
    } else if (cr_aes256gcm_decrypt(s->key, nonce, aad.data, aad.len, data, len, tag, plain) != 0) {
      seterr(err, errlen, "idempotency store %s cannot be decrypted: the passphrase is wrong or the file was "
                          "modified", s->path);
      rc = -1;
    } else {
      ar_arena a;
      char perr[128];
      ar_init(&a);
      const jv *records = json_parse(&a, (const char *)plain, len, LIM_IDEM_MAX_DEPTH + 2, perr, sizeof perr);
      if (!records) seterr(why, whylen, "the decrypted records are not JSON (%s)", perr);
      else rc = read_records(s, records, now, t, why, whylen);
      ar_free(&a);
      explicit_bzero(plain, len);
    }
  }
  sb_free(&aad);
  free(data);
  free(plain);
  return rc;
}

/* The file's text into t. 0: done; 1: not an envelope, to quarantine (why);
   -1: refused (err): a version from the future, the wrong encryption mode, a
   failed authentication. */
static int read_envelope(fs_store *s, const char *text, size_t len, long long now, id_table *t, char *why,
                         size_t whylen, char *err, size_t errlen) {
  ar_arena a;
  char perr[128];
  long long version;
  int rc = 1;
  ar_init(&a);
  const jv *root = json_parse(&a, text, len, LIM_IDEM_MAX_DEPTH + 3, perr, sizeof perr);
  if (!root) {
    seterr(why, whylen, "not JSON (%s)", perr);
  } else if (!str_is(get_str(root, "format"), ID_FORMAT) || !get_int(root, "version", &version)) {
    seterr(why, whylen, "not a " ID_FORMAT " envelope");
  } else if (version != ID_VERSION) {
    seterr(err, errlen, "idempotency store %s has format version %lld; this luma-lua reads version %d "
                        "(was it written by a newer one?)", s->path, version, ID_VERSION);
    rc = -1;
  } else if (member(root, "encryption") && !s->pass) {
    seterr(err, errlen, "idempotency store %s is encrypted (" ID_CIPHER ") and no passphrase was given",
           s->path);
    rc = -1;
  } else if (!member(root, "encryption") && s->pass) {
    seterr(err, errlen, "idempotency store %s is not encrypted but a passphrase was given; it is not converted: "
                        "open it without one, or use a new file", s->path);
    rc = -1;
  } else if (s->pass) {
    rc = read_encrypted(s, root, now, t, why, whylen, err, errlen);
  } else {
    rc = read_records(s, member(root, "records"), now, t, why, whylen);
  }
  ar_free(&a);
  return rc;
}

/* The lock file says who holds it and how many times the store was written. */
static int fs_mark(fs_store *s, unsigned long long gen) {
  char buf[80];
  int n = snprintf(buf, sizeof buf, "pid %ld\ngeneration %llu\n", (long)s->me.pid, gen);
  return pwrite(s->lockfd, buf, (size_t)n, 0) == n && ftruncate(s->lockfd, n) == 0;
}

/* Takes the lock file, and reopens it first in a forked child: the inherited
   descriptor shares the parent's open file description, and so its flock. */
static int fs_lock(fs_store *s, char *err, size_t errlen) {
  pid_t pid = getpid();
  if (pid != s->me.pid) {
    int fd = open(s->lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return syserr(s, err, errlen, "open lock file");
    close(s->lockfd);
    s->lockfd = fd;
    s->me.pid = pid;
    s->me.start = id_self_start();
    s->cached = 0;
  }
  while (flock(s->lockfd, LOCK_EX) == -1)
    if (errno != EINTR) return syserr(s, err, errlen, "flock");
  char buf[80];
  ssize_t n = pread(s->lockfd, buf, sizeof buf - 1, 0);
  const char *g = NULL;
  if (n > 0) {
    buf[n] = '\0';
    g = strstr(buf, "generation ");
  }
  s->lockgen = g ? strtoull(g + 11, NULL, 10) : 0;
  fs_mark(s, s->lockgen);  /* the holder's pid is for diagnosis only: a failure does not matter */
  return 0;
}

static void fs_unlock(fs_store *s) {
  flock(s->lockfd, LOCK_UN);
}

/* Durability of the rename; a file system that cannot sync directories still
   renamed atomically, so a failure here is not an error. */
static void fs_sync_dir(const fs_store *s) {
  int fd = open(s->dir, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

/* Under the lock no writer is between creating its temp file and renaming
   it, so every temp file of this store belongs to a writer that died. */
static void fs_remove_temps(const fs_store *s) {
  DIR *d = opendir(s->dir);
  if (!d) return;
  size_t bl = strlen(s->base);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *n = e->d_name;
    if (strncmp(n, s->base, bl) != 0 || strncmp(n + bl, ".tmp-", 5) != 0 || !n[bl + 5] ||
        strspn(n + bl + 5, "0123456789") != strlen(n + bl + 5))
      continue;
    char *p = str_printf("%s/%s", s->dir, n);
    if (p) unlink(p);
    free(p);
  }
  closedir(d);
}

static int write_all(int fd, const char *p, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static void remember(fs_store *s, const struct stat *st, unsigned long long gen) {
  s->cached = 1;
  s->dev = st->st_dev;
  s->ino = st->st_ino;
  s->size = st->st_size;
  s->mtime = st->st_mtim;
  s->gen = gen;
}

/* Writes the table: temp file, fsync, generation bump, rename, directory
   fsync. 0, or -1 with err and the file as it was. */
static int fs_save(fs_store *s, char *err, size_t errlen) {
  sb_buf text;
  struct stat st;
  sb_init(&text);
  s->cached = 0;
  if (render(s, &text, err, errlen) != 0) { sb_free(&text); return -1; }
  char *tmp = str_printf("%s.tmp-%ld", s->path, (long)s->me.pid);
  if (!tmp) {
    sb_free(&text);
    seterr(err, errlen, "idempotency: out of memory");
    return -1;
  }
  int rc = -1;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    syserr(s, err, errlen, "create temp file");
  } else {
    if (write_all(fd, text.data, text.len) != 0) syserr(s, err, errlen, "write");
    else if (fsync(fd) != 0) syserr(s, err, errlen, "fsync");
    else if (fstat(fd, &st) != 0) syserr(s, err, errlen, "fstat");
    else rc = 0;
    close(fd);
    /* others must reread even if the new file reuses inode, size and mtime */
    if (rc == 0 && !fs_mark(s, s->lockgen + 1)) rc = syserr(s, err, errlen, "write lock file");
    if (rc == 0) {
      s->lockgen++;
      if (rename(tmp, s->path) != 0) rc = syserr(s, err, errlen, "rename");
    }
    if (rc == 0) {
      fs_sync_dir(s);
      remember(s, &st, s->lockgen);
    } else {
      unlink(tmp);
    }
  }
  free(tmp);
  sb_free(&text);
  return rc;
}

static int fs_quarantine(fs_store *s, long long now, char *err, size_t errlen) {
  char *q = NULL;
  struct stat st;
  int free_name = 0;
  for (int i = 0; i < LIM_IDEM_QUARANTINE_TRIES && !free_name; i++) {
    free(q);
    q = i ? str_printf("%s.corrupt-%lld-%d", s->path, now, i) : str_printf("%s.corrupt-%lld", s->path, now);
    if (!q) break;
    free_name = lstat(q, &st) != 0 && errno == ENOENT;
  }
  if (!free_name) {
    free(q);
    seterr(err, errlen, "idempotency store %s is corrupt and no quarantine name is free", s->path);
    return -1;
  }
  if (rename(s->path, q) != 0) {
    free(q);
    return syserr(s, err, errlen, "move the corrupt file aside");
  }
  fs_sync_dir(s);
  free(s->quarantine);
  s->quarantine = q;
  s->quarantines++;
  return 0;
}

/* Makes s->t the file's records (without those expired at now), unless it
   already is. A missing file is an empty store and is created; a corrupt one
   is moved aside and replaced. 0, or -1 with err. */
static int fs_load(fs_store *s, long long now, char *err, size_t errlen) {
  struct stat st;
  int fd = open(s->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT) return syserr(s, err, errlen, "open");
  if (fd >= 0 && fstat(fd, &st) != 0) {
    close(fd);
    return syserr(s, err, errlen, "fstat");
  }
  if (fd >= 0 && s->cached && s->gen == s->lockgen && st.st_dev == s->dev && st.st_ino == s->ino &&
      st.st_size == s->size && st.st_mtim.tv_sec == s->mtime.tv_sec && st.st_mtim.tv_nsec == s->mtime.tv_nsec) {
    close(fd);
    return 0;
  }
  id_tb_free(&s->t);
  s->cached = 0;
  /* an empty file is a fresh store (made by mktemp, say), not a corrupt one */
  if (fd < 0 || st.st_size == 0) {
    if (fd >= 0) close(fd);
    return fs_save(s, err, errlen);
  }
  sb_buf text;
  sb_init(&text);
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      sb_free(&text);
      close(fd);
      return syserr(s, err, errlen, "read");
    }
    sb_add(&text, buf, (size_t)n);
  }
  close(fd);
  if (text.failed) {
    sb_free(&text);
    seterr(err, errlen, "idempotency: out of memory");
    return -1;
  }
  char why[200];
  id_table t = { NULL, 0, 0 };
  s->expired = 0;
  if (err && errlen) err[0] = '\0';
  int rc = read_envelope(s, text.data, text.len, now, &t, why, sizeof why, err, errlen);
  sb_free(&text);
  if (rc == 0) {
    s->t = t;
    remember(s, &st, s->lockgen);
    return 0;
  }
  id_tb_free(&t);
  s->expired = 0;
  if (rc < 0) return -1;
  if (fs_quarantine(s, now, err, errlen) != 0) return -1;
  return fs_save(s, err, errlen);
}

static int fs_enter(fs_store *s, long long now, char *err, size_t errlen) {
  if (fs_lock(s, err, errlen) != 0) return -1;
  if (fs_load(s, now, err, errlen) == 0) return 0;
  fs_unlock(s);
  return -1;
}

static int split_path(fs_store *s, const char *path) {
  const char *slash = strrchr(path, '/');
  s->path = str_printf("%s", path);
  s->lockpath = str_printf("%s.lock", path);
  if (!slash) s->dir = str_printf(".");
  else if (slash == path) s->dir = str_printf("/");
  else s->dir = str_printf("%.*s", (int)(slash - path), path);
  s->base = str_printf("%s", slash ? slash + 1 : path);
  return s->path && s->lockpath && s->dir && s->base;
}

/* Claims of processes that died are dropped at open, as are expired records
   (when the file was read); either way the file is rewritten without them. */
static int purge_dead(fs_store *s) {
  int dropped = 0;
  for (size_t i = 0; i < s->t.cap; i++) {
    for (id_rec *r = s->t.slots[i], *next; r; r = next) {
      next = r->next;
      if (r->pending && !id_owner_alive(&s->me, r)) {
        id_tb_drop(&s->t, r);
        dropped++;
      }
    }
  }
  return dropped;
}

static fs_store *fs_new(void) {
  fs_store *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  if (pthread_mutex_init(&s->lock, NULL) != 0) {
    free(s);
    return NULL;
  }
  s->me.shared = 1;
  s->lockfd = -1;
  return s;
}

static void fs_free(fs_store *s) {
  id_tb_free(&s->t);
  if (s->lockfd >= 0) close(s->lockfd);
  if (s->pass) explicit_bzero(s->pass, s->passlen);
  explicit_bzero(s->key, sizeof s->key);
  free(s->pass);
  free(s->path);
  free(s->lockpath);
  free(s->dir);
  free(s->base);
  free(s->quarantine);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* Every call holds s->lock and the lock file, on the file's records as of now. */
static int enter(fs_store *s, long long now, char *err, size_t errlen) {
  pthread_mutex_lock(&s->lock);
  if (fs_enter(s, now, err, errlen) == 0) return 0;
  pthread_mutex_unlock(&s->lock);
  return -1;
}

static void leave(fs_store *s) {
  fs_unlock(s);
  pthread_mutex_unlock(&s->lock);
}

static id_status fs_begin(void *impl, const char *tool, const char *key, size_t keylen, const char *hash,
                          long long now, char **result, long long *lease_left, char *err, size_t errlen) {
  (void)lease_left;
  fs_store *s = impl;
  size_t klen;
  char *k = id_rec_key(tool, key, keylen, &klen);
  if (!k) {
    seterr(err, errlen, "idempotency: out of memory");
    return ID_ERROR;
  }
  id_status st = ID_ERROR;
  if (enter(s, now, err, errlen) == 0) {
    st = id_tb_begin(&s->t, &s->me, k, klen, hash, now, result, err, errlen);
    if (st == ID_RUN && fs_save(s, err, errlen) != 0) st = ID_ERROR;
    leave(s);
  }
  free(k);
  return st;
}

static int fs_commit(void *impl, const char *tool, const char *key, size_t keylen, const char *hash,
                     const char *text, size_t len, long long now, long long ttl, char *err, size_t errlen) {
  fs_store *s = impl;
  size_t klen;
  char *k = id_rec_key(tool, key, keylen, &klen);
  if (!k) {
    seterr(err, errlen, "idempotency: out of memory");
    return -1;
  }
  int rc = -1;
  if (enter(s, now, err, errlen) == 0) {
    rc = id_tb_commit(&s->t, &s->me, tool, k, klen, hash, text, len, now, ttl, err, errlen);
    if (rc == 1) rc = fs_save(s, err, errlen) == 0 ? 0 : -1;
    leave(s);
  }
  free(k);
  return rc;
}

static void fs_abort(void *impl, const char *tool, const char *key, size_t keylen) {
  fs_store *s = impl;
  size_t klen;
  char *k = id_rec_key(tool, key, keylen, &klen);
  if (!k) return;
  if (enter(s, LLONG_MIN, NULL, 0) == 0) {
    if (id_tb_release(&s->t, &s->me, k, klen)) fs_save(s, NULL, 0);
    leave(s);
  }
  free(k);
}

static void fs_close(void *impl) {
  fs_store *s = impl;
  if (enter(s, LLONG_MIN, NULL, 0) == 0) {
    if (id_tb_release_all(&s->t, &s->me) > 0) fs_save(s, NULL, 0);
    leave(s);
  }
  fs_free(s);
}

static int fs_quarantined(void *impl, char *path, size_t pathcap) {
  fs_store *s = impl;
  pthread_mutex_lock(&s->lock);
  int n = s->quarantines;
  if (n && path && pathcap) snprintf(path, pathcap, "%s", s->quarantine);
  pthread_mutex_unlock(&s->lock);
  return n;
}

/* Whether this store still holds its claim on (tool, key) (id_keep: looked
   at every third of FS_CHECK_MS): 1, 0, or -1 when the file cannot be read. */
static int fs_renew(void *impl, const char *tool, const char *key, size_t keylen, const char *hash, char *err,
                    size_t errlen) {
  fs_store *s = impl;
  size_t klen;
  char *k = id_rec_key(tool, key, keylen, &klen);
  if (!k) {
    seterr(err, errlen, "idempotency: out of memory");
    return -1;
  }
  int held = -1;
  if (enter(s, LLONG_MIN, err, errlen) == 0) {
    const id_rec *r = id_tb_find(&s->t, k, klen);
    held = r && r->pending && r->pid == (long long)s->me.pid && r->start == s->me.start &&
           strcmp(r->token, s->me.token) == 0 && memcmp(r->hash, hash, 64) == 0;
    leave(s);
  }
  free(k);
  return held;
}

static const id_ops fs_ops = { fs_begin, fs_commit, fs_abort, fs_close, fs_quarantined, fs_renew, NULL };

id_store *id_open_file_kdf(const char *path, const char *passphrase, unsigned iterations, long long now_ms,
                           char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!path || !*path || path[strlen(path) - 1] == '/') {
    seterr(err, errlen, "idempotency: the file store needs a file path");
    return NULL;
  }
  if (passphrase && !*passphrase) {
    seterr(err, errlen, "idempotency: the passphrase is empty");
    return NULL;
  }
  if (iterations < 1 || iterations > LIM_IDEM_KDF_MAX_ITERATIONS) {
    seterr(err, errlen, "idempotency: %u key derivation iterations is out of range", iterations);
    return NULL;
  }
  fs_store *s = fs_new();
  if (!s || !split_path(s, path) || (passphrase && !(s->pass = str_printf("%s", passphrase)))) {
    if (s) fs_free(s);
    seterr(err, errlen, "idempotency: out of memory");
    return NULL;
  }
  s->passlen = passphrase ? strlen(passphrase) : 0;
  s->iterations = iterations;
  s->me.pid = getpid();
  s->me.start = id_self_start();
  if (id_new_token(s->me.token) != 0) {
    seterr(err, errlen, "idempotency: no random bytes");
    fs_free(s);
    return NULL;
  }
  s->lockfd = open(s->lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (s->lockfd < 0) {
    syserr(s, err, errlen, "open lock file");
    fs_free(s);
    return NULL;
  }
  int rc = fs_lock(s, err, errlen);
  if (rc == 0) {
    fs_remove_temps(s);
    rc = fs_load(s, now_ms, err, errlen);
    if (rc == 0 && (purge_dead(s) > 0 || s->expired > 0)) rc = fs_save(s, err, errlen);
    fs_unlock(s);
  }
  if (rc != 0) {
    fs_free(s);
    return NULL;
  }
  id_store *st = id_wrap(&fs_ops, s);
  /* a claim has no lease (it lasts while its process lives); while its
     handler runs, it is looked at (id_keep), so that one taken over or
     removed fails the call */
  id_set_lease(st, FS_CHECK_MS);
  return st;
}

id_store *id_open_file(const char *path, const char *passphrase, long long now_ms, char *err, size_t errlen) {
  return id_open_file_kdf(path, passphrase, ID_KDF_ITERATIONS, now_ms, err, errlen);
}

