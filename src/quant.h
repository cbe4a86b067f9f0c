/* quant.h: weight matrix formats and the matrix-vector kernels' interface (kern.c, quant.c).
 *
 * Every weight matrix of the engine is a qmat: rows x cols, y = W x (W row-major, one row per
 * output). Block layouts (bits per weight in brackets):
 *
 *   Q_F32    w: float [rows][cols]                                   [32]
 *   Q_I8     w: int8  [rows][cols],        s: float [rows]           [8 + 32/cols]
 *            value = w[r][c] * s[r]            (symmetric, per row)
 *   Q_I4     w: uint8 [rows][(cols+1)/2],  s: float [rows][(cols+63)/64]   [4 + 32/64 = 4.5]
 *            low nibble = even column, high nibble = odd column;
 *            value = (nibble - 8) * s[r][c/64]  (symmetric, groups of 64 along a row)
 *   Q_MXFP4  w: uint8 [rows][cols/2],      e: uint8 [rows][cols/32]  [4 + 8/32 = 4.25]
 *            the checkpoint's compressed-tensors layout as stored (spec section 4):
 *            low nibble = even column; nibble = sign bit 3 + e2m1 index bits 0-2 into
 *            {0, .5, 1, 1.5, 2, 3, 4, 6}; value = e2m1 * 2^(e[r][c/32] - 127). cols % 32 == 0.
 *
 * Kernels are written as (ith, nth) row partitions and parallelised with OpenMP over rows.
 */
#pragma once
#include "k3-impl.h"
#include <stdint.h>

enum qtype { Q_F32 = 0, Q_I8 = 1, Q_I4 = 2, Q_MXFP4 = 3 };

#define Q_I4_GROUP    64
#define Q_MXFP4_GROUP 32

typedef struct qmat {
    int         type;    /* enum qtype                                        */
    int         rows;    /* output width                                      */
    int         cols;    /* input width                                       */
    const void *w;       /* weights, layout per type (see above)              */
    const float *s;      /* Q_I8: [rows]; Q_I4: [rows][(cols+63)/64]; else NULL */
    const uint8_t *e;    /* Q_MXFP4: ue8m0 exponents [rows][cols/32]; else NULL */
} qmat;

/* e2m1 magnitudes indexed by the low 3 bits of a nibble. */
extern const float q_e2m1[8];

/* Bytes of the weight data (w) and of the scales (s or e) for a matrix of this type and shape. */
size_t q_wbytes(int type, int rows, int cols);
size_t q_sbytes(int type, int rows, int cols);

/* y[rows] = W x[cols]. */
void qmat_matvec(const qmat *m, const float *x, float *y);
/* Y[n][rows] = W X[n][cols]: n input vectors, each weight row read once for all n. */
void qmat_matmul(const qmat *m, const float *x, int n, float *y);
