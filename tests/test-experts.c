/* test-experts.c: the streaming expert tier (src/model/experts.c) on generated tiny checkpoints.
 *
 * Every run feeds the same 72 ids (a chunked prefill of 56, then 16 decode steps) with K3_LOGITS
 * on, and compares the logits of all 72 positions bit for bit with a reference run that holds
 * every expert in RAM: one-slot and mid budgets, the budget changed live mid-conversation,
 * K3_PIPE=0, one loader thread, buffered reads, a split (non-contiguous) tensor layout, shards
 * spread over two directories (K3_DIRS), the O_DIRECT fallback on tmpfs, and a session whose
 * shard is truncated and then removed mid-conversation (the feeds fail with K3_ERR_IO naming the
 * file and offset; after the file is restored the conversation continues exactly). Statistics:
 * hit/miss counts add up to the same distinct experts at every budget, bytes read match the
 * misses, a repeated sequence hits more than its first pass.
 */
#include "k3.h"
#include "st.h"
#include "test.h"
#include "st-write.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPOS 72
#define NPREF 56

static char    tmp[512], build[512];
static int32_t ids[NPOS];
static int     n_warn_direct, n_split_msgs;
static long    last_split = -1;

static void log_cb(int level, const char *msg, void *ud) {
    (void)ud;
    if (level == K3_LOG_LEVEL_WARN && strstr(msg, "O_DIRECT"))
        n_warn_direct++;
    const char *p = strstr(msg, " contiguous (one read each), ");
    if (p) {
        n_split_msgs++;
        last_split = strtol(p + strlen(" contiguous (one read each), "), NULL, 10);
    }
    if (level <= K3_LOG_LEVEL_WARN)
        printf("# log: %s\n", msg);
}

typedef struct opts {
    double gb; /* budget at open (< 0 default)                          */
    int    pipe, direct, threads;
    double topp;
    int    live; /* change the budget after the prefill and mid-decode    */
    double live_gb[2];
} opts;

static opts defaults(double gb) {
    return (opts){.gb = gb, .pipe = 1, .direct = 1, .threads = 2, .topp = 1};
}

static k3_model *open_opts(const char *dir, const opts *o, const char *logits) {
    k3_params p;
    if (k3_params_default(&p))
        return NULL;
    p.bits = p.mla_bits = p.head_bits = 32;
    p.threads                         = 1;
    p.chunk                           = 16;
    p.expert_gb                       = o->gb;
    p.pipe                            = o->pipe;
    p.direct                          = o->direct;
    p.load_threads                    = o->threads;
    p.topp                            = o->topp;
    p.logits_path                     = logits;
    k3_model *m                       = NULL;
    if (k3_model_open(dir, &p, &m))
        printf("# open %s: %s\n", dir, k3_errmsg());
    return m;
}

/* Feed the prefill and the decode steps; stats of the whole run into *out. */
static int feed_all(k3_model *m, k3_session *s, const opts *o, k3_stats *out) {
    if (k3_session_feed(s, ids, NPREF))
        return -1;
    if (o->live && k3_model_set_expert_budget(m, o->live_gb[0]))
        return -1;
    for (int i = NPREF; i < NPOS; i++) {
        if (o->live && i == NPREF + 8 && k3_model_set_expert_budget(m, o->live_gb[1]))
            return -1;
        if (k3_session_feed(s, ids + i, 1))
            return -1;
    }
    k3_session_stats(s, out);
    return 0;
}

/* One full run into logits file `lf`. 0 on success. */
static int run(const char *dir, const opts *o, const char *lf, k3_stats *st) {
    k3_model   *m  = open_opts(dir, o, lf);
    k3_session *s  = NULL;
    int         rc = -1;
    if (m && !k3_session_new(m, &s))
        rc = feed_all(m, s, o, st);
    if (rc)
        printf("# run %s: %s\n", dir, k3_errmsg());
    k3_session_free(s);
    k3_model_free(m);
    return rc;
}

