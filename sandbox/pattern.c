/*
 * Lua 5.4 patterns (reference manual §6.4.1), interpreted straight from the
 * pattern text the way Lua 5.4.4 does it, so that results, the moment an
 * error is noticed (lazily, only when the matcher reaches the bad item), the
 * messages and the recursion limit are the same; what is added is a step
 * count that calls the state's tick.
 */
#include <ctype.h>
#include <stddef.h>
#include <string.h>

#include "lua.h"
#include "lauxlib.h"

#include "luma_limits.h"
#include "pattern.h"

#if LUA_VERSION_NUM >= 504

#define SP_ESC '%'

/* Length of a capture still open, and of a position capture "()". */
#define SP_OPEN ((ptrdiff_t)-1)
#define SP_POSITION ((ptrdiff_t)-2)

/* Bytes of bulk work (memcmp, scans) charged as one step. */
#define SP_BULK_SHIFT 4

/* No match yet in a gmatch iterator. */
#define SP_NONE ((size_t)-1)

typedef struct sp_tickbox {
  sp_tick_fn fn;
} sp_tickbox;

typedef struct sp_capture {
  const char *at;
  ptrdiff_t len;    /* or SP_OPEN, SP_POSITION */
} sp_capture;

/* One match in progress. Pointers are into Lua strings that the calling
   function keeps on its stack or in its upvalues. */
typedef struct sp_state {
  lua_State *L;
  const char *src, *src_end;
  const char *pat_end;
  sp_tick_fn tick;
  long left;        /* steps until the next tick */
  int depth;        /* nested matcher calls still allowed */
  int ncap;
  sp_capture cap[LIM_PATTERN_MAX_CAPTURES];
} sp_state;

typedef struct sp_iter {
  size_t pos;       /* where the next search starts */
  size_t last;      /* end of the previous match, or SP_NONE */
} sp_iter;

static const char sp_box_key = 'p';

static void tick_due(sp_state *ms) {
  ms->left = SP_TICK;
  if (ms->tick) ms->tick(ms->L);
}

#define SP_STEP(ms, n) \
  do { if (((ms)->left -= (long)(n)) <= 0) tick_due(ms); } while (0)

static void state_init(sp_state *ms, lua_State *L, sp_tick_fn tick,
                       const char *s, size_t ls, const char *pat_end) {
  ms->L = L;
  ms->src = s;
  ms->src_end = s + ls;
  ms->pat_end = pat_end;
  ms->tick = tick;
  ms->left = SP_TICK;
  ms->depth = LIM_PATTERN_MAX_DEPTH;
  ms->ncap = 0;
}

static void state_reset(sp_state *ms) {
  ms->depth = LIM_PATTERN_MAX_DEPTH;
  ms->ncap = 0;
}

static sp_tick_fn tick_of(lua_State *L, int idx) {
  sp_tickbox *box = (sp_tickbox *)lua_touserdata(L, idx);
  return box ? box->fn : NULL;
}

/* The 0-based offset where a search starts, from a 1-based, maybe negative
   init; greater than len when it lies beyond the end. */
static size_t start_offset(lua_Integer init, size_t len) {
  if (init > 0) return (size_t)init - 1;
  if (init == 0 || init < -(lua_Integer)len) return 0;
  return len - (size_t)(-init);
}

static int class_match(int c, int cl) {
  int r;
  switch (tolower(cl)) {
    case 'a': r = isalpha(c); break;
    case 'c': r = iscntrl(c); break;
    case 'd': r = isdigit(c); break;
    case 'g': r = isgraph(c); break;
    case 'l': r = islower(c); break;
    case 'p': r = ispunct(c); break;
    case 's': r = isspace(c); break;
    case 'u': r = isupper(c); break;
    case 'w': r = isalnum(c); break;
    case 'x': r = isxdigit(c); break;
    case 'z': r = (c == 0); break;   /* deprecated, still accepted by 5.4 */
    default: return cl == c;         /* an escaped character stands for itself */
  }
  return isupper(cl) ? !r : r != 0;
}

