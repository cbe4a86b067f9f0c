/* tool-json.h: the OpenAI shape of tool calls (tool-json.c), shared by the server (an answer's
 * tool_calls and the stream's delta.tool_calls) and the remote backend (the tool turns of a
 * conversation it sends). The request side of the server (checks, 400s) stays in serve-tools.h. */
#pragma once
#include "k3.h"

#include <jansson.h>
#include <stddef.h>

/* One call of an answer (OpenAI shape), its arguments args[0..n) as they are (a cut call's are
 * not JSON); NULL when a string is not UTF-8. */
json_t *stools_call_json(const char *id, const char *name, const char *args, size_t n);
/* The "tool_calls" array of an answer (OpenAI shape); NULL when m has none. */
json_t *stools_calls_json(const k3_msg *m);
/* Stream deltas: a call opening (index, id, type, name, empty arguments) and a fragment. */
json_t *stools_delta_open(int index, const char *id, const char *name);
json_t *stools_delta_args(int index, const char *args, size_t n);
