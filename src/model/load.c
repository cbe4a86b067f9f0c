/* load.c: open a K3 model directory: parameters, config, every text tensor of spec section 3.
 *
 * DESIGN
 * Loading follows the tensor table (tensors.h): globals, then per layer the norms and AttnRes
 * vectors, the attention (KDA or MLA) and the MLP (dense or Stable LatentMoE); each row lands in
 * the field its table line names, by its kind (load_one). Every weight matrix goes
 * through model_matrix() -> matrix_from_f32(), the single point where load-time quantization
 * (K3_BITS, K3_MLA_BITS, K3_HEAD_BITS) plugs in. Every float tensor is checked for NaN/inf and
 * every MXFP4 scale for the NaN code 255, with an error naming the tensor. Routed experts keep
 * the stored MXFP4 bytes and live in the streaming expert tier (experts.c: an LRU cache per
 * layer within K3_EXPERT_GB, read from the shards on demand). All other allocations are
 * recorded in m->owned and freed together.
 */
#include "act.h"
#include "model-impl.h"
#include "prof.h"
#include "repack.h"
#include "tensors.h"
#include "vkt.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ==== parameters ========================================================== */

/* The K3_* values of the parameters, each through its row of the settings table. */
static k3_status params_env(k3_params *p) {
    static const struct {
        enum k3_setting_id id;
        int                set; /* K3_SET_* bit: given explicitly */
        size_t             off; /* the int field */
    } ints[] = {
        {K3_SETTING_BITS, K3_SET_BITS, offsetof(k3_params, bits)},
        {K3_SETTING_MLA_BITS, K3_SET_MLA_BITS, offsetof(k3_params, mla_bits)},
        {K3_SETTING_HEAD_BITS, K3_SET_HEAD_BITS, offsetof(k3_params, head_bits)},
        {K3_SETTING_CHUNK, 0, offsetof(k3_params, chunk)},
        {K3_SETTING_MAXT, K3_SET_MAXT, offsetof(k3_params, max_ctx)},
        {K3_SETTING_THREADS, 0, offsetof(k3_params, threads)},
        {K3_SETTING_LAYERS, 0, offsetof(k3_params, n_layers)},
        {K3_SETTING_DIRECT, 0, offsetof(k3_params, direct)},
        {K3_SETTING_PIPE, 0, offsetof(k3_params, pipe)},
        {K3_SETTING_LOAD_THREADS, 0, offsetof(k3_params, load_threads)},
        {K3_SETTING_WINDOW, 0, offsetof(k3_params, window)},
        {K3_SETTING_ROUTE_SEED, 0, offsetof(k3_params, route_seed)},
    };
    k3_status st;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if ((st = k3_setting_env_int(ints[i].id, (int *)(void *)((char *)p + ints[i].off))))
            return st;
        if (k3_setting_env_str(ints[i].id))
            p->set |= ints[i].set;
    }
    if ((st = k3_setting_env(K3_SETTING_EXPERT_GB, &p->expert_gb)) ||
        (st = k3_setting_env(K3_SETTING_TOPP, &p->topp)))
        return st;
    if (k3_setting_env_str(K3_SETTING_EXPERT_GB))
        p->set |= K3_SET_EXPERT_GB;
    double route = p->route; /* model|uniform: its index */
    if ((st = k3_setting_env(K3_SETTING_ROUTE, &route)))
        return st;
    p->route       = (int)route;
    p->logits_path = k3_setting_env_str(K3_SETTING_LOGITS);
    p->trace_path  = k3_setting_env_str(K3_SETTING_TRACE);
    p->x0_path     = k3_setting_env_str(K3_SETTING_X0);
    return K3_OK;
}

k3_status k3_params_default(k3_params *p) {
    memset(p, 0, sizeof *p);
    /* defaults from the settings table (bits: tools/k3-ab.c figures in BENCHMARKS.md, int4: k3-nano;
     * chunk measured 32..256: BENCHMARKS.md "chunk size", 128 ~ 256 in CPU time, half the scratch) */
    p->bits         = (int)k3_setting(K3_SETTING_BITS)->def;
    p->mla_bits     = (int)k3_setting(K3_SETTING_MLA_BITS)->def;
    p->head_bits    = (int)k3_setting(K3_SETTING_HEAD_BITS)->def;
    p->chunk        = (int)k3_setting(K3_SETTING_CHUNK)->def;
    p->max_ctx      = (int)k3_setting(K3_SETTING_MAXT)->def;
    p->sessions     = 1;
    p->expert_gb    = -1;
    p->direct       = (int)k3_setting(K3_SETTING_DIRECT)->def;
    p->pipe         = (int)k3_setting(K3_SETTING_PIPE)->def;
    p->load_threads = (int)k3_setting(K3_SETTING_LOAD_THREADS)->def;
    p->topp         = k3_setting(K3_SETTING_TOPP)->def;
    p->window       = (int)k3_setting(K3_SETTING_WINDOW)->def;
    p->route        = (int)k3_setting(K3_SETTING_ROUTE)->def;
    p->route_seed   = (int)k3_setting(K3_SETTING_ROUTE_SEED)->def;
    return params_env(p);
}

/* ==== process init ========================================================= */

static _Atomic int init_done;

k3_status k3_init(void) {
    k3_status st;
    int       verbose = 0; /* read once by k3_log_verbose: checked here */
    init_done         = 1;
    if ((st = kern_knobs_env()) || (st = kern_isa_env()) || (st = kern_act_env()))
        return st;
    if ((st = prof_init()) || (st = k3_setting_env_int(K3_SETTING_VERBOSE, &verbose)) ||
        (st = k3_hugepages_init()))
        return st;
    double d; /* the conversations read these quietly: checked here */
    if ((st = k3_setting_env(K3_SETTING_CONV_SNAPSHOTS, &d)) ||
        (st = k3_setting_env(K3_SETTING_CONV_SNAPSHOT_MB, &d)))
        return st;
    int vk_on, vk_up; /* the Vulkan tier's, read at the end of a load (minutes): checked here */
    if ((st = vkt_env(&vk_on, &d, &vk_up)))
        return st;
    fit_machine mc; /* K3_MEM_GB is checked here, before any file is opened */
    return fit_machine_get(&mc);
}

