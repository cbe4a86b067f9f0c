/* session.c: the decode state and the engine API over it: feed (prefill windows, chunks and
 * decode), cancel, snapshots, statistics and the validation hooks' files (K3_LOGITS, K3_TRACE,
 * K3_X0). The model itself, input to logits, is model_forward (forward.c).
 *
 * DESIGN
 * k3_session_feed() splits the ids into chunks of K3_CHUNK and runs each chunk layer-major
 * (forward.c). A chunk is applied atomically: the layers write only uncommitted state (the KDA
 * buffers 1-sel, MLA cache rows past pos), and commit() flips sel, advances pos and publishes
 * the logits and hook rows. The cancel flag is checked before every chunk and between the
 * layers of a chunk; an aborted chunk is simply never committed. Hook files receive rows at
 * commit, so they always hold exactly the committed positions, in order.
 *
 * k3_session_feed_batch() runs the same passes (fwd_pass, model-impl.h) over the columns of
 * several sessions: rounds of at most K3_CHUNK columns, one per session with ids left and the
 * rest of the budget to the longer feeds in order; while a feed has more than a chunk left
 * (a joining prompt) and the Vulkan tier is off, a round is a prefill window of up to the fit's
 * window instead (the others' columns in it, the prompt's experts read once per window: the
 * window buffer over the lead's chunk scratch). Each session of a pass is committed on its
 * own; a session cancelled between layers leaves the pass (its columns are compacted away) and
 * the others go on. The scratch is the lead session's (ss[0]) chunk buffer, or, with more
 * sessions than K3_CHUNK, a batch buffer it keeps. Statistics: token counts as alone, each
 * session the call's wall time, the expert tier's counters split by columns.
 */
#include "model-impl.h"
#include "vkt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX2(a, b) ((a) > (b) ? (a) : (b))
#define MIN2(a, b) ((a) < (b) ? (a) : (b))

static k3_status nomem(void) {
    return k3_err(K3_ERR_NOMEM, "session: out of memory");
}

static float *falloc(size_t n) {
    float *p = k3_aligned_alloc(64, (n ? n : 1) * sizeof(float));
    if (p)
        memset(p, 0, (n ? n : 1) * sizeof(float));
    return p;
}

/* ==== new / free ============================================================= */

static k3_status read_x0(k3_session *s, const char *path) {
    int   D = s->m->cfg.hidden;
    FILE *f = fopen(path, "rb");
    if (!f)
        return k3_err(K3_ERR_IO, "K3_X0=%s: %s", path, strerror(errno));
    k3_status   st = K3_OK;
    long        sz = -1;
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && !S_ISREG(sb.st_mode)) { /* a directory read as 2^63-1 bytes */
        st = k3_err(K3_ERR_IO, "K3_X0=%s: %s", path,
                    S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
        goto done;
    }
    if (fseek(f, 0, SEEK_END) == 0)
        sz = ftell(f);
    rewind(f);
    if (sz <= 0 || sz % ((long)D * 4)) {
        st = k3_err(K3_ERR_FORMAT,
                    "K3_X0=%s: %ld bytes, expected a positive multiple of %d "
                    "(positions x hidden_size f32)",
                    path, sz, D * 4);
        goto done;
    }
    s->x0_rows = (int)(sz / ((long)D * 4));
    if (!(s->x0 = falloc((size_t)sz / 4))) {
        st = nomem();
        goto done;
    }
    if (fread(s->x0, 4, (size_t)sz / 4, f) != (size_t)sz / 4) {
        st = k3_err(K3_ERR_IO, "K3_X0=%s: short read", path);
        goto done;
    }
    /* a NaN or inf here would be reported as layer 0's hidden state: name the row instead */
    size_t i = model_first_nonfinite(s->x0, ST_F32, (size_t)sz / 4);
    if (i < (size_t)sz / 4)
        st = k3_err(K3_ERR_NUMERIC, "K3_X0=%s: row %zu (position), column %zu is %s", path, i / (size_t)D,
                    i % (size_t)D, isnan(s->x0[i]) ? "NaN" : "infinite");
done:
    fclose(f);
    return st;
}

/* The buffers of a chunk buffer of C columns (the attention scratch of one chunk) and W
 * window columns (what a pass keeps for each of its columns: hidden states, AttnRes blocks,
 * the MoE's routing table and outputs) with lrows rows of logits, and their element counts
 * (floats or ints, 4 bytes each; ints zeroed): one list for chunk_buf_alloc, the window
 * buffers and the memory fit. */
typedef struct cb_part {
    void **p;
    size_t n;
    int    ints;
    int    win; /* 1: per window column (or the logits rows), 0: per chunk */
} cb_part;
#define CB_PARTS (CHUNK_PROJ + 21)

