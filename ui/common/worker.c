/* worker.c: the real engine backend of the UI seam (engine.h): a model, one session and one
 * conversation (include/k3.h), all used on the worker thread only. The conversation (conv.c) owns
 * the history, the prompt cache, transcripts and the autosave; this file turns its callbacks
 * and statistics into UI events. */
#include "engine.h"
#include "settings.h"
#include "k3.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct real {
    /* a /load sent the transcript's settings: its context report waits for the settings in force
     * (the front end's answer, EV_CMD_SETTINGS), options given with --load may win over them */
    int             fit_pending;
    ue             *u;
    k3_model       *m;
    k3_session     *s;
    k3_conv        *c;
    k3_model_info   info;
    ue_tokstats     tok;
    int             ctx_used0, ctx_cap; /* context at the start of the turn, and its capacity */
    double          last_progress;
    double          turn_t0, last_prefill; /* the turn's start, the last EV_PREFILL */
    pthread_mutex_t mu;                    /* guards replaying against real_cancel      */
    _Atomic double  experts_pending;       /* a new expert budget (GB), NAN when none */
    k3_conv        *replaying;             /* the saved conversation a replay runs on */
} real;

static void on_progress(const char *what, uint64_t done, uint64_t total, void *ud) {
    real  *r   = ud;
    double now = ev_now();
    if (now - r->last_progress < 0.05 && done != total)
        return; /* a few updates per second are plenty */
    r->last_progress = now;
    ui_ev e          = {.type = EV_PROGRESS, .text = (char *)(uintptr_t)what, .a = done, .b = total};
    ev_push(r->u->out, &e);
}

/* The speed estimate, once the model's files are checked (k3_params.estimate). */
static void on_estimate(const char *line, void *ud) {
    real *r = ud;
    ue_emitf(r->u, EV_INFO, "%s", line);
}

/* The session's prefill progress: after a second of prefill, a few EV_PREFILL a second. */
static void on_prefill(double done, int total, uint64_t bytes, void *ud) {
    real  *r   = ud;
    double now = ev_now();
    if (now - r->turn_t0 < 1.0 || (now - r->last_prefill < 0.1 && done < total))
        return;
    r->last_prefill = now;
    ui_ev e         = {.type = EV_PREFILL, .a = (uint64_t)done, .b = (uint64_t)total, .x = (double)bytes};
    ev_push(r->u->out, &e);
}

static void fill_common(real *r, ue_stats *st) {
    k3_stats ks;
    int      used = 0, cap = r->info.max_ctx;
    k3_session_stats(r->s, &ks);
    if (k3_conv_context(r->c, r->m, &used, &cap) != K3_OK)
        used = k3_session_pos(r->s);
    st->ctx_used     = used;
    st->ctx_max      = cap;
    uint64_t look    = ks.expert_hits + ks.expert_misses;
    st->expert_hit   = look ? (double)ks.expert_hits / (double)look : -1;
    st->expert_gb    = k3_model_expert_budget(r->m);
    st->mem_gb       = ue_mem_gb();
    st->vk_used_gb   = (double)ks.vk_used / 1e9;
    st->vk_budget_gb = (double)ks.vk_budget / 1e9;
    st->vk_hits      = (long)ks.vk_hits;
    st->kernels      = ks.kernels;
}

/* Apply a budget the UI asked for; on the worker thread, between tokens or as a command. */
static void apply_experts(real *r) {
    double gb = atomic_exchange(&r->experts_pending, NAN);
    if (isnan(gb))
        return;
    if (k3_model_set_expert_budget(r->m, gb) != K3_OK)
        ue_emitf(r->u, EV_ERROR, "/experts: %s", k3_errmsg());
    else
        ue_experts_now(r->u, k3_model_expert_budget(r->m));
}

