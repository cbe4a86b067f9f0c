/* test-model.c: the engine API on generated checkpoints (build/k3-mkmodel).
 *
 * Chunked prefill is bit-identical to token-at-a-time (K3_CHUNK 32 vs 1, and odd feed splits)
 * over >= 100 positions, and so is a prefill window (K3_WINDOW 1, 7, 128, 1024, the fit's) over
 * 1,100, with model and uniform routing, reading each expert once per layer; cancel during prefill and decode
 * leaves a session that continues exactly like one never cancelled; snapshots restore identical logits;
 * context overflow, bad ids, a missing tensor, NaN weights and a NaN MXFP4 scale give clear errors. The
 * comparison against the numpy reference is tests/t-ref.py.
 */
#include "canceller.h"
#include "k3.h"
#include "st.h"
#include "test.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NPOS 110

static char tmp[512], build[512];
static int  g_quant;  /* 1: open models with the default (quantized) K3_*BITS        */
static int  g_stream; /* 1: routed experts streamed through a one-slot expert cache   */

static k3_model *open_model(const char *dir, int chunk, int max_ctx, const char *logits_path) {
    k3_params p;
    if (k3_params_default(&p))
        return NULL;
    if (!g_quant)
        p.bits = p.mla_bits = p.head_bits = 32;
    if (g_stream)
        p.expert_gb = 1e-6; /* the floor: one slot per layer */
    if (chunk)
        p.chunk = chunk;
    if (max_ctx)
        p.max_ctx = max_ctx;
    p.logits_path = logits_path;
    /* one thread after the first (default-threads) model: on a loaded 2-core test machine
     * spinning OpenMP workers cost far more than they give on a tiny model */
    static int n_open;
    p.threads   = n_open++ ? 1 : 0;
    k3_model *m = NULL;
    if (k3_model_open(dir, &p, &m))
        printf("# open %s: %s\n", dir, k3_errmsg());
    return m;
}

/* ---- chunk 32 vs chunk 1 ------------------------------------------------ */

/* A file of floats: n gets their count. */
static float *read_floats(const char *path, size_t *n) {
    float *p = (float *)(void *)t_read_file(path, n);
    *n /= sizeof(float);
    return p;
}

static void test_chunks(const char *dir, const int32_t *ids, int vocab) {
    const char *what = g_quant ? "default bits" : g_stream ? "f32, streamed experts" : "f32";
    char        f32[600], f1[600], fs[600];
    snprintf(f32, sizeof f32, "%s/c32.f32", tmp);
    snprintf(f1, sizeof f1, "%s/c1.f32", tmp);
    snprintf(fs, sizeof fs, "%s/cs.f32", tmp);
    const int   chunks[3] = {32, 1, 7};
    const char *files[3]  = {f32, f1, fs};
    for (int i = 0; i < 3; i++) {
        k3_model   *m = open_model(dir, chunks[i], 0, files[i]);
        k3_session *s = NULL;
        if (!m || k3_session_new(m, &s)) {
            T_CHECK(0, "open for chunk %d: %s", chunks[i], k3_errmsg());
            k3_model_free(m);
            return;
        }
        if (i < 2)
            T_CHECK(k3_session_feed(s, ids, NPOS) == K3_OK, "feed %d ids at chunk %d", NPOS, chunks[i]);
        else { /* odd splits: 45, 1, 1, 63 at chunk 7 */
            int ok = !k3_session_feed(s, ids, 45) && !k3_session_feed(s, ids + 45, 1) &&
                     !k3_session_feed(s, ids + 46, 1) && !k3_session_feed(s, ids + 47, NPOS - 47);
            T_CHECK(ok, "feed in splits 45+1+1+63 at chunk 7");
        }
        T_CHECK(k3_session_pos(s) == NPOS, "position %d after the feed (got %d)", NPOS, k3_session_pos(s));
        k3_session_free(s);
        k3_model_free(m);
    }
    size_t n32, n1, ns;
    float *a = read_floats(f32, &n32), *b = read_floats(f1, &n1), *c = read_floats(fs, &ns);
    T_CHECK(a && n32 == (size_t)NPOS * vocab, "K3_LOGITS holds %d positions x %d (got %zu floats)", NPOS,
            vocab, a ? n32 : 0);
    T_CHECK(a && b && n1 == n32 && !memcmp(a, b, n32 * 4),
            "%s: K3_CHUNK=32 and K3_CHUNK=1 logits bit-identical over %d positions", what, NPOS);
    T_CHECK(a && c && ns == n32 && !memcmp(a, c, n32 * 4),
            "%s: chunk 7 with feeds split 45+1+1+63 bit-identical to chunk 32", what);
    free(a);
    free(b);
    free(c);
}

