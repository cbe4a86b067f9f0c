/* kern.c: matrix-vector kernels over the qmat formats of quant.h: the scalar reference path
 * (the oracle every faster path is tested against), the IDOT activation quantizer, and the
 * dispatch of qmat_matvec / qmat_matmul to the scalar, AVX2 (kern-avx2.c) or AVX-512 VNNI
 * (kern-avx512.c) twins.
 *
 * DESIGN
 * - Each kernel computes rows [r0, r1); the entry points split the rows into (ith, nth)
 *   partitions inside one OpenMP parallel region. A row's arithmetic never depends on the
 *   partition, so results are the same at every thread count.
 * - ONE ROUNDING ORDER (the group order, kern-impl.h) for every level and every column count:
 *   per group of 32 columns an exact integer dot, then one float FMA per group in group order.
 *   So column t of any matmul is bit-identical to qmat_matvec on column t, at every level
 *   (what chunked prefill and batched decode rely on). qmat_matmul runs the row kernel per
 *   column, on blocks of rows small enough to stay in L2 while the n columns pass over them:
 *   the weights stream from memory once. The AVX2 IDOT path takes KERN_NC columns per decoded
 *   weight row, the AVX-512 path up to KERN_NC512 (16 rows in the lanes: kern-avx512.c), each
 *   column doing exactly its own steps.
 *   Wide products run kernels with the columns in the lanes, in the same order: at the avx512
 *   level KERN_GRP_MIN(type)+ columns (kern-grp.c), at the amx level 2+ columns (the tiles,
 *   kern-amx.c).
 * - Exact-float rows (Q_F32, the router and the KDA gates at the defaults; every type with
 *   K3_IDOT=0) have one rounding order too, THE LANE ORDER below: kern_rows_avx2's eight lanes
 *   and horizontal tree, which every SIMD level runs, written in plain C for the scalar level
 *   (fmaf per product: a libm call where the baseline target has no FMA instruction; the
 *   scalar level is the slow reference).
 * - IDOT activations are quantized once per call by one shared function (kern_act_make: the
 *   quantizer and the layout, each with an AVX-512 twin that writes the same bytes), so every
 *   kernel sees identical int8 inputs. The group order is documented in kern-impl.h.
 * - Selection (kern_isa, kern_idot) lives in kern-cpu.c.
 */
#include "kern-impl.h"
#include "prof.h"

#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>