static void cb_parts(const k3_config *c, int n_run, int C, int W, int lrows, long T, chunk_buf *b,
                     cb_part *o) {
    const size_t D = (size_t)c->hidden, V = (size_t)c->vocab;
    const size_t H = (size_t)c->kda_heads, d = (size_t)c->kda_head_dim, P = H * d, K = (size_t)c->conv_k;
    const size_t Hm = (size_t)c->n_heads, kl = (size_t)c->kv_lora, qw = (size_t)(c->nope + c->rope);
    const size_t L = (size_t)c->latent, k = (size_t)c->n_active, E = (size_t)c->n_experts, Cz = (size_t)C;
    const size_t Wz = (size_t)W;
    const size_t NB = (size_t)((n_run + c->attn_res_block - 1) / c->attn_res_block);
    /* the widest per-token projection any layer writes into proj[] */
    size_t pw  = MAX2(MAX2(P, Hm * qw), MAX2(kl + (size_t)c->rope, Hm * (size_t)c->v_dim));
    size_t mlp = MAX2((size_t)(c->n_shared * c->moe_inter), (size_t)c->inter);
    pw         = MAX2(pw, MAX2(MAX2((size_t)c->q_lora, E), mlp));
    pw         = MAX2(pw, MAX2(MAX2(D, L), (size_t)c->moe_inter));
    size_t  gw = MAX2(MAX2((size_t)c->nope, kl), MAX2(L, H)), gw2 = MAX2(MAX2((size_t)c->v_dim, kl), L);
    cb_part parts[CB_PARTS] = {
        {(void **)&b->h, Wz * D, 0, 1},
        {(void **)&b->blocks, Wz * NB * D, 0, 1},
        {(void **)&b->x, Wz * D, 0, 1},
        {(void **)&b->xn, Wz * D, 0, 1},
        {(void **)&b->y, Wz * D, 0, 1},
        {(void **)&b->win, 3 * (K - 1 + Cz) * P, 0, 0},
        {(void **)&b->mla_qlat, Hm * Cz * kl, 0, 0},
        {(void **)&b->mla_ctx, Hm * Cz * kl, 0, 0},
        {(void **)&b->gath_in, Cz * gw, 0, 0},
        {(void **)&b->gath_out, Cz * gw2, 0, 0},
        {(void **)&b->scores, Hm * (size_t)T, 0, 0},
        {(void **)&b->moe_y, Wz * k * L, 0, 1},
        {(void **)&b->moe_z, Wz * L, 0, 1},
        {(void **)&b->moe_w, Wz * k, 0, 1},
        {(void **)&b->moe_sel, Wz * k, 1, 1},
        {(void **)&b->moe_tok, Wz * k, 1, 1},
        {(void **)&b->moe_ids, E + 1, 1, 0},
        {(void **)&b->moe_res, E + 1, 1, 0},
        {(void **)&b->moe_dev, Wz * (k + 1), 1, 1},
        {(void **)&b->moe_resy, E * L, 0, 0},
        {(void **)&b->logits, (size_t)lrows * V, 0, 1},
    };
    for (int i = 0; i < CHUNK_PROJ; i++) /* the projection slots, (C, pw) each */
        parts[21 + i] = (cb_part){(void **)&b->proj[i], Cz * pw, 0, 0};
    memcpy(o, parts, sizeof parts);
}

uint64_t chunk_buf_bytes(const k3_config *c, int n_run, int C, int lrows, long T) {
    chunk_buf b;
    cb_part   o[CB_PARTS];
    uint64_t  n = 0;
    cb_parts(c, n_run, C, C, lrows, T, &b, o);
    for (int i = 0; i < CB_PARTS; i++)
        n += (uint64_t)o[i].n * 4;
    return n;
}

uint64_t window_buf_bytes(const k3_config *c, int n_run, int W, int lrows) {
    chunk_buf b;
    cb_part   o[CB_PARTS];
    uint64_t  n = 0;
    cb_parts(c, n_run, 1, W, lrows, 0, &b, o);
    for (int i = 0; i < CB_PARTS; i++)
        n += o[i].win ? (uint64_t)o[i].n * 4 : 0;
    return n;
}

uint64_t session_scratch_bytes(const k3_config *c, int n_run, int C, long T) {
    return chunk_buf_bytes(c, n_run, C, C, T) + (uint64_t)c->vocab * 4 + /* logits, dtmp */
           (uint64_t)2 * (uint64_t)c->kda_heads * (uint64_t)c->kda_head_dim * sizeof(double);
}

/* Allocate the parts of o[] that WIN selects (all: -1); on failure free what was allocated. */
static int cb_alloc_parts(cb_part *o, int win) {
    for (int i = 0; i < CB_PARTS; i++) {
        if (win >= 0 && o[i].win != win)
            continue;
        if (!(*o[i].p =
                  o[i].ints ? (void *)calloc(o[i].n ? o[i].n : 1, sizeof(int)) : (void *)falloc(o[i].n))) {
            for (int j = 0; j < i; j++)
                if (win < 0 || o[j].win == win) {
                    free(*o[j].p);
                    *o[j].p = NULL;
                }
            return -1;
        }
    }
    return 0;
}

