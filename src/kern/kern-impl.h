/* kern-impl.h: what the scalar reference kernels (kern.c) and their AVX2 twins (kern-avx2.c)
 * share: row-range kernel signatures, the IDOT activation layout and the exact scale helpers.
 *
 * THE GROUP ORDER: the one rounding order of every IDOT kernel, at every level (scalar, AVX2,
 * AVX-VNNI, AVX-512 VNNI, AMX) and every column count (1 for a decode matvec, n for prefill and
 * batched decode), so a column's result never depends on the level, the chunk or the batch:
 *   activations (kern_act): per group g of 32 columns an int8 code per column and a scale
 *     d[g] (x ~ q * d, zero past cols), from one quantizer (kern_act_quant_ref and its twin).
 *   per row r and group g (ng = ceil(cols / 32)):
 *     isum_g = the exact integer sum over the group's columns of w * q (int32: |isum| <= 32 x
 *              127 x 128, exact in a float too)
 *     acc    = fmaf((float)isum_g, dscale_g, acc) for g = 0, 1, .., ng - 1 in order, acc from +0
 *     dscale_g = d[g] (Q_I8) or wscale(g) * d[g] (one float product)
 *     y = acc * s[r] (Q_I8) or acc.
 *   wscale: Q_I4 s[r][g/2] (int4 values nibble - 8), Q_MXFP4 2^(e-128) on the doubled
 *     integers {0,1,2,3,4,6,8,12}.
 * How a kernel forms isum_g (vpdpbusd lanes and a horizontal sum, a tile product, columns or
 * rows in the lanes) is free: the sum is exact. Only the ng FMAs round, one per group, in group
 * order: kern_idot_ref and kern_amx_ref write it in plain C; why one FMA per group and not per
 * 4 or 8 columns: kern-grp.c. Layouts the twins read:
 *   Q_I8: q in natural column order. Q_I4 and Q_MXFP4 (nibble-packed, low nibble = even
 *     column): per pair p of groups (64 columns) 64 bytes, the 32 even columns of the pair then
 *     its 32 odd columns, so one 32-byte weight load gives low nibbles matching the first half
 *     and high nibbles matching the second; lane j < 4 of a pair's 8 dword sums is group 2p,
 *     lane j >= 4 group 2p+1.
 */
#pragma once
#include "quant.h"

/* Rows [r0, r1) of y = W x, exact-float numerics. */
typedef void (*kern_rows_fn)(const qmat *m, const float *x, float *y, int r0, int r1);
/* IDOT activations of one column (layout above). np = pairs of 32-column groups. */
typedef struct kern_act {
    int8_t *q;     /* Q_I8: [2*np][32] natural order; nibble types: [np][64] pair layout     */
    int8_t *q2;    /* nibble types: [(np+1)/2][128] quad layout for the AVX-512 twins: per two
                      pairs p, p+1 the 32 even columns of p, of p+1, then the odd ones of p, p+1 */
    float *d;      /* [2*np] scale per group (0 for groups past cols)                       */
    float *d8;     /* nibble types: [np][8] lane scales, d[2p] in lanes 0-3, d[2p+1] in lanes
                      4-7; 0 past the last pair; not written for Q_I8 (its kernels read d)   */
    int32_t *nsxo; /* nibble types: [np][8] -o * (sum of q over lane j's columns) of each pair,
                      o = 8 (Q_I4) or 12 (Q_MXFP4), the twins use unsigned codes w + o; 0 past
                      the last pair; not written for Q_I8 */
    float *cg;     /* Q_I8: [2*np] -128 * (sum of q over group g) as a float (exact: |.| <=
                      520192), the correction of the AVX-512 twin's unsigned codes w ^ 0x80 =
                      w + 128, added to each group's sum after the reduction; 0 past the last
                      group; not written for nibble types */
} kern_act;

/* Bytes of one column's activation buffer; kern_act_make carves it (buf 32-byte aligned). */
size_t kern_act_bytes(int cols);
void   kern_act_make(int type, const float *x, int cols, void *buf, kern_act *a);
/* The quantizer of kern_act_make: x[cols] -> int8 codes q[ng][32] in natural column order and
 * scales d[ng] (groups past cols: codes untouched, d 0; a non-finite x: d NaN, codes
 * untouched). The AVX-512 twin gives the same bytes and floats (the same IEEE operations). */
