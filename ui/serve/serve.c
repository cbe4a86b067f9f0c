/* serve.c: `k3chat MODEL_DIR --serve [ADDR:]PORT`, an OpenAI-compatible HTTP server.
 *
 * DESIGN
 * libmicrohttpd parses HTTP (one thread per connection, internal polling thread); jansson
 * parses and writes every JSON body. Routes: GET /v1/models, GET /v1/models/NAME, GET
 * /health, POST /v1/chat/completions (streaming as server-sent events, or one JSON answer).
 *
 * One model and one engine thread (worker_main) that owns it. A connection thread validates
 * its request, queues a job and waits. The engine thread runs continuous batching over
 * --parallel N slots, each a conversation (k3_conv) with its own session: queued jobs join
 * free slots in arrival order at the next step, every loop is one k3_conv_gen_step_batch over
 * the slots' turns (each decoding turn's next token plus a prompt chunk of the oldest
 * prefilling one, all in one batched engine feed), and a turn that is done leaves at once.
 * A slot's conversation gives the prompt cache: it keeps its messages when they are a prefix
 * of the request's (a client continuing its chat; such a request prefers that slot), so the
 * previous turn's generated ids stay and the session's state is reused; otherwise it replaces
 * them and the turn reuses whatever prefix/snapshot still matches, from one snapshot store
 * shared by the slots (tagged by API key). Beyond the slots, jobs wait in a bounded FIFO.
 *
 * Text flows from the engine thread's k3_conv callbacks into the job (under srv.mu): the reasoning
 * at once, the response through the stop-string filter, which holds back a tail that could
 * still become a stop string and cancels the turn when one appears. A streaming connection
 * sends the job's bytes from a content-reader callback as they come; a plain one waits for
 * the end. Both wait in 100 ms steps and peek at the socket (recv MSG_PEEK: 0 = closed):
 * a client that went away cancels its job (k3_conv_cancel of its slot), queued or running.
 *
 * A client that closed its sending side after the request (half-close) still gets its answer:
 * at EOF an HTTP/1.1 client is sent an interim "100 Continue" now and then, which a client that
 * is really gone answers with a reset (serve-http.c, http_peer_gone).
 *
 * Connections come through serve-http.c (the listening socket, request-head checks, limits);
 * libmicrohttpd gets them with MHD_add_connection and answers one request per connection
 * (Connection: close). Errors are {"error": {"message", "type", "code"}} with 400 (bad JSON,
 * wrong types, over the context, bad framing), 401 (bearer token), 403 (Host), 404, 405 (with
 * Allow), 408, 411, 413 (Content-Length over SERVE_MAX_BODY, from the head), 414, 415, 431,
 * 500, 503 (busy or queue full, with Retry-After; shutting down), 505. Messages that echo the client's text
 * are cut on a character boundary with control characters escaped, and so is every log line.
 * SIGINT/SIGTERM: stop accepting, cancel the running turns (a stream ends with an error event
 * "shutting_down" and [DONE]), answer queued jobs 503 shutting_down, let every response
 * finish (up to SERVE_DRAIN_SECS), exit 0.
 */
#include "loadprog.h"
#include "cli.h"
#include "k3.h"
#include "serve-http.h"
#include "serve-format.h"
#include "serve-tools.h"
#include "text.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SERVE_MAX_BODY (8u << 20)   /* bytes of a request body                        */
#define SERVE_DRAIN_SECS 10         /* at shutdown, for responses to finish           */
#define SERVE_MAX_KEYS 64           /* API keys (one prompt cache owner at a time)    */
#define SERVE_MAX_STOPS 16          /* stop strings per request                       */
#define SERVE_MAX_TOKENS 1000000000 /* max_tokens accepted (the context ends a turn first) */
#define SERVE_MIN_ROOM 8            /* tokens a turn must be able to generate (conv)  */
#define SERVE_MAX_PARALLEL 64       /* --parallel                                      */
#define SERVE_PARALLEL 4            /* its default                                     */
#define SERVE_QUEUE 32              /* jobs waiting for a slot (K3_SERVE_QUEUE)        */
#define SERVE_CHUNK 32              /* prompt ids per prefill step (K3_SERVE_CHUNK; BENCHMARKS.md) */
#define SERVE_QUEUE_SECS 600        /* longest wait for a slot (K3_SERVE_QUEUE_SECS)   */

/* ---- a parsed request ----------------------------------------------------------- */

typedef struct smsg {
    k3_role role;
    char   *content;   /* never NULL           */
    char   *reasoning; /* NULL when none given */
} smsg;

typedef struct sreq {
    smsg       *msgs; /* (n_msgs) */
    int         n_msgs;
    int         stream, include_usage;
    int         think;      /* 1 on, 0 off */
    char        effort[8];  /* low | high | max */
    int         max_tokens; /* 0 = up to the context */
    float       temp, top_p;
    uint64_t    seed;
    char       *stops[SERVE_MAX_STOPS]; /* (n_stops) stop strings, non-empty */
    int         n_stops;
    size_t      max_stop; /* longest stop string in bytes */
    stools_req  tl;       /* tools, tool_choice (serve-tools.c)        */
    sformat_req fmt;      /* response_format (serve-format.c)          */
    stools_msg *tx;       /* (n_msgs) each message's tool calls / result ids */
} sreq;

static void sreq_free(sreq *r) {
    for (int i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].content);
        free(r->msgs[i].reasoning);
        if (r->tx)
            stools_msg_free(&r->tx[i]);
    }
    free(r->msgs);
    free(r->tx);
    stools_req_free(&r->tl);
    sformat_free(&r->fmt);
    for (int i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    memset(r, 0, sizeof *r);
}

/* ---- jobs ------------------------------------------------------------------------- */

enum { J_QUEUED = 0, J_RUNNING, J_DONE };

typedef struct job {
    sreq        r;
    int         state;   /* J_*; all fields below are guarded by srv.mu */
    int         refs;    /* connection + worker (+ streaming response)  */
    int         gone;    /* the client disconnected                     */
    int         fd;      /* the connection's socket                     */
    int         v11;     /* HTTP/1.1: an interim 100 may probe the peer  */
    int         key;     /* index of the request's API key (cache owner) */
    int         started; /* the response has begun (no more probes)     */
    int         queued;  /* waiting in the FIFO for a slot              */
    double      t_probe; /* monotonic seconds of the last probe         */
    unsigned    seq;     /* request number (logs)                       */
    char        id[48];  /* "chatcmpl-..."                              */
    long long   created; /* unix seconds                                */
    double      t0;      /* monotonic seconds at arrival                */
    txt_buf     sse;     /* stream bytes not yet sent: [sse_off, sse.n)  */
    size_t      sse_off;
    int         role_sent; /* the first chunk (role) is in sse           */
    txt_buf     resp;      /* every response byte generated              */
    size_t      rel;       /* of which released (not held by stop check) */
    txt_buf     reasoning; /* think channel                              */
    int         stopped;   /* a stop string ended the turn               */
    const char *finish;    /* "stop" | "length" when done without error  */
    int         n_prompt, n_cached, n_gen;
    json_t     *calls; /* the answer's tool_calls (NULL: none)       */
    k3_conv    *c;     /* the slot's conversation while it runs      */
    int         http;  /* 0 = success; else the error's HTTP status  */
    char        err_type[32], err_code[40];
    char        err[600];
    struct job *next;
} job;

/* A generation slot: one of --parallel N turns that run together. Its conversation and
 * session are touched only by the engine thread; j is guarded by srv.mu. */
