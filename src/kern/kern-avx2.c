/* kern-avx2.c: AVX2+FMA twins of the reference kernels in kern.c.
 *
 * DESIGN
 * - Compiled for the baseline target; every function that uses AVX2 carries
 *   __attribute__((target("avx2,fma"))) and is only reached after kern_cpu_avx2() said yes, so
 *   one binary runs everywhere. Non-x86 builds get stubs that are never selected.
 * - Exact-float kernels: weights are decoded to f32 (nibbles through pshufb tables, bytes through
 *   cvtepi8) and multiplied with FMA into vector accumulators; per-group scales are applied as
 *   one FMA per group. kern.c's row_dot computes the same lane order in plain C (THE LANE ORDER
 *   there), so the scalar level gives the same bits.
 * - IDOT kernels (the group order of kern-impl.h): Q_I8 does the signed x signed dot with
 *   |w| (sign_epi8(w, w)) as the unsigned operand and sign_epi8(x, w) as the signed one
 *   (|w| <= 128, |x| <= 127: an int16 pair sum is at most 32512, no saturation). Nibble formats
 *   look each nibble up (pshufb) as an unsigned code w + o and add the activation's
 *   precomputed -o * lane sums. maddubs + madd (AVX2) or vpdpbusd (AVX-VNNI, where the CPU has
 *   it) give the eight exact 32-bit lane sums; two horizontal adds make each group's exact sum, then
 *   one scalar FMA per group in group order (vfmadd*ss rounds once, like fmaf in the scalar
 *   twin), so all twins are bit-identical. The row kernels are one template (kern-idot.inc)
 *   built for both ISAs.
 * - Row tails (a partial group) go through the same vector code on a zero-padded copy.
 */
#include "kern-impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))
#define VNNI __attribute__((target("avx2,fma,avxvnni")))

/* Ask for the weight bytes pf ahead of p (0: nothing). An address, not an access: past the end
 * of the matrix it is harmless, so it is formed as an integer. */
static inline void kern_prefetch(const void *p, int pf) {
    if (pf)
        __builtin_prefetch((const void *)((uintptr_t)p + (unsigned)pf), 0, 3);
}

/* ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), the same tree as kern_sum8. */
AVX2 static inline float hsum8(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

/* 8 int8 (low 8 bytes of b) -> 8 floats */
AVX2 static inline __m256 i8x8_ps(__m128i b) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

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
    int    c = 0;
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
        dot32_ps(_mm_loadu_si128((const __m128i *)(w + c)), _mm_loadu_si128((const __m128i *)(w + c + 16)),
                 x + c, &a, &b);
    for (; c + 8 <= n; c += 8)
        a = _mm256_fmadd_ps(i8x8_ps(_mm_loadl_epi64((const __m128i *)(w + c))), _mm256_loadu_ps(x + c), a);
    float acc = hsum8(_mm256_add_ps(a, b));
    for (; c < n; c++)
        acc += (float)w[c] * x[c];
    return acc;
}

/* Groups of 32 nibble-coded columns: w packed row, sc(g) the scale of group g (of 32), lut the
 * nibble table. ng32 full groups; columns past 32*ng32 handled by the caller. */
AVX2 static __m256 rows_nib(const uint8_t *w, const float *x, int ng32, __m128i lut, const float *gscale) {
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
        acc           = _mm256_add_ps(acc, rows_nib(w + g * 16, x + g * 32, 2, lut, gs));
    }
    return kern_i4_tail(w, s, x, (full & ~1) * 32, n, hsum8(acc)); /* a partial 64-group */
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
        case Q_F32:
            y[r] = row_f32((const float *)m->w + (size_t)r * n, x, n);
            break;
        case Q_I8:
            y[r] = row_i8((const int8_t *)m->w + (size_t)r * n, x, n) * m->s[r];
            break;
        case Q_I4:
            y[r] = row_i4((const uint8_t *)m->w + (size_t)r * ((n + 1) / 2),
                          m->s + (size_t)r * ((n + Q_I4_GROUP - 1) / Q_I4_GROUP), x, n);
            break;
        case Q_MXFP4:
            y[r] = row_mxfp4((const uint8_t *)m->w + (size_t)r * (n / 2),
                             m->e + (size_t)r * (n / Q_MXFP4_GROUP), x, n);
            break;
        default:
            K3_ASSERT(!"unknown qmat type");
        }
    }
}

/* ==== IDOT ================================================================================== */

