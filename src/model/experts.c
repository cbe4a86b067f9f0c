/* experts.c: the streaming routed-expert tier (interface and usage: experts.h).
 *
 * DESIGN
 * - Location. At open every routed expert of every run MoE layer is located: its six tensors
 *   (w1, w3, w2 x packed, scale; U8, shapes checked) and whether they lie back to back in one
 *   shard (in any order). Contiguous experts are read with one positioned read of the whole
 *   span; others with six reads.
 * - Slots. Each MoE layer has n_slots slots (capacity E) of slot_bytes each; a slot holds one
 *   expert (state EMPTY, LOADING, READY or FAILED), a pin (in use by the running batch) and an
 *   LRU stamp. n_slots = budget / (MoE layers x expert bytes), clamped to [1, E], the same for
 *   every layer; ex_set_budget changes it live (shrinking frees the least recently used).
 *   Slot buffers are allocated on first use.
 * - Batches. ex_begin takes the layer's lock (one batch per layer at a time), pins the hits and
 *   sorts the misses by (shard, offset); misses get slots (an empty one, else the least recently
 *   used unpinned one) and go, in that order, to a FIFO queue served by K3_LOAD_THREADS loader
 *   threads. ex_next returns the hits first (while the misses load), then each miss once its
 *   read is done; returning an expert unpins the previous one, which frees its slot for the next
 *   miss, so any number of slots >= 1 works. K3_PIPE=0 issues no read before the hits are done
 *   and waits for every read in flight before returning a miss (no read/compute overlap).
 * - Reads. O_DIRECT by default: the read covers the aligned superset of the wanted bytes
 *   (EX_ALIGN) into an aligned buffer, and the matrices point into it. A filesystem that refuses
 *   O_DIRECT (EINVAL at open or read, e.g. tmpfs) switches the tier to buffered reads with one
 *   warning. A failed or short read reopens the shard by path (old descriptors are kept open
 *   until ex_close, as a loader may still use them) and retries once, so a restored file is
 *   picked up; a second failure marks the slot FAILED and ex_next reports K3_ERR_IO naming the
 *   file and offset. MXFP4 scale bytes 255 (NaN) are rejected on every load.
 * - Statistics: hits and misses per distinct expert of a batch; bytes read; read seconds = wall
 *   time while at least one read runs; wait seconds = time ex_next blocks on a read.
 * - Locking: t->mu guards slot states, where[], the queue, the descriptors and the counters;
 *   a loader reads into a LOADING slot without the lock (the slot is its own until it publishes
 *   the state under the lock).
 */
#include "experts.h"
#include "config.h"
#include "fit.h"
#include "tensors.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EX_ALIGN 4096u           /* O_DIRECT offset, length and buffer alignment */
#define EX_PARTS TT_EXPERT_PARTS /* w1, w3, w2 x (packed, scale): tensors.h */

typedef struct ex_loc {
    int      contig;             /* the six tensors are back to back in one shard     */
    int      shard[EX_PARTS];    /* shard of each part                                */
    uint64_t off, span;          /* contig: file offset and bytes of the six          */
    uint64_t part_off[EX_PARTS]; /* file offset of each part                          */
} ex_loc;

enum { SLOT_EMPTY, SLOT_LOADING, SLOT_READY, SLOT_FAILED };

typedef struct ex_slot {
    uint8_t  *buf;    /* (slot_bytes) EX_ALIGN-aligned, NULL until first use       */
    k3_expert x;      /* views into buf when READY                                 */
    int       expert; /* -1 when empty                                             */
    int       state;
    int       pin;   /* in use by the running batch                               */
    uint64_t  stamp; /* LRU clock at last use                                     */
    k3_status st;    /* FAILED: the error and its message                         */
    char      msg[512];
} ex_slot;

