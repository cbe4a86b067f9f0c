/* bench-grammar.c: structured output's costs on the release-size vocabulary (163,840 ids).
 *
 *   BENCH grammar_vocab_build      X ms                 k3_gvocab_new (once per model)
 *   BENCH grammar_compile_corpus   X ms ref Y ms        median compile of the 45 corpus schemas
 *                                                       (ref: the largest)
 *   BENCH grammar_compile_10kb     X ms                 a 10 KB schema (200 properties)
 *   BENCH grammar_warm_10kb        X ms                 filling every node's mask cache of it
 *                                                       (k3_grammar_warm: why the caches are lazy)
 *   BENCH grammar_mask_cold_med    X us ref Y us        mask per token on a first walk (per-node
 *                                                       caches filled on first visit), median; ref p99
 *   BENCH grammar_mask_warm_med    X us ref Y us        the same walk again (caches hot), median; ref p99
 *   BENCH grammar_mask_object_med  X us ref Y us        json_object (--json), warm, median; ref p99
 *   BENCH grammar_mask_long_cold_med X us ref Y us      a string of 300..1000 characters, 4 walks on
 *                                                       one grammar, the first cold; median, ref p99
 *   BENCH grammar_mask_pattern_len_cold_med X us ref Y us   patterns within lengths (g_pattern_len: the
 *                                                       automaton times a count of characters): an
 *                                                       anchored class of 100..400 characters and an
 *                                                       unanchored \d{3} in 50..200, 4 walks each,
 *                                                       the first cold; median, ref p99
 *   BENCH grammar_mask_pattern_len_warm_med X us ref Y us   the same 8 walks again (caches hot)
 *   BENCH grammar_mask_tools_med   X us ref Y us        the tool-call grammar (3 tools, required), warm,
 *                                                       median; ref p99
 *   BENCH grammar_mask_enum_cold_med X us ref Y us      an enum of 5,000 strings with a common prefix,
 *                                                       a first walk (cold); median, ref p99
 *   BENCH grammar_mask_anyof_cold_max X ms ref Y ms     many branches alive (an anyOf of 100 strings of
 *                                                       maxLength 1..100; of 200 equal integer arrays):
 *                                                       a first walk's slowest k3_gmatch_mask_bounded
 *                                                       call (one engine step's mask work) vs the
 *                                                       slowest k3_gmatch_mask (ref), each on its own
 *                                                       grammar, median of 3 alternating rounds;
 *                                                       the thread's CPU time
 *   BENCH grammar_mask_anyof_cold_med X us ref Y us     the same walks' median call / mask
 *   BENCH grammar_mask_anyof_warm_med X us ref Y us     the same walk again on that grammar, the same
 *                                                       path: median call / mask
 *   BENCH grammar_mask_arrays_cold_max X ms ref Y ms    the 200 arrays, as _anyof_cold_max
 *   BENCH grammar_mask_one_walk    X ms                 for scale: one walk of the vocabulary (the first
 *                                                       mask inside {"type":"string"}, cold), median
 *   BENCH grammar_sample_masked    X us ref Y us        k3_sampler_sample_masked vs k3_sampler_sample
 *                                                       at temperature 0 over 163,840 logits
 *   BENCH grammar_mask_share_nano  X ref Y ms           warm mask median as a share of a k3-nano
 *                                                       decode step (ref: that step, ms)
 *   BENCH grammar_decode_masked    X s/token ref Y      only when asked (`k3-bench grammar_decode`):
 *                                                       greedy decoding of the slice preset under
 *                                                       json_object's mask vs plain (see below)
 *
 * The vocabulary is the slice and release presets' tokenizer: `k3-mkmodel --preset tiny
 * --merges 163328 --seed 1` writes the same tiktoken.model (163,584 ranks + 256 reserved ids)
 * with small weights (K3_BENCH_GRAMMAR=DIR: an existing directory instead). A walk takes up to
 * 64 tokens per schema, each drawn uniformly from the mask with a fixed seed, one thread.
 * Run from the repository root (the corpus is tests/fixtures/grammar-corpus.jsonl).
 */
#include "bench.h"
#include "gram-impl.h" /* g_match_budget: the unbounded path beside the bounded one */
#include "k3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int bench_grammar(void);

#define WALK 64