static void on_piece(real *r, int ch, const char *text, size_t n) {
    apply_experts(r);
    if (ue_cancelled(r->u))
        k3_conv_cancel(r->c); /* a Ctrl-C that came before the turn began (generate clears it) */
    ue_emit_token(r->u, ch, text, n);
    ui_ev e = {.type = EV_STATS};
    if (ue_tok_piece(&r->tok, ch, &e.st)) {
        /* the same accounting as the turn's final figure (k3_conv_context), grown by what was generated */
        e.st.ctx_used = r->ctx_used0 + r->tok.n_think + r->tok.n_resp;
        e.st.ctx_max  = r->ctx_cap;
        e.st.kernels  = k3_kernels();
        ev_push(r->u->out, &e);
    }
}
static void on_think(const char *t, size_t n, void *ud) {
    on_piece(ud, EV_CH_THINK, t, n);
}
static void on_response(const char *t, size_t n, void *ud) {
    on_piece(ud, EV_CH_RESPONSE, t, n);
}
/* A conversation with tools (a loaded transcript's): the model's calls are shown in the
 * response as they stream (ue_emit_call), as loaded tool turns are shown. */
static void on_tool_call(int index, const char *id, const char *name, const char *args, size_t n, int done,
                         void *ud) {
    real *r = ud;
    (void)index;
    (void)id;
    ue_emit_call(r->u, name, args, n, done);
}

/* The sampling of a command: the user's values, or the model's generation defaults where the
 * user chose none (g was copied when the command was sent, maybe before the model was loaded). */
static void gen_sampling(const real *r, const ue_gen *g, float *temp, float *top_p) {
    *temp  = g->model_temp && r->info.gen_temp >= 0 ? r->info.gen_temp : g->temp;
    *top_p = g->model_top_p && r->info.gen_top_p > 0 ? r->info.gen_top_p : g->top_p;
}

static k3_status apply_gen(real *r, const ue_gen *g) {
    k3_conv_settings set;
    float            temp, top_p;
    gen_sampling(r, g, &temp, &top_p);
    ue_gen_settings(r->c, g, temp, top_p, &set);
    return k3_conv_set_settings(r->c, &set);
}

/* Even without any exchange no message fits (the system prompt, or what comes before the first
 * exchange, leaves less than the K3_CONV_MIN_ROOM tokens a turn needs). */
static int fit_none(const k3_fit_info *fi) {
    return fi->drop == fi->n_exchanges && fi->used_after + K3_CONV_MIN_ROOM > fi->capacity;
}

/* Generate the reply to the history (which ends with a user message). redo: the command moved
 * the last exchange (/edit) or answer (/retry) to an abandoned branch just before (k3.h). */
