/* engine.c: the worker thread and the command side of the UI/engine seam (see engine.h). */
#include "engine.h"
#include "chatfile.h"
#include "k3.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void *worker_main(void *arg) {
    ue  *u         = arg;
    char err[1024] = "";
    if (u->be->open(u, &u->self, err, sizeof err) != 0) {
        ev_push_text(u->out, EV_FATAL, err[0] ? err : "the engine failed to start");
        u->self = NULL;
    } else {
        atomic_store(&u->ready, 1);
    }
    for (;;) {
        ui_ev c;
        if (!ev_wait(u->cmds, &c, -1))
            continue;
        if (c.type == EV_CMD_QUIT) {
            ev_free(&c);
            break;
        }
        pthread_mutex_lock(&u->mu); /* for ue_rescue */
        u->run_type = c.type;
        pthread_mutex_unlock(&u->mu);
        if (u->self) {
            atomic_store(&u->busy, 1);
            if (c.type == EV_CMD_SEND || c.type == EV_CMD_EDIT || c.type == EV_CMD_RETRY ||
                c.type == EV_CMD_REPLAY) {
                /* clear, then look at cancel_upto: a ue_cancel racing with this either moved
                 * cancel_upto before the load below or sets cancel after the clear */
                atomic_store(&u->cancel, 0);
                if (c.a <= atomic_load(&u->cancel_upto))
                    atomic_store(&u->cancel, 1);
            }
            u->be->cmd(u, u->self, &c);
            atomic_store(&u->busy, 0);
            ui_ev ack = {.type = EV_ACK, .i = c.type};
            ev_push(u->out, &ack);
        } else {
            if (c.type != EV_CMD_EXPERTS && c.type != EV_CMD_STATS && c.type != EV_CMD_SETTINGS)
                ue_emitf(u, EV_ERROR, "not done: the engine did not start (%s)",
                         err[0] ? err : "see the error above");
            ui_ev ack = {.type = EV_ACK, .i = c.type};
            ev_push(u->out, &ack);
        }
        pthread_mutex_lock(&u->mu);
        u->run_type = 0;
        k3_conv_free(u->turn_conv); /* the turn ended: its autosave is the worker's */
        u->turn_conv = NULL;
        if (u->turn_saved != 2) /* after a rescue the worker writes no more */
            u->turn_saved = 0;
        pthread_mutex_unlock(&u->mu);
        ev_free(&c);
    }
    ui_ev end = {.type = EV_STOPPED}; /* before the close, which may take a while (a model's memory) */
    ev_push(u->out, &end);
    if (u->self)
        u->be->close(u->self);
    u->self = NULL;
    return NULL;
}

