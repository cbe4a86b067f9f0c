/* test-amx.c: the AMX tile emulation against the SDM's semantics, the AMX kernels (on the
 * emulation, and on the hardware where there is one) against their scalar twin, and the AMX
 * level at every column count against the group order's plain C twin.
 *
 * - Emulation: faults where the hardware faults (no permission: SIGILL; no configuration,
 *   operand shapes that do not chain, a tile used twice: #UD; a bad LDTILECFG operand: #GP);
 *   loads zero the bytes past colsb and the rows past rows; stores write colsb bytes per row and
 *   nothing else; TDPBSSD/TDPBUSD against a plain formula, int32 wrap-around; TILERELEASE.
 *   Each expected value is computed here from the definition, not from the emulation.
 * - kern_amx_matmul_emu == kern_amx_ref bit for bit: int8, int4, MXFP4; partial row tiles (rows
 *   % 16), partial column tiles (n % 16), K not a multiple of 64 or 32, 1 and 2 threads. It
 *   faults without the permission request and leaves the tiles released.
 * - The emulated AMX level through qmat_matmul at 1, 7, 32 and 128 columns == kern_amx_ref, bit
 *   for bit (the one rounding order of kern-impl.h; the other levels: test-kern).
 * - Hardware: kern_amx_matmul_hw == kern_amx_ref where cpuid says AMX and the permission is
 *   granted; otherwise a SKIP that names the reason.
 */
#include "kern-amx-tile.h"
#include "kern-impl.h"
#include "test-qmat.h"
#include "test.h"

#include <omp.h>
#include <stdlib.h>

static const char *tname[] = {"f32", "int8", "int4", "mxfp4"};

/* ==== the emulation ========================================================================= */

/* Expect n faults (any) with msg containing want; returns 1 when so. */
static int faulted(long n, const char *want, char *msg, size_t size) {
    long k = amx_emu_faults(msg, size);
    return k == n && (!want || strstr(msg, want));
}

static void cfg_set(amx_tilecfg *c, int t, int rows, int colsb) {
    c->rows[t]  = (uint8_t)rows;
    c->colsb[t] = (uint16_t)colsb;
}

