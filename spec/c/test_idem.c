/*
 * core/idem: the idempotency stores. The same behaviour table runs against
 * the memory store and the file store; then the file store's own rules:
 * persistence, purge at open, quarantine, versions, temp files, encryption,
 * claims of dead processes, forked handles, eight processes racing over the
 * same keys, and writers killed with SIGKILL at random moments.
 * Everything happens in a mkdtemp directory that is removed at the end.
 */
#define _DEFAULT_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "crypto.h"
#include "ctest.h"
#include "idem.h"
#include "idem_file.h"
#include "idemint.h"
#include "json.h"

/* Encrypted stores in tests derive their key with this many iterations; the
   production count is checked once, in test_production_kdf. */
#define TEST_KDF 1000u
#define T0 1000000LL
#define TTL 3600000LL

static char dir[256];
static int verbose;             /* LUMA_TEST_VERBOSE: print what the races saw */

/* A path in the test directory; the last 16 stay valid. */
static const char *tmp_path(const char *name) {
  static char buf[16][512];
  static int next;
  char *p = buf[next++ % 16];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

static void hash_of(const char *input, char out[65]) {
  cr_sha256_hex(input, strlen(input), out);
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *data = NULL;
  size_t n = 0, cap = 0, got;
  char buf[4096];
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
    if (n + got + 1 > cap) {
      cap = (n + got + 1) * 2;
      char *grown = realloc(data, cap);
      if (!grown) break;
      data = grown;
    }
    memcpy(data + n, buf, got);
    n += got;
  }
  fclose(f);
  if (!data) data = calloc(1, 1);
  else data[n] = '\0';
  if (len) *len = n;
  return data;
}

static void spit(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(data, 1, len, f);
  fclose(f);
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Names in the test directory that start with prefix. */
static int count_names(const char *prefix) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  if (!d) return -1;
  while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return n;
}

static void remove_dir(void) {
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d) return;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

static const char *status_name(id_status st) {
  static const char *const names[] = { "RUN", "REPLAY", "CONFLICT", "WAIT", "ERROR" };
  return names[st];
}

/* id_begin with a key string; *result freed unless the caller takes it. */
static id_status begin(id_store *s, const char *tool, const char *key, size_t keylen, const char *input,
                       long long now, char **out) {
  char h[65], err[256], *result = NULL;
  hash_of(input, h);
  id_status st = id_begin(s, tool, key, keylen, h, now, &result, NULL, err, sizeof err);
  if (st == ID_ERROR && verbose) fprintf(stderr, "  (id_begin: %s)\n", err);
  if (st != ID_REPLAY && result) CT_CHECK(0, "a result with %s", status_name(st));
  if (out) *out = result;
  else free(result);
  return st;
}

static int commit(id_store *s, const char *tool, const char *key, size_t keylen, const char *input,
                  const char *result, long long now, long long ttl, char *err, size_t errlen) {
  char h[65];
  hash_of(input, h);
  return id_commit(s, tool, key, keylen, h, result, strlen(result), now, ttl, err, errlen);
}

#define K(s) s, sizeof(s) - 1
#define EXPECT(call, want) do {                                                          \
    id_status got_ = (call);                                                            \
    CT_CHECK(got_ == (want), "expected %s, got %s", status_name(want), status_name(got_)); \
  } while (0)

/* The behaviour both stores share. */
static void check_semantics(id_store *s) {
  char err[256], *r = NULL;

  EXPECT(begin(s, "send", K("k1"), "in-1", T0, NULL), ID_RUN);
  EXPECT(begin(s, "send", K("k1"), "in-1", T0, NULL), ID_WAIT);
  EXPECT(begin(s, "send", K("k1"), "in-2", T0, NULL), ID_CONFLICT);
  CT_CHECK(commit(s, "send", K("k1"), "in-1", "{ \"id\" : 1, \"tags\": [\"a\", 2.50, null] }", T0 + 5, 1000,
                  err, sizeof err) == 0, "commit: %s", err);
  EXPECT(begin(s, "send", K("k1"), "in-1", T0 + 10, &r), ID_REPLAY);
  CT_EQ_STR("{\"id\":1,\"tags\":[\"a\",2.5,null]}", r);
  free(r);
  EXPECT(begin(s, "send", K("k1"), "in-2", T0 + 10, NULL), ID_CONFLICT);
  EXPECT(begin(s, "other_tool", K("k1"), "in-2", T0 + 10, NULL), ID_RUN);
  id_abort(s, "other_tool", K("k1"));

  /* the TTL counts from the commit: alive until T0+5+1000, gone at it */
  EXPECT(begin(s, "send", K("k1"), "in-1", T0 + 1004, NULL), ID_REPLAY);
  EXPECT(begin(s, "send", K("k1"), "in-2", T0 + 1005, NULL), ID_RUN);
  CT_CHECK(commit(s, "send", K("k1"), "in-2", "\"second\"", T0 + 1005, 1000, err, sizeof err) == 0, "%s", err);
  EXPECT(begin(s, "send", K("k1"), "in-2", T0 + 1006, &r), ID_REPLAY);
  CT_EQ_STR("\"second\"", r);
  free(r);

  /* abort releases the claim only */
  EXPECT(begin(s, "send", K("k2"), "in-1", T0, NULL), ID_RUN);
  id_abort(s, "send", K("k2"));
  EXPECT(begin(s, "send", K("k2"), "in-2", T0, NULL), ID_RUN);
  CT_CHECK(commit(s, "send", K("k2"), "in-2", "[]", T0, TTL, err, sizeof err) == 0, "%s", err);
  id_abort(s, "send", K("k2"));
  EXPECT(begin(s, "send", K("k2"), "in-2", T0, NULL), ID_REPLAY);

  /* a second commit with the same input keeps the first result; another input is refused */
  CT_CHECK(commit(s, "send", K("k2"), "in-2", "[1]", T0, TTL, err, sizeof err) == 0, "%s", err);
  EXPECT(begin(s, "send", K("k2"), "in-2", T0, &r), ID_REPLAY);
  CT_EQ_STR("[]", r);
  free(r);
  CT_CHECK(commit(s, "send", K("k2"), "in-3", "[1]", T0, TTL, err, sizeof err) == -1 &&
           strstr(err, "another input"), "commit over another input: %s", err);
  /* a commit without a claim (it was lost) stores all the same */
  CT_CHECK(commit(s, "send", K("k3"), "in-1", "3", T0, TTL, err, sizeof err) == 0, "%s", err);
  EXPECT(begin(s, "send", K("k3"), "in-1", T0, NULL), ID_REPLAY);

  /* keys are bytes: NUL inside, not UTF-8, empty */
  EXPECT(begin(s, "send", K("a\0b"), "in-1", T0, NULL), ID_RUN);
  EXPECT(begin(s, "send", K("a\0c"), "in-1", T0, NULL), ID_RUN);
  EXPECT(begin(s, "send", K("a"), "in-1", T0, NULL), ID_RUN);
  CT_CHECK(commit(s, "send", K("a\0b"), "in-1", "\"nul\"", T0, TTL, err, sizeof err) == 0, "%s", err);
  CT_CHECK(commit(s, "send", K("\xff\xfe"), "in-1", "\"bytes\"", T0, TTL, err, sizeof err) == 0, "%s", err);
  CT_CHECK(commit(s, "send", "", 0, "in-1", "\"empty\"", T0, TTL, err, sizeof err) == 0, "%s", err);
  EXPECT(begin(s, "send", K("a\0b"), "in-1", T0, &r), ID_REPLAY);
  CT_EQ_STR("\"nul\"", r);
  free(r);
  EXPECT(begin(s, "send", K("\xff\xfe"), "in-1", T0, &r), ID_REPLAY);
  CT_EQ_STR("\"bytes\"", r);
  free(r);
  EXPECT(begin(s, "send", "", 0, "in-1", T0, &r), ID_REPLAY);
  CT_EQ_STR("\"empty\"", r);
  free(r);
  id_abort(s, "send", K("a\0c"));
  id_abort(s, "send", K("a"));

  /* misuse is an error, not a crash */
  char h[65];
  hash_of("x", h);
  CT_CHECK(id_begin(s, "send", K("x"), "ABC", T0, &r, NULL, err, sizeof err) == ID_ERROR && strstr(err, "input_hash"),
           "a short hash: %s", err);
  CT_CHECK(id_begin(s, "", K("x"), h, T0, &r, NULL, err, sizeof err) == ID_ERROR, "an empty tool name");
  CT_CHECK(id_begin(s, "bad\xff", K("x"), h, T0, &r, NULL, err, sizeof err) == ID_ERROR, "a tool name not UTF-8");
  CT_CHECK(commit(s, "send", K("x"), "x", "{\"a\":", T0, TTL, err, sizeof err) == -1 && strstr(err, "not one JSON"),
           "a result that is not JSON: %s", err);
  CT_CHECK(commit(s, "send", K("x"), "x", "1 2", T0, TTL, err, sizeof err) == -1, "two JSON values");
  CT_CHECK(commit(s, "send", K("x"), "x", "{\"a\":1,\"a\":2}", T0, TTL, err, sizeof err) == -1, "a duplicate key");
  CT_CHECK(commit(s, "send", K("x"), "x", "1", T0, 0, err, sizeof err) == -1 && strstr(err, "ttl_ms"), "ttl 0: %s",
           err);
  EXPECT(begin(s, "send", K("x"), "x", T0, NULL), ID_RUN);
  id_abort(s, "send", K("x"));
}