/* set points at '[', close at its ']'. */
static int set_match(int c, const char *set, const char *close) {
  const char *p = set + 1;
  int found = 1;
  if (*p == '^') {
    found = 0;
    p++;
  }
  for (; p < close; p++) {
    if (*p == SP_ESC) {
      p++;
      if (class_match(c, (unsigned char)*p)) return found;
    } else if (p + 2 < close && p[1] == '-') {
      if ((unsigned char)p[0] <= c && c <= (unsigned char)p[2]) return found;
      p += 2;
    } else if ((unsigned char)*p == c) {
      return found;
    }
  }
  return !found;
}

/* The end of the single-character class that starts at p. A set's first
   member may be ']' itself; '%' always takes the next byte with it. */
static const char *class_end(sp_state *ms, const char *p) {
  const char *q;
  if (*p == SP_ESC) {
    if (p + 1 >= ms->pat_end)
      luaL_error(ms->L, "malformed pattern (ends with '%%')");
    return p + 2;
  }
  if (*p != '[') return p + 1;
  q = p + 1;
  if (q < ms->pat_end && *q == '^') q++;
  do {
    if (q >= ms->pat_end)
      luaL_error(ms->L, "malformed pattern (missing ']')");
    if (*q++ == SP_ESC && q < ms->pat_end) q++;
  } while (q == ms->pat_end || *q != ']');
  SP_STEP(ms, (q - p) >> SP_BULK_SHIFT);
  return q + 1;
}

/* Does the class p..ep match the byte at s? */
static int single_match(sp_state *ms, const char *s, const char *p,
                        const char *ep) {
  int c;
  if (s >= ms->src_end) return 0;
  c = (unsigned char)*s;
  switch (*p) {
    case '.': return 1;
    case SP_ESC: return class_match(c, (unsigned char)p[1]);
    case '[':
      SP_STEP(ms, (ep - p) >> SP_BULK_SHIFT);
      return set_match(c, p, ep - 1);
    default: return (unsigned char)*p == c;
  }
}

static const char *match_here(sp_state *ms, const char *s, const char *p);

/* %bxy at s; p points at x. */
static const char *match_balance(sp_state *ms, const char *s, const char *p) {
  const char *t;
  int open, close, depth = 1;
  if (p + 1 >= ms->pat_end)
    luaL_error(ms->L, "malformed pattern (missing arguments to '%%b')");
  if (s >= ms->src_end || *s != *p) return NULL;
  open = *p;
  close = p[1];
  for (t = s + 1; t < ms->src_end; t++) {
    if (*t == close) {
      if (--depth == 0) break;
    } else if (*t == open) {
      depth++;
    }
  }
  SP_STEP(ms, (t - s) >> SP_BULK_SHIFT);
  return t < ms->src_end ? t + 1 : NULL;
}

/* %1..%9 (and the always invalid %0) at s. A position capture has no text
   and never matches. */
static const char *match_backref(sp_state *ms, const char *s, int digit) {
  int i = digit - '1';
  size_t len;
  if (i < 0 || i >= ms->ncap || ms->cap[i].len == SP_OPEN)
    luaL_error(ms->L, "invalid capture index %%%d", i + 1);
  if (ms->cap[i].len == SP_POSITION) return NULL;
  len = (size_t)ms->cap[i].len;
  SP_STEP(ms, len >> SP_BULK_SHIFT);
  if ((size_t)(ms->src_end - s) >= len && memcmp(ms->cap[i].at, s, len) == 0)
    return s + len;
  return NULL;
}

static const char *open_capture(sp_state *ms, const char *s, const char *p,
                                ptrdiff_t kind) {
  const char *r;
  if (ms->ncap >= LIM_PATTERN_MAX_CAPTURES) luaL_error(ms->L, "too many captures");
  ms->cap[ms->ncap].at = s;
  ms->cap[ms->ncap].len = kind;
  ms->ncap++;
  r = match_here(ms, s, p);
  if (!r) ms->ncap--;
  return r;
}

