/* inspect.c: `k3chat --inspect MODEL_DIR`: what a checkpoint holds and what loading it with the
 * current settings would need, or the first error found (API: k3_inspect in k3.h).
 *
 * DESIGN
 * Everything is validated first (config.json, every text shard header, every tensor the config
 * implies) so the report is printed only for a checkpoint that would load; an error leaves the
 * one-line message in k3_errmsg(). Nothing but headers is read: the report comes from the tensor
 * table (shapes, dtypes, shard offsets), never from tensor data, so it is fast on the 1.5 TB
 * release.
 *
 * Memory estimate, by the kinds of the tensor table (tensors.h), at the engine's settings
 * (k3_params_default, i.e. its defaults and K3_*, and for a k3 container the stored bits where
 * K3_BITS / K3_MLA_BITS / K3_HEAD_BITS are unset, by the engine's rule rp_run_bits; the report
 * marks those "(container)"):
 *   K3_BITS        KDA q/k/v/g/o, latent down/up, shared experts, dense MLP matrices
 *   K3_MLA_BITS    MLA q_a, q_b, kv_a, kv_b, o, g
 *   K3_HEAD_BITS   lm_head
 *   32 = f32, 8 = int8 per row, 4 = int4 in groups of 64 (quant.h), from the logical shape (a
 *   container's quantized matrices and split kv_b: matrix_bytes); embeddings as stored; norms,
 *   router, conv taps, dt_bias, A_log, f_a/f_b, b_proj in f32; routed experts as stored: a cache
 *   of K3_EXPERT_GB (10^9 bytes; at least one expert per MoE layer), or when it is unset the
 *   expert tier's default (all of them if that is at most half of MemAvailable, else 40% of
 *   MemAvailable: ex_default_bytes); decode state for
 *   K3_MAXT positions (KDA state + conv tails, MLA latent cache, AttnRes blocks).
 */
#include "config.h"
#include "experts.h"
#include "quant.h"
#include "repack.h"
#include "tensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The engine's settings (k3_params_default: defaults, then the K3_* environment; a container's
 * bits as the engine takes them: rp_run_bits). */
typedef struct insp_settings {
    int    bits, mla_bits, head_bits;
    int    from;       /* RP_FROM_* mask: bits a k3 container brought (the variable unset) */
    double expert_gb;  /* < 0: unset (the expert tier's default); 0: the floor of one expert per MoE layer */
    long   maxt;
    int    maxt_set;
} insp_settings;

static k3_status read_settings(const char *dir, insp_settings *s) {
    k3_params p;
    rp_info   ci;
    k3_status st = k3_params_default(&p);
    if (st || (st = rp_info_load(dir, &ci))) return st;
    s->from = rp_run_bits(&ci, &p);
    s->bits = p.bits;
    s->mla_bits = p.mla_bits;
    s->head_bits = p.head_bits;
    s->expert_gb = p.expert_gb >= 0 ? p.expert_gb : -1;
    s->maxt = p.max_ctx;
    const char *t = getenv("K3_MAXT");
    s->maxt_set = t && *t;
    return K3_OK;
}

