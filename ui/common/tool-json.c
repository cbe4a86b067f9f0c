/* tool-json.c: the OpenAI shape of tool calls (doc/tool-calls.md), written from a
 * conversation message (k3_msg) with jansson.
 *
 * DESIGN
 * One place for the JSON of calls, so the server's answers and the remote backend's requests
 * agree: {"id", "type": "function", "function": {"name", "arguments"}} with the arguments as
 * a string ("{}" when the call has none). The stream writes a call as an opening delta (index,
 * id, type, name, empty arguments) and then argument fragments that concatenate to the final
 * arguments string.
 */
#include "tool-json.h"

#include <string.h>

json_t *stools_call_json(const char *id, const char *name, const char *args, size_t n) {
    return json_pack("{s:s,s:s,s:{s:s,s:s%}}", "id", id, "type", "function", "function", "name", name,
                     "arguments", args, n);
}

json_t *stools_calls_json(const k3_msg *m) {
    if (!m || m->n_tool_calls <= 0)
        return NULL;
    json_t *a = json_array();
    for (int k = 0; a && k < m->n_tool_calls; k++) {
        const char *args = m->tool_calls[k].arguments ? m->tool_calls[k].arguments : "{}";
        json_array_append_new(
            a, stools_call_json(m->tool_calls[k].id, m->tool_calls[k].name, args, strlen(args)));
    }
    return a;
}

json_t *stools_delta_open(int index, const char *id, const char *name) {
    return json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index", index, "id", id, "type",
                     "function", "function", "name", name, "arguments", "");
}

json_t *stools_delta_args(int index, const char *args, size_t n) {
    return json_pack("{s:[{s:i,s:{s:s%}}]}", "tool_calls", "index", index, "function", "arguments", args, n);
}
