/* test-vk.c: Vulkan kernels against the CPU kernels (test-backend-ops style).
 *
 * Each case names its op, type and shape and must reach relative L2 <= 1e-6 against
 * qmat_matvec on the CPU. Runs on lavapipe (Mesa's CPU Vulkan driver) in make check;
 * skips cleanly, with the reason, when no Vulkan device exists or K3_VK=0.
 */
#include "quant.h"
#include "test.h"
#include "vk-impl.h"
#if K3_VK
#include "vk.h"
#endif

#include <stdlib.h>
#include <string.h>

/* Leak reports from inside the Vulkan driver are not ours to fix. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "detect_leaks=0";
}

#if K3_VK
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { /* uniform in [-1, 1) */
    return (float)((int32_t)(rnd() % 131072u) - 65536) / 65536.0f;
}

/* The last warning the engine logged (k3_log_set_callback). */
static char log_text[512];
static void log_cb(int level, const char *msg, void *ud) {
    (void)ud;
    if (level <= K3_LOG_LEVEL_WARN)
        snprintf(log_text, sizeof log_text, "%s", msg);
}

typedef struct owned {
    qmat  m;
    void *w, *s;
} owned;

/* Random matrix of a type: weights ~ 1/sqrt(cols) in value. */
static int make_mat(owned *o, int type, int rows, int cols) {
    memset(o, 0, sizeof *o);
    size_t wb = q_wbytes(type, rows, cols), sb = q_sbytes(type, rows, cols);
    o->w = malloc(wb ? wb : 1);
    o->s = malloc(sb ? sb : 1);
    if (!o->w || !o->s)
        return -1;
    float sc = 1.0f / sqrtf((float)cols);
    if (type == Q_F32) {
        for (size_t i = 0; i < wb / 4; i++)
            ((float *)o->w)[i] = rndf() * sc;
    } else {
        for (size_t i = 0; i < wb; i++)
            ((uint8_t *)o->w)[i] = (uint8_t)rnd();
        if (type == Q_MXFP4)
            for (size_t i = 0; i < sb; i++) /* exponents around 2^-3 .. 2^-5 for 1/sqrt(cols) scale */
                ((uint8_t *)o->s)[i] = (uint8_t)(127 - 3 - (int)(rnd() % 3) - (cols > 1024 ? 2 : 0));
        else
            for (size_t i = 0; i < sb / 4; i++)
                ((float *)o->s)[i] = (0.5f + 0.5f * (rndf() + 1.0f)) * sc / (type == Q_I8 ? 64.0f : 4.0f);
    }
    o->m = (qmat){.type = type, .rows = rows, .cols = cols, .w = o->w};
    if (type == Q_MXFP4)
        o->m.e = o->s;
    else if (type != Q_F32)
        o->m.s = o->s;
    return 0;
}

static void free_mat(owned *o) {
    free(o->w);
    free(o->s);
}

