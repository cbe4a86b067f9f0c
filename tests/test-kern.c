/* test-kern.c: the matrix-vector kernels against their scalar oracle.
 *
 * - Every level == the scalar reference, bit for bit: the IDOT (integer) paths in the group
 *   order, the exact-float paths (Q_F32; every type with K3_IDOT=0) in the lane order (kern.c).
 * - qmat_matmul column t == qmat_matvec on column t, bit for bit, in every path and at 1 and 2
 *   threads; results do not depend on the thread count.
 * - One rounding order: every level at 1, 7, 32 and 128 columns == kern_amx_ref (the group order
 *   in plain C), bit for bit.
 * - IDOT vs exact-float: within the activation quantization bound sum_c |w_c| d_g / 2.
 * - MXFP4 decode on known values: signs, negative zero, exponent extremes (0, 1, 127, 254).
 * Shapes are odd on purpose (rows and cols not multiples of 8/32/64; MXFP4 cols multiple of 32).
 */
#include "kern-impl.h"
#include "test.h"
#include "test-qmat.h"

#include <float.h>
#include <omp.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *tname[] = {"f32", "i8", "i4", "mxfp4"};
static const char *iname[] = {"scalar", "avx2", "avx-vnni", "avx512-vnni", "amx"};
static int         max_isa; /* highest enum kern_isa this CPU runs with kernels of its own */

static void run_mv(const qmat *m, const float *x, float *y, int isa, int idot) {
    kern_set_isa(isa);
    kern_set_idot(idot);
    qmat_matvec(m, x, y);
}

static int bits_equal(const float *a, const float *b, size_t n) {
    return !memcmp(a, b, n * sizeof(float));
}

/* Every check of one matrix. */
static void check_mat(const qmat *m) {
    /* 11 columns: two KERN_NC blocks + 3 single (AVX2), one KERN_NC512 block + one of 3 (AVX-512) */
    const int rows = m->rows, cols = m->cols, N = 11;
    float    *x  = malloc((size_t)N * cols * sizeof(float));
    float    *y0 = malloc((size_t)rows * sizeof(float)), *y1 = malloc((size_t)rows * sizeof(float));
    float    *ym = malloc((size_t)N * rows * sizeof(float)), *yv = malloc((size_t)N * rows * sizeof(float));
    float    *wr = malloc((size_t)cols * sizeof(float));
    for (int i = 0; i < N * cols; i++)
        x[i] = frnd() * (i % 5 == 0 ? 4.0f : 1.0f);
    char what[96];
    snprintf(what, sizeof what, "%s %dx%d", tname[m->type], rows, cols);

    /* exact-float: every level bit-identical to the scalar twin (the lane order, kern.c) */
    run_mv(m, x, y0, KERN_SCALAR, 0);
    for (int isa = KERN_AVX2; isa <= max_isa; isa++) {
        run_mv(m, x, y1, isa, 0);
        int bad = -1;
        for (int r = 0; r < rows && bad < 0; r++)
            if (memcmp(&y0[r], &y1[r], sizeof(float)))
                bad = r;
        T_CHECK(bad < 0, "%s: exact-float %s bit-identical to scalar (first differing row %d: %a vs %a)",
                what, iname[isa], bad, bad < 0 ? 0.0 : (double)y1[bad], bad < 0 ? 0.0 : (double)y0[bad]);
    }
    /* IDOT: AVX2 bit-identical to scalar; both within the activation quantization bound */
    if (m->type != Q_F32) {
        float *yi = malloc((size_t)rows * sizeof(float));
        run_mv(m, x, yi, KERN_SCALAR, 1);
        for (int isa = KERN_AVX2; isa <= max_isa; isa++) {
            run_mv(m, x, y1, isa, 1);
            T_CHECK(bits_equal(yi, y1, (size_t)rows), "%s: IDOT %s bit-identical to scalar", what,
                    iname[isa]);
        }
        int      ok  = 1;
        void    *buf = k3_aligned_alloc(32, kern_act_bytes(cols));
        kern_act a;
        kern_act_make(m->type, x, cols, buf, &a);
        for (int r = 0; r < rows; r++) {
            qmat_dequant_row(m, r, wr);
            double b = 0.0, mag = 0.0;
            for (int c = 0; c < cols; c++) {
                b += fabs((double)wr[c]) * (double)a.d[c / 32] * 0.5;
                mag += fabs((double)wr[c] * (double)x[c]);
            }
            ok &= fabs((double)yi[r] - (double)y0[r]) <=
                  b * 1.001 + 4.0 * (cols + 4) * (double)FLT_EPSILON * mag;
        }
        T_CHECK(ok, "%s: IDOT within sum|w| d/2 of exact-float", what);
        free(buf);
        free(yi);
    }
    /* matmul == matvec, bit for bit, every path, 1 and 2 threads */
    for (int isa = 0; isa <= max_isa; isa++)
        for (int idot = 0; idot <= (m->type != Q_F32); idot++) {
            int ok = 1;
            for (int th = 1; th <= 4; th++) { /* 3, 4: 2 threads, rows taken dynamically */
                omp_set_num_threads(th > 2 ? 2 : th);
                kern_set_rows_dynamic(th > 2);
                memset(ym, 0xff, (size_t)N * rows * sizeof(float)); /* NaN: a row left out shows */
                memset(yv, 0xff, (size_t)N * rows * sizeof(float));
                kern_set_isa(isa);
                kern_set_idot(idot);
                qmat_matmul(m, x, N, ym);
                for (int t = 0; t < N; t++)
                    qmat_matvec(m, x + (size_t)t * cols, yv + (size_t)t * rows);
                ok &= bits_equal(ym, yv, (size_t)N * rows);
                if (th == 1)
                    memcpy(y1, ym, (size_t)rows * sizeof(float));
                else
                    ok &= bits_equal(y1, ym, (size_t)rows);
            }
            kern_set_rows_dynamic(0);
            T_CHECK(ok,
                    "%s: %s%s matmul(n=11) == matvec per column, same at 1 and 2 threads (fixed and dynamic "
                    "rows)",
                    what, iname[isa], idot ? " idot" : "");
        }
    omp_set_num_threads(2);
    free(x), free(y0), free(y1), free(ym), free(yv), free(wr);
}

