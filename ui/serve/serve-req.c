/* serve-req.c: a chat-completion request body read into an sreq (serve-req.h).
 *
 * DESIGN
 * jansson parses the body (duplicate keys refused by the caller); each field is read once with
 * its type and range checked, and anything wrong is a 400 whose message names the field
 * (messages[2].content[0].type, stop[3], ...) and echoes the client's text only through
 * serve_bad, which cleans it. Fields the server does not implement are refused by name unless
 * they ask for what it does anyway. Tool fields are serve-tools.c's.
 */
#include "serve-req.h"
#include "serve.h"
#include "text.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void sreq_free(sreq *r) {
    for (int i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].content);
        free(r->msgs[i].reasoning);
        free(r->msgs[i].parts);
        if (r->tx)
            stools_msg_free(&r->tx[i]);
    }
    free(r->msgs);
    free(r->tx);
    free(r->bias);
    stools_req_free(&r->tl);
    sformat_free(&r->fmt);
    for (int i = 0; i < r->stop.n; i++) {
        free(r->stop.s[i]);
        free(r->stop.fail[i]);
    }
    memset(r, 0, sizeof *r);
}

/* ---- stop strings ------------------------------------------------------------------------ */

int sstop_add(sstop *st, const char *p, size_t n) {
    int k = st->n;
    if (!(st->s[k] = strndup(p, n)) || !(st->fail[k] = malloc(n * sizeof *st->fail[k]))) {
        free(st->s[k]);
        st->s[k] = NULL;
        return -1;
    }
    const char *s = st->s[k];
    uint32_t   *f = st->fail[k];
    f[0]          = 0;
    for (size_t i = 1, q = 0; i < n; i++) {
        while (q && s[i] != s[q])
            q = f[q - 1];
        q += s[i] == s[q];
        f[i] = (uint32_t)q;
    }
    st->len[k] = n;
    st->n++;
    return 0;
}

size_t sstop_feed(const sstop *st, size_t *qs, const char *p, size_t n, size_t at, size_t *hold) {
    size_t first = SIZE_MAX;
    *hold        = 0;
    for (int k = 0; k < st->n; k++) {
        const char     *s = st->s[k];
        const uint32_t *f = st->fail[k];
        size_t          q = qs[k], len = st->len[k];
        for (size_t i = 0; i < n; i++) {
            while (q && p[i] != s[q])
                q = f[q - 1];
            q += p[i] == s[q];
            if (q == len) { /* s ends at byte i: it started len - 1 bytes before */
                if (at + i + 1 - len < first)
                    first = at + i + 1 - len;
                q = f[len - 1];
            }
        }
        qs[k] = q;
        *hold = q > *hold ? q : *hold;
    }
    return first;
}

/* ---- request parsing ------------------------------------------------------------------- */

#define bad serve_bad

/* Message content (or a reasoning field): k3_content_parse, the transcripts' reader; its error
 * under the field's name (messages[2].content[1].type ...). parts, when not NULL, gets the text
 * parts' byte lengths (the release's encoder writes each part as its own segment). */
static int parse_content(json_t *v, int i, const char *field, char **out, size_t **parts, int *n_parts,
                         perr *e) {
    k3_content_err ce;
    if (!k3_content_parse(v, out, parts, n_parts, &ce))
        return 0;
    if (ce.fault == K3_CONTENT_NOMEM)
        return bad(e, "out_of_memory", "out of memory");
    bad(e, ce.fault == K3_CONTENT_MEDIA ? "unsupported_content" : "invalid_type", "messages[%d].%s%s %s", i,
        field, ce.path, ce.reason);
    /* the message begins with the field but reads on ("... is of type"): name it (it was null) */
    snprintf(e->param, sizeof e->param, "messages[%d].%s%s", i, field, ce.path);
    return -1;
}

/* An assistant message's refusal (OpenAI's: what the assistant said instead of an answer) is
 * part of what it said, so it is rendered as the answer's text, a part after its content (it
 * was dropped: the model saw an empty turn where OpenAI's sees the refusal). */