static const char *close_capture(sp_state *ms, const char *s, const char *p) {
  const char *r;
  int i = ms->ncap - 1;
  while (i >= 0 && ms->cap[i].len != SP_OPEN) i--;
  if (i < 0) luaL_error(ms->L, "invalid pattern capture");
  ms->cap[i].len = s - ms->cap[i].at;
  r = match_here(ms, s, p);
  if (!r) ms->cap[i].len = SP_OPEN;
  return r;
}

/* Class p..ep repeated as often as possible from s, then the rest of the
   pattern, giving back one repetition at a time. */
static const char *expand_greedy(sp_state *ms, const char *s, const char *p,
                                 const char *ep) {
  ptrdiff_t n = 0;
  while (single_match(ms, s + n, p, ep)) {
    n++;
    SP_STEP(ms, 1);
  }
  for (; n >= 0; n--) {
    const char *r = match_here(ms, s + n, ep + 1);
    if (r) return r;
  }
  return NULL;
}

/* The rest of the pattern first, one more repetition only when it fails. */
static const char *expand_lazy(sp_state *ms, const char *s, const char *p,
                               const char *ep) {
  for (;;) {
    const char *r = match_here(ms, s, ep + 1);
    if (r) return r;
    if (!single_match(ms, s, p, ep)) return NULL;
    s++;
  }
}

/* Matches pattern p (up to ms->pat_end) at s: the end of the match, or
   NULL. Items that need no backtracking loop here; the others recurse, and
   LIM_PATTERN_MAX_DEPTH bounds the recursion as Lua's matchdepth does. */
static const char *match_here(sp_state *ms, const char *s, const char *p) {
  const char *ep;
  int suffix;
  if (ms->depth == 0) luaL_error(ms->L, "pattern too complex");
  ms->depth--;
  while (p < ms->pat_end) {
    SP_STEP(ms, 1);
    switch (*p) {
      case '(':
        if (p + 1 < ms->pat_end && p[1] == ')')
          s = open_capture(ms, s, p + 2, SP_POSITION);
        else
          s = open_capture(ms, s, p + 1, SP_OPEN);
        goto done;
      case ')':
        s = close_capture(ms, s, p + 1);
        goto done;
      case '$':
        if (p + 1 == ms->pat_end) {
          if (s != ms->src_end) s = NULL;
          goto done;
        }
        break;   /* a '$' elsewhere is a literal */
      case SP_ESC:
        if (p + 1 == ms->pat_end) break;   /* class_end reports it */
        switch (p[1]) {
          case 'b':
            s = match_balance(ms, s, p + 2);
            if (!s) goto done;
            p += 4;
            continue;
          case 'f': {
            int before, at;
            p += 2;
            if (p >= ms->pat_end || *p != '[')
              luaL_error(ms->L, "missing '[' after '%%f' in pattern");
            ep = class_end(ms, p);
            before = s == ms->src ? 0 : (unsigned char)s[-1];
            at = s < ms->src_end ? (unsigned char)*s : 0;
            if (set_match(before, p, ep - 1) || !set_match(at, p, ep - 1)) {
              s = NULL;
              goto done;
            }
            p = ep;
            continue;
          }
          case '0': case '1': case '2': case '3': case '4':
          case '5': case '6': case '7': case '8': case '9':
            s = match_backref(ms, s, (unsigned char)p[1]);
            if (!s) goto done;
            p += 2;
            continue;
          default:
            break;
        }
        break;
      default:
        break;
    }
    ep = class_end(ms, p);
    suffix = ep < ms->pat_end ? *ep : 0;
    if (!single_match(ms, s, p, ep)) {
      if (suffix == '*' || suffix == '?' || suffix == '-') {
        p = ep + 1;
        continue;
      }
      s = NULL;
      goto done;
    }
    switch (suffix) {
      case '?': {
        const char *r = match_here(ms, s + 1, ep + 1);
        if (r) {
          s = r;
          goto done;
        }
        p = ep + 1;
        continue;
      }
      case '+':
        s = expand_greedy(ms, s + 1, p, ep);
        goto done;
      case '*':
        s = expand_greedy(ms, s, p, ep);
        goto done;
      case '-':
        s = expand_lazy(ms, s, p, ep);
        goto done;
      default:
        s++;
        p = ep;
        continue;
    }
  }
done:
  ms->depth++;
  return s;
}

