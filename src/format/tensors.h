/* tensors.h: the tensor table: every text tensor of a K3 checkpoint (spec section 3), written
 * once (implementation: tensors.c).
 *
 * DESIGN
 * K3_TENSORS is an X-macro: one line per tensor, in the order the release-format generator
 * writes a layer (and the loader reads it). Every module that needs the list expands it:
 *   config.c    cfg_check_tensors: presence, dtype class and shape of each tensor
 *   load.c     the loader: each row into its field of layer_weights / k3_model, at its bits
 *   experts.c   the six tensors of a routed expert
 *   inspect.c   --inspect's memory classes and the experts' layout
 *   k3-repack   which matrices are quantized, at which bits, and which rows are experts
 *   k3-mkmodel  the names, shapes and dtypes it writes
 * Adding a tensor is one line here (plus its field and its use in the forward pass).
 *
 * Columns:
 *   id      TT_<id> (enum tt_id)
 *   scope   where it occurs, and the prefix of its name:
 *             ROOT    once (lm_head)                (none)
 *             MODEL   once                          model.
 *             LAYER   every layer                   model.layers.{i}.
 *             KDA     KDA layers                    model.layers.{i}.self_attn.
 *             MLA     MLA layers                    model.layers.{i}.self_attn.
 *             DENSE   i < first_k_dense_replace     model.layers.{i}.mlp.
 *             MOE     the other layers              model.layers.{i}.block_sparse_moe.
 *             EXPERT  each routed expert e of a MoE layer
 *                                                   model.layers.{i}.block_sparse_moe.experts.{e}.
 *   name    after that prefix
 *   shape   from the config's dimensions (enum tt_dim): S1(D), S2(P, D), S3(P, 1, K); MIN(H) =
 *           any shape of at least H values
 *   alt     a second shape the spec allows ([1,D] for the AttnRes projections, [P,K] for the
 *           conv taps), or NONE
 *   kind    what the engine makes of it (enum tt_kind): a matrix at K3_BITS (BITS), K3_MLA_BITS
 *           (MLA; KVB = kv_b, split per head), K3_HEAD_BITS (HEAD) or always f32 (F32); the
 *           embeddings as stored (EMBED); an f32 vector (VEC; MIX = an AttnRes norm, multiplied
 *           with the projection on the next line into one double vector, MIXP = that
 *           projection; ALOG = per head, the first H values); a routed expert's MXFP4 nibbles
 *           (PACK, [rows, cols/2]) or exponents (SCALE, [rows, cols/32])
 *   dtype   the release's dtype (BF16, F32 or U8); loaders accept F32/F16/BF16 for any float
 *   field   where load.c keeps it: a field of k3_model (ROOT, MODEL), layer_weights (LAYER), or
 *           its kda / mla / mlp / moe part; unused for EXPERT rows (the expert tier reads them)
 *
 * The routed experts' rows are in the engine's canonical order (w1, w3, w2; packed, scale), the
 * order of an expert's six parts in memory (experts.c) and in a k3 container (k3-repack).
 */
#pragma once
#include "config.h"