/* int8 at the magnitude bounds of the AVX-512 row tiles' sums: unsigned codes w ^ 0x80 of 0 and
 * 255 against codes of +-127 (a group's sum of (w + 128) q up to 32 x 255 x 127), the correction
 * -128 x sum q added after the reduction in float (kern_act.cg): every level at 1 and 7 columns
 * bit-identical to scalar, and a one-sign row against its exact value. */
static void check_i8_extremes(void) {
    static const int colss[] = {32, 100, 3584, 4135};
    int              ok = 1, exact = 1, cases = 0;
    for (size_t ci = 0; ci < sizeof colss / sizeof colss[0]; ci++) {
        /* 37 rows: two blocks of the int8 matmul's 16-row kernel (2 .. 12 columns), then 4-row
         * and 1-row tiles */
        const int cols = colss[ci], rows = 37, N = 7;
        int8_t   *w = malloc((size_t)rows * cols);
        float    *s = malloc((size_t)rows * sizeof(float));
        float    *x = malloc((size_t)N * cols * sizeof(float));
        float *y0 = malloc((size_t)N * rows * sizeof(float)), *y1 = malloc((size_t)N * rows * sizeof(float));
        for (int c = 0; c < N * cols; c++) /* |x| = 1 everywhere: every code +-127, d = 1/127 */
            x[c] = (c % cols) % 3 == 1 && c >= cols ? -1.0f : 1.0f;
        for (int r = 0; r < rows; r++) {
            s[r] = 1.0f;
            for (int c = 0; c < cols; c++) {
                const int pat[]         = {-128, 127, c & 1 ? 127 : -128, c % 3 == 1 ? 127 : -128, -128};
                w[(size_t)r * cols + c] = (int8_t)(r % 16 < 5 ? pat[r % 16] : (rnd() & 1) ? 127 : -128);
            }
        }
        const qmat m = {.type = Q_I8, .rows = rows, .cols = cols, .w = w, .s = s};
        kern_set_isa(KERN_SCALAR);
        kern_set_idot(1);
        qmat_matmul(&m, x, N, y0);
        /* rows 0 and 16 (all -128) on column 0 (all +1): per group fmaf(-128 * 127 * len, 1/127, acc) */
        float want = 0.0f;
        for (int g = 0; g < (cols + 31) / 32; g++) {
            const int len = cols - g * 32 < 32 ? cols - g * 32 : 32;
            want          = fmaf((float)(-128 * 127 * len), 1.0f / 127.0f, want);
        }
        exact &= y0[0] == want && y0[16] == want;
        for (int isa = KERN_AVX2; isa <= max_isa; isa++)
            for (int n = 1; n <= N; n = n == 1 ? 2 : n == 2 ? N : N + 1) {
                kern_set_isa(isa);
                kern_set_idot(1);
                memset(y1, 0xff, (size_t)N * rows * sizeof(float));
                qmat_matmul(&m, x, n, y1);
                ok &= bits_equal(y0, y1, (size_t)n * rows);
                cases++;
            }
        free(w), free(s), free(x), free(y0), free(y1);
    }
    T_CHECK(ok,
            "int8 at the sums' bounds (codes 0/255 x +-127): every level == scalar at 1, 2 and 7 columns (%d "
            "cases)",
            cases);
    T_CHECK(exact, "int8 at the sums' bounds: an all -128 row against all +1 columns gives the group order's "
                   "exact value");
}

