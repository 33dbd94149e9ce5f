#define _GNU_SOURCE
/* io in a strict state: files inside the project only, no writes to code or
   configuration, at most 32 open at once, and never the host's stdout. */
#include "strict.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "compat.h"
#include "luma_limits.h"

#if LUA_VERSION_NUM >= 504

#ifndef O_PATH
#define O_PATH O_RDONLY
#endif

/* The project's root, for io: kept in the registry under this key's address. */
static const char root_key = 0;

#define OUTSIDE "outside the project, not available to a strict tool module"
#define CODE_OR_CONFIG "a strict tool module cannot write code or configuration (*.lua, *.luma, luma.config.json, .luma*)"
#define NOT_A_FILE "not a regular file, not available to a strict tool module"

/* What a strict module may not write, even inside the project: code and
   configuration, which the next load would trust. */
static int holds_code_or_config(const char *name) {
  size_t n = strlen(name);
  return (n >= 4 && strcmp(name + n - 4, ".lua") == 0) || (n >= 5 && strcmp(name + n - 5, ".luma") == 0) ||
         strcmp(name, "luma.config.json") == 0 || strncmp(name, ".luma", 5) == 0;
}

/* Whether the canonical folder `real` lies inside the project. The kernel's
   views of processes and devices are never inside, whatever the project
   (the environment of the process can be read from /proc). */
static int folder_inside(const char *root, const char *real) {
  static const char *const never[] = { "/proc", "/sys", "/dev", NULL };
  for (const char *const *n = never; *n; n++) {
    size_t k = strlen(*n);
    if (strncmp(real, *n, k) == 0 && (real[k] == '/' || real[k] == '\0')) return 0;
  }
  size_t n = strlen(root);
  return (n == 1 && root[0] == '/') || (strncmp(real, root, n) == 0 && (real[n] == '/' || real[n] == '\0'));
}

/* Opens the canonical folder `real` (as realpath made it: no symlink in it)
   one component at a time, following no symlink: the descriptor is the
   folder that was checked, or -1 if one of its components was replaced
   meanwhile. */
static int open_folder(const char *real) {
  char name[NAME_MAX + 1];
  int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  for (const char *p = real; fd >= 0;) {
    while (*p == '/') p++;
    size_t k = strcspn(p, "/");
    if (k == 0) return fd;
    if (k > NAME_MAX) {
      close(fd);
      return -1;
    }
    memcpy(name, p, k);
    name[k] = '\0';
    p += k;
    int next = openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(fd);
    fd = next;
  }
  return -1;
}

/* How many symlinks open_checked follows, one after the other, before it
   gives up with ELOOP (the kernel's own limit). */
#define SYMLINK_HOPS 40

/* Opens `full` (an absolute path) with `flags` for a strict module, with no
   window between the check and the open: the folder is resolved, checked
   and opened, and the last component is opened relative to that descriptor
   with O_NOFOLLOW, then checked to be a regular file. A symlink in the last
   place is resolved by name and its target checked and opened the same way
   (one that leads nowhere is refused: opening it would create its target).
   Returns the descriptor; or -1 with *why set when the policy refuses it,
   or with *why NULL and errno set when the open itself failed. */
