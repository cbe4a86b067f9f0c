/* serve.c: `k3chat MODEL_DIR --serve [ADDR:]PORT`, an OpenAI-compatible HTTP server.
 *
 * DESIGN
 * serve-gate.c reads and checks every request (the only HTTP parser: head and body, limits
 * and deadlines) and serves each complete one on a thread of its own; jansson parses and
 * writes every JSON body (serve-req.c reads a request's fields). Routes: GET /v1/models,
 * GET /v1/models/NAME, GET /health, POST /v1/chat/completions (streaming as server-sent
 * events, or one JSON answer).
 *
 * One model and one engine thread (worker_main) that owns it. A connection thread validates
 * its request, queues a job per choice (n, each its own turn; jgroup) and waits. The engine thread runs
 * continuous batching over
 * --parallel N slots, each a conversation (k3_conv) with its own session: queued jobs join
 * free slots at the next step, in arrival order but that a job whose client address runs fewer
 * jobs goes first (admit_next_locked), every loop is one k3_conv_gen_step_batch over
 * the slots' turns (each decoding turn's next token plus a prompt window of the oldest
 * prefilling one, all in one batched engine feed), and a turn that is done leaves at once.
 * A slot's conversation gives the prompt cache: it keeps its messages when they are a prefix
 * of the request's (a client continuing its chat; such a request prefers that slot), so the
 * previous turn's generated ids stay and the session's state is reused; otherwise it replaces
 * them and the turn reuses whatever prefix/snapshot still matches, from one snapshot store
 * shared by the slots (tagged by API key). Beyond the slots, jobs wait in a bounded FIFO.
 *
 * Text flows from the engine thread's k3_conv callbacks into the job (under srv.mu): the reasoning
 * at once, the response through the stop-string filter, which holds back a tail that could
 * still become a stop string and cancels the turn when one appears. A streaming request's
 * thread writes the job's bytes as the socket takes them, never waiting in a write (a client that
 * leaves SERVE_SSE_MAX unread is cancelled and its connection shut down at once; one that takes no
 * byte for K3_SERVE_SEND_SECS ends too), and once every choice is done hands what is left to the
 * gate's writer (a slow reader of a finished stream holds no thread); a plain one waits for the
 * end. A request's body is parsed once (sbody), its choices' jobs sharing it. Both wait in
 * 100 ms steps and read the socket (bytes after the request dropped; 0 = closed): a client that went away
 * cancels its job (k3_conv_cancel of its slot), queued or running.
 *
 * A client that closed its sending side after the request (half-close) still gets its answer:
 * at EOF an HTTP/1.1 client is sent an interim "100 Continue" now and then, which a client that
 * is really gone answers with a reset (serve-gate.c, http_peer_gone).
 *
 * Each request is answered once, with Connection: close. Errors are {"error": {"message",
 * "type", "param", "code"}} (param: the request field at fault, else null) with 400 (bad JSON, duplicate
 * keys, wrong types, over the context, bad framing), 401 (bearer token), 403 (Host), 404, 405 (with Allow),
 * 408, 411, 413 (Content-Length over SERVE_MAX_BODY, from the head), 414, 415, 417, 429 (a client
 * address over its share of a full queue, with Retry-After), 431, 500, 503 (busy or queue full, with
 * Retry-After; shutting down), 505. Messages that echo the client's text
 * are cut on a character boundary with control characters escaped, and so is every log line.
 * SIGINT/SIGTERM/SIGHUP: stop accepting, cancel the running turns (a stream ends with an error event
 * "shutting_down" and [DONE]), answer queued jobs 503 shutting_down, let every response
 * finish (up to SERVE_DRAIN_SECS), exit 0. Before the server is ready (the model loading) a
 * signal ends the process at once, as the signal (sig_main).
 */
#include "loadprog.h"
#include "serve.h"
#include "k3.h"
#include "serve-http.h"
#include "serve-req.h"
#include "serve-tools.h"
#include "text.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SERVE_MAX_BODY (8u << 20) /* bytes of a request body                        */
#define SERVE_DRAIN_SECS 10       /* at shutdown, for responses to finish           */
#define SERVE_MAX_KEYS 64         /* API keys (one prompt cache owner at a time)    */
#define SERVE_MIN_ROOM 8          /* tokens a turn must be able to generate (conv)  */
#define SERVE_MAX_PARALLEL 64     /* --parallel's top (the PARALLEL row of k3-settings.h) */
/* --parallel, K3_SERVE_QUEUE (jobs waiting for a slot), K3_SERVE_CHUNK (prompt ids per prefill
 * step; BENCHMARKS.md), K3_SERVE_QUEUE_SECS (longest wait for a slot): the table's defaults */
#define SERVE_DEFAULT(id) ((int)k3_setting(K3_SETTING_##id)->def)
#define SERVE_SSE_MAX (256u << 10) /* stream bytes a client may leave unread; beyond: cancelled */
#define SERVE_PARSING 4 /* request bodies parsed at once (a JSON tree of small values is ~25x its body) */
#define SERVE_FAIR_SCAN 1024 /* queued jobs an admission looks over for the fairest */

/* ---- jobs ------------------------------------------------------------------------- */

enum { J_QUEUED = 0, J_RUNNING, J_DONE };

/* A logprobs entry (choices[].logprobs.content[]) of one token of the answer's text, released
 * with the first response byte at or after `at` (where its text starts; a token the parser held
 * back, part of a character, starts where the next one does). */
typedef struct slp {
    size_t  at;
    json_t *o; /* {token, logprob, bytes, top_logprobs} */
} slp;

/* A request's body, parsed once and shared by its choices (a JSON tree of small values made n
 * parses of up to SERVE_MAX_BODY each); what a choice has of its own, its seed and its stop
 * strings' match, is the job's. Guarded by srv.mu. */
typedef struct sbody {
    sreq   r;
    int    refs; /* its jobs                                                      */
    int    live; /* of which may still run a turn on its grammar (the last frees it) */
    size_t gram; /* bytes of its own grammar charged to srv.gram_held             */
} sbody;

