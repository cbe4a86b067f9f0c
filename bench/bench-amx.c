/* bench-amx.c: the AMX-INT8 tile kernels: the core's tile peak and the matmul against it.
 *
 * DESIGN
 * - int8_peak_amx_t1: a register-only tile loop for throughput: the eight tiles configured 16 x 64
 *   bytes, six TDPBSSD per iteration on six independent accumulators (tmm0-5) from one A and one
 *   B tile that never change (the loop before, four accumulators from two A and two B tiles,
 *   measured 2.0 TOPS where a throughput loop gave about 7.5: issue 39; its figure is the "# "
 *   line beside); ops = 2 per int8 multiply-add (16 x 16 x 64 per instruction); CPU seconds of
 *   the thread, a fixed iteration count. Reference: the AVX-512 VNNI peak loop of the same run
 *   (vpdpbusd, twelve accumulators), so the ratio is AMX over AVX-512.
 * - <fmt>_amx_matmul32_3072x3584_t1_gops: qmat_matmul of 32 columns at K3_ISA=amx, one thread,
 *   from the caches (one weight copy), int8 ops per CPU-second; reference: the tile peak above.
 *   <fmt>_amx_matmul32_..._vs_avx512: the same matmul against the AVX-512 level in the same run
 *   (alternating rounds, medians).
 * - <fmt>_amx_notile_matmul<n>_3072x3584_t1_gops (n = 32, 128; any CPU with the AVX-512 level):
 *   the AMX kernel with every tile instruction a no-op (kern_amx_matmul_notile): the time of its
 *   work around the tiles (activation layout and quantizer, nibble unpacking, float combination,
 *   stores), in int8 ops of the real product per CPU-second, so an upper bound on the AMX
 *   kernel's speed on a core like this one; reference: the default matmul of the same columns
 *   (qmat_matmul at the running level), alternating rounds, medians.
 * - The rest runs on the hardware only: the emulation's speed means nothing. Without AMX (or
 *   without the tile permission) every such result is a "# SKIP name (reason)" line.
 */
#include "bench.h"
#include "kern-amx-tile.h"
#include "kern-impl.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { ROUNDS = 5, AMX_PEAK_ITERS = 4000000 };

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A rows x cols matrix of the type (random weights, valid scales) in buf, and n columns x with
 * room for y: 0 when out of memory (then a SKIP line for result name; nothing left to free). */
static int hot_case(const char *name, int type, int rows, int cols, int n, qmat *m, uint8_t **buf, float **x,
                    float **y) {
    const size_t wb = q_wbytes(type, rows, cols), sb = q_sbytes(type, rows, cols);
    *buf = k3_aligned_alloc(64, wb + sb);
    *x   = malloc((size_t)n * cols * sizeof(float));
    *y   = malloc((size_t)n * rows * sizeof(float));
    if (!*buf || !*x || !*y) {
        printf("# SKIP %s (out of memory)\n", name);
        free(*buf), free(*x), free(*y);
        return 0;
    }
    uint32_t s = 12345;
    for (size_t i = 0; i < wb; i++)
        (*buf)[i] = (uint8_t)((s = s * 1103515245u + 12345u) >> 24);
    *m = (qmat){.type = type, .rows = rows, .cols = cols, .w = *buf};
    if (type == Q_MXFP4) {
        memset(*buf + wb, 120, sb);
        m->e = *buf + wb;
    } else {
        for (size_t i = 0; i < sb / 4; i++)
            memcpy(*buf + wb + i * 4, &(float){0.01f}, 4);
        m->s = (const float *)(const void *)(*buf + wb);
    }
    for (size_t i = 0; i < (size_t)n * cols; i++)
        (*x)[i] = (float)((i * 37) % 101 - 50) / 50.0f;
    return 1;
}

/* The AMX kernel's work around the tiles (kern_amx_matmul_notile) against the default matmul of
 * the same n columns, one thread, one cached copy, alternating rounds (AVX-512 level). */