typedef struct slot {
    k3_conv     *c;    /* settings, messages and live prompt cache of its last job */
    k3_session  *s;    /* made on first use                                        */
    k3_conv_gen *g;    /* the running turn (NULL between begin and end)            */
    job         *j;    /* the job it runs, NULL when free                          */
    int          key;  /* API key whose requests its conversation holds, -1 none   */
    uint64_t     used; /* admission clock of its last job                          */
} slot;

static struct server {
    pthread_mutex_t mu;
    pthread_cond_t  work_cv, done_cv; /* done_cv: broadcast on any job progress */
    job            *head, *tail;      /* queue (FIFO)                           */
    int             n_queued, max_queue;
    int             queue_secs; /* longest wait in it (K3_SERVE_QUEUE_SECS) */
    slot           *slots;      /* (n_slots) --parallel                   */
    int             n_slots, n_active;
    int             chunk; /* prompt ids a prefill step feeds         */
    uint64_t        clock; /* admissions                             */
    int             stopping;
    unsigned        seq;
    unsigned long   n_ok, n_err, n_cancel;
    k3_model       *m;
    k3_model_info   info;
    const char     *name;                 /* model id                    */
    char           *keys[SERVE_MAX_KEYS]; /* (n_keys) API keys; none = no authentication */
    int             n_keys;
    long long       t_start;
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void job_unref_locked(job *j) {
    if (--j->refs > 0)
        return;
    sreq_free(&j->r);
    free(j->sse.p);
    free(j->resp.p);
    free(j->reasoning.p);
    json_decref(j->calls);
    free(j);
}

static void job_unref(job *j) {
    pthread_mutex_lock(&srv.mu);
    job_unref_locked(j);
    pthread_mutex_unlock(&srv.mu);
}

/* The client went away: cancel the job (queued: the worker skips it). Lock held. */
static void job_gone_locked(job *j) {
    if (j->gone || j->state == J_DONE)
        return;
    j->gone = 1;
    if (j->c)
        k3_conv_cancel(j->c);
    pthread_cond_broadcast(&srv.done_cv);
}

static void job_fail_locked(job *j, int http, const char *type, const char *code, const char *msg);
static void job_done_locked(job *j);

/* j waited in the FIFO longer than K3_SERVE_QUEUE_SECS: out of it with a 503. Lock held. */
static void job_expire_locked(job *j) {
    job **p = &srv.head, *prev = NULL;
    while (*p && *p != j)
        prev = *p, p = &(*p)->next;
    if (!*p)
        return;
    *p = j->next;
    if (srv.tail == j)
        srv.tail = prev;
    srv.n_queued--;
    j->queued = 0;
    char m[160];
    snprintf(m, sizeof m,
             "the server is busy: no generation slot came free in %d s (K3_SERVE_QUEUE_SECS); retry later",
             srv.queue_secs);
    job_fail_locked(j, 503, "server_error", "queue_timeout", m);
    job_done_locked(j); /* the engine's reference: it never sees the job */
}

/* Wait up to 100 ms for progress on j, then check the client and the queue's time limit. Lock held. */
static void job_wait_step(job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&srv.done_cv, &srv.mu, &ts);
    if (j->queued && now_s() - j->t0 > srv.queue_secs)
        job_expire_locked(j);
    if (j->state != J_DONE && j->fd >= 0 && http_peer_gone(j->fd, j->v11 && !j->started, &j->t_probe))
        job_gone_locked(j);
}

/* ---- stream chunks (worker side, lock held) ---------------------------------------- */

static void sse_json(job *j, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (s) {
        txt_buf_add(&j->sse, "data: ", 6);
        txt_buf_add(&j->sse, s, strlen(s));
        txt_buf_add(&j->sse, "\n\n", 2);
        free(s);
    }
    json_decref(o);
}

static json_t *usage_obj(const job *j) {
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", j->n_prompt, "completion_tokens", j->n_gen,
                     "total_tokens", j->n_prompt + j->n_gen, "prompt_tokens_details", "cached_tokens",
                     j->n_cached);
}

static json_t *chunk(job *j, json_t *delta, const char *finish) {
    json_t *ch = json_pack("{s:i,s:o,s:o}", "index", 0, "delta", delta, "finish_reason",
                           finish ? json_string(finish) : json_null());
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", j->id, "object", "chat.completion.chunk", "created",
                     (json_int_t)j->created, "model", srv.name, "choices", ch);
}

/* A delta of one field ("content" or "reasoning_content"); the first also carries the role. */
static void sse_delta(job *j, const char *field, const char *text, size_t n) {
    if (!j->r.stream || !n)
        return;
    if (!j->role_sent) {
        j->role_sent = 1;
        sse_json(j, chunk(j, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL));
    }
    json_t *d = json_object();
    json_object_set_new(d, field, json_stringn(text, n));
    sse_json(j, chunk(j, d, NULL));
}

/* ---- the worker's callbacks ----------------------------------------------------------- */

static void on_think(const char *text, size_t n, void *ud) {
    job *j = ud;
    pthread_mutex_lock(&srv.mu);
    if (j->gone)
        k3_conv_cancel(j->c);
    txt_buf_add(&j->reasoning, text, n);
    sse_delta(j, "reasoning_content", text, n);
    j->state = J_RUNNING;
    pthread_cond_broadcast(&srv.done_cv);
    pthread_mutex_unlock(&srv.mu);
}

/* Release response bytes up to `to` (content + stream). */
static void release(job *j, size_t to) {
    if (to > j->rel) {
        sse_delta(j, "content", j->resp.p + j->rel, to - j->rel);
        j->rel = to;
    }
}

/* Stop strings: find the first one in the unreleased text; else hold back the longest tail
 * that is a prefix of one. Releases what is certain. Returns 1 when a stop string matched. */
static int stop_filter(job *j, int final) {
    const sreq *r = &j->r;
    size_t      n = j->resp.n, at = n;
    if (!r->n_stops || j->stopped) {
        if (!j->stopped)
            release(j, n);
        return j->stopped;
    }
    for (int k = 0; k < r->n_stops; k++) {
        const char *p = memmem(j->resp.p + j->rel, n - j->rel, r->stops[k], strlen(r->stops[k]));
        if (p && (size_t)(p - j->resp.p) < at)
            at = (size_t)(p - j->resp.p);
    }
    if (at < n) {
        release(j, at);
        j->stopped = 1;
        return 1;
    }
    size_t hold = 0;
    for (size_t k = r->max_stop - 1; !final && k > 0 && !hold; k--) {
        if (k > n - j->rel)
            continue;
        for (int s = 0; s < r->n_stops && !hold; s++)
            if (strlen(r->stops[s]) > k && !memcmp(j->resp.p + n - k, r->stops[s], k))
                hold = k;
    }
    size_t to = n - hold;
    while (to > j->rel && ((unsigned char)j->resp.p[to] & 0xC0) == 0x80 && to < n)
        to--; /* never split a character (stop strings start on one anyway) */
    release(j, to);
    return 0;
}

static void on_response(const char *text, size_t n, void *ud) {
    job *j = ud;
    pthread_mutex_lock(&srv.mu);
    if (j->gone)
        k3_conv_cancel(j->c);
    if (!j->stopped) {
        txt_buf_add(&j->resp, text, n);
        if (stop_filter(j, 0))
            k3_conv_cancel(j->c);
    }
    j->state = J_RUNNING;
    pthread_cond_broadcast(&srv.done_cv);
    pthread_mutex_unlock(&srv.mu);
}

