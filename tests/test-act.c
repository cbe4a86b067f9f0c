/* test-act.c: the float SiTU-GLU (src/kern/act.c) against the double formula it replaced, and
 * its kernel levels against the scalar twin.
 *
 * - Error bound: over a sweep of inputs (every binade of g and u from subnormals to FLT_MAX,
 *   several mantissas, both signs; random pairs at typical and large magnitudes; zeros, ±inf)
 *   err = |f - ref| / max(|ref|, 2^-100) with ref the double formula (forward.c's K3_ACT=double
 *   path, unrounded) stays under ACT_BOUND. Below 2^-100 (σ(g) of g < -69, subnormal u) the
 *   float intermediates lose precision a double does not, so there it is an absolute bound.
 * - NaN in g, in u or both gives NaN; ±inf give the limits (inside the sweep's error check).
 * - Every kernel level this CPU runs gives the scalar twin's bits, for every length 0..67 and
 *   offset (the vector bodies and their scalar tails) and on the whole sweep.
 * - The unary operations (σ, SiLU, e^x for x <= 0): the same error bound, levels bit for bit,
 *   NaN kept, the double path (K3_ACT=double) the double formula rounded once.
 * - K3_ACT: float, double, empty accepted; another value is an error naming it.
 */
#include "act.h"
#include "quant.h"
#include "test.h"

#include <float.h>
#include <stdint.h>

/* Measured max err 3.3e-07 on this sweep (under 3 float epsilons); the bound leaves room. */
#define ACT_BOUND 5e-7

static double ref_glu(double g, double u, double b1, double b2) {
    return b1 * tanh(g / b1) / (1.0 + exp(-g)) * b2 * tanh(u / b2);
}

static uint64_t rng = 0x9E3779B97F4A7C15u;
static double   rnd(void) { /* [0, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* A sweep of pairs into g, u (cap entries); the count. */
static size_t make_sweep(float *g, float *u, size_t cap) {
    static const float mant[]  = {1.0f, 1.1f, 1.25f, 1.5f, 1.75f, 1.9999999f};
    static const float other[] = {0.0f, 1.0f, -1.0f, 0.3f, -2.5f, 7.0f, -40.0f, 120.0f};
    size_t             k       = 0;
    /* every binade of g (2^-149 .. FLT_MAX) against fixed u, then the same for u */
    for (int e = -149; e <= 127; e++)
        for (size_t m = 0; m < sizeof mant / sizeof *mant; m++)
            for (int sg = -1; sg <= 1; sg += 2)
                for (size_t o = 0; o < sizeof other / sizeof *other; o++) {
                    float x = (float)sg * ldexpf(mant[m], e);
                    if (e == -149)
                        x = (float)sg * ldexpf(1.0f, -149); /* the smallest subnormal */
                    if (k + 2 > cap)
                        return k;
                    g[k] = x, u[k++] = other[o];
                    g[k] = other[o], u[k++] = x;
                }
    /* random pairs: typical activations, then log-uniform magnitudes 1e-8 .. 1e4 */
    for (int i = 0; i < 200000 && k < cap; i++, k++) {
        if (i % 2) {
            g[k] = (float)(rnd() * 40 - 20), u[k] = (float)(rnd() * 200 - 100);
        } else {
            g[k] = (float)((rnd() < 0.5 ? -1 : 1) * pow(10, rnd() * 12 - 8));
            u[k] = (float)((rnd() < 0.5 ? -1 : 1) * pow(10, rnd() * 12 - 8));
        }
    }
    /* the edges of the two branches (tanh: y = 0.625; exp: clamp at -104) and the infinities */
    static const float edge[] = {2.5f,     2.4999998f, 2.5000002f, 15.625f,  15.624999f, 15.625001f,
                                 103.9f,   104.1f,     52.0f,      87.3f,    88.8f,      89.5f,
                                 -87.3f,   -88.8f,     -103.9f,    -104.1f,  -150.0f,    FLT_MIN,
                                 -FLT_MIN, FLT_MAX,    -FLT_MAX,   INFINITY, -INFINITY,  -0.0f};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++)
        for (size_t j = 0; j < sizeof edge / sizeof *edge && k < cap; j++, k++)
            g[k] = edge[i], u[k] = edge[j];
    return k;
}

static void check_bound(const float *g, const float *u, size_t n, float b1, float b2) {
    float *r = malloc(n * sizeof *r);
    memcpy(r, g, n * sizeof *r);
    kern_situ_glu_isa(KERN_SCALAR, r, u, n, b1, b2);
    double worst = 0, floor_ = ldexp(1.0, -100);
    size_t at = 0, nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        double ref = ref_glu(g[i], u[i], b1, b2);
        if (!isfinite(r[i]) || !isfinite(ref)) {
            nonfinite++;
            continue;
        }
        double err = fabs((double)r[i] - ref) / fmax(fabs(ref), floor_);
        if (err > worst)
            worst = err, at = i;
    }
    T_CHECK(
        worst <= ACT_BOUND && nonfinite == 0,
        "betas %g/%g: max err %.3g <= %g over %zu pairs (worst g %.9g u %.9g: %.9g vs %.9g); %zu non-finite",
        (double)b1, (double)b2, worst, ACT_BOUND, n, (double)g[at], (double)u[at], (double)r[at],
        ref_glu(g[at], u[at], b1, b2), nonfinite);
    free(r);
}

