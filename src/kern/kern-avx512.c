/* kern-avx512.c: AVX-512 VNNI twins of the IDOT kernels (the group order of kern-impl.h).
 *
 * DESIGN
 * - One 512-bit weight load is two steps (Q_I8: groups g, g+1; nibble types: pairs p, p+1, four
 *   groups); per (row, column) one vpdpbusd chain gives sixteen exact 4-column lane sums. The
 *   group order needs one sum per group and one FMA per group in group order, so a tile of four
 *   rows reduces its four rows' lane sums together (red4: four unpacks and three adds give, per
 *   128-bit block k, the four rows' sums of its four lanes, exact int32), converts once and
 *   runs the row FMAs four rows wide (one 128-bit accumulator per column, lane i = row i), one
 *   FMA per group in group order: every (row, column) does exactly the scalar reference's
 *   fmaf chain, so every column is bit-identical to it, to the AVX2 twins and to the wide
 *   kernels (kern-grp.c, kern-amx.c), at every column count.
 * - Q_I8 (no vpsignb at 512 bits): the weight byte as an unsigned code w ^ 0x80 = w + 128; the
 *   vpdpbusd chains start from zero, and after the reduction the activation's -128 * group sum
 *   (kern_act.cg, a float) is added to each group's converted sum: every term an integer below
 *   2^24, so the float add is exact and the FMA sees the scalar twin's sum of w q. Against a
 *   -128 * lane-sum vector as the chains' start (kern_act.nsxo, before): one 64-byte activation
 *   load less per double step and 3.5 KiB less of L1 per matvec of 3584 columns (BENCHMARKS.md,
 *   "Decode matvec compute ceiling": one thread from DRAM 1.2x, from the caches 1.06x).
 *   The code is formed once per weight load and shared by every column.
 * - Nibble types read the activations in the quad layout (kern_act.q2): per two pairs the even
 *   columns of both, then the odd columns of both, so the low/high nibble codes of one 64-byte
 *   weight load meet their activations with plain loads.
 * - Matmul of a few columns (batched decode; kern.c passes up to KERN_NC512 per call): whole
 *   blocks of 16 rows run with the rows in the lanes (i8_rows16, nib_rows16): per group (int8)
 *   or pair of groups (nibble types) the 16 rows' 32 bytes are transposed once (rows16_load), so
 *   dword kq of all 16 rows sits in one register, and each column's group sum is a chain of
 *   vpdpbusd against its broadcast activation dwords: no horizontal reduction per column (the
 *   row tiles below need seven shuffles per four rows, column and double step), and the
 *   transpose is shared by the columns. The next block of 16 rows is prefetched to L2 in address
 *   order while this one runs (per-row lines at the same offset, or to L1: half the DRAM rate).
 *   Rows past the last whole block, MXFP4 rows under 128 columns (the exponent gathers read 4
 *   bytes) and matvecs run the row tiles: up to CB columns per decoded weight load (register
 *   blocking: each column does its own steps, in its own order, so column t does not depend on
 *   how many ran beside it). nc is a compile-time constant in each instantiation (one function
 *   per count) so the accumulators stay in registers. BENCHMARKS.md, "Batched decode after the
 *   one order", has the figures. At one column nothing shares the transpose, which costs more
 *   shuffles per weight byte than the row tiles' reduction: i8_rows16 as the matvec read 0.93x
 *   from the caches and 0.79-0.87x from DRAM ("Decode matvec compute ceiling"), so it is not.
 * - Matvec (nc == 1; decode: a DRAM stream): each row of a 4-row tile prefetches the same bytes of
 *   the row kern_mv_ahead() tiles below it, and the tile start asks for that tile's scale lines,
 *   so the next tile is in flight while this one computes (a byte distance of a few KiB would
 *   mostly land inside the current tile, whose four rows are contiguous). MXFP4 lane scales are
 *   vscalefps(d, e - 128), the exact product with 2^(e-128) without decoding it. On the Zen 4
 *   of BENCHMARKS.md ("Decode matvec compute ceiling") this prefetch is a trade: from the caches
 *   prefetcht1 reads up to 1.15x (the next tile waits in L2, not L1) but from DRAM 0.83-0.87x;
 *   a shorter or bursty lead, every other line, or per-row distances all read 0.5-0.6x from
 *   DRAM. What is left of the int8 compute ceiling (0.83x of the order before, which needed no
 *   reduction) is red4's seven shuffles per four rows and double step.
 * - Row ends (a partial step) use masked loads, which never touch bytes past the row, and a
 *   masked FMA that leaves B alone when only the even step exists.
 * - Compiled for the baseline target with target attributes; reached only after
 *   kern_isa_ok(KERN_AVX512) said yes.
 */
#include "kern-impl.h"

#include <math.h>

#if KERN_BUILD_AVX512
#include <immintrin.h>

#define Z __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")))
#define INLINE __attribute__((always_inline)) inline

/* The 64 weight bytes of double step k of a row (Q_I8 groups 2k, 2k+1; nibble pairs), asking for
 * the bytes pf ahead in the stream: the load at the head of every tile loop. lin (a tile of four
 * contiguous rows, row i of it; else NULL): the stream is the tile's bytes from lin = its first
 * row, four lines per double step, so the next tile's rows arrive in address order. */
Z static INLINE __m512i row_bytes(const void *row, int k, int pf, const void *lin, int i) {
    const uint8_t *p = (const uint8_t *)row + k * 32;
    if (pf)
        __builtin_prefetch(
            (const void *)((lin ? (uintptr_t)lin + (unsigned)(4 * k * 32 + 64 * i) : (uintptr_t)p) +
                           (unsigned)pf),
            0, 3);
    return _mm512_loadu_si512(p);
}

/* The group sums of four rows' lane sums v[0..3] (16 dwords each): lane 4k + i = the sum of
 * dwords 4k..4k+3 of v[i], exact. */
Z static INLINE __m512i red4(const __m512i v[4]) {
    const __m512i t01 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
    const __m512i t23 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
}

/* red4 for lane sums that fit in 14 bits (|v| <= 12192: a nibble step's lane is eight products
 * |w q| <= 12 x 127), in fewer instructions: two rows' lanes packed to int16 (exact: no
 * saturation) and summed in pairs by vpmaddwd (|pair| <= 24384, still an int16), twice. */
Z static INLINE __m512i red4w(const __m512i v[4]) {
    const __m512i one = _mm512_set1_epi16(1);
    const __m512i p01 = _mm512_madd_epi16(_mm512_packs_epi32(v[0], v[1]), one);
    const __m512i p23 = _mm512_madd_epi16(_mm512_packs_epi32(v[2], v[3]), one);
    return _mm512_madd_epi16(_mm512_packs_epi32(p01, p23), one);
}

/* Lane 4k + i = lane 4k of v[i]: four rows' lane scales (equal within a 128-bit block) beside
 * red4's sums. */
Z static INLINE __m512 pick4(const __m512 v[4]) {
    const __m512 t01 = _mm512_unpacklo_ps(v[0], v[1]), t23 = _mm512_unpacklo_ps(v[2], v[3]);
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23)));
}

/* Block k (a constant) of a register as four floats. */
#define BLK(v, k) ((k) ? _mm512_extractf32x4_ps((v), (k)) : _mm512_castps512_ps128(v))

/* Mask of the first n (0..64) bytes. */
static inline __mmask64 bytes_mask(size_t n) {
    return n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
}

