/* fit.h: the memory plan of a checkpoint, what the machine can give, and the settings that fit
 * (implementation: fit.c). One plan answers both k3_model_open (before any weight is read) and
 * `k3chat --inspect`.
 *
 * The plan (bytes, decimal GB in messages):
 *   dense matrices  K3_BITS       KDA q/k/v/g/o, latent down/up, shared experts, dense MLP
 *   MLA matrices    K3_MLA_BITS   q_a, q_b, kv_a, kv_b, o, g of MLA layers
 *   lm_head         K3_HEAD_BITS
 *   embeddings      as stored
 *   small tensors   f32: norms, router, conv taps, dt_bias, A_log, f_a/f_b, b_proj, AttnRes
 *   routed experts  the expert cache: K3_EXPERT_GB, at least one expert per MoE layer, at most all
 *   AttnRes blocks
 * and for each session run at once (one, or the server's --parallel N; k3_params.sessions):
 *   KDA state + conv tails, MLA latent cache (K3_MAXT positions), and the chunk scratch
 *   (session.c's chunk buffer of K3_CHUNK columns: projections, MoE outputs, K3_CHUNK rows of
 *   logits, MLA scores over K3_MAXT; ~330 MB at the release's widths and K3_CHUNK=128), plus,
 *   with more sessions than K3_CHUNK, the batch buffer of one column per session.
 * 32 bits = f32, 8 = int8 per row, 4 = int4 in groups of 64 (quant.h), from each matrix's logical
 * shape (a k3 container's split kv_b and .qs sidecars included). With K3_MMAP=1 the matrices and
 * embeddings are mapped from the page cache and counted apart ("mapped"), not in the total.
 * Only the layers that run (K3_LAYERS) are counted.
 *
 * What the machine can give ("available"): K3_MEM_GB when set (an override, for users and
 * tests), else the smaller of MemAvailable (/proc/meminfo) and, when the process's cgroup or one
 * above it sets a limit (v2 memory.max, v1 memory.limit_in_bytes), that limit less what it has
 * charged, the least of them (k3_machine_memory, util.c). The plan must fit in
 * "usable" = available - reserve, reserve = 0.5 GB + 5% of available (activations, logits,
 * the 64 MB load bands, the OS).
 *
 * The decision (fit_decide), settings given explicitly (K3_BITS, K3_MLA_BITS, K3_HEAD_BITS,
 * K3_EXPERT_GB, K3_MAXT as environment variables or k3_params.set; bits a k3 container brings)
 * are never changed; the others are chosen in this order, the first that fits wins:
 *   1. the given bits (8/8/8 by default)
 *   2. 4 bits for the dense matrices (K3_BITS)
 *   3. 4 bits everywhere (K3_BITS, K3_MLA_BITS, K3_HEAD_BITS)
 * where "fits" means the plan with one expert per MoE layer fits in usable (or, with K3_EXPERT_GB
 * given, the plan with that cache); an unset expert cache then takes what is left of usable, at
 * most every expert. With K3_MMAP=1 the mapped weights come first: every token reads all of them,
 * so a byte of page cache that holds one saves a drive read per token, while a byte of expert
 * cache saves (active experts per token / all experts) of one under flat routing (1,472 of
 * 82,432 on the release: 56x less); an unset cache then takes what is left after the mapped
 * weights (at least one expert per MoE layer), and what the budget cannot hold of them is
 * counted as read again from the drive each token (fit_plan.reread, in the speed estimate). K3_MAXT is never
 * lowered (8192 unless given). Nothing fits: refused with the figures (the plan, the available memory, and
 * each alternative with its total, marked whether it fits, plus the private memory of a k3-repack container
 * run with K3_MMAP=1).
 */
#pragma once
#include "config.h"
#include "st.h"

/* Classes of the plan. */
enum {
    FIT_DENSE,
    FIT_MLA,
    FIT_HEAD,
    FIT_EMBED,
    FIT_SMALL,
    FIT_EXPERT,
    FIT_KDA,
    FIT_MLACACHE,
    FIT_BLOCKS,
    FIT_SCRATCH,
    FIT_WINDOW,
    FIT_NCLASS
};

