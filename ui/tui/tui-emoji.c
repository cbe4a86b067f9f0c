/* tui-emoji.c: multi-emoji clusters drawn whole on the curses screen (rules in emoji.c).
 *
 * curses keeps one spacing character per cell, so a ZWJ sequence, a flag or a skin-toned emoji
 * is given to curses as a stand-in of the cluster's width (emj_fallback: a flag's two region
 * letters, else the first emoji). Where the terminal draws the kind whole in 2 columns, the
 * cluster is noted (emj_set) and, after each doupdate(), written over its stand-in with cursor
 * addressing between a cursor save and restore, as tui-md.c does for OSC 8 links. Only rows
 * drawn in the frame are written again (curses writes nowhere else; it may rewrite a stand-in
 * on those rows, when it moves the cursor by printing). A cluster that left its place (scroll,
 * resize, an edit) would stay on the terminal while curses believes the stand-in is there:
 * its row is repainted (wredrawln) in the same update. Rows that tui-draw.c scrolls with
 * wscrl() and does not draw again keep their clusters: the notes move with them
 * (tui_emoji_scroll).
 *
 * Which kinds the terminal draws whole: K3_EMOJI=whole or fallback decides; unset, the Linux
 * console gets the stand-ins and other terminals are measured once at start: each kind's
 * sample is written at the top-left cell and the cursor position asked for (ESC [ 6 n); a
 * kind that advanced the cursor 2 columns (or 1) is drawn whole. A device attributes request
 * (ESC [ c) ends the probe; a terminal that answers nothing within PROBE_MS gets the
 * stand-ins, and its replies are still taken off the input when they come later (a slow link),
 * for LATE_MS. Keys typed meanwhile are given back to curses (ungetch); a lone Esc, which could
 * begin a reply, once ESCDELAY has passed with nothing after it.
 *
 * The probe also measures a text-default character made an emoji by VS16 (U+2764 U+FE0F): many
 * terminals (tmux 3.3, xterm, VTE) keep it in one cell, others widen it to two. Where it took
 * one column, text.c counts such clusters 1 wide (txt_vs16) and curses gets the character with
 * its selector in one cell: the terminal still picks the glyph, and the columns agree. Elsewhere
 * (2 columns, no reply, K3_EMOJI set) they count 2, as before. Likewise a wide emoji in text
 * presentation (U+231A U+FE0E, txt_vs15): where the terminal drew it in one column (kitty) it
 * counts 1, and curses holds U+FFFD in its cell, the cluster written over it (tui_emoji_narrow).
 *
 * Escape sequences: ESC 7 / ESC 8 (save, restore cursor and attributes), CSI row;col H,
 * CSI ... m (SGR: the cell's colors and attributes), CSI 6 n and CSI c (the probe), CSI 2 K.
 */
#include "emoji.h"
#include "tui-int.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROBE_MS 800

static struct {
    int            mode;  /* EMJ_MODE_* */
    int            kinds; /* EMJ_* drawn whole */
    emj_set        set;
    unsigned char *touched, *repaint; /* (rows) */
    int            rows;
} E;

int tui_emoji_setup(char *err, size_t n) {
    const char *v = k3_setting_env_str(K3_SETTING_EMOJI);
    double      ix;
    if (v && k3_setting_parse(K3_SETTING_EMOJI, K3_SRC_ENV, v, &ix, err, n))
        return -1; /* "K3_EMOJI: 'x' is not auto, whole or fallback" */
    E.mode  = emj_mode(v, getenv("TERM"));
    E.kinds = E.mode == EMJ_MODE_WHOLE ? EMJ_ALL : 0;
    return 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The probe's replies as they come: pr holds what was read and not yet scanned (an incomplete
 * reply) until the device attributes reply ends the probe. Over a slow link (ssh with a second
 * of latency) the replies come after PROBE_MS: read by curses, the DA reply's tail ("1;2c") was
 * typed into the input line; so the probe stays open (pending) until that reply or LATE_MS, and
 * tui_emoji_late takes the replies from the terminal's input before curses does. */
#define LATE_MS 10000.0
static struct {
    int    pending;
    double deadline;
    char   buf[512];
    size_t have;
    int    widths[EMJ_PROBE_N], n_w;
    double esc_t; /* when buf came to hold a lone ESC (0: it does not) */
} pr;

/* Read what the terminal sent within wait_ms, scan it; keys typed meanwhile go back to curses,
 * first typed first read. Returns 1 when the probe ended (its reply came). */
