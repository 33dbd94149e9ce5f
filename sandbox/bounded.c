/*
 * Library functions whose loops run in C, where the instruction hook never
 * fires: these versions look at the call's deadline as they go, so a handler
 * is stopped on time even inside them. Same behaviour as Lua 5.4's otherwise.
 * The pattern functions (find, match, gmatch, gsub) are in pattern.c.
 */
#include "bounded.h"

#include <limits.h>
#include <string.h>

#include <lauxlib.h>

#include "compat.h"
#include "pattern.h"
#include "state.h"

#if LUA_VERSION_NUM >= 504

/* Look at the clock every this many elements or bytes. */
#define SX_TICK_ELEMENTS 4096
#define SX_TICK_BYTES (256u << 10)

#define tick sx_tick

static lua_Integer length(lua_State *L, int t) {
  lua_len(L, t);
  int ok;
  lua_Integer n = lua_tointegerx(L, -1, &ok);
  lua_pop(L, 1);
  if (!ok) luaL_error(L, "object length is not an integer");
  return n;
}

/* table.concat(list [, sep [, i [, j]]]) */
static int b_concat(lua_State *L) {
  size_t lsep;
  const char *sep = luaL_optlstring(L, 2, "", &lsep);
  lua_Integer i = luaL_optinteger(L, 3, 1);
  lua_Integer last = lua_isnoneornil(L, 4) ? length(L, 1) : luaL_checkinteger(L, 4);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (lua_Integer k = 0; i <= last; i++, k++) {
    if ((k & (SX_TICK_ELEMENTS - 1)) == 0) tick(L);
    lua_geti(L, 1, i);
    if (!lua_isstring(L, -1))
      return luaL_error(L, "invalid value (at index %I) in table for 'concat'", (LUAI_UACINT)i);
    luaL_addvalue(&b);
    if (i != last) luaL_addlstring(&b, sep, lsep);
    if (i == LUA_MAXINTEGER) break;
  }
  luaL_pushresult(&b);
  return 1;
}

/* table.insert(list, [pos,] value) */
static int b_insert(lua_State *L) {
  lua_Integer n = length(L, 1) + 1, pos;
  switch (lua_gettop(L)) {
    case 2: pos = n; break;
    case 3:
      pos = luaL_checkinteger(L, 2);
      luaL_argcheck(L, (lua_Unsigned)pos - 1u < (lua_Unsigned)n, 2, "position out of bounds");
      for (lua_Integer i = n; i > pos; i--) {
        if (((n - i) & (SX_TICK_ELEMENTS - 1)) == 0) tick(L);
        lua_geti(L, 1, i - 1);
        lua_seti(L, 1, i);
      }
      break;
    default: return luaL_error(L, "wrong number of arguments to 'insert'");
  }
  lua_seti(L, 1, pos);
  return 0;
}

/* table.remove(list [, pos]) */
static int b_remove(lua_State *L) {
  lua_Integer size = length(L, 1), pos = luaL_optinteger(L, 2, size);
  if (pos != size)
    luaL_argcheck(L, (lua_Unsigned)pos - 1u <= (lua_Unsigned)size, 2, "position out of bounds");
  lua_geti(L, 1, pos);
  for (lua_Integer k = 0; pos < size; pos++, k++) {
    if ((k & (SX_TICK_ELEMENTS - 1)) == 0) tick(L);
    lua_geti(L, 1, pos + 1);
    lua_seti(L, 1, pos);
  }
  lua_pushnil(L);
  lua_seti(L, 1, pos);
  return 1;
}

/* table.move(a1, f, e, t [, a2]) */
static int b_move(lua_State *L) {
  lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3), t = luaL_checkinteger(L, 4);
  int tt = !lua_isnoneornil(L, 5) ? 5 : 1;
  luaL_checkany(L, tt);
  if (e >= f) {
    luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3, "too many elements to move");
    lua_Integer n = e - f + 1;
    luaL_argcheck(L, t <= LUA_MAXINTEGER - n + 1, 4, "destination wrap around");
    if (t > e || t <= f || (tt != 1 && !lua_compare(L, 1, tt, LUA_OPEQ))) {
      for (lua_Integer i = 0; i < n; i++) {
        if ((i & (SX_TICK_ELEMENTS - 1)) == 0) tick(L);
        lua_geti(L, 1, f + i);
        lua_seti(L, tt, t + i);
      }
    } else {
      for (lua_Integer i = n - 1; i >= 0; i--) {
        if (((n - 1 - i) & (SX_TICK_ELEMENTS - 1)) == 0) tick(L);
        lua_geti(L, 1, f + i);
        lua_seti(L, tt, t + i);
      }
    }
  }
  lua_pushvalue(L, tt);
  return 1;
}

