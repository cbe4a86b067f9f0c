/* config.h: the model configuration (config.json, spec section 2) (implementation: config.c).
 *
 * Every key of the spec is read into k3_config, from text_config or the top level.
 * Validation errors name the file and key path, e.g.
 *   config.json: text_config.linear_attn_config.kda_layers[3] = 94 is outside 1..93
 */
#pragma once
#include "k3-impl.h"
#include "st.h"

enum k3_layer_kind { K3_LAYER_KDA = 1, K3_LAYER_MLA = 2 };

#define K3_MAX_LAYERS 1024
#define K3_MAX_SHARED 64 /* num_shared_experts: 1..K3_MAX_SHARED (k3-mkmodel --shared too) */

typedef struct k3_config {
    /* top level */
    char model_type[32];         /* model_type ("kimi_k3")                       */
    int  bos_id, eos_id, pad_id; /* bos_token_id, eos_token_id, pad_token_id (-1 if absent) */
    int  tie_word_embeddings;    /* tie_word_embeddings (must be false)           */

    /* text_config */
    int   hidden;            /* hidden_size D                                 */
    int   n_layers;          /* num_hidden_layers                             */
    int   vocab;             /* vocab_size V                                  */
    int   first_dense;       /* first_k_dense_replace                         */
    int   inter;             /* intermediate_size (dense MLP)                 */
    int   n_heads;           /* num_attention_heads (MLA)                     */
    int   q_lora;            /* q_lora_rank                                   */
    int   kv_lora;           /* kv_lora_rank                                  */
    int   nope, rope, v_dim; /* qk_nope_head_dim, qk_rope_head_dim, v_head_dim */
    int   n_experts;         /* num_experts                                   */
    int   n_active;          /* num_experts_per_token | num_experts_per_tok   */
    int   moe_inter;         /* moe_intermediate_size F                       */
    int   latent;            /* routed_expert_hidden_size L                   */
    int   n_shared;          /* num_shared_experts S                          */
    int   attn_res_block;    /* attn_res_block_size                           */
    float situ_beta;         /* activation_situ_beta                          */
    float situ_linear_beta;  /* activation_situ_linear_beta                   */
    float rms_eps;           /* rms_norm_eps                                  */
    float routed_scale;      /* routed_scaling_factor                         */

    /* text_config.linear_attn_config */
    int   kda_heads;        /* num_heads H                                   */
    int   kda_head_dim;     /* head_dim d                                    */
    int   conv_k;           /* short_conv_kernel_size K                      */
    float gate_lower_bound; /* gate_lower_bound                              */

    /* layer plan from kda_layers / full_attn_layers (1-indexed in the file) */
    unsigned char layer_kind[K3_MAX_LAYERS]; /* K3_LAYER_KDA or K3_LAYER_MLA, 0-indexed */

    /* quantization_config (top level or text_config) */
    int mxfp4_group; /* group size, 32                                */

    /* generation_config.json (defaults when absent) */
    float gen_temp, gen_top_p;
} k3_config;

/* The text_config keys whose value the formulas of spec section 5 fix: a checkpoint may leave them
 * out, but where present they must have this value (cfg_load says which key does not); k3-mkmodel
 * writes them from this table. */
enum cfg_fixed_kind { CFG_TRUE, CFG_STRING, CFG_ONE };
typedef struct cfg_fixed {
    const char         *key;
    enum cfg_fixed_kind kind; /* true; the string str; the integer 1 (grouped routing off) */
    const char         *str;
} cfg_fixed;
#define CFG_N_FIXED 8
extern const cfg_fixed cfg_fixed_keys[CFG_N_FIXED];

/* The text of DIR/config.json (a new NUL-terminated buffer the caller frees): the one reading of it,
 * whose errors say that a model path is a directory holding config.json (for a DIR that is a
 * file, is not there or holds no config.json). */
k3_status cfg_read_text(const char *dir, char **text, size_t *len);
/* Read and validate DIR/config.json (and generation_config.json if present). */
k3_status cfg_load(const char *dir, k3_config *out);
/* Check that every tensor the config implies exists with the implied shape. */
k3_status cfg_check_tensors(const k3_config *c, const st_dir *d);