static clockid_t walk_clock = CLOCK_MONOTONIC; /* the anyOf rounds: the thread's CPU time */

static double now(void) {
    struct timespec ts;
    clock_gettime(walk_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int k = (int)(p * (n - 1) + 0.5);
    return n ? v[k] : 0;
}

static int walk_bounded; /* 1: the walks' masks by k3_gmatch_mask_bounded, each call's time in t */
static int walk_calls;   /* the most calls one bounded mask took */
static int walk_cap;     /* bounded walks: the room in t (calls past it are not timed) */
static int walk_masks;   /* the masks set (tokens) so far */

/* One walk of up to WALK tokens; appends each mask time (seconds) to t. */
static int walk(const k3_grammar *g, const k3_gvocab *v, uint64_t seed, double *t, int *nt) {
    k3_gmatch *m;
    int32_t    words = k3_gvocab_words(v);
    uint64_t  *mask  = malloc((size_t)words * sizeof *mask);
    if (!mask || k3_gmatch_new(g, &m))
        return free(mask), -1;
    for (int s = 0; s < WALK && !k3_gmatch_ended(m); s++) {
        double t0   = now();
        int    done = 1, calls = 0, st = 0;
        if (walk_bounded)
            for (done = 0; !done && !st; calls++) {
                st = k3_gmatch_mask_bounded(m, mask, &done);
                if (*nt < walk_cap)
                    t[(*nt)++] = now() - t0;
                t0 = now();
            }
        else if (!(st = k3_gmatch_mask(m, mask)))
            t[(*nt)++] = now() - t0;
        if (st)
            break;
        walk_calls = calls > walk_calls ? calls : walk_calls;
        walk_masks++;
        int32_t n = 0, pick = -1;
        for (int32_t k = 0; k < words; k++)
            n += __builtin_popcountll(mask[k]);
        if (!n)
            break;
        seed         = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        int32_t want = (int32_t)((seed >> 33) % (uint64_t)n);
        for (int32_t k = 0; k < words && pick < 0; k++) {
            int c = __builtin_popcountll(mask[k]);
            if (want >= c) {
                want -= c;
                continue;
            }
            for (int b = 0; b < 64; b++)
                if (mask[k] >> b & 1 && want-- == 0) {
                    pick = k * 64 + b;
                    break;
                }
        }
        if (pick < 0 || k3_gmatch_accept(m, pick))
            break;
    }
    k3_gmatch_free(m);
    free(mask);
    return 0;
}

/* Many branches alive at once: each alive node's cache entry is a walk of the vocabulary on its
 * first visit. Times are the thread's CPU time (what the engine thread spends; on a loaded
 * machine the wall time of a call is mostly waiting for a core). Per round and path (bounded:
 * k3_gmatch_mask_bounded, a call per engine step, each call timed; unbounded: k3_gmatch_mask, the path before
 * the bound, each mask timed), a freshly compiled grammar walked once cold and once warm (seed 1); the rounds
 * alternate which path goes first. BENCH lines: medians over the 3 rounds. */
static int anyof_rounds(const k3_gvocab *v) {
    k3_buf s[2] = {{0}};
    k3_buf_add(&s[0], "{\"anyOf\":[", 10);
    for (int k = 1; k <= 100; k++)
        k3_buf_printf(&s[0], "%s{\"type\":\"string\",\"maxLength\":%d}", k > 1 ? "," : "", k);
    k3_buf_add(&s[0], "]}", 2);
    k3_buf_add(&s[1], "{\"anyOf\":[", 10);
    for (int k = 1; k <= 200; k++)
        k3_buf_printf(&s[1], "%s{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", k > 1 ? "," : "");
    k3_buf_add(&s[1], "]}", 2);
    double *t  = malloc(64 * WALK * sizeof *t), fig[2][2][3][3]; /* [schema][path][round][max, med, warm] */
    walk_cap   = 64 * WALK;
    walk_clock = CLOCK_THREAD_CPUTIME_ID; /* what the engine thread spends, not the machine's load */
    int rc     = 1;
    if (!t || s[0].oom || s[1].oom)
        goto out;
    double one[3]; /* one walk, for scale: the first mask inside {"type":"string"}, cold */
    for (int r = 0; r < 3; r++) {
        k3_grammar *sg;
        k3_gmatch  *sm   = NULL;
        uint64_t   *mask = malloc((size_t)k3_gvocab_words(v) * sizeof *mask);
        one[r]           = 0;
        if (mask && !k3_grammar_json_schema(v, "{\"type\":\"string\"}", 17, NULL, &sg)) {
            if (!k3_gmatch_new(sg, &sm) && !k3_gmatch_accept_bytes(sm, "\"", 1)) {
                double t0 = now();
                k3_gmatch_mask(sm, mask);
                one[r] = now() - t0;
            }
            k3_gmatch_free(sm);
            k3_grammar_free(sg);
        }
        free(mask);
        printf("# round %d: one walk of the vocabulary (the first mask inside a string) %.2f ms\n", r + 1,
               1e3 * one[r]);
        for (int x = 0; x < 2; x++)
            for (int q = 0; q < 2; q++) {
                int         path = (q + r) & 1; /* 0 bounded, 1 unbounded; alternating */
                k3_grammar *g;
                int         nt  = 0;
                double      sum = 0;
                if (k3_grammar_json_schema(v, s[x].p, s[x].n, NULL, &g)) {
                    fprintf(stderr, "bench grammar: the anyOf schema: %s\n", k3_errmsg());
                    goto out;
                }
                walk_bounded = !path, walk_calls = walk_masks = 0;
                walk(g, v, 1, t, &nt);
                for (int k = 0; k < nt; k++)
                    sum += t[k];
                double *f = fig[x][path][r];
                int     n = nt, calls = walk_calls, masks = walk_masks;
                f[1] = pct(t, nt, 0.5);
                f[0] = nt ? t[nt - 1] : 0; /* sorted by pct */
                nt   = 0;
                walk(g, v, 1, t, &nt); /* again, the same path: what a later request of it gets */
                f[2]         = pct(t, nt, 0.5);
                walk_bounded = 0;
                printf("# anyOf of %s, round %d, %s: first walk %d %s (%d tokens, at most %d calls a "
                       "mask), median %.1f us, max %.2f ms, total %.0f ms; again: median %.1f us a %s (%d "
                       "nodes)\n",
                       x ? "200 integer arrays" : "100 strings", r + 1, path ? "unbounded" : "bounded", n,
                       path ? "masks" : "calls", masks, path ? 1 : calls, 1e6 * f[1], 1e3 * f[0], 1e3 * sum,
                       1e6 * f[2], path ? "mask" : "call", k3_grammar_nodes(g));
                k3_grammar_free(g);
            }
    }
    bench_report("grammar_mask_one_walk", 1e3 * bench_median(one, 3), "ms", 0, "");
    for (int x = 0; x < 2; x++) {
        double m[2][3];
        for (int path = 0; path < 2; path++)
            for (int k = 0; k < 3; k++) {
                double a[3] = {fig[x][path][0][k], fig[x][path][1][k], fig[x][path][2][k]};
                m[path][k]  = bench_median(a, 3);
            }
        if (x == 0) {
            bench_report("grammar_mask_anyof_cold_max", 1e3 * m[0][0], "ms", 1e3 * m[1][0], "ms");
            bench_report("grammar_mask_anyof_cold_med", 1e6 * m[0][1], "us", 1e6 * m[1][1], "us");
            bench_report("grammar_mask_anyof_warm_med", 1e6 * m[0][2], "us", 1e6 * m[1][2], "us");
        } else
            bench_report("grammar_mask_arrays_cold_max", 1e3 * m[0][0], "ms", 1e3 * m[1][0], "ms");
    }
    rc = 0;
out:
    walk_clock = CLOCK_MONOTONIC;
    free(t);
    free(s[0].p);
    free(s[1].p);
    return rc;
}

int bench_grammar(void) {
    if (!bench_want("grammar"))
        return 0;
    char        gen[1024] = "";
    const char *dir       = k3_setting_env_str(K3_SETTING_BENCH_GRAMMAR);
    if (!dir) {
        if (bench_mkmodel("--preset tiny --merges 163328 --seed 1", "k3-bench-grammar", gen, sizeof gen))
            return 1;
        dir = gen;
    }
    int        rc  = 1;
    k3_tok    *tok = NULL;
    k3_gvocab *v   = NULL;
    size_t     clen;
    FILE      *f      = fopen("tests/fixtures/grammar-corpus.jsonl", "rb");
    char      *corpus = f ? malloc(1 << 20) : NULL;
    clen              = corpus ? fread(corpus, 1, (1 << 20) - 1, f) : 0;
    if (f)
        fclose(f);
    if (!corpus || !clen) {
        fprintf(stderr, "bench grammar: tests/fixtures/grammar-corpus.jsonl not readable (run from the "
                        "repository root)\n");
        goto done;
    }
    corpus[clen] = 0;
    if (k3_tok_load(dir, NULL, &tok)) {
        fprintf(stderr, "bench grammar: %s\n", k3_errmsg());
        goto done;
    }
    double t0 = now();
    if (k3_gvocab_new(tok, k3_tok_n_vocab(tok), -1, &v)) {
        fprintf(stderr, "bench grammar: %s\n", k3_errmsg());
        goto done;
    }
    bench_report("grammar_vocab_build", 1e3 * (now() - t0), "ms", 0, "");
    printf("# vocabulary: %d ids from %s; corpus: tests/fixtures/grammar-corpus.jsonl\n",
           (int)k3_tok_n_vocab(tok), dir);

    /* compile times, and the grammars for the walks */
    k3_grammar *gs[128];
    double      ct[128], cmax = 0;
    int         ng = 0;
    for (char *l = corpus, *nl; l && *l && ng < 128; l = nl ? nl + 1 : NULL) {
        nl = strchr(l, '\n');
        if (nl)
            *nl = 0;
        double a = now();
        if (k3_grammar_json_schema(v, l, strlen(l), NULL, &gs[ng])) {
            fprintf(stderr, "bench grammar: corpus schema %d: %s\n", ng + 1, k3_errmsg());
            goto done;
        }
        ct[ng] = 1e3 * (now() - a);
        cmax   = ct[ng] > cmax ? ct[ng] : cmax;
        ng++;
    }
    bench_report("grammar_compile_corpus", bench_median(ct, ng), "ms", cmax, "ms");
    { /* a 10 KB schema: 200 properties of mixed kinds */
        char  *big = malloc(64 << 10);
        size_t n   = (size_t)sprintf(big, "{\"type\":\"object\",\"properties\":{");
        for (int i = 0; i < 200; i++)
            n += (size_t)sprintf(big + n, "%s\"field_%03d\":%s", i ? "," : "", i,
                                 i % 4 == 0   ? "{\"type\":\"integer\",\"minimum\":0,\"maximum\":999}"
                                 : i % 4 == 1 ? "{\"type\":\"string\",\"maxLength\":12}"
                                 : i % 4 == 2 ? "{\"enum\":[\"x\",\"y\",\"z\"]}"
                                              : "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}}");
        n += (size_t)sprintf(big + n, "},\"additionalProperties\":false}");
        double best[5], warm[5];
        for (int r = 0; r < 5; r++) {
            k3_grammar *g;
            double      a = now();
            if (k3_grammar_json_schema(v, big, n, NULL, &g)) {
                fprintf(stderr, "bench grammar: the 10 KB schema: %s\n", k3_errmsg());
                free(big);
                goto done;
            }
            best[r] = 1e3 * (now() - a);
            a       = now();
            k3_grammar_warm(g);
            warm[r] = 1e3 * (now() - a);
            if (!r)
                printf("# the 10 KB schema: %d nodes\n", k3_grammar_nodes(g));
            k3_grammar_free(g);
        }
        printf("# the 10 KB schema is %zu bytes\n", n);
        bench_report("grammar_compile_10kb", bench_median(best, 5), "ms", 0, "");
        bench_report("grammar_warm_10kb", bench_median(warm, 5), "ms", 0, "");
        free(big);
    }

    /* masks: a cold walk (caches filled on first visit) then the same walk warm */
    double *t  = malloc((size_t)ng * WALK * sizeof *t);
    int     nt = 0;
    for (int i = 0; i < ng; i++)
        walk(gs[i], v, (uint64_t)i + 1, t, &nt);
    double cold_p99 = pct(t, nt, 0.99), cold_med = pct(t, nt, 0.5);
    bench_report("grammar_mask_cold_med", 1e6 * cold_med, "us", 1e6 * cold_p99, "us");
    printf("# cold walk: %d masks over %d schemas\n", nt, ng);
    nt = 0;
    for (int i = 0; i < ng; i++)
        walk(gs[i], v, (uint64_t)i + 1, t, &nt);
    double warm_p99 = pct(t, nt, 0.99), warm_med = pct(t, nt, 0.5);
    bench_report("grammar_mask_warm_med", 1e6 * warm_med, "us", 1e6 * warm_p99, "us");
    {
        k3_grammar *g;
        int         no = 0;
        if (!k3_grammar_json_object(v, &g)) {
            walk(g, v, 99, t, &no);
            no = 0;
            walk(g, v, 99, t, &no);
            double p99 = pct(t, no, 0.99);
            bench_report("grammar_mask_object_med", 1e6 * pct(t, no, 0.5), "us", 1e6 * p99, "us");
            k3_grammar_free(g);
        }
    }
    { /* long strings, cold: positions far from the bounds share one cache (g_share) */
        static const char lg[] = "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\","
                                 "\"minLength\":300,\"maxLength\":1000}},\"required\":[\"text\"]}";
        k3_grammar       *g;
        int               no = 0;
        if (!k3_grammar_json_schema(v, lg, sizeof lg - 1, NULL, &g)) {
            for (uint64_t seed = 1; seed <= 4; seed++)
                walk(g, v, seed, t, &no);
            double p99 = pct(t, no, 0.99);
            bench_report("grammar_mask_long_cold_med", 1e6 * pct(t, no, 0.5), "us", 1e6 * p99, "us");
            k3_grammar_free(g);
        }
    }
    { /* patterns within lengths: pattern x count nodes, the counts far from both bounds sharing */
        static const char *const pl[] = {
            "{\"type\":\"string\",\"pattern\":\"^[a-z ]+$\",\"minLength\":100,\"maxLength\":400}",
            "{\"type\":\"string\",\"pattern\":\"\\\\d{3}\",\"minLength\":50,\"maxLength\":200}"};
        k3_grammar *g[2] = {NULL, NULL};
        int         no   = 0;
        if (!k3_grammar_json_schema(v, pl[0], strlen(pl[0]), NULL, &g[0]) &&
            !k3_grammar_json_schema(v, pl[1], strlen(pl[1]), NULL, &g[1])) {
            for (int round = 0; round < 2; round++, no = 0) {
                for (int k = 0; k < 2; k++)
                    for (uint64_t seed = 1; seed <= 4; seed++)
                        walk(g[k], v, seed, t, &no);
                const char *name =
                    round ? "grammar_mask_pattern_len_warm_med" : "grammar_mask_pattern_len_cold_med";
                bench_report(name, 1e6 * pct(t, no, 0.5), "us", 1e6 * pct(t, no, 0.99), "us");
            }
        }
        k3_grammar_free(g[0]);
        k3_grammar_free(g[1]);
    }
    { /* the tool-call grammar of three tools (tool_choice required), warm */
        static const char tools[] =
            "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
            "\"object\","
            "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":24},\"unit\":{\"enum\":[\"c\",\"f\"]"
            "}},"
            "\"required\":[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"search\","
            "\"parameters\":"
            "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\",\"maxLength\":40},\"limit\":"
            "{\"type\":\"integer\",\"minimum\":1,\"maximum\":50}},\"required\":[\"query\"]}}},{\"type\":"
            "\"function\","
            "\"function\":{\"name\":\"get_time\"}}]";
        k3_grammar *g;
        int         no = 0;
        double      a  = now();
        if (!k3_grammar_tool_calls(v, tools, NULL, 8, 0, NULL, &g)) {
            double ctool = 1e3 * (now() - a);
            walk(g, v, 7, t, &no);
            double cold = pct(t, no, 0.5);
            no          = 0;
            walk(g, v, 7, t, &no);
            double p99 = pct(t, no, 0.99);
            bench_report("grammar_mask_tools_med", 1e6 * pct(t, no, 0.5), "us", 1e6 * p99, "us");
            printf("# tool-call grammar: compiled in %.3f ms; cold walk median %.1f us; %d masks\n", ctool,
                   1e6 * cold, no);
            k3_grammar_free(g);
        }
    }
    { /* an enum of 5,000 strings with a common prefix, cold: its values share their prefix nodes
       * (a trie); as 5,000 chains, each step after "item0 filled 5,000 nodes' caches */
        k3_buf      e = {0};
        k3_grammar *g;
        int         no = 0;
        k3_buf_add(&e, "{\"enum\":[", 9);
        for (int i = 0; i < 5000; i++)
            k3_buf_printf(&e, "%s\"item%05d\"", i ? "," : "", i);
        k3_buf_add(&e, "]}", 2);
        if (!e.oom && !k3_grammar_json_schema(v, e.p, e.n, NULL, &g)) {
            walk(g, v, 3, t, &no);
            double p99 = pct(t, no, 0.99);
            bench_report("grammar_mask_enum_cold_med", 1e6 * pct(t, no, 0.5), "us", 1e6 * p99, "us");
            k3_grammar_free(g);
        }
        free(e.p);
    }
    free(t);
    anyof_rounds(v); /* says why on stderr when it cannot run */
    {                /* applying the mask in the sampler */
        int               n = k3_tok_n_vocab(tok), w = k3_gvocab_words(v);
        float            *lg = malloc((size_t)n * sizeof *lg);
        uint64_t         *mk = malloc((size_t)w * sizeof *mk);
        k3_sampler_params sp = {.temp = 0, .top_p = 1, .seed = 1};
        k3_sampler       *s  = k3_sampler_new(&sp);
        double            a[21], b[21];
        for (int i = 0; i < n; i++)
            lg[i] = (float)((i * 2654435761u) % 1000) / 100.0f;
        for (int k = 0; k < w; k++)
            mk[k] = 0x5555555555555555ULL;
        for (int r = 0; r < 21; r++) {
            double x = now();
            k3_sampler_sample(s, lg, n);
            a[r] = now() - x;
            x    = now();
            k3_sampler_sample_masked(s, lg, n, mk);
            b[r] = now() - x;
        }
        bench_report("grammar_sample_masked", 1e6 * bench_median(b, 21), "us", 1e6 * bench_median(a, 21),
                     "us");
        k3_sampler_free(s);
        free(lg);
        free(mk);
    }
    { /* the share of a k3-nano decode step */
        k3_params   p;
        k3_model   *m = NULL;
        k3_session *s = NULL;
        if (!k3_params_default(&p) && !k3_model_open("models/k3-nano", &p, &m) && !k3_session_new(m, &s)) {
            int32_t id = 10;
            double  d[33];
            k3_session_feed(s, &id, 1);
            for (int r = 0; r < 33; r++) {
                double x = now();
                k3_session_feed(s, &id, 1);
                d[r] = now() - x;
            }
            double step = bench_median(d, 33);
            bench_report("grammar_mask_share_nano", warm_med / step, "", 1e3 * step, "ms");
        } else
            printf("# models/k3-nano: %s (no share figure)\n", k3_errmsg());
        k3_session_free(s);
        k3_model_free(m);
    }
    for (int i = 0; i < ng; i++)
        k3_grammar_free(gs[i]);
    rc = 0;
done:
    free(corpus);
    k3_gvocab_free(v);
    k3_tok_free(tok);
    if (gen[0])
        bench_rmmodel(gen);
    return rc;
}

