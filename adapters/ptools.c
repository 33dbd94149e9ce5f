/* The capability table of provider tools (ptools.h): for each wire and
   kind, the entry a request carries and the models, by name prefix, that
   run it. From PROVIDER-TOOLS.md and the providers' references, late 2026;
   README.md shows it as a matrix. */
#include "ptools.h"

#include <stdio.h>
#include <string.h>

#include "common.h"

const char *const ad_ptkind_names[AD_NPTKINDS + 1] = {
#define AD_PTOOL_NAME_(id, name) name,
  AD_PTOOL_KINDS(AD_PTOOL_NAME_)
#undef AD_PTOOL_NAME_
  NULL
};

/* One row: a kind on a wire, its entry, the models that run it (name
   prefixes, comma-separated) and those among them that do not. */
typedef struct cap_row {
  ad_wire wire;
  ad_ptkind kind;
  const char *entry;
  const char *models;
  const char *except;
  const char *options;        /* the provider_tool options it takes, comma-separated */
} cap_row;

#define CLAUDE_4 "claude-opus-4,claude-sonnet-4,claude-haiku-4-5,claude-opus-5,claude-sonnet-5,claude-haiku-5,claude-3-7-sonnet"
#define CLAUDE_45 "claude-opus-4-5,claude-opus-4-6,claude-opus-4-7,claude-sonnet-4-5,claude-sonnet-4-6,claude-haiku-4-5," \
                  "claude-opus-5,claude-sonnet-5,claude-haiku-5"
#define OPENAI_TOOLS "gpt-4o,gpt-4.1,gpt-5,o3,o4"

static const cap_row rows[] = {
  { AD_WIRE_ANTHROPIC, AD_PT_WEB_SEARCH, "web_search_20250305", CLAUDE_4, "",
    "max_uses,allowed_domains,blocked_domains,user_location" },
  { AD_WIRE_ANTHROPIC, AD_PT_WEB_FETCH, "web_fetch_20250910", CLAUDE_4, "", "max_uses,allowed_domains,blocked_domains" },
  { AD_WIRE_ANTHROPIC, AD_PT_CODE_EXECUTION, "code_execution_20250825", CLAUDE_45, "", "container" },
  { AD_WIRE_RESPONSES, AD_PT_WEB_SEARCH, "web_search", OPENAI_TOOLS, "gpt-4.1-nano", "max_uses,allowed_domains,user_location" },
  { AD_WIRE_RESPONSES, AD_PT_CODE_EXECUTION, "code_interpreter", OPENAI_TOOLS, "", "max_uses,container" },
  { AD_WIRE_RESPONSES, AD_PT_FILE_SEARCH, "file_search", OPENAI_TOOLS, "", "max_uses,vector_stores" },
  { AD_WIRE_CHAT, AD_PT_WEB_SEARCH, "web_search_options", "gpt-5-search-api,gpt-4o-search-preview,gpt-4o-mini-search-preview",
    "", "user_location" },
  { AD_WIRE_GEMINI, AD_PT_WEB_SEARCH, "google_search", "gemini-2,gemini-3", "", "" },
  { AD_WIRE_GEMINI, AD_PT_CODE_EXECUTION, "code_execution", "gemini-2,gemini-3", "", "" },
  { AD_WIRE_GEMINI, AD_PT_URL_CONTEXT, "url_context", "gemini-2.5,gemini-3", "", "" },
  /* File Search (ai.google.dev/gemini-api/docs/file-search): vector_stores are
     its fileSearchStores/... names; the Gemini Developer API's, not Vertex's */
  { AD_WIRE_GEMINI, AD_PT_FILE_SEARCH, "file_search", "gemini-2.5,gemini-3", "", "vector_stores" },
};

/* The model families each wire knows, by name prefix: a name among them
   that a row does not list is refused; one outside them is new to luma
   (unknown), and goes through with allow_unknown_model. */
#define OPENAI_KNOWN "gpt-3.5,gpt-4,gpt-5,o1,o3,o4,chatgpt-"
static const char *const known[AD_NWIRES] = {
  OPENAI_KNOWN,                                                   /* chat */
  OPENAI_KNOWN,                                                   /* responses */
  "claude-2,claude-3,claude-instant," CLAUDE_4,                   /* anthropic */
  "gemini-1,gemini-2,gemini-3",                                   /* gemini */
};

/* What to use instead of a kind a wire does not have. */
typedef struct cap_hint {
  ad_wire wire;
  ad_ptkind kind;
  const char *hint;
} cap_hint;