struct ex_layer {
    int             layer;
    ex_loc         *loc;   /* [E] NULL for dense or not-run layers                  */
    int            *where; /* [E] slot of expert e, -1 if none                       */
    ex_slot        *slots; /* [E] capacity; [0, n_slots) in use                       */
    int             n_slots;
    int            *order;     /* [E] batch scratch: hits, then misses by disk offset    */
    int             in_flight; /* reads queued or running                                 */
    pthread_mutex_t lock;      /* held from ex_begin to ex_end                            */
};

typedef struct ex_job {
    ex_layer *ly;
    int       slot;
} ex_job;

struct ex_tier {
    ex_source        src; /* the checkpoint and settings (ex_open's copy) */
    int              E, n_layers, n_moe;
    int              F, L;                    /* expert width, latent                         */
    ex_layer        *layers;                  /* [n_layers]                                   */
    int64_t          part_shape[EX_PARTS][2]; /* U8 [rows, width] of each part (tensors.h)   */
    uint64_t         part_n[EX_PARTS];        /* bytes of each part                           */
    uint64_t         sub_off[EX_PARTS];       /* split layout: aligned place of each part     */
    uint64_t         expert_bytes;            /* the six tensors                              */
    uint64_t         deferred;                /* experts' bytes left to read on demand at open */
    size_t           slot_bytes;
    _Atomic double   budget_gb; /* read without the lock by ex_budget_gb        */
    _Atomic int      n_slots;   /* per MoE layer                                */
    int              direct, pipe;
    int              fake_einval; /* test hook K3_TEST_DIRECT_EINVAL: O_DIRECT refused */
    int             *fds;         /* [n_shards] -1 until opened                   */
    int              n_shards;
    int             *old_fds, n_old, cap_old;
    pthread_mutex_t  mu;
    pthread_cond_t   cv;
    ex_job          *queue; /* ring of q_cap                                */
    int              q_head, q_len, q_cap;
    pthread_t       *thr;
    int              n_thr, quit;
    uint64_t         clock;
    uint64_t         bytes;            /* read so far                                  */
    double           busy, busy_since; /* seconds with >= 1 read running               */
    int              busy_n;
    _Atomic uint64_t resident; /* slot buffers allocated                       */
};

static uint64_t align_up(uint64_t x) {
    return (x + EX_ALIGN - 1) & ~(uint64_t)(EX_ALIGN - 1);
}

static void part_name(char *buf, size_t n, int l, int e, int p) {
    tt_name(buf, n, TT_EXPERT_FIRST + p, l, e);
}

/* ==== descriptors ========================================================== */

static void keep_old_fd(ex_tier *t, int fd) {
    if (fd < 0)
        return;
    int *n = k3_grow(t->old_fds, &t->cap_old, (size_t)t->n_old + 1, sizeof *n, 16);
    if (!n)
        return; /* keep it open and forgotten rather than close it under a reader */
    t->old_fds             = n;
    t->old_fds[t->n_old++] = fd;
}

/* Switch to buffered reads (caller holds mu): one warning, descriptors reopened on use. */
static void drop_direct(ex_tier *t, const char *path, int err) {
    if (!t->direct)
        return;
    t->direct = 0;
    K3_LOG_WARN("%s: O_DIRECT refused (%s); expert reads go through the page cache", path, strerror(err));
    for (int i = 0; i < t->n_shards; i++) {
        keep_old_fd(t, t->fds[i]);
        t->fds[i] = -1;
    }
}