static int add_refusal(json_t *m, size_t i, smsg *d, perr *e) {
    json_t *v = json_object_get(m, "refusal");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return bad(e, "invalid_type", "messages[%zu].refusal: expected a string or null", i);
    size_t n = json_string_length(v), c = strlen(d->content);
    if (!n)
        return 0;
    if (!c) { /* empty parts: the refusal is all the text */
        free(d->parts);
        d->parts   = NULL;
        d->n_parts = 0;
    }
    size_t  k     = d->n_parts ? (size_t)d->n_parts : 1;
    char   *s     = realloc(d->content, c + n + 1);
    size_t *parts = c ? realloc(d->parts, (k + 1) * sizeof *parts) : d->parts;
    if (s)
        d->content = s;
    if (c && parts)
        d->parts = parts;
    if (!s || (c && !parts))
        return bad(e, "out_of_memory", "out of memory");
    memcpy(s + c, json_string_value(v), n);
    s[c + n] = 0;
    if (c) { /* a string content becomes one part, then the refusal is the next */
        if (!d->n_parts)
            parts[0] = c;
        parts[k]   = n;
        d->n_parts = (int)k + 1;
    }
    return 0;
}

static int parse_messages(json_t *msgs, sreq *r, perr *e) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return bad(e, msgs ? "invalid_type" : "missing_field",
                   "messages: expected a non-empty array of messages");
    size_t n = json_array_size(msgs);
    r->msgs  = calloc(n, sizeof *r->msgs);
    r->tx    = calloc(n, sizeof *r->tx);
    if (!r->msgs || !r->tx)
        return bad(e, "out_of_memory", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t     *m    = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        smsg       *d    = &r->msgs[i];
        if (!json_is_object(m))
            return bad(e, "invalid_type", "messages[%zu]: expected an object", i);
        if (!role)
            return bad(e, "invalid_type", "messages[%zu].role: expected a string", i);
        if (!strcmp(role, "system") || !strcmp(role, "developer"))
            d->role = K3_ROLE_SYSTEM;
        else if (!strcmp(role, "user"))
            d->role = K3_ROLE_USER;
        else if (!strcmp(role, "assistant"))
            d->role = K3_ROLE_ASSISTANT;
        else if (!strcmp(role, "tool"))
            d->role = K3_ROLE_TOOL;
        else
            return bad(e, "unsupported_role",
                       "messages[%zu].role: '%s' is not supported (system, developer, user, assistant, tool)",
                       i, role);
        r->n_msgs   = (int)i + 1;
        json_t *cnt = json_object_get(m, "content");
        /* an answer, or a tool result (k3-tools.md 1.4: null writes nothing), may lack it */
        if ((!cnt || json_is_null(cnt)) && d->role != K3_ROLE_ASSISTANT && d->role != K3_ROLE_TOOL)
            return bad(
                e, cnt ? "invalid_type" : "missing_field",
                "messages[%zu].content: a %s message needs its content (a string or an array of text parts)",
                i, role);
        if (parse_content(cnt, (int)i, "content", &d->content, &d->parts, &d->n_parts, e) ||
            (d->role == K3_ROLE_ASSISTANT && add_refusal(m, i, d, e)))
            return -1;
        if (stools_parse_message(m, i, d->role, &r->tx[i], e))
            return -1;
        /* the first of these that is not empty (the release: reasoning_content or reasoning) */
        static const char *rk[] = {"reasoning_content", "reasoning", "thinking"};
        for (int k = 0; k < 3 && d->role == K3_ROLE_ASSISTANT && !d->reasoning; k++) {
            json_t *v = json_object_get(m, rk[k]);
            if (v && !json_is_null(v) && parse_content(v, (int)i, rk[k], &d->reasoning, NULL, NULL, e))
                return -1;
            if (d->reasoning && !d->reasoning[0]) { /* "": the next name may hold it */
                free(d->reasoning);
                d->reasoning = NULL;
            }
        }
    }
    if (r->msgs[n - 1].role != K3_ROLE_USER && r->msgs[n - 1].role != K3_ROLE_TOOL)
        return bad(e, "invalid_value",
                   "messages: the last message must be the user's or a tool result (got %s)",
                   r->msgs[n - 1].role == K3_ROLE_SYSTEM ? "system" : "assistant");
    k3_role *roles = calloc(n, sizeof *roles);
    if (!roles)
        return bad(e, "out_of_memory", "out of memory");
    for (size_t i = 0; i < n; i++)
        roles[i] = r->msgs[i].role;
    int rc = stools_check_results(roles, r->tx, n, e);
    free(roles);
    return rc;
}

/* A boolean field (absent: keeps *out). */
static int get_bool(json_t *o, const char *key, const char *path, int *out, perr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bad(e, "invalid_type", "%s: expected true or false", path);
    *out = json_is_true(v);
    return 0;
}

