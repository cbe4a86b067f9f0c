/* kern-grp.c: the wide IDOT matmul on AVX-512 VNNI (16 columns in the lanes), for CPUs without
 * AMX: the group order of kern-impl.h, as every kernel computes it.
 *
 * DESIGN
 * - Why one rounding per group of 32: with one float convert and FMA per vpdpbusd (64
 *   multiply-adds), as an order rounding per 4 or 8 columns needs, the float work bounds the
 *   AVX-512 matmul (about a quarter of the core's vpdpbusd peak, BENCHMARKS.md). Summing a
 *   whole group in int32 first (exact), then one convert and one FMA per (row, column, group),
 *   is eight vpdpbusd per FMA. Its bits are kern_amx_ref's (tests/test-amx: bit for bit), as are
 *   the AMX tiles' and every row kernel's (tests/test-kern: every level and column count), so
 *   kern.c runs it for products of KERN_GRP_MIN(type) or more columns by default.
 * - Layout (the transpose of the row kernels'): a register holds 16 columns of one weight
 *   row. For a block of 16 rows, a tile of 16 columns and group g: B row kq (kq = 0..7) holds the
 *   activation codes 4kq..4kq+3 of the group for each column (the VNNI B layout of kern-amx.c);
 *   row i's weight dword kq, stored as unsigned codes w + 128, is broadcast. Over kq,
 *   C_i += vpdpbusd(broadcast(w_i,kq + 128), B_kq) sums (w + 128) q = w q + 128 sum(q) per
 *   column; C_i starts at -128 x the group's code sum of each column (made with the activations,
 *   once per call: kern_tile_act_make, shared with kern-amx.c), so it ends as the exact group sum. |C| <= 255
 * x 127 x 32: no overflow.
 * - Weights: each block of 16 rows is copied once, as w + 128, into a per-thread buffer that
 *   every column tile then reads (int8: an XOR; int4 and MXFP4: the nibbles' integer weights,
 *   MXFP4 as the doubled e2m1 values); groups past K and rows past the matrix are 128 (w = 0).
 *   Block b + 1 is copied into a second buffer while block b's tiles run, a group of a few rows
 *   after each of their groups: its loads, shuffles and stores then use the pipes vpdpbusd leaves
 *   idle (copied apart, before the tiles, it cost ~10 % of a 32-column product on Zen 4).
 * - Rows run in two halves of 8 per column tile (8 accumulators, 8 group sums, 8 B rows: 24
 *   registers), each over every group in order, so each row's FMAs are in group order.
 * - MXFP4's weight scale is 2^(e-128), so ws x d is d with e - 128 added to its exponent: an
 *   integer add instead of the float multiply (which shares the FMA pipes with vpdpbusd on Zen 4:
 *   +7 % there), taken per (block, column tile) when every d of the tile is normal and every
 *   product a normal float, i.e. exactly the multiply's result; otherwise the multiply.
 * - Threads take whole blocks of 16 rows, so a row's arithmetic never depends on the split.
 * - A tile's results go to y one column at a time (a gathered vector of 16 rows: y holds a
 *   column's rows contiguously; scalar stores row by row, 4 x rows bytes apart, cost ~10 %).
 */
#include "kern-impl.h"

#include <omp.h>
#include <stdlib.h>

#if KERN_BUILD_AVX512
#include <immintrin.h>

#define Z __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")))

enum { GR = 16, GK = 32, GN = 16 }; /* rows of a block, K per group, columns per tile */