k3_status chunk_buf_alloc(const k3_model *m, chunk_buf *b, int C, int lrows) {
    _Static_assert(sizeof(float) == 4 && sizeof(int) == 4, "chunk buffers count 4-byte elements");
    cb_part o[CB_PARTS];
    memset(b, 0, sizeof *b);
    cb_parts(&m->cfg, m->n_run, C, C, lrows, m->par.max_ctx, b, o);
    if (cb_alloc_parts(o, -1))
        return nomem();
    if (m->par.trace_path && !(b->trace = falloc((size_t)C * m->n_run * m->cfg.hidden))) {
        chunk_buf_free(b);
        return nomem();
    }
    return K3_OK;
}

/* A window buffer of W columns over base (a session's chunk buffer): base's chunk scratch,
 * its own window parts (and lrows rows of logits, and the K3_TRACE rows). */
static k3_status window_buf_alloc(const k3_model *m, const chunk_buf *base, int W, int lrows, chunk_buf *b) {
    cb_part o[CB_PARTS];
    int     test_max = 0; /* K3_TEST_WINDOW_MAX: a larger buffer fails as out of memory */
    if (!k3_setting_env_int(K3_SETTING_TEST_WINDOW_MAX, &test_max) && test_max > 0 && W > test_max) {
        *b = (chunk_buf){0};
        return nomem();
    }
    *b = *base;
    cb_parts(&m->cfg, m->n_run, 1, W, lrows, 0, b, o);
    if (cb_alloc_parts(o, 1)) {
        *b = (chunk_buf){0};
        return nomem();
    }
    b->trace = NULL;
    if (m->par.trace_path && !(b->trace = falloc((size_t)W * m->n_run * m->cfg.hidden))) {
        window_buf_free(m, b);
        return nomem();
    }
    return K3_OK;
}

void window_buf_free(const k3_model *m, chunk_buf *b) {
    cb_part o[CB_PARTS];
    if (!b->h)
        return;
    cb_parts(&m->cfg, m->n_run, 1, 1, 1, 0, b, o);
    for (int i = 0; i < CB_PARTS; i++)
        if (o[i].win)
            free(*o[i].p);
    free(b->trace);
    *b = (chunk_buf){0};
}

void chunk_buf_free(chunk_buf *b) {
    void *bufs[] = {b->h,        b->blocks,   b->x,       b->xn,       b->y,       b->win,
                    b->mla_qlat, b->mla_ctx,  b->gath_in, b->gath_out, b->scores,  b->moe_y,
                    b->moe_z,    b->moe_sel,  b->moe_w,   b->moe_tok,  b->moe_ids, b->moe_res,
                    b->moe_dev,  b->moe_resy, b->logits,  b->trace};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    for (int i = 0; i < CHUNK_PROJ; i++)
        free(b->proj[i]);
    memset(b, 0, sizeof *b);
}

k3_status k3_session_new(k3_model *m, k3_session **out) {
    *out               = NULL;
    const k3_config *c = &m->cfg;
    k3_session      *s = calloc(1, sizeof *s);
    if (!s)
        return nomem();
    s->m     = m;
    s->chunk = m->par.chunk;
    atomic_init(&s->cancel, 0);
    const int T = m->par.max_ctx, P = c->kda_heads * c->kda_head_dim, d = c->kda_head_dim;
    const int K = c->conv_k, kl = c->kv_lora;
    k3_status st = k3_setting_env_int(K3_SETTING_TEST_PREFILL_DELAY, &s->delay_ms);
    if (!st)
        st = k3_setting_env_int(K3_SETTING_TEST_DECODE_DELAY, &s->decode_delay_ms);
    s->nan_id = -1;
    if (!st)
        st = k3_setting_env_int(K3_SETTING_TEST_NAN_TOKEN, &s->nan_id);
    if (st)
        goto fail;

    if (!(s->ls = calloc((size_t)c->n_layers, sizeof *s->ls)))
        goto oom;
    for (int l = 0; l < m->n_run; l++) {
        layer_state *ls = &s->ls[l];
        if (c->layer_kind[l] == K3_LAYER_KDA) {
            for (int i = 0; i < 2; i++)
                if (!(ls->S[i] = falloc((size_t)P * d)) || !(ls->tail[i] = falloc((size_t)3 * (K - 1) * P)))
                    goto oom;
        } else if (!(ls->c = falloc((size_t)T * kl)) || !(ls->kr = falloc((size_t)T * c->rope)))
            goto oom;
    }
    if ((st = chunk_buf_alloc(m, &s->cb, s->chunk, s->chunk)))
        goto fail;
    if (!(s->logits = falloc((size_t)c->vocab)) || !(s->dtmp = calloc((size_t)2 * P, sizeof(double))))
        goto oom;
    if (m->par.logits_path && !(s->f_logits = fopen(m->par.logits_path, "wb"))) {
        st = k3_err(K3_ERR_IO, "K3_LOGITS=%s: %s", m->par.logits_path, strerror(errno));
        goto fail;
    }
    if (m->par.trace_path && !(s->f_trace = fopen(m->par.trace_path, "wb"))) {
        st = k3_err(K3_ERR_IO, "K3_TRACE=%s: %s", m->par.trace_path, strerror(errno));
        goto fail;
    }
    if (m->par.x0_path && (st = read_x0(s, m->par.x0_path)))
        goto fail;
    s->stats.expert_gb_budget = k3_model_expert_budget(m);
    *out                      = s;
    return K3_OK;
oom:
    st = nomem();
fail:
    k3_session_free(s);
    return st;
}