const float  q_e2m1[8]         = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
const int8_t kern_mxfp4_i8[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

size_t q_wbytes(int type, int rows, int cols) {
    size_t r = (size_t)rows;
    switch (type) {
    case Q_F32:
        return r * (size_t)cols * 4;
    case Q_I8:
        return r * (size_t)cols;
    case Q_I4:
        return r * (size_t)((cols + 1) / 2);
    case Q_MXFP4:
        return r * (size_t)(cols / 2);
    }
    return 0;
}

size_t q_sbytes(int type, int rows, int cols) {
    size_t r = (size_t)rows;
    switch (type) {
    case Q_I8:
        return r * 4;
    case Q_I4:
        return r * (size_t)((cols + Q_I4_GROUP - 1) / Q_I4_GROUP) * 4;
    case Q_MXFP4:
        return r * (size_t)(cols / Q_MXFP4_GROUP);
    }
    return 0;
}

/* ==== scalar reference: exact-float ======================================================= */

/* THE LANE ORDER of the exact-float rows (Q_F32 always; the other types with K3_IDOT=0): the one
 * rounding order of kern_rows_avx2, which every SIMD level runs (the AVX-512 levels too), written
 * here in plain C so the scalar level gives the same bits. Eight lanes l = column mod 8 of each
 * block of 8; products accumulate by fmaf (vfmadd: one rounding); a block of 32 columns feeds
 * lane accumulators in the order of kern-avx2.c (Q_F32: four of them, one per 8 columns; the
 * decoded types: two, a for columns 0-7 and 16-23, b for 8-15 and 24-31); sum8 is the horizontal
 * tree of hsum8. Element-wise products and sums outside fmaf round separately (the Makefile's
 * -ffp-contract=off keeps the compiler from fusing them, at every level). */

/* ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)): hsum8 of kern-avx2.c */
static float sum8(const float v[8]) {
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

/* a[l] = fmaf(w[l], x[l], a[l]), l < 8: one _mm256_fmadd_ps */
static void fma8(float a[8], const float *w, const float *x) {
    for (int l = 0; l < 8; l++)
        a[l] = fmaf(w[l], x[l], a[l]);
}

/* dot32_ps of kern-avx2.c: 32 decoded weights wv against x[32] into the lane sums a and b */
static void dot32(const float wv[32], const float *x, float a[8], float b[8]) {
    fma8(a, wv, x);
    fma8(b, wv + 8, x + 8);
    fma8(a, wv + 16, x + 16);
    fma8(b, wv + 24, x + 24);
}

static float row_f32(const float *w, const float *x, int n) {
    float a[4][8] = {{0}}, v[8];
    int   c       = 0;
    for (; c + 32 <= n; c += 32)
        for (int k = 0; k < 4; k++)
            fma8(a[k], w + c + 8 * k, x + c + 8 * k);
    for (; c + 8 <= n; c += 8)
        fma8(a[0], w + c, x + c);
    for (int l = 0; l < 8; l++)
        v[l] = (a[0][l] + a[1][l]) + (a[2][l] + a[3][l]);
    float acc = sum8(v);
    for (; c < n; c++)
        acc += w[c] * x[c];
    return acc;
}

static float row_i8(const int8_t *w, const float *x, int n) {
    float a[8] = {0}, b[8] = {0}, wv[32], v[8];
    int   c = 0;
    for (; c + 32 <= n; c += 32) {
        for (int k = 0; k < 32; k++)
            wv[k] = (float)w[c + k];
        dot32(wv, x + c, a, b);
    }
    for (; c + 8 <= n; c += 8) {
        for (int k = 0; k < 8; k++)
            wv[k] = (float)w[c + k];
        fma8(a, wv, x + c);
    }
    for (int l = 0; l < 8; l++)
        v[l] = a[l] + b[l];
    float acc = sum8(v);
    for (; c < n; c++)
        acc += (float)w[c] * x[c];
    return acc;
}

/* rows_nib of kern-avx2.c: ng32 groups of 32 nibble columns (w packed, low nibble = even
 * column) decoded through lut, each group's lane sums a + b scaled into acc by one fmaf per lane;
 * acc starts from 0 here (the caller adds it to its own). */
static void nib_groups(const uint8_t *w, const float *x, int ng32, const int8_t lut[16], const float *gscale,
                       float acc[8]) {
    for (int l = 0; l < 8; l++)
        acc[l] = 0.0f;
    for (int g = 0; g < ng32; g++) {
        float wv[32], a[8] = {0}, b[8] = {0};
        for (int k = 0; k < 32; k++) {
            const uint8_t byte = w[g * 16 + k / 2];
            wv[k]              = (float)lut[(k & 1) ? byte >> 4 : byte & 15];
        }
        dot32(wv, x + g * 32, a, b);
        for (int l = 0; l < 8; l++)
            acc[l] = fmaf(a[l] + b[l], gscale[g], acc[l]);
    }
}

static const int8_t i4_lut[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

static float row_i4(const uint8_t *w, const float *s, const float *x, int n) {
    const int full   = n / 32;
    float     acc[8] = {0}, t[8], gs[2];
    for (int g = 0; g + 2 <= full; g += 2) { /* one 64-column scale group (two of 32) at a time */
        gs[0] = gs[1] = s[g / 2];
        nib_groups(w + g * 16, x + g * 32, 2, i4_lut, gs, t);
        for (int l = 0; l < 8; l++)
            acc[l] += t[l];
    }
    return kern_i4_tail(w, s, x, (full & ~1) * 32, n, sum8(acc));
}

float kern_i4_tail(const uint8_t *w, const float *s, const float *x, int c0, int n, float sum) {
    for (int c = c0; c < n; c += Q_I4_GROUP) {
        float part = 0.0f;
        int   end  = c + Q_I4_GROUP < n ? c + Q_I4_GROUP : n;
        for (int k = c; k < end; k++) {
            int nib = (k & 1) ? (w[k >> 1] >> 4) : (w[k >> 1] & 15);
            part += (float)(nib - 8) * x[k];
        }
        sum += part * s[c / Q_I4_GROUP];
    }
    return sum;
}

/* Doubled e2m1 weights times 2^(e-128), 16 groups of 32 at a time (kern-avx2.c's row_mxfp4). */
static float row_mxfp4(const uint8_t *w, const uint8_t *e, const float *x, int n) {
    float acc[8] = {0}, t[8], gs[16];
    for (int g0 = 0; g0 < n / 32; g0 += 16) {
        int cnt = n / 32 - g0 < 16 ? n / 32 - g0 : 16;
        for (int g = 0; g < cnt; g++)
            gs[g] = kern_e8m0_half(e[g0 + g]);
        nib_groups(w + g0 * 16, x + g0 * 32, cnt, kern_mxfp4_i8, gs, t);
        for (int l = 0; l < 8; l++)
            acc[l] += t[l];
    }
    return sum8(acc);
}

/* One output row: dot(W[r], x) in the matrix's format, in the lane order. */
static float row_dot(const qmat *m, int r, const float *x) {
    const int n = m->cols;
    switch (m->type) {
    case Q_F32:
        return row_f32((const float *)m->w + (size_t)r * n, x, n);
    case Q_I8:
        return row_i8((const int8_t *)m->w + (size_t)r * n, x, n) * m->s[r];
    case Q_I4:
        return row_i4((const uint8_t *)m->w + (size_t)r * ((n + 1) / 2),
                      m->s + (size_t)r * ((n + Q_I4_GROUP - 1) / Q_I4_GROUP), x, n);
    case Q_MXFP4:
        return row_mxfp4((const uint8_t *)m->w + (size_t)r * (n / 2), m->e + (size_t)r * (n / Q_MXFP4_GROUP),
                         x, n);
    }
    K3_ASSERT(!"unknown qmat type");
    return 0.0f;
}

void kern_rows_ref(const qmat *m, const float *x, float *y, int r0, int r1) {
    for (int r = r0; r < r1; r++)
        y[r] = row_dot(m, r, x);
}

/* ==== IDOT: activation quantization and the scalar reference =============================== */

static size_t round32(size_t n) {
    return (n + 31) & ~(size_t)31;
}

size_t kern_act_bytes(int cols) {
    size_t np = (size_t)(cols + 63) / 64, np2 = (np + 1) & ~(size_t)1;
    return np * 64 + np2 * 64 + 2 * round32(np * 2 * sizeof(float)) + np * 16 * sizeof(float) +
           np * 16 * sizeof(int32_t);
}

void kern_act_quant_ref(const float *x, int cols, int ng, int8_t *q, float *d) {
    for (int g = 0; g < ng; g++) {
        const int c0   = g * Q_IDOT_GROUP;
        const int len  = cols - c0 < Q_IDOT_GROUP ? cols - c0 : Q_IDOT_GROUP;
        float     amax = 0.0f;
        int       bad  = 0;
        for (int c = 0; c < len; c++) {
            bad |= !isfinite(x[c0 + c]);
            amax = fmaxf(amax, fabsf(x[c0 + c]));
        }
        if (len <= 0 || bad || amax == 0.0f) {
            d[g] = bad ? NAN : 0.0f; /* a NaN/inf activation makes the output NaN */
            continue;
        }
        /* round half away from zero as trunc(v + copysign(0.5, v)): no libm call, and
         * |v| <= 127 (+ rounding) so the clamp only guards amax * inv > 127 */
        const float inv = 127.0f / amax;
        for (int c = c0; c < c0 + len; c++) {
            float v  = x[c] * inv;
            int   qv = (int)(v + copysignf(0.5f, v));
            q[c]     = (int8_t)(qv > 127 ? 127 : qv < -127 ? -127 : qv);
        }
        d[g] = amax / 127.0f;
    }
}

/* Sum of q[0..n). */
static int isum(const int8_t *q, int n) {
    int s = 0;
    for (int k = 0; k < n; k++)
        s += q[k];
    return s;
}

void kern_act_layout_ref(int type, int np, kern_act *a) {
    const int8_t *nat = type == Q_I8 ? a->q : a->q2;
    if (type == Q_I8) { /* steps are groups */
        for (int g = 0; g < 2 * np; g++)
            a->cg[g] = (float)(-128 * isum(nat + g * 32, 32));
        return;
    }
    const int off = type == Q_MXFP4 ? KERN_MXFP4_OFF : 8;
    for (int pr = 0; pr < np; pr++) {
        const int8_t *n64 = nat + pr * 64;
        int8_t       *q64 = a->q + pr * 64;
        for (int j = 0; j < 8; j++) { /* lane j: pair columns 8j..8j+7 */
            a->d8[pr * 8 + j]   = a->d[2 * pr + (j >> 2)];
            a->nsxo[pr * 8 + j] = -off * isum(n64 + 8 * j, 8);
        }
        for (int i = 0; i < 32; i++) { /* pair layout: even columns, then odd */
            q64[i]      = n64[2 * i];
            q64[32 + i] = n64[2 * i + 1];
        }
    }
    /* quad layout from the pair layout: per two pairs their even halves, then their odd halves */
    const int np2 = (np + 1) & ~1;
    for (int pr = 0; pr < np2; pr++)
        for (int h = 0; h < 2; h++) {
            int8_t *dst = a->q2 + (pr >> 1) * 128 + h * 64 + (pr & 1) * 32;
            if (pr < np)
                memcpy(dst, a->q + pr * 64 + h * 32, 32);
            else
                memset(dst, 0, 32);
        }
}

void kern_act_make(int type, const float *x, int cols, void *buf, kern_act *a) {
    const int np = (cols + 63) / 64, np2 = (np + 1) & ~1;
    char     *p = buf;
    a->q        = (int8_t *)p;
    a->q2       = a->q + (size_t)np * 64;
    a->d        = (float *)(void *)(a->q2 + (size_t)np2 * 64);
    a->d8       = (float *)(void *)((char *)a->d + round32((size_t)np * 2 * sizeof(float)));
    a->nsxo     = (int32_t *)(void *)(a->d8 + (size_t)np * 16);
    a->cg       = (float *)(void *)(a->nsxo + (size_t)np * 16);
    memset(a->q, 0, (size_t)(np + np2) * 64);
    memset(a->d8, 0,
           (size_t)np * 16 * (sizeof(float) + sizeof(int32_t)) + round32((size_t)np * 2 * sizeof(float)));
    /* codes in natural column order: Q_I8 keeps them there, nibble types pass through q2 */
    int8_t *nat = type == Q_I8 ? a->q : a->q2;
    if (KERN_BUILD_AVX512 && kern_isa() >= KERN_AVX512) {
        kern_act_quant_avx512(x, cols, 2 * np, nat, a->d);
        kern_act_layout_avx512(type, np, a);
    } else {
        kern_act_quant_ref(x, cols, 2 * np, nat, a->d);
        kern_act_layout_ref(type, np, a);
    }
}

/* Position of column c in the activation layout of type (kern-impl.h). */
static int act_pos(int type, int c) {
    if (type == Q_I8)
        return c;
    int o = c & 63;
    return (c & ~63) + ((o & 1) ? 32 + (o >> 1) : (o >> 1));
}

/* Integer weight of column c of row r (nibble - 8, doubled e2m1, or int8). */
static int idot_w(const qmat *m, int r, int c) {
    const int n = m->cols;
    switch (m->type) {
    case Q_I8:
        return ((const int8_t *)m->w)[(size_t)r * n + c];
    case Q_I4:
    case Q_MXFP4: {
        size_t  rb  = m->type == Q_I4 ? (size_t)(n + 1) / 2 : (size_t)n / 2;
        uint8_t b   = ((const uint8_t *)m->w)[(size_t)r * rb + (size_t)(c >> 1)];
        int     nib = (c & 1) ? b >> 4 : b & 15;
        return m->type == Q_I4 ? nib - 8 : kern_mxfp4_i8[nib];
    }
    }
    K3_ASSERT(!"idot_w: type without integer weights");
    return 0;
}

/* wscale(g) of the group order (kern-impl.h). */
static float idot_wscale(const qmat *m, int r, int g) {
    switch (m->type) {
    case Q_I4:
        return m->s[(size_t)r * ((m->cols + Q_I4_GROUP - 1) / Q_I4_GROUP) + g / 2];
    case Q_MXFP4:
        return kern_e8m0_half(m->e[(size_t)r * (m->cols / Q_MXFP4_GROUP) + g]);
    }
    return 1.0f;
}

void kern_idot_ref(const qmat *m, const kern_act *a, float *y, int r0, int r1) {
    const int n = m->cols, ng = (n + Q_IDOT_GROUP - 1) / Q_IDOT_GROUP, i8 = m->type == Q_I8;
    for (int r = r0; r < r1; r++) {
        float acc = 0.0f;
        for (int g = 0; g < ng; g++) { /* the group order (kern-impl.h): one fmaf per group */
            int32_t isum = 0;
            for (int c = g * Q_IDOT_GROUP; c < (g + 1) * Q_IDOT_GROUP && c < n; c++)
                isum += idot_w(m, r, c) * a->q[act_pos(m->type, c)];
            acc = fmaf((float)isum, i8 ? a->d[g] : idot_wscale(m, r, g) * a->d[g], acc);
        }
        y[r] = i8 ? acc * m->s[r] : acc;
    }
}

/* ==== entry points ========================================================================== */

/* Rows of one block: a matmul's about 256 KiB of weights, so the block stays in L2 while the
 * columns pass over it; a matvec's about 128 KiB (KERN_MV_BLOCK), the unit the threads take. */
static int block_rows(const qmat *m, size_t bytes) {
    size_t rb = (q_wbytes(m->type, 1, m->cols) + q_sbytes(m->type, 1, m->cols));
    size_t b  = rb ? bytes / rb : 1;
    b         = b >= 16 ? b & ~(size_t)15 : b; /* whole AVX-512 row sub-blocks and tiles */
    return b < 1 ? 1 : b > 1024 ? 1024 : (int)b;
}

/* The kernels of one call, chosen once. */
typedef struct run_ctx {
    const qmat  *m;
    const float *x;   /* exact-float columns, cols floats apart (act NULL)   */
    kern_act    *act; /* IDOT columns, or NULL                               */
    int          n, isa;
    float       *y;
} run_ctx;

/* Rows [b0, b1) of every column. */
static void run_block(const run_ctx *c, int b0, int b1) {
    const qmat        *m   = c->m;
    const int          isa = c->isa, avx2 = isa != KERN_SCALAR, n = c->n;
    const kern_rows_fn fr = avx2 ? kern_rows_avx2 : kern_rows_ref;
    const kern_idot_fn fq = isa >= KERN_AVX2_VNNI ? kern_idot_vnni : avx2 ? kern_idot_avx2 : kern_idot_ref;
    void (*const fnc)(const qmat *, const kern_act *, float *const *, int, int) =
        isa >= KERN_AVX2_VNNI ? kern_idot_nc_vnni : kern_idot_nc_avx2;
    const kern_act *act = c->act;
    float          *y   = c->y;
    int             t   = 0;
    if (act && isa >= KERN_AVX512) /* up to KERN_NC512 columns per weight load */
        for (; t < n; t += KERN_NC512) {
            const int nc = n - t < KERN_NC512 ? n - t : KERN_NC512;
            float    *yc[KERN_NC512];
            for (int k = 0; k < nc; k++)
                yc[k] = y + (size_t)(t + k) * m->rows;
            kern_idot_avx512(m, &act[t], nc, yc, b0, b1);
        }
    if (act && avx2) /* KERN_NC columns per weight decode */
        for (; t + KERN_NC <= n; t += KERN_NC) {
            float *yc[KERN_NC];
            for (int k = 0; k < KERN_NC; k++)
                yc[k] = y + (size_t)(t + k) * m->rows;
            fnc(m, &act[t], yc, b0, b1);
        }
    for (; t < n; t++) {
        float *yt = y + (size_t)t * m->rows;
        if (act)
            fq(m, &act[t], yt, b0, b1);
        else
            fr(m, c->x + (size_t)t * m->cols, yt, b0, b1);
    }
}

/* y[i][t][rows of m[i]] for t < n, for the k matrices m[i] that share the input columns: the
 * whole call in one OpenMP parallel region. Exact-float: act is NULL and x holds the columns,
 * cols floats apart. IDOT (every m[i] of one type and cols): act[n] is filled first, once for
 * all k, in the same region (columns split between the threads, then the region's barrier),
 * from x into qbuf (kern_act_bytes(cols) per column), so quantizing costs no region of its own.
 * Rows go to the threads in blocks of br: by default thread ith takes the rows
 * [rows*ith/nth, rows*(ith+1)/nth) of each matrix; with K3_ROWSPLIT=1 each thread takes the
 * next free block (so a thread the machine slows down holds up only its current block). */
static void run(const qmat *const *m, int k, const float *x, kern_act *act, char *qbuf, int n,
                float *const *y) {
    const int dyn = kern_rows_dynamic(), isa = kern_isa();
    long      work = 0;
    for (int i = 0; i < k; i++)
        work += (long)m[i]->rows * m[i]->cols * n;
#pragma omp parallel if (work > K3_PAR_MIN_MATMUL)
    {
        const int ith = omp_get_thread_num(), nth = omp_get_num_threads();
        if (act) { /* IDOT: quantize every column once (the same function for every path and n) */
            const int    cols = m[0]->cols;
            const size_t ab   = kern_act_bytes(cols);
            prof_t       t0   = ith ? (prof_t){0, 0} : prof_begin();
#pragma omp for schedule(static) nowait
            for (int t = 0; t < n; t++)
                kern_act_make(m[0]->type, x + (size_t)t * cols, cols, qbuf + (size_t)t * ab, &act[t]);
            if (!ith)
                prof_end(PROF_QUANT, t0); /* thread 0's share; the wait below is the matmul's */
#pragma omp barrier
        }
        for (int i = 0; i < k; i++) { /* no barrier between the matrices: each writes its own y */
            const qmat   *mi  = m[i];
            const int     br  = n > 1 ? block_rows(mi, 256u << 10)
                                : dyn ? block_rows(mi, KERN_MV_BLOCK)
                                      : mi->rows;
            const int     nbl = (mi->rows + br - 1) / br;
            const run_ctx c   = {mi, x, act, n, isa, y[i]};
            if (dyn) {
#pragma omp for schedule(dynamic, 1) nowait
                for (int bi = 0; bi < nbl; bi++)
                    run_block(&c, bi * br, bi + 1 < nbl ? (bi + 1) * br : mi->rows);
            } else {
                const int r0 = (int)((long)mi->rows * ith / nth),
                          r1 = (int)((long)mi->rows * (ith + 1) / nth);
                for (int b0 = r0; b0 < r1; b0 += br)
                    run_block(&c, b0, r1 - b0 < br ? r1 : b0 + br);
            }
        }
    }
}

/* k matrices over the same n input columns; one quantization when they can share it. */
static void matmul(const qmat *const *m, int k, const float *x, int n, float *const *y) {
    if (n <= 0 || k <= 0)
        return;
    int share = kern_idot();
    for (int i = 0; i < k; i++)
        share &= m[i]->type != Q_F32 && m[i]->type == m[0]->type && m[i]->cols == m[0]->cols;
    if (!share) {
        for (int i = 0; i < k; i++) {
            if (m[i]->type == Q_F32 || !kern_idot()) {
                run(&m[i], 1, x, NULL, NULL, n, &y[i]);
                continue;
            }
            matmul(&m[i], 1, x, n, &y[i]);
        }
        return;
    }
    if (n >= 2 && m[0]->cols > 0 && kern_isa() == KERN_AMX) { /* tiles, the same order (kern-amx.c) */
        for (int i = 0; i < k; i++)
            kern_amx_matmul(m[i], x, n, y[i]);
        return;
    }
    if (n >= KERN_GRP_MIN(m[0]->type) && m[0]->cols > 0 && kern_isa() == KERN_AVX512) {
        for (int i = 0; i < k; i++) /* wide products: columns in the lanes (kern-grp.c), the same bits */
            kern_grp_matmul(m[i], x, n, y[i]);
        return;
    }
    char     *buf = k3_aligned_alloc(32, kern_act_bytes(m[0]->cols) * (size_t)n);
    kern_act *act = malloc((size_t)n * sizeof *act);
    K3_ASSERT(buf && act); /* a few KiB per column: out of memory here is not recoverable */
    run(m, k, x, act, buf, n, y);
    free(act);
    free(buf);
}

void qmat_matvec(const qmat *m, const float *x, float *y) {
    matmul(&m, 1, x, 1, &y);
}

void qmat_matmul(const qmat *m, const float *x, int n, float *y) {
    matmul(&m, 1, x, n, &y);
}

void qmat_matmul_many(const qmat *const *m, int k, const float *x, int n, float *const *y) {
    K3_ASSERT(k >= 0);
    for (int i = 1; i < k; i++)
        K3_ASSERT(m[i]->cols == m[0]->cols);
    matmul(m, k, x, n, y);
}

int kern_idot_weight(const qmat *m, int r, int c) {
    return idot_w(m, r, c);
}
float kern_idot_wscale(const qmat *m, int r, int g) {
    return idot_wscale(m, r, g);
}