Z int kern_tile_act_make(const float *x, int cols, int n, int sums, kern_tile_act *a) {
    const int    ng = (cols + GK - 1) / GK, ntile = (n + GN - 1) / GN;
    const size_t nv = (size_t)ntile * ng * 16;
    int8_t      *q  = malloc((size_t)ng * GK);
    float       *d  = malloc((size_t)ng * sizeof *d);
    a->ng = ng, a->ntile = ntile;
    a->b  = k3_aligned_alloc(64, nv * 32);
    a->dt = k3_aligned_alloc(64, nv * sizeof(float));
    a->cs = sums ? k3_aligned_alloc(64, nv * sizeof(int32_t)) : NULL;
    if (!q || !d || !a->b || !a->dt || (sums && !a->cs)) {
        free(q), free(d), kern_tile_act_free(a);
        return 0;
    }
    memset(a->b, 0, nv * 32);
    memset(a->dt, 0, nv * sizeof(float));
    if (sums)
        memset(a->cs, 0, nv * sizeof(int32_t));
    for (int t = 0; t < n; t++) {
        memset(q, 0, (size_t)ng * GK);
        kern_act_quant_avx512(x + (size_t)t * cols, cols, ng, q, d);
        const int j = t / GN, tt = t % GN;
        for (int g = 0; g < ng; g++) {
            const size_t v  = ((size_t)j * ng + g) * 16 + tt;
            int8_t      *bt = a->b + ((size_t)j * ng + g) * 512;
            for (int kq = 0; kq < GK / 4; kq++)
                memcpy(bt + kq * 64 + tt * 4, q + g * GK + kq * 4, 4);
            a->dt[v] = d[g];
            if (sums) {
                int32_t sum = 0;
                for (int k = 0; k < GK; k++)
                    sum += q[g * GK + k];
                a->cs[v] = -128 * sum;
            }
        }
    }
    free(q);
    free(d);
    return 1;
}

void kern_tile_act_free(kern_tile_act *a) {
    free(a->b), free(a->dt), free(a->cs);
    a->b = NULL, a->dt = NULL, a->cs = NULL;
}

/* The next block's unpacking runs between the current block's groups, where its loads, shuffles
 * and stores take pipes the dot products leave idle (done apart, before the block's tiles, it
 * cost ~10 % of a 32-column product on Zen 4): each half tile unpacks group g of a few of the
 * next block's rows right after its own group g. */
typedef struct {
    const uint8_t *src;   /* its first row's int8 codes or packed nibbles      */
    size_t         rstep; /* bytes from one source row to the next              */
    uint8_t       *dst;   /* its first row in the block buffer (rows kpad apart) */
    int            rows;  /* rows to unpack (0: none)                           */
} grp_unpack;

/* The table of unpack32 for type (int8: unused): each nibble's integer weight + 128. */
Z static inline __m256i unpack_lut(int type) {
    const __m128i lut16 = type == Q_MXFP4
                              ? _mm_loadu_si128((const __m128i *)(const void *)kern_mxfp4_i8)
                              : _mm_setr_epi8(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_broadcastsi128_si256(_mm_add_epi8(lut16, _mm_set1_epi8((char)0x80)));
}

/* Group g of one row to bytes w + 128 at o + 32 g (int4 / MXFP4: kern_unpack_row_avx512's bytes).
 * Whole loads while the group is inside the row; a last partial group masked (never read past
 * the row; columns past it w = 0). */
Z static inline void unpack32(const uint8_t *w, int type, int cols, int g, __m256i lut, uint8_t *o) {
    const int       c = g * GK, live = cols - c < GK ? cols - c : GK, nb = (live + 1) / 2;
    const __m256i   flip = _mm256_set1_epi8((char)0x80), m4 = _mm256_set1_epi16(0x0F);
    const __mmask32 kl = live == GK ? ~0u : (1u << live) - 1;
    __m256i         v;
    if (type == Q_I8) {
        v = _mm256_xor_si256(live == GK ? _mm256_loadu_si256((const __m256i *)(const void *)(w + c))
                                        : _mm256_maskz_loadu_epi8(kl, w + c),
                             flip);
    } else {
        v = _mm256_cvtepu8_epi16(live == GK ? _mm_loadu_si128((const __m128i *)(const void *)(w + c / 2))
                                            : _mm_maskz_loadu_epi8((__mmask16)((1u << nb) - 1), w + c / 2));
        v = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_slli_epi16(_mm256_srli_epi16(v, 4), 8));
        v = _mm256_mask_mov_epi8(flip, kl, _mm256_shuffle_epi8(lut, v)); /* word k = byte k: low, high */
    }
    _mm256_storeu_si256((__m256i *)(void *)(o + c), v);
}