static void test_memory(void) {
  id_store *s = id_open_memory();
  CT_CHECK(s != NULL, "id_open_memory");
  check_semantics(s);
  CT_CHECK(id_quarantined(s, NULL, 0) == 0, "a memory store quarantines nothing");
  id_close(s);
  id_close(NULL);
}

static id_store *open_file(const char *path, const char *pass, long long now) {
  char err[512];
  id_store *s = id_open_file_kdf(path, pass, TEST_KDF, now, err, sizeof err);
  if (!s && verbose) fprintf(stderr, "  (open %s: %s)\n", path, err);
  return s;
}

static void test_file_semantics(void) {
  id_store *s = open_file(tmp_path("sem.json"), NULL, T0);
  CT_CHECK(s != NULL, "open");
  if (!s) return;
  check_semantics(s);
  id_close(s);
  s = open_file(tmp_path("sem-enc.json"), "pw", T0);
  CT_CHECK(s != NULL, "open encrypted");
  if (!s) return;
  check_semantics(s);
  id_close(s);
}

static void test_persistence(void) {
  const char *path = tmp_path("persist.json");
  char err[256], *r = NULL;
  id_store *s = open_file(path, NULL, T0);
  CT_CHECK(s && exists(path), "a new store creates its file at open");
  if (!s) return;
  size_t len;
  char *text = slurp(path, &len);
  CT_EQ_STR("{\"format\":\"luma-idempotency\",\"version\":1,\"records\":[]}\n", text);
  free(text);
  text = slurp(tmp_path("persist.json.lock"), NULL);
  char want[64];
  snprintf(want, sizeof want, "pid %ld\n", (long)getpid());
  CT_CHECK(text && strncmp(text, want, strlen(want)) == 0, "the lock file names its holder: %s", text);
  free(text);

  EXPECT(begin(s, "t", K("keep"), "in", T0, NULL), ID_RUN);
  CT_CHECK(commit(s, "t", K("keep"), "in", "{\"ok\":true}", T0, TTL, err, sizeof err) == 0, "%s", err);
  CT_CHECK(commit(s, "t", K("nul\0key"), "in", "1", T0, TTL, err, sizeof err) == 0, "%s", err);
  CT_CHECK(commit(s, "t", K("\x80raw"), "in", "2", T0, TTL, err, sizeof err) == 0, "%s", err);
  EXPECT(begin(s, "t", K("claimed"), "in", T0, NULL), ID_RUN);
  /* the deepest result allowed, and one level more */
  char deep[2 * LIM_IDEM_MAX_DEPTH + 8];
  memset(deep, '[', LIM_IDEM_MAX_DEPTH);
  memset(deep + LIM_IDEM_MAX_DEPTH, ']', LIM_IDEM_MAX_DEPTH);
  deep[2 * LIM_IDEM_MAX_DEPTH] = '\0';
  CT_CHECK(commit(s, "t", K("deep"), "in", deep, T0, TTL, err, sizeof err) == 0, "%d levels: %s", LIM_IDEM_MAX_DEPTH, err);
  char deeper[2 * LIM_IDEM_MAX_DEPTH + 8];
  memset(deeper, '[', LIM_IDEM_MAX_DEPTH + 1);
  memset(deeper + LIM_IDEM_MAX_DEPTH + 1, ']', LIM_IDEM_MAX_DEPTH + 1);
  deeper[2 * LIM_IDEM_MAX_DEPTH + 2] = '\0';
  CT_CHECK(commit(s, "t", K("deeper"), "in", deeper, T0, TTL, err, sizeof err) == -1, "%d levels", LIM_IDEM_MAX_DEPTH + 1);
  text = slurp(path, NULL);
  CT_CHECK(strstr(text, "\"result\":{\"ok\":true}") != NULL, "the result is a JSON value in the file: %s", text);
  CT_CHECK(strstr(text, "\"key\":\"nul\\u0000key\"") != NULL, "a NUL in a key is escaped");
  CT_CHECK(strstr(text, "\"key_b64\":\"gHJhdw==\"") != NULL, "a key that is not UTF-8 is base64");
  CT_CHECK(strstr(text, "\"state\":\"pending\"") != NULL, "the claim is in the file");
  free(text);
  id_close(s);
  text = slurp(path, NULL);
  CT_CHECK(strstr(text, "pending") == NULL, "id_close releases the claims of its store");
  free(text);

  s = open_file(path, NULL, T0 + 1);
  CT_CHECK(s != NULL, "reopen");
  if (!s) return;
  EXPECT(begin(s, "t", K("keep"), "in", T0 + 1, &r), ID_REPLAY);
  CT_EQ_STR("{\"ok\":true}", r);
  free(r);
  EXPECT(begin(s, "t", K("nul\0key"), "in", T0 + 1, NULL), ID_REPLAY);
  EXPECT(begin(s, "t", K("\x80raw"), "in", T0 + 1, &r), ID_REPLAY);
  CT_EQ_STR("2", r);
  free(r);
  EXPECT(begin(s, "t", K("claimed"), "in", T0 + 1, NULL), ID_RUN);
  EXPECT(begin(s, "t", K("deep"), "in", T0 + 1, &r), ID_REPLAY);
  CT_CHECK(r && strcmp(r, deep) == 0, "the deep result reads back");
  free(r);
  id_close(s);
}