/* kern_situ_glu_double (K3_ACT=double) is the double formula rounded once. */
static void check_double(const float *g, const float *u, size_t n) {
    float *r = malloc(n * sizeof *r);
    memcpy(r, g, n * sizeof *r);
    kern_situ_glu_double(r, u, n, 4.0f, 25.0f);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) {
        float want = (float)ref_glu(g[i], u[i], 4.0, 25.0);
        diff += memcmp(&want, &r[i], 4) != 0 && !(isnan(want) && isnan(r[i]));
    }
    T_CHECK(diff == 0, "K3_ACT=double path: the double formula rounded once, over %zu pairs (%zu differ)", n,
            diff);
    free(r);
}

static void check_nan(void) {
    const float nan = NAN;
    float       g[] = {nan, 1.0f, nan, -nan, 0.0f, INFINITY, nan},
          u[]       = {1.0f, nan, nan, 2.0f, -nan, nan, INFINITY};
    const size_t n  = sizeof g / sizeof *g;
    for (int isa = KERN_SCALAR; isa <= KERN_AVX512; isa++) {
        float big_g[40], big_u[40]; /* the pairs inside a vector body, not only the scalar tail */
        for (size_t i = 0; i < 40; i++)
            big_g[i] = g[i % n], big_u[i] = u[i % n];
        kern_situ_glu_isa(isa, big_g, big_u, 40, 4.0f, 25.0f);
        int ok = 1;
        for (size_t i = 0; i < 40; i++)
            ok &= isnan(big_g[i]) != 0;
        T_CHECK(ok, "level %d: NaN in g, u or both gives NaN (40 pairs)", isa);
    }
}

static void check_levels(const float *g, const float *u, size_t n) {
    static const char *const name[] = {"scalar", "avx2", "avx2", "avx512"};
    float                   *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    for (int isa = KERN_AVX2; isa <= KERN_AVX512; isa += KERN_AVX512 - KERN_AVX2) {
        char why[128];
        if (!kern_isa_ok(isa, why, sizeof why)) {
            T_SKIP("%s twin of SiTU-GLU not compared: %s", name[isa], why);
            continue;
        }
        memcpy(a, g, n * sizeof *a), memcpy(b, g, n * sizeof *b);
        kern_situ_glu_isa(KERN_SCALAR, a, u, n, 4.0f, 25.0f);
        kern_situ_glu_isa(isa, b, u, n, 4.0f, 25.0f);
        size_t diff = 0;
        for (size_t i = 0; i < n; i++)
            diff += memcmp(&a[i], &b[i], 4) != 0;
        T_CHECK(diff == 0, "%s == scalar twin bit for bit over the sweep (%zu pairs, %zu differ)", name[isa],
                n, diff);
        int ok = 1;
        for (size_t len = 0; len <= 67 && ok; len++)
            for (size_t off = 0; off < 3; off++) {
                float x[80], y[80];
                memcpy(x, g + 70000 + off, len * 4), memcpy(y, g + 70000 + off, len * 4);
                kern_situ_glu_isa(KERN_SCALAR, x, u + 70000 + off, len, 3.0f, 7.0f);
                kern_situ_glu_isa(isa, y, u + 70000 + off, len, 3.0f, 7.0f);
                ok &= !memcmp(x, y, len * 4);
            }
        T_CHECK(ok, "%s == scalar twin for lengths 0..67 at offsets 0..2 (betas 3/7)", name[isa]);
    }
    free(a), free(b);
}

/* The unary operations (kern_unary): the float path against the double formula over every
 * binade, random values and the edges; the levels bit for bit; the double path exactly. */
static double ref_unary(int op, double x) {
    return op == KERN_SIGMOID ? 1.0 / (1.0 + exp(-x)) : op == KERN_SILU ? x / (1.0 + exp(-x)) : exp(x);
}

