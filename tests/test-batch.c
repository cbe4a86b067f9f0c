/* test-batch.c: k3_session_feed_batch, several sessions of one model advancing together.
 *
 * Every check compares the batch against each session run alone with k3_session_feed on a
 * reference session of the same model, BIT FOR BIT (logits memcmp, positions, token counts):
 * 1, 2, 3 and 8 sessions at different positions, fresh ones and ones restored from snapshots,
 * prefills longer than a chunk (several rounds) mixed with decode steps, then greedy decode
 * rounds and a mixed round; in f32 and with the default quantized bits at every K3_ISA level
 * this CPU runs, with K3_CHUNK 5 and 32, with routed experts streamed through a one-slot
 * expert cache, and on k3-nano's trained weights; and with the Vulkan tier on (K3_VK=1, when
 * a device is there) once every routed expert is resident. A prompt joining decode steps runs
 * as a prefill window (each expert read once, not once per chunk), also when its buffer must
 * shrink (K3_TEST_WINDOW_MAX). Then a session cancelled mid-batch (the others
 * finish identical, it resumes exactly), per-session bad input (the others go on), malformed calls
 * (K3_ERR_ARG naming the problem, nothing changed) and a failed expert read (K3_ERR_IO for the whole pass,
 * nothing applied, then exact once the file is back).
 */
#include "canceller.h"
#include "k3.h"
#include "quant.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXS 8
#define POOL 400

static char    tmp[512], build[512];
static int32_t pool[POOL];
static int     vocab;

typedef struct cfg {
    int quant;  /* 1: default K3_*BITS, 0: f32                   */
    int stream; /* 1: routed experts through a one-slot cache    */
    int chunk;
} cfg;

static k3_model *open_model(const char *dir, const cfg *c) {
    k3_params p;
    if (k3_params_default(&p))
        return NULL;
    if (!c->quant)
        p.bits = p.mla_bits = p.head_bits = 32;
    if (c->stream)
        p.expert_gb = 1e-6;
    p.chunk   = c->chunk;
    p.max_ctx = 256;
    static int n_open; /* default threads once (the OpenMP paths), then one */
    p.threads   = n_open++ ? 1 : 0;
    k3_model *m = NULL;
    if (k3_model_open(dir, &p, &m))
        printf("# open %s: %s\n", dir, k3_errmsg());
    return m;
}

static int32_t argmax(const float *l) {
    int b = 0;
    for (int i = 1; i < vocab; i++)
        if (l[i] > l[b])
            b = i;
    return b;
}

/* One session of a scenario: fed pre tokens first (restored from a snapshot when snap), then
 * n tokens in the batch. */
typedef struct sspec {
    int pre, snap, n;
} sspec;

typedef struct pair {
    k3_session *b, *r; /* batched, reference (alone) */
    int         off;   /* where its ids start in pool */
} pair;

/* Same position, same logits bits, same token counts. */
static int same(const pair *p) {
    const float *a = k3_session_logits(p->b), *b = k3_session_logits(p->r);
    k3_stats     sa, sb;
    k3_session_stats(p->b, &sa);
    k3_session_stats(p->r, &sb);
    return k3_session_pos(p->b) == k3_session_pos(p->r) && a && b &&
           !memcmp(a, b, (size_t)vocab * sizeof(float)) && sa.n_prefill == sb.n_prefill &&
           sa.n_decode == sb.n_decode;
}

static int setup(k3_model *m, const sspec *sp, int count, pair *ps) {
    for (int i = 0; i < count; i++) {
        ps[i].off = (i * 37) % (POOL - 200);
        if (k3_session_new(m, &ps[i].b) || k3_session_new(m, &ps[i].r))
            return 0;
        if (!sp[i].pre)
            continue;
        if (k3_session_feed(ps[i].r, pool + ps[i].off, sp[i].pre))
            return 0;
        if (sp[i].snap) { /* from a snapshot of another session */
            k3_session  *o    = NULL;
            k3_snapshot *snap = NULL;
            int          ok   = !k3_session_new(m, &o) && !k3_session_feed(o, pool + ps[i].off, sp[i].pre) &&
                     !k3_session_save(o, &snap) && !k3_session_restore(ps[i].b, snap);
            k3_snapshot_free(snap);
            k3_session_free(o);
            if (!ok)
                return 0;
        } else if (k3_session_feed(ps[i].b, pool + ps[i].off, sp[i].pre))
            return 0;
        k3_session_reset_stats(ps[i].b);
        k3_session_reset_stats(ps[i].r);
    }
    return 1;
}