/* ---- prefill windows --------------------------------------------------------- */

#define NWIN 1100 /* positions: past the 1024-token window */

/* Open DIR with chunk C, window W (K3_WINDOW; 0: the fit's), routing ROUTE (K3_ROUTE=uniform
 * when 1), routed experts through a one-slot cache, logits of every position into LOGITS;
 * feed ids; the session's stats into st. 0 on success. */
static int window_run(const char *dir, int C, int W, int route, const int32_t *ids, const char *logits,
                      k3_stats *st) {
    k3_params p;
    if (k3_params_default(&p))
        return -1;
    p.bits = p.mla_bits = p.head_bits = 32;
    p.expert_gb                       = 1e-6;
    p.chunk                           = C;
    p.window                          = W;
    p.route                           = route;
    p.max_ctx                         = 2048;
    p.threads                         = 1;
    p.logits_path                     = logits;
    k3_model   *m                     = NULL;
    k3_session *s                     = NULL;
    int         rc                    = -1;
    if (!k3_model_open(dir, &p, &m) && !k3_session_new(m, &s) && !k3_session_feed(s, ids, NWIN) &&
        k3_session_pos(s) == NWIN) {
        k3_session_stats(s, st);
        rc = 0;
    } else
        printf("# window run C=%d W=%d: %s\n", C, W, k3_errmsg());
    k3_session_free(s);
    k3_model_free(m);
    return rc;
}

/* A prefill window gives the logits of token-at-a-time (K3_CHUNK=1 K3_WINDOW=1, the
 * reference) at every position, at windows of 7, 128, 1024 and the fit's (the whole prompt, also
 * at K3_CHUNK=1), and the per-chunk path (window = chunk) too; with K3_ROUTE=uniform (every expert touched)
 * the whole-prompt window reads each expert of a layer once: misses = MoE layers x experts, where the
 * per-chunk path reads them again for every chunk. */
static void test_windows(const char *dir, const int32_t *ids, int vocab, int n_moe, int n_experts) {
    static const int cw[][2] = {{1, 0}, {3, 7}, {32, 128}, {8, 1024}, {32, 0}, {32, 32}};
    char             ref[600], got[600];
    snprintf(ref, sizeof ref, "%s/w-ref.f32", tmp);
    snprintf(got, sizeof got, "%s/w-got.f32", tmp);
    for (int route = 0; route < 2; route++) {
        const char *rn = route ? "K3_ROUTE=uniform" : "model routing";
        k3_stats    st;
#if defined(__SANITIZE_ADDRESS__)
        /* the sanitizer tree runs the window code once, with uniform routing (its reads of each
         * expert are checked, and test_window_cancel reads its reference file): each route's
         * seven runs of 1,100 positions took 13 CPU-s there; the normal tree runs both */
        if (!route) {
            T_SKIP("model routing's window runs in the sanitizer tree (the normal tree compares them bit "
                   "for bit; the same window code runs here with K3_ROUTE=uniform)");
            continue;
        }
#endif
        if (window_run(dir, 1, 1, route, ids, ref, &st)) { /* window 1 */
            T_CHECK(0, "%s: token-at-a-time run of %d positions", rn, NWIN);
            continue;
        }
        size_t nr;
        float *a = read_floats(ref, &nr);
        T_CHECK(a && nr == (size_t)NWIN * vocab, "%s: K3_LOGITS holds %d positions", rn, NWIN);
        uint64_t miss_whole = 0, miss_chunk = 0;
        for (size_t i = 0; i < sizeof cw / sizeof *cw; i++) {
            const int C = cw[i][0], W = cw[i][1];
            if (window_run(dir, C, W, route, ids, got, &st)) {
                T_CHECK(0, "%s: run at K3_CHUNK=%d K3_WINDOW=%d", rn, C, W);
                continue;
            }
            size_t nb;
            float *b  = read_floats(got, &nb);
            int    ew = W ? (W > C ? W : C) : NWIN; /* the window the feed ran with */
            T_CHECK(st.window == ew, "%s: K3_CHUNK=%d K3_WINDOW=%d runs a window of %d tokens (got %d)", rn,
                    C, W, ew, st.window);
            T_CHECK(a && b && nb == nr && !memcmp(a, b, nr * 4),
                    "%s: K3_CHUNK=%d, window %d: logits of %d positions bit-identical to token-at-a-time", rn,
                    C, ew, NWIN);
            free(b);
            if (W == 0)
                miss_whole = st.expert_misses;
            if (W == C)
                miss_chunk = st.expert_misses;
        }
        free(a);
        if (route) {
            const uint64_t floor = (uint64_t)n_moe * (uint64_t)n_experts;
            T_CHECK(miss_whole == floor,
                    "%s, whole-prompt window: %llu expert reads = %d MoE layers x %d experts (each once)", rn,
                    (unsigned long long)miss_whole, n_moe, n_experts);
            T_CHECK(miss_chunk > 10 * floor,
                    "%s, per-chunk path (window = K3_CHUNK=32): %llu expert reads, more than 10x the %llu of "
                    "the window",
                    rn, (unsigned long long)miss_chunk, (unsigned long long)floor);
        }
    }
}

