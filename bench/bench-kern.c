/* bench-kern.c: memory read bandwidth and matrix-vector throughput of the quantized kernels.
 *
 * DESIGN
 * - One arena, much larger than the last-level cache (4 x LLC, at least 512 MiB, at most
 *   2 GiB; K3_BENCH_MB overrides), holds back-to-back copies of a matrix (weights then scales);
 *   each pass runs one matvec per copy, so every weight byte comes from DRAM, as in decode.
 * - The reference is the same run's sustained read bandwidth at the same thread count: an AVX2
 *   (or plain) read over the whole arena, each thread's half in four quarters read side by side
 *   (the faster pattern here: BENCHMARKS.md), median of the passes. mem_read_linear_t<th>: the
 *   one-stream read that was the reference before, against it.
 * - Results: GB/s of weight bytes (weights + scales) = bytes of one pass / median pass time,
 *   first pass discarded as warm-up. Names: <fmt>[_idot]_matvec_<rows>x<cols>_t<threads>.
 * - "_cpu" results (only when the filter contains "cpu", e.g. `k3-bench idot_matvec_cpu`) stream
 *   like the plain ones but divide by the process CPU time per thread (CLOCK_PROCESS_CPUTIME_ID /
 *   threads), and so does their reference, mem_read_t<th>_cpu: on a machine shared with other
 *   work the time a thread is not scheduled drops out of both (wall clock counts it), while the
 *   time it stalls on DRAM stays in. A second, labelled measure; the wall-clock one stays.
 * - "_vs_own_read" (wall-clock IDOT matvecs): the same result against the same bytes read in the
 *   kernel's own pattern (each thread its static row share of every copy, in four quarters side
 *   by side) without the arithmetic, each pass alternated with the kernel's. On the Zen 5 of
 *   BENCHMARKS.md four streams a few MiB apart inside one matrix read at 0.5-0.8 of four streams
 *   far apart, so this says how much of the gap to mem_read the pattern alone makes.
 * - "_hot" results run the same number of matvecs on one copy that stays in the caches: the
 *   kernel's compute ceiling on one thread, in GB per CPU-second of that thread (ratio > 1
 *   means faster than DRAM could feed it).
 * - int8_peak_<isa>_t1: the core's int8 multiply-add peak for the running ISA (register-only
 *   loop, CPU time; ref: the AVX2 maddubs loop). <fmt>_idot_matmul<n>_..._gops: the default
 *   matmul (qmat_matmul) of 32 and 128 columns (the default chunk) in int8 ops per CPU-second
 *   against that peak; of 2, 4 and 7 columns (batched decode of that many sessions) against the
 *   same work as n matvecs of the same run (ratio < 1: the n columns cost more than n matvecs).
 */
#include "bench.h"
#include "kern-impl.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { PASSES = 4, WALL_PASSES = 6 }; /* first is warm-up; WALL: alternated with the read */

static uint8_t *arena;
static size_t   arena_bytes;

