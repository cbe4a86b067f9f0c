/* kern.c: matrix-vector kernels over the qmat formats of quant.h: the scalar reference path
 * (the oracle every faster path is tested against), the IDOT activation quantizer, and the
 * dispatch of qmat_matvec / qmat_matmul to the scalar or AVX2 twins (kern-avx2.c).
 *
 * DESIGN
 * - Each kernel computes rows [r0, r1); the entry points split the rows into (ith, nth)
 *   partitions inside one OpenMP parallel region. A row's arithmetic never depends on the
 *   partition, so results are the same at every thread count.
 * - qmat_matmul runs the very same row kernel per column, on blocks of rows small enough to stay
 *   in L2 while the n columns pass over them: the weights stream from memory once, and column t
 *   is bit-identical to qmat_matvec on column t (what chunked prefill relies on).
 * - IDOT activations are quantized once per call by one shared scalar function, so both twins
 *   see identical int8 inputs. The canonical IDOT order is documented in kern-impl.h.
 * - Selection (kern_isa, kern_idot) is read from K3_NOAVX2 / K3_IDOT once, then overridable.
 */
#include "kern-impl.h"

#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>

const float  q_e2m1[8]          = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
const int8_t kern_mxfp4_i8[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

size_t q_wbytes(int type, int rows, int cols) {
    size_t r = (size_t)rows;
    switch (type) {
    case Q_F32: return r * (size_t)cols * 4;
    case Q_I8: return r * (size_t)cols;
    case Q_I4: return r * (size_t)((cols + 1) / 2);
    case Q_MXFP4: return r * (size_t)(cols / 2);
    }
    return 0;
}

size_t q_sbytes(int type, int rows, int cols) {
    size_t r = (size_t)rows;
    switch (type) {
    case Q_I8: return r * 4;
    case Q_I4: return r * (size_t)((cols + Q_I4_GROUP - 1) / Q_I4_GROUP) * 4;
    case Q_MXFP4: return r * (size_t)(cols / Q_MXFP4_GROUP);
    }
    return 0;
}

/* ==== scalar reference: exact-float ======================================================= */

/* One output row: dot(W[r], x) in the matrix's format; float accumulation in row order. */
static float row_dot(const qmat *m, int r, const float *x) {
    const int n   = m->cols;
    float     acc = 0.0f;
    switch (m->type) {
    case Q_F32: {
        const float *w = (const float *)m->w + (size_t)r * n;
        for (int c = 0; c < n; c++)
            acc += w[c] * x[c];
        break;
    }
    case Q_I8: {
        const int8_t *w = (const int8_t *)m->w + (size_t)r * n;
        for (int c = 0; c < n; c++)
            acc += (float)w[c] * x[c];
        acc *= m->s[r];
        break;
    }
    case Q_I4: {
        const uint8_t *w = (const uint8_t *)m->w + (size_t)r * ((n + 1) / 2);
        const float   *s = m->s + (size_t)r * ((n + Q_I4_GROUP - 1) / Q_I4_GROUP);
        for (int g = 0; g * Q_I4_GROUP < n; g++) {
            float part = 0.0f;
            int   end  = (g + 1) * Q_I4_GROUP < n ? (g + 1) * Q_I4_GROUP : n;
            for (int c = g * Q_I4_GROUP; c < end; c++) {
                int nib = (c & 1) ? (w[c >> 1] >> 4) : (w[c >> 1] & 15);
                part += (float)(nib - 8) * x[c];
            }
            acc += part * s[g];
        }
        break;
    }
    case Q_MXFP4: {
        const uint8_t *w = (const uint8_t *)m->w + (size_t)r * (n / 2);
        const uint8_t *e = m->e + (size_t)r * (n / Q_MXFP4_GROUP);
        for (int g = 0; g < n / Q_MXFP4_GROUP; g++) {
            float part = 0.0f;
            for (int c = g * Q_MXFP4_GROUP; c < (g + 1) * Q_MXFP4_GROUP; c++) {
                int   nib = (c & 1) ? (w[c >> 1] >> 4) : (w[c >> 1] & 15);
                float v   = q_e2m1[nib & 7];
                part += ((nib & 8) ? -v : v) * x[c];
            }
            acc += part * ldexpf(1.0f, (int)e[g] - 127);
        }
        break;
    }
    default: K3_ASSERT(!"unknown qmat type");
    }
    return acc;
}

void kern_rows_ref(const qmat *m, const float *x, float *y, int r0, int r1) {
    for (int r = r0; r < r1; r++)
        y[r] = row_dot(m, r, x);
}

/* ==== IDOT: activation quantization and the scalar reference =============================== */

void kern_quantize_x(int type, const float *x, int cols, int8_t *xq, float *xd) {
    const int ng    = (cols + Q_IDOT_GROUP - 1) / Q_IDOT_GROUP;
    const int inter = type == Q_I4 || type == Q_MXFP4; /* evens then odds within a group */
    for (int g = 0; g < ng; g++) {
        const int    c0  = g * Q_IDOT_GROUP;
        const int    len = cols - c0 < Q_IDOT_GROUP ? cols - c0 : Q_IDOT_GROUP;
        const float *xg  = x + c0;
        int8_t      *qg  = xq + c0;
        float        amax = 0.0f;
        int          bad  = 0;
        for (int c = 0; c < len; c++) {
            bad |= !isfinite(xg[c]);
            amax = fmaxf(amax, fabsf(xg[c]));
        }
        memset(qg, 0, Q_IDOT_GROUP);
        if (bad || amax == 0.0f) {
            xd[g] = bad ? NAN : 0.0f; /* a NaN/inf activation makes the output NaN */
            continue;
        }
        const float inv = 127.0f / amax;
        for (int c = 0; c < len; c++) {
            float v = roundf(xg[c] * inv);
            int   p = inter ? (c >> 1) + ((c & 1) << 4) : c;
            qg[p]   = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
        }
        xd[g] = amax / 127.0f;
    }
}

/* Integer weight at position p of IDOT group g of row r (0 past the row's end). */
static int idot_w(const qmat *m, int r, int g, int p) {
    const int n = m->cols;
    switch (m->type) {
    case Q_I8: {
        int c = g * Q_IDOT_GROUP + p;
        return c < n ? ((const int8_t *)m->w)[(size_t)r * n + c] : 0;
    }
    case Q_I4:
    case Q_MXFP4: {
        int c = g * Q_IDOT_GROUP + (p < 16 ? 2 * p : 2 * (p - 16) + 1);
        if (c >= n)
            return 0;
        size_t  rb  = m->type == Q_I4 ? (size_t)(n + 1) / 2 : (size_t)n / 2;
        uint8_t b   = ((const uint8_t *)m->w)[(size_t)r * rb + (size_t)(c >> 1)];
        int     nib = (c & 1) ? b >> 4 : b & 15;
        return m->type == Q_I4 ? nib - 8 : kern_mxfp4_i8[nib];
    }
    }
    K3_ASSERT(!"idot_w: type without integer weights");
    return 0;
}

/* wscale(g) of the canonical order (kern-impl.h). */
static float idot_wscale(const qmat *m, int r, int g) {
    switch (m->type) {
    case Q_I4: return m->s[(size_t)r * ((m->cols + Q_I4_GROUP - 1) / Q_I4_GROUP) + g / 2];
    case Q_MXFP4: return kern_e8m0_half(m->e[(size_t)r * (m->cols / Q_MXFP4_GROUP) + g]);
    }
    return 1.0f;
}

void kern_idot_ref(const qmat *m, const int8_t *xq, const float *xd, float *y, int r0, int r1) {
    const int ng = (m->cols + Q_IDOT_GROUP - 1) / Q_IDOT_GROUP;
    for (int r = r0; r < r1; r++) {
        float acc[8] = {0};
        for (int g = 0; g < ng; g++) {
            const float d = m->type == Q_I8 ? xd[g] : idot_wscale(m, r, g) * xd[g];
            for (int j = 0; j < 8; j++) {
                int isum = 0;
                for (int k = 4 * j; k < 4 * j + 4; k++)
                    isum += idot_w(m, r, g, k) * xq[g * Q_IDOT_GROUP + k];
                acc[j] += (float)isum * d;
            }
        }
        y[r] = m->type == Q_I8 ? kern_sum8(acc) * m->s[r] : kern_sum8(acc);
    }
}

/* ==== selection ============================================================================= */

static atomic_int sel_isa  = -1; /* enum kern_isa, -1 = not read yet */
static atomic_int sel_idot = -1;

static int env_flag(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) != 0 : dflt;
}

