/* md-stream.c: streaming Markdown (md_stream_update, md_stream_free; see md.h).
 *
 * DESIGN
 * The text is cut into chunks at blank lines outside code fences that are followed by a line at
 * column 0; finished chunks are rendered once into st->fin, the open chunk into st->open again as
 * text arrives. Fast paths skip md4c's render of the whole open chunk where its result is known,
 * so that a frame costs what arrived, not the chunk's length:
 *   - a plain paragraph (pl_layout wraps only its last line again);
 *   - an open fenced code block (fc_layout adds the rows of new lines, and of a partial line lays
 *     out only its last row again);
 *   - a table (tb_layout: md4c collects each row once behind a copy of the header and delimiter
 *     lines; only new rows are laid out unless a column's width changes);
 *   - a tight list, also right after a paragraph line (li_layout: md4c renders each item alone once,
 *     and the last item per update, unless it is one line of plain text: li_item wraps its last row);
 *   - a block quote (qt_layout: cut at a blank quoted line before a paragraph, md4c renders each
 *     segment alone once, and the open one per update unless it is a plain paragraph, whose last
 *     row alone is wrapped again).
 * Each lays out exactly what md_render would (md.c's code_line, table and run helpers, shared
 * through md-impl.h), and gives way to md4c wherever that cannot be said.
 *
 * Every path has the same shape. Its md_fast (in md_stream: pl, fc, tb, li, qt) says which chunk it
 * last looked at, whether that chunk was ruled out for good (fast_no), whether its state was set
 * up for it (ready) and whether open is its layout (on); a new chunk clears all four (fast_new), a
 * finished one that the path moves to fin clears ready and on (fast_fin). Its state for the chunk
 * is one struct (md_pls, md_fcs, md_tbs, md_lis, md_qts, together md_paths). One table
 * (fast_paths) lists the paths in the order md_stream_update tries them, with each one's layout
 * and, where it keeps what md4c would give a finished chunk, its finish; md_stream_update reads
 * only the table (stream_fast, stream_finish, stream_restart).
 */
#include "md-impl.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ==== streaming ============================================================== */

static int blank_line(const char *s, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (s[k] != ' ' && s[k] != '\t' && s[k] != '\r')
            return 0;
    return 1;
}

/* A fence line (up to 3 spaces, then 3+ ` or ~; after a run of backticks no backtick, or it is
 * a code span to md4c, as CommonMark says): its character and length, else 0; *rest: only
 * spaces follow, up to the line's end or a CR (it can close a fence: md4c takes no tab there). */
static int fence_line(const char *s, size_t n, char *ch, int *rest) {
    size_t i = 0;
    while (i < n && i < 3 && s[i] == ' ')
        i++;
    if (i >= n || (s[i] != '`' && s[i] != '~'))
        return 0;
    size_t j = i;
    while (j < n && s[j] == s[i])
        j++;
    if (j - i < 3 || (s[i] == '`' && memchr(s + j, '`', n - j)))
        return 0;
    size_t e = j;
    while (e < n && s[e] == ' ')
        e++;
    *ch   = s[i];
    *rest = e == n || (s[e] == '\r' && blank_line(s + e, n - e));
    return (int)(j - i);
}

/* Text of the open chunk as shown while streaming: a half-received table row held back and
 * unclosed `code`, **strong** and ~~strike~~ of its last paragraph closed. */
static size_t view_end(const char *s, size_t n) {
    size_t last = n;
    while (last > 0 && s[last - 1] != '\n')
        last--;
    /* [last, n) is the incomplete final line */
    if (last < n && s[last] == '|' && last > 0) {
        size_t prev = last - 1;
        while (prev > 0 && s[prev - 1] != '\n')
            prev--;
        if (s[prev] == '|')
            n = last;
    }
    /* markers at the very end open something whose text has not come yet ("**", "`", a "~~"
     * cut in two): shown by the next token, or closed below once text follows them */
    while (n > 0 && strchr("*`~_$", s[n - 1]))
        n--;
    return n;
}

/* Inline markers still open at the end of a paragraph's text (stream_view): a code span's run of
 * backticks, ** and ~~. view_marks runs over a text in pieces cut after newlines. */
typedef struct view_mk {
    int ticks, stars, tildes, tick_run;
} view_mk;

static void view_marks(view_mk *m, const char *s, size_t k, size_t n) {
    while (k < n) {
        if (s[k] == '`') {
            size_t j = k;
            while (j < n && s[j] == '`')
                j++;
            if (m->ticks && (int)(j - k) == m->tick_run)
                m->ticks = 0;
            else if (!m->ticks) {
                m->ticks    = 1;
                m->tick_run = (int)(j - k);
            }
            k = j;
            continue;
        }
        if (!m->ticks && k + 1 < n && s[k] == '*' && s[k + 1] == '*') {
            m->stars ^= 1;
            k += 2;
            continue;
        }
        if (!m->ticks && k + 1 < n && s[k] == '~' && s[k + 1] == '~') {
            m->tildes ^= 1;
            k += 2;
            continue;
        }
        k++;
    }
}

/* The markers left open at the end of s[from, v): those of m (the ones open at from) and the
 * text's after them, from the last blank line on when there is one (a new paragraph). */
static view_mk view_open_marks(const view_mk *m, const char *s, size_t from, size_t v) {
    view_mk r  = *m;
    size_t  p0 = from;
    for (size_t k = from; k + 1 < v; k++)
        if (s[k] == '\n' && s[k + 1] == '\n')
            p0 = k + 2, r = (view_mk){0};
    view_marks(&r, s, p0, v);
    return r;
}

/* b (a paragraph's text as shown) with the markers m left open closed. */
static void view_close(txt_buf *b, const view_mk *m) {
    if (m->stars || m->tildes) /* a closer after a space would not close: end at the last word */
        while (b->n > 0 && (b->p[b->n - 1] == ' ' || b->p[b->n - 1] == '\t'))
            b->p[--b->n] = 0;
    if (m->ticks)
        for (int k = 0; k < m->tick_run; k++)
            txt_buf_add(b, "`", 1);
    if (m->stars)
        txt_buf_add(b, "**", 2);
    if (m->tildes)
        txt_buf_add(b, "~~", 2);
}

static int stream_view(md_stream *st, const char *s, size_t n) {
    txt_buf *b = &st->tmp;
    b->n       = 0;
    if (txt_buf_add(b, s, view_end(s, n)))
        return -1;
    s = b->p;
    n = b->n;
    if (st->fence)
        return 0; /* an open fence: md4c shows the code to the end */
    /* the last paragraph: after the last blank line */
    view_mk m = view_open_marks(&(view_mk){0}, s, 0, n);
    view_close(b, &m);
    return 0;
}

/* ==== the fast paths' state ================================================ */

/* Open's counts at a point (the lines, runs, text and links laid out so far), to go back to. */
typedef struct doc_mark {
    int    lines, links;
    size_t runs, text;
} doc_mark;

static doc_mark doc_mark_at(const md_doc *d) {
    return (doc_mark){d->n_lines, d->n_links, d->n_runs, d->text.n};
}

/* d back to what it held at m (what was laid out after m dropped). */
static void doc_back(md_doc *d, const doc_mark *m) {
    d->n_lines = m->lines;
    d->n_runs  = m->runs;
    d->text.n  = m->text;
    d->n_links = m->links;
}

/* A plain paragraph (pl_layout): open is laid out without md4c, exactly as md_render lays it out,
 * and each update wraps only from the start of its last line. */
typedef struct md_pls {
    size_t scan; /* bytes [chunk start, scan) are known to be plain */
    size_t line; /* where open's last line starts                   */
} md_pls;

/* A fenced code block still open, its first line a fence at column 0 (fc_layout): open holds md4c's
 * head of it and the rows of its complete lines, laid out once each. */
typedef struct md_fcs {
    size_t line;  /* the next line to lay out                                  */
    int    lines; /* open's lines that stay (head and complete lines' rows)   */
    int    any;   /* a line is in                                              */
    size_t scan;  /* bytes before it are known to hold no CR or NUL           */
    /* The partial last line (a long line still coming): the row of open it last ended with, which
     * the next update lays out again from byte part_off (column part_col) on, while the line
     * starting at part_at is still the partial one; part_row -1: from the line's start. */
    int    part_row, part_col;
    size_t part_at, part_off;
} md_fcs;

/* A table, its first two lines a table's header and delimiter row (tb_layout): md4c collects each
 * complete row once, behind a copy of those two lines, into t; open keeps the rows laid out and an
 * update lays out only the new rows, the partial last one and the bottom border, unless a column's
 * width changed (then every row again, without md4c). */
typedef struct md_tbs {
    table   t;      /* the header and the complete rows so far, as md4c collected them        */
    md_doc  url;    /* the URLs of t's links: url's links[i] is open's links[i]               */
    md_doc  tmp;    /* where a collecting render goes (links only)                            */
    txt_buf in;     /* the header and delimiter lines (head bytes), then the rows to collect   */
    size_t  head;   /* the chunk's bytes [done, done + head) are the header and delimiter     */
    size_t  line;   /* the text's next line to collect: every line before it is in t          */
    size_t  blank;  /* closed: the lines [line, blank) are blank                              */
    int     closed; /* a blank line at line ended the table                                   */
    view_mk mk;     /* stream_view's markers over the collected lines                         */
    int     nat[128];
    /* open: t's cells [0, cells) laid out at widths w (mode) and after them nothing but what the
     * next update takes back (the partial row, the bottom border): open's counts at that point */
    int      laid, mode, w[128];
    size_t   cells;
    doc_mark cut;
} md_tbs;

/* A tight list, its first line an item at column 0 or after one block (li_layout): md4c renders each
 * item alone, once the line of the next item is complete, and open keeps its lines; an update
 * renders only the last item again (or wraps its last row, li_item). */