static void fill_random(uint8_t *p, size_t n) {
#pragma omp parallel
    {
        uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(omp_get_thread_num() + 1);
#pragma omp for schedule(static)
        for (size_t i = 0; i < n / 8; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            memcpy(p + i * 8, &s, 8);
        }
    }
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a = _mm256_xor_si256(a, _mm256_load_si256((const __m256i *)(p + i)));
        b = _mm256_xor_si256(b, _mm256_load_si256((const __m256i *)(p + i + 32)));
        c = _mm256_xor_si256(c, _mm256_load_si256((const __m256i *)(p + i + 64)));
        d = _mm256_xor_si256(d, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}

/* The same XOR over four quarters of p[n] read side by side (64 bytes of each per step), each
 * stream prefetched QUAD_AHEAD bytes ahead: the access pattern of the split matvec tiles, and a
 * faster read than one stream on the Zen 5 of BENCHMARKS.md (so the honest reference). */
enum { QUAD_AHEAD = 1024 };
__attribute__((target("avx2"))) static uint64_t read_quad_avx2(const uint8_t *p, size_t n) {
    const size_t q = n / 4 / 64 * 64;
    __m256i      v[8];
    for (int k = 0; k < 8; k++)
        v[k] = _mm256_setzero_si256();
    for (size_t i = 0; i < q; i += 64)
        for (int k = 0; k < 4; k++) {
            const uint8_t *s = p + (size_t)k * q + i;
            __builtin_prefetch(s + QUAD_AHEAD, 0, 3);
            v[2 * k]     = _mm256_xor_si256(v[2 * k], _mm256_load_si256((const __m256i *)s));
            v[2 * k + 1] = _mm256_xor_si256(v[2 * k + 1], _mm256_load_si256((const __m256i *)(s + 32)));
        }
    for (int k = 1; k < 8; k++)
        v[0] = _mm256_xor_si256(v[0], v[k]);
    return (uint64_t)_mm256_extract_epi64(v[0], 0) ^ (uint64_t)_mm256_extract_epi64(v[0], 3);
}
#endif

/* XOR of every 8-byte word of p[n] (n a multiple of 256, p 64-byte aligned): one linear stream,
 * or (quad) four quarters side by side. */
static uint64_t read_all(const uint8_t *p, size_t n, int quad) {
#if defined(__x86_64__)
    if (kern_cpu_avx2())
        return quad ? read_quad_avx2(p, n) : read_avx2(p, n);
#endif
    (void)quad;
    uint64_t a = 0, w;
    for (size_t i = 0; i < n; i += 8) {
        memcpy(&w, p + i, 8);
        a ^= w;
    }
    return a;
}

/* CPU seconds of the whole process (every thread). */
static double proc_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One read pass over the arena with th threads (GB/s); cpu: per CPU-second of each thread (process
 * CPU time / th) instead of wall time; quad: each thread reads its half in four streams (read_all). */
static double mem_pass(int th, int cpu, int quad) {
    uint64_t     sink = 0;
    const size_t n    = arena_bytes / 256 / (size_t)th * 256;
    double       t0   = cpu ? proc_time() / th : k3_time();
#pragma omp parallel num_threads(th) reduction(^ : sink)
    sink ^= read_all(arena + (size_t)omp_get_thread_num() * n, n, quad);
    double t = (cpu ? proc_time() / th : k3_time()) - t0;
    if (sink == 42)
        printf("# (sink)\n");
    return (double)(n * (size_t)th) / t / 1e9;
}

/* Sustained read bandwidth: the median of the passes but the first. */
static double mem_bw(int th, int cpu, int quad) {
    double r[PASSES - 1];
    for (int p = 0; p < PASSES; p++) {
        const double v = mem_pass(th, cpu, quad);
        if (p > 0)
            r[p - 1] = v;
    }
    return bench_median(r, PASSES - 1);
}

/* One pass of the matvec's own read pattern without the arithmetic: over every copy (stride bytes
 * apart) each of th threads reads its share of the rows' weights (rows * ith / th, the static
 * split of kern.c) in four quarters side by side (read_all), as the split tiles do. Returns
 * GB/s of the bytes read (the weights but each quarter's last partial 64 bytes). */
static double mat_read_pass(size_t stride, size_t copies, int rows, size_t rowb, int th) {
    size_t   read = 0;
    uint64_t sink = 0;
    double   t0   = k3_time();
#pragma omp parallel num_threads(th) reduction(^ : sink) reduction(+ : read)
    {
        const int    ith = omp_get_thread_num();
        const size_t b0  = (size_t)((long)rows * ith / th) * rowb,
                     b1  = (size_t)((long)rows * (ith + 1) / th) * rowb;
        const size_t n   = (b1 - b0) / 256 * 256;
        for (size_t k = 0; k < copies; k++)
            sink ^= read_all(arena + k * stride + b0, n, 1);
        read += copies * n;
    }
    double t = k3_time() - t0;
    if (sink == 42)
        printf("# (sink)\n");
    return (double)read / t / 1e9;
}

/* CPU seconds of the calling thread (the hot results run on one thread: robust to time slicing
 * on a shared machine, which wall time is not). */
static double cpu_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the core's int8 peak: register-only dot-product loops, one per ISA ---------------------
 * Twelve independent accumulators (more than the latency x throughput of every pipe), the
 * inputs never change; ops = 2 per int8 multiply-add. The loop count is fixed so the result
 * is bounded in time; CPU seconds of the thread. */
enum { PEAK_ITERS = 20000000 };

#if defined(__x86_64__)
#define PEAK_LOOP(T, zero, op, macs)                                                                         \
    do {                                                                                                     \
        T acc[12];                                                                                           \
        for (int i = 0; i < 12; i++)                                                                         \
            acc[i] = zero;                                                                                   \
        double t0 = cpu_time();                                                                              \
        for (long k = 0; k < PEAK_ITERS; k++) {                                                              \
            _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) acc[i] = op;                               \
            __asm__ volatile("" : "+x"(xa));                                                                 \
        }                                                                                                    \
        double t = cpu_time() - t0;                                                                          \
        memcpy(&sink, &acc[0], sizeof sink);                                                                 \
        for (int i = 1; i < 12; i++) {                                                                       \
            uint64_t v;                                                                                      \
            memcpy(&v, &acc[i], sizeof v);                                                                   \
            sink ^= v;                                                                                       \
        }                                                                                                    \
        return 2.0 * (macs)*12 * PEAK_ITERS / t / 1e9 + (sink == 42 ? 1e-9 : 0);                             \
    } while (0)

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double peak_avx512(void) {
    __m512i  xa = _mm512_set1_epi8(3), xb = _mm512_set1_epi8(5);
    uint64_t sink;
    PEAK_LOOP(__m512i, _mm512_setzero_si512(), _mm512_dpbusd_epi32(acc[i], xa, xb), 64);
}
__attribute__((target("avx2,avxvnni"))) static double peak_avxvnni(void) {
    __m256i  xa = _mm256_set1_epi8(3), xb = _mm256_set1_epi8(5);
    uint64_t sink;
    PEAK_LOOP(__m256i, _mm256_setzero_si256(), _mm256_dpbusd_avx_epi32(acc[i], xa, xb), 32);
}
__attribute__((target("avx2"))) static double peak_avx2(void) {
    __m256i  xa = _mm256_set1_epi8(3), xb = _mm256_set1_epi8(5), one = _mm256_set1_epi16(1);
    uint64_t sink;
    PEAK_LOOP(__m256i, _mm256_setzero_si256(),
              _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(xa, xb), one)), 32);
}
#endif

