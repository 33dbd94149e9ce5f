/* json in a strict state: lua-cjson, set up strictly (its settings are not
   exposed), with the size of what it is given bounded. */
#include "strict.h"

#include <lauxlib.h>

#include "compat.h"
#include "luma_limits.h"
#include "state.h"

#if LUA_VERSION_NUM >= 504

/* lua-cjson's loops run in C, out of reach of the deadline hook, and its
   buffers are outside the state's allocator: what it is given is bounded
   instead (LIM_SANDBOX_JSON_*), so that one call takes milliseconds at most. */
/* Decoded values take at most this many bytes of the state's memory per
   byte of text (an array of empty tables comes close). */
#define SX_JSON_GROWTH 48

static int j_decode(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  size_t len;
  luaL_checklstring(L, 1, &len);
  if (len > (size_t)LIM_SANDBOX_JSON_MAX_TEXT) return luaL_error(L, "json.decode: the text is longer than %d bytes", LIM_SANDBOX_JSON_MAX_TEXT);
  /* lua-cjson keeps a buffer of its own while it decodes, and would lose
     it if the state's memory ran out half-way: it runs only with room */
  sx_state *s = sx_state_of(L);
  if (s->memory_limit && s->memory + len * SX_JSON_GROWTH > s->memory_limit)
    return luaL_error(L, "json.decode: decoding %d bytes may need more memory than the state has left", (int)len);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  return 1;
}

typedef struct json_size { size_t values, bytes; } json_size;

/* Counts the values and string bytes under idx (raw, as lua-cjson reads),
   stopping at the limits; deeper than the depth limit, cjson refuses. */
static void measure(lua_State *L, int idx, int depth, json_size *n) {
  if (++n->values > (size_t)LIM_SANDBOX_JSON_MAX_VALUES || n->bytes > (size_t)LIM_SANDBOX_JSON_MAX_TEXT) return;
  if ((n->values & 4095) == 0) sx_tick(L);
  if (lua_type(L, idx) == LUA_TSTRING) {
    n->bytes += lc_rawlen(L, idx);
  } else if (lua_type(L, idx) == LUA_TTABLE && depth < LIM_SANDBOX_JSON_DEPTH) {
    luaL_checkstack(L, 3, "json.encode");
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      int top = lua_gettop(L);
      measure(L, top - 1, depth + 1, n);
      measure(L, top, depth + 1, n);
      lua_pop(L, 1);
      if (n->values > (size_t)LIM_SANDBOX_JSON_MAX_VALUES || n->bytes > (size_t)LIM_SANDBOX_JSON_MAX_TEXT) {
        lua_pop(L, 1);
        return;
      }
    }
  }
}

static int j_encode(lua_State *L) {
  sx_tick(L);   /* called in a loop, each call can be long: check the deadline */
  luaL_checkany(L, 1);
  lua_settop(L, 1);
  json_size n = { 0, 0 };
  measure(L, 1, 0, &n);
  if (n.values > (size_t)LIM_SANDBOX_JSON_MAX_VALUES || n.bytes > (size_t)LIM_SANDBOX_JSON_MAX_TEXT)
    return luaL_error(L, "json.encode: the value is larger than %d values or %d bytes of text",
                      LIM_SANDBOX_JSON_MAX_VALUES, LIM_SANDBOX_JSON_MAX_TEXT);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  return 1;
}

/* Pushes { encode, decode, null } of lua-cjson, set up strictly. */
void sx_push_strict_json(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "cjson");
  lua_call(L, 1, 1);
  int cjson = lua_gettop(L);
  static const struct { const char *fn; int arg; } settings[] = {
    { "decode_invalid_numbers", 0 }, { "encode_invalid_numbers", 0 },
    { "decode_max_depth", LIM_SANDBOX_JSON_DEPTH }, { "encode_max_depth", LIM_SANDBOX_JSON_DEPTH }, { "encode_number_precision", 14 },
  };
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
    lua_getfield(L, cjson, settings[i].fn);
    if (settings[i].arg) lua_pushinteger(L, settings[i].arg); else lua_pushboolean(L, 0);
    lua_call(L, 1, 0);
  }
  lua_createtable(L, 0, 3);
  lua_getfield(L, cjson, "encode");
  lua_pushcclosure(L, j_encode, 1);
  lua_setfield(L, -2, "encode");
  lua_getfield(L, cjson, "decode");
  lua_pushcclosure(L, j_decode, 1);
  lua_setfield(L, -2, "decode");
  lua_getfield(L, cjson, "null");
  lua_setfield(L, -2, "null");
  lua_remove(L, cjson);
}

#endif
