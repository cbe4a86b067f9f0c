/* quant.c: load-time quantization of float weight matrices to Q_I8 and Q_I4 (layouts in quant.h).
 *
 * DESIGN
 * - Per-row work only: every row is quantized independently, so rows run in parallel (OpenMP)
 *   and a repacker that streams a tensor row by row gets the same bytes as the engine.
 * - Bit-identical everywhere: only IEEE float multiplies, divides, adds and roundf, in a fixed
 *   order, no FMA contraction (-std=c11) and no dependence on the rounding mode. The int4 scale
 *   search compares error sums computed in that fixed order, so the same D wins on any machine.
 * - Ownership: qmat_quantize makes one allocation (weights, then 64-byte aligned scales), kept
 *   in qmat.own and released by qmat_free. Views of checkpoint bytes (MXFP4) have own = NULL.
 */
#include "quant.h"

#include <math.h>
#include <stdlib.h>

/* Candidate divisors of the int4 group scale s = maxabs / D, in tie-break order (see quant.h). */
static const float i4_div[] = {7.0f, 7.5f, 8.0f, 8.5f, 9.0f};

/* max(m, |x|) as fmaxf(m, fabsf(x)) gives it for a non-NaN m (a NaN x leaves m), without the libm
 * call gcc emits for fmaxf at -O2 (ISO fmax semantics). */
static inline float absmax(float m, float x) {
    const float a = fabsf(x);
    return a > m ? a : m;
}

/* The largest |x[c]| of x[n] (NaNs left out), 0 for n <= 0. Eight running maxima that the compiler
 * keeps in one vector register: the maximum of a set does not depend on the order it is taken in,
 * so the result is the one element-by-element loop's, and loading a large float matrix no longer
 * spends most of its time in a serial fmaxf chain (the release's lm_head has 1.2 G weights). */
static float row_absmax(const float *x, int n) {
    float m[8] = {0};
    int   c    = 0;
    for (; c + 8 <= n; c += 8)
        for (int k = 0; k < 8; k++)
            m[k] = absmax(m[k], x[c + k]);
    float r = 0.0f;
    for (; c < n; c++)
        r = absmax(r, x[c]);
    for (int k = 0; k < 8; k++)
        r = absmax(r, m[k]);
    return r;
}

void q_quantize_row_i8(const float *x, int n, int8_t *q, float *s) {
    const float amax = row_absmax(x, n);
    if (amax == 0.0f) {
        memset(q, 0, (size_t)n);
        *s = 0.0f;
        return;
    }
    const float inv = 127.0f / amax;
    for (int c = 0; c < n; c++) {
        float v = roundf(x[c] * inv);
        q[c]    = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
    }
    *s = amax / 127.0f;
}

static int i4_code(float x, float inv) {
    float v = roundf(x * inv);
    return v > 7.0f ? 7 : v < -8.0f ? -8 : (int)v;
}

/* Squared error of quantizing x[n] with scale s (inverse inv), summed in index order. */
static float i4_err(const float *x, int n, float s, float inv) {
    float err = 0.0f;
    for (int c = 0; c < n; c++) {
        float d = x[c] - (float)i4_code(x[c], inv) * s;
        err += d * d;
    }
    return err;
}

void q_quantize_row_i4(const float *x, int n, uint8_t *q, float *s) {
    memset(q, 0x88, (size_t)(n + 1) / 2); /* every nibble 8 = value 0, incl. an odd row's pad */
    for (int g = 0; g * Q_I4_GROUP < n; g++) {
        const float *xg   = x + g * Q_I4_GROUP;
        const int    len  = n - g * Q_I4_GROUP < Q_I4_GROUP ? n - g * Q_I4_GROUP : Q_I4_GROUP;
        const float  amax = row_absmax(xg, len);
        if (amax == 0.0f) {
            s[g] = 0.0f;
            continue;
        }
        float best_s = amax / i4_div[0], best_err = INFINITY;
        for (size_t k = 0; k < sizeof i4_div / sizeof i4_div[0]; k++) {
            float sc  = amax / i4_div[k];
            float err = i4_err(xg, len, sc, 1.0f / sc);
            if (err < best_err) {
                best_err = err;
                best_s   = sc;
            }
        }
        const float inv = 1.0f / best_s;
        for (int c = 0; c < len; c++) {
            int      col = g * Q_I4_GROUP + c;
            unsigned nib = (unsigned)(i4_code(xg[c], inv) + 8);
            uint8_t *b   = &q[col >> 1];
            *b           = (col & 1) ? (uint8_t)((*b & 0x0F) | (nib << 4)) : (uint8_t)((*b & 0xF0) | nib);
        }
        s[g] = best_s;
    }
}

/* ---- whole matrices ------------------------------------------------------------------------ */

static size_t round_up(size_t n, size_t a) {
    return (n + a - 1) / a * a;
}

/* Allocate out's storage for type x rows x cols (quant.h). */
k3_status qmat_alloc(qmat *out, int type, int rows, int cols) {
    memset(out, 0, sizeof *out);
    if (type != Q_F32 && type != Q_I8 && type != Q_I4)
        return k3_err(K3_ERR_ARG, "qmat_quantize: type %d, expected Q_F32, Q_I8 or Q_I4", type);
    if (rows <= 0 || cols <= 0)
        return k3_err(K3_ERR_ARG, "qmat_quantize: shape %d x %d, expected positive", rows, cols);
    size_t wb = round_up(q_wbytes(type, rows, cols), 64), sb = q_sbytes(type, rows, cols);
    char  *p = k3_aligned_alloc(64, wb + sb);
    if (!p)
        return k3_err(K3_ERR_NOMEM, "qmat_quantize: %zu bytes for a %d x %d matrix", wb + sb, rows, cols);
    out->type = type;
    out->rows = rows;
    out->cols = cols;
    out->w    = p;
    out->s    = sb ? (const float *)(p + wb) : NULL;
    out->own  = p;
    return K3_OK;
}