static void turn(real *r, const ue_gen *g, int redo) {
    ui_ev e = {.type = EV_TURN};
    ev_push(r->u->out, &e);
    ue_tok_begin(&r->tok);
    if (k3_conv_context(r->c, r->m, &r->ctx_used0, &r->ctx_cap) != K3_OK) {
        r->ctx_used0 = k3_session_pos(r->s);
        r->ctx_cap   = r->info.max_ctx;
    }
    k3_status st = apply_gen(r, g);
    ue_turn_begin(r->u, r->c); /* what a quit that cannot wait for this turn saves (ue_rescue) */
    if (st == K3_OK && ue_cancelled(r->u)) {
        st = K3_ABORTED; /* stopped before it began: the conversation keeps the user's message */
    } else if (st == K3_OK) {
        k3_conv_callbacks cb = {
            .on_think = on_think, .on_response = on_response, .ud = r, .on_tool_call = on_tool_call};
        k3_session_reset_stats(r->s);
        r->turn_t0 = ev_now();
        k3_session_set_prefill_cb(r->s, on_prefill, r);
        st = k3_conv_generate(r->c, r->m, r->s, &cb);
        k3_session_set_prefill_cb(r->s, NULL, NULL);
    }
    ui_ev         d    = {.type = EV_DONE, .i = UE_DONE_OK};
    int           n    = k3_conv_count(r->c);
    const k3_msg *last = n ? k3_conv_msg(r->c, n - 1) : NULL;
    if (st != K3_OK && st != K3_ABORTED) {
        char msg[1200];
        snprintf(msg, sizeof msg, "%s", k3_errmsg());
        int earlier = 0, kept = 0; /* exchanges before this message: /clear and /forget could help */
        for (int k = 0; k + 1 < n; k++)
            earlier |= k3_conv_msg(r->c, k)->role == K3_ROLE_USER;
        if (!last || last->role != K3_ROLE_ASSISTANT) {
            /* nothing was generated: the conversation goes back to what it was before the command.
             * A message: it goes (back to the input line). A /retry: the answer it replaced comes
             * back; an /edit: the exchange it replaced does (the edited text to the input line). */
            if (redo != EV_CMD_RETRY) {
                k3_conv_undo(r->c);
                ui_ev u = {.type = EV_UNDO};
                ev_push(r->u->out, &u);
            }
            int from = k3_conv_count(r->c), back = redo ? k3_conv_restore_branch(r->c) : 0;
            if (back > 0)
                ue_send_msgs(r->u, r->c, from);
            kept = redo == EV_CMD_RETRY && back > 0;
            last = NULL;
        }
        /* the system prompt alone leaves no room (K3_CONV_MIN_ROOM): neither /forget nor a shorter
         * message can help */
        k3_fit_info fi;
        int         sys_full = st == K3_ERR_CONTEXT && k3_conv_system(r->c) &&
                       k3_conv_fit(r->c, r->m, K3_CONV_MIN_ROOM, 0, &fi) == K3_OK && fit_none(&fi);
        const char *tail = kept                  ? "The previous answer stays."
                           : r->u->no_input_line ? "Your message got no answer."
                                                 : "Your message is back in the input line.";
        if (sys_full)
            msg[strcspn(msg, ";")] = 0; /* the engine's advice (drop turns) cannot help then */
        if (sys_full)
            ue_emitf(r->u, EV_ERROR,
                     "%s: with the system prompt alone the conversation takes %d tokens; shorten it (/system "
                     "TEXT), remove it (/system --clear) or start with a larger K3_MAXT. %s",
                     msg, fi.used_after, tail);
        else if (st == K3_ERR_CONTEXT && earlier)
            ue_emitf(r->u, EV_ERROR,
                     "%s (/forget: drop the oldest exchange; /forget --fit: keep the newest that fit; "
                     "/clear: new conversation). %s",
                     msg, tail);
        else if (st == K3_ERR_CONTEXT && kept)
            ue_emitf(r->u, EV_ERROR, "%s. The previous answer stays.", msg);
        else if (st == K3_ERR_CONTEXT)
            ue_emitf(r->u, EV_ERROR, "%s: this message alone is too long for the context; shorten it.%s", msg,
                     r->u->no_input_line ? "" : " It is back in the input line.");
        else
            ue_emitf(r->u, EV_ERROR, "%s", msg[0] ? msg : k3_status_str(st));
        d.i = UE_DONE_ERROR;
    } else if (st == K3_ABORTED) {
        d.i = UE_DONE_CANCELLED;
    }
    fill_common(r, &d.st);
    if (last && last->role == K3_ROLE_ASSISTANT && last->has_stats) {
        const k3_turn_stats *ts = &last->stats;
        d.st.tok_s              = ts->tok_s > 0 ? ts->tok_s : -1;
        d.st.prefill_tok_s      = ts->t_prefill > 0 ? ts->n_prefill / ts->t_prefill : -1;
        d.st.ttft_s             = ts->ttft > 0 ? ts->ttft : -1;
        d.st.think_s            = ts->t_think > ts->ttft ? ts->t_think - ts->ttft : -1;
        d.st.n_think            = ts->n_think;
        d.st.n_response         = ts->n_gen - ts->n_think;
        d.st.n_prefill          = ts->n_prefill;
        if (d.i == UE_DONE_OK && ts->stop == K3_STOP_MAX_TOKENS)
            d.i = UE_DONE_LENGTH;
        else if (d.i == UE_DONE_OK && ts->stop == K3_STOP_CONTEXT)
            d.i = UE_DONE_CONTEXT;
    } else {
        d.st.tok_s = d.st.ttft_s = d.st.think_s = d.st.prefill_tok_s = -1;
    }
    ue_note_saved(r->u, r->c); /* k3_conv_generate autosaved the turn */
    ev_push(r->u->out, &d);
    const char *ae = k3_conv_autosave_error(r->c);
    if (ae)
        ue_emitf(r->u, EV_ERROR, "autosave: %s (the conversation is kept in memory)", ae);
}

typedef struct replay_ctx {
    real *r;
} replay_ctx;