int ue_thread_start(pthread_t *th, void *(*fn)(void *), void *arg) {
    sigset_t ui_sigs, old;
    sigemptyset(&ui_sigs);
    sigaddset(&ui_sigs, SIGINT);
    sigaddset(&ui_sigs, SIGTERM);
    sigaddset(&ui_sigs, SIGHUP);
    sigaddset(&ui_sigs, SIGTSTP);
    sigaddset(&ui_sigs, SIGCONT);
    sigaddset(&ui_sigs, SIGWINCH);
    pthread_sigmask(SIG_BLOCK, &ui_sigs, &old);
    int r = pthread_create(th, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return r;
}

ue *ue_start(const ui_opts *o, ev_queue *out) {
    ue *u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    const char *mock = k3_setting_env_str(K3_SETTING_MOCK);
    u->be            = mock ? &ue_backend_mock : o->endpoint ? &ue_backend_remote : &ue_backend_real;
    u->opts          = o;
    u->out           = out;
    u->cmds          = ev_queue_new(0);
    pthread_mutex_init(&u->mu, NULL);
    int started = u->cmds && ue_thread_start(&u->th, worker_main, u) == 0;
    if (!started) {
        ev_queue_free(u->cmds);
        pthread_mutex_destroy(&u->mu);
        free(u);
        return NULL;
    }
    u->started = 1;
    return u;
}

void ue_cancel(ue *u) {
    atomic_store(&u->cancel_upto, u->posted);
    atomic_store(&u->cancel, 1);
    /* after ue_stop the worker may be closing the backend: the flag alone */
    if (u->be->cancel && atomic_load(&u->ready) && u->self && !u->stopping)
        u->be->cancel(u->self);
}

void ue_stop(ue *u) {
    if (u->stopping)
        return;
    ue_cancel(u);
    u->stopping = 1;
    ui_ev q     = {.type = EV_CMD_QUIT};
    ev_push(u->cmds, &q);
}

void ue_close(ue *u) {
    if (!u)
        return;
    ue_stop(u);
    if (u->started)
        pthread_join(u->th, NULL);
    ev_queue_free(u->cmds);
    pthread_mutex_destroy(&u->mu);
    k3_conv_free(u->turn_conv);
    free(u);
}

void ue_abandon(ue *u) {
    if (u && u->started)
        pthread_detach(u->th);
}

static int is_turn(int type) {
    return type == EV_CMD_SEND || type == EV_CMD_RETRY || type == EV_CMD_EDIT;
}

void ue_turn_begin(ue *u, k3_conv *c) {
    pthread_mutex_lock(&u->mu);
    int on = u->autosave_on;
    pthread_mutex_unlock(&u->mu);
    /* The user's message goes to the autosave before the answer begins: a turn may run for
     * minutes, and a crash, the OOM killer or a power cut during it then loses the answer only,
     * not what was typed. A failure is kept (k3_conv_autosave_error) and said at the turn's end,
     * whose autosave tries again; the turn's end is still to write (turn_saved back to 0). */
    if (on) {
        k3_conv_autosave(c);
        ue_note_saved(u, c);
        pthread_mutex_lock(&u->mu);
        if (u->turn_saved == 1)
            u->turn_saved = 0;
        pthread_mutex_unlock(&u->mu);
    }
    /* the messages the autosave lacks (all of them after an edit): NULL, the rescue says why */
    k3_conv *copy = on ? k3_conv_copy_unsaved(c) : NULL;
    u->call_open  = 0; /* a call the turn before left open (stopped inside it) is not closed here */
    u->call_after = 0;
    u->call_esc.n = 0;
    pthread_mutex_lock(&u->mu);
    k3_conv_free(u->turn_conv);
    u->turn_conv = copy;
    pthread_mutex_unlock(&u->mu);
}

int ue_turn_rescued(ue *u) {
    pthread_mutex_lock(&u->mu);
    int r = u->turn_saved == 2;
    pthread_mutex_unlock(&u->mu);
    return r;
}

/* The autosave gate of the worker's conversation (k3_conv_set_autosave_gate): a turn's end is
 * written by the worker or by ue_rescue, whichever comes first, never by both. */
static int may_autosave(void *ud) {
    ue *u = ud;
    pthread_mutex_lock(&u->mu);
    int may = u->turn_saved != 2;
    if (may && is_turn(u->run_type)) {
        u->turn_saved = 1;
        u->turn_wrote = 0; /* under way until ue_note_saved */
    }
    pthread_mutex_unlock(&u->mu);
    return may;
}

/* ue_rescue's work, on a thread of its own: the file system may hang as the worker does. */
typedef struct rescue {
    k3_conv   *c;    /* the conversation as the turn began, and the answer as the UI showed it */
    char      *path; /* the autosave file written, NULL: none                              */
    k3_status  st;
    char       err[512];
    atomic_int done;
} rescue;

static void *rescue_main(void *arg) {
    rescue *x = arg;
    x->st     = k3_conv_autosave(x->c);
    if (x->st != K3_OK)
        snprintf(x->err, sizeof x->err, "%s", k3_conv_autosave_error(x->c));
    else if (k3_conv_autosave_path(x->c))
        x->path = strdup(k3_conv_autosave_path(x->c));
    atomic_store(&x->done, 1);
    return NULL;
}

int ue_rescue(ue *u, const char *answer, const char *think, double wait_s, char *msg, size_t n) {
    pthread_mutex_lock(&u->mu);
    int      type = u->run_type, on = u->autosave_on, saved = u->turn_saved, wrote = u->turn_wrote;
    k3_conv *c          = NULL;
    char     where[700] = ""; /* the file the worker wrote (to), or why that failed */
    if (saved && wrote)
        snprintf(where, sizeof where, "%s", u->turn_err);
    else if (saved && u->turn_conv && k3_conv_autosave_path(u->turn_conv))
        snprintf(where, sizeof where, "%s", k3_conv_autosave_path(u->turn_conv));
    if (on && is_turn(type) && !saved && u->turn_conv) { /* the turn's end is the rescue's from now on */
        c             = u->turn_conv;
        u->turn_conv  = NULL;
        u->turn_saved = 2;
    }
    pthread_mutex_unlock(&u->mu);
    if (!on || !is_turn(type)) {
        snprintf(msg, n, "%s",
                 !on ? "this engine keeps no autosave" : "the autosave is as of the last command");
        return 1;
    }
    if (saved && wrote > 0) {
        snprintf(msg, n, "the engine had autosaved the turn itself in %s when it stopped answering", where);
        return 0;
    }
    if (saved && wrote < 0) { /* the worker's write failed: the turn is on no disk */
        snprintf(msg, n,
                 "the conversation is not saved: the engine's autosave of the turn failed (%s); it was "
                 "kept in memory only",
                 where);
        return -1;
    }
    if (saved) { /* blocked inside its write (a hung file system): whether it reached the disk is unknown */
        snprintf(
            msg, n,
            "the engine was writing the turn to the autosave%s%s when it stopped answering: the file may "
            "not hold it",
            where[0] ? " file " : "", where);
        return -1;
    }
    if (!c) {
        snprintf(msg, n, "the message is not in the autosave: the engine blocked before its turn began");
        return -1;
    }
    /* the answer goes on the file as the turn's end would have put it */
    k3_msg    a = {.role        = K3_ROLE_ASSISTANT,
                   .content     = (char *)(uintptr_t)answer,
                   .reasoning   = (char *)(uintptr_t)think,
                   .interrupted = 1};
    int       r = -1;
    rescue   *x = calloc(1, sizeof *x);
    pthread_t th;
    if (!x) {
        snprintf(msg, n, "autosave: out of memory");
        k3_conv_free(c);
        return -1;
    }
    x->c = c;
    /* the file written, named before the thread may name a new one */
    const char *p = k3_conv_autosave_path(c);
    snprintf(msg, n, "the autosave file did not answer within %.0f s%s%s", wait_s, p ? ": " : "", p ? p : "");
    if (k3_conv_add_msg(x->c, &a) == K3_OK && ue_thread_start(&th, rescue_main, x) == 0) {
        for (double t0 = ev_now(); !atomic_load(&x->done) && ev_now() - t0 < wait_s;)
            usleep(10000);
        if (!atomic_load(&x->done)) { /* x is the thread's until the process exits */
            pthread_detach(th);
            return -1;
        }
        pthread_join(th, NULL);
        r = x->st == K3_OK ? 0 : -1;
        if (r == 0)
            snprintf(msg, n, "the conversation is autosaved in %s, the last answer marked interrupted",
                     x->path ? x->path : "?");
        else
            snprintf(msg, n, "autosave: %s", x->err);
    } else {
        snprintf(msg, n, "autosave: %s", k3_errmsg());
    }
    k3_conv_free(x->c);
    free(x->path);
    free(x);
    return r;
}

static void post(ue *u, int type, const char *text, const ue_gen *g, double x) {
    ui_ev c = {.type = type, .text = (char *)(uintptr_t)text, .x = x, .a = u->posted + 1};
    if (g)
        c.gen = *g;
    ev_push(u->cmds, &c);
    u->posted++;
}

void ue_send(ue *u, const char *t, const ue_gen *g) {
    post(u, EV_CMD_SEND, t, g, 0);
}
void ue_retry(ue *u, const ue_gen *g) {
    post(u, EV_CMD_RETRY, NULL, g, 0);
}
void ue_edit(ue *u, const char *t, const ue_gen *g) {
    post(u, EV_CMD_EDIT, t, g, 0);
}
void ue_undo(ue *u) {
    post(u, EV_CMD_UNDO, NULL, NULL, 0);
}
void ue_forget(ue *u) {
    post(u, EV_CMD_FORGET, NULL, NULL, 0);
}
void ue_forget_fit(ue *u) {
    post(u, EV_CMD_FORGET, "--fit", NULL, 0);
}
void ue_clear(ue *u) {
    post(u, EV_CMD_CLEAR, NULL, NULL, 0);
}
void ue_system(ue *u, const char *t) {
    post(u, EV_CMD_SYSTEM, t ? t : "", NULL, 0);
}
void ue_save(ue *u, const char *p, int force) {
    post(u, EV_CMD_SAVE, p, NULL, force);
}
void ue_load(ue *u, const char *p) {
    post(u, EV_CMD_LOAD, p, NULL, 0);
}
void ue_replay(ue *u, const char *p, const ue_gen *g) {
    post(u, EV_CMD_REPLAY, p, g, 0);
}
void ue_export(ue *u, const char *p, int force) {
    post(u, EV_CMD_EXPORT, p, NULL, force);
}
void ue_experts(ue *u, double gb) {
    if (u->be->experts && atomic_load(&u->ready) && u->self)
        u->be->experts(u->self, gb); /* applied during a turn, between two tokens */
    post(u, EV_CMD_EXPERTS, NULL, NULL, gb);
}
void ue_experts_now(ue *u, double gb) {
    ue_emitf(u, EV_INFO, "expert-cache budget now %.3g GB", gb);
}
void ue_stats_req(ue *u) {
    post(u, EV_CMD_STATS, NULL, NULL, 0);
}
void ue_replay_diff(const k3_replay_turn *t, char *buf, size_t n) {
    if (t->by_ids)
        snprintf(buf, n, "DIFFERS at token %d (saved %d tokens, new %d): saved %d %s, new %d %s",
                 t->first_diff + 1, t->n_saved, t->n_new, (int)t->saved_id, t->saved_piece, (int)t->new_id,
                 t->new_piece);
    else
        snprintf(buf, n, "DIFFERS at byte %d of the think+response text (saved %d, new %d): saved %s, new %s",
                 t->first_diff + 1, t->n_saved, t->n_new, t->saved_piece, t->new_piece);
}

void ue_settings(ue *u, const ue_gen *g) {
    post(u, EV_CMD_SETTINGS, NULL, g, 0);
}

/* A token's text to the front end. Events carry C strings, so a NUL byte the model wrote (a byte
 * token, or "\u0000" from a server) is shown as U+FFFD, as a NUL typed in a message is; the
 * conversation keeps the byte. */
void ue_emit_token(ue *u, int ch, const char *text, size_t n) {
    if (u->call_after && ch == EV_CH_RESPONSE && n) { /* text after a call (ue_emit_call) */
        u->call_after = 0;
        ue_emit_token(u, ch, "\n", 1);
    }
    size_t nul = 0;
    for (size_t i = 0; i < n; i++)
        nul += text[i] == 0;
    size_t need = n + 2 * nul + 1;
    char   buf[256], *s = need <= sizeof buf ? buf : malloc(need);
    if (!s)
        return;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (text[i])
            s[o++] = text[i];
        else {
            memcpy(s + o, "\xEF\xBF\xBD", 3);
            o += 3;
        }
    }
    s[o]    = 0;
    ui_ev e = {.type = EV_TOKEN, .ch = ch, .text = s};
    ev_push(u->out, &e);
    if (s != buf)
        free(s);
}

