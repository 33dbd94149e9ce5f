/*
 * Recordings of the exchanges with model providers, as JSON lines:
 *   {"version":2,"request":{"method","url","headers":{...},"body":<JSON>},
 *    "response":{"status","headers":{...},"body":<JSON, or the text>},
 *    "stream":true}
 * "stream" (only when true): the request asked for a stream; a 2xx
 * text/event-stream response's body is then the raw event stream as it
 * came. Version 1 (no "version") had no streams: a streamed exchange was kept
 * as the whole request and response it stood for, and still replays so.
 * A line of a later version is refused, naming both.
 * A recorder appends them with the secrets redacted (the auth headers'
 * values, and the API key wherever it appears). A replay serves them in
 * order with no network, and refuses the first request that differs from the
 * recorded one, saying which field differs. Lua-free.
 */
#ifndef LUMA_RECORD_H
#define LUMA_RECORD_H

#include <stddef.h>

#include "adapter.h"

typedef struct rc_recorder rc_recorder;
typedef struct rc_replay rc_replay;

/* Opens path for appending; NULL with a message in err. */
rc_recorder *rc_record_open(const char *path, char *err, size_t errlen);
void rc_record_close(rc_recorder *r);
/* Appends one exchange; `secret` (the API key, or NULL) never reaches the
   file. Returns -1 with a message in err when it cannot be written. */
int rc_record(rc_recorder *r, const ad_request *req, const ad_response *resp, int stream, const char *secret,
              char *err, size_t errlen);

/* Reads a recording; NULL with a message in err (naming the file and line). */
rc_replay *rc_replay_open(const char *path, char *err, size_t errlen);
void rc_replay_close(rc_replay *r);
/* The recorded response to req, which must match the next recorded request
   (method, URL and JSON body; headers are not compared): 0 and *out (valid
   until the replay is closed), or -1 with what differs in err. */
int rc_replay_next(rc_replay *r, const ad_request *req, ad_response *out, char *err, size_t errlen);
/* Whether the next recorded request asked for a stream (0 when none is left). */
int rc_replay_streamed(const rc_replay *r);
/* Whether a served response is a recorded event stream (a 2xx
   text/event-stream), to be read through the stream parser. */
int rc_replay_is_stream(const ad_response *resp);
/* The seed of the sizes of the pieces a recorded stream is served in
   (RC_SEED_DEFAULT until set): the same seed, the same pieces. */
#define RC_SEED_DEFAULT 1
void rc_replay_seed(rc_replay *r, unsigned long long seed);
/* The size of the next piece of a recorded stream: 1 to RC_PIECE_MAX bytes,
   at random from the seed, and at most left. */
size_t rc_replay_piece(rc_replay *r, size_t left);

#endif
