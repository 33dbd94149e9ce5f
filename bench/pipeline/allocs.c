/* Counts the calls of the C allocator in a process, for bench/pipeline:
   preloaded (LD_PRELOAD) into a lua5.4 that runs allocs.lua, which then
   loads this same file as a Lua C module to read the counts. Every malloc,
   calloc and realloc of the process is counted: the host's Lua state, the
   handler's state (the counting allocator of sandbox/ calls realloc), and
   luma's own C structures. The real functions are glibc's __libc_* ones, so
   no dlsym (which itself allocates) is needed. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static unsigned long long allocs, frees;

void *malloc(size_t n) {
  __atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
  return __libc_malloc(n);
}

void *calloc(size_t k, size_t n) {
  __atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
  return __libc_calloc(k, n);
}

/* realloc(p, 0) frees; realloc(NULL, n) allocates; anything else moves or
   grows a block, which is a call of the allocator all the same */
void *realloc(void *p, size_t n) {
  if (n == 0 && p) __atomic_add_fetch(&frees, 1, __ATOMIC_RELAXED);
  else __atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
  return __libc_realloc(p, n);
}

void free(void *p) {
  if (p) __atomic_add_fetch(&frees, 1, __ATOMIC_RELAXED);
  __libc_free(p);
}

/* counts() -> allocations, frees (since the process started) */
static int counts(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)__atomic_load_n(&allocs, __ATOMIC_RELAXED));
  lua_pushinteger(L, (lua_Integer)__atomic_load_n(&frees, __ATOMIC_RELAXED));
  return 2;
}

int luaopen_bench_allocs(lua_State *L);
int luaopen_bench_allocs(lua_State *L) {
  lua_pushcfunction(L, counts);
  return 1;
}