static void test_purge_at_open(void) {
  const char *path = tmp_path("purge.json");
  char err[256];
  id_store *s = open_file(path, NULL, T0);
  if (!s) return;
  CT_CHECK(commit(s, "t", K("short-lived"), "in", "1", T0, 100, err, sizeof err) == 0, "%s", err);
  CT_CHECK(commit(s, "t", K("long-lived"), "in", "2", T0, 100000, err, sizeof err) == 0, "%s", err);
  id_close(s);
  char *text = slurp(path, NULL);
  CT_CHECK(strstr(text, "short-lived") && strstr(text, "long-lived"), "both records are stored");
  free(text);

  s = open_file(path, NULL, T0 + 100);
  text = slurp(path, NULL);
  CT_CHECK(!strstr(text, "short-lived") && strstr(text, "long-lived"), "the expired record is purged at open: %s",
           text);
  free(text);
  EXPECT(begin(s, "t", K("short-lived"), "in", T0 + 100, NULL), ID_RUN);
  EXPECT(begin(s, "t", K("long-lived"), "in", T0 + 100, NULL), ID_REPLAY);
  id_close(s);

  /* claims of processes that are gone are purged too; pid 0x7ffffff0 is never used */
  char h[65], buf[1024];
  hash_of("in", h);
  snprintf(buf, sizeof buf,
           "{\"format\":\"luma-idempotency\",\"version\":1,\"records\":[{\"tool\":\"t\",\"key\":\"ghost\","
           "\"input_hash\":\"%s\",\"state\":\"pending\",\"claimed_at\":1,\"owner\":{\"pid\":2147483632,"
           "\"start_time\":5,\"token\":\"00\"}}]}", h);
  spit(path, buf, strlen(buf));
  s = open_file(path, NULL, T0);
  text = slurp(path, NULL);
  CT_CHECK(text && !strstr(text, "ghost"), "a dead process's claim is purged at open: %s", text);
  free(text);
  id_close(s);
}

typedef struct corrupt_case {
  const char *name, *text;
} corrupt_case;

static const corrupt_case corrupt_cases[] = {
  { "not JSON", "{not json" },
  { "truncated", "{\"format\":\"luma-idempotency\",\"version\":1,\"records\":[{\"tool\":\"t\"" },
  { "binary", "\x00\x01\x02garbage" },
  { "another format", "{\"format\":\"something-else\",\"version\":1,\"records\":[]}" },
  { "no version", "{\"format\":\"luma-idempotency\",\"records\":[]}" },
  { "a version that is a string", "{\"format\":\"luma-idempotency\",\"version\":\"1\",\"records\":[]}" },
  { "records not an array", "{\"format\":\"luma-idempotency\",\"version\":1,\"records\":{}}" },
  { "a record that is an array", "{\"format\":\"luma-idempotency\",\"version\":1,\"records\":[[1,2]]}" },
  { "a record without a hash",
    "{\"format\":\"luma-idempotency\",\"version\":1,\"records\":[{\"tool\":\"t\",\"key\":\"k\",\"state\":\"done\"}]}" },
  { "a JSON array", "[1,2,3]" },
  { "a JSON string", "\"luma-idempotency\"" },
};

static void test_quarantine(void) {
  const char *path = tmp_path("corrupt.json");
  char q[600], want[600];
  for (size_t i = 0; i < sizeof corrupt_cases / sizeof *corrupt_cases; i++) {
    const corrupt_case *c = &corrupt_cases[i];
    size_t len = c->text[0] ? strlen(c->text) : 10;
    long long now = T0 + (long long)i;
    spit(path, c->text, len);
    id_store *s = open_file(path, NULL, now);
    CT_CHECK(s != NULL, "%s: the open succeeds", c->name);
    if (!s) continue;
    snprintf(want, sizeof want, "%s.corrupt-%lld", path, now);
    CT_CHECK(id_quarantined(s, q, sizeof q) == 1, "%s: reported as quarantined", c->name);
    CT_EQ_STR(want, q);
    size_t qlen;
    char *old = slurp(want, &qlen);
    CT_CHECK(old && qlen == len && memcmp(old, c->text, len) == 0, "%s: the quarantine holds the old bytes",
             c->name);
    free(old);
    EXPECT(begin(s, "t", K("k"), "in", now, NULL), ID_RUN);
    id_close(s);
    char *text = slurp(path, NULL);
    CT_CHECK(strncmp(text, "{\"format\":\"luma-idempotency\",\"version\":1,", 41) == 0, "%s: a new store: %s",
             c->name, text);
    free(text);
  }

  /* a second quarantine in the same millisecond does not overwrite the first */
  spit(path, "{bad", 4);
  id_store *s = open_file(path, NULL, T0);
  CT_CHECK(s && id_quarantined(s, q, sizeof q) == 1, "quarantined again");
  snprintf(want, sizeof want, "%s.corrupt-%lld-1", path, T0);
  CT_EQ_STR(want, q);
  id_close(s);

  /* a file that is corrupt later is handled at the next call */
  s = open_file(path, NULL, T0);
  CT_CHECK(s && id_quarantined(s, NULL, 0) == 0, "a valid file is not quarantined");
  if (!s) return;
  spit(path, "garbage!", 8);
  EXPECT(begin(s, "t", K("k"), "in", T0 + 999, NULL), ID_RUN);
  snprintf(want, sizeof want, "%s.corrupt-%lld", path, T0 + 999);
  CT_CHECK(id_quarantined(s, q, sizeof q) == 1 && strcmp(q, want) == 0, "quarantined while open: %s", q);
  id_close(s);

  /* an empty file, as mktemp makes, is a new store */
  const char *empty = tmp_path("empty.json");
  spit(empty, "", 0);
  s = open_file(empty, NULL, T0);
  CT_CHECK(s && id_quarantined(s, NULL, 0) == 0, "an empty file is not quarantined");
  id_close(s);
  char *text = slurp(empty, NULL);
  CT_CHECK(text && strstr(text, "luma-idempotency"), "and becomes a store");
  free(text);
}

