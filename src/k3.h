/* k3.h: the one public header of the k3 engine (what ui/, tools/ and bench/ use).
 *
 * DESIGN
 * Opaque handles with new/free pairs, in the style of llama.h and ggml-backend.h.
 * Every fallible call returns a k3_status (K3_OK = 0, negative on failure) and never
 * exits; the human-readable detail of the last failure on the calling thread is
 * k3_errmsg() and always names the file, tensor, key or line concerned, e.g.
 *   "config.json: text_config.linear_attn_config.kda_layers[3] = 94 is outside 1..93".
 *
 * Sections (each owned by one module, see the banner):
 *   status and logging ........ util.c
 *   model and session ......... model.c (forward pass), sample.c
 *   tokenizer and chat format . tok.c, chat.c
 *   conversation .............. conv.c (transcripts, prompt cache)
 */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== status and logging (util.c) ====================================== */

typedef enum k3_status {
    K3_OK              = 0,
    K3_ERR_IO          = -1,  /* open/read/write failed (errno in the message)        */
    K3_ERR_FORMAT      = -2,  /* malformed file: safetensors, JSON, vocab, transcript */
    K3_ERR_CONFIG      = -3,  /* config.json missing/invalid key or inconsistent      */
    K3_ERR_NOMEM       = -4,
    K3_ERR_ARG         = -5,  /* bad argument from the caller / user                  */
    K3_ERR_CONTEXT     = -6,  /* context capacity (K3_MAXT) exceeded                  */
    K3_ERR_NUMERIC     = -7,  /* NaN/inf in weights or activations                    */
    K3_ERR_UNSUPPORTED = -8,  /* valid but not supported (tools, images, ...)         */
    K3_ABORTED         = -9,  /* cancelled by k3_session_cancel or a cancel flag      */
} k3_status;

const char *k3_status_str(k3_status s);
/* Detail of the last failure set on this thread (never NULL; "" when none). */
const char *k3_errmsg(void);

enum k3_log_level { K3_LOG_LEVEL_ERROR = 0, K3_LOG_LEVEL_WARN, K3_LOG_LEVEL_INFO, K3_LOG_LEVEL_DEBUG };
/* Log sink; default writes "k3: level: msg" to stderr for ERROR/WARN (INFO with K3_VERBOSE=1).
 * The callback may be called from any engine thread. NULL restores the default. */
typedef void (*k3_log_cb)(int level, const char *msg, void *ud);
void k3_log_set_callback(k3_log_cb cb, void *ud);

const char *k3_version(void);

/* ==== model and session (model.c, sample.c) ============================= */

typedef struct k3_model   k3_model;
typedef struct k3_session k3_session;

/* Load progress: what is being loaded, bytes done of total (total 0 = unknown). */
typedef void (*k3_progress_cb)(const char *what, uint64_t done, uint64_t total, void *ud);

typedef struct k3_params {
    int    bits;           /* K3_BITS: KDA/latent/shared/dense matrices: 32 (f32), 8, 4 */
    int    mla_bits;       /* K3_MLA_BITS                                              */
    int    head_bits;      /* K3_HEAD_BITS (lm_head)                                   */
    int    chunk;          /* K3_CHUNK: prefill chunk, default 32                      */
    int    max_ctx;        /* K3_MAXT: context capacity in tokens                      */
    int    threads;        /* OpenMP threads, 0 = default                              */
    double expert_gb;      /* K3_EXPERT_GB: routed-expert cache budget                 */
    k3_progress_cb progress;
    void          *progress_ud;
    /* validation hooks (see k3chat(1)); NULL / 0 = off                                  */
    int         n_layers;    /* K3_LAYERS: run only the first N layers (then mix, norm, head) */
    const char *logits_path; /* K3_LOGITS: raw LE f32 (positions, vocab) of every position  */
    const char *trace_path;  /* K3_TRACE: raw LE f32 (positions, layers, hidden) h per layer */
    const char *x0_path;     /* K3_X0: raw LE f32 (positions, hidden) rows instead of embeddings */
} k3_params;

/* Defaults, then K3_* environment overrides. Invalid env values: K3_ERR_ARG naming the variable. */
k3_status k3_params_default(k3_params *p);

