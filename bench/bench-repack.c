/* bench-repack.c: what a pre-quantized k3 container (tools/k3-repack.c) buys at start-up.
 *
 *   repack_startup  time from k3_model_open to the first token's logits (open, session, one
 *                   token fed) of the int8 container, ref: the BF16 source quantized at load
 *                   to the same bits (K3_BITS=K3_MLA_BITS=K3_HEAD_BITS=8); ratio < 1 is faster.
 *                   The target is a ratio <= 1/20 (start-up >= 20x faster).
 *   repack_private  private resident memory (/proc/self/smaps_rollup Private_Clean +
 *                   Private_Dirty) after that first token with K3_MMAP=1, ref: the same
 *                   container copied to the heap.
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

/* Private_Clean + Private_Dirty of this process in bytes (smaps_rollup), or -1. */
static double private_bytes(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    char   line[256];
    double kb = 0;
    while (fgets(line, sizeof line, f)) {
        long v;
        if (sscanf(line, "Private_Clean: %ld kB", &v) == 1 || sscanf(line, "Private_Dirty: %ld kB", &v) == 1)
            kb += (double)v;
    }
    fclose(f);
    return kb * 1024;
}

typedef struct result {
    double secs, priv;
    int    ok;
} result;

/* Open dir with the given environment, feed one token; in a child process. */
static result measure(const char *dir, const char *bits, int map) {
    result r = {0};
    int    fd[2];
    if (pipe(fd)) return r;
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
        if (map) setenv("K3_MMAP", "1", 1);
        else unsetenv("K3_MMAP");
        result      c = {0};
        double      t0 = now_s();
        k3_params   p;
        k3_model   *m = NULL;
        k3_session *s = NULL;
        int32_t     id = 1;
        if (!k3_params_default(&p) && !k3_model_open(dir, &p, &m) && !k3_session_new(m, &s) &&
            !k3_session_feed(s, &id, 1) && k3_session_logits(s)) {
            c.secs = now_s() - t0;
            c.priv = private_bytes();
            c.ok   = 1;
        } else {
            fprintf(stderr, "# bench-repack: %s: %s\n", dir, k3_errmsg());
        }
        if (write(fd[1], &c, sizeof c) != (ssize_t)sizeof c) _exit(1);
        _exit(0);
    }
    close(fd[1]);
    if (pid > 0 && read(fd[0], &r, sizeof r) != (ssize_t)sizeof r) r.ok = 0;
    close(fd[0]);
    if (pid > 0) waitpid(pid, NULL, 0);
    return r;
}

static int run_cmd(const char *cmd) {
    printf("# %s\n", cmd);
    fflush(stdout);
    int rc = system(cmd);
    return rc == 0 ? 0 : -1;
}

int bench_repack(void) {
    if (!bench_want("repack_startup") && !bench_want("repack_private")) return 0;
    char exe[PATH_MAX], bin[PATH_MAX], cmd[4 * PATH_MAX + 256];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 1;
    exe[n] = 0;
    snprintf(bin, sizeof bin, "%s", exe);
    char *slash = strrchr(bin, '/');
    if (slash) *slash = 0;
    const char *base = getenv("K3_BENCH_DIR");
    if (!base || !*base) base = "/var/tmp/k3-bench-repack";
    int keep = getenv("K3_BENCH_KEEP") && !strcmp(getenv("K3_BENCH_KEEP"), "1");
    char src[PATH_MAX], dst[PATH_MAX], done[PATH_MAX + 16];
    snprintf(src, sizeof src, "%s/slice", base);
    snprintf(dst, sizeof dst, "%s/slice-q8", base);
    snprintf(done, sizeof done, "%s/.ready", base);
    struct stat sb;
    int         rc = 0;
    if (stat(done, &sb)) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && '%s/k3-mkmodel' --preset slice --quiet '%s'", base,
                 base, bin, src);
        if (run_cmd(cmd)) return 1;
        double t0 = now_s();
        snprintf(cmd, sizeof cmd, "'%s/k3-repack' '%s' '%s' --bits 8 --quiet", bin, src, dst);
        if (run_cmd(cmd)) return 1;
        printf("# k3-repack --bits 8 of the slice preset: %.1f s\n", now_s() - t0);
        FILE *f = fopen(done, "w");
        if (f) fclose(f);
    }
    result s = measure(src, "8", 0);
    double t[3], tm[3], ph[3], pm[3];
    int    ok = s.ok;
    for (int i = 0; i < 3 && ok; i++) {
        result h = measure(dst, NULL, 0), m = measure(dst, NULL, 1);
        ok       = h.ok && m.ok;
        t[i]     = h.secs;
        tm[i]    = m.secs;
        ph[i]    = h.priv;
        pm[i]    = m.priv;
    }
    if (!ok) rc = 1;
    else {
        double tc = bench_median(t, 3), tcm = bench_median(tm, 3), hp = bench_median(ph, 3),
               mp = bench_median(pm, 3);
        printf("# slice preset: source (BF16, quantized at load to int8) %.2f s to the first token; "
               "int8 container %.2f s (%.1fx faster), with K3_MMAP=1 %.2f s (%.1fx); private memory: "
               "source %.0f MB, container heap %.0f MB, K3_MMAP=1 %.0f MB\n",
               s.secs, tc, s.secs / tc, tcm, s.secs / tcm, s.priv / 1e6, hp / 1e6, mp / 1e6);
        if (bench_want("repack_startup")) bench_report("repack_startup", tc, "s", s.secs, "s");
        if (bench_want("repack_private")) bench_report("repack_private", mp / 1e6, "MB", hp / 1e6, "MB");
    }
    if (!keep) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
        if (system(cmd) != 0) fprintf(stderr, "# bench-repack: could not remove %s\n", base);
    }
    return rc;
}