int kern_set_isa(int isa) {
    int v = isa == KERN_AVX2 && kern_cpu_avx2() ? KERN_AVX2 : KERN_SCALAR;
    atomic_store(&sel_isa, v);
    return v;
}

int kern_isa(void) {
    int v = atomic_load(&sel_isa);
    return v >= 0 ? v : kern_set_isa(env_flag("K3_NOAVX2", 0) ? KERN_SCALAR : KERN_AVX2);
}

void kern_set_idot(int on) { atomic_store(&sel_idot, on != 0); }

int kern_idot(void) {
    int v = atomic_load(&sel_idot);
    if (v < 0) {
        v = env_flag("K3_IDOT", 1);
        atomic_store(&sel_idot, v);
    }
    return v;
}

/* ==== entry points ========================================================================== */

/* Rows of one block of the matmul: about 256 KiB of weights, so the block stays in L2 while
 * the columns pass over it. */
static int block_rows(const qmat *m) {
    size_t rb = (q_wbytes(m->type, 1, m->cols) + q_sbytes(m->type, 1, m->cols));
    size_t b  = rb ? (256u << 10) / rb : 1;
    return b < 1 ? 1 : b > 1024 ? 1024 : (int)b;
}

/* y[t][rows] for t < n: the whole call, partitioned (ith, nth) over rows. Exactly one of x
 * (exact-float) or xq/xd (IDOT, each column ncol_q bytes / ng floats apart) is used. */