static void test_unknown_version(void) {
  const char *path = tmp_path("future.json");
  static const char future[] = "{\"format\":\"luma-idempotency\",\"version\":2,\"records\":\"new things\"}";
  char err[512];
  spit(path, future, sizeof future - 1);
  id_store *s = id_open_file(path, NULL, T0, err, sizeof err);
  CT_CHECK(s == NULL, "a version from the future is refused");
  CT_CHECK(strstr(err, "version 2") && strstr(err, "version 1"), "the message names both versions: %s", err);
  id_close(s);
  char *text = slurp(path, NULL);
  CT_EQ_STR(future, text);
  free(text);
  CT_CHECK(count_names("future.json.corrupt") == 0, "and is not quarantined");
}

static void test_stale_temp_files(void) {
  const char *path = tmp_path("tmps.json");
  spit(tmp_path("tmps.json.tmp-2147483632"), "half a write", 12);
  spit(tmp_path("tmps.json.tmp-1"), "x", 1);
  spit(tmp_path("tmps.json.tmp-notapid"), "keep", 4);
  spit(tmp_path("other.json.tmp-2147483632"), "keep", 4);
  id_store *s = open_file(path, NULL, T0);
  CT_CHECK(s != NULL, "open");
  CT_CHECK(!exists(tmp_path("tmps.json.tmp-2147483632")) && !exists(tmp_path("tmps.json.tmp-1")),
           "the temp files of dead writers are removed at open");
  CT_CHECK(exists(tmp_path("tmps.json.tmp-notapid")) && exists(tmp_path("other.json.tmp-2147483632")),
           "other files stay");
  id_close(s);
}

/* The string value of "name" in an envelope's text, into out. */
static void field(const char *text, const char *name, char *out, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":\"", name);
  const char *p = text ? strstr(text, pat) : NULL;
  out[0] = '\0';
  if (!p) return;
  p += strlen(pat);
  size_t n = strcspn(p, "\"");
  if (n >= cap) n = cap - 1;
  memcpy(out, p, n);
  out[n] = '\0';
}

/* Replaces the first occurrence of from in the file by to, which has the same length. */
static void patch(const char *path, const char *from, const char *to) {
  size_t len;
  char *text = slurp(path, &len);
  char *p = text ? strstr(text, from) : NULL;
  CT_CHECK(p != NULL, "the file holds %s", from);
  if (p) {
    memcpy(p, to, strlen(to));
    spit(path, text, len);
  }
  free(text);
}

static void expect_refused(const char *path, const char *pass, const char *why, const char *needle) {
  char err[512];
  size_t before_len, after_len;
  char *before = slurp(path, &before_len);
  id_store *s = id_open_file_kdf(path, pass, TEST_KDF, T0, err, sizeof err);
  CT_CHECK(s == NULL, "%s: refused", why);
  id_close(s);
  CT_CHECK(strstr(err, needle) != NULL, "%s: the message says \"%s\": %s", why, needle, err);
  char *after = slurp(path, &after_len);
  CT_CHECK(before && after && before_len == after_len && memcmp(before, after, before_len) == 0,
           "%s: the file is left as it was", why);
  free(before);
  free(after);
}

static void test_encryption(void) {
  const char *path = tmp_path("enc.json");
  char err[256], *r = NULL, nonce1[64], nonce2[64], cipher1[4096], cipher2[4096];
  id_store *s = open_file(path, "correct horse", T0);
  CT_CHECK(s != NULL, "open encrypted");
  if (!s) return;
  CT_CHECK(commit(s, "t", K("k"), "in", "{\"secret\":\"swordfish\"}", T0, TTL, err, sizeof err) == 0, "%s", err);
  char *text = slurp(path, NULL);
  CT_CHECK(!strstr(text, "swordfish") && !strstr(text, "records"), "the records are not in clear: %s", text);
  static const char head[] = "{\"format\":\"luma-idempotency\",\"version\":1,\"encryption\":\"aes-256-gcm\","
                             "\"kdf\":{\"name\":\"pbkdf2-sha256\",\"iterations\":1000,\"salt\":\"";
  CT_CHECK(strncmp(text, head, sizeof head - 1) == 0, "the envelope: %s", text);
  field(text, "nonce", nonce1, sizeof nonce1);
  field(text, "ciphertext", cipher1, sizeof cipher1);
  free(text);
  /* the same records written again: a new nonce, so another ciphertext */
  id_abort(s, "t", K("nothing"));
  EXPECT(begin(s, "t", K("k2"), "in", T0, NULL), ID_RUN);
  id_abort(s, "t", K("k2"));
  text = slurp(path, NULL);
  field(text, "nonce", nonce2, sizeof nonce2);
  field(text, "ciphertext", cipher2, sizeof cipher2);
  free(text);
  CT_CHECK(strlen(nonce1) == 16 && strlen(nonce2) == 16, "12-byte nonces: %s %s", nonce1, nonce2);
  CT_CHECK(strcmp(nonce1, nonce2) != 0, "each write has its own nonce");
  CT_CHECK(strcmp(cipher1, cipher2) != 0, "and its own ciphertext for the same records");
  id_close(s);

  s = open_file(path, "correct horse", T0 + 1);
  CT_CHECK(s != NULL, "reopen with the passphrase");
  if (!s) return;
  EXPECT(begin(s, "t", K("k"), "in", T0 + 1, &r), ID_REPLAY);
  CT_EQ_STR("{\"secret\":\"swordfish\"}", r);
  free(r);
  id_close(s);

  expect_refused(path, "wrong horse", "a wrong passphrase", "passphrase is wrong or the file was modified");
  expect_refused(path, NULL, "no passphrase", "is encrypted");

  /* tampering: the ciphertext, the tag, and each authenticated header field */
  text = slurp(path, NULL);
  field(text, "ciphertext", cipher1, sizeof cipher1);
  char tag[64], salt[64];
  field(text, "tag", tag, sizeof tag);
  field(text, "salt", salt, sizeof salt);
  field(text, "nonce", nonce1, sizeof nonce1);
  free(text);
  struct { const char *what, *from; int at; } tamper[] = {
    { "a ciphertext byte", cipher1, 8 }, { "a tag byte", tag, 3 }, { "a nonce byte", nonce1, 2 },
    { "a salt byte", salt, 5 }, { "the iteration count", "\"iterations\":1000", 15 },
  };
  for (size_t i = 0; i < sizeof tamper / sizeof *tamper; i++) {
    char from[4096], to[4096];
    snprintf(from, sizeof from, "%s", tamper[i].from);
    snprintf(to, sizeof to, "%s", from);
    to[tamper[i].at] = to[tamper[i].at] == 'A' ? 'B' : to[tamper[i].at] == '0' ? '1' : 'A';
    patch(path, from, to);
    expect_refused(path, "correct horse", tamper[i].what, "passphrase is wrong or the file was modified");
    patch(path, to, from);
  }
  CT_CHECK(count_names("enc.json.corrupt") == 0, "nothing encrypted was quarantined");
  s = open_file(path, "correct horse", T0 + 2);
  CT_CHECK(s != NULL, "the untouched file still opens");
  if (s) EXPECT(begin(s, "t", K("k"), "in", T0 + 2, NULL), ID_REPLAY);
  id_close(s);

  CT_CHECK(id_open_file_kdf(tmp_path("nopass.json"), "", TEST_KDF, T0, err, sizeof err) == NULL &&
           strstr(err, "passphrase is empty") && !exists(tmp_path("nopass.json")), "an empty passphrase: %s", err);

  /* a plain file is not converted by a passphrase */
  const char *plain = tmp_path("plain.json");
  s = open_file(plain, NULL, T0);
  id_close(s);
  expect_refused(plain, "pw", "a plain file with a passphrase", "not encrypted");
}

