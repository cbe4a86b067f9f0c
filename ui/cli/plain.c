/* plain.c: k3chat's line mode, for pipes, scripts and dumb terminals (cli_plain).
 *
 * Each input line is a message (or a slash command). The answer streams to stdout as it is
 * generated, followed by a newline; the reasoning goes to stderr, dimmed (ESC[2m ... ESC[0m)
 * when stderr is a terminal other than TERM=dumb (which gets no escape sequences at all).
 * Notices and errors go to stderr as "k3chat: ...". On a terminal the line is read with libedit
 * (history shared with the TUI); otherwise with getline(). Ctrl-C stops the answer in progress
 * (a message still waiting for the model included); one the engine does not obey within a second
 * (blocked in a hung file system or server) is told so, and Ctrl-C then quits without waiting,
 * what came of the answer autosaved, marked interrupted (ue_rescue), as in the full-screen chat;
 * at the prompt it clears a typed line, and
 * at an empty prompt (or at end of input) k3chat exits once the last answer is complete. The
 * exit status is 1 when the model failed to load (whether or not anything was read), a message
 * got no answer (an error: a full context, an unreachable --endpoint; as with --prompt; unless a
 * /retry or /edit of it answered later) or stdout could not be written (reported once on
 * stderr). On a terminal, quitting, /clear or /load while the conversation is on no disk (the autosave
 * failed) is refused once with a message.
 * Answers are printed as the raw Markdown they are. /copy puts one on the clipboard with OSC 52
 * when stdout is a terminal (the answers of this session are kept for it); /edit offers the
 * last message for editing (on a terminal) and sends the next line in place of the last
 * exchange, which the transcript keeps as an abandoned branch.
 */
#include "settings.h"
#include "clip.h"
#include "cli.h"
#include "engine.h"
#include "input.h"
#include "k3.h"
#include "k3-settings.h"
#include "text.h"
#include "loadprog.h"

#include <errno.h>
#include <curses.h>
#include <histedit.h>
#include <term.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

static volatile sig_atomic_t got_int;
static void                  on_int(int sig) {
                     (void)sig;
                     got_int = 1;
}

/* SIGTERM and SIGHUP: libedit keeps the terminal in raw mode (no echo, no line editing) while
 * it reads a line, and dying there by the default action left the user's shell so. The handler
 * puts back the terminal settings k3chat found (tcsetattr is async-signal-safe; have_found: with
 * libedit on the terminal), then dies by the signal (the shell sees 128 + its number). Finished
 * turns are in the autosave file already; while one is under way (in_turn) the handler only
 * notes the signal, and drain stops the turn, which the engine autosaves marked interrupted,
 * and then dies (the message and what came of the answer were lost: no autosave had them). */
static struct termios        tty_found;
static volatile sig_atomic_t have_found, in_turn, got_term;
static void                  die_by(int sig) {
                     if (have_found)
        tcsetattr(0, TCSANOW, &tty_found);
    signal(sig, SIG_DFL);
                     raise(sig);
}
static void on_term(int sig) {
    if (in_turn && !got_term) {
        got_term = sig;
        return;
    }
    die_by(sig);
}

/* SIGTSTP (Ctrl-Z, which libedit leaves to the terminal driver; kill -TSTP) with libedit on the
 * terminal: the default action stopped k3chat in libedit's raw mode, and a shell that does not
 * restore the terminal itself (dash) was left without echo and line editing; at fg nothing showed
 * the prompt again. The handler gives the shell the settings k3chat found, stops, and on SIGCONT
 * puts back the ones it had. While libedit reads a line it is installed without SA_RESTART
 * (tstp_mode), so the read returns and the loop redraws the prompt with the line typed so far
 * (got_cont); elsewhere with it, so no write to the answer's stream fails with EINTR. */
static volatile sig_atomic_t got_cont;
static struct sigaction      tstp_act;
static void                  on_tstp(int sig) {
                     int            e = errno;
                     struct termios cur;
                     int            have = tcgetattr(0, &cur) == 0;
                     tcsetattr(0, TCSANOW, &tty_found);
                     (void)!write(2, "\n", 1); /* the shell's job line starts a line of its own */
                     struct sigaction dfl;
                     memset(&dfl, 0, sizeof dfl);
                     dfl.sa_handler = SIG_DFL;
                     sigaction(sig, &dfl, NULL);
                     sigset_t unblock;
                     sigemptyset(&unblock);
                     sigaddset(&unblock, sig);
                     sigprocmask(SIG_UNBLOCK, &unblock, NULL);
                     raise(sig); /* stops here until SIGCONT */
                     sigaction(sig, &tstp_act, NULL);
                     if (have)
        tcsetattr(0, TCSANOW, &cur);
    got_cont = 1;
                     errno    = e;
}
/* SIGCONT after a SIGSTOP, which cannot be caught (kill -STOP, a debugger): the shell wrote its
 * job line and prompt, and at fg nothing showed the prompt again. While libedit reads a line the
 * read returns (no SA_RESTART) and the loop redraws the prompt with the line typed so far, as
 * after Ctrl-Z; libedit puts its own terminal modes back as it reads again. */
static void on_cont(int sig) {
    (void)sig;
    got_cont = 1;
}
/* on_tstp as SIGTSTP's handler and on_cont as SIGCONT's; restart: whether an interrupted read or
 * write restarts */
static void tstp_mode(int restart) {
    tstp_act.sa_handler = on_tstp;
    tstp_act.sa_flags   = restart ? SA_RESTART : 0;
    sigaction(SIGTSTP, &tstp_act, NULL);
    struct sigaction ca = tstp_act;
    ca.sa_handler       = on_cont;
    sigaction(SIGCONT, &ca, NULL);
}