/* GOPS of the running ISA's int8 dot-product instruction (0 for the scalar level). */
static double int8_peak(int isa) {
#if defined(__x86_64__)
    switch (isa) {
    case KERN_AVX512:
    case KERN_AMX:
        return peak_avx512();
    case KERN_AVX2_VNNI:
        return peak_avxvnni();
    case KERN_AVX2:
        return peak_avx2();
    }
#endif
    (void)isa;
    return 0.0;
}

/* How a matvec result is timed: streaming from DRAM in wall time, the same in CPU time per thread,
 * or one cached copy in the thread's CPU time. */
enum { MV_WALL, MV_CPU, MV_HOT };

static void matvec_name(char *name, size_t size, int type, int rows, int cols, int idot, int th, int mode) {
    static const char *fmt[] = {"f32", "int8", "int4", "mxfp4"};
    snprintf(name, size, "%s%s_matvec_%dx%d_t%d%s", fmt[type], idot ? "_idot" : "", rows, cols, th,
             mode == MV_HOT   ? "_hot"
             : mode == MV_CPU ? "_cpu"
                              : "");
}

/* One format x shape x numerics x threads result. MV_HOT: one copy, read again and again from the
 * caches (the kernel's compute ceiling), as many matvecs as a streaming pass would make. */
/* The copies of a matrix (wb weight bytes, sb scale bytes) stride bytes apart in the arena, each
 * given valid scales (random bytes could be NaN or subnormal); returns how many fit. */
static size_t arena_scales(int type, size_t wb, size_t sb, size_t stride) {
    const size_t copies = arena_bytes / stride;
    for (size_t k = 0; k < copies; k++) {
        uint8_t *s = arena + k * stride + wb;
        if (type == Q_MXFP4)
            memset(s, 120, sb);
        else
            for (size_t i = 0; i < sb / 4; i++)
                memcpy(s + i * 4, &(float){0.01f}, 4);
    }
    return copies;
}