static void check_emu_faults(void) {
    char        msg[256];
    amx_tilecfg c = {.palette = 1};
    cfg_set(&c, 0, 16, 64);
    amx_emu_revoke();
    amx_emu_ldtilecfg(&c);
    T_CHECK(faulted(1, "ARCH_REQ_XCOMP_PERM", msg, sizeof msg),
            "emu: LDTILECFG before the permission request faults (%s)", msg);
    amx_emu_grant();
    uint8_t buf[16 * 64] = {0};
    amx_emu_tileloadd(0, buf, 64);
    T_CHECK(faulted(1, "TILES_CONFIGURED", msg, sizeof msg),
            "emu: TILELOADD with no configuration faults (%s)", msg);
    amx_emu_tdpbssd(4, 0, 2);
    amx_emu_tilestored(0, buf, 64);
    amx_emu_tilezero(0);
    T_CHECK(faulted(3, "#UD", msg, sizeof msg),
            "emu: TDPBSSD, TILESTORED, TILEZERO with no configuration fault (%s)", msg);

    /* invalid LDTILECFG operands (#GP), each on its own */
    struct {
        const char *what;
        int         byte, value;
    } bad[] = {
        {"palette 2", 0, 2},       {"reserved byte 5", 5, 1},       {"colsb 65", 16, 65},
        {"rows 17", 48, 17},       {"rows 0 with colsb 64", 48, 0}, {"colsb of tile 9", 34, 4},
        {"rows of tile 8", 56, 1}, {"colsb 0 with rows 16", 16, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t raw[64];
        memcpy(raw, &c, 64);
        raw[bad[i].byte] = (uint8_t)bad[i].value;
        if (bad[i].byte == 16)
            raw[17] = 0;
        amx_emu_ldtilecfg(raw);
        T_CHECK(faulted(1, "#GP", msg, sizeof msg) && !amx_emu_configured(), "emu: LDTILECFG %s: #GP (%s)",
                bad[i].what, msg);
    }
    amx_emu_ldtilecfg(&c);
    T_CHECK(faulted(0, NULL, msg, sizeof msg) && amx_emu_configured(),
            "emu: a valid palette-1 operand configures the tiles");
    amx_emu_tileloadd(3, buf, 64);
    T_CHECK(faulted(1, "empty", msg, sizeof msg), "emu: TILELOADD into an unconfigured tile faults (%s)",
            msg);
    amx_emu_tileloadd(9, buf, 64);
    T_CHECK(faulted(1, "max_names", msg, sizeof msg), "emu: tile register 9 faults (%s)", msg);
    amx_emu_tilerelease();
    T_CHECK(!amx_emu_configured(), "emu: TILERELEASE returns to the init state");
    amx_emu_tileloadd(0, buf, 64);
    T_CHECK(faulted(1, "TILES_CONFIGURED", msg, sizeof msg), "emu: TILELOADD after TILERELEASE faults");
    amx_emu_ldtilecfg(&(amx_tilecfg){.palette = 0});
    T_CHECK(faulted(0, NULL, msg, sizeof msg) && !amx_emu_configured(),
            "emu: palette 0 is the init state, no fault");
}

/* The configuration is per thread, as the tile registers are: a second thread that did not
 * load its own faults (a kernel that configures only in the calling thread shows this way). */
static void check_emu_per_thread(void) {
    char        msg[256];
    amx_tilecfg c = {.palette = 1};
    cfg_set(&c, 0, 16, 64);
    uint8_t buf[16 * 64]  = {0};
    int     configured[2] = {0, 0}, team = 0;
    amx_emu_ldtilecfg(&c);
#pragma omp parallel num_threads(2)
    {
        const int i = omp_get_thread_num();
        if (i == 0)
            team = omp_get_num_threads();
        if (i < 2) {
            configured[i] = amx_emu_configured();
            if (i == 1)
                amx_emu_tileloadd(0, buf, 64);
        }
    }
    if (team < 2)
        T_SKIP("emu: tile state per thread not checked: OpenMP gave a team of %d", team);
    else
        T_CHECK(
            configured[0] && !configured[1] && faulted(1, "in this thread", msg, sizeof msg),
            "emu: tile state per thread: the thread that loaded a configuration has it, another faults (%s)",
            msg);
    amx_emu_tilerelease();
}

/* C[m][n] += sum_k sum_i A[m][4k+i] * B[k][4n+i] (bytes signed or unsigned per operand), in
 * int64, then reduced mod 2^32: the definition, independent of the emulation. */
static int32_t dot_ref(const uint8_t *a, const uint8_t *b, int bstride, int m, int n, int kd, int as,
                       int32_t c0) {
    int64_t s = c0;
    for (int k = 0; k < kd; k++)
        for (int i = 0; i < 4; i++) {
            int x = as ? (int8_t)a[m * 64 + 4 * k + i] : a[m * 64 + 4 * k + i];
            int y = (int8_t)b[k * bstride + 4 * n + i];
            s += (int64_t)x * y;
        }
    return (int32_t)(uint32_t)(uint64_t)s;
}

static void check_emu_semantics(void) {
    char msg[256];
    /* tmm0 A 5 x 12 bytes (K = 3 dwords), tmm2 B 3 x 20 bytes (N = 5), tmm4 C 5 x 20 */
    amx_tilecfg c = {.palette = 1};
    cfg_set(&c, 0, 5, 12);
    cfg_set(&c, 2, 3, 20);
    cfg_set(&c, 4, 5, 20);
    cfg_set(&c, 5, 16, 64);
    cfg_set(&c, 6, 3, 12); /* a B of 3 dwords' width (C and tmm2 have 5) */
    amx_emu_ldtilecfg(&c);
    uint8_t a[16 * 64], b[3 * 40], cb[5 * 20];
    for (size_t i = 0; i < sizeof a; i++)
        a[i] = (uint8_t)rnd();
    for (size_t i = 0; i < sizeof b; i++)
        b[i] = (uint8_t)rnd();
    /* A loaded with stride 64 from a[]: rows 0..4, bytes 0..11; the rest of the register zero */
    amx_emu_tileloadd(0, a, 64);
    int ok = 1;
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 64; k++)
            ok &= amx_emu_row(0, r)[k] == (r < 5 && k < 12 ? a[r * 64 + k] : 0);
    T_CHECK(ok, "emu: TILELOADD reads rows x colsb at the stride and zeroes the rest of the register");
    amx_emu_tileloadd(2, b, 40);      /* B rows 40 bytes apart */
    for (int i = 0; i < 5 * 5; i++) { /* C preloaded with values near the int32 limits */
        int32_t v = (int32_t)(i % 2 ? 0x7FFFFF00u + (uint32_t)i : 0x80000010u + (uint32_t)i);
        memcpy(cb + 4 * i, &v, 4);
    }
    amx_emu_tileloadd(4, cb, 20);
    amx_emu_tdpbssd(4, 0, 2);
    uint8_t out[5 * 24];
    memset(out, 0xA5, sizeof out);
    amx_emu_tilestored(4, out, 24); /* stride 24 > colsb 20: 4 bytes per row must stay */
    ok         = 1;
    int canary = 1;
    for (int m = 0; m < 5; m++) {
        for (int n = 0; n < 5; n++) {
            int32_t c0, got;
            memcpy(&c0, cb + 4 * (m * 5 + n), 4);
            memcpy(&got, out + m * 24 + 4 * n, 4);
            ok &= got == dot_ref(a, b, 40, m, n, 3, 1, c0);
        }
        for (int k = 20; k < 24; k++)
            canary &= out[m * 24 + k] == 0xA5;
    }
    T_CHECK(ok, "emu: TDPBSSD = sum of signed byte products by dword groups, int32 wrap-around");
    T_CHECK(canary, "emu: TILESTORED writes colsb bytes per row, nothing between the rows");
    amx_emu_tileloadd(4, cb, 20);
    amx_emu_tdpbusd(4, 0, 2);
    amx_emu_tilestored(4, out, 24);
    ok = 1;
    for (int m = 0; m < 5; m++)
        for (int n = 0; n < 5; n++) {
            int32_t c0, got;
            memcpy(&c0, cb + 4 * (m * 5 + n), 4);
            memcpy(&got, out + m * 24 + 4 * n, 4);
            ok &= got == dot_ref(a, b, 40, m, n, 3, 0, c0);
        }
    T_CHECK(ok, "emu: TDPBUSD = unsigned A bytes times signed B bytes");
    amx_emu_tilezero(5);
    ok = 1;
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 64; k++)
            ok &= amx_emu_row(5, r)[k] == 0;
    T_CHECK(ok && faulted(0, NULL, msg, sizeof msg), "emu: TILEZERO, and no fault in a correct sequence");
    amx_emu_tdpbssd(5, 0, 2); /* C 16 rows vs A 5 */
    T_CHECK(faulted(1, "tsrcdest.rows != tsrc1.rows", msg, sizeof msg), "emu: C rows != A rows: #UD (%s)",
            msg);
    amx_emu_tdpbssd(4, 0, 6); /* K 3 = 3 rows of tmm6, but N of C 5 dwords, of tmm6 3 */
    T_CHECK(faulted(1, "tsrcdest.colsb != tsrc2.colsb", msg, sizeof msg),
            "emu: B of another width than C: #UD (%s)", msg);
    amx_emu_tdpbssd(4, 4, 2);
    T_CHECK(faulted(1, "not all different", msg, sizeof msg), "emu: one tile as C and A: #UD (%s)", msg);
    c.colsb[0] = 16; /* K of A 4 dwords, B still 3 rows */
    amx_emu_ldtilecfg(&c);
    amx_emu_tdpbssd(4, 0, 2);
    T_CHECK(faulted(1, "tsrc1.colsb / 4 != tsrc2.rows", msg, sizeof msg),
            "emu: K of A != rows of B: #UD (%s)", msg);
    amx_emu_tilerelease();
}

