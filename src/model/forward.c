/* forward.c: the K3 model, input to logits (spec section 5): model_forward at the end of this
 * file goes embed -> layers -> head over a pass of n tokens; above it, one decoder layer
 * (layer_forward) and its parts.
 *
 * DESIGN
 * Layer-major over a pass: a chunk, or a prefill window of many chunks (attention runs over the
 * window a chunk at a time, the MoE over all of it at once, expert by expert, so each routed
 * expert is read once per window). Every weight matrix is applied once to the chunk's n rows with
 * mm() (qmat_matmul, or qmat_matvec for one row; the kernels give the same bits either way), and
 * every sequential recurrence (KDA conv and state, MLA cache) is advanced token by token in
 * order, so a token's result never depends on the chunk size. Per-token arithmetic that the
 * chunk size could change (sums over slots, experts, heads) always runs in one fixed order.
 * Accumulations that are cheap in double (norms, mixes, the KDA state products, softmax sums)
 * are done in double; the MLA attention's long loops (scores, context) run in f32 with a fixed
 * lane order so they vectorise; the stored activations and the state are f32.
 *
 * A pass (fwd_pass, model-impl.h) is one chunk of one session, or one chunk of each of several
 * sessions (a batch): the columns are concatenated, every weight matrix and every routed
 * expert is applied once to all the columns that need it, and each recurrence runs over the
 * columns of its own session (segment) with that session's state. Column c's arithmetic is
 * the same whatever the other columns are, so a batched token gives the bits it gives alone.
 *
 * Buffers come from the pass's chunk_buf (model-impl.h lists their shapes). Reads b->h,
 * writes b->h; KDA writes each session's new state into its uncommitted buffer 1-sel; MLA
 * appends each session's cache rows at its positions pos..pos+n-1 (committed only when the
 * session advances pos).
 */
#include "act.h"
#include "kda-rec.h"
#include "model-impl.h"
#include "prof.h"
#include "vkt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==== small math ============================================================ */

/* Element-wise and per-token loops run on the OpenMP threads from this many scalar elements
 * (a region costs a few microseconds; one element of the double-precision activations about
 * 20-60 ns). Each element or token is computed alone, so the split never changes a bit. */
#define PAR_MIN 4096

static float sigmoidf_(double x) {
    return (float)(1.0 / (1.0 + exp(-x)));
}

/* Y[n][rows] = W X[n][cols]. */
static void mm(const qmat *w, const float *x, int n, float *y) {
    prof_t t0 = prof_begin();
    if (n == 1)
        qmat_matvec(w, x, y);
    else
        qmat_matmul(w, x, n, y);
    prof_end(PROF_MATMUL, t0);
    if (prof_on)
        prof_add_bytes(q_wbytes(w->type, w->rows, w->cols) + q_sbytes(w->type, w->rows, w->cols));
}

/* y[i] = W_i x for k matrices over the same input: one quantization and one OpenMP region for
 * all (qmat_matmul_many; the same bits as k calls of mm). */
static void mm_many(const qmat *const *w, int k, const float *x, int n, float *const *y) {
    prof_t t0 = prof_begin();
    qmat_matmul_many(w, k, x, n, y);
    prof_end(PROF_MATMUL, t0);
    for (int i = 0; prof_on && i < k; i++)
        prof_add_bytes(q_wbytes(w[i]->type, w[i]->rows, w[i]->cols) +
                       q_sbytes(w[i]->type, w[i]->rows, w[i]->cols));
}

