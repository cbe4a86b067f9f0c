/* k3-repack.c: turn a Kimi K3 release checkpoint into a pre-quantized k3 container (repack.h),
 * so k3chat starts in seconds instead of quantizing ~60 GB of BF16 matrices at every start.
 *
 *   k3-repack SRC DST --bits 4|8 [--mla-bits N] [--head-bits N] [--shards LIST]
 *             [--verify-full] [--jobs N] [--quiet]
 *
 * DESIGN
 * - One streaming pass over the source, shard by shard: every output shard is planned from the
 *   source shard's text tensors (its header is fully known before any data), written to
 *   DST/.NAME.partial with positioned writes, fsync'ed and renamed to DST/NAME. Memory holds one
 *   chunk of rows (~64 MB of f32) or one routed expert, never a whole tensor of the model.
 * - Matrices that load.c quantizes at load (K3_BITS / K3_MLA_BITS / K3_HEAD_BITS classes) are
 *   quantized here with quant.c's own row functions (q_quantize_row_i8/i4), so the bytes equal
 *   qmat_quantize's. kv_b_proj is split per head and transposed exactly as load_mla does.
 * - Routed experts are copied byte for byte, in (layer, id) order, one contiguous read per
 *   expert when the source keeps its six tensors back to back (the release does).
 * - Inside a shard, tensors are placed by element size (8, 4, 2, then 1 byte), so the F32 scale
 *   sidecars are aligned in the file and usable from a mapping; data starts 64-byte aligned.
 * - Resume: a shard whose final file exists with exactly the planned header (which records the
 *   bits and the source shard's name, size and mtime) and size is skipped; a killed run leaves
 *   only .partial files, which the next run overwrites. A write error, SIGINT, SIGTERM or SIGHUP
 *   removes the shard's .partial file (the completed shards stay for the next run).
 * - Nothing half-done is published: a DST that holds a model k3-repack did not write (config.json
 *   without k3_container, a shard without its metadata) is refused before any work, and before
 *   the first shard of a run is written DST's index and config.json are removed, so a container
 *   rewritten in part (killed while going from 8 to 4 bits) is no model until a run completes.
 * - --shards picks source shards (1-based, "1-3,7") so disjoint runs can share the work; each
 *   run then rebuilds the index from every completed shard in DST (under a lock, temp + rename),
 *   refusing to publish one when a tensor name appears twice, or when a shard of the checkpoint
 *   there is not what this run would write (another run's bits: a container of two settings).
 * - --verify-full re-reads every expert byte of every selected shard (fresh or skipped) from
 *   DST and compares it with the source.
 * Test hook: K3_REPACK_KILL_AT=N sends SIGKILL to the process halfway through the N-th shard it
 * writes (tests/t-repack.sh uses it to check resume after kill -9 mid-shard).
 */
#include "config.h"
#include "quant.h"
#include "repack.h"
#include "st-write.h"
#include "st.h"
#include "tensors.h"
#include "tool-opt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define INDEX_FILE "model.safetensors.index.json"
#define LOCK_FILE ".k3-repack.lock"
#define CHUNK_BYTES ((size_t)64 << 20) /* f32 rows converted per step */

/* ==== options, plan, context ================================================================= */

typedef struct opts {
    const char *src, *dst;
    int         bits, mla_bits, head_bits;
    const char *shards; /* --shards LIST, NULL = every shard              */
    int         verify_full;
    int         jobs; /* OpenMP threads for quantization, 0 = default   */
    int         quiet;
} opts;

enum role { R_PASS = 0, R_MAT, R_KVB, R_EXPERT };

/* What source tensor i (st_tensor_at order) becomes. */
typedef struct tinfo {
    int role;
    int type;       /* R_MAT/R_KVB: Q_I8, Q_I4 or Q_F32               */
    int rows, cols; /* R_MAT: logical shape                            */
    int layer, exp; /* R_EXPERT: layer and expert id                   */
    int planned;    /* R_EXPERT: its expert is in a plan already       */
} tinfo;

/* One output tensor. */
typedef struct item {
    char    *name;
    st_dtype dtype;
    int      ndim;
    int64_t  shape[ST_MAX_DIMS];
    uint64_t nbytes;
    uint64_t off; /* offset in the data section (place())            */
} item;

/* One unit of work: a source entity and the items it fills. */
typedef struct job {
    int role;
    int src;        /* source tensor index (R_EXPERT: w1.weight_packed)  */
    int w, s;       /* item indices; s = -1 when there is no sidecar     */
    int ex[6];      /* R_EXPERT: source tensors in output order          */
    int it[6];      /* R_EXPERT: their items (back to back)              */
    int contiguous; /* R_EXPERT: the six are one range of one shard      */
} job;

typedef struct plan {
    item    *items;
    int      n_items, cap_items;
    job     *jobs;
    int      n_jobs, cap_jobs;
    char    *header; /* u64 length + JSON + spaces: data starts 64-aligned */
    size_t   header_len;
    uint64_t data_bytes;
    uint64_t src_bytes; /* source bytes read to write it                      */
    uint64_t exp_bytes; /* of which routed experts                            */
} plan;

typedef struct ctx {
    opts      o;
    k3_config cfg;
    st_dir   *d;
    tinfo    *ti;    /* [st_n_tensors] */
    int      *exs;   /* [n_layers][n_experts][6]: each routed expert's six tensors (table order) */
    int      *ehome; /* [n_layers][n_experts]: the shard of its first tensor in source order   */
    rp_kvb    kvb;
    uint64_t  total, done;
    double    t0, t_last;
    int       tty;
    int       kill_at, n_started;
    int       usage; /* the error is the command line's: exit 2 */
} ctx;

static volatile sig_atomic_t stop_sig; /* SIGINT, SIGTERM or SIGHUP received: stop at the next chunk */

static void on_signal(int sig) {
    stop_sig = sig;
}

/* K3_ABORTED when a stop signal came (the caller removes what it was writing). */
static k3_status check_stop(void) {
    return stop_sig ? k3_err(K3_ABORTED, "interrupted by signal %d (%s)", (int)stop_sig, strsignal(stop_sig))
                    : K3_OK;
}

static void die_oom(void) {
    fprintf(stderr, "k3-repack: out of memory\n");
    exit(1);
}

static char *xasprintf(const char *fmt, ...) K3_PRINTF(1, 2);
static char *xasprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        die_oom();
    va_end(ap);
    return s;
}

/* ==== progress (stderr: a bar on a terminal, plain lines every 10 s otherwise) ================ */