/* 1 when the two logits files hold the same bytes (and NPOS positions). */
static int same_file(const char *a, const char *b, int vocab) {
    size_t na = 0, nb = 0;
    char  *x = t_read_file(a, &na), *y = t_read_file(b, &nb);
    int    ok = x && y && na == nb && na == (size_t)NPOS * vocab * 4 && !memcmp(x, y, na);
    free(x);
    free(y);
    return ok;
}

/* ---- budget changes from another thread while the session feeds -------------------------- */

typedef struct toggler {
    k3_model  *m;
    double     gb[3];
    atomic_int stop;
    int        n, failed;
} toggler;

static void *toggle_budget(void *arg) {
    toggler *tg = arg;
    while (!atomic_load(&tg->stop)) {
        if (k3_model_set_expert_budget(tg->m, tg->gb[tg->n % 3]))
            tg->failed = 1;
        tg->n++;
        usleep(2000);
    }
    return NULL;
}

static int run_toggled(const char *dir, const opts *o, const char *lf, double all_gb, int *n_changes) {
    k3_model   *m  = open_opts(dir, o, lf);
    k3_session *s  = NULL;
    int         rc = -1;
    toggler     tg = {.m = m, .gb = {0, all_gb / 2, -1}};
    atomic_init(&tg.stop, 0);
    pthread_t th;
    if (m && !k3_session_new(m, &s) && !pthread_create(&th, NULL, toggle_budget, &tg)) {
        rc = k3_session_feed(s, ids, NPREF) ? -1 : 0;
        for (int i = NPREF; !rc && i < NPOS; i++)
            rc = k3_session_feed(s, ids + i, 1) ? -1 : 0;
        atomic_store(&tg.stop, 1);
        pthread_join(th, NULL);
        rc = rc || tg.failed;
    }
    *n_changes = tg.n;
    k3_session_free(s);
    k3_model_free(m);
    return rc;
}

/* ---- split layout: rewrite every expert shard with the tensors grouped by part ------------- */

static int part_key(const char *name, const char **tail, long *e) {
    const char *p = strstr(name, ".experts.");
    if (!p)
        return 0;
    char *end;
    *e    = strtol(p + 9, &end, 10);
    *tail = end;
    return 1;
}

static int cmp_split(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    const char      *tx, *ty;
    long             ex, ey;
    int              kx = part_key(x->name, &tx, &ex), ky = part_key(y->name, &ty, &ey);
    if (kx != ky)
        return kx - ky;
    if (!kx)
        return strcmp(x->name, y->name);
    int c = strcmp(tx, ty);
    return c ? c : (ex > ey) - (ex < ey);
}

static int relayout_split(const char *dir) {
    st_dir *d = NULL;
    if (st_open(dir, &d))
        return -1;
    int               rc = 0, nt = st_n_tensors(d);
    const st_tensor **ts = calloc((size_t)nt, sizeof *ts);
    for (int shd = 0; shd < st_n_shards(d) && !rc; shd++) {
        if (!st_shard_opened(d, shd))
            continue;
        int n = 0, has = 0;
        for (int i = 0; i < nt; i++)
            if (st_tensor_at(d, i)->shard == shd) {
                ts[n++] = st_tensor_at(d, i);
                has |= strstr(ts[n - 1]->name, ".experts.") != NULL;
            }
        if (!has)
            continue;
        qsort(ts, (size_t)n, sizeof *ts, cmp_split);
        char path[1200], name[400];
        snprintf(path, sizeof path, "%s.split", st_shard_path(d, shd));
        stw_file *w = NULL;
        rc          = stw_create(path, &w) != K3_OK;
        for (int i = 0; i < n && !rc; i++) {
            snprintf(name, sizeof name, "%s%s", st_has_prefix(d) ? "language_model." : "", ts[i]->name);
            rc = stw_add(w, name, ts[i]->dtype, ts[i]->ndim, ts[i]->shape) != K3_OK;
        }
        rc = rc || stw_begin(w) != K3_OK;
        for (int i = 0; i < n && !rc; i++) {
            void *buf = malloc(ts[i]->nbytes ? ts[i]->nbytes : 1);
            rc        = !buf || st_read(d, ts[i], buf) || stw_write(w, buf, ts[i]->nbytes);
            free(buf);
        }
        rc = rc || stw_end(w) != K3_OK;
        stw_free(w);
        rc = rc || rename(path, st_shard_path(d, shd)) != 0;
    }
    free(ts);
    st_close(d);
    return rc;
}