static const cap_hint hints[] = {
  { AD_WIRE_CHAT, AD_PT_WEB_SEARCH, "use api: \"responses\" or a search model (gpt-5-search-api, gpt-4o-search-preview)" },
  { AD_WIRE_CHAT, AD_PT_CODE_EXECUTION, "use api: \"responses\"" },
  { AD_WIRE_CHAT, AD_PT_FILE_SEARCH, "use api: \"responses\"" },
  { AD_WIRE_ANTHROPIC, AD_PT_URL_CONTEXT, "use kind: \"web_fetch\"" },
  { AD_WIRE_GEMINI, AD_PT_WEB_FETCH, "use kind: \"url_context\"" },
  { AD_WIRE_RESPONSES, AD_PT_WEB_FETCH, "use kind: \"web_search\"" },
  { AD_WIRE_RESPONSES, AD_PT_URL_CONTEXT, "use kind: \"web_search\"" },
  { AD_WIRE_CHAT, AD_PT_WEB_FETCH, "use a model of another provider, or api: \"responses\" with kind: \"web_search\"" },
  { AD_WIRE_CHAT, AD_PT_URL_CONTEXT, "use a model of another provider, or api: \"responses\" with kind: \"web_search\"" },
};

ad_wire ad_wire_of(ad_provider provider, ad_api api) {
  if (api == AD_RESPONSES && ad_providers[provider].responses) return AD_WIRE_RESPONSES;
  if (provider == AD_ANTHROPIC) return AD_WIRE_ANTHROPIC;
  if (provider == AD_GEMINI) return AD_WIRE_GEMINI;
  return AD_WIRE_CHAT;
}

const char *ad_wire_title(ad_wire w) {
  static const char *const titles[AD_NWIRES] = { "Chat Completions", "the Responses API", "Anthropic Messages",
                                                 "Gemini generateContent" };
  return titles[w];
}

/* 1 when name starts with one of the comma-separated prefixes. */
static int has_prefix(const char *name, const char *prefixes) {
  for (const char *p = prefixes; *p;) {
    size_t n = strcspn(p, ",");
    if (n && strncmp(name, p, n) == 0) return 1;
    p += n + (p[n] == ',');
  }
  return 0;
}

/* 1 when word is one of the comma-separated words. */
static int has_word(const char *words, const char *word) {
  size_t len = strlen(word);
  for (const char *p = words; *p;) {
    size_t n = strcspn(p, ",");
    if (n == len && strncmp(p, word, n) == 0) return 1;
    p += n + (p[n] == ',');
  }
  return 0;
}

ad_capability ad_ptool_capability(ad_wire w, const char *model, ad_ptkind kind) {
  ad_capability c = { AD_CAP_NO_WIRE, NULL, "", "", "" };
  const char *name = model ? model : "";
  if (w == AD_WIRE_GEMINI && strncmp(name, "models/", 7) == 0) name += 7;
  for (size_t i = 0; i < sizeof hints / sizeof *hints; i++)
    if (hints[i].wire == w && hints[i].kind == kind) c.hint = hints[i].hint;
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    const cap_row *r = &rows[i];
    if (r->wire != w || r->kind != kind) continue;
    c.entry = r->entry;
    c.models = r->models;
    c.options = r->options;
    if (has_prefix(name, r->models) && !has_prefix(name, r->except)) c.verdict = AD_CAP_OK;
    else c.verdict = *name && has_prefix(name, known[w]) ? AD_CAP_NO_MODEL : AD_CAP_UNKNOWN_MODEL;
    return c;
  }
  return c;
}

int ad_ptool_takes(const ad_capability *c, const char *option) {
  return has_word(c->options, option);
}

const char *ad_tool_search(ad_wire w, const char *model, int bm25) {
  const char *name = model ? model : "";
  if (w == AD_WIRE_ANTHROPIC && has_prefix(name, CLAUDE_45) && !has_prefix(name, "claude-sonnet-5"))
    return bm25 ? "tool_search_tool_bm25_20251119" : "tool_search_tool_regex_20251119";
  if (w == AD_WIRE_RESPONSES && has_prefix(name, "gpt-5.4,gpt-5.5,gpt-5.6")) return "tool_search";
  return NULL;
}

const char *ad_tool_search_name(const char *entry) {
  if (strncmp(entry, "tool_search_tool_bm25", 21) == 0) return "tool_search_tool_bm25";
  if (strncmp(entry, "tool_search_tool_regex", 22) == 0) return "tool_search_tool_regex";
  return entry;
}