/* A number field of the settings table (temperature, top_p): its row's range and message. */
static int get_num(json_t *o, enum k3_setting_id id, float *out, perr *e) {
    const char *key = k3_setting(id)->api;
    json_t     *v   = json_object_get(o, key);
    char        err[256];
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return bad(e, "invalid_type", "%s: expected a number", key);
    if (k3_setting_check(id, K3_SRC_API, json_number_value(v), err, sizeof err))
        return bad(e, "invalid_value", "%s", err);
    *out = (float)json_number_value(v);
    return 0;
}

/* The sampler's top_k and min_p, which vLLM takes beside OpenAI's fields (clients send them as
 * extra body fields): top_k an integer, -1 or 0 for no limit; min_p a number in 0..1. */
static int parse_vllm_sampling(json_t *b, sreq *r, perr *e) {
    json_t *v;
    if ((v = json_object_get(b, "top_k")) && !json_is_null(v)) {
        json_int_t k = json_integer_value(v);
        if (!json_is_integer(v) || k < -1 || k > INT32_MAX)
            return bad(e, json_is_integer(v) ? "invalid_value" : "invalid_type",
                       "top_k: expected an integer from 1 to %d, or -1 or 0 for no limit", INT32_MAX);
        r->top_k = k < 0 ? 0 : (int)k;
    }
    if ((v = json_object_get(b, "min_p")) && !json_is_null(v)) {
        double x = json_number_value(v);
        if (!json_is_number(v) || !(x >= 0 && x <= 1))
            return bad(e, json_is_number(v) ? "invalid_value" : "invalid_type",
                       "min_p: expected a number from 0 to 1 (0: off)");
        r->min_p = (float)x;
    }
    return 0;
}

/* OpenAI's penalties and vLLM's repetition_penalty (the settings table's rows), logit_bias and
 * logprobs. */