typedef struct plain {
    ue           *eng;
    ev_queue     *q;
    chat_settings cs;
    int           err_tty, fatal, ready, last_ch, busy;
    int           esc;              /* stderr is a terminal that takes escape sequences (not dumb) */
    txt_esc       esc_out, esc_err; /* a character cut between two tokens, held (text.h) */
    int           progress;         /* a load-progress line is on stderr, not ended yet            */
    double        pf_last;          /* when the last prefill-progress line was written             */
    int           replaying;        /* a /replay runs: its end writes no answer line              */
    int           want_stats;       /* /stats asked: print the next requested EV_STATS            */
    ue_stats      st;               /* the last turn's statistics (EV_DONE)                        */
    ue_stats      now;              /* the latest context figures (a partial EV_STATS)             */
    int           have_now;
    load_prog     lp;      /* the loading line on stderr (loadprog.h)                    */
    unsigned      acked;   /* EV_ACKs seen: the worker has run this many commands */
    int           out_err; /* errno of the first failed write to stdout (0: none) */
    txt_buf      *ans;     /* (n_ans) the answers of the conversation, for /copy */
    int           n_ans, cap_ans;
    txt_buf       cur;       /* the answer streaming now                            */
    txt_buf       think;     /* its reasoning, for a rescue (ue_rescue)              */
    double        stop_t;    /* when Ctrl-C asked the turn to stop (0: not asked)    */
    int           stop_told; /* the stop did not come and the user was told so      */
    int           abandon;   /* quitting without the worker, which did not stop     */
    int           rescued;   /* ue_rescue's result then                             */
    int           behind;    /* a Ctrl-C ended a wait for the worker (settle_int)    */
    char         *last_user; /* the last message sent, for /edit (NULL: none)     */
    int           edit_pending;
    EditLine     *el;
    History      *hist;         /* the line editor's history (a terminal), NULL otherwise      */
    const char   *hpath;        /* its file, NULL when there is none                          */
    int           lineno;       /* input lines read so far                             */
    int           quit_warned;  /* 1 + UE_DROP_* of the refused request (keep_unsaved) */
    int           failed;       /* messages that got no answer (an error): exit status 1 */
    int           last_failed;  /* the last exchange's turn failed (counted in failed)       */
    int           turn_started; /* EV_TURN came since the last send, /retry or /edit: a /retry
                                 * refused before a turn (nothing to regenerate) is no message
                                 * that went unanswered */
    int redo;                   /* the turn running is a /retry or /edit of the last exchange:
                                   its answer takes that failure back                         */
    int in_turn;                /* between EV_TURN and its EV_DONE                            */
} plain;

/* Keep an answer (an owned copy) for /copy; pop = drop the last one. */
static void ans_push(plain *p, const char *s, size_t n) {
    txt_buf *a = k3_grow(p->ans, &p->cap_ans, (size_t)p->n_ans + 1, sizeof *a, 16);
    if (!a)
        return;
    p->ans    = a;
    txt_buf b = {0};
    if (txt_buf_add(&b, s ? s : "", n) == 0)
        p->ans[p->n_ans++] = b;
}
static void ans_drop(plain *p, int keep) { /* keep < 0 (a /retry before any answer): none */
    while (p->n_ans > keep && p->n_ans > 0)
        free(p->ans[--p->n_ans].p);
}

/* After writing to stdout: a closed or broken stdout is reported once and makes the exit
 * status 1 (the conversation and its autosave go on). */
static void out_check(plain *p) {
    if (fflush(stdout) == 0 && !ferror(stdout))
        return;
    if (!p->out_err) {
        p->out_err = errno ? errno : EIO;
        txt_term_printf(stderr,
                        "k3chat: cannot write the answer to standard output: %s; stopping (no more input is "
                        "read)\n",
                        strerror(p->out_err));
        if (p->eng)
            ue_cancel(p->eng); /* nobody reads the rest: the autosave keeps what came, interrupted */
    }
    clearerr(stdout);
}

static void plain_log(int level, const char *msg, void *ud) {
    (void)ud;
    if (level <= K3_LOG_LEVEL_WARN || (level == K3_LOG_LEVEL_INFO && chat_verbose()))
        txt_term_printf(stderr, "k3chat: %s\n", msg);
}

/* Ends a load-progress line before anything else goes to stderr or the prompt shows. */
static void progress_end(plain *p) {
    if (p->progress)
        fputs("\r\033[K", stderr);
    p->progress = 0;
}

static void print_stats(plain *p, const ue_stats *now) {
    char set[256];
    chat_settings_str(&p->cs, set, sizeof set);
    txt_term_printf(stderr, "k3chat: settings: %s\n", set);
    const ue_stats *s = &p->st;
    if (s->n_think + s->n_response > 0 || s->n_prefill > 0)
        txt_term_printf(
            stderr,
            "k3chat: last turn: %d reasoning + %d answer tokens, %.1f tok/s, first token after %.2f s, "
            "%d prompt tokens processed\n",
            s->n_think, s->n_response, s->tok_s > 0 ? s->tok_s : 0, s->ttft_s > 0 ? s->ttft_s : 0,
            s->n_prefill);
    else
        txt_term_printf(stderr, "k3chat: last turn: none yet\n");
    if (now->ctx_max > 0)
        txt_term_printf(stderr, "k3chat: context: %d of %d tokens; memory: %.2f GB resident", now->ctx_used,
                        now->ctx_max, now->mem_gb);
    else /* a server that does not say its context size */
        txt_term_printf(
            stderr, "k3chat: context: %d tokens (the server does not say its size); memory: %.2f GB resident",
            now->ctx_used, now->mem_gb);
    if (now->expert_gb >= 0)
        txt_term_printf(stderr, "; expert cache: %.1f GB", now->expert_gb);
    if (now->expert_hit >= 0)
        txt_term_printf(stderr, ", %.0f%% hits", now->expert_hit * 100);
    if (now->vk_budget_gb > 0)
        txt_term_printf(stderr, "; Vulkan tier: %.2f of %.2f GB", now->vk_used_gb, now->vk_budget_gb);
    fputc('\n', stderr);
}

