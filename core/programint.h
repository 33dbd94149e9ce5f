/*
 * Inside the program model (program.h): what program.c shares with the
 * statement checker (program_check.c), which checks the statements of agent
 * methods and of the top level against the declarations, and with the
 * reader of configuration blocks (program_config.c).
 */
#ifndef LUMA_PROGRAMINT_H
#define LUMA_PROGRAMINT_H

#include "errors.h"
#include "map.h"
#include "program.h"

typedef struct pm_ctx {
  pm_program *p;
  ar_arena *a;
  dg_list *d;
  mp_map decls;               /* name -> ast_decl */
  const char **names[DC_MODEL + 2];   /* by kind, for suggestions; the last holds types */
  int nnames[DC_MODEL + 2];
} pm_ctx;

#define NAMES_TYPES (DC_MODEL + 1)
/* Suggestions look at LIM_SUGGEST_CANDIDATES at most, so that a huge program
   with many errors stays fast to check. */

#define ERR(c, pos, ...) dg_error((c)->d, (pos).line, (pos).col, __VA_ARGS__)

ast_decl *pm_lookup(pm_ctx *c, const char *name);
/* A consistency rule's message: its text is the catalogue's (base/errors.h). */
void pm_rule(pm_ctx *c, ast_pos pos, le_msg m, const char *a, const char *b);
/* " Did you mean 'x'?" or "" */
const char *pm_suggestion(pm_ctx *c, const char *word, const char *const *names, int n);
#define SUGGEST(c, word, kind) pm_suggestion((c), (word), (c)->names[kind], (c)->nnames[kind])
pm_type *pm_resolve_type(pm_ctx *c, const ast_type *t, int depth);
/* "schema", "tool", "agent" or "model" */
const char *pm_kind_word(dc_kind k);
/* The number a literal (possibly negated) holds: 1, or 0 when it is none. */
int pm_lit_number(const ast_expr *e, pm_num *out);
const char *pm_type_text(pm_ctx *c, const ast_type *t);

/* program_config.c: a declaration's configuration block into its tool,
   agent or model (owner names it in messages); the entry of a key, or NULL. */
void pm_read_tool_config(pm_ctx *c, const ast_decl *d, pm_tool *t, const char *owner);
void pm_read_agent_config(pm_ctx *c, const ast_decl *d, pm_agent *a, const char *owner);
void pm_read_model_config(pm_ctx *c, const ast_decl *d, pm_model *m, const char *owner);
const ast_config *pm_config_entry(const ast_decl *d, const char *key);
/* "a", "b", "c": the names of a NULL-terminated list, quoted, for a message. */
const char *pm_quoted(ar_arena *a, const char *const *names);

/* Checks a block of statements: the body of an agent's method (agent and
   its params) or the top level (agent NULL). Returns how many asks it holds. */
int pc_check_block(pm_ctx *c, const pm_agent *agent, const ast_field *params, const ast_stmt *body);

#endif
