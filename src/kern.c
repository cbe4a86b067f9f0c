/* kern.c: matrix-vector kernels over the qmat formats of quant.h.
 *
 * DESIGN
 * This file is the scalar reference path (the oracle every faster path is tested against).
 * Each kernel computes rows [r0, r1) so it can be split as (ith, nth) partitions; the public
 * entry points parallelise over rows with OpenMP.
 */
#include "quant.h"

#include <math.h>

const float q_e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

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

/* One output row: dot(W[r], x) in the matrix's format; float accumulation in row order. */
static float row_dot(const qmat *m, int r, const float *x) {
    const int n = m->cols;
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
        const uint8_t *w  = (const uint8_t *)m->w + (size_t)r * ((n + 1) / 2);
        const float   *s  = m->s + (size_t)r * ((n + Q_I4_GROUP - 1) / Q_I4_GROUP);
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

void qmat_matvec(const qmat *m, const float *x, float *y) {
#pragma omp parallel for schedule(static) if (m->rows * (long)m->cols > 65536)
    for (int r = 0; r < m->rows; r++)
        y[r] = row_dot(m, r, x);
}

void qmat_matmul(const qmat *m, const float *x, int n, float *y) {
#pragma omp parallel for schedule(static) if (m->rows * (long)m->cols > 65536)
    for (int r = 0; r < m->rows; r++)
        for (int t = 0; t < n; t++)
            y[(size_t)t * m->rows + r] = row_dot(m, r, x + (size_t)t * m->cols);
}