/* One batch call with n[i] ids per session from tok[i]; the references fed alone. Returns 1
 * when every session matches its reference. */
static int step(pair *ps, int count, const int32_t *const *tok, const int *n) {
    k3_session *ss[MAXS] = {0};
    k3_status   each[MAXS];
    for (int i = 0; i < count; i++)
        ss[i] = ps[i].b;
    k3_status st = k3_session_feed_batch(ss, tok, n, count, each);
    if (st)
        printf("# batch: %s\n", k3_errmsg());
    int ok = st == K3_OK;
    for (int i = 0; i < count; i++) {
        k3_status sr = k3_session_feed(ps[i].r, tok[i], n[i]);
        ok &= each[i] == K3_OK && sr == K3_OK && same(&ps[i]);
    }
    return ok;
}

/* The scenario, then 3 greedy decode rounds, a mixed round (odd sessions a 4-token chunk),
 * and 2 more decode rounds. */
static void scenario(k3_model *m, const char *what, const sspec *sp, int count) {
    pair ps[MAXS] = {{0}};
    if (!setup(m, sp, count, ps)) {
        T_CHECK(0, "%s: %d sessions set up: %s", what, count, k3_errmsg());
        goto done;
    }
    const int32_t *tok[MAXS];
    int            n[MAXS], fed[MAXS];
    for (int i = 0; i < count; i++) {
        tok[i] = pool + ps[i].off + sp[i].pre;
        n[i]   = sp[i].n;
        fed[i] = sp[i].pre + sp[i].n;
    }
    T_CHECK(step(ps, count, tok, n),
            "%s: %d sessions, first batch (prefills and decode steps mixed) "
            "bit-identical to each alone",
            what, count);
    int     ok = 1;
    int32_t next[MAXS];
    for (int r = 0; r < 6 && ok; r++) {
        for (int i = 0; i < count; i++) {
            next[i] = argmax(k3_session_logits(ps[i].r));
            tok[i]  = &next[i];
            n[i]    = 1;
            if (r == 3 && i % 2) { /* the mixed round: a chunk of the pool for odd sessions */
                tok[i] = pool + ps[i].off + fed[i];
                n[i]   = 4;
            }
        }
        ok = step(ps, count, tok, n);
    }
    T_CHECK(ok,
            "%s: %d sessions, 6 more rounds (greedy decode, one round mixing 4-token chunks) "
            "bit-identical to each alone",
            what, count);
done:
    for (int i = 0; i < count; i++) {
        k3_session_free(ps[i].b);
        k3_session_free(ps[i].r);
    }
}

static const sspec sc1[1] = {{0, 0, 7}};
static const sspec sc2[2] = {{10, 0, 1}, {0, 0, 12}};
static const sspec sc3[3] = {{0, 0, 1}, {5, 0, 17}, {20, 1, 1}};
static const sspec sc8[8] = {{0, 0, 1},  {3, 1, 1},  {9, 0, 6},  {31, 0, 1},
                             {0, 0, 23}, {50, 1, 1}, {12, 0, 2}, {70, 0, 1}};

static void scenarios(const char *dir, const cfg *c, const char *what, int all) {
    k3_model *m = open_model(dir, c);
    if (!m) {
        T_CHECK(0, "%s: open the model: %s", what, k3_errmsg());
        return;
    }
    if (all) {
        scenario(m, what, sc1, 1);
        scenario(m, what, sc2, 2);
        scenario(m, what, sc3, 3);
    }
    scenario(m, what, sc8, 8);
    k3_model_free(m);
}

/* ---- cancel ---------------------------------------------------------------- */

/* Three sessions prefill 60 tokens each at K3_CHUNK 5 (rounds of 5 columns); a thread cancels
 * the middle one from 0, 0.2, 1, 3 or 10 ms on (so the cancel lands before the first layer or
 * between the layers of a later pass, where its columns leave the pass). It stops with K3_ABORTED, the others
 * finish bit-identical to alone; fed the rest alone, it ends identical too (what it applied was applied
 * exactly). */