void ue_emitf(ue *u, int type, const char *fmt, ...) {
    char    buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ev_push_text(u->out, type, buf);
}

const char *ue_effort_name(int e) {
    return k3_setting_choice(K3_SETTING_EFFORT, e);
}

void ue_gen_settings(struct k3_conv *c, const ue_gen *g, float temp, float top_p, k3_conv_settings *set) {
    k3_conv_get_settings(c, set);
    set->think = g->think;
    snprintf(set->effort, sizeof set->effort, "%s", ue_effort_name(g->effort));
    set->max_tokens     = g->max_tokens > 0 ? g->max_tokens : 0;
    set->think_budget   = g->think_budget;
    set->sampling.temp  = temp;
    set->sampling.top_p = top_p;
    if (g->has_seed)
        set->sampling.seed = g->seed;
}

void ue_tok_begin(ue_tokstats *t) {
    *t = (ue_tokstats){.t0 = ev_now()};
}

int ue_tok_piece(ue_tokstats *t, int ch, ue_stats *st) {
    double now = ev_now();
    if (t->t_first == 0)
        t->t_first = now;
    if (ch == EV_CH_THINK)
        t->n_think++;
    else
        t->n_resp++;
    if (now - t->t_last < UE_STATS_EVERY)
        return 0;
    t->t_last         = now;
    st->ttft_s        = t->t_first - t->t0;
    st->tok_s         = now > t->t_first ? (t->n_think + t->n_resp - 1) / (now - t->t_first) : -1;
    st->prefill_tok_s = st->think_s = st->expert_hit = st->expert_gb = -1;
    st->n_think                                                      = t->n_think;
    st->n_response                                                   = t->n_resp;
    st->mem_gb                                                       = ue_mem_gb();
    return 1;
}

