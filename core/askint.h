/* What the ask's units share: the ask's record (ask.c: its state machine,
   requests and answers; asktools.c: the model's tool calls and the ask's
   telemetry event). Types only: ask.c alone moves the ask's state. */
#ifndef LUMA_ASKINT_H
#define LUMA_ASKINT_H

#include <stdint.h>

#include "adapter.h"
#include "call.h"
#include "errors.h"
#include "pipeline.h"
#include "runtime.h"

#ifndef LUMA_AK_ASK_T
#define LUMA_AK_ASK_T
typedef struct ak_ask ak_ask;   /* ask.h's handle */
#endif

/* The ask's one value on its thread: the answer, or the error. */
enum { AK_VALUE = 1, AK_NVALUES = 1 };

enum {
  AK_START,       /* the model, tools and conversation to prepare */
  AK_SEND,        /* a request is due */
  AK_HTTP,        /* its transfer is in flight */
  AK_BACKOFF,     /* a failed exchange is retried at wake_at */
  AK_TOOLS,       /* the turn's tool calls run */
  AK_END,         /* the outcome is known: the event to emit */
  AK_DONE
};

/* A source the ask's answer cites (a provider tool's), in the ask's arena. */
typedef struct ak_cite {
  const char *url, *title, *cited_text;   /* title and cited_text may be NULL */
  struct ak_cite *next;
} ak_cite;

/* One tool call of the current turn, and its result for the model. */
typedef struct ak_slot {
  cl_call *call;              /* until it is done and collected */
  int started;
  int answered;
  char *content;              /* JSON text, malloc'd */
  size_t len;
  int is_error;
  int reported;               /* its tool_result event was queued */
  int journaled;              /* its "tool" record was written, or read back */
  int awaiting;               /* it waits for a person's decision (TOOL_AWAITING_APPROVAL) */
  char *reason;               /* why, malloc'd */
} ak_slot;

struct ak_ask {
  rt_task task;               /* first: the runtime's handle */
  int refs;                   /* the caller's, the runtime's while it is a task */
  rt_runtime *rt;
  pl_program *pg;             /* counted */
  pl_scope *scope;            /* counted */
  const pm_agent *agent;
  const pm_model *pm;
  const pm_schema *schema;
  const pm_tool *forced;
  const char *prompt;         /* in arena */
  size_t prompt_len;
  lua_State *T;               /* the ask's own thread; registry ref tref */
  int tref;
  int state;
  int ok;
  int cancelled;              /* atomic */
  char id[32];
  ar_arena arena;             /* what lives as long as the ask: the model, tools, schema */
  ad_model model;
  ad_tool *tools;
  int ntools;
  jv *final_schema;
  ad_conv conv;
  ar_arena turn_arena;        /* the current request, response and turn */
  ad_turn turn;
  ad_request req;             /* the request in flight (turn_arena) */
  tp_transfer *tp;
  int attempt;                /* requests of the current exchange */
  long long start, exchange_start, wake_at;
  int turns, tool_calls, tool_rounds, rate_used, reasks;
  long long input_tokens, output_tokens;
  ak_slot *slots;
  int nslots;
  int starting;               /* calls were started in this step */
  int fatal;                  /* a slot whose error ends the ask, + 1; 0: none */
  unsigned long long rng;
  /* streaming (ask.c) */
  int streaming;              /* the transfer in flight was asked for a stream */
  int head_seen;              /* its head was read: sse or a whole body follows */
  int sse;                    /* a 2xx text/event-stream: read by `stream` */
  ad_stream *stream;
  int stream_failed;
  ad_error stream_error;      /* its error (turn_arena) */
  sb_buf whole;               /* a body that is no stream (an error, a server that ignored the flag) */
  int whole_too_large;
  sb_buf raw;                 /* the stream's bytes as they came, for a recording */
  const char *replayed;       /* a recorded stream being served (record.h): what is left of it */
  size_t replayed_len;
  int delivered;              /* deltas of the current exchange reached the queue */
  int held;                   /* the stream waits for the host to take events */
  long long ttft;             /* ms from the start to the first delta or turn; -1: none yet */
  /* events for the host (askevents.c) */
  int listen;                 /* the host listens: events are queued */
  int ev_turn;                /* the turn the events name (1 for the first request) */
  int qref;                   /* registry: the queue, a table indexed qhead..qtail */
  long long qhead, qtail;
  size_t qbytes;              /* what the queued events hold, about (LIM_STREAM_QUEUE_BYTES) */
  cl_call **early;            /* calls of the streaming turn started before its end, by
                                 position (NULL: none); malloc'd, nearly long */
  int nearly;
  int ncallids;               /* the current turn's calls as events name them (turn_arena) */
  const char **callids, **callnames;
  /* provider tools (askptools.c): their entries, the turns the provider
     paused, its own tool calls and their failures, the sources cited */
  ad_ptool *ptools;
  int nptools;
  int pauses;
  int ptool_uses[AD_NPTKINDS];
  int ptool_errors;
  ak_cite *cites, **cites_tail;
  int ncites;
  /* lazy tools (askptools.c): none, the wire's own search, or the synthetic
     discovery tool, with what it found (by tools index) */
  int lazy_mode;              /* AK_LAZY_* */
  const char *tool_search;    /* AK_LAZY_NATIVE: the wire's entry */
  unsigned char *discovered;
  ad_tool discover;           /* AK_LAZY_SYNTHETIC: the discovery tool */
  /* a durable agent's run (journal.h, askjournal.c) */
  char run_id[64];            /* made at its first record, or the run resumed; "" */
  char owner[128];            /* this process's claim on it: host:pid:nonce */
  struct ak_past *past;       /* a resumed run's records, or NULL */
  struct ak_beat *beat;       /* the lease's heartbeat, while the ask owns the run */
  int lost;                   /* atomic: another process took the run over (lost_why says how) */
  int losing;                 /* atomic: lost_why is being written, once */
  int awaiting;               /* the run waits for a person: it is not finished */
  const char **secrets;       /* what its records must not hold (askjournal.c), in arena */
  int nsecrets;
  char lost_why[300];
};

enum { AK_LAZY_NONE, AK_LAZY_NATIVE, AK_LAZY_SYNTHETIC };

#endif
