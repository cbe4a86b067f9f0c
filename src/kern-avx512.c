/* kern-avx512.c: AVX-512 VNNI twins of the IDOT kernels (canonical order in kern-impl.h).
 *
 * DESIGN
 * - One 512-bit register holds two steps of the canonical order side by side: lanes 0-7 the
 *   even step (accumulator A), lanes 8-15 the odd step (B). A 64-byte weight load is two
 *   steps (Q_I8: groups g, g+1; nibble types: pairs p, p+1), one vpdpbusd chain gives the
 *   sixteen exact lane sums, one cvt and one FMA with the sixteen lane scales accumulate both
 *   steps. At the end A + B and the kern_sum8 tree, so every column is bit-identical to the
 *   scalar reference and to the AVX2 twins.
 * - Q_I8 (no vpsignb at 512 bits): the weight byte as an unsigned code w ^ 0x80 = w + 128 and
 *   the activation's precomputed -128 * lane sums (kern_act.nsxo, Q_I8 layout) restore w.
 *   The code is formed once per weight load and shared by every column.
 * - Nibble types read the activations in the quad layout (kern_act.q2): per two pairs the even
 *   columns of both, then the odd columns of both, so the low/high nibble codes of one 64-byte
 *   weight load meet their activations with plain loads.
 * - Matmul: up to KERN_NC512 columns per decoded weight load (register blocking: the weight
 *   codes stay in registers while each column does its own steps, in its own order, so column
 *   t does not depend on how many ran beside it). nc is a compile-time constant in each
 *   instantiation (kern_idot_avx512 switches on it) so the accumulators stay in registers.
 * - Row ends (a partial step) use masked loads, which never touch bytes past the row, and a
 *   masked FMA that leaves B alone when only the even step exists.
 * - Compiled for the baseline target with target attributes; reached only after
 *   kern_isa_ok(KERN_AVX512) said yes.
 */
#include "kern-impl.h"

#if KERN_BUILD_AVX512
#include <immintrin.h>

#define Z      __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")))
#define INLINE __attribute__((always_inline)) inline

static inline void pf_ahead(const void *p, int pf) {
    if (pf)
        __builtin_prefetch((const void *)((uintptr_t)p + (unsigned)pf), 0, 3);
}

/* acc = [A | B]: A + B, then ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)) as kern_sum8. */
Z static inline float sum16(__m512 acc) {
    __m256 v  = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* Mask of the first n (0..64) bytes. */
static inline __mmask64 bytes_mask(size_t n) { return n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1; }

/* One double step of a column: acc += cvt(isum) * dv; only the even half when half. */
Z static INLINE __m512 fma_step(__m512i isum, __m512 dv, __m512 acc, int half) {
    __m512 f = _mm512_cvtepi32_ps(isum);
    return half ? _mm512_mask3_fmadd_ps(f, dv, acc, 0x00FF) : _mm512_fmadd_ps(f, dv, acc);
}

/* ---- Q_I8 ------------------------------------------------------------------------------ */

/* Groups g, g+1 (weight codes wu = w ^ 0x80) for nc columns. */
Z static INLINE void i8_step(__m512i wu, const kern_act *a, int nc, int g, int half, __m512 *acc) {
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(a[c].nsxo + g * 8), wu, _mm512_loadu_si512(a[c].q + g * 32));
        acc[c]    = fma_step(s, _mm512_loadu_ps(a[c].d8 + g * 8), acc[c], half);
    }
}

Z static INLINE void idot_i8_n(const int8_t *w, const kern_act *a, int nc, int n, int pf, float *res) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const int     ng   = (n + 31) / 32;
    __m512        acc[KERN_NC512];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        acc[c] = _mm512_setzero_ps();
    int g = 0;
    for (; (g + 2) * 32 <= n; g += 2) {
        pf_ahead(w + g * 32, pf);
        i8_step(_mm512_xor_si512(_mm512_loadu_si512(w + g * 32), flip), a, nc, g, 0, acc);
    }
    if (g < ng) { /* the last one or two groups, the last maybe partial */
        __m512i v = _mm512_maskz_loadu_epi8(bytes_mask((size_t)(n - g * 32)), w + g * 32);
        i8_step(_mm512_xor_si512(v, flip), a, nc, g, g + 1 >= ng, acc);
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        res[c] = sum16(acc[c]);
}

/* ---- nibble types ------------------------------------------------------------------------- */

/* Pairs p, p+1 (weight bytes b) for nc columns; sv: the weight scales of the 16 lanes. */
Z static INLINE void nib_step(__m512i b, __m512i lut, __m512 sv, const kern_act *a, int nc, int p, int half,
                              __m512 *acc) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(b, m4));
    const __m512i hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(b, 4), m4));
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(a[c].nsxo + p * 8), lo, _mm512_loadu_si512(a[c].q2 + p * 64));
        s         = _mm512_dpbusd_epi32(s, hi, _mm512_loadu_si512(a[c].q2 + p * 64 + 64));
        acc[c]    = fma_step(s, _mm512_mul_ps(sv, _mm512_loadu_ps(a[c].d8 + p * 8)), acc[c], half);
    }
}