/* A tool call of the reply: stream it as delta.tool_calls (name first, then fragments). */
static void on_tool_call(int index, const char *id, const char *name, const char *args, size_t n, int done,
                         void *ud) {
    job *j = ud;
    (void)done;
    pthread_mutex_lock(&srv.mu);
    if (j->gone)
        k3_conv_cancel(j->c);
    if (j->r.stream && (name || n)) {
        if (!j->role_sent) {
            j->role_sent = 1;
            sse_json(j, chunk(j, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL));
        }
        sse_json(
            j, chunk(j, name ? stools_delta_open(index, id, name) : stools_delta_args(index, args, n), NULL));
    }
    j->state = J_RUNNING;
    pthread_cond_broadcast(&srv.done_cv);
    pthread_mutex_unlock(&srv.mu);
}

/* ---- running a job on the conversation (worker thread) -------------------------------- */

static int str_eq0(const char *a, const char *b) { /* NULL == "" */
    return !strcmp(a ? a : "", b ? b : "");
}

/* The number of c's messages when they are a prefix of r's (a client continuing that
 * chat), else -1. */
static int msgs_kept(const k3_conv *c, const sreq *r) {
    int n = k3_conv_count(c), keep = n <= r->n_msgs;
    for (int i = 0; keep && i < n; i++) {
        const k3_msg *m = k3_conv_msg(c, i);
        keep = m->role == r->msgs[i].role && !m->interrupted && !strcmp(m->content, r->msgs[i].content) &&
               str_eq0(m->reasoning, r->msgs[i].reasoning) && stools_msg_same(m, &r->tx[i]);
    }
    return keep ? n : -1;
}

/* Make the conversation hold r's messages, keeping its own (with their generated ids, so
 * the prompt cache continues) when they are a prefix of r's. */
static k3_status load_messages(k3_conv *c, const sreq *r) {
    int n = msgs_kept(c, r);
    if (n < 0) {
        k3_conv_clear(c);
        k3_conv_set_system(c, NULL);
        n = 0;
    }
    k3_status st = K3_OK;
    for (int i = n; !st && i < r->n_msgs; i++) {
        const stools_msg *x = &r->tx[i];
        k3_msg            m = {.role         = r->msgs[i].role,
                               .content      = r->msgs[i].content,
                               .reasoning    = r->msgs[i].reasoning,
                               .tool_calls   = x->calls,
                               .n_tool_calls = x->n_calls,
                               .tool_call_id = x->tool_call_id,
                               .tool_name    = x->name,
                               .tools        = x->tools};
        st                  = k3_conv_add_msg(c, &m);
    }
    return st;
}

static void job_fail_locked(job *j, int http, const char *type, const char *code, const char *msg) {
    j->http = http;
    snprintf(j->err_type, sizeof j->err_type, "%s", type);
    snprintf(j->err_code, sizeof j->err_code, "%s", code);
    snprintf(j->err, sizeof j->err, "%s", msg);
}

/* ---- the engine thread: continuous batching over the slots ------------------------------
 *
 * Jobs wait in a FIFO (bounded: a full queue answers 503 at once) and join a free slot at the
 * next step. Each loop is one k3_conv_gen_step_batch over the slots' turns: every decoding
 * turn's next token, plus the next prompt chunk (srv.chunk ids) of the oldest turn still
 * prefilling (of every one when none decodes), so a request that arrives while others
 * stream delays them by one chunk per step, never by its whole prompt. A turn that is done
 * (finished, cancelled, disconnected, failed) ends at once and frees its slot. */

/* Sets the slot's conversation up for j and begins its turn (engine thread, lock free). */
static k3_status job_start(slot *sl, job *j) {
    const sreq      *r = &j->r;
    k3_conv_settings set;
    k3_status        st;
    if (!sl->s && (st = k3_session_new(srv.m, &sl->s)))
        return st;
    if (j->key != sl->key) { /* the prompt cache is per API key: nothing crosses */
        k3_conv_clear(sl->c);
        k3_conv_set_cache_owner(sl->c, (uint64_t)(j->key + 1));
        sl->key = j->key;
    }
    k3_conv_get_settings(sl->c, &set);
    set.think = r->think;
    snprintf(set.effort, sizeof set.effort, "%s", r->effort);
    set.max_tokens = r->max_tokens;
    k3_sampler_params_default(srv.m, &set.sampling);
    set.sampling.temp  = r->temp;
    set.sampling.top_p = r->top_p;
    set.sampling.seed  = r->seed;
    snprintf(set.tool_choice, sizeof set.tool_choice, "%s", r->tl.tool_choice);
    k3_conv_set_grammar(sl->c, r->fmt.g);
    if ((st = k3_conv_set_settings(sl->c, &set)) || (st = k3_conv_set_tools(sl->c, r->tl.tools)) ||
        (st = k3_conv_set_response_format(sl->c, r->fmt.type, r->fmt.schema)) ||
        (st = load_messages(sl->c, r)) || (stools_script_next(sl->c) < 0 && (st = K3_ERR_NOMEM)))
        return st == K3_ERR_ARG ? K3_ERR_ARG : K3_ERR_NOMEM;
    k3_conv_set_turn_seed(sl->c, r->seed);
    k3_conv_callbacks cb = {
        .on_think = on_think, .on_response = on_response, .ud = j, .on_tool_call = on_tool_call};
    return k3_conv_gen_begin(sl->c, srv.m, sl->s, &cb, srv.chunk, &sl->g);
}

/* The job's answer from its turn's status st (engine thread, lock free). */
static void job_finish(slot *sl, job *j, k3_status st) {
    const sreq   *r    = &j->r;
    int           n    = k3_conv_count(sl->c);
    const k3_msg *last = n ? k3_conv_msg(sl->c, n - 1) : NULL;
    k3_conv_set_grammar(sl->c, NULL); /* the job's grammar goes with it */
    if (last && (last->role != K3_ROLE_ASSISTANT || !last->has_stats))
        last = NULL; /* the turn did not start */
    pthread_mutex_lock(&srv.mu);
    if (last) {
        j->n_prompt = last->stats.n_prompt;
        j->n_cached = last->stats.n_cached;
        j->n_gen    = last->stats.n_gen;
    }
    if (st == K3_OK || (st == K3_ABORTED && j->stopped)) {
        if (!j->stopped)
            stop_filter(j, 1);
        j->finish = j->stopped || !last || last->stats.stop == K3_STOP_EOS ? "stop" : "length";
        if (!j->stopped && last && last->n_tool_calls > 0 && last->stats.stop == K3_STOP_EOS) {
            j->finish = "tool_calls";
            j->calls  = stools_calls_json(last);
        }
    } else if (st == K3_ABORTED && srv.stopping && !j->gone) {
        job_fail_locked(j, 503, "server_error", "shutting_down", "the server is shutting down");
    } else if (st == K3_ABORTED) {
        job_fail_locked(j, 499, "cancelled", "client_disconnected", "the client disconnected");
    } else if (st == K3_ERR_CONTEXT) {
        char m[600];
        snprintf(m, sizeof m, "%s", k3_errmsg());
        m[strcspn(m, ";")] = 0; /* the conversation's advice is for the chat, not for a client */
        job_fail_locked(j, 400, "invalid_request_error", "context_length_exceeded", m);
    } else if (!last && (st == K3_ERR_ARG || st == K3_ERR_NOMEM)) { /* setting the turn up */
        job_fail_locked(j, st == K3_ERR_ARG ? 400 : 500,
                        st == K3_ERR_ARG ? "invalid_request_error" : "server_error",
                        st == K3_ERR_ARG ? "invalid_value" : "internal_error", k3_errmsg());
    } else {
        job_fail_locked(j, 500, "server_error", "engine_error", k3_errmsg());
    }
    if (j->http && j->http != 499 && j->r.stream && j->role_sent) { /* failed mid-stream */
        sse_json(j, json_pack("{s:{s:s,s:s,s:s}}", "error", "message", j->err, "type", j->err_type, "code",
                              j->err_code));
    } else if (!j->http && j->r.stream) {
        if (!j->role_sent) {
            j->role_sent = 1;
            sse_json(j, chunk(j, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL));
        }
        sse_json(j, chunk(j, json_object(), j->finish));
        if (r->include_usage) {
            json_t *o = chunk(j, json_object(), NULL);
            json_object_set_new(o, "choices", json_array());
            json_object_set_new(o, "usage", usage_obj(j));
            sse_json(j, o);
        }
    }
    if (j->r.stream && (!j->http || j->role_sent))
        txt_buf_add(&j->sse, "data: [DONE]\n\n", 14);
    pthread_mutex_unlock(&srv.mu);
}