/* ---- tiles: RB rows x CB columns ------------------------------------------------------------
 * A tile keeps CB accumulators of RB_MAX rows in registers: each weight load is decoded once for
 * CB columns, each activation load (codes, corrections, lane scales) serves RB rows. Every
 * (row, column) still does exactly its own group-order steps (a one-row tile runs three rows of
 * zeros beside it, never written out). rb and cb are compile-time
 * constants at every call (tile_* are always inlined into one function per shape). */
#define RB_MAX 4
#define CB_I8 4  /* Q_I8: 4 weight codes, per column 4 lane sums                         */
#define CB_NIB 3 /* nibble types: 8 weight codes + 4 scales, per column 4 sums + 4 scales */

/* K blocking (matmul): a tile call covers the whole double steps [k0, k1) of its rows (64 weight
 * bytes per row each); the call with k1 == the row's whole double steps also runs the partial
 * tail and writes y. Between calls acc[c] waits in ab[c] (stored and reloaded: the order is
 * unchanged, only where the lanes wait). */
typedef struct kspan {
    int     k0, k1;
    __m512 *ab;
    int     lin; /* the matvec's contiguous tiles: prefetch along the tile (row_bytes) */
} kspan;

/* acc[c] = 0 at the first K block, else the lanes stored by the previous one */
#define TILE_INIT(acc, cb, ks)                                                                               \
    _Pragma("GCC unroll 4") for (int c = 0; c < (cb); c++) acc[c] =                                          \
        (ks)->k0 ? _mm512_castps512_ps128((ks)->ab[c]) : _mm_setzero_ps()
/* store the lanes for the next K block */
#define TILE_KEEP(acc, cb, ks)                                                                               \
    _Pragma("GCC unroll 4") for (int c = 0; c < (cb); c++)(ks)->ab[c] = _mm512_castps128_ps512(acc[c])

// (kept as written: clang-format 14 aligns a leading #pragma with the declarations after it)
// clang-format off
/* Q_I8 groups g, g+1 (only g when !two) of rb rows (codes wu[i] = w ^ 0x80) for cb columns. */
Z static INLINE void i8_tile_step(const __m512i *wu, const kern_act *a, int rb, int cb, int g, int two,
                                  __m128 acc[CB_I8]) {
#pragma GCC unroll 4
    for (int c = 0; c < cb; c++) {
        const __m512i xq = _mm512_loadu_si512(a[c].q + g * 32);
        __m512i s[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            s[i] = i < rb ? _mm512_dpbusd_epi32(_mm512_setzero_si512(), wu[i], xq) : _mm512_setzero_si512();
        /* blocks 0 + 1 are group g, 2 + 3 group g + 1: the sums of (w + 128) q, then + cg in float
         * (every term an integer below 2^24: exact, so the sum of w q as the scalar twin has it) */
        const __m512i u = red4(s);
        const __m512  f = _mm512_cvtepi32_ps(_mm512_add_epi32(u, _mm512_shuffle_i32x4(u, u, 0xB1)));
        acc[c] = _mm_fmadd_ps(_mm_add_ps(BLK(f, 0), _mm_set1_ps(a[c].cg[g])), _mm_set1_ps(a[c].d[g]), acc[c]);
        if (two) {
            const __m128 f1 = _mm_add_ps(BLK(f, 2), _mm_set1_ps(a[c].cg[g + 1]));
            acc[c]          = _mm_fmadd_ps(f1, _mm_set1_ps(a[c].d[g + 1]), acc[c]);
        }
    }
}
// clang-format on

/* Rows r, r + rs, .., r + (rb-1) rs of a Q_I8 matrix for cb columns a[cb] -> y[c][row]. */
Z static INLINE void i8_tile(const qmat *m, const kern_act *a, int rb, int cb, float *const *y, int r, int rs,
                             int pf, const kspan *ks) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const int     n = m->cols, ng = (n + 31) / 32;
    const int8_t *w[RB_MAX];
    __m128        acc[CB_I8];
    __m512i       wu[RB_MAX];
#pragma GCC unroll 4
    for (int i = 0; i < rb; i++)
        w[i] = (const int8_t *)m->w + (size_t)(r + i * rs) * n;
    TILE_INIT(acc, cb, ks);
    int g = 2 * ks->k0;
    for (; g < 2 * ks->k1; g += 2) {
#pragma GCC unroll 4
        for (int i = 0; i < rb; i++)
            wu[i] = _mm512_xor_si512(row_bytes(w[i], g, pf, ks->lin ? w[0] : NULL, i), flip);
        i8_tile_step(wu, a, rb, cb, g, 1, acc);
    }
    if (ks->k1 < n / 64) {
        TILE_KEEP(acc, cb, ks);
        return;
    }
    if (g < ng) { /* the last one or two groups, the last maybe partial */
        const __mmask64 k = bytes_mask((size_t)(n - g * 32));
#pragma GCC unroll 4
        for (int i = 0; i < rb; i++)
            wu[i] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(k, w[i] + g * 32), flip);
        i8_tile_step(wu, a, rb, cb, g, g + 1 < ng, acc);
    }
#pragma GCC unroll 4
    for (int c = 0; c < cb; c++) {
        float o[4];
        _mm_storeu_ps(o, acc[c]);
#pragma GCC unroll 4
        for (int i = 0; i < rb; i++)
            y[c][r + i * rs] = o[i] * m->s[r + i * rs];
    }
}

/* Lanes 0-7 = x, 8-15 = y. */
Z static inline __m512 two8(float x, float y) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(x)), _mm256_set1_ps(y), 1);
}

/* e - 128 of the 4 exponents e[0..cnt) (e = 0 past cnt) spread 4 lanes each, as floats: the
 * MXFP4 lane scale is then vscalefps(d, e - 128) = d * 2^(e-128), one rounding of the exact
 * product, the same bits as the product with the exact kern_e8m0_half(e) (a power of two, a
 * subnormal one for e < 2), and five instructions instead of nine. cnt is a constant (inlined). */
Z static INLINE __m512 e8m0_exp16(const uint8_t *e, int cnt) {
    uint32_t u = 0;
    memcpy(&u, e, (size_t)cnt);
    /* lane j: byte j / 4 of u (vpshufb index j / 4 in its low byte), zero extended (-1: zero) */
#define B(k) (int)(0xFFFFFF00u | (k))
    const __m512i idx = _mm512_setr_epi32(B(0), B(0), B(0), B(0), B(1), B(1), B(1), B(1), B(2), B(2), B(2),
                                          B(2), B(3), B(3), B(3), B(3));
#undef B
    const __m512i v = _mm512_shuffle_epi8(_mm512_set1_epi32((int)u), idx);
    return _mm512_sub_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(128.0f));
}

/* e - 128 of the 16 exponents e[0..16) as floats in exponent order: four double steps of a row,
 * spread to each step's lanes by e8m0_step (one vpermps a step instead of e8m0_exp16's five
 * instructions; the same floats). */
Z static INLINE __m512 e8m0_exp64(const uint8_t *e) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)e));
    return _mm512_sub_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(128.0f));
}

/* The four rows' exponents of e8m0_exp64 (ev[i]: row i's 16, four double steps) transposed for
 * nib_tile_step: E[j] lane 4k + i = exponent 4j + k of row i (block k: group 4j + k, lane i: row
 * i), in two rounds of two-source permutes (eight instructions for four double steps). */