/* The descriptor of shard (opened by path on first use, or reopened when reopen). */
static k3_status shard_fd(ex_tier *t, int shard, int reopen, int *fd, int *direct) {
    const char *path = st_shard_path(t->src.st, shard);
    k3_status   st   = K3_OK;
    pthread_mutex_lock(&t->mu);
    if (reopen) {
        keep_old_fd(t, t->fds[shard]);
        t->fds[shard] = -1;
    }
    while (t->fds[shard] < 0) {
        uint64_t    size;
        const char *kind = NULL; /* a FIFO put in its place would block the open, mu held */
        int         f    = t->direct && t->fake_einval
                               ? (errno = EINVAL, -1)
                               : k3_open_regular_fd(path, t->direct ? O_DIRECT : 0, &size, &kind);
        if (f >= 0) {
            t->fds[shard] = f;
        } else if (kind) {
            st = k3_err(K3_ERR_IO, "%s: not a regular file (%s)", path, kind);
            break;
        } else if (errno == EINVAL && t->direct) {
            drop_direct(t, path, errno);
        } else {
            st = k3_err(K3_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
            break;
        }
    }
    *fd     = t->fds[shard];
    *direct = t->direct;
    pthread_mutex_unlock(&t->mu);
    return st;
}

/* Bytes [off, off+n) of shard: read the aligned superset into buf (EX_ALIGN-aligned, room for
 * align_up(n + EX_ALIGN - 1)); *data points at byte off. Retries once on a reopened file. */
static k3_status ex_pread(ex_tier *t, int shard, uint8_t *buf, uint64_t off, uint64_t n,
                          const uint8_t **data) {
    const uint64_t a0 = off & ~(uint64_t)(EX_ALIGN - 1), head = off - a0;
    const uint64_t len = align_up(head + n), need = head + n;
    for (int attempt = 0;; attempt++) {
        int       fd, direct;
        k3_status st = shard_fd(t, shard, attempt > 0, &fd, &direct);
        if (st) {
            k3_err_prefix("expert read of %llu bytes at offset %llu", (unsigned long long)n,
                          (unsigned long long)off);
            return st;
        }
        uint64_t got = 0;
        int      err = 0;
        while (got < need) {
            ssize_t r = pread(fd, buf + got, (size_t)(len - got), (off_t)(a0 + got));
            if (r < 0) {
                if (errno == EINTR)
                    continue;
                err = errno;
                break;
            }
            if (r == 0)
                break;
            got += (uint64_t)r;
            if (direct && (r % EX_ALIGN))
                break; /* a partial block: end of file */
        }
        if (got >= need) {
            *data = buf + head;
            return K3_OK;
        }
        const char *path = st_shard_path(t->src.st, shard);
        if (err == EINVAL && direct) {
            pthread_mutex_lock(&t->mu);
            drop_direct(t, path, err);
            pthread_mutex_unlock(&t->mu);
            attempt = -1; /* the buffered read is the first attempt */
            continue;
        }
        if (attempt == 0)
            continue; /* reopen by path once: a restored file */
        uint64_t at = off + (got > head ? got - head : 0);
        if (err)
            return k3_err(K3_ERR_IO, "%s: expert read of %llu bytes at offset %llu failed: %s", path,
                          (unsigned long long)n, (unsigned long long)at, strerror(err));
        return k3_err(K3_ERR_IO,
                      "%s: unexpected end of file at offset %llu reading %llu expert "
                      "bytes from offset %llu (file truncated?)",
                      path, (unsigned long long)at, (unsigned long long)n, (unsigned long long)off);
    }
}

/* Read expert s->expert of layer ly into slot s and set s->x. Runs on a loader thread. */
static k3_status ex_load(ex_tier *t, ex_layer *ly, ex_slot *s) {
    const ex_loc  *lc = &ly->loc[s->expert];
    const uint8_t *p[EX_PARTS];
    k3_status      st;
    if (lc->contig) {
        const uint8_t *base;
        if ((st = ex_pread(t, lc->shard[0], s->buf, lc->off, lc->span, &base)))
            return st;
        for (int i = 0; i < EX_PARTS; i++)
            p[i] = base + (lc->part_off[i] - lc->off);
    } else {
        for (int i = 0; i < EX_PARTS; i++)
            if ((st =
                     ex_pread(t, lc->shard[i], s->buf + t->sub_off[i], lc->part_off[i], t->part_n[i], &p[i])))
                return st;
    }
    for (int i = 1; i < EX_PARTS; i += 2) {
        const uint8_t *bad = memchr(p[i], 255, (size_t)t->part_n[i]);
        if (bad) {
            char nm[200];
            part_name(nm, sizeof nm, ly->layer, s->expert, i);
            return k3_err(K3_ERR_NUMERIC, "%s: tensor '%s': MXFP4 scale byte %zu is 255 (NaN)",
                          st_shard_path(t->src.st, lc->shard[i]), nm, (size_t)(bad - p[i]));
        }
    }
    const int F = t->F, L = t->L;
    s->x.w1 = (qmat){.type = Q_MXFP4, .rows = F, .cols = L, .w = p[0], .e = p[1]};
    s->x.w3 = (qmat){.type = Q_MXFP4, .rows = F, .cols = L, .w = p[2], .e = p[3]};
    s->x.w2 = (qmat){.type = Q_MXFP4, .rows = L, .cols = F, .w = p[4], .e = p[5]};
    return K3_OK;
}

static void *ex_loader(void *arg) {
    ex_tier *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->quit && !t->q_len)
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->quit)
            break;
        ex_job j  = t->queue[t->q_head];
        t->q_head = (t->q_head + 1) % t->q_cap;
        t->q_len--;
        if (!t->busy_n++)
            t->busy_since = k3_time();
        pthread_mutex_unlock(&t->mu);

        ex_slot  *s  = &j.ly->slots[j.slot];
        k3_status st = ex_load(t, j.ly, s);
        if (st)
            snprintf(s->msg, sizeof s->msg, "%s", k3_errmsg());

        pthread_mutex_lock(&t->mu);
        if (!--t->busy_n)
            t->busy += k3_time() - t->busy_since;
        s->st    = st;
        s->state = st ? SLOT_FAILED : SLOT_READY;
        if (!st)
            t->bytes += t->expert_bytes;
        j.ly->in_flight--;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ==== budget ================================================================= */