/* Whether list[a] < list[b], with the comparator at index 2 or `<`. */
static int less(lua_State *L, lua_Integer a, lua_Integer b, unsigned long *count) {
  if ((++*count & (SX_TICK_ELEMENTS - 1)) == 0) tick(L);
  if (lua_isnoneornil(L, 2)) {
    lua_geti(L, 1, a);
    lua_geti(L, 1, b);
    int r = lua_compare(L, -2, -1, LUA_OPLT);
    lua_pop(L, 2);
    return r;
  }
  lua_pushvalue(L, 2);
  lua_geti(L, 1, a);
  lua_geti(L, 1, b);
  lua_call(L, 2, 1);
  int r = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return r;
}

static void swap(lua_State *L, lua_Integer a, lua_Integer b) {
  lua_geti(L, 1, a);
  lua_geti(L, 1, b);
  lua_seti(L, 1, a);
  lua_seti(L, 1, b);
}

static void sift_down(lua_State *L, lua_Integer root, lua_Integer n, unsigned long *count) {
  for (;;) {
    lua_Integer child = 2 * root;
    if (child > n) return;
    if (child < n && less(L, child, child + 1, count)) child++;
    if (!less(L, root, child, count)) return;
    swap(L, root, child);
    root = child;
  }
}

/* table.sort(list [, comp]): a heapsort, O(n log n) whatever the comparator
   answers, with no recursion; an inconsistent comparator gives some order. */
static int b_sort(lua_State *L) {
  lua_Integer n = length(L, 1);
  if (n > 1) {
    luaL_argcheck(L, n < INT_MAX, 1, "array too big");
    if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_settop(L, 2);
    luaL_checkstack(L, 8, "sorting");
    unsigned long count = 0;
    for (lua_Integer i = n / 2; i >= 1; i--) sift_down(L, i, n, &count);
    for (lua_Integer end = n; end > 1; end--) {
      swap(L, 1, end);
      sift_down(L, 1, end - 1, &count);
    }
  }
  return 0;
}

/* string.rep(s, n [, sep]) */
static int b_rep(lua_State *L) {
  size_t l, lsep;
  const char *s = luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  const char *sep = luaL_optlstring(L, 3, "", &lsep);
  if (n <= 0 || l + lsep == 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  if (l + lsep < l || l + lsep > (size_t)INT_MAX / (size_t)n)
    return luaL_error(L, "resulting string too large");
  size_t total = (size_t)n * l + (size_t)(n - 1) * lsep, since = 0;
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, total);
  for (lua_Integer i = 0; i < n; i++) {
    memcpy(p, s, l);
    p += l;
    if (i + 1 < n && lsep) {
      memcpy(p, sep, lsep);
      p += lsep;
    }
    since += l + lsep;
    if (since >= SX_TICK_BYTES) { since = 0; tick(L); }
  }
  luaL_pushresultsize(&b, total);
  return 1;
}

static void pattern_tick(lua_State *L) { tick(L); }

/* load(chunk [, name [, mode [, env]]]): text only, whatever mode says (a
   binary chunk can crash the VM), and parsed in slices with a look at the
   clock between them, since the parser runs in C. */
#define SX_LOAD_SLICE (4u << 10)

typedef struct sx_reader {
  const char *text;               /* the current piece */
  size_t len, pos;
  int fn;                         /* stack index of the reader function, or 0 */
  int slot;                       /* stack index keeping the current piece */
} sx_reader;