/* Why an answer stopped early: how the turn ended (UE_DONE_LENGTH, UE_DONE_CONTEXT), and for a
 * remote server's "length" the settings and the token counts. */
static void report_cut(plain *p, int how, const ue_stats *s) {
    int n = s->n_think + s->n_response, max = p->cs.gen.max_tokens;
    if (how == UE_DONE_CONTEXT)
        txt_term_printf(
            stderr,
            "k3chat: the answer was cut off: the context is full (K3_MAXT=%d tokens); "
            "/forget drops the oldest exchange, /clear starts anew, a larger K3_MAXT holds more\n",
            s->ctx_max);
    else if (max > 0 && n >= max)
        txt_term_printf(stderr, "k3chat: the answer was cut off at the --max-tokens limit (%d tokens)\n",
                        max);
    else if (p->cs.server_sampling && !(s->ctx_max > 0 && s->ctx_used >= s->ctx_max))
        /* a remote server's finish_reason "length" with room left in its context: its own default
         * max_tokens (SGLang's is 128), which /forget or /clear would not change */
        txt_term_printf(stderr,
                        "k3chat: the answer was cut off: the server stopped it at a length limit after %d "
                        "tokens (%s); --max-tokens N asks for more\n",
                        n,
                        s->ctx_max > 0 ? "its default max_tokens: the context has room"
                                       : "its default max_tokens, or its context");
    else if (s->ctx_max > 0) /* ctx_used is what the next prompt needs, which can exceed it */
        txt_term_printf(stderr,
                        "k3chat: the answer was cut off: the context is full (%d tokens); "
                        "/forget drops the oldest exchange, /clear starts anew\n",
                        s->ctx_max);
    else
        txt_term_printf(stderr, "k3chat: the answer was cut off: the context is full; "
                                "/forget drops the oldest exchange, /clear starts anew\n");
}

static void push_literal(EditLine *el, const char *s, int back);

/* EV_TOKEN: a piece of the answer to stdout (kept in p->cur for /copy), or of its reasoning to
 * stderr, dimmed (kept in p->think for a rescue; shown unless /show-thinking is off). */
static void on_token(plain *p, const ui_ev *e) {
    progress_end(p);
    if (e->ch == EV_CH_THINK) {
        txt_buf_add(&p->think, e->text, strlen(e->text));
        if (p->cs.show_thinking) { /* /show-thinking off: the model thinks, nothing is shown */
            fputs(p->esc ? "\033[2m" : "", stderr);
            txt_term_put(stderr, &p->esc_err, e->text, strlen(e->text));
            fputs(p->esc ? "\033[0m" : "", stderr);
            fflush(stderr);
        }
    } else {
        if (p->last_ch == EV_CH_THINK)
            fputc('\n', stderr);
        txt_term_put(stdout, &p->esc_out, e->text, strlen(e->text));
        txt_buf_add(&p->cur, e->text, strlen(e->text));
        out_check(p);
    }
    p->last_ch = e->ch;
}

/* EV_PREFILL: a live line on a terminal, else a line per update (about one a second). */
static void on_prefill(plain *p, const ui_ev *e) {
    if (p->lp.tty || ev_now() - p->pf_last >= 1.0 || e->a == e->b) {
        p->pf_last = ev_now();
        fprintf(stderr, "%sk3chat: prefill %llu/%llu tokens, %.2f GB of experts read%s",
                p->lp.tty ? "\r" : "", (unsigned long long)e->a, (unsigned long long)e->b, e->x / 1e9,
                p->lp.tty ? "\033[K" : "\n");
        fflush(stderr);
        p->progress = p->lp.tty;
    }
}

/* EV_DONE: the turn's end: the answer's last line ended, the failed-message count (a /retry or
 * /edit that got its answer takes its failure back), the answer kept for /copy, the statistics,
 * and why an answer was cut. */
static void on_done(plain *p, const ui_ev *e) {
    progress_end(p);
    txt_term_end(stderr, &p->esc_err);
    txt_term_end(stdout, &p->esc_out);
    if (p->last_ch == EV_CH_THINK)
        fputc('\n', stderr);
    if (!p->replaying &&
        (p->last_ch >= 0 || e->i == UE_DONE_OK || e->i == UE_DONE_LENGTH || e->i == UE_DONE_CONTEXT))
        fputc('\n', stdout);
    if (e->i == UE_DONE_CANCELLED)
        txt_term_printf(stderr, "k3chat: stopped\n");
    if (e->i == UE_DONE_ERROR && !p->replaying && (p->turn_started || !p->redo)) {
        p->failed += !(p->redo && p->last_failed); /* the same message failing again: once */
        p->last_failed = 1;
    } else if ((e->i == UE_DONE_OK || e->i == UE_DONE_LENGTH || e->i == UE_DONE_CONTEXT) && !p->replaying &&
               p->redo && p->last_failed) {
        p->failed--; /* the message got its answer after all */
        p->last_failed = 0;
    }
    if (!p->replaying && (e->i != UE_DONE_ERROR || p->cur.n))
        ans_push(p, p->cur.p, p->cur.n);
    p->cur.n = p->think.n = 0;
    if (!p->replaying)
        p->st = e->st;
    out_check(p);
    if (e->i == UE_DONE_LENGTH || e->i == UE_DONE_CONTEXT)
        report_cut(p, e->i, &e->st);
    p->last_ch   = -1;
    p->replaying = 0;
    p->in_turn   = 0;
}