/* dot(a, b) in f32 with 8 interleaved partial sums: vectorisable, and one fixed order. */
static float dot8(const float *a, const float *b, int n) {
    float acc[8] = {0}, tail = 0;
    int   i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += a[i + l] * b[i + l];
    for (; i < n; i++)
        tail += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

/* RMSNorm(x, w, eps) = x / sqrt(mean(x²) + eps) ⊙ w; out may alias x. */
static void rmsnorm(float *out, const float *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = (float)((double)x[i] * r * (double)w[i]);
}

/* SiTU-GLU(g, u) = β₁·tanh(g/β₁)·σ(g) · β₂·tanh(u/β₂), into g, in blocks of PAR_MIN on the
 * threads: in float, vectorised (kern_situ_glu, the default, measured in BENCHMARKS.md), or
 * with K3_ACT=double the libm double formula (kern_situ_glu_double, the path before). */
static void situ_glu(float *g, const float *u, size_t n, double b1, double b2) {
    prof_t       t0  = prof_begin();
    const int    dbl = kern_act_double();
    const size_t nb  = (n + PAR_MIN - 1) / PAR_MIN;
#pragma omp parallel for schedule(static) if (nb > 1)
    for (size_t bi = 0; bi < nb; bi++) {
        const size_t i = bi * PAR_MIN, len = n - i < PAR_MIN ? n - i : PAR_MIN;
        (dbl ? kern_situ_glu_double : kern_situ_glu)(g + i, u + i, len, (float)b1, (float)b2);
    }
    prof_end(PROF_GLU, t0);
}

/* Attention Residuals mix (spec 5): entries = blocks[0..nb) ++ [p];
 * score_e = dot(entry_e, nw ⊙ pw) / sqrt(mean(entry_e²) + eps); out = Σ softmax(score)_e entry_e. */
static void attnres_mix(float *out, const float *p, const float *blocks, int nb, const double *w, int D,
                        double eps) {
    double score[K3_MAX_LAYERS + 1], mx = -(double)INFINITY;
    for (int e = 0; e <= nb; e++) {
        const float *x   = e < nb ? blocks + (size_t)e * D : p;
        double       dot = 0, ss = 0;
        for (int i = 0; i < D; i++) {
            dot += (double)x[i] * w[i];
            ss += (double)x[i] * (double)x[i];
        }
        score[e] = dot / sqrt(ss / D + eps);
        if (score[e] > mx)
            mx = score[e];
    }
    double sum = 0;
    for (int e = 0; e <= nb; e++)
        sum += score[e] = exp(score[e] - mx);
    for (int e = 0; e <= nb; e++)
        score[e] /= sum;
    for (int i = 0; i < D; i++) {
        double acc = 0;
        for (int e = 0; e < nb; e++)
            acc += score[e] * (double)blocks[(size_t)e * D + i];
        out[i] = (float)(acc + score[nb] * (double)p[i]);
    }
}

/* ==== KDA =================================================================== */

/* Kimi Delta Attention over the pass: b->xn (n, D) -> b->y (n, D).
 *   q, k, v = SiLU(causal depthwise conv_K(W_{q,k,v} x))      window oldest..newest, carried tails
 *   q = q / sqrt(Σq² + 1e-6) · d^-½ ;  k = k / sqrt(Σk² + 1e-6)  per head
 *   z = f_b(f_a(x)) + dt_bias ;  g = lb · σ(exp(A_log[h]) · z) ;  β = σ(b_proj x)
 *   S ← Diag(e^g) S ;  S ← S + β k ⊗ (v − Sᵀk) ;  o = Sᵀ q       S[key][value], per head
 *   y = o_proj(σ(g_proj x) ⊙ RMSNorm_head(o, o_norm)) */
static void kda_forward(fwd_pass *p, int l) {
    const k3_model    *m = p->m;
    const k3_config   *c = &m->cfg;
    const kda_weights *w = &m->layers[l].kda;
    chunk_buf         *b = p->b;
    const int          H = c->kda_heads, d = c->kda_head_dim, P = H * d, K = c->conv_k, C = p->cap, n = p->n;

    /* projections of every column: raw q, k, v into pj (one quantization of x), then per
     * sequence its conv window (K-1+n, P): rows 0..K-2 = its carried tail, then its columns;
     * the conv's q, k, v into qkv */
    float *qkv[3] = {b->proj[0], b->proj[1], b->proj[2]}, *pj[3] = {b->proj[3], b->proj[4], b->proj[5]};
    {
        const qmat *proj[3] = {&w->q, &w->k, &w->v};
        mm_many(proj, 3, b->xn, n, pj);
    }
    for (int i = 0; i < 3; i++) {
        float       *win = b->win + (size_t)i * (K - 1 + C) * P;
        const float *tap = w->conv[i];
        prof_t       t0  = prof_begin();
        for (int g = 0; g < p->nseg; g++) {
            const pass_seg *sg  = &p->seg[g];
            layer_state    *ls  = &sg->s->ls[l];
            const int       src = sg->off ? 1 - ls->sel : ls->sel; /* a window's later chunk: in place */
            memcpy(win, ls->tail[src] + (size_t)i * (K - 1) * P, (size_t)(K - 1) * P * sizeof(float));
            memcpy(win + (size_t)(K - 1) * P, pj[i] + (size_t)sg->t0 * P, (size_t)sg->n * P * sizeof(float));
            /* causal depthwise conv + SiLU: out[t][ch] = Σ_k tap[ch][k] · win[t+k][ch], in blocks
             * of PAR_MIN elements of (t, ch); SiLU by kern_unary (K3_ACT: float or double) */
            float       *out = qkv[i] + (size_t)sg->t0 * P;
            const size_t ne = (size_t)sg->n * P, nb = (ne + PAR_MIN - 1) / PAR_MIN;
#pragma omp parallel for schedule(static) if (nb > 1)
            for (size_t bi = 0; bi < nb; bi++) {
                const size_t e0 = bi * PAR_MIN, e1 = e0 + PAR_MIN < ne ? e0 + PAR_MIN : ne;
                for (size_t e = e0, t = e0 / (size_t)P, ch = e0 % (size_t)P; e < e1; e++) {
                    float acc = 0;
                    for (int k = 0; k < K; k++)
                        acc += tap[ch * K + (size_t)k] * win[(t + (size_t)k) * P + ch];
                    out[e] = acc;
                    if (++ch == (size_t)P)
                        ch = 0, t++;
                }
                kern_unary(KERN_SILU, out + e0, e1 - e0);
            }
            /* the new tail: the last K-1 window rows */
            memcpy(ls->tail[1 - ls->sel] + (size_t)i * (K - 1) * P, win + (size_t)sg->n * P,
                   (size_t)(K - 1) * P * sizeof(float));
        }
        prof_end(PROF_KDA_CONV, t0);
    }
    /* the raw projections' slots, free after the conv, take the gate, g and f_a */
    float *gate = pj[0], *gz = pj[1], *fa = pj[2], *beta = b->gath_in;
    { /* g_proj x (n, P), f_a x (n, d), b_proj x (n, H): one more quantization of x */
        const qmat *proj[3] = {&w->g, &w->fa, &w->b};
        float      *out[3]  = {gate, fa, beta};
        mm_many(proj, 3, b->xn, n, out);
    }
    mm(&w->fb, fa, n, gz); /* f_b(f_a x)          (n, P) */
    /* g = lb · σ(exp(A_log[h]) · (z + dt_bias)), then the decay e^g into gz; σ(g_proj x) into
     * gate; β = σ(b_proj x): K3_ACT=double the libm double formulas, else float, vectorised */
    prof_t    t0  = prof_begin();
    const int dbl = kern_act_double();
#pragma omp parallel for schedule(static) if ((long)n * P >= PAR_MIN)
    for (int t = 0; t < n; t++) {
        float *g = gz + (size_t)t * P;
        if (dbl)
            for (int ch = 0; ch < P; ch++)
                g[ch] = (float)((double)c->gate_lower_bound *
                                (double)sigmoidf_((double)w->a[ch / d] * (double)(g[ch] + w->dt_bias[ch])));
        else {
            for (int ch = 0; ch < P; ch++)
                g[ch] = w->a[ch / d] * (g[ch] + w->dt_bias[ch]);
            kern_unary(KERN_SIGMOID, g, (size_t)P);
            for (int ch = 0; ch < P; ch++)
                g[ch] = c->gate_lower_bound * g[ch];
        }
        kern_unary(KERN_EXP, g, (size_t)P);
        kern_unary(KERN_SIGMOID, gate + (size_t)t * P, (size_t)P);
        kern_unary(KERN_SIGMOID, beta + (size_t)t * H, (size_t)H);
    }
    prof_end(PROF_KDA_GATE, t0);
    t0 = prof_begin();

    /* per sequence and head, token by token in order: the delta rule on the sequence's S
     * (H, d, d), read from buffer sel, written to 1-sel; threads only when the work outweighs
     * waking them */
#pragma omp parallel for schedule(static) if ((long)n * H * d * d >= KDA_REC_PAR_MIN)
    for (int hs = 0; hs < p->nseg * H; hs++) {
        const int       h   = hs % H;
        const pass_seg *sg  = &p->seg[hs / H];
        layer_state    *ls  = &sg->s->ls[l];
        const int       dst = 1 - ls->sel, src = sg->off ? dst : ls->sel;
        double         *u = sg->s->dtmp + (size_t)h * 2 * d;
        const kda_rec   r = {.d      = d,
                             .P      = P,
                             .H      = H,
                             .h      = h,
                             .t0     = sg->t0,
                             .n      = sg->n,
                             .S0     = ls->S[src] + (size_t)h * d * d,
                             .S      = ls->S[dst] + (size_t)h * d * d,
                             .q      = qkv[0],
                             .k      = qkv[1],
                             .v      = qkv[2],
                             .decay  = gz,
                             .sgate  = gate,
                             .beta   = beta,
                             .o_norm = w->o_norm,
                             .eps    = (double)c->rms_eps,
                             .u      = u,
                             .o      = u + d};
        kda_rec_run(&r);
    }
    prof_end(PROF_KDA_REC, t0);
    mm(&w->o, qkv[0], n, b->y);
}

/* ==== MLA =================================================================== */

/* Gated MLA with NoPE over the pass: b->xn (n, D) -> b->y (n, D).
 *   q = q_b(RMSNorm(q_a x, q_a_layernorm, 1e-6))                per head [nope | rope]
 *   c, kr = split(kv_a_proj_with_mqa x); c = RMSNorm(c, kv_a_layernorm, 1e-6)   cached
 *   absorbed: score_j = (q_nopeᵀ kv_b_nope c_j + q_rope · kr_j) / sqrt(nope + rope)
 *             ctx = kv_b_v Σ_j softmax_j c_j
 *   y = o_proj(σ(g_proj x) ⊙ ctx) */
static void mla_forward(fwd_pass *p, int l) {
    const k3_model    *m  = p->m;
    const k3_config   *c  = &m->cfg;
    const mla_weights *w  = &m->layers[l].mla;
    chunk_buf         *b  = p->b;
    const int          Hm = c->n_heads, kl = c->kv_lora, nope = c->nope, rope = c->rope, vd = c->v_dim;
    const int          qw = nope + rope, ql = c->q_lora, C = p->cap, n = p->n;
    const double       scale = 1.0 / sqrt((double)qw);

    float *qa = b->proj[0], *q = b->proj[1], *kva = b->proj[2], *gate = b->proj[3], *ctx = b->proj[4];
    { /* q_a x (n, q_lora), kv_a x (n, kl+rope), g_proj x (n, Hm*v) */
        const qmat *proj[3] = {&w->qa, &w->kva, &w->g};
        float      *out[3]  = {qa, kva, gate};
        mm_many(proj, 3, b->xn, n, out);
    }
    prof_t t0 = prof_begin();
    for (int t = 0; t < n; t++)
        rmsnorm(qa + (size_t)t * ql, qa + (size_t)t * ql, w->qa_norm, ql, 1e-6);
    prof_end(PROF_NORM, t0);
    mm(&w->qb, qa, n, q); /* q_b            (n, Hm*qw)  */
    t0 = prof_begin();
    for (int g = 0; g < p->nseg; g++) { /* append c, kr to each cache */
        const pass_seg *sg = &p->seg[g];
        layer_state    *ls = &sg->s->ls[l];
        for (int t = 0; t < sg->n; t++) {
            const float *row = kva + (size_t)(sg->t0 + t) * (kl + rope);
            const size_t j   = (size_t)sg->s->pos + (size_t)sg->off + (size_t)t;
            rmsnorm(ls->c + j * kl, row, w->kva_norm, kl, 1e-6);
            memcpy(ls->kr + j * rope, row + kl, (size_t)rope * sizeof(float));
        }
    }
    prof_end(PROF_NORM, t0);

    /* absorbed query per head: qlat[h][t] = kv_b_nope_hᵀ q_nope[t][h]   (Hm, C, kl) */
    for (int h = 0; h < Hm; h++) {
        for (int t = 0; t < n; t++)
            memcpy(b->gath_in + (size_t)t * nope, q + (size_t)t * Hm * qw + (size_t)h * qw,
                   (size_t)nope * sizeof(float));
        mm(&w->uk_t[h], b->gath_in, n, b->mla_qlat + (size_t)h * C * kl);
    }
    /* causal attention of each sequence over its own latent cache, token by token; ctx_lat
     * into mla_ctx (Hm, C, kl) */
    long work = 0;
    for (int g = 0; g < p->nseg; g++)
        work += (long)p->seg[g].n * (p->seg[g].s->pos + p->seg[g].off + p->seg[g].n);
    t0 = prof_begin();
#pragma omp parallel for schedule(static) if (work * Hm * kl >= K3_PAR_MIN_OPS)
    for (int h = 0; h < Hm; h++) {
        float *sc = b->scores + (size_t)h * m->par.max_ctx;
        for (int t = 0, g = 0; t < n; t++) {
            while (t >= p->seg[g].t0 + p->seg[g].n)
                g++;
            const layer_state *ls  = &p->seg[g].s->ls[l];
            const float       *ql_ = b->mla_qlat + ((size_t)h * C + t) * kl;
            const float       *qr  = q + (size_t)t * Hm * qw + (size_t)h * qw + nope;
            const int          T   = p->seg[g].s->pos + p->seg[g].off + (t - p->seg[g].t0) + 1;
            float              mx  = -INFINITY;
            for (int j = 0; j < T; j++) {
                sc[j] = (float)((double)(dot8(ql_, ls->c + (size_t)j * kl, kl) +
                                         dot8(qr, ls->kr + (size_t)j * rope, rope)) *
                                scale);
                if (sc[j] > mx)
                    mx = sc[j];
            }
            /* ctx_lat = Σ_j softmax_j c_j: f32 accumulation over i vectorises; the sum of the
             * weights is kept in double */
            float *out = b->mla_ctx + ((size_t)h * C + t) * kl;
            double sum = 0;
            for (int i = 0; i < kl; i++)
                out[i] = 0;
            for (int j = 0; j < T; j++) {
                const float  pj = expf(sc[j] - mx);
                const float *cj = ls->c + (size_t)j * kl;
                sum += (double)pj;
#pragma omp simd
                for (int i = 0; i < kl; i++)
                    out[i] += pj * cj[i];
            }
            const float inv = (float)(1.0 / sum);
            for (int i = 0; i < kl; i++)
                out[i] *= inv;
        }
    }
    prof_end(PROF_MLA_ATT, t0);
    /* ctx[t][h] = kv_b_v_h ctx_lat, gated by σ(g_proj x) */
    for (int h = 0; h < Hm; h++) {
        mm(&w->uv[h], b->mla_ctx + (size_t)h * C * kl, n, b->gath_out);
        t0 = prof_begin();
        for (int t = 0; t < n; t++)
            for (int i = 0; i < vd; i++) {
                size_t k = (size_t)t * Hm * vd + (size_t)h * vd + i;
                ctx[k]   = b->gath_out[(size_t)t * vd + i] * sigmoidf_((double)gate[k]);
            }
        prof_end(PROF_MLA_ATT, t0);
    }
    mm(&w->o, ctx, n, b->y);
}

/* ==== MLPs ================================================================== */

/* out = down(SiTU-GLU(gate x, up x)); g, u: scratch (n, I). */
static void mlp_forward(const k3_model *m, const mlp_weights *w, const float *x, int n, float *out, float *g,
                        float *u) {
    const qmat *gu[2] = {&w->gate, &w->up};
    float      *y[2]  = {g, u};
    mm_many(gu, 2, x, n, y);
    situ_glu(g, u, (size_t)n * w->gate.rows, (double)m->cfg.situ_beta, (double)m->cfg.situ_linear_beta);
    mm(&w->down, g, n, out);
}

/* K3_TOPP: of one token's k selected experts keep the heaviest whose weights first reach
 * share p of the total (ties: selection order); the rest get sel -1, weight 0; the kept
 * weights are scaled so their sum is the total again. */
static void topp_drop(int *sel, float *wt, int k, double p, int *idx /* (k) scratch */) {
    double tot = 0;
    for (int j = 0; j < k; j++) {
        idx[j] = j;
        tot += (double)wt[j];
    }
    for (int j = 1; j < k; j++) /* insertion sort by weight, descending, stable */
        for (int i = j; i > 0 && wt[idx[i]] > wt[idx[i - 1]]; i--) {
            int tmp    = idx[i];
            idx[i]     = idx[i - 1];
            idx[i - 1] = tmp;
        }
    double kept = 0;
    int    nk   = 0;
    while (nk < k && (nk == 0 || kept < p * tot))
        kept += (double)wt[idx[nk++]];
    for (int i = nk; i < k; i++) {
        sel[idx[i]] = -1;
        wt[idx[i]]  = 0;
    }
    for (int i = 0; i < nk && kept > 0; i++)
        wt[idx[i]] = (float)((double)wt[idx[i]] * tot / kept);
}

/* ==== LatentMoE: route, gather, compute, combine ======================================== */

/* The MoE's scratch, named for its role; views of the pass's chunk_buf. n = the pass's
 * columns (a chunk, or a prefill window), C = its chunk scratch's columns (fwd_pass.cap);
 * np = the tokens routed to one expert (at most n), computed in blocks of at most C. */
typedef struct moe_scratch {
    float *scores; /* (C, E) router sigmoid scores of one chunk of columns                */
    float *z;      /* (n, L) latent down projection of every token                        */
    float *gate;   /* (C, F) one block of an expert's w1 rows, then SiTU-GLU(w1, w3)       */
    float *up;     /* (C, F) its w3 rows                                                  */
    float *in;     /* (C, L) the gathered latent rows of that block                       */
    float *out;    /* (C, L) their expert outputs, before the scatter                     */
    float *slot_y; /* (n, k, L) per token and slot expert output (canonical order)        */
    float *lat;    /* (C, L) Σ_slot w · slot_y, then RMSNorm, of one chunk of columns      */
    float *shared; /* (C, D) shared experts' output of one chunk of columns               */
    int   *sel;    /* (n, k) selected expert ids (-1: dropped by K3_TOPP)                 */
    int   *csel;   /* (n, k) sel, -1 where the Vulkan tier computed the row: the CPU's     */
    float *w;      /* (n, k) their weights                                                */
    int   *rows;   /* (n*k) t*k + slot of the CPU's rows, grouped by expert / K3_TOPP's    */
    int   *ids;    /* (E) distinct experts of the pass                                    */
    int   *start;  /* (E+1) expert e's rows are rows[start[e], start[e+1])                 */
} moe_scratch;

static moe_scratch moe_scratch_of(chunk_buf *b) {
    return (moe_scratch){.scores = b->proj[0],
                         .z      = b->moe_z,
                         .gate   = b->proj[2],
                         .up     = b->proj[3],
                         .in     = b->gath_in,
                         .out    = b->gath_out,
                         .slot_y = b->moe_y,
                         .lat    = b->proj[4],
                         .shared = b->proj[5],
                         .sel    = b->moe_sel,
                         .w      = b->moe_w,
                         .csel   = b->moe_sel,
                         .rows   = b->moe_tok,
                         .ids    = b->moe_ids,
                         .start  = b->moe_res};
}

/* The position of the pass's column t. */
static int col_pos(const fwd_pass *p, int t) {
    int g = 0;
    while (g + 1 < p->nseg && t >= p->seg[g].t0 + p->seg[g].n)
        g++;
    return p->seg[g].s->pos + p->seg[g].off + (t - p->seg[g].t0);
}

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* K3_ROUTE=uniform (benchmarks only): k distinct experts of E drawn uniformly without
 * replacement (Floyd's method), a function of (seed, position, layer) alone, ascending. */
static void route_uniform(int seed, int pos, int layer, int E, int k, int *sel) {
    uint64_t x =
        mix64(((uint64_t)(uint32_t)seed << 32) ^ mix64(((uint64_t)(uint32_t)pos << 16) ^ (uint64_t)layer));
    int n = 0;
    for (int j = E - k; j < E; j++) {
        x     = mix64(x + 0x9e3779b97f4a7c15ULL);
        int r = (int)(x % (uint64_t)(j + 1)), dup = 0;
        for (int i = 0; i < n; i++)
            dup |= sel[i] == r;
        sel[n++] = dup ? j : r;
    }
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && sel[j] < sel[j - 1]; j--) {
            int tmp    = sel[j];
            sel[j]     = sel[j - 1];
            sel[j - 1] = tmp;
        }
}

/* Route the pass's columns [c0, c0 + n) (n <= C): σ(router x); per token the top-k of
 * (score + bias) in the order (biased score descending, id ascending on ties), or with
 * K3_ROUTE=uniform k drawn ids; weights w_e = s_e / (Σ_T s + 1e-20) · routed_scale; K3_TOPP < 1
 * then drops the lightest (topp_drop). xn -> ms->sel, ms->w (rows c0..). */
static void moe_route(const fwd_pass *p, int l, int c0, int n, moe_scratch *ms) {
    const k3_model    *m = p->m;
    const moe_weights *w = &m->layers[l].moe;
    const k3_config   *c = &m->cfg;
    const int          E = c->n_experts, k = c->n_active;
    mm(&w->router, p->b->xn + (size_t)c0 * c->hidden, n, ms->scores);
    prof_t t0 = prof_begin();
    /* per token; K3_TOPP's drop shares ms->rows as scratch, so it stays on one thread */
#pragma omp parallel for schedule(static) if (n > 1 && (long)n * E >= PAR_MIN / 8 && m->par.topp >= 1)
    for (int t = 0; t < n; t++) {
        float *st = ms->scores + (size_t)t * E;
        for (int e = 0; e < E; e++)
            st[e] = sigmoidf_((double)st[e]);
        int   *sel = ms->sel + (size_t)(c0 + t) * k;
        float *wt  = ms->w + (size_t)(c0 + t) * k;
        double tot = 0;
        if (m->par.route)
            route_uniform(m->par.route_seed, col_pos(p, c0 + t), l, E, k, sel);
        else { /* k passes, each taking the best expert after the previous one in the order */
            double pv = (double)INFINITY;
            int    pe = -1;
            for (int j = 0; j < k; j++) {
                int    best = -1;
                double bv   = 0;
                for (int e = 0; e < E; e++) {
                    double v = (double)st[e] + (double)w->bias[e];
                    if ((v < pv || (v == pv && e > pe)) && (best < 0 || v > bv)) {
                        best = e;
                        bv   = v;
                    }
                }
                if (best < 0)
                    best = j; /* NaN scores: any distinct id; the logits check fails */
                sel[j] = best;
                pv     = bv;
                pe     = best;
            }
        }
        for (int j = 0; j < k; j++)
            tot += (double)st[sel[j]];
        for (int j = 0; j < k; j++)
            wt[j] = (float)(k > 1 ? (double)st[sel[j]] / (tot + 1e-20) * (double)c->routed_scale
                                  : (double)st[sel[j]] * (double)c->routed_scale);
        if (m->par.topp < 1)
            topp_drop(sel, wt, k, m->par.topp, ms->rows);
    }
    prof_end(PROF_ROUTE, t0);
}

/* The distinct experts of sel[0..nk) in id order -> ids; returns their number. */
static int moe_experts(const int *sel, int nk, int E, int *ids) {
    int n_ids = 0;
    for (int e = 0; e < E; e++)
        for (int i = 0; i < nk; i++)
            if (sel[i] == e) {
                ids[n_ids++] = e;
                break;
            }
    return n_ids;
}

/* The routing table of the pass by expert: the CPU's (token, slot) rows of csel[0..nk) grouped
 * by expert, in token order within each (ms->rows, ms->start), and the distinct experts in id
 * order (ms->ids). Returns their number. One counting pass: O(E + nk), for windows of
 * thousands of tokens. */
static int moe_bucket(const moe_scratch *ms, int nk, int E) {
    prof_t t0 = prof_begin();
    int   *st = ms->start;
    memset(st, 0, (size_t)(E + 1) * sizeof *st);
    for (int i = 0; i < nk; i++)
        if (ms->csel[i] >= 0)
            st[ms->csel[i] + 1]++;
    int n_ids = 0;
    for (int e = 0; e < E; e++) {
        if (st[e + 1])
            ms->ids[n_ids++] = e;
        st[e + 1] += st[e];
    }
    for (int i = 0; i < nk; i++) /* st[e] runs to the end of e's rows, then moves back */
        if (ms->csel[i] >= 0)
            ms->rows[st[ms->csel[i]]++] = i;
    for (int e = E; e > 0; e--)
        st[e] = st[e - 1];
    st[0] = 0;
    prof_end(PROF_MOE_MOVE, t0);
    return n_ids;
}

/* Compute: one expert over np <= C of its rows (rows: t*k + slot), each projection one matmul
 * (grouped GEMM): gather their latent rows z, out = w2(SiTU-GLU(w1 in, w3 in)), then scatter
 * the outputs back to their (token, slot). */
static void moe_compute(const k3_config *c, const k3_expert *x, const int *rows, int np, moe_scratch *ms) {
    const int L = c->latent, F = c->moe_inter, k = c->n_active;
    prof_t    t0 = prof_begin();
    for (int i = 0; i < np; i++)
        memcpy(ms->in + (size_t)i * L, ms->z + (size_t)(rows[i] / k) * L, (size_t)L * sizeof(float));
    prof_end(PROF_MOE_MOVE, t0);
    const qmat *w13[2] = {&x->w1, &x->w3};
    float      *y13[2] = {ms->gate, ms->up}; /* (np, F) each */
    mm_many(w13, 2, ms->in, np, y13);
    situ_glu(ms->gate, ms->up, (size_t)np * F, (double)c->situ_beta, (double)c->situ_linear_beta);
    mm(&x->w2, ms->gate, np, ms->out); /* (np, L) */
    t0 = prof_begin();
    for (int i = 0; i < np; i++)
        memcpy(ms->slot_y + (size_t)rows[i] * L, ms->out + (size_t)i * L, (size_t)L * sizeof(float));
    prof_end(PROF_MOE_MOVE, t0);
}

/* Combine the columns [c0, c0 + n): lat = RMSNorm(Σ_slot w · slot_y) in selection order (so
 * the order experts ran in does not matter), y = up_lat lat + shared (ms->shared: n rows). */
static void moe_combine(const k3_model *m, const moe_weights *w, int c0, int n, moe_scratch *ms, float *y) {
    const k3_config *c = &m->cfg;
    const int        k = c->n_active, L = c->latent, D = c->hidden;
    prof_t           t0 = prof_begin();
#pragma omp parallel for schedule(static) if (n > 1 && (long)n * L >= PAR_MIN)
    for (int t = 0; t < n; t++) {
        float       *ut  = ms->lat + (size_t)t * L;
        const size_t row = (size_t)(c0 + t) * k;
        for (int i = 0; i < L; i++) {
            double acc = 0;
            for (int j = 0; j < k; j++)
                if (ms->sel[row + j] >= 0)
                    acc += (double)ms->w[row + j] * (double)ms->slot_y[(row + j) * L + i];
            ut[i] = (float)acc;
        }
        rmsnorm(ut, ut, w->lat_norm, L, (double)c->rms_eps);
    }
    prof_end(PROF_MOE_MOVE, t0);
    mm(&w->up_lat, ms->lat, n, y);
    t0 = prof_begin();
    for (size_t i = 0; i < (size_t)n * D; i++)
        y[i] += ms->shared[i];
    prof_end(PROF_MOE_MOVE, t0);
}

/* Decode columns (pass_seg.dev: one-token passes when fed alone) use the Vulkan tier as such a
 * lone step does: the
 * shared experts when they are resident (else the CPU, one matmul over the other columns:
 * gathered into b->x, out through b->y, both free during the MLP), and each column's resident
 * routed experts, called exactly as for that token alone; their rows leave ms->csel. */
static k3_status moe_device(fwd_pass *p, int l, moe_scratch *ms) {
    const k3_model    *m = p->m;
    const k3_config   *c = &m->cfg;
    const moe_weights *w = &m->layers[l].moe;
    chunk_buf         *b = p->b;
    const int          n = p->n, k = c->n_active, L = c->latent, D = c->hidden;
    int               *dev = b->moe_dev, ncpu = 0; /* (n) columns whose shared experts ran there */
    for (int g = 0; g < p->nseg; g++)
        for (int t = p->seg[g].t0; t < p->seg[g].t0 + p->seg[g].n; t++)
            ncpu += !(dev[t] = p->seg[g].dev && t == p->seg[g].t0 + p->seg[g].n - 1 &&
                               vkt_shared(m->vk, l, b->xn + (size_t)t * D, ms->shared + (size_t)t * D));
    if (ncpu == n)
        mlp_forward(m, &w->shared, b->xn, n, ms->shared, ms->gate, ms->up);
    else if (ncpu) {
        for (int t = 0, r = 0; t < n; t++)
            if (!dev[t])
                memcpy(b->x + (size_t)r++ * D, b->xn + (size_t)t * D, (size_t)D * sizeof(float));
        mlp_forward(m, &w->shared, b->x, ncpu, b->y, ms->gate, ms->up);
        for (int t = 0, r = 0; t < n; t++)
            if (!dev[t])
                memcpy(ms->shared + (size_t)t * D, b->y + (size_t)r++ * D, (size_t)D * sizeof(float));
    }
    if (!m->vk)
        return K3_OK;
    memcpy(ms->csel, ms->sel, (size_t)n * k * sizeof(int));
    for (int g = 0; g < p->nseg; g++) {
        if (!p->seg[g].dev)
            continue;
        const int t = p->seg[g].t0 + p->seg[g].n - 1, *sel = ms->sel + (size_t)t * k;
        int       n_ids = moe_experts(sel, k, c->n_experts, ms->ids);
        int       n_res = vkt_split(m->vk, l, ms->ids, &n_ids, b->moe_res);
        k3_status rc =
            n_res ? vkt_experts(m->vk, l, b->moe_res, n_res, ms->z + (size_t)t * L, b->moe_resy) : K3_OK;
        if (rc)
            return rc;
        for (int r = 0; r < n_res; r++)
            for (int j = 0; j < k; j++)
                if (sel[j] == b->moe_res[r]) {
                    memcpy(ms->slot_y + ((size_t)t * k + j) * L, b->moe_resy + (size_t)r * L,
                           (size_t)L * sizeof(float));
                    ms->csel[(size_t)t * k + j] = -1;
                }
        p->stats->vk_hits += (uint64_t)n_res;
    }
    return K3_OK;
}

/* Stable LatentMoE over the pass: b->xn (n, D) -> b->y (n, D).
 *   s = σ(gate x);  T = top-k of (s + bias);  w_e = s_e / (Σ_T s + 1e-20) · routed_scale
 *   z = down_lat x;  u = Σ_{e∈T} w_e · w2_e(SiTU-GLU(w1_e z, w3_e z))
 *   y = up_lat RMSNorm(u, routed_expert_norm) + shared(x)
 * Expert-major over the whole pass (a chunk, or a prefill window of many chunks): route every
 * column (the router and down_lat a chunk of columns at a time), then each distinct expert of
 * the pass once over all its tokens (gather, compute as one matmul per projection in blocks of
 * C columns, scatter), in the order the expert tier hands them out (hits, then reads in disk
 * order as they land), then combine a chunk of columns at a time in selection order, so the
 * result depends neither on that order nor on the other columns nor on the window. */
static k3_status moe_forward(fwd_pass *p, int l) {
    const k3_model    *m = p->m;
    const k3_config   *c = &m->cfg;
    const moe_weights *w = &m->layers[l].moe;
    chunk_buf         *b = p->b;
    const int          n = p->n, k = c->n_active, L = c->latent, D = c->hidden, nk = n * k, C = p->cap;
    moe_scratch        ms = moe_scratch_of(b);

    for (int c0 = 0; c0 < n; c0 += C) {
        const int cn = n - c0 < C ? n - c0 : C;
        moe_route(p, l, c0, cn, &ms);
        mm(&w->down_lat, b->xn + (size_t)c0 * D, cn, ms.z + (size_t)c0 * L);
    }
    if (m->vk)
        ms.csel = b->moe_dev + n; /* after the (n) column flags */
    /* a chunk: the shared experts and the Vulkan tier's columns now (moe_device); a window
     * (no one-token pass in it): the shared experts a chunk at a time at the combine */
    const int whole = n <= C;
    k3_status rc    = K3_OK;
    if (whole)
        rc = moe_device(p, l, &ms);
    else if (m->vk)
        memcpy(ms.csel, ms.sel, (size_t)nk * sizeof(int));
    if (rc)
        return rc;
    int      n_ids = moe_bucket(&ms, nk, c->n_experts);
    ex_batch eb;
    rc = ex_begin(m->tier, l, ms.ids, n_ids, p->stats, &eb);
    int              e;
    const k3_expert *x;
    while (!rc && !(rc = ex_next(&eb, &e, &x)) && e >= 0) {
        const int *rows = ms.rows + ms.start[e], np = ms.start[e + 1] - ms.start[e];
        for (int i = 0; i < np; i += C)
            moe_compute(c, x, rows + i, np - i < C ? np - i : C, &ms);
        vkt_offer(m->vk, l, e, &x->w1, &x->w3, &x->w2); /* warm the device tier with what was just read */
        if (!whole && p->nseg == 1 && atomic_load(&p->seg[0].s->cancel)) /* a window's one session */
            rc = k3_err(K3_ABORTED, "cancelled in layer %d of a %d-token prefill window", l, n);
    }
    ex_end(&eb);
    if (rc)
        return rc;
    for (int c0 = 0; c0 < n; c0 += C) {
        const int cn = n - c0 < C ? n - c0 : C;
        if (!whole)
            mlp_forward(m, &w->shared, b->xn + (size_t)c0 * D, cn, ms.shared, ms.gate, ms.up);
        moe_combine(m, w, c0, cn, &ms, b->y + (size_t)c0 * D);
    }
    return K3_OK;
}

/* ==== one decoder layer with Attention Residuals ============================== */

/* The layer's attention over the pass: a chunk at once; a prefill window (n > cap: one
 * session's, or a batch whose joining prompt runs windowed) in sub-passes of at most cap
 * columns in order, each over the window's rows of xn and y: the pieces of the segments that
 * fall in those columns, a segment's later pieces carrying on from the state its earlier ones
 * left uncommitted (pass_seg.off). */
static k3_status attention(fwd_pass *pa, int l) {
    const int kda = pa->m->layers[l].kind == K3_LAYER_KDA, C = pa->cap, n = pa->n, D = pa->m->cfg.hidden;
    if (n <= C) {
        (kda ? kda_forward : mla_forward)(pa, l);
        return K3_OK;
    }
    pass_seg *sg = malloc((size_t)(pa->nseg < C ? pa->nseg : C) * sizeof *sg);
    if (!sg)
        return k3_err(K3_ERR_NOMEM, "layer %d: out of memory for a %d-token prefill window", l, n);
    int g = 0; /* the first segment that reaches into the sub-pass */
    for (int c0 = 0; c0 < n; c0 += C) {
        if (c0 && pa->nseg == 1 && atomic_load(&pa->seg[0].s->cancel)) { /* its one session, between chunks */
            free(sg);
            return k3_err(K3_ABORTED, "cancelled in layer %d of a %d-token prefill window", l, n);
        }
        const int c1 = n - c0 < C ? n : c0 + C;
        chunk_buf b  = *pa->b;
        fwd_pass  sp = *pa;
        b.xn += (size_t)c0 * D;
        b.y += (size_t)c0 * D;
        sp.b    = &b;
        sp.n    = c1 - c0;
        sp.seg  = sg;
        sp.nseg = 0;
        while (pa->seg[g].t0 + pa->seg[g].n <= c0)
            g++;
        for (int i = g; i < pa->nseg && pa->seg[i].t0 < c1; i++) {
            const pass_seg *o = &pa->seg[i];
            const int       a = o->t0 > c0 ? o->t0 : c0, e = o->t0 + o->n < c1 ? o->t0 + o->n : c1;
            pass_seg       *pc = &sg[sp.nseg++];
            *pc                = *o;
            pc->t0             = a - c0;
            pc->n              = e - a;
            pc->off            = o->off + (a - o->t0);
            pc->dev            = 0;
        }
        (kda ? kda_forward : mla_forward)(&sp, l);
    }
    free(sg);
    return K3_OK;
}

/* Spec 5, per token: p = h; x = blocks ? mix(p, blocks, attn_res) : p; on a block restart
 * blocks.append(p); a = Attn(RMSNorm(x)); p = restart ? a : p + a;
 * m = mix(p, blocks, mlp_res); p += MLP(RMSNorm(m)); h = p. */
static k3_status layer_forward(fwd_pass *pa, int l) {
    const k3_model      *m = pa->m;
    const k3_config     *c = &m->cfg;
    const layer_weights *w = &m->layers[l];
    chunk_buf           *b = pa->b;
    const int            n = pa->n;
    const int            D = c->hidden, blk = c->attn_res_block, NB = (m->n_run + blk - 1) / blk;
    const int            nb = (l + blk - 1) / blk, restart = l % blk == 0;
    const double         eps = (double)c->rms_eps;

    prof_t t0 = prof_begin();
#pragma omp parallel for schedule(static) if (n > 1 && (long)n * D >= PAR_MIN)
    for (int t = 0; t < n; t++) {
        float *p = b->h + (size_t)t * D, *bl = b->blocks + (size_t)t * NB * D;
        float *x = b->x + (size_t)t * D;
        if (nb)
            attnres_mix(x, p, bl, nb, w->attn_res_w, D, eps);
        else
            memcpy(x, p, (size_t)D * sizeof(float));
        if (restart)
            memcpy(bl + (size_t)nb * D, p, (size_t)D * sizeof(float));
        rmsnorm(b->xn + (size_t)t * D, x, w->in_norm, D, eps);
    }
    prof_end(PROF_NORM, t0);
    k3_status st = attention(pa, l);
    if (st)
        return st;
    t0 = prof_begin();
#pragma omp parallel for schedule(static) if (n > 1 && (long)n * D >= PAR_MIN)
    for (int t = 0; t < n; t++) {
        float *p = b->h + (size_t)t * D, *a = b->y + (size_t)t * D;
        for (int i = 0; i < D; i++)
            p[i] = restart ? a[i] : p[i] + a[i];
        attnres_mix(b->x + (size_t)t * D, p, b->blocks + (size_t)t * NB * D, nb + restart, w->mlp_res_w, D,
                    eps);
        rmsnorm(b->xn + (size_t)t * D, b->x + (size_t)t * D, w->post_norm, D, eps);
    }
    prof_end(PROF_NORM, t0);
    if (w->dense)
        for (int c0 = 0; c0 < n; c0 += pa->cap) /* a chunk of columns at a time */
            mlp_forward(m, &w->mlp, b->xn + (size_t)c0 * D, n - c0 < pa->cap ? n - c0 : pa->cap,
                        b->y + (size_t)c0 * D, b->proj[0], b->proj[1]);
    else if ((st = moe_forward(pa, l)))
        return st;
    t0 = prof_begin();
    for (size_t i = 0; i < (size_t)n * D; i++)
        b->h[i] += b->y[i];
    prof_end(PROF_NORM, t0);
    return K3_OK;
}

/* logits = lm_head · RMSNorm(mix(h, blocks, output_attn_res), model.norm) for the rows each
 * segment needs, gathered in order into xn's first rows: one lm_head matmul for all. */
static void model_head(fwd_pass *p) {
    const k3_model  *m = p->m;
    const k3_config *c = &m->cfg;
    chunk_buf       *b = p->b;
    const int        D = c->hidden, blk = c->attn_res_block, NB = (m->n_run + blk - 1) / blk;
    prof_t           p0 = prof_begin();
    int              r  = 0;
    for (int g = 0; g < p->nseg; g++) {
        pass_seg *sg = &p->seg[g];
        sg->lrow     = r;
        sg->lcnt     = sg->s->f_logits ? sg->n : 1;
        for (int t = sg->t0 + sg->n - sg->lcnt; t < sg->t0 + sg->n; t++, r++) {
            attnres_mix(b->x + (size_t)t * D, b->h + (size_t)t * D, b->blocks + (size_t)t * NB * D, NB,
                        m->out_res_w, D, (double)c->rms_eps);
            rmsnorm(b->xn + (size_t)r * D, b->x + (size_t)t * D, m->final_norm, D, (double)c->rms_eps);
        }
    }
    prof_end(PROF_NORM, p0);
    mm(&m->lm_head, b->xn, r, b->logits);
}

/* ==== the model: embed -> layers -> head ======================================= */

/* Embedding row of token id, converted to f32 from its stored dtype, into out (D floats). */
static void embed(const k3_model *m, int id, float *out) {
    const int    D   = m->cfg.hidden;
    const size_t off = (size_t)id * D;
    switch (m->embed_dtype) {
    case ST_F32:
        memcpy(out, (const float *)m->embed + off, (size_t)D * sizeof(float));
        break;
    case ST_BF16:
        for (int i = 0; i < D; i++)
            out[i] = k3_bf16_to_f32(((const uint16_t *)m->embed)[off + i]);
        break;
    case ST_F16:
        for (int i = 0; i < D; i++)
            out[i] = k3_f16_to_f32(((const uint16_t *)m->embed)[off + i]);
        break;
    default:
        K3_ASSERT(!"embed dtype");
    }
}

/* Take segment g out of the pass: its entry, and (cols) its columns, the ones after it moving
 * down; the only per-column state between layers is h, the AttnRes blocks and the trace rows. */
static void seg_drop(fwd_pass *p, int g, int cols) {
    const k3_model *m = p->m;
    const int       D = m->cfg.hidden, NB = (m->n_run + m->cfg.attn_res_block - 1) / m->cfg.attn_res_block;
    const int       t0 = p->seg[g].t0, k = p->seg[g].n, rest = p->n - t0 - k;
    chunk_buf      *b = p->b;
    if (cols) {
        memmove(b->h + (size_t)t0 * D, b->h + (size_t)(t0 + k) * D, (size_t)rest * D * sizeof(float));
        memmove(b->blocks + (size_t)t0 * NB * D, b->blocks + (size_t)(t0 + k) * NB * D,
                (size_t)rest * NB * D * sizeof(float));
        if (b->trace)
            memmove(b->trace + (size_t)t0 * m->n_run * D, b->trace + (size_t)(t0 + k) * m->n_run * D,
                    (size_t)rest * m->n_run * D * sizeof(float));
        p->n -= k;
    }
    for (int i = g + 1; i < p->nseg; i++) {
        if (cols)
            p->seg[i].t0 -= k;
        p->seg[i - 1] = p->seg[i];
    }
    p->nseg--;
}

/* Every session of the pass failed with st (its message is current); the pass ends. */
static void fail_all(fwd_pass *p, fwd_fail_fn fail, void *ud, k3_status st) {
    for (int g = 0; g < p->nseg; g++)
        fail(ud, &p->seg[g], st);
    p->nseg = 0;
}

/* K3_MMAP=1: a mapped shard faulted since gen0 (st_map_gen: a file truncated under the engine):
 * the error of the pass (what it computed read zeros), else K3_OK. */
static k3_status map_faulted(const k3_model *m, unsigned long gen0) {
    return m->map && st_map_gen() != gen0 ? st_map_check(m->st) : K3_OK;
}

void model_forward(fwd_pass *p, const int32_t *const *ids, fwd_fail_fn fail, void *ud) {
    const k3_model *m = p->m;
    const int       D = m->cfg.hidden, V = m->cfg.vocab;
    chunk_buf      *b = p->b;
    /* K3_MMAP=1: a shard that faulted in an earlier pass is mapped again first, or the pass fails */
    unsigned long gen0 = st_map_gen();
    k3_status     st0  = m->map ? st_map_repair(m->st) : K3_OK;
    if (st0) {
        fail_all(p, fail, ud, st0);
        return;
    }
    /* embed: each column's token, or its K3_X0 row; K3_TEST_NAN_TOKEN's id a NaN (the layers'
     * check fails that session alone, as an overflow in its hidden state would) */
    for (int g = 0; g < p->nseg; g++) {
        const k3_session *s = p->seg[g].s;
        for (int t = 0; t < p->seg[g].n; t++) {
            float *h = b->h + (size_t)(p->seg[g].t0 + t) * D;
            if (s->x0) {
                memcpy(h, s->x0 + (size_t)(s->pos + t) * D, (size_t)D * sizeof(float));
                continue;
            }
            embed(m, ids[g][t], h);
            if (ids[g][t] == s->nan_id)
                h[0] = NAN;
        }
    }
    /* the layers; a cancelled session leaves between them */
    for (int l = 0; l < m->n_run; l++) {
        for (int g = p->nseg - 1; g >= 0; g--)
            if (atomic_load(&p->seg[g].s->cancel)) {
                fail(ud, &p->seg[g],
                     k3_err(K3_ABORTED, "cancelled before layer %d of a %d-token chunk", l, p->seg[g].n));
                seg_drop(p, g, 1);
            }
        if (!p->nseg)
            return;
        k3_status st = layer_forward(p, l);
        if (st || (st = map_faulted(m, gen0))) {
            fail_all(p, fail, ud, st);
            return;
        }
        /* a NaN or inf in a session's hidden state fails it here, naming the layer that made
         * it (an overflow in that layer's weights), not as non-finite logits after the rest */
        for (int g = p->nseg - 1; g >= 0; g--) {
            const pass_seg *sg = &p->seg[g];
            const size_t    ne = (size_t)sg->n * D,
                         i     = model_first_nonfinite(b->h + (size_t)sg->t0 * D, ST_F32, ne);
            if (i < ne) {
                fail(ud, sg,
                     k3_err(K3_ERR_NUMERIC, "layer %d (%s, %s): the hidden state is %s at position %d", l,
                            m->layers[l].kind == K3_LAYER_KDA ? "KDA" : "MLA",
                            m->layers[l].dense ? "dense MLP" : "MoE",
                            isnan(b->h[(size_t)sg->t0 * D + i]) ? "NaN" : "infinite",
                            sg->s->pos + (int)(i / D)));
                seg_drop(p, g, 1);
            }
        }
        if (!p->nseg)
            return;
        if (b->trace) /* K3_TRACE: h after each layer */
            for (int t = 0; t < p->n; t++)
                memcpy(b->trace + ((size_t)t * m->n_run + l) * D, b->h + (size_t)t * D,
                       (size_t)D * sizeof(float));
        if (p->on_layer)
            p->on_layer(p, l);
    }
    /* the head: lm_head for the last row of each session, or every row while K3_LOGITS is set */
    model_head(p);
    if ((st0 = map_faulted(m, gen0))) {
        fail_all(p, fail, ud, st0);
        return;
    }
    for (int g = 0; g < p->nseg; g++) { /* every row handed out: the last, or each K3_LOGITS writes */
        const pass_seg *sg = &p->seg[g];
        const float    *lg = b->logits + (size_t)sg->lrow * V;
        const size_t    ne = (size_t)sg->lcnt * V, i = model_first_nonfinite(lg, ST_F32, ne);
        if (i < ne) {
            fail(ud, sg,
                 k3_err(K3_ERR_NUMERIC, "logit %zu at position %d is not finite", i % (size_t)V,
                        sg->s->pos + sg->n - sg->lcnt + (int)(i / (size_t)V)));
            seg_drop(p, g--, 0);
        }
    }
}