Z static INLINE void e8m0_rows4(const __m512 ev[4], __m512 E[4]) {
    /* round 1: rows 0, 1 (X) and 2, 3 (Y) of double steps 2a, 2a + 1: lane 8jj + 2k + i' */
    static const int32_t i1[2][16] = {{0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23},
                                      {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}};
    /* round 2: lane 4k + i of double step 2a + jj from X (i < 2) or Y */
    static const int32_t i2[2][16] = {{0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23},
                                      {8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31}};
#pragma GCC unroll 2
    for (int a = 0; a < 2; a++) {
        const __m512i k1 = _mm512_loadu_si512(i1[a]);
        const __m512  X  = _mm512_permutex2var_ps(ev[0], k1, ev[1]),
                     Y   = _mm512_permutex2var_ps(ev[2], k1, ev[3]);
#pragma GCC unroll 2
        for (int jj = 0; jj < 2; jj++)
            E[2 * a + jj] = _mm512_permutex2var_ps(X, _mm512_loadu_si512(i2[jj]), Y);
    }
}

/* Four rows' Q_I4 scales of pairs p, p + 1 (s[i] row i's scales) for nib_tile_step: lane 4k + i
 * = s[i][p + k / 2] (groups 2p .. 2p + 3 of row i). */
Z static INLINE __m512 i4_rows4(const float *const s[4], int p) {
    /* rows 0, 1 (v01) and 2, 3 (v23): lanes 2i', 2i' + 1 = s[i][p], s[i][p + 1] (64-bit loads:
     * the scales are 4-byte aligned only), then one two-source permute to lane 4k + i */
    __m128i v[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        v[i] = _mm_loadl_epi64((const void *)(s[i] + p));
    const __m128 v01 = _mm_castsi128_ps(_mm_unpacklo_epi64(v[0], v[1]));
    const __m128 v23 = _mm_castsi128_ps(_mm_unpacklo_epi64(v[2], v[3]));
    return _mm512_permutex2var_ps(_mm512_castps128_ps512(v01),
                                  _mm512_setr_epi32(0, 2, 16, 18, 0, 2, 16, 18, 1, 3, 17, 19, 1, 3, 17, 19),
                                  _mm512_castps128_ps512(v23));
}

// (kept as written: clang-format 14 aligns a leading #pragma with the declarations after it)
// clang-format off
/* Pairs p, p+1 of rb rows (nibble codes lo[i], hi[i]; weight scales wv, lane 4k + i = row i's of
 * group 2p + k: Q_I4 the scale, Q_MXFP4 (mx) the exponent e - 128) for cb columns: groups 2p ..
 * 2p + live - 1. */
Z static INLINE void nib_tile_step(const __m512i *lo, const __m512i *hi, __m512 wv, const kern_act *a, int mx,
                                   int rb, int cb, int p, int live, __m128 acc[CB_NIB]) {
#pragma GCC unroll 4
    for (int c = 0; c < cb; c++) {
        const __m512i ns = _mm512_loadu_si512(a[c].nsxo + p * 8);
        const __m512i xe = _mm512_loadu_si512(a[c].q2 + p * 64);
        const __m512i xo = _mm512_loadu_si512(a[c].q2 + p * 64 + 64);
        const __m512  dd = _mm512_loadu_ps(a[c].d8 + p * 8);
        __m512i       s[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            s[i] = i < rb ? _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ns, lo[i], xe), hi[i], xo)
                          : _mm512_setzero_si512();
        /* block k is group 2p + k; dd holds d of group 2p + k in block k: one product per lane,
         * as in the scalar twin */
        const __m512 f  = _mm512_cvtepi32_ps(red4w(s));
        const __m512 sc = mx ? _mm512_scalef_ps(dd, wv) : _mm512_mul_ps(wv, dd);
        acc[c]         = _mm_fmadd_ps(BLK(f, 0), BLK(sc, 0), acc[c]);
        if (live > 1)
            acc[c] = _mm_fmadd_ps(BLK(f, 1), BLK(sc, 1), acc[c]);
        if (live > 2)
            acc[c] = _mm_fmadd_ps(BLK(f, 2), BLK(sc, 2), acc[c]);
        if (live > 3)
            acc[c] = _mm_fmadd_ps(BLK(f, 3), BLK(sc, 3), acc[c]);
    }
}
// clang-format on

/* Nibble codes of 64 weight bytes: through lut for MXFP4 (mx), the nibbles themselves for Q_I4. */
Z static INLINE void nib_codes512(__m512i b, __m512i lut, __m512i *lo, __m512i *hi, int mx) {
    const __m512i m4 = _mm512_set1_epi8(15);
    *lo              = _mm512_and_si512(b, m4);
    *hi              = _mm512_and_si512(_mm512_srli_epi16(b, 4), m4);
    if (mx) { /* Q_I4's code w + 8 is the nibble itself: no lookup */
        *lo = _mm512_shuffle_epi8(lut, *lo);
        *hi = _mm512_shuffle_epi8(lut, *hi);
    }
}

/* The weight scales of rb rows for nib_tile_step from per-row lanes: MXFP4 sv[i] (e8m0_exp16),
 * Q_I4 the scales s[i][p] and (two) s[i][p + 1]; rows past rb 0. */
Z static INLINE __m512 rows_pick(const __m512 *sv, int rb, int mx, const float *const *s, int p, int two) {
    __m512 v[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        v[i] = i >= rb ? _mm512_setzero_ps() : mx ? sv[i] : two8(s[i][p], two ? s[i][p + 1] : 0.0f);
    return pick4(v);
}

/* Rows r, r + rs, .. of a Q_I4 (mx = 0) or Q_MXFP4 (mx = 1) matrix for cb columns. */
Z static INLINE void nib_tile(const qmat *m, const kern_act *a, int mx, int rb, int cb, float *const *y,
                              int r, int rs, int pf, const kspan *ks) {
    const __m512i lut =
        mx ? _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0))
           : _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    const int      n = m->cols, np = (n + 63) / 64, ng = (n + 31) / 32, sr = mx ? n / 32 : (n + 63) / 64;
    const size_t   rb_bytes = mx ? (size_t)n / 2 : (size_t)(n + 1) / 2;
    const uint8_t *w[RB_MAX], *e[RB_MAX];
    const float   *s[RB_MAX];
    __m128         acc[CB_NIB];
    __m512         sv[RB_MAX];
    __m512i        lo[RB_MAX], hi[RB_MAX];