/* Shard file of layer l's experts and the lowest offset of any of them. */
static int expert_shard(const char *dir, int l, char *path, size_t n, long long *lo) {
    st_dir *d = NULL;
    if (st_open(dir, &d))
        return -1;
    char nm[200];
    int  rc = -1;
    *lo     = -1;
    for (int e = 0;; e++) {
        snprintf(nm, sizeof nm, "model.layers.%d.block_sparse_moe.experts.%d.w1.weight_packed", l, e);
        const st_tensor *t = st_find(d, nm);
        if (!t)
            break;
        for (int p = 0; p < 6; p++) {
            static const char *suf[6] = {"w1.weight_packed", "w1.weight_scale",  "w3.weight_packed",
                                         "w3.weight_scale",  "w2.weight_packed", "w2.weight_scale"};
            snprintf(nm, sizeof nm, "model.layers.%d.block_sparse_moe.experts.%d.%s", l, e, suf[p]);
            const st_tensor *u = st_find(d, nm);
            if (u && (*lo < 0 || (long long)u->offset < *lo))
                *lo = (long long)u->offset;
        }
        snprintf(path, n, "%s", st_shard_path(d, t->shard));
        rc = 0;
    }
    st_close(d);
    return rc;
}

/* ---- tests ------------------------------------------------------------------------------------ */

