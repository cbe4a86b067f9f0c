/* tui.c: k3chat's full-screen chat (ncursesw).
 *
 * DESIGN
 * One UI thread owns curses and libedit; the engine runs on a worker (engine.h) and talks to us
 * only through the event queue, whose wake-up pipe sits next to stdin in our poll(). State is
 * kept apart from drawing (htop/tmux style): event and key handlers change the state in `tui`
 * and set dirty bits; render() runs once per loop iteration and redraws the dirty regions, then
 * one doupdate(). While tokens stream, redraws are coalesced to at most one per FRAME_S.
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
 * ESC[200~/ESC[201~ defined as keys), use_default_colors, A_DIM/A_BOLD/A_REVERSE.
 */
#include "chat.h"
#include "cli.h"
#include "engine.h"
#include "input.h"
#include "k3.h"
#include "text.h"
#include "theme.h"

#include <curses.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>

#define MIN_COLS 40
#define MIN_ROWS 12
#define FRAME_S  0.020

enum { ROLE_INFO = 10, ROLE_ERROR };
enum { DIRTY_HIST = 1, DIRTY_THINK = 2, DIRTY_RESP = 4, DIRTY_STATUS = 8, DIRTY_INPUT = 16, DIRTY_ALL = 31 };
#define DIRTY_PANES (DIRTY_THINK | DIRTY_RESP)
enum { KEY_PASTE_BEGIN = KEY_MAX + 1, KEY_PASTE_END };

/* ==== state ================================================================= */

typedef struct entry {
    int    role;     /* UE_ROLE_* or ROLE_INFO / ROLE_ERROR               */
    txt_buf text;     /* content                                            */
    txt_buf think;    /* reasoning (assistant)                              */
    double think_s;  /* seconds of reasoning                               */
    int    n_think;  /* reasoning tokens                                   */
    int    expanded; /* reasoning unfolded in the conversation pane        */
    int    status;   /* UE_DONE_* of an assistant turn                     */
    int    queued;   /* user message waiting for the model to load         */
    char   summary[96]; /* the folded-reasoning line as drawn              */
} entry;

/* Final lines of a streaming pane (byte ranges of its buffer), and where wrapping resumes. */
#define TAIL_N 512
typedef struct tail_line {
    size_t off, len;
    int    role;
} tail_line;
typedef struct wrap_state wrap_state;
struct wrap_state {
    int    in_code;   /* inside a ``` block at the start of the raw line           */
    int    mid;       /* resuming inside a raw line                                */
    int    mid_fence; /* that raw line is a fence line                              */
    size_t last_off;  /* out: offset of the last line produced (where to resume)    */
};
typedef struct tail_cache {
    const char *base;        /* the buffer wrapped (a realloc or a new turn resets)   */
    size_t      len, start;  /* its length last time; where wrapping resumes          */
    int         width;
    wrap_state  ws;          /* state at start                                        */
    tail_line   ring[TAIL_N];/* final lines before start, oldest first from head      */
    int         head, n;
} tail_cache;

/* One drawn line of the conversation pane. */
typedef struct dline {
    int         ent;    /* entry index                           */
    const char *s;      /* bytes (into the entry) or a static    */
    size_t      len;
    int         role;   /* thm role                              */
    int         indent;
    int         fold;   /* the reasoning summary line (clickable) */
} dline;

typedef struct tui {
    const cli_opts *o;
    ue             *eng;
    ev_queue       *q;
    inp            *in;
    chat_settings   cs;
    thm_spec        theme[THM_N];
    char            theme_name[64];

    entry *ents; /* (n_ents) the conversation as displayed */
    int    n_ents, cap_ents;
    int    cur;       /* entry being streamed, -1 when none */
    int    streaming; /* a turn is in progress              */
    int    replaying;
    int    ignore_done; /* the EV_DONE of a turn already taken back by EV_UNDO */
    /* commands the display applied at once; the worker's echo of them is ignored until its
     * EV_ACK, so a message typed right after them is not dropped */
    int    clear_pending, undo_pending, load_pending;
    double turn_t0, think_t0, think_t1;

    /* model and statistics */
    int      ready, fatal;
    char     model[160];
    ue_stats st;
    char     load_what[256];
    uint64_t load_done, load_total;
    double   load_t0, load_rate;

    /* layout */
    int  rows, cols, too_small;
    int  hist_y, hist_h, think_y, think_h, resp_y, resp_h, status_y, input_y, input_h;
    int  dirty;
    int  scroll; /* conversation lines scrolled up from the bottom */
    int  mouse;
    int  paste;  /* inside a bracketed paste */
    txt_buf paste_buf;
    double last_draw, next_tick;
    int  quit;

    dline *dl; /* (n_dl) conversation pane lines, rebuilt when dirty */
    int    n_dl, cap_dl, dl_width, dl_valid;
    int    vis_first; /* dline index drawn on the pane's first row */
    tail_cache tc_think, tc_resp; /* incremental wrapping of the streaming panes */

    /* latency bookkeeping (K3_UI_STATS) */
    double tok_t_pending; /* oldest undisplayed token's push time, 0 = none */
    double lat_sum, lat_max;
    long   lat_n;
    double ui_cpu0, decode_wall;
} tui;

static volatile sig_atomic_t got_term;
static void on_term(int sig) {
    (void)sig;
    got_term = 1;
}

static entry *add_entry(tui *t, int role, const char *text) {
    if (t->n_ents == t->cap_ents) {
        int    cap = t->cap_ents ? t->cap_ents * 2 : 32;
        entry *e   = realloc(t->ents, (size_t)cap * sizeof *e);
        if (!e)
            return NULL;
        t->ents     = e;
        t->cap_ents = cap;
    }
    entry *e = &t->ents[t->n_ents++];
    memset(e, 0, sizeof *e);
    e->role = role;
    if (text)
        txt_buf_add(&e->text, text, strlen(text));
    t->dl_valid = 0;
    t->dirty |= DIRTY_HIST;
    return e;
}