static void bench_notile(int type, int rows, int cols, int n) {
    static const char *fmt[] = {"f32", "int8", "int4", "mxfp4"};
    char               name[96];
    snprintf(name, sizeof name, "%s_amx_notile_matmul%d_%dx%d_t1_gops", fmt[type], n, rows, cols);
    if (!bench_want(name) || !KERN_BUILD_AVX512 || !kern_isa_ok(KERN_AVX512, NULL, 0))
        return;
    qmat     m;
    uint8_t *buf;
    float   *x, *y;
    if (!hot_case(name, type, rows, cols, n, &m, &buf, &x, &y))
        return;
    omp_set_num_threads(1);
    kern_set_idot(1);
    double tn[ROUNDS], td[ROUNDS];
    kern_amx_matmul_notile(&m, x, n, y); /* warm-up */
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = cpu_now();
        kern_amx_matmul_notile(&m, x, n, y);
        double t1 = cpu_now();
        qmat_matmul(&m, x, n, y);
        tn[r] = t1 - t0, td[r] = cpu_now() - t1;
    }
    const double ops = 2.0 * rows * cols * n / 1e9;
    bench_report(name, ops / bench_median(tn, ROUNDS), "GOPS", ops / bench_median(td, ROUNDS),
                 "GOPS(default matmul)");
    free(buf), free(x), free(y);
}

#if KERN_BUILD_AMX

/* GOPS of AMX_PEAK_ITERS iterations of the tile loop: six products on independent accumulators
 * (six = 1), or the loop before, four accumulators from two A and two B tiles (six = 0). */
__attribute__((target("amx-tile,amx-int8"))) static double peak_amx_loop(int six) {
    _Alignas(64) amx_tilecfg    cfg = {.palette = 1};
    _Alignas(64) static int8_t  src[16 * 64];
    _Alignas(64) static int32_t out[16 * 16];
    for (int i = 0; i < 16 * 64; i++)
        src[i] = (int8_t)(i % 7 - 3);
    for (int t = 0; t < 8; t++)
        cfg.rows[t] = 16, cfg.colsb[t] = 64;
    KT_LOADCFG(&cfg);
    KT_ZERO(0);
    KT_ZERO(1);
    KT_ZERO(2);
    KT_ZERO(3);
    if (six) { /* six accumulators: tmm0-5; A tmm6, B tmm7 */
        KT_ZERO(4);
        KT_ZERO(5);
    } else { /* four accumulators: tmm0-3; A tmm4, tmm5, B tmm6, tmm7 */
        KT_LOAD(4, src, 64);
        KT_LOAD(5, src, 64);
    }
    KT_LOAD(6, src, 64);
    KT_LOAD(7, src, 64);
    double t0 = cpu_now();
    if (six)
        for (long k = 0; k < AMX_PEAK_ITERS; k++) {
            KT_DPBSSD(0, 6, 7);
            KT_DPBSSD(1, 6, 7);
            KT_DPBSSD(2, 6, 7);
            KT_DPBSSD(3, 6, 7);
            KT_DPBSSD(4, 6, 7);
            KT_DPBSSD(5, 6, 7);
        }
    else
        for (long k = 0; k < AMX_PEAK_ITERS; k++) {
            KT_DPBSSD(0, 4, 6);
            KT_DPBSSD(1, 4, 7);
            KT_DPBSSD(2, 5, 6);
            KT_DPBSSD(3, 5, 7);
        }
    KT_STORE(0, out, 64); /* the loop's result is used */
    double t = cpu_now() - t0;
    KT_RELEASE();
    return 2.0 * 16 * 16 * 64 * (six ? 6 : 4) * (double)AMX_PEAK_ITERS / t / 1e9 + (out[0] == 42 ? 1e-9 : 0);
}

#include <immintrin.h>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double peak_avx512(void) {
    __m512i xa = _mm512_set1_epi8(3), xb = _mm512_set1_epi8(5), acc[12];
    for (int i = 0; i < 12; i++)
        acc[i] = _mm512_setzero_si512();
    double t0 = cpu_now();
    for (long k = 0; k < 20000000; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++)
            acc[i] = _mm512_dpbusd_epi32(acc[i], xa, xb);
        __asm__ volatile("" : "+x"(xa));
    }
    double t = cpu_now() - t0;
    int    s = 0;
    for (int i = 0; i < 12; i++)
        s ^= _mm_cvtsi128_si32(_mm512_castsi512_si128(acc[i]));
    return 2.0 * 64 * 12 * 20000000.0 / t / 1e9 + (s == 42 ? 1e-9 : 0);
}