/* What the tensor table says, once (bit-width independent). */
typedef struct fit_table {
    uint64_t mat[3][3]; /* [FIT_DENSE/MLA/HEAD][32, 8, 4 bits]                           */
    uint64_t embed, small;
    uint64_t expert_all;              /* every routed expert of the run layers, as stored              */
    uint64_t expert_one;              /* one expert (six tensors)                                      */
    uint64_t kda_state;               /* KDA state + conv tails of the run layers                      */
    uint64_t mla_per_pos;             /* MLA latent cache bytes per position                           */
    uint64_t blocks;                  /* AttnRes block snapshots                                       */
    uint64_t cb_base, cb_col, cb_pos; /* a chunk buffer: cb_base + cb_col x columns (each with its
                                         logits row) + cb_pos x K3_MAXT (session.c)              */
    uint64_t sess_extra;              /* a session's last logits and KDA accumulators                   */
    uint64_t win_base, win_col;       /* a prefill window's buffer: win_base + win_col x tokens (hidden
                                         states, AttnRes snapshots, routing table and expert outputs
                                         per token; session.c)                                     */
    uint64_t win_logits;              /* each window token's logits row while K3_LOGITS is set         */
    uint64_t big_f32;                 /* largest matrix as f32 (information: the load no longer holds it) */
    int      n_mats;                  /* matrix products per token outside the routed experts          */
    int      n_run, n_moe, n_kda, n_mla;
    int      ex_rows, ex_cols; /* a routed expert's w1/w3 shape (F, L): w2 is (L, F); 0: no MoE */
    int      kda_heads, kda_d; /* a KDA layer's heads and head width (0: none)                  */
} fit_table;

/* Settings of a plan. */
typedef struct fit_set {
    int    bits, mla_bits, head_bits;
    double expert_gb; /* < 0: unset (fit_decide chooses)                              */
    long   maxt;
    int    map;      /* K3_MMAP=1                                                     */
    int    chunk;    /* K3_CHUNK (columns of the chunk scratch)                        */
    int    sessions; /* sessions at once (--parallel); < 1 counts as 1                */
    int    window;   /* prefill window in tokens; <= chunk: none (given: the wanted one,
                        K3_WINDOW or K3_MAXT; chosen: what fits, fit_decide)          */
    int all_logits;  /* K3_LOGITS: the window keeps a logits row per token          */
} fit_set;

typedef struct fit_plan {
    uint64_t b[FIT_NCLASS];
    uint64_t mapped; /* K3_MMAP=1: matrices and embeddings used from the page cache  */
    uint64_t total;  /* private bytes                                                 */
    uint64_t reread; /* of mapped, what usable cannot hold beside total (fit_decide):
                        read again from the drive each token                          */
} fit_plan;

typedef struct fit_machine {
    double      avail, usable; /* bytes                                                      */
    const char *src;           /* "K3_MEM_GB", "MemAvailable", "cgroup memory limit"         */
    double      meminfo;       /* MemAvailable (0: unknown)                                  */
    double      cgroup;        /* a cgroup's limit less its charge (0: no limit found)       */
} fit_machine;

/* Which settings were given explicitly (k3_params.set, K3_SET_* in k3.h). */
typedef struct fit_choice {
    fit_set  set;        /* the settings to run with                                      */
    fit_plan plan;       /* and their plan                                                */
    int      ok;         /* 0: refused (msg says why, with the figures)                   */
    int      level;      /* 0..2: the step of the order that was taken                    */
    char     msg[2048];  /* one line: what was chosen and why, or the refusal             */
    char     brief[128]; /* the choice in a few words (status bar): "4/8/8 bits (fit step
                            2) · cache 1.61 GB"                                          */
    int win_want;        /* the window wanted (given.window, at most K3_MAXT)              */
} fit_choice;

/* The figures of the plan for the first n_run layers of config c (fit.c: DESIGN). D: the open
 * shards, for the stored size of embeddings and experts, or NULL (the release's dtypes). SPLIT:
 * a k3 container (kv_b held split per head). */
k3_status fit_scan(const k3_config *c, const st_dir *d, int n_run, int split, fit_table *out);
void      fit_plan_at(const fit_table *t, const fit_set *s, fit_plan *out);
/* MemAvailable of /proc/meminfo in bytes (0: unknown). */
double fit_meminfo_available(void);
/* K3_ERR_ARG naming K3_MEM_GB when it is not a number > 0. */
k3_status fit_machine_get(fit_machine *out);
/* set_mask: K3_SET_* of the settings given explicitly. */
void fit_decide(const fit_table *t, const fit_machine *mc, const fit_set *given, int set_mask,
                fit_choice *out);
/* "17.55 GB" style: decimal units, two decimals. */
const char *fit_hb(char *buf, size_t n, double bytes);

/* Expected speed (speed.c): quick measurements of this machine's kernels, cached per machine
 * in $XDG_CACHE_HOME/k3chat/speed, and the estimates (speed.c: DESIGN). */