/* ---- cancel ---------------------------------------------------------------- */

/* Feed with a thread cancelling after delay_ns; returns the status. */
static k3_status feed_cancelled(k3_session *s, const int32_t *ids, int n, long delay_ns) {
    t_canceller c;
    t_cancel_start(&c, s, delay_ns);
    k3_status st = k3_session_feed(s, ids, n);
    t_cancel_stop(&c);
    return st;
}

static int32_t argmax(const float *l, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b])
            b = i;
    return b;
}

static void test_cancel(const char *dir, const int32_t *ids, int vocab) {
    const char *w   = g_stream ? "streamed experts: " : "";
    k3_model   *m   = open_model(dir, 8, 0, NULL);
    k3_session *ref = NULL, *s = NULL;
    if (!m || k3_session_new(m, &ref) || k3_session_new(m, &s)) {
        T_CHECK(0, "open for cancel: %s", k3_errmsg());
        goto done;
    }
    /* the uncancelled run: prompt, then NGEN greedy tokens */
    enum { NGEN = 48 };
    int32_t gen[NGEN];
    float  *want = malloc((size_t)vocab * sizeof(float)), *want8 = malloc((size_t)vocab * sizeof(float));
    k3_session_feed(ref, ids, NPOS);
    for (int i = 0; i < NGEN; i++) {
        if (i == 8)
            memcpy(want8, k3_session_logits(ref), (size_t)vocab * sizeof(float));
        gen[i] = argmax(k3_session_logits(ref), vocab);
        k3_session_feed(ref, &gen[i], 1);
    }
    memcpy(want, k3_session_logits(ref), (size_t)vocab * sizeof(float));

    /* prefill cancelled at several moments, then resumed from where it stopped */
    static const long delays[]  = {0, 20000, 200000, 1000000, 3000000};
    int               n_aborted = 0, consistent = 1, mid = 0;
    for (size_t k = 0; k < sizeof delays / sizeof *delays; k++) {
        k3_session_reset(s);
        k3_status st = feed_cancelled(s, ids, NPOS, delays[k]);
        int       p  = k3_session_pos(s);
        if (st == K3_ABORTED)
            n_aborted++;
        else if (st != K3_OK)
            consistent = 0;
        consistent &= p % 8 == 0 || p == NPOS; /* whole chunks only */
        mid += p > 0 && p < NPOS;
        if (p < NPOS && k3_session_feed(s, ids + p, NPOS - p))
            consistent = 0;
        int32_t tok[8];
        for (int i = 0; i < 8 && consistent; i++) {
            tok[i] = argmax(k3_session_logits(s), vocab);
            consistent &= tok[i] == gen[i];
            if (k3_session_feed(s, &tok[i], 1))
                consistent = 0;
        }
        consistent &= !memcmp(k3_session_logits(s), want8, (size_t)vocab * sizeof(float));
    }
    T_CHECK(n_aborted > 0, "%scancel during prefill returns K3_ABORTED (%d of 5 runs)", w, n_aborted);
    T_CHECK(consistent,
            "%safter a cancelled prefill (%d stopped mid-prompt) the session resumes at a chunk "
            "boundary and gives the same tokens and bit-identical logits",
            w, mid);

    /* decode cancelled: the step is not applied, repeating it continues identically */
    k3_session_reset(s);
    k3_session_feed(s, ids, NPOS);
    int dec_ok = 1, dec_ab = 0;
    for (int i = 0; i < NGEN; i++) {
        int32_t   t  = argmax(k3_session_logits(s), vocab);
        int       p  = k3_session_pos(s);
        k3_status st = feed_cancelled(s, &t, 1, 0);
        dec_ok &= t == gen[i] && (st == K3_OK || st == K3_ABORTED);
        if (st == K3_ABORTED) {
            dec_ab++;
            dec_ok &= k3_session_pos(s) == p && argmax(k3_session_logits(s), vocab) == t;
            if (k3_session_feed(s, &t, 1))
                dec_ok = 0;
        }
    }
    dec_ok &= !memcmp(k3_session_logits(s), want, (size_t)vocab * sizeof(float));
    T_CHECK(dec_ab > 0, "%scancel during decode returns K3_ABORTED (%d of %d steps)", w, dec_ab, NGEN);
    T_CHECK(dec_ok, "%safter cancelled decode steps the session gives the same tokens and logits", w);

    /* a cancel before the feed is cleared by the feed (k3.h contract) */
    k3_session_cancel(s);
    T_CHECK(k3_session_feed(s, ids, 1) == K3_OK, "%sa cancel before a feed does not abort it", w);
    free(want);
    free(want8);
done:
    k3_session_free(ref);
    k3_session_free(s);
    k3_model_free(m);
}