/* clang-format off */
#define K3_TENSORS(X)                                                                                        \
/*id             scope   name                               shape        alt       kind   dtype field */     \
X(EMBED,         MODEL,  "embed_tokens.weight",             S2(V, D),    NONE,     EMBED, BF16, embed)       \
X(NORM,          MODEL,  "norm.weight",                     S1(D),       NONE,     VEC,   BF16, final_norm)  \
X(OUT_RES_NORM,  MODEL,  "output_attn_res_norm.weight",     S1(D),       NONE,     MIX,   BF16, out_res_w)   \
X(OUT_RES_PROJ,  MODEL,  "output_attn_res_proj.weight",     S1(D),       S2(1, D), MIXP,  BF16, out_res_w)   \
X(LM_HEAD,       ROOT,   "lm_head.weight",                  S2(V, D),    NONE,     HEAD,  BF16, lm_head)     \
X(IN_NORM,       LAYER,  "input_layernorm.weight",          S1(D),       NONE,     VEC,   BF16, in_norm)     \
X(POST_NORM,     LAYER,  "post_attention_layernorm.weight", S1(D),       NONE,     VEC,   BF16, post_norm)   \
X(ATTN_RES_NORM, LAYER,  "self_attention_res_norm.weight",  S1(D),       NONE,     MIX,   BF16, attn_res_w)  \
X(ATTN_RES_PROJ, LAYER,  "self_attention_res_proj.weight",  S1(D),       S2(1, D), MIXP,  BF16, attn_res_w)  \
X(MLP_RES_NORM,  LAYER,  "mlp_res_norm.weight",             S1(D),       NONE,     MIX,   BF16, mlp_res_w)   \
X(MLP_RES_PROJ,  LAYER,  "mlp_res_proj.weight",             S1(D),       S2(1, D), MIXP,  BF16, mlp_res_w)   \
X(KDA_Q,         KDA,    "q_proj.weight",                   S2(P, D),    NONE,     BITS,  BF16, q)           \
X(KDA_K,         KDA,    "k_proj.weight",                   S2(P, D),    NONE,     BITS,  BF16, k)           \
X(KDA_V,         KDA,    "v_proj.weight",                   S2(P, D),    NONE,     BITS,  BF16, v)           \
X(KDA_G,         KDA,    "g_proj.weight",                   S2(P, D),    NONE,     BITS,  BF16, g)           \
X(KDA_O,         KDA,    "o_proj.weight",                   S2(D, P),    NONE,     BITS,  BF16, o)           \
X(KDA_Q_CONV,    KDA,    "q_conv1d.weight",                 S3(P, 1, K), S2(P, K), VEC,   F32,  conv[0])     \
X(KDA_K_CONV,    KDA,    "k_conv1d.weight",                 S3(P, 1, K), S2(P, K), VEC,   F32,  conv[1])     \
X(KDA_V_CONV,    KDA,    "v_conv1d.weight",                 S3(P, 1, K), S2(P, K), VEC,   F32,  conv[2])     \
X(KDA_F_A,       KDA,    "f_a_proj.weight",                 S2(DH, D),   NONE,     F32,   BF16, fa)          \
X(KDA_F_B,       KDA,    "f_b_proj.weight",                 S2(P, DH),   NONE,     F32,   BF16, fb)          \
X(KDA_B,         KDA,    "b_proj.weight",                   S2(H, D),    NONE,     F32,   BF16, b)           \
X(KDA_DT_BIAS,   KDA,    "dt_bias",                         S1(P),       NONE,     VEC,   F32,  dt_bias)     \
X(KDA_A_LOG,     KDA,    "A_log",                           MIN(H),      NONE,     ALOG,  F32,  a)           \
X(KDA_O_NORM,    KDA,    "o_norm.weight",                   S1(DH),      NONE,     VEC,   F32,  o_norm)      \
X(MLA_Q_A,       MLA,    "q_a_proj.weight",                 S2(QL, D),   NONE,     MLA,   BF16, qa)          \
X(MLA_Q_A_NORM,  MLA,    "q_a_layernorm.weight",            S1(QL),      NONE,     VEC,   BF16, qa_norm)     \
X(MLA_Q_B,       MLA,    "q_b_proj.weight",                 S2(QK, QL),  NONE,     MLA,   BF16, qb)          \
X(MLA_KV_A,      MLA,    "kv_a_proj_with_mqa.weight",       S2(KVA, D),  NONE,     MLA,   BF16, kva)         \
X(MLA_KV_A_NORM, MLA,    "kv_a_layernorm.weight",           S1(KL),      NONE,     VEC,   BF16, kva_norm)    \
X(MLA_KV_B,      MLA,    "kv_b_proj.weight",                S2(KVB, KL), NONE,     KVB,   BF16, uk_t)        \
X(MLA_O,         MLA,    "o_proj.weight",                   S2(D, HV),   NONE,     MLA,   BF16, o)           \
X(MLA_G,         MLA,    "g_proj.weight",                   S2(HV, D),   NONE,     MLA,   BF16, g)           \
X(MLP_GATE,      DENSE,  "gate_proj.weight",                S2(I, D),    NONE,     BITS,  BF16, gate)        \
X(MLP_UP,        DENSE,  "up_proj.weight",                  S2(I, D),    NONE,     BITS,  BF16, up)          \
X(MLP_DOWN,      DENSE,  "down_proj.weight",                S2(D, I),    NONE,     BITS,  BF16, down)        \
X(MOE_ROUTER,    MOE,    "gate.weight",                     S2(E, D),    NONE,     F32,   BF16, router)      \
X(MOE_BIAS,      MOE,    "gate.e_score_correction_bias",    S1(E),       NONE,     VEC,   BF16, bias)        \
X(MOE_LAT_DOWN,  MOE,    "routed_expert_down_proj.weight",  S2(L, D),    NONE,     BITS,  BF16, down_lat)    \
X(MOE_LAT_UP,    MOE,    "routed_expert_up_proj.weight",    S2(D, L),    NONE,     BITS,  BF16, up_lat)      \
X(MOE_LAT_NORM,  MOE,    "routed_expert_norm.weight",       S1(L),       NONE,     VEC,   BF16, lat_norm)    \
X(SHARED_GATE,   MOE,    "shared_experts.gate_proj.weight", S2(SF, D),   NONE,     BITS,  BF16, shared.gate) \
X(SHARED_UP,     MOE,    "shared_experts.up_proj.weight",   S2(SF, D),   NONE,     BITS,  BF16, shared.up)   \
X(SHARED_DOWN,   MOE,    "shared_experts.down_proj.weight", S2(D, SF),   NONE,     BITS,  BF16, shared.down) \
X(W1_PACKED,     EXPERT, "w1.weight_packed",                S2(F, L_2),  NONE,     PACK,  U8,   -)           \
X(W1_SCALE,      EXPERT, "w1.weight_scale",                 S2(F, L_32), NONE,     SCALE, U8,   -)           \
X(W3_PACKED,     EXPERT, "w3.weight_packed",                S2(F, L_2),  NONE,     PACK,  U8,   -)           \
X(W3_SCALE,      EXPERT, "w3.weight_scale",                 S2(F, L_32), NONE,     SCALE, U8,   -)           \
X(W2_PACKED,     EXPERT, "w2.weight_packed",                S2(L, F_2),  NONE,     PACK,  U8,   -)           \
X(W2_SCALE,      EXPERT, "w2.weight_scale",                 S2(L, F_32), NONE,     SCALE, U8,   -)
/* clang-format on */

