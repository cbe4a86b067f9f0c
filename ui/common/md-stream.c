/* md-stream.c: streaming Markdown (md_stream_update, md_stream_free; see md.h).
 *
 * DESIGN
 * The text is cut into chunks at blank lines outside code fences that are followed by a line at
 * column 0; finished chunks are rendered once into st->fin, the open chunk into st->open again as
 * text arrives. Two fast paths skip md4c for the open chunk where its result is known: a plain
 * paragraph (pl_layout wraps only its last line again) and an open fenced code block (fc_layout
 * adds the rows of new lines, and of a partial line lays out only its last row again). Both lay out exactly
 * what md_render would (md.c's code_line and run helpers, shared through md-impl.h).
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

/* A fence line (up to 3 spaces, then 3+ ` or ~): its character and length, else 0; *rest:
 * only spaces follow (it can close a fence). */
static int fence_line(const char *s, size_t n, char *ch, int *rest) {
    size_t i = 0;
    while (i < n && i < 3 && s[i] == ' ')
        i++;
    if (i >= n || (s[i] != '`' && s[i] != '~'))
        return 0;
    size_t j = i;
    while (j < n && s[j] == s[i])
        j++;
    if (j - i < 3)
        return 0;
    *ch   = s[i];
    *rest = blank_line(s + j, n - j);
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
    size_t p0 = 0;
    for (size_t k = 0; k + 1 < n; k++)
        if (s[k] == '\n' && (s[k + 1] == '\n'))
            p0 = k + 2;
    int ticks = 0, stars = 0, tildes = 0, tick_run = 0;
    for (size_t k = p0; k < n;) {
        if (s[k] == '`') {
            size_t j = k;
            while (j < n && s[j] == '`')
                j++;
            if (ticks && (int)(j - k) == tick_run)
                ticks = 0;
            else if (!ticks) {
                ticks    = 1;
                tick_run = (int)(j - k);
            }
            k = j;
            continue;
        }
        if (!ticks && k + 1 < n && s[k] == '*' && s[k + 1] == '*') {
            stars ^= 1;
            k += 2;
            continue;
        }
        if (!ticks && k + 1 < n && s[k] == '~' && s[k + 1] == '~') {
            tildes ^= 1;
            k += 2;
            continue;
        }
        k++;
    }
    if (stars || tildes) /* a closer after a space would not close: end at the last word */
        while (b->n > 0 && (b->p[b->n - 1] == ' ' || b->p[b->n - 1] == '\t'))
            b->p[--b->n] = 0;
    if (ticks)
        for (int k = 0; k < tick_run; k++)
            txt_buf_add(b, "`", 1);
    if (stars)
        txt_buf_add(b, "**", 2);
    if (tildes)
        txt_buf_add(b, "~~", 2);
    return 0;
}

/* ==== streaming a plain paragraph ========================================== */

/* Whether s[from, n) keeps the chunk s[done, n) a plain paragraph: it starts with a letter (no
 * block marker), and has no newline, no control character, no invalid UTF-8 and nothing md4c
 * gives a meaning inline (emphasis, code, math, strike, links and autolinks, entities, escapes,
 * table pipes). Then md_render shows it as its bytes, trailing spaces trimmed, greedily wrapped
 * at the width in the base role: what pl_layout does. Returns the end of the plain bytes. */