uint64_t ex_default_bytes(uint64_t all) {
    double avail = fit_meminfo_available();
    return avail <= 0 || (double)all <= 0.5 * avail ? all : (uint64_t)(0.4 * avail);
}

/* The budget in GB for a request (< 0: the default). */
static double effective_gb(const ex_tier *t, double gb) {
    if (gb >= 0)
        return gb;
    uint64_t all = (uint64_t)t->n_moe * (uint64_t)t->E * t->expert_bytes;
    return (double)ex_default_bytes(all) / 1e9;
}

static int slots_for(const ex_tier *t, double gb) {
    if (!t->n_moe)
        return 1;
    double n = gb * 1e9 / ((double)t->n_moe * (double)t->expert_bytes) + 1e-9;
    return n >= t->E ? t->E : n < 1 ? 1 : (int)n;
}

/* Set the layer's slot count (caller holds ly->lock and mu; no batch runs). */
static void layer_resize(ex_tier *t, ex_layer *ly, int n) {
    while (ly->n_slots > n) {
        int v = 0;
        for (int i = 1; i < ly->n_slots; i++) {
            const ex_slot *a = &ly->slots[i], *b = &ly->slots[v];
            if ((a->expert < 0) > (b->expert < 0) ||
                ((a->expert < 0) == (b->expert < 0) && a->stamp < b->stamp))
                v = i;
        }
        ex_slot *s = &ly->slots[v];
        if (s->expert >= 0)
            ly->where[s->expert] = -1;
        if (s->buf)
            t->resident -= t->slot_bytes;
        free(s->buf);
        int last = --ly->n_slots;
        if (v != last) {
            *s = ly->slots[last];
            if (s->expert >= 0)
                ly->where[s->expert] = v;
        }
        memset(&ly->slots[last], 0, sizeof ly->slots[last]);
        ly->slots[last].expert = -1;
    }
    ly->n_slots = n;
}