static int open_checked(const char *root, const char *full, int flags, int write, const char **why) {
  char path[PATH_MAX], dir[PATH_MAX], real[PATH_MAX];
  *why = NULL;
  if (strlen(full) >= sizeof path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  strcpy(path, full);
  for (int hops = 0; hops <= SYMLINK_HOPS; hops++) {
    const char *slash = strrchr(path, '/'), *last = slash + 1;
    if (!*last || strcmp(last, ".") == 0 || strcmp(last, "..") == 0) {
      strcpy(dir, path);   /* names a folder: opened as ".", refused below */
      last = ".";
    } else {
      snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    }
    if (!realpath(dir, real) || !folder_inside(root, real)) {
      *why = OUTSIDE;
      return -1;
    }
    if (write && holds_code_or_config(last)) {
      *why = CODE_OR_CONFIG;
      return -1;
    }
    int folder = open_folder(real);
    if (folder < 0) {
      *why = OUTSIDE;
      return -1;
    }
    /* O_NONBLOCK: opening a FIFO must not wait for its other end */
    int fd = openat(folder, last, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    int e = errno;
    close(folder);
    if (fd >= 0) {
      struct stat st;
      if (fstat(fd, &st) != 0) e = errno;
      else if (S_ISDIR(st.st_mode)) e = EISDIR;
      else if (!S_ISREG(st.st_mode)) e = 0;
      else if (fcntl(fd, F_SETFL, flags & O_APPEND) != 0) e = errno;
      else return fd;
      close(fd);
      if (e) errno = e;
      else *why = NOT_A_FILE;
      return -1;
    }
    if (e == ENXIO) {   /* a FIFO with no reader, a socket */
      *why = NOT_A_FILE;
      return -1;
    }
    if (e != ELOOP) {
      errno = e;
      return -1;
    }
    if (!realpath(path, real)) {
      *why = OUTSIDE;
      return -1;
    }
    strcpy(path, real);
  }
  errno = ELOOP;
  return -1;
}

/* The path a strict module names, made absolute against the project's root
   (the process's working folder is the host's, not the module's), pushed
   on the stack, with the root; or NULL, with nothing pushed. */
static const char *full_path(lua_State *L, const char *path, const char **root) {
  lua_pushlightuserdata(L, (void *)&root_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  *root = lua_tostring(L, -1);
  if (!*root || !*path) {
    lua_pop(L, 1);
    return NULL;
  }
  if (path[0] == '/') lua_pushstring(L, path);
  else lua_pushfstring(L, "%s/%s", *root, path);
  return lua_tostring(L, -1);
}

/* The files a strict module has opened, in a weak table: at most
   LIM_MAX_OPEN_FILES are open at once, so that a module cannot take every
   file descriptor of the process. */
static const char files_key = 0;

static int open_files(lua_State *L) {
  lua_pushlightuserdata(L, (void *)&files_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushlightuserdata(L, (void *)&files_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
  }
  int files = lua_gettop(L), count = 0;
  lua_pushnil(L);
  while (lua_next(L, files)) {
    luaL_Stream *f = luaL_testudata(L, -2, LUA_FILEHANDLE);
    if (f && f->closef) count++;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return count;
}

static int room_for_a_file(lua_State *L) {
  if (open_files(L) < LIM_MAX_OPEN_FILES) return 1;
  lua_gc(L, LUA_GCCOLLECT, 0);   /* files no longer reachable are closed */
  return open_files(L) < LIM_MAX_OPEN_FILES;
}

static void remember_file(lua_State *L, int idx) {
  if (!luaL_testudata(L, idx, LUA_FILEHANDLE)) return;
  idx = lua_absindex(L, idx);
  lua_pushlightuserdata(L, (void *)&files_key);
  lc_rawget(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, idx);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

#define TOO_MANY_FILES "too many open files (at most %d in a strict tool module)"

/* liolib's check of a mode: "r", "w" or "a", an optional "+", then "b"s */
static int valid_mode(const char *mode) {
  if (!*mode || !strchr("rwa", *mode++)) return 0;
  if (*mode == '+') mode++;
  return strspn(mode, "b") == strlen(mode);
}

static int open_flags(const char *mode) {
  int both = strchr(mode, '+') != NULL;
  switch (mode[0]) {
  case 'w': return (both ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC;
  case 'a': return (both ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND;
  default: return both ? O_RDWR : O_RDONLY;
  }
}

/* The close of the files opened here, as liolib's own (which is static). */
static int close_file(lua_State *L) {
  luaL_Stream *p = (luaL_Stream *)luaL_checkudata(L, 1, LUA_FILEHANDLE);
  errno = 0;
  return luaL_fileresult(L, fclose(p->f) == 0, NULL);
}

/* Pushes the file `full` opened for a strict module, as io.open makes one,
   and returns 1; or returns 0 with nothing pushed and *why set when the
   policy refuses it, or *why NULL and errno set when the open failed. */
static int push_file(lua_State *L, const char *root, const char *full, const char *mode, const char **why) {
  /* closed until it holds a file: made before the descriptor is */
  luaL_Stream *p = (luaL_Stream *)lua_newuserdatauv(L, sizeof *p, 0);
  p->f = NULL;
  p->closef = NULL;
  luaL_setmetatable(L, LUA_FILEHANDLE);
  int fd = open_checked(root, full, open_flags(mode), strpbrk(mode, "wa+") != NULL, why);
  if (fd >= 0 && !(p->f = fdopen(fd, mode))) {
    int e = errno;
    close(fd);
    errno = e;
  }
  if (p->f) {
    p->closef = close_file;
    return 1;
  }
  int e = errno;
  lua_pop(L, 1);
  errno = e;
  return 0;
}

static int s_io_open(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  const char *mode = luaL_optstring(L, 2, "r");
  luaL_argcheck(L, valid_mode(mode), 2, "invalid mode");
  if (!room_for_a_file(L)) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: " TOO_MANY_FILES, path, LIM_MAX_OPEN_FILES);
    return 2;
  }
  const char *root, *why = OUTSIDE;
  const char *full = full_path(L, path, &root);
  if (full && push_file(L, root, full, mode, &why)) {
    remember_file(L, -1);
    return 1;
  }
  if (full && !why) return luaL_fileresult(L, 0, full);
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s", path, why);
  return 2;
}

/* The iterator of io.lines: the file's own, then the file closed at its
   end, as io.lines closes a file it opened (upvalues: the file's iterator,
   the file). */
static int next_line(lua_State *L) {
  lua_settop(L, 0);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_call(L, 0, LUA_MULTRET);
  if (lua_toboolean(L, 1)) return lua_gettop(L);
  lua_settop(L, 0);
  lua_getfield(L, lua_upvalueindex(2), "close");
  lua_pushvalue(L, lua_upvalueindex(2));
  lua_call(L, 1, 0);
  return 0;
}

static int s_io_lines(lua_State *L) {
  if (lua_isnoneornil(L, 1)) return luaL_error(L, "io.lines needs a file name in a strict tool module");
  const char *path = luaL_checkstring(L, 1);
  if (!room_for_a_file(L)) return luaL_error(L, "%s: " TOO_MANY_FILES, path, LIM_MAX_OPEN_FILES);
  int formats = lua_gettop(L) - 1;
  /* the path, the file, its lines, the file again and a copy of each format */
  luaL_checkstack(L, formats + 8, "too many arguments to io.lines");
  const char *root, *why = OUTSIDE;
  const char *full = full_path(L, path, &root);
  if (!full || !push_file(L, root, full, "r", &why)) {
    if (full && !why) return luaL_error(L, "cannot open file '%s' (%s)", full, strerror(errno));
    return luaL_error(L, "%s: %s", path, why);
  }
  int file = lua_gettop(L);
  remember_file(L, file);
  lua_getfield(L, file, "lines");
  lua_pushvalue(L, file);
  for (int i = 2; i <= formats + 1; i++) lua_pushvalue(L, i);
  lua_call(L, formats + 1, 1);
  lua_pushvalue(L, file);
  lua_pushcclosure(L, next_line, 2);
  lua_pushnil(L);
  lua_pushnil(L);
  lua_pushvalue(L, file);
  return 4;   /* as Lua 5.4's io.lines: the file is the value the loop closes */
}

/* io.close(file): with no file, the original would close the host's stdout */
static int s_io_close(lua_State *L) {
  luaL_checkudata(L, 1, LUA_FILEHANDLE);
  lua_settop(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* Keeps only `names` of the table on top. */
static void keep(lua_State *L, const char *const *names) {
  lua_newtable(L);
  for (; *names; names++) {
    lua_getfield(L, -2, *names);
    lua_setfield(L, -2, *names);
  }
  lua_remove(L, -2);
}

/* Pushes the io table of a strict state: type, open and lines of its own,
   and close checked; files are looked up from project_root (NULL:
   nowhere). */
void sx_push_strict_io(lua_State *L, const char *project_root) {
  static const char *const io_names[] = { "type", NULL };
  lua_pushlightuserdata(L, (void *)&root_key);
  lua_pushstring(L, project_root ? project_root : "/nonexistent");
  lua_rawset(L, LUA_REGISTRYINDEX);
  luaL_requiref(L, "io", luaopen_io, 0);
  int full = lua_gettop(L);
  lua_pushvalue(L, full);
  keep(L, io_names);
  lua_pushcfunction(L, s_io_open);
  lua_setfield(L, -2, "open");
  lua_pushcfunction(L, s_io_lines);
  lua_setfield(L, -2, "lines");
  lua_getfield(L, full, "close");
  lua_pushcclosure(L, s_io_close, 1);
  lua_setfield(L, -2, "close");
  lua_remove(L, full);
}

#endif