static void run(const qmat *m, const float *x, const int8_t *xq, const float *xd, int n,
                float *y) {
    const int          ng   = (m->cols + Q_IDOT_GROUP - 1) / Q_IDOT_GROUP;
    const int          avx2 = kern_isa() == KERN_AVX2;
    const kern_rows_fn fr   = avx2 ? kern_rows_avx2 : kern_rows_ref;
    const kern_idot_fn fq   = avx2 ? kern_idot_avx2 : kern_idot_ref;
    const int          br   = n > 1 ? block_rows(m) : m->rows;
    const long         work = (long)m->rows * m->cols * n;
#pragma omp parallel if (work > 65536)
    {
        const int ith = omp_get_thread_num(), nth = omp_get_num_threads();
        const int r0 = (int)((long)m->rows * ith / nth), r1 = (int)((long)m->rows * (ith + 1) / nth);
        for (int b0 = r0; b0 < r1; b0 += br) {
            const int b1 = r1 - b0 < br ? r1 : b0 + br;
            for (int t = 0; t < n; t++) {
                float *yt = y + (size_t)t * m->rows;
                if (xq)
                    fq(m, xq + (size_t)t * ng * Q_IDOT_GROUP, xd + (size_t)t * ng, yt, b0, b1);
                else
                    fr(m, x + (size_t)t * m->cols, yt, b0, b1);
            }
        }
    }
}

static void matmul(const qmat *m, const float *x, int n, float *y) {
    if (n <= 0)
        return;
    if (m->type == Q_F32 || !kern_idot()) {
        run(m, x, NULL, NULL, n, y);
        return;
    }
    /* IDOT: quantize every column once (the same function for every path and n). */
    const int ng = (m->cols + Q_IDOT_GROUP - 1) / Q_IDOT_GROUP;
    int8_t   *xq = malloc((size_t)ng * Q_IDOT_GROUP * (size_t)n);
    float    *xd = malloc((size_t)ng * (size_t)n * sizeof(float));
    K3_ASSERT(xq && xd); /* a few KiB per column: out of memory here is not recoverable */
    for (int t = 0; t < n; t++)
        kern_quantize_x(m->type, x + (size_t)t * m->cols, m->cols, xq + (size_t)t * ng * Q_IDOT_GROUP,
                        xd + (size_t)t * ng);
    run(m, NULL, xq, xd, n, y);
    free(xq);
    free(xd);
}

void qmat_matvec(const qmat *m, const float *x, float *y) { matmul(m, x, 1, y); }

void qmat_matmul(const qmat *m, const float *x, int n, float *y) { matmul(m, x, n, y); }
