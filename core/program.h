/*
 * The program model: declarations of a .luma file resolved and checked.
 * Built from the syntax tree by pm_build(); everything lives in the
 * program's arena and is read-only afterwards, so one program can be shared
 * by threads that only read it.
 */
#ifndef LUMA_PROGRAM_H
#define LUMA_PROGRAM_H

#include <stddef.h>

#include "arena.h"
#include "ast.h"
#include "diag.h"
#include "providers.h"
#include "ptools.h"

struct lre;

/* A number as written in the source: integers stay exact. */
typedef struct pm_num {
  int is_int;
  long long i;
  double d;
} pm_num;

typedef enum {
  PT_STRING, PT_INT, PT_FLOAT, PT_BOOL, PT_ANY, PT_ENUM, PT_SCHEMA, PT_ARRAY
} pt_kind;

/* Rules that a field's annotations put on a type (bits of pm_type.rules). */
enum {
  PR_MIN = 1 << 0, PR_MAX = 1 << 1,             /* @range */
  PR_MINLEN = 1 << 2, PR_MAXLEN = 1 << 3,       /* @length, code points */
  PR_MINITEMS = 1 << 4, PR_MAXITEMS = 1 << 5,   /* @items */
  PR_PATTERN = 1 << 6                           /* @pattern */
};

typedef struct pm_schema pm_schema;

/* A resolved type with the rules that apply to it. For an array field, @range,
   @length and @pattern apply to the innermost items and @items to the array. */
typedef struct pm_type {
  pt_kind kind;
  pm_schema *schema;          /* PT_SCHEMA */
  struct pm_type *elem;       /* PT_ARRAY */
  const ast_str *values;      /* PT_ENUM */
  int nvalues;
  unsigned rules;
  pm_num min, max;
  long long minlen, maxlen, minitems, maxitems;
  const char *pattern;         /* may hold NUL: pattern_len bytes */
  size_t pattern_len;
  struct lre *re;
  int soft;                   /* @severity("soft"): a broken rule on output is a warning */
} pm_type;

typedef struct pm_field {
  const char *name;
  size_t len;
  ast_pos pos;
  int required;               /* neither `?` nor @default */
  pm_type *type;
  const char *desc;
  const ast_expr *default_value;  /* a literal, or NULL */
  const char *default_json;   /* the default as validation fills it (JSON text), set at load by
                                 lv_check_defaults; NULL until then */
  size_t default_json_len;
  int index;
} pm_field;

struct pm_schema {
  const char *name;
  const char *display;        /* root of paths in messages, e.g. "calculate.input" */
  ast_pos pos;
  int is_union;
  pm_field *fields;           /* record */
  int nfields;
  pm_schema **members;        /* union */
  int nmembers;
  const char *tag;
  int index;                  /* in pm_program.schemas */
  int internal;               /* a tool's __tool_<name>_input */
  int open;                   /* fields it does not name are allowed (an mcp_server's output schema
                                 that does not say additionalProperties: false) */
};

typedef enum { SE_NONE, SE_READ, SE_WRITE } pm_side_effects;
typedef enum { BO_NONE, BO_FIXED, BO_EXPONENTIAL } pm_backoff;
/* Who runs a tool: a tool module's handler, or the host (luma_register,
   program:register), which `check` then does not look for in the modules. */
typedef enum { HANDLER_MODULE, HANDLER_HOST } pm_handler;
extern const char *const pm_handler_names[];    /* by pm_handler, NULL-terminated */
typedef enum { POL_ALLOW, POL_DENY_WRITE, POL_APPROVAL } pm_policy;
/* How an agent's lazy tools are found: the wire's own search where the model
   has one, else the synthetic discovery tool (auto); Anthropic's regex or
   BM25 search; always the synthetic tool. */
typedef enum { TS_AUTO, TS_REGEX, TS_BM25, TS_SYNTHETIC } pm_tool_search;
extern const char *const pm_tool_search_names[];     /* by pm_tool_search, NULL-terminated */
/* The synthetic discovery tool's name: reserved ('__'), so no declared tool has it. */
#define PM_DISCOVER_TOOL "__discover_tools"

typedef struct pm_need {
  const char *name;
  pm_schema *schema;
} pm_need;

