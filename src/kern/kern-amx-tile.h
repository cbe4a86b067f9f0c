/* kern-amx-tile.h: the AMX tile instructions the AMX kernels (kern-amx.c) use, real or emulated.
 *
 * DESIGN
 * - kern-amx.c is compiled three times: as itself (KERN_AMX_EMU 0: the KT_* macros are the AMX
 *   intrinsics, for a CPU with AMX-TILE and AMX-INT8), from kern-amx-notile.c (KERN_AMX_EMU 2:
 *   no-ops, for k3-bench amx's measure of the work around the tiles) and from kern-amx-emu.c
 *   (KERN_AMX_EMU 1:
 *   the KT_* macros call a scalar emulation of the tile registers, so the very same kernel
 *   source runs and is tested on a CPU without AMX).
 * - The emulation follows the SDM's pseudo-code (palette 1: 8 tiles of at most 16 rows x 64
 *   bytes; rows/colsb per tile from the LDTILECFG operand; write_row_and_zero and
 *   zero_upper_rows on every tile write; int32 accumulation that wraps around; the VNNI
 *   grouping of B: dword k of an A row meets row k of B). What would be a fault on hardware
 *   is a fault of the emulation, with the instruction named: an instruction before the
 *   process asked for the tile state (ARCH_REQ_XCOMP_PERM; Linux: SIGILL), a tile
 *   instruction with no configuration loaded in this thread (#UD), an invalid LDTILECFG operand
 *   (#GP), TDPB*D operands whose shapes do not chain (#UD). The emulation is stricter than the
 *   SDM in one place, marked in kern-amx-emu.c: loading or storing a tile whose configuration
 *   is empty (rows = colsb = 0) faults, because a kernel that does it has a wrong config.
 *   Every emulated load and store is a memcpy of exactly the bytes the instruction touches,
 *   so AddressSanitizer sees a tile load past the end of a buffer.
 * - The tile state of the emulation is per thread (_Thread_local, as the registers are); the
 *   permission is per process (Linux: ARCH_REQ_XCOMP_PERM is process-wide).
 * - The real macros put a compiler barrier before LDTILECFG and TILELOADD: GCC's intrinsics
 *   declare no memory input for TILELOADD and only 8 bytes for LDTILECFG, so the compiler could
 *   otherwise sink the stores that fill a tile buffer or the config past the instruction.
 */
#pragma once
#include <assert.h>
#include <stddef.h>
#include <stdint.h>

/* The 64-byte LDTILECFG operand, palette 1 (SDM table "Memory Area Layout"). */
typedef struct amx_tilecfg {
    uint8_t  palette;      /* 1; 0 = release (init state)                 */
    uint8_t  start_row;    /* restart row of an interrupted load/store; 0 */
    uint8_t  reserved[14]; /* must be zero                                */
    uint16_t colsb[16];    /* bytes per row of tmm0..7; 8..15 must be 0   */
    uint8_t  rows[16];     /* rows of tmm0..7; 8..15 must be 0            */
} amx_tilecfg;
static_assert(sizeof(amx_tilecfg) == 64, "LDTILECFG reads 64 bytes");

enum { AMX_TILES = 8, AMX_MAX_ROWS = 16, AMX_ROW_BYTES = 64 };

/* ---- the emulation (kern-amx-emu.c) ---------------------------------------------------------
 * Always declared: the tests drive it directly. */
void amx_emu_ldtilecfg(const void *cfg);
void amx_emu_tileloadd(int t, const void *base, long stride);
void amx_emu_tilestored(int t, void *base, long stride);
void amx_emu_tilezero(int t);
void amx_emu_tdpbssd(int c, int a, int b);
void amx_emu_tdpbusd(int c, int a, int b);
void amx_emu_tilerelease(void);
/* The emulated ARCH_REQ_XCOMP_PERM(XFEATURE_XTILEDATA): grants the tile state to the process;
 * amx_emu_revoke takes it back (tests only). */
void amx_emu_grant(void);
void amx_emu_revoke(void);
/* Faults: by default an emulated fault prints the instruction and the reason and aborts (as
 * the signal would end the process). amx_emu_trap(1): count them instead and skip the faulting
 * instruction (tests). amx_emu_faults returns the count since the last call and copies the
 * first message into msg[n], then resets. */
void amx_emu_trap(int on);
long amx_emu_faults(char *msg, size_t n);
/* 1 when this thread has a configuration loaded (TILES_CONFIGURED). */
int amx_emu_configured(void);
/* Row r of tile t as the register holds it (64 bytes), for the tests. */
const uint8_t *amx_emu_row(int t, int r);

#if KERN_AMX_EMU == 2 /* kern-amx-notile.c: no tiles at all (a benchmark of the work around them) */
#define KT_LOADCFG(cfg) ((void)(cfg))
#define KT_LOAD(t, base, stride) ((void)(base), (void)(stride))
#define KT_STORE(t, base, stride) ((void)(base), (void)(stride))
#define KT_ZERO(t) ((void)0)
#define KT_DPBSSD(c, a, b) ((void)0)
#define KT_DPBUSD(c, a, b) ((void)0)
#define KT_RELEASE() ((void)0)
#elif KERN_AMX_EMU
#define KT_LOADCFG(cfg) amx_emu_ldtilecfg(cfg)
#define KT_LOAD(t, base, stride) amx_emu_tileloadd(t, base, stride)
#define KT_STORE(t, base, stride) amx_emu_tilestored(t, base, stride)
#define KT_ZERO(t) amx_emu_tilezero(t)
#define KT_DPBSSD(c, a, b) amx_emu_tdpbssd(c, a, b)
#define KT_DPBUSD(c, a, b) amx_emu_tdpbusd(c, a, b)
#define KT_RELEASE() amx_emu_tilerelease()
#else
#include <immintrin.h>
#define KT_BARRIER() __asm__ volatile("" ::: "memory")
#define KT_LOADCFG(cfg)                                                                                      \
    do {                                                                                                     \
        KT_BARRIER();                                                                                        \
        _tile_loadconfig(cfg);                                                                               \
    } while (0)
#define KT_LOAD(t, base, stride)                                                                             \
    do {                                                                                                     \
        KT_BARRIER();                                                                                        \
        _tile_loadd(t, base, stride);                                                                        \
    } while (0)
#define KT_STORE(t, base, stride) _tile_stored(t, base, stride)
#define KT_ZERO(t) _tile_zero(t)
#define KT_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define KT_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define KT_RELEASE() _tile_release()
#endif
