/* test-util.c: error messages, float conversions, the growable buffer, huge pages. (Settings from
 * the environment: test-settings.c.) */
#include "k3-impl.h"
#include "test.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "THPeligible:" of the mapping that holds p in /proc/self/smaps: 1 or 0, -1 when not found. */
static int thp_eligible(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char  line[512];
    int   in = 0, r = -1;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int           v;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && sscanf(line, "THPeligible: %d", &v) == 1) {
            r = v;
            break;
        }
    }
    if (f)
        fclose(f);
    return r;
}

/* Large k3_aligned_alloc blocks: 2 MiB aligned and advised MADV_HUGEPAGE unless K3_HUGEPAGES=0;
 * a malformed K3_HUGEPAGES refused naming it. */
static void check_hugepages(void) {
    setenv("K3_HUGEPAGES", "yes", 1);
    T_CHECK(k3_hugepages_init() == K3_ERR_ARG && !strcmp(k3_errmsg(), "K3_HUGEPAGES: 'yes' is not 0 or 1"),
            "K3_HUGEPAGES=yes refused: '%s'", k3_errmsg());
    unsetenv("K3_HUGEPAGES");
    T_CHECK(k3_hugepages_init() == K3_OK, "K3_HUGEPAGES unset: on");
    const size_t big = (size_t)9 << 20, huge = (size_t)2 << 20;
    char        *p = k3_aligned_alloc(64, big), *q = k3_aligned_alloc(64, 4096);
    T_CHECK(p && (uintptr_t)p % huge == 0, "a 9 MiB block is 2 MiB aligned (%p)", (void *)p);
    T_CHECK(q && (uintptr_t)q % 64 == 0, "a 4 KiB block keeps the asked alignment");
    if (p)
        memset(p, 1, big); /* mapped, so smaps lists it */
    char  mode[128] = "";
    FILE *f         = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f))
            mode[0] = 0;
        fclose(f);
    }
    const int madvise_mode = strstr(mode, "[madvise]") != NULL;
    if (!madvise_mode) {
        T_SKIP("THPeligible of an advised block: transparent huge pages are '%.*s', not [madvise], so the "
               "advice cannot be told apart",
               (int)strcspn(mode, "\n"), mode[0] ? mode : "absent");
    } else {
        T_CHECK(p && thp_eligible(p) == 1, "the 9 MiB block is advised MADV_HUGEPAGE (THPeligible %d)",
                p ? thp_eligible(p) : -1);
        setenv("K3_HUGEPAGES", "0", 1);
        T_CHECK(k3_hugepages_init() == K3_OK, "K3_HUGEPAGES=0 accepted");
        char *r = k3_aligned_alloc(64, big);
        if (r)
            memset(r, 1, big);
        T_CHECK(r && thp_eligible(r) == 0, "K3_HUGEPAGES=0: a 9 MiB block is not advised (THPeligible %d)",
                r ? thp_eligible(r) : -1);
        free(r);
        unsetenv("K3_HUGEPAGES");
        k3_hugepages_init();
    }
    free(p);
    free(q);
}

static const char *name_at(const void *names, size_t i) {
    return ((const char *const *)names)[i];
}

/* k3_names: the one duplicate-name table of the format code (index, headers, st-write). */
static void check_names(void) {
    enum { N = 5000 };
    static char        buf[N][16];
    static const char *names[N + 1];
    for (int i = 0; i < N; i++) {
        snprintf(buf[i], sizeof buf[i], "w.%d", i);
        names[i] = buf[i];
    }
    k3_names t = {.name_of = name_at, .ctx = names};
    T_CHECK(k3_names_find(&t, "w.1") == -1, "an empty table finds nothing");
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += k3_names_add(&t, (size_t)i, NULL) != 0;
    T_CHECK(!bad && t.n == N && t.cap >= 2 * N,
            "%d distinct names added through its growth (%d refused, %zu "
            "slots)",
            N, bad, t.cap);
    int miss = 0;
    for (int i = 0; i < N; i++)
        miss += k3_names_find(&t, buf[i]) != i;
    T_CHECK(!miss, "each name finds its own item (%d wrong)", miss);
    T_CHECK(k3_names_find(&t, "w.5000") == -1 && k3_names_find(&t, "w.") == -1 && k3_names_find(&t, "") == -1,
            "names not added are not found");
    char again[16] = "w.4321";
    names[N]       = again; /* the same text at another address */
    size_t dup     = 0;
    T_CHECK(k3_names_add(&t, N, &dup) == 1 && dup == 4321 && t.n == N,
            "a name added again is refused, naming the item that has it (%zu)", dup);
    k3_names_free(&t);
    T_CHECK(!t.slot && !t.cap && !t.n && k3_names_find(&t, "w.1") == -1, "freed: empty again");
}