typedef struct job {
    sbody      *b;                       /* the request, shared by its choices                  */
    sreq       *r;                       /* &b->r                                               */
    uint64_t    seed;                    /* its sampling seed: the request's + index (vLLM's)   */
    size_t      stop_q[SERVE_MAX_STOPS]; /* its answer's stop string match (sstop_feed) */
    int         released;                /* its share of b's grammar given back (b->live)        */
    int         state;                   /* J_*; all fields below are guarded by srv.mu */
    int         refs;                    /* connection + worker (+ streaming response)  */
    int         gone;                    /* the client disconnected                     */
    int         fd;                      /* the connection's socket; -1 once its thread has left */
    int         key;                     /* index of the request's API key (cache owner) */
    int         index;                   /* its choice: choices[index] of the request (n) */
    int         cut;                     /* cancelled because another choice failed     */
    int         queued;                  /* waiting in the FIFO for a slot              */
    unsigned    seq;                     /* request number (logs)                       */
    char        ip[64];                  /* the client's address (its share of the queue) */
    char        id[48];                  /* "chatcmpl-..."                              */
    long long   created;                 /* unix seconds                                */
    double      t0;                      /* monotonic seconds at arrival                */
    txt_buf     sse;                     /* stream bytes not yet sent: [sse_off, sse.n)  */
    size_t      sse_off;
    int         role_sent; /* the first chunk (role) is in sse           */
    txt_buf     resp;      /* every response byte generated              */
    size_t      rel;       /* of which released (not held by stop check) */
    size_t      fed;       /* of which seen by the stop strings' matcher */
    txt_buf     reasoning; /* think channel                              */
    int         stopped;   /* a stop string ended the turn               */
    const char *finish;    /* "stop" | "length" when done without error  */
    int         n_prompt, n_cached, n_gen;
    int         n_think; /* of n_gen, the think channel's: usage.completion_tokens_details.reasoning_tokens */
    int         window;  /* its prefill's most tokens in one pass (k3_stats.window) */
    json_t     *calls;   /* the answer's tool_calls (NULL: none)       */
    slp        *lp;      /* (n_lp, cap_lp) logprobs: the answer's text tokens' entries */
    int         n_lp;
    size_t      cap_lp;
    int         lp_sent;           /* of which released with their text (streamed, or in the answer) */
    int         open_calls;        /* calls begun whose close has not come       */
    char       *cut_id, *cut_name; /* the call begun last, while it is open   */
    txt_buf     cut_args;          /* its arguments so far                    */
    k3_conv    *c;                 /* the slot's conversation while it runs      */
    int         http;              /* 0 = success; else the error's HTTP status  */
    size_t      gram;              /* bytes of its own grammar charged to srv.gram_held */
    int         gram_over;         /* cancelled: its grammar took the total past the budget */
    char        err_type[32], err_code[40];
    char        err[600];
    const char *err_param; /* the request field at fault (error.param), NULL: none */
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
    int             share;      /* choices an address may hold once it is full (K3_SERVE_SHARE) */
    int             gram_mb;    /* the budget of the requests' grammars (K3_SERVE_GRAMMAR_MB) */
    int             gram_auto;  /* 1: that budget is gram_default_mb's (the variable unset or 0) */
    size_t          gram_held;  /* bytes they hold now, queued and running */
    slot           *slots;      /* (n_slots) --parallel                   */
    int             n_slots, n_active;
    int             chunk;   /* prompt ids a prefill step feeds         */
    int             n_snaps; /* the shared prompt cache: saved states (K3_CONV_SNAPSHOTS) */
    double          snap_mb; /* and their megabytes (K3_CONV_SNAPSHOT_MB)                 */
    uint64_t        clock;   /* admissions                             */
    int             stopping;
    unsigned        seq; /* requests numbered: as they reach the queue, or are refused */
    unsigned long   n_ok, n_err, n_cancel;
    k3_model       *m;
    k3_model_info   info;
    const char     *name;                 /* model id                    */
    char           *keys[SERVE_MAX_KEYS]; /* (n_keys) API keys; none = no authentication */
    size_t          key_len[SERVE_MAX_KEYS];
    int             n_keys;
    long long       t_start;
    uint64_t        id_tag;          /* random, in every completion id: two servers never share one */
    char            fingerprint[24]; /* system_fingerprint: "fp_" + FNV-64 of config.json */
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* j's turn is over (or never ran): its matcher's bytes leave the server's total, and with the
 * last of its request's choices, the request's own grammar (a json_schema or tool-call one:
 * gram_charge_locked counts it) goes and its bytes too. Lock held. */
static void gram_release_locked(job *j) {
    srv.gram_held -= j->gram;
    j->gram  = 0;
    sbody *b = j->b;
    if (j->released || --b->live > 0) {
        j->released = 1;
        return;
    }
    j->released = 1;
    srv.gram_held -= b->gram;
    b->gram = 0;
    if (b->r.fmt.own)
        k3_grammar_free(b->r.fmt.g);
    b->r.fmt.g   = NULL;
    b->r.fmt.own = 0;
}

/* Counts the bytes j's request's grammar holds now (its mask caches grow as the turns run; once
 * for all its choices) and, once its turn g runs (NULL before), that turn's matcher and mask (the
 * json_object grammar, shared by all, is not counted; its matchers are) in the server's total;
 * the bytes. Lock held. */
static size_t gram_charge_locked(job *j, const k3_conv_gen *g) {
    sbody *b   = j->b;
    size_t own = b->r.fmt.own ? k3_grammar_bytes(b->r.fmt.g) : 0, turn = k3_conv_gen_grammar_bytes(g);
    srv.gram_held += own - b->gram;
    b->gram = own;
    srv.gram_held += turn - j->gram;
    j->gram = turn;
    return own + turn;
}

/* A request's grammar compile (sreq_parse, before its jobs exist) is charged to the server's total
 * as it grows, K3_GMETER_STEP at a time, while the budget has room: the compiles running at once
 * (SERVE_PARSING) take what the grammars held leave, never more, and one that would pass it stops
 * there (a 400 when nothing else was held, else a 503). Once it is compiled, the request's own
 * charge (gram_charge_locked, what the grammar holds) replaces the steps granted. */
typedef struct gram_meter {
    k3_gmeter m;
    size_t    others; /* at a refusal: the bytes the others held                          */
    int       alone;  /* at a refusal: it alone would pass the budget, the others' bytes or not */
} gram_meter;

static int gram_meter_charge(void *ud, size_t n) {
    gram_meter *gm = ud;
    pthread_mutex_lock(&srv.mu);
    int over = srv.gram_held + n > (size_t)srv.gram_mb << 20;
    if (over) {
        gm->others = srv.gram_held - gm->m.granted;
        gm->alone  = gm->m.granted + n > (size_t)srv.gram_mb << 20;
    } else
        srv.gram_held += n;
    pthread_mutex_unlock(&srv.mu);
    return over;
}

/* Drops j's share of its request (the last job frees it). Lock held. */
static void body_unref_locked(job *j) {
    if (--j->b->refs > 0)
        return;
    sreq_free(&j->b->r);
    free(j->b);
}

static void job_unref_locked(job *j) {
    if (--j->refs > 0)
        return;
    gram_release_locked(j);
    body_unref_locked(j);
    free(j->sse.p);
    free(j->resp.p);
    free(j->reasoning.p);
    json_decref(j->calls);
    for (int i = 0; i < j->n_lp; i++)
        json_decref(j->lp[i].o);
    free(j->lp);
    free(j->cut_id);
    free(j->cut_name);
    free(j->cut_args.p);
    free(j);
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

/* j leaves the FIFO answered with the error (http, type, code, msg): the engine never sees it.
 * Lock held. */
static void job_unqueue_locked(job *j, int http, const char *type, const char *code, const char *msg) {
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
    job_fail_locked(j, http, type, code, msg);
    job_done_locked(j); /* the engine's reference */
}

/* j waited in the FIFO longer than K3_SERVE_QUEUE_SECS: out of it with a 503. Lock held. */
static void job_expire_locked(job *j) {
    char m[160];
    snprintf(m, sizeof m,
             "the server is busy: no generation slot came free in %d s (K3_SERVE_QUEUE_SECS); retry later",
             srv.queue_secs);
    job_unqueue_locked(j, 503, "server_error", "queue_timeout", m);
}

/* ---- a client address's share ----------------------------------------------------------
 *
 * Fairness counts choices (jobs), not connections: one request of n 16 takes 16 places. While
 * the queue has room every request is taken; once it is full, an address may hold at most
 * srv.share choices queued and running (K3_SERVE_SHARE). A request from an address within it takes the
 * places of the newest queued requests of the addresses that hold the most beyond it (each
 * answered 429 client_share), and one that would take its own address past it is refused with
 * 429 client_share: one client cannot keep the others out, however it spreads its choices over
 * requests and connections. */

/* Choices ip holds, queued and running. Lock held. */
static int addr_jobs_locked(const char *ip) {
    int n = 0;
    for (const job *q = srv.head; q; q = q->next)
        n += !strcmp(q->ip, ip);
    for (int i = 0; i < srv.n_slots; i++)
        n += srv.slots[i].j && !strcmp(srv.slots[i].j->ip, ip);
    return n;
}

/* The newest queued job of the address that holds the most choices beyond srv.share (how
 * many in *held), NULL when none is over it. Lock held. */
static job *share_victim_locked(int *held) {
    job *v    = NULL;
    int  most = srv.share;
    for (job *q = srv.head; q; q = q->next) { /* each address once: at its first queued job */
        const job *f = srv.head;
        while (strcmp(f->ip, q->ip))
            f = f->next;
        if (f != q)
            continue;
        int h = addr_jobs_locked(q->ip);
        if (h > most) {
            most = h;
            for (job *r = q; r; r = r->next)
                if (!strcmp(r->ip, q->ip))
                    v = r;
        }
    }
    *held = most;
    return v;
}

/* Room in the FIFO for n more jobs: the newest queued requests of the addresses over their share
 * give way (429) until n fit. Whether they fit. Lock held. */
static int share_make_room_locked(int n) {
    int  held;
    job *v;
    while (srv.n_queued + n > srv.max_queue + (srv.n_slots - srv.n_active) &&
           (v = share_victim_locked(&held))) {
        char m[300];
        snprintf(m, sizeof m,
                 "the server's queue is full and this request gave way to one from another client: this "
                 "client address held %d choices queued and running, more than its share of %d once the "
                 "queue is full (K3_SERVE_SHARE); retry later",
                 held, srv.share);
        serve_log("#%u 429: gave way (its address held %d choices, its share %d)", v->seq, held, srv.share);
        char id[sizeof v->id];
        snprintf(id, sizeof id, "%s", v->id);
        for (job *q = srv.head, *nx; q; q = nx) { /* every queued choice of that request */
            nx = q->next;
            if (!strcmp(q->id, id))
                job_unqueue_locked(q, 429, "rate_limit_error", "client_share", m);
        }
    }
    return srv.n_queued + n <= srv.max_queue + (srv.n_slots - srv.n_active);
}

/* ---- a request's jobs ------------------------------------------------------------------
 *
 * A request of n choices is n jobs (choices[i] is job i), each its own turn in the slots; its
 * connection thread waits on all of them and answers once. A choice that fails cancels the
 * others (the answer is that error); a client that goes away cancels all of them. */

typedef struct jgroup {
    job   *j[SERVE_MAX_N]; /* (n) by choice index */
    int    n;
    int    fd, v11; /* the connection; HTTP/1.1: an interim 100 may probe the peer */
    int    started; /* the response has begun (no more probes)                      */
    int    gone;    /* the client went away: every job cancelled                    */
    double t_probe; /* monotonic seconds of the last probe                          */
} jgroup;

static int group_done(const jgroup *g) {
    for (int i = 0; i < g->n; i++)
        if (g->j[i]->state != J_DONE)
            return 0;
    return 1;
}

static int group_pending(const jgroup *g) { /* stream bytes not yet sent */
    for (int i = 0; i < g->n; i++)
        if (g->j[i]->sse.n > g->j[i]->sse_off)
            return 1;
    return 0;
}

/* The error that answers the request: the first choice that failed for a reason of its own (not
 * cancelled for another's), else the first failed one; NULL when none did. Lock held. */
static const job *group_failed(const jgroup *g) {
    const job *any = NULL;
    for (int i = 0; i < g->n; i++) {
        const job *j = g->j[i];
        if (j->state == J_DONE && j->http && j->http != 499)
            return j;
        if (j->state == J_DONE && j->http && !any)
            any = j;
    }
    return any;
}

/* Cancels every job not done; cut: because one of them failed (else the client is gone). Lock held. */
static void group_cancel_locked(jgroup *g, int cut) {
    for (int i = 0; i < g->n; i++)
        if (!g->j[i]->gone && g->j[i]->state != J_DONE) {
            g->j[i]->cut = cut;
            job_gone_locked(g->j[i]);
        }
}

/* Whether the client is gone (then every job is cancelled): seen by the wait, by a job whose
 * stream the client left unread, or set by the caller. Lock held. */
static int group_gone_locked(jgroup *g) {
    for (int i = 0; !g->gone && i < g->n; i++)
        g->gone = g->j[i]->gone && !g->j[i]->cut;
    if (g->gone)
        group_cancel_locked(g, 0);
    return g->gone;
}

/* Wait up to 100 ms for progress on g's jobs (wfd >= 0: for room to write on that socket, the
 * lock released), then check the client, the queue's time limit, and whether a choice failed (the
 * others are cancelled). Lock held. */
static void group_wait_step(jgroup *g, int wfd) {
    if (wfd >= 0) {
        pthread_mutex_unlock(&srv.mu);
        struct pollfd pf = {.fd = wfd, .events = POLLOUT};
        poll(&pf, 1, 100);
        pthread_mutex_lock(&srv.mu);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&srv.done_cv, &srv.mu, &ts);
    }
    for (int i = 0; i < g->n; i++)
        if (g->j[i]->queued && now_s() - g->j[i]->t0 > srv.queue_secs)
            job_expire_locked(g->j[i]);
    if (!group_done(g) && g->fd >= 0 && http_peer_gone(g->fd, g->v11 && !g->started, &g->t_probe))
        g->gone = 1;
    if (!group_gone_locked(g) && group_failed(g))
        group_cancel_locked(g, 1);
}

/* A request refused before it queued: its jobs go, their grammar's bytes with them; unlocks srv.mu. */
static void group_drop_locked(jgroup *g) {
    for (int i = 0; i < g->n; i++) {
        gram_release_locked(g->j[i]);
        body_unref_locked(g->j[i]);
    }
    pthread_mutex_unlock(&srv.mu);
    for (int i = 0; i < g->n; i++)
        free(g->j[i]);
    g->n = 0;
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
    if (j->sse.n > SERVE_SSE_MAX && !j->gone && j->state != J_DONE) { /* the client does not read */
        serve_log("#%u: the client reads its stream too slowly (%zu bytes unsent): cancelled", j->seq,
                  j->sse.n);
        job_gone_locked(j);
        /* and closed: its thread may wait in a write the client does not take (K3_SERVE_SEND_SECS) */
        if (j->fd >= 0)
            shutdown(j->fd, SHUT_RDWR);
    }
}

/* usage of a request's choices: the prompt once (the first choice's, and its cached tokens), the
 * completions' tokens summed, as vLLM counts n > 1. */
static json_t *usage_obj(job *const *js, int n) {
    int gen = 0, think = 0;
    for (int i = 0; i < n; i++)
        gen += js[i]->n_gen, think += js[i]->n_think;
    return json_pack("{s:i,s:i,s:i,s:{s:i},s:{s:i}}", "prompt_tokens", js[0]->n_prompt, "completion_tokens",
                     gen, "total_tokens", js[0]->n_prompt + gen, "prompt_tokens_details", "cached_tokens",
                     js[0]->n_cached, "completion_tokens_details", "reasoning_tokens", think);
}

/* The head of an answer or chunk: id, object, created, model, system_fingerprint. */
static json_t *answer_obj(const job *j, const char *object) {
    return json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", j->id, "object", object, "created",
                     (json_int_t)j->created, "model", srv.name, "system_fingerprint", srv.fingerprint);
}

