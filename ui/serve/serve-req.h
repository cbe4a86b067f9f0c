/* serve-req.h: a chat-completion request body read into a request (serve-req.c): the
 * messages, sampling, stop strings, thinking and tool fields, each checked, with a 400 naming
 * the field for anything wrong. serve.c keeps HTTP, the jobs and the engine thread. */
#pragma once
#include "k3.h"
#include "serve-format.h"
#include "serve-tools.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define SERVE_MAX_STOPS 16 /* stop strings per request                       */
#define SERVE_MAX_TOKENS ((int)k3_setting(K3_SETTING_MAX_TOKENS)->hi) /* the context ends a turn first */

typedef stools_err perr; /* a 400's message and code (serve-tools.h) */

/* A body jansson refused, in the server's words: "invalid JSON at line L column C: what" (a
 * NUL named as such, not by jansson's flag). */
void sreq_json_err(const json_error_t *je, char *m, size_t n);

/* ---- a parsed request ----------------------------------------------------------- */

typedef struct smsg {
    k3_role role;
    char   *content;   /* never NULL           */
    char   *reasoning; /* NULL when none given */
    size_t *parts;     /* (n_parts) content's text parts' byte lengths; NULL: a string */
    int     n_parts;
} smsg;

typedef struct sreq {
    smsg       *msgs; /* (n_msgs) */
    int         n_msgs;
    int         stream, include_usage;
    int         think;        /* 1 on, 0 off */
    char        effort[8];    /* low | high | max */
    int         max_tokens;   /* 0 = up to the context */
    int         think_budget; /* thinking_budget: reasoning tokens, 0 = no limit */
    float       temp, top_p;
    uint64_t    seed;
    char       *stops[SERVE_MAX_STOPS]; /* (n_stops) stop strings, non-empty */
    int         n_stops;
    size_t      max_stop; /* longest stop string in bytes */
    stools_req  tl;       /* tools, tool_choice (serve-tools.c)        */
    sformat_req fmt;      /* response_format, the answer's grammar (serve-format.c) */
    stools_msg *tx;       /* (n_msgs) each message's tool calls / result ids */
} sreq;

/* The request in body b (a JSON object; seq numbers it for the default seed; info gives the
 * model's sampling defaults). 0, or -1 with e filled (r then holds what was read: sreq_free). */
int  sreq_parse(json_t *b, unsigned seq, const k3_model_info *info, sreq *r, perr *e);
void sreq_free(sreq *r);