/* ==== loading helpers ======================================================= */

static k3_status own(k3_model *m, void *p) {
    void **n = k3_grow(m->owned, &m->cap_owned, (size_t)m->n_owned + 1, sizeof *n, 256);
    if (!n)
        return k3_err(K3_ERR_NOMEM, "model: out of memory");
    m->owned               = n;
    m->owned[m->n_owned++] = p;
    return K3_OK;
}

/* Aligned allocation recorded in m->owned. */
static void *alloc_owned(k3_model *m, size_t n) {
    void *p = k3_aligned_alloc(64, n ? n : 64);
    if (!p)
        return NULL;
    if (own(m, p)) {
        free(p);
        return NULL;
    }
    m->bytes_resident += n;
    return p;
}

static void progress(k3_model *m, const char *what, uint64_t bytes) {
    m->load_done += bytes;
    if (m->par.progress)
        m->par.progress(what, m->load_done, m->load_total, m->par.progress_ud);
}

/* The expert tier's progress at open (ex_source.progress). */
static void expert_progress(void *ud, uint64_t bytes) {
    progress(ud, "routed experts", bytes);
}

static const st_tensor *need(const k3_model *m, const char *name, k3_status *st) {
    const st_tensor *t = st_find(m->st, name);
    if (!t)
        *st = k3_err(K3_ERR_FORMAT, "%s: tensor '%s' is missing", m->dir, name);
    return t;
}

static int is_float(int dt) {
    return dt == ST_F32 || dt == ST_F16 || dt == ST_BF16 || dt == ST_F64;
}

/* Element i of a float tensor of dtype (ST_F32, ST_F16, ST_BF16) as f32. */
static float elem_f32(const void *p, int dtype, size_t i) {
    if (dtype == ST_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dtype == ST_BF16 ? k3_bf16_to_f32(h) : k3_f16_to_f32(h);
}

/* Whether one of the len elements of dtype at p + b is a NaN/inf: the exponent bits ORed over
 * the block, a loop the compiler vectorizes at -O2 when len is a constant (inlined). */
static inline __attribute__((always_inline)) int block_bad(const void *p, int dtype, size_t b, int len) {
    typedef uint32_t __attribute__((may_alias)) u32a; /* the bits of floats */
    typedef uint16_t __attribute__((may_alias)) u16a;
    const uint16_t m16 = dtype == ST_BF16 ? 0x7f80 : 0x7c00;
    int            bad = 0;
    if (dtype == ST_F32) {
        const u32a *u = (const u32a *)p + b;
        for (int i = 0; i < len; i++)
            bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
    } else {
        const u16a *u = (const u16a *)p + b;
        for (int i = 0; i < len; i++)
            bad |= (u[i] & m16) == m16;
    }
    return bad;
}

/* Blocks of 4,096, then of 64 (converting every element of the release's 2.35 GB BF16 embedding
 * to f32 first took a fifth of a container's open); the block that fails, and the last 63
 * elements at most, are then read element by element (the whole tail past the last 4,096 was
 * before: 3.7 us for the 7,168 floats of one hidden state, checked after every layer since;
 * BENCHMARKS.md). */
size_t model_first_nonfinite(const void *p, int dtype, size_t n) {
    enum { BLK = 4096, SUB = 64 };
    size_t b   = 0;
    int    bad = 0;
    while (!bad && b + BLK <= n && !(bad = block_bad(p, dtype, b, BLK)))
        b += BLK;
    while (!bad && b + SUB <= n && !(bad = block_bad(p, dtype, b, SUB)))
        b += SUB;
    for (size_t i = b; i < n; i++)
        if (!isfinite(elem_f32(p, dtype, i)))
            return i;
    return n;
}

static k3_status check_finite(const k3_model *m, const char *name, const float *x, size_t n) {
    size_t i = model_first_nonfinite(x, ST_F32, n);
    if (i < n)
        return k3_err(K3_ERR_NUMERIC, "%s: tensor '%s': %s at element %zu", m->dir, name,
                      isnan(x[i]) ? "NaN" : "inf", i);
    return K3_OK;
}

/* Read a float tensor of exactly n elements (any shape) as f32; checks NaN/inf. */
static k3_status read_f32(k3_model *m, const char *name, int64_t n, int at_least, float **out) {
    k3_status        st = K3_OK;
    const st_tensor *t  = need(m, name, &st);
    if (!t)
        return st;
    int64_t numel = st_numel(t);
    if (!is_float(t->dtype))
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': dtype %s, expected a float type", m->dir, name,
                      st_dtype_name(t->dtype));
    if (at_least ? numel < n : numel != n)
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': %lld elements, expected %s%lld", m->dir, name,
                      (long long)numel, at_least ? "at least " : "", (long long)n);
    float *w = k3_aligned_alloc(64, (size_t)numel * sizeof(float));
    if (!w)
        return k3_err(K3_ERR_NOMEM, "%s: tensor '%s': out of memory", m->dir, name);
    if ((st = st_read_f32(m->st, t, w)) || (st = check_finite(m, name, w, (size_t)numel))) {
        free(w);
        return st;
    }
    progress(m, name, t->nbytes);
    *out = w;
    return K3_OK;
}

/* A float vector of n elements (shape [n] or e.g. [1, n]), owned by the model. */
static k3_status model_vec(k3_model *m, const char *name, int n, float **out) {
    k3_status st = read_f32(m, name, n, 0, out);
    if (st)
        return st;
    if ((st = own(m, *out))) {
        free(*out);
        return st;
    }
    m->bytes_resident += (uint64_t)n * sizeof(float);
    return K3_OK;
}

/* Take ownership of w (rows x cols f32, from k3_aligned_alloc) as a matrix of the given bits:
 * the load-time quantization point (32: f32 as is; 8: Q_I8; 4: Q_I4, quant.c). */