/* Rows 8h .. 8h+7 of a block (wq: 16 rows of kpad unsigned codes) for one column tile (bt, dt,
 * cs of its groups): acc[i] over every group in order. ws: row i's weight scale of group g
 * (nibble types; NULL for int8). wk (MXFP4, when not NULL): the scale as an exponent step added
 * to d's bits, the product ws x d without the multiply (the caller checked that it is exact).
 * After each of the gw whole groups g, group g of u's rows (the next block's) is unpacked. */
Z static void half_tile(const uint8_t *wq, int kpad, const float *ws, const int32_t *wk, int ng,
                        const int8_t *bt, const float *dt, const int32_t *cs, int h, __m512 acc[8],
                        const grp_unpack *u, int type, int gw, __m256i lut) {
    const uint8_t *row = wq + (size_t)8 * h * kpad, *usrc = u->src;
    uint8_t       *udst  = u->dst; /* in locals: the byte stores below may alias *u */
    const size_t   ustep = u->rstep;
    const int      urows = u->rows;
    __m512         a[8]; /* not acc: a store through acc each group could alias the loads */
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        a[i] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m512i b[8], c[8];
#pragma GCC unroll 8
        for (int kq = 0; kq < 8; kq++)
            b[kq] = _mm512_load_si512(bt + (size_t)g * 512 + kq * 64);
        const __m512i c0 = _mm512_load_si512(cs + (size_t)g * 16);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            c[i] = c0;
#pragma GCC unroll 8
        for (int kq = 0; kq < 8; kq++)
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                int32_t wd;
                memcpy(&wd, row + (size_t)i * kpad + (size_t)g * GK + 4 * kq, 4);
                c[i] = _mm512_dpbusd_epi32(c[i], _mm512_set1_epi32(wd), b[kq]);
            }
        if (g < gw) /* the next block's group g (whole groups), between this group's products */
            for (int i = 0; i < urows; i++)
                unpack32(usrc + (size_t)i * ustep, type, gw * GK, g, lut, udst + (size_t)i * kpad);
        const __m512 dv = _mm512_load_ps(dt + (size_t)g * 16);
        if (wk) {
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                const __m512 sc = _mm512_castsi512_ps(
                    _mm512_add_epi32(_mm512_castps_si512(dv), _mm512_set1_epi32(wk[(8 * h + i) * ng + g])));
                a[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c[i]), sc, a[i]);
            }
            continue;
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const __m512 sc = ws ? _mm512_mul_ps(_mm512_set1_ps(ws[(8 * h + i) * ng + g]), dv) : dv;
            a[i]            = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c[i]), sc, a[i]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        acc[i] = a[i];
}

/* kern_row_wscales in vectors of 16 groups (the same floats: a copy for int4, for MXFP4 the bits of
 * kern_e8m0_half); MXFP4 also wk (int4: not touched, may be NULL). */