static void log_job(const job *j) {
    double dt = now_s() - j->t0;
    if (!j->http)
        serve_log(
            "#%u 200%s: %d prompt (%d cached) + %d completion tokens, %s, %.2f s (%d active, %d queued)",
            j->seq, j->r.stream ? " stream" : "", j->n_prompt, j->n_cached, j->n_gen, j->finish, dt,
            srv.n_active, srv.n_queued);
    else if (j->http == 499)
        serve_log("#%u cancelled: %s after %d tokens, %.2f s (%d active, %d queued)", j->seq, j->err,
                  j->n_gen, dt, srv.n_active, srv.n_queued);
    else
        serve_log("#%u %d: %s (%d active, %d queued)", j->seq, j->http, j->err, srv.n_active, srv.n_queued);
}

/* j is answered: count, log, wake its connection, drop the engine's reference. Lock held. */
static void job_done_locked(job *j) {
    j->state = J_DONE;
    j->c     = NULL;
    if (!j->http)
        srv.n_ok++;
    else if (j->http == 499)
        srv.n_cancel++;
    else
        srv.n_err++;
    log_job(j);
    pthread_cond_broadcast(&srv.done_cv);
    job_unref_locked(j);
}

/* The free slot for j: the one whose conversation j continues furthest (same API key), else
 * the least recently used. NULL when every slot is busy. Lock held. */
static slot *pick_slot(const job *j) {
    slot *best      = NULL;
    int   best_keep = -2;
    for (int i = 0; i < srv.n_slots; i++) {
        slot *sl = &srv.slots[i];
        if (sl->j)
            continue;
        int keep = sl->key == j->key ? msgs_kept(sl->c, &j->r) : -1;
        if (keep > best_keep || (keep == best_keep && sl->used < best->used)) {
            best      = sl;
            best_keep = keep;
        }
    }
    return best;
}

/* The slot's job is over (turn ended or never began): answer it, free the slot. Lock held. */
static void slot_release_locked(slot *sl, k3_status st) {
    job *j = sl->j;
    pthread_mutex_unlock(&srv.mu);
    job_finish(sl, j, st);
    pthread_mutex_lock(&srv.mu);
    sl->j = NULL;
    srv.n_active--;
    job_done_locked(j);
}

/* Moves queued jobs into free slots, in arrival order (all of them answered 503 while
 * stopping). Lock held; released while a turn begins. */
static void admit_locked(void) {
    while (srv.head) {
        job  *j  = srv.head;
        slot *sl = srv.stopping || j->gone ? NULL : pick_slot(j);
        if (!sl && !srv.stopping && !j->gone)
            return; /* every slot busy: j waits at the head of the FIFO */
        srv.head = j->next;
        if (!srv.head)
            srv.tail = NULL;
        srv.n_queued--;
        j->queued = 0;
        if (!sl) {
            if (srv.stopping)
                job_fail_locked(j, 503, "server_error", "shutting_down", "the server is shutting down");
            else
                job_fail_locked(j, 499, "cancelled", "client_disconnected",
                                "the client disconnected while queued");
            job_done_locked(j);
            continue;
        }
        sl->j    = j;
        sl->used = ++srv.clock;
        j->c     = sl->c;
        srv.n_active++;
        serve_log("#%u joins slot %d after %.2f s (%d active, %d queued)", j->seq, (int)(sl - srv.slots) + 1,
                  now_s() - j->t0, srv.n_active, srv.n_queued);
        pthread_mutex_unlock(&srv.mu);
        k3_status st = job_start(sl, j);
        pthread_mutex_lock(&srv.mu);
        if (st)
            slot_release_locked(sl, st);
    }
}

static void *worker_main(void *arg) {
    (void)arg;
    k3_conv_gen *gs[SERVE_MAX_PARALLEL];
    pthread_mutex_lock(&srv.mu);
    for (;;) {
        while (!srv.head && !srv.n_active && !srv.stopping)
            pthread_cond_wait(&srv.work_cv, &srv.mu);
        admit_locked();
        if (!srv.n_active) {
            if (srv.stopping && !srv.head)
                break;
            continue;
        }
        /* this step's turns: every decoding one, and the oldest prefilling one (all when none decodes) */
        int   n = 0, decoding = 0;
        slot *pre = NULL;
        for (int i = 0; i < srv.n_slots; i++) {
            slot *sl = &srv.slots[i];
            if (!sl->j || !sl->g)
                continue;
            if (sl->j->gone || srv.stopping) /* also a cancel that came before the turn began */
                k3_conv_cancel(sl->c);
            if (!k3_conv_gen_prefill_left(sl->g))
                decoding++;
            else if (!pre || sl->used < pre->used)
                pre = sl;
        }
        for (int i = 0; i < srv.n_slots; i++) {
            slot *sl = &srv.slots[i];
            if (sl->j && sl->g && (!k3_conv_gen_prefill_left(sl->g) || !decoding || sl == pre))
                gs[n++] = sl->g;
        }
        pthread_mutex_unlock(&srv.mu);
        k3_status st = k3_conv_gen_step_batch(gs, n);
        if (st) /* a bad list: a bug here, never the client's */
            serve_log("engine: %s", k3_errmsg());
        pthread_mutex_lock(&srv.mu);
        for (int i = 0; i < srv.n_slots; i++) {
            slot *sl = &srv.slots[i];
            if (!sl->j || !sl->g || (!st && !k3_conv_gen_done(sl->g)))
                continue;
            pthread_mutex_unlock(&srv.mu);
            k3_status end = k3_conv_gen_end(sl->g); /* may stream the parser's last text */
            pthread_mutex_lock(&srv.mu);
            sl->g = NULL;
            slot_release_locked(sl, end);
        }
    }
    pthread_mutex_unlock(&srv.mu);
    return NULL;
}

/* ---- request parsing ------------------------------------------------------------------- */

typedef stools_err perr; /* a 400's message and code (serve-tools.h) */
#define bad serve_bad

