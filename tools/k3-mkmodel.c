/* k3-mkmodel.c: writes a Kimi K3 test checkpoint in the release format, from a seed and a preset.
 *
 *   k3-mkmodel --preset tiny|slice|release [--seed N] [options] OUT_DIR
 *
 * The model directory has exactly the release's files and layout (spec k3-model.md section 1,
 * k3-chat.md section 1): config.json (nested text_config + linear_attn_config,
 * quantization_config in compressed-tensors form, a dummy vision_config), shards named like the
 * release (model-00001-of-000008.safetensors: one decoder layer per shard, then a shard with the
 * embeddings/norm/head, then a vision-only shard) plus model.safetensors.index.json,
 * tiktoken.model, tokenizer_config.json and generation_config.json.
 *
 * PRESETS
 *   tiny   6 layers (layer 0 dense; MLA at layers 3 and 5, as the release's rule "i % 4 == 3 or
 *          last" gives; the rest KDA), attn_res_block_size 2 (3 blocks), hidden 100, KDA 3 heads
 *          x 12, MLA 3 heads nope 10 rope 6 v 9, q_lora 40, kv_lora 24, dense intermediate 90,
 *          12 experts (3 active) + 2 shared, latent 64, expert width 96, conv kernel 4,
 *          1000 BPE merges (vocab 1256 + 256 reserved). A few MB; seconds to write.
 *   slice  the release's widths: hidden 7168, MLA 96 heads (q_lora 1536, kv_lora 512, nope 128,
 *          rope 64, v 128), KDA 96 x 128, latent 3584, expert width 3072, 4 layers (KDA, KDA,
 *          KDA, MLA), no dense layer (--dense 1 adds one with intermediate 33792), 32 experts
 *          (16 active) + 2 shared, the release's vocabulary size (163584 + 256). About 11.5 GB;
 *          written in streaming with progress lines. For benchmarks.
 *   release the release itself (spec k3-model.md section 2 values, 93 layers: layer 0 dense,
 *          MLA at i % 4 == 3 and 92, 896 experts (16 active) + 2 shared, attn_res_block_size
 *          12, vocabulary 163584 + 256) in 96 shards (93 decoder layers, embeddings and head,
 *          two vision shards), every tensor with its release name, dtype, shape and 64-bit
 *          offsets, experts not in id order; the data are holes (ftruncate): all zeros, ~1.56 TB
 *          apparent, ~150 MB on disk. --layers N keeps the widths and the release's layer
 *          kinds for the first N layers (--layers 2: the dense layer and one KDA + MoE layer).
 *          Zero weights run without NaN (zero scales are 2^-127, not the NaN code 255; equal
 *          router scores route by expert id). The vision tower's shapes are not in the spec:
 *          a stand-in of width 1152, its names as the release's prefixes.
 *
 * OPTIONS (for tests: every option keeps the release format valid)
 *   --seed N       weights, expert order and filler tokens (default 1)
 *   --layers N     number of layers (MLA at i % 4 == 3 and at the last layer)
 *   --dense N      first_k_dense_replace (0 = every layer MoE)
 *   --experts N, --active N, --shared N, --block N (attn_res_block_size), --merges N
 *   --no-prefix    tensor names without "language_model."
 *   --f32          F32 instead of BF16 for the dense tensors
 *   --single       one model.safetensors (text + vision tensors), no index
 *   --force        replace an existing non-empty OUT_DIR
 *   --quiet        no progress lines
 *
 * DESIGN
 * Every tensor's values come from its own splitmix64 stream seeded by (seed, tensor name without
 * prefix), so values do not depend on the layout options (--no-prefix/--single/shard order), and
 * --f32 holds the same values as BF16 before rounding. Values are generated and written in
 * chunks (stw_write), so memory stays small even for the slice preset. The whole directory is
 * written to OUT_DIR.tmp-XXXXXX and renamed into place at the end, so an interrupted run never
 * leaves a complete-looking model (SIGINT/SIGTERM/SIGHUP also remove the temporary directory).
 *
 * CONDITIONING (the forward pass is compared with a float64 reference at 1e-5 relative L2)
 * "gauss" below is an Irwin-Hall(4) approximation of N(0,1) (bounded at +-3.46: no outliers).
 *   matrices         gauss * gain / sqrt(fan_in): activations keep rms ~1 through each layer
 *   norm weights     1 + 0.1 u (u uniform in [-1,1])
 *   *_res_proj       gauss * 0.8 / sqrt(D): AttnRes mix scores within about +-2.5, so the
 *                    softmax over blocks is never one-hot
 *   KDA              k_proj = 0.6 q_proj + 0.8 R and conv taps dominated by the newest tap, so
 *                    q.k is positive and far from 0 (the head RMSNorm magnifies cancellation);
 *                    A_log = log(U[0.5, 2]), dt_bias = -1.2 + 0.4u, f_b small, so
 *                    g = -5 sigmoid(e^A z) lies mostly in (-3, -0.1); b_proj gain 0.6 so beta
 *                    lies mostly in (0.2, 0.8)
 *   router           gate gain 1.2 (sigmoid not pinned); e_score_correction_bias a random
 *                    permutation of a grid with step 1/E (spread out, no ties between experts)
 *   MXFP4 experts    nibbles drawn from a Gaussian (sigma 2.2) rounded to e2m1, ue8m0
 *                    exponents chosen (stochastic rounding) so weights ~ 1/sqrt(fan_in)
 *   embeddings       gauss (rms 1); lm_head gain 2 (logits spread of a few units)
 * Measured with tools/k3_ref.py on tiny (80 positions): the spec evaluated in f32 stays within
 * ~2e-6 of f64 through all 6 layers; g in (-4.7, -0.01) (5-95%: -2.2..-0.2), beta 0.27..0.71,
 * router sigmoid 0.13..0.87 (5-95%); the same ranges hold at the slice widths.
 *
 * LAYOUT VARIATIONS (all allowed by the spec, so loaders get exercised)
 *   self_attention_res_proj stored [1,D] in odd layers, mlp_res_proj in layers i % 3 == 2;
 *   KDA conv taps [P,K] in layer 1, [P,1,K] elsewhere; A_log F32 [roundup(H+1, 32)] with exact
 *   zeros after the H real values (the release: 96 -> 128); tiktoken ranks 0..255 are the single
 *   bytes in the GPT-2/cl100k order (printable first), so rank != byte value; safetensors keys
 *   sorted, data in writing order (experts shuffled per layer, never in id order).
 */
#include "st-write.h"
#include "tensors.h"
#include "mkmodel.h"
#include "tool-opt.h"

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define MK_PREFIX "language_model."
#define MK_MAX_LAYERS 256
#define MK_RESERVED 256

/* ---- the model's shape (config.json keys in comments) ------------------------------------- */