typedef struct md_lis {
    char     mark;    /* the bullet ('-', '*', '+') or the ordered delimiter ('.', ')')             */
    long     next;    /* ordered: the number the open item must carry                               */
    size_t   seg;     /* the open item, the last one, starts here: open holds the items before it   */
    size_t   scan;    /* the complete lines before scan were looked at                              */
    size_t   ref;     /* the bytes before ref were looked at for "]:" (a link reference definition) */
    int      blank;   /* a blank line came after seg                                                */
    view_mk  mk;      /* stream_view's markers over [done, seg)                                     */
    int      swapped; /* keep holds them                                                            */
    doc_mark cut;     /* open after the items before seg                                             */
    size_t   first;   /* the first item starts here; the lines before it are one block (li_lead)      */
    /* the open item (it_seg) as one line of plain text (li_item): open's rows before it_keep final,
     * the last from byte it_row on laid out again; its text from it_t0, plain before it_ok; its
     * first row it_first, after the marker it_mark (it_pw columns; 0: no marker) */
    int    it_on, it_keep, it_first, it_pw;
    size_t it_seg, it_t0, it_ok, it_row, it_mark_n;
    char   it_mark[48];
    md_doc keep; /* open's lines while md4c shows the chunk for an update (swapped with open)     */
    size_t lead, lead_done; /* not cleared: the lines of the chunk at lead_done before lead hold no item */
} md_lis;

/* A block quote, its first line starting with '>' (qt_layout). The chunk is cut into segments at
 * a blank quoted line followed by a quoted line whose text starts with a letter: there md4c ends
 * every block of the quote (a list, an indented code block, a nested quote or a table cannot go on
 * past a blank line and a line of text at the quote's left edge) except a fenced code block, so
 * no cut is made after "```" or "~~~" or after a line that does not start with '>' (a lazy line or
 * the quote's end). Before a cut md4c's render of the whole chunk has the lines of the segments
 * before it, then the quote's bar alone (the blank line between two blocks in it), then what it
 * makes of the segment after it alone. */
typedef struct md_qts {
    size_t   seg;   /* the open segment starts here: open holds the segments before it          */
    size_t   scan;  /* the complete lines before scan were looked at                            */
    size_t   ref;   /* the bytes before ref were looked at for "]:"                             */
    int      blank; /* the last line was blank and came after a line of text in the segment    */
    int      text;  /* the open segment has a line of text                                      */
    int      nocut; /* no cut from here on (a fence, a line without '>')                        */
    view_mk  mk;    /* stream_view's markers over [done, seg)                                   */
    doc_mark cut;   /* open after the segments before seg                                       */
    /* The open segment as one plain paragraph (each line '>', an optional space and plain_scan's
     * text starting with a letter), then only blank lines: open holds its rows after the cut, those
     * before pp_keep final, the last one (from byte pp_row on) laid out again by each update. */
    int    pp, pp_laid, pp_keep;
    size_t pp_row, pp_end;   /* pp_end: the end of its last complete line's text                   */
    size_t part_at, part_ok; /* the partial line at part_at is plain before part_ok (a long line) */
} md_qts;

/* The fast paths' states, one per path (md_stream.paths), each for the chunk of its md_fast. */
typedef struct md_paths {
    md_pls pl;
    md_fcs fc;
    md_tbs tb;
    md_lis li;
    md_qts qt;
} md_paths;

static void paths_free(md_paths *P) {
    if (!P)
        return;
    md_table_release(&P->tb.t);
    md_doc_free(&P->tb.url);
    md_doc_free(&P->tb.tmp);
    free(P->tb.in.p);
    md_doc_free(&P->li.keep);
    free(P);
}

static void doc_swap(md_doc *a, md_doc *b) {
    md_doc t = *a;
    *a       = *b;
    *b       = t;
}

/* Fast path p and the open chunk, which starts at done: a new chunk starts the path over (neither
 * set up, laid out nor ruled out) and returns 1; else 0. */
static int fast_new(md_fast *p, size_t done) {
    if (p->done == done)
        return 0;
    *p = (md_fast){.done = done};
    return 1;
}

/* Whether the path may still lay out the chunk that starts at done (its chunk, not ruled out). */
static int fast_at(const md_fast *p, size_t done) {
    return !p->no && p->done == done;
}

/* The open chunk is not one for the path, for good (open is no longer its layout). 1. */
static int fast_no(md_fast *p) {
    p->on = 0;
    p->no = 1;
    return 1;
}

/* d's lines followed by those of e (e's text, runs and links copied). 0, or -1 out of memory. */
static int doc_append(md_doc *d, const md_doc *e) {
    size_t t0 = d->text.n, r0 = d->n_runs;
    int    l0 = d->n_links;
    if (txt_buf_add(&d->text, e->text.p ? e->text.p : "", e->text.n))
        return d->oom = 1, -1;
    for (int i = 0; i < e->n_links; i++)
        if (md_doc_link(d, "", 0) < 0)
            return d->oom = 1, -1;
        else
            d->links[l0 + i] = (md_link){e->links[i].off + t0, e->links[i].len};
    for (size_t k = 0; k < e->n_runs; k++) {
        md_run u = e->runs[k];
        /* run0 past the end: never merged with the run before, as e's runs are not */
        if (md_doc_run(d, d->n_runs + 1, u.off + t0, u.len, u.role, u.link >= 0 ? u.link + l0 : -1))
            return d->oom = 1, -1;
    }
    for (int i = 0; i < e->n_lines; i++) {
        md_line l = e->lines[i];
        l.run0 += r0;
        if (md_doc_line(d, l))
            return d->oom = 1, -1;
    }
    return 0;
}

/* The chunk that has finished as path p laid it out in open: open's lines move to fin, and the
 * path's state is for no chunk. 0, or -1 out of memory. */
static int fast_fin(md_stream *st, md_fast *p) {
    if (doc_append(&st->fin, &st->open))
        return -1;
    md_doc_reset(&st->open);
    p->on = p->ready = st->last_ok = 0;
    return 0;
}

/* ==== streaming a plain paragraph ========================================== */

/* Whether s[from, n) keeps the chunk s[done, n) a plain paragraph: each of its lines starts with a
 * letter (no block marker) and ends without a space (no hard break), and it has no control
 * character but the newlines, no invalid UTF-8 and nothing md4c gives a meaning inline (emphasis,
 * code, math, strike, links and autolinks, entities, escapes, table pipes). Then md_render shows
 * it as its bytes with each newline a space (md4c's soft break), trailing spaces trimmed, greedily
 * wrapped at the width in the base role: what pl_layout does. Returns the end of the plain bytes. */
static size_t plain_scan(const char *s, size_t done, size_t from, size_t n) {
    for (size_t k = from; k < n;) {
        unsigned char c = (unsigned char)s[k];
        if ((k == done || s[k - 1] == '\n') && !((c | 0x20) >= 'a' && (c | 0x20) <= 'z') && c < 0xC2)
            return k;                       /* a line starts with a letter: no block marker */
        if (c == '\n' && s[k - 1] != ' ') { /* a soft line break (two spaces would be a hard one) */
            k++;
            continue;
        }
        if (c < 0x80) {
            if (c < 0x20 || c == 0x7f || strchr("\\`*_~$[]<>!&|:@", c))
                return k;
            if (c == '.' && k >= done + 3 && !strncasecmp(s + k - 3, "www", 3))
                return k; /* a www autolink */
            k++;
            continue;
        }
        utf8proc_int32_t cp;
        utf8proc_ssize_t l =
            utf8proc_iterate((const utf8proc_uint8_t *)s + k, (utf8proc_ssize_t)(n - k), &cp);
        if (l <= 0 || txt_ctrl_cp(cp)) /* md_render shows a C1 or bidi control as its escape */
            return k;
        k += (size_t)l;
    }
    return n;
}

/* One line of a plain paragraph: its bytes as one run in role (as ln_begin, ln_add, ln_end
 * make it without a prefix). 0, or -1 out of memory. */
static int pl_line_add(md_doc *d, const char *s, size_t n, int role, int width) {
    size_t run0 = d->n_runs, off = d->text.n;
    if (n && (txt_buf_add(&d->text, s, n) || md_doc_run(d, run0, off, n, role, -1)))
        return d->oom = 1, -1;
    if (md_doc_line(d, (md_line){run0, (int)(d->n_runs - run0), width}))
        return d->oom = 1, -1;
    return 0;
}

/* The rows of s[0, n) greedily wrapped at w columns (txt_wrap) into buf (64 rows) or, when more,
 * into *rows allocated here (the caller frees it when it is not buf). Their count, or -1 out of
 * memory. */
static int wrap_rows(const char *s, size_t n, int w, txt_line *buf, txt_line **rows) {
    int k = txt_wrap(s, n, w, buf, 64);
    *rows = buf;
    if (k > 64) {
        if (!(*rows = malloc((size_t)k * sizeof **rows)))
            return -1;
        txt_wrap(s, n, w, *rows, k);
    }
    return k;
}

/* Lay out the plain paragraph s[done, n) into st->open, wrapping again only from the start of
 * its last line: greedy wrapping restarted at a line start gives the same lines after it, and a
 * line is final once a later one exists. 0, or -1 out of memory. */
static int pl_wrap(md_stream *st, const char *s, size_t n) {
    md_pls *P = &st->paths->pl;
    md_doc *d = &st->open;
    if (!st->pl.on) {
        md_doc_reset(d);
        st->pl.on = 1;
        P->line   = st->done;
        if (st->fin.n_lines && pl_line_add(d, NULL, 0, st->role, 0)) /* the blank line between blocks */
            return -1;
    } else if (d->n_lines > 0) { /* the last line is laid out again */
        const md_line *l = &d->lines[--d->n_lines];
        if (l->n_runs) {
            d->text.n = d->runs[l->run0].off;
            d->n_runs = l->run0;
        }
    }
    size_t e = n;
    while (e > P->line && (s[e - 1] == ' ' || s[e - 1] == '\n'))
        e--; /* md4c drops a paragraph's trailing spaces and its line end */
    const char *p = s + P->line;
    if (memchr(p, '\n', e - P->line)) { /* soft line breaks: spaces */
        txt_buf *b = &st->tmp;
        b->n       = 0;
        if (txt_buf_add(b, p, e - P->line))
            return d->oom = 1, -1;
        for (char *q = b->p; (q = memchr(q, '\n', (size_t)(b->p + b->n - q))) != NULL;)
            *q++ = ' ';
        p = b->p;
    }
    txt_line buf[64], *L;
    int      nl = wrap_rows(p, e - P->line, st->width < 2 ? 2 : st->width, buf, &L);
    if (nl < 0) /* a long paragraph laid out afresh (a new width) */
        return d->oom = 1, -1;
    int rc = 0;
    for (int i = 0; i < nl && !rc; i++)
        rc = pl_line_add(d, p + L[i].off, L[i].len, st->role, L[i].width);
    if (nl > 0)
        P->line += L[nl - 1].off;
    if (L != buf)
        free(L);
    return rc;
}

