/* conv-replay.c: re-run a saved conversation's user turns and compare the answers.
 *
 * DESIGN
 * Each turn is re-run on the SAVED history before it (teacher forcing): the replay
 * conversation gets the saved messages up to a user message, generates, is compared with
 * the saved reply, and then has its new reply replaced by the saved one. So a difference
 * in turn 2 does not cascade into turn 3, and the prompt cache keeps working (the saved
 * reply renders to the tokens just generated when they match).
 * With greedy sampling and the transcript's settings every turn must match exactly; with
 * K3_REPLAY_SEEDS | K3_REPLAY_SAMPLING each turn also samples as its statistics recorded
 * (seed, temperature, top-p, ...), so a sampled transcript reproduces as well, even when
 * the settings changed between turns. Comparison is by token ids when the transcript stored
 * them (exact, even for non-canonical tokenizations) and by text otherwise. A saved turn
 * that was interrupted matches when the new answer starts with it.
 */
#include "conv-impl.h"

#include <stdlib.h>
#include <string.h>

/* Printable form of bytes: quoted, with escapes for quotes and control bytes. */
static void quote(const char *p, size_t len, char *out, size_t cap) {
    size_t n = 0;
    out[n++] = '"';
    for (size_t i = 0; i < len && n + 8 < cap; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '"' || ch == '\\')
            n += (size_t)snprintf(out + n, cap - n, "\\%c", ch);
        else if (ch == '\n')
            n += (size_t)snprintf(out + n, cap - n, "\\n");
        else if (ch < 0x20 || ch == 0x7f)
            n += (size_t)snprintf(out + n, cap - n, "\\x%02x", ch);
        else
            out[n++] = (char)ch;
    }
    out[n++] = '"';
    out[n]   = 0;
}

static void piece_text(const k3_tok *tok, int32_t id, char *out, size_t cap) {
    size_t      len = 0;
    const char *p   = id >= 0 ? k3_tok_piece(tok, id, &len) : NULL;
    if (p)
        quote(p, len, out, cap);
    else
        snprintf(out, cap, id < 0 ? "(end)" : "(invalid id)");
}

/* think + '\n' + response of an assistant message (text comparison). */
static char *msg_text(const k3_msg *m) {
    const char *r = m->reasoning ? m->reasoning : "";
    size_t      a = strlen(r), b = strlen(m->content);
    char       *t = k3_malloc(a + b + 2);
    if (t) {
        memcpy(t, r, a);
        t[a] = '\n';
        memcpy(t + a + 1, m->content, b + 1);
    }
    return t;
}

/* Fills the comparison fields of t; returns K3_ERR_NOMEM only. */
static k3_status compare(const k3_tok *tok, const k3_msg *saved, const k3_msg *now, k3_replay_turn *t,
                         char *sp, char *np, size_t cap) {
    t->first_diff = -1;
    t->saved_id = t->new_id = -1;
    t->saved_piece          = sp;
    t->new_piece            = np;
    sp[0] = np[0] = 0;
    if (saved->ids && saved->n_ids > 0) {
        t->by_ids  = 1;
        t->n_saved = saved->n_ids;
        t->n_new   = now->n_ids;
        int n = t->n_saved < t->n_new ? t->n_saved : t->n_new, i = 0;
        while (i < n && saved->ids[i] == now->ids[i])
            i++;
        /* equal; or a longer new answer to an interrupted saved turn: match */
        int same = i == n && (t->n_saved == t->n_new || (t->n_new > t->n_saved && saved->interrupted));
        if (!same) {
            t->first_diff = i;
            t->saved_id   = i < t->n_saved ? saved->ids[i] : -1;
            t->new_id     = i < t->n_new ? now->ids[i] : -1;
            piece_text(tok, t->saved_id, sp, cap);
            piece_text(tok, t->new_id, np, cap);
        }
        t->match = t->first_diff < 0;
        return K3_OK;
    }
    char *a = msg_text(saved), *b = msg_text(now);
    if (!a || !b) {
        free(a);
        free(b);
        return k3_err(K3_ERR_NOMEM, "replay: out of memory");
    }
    t->by_ids  = 0;
    t->n_saved = (int)strlen(a);
    t->n_new   = (int)strlen(b);
    int i      = 0;
    while (a[i] && a[i] == b[i])
        i++;
    int prefix_ok = saved->interrupted && !a[i];
    if ((a[i] || b[i]) && !prefix_ok) {
        t->first_diff = i;
        quote(a + i, strnlen(a + i, 24), sp, cap);
        quote(b + i, strnlen(b + i, 24), np, cap);
    }
    t->match = t->first_diff < 0;
    free(a);
    free(b);
    return K3_OK;
}

/* A turn the context (K3_MAXT) cannot hold whole is no difference of the model's: the replay stops
 * with an error that names the figure it needs. The saved turn's prompt does not fit (gst, the
 * turn's K3_ERR_CONTEXT); or the new answer stopped at the context where the saved one went on,
 * equal so far (t; NULL for the first case). Returns K3_ERR_CONTEXT when so, else K3_OK. */