/* grammar_decode (only when asked: `k3-bench grammar_decode`): greedy decoding of the slice
 * preset with and without a mask (json_object, the chat prompt of "A person, as JSON." with
 * thinking off, so every generated token is masked), per token: [mask,] draw at temperature 0,
 * [accept,] feed one token. K3_BENCH_SLICE=DIR: an existing `k3-mkmodel --preset slice` directory
 * (unset: one is generated and removed). K3_BENCH_ROUNDS rounds (default 5) of K3_BENCH_TOKENS
 * tokens (default 8) from the same snapshot, plain and masked alternating (which goes first
 * alternates too); the medians of the per-token times. */
int bench_grammar_decode(void);

static double decode_round(k3_session *s, const k3_snapshot *snap, const k3_grammar *g, const k3_gvocab *v,
                           int vocab, int n, double *mask_s) {
    k3_sampler_params sp   = {.temp = 0, .top_p = 1, .seed = 1};
    k3_sampler       *smp  = k3_sampler_new(&sp);
    k3_gmatch        *gm   = NULL;
    uint64_t         *mask = malloc((size_t)k3_gvocab_words(v) * sizeof *mask);
    double            t = -1, tm = 0;
    if (!smp || !mask || k3_session_restore(s, snap) || (g && k3_gmatch_new(g, &gm)))
        goto done;
    double t0 = now();
    for (int i = 0; i < n; i++) {
        double  a = now();
        int32_t id;
        if (gm) {
            if (k3_gmatch_mask(gm, mask))
                goto done;
            id = k3_sampler_sample_masked(smp, k3_session_logits(s), vocab, mask);
            if (id < 0 || k3_gmatch_accept(gm, id))
                goto done;
        } else
            id = k3_sampler_sample(smp, k3_session_logits(s), vocab);
        tm += now() - a;
        if (k3_session_feed(s, &id, 1))
            goto done;
    }
    t       = (now() - t0) / n;
    *mask_s = tm / n;
done:
    k3_gmatch_free(gm);
    k3_sampler_free(smp);
    free(mask);
    return t;
}