k3_status k3_model_open(const char *dir, const k3_params *p, k3_model **out);
void      k3_model_free(k3_model *m);

typedef struct k3_model_info {
    const char *dir;
    int   n_layers, hidden, vocab;      /* vocab = logits width (config vocab_size) */
    int   n_kda, n_mla, n_dense, n_moe;
    int   n_experts, n_active;
    int   max_ctx;
    int   eos_id;                       /* config eos_token_id                      */
    float gen_temp, gen_top_p;          /* generation_config.json defaults          */
    uint64_t bytes_resident;            /* weights held in RAM                      */
} k3_model_info;
void k3_model_get_info(const k3_model *m, k3_model_info *out);

/* A session holds the decode state (KDA states, conv tails, MLA latent cache, AttnRes). */
k3_status k3_session_new(k3_model *m, k3_session **out);
void      k3_session_free(k3_session *s);
void      k3_session_reset(k3_session *s);     /* back to position 0 */
int       k3_session_pos(const k3_session *s); /* tokens processed so far */

/* Process n tokens (prefill in chunks of K3_CHUNK, or one decode step). On K3_OK the
 * logits of the last processed position are available from k3_session_logits().
 * Cancel: K3_ABORTED, the session is left as it was before the last unapplied chunk. */
k3_status    k3_session_feed(k3_session *s, const int32_t *ids, int n);
const float *k3_session_logits(const k3_session *s); /* vocab floats, valid until next feed */
void         k3_session_cancel(k3_session *s);       /* thread-safe; cleared by the next feed */
/* A feed that returns K3_ABORTED (or K3_ERR_*) keeps every chunk committed before it:
 * k3_session_pos() tells how many of the ids were applied. */

/* Saved decode state, for the prompt cache, /retry and /undo. */
typedef struct k3_snapshot k3_snapshot;
k3_status k3_session_save(const k3_session *s, k3_snapshot **out);
k3_status k3_session_restore(k3_session *s, const k3_snapshot *snap);
void      k3_snapshot_free(k3_snapshot *snap);

typedef struct k3_stats {
    int64_t  n_prefill, n_decode;       /* tokens in the last feed calls since reset_stats */
    double   t_prefill, t_decode;       /* seconds                                          */
    uint64_t expert_hits, expert_misses, expert_bytes_read;
    double   expert_read_s, expert_wait_s;
    double   expert_gb_budget;
} k3_stats;
void k3_session_stats(const k3_session *s, k3_stats *out);
void k3_session_reset_stats(k3_session *s);

/* Sampling (sample.c). temp 0 = greedy. */
typedef struct k3_sampler_params {
    float    temp, top_p, min_p;
    int      top_k;                     /* 0 = off */
    uint64_t seed;
} k3_sampler_params;
typedef struct k3_sampler k3_sampler;
/* temp/top_p from generation_config.json (m may be NULL: 1.0, 1.0), top_k 0, min_p 0, seed 0. */
void        k3_sampler_params_default(const k3_model *m, k3_sampler_params *p);
/* Order: temperature, top-k, softmax, min-p (p >= min_p * p_max), top-p (smallest prefix of
 * the sorted distribution whose mass reaches top_p), renormalise, draw with a seeded PRNG. */
k3_sampler *k3_sampler_new(const k3_sampler_params *p);
void        k3_sampler_free(k3_sampler *s);
int32_t     k3_sampler_sample(k3_sampler *s, const float *logits, int n);

/* ==== checkpoint inspection (inspect.c) ================================= */

/* Validate MODEL_DIR (config, every text shard header, every tensor the config implies) and
 * print what it holds and the memory the K3_* settings would need to out. On failure nothing
 * is printed and k3_errmsg() holds the first error (one line naming file and tensor/key). */
k3_status k3_inspect(const char *dir, FILE *out);

/* ==== tokenizer and chat format (tok.c, chat.c) ========================== */
/* Owned by the tokenizer module; see issue 3 and ../shared/spec/k3-chat.md. */

/* ==== conversation (conv.c) ============================================== */
/* Owned by the conversation module; see issue 7. */

#ifdef __cplusplus
}
#endif
