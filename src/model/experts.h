/* experts.h: the streaming routed-expert tier (implementation: experts.c).
 *
 * The model keeps no routed expert of its own: every MoE layer has a small LRU cache of expert
 * slots within a byte budget (K3_EXPERT_GB, changeable live with ex_set_budget; at least one slot
 * per layer), filled from the checkpoint by loader threads. The layer code asks for the distinct
 * experts of a chunk at once and computes them one at a time, in the order the tier returns them
 * (cache hits first, then misses in disk-offset order, each read while the previous one is
 * computed):
 *
 *     ex_batch b;
 *     k3_status st = ex_begin(tier, layer, ids, n, &stats, &b);
 *     for (int e; !st && (st = ex_next(&b, &e, &x)) == K3_OK && e >= 0;)
 *         ... compute expert e with x ...
 *     ex_end(&b);          // always, also after an error
 *
 * A failed read (EIO, short read, missing file) makes ex_next return K3_ERR_IO naming the file
 * and offset; the cache stays consistent and the next batch retries the read (the shard file is
 * reopened by path, so a restored file is picked up).
 */
#pragma once
#include "config.h"
#include "k3-impl.h"
#include "quant.h"

/* One routed expert: three MXFP4 matrices on the stored bytes. */
typedef struct k3_expert {
    qmat w1; /* gate (F, L) */
    qmat w3; /* up   (F, L) */
    qmat w2; /* down (L, F) */
} k3_expert;

typedef struct ex_tier  ex_tier;
typedef struct ex_layer ex_layer;

/* What the tier reads and how: the checkpoint, its config and the settings, no model. */
typedef struct ex_source {
    const st_dir    *st;  /* the checkpoint: shards and tensor list (tensors.h names) */
    const char      *dir; /* named in messages                                         */
    const k3_config *cfg;
    int              n_run;     /* layers run (K3_LAYERS); MoE layers past it get no experts */
    double           expert_gb; /* budget in GB (< 0: the default, every expert when that is
                                   at most half of MemAvailable, else 40% of MemAvailable)  */
    int direct, pipe;           /* K3_DIRECT, K3_PIPE                                       */
    int load_threads;           /* K3_LOAD_THREADS (<= 0: 4)                                 */
    int lazy;                   /* 1: never read experts at open, even when the budget holds
                                   them all (an automatic budget: load.c, the memory fit)   */
    /* Called after each expert read at open (when the budget holds them all) with its bytes;
     * may be NULL. */
    void (*progress)(void *ud, uint64_t bytes);
    void *ud;
} ex_source;

/* Locate and check every routed expert of the run MoE layers (six U8 tensors each), start the
 * loader threads and, when the budget holds every expert and src->lazy is 0, read them all now. */
k3_status ex_open(const ex_source *src, ex_tier **out);
/* Bytes of the routed experts read on demand, not at open (0 when ex_open read them all). */
uint64_t ex_deferred_bytes(const ex_tier *t);
void     ex_close(ex_tier *t);

/* Change the budget live (GB, 10^9 bytes; < 0: the default); shrinking evicts at once. */
k3_status ex_set_budget(ex_tier *t, double budget_gb);
double    ex_budget_gb(const ex_tier *t);      /* the budget in effect                          */
uint64_t  ex_resident_bytes(const ex_tier *t); /* bytes of slot buffers allocated now          */
int       ex_slots_per_layer(const ex_tier *t);
/* The default budget in bytes for `all` bytes of routed experts: all of them when that is at
 * most half of MemAvailable (or MemAvailable is unknown), else 40% of MemAvailable. */
uint64_t ex_default_bytes(uint64_t all);

typedef struct ex_batch {
    ex_tier  *t;
    ex_layer *ly;
    k3_stats *stats;  /* may be NULL                                          */
    int       n;      /* distinct experts requested                            */
    int       n_hits; /* order[0, n_hits) are hits                             */
    int       next;   /* next index of order to return                         */
    int       issued; /* misses order[n_hits, issued) have a slot and a read    */
    int       cur;    /* slot returned by the last ex_next, -1 none            */
    uint64_t  bytes0; /* tier bytes read at begin                              */
    double    busy0;  /* tier read-busy seconds at begin                       */
} ex_batch;

k3_status ex_begin(ex_tier *t, int layer, const int *experts, int n, k3_stats *stats, ex_batch *b);
/* The next expert to compute: *e its id and *x its weights (valid until the next ex_next or
 * ex_end); *e = -1 when every expert was returned. */
k3_status ex_next(ex_batch *b, int *e, const k3_expert **x);
void      ex_end(ex_batch *b);
