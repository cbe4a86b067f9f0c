/* bench-experts.c: the streaming expert tier on the slice preset (release-size experts).
 *
 *   K3_BENCH_SLICE=DIR   an existing `k3-mkmodel --preset slice` directory; unset: one is
 *                        generated into $K3_BENCH_DIR (default /var/tmp; not a tmpfs: the
 *                        model is ~11 GiB) with $K3_MKMODEL (default build/k3-mkmodel) and
 *                        deleted afterwards. Skipped (a "# " note) when there is no room.
 *
 * Results
 *   expert_stream      GB/s of expert bytes through the tier (ex_begin/ex_next, no compute):
 *                      per layer, batches of 16 distinct experts that are never resident (half
 *                      the experts fit), so every one is read; O_DIRECT (K3_DIRECT default), so
 *                      the page cache is bypassed. ref: a plain single-threaded O_DIRECT
 *                      sequential read (16 MiB requests) of the same shards' expert ranges,
 *                      alternated with the tier passes in the same run; medians of 3.
 *   prefill_{cold,warm}, decode_{cold,warm}
 *                      seconds per token of the whole engine (k3_session_feed) at the default
 *                      K3_BITS. cold prefill: an empty cache that can hold every expert; warm:
 *                      every expert resident; cold decode: one slot per layer, so every token
 *                      reads its experts; medians over decode steps. Each comes with _read
 *                      (expert read busy time), _wait (time the layers waited on reads) and
 *                      _compute (total - wait), per token, with the total as ref.
 *   prefill_warm_isa, decode_warm_isa
 *                      warm prefill / decode at the running kernel level (K3_ISA, default the
 *                      best) against the same session at K3_ISA=avx2, alternating rounds.
 *   prefill_warm_act   warm prefill with the float activations (default) against the same session
 *                      with K3_ACT=double (the libm double formulas), alternating rounds.
 *   prefill_chunk_<C>  warm prefill of 256 tokens with K3_CHUNK = C (32, 64, 128, 256), a session per
 *                      chunk size on the same model, 2 alternating rounds, medians (a "# " line
 *                      gives the process CPU seconds per token); ref: chunk 32
 *                      (the default before it was measured). Only when the filter names it
 *                      (k3-bench prefill_chunk): it takes a while.
 *   prefill_warm_phase_<phase>   (K3_PROFILE=1 only) per phase of prof.h, wall seconds per token
 *                      of the warm prefill; ref: the prefill's total. A "# " line gives the CPU
 *                      seconds (both threads, spin waits included) against the process's.
 */
#include "act.h"
#include "bench.h"
#include "config.h"
#include "experts.h"
#include "kern-impl.h"
#include "model-impl.h"
#include "prof.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

int bench_experts(void);

#define BX_PASSES 3
#define BX_REQ (16u << 20)

/* ---- the tier alone: config, checkpoint and the expert tier's own constructor (no model) ------ */

typedef struct tier_bench {
    k3_config cfg;
    k3_params par; /* the engine's defaults and K3_* (load threads, O_DIRECT, pipelining) */
    st_dir   *st;
    ex_tier  *tier;
} tier_bench;

static void tier_model_free(tier_bench *m) {
    ex_close(m->tier);
    st_close(m->st);
    free(m);
}

static tier_bench *tier_model(const char *dir, double gb) {
    tier_bench *m = calloc(1, sizeof *m);
    if (!m || k3_params_default(&m->par) || cfg_load(dir, &m->cfg) || st_open(dir, &m->st))
        goto fail;
    ex_source src = {.st           = m->st,
                     .dir          = dir,
                     .cfg          = &m->cfg,
                     .n_run        = m->cfg.n_layers,
                     .expert_gb    = gb,
                     .direct       = m->par.direct,
                     .pipe         = m->par.pipe,
                     .load_threads = m->par.load_threads};
    if (ex_open(&src, &m->tier))
        goto fail;
    return m;
fail:
    fprintf(stderr, "bench-experts: %s: %s\n", dir, k3_errmsg());
    if (m)
        tier_model_free(m);
    return NULL;
}

