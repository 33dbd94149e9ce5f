/*
 * luma.http: the HTTP client of a state whose policy says allow_network,
 * on the process's one HTTP transport (base/transport.h).
 * Only http:// and https:// (redirects too, at most LIM_HTTP_MAX_REDIRECTS), a
 * fixed list of methods, no CR/LF/NUL in headers, bounded bodies, and every
 * request stopped by the call's deadline. Failures raise error objects
 * (base/lerror.h) { code = "HTTP_ERROR" | "HTTP_TIMEOUT" | "HTTP_TOO_LARGE",
 * message, retryable }; a status >= 400 is a response, not an error.
 */
#ifndef LUMA_SANDBOX_HTTP_H
#define LUMA_SANDBOX_HTTP_H

#include <stddef.h>

#include <lua.h>

/* The metatable of a request in progress (a userdata owning its buffers). */
#define SH_TRANSFER_MT "luma.HttpTransfer"

/* The deadline the requests of a state must respect: returns the
   milliseconds left, 0 once the call's deadline passed or its signal fired
   (never a negative number for a passed deadline), or a negative number when
   there is no deadline at all. It is called on the state's thread about every
   10 ms while a request is waited for, with L the running thread (maybe a
   coroutine), so it must not raise nor run Lua code. */
typedef long long (*sh_deadline_fn)(lua_State *L);

/* A 0 field means its default: LIM_HTTP_TIMEOUT_MS, LIM_HTTP_MAX_BYTES. */
typedef struct sh_limits {
  long long timeout_ms;        /* per request, when no deadline is nearer */
  size_t max_response_bytes;   /* body limit, and the limit of the response's header block */
  size_t max_request_bytes;    /* body limit */
} sh_limits;

/* Makes the value a failure raises, in place of the error object: it pushes
   one value (the state's own stop, say, for a request ended by its call's
   deadline), and must not raise. */
typedef void (*sh_error_fn)(lua_State *L, const char *code, const char *message, int retryable);

/* How a request may wait without holding its thread (the sandbox's waits):
   may_yield says whether the request made on L may, and gives the
   callback its transfer calls when it ends (on the transport's I/O thread;
   short, no tp_ call); yield then suspends the running call until that
   callback ran or its deadline came (lua_yieldk with k and ctx; `transfer`
   is the tp_transfer, which the sandbox cancels if the call ends while it
   waits). */
#if LUA_VERSION_NUM >= 504
typedef struct sh_wait {
  int (*may_yield)(lua_State *L, void (**done)(void *ud), void **ud);
  int (*yield)(lua_State *L, void *transfer, lua_KContext ctx, lua_KFunction k);
} sh_wait;

/* Pushes the `http` table (request, get, post) for a state whose deadline is
   read with `deadline` (NULL: none) and whose failures are made by `error`
   (NULL: error objects). limits may be NULL; it is copied. With `wait`, a
   request yields where wait->may_yield says it may; else it blocks. */
void sh_push_http(lua_State *L, sh_deadline_fn deadline, sh_error_fn error, const sh_limits *limits);
void sh_push_http_waiting(lua_State *L, sh_deadline_fn deadline, sh_error_fn error, const sh_wait *wait,
                          const sh_limits *limits);
#endif

/* In a forked child: forget the parent's transport (its thread is not
   there); the child's first request makes one of its own. */
void sh_after_fork(void);

#endif