static void bench_matvec(int type, int rows, int cols, int idot, int th, int mode, double ref) {
    char name[96];
    matvec_name(name, sizeof name, type, rows, cols, idot, th, mode);
    if (!bench_want(name) || (mode == MV_CPU && !bench_asked("cpu")))
        return;
    const int    hot = mode == MV_HOT;
    const size_t wb = q_wbytes(type, rows, cols), sb = q_sbytes(type, rows, cols);
    const size_t stride = (wb + sb + 63) / 64 * 64;
    const size_t copies = arena_scales(type, wb, sb, stride);
    float       *x = malloc((size_t)cols * sizeof(float)), *y = malloc((size_t)rows * sizeof(float));
    for (int c = 0; c < cols; c++)
        x[c] = (float)((c * 37) % 101 - 50) / 50.0f;
    omp_set_num_threads(th);
    kern_set_idot(idot);
    /* Wall-clock results alternate every pass with a pass of their reference, the four-stream read
     * of the whole arena (memory bandwidth here drifts by up to 2x within seconds, so a reference
     * taken once before a series of results does not describe the moment of each); the IDOT ones
     * also with mat_read_pass: the same bytes in the same pattern without the arithmetic (how much
     * of the gap to mem_read is the pattern's own: BENCHMARKS.md). Ratios per pass, median. */
    const int    wall = mode == MV_WALL, same = wall && idot, np = wall ? WALL_PASSES : PASSES;
    double       t[WALL_PASSES], rf[WALL_PASSES], rd[WALL_PASSES], q[WALL_PASSES], qs[WALL_PASSES];
    const double bytes = (double)(copies * (wb + sb));
    for (int p = 0; p < np; p++) {
        if (wall && p > 0)
            rf[p - 1] = mem_pass(th, 0, 1);
        if (same && p > 0)
            rd[p - 1] = mat_read_pass(stride, copies, rows, q_wbytes(type, 1, cols), th);
        double t0 = hot ? cpu_time() : mode == MV_CPU ? proc_time() / th : k3_time();
        for (size_t k = 0; k < copies; k++) {
            uint8_t *base = arena + (hot ? 0 : k) * stride;
            qmat     m    = {.type = type, .rows = rows, .cols = cols, .w = base};
            if (type == Q_MXFP4)
                m.e = base + wb;
            else
                m.s = (const float *)(const void *)(base + wb);
            qmat_matvec(&m, x, y);
        }
        if (p > 0) {
            t[p - 1] = (hot ? cpu_time() : mode == MV_CPU ? proc_time() / th : k3_time()) - t0;
            if (wall)
                q[p - 1] = bytes / t[p - 1] / 1e9 / rf[p - 1];
            if (same)
                qs[p - 1] = bytes / t[p - 1] / 1e9 / rd[p - 1];
        }
    }
    const double gbs = bytes / bench_median(t, np - 1) / 1e9;
    if (!wall) {
        bench_report(name, gbs, "GB/s", ref, "GB/s");
    } else {
        bench_report(name, gbs, "GB/s", bench_median(rf, np - 1), "GB/s(read, alternated)");
        const double qm = bench_median(q, np - 1); /* sorts q */
        printf("#   %s per pass against the read beside it: median %.3f, %.3f to %.3f\n", name, qm, q[0],
               q[np - 2]);
    }
    if (same) {
        strncat(name, "_vs_own_read", sizeof name - strlen(name) - 1);
        bench_report(name, gbs, "GB/s", bench_median(rd, np - 1), "GB/s(same bytes, same pattern)");
        const double qm = bench_median(qs, np - 1); /* sorts qs */
        printf("#   %s per pass: median %.3f, %.3f to %.3f\n", name, qm, qs[0], qs[np - 2]);
    }
    free(x);
    free(y);
}

/* The matrix at the arena's start (weights random, scales valid: random bytes could be NaN or
 * subnormal), and n columns of cols activations, for the hot matmul results. */
static qmat hot_mat(int type, int rows, int cols) {
    const size_t wb = q_wbytes(type, rows, cols), sb = q_sbytes(type, rows, cols);
    uint8_t     *s = arena + wb;
    if (type == Q_MXFP4)
        memset(s, 120, sb);
    else
        for (size_t i = 0; i < sb / 4; i++)
            memcpy(s + i * 4, &(float){0.01f}, 4);
    qmat m = {.type = type, .rows = rows, .cols = cols, .w = arena};
    if (type == Q_MXFP4)
        m.e = s;
    else
        m.s = (const float *)(const void *)s;
    return m;
}

