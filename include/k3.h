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
 *   model and session ......... load.c (loading), session.c (feeding, the forward pass in
 *                               forward.c), sample.c
 *   tokenizer and chat format . tok.c, chat-format.c
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
    K3_ERR_IO          = -1, /* open/read/write failed (errno in the message)        */
    K3_ERR_FORMAT      = -2, /* malformed file: safetensors, JSON, vocab, transcript */
    K3_ERR_CONFIG      = -3, /* config.json missing/invalid key or inconsistent      */
    K3_ERR_NOMEM       = -4,
    K3_ERR_ARG         = -5, /* bad argument from the caller / user                  */
    K3_ERR_CONTEXT     = -6, /* context capacity (K3_MAXT) exceeded                  */
    K3_ERR_NUMERIC     = -7, /* NaN/inf in weights or activations                    */
    K3_ERR_UNSUPPORTED = -8, /* valid but not supported (tools, images, ...)         */
    K3_ABORTED         = -9, /* cancelled by k3_session_cancel or a cancel flag      */
} k3_status;

const char *k3_status_str(k3_status s);
/* Detail of the last failure set on this thread (never NULL; "" when none). */
const char *k3_errmsg(void);

enum k3_log_level { K3_LOG_LEVEL_ERROR = 0, K3_LOG_LEVEL_WARN, K3_LOG_LEVEL_INFO, K3_LOG_LEVEL_DEBUG };
/* Log sink; default writes "k3: level: msg" to stderr for ERROR/WARN (INFO with K3_VERBOSE=1).
 * The callback may be called from any engine thread. NULL restores the default. */
typedef void (*k3_log_cb)(int level, const char *msg, void *ud);
void k3_log_set_callback(k3_log_cb cb, void *ud);
/* K3_VERBOSE=1: information messages are logged too (read once). */
int k3_log_verbose(void);
/* The level's name in the default sink's lines: "error", "warning", "info" or "debug". */
const char *k3_log_level_name(int level);

/* ==== settings (settings.c): the table of every setting, its parsers ==== */
#include "k3-settings.h"

const char *k3_version(void);
/* The instruction-set level the CPU kernels run at ("scalar", "avx2", "avx2+avx-vnni",
 * "avx512-vnni"): K3_ISA, else the best this CPU and OS support (kern-cpu.c). */
const char *k3_kernels(void);

/* An array of *cap elements of elem bytes made to hold need: p when it does, else p reallocated
 * to the first of first, 2 first, 4 first, ... (or twice *cap, ...) that holds need, the last
 * step cut to the bound (PTRDIFF_MAX bytes, the most an object may hold; INT_MAX elements too
 * for k3_grow) when doubling would pass it, *cap set. NULL, with p and *cap unchanged, on out of
 * memory or when need is past the bound: the caller reports it (K3_ERR_NOMEM in its words).
 * Assign the result to p only when not NULL. The one doubling growth of the engine, the front
 * ends and the tools: k3_grow_z for a size_t capacity, k3_grow for an int one (an array indexed
 * by int). */
void *k3_grow_z(void *p, size_t *cap, size_t need, size_t elem, size_t first);
void *k3_grow(void *p, int *cap, size_t need, size_t elem, int first);

/* A growable byte buffer, the one the engine and the front ends use (zero-initialise it; free(b.p)
 * when done): n bytes used of cap, NUL-terminated once p is set, so text is a C string. */