/* The open chunk s[done, n) as a plain paragraph (plain_scan; the bytes looked at before are not
 * looked at again), laid out by pl_wrap. 0 done, 1 not such a chunk, -1 out of memory. */
static int pl_layout(md_stream *st, const char *s, size_t n, unsigned f) {
    md_pls *P = &st->paths->pl;
    (void)f;
    if (!st->pl.ready) {
        P->scan      = st->done;
        st->pl.ready = 1;
    }
    P->scan     = plain_scan(s, st->done, P->scan, n);
    st->last_ok = 0;
    if (P->scan != n)
        return fast_no(&st->pl); /* for good: the chunk only grows */
    return pl_wrap(st, s, n);
}

/* md_render with the stream's context: its buffers stay allocated from one frame to the next. */
static int stream_render(md_stream *st, md_doc *d, const char *s, size_t n, unsigned flags) {
    if (!st->ctx && !(st->ctx = md_ctx_new()))
        return d->oom = 1, -1;
    return md_render_with(st->ctx, d, s, n, st->width, st->role, flags);
}

/* ==== streaming an open code block ========================================== */

/* Whether s[0, n) holds a NUL or a CR (md4c's line ends and its U+FFFD differ from ours). */
static int has_cr_nul(const char *s, size_t n) {
    return memchr(s, '\r', n) || memchr(s, 0, n);
}

/* A line of a fenced code block as md4c gives it: its indentation as spaces (tab stops every 4
 * columns), then the rest as it is; its rows laid out. */
static void fc_code_line(R *r, const char *s, size_t ln, int box, int iw, md_code_last *last) {
    size_t k   = 0;
    int    col = 0;
    for (; k < ln && (s[k] == ' ' || s[k] == '\t'); k++)
        col = s[k] == ' ' ? col + 1 : (col + 4) / 4 * 4;
    r->code.n = 0;
    for (int i = 0; i < col; i++)
        txt_buf_add(&r->code, " ", 1);
    if (txt_buf_add(&r->code, s + k, ln - k))
        r->err = r->d->oom = 1;
    md_code_rows(r, r->code.p ? r->code.p : "", r->code.n, box, iw, 0, last);
    /* where the last row starts, in s (not inside the indentation made of spaces, and not while
     * the line is all indentation: a tab still to come is md4c's indentation, to 4 columns, not a
     * tab of the code that md_code_rows expands to the next tab stop) */
    if (last && last->line >= 0 && last->off >= (size_t)col && k < ln)
        last->off = last->off - (size_t)col + k;
    else if (last)
        last->line = -1;
}

/* Open's lines from line k on dropped (their runs and text with them). */
static void doc_cut(md_doc *d, int k) {
    if (k >= d->n_lines)
        return;
    size_t run0 = d->lines[k].run0;
    if (run0 < d->n_runs) {
        d->text.n = d->runs[run0].off;
        d->n_runs = run0;
    }
    d->n_lines = k;
}

/* The head of the open code block s[done, body) (body: after its fence line): md4c's rendering of
 * the fence line, to the box's top, made once into open. 0, 1 not such a chunk (an indented fence,
 * from which md4c takes as much indentation off each code line, or line ends md4c sees and we do
 * not), -1 out of memory. */
static int fc_head(md_stream *st, const char *c, size_t body, unsigned f) {
    md_fcs *F = &st->paths->fc;
    md_doc *d = &st->open;
    if (c[0] == ' ' || has_cr_nul(c, body - st->done))
        return fast_no(&st->fc);
    st->last_ok = 0; /* open is rebuilt here */
    md_doc_reset(d);
    if (stream_render(st, d, c, body - st->done, f))
        return -1;
    int iw;
    doc_cut(d, d->n_lines - 1 - md_code_box(st->width < 2 ? 2 : st->width, &iw)); /* the empty row, bottom */
    st->fc.on   = 1;
    F->line     = body;
    F->any      = 0;
    F->lines    = d->n_lines;
    F->part_row = -1;
    F->scan     = 0;
    return 0;
}

/* Whether the code line s[0, n) closes the open fence. */
static int fc_closes(const md_stream *st, const char *s, size_t n) {
    char ch;
    int  rest, fl = fence_line(s, n, &ch, &rest);
    return fl >= st->fence_n && ch == st->fence_ch && rest;
}

/* The open chunk s[done, n) as a fenced code block that is still open (its first line a fence at
 * column 0): what md4c makes of the stream's view of it, without md4c after its first line. The
 * head is made once (fc_head); the rows of a complete line once; each update adds the rows of the
 * new complete lines, then those of the partial last line and the bottom, which the next update
 * takes back: of a partial line only its last row (a line of megabytes without a newline, laid out
 * again whole, cost its length every frame). Code lines are laid out one by one in md_render too
 * (md_code_line), so this is exact. 0 done, 1 not such a chunk (md4c renders it), -1 out of memory. */
static int fc_layout(md_stream *st, const char *s, size_t n, unsigned f) {
    if (!st->fence || st->fence_at != st->done)
        return 1;
    md_fcs     *F   = &st->paths->fc;
    md_doc     *d   = &st->open;
    const char *c   = s + st->done;
    const char *eol = memchr(c, '\n', n - st->done);
    if (!st->fc.on) { /* the fence line was scanned: it is complete */
        int rc = fc_head(st, c, (size_t)(eol - s) + 1, f);
        if (rc)
            return rc;
    }
    size_t v = st->done + view_end(c, n - st->done);
    /* a partial line laid out before and no newline since: its rows but the last stay (a line of
     * megabytes costs its new bytes an update, not its whole length) */
    int resume = F->part_row >= 0 && F->part_at == F->line && F->part_off <= v && v > F->line &&
                 !memchr(s + F->line, '\n', v - F->line) && !fc_closes(st, s + F->line, v - F->line);
    doc_cut(d, resume ? F->part_row : F->lines); /* what the last update laid out again */
    R *r = st->ctx;
    md_render_begin(r, d, st->width, st->role, f);
    int a = r->width, iw, box = md_code_box(a, &iw);
    /* the new complete lines */
    for (const char *e; !resume && F->line < v && (e = memchr(s + F->line, '\n', v - F->line));) {
        size_t ln = (size_t)(e - (s + F->line));
        if (has_cr_nul(s + F->line, ln))
            return fast_no(&st->fc);
        fc_code_line(r, s + F->line, ln, box, iw, NULL);
        F->line += ln + 1;
        F->any = 1;
    }
    if (!resume)
        F->lines = d->n_lines;
    /* the partial last line (not a closing fence still without its newline) */
    if (v > F->line) {
        size_t from = F->scan > F->line ? F->scan : F->line;
        if (v > from && has_cr_nul(s + from, v - from))
            return fast_no(&st->fc);
        F->scan = v > from ? v : from;
        if (fc_closes(st, s + F->line, v - F->line))
            v = F->line;
    }
    md_code_last last = {-1, 0, 0};
    if (resume) {
        md_code_rows(r, s + F->part_off, v - F->part_off, box, iw, F->part_col, &last);
        last.off += F->part_off;
    } else if (v > F->line || !F->any) {
        fc_code_line(r, s + F->line, v - F->line, box, iw, &last);
        last.off += F->line;
    }
    F->part_row = last.line;
    F->part_at  = F->line;
    F->part_off = last.off;
    F->part_col = last.col;
    st->fc_part = last.line >= 0;
    if (box)
        md_code_bottom(r, a);
    return r->err ? -1 : 0;
}

/* ==== streaming a table ====================================================== */

/* md4c collects the cells of in[0, in.n) (MD_COLLECT): 1 when it is one table and nothing else,
 * its cells then in st->ctx->tb_keep; 0 when not; -1 out of memory. */
static int tb_collect(md_stream *st, unsigned f) {
    md_tbs *T = &st->paths->tb;
    md_doc_reset(&T->tmp);
    R  *r  = st->ctx;
    int rc = md_render_with(r, &T->tmp, T->in.p, T->in.n, st->width, st->role, (f & MD_OSC8) | MD_COLLECT);
    if (rc && T->tmp.oom)
        return -1;
    return !rc && r->coll_tables == 1 && !r->coll_bad && r->tb_keep;
}

/* Collect the complete lines of s from T->line to end (a line start) into T->t: they are rows,
 * until a blank line closes the table (after which only blank lines may come). 0 done, 1 the chunk
 * is no longer one table (tb_no), -1 out of memory. */
static int tb_commit(md_stream *st, const char *s, size_t end, unsigned f) {
    md_tbs *T = &st->paths->tb;
    size_t  p = T->closed ? T->blank : T->line;
    if (T->closed) {
        for (; p < end; p++)
            if (s[p] != ' ' && s[p] != '\t' && s[p] != '\r' && s[p] != '\n')
                return 1;
        T->blank = end;
        return 0;
    }
    size_t q = p; /* rows [p, q): lines up to the first blank one */
    while (q < end) {
        const char *e  = memchr(s + q, '\n', end - q);
        size_t      ln = (size_t)(e - (s + q));
        if (blank_line(s + q, ln)) {
            T->closed = 1;
            break;
        }
        q += ln + 1;
    }
    for (const char *cr = s + p; q > p && (cr = memchr(cr, '\r', (size_t)(s + q - cr))) != NULL; cr++)
        if (cr[1] != '\n')
            return 1; /* a line end of md4c's inside a line: it may have seen a blank line */
    if (q > p) {
        T->in.n = T->head;
        if (txt_buf_add(&T->in, s + p, q - p))
            return -1;
        int ok = tb_collect(st, f);
        if (ok <= 0)
            return ok < 0 ? -1 : 1;
        table *c    = st->ctx->tb_keep;
        size_t from = T->t.n_cells;
        st->tb_rows += c->n_rows - c->n_head;
        if (md_table_add_rows(&T->t, c, c->n_head, &T->tmp, &T->url))
            return -1;
        md_table_nat(&T->t, from, T->t.n_cells, T->nat);
        view_marks(&T->mk, s, p, q);
        T->line = q;
    }
    if (T->closed) {
        T->blank = q;
        return tb_commit(st, s, end, f);
    }
    return 0;
}

