/* bench-main.c: k3-bench, the one benchmark program (`make bench` runs build/k3-bench).
 *
 *     k3-bench [FILTER]     run every benchmark, or only the results whose name (or whose
 *                           benchmark's registry name) contains FILTER
 *
 * Every result is one line: BENCH <name> <value> <unit> ref <value> <unit> ratio <value/ref>;
 * lines starting with "# " are notes for humans. Exit status: non-zero if a benchmark failed.
 *
 * ADDING A BENCHMARK (one-line edit of this file)
 *   1. Write `int bench_xxx(void)` in bench/bench-xxx.c (include "bench.h", declare the prototype
 *      above it for -Wmissing-prototypes, return 0 when it ran).
 *      Print results with bench_report() and guard costly setup with bench_want("result_name").
 *   2. Add `X(xxx)` to BENCHES below. That line declares bench_xxx and registers it as "xxx".
 *   The Makefile picks up bench/ files by wildcard; nothing else to edit.
 */
#include "bench.h"
#include "quant.h"
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The registry, in run order: one X(name) per benchmark function bench_<name>. */
#define BENCHES(X)                                                                                           \
    X(kern)    /* bench-kern.c: memory read bandwidth; MXFP4/int4/int8 matvec GB/s */                        \
    X(amx)     /* bench-amx.c: AMX-INT8 tile peak and matmul GOPS (hardware only; SKIP otherwise) */         \
    X(act)     /* bench-act.c: SiTU-GLU ns/element, float path by level vs the double formula */             \
    X(ui)      /* bench-ui.c: token-to-screen latency and UI CPU share of the TUI (mock engine) */           \
    X(uimd)    /* bench-uimd.c: md_stream_update over long tables, lists, code and paragraphs, 1 kB steps */ \
    X(repack)  /* bench-repack.c: start-up of a k3 container vs the BF16 source; K3_MMAP memory */           \
    X(tok)     /* bench-tok.c: tokenizer encode MB/s vs tiktoken's JS and WASM builds */                     \
    X(vk)      /* bench-vk.c: Vulkan matvec GB/s vs the device read bandwidth */                             \
    X(experts) /* bench-experts.c: expert streaming GB/s; prefill/decode s/token (slice) */                  \
    X(release) /* bench-release.c: release widths, 2 layers: open, first token, s/token, RSS */              \
    X(prefill) /* bench-prefill.c: prefill_scale: expert bytes, wall, window vs chunk (only when asked) */   \
    X(cold)    /* bench-cold.c: reading memory left untouched, 4 KiB vs huge pages (only when asked) */      \
    X(batch)   /* bench-batch.c: aggregate decode tok/s of 1..8 sessions batched vs one alone */             \
    X(serve)   /* bench-serve.c: continuous batching: aggregate tok/s of 1-8 turns, TTFT joining 4 */        \
    X(grammar) /* bench-grammar.c: structured output: compile ms, mask us/token on 163,840 ids */            \
    X(grammar_decode) /* bench-grammar.c: slice greedy decode with / without a mask (only when asked) */     \
    X(sample)         /* bench-sample.c: one draw over 163,840 logits; bias, penalties, logprobs */          \
    X(history) /* bench-history.c: one chat turn's renderings at 1k-50k exchanges, kept vs from scratch */

#define DECLARE(name) int bench_##name(void);
BENCHES(DECLARE)
#undef DECLARE

static const struct bench_entry {
    const char *name;
    int (*fn)(void);
} registry[] = {
#define ENTRY(name) {#name, bench_##name},
    BENCHES(ENTRY)
#undef ENTRY
};

static const char *filter;    /* argv[1] or NULL */
static const char *running;   /* registry name of the benchmark being run */
static int         n_results; /* bench_report lines printed */

int bench_want(const char *name) {
    return !filter || !*filter || strstr(name, filter) || (running && strstr(running, filter));
}

int bench_asked(const char *what) {
    return filter && strstr(filter, what);
}

void bench_report(const char *name, double value, const char *unit, double ref, const char *ref_unit) {
    n_results++;
    printf("BENCH %s %.4g %s ref %.4g %s ratio %.3f\n", name, value, unit, ref, ref_unit,
           ref != 0.0 ? value / ref : 0.0);
    fflush(stdout);
}

const char *bench_dir(void) {
    const char *b = k3_setting_env_str(K3_SETTING_BENCH_DIR);
    return b ? b : "/var/tmp";
}

int bench_env_int(enum k3_setting_id id, int *out) {
    if (k3_setting_env_int(id, out) == K3_OK)
        return 0;
    fprintf(stderr, "k3-bench: %s\n", k3_errmsg());
    return -1;
}

int bench_mkmodel(const char *args, const char *name, char *out, size_t n) {
    const char *mk = k3_setting_env_str(K3_SETTING_MKMODEL);
    char        cmd[1600];
    snprintf(out, n, "%s/%s-%d", bench_dir(), name, (int)getpid());
    snprintf(cmd, sizeof cmd, "'%s' %s --quiet '%s'", mk ? mk : "build/k3-mkmodel", args, out);
    printf("# generating: %s\n", cmd);
    fflush(stdout);
    if (system(cmd)) {
        fprintf(stderr, "k3-bench: %s failed\n", cmd);
        return -1;
    }
    return 0;
}

void bench_rmmodel(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd))
        fprintf(stderr, "k3-bench: could not remove %s\n", dir);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The help, every line within 80 columns: the benchmarks' names are filled into lines. */
static void usage(FILE *f) {
    fprintf(f, "usage: k3-bench [FILTER]\n"
               "Runs every benchmark, or only the results whose name (or whose benchmark's\n"
               "name) contains FILTER; one line per result: BENCH NAME VALUE UNIT ref VALUE\n"
               "UNIT ratio R. Method and figures: BENCHMARKS.md; variables: k3chat(1).\n"
               "benchmarks:");
    int col = 11;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++) {
        int w = (int)strlen(registry[i].name);
        if (col + 1 + w > 80) {
            fprintf(f, "\n           ");
            col = 11;
        }
        col += fprintf(f, " %s", registry[i].name);
    }
    fprintf(f, "\n");
}

int main(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    /* an option is no filter: '--quick' matched nothing, ran nothing and exited 0 */
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        if (argc == 2)
            txt_term_printf(stderr, "k3-bench: unknown option '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    /* the kernel knobs and K3_ISA: a malformed value is an error, as at a model open */
    if (kern_knobs_env() || kern_isa_env()) {
        fprintf(stderr, "k3-bench: %s\n", k3_errmsg());
        return 2;
    }
    filter   = argc == 2 ? argv[1] : NULL;
    int fail = 0, named = 0;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++) {
        running = registry[i].name;
        named |= filter && strstr(registry[i].name, filter) != NULL;
        if (registry[i].fn() != 0) {
            fprintf(stderr, "k3-bench: %s failed\n", registry[i].name);
            fail = 1;
        }
    }
    /* a filter that names no benchmark and matched no result (a typo) ran nothing: said, not 0 */
    if (filter && *filter && !named && !n_results) {
        txt_term_printf(
            stderr,
            "k3-bench: '%s' matched no benchmark and no result of this run (a benchmark that skips "
            "on this machine reports none)\n",
            filter);
        usage(stderr);
        return 2;
    }
    return fail;
}
