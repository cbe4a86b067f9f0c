/* bench-tok.c: tokenizer encode throughput against tiktoken's JS ports, same machine, same run.
 *
 *   BENCH tok_encode_o200k       X MB/s ref Y MB/s   (ref: js-tiktoken, pure JS)
 *   BENCH tok_encode_o200k_wasm  X MB/s ref Y MB/s   (ref: tiktoken, the Rust crate as WASM)
 *   BENCH tok_encode_kimi        X MB/s ref Y MB/s   (ref: WASM tiktoken with the Kimi regex)
 *   BENCH tok_model_open         X ms ref Y ms       a model with the release's vocabulary opened
 *                                                    and its tokenizer taken (k3_model_tok); ref:
 *                                                    the open followed by a parse of the tokenizer
 *                                                    of its own (k3_tok_load_model), as the front
 *                                                    ends did until they borrowed the model's
 *   BENCH tok_parse_release      X ms                that parse alone (163,584 ranks + 256 ids)
 *
 * The tok_model_open pair: `k3-mkmodel --preset tiny --merges 163328 --seed 1` (the release's
 * tokenizer files with small weights, K3_BENCH_DIR), median of 5 opens each, wall time.
 *
 * The corpus is tools/mkcorpus.js's 1.2 MB multilingual text without its 25,000-char runs
 * (tiktoken's quadratic BPE takes js-tiktoken minutes on those), the vocabulary is
 * o200k_base exported from js-tiktoken. Both sides encode the whole corpus in one call,
 * single thread, wall time, best of 5 runs (the best run is the least disturbed on a shared
 * machine), vocabulary load excluded. CPU time would penalise node, whose GC and JIT run
 * on helper threads. The JS side runs as
 * `node tools/tiktoken-ref.cjs bench ...` with the packages from the cache folder that
 * tests/t-tiktoken.sh fills (K3_TIKTOKEN_JS, default ~/.cache/k3chat/tiktoken-js; this
 * benchmark installs them there when missing). Run from the repository root (make bench).
 * Without node or the packages the ref is 0 and a "# " line says why.
 */
#include "bench.h"
#include "k3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int bench_tok(void);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int sh(const char *cmd) {
    int rc = system(cmd);
    return rc == 0 ? 0 : -1;
}

/* First line of a command's output as a number (0 on failure). */
static double run_num(const char *cmd) {
    FILE *p = popen(cmd, "r");
    if (!p)
        return 0;
    char line[128] = "";
    if (!fgets(line, sizeof line, p))
        line[0] = 0;
    int rc = pclose(p);
    return rc == 0 ? atof(line) : 0;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n > 0 ? malloc((size_t)n) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = b ? (size_t)n : 0;
    return b;
}

/* best-of-N MB/s of k3_tok_encode on text */
static double encode_mbs(const k3_tok *t, const char *text, size_t len) {
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        k3_ids ids = {0};
        double t0  = now();
        if (k3_tok_encode(t, text, len, 0, &ids)) {
            fprintf(stderr, "bench-tok: encode: %s\n", k3_errmsg());
            return 0;
        }
        double dt = now() - t0;
        if (dt < best)
            best = dt;
        k3_ids_free(&ids);
    }
    return (double)len / 1e6 / best;
}

/* The tok_model_open pair and tok_parse_release (above). */
static int model_open(void) {
    char gen[1024];
    if (bench_mkmodel("--preset tiny --merges 163328 --seed 1", "k3-bench-tokopen", gen, sizeof gen))
        return 1;
    enum { RUNS = 5 };
    double    borrow[RUNS], own[RUNS], parse[RUNS];
    int       rc = 0;
    k3_params p;
    for (int r = 0; r < RUNS && !rc; r++) {
        k3_model     *m = NULL;
        const k3_tok *bt;
        k3_tok       *t  = NULL;
        double        t0 = now();
        if (k3_params_default(&p) || k3_model_open(gen, &p, &m) || k3_model_tok(m, &bt)) {
            rc = 1;
            break;
        }
        borrow[r] = now() - t0;
        k3_model_free(m);
        t0 = now();
        if (k3_model_open(gen, &p, &m)) {
            rc = 1;
            break;
        }
        k3_model_info info;
        k3_model_get_info(m, &info);
        double t1 = now();
        rc        = k3_tok_load_model(gen, info.vocab, &t) != K3_OK;
        own[r]    = now() - t0;
        parse[r]  = now() - t1;
        k3_tok_free(t);
        k3_model_free(m);
    }
    if (rc)
        fprintf(stderr, "bench-tok: %s: %s\n", gen, k3_errmsg());
    else {
        bench_report("tok_model_open", 1e3 * bench_median(borrow, RUNS), "ms", 1e3 * bench_median(own, RUNS),
                     "ms");
        bench_report("tok_parse_release", 1e3 * bench_median(parse, RUNS), "ms", 0, "");
    }
    bench_rmmodel(gen);
    return rc;
}