/* choices[].logprobs of the entries lp (an array, taken; NULL: null). */
static json_t *logprobs_obj(json_t *lp) {
    return lp ? json_pack("{s:o,s:n}", "content", lp, "refusal") : json_null();
}

/* A chunk; lp: the logprobs entries of its text (taken; NULL: none), sent with logprobs on. */
static json_t *chunk_lp(job *j, json_t *delta, const char *finish, json_t *lp) {
    json_t *o = answer_obj(j, "chat.completion.chunk");
    if (!j->r->logprobs) /* logprobs: null when not asked, as OpenAI writes it */
        json_decref(lp), lp = NULL;
    json_object_set_new(o, "choices",
                        json_pack("[{s:i,s:o,s:o,s:o}]", "index", j->index, "delta", delta, "logprobs",
                                  j->r->logprobs ? logprobs_obj(lp) : json_null(), "finish_reason",
                                  finish ? json_string(finish) : json_null()));
    if (o && j->r->include_usage) /* OpenAI: with include_usage every chunk has usage, null but the last */
        json_object_set_new(o, "usage", json_null());
    return o;
}

static json_t *chunk(job *j, json_t *delta, const char *finish) {
    return chunk_lp(j, delta, finish, NULL);
}

/* The entries whose text starts before byte `to` of the response (all: every one left), as a
 * JSON array, marked released; NULL with logprobs off. */
static json_t *lp_take(job *j, size_t to, int all) {
    if (!j->r->logprobs)
        return NULL;
    json_t *a = json_array();
    for (; j->lp_sent < j->n_lp && (all || j->lp[j->lp_sent].at < to); j->lp_sent++)
        json_array_append(a, j->lp[j->lp_sent].o);
    return a;
}

/* Reasoning goes out under both names with the same text: "reasoning" (vLLM since 0.16) and
 * "reasoning_content" (DeepSeek, older vLLM and SGLang); a client reads the one it knows. */
static const char *const reasoning_keys[] = {"reasoning", "reasoning_content"};

/* A delta of one field ("content" or "reasoning", the latter under both its names); the first
 * also carries the role. lp: the logprobs entries of the text (taken; NULL: none). */
static void sse_delta(job *j, const char *field, const char *text, size_t n, json_t *lp) {
    if (!j->r->stream || !n) {
        json_decref(lp);
        return;
    }
    if (!j->role_sent) {
        j->role_sent = 1;
        sse_json(j, chunk(j, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL));
    }
    json_t *d     = json_object();
    int     think = !strcmp(field, "reasoning");
    for (int k = 0; k < (think ? 2 : 1); k++)
        json_object_set_new(d, think ? reasoning_keys[k] : field, json_stringn(text, n));
    sse_json(j, chunk_lp(j, d, NULL, lp));
}

/* ---- the worker's callbacks ----------------------------------------------------------- */

static void on_think(const char *text, size_t n, void *ud) {
    job *j = ud;
    pthread_mutex_lock(&srv.mu);
    if (j->gone)
        k3_conv_cancel(j->c);
    txt_buf_add(&j->reasoning, text, n);
    sse_delta(j, "reasoning", text, n, NULL);
    j->state = J_RUNNING;
    pthread_cond_broadcast(&srv.done_cv);
    pthread_mutex_unlock(&srv.mu);
}

/* Release response bytes up to `to` (content + stream). */
static void release(job *j, size_t to) {
    if (to > j->rel) {
        sse_delta(j, "content", j->resp.p + j->rel, to - j->rel, lp_take(j, to, 0));
        j->rel = to;
    }
}

/* Stop strings: the text not yet seen goes through the matcher (serve-req.c, linear in the
 * text); a stop string ends the answer before it, else the longest tail that could still become
 * one is held back (nothing when final). Releases what is certain. Returns 1 when a stop string
 * matched. */