/* open's links made those of T->url (the ones after open's own added). 0, or -1 out of memory. */
static int tb_links(md_doc *d, const md_doc *url) {
    for (int i = d->n_links; i < url->n_links; i++)
        if (md_doc_link(d, url->text.p + url->links[i].off, url->links[i].len) < 0)
            return d->oom = 1, -1;
    return 0;
}

/* Lay the table out into open: the collected rows (only those not laid out yet, when the widths
 * are those of the last layout), then the rows of tail (the partial last row, collected into
 * tb_keep, or none) and the bottom border. 0, or -1 out of memory. */
static int tb_draw(md_stream *st, const table *tail, unsigned f) {
    md_tbs *T = &st->paths->tb;
    md_doc *d = &st->open;
    R      *r = st->ctx;
    int     nat[128], w[128];
    memcpy(nat, T->nat, sizeof nat);
    if (tail)
        md_table_nat(tail, 0, tail->n_cells, nat);
    md_render_begin(r, d, st->width, st->role, f);
    int mode = md_table_widths(r, &T->t, nat, w);
    if (T->laid && (mode != T->mode || memcmp(w, T->w, sizeof w)))
        T->laid = 0; /* a column's width changed: every row again */
    if (!T->laid) {
        md_doc_reset(d);
        T->cells = 0;
        st->tb_relaid++;
    } else {
        doc_back(d, &T->cut);
    }
    if (tb_links(d, &T->url))
        return -1;
    if (T->cells < T->t.n_cells || !T->laid) {
        if (T->cells < T->t.n_cells)
            st->tb_laid += T->t.cells[T->t.n_cells - 1].row + 1 - T->t.cells[T->cells].row;
        md_table_part(r, &T->t, T->cells, T->t.n_cells, w, mode, !T->laid, 0);
    }
    T->laid = 1;
    T->mode = mode;
    memcpy(T->w, w, sizeof w);
    T->cells = T->t.n_cells;
    T->cut   = doc_mark_at(d);
    if (tail && tail->n_rows > tail->n_head) { /* the partial row, for this update only */
        size_t c0 = T->t.n_cells, t0 = T->t.st.t.n, s0 = T->t.st.n_sp;
        int    rows = T->t.n_rows, links = T->url.n_links;
        size_t url_n = T->url.text.n;
        int    rc    = md_table_add_rows(&T->t, tail, tail->n_head, &T->tmp, &T->url) || tb_links(d, &T->url);
        if (!rc) {
            st->tb_laid += T->t.n_rows - rows;
            md_table_part(r, &T->t, c0, T->t.n_cells, w, mode, 0, 0);
        }
        T->t.n_cells   = c0;
        T->t.st.t.n    = t0;
        T->t.st.n_sp   = s0;
        T->t.st.sp0    = s0;
        T->t.n_rows    = rows;
        T->url.n_links = links;
        T->url.text.n  = url_n;
        if (rc)
            return d->oom = 1, -1;
    }
    if (mode == MD_TB_BOX)
        md_table_part(r, &T->t, 0, 0, w, mode, 0, 1);
    return r->err ? -1 : 0;
}

/* Whether the chunk's first two lines c[0, head) are a table's header and delimiter rows, md4c
 * says: then T is set up for the chunk (its header row collected). 0 set up, 1 not a table (for
 * good), -1 out of memory. */
static int tb_start(md_stream *st, const char *s, const char *c, size_t head, unsigned f) {
    md_tbs     *T  = &st->paths->tb;
    const char *e1 = memchr(c, '\n', head);
    if (!memchr(e1 + 1, '|', (size_t)(c + head - 1 - e1)))
        return fast_no(&st->tb); /* no delimiter row */
    T->in.n = 0;
    if (txt_buf_add(&T->in, c, head))
        return -1;
    int ok = tb_collect(st, f);
    if (ok < 0)
        return -1;
    table *h = st->ctx->tb_keep;
    if (!ok || h->n_rows != 1 || h->n_head != 1)
        return fast_no(&st->tb);
    md_table_release(&T->t);
    md_doc_reset(&T->url);
    if (md_table_add_rows(&T->t, h, 0, &T->tmp, &T->url))
        return -1;
    T->t.n_head = h->n_head;
    T->t.n_cols = h->n_cols;
    memcpy(T->t.align, h->align, sizeof T->t.align);
    memset(T->nat, 0, sizeof T->nat);
    md_table_nat(&T->t, 0, T->t.n_cells, T->nat);
    T->head = head;
    T->line = st->done + head;
    T->mk   = (view_mk){0};
    view_marks(&T->mk, s, st->done, T->line);
    T->closed = T->laid = 0;
    st->tb.on           = 0;
    st->tb.ready        = 1;
    return 0;
}

/* After the collected rows, the view's rest s[T->line or T->blank, v): *tail the partial row as
 * stream_view shows it, collected (in tb_keep), or NULL when none. 0, 1 the view is not the table
 * as laid out (md4c renders it, this update), -1 out of memory. */
static int tb_tail(md_stream *st, const char *s, size_t v, unsigned f, table **tail) {
    md_tbs *T = &st->paths->tb;
    *tail     = NULL;
    if (T->closed) {
        /* blank lines and the partial one: the table as it is, unless stream_view adds closers
         * (no empty line after the rows and markers left open by them) or the partial line is
         * more than white space */
        size_t from = T->blank > v ? v : T->blank;
        for (size_t k = from; k < v; k++)
            if (s[k] != ' ' && s[k] != '\t' && s[k] != '\r')
                return 1;
        if ((T->mk.ticks || T->mk.stars || T->mk.tildes) &&
            !memmem(s + T->line - 1, v - T->line + 1, "\n\n", 2))
            return 1;
    } else if (v > T->line || T->mk.ticks || T->mk.stars || T->mk.tildes) {
        /* the partial row as stream_view shows it: with the markers left open closed */
        view_mk m = T->mk;
        view_marks(&m, s, T->line, v);
        T->in.n = T->head;
        if (txt_buf_add(&T->in, s + T->line, v - T->line))
            return -1;
        view_close(&T->in, &m);
        if (T->in.n > T->head) {
            int ok = tb_collect(st, f);
            if (ok <= 0)
                return ok < 0 ? -1 : 1; /* not a row (yet) */
            *tail = st->ctx->tb_keep;
            st->tb_rows += (*tail)->n_rows - (*tail)->n_head;
        }
    }
    return 0;
}

/* The open chunk s[done, n) as a table whose header and delimiter rows are its first two lines:
 * what md4c makes of the stream's view of it, md4c collecting each row once. The view of such a
 * chunk is its complete lines (rows) and the partial last line, to which stream_view's closing
 * markers are added (they depend on the markers of the earlier rows, kept in T->mk); md4c parses
 * each line of a table by itself once the table has started (no row changes another, and in a
 * chunk that starts with the header nothing defines a link reference), so collecting rows behind a
 * copy of the header and delimiter lines gives the cells it gives in the whole text. A chunk in
 * which md4c sees anything else (a list after the table, text after a blank line) goes back to
 * md4c for good. 0 done, 1 not such a chunk (md4c renders it), -1 out of memory. */
static int tb_layout(md_stream *st, const char *s, size_t n, unsigned f) {
    if (st->fence) /* a fence line seen as a row by md4c: stream_view then closes nothing */
        return st->tb.on = 0, 1;
    const char *c = s + st->done, *e1 = memchr(c, '\n', n - st->done), *e2;
    if (!e1 || !(e2 = memchr(e1 + 1, '\n', n - (size_t)(e1 + 1 - s))))
        return 1; /* the header and delimiter lines not complete yet */
    if (!st->ctx && !(st->ctx = md_ctx_new()))
        return -1;
    md_tbs *T = &st->paths->tb;
    if (!st->tb.ready) { /* is it a table? md4c says, from the first two lines */
        int rc = tb_start(st, s, c, (size_t)(e2 + 1 - c), f);
        if (rc)
            return rc;
    }
    /* the complete lines */
    const char *last = memrchr(s + T->line, '\n', n - T->line);
    if (last) {
        int rc = tb_commit(st, s, (size_t)(last + 1 - s), f);
        if (rc)
            return rc < 0 ? -1 : fast_no(&st->tb);
    }
    table *tail;
    int    rc = tb_tail(st, s, st->done + view_end(c, n - st->done), f, &tail);
    if (rc)
        return rc < 0 ? -1 : (st->tb.on = 0, 1);
    if (!st->tb.on)
        T->laid = 0; /* open was made by md4c */
    st->last_ok = st->pl.on = 0;
    st->tb.on               = 1;
    return tb_draw(st, tail, f);
}

/* ==== streaming a list ======================================================= */

/* An item's marker at the start of line s[0, n): 1 when it is one of mark's kind ('.' and ')'
 * ordered, with its number in *num), followed by a space, a tab or the line's end; 2 when the line
 * is not complete and that cannot be said yet; 0 not. */
static int item_mark(const char *s, size_t n, int complete, char *mark, long *num) {
    size_t k = 0;
    long   v = 0;
    while (k < n && k < 9 && s[k] >= '0' && s[k] <= '9')
        v = v * 10 + (s[k++] - '0');
    if (k == 0 && (n == 0 || !s[0] || !strchr("-*+", s[0])))
        return n || complete ? 0 : 2;
    if (k > 0 && k == n)
        return complete ? 0 : 2;
    if (k > 0 && s[k] != '.' && s[k] != ')')
        return 0;
    *mark = s[k++];
    *num  = v;
    if (k == n)
        return complete ? 1 : 2;
    return s[k] == ' ' || s[k] == '\t' || s[k] == '\r';
}

/* Whether s[0, n) holds a CR that is not part of a CR LF (md4c ends a line there). */
static int lone_cr(const char *s, size_t n) {
    for (const char *c = s; (c = memchr(c, '\r', (size_t)(s + n - c))) != NULL; c++)
        if (c + 1 == s + n || c[1] != '\n')
            return 1;
    return 0;
}