/* One pass: every layer, experts in batches of 16 (all misses). Returns GB/s or < 0. */
static double tier_pass(tier_bench *m, uint64_t *bytes) {
    const int E = m->cfg.n_experts, B = E / 2 < 16 ? E / 2 : 16;
    int      *ids = malloc((size_t)E * sizeof *ids);
    k3_stats  st  = {0};
    double    t0  = k3_time();
    k3_status rc  = K3_OK;
    for (int l = m->cfg.first_dense; l < m->cfg.n_layers && !rc; l++)
        for (int b0 = 0; b0 + B <= E && !rc; b0 += B) {
            for (int i = 0; i < B; i++)
                ids[i] = b0 + i;
            ex_batch         eb;
            const k3_expert *x;
            int              e;
            rc = ex_begin(m->tier, l, ids, B, &st, &eb);
            while (!rc && !(rc = ex_next(&eb, &e, &x)) && e >= 0) {
            }
            ex_end(&eb);
        }
    double t = k3_time() - t0;
    free(ids);
    if (rc) {
        fprintf(stderr, "bench-experts: %s\n", k3_errmsg());
        return -1;
    }
    *bytes = st.expert_bytes_read;
    return (double)st.expert_bytes_read / t / 1e9;
}

/* The reference: O_DIRECT sequential read of each MoE layer shard's expert byte range. */
static double ref_pass(tier_bench *m, uint8_t *buf, uint64_t *bytes) {
    return bench_direct_experts(m->st, buf, BX_REQ, bytes);
}

double bench_direct_experts(const st_dir *d, uint8_t *buf, size_t req, uint64_t *bytes) {
    double t0 = k3_time();
    *bytes    = 0;
    for (int sh = 0; sh < st_n_shards(d); sh++) {
        uint64_t lo = UINT64_MAX, hi = 0;
        for (int i = 0; i < st_n_tensors(d); i++) {
            const st_tensor *t = st_tensor_at(d, i);
            if (t->shard != sh || !strstr(t->name, ".experts."))
                continue;
            if (t->offset < lo)
                lo = t->offset;
            if (t->offset + t->nbytes > hi)
                hi = t->offset + t->nbytes;
        }
        if (hi == 0)
            continue;
        int fd = open(st_shard_path(d, sh), O_RDONLY | O_DIRECT);
        if (fd < 0) {
            fprintf(stderr, "bench: %s: %s\n", st_shard_path(d, sh), strerror(errno));
            return -1;
        }
        uint64_t a = lo & ~(uint64_t)4095;
        while (a < hi) {
            ssize_t r = pread(fd, buf, req, (off_t)a);
            if (r <= 0)
                break;
            a += (uint64_t)r;
        }
        *bytes += hi - lo;
        close(fd);
    }
    return (double)*bytes / (k3_time() - t0) / 1e9;
}

static void bench_stream(const char *dir) {
    tier_bench *m   = tier_model(dir, 0);
    uint8_t    *buf = k3_aligned_alloc(4096, BX_REQ);
    if (!m || !buf) {
        free(buf);
        if (m)
            tier_model_free(m);
        return;
    }
    /* half of each layer's experts fit: batches alternate halves, so every expert misses */
    const k3_config *c = &m->cfg;
    double xb          = 3.0 * ((double)c->moe_inter * c->latent / 2 + (double)c->moe_inter * c->latent / 32);
    ex_set_budget(m->tier, (c->n_layers - c->first_dense) * (c->n_experts / 2) * xb / 1e9 + 1e-6);
    printf("# expert_stream: %d experts of %.2f MB per MoE layer, %d cached per layer, %d loader threads\n",
           c->n_experts, xb / 1e6, ex_slots_per_layer(m->tier), m->par.load_threads);
    double   g[BX_PASSES], r[BX_PASSES];
    uint64_t bt = 0, br = 0;
    int      ok = 1;
    for (int p = 0; p < BX_PASSES && ok; p++) {
        r[p] = ref_pass(m, buf, &br);
        g[p] = tier_pass(m, &bt);
        ok   = r[p] > 0 && g[p] > 0;
        printf("# expert_stream pass %d: tier %.3f GB/s (%.2f GB), O_DIRECT sequential %.3f GB/s (%.2f GB)\n",
               p + 1, g[p], (double)bt / 1e9, r[p], (double)br / 1e9);
    }
    if (ok)
        bench_report("expert_stream", bench_median(g, BX_PASSES), "GB/s", bench_median(r, BX_PASSES), "GB/s");
    free(buf);
    tier_model_free(m);
}

/* ---- the engine: prefill and decode ------------------------------------------------------------ */