/* Handle one event; returns 1 when a turn finished. */
static int on_event(plain *p, ui_ev *e) {
    switch (e->type) {
    case EV_PROGRESS:
        load_prog_cb(e->text, e->a, e->b, &p->lp);
        p->progress = p->lp.tty; /* a live line is on stderr */
        break;
    case EV_READY:
        p->ready = 1;
        chat_settings_model(&p->cs, &e->gen);
        progress_end(p);
        load_prog_finish(&p->lp, 1);
        break;
    case EV_FATAL:
        p->fatal = 1;
        progress_end(p);
        load_prog_finish(&p->lp, 0);
        txt_term_printf(stderr, "k3chat: %s\n", e->text ? e->text : "the engine failed");
        return 1;
    case EV_TOKEN:
        on_token(p, e);
        break;
    case EV_PREFILL:
        on_prefill(p, e);
        break;
    case EV_DONE:
        on_done(p, e);
        return 1;
    case EV_STATS:
        if (e->i) /* the latest context figures; /stats prints them when its command is done */
        {
            p->now      = e->st;
            p->have_now = 1;
        }
        break;
    case EV_TURN:
        p->turn_started = 1;
        p->in_turn      = 1;
        break;
    case EV_ERROR:
        progress_end(p);
        if (!p->fatal) /* after it, only the engine's "no model is loaded" for a message sent */
            txt_term_printf(stderr, "k3chat: %s\n", e->text ? e->text : "error");
        break;
    case EV_INFO:
        progress_end(p);
        txt_term_printf(stderr, "k3chat: %s\n", e->text ? e->text : "");
        break;
    case EV_ACK:
        p->acked++;
        if (e->i == EV_CMD_STATS && p->want_stats && p->have_now) {
            p->want_stats = 0;
            print_stats(p, &p->now);
        }
        break;
    case EV_RESET:
        ans_drop(p, 0);
        free(p->last_user);
        p->last_user = NULL;
        break;
    case EV_MSG:
        if (e->i == UE_ROLE_ASSISTANT)
            ans_push(p, e->text, e->text ? strlen(e->text) : 0);
        if (e->i == UE_ROLE_USER && e->text) {
            free(p->last_user);
            p->last_user = strdup(e->text);
        }
        break;
    case EV_UNDO:
        if (!p->in_turn)
            ans_drop(p, p->n_ans - 1); /* /undo: the last exchange's answer goes */
        else if (p->el && p->last_user)
            push_literal(p->el, p->last_user, 0); /* a turn that failed before it began: no answer of it was
                                                  kept, and its message is offered again at the prompt */
        break;
    case EV_SETTINGS: {
        char msg[300];
        chat_settings_loaded(&p->cs, &e->gen, msg, sizeof msg);
        ue_settings(p->eng, &p->cs.gen); /* the options that won over the transcript's */
        txt_term_printf(stderr, "k3chat: %s\n", msg);
        break;
    }
    default:
        break;
    }
    return 0;
}

/* Offer s on the next prompt, the cursor back clusters before its end: libedit takes pushed text as keys, so
 * each control character in it (C0, DEL, C1: a transcript's message may hold any) goes behind a ^V
 * (ed-quoted-insert) and is inserted as it is, shown by libedit as ^X, instead of running as an editing
 * command (^A moved the cursor, ^D at the start ended the chat, ESC sequences ran meta keys). */
static void push_literal(EditLine *el, const char *s, int back) {
    txt_buf b = {0};
    for (size_t i = 0, n = strlen(s); i < n;) {
        unsigned char c   = (unsigned char)s[i];
        size_t        l   = 1;
        int           ctl = c < 0x20 || c == 0x7f;
        if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] < 0xa0)
            ctl = 1, l = 2; /* U+0080..U+009F */
        if ((ctl && txt_buf_add(&b, "\026", 1)) || txt_buf_add(&b, s + i, l)) {
            free(b.p);
            return;
        }
        i += l;
    }
    while (back-- > 0) /* then back by back clusters (^B: inp_bind_clusters) */
        if (txt_buf_add(&b, "\002", 1)) {
            free(b.p);
            return;
        }
    if (b.n && !txt_buf_add(&b, "", 1))
        el_push(el, b.p);
    free(b.p);
}

/* /copy, /edit and /raw in line mode; 1 when r was one of them. */
static int md_command(plain *p, const cmd_result *r) {
    char msg[1024];
    switch (r->id) {
    case CMD_RAW:
        txt_term_printf(
            stderr,
            "k3chat: line mode always prints the raw Markdown; /raw applies to the full-screen interface\n");
        return 1;
    case CMD_COPY: {
        clip_req     q;
        txt_buf      out = {0};
        const char **a   = malloc((size_t)(p->n_ans + 1) * sizeof *a);
        size_t      *l   = malloc((size_t)(p->n_ans + 1) * sizeof *l);
        for (int k = 0; a && l && k < p->n_ans; k++) {
            a[k] = p->ans[k].p ? p->ans[k].p : "";
            l[k] = p->ans[k].n;
        }
        if (!a || !l)
            snprintf(msg, sizeof msg, "/copy: out of memory");
        else if (clip_parse(r->arg, &q, msg, sizeof msg) == 0 &&
                 clip_select(&q, a, l, p->n_ans, &out, msg, sizeof msg) == 0) {
            if (!isatty(1))
                snprintf(msg, sizeof msg,
                         "/copy: standard output is not a terminal, so there is no clipboard to "
                         "reach; /export FILE.md writes the conversation to a file");
            else
                clip_send(1, out.p, out.n, msg, sizeof msg);
        }
        txt_term_printf(stderr, "k3chat: %s\n", msg);
        free(a);
        free(l);
        free(out.p);
        return 1;
    }
    case CMD_EDIT:
        if (!p->last_user) {
            txt_term_printf(stderr, "k3chat: /edit: there is no message of yours to edit\n");
            return 1;
        }
        p->edit_pending = 1;
        if (p->el) {
            /* offered on the next prompt, one line (newlines would send it at once); the user
             * is told, since the message sent will differ from the one edited */
            int n_lines = 1;
            for (char *c = p->last_user; *c; c++)
                if (*c == '\n' || *c == '\r') {
                    n_lines += *c == '\n';
                    *c = ' ';
                }
            if (n_lines > 1)
                txt_term_printf(stderr,
                                "k3chat: /edit: your message has %d lines; line mode offers it as one, "
                                "the newlines turned into spaces\n",
                                n_lines);
            push_literal(p->el, p->last_user, 0);
        }
        txt_term_printf(
            stderr,
            "k3chat: the next message replaces your last one and its answer (kept in the transcript)\n");
        return 1;
    default:
        return 0;
    }
}