static void drop_entries(tui *t, int keep) {
    while (t->n_ents > keep) {
        entry *e = &t->ents[--t->n_ents];
        free(e->text.p);
        free(e->think.p);
    }
    t->dl_valid = 0;
    t->dirty |= DIRTY_HIST;
}

static void notice(tui *t, int role, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void notice(tui *t, int role, const char *fmt, ...) {
    char    msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    add_entry(t, role, msg);
    t->scroll = 0;
}

/* ==== layout ================================================================ */

static int input_rows(tui *t, int width) {
    size_t      cur;
    const char *s = inp_text(t->in, &cur);
    int         n = txt_wrap(s, strlen(s), width, NULL, 0);
    if (inp_hint(t->in)[0])
        n++;
    int max = t->rows / 3 > 1 ? t->rows / 3 : 1;
    return n < 1 ? 1 : n > max ? max : n;
}

static void layout(tui *t) {
    getmaxyx(stdscr, t->rows, t->cols);
    t->too_small = t->cols < MIN_COLS || t->rows < MIN_ROWS;
    if (t->too_small)
        return;
    t->input_h  = input_rows(t, t->cols - 2);
    t->input_y  = t->rows - t->input_h;
    t->status_y = t->input_y - 1;
    int main_h  = t->status_y;
    t->think_h = t->resp_h = 0;
    if (t->streaming && t->cur >= 0) {
        int want_think = t->cs.show_thinking && (t->cs.gen.think || t->ents[t->cur].think.n);
        t->resp_h  = main_h * 2 / 5 > 4 ? main_h * 2 / 5 : 4;
        t->think_h = want_think ? (main_h / 4 > 3 ? main_h / 4 : 3) : 0;
        if (main_h - t->resp_h - t->think_h < 2)
            t->think_h = want_think ? 2 : 0;
    }
    t->hist_y  = 0;
    t->hist_h  = main_h - t->think_h - t->resp_h;
    t->think_y = t->hist_h;
    t->resp_y  = t->think_y + t->think_h;
    t->dirty   = DIRTY_ALL;
}

/* ==== drawing primitives ===================================================== */

/* Draw s[0..n) at (y, x) within w columns in role r; returns the columns used. Clusters are
 * placed one by one at the columns text.c computes, so curses' idea of widths cannot drift. */
static int draw_text(int y, int x, int w, const char *s, size_t n, int role) {
    int col = 0;
    attrset((attr_t)thm_attr((enum thm_role)role));
    for (size_t off = 0; off < n && col < w;) {
        int    cw, f;
        size_t len = txt_cluster(s + off, n - off, &cw, &f);
        if (f & TXT_F_TAB) {
            int sp = TXT_TAB - col % TXT_TAB;
            for (int k = 0; k < sp && col < w; k++)
                mvaddch(y, x + col++, ' ');
        } else if (f & (TXT_F_NL | TXT_F_CTRL)) {
            /* not drawn */
        } else if (col + cw <= w) {
            wchar_t wc[6];
            int     nw = 0;
            if (f & TXT_F_INVALID) {
                wc[nw++] = 0xFFFD;
            } else {
                /* the base character and the zero-width ones that follow it (combining marks,
                 * variation selectors); other members of an emoji ZWJ sequence are left out so
                 * the terminal's width agrees with ours */
                for (size_t o2 = 0; o2 < len && nw < 5;) {
                    utf8proc_int32_t cp;
                    utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + off + o2,
                                                          (utf8proc_ssize_t)(len - o2), &cp);
                    if (l <= 0)
                        break;
                    if (nw == 0 || (wcwidth((wchar_t)cp) == 0 && cp != 0x200D))
                        wc[nw++] = (wchar_t)cp;
                    o2 += (size_t)l;
                }
            }
            wc[nw] = 0;
            cchar_t cc;
            if (setcchar(&cc, wc, 0, 0, NULL) == OK)
                mvadd_wch(y, x + col, &cc);
            else
                mvaddch(y, x + col, '?');
            if (cw == 2 && wcwidth(wc[0]) == 1 && col + 1 < w)
                mvaddch(y, x + col + 1, ' ');
            col += cw;
        } else {
            break;
        }
        off += len;
    }
    return col;
}

static void fill_row(int y, int x, int w, int role) {
    attrset((attr_t)thm_attr((enum thm_role)role));
    mvhline(y, x, ' ', w);
}

/* A pane title: "── NAME · extra ───────". */
static void draw_title(int y, const char *name, const char *extra, int cols) {
    attrset((attr_t)thm_attr(THM_BORDER));
    mvhline(y, 0, ACS_HLINE, cols);
    int x = 2;
    x += draw_text(y, x, cols - x, " ", 1, THM_BORDER);
    x += draw_text(y, x, cols - x, name, strlen(name), THM_TITLE);
    if (extra && *extra) {
        x += draw_text(y, x, cols - x, " · ", strlen(" · "), THM_BORDER);
        x += draw_text(y, x, cols - x, extra, strlen(extra), THM_BORDER);
    }
    draw_text(y, x, cols - x, " ", 1, THM_BORDER);
}

/* ==== text to lines ========================================================= */

static void dl_push(tui *t, int ent, const char *s, size_t len, int role, int indent, int fold) {
    if (t->n_dl == t->cap_dl) {
        int    cap = t->cap_dl ? t->cap_dl * 2 : 256;
        dline *d   = realloc(t->dl, (size_t)cap * sizeof *d);
        if (!d)
            return;
        t->dl     = d;
        t->cap_dl = cap;
    }
    t->dl[t->n_dl++] = (dline){ent, s, len, role, indent, fold};
}

/* Wrap text into lines: code blocks (``` fences) get the code role; the text is cut at its last
 * complete UTF-8 character (a streamed token may end inside one). ws (may be NULL: a whole
 * text) gives the state at s[0] and receives the state at the start of the last line. */
