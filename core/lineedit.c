/*
 * luma.lineedit: line editing for the luma-lua REPL, on libedit (the
 * command only: the luma.core module does not depend on it).
 *
 *   readline(prompt) -> line | nil (end of input) | false (Ctrl-C: the line is dropped)
 *   add_history(line), read_history(path), write_history(path)
 *   set_completer(fn)   fn(word, text_before_word) -> { candidates } [, append]
 *                       append: what follows a unique match (default " "; ""
 *                       for a word that goes on, such as a table's name)
 *   interruptible(fn, ...) -> pcall(fn, ...), where Ctrl-C raises "interrupted!"
 *                        in the Lua code fn runs (as lua5.4 does)
 *
 * libedit is not linked: require "luma.lineedit" loads it (dlopen), so that
 * the command's other uses (run, check, --version) map neither it nor the
 * three libraries it needs; without it the require fails saying so, and
 * the REPL reads plain lines.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>
#include <lauxlib.h>
#include <lua.h>

#include "lineedit.h"

/* the file dlopen loads: libedit's soname */
#ifndef LUMA_LIBEDIT
#define LUMA_LIBEDIT "libedit.so.2"
#endif

/* libedit's functions and variables, by their names less `rl_` */
static struct {
  char *(*readline)(const char *prompt);
  void (*using_history)(void);
  int (*add_history)(const char *line);
  int (*read_history)(const char *path);
  int (*write_history)(const char *path);
  char **(*completion_matches)(const char *text, rl_compentry_func_t *next);
  const char **readline_name;
  char **line_buffer;
  const char **basic_word_break_characters;
  rl_completion_func_t **attempted_completion_function;
  int *attempted_completion_over;
  int *completion_append_character;
  int *catch_signals;
  int (**getc_function)(FILE *);
} ed;

static volatile sig_atomic_t interrupted;
static lua_State *running;            /* the state interruptible() runs, or NULL */
static lua_State *completer_state;    /* the state holding the completer */
static int completer_ref = LUA_NOREF;

/* ------------------------------------------------------------ Ctrl-C */

static void stop_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
  /* as lua.c does: the next Lua instruction raises */
  if (running) lua_sethook(running, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* SIGINT without SA_RESTART: a read at the prompt returns EINTR */
static void catch_sigint(struct sigaction *old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, old);
}

/* the prompt reads bytes itself, so that Ctrl-C ends the line at once */
static int getc_interruptible(FILE *f) {
  unsigned char c;
  for (;;) {
    if (interrupted) return EOF;
    ssize_t n = read(fileno(f), &c, 1);
    if (n == 1) return c;
    if (n == 0) return EOF;
    if (errno != EINTR) return EOF;
  }
}

static int l_readline(lua_State *L) {
  const char *prompt = luaL_optstring(L, 1, "> ");
  struct sigaction old;
  interrupted = 0;
  catch_sigint(&old);
  char *line = ed.readline(prompt);
  sigaction(SIGINT, &old, NULL);
  if (interrupted) {
    free(line);
    interrupted = 0;
    fputc('\n', stdout);
    fflush(stdout);
    lua_pushboolean(L, 0);
    return 1;
  }
  if (!line) { lua_pushnil(L); return 1; }
  lua_pushstring(L, line);
  free(line);
  return 1;
}

static int l_interruptible(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  struct sigaction old;
  lua_State *was = running;
  interrupted = 0;
  running = L;
  catch_sigint(&old);
  int status = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
  sigaction(SIGINT, &old, NULL);
  running = was;
  lua_sethook(L, NULL, 0, 0);
  interrupted = 0;
  lua_pushboolean(L, status == LUA_OK);
  lua_insert(L, 1);
  return lua_gettop(L);
}

/* ---------------------------------------------------------- history */

static int l_add_history(lua_State *L) {
  ed.add_history(luaL_checkstring(L, 1));
  return 0;
}

static int l_read_history(lua_State *L) {
  lua_pushboolean(L, ed.read_history(luaL_checkstring(L, 1)) == 0);
  return 1;
}

static int l_write_history(lua_State *L) {
  lua_pushboolean(L, ed.write_history(luaL_checkstring(L, 1)) == 0);
  return 1;
}