/* The integer part of a step, per ISA. AVX2: Q_I8 does the signed x signed dot without VNNI
 * with |w| (sign_epi8(w, w)) as the unsigned operand of maddubs and sign_epi8(x, w) as the
 * signed one; madd with ones sums the int16 pairs into the eight 32-bit lanes. AVX-VNNI:
 * vpdpbusd does both steps at once (no int16 stage, no saturation). The lane sums are exact
 * integers either way, so both ISAs give the same bits. */
AVX2 static inline __m256i i8_isum_avx2(__m256i w, __m256i x) {
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
VNNI static inline __m256i i8_isum_vnni(__m256i w, __m256i x) {
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

/* Nibble pair step: 32 packed bytes b (64 columns) -> acc += (lane sums) * dv. The nibbles
 * become unsigned codes w + o through lut (Q_I4: the nibble itself, o = 8; Q_MXFP4: doubled
 * e2m1 + 12), so maddubs needs no sign handling (|code| <= 24, |x| <= 127: an int16 holds the
 * four products of one position pair); sxo = o * (activation lane sums) restores w. */
AVX2 static inline __m256i nib_isum_avx2(__m256i lo, __m256i hi, const int8_t *xq, const int32_t *nsxo) {
    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xq)),
                                 _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 32))));
    return _mm256_add_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)),
                            _mm256_loadu_si256((const __m256i *)nsxo));
}
VNNI static inline __m256i nib_isum_vnni(__m256i lo, __m256i hi, const int8_t *xq, const int32_t *nsxo) {
    __m256i s = _mm256_dpbusd_avx_epi32(_mm256_loadu_si256((const __m256i *)nsxo), lo,
                                        _mm256_loadu_si256((const __m256i *)xq));
    return _mm256_dpbusd_avx_epi32(s, hi, _mm256_loadu_si256((const __m256i *)(xq + 32)));
}

/* The two nibble vectors of a pair (low nibbles = even columns, high = odd) through lut. */
AVX2 static inline void nib_codes(__m256i b, __m256i lut, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(15);
    *lo              = _mm256_shuffle_epi8(lut, _mm256_and_si256(b, m4));
    *hi              = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(b, 4), m4));
}

/* nib_codes for Q_I4 (mx 0), whose code w + 8 is the nibble itself: no table lookup. */
AVX2 static inline void nib_codes_mx(int mx, __m256i b, __m256i lut, __m256i *lo, __m256i *hi) {
    if (mx) {
        nib_codes(b, lut, lo, hi);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(15);
    *lo              = _mm256_and_si256(b, m4);
    *hi              = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
}

/* Weight bytes of pair p of a nibble row of rb bytes, zero padded past the row. */
AVX2 static inline __m256i pair_bytes(const uint8_t *w, size_t rb, int p) {
    if ((size_t)p * 32 + 32 <= rb)
        return _mm256_loadu_si256((const __m256i *)(w + p * 32));
    uint8_t tail[32] = {0};
    memcpy(tail, w + p * 32, rb - (size_t)p * 32);
    return _mm256_loadu_si256((const __m256i *)tail);
}

#define INLINE __attribute__((always_inline)) inline

/* The row kernels, once per ISA (kern-idot.inc is a template: KN(name) appends the ISA). */
#define KCAT2(a, b) a##b
#define KCAT(a, b) KCAT2(a, b)
#define KN(name) KCAT(name, KSFX)

#define KSFX _avx2
#define KTGT AVX2
#include "kern-idot.inc"
#undef KSFX
#undef KTGT

#define KSFX _vnni
#define KTGT VNNI
#include "kern-idot.inc"
#undef KSFX
#undef KTGT

#else /* not x86: the scalar path is the only one */

void kern_rows_avx2(const qmat *m, const float *x, float *y, int r0, int r1) {
    kern_rows_ref(m, x, y, r0, r1);
}
void kern_idot_avx2(const qmat *m, const kern_act *a, float *y, int r0, int r1) {
    kern_idot_ref(m, a, y, r0, r1);
}
void kern_idot_nc_avx2(const qmat *m, const kern_act *a, float *const *y, int r0, int r1) {
    for (int c = 0; c < KERN_NC; c++)
        kern_idot_ref(m, &a[c], y[c], r0, r1);
}
void kern_idot_vnni(const qmat *m, const kern_act *a, float *y, int r0, int r1) {
    kern_idot_ref(m, a, y, r0, r1);
}
void kern_idot_nc_vnni(const qmat *m, const kern_act *a, float *const *y, int r0, int r1) {
    kern_idot_nc_avx2(m, a, y, r0, r1);
}

#endif
