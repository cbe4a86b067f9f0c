/* quant.h: weight matrix formats, load-time quantization (quant.c) and the matrix-vector
 * kernels' interface (kern.c scalar reference, kern-avx2.c AVX2+FMA).
 *
 * Every weight matrix of the engine is a qmat: rows x cols, y = W x (W row-major, one row per
 * output). Block layouts, with bits per weight (bpw) in brackets:
 *
 *   Q_F32    w: float [rows][cols]                                   [32]
 *   Q_I8     w: int8  [rows][cols],        s: float [rows]           [8 + 32/cols]
 *            value = w[r][c] * s[r]            (symmetric, per row; w in -127..127)
 *   Q_I4     w: uint8 [rows][(cols+1)/2],  s: float [rows][(cols+63)/64]   [4 + 32/64 = 4.5]
 *            low nibble = even column, high nibble = odd column;
 *            value = (nibble - 8) * s[r][c/64]  (symmetric, groups of 64 along a row);
 *            the pad nibble of an odd-width row is 8 (value 0).
 *   Q_MXFP4  w: uint8 [rows][cols/2],      e: uint8 [rows][cols/32]  [4 + 8/32 = 4.25]
 *            the checkpoint's compressed-tensors layout as stored (spec section 4):
 *            low nibble = even column; nibble = sign bit 3 + e2m1 index bits 0-2 into
 *            {0, .5, 1, 1.5, 2, 3, 4, 6}; value = e2m1 * 2^(e[r][c/32] - 127). cols % 32 == 0.
 *            (e = 255 is NaN: the engine rejects it at load; the kernels do not check.)
 *
 * Rows are packed back to back (row r of Q_I4 starts at byte r * ((cols+1)/2)); no padding
 * between rows, so a checkpoint tensor is used in place.
 *
 * Kernels (kern.c): two numerics, chosen at run time.
 *   exact-float: activations stay f32; W is decoded to f32 and multiplied (FMA on AVX2).
 *   IDOT (K3_IDOT=1, default): activations are quantized per group of Q_IDOT_GROUP=32 to int8
 *     (symmetric, d = maxabs/127) and each group is an exact integer dot product with the
 *     integer weights (int8 values, int4 nibble-8, MXFP4 doubled e2m1 {0,1,2,3,4,6,8,12}).
 *     Q_F32 always runs exact-float.
 * Each has a scalar reference (the oracle, K3_ISA=scalar) and AVX2 / AVX-512 twins. The IDOT twins are
 * bit-identical by construction (same integer sums, same float operations in the same order);
 * the exact-float twins agree within float reassociation. qmat_matmul's column t is
 * bit-identical to qmat_matvec on column t in every path, at every thread count.
 * Kernels are written as (ith, nth) row partitions and parallelised with OpenMP over rows.
 */
#pragma once
#include "k3-impl.h"
#include <assert.h>
#include <stdint.h>

enum qtype { Q_F32 = 0, Q_I8 = 1, Q_I4 = 2, Q_MXFP4 = 3 };

#define Q_I4_GROUP 64    /* columns per Q_I4 scale                          */
#define Q_MXFP4_GROUP 32 /* columns per Q_MXFP4 exponent (spec section 4)   */
#define Q_IDOT_GROUP 32  /* columns per activation scale in the IDOT path   */

/* bits per weight of each format (scales included; Q_I8 per-row scale amortised away) */
#define Q_BPW_F32 32.0
#define Q_BPW_I8 8.0
#define Q_BPW_I4 (4.0 + 32.0 / Q_I4_GROUP)      /* 4.5  */
#define Q_BPW_MXFP4 (4.0 + 8.0 / Q_MXFP4_GROUP) /* 4.25 */

static_assert(sizeof(float) == 4, "Q_F32 rows and all scales are 32-bit IEEE floats");
static_assert(sizeof(int8_t) == 1 && sizeof(uint8_t) == 1, "byte layouts");
static_assert(Q_MXFP4_GROUP == Q_IDOT_GROUP, "one MXFP4 exponent per activation group");
static_assert(Q_I4_GROUP % Q_IDOT_GROUP == 0, "an int4 group holds whole activation groups");
static_assert(Q_IDOT_GROUP == 32, "the AVX2 IDOT kernels hold one group in one 256-bit vector");
static_assert(Q_I4_GROUP % 2 == 0 && Q_MXFP4_GROUP % 2 == 0, "groups start on a byte");

typedef struct qmat {
    int            type; /* enum qtype                                                   */
    int            rows; /* output width                                                 */
    int            cols; /* input width                                                  */
    const void    *w;    /* weights, layout per type (see above)                         */
    const float   *s;    /* Q_I8: [rows]; Q_I4: [rows][(cols+63)/64]; else NULL          */
    const uint8_t *e;    /* Q_MXFP4: ue8m0 exponents [rows][cols/32]; else NULL          */
    void          *own;  /* the one allocation holding w and s when qmat_quantize made
                            them (freed by qmat_free); NULL for a view of foreign bytes   */
} qmat;

/* e2m1 magnitudes indexed by the low 3 bits of a nibble. */
extern const float q_e2m1[8];

/* Bytes of the weight data (w) and of the scales (s or e) for a matrix of this type and shape. */
size_t q_wbytes(int type, int rows, int cols);
size_t q_sbytes(int type, int rows, int cols);

