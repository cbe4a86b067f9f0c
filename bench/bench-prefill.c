/* bench-prefill.c: prefill at the release's expert scale (issue 38), on real bytes: the prefill
 * window (each routed expert read once per prompt) against the per-chunk path (K3_WINDOW =
 * K3_CHUNK: each expert read again for every chunk that routes to it). Only when asked:
 * `k3-bench prefill_scale` (it reads tens of GB).
 *
 *   K3_BENCH_PSCALE=DIR          an existing one-layer slice; unset: `k3-mkmodel --preset slice
 *                                --layers 1 --dense 0 --experts N` is generated into
 *                                $K3_BENCH_DIR (default /var/tmp) and deleted afterwards
 *   K3_BENCH_PSCALE_EXPERTS=N    N for the generated slice (default 64, ~6 GB; the 896
 *                                is ~21 GB and reads ~450 GB per chunked 4k prompt)
 *   K3_BENCH_PSCALE_PROMPTS=LIST prompt lengths, space separated (default "128 1024"; the issue
 *                                asks for "128 1024 4096")
 *   K3_BENCH_PSCALE_PATHS=P      window, chunk or both (default): which prefills to run (a long
 *                                prompt's two paths in separate calls; the _wall ratios that
 *                                need the other path are then left out)
 * Settings: K3_ROUTE=uniform (the release's flat routing), the expert cache at the release's
 * cache-to-experts ratio of a big machine (0.5 GB of 896 experts per layer: K3_EXPERT_GB = 0.5 x
 * E / 896 per MoE layer), O_DIRECT expert reads (K3_DIRECT's default) and the shards' page cache
 * dropped (posix_fadvise DONTNEED) before every prefill; the rest from the environment.
 *
 * Per prompt length P, one round: the drive, the windowed prefill, the drive, the per-chunk
 * prefill (each a fresh session; the cache keeps what the previous run left, a few experts).
 * Results
 *   prefill_scale_<P>_bytes        expert bytes the windowed prefill read; ref: the unique-expert
 *                                  floor (the experts it routed to, each once)
 *   prefill_scale_<P>_chunk_bytes  the same for the per-chunk path; ref: the floor
 *   prefill_scale_<P>_wall         windowed prefill seconds; ref: max(its bytes at the drive's
 *                                  O_DIRECT rate, its compute: wall - time waiting on reads)
 *   prefill_scale_<P>_chunk_wall   per-chunk seconds; ref: the windowed seconds
 *   prefill_scale_<P>_rss          the process's peak resident memory during the windowed prefill
 *                                  (VmHWM, reset before it through /proc/self/clear_refs); ref: the
 *                                  memory fit's plan (private bytes)
 *   prefill_scale_drive            the drive's O_DIRECT sequential rate over the expert ranges
 *                                  (bench_direct_experts), median of the runs between prefills
 */
#include "bench.h"
#include "model-impl.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int bench_prefill(void);

#define PS_REQ (16u << 20)
#define PS_MAXP 16

/* Drop the page cache of every shard of d (the dense weights are in memory already). */
static void drop_cache(const st_dir *d) {
    for (int sh = 0; sh < st_n_shards(d); sh++) {
        int fd = open(st_shard_path(d, sh), O_RDONLY);
        if (fd >= 0) {
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    }
}

typedef struct ps_run {
    double wall, wait, bytes, distinct; /* distinct: expert ids the MoE calls asked for */
    double rss;                         /* peak resident bytes during it (0: unknown)   */
} ps_run;

/* Reset the peak resident set (VmHWM) of the process; 0 when done. */
static int hwm_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return -1;
    int rc = fputs("5", f) < 0;
    return fclose(f) || rc ? -1 : 0;
}

/* /proc/self/status's KEY ("VmHWM:", "VmRSS:") in bytes (0: unknown). */
static double status_bytes(const char *key) {
    FILE  *f = fopen("/proc/self/status", "r");
    char   l[256];
    double kb = 0;
    while (f && fgets(l, sizeof l, f))
        if (!strncmp(l, key, strlen(key)))
            kb = atof(l + strlen(key));
    if (f)
        fclose(f);
    return kb * 1024;
}