/* id_open_file always derives with 200000 iterations (one derivation: slow). */
static void test_production_kdf(void) {
  const char *path = tmp_path("prod.json");
  char err[256];
  id_store *s = id_open_file(path, "pw", T0, err, sizeof err);
  CT_CHECK(s != NULL, "id_open_file with a passphrase: %s", err);
  id_close(s);
  char *text = slurp(path, NULL);
  CT_CHECK(text && strstr(text, "\"iterations\":200000,"), "a new file uses 200000 iterations: %s", text);
  free(text);
}

static void wait_child(pid_t pid, const char *what) {
  int status = 0;
  waitpid(pid, &status, 0);
  CT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: the child exited with %d", what,
           WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
}

static void test_claims_across_processes(void) {
  const char *path = tmp_path("claims.json");
  id_store *s = open_file(path, NULL, T0);
  if (!s) return;
  int ready[2];
  char c;

  /* a live process's claim makes us wait; once it is gone, we take over */
  if (pipe(ready) != 0) return;
  pid_t pid = fork();
  if (pid == 0) {
    id_store *cs = open_file(path, NULL, T0);
    int ok = cs && begin(cs, "t", K("orphan"), "in", T0, NULL) == ID_RUN;
    if (write(ready[1], ok ? "y" : "n", 1) == 1) pause();  /* until the parent kills it: a crash */
    _exit(1);
  }
  CT_CHECK(read(ready[0], &c, 1) == 1 && c == 'y', "the child claimed");
  EXPECT(begin(s, "t", K("orphan"), "in", T0, NULL), ID_WAIT);
  EXPECT(begin(s, "t", K("orphan"), "other", T0, NULL), ID_CONFLICT);
  kill(pid, SIGKILL);
  /* a zombie cannot finish its call either */
  char statpath[64], stat[512];
  snprintf(statpath, sizeof statpath, "/proc/%ld/stat", (long)pid);
  int zombie = 0;
  for (int i = 0; i < 5000 && !zombie; i++) {
    char *t = slurp(statpath, NULL);
    snprintf(stat, sizeof stat, "%s", t ? t : "");
    free(t);
    const char *p = strrchr(stat, ')');
    zombie = p && p[1] == ' ' && p[2] == 'Z';
    if (!zombie) usleep(1000);
  }
  CT_CHECK(zombie, "the child is a zombie");
  EXPECT(begin(s, "t", K("orphan"), "in", T0, NULL), ID_RUN);
  int status = 0;
  waitpid(pid, &status, 0);
  CT_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the claimer died as planned");
  close(ready[0]);
  close(ready[1]);
  id_abort(s, "t", K("orphan"));

  /* a reused pid: the owner is this (live) process but started at another time */
  char h[65], buf[1024];
  long long start = 0;
  FILE *f = fopen("/proc/self/stat", "r");
  if (f) {
    char line[1024];
    if (fgets(line, sizeof line, f)) {
      const char *p = strrchr(line, ')') + 2;
      for (int i = 3; i < 22; i++) p = strchr(p, ' ') + 1;
      start = atoll(p);
    }
    fclose(f);
  }
  hash_of("in", h);
  const char *fmt = "{\"format\":\"luma-idempotency\",\"version\":1,\"records\":[{\"tool\":\"t\",\"key\":\"reused\","
                    "\"input_hash\":\"%s\",\"state\":\"pending\",\"claimed_at\":1,\"owner\":{\"pid\":%ld,"
                    "\"start_time\":%lld,\"token\":\"00\"}}]}";
  snprintf(buf, sizeof buf, fmt, h, (long)getpid(), start + 1);
  spit(path, buf, strlen(buf));
  EXPECT(begin(s, "t", K("reused"), "in", T0, NULL), ID_RUN);
  /* the same process at the same start: another call of ours, still running */
  snprintf(buf, sizeof buf, fmt, h, (long)getpid(), start);
  spit(path, buf, strlen(buf));
  EXPECT(begin(s, "t", K("reused"), "in", T0, NULL), ID_WAIT);
  id_close(s);

  /* another store of this process: wait while it holds the claim, run once it is closed */
  s = open_file(path, NULL, T0);
  id_store *s2 = open_file(path, NULL, T0);
  if (!s || !s2) return;
  EXPECT(begin(s, "t", K("shared"), "in", T0, NULL), ID_RUN);
  EXPECT(begin(s2, "t", K("shared"), "in", T0, NULL), ID_WAIT);
  id_abort(s2, "t", K("shared"));  /* not its claim: no effect */
  EXPECT(begin(s2, "t", K("shared"), "in", T0, NULL), ID_WAIT);
  id_close(s);
  EXPECT(begin(s2, "t", K("shared"), "in", T0, NULL), ID_RUN);
  char err[256];
  CT_CHECK(commit(s2, "t", K("shared"), "in", "1", T0, TTL, err, sizeof err) == 0, "%s", err);
  id_close(s2);
}

typedef struct race_counts {
  int run, replay, wait, bad;
} race_counts;

static void race_loop(id_store *s, int logfd, int child, int calls, int keys, race_counts *n);

/* A store opened before fork is used by the child: its flock must be its own. */
static void test_forked_handle(void) {
  const char *path = tmp_path("forked.json");
  char err[256];
  id_store *s = open_file(path, NULL, T0);
  if (!s) return;
  EXPECT(begin(s, "t", K("parent"), "in", T0, NULL), ID_RUN);
  pid_t pid = fork();
  if (pid == 0) {
    int ok = begin(s, "t", K("parent"), "in", T0, NULL) == ID_WAIT;
    ok = ok && begin(s, "t", K("child"), "in", T0, NULL) == ID_RUN;
    ok = ok && commit(s, "t", K("child"), "in", "\"from the child\"", T0, TTL, err, sizeof err) == 0;
    id_abort(s, "t", K("parent"));  /* the parent's claim, not the child's */
    id_close(s);
    _exit(ok ? 0 : 1);
  }
  wait_child(pid, "forked handle");
  char *r = NULL;
  EXPECT(begin(s, "t", K("child"), "in", T0, &r), ID_REPLAY);
  CT_EQ_STR("\"from the child\"", r);
  free(r);
  EXPECT(begin(s, "t", K("parent"), "in", T0, NULL), ID_WAIT);
  CT_CHECK(commit(s, "t", K("parent"), "in", "1", T0, TTL, err, sizeof err) == 0, "%s", err);

  /* parent and child race through the one handle: the handler still runs once per key */
  int fds[2];
  race_counts mine = { 0, 0, 0, 0 }, theirs = { 0, 0, 0, 0 };
  if (pipe(fds) != 0) return;
  pid = fork();
  if (pid == 0) {
    race_loop(s, -1, 1, 40, 10, &theirs);
    id_close(s);
    _exit(write(fds[1], &theirs, sizeof theirs) == (ssize_t)sizeof theirs && !theirs.bad ? 0 : 1);
  }
  race_loop(s, -1, 0, 40, 10, &mine);
  CT_CHECK(read(fds[0], &theirs, sizeof theirs) == (ssize_t)sizeof theirs, "the child reported");
  close(fds[0]);
  close(fds[1]);
  wait_child(pid, "race through a forked handle");
  CT_CHECK(mine.run + theirs.run == 10 && !mine.bad, "10 keys ran %d + %d times", mine.run, theirs.run);
  id_close(s);
}