int ad_gemini_mixes_tools(const char *model) {
  const char *n = model ? model : "";
  if (strncmp(n, "models/", 7) == 0) n += 7;
  return !(strncmp(n, "gemini-1", 8) == 0 || strncmp(n, "gemini-2", 8) == 0);
}

/* ------------------------------------------------ the families' shared pieces */

const char *ad_ptool_entry(const ad_model *m, ad_ptkind kind) {
  return ad_ptool_capability(ad_wire_of(m->provider, m->api), m->name, kind).entry;
}

void ad_write_strings(sb_buf *b, const char *const *items, int n) {
  sb_addc(b, '[');
  for (int i = 0; i < n; i++) {
    if (i) sb_addc(b, ',');
    json_write_string(b, items[i], strlen(items[i]));
  }
  sb_addc(b, ']');
}

void ad_write_location(sb_buf *b, const ad_ptool *t, int typed) {
  sb_adds(b, typed ? "{\"type\":\"approximate\"" : "{");
  for (int i = 0; i < t->nlocation; i++) {
    if (typed || i) sb_addc(b, ',');
    json_write_string(b, t->location[i].name, strlen(t->location[i].name));
    sb_addc(b, ':');
    json_write_string(b, t->location[i].value, strlen(t->location[i].value));
  }
  sb_addc(b, '}');
}

int ad_ptool_check(const ad_model *m, const ad_ask *q, char *err, size_t errlen) {
  for (int i = 0; i < q->nptools; i++)
    if (!ad_ptool_entry(m, q->ptools[i].kind)) {
      snprintf(err, errlen, "%s is not available on %s", ad_ptkind_names[q->ptools[i].kind],
               ad_wire_title(ad_wire_of(m->provider, m->api)));
      return 0;
    }
  return 1;
}

void ad_add_citation(ar_arena *a, ad_turn *t, const char *url, const char *title, const char *text, size_t len) {
  if (!url) return;
  if ((t->ncitations & (t->ncitations - 1)) == 0) {   /* 0, 1, 2, 4...: full */
    ad_citation *more = ar_alloc(a, sizeof *more * (size_t)(t->ncitations ? 2 * t->ncitations : 1));
    if (!more) return;
    if (t->ncitations) memcpy(more, t->citations, sizeof *more * (size_t)t->ncitations);
    t->citations = more;
  }
  ad_citation *c = &t->citations[t->ncitations++];
  c->url = url;
  c->title = title;
  c->cited_text = text ? ar_strndup(a, text, len) : NULL;
}

void ad_add_ptcall(ar_arena *a, ad_turn *t, int kind, const char *name, const char *id, const char *error_code,
                   const char *error) {
  if ((t->nptcalls & (t->nptcalls - 1)) == 0) {   /* 0, 1, 2, 4...: full */
    ad_ptcall *more = ar_alloc(a, sizeof *more * (size_t)(t->nptcalls ? 2 * t->nptcalls : 1));
    if (!more) return;
    if (t->nptcalls) memcpy(more, t->ptcalls, sizeof *more * (size_t)t->nptcalls);
    t->ptcalls = more;
  }
  ad_ptcall *c = &t->ptcalls[t->nptcalls++];
  c->id = id;
  c->kind = kind;
  c->name = kind >= 0 ? ad_ptkind_names[kind] : name ? name : "provider_tool";
  c->error_code = error_code;
  c->error = error_code && !error ? ar_printf(a, "The provider's %s failed: %s.", c->name, error_code) : error;
  if (kind >= 0) t->ptool_uses[kind]++;
  if (error_code) t->ptool_errors++;
}

int ad_ptkind_of(const char *name) {
  if (!name) return -1;
  static const struct { const char *part; ad_ptkind kind; } words[] = {
    { "web_search", AD_PT_WEB_SEARCH }, { "FILE_SEARCH", AD_PT_FILE_SEARCH }, { "SEARCH", AD_PT_WEB_SEARCH }, { "web_fetch", AD_PT_WEB_FETCH },
    { "code_execution", AD_PT_CODE_EXECUTION }, { "code_interpreter", AD_PT_CODE_EXECUTION }, { "CODE", AD_PT_CODE_EXECUTION },
    { "file_search", AD_PT_FILE_SEARCH }, { "URL", AD_PT_URL_CONTEXT },
  };
  for (size_t i = 0; i < sizeof words / sizeof *words; i++)
    if (strstr(name, words[i].part)) return (int)words[i].kind;
  return -1;
}
