/* test-conv-batch.c: the steppable turn API (k3_conv_gen_begin/step/step_batch/end) against
 * k3_conv_generate, on a generated tiny checkpoint:
 *   - four conversations (greedy and seeded, thinking on and off, different prompts and
 *     max_tokens) stepped together, joining at different steps, with small prefill chunks:
 *     every reply equals the same turn run alone with k3_conv_generate token for token
 *     (ids, text, reasoning, streamed text, statistics); so does a second turn (prompt cache);
 *   - a shared prompt cache (k3_conv_share_prompt_cache): a turn starts from a snapshot
 *     another conversation saved, with the same reply; another owner never does;
 *   - cancelling one turn mid-batch ends it (interrupted, K3_ABORTED), the others unchanged;
 *   - bad input: an empty or NULL list, a turn or session twice, a negative chunk. */
#include "conv-impl.h"
#include "test.h"

#include <stdlib.h>
#include <unistd.h>

#define N_CASE 4

typedef struct text {
    k3_buf think, resp;
} text;

static void on_think(const char *t, size_t n, void *ud) {
    K3_ASSERT(!k3_buf_add(&((text *)ud)->think, t, n));
}

static void on_resp(const char *t, size_t n, void *ud) {
    K3_ASSERT(!k3_buf_add(&((text *)ud)->resp, t, n));
}

typedef struct tcase {
    const char *prompt, *again;
    int         think, max_tokens;
    float       temp;
    uint64_t    seed;
} tcase;

static const tcase cases[N_CASE] = {
    {"Hello there, how are you?", "And then?", 1, 12, 0.0f, 0},
    {"A longer prompt for the second conversation, so that its prefill takes several chunks of four.",
     "Go on.", 0, 15, 0.8f, 3},
    {"x", "y", 1, 20, 0.0f, 0},
    {"Sampled with a high temperature and its own seed.", "More, please.", 0, 9, 1.0f, 9},
};

static k3_conv *conv_for(const tcase *tc) {
    k3_conv         *c = k3_conv_new();
    k3_conv_settings set;
    K3_ASSERT(c);
    k3_conv_settings_default(&set);
    set.think         = tc->think;
    set.max_tokens    = tc->max_tokens;
    set.sampling.temp = tc->temp;
    set.sampling.seed = tc->seed;
    K3_ASSERT(k3_conv_set_settings(c, &set) == K3_OK);
    K3_ASSERT(k3_conv_add(c, K3_ROLE_USER, tc->prompt, NULL) == K3_OK);
    return c;
}

static const k3_msg *last(const k3_conv *c) {
    return k3_conv_msg(c, k3_conv_count(c) - 1);
}

static int str_eq(const char *a, const char *b) {
    return !strcmp(a ? a : "", b ? b : "");
}

/* Same reply: ids, text, reasoning, stop and token counts; and the streamed text equals it. */
static int same_reply(const k3_msg *a, const k3_msg *b, const text *tb) {
    return a->n_ids == b->n_ids && !memcmp(a->ids, b->ids, (size_t)a->n_ids * sizeof *a->ids) &&
           str_eq(a->content, b->content) && str_eq(a->reasoning, b->reasoning) &&
           a->stats.stop == b->stats.stop && a->stats.n_prompt == b->stats.n_prompt &&
           a->stats.n_gen == b->stats.n_gen && a->stats.n_cached == b->stats.n_cached &&
           a->interrupted == b->interrupted && str_eq(tb->resp.p, b->content) &&
           str_eq(tb->think.p, b->reasoning ? b->reasoning : "");
}

/* Steps turns g[0, n) together until all are done; turn i begins at step join[i] (its
 * conversation c[i], session s[i]); cancel_at: conversation cancel_who is cancelled at that
 * step (-1 never). st[i] gets each end's status. */