/* MXFP4 on hand-made bytes: decode and one-hot products give the exact values. */
static void check_mxfp4_known(int have_avx2) {
    /* one row of 64 columns: group 0 exponent 127 (x1), group 1 exponent given per case */
    static const uint8_t ex[][2] = {{127, 0}, {127, 1}, {127, 254}, {128, 126}};
    for (size_t k = 0; k < sizeof ex / sizeof ex[0]; k++) {
        uint8_t w[32], e[2] = {ex[k][0], ex[k][1]};
        for (int i = 0; i < 32; i++)
            w[i] = (uint8_t)((i * 5 + 3) & 15) | (uint8_t)(((i * 3 + 9) & 15) << 4);
        w[0] = 0x9A;     /* col 0: nibble A = -1.0; col 1: nibble 9 = -0.5 */
        w[1] = 0x87;     /* col 2: 7 = +6.0; col 3: 8 = -0 */
        if (e[1] == 254) /* keep |value| <= 1.5 * 2^127 (finite) */
            for (int i = 16; i < 32; i++)
                w[i] &= 0xBB;
        w[16]   = e[1] == 254 ? 0x31 : 0x71; /* col 32: 1 = 0.5 (x 2^(e1-127)); col 33: 3 = 1.5 or 7 = 6 */
        qmat  m = {.type = Q_MXFP4, .rows = 1, .cols = 64, .w = w, .e = e};
        float d[64];
        qmat_dequant_row(&m, 0, d);
        float s0 = ldexpf(1.0f, e[0] - 127), s1 = ldexpf(1.0f, e[1] - 127);
        T_CHECK(d[0] == -1.0f * s0 && d[1] == -0.5f * s0 && d[2] == 6.0f * s0 && d[3] == 0.0f &&
                    signbit(d[3]),
                "mxfp4 e=%d: -1, -0.5, 6, -0 decode", e[0]);
        T_CHECK(d[32] == 0.5f * s1 && d[33] == (e[1] == 254 ? 1.5f : 6.0f) * s1,
                "mxfp4 e=%d: 0.5 and 6 (1.5) decode to %g %g", e[1], (double)d[32], (double)d[33]);
        int ok = 1;
        for (int c = 0; c < 64; c++) {
            int   nib = c & 1 ? w[c / 2] >> 4 : w[c / 2] & 15;
            float v   = q_e2m1[nib & 7] * (c < 32 ? s0 : s1);
            ok &= d[c] == ((nib & 8) ? -v : v);
        }
        T_CHECK(ok, "mxfp4 e=%d,%d: all 64 columns decode per the spec table", e[0], e[1]);
        /* one-hot x: the exact-float paths return the weight exactly */
        float x[64] = {0}, y;
        int   okx   = 1;
        for (int c = 0; c < 64; c += 11) {
            memset(x, 0, sizeof x);
            x[c] = 1.0f;
            for (int isa = 0; isa <= max_isa; isa++) {
                run_mv(&m, x, &y, isa, 0);
                okx &= y == d[c];
                run_mv(&m, x, &y, isa, 1);
                okx &=
                    fabsf(y - d[c]) <= fabsf(d[c]) * 1e-6f + 1e-40f; /* e < 2: the group scale is subnormal */
            }
        }
        T_CHECK(okx, "mxfp4 e=%d,%d: one-hot matvec returns the decoded weight", e[0], e[1]);
    }
    int ok = 1;
    for (int e = 0; e < 255; e++)
        ok &= kern_e8m0_half((uint8_t)e) == ldexpf(1.0f, e - 128);
    T_CHECK(ok, "2^(e-128) exact for e = 0..254 (subnormal for e < 2)");
    ok = 1;
    for (int n = 0; n < 16; n++)
        ok &= kern_mxfp4_i8[n] == (int)((n & 8 ? -2.0f : 2.0f) * q_e2m1[n & 7]);
    T_CHECK(ok, "doubled e2m1 table is 2 * value with sign");
}

/* K3_ISA: every level either runs (and is selected) or is an error naming what is missing. */
static void check_isa_env(void) {
    static const char *const names[] = {"scalar", "avx2", "avx512", "amx"};
    static const int         level[] = {KERN_SCALAR, KERN_AVX2, KERN_AVX512, KERN_AMX};
    for (int i = 0; i < 4; i++) {
        char why[128];
        setenv("K3_ISA", names[i], 1);
        k3_status st = kern_isa_env();
        if (kern_isa_ok(level[i], why, sizeof why)) {
            /* amx: the tiles, or avx512 when the kernel refused the tile state */
            int want = level[i] == KERN_AMX ? (kern_amx_permission(NULL, 0) ? KERN_AMX : KERN_AVX512)
                       : level[i] == KERN_AVX2 && kern_cpu_vnni() ? KERN_AVX2_VNNI
                                                                  : level[i];
            T_CHECK(st == K3_OK && kern_isa() == want, "K3_ISA=%s selects %s", names[i],
                    kern_isa_name(kern_isa()));
        } else
            T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "lacks") && strstr(k3_errmsg(), names[i]),
                    "K3_ISA=%s on this CPU: error '%s'", names[i], k3_errmsg());
    }
    setenv("K3_ISA", "avx9000", 1);
    T_CHECK(kern_isa_env() == K3_ERR_ARG && strstr(k3_errmsg(), "K3_ISA: 'avx9000'"), "unknown K3_ISA: '%s'",
            k3_errmsg());
    unsetenv("K3_ISA");
    /* AMX hardware (not its emulation) is the default, avx512 when the tile state is refused */
    const int best = kern_isa_ok(KERN_AMX, NULL, 0) && !kern_amx_emulated()
                         ? (kern_amx_permission(NULL, 0) ? KERN_AMX : KERN_AVX512)
                         : max_isa;
    T_CHECK(kern_isa_env() == K3_OK && kern_isa() == best, "K3_ISA unset: the best level (%s)",
            kern_isa_name(kern_isa()));
}

/* The kernels' integer knobs (kern_knobs_env): a value that is not an integer in range is an error
 * naming the variable, the value and the range, and changes nothing; a good one is used; unset is
 * the default again. */
