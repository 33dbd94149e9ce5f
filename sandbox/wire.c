/* Values as bytes, for the pipe to a handler's process: a tag byte, then
   fixed-size numbers (host byte order: both ends are one build) or a
   length and its bytes. Tables are a flag (the JSON array mark), a count
   of pairs and the pairs. */
#include "wire.h"

#include <stdint.h>
#include <string.h>

#include "compat.h"
#include "ljson.h"
#include "luma_limits.h"
#include "sandbox.h"

#define WIRE_DEPTH_MAX 250

enum { W_NIL = 'n', W_NULL = 'z', W_FALSE = 'f', W_TRUE = 't', W_INT = 'i', W_NUM = 'd', W_STR = 's',
       W_TABLE = 'T' };

static void put_u32(sb_buf *b, uint32_t v) { sb_add(b, (const char *)&v, sizeof v); }

static int put(lua_State *L, int idx, sb_buf *b, int depth) {
  switch (lua_type(L, idx)) {
    case LUA_TNIL: sb_addc(b, W_NIL); return 0;
    case LUA_TBOOLEAN: sb_addc(b, lua_toboolean(L, idx) ? W_TRUE : W_FALSE); return 0;
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) != NULL) return -1;
      sb_addc(b, W_NULL);
      return 0;
    case LUA_TNUMBER:
      if (lc_isinteger(L, idx)) {
        int64_t v = (int64_t)lua_tointeger(L, idx);
        sb_addc(b, W_INT);
        sb_add(b, (const char *)&v, sizeof v);
      } else {
        double v = (double)lua_tonumber(L, idx);
        sb_addc(b, W_NUM);
        sb_add(b, (const char *)&v, sizeof v);
      }
      return 0;
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(L, idx, &len);
      if (len > UINT32_MAX) return -1;
      sb_addc(b, W_STR);
      put_u32(b, (uint32_t)len);
      sb_add(b, s, len);
      return 0;
    }
    case LUA_TTABLE: {
      if (depth >= WIRE_DEPTH_MAX || !lua_checkstack(L, 3)) return -1;
      idx = lc_absindex(L, idx);
      uint32_t n = 0;
      lua_pushnil(L);
      while (lua_next(L, idx)) { lua_pop(L, 1); n++; }
      sb_addc(b, W_TABLE);
      sb_addc(b, (char)lj_has_array_mt(L, idx));
      put_u32(b, n);
      lua_pushnil(L);
      while (lua_next(L, idx)) {
        /* keys are strings or integers (sx_copy's rule); never converted */
        if (put(L, -2, b, depth + 1) != 0 || put(L, -1, b, depth + 1) != 0) { lua_pop(L, 2); return -1; }
        lua_pop(L, 1);
      }
      return 0;
    }
    default: return -1;
  }
}

int sx_wire_put(lua_State *L, int idx, sb_buf *b) {
  return put(L, idx, b, 0) == 0 && !b->failed ? 0 : -1;
}

/* values and string bytes left: what the copy limits allow, so that a
   hostile child's reply cannot make the host allocate more than a copy
   between states could (lengths alone bound only the frame). A child that
   knows the state's hash seed (it is a copy of the host) can send keys that
   all collide, whose inserts are quadratic: the clock bounds that, read
   every SX_CLOCK_EVERY pairs. */
typedef struct reader {
  const char *p;
  size_t left, values, bytes;
  long long deadline_ns;          /* 0: none */
  unsigned pairs;
  int late;
} reader;

static int take(reader *r, void *out, size_t n) {
  if (r->left < n) return -1;
  memcpy(out, r->p, n);
  r->p += n;
  r->left -= n;
  return 0;
}

static int get(lua_State *L, reader *r, int depth) {
  char tag;
  if (r->values == 0) return -1;
  r->values--;
  if (take(r, &tag, 1) != 0) return -1;
  switch (tag) {
    case W_NIL: lua_pushnil(L); return 0;
    case W_NULL: lua_pushlightuserdata(L, NULL); return 0;
    case W_FALSE: lua_pushboolean(L, 0); return 0;
    case W_TRUE: lua_pushboolean(L, 1); return 0;
    case W_INT: {
      int64_t v;
      if (take(r, &v, sizeof v) != 0) return -1;
      lua_pushinteger(L, (lua_Integer)v);
      return 0;
    }
    case W_NUM: {
      double v;
      if (take(r, &v, sizeof v) != 0) return -1;
      lua_pushnumber(L, (lua_Number)v);
      return 0;
    }
    case W_STR: {
      uint32_t n;
      if (take(r, &n, sizeof n) != 0 || r->left < n || r->bytes < n) return -1;
      r->bytes -= n;
      lua_pushlstring(L, r->p, n);
      r->p += n;
      r->left -= n;
      return 0;
    }
    case W_TABLE: {
      char array;
      uint32_t n;
      if (depth >= WIRE_DEPTH_MAX || take(r, &array, 1) != 0 || take(r, &n, sizeof n) != 0) return -1;
      /* a pair takes at least two bytes: a count cannot claim more */
      if (n > r->left / 2 || !lua_checkstack(L, 4)) return -1;
      lua_createtable(L, 0, 0);
      int t = lua_gettop(L);
      for (uint32_t i = 0; i < n; i++) {
        if (++r->pairs % SX_CLOCK_EVERY == 0 && r->deadline_ns && sx_now_ns() > r->deadline_ns) r->late = 1;
        if (r->late || get(L, r, depth + 1) != 0) { lua_settop(L, t - 1); return -1; }
        int kt = lua_type(L, -1);
        /* integer keys 1..n only, as sx_copy makes them: keys that
           collide in the hash part would make the inserts quadratic */
        int bad = kt != LUA_TSTRING && kt != LUA_TNUMBER;
        if (kt == LUA_TNUMBER)
          bad = !lc_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > (lua_Integer)n;
        if (bad || get(L, r, depth + 1) != 0) {
          lua_settop(L, t - 1);
          return -1;
        }
        lua_rawset(L, t);
      }
      if (array) {
        lj_push_array_mt(L);
        lua_setmetatable(L, t);
      }
      return 0;
    }
    default: return -1;
  }
}

int sx_wire_get(lua_State *L, const char *p, size_t len, long long deadline_ns, size_t *used) {
  /* a key and its value are two values here, one in sx_copy: twice the limit */
  reader r = { p, len, 2 * (size_t)LIM_COPY_MAX_VALUES + 1, (size_t)LIM_COPY_MAX_BYTES, deadline_ns, 0, 0 };
  int top = lua_gettop(L);
  if (get(L, &r, 0) != 0) {
    lua_settop(L, top);
    return r.late ? -2 : -1;
  }
  *used = len - r.left;
  return 0;
}