static void test_cancel(const char *dir) {
    cfg       c = {0, 0, 5};
    k3_model *m = open_model(dir, &c);
    if (!m) {
        T_CHECK(0, "cancel: open the model: %s", k3_errmsg());
        return;
    }
    int aborted = 0, others = 1, resumed = 1, boundary = 1;
    for (int run = 0; run < 5; run++) {
        sspec sp[3] = {{run, 0, 60}, {2 * run, 0, 60}, {0, 0, 60}};
        pair  ps[3] = {{0}};
        if (!setup(m, sp, 3, ps)) {
            T_CHECK(0, "cancel: set up: %s", k3_errmsg());
            break;
        }
        const int32_t *tok[3];
        int            n[3] = {60, 60, 60};
        k3_session    *ss[3];
        k3_status      each[3];
        for (int i = 0; i < 3; i++) {
            tok[i] = pool + ps[i].off + sp[i].pre;
            ss[i]  = ps[i].b;
        }
        static const long delays[5] = {0, 200000, 1000000, 3000000, 10000000};
        t_canceller       cn;
        t_cancel_start(&cn, ps[1].b, delays[run]);
        k3_status st = k3_session_feed_batch(ss, tok, n, 3, each);
        t_cancel_stop(&cn);
        for (int i = 0; i < 3; i += 2) {
            k3_session_feed(ps[i].r, tok[i], n[i]);
            others &= each[i] == K3_OK && same(&ps[i]);
        }
        if (each[1] == K3_ABORTED) {
            aborted++;
            int done = k3_session_pos(ps[1].b) - sp[1].pre;
            printf("# run %d: cancelled from %.1f ms on, stopped after %d of 60 ids\n", run,
                   (double)cn.delay_ns / 1e6, done);
            boundary &= st == K3_ABORTED && done >= 0 && done < 60;
            if (done < 60 && !k3_session_feed(ps[1].b, tok[1] + done, 60 - done)) {
                k3_session_feed(ps[1].r, tok[1], 60);
                k3_stats sb;
                k3_session_stats(ps[1].b, &sb);
                const float *a = k3_session_logits(ps[1].b), *b = k3_session_logits(ps[1].r);
                resumed &= k3_session_pos(ps[1].b) == k3_session_pos(ps[1].r) && a && b &&
                           !memcmp(a, b, (size_t)vocab * sizeof(float)) && sb.n_prefill == 60;
            } else
                resumed = 0;
        } else
            boundary &= each[1] == K3_OK;
        for (int i = 0; i < 3; i++) {
            k3_session_free(ps[i].b);
            k3_session_free(ps[i].r);
        }
    }
    T_CHECK(aborted > 0, "a session cancelled mid-batch stops with K3_ABORTED (%d of 5 runs)", aborted);
    T_CHECK(boundary, "the cancelled session stopped short of its 60 ids, and the call returned K3_ABORTED");
    T_CHECK(others, "the other sessions of the batch finish bit-identical to alone");
    T_CHECK(resumed, "fed the rest alone, the cancelled session ends bit-identical to one never cancelled");
    k3_model_free(m);
}

/* ---- a joining prompt runs as a prefill window ----------------------------------- */

/* Two sessions decode while a third joins with a 90-token prompt, at K3_CHUNK=5, routed experts
 * through a one-slot cache and K3_ROUTE=uniform (every expert of a layer touched): the batch
 * runs the prompt as one window of the fit's size with the decode columns in it (88 of its ids
 * in the first pass, the last 2 in a second), so the batch reads each expert of a layer at most
 * twice, where chunks of 5 would read it 18 times; every session bit-identical to alone. */