static k3_status matrix_from_f32(k3_model *m, const char *name, float *w, int rows, int cols, int bits,
                                 qmat *out) {
    k3_status st;
    if (bits == 32) {
        if ((st = own(m, w))) {
            free(w);
            return st;
        }
        m->bytes_resident += q_wbytes(Q_F32, rows, cols);
        *out = (qmat){.type = Q_F32, .rows = rows, .cols = cols, .w = w};
        return K3_OK;
    }
    int type = bits == 8 ? Q_I8 : Q_I4;
    st       = qmat_quantize(out, type, w, rows, cols);
    free(w);
    if (st) {
        k3_err_prefix("%s: tensor '%s'", m->dir, name);
        return st;
    }
    if ((st = own(m, out->own))) {
        qmat_free(out);
        return st;
    }
    out->own = NULL; /* freed with the model's other allocations */
    m->bytes_resident += q_wbytes(type, rows, cols) + q_sbytes(type, rows, cols);
    return K3_OK;
}

/* ---- k3 containers (repack.h) and K3_MMAP ------------------------------------------------ */

/* K3_MMAP=1 maps prepared tensors instead of copying them: refuse what would need conversion. */
static k3_status refuse_map(const k3_model *m, const rp_form *f, int want) {
    if (!m->map)
        return K3_OK;
    return k3_err(K3_ERR_UNSUPPORTED,
                  "%s: K3_MMAP=1: tensor '%s' is stored as %s but the engine needs %s "
                  "(K3_BITS/K3_MLA_BITS/K3_HEAD_BITS): it would need conversion; use a container made with "
                  "those bits (k3-repack) or unset K3_MMAP",
                  m->dir, f->w->name, f->type < 0 ? st_dtype_name(f->w->dtype) : rp_type_name(f->type),
                  rp_type_name(want));
}

/* The bytes of t used in place: mapped read-only (K3_MMAP=1) or read into an owned block (with
 * O_DIRECT for a big tensor unless K3_DIRECT=0: st_read_block). */
static k3_status tensor_data(k3_model *m, const st_tensor *t, size_t align, const void **out) {
    k3_status st;
    if (m->map) {
        if ((st = st_map(m->st, t, out)))
            return st;
        if ((uintptr_t)*out % align)
            return k3_err(
                K3_ERR_UNSUPPORTED,
                "%s: K3_MMAP=1: tensor '%s' is not %zu-byte aligned in %s; repack it with k3-repack", m->dir,
                t->name, align, st_shard_name(m->st, t->shard));
        m->bytes_mapped += t->nbytes;
        return K3_OK;
    }
    void    *blk;
    uint64_t nb;
    if ((st = st_read_block(m->st, t, m->direct_min, &blk, out, &nb)))
        return st;
    if ((st = own(m, blk))) {
        free(blk);
        return st;
    }
    m->bytes_resident += nb;
    return K3_OK;
}

/* A stored matrix already in the engine's form (container I8/I4 with scales, or F32 at 32 bits)
 * used in place. Scales (or F32 weights) are checked finite. */
static k3_status matrix_view(k3_model *m, const rp_form *f, int rows, int cols, qmat *out) {
    const void *w, *s = NULL;
    k3_status   st;
    if ((st = tensor_data(m, f->w, f->type == Q_F32 ? 4 : 1, &w)))
        return st;
    if (f->s && (st = tensor_data(m, f->s, 4, &s)))
        return st;
    const st_tensor *c = f->s ? f->s : f->w;
    if ((st = check_finite(m, c->name, f->s ? s : w, (size_t)(c->nbytes / 4))))
        return st;
    *out = (qmat){.type = f->type, .rows = rows, .cols = cols, .w = w, .s = s};
    progress(m, f->w->name, f->w->nbytes + (f->s ? f->s->nbytes : 0));
    return K3_OK;
}

/* A container matrix decoded to f32 (for a different K3_*BITS: dequantize, then quantize again
 * with quant.c). Returns an aligned block the caller owns. */
static k3_status container_to_f32(k3_model *m, const rp_form *f, int rows, int cols, float **out) {
    void     *w = k3_aligned_alloc(64, f->w->nbytes), *s = k3_aligned_alloc(64, f->s->nbytes);
    float    *x  = k3_aligned_alloc(64, (size_t)rows * cols * sizeof(float));
    k3_status st = K3_OK;
    if (!w || !s || !x)
        st = k3_err(K3_ERR_NOMEM, "%s: tensor '%s': out of memory", m->dir, f->w->name);
    if (!st && !(st = st_read(m->st, f->w, w)) && !(st = st_read(m->st, f->s, s)) &&
        !(st = check_finite(m, f->s->name, s, f->s->nbytes / 4))) {
        qmat q = {.type = f->type, .rows = rows, .cols = cols, .w = w, .s = s};
        for (int r = 0; r < rows; r++)
            qmat_dequant_row(&q, r, x + (size_t)r * cols);
        progress(m, f->w->name, f->w->nbytes + f->s->nbytes);
    }
    free(w);
    free(s);
    if (st)
        free(x);
    else
        *out = x;
    return st;
}

/* A float matrix quantized at load (8 or 4 bits) in bands of rows, at most ~64 MB of f32 at a
 * time, so loading never holds an f32 copy of a whole matrix (the release's lm_head would take
 * 4.7 GB). Same bytes as matrix_from_f32 (qmat_quantize_rows). */
static k3_status matrix_banded(k3_model *m, const char *name, int rows, int cols, int bits, qmat *out) {
    k3_status        st = K3_OK;
    const st_tensor *t  = need(m, name, &st);
    if (!t)
        return st;
    if (!is_float(t->dtype))
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': dtype %s, expected a float type", m->dir, name,
                      st_dtype_name(t->dtype));
    if (st_numel(t) != (int64_t)rows * cols)
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': %lld elements, expected %lld", m->dir, name,
                      (long long)st_numel(t), (long long)rows * cols);
    const int type = bits == 8 ? Q_I8 : Q_I4;
    int64_t   band = ((int64_t)64 << 20) / ((int64_t)cols * 4);
    band           = band < 1 ? 1 : band > rows ? rows : band;
    float *buf     = k3_aligned_alloc(64, (size_t)band * cols * sizeof(float));
    if (!buf)
        return k3_err(K3_ERR_NOMEM, "%s: tensor '%s': out of memory", m->dir, name);
    if ((st = qmat_alloc(out, type, rows, cols))) {
        free(buf);
        k3_err_prefix("%s: tensor '%s'", m->dir, name);
        return st;
    }
    const size_t es = st_dtype_size(t->dtype);
    for (int r0 = 0; r0 < rows && !st; r0 += (int)band) {
        int n = rows - r0 < band ? rows - r0 : (int)band;
        if (!(st = st_read_f32_part(m->st, t, (int64_t)r0 * cols, (int64_t)n * cols, buf)) &&
            (st = qmat_quantize_rows(out, r0, n, buf)))
            k3_err_prefix("%s: tensor '%s'", m->dir, name);
        if (!st)
            progress(m, name, (uint64_t)n * (uint64_t)cols * es);
    }
    free(buf);
    if (!st)
        st = own(m, out->own);
    if (st) {
        qmat_free(out);
        return st;
    }
    out->own = NULL; /* freed with the model's other allocations */
    m->bytes_resident += q_wbytes(type, rows, cols) + q_sbytes(type, rows, cols);
    return K3_OK;
}