/* md4c renders the item(s) s[0, k) alone into open (after the items before it): 1 when that is one
 * list of the chunk's kind, of one item when one (ordered: numbered as the list numbers it),
 * 0 when not, -1 out of memory. */
static int li_render(md_stream *st, const char *s, size_t k, int one, unsigned f) {
    md_lis *L = &st->paths->li;
    R      *r = st->ctx;
    /* the first item continues what came before the chunk or the block before it (a blank line
     * between them); the others follow an item */
    unsigned ff = L->seg != L->first ? f & ~(unsigned)MD_CONT : L->first == st->done ? f : f | MD_CONT;
    st->li_bytes += (long)k;
    if (md_render_with(r, &st->open, s, k, st->width, st->role, ff))
        return st->open.oom ? -1 : 0;
    int ordered = L->mark == '.' || L->mark == ')';
    return r->top_n == 1 && r->top_type == (ordered ? MD_TOP_OL : MD_TOP_UL) &&
           (one ? r->top_li == 1 : r->top_li >= 1) && (!ordered || r->top_start == (unsigned)L->next);
}

/* open made the items before seg (its lines or keep's); with rows, also the final rows of the open
 * item when li_item lays it out. */
static void li_open(md_stream *st, int rows) {
    md_lis *L = &st->paths->li;
    md_doc *d = &st->open;
    if (L->swapped) {
        doc_swap(d, &L->keep);
        L->swapped = 0;
    }
    if (rows && L->it_on && L->it_seg == L->seg && L->it_keep >= L->cut.lines) {
        doc_cut(d, L->it_keep);
        return;
    }
    doc_back(d, &L->cut);
}

/* Whether s[done, end) may hold a link reference definition ("]:"), which would apply to the whole
 * chunk, also to what was rendered before it came; *ref: the bytes before it were looked at. */
static int has_ref(size_t *ref, size_t done, const char *s, size_t end) {
    if (*ref < end) {
        size_t a = *ref > done ? *ref - 1 : *ref;
        if (memmem(s + a, end - a, "]:", 2))
            return 1;
        *ref = end;
    }
    return 0;
}

/* has_ref for the open list: a definition would apply to every item, also to those rendered before
 * it came. */
static int li_refs(md_stream *st, const char *s, size_t end) {
    return has_ref(&st->paths->li.ref, st->done, s, end);
}

/* The next item starts at p: the open one [seg, p) rendered alone, for good (the rows li_item laid
 * out for it go). 0, 1 not one item of the list (li_no), -1 out of memory. */
static int li_next(md_stream *st, const char *s, size_t p, unsigned f) {
    md_lis *L = &st->paths->li;
    li_open(st, 0);
    int ok = li_render(st, s + L->seg, p - L->seg, 1, f);
    if (ok <= 0)
        return ok < 0 ? -1 : 1;
    view_marks(&L->mk, s, L->seg, p);
    L->seg  = p;
    L->next = L->next + 1;
    L->cut  = doc_mark_at(&st->open);
    return 0;
}

/* The items whose lines start before end (a line start), rendered and kept. 0, 1 not such a list
 * (li_no), -1 out of memory. */
/* The chunk s[done, n) starts with a line that is no item: when a complete line at column 0 is one
 * (the usual "Steps:" line before a list), and md4c makes of the lines before it one block (not a
 * list) and of those lines and that one the block and a list of one item, which it starts there,
 * then the lines before it are rendered into open once, and the list after them as li_layout renders
 * a list (the first item with MD_CONT: the blank line after a block). *first: the item's line,
 * *mark and *num its marker. 0 found, 1 not yet (md4c renders the chunk), 2 not such a chunk for
 * good, -1 out of memory. */
static int li_lead(md_stream *st, const char *s, size_t n, unsigned f, size_t *first, char *mark, long *num) {
    md_lis *L = &st->paths->li;
    if (L->lead_done != st->done) {
        L->lead_done = st->done;
        L->lead      = st->done;
    }
    for (const char *e; (e = memchr(s + L->lead, '\n', n - L->lead)) != NULL;) {
        size_t p = L->lead, ln = (size_t)(e - (s + p));
        L->lead = p + ln + 1;
        if (p == st->done || item_mark(s + p, ln, 1, mark, num) != 1)
            continue;
        size_t ref = st->done;
        if (has_ref(&ref, st->done, s, p + ln + 1) || lone_cr(s + st->done, p + ln - st->done))
            return 2;
        R      *r       = st->ctx;
        md_doc *d       = &L->keep; /* open is not touched unless the list is laid out here */
        int     ordered = *mark == '.' || *mark == ')';
        md_doc_reset(d);
        if (md_render_with(r, d, s + st->done, p + ln + 1 - st->done, st->width, st->role, f))
            return d->oom ? -1 : 2;
        if (r->top_n != 2 || r->top_type != (ordered ? MD_TOP_OL : MD_TOP_UL) || r->top_li != 1 ||
            (ordered && r->top_start != (unsigned)*num))
            return 2;
        md_doc_reset(d);
        if (md_render_with(r, d, s + st->done, p - st->done, st->width, st->role, f))
            return d->oom ? -1 : 2;
        if (r->top_n != 1 || r->top_type != MD_TOP_OTHER || !d->n_lines)
            return 2;
        doc_swap(&st->open, d); /* open: the block's lines */
        L->swapped  = 0;
        st->last_ok = 0;
        *first      = p;
        return 0;
    }
    return 1;
}

/* Whether line s[0, ln) inside the item whose first line starts at it (in bytes before s) is made
 * of fence characters (` or ~ after the indentation, then spaces) and less indented than the item's
 * text (or either's indentation holds a tab): md4c ends the list there, and after a fence in the
 * item takes the line for nothing (no block), so that the item rendered alone looks as it does in
 * the list but the next item starts a new list. */
static int li_fence_out(const char *s, size_t ln, const char *it, size_t in) {
    size_t i = 0, j, k = 0;
    int    tab = 0;
    for (; i < ln && (s[i] == ' ' || s[i] == '\t'); i++)
        tab |= s[i] == '\t';
    if (i >= ln || (s[i] != '`' && s[i] != '~'))
        return 0;
    for (j = i; j < ln && s[j] == s[i];)
        j++;
    while (j < ln && (s[j] == ' ' || s[j] == '\r'))
        j++;
    if (j < ln)
        return 0;
    in = (size_t)((const char *)memchr(it, '\n', in) - it); /* the item's first line */
    while (k < in && ((it[k] >= '0' && it[k] <= '9') || strchr("-*+.)", it[k])))
        k++;
    size_t sp = k;
    while (sp < in && it[sp] == ' ')
        sp++;
    if (tab || (sp < in && it[sp] == '\t'))
        return 1;                                    /* the columns are not worked out here */
    size_t ci = sp == in || sp - k > 4 ? k + 1 : sp; /* the item's text starts at column ci */
    return i < ci;
}

static int li_items(md_stream *st, const char *s, size_t end, unsigned f) {
    md_lis *L = &st->paths->li;
    if (li_refs(st, s, end))
        return 1;
    while (L->scan < end) {
        size_t      p  = L->scan;
        const char *e  = memchr(s + p, '\n', end - p);
        size_t      ln = (size_t)(e - (s + p));
        char        m;
        long        num;
        if (lone_cr(s + p, ln))
            return 1;
        if (p == L->seg) {
        } else if (blank_line(s + p, ln)) {
            L->blank = 1;
        } else if (L->blank) {
            return 1; /* text after a blank line inside an item: the list may be loose */
        } else if (li_fence_out(s + p, ln, s + L->seg, p - L->seg)) {
            return 1;
        } else if (item_mark(s + p, ln, 1, &m, &num) == 1 && m == L->mark) {
            int rc = li_next(st, s, p, f);
            if (rc)
                return rc;
        }
        L->scan = p + ln + 1;
    }
    return 0;
}

/* A letter or a non-ASCII character: a line of text starting with it is no block marker. */
static int qt_letter(unsigned char c) {
    return ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c >= 0xC2;
}

/* ==== a long open item ======================================================= */

/* The hanging indent of an item's rows after its first (it_pw <= 40 columns). */
static const char it_spaces[] = "                                        ";

/* Rows of the open item's text s[a, e) (one line of plain text) from open's line it_keep on: the
 * item's first row after the marker md4c drew (it_mark), the others after as many spaces in the
 * list role (push_piece's hanging indent), the text in the base role, wrapped at the width left, as
 * md4c's render of the item alone lays them out. 0, or -1 out of memory. */
static int it_rows(md_stream *st, const char *s, size_t a, size_t e) {
    md_lis  *L = &st->paths->li;
    md_doc  *d = &st->open;
    int      W = st->width < 2 ? 2 : st->width, w = W - L->it_pw < 1 ? 1 : W - L->it_pw;
    txt_line buf[64], *rw;
    int      k = wrap_rows(s + a, e - a, w, buf, &rw);
    if (k < 0)
        return d->oom = 1, -1;
    int rc = 0;
    for (int i = 0; i < k && !rc; i++) {
        size_t run0 = d->n_runs, off = d->text.n;
        if (L->it_pw) {
            int first = d->n_lines == L->it_first;
            rc        = txt_buf_add(&d->text, first ? L->it_mark : it_spaces,
                             first ? L->it_mark_n : (size_t)L->it_pw) ||
                 md_doc_run(d, run0, off, d->text.n - off, THM_MD_LIST, -1);
        }
        off = d->text.n;
        if (!rc && rw[i].len)
            rc = txt_buf_add(&d->text, s + a + rw[i].off, rw[i].len) ||
                 md_doc_run(d, run0, off, rw[i].len, st->role, -1);
        if (!rc)
            rc = md_doc_line(d, (md_line){run0, (int)(d->n_runs - run0), L->it_pw + rw[i].width});
    }
    st->li_laid += (long)(e - a);
    if (!rc && k > 0) {
        L->it_keep = d->n_lines - 1;
        L->it_row  = a + rw[k - 1].off;
    }
    if (rw != buf)
        free(rw);
    return rc ? (d->oom = 1, -1) : 0;
}

/* Whether line i of open is the prefix run p[0, pn) in the list role (none when !pn) and then text
 * s[a, a + len) in the base role, of width pw + tw. */