typedef struct mk_shape {
    int    D;           /* hidden_size                                   */
    int    n_layers;    /* num_hidden_layers                             */
    int    merges;      /* BPE merges: base vocab N = 256 + merges        */
    int    first_dense; /* first_k_dense_replace                         */
    int    inter;       /* intermediate_size                             */
    int    mla_heads;   /* num_attention_heads                           */
    int    q_lora;      /* q_lora_rank                                   */
    int    kv_lora;     /* kv_lora_rank                                  */
    int    nope, rope;  /* qk_nope_head_dim, qk_rope_head_dim            */
    int    vdim;        /* v_head_dim                                    */
    int    n_exp;       /* num_experts                                   */
    int    n_act;       /* num_experts_per_token                         */
    int    F;           /* moe_intermediate_size                         */
    int    L;           /* routed_expert_hidden_size                     */
    int    n_shared;    /* num_shared_experts                            */
    int    block;       /* attn_res_block_size                           */
    int    kda_heads;   /* linear_attn_config.num_heads                  */
    int    kda_d;       /* linear_attn_config.head_dim                   */
    int    conv_k;      /* linear_attn_config.short_conv_kernel_size     */
    double glb;         /* linear_attn_config.gate_lower_bound           */
    double eps;         /* rms_norm_eps                                  */
    int    vis;         /* width of the dummy vision tower               */
    int    vis_shards;  /* shards of the vision tower (1, or 2 as the release: 95-96) */
    int    mla_last;    /* the layer the release rule makes MLA besides i % 4 == 3: -1 =
                           the last layer; release: 92 whatever --layers says            */
    int holes;          /* tensor data left as holes (zeros, sparse files)              */
} mk_shape;

static const mk_shape preset_tiny = {
    .D           = 100,
    .n_layers    = 6,
    .merges      = 1000,
    .first_dense = 1,
    .inter       = 90,
    .mla_heads   = 3,
    .q_lora      = 40,
    .kv_lora     = 24,
    .nope        = 10,
    .rope        = 6,
    .vdim        = 9,
    .n_exp       = 12,
    .n_act       = 3,
    .F           = 96,
    .L           = 64,
    .n_shared    = 2,
    .block       = 2,
    .kda_heads   = 3,
    .kda_d       = 12,
    .conv_k      = 4,
    .glb         = -5.0,
    .eps         = 1e-5,
    .vis         = 16,
    .vis_shards  = 1,
    .mla_last    = -1,
};

/* The release's widths (spec k3-model.md section 2), shared by the slice and the release. */
#define MK_RELEASE_WIDTHS                                                                                    \
    .D = 7168, .merges = 163584 - 256, .inter = 33792, .mla_heads = 96, .q_lora = 1536, .kv_lora = 512,      \
    .nope = 128, .rope = 64, .vdim = 128, .n_act = 16, .F = 3072, .L = 3584, .n_shared = 2, .kda_heads = 96, \
    .kda_d = 128, .conv_k = 4, .glb = -5.0, .eps = 1e-5

/* Four layers of the release's widths, 32 experts. */
static const mk_shape preset_slice = {MK_RELEASE_WIDTHS, .n_layers = 4, .first_dense = 0, .n_exp = 32,
                                      .block = 2,        .vis = 32,     .vis_shards = 1,  .mla_last = -1};

/* The release with zero data: 93 layers (layer 0 dense, MLA at i % 4 == 3 and at 92), 896
 * experts, block 12; 96 shards, the last two the vision tower. */
static const mk_shape preset_release = {MK_RELEASE_WIDTHS, .n_layers = 93, .first_dense = 1,
                                        .n_exp = 896,      .block = 12,    .vis = 1152,
                                        .vis_shards = 2,   .mla_last = 92, .holes = 1};

typedef struct mk_opts {
    uint64_t    seed;
    int         prefix; /* names carry "language_model."          */
    int         f32;    /* dense tensors F32 instead of BF16      */
    int         single; /* one model.safetensors                  */
    int         force;
    int         quiet;
    const char *out;
} mk_opts;

static int is_mla(const mk_shape *s, int i) {
    return i % 4 == 3 || i == (s->mla_last >= 0 ? s->mla_last : s->n_layers - 1);
}

/* ---- deterministic random numbers ---------------------------------------------------------- */
/* (sm64 and stream, which mkmodel-bpe.c uses too, are in mkmodel.h) */

/* uniform in [-1, 1) */
static double unif(uint64_t *s) {
    return (double)(sm64(s) >> 11) * 0x1.0p-52 - 1.0;
}

static double u01(uint64_t *s) {
    return (double)(sm64(s) >> 11) * 0x1.0p-53;
}

/* Irwin-Hall(4): sum of four 16-bit uniforms (u + 0.5) / 65536, scaled to mean 0, variance 1 */
static double gauss(uint64_t *s) {
    uint64_t r = sm64(s);
    int64_t  t = (int64_t)(r & 0xffff) + (int64_t)(r >> 16 & 0xffff) + (int64_t)(r >> 32 & 0xffff) +
                (int64_t)(r >> 48);
    return (double)(t - 131070) * (1.7320508075688772 / 65536);
}

/* ---- tensor plan ----------------------------------------------------------------------------- */

enum mk_init {
    I_MAT,   /* gauss * gain / sqrt(last dim)                     */
    I_NORM,  /* 1 + 0.1 u                                         */
    I_CONV,  /* depthwise taps, newest (last) dominant            */
    I_ALOG,  /* log(U[0.5,2]) for the first H, then exact zeros   */
    I_DTB,   /* -1.2 + 0.4 u                                      */
    I_EBIAS, /* permuted grid                                     */
    I_KPROJ, /* 0.6 * (q_proj's stream) + 0.8 * own, / sqrt(D)    */
    I_MXP,   /* MXFP4 weight_packed (generates the scales too)    */
    I_MXS,   /* MXFP4 weight_scale of the preceding I_MXP         */
};

typedef struct mk_tensor {
    char     name[160]; /* without prefix                                  */
    char     src[160];  /* stream name (I_MXP/I_MXS: the matrix; I_KPROJ: q_proj) */
    st_dtype dt;
    int      nd;
    int64_t  sh[4];
    int      init; /* enum mk_init                                    */
    double   gain;
    int      nreal; /* I_ALOG: number of real values                   */
    int      shard; /* 0-based shard index                             */
    int      text;  /* language-model tensor (gets the prefix)         */
} mk_tensor;

typedef struct mk_plan {
    mk_tensor *t;
    int        n, cap;
    int        n_shards;
} mk_plan;

static mk_tensor *add_t(mk_plan *p, int shard, int init, double gain, st_dtype dt, int nd, int64_t d0,
                        int64_t d1, int64_t d2, const char *fmt, ...) K3_PRINTF(10, 11);