/* ==== the kernels =========================================================================== */

static float *make_x(int n, int cols) {
    float *x = malloc((size_t)n * cols * sizeof(float));
    for (size_t i = 0; i < (size_t)n * cols; i++)
        x[i] = frnd() * (i % 11 == 3 ? 8.0f : 1.0f);
    if (n > 1 && cols > 40) /* a zero group and a lone spike */
        for (int c = 0; c < 32; c++)
            x[cols + c] = 0.0f;
    return x;
}

typedef void (*amx_fn)(const qmat *, const float *, int, float *);

/* y of fn == kern_amx_ref bit for bit on every shape, format and thread count; for the
 * emulation, no fault and the tiles released afterwards. */
static void check_kernel(amx_fn fn, const char *what, int emu) {
    static const int shapes[][3] = {
        /* rows, cols, n: full and partial row blocks, full and partial column tiles, K % 64, K % 32 */
        {16, 64, 16},
        {1, 32, 2},
        {17, 96, 3},
        {15, 100, 17},
        {40, 160, 33},
        {33, 320, 16},
        {5, 7, 2},
        {31, 224, 31},
        {64, 130, 18},
        /* few columns (kern-grp.c: rows in the lanes, up to four columns at a time) */
        {7, 224, 4},
        {16, 96, 5},
        {20, 64, 9},
        {33, 160, 15},
        {18, 1000, 6},
    };
    char msg[256];
    for (int type = Q_I8; type <= Q_MXFP4; type++)
        for (int th = 1; th <= 2; th++) {
            int    ok = 1, cases = 0, clean = 1;
            size_t wrong = 0;
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                int rows = shapes[s][0], cols = shapes[s][1], n = shapes[s][2];
                if (type == Q_MXFP4)
                    cols = (cols + 31) / 32 * 32;
                qmat     m;
                uint8_t *mx;
                make_mat(&m, type, rows, cols, &mx);
                float *x = make_x(n, cols), *y0 = malloc((size_t)n * rows * 4),
                      *y1 = malloc((size_t)n * rows * 4);
                memset(y1, 0xFF, (size_t)n * rows * 4); /* NaN: a result never written shows */
                kern_amx_ref(&m, x, n, y0);
                omp_set_num_threads(th);
                fn(&m, x, n, y1);
                if (memcmp(y0, y1, (size_t)n * rows * 4)) {
                    ok = 0;
                    for (size_t i = 0; i < (size_t)n * rows; i++)
                        wrong += memcmp(&y0[i], &y1[i], 4) != 0;
                }
                if (emu)
                    clean &= amx_emu_faults(msg, sizeof msg) == 0 && !amx_emu_configured();
                cases++;
                free(x), free(y0), free(y1);
                if (mx)
                    free(mx);
                else
                    qmat_free(&m);
            }
            T_CHECK(ok, "%s %s, %d thread%s: bit-identical to kern_amx_ref on %d shapes (%zu values differ)",
                    what, tname[type], th, th > 1 ? "s" : "", cases, wrong);
            if (emu)
                T_CHECK(clean, "%s %s, %d thread%s: no emulated fault, tiles released after every call", what,
                        tname[type], th, th > 1 ? "s" : "");
        }
}