static int it_same(const md_stream *st, int i, const char *p, size_t pn, const char *s, size_t a, size_t len,
                   int tw) {
    const md_doc  *d = &st->open;
    const md_line *l = &d->lines[i];
    int            r = l->run0 >= d->n_runs ? 0 : 1;
    if (l->n_runs != (pn ? 1 : 0) + (len ? 1 : 0) || l->width != st->paths->li.it_pw + tw ||
        (l->n_runs && !r))
        return 0;
    const md_run *u = &d->runs[l->run0];
    if (pn && (u->role != THM_MD_LIST || u->link >= 0 || u->len != pn || memcmp(d->text.p + u->off, p, pn)))
        return 0;
    if (pn)
        u++;
    return !len ||
           (u->role == st->role && u->link < 0 && u->len == len && !memcmp(d->text.p + u->off, s + a, len));
}

/* md4c has just rendered the open item s[seg, v) alone into open: when it is one line of plain text
 * after its marker and one space, its rows are checked against it_rows' (the marker and width taken
 * from md4c's first row) and later updates lay out only its last row again (li_item). */
static void it_setup(md_stream *st, const char *s, size_t v) {
    md_lis *L = &st->paths->li;
    md_doc *d = &st->open;
    L->it_on  = 0;
    char   m;
    long   num;
    size_t t0 = L->seg;
    while (t0 < v && s[t0] != ' ' && s[t0] != '\t')
        t0++;
    if (st->fence || L->blank || st->role == THM_MD_LIST || L->mk.ticks || L->mk.stars || L->mk.tildes ||
        t0 + 1 >= v || s[t0] != ' ' || !qt_letter((unsigned char)s[t0 + 1]) ||
        item_mark(s + L->seg, t0 - L->seg, 0, &m, &num) == 0 || memchr(s + L->seg, '\n', v - L->seg) ||
        plain_scan(s, t0 + 1, t0 + 1, v) != v || d->n_lines <= L->cut.lines)
        return;
    t0++;
    size_t e = v;
    while (e > t0 && s[e - 1] == ' ')
        e--;
    /* the prefix md4c drew: the last line's first run in the list role, or none */
    const md_line *l  = &d->lines[d->n_lines - 1];
    int            pw = 0;
    if (l->n_runs && d->runs[l->run0].role == THM_MD_LIST) {
        const md_run *u = &d->runs[l->run0];
        pw              = txt_width(d->text.p + u->off, u->len, 0);
    }
    int      W = st->width < 2 ? 2 : st->width, w = W - pw < 1 ? 1 : W - pw;
    txt_line buf[64], *rw;
    int      k = wrap_rows(s + t0, e - t0, w, buf, &rw);
    if (k < 0)
        return;
    int r0 = d->n_lines - k, ok = r0 >= L->cut.lines && pw <= 40;
    L->it_pw     = pw;
    L->it_mark_n = 0;
    if (ok && pw) { /* the marker: the first row's first run */
        const md_run *u = &d->runs[d->lines[r0].run0];
        ok              = d->lines[r0].n_runs > 0 && u->role == THM_MD_LIST && u->len < sizeof L->it_mark;
        if (ok) {
            memcpy(L->it_mark, d->text.p + u->off, u->len);
            L->it_mark_n = u->len;
        }
    }
    for (int i = 0; i < k && ok; i++)
        ok = it_same(st, r0 + i, i ? it_spaces : L->it_mark, i ? (size_t)pw : L->it_mark_n, s, t0 + rw[i].off,
                     rw[i].len, rw[i].width);
    if (ok) {
        L->it_on    = 1;
        L->it_seg   = L->seg;
        L->it_t0    = t0;
        L->it_ok    = v;
        L->it_first = r0;
        L->it_keep  = d->n_lines - 1;
        L->it_row   = t0 + rw[k - 1].off;
    }
    if (rw != buf)
        free(rw);
}

/* The open item laid out from its last row on, when it_setup found it one line of plain text and it
 * still is (its new bytes plain, no newline) and nothing before it leaves a marker open. 0 done, 1
 * not (md4c renders the item), -1 out of memory. */
static int li_item(md_stream *st, const char *s, size_t v) {
    md_lis *L = &st->paths->li;
    if (!L->it_on || L->it_seg != L->seg || st->fence || L->blank || v < L->it_ok)
        return 1;
    if (memchr(s + L->it_ok, '\n', v - L->it_ok) || plain_scan(s, L->it_t0, L->it_ok, v) != v)
        return L->it_on = 0, 1;
    L->it_ok = v;
    doc_cut(&st->open, L->it_keep);
    size_t e = v;
    while (e > L->it_row && s[e - 1] == ' ')
        e--;
    return it_rows(st, s, L->it_row, e);
}

/* The open chunk is no such list, for good, after li_layout had set it up: open holds the items'
 * lines (or li_lead's block), not md4c's render of the last view, so that is made again. 1. */
static int li_no(md_stream *st) {
    st->last_ok = 0;
    return fast_no(&st->li);
}

/* Whether the chunk s[done, n) is a list li_layout takes, its first line an item or a block before
 * one (li_lead): then L is set up for it. 0 set up, 1 not (yet), -1 out of memory. */
static int li_start(md_stream *st, const char *s, size_t n, unsigned f) {
    md_lis     *L = &st->paths->li;
    const char *c = s + st->done, *e = memchr(c, '\n', n - st->done);
    char        m;
    long        num;
    size_t      first = st->done;
    int         k     = item_mark(c, e ? (size_t)(e - c) : n - st->done, e != NULL, &m, &num);
    if (k == 0) { /* a line before the list? (a quote is qt_layout's) */
        int rc = *c == '>' ? 2 : li_lead(st, s, n, f, &first, &m, &num);
        if (rc < 0)
            return -1;
        st->li.no = rc == 2;
        k         = rc ? 2 : 1;
    } else if (k == 1) {
        md_doc_reset(&st->open);
        st->last_ok = 0; /* open is no longer md4c's render of the last view */
    }
    if (k != 1)
        return 1;
    memset(L, 0, offsetof(md_lis, keep)); /* keep's memory is kept */
    L->mark = m;
    L->next = num;
    L->ref  = st->done;
    L->seg = L->scan = L->first = first;
    L->mk        = view_open_marks(&L->mk, s, st->done, first); /* stream_view's (also in a fence) */
    L->cut       = doc_mark_at(&st->open);                      /* the block before the list, when one */
    st->li.on    = 0;
    st->li.ready = 1;
    return 0;
}

/* The partial line s[scan, v), when it is the next item already (its marker, a space and a letter):
 * the item before it is finished, and a long item laid out by li_item from its start. 0, 1 not
 * one item of the list (li_no), -1 out of memory. */
static int li_next_partial(md_stream *st, const char *s, size_t v, unsigned f) {
    md_lis *L = &st->paths->li;
    if (L->blank || L->scan <= L->seg || v <= L->scan)
        return 0;
    size_t q = L->scan, k = q;
    char   m;
    long   num;
    while (k < v && s[k] != ' ')
        k++;
    /* the marker with the space after it: item_mark says 1 for a marker (m then set), else 0 (without
     * the space it said 2, "cannot be said yet", also for no marker at all, m left unset) */
    if (k + 1 < v && qt_letter((unsigned char)s[k + 1]) && item_mark(s + q, k + 1 - q, 1, &m, &num) == 1 &&
        m == L->mark)
        return li_next(st, s, q, f);
    return 0;
}

/* md4c renders the open item s[seg, v) as stream_view shows it (the markers left open closed)
 * alone into open. 0 done, 1 the chunk is no such list for good (li_no), 2 not for this update
 * (md4c shows the chunk; the items' lines wait in keep), -1 out of memory. */
static int li_open_item(md_stream *st, const char *s, size_t v, unsigned f) {
    md_lis *L = &st->paths->li;
    li_open(st, 0); /* md4c renders the open item: its rows laid out before go */
    txt_buf *b = &st->tmp;
    b->n       = 0;
    if (v > L->seg && (lone_cr(s + L->seg, v - L->seg - (s[v - 1] == '\r')) ||
                       (L->blank && !blank_line(s + L->scan, v > L->scan ? v - L->scan : 0))))
        return li_no(st);
    if (v > L->seg && txt_buf_add(b, s + L->seg, v - L->seg))
        return -1;
    if (!st->fence) {
        view_mk m = view_open_marks(&L->mk, s, L->seg, v);
        view_close(b, &m);
    }
    if (!b->n)
        return 0;
    int ok = li_render(st, b->p, b->n, 0, f);
    if (ok < 0)
        return -1;
    if (!ok) {
        doc_swap(&st->open, &L->keep);
        L->swapped = 1;
        L->it_on   = 0;
        return 2;
    }
    it_setup(st, s, v);
    return 0;
}

/* The open chunk s[done, n) as a tight list whose first line is an item at column 0, or comes after
 * one block that md4c ends there (li_lead: a paragraph line before the list): what md4c makes of the
 * stream's view of it, md4c rendering each item alone. Items of a tight list are laid
 * out one after the other with nothing carried from one to the next (bullets by depth, numbers
 * counted from the first, which md4c takes from an item alone when it carries that number); what
 * md4c sees across items is checked: a blank line followed by text inside the chunk (a loose list),
 * "]:" (a link reference definition applies to every item), a CR alone (a line end inside a line),
 * an item of another kind or anything else after the list (then md4c renders the chunk, for good).
 * When only the partial last line makes the last item something else, md4c shows the chunk for that
 * update and the items' lines wait in keep. 0 done, 1 not such a chunk, -1 out of memory. */
static int li_layout(md_stream *st, const char *s, size_t n, unsigned f) {
    if (!st->ctx && !(st->ctx = md_ctx_new()))
        return -1;
    md_lis *L = &st->paths->li;
    if (!st->li.ready) {
        int rc = li_start(st, s, n, f);
        if (rc)
            return rc;
    }
    li_open(st, 1);
    const char *last = memrchr(s + L->scan, '\n', n - L->scan);
    int         rc   = li_refs(st, s, n);
    if (!rc && last)
        rc = li_items(st, s, (size_t)(last + 1 - s), f);
    if (rc)
        return rc < 0 ? -1 : li_no(st);
    /* the open item as stream_view shows it */
    size_t v = st->done + view_end(s + st->done, n - st->done);
    if ((rc = li_next_partial(st, s, v, f)) != 0)
        return rc < 0 ? -1 : li_no(st);
    rc = li_item(st, s, v);
    if (rc > 0)
        rc = li_open_item(st, s, v, f);
    if (rc)
        return rc < 0 ? -1 : rc == 2 ? (st->li.on = 0, 1) : 1;
    st->li.on   = 1;
    st->last_ok = st->pl.on = 0;
    return 0;
}