static void text_lines(tui *t, int ent, const char *s, size_t n, int width, int role, int indent, wrap_state *ws) {
    wrap_state z = {0, 0, 0, 0};
    if (!ws)
        ws = &z;
    n           = txt_complete(s, n);
    int w       = width - indent > 4 ? width - indent : 4;
    int in_code = ws->in_code, first = 1;
    for (size_t p = 0; p <= n;) {
        const char *eol   = memchr(s + p, '\n', n - p);
        size_t      ln    = eol ? (size_t)(eol - (s + p)) : n - p;
        int         mid   = first && ws->mid;
        int         fence = mid ? ws->mid_fence : ln >= 3 && !strncmp(s + p, "```", 3);
        int         r     = (in_code || fence) ? THM_CODE : role;
        txt_line    lines[64], *lp = lines;
        int         nl = txt_wrap(s + p, ln, w, lines, 64);
        if (nl > 64 && (lp = malloc((size_t)nl * sizeof *lp)) != NULL)
            txt_wrap(s + p, ln, w, lp, nl); /* a long paragraph: all its lines */
        for (int k = 0; k < nl && lp; k++)
            dl_push(t, ent, s + p + lp[k].off, lp[k].len, r, indent, 0);
        if (nl > 0 && lp) {
            ws->last_off  = p + lp[nl - 1].off;
            ws->mid       = lp[nl - 1].off > 0 || mid;
            ws->mid_fence = fence;
            ws->in_code   = in_code;
        }
        if (lp != lines)
            free(lp);
        if (fence)
            in_code = !in_code;
        first = 0;
        if (!eol)
            break;
        p += ln + 1;
    }
}

static void build_lines(tui *t, int width) {
    t->n_dl = 0;
    for (int i = 0; i < t->n_ents; i++) {
        entry *e = &t->ents[i];
        if (i == t->cur && t->streaming)
            continue;
        switch (e->role) {
        case UE_ROLE_USER: {
            size_t mark = t->n_dl;
            text_lines(t, i, e->text.p ? e->text.p : "", e->text.n, width, THM_USER, 2, NULL);
            if ((size_t)t->n_dl > mark)
                t->dl[mark].fold = 2; /* first line carries the "›" marker */
            if (e->queued)
                dl_push(t, i, "(waiting for the model to load)", 31, THM_INFO, 2, 0);
            break;
        }
        case UE_ROLE_ASSISTANT:
            if (e->think.n) {
                char *fb = e->summary;
                snprintf(fb, sizeof e->summary, "%s thought for %.1f s · %d tokens", e->expanded ? "▾" : "▸", e->think_s,
                         e->n_think);
                dl_push(t, i, fb, strlen(fb), THM_THINK_SUMMARY, 0, 1);
                if (e->expanded)
                    text_lines(t, i, e->think.p, e->think.n, width, THM_THINK, 2, NULL);
            }
            text_lines(t, i, e->text.p ? e->text.p : "", e->text.n, width, THM_ASSISTANT, 0, NULL);
            if (e->status == UE_DONE_CANCELLED)
                dl_push(t, i, "[stopped]", 9, THM_INFO, 0, 0);
            else if (e->status == UE_DONE_LENGTH)
                dl_push(t, i, "[length limit reached]", 22, THM_INFO, 0, 0);
            break;
        case UE_ROLE_SYSTEM:
            text_lines(t, i, e->text.p, e->text.n, width, THM_SYSTEM, 2, NULL);
            break;
        case ROLE_INFO: text_lines(t, i, e->text.p, e->text.n, width, THM_INFO, 0, NULL); break;
        case ROLE_ERROR: text_lines(t, i, e->text.p, e->text.n, width, THM_ERROR, 0, NULL); break;
        }
        dl_push(t, i, "", 0, THM_NORMAL, 0, 0);
    }
    t->dl_width = width;
    t->dl_valid = 1;
}

/* ==== regions ================================================================ */

static void draw_loading(tui *t) {
    int y = t->hist_h / 2 - 2, w = t->cols - 8;
    if (y < 0)
        y = 0;
    char line[512];
    snprintf(line, sizeof line, "Loading %s", t->o->dir ? t->o->dir : "the model");
    draw_text(y, 4, w, line, strlen(line), THM_TITLE);
    draw_text(y + 1, 4, w, t->load_what, strlen(t->load_what), THM_NORMAL);
    int    bar = w - 40 > 10 ? (w - 40 < 50 ? w - 40 : 50) : 10;
    double f   = t->load_total ? (double)t->load_done / (double)t->load_total : 0;
    int    fill = (int)(f * bar);
    attrset((attr_t)thm_attr(THM_PROGRESS));
    for (int k = 0; k < bar; k++)
        mvaddstr(y + 2, 4 + k, k < fill ? "█" : "░");
    if (t->load_total)
        snprintf(line, sizeof line, " %3.0f%%  %.0f / %.0f MB  %.0f MB/s", f * 100, (double)t->load_done / 1e6,
                 (double)t->load_total / 1e6, t->load_rate / 1e6);
    else
        snprintf(line, sizeof line, " %.0f MB  %.0f MB/s", (double)t->load_done / 1e6, t->load_rate / 1e6);
    draw_text(y + 2, 4 + bar, w - bar, line, strlen(line), THM_NORMAL);
    const char *hint = "You can type already: messages are sent when the model is ready.";
    draw_text(y + 4, 4, w, hint, strlen(hint), THM_INFO);
}