/* Message content: a string, null, or an array of {"type":"text","text":...} parts. */
static int parse_content(json_t *v, int i, const char *field, char **out, perr *e) {
    if (!v || json_is_null(v)) {
        *out = strdup("");
        return *out ? 0 : bad(e, "out_of_memory", "out of memory");
    }
    if (json_is_string(v)) {
        *out = strndup(json_string_value(v), json_string_length(v));
        return *out ? 0 : bad(e, "out_of_memory", "out of memory");
    }
    if (!json_is_array(v))
        return bad(e, "invalid_type", "messages[%d].%s: expected a string or an array of text parts", i,
                   field);
    txt_buf b = {0};
    size_t  k;
    json_t *part;
    json_array_foreach(v, k, part) {
        json_t     *tv   = json_object_get(part, "type");
        const char *type = json_string_value(tv);
        json_t     *text = json_object_get(part, "text");
        if (!json_is_object(part) || (tv && !type)) {
            free(b.p);
            return bad(e, "invalid_type", "messages[%d].%s[%zu]%s: expected %s", i, field, k,
                       json_is_object(part) ? ".type" : "", json_is_object(part) ? "a string" : "an object");
        }
        if (type && strcmp(type, "text") != 0) {
            free(b.p);
            return bad(e, "unsupported_content",
                       "messages[%d].%s[%zu]: '%s' parts are not supported (text only)", i, field, k, type);
        }
        if (!json_is_string(text)) {
            free(b.p);
            return bad(e, "invalid_type", "messages[%d].%s[%zu].text: expected a string", i, field, k);
        }
        if ((k && txt_buf_add(&b, "\n", 1)) ||
            txt_buf_add(&b, json_string_value(text), json_string_length(text))) {
            free(b.p);
            return bad(e, "out_of_memory", "out of memory");
        }
    }
    *out = b.p ? b.p : strdup("");
    return *out ? 0 : bad(e, "out_of_memory", "out of memory");
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
        if ((!cnt || json_is_null(cnt)) && d->role != K3_ROLE_ASSISTANT) /* only an answer may lack it */
            return bad(
                e, cnt ? "invalid_type" : "missing_field",
                "messages[%zu].content: a %s message needs its content (a string or an array of text parts)",
                i, role);
        if (parse_content(cnt, (int)i, "content", &d->content, e))
            return -1;
        if (stools_parse_message(m, i, d->role, &r->tx[i], e))
            return -1;
        static const char *rk[] = {"reasoning_content", "reasoning", "thinking"};
        for (int k = 0; k < 3 && d->role == K3_ROLE_ASSISTANT && !d->reasoning; k++) {
            json_t *v = json_object_get(m, rk[k]);
            if (v && !json_is_null(v) && parse_content(v, (int)i, rk[k], &d->reasoning, e))
                return -1;
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

static int get_num(json_t *o, const char *key, double lo, double hi, float *out, perr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return bad(e, "invalid_type", "%s: expected a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) {
        char num[40]; /* the shortest text that reads back as x: 2.0000001 is not "2" */
        for (int prec = 6; prec <= 17; prec++)
            if (snprintf(num, sizeof num, "%.*g", prec, x), strtod(num, NULL) == x)
                break;
        return bad(e, "invalid_value", "%s: %s is outside %g..%g", key, num, lo, hi);
    }
    *out = (float)x;
    return 0;
}

/* Fields the server does not implement: refused, with the field named, unless they ask for
 * what it does anyway (penalties 0, no logprobs, no bias). */
static int parse_unsupported(json_t *b, perr *e) {
    json_t            *v;
    static const char *pen[] = {"frequency_penalty", "presence_penalty"};
    for (int k = 0; k < 2; k++) {
        if (!(v = json_object_get(b, pen[k])) || json_is_null(v))
            continue;
        if (!json_is_number(v))
            return bad(e, "invalid_type", "%s: expected a number", pen[k]);
        if (json_number_value(v) != 0)
            return bad(e, "unsupported_value", "%s: not supported (only 0)", pen[k]);
    }
    if ((v = json_object_get(b, "logprobs")) && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return bad(e, "invalid_type", "logprobs: expected true or false");
        if (json_is_true(v))
            return bad(e, "unsupported_value", "logprobs: not supported");
    }
    if ((v = json_object_get(b, "top_logprobs")) && !json_is_null(v)) {
        if (!json_is_integer(v))
            return bad(e, "invalid_type", "top_logprobs: expected an integer");
        if (json_integer_value(v) != 0)
            return bad(e, "unsupported_value", "top_logprobs: not supported");
    }
    if ((v = json_object_get(b, "logit_bias")) && !json_is_null(v)) {
        if (!json_is_object(v))
            return bad(e, "invalid_type", "logit_bias: expected an object");
        if (json_object_size(v))
            return bad(e, "unsupported_value", "logit_bias: not supported");
    }
    return 0;
}

static int parse_request(json_t *b, unsigned seq, sreq *r, perr *e) {
    if (!json_is_object(b))
        return bad(e, "invalid_type", "the body must be a JSON object");
    r->think = 1;
    snprintf(r->effort, sizeof r->effort, "max");
    r->temp  = srv.info.gen_temp;
    r->top_p = srv.info.gen_top_p;
    r->seed  = (uint64_t)time(NULL) ^ ((uint64_t)seq << 32); /* a fresh seed per request */
    json_t *v;
    if ((v = json_object_get(b, "model")) && !json_is_string(v) && !json_is_null(v))
        return bad(e, "invalid_type", "model: expected a string");
    if (parse_messages(json_object_get(b, "messages"), r, e) ||
        get_bool(b, "stream", "stream", &r->stream, e) || get_num(b, "temperature", 0, 2, &r->temp, e) ||
        get_num(b, "top_p", 0, 1, &r->top_p, e))
        return -1;
    if ((v = json_object_get(b, "stream_options")) && !json_is_null(v)) {
        if (!json_is_object(v))
            return bad(e, "invalid_type", "stream_options: expected an object");
        if (get_bool(v, "include_usage", "stream_options.include_usage", &r->include_usage, e))
            return -1;
    }
    static const char *mk[] = {"max_completion_tokens", "max_tokens"};
    for (int k = 0; k < 2 && !r->max_tokens; k++) {
        if (!(v = json_object_get(b, mk[k])) || json_is_null(v))
            continue;
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > SERVE_MAX_TOKENS)
            return bad(e, json_is_integer(v) ? "invalid_value" : "invalid_type",
                       "%s: expected an integer from 1 to %d (a turn also ends at the context's end)", mk[k],
                       SERVE_MAX_TOKENS);
        r->max_tokens = (int)json_integer_value(v);
    }
    if ((v = json_object_get(b, "seed")) && !json_is_null(v)) {
        if (!json_is_integer(v))
            return bad(e, "invalid_type", "seed: expected an integer");
        r->seed = (uint64_t)json_integer_value(v);
    }
    if ((v = json_object_get(b, "n")) && !json_is_null(v) &&
        !(json_is_number(v) && json_number_value(v) == 1))
        return bad(e, json_is_number(v) ? "unsupported_value" : "invalid_type",
                   "n: only 1 choice per request is supported");
    if (parse_unsupported(b, e) || stools_parse_request(b, &r->tl, e) || sformat_parse(b, &r->fmt, e) ||
        sformat_tools(&r->tl, &r->fmt, e))
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
            if (!json_string_length(s))
                continue;
            if (!(r->stops[r->n_stops] = strndup(json_string_value(s), json_string_length(s))))
                return bad(e, "out_of_memory", "out of memory");
            if (json_string_length(s) > r->max_stop)
                r->max_stop = json_string_length(s);
            r->n_stops++;
        }
    }
    /* thinking: chat_template_kwargs.thinking / enable_thinking, or top-level enable_thinking;
     * reasoning_effort low|high|max ("none": thinking off) */
    if (get_bool(b, "enable_thinking", "enable_thinking", &r->think, e))
        return -1;
    if ((v = json_object_get(b, "chat_template_kwargs")) && !json_is_null(v)) {
        if (!json_is_object(v))
            return bad(e, "invalid_type", "chat_template_kwargs: expected an object");
        if (get_bool(v, "enable_thinking", "chat_template_kwargs.enable_thinking", &r->think, e) ||
            get_bool(v, "thinking", "chat_template_kwargs.thinking", &r->think, e))
            return -1;
    }
    if ((v = json_object_get(b, "reasoning_effort")) && !json_is_null(v)) {
        const char *s = json_string_value(v);
        if (!s)
            return bad(e, "invalid_type", "reasoning_effort: expected a string");
        if (!strcmp(s, "none"))
            r->think = 0;
        else if (!strcmp(s, "low") || !strcmp(s, "high") || !strcmp(s, "max"))
            snprintf(r->effort, sizeof r->effort, "%s", s);
        else
            return bad(e, "invalid_value", "reasoning_effort: '%.40s' is not low, high or max%s", s,
                       strcmp(s, "medium") ? "" : " (Kimi K3 rejects medium)");
    }
    return 0;
}