static int stop_filter(job *j, int final) {
    const char *text = j->resp.p;
    size_t      n = j->resp.n, hold = 0, at = SIZE_MAX;
    if (!j->r->stop.n || j->stopped) {
        if (!j->stopped)
            release(j, n);
        return j->stopped;
    }
    if (n > j->fed) /* no visible text yet: resp.p is NULL */
        at = sstop_feed(&j->r->stop, j->stop_q, text + j->fed, n - j->fed, j->fed, &hold);
    j->fed = n;
    if (at != SIZE_MAX) {
        release(j, at);
        j->stopped = 1;
        return 1;
    }
    size_t to = final ? n : n - hold;
    while (to > j->rel && to < n && ((unsigned char)text[to] & 0xC0) == 0x80)
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

/* A token's text as OpenAI's logprobs give it: its bytes when they are UTF-8 (as jansson, which
 * writes the string, checks them), else "bytes:" then each byte as \xHH (a token that is part of a
 * character); bytes: the exact bytes. NULL when out of memory. */
static json_t *lp_token(const k3_tok *tok, int32_t id, float logprob) {
    size_t      n     = 0;
    const char *p     = k3_tok_piece(tok, id, &n);
    json_t     *bytes = json_array(), *text = p ? json_stringn(p, n) : json_string("");
    for (size_t i = 0; p && i < n; i++)
        json_array_append_new(bytes, json_integer((unsigned char)p[i]));
    if (!text) { /* not whole characters */
        txt_buf t = {0};
        txt_buf_add(&t, "bytes:", 6);
        for (size_t i = 0; i < n; i++) {
            char h[5];
            snprintf(h, sizeof h, "\\x%02x", (unsigned char)p[i]);
            txt_buf_add(&t, h, 4);
        }
        text = t.p ? json_stringn(t.p, t.n) : NULL;
        free(t.p);
    }
    /* -inf (probability 0) as OpenAI writes a very unlikely token, which JSON cannot hold */
    double lp = isinf(logprob) || isnan(logprob) ? -9999.0 : (double)logprob;
    return json_pack("{s:o,s:f,s:o}", "token", text, "logprob", lp, "bytes", bytes);
}

static void on_token(const k3_gen_token *t, void *ud) {
    job *j = ud;
    if (!t->content || !j->r->logprobs)
        return;
    json_t *o = lp_token(t->tok, t->id, t->logprob), *top = json_array();
    for (int i = 0; i < t->n_top; i++)
        json_array_append_new(top, lp_token(t->tok, t->top[i].id, t->top[i].logprob));
    if (json_object_set_new(o, "top_logprobs", top)) {
        json_decref(o); /* out of memory: this entry is left out, the answer goes on */
        return;
    }
    pthread_mutex_lock(&srv.mu);
    slp *lp = j->stopped ? NULL : k3_grow_z(j->lp, &j->cap_lp, (size_t)j->n_lp + 1, sizeof *lp, 64);
    if (!lp) {
        json_decref(o); /* past a stop string; or out of memory: the entry is left out */
    } else {
        j->lp            = lp;
        j->lp[j->n_lp++] = (slp){j->resp.n, o};
    }
    pthread_mutex_unlock(&srv.mu);
}

/* A tool call of the reply: stream it as delta.tool_calls (name first, then fragments). */
static void on_tool_call(int index, const char *id, const char *name, const char *args, size_t n, int done,
                         void *ud) {
    job *j = ud;
    pthread_mutex_lock(&srv.mu);
    if (j->gone)
        k3_conv_cancel(j->c);
    j->open_calls += (name != NULL) - (done != 0);
    if (name) { /* kept while open: an answer cut inside it carries it as the stream sent it */
        free(j->cut_id);
        free(j->cut_name);
        j->cut_id     = strdup(id ? id : "");
        j->cut_name   = strdup(name);
        j->cut_args.n = 0;
    } else if (n) {
        txt_buf_add(&j->cut_args, args, n);
    }
    if (j->r->stream && (name || n)) {
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
               str_eq0(m->reasoning, r->msgs[i].reasoning) && stools_msg_same(m, &r->tx[i]) &&
               m->n_parts == r->msgs[i].n_parts &&
               (!m->n_parts || !memcmp(m->parts, r->msgs[i].parts, (size_t)m->n_parts * sizeof *m->parts));
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
                               .tools        = x->tools,
                               .parts        = r->msgs[i].parts,
                               .n_parts      = r->msgs[i].n_parts};
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
 * turn's next token, plus the next prompt step of the oldest turn still prefilling (of every
 * one when none decodes): by default a prefill window (the fit's, k3_model_info.window), which
 * the batched feed runs with the decode columns in the same pass, each routed expert read
 * once for the window; with K3_SERVE_CHUNK=N, N ids, so a request that arrives while others
 * stream delays them by one chunk per step, never by its whole prompt. A turn that is done
 * (finished, cancelled, disconnected, failed) ends at once and frees its slot. */

/* Sets the slot's conversation up for j and begins its turn (engine thread, lock free). */
static k3_status job_start(slot *sl, job *j) {
    const sreq      *r = j->r;
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
    set.max_tokens   = r->max_tokens;
    set.think_budget = r->think_budget;
    k3_sampler_params_default(srv.m, &set.sampling);
    set.sampling.temp               = r->temp;
    set.sampling.top_p              = r->top_p;
    set.sampling.top_k              = r->top_k;
    set.sampling.min_p              = r->min_p;
    set.sampling.seed               = j->seed;
    set.sampling.presence_penalty   = r->presence_penalty;
    set.sampling.frequency_penalty  = r->frequency_penalty;
    set.sampling.repetition_penalty = r->repetition_penalty;
    set.logprobs                    = r->logprobs;
    set.top_logprobs                = r->top_logprobs;
    snprintf(set.tool_choice, sizeof set.tool_choice, "%s", r->tl.tool_choice);
    k3_conv_set_grammar(sl->c, r->fmt.g);
    if ((st = k3_conv_set_settings(sl->c, &set)) ||
        (st = k3_conv_set_logit_bias(sl->c, r->bias, r->n_bias)) ||
        (st = k3_conv_set_tools(sl->c, r->tl.tools)) ||
        (st = k3_conv_set_response_format(sl->c, r->fmt.type, r->fmt.schema)) ||
        (st = load_messages(sl->c, r)) || (stools_script_next(sl->c) < 0 && (st = K3_ERR_NOMEM)))
        return st == K3_ERR_ARG ? K3_ERR_ARG : K3_ERR_NOMEM;
    k3_conv_set_turn_seed(sl->c, j->seed);
    k3_conv_callbacks cb = {.on_think     = on_think,
                            .on_response  = on_response,
                            .ud           = j,
                            .on_tool_call = on_tool_call,
                            .on_token     = on_token};
    k3_model_info     mi;
    k3_model_get_info(srv.m, &mi);
    return k3_conv_gen_begin(sl->c, srv.m, sl->s, &cb, srv.chunk ? srv.chunk : mi.window, &sl->g);
}

/* The job's answer from its turn's status st (engine thread, lock free). */
static void job_finish(slot *sl, job *j, k3_status st) {
    int           n    = k3_conv_count(sl->c);
    const k3_msg *last = n ? k3_conv_msg(sl->c, n - 1) : NULL;
    k3_conv_set_grammar(sl->c, NULL); /* the job's grammar and bias go with it */
    k3_conv_set_logit_bias(sl->c, NULL, 0);
    if (last && (last->role != K3_ROLE_ASSISTANT || !last->has_stats))
        last = NULL; /* the turn did not start */
    pthread_mutex_lock(&srv.mu);
    gram_release_locked(j); /* now, not when a slow client has read the answer */
    if (last) {
        j->n_prompt = last->stats.n_prompt;
        j->n_cached = last->stats.n_cached;
        j->n_gen    = last->stats.n_gen;
        j->n_think  = last->stats.n_think;
        k3_stats ks;
        k3_session_stats(sl->s, &ks);
        j->window = ks.window;
    }
    if (st == K3_OK || (st == K3_ABORTED && j->stopped)) {
        if (!j->stopped)
            stop_filter(j, 1);
        json_t *rest = j->stopped ? NULL : lp_take(j, 0, 1); /* tokens that added no text at the end */
        if (rest && json_array_size(rest) && j->r->stream) {
            if (!j->role_sent) {
                j->role_sent = 1;
                sse_json(j, chunk(j, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL));
            }
            sse_json(j, chunk_lp(j, json_pack("{s:s}", "content", ""), NULL, rest));
        } else
            json_decref(rest);
        j->finish = j->stopped || !last || last->stats.stop == K3_STOP_EOS ? "stop" : "length";
        if (!j->stopped && last && last->n_tool_calls > 0) { /* the stream sent them, cut or not */
            j->calls = stools_calls_json(last);
            if (last->stats.stop == K3_STOP_EOS)
                j->finish = "tool_calls";
        }
        /* An answer that ended inside a call (max_tokens, the context, or the model's own end
         * before the call's close) reports length, streamed or not, and carries the cut call with
         * the arguments it has, as OpenAI does for a call that max_tokens cut: its arguments are
         * not JSON, which "tool_calls" would promise; a stream's deltas hold the same call, so an
         * SDK that gathers them builds the answer a plain request gets (doc/tool-calls.md). */
        if (!j->stopped && j->open_calls > 0 && j->cut_name) {
            j->finish = "length";
            if (!j->calls)
                j->calls = json_array();
            json_array_append_new(
                j->calls,
                stools_call_json(j->cut_id, j->cut_name, j->cut_args.p ? j->cut_args.p : "", j->cut_args.n));
        }
    } else if (st == K3_ABORTED && j->gram_over && !j->gone) {
        char m[200];
        snprintf(m, sizeof m,
                 "the grammar of response_format or tool_choice grew past the server's budget for them "
                 "(K3_SERVE_GRAMMAR_MB=%d) while it ran; retry later",
                 srv.gram_mb);
        job_fail_locked(j, 503, "server_error", "grammar_budget", m);
    } else if (st == K3_ABORTED && srv.stopping && !j->gone) {
        job_fail_locked(j, 503, "server_error", "shutting_down", "the server is shutting down");
    } else if (st == K3_ABORTED) {
        job_fail_locked(j, 499, "cancelled", j->cut ? "choice_failed" : "client_disconnected",
                        j->cut ? "another choice of the request failed" : "the client disconnected");
    } else if (st == K3_ERR_CONTEXT) {
        char m[600];
        snprintf(m, sizeof m, "messages: %s", k3_errmsg());
        m[strcspn(m, ";")] = 0; /* the conversation's advice is for the chat, not for a client */
        job_fail_locked(j, 400, "invalid_request_error", "context_length_exceeded", m);
        j->err_param = "messages"; /* OpenAI's param for a prompt over the context (it was null) */
    } else if (!last && (st == K3_ERR_ARG || st == K3_ERR_NOMEM)) { /* setting the turn up */
        job_fail_locked(j, st == K3_ERR_ARG ? 400 : 500,
                        st == K3_ERR_ARG ? "invalid_request_error" : "server_error",
                        st == K3_ERR_ARG ? "invalid_value" : "internal_error", k3_errmsg());
    } else {
        job_fail_locked(j, 500, "server_error", "engine_error", k3_errmsg());
    }
    if (!j->http && j->r->stream) { /* the request's usage and [DONE] follow its last choice (stream_tail) */
        if (!j->role_sent) {
            j->role_sent = 1;
            sse_json(j, chunk(j, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL));
        }
        sse_json(j, chunk(j, json_object(), j->finish));
    }
    pthread_mutex_unlock(&srv.mu);
}

static void log_job(const job *j) {
    double dt = now_s() - j->t0;
    if (!j->http)
        serve_log("#%u 200%s: %d prompt (%d cached) + %d completion tokens, prefill window %d, %s, %.2f s "
                  "(%d active, "
                  "%d queued)",
                  j->seq, j->r->stream ? " stream" : "", j->n_prompt, j->n_cached, j->n_gen, j->window,
                  j->finish, dt, srv.n_active, srv.n_queued);
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
        int keep = sl->key == j->key ? msgs_kept(sl->c, j->r) : -1;
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

/* Jobs ip runs in the slots. Lock held. */
static int addr_running_locked(const char *ip) {
    int n = 0;
    for (int i = 0; i < srv.n_slots; i++)
        n += srv.slots[i].j && !strcmp(srv.slots[i].j->ip, ip);
    return n;
}

/* The queued job to admit next, NULL for the head (*prev: the one before it): the head when it is
 * gone or the server stops (answered at once); else, of the first SERVE_FAIR_SCAN waiting, the
 * oldest whose client address runs the fewest jobs, so that one client's n choices take turns in
 * the slots with the other clients' requests rather than all going first. Lock held. */
static job *admit_next_locked(job **prev) {
    job *best = srv.head;
    *prev     = NULL;
    if (srv.stopping || best->gone)
        return best;
    int fewest = addr_running_locked(best->ip), k = 0;
    for (job *p = best, *q = best->next; q && fewest > 0 && ++k < SERVE_FAIR_SCAN; p = q, q = q->next) {
        int r = q->gone ? fewest : addr_running_locked(q->ip);
        if (r < fewest)
            fewest = r, best = q, *prev = p;
    }
    return best;
}

/* Moves queued jobs into free slots (admit_next_locked's order; all of them answered 503 while
 * stopping). Lock held; released while a turn begins. */
static void admit_locked(void) {
    while (srv.head) {
        job  *prev, *j = admit_next_locked(&prev);
        slot *sl = srv.stopping || j->gone ? NULL : pick_slot(j);
        if (!sl && !srv.stopping && !j->gone)
            return; /* every slot busy: j waits */
        if (prev)
            prev->next = j->next;
        else
            srv.head = j->next;
        if (srv.tail == j)
            srv.tail = prev;
        j->next = NULL;
        srv.n_queued--;
        j->queued = 0;
        if (!sl) {
            if (srv.stopping)
                job_fail_locked(j, 503, "server_error", "shutting_down", "the server is shutting down");
            else
                job_fail_locked(j, 499, "cancelled", j->cut ? "choice_failed" : "client_disconnected",
                                j->cut ? "another choice of the request failed while it was queued"
                                       : "the client disconnected while queued");
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
        for (int i = 0; i < srv.n_slots; i++) { /* the mask caches the step filled count; past the
                                                 * budget the turn that grew stops (503) */
            slot *sl = &srv.slots[i];
            if (sl->j && sl->g && gram_charge_locked(sl->j, sl->g) &&
                srv.gram_held > (size_t)srv.gram_mb << 20 && !sl->j->gram_over) {
                sl->j->gram_over = 1;
                serve_log("#%u grammar budget: %zu MB held (K3_SERVE_GRAMMAR_MB=%d); cancelled", sl->j->seq,
                          srv.gram_held >> 20, srv.gram_mb);
                k3_conv_cancel(sl->c);
            }
        }
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

/* ---- HTTP -------------------------------------------------------------------------------- */

/* A JSON body s (malloc'd, taken); allow: the Allow header of a 405. One request per
 * connection: every answer closes it (serve-gate.c read and checked the request). */
static int send_text(http_req *con, unsigned code, char *s, const char *allow) {
    if (!s)
        return -1;
    char extra[160] = "";
    if (allow)
        snprintf(extra, sizeof extra, "Allow: %s\r\n", allow);
    else if (code == 503 || code == 429) /* busy, shutting down, over a share: try again in a while */
        snprintf(extra, sizeof extra, "Retry-After: 5\r\n");
    if (con->req_id[0]) /* OpenAI's header, which its SDKs show as request_id / requestID */
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "X-Request-Id: %s\r\n", con->req_id);
    int rc = http_respond(con, (int)code, "application/json", extra, s, strlen(s));
    free(s);
    return rc;
}

static int send_json(http_req *con, unsigned code, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return send_text(con, code, s, NULL);
}

static int send_error(http_req *con, unsigned code, const char *type, const char *ecode, const char *msg) {
    return send_text(con, code, http_error_json(type, ecode, NULL, msg), NULL);
}

static int send_405(http_req *con, const char *allow) {
    char m[64];
    snprintf(m, sizeof m, "use %s", allow);
    return send_text(con, 405, http_error_json("invalid_request_error", "method_not_allowed", NULL, m),
                     allow);
}

static json_t *model_obj(void) {
    return json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", srv.name, "object", "model", "created",
                     (json_int_t)srv.t_start, "owned_by", "k3chat", "max_model_len", srv.info.max_ctx);
}

/* The index of the API key in an Authorization value v[0..n) (white space around it trimmed by
 * the head check; NULL: none), -1 when it is missing or wrong. Every key is compared over the
 * longest key's length: the time tells neither which byte or key differed nor a key's length. */
static int auth_key(const char *v, size_t n) {
    if (!v || n < 7 || strncasecmp(v, "Bearer ", 7))
        return -1;
    v += 7, n -= 7;
    while (n && (*v == ' ' || *v == '\t'))
        v++, n--;
    size_t longest = 0;
    for (int i = 0; i < srv.n_keys; i++)
        longest = srv.key_len[i] > longest ? srv.key_len[i] : longest;
    int found = -1;
    for (int i = 0; i < srv.n_keys; i++) {
        size_t   b    = srv.key_len[i];
        unsigned diff = (unsigned)(n != b);
        for (size_t k = 0; k < longest; k++) /* bytes past either end read as 0 */
            diff |=
                (unsigned)((k < n ? (unsigned char)v[k] : 0) ^ (k < b ? (unsigned char)srv.keys[i][k] : 0));
        found = diff == 0 ? i : found;
    }
    return found;
}

/* The end of a stream whose choices are all done: the error event of a choice that failed (the
 * others were cancelled), else usage when asked; then [DONE]. Lock held. */
static void stream_tail(const jgroup *g, txt_buf *out) {
    const job *f = group_failed(g);
    json_t    *o = NULL;
    if (f) /* failed mid-stream */
        o = json_pack("{s:{s:s,s:s,s:s?,s:s}}", "error", "message", f->err, "type", f->err_type, "param",
                      f->err_param, "code", f->err_code);
    else if (g->j[0]->r->include_usage) {
        o = answer_obj(g->j[0], "chat.completion.chunk");
        json_object_set_new(o, "choices", json_array());
        json_object_set_new(o, "usage", usage_obj(g->j, g->n));
    }
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s) {
        txt_buf_add(out, "data: ", 6);
        txt_buf_add(out, s, strlen(s));
        txt_buf_add(out, "\n\n", 2);
        free(s);
    }
    txt_buf_add(out, "data: [DONE]\n\n", 14);
}

/* The stream: the jobs' SSE bytes as they come (each chunk carries its choice's index), until all
 * are done or the client is gone. No write waits for the client: while the socket has not taken
 * the bytes sent, the jobs' new bytes stay in their buffers (where SERVE_SSE_MAX counts what the
 * client leaves unread) and this thread waits for room; once every choice is done, the rest and
 * the end go to the gate's writer (http_stream_end), so a slow reader of a finished stream holds
 * no request thread. */
static void send_stream(http_req *con, jgroup *g) {
    txt_buf out = {0};
    int     end = 0, ended = 0;
    char    head[96];
    snprintf(head, sizeof head, "Cache-Control: no-cache\r\nX-Request-Id: %s\r\n", con->req_id);
    if (http_stream_begin(con, 200, "text/event-stream", head) == 0)
        for (;;) {
            pthread_mutex_lock(&srv.mu);
            int left = http_stream_left(con) > 0;
            if (!group_gone_locked(g) && !group_done(g) && (left || !group_pending(g)))
                group_wait_step(g, left ? con->fd : -1);
            end   = group_gone_locked(g) || group_done(g);
            out.n = 0;
            for (int i = 0; i < g->n && (end || !left); i++) { /* the socket took the earlier bytes */
                job *j = g->j[i];
                if (j->sse.n > j->sse_off)
                    txt_buf_add(&out, j->sse.p + j->sse_off, j->sse.n - j->sse_off);
                j->sse.n = j->sse_off = 0;
            }
            if (end && !g->gone)
                stream_tail(g, &out);
            pthread_mutex_unlock(&srv.mu);
            if (out.oom) /* out of memory: the stream is cut */
                break;
            if (end) {
                ended = !g->gone && !http_stream_end(con, out.p, out.n);
                break;
            }
            if (out.n ? http_stream_write(con, out.p, out.n) : http_stream_flush(con))
                break;
        }
    free(out.p);
    if (con->stalled == HTTP_STALL_QUIET) {
        serve_log("#%u: the client took no byte of its stream for %d s (K3_SERVE_SEND_SECS): closed",
                  g->j[0]->seq, con->send_secs);
        con->stalled = HTTP_STALL_LOGGED; /* on_request says no more */
    }
    pthread_mutex_lock(&srv.mu);
    if (!ended)
        g->gone = 1, group_cancel_locked(g, 0); /* the response ended early: the client went away */
    for (int i = 0; i < g->n; i++)
        g->j[i]->fd = -1; /* the gate closes the socket: no shutdown of a number used again */
    pthread_mutex_unlock(&srv.mu);
}

/* The body handed to jansson in pieces; the pages it has read go back to the system as it goes,
 * so a large body is not held whole beside the text jansson builds from it. */
typedef struct body_feed {
    char  *p;
    size_t n, at, freed; /* freed: bytes [0, freed) returned (page-aligned in p) */
} body_feed;

static size_t feed_body(void *buf, size_t max, void *arg) {
    body_feed *f = arg;
    size_t     k = f->n - f->at < max ? f->n - f->at : max;
    if (!k)
        return 0; /* the end (an empty body has no buffer at all) */
    memcpy(buf, f->p + f->at, k);
    f->at += k;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE),
              lo   = ((uintptr_t)f->p + f->freed + page - 1) & ~(page - 1);
    uintptr_t hi   = ((uintptr_t)f->p + f->at) & ~(page - 1);
    if (hi >= lo + (256u << 10)) { /* read and never read again: MADV_DONTNEED zero-fills them */
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
        f->freed = hi - (uintptr_t)f->p;
    }
    return k;
}

/* At most SERVE_PARSING request bodies become JSON trees at once: an 8 MB body of small
 * objects (289,000 empty messages) makes a tree and request of ~200 MB, so the HTTP_MAX_CONN
 * request threads parsing together could take 12 GB; the others wait their turn here. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             n;
} parsing = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void parse_turn(int take) {
    pthread_mutex_lock(&parsing.mu);
    while (take && parsing.n >= SERVE_PARSING)
        pthread_cond_wait(&parsing.cv, &parsing.mu);
    parsing.n += take ? 1 : -1;
    if (!take)
        pthread_cond_signal(&parsing.cv);
    pthread_mutex_unlock(&parsing.mu);
}

/* choices[j->index] of a plain answer: the message (content null when the answer is only calls;
 * refusal null: the model has no refusal channel), logprobs (the entries released with the text;
 * null when not asked) and finish_reason. Lock held. */
static json_t *choice_obj(const job *j) {
    json_t *msg = json_pack("{s:s,s:s%,s:n}", "role", "assistant", "content", j->resp.p ? j->resp.p : "",
                            j->rel, "refusal");
    if (j->calls) {
        json_object_set(msg, "tool_calls", j->calls);
        if (!j->rel)
            json_object_set_new(msg, "content", json_null());
    }
    for (int k = 0; k < 2 && (j->r->think || j->reasoning.n); k++)
        json_object_set_new(msg, reasoning_keys[k],
                            json_stringn(j->reasoning.p ? j->reasoning.p : "", j->reasoning.n));
    json_t *lp = NULL;
    if (j->r->logprobs) {
        lp = json_array();
        for (int i = 0; i < j->lp_sent; i++)
            json_array_append(lp, j->lp[i].o);
    }
    return json_pack("{s:i,s:o,s:o,s:s}", "index", j->index, "message", msg, "logprobs",
                     j->r->logprobs ? logprobs_obj(lp) : json_null(), "finish_reason", j->finish);
}

/* Request seq's grammar takes the grammars' total past their budget: bytes (its own, or, `when`
 * its compile stopped, what the compile had built), held: the others'; alone: nothing else could
 * make room (400 grammar_too_large), else 503 grammar_budget. Sizes to a tenth of a MB (a compile
 * that stops at its first step has taken less than one). */
static void gram_refuse(http_req *con, unsigned seq, int alone, size_t held, size_t bytes, const char *when) {
    char   m[400];
    double mb = (double)bytes / (1 << 20), hmb = (double)held / (1 << 20);
    pthread_mutex_lock(&srv.mu);
    int q = srv.n_queued, a = srv.n_active;
    pthread_mutex_unlock(&srv.mu);
    if (alone)
        snprintf(
            m, sizeof m,
            "the grammar of response_format or tool_choice takes %s%.1f MB%s%s (for all n choices), more "
            "than the server's budget for them (K3_SERVE_GRAMMAR_MB=%d): simplify the schema",
            *when ? "over " : "", mb, *when ? " " : "", when, srv.gram_mb);
    else
        snprintf(m, sizeof m,
                 "the server is busy: the grammars of the requests it holds take %.1f MB, and this one's "
                 "%s%.1f MB%s%s would pass its budget for them (K3_SERVE_GRAMMAR_MB=%d); retry later",
                 hmb, *when ? "over " : "", mb, *when ? " " : "", when, srv.gram_mb);
    serve_log("#%u %d: grammar budget (%s%.1f MB%s%s; %.1f MB held, %d active, %d queued)", seq,
              alone ? 400 : 503, *when ? "over " : "", mb, *when ? " " : "", when, hmb, a, q);
    send_error(con, alone ? 400 : 503, alone ? "invalid_request_error" : "server_error",
               alone ? "grammar_too_large" : "grammar_budget", m);
}

/* A request's id: its answer's "id" and its X-Request-Id; its number (seq) is the log's "#seq". */
static void chat_id(char *out, size_t n, unsigned seq) {
    snprintf(out, n, "chatcmpl-k3-%016llx-%u", (unsigned long long)srv.id_tag, seq);
}

static void chat_completions(http_req *con) {
    json_error_t je;
    body_feed    feed = {con->body, con->body ? con->body_n : 0, 0, 0};
    if (feed.n >= 3 && !memcmp(feed.p, "\xef\xbb\xbf", 3))
        feed.at = 3; /* a UTF-8 BOM, which RFC 8259 lets a parser ignore (Windows tools write one) */
    char  *big = NULL, em[400];
    size_t big_n;
    if (sreq_big_ints(feed.p + feed.at, feed.n - feed.at, &big, &big_n, em, sizeof em)) {
        free(con->body);
        con->body = NULL;
        send_error(con, 400, "invalid_request_error", "integer_too_large", em);
        return;
    }
    if (big) { /* integers past int64 inside a schema, now reals: parse the copy */
        free(con->body);
        con->body = big;
        feed      = (body_feed){big, big_n, 0, 0};
    }
    parse_turn(1);
    json_t *b = json_load_callback(feed_body, &feed, JSON_REJECT_DUPLICATES, &je);
    free(con->body); /* the parsed tree holds what counts: the raw bytes go now */
    con->body = NULL;
    if (!b) {
        parse_turn(0);
        sreq_json_err(&je, em, sizeof em);
        send_error(con, 400, "invalid_request_error",
                   json_error_code(&je) == json_error_duplicate_key ? "duplicate_key" : "invalid_json", em);
        return;
    }
    /* the body read once; one job per choice, sharing it (refs; live: its grammar), choice i
     * sampling with the seed + i (vLLM's; a fresh seed when none is given) */
    static atomic_uint n_parsed;
    jgroup             g  = {.fd = con->fd, .v11 = con->v11};
    perr               e  = {{0}, {0}, {0}};
    gram_meter         gm = {.m = {.charge = gram_meter_charge, .ud = &gm}};
    sbody             *sb = calloc(1, sizeof *sb);
    int rc = sb ? sreq_parse(b, atomic_fetch_add(&n_parsed, 1), &srv.info, &gm.m, &sb->r, &e) : -2;
    if (!rc && sb->r.n > srv.n_slots + srv.max_queue)
        rc = serve_bad(&e, "invalid_value",
                       "n: %d choices cannot be held at once by this server: it runs %d (--parallel) and "
                       "queues %d (K3_SERVE_QUEUE)",
                       sb->r.n, srv.n_slots, srv.max_queue);
    json_decref(b);
    parse_turn(0);
    for (int i = 0; !rc && i < sb->r.n; i++) {
        job *j = calloc(1, sizeof *j);
        if (!j) {
            rc = -2;
            break;
        }
        g.j[g.n++] = j;
        j->b       = sb;
        j->r       = &sb->r;
        j->index   = i;
        j->seed    = sb->r.seed + (uint64_t)i;
        sb->refs++, sb->live++;
    }
    if (rc) {
        pthread_mutex_lock(&srv.mu);
        unsigned seq = ++srv.seq;
        chat_id(con->req_id, sizeof con->req_id, seq);
        srv.gram_held -= gm.m.granted; /* what its compile took, now freed */
        if (g.n) {
            group_drop_locked(&g); /* the last job frees sb */
        } else {
            pthread_mutex_unlock(&srv.mu);
            if (sb)
                sreq_free(&sb->r);
            free(sb);
        }
        if (rc == -2) {
            send_error(con, 500, "server_error", "out_of_memory", "out of memory");
            return;
        }
        if (gm.m.refused) { /* its compile would have passed the grammars' budget */
            gram_refuse(con, seq, gm.alone, gm.others, gm.m.used, "while it was compiled");
            return;
        }
        serve_log("#%u 400: %s", seq, e.msg);
        send_text(con, 400,
                  http_error_json("invalid_request_error", e.code, e.param[0] ? e.param : NULL, e.msg), NULL);
        return;
    }
    long long created = (long long)time(NULL);
    double    t0      = now_s();
    pthread_mutex_lock(&srv.mu);
    /* numbered as they reach the queue, in the lock that appends them: the numbers of queued jobs
     * are their queue order (they were numbered before their requests were parsed, and two parsed
     * side by side could reach the queue out of number order) */
    srv.gram_held -= gm.m.granted; /* its compile's steps: the grammar's own bytes replace them */
    size_t held0 = srv.gram_held, budget = (size_t)srv.gram_mb << 20;
    for (int i = 0; i < g.n; i++) {
        job *j = g.j[i];
        j->fd  = con->fd;
        j->key = con->key;
        snprintf(j->ip, sizeof j->ip, "%s", con->ip ? con->ip : "");
        j->created = created;
        j->t0      = t0;
        j->refs    = 2; /* this connection + the worker */
        j->seq     = ++srv.seq;
        chat_id(j->id, sizeof j->id, g.j[0]->seq);
        gram_charge_locked(j, NULL);
    }
    size_t   gb  = srv.gram_held - held0; /* its grammar, once for its choices */
    unsigned seq = g.j[0]->seq;
    snprintf(con->req_id, sizeof con->req_id, "%s", g.j[0]->id); /* the answer's id, or its error's */
    if (srv.stopping) {
        group_drop_locked(&g);
        send_error(con, 503, "server_error", "shutting_down", "the server is shutting down");
        return;
    }
    if (gb && srv.gram_held > budget) { /* its grammars would take the total past the budget */
        size_t held = srv.gram_held - gb;
        group_drop_locked(&g);
        gram_refuse(con, seq, gb > budget, held, gb, "");
        return;
    }
    /* free slots take theirs at once; a request of n choices needs room for all n; a full queue
     * makes room for an address within its share (srv.share) */
    int held = addr_jobs_locked(con->ip ? con->ip : "");
    if (srv.n_queued + g.n > srv.max_queue + (srv.n_slots - srv.n_active) &&
        (held + g.n > srv.share || !share_make_room_locked(g.n))) {
        int q = srv.n_queued, a = srv.n_active, n = g.n, over = held + g.n > srv.share;
        group_drop_locked(&g);
        char m[300];
        if (over)
            snprintf(
                m, sizeof m,
                "too many choices from this client address: it holds %d queued and running, and this "
                "request's %d would pass its share of %d (K3_SERVE_SHARE) while the server's queue is full "
                "(K3_SERVE_QUEUE=%d); retry later",
                held, n, srv.share, srv.max_queue);
        else
            snprintf(m, sizeof m,
                     "the server is busy: %d requests are waiting (K3_SERVE_QUEUE=%d); retry later", q,
                     srv.max_queue);
        if (over)
            serve_log("#%u 429: queue full, its address over its share (%d active, %d queued; it holds %d)",
                      seq, a, q, held);
        else
            serve_log("#%u 503: queue full (%d active, %d queued)", seq, a, q);
        send_error(con, over ? 429 : 503, over ? "rate_limit_error" : "server_error",
                   over ? "client_share" : "queue_full", m);
        return;
    }
    for (int i = 0; i < g.n; i++) {
        job *j = g.j[i];
        if (srv.tail)
            srv.tail->next = j;
        else
            srv.head = j;
        srv.tail = j;
        srv.n_queued++;
        j->queued = 1;
    }
    if (srv.n_active >= srv.n_slots) /* it waits (a free slot would take it at once) */
        serve_log("#%u queued: %d choice%s, grammar %zu MB (%d active, %d queued)", seq, g.n,
                  g.n > 1 ? "s" : "", gb >> 20, srv.n_active, srv.n_queued);
    pthread_cond_signal(&srv.work_cv);
    /* streaming: start the response at the first text (or at the end); plain: at the end */
    int stream = g.j[0]->r->stream;
    while (!group_done(&g) && !group_gone_locked(&g) && !(stream && group_pending(&g)))
        group_wait_step(&g, -1);
    int streams = stream && group_pending(&g) && !g.gone;
    if (!streams) /* no stream goes out: the socket is this thread's alone (a stream's: send_stream's end) */
        for (int i = 0; i < g.n; i++)
            g.j[i]->fd = -1;
    const job *f = g.gone ? NULL : group_failed(&g);
    if (g.gone || (f && !streams)) {
        char        type[32], ecode[40], msg[600];
        unsigned    code  = f ? (f->http == 499 ? 503 : (unsigned)f->http) : 0;
        const char *param = f ? f->err_param : NULL; /* a literal: outlives the job */
        if (f) {
            snprintf(type, sizeof type, "%s", f->err_type);
            snprintf(ecode, sizeof ecode, "%s", f->err_code);
            snprintf(msg, sizeof msg, "%s", f->err);
        }
        for (int i = 0; i < g.n; i++)
            job_unref_locked(g.j[i]);
        pthread_mutex_unlock(&srv.mu);
        if (f)
            send_text(con, code, http_error_json(type, ecode, param, msg), NULL);
        else
            con->failed = 1; /* the client is gone: close */
        return;
    }
    if (streams) {
        g.started = 1;
        pthread_mutex_unlock(&srv.mu);
        send_stream(con, &g);
        pthread_mutex_lock(&srv.mu);
        for (int i = 0; i < g.n; i++)
            job_unref_locked(g.j[i]);
        pthread_mutex_unlock(&srv.mu);
        return;
    }
    json_t *o = answer_obj(g.j[0], "chat.completion"), *choices = json_array();
    for (int i = 0; i < g.n; i++)
        json_array_append_new(choices, choice_obj(g.j[i]));
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_obj(g.j, g.n));
    for (int i = 0; i < g.n; i++)
        job_unref_locked(g.j[i]);
    pthread_mutex_unlock(&srv.mu);
    if (!o)
        send_error(con, 500, "server_error", "internal_error", "could not encode the answer");
    else
        send_json(con, 200, o);
}

/* A request, read and checked by serve-gate.c (authenticated too): route it and answer. */
static void route(http_req *con) {
    const char *url = con->path, *method = con->method;
    int         get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/health") || !strncmp(url, "/v1/models/", 11)) {
        if (!get)
            send_405(con, "GET, HEAD");
        else if (!strcmp(url, "/health"))
            send_json(con, 200, json_pack("{s:s}", "status", "ok"));
        else if (!strcmp(url, "/v1/models"))
            send_json(con, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_obj()));
        else if (strcmp(url + 11, srv.name))
            send_error(con, 404, "invalid_request_error", "model_not_found", "no such model");
        else
            send_json(con, 200, model_obj());
        return;
    }
    if (!strcmp(url, "/v1/chat/completions")) {
        if (!post)
            send_405(con, "POST");
        else
            chat_completions(con);
        return;
    }
    char m[300];
    snprintf(m, sizeof m, "no route %s %.200s (try GET /v1/models or POST /v1/chat/completions)", method,
             url);
    send_error(con, 404, "invalid_request_error", "not_found", m);
}

