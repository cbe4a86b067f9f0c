/* bench-release.c: the release's widths end to end (issue 21): open to first token on the
 * release replica with two layers (the 33,792-wide dense layer, one KDA + 896-expert MoE layer,
 * the 163,840-row embeddings and head).
 *
 *   K3_BENCH_RELEASE=DIR  an existing model directory (e.g. `k3-mkmodel --preset release
 *                         --layers 2`, or a k3-repack container of it); unset: one is generated
 *                         into $K3_BENCH_DIR (default /var/tmp; ~6 MB on disk, sparse) with
 *                         $K3_MKMODEL (default build/k3-mkmodel) and deleted afterwards.
 * The engine's settings come from the environment as for k3chat (K3_BITS, K3_MEM_GB, ...).
 *
 * Results
 *   release_open       seconds of k3_model_open; ref: the bytes it loaded at the drive's
 *                      O_DIRECT rate measured for --inspect (fit_speed_get), i.e. a pure read
 *   release_first      seconds from the open's end to the first token's logits (a 3-token
 *                      prefill); ref: the prefill estimate x 3 (fit_speed_estimate)
 *   release_decode     median s/token over 4 decode steps; ref: the decode estimate, so the
 *                      ratio is measured / estimated (issue 21 asks for 0.7 .. 1.3)
 *   release_rss        peak RSS in GB (getrusage); ref: the memory plan's total
 */
#include "bench.h"
#include "model-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int bench_release(void);

int bench_release(void) {
    if (!bench_want("release_open") && !bench_want("release_decode")) return 0;
    const char *dir = getenv("K3_BENCH_RELEASE");
    char        gen[600] = "";
    if (!dir || !*dir) {
        if (bench_mkmodel("--preset release --layers 2", "k3-bench-release", gen, sizeof gen)) return 1;
        dir = gen;
    }
    int         rc = 1;
    k3_params   p;
    k3_model   *m = NULL;
    k3_session *s = NULL;
    if (k3_params_default(&p)) goto done;
    double t0 = k3_time();
    if (k3_model_open(dir, &p, &m)) goto done;
    double t_open = k3_time() - t0;
    printf("# %s\n", m->fit.msg);
    fit_speed sp;
    double    est_dec, est_pre;
    fit_speed_get(m->st, &sp);
    fit_speed_estimate(&m->fit_t, &m->fit.plan, &sp, m->cfg.n_active, m->par.chunk, &est_dec, &est_pre);
    printf("# measured: memory %.1f GB/s, int8 matmul %.1f G/s, drive %.2f GB/s%s\n", sp.mem_bw / 1e9, sp.matmul / 1e9,
           sp.disk / 1e9, sp.sparse ? " (sparse file: holes)" : "");
    if (k3_session_new(m, &s)) goto done;
    int32_t ids[3] = {1, 2, 3};
    t0             = k3_time();
    if (k3_session_feed(s, ids, 3)) goto done;
    double t_first = k3_time() - t0, dec[4];
    for (int i = 0; i < 4; i++) {
        int32_t t = (int32_t)(5 + i);
        t0        = k3_time();
        if (k3_session_feed(s, &t, 1)) goto done;
        dec[i] = k3_time() - t0;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    bench_report("release_open", t_open, "s", (double)m->load_total / (sp.disk > 0 ? sp.disk : 1e9), "s");
    bench_report("release_first", t_first, "s", 3 * est_pre, "s");
    bench_report("release_decode", bench_median(dec, 4), "s/token", est_dec, "s/token");
    bench_report("release_rss", (double)ru.ru_maxrss * 1024 / 1e9, "GB", (double)m->fit.plan.total / 1e9, "GB");
    rc = 0;
done:
    if (rc) fprintf(stderr, "bench-release: %s: %s\n", dir, k3_errmsg());
    k3_session_free(s);
    k3_model_free(m);
    if (*gen) bench_rmmodel(gen);
    return rc;
}
