/* fit.c: the memory plan, the machine's available memory and the fit decision (fit.h; rules
 * and order there and in k3chat(1), MEMORY FIT).
 *
 * DESIGN
 * fit_scan walks the tensor table (tensors.h) over the globals and the run layers (the routed
 * experts are all alike: one is measured) and sums each memory class at 32, 8 and 4 bits, so
 * every candidate plan afterwards is arithmetic. It needs only config.json: matrices count at
 * their logical shape, and what is held as stored (embeddings, experts) at the release's dtype,
 * or at the header's when the shards are open. k3_model_open runs it twice: before any shard
 * header is read, to refuse at once what cannot fit (the figures are a lower bound: a
 * checkpoint may store BF16 tensors as F32), and after, for the exact plan it runs with. fit_decide tries the
 * documented order and writes one line saying what it chose and why, or, when nothing fits, the refusal with
 * every figure a user needs to choose.
 */
#include "fit.h"
#include "model-impl.h"
#include "repack.h"
#include "tensors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIT_GB 1e9

const char *fit_hb(char *buf, size_t n, double b) {
    static const char *u[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    int                i   = 0;
    while (b >= 1000 && i < 5) {
        b /= 1000;
        i++;
    }
    snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", b, u[i]);
    return buf;
}
#define HB(x) fit_hb((char[32]){0}, 32, (double)(x))

/* ---- the tensor table ---------------------------------------------------------------------- */

static uint64_t qbytes(int bits, int64_t rows, int64_t cols) {
    int t = rp_bits_type(bits);
    return (uint64_t)q_wbytes(t, (int)rows, (int)cols) + q_sbytes(t, (int)rows, (int)cols);
}

/* Bytes of a matrix of the table held at BITS, from its logical shape (the table's, from
 * config.json), so the plan needs no shard header. In a k3 container (repack.h; SPLIT) kv_b is
 * held split per head (uk_t[h], uv[h], each quantized by rows), as the engine holds it. */
static uint64_t matrix_bytes(const k3_config *c, const tt_ref *r, int split, int bits) {
    if (split && tt_table[r->id].kind == TT_K_KVB) {
        rp_kvb k = {.Hm = c->n_heads, .nope = c->nope, .v = c->v_dim, .kl = c->kv_lora};
        int    q = rp_bits_type(bits);
        return (uint64_t)c->n_heads *
               (rp_kvb_head_wbytes(q, &k) + rp_kvb_head_sfloats(q, &k) * sizeof(float));
    }
    return qbytes(bits, r->shape.s[0], r->shape.s[1]);
}

/* Bytes of a tensor as stored: from its header when the shards are open (D), else the release's
 * dtype of the row (a lower bound: loaders take F32/F16/BF16 where the release has BF16). */
static uint64_t stored_bytes(const st_dir *d, const tt_ref *r) {
    static const int dt_size[] = {[TT_DT_BF16] = 2, [TT_DT_F32] = 4, [TT_DT_U8] = 1};
    const st_tensor *t         = d ? st_find(d, r->name) : NULL;
    return t ? t->nbytes : (uint64_t)tt_numel(r->shape) * (uint64_t)dt_size[tt_table[r->id].dtype];
}

typedef struct scan_ctx {
    const k3_config *c;
    const st_dir    *d;
    int              split;
    fit_table       *o;
} scan_ctx;

/* One tensor of the table (tensors.h): matrices at 32, 8 and 4 bits by their kind, embeddings
 * as stored, the rest f32. */
static k3_status scan_one(const tt_ref *r, void *ud) {
    static const int bits[3] = {32, 8, 4};
    scan_ctx        *x       = ud;
    const int        kind    = tt_table[r->id].kind;
    const st_tensor *t       = x->d ? st_find(x->d, r->name) : NULL;
    const uint64_t   n       = t ? (uint64_t)st_numel(t) : (uint64_t)tt_numel(r->shape);
    int              k       = kind == TT_K_BITS                      ? FIT_DENSE
                               : kind == TT_K_MLA || kind == TT_K_KVB ? FIT_MLA
                               : kind == TT_K_HEAD                    ? FIT_HEAD
                                                                      : -1;
    if (k >= 0) {
        int split = x->split || (t && t->ndim == 1);              /* a container's kv_b is 1-D */
        x->o->n_mats += kind == TT_K_KVB ? 2 * x->c->n_heads : 1; /* kv_b: uk_t and uv per head */
        for (int b = 0; b < 3; b++)
            x->o->mat[k][b] += matrix_bytes(x->c, r, split, tt_bits(kind, bits[b], bits[b], bits[b]));
        uint64_t f32 = (uint64_t)tt_numel(r->shape) * 4;
        if (f32 > x->o->big_f32)
            x->o->big_f32 = f32;
    } else if (kind == TT_K_EMBED) {
        x->o->embed += stored_bytes(x->d, r);
    } else {
        x->o->small += n * 4;
        x->o->n_mats += kind == TT_K_F32; /* router, f_a, f_b, b_proj: f32 products */
    }
    return K3_OK;
}

/* One routed expert (all are alike): its six tensors as stored. */
static k3_status scan_expert(const tt_ref *r, void *ud) {
    scan_ctx *x = ud;
    if (r->expert == 0)
        x->o->expert_one += stored_bytes(x->d, r);
    return K3_OK;
}

k3_status fit_scan(const k3_config *c, const st_dir *d, int n_run, int split, fit_table *o) {
    memset(o, 0, sizeof *o);
    o->n_run  = n_run;
    int moe_l = -1;
    for (int l = 0; l < n_run; l++) {
        c->layer_kind[l] == K3_LAYER_KDA ? o->n_kda++ : o->n_mla++;
        if (l >= c->first_dense) {
            o->n_moe++;
            if (moe_l < 0)
                moe_l = l;
        }
    }
    scan_ctx  x = {c, d, split, o};
    k3_status st;
    for (int l = -1; l < n_run; l++) /* the globals, then the run layers; experts below */
        if ((st = tt_walk(c, l, 0, scan_one, &x)))
            return st;
    if (moe_l >= 0 && (st = tt_walk(c, moe_l, TT_WALK_EXPERTS, scan_expert, &x)))
        return st; /* expert 0 */
    o->expert_all = o->expert_one * (uint64_t)o->n_moe * (uint64_t)c->n_experts;
    if (moe_l >= 0 && c->n_experts > 0)
        o->ex_rows = c->moe_inter, o->ex_cols = c->latent;
    const uint64_t P = (uint64_t)c->kda_heads * (uint64_t)c->kda_head_dim;
    if (o->n_kda)
        o->kda_heads = c->kda_heads, o->kda_d = c->kda_head_dim;
    /* double-buffered (model-impl.h: a chunk reads one buffer and writes the other) */
    o->kda_state =
        2 * (uint64_t)o->n_kda * (P * (uint64_t)c->kda_head_dim + 3 * (uint64_t)(c->conv_k - 1) * P) * 4;
    o->mla_per_pos = (uint64_t)o->n_mla * (uint64_t)(c->kv_lora + c->rope) * 4;
    o->blocks =
        (uint64_t)(n_run / (c->attn_res_block > 0 ? c->attn_res_block : 1) + 2) * (uint64_t)c->hidden * 4;
    /* the chunk buffer is affine in its columns and positions: three points give it */
    uint64_t c1 = chunk_buf_bytes(c, n_run, 1, 1, 0), c2 = chunk_buf_bytes(c, n_run, 2, 2, 0);
    o->cb_col     = c2 - c1;
    o->cb_base    = c1 - o->cb_col;
    o->cb_pos     = chunk_buf_bytes(c, n_run, 1, 1, 1) - c1;
    o->sess_extra = session_scratch_bytes(c, n_run, 1, 0) - c1;
    uint64_t w1 = window_buf_bytes(c, n_run, 1, 1), w2 = window_buf_bytes(c, n_run, 2, 1);
    o->win_col    = w2 - w1;
    o->win_base   = w1 - o->win_col;
    o->win_logits = window_buf_bytes(c, n_run, 1, 2) - w1;
    return K3_OK;
}

static int bits_ix(int bits) {
    return bits == 32 ? 0 : bits == 8 ? 1 : 2;
}

void fit_plan_at(const fit_table *t, const fit_set *s, fit_plan *p) {
    memset(p, 0, sizeof *p);
    p->b[FIT_DENSE]  = t->mat[FIT_DENSE][bits_ix(s->bits)];
    p->b[FIT_MLA]    = t->mat[FIT_MLA][bits_ix(s->mla_bits)];
    p->b[FIT_HEAD]   = t->mat[FIT_HEAD][bits_ix(s->head_bits)];
    p->b[FIT_EMBED]  = t->embed;
    p->b[FIT_SMALL]  = t->small;
    uint64_t floor_b = (uint64_t)t->n_moe * t->expert_one;
    uint64_t want    = s->expert_gb < 0 ? floor_b : (uint64_t)(s->expert_gb * FIT_GB);
    want             = want < floor_b ? floor_b : want > t->expert_all ? t->expert_all : want;
    p->b[FIT_EXPERT] = want;
    uint64_t ns = (uint64_t)(s->sessions > 1 ? s->sessions : 1), T = (uint64_t)s->maxt;
    uint64_t C         = (uint64_t)(s->chunk > 1 ? s->chunk : 1);
    p->b[FIT_KDA]      = ns * t->kda_state;
    p->b[FIT_MLACACHE] = ns * t->mla_per_pos * T;
    p->b[FIT_BLOCKS]   = t->blocks;
    p->b[FIT_SCRATCH]  = ns * (t->cb_base + t->cb_col * C + t->cb_pos * T + t->sess_extra);
    if (ns > C) /* the batch buffer of the lead session: one column per session */
        p->b[FIT_SCRATCH] += t->cb_base + t->cb_col * ns + t->cb_pos * T;
    if ((uint64_t)s->window > C) /* one prefill window at a time */
        p->b[FIT_WINDOW] =
            t->win_base + (t->win_col + (s->all_logits ? t->win_logits : 0)) * (uint64_t)s->window;
    if (s->map) {
        for (int k = FIT_DENSE; k <= FIT_EMBED; k++)
            p->mapped += p->b[k];
        for (int k = FIT_DENSE; k <= FIT_EMBED; k++)
            p->b[k] = 0;
    }
    for (int k = 0; k < FIT_NCLASS; k++)
        p->total += p->b[k];
}

/* ---- the machine --------------------------------------------------------------------------- */

double fit_meminfo_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char   line[256];
    double kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

k3_status fit_machine_get(fit_machine *o) {
    memset(o, 0, sizeof *o);
    o->meminfo = fit_meminfo_available();
    double phys, limit;
    k3_machine_memory(&phys, &limit, &o->cgroup);
    double    g = 0, load = 0;
    k3_status st;
    if ((st = k3_setting_env(K3_SETTING_MEM_GB, &g)) || (st = k3_setting_env(K3_SETTING_TEST_LOAD, &load)))
        return st; /* K3_TEST_LOAD: read by the speed figures (speed.c), checked here with the rest */
    if (g > 0) {
        o->avail = g * FIT_GB;
        o->src   = "K3_MEM_GB";
    } else if (o->cgroup > 0 && (o->meminfo <= 0 || o->cgroup < o->meminfo)) {
        o->avail = o->cgroup;
        o->src   = "cgroup memory limit";
    } else {
        o->avail = o->meminfo;
        o->src   = "MemAvailable";
    }
    o->usable = o->avail - (0.5 * FIT_GB + 0.05 * o->avail);
    if (o->usable < 0)
        o->usable = 0;
    return K3_OK;
}

/* ---- the decision --------------------------------------------------------------------------- */

/* "K3_BITS=4 K3_MLA_BITS=8 ..." of s; only the settings that differ from ref when ref != NULL. */
static void set_str(char *buf, size_t n, const fit_set *s, const fit_set *ref, int with_cache) {
    size_t o = 0;
    buf[0]   = 0;
#define ADD(...) o += (size_t)snprintf(buf + o, o < n ? n - o : 0, __VA_ARGS__)
    if (!ref || s->bits != ref->bits)
        ADD("%sK3_BITS=%d", o ? " " : "", s->bits);
    if (!ref || s->mla_bits != ref->mla_bits)
        ADD("%sK3_MLA_BITS=%d", o ? " " : "", s->mla_bits);
    if (!ref || s->head_bits != ref->head_bits)
        ADD("%sK3_HEAD_BITS=%d", o ? " " : "", s->head_bits);
    if (with_cache && s->expert_gb >= 0 && (!ref || s->expert_gb != ref->expert_gb))
        ADD("%sK3_EXPERT_GB=%.2f", o ? " " : "", s->expert_gb);
    if (!ref || s->maxt != ref->maxt)
        ADD("%sK3_MAXT=%ld", o ? " " : "", s->maxt);
#undef ADD
}

/* What each session of settings s takes: "1 session: MLA cache .. (K3_MAXT=..) + KDA state .. +
 * chunk scratch .. (K3_CHUNK=..)", or "N sessions (--parallel), each: ..." (fit_plan_at's figures) */
static void sess_str(char *buf, size_t n, const fit_table *t, const fit_set *s) {
    int      ns = s->sessions > 1 ? s->sessions : 1, C = s->chunk > 1 ? s->chunk : 1;
    uint64_t T = (uint64_t)s->maxt;
    snprintf(buf, n,
             "%d session%s: MLA cache %s (K3_MAXT=%ld) + KDA state %s + chunk scratch %s (K3_CHUNK=%d)%s", ns,
             ns > 1 ? "s (--parallel), each" : "", HB(t->mla_per_pos * T), s->maxt, HB(t->kda_state),
             HB(t->cb_base + t->cb_col * (uint64_t)C + t->cb_pos * T + t->sess_extra), C,
             ns > C ? ", and a batch buffer of one column per session" : "");
}

static int same_bits(const fit_set *a, const fit_set *b) {
    return a->bits == b->bits && a->mla_bits == b->mla_bits && a->head_bits == b->head_bits;
}

/* The plan of s with the cache at its floor (unset) or as given; fits in usable? */
static int fits(const fit_table *t, const fit_machine *mc, const fit_set *s, fit_plan *p) {
    fit_plan_at(t, s, p);
    return (double)p->total <= mc->usable;
}

/* The prefill window of s's plan p (window at 0): the wanted one (at most K3_MAXT), or what
 * fits of it in half of what usable leaves beside the plan with the expert cache at its floor
 * (an unset cache takes the rest) or all of it (a given cache); at most the chunk: none. */
static int window_fit(const fit_table *t, const fit_machine *mc, const fit_set *s, const fit_plan *p,
                      int want) {
    const uint64_t col  = t->win_col + (s->all_logits ? t->win_logits : 0);
    double         left = mc->usable - (double)p->total - (s->map ? (double)p->mapped : 0);
    if (s->expert_gb < 0)
        left /= 2;
    double fit = col ? (left - (double)t->win_base) / (double)col : want;
    int    w   = fit >= want ? want : fit < 0 ? 0 : (int)fit;
    return w > s->chunk ? w : 0;
}

/* out for candidate i of the fit order (cand[i], which fits with plan p, the bits and cache
 * chosen): the window that fits beside it (of want), an unset cache given what is left, the plan,
 * what of the mapped weights is re-read, and the line that says so (room: the memory's figures). */
static void fit_accept(const fit_table *t, const fit_machine *mc, const fit_set *given, int mask,
                       const fit_set cand[3], int i, fit_plan *p, int want, const char *room,
                       fit_choice *out) {
    char   sets[256], sess[512];
    size_t o = 0, n = sizeof out->msg;
    out->ok = 1, out->level = i, out->set = cand[i];
    out->set.window = window_fit(t, mc, &cand[i], p, want);
    fit_plan_at(t, &out->set, p);
    if (given->expert_gb < 0) { /* the cache takes what is left of usable, at most all experts */
        double left = mc->usable - (double)p->total + (double)p->b[FIT_EXPERT] - (double)p->mapped;
        double all = (double)t->expert_all, floor_b = (double)p->b[FIT_EXPERT];
        left               = left < floor_b ? floor_b : left;
        out->set.expert_gb = (left < all ? left : all) / FIT_GB;
    }
    fit_plan_at(t, &out->set, &out->plan);
    double room_map  = mc->usable - (double)out->plan.total;
    out->plan.reread = room_map >= (double)out->plan.mapped ? 0
                       : room_map <= 0                      ? out->plan.mapped
                                                            : out->plan.mapped - (uint64_t)room_map;
    set_str(sets, sizeof sets, &out->set, NULL, 0);
    int nexp =
        t->expert_one
            ? (int)((double)out->plan.b[FIT_EXPERT] / (double)t->expert_one / (t->n_moe ? t->n_moe : 1))
            : 0;
    sess_str(sess, sizeof sess, t, &out->set);
    o += (size_t)snprintf(
        out->msg + o, n - o,
        "memory fit: %s, expert cache %s (%s; %d expert%s per MoE layer, all %s)%s: plan %s of %s; %s", sets,
        HB(out->plan.b[FIT_EXPERT]),
        mask & K3_SET_EXPERT_GB ? "K3_EXPERT_GB"
        : out->set.map          ? "what is left after the mapped weights"
                                : "what is left",
        nexp, nexp == 1 ? "" : "s", HB(t->expert_all), out->set.map ? " mapped weights not counted" : "",
        HB(out->plan.total), room, sess);
    if (out->set.map)
        o += (size_t)snprintf(out->msg + o, o < n ? n - o : 0,
                              "; mapped weights %s: %s of them do not fit beside the plan and are read "
                              "again from the drive each token",
                              HB(out->plan.mapped), HB(out->plan.reread));
    snprintf(out->brief, sizeof out->brief, "%d/%d/%d bits%s · cache %s", out->set.bits, out->set.mla_bits,
             out->set.head_bits,
             i == 1   ? " (fit step 2)"
             : i == 2 ? " (fit step 3)"
                      : "",
             HB(out->plan.b[FIT_EXPERT]));
    if (i) {
        fit_plan p0;
        fit_plan_at(t, &cand[0], &p0);
        set_str(sets, sizeof sets, &cand[0], NULL, 0);
        o += (size_t)snprintf(
            out->msg + o, o < n ? n - o : 0,
            "; chosen: step %d of the fit order, since %s needs %s with one expert per MoE layer", i + 1,
            sets, HB(p0.total));
    } else {
        o += (size_t)snprintf(out->msg + o, o < n ? n - o : 0, "; %s",
                              mask ? "the given settings fit" : "the defaults fit");
    }
    if (out->set.window) /* last: the line's start reads as before */
        o += (size_t)snprintf(out->msg + o, o < n ? n - o : 0, "; prefill window %d tokens (%s)%s",
                              out->set.window, HB(out->plan.b[FIT_WINDOW]),
                              out->set.window < want ? ", shrunk to fit the memory" : "");
    else if (want > out->set.chunk)
        o += (size_t)snprintf(out->msg + o, o < n ? n - o : 0,
                              "; no prefill window (%d tokens do not fit the memory): per chunk", want);
}

/* The refusal's alternatives after its figures at out->msg + o: each step of the fit order over
 * the explicit settings too (cache at its floor), the largest K3_EXPERT_GB that fits, the most
 * sessions that fit, a k3-repack container with K3_MMAP=1. */
static void fit_alternatives(const fit_table *t, const fit_machine *mc, const fit_set *given, int mask,
                             const fit_set cand[3], fit_choice *out, size_t o) {
    char   sets[256];
    size_t n   = sizeof out->msg;
    int    any = 0;
    /* every step of the order, over the explicit settings too, with the cache at its floor */
    fit_set alt[4] = {*given, *given, *given, *given};
    alt[0].bits = 8, alt[0].mla_bits = 8, alt[0].head_bits = 8;
    alt[1] = alt[0], alt[1].bits = 4;
    alt[2] = alt[1], alt[2].mla_bits = 4, alt[2].head_bits = 4;
    for (int i = 0; i < 3; i++) {
        fit_set a   = alt[i];
        a.expert_gb = -1;
        if (a.maxt > 8192 && (mask & K3_SET_MAXT))
            a.maxt = 8192;
        fit_plan p;
        int      ok = fits(t, mc, &a, &p);
        set_str(sets, sizeof sets, &a, given, 0);
        if (!sets[0])
            continue;
        o += (size_t)snprintf(out->msg + o, o < n ? n - o : 0, "%s%s: %s%s", any++ ? "; " : "", sets,
                              HB(p.total), ok ? " (fits)" : "");
    }
    if (mask & K3_SET_EXPERT_GB) { /* the largest cache that fits at the given bits */
        fit_set a   = *given;
        a.expert_gb = -1;
        fit_plan p;
        if (fits(t, mc, &a, &p)) {
            double most = (mc->usable - (double)p.total + (double)p.b[FIT_EXPERT]) / FIT_GB;
            o += (size_t)snprintf(out->msg + o, o < n ? n - o : 0, "%sK3_EXPERT_GB=%.2f: %s (fits)",
                                  any++ ? "; " : "", floor(most * 100) / 100, HB(mc->usable));
        }
    }
    if (given->sessions > 1) { /* the most sessions that fit, at the first step of the order that holds one */
        for (int i = 0; i < 3; i++) {
            fit_set a   = cand[i];
            a.expert_gb = given->expert_gb, a.sessions = 1;
            fit_plan p;
            if (!fits(t, mc, &a, &p))
                continue;
            while (a.sessions < given->sessions - 1) {
                a.sessions++;
                if (!fits(t, mc, &a, &p)) {
                    a.sessions--;
                    break;
                }
            }
            fits(t, mc, &a, &p);
            set_str(sets, sizeof sets, &a, given, 0);
            o += (size_t)snprintf(out->msg + o, o < n ? n - o : 0, "%s--parallel %d%s%s: %s (fits)",
                                  any++ ? "; " : "", a.sessions, sets[0] ? " with " : "", sets, HB(p.total));
            break;
        }
    }
    fit_set mm   = *given;
    mm.expert_gb = -1, mm.map = 1, mm.maxt = mm.maxt > 8192 ? 8192 : mm.maxt;
    fit_plan pm;
    int      ok = fits(t, mc, &mm, &pm);
    snprintf(out->msg + o, o < n ? n - o : 0,
             "%sa k3-repack container with K3_MMAP=1: %s private%s (+ %s mapped from the page cache)",
             any ? "; " : "", HB(pm.total), ok ? " (fits)" : "", HB(pm.mapped));
}

void fit_decide(const fit_table *t, const fit_machine *mc, const fit_set *given0, int mask, fit_choice *out) {
    fit_set g1 = *given0, *given = &g1;
    int     want = given0->window > 0 && given0->window < given0->maxt ? given0->window : (int)given0->maxt;
    g1.window    = 0; /* the bits and the cache are chosen as before; the window takes its share after */
    fit_set cand[3] = {*given, *given, *given};
    if (!(mask & K3_SET_BITS) && cand[1].bits > 4)
        cand[1].bits = 4;
    cand[2] = cand[1];
    if (!(mask & K3_SET_MLA_BITS) && cand[2].mla_bits > 4)
        cand[2].mla_bits = 4;
    if (!(mask & K3_SET_HEAD_BITS) && cand[2].head_bits > 4)
        cand[2].head_bits = 4;
    memset(out, 0, sizeof *out);
    out->win_want = want;
    char   sets[256], room[256], sess[512];
    size_t o = 0, n = sizeof out->msg;
    snprintf(room, sizeof room, "%s usable of %s available (%s; reserve 0.5 GB + 5%%)", HB(mc->usable),
             HB(mc->avail), mc->src);
    for (int i = 0; i < 3; i++) {
        if (i && same_bits(&cand[i], &cand[i - 1]))
            continue;
        fit_plan p;
        if (fits(t, mc, &cand[i], &p)) {
            fit_accept(t, mc, given, mask, cand, i, &p, want, room, out);
            return;
        }
    }
    /* refused: the figures */
    out->set = *given;
    fit_plan_at(t, given, &out->plan);
    set_str(sets, sizeof sets, given, NULL, 1);
    sess_str(sess, sizeof sess, t, given);
    o += (size_t)snprintf(out->msg + o, n - o, "memory: %s%s needs %s (%s) but only %s; the plan counts %s; ",
                          sets, given->expert_gb < 0 ? " with one expert per MoE layer" : "",
                          HB(out->plan.total),
                          mask ? "settings given explicitly are never changed" : "nothing fits", room, sess);
    fit_alternatives(t, mc, given, mask, cand, out, o);
}