typedef struct tok_time {
    double total, read, wait;
} tok_time;

static void report_split(const char *name, tok_time t) {
    char nm[96];
    snprintf(nm, sizeof nm, "%s_read", name);
    bench_report(nm, t.read, "s/tok", t.total, "s/tok");
    snprintf(nm, sizeof nm, "%s_wait", name);
    bench_report(nm, t.wait, "s/tok", t.total, "s/tok");
    snprintf(nm, sizeof nm, "%s_compute", name);
    bench_report(nm, t.total - t.wait, "s/tok", t.total, "s/tok");
}

/* Feed n ids as one prefill; per-token times. */
static int prefill(k3_session *s, const int32_t *ids, int n, tok_time *out) {
    k3_session_reset(s);
    k3_session_reset_stats(s);
    if (k3_session_feed(s, ids, n))
        return -1;
    k3_stats st;
    k3_session_stats(s, &st);
    *out = (tok_time){st.t_prefill / n, st.expert_read_s / n, st.expert_wait_s / n};
    return 0;
}

/* n decode steps after a 4-token prompt; medians per token. */
static int decode(k3_session *s, const int32_t *ids, int n, tok_time *out) {
    double tt[16], tr[16], tw[16];
    k3_session_reset(s);
    if (k3_session_feed(s, ids, 4))
        return -1;
    for (int i = 0; i < n && i < 16; i++) {
        k3_session_reset_stats(s);
        if (k3_session_feed(s, ids + 4 + i, 1))
            return -1;
        k3_stats st;
        k3_session_stats(s, &st);
        tt[i] = st.t_decode;
        tr[i] = st.expert_read_s;
        tw[i] = st.expert_wait_s;
    }
    *out = (tok_time){bench_median(tt, n), bench_median(tr, n), bench_median(tw, n)};
    return 0;
}

/* Warm prefill and decode at the running kernel level against the same session forced to the
 * AVX2 kernels (K3_ISA=avx2: AVX-VNNI where the CPU has it), alternating rounds, medians; every
 * expert resident (the budget must hold them all). Nothing when the running level is AVX2 or
 * below. Results prefill_warm_isa / decode_warm_isa, s/tok, ratio < 1 = faster than AVX2. */
static int isa_ab(k3_session *s, const int32_t *ids, int np, int nd) {
    enum { R = 3 };
    const int best = kern_isa(), ref = kern_cpu_vnni() ? KERN_AVX2_VNNI : KERN_AVX2;
    if (best <= ref || (!bench_want("prefill_warm_isa") && !bench_want("decode_warm_isa")))
        return 0;
    double   pa[R], pr[R], da[R], dr[R];
    tok_time t;
    int      rc = prefill(s, ids, np, &t); /* top up the cache */
    for (int r = 0; r < R && !rc; r++) {
        kern_set_isa(ref);
        rc |= prefill(s, ids, np, &t), pr[r] = t.total;
        rc |= decode(s, ids, nd, &t), dr[r]  = t.total;
        kern_set_isa(best);
        rc |= prefill(s, ids, np, &t), pa[r] = t.total;
        rc |= decode(s, ids, nd, &t), da[r]  = t.total;
    }
    kern_set_isa(best);
    if (rc)
        return rc;
    printf("# kernel levels: %s against %s, %d alternating rounds, medians\n", kern_isa_name(best),
           kern_isa_name(ref), R);
    char unit[48];
    snprintf(unit, sizeof unit, "s/tok(%s)", kern_isa_name(ref));
    bench_report("prefill_warm_isa", bench_median(pa, R), "s/tok", bench_median(pr, R), unit);
    bench_report("decode_warm_isa", bench_median(da, R), "s/tok", bench_median(dr, R), unit);
    return 0;
}

/* Warm prefill at the two values of a 0/1 kernel switch (get/set), alternating rounds (first
 * set to `first` in each), medians, the switch restored after; a "# " line (what) gives the
 * process CPU seconds per token at each. Result name: the prefill at `value` against the other. */