static float *hot_cols(int n, int cols) {
    float *x = malloc((size_t)n * cols * sizeof(float));
    for (int i = 0; i < n * cols; i++)
        x[i] = (float)((i * 37) % 101 - 50) / 50.0f;
    return x;
}

/* n matvecs, one per column (the work of a matmul without its multi-column kernels). */
static void matvecs(const qmat *m, const float *x, int n, float *y) {
    for (int c = 0; c < n; c++)
        qmat_matvec(m, x + (size_t)c * m->cols, y + (size_t)c * m->rows);
}

/* PASSES rounds of qmat_matmul then other on the same columns (each reps times), in the
 * thread's CPU time; the rounds but the first into ta (qmat_matmul) and tb (other). */
static void time_pair(const qmat *m, const float *x, int n, float *y, int reps,
                      void (*other)(const qmat *, const float *, int, float *), double *ta, double *tb) {
    for (int p = 0; p < PASSES; p++) {
        double t0 = cpu_time();
        for (int i = 0; i < reps; i++)
            qmat_matmul(m, x, n, y);
        double t1 = cpu_time();
        for (int i = 0; i < reps; i++)
            other(m, x, n, y);
        if (p > 0) {
            ta[p - 1] = t1 - t0;
            tb[p - 1] = cpu_time() - t1;
        }
    }
}

static const char *const mm_fmt[] = {"f32", "int8", "int4", "mxfp4"};

/* 1 when the filter asks for a result of bench_matmul(type, rows, cols, n). */
static int matmul_wanted(int type, int rows, int cols, int n) {
    char name[96];
    snprintf(name, sizeof name, "%s_idot_matmul%d_%dx%d_t1_hot", mm_fmt[type], n, rows, cols);
    if (bench_want(name))
        return 1;
    snprintf(name, sizeof name, "%s_idot_matmul%d_%dx%d_t1_gops", mm_fmt[type], n, rows, cols);
    return bench_want(name);
}

/* qmat_matmul of n columns on one cached copy, IDOT, one thread (prefill: 32, 128 columns;
 * batched decode: a few), against the same work done as n separate matvecs in the same passes.
 * _hot: GB/s counts the weight bytes once per column (what n matvecs would read), per
 * CPU-second; ratio: the speedup of the multi-column kernel. _gops: int8 ops per CPU-second,
 * against the core's peak (n >= KERN_NC512) or the n matvecs (fewer: batched decode). A pass of
 * fewer than KERN_NC512 columns repeats the product to about 128 columns' work, so that it is
 * timed as long as the widest. */
static void bench_matmul(int type, int rows, int cols, int n, double peak) {
    char name[96];
    if (!matmul_wanted(type, rows, cols, n))
        return;
    const qmat m = hot_mat(type, rows, cols);
    float     *x = hot_cols(n, cols), *y = malloc((size_t)n * rows * sizeof(float));
    const int  reps = n < KERN_NC512 ? (128 + n - 1) / n : 1;
    omp_set_num_threads(1);
    kern_set_idot(1);
    double tm[PASSES - 1], tv[PASSES - 1];
    time_pair(&m, x, n, y, reps, matvecs, tm, tv);
    const double bytes = (double)(q_wbytes(type, rows, cols) + q_sbytes(type, rows, cols)) * n * reps;
    snprintf(name, sizeof name, "%s_idot_matmul%d_%dx%d_t1_hot", mm_fmt[type], n, rows, cols);
    if (bench_want(name))
        bench_report(name, bytes / bench_median(tm, PASSES - 1) / 1e9, "GB/s",
                     bytes / bench_median(tv, PASSES - 1) / 1e9, "GB/s");
    snprintf(name, sizeof name, "%s_idot_matmul%d_%dx%d_t1_gops", mm_fmt[type], n, rows, cols);
    const double ops = 2.0 * rows * cols * n * reps, gops = ops / bench_median(tm, PASSES - 1) / 1e9;
    if (bench_want(name) && n < KERN_NC512)
        bench_report(name, gops, "GOPS", ops / bench_median(tv, PASSES - 1) / 1e9, "GOPS(matvecs)");
    else if (bench_want(name) && peak > 0)
        bench_report(name, gops, "GOPS", peak, "GOPS(peak)");
    free(x);
    free(y);
}

