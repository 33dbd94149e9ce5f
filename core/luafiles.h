/* The Lua half of luma (lua/luma/ .lua files), compiled into libluma as text so
   that the library needs no files at run time. core/luafiles.lua writes the
   table at build time. */
#ifndef LUMA_LUAFILES_H
#define LUMA_LUAFILES_H

#include <stddef.h>

typedef struct lf_file {
  const char *module;   /* "luma", "luma.config", ...; NULL ends the table */
  const char *text;
  size_t len;
} lf_file;

extern const lf_file lf_files[];

#endif