static int switch_ab(k3_session *s, const int32_t *ids, int np, int (*get)(void), void (*set)(int), int first,
                     int value, const char *what, const char *name, const char *ref_unit) {
    enum { R = 3 };
    const int keep = get();
    double    t[2][R], c[2][R];
    tok_time  tt;
    int       rc = 0;
    for (int r = 0; r < R && !rc; r++)
        for (int k = 0; k < 2 && !rc; k++) {
            const int v = k ? !first : first;
            set(v);
            const double c0 = prof_now().cpu;
            rc              = prefill(s, ids, np, &tt);
            t[v][r]         = tt.total;
            c[v][r]         = (prof_now().cpu - c0) / np;
        }
    set(keep);
    if (rc)
        return rc;
    printf("# %s, %d alternating rounds, medians; CPU %.4f s/tok against %.4f (both threads, spin waits "
           "included)\n",
           what, R, bench_median(c[value], R), bench_median(c[!value], R));
    bench_report(name, bench_median(t[value], R), "s/tok", bench_median(t[!value], R), ref_unit);
    return 0;
}

/* Warm prefill with the float activations (K3_ACT, the default) against the same session with the libm
 * double formulas (K3_ACT=double). Result prefill_warm_act, s/tok, ratio < 1 = the float path is
 * faster. */
static int act_ab(k3_session *s, const int32_t *ids, int np) {
    if (!bench_want("prefill_warm_act"))
        return 0;
    return switch_ab(s, ids, np, kern_act_double, kern_set_act_double, 1, 0,
                     "activations: float against K3_ACT=double", "prefill_warm_act", "s/tok(K3_ACT=double)");
}

/* K3_PROFILE=1: the phases of the prefill that started at w0 (NP tokens), per token. */
static void report_phases(int np, prof_t w0) {
    const prof_t w1   = prof_now();
    double       wsum = 0, csum = 0;
    for (int ph = 0; ph < PROF_N; ph++) {
        const prof_t t = prof_get((prof_phase)ph);
        wsum += t.wall, csum += t.cpu;
        char name[64];
        snprintf(name, sizeof name, "prefill_warm_phase_%s", prof_name((prof_phase)ph));
        bench_report(name, t.wall / np, "s/tok", (w1.wall - w0.wall) / np, "s/tok(total)");
        printf("# %-10s cpu %.4f s/tok of %.4f (%.1f %%)\n", prof_name((prof_phase)ph), t.cpu / np,
               (w1.cpu - w0.cpu) / np, 100.0 * t.cpu / (w1.cpu - w0.cpu));
    }
    printf("# phases cover %.1f %% of the wall time and %.1f %% of the CPU time; the rest: embedding,\n"
           "# lm_head norm, expert tier bookkeeping, session\n",
           100.0 * wsum / (w1.wall - w0.wall), 100.0 * csum / (w1.cpu - w0.cpu));
}

/* Warm prefill of np tokens at each chunk size, a fresh session each, alternating rounds. */
static int chunk_ab(k3_model *m, const int32_t *ids, int np) {
    enum { R = 2, NC = 4 };
    static const int sizes[NC] = {32, 64, 128, 256};
    double           t[NC][R], cpu[NC][R];
    const int        keep = m->par.chunk;
    int              rc   = 0;
    for (int r = 0; r < R && !rc; r++)
        for (int i = 0; i < NC && !rc; i++) {
            k3_session *s   = NULL;
            tok_time    tt  = {0, 0, 0};
            m->par.chunk    = sizes[i];
            const double c0 = prof_now().cpu;
            rc              = k3_session_new(m, &s) || prefill(s, ids, np, &tt);
            t[i][r]         = tt.total;
            cpu[i][r]       = (prof_now().cpu - c0) / np;
            k3_session_free(s);
        }
    m->par.chunk = keep;
    if (rc)
        return rc;
    printf("# chunk sizes: warm prefill of %d tokens, %d alternating rounds, medians\n", np, R);
    const double ref = bench_median(t[0], R);
    for (int i = 0; i < NC; i++) {
        char name[48];
        snprintf(name, sizeof name, "prefill_chunk_%d", sizes[i]);
        bench_report(name, i ? bench_median(t[i], R) : ref, "s/tok", ref, "s/tok(chunk 32)");
        printf("# chunk %d: CPU %.4f s/tok (both threads, spin waits included), chunk 32 %.4f\n", sizes[i],
               bench_median(cpu[i], R), bench_median(cpu[0], R));
    }
    return 0;
}

