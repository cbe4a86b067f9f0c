/* kda-rec.c: the KDA recurrence of one head (kda-rec.h), per kernel level.
 *
 * DESIGN
 * - The body is one always-inline function (rec_body); it is compiled three times: for the
 *   baseline target, for AVX2 and for AVX-512 (target attributes), and kda_rec_run picks the
 *   one of the running level. The two d x d loops are `omp simd`: each lane does one value
 *   column j, the same float and double operations as the scalar loop, in the same order (no
 *   reduction across j, no contraction: ISO C mode keeps -ffp-contract=off), so every build
 *   gives the same bits; only the vector width differs (2, 4 or 8 doubles).
 * - The decays e^g and σ(gate) come computed (forward.c's gate phase, kern_unary), so the
 *   body calls no libm function but sqrt.
 * - Per column t: q, k normalised (double sums, in order); S ← Diag(e^g) S and u = Sᵀk with
 *   the decayed S; S += β k ⊗ (v − u); o = Sᵀq with the updated S; then σ(gate) ⊙
 *   RMSNorm_head(o, o_norm) into q's slot.
 */
#include "kda-rec.h"
#include "quant.h"

#include <math.h>
#include <stddef.h>

static inline __attribute__((always_inline)) void rec_body(const kda_rec *r) {
    const int d = r->d, P = r->P, h = r->h;
    double   *u = r->u, *o = r->o;
    float    *S = r->S;
    for (int t = r->t0; t < r->t0 + r->n; t++) {
        const float *Sin = t == r->t0 ? r->S0 : S;
        float       *q   = r->q + (size_t)t * P + (size_t)h * d;
        float       *k   = r->k + (size_t)t * P + (size_t)h * d;
        const float *v   = r->v + (size_t)t * P + (size_t)h * d;
        const float *dk  = r->decay + (size_t)t * P + (size_t)h * d;
        double       sq = 0, sk = 0;
        for (int i = 0; i < d; i++) {
            sq += (double)q[i] * (double)q[i];
            sk += (double)k[i] * (double)k[i];
        }
        double fq = 1.0 / sqrt(sq + 1e-6) / sqrt((double)d), fk = 1.0 / sqrt(sk + 1e-6);
        for (int i = 0; i < d; i++) {
            q[i] = (float)((double)q[i] * fq);
            k[i] = (float)((double)k[i] * fk);
        }
        /* S ← Diag(e^g) S, and u = Sᵀk with the decayed S */
        for (int j = 0; j < d; j++)
            u[j] = 0;
        for (int i = 0; i < d; i++) {
            const float  e  = dk[i];
            const double ki = (double)k[i];
            const float *si = Sin + (size_t)i * d;
            float       *so = S + (size_t)i * d;
#pragma omp simd
            for (int j = 0; j < d; j++) {
                so[j] = si[j] * e;
                u[j] += (double)so[j] * ki;
            }
        }
        /* S += β k ⊗ (v − Sᵀk);  o = Sᵀq with the updated S */
        const double bt = (double)r->beta[(size_t)t * r->H + h];
        for (int j = 0; j < d; j++) {
            u[j] = bt * ((double)v[j] - u[j]);
            o[j] = 0;
        }
        for (int i = 0; i < d; i++) {
            float       *si = S + (size_t)i * d;
            const double ki = (double)k[i], qi = (double)q[i];
#pragma omp simd
            for (int j = 0; j < d; j++) {
                si[j] = (float)((double)si[j] + ki * u[j]);
                o[j] += (double)si[j] * qi;
            }
        }
        /* σ(g_proj x) ⊙ RMSNorm_head(o, o_norm), into q's slot */
        double ss = 0;
        for (int j = 0; j < d; j++)
            ss += o[j] * o[j];
        const double rr = 1.0 / sqrt(ss / d + r->eps);
        const float *sg = r->sgate + (size_t)t * P + (size_t)h * d;
        for (int j = 0; j < d; j++)
            q[j] = (float)(o[j] * rr * (double)r->o_norm[j] * (double)sg[j]);
    }
}

static void rec_base(const kda_rec *r) {
    rec_body(r);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void rec_avx2(const kda_rec *r) {
    rec_body(r);
}
__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma"))) static void
rec_avx512(const kda_rec *r) {
    rec_body(r);
}
#endif

void kda_rec_isa(int isa, const kda_rec *r) {
#if defined(__x86_64__)
    if (isa >= KERN_AVX512 && kern_isa_ok(KERN_AVX512, NULL, 0))
        rec_avx512(r);
    else if (isa >= KERN_AVX2 && kern_isa_ok(KERN_AVX2, NULL, 0))
        rec_avx2(r);
    else
#endif
        rec_base(r);
}

void kda_rec_run(const kda_rec *r) {
    kda_rec_isa(kern_isa(), r);
}