/* One prefill of n ids at window W (tokens; the chunk: per chunk) in a fresh session. */
static int ps_prefill(k3_model *m, int W, const int32_t *ids, int n, ps_run *o) {
    k3_session *s = NULL;
    m->win_max    = W;
    drop_cache(m->st);
    if (k3_session_new(m, &s))
        return -1;
    int          hw   = hwm_reset();
    const double rss0 = status_bytes("VmRSS:");
    k3_status    st   = k3_session_feed(s, ids, n);
    o->rss            = hw ? 0 : status_bytes("VmHWM:");
    printf("# prefill_scale: resident %.3f GB before the prefill, peak %.3f GB during it, plan %.3f GB\n",
           rss0 / 1e9, o->rss / 1e9, (double)m->fit.plan.total / 1e9);
    k3_stats ks;
    k3_session_stats(s, &ks);
    k3_session_free(s);
    if (st)
        return -1;
    o->wall     = ks.t_prefill;
    o->wait     = ks.expert_wait_s;
    o->bytes    = (double)ks.expert_bytes_read;
    o->distinct = (double)(ks.expert_hits + ks.expert_misses);
    printf(
        "# prefill_scale: %d tokens, window %d: %.2f s (%.2f s waiting on reads), %.2f GB of experts read, "
        "%.0f expert requests (%d MoE layer%s)\n",
        n, ks.window, o->wall, o->wait, o->bytes / 1e9, o->distinct, m->fit_t.n_moe,
        m->fit_t.n_moe == 1 ? "" : "s");
    fflush(stdout);
    return 0;
}

/* The prompt lengths of K3_BENCH_PSCALE_PROMPTS into P (at most PS_MAXP); 0 after printing what
 * was wrong. */
static int ps_prompts(int *P) {
    const char *v = k3_setting_env_str(K3_SETTING_BENCH_PSCALE_PROMPTS), *all;
    int         n = 0;
    all = v = v ? v : "128 1024";
    for (char *e; *v; v = e) {
        while (*v == ' ')
            v++;
        if (!*v)
            break;
        long x = strtol(v, &e, 10);
        if (n == PS_MAXP || e == v || (*e && *e != ' ') || x < 1 || x > 16777216) {
            fprintf(stderr,
                    "k3-bench: K3_BENCH_PSCALE_PROMPTS: '%.60s' is not prompt lengths (at most %d integers "
                    "in 1..16777216, space separated)\n",
                    all, PS_MAXP);
            return 0;
        }
        P[n++] = (int)x;
    }
    return n;
}

