/* kern-cpu.c: what instruction set the kernels may use on this CPU and OS, and which one runs.
 *
 * DESIGN
 * - Every level is checked from cpuid and, for the register state the OS must save, from
 *   xgetbv (XCR0): AVX needs the YMM state (XCR0 bits 1-2), AVX-512 the opmask and ZMM states
 *   (bits 5-7). A CPU that lists AVX-512 under an OS that does not save ZMM registers would
 *   fault on the first zmm instruction, so both must say yes. AMX-INT8 needs the tile state
 *   (bits 17-18) and, on Linux, arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) before the
 *   first tile instruction: selecting KERN_AMX asks for it once per process (the permission
 *   is process-wide; each thread loads its own tile configuration in the kernel). A refusal
 *   is a notice and the next level down (avx512), never a SIGILL. K3_ISA=amx on a CPU without
 *   AMX is an error naming the missing feature.
 * - AMX is the default level where the hardware has it (every level computes the same bits: the
 *   group order of kern-impl.h); the emulation (K3_AMX_EMU=1) only when K3_ISA=amx asks for it.
 * - Test hooks: K3_AMX_EMU=1 runs the AMX level on the tile emulation (kern-amx-emu.c) where
 *   the CPU has the AVX-512 level; K3_AMX_DENY=1 makes the permission request a refusal.
 * - kern_isa_ok names the first missing feature, so K3_ISA asking for more than the machine has
 *   is an error message, never an illegal instruction.
 * - Selection (kern_isa) is read once from K3_ISA (K3_NOAVX2 / K3_NOVNNI, older names), then
 *   overridable by the setters. Unset: the best level that runs.
 * - Knobs: K3_IDOT, the prefetch and blocking distances and the test hooks are one table of
 *   integers with a range and a default each (knobs[]). kern_knobs_env (k3_params_default)
 *   reads them all and refuses a value that is not an integer in range, naming the variable,
 *   the value and the range, as kern_isa_env does for K3_ISA; a program that never calls it
 *   reads each on first use (a malformed one: a warning and the default).
 */
#include "kern-amx-tile.h"
#include "kern-impl.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* The CPU and OS features the levels need: enum name, the name a message gives a missing one, in the
 * order the message names a missing one. F(x) is the bit of feature x. */
#define CPU_FEATURES(X)                                                                                      \
    X(AVX2, "AVX2")                                                                                          \
    X(FMA, "FMA")                                                                                            \
    X(OS_YMM, "OS support for the AVX registers (XCR0 YMM state)")                                           \
    X(AVXVNNI, "AVX-VNNI")                                                                                   \
    X(AVX512F, "AVX-512F")                                                                                   \
    X(AVX512BW, "AVX-512BW")                                                                                 \
    X(AVX512VL, "AVX-512VL")                                                                                 \
    X(AVX512VNNI, "AVX-512 VNNI")                                                                            \
    X(OS_ZMM, "OS support for the AVX-512 registers (XCR0 opmask/ZMM state)")                                \
    X(AMX_TILE, "AMX-TILE")                                                                                  \
    X(AMX_INT8, "AMX-INT8")                                                                                  \
    X(OS_TILE, "OS support for the AMX tile state (XCR0 XTILECFG/XTILEDATA)")

enum {
#define X(id, name) FB_##id,
    CPU_FEATURES(X)
#undef X
        FB_N
};
#define F(id) (1u << FB_##id)

static const char *const feat_names[FB_N] = {
#define X(id, name) name,
    CPU_FEATURES(X)
#undef X
};

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned cpu_features(void) {
    static _Atomic unsigned cached = 0; /* bit 31: computed */
    unsigned                v      = atomic_load(&cached);
    if (v)
        return v & 0x7fffffffu;
    unsigned a, b, c, d, f = 0;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
        if (c & (1u << 12))
            f |= F(FMA);
        if (osxsave && avx) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            if ((lo & 0x6) == 0x6)
                f |= F(OS_YMM);
            if ((lo & 0xE6) == 0xE6)
                f |= F(OS_ZMM);
            if ((lo & 0x60000u) == 0x60000u)
                f |= F(OS_TILE);
        }
    }
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f |= (b & (1u << 5)) ? F(AVX2) : 0;
        f |= (b & (1u << 16)) ? F(AVX512F) : 0;
        f |= (b & (1u << 30)) ? F(AVX512BW) : 0;
        f |= (b & (1u << 31)) ? F(AVX512VL) : 0;
        f |= (c & (1u << 11)) ? F(AVX512VNNI) : 0;
        f |= (d & (1u << 24)) ? F(AMX_TILE) : 0;
        f |= (d & (1u << 25)) ? F(AMX_INT8) : 0;
        unsigned max7 = a;
        if (max7 >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            f |= (a & (1u << 4)) ? F(AVXVNNI) : 0;
        }
    }
    atomic_store(&cached, f | 0x80000000u);
    return f;
}
#else
static unsigned cpu_features(void) {
    return 0;
}
#endif

