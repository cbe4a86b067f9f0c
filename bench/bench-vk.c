/* bench-vk.c: Vulkan tier throughput: matvec GB/s of weight bytes at release shapes against the
 * device's own read bandwidth, measured in the same run by a streaming-read shader.
 *
 * Each matvec figure runs REPS back-to-back dispatches in one submit (submission latency
 * amortised; the input stays on the device), best of 5 submits. On lavapipe (Mesa's CPU
 * driver) the figures describe the CPU, not a GPU. Skips with a note when there is no device.
 */
#include "bench.h"
#include "quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bench_vk(void);

#if K3_VK
#include "vk.h"

static void fill(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
}

int bench_vk(void) {
    if (!bench_want("vk_"))
        return 0;
    vk_ctx *c;
    if (vk_ctx_new(0, &c) != K3_OK) {
        printf("# vk: skipped: %s\n", k3_errmsg());
        return 0;
    }
    printf("# vk: device '%s'\n", vk_device_name(c));
    double bw = 0;
    if (vk_read_bandwidth(c, 256u << 20, 5, &bw) != K3_OK) {
        printf("# vk: read bandwidth failed: %s\n", k3_errmsg());
        vk_ctx_free(c);
        return 1;
    }
    static const struct {
        int         type, rows, cols;
        const char *tag;
    } shapes[] = {
        {Q_MXFP4, 3072, 3584, "mxfp4"}, {Q_MXFP4, 3584, 3072, "mxfp4"}, {Q_I4, 7168, 3584, "i4"},
        {Q_I4, 3584, 7168, "i4"},       {Q_I8, 7168, 3584, "i8"},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "vk_%s_matvec_%dx%d", shapes[i].tag, shapes[i].rows, shapes[i].cols);
        if (!bench_want(name))
            continue;
        int      t = shapes[i].type, r = shapes[i].rows, k = shapes[i].cols;
        size_t   wb = q_wbytes(t, r, k), sb = q_sbytes(t, r, k);
        uint8_t *w = malloc(wb), *s = malloc(sb);
        float   *x = malloc((size_t)k * 4);
        fill(w, wb, 1);
        fill(s, sb, 2);
        if (t == Q_MXFP4)
            for (size_t j = 0; j < sb; j++)
                s[j] = (uint8_t)(120 + s[j] % 8);
        else
            for (size_t j = 0; j < sb / 4; j++)
                ((float *)s)[j] = 0.01f;
        for (int j = 0; j < k; j++)
            x[j] = 0.5f;
        qmat      m = {.type = t,
                       .rows = r,
                       .cols = k,
                       .w    = w,
                       .s    = t == Q_MXFP4 ? NULL : (float *)s,
                       .e    = t == Q_MXFP4 ? s : NULL};
        vk_mat    vm;
        double    best = 1e30, sec;
        const int reps = 20;
        if (vk_upload(c, &m, &vm) != K3_OK) {
            printf("# %s: upload failed: %s\n", name, k3_errmsg());
            rc = 1;
        } else {
            for (int p = 0; p < 5; p++)
                if (vk_matvec_repeat(c, &vm, x, reps, &sec) == K3_OK && sec < best)
                    best = sec;
            bench_report(name, (double)(wb + sb) * reps / best / 1e9, "GB/s", bw, "GB/s");
        }
        free(w);
        free(s);
        free(x);
    }
    vk_ctx_free(c);
    return rc;
}
#else
int bench_vk(void) {
    printf("# vk: skipped: built with VK=0\n");
    return 0;
}
#endif