static void test_window(const char *dir, int n_moe, int n_experts) {
    k3_params p;
    k3_model *m = NULL;
    if (k3_params_default(&p)) {
        T_CHECK(0, "window: parameters: %s", k3_errmsg());
        return;
    }
    p.bits = p.mla_bits = p.head_bits = 32;
    p.chunk                           = 5;
    p.max_ctx                         = 256;
    p.expert_gb                       = 1e-6;
    p.route                           = 1;
    p.threads                         = 1;
    if (k3_model_open(dir, &p, &m)) {
        T_CHECK(0, "window: open: %s", k3_errmsg());
        return;
    }
    const sspec sp[3] = {{10, 0, 1}, {0, 0, 90}, {20, 0, 1}};
    pair        ps[3] = {{0}};
    if (!setup(m, sp, 3, ps)) {
        T_CHECK(0, "window: set up: %s", k3_errmsg());
        goto done;
    }
    const int32_t *tok[3];
    int            n[3];
    for (int i = 0; i < 3; i++) {
        tok[i] = pool + ps[i].off + sp[i].pre;
        n[i]   = sp[i].n;
    }
    T_CHECK(step(ps, 3, tok, n),
            "window: a 90-token prompt joining two decode steps: bit-identical to each alone");
    k3_stats st[3];
    uint64_t miss = 0;
    for (int i = 0; i < 3; i++) {
        k3_session_stats(ps[i].b, &st[i]);
        miss += st[i].expert_misses;
    }
    T_CHECK(st[1].window == 88, "window: the joining prompt ran 88 of its 90 ids in one pass (got %d)",
            st[1].window);
    T_CHECK(st[0].window == 5 && st[2].window == 5,
            "window: the decode sessions' window stays their chunk (got %d, %d)", st[0].window, st[2].window);
    T_CHECK(miss > 0 && miss <= 2ull * (uint64_t)n_moe * (uint64_t)n_experts,
            "window: the batch read %llu experts, at most twice each of %d MoE layers x %d (chunks of 5: 18 "
            "times)",
            (unsigned long long)miss, n_moe, n_experts);
    /* the window's buffer out of memory when the batch comes (K3_TEST_WINDOW_MAX=40): it halves
     * to 45, then 22 columns, which it gets; still bit-identical */
    for (int i = 0; i < 3; i++) {
        k3_session_free(ps[i].b);
        k3_session_free(ps[i].r);
        ps[i].b = ps[i].r = NULL;
    }
    setenv("K3_TEST_WINDOW_MAX", "40", 1);
    if (!setup(m, sp, 3, ps)) {
        T_CHECK(0, "window out of memory: set up: %s", k3_errmsg());
        unsetenv("K3_TEST_WINDOW_MAX");
        goto done;
    }
    T_CHECK(step(ps, 3, tok, n), "window out of memory (K3_TEST_WINDOW_MAX=40): bit-identical to each alone");
    k3_session_stats(ps[1].b, &st[1]);
    T_CHECK(st[1].window > 5 && st[1].window <= 22,
            "window out of memory: the joining prompt ran in the halved window of 22 (most in one pass: %d)",
            st[1].window);
    unsetenv("K3_TEST_WINDOW_MAX");
done:
    for (int i = 0; i < 3; i++) {
        k3_session_free(ps[i].b);
        k3_session_free(ps[i].r);
    }
    k3_model_free(m);
}

/* ---- a failed expert read ------------------------------------------------------ */

static int put_file(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_TRUNC); /* same inode: the engine's descriptors see it */
    if (fd < 0)
        return -1;
    int ok = write(fd, data, n) == (ssize_t)n;
    return close(fd) || !ok ? -1 : 0;
}

/* Experts streamed through a one-slot cache; layer 1's shard (its routed experts) is cut
 * short under the open model: a batch fails with K3_ERR_IO in every session still in the pass,
 * naming the file, and applies nothing; with the bytes back, the same batch gives the bits of
 * each session alone. */