/* ---- HTTP -------------------------------------------------------------------------------- */

typedef struct conn {
    txt_buf body;
    double  t0; /* monotonic seconds when the head was in */
    int     too_big;
    int     v11; /* HTTP/1.1 */
    int     key; /* index of its API key */
    job    *j;   /* the job this connection waits for (a reference) */
} conn;

/* A JSON body s (malloc'd, taken); allow: the Allow header of a 405. One request per
 * connection: every answer closes it (serve-http.c checks each request head). */
static enum MHD_Result send_text(struct MHD_Connection *con, unsigned code, char *s, const char *allow) {
    if (!s)
        return MHD_NO;
    struct MHD_Response *rsp = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    if (!rsp) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(rsp, "Content-Type", "application/json");
    MHD_add_response_header(rsp, "Connection", "close");
    if (code == 401)
        MHD_add_response_header(rsp, "WWW-Authenticate", "Bearer");
    if (allow)
        MHD_add_response_header(rsp, "Allow", allow);
    if (code == 503) /* busy or shutting down: try again in a while */
        MHD_add_response_header(rsp, "Retry-After", "5");
    enum MHD_Result ret = MHD_queue_response(con, code, rsp);
    MHD_destroy_response(rsp);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *con, unsigned code, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return send_text(con, code, s, NULL);
}

static enum MHD_Result send_error(struct MHD_Connection *con, unsigned code, const char *type,
                                  const char *ecode, const char *msg) {
    return send_text(con, code, http_error_json(type, ecode, msg), NULL);
}

static enum MHD_Result send_405(struct MHD_Connection *con, const char *allow) {
    char m[64];
    snprintf(m, sizeof m, "use %s", allow);
    return send_text(con, 405, http_error_json("invalid_request_error", "method_not_allowed", m), allow);
}

static json_t *model_obj(void) {
    return json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", srv.name, "object", "model", "created",
                     (json_int_t)srv.t_start, "owned_by", "k3chat", "max_model_len", srv.info.max_ctx);
}

/* The index of the request's API key (0 when the server has none), -1 when it is missing or
 * wrong. Every key is compared in full: the time does not tell which byte or key differed. */
static int auth_key(struct MHD_Connection *con) {
    if (!srv.n_keys)
        return 0;
    const char *h = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7))
        return -1;
    h += 7;
    while (*h == ' ')
        h++;
    int    found = -1;
    size_t a     = strlen(h);
    for (int i = 0; i < srv.n_keys; i++) {
        size_t   b    = strlen(srv.keys[i]);
        unsigned diff = (unsigned)(a != b);
        for (size_t k = 0; k < a && k < b; k++)
            diff |= (unsigned)(h[k] ^ srv.keys[i][k]);
        found = diff == 0 ? i : found;
    }
    return found;
}

/* Streaming body: the job's SSE bytes as they come (a connection thread; may block). */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    job *j = cls;
    pthread_mutex_lock(&srv.mu);
    for (;;) {
        if (j->sse_off < j->sse.n) {
            size_t n = j->sse.n - j->sse_off < max ? j->sse.n - j->sse_off : max;
            memcpy(buf, j->sse.p + j->sse_off, n);
            j->sse_off += n;
            if (j->sse_off == j->sse.n)
                j->sse.n = j->sse_off = 0;
            pthread_mutex_unlock(&srv.mu);
            return (ssize_t)n;
        }
        if (j->state == J_DONE) {
            pthread_mutex_unlock(&srv.mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (j->gone) {
            pthread_mutex_unlock(&srv.mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        job_wait_step(j);
    }
}

static void sse_free(void *cls) {
    job *j = cls;
    pthread_mutex_lock(&srv.mu);
    if (j->state != J_DONE)
        job_gone_locked(j); /* the response ended early: the client went away */
    job_unref_locked(j);
    pthread_mutex_unlock(&srv.mu);
}

static enum MHD_Result chat_completions(struct MHD_Connection *con, conn *cc) {
    if (cc->too_big) {
        char m[128];
        snprintf(m, sizeof m, "the request body is over the limit of %u bytes", SERVE_MAX_BODY);
        return send_error(con, 413, "invalid_request_error", "body_too_large", m);
    }
    json_error_t je;
    json_t      *b = json_loadb(cc->body.p ? cc->body.p : "", cc->body.n, 0, &je);
    if (!b) {
        char m[400];
        snprintf(m, sizeof m, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
        return send_error(con, 400, "invalid_request_error", "invalid_json", m);
    }
    job *j = calloc(1, sizeof *j);
    perr e = {{0}, {0}};
    if (!j) {
        json_decref(b);
        return send_error(con, 500, "server_error", "out_of_memory", "out of memory");
    }
    pthread_mutex_lock(&srv.mu);
    j->seq = ++srv.seq;
    pthread_mutex_unlock(&srv.mu);
    int rc = parse_request(b, j->seq, &j->r, &e);
    json_decref(b);
    if (rc) {
        serve_log("#%u 400: %s", j->seq, e.msg);
        sreq_free(&j->r);
        free(j);
        return send_error(con, 400, "invalid_request_error", e.code, e.msg);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd                              = ci ? ci->connect_fd : -1;
    j->v11                             = cc->v11;
    j->key                             = cc->key;
    j->created                         = (long long)time(NULL);
    j->t0                              = now_s();
    snprintf(j->id, sizeof j->id, "chatcmpl-k3-%llx-%u", (unsigned long long)srv.t_start, j->seq);
    j->refs = 2; /* this connection + the worker */
    pthread_mutex_lock(&srv.mu);
    if (srv.stopping) {
        pthread_mutex_unlock(&srv.mu);
        sreq_free(&j->r);
        free(j);
        return send_error(con, 503, "server_error", "shutting_down", "the server is shutting down");
    }
    if (srv.n_queued >= srv.max_queue + (srv.n_slots - srv.n_active)) { /* free slots take theirs at once */
        int      q = srv.n_queued, a = srv.n_active;
        unsigned seq = j->seq;
        pthread_mutex_unlock(&srv.mu);
        sreq_free(&j->r);
        free(j);
        char m[160];
        snprintf(m, sizeof m, "the server is busy: %d requests are waiting (K3_SERVE_QUEUE=%d); retry later",
                 q, srv.max_queue);
        serve_log("#%u 503: queue full (%d active, %d queued)", seq, a, q);
        return send_error(con, 503, "server_error", "queue_full", m);
    }
    if (srv.tail)
        srv.tail->next = j;
    else
        srv.head = j;
    srv.tail = j;
    srv.n_queued++;
    j->queued = 1;
    cc->j     = j;
    pthread_cond_signal(&srv.work_cv);
    /* streaming: start the response at the first text (or at the end); plain: at the end */
    while (j->state != J_DONE && !j->gone && !(j->r.stream && j->sse.n))
        job_wait_step(j);
    if (j->gone && j->state != J_DONE) {
        pthread_mutex_unlock(&srv.mu);
        return MHD_NO; /* the client is gone: close */
    }
    if (j->http && !(j->r.stream && j->sse.n)) {
        unsigned code = j->http == 499 ? 503 : (unsigned)j->http;
        char     type[32], ecode[40], msg[600];
        snprintf(type, sizeof type, "%s", j->err_type);
        snprintf(ecode, sizeof ecode, "%s", j->err_code);
        snprintf(msg, sizeof msg, "%s", j->err);
        pthread_mutex_unlock(&srv.mu);
        return send_error(con, code, type, ecode, msg);
    }
    if (j->r.stream) {
        j->refs++; /* the response's */
        j->started = 1;
        pthread_mutex_unlock(&srv.mu);
        struct MHD_Response *rsp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, j, sse_free);
        if (!rsp) {
            job_unref(j);
            return MHD_NO;
        }
        MHD_add_response_header(rsp, "Content-Type", "text/event-stream");
        MHD_add_response_header(rsp, "Cache-Control", "no-cache");
        MHD_add_response_header(rsp, "Connection", "close");
        enum MHD_Result ret = MHD_queue_response(con, 200, rsp);
        MHD_destroy_response(rsp);
        return ret;
    }
    json_t *msg = json_pack("{s:s,s:s%}", "role", "assistant", "content", j->resp.p ? j->resp.p : "", j->rel);
    if (j->calls) { /* content is null when the answer is only calls */
        json_object_set(msg, "tool_calls", j->calls);
        if (!j->rel)
            json_object_set_new(msg, "content", json_null());
    }
    if (j->r.think || j->reasoning.n)
        json_object_set_new(msg, "reasoning_content",
                            json_stringn(j->reasoning.p ? j->reasoning.p : "", j->reasoning.n));
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:s}],s:o}", "id", j->id, "object", "chat.completion",
                          "created", (json_int_t)j->created, "model", srv.name, "choices", "index", 0,
                          "message", msg, "finish_reason", j->finish, "usage", usage_obj(j));
    pthread_mutex_unlock(&srv.mu);
    if (!o)
        return send_error(con, 500, "server_error", "internal_error", "could not encode the answer");
    return send_json(con, 200, o);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                                  const char *version, const char *data, size_t *size, void **con_cls) {
    (void)cls;
    conn *cc = *con_cls;
    if (!cc) { /* headers only (checked by serve-http.c): authenticate before reading a body */
        if (!(cc = calloc(1, sizeof *cc)))
            return MHD_NO;
        *con_cls = cc;
        cc->t0   = now_s();
        cc->v11  = !strcmp(version, MHD_HTTP_VERSION_1_1);
        if ((cc->key = auth_key(con)) < 0)
            return send_error(con, 401, "invalid_request_error", "invalid_api_key",
                              "missing or wrong API key (Authorization: Bearer KEY)");
        return MHD_YES;
    }
    if (*size) {
        if (now_s() - cc->t0 > HTTP_BODY_SECS)
            return MHD_NO; /* a body trickling in: close */
        if (!cc->too_big && cc->body.n + *size > SERVE_MAX_BODY)
            cc->too_big = 1;
        if (!cc->too_big && txt_buf_add(&cc->body, data, *size))
            return MHD_NO;
        *size = 0;
        return MHD_YES;
    }
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/health") || !strncmp(url, "/v1/models/", 11)) {
        if (!get)
            return send_405(con, "GET, HEAD");
        if (!strcmp(url, "/health"))
            return send_json(con, 200, json_pack("{s:s}", "status", "ok"));
        if (!strcmp(url, "/v1/models"))
            return send_json(con, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_obj()));
        if (strcmp(url + 11, srv.name))
            return send_error(con, 404, "invalid_request_error", "model_not_found", "no such model");
        return send_json(con, 200, model_obj());
    }
    if (!strcmp(url, "/v1/chat/completions")) {
        if (!post)
            return send_405(con, "POST");
        return chat_completions(con, cc);
    }
    char m[300];
    snprintf(m, sizeof m, "no route %s %.200s (try GET /v1/models or POST /v1/chat/completions)", method,
             url);
    return send_error(con, 404, "invalid_request_error", "not_found", m);
}

