/* tui.c: k3chat's full-screen chat (ncursesw).
 *
 * DESIGN
 * One UI thread owns curses and libedit; the engine runs on a worker (engine.h) and talks to us
 * only through the event queue, whose wake-up pipe sits next to stdin in our epoll set. State is
 * kept apart from drawing (htop/tmux style): event and key handlers change the state in `tui`
 * and set dirty bits; tui_render() runs once per loop iteration and redraws the dirty regions, then
 * one doupdate(). While tokens stream, redraws are coalesced to at most one per FRAME_S.
 * Drawing lives in tui-draw.c, the state both halves share in tui-int.h.
 *
 * Screen (top to bottom):
 *     conversation   earlier turns; each assistant turn's reasoning folded into one line
 *                    "▸ thought for 12.3 s · 412 tokens" (F2 or a click unfolds it)
 *     think pane     the current turn's reasoning, streaming (hidden by /show-thinking off)
 *     response pane  the current turn's answer, streaming
 *     status bar     model, think mode/effort, temperature, tok/s, TTFT, context, experts, memory
 *     input          libedit's line (input.c), growing to a few rows for multi-line messages
 * The think and response panes exist while a turn streams; when it ends the turn joins the
 * conversation pane. A terminal smaller than MIN_COLS x MIN_ROWS gets a notice instead.
 *
 * Terminal features used: wide-character curses (setcchar/wadd_wch), keypad keys, KEY_RESIZE,
 * mouse events (wheel = BUTTON4/BUTTON5, toggled with F3), bracketed paste (ESC[?2004h, with
 * ESC[200~/ESC[201~ defined as keys), use_default_colors, A_DIM/A_BOLD/A_REVERSE. Written
 * around curses after doupdate(): OSC 8 links (tui-md.c) and clusters of several emoji
 * (tui-emoji.c, with its start-up probe: ESC[6n after each sample, ESC[c).
 */

#include "tui-int.h"
#include "tui.h"

#include <errno.h>
#include <term.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>

static volatile sig_atomic_t got_term, got_tstp, got_cont; /* got_term: the signal's number */
static void                  on_term(int sig) {
                     got_term = sig;
}
/* SIGTSTP from outside (kill -TSTP; Ctrl-Z itself is a key in raw mode): suspend from the loop.
 * Having our own handler also keeps curses from installing its one, which doupdate() would
 * switch off and on again with two sigaction calls in every frame. */
static void on_tstp(int sig) {
    (void)sig;
    got_tstp = 1;
}

/* SIGCONT after a SIGSTOP, which cannot be caught (kill -STOP, a debugger): the shell wrote its
 * job line and prompt over the chat and may have reset the terminal; the loop puts our modes back
 * and repaints (the shell's lines stayed on the screen until something redrew those rows). */
static void on_cont(int sig) {
    (void)sig;
    got_cont = 1;
}

/* After a stop: the terminal in our modes again, everything drawn anew. */
static void resume(tui *t) {
    got_cont = 0;
    reset_prog_mode();
    printf("\033[?2004h");
    fflush(stdout);
    clearok(curscr, TRUE);
    t->dirty = DIRTY_ALL;
}

/* Stop the process (the shell's job control) with the terminal as it was before us; redraw
 * everything on SIGCONT. */
static void suspend(tui *t) {
    struct sigaction dfl, ours;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    got_tstp       = 0;
    def_prog_mode();
    /* bracketed paste is ours, not curses': off for the shell (a shell that does not ask for it,
     * dash, got every paste wrapped in ESC[200~ ... ESC[201~), on again when we are back */
    printf("\033[?2004l");
    fflush(stdout);
    endwin();
    sigaction(SIGTSTP, &dfl, &ours);
    kill(getpid(), SIGTSTP); /* stops here until SIGCONT */
    sigaction(SIGTSTP, &ours, NULL);
    resume(t);
}

static entry *add_entry(tui *t, int role, const char *text) {
    entry *ents = k3_grow(t->ents, &t->cap_ents, (size_t)t->n_ents + 1, sizeof *ents, 32);
    if (!ents)
        return NULL;
    t->ents  = ents;
    entry *e = &t->ents[t->n_ents++];
    memset(e, 0, sizeof *e);
    e->role = role;
    if (text) { /* its size, not a growing buffer's: a loaded transcript has many short ones */
        size_t n  = strlen(text);
        e->text.p = malloc(n + 1);
        if (e->text.p) {
            memcpy(e->text.p, text, n + 1);
            e->text.n   = n;
            e->text.cap = n + 1;
        }
    }
    t->dl_valid = 0;
    t->dirty |= DIRTY_HIST;
    return e;
}

static void free_entry(tui *t, entry *e) {
    tui_md_entry_free(t, e);
    free(e->text.p);
    free(e->think.p);
    free(e->summary);
}

/* Remove entry k alone: the notices after it stay (an error raised as a turn starts follows
 * the turn's empty entry). */
static void remove_entry(tui *t, int k) {
    free_entry(t, &t->ents[k]);
    memmove(t->ents + k, t->ents + k + 1, (size_t)(t->n_ents - k - 1) * sizeof *t->ents);
    t->n_ents--;
    t->dl_valid = 0;
    t->dirty |= DIRTY_HIST;
}

static void drop_entries(tui *t, int keep) {
    while (t->n_ents > keep)
        free_entry(t, &t->ents[--t->n_ents]);
    t->dl_valid = 0;
    t->dirty |= DIRTY_HIST;
}