/* Capture i of a match s..e: its length, or SP_POSITION; *at is where it
   starts. With no captures, "capture 0" is the whole match. */
static ptrdiff_t capture_span(sp_state *ms, int i, const char *s,
                              const char *e, const char **at) {
  if (i >= ms->ncap) {
    if (i != 0) luaL_error(ms->L, "invalid capture index %%%d", i + 1);
    *at = s;
    return e - s;
  }
  if (ms->cap[i].len == SP_OPEN) luaL_error(ms->L, "unfinished capture");
  *at = ms->cap[i].at;
  return ms->cap[i].len;
}

static void push_capture(sp_state *ms, int i, const char *s, const char *e) {
  const char *at;
  ptrdiff_t len = capture_span(ms, i, s, e, &at);
  if (len == SP_POSITION)
    lua_pushinteger(ms->L, (lua_Integer)(at - ms->src) + 1);
  else
    lua_pushlstring(ms->L, at, (size_t)len);
}

/* Pushes the captures, or the whole match s..e when there are none and s is
   not NULL (find passes NULL: it returns the bounds instead). */
static int push_captures(sp_state *ms, const char *s, const char *e) {
  int i, n = (ms->ncap == 0 && s != NULL) ? 1 : ms->ncap;
  luaL_checkstack(ms->L, n, "too many captures");
  for (i = 0; i < n; i++) push_capture(ms, i, s, e);
  return n;
}

static int has_specials(const char *p, size_t lp) {
  size_t i;
  for (i = 0; i < lp; i++) {
    switch (p[i]) {
      case '^': case '$': case '*': case '+': case '?':
      case '.': case '(': case '[': case '%': case '-':
        return 1;
      default:
        break;
    }
  }
  return 0;
}

static const char *plain_find(sp_state *ms, const char *s, size_t ls,
                              const char *p, size_t lp) {
  const char *last;
  long cost = 1 + (long)(lp >> SP_BULK_SHIFT);
  if (lp == 0) return s;
  if (lp > ls) return NULL;
  last = s + (ls - lp);
  while (s <= last) {
    const char *hit = (const char *)memchr(s, p[0], (size_t)(last - s) + 1);
    if (!hit) return NULL;
    SP_STEP(ms, cost + ((hit - s) >> (SP_BULK_SHIFT + 2)));
    if (memcmp(hit + 1, p + 1, lp - 1) == 0) return hit;
    s = hit + 1;
  }
  return NULL;
}

static int find_or_match(lua_State *L, int find) {
  size_t ls, lp, start;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  const char *pat_end = p + lp;
  sp_state ms;
  start = start_offset(luaL_optinteger(L, 3, 1), ls);
  if (start > ls) {
    luaL_pushfail(L);
    return 1;
  }
  state_init(&ms, L, tick_of(L, lua_upvalueindex(1)), s, ls, pat_end);
  if (find && (lua_toboolean(L, 4) || !has_specials(p, lp))) {
    const char *hit = plain_find(&ms, s + start, ls - start, p, lp);
    if (hit) {
      lua_pushinteger(L, (lua_Integer)(hit - s) + 1);
      lua_pushinteger(L, (lua_Integer)(hit - s + lp));
      return 2;
    }
  } else {
    const char *at = s + start;
    int anchored = lp > 0 && *p == '^';
    if (anchored) p++;
    for (;;) {
      const char *e;
      SP_STEP(&ms, 1);
      state_reset(&ms);
      e = match_here(&ms, at, p);
      if (e) {
        if (!find) return push_captures(&ms, at, e);
        lua_pushinteger(L, (lua_Integer)(at - s) + 1);
        lua_pushinteger(L, (lua_Integer)(e - s));
        return push_captures(&ms, NULL, NULL) + 2;
      }
      if (anchored || at >= ms.src_end) break;
      at++;
    }
  }
  luaL_pushfail(L);
  return 1;
}