/* ------------------------------------------------------- completion */

static char **candidates;
static int ncandidates;

static char *next_candidate(const char *text, int state) {
  (void)text;
  if (state >= ncandidates || !candidates) return NULL;
  char *c = candidates[state];
  candidates[state] = NULL;
  return c;
}

static char **complete(const char *text, int start, int end) {
  (void)end;
  *ed.attempted_completion_over = 1;
  lua_State *L = completer_state;
  if (!L || completer_ref == LUA_NOREF) return NULL;
  for (int i = 0; i < ncandidates; i++) free(candidates[i]);
  free(candidates);
  candidates = NULL;
  ncandidates = 0;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, completer_ref);
  lua_pushstring(L, text);
  lua_pushlstring(L, *ed.line_buffer, (size_t)start);
  if (lua_pcall(L, 2, 2, 0) != LUA_OK || !lua_istable(L, -2)) {
    lua_settop(L, top);
    return NULL;
  }
  const char *append = lua_tostring(L, -1);
  *ed.completion_append_character = append ? (unsigned char)append[0] : ' ';
  lua_pop(L, 1);
  int n = (int)luaL_len(L, -1);
  candidates = calloc((size_t)(n > 0 ? n : 1), sizeof *candidates);
  for (int i = 0; candidates && i < n; i++) {
    lua_rawgeti(L, -1, i + 1);
    const char *s = lua_tostring(L, -1);
    if (s) candidates[ncandidates++] = strdup(s);
    lua_pop(L, 1);
  }
  lua_settop(L, top);
  if (ncandidates == 0) return NULL;
  return ed.completion_matches(text, next_candidate);
}

static int l_set_completer(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_pushvalue(L, 1);
  if (completer_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, completer_ref);
  completer_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  completer_state = L;
  *ed.attempted_completion_function = complete;
  /* a word ends at a space or an opening bracket, not at ':' (the commands) */
  *ed.basic_word_break_characters = " \t\n\"'([{,=";
  return 0;
}

/* libedit into ed, once; NULL, or what is missing */
static const char *load(void) {
  static int loaded;
  static char why[256];
  if (loaded) return NULL;
  void *lib = dlopen(LUMA_LIBEDIT, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(why, sizeof why, "line editing needs libedit: %s", dlerror());
    return why;
  }
  static const char *const names[] = {
    "readline", "using_history", "add_history", "read_history", "write_history", "rl_completion_matches",
    "rl_readline_name", "rl_line_buffer", "rl_basic_word_break_characters", "rl_attempted_completion_function",
    "rl_attempted_completion_over", "rl_completion_append_character", "rl_catch_signals", "rl_getc_function",
  };
  void **slots[] = {
    (void **)&ed.readline, (void **)&ed.using_history, (void **)&ed.add_history, (void **)&ed.read_history,
    (void **)&ed.write_history, (void **)&ed.completion_matches, (void **)&ed.readline_name,
    (void **)&ed.line_buffer, (void **)&ed.basic_word_break_characters,
    (void **)&ed.attempted_completion_function, (void **)&ed.attempted_completion_over,
    (void **)&ed.completion_append_character, (void **)&ed.catch_signals, (void **)&ed.getc_function,
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!(*slots[i] = dlsym(lib, names[i]))) {
      snprintf(why, sizeof why, "line editing needs libedit, and %s has no %s", LUMA_LIBEDIT, names[i]);
      dlclose(lib);
      return why;
    }
  }
  loaded = 1;
  return NULL;
}

int luaopen_luma_lineedit(lua_State *L) {
  const char *missing = load();
  if (missing) return luaL_error(L, "%s", missing);
  static const luaL_Reg fns[] = {
    { "readline", l_readline },
    { "interruptible", l_interruptible },
    { "add_history", l_add_history },
    { "read_history", l_read_history },
    { "write_history", l_write_history },
    { "set_completer", l_set_completer },
    { NULL, NULL }
  };
  *ed.catch_signals = 0;
  *ed.getc_function = getc_interruptible;
  *ed.readline_name = "luma-lua";
  ed.using_history();
  luaL_newlib(L, fns);
  return 1;
}