static void check_unary(void) {
    static const char *const opn[] = {"sigmoid", "silu", "exp"};
    static const char *const lvl[] = {"scalar", "avx2", "avx2", "avx512"};
    enum { CAP = 8192 };
    float *x = malloc(CAP * sizeof *x), *a = malloc(CAP * sizeof *a), *b = malloc(CAP * sizeof *b);
    for (int op = KERN_SIGMOID; op <= KERN_EXP; op++) {
        size_t n = 0;
        for (int e = -149; e <= 127; e++)
            for (int m = 0; m < 4; m++)
                for (int sg = -1; sg <= 1; sg += 2)
                    if (op != KERN_EXP || sg < 0)
                        x[n++] = (float)sg * ldexpf(1.0f + 0.23f * (float)m, e);
        for (int i = 0; i < 2000; i++)
            x[n++] = op == KERN_EXP ? (float)(-rnd() * 110) : (float)(rnd() * 240 - 120);
        static const float edge[] = {0.0f, -0.0f, -INFINITY, -87.3f, -88.8f, -103.9f, -104.1f, -150.0f};
        for (size_t i = 0; i < sizeof edge / sizeof *edge; i++)
            x[n++] = edge[i];
        if (op != KERN_EXP)
            x[n++] = INFINITY, x[n++] = FLT_MAX;
        memcpy(a, x, n * 4);
        kern_unary_at(op, KERN_SCALAR, a, n);
        double worst = 0, floor_ = ldexp(1.0, -100);
        size_t at = 0, bad = 0;
        for (size_t i = 0; i < n; i++) {
            double ref = ref_unary(op, x[i]);
            if (isnan(ref) || isnan(a[i])) {
                bad += !(isnan(ref) && isnan(a[i]));
                continue;
            }
            double err = (double)a[i] == ref ? 0 : fabs((double)a[i] - ref) / fmax(fabs(ref), floor_);
            if (err > worst)
                worst = err, at = i;
        }
        T_CHECK(worst <= ACT_BOUND && bad == 0,
                "%s: max err %.3g <= %g over %zu values (worst x %.9g: %.9g vs %.9g); %zu NaN mismatches",
                opn[op], worst, ACT_BOUND, n, (double)x[at], (double)a[at], ref_unary(op, x[at]), bad);
        memcpy(b, x, n * 4);
        kern_unary_at(op, -1, b, n);
        size_t diff = 0;
        for (size_t i = 0; i < n; i++) {
            float want = (float)ref_unary(op, x[i]);
            diff += memcmp(&want, &b[i], 4) != 0 && !(isnan(want) && isnan(b[i]));
        }
        T_CHECK(diff == 0, "%s: the double path is the double formula rounded once (%zu of %zu differ)",
                opn[op], diff, n);
        for (int isa = KERN_AVX2; isa <= KERN_AVX512; isa += KERN_AVX512 - KERN_AVX2) {
            char why[128];
            if (!kern_isa_ok(isa, why, sizeof why)) {
                T_SKIP("%s: %s twin not compared: %s", opn[op], lvl[isa], why);
                continue;
            }
            memcpy(b, x, n * 4);
            kern_unary_at(op, isa, b, n);
            T_CHECK(!memcmp(a, b, n * 4), "%s: %s == scalar twin bit for bit over %zu values", opn[op],
                    lvl[isa], n);
        }
        for (int isa = KERN_SCALAR; isa <= KERN_AVX512; isa++) {
            float v[37];
            for (int i = 0; i < 37; i++)
                v[i] = i % 3 ? NAN : -1.5f;
            kern_unary_at(op, isa, v, 37);
            int ok = 1;
            for (int i = 0; i < 37; i++)
                ok &= (i % 3 != 0) == (isnan(v[i]) != 0);
            T_CHECK(ok, "%s: level %d keeps NaN NaN (and -1.5 finite)", opn[op], isa);
        }
    }
    free(x), free(a), free(b);
}

static void check_env(void) {
    static const char *const good[] = {"float", "double", ""};
    for (int i = 0; i < 3; i++) {
        setenv("K3_ACT", good[i], 1);
        T_CHECK(kern_act_env() == K3_OK && kern_act_double() == (i == 1), "K3_ACT='%s' accepted, double %d",
                good[i], kern_act_double());
    }
    setenv("K3_ACT", "fast", 1);
    k3_status st = kern_act_env();
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "K3_ACT: 'fast'") &&
                strstr(k3_errmsg(), "float or double"),
            "K3_ACT=fast: error '%s'", k3_errmsg());
    unsetenv("K3_ACT");
    T_CHECK(kern_act_env() == K3_OK && !kern_act_double(), "K3_ACT unset: the float path");
}

int main(void) {
    const size_t cap = 400000;
    float       *g = malloc(cap * sizeof *g), *u = malloc(cap * sizeof *u);
    size_t       n = make_sweep(g, u, cap);
    T_CHECK(n > 200000, "sweep of %zu pairs", n);
    check_bound(g, u, n, 4.0f, 25.0f);
    check_bound(g, u, n, 1.0f, 1.0f);
    check_bound(g, u, n, 0.37f, 1000.0f);
    check_double(g, u, n);
    check_nan();
    check_levels(g, u, n);
    check_unary();
    check_env();
    free(g), free(u);
    return t_done();
}