static void draw_hist(tui *t) {
    for (int y = t->hist_y; y < t->hist_y + t->hist_h; y++)
        fill_row(y, 0, t->cols, THM_NORMAL);
    if (!t->ready && !t->fatal && t->n_ents == 0) {
        draw_loading(t);
        return;
    }
    if (t->n_ents == 0) {
        const char *w1 = "k3chat: type a message and press Enter. /help lists commands and keys.";
        draw_text(t->hist_h / 2, 2, t->cols - 4, w1, strlen(w1), THM_INFO);
        return;
    }
    int width = t->cols - 1;
    if (!t->dl_valid || t->dl_width != width)
        build_lines(t, width);
    int max_scroll = t->n_dl - t->hist_h > 0 ? t->n_dl - t->hist_h : 0;
    if (t->scroll > max_scroll)
        t->scroll = max_scroll;
    if (t->scroll < 0)
        t->scroll = 0;
    int first = t->n_dl - t->hist_h - t->scroll;
    if (first < 0)
        first = 0;
    t->vis_first = first;
    for (int r = 0; r < t->hist_h && first + r < t->n_dl; r++) {
        dline *d = &t->dl[first + r];
        int    x = d->indent;
        if (d->fold == 2)
            draw_text(t->hist_y + r, 0, 2, "› ", strlen("› "), THM_PROMPT);
        draw_text(t->hist_y + r, x, t->cols - x, d->s, d->len, d->role);
    }
    if (t->scroll > 0) {
        char m[64];
        snprintf(m, sizeof m, " ↑ %d more · PgDn ", t->scroll);
        int w = txt_width(m, strlen(m), 0);
        draw_text(t->hist_y + t->hist_h - 1, t->cols - w - 1, w, m, strlen(m), THM_STATUS);
    }
}

/* The tail of a streaming text in rows [y0, y0 + h). Greedy wrapping never changes a line once
 * a later one exists, so each frame wraps only from the start of the last line drawn before
 * (tail_cache): a frame costs the same however long the text grows. */
static void draw_tail(tui *t, int y0, int h, const txt_buf *b, int role, tail_cache *c) {
    int width = t->cols - 1, used[TAIL_N] = {0};
    if (c->width != width || c->len > b->n) {
        memset(c, 0, sizeof *c);
        c->width = width;
    }
    c->base = b->p;
    c->len  = b->n;
    if (h > TAIL_N)
        h = TAIL_N;
    if (h <= 0 || !b->n) {
        for (int y = y0; y < y0 + h; y++)
            fill_row(y, 0, t->cols, THM_NORMAL);
        return;
    }
    int        save_n = t->n_dl;
    wrap_state ws     = c->ws;
    text_lines(t, t->cur, b->p + c->start, b->n - c->start, width, role, 0, &ws);
    int n_new = t->n_dl - save_n, n_old = c->n < h ? c->n : h;
    int total = n_old + n_new, first = total > h ? total - h : 0;
    for (int r = 0; first + r < total; r++) {
        int k = first + r;
        if (k < n_old) {
            const tail_line *o = &c->ring[(c->head + c->n - n_old + k) % TAIL_N];
            used[r]            = draw_text(y0 + r, 0, t->cols, b->p + o->off, o->len, o->role);
        } else {
            dline *d = &t->dl[save_n + k - n_old];
            used[r]  = d->indent + draw_text(y0 + r, d->indent, t->cols - d->indent, d->s, d->len, d->role);
        }
    }
    for (int r = 0; r < h; r++)
        if (used[r] < t->cols)
            fill_row(y0 + r, used[r], t->cols - used[r], THM_NORMAL);
    /* every new line but the last is final: keep it, resume at the last */
    for (int k = 0; k + 1 < n_new; k++) {
        dline *d = &t->dl[save_n + k];
        c->ring[(c->head + c->n) % TAIL_N] = (tail_line){(size_t)(d->s - b->p), d->len, d->role};
        if (c->n < TAIL_N)
            c->n++;
        else
            c->head = (c->head + 1) % TAIL_N;
    }
    if (n_new > 1) {
        c->start += ws.last_off;
        c->ws = ws;
    }
    t->n_dl = save_n; /* the pane lines were scratch */
}

static void draw_panes(tui *t, int dirty) {
    if (!t->streaming || t->cur < 0)
        return;
    entry *e = &t->ents[t->cur];
    char   extra[96];
    if (t->think_h > 0 && (dirty & DIRTY_THINK)) {
        double s = e->think.n ? (t->think_t1 > 0 ? t->think_t1 : ev_now()) - t->think_t0 : 0;
        snprintf(extra, sizeof extra, "%.1f s · %d tokens", e->think.n ? s : 0.0, e->n_think);
        draw_title(t->think_y, "thinking", extra, t->cols);
        if (!t->dl_valid) /* draw_tail uses the line list as scratch space */
            build_lines(t, t->cols - 1);
        draw_tail(t, t->think_y + 1, t->think_h - 1, &e->think, THM_THINK, &t->tc_think);
    }
    if (t->resp_h > 0 && (dirty & DIRTY_RESP)) {
        snprintf(extra, sizeof extra, "%s", e->text.n ? "Ctrl-C stops" : "waiting for the first token · Ctrl-C stops");
        draw_title(t->resp_y, "response", extra, t->cols);
        if (!t->dl_valid)
            build_lines(t, t->cols - 1);
        draw_tail(t, t->resp_y + 1, t->resp_h - 1, &e->text, THM_ASSISTANT, &t->tc_resp);
    }
}