static void on_request(void *cls, http_req *con) {
    (void)cls;
    route(con);
    if (con->stalled == HTTP_STALL_QUIET) /* a stream's was logged with its number (send_stream) */
        serve_log("%s %.200s: the client took no byte of its answer for %d s (K3_SERVE_SEND_SECS): closed",
                  con->method, con->path, con->send_secs);
}

/* "[ADDR:]PORT": ADDR defaults to 127.0.0.1; IPv6 as [::1]:PORT. */
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
    /* digits only: strtol alone took " 0" and "+80" */
    size_t nd = strspn(port, "0123456789");
    if (!nd || port[nd] || nd > 5 || atol(port) > 65535)
        return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    return getaddrinfo(host[0] ? host : "127.0.0.1", port, &hints, out) == 0 ? 0 : -1;
}

/* Why the address of --serve SPEC could not be taken, in a user's words: the step that failed
 * (bind, mostly), the address and port, the likely cause, and the system's own words. */
static void listen_error(const char *spec, const struct addrinfo *ai, const char *step, int err) {
    char host[128] = "?", serv[16] = "?";
    getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof host, serv, sizeof serv,
                NI_NUMERICHOST | NI_NUMERICSERV);
    const struct sockaddr_in6 *a6  = (const struct sockaddr_in6 *)ai->ai_addr;
    int                        v6  = ai->ai_family == AF_INET6;
    const char                *why = NULL;
    if (err == EADDRINUSE)
        why = "address already in use (another server on this port?)";
    else if (v6 && err == EINVAL && IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr) && !a6->sin6_scope_id)
        why = "a link-local IPv6 address needs its interface as a scope, as in [fe80::1%eth0]:PORT";
    else if (err == EADDRNOTAVAIL)
        why = "the address is not one of this machine's (0.0.0.0 or [::] listens on all of them)";
    else if (err == EACCES && strcmp(serv, "0") && atoi(serv) < 1024)
        why = "a port below 1024 takes root or CAP_NET_BIND_SERVICE";
    else if (err == EAFNOSUPPORT)
        why = v6 ? "IPv6 is off on this machine" : "IPv4 is off on this machine";
    int said = !why || err == EADDRINUSE; /* the reason is the system's own words already */
    txt_term_printf(stderr, "k3chat: --serve %s: cannot %s %s%s%s port %s: %s%s%s%s\n", spec, step,
                    v6 ? "[" : "", host, v6 ? "]" : "", serv, why ? why : strerror(err), said ? "" : " (",
                    said ? "" : strerror(err), said ? "" : ")");
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
        srv.key_len[srv.n_keys] = n;
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

