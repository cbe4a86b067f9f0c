/* model-impl.h: the K3 model's weights, the session's decode state and the layer functions
 * shared by load.c (loading), forward.c (the forward pass of one layer over a chunk) and
 * session.c (the engine API: feed, cancel, snapshots, hooks).
 *
 * DESIGN
 * - Every weight matrix is a qmat (quant.h) made by model_matrix(), the one place where a
 *   checkpoint tensor becomes an engine matrix (f32, or quantized at load per K3_*BITS).
 * - Routed experts live in the streaming expert tier (experts.h: a per-layer LRU cache within
 *   K3_EXPERT_GB, filled by loader threads); the layer code asks it for the distinct experts of
 *   a chunk (ex_begin / ex_next / ex_end) and computes each once over its tokens. A failed read
 *   ends the chunk with K3_ERR_IO (layer_forward returns it) and nothing is committed.
 * - A chunk of n tokens runs layer-major: each layer function receives the n rows of the chunk,
 *   reads each weight matrix once (qmat_matmul) and advances the sequential state token by token
 *   in order. Sequential state that outlives a token (KDA state and conv tails) is double
 *   buffered: a chunk reads buffer sel[l] and writes buffer 1-sel[l]; committing the chunk flips
 *   sel. The MLA cache is append-only past the committed position. So an aborted chunk leaves
 *   the committed state untouched, with no copy.
 * - Activations and state are f32, with double accumulation where it is cheap (norms, mixes,
 *   the KDA state products, softmax sums); the result of a token never depends on the chunk
 *   size (every per-token reduction runs in one fixed order).
 */
#pragma once
#include "config.h"
#include "experts.h"
#include "fit.h"
#include "k3-impl.h"
#include "quant.h"
#include "st.h"

#include <stdatomic.h>

/* ---- weights ------------------------------------------------------------- */

typedef struct kda_weights {
    qmat   q, k, v, g; /* q/k/v/g_proj (P, D)                                  */
    qmat   o;          /* o_proj (D, P)                                        */
    qmat   fa;         /* f_a_proj (d, D)                                      */
    qmat   fb;         /* f_b_proj (P, d)                                      */
    qmat   b;          /* b_proj (H, D)                                        */
    float *conv[3];    /* q/k/v_conv1d taps (P, K), index 0 = oldest           */
    float *dt_bias;    /* dt_bias (P)                                          */
    float *a;          /* exp(A_log[h]) (H): the first H values of A_log       */
    float *o_norm;     /* o_norm (d), shared by all heads                      */
} kda_weights;

typedef struct mla_weights {
    qmat   qa;       /* q_a_proj (q_lora, D)                                 */
    float *qa_norm;  /* q_a_layernorm (q_lora)                               */
    qmat   qb;       /* q_b_proj (Hm*(nope+rope), q_lora)                    */
    qmat   kva;      /* kv_a_proj_with_mqa (kv_lora+rope, D)                 */
    float *kva_norm; /* kv_a_layernorm (kv_lora)                             */
    qmat  *uk_t;     /* [Hm] kv_b nope rows of head h, transposed (kv_lora, nope) */
    qmat  *uv;       /* [Hm] kv_b v rows of head h (v, kv_lora)               */
    qmat   o;        /* o_proj (D, Hm*v)                                     */
    qmat   g;        /* g_proj (Hm*v, D)                                     */
} mla_weights;

typedef struct mlp_weights {
    qmat gate, up; /* (I, D) */
    qmat down;     /* (D, I) */
} mlp_weights;

typedef struct moe_weights {
    qmat        router;   /* gate (E, D), always f32 (selection is sensitive)     */
    float      *bias;     /* e_score_correction_bias (E)                          */
    qmat        down_lat; /* routed_expert_down_proj (L, D)                       */
    qmat        up_lat;   /* routed_expert_up_proj (D, L)                         */
    float      *lat_norm; /* routed_expert_norm (L)                               */
    mlp_weights shared;   /* shared_experts gate/up (S*F, D), down (D, S*F)       */
} moe_weights;

typedef struct layer_weights {
    int         kind;       /* K3_LAYER_KDA or K3_LAYER_MLA                          */
    int         dense;      /* i < first_k_dense_replace                             */
    float      *in_norm;    /* input_layernorm (D)                                  */
    float      *post_norm;  /* post_attention_layernorm (D)                         */
    double     *attn_res_w; /* self_attention_res_norm ⊙ self_attention_res_proj (D) */
    double     *mlp_res_w;  /* mlp_res_norm ⊙ mlp_res_proj (D)                      */
    kda_weights kda;
    mla_weights mla;
    mlp_weights mlp; /* dense layers */
    moe_weights moe; /* MoE layers   */
} layer_weights;