typedef struct k3_buf {
    char  *p; /* (cap)                                                      */
    size_t n, cap;
    int    oom; /* set when an append ran out of memory                       */
} k3_buf;
/* Append n bytes of s: 0, or -1 when memory runs out (the buffer keeps what it had, oom is set). */
int k3_buf_add(k3_buf *b, const char *s, size_t n);
/* Append printf(fmt, ...) (any length): 0, or -1 when memory runs out or fmt cannot be formatted. */
int k3_buf_printf(k3_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append what is left of stream f, to its end (any kind of file: a pipe, standard input): 0 with
 * b->p set (an empty stream: ""), or an errno value with b's text as it was: the read's (EISDIR
 * for a directory, which fopen opens), ENOMEM (oom set). The caller opens and closes f and words
 * the message. */
int k3_buf_read(k3_buf *b, FILE *f);
/* open(path, O_RDONLY | O_CLOEXEC | flags) without waiting for a FIFO's writer (a FIFO with none
 * opens and reads as empty, where a plain open would block for good); reads block as usual (a pipe
 * being written, --load <(zcat FILE)). The descriptor, or -1 with errno. */
int k3_open_read(const char *path, int flags);
/* This machine's memory in bytes, the one reading of it the memory fit (fit.c) and the server's
 * grammar budget (K3_SERVE_GRAMMAR_MB) share: *phys the physical memory (0: unknown); *limit
 * the tightest memory limit of the process's cgroup and those above it (v2 memory.max, v1
 * memory.limit_in_bytes; 0: none), *room the least of those limits less what each has charged
 * (memory.current, memory.usage_in_bytes; at least 1 where a limit is set, 0: none).
 * K3_TEST_CGROUP=DIR (tests) reads DIR/self for /proc/self/cgroup and DIR/fs for /sys/fs/cgroup. */
void k3_machine_memory(double *phys, double *limit, double *room);

/* ==== model and session (load.c, session.c, sample.c) ================== */

typedef struct k3_model   k3_model;
typedef struct k3_session k3_session;

/* Load progress: what is being loaded, bytes done of total (total 0 = unknown). */
typedef void (*k3_progress_cb)(const char *what, uint64_t done, uint64_t total, void *ud);

typedef struct k3_params {
    int bits;            /* K3_BITS: KDA/latent/shared/dense matrices: 32 (f32), 8 (default), 4 */
    int mla_bits;        /* K3_MLA_BITS                                              */
    int head_bits;       /* K3_HEAD_BITS (lm_head)                                   */
    int chunk;           /* K3_CHUNK: prefill chunk, default 128                     */
    int max_ctx;         /* K3_MAXT: context capacity in tokens                      */
    int sessions;        /* sessions run at once (the server's --parallel N; default 1): the
                            memory fit counts each one's state and chunk scratch          */
    int    threads;      /* OpenMP threads, 0 = default                              */
    double expert_gb;    /* K3_EXPERT_GB: routed-expert cache budget in GB (10^9 bytes);
                            < 0 (default): every expert if that is <= 50% of MemAvailable,
                            else 40% of MemAvailable; at least one expert per MoE layer    */
    int    direct;       /* K3_DIRECT: 1 (default) O_DIRECT expert reads, 0 page cache  */
    int    pipe;         /* K3_PIPE: 1 (default) read expert j+1 while j computes       */
    int    load_threads; /* K3_LOAD_THREADS: expert reader threads (default 4)          */
    double topp;         /* K3_TOPP: keep the heaviest selected experts that hold this
                            share of the routing weight, renormalised (default 1 = all) */
    int window;          /* K3_WINDOW: prefill window in tokens (the MoE runs expert by
                            expert over it); 0 (default): the whole feed, as far as the
                            memory fit allows (k3chat(1), PREFILL WINDOW)                */
    int route;           /* K3_ROUTE: 0 = model (default), 1 = uniform (benchmarks only:
                            each token's top-k drawn uniformly from (seed, position, layer)) */
    int route_seed;      /* K3_ROUTE_SEED: the seed of K3_ROUTE=uniform (default 1)     */
    int set;             /* K3_SET_* mask: settings given explicitly (k3_params_default sets
                            them from the environment; a caller that sets a field itself may
                            add its bit). The memory fit at open never changes those; the
                            others it may lower (see k3chat(1), MEMORY FIT)                */
    k3_progress_cb progress;
    void          *progress_ud;
    /* k3_model_open's speed estimate, one line ("expected speed on this machine: decode ... s/token,
     * prefill ... s/token; first token of ..."), from the memory plan and this machine's kernel and
     * drive figures (measured in one to two seconds the first time, then cached in
     * $XDG_CACHE_HOME/k3chat/speed); given with progress_ud once config.json and every shard header
     * are checked and before any weight is read or any cache allocated; not called when the plan is
     * under 1 GB (it loads in seconds); NULL: none */
    void (*estimate)(const char *line, void *ud);
    /* validation hooks (see k3chat(1)); NULL / 0 = off                                  */
    int         n_layers;    /* K3_LAYERS: run only the first N layers (then mix, norm, head) */
    const char *logits_path; /* K3_LOGITS: raw LE f32 (positions, vocab) of every position  */
    const char *trace_path;  /* K3_TRACE: raw LE f32 (positions, layers, hidden) h per layer */
    const char *x0_path;     /* K3_X0: raw LE f32 (positions, hidden) rows instead of embeddings */
} k3_params;

enum { K3_SET_BITS = 1, K3_SET_MLA_BITS = 2, K3_SET_HEAD_BITS = 4, K3_SET_EXPERT_GB = 8, K3_SET_MAXT = 16 };

/* The process settings, as llama_backend_init: the kernels' level and knobs (K3_ISA, K3_IDOT,
 * ...), the activation mode (K3_ACT), the profiler (K3_PROFILE), huge pages (K3_HUGEPAGES),
 * K3_VERBOSE and K3_MEM_GB, each read from the environment and checked. Call it once at start
 * (k3_model_open calls it if no one has; a program that changes those variables calls it again).
 * Invalid values: K3_ERR_ARG naming the variable. */
k3_status k3_init(void);
/* The parameters' defaults (the settings table), then their K3_* environment overrides (K3_BITS,
 * K3_CHUNK, ...). Invalid env values: K3_ERR_ARG naming the variable. No process state changes. */
k3_status k3_params_default(k3_params *p);

k3_status k3_model_open(const char *dir, const k3_params *p, k3_model **out);
void      k3_model_free(k3_model *m);

/* Prefill progress of k3_session_feed (a feed of more than one token), after each layer of each
 * pass: done = the feed's tokens through the model so far, in layers (a pass of n tokens adds
 * n / layers per layer; a window's tokens all finish at its last layer), of total (the feed's),
 * and the routed-expert bytes the feed has read so far. */
typedef void (*k3_prefill_cb)(double done, int total, uint64_t bytes, void *ud);

typedef struct k3_model_info {
    const char *dir;
    int         n_layers, hidden, vocab; /* vocab = logits width (config vocab_size) */
    int         n_kda, n_mla, n_dense, n_moe;
    int         n_experts, n_active;
    int         max_ctx;
    int         window;              /* prefill window of a long feed (tokens; the fit's,
                                        K3_CHUNK when none fits)                        */
    int         eos_id;              /* config eos_token_id                      */
    float       gen_temp, gen_top_p; /* generation_config.json defaults          */
    uint64_t    bytes_resident;      /* weights held in RAM (expert cache: as now) */
    const char *fit;                 /* the memory fit at open, one line: settings, plan,
                                        available memory, what was chosen and why       */
    const char *fit_brief;           /* the same in a few words: "4/8/8 bits (fit step 2) ·
                                        cache 1.61 GB" (status bar)                   */
    uint64_t load_bytes;             /* tensor bytes the open loaded (the progress total) */
    uint64_t read_bytes, read_calls; /* tensor data read from the shards so far, and the
                                        read calls (the open's, then expert reads of the
                                        model's own shard reader, if any)              */
    uint64_t read_direct;            /* of read_bytes, read with O_DIRECT (K3_DIRECT)   */
} k3_model_info;
void k3_model_get_info(const k3_model *m, k3_model_info *out);
/* Change the routed-expert cache budget live (GB; < 0: the default, see k3_params.expert_gb);
 * shrinking evicts at once. Thread-safe; waits for a running layer to finish with its experts. */
k3_status k3_model_set_expert_budget(k3_model *m, double gb);
double    k3_model_expert_budget(const k3_model *m); /* the budget in effect, GB */

/* A session holds the decode state (KDA states, conv tails, MLA latent cache, AttnRes). */
k3_status k3_session_new(k3_model *m, k3_session **out);
void      k3_session_free(k3_session *s);
void      k3_session_reset(k3_session *s);     /* back to position 0 */
int       k3_session_pos(const k3_session *s); /* tokens processed so far */
/* Report k3_session_feed's prefill progress to cb (NULL: none); called on the feeding thread. */
void k3_session_set_prefill_cb(k3_session *s, k3_prefill_cb cb, void *ud);

/* Process n tokens (prefill in chunks of K3_CHUNK, or one decode step). On K3_OK the
 * logits of the last processed position are available from k3_session_logits().
 * Cancel: K3_ABORTED, the session is left as it was before the last unapplied chunk. */
k3_status    k3_session_feed(k3_session *s, const int32_t *ids, int n);
const float *k3_session_logits(const k3_session *s); /* vocab floats, valid until next feed */
void         k3_session_cancel(k3_session *s);       /* thread-safe; cleared by the next feed */
/* A feed that returns K3_ABORTED (or K3_ERR_*) keeps every chunk committed before it:
 * k3_session_pos() tells how many of the ids were applied. K3_ERR_NUMERIC: a chunk's hidden
 * state became NaN or infinite (the message names the layer and the position) or its logits did;
 * that chunk is not applied. */
/* Several sessions of one model advance together: session ss[i] is fed the n[i] tokens ids[i]
 * (n[i] >= 1; decode steps have n[i] == 1, a prefill chunk more). The sessions must be
 * distinct. Every dense matrix is read once for all the tokens of the batch (one matmul over
 * all their columns), every routed expert once for the union of the routes; each sequence
 * keeps its own state (KDA, conv tails, MLA cache, AttnRes). The work goes in rounds of at
 * most K3_CHUNK tokens (or one per session when there are more): each round takes one token
 * of every session with tokens left, and gives the rest of the round to the longer feeds in
 * order, at most K3_CHUNK each (a caller that wants its decode steps never to wait long passes
 * prefills in chunks of its choosing, one call per step).
 * Afterwards k3_session_logits(ss[i]) and k3_session_pos(ss[i]) are bit for bit what
 * k3_session_feed(ss[i], ids[i], n[i]) alone would give, and so are the token counts of the
 * stats (with the Vulkan tier on, a token that alone is a one-token pass, a decode step, runs
 * its shared and resident routed experts on the device in the batch too, the rest on the CPU;
 * equal bits then need the tier's residency to be the same, as it is once the tier is warm;
 * at K3_ISA=amx, which rounds products of two or more columns more coarsely, a batch differs
 * from alone by float rounding, as chunked prefill does there).
 * Shared work is attributed thus: each session's t_prefill/t_decode gets the whole wall time
 * of the call (the latency it saw); the expert tier's counters (hits, misses, bytes, read and
 * wait time, Vulkan hits) are split among the sessions in proportion to their tokens, so that
 * they sum to what the tier did.
 * each[i] (each may be NULL) gets that session's status: a session cancelled with
 * k3_session_cancel stops with K3_ABORTED (k3_session_pos says how many tokens were applied)
 * while the others go on; a session whose own input is bad (an id outside the vocabulary, a
 * full context) gets the error k3_session_feed would give, and the others go on. A call that
 * is malformed as a whole (count < 1, a NULL array or session, the same session twice, n[i] < 1,
 * ids[i] NULL, sessions of different models) changes nothing and gives K3_ERR_ARG in every
 * each[i]. Returns K3_OK, or the first failure among them (k3_errmsg() names that session).
 * Like k3_session_feed, it clears each session's cancel flag when it starts. */
k3_status k3_session_feed_batch(k3_session *const *ss, const int32_t *const *ids, const int *n, int count,
                                k3_status *each);

/* Saved decode state, for the prompt cache, /retry and /undo. */
typedef struct k3_snapshot k3_snapshot;
k3_status                  k3_session_save(const k3_session *s, k3_snapshot **out);
k3_status                  k3_session_restore(k3_session *s, const k3_snapshot *snap);
void                       k3_snapshot_free(k3_snapshot *snap);
size_t                     k3_snapshot_bytes(const k3_snapshot *snap); /* memory it holds */

typedef struct k3_stats {
    int64_t     n_prefill, n_decode; /* tokens in the last feed calls since reset_stats */
    double      t_prefill, t_decode; /* seconds                                          */
    uint64_t    expert_hits, expert_misses, expert_bytes_read;
    double      expert_read_s, expert_wait_s;
    double      expert_gb_budget;
    uint64_t    vk_hits;            /* routed experts computed on the Vulkan device      */
    uint64_t    vk_used, vk_budget; /* device bytes holding weights; its budget (0: off) */
    int         vk_experts;         /* routed experts resident on the device             */
    const char *kernels;            /* instruction set of the CPU kernels: k3_kernels()   */
    int         window;             /* the most tokens of one pass since reset_stats: a long
                                       feed's prefill window, else K3_CHUNK               */
} k3_stats;
void k3_session_stats(const k3_session *s, k3_stats *out);
void k3_session_reset_stats(k3_session *s);

/* Sampling (sample.c). temp 0 = greedy. */
typedef struct k3_sampler_params {
    float    temp, top_p, min_p;
    int      top_k; /* 0 = off */
    uint64_t seed;
    /* OpenAI's penalties, each in [-2, 2] (0: off): logit[j] -= count[j] * frequency_penalty +
     * (count[j] > 0) * presence_penalty, count[j] the times k3_sampler_accept was given j. */
    float presence_penalty, frequency_penalty;
    /* vLLM's and HF's, in [0.01, 2] (1: off; 0 from a zeroed struct is read as 1): the logit of
     * each id given to k3_sampler_accept or k3_sampler_accept_prompt is divided by it when
     * positive, else multiplied by it; applied after the logit bias, before the two above. */
    float repetition_penalty;
} k3_sampler_params;
typedef struct k3_sampler k3_sampler;
/* temp/top_p from generation_config.json (m may be NULL: 1.0, 1.0), top_k 0, min_p 0, seed 0,
 * penalties 0, repetition_penalty 1. */
void k3_sampler_params_default(const k3_model *m, k3_sampler_params *p);
/* Order: logit bias and penalties (added to the logits; see k3_sampler_set_adjust), temperature,
 * top-k, softmax, min-p (p >= min_p * p_max), top-p (smallest prefix of the sorted distribution
 * whose mass reaches top_p), renormalise, draw with a seeded PRNG. Without a bias and penalties
 * the logits are read in place (no copy). */
k3_sampler *k3_sampler_new(const k3_sampler_params *p);
void        k3_sampler_free(k3_sampler *s);
/* -1 for no logits, n <= 0, or out of memory (the copy a bias or penalty needs). */
int32_t k3_sampler_sample(k3_sampler *s, const float *logits, int n);
/* The same draw over the ids whose bit is set in mask ((n + 63) / 64 words, bit id % 64 of word
 * id / 64; NULL: every id): masked ids are removed after the bias and penalties, before
 * temperature, top-k, min-p and top-p. -1 when the mask allows no id. */
int32_t k3_sampler_sample_masked(k3_sampler *s, const float *logits, int n, const uint64_t *mask);
/* OpenAI's logit_bias: each entry's bias (in [-100, 100]) is added to its id's logit before each
 * draw; ids at or past the draw's n are ignored. Copied; n 0 clears. K3_ERR_ARG for a negative id
 * or a bias out of range (naming it), K3_ERR_NOMEM; either leaves the bias as it was. s NULL: only
 * checks. */
typedef struct k3_logit_bias {
    int32_t id;
    float   bias;
} k3_logit_bias;
k3_status k3_sampler_set_bias(k3_sampler *s, const k3_logit_bias *b, int n);
/* Counts id as generated for the penalties (nothing when all three are off). */
void k3_sampler_accept(k3_sampler *s, int32_t id);
/* The prompt's ids ids[0..n) (negative ones skipped): the repetition penalty applies to them from
 * the next draw on, as to the answer's (vLLM's prompt and output tokens); they do not count for
 * presence_penalty and frequency_penalty, which are the answer's. Nothing when the repetition
 * penalty is off. K3_OK, or K3_ERR_NOMEM (then the ids counted so far stay). */
k3_status k3_sampler_accept_prompt(k3_sampler *s, const int32_t *ids, int n);
/* on = 0: the next draws use the logits as they are (no bias, no penalties); 1 (default): with
 * them. A conversation turns them off while the model reasons (conv-gen.c). */
void k3_sampler_set_adjust(k3_sampler *s, int on);

/* Log-probabilities in the model's distribution: log_softmax(logits) as given (before any bias,
 * penalty, temperature, truncation or mask), its normaliser summed in double. Returns id's; top
 * gets the k most likely ids (0 <= k <= K3_TOP_LOGPROBS), most likely first, ties by lower id,
 * and the count written (fewer when fewer ids have a number) in *n_top. NaN logits have
 * probability 0. NAN when no logit is a number or id is out of range. */
#define K3_TOP_LOGPROBS 20
typedef struct k3_logprob {
    int32_t id;
    float   logprob;
} k3_logprob;
float k3_logprobs(const float *logits, int n, int32_t id, int k, k3_logprob *top, int *n_top);

/* ==== checkpoint inspection (inspect.c) ================================= */

/* Validate MODEL_DIR (config, every text shard header, every tensor the config implies) and
 * print what it holds and the memory the K3_* settings would need to out. On failure nothing
 * is printed and k3_errmsg() holds the first error (one line naming file and tensor/key). */
k3_status k3_inspect(const char *dir, FILE *out);
/* The same, measuring this machine's speed figures again whatever the cache holds (--measure). */
k3_status k3_inspect_measure(const char *dir, FILE *out);

/* ==== tokenizer and chat format (tok.c, chat-format.c) ========================== */
/* Owned by the tokenizer module; see issue 3 and doc/chat-format.md.
 * A k3_tok is read-only once loaded: every function below may be called from any
 * number of threads at once on the same k3_tok (k3_detok / k3_chat_parser are
 * per-stream objects, one thread each). */

typedef struct k3_tok k3_tok;

/* A growable array of token ids. Encoders APPEND to it (so a caller can build a prompt
 * from several calls); start from {0} and release with k3_ids_free. */
typedef struct k3_ids {
    int32_t *v; /* (cap) ids, the first n are valid */
    size_t   n, cap;
} k3_ids;
void      k3_ids_free(k3_ids *ids);             /* frees v, zeroes the struct   */
k3_status k3_ids_push(k3_ids *ids, int32_t id); /* K3_ERR_NOMEM on failure      */
/* Appends v[0..n) (v may not point into ids); K3_ERR_NOMEM on failure, ids unchanged. */
k3_status k3_ids_append(k3_ids *ids, const int32_t *v, size_t n);
/* Appends the decimal ids of text, separated by white space or commas, each in 0..max_id.
 * K3_ERR_ARG names the first bad one: "token N: 'TEXT' is not an id in 0..MAX". */
k3_status k3_ids_parse(const char *text, int32_t max_id, k3_ids *out);

/* Load DIR/tiktoken.model (+ DIR/tokenizer_config.json when present: names of the 256
 * reserved ids after the base vocabulary). pattern: "kimi", "o200k" or NULL = from the
 * directory (kimi when tokenizer_config.json exists, else o200k). Errors name the file
 * and line/key (bad base64, rank out of order, duplicate bytes, missing special, ...). */
k3_status k3_tok_load(const char *dir, const char *pattern, k3_tok **out);
/* k3_tok_load(dir, NULL) for the model whose config.json gives vocab (k3_model_info.vocab):
 * K3_ERR_FORMAT naming tiktoken.model and vocab_size when the tokenizer has ids the model has
 * no embedding row for (its base ranks + 256 reserved ids > vocab); a model's
 * tokenizer_config.json is required ("DIR/tokenizer_config.json: missing (...)"). */
k3_status k3_tok_load_model(const char *dir, int32_t vocab, k3_tok **out);
/* The model's tokenizer: k3_model_open reads DIR's (k3_tok_load_model, before any shard) and keeps
 * it; the caller borrows it while the model lives (never k3_tok_free). K3_ERR_IO naming
 * DIR/tiktoken.model when the directory has none (a model runs on token ids without one). */
k3_status k3_model_tok(const k3_model *m, const k3_tok **out);
void      k3_tok_free(k3_tok *t);
int32_t   k3_tok_n_vocab(const k3_tok *t); /* base ranks + 256 reserved ids           */

/* Encode len bytes of text (any bytes: invalid UTF-8 is kept byte-exact), appending ids.
 * allow_special = 0: special-token names are ordinary text (what user text must use);
 * 1: every special name in the text becomes its id. Equal to tiktoken's encode. */
k3_status k3_tok_encode(const k3_tok *t, const char *text, size_t len, int allow_special, k3_ids *out);
/* Id of a special token by name ("<|open|>", "[EOS]", ...), or -1 when absent. */
int32_t k3_tok_special(const k3_tok *t, const char *name);
int     k3_tok_is_special(const k3_tok *t, int32_t id);
/* The bytes of one id (special ids: their name), *len set; NULL when id is out of range.
 * Not NUL-terminated; valid while t lives. */
const char *k3_tok_piece(const k3_tok *t, int32_t id, size_t *len);
/* Whole-sequence decoding into a malloc'ed NUL-terminated buffer (free()).
 * decode: the raw bytes (may end inside a UTF-8 sequence). decode_text: valid UTF-8,
 * each invalid or incomplete sequence replaced by U+FFFD (maximal-subpart rule).
 * K3_ERR_ARG naming the index for an id out of range. */
k3_status k3_tok_decode(const k3_tok *t, const int32_t *ids, size_t n, char **out, size_t *len);
k3_status k3_tok_decode_text(const k3_tok *t, const int32_t *ids, size_t n, char **out, size_t *len);

/* Text from outside (typed, piped, pasted, command-line, transcript files) must be UTF-8.
 * Counts the invalid sequences of s[0,n) (maximal-subpart rule, as decode_text) and returns
 * that count (0: valid); *first_bad (may be NULL) gets the byte offset of the first. When out
 * is not NULL it receives a malloc'ed NUL-terminated copy with each invalid sequence replaced
 * by U+FFFD (free()). -1 when out of memory (*out is then NULL). */
long k3_utf8_repair(const char *s, size_t n, char **out, size_t *first_bad);

/* Outside text (the model's, a server's, a file's) may hold terminal commands: OSC 52 writes
 * the clipboard, OSC 0 the title, CSI the colours and the cursor (esc.c). k3_ctrl_cp: whether
 * code point cp is a control character to such text: C0, DEL, the C1 controls U+0080..U+009F,
 * and the characters that reorder or break a displayed line (the bidirectional embeddings,
 * overrides, isolates and marks U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069; the line
 * and paragraph separators U+2028, U+2029), which on a terminal that does bidi could make an
 * answer show other than it reads. \n and \t are the callers' to treat. */
int k3_ctrl_cp(int32_t cp);
/* What a stream cut inside a character held back (the bytes of an incomplete UTF-8 sequence). */
typedef struct k3_esc {
    char hold[4];
    int  n;
} k3_esc;
/* Append s[0..n) to out with the control characters shown: C0 other than \n and \t, and DEL,
 * as \xHH, the other k3_ctrl_cp characters as \uHHHH (\u009B), and bytes that are not UTF-8 as
 * \xHH. With st != NULL an incomplete character at the end is held in st and completed by the
 * next call (st->n bytes still held at the end of a text: call again with st = NULL on st's
 * bytes to show them escaped). The one escaping of the terminal front ends (text.h) and the
 * Markdown export. -1 out of memory. */
int k3_escape(k3_buf *out, k3_esc *st, const char *s, size_t n);

/* Streaming decoder: feed bytes (or ids, tok.h), get only complete, valid UTF-8. An
 * incomplete tail is held until a later id completes it; a sequence that cannot become
 * valid is emitted as U+FFFD; flush ends the stream (a held tail becomes U+FFFD).
 * The emitted text equals k3_tok_decode_text of the whole sequence. *text points into
 * the decoder and is valid until its next call. */
typedef struct k3_detok k3_detok;
k3_status               k3_detok_new(const k3_tok *t, k3_detok **out);
void                    k3_detok_free(k3_detok *d);
k3_status k3_detok_feed_bytes(k3_detok *d, const char *b, size_t n, const char **text, size_t *len);
void      k3_detok_flush(k3_detok *d, const char **text, size_t *len);

/* One tool call of an assistant message (the OpenAI shape; doc/tool-calls.md, "An assistant turn
 * that calls tools"). */
typedef struct k3_tool_call {
    const char *id;        /* the call id ("call_..."): matched by tool results, not rendered */
    const char *name;      /* function name                                               */
    const char *arguments; /* JSON text of an object (typed arguments); NULL, blank or "{}":
                            * none; text that is not JSON: the raw `json` block; JSON that
                            * is not an object: K3_ERR_ARG                                 */
} k3_tool_call;

/* Chat format (XTML), chat-format.c. One message of a conversation. */
typedef struct k3_chat_msg {
    const char *role;               /* "system", "user", "assistant", "tool"; "developer" is
                                     * rendered as system; others: K3_ERR_ARG                    */
    const char         *content;    /* UTF-8 text (NULL = empty); never parsed for control tokens */
    const char         *reasoning;  /* assistant turns: that turn's thinking text (NULL = none)   */
    int                 n_images;   /* > 0: K3_ERR_UNSUPPORTED (images are not supported yet)    */
    const k3_tool_call *tool_calls; /* assistant: (n_tool_calls) calls, in order        */
    int                 n_tool_calls;
    const char         *name; /* tool: the tool's name (NULL: from the matching call);
                               * system, user, assistant: the speaker's name, rendered
                               * as name="..." when non-empty (k3-tools.md 1.4)          */
    const char *tool_call_id; /* tool: the id of the call this result answers           */
    const char *tools;        /* system: a JSON array of tool declarations: rendered in
                               * place as "New Tools Available" (content dropped)          */
    const size_t *parts;      /* (n_parts) the content's text parts, their byte lengths: each is
                               * encoded as its own segment, as the release's encoder does with
                               * a list of parts. NULL, or lengths whose sum is not the
                               * content's length (it was edited): one segment             */
    int n_parts;
} k3_chat_msg;

/* A message's OpenAI "content" (or a reasoning field) read from JSON, transcript.c: the one reader
 * of transcripts (k3chat(5)) and server requests. v: a string, null or absent (""), or an array of
 * text parts {"type": "text", "text": ...} ("type" may be left out; any type but an image's with a
 * "text" is text, as the release's encoder reads it, e.g. "input_text"), concatenated. *out is
 * malloc'ed. parts (may be NULL): when v is an array of 2 or more parts, *parts gets their byte
 * lengths (malloc'ed, as k3_chat_msg.parts) and *n_parts their number; else *parts = NULL.
 * Returns 0, or -1 with *e saying where and why: the caller puts its field name before path
 * ("messages[2].content" + "[1].type") and reason ("is an integer, expected \"text\""). */
struct json_t; /* jansson's */
typedef enum k3_content_fault {
    K3_CONTENT_TYPE = 1, /* a value of the wrong JSON type                    */
    K3_CONTENT_MEDIA,    /* a part that is not text (images, audio, files)    */
    K3_CONTENT_NOMEM,
} k3_content_fault;
typedef struct k3_content_err {
    k3_content_fault fault;
    char             path[48];    /* below the field: "", "[3]", "[3].type", "[3].text" */
    char             reason[160]; /* starts with "is ..."                           */
} k3_content_err;
int k3_content_parse(const struct json_t *v, char **out, size_t **parts, int *n_parts, k3_content_err *e);
/* The other way: content as a JSON string, or as the array of its text parts when parts (byte
 * lengths, as k3_chat_msg.parts) has 2 or more that add up to it (else it was edited since: a
 * string). Invalid UTF-8 is written as U+FFFD. NULL when out of memory. */
struct json_t *k3_content_json(const char *content, const size_t *parts, int n_parts);

typedef struct k3_chat_opts {
    int         think;           /* 1 = thinking on (the default in k3chat), 0 = off          */
    const char *effort;          /* "low" | "high" | "max"; NULL = "max". Else K3_ERR_ARG
                                  * (including "medium", which the release rejects)          */
    int         gen_prompt;      /* 1 = end with the assistant generation prompt            */
    const char *tools;           /* JSON array of tool declarations ({"type":"function",
                                  * "function":{...}} objects); NULL or "[]": none           */
    const char *tool_choice;     /* "auto" (NULL), "required" or "none"; else K3_ERR_ARG     */
    const char *response_format; /* NULL or "text": nothing; "json_object" | "json_schema":
                                  * the response-format message (k3-tools.md 1.7)            */
    const char *response_schema; /* json_schema: the schema, JSON text (written sorted, compact) */
} k3_chat_opts;

/* Encode a conversation exactly as doc/chat-format.md section 2 (the thinking-
 * effort system message when think is on, preserved reasoning, generation prompt) and
 * doc/tool-calls.md section 1 (tool declarations, calls, results re-sorted by
 * call id, tool_choice), appending the ids to out. On error out->n is left as it was and
 * the message names the message index and field. */
k3_status k3_chat_encode(const k3_tok *t, const k3_chat_msg *msgs, size_t n_msgs, const k3_chat_opts *o,
                         k3_ids *out);

/* Output channel parser: feed the generated ids one at a time (starting right after the
 * generation prompt); each call reports the new visible text of the think channel and
 * of the response channel (in that order; UTF-8 complete) and whether <|end_of_msg|>
 * was read. Structural tokens and tag names are hidden; anything unexpected is shown
 * as text in the current channel, never dropped. Pointers are valid until the next call. */
enum k3_chat_channel { K3_CHAN_THINK = 0, K3_CHAN_RESPONSE = 1 };
typedef struct k3_chat_out {
    const char *think;
    size_t      think_len;
    const char *response;
    size_t      response_len;
    int         end; /* 1 once <|end_of_msg|> was read (all text flushed)          */
    /* tool calls (only with k3_chat_parser_set_tools; k3-tools.md section 2.4): */
    int         call_index; /* the call the three fields below are about (0-based)      */
    const char *call_name;  /* non-NULL: that call opened in this feed (its name)       */
    const char *call_args;  /* arguments JSON appended to that call in this feed; the
                             * concatenation over the feeds is the call's final string  */
    size_t call_args_len;
    int    call_done; /* 1: that call closed in this feed                          */
} k3_chat_out;
typedef struct k3_chat_parser k3_chat_parser;
/* think: the same flag as the prompt's (1: starts in the think channel). */
k3_status k3_chat_parser_new(const k3_tok *t, int think, k3_chat_parser **out);
/* The ids that end a reasoning and open the answer, <|close|>think<|sep|><|open|>response<|sep|>,
 * appended to out (a thinking budget writes them for the model). */
k3_status k3_chat_think_close(const k3_tok *t, k3_ids *out);
/* on = 1: parse <|open|>tools<|sep|> blocks into calls (spec k3-tools.md section 2, with
 * its leniency); 0 (default): they are shown as text like any unexpected tag. Call it
 * before the first feed. */
void k3_chat_parser_set_tools(k3_chat_parser *p, int on);
/* Calls parsed so far, in order of appearance (calls without a tool name are dropped).
 * k3_chat_parser_call returns 1 when call i was closed, 0 when the stream stopped inside
 * it (or -1 out of range); *name and *args (the arguments as a JSON object string, as
 * Python's json.dumps writes it) stay valid while p lives. */
int       k3_chat_parser_n_calls(const k3_chat_parser *p);
int       k3_chat_parser_call(const k3_chat_parser *p, int i, const char **name, const char **args);
void      k3_chat_parser_free(k3_chat_parser *p);
k3_status k3_chat_parser_feed(k3_chat_parser *p, int32_t id, k3_chat_out *out);
/* End of generation without <|end_of_msg|> (max tokens, cancel): flush held text. A marker
 * cut part way that begins one the parser hides (<|close|>respo...) is hidden too. */
void k3_chat_parser_finish(k3_chat_parser *p, k3_chat_out *out);
int  k3_chat_parser_channel(const k3_chat_parser *p); /* current K3_CHAN_*        */
/* 1: the next ordinary (not special) id is answer text: the response channel, outside a marker
 * and a tool call (what the server lists logprobs for). */
int k3_chat_parser_in_text(const k3_chat_parser *p);

/* ==== structured output: grammars and token masks (src/grammar) ============ */
/* A pushdown automaton over bytes (special tokens are terminals of their own) compiled from a
 * JSON Schema or "any JSON object"; a matcher follows one output, and its token mask is the set
 * of ids that keep the output valid (ends of message only when the document is complete).
 * k3chat(1), STRUCTURED OUTPUT, lists the supported keywords. */
typedef struct k3_gvocab  k3_gvocab;  /* the vocabulary seen as byte strings (built once)    */
typedef struct k3_grammar k3_grammar; /* compiled, read-only but for its mask cache (locked) */
typedef struct k3_gmatch  k3_gmatch;  /* one output's position in a grammar (one thread)     */
/* n_vocab: the mask width (the model's vocab_size); eos_id: an end besides <|end_of_msg|>
 * (-1: none). The tokenizer must outlive the vocabulary. */
k3_status k3_gvocab_new(const k3_tok *t, int32_t n_vocab, int32_t eos_id, k3_gvocab **out);
void      k3_gvocab_free(k3_gvocab *v);
int32_t   k3_gvocab_words(const k3_gvocab *v); /* uint64_t words of a mask */
/* A compile's memory meter, for a caller that bounds the memory of compiles running at once (the
 * server's grammar budget) while they run. The compile counts the bytes it builds (its automaton
 * and the work arrays its last steps add beside it: an upper bound of its peak, which a free does
 * not lower) in used, and asks charge(ud, K3_GMETER_STEP) each time used passes granted (the sum
 * of the steps charge allowed); a nonzero answer stops it: K3_ERR_NOMEM naming the megabytes it was
 * granted, refused 1. The granted bytes stay the caller's to give back (once the grammar is built
 * k3_grammar_bytes tells what it holds). Set charge and ud, the rest 0. */
typedef struct k3_gmeter {
    int (*charge)(void *ud, size_t n);
    void  *ud;
    size_t used, granted;
    int    refused;
} k3_gmeter;
#define K3_GMETER_STEP ((size_t)1 << 20)
/* Compile a JSON Schema (len bytes of JSON); m: its meter (NULL: the compile limits alone).
 * Errors: K3_ERR_ARG (not JSON, a malformed keyword, a schema no document satisfies),
 * K3_ERR_UNSUPPORTED naming the keyword and its JSON path, K3_ERR_NOMEM (m refused). */
k3_status k3_grammar_json_schema(const k3_gvocab *v, const char *schema, size_t len, k3_gmeter *m,
                                 k3_grammar **out);
k3_status k3_grammar_json_object(const k3_gvocab *v, k3_grammar **out);
/* The K3 tool-call format (k3-tools.md 1.3) for tools (the request's JSON array) from the
 * response channel on: only: the one tool allowed (a named tool_choice), NULL: any; max_calls:
 * calls in the block (1 for parallel_tool_calls false); text: 1 = an answer without calls is
 * allowed too (tool_choice auto), 0 = at least one call (required or named). Each call's
 * arguments follow its parameters' properties (one type each; K3_ERR_UNSUPPORTED otherwise).
 * m: its meter, as k3_grammar_json_schema's. */
k3_status k3_grammar_tool_calls(const k3_gvocab *v, const char *tools, const char *only, int max_calls,
                                int text, k3_gmeter *m, k3_grammar **out);
void      k3_grammar_free(k3_grammar *g); /* after every matcher of it */
int       k3_grammar_nodes(const k3_grammar *g);
/* Fills every node's mask cache now (otherwise each is filled on its first visit). */
k3_status k3_grammar_warm(const k3_grammar *g);
int32_t   k3_grammar_words(const k3_grammar *g); /* uint64_t words of its masks */
/* The bytes g holds now: the compiled automaton, the mask cache entries filled so far and the
 * cache passes' DFA (which grow as outputs visit new nodes); its matchers' memory is theirs. */
size_t k3_grammar_bytes(const k3_grammar *g);
/* The bytes matcher m holds now (its frames, configuration sets and token DFA, which grow as
 * its answer runs, up to about 4 MB). */
size_t    k3_gmatch_bytes(const k3_gmatch *m);
k3_status k3_gmatch_new(const k3_grammar *g, k3_gmatch **out);
void      k3_gmatch_free(k3_gmatch *m);
/* Sets the bits of the ids that may come next ((k3_gvocab_words) words). Its first visit of an
 * automaton node walks the vocabulary (milliseconds), and a schema may put hundreds of new nodes
 * in one step: k3_gmatch_mask does all of them. */
k3_status k3_gmatch_mask(k3_gmatch *m, uint64_t *mask);
/* The same with the work of one call bounded, for an engine thread several streams share: about
 * one walk of the whole vocabulary (first visits are begun while their walks fit, and stop once
 * the automaton transitions they compute pass it). *done 1: the mask is set; 0: work is left and
 * the mask is not set (all zero): call again, e.g. at the next engine step, after the other
 * streams' tokens; each call gets further (what it computed is kept), and the mask it finally
 * sets is k3_gmatch_mask's. */
k3_status k3_gmatch_mask_bounded(k3_gmatch *m, uint64_t *mask, int *done);
int       k3_gmatch_allows(k3_gmatch *m, int32_t id); /* 1: id may come next (state unchanged) */
/* Advance by one id / by bytes; K3_ERR_ARG (state unchanged) when they do not continue. */
k3_status k3_gmatch_accept(k3_gmatch *m, int32_t id);
k3_status k3_gmatch_accept_bytes(k3_gmatch *m, const char *b, size_t n);
int       k3_gmatch_complete(const k3_gmatch *m); /* 1: the document is complete           */
int       k3_gmatch_ended(const k3_gmatch *m);    /* 1: an end of message was accepted     */

/* ==== conversation (conv.c, conv-gen.c, transcript.c) ===================== */
/* A conversation: system prompt, user/assistant messages (with reasoning), its settings
 * (thinking mode, effort, sampling), the prompt cache over a session, and its transcript
 * files (JSON Lines, man/k3chat.5). One k3_conv is used by one thread at a time, except
 * k3_conv_cancel, which any thread may call. Strings are UTF-8 and copied on the way in.
 *
 * Typical turn (worker thread):
 *     k3_conv_add(c, K3_ROLE_USER, text, NULL);
 *     st = k3_conv_generate(c, model, session, &cb);   // streams via cb, appends the reply
 *     if (st == K3_ERR_CONTEXT) ... offer k3_conv_clear or k3_conv_drop_oldest, or k3_conv_undo
 * /retry = k3_conv_retry_last + k3_conv_generate; /undo = k3_conv_undo. */

typedef enum k3_role { K3_ROLE_SYSTEM = 0, K3_ROLE_USER, K3_ROLE_ASSISTANT, K3_ROLE_TOOL } k3_role;

/* Why a turn stopped. */
typedef enum k3_stop {
    K3_STOP_NONE = 0,   /* not generated here (typed in, or loaded without stats) */
    K3_STOP_EOS,        /* the model ended its message                            */
    K3_STOP_MAX_TOKENS, /* settings.max_tokens reached                            */
    K3_STOP_CONTEXT,    /* context capacity reached                               */
    K3_STOP_CANCEL,     /* k3_conv_cancel (the message is marked interrupted)      */
    K3_STOP_ERROR,      /* engine error mid-turn (message kept, marked interrupted)*/
} k3_stop;
const char *k3_stop_str(k3_stop s); /* "eos", "max_tokens", "context", "cancel", "error", "" */

/* Per-turn statistics of a generated assistant message. */
typedef struct k3_turn_stats {
    int               n_prompt;     /* tokens of the rendered prompt (history + generation prompt)   */
    int               n_cached;     /* of which reused from the session's state (prompt cache)       */
    int               n_prefill;    /* tokens prefilled for this turn (engine statistics)            */
    int               n_gen;        /* tokens generated, including the end-of-message token          */
    int               n_think;      /* generated tokens that went to the think channel              */
    double            t_prefill;    /* seconds spent prefilling                                      */
    double            t_gen;        /* seconds of decoding: end of prefill to the last token         */
    double            ttft;         /* seconds from the start of the turn to the first token         */
    double            t_think;      /* seconds from the start of the turn to the end of thinking     */
    double            tok_s;        /* n_gen / t_gen: decode tokens per second                       */
    k3_sampler_params sampling;     /* what the turn sampled with, seed included               */
    int               has_sampling; /* sampling is known (generated here, or recorded in the file)  */
    int               think;        /* thinking mode the turn was generated with (1/0)               */
    k3_stop           stop;
} k3_turn_stats;

/* One message. Owned by the conversation; read-only to callers; valid until the next
 * call that changes the conversation. */
typedef struct k3_msg {
    k3_role       role;
    char         *content;     /* never NULL                                              */
    char         *reasoning;   /* think channel of an assistant turn; NULL when none      */
    int           interrupted; /* cancelled or failed mid-turn                            */
    int           has_stats;
    k3_turn_stats stats;
    int32_t      *ids; /* (n_ids) generated token ids, NULL when unknown          */
    int           n_ids;
    k3_tool_call *tool_calls; /* assistant: (n_tool_calls) calls it made (strings owned)  */
    int           n_tool_calls;
    char         *tool_name; /* tool result: the tool's name (NULL: from its call); other
                              * roles: the message's "name" (name="..."), NULL: none    */
    char *tool_call_id;      /* tool result: the call it answers (NULL when unknown)   */
    char *tools;             /* system: tools declared here, in place (JSON array text;
                              * k3-tools.md 1.2 "New Tools Available"), NULL when none  */
    size_t *parts;           /* (n_parts) content's text parts' byte lengths (owned), as
                              * k3_chat_msg.parts; NULL: one string                      */
    int   n_parts;
    char *extra; /* members of its transcript line that a save would not write from the fields
                  * above (unknown ones, from a newer k3chat or a hand edit; known ones this
                  * version does not store, as a tool_call_id on a user message), as a JSON
                  * object's text, written back as they were; NULL when none               */
} k3_msg;

typedef struct k3_conv_settings {
    int  think;                 /* thinking mode: 1 on (default), 0 off                 */
    char effort[8];             /* "low" | "high" | "max" (default); "medium" rejected  */
    int  max_tokens;            /* generated tokens per turn; 0 = up to the capacity    */
    int  think_budget;          /* reasoning tokens before the think channel is closed
                                 * for the model (the answer follows); 0 = no limit    */
    k3_sampler_params sampling; /* temp, top_p, min_p, top_k, seed, penalties (these two
                                 * and k3_conv_set_logit_bias's apply to the answer only:
                                 * the reasoning is drawn as the model gives it, and
                                 * the counts are the answer's text tokens, those
                                 * on_token marks content)                             */
    char tool_choice[12];       /* "auto" (or "") | "required" | "none" (k3-tools.md 1.6) */
    int  logprobs;              /* 1: on_token gets each answer text token's log-probability */
    int  top_logprobs;          /* and that many alternatives (0..K3_TOP_LOGPROBS)        */
} k3_conv_settings;

typedef struct k3_conv k3_conv;

/* Defaults: think on, effort max, max_tokens 0, temp 1 / top_p 1 (the settings table's; override
 * with the model's generation_config via settings), seed 0. */
void     k3_conv_settings_default(k3_conv_settings *s);
k3_conv *k3_conv_new(void); /* NULL on out of memory */
void     k3_conv_free(k3_conv *c);
/* Validates (effort, ranges); K3_ERR_ARG naming the field. Applies from the next turn. */
k3_status k3_conv_set_settings(k3_conv *c, const k3_conv_settings *s);
void      k3_conv_get_settings(const k3_conv *c, k3_conv_settings *out);
/* Records the model (directory, FNV-64 of its config.json, K3_*BITS from p, may be NULL)
 * for transcript headers. K3_ERR_IO if config.json cannot be read. */
k3_status k3_conv_set_model(k3_conv *c, const char *dir, const k3_params *p);
/* That fingerprint: 16 hex digits, "" before k3_conv_set_model. */
const char *k3_conv_model_fingerprint(const k3_conv *c);

/* Messages. The system prompt is message 0 when set; NULL or "" removes it. */
k3_status   k3_conv_set_system(k3_conv *c, const char *text);
const char *k3_conv_system(const k3_conv *c); /* NULL when none */
k3_status   k3_conv_add(k3_conv *c, k3_role role, const char *content, const char *reasoning);
/* Appends a copy of any message: an assistant message with tool calls, a tool result
 * (K3_ROLE_TOOL with tool_call_id and/or tool_name). Strings and ids are copied. */
k3_status k3_conv_add_msg(k3_conv *c, const k3_msg *m);
/* Tool declarations: a JSON array of {"type":"function","function":{...}} (rendered as the
 * tool-declare message; checked at the next render). NULL, "" or "[]": none. */
k3_status k3_conv_set_tools(k3_conv *c, const char *json);
/* The response format of the next turns (k3-tools.md 1.7): type NULL/"text" (none),
 * "json_object" or "json_schema" with schema (JSON text, copied). Rendered only; enforcing
 * is k3_conv_set_grammar's. */
k3_status k3_conv_set_response_format(k3_conv *c, const char *type, const char *schema);
/* The logit bias of the next turns' answers (k3_sampler_set_bias; the reasoning is drawn
 * without it). b is not copied (each turn's sampler copies it when the turn begins to draw): it
 * must outlive those turns, as k3_conv_set_grammar's g. n 0 clears. K3_ERR_ARG for a bad entry
 * (nothing changed). */
k3_status k3_conv_set_logit_bias(k3_conv *c, const k3_logit_bias *b, int n);
/* The next turns' answers are drawn under g's token masks from the response channel on
 * (reasoning stays free); NULL: none. g is not copied: it must outlive those turns. */
void        k3_conv_set_grammar(k3_conv *c, const k3_grammar *g);
const char *k3_conv_tools(const k3_conv *c); /* NULL when none */
int         k3_conv_count(const k3_conv *c);
/* Messages of abandoned branches (/edit, /retry) the conversation keeps: a save writes them too. */
int           k3_conv_abandoned_count(const k3_conv *c);
const k3_msg *k3_conv_msg(const k3_conv *c, int i); /* NULL when out of range */
/* New conversation: drops every message but the system prompt; settings stay; the
 * autosave continues in a new file (the old one is kept). */
void k3_conv_clear(k3_conv *c);
/* /undo: removes the last user message and everything after it. Returns messages removed. */
int k3_conv_undo(k3_conv *c);
/* /edit: moves the last user message and everything after it into a new abandoned branch:
 * gone from the history (and the prompt), kept in transcripts, marked "abandoned" (k3chat.5).
 * Returns the messages moved (0: no user message; -1 out of memory, nothing changed). */
int k3_conv_edit_last(k3_conv *c);
/* /retry: removes trailing assistant messages so the history ends with the user's turn.
 * Returns messages removed (0: nothing to retry). */
int k3_conv_pop_reply(k3_conv *c);
/* /retry in a chat: as k3_conv_pop_reply, but the answer is kept as an abandoned branch (as
 * k3_conv_edit_last keeps an edited exchange), in memory and in the autosave. Returns the
 * messages moved (0: no answer to retry; -1: out of memory, k3_errmsg says so). */
int k3_conv_retry_last(k3_conv *c);
/* Undoes a k3_conv_retry_last or k3_conv_edit_last that nothing followed (a regeneration that
 * failed before its turn began): the newest abandoned branch, when it was cut where the history
 * now ends, becomes active again, as it was. Returns the messages moved back (0: no such branch;
 * -1: out of memory, nothing changed). */
int k3_conv_restore_branch(k3_conv *c);
/* Drops the oldest exchange (first user message and the replies up to the next user
 * message); the system prompt stays. Returns messages removed (0: nothing to drop). */
int k3_conv_drop_oldest(k3_conv *c);

/* A generated token (valid during the on_token call). */
typedef struct k3_gen_token {
    int32_t id;
    /* 1: a token of the answer's text (the response channel, outside markers and tool calls;
     * a special id only where the parser shows it as text) */
    int           content;
    const k3_tok *tok; /* the tokenizer: k3_tok_piece gives each id's bytes */
    /* content tokens with settings.logprobs: k3_logprobs of the logits it was drawn from (the
     * model's, before bias, penalties, temperature and mask); else NAN */
    float             logprob;
    const k3_logprob *top; /* (n_top) the settings.top_logprobs most likely ids */
    int               n_top;
} k3_gen_token;
/* Generation (conv-gen.c). Callbacks get UTF-8 pieces of each channel as they decode
 * (never a broken sequence); called on the generating thread; any may be NULL. */
typedef struct k3_conv_callbacks {
    void (*on_think)(const char *text, size_t n, void *ud);
    void (*on_response)(const char *text, size_t n, void *ud);
    void *ud;
    /* A tool call of the reply (conversations with tools): first with name (args NULL),
     * then with argument fragments whose concatenation is the final arguments string, then
     * with done = 1. index is the call's 0-based position; id is made here ("call_...")
     * and is the one the appended message stores. */
    void (*on_tool_call)(int index, const char *id, const char *name, const char *args, size_t n, int done,
                         void *ud);
    /* Each generated token, before the text callbacks it causes (a token whose text the parser
     * holds back, as part of a character, shows it with a later token's). */
    void (*on_token)(const k3_gen_token *t, void *ud);
} k3_conv_callbacks;
/* Renders the history (which must end with a user message or a tool result) with the generation prompt,
 * prefills only what the session has not processed yet (prompt cache, snapshots),
 * samples until end of message / max_tokens / capacity / cancel, and appends the
 * assistant message with its statistics (interrupted when cancelled: returns K3_ABORTED
 * with the partial message kept). Then autosaves if enabled (an autosave failure does not
 * fail the turn: see k3_conv_autosave_error). Errors before generation
 * (K3_ERR_CONTEXT: the prompt would not fit; message says how many tokens) change nothing.
 * The session must be used only through this conversation (or reset) between turns. */
k3_status k3_conv_generate(k3_conv *c, k3_model *m, k3_session *s, const k3_conv_callbacks *cb);
/* The same turn in steps, so one thread can run several conversations' turns together
 * (the server's continuous batching). k3_conv_generate is begin + steps until done + end.
 *   begin: renders, checks the context and brings s to the longest cached prefix (errors
 *          here change nothing, as for k3_conv_generate; no handle then). chunk: prompt
 *          ids fed per step (>= 1), 0 = the whole prompt in one step. cb is copied; cb->ud
 *          must stay valid until end.
 *   step:  one prefill chunk, or one decode token (sampled, parsed, streamed to the
 *          callbacks, then fed). A finished turn's step does nothing.
 *   step_batch: one step of each of count distinct turns (distinct conversations and
 *          sessions of one model), their feeds in one batched engine feed. Each turn's
 *          tokens are exactly those it would get stepped alone. K3_ERR_ARG for a bad
 *          list (count outside 1..256, NULL, a turn, session or conversation twice);
 *          a turn's own failure or cancel ends that turn only (see end).
 *   done:  1 when the turn needs no more steps (finished, failed or cancelled).
 *   end:   appends the reply and autosaves exactly as k3_conv_generate, frees g, and
 *          returns what k3_conv_generate would have (an unfinished turn ends as cancelled).
 * k3_conv_cancel works on a stepped turn as on k3_conv_generate. */
typedef struct k3_conv_gen k3_conv_gen;
k3_status k3_conv_gen_begin(k3_conv *c, k3_model *m, k3_session *s, const k3_conv_callbacks *cb, int chunk,
                            k3_conv_gen **out);
k3_status k3_conv_gen_step(k3_conv_gen *g);
k3_status k3_conv_gen_step_batch(k3_conv_gen *const *g, int count);
int       k3_conv_gen_done(const k3_conv_gen *g);
int       k3_conv_gen_prefill_left(const k3_conv_gen *g); /* prompt ids still to feed */
/* The bytes the turn's grammar matcher and token mask hold (0 without a grammar): the server
 * counts them with the request's grammar (K3_SERVE_GRAMMAR_MB). Not thread-safe against a step. */
size_t    k3_conv_gen_grammar_bytes(const k3_conv_gen *g);
k3_status k3_conv_gen_end(k3_conv_gen *g);
/* The next k3_conv_generate writes exactly these ids instead of sampling (each is still
 * fed, so the session and the prompt cache stay exact); the turn ends at <|end_of_msg|>
 * or, when the ids run out first, as max_tokens. For tests and demos (scripted output
 * through the real parser, conversation and server). ids are copied; n 0 clears. */
k3_status k3_conv_force_reply(k3_conv *c, const int32_t *ids, int n);
/* Thread-safe: stops a running k3_conv_generate (prefill included) soon. */
void k3_conv_cancel(k3_conv *c);
/* The next turn samples with exactly this seed (replay); later turns derive their own. */
void k3_conv_set_turn_seed(k3_conv *c, uint64_t seed);
/* The prompt cache's saved states (snapshots keyed by the ids that produced them): at most
 * max_snapshots (0..64; K3_CONV_SNAPSHOTS, default 3) holding at most mb megabytes (10^6
 * bytes; 0 = no byte limit; K3_CONV_SNAPSHOT_MB). When full, the least recently used goes
 * (a snapshot is used when a turn starts from it). Shrinking evicts at once. */
k3_status k3_conv_set_prompt_cache(k3_conv *c, int max_snapshots, double mb);
/* c uses with's saved states from now on (its own are dropped): conversations of one
 * model on their own sessions share one prompt cache, limits and LRU. They must then be
 * driven by one thread (the store is not locked); it lives until the last one is freed. */
void k3_conv_share_prompt_cache(k3_conv *c, k3_conv *with);
/* Whose snapshots c may restore and saves (default 0): a turn of c starts only from
 * snapshots saved under the same owner, so a shared cache never crosses tenants. A new
 * owner also forgets the state c's session holds. */
void k3_conv_set_cache_owner(k3_conv *c, uint64_t owner);
/* Forgets the prompt cache and its snapshots (every sharer's): call before freeing or
 * replacing the session or model the conversation generated with. */
void k3_conv_drop_cache(k3_conv *c);
/* Tokens of context a turn must be able to generate for it to start (a prompt that leaves
 * fewer is refused with K3_ERR_CONTEXT). */
#define K3_CONV_MIN_ROOM 8
/* Context accounting: tokens the next turn's prompt needs, and the capacity. */
k3_status k3_conv_context(k3_conv *c, k3_model *m, int *used, int *capacity);
/* Fitting a conversation into the context (a transcript far larger than it, say): the fewest
 * oldest exchanges (user message + answers; the system prompt stays) to drop so that the next
 * turn's prompt leaves `room` tokens free. apply = 0 only measures; 1 also drops them (the
 * autosave file is rewritten at its next write). drop = n_exchanges when even the system
 * prompt alone does not leave room. */
typedef struct k3_fit_info {
    int used, capacity; /* tokens the next prompt needs now, context capacity     */
    int n_exchanges;    /* exchanges in the conversation                          */
    int drop;           /* exchanges to drop (0: it fits)                         */
    int used_after;     /* tokens the next prompt needs without them              */
    int dropped_msgs;   /* apply: messages removed                                */
} k3_fit_info;
k3_status k3_conv_fit(k3_conv *c, k3_model *m, int room, int apply, k3_fit_info *fi);
/* Ids the chat encoder makes for the history (+ generation prompt when gen_prompt),
 * with the conversation's think mode and effort, appended to *out. */
k3_status k3_conv_render(const k3_conv *c, const k3_tok *tok, int gen_prompt, k3_ids *out);

/* Replay (conv-replay.c): re-runs each user turn of `saved` (with the saved history
 * before it) against m with settings `set`, and compares each new answer with the saved
 * one: by token ids when the transcript has them, else by text. flags: with
 * K3_REPLAY_SEEDS each turn samples with the seed its statistics recorded, with
 * K3_REPLAY_SAMPLING with their temperature, top-p, min-p and top-k too, so a sampled
 * transcript reproduces exactly (turns without recorded values use set's). cb gets one
 * report per assistant turn; *n_diff counts the turns that differ. Cancel with
 * k3_conv_cancel(saved) from another thread. */
enum { K3_REPLAY_SEEDS = 1, K3_REPLAY_SAMPLING = 2 };
typedef struct k3_replay_turn {
    int           turn;                    /* 1-based assistant turn number                          */
    int           msg_index;               /* index of the saved assistant message                    */
    int           match;                   /* 1: identical (for an interrupted saved turn: its prefix) */
    int           by_ids;                  /* compared token ids (else text)                          */
    int           n_saved, n_new;          /* tokens (by_ids) or bytes of think+response (text)     */
    int           first_diff;              /* index of the first differing token / byte, -1 if none  */
    int32_t       saved_id, new_id;        /* the differing ids (-1: past the end)               */
    const char   *saved_piece, *new_piece; /* their text (printable, NUL-terminated)      */
    const k3_msg *new_msg;                 /* the new answer (valid during the callback)              */
} k3_replay_turn;
typedef void (*k3_replay_cb)(const k3_replay_turn *t, void *ud);
k3_status k3_conv_replay(k3_conv *saved, k3_model *m, k3_session *s, const k3_conv_settings *set,
                         unsigned flags, k3_replay_cb cb, void *ud, int *n_diff);

/* Transcripts (transcript.c): JSON Lines, format in man/k3chat.5. */
typedef struct k3_load_info {
    int  n_messages;
    int  torn_line;            /* line number of an ignored torn final line, 0 when none */
    char torn_why[160];        /* why that line did not parse ("invalid JSON at column 34: ...") */
    int  utf8_fixed;           /* invalid UTF-8 sequences replaced with U+FFFD, 0 when none */
    int  utf8_line, utf8_byte; /* where the first was: line, byte of the line (1-based) */
    int  has_settings;         /* the header had "settings" (else the defaults were used)          */
    char version[32];          /* k3chat version that wrote the file                     */
    char model_dir[512];
    char config_fnv64[17];
} k3_load_info;
/* Writes the whole conversation atomically (temp file, fsync, rename, fsync dir).
 * Failure: K3_ERR_IO naming the path and errno; the conversation is untouched. */
k3_status k3_conv_save(const k3_conv *c, const char *path);
/* Replaces c's messages and settings with the transcript's; on any error (K3_ERR_FORMAT /
 * K3_ERR_IO, message "FILE:LINE: what") c is untouched. info may be NULL. A torn final
 * line (no newline, unparseable: an interrupted append) is ignored and reported in info, not
 * logged: the front end says it once, where the user looks;
 * so is invalid UTF-8, which is replaced with U+FFFD (info->utf8_*). */
k3_status k3_conv_load(k3_conv *c, const char *path, k3_load_info *info);
/* Markdown export (reasoning in <details> blocks), written atomically. */
k3_status k3_conv_export_md(const k3_conv *c, const char *path);
/* Autosave: off until enabled. dir NULL = $XDG_DATA_HOME/k3chat (~/.local/share/k3chat).
 * Every finished or interrupted turn is appended (one write + fsync per turn); edits of
 * saved history (undo, retry, system) rewrite the file atomically at the next save. */
k3_status k3_conv_autosave_enable(k3_conv *c, const char *dir);
/* Brings the autosave file up to date now (k3_conv_generate calls it after each turn).
 * On failure the conversation stays in memory, the error is also kept for
 * k3_conv_autosave_error and the next call tries again. */
k3_status k3_conv_autosave(k3_conv *c);
/* A copy of c that a thread of its own may use: its messages, abandoned branches, settings,
 * tools, model identity, header extras and autosave state, so the copy's next autosave writes
 * the same file as c's would (append, rewrite or a new file), but not the prompt cache, the
 * grammar, a forced reply or the autosave gate. NULL when out of memory (k3_errmsg says so). */
k3_conv *k3_conv_copy(const k3_conv *c);
/* k3_conv_copy for finishing c's autosave on another thread (a front end's rescue of the turn in
 * progress: k3_conv_add_msg, then k3_conv_autosave): where c's next autosave would append to its
 * file, only the messages the file lacks are copied (the copy's autosave appends them and what is
 * added after them), so the cost follows the turn, not the history; else the whole conversation.
 * Its messages may then be the newest only: use it for nothing else. */
k3_conv *k3_conv_copy_unsaved(const k3_conv *c);
/* Two writers of one autosave file (a front end that saves the turn in progress from another
 * thread while the owner is blocked, and the owner's end of turn): before each write the
 * autosave calls may_write(ud), from the thread that autosaves; 0 and it writes nothing and
 * returns K3_OK, the file being the other writer's. NULL: it always writes. */
void k3_conv_set_autosave_gate(k3_conv *c, int (*may_write)(void *ud), void *ud);
/* Why the last autosave failed ("PATH: what: strerror (errno N)"), NULL when it worked. */
const char *k3_conv_autosave_error(const k3_conv *c);
/* The autosave file, NULL before the first autosave wrote one (and after k3_conv_clear). */
const char *k3_conv_autosave_path(const k3_conv *c);

#ifdef __cplusplus
}
#endif