static void on_replay(const k3_replay_turn *t, void *ud) {
    replay_ctx *x = ud;
    if (t->match)
        ue_emitf(x->r->u, EV_INFO, "replay turn %d: same answer (%d %s)", t->turn, t->n_new,
                 t->by_ids ? "tokens" : "bytes");
    else {
        char d[512];
        ue_replay_diff(t, d, sizeof d);
        ue_emitf(x->r->u, EV_ERROR, "replay turn %d: %s", t->turn, d);
    }
}

static void replay(real *r, const char *path, const ue_gen *g) {
    k3_conv *saved  = k3_conv_new();
    int      n_diff = 0;
    ui_ev    d      = {.type = EV_DONE, .i = UE_DONE_OK};
    if (!saved) {
        ue_emitf(r->u, EV_ERROR, "/replay: out of memory");
        d.i = UE_DONE_ERROR;
        goto out;
    }
    k3_load_info li;
    if (k3_conv_load(saved, path, &li) != K3_OK) {
        ue_emitf(r->u, EV_ERROR, "/replay: %s", k3_errmsg());
        d.i = UE_DONE_ERROR;
        goto out;
    }
    int n_user = 0;
    for (int k = 0; k < k3_conv_count(saved); k++)
        n_user += k3_conv_msg(saved, k)->role == K3_ROLE_USER;
    char notes[400];
    ue_load_notes(&li, r->c, notes, sizeof notes);
    ue_emitf(r->u, EV_INFO, "replaying %s: %d user turn%s%s%s (Ctrl-C stops)", path, n_user,
             n_user == 1 ? "" : "s", notes[0] ? "; " : "", notes);
    k3_conv_settings set;
    k3_conv_get_settings(saved, &set);
    gen_sampling(r, g, &set.sampling.temp, &set.sampling.top_p);
    k3_conv_drop_cache(r->c); /* the replay uses the session */
    replay_ctx x = {r};
    pthread_mutex_lock(&r->mu);
    r->replaying = saved;
    pthread_mutex_unlock(&r->mu);
    k3_status st =
        ue_cancelled(r->u) ? K3_ABORTED : k3_conv_replay(saved, r->m, r->s, &set, 1, on_replay, &x, &n_diff);
    pthread_mutex_lock(&r->mu);
    r->replaying = NULL;
    pthread_mutex_unlock(&r->mu);
    k3_session_reset(r->s);
    if (st == K3_ABORTED) {
        ue_emitf(r->u, EV_INFO, "replay stopped");
        d.i = UE_DONE_CANCELLED;
    } else if (st != K3_OK) {
        ue_emitf(r->u, EV_ERROR, "/replay: %s", k3_errmsg());
        d.i = UE_DONE_ERROR;
    } else {
        ue_emitf(r->u, n_diff ? EV_ERROR : EV_INFO, "replay of %s: %d turn%s differ%s", path, n_diff,
                 n_diff == 1 ? "" : "s", n_diff == 1 ? "s" : "");
    }
out:
    ev_push(r->u->out, &d);
    k3_conv_free(saved);
}

/* Room the next turn should have: a quarter of the context (what /forget --fit leaves free). */
static int fit_room(const real *r) {
    return r->info.max_ctx / 4;
}

/* After /load: how much of the context the conversation takes, and when it leaves the next
 * turn little or no room, what /forget --fit would keep. */
static void report_fit(real *r) {
    k3_fit_info fi;
    if (k3_conv_fit(r->c, r->m, fit_room(r), 0, &fi) != K3_OK) {
        ue_emitf(r->u, EV_ERROR, "/load: %s", k3_errmsg());
        return;
    }
    if (fit_none(&fi)) {
        ue_emitf(r->u, EV_ERROR,
                 "this conversation needs %d tokens and the context holds %d; even without any of its %d "
                 "exchanges it takes %d, so no message can fit: shorten or remove the system prompt (/system "
                 "TEXT, /system --clear) or start with a larger K3_MAXT",
                 fi.used, fi.capacity, fi.n_exchanges, fi.used_after);
        return;
    }
    if (!fi.drop) {
        ue_emitf(r->u, EV_INFO, "context: %d of %d tokens", fi.used, fi.capacity);
        return;
    }
    int keep = fi.n_exchanges - fi.drop;
    ue_emitf(r->u, EV_ERROR,
             "this conversation needs %d tokens and the context holds %d: %s. /forget --fit keeps the newest "
             "%d of its "
             "%d exchanges (%d tokens, %s of the context left free); /forget drops the oldest one",
             fi.used, fi.capacity,
             fi.used + K3_CONV_MIN_ROOM > fi.capacity ? "the next message cannot fit" : "little room is left",
             keep, fi.n_exchanges, fi.used_after,
             fi.used_after + fit_room(r) <= fi.capacity ? "a quarter" : "less than a quarter");
}

