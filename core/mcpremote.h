/* MCP servers as tool sources, over Streamable HTTP: an exchange is one
   POST (or DELETE) of one JSON-RPC message on an HTTP transport
   (base/transport.c), and its answer read as messages: an application/json
   body is one message, a text/event-stream body one per event (the SSE
   reader of adapters/sse.c), anything else one text for the caller to
   report. Lua-free; the protocol is lua/luma/mcpclient.lua, the binding
   lmcpremote.c.

   Every wait is bounded by a deadline. A message longer than max_message
   is refused (the transfer is ended), and what the transport holds unread
   is bounded by the same figure; events are parsed only as the caller asks
   for messages, so a server that floods is held to one read's worth of
   queued events. */
#ifndef LUMA_MCPREMOTE_H
#define LUMA_MCPREMOTE_H

#include <stddef.h>

#include "transport.h"

typedef struct mcr_exchange mcr_exchange;

/* Starts r (its stream, on_data and max_response_bytes are set here) on tp.
   NULL with the reason in err (an invalid request, out of memory). */
mcr_exchange *mcr_start(tp_transport *tp, const tp_request *r, size_t max_message, char *err, size_t errlen);
/* The answer's head, waiting until deadline (mcc_now_ms's clock): 1 with
   its status and headers (owned by x), MCC_TIMEOUT, or MCC_ERROR with err
   (no response: the connection failed, the transport's timeout). */
int mcr_head(mcr_exchange *x, long long deadline, long *status, const tp_header **h, size_t *n, char *err, size_t errlen);
/* The next message of the answer, waiting until deadline: MCC_LINE (*msg,
   *n valid until the next call), MCC_TOO_BIG (the exchange is over),
   MCC_EOF (the body ended), MCC_TIMEOUT, or MCC_ERROR with err. */
int mcr_next(mcr_exchange *x, const char **msg, size_t *n, long long deadline, char *err, size_t errlen);
/* Ends the transfer if it runs, and frees x. NULL is fine. */
void mcr_free(mcr_exchange *x);

#endif