static void check_knobs_env(void) {
    static const struct {
        const char *name, *bad, *range, *good;
        int (*get)(void);
        int good_v, dflt;
    } kn[] = {
        {"K3_MV_AHEAD", "abc", "an integer in 0..64", "3", kern_mv_ahead, 3, KERN_MV_AHEAD},
        {"K3_MV_AHEAD", "65", "an integer in 0..64", "0", kern_mv_ahead, 0, KERN_MV_AHEAD},
        {"K3_MV_SPLIT", "2", "0 or 1", "1", kern_mv_split, 1, KERN_MV_SPLIT},
        {"K3_PREFETCH", "-1", "an integer in 0..1048576", "8192", kern_prefetch_bytes, 8192, KERN_PREFETCH},
        {"K3_KBLOCK", "8x", "an integer in 0..1048576", "4", kern_kblock_steps, 4, KERN_KBLOCK},
        {"K3_ROWSPLIT", "2", "0 or 1", "1", kern_rows_dynamic, 1, 0},
        {"K3_IDOT", "yes", "0 or 1", "0", kern_idot, 0, 1},
        {"K3_AMX_EMU", "on", "0 or 1", "0", kern_amx_emulated, 0, 0},
    };
    for (size_t i = 0; i < sizeof kn / sizeof *kn; i++) {
        char want[160];
        snprintf(want, sizeof want, "%s: '%s' is not %s", kn[i].name, kn[i].bad, kn[i].range);
        setenv(kn[i].name, kn[i].good, 1);
        k3_status st = kern_knobs_env();
        T_CHECK(st == K3_OK && kn[i].get() == kn[i].good_v, "%s=%s: accepted, %d", kn[i].name, kn[i].good,
                kn[i].get());
        setenv(kn[i].name, kn[i].bad, 1);
        st = kern_knobs_env();
        T_CHECK(st == K3_ERR_ARG && !strcmp(k3_errmsg(), want) && kn[i].get() == kn[i].good_v,
                "%s=%s: refused ('%s'), the value in use unchanged", kn[i].name, kn[i].bad, k3_errmsg());
        unsetenv(kn[i].name);
        T_CHECK(kern_knobs_env() == K3_OK && kn[i].get() == kn[i].dflt, "%s unset: the default %d",
                kn[i].name, kn[i].get());
    }
    /* the older ISA switches go through kern_isa_env */
    setenv("K3_NOVNNI", "z", 1);
    T_CHECK(kern_isa_env() == K3_ERR_ARG && !strcmp(k3_errmsg(), "K3_NOVNNI: 'z' is not 0 or 1"),
            "K3_NOVNNI=z: refused ('%s')", k3_errmsg());
    unsetenv("K3_NOVNNI");
    setenv("K3_NOAVX2", "1.0", 1);
    T_CHECK(kern_isa_env() == K3_ERR_ARG && !strcmp(k3_errmsg(), "K3_NOAVX2: '1.0' is not 0 or 1"),
            "K3_NOAVX2=1.0: refused ('%s')", k3_errmsg());
    unsetenv("K3_NOAVX2");
    T_CHECK(kern_isa_env() == K3_OK, "K3_NOVNNI and K3_NOAVX2 unset: accepted");
}

/* The activation quantizer's AVX-512 twin: the same codes and scales, bit for bit, on random
 * groups with partial tails, zeros, huge and tiny values, -0, NaN and inf. */
static void check_act_quant(void) {
    char why[128];
    if (!kern_isa_ok(KERN_AVX512, why, sizeof why)) {
        T_SKIP("activation quantizer avx512 twin not compared: %s", why);
        return;
    }
    int ok = 1, cases = 0;
    for (int cols = 1; cols <= 200; cols += 7) {
        const int ng = (cols + 31) / 32 + 1; /* one group past cols */
        float     x[232];
        int8_t    q0[ng * 32], q1[ng * 32];
        float     d0[ng], d1[ng];
        for (int rep = 0; rep < 8; rep++, cases++) {
            for (int c = 0; c < cols; c++) {
                uint32_t r = rnd();
                x[c]       = frnd() * (r % 3 == 0 ? 1e30f : r % 3 == 1 ? 1e-30f : 1.0f);
                if (rep == 1 && c % 32 == 5)
                    x[c] = 0.0f;
                if (rep == 2)
                    x[c] = c % 2 ? -0.0f : 0.0f;
                if (rep == 3 && c == cols / 2)
                    x[c] = NAN;
                if (rep == 4 && c == cols - 1)
                    x[c] = -INFINITY;
                if (rep == 5) /* amax 127 (inv 1): v = x exactly, every other value a tie k + 0.5 */
                    x[c] = c % 32 == 0 ? 127.0f : (float)((int)(rnd() % 253) - 126) + (c % 2 ? 0.5f : 0.0f);
            }
            memset(q0, 0x55, sizeof q0), memset(q1, 0x55, sizeof q1);
            kern_act_quant_ref(x, cols, ng, q0, d0);
            kern_act_quant_avx512(x, cols, ng, q1, d1);
            ok &= !memcmp(q0, q1, sizeof q0) && !memcmp(d0, d1, sizeof d0);
        }
    }
    T_CHECK(ok, "activation quantizer: avx512 twin bit-identical to scalar (%d cases)", cases);
    /* the whole activation buffer of kern_act_make (quantizer and layout) at both levels: odd and
     * even pair counts, a partial last group, every type */
    static const int types[] = {Q_I8, Q_I4, Q_MXFP4}, lcols[] = {1, 33, 64, 65, 128, 200, 1100, 3584};
    ok = 1, cases = 0;
    for (size_t t = 0; t < 3; t++)
        for (size_t k = 0; k < sizeof lcols / sizeof lcols[0]; k++, cases++) {
            const int    cols = lcols[k];
            const size_t ab   = kern_act_bytes(cols);
            float       *x    = malloc((size_t)cols * sizeof(float));
            char        *b0 = k3_aligned_alloc(32, ab), *b1 = k3_aligned_alloc(32, ab);
            for (int c = 0; c < cols; c++)
                x[c] = frnd();
            memset(b0, 0x55, ab), memset(b1, 0x55, ab);
            kern_act a0, a1;
            kern_set_isa(KERN_SCALAR);
            kern_act_make(types[t], x, cols, b0, &a0);
            kern_set_isa(KERN_AVX512);
            kern_act_make(types[t], x, cols, b1, &a1);
            ok &= !memcmp(b0, b1, ab);
            free(x), free(b0), free(b1);
        }
    T_CHECK(ok, "kern_act_make: the avx512 layout twin writes the same bytes as scalar (%d cases)", cases);
}

