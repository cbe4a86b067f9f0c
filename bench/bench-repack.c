/* bench-repack.c: what a pre-quantized k3 container (tools/k3-repack.c) buys at start-up.
 *
 *   repack_startup  time from k3_model_open to the first token's logits (open, session, one
 *                   token fed) of the int8 container, ref: the BF16 source quantized at load
 *                   to the same bits (K3_BITS=K3_MLA_BITS=K3_HEAD_BITS=8); ratio < 1 is faster.
 *                   The target is a ratio <= 1/20 (start-up >= 20x faster).
 *   repack_startup_cpu  the same in CPU time (user + sys): on a shared machine the wall time
 *                   depends on the other processes, the CPU time much less.
 *   repack_private_dirty  private dirty memory (/proc/self/smaps_rollup Private_Dirty: heap
 *                   copies, not reclaimable) after that first token with K3_MMAP=1, ref: the same
 *                   container copied to the heap. Mapped shard pages show as Private_Clean
 *                   (page cache only this process maps: reclaimable), printed in a note.
 *
 * The model is the `slice` preset of k3-mkmodel (the release's widths, 4 layers, ~12 GB),
 * generated with k3-mkmodel and repacked with k3-repack (found next to k3-bench) under
 * $K3_BENCH_DIR (default /var/tmp/k3-bench-repack: a disk, not tmpfs), and deleted at the end
 * unless K3_BENCH_KEEP=1 (a kept directory is reused by the next run). Each measurement runs in
 * a forked child so the figures of one do not leak into the next; the source is measured once
 * (it is the slow one), the container as the median of three. The files are in the page cache
 * for every measurement (they were just written or read): the figures compare the load work,
 * not the disk.
 */
#include "bench.h"

#include "k3.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int bench_repack(void);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Private_Dirty (anonymous memory: heap copies, never reclaimable without swap) and
 * Private_Clean (file pages only this process maps: page cache, reclaimable) of this process,
 * in bytes, from /proc/self/smaps_rollup. */
static void private_bytes(double *dirty, double *clean) {
    *dirty = *clean = -1;
    FILE *f         = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return;
    char line[256];
    long v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "Private_Clean: %ld kB", &v) == 1)
            *clean = (double)v * 1024;
        if (sscanf(line, "Private_Dirty: %ld kB", &v) == 1)
            *dirty = (double)v * 1024;
    }
    fclose(f);
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

typedef struct result {
    double secs, cpu;    /* wall and CPU (user + sys) seconds to the first token */
    double dirty, clean; /* Private_Dirty, Private_Clean bytes then              */
    int    ok;
} result;

/* Open dir with the given environment, feed one token; in a child process. */
static result measure(const char *dir, const char *bits, int map) {
    result r = {0};
    int    fd[2];
    if (pipe(fd))
        return r;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        if (bits) {
            setenv("K3_BITS", bits, 1);
            setenv("K3_MLA_BITS", bits, 1);
            setenv("K3_HEAD_BITS", bits, 1);
        } else {
            unsetenv("K3_BITS");
            unsetenv("K3_MLA_BITS");
            unsetenv("K3_HEAD_BITS");
        }
        if (map)
            setenv("K3_MMAP", "1", 1);
        else
            unsetenv("K3_MMAP");
        result      c  = {0};
        double      t0 = now_s(), c0 = cpu_s();
        k3_params   p;
        k3_model   *m  = NULL;
        k3_session *s  = NULL;
        int32_t     id = 1;
        if (!k3_params_default(&p) && !k3_model_open(dir, &p, &m) && !k3_session_new(m, &s) &&
            !k3_session_feed(s, &id, 1) && k3_session_logits(s)) {
            c.secs = now_s() - t0;
            c.cpu  = cpu_s() - c0;
            private_bytes(&c.dirty, &c.clean);
            c.ok = 1;
        } else {
            fprintf(stderr, "# bench-repack: %s: %s\n", dir, k3_errmsg());
        }
        if (write(fd[1], &c, sizeof c) != (ssize_t)sizeof c)
            _exit(1);
        _exit(0);
    }
    close(fd[1]);
    if (pid > 0 && read(fd[0], &r, sizeof r) != (ssize_t)sizeof r)
        r.ok = 0;
    close(fd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return r;
}