static void draw_status(tui *t) {
    static const char *eff[] = {"low", "high", "max"};
    char   seg[16][96];
    int    n = 0;
    const ue_stats *s = &t->st;
    fill_row(t->status_y, 0, t->cols, THM_STATUS);
    if (!t->ready) {
        if (t->fatal)
            snprintf(seg[n++], 96, "no model");
        else if (t->load_total)
            snprintf(seg[n++], 96, "loading %.0f%% · %.0f MB/s", 100.0 * (double)t->load_done / (double)t->load_total,
                     t->load_rate / 1e6);
        else
            snprintf(seg[n++], 96, "loading…");
    } else {
        snprintf(seg[n++], 96, "%.90s", t->model);
    }
    if (!t->mouse)
        snprintf(seg[n++], 96, "mouse off (F3)");
    if (t->scroll > 0)
        snprintf(seg[n++], 96, "scrolled ↑%d", t->scroll);
    snprintf(seg[n++], 96, "think %s", t->cs.gen.think ? eff[t->cs.gen.effort % 3] : "off");
    snprintf(seg[n++], 96, "T %.2f p %.2f", (double)t->cs.gen.temp, (double)t->cs.gen.top_p);
    if (s->tok_s > 0)
        snprintf(seg[n++], 96, "%.1f tok/s", s->tok_s);
    if (s->ttft_s > 0)
        snprintf(seg[n++], 96, "TTFT %.2f s", s->ttft_s);
    if (s->ctx_max > 0)
        snprintf(seg[n++], 96, "ctx %d/%d", s->ctx_used, s->ctx_max);
    if (s->expert_gb >= 0 && s->expert_hit >= 0)
        snprintf(seg[n++], 96, "experts %.0f%% of %.1f GB", s->expert_hit * 100, s->expert_gb);
    if (s->vk_budget_gb > 0)
        snprintf(seg[n++], 96, "VRAM %.1f/%.1f GB · %ld gpu hits", s->vk_used_gb, s->vk_budget_gb, s->vk_hits);
    if (s->mem_gb > 0)
        snprintf(seg[n++], 96, "mem %.2f GB", s->mem_gb);
    /* whole segments only: one that does not fit is left out (the model name is cut if need be) */
    int x = 1;
    for (int k = 0; k < n && x < t->cols - 2; k++) {
        int w = txt_width(seg[k], strlen(seg[k]), 0) + (k ? 3 : 0);
        if (k && x + w > t->cols - 1)
            continue;
        if (k)
            x += draw_text(t->status_y, x, t->cols - x, " │ ", strlen(" │ "), THM_STATUS);
        x += draw_text(t->status_y, x, t->cols - x, seg[k], strlen(seg[k]), k == 0 ? THM_STATUS_KEY : THM_STATUS);
    }
}

/* The input window; leaves the cursor at the editing position. */
static void draw_input(tui *t) {
    size_t      cur;
    const char *s  = inp_text(t->in, &cur);
    size_t      n  = strlen(s);
    int         w  = t->cols - 2, hint = inp_hint(t->in)[0] != 0;
    int         rows = t->input_h - hint;
    txt_line    lines[256];
    int         nl = txt_wrap(s, n, w, lines, 256);
    if (nl > 256)
        nl = 256;
    /* the line holding the cursor: the last one starting at or before it */
    int cl = 0;
    for (int k = 0; k < nl; k++)
        if (lines[k].off <= cur)
            cl = k;
    int first = cl - rows + 1 > 0 ? cl - rows + 1 : 0;
    for (int r = 0; r < t->input_h; r++)
        fill_row(t->input_y + r, 0, t->cols, THM_INPUT);
    if (hint) {
        const char *h = inp_hint(t->in);
        draw_text(t->input_y, 2, w, h, strlen(h), THM_INFO);
    }
    int y0 = t->input_y + hint;
    for (int r = 0; r < rows && first + r < nl; r++) {
        draw_text(y0 + r, 0, 2, first + r == 0 ? "› " : "  ", strlen("› "), THM_PROMPT);
        draw_text(y0 + r, 2, w, s + lines[first + r].off, lines[first + r].len, THM_INPUT);
    }
    int cx = 2 + txt_width(s + lines[cl].off, cur - lines[cl].off, 0);
    if (cx >= t->cols)
        cx = t->cols - 1;
    move(y0 + cl - first, cx);
}

static void render(tui *t, int force) {
    double now = ev_now();
    if (!t->dirty && !force)
        return;
    if (!force && t->streaming && now - t->last_draw < FRAME_S && !(t->dirty & DIRTY_INPUT))
        return; /* coalesce: poll() wakes us when the frame is due */
    if (t->too_small) {
        erase();
        char m[128];
        snprintf(m, sizeof m, "Terminal too small: %dx%d, k3chat needs at least %dx%d.", t->cols, t->rows,
                 MIN_COLS, MIN_ROWS);
        int w = t->cols > 0 ? t->cols : 1;
        mvaddnstr(t->rows / 2, 0, m, w);
        mvaddnstr(t->rows / 2 + 1, 0, "Enlarge the window (Ctrl-C or Ctrl-D quits).", w);
        refresh();
        t->dirty     = 0;
        t->last_draw = now;
        return;
    }
    if (t->dirty & (DIRTY_HIST | DIRTY_INPUT)) {
        int h = input_rows(t, t->cols - 2);
        if (h != t->input_h)
            layout(t);
    }
    if (t->dirty & DIRTY_HIST)
        draw_hist(t);
    if (t->dirty & DIRTY_PANES)
        draw_panes(t, t->dirty);
    if (t->dirty & DIRTY_STATUS)
        draw_status(t);
    draw_input(t);
    attrset(A_NORMAL);
    wnoutrefresh(stdscr);
    doupdate();
    t->dirty     = 0;
    t->last_draw = ev_now();
    if (t->tok_t_pending > 0) {
        double lat = t->last_draw - t->tok_t_pending;
        t->lat_sum += lat;
        t->lat_n++;
        if (lat > t->lat_max)
            t->lat_max = lat;
        t->tok_t_pending = 0;
    }
}

/* ==== engine events ========================================================= */

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
    t->think_t0  = t->think_t1 = 0;
    t->scroll    = 0;
    memset(&t->tc_think, 0, sizeof t->tc_think);
    memset(&t->tc_resp, 0, sizeof t->tc_resp);
    layout(t);
}

static void end_turn(tui *t, int status, const ue_stats *st) {
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
            drop_entries(t, t->cur); /* nothing to keep */
    }
    t->streaming = 0;
    t->cur       = -1;
    t->dl_valid  = 0;
    layout(t);
}