static void notice(tui *t, int role, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A notice quotes outside text often (a server's error, a transcript's line, a file's name): its
 * control characters show as txt_escape's \xHH, as line mode's txt_term_printf shows them; drawn
 * raw, the drawing left them out and '\x1B]52;...\x07' in a bad transcript read ']52;...'. */
static void notice(tui *t, int role, const char *fmt, ...) {
    char    msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    k3_buf e = {0};
    txt_escape(&e, NULL, msg, strlen(msg));
    if (!e.oom && !k3_buf_add(&e, "", 1))
        add_entry(t, role, e.p);
    else
        add_entry(t, role, msg);
    free(e.p);
    t->scroll = 0;
}

/* ==== engine events ========================================================= */

static void show_stats(tui *t);

static int last_user(tui *t) {
    for (int k = t->n_ents - 1; k >= 0; k--)
        if (t->ents[k].role == UE_ROLE_USER)
            return k;
    return -1;
}

static void start_turn(tui *t) {
    entry *a = add_entry(t, UE_ROLE_ASSISTANT, NULL);
    if (!a)
        return;
    t->cur       = t->n_ents - 1;
    t->streaming = 1;
    t->turn_t0   = ev_now();
    t->think_t0 = t->think_t1 = 0;
    t->scroll                 = 0;
    memset(&t->tc_think, 0, sizeof t->tc_think);
    memset(&t->tc_resp, 0, sizeof t->tc_resp);
    t->ms_resp.base = NULL; /* a new text: md_stream starts over */
    tui_layout(t);
}

static void end_turn(tui *t, int status, const ue_stats *st) {
    t->quit_warned = 0; /* the answer is complete: a quit goes ahead */
    t->stop_t      = 0;
    t->stop_told   = 0;
    if (t->cur >= 0 && t->cur < t->n_ents) {
        entry *e  = &t->ents[t->cur];
        e->status = status;
        if (st && st->n_think > 0)
            e->n_think = st->n_think;
        if (st && st->think_s > 0)
            e->think_s = st->think_s;
        else if (t->think_t0 > 0)
            e->think_s = (t->think_t1 > 0 ? t->think_t1 : ev_now()) - t->think_t0;
        if (status == UE_DONE_ERROR && !e->text.n && !e->think.n)
            remove_entry(t, t->cur); /* nothing to keep; the error notice after it stays */
    }
    t->streaming = 0;
    t->cur       = -1;
    t->dl_valid  = 0;
    tui_layout(t);
}

/* The UI thread's user and system CPU seconds so far. */
static void thread_usage(double ru[2]) {
    struct rusage r;
    if (getrusage(RUSAGE_THREAD, &r) != 0)
        memset(&r, 0, sizeof r);
    ru[0] = (double)r.ru_utime.tv_sec + (double)r.ru_utime.tv_usec * 1e-6;
    ru[1] = (double)r.ru_stime.tv_sec + (double)r.ru_stime.tv_usec * 1e-6;
}

/* Loading progress: what is read, how far, and the rate since the first report. */
static void on_progress(tui *t, const ui_ev *e) {
    double now = ev_now();
    if (t->load_t0 == 0)
        t->load_t0 = now;
    else if (now > t->load_t0)
        t->load_rate = (double)e->a / (now - t->load_t0);
    snprintf(t->load_what, sizeof t->load_what, "%s", e->text ? e->text : "");
    t->load_done  = e->a;
    t->load_total = e->b;
    t->dirty |= DIRTY_HIST | DIRTY_STATUS;
}

/* A token of the answer (or of its thinking) appended to the streaming entry. */
static void on_token(tui *t, const ui_ev *e) {
    if (t->pf_on) { /* the prefill is over */
        t->pf_on = 0;
        t->dirty |= DIRTY_STATUS;
    }
    if (t->cur < 0 || !t->streaming)
        return;
    if (t->turn_ru0[0] == 0 && t->turn_ru0[1] == 0)
        thread_usage(t->turn_ru0);
    if (t->tok_t_pending == 0)
        t->tok_t_pending = e->t;
    if (e->ch == EV_CH_THINK) {
        if (t->think_t0 == 0)
            t->think_t0 = e->t;
        txt_buf_add(&t->ents[t->cur].think, e->text, strlen(e->text));
        t->ents[t->cur].n_think += e->i;
    } else {
        if (t->think_t0 > 0 && t->think_t1 == 0)
            t->think_t1 = e->t;
        txt_buf_add(&t->ents[t->cur].text, e->text, strlen(e->text));
    }
    t->dirty |= e->ch == EV_CH_THINK ? DIRTY_THINK : DIRTY_RESP | DIRTY_THINK * (t->think_t1 == e->t);
    if (t->think_h == 0 && t->ents[t->cur].think.n && t->cs.show_thinking)
        tui_layout(t);
}

/* Figures for the status line; a partial update (e->i) has the context, cache and memory only. */
static void on_stats(tui *t, const ui_ev *e) {
    if (e->i) { /* partial: context, cache and memory only */
        t->st.ctx_used     = e->st.ctx_used;
        t->st.ctx_max      = e->st.ctx_max;
        t->st.expert_hit   = e->st.expert_hit;
        t->st.expert_gb    = e->st.expert_gb;
        t->st.mem_gb       = e->st.mem_gb;
        t->st.vk_used_gb   = e->st.vk_used_gb;
        t->st.vk_budget_gb = e->st.vk_budget_gb;
        t->st.vk_hits      = e->st.vk_hits;
        t->st.kernels      = e->st.kernels;
    } else {
        t->st = e->st;
    }
    t->dirty |= DIRTY_STATUS;
}

/* The end of a turn (or of a replay, or of a turn /undo dropped already): its figures kept. */
static void on_done(tui *t, const ui_ev *e) {
    t->pf_on = 0;
    if (t->turn_ru0[0] > 0 || t->turn_ru0[1] > 0) {
        double ru[2];
        thread_usage(ru);
        t->turn_user += ru[0] - t->turn_ru0[0];
        t->turn_sys += ru[1] - t->turn_ru0[1];
        t->turn_ru0[0] = t->turn_ru0[1] = 0;
    }
    if (!e->i || e->st.ctx_max)
        t->st = e->st;
    if (e->st.tok_s > 0 && e->st.n_response + e->st.n_think > 0)
        t->decode_wall += (e->st.n_response + e->st.n_think) / e->st.tok_s;
    if (t->replaying) {
        t->replaying   = 0;
        t->quit_warned = 0;
        return;
    }
    if (t->ignore_done) {
        t->ignore_done = 0;
        return;
    }
    end_turn(t, e->i, &e->st);
}

/* An /undo done by the worker: the last user turn and what followed it dropped. */
static void on_undo(tui *t, const ui_ev *e) {
    if (t->undo_pending)
        return;         /* done already */
    if (t->streaming) { /* the turn failed before it began: its entry goes too */
        int k = last_user(t);
        if (k >= 0 && inp_empty(t->in) && t->ents[k].text.p)
            inp_insert(t->in, t->ents[k].text.p); /* to send again after /clear or /forget */
        t->streaming   = 0;
        t->cur         = -1;
        t->ignore_done = 1;
        tui_layout(t);
    }
    int k = t->n_ents;
    while (k > 0 && t->ents[k - 1].role != UE_ROLE_USER)
        k--;
    if (k > 0)
        drop_entries(t, k - 1);
}

static void on_event(tui *t, ui_ev *e) {
    switch (e->type) {
    case EV_PROGRESS:
        on_progress(t, e);
        break;
    case EV_READY:
        t->ready = 1;
        snprintf(t->model, sizeof t->model, "%s", e->text ? e->text : "model");
        t->model[txt_complete(t->model, strlen(t->model))] = 0; /* a cut leaves no part of a character */
        t->model_name = e->a && e->a < strlen(t->model) ? (size_t)e->a : strlen(t->model);
        snprintf(t->fit, sizeof t->fit, "%s", e->text2 ? e->text2 : "");
        /* the figure and its capacity together: a bar drawn before the next EV_STATS shows the
         * conversation's real context (the engine's EV_READY fills st.ctx_used; the mock's and a
         * remote server's empty conversation count 0) */
        t->st.ctx_used = e->st.ctx_used;
        t->st.ctx_max  = e->i;
        chat_settings_model(&t->cs, &e->gen);
        for (int i = 0; i < t->n_ents; i++)
            t->ents[i].queued = 0;
        t->dl_valid = 0;
        t->dirty |= DIRTY_ALL;
        break;
    case EV_FATAL:
        t->fatal = 1;
        if (t->streaming)
            end_turn(t, UE_DONE_ERROR, NULL);
        for (int i = 0; i < t->n_ents; i++)
            t->ents[i].queued = 0;
        free(t->fatal_msg);
        t->fatal_msg = strdup(e->text ? e->text : "the engine failed");
        notice(t, ROLE_ERROR, "%s", e->text ? e->text : "the engine failed");
        t->dirty |= DIRTY_ALL;
        break;
    case EV_PREFILL:
        t->pf_on    = t->streaming;
        t->pf_done  = e->a;
        t->pf_total = e->b;
        t->pf_bytes = e->x;
        t->dirty |= DIRTY_STATUS;
        break;
    case EV_TURN:
        t->turn_t0        = ev_now();
        t->unsaved_warned = 0; /* a new turn: ask again before dropping it */
        break;
    case EV_TOKEN:
        on_token(t, e);
        break;
    case EV_STATS:
        on_stats(t, e);
        break;
    case EV_DONE:
        on_done(t, e);
        break;
    case EV_ERROR:
    case EV_INFO:
        /* While a /clear is on its way to the worker, its notices are about the conversation
         * the display cleared already: an info is dropped, an error is kept, saying so. */
        if (t->clear_pending && e->type == EV_INFO)
            break;
        notice(t, e->type == EV_ERROR ? ROLE_ERROR : ROLE_INFO, "%s%s",
               t->clear_pending ? "before /clear: " : "",
               e->text               ? e->text
               : e->type == EV_ERROR ? "error"
                                     : "");
        break;
    case EV_SETTINGS: {
        char msg[300];
        chat_settings_loaded(&t->cs, &e->gen, msg, sizeof msg);
        ue_settings(t->eng, &t->cs.gen); /* the options that won over the transcript's */
        notice(t, ROLE_INFO, "%s", msg);
        t->dirty |= DIRTY_STATUS;
        break;
    }
    case EV_ACK:
        if (e->i == EV_CMD_CLEAR && t->clear_pending > 0)
            t->clear_pending--;
        else if (e->i == EV_CMD_UNDO && t->undo_pending > 0)
            t->undo_pending--;
        else if ((e->i == EV_CMD_LOAD || e->i == EV_CMD_FORGET) && t->load_pending > 0)
            t->load_pending--;
        else if (e->i == EV_CMD_STATS && t->stats_pending > 0) {
            t->stats_pending--;
            show_stats(t);
        }
        break;
    case EV_RESET:
        if (t->clear_pending)
            break; /* the display was cleared already */
        if (t->streaming)
            end_turn(t, UE_DONE_CANCELLED, NULL);
        drop_entries(t, 0);
        t->scroll = 0;
        break;
    case EV_MSG: {
        entry *x = add_entry(t, e->i, e->text);
        if (x && e->text2)
            txt_buf_add(&x->think, e->text2, strlen(e->text2));
        if (x) { /* a loaded or replayed turn keeps its figures and its marker */
            x->status  = e->ch;
            x->think_s = e->st.think_s > 0 ? e->st.think_s : -1;
            x->n_think = e->st.n_think;
        }
        break;
    }
    case EV_UNDO:
        on_undo(t, e);
        break;
    case EV_STOPPED: /* after ue_stop: the quit goes ahead */
        t->stopped = t->quit = 1;
        break;
    default:
        break;
    }
}

static void pump_events(tui *t, int readable) {
    ui_ev e;
    ev_drain_fd(t->q, readable);
    while (ev_pop(t->q, &e)) {
        on_event(t, &e);
        ev_free(&e);
    }
}

/* ==== commands and messages ================================================= */

/* A message after the engine failed to start (EV_FATAL): what failed, said again (its notice
 * may have scrolled away; "no model is loaded" was all it said, after an --endpoint's or the
 * mock's failure too) and what to do; the message goes back to the input line. */
static void fatal_refuse(tui *t, const char *line) {
    const char *be = t->eng->be->name, *why = t->fatal_msg ? t->fatal_msg : "the engine failed";
    int         remote = !strcmp(be, "remote"), mock = !strcmp(be, "mock");
    notice(t, ROLE_ERROR,
           "nothing can answer: %s did not start (%s). Your message is back in the input line; to go "
           "on, quit (Ctrl-D) and start k3chat again %s",
           remote ? "the --endpoint connection" /* not its URL, which may hold a password */
           : mock ? "the mock engine (K3_MOCK)"
                  : "the model",
           why,
           remote ? "once the setting or the server named is right"
           : mock ? "with a script that reads"
                  : "on a model that loads (k3chat --inspect DIR names a checkpoint's first error)");
    inp_insert(t->in, line);
}

static void send_message(tui *t, const char *text) {
    int edit        = t->edit_pending && last_user(t) >= 0;
    t->edit_pending = 0;
    if (edit)
        drop_entries(t, last_user(t)); /* the engine keeps them as an abandoned branch */
    entry *u = add_entry(t, UE_ROLE_USER, text);
    if (u)
        u->queued = !t->ready;
    start_turn(t);
    if (edit)
        ue_edit(t->eng, text, &t->cs.gen);
    else
        ue_send(t->eng, text, &t->cs.gen);
}

static void apply_theme(tui *t, const char *name) {
    thm_spec th[THM_N];
    char     err[512];
    if (thm_load(name, th, err, sizeof err) != 0) {
        notice(t, ROLE_ERROR, "/theme: %s", err);
        return;
    }
    memcpy(t->theme, th, sizeof th);
    snprintf(t->theme_name, sizeof t->theme_name, "%.*s", THM_NAME_MAX, name); /* thm_load refused longer */
    thm_apply(t->theme);
    clearok(curscr, TRUE);
    t->dirty = DIRTY_ALL;
}

/* /stats, once the worker has answered ue_stats_req (fresh context, cache and memory figures).
 * Two-column lines, so a narrow screen wraps each under its value. */
static void show_stats(tui *t) {
    const ue_stats *s = &t->st;
    char            set[256], turn[256], vk[160] = "";
    chat_settings_str(&t->cs, set, sizeof set);
    if (s->n_think + s->n_response == 0 && s->tok_s <= 0)
        snprintf(turn, sizeof turn, "none yet");
    else
        snprintf(turn, sizeof turn,
                 "%.1f tok/s decode, TTFT %.2f s, %d prompt tokens processed, %d reasoning + %d "
                 "answer tokens, %.1f s thinking",
                 s->tok_s > 0 ? s->tok_s : 0, s->ttft_s > 0 ? s->ttft_s : 0, s->n_prefill, s->n_think,
                 s->n_response, s->think_s > 0 ? s->think_s : 0);
    if (s->vk_budget_gb > 0)
        snprintf(vk, sizeof vk, "\n  Vulkan tier  %.2f of %.2f GB, %ld experts computed on the device",
                 s->vk_used_gb, s->vk_budget_gb, s->vk_hits);
    notice(t, ROLE_INFO,
           "  model        %s\n  memory fit   %s\n  settings     %s\n  last turn    %s\n  context      %d of "
           "%d tokens\n"
           "  experts      %.0f%% cache hits, budget %.1f GB%s\n  memory       %.2f GB resident\n  CPU "
           "kernels  %s\n"
           "  UI           %ld frames with new tokens, token-to-screen latency mean %.2f ms, max %.2f ms",
           t->ready ? t->model : "(not loaded)", t->fit[0] ? t->fit : "(none: not this engine)", set, turn,
           s->ctx_used, s->ctx_max, s->expert_hit >= 0 ? s->expert_hit * 100 : 0,
           s->expert_gb >= 0 ? s->expert_gb : 0, vk, s->mem_gb, s->kernels ? s->kernels : "(unknown)",
           t->lat_n, t->lat_n ? t->lat_sum / (double)t->lat_n * 1e3 : 0, t->lat_max * 1e3);
}

/* Quitting (or /clear) would drop turns that are on no disk (the autosave failed and no /save
 * since): the first request says so and is refused, the same request again goes ahead. */
static int unsaved_refuse(tui *t, int what) {
    char msg[256];
    if (!ue_unsaved_refuse(t->eng, &t->unsaved_warned, what, msg, sizeof msg))
        return 0;
    notice(t, ROLE_ERROR, "%s", msg);
    return 1;
}

/* Quitting waits for the worker to end, which it does at its next check of the cancel flag
 * (a token, a prefill step, a read's time limit). One blocked in a call that does not return
 * (a read from a hung file system, a server that does not answer) would hold the quit for
 * ever: after QUIT_TELL_S the wait is told, and a second request, or QUIT_GRACE_S, quits without
 * the worker (t->abandon: what the user saw of the answer goes to the autosave, ue_rescue). */
#define QUIT_TELL_S 0.5
#define QUIT_GRACE_S 10.0

static void begin_quit(tui *t) {
    t->quitting = ev_now();
    ue_stop(t->eng); /* EV_STOPPED ends the loop */
}

/* A quit (Ctrl-D, /quit) while an answer streams would cut it off: the first one says so and
 * waits, the same again stops it and quits (the autosave keeps it, interrupted). After a
 * Ctrl-C the user has given the answer up already: the quit goes ahead at once. */
static void request_quit(tui *t) {
    if (t->quitting) { /* asked again while the worker does not end: go without it */
        t->abandon = t->quit = 1;
        return;
    }
    if ((t->streaming || t->replaying) && !t->quit_warned && !t->stop_t) {
        t->quit_warned = 1;
        notice(t, ROLE_ERROR,
               "quit: an answer is still coming; Ctrl-D or /quit again stops it and quits, Ctrl-C stops it "
               "only");
        return;
    }
    if (!unsaved_refuse(t, UE_DROP_QUIT))
        begin_quit(t);
}

/* While quitting: tell the wait once it lasts, and give up on the worker after the grace. */
static void quit_tick(tui *t, double now) {
    if (!t->quitting || t->quit)
        return;
    if (now - t->quitting >= QUIT_GRACE_S)
        t->abandon = t->quit = 1;
    else if (now - t->quitting >= QUIT_TELL_S && !t->quit_told) {
        t->quit_told = 1;
        notice(
            t, ROLE_ERROR,
            "quitting: the engine has not stopped yet (it may be blocked in a read from a file system or a "
            "server that does not answer); Ctrl-C or Ctrl-D quits without waiting for it, as k3chat does "
            "by itself in %.0f s%s",
            QUIT_GRACE_S, t->streaming ? " (the answer so far is autosaved, marked interrupted)" : "");
    }
}

static void run_command(tui *t, const char *line) {
    cmd_result r;
    char       msg[1024];
    if (cmd_parse(line, &r) != 0) {
        notice(t, ROLE_ERROR, "%s", r.msg);
        return;
    }
    int conv_changing = r.id == CMD_CLEAR || r.id == CMD_RETRY || r.id == CMD_UNDO || r.id == CMD_LOAD ||
                        r.id == CMD_FORGET || r.id == CMD_REPLAY || r.id == CMD_EDIT;
    if (conv_changing && t->streaming) {
        notice(t, ROLE_ERROR, "/%s: a turn is in progress; stop it first with Ctrl-C", cmd_name(r.id));
        return;
    }
    int mrole;
    if (tui_md_command(t, &r, msg, sizeof msg, &mrole)) { /* /raw /copy */
        if (msg[0])
            notice(t, mrole, "%s", msg);
        return;
    }
    if (r.id == CMD_LOAD && unsaved_refuse(t, UE_DROP_LOAD))
        return;
    if (chat_apply(&t->cs, t->eng, &r, msg, sizeof msg)) {
        ue_settings(t->eng, &t->cs.gen); /* the context figure follows /think, /effort */
        if (r.id == CMD_REPLAY)
            t->replaying = 1;
        if (r.id == CMD_LOAD || r.id == CMD_FORGET) /* /forget --fit: history follows */
            t->load_pending++;
        if (msg[0])
            notice(t, ROLE_INFO, "%s", msg);
        if (r.id == CMD_SHOWTHINK)
            tui_layout(t);
        t->dirty |= DIRTY_ALL;
        return;
    }
    switch (r.id) {
    case CMD_HELP:
        if (r.arg[0]) {
            char u[128];
            notice(t, ROLE_INFO, "  %s  %s", cmd_usage((enum cmd_id)r.flag, u, sizeof u), /* as in /help */
                   cmd_help((enum cmd_id)r.flag));
        } else {
            notice(t, ROLE_INFO, "%s", chat_help_text());
        }
        break;
    case CMD_CLEAR:
        if (unsaved_refuse(t, UE_DROP_CLEAR))
            break;
        ue_clear(t->eng);
        t->clear_pending++;
        drop_entries(t, 0);
        t->scroll = 0;
        break;
    case CMD_RETRY: {
        int k = last_user(t);
        if (k < 0) {
            notice(t, ROLE_ERROR, "/retry: there is no answer to regenerate");
            break;
        }
        for (int i = t->n_ents - 1; i > k; i--) /* the answers go; notices after them stay */
            if (t->ents[i].role == UE_ROLE_ASSISTANT)
                remove_entry(t, i);
        start_turn(t);
        ue_retry(t->eng, &t->cs.gen);
        break;
    }
    case CMD_UNDO:
        if (last_user(t) < 0) {
            notice(t, ROLE_ERROR, "/undo: the conversation is empty");
            break;
        }
        ue_undo(t->eng);
        t->undo_pending++;
        if (t->ents[last_user(t)].text.p) /* no trace of it in the input history either */
            inp_history_drop(t->in, t->ents[last_user(t)].text.p);
        drop_entries(t, last_user(t));
        break;
    case CMD_FORGET:
        ue_forget(t->eng); /* the display follows the worker's EV_RESET + EV_MSG */
        t->load_pending++;
        break;
    case CMD_STATS:
        if (t->ready) { /* shown when the worker's figures arrive (EV_ACK) */
            ue_stats_req(t->eng);
            t->stats_pending++;
        } else {
            show_stats(t);
        }
        break;
    case CMD_EDIT: {
        int k = last_user(t);
        if (k < 0 || !t->ents[k].text.p) {
            notice(t, ROLE_ERROR, "/edit: there is no message of yours to edit");
            break;
        }
        inp_clear(t->in);
        inp_insert(t->in, t->ents[k].text.p);
        t->edit_pending = 1;
        inp_set_hint(
            t->in, "editing your last message: Enter sends it in place of the last exchange, Ctrl-C cancels");
        break;
    }
    case CMD_THEME:
        if (!r.arg[0]) {
            char list[512];
            thm_list(list, sizeof list);
            notice(t, ROLE_INFO, "theme %s; themes: %s", t->theme_name, list);
        } else {
            apply_theme(t, r.arg);
            if (!strcmp(t->theme_name, r.arg))
                notice(t, ROLE_INFO, "theme %s", r.arg);
        }
        break;
    case CMD_QUIT:
        request_quit(t);
        break;
    default:
        break;
    }
    t->dirty |= DIRTY_ALL;
}

static void submit(tui *t, char *line) {
    size_t n = strlen(line);
    if (n && line[n - 1] == '\\') {
        /* trailing backslash: continue on a new line */
        line[n - 1] = 0;
        inp_insert(t->in, line);
        inp_insert(t->in, "\n");
        return;
    }
    const char *p = line;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    if (!*p)
        return;
    if (t->quitting) {
        notice(t, ROLE_ERROR, "quitting: nothing more is sent; your line is back in the input line");
        inp_insert(t->in, line);
        return;
    }
    inp_history_add(t->in, line);
    if (p[0] == '/' && p[1] != '/') {
        run_command(t, p);
        return;
    }
    if (p[0] == '/')
        p++; /* "//text" sends "/text" */
    if (t->streaming || t->replaying || t->load_pending) {
        notice(t, ROLE_ERROR, "%s; your message is back in the input line",
               t->load_pending ? "a transcript is loading" : "a turn is in progress (Ctrl-C stops it)");
        inp_insert(t->in, line);
        return;
    }
    if (t->fatal) {
        fatal_refuse(t, line); /* as typed: "//x" sends "/x" */
        return;
    }
    send_message(t, p);
}

/* ==== keys ================================================================== */

static void set_mouse(tui *t, int on) {
    t->mouse = on;
    mousemask(on ? (ALL_MOUSE_EVENTS | REPORT_MOUSE_POSITION) : 0, NULL);
    t->dirty |= DIRTY_STATUS;
}

static void scroll_by(tui *t, int d) {
    t->scroll += d;
    if (t->scroll < 0)
        t->scroll = 0;
    t->dirty |= DIRTY_HIST | DIRTY_STATUS;
}

static void toggle_fold_all(tui *t) {
    int any = 0;
    for (int i = 0; i < t->n_ents; i++)
        any |= t->ents[i].role == UE_ROLE_ASSISTANT && t->ents[i].think.n && !t->ents[i].expanded;
    for (int i = 0; i < t->n_ents; i++)
        t->ents[i].expanded = any;
    t->dl_valid = 0;
    t->dirty |= DIRTY_HIST;
}

static void on_mouse(tui *t) {
    MEVENT m;
    if (getmouse(&m) != OK)
        return;
    if (m.bstate & BUTTON4_PRESSED)
        scroll_by(t, 3);
#ifdef BUTTON5_PRESSED
    else if (m.bstate & BUTTON5_PRESSED)
        scroll_by(t, -3);
#endif
    else if ((m.bstate & (BUTTON1_CLICKED | BUTTON1_PRESSED)) && m.y >= t->hist_y &&
             m.y < t->hist_y + t->hist_h) {
        int k = t->vis_first + (m.y - t->hist_y);
        if (t->dl_valid && k < t->n_dl && t->dl[k].fold == 1) {
            t->ents[t->dl[k].ent].expanded ^= 1;
            t->dl_valid = 0;
            t->dirty |= DIRTY_HIST;
        }
    }
}

/* A UTF-8 sequence's lead byte c: how many continuation bytes follow (0: c is invalid), the
 * code point's bits so far, and the range the first continuation byte must be in (RFC 3629). */
static int utf8_lead(unsigned c, unsigned *cp, unsigned *lo, unsigned *hi) {
    int need = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
    *cp      = c & (need == 1 ? 0x1f : need == 2 ? 0x0f : 0x07);
    *lo      = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    *hi      = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    return need;
}

/* Wait for the next key, handling engine events and drawing meanwhile. Returns the key and
 * whether it is a function key (KEY_*), or 0 when asked to quit. */
/* get_wch over getch, decoding UTF-8 here: curses' own decoder swallows the bytes after an
 * invalid one (as many as its buffer holds, the end-of-paste marker included). An invalid
 * sequence (maximal subpart) becomes U+FFFD and is counted in t->bad_utf8; the byte that
 * showed it invalid is read again. A sequence cut by the read waits up to 50 ms for the rest. */
static int read_wch(tui *t, wint_t *k) {
    int c = getch();
    if (c == ERR)
        return ERR;
    *k = (wint_t)c;
    if (c >= KEY_MIN)
        return KEY_CODE_YES;
    if (c < 0x80)
        return OK;
    unsigned cp, lo, hi;
    int      need = utf8_lead((unsigned)c, &cp, &lo, &hi);
    for (int i = 0; i < need; i++) {
        timeout(50);
        int b = getch();
        timeout(0);
        if (b == ERR || b < (int)lo || b > (int)hi) {
            if (b != ERR)
                ungetch(b);
            need = 0;
            break;
        }
        cp = cp << 6 | ((unsigned)b & 0x3f);
        lo = 0x80, hi = 0xBF;
    }
    if (!need) {
        t->bad_utf8++;
        cp = 0xFFFD;
    }
    *k = (wint_t)cp;
    return OK;
}

/* Tell the user once per paste or key that invalid UTF-8 became U+FFFD (chat_utf8_in's rule). */
static void report_bad_utf8(tui *t, const char *what) {
    if (!t->bad_utf8)
        return;
    notice(t, ROLE_ERROR, "%s: invalid UTF-8 (%d sequence%s) replaced with U+FFFD; k3chat reads UTF-8 text",
           what, t->bad_utf8, t->bad_utf8 == 1 ? "" : "s");
    t->bad_utf8 = 0;
}

static void paste_flush(tui *t) {
    t->paste_shown = ev_now();
    if (t->paste_buf.n) {
        inp_insert(t->in, t->paste_buf.p);
        t->paste_buf.n    = 0;
        t->paste_buf.p[0] = 0;
        t->dirty |= DIRTY_INPUT;
    }
}

/* One character of a paste (0: none); the text goes into the input line in large pieces. */
static void paste_char(tui *t, wint_t c) {
    char u[8];
    if (c) {
        utf8proc_ssize_t l = utf8proc_encode_char((utf8proc_int32_t)c, (utf8proc_uint8_t *)u);
        txt_buf_add(&t->paste_buf, u, (size_t)l);
    }
    if (t->paste_buf.n > 65536)
        paste_flush(t);
}

static void paste_end(tui *t) {
    t->paste     = 0;
    t->paste_raw = 0;
    paste_flush(t);
    report_bad_utf8(t, "the pasted text");
    t->dirty |= DIRTY_INPUT | DIRTY_STATUS;
}

/* A paste whose end marker never comes (a link or a multiplexer dropped it, a program wrote
 * ESC[200~ to the terminal alone) would take every later key as text, Enter included, for ever.
 * Once no byte has come for PASTE_IDLE_S the paste counts as ended: what came stays in the input
 * line as text, nothing is sent, and the notice says why keys act again. A terminal writes a
 * paste at once; a link that stalls longer mid-paste turns the paste's rest into typed keys, so
 * the wait is long against a stall and short against a user's patience. */
#define PASTE_IDLE_S 2.0
static void paste_lost(tui *t) {
    paste_end(t);
    notice(
        t, ROLE_ERROR,
        "paste: its end marker (ESC[201~) did not come within %.0f s of the last pasted byte; the paste is "
        "taken as ended, its text is in the input line, and keys act as keys again",
        PASTE_IDLE_S);
}

/* A bracketed paste read in blocks. Curses reads the terminal one byte per read() (two thirds
 * of a 2 MB paste's CPU time went there); between ESC[200~ and ESC[201~ the UI reads stdin
 * itself, PASTE_BLOCK bytes at a time, and takes them as read_wch and on_key would have: UTF-8
 * with U+FFFD for an invalid sequence, CR and keypad Enter as newlines, other keys dropped, the
 * keys found in curses' own table (key_defined) as curses finds them. It starts only when curses
 * has just returned ESC[200~, when curses holds nothing read ahead (it reads no further than a
 * key's last byte). What follows the end marker in the same block goes back to curses in order
 * (ungetch), decoded into keys here, as ungetch'd bytes are not decoded again; a block is small
 * enough for curses' queue (137 keys) to take all of it. */
enum { PASTE_BLOCK = 96, PASTE_KEY_MAX = 16 };

/* Which bytes are text and which begin a key in curses' table (0 / nonzero), for key_at. */
static void paste_keys_init(tui *t) {
    for (int b = 1; b < 256; b++) {
        char s[2]  = {(char)b, 0};
        t->solo[b] = (signed char)(key_defined(s) != 0);
    }
}

/* The key curses reads at b[0,n) and its length in *len (kgetch's rule: the longest match
 * is not looked for, the first defined one is taken); 0 with *len 1 where b[0] is a byte of its
 * own; -1 where b ends before it is known. */
static int key_at(const unsigned char *b, size_t n, size_t *len) {
    char s[PASTE_KEY_MAX + 1];
    *len = 1;
    for (size_t l = 1; l <= n && l <= PASTE_KEY_MAX && b[l - 1]; l++) {
        s[l - 1] = (char)b[l - 1];
        s[l]     = 0;
        int k    = key_defined(s);
        if (k > 0)
            *len = l;
        if (k >= 0)
            return k;
        if (l == n)
            return -1;
    }
    return 0;
}

/* A mouse report at b[0,n) whose key (ESC[< for SGR 1006, ESC[M for X10) curses has matched:
 * 1 with the event in *m and the report's length in *len, -1 when b ends before the report does,
 * 0 when the bytes are no report (they stay keys). Curses decodes the reports it reads itself;
 * one read with a paste's end is ours to hand back (ungetmouse), as ungetch'd bytes are not
 * decoded again. Buttons as curses has them: 1-3, the wheel as 4 and 5 (64 + 0/1), a motion
 * (32) with REPORT_MOUSE_POSITION; an X10 release (3) does not say which button: button 1's. */
static int mouse_report(const unsigned char *b, size_t n, size_t *len, MEVENT *m) {
    unsigned v[3] = {0, 0, 0};
    int      rel  = 0;
    size_t   i    = 3;
    if (b[2] == 'M') { /* X10: three bytes, each value + 32 */
        if (n < 6)
            return -1;
        for (int k = 0; k < 3; k++)
            v[k] = b[3 + k] >= 32 ? b[3 + k] - 32u : 0;
        if (v[1] < 1 || v[2] < 1)
            return 0;
        rel = (v[0] & 67) == 3;
        i   = 6;
    } else { /* SGR: digits ; digits ; digits, then M (press) or m (release) */
        for (int k = 0; k < 3; k++, i++) {
            size_t d = i;
            for (; i < n && b[i] >= '0' && b[i] <= '9' && v[k] < 100000; i++)
                v[k] = v[k] * 10 + (b[i] - '0');
            if (i == n)
                return -1;
            if (i == d || b[i] != (k < 2 ? ';' : b[i] == 'm' ? 'm' : 'M'))
                return 0;
        }
        rel = b[i - 1] == 'm';
    }
    int btn = (v[0] & 64 ? 4 : 1) + (int)(v[0] & 3);
    if (btn > 5 || v[1] < 1 || v[2] < 1)
        return 0;
    memset(m, 0, sizeof *m);
    m->x      = (int)v[1] - 1;
    m->y      = (int)v[2] - 1;
    m->bstate = (v[0] & 32 ? REPORT_MOUSE_POSITION
                 : rel     ? NCURSES_MOUSE_MASK(rel && b[2] == 'M' ? 1 : btn, NCURSES_BUTTON_RELEASED)
                           : NCURSES_MOUSE_MASK(btn, NCURSES_BUTTON_PRESSED)) |
                (v[0] & 4 ? BUTTON_SHIFT : 0) | (v[0] & 8 ? BUTTON_ALT : 0) | (v[0] & 16 ? BUTTON_CTRL : 0);
    *len = i;
    return 1;
}

/* The paste ended; rest[0,n) followed it in the same read (the buffer holds PASTE_KEY_MAX more
 * bytes). Its keys go back to curses, in order, up to a next paste's start; that paste's text is
 * kept for its own paste_read. A key or mouse report cut at the end is completed from stdin as
 * curses would. Mouse reports go back as events (up to curses' queue of 8 events; ungetch and
 * ungetmouse are both last in, first out, so both are pushed from the last key back). */
static void paste_done(tui *t, unsigned char *rest, size_t n) {
    paste_end(t);
    int    keys[PASTE_BLOCK + PASTE_KEY_MAX + 1];
    MEVENT mev[8];
    int    mat[PASTE_BLOCK + PASTE_KEY_MAX + 1]; /* keys[j]'s event in mev, or -1 */
    size_t nk = 0, nm = 0, cap = n + PASTE_KEY_MAX;
    for (size_t i = 0; i < n;) {
        size_t len = 1, rlen = 0;
        MEVENT me;
        int    k  = t->solo[rest[i]] ? key_at(rest + i, n - i, &len) : 0;
        int    mr = k == KEY_MOUSE ? mouse_report(rest + i, n - i, &rlen, &me) : 0;
        if (k < 0 || mr < 0) {
            struct pollfd p = {0, POLLIN, 0};
            if (n < cap && poll(&p, 1, get_escdelay()) > 0 && read(0, rest + n, 1) == 1) {
                n++;
                continue;
            }
            k = 0, len = 1, mr = 0; /* not to come: the byte alone */
        }
        if (k == KEY_PASTE_BEGIN) {
            mat[nk]    = -1;
            keys[nk++] = k;
            memcpy(t->paste_carry, rest + i + len, n - i - len);
            t->n_carry = (int)(n - i - len);
            break;
        }
        if (mr > 0) {
            if (nm < 8) { /* more than curses can queue: dropped */
                mev[nm]    = me;
                mat[nk]    = (int)nm++;
                keys[nk++] = KEY_MOUSE;
            }
            i += rlen;
            continue;
        }
        if (k == KEY_MOUSE)
            k = 0, len = 1; /* no report after all: its bytes are keys */
        mat[nk]    = -1;
        keys[nk++] = k ? k : rest[i];
        i += len;
    }
    while (nk--)
        if (mat[nk] >= 0)
            ungetmouse(&mev[mat[nk]]);
        else
            ungetch(keys[nk]);
}

/* Takes b[0,n) as paste text. Returns how many bytes at its end wait for the next read (a cut
 * key or UTF-8 sequence; none when final: a sequence still cut is invalid, as read_wch has it
 * after its wait, and a cut key its first byte, as curses has it). May end the paste. */
static size_t paste_block(tui *t, unsigned char *b, size_t n, int final) {
    for (size_t i = 0; i < n;) {
        unsigned c = b[i];
        if (t->solo[c]) {
            size_t len;
            int    k = key_at(b + i, n - i, &len);
            if (k < 0 && !final)
                return n - i;
            if (k == KEY_PASTE_END) {
                paste_done(t, b + i + len, n - i - len);
                return 0;
            }
            paste_char(t, k > 0 ? (k == KEY_ENTER ? '\n' : 0) : c);
            i += k > 0 ? len : 1;
            continue;
        }
        if (c < 0x80) {
            paste_char(t, c == '\r' ? '\n' : c);
            i++;
            continue;
        }
        unsigned cp, lo, hi;
        int      need = utf8_lead(c, &cp, &lo, &hi);
        size_t   j    = i + 1;
        for (int k = 0; k < need; k++, j++) {
            if (j == n && !final)
                return n - i;
            if (j == n || t->solo[b[j]] || b[j] < lo || b[j] > hi) {
                need = 0;
                break;
            }
            cp = cp << 6 | (b[j] & 0x3f);
            lo = 0x80, hi = 0xBF;
        }
        if (!need) {
            t->bad_utf8++;
            cp = 0xFFFD;
        }
        paste_char(t, (wint_t)cp);
        i = j;
    }
    return 0;
}

/* Reads and takes one block of a paste (t->paste_raw). Returns 0 when stdin has nothing now.
 * b holds at most what paste_carry can, plus the PASTE_KEY_MAX bytes paste_done may read to
 * complete a cut key: what follows a next paste's start is carried over to its own paste_read,
 * so reading a full block on top of a carry grew it by a block per paste, and a clipboard of
 * short pastes ("x ESC[201~ ESC[200~" over and over) overran the carry and this buffer. */
static int paste_read(tui *t) {
    unsigned char b[sizeof t->paste_carry + PASTE_KEY_MAX];
    size_t        n = (size_t)t->n_carry;
    memcpy(b, t->paste_carry, n);
    t->n_carry = 0;
    for (;;) {
        /* the rest of a cut sequence: waited for as curses and read_wch would; a full b is
         * taken first, and keeps at most a cut key or character of it */
        const size_t  room = sizeof t->paste_carry - n;
        struct pollfd p    = {0, POLLIN, 0};
        ssize_t       r    = 0;
        if (room && poll(&p, 1, !n ? 0 : t->solo[b[0]] ? get_escdelay() : 50) > 0) {
            r = read(0, b + n, room < PASTE_BLOCK ? room : PASTE_BLOCK);
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
                paste_end(t); /* a hang-up: curses says it, as before */
                return 1;
            }
            if (r > 0)
                t->paste_last = ev_now();
        }
        if (r <= 0 && !n)
            return 0;
        n += r > 0 ? (size_t)r : 0;
        size_t keep = paste_block(t, b, n, room && r <= 0);
        if (!keep || !t->paste_raw)
            return 1;
        memmove(b, b + n - keep, keep);
        n = keep;
    }
}

/* Sleep until stdin (and, with_pipe, the event pipe) is readable or timeout ms (-1: no limit)
 * pass; like poll(): -1 (errno), 0 or the number ready, with *key / *evs saying which; *key is
 * -1 when the terminal hung up (its other side closed: nothing will come, and it stays
 * "readable" for ever, each read an EOF or EIO). The
 * first call makes two epoll sets, kept for the session: a wake-up from epoll_wait costs less
 * CPU than one from poll(), which registers on the terminal's wait queues at every call (about
 * a quarter of a sleep's kernel time on the machine measured, BENCHMARKS.md; a streaming turn
 * sleeps once a frame). poll() where epoll cannot watch stdin. */
static int wait_input(tui *t, int with_pipe, int timeout, int *key, int *evs) {
    *key = *evs = 0;
    if (t->ep[0] == -1) {
        int fds[2] = {0, ev_fd(t->q)};
        for (int k = 0; k < 2; k++) {
            t->ep[k] = epoll_create1(EPOLL_CLOEXEC);
            for (int j = 0; j <= k && t->ep[k] >= 0; j++) {
                struct epoll_event ee = {.events = EPOLLIN, .data.fd = fds[j]};
                if (epoll_ctl(t->ep[k], EPOLL_CTL_ADD, fds[j], &ee) != 0) {
                    close(t->ep[k]);
                    t->ep[k] = -1;
                }
            }
        }
        if (t->ep[0] < 0 || t->ep[1] < 0) {
            for (int k = 0; k < 2; k++)
                if (t->ep[k] >= 0)
                    close(t->ep[k]);
            t->ep[0] = t->ep[1] = -2;
        }
    }
    if (t->ep[0] < 0) {
        struct pollfd p[2] = {{0, POLLIN, 0}, {ev_fd(t->q), POLLIN, 0}};
        int           pr   = poll(p, with_pipe ? 2 : 1, timeout);
        short         re   = pr > 0 ? p[0].revents : 0;
        *key               = re & (POLLHUP | POLLERR | POLLNVAL) ? -1 : (re & POLLIN) != 0;
        *evs               = pr > 0 && (p[1].revents & POLLIN);
        return pr;
    }
    struct epoll_event ev[2];
    int                n = epoll_wait(t->ep[with_pipe != 0], ev, 2, timeout);
    for (int k = 0; k < n; k++) {
        if (ev[k].data.fd == 0)
            *key = ev[k].events & (EPOLLHUP | EPOLLERR) ? -1 : (ev[k].events & EPOLLIN) != 0;
        else
            *evs |= (ev[k].events & EPOLLIN) != 0;
    }
    return n;
}

/* The next key held while the window was too small (small_key), once it is large enough:
 * 1 with it in *k and *fn, 0 when none waits. */
static int take_held(tui *t, wint_t *k, int *fn) {
    if (t->too_small || t->held_at >= t->n_held)
        return 0;
    *k  = t->held[t->held_at].k;
    *fn = t->held[t->held_at].fn;
    if (++t->held_at == t->n_held)
        t->n_held = t->held_at = 0;
    return 1;
}

static int next_key(tui *t, wint_t *k, int *fn) {
    int keys = 1; /* curses may hold keys already read: ask it first */
    for (;;) {
        if (got_term) {
            t->quit = 1;
            return 0;
        }
        if (got_tstp)
            suspend(t);
        if (got_cont)
            resume(t);
        if (take_held(t, k, fn))
            return 1;
        if (tui_emoji_esc_wait() == 0)
            keys = 1;                   /* a lone Esc the probe held is due as a key */
        if (keys && tui_emoji_late()) { /* the widths may have changed: wrap again */
            t->tc_think.width = t->tc_resp.width = -1;
            clearok(curscr, TRUE);
            t->dirty = DIRTY_ALL;
        }
        if (keys && t->paste_raw) {
            /* a paste drawn at most every 0.2 s, not once per block */
            if (paste_read(t) && ev_now() - t->paste_shown < 0.2)
                continue;
        } else if (keys) {
            int r = read_wch(t, k);
            if (r != ERR) {
                *fn = r == KEY_CODE_YES;
                return 1;
            }
        }
        double now = ev_now();
        if (t->paste && now - t->paste_last >= PASTE_IDLE_S)
            paste_lost(t);
        quit_tick(t, now);
        if (t->quit)
            return 0;
        if (t->paste && t->paste_buf.n && now - t->paste_shown >= 0.2)
            paste_flush(t); /* what has come of a paste is seen, if its end takes time or is lost */
        tui_render(t, 0);
        now = ev_now();
        if ((t->streaming || !t->ready) && now >= t->next_tick) {
            /* the think timer (until the answer starts) and the load rate move even without
             * events; nothing else on the screen does */
            t->dirty |= (t->streaming && t->think_t1 == 0 ? DIRTY_THINK : 0) | (t->ready ? 0 : DIRTY_STATUS);
            t->next_tick = now + 0.25;
            continue;
        }
        /* While a frame is pending, sleep until it is due without waking for each token:
         * the events wait in the queue and the frame takes them all at once. */
        /* While tokens flow, the next frame is due anyway: sleep until then without waking for
         * its first token either (one wake-up per frame instead of two). */
        int flowing = t->streaming && t->flowing && now - t->last_draw < FRAME_S;
        int pending = t->dirty != 0 || flowing;
        int timeout = -1;
        if (pending)
            timeout = (int)((FRAME_S - (now - t->last_draw)) * 1000) + 1;
        else if (t->streaming || !t->ready)
            timeout = (int)((t->next_tick - now) * 1000) + 1;
        if (timeout < 0 && pending)
            timeout = 0;
        if (timeout < 0)
            timeout = 1000; /* idle: look for a SIGWINCH that came outside the sleep once a second */
        if (t->paste && t->paste_buf.n && (timeout < 0 || timeout > 250))
            timeout = 250;
        if (t->quitting && (timeout < 0 || timeout > 250))
            timeout = 250; /* quit_tick */
        int esc = tui_emoji_esc_wait();
        if (esc >= 0 && (timeout < 0 || timeout > esc))
            timeout = esc; /* a lone Esc the probe holds: a key at ESCDELAY */
        if (t->paste) {    /* awake when the paste counts as lost (paste_lost) */
            int idle = (int)((t->paste_last + PASTE_IDLE_S - now) * 1000) + 1;
            if (timeout < 0 || timeout > idle)
                timeout = idle > 0 ? idle : 0;
        }
        /* Sleeping on the event pipe: arm it first (ev.h), or take the events already there. */
        int waiting = !pending && ev_arm(t->q), key = 0, evs = 0;
        int pr = waiting ? 0 : wait_input(t, !pending, timeout, &key, &evs);
        t->turn_wakes += t->streaming && !waiting;
        if (pr < 0 && errno != EINTR)
            return 0;
        /* the terminal went away: end as its SIGHUP would, which need not come (k3chat in a
         * session of its own); reading on would spin, each read an EOF */
        if (key < 0) {
            got_term = SIGHUP;
            continue;
        }
        /* EINTR: SIGWINCH, which curses turns into KEY_RESIZE on the next get_wch */
        keys = pr < 0 || (pr == 0 && !pending && !waiting) || (pr > 0 && key);
        if (pending || waiting || evs)
            pump_events(t, evs);
        if (flowing && !t->dirty)
            t->flowing = 0; /* a frame's time without tokens: wait for the next one again */
        if (t->quit)
            return 0;
    }
}

/* Keys that are the UI's own, whatever libedit is doing. Returns 1 when handled. */
static int ui_key(tui *t, wint_t k, int fn) {
    if (!fn)
        return 0;
    if (t->too_small && k != KEY_RESIZE && k != KEY_F(3)) {
        /* the screen's keys (scrolling, folding, a click) act on panes not shown: nothing */
        MEVENT m;
        if (k == KEY_MOUSE)
            getmouse(&m);
        return k == KEY_PPAGE || k == KEY_NPAGE || k == KEY_CTRL_HOME || k == KEY_CTRL_END || k == KEY_F(2) ||
               k == KEY_MOUSE;
    }
    switch (k) {
    case KEY_RESIZE:
        tui_layout(t);
        clearok(curscr, TRUE);
        return 1;
    case KEY_PPAGE:
        scroll_by(t, t->hist_h > 4 ? t->hist_h - 2 : 2);
        return 1;
    case KEY_NPAGE:
        scroll_by(t, -(t->hist_h > 4 ? t->hist_h - 2 : 2));
        return 1;
    case KEY_CTRL_HOME:
        scroll_by(t, 1 << 30);
        return 1; /* tui-draw.c clamps it to the top */
    case KEY_CTRL_END:
        scroll_by(t, -(1 << 30));
        return 1;
    case KEY_F(2):
        toggle_fold_all(t);
        return 1;
    case KEY_F(3):
        set_mouse(t, !t->mouse);
        return 1;
    case KEY_MOUSE:
        on_mouse(t);
        return 1;
    default:
        return 0;
    }
}

/* Function keys to the control characters libedit's Emacs map knows. */
static wchar_t libedit_key(wint_t k, int fn) {
    if (!fn)
        return (wchar_t)k;
    switch (k) {
    case KEY_LEFT:
        return 2; /* ^B */
    case KEY_RIGHT:
        return 6; /* ^F */
    case KEY_UP:
        return 16; /* ^P */
    case KEY_DOWN:
        return 14; /* ^N */
    case KEY_HOME:
        return 1; /* ^A */
    case KEY_END:
        return 5; /* ^E */
    case KEY_BACKSPACE:
        return 127;
    case KEY_DC:
        return 4; /* ^D: delete under the cursor */
    case KEY_ENTER:
        return '\r';
    default:
        return 0;
    }
}

/* libedit wants another key inside one command (Ctrl-R search, ESC prefix). */
static int more_key(void *ud, wchar_t *out) {
    tui   *t = ud;
    wint_t k;
    int    fn;
    for (;;) {
        t->dirty |= DIRTY_INPUT;
        if (!next_key(t, &k, &fn))
            return 0;
        if (ui_key(t, k, fn))
            continue;
        if (!fn && k == 3) { /* Ctrl-C: abort the search */
            *out = 7;
            return 1;
        }
        wchar_t c = libedit_key(k, fn);
        if (c) {
            *out = c;
            return 1;
        }
    }
}

/* ==== Ctrl-R history search ==================================================== */

/* Look for the pattern from history position `from` (dir > 0: that one and older, dir < 0:
 * newer) and show the match in the line; the label above the line says what happens. */
static void search_update(tui *t, int from, int dir) {
    int         pos = from;
    const char *m   = inp_history_find(t->in, t->srch_pat, &pos, dir);
    char        hint[400];
    if (m) {
        t->srch_pos = pos;
        inp_clear(t->in);
        inp_insert(t->in, m);
    }
    /* past the last match (Ctrl-R at the oldest, Ctrl-S at the newest) that match stays: the
     * label said "no match" over it */
    snprintf(hint, sizeof hint, "%s: %s   (Ctrl-R older, Enter sends, Esc cancels)",
             m || !t->srch_pat[0]                                             ? "history search"
             : t->srch_pos < 0 || !strstr(inp_text(t->in, NULL), t->srch_pat) ? "no match"
             : dir > 0                                                        ? "no older match"
                                                                              : "no newer match",
             t->srch_pat);
    inp_set_hint(t->in, hint);
}

static void search_start(tui *t) {
    inp_undo_mark(t->in); /* a match taken is one change */
    free(t->srch_draft);
    t->srch_draft  = strdup(inp_text(t->in, NULL));
    t->srch        = 1;
    t->srch_pat[0] = 0;
    t->srch_pos    = -1;
    search_update(t, 0, 1);
}

/* keep: the match stays in the line; otherwise the line before the search comes back */
static void search_end(tui *t, int keep) {
    if (!keep) {
        inp_clear(t->in);
        inp_insert(t->in, t->srch_draft ? t->srch_draft : "");
    }
    free(t->srch_draft);
    t->srch_draft = NULL;
    t->srch       = 0;
    inp_set_hint(t->in, "");
}

/* A key while searching: 1 when the search took it; 0 when it ended the search (keeping the
 * match) and the key is to act on the line as usual (Enter sends, arrows move). */
static int search_key(tui *t, wint_t k, int fn) {
    size_t n = strlen(t->srch_pat);
    if (!fn && k == 18) { /* Ctrl-R: the next older match */
        search_update(t, t->srch_pos < 0 ? 0 : t->srch_pos + 1, 1);
    } else if (!fn && k == 19) { /* Ctrl-S: the next newer one */
        if (t->srch_pos > 0)
            search_update(t, t->srch_pos, -1);
    } else if (!fn && (k == 3 || k == 7 || k == 27)) { /* Ctrl-C, Ctrl-G, Esc: cancel */
        search_end(t, 0);
    } else if ((fn && k == KEY_BACKSPACE) || (!fn && (k == 127 || k == 8))) {
        while (n > 0 && (t->srch_pat[n - 1] & 0xC0) == 0x80)
            n--; /* a whole character */
        t->srch_pat[n > 0 ? n - 1 : 0] = 0;
        t->srch_pos                    = -1;
        search_update(t, 0, 1);
    } else if (!fn && k >= 32) {
        char             u[8];
        utf8proc_ssize_t l = utf8proc_encode_char((utf8proc_int32_t)k, (utf8proc_uint8_t *)u);
        if (l > 0 && n + (size_t)l < sizeof t->srch_pat) {
            memcpy(t->srch_pat + n, u, (size_t)l);
            t->srch_pat[n + (size_t)l] = 0;
        }
        search_update(t, t->srch_pos < 0 ? 0 : t->srch_pos, 1);
    } else {
        search_end(t, 1);
        return 0;
    }
    return 1;
}

/* Ctrl-C while an answer streams: stop it. A stop that does not come in a second (the engine may
 * be blocked for good) is told at the next Ctrl-C, and the one after quits without waiting. */
static void stop_answer(tui *t) {
    double now = ev_now();
    if (t->stop_told) {
        t->abandon = t->quit = 1;
        return;
    }
    if (t->stop_t > 0 && now - t->stop_t >= 1.0) {
        t->stop_told = 1;
        notice(t, ROLE_ERROR,
               "stopping: the engine has not stopped the answer (it may be blocked in a read from a file "
               "system or a server that does not answer); Ctrl-C again quits without waiting for it "
               "(the answer so far is autosaved, marked interrupted)");
    }
    if (!t->stop_t)
        t->stop_t = now;
    ue_cancel(t->eng);
}

/* A key while the window is too small (tui-draw.c shows a notice with the draft's end): typing,
 * editing, a paste go into the draft as at any size, unseen; Enter, which would send the message
 * or run a command where neither it nor its answer can be seen, waits with every key after it
 * (t->held) until the window is large enough, and they are then read again in order. Ctrl-C acts
 * as at the prompt (it stops an answer, else drops what is typed, the keys held included, else
 * quits). Returns 1 when the key was taken here. */
static int small_key(tui *t, wint_t k, int fn) {
    if (fn && k == KEY_RESIZE) {
        ui_key(t, k, fn);
        return 1;
    }
    int ctrl_c = !fn && k == 3;
    if (ctrl_c && t->n_held && !t->quitting && !t->streaming && !t->replaying) {
        t->n_held = t->held_at = 0;
        if (t->srch)
            search_end(t, 0);
        inp_undo_mark(t->in);
        inp_clear(t->in);
        inp_set_hint(t->in, "");
        t->edit_pending = 0;
        return 1;
    }
    int send = !t->paste && ((fn && k == KEY_ENTER) || (!fn && (k == '\r' || k == '\n')));
    if ((!t->n_held && !send) || ctrl_c || (fn && k == KEY_MOUSE))
        return 0; /* Ctrl-C while an answer streams stops it; a click does nothing (ui_key) */
    struct held_key *h = k3_grow(t->held, &t->cap_held, (size_t)t->n_held + 1, sizeof *h, 64);
    if (!h) {
        notice(t, ROLE_ERROR, "out of memory: a key typed while the window is too small was dropped");
        return 1;
    }
    t->held                 = h;
    t->held[t->n_held].k    = k;
    t->held[t->n_held++].fn = fn;
    t->dirty |= DIRTY_ALL;
    return 1;
}

static void on_key(tui *t, wint_t k, int fn) {
    t->dirty |= DIRTY_INPUT;
    if (t->too_small && small_key(t, k, fn))
        return;
    if (fn && k == KEY_PASTE_BEGIN) {
        inp_undo_mark(t->in); /* the paste is one change */
        t->paste = 1;
        /* curses holds no key after this one (paste_read); one read again (take_held) is
         * followed by the paste's text held with it */
        t->paste_raw   = t->held_at >= t->n_held;
        t->paste_shown = t->paste_last = ev_now();
        t->dirty |= DIRTY_STATUS;
        return;
    }
    if (fn && k == KEY_PASTE_END) {
        paste_end(t);
        return;
    }
    if (t->paste) { /* pasted text goes in as it is, newlines included */
        paste_char(t, fn ? (k == KEY_ENTER ? '\n' : 0) : (k == '\r' ? '\n' : k));
        return;
    }
    report_bad_utf8(t, "the typed text");
    if (ui_key(t, k, fn))
        return;
    /* the screen's keys, before the history search's: a search goes on after them (Ctrl-Z in a
     * search accepted its match, and the draft the search would give back was lost) */
    if (!fn && k == 12) { /* Ctrl-L */
        clearok(curscr, TRUE);
        t->dirty = DIRTY_ALL;
        return;
    }
    if (!fn && k == 26) { /* Ctrl-Z */
        suspend(t);
        return;
    }
    if (t->srch && search_key(t, k, fn))
        return;
    if (!fn && k == 18) { /* Ctrl-R */
        search_start(t);
        return;
    }
    if (!fn) {
        switch (k) {
        case 3: /* Ctrl-C */
            if (t->quitting) {
                request_quit(t);
                return;
            }
            if (t->streaming || t->replaying) {
                stop_answer(t);
                return;
            }
            if (!inp_empty(t->in)) {
                inp_undo_mark(t->in); /* Ctrl-_ brings it back */
                inp_clear(t->in);
                inp_set_hint(t->in, "");
                t->edit_pending = 0;
                return;
            }
            request_quit(t);
            return;
        case 4: /* Ctrl-D at an empty prompt */
            if (inp_empty(t->in) || t->quitting) {
                request_quit(t);
                return;
            }
            break;
        case 27: { /* ESC: Alt-Enter inserts a newline; ESC + key is a meta key for libedit */
            wint_t k2;
            int    r;
            int    fn2;
            if (take_held(t, &k2, &fn2)) {
                r = fn2 ? KEY_CODE_YES : OK;
            } else {
                timeout(30);
                r = read_wch(t, &k2);
                timeout(0);
            }
            if (r == ERR)
                return;
            if ((r == OK && (k2 == '\r' || k2 == '\n')) || (r == KEY_CODE_YES && k2 == KEY_ENTER)) {
                inp_undo_mark(t->in);
                inp_insert(t->in, "\n");
                return;
            }
            if (r == KEY_CODE_YES)
                return;
            inp_prefeed(t->in, 27);
            k = k2;
            break;
        }
        default:
            break;
        }
    }
    wchar_t c = libedit_key(k, fn);
    if (!c)
        return;
    if (c != '\t')
        inp_set_hint(t->in, "");
    /* Backspace, Delete and the arrows act on a whole grapheme cluster: inp_bind_clusters */
    char *line = NULL;
    if (inp_key(t->in, c, &line)) {
        inp_set_hint(t->in, "");
        submit(t, line);
        free(line);
    }
}

/* ==== startup and shutdown =================================================== */

static void log_to_ui(int level, const char *msg, void *ud) {
    if (level <= K3_LOG_LEVEL_WARN || (level == K3_LOG_LEVEL_INFO && chat_verbose()))
        ev_push_text((ev_queue *)ud, level == K3_LOG_LEVEL_ERROR ? EV_ERROR : EV_INFO, msg);
}

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void write_ui_stats(tui *t) {
    const char *path = k3_setting_env_str(K3_SETTING_UI_STATS);
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f,
            "frames_with_tokens %ld\nlatency_mean_ms %.4f\nlatency_max_ms %.4f\nui_cpu_s %.6f\ndecode_wall_s "
            "%.6f\n",
            t->lat_n, t->lat_n ? t->lat_sum / (double)t->lat_n * 1e3 : 0, t->lat_max * 1e3,
            thread_cpu() - t->ui_cpu0, t->decode_wall);
    fprintf(f, "turn_user_s %.6f\nturn_sys_s %.6f\nturn_wakeups %ld\nturn_frames %ld\n", t->turn_user,
            t->turn_sys, t->turn_wakes, t->turn_frames);
    fprintf(f, "draw_frames %ld\ndraw_cpu_s %.6f\ndraw_max_ms %.4f\n", t->draw_n, t->draw_cpu,
            t->draw_max * 1e3);
    fclose(f);
}

