/* test-kdarec.c: the KDA recurrence of one head (src/model/kda-rec.c) gives the same bits at
 * every kernel level this CPU runs (baseline, AVX2, AVX-512 builds of one body), and the
 * baseline build follows the spec's delta rule (a plain double reference, within float noise).
 * Shapes: head widths 8 (one vector) and 37 (vector tails), several heads and columns. */
#include "kda-rec.h"
#include "quant.h"
#include "test.h"

#include <stdint.h>

static uint32_t seed = 7;
static float    frnd(float lo, float hi) {
       seed = seed * 1664525u + 1013904223u;
       return lo + (hi - lo) * (float)(seed >> 8) / 16777216.0f;
}

typedef struct bufs {
    float *S0, *S, *q, *k, *v, *g, *gate, *beta, *o_norm; /* g: the decays e^g, gate: σ(gate) */
    double u[2 * 64];
} bufs;

static void fill(bufs *b, int d, int H, int cols) {
    const size_t P = (size_t)H * d;
    b->S0 = malloc((size_t)d * d * 4), b->S = malloc((size_t)d * d * 4);
    b->q = malloc(cols * P * 4), b->k = malloc(cols * P * 4), b->v = malloc(cols * P * 4);
    b->g = malloc(cols * P * 4), b->gate = malloc(cols * P * 4), b->beta = malloc((size_t)cols * H * 4);
    b->o_norm = malloc((size_t)d * 4);
    for (int i = 0; i < d * d; i++)
        b->S0[i] = frnd(-0.5f, 0.5f);
    for (size_t i = 0; i < cols * P; i++)
        b->q[i] = frnd(-2, 2), b->k[i] = frnd(-2, 2), b->v[i] = frnd(-1, 1), b->g[i] = frnd(0.0067f, 1),
        b->gate[i] = frnd(0, 1);
    for (int i = 0; i < cols * H; i++)
        b->beta[i] = frnd(0, 1);
    for (int i = 0; i < d; i++)
        b->o_norm[i] = frnd(0.5f, 1.5f);
}

static void copy(bufs *dst, const bufs *src, int d, int H, int cols) {
    const size_t P = (size_t)H * d;
    fill(dst, d, H, cols);
    memcpy(dst->S0, src->S0, (size_t)d * d * 4);
    memcpy(dst->q, src->q, cols * P * 4), memcpy(dst->k, src->k, cols * P * 4);
    memcpy(dst->v, src->v, cols * P * 4), memcpy(dst->g, src->g, cols * P * 4);
    memcpy(dst->gate, src->gate, cols * P * 4), memcpy(dst->beta, src->beta, (size_t)cols * H * 4);
    memcpy(dst->o_norm, src->o_norm, (size_t)d * 4);
}

static void release(bufs *b) {
    free(b->S0), free(b->S), free(b->q), free(b->k), free(b->v), free(b->g), free(b->gate), free(b->beta),
        free(b->o_norm);
}

static kda_rec args(bufs *b, int d, int H, int h, int t0, int n) {
    return (kda_rec){.d      = d,
                     .P      = H * d,
                     .H      = H,
                     .h      = h,
                     .t0     = t0,
                     .n      = n,
                     .S0     = b->S0,
                     .S      = b->S,
                     .q      = b->q,
                     .k      = b->k,
                     .v      = b->v,
                     .decay  = b->g,
                     .sgate  = b->gate,
                     .beta   = b->beta,
                     .o_norm = b->o_norm,
                     .eps    = 1e-5,
                     .u      = b->u,
                     .o      = b->u + d};
}

/* The delta rule in plain double on column t0 (one step from S0): S1 and the head's output. */
static double ref_err(const bufs *in, const bufs *out, int d, int H, int h, int t0) {
    const size_t off = (size_t)t0 * H * d + (size_t)h * d;
    double       q[64], k[64], sq = 0, sk = 0, S[64 * 64], u[64], o[64], worst = 0;
    for (int i = 0; i < d; i++)
        q[i] = in->q[off + i], k[i] = in->k[off + i], sq += q[i] * q[i], sk += k[i] * k[i];
    for (int i = 0; i < d; i++)
        q[i] /= sqrt(sq + 1e-6) * sqrt((double)d), k[i] /= sqrt(sk + 1e-6);
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++)
            S[i * d + j] = (double)in->S0[i * d + j] * (double)in->g[off + i];
    for (int j = 0; j < d; j++) {
        u[j] = 0;
        for (int i = 0; i < d; i++)
            u[j] += S[i * d + j] * k[i];
        u[j] = (double)in->beta[t0 * H + h] * ((double)in->v[off + j] - u[j]);
    }
    double ss = 0;
    for (int j = 0; j < d; j++) {
        o[j] = 0;
        for (int i = 0; i < d; i++)
            o[j] += (S[i * d + j] += k[i] * u[j]) * q[i];
        ss += o[j] * o[j];
    }
    for (int i = 0; i < d * d; i++)
        worst = fmax(worst, fabs(S[i] - (double)out->S[i]));
    for (int j = 0; j < d; j++) {
        double y = o[j] / sqrt(ss / d + 1e-5) * (double)in->o_norm[j] * (double)in->gate[off + j];
        worst    = fmax(worst, fabs(y - (double)out->q[off + j]) / (1 + fabs(y)));
    }
    return worst;
}

int main(void) {
    static const char *const name[] = {"baseline", "avx2", "avx2", "avx512"};
    const int                ds[] = {8, 37}, H = 3, cols = 6;
    for (int di = 0; di < 2; di++) {
        const int d = ds[di];
        bufs      in;
        fill(&in, d, H, cols);
        bufs base, one;
        copy(&base, &in, d, H, cols);
        kda_rec rb = args(&base, d, H, 1, 1, 4);
        kda_rec_isa(KERN_SCALAR, &rb);
        copy(&one, &in, d, H, cols);
        kda_rec r1 = args(&one, d, H, 2, 3, 1);
        kda_rec_isa(KERN_SCALAR, &r1);
        double err = ref_err(&in, &one, d, H, 2, 3);
        T_CHECK(err < 1e-5, "d %d: one step against the double delta rule: max error %.2g < 1e-5", d, err);
        release(&one);
        for (int isa = KERN_AVX2; isa <= KERN_AVX512; isa += KERN_AVX512 - KERN_AVX2) {
            char why[128];
            if (!kern_isa_ok(isa, why, sizeof why)) {
                T_SKIP("d %d: %s build of the KDA recurrence not compared: %s", d, name[isa], why);
                continue;
            }
            bufs x;
            copy(&x, &in, d, H, cols);
            kda_rec rx = args(&x, d, H, 1, 1, 4);
            kda_rec_isa(isa, &rx);
            const size_t P = (size_t)H * d;
            int same       = !memcmp(x.S, base.S, (size_t)d * d * 4) && !memcmp(x.q, base.q, cols * P * 4) &&
                       !memcmp(x.k, base.k, cols * P * 4) && !memcmp(x.u, base.u, 2 * (size_t)d * 8);
            T_CHECK(
                same,
                "d %d, head 1, 4 columns: %s == baseline bit for bit (state, outputs, normalised k, the last "
                "column's double u and o)",
                d, name[isa]);
            release(&x);
        }
        release(&base), release(&in);
    }
    return t_done();
}
