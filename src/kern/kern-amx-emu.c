/* kern-amx-emu.c: a scalar emulation of the AMX tile registers and of the instructions the AMX
 * kernels use, and the AMX kernels of kern-amx.c compiled a second time on top of it
 * (kern_amx_matmul_emu), so they run and are tested bit for bit on a CPU without AMX.
 *
 * DESIGN
 * - Each instruction is the SDM's pseudo-code, palette 1 (max_names 8, bytes_per_row 64,
 *   max_rows 16; TMUL maxk 16 rows of B, maxn 64 bytes), in the SDM's words where it can be:
 *   write_row_and_zero, zero_upper_rows, zero_tilecfg_start, DPBD. Tile registers and the
 *   configuration are per thread; the permission (ARCH_REQ_XCOMP_PERM) per process.
 * - A fault names the instruction and the reason, then aborts, or, under amx_emu_trap(1), is
 *   counted and the instruction does nothing (so a test can show that a broken kernel faults).
 * - Arithmetic of TDPB*D is done in uint32_t: the int32 accumulation wraps around as the
 *   hardware does, without the undefined behaviour of signed overflow in C.
 */
#define KERN_AMX_EMU 1 /* the KT_* macros of kern-amx-tile.h call the emulation */
#include "kern-amx-tile.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* palette 1 */
enum {
    MAX_NAMES     = AMX_TILES,
    BYTES_PER_ROW = AMX_ROW_BYTES,
    MAX_ROWS      = AMX_MAX_ROWS,
    TMUL_MAXK     = 16,
    TMUL_MAXN     = 64
};

typedef struct {
    int      configured; /* TILES_CONFIGURED                                   */
    uint8_t  palette_id, start_row;
    uint16_t colsb[MAX_NAMES];
    uint8_t  rows[MAX_NAMES];
    uint8_t  valid[MAX_NAMES];
    uint8_t  t[MAX_NAMES][MAX_ROWS][BYTES_PER_ROW]; /* tmm0..7 */
} tile_state;

static _Thread_local tile_state R;    /* this thread's registers (zero: init state) */
static atomic_int               perm; /* the process asked for XTILEDATA and got it  */
static atomic_int               trap;
static atomic_long              nfaults;
static char                     first_msg[200];
static atomic_int               have_msg;

void amx_emu_grant(void) {
    atomic_store(&perm, 1);
}
void amx_emu_revoke(void) {
    atomic_store(&perm, 0);
}
void amx_emu_trap(int on) {
    atomic_store(&trap, on != 0);
}
int amx_emu_configured(void) {
    return R.configured;
}

const uint8_t *amx_emu_row(int t, int r) {
    return R.t[t & 7][r & 15];
}

long amx_emu_faults(char *msg, size_t n) {
    long k = atomic_exchange(&nfaults, 0);
    if (msg && n)
        snprintf(msg, n, "%s", atomic_load(&have_msg) ? first_msg : "");
    first_msg[0] = 0;
    atomic_store(&have_msg, 0);
    return k;
}

/* Returns 1 (the caller skips the instruction) under amx_emu_trap; else does not return. */
static int fault(const char *insn, const char *kind, const char *why) {
    if (atomic_load(&trap)) {
        atomic_fetch_add(&nfaults, 1);
        if (!atomic_exchange(&have_msg, 1))
            snprintf(first_msg, sizeof first_msg, "%s: %s: %s", insn, kind, why);
        return 1;
    }
    fprintf(stderr, "amx-emu: %s: %s: %s\n", insn, kind, why);
    abort();
}

/* What every tile instruction checks first: the tile state was granted to the process (on
 * Linux the first tile instruction without it is a SIGILL) and, except LDTILECFG and
 * TILERELEASE, a configuration is loaded (#UD otherwise). */
static int bad_state(const char *insn, int need_config) {
    if (!atomic_load(&perm))
        return fault(insn, "SIGILL", "the process did not get ARCH_REQ_XCOMP_PERM(XFEATURE_XTILEDATA) first");
    if (need_config && !R.configured)
        return fault(insn, "#UD", "no tile configuration loaded in this thread (TILES_CONFIGURED = 0)");
    return 0;
}

static int bad_tile(const char *insn, int t) {
    if (t < 0 || t >= MAX_NAMES)
        return fault(insn, "#UD", "tile register number past the palette's max_names");
    return 0;
}

static void zero_all_tile_data(void) {
    memset(R.t, 0, sizeof R.t);
}

static void write_row_and_zero(int t, int row, const uint8_t *data, int nbytes) {
    memcpy(R.t[t][row], data, (size_t)nbytes);
    memset(R.t[t][row] + nbytes, 0, (size_t)(BYTES_PER_ROW - nbytes));
}