int tui_usable(char *why, size_t n) {
    const char *term = getenv("TERM");
    why[0]           = 0;
    if (!term || !*term || !strcmp(term, "dumb"))
        return 0; /* no cursor addressing: line mode */
    /* a terminal curses does not know (or one without cursor addressing) gets line mode too,
     * rather than curses' own exit from initscr() */
    int terr = 0;
    if (setupterm(term, 1, &terr) != OK) {
        snprintf(why, n, "no terminfo entry for TERM '%.64s'", term);
        return 0;
    }
    char *cup = tigetstr("cup");
    int   can = cup && cup != (char *)-1;
    del_curterm(cur_term);
    if (!can)
        snprintf(why, n, "TERM '%.64s' cannot move the cursor", term);
    return can;
}

/* The end of the worker, after the screen is gone: it has ended (EV_STOPPED), or is asked to and
 * given QUIT_GRACE_S (a signal or an error ended the loop; 0.2 s when the user chose not to
 * wait). One that does not end is left behind, and what the user saw of the answer it was
 * writing goes to the autosave (ue_rescue). Returns ue_rescue's result, 1 when not needed. */
static int quit_worker(tui *t) {
    if (!t->stopped) {
        if (!t->quitting)
            ue_stop(t->eng);
        double wait = t->abandon ? 0.2 : QUIT_GRACE_S, t0 = ev_now(), left;
        int    told = 0;
        ui_ev  e;
        while (!t->stopped && (left = t0 + wait - ev_now()) > 0) {
            if (!told && left < wait - QUIT_TELL_S) {
                txt_term_printf(stderr, "k3chat: waiting up to %.0f s for the engine to stop\n", wait);
                told = 1;
            }
            if (ev_wait(t->q, &e, left < 0.25 ? left : 0.25)) {
                t->stopped = e.type == EV_STOPPED;
                ev_free(&e);
            }
        }
    }
    if (t->stopped) {
        t->abandon = 0;
        ue_close(t->eng);
        return 1;
    }
    t->abandon = 1;
    txt_term_printf(stderr,
                    "k3chat: quitting without waiting for the engine, which did not stop (blocked in a call "
                    "that does not return: a hung file system or server?)\n");
    entry *e = t->streaming && t->cur >= 0 ? &t->ents[t->cur] : NULL;
    char   msg[1024];
    int    r = ue_rescue(t->eng, e && e->text.p ? e->text.p : "", e && e->think.n ? e->think.p : NULL, 5, msg,
                         sizeof msg);
    txt_term_printf(stderr, "k3chat: %s\n", msg);
    ue_abandon(t->eng);
    return r;
}