/* Changes made through another path are seen: a deleted file, another writer. */
static void test_outside_changes(void) {
  const char *path = tmp_path("outside.json");
  char err[256];
  id_store *s = open_file(path, NULL, T0);
  if (!s) return;
  CT_CHECK(commit(s, "t", K("k"), "in", "1", T0, TTL, err, sizeof err) == 0, "%s", err);
  unlink(path);
  EXPECT(begin(s, "t", K("k"), "in", T0, NULL), ID_RUN);
  CT_CHECK(exists(path), "a deleted file is written again");
  id_abort(s, "t", K("k"));
  char h[65], buf[1024];
  hash_of("in", h);
  snprintf(buf, sizeof buf, "{\"format\":\"luma-idempotency\",\"version\":1,\"records\":[{\"tool\":\"t\",\"key\":\"k\","
           "\"input_hash\":\"%s\",\"state\":\"done\",\"created_at\":1,\"expires_at\":%lld,\"result\":\"outside\"}]}",
           h, T0 + 10);
  spit(path, buf, strlen(buf));
  char *r = NULL;
  EXPECT(begin(s, "t", K("k"), "in", T0, &r), ID_REPLAY);
  CT_EQ_STR("\"outside\"", r);
  free(r);
  EXPECT(begin(s, "t", K("k"), "in", T0 + 10, NULL), ID_RUN);
  id_close(s);
}

#define RACE_PROCS 8
#define RACE_CALLS 200
#define RACE_KEYS 50

/* calls begin/commit cycles over keys; a run appends "key\n" to logfd. */
static void race_loop(id_store *s, int logfd, int child, int calls, int keys, race_counts *n) {
  char err[256];
  for (int i = 0; i < calls; i++) {
    char key[16], input[32], want[64], *r = NULL;
    /* all children walk the keys in the same order, to meet on them */
    int k = (i * 7 + child % 2) % keys;
    snprintf(key, sizeof key, "key%d", k);
    snprintf(input, sizeof input, "input of %d", k);
    snprintf(want, sizeof want, "{\"key\":\"%s\"}", key);
    for (;;) {
      id_status st = begin(s, "race", key, strlen(key), input, T0, &r);
      if (st == ID_WAIT) { n->wait++; usleep(1000); continue; }
      if (st == ID_RUN) {
        char line[20];
        int len = snprintf(line, sizeof line, "%s\n", key);
        if (logfd >= 0 && write(logfd, line, (size_t)len) != len) n->bad++;
        usleep(2000);  /* a handler takes time: others come for the same key meanwhile */
        if (commit(s, "race", key, strlen(key), input, want, T0, TTL, err, sizeof err) != 0) n->bad++;
        n->run++;
      } else if (st == ID_REPLAY) {
        if (strcmp(r, want) != 0) n->bad++;
        n->replay++;
      } else {
        n->bad++;
      }
      break;
    }
    free(r);
  }
}

static void race_child(const char *path, const char *log, int child, int out) {
  race_counts n = { 0, 0, 0, 0 };
  id_store *s = open_file(path, NULL, T0);
  int logfd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (!s || logfd < 0) n.bad++;
  else race_loop(s, logfd, child, RACE_CALLS, RACE_KEYS, &n);
  id_close(s);
  if (logfd >= 0) close(logfd);
  if (write(out, &n, sizeof n) != (ssize_t)sizeof n) n.bad++;
  _exit(n.bad ? 1 : 0);
}

static void test_race(void) {
  const char *path = tmp_path("race.json"), *log = tmp_path("race.log");
  int fds[2];
  pid_t pids[RACE_PROCS];
  if (pipe(fds) != 0) return;
  for (int c = 0; c < RACE_PROCS; c++) {
    pids[c] = fork();
    if (pids[c] == 0) {
      close(fds[0]);
      race_child(path, log, c, fds[1]);
    }
  }
  close(fds[1]);
  race_counts total = { 0, 0, 0, 0 }, n;
  int reports = 0;
  while (read(fds[0], &n, sizeof n) == (ssize_t)sizeof n) {
    total.run += n.run;
    total.replay += n.replay;
    total.wait += n.wait;
    total.bad += n.bad;
    reports++;
  }
  close(fds[0]);
  for (int c = 0; c < RACE_PROCS; c++) wait_child(pids[c], "race");
  CT_CHECK(reports == RACE_PROCS, "%d of %d children reported", reports, RACE_PROCS);
  CT_CHECK(total.bad == 0, "%d calls went wrong", total.bad);
  CT_CHECK(total.run == RACE_KEYS, "the handler ran %d times for %d keys", total.run, RACE_KEYS);
  CT_CHECK(total.run + total.replay == RACE_PROCS * RACE_CALLS, "%d runs + %d replays", total.run, total.replay);
  if (verbose) fprintf(stderr, "race: %d runs, %d replays, %d waits\n", total.run, total.replay, total.wait);

  char *text = slurp(log, NULL);
  int lines = 0, seen[RACE_KEYS] = { 0 }, dup = 0;
  for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
    int k = atoi(line + 3);
    lines++;
    if (k >= 0 && k < RACE_KEYS && seen[k]++) dup++;
  }
  free(text);
  CT_CHECK(lines == RACE_KEYS && dup == 0, "the log has %d lines, %d repeated", lines, dup);
}

/* Writes claims and results forever; killed by the parent. A holding writer stops inside its third handler and
   says so in progress[1], so that its kill surely leaves a pending claim, however slow the machine (valgrind). */
static void writer_child(const char *path, const char *pass, int round, int hold, volatile int *progress) {
  char err[256];
  id_store *s = open_file(path, pass, T0);
  if (!s) _exit(1);
  for (int i = 0;; i++) {
    char key[32];
    snprintf(key, sizeof key, "r%d-%d", round, i);
    progress[0] = i;
    id_status st = begin(s, "w", key, strlen(key), "in", T0, NULL);
    if (st == ID_RUN && hold && i == 2) {
      progress[1] = 1;
      for (;;) pause();
    }
    if (st == ID_RUN) {
      usleep(2000);  /* the handler: most kills land while the claim is pending */
      commit(s, "w", key, strlen(key), "in", "{\"written\":true}", T0, TTL, err, sizeof err);
    }
  }
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_idem: a call blocked (SIGALRM)\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(2);
  _exit(2);
}

