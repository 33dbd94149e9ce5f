/* MCP's Streamable HTTP transport: a small HTTP/1.1 server on poll(2), one
   thread (its caller's), Lua-free. It owns what meets a client's bytes
   first, every part under a fixed bound (the LIM_MCP_HTTP_ rows): the
   connections (past the bound: 503), a request's head (431) and body
   (mcp_max_message_bytes: 413), the time a request may take to arrive (408:
   a half-sent request holds a connection this long at most) or a reply to be
   read, the idle time of a kept-alive connection; and the checks that are
   security, before the protocol sees a request: Origin and Host (403), the
   bearer token (401, compared in constant time). Sessions of the initialize
   era live here too, as a bounded table (the least recently used goes first).
   The protocol (methods, eras, which status a JSON-RPC error gets) is
   lua/luma/mcp.lua, through the binding core/lmcphttp.c.

   A request goes: read (head, then Content-Length bytes of body) -> held by
   the caller (mh_next until mh_reply) -> its reply written -> the next
   request of the connection (keep-alive) or close. A connection whose
   client leaves while its request is held reports the request as gone
   (mh_gone): its work may stop. */
#ifndef LUMA_MCPHTTP_H
#define LUMA_MCPHTTP_H

#include <stddef.h>
#include <stdint.h>

typedef struct mh_server mh_server;

typedef struct mh_config {
  const char *host;         /* a numeric IPv4 or IPv6 address */
  int port;                 /* 0: any free port */
  const char *token;        /* NULL: no bearer token is asked for */
  const char **origins;     /* NULL-terminated: origins allowed beside loopback ones */
  size_t max_body;          /* the longest body read */
} mh_config;

typedef struct mh_header { const char *name, *value; } mh_header;   /* name in lower case */

typedef struct mh_request {
  uint64_t id;
  const char *method, *target;
  const mh_header *headers;
  int nheaders;
  const char *body;
  size_t body_len;
} mh_request;

/* Binds and listens. NULL with err filled when it cannot. */
mh_server *mh_open(const mh_config *cfg, char *err, size_t errlen);
void mh_close(mh_server *s);
int mh_port(const mh_server *s);

/* Waits at most timeout_ms (< 0: no bound) for the server's sockets and the
   caller's `extra` fds, then does what is ready: accepts, reads, writes,
   ends the connections past their time. ready[i] is set for each extra fd
   readable. Returns 0, or -1 with errno when poll fails. */
int mh_wait(mh_server *s, int timeout_ms, const int *extra, int nextra, int *ready);

/* The next request read whole and not yet given out: 1 with *r (its
   strings valid until mh_reply of its id), or 0. */
int mh_next(mh_server *s, mh_request *r);

/* The reply to a held request: status, extra header lines (each ending in
   \r\n; Content-Length and Connection are added), body. Returns 0, or -1
   when the id is not held (answered already, or gone). */
int mh_reply(mh_server *s, uint64_t id, int status, const char *headers, const char *body, size_t len);

/* A held request's reply as an event stream (for the notifications that
   come before the reply): mh_stream sends its head now (200,
   text/event-stream, headers as mh_reply's, and the connection ends with
   the stream), mh_event adds one event of data, and mh_reply sends its
   body as the last event (its status and headers are not sent then; an
   empty body ends the stream with no event).
   mh_stream returns 0 (also when the stream began already), or -1 when the
   id is not held; mh_event 0, -1 when not held or not streaming, or 1 when
   it was dropped: the client has not read LIM_MCP_MAX_MESSAGE_BYTES. */
int mh_stream(mh_server *s, uint64_t id, const char *headers);
int mh_event(mh_server *s, uint64_t id, const char *data, size_t len);

/* A held request whose client left: 1 with *id, or 0. Each is given once;
   mh_reply of it then returns -1. */
int mh_gone(mh_server *s, uint64_t *id);

/* Sessions: mh_session_new writes a new id (32 hex digits) into out[33] and
   keeps `version` (at most 15 bytes) and `client` (the client's name, or
   NULL; cut to 128 bytes) with it; -1 when no random bytes could be had.
   mh_session returns the version of a live session (and marks it used) and
   sets *client (unless client is NULL; "" when none was given), or NULL. mh_session_end returns 1 when it ended one. */
int mh_session_new(mh_server *s, const char *version, const char *client, char out[33]);
const char *mh_session(mh_server *s, const char *id, const char **client);
/* The flags a live session keeps for the caller (0 when made), or NULL. */
unsigned *mh_session_flags(mh_server *s, const char *id);
int mh_session_end(mh_server *s, const char *id);

#endif
