/* The model a fuzzer's input picks by its first byte: one of every wire
   variant the adapters speak (spec/fuzz/adapter_fuzz.c, stream_fuzz.c). */
#ifndef LUMA_FUZZ_MODEL_H
#define LUMA_FUZZ_MODEL_H

#include <stdint.h>
#include <string.h>

#include "adapter.h"

/* A key the fuzzers look for in every message: it must never show. */
#define FUZZ_KEY "secret-key-123"

static void fuzz_model(ad_model *m, uint8_t pick) {
  memset(m, 0, sizeof *m);
  switch (pick % 5) {
    case 0: m->provider = AD_OPENAI; break;
    case 1: m->provider = AD_AZURE; m->deployment = "d"; m->base_url = "https://x"; break;
    case 2: m->provider = AD_OPENAI; m->api = AD_RESPONSES; break;
    case 3: m->provider = AD_ANTHROPIC; break;
    default: m->provider = AD_GEMINI; break;
  }
  m->name = "model-1";
  m->api_key = FUZZ_KEY;
}

#endif