struct k3_model {
    char          *dir;
    k3_config      cfg;
    k3_params      par;
    st_dir        *st;
    k3_tok        *tok;         /* DIR's tokenizer, read at open; NULL: none there  */
    int            n_run;       /* layers run (K3_LAYERS, else all)                 */
    int            embed_dtype; /* st_dtype of embed_tokens                         */
    const void    *embed;       /* embed_tokens (V, D) as stored (F32/F16/BF16)    */
    float         *final_norm;  /* model.norm (D)                                   */
    double        *out_res_w;   /* output_attn_res_norm ⊙ output_attn_res_proj (D)  */
    qmat           lm_head;     /* lm_head (V, D)                                   */
    layer_weights *layers;      /* [n_layers]                                       */
    ex_tier       *tier;        /* routed experts (experts.c)                       */
    struct vkt    *vk;          /* Vulkan tier (vk-tier.c), NULL when off           */
    void         **owned;       /* every allocation of the weights, freed together  */
    int            n_owned, cap_owned;
    uint64_t       bytes_resident;
    int            map;        /* K3_MMAP=1: prepared tensors mapped, not copied    */
    uint64_t       direct_min; /* tensors of this many bytes or more are read with
                                  O_DIRECT at open (st_read_block); 0: K3_DIRECT=0    */
    uint64_t bytes_mapped;     /* bytes used in place from read-only mappings      */
    uint64_t load_done, load_total;
    int      from;        /* RP_FROM_* bits a k3 container brought              */
    int      container;   /* DIR is a k3 container (repack.h)                   */
    int      expert_auto; /* the fit chose the expert budget ("what is left"): the
                             cache fills on demand unless every expert takes at most
                             half of the available memory (then read at open)     */
    fit_table   fit_t;    /* the memory plan's figures (fit.h), from the headers  */
    fit_machine fit_mc;   /* what the machine gave at open                      */
    fit_choice  fit;      /* the settings chosen at open and why                */
    int         win_max;  /* prefill window the memory fit leaves room for (tokens) */
};

/* ---- session state --------------------------------------------------------- */

typedef struct layer_state {
    float *S[2];    /* KDA: (H, d, d) f32, S[key][value]; S[sel] is committed   */
    float *tail[2]; /* KDA: (3, K-1, P) last K-1 conv inputs of q, k, v          */
    float *c;       /* MLA: latent cache (max_ctx, kv_lora), normalised c        */
    float *kr;      /* MLA: (max_ctx, rope), raw kr                               */
    int    sel;     /* committed buffer index of S/tail                           */
} layer_state;

/* Scratch for one chunk of up to C tokens (shapes in comments; W = widest projection). */
#define CHUNK_PROJ 6
typedef struct chunk_buf {
    float *h;                /* (C, D) hidden state / running prefix p */
    float *blocks;           /* (C, NB, D) AttnRes block snapshots */
    float *x;                /* (C, D) mixed input */
    float *xn;               /* (C, D) normalised input */
    float *y;                /* (C, D) layer output */
    float *proj[CHUNK_PROJ]; /* (C, W) projection slots; each layer kind names its views of
                                them: kda_forward (the conv's q, k, v; the raw q, k, v, then
                                gate, g, f_a), mla_forward, moe_scratch_of, the dense MLP */
    float *win;              /* (3, K-1+C, P) KDA conv windows */
    float *mla_qlat;         /* (Hm, C, kv_lora) MLA absorbed (latent) query per head */
    float *mla_ctx;          /* (Hm, C, kv_lora) MLA latent context per head */
    float *gath_in;          /* (C, max(nope, kv_lora, L, H)) the rows gathered as one head's or
                                one expert's matmul input; KDA: beta */
    float *gath_out;         /* (C, max(v, kv_lora, L)) that matmul's output */
    float *scores;           /* (Hm, max_ctx) MLA attention weights */
    float *moe_y;            /* (C, k, L) per token and slot expert outputs */
    float *moe_z;            /* (C, L) latent down projection of every token */
    int   *moe_sel;          /* (C, k) selected expert ids */
    float *moe_w;            /* (C, k) their weights */
    int   *moe_tok;          /* (C*k) tokens of one expert / (C*k) slots */
    int   *moe_ids;          /* (E) distinct experts of the chunk */
    int   *moe_res;          /* (E) of those, the ones resident on the Vulkan device */
    int   *moe_dev;          /* (C) columns whose shared experts ran on the device, then
                                (C, k) the selections left to the CPU */
    float *moe_resy;         /* (E, L) their outputs */
    float *logits;           /* (C, V) */
    float *trace;            /* (C, n_run, D) when K3_TRACE is set */
} chunk_buf;

struct k3_session {
    k3_model     *m;
    int           pos;   /* committed positions                                 */
    int           chunk; /* C                                                   */
    atomic_int    cancel;
    layer_state  *ls; /* [n_layers] */
    chunk_buf     cb;
    double       *dtmp;   /* (H, 2, d) KDA per-head double accumulators             */
    float        *logits; /* (V) logits of the last committed position           */
    int           have_logits;
    k3_stats      stats;
    chunk_buf     bb;              /* scratch of the batches this session leads (ss[0])    */
    int           bb_cap, bb_rows; /* its columns and logits rows; 0 before the first one  */
    FILE         *f_logits, *f_trace;
    float        *x0; /* (x0_rows, D) K3_X0 rows, or NULL                     */
    int           x0_rows;
    k3_prefill_cb prefill_cb; /* k3_session_set_prefill_cb                            */
    void         *prefill_ud;
    int           feed_done, feed_n; /* this feed's tokens committed before the pass, and all */
    uint64_t      feed_bytes0;       /* stats.expert_bytes_read when the feed began         */
    int           delay_ms;          /* K3_TEST_PREFILL_DELAY                               */
    int           decode_delay_ms;   /* K3_TEST_DECODE_DELAY                                */
    int           nan_id;            /* K3_TEST_NAN_TOKEN (-1: unset)                       */
};

