/* bench-serve.c: the server's continuous batching, in process: aggregate decode tokens/s of
 * N = 1, 2, 4, 8 chat turns stepped together, and the time to first token of a request that
 * joins while 4 others stream.
 *
 *   K3_BENCH_SERVE=DIR   an existing model directory; unset: `k3-mkmodel --preset slice
 *                        --layers 2 --experts 16 --active 8 --merges 1000 --seed 1` (the same
 *                        model as k3-bench decode_batch) is generated into $K3_BENCH_DIR
 *                        (default /var/tmp; ~2.6 GB on disk) with $K3_MKMODEL and deleted
 *                        afterwards. The release's widths with one KDA and one MLA layer,
 *                        8 of 16 experts per token, a small vocabulary; ~1.5 GB resident.
 * The engine's settings come from the environment as for k3chat (K3_BITS, K3_ISA, ...).
 *
 * What runs is what `k3chat --serve` runs per loop: k3_conv_gen_step_batch over the turns of
 * its slots (one conversation and session each, conversation layer included: rendering,
 * sampling, parsing), every decoding turn plus the next SB_CHUNK prompt ids of the oldest
 * prefilling one (the server at K3_SERVE_CHUNK=32, its default until the prefill window became
 * the default step). The HTTP side is left out: it costs the same per token whatever N is.
 *
 * Results (warm: each round starts with a warm-up turn; medians of SB_ROUNDS rounds, and in
 * each round the cases run in turn: 1, 2, 4, 8)
 *   serve_batch_N   aggregate tokens/s of N greedy turns decoding together (their prompts
 *                   prefilled first, in one step, not timed); ref: 1 turn in the same round
 *   serve_ttft_4    time to first token of a turn (a SB_PROMPT-id prompt) that joins while 4
 *                   others decode (its prefill in SB_CHUNK-id steps between their tokens);
 *                   ref: the same turn alone. A note gives the longest decode step of the 4
 *                   while it joined, against their plain step.
 *   serve_chunk_C_ttft, serve_chunk_C_stall (only when the filter names serve_chunk: slow)
 *                   the same join with prompt chunks of C = 16, 32, 64, 128 ids, in alternating
 *                   rounds: its time to first token (ref: C = SB_CHUNK, the default) and the 4
 *                   streams' longest step while it prefilled (ref: their plain step), the two
 *                   sides of K3_SERVE_CHUNK.
 */
#include "bench.h"
#include "k3-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bench_serve(void);

#define SB_MAXS 8
#define SB_ROUNDS 3
#define SB_TOKENS 8   /* decode steps timed per case                   */
#define SB_CHUNK 32   /* prompt ids per prefill step (K3_SERVE_CHUNK=32) */
#define SB_PROMPT 200 /* the joining request's prompt, about (ids)      */

typedef struct sb {
    k3_model   *m;
    k3_conv    *c[SB_MAXS + 1];
    k3_session *s[SB_MAXS + 1];
} sb;

/* Conversation i gets a fresh user message (words of its own, about `words` of them). */
static int sb_prompt(sb *b, int i, int words, int max_tokens) {
    k3_conv_settings set;
    k3_conv_settings_default(&set);
    set.think         = 0;
    set.max_tokens    = max_tokens;
    set.sampling.temp = 0;
    char text[8192];
    int  n = snprintf(text, sizeof text, "stream %d:", i);
    for (int w = 0; w < words && n < (int)sizeof text - 16; w++)
        n += snprintf(text + n, sizeof text - (size_t)n, " w%d", (w * 7 + i) % 97);
    k3_conv_clear(b->c[i]);
    k3_conv_drop_cache(b->c[i]); /* every turn prefills its whole prompt */
    return k3_conv_set_settings(b->c[i], &set) || k3_conv_add(b->c[i], K3_ROLE_USER, text, NULL);
}

/* Steps until every turn of g[0, n) is done or `steps` decode steps ran; the rest is cancelled.
 * Returns the seconds of the decode steps (all prompts prefilled first, not timed) and adds the
 * tokens they generated to *tokens. */
