/* STEP_RUN (steps.h): the handler's attempts, retries and backoff. */
#ifndef LUMA_ATTEMPT_H
#define LUMA_ATTEMPT_H

#include "callint.h"
#include "verdict.h"

/* The call's timeout in ms: the tool's, its agent's, the program's. */
long long st_effective_timeout(const cl_call *c);
/* Starts an attempt. SV_HANDLER: its job is ready; SV_WAIT: every state of
   the module is busy; SV_RESULT, SV_ERROR: done; SV_RETRY, SV_BACKOFF: it
   failed and is tried again. */
st_verdict st_attempt(lua_State *T, cl_call *c);
/* The same verdicts, once the job is done. */
st_verdict st_collect(lua_State *T, cl_call *c);
/* The job's work, on a worker (the run function of c->job). */
void st_job_run(wp_job *job);
/* The handler suspended in a wait (CS_SUSPENDED), once its wait is over,
   or woken: SV_HANDLER, its job ready to resume it; SV_WAIT, its state is
   busy (it is woken when it is free); SV_ERROR, its deadline passed. */
st_verdict st_resume(lua_State *T, cl_call *c);
/* Gives back the state of a job that was made ready but never ran, or of a
   handler suspended in a wait (its coroutine dropped). */
void st_abandon(cl_call *c);
/* The call no longer waits for a state of its module (cancelled, freed). */
void st_unwait(cl_call *c);

#endif
