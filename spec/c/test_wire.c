/* The wire form of values between the host and an isolated child
   (sandbox/wire.c): a round trip, and bytes a hostile child could send,
   which the host must refuse without allocating past the copy limits. */
#include "ctest.h"

#include <stdint.h>
#include <stdio.h>

#include <lauxlib.h>
#include <lualib.h>

#include "luma_limits.h"
#include "strbuf.h"
#include "wire.h"

static void put_u32(sb_buf *b, uint32_t n) { sb_add(b, (const char *)&n, sizeof n); }

/* Decodes len bytes in a protected call: 0 decoded (and used all), -1
   refused, -2 past the deadline. */
typedef struct job { const char *p; size_t len; long long deadline_ns; int rc; } job;

static int decode(lua_State *L) {
  job *j = lua_touserdata(L, 1);
  size_t used = 0;
  int got = sx_wire_get(L, j->p, j->len, j->deadline_ns, &used);
  j->rc = got == 0 && used == j->len ? 0 : got == -2 ? -2 : -1;
  return 0;
}

static int run_until(lua_State *L, const char *p, size_t len, long long deadline_ns) {
  job j = { p, len, deadline_ns, -3 };
  lua_pushcfunction(L, decode);
  lua_pushlightuserdata(L, &j);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) { lua_pop(L, 1); return -3; }
  return j.rc;
}

static int run(lua_State *L, const char *p, size_t len) { return run_until(L, p, len, 0); }

/* A table of n pairs "k<i>" = i. */
static void keyed_table(sb_buf *b, uint32_t n) {
  sb_addc(b, 'T');
  sb_addc(b, 0);
  put_u32(b, n);
  for (uint32_t i = 0; i < n; i++) {
    char key[16];
    int len = snprintf(key, sizeof key, "k%u", (unsigned)i);
    sb_addc(b, 's');
    put_u32(b, (uint32_t)len);
    sb_add(b, key, (size_t)len);
    sb_addc(b, 'i');
    int64_t v = i;
    sb_add(b, (const char *)&v, sizeof v);
  }
}

int main(void) {
  lua_State *L = luaL_newstate();

  /* a round trip */
  (void)luaL_dostring(L, "return { a = 1, b = { 2.5, 'x', true }, c = 'text' }");
  sb_buf b;
  sb_init(&b);
  CT_CHECK(sx_wire_put(L, -1, &b) == 0, "put");
  lua_pop(L, 1);
  CT_CHECK(run(L, b.data, b.len) == 0, "the round trip decodes");
  sb_free(&b);

  /* truncated: every prefix of a good frame is refused */
  (void)luaL_dostring(L, "return { list = { 1, 2, 3 }, s = 'hello' }");
  sb_init(&b);
  sx_wire_put(L, -1, &b);
  lua_pop(L, 1);
  int refused = 1;
  for (size_t n = 0; n < b.len; n++) refused = refused && run(L, b.data, n) == -1;
  CT_CHECK(refused, "every prefix is refused");
  sb_free(&b);

  /* more values than a copy between states may hold: one table of
     string keys with false values, each pair 7 bytes */
  size_t pairs = (size_t)LIM_COPY_MAX_VALUES + 10;
  sb_init(&b);
  sb_addc(&b, 'T');
  sb_addc(&b, 0);
  put_u32(&b, (uint32_t)pairs);
  for (size_t i = 0; i < pairs; i++) {
    sb_addc(&b, 's');
    put_u32(&b, 1);
    sb_addc(&b, (char)('a' + i % 26));
    sb_addc(&b, 'f');
  }
  CT_CHECK(!b.failed && run(L, b.data, b.len) == -1, "more values than the copy limit are refused");
  sb_free(&b);

  /* more string bytes than the copy limit, in strings that each fit */
  size_t chunk = (size_t)1 << 20, count = (size_t)LIM_COPY_MAX_BYTES / chunk + 2;
  sb_init(&b);
  sb_addc(&b, 'T');
  sb_addc(&b, 1);
  put_u32(&b, (uint32_t)count);
  char *blob = calloc(1, chunk);
  for (size_t i = 0; i < count; i++) {
    sb_addc(&b, 'i');
    int64_t k = (int64_t)i + 1;
    sb_add(&b, (const char *)&k, sizeof k);
    sb_addc(&b, 's');
    put_u32(&b, (uint32_t)chunk);
    sb_add(&b, blob, chunk);
  }
  free(blob);
  CT_CHECK(!b.failed && run(L, b.data, b.len) == -1, "more string bytes than the copy limit are refused");
  sb_free(&b);

  /* a child that knows the hash seed can send keys whose inserts are
     quadratic: the clock bounds reading them. A past deadline stops a big
     table; a small one is read before the clock is looked at */
  sb_init(&b);
  keyed_table(&b, 100000);
  CT_CHECK(!b.failed && run_until(L, b.data, b.len, 1) == -2, "a big reply read past its deadline is refused as late");
  CT_CHECK(run_until(L, b.data, b.len, 0) == 0, "the same reply decodes without a deadline");
  sb_free(&b);
  sb_init(&b);
  keyed_table(&b, 100);
  CT_CHECK(!b.failed && run_until(L, b.data, b.len, 1) == 0, "a small reply decodes before the clock is read");
  sb_free(&b);

  lua_close(L);
  return ct_finish("wire");
}
