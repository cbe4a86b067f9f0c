/* bench-history.c: the conversation rendering a chat turn pays, against the history's length.
 *
 *   BENCH history_turn_N  X ms ref Y ms   one turn's renderings at N exchanges: kept (the branch's
 *                                         conv_render_kept) vs from scratch (conv_render_prompt,
 *                                         what every turn paid before)
 *
 * A chat turn needs the history's rendering three times (worker.c: the context figure before
 * it, the prompt k3_conv_generate prefills, the figure after it). The history is N copies of
 * one real k3-nano exchange (greedy, thinking on; the reply renders from its ids, as a chat's
 * do); a "turn" here is those three renderings around one more exchange, without the model's
 * forward pass (the same for both). Rounds alternate old and new on the same conversation;
 * medians. N: 1,000, 10,000 and 50,000; only when asked (`k3-bench history`).
 *
 *   BENCH history_copy_N  X ms ref Y ms   the copy a chat's worker keeps as a turn begins (for a
 *                                         quit's rescue, ue_turn_begin), autosave on and the file
 *                                         current: k3_conv_copy_unsaved vs k3_conv_copy (the whole
 *                                         conversation, what every turn paid before)
 */
#include "bench.h"
#include "conv-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int bench_history(void);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One turn's renderings on c: before it (context), the prompt, after the reply (context); kept
 * or from scratch. The exchange added is taken back (k3_conv_undo), as the next round starts. */
static double turn_ms(k3_conv *c, const k3_tok *tok, const k3_msg *user, const k3_msg *reply, int kept,
                      size_t *n_ids) {
    k3_ids r  = {0};
    int    n  = 0;
    double t0 = now_s();
    K3_ASSERT(k3_conv_add_msg(c, user) == K3_OK);
    if (kept) {
        K3_ASSERT(conv_render_kept(c, tok, NULL, &n) == K3_OK);
        K3_ASSERT(conv_render_kept(c, tok, &r, &n) == K3_OK);
    } else {
        K3_ASSERT(conv_render_prompt(c, tok, 1, &r) == K3_OK);
        r.n = 0;
        K3_ASSERT(conv_render_prompt(c, tok, 1, &r) == K3_OK);
    }
    *n_ids = r.n;
    K3_ASSERT(k3_conv_add_msg(c, reply) == K3_OK);
    r.n = 0;
    if (kept)
        K3_ASSERT(conv_render_kept(c, tok, NULL, &n) == K3_OK);
    else
        K3_ASSERT(conv_render_prompt(c, tok, 1, &r) == K3_OK);
    double ms = (now_s() - t0) * 1e3;
    K3_ASSERT(k3_conv_undo(c) == 2);
    k3_ids_free(&r);
    return ms;
}

/* The rounds of an old and a new way (ms each) on a conversation of n messages, then their
 * medians as the BENCH line (new, ref old). */
static void report_rounds(const char *name, int n, const char *what, const char *old_name, double *old,
                          const char *new_name, double *nw, int rounds) {
    printf("# %s: %d messages, %s; ms per turn, %s:", name, n, what, old_name);
    for (int r = 0; r < rounds; r++)
        printf(" %.4g", old[r]);
    printf("; %s:", new_name);
    for (int r = 0; r < rounds; r++)
        printf(" %.4g", nw[r]);
    printf("\n");
    bench_report(name, bench_median(nw, rounds), "ms", bench_median(old, rounds), "ms"); /* sorts them */
}

/* history_turn_N on c (N exchanges): rounds of turn_ms, kept and from scratch alternating. */
static void turn_bench(k3_conv *c, k3_model *m, const k3_msg *user, const k3_msg *reply, const char *name) {
    enum { ROUNDS = 7 };
    const k3_tok *tok;
    K3_ASSERT(conv_get_tok(c, m, &tok) == K3_OK);
    int n0;
    K3_ASSERT(conv_render_kept(c, tok, NULL, &n0) == K3_OK); /* the chat's first figure (after /load) */
    double old[ROUNDS], kept[ROUNDS];
    size_t n_old = 0, n_new = 0;
    for (int r = 0; r < ROUNDS; r++) { /* alternating, the order swapped every round */
        if (r % 2) {
            kept[r] = turn_ms(c, tok, user, reply, 1, &n_new);
            old[r]  = turn_ms(c, tok, user, reply, 0, &n_old);
        } else {
            old[r]  = turn_ms(c, tok, user, reply, 0, &n_old);
            kept[r] = turn_ms(c, tok, user, reply, 1, &n_new);
        }
    }
    K3_ASSERT(n_old == n_new); /* the same prompt */
    char what[64];
    snprintf(what, sizeof what, "prompt %zu tokens", n_old);
    report_rounds(name, k3_conv_count(c) + 1, what, "from scratch", old, "kept", kept, ROUNDS);
}