/* The turn does not stop (the engine blocked in a call that does not return: a hung file system
 * or server): quit without it, what the user saw of the answer in the autosave (ue_rescue), as
 * the full-screen chat's Ctrl-C after its notice does. The caller returns to cli_plain's end. */
static void quit_without_worker(plain *p) {
    char msg[1024];
    txt_term_end(stderr, &p->esc_err);
    txt_term_end(stdout, &p->esc_out);
    if (p->cur.n) /* the answer's line ends, as at a turn's end */
        fputc('\n', stdout);
    out_check(p);
    txt_term_printf(stderr,
                    "k3chat: quitting without waiting for the engine, which did not stop (blocked in a call "
                    "that does not return: a hung file system or server?)\n");
    p->rescued =
        ue_rescue(p->eng, p->cur.n ? p->cur.p : "", p->think.n ? p->think.p : NULL, 5, msg, sizeof msg);
    txt_term_printf(stderr, "k3chat: %s\n", msg);
    p->abandon = 1;
}

/* Ctrl-C while a turn runs: the first stops it; one that has not stopped it a second later is
 * told (stop_tick), and Ctrl-C then quits without waiting for the engine. */
static void stop_key(plain *p) {
    if (p->stop_told) {
        quit_without_worker(p);
        return;
    }
    if (!p->stop_t)
        p->stop_t = ev_now();
    ue_cancel(p->eng);
}
static void stop_tick(plain *p) {
    if (!p->stop_t || p->stop_told || ev_now() - p->stop_t < 1.0)
        return;
    p->stop_told = 1;
    progress_end(p);
    txt_term_end(stderr, &p->esc_err);
    txt_term_printf(stderr,
                    "%sk3chat: stopping: the engine has not stopped the answer (it may be blocked in a "
                    "read from a file system or a server that does not answer); Ctrl-C again quits "
                    "without waiting for it (the answer so far is autosaved, marked interrupted)\n",
                    p->last_ch >= 0 ? "\n" : ""); /* after the line streaming */
}

/* Process events until a turn ends (until_done) or the queue is idle. */
static void drain(plain *p, int until_done) {
    double term_t = 0; /* when SIGTERM or SIGHUP stopped the turn */
    in_turn       = until_done;
    p->stop_t     = 0;
    p->stop_told  = 0;
    for (;;) {
        ui_ev e;
        if (got_int && until_done) { /* else it is settle's, which calls this between its waits */
            got_int = 0;
            stop_key(p);
            if (p->abandon)
                return;
        }
        if (until_done)
            stop_tick(p);
        if (got_term && until_done && term_t == 0) {
            term_t = ev_now();
            ue_cancel(p->eng);
        } else if (term_t > 0 && ev_now() - term_t > 5.0) {
            /* an engine that does not stop (a hung server or file system): not waited for; what
             * came of the answer goes to the autosave with its message all the same */
            char msg[512];
            ue_rescue(p->eng, p->cur.n ? p->cur.p : "", p->think.n ? p->think.p : NULL, 2, msg, sizeof msg);
            die_by(got_term);
        }
        int got = ev_wait(p->q, &e, until_done ? 0.05 : 0.0);
        if (!got) {
            if (!until_done)
                break;
            continue;
        }
        int done = on_event(p, &e);
        ev_free(&e);
        if (done && until_done)
            break;
    }
    in_turn = 0;
    if (got_term) /* the turn is in the autosave (its EV_DONE comes after it) */
        die_by(got_term);
}

/* Ctrl-C while settle waits for the engine. A command can block its worker for good (a /load
 * of a FIFO no one writes, a file system or server that does not answer) and no signal gets it
 * out of such a read, so nothing is cancelled: the command stays the worker's, its result shows
 * when it ends (at a later prompt), and what is typed meanwhile is posted behind it. At a quit
 * (quitting) k3chat goes without waiting for it, as a turn that does not stop is left. */
static void settle_int(plain *p, int quitting) {
    progress_end(p);
    txt_term_end(stderr, &p->esc_err);
    if (isatty(STDIN_FILENO))
        fputc('\n', stderr); /* after the terminal's own ^C (no line editor reads now) */
    if (quitting) {
        txt_term_printf(stderr, "k3chat: quitting without waiting for the engine\n");
        ue_stop(p->eng);
        p->abandon = 1;
        return;
    }
    p->behind = 1;
    if (!atomic_load(&p->eng->ready)) {
        txt_term_printf(stderr, "k3chat: the model is still loading; what was typed runs once it has "
                                "loaded (Ctrl-C or Ctrl-D at an empty prompt quits)\n");
        return;
    }
    txt_term_printf(stderr,
                    "k3chat: the engine has not finished the command (it may be blocked reading a FIFO, "
                    "a file system or a server that does not answer); its result shows when it ends, and "
                    "what is typed now waits for it\n");
}

/* Wait until the engine has run every command posted so far (load, save, ...) and their
 * events are printed: the worker answers each command with an EV_ACK after its other events,
 * so this waits for the acknowledgements rather than for a time, however late the worker
 * picks a command up. Ctrl-C ends the wait (settle_int, quitting: a quit's last wait): 1 then. */
