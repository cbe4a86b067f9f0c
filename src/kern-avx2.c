/* kern-avx2.c: AVX2+FMA twins of the reference kernels in kern.c.
 *
 * DESIGN
 * - Compiled for the baseline target; every function that uses AVX2 carries
 *   __attribute__((target("avx2,fma"))) and is only reached after kern_cpu_avx2() said yes, so
 *   one binary runs everywhere. Non-x86 builds get stubs that are never selected.
 * - Exact-float kernels: weights are decoded to f32 (nibbles through pshufb tables, bytes through
 *   cvtepi8) and multiplied with FMA into vector accumulators; per-group scales are applied as
 *   one FMA per group. These agree with row_dot within float reassociation.
 * - IDOT kernels: weights become signed int8 in the activation layout of kern-impl.h; the
 *   signed x signed dot without VNNI uses |w| (sign_epi8(w, w)) as the unsigned operand of
 *   maddubs and sign_epi8(x, w) as the signed one (|w| <= 128, |x| <= 127: an int16 pair sum is
 *   at most 32512, no saturation); madd with ones gives the eight 32-bit lane sums of the
 *   canonical order, then cvt, mul by the group scale, add (no FMA: the scalar twin rounds the
 *   product and the sum separately). Bit-identical to kern_idot_ref.
 * - Row tails (a partial group) go through the same vector code on a zero-padded copy.
 */
#include "kern-impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))

int kern_cpu_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), the same tree as kern_sum8. */
AVX2 static inline float hsum8(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

/* 8 int8 (low 8 bytes of b) -> 8 floats */
AVX2 static inline __m256 i8x8_ps(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)); }

/* 32 int8 in natural column order (as two 16-byte halves) dotted with x[32], into a and b. */
AVX2 static inline void dot32_ps(__m128i lo, __m128i hi, const float *x, __m256 *a, __m256 *b) {
    *a = _mm256_fmadd_ps(i8x8_ps(lo), _mm256_loadu_ps(x), *a);
    *b = _mm256_fmadd_ps(i8x8_ps(_mm_srli_si128(lo, 8)), _mm256_loadu_ps(x + 8), *b);
    *a = _mm256_fmadd_ps(i8x8_ps(hi), _mm256_loadu_ps(x + 16), *a);
    *b = _mm256_fmadd_ps(i8x8_ps(_mm_srli_si128(hi, 8)), _mm256_loadu_ps(x + 24), *b);
}

/* 16 packed bytes (32 nibbles, low = even column) -> int8 in natural order via table lut. */
AVX2 static inline void nib32_i8(__m128i b, __m128i lut, __m128i *lo, __m128i *hi) {
    const __m128i m4 = _mm_set1_epi8(15);
    __m128i       ev = _mm_shuffle_epi8(lut, _mm_and_si128(b, m4));
    __m128i       od = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), m4));
    *lo              = _mm_unpacklo_epi8(ev, od); /* columns 0..15  */
    *hi              = _mm_unpackhi_epi8(ev, od); /* columns 16..31 */
}

/* ==== exact-float ========================================================================== */

AVX2 static float row_f32(const float *w, const float *x, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int    c  = 0;
    for (; c + 32 <= n; c += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + c), _mm256_loadu_ps(x + c), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + c + 8), _mm256_loadu_ps(x + c + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + c + 16), _mm256_loadu_ps(x + c + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + c + 24), _mm256_loadu_ps(x + c + 24), a3);
    }
    for (; c + 8 <= n; c += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + c), _mm256_loadu_ps(x + c), a0);
    float acc = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; c < n; c++)
        acc += w[c] * x[c];
    return acc;
}

AVX2 static float row_i8(const int8_t *w, const float *x, int n) {
    __m256 a = _mm256_setzero_ps(), b = a;
    int    c = 0;
    for (; c + 32 <= n; c += 32)
        dot32_ps(_mm_loadu_si128((const __m128i *)(w + c)),
                 _mm_loadu_si128((const __m128i *)(w + c + 16)), x + c, &a, &b);
    for (; c + 8 <= n; c += 8)
        a = _mm256_fmadd_ps(i8x8_ps(_mm_loadl_epi64((const __m128i *)(w + c))), _mm256_loadu_ps(x + c), a);
    float acc = hsum8(_mm256_add_ps(a, b));
    for (; c < n; c++)
        acc += (float)w[c] * x[c];
    return acc;
}

/* Groups of 32 nibble-coded columns: w packed row, sc(g) the scale of group g (of 32), lut the
 * nibble table. ng32 full groups; columns past 32*ng32 handled by the caller. */