/* k3_grow, the one doubling growth of the engine's arrays: capacities first, 2 first, ... or
 * twice the last; what it holds kept; NULL with the array and capacity untouched past INT_MAX
 * elements or SIZE_MAX bytes (overflow checked, never a short allocation). */
static void grow_checks(void) {
    int  cap = 0, *a = k3_grow(NULL, &cap, 1, sizeof *a, 4), ok = a && cap == 4;
    int *same = a ? k3_grow(a, &cap, 4, sizeof *a, 4) : NULL;
    ok        = ok && same == a && cap == 4;
    for (int i = 0; ok && i < 4; i++)
        a[i] = i * 7;
    int *b = ok ? k3_grow(a, &cap, 9, sizeof *b, 4) : NULL; /* 4 -> 8 -> 16 */
    ok     = ok && b && cap == 16 && b[3] == 21;
    a      = b ? b : a;
    T_CHECK(ok, "k3_grow: 4 from nothing, kept at 4 for 4, 16 for 9 (twice, twice), contents kept (cap %d)",
            cap);
    int   big = INT_MAX / 2 + 1;
    void *n1  = k3_grow(a, &big, (size_t)INT_MAX + 1, 1, 4);
    int   c2  = 1 << 20;
    void *n2  = k3_grow(a, &c2, (size_t)c2 + 1, SIZE_MAX / 1024, 4);
    T_CHECK(!n1 && big == INT_MAX / 2 + 1 && !n2 && c2 == 1 << 20,
            "k3_grow: NULL past INT_MAX elements and past SIZE_MAX bytes, the capacity untouched");
    free(a);
}

/* The bound's edge (k3_grow_max, under k3_grow and k3_grow_z): a doubling that would pass max
 * stops at max itself when need fits there (it was refused: an int array stopped at 2^30, the
 * last power of two below INT_MAX, though need fitted below INT_MAX); need past max is refused. */
static void grow_max_checks(void) {
    size_t cap = 0;
    char  *a   = k3_grow_max(NULL, &cap, 64, 1, 64, 100);
    char  *b   = a ? k3_grow_max(a, &cap, 65, 1, 64, 100) : NULL; /* 128 would pass 100 */
    T_CHECK(b && cap == 100, "k3_grow_max: 64 doubled past max 100 for 65 is 100 (cap %zu)", cap);
    a          = b ? b : a;
    char *same = a ? k3_grow_max(a, &cap, 100, 1, 64, 100) : NULL;
    char *past = a ? k3_grow_max(a, &cap, 101, 1, 64, 100) : NULL;
    T_CHECK(same == a && !past && cap == 100, "k3_grow_max: 100 of max 100 fits; 101 is refused, cap kept");
    size_t c0 = 0;
    char  *f  = k3_grow_max(NULL, &c0, 3, 1, 256, 100);
    T_CHECK(f && c0 == 100, "k3_grow_max: a first past max starts at max (cap %zu)", c0);
    size_t c3 = 3;
    char  *g  = k3_grow_max(NULL, &c3, 50, 1, 3, 100); /* 3, 6, ..., 48, 96 */
    T_CHECK(g && c3 == 96, "k3_grow_max: doubling that stays below max is unchanged (cap %zu)", c3);
    free(a);
    free(f);
    free(g);
}

/* k3_grow_z, the same doubling for size_t capacities (json, k3_ids, st-write, wmap, the
 * markdown layout): capacities, contents kept, and NULL with the array and capacity untouched,
 * no allocation tried, where need passes PTRDIFF_MAX bytes (a hand-written `cap * 2` wraps near
 * SIZE_MAX, to a short allocation or a loop that never ends). */