/* The chunk [done, p) has finished and it is the open list: its last item rendered and its lines
 * moved to fin (no md4c render of the whole chunk). 0 done, 1 not, -1 out of memory. */
static int li_finish(md_stream *st, const char *s, size_t p, unsigned f) {
    md_lis *L = &st->paths->li;
    li_open(st, 0);
    int rc = li_items(st, s, p, f);
    if (rc)
        return rc < 0 ? -1 : 1;
    rc = li_render(st, s + L->seg, p - L->seg, 1, f);
    if (rc <= 0)
        return rc < 0 ? -1 : 1;
    return fast_fin(st, &st->li) ? -1 : 0;
}

/* The chunk [done, p) has finished and the open table's layout holds it (its lines rows, then only
 * blank lines): its rows laid out into fin as md_render would lay out the chunk, without md4c
 * (the rows it has not collected yet collected). 0 done, 1 not (md4c renders the chunk), -1 out
 * of memory. */
static int tb_finish(md_stream *st, const char *s, size_t p, unsigned f) {
    md_tbs *T  = &st->paths->tb;
    int     rc = tb_commit(st, s, p, f);
    if (rc || !T->closed)
        return rc < 0 ? -1 : 1;
    if (!st->tb.on)
        T->laid = 0;
    if (tb_draw(st, NULL, f) || fast_fin(st, &st->tb))
        return -1;
    T->laid = 0;
    return 0;
}

/* ==== streaming a block quote ================================================= */

/* Where the text of the quoted line s[p, e) (s[p] == '>') starts: after one optional space. */
static size_t qt_text(const char *s, size_t p, size_t e) {
    return p + 1 < e && s[p + 1] == ' ' ? p + 2 : p + 1;
}

/* open back to what the segments before seg made (with t, the open paragraph's final rows kept). */
static void qt_open(md_stream *st, int keep_rows) {
    md_qts *Q = &st->paths->qt;
    md_doc *d = &st->open;
    if (keep_rows && Q->pp_laid) {
        doc_cut(d, Q->pp_keep);
        return;
    }
    Q->pp_laid = 0;
    doc_back(d, &Q->cut);
}

/* The open segment's plain paragraph, its text up to e (a line's end, or inside the partial last
 * line), laid out into open from its last row on, as md_render lays it out: the text md4c joins
 * (each line end and the next line's '>' and optional space one space) wrapped again only from
 * where its last row starts. 0, or -1 out of memory. */
static int qt_para(md_stream *st, const char *s, size_t e, unsigned f) {
    md_qts *Q     = &st->paths->qt;
    md_doc *d     = &st->open;
    R      *r     = st->ctx;
    int     start = 0;
    if (!Q->pp_laid) {
        qt_open(st, 0);
        start      = Q->seg == st->done; /* the quote's first block: the blank line before it */
        Q->pp_laid = 1;
        Q->pp_row  = qt_text(s, Q->seg, e);
    } else {
        doc_cut(d, Q->pp_keep); /* the last row is laid out again */
    }
    while (e > Q->pp_row && (s[e - 1] == ' ' || s[e - 1] == '\n'))
        e--; /* md4c drops a paragraph's trailing spaces */
    txt_buf *b = &st->tmp;
    b->n       = 0;
    for (size_t k = Q->pp_row; k < e;) {
        const char *nl = memchr(s + k, '\n', e - k);
        size_t      q  = nl ? (size_t)(nl - s) : e;
        if (txt_buf_add(b, s + k, q - k) || (nl && txt_buf_add(b, " ", 1)))
            return d->oom = 1, -1;
        k = nl ? qt_text(s, q + 1, e) : e;
    }
    size_t last = 0;
    int    n0   = d->n_lines;
    if (b->n) {
        md_render_begin(r, d, st->width, st->role, f);
        md_quote_rows(r, start, b->p, b->n, &last);
        if (r->err)
            return -1;
    }
    st->qt_laid += (long)b->n;
    if (b->n && last < b->n) { /* where the last row starts, in s */
        size_t k = Q->pp_row, t = 0;
        while (t < last) {
            if (s[k] == '\n') {
                k = qt_text(s, k + 1, e);
                t++;
            } else {
                k++;
                t++;
            }
        }
        Q->pp_row  = k;
        Q->pp_keep = d->n_lines - 1;
    } else {
        Q->pp_keep = n0; /* nothing laid out: the next update starts from the same byte */
    }
    return 0;
}

/* md4c renders s[a, b) (the open segment, with the markers m left open closed when m) alone into
 * open after the segments before it. 0, or -1 out of memory. */
static int qt_render(md_stream *st, const char *s, size_t a, size_t b, const view_mk *m, unsigned f) {
    md_qts  *Q = &st->paths->qt;
    txt_buf *t = &st->tmp;
    qt_open(st, 0);
    t->n = 0;
    if (txt_buf_add(t, s + a, b - a))
        return st->open.oom = 1, -1;
    if (m)
        view_close(t, m);
    st->qt_bytes += (long)t->n;
    unsigned ff = Q->seg == st->done ? f : f & ~(unsigned)MD_CONT;
    return md_render_with(st->ctx, &st->open, t->p ? t->p : "", t->n, st->width, st->role, ff);
}

/* The segment [seg, p) is finished and a new one starts at p: its lines made final, then the bar
 * alone. 0 cut, 1 not (no line of the quote came yet: md4c would draw no blank line), -1 out of
 * memory. */
static int qt_cut(md_stream *st, const char *s, size_t p, unsigned f) {
    md_qts *Q  = &st->paths->qt;
    int     rc = Q->pp ? qt_para(st, s, Q->pp_end, f) : qt_render(st, s, Q->seg, p, NULL, f);
    if (rc)
        return -1;
    if (!st->open.n_lines)
        return 1;
    md_render_begin(st->ctx, &st->open, st->width, st->role, f);
    size_t last;
    md_quote_rows(st->ctx, 0, NULL, 0, &last);
    if (st->ctx->err)
        return -1;
    view_marks(&Q->mk, s, Q->seg, p);
    Q->seg     = p;
    Q->cut     = doc_mark_at(&st->open);
    Q->pp      = 1;
    Q->pp_laid = Q->blank = Q->text = 0;
    return 0;
}

/* The quoted line s[p, e) (e its newline, or the end of the partial last line) has text: a cut
 * before it when it starts a paragraph after a blank line; whether the open segment is still one
 * plain paragraph (complete lines only: the partial one is looked at by qt_layout). 0, -1 out of
 * memory. */
static int qt_line(md_stream *st, const char *s, size_t p, size_t e, int complete, unsigned f) {
    md_qts *Q = &st->paths->qt;
    size_t  c = qt_text(s, p, e);
    if (Q->blank) {
        int rc = Q->text && !Q->nocut && qt_letter((unsigned char)s[c]) ? qt_cut(st, s, p, f) : 1;
        if (rc < 0)
            return -1;
        if (rc)
            Q->pp = 0; /* text after a blank line in the same segment */
    }
    if (!complete)
        return 0;
    Q->text  = 1;
    Q->blank = 0; /* a cut only right after a blank line */
    if (memmem(s + c, e - c, "```", 3) || memmem(s + c, e - c, "~~~", 3))
        Q->nocut = 1; /* a fence may be open: a blank line would not end it */
    if (Q->pp && (!qt_letter((unsigned char)s[c]) || s[e - 1] == ' ' || plain_scan(s, c, c, e) != e))
        Q->pp = 0;
    if (Q->pp)
        Q->pp_end = e;
    return 0;
}

/* The complete lines before end (a line start) looked at. 0, 1 not such a chunk (qt_no), -1 out of
 * memory. */
static int qt_lines(md_stream *st, const char *s, size_t end, unsigned f) {
    md_qts *Q = &st->paths->qt;
    if (has_ref(&Q->ref, st->done, s, end))
        return 1;
    while (Q->scan < end) {
        size_t      p  = Q->scan;
        const char *e  = memchr(s + p, '\n', end - p);
        size_t      ln = (size_t)(e - (s + p));
        if (lone_cr(s + p, ln))
            return 1; /* a line end of md4c's inside the line */
        if (s[p] != '>') {
            Q->nocut = 1; /* a lazy line, or the quote's end */
            if (!blank_line(s + p, ln))
                Q->pp = 0;
            Q->blank = Q->text;
        } else if (blank_line(s + qt_text(s, p, p + ln), p + ln - qt_text(s, p, p + ln))) {
            Q->blank = Q->text;
            if (!Q->text)
                Q->pp = 0; /* a blank line before the paragraph */
        } else if (qt_line(st, s, p, p + ln, 1, f)) {
            return -1;
        }
        Q->scan = p + ln + 1;
    }
    return 0;
}

/* Whether the open segment, its complete lines and the partial line s[scan, v) as stream_view shows
 * it, is still one plain paragraph (qt_para lays it out): 2 with the partial line's text, 1 without
 * it (blank), 0 not (md4c renders the segment), -1 out of memory. */
static int qt_plain(md_stream *st, const char *s, size_t v, unsigned f) {
    md_qts *Q = &st->paths->qt;
    size_t  p = Q->scan, c = p;
    int     part = 0; /* the partial line: 0 nothing, 1 blank, 2 text of '>' (c its start), 3 else */
    if (v > p) {
        if (s[p] == '>') {
            c    = qt_text(s, p, v);
            part = blank_line(s + c, v - c) ? 1 : 2;
        } else {
            part = blank_line(s + p, v - p) ? 1 : 3;
        }
        if (part == 2 && qt_line(st, s, p, v, 0, f))
            return -1;
    }
    int plain = Q->pp && (Q->text || part == 2) && !Q->mk.ticks && !Q->mk.stars && !Q->mk.tildes;
    if (plain && part == 2) {
        size_t from = Q->part_at == p && Q->part_ok > c ? Q->part_ok : c; /* looked at before */
        plain = !Q->blank && qt_letter((unsigned char)s[c]) && (Q->part_ok = plain_scan(s, c, from, v)) == v;
        Q->part_at = p;
    } else if (plain && part == 3) {
        plain = 0;
    }
    return plain ? (part == 2 ? 2 : 1) : 0;
}

