/*
 * The steps every tool call passes (SPEC §3), in order, and the unit that
 * owns each. Comments elsewhere name a step (STEP_CACHE), never its number.
 * A step unit has a header of its own; call.c calls each step, reads its
 * verdict (verdict.h) and alone moves the call's state (callint.h).
 */
#ifndef LUMA_STEPS_H
#define LUMA_STEPS_H

enum {
  STEP_REGISTRY = 1,  /* registry lookup                policy.c */
  STEP_CREDENTIAL,    /* credential check               policy.c */
  STEP_SCOPE,         /* scope allowlist                policy.c */
  STEP_DENY_WRITE,    /* tool_policy deny_write         policy.c */
  STEP_APPROVAL,      /* tool_policy approval           policy.c */
  STEP_INPUT,         /* input validation               call.c */
  STEP_NEEDS,         /* needs, through the host's lookup          needs.c */
  STEP_CACHE,         /* the cache, single flight       cache.c */
  STEP_IDEMPOTENCY,   /* idempotency claims and replays idempotent.c */
  STEP_RUN,           /* the handler's attempts, retries, backoff  attempt.c */
  STEP_OUTPUT,        /* output validation, typed errors           output.c */
  STEP_RECORD         /* the cache and idempotency writes (output.c, cache.c,
                         idempotent.c), the circuit breaker (breaker.c) and
                         the one telemetry event (telemetry.c) */
};

#endif
