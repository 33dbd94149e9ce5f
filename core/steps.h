/*
 * The steps every tool call passes (SPEC §3), in order, and the unit that
 * owns each. Comments elsewhere name a step (STEP_CACHE), never its number.
 * A step unit has a header of its own; call.c calls each step, reads its
 * verdict (verdict.h) and alone moves the call's state (callint.h).
 */
#ifndef LUMA_STEPS_H
#define LUMA_STEPS_H

enum {
  STEP_REGISTRY = 1,  /* registry lookup                          policy.c */
  STEP_CREDENTIAL,    /* credential check                         policy.c */
  STEP_SCOPE,         /* scope allowlist                          policy.c */
  STEP_DENY_WRITE,    /* tool_policy: deny_write                  policy.c */
  STEP_APPROVAL,      /* tool_policy: approval                    policy.c */
  STEP_INPUT,         /* input validation                         call.c */
  STEP_NEEDS,         /* needs resolution and type check          needs.c */
  STEP_CACHE,         /* cache and single-flight lookup           cache.c */
  STEP_IDEMPOTENCY,   /* idempotency lookup                       idempotent.c */
  STEP_RUN,           /* handler run, retries and backoff         attempt.c */
  STEP_OUTPUT,        /* output validation, typed errors          output.c */
  STEP_RECORD         /* cache and idempotency writes (output.c, cache.c,
                         idempotent.c), the failure counter (breaker.c),
                         telemetry (telemetry.c) */
};

#endif
