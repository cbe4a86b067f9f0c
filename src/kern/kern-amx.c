/* kern-amx.c: AMX-INT8 tile kernels for the IDOT matmul of 2+ columns (int8, int4 and MXFP4
 * weights x int8 activations), their scalar twin, in the group order (kern-impl.h).
 *
 * DESIGN
 * - The weights are the A operand: tile row m = weight row, 32 bytes of K per tile, loaded
 *   straight from the row-major matrix with stride = the row's bytes. So no weight copy exists
 *   (memory cost 0 for int8). The activations take the VNNI B layout instead, once per call:
 *   per token tile (16 columns) and group g, B row kq = the four codes 4kq..4kq+3 of the group
 *   for each of the 16 columns (8 rows x 64 bytes). C = A B is then 16 weight rows x 16 columns
 *   of exact int32 group sums (TDPBSSD: both operands signed).
 * - int4 and MXFP4 rows are unpacked to int8 once per block of 16 rows (MXFP4: the doubled e2m1
 *   values, exact in int8), into a per-thread buffer of 16 x K bytes that every token tile
 *   then reads; K is padded to whole groups with zeros. An int8 matrix whose K is not a multiple
 *   of 32 has its last group copied to a zero-padded 16 x 32 buffer, so no tile load reads past
 *   a row's end.
 * - THE ORDER: the group order of kern-impl.h, the one every IDOT kernel computes (one float
 *   FMA per group of 32 on the tile's exact int32 group sums, groups in order). A tile product
 *   gives a whole group's sum at once, so the order costs AMX nothing; the float work is one
 *   convert and one FMA per (row, column, group). kern_amx_ref is the order in plain C, the
 *   twin the tile kernels match bit for bit (tests/test-amx, on the emulation here).
 * - Tiles (palette 1): tmm0/tmm1 A of even/odd groups (rb x 32 bytes), tmm2/tmm3 B (8 x 4nt),
 *   tmm4/tmm5 C (rb x 4nt), rb = rows of the block (16 but the last), nt = columns of the token
 *   tile (16 but the last). Each thread loads its own configuration (tile state is per thread)
 *   when (rb, nt) changes and releases the tiles when done. The float combination runs on
 *   AVX-512: one zmm per weight row holds the 16 columns of the token tile.
 * - Threads take whole blocks of 16 rows, so a row's arithmetic never depends on the split.
 * - Compiled three times from this one source: here for the hardware (kern_amx_matmul_hw),
 *   from kern-amx-emu.c on the tile emulation (kern_amx_matmul_emu) and from kern-amx-notile.c
 *   with no tiles at all (kern_amx_matmul_notile, a benchmark).
 */
#ifndef KERN_AMX_EMU
#define KERN_AMX_EMU 0
#endif
#include "kern-amx-tile.h"
#include "kern-impl.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

#if KERN_AMX_EMU == 2
#define AMX_FN(name) name##_notile
#define AMX_ON KERN_BUILD_AVX512
#define T __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#elif KERN_AMX_EMU
#define AMX_FN(name) name##_emu
#define AMX_ON KERN_BUILD_AVX512
#define T __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#else
#define AMX_FN(name) name##_hw
#define AMX_ON KERN_BUILD_AMX
#define T __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#endif

#if AMX_ON
#include <immintrin.h>

enum { TR = 16, TK = 32, TN = 16 }; /* rows of a block, K bytes (one group) and columns per tile */

/* One thread's buffers. */
typedef struct {
    int8_t  *wq;     /* nibble types: [16][ng * 32] the block's weights as int8, K zero-padded */
    float   *ws;     /* nibble types: [16][ng] wscale of row i, group g; 0 past the block       */
    int8_t  *tail;   /* Q_I8 with K % 32: [16][32] the last group, zero-padded                 */
    int32_t *cb;     /* [2][16][16] C tiles as stored                                          */
    float   *fb;     /* [16][16] the block's results before the transposed write               */
    int      rb, nt; /* the configuration loaded in this thread (0 = none)                   */
} amx_thread;

/* Load the configuration for rb rows and nt columns (tiles as the design says). */
T static void config(amx_thread *th, int rb, int nt) {
    if (th->rb == rb && th->nt == nt)
        return;
    _Alignas(64) amx_tilecfg cfg = {.palette = 1};
    for (int t = 0; t < 2; t++) {
        cfg.rows[t] = (uint8_t)rb, cfg.colsb[t] = TK;                         /* A: rb x 32 bytes */
        cfg.rows[2 + t] = TK / 4, cfg.colsb[2 + t] = (uint16_t)(4 * nt);      /* B: 8 x 4nt       */
        cfg.rows[4 + t] = (uint8_t)rb, cfg.colsb[4 + t] = (uint16_t)(4 * nt); /* C: rb x 4nt */
    }
    KT_LOADCFG(&cfg);
    th->rb = rb, th->nt = nt;
}

