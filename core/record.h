/*
 * Recordings of the exchanges with model providers, as JSON lines:
 *   {"request":{"method","url","headers":{...},"body":<JSON>},
 *    "response":{"status","headers":{...},"body":<JSON, or the text>}}
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
int rc_record(rc_recorder *r, const ad_request *req, const ad_response *resp, const char *secret, char *err,
              size_t errlen);

/* Reads a recording; NULL with a message in err (naming the file and line). */
rc_replay *rc_replay_open(const char *path, char *err, size_t errlen);
void rc_replay_close(rc_replay *r);
/* The recorded response to req, which must match the next recorded request
   (method, URL and JSON body; headers are not compared): 0 and *out (valid
   until the replay is closed), or -1 with what differs in err. */
int rc_replay_next(rc_replay *r, const ad_request *req, ad_response *out, char *err, size_t errlen);

#endif