static unsigned isa_needs(int isa) {
    const unsigned avx2 = F(AVX2) | F(FMA) | F(OS_YMM);
    const unsigned z    = avx2 | F(AVX512F) | F(AVX512BW) | F(AVX512VL) | F(AVX512VNNI) | F(OS_ZMM);
    switch (isa) {
    case KERN_SCALAR:
        return 0;
    case KERN_AVX2:
        return avx2;
    case KERN_AVX2_VNNI:
        return avx2 | F(AVXVNNI);
    case KERN_AVX512:
        return z;
    case KERN_AMX:
        return z | F(AMX_TILE) | F(AMX_INT8) | F(OS_TILE);
    }
    return ~0u;
}

int kern_isa_ok(int isa, char *why, size_t n) {
    unsigned need = isa_needs(isa), have = cpu_features();
#if defined(__clang__) && __clang_major__ < 16
    if (isa == KERN_AVX2_VNNI)
        have &= ~(unsigned)F(AVXVNNI); /* clang before 16 cannot build the AVX-VNNI twins */
#endif
    if (!KERN_BUILD_AVX512)
        have &= ~(unsigned)F(AVX512VNNI); /* this build has no AVX-512 twins */
    const int emu = kern_amx_emulated() && (have & F(AVX512VNNI));
    if (emu)
        have |= F(AMX_TILE) | F(AMX_INT8) | F(OS_TILE); /* the emulated tiles stand in */
    for (int i = 0; i < FB_N; i++)
        if ((need & (1u << i)) && !(have & (1u << i))) {
            if (why)
                snprintf(why, n, "this CPU lacks %s", feat_names[i]);
            return 0;
        }
    if (need == ~0u) {
        if (why)
            snprintf(why, n, "unknown kernel level %d", isa);
        return 0;
    }
    if (isa == KERN_AMX && !KERN_BUILD_AMX && !emu) {
        if (why)
            snprintf(why, n,
                     "this build has no AMX-INT8 tile kernels (its compiler lacks the AMX "
                     "intrinsics)");
        return 0;
    }
    return 1;
}

int kern_cpu_avx2(void) {
    return kern_isa_ok(KERN_AVX2, NULL, 0);
}
int kern_cpu_vnni(void) {
    return kern_isa_ok(KERN_AVX2_VNNI, NULL, 0);
}
int kern_cpu_avx512(void) {
    return kern_isa_ok(KERN_AVX512, NULL, 0);
}

static const char *const isa_names[KERN_N_ISA] = {"scalar", "avx2", "avx2+avx-vnni", "avx512-vnni",
                                                  "amx-int8"};

const char *kern_isa_name(int isa) {
    if (isa == KERN_AMX && kern_amx_emulated())
        return "amx-int8 (emulated tiles, K3_AMX_EMU=1)";
    return isa >= 0 && isa < KERN_N_ISA ? isa_names[isa] : "?";
}

/* ==== knobs ================================================================================ */

/* The integer knobs of the kernels: variable, range, default, and the value in use (-1: not read
 * yet). Read from the environment on first use, again at each kern_knobs_env (k3_params_default),
 * or set by a setter (tests, benchmarks). */
enum {
    KNOB_PREFETCH,
    KNOB_KBLOCK,
    KNOB_MV_AHEAD,
    KNOB_MV_SPLIT,
    KNOB_ROWSPLIT,
    KNOB_IDOT,
    KNOB_AMX_EMU,
    KNOB_AMX_DENY,
    KNOB_N
};