int bench_grammar_decode(void) {
    if (!bench_asked("grammar_decode"))
        return 0;
    char        gen[1024] = "";
    const char *dir       = k3_setting_env_str(K3_SETTING_BENCH_SLICE);
    int         rounds = 5, ntok = (int)k3_setting(K3_SETTING_BENCH_TOKENS)->def;
    if (bench_env_int(K3_SETTING_BENCH_ROUNDS, &rounds) || bench_env_int(K3_SETTING_BENCH_TOKENS, &ntok))
        return 1;
    if (!dir) {
        if (bench_mkmodel("--preset slice --seed 1", "k3-bench-slice", gen, sizeof gen))
            return 1;
        dir = gen;
    }
    int           rc = 1;
    k3_params     p;
    k3_model     *m    = NULL;
    k3_session   *s    = NULL;
    k3_tok       *tok  = NULL;
    k3_gvocab    *v    = NULL;
    k3_grammar   *g    = NULL;
    k3_snapshot  *snap = NULL;
    k3_ids        ids  = {0};
    k3_model_info info;
    k3_chat_msg   um  = {.role = "user", .content = "A person, as JSON."};
    k3_chat_opts  opt = {.think = 0, .gen_prompt = 1, .response_format = "json_object"};
    double        t0  = now();
    if (k3_params_default(&p) || k3_model_open(dir, &p, &m) || k3_session_new(m, &s) ||
        k3_tok_load(dir, NULL, &tok)) {
        fprintf(stderr, "bench grammar_decode: %s: %s\n", dir, k3_errmsg());
        goto done;
    }
    k3_model_get_info(m, &info);
    if (k3_gvocab_new(tok, info.vocab, info.eos_id, &v) || k3_grammar_json_object(v, &g) ||
        k3_chat_encode(tok, &um, 1, &opt, &ids) || k3_session_feed(s, ids.v, (int)ids.n) ||
        k3_session_save(s, &snap)) {
        fprintf(stderr, "bench grammar_decode: %s\n", k3_errmsg());
        goto done;
    }
    printf("# grammar_decode: %s (vocab %d) opened and %zu prompt ids fed in %.1f s; %d rounds x %d tokens\n",
           dir, (int)info.vocab, ids.n, now() - t0, rounds, ntok);
    double plain[64], masked[64], mshare[64], junk;
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int    use = (k + r) % 2; /* round r: masked first when r is odd */
            double t   = decode_round(s, snap, use ? g : NULL, v, info.vocab, ntok, use ? &mshare[r] : &junk);
            if (t < 0) {
                fprintf(stderr, "bench grammar_decode: %s\n", k3_errmsg());
                goto done;
            }
            (use ? masked : plain)[r] = t;
        }
        printf(
            "# round %d: plain %.4f s/token, masked %.4f s/token (%.3f), mask + masked draw %.1f us/token\n",
            r + 1, plain[r], masked[r], masked[r] / plain[r], 1e6 * mshare[r]);
    }
    double mm = bench_median(mshare, rounds);
    bench_report("grammar_decode_masked", bench_median(masked, rounds), "s/token",
                 bench_median(plain, rounds), "s/token");
    printf("# grammar_decode: mask + masked draw median %.1f us/token\n", 1e6 * mm);
    rc = 0;
done:
    k3_snapshot_free(snap);
    k3_ids_free(&ids);
    k3_grammar_free(g);
    k3_gvocab_free(v);
    k3_tok_free(tok);
    k3_session_free(s);
    k3_model_free(m);
    if (gen[0])
        bench_rmmodel(gen);
    return rc;
}