/* A weight matrix [rows, cols] read, checked and converted: used in place when stored in the
 * engine's form (k3 container at these bits), else quantized at load (matrix_banded, or
 * matrix_from_f32 for a container decoded to f32). */
static k3_status model_matrix(k3_model *m, const char *name, int rows, int cols, int bits, qmat *out) {
    rp_form   f;
    k3_status st   = rp_matrix_form(m->st, name, rows, cols, &f);
    int       want = rp_bits_type(bits);
    if (st)
        return st;
    if (f.type == want && (f.type != Q_F32 || m->map))
        return matrix_view(m, &f, rows, cols, out);
    if (f.type != want && (st = refuse_map(m, &f, want)))
        return st;
    float *w;
    if (f.type == Q_I8 || f.type == Q_I4)
        st = container_to_f32(m, &f, rows, cols, &w);
    else if (bits != 32)
        return matrix_banded(m, name, rows, cols, bits, out);
    else
        st = read_f32(m, name, (int64_t)rows * cols, 0, &w);
    if (st)
        return st;
    return matrix_from_f32(m, name, w, rows, cols, bits, out);
}

/* AttnRes weight nw ⊙ pw, kept in double. */
static k3_status model_mixw(k3_model *m, const char *norm, const char *proj, double **out) {
    int       D = m->cfg.hidden;
    float    *a = NULL, *b = NULL;
    k3_status st;
    if ((st = read_f32(m, norm, D, 0, &a)) || (st = read_f32(m, proj, D, 0, &b)))
        goto fail;
    double *w = alloc_owned(m, (size_t)D * sizeof(double));
    if (!w) {
        st = k3_err(K3_ERR_NOMEM, "model: out of memory");
        goto fail;
    }
    for (int i = 0; i < D; i++)
        w[i] = (double)a[i] * (double)b[i];
    *out = w;
fail:
    free(a);
    free(b);
    return st;
}

/* ==== layers ================================================================ */

/* A_log: per head, the first H values (spec section 3, Decision), kept as exp(A_log). */
static k3_status load_alog(k3_model *m, const char *name, int H, float **out) {
    float    *alog;
    k3_status st;
    if ((st = read_f32(m, name, H, 1, &alog)))
        return st;
    float *a = alloc_owned(m, (size_t)H * sizeof(float));
    if (!a) {
        free(alog);
        return k3_err(K3_ERR_NOMEM, "model: out of memory");
    }
    for (int h = 0; h < H; h++)
        a[h] = (float)exp((double)alog[h]);
    free(alog);
    for (int h = 0; h < H; h++)
        if (!isfinite(a[h]))
            return k3_err(K3_ERR_NUMERIC, "%s: tensor '%s': exp(A_log[%d]) overflows", m->dir, name, h);
    *out = a;
    return K3_OK;
}

/* kv_b of a k3 container (split per head, repack.h) used in place: uk_t[h] then uv[h]. */
static k3_status kvb_view(k3_model *m, const rp_form *f, const rp_kvb *k, mla_weights *w) {
    const void *wb, *sb = NULL;
    k3_status   st;
    const int   type = f->type;
    if ((st = tensor_data(m, f->w, type == Q_F32 ? 4 : 1, &wb)))
        return st;
    if (f->s && (st = tensor_data(m, f->s, 4, &sb)))
        return st;
    const st_tensor *c = f->s ? f->s : f->w;
    if ((st = check_finite(m, c->name, f->s ? sb : wb, (size_t)(c->nbytes / 4))))
        return st;
    w->uk_t = alloc_owned(m, (size_t)k->Hm * sizeof(qmat));
    w->uv   = alloc_owned(m, (size_t)k->Hm * sizeof(qmat));
    if (!w->uk_t || !w->uv)
        return k3_err(K3_ERR_NOMEM, "model: out of memory");
    const size_t hw = rp_kvb_head_wbytes(type, k), hs = rp_kvb_head_sfloats(type, k);
    const size_t wk = q_wbytes(type, k->kl, k->nope), sk = q_sbytes(type, k->kl, k->nope) / 4;
    for (int h = 0; h < k->Hm; h++) {
        const uint8_t *wh = (const uint8_t *)wb + (size_t)h * hw;
        const float   *sh = sb ? (const float *)sb + (size_t)h * hs : NULL;
        w->uk_t[h]        = (qmat){.type = type, .rows = k->kl, .cols = k->nope, .w = wh, .s = sh};
        w->uv[h] = (qmat){.type = type, .rows = k->v, .cols = k->kl, .w = wh + wk, .s = sh ? sh + sk : NULL};
    }
    progress(m, f->w->name, f->w->nbytes + (f->s ? f->s->nbytes : 0));
    return K3_OK;
}

