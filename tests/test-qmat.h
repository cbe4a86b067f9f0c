/* test-qmat.h: random quantized matrices for the kernel tests (test-kern.c, test-amx.c).
 * make_mat reports a failed quantization as a FAIL (test.h). Each test has its
 * own generator state (static), seeded the same way. */
#pragma once
#include "quant.h"
#include "test.h"

#include <stdlib.h>

static uint64_t        rng = 0x9E3779B97F4A7C15ull;
static inline uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static inline float frnd(void) {
    return (float)rnd() / 4294967296.0f * 2.0f - 1.0f;
}

/* A random matrix of the type: quantized from random floats, or random MXFP4 bytes. */
static inline void make_mat(qmat *m, int type, int rows, int cols, uint8_t **mx) {
    if (type == Q_MXFP4) {
        size_t   wb = q_wbytes(type, rows, cols), sb = q_sbytes(type, rows, cols);
        uint8_t *p = malloc(wb + sb);
        for (size_t i = 0; i < wb; i++)
            p[i] = (uint8_t)rnd();
        for (size_t i = 0; i < sb; i++)
            p[wb + i] = (uint8_t)(118 + rnd() % 12);
        *m  = (qmat){.type = type, .rows = rows, .cols = cols, .w = p, .e = p + wb};
        *mx = p;
        return;
    }
    float *w = malloc((size_t)rows * cols * sizeof(float));
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        w[i] = frnd() * (1.0f + (float)(i % 7));
    k3_status st = qmat_quantize(m, type, w, rows, cols);
    T_CHECK(st == K3_OK, "quantize type %d %dx%d", type, rows, cols);
    free(w);
    *mx = NULL;
}