/* Batched decode from DRAM: qmat_matmul of n columns on every copy of the arena (the weights
 * read once per copy, as a batched step reads them), th threads, wall clock, GB/s of weight bytes
 * (once per copy, not per column); each pass alternated with a pass of the four-stream read
 * (the reference, as for the matvecs). <fmt>_idot_matmul<n>_<rows>x<cols>_t<th>. */
static void bench_matmul_stream(int type, int rows, int cols, int n, int th) {
    char name[96];
    snprintf(name, sizeof name, "%s_idot_matmul%d_%dx%d_t%d", mm_fmt[type], n, rows, cols, th);
    if (!bench_want(name))
        return;
    const size_t wb = q_wbytes(type, rows, cols), sb = q_sbytes(type, rows, cols);
    const size_t stride = (wb + sb + 63) / 64 * 64, copies = arena_scales(type, wb, sb, stride);
    float       *x = hot_cols(n, cols), *y = malloc((size_t)n * rows * sizeof(float));
    omp_set_num_threads(th);
    kern_set_idot(1);
    double t[WALL_PASSES], rf[WALL_PASSES];
    for (int p = 0; p < WALL_PASSES; p++) {
        if (p > 0)
            rf[p - 1] = mem_pass(th, 0, 1);
        const double t0 = k3_time();
        for (size_t k = 0; k < copies; k++) {
            uint8_t *base = arena + k * stride;
            qmat     m    = {.type = type, .rows = rows, .cols = cols, .w = base};
            if (type == Q_MXFP4)
                m.e = base + wb;
            else
                m.s = (const float *)(const void *)(base + wb);
            qmat_matmul(&m, x, n, y);
        }
        if (p > 0)
            t[p - 1] = k3_time() - t0;
    }
    bench_report(name, (double)(copies * (wb + sb)) / bench_median(t, WALL_PASSES - 1) / 1e9, "GB/s",
                 bench_median(rf, WALL_PASSES - 1), "GB/s(read, alternated)");
    free(x);
    free(y);
}