static void zero_upper_rows(int t, int row) {
    for (int r = row; r < MAX_ROWS; r++)
        memset(R.t[t][r], 0, BYTES_PER_ROW);
}

static void zero_tilecfg_start(void) {
    R.start_row = 0;
}

void amx_emu_ldtilecfg(const void *mem) {
    if (bad_state("LDTILECFG", 0))
        return;
    uint8_t buf[64];
    memcpy(buf, mem, 64);
    const char *err = NULL;
    tile_state  tmp = {0};
    tmp.palette_id  = buf[0];
    if (tmp.palette_id > 1)
        err = "palette_id > max_palette (1)";
    if (tmp.palette_id != 0 && !err) {
        tmp.start_row = buf[1];
        for (int i = 2; i < 16 && !err; i++)
            if (buf[i])
                err = "reserved bytes 2-15 not zero";
        for (int n = 0; n < MAX_NAMES && !err; n++) {
            tmp.colsb[n] = (uint16_t)(buf[16 + 2 * n] | buf[17 + 2 * n] << 8);
            if (tmp.colsb[n] > BYTES_PER_ROW)
                err = "colsb > bytes_per_row (64)";
        }
        for (int i = 16 + 2 * MAX_NAMES; i < 48 && !err; i++)
            if (buf[i])
                err = "colsb of tiles past max_names (bytes 32-47) not zero";
        for (int n = 0; n < MAX_NAMES && !err; n++) {
            tmp.rows[n] = buf[48 + n];
            if (tmp.rows[n] > MAX_ROWS)
                err = "rows > max_rows (16)";
        }
        for (int i = 48 + MAX_NAMES; i < 64 && !err; i++)
            if (buf[i])
                err = "rows of tiles past max_names (bytes 56-63) not zero";
        for (int n = 0; n < MAX_NAMES && !err; n++) {
            if (tmp.rows[n] && tmp.colsb[n])
                tmp.valid[n] = 1;
            else if (tmp.rows[n] || tmp.colsb[n])
                err = "a tile with rows or colsb zero but not both";
        }
    }
    if (err) {
        fault("LDTILECFG", "#GP", err);
        return;
    }
    if (tmp.palette_id == 0) { /* init state: release every tile */
        memset(&R, 0, sizeof R);
        return;
    }
    tmp.configured = 1;
    memcpy(&R, &tmp, offsetof(tile_state, t));
    zero_all_tile_data();
}

void amx_emu_tilerelease(void) {
    if (bad_state("TILERELEASE", 0))
        return;
    memset(&R, 0, sizeof R); /* TILECFG and TILEDATA to the init state */
}

/* The emulation's one check past the SDM (see the header): the tile must have a shape. */
static int bad_shape(const char *insn, int t) {
    if (!R.valid[t])
        return fault(insn, "#UD (emulation: stricter than the SDM)",
                     "the tile's configuration is empty (rows = colsb = 0)");
    return 0;
}

void amx_emu_tileloadd(int t, const void *base, long stride) {
    if (bad_state("TILELOADD", 1) || bad_tile("TILELOADD", t) || bad_shape("TILELOADD", t))
        return;
    const int nbytes = R.colsb[t];
    int       start  = R.start_row;
    zero_upper_rows(t, start);
    while (start < R.rows[t]) {
        uint8_t row[BYTES_PER_ROW];
        memcpy(row, (const uint8_t *)base + (ptrdiff_t)start * stride, (size_t)nbytes); /* read_memory */
        write_row_and_zero(t, start, row, nbytes);
        start++;
    }
    zero_upper_rows(t, R.rows[t]);
    zero_tilecfg_start();
}

void amx_emu_tilestored(int t, void *base, long stride) {
    if (bad_state("TILESTORED", 1) || bad_tile("TILESTORED", t) || bad_shape("TILESTORED", t))
        return;
    for (int start = R.start_row; start < R.rows[t]; start++)
        memcpy((uint8_t *)base + (ptrdiff_t)start * stride, R.t[t][start], R.colsb[t]); /* write_memory */
    zero_tilecfg_start();
}

void amx_emu_tilezero(int t) {
    if (bad_state("TILEZERO", 1) || bad_tile("TILEZERO", t))
        return;
    for (int i = 0; i < MAX_ROWS; i++) /* the whole register, every row */
        memset(R.t[t][i], 0, BYTES_PER_ROW);
    zero_tilecfg_start();
}

