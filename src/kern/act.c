/* act.c: SiTU-GLU in float, vectorised: a scalar twin and AVX2 / AVX-512 twins that give the
 * same bits (act.h).
 *
 * DESIGN
 * - SiTU-GLU(g, u) = th(g, b1) · σ(g) · th(u, b2) with th(z, b) = b·tanh(z/b), computed as
 *   r = (th(g, b1) · th(u, b2)) · σ(g), every step a float IEEE operation:
 *   - th(z, b), y = |z|·(1/b): for y < 0.625, z · (1 + s·P(s)), s = y², P a degree-4 fit of
 *     (tanh(y)/y - 1)/s (relative error 5e-9 on [0, 0.625]); z times a factor near 1 keeps tiny
 *     and subnormal z exact to a rounding. Else E = e^(-2y), copysign(b·(1-E)/(1+E), z).
 *   - σ(g): E = e^(-|g|), (g >= 0 ? 1 : E) / (1 + E): never overflows, tends to the tiny value.
 *   - e^x for x <= 0: x clamped to >= -104 (e^-104 is below the smallest subnormal; also turns
 *     NaN into -104), t = rint(x·log2 e), r = x - t·ln2 in two FMAs (ln2 split hi/lo), e^r =
 *     Horner 1 + r(1 + r(c0 + r(c1 + ...))) (a degree-6 fit, relative error 4e-9 on
 *     |r| <= ln2/2), times 2^t as 2^(t>>1) · 2^(t - t>>1), both normal, so subnormal results
 *     round once like any multiply.
 *   - NaN in g or u: r = g + u (a NaN).
 * - The vector twins are one template (act-vec.inc) built for 8 and 16 lanes; a tail shorter
 *   than a vector runs the scalar twin, which is the same function. The same bits at every
 *   level: no operation is reassociated, and fmaf rounds once like the vector FMA.
 * - Error against the double formula (tests/test-act): a few float ulps (the test's bound).
 */
#include "act.h"
#include "kern-impl.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Constants shared by every twin. */
#define ACT_LOG2E 1.44269502f
#define ACT_LN2_HI 6.93147182e-01f  /* float(ln 2) */
#define ACT_LN2_LO -1.90465421e-09f /* float(ln 2 - ACT_LN2_HI) */
#define ACT_XMIN -104.0f
#define ACT_TH_SMALL 0.625f
/* e^r = 1 + r + r²(E0 + E1 r + ... + E4 r⁴) on |r| <= ln2/2 */
#define ACT_E0 4.999998808e-01f
#define ACT_E1 1.666651815e-01f
#define ACT_E2 4.166952521e-02f
#define ACT_E3 8.368914947e-03f
#define ACT_E4 1.375176013e-03f
/* tanh(y)/y = 1 + s(T0 + T1 s + ... + T4 s⁴), s = y², y in [0, 0.625] */
#define ACT_T0 -3.333328664e-01f
#define ACT_T1 1.333151162e-01f
#define ACT_T2 -5.374460667e-02f
#define ACT_T3 2.065298706e-02f
#define ACT_T4 -5.718832370e-03f

/* ==== scalar twin ============================================================================ */

static float pow2i(int k) { /* 2^k, k in -126..127 */
    uint32_t b = (uint32_t)(k + 127) << 23;
    float    f;
    memcpy(&f, &b, 4);
    return f;
}

/* e^x for x <= 0 (x > 0 and NaN as 0, then x < -104 as -104). */
static float exp_neg(float x) {
    x             = x < 0.0f ? x : 0.0f;
    x             = x > ACT_XMIN ? x : ACT_XMIN;
    const float t = rintf(x * ACT_LOG2E);
    float       r = fmaf(t, -ACT_LN2_HI, x);
    r             = fmaf(t, -ACT_LN2_LO, r);
    float p       = ACT_E4;
    p             = fmaf(p, r, ACT_E3);
    p             = fmaf(p, r, ACT_E2);
    p             = fmaf(p, r, ACT_E1);
    p             = fmaf(p, r, ACT_E0);
    p             = fmaf(p, r, 1.0f);
    p             = fmaf(p, r, 1.0f);
    const int n = (int)t, n1 = n >> 1; /* arithmetic shift (GCC, Clang): floor(n/2), like srai */
    return p * pow2i(n1) * pow2i(n - n1);
}

