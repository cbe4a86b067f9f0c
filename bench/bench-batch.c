/* bench-batch.c: batched decode (k3_session_feed_batch): aggregate tokens/s of N sessions
 * decoding together against one session decoding alone, in the same run.
 *
 *   K3_BENCH_BATCH=DIR   an existing model directory; unset: `k3-mkmodel --preset slice
 *                        --layers 2 --experts 16 --active 8 --merges 1000 --seed 1` is generated
 *                        into $K3_BENCH_DIR (default /var/tmp; ~4.7 GB on disk) with $K3_MKMODEL
 *                        (default build/k3-mkmodel) and deleted afterwards unless K3_BENCH_KEEP=1.
 *                        That is the release's widths (hidden 7168, KDA 96x128, MLA 96 heads,
 *                        expert 3072 x latent 3584) with one KDA and one MLA layer, half of the 16
 *                        experts active per token as the slice preset has, and a small
 *                        vocabulary; about 1.5 GB resident at the default K3_BITS.
 * The engine's settings come from the environment as for k3chat (K3_BITS, K3_ISA, ...).
 *
 * Then a check (a "# check:" line; the bench fails without it, but at K3_ISA=amx, whose
 * multi-column rounding differs): one more batched step of all 8 sessions, each compared bit
 * for bit with the session restored from a snapshot and fed alone.
 *
 * Results (warm: every expert resident after a warm-up step)
 *   decode_batch_N     aggregate tokens/s of N = 1, 2, 4, 8 sessions each decoding one token
 *                      per k3_session_feed_batch call (greedy, BB_STEPS calls per round); ref:
 *                      one session alone (k3_session_feed) in the same round. Each round runs
 *                      alone, 1, 2, 4, 8 in turn; medians of BB_ROUNDS rounds.
 *   decode_batch_N_cpu the same in tokens per CPU second of the process (user + system of all
 *                      its threads): on a machine shared with other work, where the wall time
 *                      depends on the CPU share the process gets, this one much less.
 */
#include "bench.h"
#include "k3-impl.h"
#include "prof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int bench_batch(void);

#define BB_MAXS 8
#define BB_ROUNDS 7
#define BB_STEPS 3

static int32_t argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b])
            b = i;
    return b;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* BB_STEPS greedy decode steps of sessions ss[0..n) together (through k3_session_feed when
 * alone); returns tokens per wall second, or -1 on an error; *per_cpu: tokens per CPU second
 * of the process. */
static double decode(k3_session **ss, int n, int alone, int vocab, double *per_cpu) {
    int32_t        tok[BB_MAXS];
    const int32_t *ids[BB_MAXS];
    int            nn[BB_MAXS];
    double         t = k3_time(), c = cpu_s();
    for (int step = 0; step < BB_STEPS; step++) {
        for (int i = 0; i < n; i++) {
            tok[i] = argmax(k3_session_logits(ss[i]), vocab);
            ids[i] = &tok[i];
            nn[i]  = 1;
        }
        k3_status st =
            alone ? k3_session_feed(ss[0], ids[0], 1) : k3_session_feed_batch(ss, ids, nn, n, NULL);
        if (st) {
            fprintf(stderr, "bench-batch: decode of %d: %s\n", n, k3_errmsg());
            return -1;
        }
    }
    *per_cpu = (double)n * BB_STEPS / (cpu_s() - c);
    return (double)n * BB_STEPS / (k3_time() - t);
}