static mk_tensor *add_t(mk_plan *p, int shard, int init, double gain, st_dtype dt, int nd, int64_t d0,
                        int64_t d1, int64_t d2, const char *fmt, ...) {
    mk_tensor *nt = k3_grow(p->t, &p->cap, (size_t)p->n + 1, sizeof *nt, 256);
    if (!nt) {
        fprintf(stderr, "k3-mkmodel: out of memory\n");
        exit(1);
    }
    p->t         = nt;
    mk_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    snprintf(t->src, sizeof t->src, "%s", t->name);
    t->shard = shard, t->init = init, t->gain = gain, t->dt = dt, t->nd = nd;
    t->sh[0] = d0, t->sh[1] = d1, t->sh[2] = d2;
    t->text = 1;
    return t;
}

/* The configuration the tensor table's shapes come from: the keys model_config writes. */
static void mk_config(const mk_shape *s, int V, k3_config *c) {
    memset(c, 0, sizeof *c);
    c->hidden = s->D, c->n_layers = s->n_layers, c->vocab = V, c->first_dense = s->first_dense;
    c->inter = s->inter, c->n_heads = s->mla_heads, c->q_lora = s->q_lora, c->kv_lora = s->kv_lora;
    c->nope = s->nope, c->rope = s->rope, c->v_dim = s->vdim, c->n_experts = s->n_exp;
    c->moe_inter = s->F, c->latent = s->L, c->n_shared = s->n_shared;
    c->kda_heads = s->kda_heads, c->kda_head_dim = s->kda_d, c->conv_k = s->conv_k;
    for (int i = 0; i < s->n_layers; i++)
        c->layer_kind[i] = is_mla(s, i) ? K3_LAYER_MLA : K3_LAYER_KDA;
}

/* How each row of the tensor table is filled (CONDITIONING above). Rows not listed go by their
 * kind: matrices gauss * 1 / sqrt(fan_in), AttnRes projections gain 0.8, vectors 1 + 0.1 u,
 * routed experts MXFP4. gain < 0: sqrt(D) (embeddings of rms 1). */
static const struct {
    int    id, init;
    double gain;
} conditioning[] = {
    {TT_EMBED, I_MAT, -1},      {TT_LM_HEAD, I_MAT, 2.0},    {TT_KDA_K, I_KPROJ, 1.0},
    {TT_KDA_Q_CONV, I_CONV, 0}, {TT_KDA_K_CONV, I_CONV, 0},  {TT_KDA_V_CONV, I_CONV, 0},
    {TT_KDA_F_B, I_MAT, 0.5},   {TT_KDA_B, I_MAT, 0.6},      {TT_KDA_DT_BIAS, I_DTB, 0},
    {TT_KDA_A_LOG, I_ALOG, 0},  {TT_MOE_ROUTER, I_MAT, 1.2}, {TT_MOE_BIAS, I_EBIAS, 0},
};

/* Layout variations (LAYOUT VARIATIONS above): the spec's alternative shape in some layers. */
static int use_alt(int id, int i) {
    switch (id) {
    case TT_ATTN_RES_PROJ:
        return i % 2;
    case TT_MLP_RES_PROJ:
        return i % 3 == 2;
    case TT_KDA_Q_CONV:
    case TT_KDA_K_CONV:
    case TT_KDA_V_CONV:
        return i == 1;
    default:
        return 0;
    }
}

typedef struct plan_ctx {
    mk_plan        *p;
    const mk_shape *s;
    const mk_opts  *o;
    int             shard;
} plan_ctx;

/* One tensor of the table into the plan: its name, shape (or the variation), dtype and filling. */
static k3_status plan_row(const tt_ref *r, void *ud) {
    const plan_ctx *x   = ud;
    const tt_row   *row = &tt_table[r->id];
    tt_shape        sh  = r->layer >= 0 && use_alt(r->id, r->layer) ? r->alt : r->shape;
    const int       mat = tt_is_matrix(row->kind) || row->kind == TT_K_EMBED || row->kind == TT_K_MIXP;
    int    init = row->kind == TT_K_PACK ? I_MXP : row->kind == TT_K_SCALE ? I_MXS : mat ? I_MAT : I_NORM;
    double gain = row->kind == TT_K_MIXP ? 0.8 : init == I_MAT ? 1.0 : 0;
    for (size_t k = 0; k < sizeof conditioning / sizeof *conditioning; k++)
        if (conditioning[k].id == r->id)
            init = conditioning[k].init, gain = conditioning[k].gain;
    if (gain < 0)
        gain = sqrt((double)x->s->D);
    if (tt_numel(sh) == 0)
        return K3_OK; /* --shared 0: no shared experts */
    if (sh.n == 0)
        sh = (tt_shape){1, {(sh.s[0] + 1 + 31) / 32 * 32}}; /* A_log: H values, then zeros */
    st_dtype   dt = row->dtype == TT_DT_U8 ? ST_U8 : row->dtype == TT_DT_F32 || x->o->f32 ? ST_F32 : ST_BF16;
    mk_tensor *t  = add_t(x->p, x->shard, init, gain, dt, sh.n, sh.s[0], sh.s[1], sh.s[2], "%s", r->name);
    if (init == I_ALOG)
        t->nreal = (int)r->shape.s[0];
    if (init == I_KPROJ)
        tt_name(t->src, sizeof t->src, TT_KDA_Q, r->layer, -1);
    if (init == I_MXP || init == I_MXS) { /* sh[2]: the matrix width; the stream is the matrix's */
        t->sh[2]              = sh.s[1] * (init == I_MXP ? 2 : 32);
        *strrchr(t->src, '.') = 0;
    }
    return K3_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(tt_table[*(const int *)a].name, tt_table[*(const int *)b].name);
}

static void plan_layer(mk_plan *p, const mk_shape *s, const mk_opts *o, const k3_config *c, int i,
                       uint64_t *rng) {
    plan_ctx x = {p, s, o, i};
    tt_walk(c, i, 0, plan_row, &x);
    if (i < s->first_dense)
        return;
    /* routed experts: each expert's tensors back to back in name order (w1, w2, w3), experts in a
     * shuffled order */
    const int E    = s->n_exp;
    int      *perm = malloc((size_t)E * sizeof *perm), parts[TT_EXPERT_PARTS];
    if (!perm) {
        fprintf(stderr, "k3-mkmodel: out of memory\n");
        exit(1);
    }
    for (int e = 0; e < E; e++)
        perm[e] = e;
    for (int e = E - 1; e > 0; e--) {
        int j = (int)(sm64(rng) % (uint64_t)(e + 1)), t = perm[e];
        perm[e] = perm[j], perm[j] = t;
    }
    if (E > 1 && perm[0] < perm[1]) { /* never in id order, even by chance */
        int t   = perm[0];
        perm[0] = perm[1], perm[1] = t;
    }
    for (int k = 0; k < TT_EXPERT_PARTS; k++)
        parts[k] = TT_EXPERT_FIRST + k;
    qsort(parts, TT_EXPERT_PARTS, sizeof *parts, cmp_name);
    int64_t dim[TT_D_COUNT];
    tt_dims(c, dim);
    for (int k = 0; k < E; k++)
        for (int j = 0; j < TT_EXPERT_PARTS; j++) {
            tt_ref r = {.id = parts[j], .layer = i, .expert = perm[k]};
            tt_name(r.name, sizeof r.name, r.id, i, perm[k]);
            r.shape = tt_shape_of(dim, r.id, 0);
            r.alt   = tt_shape_of(dim, r.id, 1);
            plan_row(&r, &x);
        }
    free(perm);
}