#define KILL_ROUNDS 20

static void test_kill9(void) {
  volatile int *progress = mmap(NULL, 2 * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (progress == MAP_FAILED) return;
  signal(SIGALRM, on_alarm);
  srand((unsigned)(time(NULL) ^ getpid()));
  int taken_over = 0, parsed = 0;
  for (int round = 0; round < KILL_ROUNDS; round++) {
    const char *pass = round % 2 ? "pw" : NULL;
    const char *path = tmp_path(pass ? "kill-enc.json" : "kill.json");
    int hold = round % 4 >= 2;  /* one plain and one encrypted round in four */
    progress[0] = -1;
    progress[1] = 0;
    pid_t pid = fork();
    if (pid == 0) writer_child(path, pass, round, hold, progress);
    if (hold) {
      for (int waited = 0; !progress[1] && waited < 60000; waited++) usleep(500);
      CT_CHECK(progress[1], "round %d: the writer reached its held claim", round);
    } else {
      usleep((useconds_t)(3000 + rand() % 30000));
    }
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    CT_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "round %d: killed", round);

    char owner[48], *text = slurp(path, NULL);
    snprintf(owner, sizeof owner, "\"pid\":%ld,", (long)pid);
    /* an encrypted file hides the owner: there only a held writer is known to have left its claim */
    int pending = hold || (text && strstr(text, owner) != NULL);
    if (hold && !pass) CT_CHECK(text && strstr(text, owner), "round %d: the held claim is in the file", round);
    if (!pass) {
      ar_arena a;
      char perr[128] = "";
      ar_init(&a);
      /* no file yet when the writer died before its open */
      CT_CHECK(!text || json_parse(&a, text, strlen(text), 600, perr, sizeof perr) != NULL,
               "round %d: the file is JSON: %s", round, perr);
      ar_free(&a);
      parsed += text != NULL;
    }
    free(text);

    alarm(30);
    id_store *s = open_file(path, pass, T0);
    CT_CHECK(s != NULL, "round %d: the store opens", round);
    if (!s) {
      alarm(0);
      continue;
    }
    CT_CHECK(id_quarantined(s, NULL, 0) == 0, "round %d: nothing quarantined", round);
    text = slurp(path, NULL);
    CT_CHECK(!strstr(text, owner), "round %d: the dead writer's claim is gone after open", round);
    free(text);
    /* the key the writer was at: claimed (take it over), done (replay) or not begun */
    char key[32];
    snprintf(key, sizeof key, "r%d-%d", round, progress[0] < 0 ? 0 : progress[0]);
    id_status st = begin(s, "w", key, strlen(key), "in", T0, NULL);
    if (pending) EXPECT(st, ID_RUN);
    else CT_CHECK(st == ID_RUN || st == ID_REPLAY, "round %d: got %s", round, status_name(st));
    if (st == ID_RUN) id_abort(s, "w", key, strlen(key));
    taken_over += pending;
    EXPECT(begin(s, "w", K("after"), "in", T0, NULL), ID_RUN);
    id_abort(s, "w", K("after"));
    id_close(s);
    alarm(0);
    CT_CHECK(count_names(pass ? "kill-enc.json.tmp-" : "kill.json.tmp-") == 0, "round %d: no temp file left",
             round);
  }
  if (verbose) fprintf(stderr, "kill -9: %d of %d rounds left a claim behind, taken over\n", taken_over, KILL_ROUNDS);
  CT_CHECK(taken_over > 0, "some kill left a pending claim to take over");
  CT_CHECK(parsed > 0, "plain files were checked");
  signal(SIGALRM, SIG_DFL);
  munmap((void *)progress, 2 * sizeof(int));
}

typedef struct thread_arg {
  id_store *s;
  int id, runs, bad;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *t = p;
  char err[256];
  for (int i = 0; i < 60; i++) {
    char key[16];
    snprintf(key, sizeof key, "k%d", (i * 3 + t->id) % 20);
    id_status st;
    while ((st = begin(t->s, "th", key, strlen(key), "in", T0, NULL)) == ID_WAIT) usleep(100);
    if (st == ID_RUN) {
      t->runs++;
      if (commit(t->s, "th", key, strlen(key), "in", "true", T0, TTL, err, sizeof err) != 0) t->bad++;
    } else if (st != ID_REPLAY) {
      t->bad++;
    }
  }
  return NULL;
}

