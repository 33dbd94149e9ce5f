/* The parser: source text to syntax tree, with error recovery so that one
   run reports every syntax error of a file. */
#ifndef LUMA_PARSE_H
#define LUMA_PARSE_H

#include "ast.h"
#include "diag.h"

/* Parses src[0..len). Never returns NULL unless the arena is exhausted; on
   syntax errors the tree holds what could be recovered (declarations that
   failed part-way are marked `broken`). max_depth bounds nesting. */
ast_program *ps_parse(const char *src, size_t len, ar_arena *a, dg_list *diag, int max_depth);

#endif