static void forget_fit(real *r) {
    k3_fit_info fi; /* measured first, applied once it helps */
    if (k3_conv_fit(r->c, r->m, fit_room(r), 0, &fi) != K3_OK) {
        ue_emitf(r->u, EV_ERROR, "/forget --fit: %s", k3_errmsg());
        return;
    }
    if (fit_none(&fi)) { /* dropping every exchange would not make room: nothing is dropped */
        ue_emitf(
            r->u, EV_ERROR,
            "/forget --fit: even without any of its %d exchanges the conversation takes %d of the context's "
            "%d tokens, so nothing is dropped: shorten or remove the system prompt (/system TEXT, /system "
            "--clear) or start with a larger K3_MAXT",
            fi.n_exchanges, fi.used_after, fi.capacity);
        return;
    }
    if (!fi.drop) {
        ue_emitf(r->u, EV_INFO, "/forget --fit: the conversation fits already (%d of %d tokens)", fi.used,
                 fi.capacity);
        return;
    }
    if (k3_conv_fit(r->c, r->m, fit_room(r), 1, &fi) != K3_OK) {
        ue_emitf(r->u, EV_ERROR, "/forget --fit: %s", k3_errmsg());
        return;
    }
    ue_send_history(r->u, r->c);
    ue_emitf(r->u, EV_INFO,
             "dropped the %d oldest exchange%s (%d messages); the conversation now needs %d of %d tokens",
             fi.drop, fi.drop == 1 ? "" : "s", fi.dropped_msgs, fi.used_after, fi.capacity);
    ue_conv_autosave(r->u, r->c);
}

static void real_cmd(ue *u, void *self, const ui_ev *c) {
    real *r     = self;
    int   done  = 1;
    int   aban0 = k3_conv_abandoned_count(r->c); /* an /edit's branch: see turn */
    if (c->type == EV_CMD_FORGET && c->text && !strcmp(c->text, "--fit"))
        forget_fit(r);
    else if ((done = ue_conv_cmd(u, r->c, c)) == 2) /* /undo /forget /clear /system /save /load /export */
        report_fit(r);
    else if (done == 3)
        r->fit_pending = 1;
    if (done) {
        ui_ev e = {.type = EV_STATS, .i = 1}; /* the context figure follows the edit */
        fill_common(r, &e.st);
        ev_push(u->out, &e);
        return;
    }
    switch (c->type) {
    case EV_CMD_EDIT:
    case EV_CMD_SEND:
        if (k3_conv_add(r->c, K3_ROLE_USER, c->text, NULL) != K3_OK) {
            ue_emitf(u, EV_ERROR, "%s", k3_errmsg());
            ui_ev d = {.type = EV_DONE, .i = UE_DONE_ERROR};
            ev_push(u->out, &d);
            break;
        }
        turn(r, &c->gen, c->type == EV_CMD_EDIT && k3_conv_abandoned_count(r->c) > aban0 ? EV_CMD_EDIT : 0);
        break;
    case EV_CMD_RETRY: {
        int n = k3_conv_retry_last(r->c); /* the old answer stays, abandoned (k3.h) */
        if (n <= 0) {
            ue_emitf(u, EV_ERROR, "/retry: %s", n < 0 ? k3_errmsg() : "there is no answer to regenerate");
            ui_ev d = {.type = EV_DONE, .i = UE_DONE_ERROR};
            ev_push(u->out, &d);
            break;
        }
        turn(r, &c->gen, EV_CMD_RETRY);
        break;
    }
    case EV_CMD_REPLAY:
        replay(r, c->text, &c->gen);
        break;
    case EV_CMD_SETTINGS: { /* what changes the rendered prompt changes the context figure */
        k3_conv_settings was, now;
        k3_conv_get_settings(r->c, &was);
        apply_gen(r, &c->gen);
        k3_conv_get_settings(r->c, &now);
        if (was.think != now.think || strcmp(was.effort, now.effort)) {
            ui_ev e = {.type = EV_STATS, .i = 1};
            fill_common(r, &e.st);
            ev_push(u->out, &e);
        }
        if (r->fit_pending) { /* a load's report, measured as the next turn will be */
            r->fit_pending = 0;
            report_fit(r);
        }
        break;
    }
    case EV_CMD_EXPERTS:
        apply_experts(r); /* unless a turn applied it already */
        /* FALLTHROUGH */
    case EV_CMD_STATS: {
        ui_ev e = {.type = EV_STATS, .i = 1};
        fill_common(r, &e.st);
        ev_push(u->out, &e);
        ue_emitf(u, EV_INFO, "%s", r->info.fit);
        break;
    }
    default:
        break;
    }
}