static double sb_decode(sb *b, int n, int steps, long *tokens) {
    k3_conv_gen *g[SB_MAXS];
    for (int i = 0; i < n; i++)
        if (sb_prompt(b, i, 12, steps + 1) || k3_conv_gen_begin(b->c[i], b->m, b->s[i], NULL, 0, &g[i]))
            return -1;
    if (k3_conv_gen_step_batch(g, n)) /* every prompt, whole */
        return -1;
    double t = k3_time();
    for (int k = 0; k < steps; k++)
        if (k3_conv_gen_step_batch(g, n))
            return -1;
    t = k3_time() - t;
    for (int i = 0; i < n; i++) {
        k3_status st = k3_conv_gen_end(g[i]);
        if (st && st != K3_ABORTED)
            return -1;
        const k3_msg *r = k3_conv_msg(b->c[i], k3_conv_count(b->c[i]) - 1);
        *tokens += r->stats.n_gen; /* each sampled in a timed step */
    }
    return t;
}

/* Time to first token of turn SB_MAXS (a long prompt) joining `others` decoding turns, the
 * server's schedule: the others' tokens plus one SB_CHUNK prompt chunk per step. *stall: the
 * longest step while it prefilled; *plain: the others' median step before it came. */
static double sb_join(sb *b, int others, int chunk, double *stall, double *plain, int *n_prompt) {
    k3_conv_gen *g[SB_MAXS + 1];
    int          j = SB_MAXS;
    for (int i = 0; i < others; i++)
        if (sb_prompt(b, i, 12, 1000) || k3_conv_gen_begin(b->c[i], b->m, b->s[i], NULL, 0, &g[i]))
            return -1;
    double dt[4];
    for (int k = 0; others && k < 5; k++) { /* prompts, then 4 plain decode steps */
        double t = k3_time();
        if (k3_conv_gen_step_batch(g, others))
            return -1;
        if (k)
            dt[k - 1] = k3_time() - t;
    }
    *plain = others ? bench_median(dt, 4) : 0;
    *stall = 0;
    if (sb_prompt(b, j, SB_PROMPT / 3, 2))
        return -1;
    double t0 = k3_time();
    if (k3_conv_gen_begin(b->c[j], b->m, b->s[j], NULL, chunk, &g[others]))
        return -1;
    while (!k3_conv_gen_done(g[others])) { /* its prefill, then its first token */
        int    was_prefill = k3_conv_gen_prefill_left(g[others]) > 0;
        double t           = k3_time();
        if (k3_conv_gen_step_batch(g, others + 1))
            return -1;
        t = k3_time() - t;
        if (was_prefill && t > *stall)
            *stall = t;
        if (!k3_conv_gen_prefill_left(g[others]))
            break; /* the next step samples: its first token is the prefill's argmax */
    }
    double ttft = k3_time() - t0;
    for (int i = 0; i <= others; i++) {
        k3_status st = k3_conv_gen_end(g[i]); /* unfinished: ends as cancelled */
        if (st && st != K3_ABORTED)
            return -1;
    }
    *n_prompt = k3_conv_msg(b->c[j], k3_conv_count(b->c[j]) - 1)->stats.n_prompt;
    return ttft;
}

/* serve_chunk: the join of sb_join at each prompt chunk, SB_ROUNDS alternating rounds. */
static int sb_chunks(sb *b) {
    enum { NCH = 4 };
    static const int chunks[NCH] = {16, 32, 64, 128};
    double           ttft[NCH][SB_ROUNDS], stall[NCH][SB_ROUNDS], plain[NCH][SB_ROUNDS];
    int              np = 0;
    for (int r = 0; r < SB_ROUNDS; r++) {
        printf("# chunk round %d:", r + 1);
        for (int k = 0; k < NCH; k++) {
            if ((ttft[k][r] = sb_join(b, 4, chunks[k], &stall[k][r], &plain[k][r], &np)) < 0)
                return -1;
            printf(" %d: ttft %.3f s stall %.3f s (plain %.3f s);", chunks[k], ttft[k][r], stall[k][r],
                   plain[k][r]);
        }
        printf("\n");
        fflush(stdout);
    }
    int def = 0; /* the default's index */
    for (int k = 0; k < NCH; k++)
        def = chunks[k] == SB_CHUNK ? k : def;
    const double ref = bench_median(ttft[def], SB_ROUNDS);
    for (int k = 0; k < NCH; k++) {
        char name[40];
        snprintf(name, sizeof name, "serve_chunk_%d_ttft", chunks[k]);
        bench_report(name, bench_median(ttft[k], SB_ROUNDS), "s", ref, "s(default chunk)");
        snprintf(name, sizeof name, "serve_chunk_%d_stall", chunks[k]);
        bench_report(name, bench_median(stall[k], SB_ROUNDS), "s", bench_median(plain[k], SB_ROUNDS),
                     "s(plain step)");
    }
    printf("# the joining prompt: %d ids, 4 streams decoding\n", np);
    return 0;
}