static void run_batch(k3_model *m, k3_conv **c, k3_session **s, text *tx, int n, const int *join, int chunk,
                      int cancel_who, int cancel_at, k3_status *st) {
    k3_conv_gen *g[N_CASE] = {0};
    int          left = n, ended[N_CASE] = {0};
    for (int step = 0; left > 0 && step < 100000; step++) {
        k3_conv_gen *act[N_CASE];
        int          na = 0;
        for (int i = 0; i < n; i++) {
            if (!ended[i] && !g[i] && step >= join[i]) {
                k3_conv_callbacks cb = {.on_think = on_think, .on_response = on_resp, .ud = &tx[i]};
                K3_ASSERT(k3_conv_gen_begin(c[i], m, s[i], &cb, chunk, &g[i]) == K3_OK);
            }
            if (g[i])
                act[na++] = g[i];
        }
        if (step == cancel_at && cancel_who >= 0)
            k3_conv_cancel(c[cancel_who]);
        if (na)
            K3_ASSERT(k3_conv_gen_step_batch(act, na) == K3_OK);
        for (int i = 0; i < n; i++)
            if (g[i] && k3_conv_gen_done(g[i])) {
                st[i]    = k3_conv_gen_end(g[i]);
                g[i]     = NULL;
                ended[i] = 1;
                left--;
            }
    }
    K3_ASSERT(left == 0);
}

static void text_clear(text *t) {
    free(t->think.p);
    free(t->resp.p);
    memset(t, 0, sizeof *t);
}