/* The dimensions shapes are written in (tt_dims computes them from the config). */
enum tt_dim {
    TT_D_1,    /* 1                                           */
    TT_D_D,    /* hidden_size                                 */
    TT_D_V,    /* vocab_size                                  */
    TT_D_I,    /* intermediate_size (dense MLP)               */
    TT_D_H,    /* KDA heads                                   */
    TT_D_DH,   /* KDA head_dim d                              */
    TT_D_P,    /* H * d                                       */
    TT_D_K,    /* short_conv_kernel_size                      */
    TT_D_QL,   /* q_lora_rank                                 */
    TT_D_KL,   /* kv_lora_rank                                */
    TT_D_QK,   /* Hm * (nope + rope)                          */
    TT_D_KVA,  /* kv_lora + rope                              */
    TT_D_KVB,  /* Hm * (nope + v)                             */
    TT_D_HV,   /* Hm * v                                      */
    TT_D_E,    /* num_experts                                 */
    TT_D_L,    /* routed_expert_hidden_size                   */
    TT_D_SF,   /* num_shared_experts * moe_intermediate_size  */
    TT_D_F,    /* moe_intermediate_size                       */
    TT_D_L_2,  /* L / 2   (MXFP4: two columns a byte)         */
    TT_D_L_32, /* L / 32  (one exponent per 32 columns)       */
    TT_D_F_2,  /* F / 2                                       */
    TT_D_F_32, /* F / 32                                      */
    TT_D_COUNT
};