#define SERVE_MAX_BIAS 300 /* logit_bias entries, OpenAI's limit */
static int parse_penalties_bias(json_t *b, const k3_model_info *info, sreq *r, perr *e) {
    json_t *v;
    r->repetition_penalty = 1;
    if (get_num(b, K3_SETTING_PRESENCE_PENALTY, &r->presence_penalty, e) ||
        get_num(b, K3_SETTING_FREQUENCY_PENALTY, &r->frequency_penalty, e) ||
        get_num(b, K3_SETTING_REPETITION_PENALTY, &r->repetition_penalty, e))
        return -1;
    if ((v = json_object_get(b, "logprobs")) && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return bad(e, "invalid_type", "logprobs: expected true or false");
        r->logprobs = json_is_true(v);
    }
    if ((v = json_object_get(b, "top_logprobs")) && !json_is_null(v)) {
        char err[256];
        if (!json_is_integer(v))
            return bad(e, "invalid_type", "top_logprobs: expected an integer");
        if (k3_setting_check(K3_SETTING_TOP_LOGPROBS, K3_SRC_API, (double)json_integer_value(v), err,
                             sizeof err))
            return bad(e, "invalid_value", "%s", err);
        r->top_logprobs = (int)json_integer_value(v);
        if (r->top_logprobs && !r->logprobs) /* OpenAI: "logprobs must be set to true" */
            return bad(e, "invalid_value", "top_logprobs: needs \"logprobs\": true");
    }
    if (!(v = json_object_get(b, "logit_bias")) || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return bad(e, "invalid_type", "logit_bias: expected an object of token ids (strings) to numbers");
    if (json_object_size(v) > SERVE_MAX_BIAS)
        return bad(e, "invalid_value", "logit_bias: %zu entries (at most %d)", json_object_size(v),
                   SERVE_MAX_BIAS);
    if (json_object_size(v) && !(r->bias = calloc(json_object_size(v), sizeof *r->bias)))
        return bad(e, "out_of_memory", "out of memory");
    const char *key;
    json_t     *x;
    json_object_foreach(v, key, x) {
        char *end;
        errno        = 0;
        long long id = strtoll(key, &end, 10);
        if (!key[0] || *end || errno || !(key[0] >= '0' && key[0] <= '9') || (key[0] == '0' && key[1]) ||
            id >= info->vocab)
            return bad(e, "invalid_value",
                       "logit_bias.%.40s: not a token id (expected 0..%d, as a decimal string)", key,
                       info->vocab - 1);
        if (!json_is_number(x) || !(json_number_value(x) >= -100 && json_number_value(x) <= 100))
            return bad(e, json_is_number(x) ? "invalid_value" : "invalid_type",
                       "logit_bias.%s: expected a number from -100 to 100", key);
        r->bias[r->n_bias++] = (k3_logit_bias){(int32_t)id, (float)json_number_value(x)};
    }
    return 0;
}

/* The chat request's top-level fields, one row each: READ, parsed by sreq_parse and the modules
 * it calls; a type (STR, BOOL, OBJ, ARR), OpenAI's fields that change nothing in the answer
 * (bookkeeping, a latency hint, a tier), only checked, with the values allowed where only some
 * are ("a|b"); NO, fields that ask for what this server does not do, refused with the reason. A
 * name not here is refused as OpenAI refuses one (unknown_parameter): a typo, or a field of
 * another server (vLLM's ignore_eos, min_tokens), changed the answer without a word. */
enum { F_READ, F_STR, F_BOOL, F_OBJ, F_ARR, F_NO };
static const struct sreq_field {
    const char *name;
    int         how;
    const char *values; /* F_STR, F_ARR: the values allowed ("a|b"), NULL: any; F_NO: why */
} sreq_fields[] = {
    {"messages", F_READ, NULL},
    {"model", F_READ, NULL},
    {"stream", F_READ, NULL},
    {"stream_options", F_READ, NULL},
    {"temperature", F_READ, NULL},
    {"top_p", F_READ, NULL},
    {"max_tokens", F_READ, NULL},
    {"max_completion_tokens", F_READ, NULL},
    {"seed", F_READ, NULL},
    {"n", F_READ, NULL},
    {"stop", F_READ, NULL},
    {"frequency_penalty", F_READ, NULL},
    {"presence_penalty", F_READ, NULL},
    {"repetition_penalty", F_READ, NULL},
    {"logprobs", F_READ, NULL},
    {"top_logprobs", F_READ, NULL},
    {"logit_bias", F_READ, NULL},
    {"top_k", F_READ, NULL},
    {"min_p", F_READ, NULL},
    {"tools", F_READ, NULL},
    {"tool_choice", F_READ, NULL},
    {"parallel_tool_calls", F_READ, NULL},
    {"response_format", F_READ, NULL},
    {"reasoning_effort", F_READ, NULL},
    {"enable_thinking", F_READ, NULL},
    {"chat_template_kwargs", F_READ, NULL},
    {"thinking_budget", F_READ, NULL},
    {"user", F_STR, NULL},
    {"safety_identifier", F_STR, NULL},
    {"prompt_cache_key", F_STR, NULL},
    {"service_tier", F_STR, "auto|default|flex|scale|priority"},
    {"verbosity", F_STR, "medium"}, /* OpenAI's default; Kimi has no other */
    {"modalities", F_ARR, "text"},
    {"store", F_BOOL, NULL},
    {"metadata", F_OBJ, NULL},
    {"prediction", F_OBJ, NULL}, /* predicted output: it only speeds an answer up */
    {"functions", F_NO, "deprecated by OpenAI and not supported: declare them as tools"},
    {"function_call", F_NO, "deprecated by OpenAI and not supported: use tool_choice"},
    {"audio", F_NO, "audio output is not supported"},
    {"web_search_options", F_NO, "web search is not supported"},
};

/* 1 when s is one of the '|'-separated values. */
static int one_of(const char *values, const char *s) {
    size_t n = strlen(s);
    for (const char *v = values; *v; v += strcspn(v, "|"), v += *v == '|')
        if (strcspn(v, "|") == n && !strncmp(v, s, n))
            return 1;
    return 0;
}

/* Every top-level field of the request is one of sreq_fields, of its type and values (null is
 * absent, as everywhere). */
static int parse_fields(json_t *b, perr *e) {
    const char *key;
    json_t     *v;
    json_object_foreach(b, key, v) {
        const struct sreq_field *f = NULL;
        for (size_t k = 0; k < sizeof sreq_fields / sizeof *sreq_fields && !f; k++)
            if (!strcmp(key, sreq_fields[k].name))
                f = &sreq_fields[k];
        if (!f)
            return bad(e, "unknown_parameter",
                       "%.60s: unknown parameter (k3chat(1) lists those the server takes)", key);
        if (f->how == F_READ || json_is_null(v))
            continue;
        if (f->how == F_NO)
            return bad(e, "unsupported_parameter", "%s: %s", key, f->values);
        static const char *type[] = {"", "a string", "true or false", "an object", "an array of strings"};
        int                fit    = f->how == F_STR    ? json_is_string(v)
                                    : f->how == F_BOOL ? json_is_boolean(v)
                                    : f->how == F_OBJ  ? json_is_object(v)
                                                       : json_is_array(v);
        if (!fit)
            return bad(e, "invalid_type", "%s: expected %s", key, type[f->how]);
        for (size_t k = 0; f->how == F_ARR && k < json_array_size(v); k++) {
            const char *s = json_string_value(json_array_get(v, k));
            if (!s)
                return bad(e, "invalid_type", "%s[%zu]: expected a string", key, k);
            if (f->values && !one_of(f->values, s))
                return bad(e, "unsupported_value", "%s[%zu]: '%.40s' is not supported (only %s)", key, k, s,
                           f->values);
        }
        if (f->how == F_STR && f->values && !one_of(f->values, json_string_value(v)))
            return bad(e, strchr(f->values, '|') ? "invalid_value" : "unsupported_value",
                       "%s: '%.40s' is not %s %s", key, json_string_value(v),
                       strchr(f->values, '|') ? "one of" : "supported: only", f->values);
    }
    return 0;
}

int sreq_parse(json_t *b, unsigned nth, const k3_model_info *info, k3_gmeter *meter, sreq *r, perr *e) {
    if (!json_is_object(b))
        return bad(e, "invalid_type", "the body must be a JSON object");
    if (parse_fields(b, e))
        return -1;
    r->think = 1;
    snprintf(r->effort, sizeof r->effort, "%s",
             k3_setting_choice(K3_SETTING_EFFORT, (int)k3_setting(K3_SETTING_EFFORT)->def));
    r->temp  = info->gen_temp;
    r->top_p = info->gen_top_p;
    r->seed  = (uint64_t)time(NULL) ^ ((uint64_t)nth << 32); /* a fresh seed per request */
    json_t *v;
    if ((v = json_object_get(b, "model")) && !json_is_string(v) && !json_is_null(v))
        return bad(e, "invalid_type", "model: expected a string");
    json_t *msgs = json_object_get(b, "messages");
    if (info->max_ctx > 0 && json_is_array(msgs) && json_array_size(msgs) > (size_t)info->max_ctx)
        return bad(e, "context_length_exceeded",
                   "messages: %zu messages cannot fit the context of %d tokens (each takes at least one)",
                   json_array_size(msgs), info->max_ctx); /* before the engine thread renders them */
    if (parse_messages(msgs, r, e) || get_bool(b, "stream", "stream", &r->stream, e) ||
        get_num(b, K3_SETTING_TEMP, &r->temp, e) || get_num(b, K3_SETTING_TOP_P, &r->top_p, e))
        return -1;
    if ((v = json_object_get(b, "stream_options")) && !json_is_null(v)) {
        if (!json_is_object(v))
            return bad(e, "invalid_type", "stream_options: expected an object");
        if (!r->stream) /* OpenAI and vLLM refuse it too (a client that meant to stream) */
            return bad(e, "invalid_value", "stream_options: only allowed with \"stream\": true");
        if (get_bool(v, "include_usage", "stream_options.include_usage", &r->include_usage, e))
            return -1;
        int         obf = 0; /* OpenAI's padding of stream chunks: none is sent, whatever it asks */
        const char *key;
        json_t     *x;
        if (get_bool(v, "include_obfuscation", "stream_options.include_obfuscation", &obf, e))
            return -1;
        json_object_foreach(v, key, x) {
            if (strcmp(key, "include_usage") && strcmp(key, "include_obfuscation"))
                return bad(e, "unknown_parameter",
                           "stream_options.%.60s: unknown parameter (include_usage, include_obfuscation)",
                           key);
        }
    }
    /* max_completion_tokens and its deprecated name max_tokens: each one given is checked; both
     * with one value is that value (vLLM takes max_completion_tokens first), two different
     * values are a 400, as OpenAI answers both at once (invalid_parameter_combination) */
    static const char *mk[]  = {"max_completion_tokens", "max_tokens"};
    int                mt[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        if (!(v = json_object_get(b, mk[k])) || json_is_null(v))
            continue;
        double x = json_number_value(v); /* 100 or 100.0, as n takes 1 or 1.0 */
        if (!json_is_number(v) || x != floor(x) || x < 1 || x > SERVE_MAX_TOKENS)
            return bad(e, json_is_number(v) ? "invalid_value" : "invalid_type",
                       "%s: expected an integer from 1 to %d (a turn also ends at the context's end)", mk[k],
                       SERVE_MAX_TOKENS);
        mt[k] = (int)x;
    }
    if (mt[0] && mt[1] && mt[0] != mt[1])
        return bad(e, "invalid_parameter_combination",
                   "max_completion_tokens (%d) and max_tokens (%d) differ: give one", mt[0], mt[1]);
    r->max_tokens = mt[0] ? mt[0] : mt[1];
    if ((v = json_object_get(b, "seed")) && !json_is_null(v)) {
        char err[256];
        if (!json_is_integer(v))
            return bad(e, "invalid_type", "seed: expected an integer");
        if (json_integer_value(v) < 0 && /* the row's range, as --seed has it (-1 was taken as 2^64 - 1) */
            k3_setting_check(K3_SETTING_SEED, K3_SRC_API, (double)json_integer_value(v), err, sizeof err))
            return bad(e, "invalid_value", "%s", err);
        r->seed   = (uint64_t)json_integer_value(v);
        r->seeded = 1;
    }
    r->n = 1;
    if ((v = json_object_get(b, "n")) && !json_is_null(v)) {
        double x = json_number_value(v); /* 2 or 2.0, as max_tokens */
        if (!json_is_number(v) || x != floor(x) || x < 1 || x > SERVE_MAX_N)
            return bad(e, json_is_number(v) ? "invalid_value" : "invalid_type",
                       "n: expected an integer from 1 to %d (choices of one request)", SERVE_MAX_N);
        r->n = (int)x;
    }
    if (parse_vllm_sampling(b, r, e) || parse_penalties_bias(b, info, r, e) ||
        stools_parse_request(b, &r->tl, e) || stools_check_calls(&r->tl, r->tx, (size_t)r->n_msgs, e) ||
        sformat_parse(b, meter, &r->fmt, e) || sformat_tools(&r->tl, meter, &r->fmt, e))
        return -1;
    if ((v = json_object_get(b, "stop")) && !json_is_null(v)) {
        json_t *one[1] = {v};
        size_t  n      = json_is_array(v) ? json_array_size(v) : 1;
        if (!json_is_string(v) && !json_is_array(v))
            return bad(e, "invalid_type", "stop: expected a string or an array of strings");
        if (n > SERVE_MAX_STOPS)
            return bad(e, "invalid_value", "stop: at most %d strings", SERVE_MAX_STOPS);
        for (size_t k = 0; k < n; k++) {
            json_t *s = json_is_array(v) ? json_array_get(v, k) : one[0];
            if (!json_is_string(s))
                return bad(e, "invalid_type", "stop[%zu]: expected a string", k);
            if (json_string_length(s) && sstop_add(&r->stop, json_string_value(s), json_string_length(s)))
                return bad(e, "out_of_memory", "out of memory");
        }
    }
    /* thinking: chat_template_kwargs.thinking / enable_thinking, or top-level enable_thinking;
     * reasoning_effort low|high|max ("none": thinking off); chat_template_kwargs.thinking_effort,
     * the release encoder's own name, comes before reasoning_effort (as in its encoder) */
    const char *kw_effort = NULL;
    if (get_bool(b, "enable_thinking", "enable_thinking", &r->think, e))
        return -1;
    if ((v = json_object_get(b, "chat_template_kwargs")) && !json_is_null(v)) {
        if (!json_is_object(v))
            return bad(e, "invalid_type", "chat_template_kwargs: expected an object");
        if (get_bool(v, "enable_thinking", "chat_template_kwargs.enable_thinking", &r->think, e) ||
            get_bool(v, "thinking", "chat_template_kwargs.thinking", &r->think, e))
            return -1;
        json_t *te = json_object_get(v, "thinking_effort");
        if (te && !json_is_null(te) && !(kw_effort = json_string_value(te)))
            return bad(e, "invalid_type", "chat_template_kwargs.thinking_effort: expected a string");
    }
    if ((v = json_object_get(b, "thinking_budget")) && !json_is_null(v)) {
        double hi = k3_setting(K3_SETTING_THINK_BUDGET)->hi;
        if (!json_is_integer(v) || json_integer_value(v) < 0 || (double)json_integer_value(v) > hi)
            return bad(e, "invalid_value", "thinking_budget: expected an integer in 0..%.0f", hi);
        r->think_budget = (int)json_integer_value(v);
    }
    if ((v = json_object_get(b, "reasoning_effort")) && !json_is_null(v)) {
        const char *s = json_string_value(v);
        if (!s)
            return bad(e, "invalid_type", "reasoning_effort: expected a string");
        double eff;
        char   err[256];
        if (!strcmp(s, "none"))
            r->think = 0;
        else if (!k3_setting_parse(K3_SETTING_EFFORT, K3_SRC_API, s, &eff, err, sizeof err))
            snprintf(r->effort, sizeof r->effort, "%s", s);
        else
            return bad(e, "invalid_value", "%s", err);
    }
    if (kw_effort) {
        double eff;
        char   err[256];
        if (k3_setting_parse(K3_SETTING_EFFORT, K3_SRC_API, kw_effort, &eff, err, sizeof err)) {
            const char *why = strchr(err, ':'); /* the table's words, under this field's name */
            return bad(e, "invalid_value", "chat_template_kwargs.thinking_effort%s", why ? why : err);
        }
        snprintf(r->effort, sizeof r->effort, "%s", kw_effort);
    }
    return 0;
}

void sreq_json_err(const json_error_t *je, char *m, size_t n) {
    snprintf(m, n, "invalid JSON at line %d column %d: %s", je->line, je->column,
             json_error_code(je) == json_error_null_character
                 ? "a \\u0000 (NUL) in a string, which a message cannot hold" /* not jansson's flag name */
                 : je->text);
}

/* ---- integers past 64 bits ------------------------------------------------------------
 * jansson keeps integers as int64 and refuses a body holding a larger one ("too big integer"
 * at a column). Where a client may put one:
 *   - a JSON Schema (response_format, tools, messages[i].tools): a bound or an enum value, which
 *     ajv and JSON.parse read as the nearest double: the literal gets ".0", jansson reads that
 *     double, and the grammar compares it as they do (a maximum of 1e20 bounds nothing written);
 *   - anywhere else: a field that takes integers exactly (seed: 0 .. 2^63 - 1 here) or a value
 *     that would reach the model changed (tool-call arguments sent as an object, not as
 *     OpenAI's string, which is kept byte for byte): a 400 naming the field and the limit.
 * A scan finds them (a body without 19 digits in a row has none: that is the only pass most
 * bodies get). */

#define BIG_DEPTH 8 /* path levels kept for the name (deeper ones print as ...) */

typedef struct big_lvl {
    int         obj;   /* 1: an object (key is its current member's), 0: an array */
    size_t      index; /* the array's current item                                 */
    const char *key;   /* the member's name as written (escapes kept)              */
    size_t      klen;
} big_lvl;

static int big_literal(const char *p, size_t n, int neg) { /* the digits p[0..n) past int64's */
    if (n != 19)
        return n > 19;
    return memcmp(p, neg ? "9223372036854775808" : "9223372036854775807", 19) > 0;
}

static void big_path(const big_lvl *lv, int depth, char *out, size_t n) {
    size_t k = 0;
    out[0]   = 0;
    for (int d = 0; d < depth && k + 1 < n; d++) {
        int w = d >= BIG_DEPTH ? snprintf(out + k, n - k, "...")
                : lv[d].obj    ? snprintf(out + k, n - k, "%s%.*s", d ? "." : "",
                                          (int)(lv[d].klen > 64 ? 64 : lv[d].klen), lv[d].key)
                               : snprintf(out + k, n - k, "[%zu]", lv[d].index);
        k += w > 0 ? (size_t)w : 0;
        if (d >= BIG_DEPTH)
            break;
    }
}

static int big_in_schema(const big_lvl *lv, int depth) {
    if (depth < 1 || !lv[0].obj)
        return 0;
#define KEY(d, s) (lv[d].obj && lv[d].klen == strlen(s) && !memcmp(lv[d].key, s, lv[d].klen))
    return KEY(0, "response_format") || KEY(0, "tools") ||
           (KEY(0, "messages") && depth >= 3 && KEY(2, "tools"));
#undef KEY
}

int sreq_big_ints(const char *b, size_t n, char **out, size_t *out_n, char *err, size_t errn) {
    size_t run = 0, i, n_big = 0, cap = 0, *at = NULL;
    *out = NULL;
    for (i = 0; i < n && run < 19; i++)
        run = b[i] >= '0' && b[i] <= '9' ? run + 1 : 0;
    if (run < 19)
        return 0;
    big_lvl lv[BIG_DEPTH + 1];
    int     depth = 0, want_key = 0;
    for (i = 0; i < n;) {
        char ch = b[i];
        if (ch == '"') { /* a string: a member's name when one is wanted */
            size_t j = i + 1;
            while (j < n && b[j] != '"')
                j += b[j] == '\\' ? 2 : 1;
            if (want_key && depth > 0) {
                big_lvl *l = &lv[depth - 1 < BIG_DEPTH ? depth - 1 : BIG_DEPTH];
                l->key = b + i + 1, l->klen = (j < n ? j : n) - i - 1;
            }
            want_key = 0;
            i        = j + 1;
        } else if (ch == '{' || ch == '[') {
            big_lvl *l = &lv[depth < BIG_DEPTH ? depth : BIG_DEPTH];
            *l         = (big_lvl){.obj = ch == '{', .key = "", .klen = 0};
            depth++, i++;
            want_key = ch == '{';
        } else if (ch == '}' || ch == ']') {
            depth -= depth > 0;
            i++;
        } else if (ch == ',') {
            if (depth > 0) {
                big_lvl *l = &lv[depth - 1 < BIG_DEPTH ? depth - 1 : BIG_DEPTH];
                l->index++;
                want_key = l->obj;
            }
            i++;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            size_t s = i + (ch == '-'), j = s;
            while (j < n && b[j] >= '0' && b[j] <= '9')
                j++;
            int frac = j < n && (b[j] == '.' || b[j] == 'e' || b[j] == 'E');
            if (!frac && j > s && big_literal(b + s, j - s, ch == '-')) {
                char path[300];
                big_path(lv, depth, path, sizeof path);
                if (!big_in_schema(lv, depth)) {
                    free(at);
                    snprintf(err, errn,
                             "%s: the integer %.*s%s is past the 64-bit integers this server reads "
                             "(-9223372036854775808 .. 9223372036854775807)%s",
                             path[0] ? path : "(the body)", (int)(j - i > 40 ? 40 : j - i), b + i,
                             j - i > 40 ? "..." : "",
                             strstr(path, ".arguments")
                                 ? "; send the arguments as a JSON string, kept as written"
                                 : "");
                    return -1;
                }
                size_t *a = k3_grow_z(at, &cap, n_big + 1, sizeof *a, 8);
                if (!a) {
                    free(at);
                    snprintf(err, errn, "out of memory");
                    return -1;
                }
                at          = a;
                at[n_big++] = j;
            }
            i = j;
            while (i < n && (b[i] == '.' || b[i] == 'e' || b[i] == 'E' || b[i] == '+' || b[i] == '-' ||
                             (b[i] >= '0' && b[i] <= '9')))
                i++;
        } else
            i++;
    }
    if (!n_big)
        return free(at), 0;
    char *o = malloc(n + 2 * n_big + 1);
    if (!o) {
        free(at);
        snprintf(err, errn, "out of memory");
        return -1;
    }
    size_t k = 0, from = 0;
    for (size_t x = 0; x < n_big; x++) { /* each literal, then ".0" */
        memcpy(o + k, b + from, at[x] - from);
        k += at[x] - from;
        memcpy(o + k, ".0", 2);
        k += 2;
        from = at[x];
    }
    memcpy(o + k, b + from, n - from);
    k += n - from;
    o[k]   = 0;
    *out   = o;
    *out_n = k;
    free(at);
    return 0;
}

/* A request body through the same parser the server uses (for the fuzz target and tests):
 * 0 when it would be served, -1 with the 4xx message in err. */
int serve_check_body(const char *body, size_t n, char *err, size_t errn) {
    json_error_t je;
    char        *big = NULL;
    size_t       big_n;
    if (sreq_big_ints(body, n, &big, &big_n, err, errn))
        return -1;
    json_t *b = json_loadb(big ? big : body, big ? big_n : n, JSON_REJECT_DUPLICATES, &je);
    free(big);
    if (!b) {
        sreq_json_err(&je, err, errn);
        return -1;
    }
    sreq r;
    perr e;
    memset(&r, 0, sizeof r);
    memset(&e, 0, sizeof e);
    k3_model_info info;
    memset(&info, 0, sizeof info);
    int rc = sreq_parse(b, 1, &info, NULL, &r, &e);
    if (rc)
        snprintf(err, errn, "%s", e.msg);
    sreq_free(&r);
    json_decref(b);
    return rc ? -1 : 0;
}