/* kv_b of a k3 container decoded back to the release layout (Hm*(nope+v), kv_lora) in f32. */
static k3_status kvb_split_to_f32(k3_model *m, const rp_form *f, const rp_kvb *k, float **out) {
    const int   kl = k->kl, nope = k->nope, hr = k->nope + k->v;
    float      *x       = k3_aligned_alloc(64, (size_t)k->Hm * hr * kl * sizeof(float));
    float      *t       = k3_aligned_alloc(64, (size_t)kl * sizeof(float));
    int         was_map = m->map;
    k3_status   st      = K3_OK;
    mla_weights tmp     = {0};
    if (!x || !t)
        st = k3_err(K3_ERR_NOMEM, "%s: tensor '%s': out of memory", m->dir, f->w->name);
    m->map = 0; /* read into owned blocks (freed with the model) */
    if (!st)
        st = kvb_view(m, f, k, &tmp);
    m->map = was_map;
    for (int h = 0; !st && h < k->Hm; h++) {
        float *rows = x + (size_t)h * hr * kl;
        for (int i = 0; i < kl; i++) { /* uk_t row i = column i of the nope rows */
            qmat_dequant_row(&tmp.uk_t[h], i, t);
            for (int n = 0; n < nope; n++)
                rows[(size_t)n * kl + i] = t[n];
        }
        for (int r = 0; r < k->v; r++)
            qmat_dequant_row(&tmp.uv[h], r, rows + (size_t)(nope + r) * kl);
    }
    free(t);
    if (st)
        free(x);
    else
        *out = x;
    return st;
}

/* kv_b (Hm*(nope+v), kv_lora), per head nope rows then v rows: split into the absorbed per-head
 * matrices uk_t[h] = (nope rows)^T (kv_lora, nope) and uv[h] = v rows (v, kv_lora). */
static k3_status load_kvb(k3_model *m, const char *name, mla_weights *w) {
    const k3_config *c  = &m->cfg;
    int              Hm = c->n_heads, kl = c->kv_lora, nope = c->nope, vd = c->v_dim, bits = m->par.mla_bits;
    k3_status        st;
    rp_kvb           kk = {.Hm = Hm, .nope = nope, .v = vd, .kl = kl};
    rp_form          f;
    int              split, want = rp_bits_type(bits);
    float           *kvb;
    if ((st = rp_kvb_form(m->st, name, &kk, &f, &split)))
        return st;
    if (split && f.type == want)
        return kvb_view(m, &f, &kk, w); /* k3 container: in place */
    /* the release layout always needs the split below; a container at other bits is decoded */
    if ((st = refuse_map(m, &f, want)))
        return st;
    if (split)
        st = kvb_split_to_f32(m, &f, &kk, &kvb);
    else
        st = read_f32(m, name, (int64_t)Hm * (nope + vd) * kl, 0, &kvb);
    if (st)
        return st;
    w->uk_t = alloc_owned(m, (size_t)Hm * sizeof(qmat));
    w->uv   = alloc_owned(m, (size_t)Hm * sizeof(qmat));
    if (!w->uk_t || !w->uv) {
        st = k3_err(K3_ERR_NOMEM, "model: out of memory");
        goto fail;
    }
    for (int h = 0; h < Hm; h++) {
        const float *rows = kvb + (size_t)h * (nope + vd) * kl;
        float       *kt   = k3_aligned_alloc(64, (size_t)kl * nope * sizeof(float));
        float       *vv   = k3_aligned_alloc(64, (size_t)vd * kl * sizeof(float));
        if (!kt || !vv) {
            free(kt);
            free(vv);
            st = k3_err(K3_ERR_NOMEM, "model: out of memory");
            goto fail;
        }
        for (int i = 0; i < kl; i++)
            for (int n = 0; n < nope; n++)
                kt[(size_t)i * nope + n] = rows[(size_t)n * kl + i];
        memcpy(vv, rows + (size_t)nope * kl, (size_t)vd * kl * sizeof(float));
        if ((st = matrix_from_f32(m, name, kt, kl, nope, bits, &w->uk_t[h]))) {
            free(vv);
            goto fail;
        }
        if ((st = matrix_from_f32(m, name, vv, vd, kl, bits, &w->uv[h])))
            goto fail;
    }
fail:
    free(kvb);
    return st;
}

/* Where each row of the tensor table lives: a field of k3_model or of layer_weights. */
#define OFF_ROOT(f) offsetof(k3_model, f)
#define OFF_MODEL(f) offsetof(k3_model, f)
#define OFF_LAYER(f) offsetof(layer_weights, f)
#define OFF_KDA(f) offsetof(layer_weights, kda.f)
#define OFF_MLA(f) offsetof(layer_weights, mla.f)
#define OFF_DENSE(f) offsetof(layer_weights, mlp.f)
#define OFF_MOE(f) offsetof(layer_weights, moe.f)
#define OFF_EXPERT(f) 0 /* read by the expert tier */
#define X(id, scope, name, shape, alt, kind, dtype, field) [TT_##id] = OFF_##scope(field),
static const size_t field_off[TT_COUNT] = {K3_TENSORS(X)};
#undef X

typedef struct load_ctx {
    k3_model      *m;
    char          *base;     /* the k3_model or the layer_weights the walk fills        */
    layer_weights *lw;       /* the layer's weights (NULL for the globals)              */
    char           mix[192]; /* the AttnRes norm waiting for its projection (TT_K_MIX)    */
} load_ctx;

static k3_status load_embed(k3_model *m, const char *name);

/* One tensor of the table into its field: every matrix through model_matrix at its kind's bits. */
static k3_status load_one(const tt_ref *r, void *ud) {
    load_ctx        *x    = ud;
    k3_model        *m    = x->m;
    const k3_params *p    = &m->par;
    const int        kind = tt_table[r->id].kind;
    void            *dst  = x->base + field_off[r->id];
    switch (kind) {
    case TT_K_EMBED:
        return load_embed(m, r->name);
    case TT_K_VEC:
        return model_vec(m, r->name, (int)tt_numel(r->shape), dst);
    case TT_K_MIX:
        snprintf(x->mix, sizeof x->mix, "%s", r->name);
        return K3_OK;
    case TT_K_MIXP: /* the row before is its norm */
        K3_ASSERT(r->id > 0 && tt_table[r->id - 1].kind == TT_K_MIX);
        return model_mixw(m, x->mix, r->name, dst);
    case TT_K_ALOG:
        return load_alog(m, r->name, (int)r->shape.s[0], dst);
    case TT_K_KVB:
        return load_kvb(m, r->name, &x->lw->mla);
    case TT_K_PACK:
    case TT_K_SCALE:
        return K3_OK; /* routed experts: the expert tier (experts.c) */
    default:
        return model_matrix(m, r->name, (int)r->shape.s[0], (int)r->shape.s[1],
                            tt_bits(kind, p->bits, p->mla_bits, p->head_bits), dst);
    }
}