typedef struct pm_strings {
  const char **items;
  int n;
  int present;                /* the key was written (an empty list differs from none) */
} pm_strings;

struct pm_mcp;

typedef struct pm_tool {
  const char *name;
  ast_pos pos;
  const ast_decl *decl;
  pm_schema *input;           /* __tool_<name>_input */
  pm_schema *output;          /* the declared return schema */
  const char *output_root;    /* "<name>.output", the root of its paths in messages */
  const char *description;
  int side_effects;           /* pm_side_effects */
  int handler;                /* pm_handler */
  int cache;
  const char *scope;
  const char *credential;
  pm_schema *error;
  long long retries;
  int retry_backoff;          /* pm_backoff */
  long long retry_delay;      /* ms */
  long long timeout;          /* ms, or -1 when not set */
  int idempotent;
  pm_strings idempotency_key;     /* path of field names into the input */
  long long idempotency_ttl_ms;
  pm_need *needs;
  int nneeds;
  const struct pm_mcp *mcp;   /* the mcp_server whose tool it is, or NULL */
  const char *mcp_tool;       /* the server's name of it (the program's is <server>__<name>) */
  int builtin;                /* luma's own (pm_program.discover): declared nowhere, listed
                                 nowhere, its handler in C; an ask calls it */
  int index;
} pm_tool;

/* `headers: { "Name": "value", ... }` of a model or an mcp_server, in the order written. */
typedef struct pm_headers {
  const char **names;
  const char **values;
  int n;
} pm_headers;

/* mcp_server NAME { ... }: an MCP server the program takes tools from. */
typedef struct pm_mcp {
  const char *name;
  ast_pos pos;                /* of the keyword: where a failure to start is reported */
  const ast_decl *decl;
  const char *command;        /* stdio: the program to start */
  pm_strings args;
  const char *url;            /* Streamable HTTP */
  const char *token;          /* the variable holding its bearer token (HTTP) */
  pm_headers headers;         /* more headers of its requests (HTTP) */
  pm_strings tools;           /* the allowlist; absent: every tool it lists */
  int side_effects;           /* of all its tools (pm_side_effects); write unless set */
  const char *scope;
  long long timeout;          /* ms of each call, -1 when not set */
  long long start_timeout;    /* ms to start, initialize and list, -1 when not set */
  long long retries;
  int listed;                 /* its tools were given to pm_build_mcp */
  int index;
} pm_mcp;

/* What a started server listed, for pm_build_mcp: its tools, their schemas
   as JSON text (output NULL when it gives none). */
typedef struct pm_mcp_tool {
  const char *name, *description;
  const char *input, *output;
  size_t input_len, output_len;
} pm_mcp_tool;

typedef struct pm_mcp_listing {
  const char *server;
  const pm_mcp_tool *tools;
  int ntools;
} pm_mcp_listing;


typedef struct pm_model {
  const char *name;
  ast_pos pos;
  int provider;               /* ad_provider: a row of adapters/providers.h */
  int has_provider;
  int api;                    /* ad_api: adapters/providers.h */
  int has_api;
  const char *model;          /* the provider's model name */
  const char *base_url;
  const char *api_key_env;    /* NULL: the provider's default variable, unless no_api_key */
  int no_api_key;             /* api_key_env: null (a local server): no auth header */
  const char *deployment;     /* azure */
  const char *api_version;    /* azure */
  pm_num temperature;
  int has_temperature;
  long long max_tokens;       /* -1 when not set */
  long long timeout;          /* ms per request, -1 when not set */
  long long retries;          /* HTTP-level retries, -1 when not set (2) */
  int stream;                 /* 0: never ask for a stream (a server that cannot); default 1 */
  pm_headers headers;
  int allow_unknown_model;    /* a name the capability table does not know runs provider tools, with a warning */
  int index;
} pm_model;

typedef struct pm_toollist {
  pm_tool **items;
  int n;
} pm_toollist;

/* A tool the provider runs (`provider_tool NAME { kind: ... }`): no schema
   and no handler of luma's; the capability table (adapters/ptools.h) says
   which models run it. */
typedef struct pm_ptool {
  const char *name;
  ast_pos pos;
  int kind;                   /* ad_ptkind */
  int has_kind;
  long long max_uses;         /* -1 when not set */
  pm_strings allowed_domains;
  pm_strings blocked_domains;
  pm_headers user_location;   /* city, region, country, timezone */
  pm_strings vector_stores;
  const char *container;
  int index;
} pm_ptool;