int bench_tok(void) {
    if ((bench_want("tok_model_open") || bench_want("tok_parse_release")) && model_open())
        return 1;
    if (!bench_want("tok_encode_o200k") && !bench_want("tok_encode_kimi"))
        return 0;
    if (access("tools/mkcorpus.js", R_OK) || access("tools/tiktoken-ref.cjs", R_OK)) {
        printf("# tok: run from the repository root (tools/mkcorpus.js not found)\n");
        return 1;
    }
    if (sh("command -v node >/dev/null 2>&1")) {
        printf("# tok: node is not installed: no corpus, no reference; skipped\n");
        return 0;
    }
    const char *home = getenv("HOME");
    char        cache[1024], dir[] = "/tmp/k3-bench-tok.XXXXXX", cmd[4096];
    if (k3_setting_env_str(K3_SETTING_TIKTOKEN_JS))
        snprintf(cache, sizeof cache, "%s", k3_setting_env_str(K3_SETTING_TIKTOKEN_JS));
    else
        snprintf(cache, sizeof cache, "%s/.cache/k3chat/tiktoken-js", home ? home : "/tmp");
    if (!mkdtemp(dir))
        return 1;

    snprintf(
        cmd, sizeof cmd,
        "mkdir -p '%s' && cd '%s' && { [ -f package.json ] || echo '{\"private\":true}' > package.json; } && "
        "{ [ -f node_modules/js-tiktoken/package.json ] || npm install --no-audit --no-fund "
        "js-tiktoken@1.0.21 >/dev/null 2>&1; } && "
        "{ [ -f node_modules/tiktoken/package.json ] || npm install --no-audit --no-fund tiktoken@1.0.22 "
        ">/dev/null 2>&1; true; }",
        cache, cache);
    int have_js = sh(cmd) == 0;
    snprintf(cmd, sizeof cmd,
             "node tools/mkcorpus.js %s/corpus.txt 1.2 nolong && NODE_PATH='%s/node_modules' node "
             "tools/tiktoken-ref.cjs export %s",
             dir, cache, dir);
    if (!have_js || sh(cmd)) {
        printf("# tok: could not install tiktoken's JS port from npm or export o200k_base; skipped\n");
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        sh(cmd);
        return 0;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/corpus.txt", dir);
    size_t  len;
    char   *text  = slurp(path, &len);
    int     rc    = 1;
    k3_tok *o200k = NULL, *kimi = NULL;
    if (!text || k3_tok_load(dir, "o200k", &o200k) || k3_tok_load(dir, "kimi", &kimi)) {
        fprintf(stderr, "bench-tok: %s\n", text ? k3_errmsg() : "no corpus");
        goto done;
    }
    printf("# tok: corpus %.2f MB (tools/mkcorpus.js, no long runs), vocabulary o200k_base, best of 5, wall "
           "time\n",
           (double)len / 1e6);
    double c_o200k = encode_mbs(o200k, text, len);
    double c_kimi  = encode_mbs(kimi, text, len);
    if (bench_want("tok_encode_o200k")) {
        snprintf(cmd, sizeof cmd, "NODE_PATH='%s/node_modules' node tools/tiktoken-ref.cjs bench js o200k %s",
                 cache, path);
        bench_report("tok_encode_o200k", c_o200k, "MB/s", run_num(cmd), "MB/s");
        snprintf(cmd, sizeof cmd,
                 "NODE_PATH='%s/node_modules' node tools/tiktoken-ref.cjs bench wasm o200k %s 2>/dev/null",
                 cache, path);
        double w = run_num(cmd);
        if (w == 0)
            printf("# tok: WASM tiktoken not available: ref 0\n");
        bench_report("tok_encode_o200k_wasm", c_o200k, "MB/s", w, "MB/s");
    }
    if (bench_want("tok_encode_kimi")) {
        snprintf(cmd, sizeof cmd,
                 "NODE_PATH='%s/node_modules' node tools/tiktoken-ref.cjs bench wasm kimi %s 2>/dev/null",
                 cache, path);
        bench_report("tok_encode_kimi", c_kimi, "MB/s", run_num(cmd), "MB/s");
    }
    rc = 0;
done:
    k3_tok_free(o200k);
    k3_tok_free(kimi);
    free(text);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    sh(cmd);
    return rc;
}
