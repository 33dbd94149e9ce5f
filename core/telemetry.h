/* STEP_RECORD's telemetry (steps.h): one event per call. */
#ifndef LUMA_TELEMETRY_H
#define LUMA_TELEMETRY_H

#include "callint.h"

#include "pipeline.h"

/* builtin = true for a built-in tool's (pm_tool.builtin). */
void st_emit(lua_State *T, cl_call *c);
/* Sends the event at index e to the program's sinks (on_event, trace). */
void st_publish(lua_State *T, pl_program *pg, int e);
/* What the runtime has to tell the host that is no call's outcome (a
   recording it cannot write, a corrupt store it replaced): an event
   { kind = "warning", message } to the same sinks. The library never
   writes to the host's stderr itself. */
void st_warn(lua_State *T, pl_program *pg, const char *message);

#endif
