/* bench-cold.c: reading memory that has been left untouched, in 4 KiB pages and in huge pages
 * (K3_HUGEPAGES, src/base/util.c).
 *
 * Some machines make memory slow to read again after it has sat untouched: a virtual machine
 * whose hypervisor tracks guest pages (shadow paging), or a kernel whose DAMON sampling clears the
 * pages' accessed bits; the first read of each page then traps. On a 2-vCPU VM with a kdamond
 * sampling physical memory, the slice preset's routed experts (used once every few tokens) ran at
 * 0.5 GB/s in 4 KiB pages. Only run when asked (`k3-bench cold`): it sleeps.
 *
 *   K3_BENCH_COLD_S=N   seconds left untouched (default 30, 1..600)
 *
 * Results (one thread, a 1 GiB buffer each, filled, left alone N seconds, then read once)
 *   mem_cold_4k_t1     GB/s of that first read in 4 KiB pages (MADV_NOHUGEPAGE); ref: the same
 *                      buffer read again at once (warm)
 *   mem_cold_huge_t1   the same for a buffer advised MADV_HUGEPAGE (what k3_aligned_alloc gives a
 *                      block of 4 MiB or more); ref: its warm read
 */
#include "bench.h"
#include "k3-impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int bench_cold(void); /* registered in bench-main.c */

static uint64_t sum_read(const uint64_t *p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; i += 8) /* one load per 64-byte line: the page walk is what counts */
        s += p[i];
    return s;
}

int bench_cold(void) {
    if (!bench_asked("cold")) {
        printf("# cold: skipped (it sleeps; run `k3-bench cold`)\n");
        return 0;
    }
    int secs = (int)k3_setting(K3_SETTING_BENCH_COLD_S)->def;
    if (bench_env_int(K3_SETTING_BENCH_COLD_S, &secs))
        return 1;
    const size_t n = (size_t)1 << 30, align = (size_t)2 << 20;
    uint64_t    *b[2];
    for (int i = 0; i < 2; i++) {
        if (posix_memalign((void **)&b[i], align, n)) {
            fprintf(stderr, "bench-cold: cannot allocate 1 GiB\n");
            return 1;
        }
        (void)madvise(b[i], n, i ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        for (size_t j = 0; j < n / 8; j++)
            b[i][j] = j * 0x9E3779B97F4A7C15ull;
    }
    printf("# cold: two 1 GiB buffers (4 KiB pages, huge pages), filled, untouched for %d s\n", secs);
    fflush(stdout);
    sleep((unsigned)secs);
    static const char *const name[2] = {"mem_cold_4k_t1", "mem_cold_huge_t1"};
    uint64_t                 keep    = 0;
    for (int i = 0; i < 2; i++) { /* the 4 KiB buffer first: the huge one waits a few ms more */
        double t0 = k3_time();
        keep += sum_read(b[i], n / 8);
        double cold = k3_time() - t0;
        t0          = k3_time();
        keep += sum_read(b[i], n / 8);
        double warm = k3_time() - t0;
        bench_report(name[i], (double)n / cold / 1e9, "GB/s", (double)n / warm / 1e9, "GB/s(warm)");
    }
    printf("# cold: checksum %llu\n", (unsigned long long)(keep & 1));
    free(b[0]);
    free(b[1]);
    return 0;
}