/* b·tanh(z/b), ib = 1/b. */
static float th(float z, float ib, float b) {
    const float y = fabsf(z) * ib;
    if (y < ACT_TH_SMALL) {
        const float s = y * y;
        float       p = ACT_T4;
        p             = fmaf(p, s, ACT_T3);
        p             = fmaf(p, s, ACT_T2);
        p             = fmaf(p, s, ACT_T1);
        p             = fmaf(p, s, ACT_T0);
        return z * fmaf(p, s, 1.0f);
    }
    const float e = exp_neg(y * -2.0f);
    return copysignf(b * ((1.0f - e) / (1.0f + e)), z);
}

/* σ(x) = (x >= 0 ? 1 : E) / (1 + E), E = e^-|x|. */
static float sigm(float x) {
    const float e = exp_neg(0.0f - fabsf(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

/* The unary operations (enum kern_act_op); NaN stays NaN. */
static void unary_ref(int op, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float a = x[i];
        const float r = op == KERN_SIGMOID ? sigm(a) : op == KERN_SILU ? a * sigm(a) : exp_neg(a);
        x[i]          = isnan(a) ? a : r;
    }
}

static void situ_glu_ref(float *g, const float *u, size_t n, float b1, float b2) {
    const float ib1 = 1.0f / b1, ib2 = 1.0f / b2;
    for (size_t i = 0; i < n; i++) {
        const float a = g[i], v = u[i];
        const float r = (th(a, ib1, b1) * th(v, ib2, b2)) * sigm(a);
        g[i]          = isnan(a) || isnan(v) ? a + v : r;
    }
}

/* ==== vector twins =========================================================================== */

#if defined(__x86_64__)
#include <immintrin.h>

#define ACT_TARGET __attribute__((target("avx2,fma")))
#define ACT_SFX avx2
#define VF __m256
#define VI __m256i
#define VM __m256
#define W 8
#define SET1(x) _mm256_set1_ps(x)
#define LOAD(p) _mm256_loadu_ps(p)
#define STORE(p, v) _mm256_storeu_ps(p, v)
#define ADD _mm256_add_ps
#define SUB _mm256_sub_ps
#define MUL _mm256_mul_ps
#define DIV _mm256_div_ps
#define FMA _mm256_fmadd_ps
#define MAX _mm256_max_ps
#define VMIN _mm256_min_ps
#define AND _mm256_and_ps
#define OR _mm256_or_ps
#define LT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define GE(a, b) _mm256_cmp_ps(a, b, _CMP_GE_OQ)
#define UNORD(a, b) _mm256_cmp_ps(a, b, _CMP_UNORD_Q)
#define BLEND(m, f, t) _mm256_blendv_ps(f, t, m)
#define RINT(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define CVTI _mm256_cvtps_epi32
#define SRAI1(k) _mm256_srai_epi32(k, 1)
#define SUBI _mm256_sub_epi32
#define POW2(k) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23))
#define ASF _mm256_castsi256_ps
#define SETI _mm256_set1_epi32
#include "act-vec.inc"

#if KERN_BUILD_AVX512
#define ACT_TARGET __attribute__((target("avx512f,avx512dq,avx2,fma")))
#define ACT_SFX avx512
#define VF __m512
#define VI __m512i
#define VM __mmask16
#define W 16
#define SET1(x) _mm512_set1_ps(x)
#define LOAD(p) _mm512_loadu_ps(p)
#define STORE(p, v) _mm512_storeu_ps(p, v)
#define ADD _mm512_add_ps
#define SUB _mm512_sub_ps
#define MUL _mm512_mul_ps
#define DIV _mm512_div_ps
#define FMA _mm512_fmadd_ps
#define MAX _mm512_max_ps
#define VMIN _mm512_min_ps
#define AND _mm512_and_ps
#define OR _mm512_or_ps
#define LT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define GE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ)
#define UNORD(a, b) _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q)
#define BLEND(m, f, t) _mm512_mask_blend_ps(m, f, t)
#define RINT(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define CVTI _mm512_cvtps_epi32
#define SRAI1(k) _mm512_srai_epi32(k, 1)
#define SUBI _mm512_sub_epi32
#define POW2(k) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k, _mm512_set1_epi32(127)), 23))
#define ASF _mm512_castsi512_ps
#define SETI _mm512_set1_epi32
#include "act-vec.inc"
#endif
#endif

/* ==== dispatch =============================================================================== */

void kern_situ_glu_isa(int isa, float *g, const float *u, size_t n, float b1, float b2) {
#if defined(__x86_64__)
#if KERN_BUILD_AVX512
    if (isa >= KERN_AVX512 && kern_isa_ok(KERN_AVX512, NULL, 0)) {
        situ_glu_avx512(g, u, n, b1, b2);
        return;
    }
#endif
    if (isa >= KERN_AVX2 && kern_isa_ok(KERN_AVX2, NULL, 0)) {
        situ_glu_avx2(g, u, n, b1, b2);
        return;
    }
#endif
    situ_glu_ref(g, u, n, b1, b2);
}

/* The double formulas of the path before (K3_ACT=double), rounded once to float. */
static void unary_double(int op, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const double a = (double)x[i];
        x[i]           = (float)(op == KERN_SIGMOID ? 1.0 / (1.0 + exp(-a))
                                 : op == KERN_SILU  ? a / (1.0 + exp(-a))
                                                    : exp(a));
    }
}

void kern_unary_at(int op, int isa, float *x, size_t n) {
    if (isa < 0) {
        unary_double(op, x, n);
        return;
    }
#if defined(__x86_64__)
#if KERN_BUILD_AVX512
    if (isa >= KERN_AVX512 && kern_isa_ok(KERN_AVX512, NULL, 0)) {
        unary_avx512(op, x, n);
        return;
    }
#endif
    if (isa >= KERN_AVX2 && kern_isa_ok(KERN_AVX2, NULL, 0)) {
        unary_avx2(op, x, n);
        return;
    }
#endif
    unary_ref(op, x, n);
}

void kern_unary(int op, float *x, size_t n) {
    kern_unary_at(op, kern_act_double() ? -1 : kern_isa(), x, n);
}

void kern_situ_glu(float *g, const float *u, size_t n, float b1, float b2) {
    kern_situ_glu_isa(kern_isa(), g, u, n, b1, b2);
}

void kern_situ_glu_double(float *g, const float *u, size_t n, float b1, float b2) {
    const double d1 = b1, d2 = b2;
    for (size_t i = 0; i < n; i++) {
        const double a = (double)g[i];
        g[i]           = (float)(d1 * tanh(a / d1) / (1.0 + exp(-a)) * d2 * tanh((double)u[i] / d2));
    }
}

/* -1 = not read yet, then 0 float, 1 double. */
static _Atomic int act_mode = -1;

/* K3_ACT: 0 float (unset, empty or "float"), 1 double, -1 an unknown name. */
static int act_mode_env(void) {
    const char *e = k3_setting_env_str(K3_SETTING_ACT);
    double      v = 0;
    return e && k3_setting_parse(K3_SETTING_ACT, K3_SRC_ENV, e, &v, NULL, 0) ? -1 : (int)v;
}

int kern_act_double(void) {
    int v = atomic_load(&act_mode);
    if (v < 0) {
        v = act_mode_env() == 1;
        atomic_store(&act_mode, v);
    }
    return v;
}

void kern_set_act_double(int on) {
    atomic_store(&act_mode, on != 0);
}

k3_status kern_act_env(void) {
    double    v  = 0;
    k3_status st = k3_setting_env(K3_SETTING_ACT, &v);
    if (st)
        return st;
    atomic_store(&act_mode, (int)v);
    return K3_OK;
}
