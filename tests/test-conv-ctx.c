/* test-conv-ctx.c: conversations at the context's end (K3_MAXT), on k3-nano (greedy):
 *   - a prompt that leaves exactly the room a turn needs to start (8 tokens) is answered, the
 *     reply cut by the context (stop "context"); one token less of context and it is refused,
 *     K3_ERR_CONTEXT naming the figures, the conversation unchanged;
 *   - over many turns (a history that outgrows the context, /retry every third turn, /forget
 *     after each refusal, replies cut mid-reasoning and mid-answer), every greedy reply equals
 *     what a fresh session and conversation give on the same history with no prompt cache, with
 *     K3_CONV_SNAPSHOTS 0 and 3: the prompt cache and the snapshots are exact at every boundary;
 *   - the reply cut by the context, taken back (/undo) and asked again, is the same reply.
 * Figures come from the model's own rendering (k3_conv_context), never from fixed sizes. */
#include "conv-impl.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static const char *const questions[] = {"What is 2 + 3?",          "hi",
                                        "Reverse the word apple.", "Count the letters in banana.",
                                        "Sort 5 3 9 1.",           "What is 12 - 7?"};

static const k3_msg *last(const k3_conv *c) {
    return k3_conv_msg(c, k3_conv_count(c) - 1);
}

static k3_conv *conv_new(int snaps) {
    k3_conv         *c = k3_conv_new();
    k3_conv_settings set;
    K3_ASSERT(c);
    k3_conv_settings_default(&set);
    set.think         = 1;
    set.sampling.temp = 0;
    K3_ASSERT(k3_conv_set_settings(c, &set) == K3_OK && k3_conv_set_prompt_cache(c, snaps, 0) == K3_OK);
    return c;
}

static k3_model *open_nano(int max_ctx) {
    k3_params p;
    k3_model *m = NULL;
    K3_ASSERT(k3_params_default(&p) == K3_OK);
    p.max_ctx = max_ctx;
    p.threads = 1;
    return k3_model_open("models/k3-nano", &p, &m) == K3_OK ? m : NULL;
}

/* What a fresh session and conversation (no snapshots) answer to c's history without its last
 * `drop` messages: 1 when it is want's reply (ids and stop) or, want NULL, the status wst. */
static int same_as_fresh(const k3_conv *c, int drop, k3_model *m, const k3_msg *want, k3_status wst) {
    k3_conv    *f = conv_new(0);
    k3_session *s;
    K3_ASSERT(k3_session_new(m, &s) == K3_OK);
    for (int i = 0; i + drop < k3_conv_count(c); i++)
        K3_ASSERT(k3_conv_add_msg(f, k3_conv_msg(c, i)) == K3_OK);
    k3_status     st = k3_conv_generate(f, m, s, NULL);
    const k3_msg *r  = last(f);
    int           ok = st == wst && (!want || (r->role == K3_ROLE_ASSISTANT && r->n_ids == want->n_ids &&
                                     !memcmp(r->ids, want->ids, (size_t)r->n_ids * sizeof *r->ids) &&
                                     r->stats.stop == want->stats.stop));
    if (!ok)
        printf("  fresh: status %d (want %d), %d ids stop %d (want %d ids stop %d)\n", st, wst,
               r ? r->n_ids : -1, r ? (int)r->stats.stop : -1, want ? want->n_ids : -1,
               want ? (int)want->stats.stop : -1);
    k3_session_free(s);
    k3_conv_free(f);
    return ok;
}