static void on_event(tui *t, ui_ev *e) {
    switch (e->type) {
    case EV_PROGRESS: {
        double now = ev_now();
        if (t->load_t0 == 0)
            t->load_t0 = now;
        else if (now > t->load_t0)
            t->load_rate = (double)e->a / (now - t->load_t0);
        snprintf(t->load_what, sizeof t->load_what, "%s", e->text ? e->text : "");
        t->load_done  = e->a;
        t->load_total = e->b;
        t->dirty |= DIRTY_HIST | DIRTY_STATUS;
        break;
    }
    case EV_READY:
        t->ready = 1;
        snprintf(t->model, sizeof t->model, "%s", e->text ? e->text : "model");
        t->st.ctx_max = e->i;
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
        notice(t, ROLE_ERROR, "%s", e->text ? e->text : "the engine failed");
        t->dirty |= DIRTY_ALL;
        break;
    case EV_TURN:
        t->turn_t0 = ev_now();
        break;
    case EV_TOKEN:
        if (t->cur < 0 || !t->streaming)
            break;
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
            layout(t);
        break;
    case EV_STATS:
        if (e->i) { /* partial: context, cache and memory only */
            t->st.ctx_used   = e->st.ctx_used;
            t->st.ctx_max    = e->st.ctx_max;
            t->st.expert_hit = e->st.expert_hit;
            t->st.expert_gb  = e->st.expert_gb;
            t->st.mem_gb     = e->st.mem_gb;
            t->st.vk_used_gb   = e->st.vk_used_gb;
            t->st.vk_budget_gb = e->st.vk_budget_gb;
            t->st.vk_hits      = e->st.vk_hits;
        } else {
            t->st = e->st;
        }
        t->dirty |= DIRTY_STATUS;
        break;
    case EV_DONE:
        if (!e->i || e->st.ctx_max)
            t->st = e->st;
        if (e->st.tok_s > 0 && e->st.n_response + e->st.n_think > 0)
            t->decode_wall += (e->st.n_response + e->st.n_think) / e->st.tok_s;
        if (t->replaying) {
            t->replaying = 0;
            break;
        }
        if (t->ignore_done) {
            t->ignore_done = 0;
            break;
        }
        end_turn(t, e->i, &e->st);
        break;
    case EV_ERROR: notice(t, ROLE_ERROR, "%s", e->text ? e->text : "error"); break;
    case EV_INFO: notice(t, ROLE_INFO, "%s", e->text ? e->text : ""); break;
    case EV_ACK:
        if (e->i == EV_CMD_CLEAR && t->clear_pending > 0)
            t->clear_pending--;
        else if (e->i == EV_CMD_UNDO && t->undo_pending > 0)
            t->undo_pending--;
        else if ((e->i == EV_CMD_LOAD || e->i == EV_CMD_FORGET) && t->load_pending > 0)
            t->load_pending--;
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
        break;
    }
    case EV_UNDO: {
        if (t->undo_pending)
            break; /* done already */
        if (t->streaming) { /* the turn failed before it began: its entry goes too */
            int k = last_user(t);
            if (k >= 0 && inp_empty(t->in) && t->ents[k].text.p)
                inp_insert(t->in, t->ents[k].text.p); /* to send again after /clear or /forget */
            t->streaming = 0;
            t->cur       = -1;
            t->ignore_done = 1;
            layout(t);
        }
        int k = t->n_ents;
        while (k > 0 && t->ents[k - 1].role != UE_ROLE_USER)
            k--;
        if (k > 0)
            drop_entries(t, k - 1);
        break;
    }
    default: break;
    }
}

static void pump_events(tui *t) {
    ui_ev e;
    ev_drain_fd(t->q);
    while (ev_pop(t->q, &e)) {
        on_event(t, &e);
        ev_free(&e);
    }
}

/* ==== commands and messages ================================================= */


static void send_message(tui *t, const char *text) {
    if (t->fatal) {
        notice(t, ROLE_ERROR, "no model is loaded, so nothing can answer (see the error above)");
        return;
    }
    entry *u = add_entry(t, UE_ROLE_USER, text);
    if (u)
        u->queued = !t->ready;
    start_turn(t);
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
    snprintf(t->theme_name, sizeof t->theme_name, "%.63s", name);
    thm_apply(t->theme);
    clearok(curscr, TRUE);
    t->dirty = DIRTY_ALL;
}

static void show_stats(tui *t) {
    const ue_stats *s = &t->st;
    char            set[256];
    chat_settings_str(&t->cs, set, sizeof set);
    notice(t, ROLE_INFO,
           "model: %s\nsettings: %s\nlast turn: %.1f tok/s decode, TTFT %.2f s, %d prompt tokens processed, "
           "%d reasoning + %d answer tokens, %.1f s thinking\ncontext: %d of %d tokens\n"
           "experts: %.0f%% cache hits, budget %.1f GB\nVulkan tier: %.2f of %.2f GB, %ld experts computed on the device\n"
           "memory: %.2f GB resident\n"
           "UI: %ld frames with new tokens, token-to-screen latency mean %.2f ms, max %.2f ms",
           t->ready ? t->model : "(not loaded)", set, s->tok_s > 0 ? s->tok_s : 0, s->ttft_s > 0 ? s->ttft_s : 0,
           s->n_prefill, s->n_think, s->n_response, s->think_s > 0 ? s->think_s : 0, s->ctx_used, s->ctx_max,
           s->expert_hit >= 0 ? s->expert_hit * 100 : 0, s->expert_gb >= 0 ? s->expert_gb : 0, s->vk_used_gb,
           s->vk_budget_gb, s->vk_hits, s->mem_gb,
           t->lat_n, t->lat_n ? t->lat_sum / (double)t->lat_n * 1e3 : 0, t->lat_max * 1e3);
}