#pragma GCC unroll 4
    for (int i = 0; i < rb; i++) {
        w[i] = (const uint8_t *)m->w + (size_t)(r + i * rs) * rb_bytes;
        e[i] = mx ? m->e + (size_t)(r + i * rs) * sr : NULL;
        s[i] = mx ? NULL : m->s + (size_t)(r + i * rs) * sr;
    }
    TILE_INIT(acc, cb, ks);
    /* MXFP4, one column (registers to spare): where four whole double steps are left, their
     * exponents in one load per row (ev), each step's lanes by a constant permutation */
    const int ev4 = mx && cb == 1;
    int       p   = 2 * ks->k0;
    while (p < 2 * ks->k1) {
        if (ev4 && p + 8 <= 2 * ks->k1) {
            __m512 ev[4], E[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                ev[i] = i < rb ? e8m0_exp64(e[i] + 2 * p) : _mm512_setzero_ps();
            e8m0_rows4(ev, E);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++, p += 2) {
#pragma GCC unroll 4
                for (int i = 0; i < rb; i++)
                    nib_codes512(row_bytes(w[i], p, pf, ks->lin ? w[0] : NULL, i), lut, &lo[i], &hi[i], mx);
                nib_tile_step(lo, hi, E[j], a, mx, rb, cb, p, 4, acc);
            }
            continue;
        }
#pragma GCC unroll 4
        for (int i = 0; i < rb; i++) {
            nib_codes512(row_bytes(w[i], p, pf, ks->lin ? w[0] : NULL, i), lut, &lo[i], &hi[i], mx);
            sv[i] = mx ? e8m0_exp16(e[i] + 2 * p, 4) : _mm512_setzero_ps();
        }
        nib_tile_step(lo, hi, mx || rb < 4 ? rows_pick(sv, rb, mx, s, p, 1) : i4_rows4(s, p), a, mx, rb, cb,
                      p, 4, acc);
        p += 2;
    }
    if ((size_t)ks->k1 < rb_bytes / 64) {
        TILE_KEEP(acc, cb, ks);
        return;
    }
    if (p < np) { /* one or two pairs left, the last maybe partial; groups past ng get no FMA */
        const int       two = p + 1 < np;
        const __mmask64 k   = bytes_mask(rb_bytes - (size_t)p * 32);
#pragma GCC unroll 4
        for (int i = 0; i < rb; i++) {
            nib_codes512(_mm512_maskz_loadu_epi8(k, w[i] + p * 32), lut, &lo[i], &hi[i], mx);
            sv[i] = mx ? e8m0_exp16(e[i] + 2 * p, ng - 2 * p < 4 ? ng - 2 * p : 4) : _mm512_setzero_ps();
        }
        nib_tile_step(lo, hi, rows_pick(sv, rb, mx, s, p, two), a, mx, rb, cb, p,
                      ng - 2 * p < 4 ? ng - 2 * p : 4, acc);
    }
#pragma GCC unroll 4
    for (int c = 0; c < cb; c++) {
        float o[4];
        _mm_storeu_ps(o, acc[c]);
#pragma GCC unroll 4
        for (int i = 0; i < rb; i++)
            y[c][r + i * rs] = o[i];
    }
}

/* One function per (type, rows, columns) shape of a tile, so rb and cb are constants. */
#define TILE_FN(name, call)                                                                                  \
    Z static void name(const qmat *m, const kern_act *a, float *const *y, int r, int rs, int pf,             \
                       const kspan *ks) {                                                                    \
        call;                                                                                                \
    }