static int probe_read(int wait_ms) {
    char   other[256];
    size_t n_other = 0;
    int    fin     = 0;
    double t_end   = now_ms() + wait_ms;
    while (!fin) {
        int           left = (int)(t_end - now_ms());
        struct pollfd p    = {0, POLLIN, 0};
        if (poll(&p, 1, left > 0 ? left : 0) <= 0)
            break;
        ssize_t r = read(0, pr.buf + pr.have, sizeof pr.buf - pr.have);
        if (r <= 0)
            break;
        pr.have += (size_t)r;
        size_t used =
            emj_probe_scan(pr.buf, pr.have, pr.widths, &pr.n_w, &fin, other, &n_other, sizeof other);
        memmove(pr.buf, pr.buf + used, pr.have - used);
        pr.have -= used;
        if (pr.have == sizeof pr.buf || n_other == sizeof other)
            break; /* no reply this long, or many keys: give them to curses now */
    }
    for (size_t k = n_other; k > 0; k--)
        ungetch((unsigned char)other[k - 1]);
    return fin;
}

/* What the replies so far measured: the kinds drawn whole, and the width of a text character
 * with VS16 (2, as without a probe, unless the terminal drew it in 1 column). */
static void probe_apply(void) {
    E.kinds = emj_probe_result(pr.widths, pr.n_w);
    txt_vs16_set(emj_probe_vs16(pr.widths, pr.n_w) == 1 ? 1 : 2);
    txt_vs15_set(emj_probe_vs15(pr.widths, pr.n_w) == 1 ? 1 : 2);
}

/* The probe over (its reply came, or LATE_MS passed): the kinds measured, what is held to
 * curses as keys (ahead of those given back already, which were typed later). */
static void probe_end(void) {
    pr.pending = 0;
    probe_apply();
    for (size_t k = pr.have; k > 0; k--)
        ungetch((unsigned char)pr.buf[k - 1]);
    pr.have = 0;
}

void tui_emoji_probe(void) {
    if (E.mode != EMJ_MODE_PROBE || !isatty(0) || !isatty(1))
        return;
    txt_buf req = {0};
    if (emj_probe_request(&req))
        goto done;
    fflush(stdout);
    for (size_t off = 0; off < req.n;) {
        ssize_t w = write(1, req.p + off, req.n - off);
        if (w <= 0)
            goto done;
        off += (size_t)w;
    }
    pr.have = 0;
    pr.n_w  = 0;
    if (probe_read(PROBE_MS)) {
        probe_end();
    } else { /* stand-ins until the replies come */
        probe_apply();
        pr.pending  = 1;
        pr.deadline = now_ms() + LATE_MS;
    }
done:
    free(req.p);
    clearok(curscr, TRUE); /* the probe wrote on the screen */
}

/* A lone ESC held as the possible start of a reply: the Esc key, when nothing follows it within
 * ESCDELAY, as curses itself would decide (a reply comes in one piece: the terminal writes it
 * whole). Held, a lone Esc typed while the probe waited (up to LATE_MS on a terminal that never
 * answers) did nothing until the next key: a history search it should cancel stayed. */
static int esc_wait(void) {
    int lone = pr.pending && pr.have == 1 && pr.buf[0] == '\033';
    if (!lone) {
        pr.esc_t = 0;
        return -1;
    }
    double now = now_ms();
    if (pr.esc_t == 0)
        pr.esc_t = now;
    double left = pr.esc_t + get_escdelay() - now;
    return left > 0 ? (int)left + 1 : 0;
}

int tui_emoji_esc_wait(void) {
    return esc_wait();
}

int tui_emoji_late(void) {
    if (!pr.pending)
        return 0;
    int kinds = E.kinds, vs16 = txt_vs16(), vs15 = txt_vs15();
    if (probe_read(0) || now_ms() > pr.deadline) {
        probe_end();
    } else if (esc_wait() == 0) { /* the Esc key: to curses now */
        ungetch(27);
        pr.have  = 0;
        pr.esc_t = 0;
    }
    return pr.pending ? 0 : E.kinds != kinds || txt_vs16() != vs16 || txt_vs15() != vs15;
}

/* The look of attribute a as SGR. */
static void sgr_of(attr_t a, char *out, size_t n) {
    short fg = -1, bg = -1;
    int   pair = (int)PAIR_NUMBER(a), at = 0;
    if (pair > 0 && pair_content((short)pair, &fg, &bg) != OK)
        fg = bg = -1;
    if (a & A_BOLD)
        at |= EMJ_A_BOLD;
    if (a & A_DIM)
        at |= EMJ_A_DIM;
    if (a & A_ITALIC)
        at |= EMJ_A_ITALIC;
    if (a & A_UNDERLINE)
        at |= EMJ_A_UNDERLINE;
    if (a & (A_REVERSE | A_STANDOUT))
        at |= EMJ_A_REVERSE;
    if (a & A_BLINK)
        at |= EMJ_A_BLINK;
    emj_sgr(out, n, fg, bg, at);
}