static void on_completed(void *cls, struct MHD_Connection *con, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)con;
    (void)toe;
    conn *cc = *con_cls;
    if (!cc)
        return;
    if (cc->j) {
        pthread_mutex_lock(&srv.mu);
        job_gone_locked(cc->j); /* no-op when it finished */
        job_unref_locked(cc->j);
        pthread_mutex_unlock(&srv.mu);
    }
    free(cc->body.p);
    free(cc);
    *con_cls = NULL;
}

/* "[ADDR:]PORT": ADDR defaults to 127.0.0.1; IPv6 as [::1]:PORT. */
/* A request body through the same parser the server uses (for the fuzz target and tests):
 * 0 when it would be served, -1 with the 4xx message in err. */
int serve_check_body(const char *body, size_t n, char *err, size_t errn) {
    json_error_t je;
    json_t      *b = json_loadb(body, n, 0, &je);
    if (!b) {
        snprintf(err, errn, "the body is not JSON: %s (line %d)", je.text, je.line);
        return -1;
    }
    sreq r;
    perr e;
    memset(&r, 0, sizeof r);
    memset(&e, 0, sizeof e);
    int rc = parse_request(b, 1, &r, &e);
    if (rc)
        snprintf(err, errn, "%s", e.msg);
    sreq_free(&r);
    json_decref(b);
    return rc ? -1 : 0;
}

static int parse_listen(const char *spec, struct addrinfo **out) {
    char        host[256] = "127.0.0.1";
    const char *port = spec, *colon = strrchr(spec, ':');
    if (colon) {
        size_t hl = (size_t)(colon - spec);
        if (hl >= sizeof host)
            return -1;
        memcpy(host, spec, hl);
        host[hl] = 0;
        if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
            memmove(host, host + 1, hl - 2);
            host[hl - 2] = 0;
        }
        port = colon + 1;
    }
    char *end;
    long  p = strtol(port, &end, 10);
    if (end == port || *end || p < 0 || p > 65535)
        return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    return getaddrinfo(host[0] ? host : "127.0.0.1", port, &hints, out) == 0 ? 0 : -1;
}

static void free_keys(void) {
    while (srv.n_keys > 0)
        free(srv.keys[--srv.n_keys]);
}

/* --api-key / K3_API_KEY: one key, or several separated by spaces (each printable ASCII). */
static int parse_keys(const char *v) {
    for (const char *k = v; *k; k++)
        if ((*k < ' ' || *k > '~')) {
            fprintf(stderr, "k3chat: --api-key: a key is printable ASCII (byte %zu is 0x%02X)\n",
                    (size_t)(k - v), (unsigned char)*k);
            return -1;
        }
    for (const char *p = v + strspn(v, " "); *p; p += strspn(p, " ")) {
        size_t n = strcspn(p, " ");
        if (srv.n_keys == SERVE_MAX_KEYS) {
            fprintf(stderr, "k3chat: --api-key: more than %d keys\n", SERVE_MAX_KEYS);
            return -1;
        }
        if (!(srv.keys[srv.n_keys++] = strndup(p, n)))
            return -1;
        p += n;
    }
    if (!srv.n_keys)
        fprintf(
            stderr,
            "k3chat: --api-key: the key is empty (give a key, or no --api-key for a server without one)\n");
    return srv.n_keys ? 0 : -1;
}