static void fmt_time(char *b, size_t n, double s) {
    if (!(s >= 0) || s > 359999)
        s = 359999;
    int t = (int)(s + 0.5);
    snprintf(b, n, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
}

static void progress(ctx *c, uint64_t add, const char *what) {
    c->done += add;
    if (c->o.quiet)
        return;
    double now = k3_time();
    if (now - c->t_last < (c->tty ? 0.2 : 10.0))
        return;
    c->t_last = now;
    double el = now - c->t0, rate = el > 0 ? (double)c->done / el : 0;
    double pct = c->total ? 100.0 * (double)c->done / (double)c->total : 100.0;
    char   left[32];
    fmt_time(left, sizeof left, rate > 0 && c->total >= c->done ? (double)(c->total - c->done) / rate : -1);
    if (c->tty) {
        char bar[31];
        int  k = (int)(pct * 30 / 100);
        for (int i = 0; i < 30; i++)
            bar[i] = i < k ? '#' : '.';
        bar[30] = 0;
        fputc('\r', stderr); /* the name (the model's text) escaped, the bar's own controls not */
        txt_term_printf(stderr, "[%s] %5.1f%% %8.1f MB/s %s left  %-40.40s", bar, pct, rate / 1e6, left,
                        what);
        fputs("\033[K", stderr);
    } else {
        txt_term_printf(stderr, "k3-repack: %5.1f%% %.1f MB/s %s left (%s)\n", pct, rate / 1e6, left, what);
    }
}

/* A plain message line (clears the bar first on a terminal). */
static void say(const ctx *c, const char *fmt, ...) K3_PRINTF(2, 3);
static void say(const ctx *c, const char *fmt, ...) {
    if (c->o.quiet)
        return;
    if (c->tty)
        fputs("\r\033[K", stderr);
    va_list ap;
    char   *m = NULL;
    va_start(ap, fmt);
    if (vasprintf(&m, fmt, ap) < 0)
        die_oom();
    va_end(ap);
    txt_term_printf(stderr, "k3-repack: %s\n", m); /* shard names come from the source's index */
    free(m);
}

/* ==== classification: the same matrix classes as load.c ===================================== */

static int tindex(const ctx *c, const st_tensor *t) {
    return (int)(t - st_tensor_at(c->d, 0));
}

/* What one tensor of the table becomes: matrices are quantized at their kind's bits (k3-repack's
 * --bits / --mla-bits / --head-bits for K3_BITS / K3_MLA_BITS / K3_HEAD_BITS, 32 = stored F32
 * for the always-f32 kinds: KDA f_a/f_b/b and the router, the engine's form, usable from a
 * mapping), kv_b is split per head, routed experts are copied; norms, vectors, conv taps and
 * embeddings pass through as stored. The same rule as load.c's load_one, from the same table. */
static k3_status classify_one(const tt_ref *r, void *ud) {
    ctx             *c    = ud;
    const st_tensor *t    = st_find(c->d, r->name);
    const int        kind = tt_table[r->id].kind;
    tinfo           *x;
    K3_ASSERT(t); /* cfg_check_tensors has checked presence and shape */
    x = &c->ti[tindex(c, t)];
    if (kind == TT_K_PACK || kind == TT_K_SCALE) {
        *x                      = (tinfo){.role = R_EXPERT, .layer = r->layer, .exp = r->expert};
        c->exs[((size_t)r->layer * c->cfg.n_experts + r->expert) * TT_EXPERT_PARTS + r->id -
               TT_EXPERT_FIRST] = tindex(c, t);
    } else if (tt_is_matrix(kind))
        *x = (tinfo){.role = kind == TT_K_KVB ? R_KVB : R_MAT,
                     .type = rp_bits_type(tt_bits(kind, c->o.bits, c->o.mla_bits, c->o.head_bits)),
                     .rows = (int)r->shape.s[0],
                     .cols = (int)r->shape.s[1]};
    return K3_OK;
}

static const st_dir *g_d; /* qsort comparators' context */
static const tinfo  *g_ti;

static int cmp_src_off(const void *a, const void *b) {
    const st_tensor *x = st_tensor_at(g_d, *(const int *)a), *y = st_tensor_at(g_d, *(const int *)b);
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Every tensor's role, and each routed expert's six tensors and home shard, found once here:
 * planning a shard then costs one pass over the table (looking the experts up by name for every
 * shard cost minutes per shard at the release's 82,432 experts). */
static void classify(ctx *c) {
    const k3_config *g = &c->cfg;
    size_t           n = (size_t)g->n_layers * (size_t)g->n_experts;
    c->kvb             = (rp_kvb){.Hm = g->n_heads, .nope = g->nope, .v = g->v_dim, .kl = g->kv_lora};
    if (!(c->exs = malloc((n ? n : 1) * TT_EXPERT_PARTS * sizeof *c->exs)) ||
        !(c->ehome = malloc((n ? n : 1) * sizeof *c->ehome)))
        die_oom();
    for (size_t i = 0; i < n * TT_EXPERT_PARTS; i++)
        c->exs[i] = -1;
    for (int l = -1; l < g->n_layers; l++)
        tt_walk(g, l, TT_WALK_EXPERTS, classify_one, c);
    g_d = c->d;
    for (size_t i = 0; i < n; i++) {
        int so[TT_EXPERT_PARTS], k;
        memcpy(so, &c->exs[i * TT_EXPERT_PARTS], sizeof so);
        for (k = 0; k < TT_EXPERT_PARTS && so[k] >= 0; k++)
            ;
        if (k < TT_EXPERT_PARTS) { /* not a routed expert of a MoE layer */
            c->ehome[i] = -1;
            continue;
        }
        qsort(so, TT_EXPERT_PARTS, sizeof *so, cmp_src_off);
        c->ehome[i] = st_tensor_at(c->d, so[0])->shard;
    }
}

/* ==== planning ================================================================================ */

static int add_item(plan *p, const char *name, st_dtype dt, int ndim, const int64_t *shape) {
    item *items = k3_grow(p->items, &p->cap_items, (size_t)p->n_items + 1, sizeof *items, 256);
    if (!items)
        die_oom();
    p->items = items;
    item *it = &p->items[p->n_items];
    memset(it, 0, sizeof *it);
    if (!(it->name = strdup(name)))
        die_oom();
    it->dtype  = dt;
    it->ndim   = ndim;
    it->nbytes = st_dtype_size(dt);
    for (int k = 0; k < ndim; k++) {
        it->shape[k] = shape[k];
        it->nbytes *= (uint64_t)shape[k];
    }
    return p->n_items++;
}

static int add_item2(plan *p, const char *name, st_dtype dt, int ndim, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    return add_item(p, name, dt, ndim, s);
}

static job *add_job(plan *p, int role, int src) {
    job *jobs = k3_grow(p->jobs, &p->cap_jobs, (size_t)p->n_jobs + 1, sizeof *jobs, 256);
    if (!jobs)
        die_oom();
    p->jobs = jobs;
    job *j  = &p->jobs[p->n_jobs++];
    memset(j, 0, sizeof *j);
    j->role = role;
    j->src  = src;
    j->s    = -1;
    return j;
}

static void plan_free(plan *p) {
    for (int i = 0; i < p->n_items; i++)
        free(p->items[i].name);
    free(p->items);
    free(p->jobs);
    free(p->header);
    memset(p, 0, sizeof *p);
}

static int cmp_expert_job(const void *a, const void *b) {
    const job   *p = a, *q = b;
    const tinfo *x = &g_ti[p->src], *y = &g_ti[q->src];
    if (x->role != y->role)
        return x->role < y->role ? -1 : 1; /* experts last */
    if (x->role != R_EXPERT)
        return p->src < q->src ? -1 : p->src > q->src;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return x->exp < y->exp ? -1 : x->exp > y->exp;
}

static void meta_set(json_t *meta, const char *key, const char *fmt, ...) K3_PRINTF(3, 4);
static void meta_set(json_t *meta, const char *key, const char *fmt, ...) {
    char    v[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    if (json_object_set_new(meta, key, json_string(v)))
        die_oom();
}

/* Place items by element size (8, 4, 2, then 1 byte; stable) and build the header with the
 * safetensors writer (st-write.h), data 64-byte aligned. */
static k3_status place(ctx *c, plan *p, int shard, json_t *meta) {
    stw_file *w;
    k3_status st  = stw_create(st_shard_name(c->d, shard), &w);
    uint64_t  off = 0;
    for (size_t es = 8; !st && es >= 1; es /= 2)
        for (int i = 0; !st && i < p->n_items; i++)
            if (st_dtype_size(p->items[i].dtype) == es) {
                item *it = &p->items[i];
                it->off  = off;
                off += it->nbytes;
                st = stw_add(w, it->name, it->dtype, it->ndim, it->shape);
            }
    p->data_bytes = off;
    if (st) {
        stw_free(w);
        return st;
    }
    meta_set(meta, "format", "pt");
    meta_set(meta, "k3.container", "%d", RP_VERSION);
    meta_set(meta, "k3.bits", "%d", c->o.bits);
    meta_set(meta, "k3.mla_bits", "%d", c->o.mla_bits);
    meta_set(meta, "k3.head_bits", "%d", c->o.head_bits);
    meta_set(meta, "k3.source_shard", "%s", st_shard_name(c->d, shard));
    meta_set(meta, "k3.source_bytes", "%llu", (unsigned long long)st_shard_size(c->d, shard));
    struct stat sb; /* a replaced source shard (new mtime) is repacked again on resume */
    meta_set(meta, "k3.source_mtime", "%lld",
             stat(st_shard_path(c->d, shard), &sb) ? 0LL : (long long)sb.st_mtime);
    const char *key;
    json_t     *v;
    json_object_foreach(meta, key, v) if (!st) st = stw_meta(w, key, json_string_value(v));
    if (!st)
        st = stw_header(w, 64, &p->header, &p->header_len);
    if (!st && stw_data_bytes(w) != p->data_bytes) /* the writer's offsets are the placement's */
        st = k3_err(K3_ERR_FORMAT, "%s: %llu data bytes planned, the header has %llu",
                    st_shard_name(c->d, shard), (unsigned long long)p->data_bytes,
                    (unsigned long long)stw_data_bytes(w));
    stw_free(w);
    return st;
}

/* The six tensors of expert (l, e) in canonical order (the table's: w1, w3, w2; packed, scale). */
static k3_status expert_tensors(ctx *c, int l, int e, int out[6]) {
    _Static_assert(TT_EXPERT_PARTS == 6, "an expert is six tensors");
    const int *ex = &c->exs[((size_t)l * c->cfg.n_experts + e) * TT_EXPERT_PARTS];
    for (int k = 0; k < 6; k++) {
        char name[256];
        if (ex[k] < 0)
            return k3_err(K3_ERR_FORMAT, "%s: tensor '%s' is missing", c->o.src,
                          tt_name(name, sizeof name, TT_EXPERT_FIRST + k, l, e));
        out[k] = ex[k];
    }
    return K3_OK;
}

/* Plan the output shard of source shard `shard`: jobs for its tensors (experts: those whose
 * first tensor in source order lives here), items in job order, then place(). */
static k3_status plan_shard(ctx *c, int shard, plan *p) {
    memset(p, 0, sizeof *p);
    k3_status st = K3_OK;
    for (int i = 0; i < st_n_tensors(c->d); i++) {
        const st_tensor *t = st_tensor_at(c->d, i);
        tinfo           *x = &c->ti[i];
        if (x->role != R_EXPERT) {
            if (t->shard == shard)
                add_job(p, x->role, i);
            continue;
        }
        int home = c->ehome[(size_t)x->layer * c->cfg.n_experts + x->exp]; /* -1: a tensor missing */
        if (x->planned || (home >= 0 && home != shard))
            continue;
        int ex[6], so[6];
        if ((st = expert_tensors(c, x->layer, x->exp, ex)))
            return st;
        memcpy(so, ex, sizeof so);
        g_d = c->d;
        qsort(so, 6, sizeof *so, cmp_src_off);
        if (st_tensor_at(c->d, so[0])->shard != shard)
            continue;
        job *j        = add_job(p, R_EXPERT, ex[0]);
        j->contiguous = 1;
        for (int k = 1; k < 6; k++) {
            const st_tensor *a = st_tensor_at(c->d, so[k - 1]), *b = st_tensor_at(c->d, so[k]);
            if (a->shard != b->shard || a->offset + a->nbytes != b->offset)
                j->contiguous = 0;
        }
        for (int k = 0; k < 6; k++) {
            j->ex[k]                = j->contiguous ? so[k] : ex[k];
            c->ti[j->ex[k]].planned = 1;
        }
    }
    g_ti = c->ti;
    qsort(p->jobs, (size_t)p->n_jobs, sizeof *p->jobs, cmp_expert_job);

    json_t *meta = json_object();
    if (!meta)
        die_oom();
    char nm[512];
    for (int jn = 0; jn < p->n_jobs; jn++) {
        job             *j = &p->jobs[jn];
        const st_tensor *t = st_tensor_at(c->d, j->src);
        const tinfo     *x = &c->ti[j->src];
        snprintf(nm, sizeof nm, "%s" RP_SIDECAR, t->name);
        switch (j->role) {
        case R_PASS:
            j->w = add_item(p, t->name, t->dtype, t->ndim, t->shape);
            p->src_bytes += t->nbytes;
            break;
        case R_EXPERT:
            for (int k = 0; k < 6; k++) {
                const st_tensor *e = st_tensor_at(c->d, j->ex[k]);
                j->it[k]           = add_item(p, e->name, e->dtype, e->ndim, e->shape);
                p->src_bytes += e->nbytes;
                p->exp_bytes += e->nbytes;
            }
            break;
        case R_KVB: {
            const rp_kvb *k  = &c->kvb;
            int64_t       hw = (int64_t)rp_kvb_head_wbytes(x->type, k),
                    hs       = (int64_t)rp_kvb_head_sfloats(x->type, k);
            if (x->type == Q_F32) {
                j->w = add_item2(p, t->name, ST_F32, 1, k->Hm * hw / 4, 0);
            } else {
                j->w = add_item2(p, t->name, ST_U8, 1, k->Hm * hw, 0);
                j->s = add_item2(p, nm, ST_F32, 1, k->Hm * hs, 0);
            }
            snprintf(nm, sizeof nm, "k3.q.%s", t->name);
            meta_set(meta, nm, "%s kv_b split heads %d nope %d v %d kv_lora %d", rp_type_name(x->type), k->Hm,
                     k->nope, k->v, k->kl);
            p->src_bytes += t->nbytes;
            break;
        }
        case R_MAT:
            if (x->type == Q_F32) {
                j->w = add_item2(p, t->name, ST_F32, 2, x->rows, x->cols);
            } else if (x->type == Q_I8) {
                j->w = add_item2(p, t->name, ST_U8, 2, x->rows, x->cols);
                j->s = add_item2(p, nm, ST_F32, 1, x->rows, 0);
            } else {
                j->w = add_item2(p, t->name, ST_U8, 2, x->rows, (x->cols + 1) / 2);
                j->s = add_item2(p, nm, ST_F32, 2, x->rows, (x->cols + Q_I4_GROUP - 1) / Q_I4_GROUP);
            }
            snprintf(nm, sizeof nm, "k3.q.%s", t->name);
            if (x->type == Q_I4)
                meta_set(meta, nm, "I4 %d %d group %d", x->rows, x->cols, Q_I4_GROUP);
            else
                meta_set(meta, nm, "%s %d %d", rp_type_name(x->type), x->rows, x->cols);
            p->src_bytes += t->nbytes;
            break;
        }
    }
    if (p->n_items)
        st = place(c, p, shard, meta);
    json_decref(meta);
    return st;
}

/* ==== writing ================================================================================= */

static k3_status pwrite_all(int fd, const char *path, const void *buf, size_t n, uint64_t off) {
    const char *b = buf;
    while (n) {
        ssize_t w = pwrite(fd, b, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return k3_err(K3_ERR_IO, "%s: write of %zu bytes at offset %llu failed: %s", path, n,
                          (unsigned long long)off, strerror(errno));
        }
        b += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return K3_OK;
}

static k3_status pread_file(int fd, const char *path, void *buf, size_t n, uint64_t off) {
    char *b = buf;
    while (n) {
        ssize_t r = pread(fd, b, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return k3_err(K3_ERR_IO, "%s: read of %zu bytes at offset %llu failed: %s", path, n,
                          (unsigned long long)off, r < 0 ? strerror(errno) : "end of file");
        b += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return K3_OK;
}

/* n source elements of dtype dt (little-endian) to f32, as st_read_f32 converts them. */
static void to_f32(const unsigned char *raw, st_dtype dt, size_t n, float *out) {
    for (size_t i = 0; i < n; i++) {
        if (dt == ST_F32)
            memcpy(&out[i], raw + 4 * i, 4);
        else if (dt == ST_F64) {
            double v;
            memcpy(&v, raw + 8 * i, 8);
            out[i] = (float)v;
        } else {
            uint16_t h = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
            out[i]     = dt == ST_BF16 ? k3_bf16_to_f32(h) : k3_f16_to_f32(h);
        }
    }
}

/* Rows [r0, r0+n) of float tensor t (cols wide) as f32, checked finite. */
static k3_status read_rows(ctx *c, const st_tensor *t, int cols, int64_t r0, int64_t n, unsigned char *raw,
                           float *f) {
    size_t    es = st_dtype_size(t->dtype), cnt = (size_t)n * (size_t)cols;
    k3_status st = st_read_at(c->d, t->shard, raw, cnt * es, t->offset + (uint64_t)r0 * (uint64_t)cols * es);
    if (st) {
        k3_err_prefix("tensor '%s'", t->name);
        return st;
    }
    to_f32(raw, t->dtype, cnt, f);
    for (size_t i = 0; i < cnt; i++)
        if (!isfinite(f[i]))
            return k3_err(K3_ERR_NUMERIC, "%s: tensor '%s': %s at row %lld column %zu",
                          st_shard_name(c->d, t->shard), t->name, isnan(f[i]) ? "NaN" : "inf",
                          (long long)(r0 + (int64_t)(i / (size_t)cols)), i % (size_t)cols);
    return K3_OK;
}

/* Quantize n rows of f (cols wide) into w (n * wrow bytes) and s (n * srow bytes) with
 * quant.c's row functions: the bytes qmat_quantize makes for the same rows. */
static void quant_rows(int type, const float *f, int64_t n, int cols, unsigned char *w, unsigned char *s) {
    const size_t wrow = q_wbytes(type, 1, cols), srow = q_sbytes(type, 1, cols);
#pragma omp parallel for schedule(static) if (n * cols > (1 << 16))
    for (int64_t r = 0; r < n; r++) {
        const float *x = f + (size_t)r * (size_t)cols;
        if (type == Q_I8)
            q_quantize_row_i8(x, cols, (int8_t *)(w + (size_t)r * wrow), (float *)(s + (size_t)r * srow));
        else
            q_quantize_row_i4(x, cols, w + (size_t)r * wrow, (float *)(s + (size_t)r * srow));
    }
}

typedef struct wctx {
    int         fd;
    const char *path;
    uint64_t    base; /* header length: data section start */
} wctx;

/* Whether [off, off + n) of fd is a hole (SEEK_DATA finds no data before its end). */
static int src_hole(int fd, uint64_t off, uint64_t n) {
    off_t d = lseek(fd, (off_t)off, SEEK_DATA);
    return (d < 0 && errno == ENXIO) || (d >= 0 && (uint64_t)d >= off + n);
}

static int all_zero(const unsigned char *b, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

/* A hole of a sparse source (k3-mkmodel's release replica) is neither read nor written: the
 * output file was sized at creation, so it reads back as the same zeros. */
static k3_status do_pass(ctx *c, const wctx *o, const plan *p, const job *j, unsigned char *buf) {
    const st_tensor *t  = st_tensor_at(c->d, j->src);
    const item      *it = &p->items[j->w];
    k3_status        st = K3_OK;
    for (uint64_t k = 0; k < t->nbytes && !st && !(st = check_stop()); k += CHUNK_BYTES) {
        size_t n = (size_t)(t->nbytes - k < CHUNK_BYTES ? t->nbytes - k : CHUNK_BYTES);
        if (!src_hole(st_shard_fd(c->d, t->shard), t->offset + k, n)) {
            if ((st = st_read_at(c->d, t->shard, buf, n, t->offset + k)))
                break;
            st = pwrite_all(o->fd, o->path, buf, n, o->base + it->off + k);
        }
        progress(c, n, t->name);
    }
    return st;
}

static k3_status do_mat(ctx *c, const wctx *o, const plan *p, const job *j) {
    const st_tensor *t    = st_tensor_at(c->d, j->src);
    const tinfo     *x    = &c->ti[j->src];
    const int        cols = x->cols, type = x->type;
    const size_t     es   = st_dtype_size(t->dtype);
    int64_t          step = (int64_t)(CHUNK_BYTES / ((size_t)cols * 4));
    if (step < 1)
        step = 1;
    if (step > x->rows)
        step = x->rows;
    const size_t   wrow = q_wbytes(type, 1, cols), srow = q_sbytes(type, 1, cols);
    unsigned char *raw = malloc((size_t)step * cols * es), *w = malloc((size_t)step * wrow),
                  *s = srow ? malloc((size_t)step * srow) : NULL;
    float    *f      = malloc((size_t)step * cols * sizeof(float));
    k3_status st     = K3_OK;
    if (!raw || !w || !f || (srow && !s))
        die_oom();
    int zero_rows = -1; /* rows of w and s hold the quantized zero row: as many as last filled */
    for (int64_t r0 = 0; r0 < x->rows && !st && !(st = check_stop()); r0 += step) {
        int64_t n = x->rows - r0 < step ? x->rows - r0 : step;
        if (src_hole(st_shard_fd(c->d, t->shard), t->offset + (uint64_t)r0 * cols * es,
                     (uint64_t)n * cols * es)) {
            /* zero rows quantize to fixed bytes (rows are quantized one by one): one row made
             * once, copied to as many rows as needed, and not written at all when its bytes are
             * zeros (64 MB of zeros quantized for every matrix was most of the CPU time) */
            if (zero_rows < 1) {
                memset(f, 0, (size_t)cols * sizeof(float));
                if (type != Q_F32)
                    quant_rows(type, f, 1, cols, w, s);
                zero_rows = 1;
            }
            int nz = type == Q_F32 || (all_zero(w, wrow) && (!srow || all_zero(s, srow)));
            for (; !nz && zero_rows < n; zero_rows++) {
                memcpy(w + (size_t)zero_rows * wrow, w, wrow);
                if (srow)
                    memcpy(s + (size_t)zero_rows * srow, s, srow);
            }
            if (!nz && !(st = pwrite_all(o->fd, o->path, w, (size_t)n * wrow,
                                         o->base + p->items[j->w].off + (uint64_t)r0 * wrow)))
                st = pwrite_all(o->fd, o->path, s, (size_t)n * srow,
                                o->base + p->items[j->s].off + (uint64_t)r0 * srow);
            progress(c, (uint64_t)n * cols * es, t->name);
            continue;
        }
        zero_rows = -1;
        if ((st = read_rows(c, t, cols, r0, n, raw, f)))
            break;
        if (type == Q_F32) {
            st = pwrite_all(o->fd, o->path, f, (size_t)n * wrow,
                            o->base + p->items[j->w].off + (uint64_t)r0 * wrow);
        } else {
            quant_rows(type, f, n, cols, w, s);
            if (!(st = pwrite_all(o->fd, o->path, w, (size_t)n * wrow,
                                  o->base + p->items[j->w].off + (uint64_t)r0 * wrow)))
                st = pwrite_all(o->fd, o->path, s, (size_t)n * srow,
                                o->base + p->items[j->s].off + (uint64_t)r0 * srow);
        }
        progress(c, (uint64_t)n * cols * es, t->name);
    }
    free(raw);
    free(w);
    free(s);
    free(f);
    return st;
}

/* kv_b: per head, uk_t = (nope rows)^T and uv = v rows, each quantized by rows (as load_mla). */
static k3_status do_kvb(ctx *c, const wctx *o, const plan *p, const job *j) {
    const st_tensor *t    = st_tensor_at(c->d, j->src);
    const tinfo     *x    = &c->ti[j->src];
    const rp_kvb    *k    = &c->kvb;
    const int        type = x->type, kl = k->kl, nope = k->nope, vd = k->v, hr = nope + vd;
    const size_t     es = st_dtype_size(t->dtype), hw = rp_kvb_head_wbytes(type, k),
                 hs   = rp_kvb_head_sfloats(type, k) * sizeof(float);
    const size_t   wk = q_wbytes(type, kl, nope), sk = q_sbytes(type, kl, nope);
    unsigned char *raw = malloc((size_t)hr * kl * es), *w = malloc(hw), *s = malloc(hs ? hs : 1);
    float    *f = malloc((size_t)hr * kl * sizeof(float)), *kt = malloc((size_t)kl * nope * sizeof(float));
    k3_status st = K3_OK;
    if (!raw || !w || !s || !f || !kt)
        die_oom();
    for (int h = 0; h < k->Hm && !st && !(st = check_stop()); h++) {
        if ((st = read_rows(c, t, kl, (int64_t)h * hr, hr, raw, f)))
            break;
        for (int i = 0; i < kl; i++)
            for (int n = 0; n < nope; n++)
                kt[(size_t)i * nope + n] = f[(size_t)n * kl + i];
        const float *vv = f + (size_t)nope * kl;
        if (type == Q_F32) {
            memcpy(w, kt, wk);
            memcpy(w + wk, vv, hw - wk);
        } else {
            quant_rows(type, kt, kl, nope, w, s);
            quant_rows(type, vv, vd, kl, w + wk, s + sk);
            st = pwrite_all(o->fd, o->path, s, hs, o->base + p->items[j->s].off + (uint64_t)h * hs);
        }
        if (!st)
            st = pwrite_all(o->fd, o->path, w, hw, o->base + p->items[j->w].off + (uint64_t)h * hw);
        progress(c, (uint64_t)hr * kl * es, t->name);
    }
    free(raw);
    free(w);
    free(s);
    free(f);
    free(kt);
    return st;
}

/* The six source tensors of an expert job into buf, back to back in output order. */
static k3_status read_expert(ctx *c, const job *j, unsigned char *buf, uint64_t *n) {
    const st_tensor *a = st_tensor_at(c->d, j->ex[0]);
    *n                 = 0;
    if (j->contiguous) {
        const st_tensor *z = st_tensor_at(c->d, j->ex[5]);
        *n                 = z->offset + z->nbytes - a->offset;
        return st_read_at(c->d, a->shard, buf, *n, a->offset); /* one read per expert */
    }
    for (int k = 0; k < 6; k++) {
        const st_tensor *t  = st_tensor_at(c->d, j->ex[k]);
        k3_status        st = st_read(c->d, t, buf + *n);
        if (st)
            return st;
        *n += t->nbytes;
    }
    return K3_OK;
}

static uint64_t expert_bytes(const ctx *c, const job *j) {
    uint64_t n = 0;
    for (int k = 0; k < 6; k++)
        n += st_tensor_at(c->d, j->ex[k])->nbytes;
    return n;
}

/* An expert that is all zeros (a hole of a sparse source, e.g. k3-mkmodel's release replica) is
 * not written: the output file was sized at creation, so it reads back as the same zeros, and a
 * sparse source stays sparse (the 1.45 TB of replica experts take no disk). */
static k3_status do_expert(ctx *c, const wctx *o, const plan *p, const job *j, unsigned char *buf) {
    const st_tensor *a  = st_tensor_at(c->d, j->ex[0]);
    uint64_t         n  = expert_bytes(c, j);
    k3_status        st = K3_OK;
    K3_ASSERT(p->items[j->it[5]].off + p->items[j->it[5]].nbytes - p->items[j->it[0]].off == n);
    if (!(j->contiguous && src_hole(st_shard_fd(c->d, a->shard), a->offset, n))) {
        if ((st = read_expert(c, j, buf, &n)))
            return st;
        if (!all_zero(buf, n))
            st = pwrite_all(o->fd, o->path, buf, (size_t)n, o->base + p->items[j->it[0]].off);
    }
    progress(c, n, st_tensor_at(c->d, j->src)->name);
    return st;
}

static uint64_t max_expert_bytes(const ctx *c, const plan *p) {
    uint64_t m = 0;
    for (int jn = 0; jn < p->n_jobs; jn++)
        if (p->jobs[jn].role == R_EXPERT && expert_bytes(c, &p->jobs[jn]) > m)
            m = expert_bytes(c, &p->jobs[jn]);
    return m;
}

/* --verify-full: every expert byte of the output file at path equals the source. */
static k3_status verify_experts(ctx *c, const plan *p, const char *path) {
    uint64_t       mx = max_expert_bytes(c, p);
    unsigned char *a = malloc(mx ? mx : 1), *b = malloc(mx ? mx : 1);
    k3_status      st = K3_OK;
    int            fd = open(path, O_RDONLY | O_CLOEXEC);
    if (!a || !b)
        die_oom();
    if (fd < 0)
        st = k3_err(K3_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    for (int jn = 0; jn < p->n_jobs && !st && !(st = check_stop()); jn++) {
        const job *j = &p->jobs[jn];
        if (j->role != R_EXPERT)
            continue;
        uint64_t n;
        if ((st = read_expert(c, j, a, &n)) ||
            (st = pread_file(fd, path, b, (size_t)n, p->header_len + p->items[j->it[0]].off)))
            break;
        if (memcmp(a, b, (size_t)n)) {
            uint64_t i = 0;
            while (a[i] == b[i])
                i++;
            int k = 0;
            while (k < 5 && p->items[j->it[k + 1]].off - p->items[j->it[0]].off <= i)
                k++;
            st = k3_err(K3_ERR_FORMAT,
                        "%s: --verify-full: tensor '%s' (expert %d of layer %d) byte %llu is 0x%02x, the "
                        "source has 0x%02x (file offset %llu)",
                        path, p->items[j->it[k]].name, c->ti[j->src].exp, c->ti[j->src].layer,
                        (unsigned long long)(i - (p->items[j->it[k]].off - p->items[j->it[0]].off)), b[i],
                        a[i], (unsigned long long)(p->header_len + p->items[j->it[0]].off + i));
            break;
        }
        progress(c, n, "verify");
    }
    if (fd >= 0)
        close(fd);
    free(a);
    free(b);
    return st;
}

static k3_status fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return k3_err(K3_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    int r = fsync(fd);
    close(fd);
    return r ? k3_err(K3_ERR_IO, "%s: fsync failed: %s", dir, strerror(errno)) : K3_OK;
}

/* Write plan p to tmp (every job), fsync. On failure tmp is removed: a resumed run starts the
 * shard afresh, and a full disk gets its space back. */
static k3_status write_shard(ctx *c, const plan *p, const char *tmp) {
    wctx o = {.path = tmp, .base = p->header_len};
    o.fd   = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o.fd < 0)
        return k3_err(K3_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    uint64_t       mx  = max_expert_bytes(c, p);
    unsigned char *buf = malloc(mx > CHUNK_BYTES ? mx : CHUNK_BYTES);
    if (!buf)
        die_oom();
    c->n_started++;
    k3_status st = pwrite_all(o.fd, tmp, p->header, p->header_len, 0);
    if (!st && ftruncate(o.fd, (off_t)(p->header_len + p->data_bytes))) /* all-zero experts are skipped */
        st = k3_err(K3_ERR_IO, "%s: cannot size to %llu bytes: %s", tmp,
                    (unsigned long long)(p->header_len + p->data_bytes), strerror(errno));
    for (int jn = 0; jn < p->n_jobs && !st && !(st = check_stop()); jn++) {
        const job *j = &p->jobs[jn];
        if (c->kill_at == c->n_started && jn == p->n_jobs / 2) {
            fsync(o.fd); /* make the partial file real, then die as kill -9 would */
            kill(getpid(), SIGKILL);
        }
        switch (j->role) {
        case R_PASS:
            st = do_pass(c, &o, p, j, buf);
            break;
        case R_MAT:
            st = do_mat(c, &o, p, j);
            break;
        case R_KVB:
            st = do_kvb(c, &o, p, j);
            break;
        case R_EXPERT:
            st = do_expert(c, &o, p, j, buf);
            break;
        }
    }
    free(buf);
    struct stat sb;
    if (!st && (fstat(o.fd, &sb) || (uint64_t)sb.st_size != p->header_len + p->data_bytes))
        st = k3_err(K3_ERR_IO, "%s: %llu bytes written, expected %llu", tmp, (unsigned long long)sb.st_size,
                    (unsigned long long)(p->header_len + p->data_bytes));
    if (!st && fsync(o.fd))
        st = k3_err(K3_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (close(o.fd) && !st)
        st = k3_err(K3_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
    if (st) {
        unlink(tmp);
        if (st == K3_ABORTED)
            k3_err(st,
                   "%s: interrupted by signal %d (%s): this partial shard removed, the completed ones kept "
                   "(run again to resume)",
                   tmp, (int)stop_sig, strsignal(stop_sig));
    }
    return st;
}

/* A completed output shard: exactly the planned header and size. */
static int shard_complete(const plan *p, const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat sb;
    int         ok = !fstat(fd, &sb) && (uint64_t)sb.st_size == p->header_len + p->data_bytes;
    char       *h  = ok ? malloc(p->header_len) : NULL;
    ok =
        ok && h && pread_file(fd, path, h, p->header_len, 0) == K3_OK && !memcmp(h, p->header, p->header_len);
    free(h);
    close(fd);
    return ok;
}

/* ==== index, config and the small files ======================================================= */

static int is_shard_name(const char *n) {
    size_t l = strlen(n);
    return n[0] != '.' && l > 12 && !strcmp(n + l - 12, ".safetensors");
}

/* Header of a completed output shard as JSON (new reference), checked to be ours. */
static k3_status read_out_header(const char *path, const char *file, json_t **out) {
    *out   = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return k3_err(K3_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char lb[8];
    char         *h  = NULL;
    k3_status     st = pread_file(fd, path, lb, 8, 0);
    uint64_t      hl = 0;
    for (int i = 7; i >= 0 && !st; i--)
        hl = hl << 8 | lb[i];
    if (!st && hl > (1u << 30))
        st = k3_err(K3_ERR_FORMAT, "%s: header length %llu is implausible", file, (unsigned long long)hl);
    if (!st && !(h = malloc(hl)))
        die_oom();
    if (!st)
        st = pread_file(fd, path, h, hl, 8);
    close(fd);
    if (st) {
        free(h);
        return st;
    }
    json_error_t e;
    json_t      *root = json_loadb(h, hl, JSON_REJECT_DUPLICATES, &e);
    free(h);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return k3_err(K3_ERR_FORMAT, "%s: header JSON malformed: %s", file, root ? "not an object" : e.text);
    }
    json_t *meta = json_object_get(root, "__metadata__");
    if (!json_is_object(meta) || !json_is_string(json_object_get(meta, "k3.container"))) {
        json_decref(root);
        return k3_err(
            K3_ERR_FORMAT,
            "%s: not written by k3-repack (no __metadata__ k3.container); remove it from the destination",
            file);
    }
    *out = root;
    return K3_OK;
}

/* Write bytes to dir/name through a temp file + fsync + rename. */
static k3_status put_file(const char *dir, const char *name, const void *data, size_t n) {
    char *tmp = xasprintf("%s/.%s.%d.tmp", dir, name, (int)getpid()), *fin = xasprintf("%s/%s", dir, name);
    k3_status st = K3_OK;
    int       fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        st = k3_err(K3_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    else {
        st = pwrite_all(fd, tmp, data, n, 0);
        if (!st && fsync(fd))
            st = k3_err(K3_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
        if (close(fd) && !st)
            st = k3_err(K3_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
        if (!st && rename(tmp, fin))
            st = k3_err(K3_ERR_IO, "%s: rename failed: %s", fin, strerror(errno));
        if (st)
            unlink(tmp);
    }
    free(tmp);
    free(fin);
    return st;
}

/* dir/f when it is put_file's temp file (.NAME.PID.tmp) of a run that is gone (killed with
 * SIGKILL between the create and the rename): removed, as nothing else ever will. A run that
 * still lives (another --shards run in the same DST) keeps its own. */
static void drop_stale_tmp(const char *dir, const char *f) {
    size_t l = strlen(f);
    if (f[0] != '.' || l < 6 || strcmp(f + l - 4, ".tmp"))
        return;
    size_t d = l - 4; /* the PID's digits end here */
    while (d > 1 && f[d - 1] >= '0' && f[d - 1] <= '9')
        d--;
    if (d == l - 4 || d < 3 || f[d - 1] != '.' || l - 4 - d > 9)
        return;
    long pid = strtol(f + d, NULL, 10);
    if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
        return;
    char *path = xasprintf("%s/%s", dir, f);
    unlink(path);
    free(path);
}

/* DST's lock (LOCK_FILE, flock'ed exclusive; close to release) held by runs sharing DST while they
 * publish or remove the index: the descriptor, or -1 with the error recorded. */
static int lock_dst(const char *dst) {
    char *path = xasprintf("%s/" LOCK_FILE, dst);
    int   fd   = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || flock(fd, LOCK_EX)) {
        k3_err(K3_ERR_IO, "%s: cannot lock: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    free(path);
    return fd;
}

/* Rebuild DST's index from every completed shard there, under a lock, atomically. A tensor in
 * two shards aborts (no index is published). *n_out: shards indexed. */
static k3_status rebuild_index(const ctx *c, int *n_out) {
    const char     *dst = c->o.dst;
    k3_status       st  = K3_OK;
    json_t         *wm = json_object(), *idx = json_object(), *md = json_object();
    struct dirent **ents = NULL;
    int             n = -1, lfd = lock_dst(dst);
    uint64_t        total = 0;
    *n_out                = 0;
    if (!wm || !idx || !md)
        die_oom();
    if (lfd < 0) {
        st = K3_ERR_IO;
        goto out;
    }
    if ((n = scandir(dst, &ents, NULL, alphasort)) < 0) {
        st = k3_err(K3_ERR_IO, "%s: cannot list: %s", dst, strerror(errno));
        goto out;
    }
    for (int i = 0; i < n && !st; i++) {
        const char *f = ents[i]->d_name;
        drop_stale_tmp(dst, f);
        if (!is_shard_name(f))
            continue;
        char   *path = xasprintf("%s/%s", dst, f);
        json_t *h;
        st = read_out_header(path, f, &h);
        free(path);
        if (st)
            break;
        const char *key;
        json_t     *v;
        json_object_foreach(h, key, v) {
            if (!strcmp(key, "__metadata__"))
                continue;
            json_t *prev = json_object_get(wm, key);
            if (prev) {
                st = k3_err(K3_ERR_FORMAT,
                            "%s: tensor '%s' is also in %s: duplicate tensor names, no index written", f, key,
                            json_string_value(prev));
                break;
            }
            json_t *o = json_object_get(v, "data_offsets");
            total += (uint64_t)(json_integer_value(json_array_get(o, 1)) -
                                json_integer_value(json_array_get(o, 0)));
            json_object_set_new(wm, key, json_string(f));
        }
        json_decref(h);
        ++*n_out;
    }
    if (st)
        goto out;
    json_object_set_new(md, "total_size", json_integer((json_int_t)total));
    json_object_set(idx, "metadata", md);
    json_object_set(idx, "weight_map", wm);
    char *js = json_dumps(idx, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!js)
        die_oom();
    if (!(st = put_file(dst, INDEX_FILE, js, strlen(js)))) /* temp + fsync + rename: a write error says why */
        st = fsync_dir(dst);
    free(js);
out:
    for (int i = 0; i < n; i++)
        free(ents[i]);
    free(ents);
    if (lfd >= 0)
        close(lfd);
    json_decref(wm);
    json_decref(idx);
    json_decref(md);
    return st;
}

/* config.json with the k3_container section; the tokenizer, generation and other small files
 * copied as they are. Weights, the index and hidden files are not copied. */
static k3_status write_small_files(const ctx *c) {
    char        *cp = xasprintf("%s/config.json", c->o.src);
    json_error_t e;
    json_t      *cfg = json_load_file(cp, JSON_REJECT_DUPLICATES, &e);
    free(cp);
    if (!cfg)
        return k3_err(K3_ERR_CONFIG, "config.json: %s", e.text);
    json_t *sec = json_pack(
        "{s:i, s:i, s:i, s:i, s:i, s:s}", "version", RP_VERSION, "bits", c->o.bits, "mla_bits", c->o.mla_bits,
        "head_bits", c->o.head_bits, "i4_group", Q_I4_GROUP, "layout",
        "repack.h: I8 NAME U8 [r,c] + NAME.qs F32 [r]; I4 NAME U8 [r,(c+1)/2] + NAME.qs F32 [r,(c+63)/64]");
    if (!sec || json_object_set_new(cfg, RP_CONFIG_KEY, sec))
        die_oom();
    char *js = json_dumps(cfg, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(cfg);
    if (!js)
        die_oom();
    k3_status st = put_file(c->o.dst, "config.json", js, strlen(js));
    free(js);
    DIR *d = st ? NULL : opendir(c->o.src);
    if (!st && !d)
        st = k3_err(K3_ERR_IO, "%s: cannot list: %s", c->o.src, strerror(errno));
    for (struct dirent *de; !st && d && (de = readdir(d));) {
        const char *f = de->d_name;
        size_t      l = strlen(f);
        if (f[0] == '.' || !strcmp(f, "config.json") || !strcmp(f, INDEX_FILE) ||
            (l > 12 && !strcmp(f + l - 12, ".safetensors")))
            continue;
        char       *path = xasprintf("%s/%s", c->o.src, f);
        struct stat sb;
        if (!stat(path, &sb) && S_ISREG(sb.st_mode) && sb.st_size < (256 << 20)) {
            char *buf = malloc((size_t)sb.st_size + 1);
            int   fd  = open(path, O_RDONLY | O_CLOEXEC);
            if (!buf)
                die_oom();
            if (fd < 0)
                st = k3_err(K3_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
            else {
                st = pread_file(fd, path, buf, (size_t)sb.st_size, 0);
                close(fd);
            }
            if (!st)
                st = put_file(c->o.dst, f, buf, (size_t)sb.st_size);
            free(buf);
        }
        free(path);
    }
    if (d)
        closedir(d);
    return st;
}

/* ==== what DST holds ========================================================================== */

/* A DST that holds a model k3-repack did not write is refused before any work: its shards would
 * be replaced one by one (the same names) or left beside ours. config.json must have the
 * k3_container section and every *.safetensors file our metadata, when there. */
static k3_status dst_check(const ctx *c) {
    const char *dst = c->o.dst;
    char       *cp  = xasprintf("%s/config.json", dst);
    k3_status   st  = K3_OK;
    if (access(cp, F_OK) == 0) {
        rp_info info;
        if ((st = rp_info_load(dst, &info)))
            k3_err_prefix("%s", dst);
        else if (!info.present)
            st = k3_err(K3_ERR_ARG,
                        "%s holds a model that k3-repack did not write (config.json has no " RP_CONFIG_KEY
                        "): write the container to an empty directory",
                        dst);
    }
    free(cp);
    struct dirent **ents = NULL;
    int             n    = st ? 0 : scandir(dst, &ents, NULL, alphasort);
    if (n < 0)
        st = k3_err(K3_ERR_IO, "%s: cannot list: %s", dst, strerror(errno));
    for (int i = 0; i < n; i++) {
        if (!st && is_shard_name(ents[i]->d_name)) {
            char   *path = xasprintf("%s/%s", dst, ents[i]->d_name);
            json_t *h;
            if (!(st = read_out_header(path, ents[i]->d_name, &h)))
                json_decref(h);
            else
                k3_err_prefix("%s", dst);
            free(path);
        }
        free(ents[i]);
    }
    free(ents);
    return st;
}

/* Before the first shard of a run is written: DST's index and config.json go, so that until
 * a run completes (and writes them anew) DST is no model a load would take as complete. */
static k3_status unpublish(const ctx *c) {
    const char *names[] = {INDEX_FILE, "config.json"};
    int         lfd     = lock_dst(c->o.dst); /* not between another run's checks and its rename */
    k3_status   st      = lfd < 0 ? K3_ERR_IO : K3_OK;
    for (int i = 0; i < 2 && !st; i++) {
        char *p = xasprintf("%s/%s", c->o.dst, names[i]);
        if (access(p, F_OK) == 0 && unlink(p) && errno != ENOENT)
            st = k3_err(K3_ERR_IO, "%s: cannot remove: %s", p, strerror(errno));
        free(p);
    }
    if (!st)
        st = fsync_dir(c->o.dst);
    if (lfd >= 0)
        close(lfd);
    return st;
}

/* ==== command line ============================================================================ */

static void usage(FILE *f) {
    fprintf(f, "usage: k3-repack SRC DST --bits 4|8 [--mla-bits N] [--head-bits N]\n"
               "                 [--shards LIST] [--verify-full] [--jobs N] [--quiet]\n"
               "Writes a pre-quantized k3 container of the release checkpoint SRC into DST:\n"
               "the matrices k3chat quantizes at load (K3_BITS classes) stored quantized\n"
               "(bit-identical), routed experts copied byte for byte in id order, vision\n"
               "tensors dropped. Interrupted runs resume per shard.\n"
               "  --bits N        4 or 8: KDA, dense, shared-expert and latent matrices\n"
               "                  (K3_BITS)\n"
               "  --mla-bits N    4, 8 or 32 (F32): MLA matrices (K3_MLA_BITS; default --bits)\n"
               "  --head-bits N   4, 8 or 32 (F32): lm_head (K3_HEAD_BITS; default --bits)\n"
               "  --shards LIST   only these source shards (1-based, e.g. 1-3,7); the index is\n"
               "                  rebuilt from every completed shard in DST\n"
               "  --verify-full   re-read every expert byte written (or already there) and\n"
               "                  compare it with the source\n"
               "  --jobs N        quantization threads, 0..4096 as K3_THREADS (default 0:\n"
               "                  OpenMP's)\n"
               "  --quiet         no progress output\n"
               "  -h, --help      this text\n");
}

/* Option opt's value v, read by the settings row id (k3-settings.h: the one range, as the engine
 * reads K3_MLA_BITS, K3_THREADS); with no32, 32 is refused too (--bits: the K3_BITS classes are
 * stored quantized). Exits 2 naming the option and what it expects. */
static int parse_row(const char *opt, enum k3_setting_id id, const char *v, int no32) {
    double x;
    char   err[256], want[128];
    if (k3_setting_parse(id, K3_SRC_ENV, v, &x, err, sizeof err) || (no32 && x == 32)) {
        txt_term_printf(stderr, "k3-repack: %s '%s': expected %s\n", opt, v,
                        no32 ? "4 or 8" : k3_setting_expect(id, K3_SRC_ENV, want, sizeof want));
        exit(2);
    }
    return (int)x;
}

/* A shard number of a --shards list: digits only (no sign, space or hex), 1..INT_MAX. */
static long shard_num(const char **p) {
    long v = 0;
    if (**p < '0' || **p > '9')
        return -1;
    for (; **p >= '0' && **p <= '9'; ++*p)
        if ((v = v * 10 + (**p - '0')) > INT_MAX)
            return -1;
    return v;
}

/* "1-3,7": ranges a-b (a <= b) and numbers, comma-separated, from 1. *max: the largest number;
 * with sel, sel[i - 1] = 1 for each (every number at most *max, which the caller checked).
 * -1 when the list is malformed. */
static int parse_shards(const char *list, unsigned char *sel, long *max) {
    const char *p = list;
    *max          = 0;
    do {
        long a = shard_num(&p), b = a;
        if (*p == '-') {
            p++;
            b = shard_num(&p);
        }
        if (a < 1 || b < a || (*p && *p != ','))
            return -1;
        if (b > *max)
            *max = b;
        for (long i = a; sel && i <= b; i++)
            sel[i - 1] = 1;
    } while (*p++ == ',');
    return 0;
}

static k3_status run(ctx *c) {
    k3_status st;
    rp_info   src_info;
    if ((st = cfg_load(c->o.src, &c->cfg)) || (st = rp_info_load(c->o.src, &src_info)))
        return st;
    if (src_info.present)
        return k3_err(K3_ERR_ARG,
                      "%s is already a k3 container (config.json has " RP_CONFIG_KEY
                      "); repack the release checkpoint",
                      c->o.src);
    if ((st = st_open(c->o.src, &c->d)))
        return st;
    int  ns = st_n_shards(c->d);
    long mx = 0;
    if (c->o.shards && (parse_shards(c->o.shards, NULL, &mx) || mx > ns)) { /* main checked the form */
        c->usage = 1;
        return k3_err(K3_ERR_ARG, "--shards '%s': shard %ld is past the last: %s has shards 1..%d",
                      c->o.shards, mx, c->o.src, ns);
    }
    /* the tokenizer is copied, not read: one k3chat would refuse (a bad line of tiktoken.model, no
     * tokenizer_config.json) is refused here, before the shards are written and the index published */
    k3_tok *tok = NULL;
    if ((st = cfg_check_tensors(&c->cfg, c->d)) || (st = k3_tok_load_model(c->o.src, c->cfg.vocab, &tok)))
        return st;
    k3_tok_free(tok);
    if (!(c->ti = calloc((size_t)st_n_tensors(c->d) + 1, sizeof *c->ti)))
        die_oom();
    classify(c);

    unsigned char *sel = calloc((size_t)ns, 1);
    plan          *pl  = calloc((size_t)ns, sizeof *pl);
    if (!sel || !pl)
        die_oom();
    if (!c->o.shards)
        memset(sel, 1, (size_t)ns);
    else
        parse_shards(c->o.shards, sel, &mx);
    struct stat sb;
    if (mkdir(c->o.dst, 0755) && errno != EEXIST)
        st = k3_err(K3_ERR_IO, "%s: cannot create: %s", c->o.dst, strerror(errno));
    else if (stat(c->o.dst, &sb) || !S_ISDIR(sb.st_mode))
        st = k3_err(K3_ERR_IO, "%s: not a directory", c->o.dst);
    else {
        struct stat sa;
        if (!stat(c->o.src, &sa) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino)
            st = k3_err(K3_ERR_ARG, "DST is SRC (%s): write the container to another directory", c->o.dst);
    }
    if (!st)
        st = dst_check(c);
    int n_out = 0, n_done = 0, n_skip = 0, unpublished = 0;
    for (int s = 0; s < ns && !st; s++) {
        if (!st_shard_opened(c->d, s))
            continue;
        if ((st = plan_shard(c, s, &pl[s])))
            break;
        if (!pl[s].n_items)
            continue;
        n_out++;
        if (sel[s])
            c->total += pl[s].src_bytes + (c->o.verify_full ? pl[s].exp_bytes : 0);
    }
    c->t0 = c->t_last = k3_time();
    int writing       = !st; /* from here an I/O error (a full disk) leaves a run that a rerun resumes */
    for (int s = 0; s < ns && !st && !(st = check_stop()); s++) {
        if (!sel[s] || !pl[s].n_items)
            continue;
        const char *name = st_shard_name(c->d, s);
        char *fin = xasprintf("%s/%s", c->o.dst, name), *tmp = xasprintf("%s/.%s.partial", c->o.dst, name);
        if (shard_complete(&pl[s], fin)) {
            n_skip++;
            c->done += pl[s].src_bytes;
            say(c, "shard %d/%d %s: complete, skipped", s + 1, ns, name);
            if (c->o.verify_full)
                st = verify_experts(c, &pl[s], fin);
        } else {
            if (!unpublished && !(st = unpublish(c)))
                unpublished = 1;
            if (!st && !(st = write_shard(c, &pl[s], tmp)) && c->o.verify_full &&
                (st = verify_experts(c, &pl[s], tmp)))
                unlink(tmp);
            if (!st && rename(tmp, fin))
                st = k3_err(K3_ERR_IO, "%s: rename failed: %s", fin, strerror(errno));
            if (!st)
                st = fsync_dir(c->o.dst);
            if (!st) {
                n_done++;
                say(c, "shard %d/%d %s: written (%.1f MB from %.1f MB)", s + 1, ns, name,
                    (double)(pl[s].header_len + pl[s].data_bytes) / 1e6, (double)pl[s].src_bytes / 1e6);
            }
        }
        free(fin);
        free(tmp);
    }
    /* a shard of this checkpoint in DST that this run's plan does not match (written at other bits,
     * or from a source shard since replaced: another run's, left by a --shards run) would be
     * published beside this run's ones, a container of two settings: no index then */
    for (int s = 0; s < ns && !st; s++) {
        char *fin = pl[s].n_items ? xasprintf("%s/%s", c->o.dst, st_shard_name(c->d, s)) : NULL;
        if (fin && access(fin, F_OK) == 0 && !shard_complete(&pl[s], fin))
            st = k3_err(
                K3_ERR_ARG,
                "%s: written by another run (other bits or options, or a source shard since replaced): "
                "repack it with this run's options (--shards %d) or remove it; no index written",
                fin, s + 1);
        free(fin);
    }
    int n_idx = 0;
    if (!st)
        st = write_small_files(c);
    if (!st)
        st = rebuild_index(c, &n_idx);
    if (st == K3_ERR_IO && writing) { /* the failed .partial is removed (write_shard), the rest kept */
        char *why = xasprintf("%s", k3_errmsg());
        st        = k3_err(st, "%s (%d completed shard%s kept: run the same command again to resume)", why,
                           n_done + n_skip, n_done + n_skip == 1 ? "" : "s");
        free(why);
    }
    if (!st) {
        double el = k3_time() - c->t0;
        say(c, "%d shard(s) written, %d already complete%s; index: %d of %d shards%s (%.1f s)", n_done,
            n_skip, c->o.verify_full ? ", experts verified" : "", n_idx, n_out,
            n_idx < n_out ? " - incomplete: run the remaining --shards" : "", el);
    }
    for (int s = 0; s < ns; s++)
        plan_free(&pl[s]);
    free(pl);
    free(sel);
    free(c->exs);
    free(c->ehome);
    return st;
}

int main(int argc, char **argv) {
    ctx c;
    memset(&c, 0, sizeof c);
    enum { O_BITS = 256, O_MLA, O_HEAD, O_SHARDS, O_JOBS };
    const struct option lo[] = {
        {"bits", required_argument, 0, O_BITS},
        {"mla-bits", required_argument, 0, O_MLA},
        {"head-bits", required_argument, 0, O_HEAD},
        {"shards", required_argument, 0, O_SHARDS},
        {"verify-full", no_argument, &c.o.verify_full, 1}, /* switches: set by getopt */
        {"jobs", required_argument, 0, O_JOBS},
        {"quiet", no_argument, &c.o.quiet, 1},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int opt, rc = -1;
    while ((opt = tool_getopt(argc, argv, lo, usage, &rc)) != -1) {
        switch (opt) {
        case O_BITS:
            c.o.bits = parse_row("--bits", K3_SETTING_BITS, optarg, 1);
            break;
        case O_MLA:
            c.o.mla_bits = parse_row("--mla-bits", K3_SETTING_MLA_BITS, optarg, 0);
            break;
        case O_HEAD:
            c.o.head_bits = parse_row("--head-bits", K3_SETTING_HEAD_BITS, optarg, 0);
            break;
        case O_SHARDS: {
            long mx;
            if (parse_shards(optarg, NULL, &mx)) {
                txt_term_printf(
                    stderr,
                    "k3-repack: --shards '%s': expected shard numbers from 1 and ranges, comma-separated "
                    "(e.g. 1-3,7)\n",
                    optarg);
                return 2;
            }
            c.o.shards = optarg;
            break;
        }
        case O_JOBS: /* K3_THREADS's range: 0 = OpenMP's default */
            c.o.jobs = parse_row("--jobs", K3_SETTING_THREADS, optarg, 0);
            break;
        }
    }
    if (rc >= 0)
        return rc;
    if (argc - optind != 2) {
        fprintf(stderr, "k3-repack: expected SRC and DST directories\n");
        usage(stderr);
        return 2;
    }
    if (!c.o.bits) {
        fprintf(stderr, "k3-repack: --bits 4|8 is required\n");
        return 2;
    }
    c.o.src = argv[optind];
    c.o.dst = argv[optind + 1];
    if (!c.o.mla_bits)
        c.o.mla_bits = c.o.bits;
    if (!c.o.head_bits)
        c.o.head_bits = c.o.bits;
#ifdef _OPENMP
    if (c.o.jobs)
        omp_set_num_threads(c.o.jobs);
#endif
    c.tty               = isatty(2);
    struct sigaction sa = {0}; /* a stop signal ends the shard being written (its .partial removed) */
    sa.sa_handler       = on_signal;
    sa.sa_flags         = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    k3_status st = k3_setting_env_int(K3_SETTING_REPACK_KILL_AT, &c.kill_at); /* test hook */
    if (st == K3_OK)
        st = run(&c);
    if (c.d)
        st_close(c.d);
    free(c.ti);
    if (st) {
        if (c.tty && !c.o.quiet)
            fputs("\r\033[K", stderr);
        txt_term_printf(stderr, "k3-repack: %s\n", k3_errmsg()); /* paths, names: escaped */
    }
    if (st && stop_sig) { /* the signal's own status (130, 143), as its default action would give; a
                             signal that came after the last check finds the run complete: 0 */
        signal(stop_sig, SIG_DFL);
        raise(stop_sig);
    }
    return st ? c.usage ? 2 : 1 : 0;
}
