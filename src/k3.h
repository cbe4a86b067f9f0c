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
k3_sampler *k3_sampler_new(const k3_sampler_params *p);
void        k3_sampler_free(k3_sampler *s);
int32_t     k3_sampler_sample(k3_sampler *s, const float *logits, int n);

/* ==== tokenizer and chat format (tok.c, chat.c) ========================== */
/* Owned by the tokenizer module; see issue 3 and ../shared/spec/k3-chat.md.
 * A k3_tok is read-only once loaded: every function below may be called from any
 * number of threads at once on the same k3_tok (k3_detok / k3_chat_parser are
 * per-stream objects, one thread each). */

typedef struct k3_tok k3_tok;

/* A growable array of token ids. Encoders APPEND to it (so a caller can build a prompt
 * from several calls); start from {0} and release with k3_ids_free. */
typedef struct k3_ids {
    int32_t *v;       /* (cap) ids, the first n are valid */
    size_t   n, cap;
} k3_ids;
void      k3_ids_free(k3_ids *ids);                     /* frees v, zeroes the struct   */
k3_status k3_ids_push(k3_ids *ids, int32_t id);         /* K3_ERR_NOMEM on failure      */

/* Load DIR/tiktoken.model (+ DIR/tokenizer_config.json when present: names of the 256
 * reserved ids after the base vocabulary). pattern: "kimi", "o200k" or NULL = from the
 * directory (kimi when tokenizer_config.json exists, else o200k). Errors name the file
 * and line/key (bad base64, rank out of order, duplicate bytes, missing special, ...). */
k3_status   k3_tok_load(const char *dir, const char *pattern, k3_tok **out);
void        k3_tok_free(k3_tok *t);
int32_t     k3_tok_n_vocab(const k3_tok *t);   /* base ranks + 256 reserved ids           */
const char *k3_tok_pattern(const k3_tok *t);   /* "kimi" or "o200k"                        */

/* Encode len bytes of text (any bytes: invalid UTF-8 is kept byte-exact), appending ids.
 * allow_special = 0: special-token names are ordinary text (what user text must use);
 * 1: every special name in the text becomes its id. Equal to tiktoken's encode. */
k3_status k3_tok_encode(const k3_tok *t, const char *text, size_t len, int allow_special,
                        k3_ids *out);
/* Id of a special token by name ("<|open|>", "[EOS]", ...), or -1 when absent. */
int32_t     k3_tok_special(const k3_tok *t, const char *name);
int         k3_tok_is_special(const k3_tok *t, int32_t id);
/* The bytes of one id (special ids: their name), *len set; NULL when id is out of range.
 * Not NUL-terminated; valid while t lives. */
const char *k3_tok_piece(const k3_tok *t, int32_t id, size_t *len);
/* Whole-sequence decoding into a malloc'ed NUL-terminated buffer (free()).
 * decode: the raw bytes (may end inside a UTF-8 sequence). decode_text: valid UTF-8,
 * each invalid or incomplete sequence replaced by U+FFFD (maximal-subpart rule).
 * K3_ERR_ARG naming the index for an id out of range. */
k3_status k3_tok_decode(const k3_tok *t, const int32_t *ids, size_t n, char **out, size_t *len);
k3_status k3_tok_decode_text(const k3_tok *t, const int32_t *ids, size_t n, char **out,
                             size_t *len);

/* Streaming decoder: feed ids one at a time, get only complete, valid UTF-8. An
 * incomplete tail is held until a later id completes it; a sequence that cannot become
 * valid is emitted as U+FFFD; flush ends the stream (a held tail becomes U+FFFD).
 * The emitted text equals k3_tok_decode_text of the whole sequence. *text points into
 * the decoder and is valid until its next call. */
typedef struct k3_detok k3_detok;
k3_status k3_detok_new(const k3_tok *t, k3_detok **out);
void      k3_detok_free(k3_detok *d);
k3_status k3_detok_feed(k3_detok *d, int32_t id, const char **text, size_t *len);
k3_status k3_detok_feed_bytes(k3_detok *d, const char *b, size_t n, const char **text,
                              size_t *len);
void      k3_detok_flush(k3_detok *d, const char **text, size_t *len);

/* Chat format (XTML), chat.c. One message of a conversation. */
typedef struct k3_chat_msg {
    const char *role;      /* "system", "user", "assistant"; "developer" is rendered as
                            * system; "tool" and others: error                          */
    const char *content;   /* UTF-8 text (NULL = empty); never parsed for control tokens */
    const char *reasoning; /* assistant turns: that turn's thinking text (NULL = none)   */
    int         n_images;  /* > 0: K3_ERR_UNSUPPORTED (images are not supported yet)    */
} k3_chat_msg;

typedef struct k3_chat_opts {
    int         think;      /* 1 = thinking on (the default in k3chat), 0 = off          */
    const char *effort;     /* "low" | "high" | "max"; NULL = "max". Else K3_ERR_ARG
                             * (including "medium", which the release rejects)          */
    int         gen_prompt; /* 1 = end with the assistant generation prompt            */
    const char *tools;      /* tool declarations: non-NULL = K3_ERR_UNSUPPORTED         */
} k3_chat_opts;

/* Encode a conversation exactly as ../shared/spec/k3-chat.md section 2 (the thinking-
 * effort system message when think is on, preserved reasoning, generation prompt),
 * appending the ids to out. On error out->n is left as it was. */
k3_status k3_chat_encode(const k3_tok *t, const k3_chat_msg *msgs, size_t n_msgs,
                         const k3_chat_opts *o, k3_ids *out);

/* Output channel parser: feed the generated ids one at a time (starting right after the
 * generation prompt); each call reports the new visible text of the think channel and
 * of the response channel (in that order; UTF-8 complete) and whether <|end_of_msg|>
 * was read. Structural tokens and tag names are hidden; anything unexpected is shown
 * as text in the current channel, never dropped. Pointers are valid until the next call. */
enum k3_chat_channel { K3_CHAN_THINK = 0, K3_CHAN_RESPONSE = 1 };
typedef struct k3_chat_out {
    const char *think;    size_t think_len;
    const char *response; size_t response_len;
    int         end;      /* 1 once <|end_of_msg|> was read (all text flushed)          */
} k3_chat_out;
typedef struct k3_chat_parser k3_chat_parser;
/* think: the same flag as the prompt's (1: starts in the think channel). */
k3_status k3_chat_parser_new(const k3_tok *t, int think, k3_chat_parser **out);
void      k3_chat_parser_free(k3_chat_parser *p);
k3_status k3_chat_parser_feed(k3_chat_parser *p, int32_t id, k3_chat_out *out);
/* End of generation without <|end_of_msg|> (max tokens, cancel): flush held text. */
void      k3_chat_parser_finish(k3_chat_parser *p, k3_chat_out *out);
int       k3_chat_parser_channel(const k3_chat_parser *p); /* current K3_CHAN_*        */

/* ==== conversation (conv.c) ============================================== */
/* Owned by the conversation module; see issue 7. */

#ifdef __cplusplus
}
#endif