/* A count from the environment (name unset or empty: def); a bad value is an error at start. */
static int env_count(const char *name, int lo, int hi, int def, int *out) {
    const char *v = getenv(name);
    char       *end;
    long        x = v && *v ? strtol(v, &end, 10) : def;
    if (v && *v && (*end || x < lo || x > hi)) {
        fprintf(stderr, "k3chat: %s='%s': expected an integer from %d to %d\n", name, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int is_loopback(const struct sockaddr *a) {
    if (a->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
    return a->sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

int cli_serve(const cli_opts *o) {
    struct addrinfo *ai = NULL;
    if (parse_listen(o->serve, &ai)) {
        fprintf(stderr,
                "k3chat: --serve: '%s' is not [ADDR:]PORT (an address of this machine, port 0..65535)\n",
                o->serve);
        return 2;
    }
    if (o->api_key && parse_keys(o->api_key)) {
        free_keys();
        freeaddrinfo(ai);
        return 2;
    }
    if (!o->api_key && !is_loopback(ai->ai_addr))
        fprintf(stderr,
                "k3chat: warning: --serve %s without an API key: anyone who can reach this address can use "
                "the model (set K3_API_KEY)\n",
                o->serve);
    /* the port first: a port in use fails at once, before the model loads */
    http_rules rules = {.keyless = !o->api_key, .allow_hosts = o->allow_hosts, .max_body = SERVE_MAX_BODY};
    http_gate *gate  = http_gate_open(ai->ai_addr, ai->ai_addrlen, &rules);
    if (!gate) {
        fprintf(stderr, "k3chat: --serve %s: %s\n", o->serve,
                errno == EADDRINUSE ? "address already in use" : strerror(errno));
        freeaddrinfo(ai);
        return 1;
    }
    /* signals: handled by sigwait below; every thread created from here on blocks them */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int                rc = 1;
    k3_params          par;
    pthread_t          wt;
    int                have_worker = 0;
    struct MHD_Daemon *d           = NULL;
    k3_status          pst         = k3_params_default(&par);
    par.sessions = o->parallel > 0 ? o->parallel : SERVE_PARALLEL; /* the memory fit counts every slot */
    if (pst || load_model_verbose(o->dir, &par, &srv.m)) {
        fprintf(stderr, "k3chat: %s\n", k3_errmsg());
        goto done;
    }
    /* --parallel slots, each a conversation (its session is made on first use); one prompt
     * cache for all of them: clients take turns on the slots, so keep more saved states than
     * the chat does (least recently used out; env overrides, see k3chat(1)) */
    srv.n_slots = o->parallel > 0 ? o->parallel : SERVE_PARALLEL;
    if (!(srv.slots = calloc((size_t)srv.n_slots, sizeof *srv.slots))) {
        fprintf(stderr, "k3chat: out of memory\n");
        goto done;
    }
    for (int i = 0; i < srv.n_slots; i++) {
        srv.slots[i].key = -1;
        if (!(srv.slots[i].c = k3_conv_new())) {
            fprintf(stderr, "k3chat: out of memory\n");
            goto done;
        }
        if (i)
            k3_conv_share_prompt_cache(srv.slots[i].c, srv.slots[0].c);
    }
    /* the shared prompt cache: more snapshots and bytes than a chat's (16, 2000 MB) */
    const char *mb = getenv("K3_CONV_SNAPSHOT_MB");
    char       *end;
    int         n_snaps;
    double      snap_mb = mb && *mb ? strtod(mb, &end) : 2000;
    if (env_count("K3_CONV_SNAPSHOTS", 0, 64, 16, &n_snaps))
        goto done;
    if (mb && *mb && (*end || !(snap_mb >= 0 && snap_mb < 1e9))) {
        fprintf(stderr, "k3chat: K3_CONV_SNAPSHOT_MB='%s': expected a number of megabytes >= 0\n", mb);
        goto done;
    }
    if (k3_conv_set_prompt_cache(srv.slots[0].c, n_snaps, snap_mb)) {
        fprintf(stderr, "k3chat: %s\n", k3_errmsg());
        goto done;
    }
    if (env_count("K3_SERVE_QUEUE", 0, 100000, SERVE_QUEUE, &srv.max_queue) ||
        env_count("K3_SERVE_CHUNK", 1, 1 << 20, SERVE_CHUNK, &srv.chunk) ||
        env_count("K3_SERVE_QUEUE_SECS", 1, 86400, SERVE_QUEUE_SECS, &srv.queue_secs))
        goto done;
    const char *script = getenv("K3_SERVE_SCRIPT");
    stools_err  se;
    if (script && *script && stools_script_load(script, o->dir, &se)) {
        fprintf(stderr, "k3chat: %s\n", se.msg);
        goto done;
    }
    k3_model_get_info(srv.m, &srv.info);
    if (sformat_init(o->dir, &srv.info)) {
        fprintf(stderr, "k3chat: %s\n", k3_errmsg());
        goto done;
    }
    char        dname[256];
    const char *dir = o->dir;
    size_t      dl  = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    const char *slash = memrchr(dir, '/', dl);
    snprintf(dname, sizeof dname, "%.*s", (int)(dl - (slash ? (size_t)(slash + 1 - dir) : 0)),
             slash ? slash + 1 : dir);
    srv.name    = o->model_name ? o->model_name : dname;
    srv.t_start = (long long)time(NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_cond_init(&srv.work_cv, &ca);
    pthread_cond_init(&srv.done_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&wt, NULL, worker_main, NULL)) {
        fprintf(stderr, "k3chat: cannot start the worker thread\n");
        goto done;
    }
    have_worker = 1;
    /* connections come from the gate (serve-http.c), which enforces the limits */
    unsigned flags =
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned)HTTP_MAX_CONN + 8, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_SECS,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_NOTIFY_CONNECTION,
                         http_gate_notify, gate, MHD_OPTION_END);
    if (!d || http_gate_start(gate, d)) {
        fprintf(stderr, "k3chat: --serve %s: cannot start the HTTP server (%s)\n", o->serve, strerror(errno));
        goto done;
    }
    char host[128] = "?";
    getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof host, NULL, 0, NI_NUMERICHOST);
    fprintf(stderr, "k3chat: serving %s (context %d) on http://%s%s%s:%u/v1%s\n", srv.name, srv.info.max_ctx,
            ai->ai_family == AF_INET6 ? "[" : "", host, ai->ai_family == AF_INET6 ? "]" : "",
            http_gate_port(gate), srv.n_keys ? " (API key required)" : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    serve_log("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    http_gate_stop(gate); /* no new connections; those not handed on yet get 503 */
    pthread_mutex_lock(&srv.mu);
    srv.stopping = 1;
    for (int i = 0; i < srv.n_slots; i++) /* the running turns end as shutting_down */
        if (srv.slots[i].j)
            k3_conv_cancel(srv.slots[i].c);
    pthread_cond_broadcast(&srv.work_cv);
    pthread_mutex_unlock(&srv.mu);
    pthread_join(wt, NULL); /* finishes the running job (cancelled) and answers the queue */
    have_worker = 0;
    if (http_gate_drain(gate, SERVE_DRAIN_SECS)) /* every response out, its stream terminated */
        serve_log("connections still open after %d s: closing them", SERVE_DRAIN_SECS);
    MHD_stop_daemon(d);
    d = NULL;
    serve_log("%lu answered, %lu cancelled, %lu failed", srv.n_ok, srv.n_cancel, srv.n_err);
    rc = 0;
done:
    if (have_worker) {
        pthread_mutex_lock(&srv.mu);
        srv.stopping = 1;
        pthread_cond_broadcast(&srv.work_cv);
        pthread_mutex_unlock(&srv.mu);
        pthread_join(wt, NULL);
    }
    http_gate_stop(gate);
    if (d)
        MHD_stop_daemon(d);
    http_gate_free(gate);
    for (int i = 0; srv.slots && i < srv.n_slots; i++) {
        if (srv.slots[i].c)
            k3_conv_drop_cache(srv.slots[i].c);
        k3_conv_free(srv.slots[i].c);
        k3_session_free(srv.slots[i].s);
    }
    free(srv.slots);
    sformat_done();
    k3_model_free(srv.m);
    free_keys();
    freeaddrinfo(ai);
    return rc;
}