int bench_serve(void) {
    const int chunks = bench_asked("serve_chunk");
    if (!bench_want("serve_batch") && !bench_want("serve_ttft") && !chunks)
        return 0;
    const char *dir      = k3_setting_env_str(K3_SETTING_BENCH_SERVE);
    char        gen[600] = "";
    if (!dir) {
        if (bench_mkmodel("--preset slice --layers 2 --experts 16 --active 8 --merges 1000 --seed 1",
                          "k3-bench-serve", gen, sizeof gen))
            return 1;
        dir = gen;
    }
    int       rc = 1;
    sb        b  = {0};
    k3_params p;
    double    t0 = k3_time();
    if (k3_params_default(&p) || k3_model_open(dir, &p, &b.m))
        goto done;
    k3_model_info info;
    k3_model_get_info(b.m, &info);
    printf(
        "# serve model %s loaded in %.0f s: %d layers, hidden %d, vocab %d, %.2f GB resident, kernels %s\n",
        dir, k3_time() - t0, info.n_layers, info.hidden, info.vocab, (double)info.bytes_resident / 1e9,
        k3_kernels());
    fflush(stdout);
    for (int i = 0; i <= SB_MAXS; i++)
        if (!(b.c[i] = k3_conv_new()) || k3_session_new(b.m, &b.s[i]) ||
            k3_conv_set_prompt_cache(b.c[i], 0, 0))
            goto done;
    static const int ns[] = {1, 2, 4, 8};
    double           tps[4][SB_ROUNDS], ttft[2][SB_ROUNDS], stall[SB_ROUNDS], plain[SB_ROUNDS], x, y;
    long             tok;
    int              np = 0;
    if (sb_decode(&b, SB_MAXS, 2, &tok) < 0) /* warm-up: every expert the routes need, resident */
        goto done;
    if (chunks) {
        rc = sb_chunks(&b) < 0;
        goto done;
    }
    for (int r = 0; r < SB_ROUNDS; r++) {
        for (int k = 0; k < 4; k++) {
            tok      = 0;
            double t = sb_decode(&b, ns[k], SB_TOKENS, &tok);
            if (t <= 0)
                goto done;
            tps[k][r] = (double)tok / t;
        }
        if ((ttft[0][r] = sb_join(&b, 0, SB_CHUNK, &x, &y, &np)) < 0 ||
            (ttft[1][r] = sb_join(&b, 4, SB_CHUNK, &stall[r], &plain[r], &np)) < 0)
            goto done;
        printf("# round %d: %.2f %.2f %.2f %.2f tokens/s (1 2 4 8 turns); ttft alone %.3f s, with 4 %.3f s\n",
               r + 1, tps[0][r], tps[1][r], tps[2][r], tps[3][r], ttft[0][r], ttft[1][r]);
        fflush(stdout);
    }
    double ref = bench_median(tps[0], SB_ROUNDS);
    for (int k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof name, "serve_batch_%d", ns[k]);
        if (bench_want(name))
            bench_report(name, k ? bench_median(tps[k], SB_ROUNDS) : ref, "tok/s", ref, "tok/s");
    }
    if (bench_want("serve_ttft"))
        bench_report("serve_ttft_4", bench_median(ttft[1], SB_ROUNDS), "s", bench_median(ttft[0], SB_ROUNDS),
                     "s");
    printf("# the joining prompt: %d ids in chunks of %d; meanwhile the 4 streams' longest step %.3f s vs "
           "%.3f s plain "
           "(medians)\n",
           np, SB_CHUNK, bench_median(stall, SB_ROUNDS), bench_median(plain, SB_ROUNDS));
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "bench-serve: %s\n", k3_errmsg());
    for (int i = 0; i <= SB_MAXS; i++) {
        k3_conv_free(b.c[i]);
        k3_session_free(b.s[i]);
    }
    k3_model_free(b.m);
    if (*gen)
        bench_rmmodel(gen);
    return rc;
}