static int sp_find(lua_State *L) {
  return find_or_match(L, 1);
}

static int sp_match(lua_State *L) {
  return find_or_match(L, 0);
}

/* Upvalues: tick box, subject, pattern, sp_iter. A '^' is no anchor here:
   as in Lua 5.4.4, gmatch matches it literally. */
static int gmatch_step(lua_State *L) {
  size_t ls, lp, at;
  const char *s = lua_tolstring(L, lua_upvalueindex(2), &ls);
  const char *p = lua_tolstring(L, lua_upvalueindex(3), &lp);
  sp_iter *it = (sp_iter *)lua_touserdata(L, lua_upvalueindex(4));
  sp_state ms;
  state_init(&ms, L, tick_of(L, lua_upvalueindex(1)), s, ls, p + lp);
  for (at = it->pos; at <= ls; at++) {
    const char *e;
    SP_STEP(&ms, 1);
    state_reset(&ms);
    e = match_here(&ms, s + at, p);
    if (e && (size_t)(e - s) != it->last) {
      it->pos = it->last = (size_t)(e - s);
      return push_captures(&ms, s + at, e);
    }
  }
  it->pos = ls + 1;
  return 0;
}

static int sp_gmatch(lua_State *L) {
  size_t ls, start;
  sp_iter *it;
  luaL_checklstring(L, 1, &ls);
  luaL_checklstring(L, 2, NULL);
  start = start_offset(luaL_optinteger(L, 3, 1), ls);
  lua_settop(L, 2);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  it = (sp_iter *)lua_newuserdatauv(L, sizeof *it, 0);
  it->pos = start > ls ? ls + 1 : start;
  it->last = SP_NONE;
  lua_pushcclosure(L, gmatch_step, 4);
  return 1;
}

/* Appends the replacement string (argument 3) for the match s..e. */
static void add_template(sp_state *ms, luaL_Buffer *b, const char *s,
                         const char *e) {
  lua_State *L = ms->L;
  size_t l;
  const char *t = lua_tolstring(L, 3, &l);
  const char *end = t + l, *pct;
  while ((pct = (const char *)memchr(t, SP_ESC, (size_t)(end - t))) != NULL) {
    int c = pct + 1 < end ? (unsigned char)pct[1] : 0;
    SP_STEP(ms, 1 + ((pct - t) >> SP_BULK_SHIFT));
    luaL_addlstring(b, t, (size_t)(pct - t));
    if (c == SP_ESC) {
      luaL_addchar(b, SP_ESC);
    } else if (c == '0') {
      luaL_addlstring(b, s, (size_t)(e - s));
    } else if (isdigit(c)) {
      const char *at;
      ptrdiff_t len = capture_span(ms, c - '1', s, e, &at);
      if (len == SP_POSITION) {
        lua_pushinteger(L, (lua_Integer)(at - ms->src) + 1);
        luaL_addvalue(b);
      } else {
        luaL_addlstring(b, at, (size_t)len);
      }
    } else {
      luaL_error(L, "invalid use of '%c' in replacement string", SP_ESC);
    }
    t = pct + 2;
  }
  luaL_addlstring(b, t, (size_t)(end - t));
}

/* Appends the replacement for s..e; 0 when the match is kept as it was. */
static int add_replacement(sp_state *ms, luaL_Buffer *b, const char *s,
                           const char *e, int kind) {
  lua_State *L = ms->L;
  if (kind == LUA_TFUNCTION) {
    int n;
    lua_pushvalue(L, 3);
    n = push_captures(ms, s, e);
    lua_call(L, n, 1);
  } else if (kind == LUA_TTABLE) {
    push_capture(ms, 0, s, e);
    lua_gettable(L, 3);
  } else {
    add_template(ms, b, s, e);
    return 1;
  }
  if (!lua_toboolean(L, -1)) {
    lua_pop(L, 1);
    luaL_addlstring(b, s, (size_t)(e - s));
    return 0;
  }
  if (!lua_isstring(L, -1))
    return luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  luaL_addvalue(b);
  return 1;
}