static int settle(plain *p, int quitting) {
    while (!p->fatal && !p->abandon && (!atomic_load(&p->eng->ready) || p->acked != p->eng->posted)) {
        ui_ev e;
        if (got_int) {
            got_int = 0;
            settle_int(p, quitting);
            return 1;
        }
        if (ev_wait(p->q, &e, 0.01)) {
            on_event(p, &e);
            ev_free(&e);
        }
        drain(p, 0);
    }
    drain(p, 0);
    p->behind = 0;
    return 0;
}

/* On a terminal, quitting (or /clear) would drop turns that are on no disk (the autosave failed
 * and no /save since): the first request says so and is refused (1), the same one again goes
 * ahead. */
static int keep_unsaved(plain *p, int tty, const char *pre, int what) {
    char msg[256];
    if (!tty || p->fatal || !ue_unsaved_refuse(p->eng, &p->quit_warned, what, msg, sizeof msg))
        return 0;
    txt_term_printf(stderr, "%sk3chat: %s\n", pre, msg);
    return 1;
}

/* /undo: the newest history entry that is s (its newline aside) leaves the history and its
 * file (the full-screen chat's inp_history_drop, for line mode's own History). */
static void hist_drop(plain *p, const char *s) {
    HistEvent ev;
    size_t    ls = strlen(s);
    for (int r = history(p->hist, &ev, H_FIRST); r == 0; r = history(p->hist, &ev, H_NEXT)) {
        size_t le = strlen(ev.str);
        while (le > 0 && ev.str[le - 1] == '\n')
            le--;
        if (le == ls && !memcmp(ev.str, s, ls)) {
            history(p->hist, &ev, H_DEL, ev.num);
            if (p->hpath)
                history(p->hist, &ev, H_SAVE, p->hpath);
            return;
        }
    }
}

/* libedit on the terminal; a TERM the terminal database does not know (k3chat has said so) is
 * given to libedit as dumb, so it does not add a notice of its own. */
static EditLine *el_init_quiet(FILE *in, FILE *out) {
    const char *term  = getenv("TERM");
    int         err   = 0;
    char       *saved = NULL;
    if (term && *term && setupterm(term, fileno(out), &err) != OK) {
        saved = strdup(term);
        setenv("TERM", "dumb", 1);
    } else if (term && *term) {
        del_curterm(cur_term);
    }
    EditLine *el = el_init("k3chat", in, out, out);
    if (saved) {
        setenv("TERM", saved, 1);
        free(saved);
    }
    return el;
}

static int handle_text(plain *p, char *line) {
    if (line[0] == '/' && line[1] != '/') {
        cmd_result r;
        char       msg[1024];
        if (cmd_parse(line, &r) != 0) {
            txt_term_printf(stderr, "k3chat: %s\n", r.msg);
            return 0;
        }
        if (md_command(p, &r))
            return 0;
        if (r.id == CMD_LOAD && keep_unsaved(p, p->el != NULL, "", UE_DROP_LOAD))
            return 0;
        if (chat_apply(&p->cs, p->eng, &r, msg, sizeof msg)) {
            ue_settings(p->eng, &p->cs.gen); /* the context figure follows /think, /effort */
            if (msg[0])
                txt_term_printf(stderr, "k3chat: %s\n", msg);
            if (r.id == CMD_REPLAY) {
                p->replaying = 1;
                drain(p, 1);
            } else
                settle(p, 0);
            return 0;
        }
        switch (r.id) {
        case CMD_HELP: {
            /* at the terminal's width, 80 columns elsewhere (its lines ran to 95) */
            struct winsize ws;
            int cols = isatty(STDERR_FILENO) && ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0
                           ? ws.ws_col
                           : 80;
            if (r.arg[0]) {
                char u[128], one[512];
                snprintf(one, sizeof one, "%s  %s", cmd_usage((enum cmd_id)r.flag, u, sizeof u),
                         cmd_help((enum cmd_id)r.flag));
                txt_print_wrapped(stderr, one, cols);
            } else {
                txt_print_wrapped(stderr, chat_help_text(), cols);
            }
            break;
        }
        case CMD_CLEAR:
            if (keep_unsaved(p, p->el != NULL, "", UE_DROP_CLEAR))
                break;
            ue_clear(p->eng);
            settle(p, 0);
            break;
        case CMD_RETRY:
            ans_drop(p, p->n_ans - 1);
            p->redo         = 1;
            p->turn_started = 0;
            ue_retry(p->eng, &p->cs.gen);
            drain(p, 1);
            settle(p, 0);
            p->redo = 0;
            break;
        case CMD_UNDO:
            if (p->hist && p->last_user) /* no trace of it in the input history either */
                hist_drop(p, p->last_user);
            free(p->last_user);
            p->last_user = NULL;
            ue_undo(p->eng);
            settle(p, 0);
            break;
        case CMD_FORGET:
            ue_forget(p->eng);
            settle(p, 0);
            break;
        case CMD_QUIT:
            return 1;
        case CMD_THEME:
            txt_term_printf(stderr, "k3chat: themes apply to the full-screen interface only\n");
            break;
        case CMD_STATS:
            p->want_stats = 1;
            ue_stats_req(p->eng);
            if (!settle(p, 0) && p->want_stats) { /* no engine to ask (it failed to load): what the UI
                                                    knows; after a Ctrl-C the engine's comes later */
                p->want_stats = 0;
                print_stats(p, &p->st);
            }
            break;
        default:
            break;
        }
        return 0;
    }
    if (p->fatal) /* its error was said (EV_FATAL); "no model is loaded" misled after --endpoint's */
        return 1;
    const char *text = line[0] == '/' ? line + 1 : line;
    if (p->edit_pending && p->last_user) {
        ans_drop(p, p->n_ans - 1);
        p->redo = 1;
        ue_edit(p->eng, text, &p->cs.gen);
    } else {
        p->last_failed = 0; /* a new exchange: an earlier failure stays counted */
        ue_send(p->eng, text, &p->cs.gen);
    }
    p->edit_pending = 0;
    p->turn_started = 0;
    p->quit_warned  = 0; /* a new turn: ask again before dropping it */
    free(p->last_user);
    p->last_user = strdup(text);
    drain(p, 1);
    settle(p, 0); /* what the worker says after the turn (an autosave failure) before the next prompt */
    p->redo = 0;
    return p->fatal || p->abandon;
}