static void test_io(const char *dir) {
    char shard[700];
    snprintf(shard, sizeof shard, "%s/model-00002-of-000008.safetensors", dir);
    size_t len  = 0;
    char  *keep = NULL;
    FILE  *f    = fopen(shard, "rb");
    if (f && !fseek(f, 0, SEEK_END) && (len = (size_t)ftell(f)) > 8192 && (keep = malloc(len))) {
        rewind(f);
        if (fread(keep, 1, len, f) != len)
            len = 0;
    }
    if (f)
        fclose(f);
    if (!keep || !len) {
        T_CHECK(0, "read %s (layer 1's shard of the tiny preset)", shard);
        free(keep);
        return;
    }
    cfg       c     = {0, 1, 32};
    k3_model *m     = open_model(dir, &c);
    sspec     sp[3] = {{3, 0, 1}, {5, 0, 4}, {2, 0, 1}};
    pair      ps[3] = {{0}};
    if (!m || !setup(m, sp, 3, ps)) {
        T_CHECK(0, "io: set up: %s", k3_errmsg());
        goto done;
    }
    const int32_t *tok[3];
    int            n[3] = {1, 4, 1};
    k3_session    *ss[3];
    k3_status      each[3];
    for (int i = 0; i < 3; i++) {
        tok[i] = pool + ps[i].off + sp[i].pre;
        ss[i]  = ps[i].b;
    }
    if (truncate(shard, 4096)) {
        T_CHECK(0, "truncate %s: %s", shard, strerror(errno));
        goto done;
    }
    k3_status st       = k3_session_feed_batch(ss, tok, n, 3, each);
    int       restored = !put_file(shard, keep, len);
    T_CHECK(st == K3_ERR_IO && each[0] == K3_ERR_IO && each[1] == K3_ERR_IO && each[2] == K3_ERR_IO &&
                strstr(k3_errmsg(), "model-00002") && k3_session_pos(ps[0].b) == 3 &&
                k3_session_pos(ps[1].b) == 5 && k3_session_pos(ps[2].b) == 2,
            "a failed expert read fails every session of the pass, naming the file, nothing applied (%s)",
            k3_errmsg());
    T_CHECK(restored && step(ps, 3, tok, n),
            "with the shard's bytes back, the same batch gives the bits of each session alone");
done:
    for (int i = 0; i < 3; i++) {
        k3_session_free(ps[i].b);
        k3_session_free(ps[i].r);
    }
    k3_model_free(m);
    free(keep);
}

/* ---- the Vulkan tier --------------------------------------------------------------- */

/* K3_VK=1 (lavapipe, or a GPU): a lone one-token pass computes the shared experts and the
 * resident routed experts on the device, so a batch's columns that are such passes alone must
 * too. Once the fill-once tier is warm (no expert a scenario routes to is still offered),
 * batches equal each session alone bit for bit and use the device. */
static void test_vk(const char *dir) {
    setenv("K3_VK", "1", 1);
    cfg       c = {0, 0, 32};
    k3_model *m = open_model(dir, &c);
    setenv("K3_VK", "0", 1);
    k3_session *s = NULL;
    k3_stats    st;
    if (!m || k3_session_new(m, &s)) {
        T_CHECK(0, "vk: open the model with K3_VK=1: %s", k3_errmsg());
        goto done;
    }
    k3_model_info info;
    k3_model_get_info(m, &info);
    k3_session_stats(s, &st);
    if (!st.vk_budget) {
        T_SKIP("batched decode on the Vulkan tier: no Vulkan device here (K3_VK=1 left the tier off)");
        goto done;
    }
    /* warm: prefill chunks of varied ids until every routed expert is resident (the tier
     * takes K3_VK_UP of the experts read per step) */
    int ok = 1;
    for (int pass = 0; pass < 6; pass++) {
        k3_session_reset(s);
        for (int i = pass * 7 % 32; ok && i + 32 <= POOL && i + 32 <= 224 + pass * 7 % 32; i += 32)
            ok = !k3_session_feed(s, pool + i, 32);
        for (int i = 0; ok && i < 8; i++) {
            int32_t t = argmax(k3_session_logits(s));
            ok        = !k3_session_feed(s, &t, 1);
        }
        k3_session_stats(s, &st);
        printf("# vk warm pass %d: %d of %d routed experts resident\n", pass, st.vk_experts,
               info.n_moe * info.n_experts);
    }
    uint64_t hits0 = st.vk_hits;
    int      res0  = st.vk_experts;
    scenario(m, "Vulkan tier on", sc3, 3);
    scenario(m, "Vulkan tier on", sc8, 8);
    k3_session_stats(s, &st);
    T_CHECK(st.vk_hits > hits0,
            "vk: the batches' decode columns ran routed experts on the device (%llu hits)",
            (unsigned long long)(st.vk_hits - hits0));
    T_CHECK(st.vk_experts == res0,
            "vk: the tier's residency stayed as warmed (%d of %d routed experts; "
            "the others were never routed), so each token ran where it runs alone",
            st.vk_experts, info.n_moe * info.n_experts);
done:
    k3_session_free(s);
    k3_model_free(m);
}

/* ---- bad input --------------------------------------------------------------- */