int bench_prefill(void) {
    if (!bench_asked("prefill_scale"))
        return 0;
    const char *dir      = k3_setting_env_str(K3_SETTING_BENCH_PSCALE);
    char        gen[600] = "";
    int         E        = (int)k3_setting(K3_SETTING_BENCH_PSCALE_EXPERTS)->def;
    int         paths    = (int)k3_setting(K3_SETTING_BENCH_PSCALE_PATHS)->def; /* window|chunk|both */
    int         P[PS_MAXP], np = ps_prompts(P);
    if (!np || bench_env_int(K3_SETTING_BENCH_PSCALE_EXPERTS, &E) ||
        bench_env_int(K3_SETTING_BENCH_PSCALE_PATHS, &paths))
        return 1;
    if (!dir) {
        char args[128];
        snprintf(args, sizeof args, "--preset slice --layers 1 --dense 0 --experts %d --seed 1", E);
        if (bench_mkmodel(args, "k3-bench-pscale", gen, sizeof gen))
            return 1;
        dir = gen;
    }
    int       rc = 1, maxp = 0;
    k3_params p;
    k3_model *m   = NULL;
    uint8_t  *buf = k3_aligned_alloc(4096, PS_REQ);
    int32_t  *ids = NULL;
    for (int i = 0; i < np; i++)
        maxp = P[i] > maxp ? P[i] : maxp;
    if (!buf || k3_params_default(&p))
        goto done;
    if (!(ids = malloc((size_t)maxp * sizeof *ids)))
        goto done;
    k3_config c;
    if (cfg_load(dir, &c))
        goto done;
    E           = c.n_experts;
    p.route     = 1;
    p.expert_gb = 0.5 * E / 896 * (c.n_layers - c.first_dense);
    p.set |= K3_SET_EXPERT_GB;
    p.window = maxp;
    if (p.max_ctx < maxp)
        p.max_ctx = maxp;
    if (k3_model_open(dir, &p, &m))
        goto done;
    const int W = m->win_max; /* the fit's window */
    srand(38);
    for (int i = 0; i < maxp; i++)
        ids[i] = rand() % (c.vocab - 256) + 256;
    printf("# prefill_scale: %s: %d MoE layer(s) x %d experts of %.2f MB (%.2f GB), K3_ROUTE=uniform, "
           "expert cache %.3f GB, K3_CHUNK=%d, prefill window %d; load ",
           dir, m->fit_t.n_moe, E, (double)m->fit_t.expert_one / 1e6, (double)m->fit_t.expert_all / 1e9,
           p.expert_gb, m->par.chunk, W);
    {
        FILE *la     = fopen("/proc/loadavg", "r");
        char  l[128] = "";
        if (la && fgets(l, sizeof l, la))
            printf("%s", l);
        else
            printf("\n");
        if (la)
            fclose(la);
    }
    double    drive[2 * PS_MAXP];
    int       nd = 0;
    uint64_t  db;
    const int run_w = paths != 1, run_k = paths != 0; /* window|chunk|both */
    for (int i = 0; i < np; i++) {
        ps_run w = {0}, k = {0};
        drive[nd] = bench_direct_experts(m->st, buf, PS_REQ, &db);
        if (drive[nd++] <= 0 || (run_w && ps_prefill(m, W < P[i] ? W : P[i], ids, P[i], &w)))
            goto done;
        drive[nd] = bench_direct_experts(m->st, buf, PS_REQ, &db);
        if (drive[nd++] <= 0 || (run_k && ps_prefill(m, m->par.chunk, ids, P[i], &k)))
            goto done;
        const double rate = (drive[nd - 2] + drive[nd - 1]) / 2 * 1e9;
        /* the floor: the experts the prompt routed to, each once: the one window's requests, or
         * (several windows) their expected number under uniform routing */
        const double k1 = (double)c.n_active / E, one = (double)m->fit_t.expert_one;
        const double floor_b = P[i] <= W && run_w
                                   ? w.distinct * one
                                   : m->fit_t.n_moe * E * (1 - pow(1 - k1, (double)P[i])) * one;
        const double compute = w.wall - w.wait, drive_s = w.bytes / rate;
        const double kcomp = k.wall - k.wait, kdrive = k.bytes / rate;
        char         nm[64];
        printf("# prefill_scale %d: drive %.2f GB/s: window %.2f s (drive time %.2f s, compute %.2f s), per "
               "chunk %.2f s (drive time %.2f s, compute %.2f s)\n",
               P[i], rate / 1e9, w.wall, drive_s, compute, k.wall, kdrive, kcomp);
        if (run_w) {
            snprintf(nm, sizeof nm, "prefill_scale_%d_bytes", P[i]);
            bench_report(nm, w.bytes / 1e9, "GB", floor_b / 1e9, "GB");
            snprintf(nm, sizeof nm, "prefill_scale_%d_wall", P[i]);
            bench_report(nm, w.wall, "s", compute > drive_s ? compute : drive_s, "s(max drive,compute)");
            if (w.rss > 0) {
                snprintf(nm, sizeof nm, "prefill_scale_%d_rss", P[i]);
                bench_report(nm, w.rss / 1e9, "GB", (double)m->fit.plan.total / 1e9, "GB(plan)");
            }
        }
        if (run_k) {
            snprintf(nm, sizeof nm, "prefill_scale_%d_chunk_bytes", P[i]);
            bench_report(nm, k.bytes / 1e9, "GB", floor_b / 1e9, "GB");
            snprintf(nm, sizeof nm, "prefill_scale_%d_chunk_wall_drive", P[i]);
            bench_report(nm, k.wall, "s", kcomp > kdrive ? kcomp : kdrive, "s(max drive,compute)");
        }
        if (run_w && run_k) {
            snprintf(nm, sizeof nm, "prefill_scale_%d_chunk_wall", P[i]);
            bench_report(nm, k.wall, "s", w.wall, "s(window)");
        }
    }
    bench_report("prefill_scale_drive", bench_median(drive, nd), "GB/s", 0, "");
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "bench-prefill: %s: %s\n", dir, k3_errmsg());
    k3_model_free(m);
    free(ids);
    free(buf);
    if (*gen)
        bench_rmmodel(gen);
    return rc;
}