/* Lanes 0-7 = x, 8-15 = y. */
Z static inline __m512 two8(float x, float y) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(x)), _mm256_set1_ps(y), 1);
}

/* 2^(e-128) of the 4 exponents e[0..cnt) (0 past cnt) spread 4 lanes each (kern_e8m0_half). */
Z static inline __m512 e8m0_half16(const uint8_t *e, int cnt) {
    __m128i v  = _mm_cvtepu8_epi32(_mm_maskz_loadu_epi8((__mmask16)((1u << cnt) - 1), e));
    __m128i nr = _mm_slli_epi32(_mm_sub_epi32(v, _mm_set1_epi32(1)), 23);
    __m128i sb = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), v);
    __m128i h  = _mm_blendv_epi8(nr, sb, _mm_cmpgt_epi32(_mm_set1_epi32(2), v));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                 _mm512_castps128_ps512(_mm_castsi128_ps(h)));
}

/* Q_I4 (mx = 0: scales s) or Q_MXFP4 (mx = 1: exponents e), nc columns. */
Z static INLINE void idot_nib_n(const uint8_t *w, const float *s, const uint8_t *e, int mx, const kern_act *a, int nc,
                                int n, int pf, float *res) {
    const __m512i lut = mx ? _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0))
                           : _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    const int     np = (n + 63) / 64, ng = mx ? n / 32 : 0;
    const size_t  rb = mx ? (size_t)n / 2 : (size_t)(n + 1) / 2;
    __m512        acc[KERN_NC512];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        acc[c] = _mm512_setzero_ps();
    int p = 0;
    for (; (size_t)(p + 2) * 32 <= rb; p += 2) {
        pf_ahead(w + p * 32, pf);
        const __m512 sv = mx ? e8m0_half16(e + 2 * p, 4) : two8(s[p], s[p + 1]);
        nib_step(_mm512_loadu_si512(w + p * 32), lut, sv, a, nc, p, 0, acc);
    }
    if (p < np) { /* one or two pairs left, the last maybe partial; a missing group scales 0 */
        const int    two = p + 1 < np;
        const __m512 sv  = mx ? e8m0_half16(e + 2 * p, ng - 2 * p < 4 ? ng - 2 * p : 4)
                              : two8(s[p], two ? s[p + 1] : 0.0f);
        nib_step(_mm512_maskz_loadu_epi8(bytes_mask(rb - (size_t)p * 32), w + p * 32), lut, sv, a, nc, p, !two, acc);
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        res[c] = sum16(acc[c]);
}

/* Rows [r0, r1) for NC columns. */
Z static INLINE void idot_rows(const qmat *m, const kern_act *a, int nc, float *const *y, int r0, int r1) {
    const int n = m->cols, pf = kern_prefetch_bytes();
    float     res[KERN_NC512];
    for (int r = r0; r < r1; r++) {
        switch (m->type) {
        case Q_I8:
            idot_i8_n((const int8_t *)m->w + (size_t)r * n, a, nc, n, pf, res);
            for (int c = 0; c < nc; c++)
                res[c] *= m->s[r];
            break;
        case Q_I4:
            idot_nib_n((const uint8_t *)m->w + (size_t)r * ((n + 1) / 2),
                       m->s + (size_t)r * ((n + Q_I4_GROUP - 1) / Q_I4_GROUP), NULL, 0, a, nc, n, pf, res);
            break;
        case Q_MXFP4:
            idot_nib_n((const uint8_t *)m->w + (size_t)r * (n / 2), NULL, m->e + (size_t)r * (n / Q_MXFP4_GROUP), 1, a,
                       nc, n, pf, res);
            break;
        default: K3_ASSERT(!"kern_idot_avx512: type without integer weights");
        }
        for (int c = 0; c < nc; c++)
            y[c][r] = res[c];
    }
}

#define NC_FN(k) \
    Z static void idot_rows_##k(const qmat *m, const kern_act *a, float *const *y, int r0, int r1) { \
        idot_rows(m, a, k, y, r0, r1);                                                              \
    }
NC_FN(1)
NC_FN(2)
NC_FN(3)
NC_FN(4)
NC_FN(5)
NC_FN(6)
NC_FN(7)
NC_FN(8)
static_assert(KERN_NC512 == 8, "one instantiation per column count");

void kern_idot_avx512(const qmat *m, const kern_act *a, int nc, float *const *y, int r0, int r1) {
    static void (*const fn[KERN_NC512])(const qmat *, const kern_act *, float *const *, int, int) = {
        idot_rows_1, idot_rows_2, idot_rows_3, idot_rows_4, idot_rows_5, idot_rows_6, idot_rows_7, idot_rows_8};
    K3_ASSERT(nc >= 1 && nc <= KERN_NC512);
    fn[nc - 1](m, a, y, r0, r1);
}

#else /* no AVX-512 build: never selected (kern_isa_ok says no), the reference stands in */

void kern_idot_avx512(const qmat *m, const kern_act *a, int nc, float *const *y, int r0, int r1) {
    for (int c = 0; c < nc; c++)
        kern_idot_ref(m, &a[c], y[c], r0, r1);
}

#endif