/* A setting from the environment (unset or empty: def); a bad value is an error at start. */
static int env_count(enum k3_setting_id id, int def, int *out) {
    *out = def;
    if (k3_setting_env_int(id, out)) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        return -1;
    }
    return 0;
}

static int is_loopback(const struct sockaddr *a) {
    if (a->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
    return a->sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

/* K3_SERVE_GRAMMAR_MB unset (0): 1/32 of the machine's physical memory, or of the process's
 * cgroup memory limit when that is smaller (a container's), from 64 to 4096 MB. The memory fit
 * leaves 5% of the available memory (and 0.5 GB) beside the model's plan; 1/32 (3%) stays
 * inside it, and the grammars of 4,096 MB serve dozens of requests at the compile limits. */
static int gram_default_mb(void) {
    double phys, limit, room;
    k3_machine_memory(&phys, &limit, &room);
    double mem = limit > 0 && (phys <= 0 || limit < phys) ? limit : phys;
    double mb  = mem > 0 ? mem / 32 / (1 << 20) : 1024;
    return mb < 64 ? 64 : mb > 4096 ? 4096 : (int)mb;
}

/* The server's settings from the environment, read before the port is taken and the model
 * loads (a typo costs no load): K3_SERVE_HEAD_SECS, K3_SERVE_BODY_SECS and K3_SERVE_SEND_SECS into
 * the gate's rules, the queue's, the prefill chunk's and the shared prompt cache's (more snapshots
 * and bytes than a chat's: 16, 2000 MB) into srv. 0, or -1 with the reason on stderr. */
static int serve_env(http_rules *rules) {
    srv.snap_mb = 2000;
    if (env_count(K3_SETTING_SERVE_HEAD_SECS, SERVE_DEFAULT(SERVE_HEAD_SECS), &rules->head_secs) ||
        env_count(K3_SETTING_SERVE_BODY_SECS, SERVE_DEFAULT(SERVE_BODY_SECS), &rules->body_secs) ||
        env_count(K3_SETTING_SERVE_SEND_SECS, SERVE_DEFAULT(SERVE_SEND_SECS), &rules->send_secs) ||
        env_count(K3_SETTING_SERVE_QUEUE, SERVE_DEFAULT(SERVE_QUEUE), &srv.max_queue) ||
        env_count(K3_SETTING_SERVE_CHUNK, SERVE_DEFAULT(SERVE_CHUNK), &srv.chunk) ||
        env_count(K3_SETTING_SERVE_QUEUE_SECS, SERVE_DEFAULT(SERVE_QUEUE_SECS), &srv.queue_secs) ||
        env_count(K3_SETTING_SERVE_SHARE, SERVE_DEFAULT(SERVE_SHARE), &srv.share) ||
        env_count(K3_SETTING_SERVE_GRAMMAR_MB, SERVE_DEFAULT(SERVE_GRAMMAR_MB), &srv.gram_mb) ||
        env_count(K3_SETTING_CONV_SNAPSHOTS, 16, &srv.n_snaps))
        return -1;
    if ((srv.gram_auto = !srv.gram_mb))
        srv.gram_mb = gram_default_mb();
    if (k3_setting_env(K3_SETTING_CONV_SNAPSHOT_MB, &srv.snap_mb)) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        return -1;
    }
    return 0;
}

/* --parallel slots, each a conversation (its session is made on first use); one prompt cache
 * for all of them: clients take turns on the slots, so keep more saved states than the chat
 * does (least recently used out; serve_env read the sizes). The scripted replies (tests) from
 * the environment. 0, or -1 with the reason on stderr. */
static int serve_slots(const ui_opts *o) {
    srv.n_slots = o->parallel > 0 ? o->parallel : SERVE_DEFAULT(PARALLEL);
    if (!(srv.slots = calloc((size_t)srv.n_slots, sizeof *srv.slots))) {
        fprintf(stderr, "k3chat: out of memory\n");
        return -1;
    }
    for (int i = 0; i < srv.n_slots; i++) {
        srv.slots[i].key = -1;
        if (!(srv.slots[i].c = k3_conv_new())) {
            fprintf(stderr, "k3chat: out of memory\n");
            return -1;
        }
        if (i)
            k3_conv_share_prompt_cache(srv.slots[i].c, srv.slots[0].c);
    }
    if (k3_conv_set_prompt_cache(srv.slots[0].c, srv.n_snaps, srv.snap_mb)) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        return -1;
    }
    const char *script = k3_setting_env_str(K3_SETTING_SERVE_SCRIPT);
    stools_err  se;
    if (script && stools_script_load(script, srv.m, &se)) {
        txt_term_printf(stderr, "k3chat: %s\n", se.msg);
        return -1;
    }
    return 0;
}