/* ---- load-time quantization (quant.c) -----------------------------------------------------
 * Deterministic and bit-identical on every machine (plain C float arithmetic, roundf, no FMA
 * contraction: -std=c11 implies -ffp-contract=off), so a repacker and the engine agree.
 *
 *   Q_I8: s = maxabs/127, q = roundf(x * (127/maxabs)) in -127..127 (all-zero row: s = 0).
 *   Q_I4: per group of 64, s = maxabs/D for the D in {7, 7.5, 8, 8.5, 9} that minimises the
 *         group's squared error sum((x - q*s)^2), q = clamp(roundf(x/s), -8, 7); ties keep the
 *         earlier D. D = 7 is plain maxabs/7; D = 8 puts a negative extreme exactly on -8; the
 *         larger D clip one or two outliers to buy a finer step for the rest. */

/* Quantize one row of n floats. q_quantize_row_i8: q[n], *s. q_quantize_row_i4: q[(n+1)/2]
 * nibbles, s[(n+63)/64]. Inputs must be finite. */
void q_quantize_row_i8(const float *x, int n, int8_t *q, float *s);
void q_quantize_row_i4(const float *x, int n, uint8_t *q, float *s);

/* Make *out a type (Q_F32, Q_I8 or Q_I4) matrix from the f32 (or bf16) row-major rows x cols
 * matrix w. Allocates one owned block (out->own); the caller frees it with qmat_free.
 * K3_ERR_NUMERIC if w holds a NaN or inf (message names row and column), K3_ERR_ARG for a bad
 * type or shape, K3_ERR_NOMEM. On failure *out is zeroed and owns nothing. */
k3_status qmat_quantize(qmat *out, int type, const float *w, int rows, int cols);
k3_status qmat_quantize_bf16(qmat *out, int type, const uint16_t *w, int rows, int cols);
/* The same in bands of rows (load-time quantization without an f32 copy of the whole matrix):
 * qmat_alloc makes *out's owned storage (rows x cols of type, uninitialised), then
 * qmat_quantize_rows quantizes rows [r0, r0+n) from the f32 rows w[n][cols]; the bands together
 * give exactly the bytes qmat_quantize gives. K3_ERR_NUMERIC names the matrix row and column. */
k3_status qmat_alloc(qmat *out, int type, int rows, int cols);
k3_status qmat_quantize_rows(qmat *m, int r0, int n, const float *w);
/* Free what qmat_quantize allocated (nothing for a view) and zero *m. NULL is fine. */
void qmat_free(qmat *m);
/* Decode row r of any format to f32 (out[cols]); the oracle for the quantization tests. */
void qmat_dequant_row(const qmat *m, int r, float *out);

/* ---- kernels (kern.c) -------------------------------------------------------------------- */

/* y[rows] = W x[cols]. */
void qmat_matvec(const qmat *m, const float *x, float *y);
/* Y[n][rows] = W X[n][cols]: n input vectors, each weight row read once for all n.
 * Column t of Y is bit-identical to qmat_matvec(m, X[t], .) at every level and every n (the
 * group order, kern-impl.h). */
void qmat_matmul(const qmat *m, const float *x, int n, float *y);
/* Y_i = W_i X for k matrices W_i (same cols) over the same n columns X[n][cols] into y[i][n][rows
 * of W_i]: each result bit-identical to qmat_matmul(W_i, X, n, .), but the activations are
 * quantized once for all of them when they share a type, and one OpenMP region runs them all. */
void qmat_matmul_many(const qmat *const *m, int k, const float *x, int n, float *const *y);

/* Kernel selection by instruction set, read once from the environment on first use:
 * K3_ISA=scalar|avx2|avx512|amx forces a level (unset: the best the CPU and OS support);
 * avx2 means the AVX2 kernels with AVX-VNNI integer dots where the CPU has them (K3_NOVNNI=1:
 * without). The older K3_NOAVX2=1 is K3_ISA=scalar. K3_IDOT=0 selects exact-float.
 * The setters override (tests, tools). All levels give the same IDOT bits at every column
 * count (one rounding order, kern-impl.h), the amx level's tiles included. */
enum kern_isa { KERN_SCALAR = 0, KERN_AVX2 = 1, KERN_AVX2_VNNI = 2, KERN_AVX512 = 3, KERN_AMX = 4 };
#define KERN_N_ISA 5
int kern_isa(void);
/* Select isa, falling back to what the CPU has (AMX -> AVX-512 -> VNNI -> AVX2 -> scalar).
 * Returns the isa in use. */
int kern_set_isa(int isa);
/* 1 when this CPU and OS run isa; else 0 and why (when not NULL) names the missing feature. */
int kern_isa_ok(int isa, char *why, size_t n);
/* The level selected when nothing asks for another: the best this CPU and OS run (amx on AMX
 * hardware, never its emulation; a refused tile permission then runs avx512). */
int kern_isa_best(void);
/* Short name of isa ("scalar", "avx2", "avx2+avx-vnni", "avx512-vnni", "amx-int8"). */
const char *kern_isa_name(int isa);
/* Check K3_ISA / K3_NOAVX2 / K3_NOVNNI and select the level they ask for: K3_ERR_ARG for an
 * unknown name, K3_ERR_UNSUPPORTED naming the missing CPU or OS feature for a level this
 * machine lacks (never an illegal instruction later). Called by k3_params_default. */
k3_status kern_isa_env(void);
/* Read the kernels' integer knobs (K3_PREFETCH, K3_KBLOCK, K3_MV_AHEAD, K3_ROWSPLIT, K3_IDOT,
 * K3_AMX_EMU, K3_AMX_DENY; kern-impl.h) again: K3_ERR_ARG naming the variable, the value and the
 * range for a value that is not an integer in range (nothing changes then); an unset one goes back
 * to its default. Called by k3_params_default, before kern_isa_env. */
k3_status kern_knobs_env(void);
int       kern_idot(void);
void      kern_set_idot(int on);