static int run_cmd(const char *cmd) {
    printf("# %s\n", cmd);
    fflush(stdout);
    int rc = system(cmd);
    return rc == 0 ? 0 : -1;
}

int bench_repack(void) {
    if (!bench_want("repack_startup") && !bench_want("repack_private"))
        return 0;
    char    exe[PATH_MAX], bin[PATH_MAX], cmd[4 * PATH_MAX + 256];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return 1;
    exe[n] = 0;
    snprintf(bin, sizeof bin, "%s", exe);
    char *slash = strrchr(bin, '/');
    if (slash)
        *slash = 0;
    const char *base = k3_setting_env_str(K3_SETTING_BENCH_DIR);
    if (!base)
        base = "/var/tmp/k3-bench-repack";
    int keep = 0;
    if (bench_env_int(K3_SETTING_BENCH_KEEP, &keep))
        return 1;
    char src[PATH_MAX], dst[PATH_MAX], done[PATH_MAX + 16];
    snprintf(src, sizeof src, "%s/slice", base);
    snprintf(dst, sizeof dst, "%s/slice-q8", base);
    snprintf(done, sizeof done, "%s/.ready", base);
    struct stat sb;
    int         rc = 0;
    if (stat(done, &sb)) {
        snprintf(cmd, sizeof cmd,
                 "rm -rf '%s' && mkdir -p '%s' && '%s/k3-mkmodel' --preset slice --quiet '%s'", base, base,
                 bin, src);
        if (run_cmd(cmd))
            return 1;
        double t0 = now_s();
        snprintf(cmd, sizeof cmd, "'%s/k3-repack' '%s' '%s' --bits 8 --quiet", bin, src, dst);
        if (run_cmd(cmd))
            return 1;
        printf("# k3-repack --bits 8 of the slice preset: %.1f s\n", now_s() - t0);
        fflush(stdout);
        FILE *f = fopen(done, "w");
        if (f)
            fclose(f);
    }
    result s = measure(src, "8", 0);
    double t[3], c[3], tm[3], hd[3], hc[3], md[3], mc[3];
    int    ok = s.ok;
    for (int i = 0; i < 3 && ok; i++) {
        result h = measure(dst, NULL, 0), m = measure(dst, NULL, 1);
        ok   = h.ok && m.ok;
        t[i] = h.secs, c[i] = h.cpu, tm[i] = m.secs;
        hd[i] = h.dirty, hc[i] = h.clean, md[i] = m.dirty, mc[i] = m.clean;
    }
    if (!ok)
        rc = 1;
    else {
        double tc = bench_median(t, 3), cc = bench_median(c, 3), tcm = bench_median(tm, 3);
        double hdm = bench_median(hd, 3), hcm = bench_median(hc, 3), mdm = bench_median(md, 3),
               mcm = bench_median(mc, 3);
        printf("# slice preset, open to first token: source (BF16 quantized at load to int8) %.2f s "
               "wall, %.2f s CPU; int8 container %.2f s wall (%.1fx faster), %.2f s CPU (%.1fx); "
               "with K3_MMAP=1 %.2f s wall (%.1fx)\n",
               s.secs, s.cpu, tc, s.secs / tc, cc, s.cpu / cc, tcm, s.secs / tcm);
        printf("# private memory (MB) dirty / clean: source %.0f / %.0f, container on the heap %.0f / "
               "%.0f, K3_MMAP=1 %.0f / %.0f\n",
               s.dirty / 1e6, s.clean / 1e6, hdm / 1e6, hcm / 1e6, mdm / 1e6, mcm / 1e6);
        if (bench_want("repack_startup"))
            bench_report("repack_startup", tc, "s", s.secs, "s");
        if (bench_want("repack_startup_cpu"))
            bench_report("repack_startup_cpu", cc, "s", s.cpu, "s");
        if (bench_want("repack_private"))
            bench_report("repack_private_dirty", mdm / 1e6, "MB", hdm / 1e6, "MB");
    }
    if (!keep) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
        if (system(cmd) != 0)
            fprintf(stderr, "# bench-repack: could not remove %s\n", base);
    }
    return rc;
}
