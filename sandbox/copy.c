/* Copying values between Lua states: raw reads, bounded, JSON-like values only. */
#include "sandbox.h"

#include <stdio.h>
#include <math.h>
#include <string.h>

#include "compat.h"
#include "ljson.h"
#include "luma_limits.h"

typedef struct sx_copier {
  lua_State *from, *to;
  const sx_limits *lim;
  size_t values, bytes;
  int late;                       /* the deadline passed */
  unsigned entries;               /* pairs copied, for reading the clock now and then */
  int depth;
  int root_keys;                  /* > 0: the root should be a record of about so many string keys */
  const void *tables[LIM_COPY_DEPTH_CAP + 1];
  char *err;
  size_t errlen;
} sx_copier;

void sx_default_limits(sx_limits *lim) {
  lim->max_depth = LIM_COPY_DEPTH;
  lim->max_values = LIM_COPY_MAX_VALUES;
  lim->max_bytes = (size_t)LIM_COPY_MAX_BYTES;
  lim->finite_numbers = 0;
  lim->deadline_ns = 0;
}

static int fail(sx_copier *c, const char *fmt, const char *arg) {
  if (c->err && c->errlen) snprintf(c->err, c->errlen, fmt, arg);
  return -1;
}

static int copy(sx_copier *c, int idx);

/* Walking a table costs its slots, which a handler can make many while its
   keys stay few, and use again and again; and inserting keys that all
   collide costs the square of their number (a process-isolated child has
   a copy of the states' hash seeds). The clock bounds both: read on each
   table, and every SX_CLOCK_EVERY pairs. */
static int past_deadline(sx_copier *c) {
  if (!c->lim->deadline_ns || sx_now_ns() <= c->lim->deadline_ns) return 0;
  c->late = 1;
  fail(c, "%s", "copying it passed the call's deadline");
  return 1;
}

/* A key (a string, or an integer 1..n) is not a value of its own:
   max_values counts what the data holds, and a key's bytes count. */
static int copy_key(sx_copier *c, int idx) {
  if (lua_type(c->from, idx) == LUA_TNUMBER) {
    lua_pushinteger(c->to, lua_tointeger(c->from, idx));
    return 0;
  }
  size_t len;
  const char *s = lua_tolstring(c->from, idx, &len);
  c->bytes += len;
  if (c->bytes > c->lim->max_bytes) {
    char n[24];
    snprintf(n, sizeof n, "%zu", c->lim->max_bytes);
    return fail(c, "its strings hold more than %s bytes", n);
  }
  lua_pushlstring(c->to, s, len);
  return 0;
}

/* Drops the table being made at dst of `to`, and what is above it, after
   the key and value that lua_next left on `from`: a copy failed there. */
static void drop_table(sx_copier *c, int dst) {
  lua_pop(c->from, 2);
  lua_settop(c->to, dst - 1);
  c->depth--;
}

/* Copies the key and value that lua_next left on `from` into the table at
   dst of `to`, leaving the key for the next lua_next. -1 (the table
   dropped) when they cannot be copied. */
static int copy_entry(sx_copier *c, int dst) {
  /* absolute indices: within one state each copy moves the top */
  int k = lua_gettop(c->from) - 1;
  if ((++c->entries % SX_CLOCK_EVERY == 0 && past_deadline(c)) || copy_key(c, k) != 0 || copy(c, k + 1) != 0) {
    drop_table(c, dst);
    return -1;
  }
  lua_rawset(c->to, dst);
  lua_pop(c->from, 1);
  return 0;
}

/* The table at idx is copied to dst: it keeps its JSON array mark. */
static int table_done(sx_copier *c, int idx, int dst) {
  if (lj_has_array_mt(c->from, idx)) {
    lj_push_array_mt(c->to);
    lua_setmetatable(c->to, dst);
  }
  c->depth--;
  return 0;
}

/* The root of a value that should be a record of about `keys` string keys
   (sx_copy_record): copied in one pass, sized from that, with no counting
   pass; a table that holds more string keys grows as they come, which their
   seeded hashes keep linear. Returns 0 when copied, -1 on failure (as copy), 1
   when a key is not a string: nothing is left copied, and the counting pass
   decides. */
static int copy_record(sx_copier *c, int idx, int keys) {
  lua_State *from = c->from, *to = c->to;
  lua_createtable(to, 0, keys);
  int dst = lua_gettop(to);
  lua_pushnil(from);
  while (lua_next(from, idx)) {
    if (lua_type(from, -2) != LUA_TSTRING) {
      /* the counting pass goes on at the same depth; what was copied stays
         counted, so that both passes together stay within the limits (a
         record's root with such a key is refused anyway) */
      lua_pop(from, 2);
      lua_settop(to, dst - 1);
      return 1;
    }
    if (copy_entry(c, dst) != 0) return -1;
  }
  return table_done(c, idx, dst);
}