/* A matrix and nmax random columns (every k-th activation 8x the others, so group scales differ)
 * with two result buffers of nmax columns: the cases of the multi-column checks below. */
typedef struct mm_case {
    qmat     m;
    uint8_t *mx;
    float   *x, *yr, *ym; /* x[nmax][cols], yr and ym [nmax][rows] */
} mm_case;

static void mm_case_make(mm_case *c, int type, int rows, int cols, int nmax, int k) {
    make_mat(&c->m, type, rows, cols, &c->mx);
    c->x  = malloc((size_t)nmax * cols * sizeof(float));
    c->yr = malloc((size_t)nmax * rows * sizeof(float));
    c->ym = malloc((size_t)nmax * rows * sizeof(float));
    for (int i = 0; i < nmax * cols; i++)
        c->x[i] = frnd() * (i % k == 0 ? 8.0f : 1.0f);
}

static void mm_case_free(mm_case *c) {
    free(c->x), free(c->yr), free(c->ym);
    if (c->mx)
        free(c->mx);
    else
        qmat_free(&c->m);
}

/* The multi-column (matmul) kernels at every width: qmat_matmul of n = 1 .. 17 columns (the
 * AVX-512 path takes up to KERN_NC512 per call, in tiles of balanced widths: every nc = 1 .. 8
 * and its tile split, then a second and third call) == the scalar reference per column, bit for
 * bit, at each level, on 1 and 2 threads. Rows not a multiple of the 4-row tiles nor of the
 * 16-row sub-blocks, K not a multiple of the K block nor of a double step. */
static void check_mm_widths(void) {
    enum { NMAX = 17 };
    /* the 16-row kernels (2 .. 12 int8 columns, 2 .. 15 nibble ones) at their edges too: one
     * partial group only, an odd int4 row, the fewest MXFP4 columns they take (128) and fewer
     * (96: the tiles) */
    static const int sh[][3] = {{Q_I8, 37, 1100},    {Q_I8, 150, 2080},    {Q_I4, 21, 2080}, {Q_I4, 37, 1100},
                                {Q_MXFP4, 37, 1120}, {Q_MXFP4, 150, 2336}, {Q_I8, 16, 20},   {Q_I4, 32, 63},
                                {Q_MXFP4, 16, 128},  {Q_MXFP4, 37, 96}};
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
        const int rows = sh[s][1], cols = sh[s][2];
        mm_case   mc;
        mm_case_make(&mc, sh[s][0], rows, cols, NMAX, 3);
        const qmat m = mc.m;
        float     *x = mc.x, *yr = mc.yr, *ym = mc.ym;
        kern_set_isa(KERN_SCALAR);
        kern_set_idot(1);
        for (int t = 0; t < NMAX; t++)
            qmat_matvec(&m, x + (size_t)t * cols, yr + (size_t)t * rows);
        for (int isa = KERN_AVX2; isa <= max_isa && isa <= KERN_AVX512; isa++) {
            int bad = 0; /* the first n that differs */
            for (int th = 1; th <= 2; th++)
                for (int n = 1; n <= NMAX && !bad; n++) {
                    omp_set_num_threads(th);
                    kern_set_isa(isa);
                    memset(ym, 0xff, (size_t)n * rows * sizeof(float)); /* NaN: a row left out shows */
                    qmat_matmul(&m, x, n, ym);
                    bad = bits_equal(ym, yr, (size_t)n * rows) ? 0 : n;
                }
            T_CHECK(!bad, "%s %dx%d: %s matmul of 1..%d columns == scalar per column, 1 and 2 threads%s%.0d",
                    tname[m.type], rows, cols, iname[isa], NMAX, bad ? "; first wrong n = " : "", bad);
        }
        omp_set_num_threads(2);
        mm_case_free(&mc);
    }
}