static double rel_l2(const float *a, const float *b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Exact value of weight (r, c), decoded here independently of kern.c. */
static double wval(const qmat *m, int r, int c) {
    const uint8_t *b = m->w;
    switch (m->type) {
    case Q_F32:
        return ((const float *)m->w)[(size_t)r * m->cols + c];
    case Q_I8:
        return (double)((const int8_t *)m->w)[(size_t)r * m->cols + c] * (double)m->s[r];
    case Q_I4: {
        uint8_t byte = b[(size_t)r * ((m->cols + 1) / 2) + c / 2];
        int     nib  = (c & 1) ? byte >> 4 : byte & 15;
        return (nib - 8) * (double)m->s[(size_t)r * ((m->cols + 63) / 64) + c / 64];
    }
    case Q_MXFP4: {
        static const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
        uint8_t             byte    = b[(size_t)r * (m->cols / 2) + c / 2];
        int                 nib     = (c & 1) ? byte >> 4 : byte & 15;
        double              v       = (nib & 8) ? -e2m1[nib & 7] : e2m1[nib & 7];
        return ldexp(v, m->e[(size_t)r * (m->cols / 32) + c / 32] - 127);
    }
    }
    return 0;
}

/* y = W x in double: the oracle both the CPU kernel and the device are measured against. */
static void matvec_f64(const qmat *m, const float *x, float *y) {
    for (int r = 0; r < m->rows; r++) {
        double acc = 0;
        for (int c = 0; c < m->cols; c++)
            acc += wval(m, r, c) * (double)x[c];
        y[r] = (float)acc;
    }
}

static const char *tname[] = {"f32", "i8", "i4", "mxfp4"};

static void case_matvec(vk_ctx *c, int type, int rows, int cols) {
    owned o;
    if (make_mat(&o, type, rows, cols)) {
        T_CHECK(0, "matvec %s %dx%d: allocation", tname[type], rows, cols);
        return;
    }
    float *x = malloc((size_t)cols * 4), *ref = malloc((size_t)rows * 4), *got = malloc((size_t)rows * 4);
    float *cpu = malloc((size_t)rows * 4);
    for (int i = 0; i < cols; i++)
        x[i] = rndf();
    matvec_f64(&o.m, x, ref);
    qmat_matvec(&o.m, x, cpu);
    vk_mat    vm;
    k3_status st = vk_upload(c, &o.m, &vm);
    if (st == K3_OK) {
        vk_job j = {&vm, x, got};
        st       = vk_matvec(c, &j, 1);
    }
    /* The device must be within 1e-6 of the exact result, and so within 1e-6 plus the CPU
     * kernel's own rounding of the CPU kernel (its sequential f32 sums drift on long rows). */
    double e = st == K3_OK ? rel_l2(got, ref, rows) : 1.0, ec = rel_l2(cpu, ref, rows);
    double ed = st == K3_OK ? rel_l2(got, cpu, rows) : 1.0;
    T_CHECK(st == K3_OK && e <= 1e-6 && ed <= 1e-6 + ec,
            "matvec %s %dx%d: rel L2 vs exact %.2e <= 1e-6, vs CPU kernel %.2e <= 1e-6 + %.2e (%s)",
            tname[type], rows, cols, e, ed, ec, st ? k3_errmsg() : "ok");
    free(cpu);
    free(x);
    free(ref);
    free(got);
    free_mat(&o);
}

static float situ_glu(float g, float u, float b1, float b2) {
    return b1 * tanhf(g / b1) / (1.0f + expf(-g)) * (b2 * tanhf(u / b2));
}

/* n experts, latent L, intermediate F: the whole expert on the device vs the CPU. */
static void case_experts(vk_ctx *c, int n, int L, int F) {
    owned         o[3 * 8];
    vk_mat        vm[3 * 8];
    const vk_mat *pm[3 * 8];
    float    *z = malloc((size_t)L * 4), *ref = malloc((size_t)n * L * 4), *got = malloc((size_t)n * L * 4);
    float    *g = malloc((size_t)F * 4), *u = malloc((size_t)F * 4);
    k3_status st = K3_OK;
    for (int i = 0; i < L; i++)
        z[i] = rndf() * 2;
    for (int e = 0; e < n; e++) {
        make_mat(&o[3 * e + 0], Q_MXFP4, F, L);
        make_mat(&o[3 * e + 1], Q_MXFP4, F, L);
        make_mat(&o[3 * e + 2], Q_MXFP4, L, F);
        qmat_matvec(&o[3 * e].m, z, g);
        qmat_matvec(&o[3 * e + 1].m, z, u);
        for (int i = 0; i < F; i++)
            g[i] = situ_glu(g[i], u[i], 4.0f, 25.0f);
        qmat_matvec(&o[3 * e + 2].m, g, ref + (size_t)e * L);
        for (int k = 0; k < 3 && st == K3_OK; k++) {
            st            = vk_upload(c, &o[3 * e + k].m, &vm[3 * e + k]);
            pm[3 * e + k] = &vm[3 * e + k];
        }
    }
    if (st == K3_OK)
        st = vk_expert_ffn(c, n, pm, z, 4.0f, 25.0f, got);
    double e = st == K3_OK ? rel_l2(got, ref, n * L) : 1.0;
    T_CHECK(st == K3_OK && e <= 1e-6, "expert ffn x%d L=%d F=%d: rel L2 %.2e <= 1e-6 (%s)", n, L, F, e,
            st ? k3_errmsg() : "ok");
    for (int i = 0; i < 3 * n; i++)
        free_mat(&o[i]);
    free(z);
    free(ref);
    free(got);
    free(g);
    free(u);
}
#endif

int main(void) {
    kern_set_idot(0); /* compare against the exact-float CPU kernels (IDOT is approximate) */
    /* layout mirrors: checked at compile time in vk-impl.h, at run time here too */
    T_CHECK(sizeof(vk_pc_matvec) == 32 && offsetof(vk_pc_matvec, x_off) == 16,
            "push constants mirror types.glsl");
    T_CHECK(sizeof(vk_pc_glu) == 32 && offsetof(vk_pc_glu, beta2) == 20, "push constants mirror glu.comp");
#if !K3_VK
    T_SKIP("built with VK=0: no Vulkan tier to test");
    return t_done();
#else
    vk_ctx   *c;
    k3_status st = vk_ctx_new(0, &c);
    if (st != K3_OK) {
        T_SKIP("no Vulkan device: %s", k3_errmsg());
        return t_done();
    }
    printf("device: %s, budget %.2f GB\n", vk_device_name(c), (double)vk_budget(c) / 1e9);
    /* odd shapes: rows/cols not multiples of 8 or 64 (MXFP4 needs cols % 32 == 0) */
    static const int odd[][2] = {{1, 1}, {7, 13}, {37, 100}, {129, 65}, {3, 1000}};
    for (int t = Q_F32; t <= Q_I4; t++)
        for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
            case_matvec(c, t, odd[i][0], odd[i][1]);
    static const int odd32[][2] = {{1, 32}, {7, 96}, {37, 160}, {129, 64}};
    for (size_t i = 0; i < sizeof odd32 / sizeof odd32[0]; i++)
        case_matvec(c, Q_MXFP4, odd32[i][0], odd32[i][1]);
    /* real K3 shapes: expert gate/up and down, latent down, shared gate (2 x 3072) */
    case_matvec(c, Q_MXFP4, 3072, 3584);
    case_matvec(c, Q_MXFP4, 3584, 3072);
    case_matvec(c, Q_I4, 3584, 7168);
    case_matvec(c, Q_I8, 1536, 7168);
    case_matvec(c, Q_I4, 6144, 7168);
    case_experts(c, 3, 96, 64);
    case_experts(c, 2, 3584, 3072);
    /* a budget that is too small: the upload says so instead of failing later */
    vk_ctx *small;
    if (vk_ctx_new(4096, &small) == K3_OK) {
        owned o;
        make_mat(&o, Q_I8, 64, 128);
        vk_mat vm;
        T_CHECK(vk_upload(small, &o.m, &vm) == K3_ERR_NOMEM, "upload beyond K3_VK_GB budget: K3_ERR_NOMEM");
        free_mat(&o);
        vk_ctx_free(small);
    }
    /* a budget above what the device reports: clamped to the device's figure, and said with both
     * (the figure may move between two opens, as the driver's free memory does: the test reads
     * the one this open used from the budget it got) */
    uint64_t avail = vk_budget(c), big = avail * 2 + 1000000000u;
    vk_ctx  *over;
    log_text[0] = 0;
    k3_log_set_callback(log_cb, NULL);
    st = vk_ctx_new(big, &over);
    T_CHECK(st == K3_OK, "a budget of twice the device's opens (%s)", st ? k3_errmsg() : "ok");
    if (st == K3_OK) {
        uint64_t got = vk_budget(over);
        char     want[160], use[64];
        snprintf(want, sizeof want, "K3_VK_GB=%.2f GB is more than the %.2f GB", (double)big / 1e9,
                 (double)got / 1e9);
        snprintf(use, sizeof use, "using %.2f GB", (double)got / 1e9);
        T_CHECK(got > 0 && got < big && got <= avail + avail / 2,
                "K3_VK_GB above the device's %.2f GB is clamped to what the device reports (%.2f GB)",
                (double)avail / 1e9, (double)got / 1e9);
        T_CHECK(strstr(log_text, want) && strstr(log_text, use), "... and a warning names both figures (%s)",
                log_text);
        vk_ctx_free(over);
    }
    k3_log_set_callback(NULL, NULL);
    vk_ctx_free(c);
    return t_done();
#endif
}