/* Block rows r0 .. r0+rb-1: the weights as the A operand of every group (a_ptr gives the
 * pointer and stride of group g). */
typedef struct {
    const int8_t *base; /* group 0 of row r0                     */
    long          stride;
    const int8_t *tail; /* the last group when it comes from th->tail (else NULL) */
} a_src;

static inline const int8_t *a_ptr(const a_src *a, int g, int ng, long *stride) {
    if (a->tail && g == ng - 1) {
        *stride = TK;
        return a->tail;
    }
    *stride = a->stride;
    return a->base + (size_t)g * TK;
}

/* acc[i] += cvt(C row i) * scale of group g (nt columns live, the rest 0). */
#define COMBINE(cbuf, g)                                                                                     \
    do {                                                                                                     \
        const __m512 dv = _mm512_loadu_ps(dt + (size_t)(g)*16);                                              \
        _Pragma("GCC unroll 16") for (int i = 0; i < TR; i++) {                                              \
            const __m512 f  = _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(km, (cbuf) + i * 16));             \
            const __m512 sc = i8 ? dv : _mm512_mul_ps(_mm512_set1_ps(th->ws[i * ng + (g)]), dv);             \
            acc[i]          = _mm512_fmadd_ps(f, sc, acc[i]);                                                \
        }                                                                                                    \
    } while (0)

/* One token tile (nt columns, B tiles bt, scales dt) of one block: acc in the group order. */
T static void block_tile(amx_thread *th, const a_src *a, const int8_t *bt, const float *dt, int ng, int nt,
                         int i8, __m512 acc[TR]) {
    const __mmask16 km = (__mmask16)(nt >= 16 ? 0xFFFF : (1u << nt) - 1);
    int32_t        *c0 = th->cb, *c1 = th->cb + TR * TN;
#pragma GCC unroll 16
    for (int i = 0; i < TR; i++)
        acc[i] = _mm512_setzero_ps();
    int g = 0;
    for (; g + 2 <= ng; g += 2) { /* two groups on two tile sets, then their sums in order */
        long          s0, s1;
        const int8_t *p0 = a_ptr(a, g, ng, &s0), *p1 = a_ptr(a, g + 1, ng, &s1);
        KT_LOAD(0, p0, s0);
        KT_LOAD(2, bt + (size_t)g * 512, 64);
        KT_ZERO(4);
        KT_DPBSSD(4, 0, 2);
        KT_LOAD(1, p1, s1);
        KT_LOAD(3, bt + (size_t)(g + 1) * 512, 64);
        KT_ZERO(5);
        KT_DPBSSD(5, 1, 3);
        KT_STORE(4, c0, 64);
        KT_STORE(5, c1, 64);
        COMBINE(c0, g);
        COMBINE(c1, g + 1);
    }
    if (g < ng) {
        long          s0;
        const int8_t *p0 = a_ptr(a, g, ng, &s0);
        KT_LOAD(0, p0, s0);
        KT_LOAD(2, bt + (size_t)g * 512, 64);
        KT_ZERO(4);
        KT_DPBSSD(4, 0, 2);
        KT_STORE(4, c0, 64);
        COMBINE(c0, g);
    }
}

/* Rows of blocks [b0, b1) of y[n][rows] for every token tile. */
T static void blocks(const qmat *m, const kern_tile_act *x, int n, float *y, int b0, int b1, amx_thread *th) {
    const int    rows = m->rows, cols = m->cols, ng = x->ng, i8 = m->type == Q_I8;
    const int    kpad   = ng * TK;
    const size_t rbytes = q_wbytes(m->type, 1, cols);
    for (int blk = b0; blk < b1; blk++) {
        const int r0 = blk * TR, rb = rows - r0 < TR ? rows - r0 : TR;
        a_src     a = {0};
        if (i8) {
            a.base = (const int8_t *)m->w + (size_t)r0 * cols, a.stride = cols;
            if (cols % TK) { /* the last group, zero-padded */
                memset(th->tail, 0, TR * TK);
                for (int i = 0; i < rb; i++)
                    memcpy(th->tail + i * TK, a.base + (size_t)i * cols + (size_t)(ng - 1) * TK,
                           (size_t)(cols % TK));
                a.tail = th->tail;
            }
        } else { /* unpack the block once for every token tile; its weight scales */
            for (int i = 0; i < rb; i++) {
                kern_unpack_row_avx512((const uint8_t *)m->w + (size_t)(r0 + i) * rbytes, rbytes, m->type,
                                       cols, kpad, 0, (uint8_t *)th->wq + (size_t)i * kpad);
                kern_row_wscales(m, r0 + i, ng, th->ws + (size_t)i * ng);
            }
            for (int i = rb; i < TR; i++)
                for (int g = 0; g < ng; g++)
                    th->ws[i * ng + g] = 0.0f;
            a.base = th->wq, a.stride = kpad;
        }
        for (int j = 0; j < x->ntile; j++) {
            const int nt = n - j * TN < TN ? n - j * TN : TN;
            __m512    acc[TR];
            config(th, rb, nt);
            block_tile(th, &a, x->b + (size_t)j * ng * 512, x->dt + (size_t)j * ng * 16, ng, nt, i8, acc);
#pragma GCC unroll 16
            for (int i = 0; i < TR; i++)
                _mm512_storeu_ps(th->fb + i * 16,
                                 i8 && i < rb ? _mm512_mul_ps(acc[i], _mm512_set1_ps(m->s[r0 + i])) : acc[i]);
            kern_tile_store(th->fb, rb, nt, y + (size_t)j * TN * rows + r0, rows);
        }
    }
    if (th->rb)
        KT_RELEASE(); /* tiles back to the init state: no tile state to save on a switch */
}

