/*
 * Inside the program model (program.h): what program.c shares with the
 * statement checker (program_check.c), which checks the statements of agent
 * methods and of the top level against the declarations, with the types
 * of the statements' values and of schemas (program_types.c), and with the
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
  const char **names[DC_MCP + 2];   /* by kind, for suggestions; the last holds types */
  int nnames[DC_MCP + 2];
  const pm_mcp_listing *listings;   /* pm_build_mcp's */
  int nlistings;
} pm_ctx;

#define NAMES_TYPES (DC_MCP + 1)
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
/* "schema", "tool", "agent", "model" or "provider_tool" */
const char *pm_kind_word(dc_kind k);
/* The number a literal (possibly negated) holds: 1, or 0 when it is none. */
int pm_lit_number(const ast_expr *e, pm_num *out);
const char *pm_type_text(pm_ctx *c, const ast_type *t);

/* program_config.c: a declaration's configuration block into its tool,
   agent or model (owner names it in messages); the entry of a key, or NULL. */
void pm_read_tool_config(pm_ctx *c, const ast_decl *d, pm_tool *t, const char *owner);
void pm_read_agent_config(pm_ctx *c, const ast_decl *d, pm_agent *a, const char *owner);
void pm_read_model_config(pm_ctx *c, const ast_decl *d, pm_model *m, const char *owner);
void pm_read_ptool_config(pm_ctx *c, const ast_decl *d, pm_ptool *t, const char *owner);
void pm_read_mcp_config(pm_ctx *c, const ast_decl *d, pm_mcp *m, const char *owner);
/* program_mcp.c: an mcp_server's declaration checked, and its listed tools
   made tools of the program (their JSON Schemas made types). */
void pm_build_mcp_server(pm_ctx *c, ast_decl *d);
/* An agent's tools entry `srv.*`, `srv.name` or "srv.name": adds the tools
   it names to list (seen: names already in it); 0 when it names no mcp_server. */
int pm_mcp_tools_entry(pm_ctx *c, const char *owner, const ast_expr *e, pm_toollist *list, mp_map *seen);
/* program.c: a new schema of the program, and a tool's model object. */
pm_schema *pm_new_schema(pm_ctx *c, const char *name, const char *display, ast_pos pos);
pm_tool *pm_new_tool(pm_ctx *c, const char *name, ast_pos pos, const ast_decl *d);
const ast_config *pm_config_entry(const ast_decl *d, const char *key);
/* "a", "b", "c": the names of a NULL-terminated list, quoted, for a message. */
const char *pm_quoted(ar_arena *a, const char *const *names);

/* program_types.c: the static type of a value in the statements. */
typedef enum { VT_UNKNOWN, VT_NULL, VT_BOOL, VT_INT, VT_FLOAT, VT_STRING, VT_ARRAY, VT_OBJECT, VT_RECORD } vt_kind;
typedef struct vt_type {
  vt_kind kind;               /* VT_UNKNOWN: any value; VT_NULL: null only; VT_FLOAT: any number */
  int nullable;               /* the value may also be null */
  const pm_type *elem;        /* VT_ARRAY: its items' type, or NULL when not known */
  const pm_schema *schema;    /* VT_RECORD: a record or a tagged union */
} vt_type;

/* The type of a value that t validated (nullable: an optional field's). */
vt_type vt_from(const pm_type *t, int nullable);
vt_type vt_kind_of(vt_kind k);
/* The type of a value that has type a or type b. */
vt_type vt_join(vt_type a, vt_type b);
/* The type of e (EX_FIELD, EX_INDEX, EX_UNARY, EX_BINARY) from its operands',
   reporting what refuses every value of them. */
vt_type vt_field(pm_ctx *c, const ast_expr *e, vt_type obj);
vt_type vt_index(pm_ctx *c, const ast_expr *e, vt_type obj);
vt_type vt_unary(pm_ctx *c, const ast_expr *e, vt_type a);
vt_type vt_binary(pm_ctx *c, const ast_expr *e, vt_type a, vt_type b);
/* Reports e (of type have) when input validation would refuse it for a field
   of type want, named path, on every run. */
void vt_fits(pm_ctx *c, const ast_expr *e, vt_type have, const pm_type *want, int required, const char *path);
/* The field of record s that the property q of the object literal obj
   names; reports one that s does not have. */
const pm_field *vt_input_field(pm_ctx *c, const pm_schema *s, const ast_expr *obj, const ast_prop *q,
                               const char *path);
/* Reports each required field of s that the object literal obj (NULL: none) lacks, at pos. */
void vt_missing(pm_ctx *c, const pm_schema *s, const ast_expr *obj, ast_pos pos, const char *path);
/* Reports each declared schema that no value can satisfy: required fields
   that need the schema again, with no optional field, empty array or union
   member that ends the recursion. */
void vt_check_schemas(pm_ctx *c);

/* Checks a block of statements: the body of an agent's method (agent and
   its params, typed by its input) or the top level (agent NULL). Returns how many asks it holds. */
int pc_check_block(pm_ctx *c, const pm_agent *agent, const ast_field *params, const pm_schema *input,
                   const ast_stmt *body);

#endif