/* ---- snapshots, context, bad ids ------------------------------------------------ */

/* A cancel during a prefill window (the whole 1,100-token prompt) leaves the session where it
 * was; the same session then gives token-at-a-time's logits (test_windows' reference file). */
static void test_window_cancel(const char *dir, const int32_t *ids, int vocab) {
    char ref[600];
    snprintf(ref, sizeof ref, "%s/w-ref.f32", tmp);
    size_t      nr;
    float      *a = read_floats(ref, &nr);
    k3_params   p;
    k3_model   *m = NULL;
    k3_session *s = NULL;
    if (!a || nr != (size_t)NWIN * vocab || k3_params_default(&p)) {
        T_CHECK(0, "window cancel: the reference logits of %d positions", NWIN);
        free(a);
        return;
    }
    p.bits = p.mla_bits = p.head_bits = 32;
    p.chunk = 32, p.max_ctx = 2048, p.threads = 1;
    p.route = 1; /* test_windows' last reference file is K3_ROUTE=uniform's */
    if (k3_model_open(dir, &p, &m) || k3_session_new(m, &s)) {
        T_CHECK(0, "window cancel: open: %s", k3_errmsg());
        goto done;
    }
    k3_status st = K3_OK;
    for (long ms = 2; ms <= 512 && st != K3_ABORTED; ms *= 2) { /* until a cancel lands in the feed */
        k3_session_reset(s);
        st = feed_cancelled(s, ids, NWIN, ms * 1000000L);
    }
    T_CHECK(st == K3_ABORTED && k3_session_pos(s) == 0,
            "a cancel during a %d-token prefill window: K3_ABORTED, the session still at 0 (at %d: %s)", NWIN,
            k3_session_pos(s), k3_errmsg());
    k3_session_reset(s);
    st              = k3_session_feed(s, ids, NWIN);
    const float *lg = k3_session_logits(s);
    T_CHECK(!st && lg && !memcmp(lg, a + (size_t)(NWIN - 1) * vocab, (size_t)vocab * 4),
            "after it the same session's window gives token-at-a-time's last logits");
done:
    k3_session_free(s);
    k3_model_free(m);
    free(a);
}

static void test_snapshot(const char *dir, const int32_t *ids, int vocab) {
    k3_model   *m = open_model(dir, 16, 64, NULL);
    k3_session *s = NULL, *s2 = NULL;
    if (!m || k3_session_new(m, &s) || k3_session_new(m, &s2)) {
        T_CHECK(0, "open for snapshots: %s", k3_errmsg());
        goto done;
    }
    size_t       vb   = (size_t)vocab * sizeof(float);
    float       *at40 = malloc(vb), *at60 = malloc(vb);
    k3_snapshot *snap = NULL;
    T_CHECK(k3_session_logits(s) == NULL, "no logits before the first feed");
    k3_session_feed(s, ids, 40);
    memcpy(at40, k3_session_logits(s), vb);
    T_CHECK(k3_session_save(s, &snap) == K3_OK, "save at position 40");
    k3_session_feed(s, ids + 40, 20);
    memcpy(at60, k3_session_logits(s), vb);
    T_CHECK(k3_session_restore(s, snap) == K3_OK && k3_session_pos(s) == 40 &&
                !memcmp(k3_session_logits(s), at40, vb),
            "restore gives position 40 and its logits back");
    k3_session_feed(s, ids + 40, 20);
    T_CHECK(!memcmp(k3_session_logits(s), at60, vb),
            "feeding the same 20 ids after restore: identical logits");
    T_CHECK(k3_session_restore(s2, snap) == K3_OK, "restore into another session of the model");
    k3_session_feed(s2, ids + 40, 20);
    T_CHECK(!memcmp(k3_session_logits(s2), at60, vb), "the other session continues identically");

    /* context capacity 64 */
    k3_status st = k3_session_feed(s, ids, 5);
    T_CHECK(st == K3_ERR_CONTEXT && k3_session_pos(s) == 60 && strstr(k3_errmsg(), "K3_MAXT"),
            "65 tokens in a 64-token context: K3_ERR_CONTEXT, nothing applied (%s)", k3_errmsg());
    T_CHECK(k3_session_feed(s, ids, 4) == K3_OK && k3_session_pos(s) == 64, "exactly 64 tokens fit");
    T_CHECK(k3_session_feed(s, ids, 1) == K3_ERR_CONTEXT, "one more token: K3_ERR_CONTEXT");
    int32_t bad[2] = {1, vocab};
    k3_session_reset(s);
    T_CHECK(k3_session_pos(s) == 0 && k3_session_feed(s, bad, 2) == K3_ERR_ARG && k3_session_pos(s) == 0,
            "an id >= vocab is K3_ERR_ARG and nothing is applied (%s)", k3_errmsg());
    k3_session_feed(s, ids, 40);
    T_CHECK(!memcmp(k3_session_logits(s), at40, vb), "after reset the same 40 ids give the same logits");

    k3_stats stt;
    k3_session_stats(s, &stt);
    T_CHECK(stt.n_prefill >= 40 && stt.t_prefill > 0, "stats count prefill tokens (%lld)",
            (long long)stt.n_prefill);
    k3_snapshot_free(snap);
    free(at40);
    free(at60);
done:
    k3_session_free(s);
    k3_session_free(s2);
    k3_model_free(m);
}