static void test_bad(const char *dir) {
    cfg         c = {0, 0, 32};
    k3_model   *m = open_model(dir, &c), *m2 = open_model(dir, &c);
    k3_session *a = NULL, *b = NULL, *o = NULL;
    if (!m || !m2 || k3_session_new(m, &a) || k3_session_new(m, &b) || k3_session_new(m2, &o)) {
        T_CHECK(0, "bad input: open models and sessions: %s", k3_errmsg());
        goto done;
    }
    k3_session_feed(a, pool, 3);
    const int32_t *ids[2] = {pool, pool + 1};
    int            n[2]   = {2, 1};
    k3_status      each[2];
    k3_session    *ss[2] = {a, b};
    struct {
        k3_session    *s0, *s1;
        const int32_t *i1;
        int            n1, count;
        const char    *needle, *what;
    } cases[] = {
        {a, b, pool, 1, 0, "count 0", "count 0"},
        {a, b, pool, 1, -3, "count -3", "count -3"},
        {a, a, pool, 1, 2, "sessions 0 and 1 are the same", "the same session twice"},
        {a, b, pool, 0, 2, "session 1: n 0", "n[1] == 0"},
        {a, b, pool, -1, 2, "session 1: n -1", "n[1] < 0"},
        {a, b, NULL, 1, 2, "session 1: ids is NULL", "ids[1] NULL"},
        {a, o, pool, 1, 2, "session 1 belongs to another model", "a session of another model"},
        {a, NULL, pool, 1, 2, "session 1 is NULL", "a NULL session"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        ss[0]   = cases[k].s0;
        ss[1]   = cases[k].s1;
        ids[1]  = cases[k].i1;
        n[1]    = cases[k].n1;
        each[0] = each[1] = K3_OK;
        k3_status st      = k3_session_feed_batch(ss, ids, n, cases[k].count, each);
        int       nothing = k3_session_pos(a) == 3 && k3_session_pos(b) == 0 && k3_session_pos(o) == 0;
        int       filled  = cases[k].count < 1 || (each[0] == K3_ERR_ARG && each[1] == K3_ERR_ARG);
        T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), cases[k].needle) && nothing && filled,
                "%s: K3_ERR_ARG, nothing fed, each[] filled (%s)", cases[k].what, k3_errmsg());
    }
    T_CHECK(k3_session_feed_batch(NULL, ids, n, 2, NULL) == K3_ERR_ARG &&
                strstr(k3_errmsg(), "session array"),
            "a NULL session array: K3_ERR_ARG (%s)", k3_errmsg());
    T_CHECK(k3_session_feed_batch(ss, NULL, n, 2, NULL) == K3_ERR_ARG && strstr(k3_errmsg(), "ids array"),
            "a NULL ids array: K3_ERR_ARG (%s)", k3_errmsg());
    T_CHECK(k3_session_feed_batch(ss, ids, NULL, 2, NULL) == K3_ERR_ARG && strstr(k3_errmsg(), "n array"),
            "a NULL n array: K3_ERR_ARG (%s)", k3_errmsg());

    /* per-session bad input: that session gets feed's error, the other goes on */
    ss[0]          = a;
    ss[1]          = b;
    int32_t bad[2] = {pool[0], (int32_t)vocab};
    ids[0]         = pool + 3;
    ids[1]         = bad;
    n[0]           = 1;
    n[1]           = 2;
    k3_status st   = k3_session_feed_batch(ss, ids, n, 2, each);
    T_CHECK(st == K3_ERR_ARG && each[0] == K3_OK && each[1] == K3_ERR_ARG && k3_session_pos(a) == 4 &&
                k3_session_pos(b) == 0 && strstr(k3_errmsg(), "session 1") && strstr(k3_errmsg(), "token id"),
            "an id outside the vocabulary fails that session only, naming it (%s)", k3_errmsg());
    static int32_t big[300];
    ids[0] = big;
    n[0]   = 300;
    ids[1] = pool;
    n[1]   = 1;
    st     = k3_session_feed_batch(ss, ids, n, 2, each);
    T_CHECK(st == K3_ERR_CONTEXT && each[0] == K3_ERR_CONTEXT && each[1] == K3_OK && k3_session_pos(a) == 4 &&
                k3_session_pos(b) == 1 && strstr(k3_errmsg(), "session 0") &&
                strstr(k3_errmsg(), "context full"),
            "a full context fails that session only (%s)", k3_errmsg());
    st = k3_session_feed_batch(ss, ids, n, 2, NULL);
    T_CHECK(st == K3_ERR_CONTEXT && k3_session_pos(b) == 2, "each may be NULL (%s)", k3_errmsg());