/* Quantize row r from f32 src into m (whose storage is writable: it is m->own). */
static void quantize_row(qmat *m, int r, const float *src) {
    const int n = m->cols;
    char     *w = m->own;
    float    *s = (float *)(uintptr_t)m->s; /* our own allocation: writable */
    switch (m->type) {
    case Q_F32:
        memcpy(w + (size_t)r * n * 4, src, (size_t)n * 4);
        break;
    case Q_I8:
        q_quantize_row_i8(src, n, (int8_t *)w + (size_t)r * n, s + r);
        break;
    case Q_I4:
        q_quantize_row_i4(src, n, (uint8_t *)w + (size_t)r * ((n + 1) / 2),
                          s + (size_t)r * ((n + Q_I4_GROUP - 1) / Q_I4_GROUP));
        break;
    }
}

/* First non-finite element of row (column index) or -1. */
static int row_nonfinite(const float *x, int n) {
    for (int c = 0; c < n; c++)
        if (!isfinite(x[c]))
            return c;
    return -1;
}

/* Rows [r0, r0+n) of m from src rows 0..n-1, f32 (bf16 == NULL) or bf16 (f32 == NULL). Returns
 * K3_ERR_NUMERIC naming the first non-finite weight (matrix row), K3_ERR_NOMEM; rows before a
 * bad one may be written. */
static k3_status quantize_band(qmat *out, int r0, int n, const float *f32, const uint16_t *bf16) {
    const int cols  = out->cols;
    int       bad_r = -1, bad_c = -1, nomem = 0;
#pragma omp        parallel if ((long)n * cols > K3_PAR_MIN_OPS)
    {
               float *tmp = bf16 ? malloc((size_t)cols * sizeof(float)) : NULL;
               if (bf16 && !tmp) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp for schedule(static)
        for (int r = 0; r < n; r++) {
            const float *src = f32 ? f32 + (size_t)r * cols : tmp;
            if (!src)
                continue;
            if (bf16)
                for (int c = 0; c < cols; c++)
                    tmp[c] = k3_bf16_to_f32(bf16[(size_t)r * cols + c]);
            int c = row_nonfinite(src, cols);
            if (c >= 0) {
#pragma omp critical(quant_bad)
                if (bad_r < 0 || r < bad_r) {
                    bad_r = r;
                    bad_c = c;
                }
                continue;
            }
            quantize_row(out, r0 + r, src);
        }
        free(tmp);
    }
    if (nomem)
        return k3_err(K3_ERR_NOMEM, "qmat_quantize: row buffer of %d floats", cols);
    if (bad_r >= 0)
        return k3_err(K3_ERR_NUMERIC, "weight [%d][%d] is not finite", r0 + bad_r, bad_c);
    return K3_OK;
}

/* Shared driver: src is f32 (bf16 == NULL) or bf16 (f32 == NULL). */
static k3_status quantize(qmat *out, int type, const float *f32, const uint16_t *bf16, int rows, int cols) {
    k3_status st = qmat_alloc(out, type, rows, cols);
    if (st == K3_OK && (st = quantize_band(out, 0, rows, f32, bf16)) != K3_OK)
        qmat_free(out);
    return st;
}

k3_status qmat_quantize_rows(qmat *m, int r0, int n, const float *w) {
    K3_ASSERT(m->own && r0 >= 0 && n >= 0 && r0 + n <= m->rows);
    return quantize_band(m, r0, n, w, NULL);
}

k3_status qmat_quantize(qmat *out, int type, const float *w, int rows, int cols) {
    return quantize(out, type, w, NULL, rows, cols);
}

k3_status qmat_quantize_bf16(qmat *out, int type, const uint16_t *w, int rows, int cols) {
    return quantize(out, type, NULL, w, rows, cols);
}

void qmat_free(qmat *m) {
    if (!m)
        return;
    free(m->own);
    memset(m, 0, sizeof *m);
}

void qmat_dequant_row(const qmat *m, int r, float *out) {
    const int n = m->cols;
    switch (m->type) {
    case Q_F32:
        memcpy(out, (const float *)m->w + (size_t)r * n, (size_t)n * 4);
        break;
    case Q_I8: {
        const int8_t *w = (const int8_t *)m->w + (size_t)r * n;
        for (int c = 0; c < n; c++)
            out[c] = (float)w[c] * m->s[r];
        break;
    }
    case Q_I4: {
        const uint8_t *w = (const uint8_t *)m->w + (size_t)r * ((n + 1) / 2);
        const float   *s = m->s + (size_t)r * ((n + Q_I4_GROUP - 1) / Q_I4_GROUP);
        for (int c = 0; c < n; c++) {
            int nib = (c & 1) ? (w[c >> 1] >> 4) : (w[c >> 1] & 15);
            out[c]  = (float)(nib - 8) * s[c / Q_I4_GROUP];
        }
        break;
    }
    case Q_MXFP4: {
        const uint8_t *w = (const uint8_t *)m->w + (size_t)r * (n / 2);
        const uint8_t *e = m->e + (size_t)r * (n / Q_MXFP4_GROUP);
        for (int c = 0; c < n; c++) {
            int   nib = (c & 1) ? (w[c >> 1] >> 4) : (w[c >> 1] & 15);
            float v   = q_e2m1[nib & 7] * ldexpf(1.0f, (int)e[c / Q_MXFP4_GROUP] - 127);
            out[c]    = (nib & 8) ? -v : v;
        }
        break;
    }
    default:
        K3_ASSERT(!"unknown qmat type");
    }
}