/* The MXFP4 16-row kernel reads each row's exponents by 4-byte gathers that end at the group's
 * byte (or, for the first groups, the row's first 4 bytes): never past the matrix. An MXFP4
 * matrix whose exponents end where an unreadable page begins, 16 and 32 rows at 128 and 160
 * columns (the fewest it takes, and an odd group count), 2 .. 8 columns: no fault, == scalar. */
static void check_mx_rows16_end(void) {
    const long pg = sysconf(_SC_PAGESIZE);
    int        ok = 1, cases = 0;
    for (int rows = 16; rows <= 32; rows += 16)
        for (int cols = 128; cols <= 160; cols += 32) {
            const size_t wb = q_wbytes(Q_MXFP4, rows, cols), sb = q_sbytes(Q_MXFP4, rows, cols);
            const size_t span = (wb + sb + (size_t)pg - 1) / (size_t)pg * (size_t)pg;
            uint8_t     *map =
                mmap(NULL, span + (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (map == MAP_FAILED || mprotect(map + span, (size_t)pg, PROT_NONE) != 0) {
                T_CHECK(0, "MXFP4 page-end case: mmap/mprotect of %zu bytes failed", span + (size_t)pg);
                return;
            }
            uint8_t *p = map + span - (wb + sb); /* the last exponent byte is the page's last */
            for (size_t i = 0; i < wb; i++)
                p[i] = (uint8_t)rnd();
            for (size_t i = 0; i < sb; i++)
                p[wb + i] = (uint8_t)(118 + rnd() % 12);
            const qmat m = {.type = Q_MXFP4, .rows = rows, .cols = cols, .w = p, .e = p + wb};
            float     *x = malloc((size_t)8 * cols * sizeof(float)),
                  *y0    = malloc((size_t)8 * rows * sizeof(float)),
                  *y1    = malloc((size_t)8 * rows * sizeof(float));
            for (int i = 0; i < 8 * cols; i++)
                x[i] = frnd();
            kern_set_isa(KERN_SCALAR);
            kern_set_idot(1);
            qmat_matmul(&m, x, 8, y0);
            for (int n = 2; n <= 8; n++) {
                kern_set_isa(max_isa < KERN_AVX512 ? max_isa : KERN_AVX512);
                kern_set_idot(1);
                qmat_matmul(&m, x, n, y1);
                ok &= bits_equal(y0, y1, (size_t)n * rows);
                cases++;
            }
            free(x), free(y0), free(y1);
            munmap(map, span + (size_t)pg);
        }
    T_CHECK(ok,
            "MXFP4 matmul of 2..8 columns on a matrix ending at an unreadable page: no read past it, == "
            "scalar (%d cases)",
            cases);
}

/* One rounding order (kern-impl.h) at every level and column count: qmat_matmul of n = 1, 7, 32
 * and 128 columns (a decode matvec, a few columns in the row tiles, and the wide kernels of the
 * avx512 level from KERN_GRP_MIN columns) == kern_amx_ref (the group order written out in plain
 * C from the float columns), bit for bit, at every level this CPU runs, on 1 and 2 threads. The
 * chunk-and-batch identity of prefill rests on it. int8 with K not a multiple of 32, int4 and
 * MXFP4 with an odd number of groups (a pair's second group missing); some activations 8x the
 * others (scales differ per group). 40 columns: a last tile of 8; nothing past the n columns is
 * written. int4 with an odd K (a half-filled last byte) and int8 with K < 32 (no whole group), in
 * three blocks of rows (the wide kernel unpacks the next block while the tiles of one run). The AMX level
 * (its tiles on the emulation): test-amx. */
static void check_order(void) {
    static const int sh[][3] = {{Q_I8, 37, 1100}, {Q_I4, 21, 2080}, {Q_MXFP4, 37, 1120},
                                {Q_I8, 19, 200},  {Q_I4, 37, 1001}, {Q_I8, 37, 20}};
    static const int ns[]    = {1, 7, 32, 40, 128}; /* 40: a last column tile of 8 */
    enum { NMAX = 128 };
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
        const int rows = sh[s][1], cols = sh[s][2];
        mm_case   mc;
        mm_case_make(&mc, sh[s][0], rows, cols, NMAX, 5);
        const qmat m = mc.m;
        float     *x = mc.x, *yr = mc.yr, *ym = mc.ym;
        kern_set_idot(1);
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            const int n = ns[k];
            kern_amx_ref(&m, x, n, yr);
            for (int isa = KERN_SCALAR; isa <= max_isa && isa <= KERN_AVX512; isa++) {
                if (kern_set_isa(isa) != isa)
                    continue;
                size_t diff = 0;
                for (int th = 1; th <= 2; th++) {
                    omp_set_num_threads(th);
                    /* NaN: a row left out shows; past the n columns: a write past them shows */
                    memset(ym, 0xff, (size_t)NMAX * rows * sizeof(float));
                    qmat_matmul(&m, x, n, ym);
                    for (size_t i = 0; i < (size_t)n * rows; i++)
                        diff += memcmp(&ym[i], &yr[i], sizeof(float)) != 0;
                    for (size_t i = (size_t)n * rows; i < (size_t)NMAX * rows; i++) {
                        uint32_t u;
                        memcpy(&u, &ym[i], 4);
                        diff += u != 0xffffffffu;
                    }
                }
                T_CHECK(!diff,
                        "group order: %s %dx%d, %s, %d column%s: == kern_amx_ref bit for bit, 1 and 2 "
                        "threads (%zu values differ)",
                        tname[m.type], rows, cols, iname[isa], n, n > 1 ? "s" : "", diff);
            }
        }
        omp_set_num_threads(2);
        mm_case_free(&mc);
    }
}