static void run_threads(id_store *s, const char *label) {
  pthread_t th[4];
  thread_arg args[4];
  int runs = 0, bad = 0;
  for (int i = 0; i < 4; i++) {
    args[i] = (thread_arg){ s, i, 0, 0 };
    pthread_create(&th[i], NULL, thread_main, &args[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    runs += args[i].runs;
    bad += args[i].bad;
  }
  CT_CHECK(runs == 20 && bad == 0, "%s: 4 threads, 20 keys: %d runs, %d bad", label, runs, bad);
}

/* A back end whose claims have a lease: renew answers what `answer` says
   and counts; begin always runs, commit and abort count. */
static int lease_answer, lease_renewals, lease_commits, lease_aborts, lease_lost;

static id_status lease_begin(void *impl, const char *tool, const char *key, size_t keylen, const char *hash,
                             long long now, char **result, long long *lease_left, char *err, size_t errlen) {
  (void)impl; (void)tool; (void)key; (void)keylen; (void)hash; (void)now; (void)result; (void)err; (void)errlen;
  (void)lease_left;
  return ID_RUN;
}
static int lease_commit(void *impl, const char *tool, const char *key, size_t keylen, const char *hash,
                        const char *text, size_t len, long long now, long long ttl, char *err, size_t errlen) {
  (void)impl; (void)tool; (void)key; (void)keylen; (void)hash; (void)text; (void)len; (void)now; (void)ttl;
  (void)err; (void)errlen;
  __atomic_add_fetch(&lease_commits, 1, __ATOMIC_SEQ_CST);
  return 0;
}
static void lease_abort(void *impl, const char *tool, const char *key, size_t keylen) {
  (void)impl; (void)tool; (void)key; (void)keylen;
  __atomic_add_fetch(&lease_aborts, 1, __ATOMIC_SEQ_CST);
}
static void lease_close(void *impl) { (void)impl; }
static int lease_renew(void *impl, const char *tool, const char *key, size_t keylen, const char *hash, char *err,
                       size_t errlen) {
  (void)impl; (void)tool; (void)key; (void)keylen; (void)hash; (void)err; (void)errlen;
  __atomic_add_fetch(&lease_renewals, 1, __ATOMIC_SEQ_CST);
  return __atomic_load_n(&lease_answer, __ATOMIC_SEQ_CST);
}
static const id_ops LEASE_OPS = { lease_begin, lease_commit, lease_abort, lease_close, NULL, lease_renew, NULL };

static void on_lease_lost(void *arg) {
  __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST);
}

static void nap_ms(long ms) {
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static int count(int *n) { return __atomic_load_n(n, __ATOMIC_SEQ_CST); }

/* Waits (up to 3 s, for a loaded machine) until *n is at least want. */
static int reaches(int *n, int want) {
  for (int i = 0; i < 300 && count(n) < want; i++) nap_ms(10);
  return count(n);
}

static void test_lease_renewal(void) {
  static const char H[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
  char err[256];
  char *res = NULL;
  id_store *s = id_wrap(&LEASE_OPS, NULL);
  CT_CHECK(s != NULL, "id_wrap");
  id_set_lease(s, 60);
  /* renewed every 20 ms while held; a commit stores and stops it */
  __atomic_store_n(&lease_answer, 1, __ATOMIC_SEQ_CST);
  CT_CHECK(id_begin(s, "t", "k1", 2, H, T0, &res, NULL, err, sizeof err) == ID_RUN, "begin runs");
  CT_CHECK(id_keep(s, "t", "k1", 2, H, on_lease_lost, &lease_lost) == 0, "keep");
  int renewed = reaches(&lease_renewals, 4);
  CT_CHECK(renewed >= 4, "a claim held under a 60 ms lease is renewed again and again (%d)", renewed);
  CT_CHECK(count(&lease_lost) == 0, "a renewed claim is not lost");
  CT_CHECK(id_commit(s, "t", "k1", 2, H, "{}", 2, T0, TTL, err, sizeof err) == 0, "commit a kept claim: %s", err);
  CT_CHECK(count(&lease_commits) == 1, "the result is stored");
  renewed = count(&lease_renewals);
  nap_ms(80);
  CT_CHECK(count(&lease_renewals) == renewed, "no renewal after the commit");
  /* a renewal that finds the claim another's: told once, and the commit refuses */
  CT_CHECK(id_keep(s, "t", "k2", 2, H, on_lease_lost, &lease_lost) == 0, "keep k2");
  __atomic_store_n(&lease_answer, 0, __ATOMIC_SEQ_CST);
  CT_CHECK(reaches(&lease_lost, 1) == 1, "a lost claim is told once (%d)", count(&lease_lost));
  int aborts = count(&lease_aborts);
  CT_CHECK(id_commit(s, "t", "k2", 2, H, "{}", 2, T0, TTL, err, sizeof err) == -1, "a lost claim stores nothing");
  CT_CHECK(strstr(err, "the claim on the key was lost while the handler ran") != NULL, "the error says why: %s", err);
  CT_CHECK(count(&lease_commits) == 1 && count(&lease_aborts) == aborts + 1, "nothing stored, the claim released");
  /* a store that cannot be reached for a whole lease: lost */
  __atomic_store_n(&lease_answer, -1, __ATOMIC_SEQ_CST);
  CT_CHECK(id_keep(s, "t", "k3", 2, H, on_lease_lost, &lease_lost) == 0, "keep k3");
  nap_ms(40);
  CT_CHECK(count(&lease_lost) == 1, "one failed renewal is not yet a loss");
  CT_CHECK(reaches(&lease_lost, 2) == 2, "a lease without a renewal is lost (%d)", count(&lease_lost));
  id_abort(s, "t", "k3", 2);
  /* an abort stops the renewals: no callback after it returns */
  __atomic_store_n(&lease_answer, 0, __ATOMIC_SEQ_CST);
  CT_CHECK(id_keep(s, "t", "k4", 2, H, on_lease_lost, &lease_lost) == 0, "keep k4");
  id_abort(s, "t", "k4", 2);
  nap_ms(60);
  CT_CHECK(count(&lease_lost) == 2, "an aborted claim is never told lost");
  /* a claim kept at close is dropped with the store */
  CT_CHECK(id_keep(s, "t", "k5", 2, H, on_lease_lost, &lease_lost) == 0, "keep k5");
  id_close(s);
  /* a file store looks at a running handler's claim: gone (the file
     removed under it) is lost, and the commit stores nothing */
  const char *path = tmp_path("kept.json");
  s = open_file(path, NULL, T0);
  CT_CHECK(s != NULL, "open %s", path);
  if (s) {
    int lost = count(&lease_lost);
    CT_CHECK(id_begin(s, "t", "k", 1, H, T0, &res, NULL, err, sizeof err) == ID_RUN, "file begin: %s", err);
    CT_CHECK(id_keep(s, "t", "k", 1, H, on_lease_lost, &lease_lost) == 0, "file keep");
    nap_ms(1200);
    CT_CHECK(count(&lease_lost) == lost, "a file claim still held is not lost");
    unlink(path);
    CT_CHECK(reaches(&lease_lost, lost + 1) == lost + 1, "a file claim removed is lost");
    CT_CHECK(id_commit(s, "t", "k", 1, H, "{}", 2, T0, TTL, err, sizeof err) == -1, "a lost file claim stores nothing");
    CT_CHECK(id_begin(s, "t", "k", 1, H, T0, &res, NULL, err, sizeof err) == ID_RUN, "and the key runs again");
    id_abort(s, "t", "k", 1);
    id_close(s);
  }
  /* a store whose claims have no lease renews nothing */
  s = id_open_memory();
  CT_CHECK(id_keep(s, "t", "k", 1, H, on_lease_lost, &lease_lost) == 0, "keep on memory is nothing to do");
  id_close(s);
}

static void test_threads(void) {
  id_store *s = id_open_memory();
  run_threads(s, "memory");
  id_close(s);
  s = open_file(tmp_path("threads.json"), NULL, T0);
  if (s) run_threads(s, "file");
  id_close(s);
}

int main(void) {
  const char *base = getenv("TMPDIR");
  verbose = getenv("LUMA_TEST_VERBOSE") != NULL;
  snprintf(dir, sizeof dir, "%s/luma-idem-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  static const struct { const char *name; void (*run)(void); } tests[] = {
    { "memory", test_memory }, { "file semantics", test_file_semantics }, { "persistence", test_persistence },
    { "purge at open", test_purge_at_open }, { "quarantine", test_quarantine },
    { "unknown version", test_unknown_version }, { "stale temp files", test_stale_temp_files },
    { "encryption", test_encryption }, { "production kdf", test_production_kdf },
    { "claims across processes", test_claims_across_processes }, { "forked handle", test_forked_handle },
    { "outside changes", test_outside_changes }, { "threads", test_threads }, { "race", test_race },
    { "kill -9", test_kill9 }, { "lease renewal", test_lease_renewal },
  };
  for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    tests[i].run();
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (verbose)
      fprintf(stderr, "%-24s %6.0f ms\n", tests[i].name,
              (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
  }
  remove_dir();
  CT_CHECK(!exists(dir), "the temp directory is removed");
  return ct_finish("idem");
}