#define TILE_FNS(rb)                                                                                         \
    TILE_FN(i8_##rb##x1, i8_tile(m, a, rb, 1, y, r, rs, pf, ks))                                             \
    TILE_FN(i8_##rb##x2, i8_tile(m, a, rb, 2, y, r, rs, pf, ks))                                             \
    TILE_FN(i8_##rb##x3, i8_tile(m, a, rb, 3, y, r, rs, pf, ks))                                             \
    TILE_FN(i8_##rb##x4, i8_tile(m, a, rb, 4, y, r, rs, pf, ks))                                             \
    TILE_FN(i4_##rb##x1, nib_tile(m, a, 0, rb, 1, y, r, rs, pf, ks))                                         \
    TILE_FN(i4_##rb##x2, nib_tile(m, a, 0, rb, 2, y, r, rs, pf, ks))                                         \
    TILE_FN(i4_##rb##x3, nib_tile(m, a, 0, rb, 3, y, r, rs, pf, ks))                                         \
    TILE_FN(mx_##rb##x1, nib_tile(m, a, 1, rb, 1, y, r, rs, pf, ks))                                         \
    TILE_FN(mx_##rb##x2, nib_tile(m, a, 1, rb, 2, y, r, rs, pf, ks))                                         \
    TILE_FN(mx_##rb##x3, nib_tile(m, a, 1, rb, 3, y, r, rs, pf, ks))
TILE_FNS(1)
TILE_FNS(4)
static_assert(RB_MAX == 4 && CB_I8 == 4 && CB_NIB == 3, "one tile function per shape");

typedef void (*tile_fn)(const qmat *, const kern_act *, float *const *, int, int, int, const kspan *);

/* K blocking of a matmul (nc > 1): kern_kblock_steps() double steps per block (default 16: 1 KiB
 * of each weight row), rows in sub-blocks of RS_ROWS. One K block's activations for KERN_NC512
 * columns (i8: 24 KiB, nibble types 32 KiB) stay in L1/L2-near while the sub-block's 16 rows
 * pass over them, with the waiting lanes ab (8 KiB), instead of every 4-row tile pulling the
 * columns' whole activations (3 bytes per int8 column, 2 per nibble column: tens of KiB) from
 * L2 again. Measured (BENCHMARKS.md, int8 matmul32): no blocking 135 GOPS, 8 steps 168, 16
 * steps 198; nibble formats about even at 16, slower at 8. A matvec (nc == 1) runs each row in
 * one pass: its one activation column stays in L1 anyway. */
#define RS_ROWS 16

/* The prefetch distance (bytes) of a matvec: kern_mv_ahead() tiles (kern-impl.h) of tile bytes
 * along a row's stream, or the byte distance of the matmul when that is 0. */
static int mv_prefetch(size_t tile) {
    const size_t ahead = (size_t)kern_mv_ahead() * tile;
    return !ahead ? kern_prefetch_bytes() : ahead > (1u << 30) ? 1 << 30 : (int)ahead;
}

/* A split tile's step along its streams, for the weight prefetch: one row, at most MV_SPLIT_PF
 * (KERN_MV_SPLIT_PF, kern-impl.h) bytes. One Zen 5 core under load, 3072x3584, GB/s by byte distance (1 KiB
 * / 1.5 / 2 / 3.5): int8 27-32 / 28-30 / 27-29 / 25-27; MXFP4 25-31 / 31 / 30-31 / 26; int4 27-29 / 28-29 /
 * 25-28 / 24-25. 1.5 KiB: near the best of each. */
#define MV_SPLIT_PF KERN_MV_SPLIT_PF

/* A matvec's scale stream (Q_I4 s, Q_MXFP4 e; not beside the weights, so not covered by the
 * weight prefetch): the lines of rows [r, r + n) (those that exist), asked for by the tile that
 * many rows above (4 rows: 448 bytes of MXFP4 exponents or 896 of int4 scales at 3584 columns). */
static void mv_prefetch_scales(const qmat *m, int r, int n) {
    if (m->type == Q_I8 || r >= m->rows)
        return;
    const size_t   rs = q_sbytes(m->type, 1, m->cols);
    const uint8_t *p  = m->type == Q_I4 ? (const uint8_t *)(const void *)m->s : m->e;
    n                 = m->rows - r < n ? m->rows - r : n;
    for (uintptr_t l = (uintptr_t)(p + (size_t)r * rs) & ~(uintptr_t)63;
         l < (uintptr_t)(p + (size_t)(r + n) * rs); l += 64)
        __builtin_prefetch((const void *)l, 0, 3);
}

/* [type][rb == 4][cb - 1] */
static const tile_fn tiles[3][2][4] = {
    {{i8_1x1, i8_1x2, i8_1x3, i8_1x4}, {i8_4x1, i8_4x2, i8_4x3, i8_4x4}},
    {{i4_1x1, i4_1x2, i4_1x3, NULL}, {i4_4x1, i4_4x2, i4_4x3, NULL}},
    {{mx_1x1, mx_1x2, mx_1x3, NULL}, {mx_4x1, mx_4x2, mx_4x3, NULL}},
};

/* Matvec with split tiles (kern_mv_split): the rows [r0, r1) as RB_MAX quarters of q rows
 * (the last r1 - r0 - RB_MAX q rows after them, one at a time); tile i runs row i of each
 * quarter, so the core reads RB_MAX long linear streams, which the hardware prefetchers follow
 * across rows and pages, instead of four streams one row apart that restart every tile
 * (a plain read in those two patterns: 37-41 against 25-31 GB/s on one Zen 5 core, BENCHMARKS.md).
 * Each stream prefetches its weights kern_mv_ahead() x min(row, MV_SPLIT_PF) bytes ahead, and
 * the tile start the scales of each stream's row kern_mv_ahead() rows ahead. */
static void mv_split(const qmat *m, const kern_act *a, float *const *y, int t, int r0, int r1) {
    const size_t rowb = q_wbytes(m->type, 1, m->cols);
    const int    q = (r1 - r0) / RB_MAX, ahead = kern_mv_ahead(), nfull = (int)(rowb / 64);
    const int    pf = mv_prefetch(rowb < MV_SPLIT_PF ? rowb : MV_SPLIT_PF);
    const kspan  ks = {0, nfull, NULL, 0};
    for (int i = 0; i < q; i++) {
        if (ahead)
            for (int k = 0; k < RB_MAX; k++)
                mv_prefetch_scales(m, r0 + k * q + i + ahead, 1);
        tiles[t][1][0](m, a, y, r0 + i, q, pf, &ks);
    }
    for (int r = r0 + RB_MAX * q; r < r1; r++) {
        if (ahead)
            mv_prefetch_scales(m, r + ahead, 1);
        tiles[t][0][0](m, a, y, r, 1, pf, &ks);
    }
}

/* ---- Q_I8 matmul of a few columns, rows in the lanes ----------------------------------------
 * 16 rows x one group of 32 weights (16 x 8 dwords) transposed into 8 registers (dword kq of the
 * 16 rows each, as unsigned codes w ^ 0x80), once for all nc columns; then per column a chain of
 * 8 vpdpbusd against the broadcast activation dwords gives the 16 rows' exact group sums with
 * no horizontal reduction, + cg (exact, as in i8_tile_step), one convert and one FMA per group
 * in group order: the same steps per (row, column) as every twin. */

/* Rows i (ymm lo) and i + 4 (ymm hi) of 16 rows x 8 dwords z[8] (z[0..3]: rows 0-3 | 4-7,
 * z[4..7]: rows 8-11 | 12-15) -> wt[kq] lane r = row r's dword kq: 24 shuffles. */
Z static INLINE void t16x8(const __m512i z[8], __m512i wt[8]) {
    __m512i u[8];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i *zz = z + 4 * h;
        const __m512i  t0 = _mm512_unpacklo_epi32(zz[0], zz[1]), t1 = _mm512_unpackhi_epi32(zz[0], zz[1]);
        const __m512i  t2 = _mm512_unpacklo_epi32(zz[2], zz[3]), t3 = _mm512_unpackhi_epi32(zz[2], zz[3]);
        /* block b of u[4h + j]: rows 4b' .. of dword j (b even) or j + 4 (b odd) */
        u[4 * h + 0] = _mm512_unpacklo_epi64(t0, t2);
        u[4 * h + 1] = _mm512_unpackhi_epi64(t0, t2);
        u[4 * h + 2] = _mm512_unpacklo_epi64(t1, t3);
        u[4 * h + 3] = _mm512_unpackhi_epi64(t1, t3);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        wt[j]     = _mm512_shuffle_i32x4(u[j], u[4 + j], _MM_SHUFFLE(2, 0, 2, 0));
        wt[j + 4] = _mm512_shuffle_i32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* 32 bytes at b of each of 16 rows n1 bytes apart, transposed: wt[kq] lane i = row i's dword kq
 * (XOR flip: the int8 codes w + 128). k: the live bytes of a row's partial end (masked loads,
 * never past it), else 0. lin (NULL: none): 8 lines from there are prefetched to L2, the next
 * block's share of this step in address order. Rows i, i + 4 share a register (t16x8); the six
 * address registers b, b + 8 n1 and n1, 3, 5, 7 n1 reach all sixteen. */
Z static INLINE void rows16_load(const int8_t *b, ptrdiff_t n1, __mmask32 k, const int8_t *lin, __m512i flip,
                                 __m512i wt[8]) {
    const ptrdiff_t n3 = 3 * n1, n5 = 5 * n1, n7 = 7 * n1;
    const int8_t   *p[16];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const int8_t *bh = h ? b + 8 * n1 : b;
        p[8 * h + 0] = bh, p[8 * h + 1] = bh + n1, p[8 * h + 2] = bh + 2 * n1, p[8 * h + 3] = bh + n3;
        p[8 * h + 4] = bh + 4 * n1, p[8 * h + 5] = bh + n5, p[8 * h + 6] = bh + 2 * n3,
                  p[8 * h + 7] = bh + n7;
    }
    __m512i z[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) { /* z[j]: rows j' and j' + 4, j' = (j & 3) + 8 (j >> 2) */
        const int8_t *lo = p[(j & 3) + 8 * (j >> 2)], *hi = p[(j & 3) + 8 * (j >> 2) + 4];
        if (lin)
            __builtin_prefetch(lin + 64 * j, 0, 2);
        const __m256i l =
            k ? _mm256_maskz_loadu_epi8(k, lo) : _mm256_loadu_si256((const __m256i *)(const void *)lo);
        const __m256i u =
            k ? _mm256_maskz_loadu_epi8(k, hi) : _mm256_loadu_si256((const __m256i *)(const void *)hi);
        z[j] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(l), u, 1), flip);
    }
    t16x8(z, wt);
}

/* Group g (32 bytes at b of row 0; rows n1 apart) of 16 rows for NC columns; k, lin: rows16_load. */
Z static INLINE void i8_rows16_group(const int8_t *b, ptrdiff_t n1, __mmask32 k, const int8_t *lin,
                                     const kern_act *a, const int NC, int g, __m512 acc[KERN_NC512]) {
    __m512i wt[8];
    rows16_load(b, n1, k, lin, _mm512_set1_epi8((char)0x80), wt);
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        const int32_t *q  = (const int32_t *)(const void *)(a[c].q + g * 32);
        __m512i        s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int kq = 0; kq < 8; kq += 2) {
            s0 = _mm512_dpbusd_epi32(s0, wt[kq], _mm512_set1_epi32(q[kq]));
            s1 = _mm512_dpbusd_epi32(s1, wt[kq + 1], _mm512_set1_epi32(q[kq + 1]));
        }
        const __m512 f =
            _mm512_add_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_set1_ps(a[c].cg[g]));
        acc[c] = _mm512_fmadd_ps(f, _mm512_set1_ps(a[c].d[g]), acc[c]);
    }
}

/* Rows [r, r + 16) of a Q_I8 matrix for NC columns (a constant: one instance per count). The
 * weight prefetch (pf: the matmul's distance, RS_ROWS rows, i.e. the next block of 16 rows): that
 * block's 16 n contiguous bytes in address order, 512 per group step (where the prefetch asked
 * for each row's line at the same offset, a matmul of 2 columns read 14 GB/s from DRAM on one
 * Zen 4 thread, a matvec about 30: BENCHMARKS.md, "Batched decode after the one order"). */
Z static INLINE void i8_rows16(const qmat *m, const kern_act *a, const int NC, float *const *y, int r,
                               int pf) {
    const int     n = m->cols, nf = n / 32;
    const int8_t *w = (const int8_t *)m->w + (size_t)r * n;
    __m512        acc[KERN_NC512];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++)
        acc[c] = _mm512_setzero_ps();
    const int8_t *lin = pf ? w + pf : NULL;
    int           g   = 0;
    for (; g < nf; g++)
        i8_rows16_group(w + g * 32, n, 0, lin ? lin + g * 512 : NULL, a, NC, g, acc);
    if (g * 32 < n) /* the partial last group: masked loads, never past the row */
        i8_rows16_group(w + g * 32, n, (__mmask32)((1u << (n - g * 32)) - 1), NULL, a, NC, g, acc);
    const __m512 sc = _mm512_loadu_ps(m->s + r);
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++)
        _mm512_storeu_ps(y[c] + r, _mm512_mul_ps(acc[c], sc));
}

#define ROWS16_FN(nc)                                                                                        \
    Z static void i8_rows16_##nc(const qmat *m, const kern_act *a, float *const *y, int r, int pf) {         \
        i8_rows16(m, a, nc, y, r, pf);                                                                       \
    }
ROWS16_FN(2)
ROWS16_FN(3)
ROWS16_FN(4)
ROWS16_FN(5)
ROWS16_FN(6)
ROWS16_FN(7)
ROWS16_FN(8)
static_assert(KERN_NC512 == 8, "one i8_rows16 instance per column count 2 .. KERN_NC512");
static void (*const i8_rows16_fns[KERN_NC512 + 1])(const qmat *, const kern_act *, float *const *, int,
                                                   int) = {
    NULL, NULL, i8_rows16_2, i8_rows16_3, i8_rows16_4, i8_rows16_5, i8_rows16_6, i8_rows16_7, i8_rows16_8};

/* ---- Q_I4 and Q_MXFP4 matmul of a few columns, rows in the lanes ---------------------------
 * The same for the nibble types, per pair of groups: 16 rows x 32 packed bytes transposed
 * (t16x8), each dword's low nibbles (even columns, through the code table for MXFP4) and high
 * nibbles (odd columns) meet the broadcast dwords of the pair layout (kern_act.q: even columns,
 * then odd); per (column, group) two chains of 4 vpdpbusd from the group's correction (corr: -o
 * x the group's code sum, from nsxo), one convert, the row lanes' scale (Q_I4: s x d; MXFP4:
 * vscalefps(d, e - 128), as nib_tile_step) and one FMA, in group order. The rows' scales come by
 * gathers: Q_I4 one float per row and pair; MXFP4 one dword per row and two pairs ending at their
 * last exponent byte (so never past the row, whose first 4 bytes exist: cols >= 128). */
#define NIB_GMAX 512 /* groups of the per-call corrections (kern_idot_avx512's stack: 16 KiB) */

/* Group 2p + h (its dwords wt[4h .. 4h + 3]) of 16 rows for NC columns; wsc: the rows' lanes of
 * the group's weight scale (Q_I4) or e - 128 (MXFP4). */
Z static INLINE void nib_rows16_group(const __m512i *wt, __m512i lut, int mx, const kern_act *a, const int NC,
                                      const int32_t *corr, int ng, int p, int h, __m512 wsc,
                                      __m512 acc[KERN_NC512]) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const int     g  = 2 * p + h;
    __m512i       lo[4], hi[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        lo[j] = _mm512_and_si512(wt[4 * h + j], m4);
        hi[j] = _mm512_and_si512(_mm512_srli_epi16(wt[4 * h + j], 4), m4);
        if (mx)
            lo[j] = _mm512_shuffle_epi8(lut, lo[j]), hi[j] = _mm512_shuffle_epi8(lut, hi[j]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        const int32_t *qe = (const int32_t *)(const void *)(a[c].q + p * 64 + 16 * h), *qo = qe + 8;
        __m512i        s0 = _mm512_set1_epi32(corr[c * ng + g]), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            s0 = _mm512_dpbusd_epi32(s0, lo[j], _mm512_set1_epi32(qe[j]));
            s1 = _mm512_dpbusd_epi32(s1, hi[j], _mm512_set1_epi32(qo[j]));
        }
        const __m512 f  = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
        const __m512 dv = _mm512_set1_ps(a[c].d[g]);
        acc[c]          = _mm512_fmadd_ps(f, mx ? _mm512_scalef_ps(dv, wsc) : _mm512_mul_ps(wsc, dv), acc[c]);
    }
}