AVX2 static __m256 rows_nib(const uint8_t *w, const float *x, int ng32, __m128i lut,
                            const float *gscale) {
    __m256 acc = _mm256_setzero_ps();
    for (int g = 0; g < ng32; g++) {
        __m128i lo, hi;
        __m256  a = _mm256_setzero_ps(), b = a;
        nib32_i8(_mm_loadu_si128((const __m128i *)(w + g * 16)), lut, &lo, &hi);
        dot32_ps(lo, hi, x + g * 32, &a, &b);
        acc = _mm256_fmadd_ps(_mm256_add_ps(a, b), _mm256_set1_ps(gscale[g]), acc);
    }
    return acc;
}

AVX2 static float row_i4(const uint8_t *w, const float *s, const float *x, int n) {
    const __m128i lut  = _mm_setr_epi8(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const int     full = n / 32;
    float         gs[2];
    __m256        acc = _mm256_setzero_ps();
    /* scale per 32-group is s[g/2]: run one 64-group (two 32-groups) at a time */
    for (int g = 0; g + 2 <= full; g += 2) {
        gs[0] = gs[1] = s[g / 2];
        acc = _mm256_add_ps(acc, rows_nib(w + g * 16, x + g * 32, 2, lut, gs));
    }
    float sum = hsum8(acc);
    for (int c = (full & ~1) * 32; c < n; c += Q_I4_GROUP) { /* partial 64-group: scalar */
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

AVX2 static float row_mxfp4(const uint8_t *w, const uint8_t *e, const float *x, int n) {
    const __m128i lut = _mm_loadu_si128((const __m128i *)kern_mxfp4_i8);
    __m256        acc = _mm256_setzero_ps();
    float         gs[16];
    for (int g0 = 0; g0 < n / 32; g0 += 16) {
        int cnt = n / 32 - g0 < 16 ? n / 32 - g0 : 16;
        for (int g = 0; g < cnt; g++)
            gs[g] = kern_e8m0_half(e[g0 + g]);
        acc = _mm256_add_ps(acc, rows_nib(w + g0 * 16, x + g0 * 32, cnt, lut, gs));
    }
    return hsum8(acc);
}

AVX2 void kern_rows_avx2(const qmat *m, const float *x, float *y, int r0, int r1) {
    const int n = m->cols;
    for (int r = r0; r < r1; r++) {
        switch (m->type) {
        case Q_F32: y[r] = row_f32((const float *)m->w + (size_t)r * n, x, n); break;
        case Q_I8: y[r] = row_i8((const int8_t *)m->w + (size_t)r * n, x, n) * m->s[r]; break;
        case Q_I4:
            y[r] = row_i4((const uint8_t *)m->w + (size_t)r * ((n + 1) / 2),
                          m->s + (size_t)r * ((n + Q_I4_GROUP - 1) / Q_I4_GROUP), x, n);
            break;
        case Q_MXFP4:
            y[r] = row_mxfp4((const uint8_t *)m->w + (size_t)r * (n / 2),
                             m->e + (size_t)r * (n / Q_MXFP4_GROUP), x, n);
            break;
        default: K3_ASSERT(!"unknown qmat type");
        }
    }
}

/* ==== IDOT ================================================================================== */

/* acc += (lane sums of w . x) * d, the canonical per-group step. */
AVX2 static inline __m256 idot_step(__m256i w, const int8_t *xq, float d, __m256 acc) {
    __m256i x  = _mm256_loadu_si256((const __m256i *)xq);
    __m256i p  = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    __m256i s  = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d)));
}

/* 32 packed bytes = two 32-column groups -> two vectors [evens | odds] through table lut. */
AVX2 static inline void nib64_i8(__m256i b, __m256i lut, __m256i *g0, __m256i *g1) {
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i       lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(b, m4));
    __m256i       hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(b, 4), m4));
    *g0              = _mm256_permute2x128_si256(lo, hi, 0x20);
    *g1              = _mm256_permute2x128_si256(lo, hi, 0x31);
}

/* One 32-column group of nibbles (16 bytes) -> [evens | odds] through table lut. */
AVX2 static inline __m256i nib32_idot(__m128i b, __m256i lut) {
    const __m128i m4 = _mm_set1_epi8(15);
    __m256i       v  = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(b, m4)),
                                               _mm_and_si128(_mm_srli_epi16(b, 4), m4), 1);
    return _mm256_shuffle_epi8(lut, v);
}