/* One turn's copy for the rescue (ue_turn_begin): the user's message added to c, then its copy,
 * whole or the messages the autosave lacks; the message is taken back. */
static double copy_ms(k3_conv *c, const k3_msg *user, int unsaved) {
    K3_ASSERT(k3_conv_add_msg(c, user) == K3_OK);
    double   t0 = now_s();
    k3_conv *x  = unsaved ? k3_conv_copy_unsaved(c) : k3_conv_copy(c);
    double   ms = (now_s() - t0) * 1e3;
    K3_ASSERT(x && k3_conv_count(x) == (unsaved ? 1 : k3_conv_count(c)));
    k3_conv_free(x);
    K3_ASSERT(k3_conv_undo(c) == 1); /* the message only: above the file, no rewrite due */
    return ms;
}

/* history_copy_N on c (N exchanges), its autosave written once into a directory of bench_dir. */
static void copy_bench(k3_conv *c, const k3_msg *user, const char *name) {
    enum { ROUNDS = 7 };
    char dir[600], cmd[700];
    snprintf(dir, sizeof dir, "%s/k3-bench-history-%d", bench_dir(), (int)getpid());
    K3_ASSERT(k3_conv_autosave_enable(c, dir) == K3_OK && k3_conv_autosave(c) == K3_OK);
    double whole[ROUNDS], unsaved[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) { /* alternating, the order swapped every round */
        int first                    = r % 2;
        (first ? unsaved : whole)[r] = copy_ms(c, user, first);
        (first ? whole : unsaved)[r] = copy_ms(c, user, !first);
    }
    report_rounds(name, k3_conv_count(c) + 1, "autosave current", "whole", whole, "unsaved only", unsaved,
                  ROUNDS);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd))
        printf("# history: could not remove %s\n", dir);
}

int bench_history(void) {
    static const int sizes[] = {1000, 10000, 50000};
    if (!bench_asked("history")) {
        printf("# history: only when asked (k3-bench history)\n");
        return 0;
    }
    k3_params   p;
    k3_model   *m    = NULL;
    k3_session *s    = NULL;
    k3_conv    *seed = k3_conv_new();
    if (k3_params_default(&p) || (p.threads = 1, k3_model_open("models/k3-nano", &p, &m)) ||
        k3_session_new(m, &s) || !seed) {
        printf("# history: models/k3-nano: %s\n", k3_errmsg());
        return 1;
    }
    k3_conv_settings set;
    k3_conv_get_settings(seed, &set);
    set.think         = 1;
    set.sampling.temp = 0;
    K3_ASSERT(k3_conv_set_settings(seed, &set) == K3_OK &&
              k3_conv_add(seed, K3_ROLE_USER, "What is 2 + 3?", NULL) == K3_OK &&
              k3_conv_generate(seed, m, s, NULL) == K3_OK);
    const k3_msg *user = k3_conv_msg(seed, 0), *reply = k3_conv_msg(seed, 1);
    char          load[64] = "?";
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        char turn[64], copy[64];
        snprintf(turn, sizeof turn, "history_turn_%d", sizes[k]);
        snprintf(copy, sizeof copy, "history_copy_%d", sizes[k]);
        if (!bench_want(turn) && !bench_want(copy))
            continue;
        k3_conv *c = k3_conv_new();
        K3_ASSERT(c && k3_conv_set_settings(c, &set) == K3_OK);
        for (int i = 0; i < sizes[k]; i++)
            K3_ASSERT(k3_conv_add_msg(c, user) == K3_OK && k3_conv_add_msg(c, reply) == K3_OK);
        if (bench_want(turn))
            turn_bench(c, m, user, reply, turn);
        if (bench_want(copy))
            copy_bench(c, user, copy);
        k3_conv_free(c);
    }
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(load, sizeof load, f))
            snprintf(load, sizeof load, "?");
        fclose(f);
    }
    printf("# history: load average %s", load);
    k3_conv_free(seed);
    k3_session_free(s);
    k3_model_free(m);
    return 0;
}