typedef struct fit_speed {
    double mem_bw;              /* bytes/s, summing a 256 MB buffer on all threads                        */
    double dec[4];              /* [enum qtype] weight bytes/s of a one-column product                     */
    double pre[4];              /* [enum qtype] weight bytes x columns/s at 32 columns                     */
    double wide[4];             /* [enum qtype] the same at wide_n columns (the chunk); 0: not measured    */
    int    wide_n;              /* the columns of wide: fit_speed_get_model's chunk, 0 when 1 or 32         */
    double call;                /* seconds of one small product (the fixed cost of a call)                 */
    double kda_rec;             /* seconds of one KDA layer's recurrence for one token (all heads, on the
                                   threads, as a chunk runs it); 0: not measured                        */
    double ex_dec;              /* weight bytes/s of routed experts run as decode runs them (w1 and w3 in one
                                   call, then w2) at the model's expert shape; 0: not measured              */
    double ex_pre;              /* weight bytes x columns/s of the same at ex_pre_n columns (a prefill chunk's
                                   products of one expert); 0: not measured                              */
    int       ex_pre_n;         /* the columns of ex_pre (over 1)                                          */
    double    disk;             /* bytes/s, O_DIRECT 4 MB reads of the largest shard (0: unknown)          */
    double    disk_data;        /* the same from its data only (= disk unless the shard is sparse)         */
    int       sparse;           /* that shard is sparse: the disk figure is holes, not the drive           */
    int       cached;           /* every figure came from the cache                                        */
    long long when;             /* Unix time the oldest of the figures was measured                        */
    double    load_lo, load_hi; /* the 1-minute load averages they were measured under             */
    int       n_cond;           /* figures counted in when / load_lo / load_hi                     */
    double    load_now;         /* the load average now (before any measuring)                     */
    int       cpus;             /* CPUs online                                                     */
    char      cache[4200];      /* the cache file                                                  */
} fit_speed;
/* Measures (or, unless FRESH, takes from the cache) the figures, the drive's from the largest
 * shard of DIR. */
void fit_speed_get(const char *dir, int fresh, fit_speed *out);
/* The same with the expert figures for t's expert shape, when t has routed experts (ex_dec; ex_pre
 * at the columns flat routing gives one expert in a chunk of CHUNK with n_active experts a token),
 * and for a chunk other than 1 or 32 columns the rates at its width (wide). */
void fit_speed_get_model(const char *dir, const fit_table *t, int fresh, int chunk, int n_active,
                         fit_speed *out);
/* The routed experts' rate at round(cols) columns into out->ex_pre (k3-bench release: the columns
 * the chunk's routing gave each expert); nothing when t has no routed experts or cols < 1.5. */
void fit_speed_get_experts(const fit_table *t, int fresh, double cols, fit_speed *out);
void fit_speed_estimate(const fit_table *t, const fit_set *s, const fit_plan *p, const fit_speed *sp,
                        int n_active, int chunk, double *decode_s, double *prefill_s);
/* The routing a run really had, per MoE layer (k3-bench release takes it from the session's
 * expert hits and misses): a decode token's experts and misses, and a prefill chunk's distinct
 * experts and misses. The estimate otherwise assumes flat routing (a cache holding a fraction f of
 * the experts hits f of the time, a chunk touches E (1 - (1 - k/E)^C) experts), which a replica
 * of zero weights does not have: its tied router scores pick the same k experts for every token. */
typedef struct fit_route {
    double dec_active, dec_miss, chunk_distinct, chunk_miss;
} fit_route;
/* Time to the first token of a prompt of P tokens at settings s: prefill windows of s->window
 * tokens (at most chunk: chunks), each MoE layer of a window reading the experts it touches under
 * flat routing (E (1 - (1 - k/E)^n) of a window of n) that the cache does not hold, once, while
 * computing them (reads overlap the compute: the slower of the two counts). */
typedef struct fit_ttft_est {
    double seconds; /* to the first token                                               */
    double compute; /* of which the kernels alone would take                           */
    double bytes;   /* routed-expert bytes read from the drive                         */
    double floor;   /* the unique experts the prompt routes to, each read once          */
    int    window;  /* the window it assumed                                           */
} fit_ttft_est;
void fit_ttft(const fit_table *t, const fit_set *s, const fit_plan *p, const fit_speed *sp, int n_active,
              int chunk, long P, fit_ttft_est *out);
/* "1024-token prompt 12.3 s reading 1.40 TB of experts (floor 1.38 TB; per chunk of 128:
 * 95.1 s, 9.85 TB); 8192-token prompt ...": fit_ttft at 1k and 8k tokens (at most K3_MAXT), the
 * window of s against the per-chunk path. */
void fit_ttft_str(char *buf, size_t n, const fit_table *t, const fit_set *s, const fit_plan *p,
                  const fit_speed *sp, int n_active, int chunk);
/* fit_speed_estimate with the routing r (NULL: flat routing, as fit_speed_estimate). */
void fit_speed_estimate_route(const fit_table *t, const fit_set *s, const fit_plan *p, const fit_speed *sp,
                              int n_active, int chunk, const fit_route *r, double *decode_s,
                              double *prefill_s);