/* The AVX-512 and AVX2 (AVX-VNNI) matvecs (nc == 1) at every tile layout (K3_MV_SPLIT) and
 * prefetch setting (K3_MV_AHEAD tiles ahead, 0 = the old byte distance) against the scalar reference, bit for
 * bit, at 1 and 2 threads, outputs poisoned with NaN: rows not a multiple of the 4-row tile, K not a multiple
 * of the 64-byte step, and MXFP4 with every exponent 0..200 (its lane scales are vscalefps(d, e - 128); with
 * activations of magnitude 1, d about 2^-7: subnormal scales for the smallest exponents, and
 * no overflow at the largest). */
static void check_mv_ahead(void) {
    char why[128];
    if (!kern_isa_ok(KERN_AVX2, why, sizeof why)) {
        T_SKIP("K3_MV_AHEAD (the avx512 and avx2 matvecs) not checked: %s", why);
        return;
    }
    /* rows: with 2 threads, shares of 3 (no split tile), 4 + 5 (one tile and a row left), 18 + 19, 19 +
     * 20, 20 + 21, 75, 129 (several tiles, 0 to 3 rows left) */
    static const int sh[][3] = {{Q_I8, 37, 1100},    {Q_I8, 6, 3584},      {Q_I8, 9, 200},
                                {Q_I4, 39, 1101},    {Q_I4, 150, 2080},    {Q_I4, 9, 65},
                                {Q_MXFP4, 41, 2336}, {Q_MXFP4, 258, 1056}, {Q_MXFP4, 9, 64}};
    static const int ahead[] = {0, 1, 2, 7};
    for (size_t k = 0; k < sizeof sh / sizeof sh[0]; k++) {
        const int type = sh[k][0], rows = sh[k][1], cols = sh[k][2];
        qmat      m;
        uint8_t  *mx;
        make_mat(&m, type, rows, cols, &mx);
        if (mx) /* exponents (5 r + g) mod 201: all of 0..200, a window per row */
            for (int r = 0; r < rows; r++)
                for (int g = 0; g < cols / 32; g++)
                    mx[q_wbytes(type, rows, cols) + (size_t)r * (cols / 32) + g] =
                        (uint8_t)((r * 5 + g) % 201);
        float *x = malloc((size_t)cols * sizeof(float)), *y0 = malloc((size_t)rows * sizeof(float));
        float *y1 = malloc((size_t)rows * sizeof(float));
        for (int c = 0; c < cols; c++)
            x[c] = frnd();
        run_mv(&m, x, y0, KERN_SCALAR, 1);
        int ok = 1;
        for (int split = 0; split <= 1; split++)
            for (int dyn = 0; dyn <= 1; dyn++)
                for (size_t a = 0; a < sizeof ahead / sizeof ahead[0]; a++)
                    for (int th = 1; th <= 2; th++) {
                        kern_set_mv_split(split);
                        kern_set_rows_dynamic(dyn);
                        kern_set_mv_ahead(ahead[a]);
                        omp_set_num_threads(th);
                        for (int l = 0; l < 3; l++) { /* the row kernels of each level */
                            static const int lv[] = {KERN_AVX2, KERN_AVX2_VNNI, KERN_AVX512};
                            if (kern_set_isa(lv[l]) != lv[l])
                                continue;
                            memset(y1, 0xff, (size_t)rows * sizeof(float)); /* NaN: a row not written fails */
                            run_mv(&m, x, y1, lv[l], 1);
                            ok &= bits_equal(y0, y1, (size_t)rows);
                        }
                    }
        T_CHECK(ok,
                "%s %dx%d: avx512, avx-vnni and avx2 matvecs (where the CPU has them) bit-identical to "
                "scalar at K3_MV_SPLIT 0 and 1, K3_ROWSPLIT "
                "0 and 1, K3_MV_AHEAD 0, 1, 2, 7, 1 and 2 threads",
                tname[type], rows, cols);
        free(x), free(y0), free(y1);
        if (mx)
            free(mx);
        else
            qmat_free(&m);
    }
    kern_set_mv_ahead(KERN_MV_AHEAD);
    kern_set_mv_split(KERN_MV_SPLIT);
    kern_set_rows_dynamic(0);
    omp_set_num_threads(2);
}