int main(void) {
    snprintf(tmp, sizeof tmp, "%s", t_tmp());
    snprintf(build, sizeof build, "%s", t_build());
    k3_log_set_callback(log_cb, NULL);
    char dir[600], lf[700], ref[700];
    if (t_tiny_model("tiny", 7, dir, sizeof dir))
        return t_done();
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < NPOS; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        ids[i] = (int32_t)(rng % 1000) + (i % 9 == 0 ? 0 : 200);
    }
    /* a repeated stretch, so routing repeats within the run */
    for (int i = 40; i < NPREF; i++)
        ids[i] = ids[i - 16];

    /* reference: every expert resident (the default for a small model) */
    snprintf(ref, sizeof ref, "%s/ref.f32", tmp);
    opts      o  = defaults(-1);
    k3_stats  sr = {0}, s1 = {0}, s2 = {0};
    k3_model *m = open_opts(dir, &o, NULL);
    if (!m) {
        T_CHECK(0, "open the tiny model: %s", k3_errmsg());
        return t_done();
    }
    k3_model_info info;
    k3_model_get_info(m, &info);
    const double   all_gb = k3_model_expert_budget(m);
    const uint64_t xbytes = (uint64_t)(all_gb * 1e9 / ((double)info.n_moe * info.n_experts) + 0.5);
    const int      V      = info.vocab;
    k3_model_free(m);
    T_CHECK(all_gb > 0 && xbytes == 3 * (96 * 64 / 2 + 96 * 64 / 32),
            "default budget holds all %d x %d experts (%.6f GB, %llu bytes each)", info.n_moe, info.n_experts,
            all_gb, (unsigned long long)xbytes);
    T_CHECK(run(dir, &o, ref, &sr) == 0, "reference run, every expert resident");
    T_CHECK(sr.expert_misses == 0 && sr.expert_hits > 0 && sr.expert_bytes_read == 0,
            "all resident: %llu hits, no misses, no reads", (unsigned long long)sr.expert_hits);
    const uint64_t distinct = sr.expert_hits;

    /* one slot per layer */
    snprintf(lf, sizeof lf, "%s/floor.f32", tmp);
    o = defaults(0);
    T_CHECK(run(dir, &o, lf, &s1) == 0 && same_file(lf, ref, V),
            "K3_EXPERT_GB=0 (one slot per layer): logits of %d positions bit-identical", NPOS);
    T_CHECK(s1.expert_hits + s1.expert_misses == distinct && s1.expert_misses > distinct / 2,
            "one slot: hits %llu + misses %llu = the %llu distinct experts of the chunks",
            (unsigned long long)s1.expert_hits, (unsigned long long)s1.expert_misses,
            (unsigned long long)distinct);
    T_CHECK(s1.expert_bytes_read == s1.expert_misses * xbytes && s1.expert_read_s > 0 &&
                s1.expert_wait_s >= 0,
            "one slot: bytes read %llu = misses x expert bytes; read %.4f s, waited %.4f s",
            (unsigned long long)s1.expert_bytes_read, s1.expert_read_s, s1.expert_wait_s);

    /* half of the experts */
    snprintf(lf, sizeof lf, "%s/mid.f32", tmp);
    o = defaults(all_gb / 2);
    T_CHECK(run(dir, &o, lf, &s2) == 0 && same_file(lf, ref, V),
            "half budget (6 of 12 per layer): logits bit-identical");
    T_CHECK(s2.expert_hits + s2.expert_misses == distinct && s2.expert_misses < s1.expert_misses,
            "half budget: %llu misses < one slot's %llu", (unsigned long long)s2.expert_misses,
            (unsigned long long)s1.expert_misses);

    /* budget changed live: all -> one slot after the prefill -> half mid-decode */
    snprintf(lf, sizeof lf, "%s/live.f32", tmp);
    o            = defaults(-1);
    o.live       = 1;
    o.live_gb[0] = 0;
    o.live_gb[1] = all_gb / 2;
    T_CHECK(run(dir, &o, lf, &s2) == 0 && same_file(lf, ref, V),
            "budget changed live (all -> one slot -> half): logits bit-identical");
    T_CHECK(s2.expert_misses > 0, "live shrink: later chunks miss (%llu misses)",
            (unsigned long long)s2.expert_misses);
    m = open_opts(dir, &o, NULL);
    if (m) {
        k3_model_info a, c;
        k3_model_get_info(m, &a);
        k3_model_set_expert_budget(m, 0);
        k3_model_get_info(m, &c);
        double gb0 = k3_model_expert_budget(m);
        k3_model_set_expert_budget(m, -1);
        T_CHECK(c.bytes_resident < a.bytes_resident && gb0 == 0 && k3_model_expert_budget(m) == all_gb,
                "shrinking frees at once (%llu -> %llu bytes resident); -1 restores the default",
                (unsigned long long)a.bytes_resident, (unsigned long long)c.bytes_resident);
        k3_model_free(m);
    }

    /* the budget changed from another thread while the session feeds */
    snprintf(lf, sizeof lf, "%s/toggle.f32", tmp);
    o             = defaults(0);
    int n_changes = 0;
    T_CHECK(run_toggled(dir, &o, lf, all_gb, &n_changes) == 0 && same_file(lf, ref, V) && n_changes > 0,
            "budget switched among one slot / half / all from another thread %d times during the "
            "feeds: bit-identical",
            n_changes);

    /* a repeated sequence hits more the second time (11 of 12 slots, cold at open) */
    o             = defaults(all_gb * 11 / 12);
    m             = open_opts(dir, &o, NULL);
    k3_session *s = NULL;
    if (m && !k3_session_new(m, &s) && !feed_all(m, s, &o, &s1)) {
        k3_session_reset(s);
        k3_session_reset_stats(s);
        feed_all(m, s, &o, &s2);
        T_CHECK(s1.expert_misses > 0 && s2.expert_misses < s1.expert_misses &&
                    s2.expert_hits > s1.expert_hits,
                "repeated sequence: misses %llu -> %llu, hits %llu -> %llu",
                (unsigned long long)s1.expert_misses, (unsigned long long)s2.expert_misses,
                (unsigned long long)s1.expert_hits, (unsigned long long)s2.expert_hits);
        T_CHECK(s2.expert_gb_budget > 0 && s2.expert_read_s >= 0, "stats report the budget %.6f GB",
                s2.expert_gb_budget);
    } else {
        T_CHECK(0, "11/12 budget run: %s", k3_errmsg());
    }
    k3_session_free(s);
    k3_model_free(m);

    /* no pipeline, one loader thread, buffered reads */
    snprintf(lf, sizeof lf, "%s/pipe0.f32", tmp);
    o      = defaults(0);
    o.pipe = 0;
    T_CHECK(run(dir, &o, lf, &s1) == 0 && same_file(lf, ref, V), "K3_PIPE=0: bit-identical");
    o         = defaults(all_gb / 3);
    o.threads = 1;
    o.direct  = 0;
    T_CHECK(run(dir, &o, lf, &s1) == 0 && same_file(lf, ref, V),
            "K3_LOAD_THREADS=1 K3_DIRECT=0, a third of the experts: bit-identical");

    /* K3_TOPP drops the tail: fewer experts, finite and different logits */
    snprintf(lf, sizeof lf, "%s/topp.f32", tmp);
    o      = defaults(-1);
    o.topp = 0.5;
    T_CHECK(run(dir, &o, lf, &s1) == 0 && s1.expert_hits < distinct && !same_file(lf, ref, V),
            "K3_TOPP=0.5: %llu of %llu experts computed, logits differ", (unsigned long long)s1.expert_hits,
            (unsigned long long)distinct);

    /* split layout: every expert's six tensors apart */
    char sdir[700];
    snprintf(sdir, sizeof sdir, "%s/split", tmp);
    t_sh("rm -rf '%s' && cp -r '%s' '%s'", sdir, dir, sdir);
    T_CHECK(relayout_split(sdir) == 0, "rewrite the expert shards with the tensors grouped by part");
    snprintf(lf, sizeof lf, "%s/split.f32", tmp);
    o          = defaults(0);
    last_split = -1;
    T_CHECK(run(sdir, &o, lf, &s1) == 0 && same_file(lf, ref, V) && last_split == info.n_moe * info.n_experts,
            "split layout (%ld experts read in six parts), one slot: bit-identical", last_split);
    o = defaults(0);
    run(dir, &o, lf, &s1);
    T_CHECK(last_split == 0, "the generated layout is contiguous (one read per expert)");

    /* K3_DIRS: two layers' shards in a second directory */
    char      d1[700], d2[700], shard[1200], shard2[1200];
    long long lo;
    snprintf(d1, sizeof d1, "%s/d1", tmp);
    snprintf(d2, sizeof d2, "%s/d2", tmp);
    t_sh("rm -rf '%s' '%s' && cp -r '%s' '%s' && mkdir -p '%s'", d1, d2, dir, d1, d2);
    int moved = 0;
    if (!expert_shard(d1, 2, shard, sizeof shard, &lo) && !expert_shard(d1, 4, shard2, sizeof shard2, &lo))
        moved = (t_sh("mv '%s' '%s/'", shard, d2) == 0) + (t_sh("mv '%s' '%s/'", shard2, d2) == 0);
    T_CHECK(moved == 2, "moved the shards of layers 2 and 4 to a second directory");
    m = open_opts(d1, &o, NULL);
    T_CHECK(!m && strstr(k3_errmsg(), "model-"), "without K3_DIRS the open fails naming the shard (%s)",
            k3_errmsg());
    k3_model_free(m);
    char dirs[1600];
    snprintf(dirs, sizeof dirs, "%s/none:%s", tmp, d2);
    setenv("K3_DIRS", dirs, 1);
    snprintf(lf, sizeof lf, "%s/dirs.f32", tmp);
    T_CHECK(run(d1, &o, lf, &s1) == 0 && same_file(lf, ref, V), "K3_DIRS=none:d2, one slot: bit-identical");
    unsetenv("K3_DIRS");

    /* failure injection: truncate, then remove, then restore a shard mid-conversation */
    char fdir[700], bak[1300];
    snprintf(fdir, sizeof fdir, "%s/fail", tmp);
    t_sh("rm -rf '%s' && cp -r '%s' '%s'", fdir, dir, fdir);
    snprintf(lf, sizeof lf, "%s/fail.f32", tmp);
    if (expert_shard(fdir, 2, shard, sizeof shard, &lo)) {
        T_CHECK(0, "find the shard of layer 2's experts");
    } else {
        snprintf(bak, sizeof bak, "%s.bak", shard);
        t_sh("cp '%s' '%s'", shard, bak);
        o = defaults(0);
        m = open_opts(fdir, &o, lf);
        s = NULL;
        if (!m || k3_session_new(m, &s) || k3_session_feed(s, ids, 32)) {
            T_CHECK(0, "open and prefill 32: %s", k3_errmsg());
        } else {
            const char *base = strrchr(shard, '/') + 1;
            T_CHECK(truncate(shard, lo) == 0, "truncate %s to %lld bytes while the session is open", base,
                    lo);
            k3_status st = k3_session_feed(s, ids + 32, NPREF - 32);
            T_CHECK(st == K3_ERR_IO && strstr(k3_errmsg(), base) && strstr(k3_errmsg(), "offset") &&
                        k3_session_pos(s) == 32,
                    "truncated shard: feed fails with K3_ERR_IO naming the file and offset, nothing "
                    "committed (pos %d): %s",
                    k3_session_pos(s), k3_errmsg());
            t_sh("rm -f '%s'", shard);
            st = k3_session_feed(s, ids + 32, NPREF - 32);
            T_CHECK(st == K3_ERR_IO && strstr(k3_errmsg(), base) && k3_session_pos(s) == 32,
                    "removed shard: K3_ERR_IO naming the file: %s", k3_errmsg());
            T_CHECK(rename(bak, shard) == 0, "restore the shard");
            int ok = k3_session_feed(s, ids + 32, NPREF - 32) == K3_OK;
            for (int i = NPREF; ok && i < NPOS; i++)
                ok = k3_session_feed(s, ids + i, 1) == K3_OK;
            T_CHECK(ok, "after the restore the conversation continues (%s)", ok ? "ok" : k3_errmsg());
        }
        k3_session_free(s);
        k3_model_free(m);
        T_CHECK(same_file(lf, ref, V), "the interrupted run's logits equal the uninterrupted run's");
    }

    /* O_DIRECT on tmpfs: the kernel may refuse (EINVAL: fall back with one notice) or accept */
    char shm[600];
    snprintf(shm, sizeof shm, "/dev/shm/k3-test-experts-%d", (int)getpid());
    struct stat sb;
    if (stat("/dev/shm", &sb) != 0 || t_sh("rm -rf '%s' && cp -r '%s' '%s'", shm, dir, shm)) {
        T_SKIP("no /dev/shm tmpfs to test the O_DIRECT fallback on");
    } else {
        snprintf(lf, sizeof lf, "%s/shm.f32", tmp);
        o             = defaults(0);
        n_warn_direct = 0;
        T_CHECK(run(shm, &o, lf, &s1) == 0 && same_file(lf, ref, V) && n_warn_direct <= 1,
                "tmpfs with O_DIRECT: bit-identical, %d fallback notice(s)", n_warn_direct);
        if (!n_warn_direct)
            printf("# this kernel's tmpfs accepts O_DIRECT; forcing the refusal (K3_TEST_DIRECT_EINVAL)\n");
        setenv("K3_TEST_DIRECT_EINVAL", "1", 1);
        n_warn_direct = 0;
        T_CHECK(run(shm, &o, lf, &s1) == 0 && same_file(lf, ref, V) && n_warn_direct == 1,
                "O_DIRECT refused with EINVAL: buffered fallback with exactly one notice, bit-identical");
        unsetenv("K3_TEST_DIRECT_EINVAL");
        t_sh("rm -rf '%s'", shm);
    }
    return t_done();
}