void k3_session_free(k3_session *s) {
    if (!s)
        return;
    if (s->ls)
        for (int l = 0; l < s->m->cfg.n_layers; l++) {
            layer_state *ls = &s->ls[l];
            free(ls->S[0]);
            free(ls->S[1]);
            free(ls->tail[0]);
            free(ls->tail[1]);
            free(ls->c);
            free(ls->kr);
        }
    free(s->ls);
    chunk_buf_free(&s->cb);
    chunk_buf_free(&s->bb);
    free(s->logits);
    free(s->dtmp);
    free(s->x0);
    if (s->f_logits)
        fclose(s->f_logits);
    if (s->f_trace)
        fclose(s->f_trace);
    free(s);
}

/* Zero the committed state: position 0 of a new conversation. */
void k3_session_reset(k3_session *s) {
    const k3_config *c = &s->m->cfg;
    const int        P = c->kda_heads * c->kda_head_dim;
    for (int l = 0; l < s->m->n_run; l++) {
        layer_state *ls = &s->ls[l];
        if (ls->S[0]) {
            memset(ls->S[ls->sel], 0, (size_t)P * c->kda_head_dim * sizeof(float));
            memset(ls->tail[ls->sel], 0, (size_t)3 * (c->conv_k - 1) * P * sizeof(float));
        }
    }
    s->pos         = 0;
    s->have_logits = 0;
    atomic_store(&s->cancel, 0);
}

int k3_session_pos(const k3_session *s) {
    return s->pos;
}

const float *k3_session_logits(const k3_session *s) {
    return s->have_logits ? s->logits : NULL;
}

void k3_session_cancel(k3_session *s) {
    atomic_store(&s->cancel, 1);
}

/* ==== feed ==================================================================== */

static k3_status write_rows(FILE *f, const char *var, const float *x, size_t n) {
    if (fwrite(x, sizeof(float), n, f) != n || fflush(f))
        return k3_err(K3_ERR_IO, "%s: write failed: %s", var, strerror(errno));
    return K3_OK;
}

/* Apply a chunk of n tokens: flip the KDA buffers, advance pos, publish the logits (lg: the
 * rows of the last lcnt positions) and the hook rows (trace: n rows of (n_run, D)). */
static k3_status commit(k3_session *s, int n, const float *lg, int lcnt, const float *trace) {
    const k3_model *m = s->m;
    const int       V = m->cfg.vocab, D = m->cfg.hidden;
    for (int l = 0; l < m->n_run; l++)
        if (s->ls[l].S[0])
            s->ls[l].sel ^= 1;
    s->pos += n;
    memcpy(s->logits, lg + (size_t)(lcnt - 1) * V, (size_t)V * sizeof(float));
    s->have_logits = 1;
    k3_status st   = K3_OK;
    if (s->f_logits)
        st = write_rows(s->f_logits, "K3_LOGITS", lg, (size_t)lcnt * V);
    if (!st && s->f_trace)
        st = write_rows(s->f_trace, "K3_TRACE", trace, (size_t)n * m->n_run * D);
    return st;
}

/* A pass being run, and the outcome of each of its sessions (by the caller's index). */
typedef struct pass_run {
    fwd_pass   p;
    k3_status *st;    /* [caller's count]                                    */
    int        named; /* messages say "session I: " (a batch)                 */
    k3_status  first; /* the first failure of the whole call, and its message */
    char       msg[512];
} pass_run;

/* Session ix failed with st (its message is current). */
static void fail_ix(pass_run *r, int ix, k3_status st) {
    r->st[ix] = st;
    if (r->first)
        return;
    r->first = st;
    if (r->named)
        snprintf(r->msg, sizeof r->msg, "session %d: %s", ix, k3_errmsg());
    else
        snprintf(r->msg, sizeof r->msg, "%s", k3_errmsg());
}

/* model_forward's report: segment sg failed with st (its message is current). */
static void seg_failed(void *ud, const pass_seg *sg, k3_status st) {
    fail_ix(ud, sg->ix, st);
}

/* Before a decode pass (one token of each session): K3_TEST_DECODE_DELAY, the longest of the
 * sessions' (a test's long answer then lasts its length times the delay on any machine). */