static k3_status load_layer(k3_model *m, int l) {
    const k3_config *c = &m->cfg;
    layer_weights   *w = &m->layers[l];
    load_ctx         x = {.m = m, .base = (char *)w, .lw = w};
    w->kind            = c->layer_kind[l];
    w->dense           = l < c->first_dense;
    if (w->kind != K3_LAYER_KDA && w->kind != K3_LAYER_MLA)
        return k3_err(K3_ERR_CONFIG, "%s: layer %d has no attention kind", m->dir, l);
    return tt_walk(c, l, 0, load_one, &x);
}

/* ==== model API ============================================================== */

/* embed_tokens stays in its stored dtype (F32/F16/BF16); rows convert on lookup. */
static k3_status load_embed(k3_model *m, const char *name) {
    k3_status        st = K3_OK;
    const st_tensor *t  = need(m, name, &st);
    int              V = m->cfg.vocab, D = m->cfg.hidden;
    if (!t)
        return st;
    if (t->ndim != 2 || t->shape[0] != V || t->shape[1] != D ||
        (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16))
        return k3_err(K3_ERR_FORMAT, "%s: tensor '%s': expected F32/F16/BF16 [%d, %d]", m->dir, name, V, D);
    const void *e; /* used as stored: mapped with K3_MMAP=1 */
    m->embed_dtype = t->dtype;
    if ((st = tensor_data(m, t, st_dtype_size(t->dtype), &e)))
        return st;
    m->embed = e;
    size_t n = (size_t)V * D, i = model_first_nonfinite(e, t->dtype, n);
    if (i < n)
        return k3_err(K3_ERR_NUMERIC, "%s: tensor '%s': %s at element %zu", m->dir, name,
                      isnan(elem_f32(e, t->dtype, i)) ? "NaN" : "inf", i);
    progress(m, name, t->nbytes);
    return K3_OK;
}

static k3_status load_globals(k3_model *m) {
    load_ctx x = {.m = m, .base = (char *)m};
    return tt_walk(&m->cfg, -1, 0, load_one, &x);
}

/* The memory fit (fit.h), from the tensor table: before any weight is read. Settings given
 * explicitly (m->par.set) and bits a container brought stay; the others may be lowered, and an
 * unset expert cache takes what is left. Refused: K3_ERR_NOMEM with the figures. Runs twice:
 * with m->st NULL, before any shard header is read (config.json only; its figures are a lower
 * bound, so what it refuses cannot fit), then with the shards open, for the exact plan. The
 * first run only refuses; the settings come from the second, from the original parameters. */
static k3_status model_fit(k3_model *m) {
    k3_status st;
    if ((st = fit_scan(&m->cfg, m->st, m->n_run, m->container, &m->fit_t)) ||
        (st = fit_machine_get(&m->fit_mc)))
        return st;
    int mask = m->par.set | (m->from & RP_FROM_BITS ? K3_SET_BITS : 0) |
               (m->from & RP_FROM_MLA ? K3_SET_MLA_BITS : 0) |
               (m->from & RP_FROM_HEAD ? K3_SET_HEAD_BITS : 0);
    fit_set given = {.bits       = m->par.bits,
                     .mla_bits   = m->par.mla_bits,
                     .head_bits  = m->par.head_bits,
                     .expert_gb  = m->par.expert_gb,
                     .maxt       = m->par.max_ctx,
                     .map        = m->map,
                     .chunk      = m->par.chunk,
                     .sessions   = m->par.sessions,
                     .window     = m->par.window,
                     .all_logits = m->par.logits_path != NULL};
    fit_decide(&m->fit_t, &m->fit_mc, &given, mask, &m->fit);
    m->win_max     = m->fit.set.window;
    m->expert_auto = given.expert_gb < 0;
    if (!m->fit.ok)
        return k3_err(K3_ERR_NOMEM, "%s: %s", m->dir, m->fit.msg);
    m->par.bits      = m->fit.set.bits;
    m->par.mla_bits  = m->fit.set.mla_bits;
    m->par.head_bits = m->fit.set.head_bits;
    m->par.expert_gb = m->fit.set.expert_gb;
    if (m->st)
        K3_LOG_INFO("%s: %s", m->dir, m->fit.msg);
    return K3_OK;
}

/* The Vulkan tier, given only what it needs of the model (vkt_src): sizes, the activation
 * constants and each MoE layer's shared experts. */
static k3_status open_vk(k3_model *m) {
    const qmat **sh = calloc((size_t)(m->n_run > 0 ? m->n_run : 1) * 3, sizeof *sh);
    if (!sh)
        return k3_err(K3_ERR_NOMEM, "model: out of memory");
    for (int l = 0; l < m->n_run; l++)
        if (!m->layers[l].dense) {
            const mlp_weights *w = &m->layers[l].moe.shared;
            sh[3 * l] = &w->gate, sh[3 * l + 1] = &w->up, sh[3 * l + 2] = &w->down;
        }
    vkt_src   src = {.n_layers         = m->n_run,
                     .n_experts        = m->cfg.n_experts,
                     .latent           = m->cfg.latent,
                     .situ_beta        = m->cfg.situ_beta,
                     .situ_linear_beta = m->cfg.situ_linear_beta,
                     .shared           = sh};
    k3_status st  = vkt_open(&src, &m->vk);
    free(sh);
    return st;
}

/* A k3 container (k3-repack) brings its bits (rp_run_bits, shared with --inspect): K3_BITS /
 * K3_MLA_BITS / K3_HEAD_BITS left unset keep them (the matrices are then used as stored); set
 * explicitly they win, and matrices stored at other bits are dequantized and quantized again at
 * load (e.g. K3_BITS=4 on an int8 container). K3_MMAP=1 (mapped, read-only, no heap copy) is refused with the
 * Vulkan tier: here when K3_VK asks for it, after vkt_open when it came on by itself. */