static void plan_model(mk_plan *p, const mk_shape *s, const mk_opts *o, int V) {
    uint64_t   rng = stream(o->seed, "expert order");
    k3_config *c   = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "k3-mkmodel: out of memory\n");
        exit(1);
    }
    mk_config(s, V, c);
    for (int i = 0; i < s->n_layers; i++)
        plan_layer(p, s, o, c, i, &rng);
    const int g = s->n_layers, D = s->D, W = s->vis;
    plan_ctx  x = {p, s, o, g};
    tt_walk(c, -1, 0, plan_row, &x);
    free(c);
#define FT (o->f32 ? ST_F32 : ST_BF16)
    /* the vision tower: never read by k3chat, only has to be there (two shards in the release) */
    const int v = g + 1, v2 = g + s->vis_shards, first = p->n;
    add_t(p, v, I_MAT, 1.0, FT, 4, W, 3, 14, "vision_tower.patch_embed.proj.weight");
    add_t(p, v, I_MAT, 1.0, FT, 1, W, 0, 0, "vision_tower.patch_embed.proj.bias");
    add_t(p, v, I_MAT, 1.0, FT, 2, 3 * W, W, 0, "vision_tower.encoder.blocks.0.wqkv.weight");
    add_t(p, v, I_MAT, 1.0, FT, 2, W, W, 0, "vision_tower.encoder.blocks.0.wo.weight");
    add_t(p, v2, I_NORM, 0, FT, 1, W, 0, 0, "vision_tower.encoder.final_layernorm.weight");
    add_t(p, v2, I_NORM, 0, FT, 1, 4 * W, 0, 0, "mm_projector.pre_norm.weight");
    add_t(p, v2, I_MAT, 1.0, FT, 2, 4 * W, 4 * W, 0, "mm_projector.proj.0.weight");
    add_t(p, v2, I_MAT, 1.0, FT, 2, D, 4 * W, 0, "mm_projector.proj.2.weight");
    for (int k = first; k < p->n; k++)
        p->t[k].text = 0;
    p->t[first].sh[3] = 14; /* patch_embed [W, 3, 14, 14] */
    p->n_shards       = g + 1 + s->vis_shards;
}

#undef FT

/* ---- value generation ------------------------------------------------------------------------ */

/* MXFP4 nibbles are drawn directly (8 per random number) from the distribution of a Gaussian
 * with sigma = 2.2 e2m1 units rounded to the nearest e2m1 magnitude (what amax/6 scaling of a
 * Gaussian group gives), through a 256-entry table: bit 0 = sign, bits 1-7 = magnitude slot.
 * nib_ms is the mean square of the coded values, used to pick the exponents. */
static uint8_t nib_tab[256];
static double  nib_ms;

static void nib_init(void) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    static const double mid[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
    const double        sig    = 2.2;
    int                 slot   = 0;
    nib_ms                     = 0;
    for (int k = 0; k < 8; k++) {
        double cdf = k < 7 ? erf(mid[k] / (sig * 1.4142135623730951)) : 1.0;
        int    end = (int)lround(128.0 * cdf);
        for (; slot < end; slot++) {
            nib_tab[2 * slot]     = (uint8_t)k;
            nib_tab[2 * slot + 1] = (uint8_t)(k ? k | 8 : 0);
            nib_ms += mag[k] * mag[k] / 128.0;
        }
    }
    K3_ASSERT(slot == 128);
}

/* One row of an MXFP4 matrix, weights ~ 1/sqrt(cols): per 32-column group an exponent by
 * stochastic rounding of the ideal one (so rows mix neighbouring exponents), 32 table nibbles. */
static void mxfp4_row(uint64_t *rng, int cols, uint8_t *packed, uint8_t *scale) {
    double x = -0.5 * log2((double)cols * nib_ms); /* 2^x * rms(code) = 1/sqrt(cols) */
    for (int g = 0; g < cols / 32; g++) {
        int e = (int)floor(x + u01(rng));
        if (e < -127)
            e = -127;
        if (e > 127)
            e = 127;
        scale[g] = (uint8_t)(e + 127);
        for (int j = 0; j < 16; j += 8) {
            uint64_t r = sm64(rng), r2 = sm64(rng);
            for (int b = 0; b < 8; b++)
                packed[g * 16 + j + b] =
                    (uint8_t)(nib_tab[r >> (8 * b) & 0xff] | nib_tab[r2 >> (8 * b) & 0xff] << 4);
        }
    }
}

typedef struct mk_writer {
    stw_file *w;
    uint8_t  *pend_scale; /* I_MXS bytes produced by the preceding I_MXP */
    size_t    pend_n;
    float    *fbuf; /* [CHUNK]                                    */
    uint8_t  *bbuf; /* [CHUNK * 4]                                */
    uint64_t  seed;
    uint64_t  done, all; /* data bytes written / to write (progress)   */
    uint64_t  next;      /* print a progress line when done passes it  */
    double    t0;
    int       quiet;
} mk_writer;

/* stw_write plus a progress line every GiB (large presets) */
static volatile sig_atomic_t stop_sig; /* SIGINT/SIGTERM/SIGHUP seen: stop and clean up */

static void on_signal(int sig) {
    stop_sig = sig;
}

static k3_status put(mk_writer *mw, const void *data, size_t n) {
    if (stop_sig)
        return k3_err(K3_ERR_IO, "interrupted by signal %d", (int)stop_sig);
    k3_status st = stw_write(mw->w, data, n);
    mw->done += n;
    if (!st && mw->done >= mw->next) {
        if (!mw->quiet && mw->next)
            fprintf(stderr, "k3-mkmodel: %.1f of %.1f GiB (%.0f%%, %.0f s)\n",
                    (double)mw->done / 1073741824.0, (double)mw->all / 1073741824.0,
                    100.0 * (double)mw->done / (double)mw->all, k3_time() - mw->t0);
        mw->next = (mw->done / (1ull << 30) + 1) << 30;
    }
    return st;
}

#define CHUNK (1 << 16)