/* ---- corrupted checkpoints ---------------------------------------------------- */

/* Overwrite 4 bytes at the start of tensor name's data in the single-file model dir. */
static int poke(const char *dir, const char *name, const void *bytes, size_t n) {
    st_dir *d = NULL;
    if (st_open(dir, &d))
        return -1;
    const st_tensor *t  = st_find(d, name);
    int              rc = -1;
    if (t) {
        int fd = open(st_shard_path(d, t->shard), O_WRONLY);
        if (fd >= 0) {
            rc = pwrite(fd, bytes, n, (off_t)t->offset) == (ssize_t)n ? 0 : -1;
            close(fd);
        }
    }
    st_close(d);
    return rc;
}

/* Set every byte of tensor name's data in the single-file model dir to v. */
static int fill(const char *dir, const char *name, uint8_t v) {
    st_dir *d = NULL;
    if (st_open(dir, &d))
        return -1;
    const st_tensor *t   = st_find(d, name);
    int              rc  = -1;
    uint8_t         *buf = t ? malloc((size_t)t->nbytes) : NULL;
    if (buf) {
        memset(buf, v, (size_t)t->nbytes);
        int fd = open(st_shard_path(d, t->shard), O_WRONLY);
        if (fd >= 0) {
            rc = pwrite(fd, buf, (size_t)t->nbytes, (off_t)t->offset) == (ssize_t)t->nbytes ? 0 : -1;
            close(fd);
        }
    }
    free(buf);
    st_close(d);
    return rc;
}