Z static void row_wscales(const qmat *m, int r, int ng, float *ws, int32_t *wk, int *elo, int *ehi) {
    if (m->type == Q_I4) {
        const int     nsg = (m->cols + Q_I4_GROUP - 1) / Q_I4_GROUP;
        const float  *s   = m->s + (size_t)r * nsg;
        const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        for (int g = 0; g < ng; g += 16) {
            const int    ns = nsg - g / 2 < 8 ? nsg - g / 2 : 8, nw = ng - g < 16 ? ng - g : 16;
            const __m512 v = _mm512_castps256_ps512(
                ns == 8 ? _mm256_loadu_ps(s + g / 2)
                        : _mm256_maskz_loadu_ps((__mmask8)((1u << ns) - 1), s + g / 2));
            const __m512 wv = _mm512_permutexvar_ps(dup, v);
            if (nw == 16) /* plain stores: masked ones are slow on Zen */
                _mm512_storeu_ps(ws + g, wv);
            else
                _mm512_mask_storeu_ps(ws + g, (__mmask16)((1u << nw) - 1), wv);
        }
    } else {
        const uint8_t *e  = m->e + (size_t)r * (m->cols / Q_MXFP4_GROUP);
        __m512i        lo = _mm512_set1_epi32(255), hi = _mm512_setzero_si512(); /* the row's range */
        for (int g = 0; g < ng; g += 16) {
            const int       nw = ng - g < 16 ? ng - g : 16;
            const __mmask16 k  = (__mmask16)((1u << nw) - 1);
            const __m512i   ev = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, e + g));
            const __m512i   nm = _mm512_slli_epi32(_mm512_sub_epi32(ev, _mm512_set1_epi32(1)), 23);
            const __m512i   sb = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), ev); /* e < 2 */
            const __mmask16 ge = _mm512_cmpge_epi32_mask(ev, _mm512_set1_epi32(2));
            const __m512    wv = _mm512_castsi512_ps(_mm512_mask_blend_epi32(ge, sb, nm));
            const __m512i   kv = _mm512_slli_epi32(_mm512_sub_epi32(ev, _mm512_set1_epi32(128)), 23);
            if (nw == 16) { /* plain stores: masked ones are slow on Zen */
                _mm512_storeu_ps(ws + g, wv);
                _mm512_storeu_si512(wk + g, kv);
            } else {
                _mm512_mask_storeu_ps(ws + g, k, wv);
                _mm512_mask_storeu_epi32(wk + g, k, kv);
            }
            lo = _mm512_mask_min_epi32(lo, k, lo, ev);
            hi = _mm512_mask_max_epi32(hi, k, hi, ev);
        }
        const int l = _mm512_reduce_min_epi32(lo), h = _mm512_reduce_max_epi32(hi);
        *elo = l < *elo ? l : *elo;
        *ehi = h > *ehi ? h : *ehi;
    }
}

/* One thread's buffers: two of each, for the block the tiles read and the one being unpacked. */
typedef struct {
    uint8_t *wq[2]; /* [16][kpad] a block's weights + 128, groups past K and rows past the matrix 128 */
    float   *ws[2]; /* nibble types: [16][ng] wscale of row i, group g (int8: NULL)                */
    int32_t *wk[2]; /* MXFP4: [16][ng] (e - 128) << 23 of row i, group g: ws[i][g] as an exponent step
                       (other types: NULL) */
    int    elo[2], ehi[2]; /* MXFP4: the block's exponent range                                */
    float *fb;             /* [16][16] a column tile's results before the transposed write               */
} grp_thread;

/* The exponent range [lo, hi] of d[nv] when every d is a normal float, else lo > hi. */
static void tile_drange(const float *d, int nv, int *lo, int *hi) {
    *lo = 255, *hi = 0;
    for (int v = 0; v < nv; v++) {
        uint32_t u;
        memcpy(&u, d + v, 4);
        const int e = (int)(u >> 23 & 0xff);
        if (e == 0 || e == 255) {
            *lo = 255, *hi = 0;
            return;
        }
        *lo = e < *lo ? e : *lo;
        *hi = e > *hi ? e : *hi;
    }
}

/* Block blk into buffer k of th: its weight scales and pad rows now, its weights by the half
 * tiles (u: from where to where). */
Z static void block_start(const qmat *m, int ng, int blk, grp_thread *th, int k, grp_unpack *u) {
    const int rows = m->rows, cols = m->cols, kpad = ng * GK, r0 = blk * GR,
              rb       = rows - r0 < GR ? rows - r0 : GR;
    const size_t rstep = q_wbytes(m->type, 1, cols);
    th->elo[k] = 255, th->ehi[k] = 0;
    if (m->type != Q_I8)
        for (int i = 0; i < rb; i++)
            row_wscales(m, r0 + i, ng, th->ws[k] + (size_t)i * ng,
                        th->wk[k] ? th->wk[k] + (size_t)i * ng : NULL, &th->elo[k], &th->ehi[k]);
    if (rb < GR) /* rows past the matrix: w = 0 (read by the last half, never written out) */
        memset(th->wq[k] + (size_t)rb * kpad, 0x80, (size_t)(GR - rb) * kpad);
    *u = (grp_unpack){
        .src = (const uint8_t *)m->w + (size_t)r0 * rstep, .rstep = rstep, .dst = th->wq[k], .rows = rb};
}