/* A line of nread bytes, as read (a NUL byte in it does not end it). */
static int handle_line(plain *p, char *line, ssize_t nread) {
    size_t n = nread > 0 ? (size_t)nread : 0;
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = 0;
    if (!n)
        return 0;
    char what[32], note[256];
    snprintf(what, sizeof what, "line %d", p->lineno);
    /* A NUL byte would end the message there without a word (C strings, JSON): it becomes
     * U+FFFD, as an invalid byte does, and the user is told */
    char  *nul = memchr(line, 0, n), *wide = NULL;
    size_t first = nul ? (size_t)(nul - line) : 0, n_nul = 0;
    if (nul) {
        if (!(wide = malloc(n * 3 + 1))) {
            txt_term_printf(stderr, "k3chat: %s: out of memory\n", what);
            return 0;
        }
        size_t w = 0;
        for (size_t i = 0; i < n; i++) {
            if (line[i]) {
                wide[w++] = line[i];
            } else {
                memcpy(wide + w, "\xEF\xBF\xBD", 3);
                w += 3;
                n_nul++;
            }
        }
        wide[w] = 0;
        line = wide, n = w;
        txt_term_printf(stderr, "k3chat: %s: %zu NUL byte%s (the first is byte %zu) replaced with U+FFFD\n",
                        what, n_nul, n_nul == 1 ? "" : "s", first + 1);
    }
    char *fixed = chat_utf8_in(what, line, n, note, sizeof note);
    free(wide);
    if (!fixed) {
        txt_term_printf(stderr, "k3chat: %s: out of memory\n", what);
        return 0;
    }
    if (note[0])
        txt_term_printf(stderr, "k3chat: %s\n", note);
    int stop = handle_text(p, fixed);
    free(fixed);
    return stop;
}

static const char *prompt_fn(EditLine *el) {
    (void)el;
    return "> ";
}

/* Setup: the locale note, the settings, the loading line, the event queue and the engine with the
 * command line's settings, SIGINT, --system and --load. 0, or 1 when the queue or the engine could
 * not start (nothing is left to free then). */
static int plain_start(plain *p, const ui_opts *o) {
    char loc[320];
    if (txt_locale(loc, sizeof loc) && isatty(0)) /* typing: what the locale does to it */
        txt_term_printf(stderr, "k3chat: %s\n", loc);
    chat_settings_init(&p->cs, o);
    p->err_tty       = isatty(2);
    const char *term = getenv("TERM");
    p->esc           = p->err_tty && term && *term && strcmp(term, "dumb");
    load_prog_init(&p->lp, stderr);
    if (!p->esc) { /* a dumb terminal or no terminal: a line every ~10 s, no live line */
        p->lp.tty   = 0;
        p->lp.every = 10.0;
    }
    p->q = ev_queue_new(0);
    if (!p->q)
        return 1;
    k3_log_set_callback(plain_log, NULL);
    p->eng = ue_start(o, p->q);
    if (!p->eng) {
        ev_queue_free(p->q);
        return 1;
    }
    p->eng->no_input_line = !(isatty(0) && isatty(2)); /* as the EditLine of editor_open */
    ue_settings(p->eng, &p->cs.gen);                   /* the command line's, before anything is measured */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_int;
    sigaction(SIGINT, &sa, NULL);
    if (o->system && *o->system)
        ue_system(p->eng, o->system);
    if (o->load) {
        ue_load(p->eng, o->load);
        settle(p, 0);
    }
    return 0;
}

/* SIGTERM and SIGHUP, and on a terminal (stdin and stderr) the line editor: p->el with the emacs
 * keys and the cluster bindings, the job-control handlers, and the input history p->hist, kept in
 * the file p->hpath (hpath, n bytes, owned by the caller; NULL when there is none). On a pipe
 * p->el stays NULL and read_line reads with getline. */
static void editor_open(plain *p, char *hpath, size_t n) {
    struct sigaction st;
    memset(&st, 0, sizeof st);
    st.sa_handler = on_term;
    st.sa_flags   = SA_RESTART;
    sigaction(SIGTERM, &st, NULL);
    sigaction(SIGHUP, &st, NULL);
    if (!isatty(0) || !isatty(2))
        return;
    EditLine *el = el_init_quiet(stdin, stderr);
    if (!el)
        return;
    if (tcgetattr(0, &tty_found) == 0) {
        have_found = 1;
        tstp_mode(1);
    }
    el_set(el, EL_EDITOR, "emacs");
    inp_bind_clusters(el); /* after the editor: its keymap is set up anew */
    p->el = el;
    el_set(el, EL_PROMPT, prompt_fn);
    History *hist = history_init();
    if (!hist)
        return;
    HistEvent he;
    history(hist, &he, H_SETSIZE, 1000);
    int has_hist = inp_history_path(hpath, n) == 0;
    if (has_hist)
        history(hist, &he, H_LOAD, hpath);
    el_set(el, EL_HIST, history, hist);
    p->hist  = hist;
    p->hpath = has_hist ? hpath : NULL;
}

/* Back from Ctrl-Z or a SIGSTOP: the prompt again, with what was typed and the cursor where it
 * was, from the row's start: after fg the shell left the cursor on a row of its own, and a
 * SIGCONT that stopped nothing redraws the line in place. */