/* CPU seconds of one qmat_matmul of n columns at level isa. */
static double time_matmul(const qmat *m, const float *x, int n, float *y, int isa) {
    kern_set_isa(isa);
    double t0 = cpu_now();
    qmat_matmul(m, x, n, y);
    return cpu_now() - t0;
}

static void bench_amx_matmul(int type, int rows, int cols, int n, double peak) {
    static const char *fmt[] = {"f32", "int8", "int4", "mxfp4"};
    char               name[96], vs[112];
    snprintf(name, sizeof name, "%s_amx_matmul%d_%dx%d_t1_gops", fmt[type], n, rows, cols);
    snprintf(vs, sizeof vs, "%s_amx_matmul%d_%dx%d_t1_vs_avx512", fmt[type], n, rows, cols);
    if (!bench_want(name) && !bench_want(vs))
        return;
    qmat     m;
    uint8_t *buf;
    float   *x, *y;
    if (!hot_case(name, type, rows, cols, n, &m, &buf, &x, &y))
        return;
    const int isa0 = kern_isa();
    omp_set_num_threads(1);
    kern_set_idot(1);
    double ta[ROUNDS], tz[ROUNDS];
    time_matmul(&m, x, n, y, KERN_AMX); /* warm-up: caches, first tile use */
    for (int r = 0; r < ROUNDS; r++) {  /* alternating rounds */
        ta[r] = time_matmul(&m, x, n, y, KERN_AMX);
        tz[r] = time_matmul(&m, x, n, y, KERN_AVX512);
    }
    kern_set_isa(isa0);
    const double ops = 2.0 * rows * cols * n, a = bench_median(ta, ROUNDS), z = bench_median(tz, ROUNDS);
    if (bench_want(name))
        bench_report(name, ops / a / 1e9, "GOPS", peak, "GOPS(amx peak)");
    if (bench_want(vs))
        bench_report(vs, ops / a / 1e9, "GOPS", ops / z / 1e9, "GOPS(avx512)");
    free(buf), free(x), free(y);
}
#endif

int bench_amx(void); /* registered in bench-main.c */
int bench_amx(void) {
    static const int   types[]  = {Q_MXFP4, Q_I4, Q_I8};
    static const char *fmt[]    = {"f32", "int8", "int4", "mxfp4"};
    char               why[160] = "";
    const int          hw       = !kern_amx_emulated() && kern_isa_ok(KERN_AMX, why, sizeof why) &&
                   kern_amx_permission(why, sizeof why) && KERN_BUILD_AMX;
    printf("# amx: the AMX kernel with no-op tiles against the default matmul, one thread, one cached "
           "copy, %d alternating rounds, median\n",
           ROUNDS);
    for (size_t t = 0; t < 3; t++)
        for (int n = 32; n <= 128; n *= 4)
            bench_notile(types[t], 3072, 3584, n);
    if (kern_amx_emulated())
        snprintf(why, sizeof why, "K3_AMX_EMU=1: the emulated tiles' speed means nothing");
    if (!hw) {
        if (bench_want("int8_peak_amx_t1"))
            printf("# SKIP int8_peak_amx_t1 (%s)\n", why);
        for (size_t t = 0; t < 3; t++) {
            char name[96];
            snprintf(name, sizeof name, "%s_amx_matmul32_3072x3584_t1_gops", fmt[types[t]]);
            if (bench_want(name))
                printf("# SKIP %s (%s)\n", name, why);
        }
        return 0;
    }
#if KERN_BUILD_AMX
    double peak = 0.0;
    if (bench_want("int8_peak_amx_t1") || bench_want("amx_matmul")) {
        peak = peak_amx_loop(1);
        if (bench_want("int8_peak_amx_t1")) {
            bench_report("int8_peak_amx_t1", peak, "GOPS", peak_avx512(), "GOPS(avx512 vpdpbusd)");
            printf(
                "# int8_peak_amx_t1: the loop before (four accumulators, two A and two B tiles): %.0f GOPS\n",
                peak_amx_loop(0));
        }
    }
    printf("# amx: matmul of 32 columns, one thread, one cached weight copy, %d alternating rounds, median\n",
           ROUNDS);
    for (size_t t = 0; t < 3; t++)
        bench_amx_matmul(types[t], 3072, 3584, 32, peak);
#endif
    return 0;
}