/* Scratch for a chunk of up to cap columns with lrows rows of logits; K3_ERR_NOMEM. */
k3_status chunk_buf_alloc(const k3_model *m, chunk_buf *b, int cap, int lrows);
void      chunk_buf_free(chunk_buf *b);
/* A prefill window's buffer shares its session's chunk scratch and owns what grows with the
 * window's columns (model-impl.h, chunk_buf: the (C, ...) buffers that are per token rather
 * than per chunk: h, blocks, x, xn, y, moe_*, logits, trace); freed with window_buf_free. */
void     window_buf_free(const k3_model *m, chunk_buf *b);
uint64_t window_buf_bytes(const k3_config *c, int n_run, int W, int lrows);
/* Its bytes for config c with n_run layers and T positions (K3_TRACE's buffer not counted), and
 * a session's whole scratch at chunk C: its chunk buffer, last logits and KDA accumulators (its
 * KDA state and MLA cache are counted apart: fit.h). The memory fit counts these. */
uint64_t chunk_buf_bytes(const k3_config *c, int n_run, int C, int lrows, long T);
uint64_t session_scratch_bytes(const k3_config *c, int n_run, int C, long T);

/* ---- the forward pass --------------------------------------------------------
 * A pass runs n columns through the layers: the tokens of one chunk of one session
 * (k3_session_feed), or of one chunk of each of several sessions (k3_session_feed_batch: a
 * chunk whose columns belong to different sessions). Dense matrices and each routed expert
 * are applied once to all the columns that need them; every per-sequence part (KDA
 * recurrence and conv tails, MLA cache and attention, positions, hooks) uses the state of the
 * segment's own session. A column's result does not depend on the other columns. */
typedef struct pass_seg {
    k3_session *s;
    int         ix;    /* the caller's index of the session                     */
    int         t0, n; /* its columns [t0, t0 + n) of the pass                  */
    int         off;   /* its columns before t0 in this layer (a prefill window's
                          later chunks): positions pos + off + 0..n-1, and the KDA
                          state already advanced in the uncommitted buffer 1-sel  */
    int dev;           /* its last column is, fed alone, a pass of one token: the
                          Vulkan tier's decode path applies to it              */
    int lrow, lcnt;    /* its logits: rows [lrow, lrow + lcnt) of b->logits,
                          for positions pos + n - lcnt .. pos + n - 1          */
} pass_seg;

typedef struct fwd_pass {
    const k3_model *m;
    chunk_buf      *b; /* scratch (the single session's own, the batch's, or a
                          prefill window's)                                     */
    int cap;           /* columns of b's chunk scratch: the stride of mla_qlat,
                          mla_ctx, the attention's and expert products' block   */
    int n;             /* columns (n > cap: a prefill window of one session, its
                          window buffers hold n columns)                        */
    int       nseg;
    pass_seg *seg;   /* [nseg], columns in order                               */
    k3_stats *stats; /* where the expert tier and the Vulkan tier count        */
    void (*on_layer)(const struct fwd_pass *p, int l); /* after each layer, or NULL */
} fwd_pass;

/* The model over a pass (forward.c), top to bottom: each column's embedding (or its K3_X0
 * row), every layer (a segment whose session is cancelled between layers, or whose hidden state
 * holds a NaN or inf after one, leaves the pass, its columns compacted away), the K3_TRACE rows
 * per layer, then the final mix, norm and lm_head of
 * the rows each segment needs (its last, or every one while K3_LOGITS is set: b->logits rows
 * [lrow, lrow + lcnt)) and the check that those rows are finite. A segment that leaves
 * (K3_ABORTED, K3_ERR_NUMERIC) or fails with the pass (a layer's K3_ERR_IO, K3_ERR_NUMERIC,
 * K3_ERR_NOMEM: every one) is reported to fail(ud, seg, status) with the message current and
 * taken out of p->seg; the segments left are complete, for the caller to commit. */
typedef void (*fwd_fail_fn)(void *ud, const pass_seg *sg, k3_status st);

/* Index of the first NaN/inf among n elements of dtype (ST_F32, ST_F16, ST_BF16) at p, or n
 * (load.c: the weights at load; forward.c: the hidden state after each layer, the logits). */
size_t model_first_nonfinite(const void *p, int dtype, size_t n);
void   model_forward(fwd_pass *p, const int32_t *const *ids, fwd_fail_fn fail, void *ud);
