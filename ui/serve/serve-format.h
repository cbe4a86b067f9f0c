/* serve-format.h: response_format for `--serve` (serve-format.c): json_object and json_schema
 * (k3-tools.md 1.7), rendered by the chat encoder and enforced by the grammar engine's token
 * masks. serve.c calls these small functions. */
#pragma once
#include "k3.h"
#include "serve-tools.h" /* stools_err: a 400's message and code */

#include <jansson.h>

typedef struct sformat_req {
    char        type[16]; /* "" (text or absent), "json_object", "json_schema"        */
    char       *schema;   /* json_schema: the schema (compact JSON text), else NULL   */
    int         strict;   /* json_schema.strict (the grammar applies either way)       */
    k3_grammar *g;        /* the answer's grammar, NULL for text                        */
    int         own;      /* 1: g is this request's (a json_schema), 0: shared          */
} sformat_req;

/* Once the model is loaded: the vocabulary masks are built over (its tokenizer, borrowed while
 * the model lives: sformat_done comes before k3_model_free). */
k3_status sformat_init(const k3_model *m, const k3_model_info *info);
void      sformat_done(void);
/* response_format of body: 400 (e filled, -1) for a malformed one, an unsupported schema
 * keyword (named with its path) or a schema no document satisfies; meter: the compile's (NULL:
 * none; when it refused, e holds the compile's words and the caller, whose limit it was, says
 * which limit). */
int  sformat_parse(json_t *body, k3_gmeter *meter, sformat_req *r, stools_err *e);
void sformat_free(sformat_req *r);
/* tool_choice required or named, or parallel_tool_calls false, with tools: the tool-call
 * grammar into r (-1 with e filled: with a response_format, or arguments it cannot type). */
int sformat_tools(const stools_req *tl, k3_gmeter *meter, sformat_req *r, stools_err *e);