void kern_act_quant_ref(const float *x, int cols, int ng, int8_t *q, float *d);
void kern_act_quant_avx512(const float *x, int cols, int ng, int8_t *q, float *d);
/* The rest of kern_act_make, after the quantizer wrote the natural-order codes (Q_I8: q; nibble
 * types: q2) and d of np pairs: Q_I8 cg; nibble types d8, nsxo, the pair layout q and the quad
 * layout q2 (in place). The AVX-512 twin writes the same bytes. */
void kern_act_layout_ref(int type, int np, kern_act *a);
void kern_act_layout_avx512(int type, int np, kern_act *a);

/* Rows [r0, r1) of y = W x on IDOT activations. Not for Q_F32. */
typedef void (*kern_idot_fn)(const qmat *m, const kern_act *a, float *y, int r0, int r1);

void kern_rows_ref(const qmat *m, const float *x, float *y, int r0, int r1);
/* The exact-float int4 row's columns [c0, n) past its whole 64-column scale groups (c0 a
 * multiple of 64), added to sum: per scale group the products in column order, then
 * sum += part * scale (two roundings). The lane order's tail at every level (kern.c). */
float kern_i4_tail(const uint8_t *w, const float *s, const float *x, int c0, int n, float sum);
void  kern_idot_ref(const qmat *m, const kern_act *a, float *y, int r0, int r1);
/* Columns the AVX2 matmul decodes each weight block for at once. */
#define KERN_NC 4

/* AVX2+FMA twins (kern-avx2.c); call only when kern_cpu_avx2() is true.
 * kern_idot_nc_avx2: KERN_NC columns a[KERN_NC] -> y[c][rows], each weight row decoded once;
 * column c is bit-identical to kern_idot_avx2 on a[c] alone. */
void kern_rows_avx2(const qmat *m, const float *x, float *y, int r0, int r1);
void kern_idot_avx2(const qmat *m, const kern_act *a, float *y, int r0, int r1);
void kern_idot_nc_avx2(const qmat *m, const kern_act *a, float *const *y, int r0, int r1);
/* The same with AVX-VNNI integer dots (vpdpbusd); call only when kern_cpu_vnni() is true. */
void kern_idot_vnni(const qmat *m, const kern_act *a, float *y, int r0, int r1);
void kern_idot_nc_vnni(const qmat *m, const kern_act *a, float *const *y, int r0, int r1);
int  kern_cpu_vnni(void);
int  kern_cpu_avx2(void);
int  kern_cpu_avx512(void);

/* Columns the AVX-512 matmul decodes each weight load for at once. */
#define KERN_NC512 8
/* AVX-512 VNNI twin (kern-avx512.c); call only when kern_cpu_avx512() is true. nc (1 ..
 * KERN_NC512) columns a[nc] -> y[c][rows]; column c is bit-identical to the scalar reference on
 * a[c] alone, for every nc. */
void kern_idot_avx512(const qmat *m, const kern_act *a, int nc, float *const *y, int r0, int r1);
/* 1 when this build has the AVX-512 twins (x86-64, a compiler that knows the intrinsics). */
#if defined(__x86_64__) && !(defined(__clang__) && __clang_major__ < 16)
#define KERN_BUILD_AVX512 1
#else
#define KERN_BUILD_AVX512 0
#endif

/* 1 when this build has the AMX tile kernels for the hardware (the emulated ones need only
 * KERN_BUILD_AVX512): a compiler with the AMX intrinsics. */
#if KERN_BUILD_AVX512 &&                                                                                     \
    ((defined(__clang__) && __clang_major__ >= 16) || (!defined(__clang__) && __GNUC__ >= 11))
#define KERN_BUILD_AMX 1
#else
#define KERN_BUILD_AMX 0
#endif
/* AMX-INT8 matmul of n >= 2 columns x[n][cols] -> y[n][rows] in the group order (kern-amx.c).
 * kern_amx_matmul runs the tile
 * kernel of the selected implementation: the hardware (_hw; only after kern_set_isa gave
 * KERN_AMX, which requested the tile permission) or the emulation (_emu, K3_AMX_EMU=1).
 * kern_amx_ref is the group order in plain C from float columns; every kernel matches it bit for
 * bit. */