static size_t plain_scan(const char *s, size_t done, size_t from, size_t n) {
    if (from == done &&
        !(n > done && (((unsigned char)s[done] | 0x20) >= 'a' && ((unsigned char)s[done] | 0x20) <= 'z')) &&
        !(n > done && (unsigned char)s[done] >= 0xC2))
        return done;
    for (size_t k = from; k < n;) {
        unsigned char c = (unsigned char)s[k];
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
        if (l <= 0)
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
    if (d->n_lines == d->cap_lines) {
        int      cap = d->cap_lines ? d->cap_lines * 2 : 64;
        md_line *l   = realloc(d->lines, (size_t)cap * sizeof *l);
        if (!l)
            return d->oom = 1, -1;
        d->lines     = l;
        d->cap_lines = cap;
    }
    d->lines[d->n_lines++] = (md_line){run0, (int)(d->n_runs - run0), width};
    return 0;
}

/* Lay out the plain paragraph s[done, n) into st->open, wrapping again only from the start of
 * its last line: greedy wrapping restarted at a line start gives the same lines after it, and a
 * line is final once a later one exists. 0, or -1 out of memory. */
static int pl_layout(md_stream *st, const char *s, size_t n, int role) {
    md_doc *d = &st->open;
    if (!st->pl) {
        md_doc_reset(d);
        st->pl      = 1;
        st->pl_line = st->done;
        if (st->fin.n_lines && pl_line_add(d, NULL, 0, role, 0)) /* the blank line between blocks */
            return -1;
    } else if (d->n_lines > 0) { /* the last line is laid out again */
        const md_line *l = &d->lines[--d->n_lines];
        if (l->n_runs) {
            d->text.n = d->runs[l->run0].off;
            d->n_runs = l->run0;
        }
    }
    size_t e = n;
    while (e > st->pl_line && s[e - 1] == ' ')
        e--; /* md4c drops a paragraph's trailing spaces */
    const char *p = s + st->pl_line;
    int         w = st->width < 2 ? 2 : st->width;
    txt_line    buf[64], *L = buf;
    int         nl = txt_wrap(p, e - st->pl_line, w, L, 64);
    if (nl > 64) { /* a long paragraph laid out afresh (a new width) */
        if (!(L = malloc((size_t)nl * sizeof *L)))
            return d->oom = 1, -1;
        txt_wrap(p, e - st->pl_line, w, L, nl);
    }
    int rc = 0;
    for (int i = 0; i < nl && !rc; i++)
        rc = pl_line_add(d, p + L[i].off, L[i].len, role, L[i].width);
    if (nl > 0)
        st->pl_line += L[nl - 1].off;
    if (L != buf)
        free(L);
    return rc;
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
    /* where the last row starts, in s (not inside the indentation made of spaces) */
    if (last && last->line >= 0 && last->off >= (size_t)col)
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

/* The open chunk s[done, n) as a fenced code block that is still open (its first line a fence at
 * column 0): what md4c makes of the stream's view of it, without md4c after its first line. The
 * head (md4c's rendering of the fence line, to the box's top) is made once; the rows of a complete
 * line once; each update adds the rows of the new complete lines, then those of the partial last
 * line and the bottom, which the next update takes back: of a partial line only its last row (a
 * line of megabytes without a newline, laid out again whole, cost its length every frame). Code lines are
 * laid out one by one in md_render too (md_code_line), so this is exact. 0 done, 1 not such a chunk (md4c
 * renders it), -1 out of memory. */
static int fc_layout(md_stream *st, const char *s, size_t n, unsigned f) {
    md_doc *d = &st->open;
    if (st->fc_done != st->done) {
        st->fc = st->fc_no = 0;
        st->fc_done        = st->done;
    }
    if (st->fc_no || !st->fence || st->fence_at != st->done)
        return 1;
    const char *c    = s + st->done;
    const char *eol  = memchr(c, '\n', n - st->done);
    size_t      body = (size_t)(eol - s) + 1; /* the fence line was scanned: it is complete */
    if (!st->fc) {
        size_t k = 0;
        while (c[k] == st->fence_ch)
            k++;
        if ((st->fence_ch == '`' && memchr(c + k, '`', body - 1 - st->done - k)) ||
            has_cr_nul(c, body - st->done)) {
            st->fc_no = 1; /* not a fence to md4c, or line ends md4c sees and we do not */
            return 1;
        }
        st->last_ok = 0; /* open is rebuilt here */
        md_doc_reset(d);
        if (stream_render(st, d, c, body - st->done, f))
            return -1;
        int iw;
        doc_cut(d,
                d->n_lines - 1 - md_code_box(st->width < 2 ? 2 : st->width, &iw)); /* the empty row, bottom */
        st->fc         = 1;
        st->fc_line    = body;
        st->fc_any     = 0;
        st->fc_lines   = d->n_lines;
        st->fc_pl_line = -1;
        st->fc_scan    = 0;
    }
    size_t v = st->done + view_end(c, n - st->done);
    /* a partial line laid out before and no newline since: its rows but the last stay (a line of
     * megabytes costs its new bytes an update, not its whole length) */
    int resume = st->fc_pl_line >= 0 && st->fc_pl_at == st->fc_line && st->fc_pl_off <= v &&
                 v > st->fc_line && !memchr(s + st->fc_line, '\n', v - st->fc_line);
    if (resume) {
        char ch;
        int  rest, fl = fence_line(s + st->fc_line, v - st->fc_line, &ch, &rest);
        resume = !(fl >= st->fence_n && ch == st->fence_ch && rest);
    }
    doc_cut(d, resume ? st->fc_pl_line : st->fc_lines); /* what the last update laid out again */
    R *r = st->ctx;
    md_render_begin(r, d, st->width, st->role, f);
    int a = r->width, iw, box = md_code_box(a, &iw);
    for (const char *e; !resume && st->fc_line < v && (e = memchr(s + st->fc_line, '\n', v - st->fc_line));) {
        size_t ln = (size_t)(e - (s + st->fc_line));
        if (has_cr_nul(s + st->fc_line, ln))
            return st->fc = 0, st->fc_no = 1;
        fc_code_line(r, s + st->fc_line, ln, box, iw, NULL);
        st->fc_line += ln + 1;
        st->fc_any = 1;
    }
    if (!resume)
        st->fc_lines = d->n_lines;
    char ch;
    int  rest, fl = 0;
    if (v > st->fc_line) {
        size_t from = st->fc_scan > st->fc_line ? st->fc_scan : st->fc_line;
        if (v > from && has_cr_nul(s + from, v - from))
            return st->fc = 0, st->fc_no = 1;
        st->fc_scan = v > from ? v : from;
        fl          = fence_line(s + st->fc_line, v - st->fc_line, &ch, &rest);
        if (fl >= st->fence_n && ch == st->fence_ch && rest)
            v = st->fc_line; /* a closing fence, still without its newline */
    }
    md_code_last last = {-1, 0, 0};
    if (resume) {
        md_code_rows(r, s + st->fc_pl_off, v - st->fc_pl_off, box, iw, st->fc_pl_col, &last);
        last.off += st->fc_pl_off;
    } else if (v > st->fc_line || !st->fc_any) {
        fc_code_line(r, s + st->fc_line, v - st->fc_line, box, iw, &last);
        last.off += st->fc_line;
    }
    st->fc_pl_line = last.line;
    st->fc_pl_at   = st->fc_line;
    st->fc_pl_off  = last.off;
    st->fc_pl_col  = last.col;
    if (box)
        md_code_bottom(r, a);
    return r->err ? -1 : 0;
}

int md_stream_update(md_stream *st, const char *s, size_t n, int width, int role, unsigned flags) {
    n = txt_complete(s, n);
    if (st->base != s && st->base && n >= st->scan && st->seen.n == st->scan &&
        !memcmp(s, st->seen.p ? st->seen.p : "", st->scan))
        st->base = s; /* the same text moved (its buffer grew): what was done stays done */
    if (st->base != s || n < st->len || st->width != width || st->role != role ||
        (st->flags & ~(unsigned)MD_STREAMING) != (flags & ~(unsigned)MD_STREAMING)) {
        md_doc_reset(&st->fin);
        st->seen.n = 0;
        st->done = st->scan = 0;
        st->pl = st->fc = st->last_ok = 0;
        st->pl_done = st->fc_done = (size_t)-1;
        st->fence = st->blank = 0;
        st->base              = s;
        st->width             = width;
        st->role              = role;
    }
    st->flags = flags;
    st->len   = n;
    /* look at the new complete lines for chunk ends */
    while (st->scan < n) {
        const char *eol = memchr(s + st->scan, '\n', n - st->scan);
        size_t      p   = st->scan;
        if (!st->fence && st->blank && p > st->done && s[p] != ' ' && s[p] != '\t' && s[p] != '\n') {
            /* a blank line before a line at column 0: the chunk [done, p) is finished */
            unsigned f = st->fin.n_lines ? MD_CONT : 0;
            if (stream_render(st, &st->fin, s + st->done, p - st->done, (flags & MD_OSC8) | f))
                return -1;
            st->n_fin++;
            st->done = p;
        }
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
    if (st->pl_done != st->done) { /* a new open chunk: is it a plain paragraph? */
        st->pl = st->pl_no = 0;
        st->pl_done = st->pl_scan = st->done;
    }
    if ((flags & MD_STREAMING) && !(flags & MD_EXACT) && !st->pl_no && st->done < n) {
        st->pl_scan = plain_scan(s, st->done, st->pl_scan, n);
        st->last_ok = 0;
        if (st->pl_scan == n)
            return pl_layout(st, s, n, role);
        st->pl_no = 1; /* for good: the chunk only grows */
    }
    unsigned f = (flags & MD_OSC8) | (st->fin.n_lines ? MD_CONT : 0);
    if ((flags & MD_STREAMING) && !(flags & MD_EXACT) && st->done < n) {
        int rc = fc_layout(st, s, n, f);
        if (rc <= 0)
            return rc;
    }
    st->pl = st->fc = 0;
    const char *v   = s + st->done;
    size_t      vn  = st->done < n ? n - st->done : 0;
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
    memset(st, 0, sizeof *st);
}