/* Rename a tensor in the header of DIR/model.safetensors by changing its last letter. */
static int rename_tensor(const char *dir, const char *name) {
    char path[1200], key[300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(key, sizeof key, "%s\"", name);
    FILE *f = fopen(path, "r+b");
    if (!f)
        return -1;
    uint64_t hl;
    char    *h  = NULL;
    int      rc = -1;
    if (fread(&hl, 8, 1, f) == 1 && hl < (1u << 26) && (h = malloc(hl + 1)) && fread(h, 1, hl, f) == hl) {
        h[hl]   = 0;
        char *p = strstr(h, key);
        if (p) {
            p[strlen(name) - 1] = 'X';
            fseek(f, 8, SEEK_SET);
            rc = fwrite(h, 1, hl, f) == hl ? 0 : -1;
        }
    }
    free(h);
    fclose(f);
    return rc;
}

static void expect_open_error(const char *dir, k3_status want, const char *needle, const char *what) {
    k3_params p;
    k3_model *m = NULL;
    k3_params_default(&p);
    p.bits = p.mla_bits = p.head_bits = 32;
    k3_status st                      = k3_model_open(dir, &p, &m);
    T_CHECK(!m && st == want && strstr(k3_errmsg(), needle), "%s: %s, message names '%s' (%s)", what,
            k3_status_str(want), needle, k3_errmsg());
    k3_model_free(m);
}

/* One expert of layer 1 overflowing (scale 254 on its down projection): a token routed to it
 * fails, one that is not goes on. Batched together, the first leaves the pass at layer 1 and
 * the second's logits are those it has alone. */
static void test_overflow_batch(const char *good, const char *bad) {
    t_sh("rm -rf '%s' && cp -r '%s' '%s'", bad, good, bad);
    T_CHECK(fill(bad, "model.layers.1.block_sparse_moe.experts.0.w2.weight_scale", 254) == 0,
            "scale bytes 254 in layer 1's expert 0 down projection of a copy");
    k3_model   *m      = open_model(bad, 0, 0, NULL);
    k3_session *ss[2]  = {NULL, NULL};
    int32_t     tok[2] = {-1, -1}; /* a token that fails, one that does not */
    float      *alone  = NULL;
    if (!m || k3_session_new(m, &ss[0]) || k3_session_new(m, &ss[1])) {
        T_CHECK(0, "open for the batch: %s", k3_errmsg());
        goto done;
    }
    k3_model_info info;
    k3_model_get_info(m, &info);
    for (int32_t id = 0; id < 200 && (tok[0] < 0 || tok[1] < 0); id++) {
        k3_session_reset(ss[0]);
        k3_status st = k3_session_feed(ss[0], &id, 1);
        if (st == K3_ERR_NUMERIC && tok[0] < 0)
            tok[0] = id;
        else if (st == K3_OK && tok[1] < 0) {
            tok[1] = id;
            alone  = malloc((size_t)info.vocab * sizeof(float));
            if (alone)
                memcpy(alone, k3_session_logits(ss[0]), (size_t)info.vocab * sizeof(float));
        }
    }
    if (tok[0] < 0 || tok[1] < 0 || !alone) {
        T_CHECK(0, "among ids 0..199 one routes to the overflowing expert (%d), one does not (%d)", tok[0],
                tok[1]);
        goto done;
    }
    k3_session_reset(ss[0]);
    const int32_t *ids[2] = {&tok[0], &tok[1]};
    int            n[2]   = {1, 1};
    k3_status      each[2];
    k3_session_feed_batch(ss, ids, n, 2, each);
    T_CHECK(each[0] == K3_ERR_NUMERIC && each[1] == K3_OK && k3_session_pos(ss[0]) == 0 &&
                k3_session_pos(ss[1]) == 1,
            "batch of ids %d and %d: the first fails, the second is applied (%s, %s)", tok[0], tok[1],
            k3_status_str(each[0]), k3_status_str(each[1]));
    T_CHECK(strstr(k3_errmsg(), "session 0: layer 1 (") != NULL,
            "the batch's message names session 0 and layer 1 (%s)", k3_errmsg());
    T_CHECK(each[1] == K3_OK && !memcmp(k3_session_logits(ss[1]), alone, (size_t)info.vocab * sizeof(float)),
            "the session left in the pass has the logits it has alone");
done:
    free(alone);
    k3_session_free(ss[0]);
    k3_session_free(ss[1]);
    k3_model_free(m);
}

static void test_corrupt(void) {
    char good[600], bad[700];
    snprintf(good, sizeof good, "%s/single", tmp);
    if (t_sh("'%s/k3-mkmodel' --preset tiny --seed 4 --f32 --single --quiet '%s' >/dev/null", build, good)) {
        T_CHECK(0, "k3-mkmodel --single --f32");
        return;
    }
    k3_model *m = open_model(good, 0, 0, NULL);
    T_CHECK(m != NULL, "the uncorrupted single-file F32 model opens");
    k3_model_free(m);

    const float nan = __builtin_nanf("");
    snprintf(bad, sizeof bad, "%s/nan", tmp);
    t_sh("rm -rf '%s' && cp -r '%s' '%s'", bad, good, bad);
    T_CHECK(poke(bad, "model.layers.1.input_layernorm.weight", &nan, 4) == 0, "write a NaN into a copy");
    expect_open_error(bad, K3_ERR_NUMERIC, "model.layers.1.input_layernorm.weight", "NaN in a norm weight");

    t_sh("rm -rf '%s' && cp -r '%s' '%s'", bad, good, bad);
    poke(bad, "model.layers.2.self_attn.q_proj.weight", &nan, 4);
    expect_open_error(bad, K3_ERR_NUMERIC, "model.layers.2.self_attn.q_proj.weight", "NaN in a KDA matrix");

    const float inf = __builtin_inff();
    t_sh("rm -rf '%s' && cp -r '%s' '%s'", bad, good, bad);
    poke(bad, "lm_head.weight", &inf, 4);
    expect_open_error(bad, K3_ERR_NUMERIC, "lm_head.weight", "inf in lm_head");

    const uint8_t s255 = 255;
    t_sh("rm -rf '%s' && cp -r '%s' '%s'", bad, good, bad);
    poke(bad, "model.layers.1.block_sparse_moe.experts.2.w3.weight_scale", &s255, 1);
    expect_open_error(bad, K3_ERR_NUMERIC, "experts.2.w3.weight_scale", "MXFP4 scale 255 (NaN)");

    /* MXFP4 scale 254 (2^127, valid) on every down projection of layer 1's experts: the weights
     * overflow f32 in the products, so the layer's output is not finite. The feed fails naming
     * that layer (not the logits 4 layers later), and nothing is applied */
    t_sh("rm -rf '%s' && cp -r '%s' '%s'", bad, good, bad);
    int filled = 1;
    for (int e = 0; e < 12; e++) {
        char nm[128];
        snprintf(nm, sizeof nm, "model.layers.1.block_sparse_moe.experts.%d.w2.weight_scale", e);
        filled &= fill(bad, nm, 254) == 0;
    }
    T_CHECK(filled, "scale bytes 254 in layer 1's 12 expert down projections of a copy");
    m             = open_model(bad, 0, 0, NULL);
    k3_session *s = NULL;
    int32_t     ids[20];
    for (int i = 0; i < 20; i++)
        ids[i] = 3 + 7 * i;
    if (!m || k3_session_new(m, &s))
        T_CHECK(0, "scale 254 is no load error: %s", k3_errmsg());
    else {
        k3_status st = k3_session_feed(s, ids, 20);
        T_CHECK(
            st == K3_ERR_NUMERIC && strstr(k3_errmsg(), "layer 1 (KDA, MoE)") && k3_session_pos(s) == 0,
            "overflowing expert weights: K3_ERR_NUMERIC naming layer 1, nothing applied (%s, position %d)",
            k3_errmsg(), k3_session_pos(s));
    }
    k3_session_free(s);
    k3_model_free(m);
    test_overflow_batch(good, bad);

    t_sh("rm -rf '%s' && cp -r '%s' '%s'", bad, good, bad);
    T_CHECK(rename_tensor(bad, "model.norm.weight") == 0, "rename model.norm.weight in a copy");
    m = open_model(bad, 0, 0, NULL);
    T_CHECK(!m && strstr(k3_errmsg(), "model.norm.weight"), "missing tensor: open fails naming it (%s)",
            k3_errmsg());
    k3_model_free(m);

    /* K3_X0 rows with an inf in row 2: the session names the file's row and column at its start */
    char x0[700];
    snprintf(x0, sizeof x0, "%s/x0.f32", tmp);
    FILE *xf = fopen(x0, "wb");
    if (xf) {
        float row[100] = {0}; /* the tiny preset's hidden_size */
        for (int r = 0; r < 3; r++) {
            row[7] = r == 2 ? __builtin_inff() : 0.5f;
            fwrite(row, sizeof row, 1, xf);
        }
        fclose(xf);
    }
    k3_params xp;
    k3_params_default(&xp);
    xp.bits = xp.mla_bits = xp.head_bits = 32;
    xp.x0_path                           = x0;
    m                                    = NULL;
    k3_session *xs                       = NULL;
    k3_status   xst                      = k3_model_open(good, &xp, &m) ? K3_ERR_ARG : k3_session_new(m, &xs);
    T_CHECK(xst == K3_ERR_NUMERIC && !xs &&
                strstr(k3_errmsg(), "x0.f32: row 2 (position), column 7 is infinite"),
            "K3_X0 with an inf: the session refuses it naming row and column (%s)", k3_errmsg());
    k3_session_free(xs);
    k3_model_free(m);

    /* K3_LOGITS writes every row of a chunk, so every row is checked, not only the last: lm_head
     * row 0 starts with 3e38 (finite, so the model opens), and the K3_X0 rows put the hidden state
     * of position 0 on column 0 (its logit 0 overflows) and the others on column 7 (finite) */
    const float big = 3e38f;
    t_sh("rm -rf '%s' && cp -r '%s' '%s'", bad, good, bad);
    T_CHECK(poke(bad, "lm_head.weight", &big, 4) == 0, "write 3e38 into lm_head of a copy");
    xf = fopen(x0, "wb");
    if (xf) {
        float row[100] = {0};
        for (int r = 0; r < 3; r++) {
            row[0] = r == 0 ? 1e4f : 0.0f;
            row[7] = r == 0 ? 0.0f : 1e4f;
            fwrite(row, sizeof row, 1, xf);
        }
        fclose(xf);
    }
    char lpath[720];
    snprintf(lpath, sizeof lpath, "%s/logits.f32", tmp);
    const int32_t lids[3] = {1, 2, 3};
    for (int hook = 0; hook < 2; hook++) {
        xp.logits_path = hook ? lpath : NULL;
        m              = NULL;
        xs             = NULL;
        xst            = k3_model_open(bad, &xp, &m) ? K3_ERR_ARG : k3_session_new(m, &xs);
        if (!xst)
            xst = k3_session_feed(xs, lids, 3);
        if (!hook)
            T_CHECK(xst == K3_OK, "lm_head 3e38, no K3_LOGITS: the chunk's last logits are finite (%s)",
                    xst ? k3_errmsg() : "ok");
        else
            T_CHECK(xst == K3_ERR_NUMERIC && strstr(k3_errmsg(), "logit 0 at position 0 is not finite") &&
                        k3_session_pos(xs) == 0,
                    "lm_head 3e38, K3_LOGITS: position 0's overflowing logit fails the chunk, naming it (%s)",
                    xst ? k3_errmsg() : "fed");
        k3_session_free(xs);
        k3_model_free(m);
    }
    xp.logits_path = NULL;

    T_CHECK(k3_model_open("/nonexistent/k3", NULL, &m) != K3_OK && !m && *k3_errmsg(),
            "a missing directory is an error (%s)", k3_errmsg());
    setenv("K3_CHUNK", "zero", 1);
    k3_params p;
    T_CHECK(k3_params_default(&p) == K3_ERR_ARG && strstr(k3_errmsg(), "K3_CHUNK"),
            "K3_CHUNK=zero is K3_ERR_ARG naming the variable (%s)", k3_errmsg());
    unsetenv("K3_CHUNK");
}

int main(void) {
    /* the engine's settings come from the test, not from the caller's environment */
    static const char *vars[] = {"K3_BITS",    "K3_MLA_BITS",  "K3_HEAD_BITS", "K3_CHUNK",
                                 "K3_MAXT",    "K3_EXPERT_GB", "K3_LOGITS",    "K3_TRACE",
                                 "K3_X0",      "K3_LAYERS",    "K3_IDOT",      "K3_TOPP",
                                 "K3_THREADS", "K3_WINDOW",    "K3_ROUTE",     "K3_ROUTE_SEED"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
    snprintf(tmp, sizeof tmp, "%s", t_tmp());
    snprintf(build, sizeof build, "%s", t_build());
    char dir[600];
    if (t_tiny_model("tiny", 3, dir, sizeof dir))
        return t_done();
    k3_model *m = open_model(dir, 0, 0, NULL);
    T_CHECK(m != NULL, "open the tiny model (%s)", m ? "" : k3_errmsg());
    if (!m)
        return t_done();
    k3_model_info info;
    k3_model_get_info(m, &info);
    T_CHECK(info.n_kda + info.n_mla == info.n_layers && info.n_moe + info.n_dense == info.n_layers &&
                info.bytes_resident > 0,
            "model info: %d layers (%d KDA, %d MLA), %d MoE, %.1f MB", info.n_layers, info.n_kda, info.n_mla,
            info.n_moe, (double)info.bytes_resident / 1e6);
    k3_model_free(m);
    int32_t ids[NPOS];
    srand(7);
    for (int i = 0; i < NPOS; i++)
        ids[i] = rand() % (info.vocab - 256 > 2 ? info.vocab - 256 : info.vocab);

    int32_t wids[NWIN];
    for (int i = 0; i < NWIN; i++)
        wids[i] = rand() % (info.vocab - 256 > 2 ? info.vocab - 256 : info.vocab);
    test_windows(dir, wids, info.vocab, info.n_moe, info.n_experts);
    test_window_cancel(dir, wids, info.vocab);
    test_chunks(dir, ids, info.vocab);
    char keep[700], got[700];
    snprintf(keep, sizeof keep, "%s/c32-resident.f32", tmp);
    snprintf(got, sizeof got, "%s/c32.f32", tmp);
    rename(got, keep);
    g_quant = 1;
    test_chunks(dir, ids, info.vocab);
    g_quant  = 0;
    g_stream = 1;
    test_chunks(dir, ids, info.vocab);
    size_t na, nb;
    float *ra = read_floats(keep, &na), *rb = read_floats(got, &nb);
    T_CHECK(ra && rb && na == nb && !memcmp(ra, rb, na * 4),
            "streamed experts (one cache slot) give the same logits as resident ones");
    free(ra);
    free(rb);
    test_cancel(dir, ids, info.vocab);
    g_stream = 0;
    test_cancel(dir, ids, info.vocab);
    test_snapshot(dir, ids, info.vocab);
    test_corrupt();
    return t_done();
}