static double value(const mk_tensor *t, int64_t i, uint64_t *r, uint64_t *r2, const int *perm) {
    int64_t cols = t->nd ? t->sh[t->nd - 1] : 1;
    switch (t->init) {
    case I_MAT:
        return gauss(r) * t->gain / sqrt((double)cols);
    case I_NORM:
        return 1.0 + 0.1 * unif(r);
    case I_CONV: { /* index within the row of taps: 0 = oldest, K-1 = newest */
        int64_t K = cols, tap = i % K;
        return tap == K - 1 ? 0.9 + 0.2 * unif(r) : 0.25 * unif(r);
    }
    case I_ALOG:
        return i < t->nreal ? log(0.5 + 1.5 * u01(r)) : 0.0;
    case I_DTB:
        return -1.2 + 0.4 * unif(r);
    case I_EBIAS:
        return ((double)perm[i] - 0.5 * (double)(t->sh[0] - 1)) / (double)t->sh[0];
    case I_KPROJ:
        return (0.6 * gauss(r2) + 0.8 * gauss(r)) / sqrt((double)cols);
    default:
        K3_ASSERT(0);
    }
    return 0;
}

static k3_status write_mxfp4(mk_writer *mw, const mk_tensor *t) {
    const int rows = (int)t->sh[0], cols = (int)t->sh[2];
    if (t->init == I_MXS) {
        K3_ASSERT(mw->pend_scale && mw->pend_n == (size_t)rows * (size_t)(cols / 32));
        k3_status st = put(mw, mw->pend_scale, mw->pend_n);
        free(mw->pend_scale);
        mw->pend_scale = NULL;
        return st;
    }
    uint64_t r     = stream(mw->seed, t->src);
    size_t   ns    = (size_t)rows * (size_t)(cols / 32);
    mw->pend_scale = malloc(ns);
    uint8_t *row   = malloc((size_t)cols / 2);
    if (!mw->pend_scale || !row) {
        free(row);
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", t->name);
    }
    mw->pend_n   = ns;
    k3_status st = K3_OK;
    for (int rr = 0; rr < rows && !st; rr++) {
        mxfp4_row(&r, cols, row, mw->pend_scale + (size_t)rr * (size_t)(cols / 32));
        st = put(mw, row, (size_t)cols / 2);
    }
    free(row);
    return st;
}

static k3_status write_tensor(mk_writer *mw, const mk_tensor *t) {
    if (t->init == I_MXP || t->init == I_MXS)
        return write_mxfp4(mw, t);
    int64_t n = 1;
    for (int d = 0; d < t->nd; d++)
        n *= t->sh[d];
    uint64_t r = stream(mw->seed, t->name), r2 = stream(mw->seed, t->src);
    int     *perm = NULL;
    if (t->init == I_EBIAS) { /* a permutation of the grid, from the tensor's own stream */
        perm = malloc((size_t)n * sizeof *perm);
        if (!perm)
            return k3_err(K3_ERR_NOMEM, "%s: out of memory", t->name);
        for (int64_t e = 0; e < n; e++)
            perm[e] = (int)e;
        for (int64_t e = n - 1; e > 0; e--) {
            int64_t j = (int64_t)(sm64(&r) % (uint64_t)(e + 1));
            int     x = perm[e];
            perm[e] = perm[j], perm[j] = x;
        }
    }
    k3_status st = K3_OK;
    for (int64_t i0 = 0; i0 < n && !st; i0 += CHUNK) {
        int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        if (t->init == I_MAT) { /* the bulk of the bytes: no per-element dispatch */
            double sc = t->gain / sqrt((double)(t->nd ? t->sh[t->nd - 1] : 1));
            for (int64_t j = 0; j < m; j++)
                mw->fbuf[j] = (float)(gauss(&r) * sc);
        } else {
            for (int64_t j = 0; j < m; j++)
                mw->fbuf[j] = (float)value(t, i0 + j, &r, &r2, perm);
        }
        if (t->dt == ST_F32) {
            memcpy(mw->bbuf, mw->fbuf, (size_t)m * 4); /* little-endian host */
            st = put(mw, mw->bbuf, (size_t)m * 4);
        } else {
            for (int64_t j = 0; j < m; j++) {
                uint16_t h      = k3_f32_to_bf16(mw->fbuf[j]);
                mw->bbuf[2 * j] = (uint8_t)h, mw->bbuf[2 * j + 1] = (uint8_t)(h >> 8);
            }
            st = put(mw, mw->bbuf, (size_t)m * 2);
        }
    }
    free(perm);
    return st;
}