static void prompt_again(EditLine *el) {
    const LineInfo *li    = el_line(el);
    char           *draft = li ? strndup(li->buffer, (size_t)(li->lastchar - li->buffer)) : NULL;
    int             back  = 0; /* the cursor where it was: clusters after it */
    for (const char *c = li ? li->cursor : NULL; c && c < li->lastchar; back++) {
        int w, f;
        c += txt_cluster(c, (size_t)(li->lastchar - c), &w, &f);
    }
    if (draft && *draft)
        push_literal(el, draft, back);
    free(draft);
    fputc('\r', stderr);
}

enum { LINE_GOT, LINE_AGAIN, LINE_END }; /* what read_line got */

/* One line of input into *line (malloc'd; *nread bytes, as a NUL byte does not end it): from the
 * line editor on a terminal, entered in the history, else from stdin. LINE_AGAIN: prompt again
 * (back from a stop, a Ctrl-C that dropped the typed line, a quit refused for unsaved work);
 * LINE_END: the input ended or the user quit. */
static int read_line(plain *p, char **line, ssize_t *nread) {
    EditLine *el = p->el;
    *line        = NULL;
    *nread       = 0;
    if (!el) {
        size_t cap = 0;
        errno      = 0;
        *nread     = getline(line, &cap, stdin);
        if (*nread < 0) {
            free(*line);
            *line = NULL;
        }
        return *line ? LINE_GOT : LINE_END;
    }
    int n;
    progress_end(p); /* the prompt starts its own line */
    got_int = got_cont = 0;
    if (tstp_act.sa_handler)
        tstp_mode(0);
    const char *s = el_gets(el, &n);
    if (tstp_act.sa_handler)
        tstp_mode(1);
    if ((!s || n <= 0) && got_cont && !got_int) {
        prompt_again(el);
        return LINE_AGAIN;
    }
    if ((!s || n <= 0) && got_int) {
        /* Ctrl-C at the prompt: a typed line is dropped (as in the TUI); at an empty prompt
         * k3chat quits */
        const LineInfo *li    = el_line(el);
        int             draft = li && li->lastchar > li->buffer;
        got_int               = 0;
        fputs("^C\n", stderr);
        if (draft) {
            el_reset(el);
            return LINE_AGAIN;
        }
        return keep_unsaved(p, 1, "", UE_DROP_QUIT) ? LINE_AGAIN : LINE_END;
    }
    if (!s || n <= 0) {
        if (keep_unsaved(p, 1, "\n", UE_DROP_QUIT)) /* after the terminal's ^D */
            return LINE_AGAIN;
        fputc('\n', stderr); /* the shell's prompt starts on a line of its own */
        return LINE_END;
    }
    *line  = strdup(s);
    *nread = *line ? (ssize_t)strlen(*line) : 0;
    if (p->hist && *line && (*line)[0] != '\n') {
        HistEvent he;
        history(p->hist, &he, H_ENTER, s);
        if (p->hpath)
            history(p->hist, &he, H_SAVE, p->hpath);
    }
    return *line ? LINE_GOT : LINE_END;
}

/* The loop: the engine's events, then a line of input, handled, until the input ends, the user
 * quits, the engine fails or stdout breaks. Returns the exit status so far (plain_end adds the
 * failures). */
static int chat_loop(plain *p) {
    for (;;) {
        drain(p, 0);
        if (p->fatal)
            return 1;
        char   *line;
        ssize_t nread;
        int     got = read_line(p, &line, &nread);
        if (got == LINE_AGAIN)
            continue;
        if (got == LINE_END)
            return 0;
        p->lineno++;
        int stop = handle_line(p, line, nread);
        free(line);
        if (p->abandon) /* Ctrl-C quit without the engine, which did not stop */
            return p->rescued < 0;
        if (p->out_err) /* a closed or broken stdout: the answers have nowhere to go */
            return 1;
        if (stop && keep_unsaved(p, p->el != NULL, "", UE_DROP_QUIT))
            continue;
        if (stop)
            return p->fatal;
    }
}

/* Teardown: the engine stopped (or left behind when it would not stop, or while the model still
 * loads), the line editor and history closed, everything freed. Returns the exit status: 1 when
 * rc is, stdout failed, the engine failed or a message went unanswered. */
static int plain_end(plain *p, int rc) {
    if (p->el && !p->fatal && !p->abandon && !atomic_load(&p->eng->ready)) {
        /* the user quit at the prompt while the model loads (minutes for a large one): the
         * load does not stop for a quit, and waiting for it held the terminal until it ended;
         * commands typed meanwhile had not run (nothing of them is lost: none was a message) */
        progress_end(p);
        txt_term_printf(stderr, "k3chat: quitting while the model loads, without waiting for it\n");
        ue_stop(p->eng);
        p->abandon = 1;
    }
    if (!p->fatal && !p->abandon && p->behind)
        txt_term_printf(stderr,
                        "k3chat: waiting for the engine to finish a command (Ctrl-C quits without it)\n");
    if (!p->fatal && !p->abandon)
        settle(p, 1);
    if (p->el)
        el_end(p->el);
    if (p->hist)
        history_end(p->hist);
    if (p->abandon) {
        ue_abandon(p->eng); /* its queues stay: the worker may still post to them */
    } else {
        ue_close(p->eng);
        drain(p, 0);
    }
    k3_log_set_callback(NULL, NULL);
    if (!p->abandon)
        ev_queue_free(p->q);
    ans_drop(p, 0);
    free(p->ans);
    free(p->cur.p);
    free(p->think.p);
    free(p->last_user);
    return rc || p->out_err || p->fatal || p->failed ? 1 : 0;
}

int cli_plain(const ui_opts *o) {
    plain P = {.last_ch = -1}, *p = &P;
    char  hpath[4096]; /* the history file's name (p->hpath) */
    if (plain_start(p, o))
        return 1;
    editor_open(p, hpath, sizeof hpath);
    return plain_end(p, chat_loop(p));
}