/* Setup before the screen: the state, the theme, the emoji table, the event queue, the input line
 * with its history, and the engine with the command line's settings, --system and --load. 0, or
 * the exit status (2 for a theme or emoji table it refused, 1 when a part could not start) after
 * saying why; what was started is freed then. */
static int tui_start(tui *t, const ui_opts *o) {
    char err[512];
    memset(t, 0, sizeof *t);
    t->o   = o;
    t->cur = -1;
    t->st  = (ue_stats){
         .tok_s = -1, .prefill_tok_s = -1, .ttft_s = -1, .think_s = -1, .expert_hit = -1, .expert_gb = -1};
    t->ep[0] = t->ep[1] = -1;
    char loc[320];
    txt_locale(loc, sizeof loc); /* main checked the terminal (tui_usable) */
    chat_settings_init(&t->cs, o);
    const char *theme = o->theme; /* --theme, else K3_THEME (main) */
    if (!theme || !*theme)
        theme = "dark";
    if (thm_load(theme, t->theme, err, sizeof err) != 0) {
        txt_term_printf(stderr, "k3chat: --theme: %s\n", err);
        return 2;
    }
    if (tui_emoji_setup(err, sizeof err) != 0) {
        txt_term_printf(stderr, "k3chat: %s\n", err);
        return 2;
    }
    snprintf(t->theme_name, sizeof t->theme_name, "%.*s", THM_NAME_MAX, theme); /* thm_load refused longer */
    t->q = ev_queue_new(1);
    if (!t->q) {
        txt_term_printf(stderr, "k3chat: cannot create the event queue\n");
        return 1;
    }
    if (loc[0])
        ev_push_text(t->q, EV_INFO, loc);
    char hist[4096];
    int  has_hist = inp_history_path(hist, sizeof hist) == 0;
    t->in         = inp_new(has_hist ? hist : NULL, more_key, t, err, sizeof err);
    if (!t->in) {
        txt_term_printf(stderr, "k3chat: %s\n", err);
        ev_queue_free(t->q);
        return 1;
    }
    k3_log_set_callback(log_to_ui, t->q);
    tui_stderr_begin(t->q); /* from the engine's start on: its libraries may write to fd 2 */
    t->eng = ue_start(o, t->q);
    if (!t->eng) {
        tui_stderr_end();
        fprintf(stderr, "k3chat: cannot start the engine thread\n");
        inp_free(t->in);
        ev_queue_free(t->q);
        return 1;
    }
    ue_settings(t->eng, &t->cs.gen); /* the command line's, before anything is measured */
    if (o->system && *o->system)
        ue_system(t->eng, o->system);
    if (o->load) {
        ue_load(t->eng, o->load);
        t->load_pending++; /* messages wait until the transcript is in */
    }
    return 0;
}