enum tt_scope { TT_S_ROOT, TT_S_MODEL, TT_S_LAYER, TT_S_KDA, TT_S_MLA, TT_S_DENSE, TT_S_MOE, TT_S_EXPERT };

enum tt_kind {
    TT_K_BITS,
    TT_K_MLA,
    TT_K_KVB,
    TT_K_HEAD,
    TT_K_F32,   /* matrices               */
    TT_K_EMBED, /* as stored              */
    TT_K_VEC,
    TT_K_MIX,
    TT_K_MIXP,
    TT_K_ALOG, /* f32 vectors            */
    TT_K_PACK,
    TT_K_SCALE /* routed experts (MXFP4) */
};

/* The release's dtype of a row. */
enum tt_dtype { TT_DT_BF16, TT_DT_F32, TT_DT_U8 };

#define X(id, ...) TT_##id,
enum tt_id { K3_TENSORS(X) TT_COUNT };
#undef X

#define TT_EXPERT_FIRST TT_W1_PACKED
#define TT_EXPERT_PARTS (TT_COUNT - TT_EXPERT_FIRST) /* six: w1, w3, w2 x packed, scale */

/* A shape: n dims (0: "at least s[0] values", any shape; -1: none). */
typedef struct tt_shape {
    int     n;
    int64_t s[3];
} tt_shape;

typedef struct tt_row {
    const char   *name; /* after the scope's prefix                       */
    unsigned char scope, kind, dtype;
    signed char   shape[4], alt[4]; /* n (as tt_shape), then up to three enum tt_dim  */
} tt_row;

extern const tt_row tt_table[TT_COUNT];

/* Matrix kinds: quantized at load by their bits, or kept f32. */
static inline int tt_is_matrix(int kind) {
    return kind <= TT_K_F32;
}

/* Dimension values of config c. */
void tt_dims(const k3_config *c, int64_t dim[TT_D_COUNT]);
/* The main (alt = 0) or alternative (alt = 1) shape of row id. */
tt_shape tt_shape_of(const int64_t dim[TT_D_COUNT], int id, int alt);
/* Number of values of a shape (for n = 0, the minimum). */
int64_t tt_numel(tt_shape s);
/* Whether row id occurs in layer l of config c (l = -1: the rows outside layers). */
int tt_in_layer(const k3_config *c, int id, int l);
/* The full name of row id in layer l, expert e (each used only where the scope needs it). */
const char *tt_name(char *buf, size_t n, int id, int l, int e);
/* Bits a matrix kind is held at, given the run's K3_BITS / K3_MLA_BITS / K3_HEAD_BITS (TT_K_F32:
 * 32). */
int tt_bits(int kind, int bits, int mla_bits, int head_bits);

/* One tensor of a walk. */
typedef struct tt_ref {
    int      id, layer, expert; /* layer -1: outside layers; expert -1: not an expert row */
    char     name[192];
    tt_shape shape, alt;
} tt_ref;

typedef k3_status (*tt_fn)(const tt_ref *r, void *ud);

enum { TT_WALK_EXPERTS = 1 };
/* Calls fn for every tensor of layer l (l = -1: the rows outside layers) in table order; with
 * TT_WALK_EXPERTS also for every routed expert's rows, expert by expert, after the layer's other
 * rows. Stops at, and returns, the first non-zero status. */
k3_status tt_walk(const k3_config *c, int l, int flags, tt_fn fn, void *ud);