/* Rows of blocks [b0, b1) of y[n][rows] for every column tile. Block b + 1 is unpacked while
 * block b's tiles run: half tile q of the block's Q unpacks rows [q rb' / Q, (q + 1) rb' / Q) of it. */
Z static void blocks(const qmat *m, const kern_tile_act *x, const int *dlo, const int *dhi, int n, float *y,
                     int b0, int b1, grp_thread *th) {
    const int rows = m->rows, cols = m->cols, ng = x->ng, i8 = m->type == Q_I8, kpad = ng * GK,
              gw      = cols / GK;
    const __m256i lut = unpack_lut(m->type);
    grp_unpack    nx;
    block_start(m, ng, b0, th, 0, &nx); /* the first block before its tiles */
    for (int i = 0; i < nx.rows; i++)
        for (int g = 0; g < ng; g++)
            unpack32(nx.src + (size_t)i * nx.rstep, m->type, cols, g, lut, nx.dst + (size_t)i * kpad);
    for (int blk = b0, k = 0; blk < b1; blk++, k ^= 1) {
        const int r0 = blk * GR, rb = rows - r0 < GR ? rows - r0 : GR, nh = (rb + 7) / 8, nq = x->ntile * nh;
        nx.rows = 0;
        if (blk + 1 < b1)
            block_start(m, ng, blk + 1, th, k ^ 1, &nx);
        const int elo = th->elo[k], ehi = th->ehi[k];
        for (int j = 0; j < x->ntile; j++) {
            const int    nt  = n - j * GN < GN ? n - j * GN : GN;
            const size_t off = (size_t)j * ng;
            /* MXFP4: the exponent step when every d of the tile is normal and every product
             * 2^(e-128) d is a normal float (then exact, as the multiply) */
            const int add = m->type == Q_MXFP4 && dlo[j] <= dhi[j] && elo >= 2 && dlo[j] + elo - 128 >= 1 &&
                            dhi[j] + ehi - 128 <= 254;
            for (int h = 0; h < nh; h++) {
                const int  q = j * nh + h, i0 = q * nx.rows / nq, i1 = (q + 1) * nx.rows / nq;
                grp_unpack part = {.src   = nx.src + (size_t)i0 * nx.rstep,
                                   .rstep = nx.rstep,
                                   .dst   = nx.dst + (size_t)i0 * kpad,
                                   .rows  = i1 - i0};
                __m512     acc[8];
                half_tile(th->wq[k], kpad, i8 ? NULL : th->ws[k], add ? th->wk[k] : NULL, ng,
                          x->b + off * 512, x->dt + off * 16, x->cs + off * 16, h, acc, &part, m->type, gw,
                          lut);
                for (int g = gw; g < ng; g++) /* those rows' last, partial group */
                    for (int i = 0; i < part.rows; i++)
                        unpack32(part.src + (size_t)i * part.rstep, m->type, cols, g, lut,
                                 part.dst + (size_t)i * kpad);
                for (int i = 0; i < 8; i++) {
                    const int r = 8 * h + i;
                    _mm512_storeu_ps(th->fb + r * 16,
                                     i8 && r < rb ? _mm512_mul_ps(acc[i], _mm512_set1_ps(m->s[r0 + r]))
                                                  : acc[i]);
                }
            }
            kern_tile_store(th->fb, rb, nt, y + (size_t)j * GN * rows + r0, rows);
        }
    }
}