static void run_command(tui *t, const char *line) {
    cmd_result r;
    char       msg[1024];
    if (cmd_parse(line, &r) != 0) {
        notice(t, ROLE_ERROR, "%s", r.msg);
        return;
    }
    int conv_changing = r.id == CMD_CLEAR || r.id == CMD_RETRY || r.id == CMD_UNDO || r.id == CMD_LOAD || r.id == CMD_FORGET ||
                        r.id == CMD_REPLAY;
    if (conv_changing && t->streaming) {
        notice(t, ROLE_ERROR, "/%s: a turn is in progress; stop it first with Ctrl-C", cmd_name(r.id));
        return;
    }
    if (chat_apply(&t->cs, t->eng, &r, msg, sizeof msg)) {
        if (r.id == CMD_REPLAY)
            t->replaying = 1;
        if (r.id == CMD_LOAD)
            t->load_pending++;
        if (msg[0])
            notice(t, ROLE_INFO, "%s", msg);
        if (r.id == CMD_SHOWTHINK)
            layout(t);
        t->dirty |= DIRTY_ALL;
        return;
    }
    switch (r.id) {
    case CMD_HELP:
        if (r.arg[0]) {
            char u[128];
            notice(t, ROLE_INFO, "%s  %s", cmd_usage((enum cmd_id)r.flag, u, sizeof u), cmd_help((enum cmd_id)r.flag));
        } else {
            notice(t, ROLE_INFO, "%s", chat_help_text());
        }
        break;
    case CMD_CLEAR:
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
        drop_entries(t, k + 1);
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
        drop_entries(t, last_user(t));
        break;
    case CMD_FORGET:
        ue_forget(t->eng); /* the display follows the worker's EV_RESET + EV_MSG */
        t->load_pending++;
        break;
    case CMD_STATS: show_stats(t); break;
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
    case CMD_QUIT: t->quit = 1; break;
    default: break;
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
    else if ((m.bstate & (BUTTON1_CLICKED | BUTTON1_PRESSED)) && m.y >= t->hist_y && m.y < t->hist_y + t->hist_h) {
        int k = t->vis_first + (m.y - t->hist_y);
        if (t->dl_valid && k < t->n_dl && t->dl[k].fold == 1) {
            t->ents[t->dl[k].ent].expanded ^= 1;
            t->dl_valid = 0;
            t->dirty |= DIRTY_HIST;
        }
    }
}

/* Wait for the next key, handling engine events and drawing meanwhile. Returns the key and
 * whether it is a function key (KEY_*), or 0 when asked to quit. */
static int next_key(tui *t, wint_t *k, int *fn) {
    int keys = 1; /* curses may hold keys already read: ask it first */
    for (;;) {
        if (got_term) {
            t->quit = 1;
            return 0;
        }
        if (keys) {
            int r = get_wch(k);
            if (r != ERR) {
                *fn = r == KEY_CODE_YES;
                return 1;
            }
        }
        render(t, 0);
        double now = ev_now();
        if ((t->streaming || !t->ready) && now >= t->next_tick) {
            /* the think timer and the load rate move even without events */
            t->dirty |= DIRTY_THINK | DIRTY_STATUS;
            t->next_tick = now + 0.25;
            continue;
        }
        /* While a frame is pending, sleep until it is due without waking for each token:
         * the events wait in the queue and the frame takes them all at once. */
        int pending = t->dirty != 0;
        int timeout = -1;
        if (pending)
            timeout = (int)((FRAME_S - (now - t->last_draw)) * 1000) + 1;
        else if (t->streaming || !t->ready)
            timeout = (int)((t->next_tick - now) * 1000) + 1;
        if (timeout < 0 && pending)
            timeout = 0;
        if (timeout < 0)
            timeout = 1000; /* idle: look for a SIGWINCH that came outside poll() once a second */
        struct pollfd p[2] = {{0, POLLIN, 0}, {ev_fd(t->q), POLLIN, 0}};
        int           pr   = poll(p, pending ? 1 : 2, timeout);
        if (pr < 0 && errno != EINTR)
            return 0;
        /* EINTR: SIGWINCH, which curses turns into KEY_RESIZE on the next get_wch */
        keys = pr < 0 || (pr == 0 && !pending) || (pr > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)));
        if (pending || (p[1].revents & POLLIN))
            pump_events(t);
        if (t->quit)
            return 0;
    }
}

/* Keys that are the UI's own, whatever libedit is doing. Returns 1 when handled. */
static int ui_key(tui *t, wint_t k, int fn) {
    if (!fn)
        return 0;
    switch (k) {
    case KEY_RESIZE: layout(t); clearok(curscr, TRUE); return 1;
    case KEY_PPAGE: scroll_by(t, t->hist_h > 4 ? t->hist_h - 2 : 2); return 1;
    case KEY_NPAGE: scroll_by(t, -(t->hist_h > 4 ? t->hist_h - 2 : 2)); return 1;
    case KEY_F(2): toggle_fold_all(t); return 1;
    case KEY_F(3): set_mouse(t, !t->mouse); return 1;
    case KEY_MOUSE: on_mouse(t); return 1;
    default: return 0;
    }
}

