/*
 * The syntax tree of a .luma program, as the parser builds it. Every node
 * lives in the program's arena. Lists are linked through `next` in source
 * order. Names are NUL-terminated; string literals carry their length since
 * they may hold NUL bytes.
 */
#ifndef LUMA_AST_H
#define LUMA_AST_H

#include <stddef.h>

typedef struct ast_pos { int line, col; } ast_pos;

typedef struct ast_str { const char *s; size_t len; } ast_str;

typedef struct ast_name {
  const char *name;
  ast_pos pos;
  struct ast_name *next;
} ast_name;

typedef enum {
  TY_STRING, TY_INT, TY_FLOAT, TY_BOOL, TY_ANY, TY_ENUM, TY_NAME, TY_ARRAY,
  TY_INLINE            /* an inline record `{ ... }`, parsed only to reject it clearly */
} ty_kind;

typedef struct ast_type {
  ty_kind kind;
  ast_pos pos;
  const char *name;                /* TY_NAME */
  struct ast_type *elem;           /* TY_ARRAY */
  ast_str *values;                 /* TY_ENUM */
  int nvalues;
  struct ast_decl *decl;           /* TY_NAME, once resolved */
} ast_type;

typedef enum {
  EX_NULL, EX_TRUE, EX_FALSE, EX_INT, EX_FLOAT, EX_STRING,
  EX_TEMPLATE,         /* "text {expr} text": parts are EX_STRING and expressions */
  EX_NAME, EX_FIELD, EX_INDEX, EX_ARRAY, EX_OBJECT, EX_UNARY, EX_BINARY,
  EX_TOOL,             /* tool name(arg) */
  EX_ASK,              /* ask "prompt" -> T [using tool name] */
  EX_ASK_CITATIONS     /* ask.citations: the citations of the method's last ask */
} ex_kind;

typedef enum {
  OP_NEG, OP_NOT,
  OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD,
  OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_AND, OP_OR
} ex_op;

typedef struct ast_prop {
  const char *key;
  ast_pos pos;
  struct ast_expr *value;
  struct ast_prop *next;
} ast_prop;

typedef struct ast_expr {
  ex_kind kind;
  ast_pos pos;
  long long ival;                  /* EX_INT */
  double fval;                     /* EX_FLOAT */
  ast_str str;                     /* EX_STRING; EX_NAME and EX_FIELD use str.s as the name */
  ex_op op;                        /* EX_UNARY, EX_BINARY */
  struct ast_expr *a, *b;          /* operands; EX_FIELD/EX_INDEX object is a, index b;
                                      EX_TOOL argument is a; EX_ASK prompt is a;
                                      `a.*` is an EX_FIELD named "*" (an agent's tools list) */
  struct ast_expr *items;          /* EX_ARRAY items, EX_TEMPLATE parts */
  int nitems;
  ast_prop *props;                 /* EX_OBJECT */
  int nprops;
  const char *tool;                /* EX_TOOL name; EX_ASK `using tool` name or NULL */
  ast_pos tool_pos;
  ast_type *type;                  /* EX_ASK result type */
  struct ast_expr *next;
} ast_expr;

typedef enum { ST_ASSIGN, ST_EXPR, ST_IF, ST_TRY, ST_RETURN } st_kind;

typedef struct ast_stmt {
  st_kind kind;
  ast_pos pos;
  const char *name;                /* ST_ASSIGN target */
  ast_type *type;                  /* ST_ASSIGN `x: T = ...`, or NULL */
  ast_expr *expr;                  /* value, condition, or returned value (may be NULL) */
  struct ast_stmt *body;           /* ST_IF then-block, ST_TRY block */
  struct ast_stmt *orelse;         /* ST_IF else-block (an `else if` is one ST_IF); ST_TRY catch block */
  int has_else;
  const char *catch_name;          /* ST_TRY */
  ast_pos catch_pos;
  struct ast_stmt *next;
} ast_stmt;

typedef struct ast_annot {
  const char *name;                /* without the '@' */
  ast_pos pos;
  ast_expr *args;
  int nargs;
  struct ast_annot *next;
} ast_annot;

typedef struct ast_field {
  const char *name;
  ast_pos pos;
  int optional;                    /* name?: T */
  ast_type *type;
  ast_annot *annots;
  struct ast_field *next;
} ast_field;

typedef struct ast_config {
  const char *key;                 /* "needs" for a needs declaration */
  ast_pos pos;
  ast_expr *value;                 /* NULL for needs */
  const char *needs_name;          /* needs NAME: Type */
  ast_type *needs_type;
  struct ast_config *next;
} ast_config;

typedef struct ast_method {
  const char *name;
  ast_pos pos;
  ast_field *params;
  ast_type *ret;
  ast_stmt *body;
  struct ast_method *next;
} ast_method;

typedef enum { DC_SCHEMA, DC_UNION, DC_TOOL, DC_AGENT, DC_MODEL, DC_PTOOL, DC_MCP } dc_kind;

typedef struct ast_decl {
  dc_kind kind;
  ast_pos pos;                     /* of the keyword */
  const char *name;
  ast_pos name_pos;
  int broken;                      /* the parser recovered from an error inside it */
  ast_field *fields;               /* DC_SCHEMA fields, DC_TOOL parameters */
  ast_name *members;               /* DC_UNION */
  const char *tag;                 /* DC_UNION: tagged by NAME */
  ast_pos tag_pos;
  ast_type *ret;                   /* DC_TOOL */
  ast_config *config;              /* DC_TOOL, DC_AGENT, DC_MODEL, DC_PTOOL, DC_MCP */
  ast_method *methods;             /* DC_AGENT */
  void *model;                     /* the program model's object for it (program.c) */
  struct ast_decl *next;
} ast_decl;

typedef struct ast_program {
  ast_decl *decls;
  ast_stmt *stmts;                 /* top-level statements */
} ast_program;

#endif