double ue_mem_gb(void) {
    long  pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return (double)rss * (double)sysconf(_SC_PAGESIZE) / 1e9;
}

/* ---- tool calls in an answer ----------------------------------------------------------------
 * A call shows in the answer's text as a code block of its own, so that the Markdown renderer of
 * the full-screen chat draws its name and arguments as the model wrote them (no \\ shown as \,
 * no *x* in italics, no heading) and line mode, which prints answers as the Markdown they
 * are, prints them as they are too:
 *
 *     ```tool-call
 *     -> name({"path": "a",
 *         "text": "b"})
 *     ```
 *
 * The fence opens at column 0 after a blank line, so it ends any list or quote the text before it
 * left open. The first line inside starts with "->", and every further line (the arguments'
 * own line breaks) is indented four spaces: a closing fence is indented three at most, so no line
 * of the arguments can close the block, whatever backticks they hold, and the block is written as
 * the arguments stream (their length is not known ahead). The arguments are verbatim, not
 * pretty-printed: the bytes the tool gets, JSON escapes and all. Control characters in the name
 * and arguments show as k3_escape's \xHH / \uHHHH (\n and \t of the arguments stay as they
 * are; a line break in the name shows as \x0A). */

/* Append s[0..n) to b escaped, with four spaces after each line break; st holds a character cut
 * at the end (NULL: none). */