/* The model id: --model, else the model directory's last component. */
static void serve_name(const ui_opts *o, char *dname, size_t cap) {
    const char *dir = o->dir;
    size_t      dl  = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    const char *slash = memrchr(dir, '/', dl);
    snprintf(dname, cap, "%.*s", (int)(dl - (slash ? (size_t)(slash + 1 - dir) : 0)),
             slash ? slash + 1 : dir);
    srv.name = o->model_name ? o->model_name : dname;
}

/* The signals that stop the server (cli_serve blocks them; sig_main takes them). SIGHUP is one: a
 * daemon's convention is to reload its configuration, but a server's settings are fixed at its start
 * (the model, the slots, the keys), so SIGHUP means what it does for any program, its terminal went
 * away, and gets the same orderly stop as SIGTERM rather than the default action's abrupt end (open
 * streams cut with no error event and no [DONE]). */
static const char *sig_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM";
}

/* SIGINT/SIGTERM/SIGHUP: stop accepting, cancel the running turns, answer the queue, let every
 * response finish (up to SERVE_DRAIN_SECS). Joins the engine thread wt. */
static void serve_stop(http_gate *gate, int sig, pthread_t wt) {
    serve_log("%s: shutting down", sig_name(sig));
    http_gate_stop(gate); /* no new connections; those not handed on yet get 503 */
    pthread_mutex_lock(&srv.mu);
    srv.stopping = 1;
    for (int i = 0; i < srv.n_slots; i++) /* the running turns end as shutting_down */
        if (srv.slots[i].j)
            k3_conv_cancel(srv.slots[i].c);
    pthread_cond_broadcast(&srv.work_cv);
    pthread_mutex_unlock(&srv.mu);
    pthread_join(wt, NULL); /* finishes the running job (cancelled) and answers the queue */
    if (http_gate_drain(gate, SERVE_DRAIN_SECS)) /* every response out, its stream terminated */
        serve_log("connections still open after %d s: closing them", SERVE_DRAIN_SECS);
    serve_log("%lu answered, %lu cancelled, %lu failed", srv.n_ok, srv.n_cancel, srv.n_err);
}