/* Columns t < nt of a tile's results (fb[16][16], rows i < rb) to y: one gathered vector per
 * column, as y holds a column's rows contiguously. (Scalar stores row by row, each 4 x rows bytes
 * from the last, cost ~10 % of a 32-column product at 3072 rows.) */
Z void kern_tile_store(const float *fb, int rb, int nt, float *y, int rows) {
    const __m512i tr =
        _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
    const __mmask16 kr = (__mmask16)(rb >= 16 ? 0xFFFF : (1u << rb) - 1);
    for (int t = 0; t < nt; t++) {
        const __m512 v = _mm512_i32gather_ps(tr, fb + t, 4);
        if (rb >= 16)
            _mm512_storeu_ps(y + (size_t)t * rows, v);
        else
            _mm512_mask_storeu_ps(y + (size_t)t * rows, kr, v);
    }
}

void kern_grp_matmul(const qmat *m, const float *x, int n, float *y) {
    K3_ASSERT(m->type == Q_I8 || m->type == Q_I4 || m->type == Q_MXFP4);
    kern_tile_act a;
    const int     made = kern_tile_act_make(x, m->cols, n, 1, &a);
    K3_ASSERT(made); /* a few KiB per column: out of memory here is not recoverable (as in kern.c) */
    const int nb = (m->rows + GR - 1) / GR, ng = a.ng;
    int      *dlo = malloc((size_t)a.ntile * 2 * sizeof(int)), *dhi = dlo + a.ntile;
    K3_ASSERT(dlo);
    for (int j = 0; j < a.ntile; j++) /* MXFP4: each tile's exponent range of d (lo > hi: not all normal) */
        if (m->type == Q_MXFP4)
            tile_drange(a.dt + (size_t)j * ng * 16, ng * 16, &dlo[j], &dhi[j]);
        else
            dlo[j] = 255, dhi[j] = 0;
    const long work = (long)m->rows * m->cols * n;
#pragma omp parallel if (work > K3_PAR_MIN_MATMUL)
    {
        const int  ith = omp_get_thread_num(), nth = omp_get_num_threads();
        const int  b0 = (int)((long)nb * ith / nth), b1 = (int)((long)nb * (ith + 1) / nth);
        grp_thread th = {0};
        for (int k = 0; k < 2; k++) { /* the scale buffers only for the types that read them */
            th.wq[k] = k3_aligned_alloc(64, (size_t)GR * ng * GK);
            th.ws[k] = m->type != Q_I8 ? calloc((size_t)GR * ng, sizeof(float)) : NULL;
            th.wk[k] = m->type == Q_MXFP4 ? calloc((size_t)GR * ng, sizeof(int32_t)) : NULL;
            K3_ASSERT(th.wq[k] && (th.ws[k] || m->type == Q_I8) && (th.wk[k] || m->type != Q_MXFP4));
        }
        th.fb = k3_aligned_alloc(64, GR * 16 * sizeof(float));
        K3_ASSERT(th.fb);
        if (b0 < b1)
            blocks(m, &a, dlo, dhi, n, y, b0, b1, &th);
        for (int k = 0; k < 2; k++)
            free(th.wq[k]), free(th.ws[k]), free(th.wk[k]);
        free(th.fb);
    }
    free(dlo);
    kern_tile_act_free(&a);
}

#else /* no AVX-512 build: never selected (kern_isa_ok says no), the scalar twin stands in */

void kern_grp_matmul(const qmat *m, const float *x, int n, float *y) {
    kern_amx_ref(m, x, n, y);
}

int kern_tile_act_make(const float *x, int cols, int n, int sums, kern_tile_act *a) {
    (void)x, (void)cols, (void)n, (void)sums, (void)a;
    K3_ASSERT(!"AVX-512 kernels not built for this target");
    return 0;
}

void kern_tile_act_free(kern_tile_act *a) {
    (void)a;
}

void kern_tile_store(const float *fb, int rb, int nt, float *y, int rows) {
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < rb; i++)
            y[(size_t)t * rows + i] = fb[i * 16 + t];
}

#endif