/* A non-finite input in one column: that column's results are all NaN (its group scale is NaN,
 * as in every kernel), every other column is still kern_amx_ref's, bit for bit. */
static void check_grp_nan(void) {
    for (int type = Q_I8; type <= Q_MXFP4; type++) {
        const int rows = 40, cols = 256, n = 20, bad = 3;
        qmat      m;
        uint8_t  *mx;
        make_mat(&m, type, rows, cols, &mx);
        float *x = make_x(n, cols), *y0 = malloc((size_t)n * rows * 4), *y1 = malloc((size_t)n * rows * 4);
        x[(size_t)bad * cols + 77] = NAN;
        kern_amx_ref(&m, x, n, y0);
        kern_grp_matmul(&m, x, n, y1);
        int ok = 1;
        for (int t = 0; t < n; t++)
            for (int r = 0; r < rows; r++) {
                const float a = y0[(size_t)t * rows + r], b = y1[(size_t)t * rows + r];
                ok &= t == bad ? isnan(a) && isnan(b) : memcmp(&a, &b, 4) == 0 && !isnan(b);
            }
        T_CHECK(ok,
                "AVX-512 wide matmul %s: a NaN input gives NaN in its column only, the rest as kern_amx_ref",
                tname[type]);
        free(x), free(y0), free(y1);
        if (mx)
            free(mx);
        else
            qmat_free(&m);
    }
}