void tui_emoji_narrow(int y, int x, const char *s, size_t n, int role) {
    /* curses' wcwidth gives the base 2 columns: it holds U+FFFD in the cell, and the cluster,
     * which this terminal draws in one column (the probe), goes over it after the update */
    cchar_t       cc;
    const wchar_t stand[2] = {0xFFFD, 0};
    attr_t        a        = (attr_t)thm_attr((enum thm_role)role);
    attrset(a);
    if (setcchar(&cc, stand, 0, 0, NULL) == OK)
        mvadd_wch(y, x, &cc);
    else
        mvaddch(y, x, '?');
    char sgr[64];
    sgr_of(a, sgr, sizeof sgr);
    emj_set_add(&E.set, y, x, 1, 0xFFFD, sgr, s, n);
}

int tui_emoji_cell(int y, int x, int w, const char *s, size_t n, int role) {
    int joins = emj_joins(s, n);
    if (!joins)
        return 0;
    wchar_t wc[8];
    int     cells, nw = emj_fallback(s, n, wc, 8, &cells);
    attr_t  a = (attr_t)thm_attr((enum thm_role)role);
    attrset(a);
    if (cells == 2 && w >= 2) { /* two narrow letters */
        mvaddnwstr(y, x, wc, 2);
    } else {
        cchar_t cc;
        if (nw > 0 && setcchar(&cc, wc, 0, 0, NULL) == OK)
            mvadd_wch(y, x, &cc);
        else
            mvaddch(y, x, '?');
        if (w == 2 && wcwidth(wc[0]) == 1)
            mvaddch(y, x + 1, ' ');
    }
    if ((joins & ~E.kinds) == 0) {
        char sgr[64];
        sgr_of(a, sgr, sizeof sgr);
        emj_set_add(&E.set, y, x, w, (int)wc[0], sgr, s, n);
    }
    return 1;
}

void tui_emoji_scroll(int y0, int h, int k) {
    if (E.set.n && emj_set_scroll(&E.set, y0, h, k))
        emj_set_clear(&E.set); /* out of memory: the stand-ins show */
}

/* Rows drawn in this frame, as curses knows them (before wnoutrefresh clears the marks). */
static int mark_rows(void) {
    int rows = getmaxy(stdscr);
    if (rows != E.rows) {
        unsigned char *t = realloc(E.touched, (size_t)(rows > 0 ? rows : 1));
        unsigned char *r = realloc(E.repaint, (size_t)(rows > 0 ? rows : 1));
        if (t)
            E.touched = t;
        if (r)
            E.repaint = r;
        if (!t || !r) {
            E.rows = 0;
            return -1;
        }
        E.rows = rows;
    }
    for (int y = 0; y < rows; y++)
        E.touched[y] = is_linetouched(stdscr, y) ? 1 : 0;
    return 0;
}

void tui_emoji_before(void) {
    if (!E.kinds && !E.set.n)
        return;
    if (mark_rows()) {
        emj_set_clear(&E.set);
        return;
    }
    /* a cluster noted this frame whose cell was drawn over afterwards is not written */
    int cy, cx;
    getyx(stdscr, cy, cx);
    for (int k = 0; k < E.set.n; k++) {
        emj_rec *r = &E.set.r[k];
        cchar_t  cc;
        wchar_t  wc[CCHARW_MAX + 1];
        attr_t   at;
        short    pair;
        if (r->gen != E.set.gen)
            continue;
        if (mvwin_wch(stdscr, r->y, r->x, &cc) != OK || getcchar(&cc, wc, &at, &pair, NULL) != OK ||
            (int)wc[0] != r->stand)
            emj_set_drop(&E.set, k);
    }
    wmove(stdscr, cy, cx);
    if (emj_set_frame(&E.set, E.touched, E.rows, getmaxx(stdscr), E.repaint) > 0)
        for (int y = 0; y < E.rows; y++)
            if (E.repaint[y]) {
                wredrawln(stdscr, y, 1);
                E.touched[y] = 1;
            }
}

void tui_emoji_after(void) {
    if (!E.set.n) {
        E.set.gen++;
        return;
    }
    txt_buf b = {0};
    if (emj_set_output(&E.set, E.touched, E.rows, &b) == 0 && b.n) {
        fflush(stdout);
        for (size_t off = 0; off < b.n;) {
            ssize_t w = write(1, b.p + off, b.n - off);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
    }
    free(b.p);
}

void tui_emoji_free(void) {
    emj_set_free(&E.set);
    free(E.touched);
    free(E.repaint);
    E.touched = E.repaint = NULL;
    E.rows                = 0;
}