static int copy_table(sx_copier *c, int idx) {
  lua_State *from = c->from, *to = c->to;
  const void *p = lua_topointer(from, idx);
  if (c->depth >= c->lim->max_depth || c->depth >= LIM_COPY_DEPTH_CAP) {
    char n[24];
    snprintf(n, sizeof n, "%d", c->depth);
    return fail(c, "it is nested more than %s levels deep", n);
  }
  for (int i = 0; i < c->depth; i++)
    if (c->tables[i] == p) return fail(c, "%s", "a table contains itself");
  if (!lua_checkstack(from, 4) || !lua_checkstack(to, 4)) return fail(c, "%s", "it is nested too deeply");
  if (past_deadline(c)) return -1;
  c->tables[c->depth++] = p;
  if (c->depth == 1 && c->root_keys > 0) {
    int r = copy_record(c, idx, c->root_keys);
    if (r <= 0) return r;
  }
  /* sized up front from the keys themselves (`#t` is any border: a few keys
     can claim a huge array), since growing a table as keys arrive rehashes
     it each time; integer keys must be 1..n, n the number of keys: an array.
     Others cannot be JSON, and colliding ones would make the inserts
     quadratic. */
  long long nkeys = 0, nint = 0;
  lua_pushnil(from);
  while (lua_next(from, idx)) {
    lua_pop(from, 1);
    nkeys++;
    if (lua_type(from, -1) == LUA_TNUMBER) nint++;
  }
  if (nkeys > (long long)c->lim->max_values) {
    c->depth--;
    char n[24];
    snprintf(n, sizeof n, "%zu", c->lim->max_values);
    return fail(c, "it holds more than %s values", n);
  }
  lua_createtable(to, (int)nint, (int)(nkeys - nint));
  int dst = lua_gettop(to);
  lua_pushnil(from);
  while (lua_next(from, idx)) {
    int kt = lua_type(from, -2);
    if (kt != LUA_TSTRING && kt != LUA_TNUMBER) {
      drop_table(c, dst);
      return fail(c, "a table key is a %s; only strings and numbers can be copied", lua_typename(from, kt));
    }
    if (kt == LUA_TNUMBER) {
      lua_Integer i = lc_isinteger(from, -2) ? lua_tointeger(from, -2) : 0;
      if (i < 1 || i > nint) {
        char n[64];
        snprintf(n, sizeof n, "%.17g", (double)lua_tonumber(from, -2));
        drop_table(c, dst);
        return fail(c, "a table has the key %s: numeric keys must be 1..n, an array with no holes", n);
      }
    }
    if (copy_entry(c, dst) != 0) return -1;
  }
  return table_done(c, idx, dst);
}

static int copy(sx_copier *c, int idx) {
  lua_State *from = c->from, *to = c->to;
  if (++c->values > c->lim->max_values) {
    char n[24];
    snprintf(n, sizeof n, "%zu", c->lim->max_values);
    return fail(c, "it holds more than %s values", n);
  }
  switch (lua_type(from, idx)) {
    case LUA_TNIL: lua_pushnil(to); return 0;
    case LUA_TBOOLEAN: lua_pushboolean(to, lua_toboolean(from, idx)); return 0;
    case LUA_TNUMBER:
#if LUA_VERSION_NUM >= 503
      if (lua_isinteger(from, idx)) { lua_pushinteger(to, lua_tointeger(from, idx)); return 0; }
#endif
      if (c->lim->finite_numbers && !isfinite((double)lua_tonumber(from, idx)))
        return fail(c, "it holds a number that is not finite%s", "");
      lua_pushnumber(to, lua_tonumber(from, idx));
      return 0;
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(from, idx, &len);
      c->bytes += len;
      if (c->bytes > c->lim->max_bytes) {
        char n[24];
        snprintf(n, sizeof n, "%zu", c->lim->max_bytes);
        return fail(c, "its strings hold more than %s bytes", n);
      }
      lua_pushlstring(to, s, len);
      return 0;
    }
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(from, idx) == NULL) { lua_pushlightuserdata(to, NULL); return 0; }
      return fail(c, "%s", "it holds a light userdata");
    case LUA_TTABLE:
      return copy_table(c, idx);
    default:
      return fail(c, "it holds a %s", lua_typename(from, lua_type(from, idx)));
  }
}

int sx_copy_record(lua_State *from, int idx, lua_State *to, const sx_limits *lim, int keys, char *err,
                   size_t errlen) {
  sx_copier c;
  c.from = from;
  c.to = to;
  c.lim = lim;
  c.values = c.bytes = 0;
  c.depth = 0;
  c.late = 0;
  c.entries = 0;
  c.root_keys = keys;
  c.err = err;
  c.errlen = errlen;
  int top_from = lua_gettop(from), top_to = lua_gettop(to);
  if (!lua_checkstack(to, 4)) return fail(&c, "%s", "no stack space");
  int r = copy(&c, lc_absindex(from, idx));
  if (r != 0) {
    lua_settop(to, top_to);
    if (c.late) r = -2;
  }
  /* copying within one state leaves the copy on top; otherwise the source
     state is left as it was */
  if (from != to) lua_settop(from, top_from);
  return r;
}

int sx_copy(lua_State *from, int idx, lua_State *to, const sx_limits *lim, char *err, size_t errlen) {
  return sx_copy_record(from, idx, to, lim, 0, err, errlen);
}
