/* serve-tools.h: OpenAI tool calling for `--serve` (serve-tools.c): request fields, the
 * tool parts of messages, and the tool_calls of answers and stream chunks.
 * serve.c keeps HTTP, jobs and the worker; it calls these small functions. */
#pragma once
#include "k3.h"
#include "tool-json.h" /* the answer side: tool_calls and stream deltas */

#include <jansson.h>

typedef struct stools_err {
    char msg[400];
    char code[40];
    char param[80]; /* the field the message names ("" if none): OpenAI's error.param */
} stools_err;
/* Fills e (message from fmt, code) and returns -1: every 400 of the server goes through it. A
 * message about a field begins with the field's path and a colon ("stop[2]: expected a string",
 * "messages[0].role: ..."); that path is e->param. */
int serve_bad(stools_err *e, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The request's tools (compact JSON text, NULL: none) and tool_choice. */
typedef struct stools_req {
    char *tools;
    char  tool_choice[12]; /* "auto" | "required" | "none" (a named choice renders as auto) */
    char *named;           /* tool_choice {"type":"function","function":{"name":..}}, else NULL */
    int   single;          /* parallel_tool_calls false: at most one call                     */
} stools_req;

/* The tool parts of one message: an assistant's calls, a tool result's id and name (or the
 * speaker's name of a system, user or assistant message). */
typedef struct stools_msg {
    k3_tool_call *calls; /* (n_calls) strings owned */
    int           n_calls;
    char         *tool_call_id, *name;
    char         *tools; /* a system message's in-place declarations (compact JSON), NULL: none */
} stools_msg;

/* tools, tool_choice, parallel_tool_calls. -1 with e filled (a 400 naming the field). */
int  stools_parse_request(json_t *body, stools_req *r, stools_err *e);
void stools_req_free(stools_req *r);

/* The tool parts of messages[i]: an assistant's tool_calls, a tool result's tool_call_id and
 * name, a system message's tools (declared in place), the name of any other message. */
int stools_parse_message(json_t *m, size_t i, k3_role role, stools_msg *x, stools_err *e);
/* Every tool result answers a call of the nearest assistant message before it; a message's
 * calls have distinct ids, and each is answered exactly once (400s name the missing or
 * duplicate tool_call_ids). */
int stools_check_results(const k3_role *roles, const stools_msg *x, size_t n, stools_err *e);
/* Every call in the history is to a declared tool (the request's tools or a system message's);
 * tool_choice "required" needs some. */
int  stools_check_calls(const stools_req *r, const stools_msg *x, size_t n, stools_err *e);
void stools_msg_free(stools_msg *x);
/* A conversation message equals a request message's tool parts (calls: id, name, arguments). */
int stools_msg_same(const k3_msg *m, const stools_msg *x);

/* K3_SERVE_SCRIPT=FILE (tests): turns of model output in the chat format's notation
 * (<|open|> etc. are the control ids), separated by lines "---", used in order, the last
 * repeating. stools_script_next returns the next turn's ids (0 when no script is set). */
int stools_script_load(const char *path, const k3_model *m, stools_err *e);
int stools_script_next(k3_conv *c);
