/* Every model provider, in one table: the program model reads its names
   (a model's `provider`), the adapters its family and defaults. A new
   provider is a row here plus its family's file, when it needs a new one.

   X(ID, name, family, key variable, base URL, responses):
     ID           AD_<ID>, the provider's number (the row's place)
     name         what a model's `provider` says
     family       the ad_family (common.h) that speaks its chat API
     key variable where the API key is read when a model sets no api_key_env
     base URL     the URL requests go to when a model sets no base_url;
                  NULL: a model must set one
     responses    1: it offers the OpenAI Responses API too (api: "responses") */
#ifndef LUMA_ADAPTERS_PROVIDERS_H
#define LUMA_ADAPTERS_PROVIDERS_H

#define AD_PROVIDERS(X) \
  X(OPENAI, "openai", ad_openai_chat, "OPENAI_API_KEY", "https://api.openai.com/v1", 1) \
  X(AZURE, "azure", ad_openai_chat, "AZURE_OPENAI_API_KEY", NULL, 1) \
  X(ANTHROPIC, "anthropic", ad_anthropic_family, "ANTHROPIC_API_KEY", "https://api.anthropic.com", 0) \
  X(GEMINI, "gemini", ad_gemini_family, "GEMINI_API_KEY", "https://generativelanguage.googleapis.com", 0)

typedef enum {
#define AD_PROVIDER_ENUM_(id, name, family, key_env, base_url, responses) AD_##id,
  AD_PROVIDERS(AD_PROVIDER_ENUM_)
#undef AD_PROVIDER_ENUM_
  AD_NPROVIDERS
} ad_provider;

typedef struct ad_provider_info {
  const char *name;
  const char *key_env;
  const char *base_url;           /* NULL: none */
  int responses;
} ad_provider_info;

/* By ad_provider. */
extern const ad_provider_info ad_providers[AD_NPROVIDERS];
/* The names by ad_provider, NULL-terminated (a list of choices). */
extern const char *const ad_provider_names[AD_NPROVIDERS + 1];

/* The API a model speaks (a model's `api`). AD_RESPONSES is the OpenAI
   Responses API, for the providers whose row offers it (the others speak
   their chat API). */
typedef enum { AD_CHAT, AD_RESPONSES } ad_api;
/* The names by ad_api, NULL-terminated (a list of choices). */
extern const char *const ad_api_names[];

#endif
