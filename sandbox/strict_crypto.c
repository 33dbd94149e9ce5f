/* crypto in a strict state: mbedTLS's sha256 and HMAC, base64 and random
   bytes, each checking the deadline (a loop of them runs in C). */
#include "strict.h"

#include <lauxlib.h>

#include "compat.h"
#include "crypto.h"
#include "luma_limits.h"
#include "state.h"

#if LUA_VERSION_NUM >= 504

static void push_hex(lua_State *L, const unsigned char *d, size_t n) {
  static const char hex[] = "0123456789abcdef";
  char out[129];
  for (size_t i = 0; i < n && i < 64; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  lua_pushlstring(L, out, 2 * n);
}

static int c_sha256(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  unsigned char d[32];
  cr_sha256(s, len, d);
  push_hex(L, d, sizeof d);
  return 1;
}

static int c_hmac(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  size_t klen, len;
  const char *k = luaL_checklstring(L, 1, &klen), *s = luaL_checklstring(L, 2, &len);
  unsigned char d[32];
  cr_hmac_sha256(k, klen, s, len, d);
  push_hex(L, d, sizeof d);
  return 1;
}

static int c_b64_encode(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  size_t len;
  const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &len);
  size_t cap = (len + 2) / 3 * 4 + 1;
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, cap);
  size_t n = cr_base64_encode(s, len, out, cap);
  luaL_pushresultsize(&b, n);
  return 1;
}

static int c_b64_decode(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  size_t len, n = 0;
  const char *s = luaL_checklstring(L, 1, &len);
  luaL_Buffer b;
  unsigned char *out = (unsigned char *)luaL_buffinitsize(L, &b, len / 4 * 3 + 3);
  if (cr_base64_decode(s, len, out, len / 4 * 3 + 3, &n) != 0) {
    luaL_pushresultsize(&b, 0);
    lua_pushnil(L);
    lua_pushliteral(L, "invalid base64");
    return 2;
  }
  luaL_pushresultsize(&b, n);
  return 1;
}

static int c_random(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  lua_Integer n = luaL_checkinteger(L, 1);
  if (n < 0 || n > LIM_RANDOM_BYTES_MAX)
    return luaL_argerror(L, 1, lua_pushfstring(L, "between 0 and %d bytes", LIM_RANDOM_BYTES_MAX));
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, (size_t)n);
  if (cr_random(out, (size_t)n) != 0) return luaL_error(L, "no random bytes available");
  luaL_pushresultsize(&b, (size_t)n);
  return 1;
}

void sx_push_strict_crypto(lua_State *L) {
  static const luaL_Reg crypto_fns[] = {
    { "sha256", c_sha256 }, { "hmac_sha256", c_hmac }, { "base64_encode", c_b64_encode },
    { "base64_decode", c_b64_decode }, { "random_bytes", c_random }, { NULL, NULL }
  };
  lc_newlib(L, crypto_fns);
}

#endif