int main(void) {
    const int have_avx2 = kern_cpu_avx2();
    max_isa             = kern_cpu_avx512() ? KERN_AVX512
                          : kern_cpu_vnni() ? KERN_AVX2_VNNI
                          : have_avx2       ? KERN_AVX2
                                            : KERN_SCALAR;
    unsetenv("K3_NOAVX2");
    unsetenv("K3_NOVNNI");
    for (int isa = KERN_AVX2; isa < KERN_N_ISA; isa++) {
        char why[128];
        if (!kern_isa_ok(isa, why, sizeof why))
            T_SKIP("%s twins not compared: %s", iname[isa], why);
        else if (isa == KERN_AMX)
            T_SKIP("amx: its tile matmuls are compared with kern_amx_ref in test-amx (one column runs "
                   "avx512)");
    }
    check_isa_env();
    check_knobs_env();
    check_act_quant();
    T_CHECK(kern_set_isa(KERN_SCALAR) == KERN_SCALAR, "scalar path selectable");
    omp_set_num_threads(2);

    static const int shapes[][2] = {{1, 1},
                                    {7, 5},
                                    {13, 33},
                                    {37, 100},
                                    {5, 129},
                                    {3, 200},
                                    {300, 301},
                                    {9, 515},
                                    {3, 704},
                                    {2, 3584},
                                    /* the AVX-512 matmul's K blocks (512 weight bytes) over row
                                     * sub-blocks of 16: several of each, partial ones, tails */
                                    {37, 1100},
                                    {21, 2080},
                                    /* several row blocks of a matvec (128 KiB) and a matmul (256 KiB) */
                                    {150, 2080}}; /* several 4-pair blocks, then tails */
    for (int type = Q_F32; type <= Q_I4; type++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            qmat     m;
            uint8_t *mx;
            make_mat(&m, type, shapes[s][0], shapes[s][1], &mx);
            check_mat(&m);
            qmat_free(&m);
        }
    static const int mshapes[][2] = {{1, 32}, {7, 96}, {13, 160}, {37, 224}, {301, 288}, {37, 2336}};
    for (size_t s = 0; s < sizeof mshapes / sizeof mshapes[0]; s++) {
        qmat     m;
        uint8_t *mx;
        make_mat(&m, Q_MXFP4, mshapes[s][0], mshapes[s][1], &mx);
        check_mat(&m);
        free(mx);
    }
    check_mxfp4_known(have_avx2);
    check_i8_extremes();
    check_mm_widths();
    check_mx_rows16_end();
    check_order();
    check_mv_ahead();

    /* qmat_matmul_many: each result bit-identical to its own qmat_matmul, shared quantization
     * (same type) or not (mixed types, exact-float), every level, n = 1 and 11, 1 and 2 threads */
    {
        enum { K = 4, N = 11, COLS = 1100 };
        static const int types[K] = {Q_I8, Q_I8, Q_I4, Q_F32}, rows[K] = {37, 150, 21, 5};
        qmat             m[K];
        uint8_t         *mx;
        for (int i = 0; i < K; i++)
            make_mat(&m[i], types[i], rows[i], COLS, &mx);
        float *x = malloc((size_t)N * COLS * sizeof(float));
        for (int i = 0; i < N * COLS; i++)
            x[i] = frnd();
        float *ya[K], *yb[K];
        for (int i = 0; i < K; i++)
            ya[i] = malloc((size_t)N * rows[i] * sizeof(float)),
            yb[i] = malloc((size_t)N * rows[i] * sizeof(float));
        /* the sets: the two int8 (shared), all four (mixed: one by one) */
        static const int sets[][2] = {{0, 2}, {0, 4}};
        int              ok = 1, cases = 0;
        for (int isa = 0; isa <= max_isa; isa++)
            for (int th = 1; th <= 2; th++)
                for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++)
                    for (int n = 1; n <= N; n = n == 1 ? 2 : n == 2 ? N : N + 1) {
                        const int   i0 = sets[si][0], k = sets[si][1];
                        const qmat *mp[K];
                        kern_set_isa(isa);
                        kern_set_idot(1);
                        omp_set_num_threads(th);
                        for (int i = 0; i < K; i++) {
                            mp[i] = &m[i];
                            memset(ya[i], 0xff, (size_t)N * rows[i] * sizeof(float));
                        }
                        qmat_matmul_many(mp + i0, k, x, n, ya + i0);
                        for (int i = i0; i < i0 + k; i++) {
                            qmat_matmul(&m[i], x, n, yb[i]);
                            ok &= bits_equal(ya[i], yb[i], (size_t)n * rows[i]);
                        }
                        cases++;
                    }
        T_CHECK(
            ok,
            "qmat_matmul_many == qmat_matmul per matrix, bit for bit (%d cases: shared int8, mixed types)",
            cases);
        for (int i = 0; i < K; i++)
            free(ya[i]), free(yb[i]), qmat_free(&m[i]);
        free(x);
        omp_set_num_threads(2);
    }

    /* a NaN activation poisons its output rows in every path (no silent zero) */
    {
        qmat     m;
        uint8_t *mx;
        float    x[96], y[4];
        make_mat(&m, Q_MXFP4, 4, 96, &mx);
        for (int c = 0; c < 96; c++)
            x[c] = frnd();
        x[40]  = NAN;
        int ok = 1;
        for (int isa = 0; isa <= max_isa; isa++)
            for (int idot = 0; idot <= 1; idot++) {
                run_mv(&m, x, y, isa, idot);
                for (int r = 0; r < 4; r++)
                    ok &= isnan(y[r]);
            }
        T_CHECK(ok, "NaN in x gives NaN rows in the exact-float and IDOT paths");
        free(mx);
    }
    return t_done();
}