/* The name and range of each are its row of the settings table (k3-settings.h). */
static struct knob {
    enum k3_setting_id id;
    int                dflt;
    _Atomic int        v;
} knobs[KNOB_N] = {
    [KNOB_PREFETCH] = {K3_SETTING_PREFETCH, KERN_PREFETCH, -1},
    [KNOB_KBLOCK]   = {K3_SETTING_KBLOCK, KERN_KBLOCK, -1},
    [KNOB_MV_AHEAD] = {K3_SETTING_MV_AHEAD, KERN_MV_AHEAD, -1},
    [KNOB_MV_SPLIT] = {K3_SETTING_MV_SPLIT, KERN_MV_SPLIT, -1},
    [KNOB_ROWSPLIT] = {K3_SETTING_ROWSPLIT, 0, -1},
    [KNOB_IDOT]     = {K3_SETTING_IDOT, 1, -1},
    [KNOB_AMX_EMU]  = {K3_SETTING_AMX_EMU, 0, -1},
    [KNOB_AMX_DENY] = {K3_SETTING_AMX_DENY, 0, -1},
};

/* The knob's value, read on first use. A malformed value there (a program that never called
 * kern_knobs_env) is a warning and the default. */
static int knob(int i) {
    struct knob *k = &knobs[i];
    int          v = atomic_load(&k->v);
    if (v < 0) {
        v = k->dflt;
        if (k3_setting_env_int(k->id, &v))
            K3_LOG_WARN("%s; the default %d applies", k3_errmsg(), k->dflt);
        atomic_store(&k->v, v);
    }
    return v;
}

k3_status kern_knobs_env(void) {
    int v[KNOB_N];
    for (int i = 0; i < KNOB_N; i++) {
        v[i]         = knobs[i].dflt;
        k3_status st = k3_setting_env_int(knobs[i].id, &v[i]);
        if (st)
            return st;
    }
    for (int i = 0; i < KNOB_N; i++)
        atomic_store(&knobs[i].v, v[i]);
    return K3_OK;
}

int kern_amx_emulated(void) {
    return knob(KNOB_AMX_EMU);
}

/* ==== AMX tile permission ===================================================================== */

#define ARCH_GET_XCOMP_PERM_ 0x1022 /* <asm/prctl.h>, Linux 5.16 */
#define ARCH_REQ_XCOMP_PERM_ 0x1023
#define XFEATURE_XTILEDATA_ 18

static atomic_int amx_perm; /* 0 not asked, 1 granted, -1 refused */
static char       amx_why[160];

int kern_amx_permission(char *why, size_t n) {
    static atomic_flag busy = ATOMIC_FLAG_INIT;
    while (atomic_load(&amx_perm) == 0) {
        if (atomic_flag_test_and_set(&busy))
            continue; /* another thread is asking */
        int ok = 0;
        if (knob(KNOB_AMX_DENY))
            snprintf(amx_why, sizeof amx_why, "refused by K3_AMX_DENY=1 (test hook)");
        else if (kern_amx_emulated()) {
            amx_emu_grant(); /* the emulation's ARCH_REQ_XCOMP_PERM */
            ok = 1;
        } else {
#if defined(__linux__) && defined(SYS_arch_prctl)
            unsigned long bits = 0;
            if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) != 0)
                snprintf(amx_why, sizeof amx_why,
                         "arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) failed: %s", strerror(errno));
            else if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM_, &bits) != 0 ||
                     !(bits & (1ul << XFEATURE_XTILEDATA_)))
                snprintf(amx_why, sizeof amx_why, "arch_prctl(ARCH_GET_XCOMP_PERM) does not list XTILEDATA");
            else
                ok = 1;
#else
            snprintf(amx_why, sizeof amx_why,
                     "no way to ask this OS for the AMX tile state (Linux arch_prctl only)");
#endif
        }
        atomic_store(&amx_perm, ok ? 1 : -1);
        atomic_flag_clear(&busy);
    }
    const int ok = atomic_load(&amx_perm) > 0;
    if (!ok && why)
        snprintf(why, n, "%s", amx_why);
    return ok;
}

const char *k3_kernels(void) {
    return kern_isa_name(kern_isa());
}

/* ==== selection ============================================================================= */

static atomic_int sel_isa = -1; /* enum kern_isa, -1 = not read yet */

/* A 0/1 switch read at each call (K3_NOAVX2, K3_NOVNNI): dflt when unset; a malformed value counts
 * as dflt here, and kern_isa_env reports it. */
static int env_flag(enum k3_setting_id id, int dflt) {
    int v = dflt;
    return k3_setting_env_int(id, &v) ? dflt : v;
}

/* The level actually run for a request: AMX only with the tile permission (a refusal is a
 * notice, once, and the next level down). */