static void decode_delay(const fwd_pass *p) {
    int ms = 0;
    for (int g = 0; g < p->nseg && p->n == p->nseg; g++)
        ms = p->seg[g].s->decode_delay_ms > ms ? p->seg[g].s->decode_delay_ms : ms;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (ms && nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* Run the pass (segment g fed ids[g]) through the model, then commit each session that came
 * through every layer; a commit that fails (a hook file) fails its session alone. */
static void run_pass(pass_run *r, const int32_t *const *ids) {
    fwd_pass       *p = &r->p;
    const k3_model *m = p->m;
    const int       D = m->cfg.hidden, V = m->cfg.vocab;
    chunk_buf      *b = p->b;
    decode_delay(p);
    model_forward(p, ids, seg_failed, r);
    for (int g = 0; g < p->nseg; g++) {
        const pass_seg *sg = &p->seg[g];
        k3_status       st = commit(sg->s, sg->n, b->logits + (size_t)sg->lrow * V, sg->lcnt,
                              b->trace ? b->trace + (size_t)sg->t0 * m->n_run * D : NULL);
        if (st)
            fail_ix(r, sg->ix, st);
        else
            r->st[sg->ix] = K3_OK;
    }
}

/* After layer l of a prefill pass of one session: K3_TEST_PREFILL_DELAY, then the progress. */
static void prefill_layer(const fwd_pass *p, int l) {
    k3_session *s = p->seg[0].s;
    if (s->delay_ms) {
        struct timespec ts = {s->delay_ms / 1000, (long)(s->delay_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) && errno == EINTR) {
        }
    }
    if (s->prefill_cb)
        s->prefill_cb(s->feed_done + (double)p->n * (l + 1) / s->m->n_run, s->feed_n,
                      s->stats.expert_bytes_read - s->feed_bytes0, s->prefill_ud);
}

void k3_session_set_prefill_cb(k3_session *s, k3_prefill_cb cb, void *ud) {
    s->prefill_cb = cb;
    s->prefill_ud = ud;
}

/* One pass of n tokens of one session: a chunk (n <= C, the session's chunk buffer) or a
 * prefill window (n > C, the window buffer wb, which holds n columns). */
static k3_status run_chunk(k3_session *s, chunk_buf *wb, const int32_t *ids, int n) {
    pass_seg  seg = {.s = s, .ix = 0, .t0 = 0, .n = n, .dev = n == 1};
    k3_status st  = K3_OK;
    fwd_pass  p   = {.m        = s->m,
                     .b        = n > s->chunk ? wb : &s->cb,
                     .cap      = s->chunk,
                     .n        = n,
                     .nseg     = 1,
                     .seg      = &seg,
                     .stats    = &s->stats,
                     .on_layer = n > 1 && (s->prefill_cb || s->delay_ms) ? prefill_layer : NULL};
    pass_run  r   = {.p = p, .st = &st};
    run_pass(&r, &ids);
    if (st)
        k3_err(st, "%s", r.msg);
    return st;
}

/* The prefill window for a feed of n ids: the memory fit's (k3_model's win_max: K3_WINDOW,
 * else K3_MAXT, as far as the memory allows), at most n, at least the chunk; its buffer into wb (a smaller
 * window when the memory is not there: it says so once). Returns the window (<= chunk: no window buffer). */
static int window_get(k3_session *s, int n, chunk_buf *wb) {
    const k3_model *m = s->m;
    int             W = m->win_max; /* the fit's: K3_WINDOW or K3_MAXT, shrunk to the memory */
    if (W > n)
        W = n;
    while (W > s->chunk) {
        if (!window_buf_alloc(m, &s->cb, W, s->f_logits ? W : 1, wb))
            return W;
        int w2 = W / 2 > s->chunk ? W / 2 : s->chunk;
        K3_LOG_WARN("prefill window of %d tokens: out of memory, shrunk to %d", W, w2);
        W = w2;
    }
    return s->chunk;
}

/* The checks of a feed of n ids that depend on the session (ids, context, K3_X0 rows). */
static k3_status feed_check(const k3_session *s, const int32_t *ids, int n) {
    const k3_model *m = s->m;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab)
            return k3_err(K3_ERR_ARG, "token id %d (index %d) is outside 0..%d", (int)ids[i], i,
                          m->cfg.vocab - 1);
    if ((int64_t)s->pos + n > m->par.max_ctx)
        return k3_err(K3_ERR_CONTEXT, "context full: %d tokens + %d new exceed K3_MAXT=%d", s->pos, n,
                      m->par.max_ctx);
    if (s->x0 && s->pos + n > s->x0_rows)
        return k3_err(K3_ERR_ARG, "K3_X0=%s has %d rows, position %d needed", m->par.x0_path, s->x0_rows,
                      s->pos + n - 1);
    return K3_OK;
}

/* Count the tokens applied since pos and the seconds t into the stats (prefill or decode by
 * the size n of the feed). */
static void feed_stats(k3_session *s, int n, int pos, double t) {
    if (n > 1) {
        s->stats.n_prefill += s->pos - pos;
        s->stats.t_prefill += t;
    } else {
        s->stats.n_decode += s->pos - pos;
        s->stats.t_decode += t;
    }
}

k3_status k3_session_feed(k3_session *s, const int32_t *ids, int n) {
    atomic_store(&s->cancel, 0);
    if (n < 0 || (n > 0 && !ids))
        return k3_err(K3_ERR_ARG, "k3_session_feed: %d ids", n);
    k3_status st = feed_check(s, ids, n);
    if (st)
        return st;
    double    t   = k3_time();
    int       pos = s->pos;
    chunk_buf wb  = {0};
    const int W   = n > s->chunk ? window_get(s, n, &wb) : s->chunk;
    if (W > s->stats.window)
        s->stats.window = W;
    s->feed_n      = n;
    s->feed_bytes0 = s->stats.expert_bytes_read;
    for (int i = 0; i < n && !st; i += W) {
        int nc       = n - i < W ? n - i : W;
        s->feed_done = i;
        st           = run_chunk(s, &wb, ids + i, nc);
    }
    window_buf_free(s->m, &wb);
    if (st == K3_ABORTED)
        atomic_store(&s->cancel, 0);
    feed_stats(s, n, pos, k3_time() - t);
    return st;
}

/* ==== batched feed ============================================================== */

typedef struct sess_ix {
    uintptr_t p;
    int       i;
} sess_ix;

static int sess_ix_cmp(const void *a, const void *b) {
    const sess_ix *x = a, *y = b;
    return x->p != y->p ? (x->p < y->p ? -1 : 1) : x->i - y->i;
}

/* The checks of the call as a whole: nothing is fed when one fails. */
static k3_status batch_check(k3_session *const *ss, const int32_t *const *ids, const int *n, int count) {
    if (count < 1)
        return k3_err(K3_ERR_ARG, "k3_session_feed_batch: count %d, expected >= 1", count);
    if (!ss || !ids || !n)
        return k3_err(K3_ERR_ARG, "k3_session_feed_batch: the %s array is NULL",
                      !ss    ? "session"
                      : !ids ? "ids"
                             : "n");
    for (int i = 0; i < count; i++) {
        if (!ss[i])
            return k3_err(K3_ERR_ARG, "k3_session_feed_batch: session %d is NULL", i);
        if (n[i] < 1)
            return k3_err(K3_ERR_ARG, "k3_session_feed_batch: session %d: n %d, expected >= 1", i, n[i]);
        if (!ids[i])
            return k3_err(K3_ERR_ARG, "k3_session_feed_batch: session %d: ids is NULL", i);
        if (ss[i]->m != ss[0]->m)
            return k3_err(K3_ERR_ARG,
                          "k3_session_feed_batch: session %d belongs to another model than session 0", i);
    }
    sess_ix *v = malloc((size_t)count * sizeof *v);
    if (!v)
        return nomem();
    for (int i = 0; i < count; i++)
        v[i] = (sess_ix){(uintptr_t)ss[i], i};
    qsort(v, (size_t)count, sizeof *v, sess_ix_cmp);
    k3_status st = K3_OK;
    for (int i = 1; i < count && !st; i++)
        if (v[i].p == v[i - 1].p)
            st = k3_err(K3_ERR_ARG, "k3_session_feed_batch: sessions %d and %d are the same session",
                        v[i - 1].i, v[i].i);
    free(v);
    return st;
}

/* floor(x · c / tot) without overflow, for c <= tot < 2^31. */
static uint64_t share_floor(uint64_t x, uint64_t c, uint64_t tot) {
    return x / tot * c + x % tot * c / tot;
}

/* Split the expert tier's counters of a batch (tier) among its sessions in proportion to
 * the columns each ran (cols), so that they sum to what the tier did. */
static void split_tier(k3_session *const *ss, const int *cols, int count, const k3_stats *tier) {
    uint64_t tot = 0;
    for (int i = 0; i < count; i++)
        tot += (uint64_t)cols[i];
    if (!tot)
        return;
    uint64_t cum = 0;
    for (int i = 0; i < count; i++) {
        uint64_t  c0 = cum, c1 = (cum += (uint64_t)cols[i]);
        k3_stats *o = &ss[i]->stats;
#define SHARE_U(f) (o->f += share_floor(tier->f, c1, tot) - share_floor(tier->f, c0, tot))
        SHARE_U(expert_hits);
        SHARE_U(expert_misses);
        SHARE_U(expert_bytes_read);
        SHARE_U(vk_hits);
#undef SHARE_U
        o->expert_read_s += tier->expert_read_s * (double)cols[i] / (double)tot;
        o->expert_wait_s += tier->expert_wait_s * (double)cols[i] / (double)tot;
    }
}

/* The batch's scratch: the lead session's own chunk buffer when the columns fit (always but
 * for more sessions than K3_CHUNK), else its batch buffer, grown to cap columns and lrows
 * logits rows. */
static k3_status batch_buf(k3_session *lead, int cap, int lrows, fwd_pass *p) {
    if (cap <= lead->chunk) {
        p->b   = &lead->cb;
        p->cap = lead->chunk;
        return K3_OK;
    }
    if (lead->bb_cap < cap || lead->bb_rows < lrows) {
        chunk_buf_free(&lead->bb);
        lead->bb_cap = lead->bb_rows = 0;
        k3_status st                 = chunk_buf_alloc(lead->m, &lead->bb, cap, lrows);
        if (st)
            return k3_err(st, "k3_session_feed_batch: scratch for %d columns: out of memory", cap);
        lead->bb_cap  = cap;
        lead->bb_rows = lrows;
    }
    p->b   = &lead->bb;
    p->cap = lead->bb_cap;
    return K3_OK;
}

/* The prefill window of a batch (0: none; every round then at most a chunk): the fit's, as
 * k3_session_feed would run the longest feed, when one is longer than its chunk and the Vulkan
 * tier is off (its decode path needs a chunk's pass). Its buffer into wb: one window of
 * MAX(window, sessions) columns over the lead's chunk scratch, smaller when the memory is not
 * there (it says so), none below a chunk. */
static int batch_window(k3_session *const *ss, const int *n, int count, chunk_buf *wb) {
    k3_session     *lead = ss[0];
    const k3_model *m    = lead->m;
    int             W = 0, flog = 0;
    for (int i = 0; i < count; i++) {
        if (n[i] > ss[i]->chunk && n[i] > W)
            W = n[i];
        flog |= ss[i]->f_logits != NULL;
    }
    if (m->vk || W <= lead->chunk)
        return 0;
    if (W > m->win_max)
        W = m->win_max;
    while (W > lead->chunk) {
        const int cols = MAX2(W, count);
        if (!window_buf_alloc(m, &lead->cb, cols, flog ? cols : count, wb))
            return W;
        int w2 = W / 2 > lead->chunk ? W / 2 : lead->chunk;
        K3_LOG_WARN("prefill window of %d tokens: out of memory, shrunk to %d", W, w2);
        W = w2;
    }
    return 0;
}

k3_status k3_session_feed_batch(k3_session *const *ss, const int32_t *const *ids, const int *n, int count,
                                k3_status *each) {
    k3_status st = batch_check(ss, ids, n, count);
    if (st) {
        for (int i = 0; each && i < count; i++)
            each[i] = st;
        return st;
    }
    k3_session     *lead = ss[0];
    const k3_model *m    = lead->m;
    pass_run        r    = {.p = {.m = m}, .named = 1};
    k3_stats        tier = {0};
    int            *iw   = calloc((size_t)count * 4, sizeof *iw); /* pos0, fed, cols, refused */
    pass_seg       *seg  = calloc((size_t)count, sizeof *seg);
    const int32_t **sid  = calloc((size_t)count, sizeof *sid);
    if (!(r.st = calloc((size_t)count, sizeof *r.st)) || !iw || !seg || !sid) {
        st = nomem();
        goto done;
    }
    int *pos0 = iw, *fed = iw + count, *cols = iw + 2 * count, *refused = iw + 3 * count;
    for (int i = 0; i < count; i++) {
        atomic_store(&ss[i]->cancel, 0);
        pos0[i] = ss[i]->pos;
        if (ss[i]->chunk > ss[i]->stats.window)
            ss[i]->stats.window = ss[i]->chunk;
        if ((st = feed_check(ss[i], ids[i], n[i]))) {
            fail_ix(&r, i, st);
            refused[i] = 1;
        }
    }
    r.p.seg       = seg;
    r.p.stats     = &tier;
    chunk_buf wb  = {0}; /* the window buffer of a round with a joining prompt */
    int       win = batch_window(ss, n, count, &wb);
    double    t   = k3_time();
    /* rounds of at most K3_CHUNK columns (or one per session, when there are more sessions):
     * one column for each session with ids left, then the rest of the budget to the longer
     * feeds in order, at most a chunk each (a token's result does not depend on how its feed
     * is chunked). A round where a feed has more than a chunk left is a prefill window of up
     * to win columns (the fit's window, as that feed alone would run): the other sessions'
     * columns join it, and the joining prompt takes the rest, so its experts are read once
     * per window, not once per chunk */
    for (;;) {
        int nc = 0, lrows = 0, nact = 0, budget = lead->chunk;
        for (int i = 0; i < count; i++)
            if (!r.st[i] && fed[i] < n[i]) {
                nact++;
                if (win && n[i] - fed[i] > ss[i]->chunk)
                    budget = win;
            }
        if (!nact)
            break;
        const int cap1 = budget > lead->chunk ? budget : 0; /* a window round: a feed's cap */
        int       left = MAX2(budget, nact) - nact;
        r.p.n = r.p.nseg = 0;
        for (int i = 0; i < count; i++) {
            if (r.st[i] || fed[i] == n[i])
                continue;
            int k = MIN2(MIN2(n[i] - fed[i], cap1 ? cap1 : ss[i]->chunk) - 1, left);
            left -= k;
            k++;
            /* the last id of a feed whose alone chunking ends in a one-token pass */
            int dev         = ss[i]->chunk == 1 || (fed[i] + k == n[i] && n[i] % ss[i]->chunk == 1);
            seg[r.p.nseg]   = (pass_seg){.s = ss[i], .ix = i, .t0 = nc, .n = k, .dev = dev};
            sid[r.p.nseg++] = ids[i] + fed[i];
            nc += k;
            lrows += ss[i]->f_logits ? k : 1;
            if (k > ss[i]->stats.window)
                ss[i]->stats.window = k;
        }
        if (nc > lead->chunk && cap1) {
            r.p.b   = &wb;
            r.p.cap = lead->chunk;
        } else if ((st = batch_buf(lead, nc, lrows, &r.p))) {
            for (int g = 0; g < r.p.nseg; g++)
                fail_ix(&r, seg[g].ix, st);
            break;
        }
        r.p.n = nc;
        for (int g = 0; g < r.p.nseg; g++)
            cols[seg[g].ix] += seg[g].n;
        run_pass(&r, sid);
        for (int i = 0; i < count; i++)
            fed[i] = ss[i]->pos - pos0[i];
    }
    window_buf_free(m, &wb);
    t = k3_time() - t;
    for (int i = 0; i < count; i++) {
        if (r.st[i] == K3_ABORTED)
            atomic_store(&ss[i]->cancel, 0);
        if (!refused[i])
            feed_stats(ss[i], n[i], pos0[i], t); /* as k3_session_feed counts */
    }
    split_tier(ss, cols, count, &tier);
    st = r.first;
done:
    for (int i = 0; each && i < count; i++)
        each[i] = r.st ? r.st[i] : st;
    free(r.st);
    free(iw);
    free(seg);
    free(sid);
    return st && r.first ? k3_err(st, "%s", r.msg) : st;
}

/* ==== snapshots ================================================================ */

struct k3_snapshot {
    const k3_model *m;
    int             pos, have_logits;
    size_t          n;    /* floats in data                                                          */
    float          *data; /* logits (V), then per run layer: S, tail (KDA) or c, kr (MLA, pos rows) */
};

static size_t state_copy_size(const k3_snapshot *snap) {
    return snap->n * sizeof(float);
}

/* Walk the committed state in a fixed order: copy into (save) or out of (restore) buf. */
static size_t state_copy(const k3_session *s, float *buf, int pos, int save) {
    const k3_config *c = &s->m->cfg;
    const int        P = c->kda_heads * c->kda_head_dim, d = c->kda_head_dim;
    size_t           off = 0;
#define XFER(ptr, cnt)                                                                                       \
    do {                                                                                                     \
        size_t n_ = (size_t)(cnt);                                                                           \
        if (buf) {                                                                                           \
            if (save)                                                                                        \
                memcpy(buf + off, (ptr), n_ * sizeof(float));                                                \
            else                                                                                             \
                memcpy((ptr), buf + off, n_ * sizeof(float));                                                \
        }                                                                                                    \
        off += n_;                                                                                           \
    } while (0)
    XFER(s->logits, c->vocab);
    for (int l = 0; l < s->m->n_run; l++) {
        layer_state *ls = &s->ls[l];
        if (ls->S[0]) {
            XFER(ls->S[ls->sel], (size_t)P * d);
            XFER(ls->tail[ls->sel], (size_t)3 * (c->conv_k - 1) * P);
        } else {
            XFER(ls->c, (size_t)pos * c->kv_lora);
            XFER(ls->kr, (size_t)pos * c->rope);
        }
    }
#undef XFER
    return off;
}

k3_status k3_session_save(const k3_session *s, k3_snapshot **out) {
    k3_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap)
        return nomem();
    size_t n = state_copy(s, NULL, s->pos, 1);
    if (!(snap->data = malloc(n * sizeof(float)))) {
        free(snap);
        return nomem();
    }
    state_copy(s, snap->data, s->pos, 1);
    snap->n           = n;
    snap->m           = s->m;
    snap->pos         = s->pos;
    snap->have_logits = s->have_logits;
    *out              = snap;
    return K3_OK;
}