void kern_amx_matmul(const qmat *m, const float *x, int n, float *y);
void kern_amx_matmul_hw(const qmat *m, const float *x, int n, float *y);
void kern_amx_matmul_emu(const qmat *m, const float *x, int n, float *y);
/* The same kernel with every tile instruction a no-op (kern-amx-notile.c): meaningless results in
 * the time of the work around the tiles (k3-bench amx, on any CPU with the AVX-512 level). */
void kern_amx_matmul_notile(const qmat *m, const float *x, int n, float *y);
void kern_amx_ref(const qmat *m, const float *x, int n, float *y);
/* The wide matmul on AVX-512 VNNI (kern-grp.c: columns in the lanes): kern_amx_ref's bits. */
void kern_grp_matmul(const qmat *m, const float *x, int n, float *y);
/* The activations of one wide matmul (kern-amx.c, kern-grp.c): n columns quantized by the one
 * quantizer, in the VNNI B layout of 16-column tiles. */
typedef struct kern_tile_act {
    int      ng, ntile;
    int8_t  *b;  /* [ntile][ng][8][64]: row kq = codes 4kq..4kq+3 of the group, per column   */
    float   *dt; /* [ntile][ng][16] d[g] of each column; 0 past n (and its codes 0)         */
    int32_t *cs; /* [ntile][ng][16] -128 x the group's code sum per column (NULL: not asked) */
} kern_tile_act;
/* Fill a from x[n][cols] (sums: also cs); 0 when out of memory (nothing left to free). AVX-512
 * level only. kern_tile_act_free releases it. */
int  kern_tile_act_make(const float *x, int cols, int n, int sums, kern_tile_act *a);
void kern_tile_act_free(kern_tile_act *a);
/* Columns t < nt of a 16 x 16 tile's results fb (row i, column t at fb[i * 16 + t]; rows i < rb)
 * to y + t * rows (a column's rows are contiguous in y). AVX-512 level only (kern-grp.c). */
void kern_tile_store(const float *fb, int rb, int nt, float *y, int rows);
/* One int4 or MXFP4 row (nbytes packed bytes, low nibble = even column) as bytes: the integer
 * weight of each of cols columns + bias (MXFP4: the doubled e2m1 value), then bias up to kpad
 * (whole groups of 32, >= cols). Never reads past the row's nbytes. AVX-512 level only. */
void kern_unpack_row_avx512(const uint8_t *w, size_t nbytes, int type, int cols, int kpad, int bias,
                            uint8_t *out);
/* 1 when K3_AMX_EMU=1 (a knob, kern_knobs_env): the AMX level runs the emulated tile kernels, and counts as
 * present on a CPU with the AVX-512 level (tests of the dispatch on machines without AMX). */
int kern_amx_emulated(void);
/* Ask the kernel for the AMX tile state once per process (Linux: arch_prctl(
 * ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); 1 when granted, else 0 and why (when not NULL) says
 * what refused it. K3_AMX_DENY=1 makes it a refusal (a test hook for the fallback path). */
int kern_amx_permission(char *why, size_t n);
/* The integer weight of column c of row r, and the weight scale of group g (kern.c; the scalar
 * twins' decoding, shared with kern_amx_ref). */
int   kern_idot_weight(const qmat *m, int r, int c);
float kern_idot_wscale(const qmat *m, int r, int g);

/* How far ahead (bytes) the AVX2 IDOT row kernels prefetch the weight stream: K3_PREFETCH,
 * a knob (kern_knobs_env), default KERN_PREFETCH; 0 turns it off. A weight row is only a few KiB, so without
 * it the core waits on DRAM at every row start (the hardware prefetcher stops at 4 KiB pages and
 * restarts slowly); with it the stream runs a few rows ahead. See BENCHMARKS.md. */
#define KERN_PREFETCH 4096
int kern_prefetch_bytes(void);
/* K blocking of the AVX-512 matmul's row tiles (kern-avx512.c; the rows past its 16-row blocks):
 * double steps (64 weight bytes of a row each) per K block, K3_KBLOCK, a knob, default
 * KERN_KBLOCK; 0 turns it off (one pass per row, the layout before). A benchmark knob: every
 * setting gives the same bits. */