/* The signals the chat handles itself: SIGTERM, SIGHUP and an outside SIGINT end it (Ctrl-C is a
 * key in raw mode), SIGTSTP and SIGCONT stop and resume the screen. */
static void signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGINT, &sa, NULL); /* kill -INT from outside (Ctrl-C itself is a key in raw mode) */
    sa.sa_handler = on_tstp;
    sigaction(SIGTSTP, &sa, NULL);
    sa.sa_handler = on_cont;
    sa.sa_flags   = SA_RESTART; /* a write cut by the stop goes on (epoll_wait still returns) */
    sigaction(SIGCONT, &sa, NULL);
}

/* The screen taken: curses in raw mode, the theme's colors, the extra keys, bracketed paste, the
 * mouse, the terminal's modes kept for a fatal signal, the emoji probe, and the first layout. */
static void screen_open(tui *t) {
    if (!getenv("ESCDELAY"))
        set_escdelay(25);
    struct termios found; /* the terminal as the shell had it: a fatal signal puts it back */
    int            have_found = tcgetattr(STDOUT_FILENO, &found) == 0;
    initscr();
    raw();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    timeout(0);
    intrflush(stdscr, FALSE);
    /* One write(2) per frame: ncurses 6.4 flushes its output buffer at every cursor movement
     * inside doupdate() until the screen has once been resumed after endwin() (its _endwin state
     * stays "initial"), which made a streaming frame 4 to 6 writes; an endwin() and refresh()
     * now, before anything is drawn, ends that state. typeahead(-1): doupdate() does not poll
     * stdin for typed-ahead keys (twice a frame); we draw one frame at a time anyway. */
    endwin();
    refresh();
    typeahead(-1);
    idlok(stdscr, TRUE); /* a streaming pane that gains a line scrolls (tui_rows_scroll) */
    thm_apply(t->theme);
    define_key("\033[200~", KEY_PASTE_BEGIN);
    define_key("\033[201~", KEY_PASTE_END);
    define_key("\033[1;5H", KEY_CTRL_HOME); /* xterm's Ctrl-Home / Ctrl-End */
    define_key("\033[1;5F", KEY_CTRL_END);
    define_key("\033[7^", KEY_CTRL_HOME); /* rxvt's */
    define_key("\033[8^", KEY_CTRL_END);
    paste_keys_init(t);
    printf("\033[?2004h"); /* bracketed paste on */
    fflush(stdout);
    mouseinterval(0);
    set_mouse(t, k3_setting_env_str(K3_SETTING_NO_MOUSE) == NULL);
    if (have_found)
        tui_fatal_arm(STDOUT_FILENO, &found);
    t->ui_cpu0 = thread_cpu();
    t->osc8    = md_term_osc8();
    refresh(); /* the screen is cleared before the probe writes on it */
    tui_emoji_probe();
    tui_layout(t);
}