static void grow_z_checks(void) {
    size_t    cap  = 0;
    uint64_t *a    = k3_grow_z(NULL, &cap, 1, sizeof *a, 8);
    uint64_t *same = a ? k3_grow_z(a, &cap, 8, sizeof *a, 8) : NULL;
    int       ok   = a && same == a && cap == 8;
    for (size_t i = 0; ok && i < 8; i++)
        a[i] = i * 11;
    uint64_t *b = ok ? k3_grow_z(a, &cap, 17, sizeof *b, 8) : NULL; /* 8 -> 16 -> 32 */
    ok          = ok && b && cap == 32 && b[0] == 0 && b[7] == 77;
    a           = b ? b : a;
    T_CHECK(ok, "k3_grow_z: 8 from nothing, kept at 8 for 8, 32 for 17, contents kept (cap %zu)", cap);
    size_t c0 = 0;
    char  *c  = k3_grow_z(NULL, &c0, 5, 1, 0);
    T_CHECK(c && c0 == 8, "k3_grow_z: first 0 starts from 1 (1, 2, 4, 8 for 5: %zu)", c0);
    free(c);
    size_t half = SIZE_MAX / sizeof *a / 2 + 1, past = SIZE_MAX / 2 + 1, zero = 0;
    void  *n1 = k3_grow_z(a, &half, half + 1, sizeof *a, 8);
    void  *n2 = k3_grow_z(a, &past, past + 1, 1, 8);
    void  *n3 = k3_grow_z(NULL, &zero, SIZE_MAX, 1, 1);
    T_CHECK(!n1 && half == SIZE_MAX / sizeof *a / 2 + 1 && !n2 && past == SIZE_MAX / 2 + 1 && !n3 && !zero,
            "k3_grow_z: NULL past PTRDIFF_MAX / elem elements and past SIZE_MAX, the capacity untouched");
    T_CHECK(a[7] == 77, "k3_grow_z: a refused growth leaves the array as it was");
    free(a);
}

int main(void) {
    grow_checks();
    grow_max_checks();
    grow_z_checks();
    k3_status st = k3_err(K3_ERR_FORMAT, "%s: tensor '%s' is bad", "x.safetensors", "w");
    T_CHECK(st == K3_ERR_FORMAT, "k3_err returns its status");
    T_CHECK(!strcmp(k3_errmsg(), "x.safetensors: tensor 'w' is bad"), "message recorded (%s)", k3_errmsg());
    k3_err_prefix("loading %s", "dir");
    T_CHECK(!strcmp(k3_errmsg(), "loading dir: x.safetensors: tensor 'w' is bad"), "prefix (%s)",
            k3_errmsg());
    T_CHECK(k3_bf16_to_f32(0x3f80) == 1.0f, "bf16 1.0");
    T_CHECK(k3_bf16_to_f32(k3_f32_to_bf16(-2.5f)) == -2.5f, "bf16 round trip -2.5");
    T_CHECK(k3_f32_to_bf16(1.00390625f) == 0x3f80, "bf16 ties to even (down)");
    T_CHECK(k3_f32_to_bf16(1.01171875f) == 0x3f82, "bf16 ties to even (up)");
    T_CHECK(k3_f16_to_f32(0x3c00) == 1.0f, "f16 1.0");
    T_CHECK(k3_f16_to_f32(0x0001) == 0x1p-24f, "f16 smallest subnormal");
    T_CHECK(k3_f16_to_f32(0xc500) == -5.0f, "f16 -5");
    T_CHECK(isinf(k3_f16_to_f32(0x7c00)), "f16 inf");
    /* the growable buffer (k3_buf): appends, growth, NUL termination, a refused size */
    k3_buf b  = {0};
    int    ok = 1;
    for (int i = 0; i < 1000; i++)
        ok &= k3_buf_add(&b, "abc", 3) == 0;
    T_CHECK(ok && b.n == 3000 && b.cap > 3000 && b.p[2999] == 'c' && b.p[3000] == 0 &&
                !strncmp(b.p, "abcabc", 6),
            "k3_buf_add: 1000 appends of 3 bytes, grown and NUL-terminated (n %zu)", b.n);
    T_CHECK(k3_buf_add(&b, "x", SIZE_MAX / 2) == -1 && b.oom && b.n == 3000 && b.p[3000] == 0,
            "k3_buf_add: an impossible size fails, sets oom and leaves the buffer as it was");
    T_CHECK(k3_buf_add(&b, "", 0) == 0 && b.n == 3000, "k3_buf_add: an empty append is fine");
    free(b.p);
    check_names();
    check_hugepages();
    return t_done();
}