static void call_text(k3_buf *b, k3_esc *st, const char *s, size_t n) {
    k3_buf e = {0};
    k3_escape(&e, st, s, n);
    for (size_t i = 0; i < e.n; i++) {
        k3_buf_add(b, e.p + i, 1);
        if (e.p[i] == '\n')
            k3_buf_add(b, "    ", 4);
    }
    free(e.p);
}

/* Append s (a tool's name, a call id) to b escaped, a line break as \x0A too: it stays on its line. */
static void call_line(k3_buf *b, const char *s) {
    for (size_t n; *s; s += n) {
        n = strcspn(s, "\n");
        k3_escape(b, NULL, s, n);
        if (s[n] == '\n') {
            k3_buf_add(b, "\\x0A", 4);
            n++;
        }
    }
}

static void call_open(k3_buf *b, const char *name) {
    static const char head[] = "\n\n```tool-call\n-> ";
    k3_buf_add(b, head, sizeof head - 1);
    call_line(b, name);
    k3_buf_add(b, "(", 1);
}

static void call_close(k3_buf *b, k3_esc *st) {
    if (st->n) /* the arguments ended inside a character */
        call_text(b, NULL, st->hold, (size_t)st->n);
    st->n                    = 0;
    static const char tail[] = ")\n```"; /* text after it starts on a line of its own (ue_emit_token) */
    k3_buf_add(b, tail, sizeof tail - 1);
}