done:
    k3_session_free(a);
    k3_session_free(b);
    k3_session_free(o);
    k3_model_free(m);
    k3_model_free(m2);
}

int main(void) {
    /* the engine's settings come from the test, not from the caller's environment */
    static const char *vars[] = {"K3_BITS",      "K3_MLA_BITS", "K3_HEAD_BITS", "K3_CHUNK", "K3_MAXT",
                                 "K3_EXPERT_GB", "K3_LOGITS",   "K3_TRACE",     "K3_X0",    "K3_LAYERS",
                                 "K3_IDOT",      "K3_TOPP",     "K3_THREADS",   "K3_ISA",   "K3_NOVNNI",
                                 "K3_NOAVX2",    "K3_VK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
    /* the Vulkan tier off but in test_vk: its residency changes as it fills, and a token's
     * experts then run on the device or not depending on the moment */
    setenv("K3_VK", "0", 1);
    snprintf(tmp, sizeof tmp, "%s", t_tmp());
    snprintf(build, sizeof build, "%s", t_build());
    char dir[600];
    if (t_tiny_model("tiny-batch", 5, dir, sizeof dir))
        return t_done();
    cfg       c0 = {0, 0, 32};
    k3_model *m  = open_model(dir, &c0);
    if (!m) {
        T_CHECK(0, "open the tiny model: %s", k3_errmsg());
        return t_done();
    }
    k3_model_info info;
    k3_model_get_info(m, &info);
    k3_model_free(m);
    vocab = info.vocab;
    srand(11);
    for (int i = 0; i < POOL; i++)
        pool[i] = rand() % vocab;

    cfg f32c5 = {0, 0, 5}, f32c32 = {0, 0, 32}, q5 = {1, 0, 5}, st5 = {0, 1, 5};
    scenarios(dir, &f32c5, "f32, chunk 5", 1);
    scenarios(dir, &f32c32, "f32, chunk 32", 1);
    scenarios(dir, &st5, "f32, chunk 5, experts streamed (one cache slot)", 1);
    /* the quantized kernels at every level this CPU runs (K3_ISA, read by k3_init) */
    static const struct {
        int         isa;
        const char *env, *novnni;
    } lv[] = {{KERN_SCALAR, "scalar", "0"},
              {KERN_AVX2, "avx2", "1"},
              {KERN_AVX2_VNNI, "avx2", "0"},
              {KERN_AVX512, "avx512", "0"}};
    for (size_t i = 0; i < sizeof lv / sizeof *lv; i++) {
        char why[128] = "", what[200];
        if (!kern_isa_ok(lv[i].isa, why, sizeof why)) {
            T_SKIP("quantized bits at %s: this CPU lacks it (%s)", kern_isa_name(lv[i].isa), why);
            continue;
        }
        setenv("K3_ISA", lv[i].env, 1);
        setenv("K3_NOVNNI", lv[i].novnni, 1);
        T_CHECK(k3_init() == K3_OK, "k3_init reads K3_ISA=%s K3_NOVNNI=%s (%s)", lv[i].env, lv[i].novnni,
                k3_errmsg());
        snprintf(what, sizeof what, "default bits, chunk 5, kernels %s", kern_isa_name(lv[i].isa));
        scenarios(dir, &q5, what, lv[i].isa == KERN_AVX512);
        T_CHECK(kern_isa() == lv[i].isa, "%s: the kernels ran at that level (%s)", what,
                kern_isa_name(kern_isa()));
    }
    unsetenv("K3_ISA");
    unsetenv("K3_NOVNNI");
    test_window(dir, info.n_moe, info.n_experts);
    test_cancel(dir);
    test_bad(dir);
    test_io(dir);
    test_vk(dir);

    /* trained weights: k3-nano (its own vocabulary: the ids are drawn again) */
    const char *src = getenv("K3_SRC");
    char        nano[600];
    snprintf(nano, sizeof nano, "%s/models/k3-nano", src && *src ? src : ".");
    if (!(m = open_model(nano, &c0))) {
        T_CHECK(0, "open %s: %s", nano, k3_errmsg());
        return t_done();
    }
    k3_model_get_info(m, &info);
    k3_model_free(m);
    vocab = info.vocab;
    for (int i = 0; i < POOL; i++)
        pool[i] = rand() % vocab;
    scenarios(nano, &q5, "k3-nano, default bits, chunk 5", 1);
    return t_done();
}