static const char *read_slice(lua_State *L, void *ud, size_t *size) {
  sx_reader *r = ud;
  if (r->pos == r->len) {
    if (!r->fn) { *size = 0; return NULL; }
    luaL_checkstack(L, 2, "too many nested functions");
    lua_pushvalue(L, r->fn);
    lua_call(L, 0, 1);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      *size = 0;
      return NULL;
    }
    if (!lua_isstring(L, -1)) luaL_error(L, "reader function must return a string");
    lua_replace(L, r->slot);
    r->text = lua_tolstring(L, r->slot, &r->len);
    r->pos = 0;
    if (r->len == 0) { *size = 0; return NULL; }
  }
  tick(L);
  size_t n = r->len - r->pos < SX_LOAD_SLICE ? r->len - r->pos : SX_LOAD_SLICE;
  *size = n;
  r->pos += n;
  return r->text + r->pos - n;
}

int sx_load_text(lua_State *L, const char *text, size_t len, const char *chunkname) {
  sx_reader r = { text, len, 0, 0, 0 };
  return lua_load(L, read_slice, &r, chunkname, "t");
}

static int b_load(lua_State *L) {
  int env = !lua_isnone(L, 4) ? 4 : 0;
  size_t len = 0;
  const char *s = lua_tolstring(L, 1, &len);
  sx_reader r = { s, s ? len : 0, 0, 0, 0 };
  const char *name = luaL_optstring(L, 2, s ? s : "=(load)");
  luaL_optstring(L, 3, "bt");
  lua_settop(L, 4);
  lua_pushnil(L);                 /* the slot that keeps the reader's pieces */
  r.slot = lua_gettop(L);
  if (!s) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    r.fn = 1;
  }
  int status = lua_load(L, read_slice, &r, name, "t");
  if (status == LUA_OK) {
    if (env) {
      lua_pushvalue(L, env);
      if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
    }
    return 1;
  }
  /* the deadline passed while parsing: that is no load error */
  if (sx_state_of(L)->expired) return lua_error(L);
  luaL_pushfail(L);
  lua_insert(L, -2);
  return 2;
}

/* loadfile and dofile read text only too. */
static int b_loadfile(lua_State *L) {
  const char *file = luaL_optstring(L, 1, NULL);
  int env = !lua_isnone(L, 3) ? 3 : 0;
  if (luaL_loadfilex(L, file, "t") == LUA_OK) {
    if (env) {
      lua_pushvalue(L, env);
      if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
    }
    return 1;
  }
  luaL_pushfail(L);
  lua_insert(L, -2);
  return 2;
}

static int dofile_rest(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  return lua_gettop(L) - 1;
}

static int b_dofile(lua_State *L) {
  const char *file = luaL_optstring(L, 1, NULL);
  lua_settop(L, 1);
  if (luaL_loadfilex(L, file, "t") != LUA_OK) return lua_error(L);
  lua_callk(L, 0, LUA_MULTRET, 0, dofile_rest);
  return dofile_rest(L, 0, 0);
}

void sx_open_bounded(lua_State *L) {
  static const luaL_Reg table_fns[] = {
    { "concat", b_concat }, { "insert", b_insert }, { "remove", b_remove },
    { "move", b_move }, { "sort", b_sort }, { NULL, NULL }
  };
  lua_getglobal(L, "table");
  if (lua_istable(L, -1)) lc_setfuncs(L, table_fns, 0);
  lua_pop(L, 1);
  lua_getglobal(L, "string");
  if (lua_istable(L, -1)) {
    lua_pushcfunction(L, b_rep);
    lua_setfield(L, -2, "rep");
  }
  lua_pop(L, 1);
  sp_set_tick(L, pattern_tick);
  sp_open(L);
  lua_pushcfunction(L, b_load);
  lua_setglobal(L, "load");
  /* a strict state has neither */
  static const luaL_Reg file_loaders[] = { { "loadfile", b_loadfile }, { "dofile", b_dofile }, { NULL, NULL } };
  for (const luaL_Reg *f = file_loaders; f->name; f++) {
    lua_getglobal(L, f->name);
    int present = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (present) {
      lua_pushcfunction(L, f->func);
      lua_setglobal(L, f->name);
    }
  }
}

#else /* LuaJIT and Lua 5.1: see sandbox/README.md */

void sx_open_bounded(lua_State *L) { (void)L; }

int sx_load_text(lua_State *L, const char *text, size_t len, const char *chunkname) {
  return luaL_loadbufferx(L, text, len, chunkname, "t");
}

#endif
