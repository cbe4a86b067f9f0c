/* ggml-mm.c: the reference figure beside `k3-bench matmul32` / `matmul128`: ggml's own CPU
 * mul_mat of a 3072 x 3584 weight (q8_0, q4_0 or mxfp4) by n float columns, one thread, GOPS per
 * CPU-second (2 x rows x cols x n / time), median and best of REPS runs (the first discarded).
 * Not part of the build: compare.sh builds it against a ggml checkout (no ggml code in this
 * tree). Usage: ggml-mm TYPE N REPACK REPS (REPACK 1: the weight in ggml's first extra buffer
 * type, CPU_REPACK or AMX, as llama.cpp loads it). */
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
enum { REPS_MAX = 200 };
int main(int argc, char **argv) {
    const char *tn = argc > 1 ? argv[1] : "q4_0";
    int         n = argc > 2 ? atoi(argv[2]) : 32, repack = argc > 3 ? atoi(argv[3]) : 0,
        reps       = argc > 4 ? atoi(argv[4]) : 15;
    const int rows = 3072, cols = 3584;
    if (strcmp(tn, "q8_0") && strcmp(tn, "q4_0") && strcmp(tn, "mxfp4")) {
        fprintf(stderr, "ggml-mm: TYPE '%s': expected q8_0, q4_0 or mxfp4\n", tn);
        return 2;
    }
    if (n < 1 || n > 4096 || (repack != 0 && repack != 1) || reps < 2 || reps > REPS_MAX) {
        fprintf(stderr, "ggml-mm: N %d, REPACK %d, REPS %d: expected N 1..4096, REPACK 0 or 1, REPS 2..%d\n",
                n, repack, reps, REPS_MAX);
        return 2;
    }
    enum ggml_type type = !strcmp(tn, "q8_0")    ? GGML_TYPE_Q8_0
                          : !strcmp(tn, "mxfp4") ? GGML_TYPE_MXFP4
                                                 : GGML_TYPE_Q4_0;
    ggml_backend_t be   = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, 1);
    ggml_backend_buffer_type_t wbt = ggml_backend_get_default_buffer_type(be), def = wbt;
    const char                *btname = "default";
    if (repack) {
        ggml_backend_dev_t                 dev = ggml_backend_get_device(be);
        ggml_backend_reg_t                 reg = ggml_backend_dev_backend_reg(dev);
        ggml_backend_dev_get_extra_bufts_t f =
            (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(
                reg, "ggml_backend_dev_get_extra_bufts");
        ggml_backend_buffer_type_t *l = f ? f(dev) : NULL;
        if (!l || !l[0]) {
            fprintf(stderr, "no extra buffer type\n");
            return 1;
        }
        wbt = l[0], btname = ggml_backend_buft_name(wbt);
    }
    struct ggml_init_params ip = {.mem_size = 16 * ggml_tensor_overhead() + ggml_graph_overhead(),
                                  .no_alloc = true};
    struct ggml_context    *cw = ggml_init(ip), *cx = ggml_init(ip);
    struct ggml_tensor     *w  = ggml_new_tensor_2d(cw, type, cols, rows);
    struct ggml_tensor     *x  = ggml_new_tensor_2d(cx, GGML_TYPE_F32, cols, n);
    struct ggml_tensor     *y  = ggml_mul_mat(cx, w, x);
    ggml_backend_buffer_t   bw = ggml_backend_alloc_ctx_tensors_from_buft(cw, wbt);
    ggml_backend_buffer_t   bx = ggml_backend_alloc_ctx_tensors_from_buft(cx, def);
    if (!bw || !bx) {
        fprintf(stderr, "alloc failed\n");
        return 1;
    }
    ggml_backend_buffer_set_usage(bw, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    float   *wf = malloc((size_t)rows * cols * 4), *xf = malloc((size_t)n * cols * 4);
    unsigned s = 12345;
    for (size_t i = 0; i < (size_t)rows * cols; i++) {
        s     = s * 1103515245u + 12345u;
        wf[i] = ((s >> 9) & 0xffff) / 32768.0f - 1.0f;
    }
    for (size_t i = 0; i < (size_t)n * cols; i++)
        xf[i] = (float)((i * 37) % 101 - 50) / 50.0f;
    void *wq = malloc(ggml_row_size(type, cols) * rows);
    ggml_quantize_chunk(type, wf, wq, 0, rows, cols, NULL);
    ggml_backend_tensor_set(w, wq, 0, ggml_nbytes(w));
    ggml_backend_tensor_set(x, xf, 0, ggml_nbytes(x));
    struct ggml_context *cg = ggml_init(ip);
    struct ggml_cgraph  *gf = ggml_new_graph(cg);
    ggml_build_forward_expand(gf, y);
    double t[REPS_MAX];
    for (int r = 0; r < reps; r++) {
        double t0 = cpu();
        ggml_backend_graph_compute(be, gf);
        t[r] = cpu() - t0;
    }
    qsort(t + 1, reps - 1, sizeof t[0], cmp);
    const double ops = 2.0 * rows * cols * n;
    printf("ggml %s %dx%d n %d (%s buffer): median %.1f GOPS, best %.1f GOPS\n", tn, rows, cols, n, btname,
           ops / t[1 + (reps - 1) / 2] / 1e9, ops / t[1] / 1e9);
    return 0;
}