int bench_kern(void); /* registered in bench-main.c */
int bench_kern(void) {
    static const int shapes[][2] = {{3072, 3584}, {3584, 3072}, {7168, 3584}};
    static const int types[]     = {Q_MXFP4, Q_I4, Q_I8};
    static const int widths[]    = {2, 4, 7, 32, 128}; /* matmul columns */
    int              any         = 0;
    char             name[64];
    for (int th = 1; th <= 2; th++) {
        snprintf(name, sizeof name, "mem_read_t%d", th);
        any |= bench_want(name);
        snprintf(name, sizeof name, "mem_read_linear_t%d", th);
        any |= bench_want(name);
    }
    for (size_t t = 0; t < 3 && !any; t++)
        for (int idot = 0; idot <= 1; idot++)
            for (int th = 1; th <= 2; th++)
                for (size_t s = 0; s < 3; s++)
                    for (int mode = MV_WALL; mode <= MV_HOT; mode++) {
                        matvec_name(name, sizeof name, types[t], shapes[s][0], shapes[s][1], idot, th, mode);
                        any |= bench_want(name) && (mode != MV_CPU || bench_asked("cpu"));
                        any |= bench_want("int8_peak");
                    }
    for (size_t t = 0; t < 3 && !any; t++)
        for (size_t w = 0; w < sizeof widths / sizeof *widths; w++) {
            any |= matmul_wanted(types[t], shapes[0][0], shapes[0][1], widths[w]);
            for (int th = 1; th <= 2 && widths[w] < KERN_NC512; th++) {
                snprintf(name, sizeof name, "%s_idot_matmul%d_%dx%d_t%d", mm_fmt[types[t]], widths[w],
                         shapes[0][0], shapes[0][1], th);
                any |= bench_want(name);
            }
        }
    if (!any)
        return 0;

    long llc    = sysconf(_SC_LEVEL3_CACHE_SIZE);
    arena_bytes = llc > 0 ? 4 * (size_t)llc : 0;
    arena_bytes = arena_bytes < (512u << 20)    ? (512u << 20)
                  : arena_bytes > (2048u << 20) ? (2048u << 20)
                                                : arena_bytes;
    int mb      = 0;
    if (bench_env_int(K3_SETTING_BENCH_MB, &mb))
        return 1;
    if (mb)
        arena_bytes = (size_t)mb << 20;
    arena = k3_aligned_alloc(64, arena_bytes);
    if (!arena) {
        fprintf(stderr, "bench-kern: cannot allocate %zu MiB\n", arena_bytes >> 20);
        return 1;
    }
    fill_random(arena, arena_bytes);
    printf("# kern: arena %zu MiB (LLC %ld MiB), %s kernels, %d passes (first discarded), median\n",
           arena_bytes >> 20, llc > 0 ? llc >> 20 : -1, kern_isa_name(kern_isa()), PASSES);
    double bw[3] = {0}, bwc[3] = {0};
    for (int th = 1; th <= 2; th++) {
        bw[th] = mem_bw(th, 0, 1);
        snprintf(name, sizeof name, "mem_read_t%d", th);
        if (bench_want(name))
            bench_report(name, bw[th], "GB/s", bw[th], "GB/s");
        snprintf(name, sizeof name, "mem_read_linear_t%d", th); /* the reference before: one stream */
        if (bench_want(name))
            bench_report(name, mem_bw(th, 0, 0), "GB/s", bw[th], "GB/s");
        if (!bench_asked("cpu"))
            continue;
        bwc[th] = mem_bw(th, 1, 1);
        snprintf(name, sizeof name, "mem_read_t%d_cpu", th);
        if (bench_want(name))
            bench_report(name, bwc[th], "GB/s", bwc[th], "GB/s");
        snprintf(name, sizeof name, "mem_read_linear_t%d_cpu", th);
        if (bench_want(name))
            bench_report(name, mem_bw(th, 1, 0), "GB/s", bwc[th], "GB/s");
    }
    const int idot0 = kern_idot();
    for (size_t t = 0; t < 3; t++)
        for (int idot = 0; idot <= 1; idot++)
            for (int th = 1; th <= 2; th++)
                for (size_t s = 0; s < 3; s++) {
                    bench_matvec(types[t], shapes[s][0], shapes[s][1], idot, th, MV_WALL, bw[th]);
                    bench_matvec(types[t], shapes[s][0], shapes[s][1], idot, th, MV_CPU, bwc[th]);
                }
    /* the core's int8 peak for the running ISA (the reference of the matmul GOPS) */
    double peak = 0.0;
    snprintf(name, sizeof name, "int8_peak_%s_t1", kern_isa_name(kern_isa()));
    if (bench_want(name) || bench_want("matmul32") || bench_want("matmul128")) { /* the wide rows' ref */
        peak      = int8_peak(kern_isa());
        double p2 = kern_cpu_avx2() ? int8_peak(KERN_AVX2) : 0.0;
        if (peak > 0 && bench_want(name))
            bench_report(name, peak, "GOPS", p2, "GOPS(avx2 maddubs)");
    }
    /* batched decode (2, 4, 7 sessions) and prefill (32 and 128 columns: the default chunk):
     * the default matmul, hot */
    for (size_t t = 0; t < 3; t++)
        for (size_t w = 0; w < sizeof widths / sizeof *widths; w++)
            bench_matmul(types[t], shapes[0][0], shapes[0][1], widths[w], peak);
    /* batched decode from DRAM: a few columns, 1 and 2 threads */
    for (size_t t = 0; t < 3; t++)
        for (size_t w = 0; w < sizeof widths / sizeof *widths && widths[w] < KERN_NC512; w++)
            for (int th = 1; th <= 2; th++)
                bench_matmul_stream(types[t], shapes[0][0], shapes[0][1], widths[w], th);
    /* compute ceilings: the first shape, one thread, from the caches */
    for (size_t t = 0; t < 3; t++)
        for (int idot = 0; idot <= 1; idot++)
            bench_matvec(types[t], shapes[0][0], shapes[0][1], idot, 1, MV_HOT, bw[1]);
    kern_set_idot(idot0);
    free(arena);
    arena = NULL;
    return 0;
}
