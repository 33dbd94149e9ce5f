/* The Redis journal (journal_redis.c); its calls are journal.h's. */
#ifndef LUMA_JOURNAL_REDIS_H
#define LUMA_JOURNAL_REDIS_H

#include <stddef.h>

#include "journaltypes.h"

/*
 * Opens the journal in the Redis at url (redis.h: redis://[user:password@]
 * host:port/db; password overrides the url's), its keys under prefix (NULL:
 * "luma:"), all printable, a run's id escaped (%XX for controls, space,
 * ':', * ? [ ] \ and %):
 *   <prefix>journal:meta           hash: format "luma-journal", version
 *   <prefix>journal:runs           sorted set: run ids by updated (ms)
 *   <prefix>journal:run:<id>       hash: state, step, owner, lease_until,
 *                                  created, updated (as luma_runs' columns)
 *   <prefix>journal:run:<id>:records  list: record seq N at index N - 1,
 *                                  "<v>|<digest>|<kind>|<body>"
 * Every change is one script (atomic): an append checks the owner and that
 * its seq is the next; a claim is a compare-and-set. Times are the server's
 * (TIME). A journal:meta of another format, or of a later version, is
 * refused at open (NULL, err names both versions); a server that is down is
 * not: the calls fail (-1, err) until it is back.
 */
jr_journal *jr_open_redis(const jr_options *o, char *err, size_t errlen);

#endif