/* Function keys to the control characters libedit's Emacs map knows. */
static wchar_t libedit_key(wint_t k, int fn) {
    if (!fn)
        return (wchar_t)k;
    switch (k) {
    case KEY_LEFT: return 2;       /* ^B */
    case KEY_RIGHT: return 6;      /* ^F */
    case KEY_UP: return 16;        /* ^P */
    case KEY_DOWN: return 14;      /* ^N */
    case KEY_HOME: return 1;       /* ^A */
    case KEY_END: return 5;        /* ^E */
    case KEY_BACKSPACE: return 127;
    case KEY_DC: return 4;         /* ^D: delete under the cursor */
    case KEY_ENTER: return '\r';
    default: return 0;
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

static void paste_flush(tui *t) {
    if (t->paste_buf.n) {
        inp_insert(t->in, t->paste_buf.p);
        t->paste_buf.n = 0;
        t->paste_buf.p[0] = 0;
    }
}

static void on_key(tui *t, wint_t k, int fn) {
    t->dirty |= DIRTY_INPUT;
    if (t->too_small && !fn && (k == 3 || k == 4)) {
        t->quit = 1;
        return;
    }
    if (fn && k == KEY_PASTE_BEGIN) {
        t->paste = 1;
        return;
    }
    if (fn && k == KEY_PASTE_END) {
        t->paste = 0;
        paste_flush(t);
        return;
    }
    if (t->paste) { /* pasted text goes in as it is, newlines included */
        char    u[8];
        wint_t  c = fn ? (k == KEY_ENTER ? '\n' : 0) : (k == '\r' ? '\n' : k);
        if (c) {
            utf8proc_ssize_t l = utf8proc_encode_char((utf8proc_int32_t)c, (utf8proc_uint8_t *)u);
            txt_buf_add(&t->paste_buf, u, (size_t)l);
        }
        if (t->paste_buf.n > 65536)
            paste_flush(t);
        return;
    }
    if (ui_key(t, k, fn))
        return;
    if (!fn) {
        switch (k) {
        case 3: /* Ctrl-C */
            if (t->streaming || t->replaying) {
                ue_cancel(t->eng);
                return;
            }
            if (!inp_empty(t->in)) {
                inp_clear(t->in);
                inp_set_hint(t->in, "");
                return;
            }
            t->quit = 1;
            return;
        case 4: /* Ctrl-D at an empty prompt */
            if (inp_empty(t->in)) {
                t->quit = 1;
                return;
            }
            break;
        case 12: /* Ctrl-L */
            clearok(curscr, TRUE);
            t->dirty = DIRTY_ALL;
            return;
        case 26: /* Ctrl-Z */
            def_prog_mode();
            endwin();
            kill(getpid(), SIGTSTP);
            reset_prog_mode();
            clearok(curscr, TRUE);
            t->dirty = DIRTY_ALL;
            return;
        case 27: { /* ESC: Alt-Enter inserts a newline; ESC + key is a meta key for libedit */
            wint_t k2;
            int    r;
            timeout(30);
            r = get_wch(&k2);
            timeout(0);
            if (r == ERR)
                return;
            if ((r == OK && (k2 == '\r' || k2 == '\n')) || (r == KEY_CODE_YES && k2 == KEY_ENTER)) {
                inp_insert(t->in, "\n");
                return;
            }
            if (r == KEY_CODE_YES)
                return;
            inp_prefeed(t->in, 27);
            k = k2;
            break;
        }
        default: break;
        }
    }
    wchar_t c = libedit_key(k, fn);
    if (!c)
        return;
    if (c != '\t')
        inp_set_hint(t->in, "");
    char *line = NULL;
    if (inp_key(t->in, c, &line)) {
        inp_set_hint(t->in, "");
        submit(t, line);
        free(line);
    }
}

/* ==== startup and shutdown =================================================== */

static void log_to_ui(int level, const char *msg, void *ud) {
    if (level <= K3_LOG_LEVEL_WARN)
        ev_push_text((ev_queue *)ud, level == K3_LOG_LEVEL_ERROR ? EV_ERROR : EV_INFO, msg);
}

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void write_ui_stats(tui *t) {
    const char *path = getenv("K3_UI_STATS");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "frames_with_tokens %ld\nlatency_mean_ms %.4f\nlatency_max_ms %.4f\nui_cpu_s %.6f\ndecode_wall_s %.6f\n",
            t->lat_n, t->lat_n ? t->lat_sum / (double)t->lat_n * 1e3 : 0, t->lat_max * 1e3, thread_cpu() - t->ui_cpu0,
            t->decode_wall);
    fclose(f);
}

int ui_tui_run(const cli_opts *o) {
    static tui T;
    tui       *t = &T;
    char       err[512];
    memset(t, 0, sizeof *t);
    t->o   = o;
    t->cur = -1;
    t->st  = (ue_stats){.tok_s = -1, .prefill_tok_s = -1, .ttft_s = -1, .think_s = -1, .expert_hit = -1,
                        .expert_gb = -1};
    const char *term = getenv("TERM");
    if (!term || !*term || !strcmp(term, "dumb"))
        return cli_plain(o); /* no cursor addressing: line mode */
    setlocale(LC_ALL, "");
    chat_settings_init(&t->cs, o);
    const char *theme = o->theme ? o->theme : getenv("K3_THEME");
    if (!theme || !*theme)
        theme = "dark";
    if (thm_load(theme, t->theme, err, sizeof err) != 0) {
        fprintf(stderr, "k3chat: --theme: %s\n", err);
        return 2;
    }
    snprintf(t->theme_name, sizeof t->theme_name, "%.63s", theme);
    t->q = ev_queue_new(1);
    if (!t->q) {
        fprintf(stderr, "k3chat: cannot create the event queue\n");
        return 1;
    }
    char  hist[4096];
    int   has_hist = inp_history_path(hist, sizeof hist) == 0;
    t->in = inp_new(has_hist ? hist : NULL, more_key, t, err, sizeof err);
    if (!t->in) {
        fprintf(stderr, "k3chat: %s\n", err);
        ev_queue_free(t->q);
        return 1;
    }
    k3_log_set_callback(log_to_ui, t->q);
    t->eng = ue_start(o, t->q);
    if (!t->eng) {
        fprintf(stderr, "k3chat: cannot start the engine thread\n");
        inp_free(t->in);
        ev_queue_free(t->q);
        return 1;
    }
    if (o->system && *o->system)
        ue_system(t->eng, o->system);
    if (o->load) {
        ue_load(t->eng, o->load);
        t->load_pending++; /* messages wait until the transcript is in */
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGINT, &sa, NULL); /* kill -INT from outside (Ctrl-C itself is a key in raw mode) */

    if (!getenv("ESCDELAY"))
        set_escdelay(25);
    initscr();
    raw();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    timeout(0);
    intrflush(stdscr, FALSE);
    thm_apply(t->theme);
    define_key("\033[200~", KEY_PASTE_BEGIN);
    define_key("\033[201~", KEY_PASTE_END);
    printf("\033[?2004h"); /* bracketed paste on */
    fflush(stdout);
    mouseinterval(0);
    set_mouse(t, getenv("K3_NO_MOUSE") == NULL);
    t->ui_cpu0 = thread_cpu();
    layout(t);

    while (!t->quit) {
        wint_t k;
        int    fn;
        if (!next_key(t, &k, &fn))
            break;
        on_key(t, k, fn);
    }

    printf("\033[?2004l");
    fflush(stdout);
    mousemask(0, NULL);
    endwin();
    write_ui_stats(t);
    ue_close(t->eng);
    k3_log_set_callback(NULL, NULL);
    inp_free(t->in);
    ev_queue_free(t->q);
    drop_entries(t, 0);
    free(t->ents);
    free(t->dl);
    free(t->paste_buf.p);
    return 0;
}