static k3_status replay_context(k3_conv *r, k3_model *m, const k3_msg *saved, const k3_replay_turn *t,
                                k3_status gst, int turn, int i) {
    k3_model_info info;
    k3_model_get_info(m, &info);
    /* the positions the saved answer takes: its last token is not fed when it ended the message or
     * met the context's end (conv-gen.c step_prepare), at least the room a turn needs to start */
    int ans = saved->n_ids - (saved->has_stats &&
                              (saved->stats.stop == K3_STOP_EOS || saved->stats.stop == K3_STOP_CONTEXT));
    ans     = ans > CONV_MIN_ROOM ? ans : CONV_MIN_ROOM;
    if (gst == K3_ERR_CONTEXT) {
        int used = 0, cap = 0;
        if (k3_conv_context(r, m, &used, &cap) != K3_OK)
            return k3_err(K3_ERR_CONTEXT, "replay of turn %d (message %d): %s", turn, i + 1, k3_errmsg());
        return k3_err(K3_ERR_CONTEXT,
                      "replay of turn %d (message %d): its prompt takes %d tokens and the context holds %d "
                      "(K3_MAXT); the turn needs K3_MAXT=%d or more",
                      turn, i + 1, used, info.max_ctx, used + ans);
    }
    const k3_msg *nm = t->new_msg;
    if (t->match || !nm->has_stats || nm->stats.stop != K3_STOP_CONTEXT)
        return K3_OK;
    if (t->by_ids) {
        if (t->first_diff != t->n_new) /* a token differs before the context ended it */
            return K3_OK;
        return k3_err(
            K3_ERR_CONTEXT,
            "replay of turn %d (message %d): the context (K3_MAXT=%d) ended the new answer after %d of "
            "the saved answer's %d tokens, equal so far; the turn needs K3_MAXT=%d or more",
            turn, i + 1, info.max_ctx, t->n_new, t->n_saved, nm->stats.n_prompt + ans);
    }
    const char *sr = saved->reasoning ? saved->reasoning : "", *nr = nm->reasoning ? nm->reasoning : "";
    size_t      lr = strlen(nr), lc = strlen(nm->content);
    int         prefix =
        !strncmp(sr, nr, lr) && (!lc || (!strcmp(sr, nr) && !strncmp(saved->content, nm->content, lc)));
    if (!prefix)
        return K3_OK;
    return k3_err(
        K3_ERR_CONTEXT,
        "replay of turn %d (message %d): the context (K3_MAXT=%d) ended the new answer before the saved "
        "one ended, equal so far; the turn needs a larger K3_MAXT",
        turn, i + 1, info.max_ctx);
}

k3_status k3_conv_replay(k3_conv *saved, k3_model *m, k3_session *s, const k3_conv_settings *set,
                         unsigned flags, k3_replay_cb cb, void *ud, int *n_diff) {
    k3_conv      *r   = k3_conv_new();
    const k3_tok *tok = NULL;
    k3_status     st  = r ? k3_conv_set_settings(r, set) : k3_err(K3_ERR_NOMEM, "replay: out of memory");
    if (!st)
        st = conv_get_tok(r, m, &tok);
    int turn = 0, diffs = 0;
    atomic_store(&saved->cancel, 0);
    if (!st)
        atomic_store(&saved->child, r);
    /* a system prompt set mid-conversation ("since") joins where it was set: the turns before
     * it are replayed without it, as they were answered */
    int late = saved->n_msgs && saved->msgs[0].role == K3_ROLE_SYSTEM && saved->sys_since > 0;
    for (int i = 0; !st && i < saved->n_msgs; i++) {
        const k3_msg *msg = &saved->msgs[i];
        if (late && i == 0)
            continue;
        if (late && i - 1 == saved->sys_since && (st = k3_conv_set_system(r, saved->msgs[0].content)))
            break;
        int last_user = r->n_msgs && r->msgs[r->n_msgs - 1].role == K3_ROLE_USER;
        if (msg->role != K3_ROLE_ASSISTANT || !last_user) {
            st = conv_push(r, msg);
            continue;
        }
        turn++;
        const k3_turn_stats *ts       = &msg->stats;
        k3_conv_settings     turn_set = *set;
        if ((flags & K3_REPLAY_SAMPLING) && msg->has_stats && ts->has_sampling) {
            turn_set.sampling.temp  = ts->sampling.temp;
            turn_set.sampling.top_p = ts->sampling.top_p;
            turn_set.sampling.min_p = ts->sampling.min_p;
            turn_set.sampling.top_k = ts->sampling.top_k;
        }
        if ((st = k3_conv_set_settings(r, &turn_set)))
            break;
        if ((flags & K3_REPLAY_SEEDS) && msg->has_stats && ts->has_sampling)
            k3_conv_set_turn_seed(r, ts->sampling.seed);
        if (atomic_load(&saved->cancel)) {
            st = k3_err(K3_ABORTED, "replay cancelled before turn %d", turn);
            break;
        }
        st = k3_conv_generate(r, m, s, NULL);
        if (st == K3_ERR_CONTEXT && r->msgs[r->n_msgs - 1].role == K3_ROLE_USER) {
            st = replay_context(r, m, msg, NULL, st, turn, i);
            break;
        }
        if (st) {
            k3_err_prefix("replay of turn %d (message %d)", turn, i + 1);
            break;
        }
        k3_replay_turn t = {.turn = turn, .msg_index = i, .new_msg = &r->msgs[r->n_msgs - 1]};
        char           sp[96], np[96];
        if ((st = compare(tok, msg, t.new_msg, &t, sp, np, sizeof sp)) ||
            (st = replay_context(r, m, msg, &t, K3_OK, turn, i)))
            break;
        diffs += !t.match;
        if (cb)
            cb(&t, ud);
        k3_conv_pop_reply(r);
        st = conv_push(r, msg);
    }
    atomic_store(&saved->child, NULL);
    if (saved->cache_sess == s) /* the replay moved the session */
        k3_conv_drop_cache(saved);
    if (n_diff)
        *n_diff = diffs;
    k3_conv_free(r);
    return st;
}