/* The exponents of groups g .. min(g + 3, ng - 1) of 16 rows (e: row 0's, sr >= 4 bytes a row, idx:
 * r * sr): one gather of the dword that ends at the last group's byte (or the row's first dword),
 * never past the row; *at: the group of its byte 0. */
Z static INLINE __m512i e8m0_gather4(const uint8_t *e, __m512i idx, int g, int ng, int *at) {
    const int last = g + 3 < ng ? g + 3 : ng - 1;
    *at            = last >= 3 ? last - 3 : 0;
    return _mm512_i32gather_epi32(idx, (const void *)(e + *at), 1);
}

/* e - 128 of group g (at <= g <= at + 3) of e8m0_gather4's dwords v, as floats. */
Z static INLINE __m512 e8m0_lane(__m512i v, int at, int g) {
    const __m512i eg =
        _mm512_and_si512(_mm512_srlv_epi32(v, _mm512_set1_epi32(8 * (g - at))), _mm512_set1_epi32(255));
    return _mm512_sub_ps(_mm512_cvtepi32_ps(eg), _mm512_set1_ps(128.0f));
}

/* Rows [r, r + 16) of a Q_I4 (mx = 0) or Q_MXFP4 matrix for NC columns (one instance per count). */
Z static INLINE void nib_rows16(const qmat *m, const kern_act *a, int mx, const int NC, float *const *y,
                                int r, int pf, const int32_t *corr) {
    const __m512i lut =
        _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const int      n = m->cols, ng = (n + 31) / 32, np = (n + 63) / 64, sr = mx ? n / 32 : np;
    const size_t   rbytes = mx ? (size_t)n / 2 : (size_t)(n + 1) / 2;
    const uint8_t *w      = (const uint8_t *)m->w + (size_t)r * rbytes;
    const __m512i  idx    = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(sr));
    const uint8_t *e = mx ? m->e + (size_t)r * sr : NULL;
    const float   *s = mx ? NULL : m->s + (size_t)r * sr;
    __m512         acc[KERN_NC512];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++)
        acc[c] = _mm512_setzero_ps();
    __m512i ev = _mm512_setzero_si512();
    int     at = 0;
    for (int p = 0; p < np; p++) {
        const size_t    live = rbytes - (size_t)p * 32 < 32 ? rbytes - (size_t)p * 32 : 32;
        const __mmask32 k    = live == 32 ? 0 : (__mmask32)((1u << live) - 1);
        __m512i         wt[8];
        rows16_load((const int8_t *)(w + (size_t)p * 32), (ptrdiff_t)rbytes, k,
                    pf ? (const int8_t *)(w + pf + (size_t)p * 512) : NULL, _mm512_setzero_si512(), wt);
        if (mx && !(p & 1)) /* MXFP4: the exponents of two pairs by one gather */
            ev = e8m0_gather4(e, idx, 2 * p, ng, &at);
        const __m512 ws = mx ? e8m0_lane(ev, at, 2 * p) : _mm512_i32gather_ps(idx, s + p, 4);
        nib_rows16_group(wt, lut, mx, a, NC, corr, ng, p, 0, ws, acc);
        if (2 * p + 1 < ng)
            nib_rows16_group(wt, lut, mx, a, NC, corr, ng, p, 1, mx ? e8m0_lane(ev, at, 2 * p + 1) : ws, acc);
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++)
        _mm512_storeu_ps(y[c] + r, acc[c]);
}