int bench_batch(void) {
    if (!bench_want("decode_batch"))
        return 0;
    const char *dir      = k3_setting_env_str(K3_SETTING_BENCH_BATCH);
    char        gen[600] = "";
    int         keep     = 0;
    if (bench_env_int(K3_SETTING_BENCH_KEEP, &keep))
        return 1;
    if (!dir) {
        if (bench_mkmodel("--preset slice --layers 2 --experts 16 --active 8 --merges 1000 --seed 1",
                          "k3-bench-batch", gen, sizeof gen))
            return 1;
        dir = gen;
    }
    int         rc = 1;
    k3_params   p;
    k3_model   *m           = NULL;
    k3_session *ss[BB_MAXS] = {0};
    double      t0          = k3_time();
    if (k3_params_default(&p) || k3_model_open(dir, &p, &m))
        goto done;
    k3_model_info info;
    k3_model_get_info(m, &info);
    printf(
        "# batch model %s loaded in %.0f s: %d layers, hidden %d, vocab %d, %.2f GB resident, kernels %s\n",
        dir, k3_time() - t0, info.n_layers, info.hidden, info.vocab, (double)info.bytes_resident / 1e9,
        k3_kernels());
    /* 8 sessions, each with its own 4-token prompt, then one warm-up step of all of them
     * (reads every routed expert the routes need into the cache) */
    const int32_t *ids[BB_MAXS];
    int            nn[BB_MAXS];
    int32_t        prompt[BB_MAXS][4];
    for (int i = 0; i < BB_MAXS; i++) {
        if (k3_session_new(m, &ss[i]))
            goto done;
        for (int j = 0; j < 4; j++)
            prompt[i][j] = (int32_t)((i * 131 + j * 17 + 3) % info.vocab);
        ids[i] = prompt[i];
        nn[i]  = 4;
    }
    double warm;
    if (k3_session_feed_batch(ss, ids, nn, BB_MAXS, NULL) || decode(ss, BB_MAXS, 0, info.vocab, &warm) < 0)
        goto done;
    static const int sizes[4] = {1, 2, 4, 8};
    double           ref[BB_ROUNDS], tps[4][BB_ROUNDS], ref_c[BB_ROUNDS], tpc[4][BB_ROUNDS];
    for (int r = 0; r < BB_ROUNDS; r++) {
        if ((ref[r] = decode(ss, 1, 1, info.vocab, &ref_c[r])) < 0)
            goto done;
        for (int k = 0; k < 4; k++)
            if ((tps[k][r] = decode(ss, sizes[k], 0, info.vocab, &tpc[k][r])) < 0)
                goto done;
        printf(
            "# round %d: tok/s (tok per CPU s): alone %.3f (%.3f); together 1: %.3f (%.3f), 2: %.3f (%.3f), "
            "4: %.3f (%.3f), 8: %.3f (%.3f)\n",
            r + 1, ref[r], ref_c[r], tps[0][r], tpc[0][r], tps[1][r], tpc[1][r], tps[2][r], tpc[2][r],
            tps[3][r], tpc[3][r]);
        fflush(stdout);
    }
    if (prof_on) { /* K3_PROFILE=1: where the time of a step of all BB_MAXS sessions goes */
        double tpc8;
        prof_reset();
        const prof_t w0 = prof_now();
        if (decode(ss, BB_MAXS, 0, info.vocab, &tpc8) < 0)
            goto done;
        const prof_t w1 = prof_now();
        for (int ph = 0; ph < PROF_N; ph++) {
            const prof_t t = prof_get((prof_phase)ph);
            printf("# step of %d, phase %-10s wall %.4f s cpu %.4f s (%.1f %% of the cpu)\n", BB_MAXS,
                   prof_name((prof_phase)ph), t.wall / BB_STEPS, t.cpu / BB_STEPS,
                   100.0 * t.cpu / (w1.cpu - w0.cpu));
        }
        printf("# step of %d: wall %.4f s cpu %.4f s\n", BB_MAXS, (w1.wall - w0.wall) / BB_STEPS,
               (w1.cpu - w0.cpu) / BB_STEPS);
    }
    double ref_med = bench_median(ref, BB_ROUNDS), refc_med = bench_median(ref_c, BB_ROUNDS);
    for (int k = 0; k < 4; k++) {
        char name[40];
        snprintf(name, sizeof name, "decode_batch_%d", sizes[k]);
        bench_report(name, bench_median(tps[k], BB_ROUNDS), "tok/s", ref_med, "tok/s");
    }
    for (int k = 0; k < 4; k++) {
        char name[40];
        snprintf(name, sizeof name, "decode_batch_%d_cpu", sizes[k]);
        bench_report(name, bench_median(tpc[k], BB_ROUNDS), "tok/cpu-s", refc_med, "tok/cpu-s");
    }
    /* a check at these widths (OpenMP-parallel KDA and MLA paths, int8/MXFP4 kernels): one
     * more batched step of all 8 against each session restored from a snapshot and fed alone */
    {
        k3_snapshot *snap[BB_MAXS] = {0};
        k3_session  *alone         = NULL;
        int32_t      tok[BB_MAXS];
        int          same = 0, ok = !k3_session_new(m, &alone);
        for (int i = 0; ok && i < BB_MAXS; i++) {
            ok     = !k3_session_save(ss[i], &snap[i]);
            tok[i] = argmax(k3_session_logits(ss[i]), info.vocab);
            ids[i] = &tok[i];
            nn[i]  = 1;
        }
        ok = ok && !k3_session_feed_batch(ss, ids, nn, BB_MAXS, NULL);
        for (int i = 0; ok && i < BB_MAXS; i++) {
            ok = !k3_session_restore(alone, snap[i]) && !k3_session_feed(alone, &tok[i], 1);
            same += ok && k3_session_pos(alone) == k3_session_pos(ss[i]) &&
                    !memcmp(k3_session_logits(alone), k3_session_logits(ss[i]),
                            (size_t)info.vocab * sizeof(float));
        }
        printf("# check: a batched decode step of %d sessions bit-identical to each alone: %d of %d\n",
               BB_MAXS, same, BB_MAXS);
        for (int i = 0; i < BB_MAXS; i++)
            k3_snapshot_free(snap[i]);
        k3_session_free(alone);
        /* K3_ISA=amx rounds products of two or more columns more coarsely: no bit-identity */
        if (!ok || (same != BB_MAXS && strncmp(k3_kernels(), "amx", 3)))
            goto done;
    }
    rc = 0;
done:
    if (rc && m)
        fprintf(stderr, "bench-batch: %s: %s\n", dir, k3_errmsg());
    else if (rc)
        fprintf(stderr, "bench-batch: open %s: %s\n", dir, k3_errmsg());
    for (int i = 0; i < BB_MAXS; i++)
        k3_session_free(ss[i]);
    k3_model_free(m);
    if (*gen && !keep)
        bench_rmmodel(gen);
    return rc;
}