k3_status ex_set_budget(ex_tier *t, double gb) {
    double eff = effective_gb(t, gb);
    int    n   = slots_for(t, eff);
    for (int l = 0; l < t->n_layers; l++) {
        ex_layer *ly = &t->layers[l];
        if (!ly->loc)
            continue;
        pthread_mutex_lock(&ly->lock);
        pthread_mutex_lock(&t->mu);
        layer_resize(t, ly, n);
        pthread_mutex_unlock(&t->mu);
        pthread_mutex_unlock(&ly->lock);
    }
    pthread_mutex_lock(&t->mu);
    t->budget_gb = eff;
    t->n_slots   = n;
    pthread_mutex_unlock(&t->mu);
    K3_LOG_INFO("expert cache: %.3f GB, %d of %d experts per MoE layer", eff, n, t->E);
    return K3_OK;
}

double ex_budget_gb(const ex_tier *t) {
    return t->budget_gb;
}

uint64_t ex_resident_bytes(const ex_tier *t) {
    return t->resident;
}

int ex_slots_per_layer(const ex_tier *t) {
    return t->n_slots;
}

/* ==== batches ================================================================= */

static double busy_now(const ex_tier *t) {
    return t->busy + (t->busy_n ? k3_time() - t->busy_since : 0);
}

/* Give slots and reads to the next misses, in order, while a slot is free (caller holds mu). */
static k3_status issue(ex_batch *b) {
    ex_tier  *t      = b->t;
    ex_layer *ly     = b->ly;
    int       queued = 0;
    k3_status st     = K3_OK;
    while (b->issued < b->n) {
        int v = -1;
        for (int i = 0; i < ly->n_slots; i++) {
            const ex_slot *s = &ly->slots[i];
            if (s->pin || s->state == SLOT_LOADING)
                continue;
            if (s->expert < 0) {
                v = i;
                break;
            }
            if (v < 0 || s->stamp < ly->slots[v].stamp)
                v = i;
        }
        if (v < 0)
            break;
        ex_slot *s = &ly->slots[v];
        if (!s->buf) {
            if (!(s->buf = k3_aligned_alloc(EX_ALIGN, t->slot_bytes))) {
                st = k3_err(K3_ERR_NOMEM, "expert cache: out of memory for a %zu-byte slot", t->slot_bytes);
                break;
            }
            t->resident += t->slot_bytes;
        }
        if (s->expert >= 0)
            ly->where[s->expert] = -1;
        int e        = ly->order[b->issued++];
        s->expert    = e;
        s->state     = SLOT_LOADING;
        s->pin       = 1;
        ly->where[e] = v;
        K3_ASSERT(t->q_len < t->q_cap);
        t->queue[(t->q_head + t->q_len++) % t->q_cap] = (ex_job){ly, v};
        ly->in_flight++;
        queued = 1;
    }
    if (queued)
        pthread_cond_broadcast(&t->cv);
    return st;
}

static int miss_before(const ex_layer *ly, int a, int b) {
    const ex_loc *x = &ly->loc[a], *y = &ly->loc[b];
    if (x->shard[0] != y->shard[0])
        return x->shard[0] < y->shard[0];
    return x->part_off[0] < y->part_off[0];
}

k3_status ex_begin(ex_tier *t, int layer, const int *experts, int n, k3_stats *stats, ex_batch *b) {
    ex_layer *ly = &t->layers[layer];
    K3_ASSERT(ly->loc && n >= 0 && n <= t->E);
    memset(b, 0, sizeof *b);
    b->t     = t;
    b->ly    = ly;
    b->stats = stats;
    b->n     = n;
    b->cur   = -1;
    pthread_mutex_lock(&ly->lock);
    pthread_mutex_lock(&t->mu);
    int nm = 0;
    for (int i = 0; i < n; i++) { /* hits first, pinned */
        int e = experts[i], w = ly->where[e];
        K3_ASSERT(e >= 0 && e < t->E);
        if (w >= 0 && ly->slots[w].state == SLOT_READY) {
            ly->order[b->n_hits++] = e;
            ly->slots[w].pin       = 1;
        }
    }
    for (int i = 0; i < n; i++) { /* then the misses, by (shard, offset): insertion sort */
        int e = experts[i], w = ly->where[e];
        if (w >= 0 && ly->slots[w].state == SLOT_READY)
            continue;
        int j = b->n_hits + nm++;
        while (j > b->n_hits && miss_before(ly, e, ly->order[j - 1])) {
            ly->order[j] = ly->order[j - 1];
            j--;
        }
        ly->order[j] = e;
    }
    b->issued = b->n_hits;
    b->bytes0 = t->bytes;
    b->busy0  = busy_now(t);
    if (stats) {
        stats->expert_hits += (uint64_t)b->n_hits;
        stats->expert_misses += (uint64_t)nm;
    }
    k3_status st = t->pipe ? issue(b) : K3_OK;
    pthread_mutex_unlock(&t->mu);
    return st;
}