void AMX_FN(kern_amx_matmul)(const qmat *m, const float *x, int n, float *y) {
    K3_ASSERT(m->type == Q_I8 || m->type == Q_I4 || m->type == Q_MXFP4);
    kern_tile_act a; /* the activations in the B layout (kern-grp.c) */
    const int     made = kern_tile_act_make(x, m->cols, n, 0, &a);
    K3_ASSERT(made); /* a few KiB per column: out of memory here is not recoverable (as in kern.c) */
    const int  nb = (m->rows + TR - 1) / TR, ng = a.ng;
    const long work = (long)m->rows * m->cols * n;
#pragma omp parallel if (work > K3_PAR_MIN_MATMUL)
    {
        const int  ith = omp_get_thread_num(), nth = omp_get_num_threads();
        const int  b0 = (int)((long)nb * ith / nth), b1 = (int)((long)nb * (ith + 1) / nth);
        amx_thread th = {0};
        th.wq         = k3_aligned_alloc(64, (size_t)TR * ng * TK);
        th.ws         = malloc((size_t)TR * ng * sizeof(float));
        th.tail       = k3_aligned_alloc(64, TR * TK);
        th.cb         = k3_aligned_alloc(64, 2 * TR * TN * sizeof(int32_t));
        th.fb         = k3_aligned_alloc(64, TR * 16 * sizeof(float));
        K3_ASSERT(th.wq && th.ws && th.tail && th.cb && th.fb);
        memset(th.cb, 0, 2 * TR * TN * sizeof(int32_t)); /* rows past rb are read, never used */
        if (b0 < b1)
            blocks(m, &a, n, y, b0, b1, &th);
        free(th.wq), free(th.ws), free(th.tail), free(th.cb), free(th.fb);
    }
    kern_tile_act_free(&a);
}

#else /* no build for this target: never selected (kern_isa_ok says no) */

void AMX_FN(kern_amx_matmul)(const qmat *m, const float *x, int n, float *y) {
    (void)m, (void)x, (void)n, (void)y;
    K3_ASSERT(!"AMX kernels not built for this target");
}

#endif

#if !KERN_AMX_EMU
/* ==== the scalar twin (the group order in plain C) and the dispatch ============================ */

void kern_amx_ref(const qmat *m, const float *x, int n, float *y) {
    const int cols = m->cols, ng = (cols + Q_IDOT_GROUP - 1) / Q_IDOT_GROUP, i8 = m->type == Q_I8;
    int8_t   *q = malloc((size_t)ng * Q_IDOT_GROUP);
    float    *d = malloc((size_t)ng * sizeof *d);
    K3_ASSERT(q && d);
    for (int t = 0; t < n; t++) {
        memset(q, 0, (size_t)ng * Q_IDOT_GROUP);
        kern_act_quant_ref(x + (size_t)t * cols, cols, ng, q, d);
        for (int r = 0; r < m->rows; r++) {
            float acc = 0.0f;
            for (int g = 0; g < ng; g++) {
                int32_t isum = 0;
                for (int c = g * Q_IDOT_GROUP; c < (g + 1) * Q_IDOT_GROUP && c < cols; c++)
                    isum += kern_idot_weight(m, r, c) * q[c];
                acc = fmaf((float)isum, i8 ? d[g] : kern_idot_wscale(m, r, g) * d[g], acc);
            }
            y[(size_t)t * m->rows + r] = i8 ? acc * m->s[r] : acc;
        }
    }
    free(q);
    free(d);
}

void kern_amx_matmul(const qmat *m, const float *x, int n, float *y) {
    /* the level is KERN_AMX only after the grant (kern-cpu.c runnable); an abort with a message
     * is still better than the SIGILL of a tile instruction without it */
    K3_ASSERT(kern_amx_permission(NULL, 0));
    if (kern_amx_emulated())
        kern_amx_matmul_emu(m, x, n, y);
    else
        kern_amx_matmul_hw(m, x, n, y);
}
#endif
