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
#define SERVE_MAX_N 16     /* n: choices per request (a job each)            */
#define SERVE_MAX_TOKENS ((int)k3_setting(K3_SETTING_MAX_TOKENS)->hi) /* the context ends a turn first */

typedef stools_err perr; /* a 400's message and code (serve-tools.h) */

/* A body jansson refused, in the server's words: "invalid JSON at line L column C: what" (a
 * NUL named as such, not by jansson's flag). */
void sreq_json_err(const json_error_t *je, char *m, size_t n);

/* Integers past int64 in body b[0..n) (jansson refuses them): 0 and *out NULL when there are
 * none; 0 and *out a copy (malloc'd, *out_n bytes) where those inside a JSON Schema are written
 * as reals (ajv reads them as doubles); -1 with a 400's message in err for one anywhere else,
 * naming its field and the limit. */
int sreq_big_ints(const char *b, size_t n, char **out, size_t *out_n, char *err, size_t errn);

/* ---- a parsed request ----------------------------------------------------------- */

typedef struct smsg {
    k3_role role;
    char   *content;   /* never NULL           */
    char   *reasoning; /* NULL when none given */
    size_t *parts;     /* (n_parts) content's text parts' byte lengths; NULL: a string */
    int     n_parts;
} smsg;

/* A request's stop strings, matched as the answer grows (Knuth-Morris-Pratt): each new byte
 * costs O(1) amortized per string, whatever the strings' length or how much text is held back
 * (a byte-by-byte re-scan of the held tail cost its length times the strings' per token, on the
 * engine thread that every client shares). */
typedef struct sstop {
    char     *s[SERVE_MAX_STOPS];    /* (n) the strings, non-empty                         */
    size_t    len[SERVE_MAX_STOPS];  /* their byte lengths                                 */
    uint32_t *fail[SERVE_MAX_STOPS]; /* (len) KMP failure function: fail[i] = the longest
                                      * proper prefix of s[0..i] that also ends it         */
    int n;
} sstop;

/* Adds the string p[0..n) (n >= 1) to st. 0, or -1 when out of memory. */
int sstop_add(sstop *st, const char *p, size_t n);

/* Feeds the text's next bytes p[0..n), which start at byte `at` of the text; q[k] (one per
 * string, 0 before the first byte) is how much of string k the text fed so far ends with: the
 * state of one answer's match (a request's choices share st, each with its own q). Returns the text
 * offset where the earliest stop string that ends in them starts, or SIZE_MAX when none does;
 * *hold gets the length of the longest end of the text that is a stop string's beginning. */
size_t sstop_feed(const sstop *st, size_t *q, const char *p, size_t n, size_t at, size_t *hold);

typedef struct sreq {
    smsg          *msgs; /* (n_msgs) */
    int            n_msgs;
    int            stream, include_usage;
    int            think;        /* 1 on, 0 off */
    char           effort[8];    /* low | high | max */
    int            max_tokens;   /* 0 = up to the context */
    int            think_budget; /* thinking_budget: reasoning tokens, 0 = no limit */
    float          temp, top_p;
    float          min_p;  /* min_p (vLLM's): 0 = off                     */
    int            top_k;  /* top_k (vLLM's): 0 = off (-1 is read as 0)    */
    uint64_t       seed;   /* choice i samples with seed + i (vLLM's), given or not */
    int            seeded; /* seed was given */
    int            n;      /* n: choices, 1..SERVE_MAX_N */
    float          presence_penalty, frequency_penalty; /* OpenAI's, -2..2 */
    float          repetition_penalty;                  /* vLLM's, 0.01..2 (1: off) */
    k3_logit_bias *bias;                                /* (n_bias) logit_bias, ids in the vocabulary */
    int            n_bias;
    int            logprobs, top_logprobs; /* logprobs: true; top_logprobs 0..20 */
    sstop          stop;
    stools_req     tl;  /* tools, tool_choice (serve-tools.c)        */
    sformat_req    fmt; /* response_format, the answer's grammar (serve-format.c) */
    stools_msg    *tx;  /* (n_msgs) each message's tool calls / result ids */
} sreq;

/* The request in body b (a JSON object; nth, a number no other request has, goes into the default
 * seed; info gives the model's sampling defaults; meter: its grammar's compile meter, NULL for
 * none). 0, or -1 with e filled (r then holds what was read: sreq_free). */
int  sreq_parse(json_t *b, unsigned nth, const k3_model_info *info, k3_gmeter *meter, sreq *r, perr *e);
void sreq_free(sreq *r);