#define KERN_KBLOCK 16
int kern_kblock_steps(void);
/* How far ahead the matvec (nc == 1; AVX-512 and the AVX2 row kernels) prefetches its weight
 * stream: K3_MV_AHEAD tiles of 4 rows, a knob, default KERN_MV_AHEAD; the next tile is in flight
 * while this one computes (the rows of a tile are contiguous: four streams one row apart, which
 * a fixed byte distance of a few KiB mostly spends on the tile itself; each 64 bytes of a row ask
 * for the next four lines of the tile that far ahead, in address order). 0: the byte distance of
 * kern_prefetch_bytes() along each row, as before. Every setting gives the same bits.
 * kern_set_mv_ahead overrides it (tests). */
#define KERN_MV_AHEAD 1
int  kern_mv_ahead(void);
void kern_set_mv_ahead(int tiles);
/* How the matvec (AVX-512 and AVX2 row kernels) forms its 4-row tiles: K3_MV_SPLIT, a knob,
 * default KERN_MV_SPLIT (0): four contiguous rows, the next tile's bytes prefetched in address
 * order along the tile (kern_mv_ahead() tiles ahead), so the rows come as one linear stream;
 * 1: tile i takes row i of each quarter of the thread's rows (four long linear streams; a tile
 * ahead is then one row ahead in each stream, at most KERN_MV_SPLIT_PF bytes). On the Zen 4 of
 * BENCHMARKS.md (issue 39) the contiguous tiles read 1.2-1.4x faster from DRAM on one thread.
 * Every setting gives the same bits. kern_set_mv_split overrides it (tests). */
#define KERN_MV_SPLIT 0
int  kern_mv_split(void);
void kern_set_mv_split(int on);
/* A split matvec's prefetch step along each of its streams: one row, at most this many bytes
 * (kern-avx512.c measured it; the AVX2 rows use it too). */
#define KERN_MV_SPLIT_PF 1536
/* The fewest columns kern.c gives kern_grp_matmul at the avx512 level (fewer run the row tiles of
 * kern-avx512.c, the same bits): below, its 16-column tiles are partly empty lanes and the
 * block's weight copy is spread over too few columns (BENCHMARKS.md, "One rounding order").
 * Q_I8: kern-avx512.c's 16-row kernel (rows in the lanes) beats it up to 12 columns (8 + 4) and
 * loses at 14 (BENCHMARKS.md, "Batched decode after the one order"). */
#define KERN_GRP_MIN(type) ((type) == Q_I8 ? 13 : 16)
/* Rows to threads (kern.c run): K3_ROWSPLIT=1 each thread takes the next free block of rows
 * (matvec blocks of about KERN_MV_BLOCK weight bytes); 0 (default: no measured gain yet, see
 * BENCHMARKS.md) thread ith takes the ith fixed share. A knob; kern_set_rows_dynamic
 * overrides it (tests). Results do not depend on it. */
#define KERN_MV_BLOCK (128u << 10)
int  kern_rows_dynamic(void);
void kern_set_rows_dynamic(int on);

/* 2^(e-128) exactly (subnormal for e < 2), the scale of the doubled MXFP4 integers. */
static inline float kern_e8m0_half(uint8_t e) {
    uint32_t u = e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e;
    float    f;
    memcpy(&f, &u, 4);
    return f;
}

/* The weight scales of row r of an int4 or MXFP4 matrix for the IDOT groups 0..ng-1 into ws[ng]
 * (kern_idot_wscale for every g, the type tested once: the AMX-order kernels' per-block setup). */
static inline void kern_row_wscales(const qmat *m, int r, int ng, float *ws) {
    if (m->type == Q_I4) {
        const float *s = m->s + (size_t)r * ((m->cols + Q_I4_GROUP - 1) / Q_I4_GROUP);
        for (int g = 0; g < ng; g++)
            ws[g] = s[g / 2];
    } else {
        const uint8_t *e = m->e + (size_t)r * (m->cols / Q_MXFP4_GROUP);
        for (int g = 0; g < ng; g++)
            ws[g] = kern_e8m0_half(e[g]);
    }
}

/* Doubled e2m1 values by nibble (sign bit 3), exact int8. */
extern const int8_t kern_mxfp4_i8[16];
#define KERN_MXFP4_OFF 12 /* -12 <= doubled value: value + 12 is an unsigned code 0..24 */