static k3_status container_params(k3_model *m) {
    rp_info   ci;
    k3_status st = rp_info_load(m->dir, &ci);
    if (st)
        return st;
    m->container = ci.present;
    if (ci.present) {
        m->from = rp_run_bits(&ci, &m->par);
        K3_LOG_INFO("%s: k3 container (bits %d, MLA %d, head %d); running at %d/%d/%d", m->dir, ci.bits,
                    ci.mla_bits, ci.head_bits, m->par.bits, m->par.mla_bits, m->par.head_bits);
    }
    if ((st = k3_setting_env_int(K3_SETTING_MMAP, &m->map)))
        return st;
    int dmin = ST_DIRECT_MIN; /* test hook K3_TEST_DIRECT_MIN: O_DIRECT from this many bytes */
    if ((st = k3_setting_env_int(K3_SETTING_TEST_DIRECT_MIN, &dmin)))
        return st;
    m->direct_min = m->par.direct ? (uint64_t)dmin : 0;
    int vk_on     = 0; /* a bad K3_VK is vkt_open's error */
    (void)k3_setting_env_int(K3_SETTING_VK, &vk_on);
    const char *vk = k3_setting_env_str(K3_SETTING_VK);
    if (m->map && vk_on)
        return k3_err(
            K3_ERR_UNSUPPORTED,
            "K3_MMAP=1 with K3_VK=%s: the Vulkan tier is not supported on mapped weights; unset one of them",
            vk);
    return K3_OK;
}

/* The first half of an open, from config.json alone (no shard header): m (calloc'ed) gets its
 * parameters, config, container bits, run layers and the memory fit's first run, which refuses
 * what cannot fit. *given: the parameters before the fit lowered anything. */
static k3_status open_plan(k3_model *m, const char *dir, const k3_params *p, k3_params *given) {
    k3_status st;
    if (!init_done && (st = k3_init())) /* a program that did not call k3_init */
        return st;
    if (p)
        m->par = *p;
    else if ((st = k3_params_default(&m->par)))
        return st;
    if (m->par.chunk < 1 || m->par.max_ctx < 1)
        return k3_err(K3_ERR_ARG, "k3_model_open: chunk %d and max_ctx %d must be >= 1", m->par.chunk,
                      m->par.max_ctx);
    if (!(m->dir = k3_strdup(dir)))
        return k3_err(K3_ERR_NOMEM, "model: out of memory");
    if ((st = cfg_load(dir, &m->cfg)) || (st = container_params(m)))
        return st;
    m->n_run = m->cfg.n_layers;
    if (m->par.n_layers) {
        if (m->par.n_layers > m->cfg.n_layers)
            return k3_err(K3_ERR_ARG, "K3_LAYERS=%d: the model has %d layers", m->par.n_layers,
                          m->cfg.n_layers);
        m->n_run = m->par.n_layers;
    }
    *given = m->par;     /* the fit below may lower what was not given */
    return model_fit(m); /* config.json only: refuse at once */
}

/* The speed estimate's line into buf (empty under a 1 GB plan), from m's plan: measures this
 * machine's kernels at the model's shapes the first time (fit_speed_get_model), so it runs only
 * after the checks of config.json and the headers. */
static void estimate_line(const k3_model *m, char *buf, size_t n) {
    if (n)
        buf[0] = 0;
    if (m->fit.plan.total + m->fit.plan.mapped < (uint64_t)1e9)
        return;
    fit_speed sp;
    double    dec, pre;
    fit_speed_get_model(m->dir, &m->fit_t, 0, m->par.chunk, m->cfg.n_active, &sp);
    fit_speed_estimate(&m->fit_t, &m->fit.set, &m->fit.plan, &sp, m->cfg.n_active, m->par.chunk, &dec, &pre);
    char ttft[512];
    fit_ttft_str(ttft, sizeof ttft, &m->fit_t, &m->fit.set, &m->fit.plan, &sp, m->cfg.n_active, m->par.chunk);
    snprintf(buf, n,
             "expected speed on this machine: decode %.3g s/token, prefill %.3g s/token; first token of a "
             "%s (%s; estimate from the memory plan and this machine's measured kernels and drive%s)",
             dec, pre, ttft, m->fit.brief, sp.sparse ? "; the drive figure is a sparse file's holes" : "");
}

/* Everything config.json and the headers can settle, before any expensive work: the config-only
 * memory fit (refuses what cannot fit), the shards' headers (st_open), every tensor the config
 * implies with its shape and dtype, and the exact fit. The speed estimate's probes, the caches and
 * the weights' reads come after it (k3_model_open). */
/* The tokenizer (tiktoken.model, tokenizer_config.json), read and checked against config.json's
 * vocab_size before any shard is opened, and kept: a bad tokenizer beside a 1.5 TB checkpoint
 * cost a whole weight load before its error when the front ends read it after the model, and
 * once checked here they borrow this one (k3_model_tok) rather than parse it again (a second
 * parse of the release's 163,584 ranks: BENCHMARKS.md, "Tokenizer at model open"). A directory
 * without tiktoken.model (the engine alone needs none) leaves m->tok NULL. */
static k3_status load_tokenizer(k3_model *m, const char *dir) {
    char        path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    if (lstat(path, &sb) < 0 && errno == ENOENT)
        return K3_OK;
    return k3_tok_load_model(dir, m->cfg.vocab, &m->tok);
}

static k3_status open_checked(k3_model *m, const char *dir, const k3_params *p) {
    k3_params given;
    k3_status st;
    if ((st = open_plan(m, dir, p, &given)) || (st = load_tokenizer(m, dir)))
        return st;
    m->par = given;
    if ((st = st_open(dir, &m->st)) || (st = cfg_check_tensors(&m->cfg, m->st)) || (st = model_fit(m)))
        return st;
    return K3_OK;
}