k3_status k3_session_restore(k3_session *s, const k3_snapshot *snap) {
    if (!snap || snap->m != s->m)
        return k3_err(K3_ERR_ARG, "k3_session_restore: snapshot of another model");
    state_copy(s, snap->data, snap->pos, 0);
    s->pos         = snap->pos;
    s->have_logits = snap->have_logits;
    atomic_store(&s->cancel, 0);
    return K3_OK;
}

size_t k3_snapshot_bytes(const k3_snapshot *snap) {
    return snap ? sizeof *snap + state_copy_size(snap) : 0;
}

void k3_snapshot_free(k3_snapshot *snap) {
    if (!snap)
        return;
    free(snap->data);
    free(snap);
}

/* ==== statistics ================================================================ */

void k3_session_stats(const k3_session *s, k3_stats *out) {
    *out                  = s->stats;
    out->expert_gb_budget = k3_model_expert_budget(s->m);
    vkt_stats vs;
    vkt_get_stats(s->m->vk, &vs);
    out->vk_hits    = vs.hits;
    out->vk_used    = vs.used;
    out->vk_budget  = vs.budget;
    out->vk_experts = vs.experts;
    out->kernels    = k3_kernels();
}

void k3_session_reset_stats(k3_session *s) {
    double budget = s->stats.expert_gb_budget;
    memset(&s->stats, 0, sizeof s->stats);
    s->stats.expert_gb_budget = budget;
}
