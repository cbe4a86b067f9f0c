/* tui-draw.c: the full-screen chat's drawing (tui.c has the design notes).
 *
 * Everything here reads the state in `tui` and draws; nothing changes the conversation.
 * tui_layout() splits the terminal into the conversation, think, response, status and input
 * regions; tui_render() redraws the regions whose dirty bits are set, with one doupdate().
 * The conversation pane is a list of wrapped lines (dline) rebuilt when it is dirty; the
 * streaming panes wrap incrementally (tail_cache), so a long answer costs O(new text) a frame.
 */
#include "tui-int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

/* ==== layout ================================================================ */

/* Rows of the completion hint above the input line: all it needs, up to half the input area. */
static int hint_rows(tui *t, int width, int max) {
    const char *h = inp_hint(t->in);
    if (!h[0])
        return 0;
    int n = txt_wrap(h, strlen(h), width, NULL, 0), lim = max > 1 ? max - 1 : 1;
    return n < lim ? n : lim;
}

static int input_rows(tui *t, int width) {
    size_t      cur;
    const char *s   = inp_text(t->in, &cur);
    int         n   = txt_wrap(s, strlen(s), width, NULL, 0);
    int         max = t->rows / 3 > 1 ? t->rows / 3 : 1;
    if (inp_hint(t->in)[0]) { /* a list of candidates may use up to half the screen */
        max = t->rows / 2 > 2 ? t->rows / 2 : 2;
        n += hint_rows(t, width, max);
    }
    return n < 1 ? 1 : n > max ? max : n;
}