/* The emulated kernel faults when nobody asked for the tile state: what a missing
 * arch_prctl would do on Linux (SIGILL at the first tile instruction). */
static void check_kernel_needs_perm(void) {
    qmat     m;
    uint8_t *mx;
    char     msg[256];
    make_mat(&m, Q_I8, 16, 64, &mx);
    float *x = make_x(2, 64), y[32];
    omp_set_num_threads(1);
    amx_emu_revoke();
    kern_amx_matmul_emu(&m, x, 2, y);
    long k = amx_emu_faults(msg, sizeof msg);
    T_CHECK(k > 0 && strstr(msg, "ARCH_REQ_XCOMP_PERM"),
            "emu kernel without the permission request faults (%ld faults: %s)", k, msg);
    amx_emu_grant();
    free(x);
    qmat_free(&m);
}

/* The AMX level as the kernels run it (K3_AMX_EMU=1: the tiles on the emulation, from 2 columns;
 * one column runs the avx512 matvec) at 1, 7, 32 and 128 columns == kern_amx_ref bit for bit,
 * on 1 and 2 threads: the one rounding order (kern-impl.h) that test-kern checks at the other
 * levels. */
static void check_amx_level(void) {
    static const int ns[] = {1, 7, 32, 128};
    setenv("K3_AMX_EMU", "1", 1);
    const int emu = kern_knobs_env() == K3_OK && kern_amx_emulated();
    const int isa = kern_set_isa(KERN_AMX);
    for (int type = Q_I8; type <= Q_MXFP4; type++) {
        const int rows = 37, cols = type == Q_I8 ? 1100 : 1120;
        qmat      m;
        uint8_t  *mx;
        make_mat(&m, type, rows, cols, &mx);
        float *x = make_x(128, cols), *ya = malloc((size_t)128 * rows * 4),
              *yb = malloc((size_t)128 * rows * 4);
        kern_set_idot(1);
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            const int n    = ns[k];
            size_t    diff = 0;
            kern_amx_ref(&m, x, n, ya);
            for (int th = 1; th <= 2; th++) {
                omp_set_num_threads(th);
                memset(yb, 0xFF, (size_t)n * rows * 4);
                qmat_matmul(&m, x, n, yb);
                for (size_t i = 0; i < (size_t)n * rows; i++)
                    diff += memcmp(&ya[i], &yb[i], 4) != 0;
            }
            T_CHECK(emu && isa == KERN_AMX && !diff,
                    "group order: emulated AMX level, %s %dx%d, %d column%s: == kern_amx_ref bit for bit, 1 "
                    "and 2 threads (%zu values differ)",
                    tname[type], rows, cols, n, n > 1 ? "s" : "", diff);
        }
        free(x), free(ya), free(yb);
        if (mx)
            free(mx);
        else
            qmat_free(&m);
    }
    unsetenv("K3_AMX_EMU");
    kern_knobs_env();
    kern_set_isa(kern_isa_best());
}

int main(void) {
    unsetenv("K3_AMX_EMU");
    unsetenv("K3_AMX_DENY");
    amx_emu_trap(1);
    check_emu_faults();
    amx_emu_grant();
    check_emu_semantics();
    check_emu_per_thread();

    char why[160];
    if (!KERN_BUILD_AVX512 || !kern_isa_ok(KERN_AVX512, why, sizeof why))
        T_SKIP("emulated AMX kernels not run: they use the AVX-512 level for the float part (%s)",
               KERN_BUILD_AVX512 ? why : "this build has no AVX-512 code");
    else {
        check_kernel_needs_perm();
        check_kernel(kern_amx_matmul_emu, "emulated AMX", 1);
        check_kernel(kern_grp_matmul, "AVX-512 wide matmul", 0);
        check_grp_nan();
        check_amx_level();
    }
    amx_emu_trap(0);

    /* the hardware: only where cpuid says AMX and the kernel grants the tile state */
    if (!kern_isa_ok(KERN_AMX, why, sizeof why))
        T_SKIP("AMX hardware kernels not compared: %s", why);
    else if (!kern_amx_permission(why, sizeof why))
        T_SKIP("AMX hardware kernels not compared: %s", why);
    else
        check_kernel(kern_amx_matmul_hw, "AMX hardware", 0);
    return t_done();
}