static void bench_engine(const char *dir) {
    k3_params p;
    if (k3_params_default(&p))
        return;
    p.expert_gb    = 0; /* no preload: the cache starts empty */
    double      t0 = k3_time();
    k3_model   *m  = NULL;
    k3_session *s  = NULL;
    if (k3_model_open(dir, &p, &m) || k3_session_new(m, &s)) {
        fprintf(stderr, "bench-experts: %s: %s\n", dir, k3_errmsg());
        k3_model_free(m);
        return;
    }
    printf("# slice model loaded in %.1f s (K3_BITS=%d K3_MLA_BITS=%d K3_HEAD_BITS=%d, chunk %d, "
           "%d loader threads)\n",
           k3_time() - t0, p.bits, p.mla_bits, p.head_bits, p.chunk, p.load_threads);
    enum { NP = 64, ND = 6, NPC = 256 };
    int32_t   ids[NPC];
    uint64_t  r = 12345;
    const int V = m->cfg.vocab, lo = V > 600 ? 300 : 0, span = V - lo < 100000 ? V - lo : 100000;
    for (int i = 0; i < NPC; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        ids[i] = (int32_t)(r % (uint64_t)(span > 0 ? span : 1)) + lo; /* inside any vocabulary */
    }
    tok_time pc, pw, dc, dw;
    int      rc = 0;
    if (bench_asked("prefill_chunk")) { /* only the chunk sizes, after a warm-up pass */
        rc = k3_model_set_expert_budget(m, -1) || prefill(s, ids, NPC, &pc) || chunk_ab(m, ids, NPC);
        if (rc)
            fprintf(stderr, "bench-experts: %s\n", k3_errmsg());
        k3_session_free(s);
        k3_model_free(m);
        return;
    }
    /* cold prefill: room for every expert, none resident */
    rc |= k3_model_set_expert_budget(m, -1);
    rc |= prefill(s, ids, NP, &pc);
    /* warm prefill: every expert of the model now resident? top up with a second pass */
    prof_reset();
    const prof_t w0 = prof_now();
    rc |= prefill(s, ids, NP, &pw);
    if (!rc && prof_on)
        report_phases(NP, w0);
    rc |= decode(s, ids, ND, &dw);
    /* cold decode: one slot per layer, every token's experts read from disk */
    rc |= k3_model_set_expert_budget(m, 0);
    rc |= decode(s, ids + 8, ND, &dc);
    if (!rc)
        rc |= k3_model_set_expert_budget(m, -1);
    if (!rc)
        rc |= isa_ab(s, ids, NP, ND);
    if (!rc)
        rc |= act_ab(s, ids, NP);
    if (rc) {
        fprintf(stderr, "bench-experts: %s\n", k3_errmsg());
    } else {
        bench_report("prefill_cold", pc.total, "s/tok", pw.total, "s/tok(warm)");
        report_split("prefill_cold", pc);
        bench_report("prefill_warm", pw.total, "s/tok", pc.total, "s/tok(cold)");
        report_split("prefill_warm", pw);
        bench_report("decode_cold", dc.total, "s/tok", dw.total, "s/tok(warm)");
        report_split("decode_cold", dc);
        bench_report("decode_warm", dw.total, "s/tok", dc.total, "s/tok(cold)");
        report_split("decode_warm", dw);
    }
    k3_session_free(s);
    k3_model_free(m);
}

/* ---- driver ---------------------------------------------------------------------------------- */

int bench_experts(void) {
    int want_s = bench_want("expert_stream"),
        want_e = bench_want("prefill_") || bench_want("decode_") ||
                 (bench_asked("prefill_") && !bench_asked("prefill_scale"));
    if (!want_s && !want_e)
        return 0;
    const char *dir      = k3_setting_env_str(K3_SETTING_BENCH_SLICE);
    char        gen[600] = "";
    if (!dir) {
        const char    *base = bench_dir();
        struct statvfs sv;
        if (statvfs(base, &sv) || (double)sv.f_bavail * sv.f_frsize < 16e9) {
            printf("# expert benchmarks skipped: less than 16 GB free in %s (set K3_BENCH_DIR or "
                   "K3_BENCH_SLICE)\n",
                   base);
            return 0;
        }
        if (bench_mkmodel("--preset slice --seed 1", "k3-bench-slice", gen, sizeof gen))
            return 1;
        dir = gen;
    }
    if (want_s)
        bench_stream(dir);
    if (want_e)
        bench_engine(dir);
    if (*gen)
        bench_rmmodel(gen);
    return 0;
}