void tui_layout(tui *t) {
    getmaxyx(stdscr, t->rows, t->cols);
    int was      = t->too_small;
    t->too_small = t->cols < MIN_COLS || t->rows < MIN_ROWS;
    if (t->too_small && !was)
        t->small_from = t->n_ents;
    if (t->too_small)
        return;
    t->input_h  = input_rows(t, t->cols - 2);
    t->input_y  = t->rows - t->input_h;
    t->status_y = t->input_y - 1;
    int main_h  = t->status_y;
    t->think_h = t->resp_h = 0;
    if (t->streaming && t->cur >= 0) {
        int want_think = t->cs.show_thinking && (t->cs.gen.think || t->ents[t->cur].think.n);
        t->resp_h      = main_h * 2 / 5 > 4 ? main_h * 2 / 5 : 4;
        t->think_h     = want_think ? (main_h / 4 > 3 ? main_h / 4 : 3) : 0;
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

/* A run of the one-column cluster c[0..len) (a code point alone) repeated in s[0..n) (which
 * starts with it), drawn at (y, x) within w columns with one whline_set: at least two copies, the
 * last one not the start of a longer cluster. Advances *off and *col; 0 when not such a run. */
static int draw_repeat(int y, int x, int w, const char *s, size_t len, size_t n, size_t *off, int *col) {
    int k = 1;
    while (k < w && (size_t)(k + 1) * len <= n && !memcmp(s, s + (size_t)k * len, len))
        k++;
    int    cw, f;
    size_t tail = (size_t)(k - 1) * len;
    if (txt_cluster(s + tail, n - tail, &cw, &f) != len) /* a combining mark follows: drawn one by one */
        k--;
    utf8proc_int32_t cp;
    if (k < 2 || utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &cp) != (ssize_t)len ||
        wcwidth((wchar_t)cp) != 1)
        return 0;
    wchar_t wc[2] = {(wchar_t)cp, 0};
    cchar_t cc;
    if (setcchar(&cc, wc, 0, 0, NULL) != OK)
        return 0;
    mvhline_set(y, x, &cc, k);
    *off += (size_t)k * len;
    *col += k;
    return 1;
}

/* Draw s[0..n) at (y, x) within w columns in role r; returns the columns used. Clusters are
 * placed one by one at the columns text.c computes, so curses' idea of widths cannot drift. */
static int draw_text(int y, int x, int w, const char *s, size_t n, int role) {
    int col = 0;
    attrset((attr_t)thm_attr((enum thm_role)role));
    for (size_t off = 0; off < n && col < w;) {
        /* a run of printable ASCII (each byte a cluster of one column): one curses call */
        size_t a = off;
        while (a < n && col + (int)(a - off) < w && (unsigned char)s[a] >= 0x20 &&
               (unsigned char)s[a] < 0x7f && (a + 1 == n || (unsigned char)s[a + 1] < 0x80))
            a++;
        if (a > off) {
            mvaddnstr(y, x + col, s + off, (int)(a - off));
            col += (int)(a - off);
            off = a;
            continue;
        }
        int    cw, f;
        size_t len = txt_cluster(s + off, n - off, &cw, &f);
        if (f & TXT_F_TAB) {
            int sp = TXT_TAB - col % TXT_TAB;
            for (int k = 0; k < sp && col < w; k++)
                mvaddch(y, x + col++, ' ');
        } else if (f & TXT_F_NL) {
            /* not drawn */
        } else if (f & TXT_F_CTRL) { /* its escape, as line mode and the export show it */
            char e[8];
            int  k = txt_ctrl_shown(s + off, len, e);
            mvaddnstr(y, x + col, e, k < w - col ? k : w - col);
            col += k < w - col ? k : w - col;
        } else if ((f & TXT_F_NARROW) && col + cw <= w) {
            tui_emoji_narrow(y, x + col, s + off, len, role); /* text presentation, 1 column */
            col += cw;
        } else if (col + cw <= w && (f & TXT_F_EMOJI) && len > 4 &&
                   tui_emoji_cell(y, x + col, cw, s + off, len, role)) {
            col += cw; /* a multi-emoji cluster (tui-emoji.c) */
        } else if (col + cw <= w && cw == 1 && len <= 4 && !(f & (TXT_F_INVALID | TXT_F_EMOJI)) &&
                   off + 2 * len <= n && !memcmp(s + off, s + off + len, len) &&
                   draw_repeat(y, x + col, w - col, s + off, len, n - off, &off, &col)) {
            continue; /* a rule: the same one-column character over and over, one curses call */
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

/* s wrapped into at most max_rows rows of w columns from (y, x); returns the rows used. The
 * width may be any (the "too small" notice of a terminal a few columns wide): s is wrapped as
 * shown (txt_shown), so a control's escape wider than the row breaks inside, as in Markdown,
 * where drawn raw it was cut at the row's end. */
static int draw_wrapped(int y, int x, int w, int max_rows, const char *s, int role) {
    txt_line l[16];
    txt_buf  sh = {0};
    size_t   sn = strlen(s);
    if (!txt_shown(&sh, s, sn) && sh.n != sn) /* an escape is longer than its control */
        s = sh.p, sn = sh.n;
    int n = txt_wrap(s, sn, w > 1 ? w : 1, l, 16);
    for (int k = 0; k < n && k < 16 && k < max_rows; k++) {
        size_t off = l[k].off, len = l[k].len;
        while (k && len && s[off] == ' ') /* a break inside a run of spaces: the row starts at x */
            off++, len--;
        draw_text(y + k, x, w, s + off, len, role);
    }
    free(sh.p);
    return n < max_rows ? n : max_rows;
}

/* Columns a pane title leaves for its extra text: "── NAME · " before it, " ─" after. */
static int title_width(const char *name) {
    return 2 + 1 + txt_width(name, strlen(name), 0) + 3 + 2;
}

/* A pane title: "── NAME · extra ───────". */
static void draw_title(tui *t, int y, const char *name, const char *extra, int cols) {
    uint64_t h =
        tui_hash(tui_hash(TUI_HASH0, name, strlen(name) + 1), extra ? extra : "", extra ? strlen(extra) : 0);
    if (tui_row_same(t, y, h))
        return;
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

/* ==== rows already drawn ===================================================== */

uint64_t tui_hash(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (; n >= 8; b += 8, n -= 8) { /* 8 bytes a step: every step is a bijection of h */
        uint64_t v;
        memcpy(&v, b, 8);
        h = (h ^ v) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    for (; n; n--)
        h = (h ^ *b++) * 1099511628211ull;
    return h;
}

static uint64_t hash_int(uint64_t h, int v) {
    return tui_hash(h, &v, sizeof v);
}

int tui_row_same(tui *t, int y, uint64_t h) {
    if (y < 0 || y >= t->n_row_sig)
        return 0;
    h += h == 0; /* 0 means unknown */
    if (t->row_sig[y] == h)
        return 1;
    t->row_sig[y] = h;
    return 0;
}

void tui_rows_scroll(tui *t, int y0, int h, const uint64_t *hs) {
    if (y0 < 0 || h < 3 || y0 + h > t->n_row_sig)
        return;
    const uint64_t *old = t->row_sig + y0;
    for (int k = 1; k < h - 1; k++) {
        /* rows [0, h - k - 1) would show what rows [k, h - 1) show now (the old last row may have
         * grown since): all of them, and at least half the pane */
        int r = 0;
        while (r < h - k - 1 && old[r + k] != 0 && old[r + k] == hs[r] + (hs[r] == 0))
            r++;
        if (r < h - k - 1)
            continue;
        if (2 * (h - k - 1) < h)
            return;
        wsetscrreg(stdscr, y0, y0 + h - 1);
        scrollok(stdscr, TRUE);
        wscrl(stdscr, k);
        tui_emoji_scroll(y0, h, k); /* the clusters drawn whole move with their rows */
        scrollok(stdscr, FALSE);
        wsetscrreg(stdscr, 0, t->rows - 1);
        memmove(t->row_sig + y0, t->row_sig + y0 + k, (size_t)(h - k) * sizeof *t->row_sig);
        memset(t->row_sig + y0 + h - k, 0, (size_t)k * sizeof *t->row_sig);
        return;
    }
}

/* Forget what the rows show (their next drawing happens); sized for the current screen. */
static void rows_forget(tui *t) {
    if (t->rows > t->n_row_sig) {
        uint64_t *r = realloc(t->row_sig, (size_t)t->rows * sizeof *r);
        if (!r) { /* without the cache every row is drawn */
            free(t->row_sig);
            t->row_sig   = NULL;
            t->n_row_sig = 0;
            return;
        }
        t->row_sig   = r;
        t->n_row_sig = t->rows;
    }
    if (t->row_sig)
        memset(t->row_sig, 0, (size_t)t->n_row_sig * sizeof *t->row_sig);
}

/* The hash of a text row: its bytes, role and starting column. */
static uint64_t text_hash(const char *s, size_t n, int role, int x) {
    return tui_hash(hash_int(hash_int(TUI_HASH0, role), x), s, n);
}

/* ==== text to lines ========================================================= */

static int dl_push(tui *t, int ent, const char *s, size_t len, int role, int indent, int fold) {
    dline *d = k3_grow(t->dl, &t->cap_dl, (size_t)t->n_dl + 1, sizeof *d, 256);
    if (!d)
        return -1;
    t->dl            = d;
    t->dl[t->n_dl++] = (dline){ent, s, len, role, indent, fold, NULL, 0};
    return 0;
}

/* for tui-md.c */
int tui_dl_push(tui *t, int ent, const char *s, size_t len, int role, int indent, int fold) {
    return dl_push(t, ent, s, len, role, indent, fold);
}
int tui_text(int y, int x, int w, const char *s, size_t n, int role) {
    return draw_text(y, x, w, s, n, role);
}
void tui_fill(int y, int x, int w, int role) {
    fill_row(y, x, w, role);
}

/* Wrap text into lines: code blocks (``` fences) get the code role; the text is cut at its last
 * complete UTF-8 character (a streamed token may end inside one). ws (may be NULL: a whole
 * text) gives the state at s[0] and receives the state at the start of the last line. */
static void text_lines(tui *t, int ent, const char *s, size_t n, int width, int role, int indent,
                       wrap_state *ws) {
    wrap_state z        = {0, 0, 0, 0};
    int        ws_given = ws != NULL;
    if (!ws)
        ws = &z;
    n = txt_complete(s, n);
    /* at least the widest escape of a control character (txt_cluster: \u202E, 6 columns), drawn
     * whole on a row of its own; wider than any at the terminal's least width (MIN_COLS) */
    int w       = width - indent > 6 ? width - indent : 6;
    int in_code = ws->in_code, first = 1;
    for (size_t p = 0; p <= n;) {
        const char *eol   = memchr(s + p, '\n', n - p);
        size_t      ln    = eol ? (size_t)(eol - (s + p)) : n - p;
        int         mid   = first && ws->mid;
        int         fence = mid ? ws->mid_fence : ln >= 3 && !strncmp(s + p, "```", 3);
        int         r     = (in_code || fence) ? THM_CODE : role;
        txt_line    lines[64], *lp = lines;
        int         nl   = txt_wrap(s + p, ln, w, lines, 64);
        int         hang = role == THM_INFO && !ws_given && nl > 1 && nl <= 32 ? txt_hang(s + p, ln, w) : 0;
        if (hang > 0) { /* a two-column line (/help, /stats): continuation rows under column two */
            dl_push(t, ent, s + p, lines[0].len, r, indent, 0);
            size_t rest = lines[1].off;
            nl          = txt_wrap(s + p + rest, ln - rest, w - hang, lines, 64);
            for (int k = 0; k < nl && k < 64; k++)
                dl_push(t, ent, s + p + rest + lines[k].off, lines[k].len, r, indent + hang, 0);
            nl = 0;
        }
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

/* The lines of entry i at width onto t->dl, its blank separator last. count: only their number
 * matters (an answer is rendered in a scratch doc, not kept; no summary text). */
static void ent_build(tui *t, int i, int width, int count) {
    entry *e = &t->ents[i];
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
            const char *fb = "";
            if (!count && (e->summary || (e->summary = malloc(96)) != NULL)) {
                if (e->think_s >= 0 || e->n_think > 0)
                    snprintf(e->summary, 96, "%s thought for %.1f s · %d token%s", e->expanded ? "▾" : "▸",
                             e->think_s > 0 ? e->think_s : 0, e->n_think, e->n_think == 1 ? "" : "s");
                else /* a transcript without figures */
                    snprintf(e->summary, 96, "%s reasoning (not timed)", e->expanded ? "▾" : "▸");
                fb = e->summary;
            }
            dl_push(t, i, fb, strlen(fb), THM_THINK_SUMMARY, 0, 1);
            if (e->expanded)
                text_lines(t, i, e->think.p, e->think.n, width, THM_THINK, 2, NULL);
        }
        if (!t->raw && count) {
            int n = tui_md_count(t, i, width);
            for (int k = 0; k < n; k++)
                dl_push(t, i, "", 0, THM_ASSISTANT, 0, 0);
            if (n < 0)
                text_lines(t, i, e->text.p ? e->text.p : "", e->text.n, width, THM_ASSISTANT, 0, NULL);
        } else if (t->raw || tui_md_entry(t, i, width)) /* rendered Markdown, or raw */
            text_lines(t, i, e->text.p ? e->text.p : "", e->text.n, width, THM_ASSISTANT, 0, NULL);
        if (e->status == UE_DONE_CANCELLED)
            dl_push(t, i, "[stopped]", 9, THM_INFO, 0, 0);
        else if (e->status == UE_DONE_LENGTH)
            dl_push(t, i, "[length limit reached]", 22, THM_INFO, 0, 0);
        else if (e->status == UE_DONE_CONTEXT) { /* what fills up, and what makes room */
            static const char full[] = "[context full: the answer was cut off; /forget or /clear makes room]";
            text_lines(t, i, full, sizeof full - 1, width, THM_INFO, 0, NULL);
        }
        break;
    case UE_ROLE_SYSTEM:
        text_lines(t, i, e->text.p, e->text.n, width, THM_SYSTEM, 2, NULL);
        break;
    case ROLE_INFO:
        text_lines(t, i, e->text.p, e->text.n, width, THM_INFO, 0, NULL);
        break;
    case ROLE_ERROR:
        text_lines(t, i, e->text.p, e->text.n, width, THM_ERROR, 0, NULL);
        break;
    }
    dl_push(t, i, "", 0, THM_NORMAL, 0, 0);
}

/* Lines entry i takes at width, cached in the entry while what they depend on stays. */
static int ent_lines(tui *t, int i, int width) {
    entry   *e    = &t->ents[i];
    int64_t  a[9] = {width,       t->raw,    e->role,   (int64_t)e->text.n,         (int64_t)e->think.n,
                     e->expanded, e->queued, e->status, txt_vs16() * 4 + txt_vs15()};
    uint64_t key  = tui_hash(TUI_HASH0, a, sizeof a);
    if (e->nl > 0 && e->nl_key == key)
        return e->nl;
    int save = t->n_dl;
    ent_build(t, i, width, 1);
    e->nl     = t->n_dl - save;
    e->nl_key = key;
    t->n_dl   = save;
    return e->nl;
}

/* The pane's lines for rows rows at t->scroll lines from the bottom: the entries are walked from
 * the last up, by their cached line counts, until the window is covered, and only the entries
 * that show in it are laid out (their Markdown docs kept; those of other entries freed past
 * TUI_MD_KEEP). Memory and time follow the screen, not the conversation's length; scrolling to
 * the top counts every entry once. A scroll past the top is clamped. Sets vis_first and the
 * rows the text gets. */
static void build_window(tui *t, int width) {
    int  rows = t->hist_h - (t->scroll > 0 && t->hist_h > 1);
    int  bot = -1, top = -1;
    long below = 0, b_bot = 0; /* lines after entry i; after the last entry laid out */
    for (int i = t->n_ents - 1; i >= 0; i--) {
        if (i == t->cur && t->streaming)
            continue;
        int nl = ent_lines(t, i, width);
        if (bot < 0 && below + nl > t->scroll)
            bot = i, b_bot = below;
        below += nl;
        if (bot >= 0)
            top = i;
        if (below >= (long)t->scroll + rows)
            break;
    }
    if (below < (long)t->scroll + rows) { /* the top was reached: clamp */
        long max = below - rows > 0 ? below - rows : 0;
        if (t->scroll > max) {
            t->scroll = (int)max;
            build_window(t, width); /* rows and the entries shown change with the scroll */
            return;
        }
    }
    t->n_dl = 0;
    for (int i = top; i >= 0 && i <= bot; i++)
        if (!(i == t->cur && t->streaming))
            ent_build(t, i, width, 0);
    long first   = (long)t->n_dl - rows - t->scroll + b_bot;
    t->vis_first = first > 0 ? (int)first : 0;
    t->dl_width  = width;
    t->dl_scroll = t->scroll;
    t->dl_rows   = t->hist_h;
    t->dl_valid  = 1;
    if (t->n_md > (TUI_MD_KEEP > 2 * t->rows ? TUI_MD_KEEP : 2 * t->rows)) /* off-screen docs go */
        for (int i = 0; i < t->n_ents; i++)
            if ((i < top || i > bot) && t->ents[i].md)
                tui_md_entry_free(t, &t->ents[i]);
}

/* ==== regions ================================================================ */

static void draw_loading(tui *t) {
    const char *hint = "You can type already: messages are sent when the model is ready.";
    int         w    = t->cols - 8;
    int         bar  = w - 40 > 10 ? (w - 40 < 50 ? w - 40 : 50) : 10;
    char        line[512];
    double      f = t->load_total ? (double)t->load_done / (double)t->load_total : 0;
    if (t->load_total)
        snprintf(line, sizeof line, " %3.0f%%  %.0f / %.0f MB  %.0f MB/s", f * 100,
                 (double)t->load_done / 1e6, (double)t->load_total / 1e6, t->load_rate / 1e6);
    else
        snprintf(line, sizeof line, " %.0f MB  %.0f MB/s", (double)t->load_done / 1e6, t->load_rate / 1e6);
    int below = txt_width(line, strlen(line), 0) > w - bar; /* narrow: the figures under the bar */
    int nh    = txt_wrap(hint, strlen(hint), w, NULL, 0);
    int y     = (t->hist_h - (4 + below + nh)) / 2; /* the block centred: nothing cut at 40x12 */
    if (y < 0)
        y = 0;
    char what[512];
    snprintf(what, sizeof what, "Loading %s", t->o->dir ? t->o->dir : "the model");
    draw_text(y, 4, w, what, strlen(what), THM_TITLE);
    draw_text(y + 1, 4, w, t->load_what, strlen(t->load_what), THM_NORMAL);
    int fill = (int)(f * bar);
    attrset((attr_t)thm_attr(THM_PROGRESS));
    for (int k = 0; k < bar; k++)
        mvaddstr(y + 2, 4 + k, k < fill ? "█" : "░");
    if (below)
        draw_text(y + 3, 4, w, line + 1, strlen(line + 1), THM_NORMAL);
    else
        draw_text(y + 2, 4 + bar, w - bar, line, strlen(line), THM_NORMAL);
    draw_wrapped(y + 4 + below, 4, w, t->hist_h - y - 4 - below, hint, THM_INFO);
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
        draw_wrapped(t->hist_h / 2, 2, t->cols - 4, 3, w1, THM_INFO);
        return;
    }
    int width = t->cols - 1;
    if (t->scroll < 0)
        t->scroll = 0;
    if (!t->dl_valid || t->dl_width != width || t->dl_scroll != t->scroll || t->dl_rows != t->hist_h)
        build_window(t, width);
    /* scrolled up: the pane's last row says how many lines are below, the text gets the others */
    int rows  = t->hist_h - (t->scroll > 0 && t->hist_h > 1);
    int first = t->vis_first;
    for (int r = 0; r < rows && first + r < t->n_dl; r++) {
        dline *d = &t->dl[first + r];
        int    x = d->indent;
        if (d->fold == 2)
            draw_text(t->hist_y + r, 0, 2, "› ", strlen("› "), THM_PROMPT);
        if (d->md)
            tui_md_draw(t, t->hist_y + r, x, t->cols - x, d->md, d->mdl);
        else
            draw_text(t->hist_y + r, x, t->cols - x, d->s, d->len, d->role);
    }
    if (rows < t->hist_h) {
        char m[96];
        snprintf(m, sizeof m, "↓ %d more · PgDn, Ctrl-End: the latest", t->scroll);
        if (txt_width(m, strlen(m), 0) > t->cols - 3) /* narrow: the shorter hint, not a cut one */
            snprintf(m, sizeof m, "↓ %d more · Ctrl-End: the latest", t->scroll);
        if (txt_width(m, strlen(m), 0) > t->cols - 3)
            snprintf(m, sizeof m, "↓ %d more", t->scroll);
        fill_row(t->hist_y + rows, 0, t->cols, THM_STATUS);
        draw_text(t->hist_y + rows, 2, t->cols - 3, m, strlen(m), THM_STATUS);
    }
}

/* The tail of a streaming text in rows [y0, y0 + h). Greedy wrapping never changes a line once
 * a later one exists, so each frame wraps only from the start of the last line drawn before
 * (tail_cache): a frame costs the same however long the text grows. */
static void draw_tail(tui *t, int y0, int h, const txt_buf *b, int role, tail_cache *c) {
    int width = t->cols - 1;
    if (c->width != width || c->len > b->n) {
        memset(c, 0, sizeof *c);
        c->width = width;
    }
    c->base = b->p;
    c->len  = b->n;
    if (h > TUI_PANE_MAX)
        h = TUI_PANE_MAX;
    if (h <= 0 || !b->n) {
        for (int y = y0; y < y0 + h; y++)
            if (!tui_row_same(t, y, text_hash("", 0, THM_NORMAL, 0)))
                fill_row(y, 0, t->cols, THM_NORMAL);
        return;
    }
    int        save_n = t->n_dl;
    wrap_state ws     = c->ws;
    text_lines(t, t->cur, b->p + c->start, b->n - c->start, width, role, 0, &ws);
    int n_new = t->n_dl - save_n, n_old = c->n < h ? c->n : h;
    int total = n_old + n_new, first = total > h ? total - h : 0;
    struct pane_row {
        const char *p;
        size_t      len;
        int         role, x;
    } row[TUI_PANE_MAX];
    uint64_t hs[TUI_PANE_MAX];
    for (int r = 0; r < h; r++) {
        int k  = first + r;
        row[r] = (struct pane_row){"", 0, THM_NORMAL, 0};
        if (k < n_old) {
            const tail_line *o = &c->ring[(c->head + c->n - n_old + k) % TAIL_N];
            row[r]             = (struct pane_row){b->p + o->off, o->len, o->role, 0};
        } else if (k < total) {
            const dline *d = &t->dl[save_n + k - n_old];
            row[r]         = (struct pane_row){d->s, d->len, d->role, d->indent};
        }
        hs[r] = text_hash(row[r].p, row[r].len, row[r].role, row[r].x);
    }
    tui_rows_scroll(t, y0, h, hs);
    for (int r = 0; r < h; r++) { /* rows that show what they showed last frame are left alone */
        int used = 0;
        if (tui_row_same(t, y0 + r, hs[r]))
            continue;
        if (row[r].len)
            used =
                row[r].x + draw_text(y0 + r, row[r].x, t->cols - row[r].x, row[r].p, row[r].len, row[r].role);
        if (used < t->cols)
            fill_row(y0 + r, used, t->cols - used, THM_NORMAL);
    }
    /* every new line but the last is final: keep it, resume at the last */
    for (int k = 0; k + 1 < n_new; k++) {
        dline *d                           = &t->dl[save_n + k];
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
        snprintf(extra, sizeof extra, "%.1f s · %d token%s", e->think.n ? s : 0.0, e->n_think,
                 e->n_think == 1 ? "" : "s");
        draw_title(t, t->think_y, "thinking", extra, t->cols);
        if (!t->dl_valid) /* draw_tail uses the line list as scratch space */
            build_window(t, t->cols - 1);
        draw_tail(t, t->think_y + 1, t->think_h - 1, &e->think, THM_THINK, &t->tc_think);
    }
    if (t->think_h == 0)
        dirty |= (dirty & DIRTY_THINK) ? DIRTY_RESP : 0; /* hidden reasoning: its time is told here */
    if (t->resp_h > 0 && (dirty & DIRTY_RESP)) {
        /* the longest wording that fits the title row (none is cut at 40 columns) */
        int room = t->cols - title_width("response");
        if (e->text.n)
            snprintf(extra, sizeof extra, "Ctrl-C stops");
        else if (e->think.n && t->think_h == 0) {
            double s = (t->think_t1 > 0 ? t->think_t1 : ev_now()) - t->think_t0;
            snprintf(extra, sizeof extra, "thinking (hidden) %.1f s · %d token%s · Ctrl-C stops", s,
                     e->n_think, e->n_think == 1 ? "" : "s");
            if (txt_width(extra, strlen(extra), 0) > room)
                snprintf(extra, sizeof extra, "thinking %.1f s · Ctrl-C stops", s);
            if (txt_width(extra, strlen(extra), 0) > room)
                snprintf(extra, sizeof extra, "thinking %.1f s", s);
        } else {
            snprintf(extra, sizeof extra, "waiting for the first token · Ctrl-C stops");
            if (txt_width(extra, strlen(extra), 0) > room)
                snprintf(extra, sizeof extra, "waiting · Ctrl-C stops");
        }
        draw_title(t, t->resp_y, "response", extra, t->cols);
        if (!t->dl_valid)
            build_window(t, t->cols - 1);
        if (tui_md_tail(t, t->resp_y + 1, t->resp_h - 1, &e->text))
            draw_tail(t, t->resp_y + 1, t->resp_h - 1, &e->text, THM_ASSISTANT, &t->tc_resp);
    }
}

/* The model's description in at most cols columns, into out (emptied first): whole when it fits;
 * else the whole name and what follows it cut in the middle, or, with no room for that, the name
 * alone cut in the middle (txt_fit: "moonshotai/Kimi-K…-v2-instruct"), its end kept: of two long
 * ids that share a prefix, the end tells them apart. */
static void fit_model(const tui *t, txt_buf *out, int cols) {
    const char *more = t->model + t->model_name;
    int         wn = txt_width(t->model, t->model_name, 0), wm = txt_width(more, strlen(more), wn);
    out->n = 0;
    if (out->p)
        out->p[0] = 0;
    if (wn + wm <= cols)
        txt_buf_add(out, t->model, strlen(t->model));
    else if (wn + 4 <= cols && !txt_buf_add(out, t->model, t->model_name))
        txt_fit(out, more, strlen(more), cols - wn);
    else
        txt_fit(out, t->model, t->model_name, cols);
}

/* The status bar: segments by priority (0 = always, higher = dropped sooner when the bar is too
 * narrow), drawn whole and in their order. The model's description (any length: a remote
 * server's id, a directory's name) takes half the bar at most (32 columns at least), and no more
 * than the room the others leave when the bar is narrow (fit_model). */
static void draw_status(tui *t) {
    char            seg[16][96];
    int             pri[16], n = 0;
    const ue_stats *s     = &t->st;
    txt_buf         name  = {0}; /* segment 0 when it is the model's name, fitted */
    int             fit_k = -1;  /* the memory fit's segment */
#define SEG(p, ...) (pri[n] = (p), snprintf(seg[n++], 96, __VA_ARGS__))
    if (!t->ready) {
        if (t->fatal) /* a server not reached is no model missing */
            SEG(0, "%s", strcmp(t->eng->be->name, "remote") ? "no model" : "remote: did not start");
        else if (t->load_total)
            SEG(0, "loading %.0f%% · %.0f MB/s", 100.0 * (double)t->load_done / (double)t->load_total,
                t->load_rate / 1e6);
        else
            SEG(0, "loading…");
    } else {
        SEG(0, "%s", ""); /* the name: below, once the others are measured */
        if (t->fit[0])    /* lowered settings matter more; the text: below */
            fit_k = n, SEG(strstr(t->fit, "fit step") ? 4 : 7, "%s", "");
    }
    if (t->pf_on)
        SEG(0, "prefill %llu/%llu tok · %.2f GB read", (unsigned long long)t->pf_done,
            (unsigned long long)t->pf_total, t->pf_bytes / 1e9);
    if (t->paste) /* Enter is a newline of the paste until its end marker comes */
        SEG(0, "pasting");
    if (!t->mouse)
        SEG(3, "mouse off (F3)");
    if (t->scroll > 0)
        SEG(4, "scrolled ↑%d", t->scroll);
    t->scroll_shown = t->scroll;
    SEG(2, "think %s", t->cs.gen.think ? ue_effort_name(t->cs.gen.effort) : "off");
    char tb[16], pb[16];
    SEG(5, "T %s p %s", chat_sampling_str(&t->cs, 0, tb, sizeof tb),
        chat_sampling_str(&t->cs, 1, pb, sizeof pb));
    if (s->tok_s > 0)
        SEG(6, "%.1f tok/s", s->tok_s);
    if (s->ttft_s > 0)
        SEG(8, "TTFT %.2f s", s->ttft_s);
    if (s->ctx_max > 0 && s->ctx_used >= s->ctx_max) /* the next prompt would not fit */
        SEG(1, "ctx full %d/%d", s->ctx_max, s->ctx_max);
    else if (s->ctx_max > 0)
        SEG(1, "ctx %d/%d", s->ctx_used, s->ctx_max);
    if (s->expert_gb >= 0 && s->expert_hit >= 0)
        SEG(9, "experts %.0f%% of %.1f GB", s->expert_hit * 100, s->expert_gb);
    if (s->vk_budget_gb > 0)
        SEG(9, "VRAM %.1f/%.1f GB · %ld gpu hits", s->vk_used_gb, s->vk_budget_gb, s->vk_hits);
    if (s->mem_gb > 0)
        SEG(7, "mem %.2f GB", s->mem_gb);
#undef SEG
    const char *txt[16];
    int         w[16], total = 1;
    for (int k = 0; k < n; k++)
        txt[k] = k == fit_k ? t->fit : seg[k];
    if (t->ready) { /* half the bar at most (32 columns at least), so the figures after it show */
        fit_model(t, &name, t->cols / 2 - 1 > 32 ? t->cols / 2 - 1 : 32);
        txt[0] = name.p ? name.p : "";
    }
    for (int k = 0; k < n; k++)
        total += (w[k] = txt_width(txt[k], strlen(txt[k]), 0) + (k ? 3 : 0));
    while (total > t->cols - 1) { /* leave out the least important segment, the later on a tie */
        int drop = -1;
        for (int k = 1; k < n; k++)
            if (w[k] && (drop < 0 || pri[k] >= pri[drop]))
                drop = k;
        if (drop < 0)
            break;
        total -= w[drop];
        w[drop] = 0;
    }
    if (t->ready && total > t->cols - 1) { /* a narrow bar: the name takes what the others leave */
        int room = t->cols - 1 - (total - w[0]);
        fit_model(t, &name, room > 1 ? room : 1);
        txt[0] = name.p ? name.p : "";
    }
    uint64_t h = TUI_HASH0; /* the segments shown: unchanged figures are not drawn again */
    for (int k = 0; k < n; k++)
        if (w[k])
            h = tui_hash(h, txt[k], strlen(txt[k]) + 1);
    if (tui_row_same(t, t->status_y, h)) {
        free(name.p);
        return;
    }
    fill_row(t->status_y, 0, t->cols, THM_STATUS);
    int x = 1;
    for (int k = 0; k < n && x < t->cols - 2; k++) {
        if (!w[k])
            continue;
        if (k)
            x += draw_text(t->status_y, x, t->cols - x, " │ ", strlen(" │ "), THM_STATUS);
        x += draw_text(t->status_y, x, t->cols - x, txt[k], strlen(txt[k]),
                       k == 0 ? THM_STATUS_KEY : THM_STATUS);
    }
    free(name.p);
}

/* The input window; leaves the cursor at the editing position. */
static void draw_input(tui *t) {
    size_t      cur;
    const char *s = inp_text(t->in, &cur);
    size_t      n = strlen(s);
    int         w = t->cols - 2, hint = hint_rows(t, w, t->input_h);
    int         rows = t->input_h - hint;
    txt_line    small[256], *lines = small;
    int         nl = txt_wrap(s, n, w, small, 256);
    /* a message of more rows than that (a long paste): all its rows, so the cursor's is found
     * (with the first 256 alone, the end of the text and what is typed there were not shown) */
    if (nl > 256 && (lines = malloc((size_t)nl * sizeof *lines)) != NULL)
        txt_wrap(s, n, w, lines, nl);
    else if (nl > 256)
        lines = small, nl = 256;
    /* the line holding the cursor: the last one starting at or before it */
    int cl = 0;
    for (int k = 0; k < nl; k++)
        if (lines[k].off <= cur)
            cl = k;
    int first = cl - rows + 1 > 0 ? cl - rows + 1 : 0;
    int y0    = t->input_y + hint;
    /* the whole input area keyed on its first row: the text, the first line shown, the hint */
    const char *ht = inp_hint(t->in);
    uint64_t    h  = tui_hash(hash_int(hash_int(TUI_HASH0, first), hint), s, n + 1);
    if (!tui_row_same(t, t->input_y, tui_hash(h, ht, strlen(ht)))) {
        for (int r = 0; r < t->input_h; r++)
            fill_row(t->input_y + r, 0, t->cols, THM_INPUT);
        if (hint)
            draw_wrapped(t->input_y, 2, w, hint, ht, THM_INFO);
        for (int r = 0; r < rows && first + r < nl; r++) {
            draw_text(y0 + r, 0, 2, first + r == 0 ? "› " : "  ", strlen("› "), THM_PROMPT);
            draw_text(y0 + r, 2, w, s + lines[first + r].off, lines[first + r].len, THM_INPUT);
        }
    }
    int cx = 2 + txt_width(s + lines[cl].off, cur - lines[cl].off, 0);
    if (cx >= t->cols)
        cx = t->cols - 1;
    move(y0 + cl - first, cx);
    if (lines != small)
        free(lines);
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void render(tui *t);

void tui_render(tui *t, int force) {
    double now = ev_now();
    if (!t->dirty && !force)
        return;
    if (!force && t->streaming && now - t->last_draw < FRAME_S && !(t->dirty & DIRTY_INPUT))
        return; /* coalesce: the sleep (tui.c wait_input) ends when the frame is due */
    double c0 = thread_cpu_s();
    render(t);
    double dt = thread_cpu_s() - c0; /* K3_UI_STATS */
    t->draw_cpu += dt;
    t->draw_max = dt > t->draw_max ? dt : t->draw_max;
    t->draw_n++;
}

/* The too-small notice's line about the draft (tui.c small_key) into b: its last characters on
 * one line, and whether an Enter waits for a larger window; "" for an empty draft. */
static void small_draft(tui *t, char *b, size_t n) {
    const char *d   = inp_text(t->in, NULL);
    size_t      len = strlen(d), from = len > 120 ? len - 120 : 0;
    while (from > 0 && (d[from] & 0xC0) == 0x80)
        from--; /* a whole character */
    b[0] = 0;
    if (!len && !t->n_held)
        return;
    int k = snprintf(b, n, "  Draft: %s", from ? "\xE2\x80\xA6" : "");
    for (size_t i = from; i < len && (size_t)k + 4 < n; i++)
        b[k++] = d[i] == '\n' || d[i] == '\t' ? ' ' : d[i];
    b[k] = 0;
    if (t->n_held)
        snprintf(b + k, n - (size_t)k, " (then Enter and %d key%s, waiting for the larger window)",
                 t->n_held - 1, t->n_held == 2 ? "" : "s");
}

#define SMALL_FMT                                                                                            \
    "Terminal too small: %dx%d, k3chat needs at least %dx%d. Enlarge the window (typing goes into the "      \
    "draft; Ctrl-C or Ctrl-D at an empty one quits).%s%.800s"

static void render(tui *t) {
    double now = ev_now();
    if (t->too_small) {
        erase();
        char         m[1400];
        const entry *last = t->n_ents > t->small_from ? &t->ents[t->n_ents - 1] : NULL;
        const char  *err  = last && last->role == ROLE_ERROR && last->text.p ? last->text.p : "";
        size_t       k    = (size_t)snprintf(m, sizeof m, SMALL_FMT, t->cols, t->rows, MIN_COLS, MIN_ROWS,
                                    *err ? "  " : "", err);
        small_draft(t, m + k, sizeof m - k); /* k < 1100 */
        int w = t->cols > 0 ? t->cols : 1, n = txt_wrap(m, strlen(m), w, NULL, 0);
        int y = t->rows > n ? (t->rows - n) / 2 : 0;
        draw_wrapped(y, 0, w, t->rows - y, m, THM_NORMAL);
        rows_forget(t);
        attrset(A_NORMAL);
        tui_emoji_before();
        refresh();
        tui_emoji_after();
        t->dirty     = 0;
        t->last_draw = now;
        return;
    }
    if (t->dirty & (DIRTY_HIST | DIRTY_INPUT)) {
        int h = input_rows(t, t->cols - 2);
        if (h != t->input_h)
            tui_layout(t);
    }
    if ((t->dirty & DIRTY_ALL) == DIRTY_ALL)
        rows_forget(t); /* a new layout, theme or full repaint: every row is drawn */
    tui_md_frame(t);
    if (t->dirty & DIRTY_HIST)
        draw_hist(t);
    if (t->dirty & DIRTY_PANES)
        draw_panes(t, t->dirty);
    if (t->scroll != t->scroll_shown) /* a jump to the bottom (a command, a notice) or a clamp */
        t->dirty |= DIRTY_STATUS;
    if (t->dirty & DIRTY_STATUS)
        draw_status(t);
    draw_input(t);
    attrset(A_NORMAL);
    tui_emoji_before();
    wnoutrefresh(stdscr);
    doupdate();
    tui_emoji_after();
    t->turn_frames += t->streaming;
    tui_md_links(t);
    t->dirty     = 0;
    t->last_draw = ev_now();
    if (t->tok_t_pending > 0) {
        t->flowing = 1;
        double lat = t->last_draw - t->tok_t_pending;
        t->lat_sum += lat;
        t->lat_n++;
        if (lat > t->lat_max)
            t->lat_max = lat;
        t->tok_t_pending = 0;
    }
}