static void base64(const unsigned char *b, int n, char *out) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    int               o   = 0;
    for (int i = 0; i < n; i += 3) {
        uint32_t x =
            (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        out[o++] = a[x >> 18 & 63];
        out[o++] = a[x >> 12 & 63];
        out[o++] = i + 1 < n ? a[x >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? a[x & 63] : '=';
    }
    out[o] = 0;
}

/* ---- files ------------------------------------------------------------------------------------ */

static k3_status write_text(const char *dir, const char *name, const char *text) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return k3_err(K3_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    int ok = fputs(text, f) >= 0;
    if (fclose(f) != 0)
        ok = 0;
    if (!ok)
        return k3_err(K3_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return K3_OK;
}

static k3_status write_json(const char *dir, const char *name, json_t *j) {
    char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) : NULL;
    json_decref(j);
    if (!s)
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", name);
    size_t l = strlen(s);
    char  *t = realloc(s, l + 2);
    if (!t) {
        free(s);
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", name);
    }
    t[l] = '\n', t[l + 1] = 0;
    k3_status st = write_text(dir, name, t);
    free(t);
    return st;
}

static k3_status write_vocab(const char *dir, const mk_vocab *v) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return k3_err(K3_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    char b64[1024];
    int  ok = 1;
    for (int i = 0; i < v->n && ok; i++) {
        base64(v->tok[i].b, v->tok[i].n, b64);
        ok = fprintf(f, "%s %d\n", b64, i) > 0;
    }
    if (fclose(f) != 0)
        ok = 0;
    if (!ok)
        return k3_err(K3_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return K3_OK;
}

/* names of the reserved ids, as offsets from N (spec k3-chat.md section 1) */
static const char *reserved_name(int off) {
    switch (off) {
    case 0:
        return "[BOS]";
    case 1:
        return "[EOS]";
    case 2:
        return "<|end_of_msg|>";
    case 3:
        return "<|open|>";
    case 4:
        return "<|close|>";
    case 5:
        return "<|sep|>";
    case 6:
        return "[start_header_id]";
    case 7:
        return "[end_header_id]";
    case 9:
        return "[EOT]";
    case 18:
        return "<|media_begin|>";
    case 19:
        return "<|media_content|>";
    case 20:
        return "<|media_end|>";
    case 21:
        return "<|media_pad|>";
    case 254:
        return "[UNK]";
    case 255:
        return "[PAD]";
    default:
        return NULL;
    }
}

static json_t *tokenizer_config(int N) {
    json_t *dec = json_object();
    for (int off = 0; off < MK_RESERVED; off++) {
        char        id[16], nm[48];
        const char *name = reserved_name(off);
        if (!name)
            snprintf(nm, sizeof nm, "<|reserved_token_%d|>", N + off), name = nm;
        snprintf(id, sizeof id, "%d", N + off);
        json_object_set_new(dec, id,
                            json_pack("{s:s, s:b, s:b, s:b, s:b, s:b}", "content", name, "lstrip", 0,
                                      "normalized", 0, "rstrip", 0, "single_word", 0, "special", 1));
    }
    return json_pack("{s:o, s:b, s:s, s:s, s:s, s:s, s:s, s:i, s:o}", "added_tokens_decoder", dec,
                     "add_bos_token", 0, "bos_token", "[BOS]", "eos_token", "[EOS]", "pad_token", "[PAD]",
                     "unk_token", "[UNK]", "tokenizer_class", "TikTokenTokenizer", "model_max_length",
                     1048576, "auto_map",
                     json_pack("{s:[s,n]}", "AutoTokenizer", "tokenization_kimi.TikTokenTokenizer"));
}

static json_t *int_list(const mk_shape *s, int mla) {
    json_t *a = json_array();
    for (int i = 0; i < s->n_layers; i++)
        if (is_mla(s, i) == mla)
            json_array_append_new(a, json_integer(i + 1)); /* 1-indexed */
    return a;
}

static json_t *model_config(const mk_shape *s, int N) {
    const int V = N + MK_RESERVED;
    json_t   *lin =
        json_pack("{s:i, s:i, s:i, s:f, s:b, s:o, s:o}", "num_heads", s->kda_heads, "head_dim", s->kda_d,
                  "short_conv_kernel_size", s->conv_k, "gate_lower_bound", s->glb, "use_full_rank_gate", 1,
                  "kda_layers", int_list(s, 0), "full_attn_layers", int_list(s, 1));
    /* text_config, one row per key in the file's order; NULL: a key whose value the formulas fix,
     * written as config.c's table (cfg_fixed_keys) requires it */
    const struct {
        const char *key;
        json_t     *v;
    } keys[] = {
        {"model_type", json_string("kimi_k3_text")},
        {"vocab_size", json_integer(V)},
        {"hidden_size", json_integer(s->D)},
        {"num_hidden_layers", json_integer(s->n_layers)},
        {"first_k_dense_replace", json_integer(s->first_dense)},
        {"intermediate_size", json_integer(s->inter)},
        {"hidden_act", NULL},
        {"activation_situ_beta", json_real(4.0)},
        {"activation_situ_linear_beta", json_real(25.0)},
        {"num_attention_heads", json_integer(s->mla_heads)},
        {"num_key_value_heads", json_integer(s->mla_heads)},
        {"q_lora_rank", json_integer(s->q_lora)},
        {"kv_lora_rank", json_integer(s->kv_lora)},
        {"qk_nope_head_dim", json_integer(s->nope)},
        {"qk_rope_head_dim", json_integer(s->rope)},
        {"v_head_dim", json_integer(s->vdim)},
        {"mla_use_nope", NULL},
        {"mla_use_output_gate", NULL},
        {"num_experts", json_integer(s->n_exp)},
        {"num_experts_per_token", json_integer(s->n_act)},
        {"moe_intermediate_size", json_integer(s->F)},
        {"routed_expert_hidden_size", json_integer(s->L)},
        {"num_shared_experts", json_integer(s->n_shared)},
        {"moe_router_activation_func", NULL},
        {"num_expert_group", NULL},
        {"topk_group", NULL},
        {"moe_renormalize", NULL},
        {"routed_scaling_factor", json_real(1.0)},
        {"latent_moe_use_norm", NULL},
        {"attn_res_block_size", json_integer(s->block)},
        {"rms_norm_eps", json_real(s->eps)},
        {"max_position_embeddings", json_integer(262144)},
        {"tie_word_embeddings", json_false()},
        {"bos_token_id", json_integer(N)},
        {"eos_token_id", json_integer(N + 2)},
        {"pad_token_id", json_integer(N + 255)},
        {"torch_dtype", json_string("bfloat16")},
        {"linear_attn_config", lin},
    };
    json_t *tc = json_object();
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        json_object_set_new(tc, keys[i].key, keys[i].v ? keys[i].v : json_null());
    for (int i = 0; i < CFG_N_FIXED; i++) { /* in place of the NULL rows (and any a row forgot) */
        const cfg_fixed *f = &cfg_fixed_keys[i];
        json_object_set_new(tc, f->key,
                            f->kind == CFG_TRUE     ? json_true()
                            : f->kind == CFG_STRING ? json_string(f->str)
                                                    : json_integer(1));
    }
    json_t *weights = json_pack("{s:i, s:s, s:b, s:s, s:i, s:b, s:n, s:s, s:s}", "num_bits", 4, "type",
                                "float", "symmetric", 1, "strategy", "group", "group_size", 32, "dynamic", 0,
                                "actorder", "observer", "minmax", "scale_dtype", "ue8m0");
    json_t *grp     = json_pack("{s:[s], s:o, s:n, s:n, s:s}", "targets",
                                "re:.*block_sparse_moe\\.experts\\.\\d+\\.w[123]$", "weights", weights,
                                "input_activations", "output_activations", "format", "mxfp4-pack-quantized");

    json_t *ign = json_pack("[s,s,s,s,s]", "lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                            "re:.*mlp.*", "re:vision_tower.*");
    json_t *qc  = json_pack("{s:s, s:s, s:s, s:{s:o}, s:o, s:n, s:n, s:{}}", "quant_method",
                            "compressed-tensors", "format", "mxfp4-pack-quantized", "quantization_status",
                            "compressed", "config_groups", "group_0", grp, "ignore", ign, "kv_cache_scheme",
                            "global_compression_ratio", "sparsity_config");
    json_t *vc  = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:[i,i]}", "model_type", "moonvit", "hidden_size",
                            s->vis, "num_hidden_layers", 1, "num_attention_heads", 2, "intermediate_size",
                            2 * s->vis, "patch_size", 14, "merge_kernel_size", 2, 2);
    return json_pack("{s:[s], s:s, s:i, s:i, s:i, s:b, s:s, s:o, s:o, s:o}", "architectures",
                     "KimiK3ForConditionalGeneration", "model_type", "kimi_k3", "bos_token_id", N,
                     "eos_token_id", N + 2, "pad_token_id", N + 255, "tie_word_embeddings", 0, "torch_dtype",
                     "bfloat16", "text_config", tc, "quantization_config", qc, "vision_config", vc);
}

/* ---- shards ----------------------------------------------------------------------------------- */

static k3_status write_shards(const char *dir, const mk_plan *p, const mk_opts *o, int holes) {
    const int ns    = o->single ? 1 : p->n_shards;
    json_t   *wmap  = json_object();
    uint64_t  total = 0, all = 0;
    double    t0 = k3_time();
    k3_status st = K3_OK;
    mk_writer mw = {.seed = o->seed};
    mw.fbuf      = malloc(CHUNK * sizeof(float));
    mw.bbuf      = malloc(CHUNK * 4);
    if (!wmap || !mw.fbuf || !mw.bbuf) {
        st = k3_err(K3_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < p->n; i++) {
        uint64_t n = st_dtype_size(p->t[i].dt);
        for (int d = 0; d < p->t[i].nd; d++)
            n *= (uint64_t)p->t[i].sh[d];
        all += n;
    }
    mw.all = all, mw.t0 = t0, mw.quiet = o->quiet;
    for (int s = 0; s < ns && !st; s++) {
        char fname[64], path[PATH_MAX + 64], full[200];
        if (o->single)
            snprintf(fname, sizeof fname, "model.safetensors");
        else
            snprintf(fname, sizeof fname, "model-%05d-of-%06d.safetensors", s + 1, ns);
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        stw_file *w = NULL;
        if ((st = stw_create(path, &w)))
            break;
        for (int i = 0; i < p->n && !st; i++) {
            const mk_tensor *t = &p->t[i];
            if (!o->single && t->shard != s)
                continue;
            snprintf(full, sizeof full, "%s%s", t->text && o->prefix ? MK_PREFIX : "", t->name);
            st = stw_add(w, full, t->dt, t->nd, t->sh);
            if (!st)
                json_object_set_new(wmap, full, json_string(fname));
        }
        if (!st)
            st = stw_begin(w);
        mw.w = w;
        if (!st && holes)
            st = stw_skip(w, stw_data_bytes(w)); /* zeros: a sparse file */
        for (int i = 0; i < p->n && !st && !holes; i++) {
            if (!o->single && p->t[i].shard != s)
                continue;
            st = write_tensor(&mw, &p->t[i]);
        }
        if (!st)
            st = stw_end(w);
        if (!st) {
            total += stw_data_bytes(w);
            if (!o->quiet)
                txt_term_printf(stderr, "k3-mkmodel: [%d/%d] %s  %.1f MiB  (%.0f%% of %.1f MiB, %.1f s)\n",
                                s + 1, ns, fname, (double)stw_file_bytes(w) / 1048576.0,
                                100.0 * (double)total / (double)(all ? all : 1), (double)all / 1048576.0,
                                k3_time() - t0);
        }
        stw_free(w);
    }
    if (!st && !o->single) {
        json_t *idx =
            json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", wmap);
        wmap = NULL;
        st   = write_json(dir, "model.safetensors.index.json", idx);
    }
out:
    json_decref(wmap);
    free(mw.pend_scale);
    free(mw.fbuf);
    free(mw.bbuf);
    return st;
}

/* ---- directory handling ----------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void rm_tree(const char *path) {
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* mkdir -p of the directory that will hold path */
static int mkdir_parent(const char *path) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf)
        return 0;
    *slash = 0;
    for (char *q = buf + 1; *q; q++)
        if (*q == '/') {
            *q = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            *q = '/';
        }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* 1 = exists and is a non-empty directory, 0 = absent or an empty directory, -1 = error (printed) */
static int out_state(const char *out) {
    struct stat sb;
    if (stat(out, &sb) != 0) {
        if (errno == ENOENT)
            return 0;
        txt_term_printf(stderr, "k3-mkmodel: %s: %s\n", out, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        txt_term_printf(stderr, "k3-mkmodel: %s exists and is not a directory\n", out);
        return -1;
    }
    DIR *dp = opendir(out);
    if (!dp) {
        txt_term_printf(stderr, "k3-mkmodel: %s: %s\n", out, strerror(errno));
        return -1;
    }
    struct dirent *de;
    int            n = 0;
    while ((de = readdir(dp)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(dp);
    return n > 0;
}

/* ---- main ------------------------------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f, "usage: k3-mkmodel --preset tiny|slice|release [--seed N] [options] OUT_DIR\n"
               "Writes a Kimi K3 test checkpoint in the release format (config.json, shards +\n"
               "index, tiktoken.model, tokenizer_config.json, generation_config.json),\n"
               "deterministic from the seed.\n"
               "\n"
               "presets:\n"
               "  tiny    6 layers (layer 0 dense, 3 and 5 MLA, the others KDA), hidden 100,\n"
               "          KDA 3x12, MLA 3 heads (nope 10, rope 6, v 9, q_lora 40, kv_lora 24),\n"
               "          12 experts (3 active) + 2 shared, latent 64, expert width 96,\n"
               "          attn_res_block_size 2, 1000 merges; a few MB\n"
               "  slice   release widths (hidden 7168, 96 heads, latent 3584, expert 3072),\n"
               "          4 layers (KDA x3, MLA), no dense layer, 32 experts (16 active)\n"
               "          + 2 shared, release vocabulary size; about 11.5 GB, written in\n"
               "          streaming (for benchmarks)\n"
               "  release the release's layout and every figure of config (93 layers,\n"
               "          896 experts, 96 shards, 1.56 TB apparent) with all data zero, as\n"
               "          sparse files: ~150 MB on disk, seconds to write; --layers N keeps\n"
               "          the widths and the release's layer kinds (MLA at i %% 4 == 3 and 92)\n"
               "          for the first N layers\n"
               "\n"
               "options:\n"
               "  --seed N       random seed (default 1)\n"
               "  --layers N     number of layers; MLA at i %% 4 == 3 and at the last layer\n"
               "  --dense N      first_k_dense_replace (0 = no dense layer)\n"
               "  --experts N    routed experts        --active N   experts per token\n"
               "  --shared N     shared experts        --block N    attn_res_block_size\n"
               "  --merges N     BPE merges (base vocabulary = 256 + N)\n"
               "  --no-prefix    tensor names without \"language_model.\"\n"
               "  --f32          F32 dense tensors instead of BF16\n"
               "  --single       one model.safetensors (no index)\n"
               "  --force        replace an existing non-empty OUT_DIR\n"
               "  --quiet        no progress lines\n"
               "  -h, --help     this text\n");
}

/* The options that set one integer of the preset's shape: name, range, field. */
static const struct mk_int_opt {
    const char *name;
    long        lo, hi;
    size_t      off; /* of the int in mk_shape */
} mk_int_opts[] = {
    {"layers", 1, MK_MAX_LAYERS, offsetof(mk_shape, n_layers)},
    {"dense", 0, MK_MAX_LAYERS, offsetof(mk_shape, first_dense)},
    {"experts", 1, 4096, offsetof(mk_shape, n_exp)},
    {"active", 1, 4096, offsetof(mk_shape, n_act)},
    {"shared", 1, K3_MAX_SHARED, offsetof(mk_shape, n_shared)}, /* config.c's range */
    {"block", 1, MK_MAX_LAYERS, offsetof(mk_shape, block)},
    {"merges", 0, 1 << 20, offsetof(mk_shape, merges)},
};
#define MK_N_INT_OPTS ((int)(sizeof mk_int_opts / sizeof *mk_int_opts))

int main(int argc, char **argv) {
    enum { O_SEED = 256, O_PRESET, O_INT /* O_INT + i: mk_int_opts[i] */ };
    mk_opts             o       = {.seed = 1, .prefix = 1};
    const struct option fixed[] = {
        /* the switches set their field through getopt's flag pointer */
        {"preset", required_argument, 0, O_PRESET},
        {"seed", required_argument, 0, O_SEED},
        {"no-prefix", no_argument, &o.prefix, 0},
        {"f32", no_argument, &o.f32, 1},
        {"single", no_argument, &o.single, 1},
        {"force", no_argument, &o.force, 1},
        {"quiet", no_argument, &o.quiet, 1},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    struct option lo[sizeof fixed / sizeof *fixed + MK_N_INT_OPTS];
    int           nl = 0, ival[MK_N_INT_OPTS], c; /* ival: -1 = the preset's */
    for (; fixed[nl].name; nl++)
        lo[nl] = fixed[nl];
    for (int i = 0; i < MK_N_INT_OPTS; i++) {
        lo[nl++] = (struct option){mk_int_opts[i].name, required_argument, 0, O_INT + i};
        ival[i]  = -1;
    }
    lo[nl]             = (struct option){0, 0, 0, 0};
    const char *preset = NULL;
    int         rc     = -1;
    while ((c = tool_getopt(argc, argv, lo, usage, &rc)) != -1) {
        int bad = 0;
        if (c >= O_INT && c < O_INT + MK_N_INT_OPTS) {
            const struct mk_int_opt *io = &mk_int_opts[c - O_INT];
            if (tool_int("k3-mkmodel", io->name, optarg, io->lo, io->hi, &ival[c - O_INT]))
                return 2;
            continue;
        }
        switch (c) {
        case O_PRESET:
            preset = optarg;
            break;
        case O_SEED: {
            unsigned long long seed = o.seed;
            bad                     = tool_u64("k3-mkmodel", "seed", optarg, &seed) != 0;
            o.seed                  = seed;
            break;
        }
        }
        if (bad)
            return 2;
    }
    if (rc >= 0)
        return rc;
    if (optind != argc - 1) {
        txt_term_printf(stderr,
                        optind >= argc ? "k3-mkmodel: missing OUT_DIR\n"
                                       : "k3-mkmodel: unexpected argument '%s'\n",
                        argv[optind + (optind < argc)]);
        usage(stderr);
        return 2;
    }
    static char outbuf[PATH_MAX];
    if (snprintf(outbuf, sizeof outbuf, "%s", argv[optind]) >= (int)sizeof outbuf - 16) {
        txt_term_printf(stderr, "k3-mkmodel: %s: path too long\n", argv[optind]);
        return 2;
    }
    for (size_t l = strlen(outbuf); l > 1 && outbuf[l - 1] == '/'; l--)
        outbuf[l - 1] = 0;
    o.out = outbuf;
    mk_shape s;
    if (!preset) {
        fprintf(stderr, "k3-mkmodel: --preset is required (tiny, slice or release)\n");
        return 2;
    } else if (!strcmp(preset, "tiny")) {
        s = preset_tiny;
    } else if (!strcmp(preset, "slice")) {
        s = preset_slice;
    } else if (!strcmp(preset, "release")) {
        s = preset_release;
    } else {
        txt_term_printf(stderr, "k3-mkmodel: --preset '%s': expected tiny, slice or release\n", preset);
        return 2;
    }
    for (int i = 0; i < MK_N_INT_OPTS; i++)
        if (ival[i] >= 0)
            *(int *)((char *)&s + mk_int_opts[i].off) = ival[i];
    if (s.first_dense > s.n_layers) {
        fprintf(stderr, "k3-mkmodel: --dense %d: more than the %d layers\n", s.first_dense, s.n_layers);
        return 2;
    }
    if (s.n_act > s.n_exp) {
        fprintf(stderr, "k3-mkmodel: --active %d: more than the %d experts\n", s.n_act, s.n_exp);
        return 2;
    }
    if (!o.out[0]) {
        fprintf(stderr, "k3-mkmodel: OUT_DIR is empty\n");
        return 2;
    }

    /* refuse early, before minutes of work */
    int state = out_state(o.out);
    if (state < 0)
        return 1;
    if (state > 0 && !o.force) {
        txt_term_printf(stderr, "k3-mkmodel: %s exists and is not empty (use --force to replace it)\n",
                        o.out);
        return 1;
    }

    /* a signal stops the writing at the next chunk; the temporary directory is removed */
    struct sigaction sa = {0};
    sa.sa_handler       = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", o.out) >= sizeof tmp) {
        txt_term_printf(stderr, "k3-mkmodel: %s: path too long\n", o.out);
        return 2;
    }
    if (mkdir_parent(o.out) != 0 || !mkdtemp(tmp)) {
        txt_term_printf(stderr, "k3-mkmodel: cannot create %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    chmod(tmp, 0755);

    nib_init();
    mk_vocab v = {0};
    mk_vocab_build(&v, s.merges, o.seed);
    const int N = v.n;
    mk_plan   p = {0};
    plan_model(&p, &s, &o, N + MK_RESERVED);

    k3_status st = write_shards(tmp, &p, &o, s.holes);
    if (!st)
        st = write_vocab(tmp, &v);
    if (!st)
        st = write_json(tmp, "config.json", model_config(&s, N));
    if (!st)
        st = write_json(tmp, "tokenizer_config.json", tokenizer_config(N));
    if (!st)
        st = write_json(tmp, "generation_config.json",
                        json_pack("{s:i, s:i, s:i, s:f, s:f, s:b}", "bos_token_id", N, "eos_token_id", N + 2,
                                  "pad_token_id", N + 255, "temperature", 1.0, "top_p", 1.0, "do_sample", 1));
    mk_vocab_free(&v);
    free(p.t);
    if (st || stop_sig) {
        txt_term_printf(stderr, "k3-mkmodel: %s; nothing written\n",
                        st ? k3_errmsg() : "interrupted by a signal");
        rm_tree(tmp);
        if (stop_sig) {
            signal(stop_sig, SIG_DFL);
            raise(stop_sig);
        }
        return 1;
    }

    /* put it in place: rename() replaces an empty directory; a non-empty one (--force) is
     * moved aside first and removed after */
    char old[PATH_MAX] = "";
    if (out_state(o.out) > 0) {
        snprintf(old, sizeof old, "%s.old-XXXXXX", o.out);
        if (!mkdtemp(old) || rename(o.out, old) != 0) {
            txt_term_printf(stderr, "k3-mkmodel: cannot move %s aside: %s\n", o.out, strerror(errno));
            rm_tree(tmp);
            return 1;
        }
    }
    if (rename(tmp, o.out) != 0) {
        txt_term_printf(stderr, "k3-mkmodel: cannot rename %s to %s: %s\n", tmp, o.out, strerror(errno));
        rm_tree(tmp);
        return 1;
    }
    if (old[0])
        rm_tree(old);
    if (!o.quiet)
        txt_term_printf(stderr, "k3-mkmodel: wrote %s\n", o.out);
    return 0;
}