k3_status ex_next(ex_batch *b, int *e, const k3_expert **x) {
    ex_tier  *t  = b->t;
    ex_layer *ly = b->ly;
    k3_status st = K3_OK;
    *e           = -1;
    *x           = NULL;
    pthread_mutex_lock(&t->mu);
    if (b->cur >= 0) {
        ly->slots[b->cur].pin   = 0;
        ly->slots[b->cur].stamp = ++t->clock;
        b->cur                  = -1;
    }
    if (b->next < b->n) {
        int i = b->next, id = ly->order[i];
        if (i >= b->n_hits) {
            if (t->pipe || i >= b->issued)
                st = issue(b);
            if (!st) {
                K3_ASSERT(b->issued > i);
                double   t0 = k3_time();
                ex_slot *s  = &ly->slots[ly->where[id]];
                while (s->state == SLOT_LOADING || (!t->pipe && ly->in_flight))
                    pthread_cond_wait(&t->cv, &t->mu);
                if (b->stats)
                    b->stats->expert_wait_s += k3_time() - t0;
                if (s->state == SLOT_FAILED)
                    st = k3_err(s->st, "%s", s->msg);
            }
        }
        if (!st) {
            b->next++;
            b->cur                  = ly->where[id];
            ly->slots[b->cur].stamp = ++t->clock;
            *e                      = id;
            *x                      = &ly->slots[b->cur].x;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

void ex_end(ex_batch *b) {
    ex_tier  *t  = b->t;
    ex_layer *ly = b->ly;
    if (!ly)
        return;
    pthread_mutex_lock(&t->mu);
    /* drop this layer's queued reads that no loader has taken yet */
    int kept = 0;
    for (int i = 0; i < t->q_len; i++) {
        ex_job j = t->queue[(t->q_head + i) % t->q_cap];
        if (j.ly == ly) {
            ex_slot *s           = &ly->slots[j.slot];
            ly->where[s->expert] = -1;
            s->expert            = -1;
            s->state             = SLOT_EMPTY;
            ly->in_flight--;
        } else {
            t->queue[(t->q_head + kept++) % t->q_cap] = j;
        }
    }
    t->q_len = kept;
    while (ly->in_flight)
        pthread_cond_wait(&t->cv, &t->mu);
    for (int i = 0; i < ly->n_slots; i++) {
        ex_slot *s = &ly->slots[i];
        s->pin     = 0;
        if (s->state == SLOT_FAILED) {
            ly->where[s->expert] = -1;
            s->expert            = -1;
            s->state             = SLOT_EMPTY;
        }
    }
    if (b->stats) {
        b->stats->expert_bytes_read += t->bytes - b->bytes0;
        b->stats->expert_read_s += busy_now(t) - b->busy0;
    }
    pthread_mutex_unlock(&t->mu);
    pthread_mutex_unlock(&ly->lock);
    b->ly = NULL;
}

/* ==== open / close ============================================================= */

/* Find and check the six tensors of expert e of layer l. */
static k3_status locate(ex_tier *t, int l, int e, ex_loc *lc) {
    const st_dir *d = t->src.st;
    char          nm[200];
    uint64_t      lo = UINT64_MAX, hi = 0;
    for (int p = 0; p < EX_PARTS; p++) {
        part_name(nm, sizeof nm, l, e, p);
        const st_tensor *ts = st_find(d, nm);
        if (!ts)
            return k3_err(K3_ERR_FORMAT, "%s: tensor '%s' is missing", t->src.dir, nm);
        const int64_t *want = t->part_shape[p];
        if (ts->dtype != ST_U8 || ts->ndim != 2 || ts->shape[0] != want[0] || ts->shape[1] != want[1])
            return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': expected U8 [%lld, %lld]", t->src.dir, nm,
                          (long long)want[0], (long long)want[1]);
        lc->shard[p]    = ts->shard;
        lc->part_off[p] = ts->offset;
        if (ts->offset < lo)
            lo = ts->offset;
        if (ts->offset + ts->nbytes > hi)
            hi = ts->offset + ts->nbytes;
    }
    int same = 1;
    for (int p = 1; p < EX_PARTS; p++)
        same &= lc->shard[p] == lc->shard[0];
    lc->contig = same && hi - lo == t->expert_bytes; /* st checked: no overlaps */
    lc->off    = lo;
    lc->span   = hi - lo;
    return K3_OK;
}

/* Read every expert of every run MoE layer (the budget holds them all). */
static k3_status preload(ex_tier *t) {
    int *ids = k3_calloc((size_t)t->E, sizeof *ids);
    if (!ids)
        return k3_err(K3_ERR_NOMEM, "expert cache: out of memory");
    for (int e = 0; e < t->E; e++)
        ids[e] = e;
    k3_status st = K3_OK;
    for (int l = 0; l < t->n_layers && !st; l++) {
        if (!t->layers[l].loc)
            continue;
        ex_batch         b;
        const k3_expert *x;
        int              e;
        st = ex_begin(t, l, ids, t->E, NULL, &b);
        while (!st && !(st = ex_next(&b, &e, &x)) && e >= 0)
            if (t->src.progress)
                t->src.progress(t->src.ud, t->expert_bytes);
        ex_end(&b);
    }
    free(ids);
    return st;
}

k3_status ex_open(const ex_source *src, ex_tier **out) {
    *out               = NULL;
    const k3_config *c = src->cfg;
    ex_tier         *t = k3_calloc(1, sizeof *t);
    if (!t)
        return k3_err(K3_ERR_NOMEM, "expert cache: out of memory");
    t->src         = *src;
    t->E           = c->n_experts;
    t->n_layers    = c->n_layers;
    t->F           = c->moe_inter;
    t->L           = c->latent;
    t->direct      = src->direct;
    t->pipe        = src->pipe;
    t->fake_einval = 0; /* a malformed value: off */
    (void)k3_setting_env_int(K3_SETTING_TEST_DIRECT_EINVAL, &t->fake_einval);
    t->n_shards = st_n_shards(src->st);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    k3_status st = K3_OK;
    if (t->F % Q_MXFP4_GROUP || t->L % Q_MXFP4_GROUP) {
        st = k3_err(K3_ERR_CONFIG, "%s: expert width %d and latent %d must be multiples of %d", src->dir,
                    t->F, t->L, Q_MXFP4_GROUP);
        goto fail;
    }
    int64_t dim[TT_D_COUNT];
    tt_dims(c, dim);
    for (int p = 0; p < EX_PARTS; p++) {
        tt_shape sh         = tt_shape_of(dim, TT_EXPERT_FIRST + p, 0);
        t->part_shape[p][0] = sh.s[0];
        t->part_shape[p][1] = sh.s[1];
        t->part_n[p]        = (uint64_t)tt_numel(sh);
        t->expert_bytes += t->part_n[p];
        t->sub_off[p] = t->slot_bytes;
        t->slot_bytes += align_up(t->part_n[p] + EX_ALIGN - 1);
    }
    if (!(t->fds = k3_calloc((size_t)t->n_shards + 1, sizeof *t->fds)) ||
        !(t->layers = k3_calloc((size_t)t->n_layers, sizeof *t->layers)))
        goto oom;
    for (int i = 0; i < t->n_shards; i++)
        t->fds[i] = -1;
    for (int l = 0; l < t->n_layers; l++) {
        ex_layer *ly = &t->layers[l];
        ly->layer    = l;
        pthread_mutex_init(&ly->lock, NULL);
        if (l >= src->n_run || l < c->first_dense)
            continue;
        t->n_moe++;
        if (!(ly->loc = k3_calloc((size_t)t->E, sizeof *ly->loc)) ||
            !(ly->where = k3_calloc((size_t)t->E, sizeof *ly->where)) ||
            !(ly->slots = k3_calloc((size_t)t->E, sizeof *ly->slots)) ||
            !(ly->order = k3_calloc((size_t)t->E, sizeof *ly->order)))
            goto oom;
        for (int e = 0; e < t->E; e++) {
            ly->where[e]        = -1;
            ly->slots[e].expert = -1;
            if ((st = locate(t, l, e, &ly->loc[e])))
                goto fail;
        }
    }
    long n_split = 0;
    for (int l = 0; l < t->n_layers; l++)
        for (int e = 0; t->layers[l].loc && e < t->E; e++)
            n_split += !t->layers[l].loc[e].contig;
    K3_LOG_INFO("%s: %d routed experts of %.2f MB in %d MoE layers; %ld contiguous (one read "
                "each), %ld split (six reads each)",
                src->dir, t->n_moe * t->E, (double)t->expert_bytes / 1e6, t->n_moe,
                (long)t->n_moe * t->E - n_split, n_split);
    t->q_cap = t->n_moe * t->E + 1;
    int nt   = src->load_threads > 0 ? src->load_threads : 4;
    if (!(t->queue = k3_calloc((size_t)t->q_cap, sizeof *t->queue)) ||
        !(t->thr = k3_calloc((size_t)nt, sizeof *t->thr)))
        goto oom;
    for (; t->n_thr < nt; t->n_thr++)
        if (pthread_create(&t->thr[t->n_thr], NULL, ex_loader, t)) {
            st = k3_err(K3_ERR_NOMEM, "expert cache: cannot start loader thread %d", t->n_thr);
            goto fail;
        }
    if ((st = ex_set_budget(t, src->expert_gb)))
        goto fail;
    if (t->n_moe && t->n_slots == t->E && !src->lazy) {
        if ((st = preload(t)))
            goto fail;
    } else {
        t->deferred = (uint64_t)t->n_moe * t->E * t->expert_bytes; /* read on demand */
    }
    *out = t;
    return K3_OK;
oom:
    st = k3_err(K3_ERR_NOMEM, "expert cache: out of memory");
fail:
    ex_close(t);
    return st;
}

uint64_t ex_deferred_bytes(const ex_tier *t) {
    return t->deferred;
}

uint64_t ex_bytes_read(const ex_tier *t) {
    return t->bytes;
}

void ex_close(ex_tier *t) {
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->quit = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n_thr; i++)
        pthread_join(t->thr[i], NULL);
    if (t->layers)
        for (int l = 0; l < t->n_layers; l++) {
            ex_layer *ly = &t->layers[l];
            if (ly->slots)
                for (int i = 0; i < t->E; i++)
                    free(ly->slots[i].buf);
            free(ly->loc);
            free(ly->where);
            free(ly->slots);
            free(ly->order);
            pthread_mutex_destroy(&ly->lock);
        }
    if (t->fds)
        for (int i = 0; i < t->n_shards; i++)
            if (t->fds[i] >= 0)
                close(t->fds[i]);
    for (int i = 0; i < t->n_old; i++)
        close(t->old_fds[i]);
    free(t->old_fds);
    free(t->fds);
    free(t->layers);
    free(t->queue);
    free(t->thr);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}