/* The open chunk s[done, n) as a block quote whose first line starts with '>: what md4c makes of
 * the stream's view of it, md4c rendering each segment (md_qts) alone once the next one has started
 * and the open one each update, unless it is a plain paragraph (then only its last row is laid out
 * again). A link reference definition or a CR alone sends the chunk to md4c for good. 0 done, 1 not
 * such a chunk, -1 out of memory. */
static int qt_layout(md_stream *st, const char *s, size_t n, unsigned f) {
    if (s[st->done] != '>')
        return fast_no(&st->qt);
    if (!st->ctx && !(st->ctx = md_ctx_new()))
        return -1;
    md_qts *Q = &st->paths->qt;
    if (!st->qt.ready || !st->qt.on) { /* open is made here from the chunk's start */
        memset(Q, 0, sizeof *Q);
        st->qt.ready = 1;
        Q->seg = Q->scan = Q->ref = st->done;
        Q->pp                     = 1;
        md_doc_reset(&st->open);
        st->last_ok = 0; /* open is no longer md4c's render of the last view */
    }
    const char *last = memrchr(s + Q->scan, '\n', n - Q->scan);
    int         rc   = has_ref(&Q->ref, st->done, s, n);
    if (!rc && last)
        rc = qt_lines(st, s, (size_t)(last + 1 - s), f);
    if (rc)
        return rc < 0 ? -1 : fast_no(&st->qt);
    size_t v     = st->done + view_end(s + st->done, n - st->done);
    int    plain = qt_plain(st, s, v, f);
    if (plain < 0)
        return -1;
    if (plain) {
        if (qt_para(st, s, plain == 2 ? v : Q->pp_end, f))
            return -1;
    } else {
        /* the open segment as stream_view shows it: the markers left open closed (not in a fence) */
        view_mk m = view_open_marks(&Q->mk, s, Q->seg, v);
        if (v > Q->seg && qt_render(st, s, Q->seg, v, st->fence ? NULL : &m, f))
            return -1;
        if (v <= Q->seg)
            qt_open(st, 0);
    }
    st->qt.on   = 1;
    st->last_ok = st->pl.on = 0;
    return 0;
}

/* The chunk [done, p) has finished and it is the open quote: its last segment laid out (no md4c
 * render of the whole chunk). 0 done, 1 not, -1 out of memory. */
static int qt_finish(md_stream *st, const char *s, size_t p, unsigned f) {
    md_qts *Q = &st->paths->qt;
    if (!st->qt.on)
        return 1;
    int rc = has_ref(&Q->ref, st->done, s, p);
    if (!rc)
        rc = qt_lines(st, s, p, f);
    if (!rc)
        rc = Q->pp && Q->text ? qt_para(st, s, Q->pp_end, f) : qt_render(st, s, Q->seg, p, NULL, f);
    if (rc)
        return rc < 0 ? -1 : 1;
    return fast_fin(st, &st->qt) ? -1 : 0;
}

/* ==== the stream ============================================================ */

/* The fast paths, in the order they are tried on the open chunk (md_stream_update), each with its
 * md_fast in md_stream. layout: 0 open is its layout, 1 not (the next path, or md4c), -1 out of
 * memory. finish (NULL: none): when the chunk it set up for has finished, its lines from the state
 * it kept, moved to fin; 0 done, 1 not (md4c renders the chunk), -1 out of memory. */
static const struct fast_path {
    size_t fast; /* offsetof(md_stream, its md_fast) */
    int (*layout)(md_stream *st, const char *s, size_t n, unsigned f);
    int (*finish)(md_stream *st, const char *s, size_t p, unsigned f);
} fast_paths[] = {
    {offsetof(md_stream, pl), pl_layout, NULL},      /* a plain paragraph            */
    {offsetof(md_stream, fc), fc_layout, NULL},      /* a fenced code block, open    */
    {offsetof(md_stream, tb), tb_layout, tb_finish}, /* a table                      */
    {offsetof(md_stream, li), li_layout, li_finish}, /* a tight list                 */
    {offsetof(md_stream, qt), qt_layout, qt_finish}, /* a block quote                */
};
enum { N_FAST = sizeof fast_paths / sizeof *fast_paths };

static md_fast *fast_of(md_stream *st, int i) {
    return (md_fast *)((char *)st + fast_paths[i].fast);
}

/* A different text (or width, role, flags): everything starts over. */
static void stream_restart(md_stream *st, const char *s, int width, int role) {
    md_doc_reset(&st->fin);
    st->seen.n = 0;
    st->done = st->scan = 0;
    st->last_ok         = 0;
    for (int i = 0; i < N_FAST; i++)
        *fast_of(st, i) = (md_fast){.done = (size_t)-1};
    st->fence = st->blank = 0;
    st->base              = s;
    st->width             = width;
    st->role              = role;
    if (st->paths) /* li_lead's scan was of the old text (its lead_done may be 0 again) */
        st->paths->li.lead_done = (size_t)-1;
}

/* The chunk [done, p) has finished: into fin, as the path that set up for it keeps it, else by
 * md4c. 0, or -1 out of memory. */
static int stream_finish(md_stream *st, const char *s, size_t p, unsigned flags) {
    unsigned f  = (flags & MD_OSC8) | (st->fin.n_lines ? MD_CONT : 0);
    int      rc = 1;
    for (int i = 0; i < N_FAST && rc > 0; i++) {
        const md_fast *fp = fast_of(st, i);
        if (fast_paths[i].finish && fp->ready && fast_at(fp, st->done))
            rc = fast_paths[i].finish(st, s, p, f);
    }
    if (rc < 0 || (rc && stream_render(st, &st->fin, s + st->done, p - st->done, f)))
        return -1;
    st->n_fin++;
    st->done = p;
    return 0;
}

/* The new complete lines of s[0, n) looked at for chunk ends (a blank line outside a fence before
 * a line at column 0), and the chunks they end finished. 0, or -1 out of memory. */
static int stream_scan(md_stream *st, const char *s, size_t n, unsigned flags) {
    while (st->scan < n) {
        const char *eol = memchr(s + st->scan, '\n', n - st->scan);
        size_t      p   = st->scan;
        if (!st->fence && st->blank && p > st->done && s[p] != ' ' && s[p] != '\t' && s[p] != '\n' &&
            stream_finish(st, s, p, flags))
            return -1;
        if (!eol)
            break;
        size_t ln   = (size_t)(eol - (s + p));
        char   ch   = 0;
        int    rest = 0, fl = fence_line(s + p, ln, &ch, &rest);
        if (st->fence) {
            if (fl >= st->fence_n && ch == st->fence_ch && rest)
                st->fence = 0;
        } else if (fl) {
            st->fence    = 1;
            st->fence_ch = ch;
            st->fence_n  = fl;
            st->fence_at = p;
        }
        st->blank = blank_line(s + p, ln);
        st->scan  = p + ln + 1;
        if (txt_buf_add(&st->seen, s + p, ln + 1))
            return -1;
    }
    return 0;
}

/* The open chunk s[done, n) laid out by the first fast path that takes it: 0 done, 1 none did
 * (md4c renders it), -1 out of memory. */
static int stream_fast(md_stream *st, const char *s, size_t n, unsigned f) {
    if (!st->paths && !(st->paths = calloc(1, sizeof *st->paths)))
        return -1;
    for (int i = 0; i < N_FAST; i++) {
        md_fast *fp = fast_of(st, i);
        fast_new(fp, st->done);
        if (fp->no)
            continue;
        int rc = fast_paths[i].layout(st, s, n, f);
        if (rc <= 0)
            return rc;
        fp->on = 0;
    }
    return 1;
}

int md_stream_update(md_stream *st, const char *s, size_t n, int width, int role, unsigned flags) {
    n = txt_complete(s, n);
    if (st->base != s && st->base && n >= st->scan && st->seen.n == st->scan &&
        !memcmp(s, st->seen.p ? st->seen.p : "", st->scan))
        st->base = s; /* the same text moved (its buffer grew): what was done stays done */
    if (st->base != s || n < st->len || st->width != width || st->role != role ||
        (st->flags & ~(unsigned)MD_STREAMING) != (flags & ~(unsigned)MD_STREAMING))
        stream_restart(st, s, width, role);
    st->flags = flags;
    st->len   = n;
    if (stream_scan(st, s, n, flags))
        return -1;
    unsigned f = (flags & MD_OSC8) | (st->fin.n_lines ? MD_CONT : 0);
    if ((flags & MD_STREAMING) && !(flags & MD_EXACT) && st->done < n) {
        int rc = stream_fast(st, s, n, f);
        if (rc <= 0)
            return rc;
    }
    for (int i = 0; i < N_FAST; i++)
        fast_of(st, i)->on = 0;
    /* md4c renders the open chunk as stream_view shows it */
    const char *v  = s + st->done;
    size_t      vn = st->done < n ? n - st->done : 0;
    if ((flags & MD_STREAMING) && vn) {
        if (stream_view(st, v, vn))
            return -1;
        v  = st->tmp.p;
        vn = st->tmp.n;
    }
    /* the same text as last time (new bytes held back): the open lines stay */
    if (st->last_ok && !(flags & MD_EXACT) && st->last_done == st->done && st->last_f == f &&
        st->last.n == vn && !memcmp(st->last.p, v, vn))
        return 0;
    st->last_ok = 0;
    md_doc_reset(&st->open);
    if (!vn)
        return 0;
    st->last.n = 0;
    if (txt_buf_add(&st->last, v, vn) || stream_render(st, &st->open, v, vn, f))
        return -1;
    st->last_ok   = 1;
    st->last_done = st->done;
    st->last_f    = f;
    return 0;
}

void md_stream_free(md_stream *st) {
    md_doc_free(&st->fin);
    md_doc_free(&st->open);
    free(st->tmp.p);
    free(st->seen.p);
    free(st->last.p);
    md_ctx_free(st->ctx);
    paths_free(st->paths);
    memset(st, 0, sizeof *st);
}