/* SIGINT/SIGTERM/SIGHUP: blocked in every thread but sig_main, which waits for them from the moment the
 * port is taken. Before the server is ready (the model loading: minutes for a large one) there is
 * nothing to finish, so a signal ends the process at once, as the signal (exit status 128 + N);
 * once cli_serve says it serves, the signal is handed to it for the orderly stop (serve_stop). */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             serving, sig;
} sigs_at = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *sig_main(void *arg) {
    const sigset_t *set = arg;
    int             sig = 0;
    while (sigwait(set, &sig)) {
    }
    pthread_mutex_lock(&sigs_at.mu);
    if (sigs_at.serving) {
        sigs_at.sig = sig;
        pthread_cond_signal(&sigs_at.cv);
        pthread_mutex_unlock(&sigs_at.mu);
        return NULL;
    }
    fprintf(stderr, "k3chat: %s before the server was ready: exiting\n", sig_name(sig));
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    signal(sig, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig); /* this thread alone takes it now: the process ends as the signal */
    _exit(128 + sig);
}

/* Waits for the signal that stops a server that is ready (the signal thread then ends). */
static int sig_wait_serving(pthread_t th) {
    pthread_mutex_lock(&sigs_at.mu);
    sigs_at.serving = 1;
    while (!sigs_at.sig)
        pthread_cond_wait(&sigs_at.cv, &sigs_at.mu);
    int sig = sigs_at.sig;
    pthread_mutex_unlock(&sigs_at.mu);
    pthread_join(th, NULL);
    return sig;
}

int cli_serve(const ui_opts *o) {
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
    http_rules rules = {.keyless     = !o->api_key,
                        .allow_hosts = o->allow_hosts,
                        .max_body    = SERVE_MAX_BODY,
                        .auth        = srv.n_keys ? auth_key : NULL};
    if (serve_env(&rules)) { /* a bad setting fails here, before the port is taken */
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
    const char *step;
    http_gate  *gate = http_gate_open(ai->ai_addr, ai->ai_addrlen, &rules, &step);
    if (!gate) {
        listen_error(o->serve, ai, step, errno);
        freeaddrinfo(ai);
        return 1;
    }
    /* signals: every thread created from here on blocks them; sig_main takes them */
    static sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    struct sigaction hup;
    if (sigaction(SIGHUP, NULL, &hup) || hup.sa_handler != SIG_IGN)
        sigaddset(&sigs, SIGHUP); /* not under nohup: a blocked signal is taken even when ignored */
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int       rc = 1;
    k3_params par;
    pthread_t wt, st;
    int       have_worker = 0, have_sig = !pthread_create(&st, NULL, sig_main, &sigs);
    if (!have_sig) {
        fprintf(stderr, "k3chat: cannot start the signal thread\n");
        http_gate_free(gate);
        free_keys();
        freeaddrinfo(ai);
        return 1;
    }
    k3_status pst = k3_params_default(&par);
    par.sessions =
        o->parallel > 0 ? o->parallel : SERVE_DEFAULT(PARALLEL); /* the memory fit counts every slot */
    if (pst || load_model_verbose(o->dir, &par, &srv.m)) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        goto done;
    }
    if (serve_slots(o))
        goto done;
    /* the same model answers with the same fingerprint, across restarts (k3_conv_set_model's hash) */
    if (k3_conv_set_model(srv.slots[0].c, o->dir, NULL)) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        goto done;
    }
    snprintf(srv.fingerprint, sizeof srv.fingerprint, "fp_%s", k3_conv_model_fingerprint(srv.slots[0].c));
    k3_model_get_info(srv.m, &srv.info);
    if (sformat_init(srv.m, &srv.info)) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        goto done;
    }
    char dname[256];
    serve_name(o, dname, sizeof dname);
    srv.t_start = (long long)time(NULL);
    /* completion ids: the start second alone was the same for two servers started together */
    if (getrandom(&srv.id_tag, sizeof srv.id_tag, 0) != (ssize_t)sizeof srv.id_tag)
        srv.id_tag = (uint64_t)srv.t_start << 32 ^ (uint64_t)getpid() ^ (uint64_t)(now_s() * 1e9);
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
    if (http_gate_start(gate, on_request, NULL)) {
        fprintf(stderr, "k3chat: --serve %s: cannot start the HTTP server (%s)\n", o->serve, strerror(errno));
        goto done;
    }
    char host[128] = "?";
    getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof host, NULL, 0, NI_NUMERICHOST);
    fprintf(stderr, "k3chat: the requests' grammars may take %d MB (K3_SERVE_GRAMMAR_MB%s)\n", srv.gram_mb,
            srv.gram_auto ? " unset: 1/32 of the machine's memory or its cgroup limit" : "");
    fprintf(stderr, "k3chat: serving %s (context %d) on http://%s%s%s:%u/v1%s\n", srv.name, srv.info.max_ctx,
            ai->ai_family == AF_INET6 ? "[" : "", host, ai->ai_family == AF_INET6 ? "]" : "",
            http_gate_port(gate), srv.n_keys ? " (API key required)" : "");
    serve_stop(gate, sig_wait_serving(st), wt);
    have_sig = have_worker = 0;
    rc                     = 0;
done:
    if (have_sig) { /* a failed start: the signal thread waits in sigwait (a cancellation point) */
        pthread_cancel(st);
        pthread_join(st, NULL);
    }
    if (have_worker) {
        pthread_mutex_lock(&srv.mu);
        srv.stopping = 1;
        pthread_cond_broadcast(&srv.work_cv);
        pthread_mutex_unlock(&srv.mu);
        pthread_join(wt, NULL);
    }
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