/* "17.55 MB": decimal units, as the spec's figures. */
static const char *hbytes(char *buf, size_t n, double b) {
    static const char *u[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    int i = 0;
    while (b >= 1000 && i < 5) {
        b /= 1000;
        i++;
    }
    snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", b, u[i]);
    return buf;
}
#define HB(x) hbytes((char[32]){0}, 32, (double)(x))

static uint64_t qbytes(int bits, int64_t rows, int64_t cols) {
    int t = rp_bits_type(bits);
    return (uint64_t)q_wbytes(t, (int)rows, (int)cols) + q_sbytes(t, (int)rows, (int)cols);
}

/* ---- memory classes --------------------------------------------------------------------------- */

enum { M_DENSE, M_MLA, M_HEAD, M_EMBED, M_FLOAT, M_EXPERT, M_COUNT };

/* The memory class of a kind of the tensor table. */
static int mem_class(int kind) {
    switch (kind) {
    case TT_K_BITS: return M_DENSE;
    case TT_K_MLA:
    case TT_K_KVB: return M_MLA;
    case TT_K_HEAD: return M_HEAD;
    case TT_K_EMBED: return M_EMBED;
    case TT_K_PACK:
    case TT_K_SCALE: return M_EXPERT;
    default: return M_FLOAT; /* f32 matrices and vectors */
    }
}

/* Bytes of quantizable matrix T held at BITS, from its logical shape. That is T's shape, except
 * in a k3 container (repack.h): kv_b is 1-D, split per head (uk_t[h], uv[h], each quantized by
 * rows), and a U8 matrix comes with NAME.qs: 1-D for int8 (as wide as stored), 2-D for int4 (two
 * columns a byte; an odd width counts one column more, a byte or four per row over at 8 or 32
 * bits, exact at 4). The sidecar itself is counted here, never on its own. */
static uint64_t matrix_bytes(const k3_config *c, const st_dir *d, const st_tensor *t, int bits) {
    if (t->ndim == 1) {
        rp_kvb k = {.Hm = c->n_heads, .nope = c->nope, .v = c->v_dim, .kl = c->kv_lora};
        int    q = rp_bits_type(bits);
        return (uint64_t)c->n_heads * (rp_kvb_head_wbytes(q, &k) + rp_kvb_head_sfloats(q, &k) * sizeof(float));
    }
    int64_t cols = t->shape[1];
    if (t->dtype == ST_U8) {
        char sc[512];
        snprintf(sc, sizeof sc, "%s" RP_SIDECAR, t->name);
        const st_tensor *s = st_find(d, sc);
        if (s && s->ndim == 2) cols *= 2;
    }
    return qbytes(bits, t->shape[0], cols);
}

/* ---- experts: size, contiguity, order ------------------------------------------------------- */

typedef struct expert_pos {
    int      id, shard;
    uint64_t begin;
} expert_pos;

static int cmp_pos(const void *a, const void *b) {
    const expert_pos *x = a, *y = b;
    if (x->shard != y->shard) return x->shard - y->shard;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

typedef struct expert_stats {
    uint64_t bytes_per;         /* the tensors of one expert (six)             */
    uint64_t total;             /* all routed experts                          */
    long     n, n_split;        /* experts; experts not stored back to back     */
    int      layers_unordered;  /* MoE layers with experts out of id order      */
} expert_stats;

static k3_status scan_experts(const k3_config *c, const st_dir *d, expert_stats *es) {
    memset(es, 0, sizeof *es);
    expert_pos *pos = k3_calloc((size_t)c->n_experts, sizeof *pos);
    if (!pos) return k3_err(K3_ERR_NOMEM, "out of memory");
    for (int l = c->first_dense; l < c->n_layers; l++) {
        for (int e = 0; e < c->n_experts; e++) {
            uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
            int      shard = -1, split = 0;
            for (int k = TT_EXPERT_FIRST; k < TT_COUNT; k++) {
                char             name[192];
                const st_tensor *t = st_find(d, tt_name(name, sizeof name, k, l, e));
                K3_ASSERT(t); /* cfg_check_tensors ran first */
                if (shard >= 0 && t->shard != shard) split = 1;
                shard = t->shard;
                if (t->offset < lo) lo = t->offset;
                if (t->offset + t->nbytes > hi) hi = t->offset + t->nbytes;
                sum += t->nbytes;
            }
            if (split || hi - lo != sum) es->n_split++;
            es->bytes_per = sum;
            es->total += sum;
            es->n++;
            pos[e] = (expert_pos){e, shard, lo};
        }
        qsort(pos, (size_t)c->n_experts, sizeof *pos, cmp_pos);
        for (int e = 1; e < c->n_experts; e++)
            if (pos[e].shard == pos[e - 1].shard && pos[e].id < pos[e - 1].id) {
                es->layers_unordered++;
                break;
            }
    }
    free(pos);
    return K3_OK;
}

/* ---- report ------------------------------------------------------------------------------------ */

static void print_plan(const k3_config *c, FILE *f) {
    int n_kda = 0, n_mla = 0;
    for (int l = 0; l < c->n_layers; l++) c->layer_kind[l] == K3_LAYER_KDA ? n_kda++ : n_mla++;
    fprintf(f, "layers       %d: %d KDA + %d MLA attention; %d dense MLP + %d MoE\n", c->n_layers, n_kda, n_mla,
            c->first_dense, c->n_layers - c->first_dense);
    fprintf(f, "plan         K = KDA, M = MLA, lower case = dense MLP; groups of attn_res_block_size %d\n",
            c->attn_res_block);
    for (int l = 0; l < c->n_layers; l += 48) {
        fprintf(f, "  %4d       ", l);
        for (int i = l; i < c->n_layers && i < l + 48; i++) {
            if (i > l && i % c->attn_res_block == 0) fputc(' ', f);
            int ch = c->layer_kind[i] == K3_LAYER_KDA ? 'K' : 'M';
            fputc(i < c->first_dense ? ch + ('a' - 'A') : ch, f);
        }
        fputc('\n', f);
    }
    fprintf(f, "MLA layers   ");
    for (int l = 0, first = 1; l < c->n_layers; l++)
        if (c->layer_kind[l] == K3_LAYER_MLA) {
            fprintf(f, "%s%d", first ? "" : ", ", l);
            first = 0;
        }
    fprintf(f, " (0-indexed)\n");
}

static void print_dtypes(const st_dir *d, FILE *f) {
    long     cnt[ST_DTYPE_COUNT] = {0};
    uint64_t by[ST_DTYPE_COUNT] = {0}, total = 0;
    for (int i = 0; i < st_n_tensors(d); i++) {
        const st_tensor *t = st_tensor_at(d, i);
        cnt[t->dtype]++;
        by[t->dtype] += t->nbytes;
        total += t->nbytes;
    }
    fprintf(f, "tensors      %d text tensors, %s (%llu bytes)%s\n", st_n_tensors(d), HB(total),
            (unsigned long long)total, st_has_prefix(d) ? "; names carry the language_model. prefix" : "");
    for (int t = 0; t < ST_DTYPE_COUNT; t++)
        if (cnt[t]) fprintf(f, "  %-5s      %7ld tensors  %12s  (%llu bytes)\n", st_dtype_name((st_dtype)t), cnt[t], HB(by[t]), (unsigned long long)by[t]);
}

static void print_shards(const st_dir *d, FILE *f) {
    int n_vis = 0;
    for (int s = 0; s < st_n_shards(d); s++) n_vis += !st_shard_opened(d, s);
    fprintf(f, "shards       %d (%d vision-only, never opened)\n", st_n_shards(d), n_vis);
    int *per = k3_calloc((size_t)st_n_shards(d), sizeof *per);
    for (int i = 0; per && i < st_n_tensors(d); i++) per[st_tensor_at(d, i)->shard]++;
    for (int s = 0; s < st_n_shards(d); s++) {
        if (st_shard_opened(d, s))
            fprintf(f, "  %-40s %12s  %6d tensors\n", st_shard_name(d, s), HB(st_shard_size(d, s)), per ? per[s] : 0);
        else
            fprintf(f, "  %-40s %12s  vision only, not opened\n", st_shard_name(d, s), "-");
    }
    free(per);
}

typedef struct mem_ctx {
    const k3_config     *c;
    const st_dir        *d;
    const insp_settings *s;
    uint64_t             m[M_COUNT]; /* bytes per memory class */
} mem_ctx;

/* One tensor of the table: matrices as the engine holds them at their bits (a k3 container's
 * scale sidecars are counted with their matrix), embeddings as stored, the rest as f32. */
static k3_status add_bytes(const tt_ref *r, void *ud) {
    mem_ctx         *x = ud;
    const st_tensor *t = st_find(x->d, r->name);
    const int        kind = tt_table[r->id].kind, k = mem_class(kind);
    K3_ASSERT(t); /* cfg_check_tensors ran first */
    if (k == M_DENSE || k == M_MLA || k == M_HEAD)
        x->m[k] += matrix_bytes(x->c, x->d, t, tt_bits(kind, x->s->bits, x->s->mla_bits, x->s->head_bits));
    else if (k == M_EMBED) x->m[k] += t->nbytes;
    else x->m[M_FLOAT] += (uint64_t)st_numel(t) * 4;
    return K3_OK;
}

static void print_memory(const k3_config *c, const st_dir *d, const insp_settings *s, const expert_stats *es, FILE *f) {
    mem_ctx x = {.c = c, .d = d, .s = s};
    for (int l = -1; l < c->n_layers; l++) tt_walk(c, l, 0, add_bytes, &x); /* the routed experts: below */
    uint64_t *m = x.m;
    int n_moe = c->n_layers - c->first_dense, n_kda = 0, n_mla = 0;
    for (int l = 0; l < c->n_layers; l++) c->layer_kind[l] == K3_LAYER_KDA ? n_kda++ : n_mla++;
    uint64_t floor_b = (uint64_t)n_moe * es->bytes_per;
    /* unset: every expert resident (the engine without a budget); set: the budget, at least the floor */
    uint64_t budget = s->expert_gb < 0 ? ex_default_bytes(es->total) : (uint64_t)(s->expert_gb * 1e9);
    if (budget < floor_b) budget = floor_b;
    m[M_EXPERT] = budget < es->total ? budget : es->total;
    const uint64_t P = (uint64_t)c->kda_heads * (uint64_t)c->kda_head_dim;
    uint64_t       kda_state = (uint64_t)n_kda * ((uint64_t)c->kda_heads * c->kda_head_dim * c->kda_head_dim + 3 * (uint64_t)(c->conv_k - 1) * P) * 4;
    uint64_t       mla_cache = (uint64_t)n_mla * (uint64_t)s->maxt * (uint64_t)(c->kv_lora + c->rope) * 4;
    uint64_t       blocks = (uint64_t)(c->n_layers / c->attn_res_block + 2) * (uint64_t)c->hidden * 4;
    uint64_t       total = 0;
    for (int k = 0; k < M_COUNT; k++) total += m[k];
    total += kda_state + mla_cache + blocks;

    char eg[48];
    if (s->expert_gb < 0) snprintf(eg, sizeof eg, "unset");
    else snprintf(eg, sizeof eg, "%g", s->expert_gb);
#define FROM(bit) (s->from & (bit) ? " (container)" : "")
    fprintf(f, "memory       K3_BITS=%d%s K3_MLA_BITS=%d%s K3_HEAD_BITS=%d%s K3_EXPERT_GB=%s K3_MAXT=%ld%s\n", s->bits,
            FROM(RP_FROM_BITS), s->mla_bits, FROM(RP_FROM_MLA), s->head_bits, FROM(RP_FROM_HEAD), eg, s->maxt,
            s->maxt_set ? "" : " (default)");
#undef FROM
    fprintf(f, "  dense matrices (K3_BITS)     %12s\n", HB(m[M_DENSE]));
    fprintf(f, "  MLA matrices (K3_MLA_BITS)   %12s\n", HB(m[M_MLA]));
    fprintf(f, "  lm_head (K3_HEAD_BITS)       %12s\n", HB(m[M_HEAD]));
    fprintf(f, "  embeddings (as stored)       %12s\n", HB(m[M_EMBED]));
    fprintf(f, "  small tensors (f32)          %12s\n", HB(m[M_FLOAT]));
    fprintf(f, "  routed experts               %12s  (%s; all experts %s)\n", HB(m[M_EXPERT]),
            s->expert_gb < 0 && budget >= es->total ? "K3_EXPERT_GB unset: all resident"
            : s->expert_gb < 0     ? "K3_EXPERT_GB unset: 40% of MemAvailable"
            : m[M_EXPERT] >= es->total ? "the budget holds all experts"
            : budget == floor_b    ? "cache floor: one expert per MoE layer"
                                   : "cache budget",
            HB(es->total));
    fprintf(f, "  KDA state + conv tails       %12s\n", HB(kda_state));
    fprintf(f, "  MLA latent cache             %12s  (%ld positions)\n", HB(mla_cache), s->maxt);
    fprintf(f, "  total                        %12s\n", HB(total));
}

k3_status k3_inspect(const char *dir, FILE *out) {
    insp_settings s;
    k3_config    *c = k3_calloc(1, sizeof *c);
    st_dir       *d = NULL;
    k3_status     st;
    expert_stats  es;
    if (!c) return k3_err(K3_ERR_NOMEM, "out of memory");
    if ((st = cfg_load(dir, c)) || (st = read_settings(dir, &s)) || (st = st_open(dir, &d)) ||
        (st = cfg_check_tensors(c, d)) || (st = scan_experts(c, d, &es)))
        goto fail;

    fprintf(out, "model        %s (%s)\n", dir, c->model_type);
    fprintf(out, "kernels      %s (K3_ISA=%s)\n", k3_kernels(), getenv("K3_ISA") && *getenv("K3_ISA") ? getenv("K3_ISA") : "unset: the best level this CPU runs");
    print_plan(c, out);
    fprintf(out, "dimensions   hidden %d, vocab %d, dense MLP %d, rms_norm_eps %g, attn_res_block_size %d\n",
            c->hidden, c->vocab, c->inter, (double)c->rms_eps, c->attn_res_block);
    fprintf(out, "KDA          %d heads x %d, conv kernel %d, gate_lower_bound %g\n", c->kda_heads,
            c->kda_head_dim, c->conv_k, (double)c->gate_lower_bound);
    fprintf(out, "MLA          %d heads, q_lora %d, kv_lora %d, nope %d, rope %d, v %d\n", c->n_heads, c->q_lora,
            c->kv_lora, c->nope, c->rope, c->v_dim);
    fprintf(out, "MoE          %d experts, %d active, %d shared; latent %d, expert width %d; SiTU beta %g / %g\n",
            c->n_experts, c->n_active, c->n_shared, c->latent, c->moe_inter, (double)c->situ_beta,
            (double)c->situ_linear_beta);
    fprintf(out, "tokens       bos %d, eos %d, pad %d; generation defaults temperature %g, top_p %g\n", c->bos_id,
            c->eos_id, c->pad_id, (double)c->gen_temp, (double)c->gen_top_p);
    print_dtypes(d, out);
    fprintf(out, "experts      %ld routed (%d MoE layers x %d), %s each (six MXFP4 tensors), %s in all\n", es.n,
            c->n_layers - c->first_dense, c->n_experts, HB(es.bytes_per), HB(es.total));
    if (es.n_split)
        fprintf(out, "  layout     %ld of %ld experts NOT contiguous (six reads each instead of one)\n", es.n_split, es.n);
    else
        fprintf(out, "  layout     every expert's six tensors are contiguous (one read per expert)\n");
    fprintf(out, "  order      %s\n", es.layers_unordered ? "experts not in id order inside shards" : "experts in id order inside shards");
    print_shards(d, out);
    print_memory(c, d, &s, &es, out);
fail:
    st_close(d);
    free(c);
    return st;
}