#define NIB_ROWS16_FN(nc)                                                                                    \
    Z static void i4_rows16_##nc(const qmat *m, const kern_act *a, float *const *y, int r, int pf,           \
                                 const int32_t *corr) {                                                      \
        nib_rows16(m, a, 0, nc, y, r, pf, corr);                                                             \
    }                                                                                                        \
    Z static void mx_rows16_##nc(const qmat *m, const kern_act *a, float *const *y, int r, int pf,           \
                                 const int32_t *corr) {                                                      \
        nib_rows16(m, a, 1, nc, y, r, pf, corr);                                                             \
    }
NIB_ROWS16_FN(2)
NIB_ROWS16_FN(3)
NIB_ROWS16_FN(4)
NIB_ROWS16_FN(5)
NIB_ROWS16_FN(6)
NIB_ROWS16_FN(7)
NIB_ROWS16_FN(8)
typedef void (*nib_rows16_fn)(const qmat *, const kern_act *, float *const *, int, int, const int32_t *);
static const nib_rows16_fn nib_rows16_fns[2][KERN_NC512 + 1] = {
    {NULL, NULL, i4_rows16_2, i4_rows16_3, i4_rows16_4, i4_rows16_5, i4_rows16_6, i4_rows16_7, i4_rows16_8},
    {NULL, NULL, mx_rows16_2, mx_rows16_3, mx_rows16_4, mx_rows16_5, mx_rows16_6, mx_rows16_7, mx_rows16_8}};

void kern_idot_avx512(const qmat *m, const kern_act *a, int nc, float *const *y, int r0, int r1) {
    K3_ASSERT(nc >= 1 && nc <= KERN_NC512);
    K3_ASSERT(m->type == Q_I8 || m->type == Q_I4 || m->type == Q_MXFP4);
    const int t = m->type == Q_I8 ? 0 : m->type == Q_I4 ? 1 : 2, cbmax = t ? CB_NIB : CB_I8;
    if (nc == 1 && kern_mv_split()) {
        mv_split(m, a, y, t, r0, r1);
        return;
    }
    /* a matvec prefetches tiles ahead (mv_prefetch); a matmul the next row sub-block (the same K
     * offset RS_ROWS rows on) while this one runs: its block loops jump between rows, so a distance
     * along the row misses the first 4 KiB of every row (i8 from DRAM, 8 columns: 8.5 -> 10.6 GB/s,
     * BENCHMARKS.md) */
    const int pf      = nc == 1                 ? mv_prefetch(RB_MAX * q_wbytes(m->type, 1, m->cols))
                        : kern_prefetch_bytes() ? RS_ROWS * (int)q_wbytes(m->type, 1, m->cols)
                                                : 0;
    const int pf_rows = nc == 1 ? kern_mv_ahead() * RB_MAX : 0; /* matvec: scales prefetched too */
    if (t == 0 && nc > 1) { /* whole blocks of 16 rows with the rows in the lanes, the rest below */
        for (; r0 + 16 <= r1; r0 += 16)
            i8_rows16_fns[nc](m, a, y, r0, pf);
        if (r0 == r1)
            return;
    }
    const int ng = (m->cols + 31) / 32;
    if (t && nc > 1 && r0 + 16 <= r1 && ng <= NIB_GMAX && (t == 1 || m->cols >= 128)) {
        int32_t corr[KERN_NC512 * NIB_GMAX]; /* column c, group g: the sum of its 4 nsxo lanes */
        for (int c = 0; c < nc; c++)
            for (int g = 0; g < ng; g++) {
                const int32_t *v = a[c].nsxo + g * 4;
                corr[c * ng + g] = v[0] + v[1] + v[2] + v[3];
            }
        for (; r0 + 16 <= r1; r0 += 16)
            nib_rows16_fns[t - 1][nc](m, a, y, r0, pf, corr);
        if (r0 == r1)
            return;
    }
    /* columns per tile, balanced: nc = 7 runs as 3 + 2 + 2 (nibble) or 4 + 3 (int8), never with a
     * tile of one column beside wider ones, whose weight decode serves that one column alone
     * (a 4 x 1 nibble tile: 2.5 to 3.2 cycles per vpdpbusd, 4 x 3: 1.4 to 1.5) */
    const int ntl = (nc + cbmax - 1) / cbmax;
    /* whole double steps of a row: 64 weight bytes each */
    const int nfull = (int)(t == 0   ? (size_t)m->cols / 64
                            : t == 1 ? (size_t)(m->cols + 1) / 2 / 64
                                     : (size_t)m->cols / 2 / 64);
    const int kbs = kern_kblock_steps(), kb = nc > 1 && kbs ? kbs : nfull;
    __m512    ab[RS_ROWS * KERN_NC512];
    for (int rs = r0; rs < r1; rs += RS_ROWS) {
        const int re = r1 - rs < RS_ROWS ? r1 : rs + RS_ROWS;
        for (int k0 = 0;; k0 += kb) {
            kspan ks = {k0, nfull - k0 < kb ? nfull : k0 + kb, NULL, 0};
            for (int r = rs; r < re;) {
                const int four = r + RB_MAX <= re;
                ks.lin         = nc == 1 && four && kern_mv_ahead();
                if (nc == 1 && pf_rows)
                    mv_prefetch_scales(m, r + pf_rows, four ? RB_MAX : 1);
                for (int c = 0, tl = 0; c < nc; c += (nc + tl) / ntl, tl++) {
                    const int cb = (nc + tl) / ntl; /* tile tl of ntl: nc / ntl columns, the last ones + 1 */
                    ks.ab        = ab + (size_t)(r - rs) * KERN_NC512 + c;
                    tiles[t][four][cb - 1](m, a + c, y + c, r, 1, pf, &ks);
                }
                r += four ? RB_MAX : 1;
            }
            if (ks.k1 >= nfull)
                break;
        }
    }
}

/* ---- nibble rows to bytes (kern-amx.c; kern-grp.c unpacks the same bytes 32 at a time) --- */

Z void kern_unpack_row_avx512(const uint8_t *w, size_t nbytes, int type, int cols, int kpad, int bias,
                              uint8_t *out) {
    const __m128i lut16 = type == Q_MXFP4
                              ? _mm_loadu_si128((const __m128i *)(const void *)kern_mxfp4_i8)
                              : _mm_setr_epi8(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m512i lut   = _mm512_broadcast_i32x4(_mm_add_epi8(lut16, _mm_set1_epi8((char)bias)));
    const __m512i m4 = _mm512_set1_epi16(0x0F), pad = _mm512_set1_epi8((char)bias);
    int           c = 0;
    for (; c + 64 <= cols; c += 64) { /* whole 32-byte loads and 64-byte stores (masked stores are
                                         slow on some cores) */
        __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(w + c / 2)));
        v         = _mm512_or_si512(_mm512_and_si512(v, m4), _mm512_slli_epi16(_mm512_srli_epi16(v, 4), 8));
        _mm512_storeu_si512(out + c, _mm512_shuffle_epi8(lut, v)); /* word k = byte k: low, high */
    }
    for (; c < kpad; c += 64) { /* the row's end: masked, never past the row or the buffer */
        const size_t  b0 = (size_t)c / 2, nb = nbytes > b0 ? nbytes - b0 : 0;
        const __m256i p = _mm256_maskz_loadu_epi8((__mmask32)(nb >= 32 ? ~0u : (1u << nb) - 1), w + b0);
        __m512i       v = _mm512_cvtepu8_epi16(p);
        v = _mm512_or_si512(_mm512_and_si512(v, m4), _mm512_slli_epi16(_mm512_srli_epi16(v, 4), 8));
        v = _mm512_shuffle_epi8(lut, v);
        const int       live = cols - c >= 64 ? 64 : cols - c > 0 ? cols - c : 0;
        const __mmask64 kv   = live == 64 ? ~(__mmask64)0 : ((__mmask64)1 << live) - 1;
        const __mmask64 ks   = kpad - c >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (kpad - c)) - 1;
        _mm512_mask_storeu_epi8(out + c, ks, _mm512_mask_mov_epi8(pad, kv, v));
    }
}

