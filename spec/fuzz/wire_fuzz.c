/*
 * libFuzzer harness for sandbox/wire.c's decoder: the bytes a
 * process-isolated child sends back, which the host cannot trust. Each
 * input is decoded in a protected call, as isolate.c does. A value that
 * decodes must be one sx_copy could have made: sx_wire_put must accept it,
 * and its bytes must decode again to a value of the same encoded length
 * (key order may differ, so not the same bytes).
 *   make fuzz-wire FUZZ_SECONDS=300
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

#include "strbuf.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* wire.c reads the clock only with a deadline, which this harness never gives */
long long sx_now_ns(void);
long long sx_now_ns(void) { return 0; }

typedef struct job { const char *p; size_t len, used; int rc; } job;

static int decode(lua_State *L) {
  job *j = lua_touserdata(L, 1);
  lua_settop(L, 0);
  j->rc = sx_wire_get(L, j->p, j->len, 0, &j->used);
  return j->rc == 0 ? 1 : 0;
}

/* 0 when decoded (the value on top), -1 when refused, -2 on a memory error. */
static int run(lua_State *L, const char *p, size_t len, size_t *used) {
  job j = { p, len, 0, -3 };
  lua_pushcfunction(L, decode);
  lua_pushlightuserdata(L, &j);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) { lua_pop(L, 1); return -2; }
  if (j.rc != 0) {
    lua_pop(L, 1);
    if (j.rc != -1) abort();   /* no deadline: never late */
    return -1;
  }
  *used = j.used;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static lua_State *L;
  if (!L) L = luaL_newstate();
  int top = lua_gettop(L);
  size_t used = 0;
  int r = run(L, (const char *)data, size, &used);
  if (r == 0) {
    if (used > size) abort();
    sb_buf b;
    sb_init(&b);
    if (sx_wire_put(L, -1, &b) != 0) abort();   /* the decoder made a value sx_copy could not */
    lua_pop(L, 1);
    size_t again = 0;
    if (run(L, b.data, b.len, &again) != 0 || again != b.len) abort();
    sb_buf c;
    sb_init(&c);
    if (sx_wire_put(L, -1, &c) != 0 || c.len != b.len) abort();
    sb_free(&c);
    sb_free(&b);
  }
  lua_settop(L, top);
  return 0;
}
