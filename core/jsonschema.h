/* JSON Schema of the program's schemas and tool declarations. */
#ifndef LUMA_JSONSCHEMA_H
#define LUMA_JSONSCHEMA_H

#include "json.h"
#include "program.h"

/* The canonical schema, and the place for providers' dialects of it. */
typedef enum { JS_CANONICAL } js_dialect;

/* The schema of s, with every schema it references under "$defs". */
jv *js_schema(ar_arena *a, const pm_program *p, const pm_schema *s, js_dialect d);
/* { name, description, parameters } for one tool, and the array of all. */
jv *js_tool(ar_arena *a, const pm_program *p, const pm_tool *t, js_dialect d);
jv *js_tools(ar_arena *a, const pm_program *p, js_dialect d);

#endif
