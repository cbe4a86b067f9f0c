/* replay.c: `k3chat MODEL_DIR --replay FILE`: re-run a transcript's user turns against
 * the current model and settings and report, turn by turn, whether each new answer
 * matches the saved one, with the first differing token (k3_conv_replay, src/).
 *
 * Settings: the transcript's, each overridden by --temp, --top-p, --seed, --think,
 * --effort, --max-tokens when given. Without --seed every turn samples with the seed its
 * statistics recorded, and without --temp/--top-p with its temperature and top-p too, so
 * a transcript reproduces exactly whatever its sampling.
 * Exit status: 0 every turn matches, 3 some turn differs, 1 error. */
#include "cli.h"
#include "engine.h"
#include "text.h"
#include "k3.h"
#include "loadprog.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void report(const k3_replay_turn *t, void *ud) {
    (void)ud;
    const char *unit = t->by_ids ? "tokens" : "bytes";
    if (t->match) {
        printf("turn %d: match (%d %s)\n", t->turn, t->n_saved, unit);
    } else {
        char d[512];
        ue_replay_diff(t, d, sizeof d);
        txt_term_printf(stdout, "turn %d: %s\n", t->turn, d); /* the pieces are the model's text */
    }
    fflush(stdout);
}

int cli_replay(const ui_opts *o) {
    k3_params        par;
    k3_model        *m = NULL;
    k3_session      *s = NULL;
    k3_conv         *c = k3_conv_new();
    k3_load_info     info;
    k3_conv_settings set;
    int              rc = 1, n_diff = 0;
    if (!c) {
        fprintf(stderr, "k3chat: out of memory\n");
        return 1;
    }
    /* the transcript first: a bad file fails fast, before loading weights */
    if (k3_conv_load(c, o->file, &info) || k3_params_default(&par) || load_model_verbose(o->dir, &par, &m) ||
        k3_session_new(m, &s) || k3_conv_set_model(c, o->dir, &par))
        goto fail;
    k3_conv_get_settings(c, &set);
    if (!isnan(o->temp))
        set.sampling.temp = o->temp;
    if (!isnan(o->top_p))
        set.sampling.top_p = o->top_p;
    if (o->has_seed)
        set.sampling.seed = o->seed;
    if (o->think >= 0)
        set.think = o->think;
    if (o->effort)
        snprintf(set.effort, sizeof set.effort, "%s", o->effort);
    if (o->max_tokens >= 0)
        set.max_tokens = o->max_tokens;
    if (k3_conv_set_settings(c, &set))
        goto fail;
    char notes[400];
    ue_load_notes(&info, c, notes, sizeof notes);
    /* the reason may quote the file, and the file's name and its fingerprint are outside text:
     * escaped (a name with OSC 0 set the terminal's title, into a pipe or not) */
    if (notes[0])
        txt_term_printf(stdout, "replay: %s: %s\n", o->file, notes);
    txt_term_printf(stdout, "replay: %s: %d messages; think %s, effort %s, temperature %g, top-p %g, %s\n",
                    o->file, info.n_messages, set.think ? "on" : "off", set.effort, (double)set.sampling.temp,
                    (double)set.sampling.top_p,
                    o->has_seed ? "seed from --seed" : "each turn's recorded seed");
    fflush(stdout);
    unsigned flags = (o->has_seed ? 0u : (unsigned)K3_REPLAY_SEEDS) |
                     (isnan(o->temp) && isnan(o->top_p) ? (unsigned)K3_REPLAY_SAMPLING : 0u);
    if (k3_conv_replay(c, m, s, &set, flags, report, NULL, &n_diff))
        goto fail;
    printf(n_diff ? "replay: %d turn%s differ%s\n" : "replay: every turn matches\n", n_diff,
           n_diff == 1 ? "" : "s", n_diff == 1 ? "s" : "");
    rc = n_diff ? 3 : 0;
    goto done;
fail:
    txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
done:
    k3_conv_free(c);
    k3_session_free(s);
    k3_model_free(m);
    return rc;
}