/* DPBD over whole rows: c[m].dword[n] += the four products of the signed (as) or unsigned bytes
 * of a[m].dword[k] and the signed (bs) or unsigned bytes of b[k].dword[n], for k < K, m < M,
 * n < N (a, b: tile registers; c: the caller's copy of tsrcdest). A row of 16 dwords is one
 * vector of GCC's vector extension: one instruction per product at any -O (the sanitizer tree's
 * -O1 does not vectorize loops), no byte-by-byte access (each of which the sanitizers check).
 * Byte i of every dword of B's row k is lane n of bt[k][i], sign- or zero-extended by shifts,
 * the lanes past N zero. Products and sums are taken mod 2^32 in uint32_t, which gives the
 * hardware's bits in any order of the additions (every product is exact: |a * b| <= 2^15).
 * Byte by byte with a memcpy per dword, this was 86 % of an emulated --inspect. AVX-512 where
 * the CPU has it (the emulated AMX level needs it anyway), any x86-64 else. */
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef int32_t  i32x16 __attribute__((vector_size(64)));
_Static_assert(sizeof(u32x16) == BYTES_PER_ROW && TMUL_MAXN / 4 == 16,
               "a tile row is one vector of 16 dwords");
__attribute__((target_clones("avx512f", "default"))) static void
dpbd_rows(uint8_t (*c)[BYTES_PER_ROW], const uint8_t (*a)[BYTES_PER_ROW], const uint8_t (*b)[BYTES_PER_ROW],
          int M, int K, int N, int as, int bs) {
    const u32x16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const u32x16 live = (u32x16)(lane < (uint32_t)N); /* all ones in the lanes n < N */
    u32x16       bt[TMUL_MAXK][4];
    for (int k = 0; k < K; k++) {
        u32x16 w;
        memcpy(&w, b[k], sizeof w);
        for (int i = 0; i < 4; i++)
            bt[k][i] = live & (bs ? (u32x16)((i32x16)(w << (24 - 8 * i)) >> 24) : w >> (8 * i) & 0xff);
    }
    for (int m = 0; m < M; m++) {
        u32x16   acc;
        uint32_t x[TMUL_MAXK];
        memcpy(&acc, c[m], sizeof acc);
        memcpy(x, a[m], sizeof x);
        for (int k = 0; k < K; k++)
            for (int i = 0; i < 4; i++) {
                const uint32_t v = as ? (uint32_t)(int32_t)(int8_t)(x[k] >> (8 * i)) : x[k] >> (8 * i) & 0xff;
                acc += v * bt[k][i];
            }
        memcpy(c[m], &acc, sizeof acc);
    }
}

/* TDPB[SU][SU]D tsrcdest, tsrc1, tsrc2 (C = m x n, A = m x k, B = k x n in dword pairs) with
 * the AMX-E4 checks of the shapes. */
static void tdpb(const char *insn, int c, int a, int b, int as, int bs) {
    if (bad_state(insn, 1) || bad_tile(insn, c) || bad_tile(insn, a) || bad_tile(insn, b))
        return;
    const char *err = NULL;
    if (c == a || c == b || a == b)
        err = "tsrcdest, tsrc1 and tsrc2 are not all different";
    else if (R.colsb[c] > TMUL_MAXN || R.colsb[b] > TMUL_MAXN)
        err = "tsrcdest/tsrc2 colsb > tmul_maxn";
    else if (R.colsb[a] / 4 > TMUL_MAXK || R.rows[b] > TMUL_MAXK)
        err = "k (tsrc1.colsb / 4, tsrc2.rows) > tmul_maxk";
    else if (R.rows[c] != R.rows[a])
        err = "tsrcdest.rows != tsrc1.rows";
    else if (R.colsb[a] / 4 != R.rows[b])
        err = "tsrc1.colsb / 4 != tsrc2.rows (the K of A and B differ)";
    else if (R.colsb[c] != R.colsb[b])
        err = "tsrcdest.colsb != tsrc2.colsb (the N of C and B differ)";
    if (err) {
        fault(insn, "#UD", err);
        return;
    }
    uint8_t tmp[MAX_ROWS][BYTES_PER_ROW];
    memcpy(tmp, R.t[c], sizeof tmp); /* tmp := tsrcdest.row[m], each m */
    dpbd_rows(tmp, (const uint8_t(*)[BYTES_PER_ROW])R.t[a], (const uint8_t(*)[BYTES_PER_ROW])R.t[b],
              R.rows[c], R.colsb[a] / 4, R.colsb[c] / 4, as, bs);
    for (int m = 0; m < R.rows[c]; m++)
        write_row_and_zero(c, m, tmp[m], R.colsb[c]);
    zero_upper_rows(c, R.rows[c]);
    zero_tilecfg_start();
}

void amx_emu_tdpbssd(int c, int a, int b) {
    tdpb("TDPBSSD", c, a, b, 1, 1);
}
void amx_emu_tdpbusd(int c, int a, int b) {
    tdpb("TDPBUSD", c, a, b, 0, 1);
}

/* ==== the AMX kernels on top of the emulation ================================================ */
#include "kern-amx.c"