k3_status k3_model_open(const char *dir, const k3_params *p, k3_model **out) {
    *out = NULL;
    k3_status st;
    k3_model *m = calloc(1, sizeof *m);
    if (!m)
        return k3_err(K3_ERR_NOMEM, "model: out of memory");
    if ((st = open_checked(m, dir, p)))
        goto fail;
    const k3_config *c = &m->cfg;
    if (m->par.estimate) {
        char est[1024]; /* the line: about 200 bytes of words, the ttft part (512) and fit.brief (128) */
        estimate_line(m, est, sizeof est);
        if (est[0])
            m->par.estimate(est, m->par.progress_ud);
    }
#ifdef _OPENMP
    if (m->par.threads > 0)
        omp_set_num_threads(m->par.threads);
#endif
    /* The exact path (K3_BITS=32) computes the MXFP4 experts in float too, quantized paths use
     * int8-activation dot products, unless K3_IDOT says otherwise. (A process-wide kernel
     * setting: the model opened last decides.) */
    if (!k3_setting_env_str(K3_SETTING_IDOT))
        kern_set_idot(m->par.bits != 32);
    for (int i = 0; i < st_n_tensors(m->st); i++)
        m->load_total += st_tensor_at(m->st, i)->nbytes;
    if (!(m->layers = calloc((size_t)c->n_layers, sizeof *m->layers))) {
        st = k3_err(K3_ERR_NOMEM, "model: out of memory");
        goto fail;
    }
    if ((st = load_globals(m)))
        goto fail;
    for (int l = 0; l < m->n_run; l++)
        if ((st = load_layer(m, l)))
            goto fail;
    ex_source xs = {.st           = m->st,
                    .dir          = m->dir,
                    .cfg          = &m->cfg,
                    .n_run        = m->n_run,
                    .expert_gb    = m->par.expert_gb,
                    .direct       = m->par.direct,
                    .pipe         = m->par.pipe,
                    .load_threads = m->par.load_threads,
                    .progress     = expert_progress,
                    .ud           = m,
                    .lazy         = m->expert_auto && (double)m->fit_t.expert_all > 0.5 * m->fit_mc.avail};
    if ((st = ex_open(&xs, &m->tier)))
        goto fail;
    m->load_total -= ex_deferred_bytes(m->tier); /* read on demand, not now */
    if ((st = open_vk(m)))
        goto fail;
    if (m->map && m->vk) { /* K3_VK unset and a real GPU found: the tier came on by itself */
        st = k3_err(K3_ERR_UNSUPPORTED,
                    "K3_MMAP=1: the Vulkan tier is on (a GPU was found); set K3_VK=0 or unset K3_MMAP");
        goto fail;
    }
    st_io io;
    st_io_get(m->st, &io);
    K3_LOG_INFO("%s: %d layers (%d run), %.1f MB resident, %.1f MB mapped; loaded %llu bytes: %llu of routed "
                "experts (the expert tier's reads), the rest with %llu bytes read in %llu calls (%llu with "
                "O_DIRECT)",
                dir, c->n_layers, m->n_run, (double)m->bytes_resident / 1e6, (double)m->bytes_mapped / 1e6,
                (unsigned long long)m->load_total, (unsigned long long)ex_bytes_read(m->tier),
                (unsigned long long)io.bytes, (unsigned long long)io.calls,
                (unsigned long long)io.direct_bytes);
    *out = m;
    return K3_OK;
fail:
    k3_model_free(m);
    return st;
}

void k3_model_free(k3_model *m) {
    if (!m)
        return;
    vkt_close(m->vk);
    ex_close(m->tier);
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    if (m->st)
        st_close(m->st);
    k3_tok_free(m->tok);
    free(m->dir);
    free(m);
}

k3_status k3_model_tok(const k3_model *m, const k3_tok **out) {
    *out = m->tok;
    if (m->tok)
        return K3_OK;
    return k3_err(K3_ERR_IO,
                  "%s/tiktoken.model: missing (the model has no tokenizer: it runs on token ids, --ids)",
                  m->dir);
}

void k3_model_get_info(const k3_model *m, k3_model_info *out) {
    const k3_config *c = &m->cfg;
    memset(out, 0, sizeof *out);
    out->dir      = m->dir;
    out->n_layers = c->n_layers;
    out->hidden   = c->hidden;
    out->vocab    = c->vocab;
    for (int l = 0; l < c->n_layers; l++) {
        out->n_kda += c->layer_kind[l] == K3_LAYER_KDA;
        out->n_mla += c->layer_kind[l] == K3_LAYER_MLA;
        out->n_dense += l < c->first_dense;
    }
    out->n_moe          = c->n_layers - out->n_dense;
    out->n_experts      = c->n_experts;
    out->n_active       = c->n_active;
    out->max_ctx        = m->par.max_ctx;
    out->window         = m->win_max > m->par.chunk ? m->win_max : m->par.chunk;
    out->eos_id         = c->eos_id;
    out->gen_temp       = c->gen_temp;
    out->gen_top_p      = c->gen_top_p;
    out->bytes_resident = m->bytes_resident + (m->tier ? ex_resident_bytes(m->tier) : 0);
    out->fit            = m->fit.msg;
    out->fit_brief      = m->fit.brief;
    out->load_bytes     = m->load_total;
    if (m->st) {
        st_io io;
        st_io_get(m->st, &io);
        out->read_bytes = io.bytes, out->read_calls = io.calls, out->read_direct = io.direct_bytes;
    }
}

k3_status k3_model_set_expert_budget(k3_model *m, double gb) {
    char err[160]; /* < 0: the default; else the range of K3_EXPERT_GB and /experts */
    if (!(gb < 0) && k3_setting_check(K3_SETTING_EXPERT_GB, K3_SRC_API, gb, err, sizeof err))
        return k3_err(K3_ERR_ARG, "expert budget: %s", err);
    if (gb >= 0) { /* the memory fit holds for live changes too */
        fit_set  s = m->fit.set;
        fit_plan p;
        s.expert_gb = gb;
        fit_plan_at(&m->fit_t, &s, &p);
        if ((double)p.total > m->fit_mc.usable) {
            double most = (m->fit_mc.usable - (double)p.total + (double)p.b[FIT_EXPERT]) / 1e9;
            return k3_err(K3_ERR_NOMEM,
                          "expert cache %g GB: the plan would need %.2f GB but %.2f GB is usable (%s); at "
                          "most %.2f GB fits",
                          gb, (double)p.total / 1e9, m->fit_mc.usable / 1e9, m->fit_mc.src,
                          most > 0 ? floor(most * 100) / 100 : 0.0);
        }
    }
    return ex_set_budget(m->tier, gb);
}

double k3_model_expert_budget(const k3_model *m) {
    return ex_budget_gb(m->tier);
}
