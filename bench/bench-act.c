/* bench-act.c: the element-wise SiTU-GLU, float path (kern_situ_glu_isa at each level this CPU
 * runs) against the libm double formula (kern_situ_glu_double, K3_ACT=double) in the same run.
 *
 * DESIGN
 * - 4096 pairs (a forward-pass block, 32 KiB: cache-resident) of typical activations, g and u
 *   uniform in [-20, 20]; each timing runs the function over them REPS times on a fresh copy.
 * - CPU time of the calling thread (one thread, as one block of the forward pass), ns per
 *   element; ROUNDS alternating rounds (double, then each level), medians.
 * - Results: situ_glu_<level> ns/elem, ref the double formula's ns/elem (ratio < 1: faster).
 */
#include "act.h"
#include "bench.h"
#include "quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int bench_act(void);

enum { N = 4096, REPS = 64, ROUNDS = 5 };

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ns per element of one path: level -1 = the double formula. */
static double time_path(int level, const float *g0, const float *u, float *g) {
    double t = 0;
    for (int r = 0; r < REPS; r++) {
        memcpy(g, g0, N * sizeof *g);
        double t0 = cpu_now();
        if (level < 0)
            kern_situ_glu_double(g, u, N, 4.0f, 25.0f);
        else
            kern_situ_glu_isa(level, g, u, N, 4.0f, 25.0f);
        t += cpu_now() - t0;
    }
    return t / ((double)REPS * N) * 1e9;
}

int bench_act(void) {
    static const int         level[] = {KERN_SCALAR, KERN_AVX2, KERN_AVX512};
    static const char *const name[]  = {"situ_glu_scalar", "situ_glu_avx2", "situ_glu_avx512"};
    enum { NL = 3 };
    int want = 0;
    for (int i = 0; i < NL; i++)
        want |= bench_want(name[i]);
    if (!want)
        return 0;
    float   *g0 = malloc(N * sizeof *g0), *u = malloc(N * sizeof *u), *g = malloc(N * sizeof *g);
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) {
        s     = s * 1664525u + 1013904223u;
        g0[i] = (float)(s >> 8) / 16777216.0f * 40.0f - 20.0f;
        s     = s * 1664525u + 1013904223u;
        u[i]  = (float)(s >> 8) / 16777216.0f * 40.0f - 20.0f;
    }
    double td[ROUNDS], tl[NL][ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        td[r] = time_path(-1, g0, u, g);
        for (int i = 0; i < NL; i++)
            tl[i][r] = kern_isa_ok(level[i], NULL, 0) ? time_path(level[i], g0, u, g) : 0;
    }
    const double ref = bench_median(td, ROUNDS);
    for (int i = 0; i < NL; i++) {
        char why[128];
        if (!kern_isa_ok(level[i], why, sizeof why))
            printf("# %s: not run (%s)\n", name[i], why);
        else if (bench_want(name[i]))
            bench_report(name[i], bench_median(tl[i], ROUNDS), "ns/elem", ref, "ns/elem(double)");
    }
    free(g0), free(u), free(g);
    return 0;
}
