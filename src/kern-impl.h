/* kern-impl.h: what the scalar reference kernels (kern.c) and their AVX2 twins (kern-avx2.c)
 * share: row-range kernel signatures, the IDOT activation layout and the exact scale helpers.
 *
 * IDOT canonical order (both twins compute exactly this, so they agree bit for bit):
 *   activations: per group g of 32 columns, xq[g][32] int8 and xd[g] (x ~ xq * xd), zero padded
 *     past cols. Layout within a group: natural column order for Q_I8; for Q_I4 and Q_MXFP4
 *     (nibble-packed: low nibble = even column) positions 0..15 hold the even columns and
 *     16..31 the odd ones, so position p pairs with nibble (p < 16 ? low : high) of byte p % 16.
 *   per row: eight float lanes acc[0..7] = 0; for each group g, d = wscale(g) * xd[g] and for
 *     each lane j: acc[j] += (float)isum_j * d, with isum_j the exact integer sum of the four
 *     products at positions 4j..4j+3 (what maddubs + madd leave in 32-bit lane j);
 *     y = ((acc0+acc4) + (acc2+acc6)) + ((acc1+acc5) + (acc3+acc7))   (then * s[r] for Q_I8).
 *   wscale: Q_I8 1 (row scale applied last), Q_I4 s[r][g/2], Q_MXFP4 2^(e-128) on the doubled
 *     integers {0,1,2,3,4,6,8,12}.
 */
#pragma once
#include "quant.h"

/* Rows [r0, r1) of y = W x, exact-float numerics. */
typedef void (*kern_rows_fn)(const qmat *m, const float *x, float *y, int r0, int r1);
/* Rows [r0, r1) of y = W x on IDOT activations xq[ngroups*32], xd[ngroups]. Not for Q_F32. */
typedef void (*kern_idot_fn)(const qmat *m, const int8_t *xq, const float *xd, float *y, int r0,
                             int r1);

void kern_rows_ref(const qmat *m, const float *x, float *y, int r0, int r1);
void kern_idot_ref(const qmat *m, const int8_t *xq, const float *xd, float *y, int r0, int r1);
/* AVX2+FMA twins (kern-avx2.c); call only when kern_cpu_avx2() is true. */
void kern_rows_avx2(const qmat *m, const float *x, float *y, int r0, int r1);
void kern_idot_avx2(const qmat *m, const int8_t *xq, const float *xd, float *y, int r0, int r1);
int  kern_cpu_avx2(void);

/* Quantize x[cols] for a matrix of this type into xq[ngroups*32], xd[ngroups]. */
void kern_quantize_x(int type, const float *x, int cols, int8_t *xq, float *xd);

/* 2^(e-128) exactly (subnormal for e < 2), the scale of the doubled MXFP4 integers. */
static inline float kern_e8m0_half(uint8_t e) {
    uint32_t u = e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e;
    float    f;
    memcpy(&f, &u, 4);
    return f;
}

/* Doubled e2m1 values by nibble (sign bit 3), exact int8. */
extern const int8_t kern_mxfp4_i8[16];

/* The fixed 8-lane reduction of the IDOT canonical order. */
static inline float kern_sum8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}