static int runnable(int isa) {
    if (isa >= KERN_AMX && kern_isa_ok(KERN_AMX, NULL, 0)) {
        char why[160];
        if (kern_amx_permission(why, sizeof why))
            return KERN_AMX;
        static atomic_int told;
        if (!atomic_exchange(&told, 1))
            K3_LOG_WARN("AMX-INT8: the kernel refused the tile state (%s); the AVX-512 VNNI kernels run",
                        why);
    }
    for (int v = isa > KERN_AVX512 ? KERN_AVX512 : isa; v > KERN_SCALAR; v--)
        if (kern_isa_ok(v, NULL, 0))
            return v;
    return KERN_SCALAR;
}

int kern_set_isa(int isa) {
    int v = runnable(isa < 0 ? KERN_SCALAR : isa);
    atomic_store(&sel_isa, v);
    return v;
}

int kern_isa_best(void) {
    /* AMX hardware first (the emulation only when asked for by name: K3_ISA=amx) */
    if (KERN_BUILD_AMX && !kern_amx_emulated() && kern_isa_ok(KERN_AMX, NULL, 0))
        return KERN_AMX;
    int best = KERN_AVX512;
    while (best > KERN_SCALAR && !kern_isa_ok(best, NULL, 0))
        best--;
    return best;
}

/* What the environment asks for: -1 = an unknown K3_ISA name (kern_isa_env reports it). */
static int env_isa(void) {
    const char *v = k3_setting_env_str(K3_SETTING_ISA);
    if (v) {
        static const char *const names[] = {"scalar", "avx2", NULL, "avx512", "amx"};
        for (int i = 0; i < KERN_N_ISA; i++)
            if (names[i] && !strcmp(v, names[i]))
                return i == KERN_AVX2 && !env_flag(K3_SETTING_NOVNNI, 0) && kern_cpu_vnni() ? KERN_AVX2_VNNI
                                                                                            : i;
        return -1;
    }
    if (env_flag(K3_SETTING_NOAVX2, 0))
        return KERN_SCALAR;
    int best = kern_isa_best();
    if (best == KERN_AVX2_VNNI && env_flag(K3_SETTING_NOVNNI, 0))
        best = KERN_AVX2;
    return best;
}

int kern_isa(void) {
    int v = atomic_load(&sel_isa);
    if (v >= 0)
        return v;
    int want = env_isa();
    return kern_set_isa(want < 0 ? KERN_AVX512 : want); /* a bad K3_ISA: kern_isa_env says so */
}

k3_status kern_isa_env(void) {
    int       flag;
    k3_status st;
    double    isa;
    if ((st = k3_setting_env_int(K3_SETTING_NOAVX2, &flag)) ||
        (st = k3_setting_env_int(K3_SETTING_NOVNNI, &flag)) || (st = k3_setting_env(K3_SETTING_ISA, &isa)))
        return st;
    const int want = env_isa();
    char      why[128];
    if (!kern_isa_ok(want, why, sizeof why))
        return k3_err(K3_ERR_UNSUPPORTED, "K3_ISA=%s: %s; levels this machine runs: %s%s%s%s",
                      k3_setting_env_str(K3_SETTING_ISA), why, "scalar",
                      kern_isa_ok(KERN_AVX2, NULL, 0) ? ", avx2" : "",
                      kern_isa_ok(KERN_AVX512, NULL, 0) ? ", avx512" : "",
                      kern_isa_ok(KERN_AMX, NULL, 0) ? ", amx" : "");
    kern_set_isa(want); /* amx: a refused permission is a notice and avx512 */
    return K3_OK;
}

void kern_set_idot(int on) {
    atomic_store(&knobs[KNOB_IDOT].v, on != 0);
}

int kern_idot(void) {
    return knob(KNOB_IDOT);
}

int kern_prefetch_bytes(void) {
    return knob(KNOB_PREFETCH);
}

int kern_rows_dynamic(void) {
    return knob(KNOB_ROWSPLIT);
}

void kern_set_rows_dynamic(int on) {
    atomic_store(&knobs[KNOB_ROWSPLIT].v, on != 0);
}

int kern_kblock_steps(void) {
    return knob(KNOB_KBLOCK);
}

int kern_mv_ahead(void) {
    return knob(KNOB_MV_AHEAD);
}

void kern_set_mv_ahead(int tiles) {
    atomic_store(&knobs[KNOB_MV_AHEAD].v, tiles < 0 ? 0 : tiles);
}

int kern_mv_split(void) {
    return knob(KNOB_MV_SPLIT);
}

void kern_set_mv_split(int on) {
    atomic_store(&knobs[KNOB_MV_SPLIT].v, on != 0);
}