int main(void) {
    const char *t = getenv("K3_TMP"), *build = getenv("K3_BUILD");
    char        tmpdir[512], model_dir[600], cmd[2048];
    snprintf(tmpdir, sizeof tmpdir, "%s/test-conv-batch-XXXXXX", t && *t ? t : "/tmp");
    if (!build || !mkdtemp(tmpdir)) {
        T_SKIP("needs K3_BUILD (run through tests/run.sh)");
        return 0;
    }
    snprintf(model_dir, sizeof model_dir, "%s/tiny", tmpdir);
    snprintf(cmd, sizeof cmd, "'%s/k3-mkmodel' --preset tiny --seed 5 --quiet '%s' >/dev/null 2>&1", build,
             model_dir);
    if (system(cmd) != 0) {
        T_SKIP("k3-mkmodel could not make a tiny model");
        return 0;
    }
    setenv("XDG_DATA_HOME", tmpdir, 1);
    setenv("K3_THREADS", "1", 1);
    k3_params par;
    k3_model *m = NULL;
    K3_ASSERT(k3_params_default(&par) == K3_OK);
    k3_status st = k3_model_open(model_dir, &par, &m);
    T_CHECK(st == K3_OK, "open the tiny model (%s)", st ? k3_errmsg() : "ok");
    if (st)
        return t_done();

    /* ---- alone: each case's two turns with k3_conv_generate on its own session */
    k3_conv      *ca[N_CASE], *cb[N_CASE];
    k3_session   *sa[N_CASE], *sb[N_CASE];
    text          ta[N_CASE] = {0}, tb[N_CASE] = {0};
    const k3_msg *alone1[N_CASE];
    for (int i = 0; i < N_CASE; i++) {
        ca[i] = conv_for(&cases[i]);
        K3_ASSERT(k3_session_new(m, &sa[i]) == K3_OK);
        k3_conv_callbacks cbk = {.on_think = on_think, .on_response = on_resp, .ud = &ta[i]};
        st                    = k3_conv_generate(ca[i], m, sa[i], &cbk);
        K3_ASSERT(st == K3_OK);
        alone1[i] = last(ca[i]);
    }
    T_CHECK(alone1[0]->n_ids > 0 && alone1[1]->n_ids > 0 && strcmp(alone1[0]->content, alone1[1]->content),
            "the cases answer differently alone (%d and %d tokens)", alone1[0]->n_ids, alone1[1]->n_ids);

    /* ---- together: joining at steps 0, 0, 3, 7; prefill chunks of 4 ids */
    int       join[N_CASE] = {0, 0, 3, 7};
    k3_status sts[N_CASE];
    for (int i = 0; i < N_CASE; i++) {
        cb[i] = conv_for(&cases[i]);
        K3_ASSERT(k3_session_new(m, &sb[i]) == K3_OK);
    }
    run_batch(m, cb, sb, tb, N_CASE, join, 4, -1, -1, sts);
    for (int i = 0; i < N_CASE; i++)
        T_CHECK(sts[i] == K3_OK && same_reply(last(cb[i]), alone1[i], &tb[i]),
                "turn 1, case %d stepped with the others equals it alone: %d ids (%s, seed %llu, think %s), "
                "text and stream",
                i, last(cb[i])->n_ids, cases[i].temp > 0 ? "sampled" : "greedy",
                (unsigned long long)cases[i].seed, cases[i].think ? "on" : "off");

    /* ---- turn 2 (the live prompt cache), together again, prefill in one step each */
    for (int i = 0; i < N_CASE; i++) {
        text_clear(&ta[i]);
        text_clear(&tb[i]);
        K3_ASSERT(k3_conv_add(ca[i], K3_ROLE_USER, cases[i].again, NULL) == K3_OK);
        K3_ASSERT(k3_conv_add(cb[i], K3_ROLE_USER, cases[i].again, NULL) == K3_OK);
        k3_conv_callbacks cbk = {.on_think = on_think, .on_response = on_resp, .ud = &ta[i]};
        K3_ASSERT(k3_conv_generate(ca[i], m, sa[i], &cbk) == K3_OK);
    }
    int join0[N_CASE] = {0, 0, 0, 0};
    run_batch(m, cb, sb, tb, N_CASE, join0, 0, -1, -1, sts);
    for (int i = 0; i < N_CASE; i++)
        T_CHECK(sts[i] == K3_OK && same_reply(last(cb[i]), last(ca[i]), &tb[i]) &&
                    last(cb[i])->stats.n_cached > 0,
                "turn 2, case %d together equals it alone (%d of %d prompt ids from the cache)", i,
                last(cb[i])->stats.n_cached, last(cb[i])->stats.n_prompt);

    /* ---- cancel case 1 at step 32 (decoding by then): it ends interrupted, the others are unchanged */
    k3_conv    *cc[N_CASE];
    k3_session *sc[N_CASE];
    text        tc[N_CASE] = {0};
    for (int i = 0; i < N_CASE; i++) {
        cc[i] = conv_for(&cases[i]);
        K3_ASSERT(k3_session_new(m, &sc[i]) == K3_OK);
    }
    run_batch(m, cc, sc, tc, N_CASE, join, 4, 1, 32, sts);
    T_CHECK(sts[1] == K3_ABORTED && last(cc[1])->interrupted && last(cc[1])->stats.stop == K3_STOP_CANCEL &&
                last(cc[1])->n_ids > 0 && last(cc[1])->n_ids < alone1[1]->n_ids &&
                !memcmp(last(cc[1])->ids, alone1[1]->ids, (size_t)last(cc[1])->n_ids * sizeof(int32_t)),
            "the cancelled turn ends interrupted with a prefix of its reply (%d of %d ids)",
            last(cc[1])->n_ids, alone1[1]->n_ids);
    for (int i = 0; i < N_CASE; i += 1 + (i == 0))
        T_CHECK(sts[i] == K3_OK && same_reply(last(cc[i]), alone1[i], &tc[i]),
                "case %d batched with the cancelled one is unchanged", i);

    /* ---- a shared prompt cache: conversation F starts from E's snapshot; owner 7 does not */
    k3_conv    *ce = conv_for(&cases[0]), *cf = conv_for(&cases[0]), *cg = conv_for(&cases[0]);
    k3_session *se, *sf, *sg;
    K3_ASSERT(!k3_session_new(m, &se) && !k3_session_new(m, &sf) && !k3_session_new(m, &sg));
    k3_conv_share_prompt_cache(cf, ce);
    k3_conv_share_prompt_cache(cg, ce);
    k3_conv_set_cache_owner(cg, 7);
    T_CHECK(cf->sn == ce->sn && ce->sn->refs == 3, "three conversations share one store (%d refs)",
            ce->sn->refs);
    K3_ASSERT(k3_conv_generate(ce, m, se, NULL) == K3_OK);
    K3_ASSERT(k3_conv_generate(cf, m, sf, NULL) == K3_OK);
    K3_ASSERT(k3_conv_generate(cg, m, sg, NULL) == K3_OK);
    T_CHECK(last(cf)->stats.n_cached == last(cf)->stats.n_prompt && last(cf)->stats.n_prefill == 0 &&
                last(cf)->n_ids == alone1[0]->n_ids &&
                !memcmp(last(cf)->ids, alone1[0]->ids, (size_t)alone1[0]->n_ids * 4),
            "F (own session) starts from E's snapshot: %d of %d prompt ids cached, the same reply",
            last(cf)->stats.n_cached, last(cf)->stats.n_prompt);
    T_CHECK(last(cg)->stats.n_cached == 0 && last(cg)->n_ids == alone1[0]->n_ids,
            "G (another owner) starts from nothing (%d cached) and answers the same",
            last(cg)->stats.n_cached);
    k3_conv_free(ce); /* the store lives on with F and G */
    T_CHECK(cf->sn->refs == 2 && cf->sn->n_snaps > 0,
            "freeing E keeps the store for the others (%d snapshots)", cf->sn->n_snaps);

    /* ---- bad input */
    k3_conv_gen *g  = NULL, *gg[2];
    k3_conv     *cx = conv_for(&cases[2]), *cy = conv_for(&cases[2]);
    T_CHECK(k3_conv_gen_step_batch(NULL, 1) == K3_ERR_ARG && k3_conv_gen_step_batch(gg, 0) == K3_ERR_ARG,
            "step_batch of no turns: K3_ERR_ARG (%s)", k3_errmsg());
    T_CHECK(k3_conv_gen_begin(cx, m, sf, NULL, -1, &g) == K3_ERR_ARG && !g,
            "a negative chunk: K3_ERR_ARG (%s)", k3_errmsg());
    K3_ASSERT(k3_conv_gen_begin(cx, m, sf, NULL, 0, &gg[0]) == K3_OK);
    gg[1] = gg[0];
    T_CHECK(k3_conv_gen_step_batch(gg, 2) == K3_ERR_ARG && strstr(k3_errmsg(), "share a turn"),
            "the same turn twice: K3_ERR_ARG (%s)", k3_errmsg());
    K3_ASSERT(k3_conv_gen_begin(cy, m, sf, NULL, 0, &gg[1]) == K3_OK);
    T_CHECK(k3_conv_gen_step_batch(gg, 2) == K3_ERR_ARG && strstr(k3_errmsg(), "share a session"),
            "two turns on one session: K3_ERR_ARG (%s)", k3_errmsg());
    T_CHECK(k3_conv_gen_end(gg[1]) == K3_ABORTED && last(cy)->interrupted,
            "ending a turn before its steps: K3_ABORTED, the reply kept as interrupted");
    while (!k3_conv_gen_done(gg[0]))
        K3_ASSERT(k3_conv_gen_step(gg[0]) == K3_OK);
    T_CHECK(k3_conv_gen_step(gg[0]) == K3_OK && k3_conv_gen_end(gg[0]) == K3_OK && !last(cx)->interrupted,
            "a finished turn's step does nothing; it ends K3_OK");

    /* ---- a grammar whose first visits take more than one step's budget (an anyOf of 60 strings
     * of maxLength 1..60 puts up to 60 string positions in the set at once, each a walk of the
     * vocabulary on its first visit): its turn feeds nothing in the steps where its mask is not
     * done (k3_gmatch_mask_bounded), while the turn beside it goes on; its reply is the one it
     * gives alone. Before, each mask did every first visit in one step, holding the batch. */
    {
        k3_tok       *tok = NULL;
        k3_gvocab    *voc = NULL;
        k3_grammar   *gr[2];
        k3_model_info info;
        k3_buf        sch = {0};
        k3_model_get_info(m, &info);
        K3_ASSERT(k3_buf_add(&sch, "{\"anyOf\":[", 10) == K3_OK);
        for (int k = 1; k <= 60; k++)
            K3_ASSERT(k3_buf_printf(&sch, "%s{\"type\":\"string\",\"maxLength\":%d}", k > 1 ? "," : "", k) ==
                      K3_OK);
        K3_ASSERT(k3_buf_add(&sch, "]}", 2) == K3_OK);
        K3_ASSERT(k3_tok_load(model_dir, NULL, &tok) == K3_OK);
        K3_ASSERT(k3_gvocab_new(tok, info.vocab, info.eos_id, &voc) == K3_OK);
        for (int k = 0; k < 2; k++) /* one for the turn alone, one (cold caches) for the batch */
            K3_ASSERT(k3_grammar_json_schema(voc, sch.p, sch.n, NULL, &gr[k]) == K3_OK);
        const tcase  gc = {"A string, please.", NULL, 0, 30, 1.0f, 11};
        k3_conv     *c1 = conv_for(&gc), *c2 = conv_for(&gc), *c3 = conv_for(&cases[1]);
        k3_session  *s1, *s2, *s3;
        k3_conv_gen *gt[2];
        K3_ASSERT(k3_session_new(m, &s1) == K3_OK && k3_session_new(m, &s2) == K3_OK &&
                  k3_session_new(m, &s3) == K3_OK);
        k3_conv_set_grammar(c1, gr[0]);
        k3_conv_set_grammar(c2, gr[1]);
        K3_ASSERT(k3_conv_generate(c1, m, s1, NULL) == K3_OK);
        K3_ASSERT(k3_conv_gen_begin(c2, m, s2, NULL, 0, &gt[0]) == K3_OK &&
                  k3_conv_gen_begin(c3, m, s3, NULL, 0, &gt[1]) == K3_OK);
        int waits = 0, steps = 0;
        while (!k3_conv_gen_done(gt[0]) && steps++ < 100000) {
            int p2 = k3_session_pos(s2), p3 = k3_session_pos(s3);
            int dec = !k3_conv_gen_prefill_left(gt[0]) && !k3_conv_gen_done(gt[1]);
            K3_ASSERT(k3_conv_gen_step_batch(gt, k3_conv_gen_done(gt[1]) ? 1 : 2) == K3_OK);
            waits +=
                dec && !k3_conv_gen_done(gt[0]) && k3_session_pos(s2) == p2 && k3_session_pos(s3) == p3 + 1;
        }
        while (!k3_conv_gen_done(gt[1]))
            K3_ASSERT(k3_conv_gen_step(gt[1]) == K3_OK);
        k3_status     e2 = k3_conv_gen_end(gt[0]), e3 = k3_conv_gen_end(gt[1]);
        const k3_msg *a = last(c1), *b = last(c2);
        T_CHECK(e2 == K3_OK && e3 == K3_OK && waits > 0 && a->n_ids == b->n_ids && a->n_ids > 1 &&
                    !memcmp(a->ids, b->ids, (size_t)a->n_ids * sizeof *a->ids) &&
                    str_eq(a->content, b->content),
                "a grammar with many first visits at once: %d steps where its turn waited for its mask and "
                "the other was fed; its reply (%d tokens) is the one it gives alone: %s",
                waits, b->n_ids, b->content);
        k3_conv_free(c1), k3_conv_free(c2), k3_conv_free(c3);
        k3_session_free(s1), k3_session_free(s2), k3_session_free(s3);
        k3_grammar_free(gr[0]), k3_grammar_free(gr[1]);
        k3_gvocab_free(voc);
        k3_tok_free(tok);
        free(sch.p);
    }

    for (int i = 0; i < N_CASE; i++) {
        k3_conv_free(ca[i]);
        k3_conv_free(cb[i]);
        k3_conv_free(cc[i]);
        k3_session_free(sa[i]);
        k3_session_free(sb[i]);
        k3_session_free(sc[i]);
        text_clear(&ta[i]);
        text_clear(&tb[i]);
        text_clear(&tc[i]);
    }
    k3_conv_free(cf);
    k3_conv_free(cg);
    k3_conv_free(cx);
    k3_conv_free(cy);
    k3_session_free(se);
    k3_session_free(sf);
    k3_session_free(sg);
    k3_model_free(m);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) {
    }
    return t_done();
}