static int real_open(ue *u, void **self, char *err, size_t errn) {
    real     *r = calloc(1, sizeof *r);
    k3_params p;
    if (!r)
        return -1;
    r->u = u;
    pthread_mutex_init(&r->mu, NULL);
    atomic_init(&r->experts_pending, NAN);
    if (k3_params_default(&p) != K3_OK) {
        snprintf(err, errn, "%s", k3_errmsg());
        goto fail;
    }
    p.progress    = on_progress;
    p.estimate    = on_estimate; /* shown while the model loads */
    p.progress_ud = r;
    if (k3_model_open(u->opts->dir, &p, &r->m) != K3_OK) {
        snprintf(err, errn, "%s", k3_errmsg());
        goto fail;
    }
    k3_model_get_info(r->m, &r->info);
    if (k3_session_new(r->m, &r->s) != K3_OK || !(r->c = k3_conv_new())) {
        snprintf(err, errn, "%s", k3_errmsg()[0] ? k3_errmsg() : "out of memory");
        goto fail;
    }
    k3_conv_set_model(r->c, u->opts->dir, &p);
    ue_conv_autosave_enable(u, r->c);
    const char *slash = strrchr(u->opts->dir, '/');
    const char *name  = slash && slash[1] ? slash + 1 : u->opts->dir;
    k3_buf      desc  = {0}; /* the name whole: the status bar fits it to its width (txt_fit) */
    k3_buf_printf(&desc, "%s · %d layers · %.1f GB", name, r->info.n_layers,
                  (double)r->info.bytes_resident / 1e9);
    ui_ev e = {.type  = EV_READY,
               .text  = desc.p ? desc.p : (char *)(uintptr_t) "model",
               .text2 = (char *)(uintptr_t)r->info.fit_brief,
               .a     = strlen(name),
               .i     = r->info.max_ctx};
    e.gen   = (ue_gen){.temp = r->info.gen_temp, .top_p = r->info.gen_top_p, .think = 1, .effort = 2};
    fill_common(r, &e.st); /* the empty conversation's context comes with the model: no frame shows 0 */
    ev_push(u->out, &e);
    free(desc.p);
    ui_ev ctx = {.type = EV_STATS, .i = 1}; /* the empty conversation's context, as after /clear */
    fill_common(r, &ctx.st);
    ev_push(u->out, &ctx);
    if (!chat_verbose()) /* what the memory fit chose and why (K3_VERBOSE: the engine's log says it) */
        ue_emitf(u, EV_INFO, "%s", r->info.fit);
    *self = r;
    return 0;
fail:
    if (r->s)
        k3_session_free(r->s);
    if (r->m)
        k3_model_free(r->m);
    free(r);
    return -1;
}

static void real_cancel(void *self) {
    real *r = self;
    k3_conv_cancel(r->c);
    pthread_mutex_lock(&r->mu);
    if (r->replaying)
        k3_conv_cancel(r->replaying);
    pthread_mutex_unlock(&r->mu);
}

static void real_experts(void *self, double gb) {
    real *r = self;
    atomic_store(&r->experts_pending, gb);
}

static void real_close(void *self) {
    real *r = self;
    k3_conv_drop_cache(r->c);
    k3_conv_free(r->c);
    k3_session_free(r->s);
    k3_model_free(r->m);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

const ue_backend ue_backend_real = {"k3", real_open, real_cmd, real_cancel, real_experts, real_close};