/* The first question's prompt with exactly the room a turn needs, and one token less. */
static void exact_room(void) {
    k3_model *m0 = open_nano(8192);
    if (!m0) {
        T_SKIP("k3-nano does not load: %s", k3_errmsg());
        return;
    }
    k3_conv *c = conv_new(3);
    int      need, cap;
    K3_ASSERT(k3_conv_add(c, K3_ROLE_USER, questions[0], NULL) == K3_OK &&
              k3_conv_context(c, m0, &need, &cap) == K3_OK);
    k3_model_free(m0);
    for (int less = 0; less <= 1; less++) {
        int         maxt = need + CONV_MIN_ROOM - less;
        k3_model   *m    = open_nano(maxt);
        k3_session *s;
        K3_ASSERT(m && k3_session_new(m, &s) == K3_OK);
        k3_status st = k3_conv_generate(c, m, s, NULL);
        if (!less) {
            const k3_msg *r = last(c);
            T_CHECK(st == K3_OK && r->role == K3_ROLE_ASSISTANT && r->stats.stop == K3_STOP_CONTEXT &&
                        r->n_ids == CONV_MIN_ROOM + 1 && k3_session_pos(s) == maxt,
                    "a %d-token prompt at K3_MAXT=%d (room %d): answered, cut by the context after %d tokens "
                    "(stop %d, session at %d)",
                    need, maxt, CONV_MIN_ROOM, r->n_ids, (int)r->stats.stop, k3_session_pos(s));
            T_CHECK(same_as_fresh(c, 1, m, r, K3_OK), "... the same reply as a fresh session's");
            K3_ASSERT(k3_conv_pop_reply(c) == 1);
            st = k3_conv_generate(c, m, s, NULL);
            T_CHECK(st == K3_OK && same_as_fresh(c, 1, m, last(c), K3_OK),
                    "... asked again from the prompt cache: the same reply");
            K3_ASSERT(k3_conv_pop_reply(c) == 1);
        } else {
            char want[64];
            snprintf(want, sizeof want, "needs %d tokens", need + CONV_MIN_ROOM);
            T_CHECK(st == K3_ERR_CONTEXT && strstr(k3_errmsg(), want) && strstr(k3_errmsg(), "K3_MAXT") &&
                        k3_conv_count(c) == 1,
                    "one token less (K3_MAXT=%d): refused, naming the figures, nothing changes (%s)", maxt,
                    k3_errmsg());
        }
        k3_session_free(s);
        k3_model_free(m);
    }
    k3_conv_free(c);
}

/* Turns until the history outgrows the context, again and again; every reply checked. */
static void many_turns(int maxt, int snaps) {
    k3_model   *m = open_nano(maxt);
    k3_session *s;
    if (!m) {
        T_SKIP("k3-nano does not load: %s", k3_errmsg());
        return;
    }
    K3_ASSERT(k3_session_new(m, &s) == K3_OK);
    k3_conv *c   = conv_new(snaps);
    int      bad = 0, answered = 0, refused = 0, cut = 0, cached = 0, n_turns = 12;
    for (int t = 0; t < n_turns; t++) {
        K3_ASSERT(k3_conv_add(c, K3_ROLE_USER, questions[t % 6], NULL) == K3_OK);
        k3_status st = k3_conv_generate(c, m, s, NULL);
        if (st == K3_ERR_CONTEXT) {
            refused++;
            bad += !same_as_fresh(c, 0, m, NULL, K3_ERR_CONTEXT);
            K3_ASSERT(k3_conv_undo(c) == 1 && k3_conv_drop_oldest(c) > 0);
            continue;
        }
        K3_ASSERT(st == K3_OK);
        answered++;
        cut += last(c)->stats.stop == K3_STOP_CONTEXT;
        cached += last(c)->stats.n_cached > 0;
        bad += !same_as_fresh(c, 1, m, last(c), K3_OK);
        if (t % 3 == 2) { /* /retry: from the snapshot after the prompt, or a prefill */
            K3_ASSERT(k3_conv_retry_last(c) == 1);
            st = k3_conv_generate(c, m, s, NULL);
            bad += st != K3_OK || !same_as_fresh(c, 1, m, last(c), K3_OK);
        }
    }
    T_CHECK(
        !bad && answered > 0 && refused > 0 && cut > 0 && (snaps == 0 || cached > 0),
        "K3_MAXT=%d, K3_CONV_SNAPSHOTS=%d: %d turns (%d answered, %d cut by the context, %d from the prompt "
        "cache, %d refused): every reply and refusal as a fresh session's (%d differ)",
        maxt, snaps, n_turns, answered, cut, cached, refused, bad);
    k3_conv_free(c);
    k3_session_free(s);
    k3_model_free(m);
}

int main(void) {
    exact_room();
    many_turns(256, 3);
    many_turns(256, 0);
    many_turns(200, 3);
    return t_done();
}
