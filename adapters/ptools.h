/* Provider tools: the tools a provider runs itself (web search, web fetch,
   code execution, file search, URL context), and which family and model
   can run which, in one table (ptools.c), beside the provider table
   (providers.h). The program model checks an agent's provider tools
   against it at load; the families write its entries into requests.
   Wire facts: PROVIDER-TOOLS.md. */
#ifndef LUMA_ADAPTERS_PTOOLS_H
#define LUMA_ADAPTERS_PTOOLS_H

#include "providers.h"

/* X(ID, kind): what a provider_tool's `kind` says. */
#define AD_PTOOL_KINDS(X) \
  X(WEB_SEARCH, "web_search") \
  X(WEB_FETCH, "web_fetch") \
  X(CODE_EXECUTION, "code_execution") \
  X(FILE_SEARCH, "file_search") \
  X(URL_CONTEXT, "url_context")

typedef enum {
#define AD_PTOOL_ENUM_(id, name) AD_PT_##id,
  AD_PTOOL_KINDS(AD_PTOOL_ENUM_)
#undef AD_PTOOL_ENUM_
  AD_NPTKINDS
} ad_ptkind;

/* The names by ad_ptkind, NULL-terminated (a list of choices). */
extern const char *const ad_ptkind_names[AD_NPTKINDS + 1];

/* The wire a model's requests go on: one column of the capability table. */
typedef enum { AD_WIRE_CHAT, AD_WIRE_RESPONSES, AD_WIRE_ANTHROPIC, AD_WIRE_GEMINI, AD_NWIRES } ad_wire;
ad_wire ad_wire_of(ad_provider provider, ad_api api);
/* "Chat Completions", "the Responses API", "Anthropic Messages", "Gemini generateContent" */
const char *ad_wire_title(ad_wire w);

/* What the table says about a kind on a wire for a model name. */
typedef enum {
  AD_CAP_OK,                  /* the model runs it: entry says how */
  AD_CAP_NO_WIRE,             /* the wire has no such tool, for any model */
  AD_CAP_NO_MODEL,            /* a known model of the wire that does not run it */
  AD_CAP_UNKNOWN_MODEL        /* a model name the table does not know (or none, as azure's) */
} ad_cap;

typedef struct ad_capability {
  ad_cap verdict;
  const char *entry;          /* the request's entry: a type ("web_search_20250305"), a key
                                 ("google_search"), or chat's "web_search_options"; for
                                 AD_CAP_UNKNOWN_MODEL the wire's newest, sent unchecked */
  const char *models;         /* the prefixes of the models that run it, ", "-separated; "" none */
  const char *hint;           /* what to do instead, or "" */
  const char *options;        /* the provider_tool options the entry takes, comma-separated */
} ad_capability;

ad_capability ad_ptool_capability(ad_wire w, const char *model, ad_ptkind kind);
/* 1 when the entry takes the provider_tool option (max_uses, allowed_domains...). */
int ad_ptool_takes(const ad_capability *c, const char *option);

/* Native deferred loading: the entry of the wire's tool search for the
   model ("tool_search_tool_regex_20251119", "…_bm25_…", "tool_search"), or
   NULL where it has none (a synthetic discovery tool stands in). bm25: the
   Anthropic search by BM25 rather than by regex. */
const char *ad_tool_search(ad_wire w, const char *model, int bm25);
/* The name the model knows a tool_search entry by ("tool_search_tool_regex"...). */
const char *ad_tool_search_name(const char *entry);

/* Gemini before 3 refuses built-in tools next to function declarations. */
int ad_gemini_mixes_tools(const char *model);

#endif