typedef struct pm_ptoollist {
  pm_ptool **items;
  int n;
  ast_pos *pos;               /* where the agent's `tools` names each */
} pm_ptoollist;

/* An agent method: its parameters as an internal schema
   __method_<agent>_<method>_input, and its return type (or NULL). */
typedef struct pm_method {
  const char *name;
  pm_schema *input;
  pm_type *ret;
} pm_method;

typedef struct pm_agent {
  const char *name;
  ast_pos pos;
  const ast_decl *decl;
  pm_model *model;
  pm_toollist tools;
  pm_ptoollist ptools;            /* the provider tools among its `tools` */
  pm_strings lazy_tools;          /* of its tools, those sent only once found (names) */
  unsigned char *lazy;            /* by tools index: 1 when lazy; NULL when none is */
  int tool_search;                /* pm_tool_search: how lazy tools are found */
  pm_method *methods;
  int nmethods;
  long long tool_rate_limit;      /* -1: no limit */
  long long tool_concurrency;
  long long tool_failure_limit;   /* -1: no breaker */
  long long tool_timeout;         /* -1: none */
  long long tool_timeout_max;     /* -1: none */
  int tool_policy;                /* pm_policy */
  pm_strings tool_scopes;
  pm_strings tool_contexts;
  long long retries;              /* re-asks of an invalid final answer, -1 when not set (0) */
  long long tool_result_max_bytes;    /* a tool result sent to the model is cut past it; -1: 64 KiB */
  int durable;                    /* its asks write a journal (journal.h) */
  const char *description;
  int index;
} pm_agent;

/* How a program is built: its limits, and whether every model may run
   provider tools the capability table does not know it for
   (--allow-unknown-models, as each model's allow_unknown_model). */
typedef struct pm_limits {
  size_t max_source_bytes;
  int max_errors;
  int max_parse_depth;
  int allow_unknown_models;
} pm_limits;

typedef struct pm_program {
  ar_arena arena;
  dg_list diag;
  const char *chunk;
  const char *src;
  size_t len;
  ast_program *ast;
  pm_schema **schemas;        /* declared schemas, then the inputs of tools and methods */
  int nschemas;
  pm_tool **tools;
  int ntools;
  /* the synthetic discovery tool of lazy tools (PM_DISCOVER_TOOL): a tool
     of luma's own, not among `tools` (so no lookup by name finds it), with
     index ntools; its input and output are types of the program, internal
     ones. NULL only in a program that could not be parsed. */
  pm_tool *discover;
  pm_agent **agents;
  int nagents;
  pm_model **models;
  int nmodels;
  pm_ptool **ptools;
  int nptools;
  int allow_unknown_models;   /* pm_limits' */
  pm_mcp **mcps;
  int nmcps;
  struct lre **regexes;       /* compiled @pattern rules, freed with the program */
  int nregexes, regexes_cap;
} pm_program;

void pm_default_limits(pm_limits *lim);
/* Parses and checks a program. Always returns a program (NULL only when
   memory runs out); its diag lists every error found. The source is copied. */
pm_program *pm_build(const char *src, size_t len, const char *chunk, const pm_limits *lim);
/* The same, with the tools of the program's mcp_servers as their servers
   listed them (program_mcp.c); an agent that lists a tool of a server not in
   `listings` is an error. */
pm_program *pm_build_mcp(const char *src, size_t len, const char *chunk, const pm_limits *lim,
                         const pm_mcp_listing *listings, int nlistings);
void pm_free(pm_program *p);

pm_schema *pm_find_schema(const pm_program *p, const char *name);
pm_tool *pm_find_tool(const pm_program *p, const char *name);
pm_agent *pm_find_agent(const pm_program *p, const char *name);
pm_model *pm_find_model(const pm_program *p, const char *name);
/* The declared tool whose name is closest to name (for "Did you mean"), or NULL. */
const char *pm_near_tool(const pm_program *p, const char *name);
/* The variable holding a model's API key: the declared one, else the
   provider's default (OPENAI_API_KEY...); NULL for api_key_env: null. */
const char *pm_model_key_env(const pm_model *m);

#endif