AVX2 static float idot_i8(const int8_t *w, const int8_t *xq, const float *xd, int n) {
    __m256 acc = _mm256_setzero_ps();
    int    g   = 0;
    for (; (g + 1) * 32 <= n; g++)
        acc = idot_step(_mm256_loadu_si256((const __m256i *)(w + g * 32)), xq + g * 32, xd[g], acc);
    if (g * 32 < n) {
        int8_t tail[32] = {0};
        memcpy(tail, w + g * 32, (size_t)(n - g * 32));
        acc = idot_step(_mm256_loadu_si256((const __m256i *)tail), xq + g * 32, xd[g], acc);
    }
    return hsum8(acc);
}

/* Nibble rows (Q_I4 with lut = nibble-8, Q_MXFP4 with the doubled e2m1 table); d[g] is
 * computed by dscale(g) inline to keep the scalar product identical to the reference. */
AVX2 static float idot_i4(const uint8_t *w, const float *s, const int8_t *xq, const float *xd,
                          int n) {
    const __m256i lut = _mm256_setr_epi8(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7,
                                         -8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    __m256 acc = _mm256_setzero_ps();
    int    g   = 0;
    for (; (g + 2) * 32 <= n; g += 2) { /* one int4 group of 64 = two IDOT groups */
        __m256i a, b;
        nib64_i8(_mm256_loadu_si256((const __m256i *)(w + g * 16)), lut, &a, &b);
        acc = idot_step(a, xq + g * 32, s[g / 2] * xd[g], acc);
        acc = idot_step(b, xq + (g + 1) * 32, s[g / 2] * xd[g + 1], acc);
    }
    for (; g * 32 < n; g++) { /* remaining IDOT groups, the last maybe partial */
        uint8_t tail[16];
        int     nb = (n - g * 32 + 1) / 2;
        memset(tail, 0x88, 16);
        memcpy(tail, w + g * 16, (size_t)(nb < 16 ? nb : 16));
        acc = idot_step(nib32_idot(_mm_loadu_si128((const __m128i *)tail), lut), xq + g * 32,
                        s[g / 2] * xd[g], acc);
    }
    return hsum8(acc);
}

AVX2 static float idot_mxfp4(const uint8_t *w, const uint8_t *e, const int8_t *xq,
                             const float *xd, int n) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kern_mxfp4_i8));
    __m256 acc = _mm256_setzero_ps();
    int    g   = 0;
    for (; (g + 2) * 32 <= n; g += 2) {
        __m256i a, b;
        nib64_i8(_mm256_loadu_si256((const __m256i *)(w + g * 16)), lut, &a, &b);
        acc = idot_step(a, xq + g * 32, kern_e8m0_half(e[g]) * xd[g], acc);
        acc = idot_step(b, xq + (g + 1) * 32, kern_e8m0_half(e[g + 1]) * xd[g + 1], acc);
    }
    if (g * 32 < n)
        acc = idot_step(nib32_idot(_mm_loadu_si128((const __m128i *)(w + g * 16)), lut),
                        xq + g * 32, kern_e8m0_half(e[g]) * xd[g], acc);
    return hsum8(acc);
}

AVX2 void kern_idot_avx2(const qmat *m, const int8_t *xq, const float *xd, float *y, int r0,
                         int r1) {
    const int n = m->cols;
    for (int r = r0; r < r1; r++) {
        switch (m->type) {
        case Q_I8: y[r] = idot_i8((const int8_t *)m->w + (size_t)r * n, xq, xd, n) * m->s[r]; break;
        case Q_I4:
            y[r] = idot_i4((const uint8_t *)m->w + (size_t)r * ((n + 1) / 2),
                           m->s + (size_t)r * ((n + Q_I4_GROUP - 1) / Q_I4_GROUP), xq, xd, n);
            break;
        case Q_MXFP4:
            y[r] = idot_mxfp4((const uint8_t *)m->w + (size_t)r * (n / 2),
                              m->e + (size_t)r * (n / Q_MXFP4_GROUP), xq, xd, n);
            break;
        default: K3_ASSERT(!"kern_idot_avx2: type without integer weights");
        }
    }
}

#else /* not x86: the scalar path is the only one */

int kern_cpu_avx2(void) { return 0; }
void kern_rows_avx2(const qmat *m, const float *x, float *y, int r0, int r1) {
    kern_rows_ref(m, x, y, r0, r1);
}
void kern_idot_avx2(const qmat *m, const int8_t *xq, const float *xd, float *y, int r0, int r1) {
    kern_idot_ref(m, xq, xd, y, r0, r1);
}

#endif