static int sp_gsub(lua_State *L) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  const char *pat_end = p + lp, *at = s, *last = NULL;
  int kind = lua_type(L, 3);
  lua_Integer max = luaL_optinteger(L, 4, (lua_Integer)ls + 1);
  lua_Integer n = 0;
  int anchored = lp > 0 && *p == '^';
  int changed = 0;
  sp_state ms;
  luaL_Buffer b;
  luaL_argexpected(L, kind == LUA_TNUMBER || kind == LUA_TSTRING ||
                   kind == LUA_TFUNCTION || kind == LUA_TTABLE, 3,
                   "string/function/table");
  luaL_buffinit(L, &b);
  if (anchored) p++;
  state_init(&ms, L, tick_of(L, lua_upvalueindex(1)), s, ls, pat_end);
  while (n < max) {
    const char *e;
    SP_STEP(&ms, 1);
    state_reset(&ms);
    e = match_here(&ms, at, p);
    if (e && e != last) {
      n++;
      changed |= add_replacement(&ms, &b, at, e, kind);
      at = last = e;
    } else if (at < ms.src_end) {
      luaL_addchar(&b, *at++);
    } else {
      break;
    }
    if (anchored) break;
  }
  if (changed) {
    luaL_addlstring(&b, at, (size_t)(ms.src_end - at));
    luaL_pushresult(&b);
  } else {
    lua_pushvalue(L, 1);
  }
  lua_pushinteger(L, n);
  return 2;
}

static const luaL_Reg sp_funcs[] = {
  {"find", sp_find},
  {"match", sp_match},
  {"gmatch", sp_gmatch},
  {"gsub", sp_gsub},
  {NULL, NULL}
};

/* Pushes the state's tick box, creating it on first use. */
static sp_tickbox *push_box(lua_State *L) {
  sp_tickbox *box;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &sp_box_key) == LUA_TUSERDATA)
    return (sp_tickbox *)lua_touserdata(L, -1);
  lua_pop(L, 1);
  box = (sp_tickbox *)lua_newuserdatauv(L, sizeof *box, 0);
  box->fn = NULL;
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &sp_box_key);
  return box;
}

void sp_set_tick(lua_State *L, sp_tick_fn tick) {
  push_box(L)->fn = tick;
  lua_pop(L, 1);
}

/* Sets the functions in the table at the top of the stack, raw. */
static void install(lua_State *L) {
  const luaL_Reg *r;
  for (r = sp_funcs; r->name; r++) {
    lua_pushstring(L, r->name);
    push_box(L);
    lua_pushcclosure(L, r->func, 1);
    lua_rawset(L, -3);
  }
}

void sp_open(lua_State *L) {
  int top = lua_gettop(L);
  int meta_index = 0;
  lua_pushliteral(L, "");
  if (lua_getmetatable(L, -1)) {
    lua_pushliteral(L, "__index");
    if (lua_rawget(L, -2) == LUA_TTABLE) {
      install(L);
      meta_index = lua_gettop(L);
    }
  }
  lua_pushliteral(L, LUA_LOADED_TABLE);
  if (lua_rawget(L, LUA_REGISTRYINDEX) == LUA_TTABLE) {
    lua_pushliteral(L, "string");
    lua_rawget(L, -2);
  }
  if (lua_type(L, -1) == LUA_TTABLE &&
      !(meta_index && lua_rawequal(L, -1, meta_index)))
    install(L);
  lua_settop(L, top);
}

#else /* LuaJIT and Lua 5.1: the library's own functions stay (a policy is refused there) */
typedef int sp_unused;
#endif