void ue_emit_call(ue *u, const char *name, const char *args, size_t n, int done) {
    k3_buf b = {0};
    if (name) {
        if (u->call_open)
            call_close(&b, &u->call_esc);
        call_open(&b, name);
        u->call_open = 1;
    }
    if (n && u->call_open)
        call_text(&b, &u->call_esc, args, n);
    if (done && u->call_open) {
        call_close(&b, &u->call_esc);
        u->call_open = 0;
    }
    if (b.n) {
        u->call_after = 0; /* the call's own text needs no line break before it */
        ue_emit_token(u, EV_CH_RESPONSE, b.p, b.n);
        u->call_after = !u->call_open;
    }
    free(b.p);
}

/* How a tool turn reads in the transcript view: an assistant message's calls after its text (as
 * ue_emit_call shows them), a tool result as "tool name (call id):" and its output, the name and
 * id escaped as a call's are (the full-screen chat drops the control characters it draws: a
 * result named a\x07b read "ab"). NULL for other messages (shown as they are) or out of memory. */
static char *tool_text(const k3_msg *m) {
    if (m->role != K3_ROLE_TOOL && m->n_tool_calls == 0)
        return NULL;
    k3_buf b = {0};
    if (m->role == K3_ROLE_TOOL) {
        const char *name = m->tool_name ? m->tool_name : "result", *id = m->tool_call_id;
        k3_buf_add(&b, "tool ", 5);
        call_line(&b, name);
        if (id) {
            k3_buf_add(&b, " (", 2);
            call_line(&b, id);
            k3_buf_add(&b, ")", 1);
        }
        k3_buf_add(&b, ":\n", 2);
    }
    k3_buf_add(&b, m->content, strlen(m->content));
    for (int k = 0; k < m->n_tool_calls; k++) {
        const char *args = m->tool_calls[k].arguments ? m->tool_calls[k].arguments : "";
        k3_esc      st   = {0};
        call_open(&b, m->tool_calls[k].name);
        call_text(&b, &st, args, strlen(args));
        call_close(&b, &st);
    }
    if (b.oom || k3_buf_add(&b, "", 1)) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* ---- conversation edits shared by every backend that keeps a k3_conv ---------------------- */

void ue_send_history(ue *u, const k3_conv *c) {
    ui_ev e = {.type = EV_RESET};
    ev_push(u->out, &e);
    ue_send_msgs(u, c, 0);
}

void ue_send_msgs(ue *u, const k3_conv *c, int from) {
    for (int k = from < 0 ? 0 : from; k < k3_conv_count(c); k++) {
        const k3_msg *m    = k3_conv_msg(c, k);
        int           role = m->role == K3_ROLE_USER        ? UE_ROLE_USER
                             : m->role == K3_ROLE_ASSISTANT ? UE_ROLE_ASSISTANT
                                                            : UE_ROLE_SYSTEM;
        char *shown  = tool_text(m); /* tool calls and results (loaded transcripts) are shown, read-only */
        ui_ev x      = {.type = EV_MSG, .i = role, .text = shown ? shown : m->content, .text2 = m->reasoning};
        x.st.think_s = -1;
        if (m->has_stats) { /* the figures the turn's EV_DONE gave (worker.c) */
            x.st.think_s = m->stats.t_think > m->stats.ttft ? m->stats.t_think - m->stats.ttft : -1;
            x.st.n_think = m->stats.n_think;
            if (m->stats.stop == K3_STOP_MAX_TOKENS)
                x.ch = UE_DONE_LENGTH;
            else if (m->stats.stop == K3_STOP_CONTEXT)
                x.ch = UE_DONE_CONTEXT;
        }
        if (m->interrupted)
            x.ch = UE_DONE_CANCELLED;
        ev_push(u->out, &x);
        free(shown);
    }
}

static const char *plural(int n) {
    return n == 1 ? "" : "s";
}

void ue_load_notes(const k3_load_info *li, const k3_conv *c, char *buf, size_t n) {
    int         k  = 0;
    const char *fp = c ? k3_conv_model_fingerprint(c) : NULL;
    buf[0]         = 0;
    if (li->torn_line)
        k = snprintf(buf, n, "line %d, a torn final line (an interrupted write), was ignored: %s",
                     li->torn_line, li->torn_why);
    if (li->utf8_fixed && k >= 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k,
                      "%sinvalid UTF-8 replaced with U+FFFD: %d sequence%s, the first at line %d, byte %d",
                      k ? "; " : "", li->utf8_fixed, plural(li->utf8_fixed), li->utf8_line, li->utf8_byte);
    /* its token_ids and answers are another model's: a --replay differs, and says why */
    if (fp && *fp && li->config_fnv64[0] && strcmp(fp, li->config_fnv64) && k >= 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k,
                 "%smade with another model configuration: config.json fingerprint %s, this model's %s",
                 k ? "; " : "", li->config_fnv64, fp);
}

/* An edit of the history reaches the autosave file at once (k3chat(5)): after /undo a secret
 * typed by mistake must not stay on disk until the next turn, or for ever after /quit. */
void ue_conv_autosave(ue *u, k3_conv *c) {
    k3_status st = k3_conv_autosave(c);
    ue_note_saved(u, c);
    if (st != K3_OK)
        ue_emitf(u, EV_ERROR, "autosave: %s (the conversation is kept in memory)", k3_conv_autosave_error(c));
}

void ue_conv_autosave_enable(ue *u, k3_conv *c) {
    int ok = k3_conv_autosave_enable(c, NULL) == K3_OK;
    k3_conv_set_autosave_gate(c, may_autosave, u);
    if (!ok) {
        u->no_autosave = 1;
        ue_emitf(u, EV_ERROR, "autosave is off: %s", k3_errmsg());
    }
    pthread_mutex_lock(&u->mu);
    u->autosave_on = ok;
    pthread_mutex_unlock(&u->mu);
}

void ue_note_saved(ue *u, const k3_conv *c) {
    int turns = 0;
    for (int i = 0; i < k3_conv_count(c) && !turns; i++)
        turns = k3_conv_msg(c, i)->role != K3_ROLE_SYSTEM;
    const char *err = k3_conv_autosave_error(c), *path = k3_conv_autosave_path(c);
    atomic_store(&u->unsaved, turns && (u->no_autosave || err != NULL));
    pthread_mutex_lock(&u->mu);
    if (u->turn_saved == 1 && u->turn_wrote == 0) { /* the turn's write, which the rescue may ask about */
        u->turn_wrote = err ? -1 : 1;
        snprintf(u->turn_err, sizeof u->turn_err, "%s", err ? err : path ? path : "?");
    }
    pthread_mutex_unlock(&u->mu);
}

int ue_unsaved_refuse(ue *u, int *warned, int what, char *msg, size_t n) {
    static const char *const name[]  = {"quit", "/clear", "/load"},
                             *does[] = {"leaves", "drops it", "replaces it"};
    int kind                         = what + 1;
    if (!ue_unsaved(u) || *warned == kind) {
        *warned = 0;
        return 0;
    }
    *warned = kind;
    snprintf(msg, n,
             "%s: this conversation is not saved anywhere (the autosave failed); /save FILE keeps it, or %s "
             "again %s without saving",
             name[what], name[what], does[what]);
    return 1;
}

int ue_conv_cmd(ue *u, k3_conv *c, const ui_ev *cmd) {
    char msg[8192];
    switch (cmd->type) {
    case EV_CMD_EDIT: /* the old exchange becomes a branch; the backend then sends as usual */
        if (k3_conv_edit_last(c) < 0)
            ue_emitf(u, EV_ERROR, "/edit: %s (the old exchange is replaced, not kept)", k3_errmsg());
        return 0;
    case EV_CMD_UNDO: {
        int n = k3_conv_undo(c);
        if (n == 0) {
            ue_emitf(u, EV_ERROR, "/undo: the conversation is empty");
        } else {
            ui_ev e = {.type = EV_UNDO};
            ev_push(u->out, &e);
            ue_emitf(u, EV_INFO, "dropped the last exchange (%d message%s)", n, plural(n));
            ue_conv_autosave(u, c);
        }
        return 1;
    }
    case EV_CMD_FORGET: {
        if (cmd->text && cmd->text[0]) { /* --fit: the backend knows the context (worker.c) */
            ue_emitf(u, EV_ERROR,
                     "/forget --fit: this engine cannot measure the context; /forget drops one exchange");
            return 1;
        }
        int n = k3_conv_drop_oldest(c);
        if (n == 0) {
            ue_emitf(u, EV_ERROR, "/forget: there is no exchange to drop");
            return 1;
        }
        ue_send_history(u, c);
        ue_emitf(u, EV_INFO, "dropped the oldest exchange (%d message%s)", n, plural(n));
        ue_conv_autosave(u, c);
        return 1;
    }
    case EV_CMD_CLEAR: {
        k3_conv_clear(c);
        ue_note_saved(u, c);
        ui_ev e = {.type = EV_RESET};
        ev_push(u->out, &e);
        return 1;
    }
    case EV_CMD_SYSTEM:
        if (k3_conv_set_system(c, cmd->text) != K3_OK)
            ue_emitf(u, EV_ERROR, "/system: %s", k3_errmsg());
        else
            ue_conv_autosave(u, c);
        return 1;
    case EV_CMD_SAVE:
        if (chat_file_may_replace("/save", cmd->text, CHAT_FILE_TRANSCRIPT, cmd->x, msg, sizeof msg)) {
            ue_emitf(u, EV_ERROR, "%s", msg);
        } else if (k3_conv_save(c, cmd->text) != K3_OK) {
            ue_emitf(u, EV_ERROR, "/save: %s", k3_errmsg());
            struct stat sb; /* a name claimed for it is not left behind as an empty file */
            if (cmd->x == UE_SAVE_CLAIMED && lstat(cmd->text, &sb) == 0 && S_ISREG(sb.st_mode) && !sb.st_size)
                unlink(cmd->text);
        } else {
            atomic_store(&u->unsaved, 0); /* on disk now, in the file named */
            char ab[48] = "";             /* the file holds the abandoned branches too (/edit, /retry) */
            int  na     = k3_conv_abandoned_count(c);
            if (na)
                snprintf(ab, sizeof ab, " and %d abandoned", na);
            ue_emitf(u, EV_INFO, "saved %d message%s%s to %s", k3_conv_count(c), plural(k3_conv_count(c)), ab,
                     cmd->text);
        }
        return 1;
    case EV_CMD_LOAD: {
        k3_load_info li;
        if (k3_conv_load(c, cmd->text, &li) != K3_OK) {
            ue_emitf(u, EV_ERROR, "/load: %s", k3_errmsg());
            return 1;
        }
        atomic_store(&u->unsaved, 0); /* the conversation is the file's */
        ue_send_history(u, c);
        char notes[400];
        ue_load_notes(&li, c, notes, sizeof notes);
        ue_emitf(u, EV_INFO, "loaded %d message%s from %s%s%s%s", li.n_messages, plural(li.n_messages),
                 cmd->text, notes[0] ? " (" : "", notes, notes[0] ? ")" : "");
        if (li.has_settings) { /* the next turns continue with the transcript's settings */
            k3_conv_settings set;
            k3_conv_get_settings(c, &set);
            ui_ev  e   = {.type = EV_SETTINGS};
            double eff = k3_setting(K3_SETTING_EFFORT)->def; /* k3_conv_load checked it */
            (void)k3_setting_parse(K3_SETTING_EFFORT, K3_SRC_API, set.effort, &eff, NULL, 0);
            e.gen = (ue_gen){.temp   = set.sampling.temp,
                             .top_p  = set.sampling.top_p,
                             .think  = set.think,
                             .effort = (int)eff};
            ev_push(u->out, &e);
        }
        return li.has_settings ? 3 : 2;
    }
    case EV_CMD_EXPORT:
        if (chat_file_may_replace("/export", cmd->text, CHAT_FILE_EXPORT, cmd->x, msg, sizeof msg))
            ue_emitf(u, EV_ERROR, "%s", msg);
        else if (k3_conv_export_md(c, cmd->text) != K3_OK)
            ue_emitf(u, EV_ERROR, "/export: %s", k3_errmsg());
        else
            ue_emitf(u, EV_INFO, "exported %d message%s to %s", k3_conv_count(c), plural(k3_conv_count(c)),
                     cmd->text);
        return 1;
    default:
        return 0;
    }
}