/* The screen given back: bracketed paste and the mouse off, curses ended, stderr the terminal's
 * again. */
static void screen_close(void) {
    tui_fatal_disarm();
    printf("\033[?2004l");
    fflush(stdout);
    mousemask(0, NULL);
    endwin();
    tui_stderr_end();
}

/* Teardown after the screen: the UI's statistics written, the engine stopped (or left behind),
 * everything tui_start and the chat allocated freed. Returns the exit status: 128 + a fatal
 * signal's number, 1 for an engine that failed or a rescue that failed, else 0. */
static int tui_end(tui *t) {
    write_ui_stats(t);
    int rescued = quit_worker(t);
    k3_log_set_callback(NULL, NULL);
    inp_free(t->in);
    for (int k = 0; k < 2; k++)
        if (t->ep[k] >= 0)
            close(t->ep[k]);
    if (!t->abandon)
        ev_queue_free(t->q); /* else the worker left behind may still post to it */
    drop_entries(t, 0);
    free(t->ents);
    free(t->dl);
    md_doc_free(&t->md_count);
    free(t->row_sig);
    free(t->paste_buf.p);
    md_stream_free(&t->ms_resp);
    free(t->links);
    free(t->srch_draft);
    free(t->held);
    free(t->fatal_msg);
    tui_emoji_free();
    /* a model that failed to load is an error, as in line mode; a signal (SIGHUP when the
     * terminal goes, SIGTERM) gives the shell's 128 + its number */
    return got_term ? 128 + got_term : t->fatal || rescued < 0 ? 1 : 0;
}

int ui_tui_run(const ui_opts *o) {
    static tui T;
    tui       *t  = &T;
    int        rc = tui_start(t, o);
    if (rc)
        return rc;
    signals_install();
    screen_open(t);
    while (!t->quit) { /* a key (or an event, as a key) at a time until the chat quits */
        wint_t k;
        int    fn;
        if (!next_key(t, &k, &fn))
            break;
        on_key(t, k, fn);
    }
    screen_close();
    return tui_end(t);
}