/* ---- activation quantizer (kern_act_quant_ref's twin: the same IEEE operations per element) - */

Z void kern_act_quant_avx512(const float *x, int cols, int ng, int8_t *q, float *d) {
    const __m512  absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)), inf = _mm512_set1_ps(INFINITY);
    const __m512  half = _mm512_set1_ps(0.5f), sgn = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    const __m512i hi = _mm512_set1_epi32(127), lo = _mm512_set1_epi32(-127);
    for (int g = 0; g < ng; g++) {
        const int c0 = g * Q_IDOT_GROUP, len = cols - c0 < Q_IDOT_GROUP ? cols - c0 : Q_IDOT_GROUP;
        if (len <= 0) {
            d[g] = 0.0f;
            continue;
        }
        const __mmask16 k0 = (__mmask16)(len >= 16 ? 0xFFFF : (1u << len) - 1);
        const __mmask16 k1 = (__mmask16)(len >= 32 ? 0xFFFF : len <= 16 ? 0 : (1u << (len - 16)) - 1);
        const __m512    x0 = _mm512_maskz_loadu_ps(k0, x + c0), x1 = _mm512_maskz_loadu_ps(k1, x + c0 + 16);
        const __m512    a0 = _mm512_and_ps(x0, absm), a1 = _mm512_and_ps(x1, absm);
        /* finite: |x| < inf (false for NaN); masked-off lanes are 0, finite */
        const int bad =
            (_mm512_cmp_ps_mask(a0, inf, _CMP_LT_OQ) & _mm512_cmp_ps_mask(a1, inf, _CMP_LT_OQ)) != 0xFFFF;
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
        if (bad || amax == 0.0f) {
            d[g] = bad ? NAN : 0.0f;
            continue;
        }
        /* round half away from zero: trunc(v + copysign(0.5, v)), then the clamp */
        const __m512 inv = _mm512_set1_ps(127.0f / amax);
        const __m512 v0 = _mm512_mul_ps(x0, inv), v1 = _mm512_mul_ps(x1, inv);
        __m512i      q0 = _mm512_cvttps_epi32(_mm512_add_ps(v0, _mm512_or_ps(half, _mm512_and_ps(v0, sgn))));
        __m512i      q1 = _mm512_cvttps_epi32(_mm512_add_ps(v1, _mm512_or_ps(half, _mm512_and_ps(v1, sgn))));
        q0              = _mm512_max_epi32(_mm512_min_epi32(q0, hi), lo);
        q1              = _mm512_max_epi32(_mm512_min_epi32(q1, hi), lo);
        _mm_mask_storeu_epi8(q + c0, k0, _mm512_cvtepi32_epi8(q0));
        _mm_mask_storeu_epi8(q + c0 + 16, k1, _mm512_cvtepi32_epi8(q1));
        d[g] = amax / 127.0f;
    }
}

/* ---- activation layout (kern_act_layout_ref's twin: integer sums and byte moves, so the same
 * bytes): per 64 natural codes one vpdpbusd with unsigned ones gives 16 exact 4-column sums */

Z void kern_act_layout_avx512(int type, int np, kern_act *a) {
    const __m512i ones = _mm512_set1_epi8(1);
    if (type == Q_I8) { /* groups g, g+1: cg = -128 * the sum of each group's 32 codes */
        for (int g = 0; g < 2 * np; g += 2) {
            const __m512i s4 =
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(a->q + g * 32));
            a->cg[g]     = (float)(-128 * _mm512_mask_reduce_add_epi32(0x00FF, s4));
            a->cg[g + 1] = (float)(-128 * _mm512_mask_reduce_add_epi32(0xFF00, s4));
        }
        return;
    }
    const __m256i noff = _mm256_set1_epi32(type == Q_MXFP4 ? -KERN_MXFP4_OFF : -8);
    /* per 16-byte lane: its 8 even bytes, then its 8 odd ones; then the even halves of the four
     * lanes, then the odd halves: the pair layout */
    const __m512i eo =
        _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    const __m512i q64 = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    for (int pr = 0; pr < np; pr += 2) { /* two pairs: their 128 natural codes in q2 become its quad */
        __m512i p[2];
        for (int h = 0; h < 2; h++) {
            const __m512i n =
                pr + h < np ? _mm512_loadu_si512(a->q2 + (pr + h) * 64) : _mm512_setzero_si512();
            p[h] = _mm512_permutexvar_epi64(q64, _mm512_shuffle_epi8(n, eo));
            if (pr + h == np)
                break;
            /* lane j: -off * the sum of natural columns 8j..8j+7 (two adjacent 4-column sums) */
            const __m512i s4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, n);
            const __m256i s8 = _mm512_cvtepi64_epi32(_mm512_add_epi32(s4, _mm512_srli_epi64(s4, 32)));
            _mm256_storeu_si256((__m256i *)(void *)(a->nsxo + (pr + h) * 8), _mm256_mullo_epi32(s8, noff));
            _mm_storeu_ps(a->d8 + (pr + h) * 8, _mm_set1_ps(a->d[2 * (pr + h)]));
            _mm_storeu_ps(a->d8 + (pr + h) * 8 + 4, _mm_set1_ps(a->d[2 * (pr + h) + 1]));
            _mm512_storeu_si512(a->q + (pr + h) * 64, p[h]);
        }
        if (pr + 1 == np)
            p[1] = _mm512_setzero_si512();
        _mm512_storeu_si512(a->q2 + pr * 64, _mm512_shuffle_i64x2(p[0], p[1], _MM_SHUFFLE(1, 0, 1, 0)));
        _mm512_storeu_si512(a->q2 + pr * 64 + 64, _mm512_shuffle_i64x2(p[0], p[1], _MM_SHUFFLE(3, 2, 3, 2)));
    }
}

#else /* no AVX-512 build: never selected (kern_isa_ok says no), the reference stands in */

void kern_unpack_row_avx512(const uint8_t *w, size_t nbytes, int type, int cols, int kpad, int bias,
                            uint8_t *out) {
    (void)w, (void)nbytes, (void)type, (void)cols, (void)kpad, (void)bias, (void)out;
    K3_ASSERT(!"AVX-512 kernels not built for this target");
}

void kern_act_quant_avx512(const float *x, int cols, int ng, int8_t *q, float *d) {
    kern_act_quant_ref(x, cols, ng, q, d);
}

void kern_act_layout_avx512(int type, int np, kern_act *a) {
    kern_act_layout_ref(type, np, a);
}

void kern_idot_avx512(const qmat *m, const kern_act *a, int nc, float *const *y, int r0, int r1) {
    for (int c = 0; c < nc; c++)
        kern_idot_ref(m, &a[c], y[c], r0, r1);
}

#endif
