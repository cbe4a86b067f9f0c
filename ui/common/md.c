/* md.c: Markdown to styled display lines (see md.h for what is drawn).
 *
 * DESIGN
 * md4c walks the document and calls us on entering and leaving blocks and spans, and with text.
 * Containers (quotes, lists, items) push a piece onto the line prefix; inline text of a leaf
 * block (paragraph, heading, tight list item, table cell) collects in an inline buffer as bytes
 * plus style spans (role, link); on leaving the leaf it is wrapped (txt_wrap) at the width left
 * after the prefix and cut into runs. Code blocks and tables collect whole and are laid out when
 * they end. Every line goes through ln_begin/ln_add/ln_end, which own the prefix and the width.
 *
 * Bounds: prefix pieces stop being added once the indentation reaches half the width, the span
 * stack is capped (deeper spans take the innermost style that fit), and md4c itself is linear,
 * so pathological input costs time and memory proportional to its size.
 *
 * Streaming (md_stream) lives in md-stream.c; what both files share is in md-impl.h.
 */
#include "md-impl.h"
#include "k3.h"

#include <md4c.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ==== output lines ========================================================== */

/* A run of the line whose runs start at run0 (merged with the previous one of that line when
 * the style is the same). */
int md_doc_run(md_doc *d, size_t run0, size_t off, size_t len, int role, int link) {
    if (d->n_runs > run0) {
        md_run *p = &d->runs[d->n_runs - 1];
        if (p->role == role && p->link == link && p->off + p->len == off && p->len + len < UINT32_MAX) {
            p->len += (uint32_t)len;
            return 0;
        }
    }
    md_run *r = k3_grow_z(d->runs, &d->cap_runs, d->n_runs + 1, sizeof *r, 256);
    if (!r)
        return -1;
    d->runs              = r;
    d->runs[d->n_runs++] = (md_run){off, (uint32_t)len, (int16_t)role, link};
    return 0;
}

int md_doc_line(md_doc *d, md_line l) {
    md_line *p = k3_grow(d->lines, &d->cap_lines, (size_t)d->n_lines + 1, sizeof *p, 64);
    if (!p)
        return -1;
    d->lines               = p;
    d->lines[d->n_lines++] = l;
    return 0;
}

/* s[0..n) repeated rep times as one run of rep x w columns. */
static void ln_add_rep(R *r, const char *s, size_t n, int rep, int role, int link, int w) {
    if (!n || rep <= 0 || r->err)
        return;
    md_doc *d   = r->d;
    size_t  off = d->text.n;
    for (int k = 0; k < rep; k++)
        if (txt_buf_add(&d->text, s, n)) {
            r->err = d->oom = 1;
            return;
        }
    if (md_doc_run(d, r->line_run0, off, n * (size_t)rep, role, link)) {
        r->err = d->oom = 1;
        return;
    }
    r->col += rep * w;
}

static void ln_add(R *r, const char *s, size_t n, int role, int link) {
    if (n && !r->err)
        ln_add_rep(r, s, n, 1, role, link, txt_width(s, n, r->col));
}

static void ln_spaces(R *r, int n, int role) {
    static const char sp[] = "                                ";
    while (n > 0) {
        int k = n > 32 ? 32 : n;
        ln_add(r, sp, (size_t)k, role, -1);
        n -= k;
    }
}

/* n copies of the rule character s (its width does not depend on the column) */
static void ln_rep(R *r, const char *s, int n, int role) {
    size_t l = strlen(s);
    ln_add_rep(r, s, l, n, role, -1, txt_width(s, l, 0));
}

static void ln_begin(R *r) {
    r->in_line   = 1;
    r->col       = 0;
    r->line_run0 = r->d->n_runs;
    for (int k = 0; k < r->n_pfx; k++) {
        piece *p = &r->pfx[k];
        if (p->first[0]) {
            /* a marker is as wide as the piece it stands in for (see push_piece) */
            ln_add(r, p->first, strlen(p->first), p->role, -1);
            p->first[0] = 0;
        } else {
            ln_add(r, p->text, strlen(p->text), p->role, -1);
        }
    }
}

static void ln_end(R *r) {
    md_doc *d = r->d;
    if (!r->in_line)
        return;
    r->in_line = 0;
    if (r->err)
        return;
    if (md_doc_line(d, (md_line){r->line_run0, (int)(d->n_runs - r->line_run0), r->col})) {
        r->err = d->oom = 1;
        return;
    }
    r->emitted++;
}

/* Before a block: a blank line when something came before it (quote bars continue). */
static void block_start(R *r) {
    if (r->need_blank && (r->emitted || (r->flags & MD_CONT))) {
        ln_begin(r);
        ln_end(r);
    }
    r->need_blank = 0;
}

static int avail(const R *r) {
    int a = r->width - r->pfx_w;
    return a < 1 ? 1 : a;
}

/* ==== prefix ================================================================ */

static void push_piece(R *r, const char *text, const char *first, int role) {
    int lvl = r->depth++;
    if (lvl >= PFX_MAX)
        return;
    r->pushed[lvl] = 0;
    int w          = txt_width(text, strlen(text), 0);
    if (r->n_pfx >= PFX_MAX || r->pfx_w + w > r->width / 2)
        return; /* deep nesting: no more indentation */
    piece *p = &r->pfx[r->n_pfx++];
    snprintf(p->text, sizeof p->text, "%s", text);
    snprintf(p->first, sizeof p->first, "%s", first ? first : "");
    p->role  = role;
    p->width = w;
    r->pfx_w += w;
    r->pushed[lvl] = 1;
}

static void pop_piece(R *r) {
    if (r->depth <= 0)
        return;
    int lvl = --r->depth;
    if (lvl < PFX_MAX && r->pushed[lvl]) {
        r->n_pfx--;
        r->pfx_w -= r->pfx[r->n_pfx].width;
    }
}

/* ==== styled text ========================================================== */

static void st_reset(styled *s) {
    s->t.n = 0;
    if (s->t.p)
        s->t.p[0] = 0;
    s->n_sp = s->sp0 = 0;
}

/* The text s->t holds from off on, appended just now, styled role (and link): the last span
 * grows when it has the same style. 0, or -1 out of memory. */
static int st_span(styled *s, size_t off, int role, int link) {
    size_t n = s->t.n - off;
    if (!n)
        return 0;
    if (s->n_sp > s->sp0 && s->sp[s->n_sp - 1].role == role && s->sp[s->n_sp - 1].link == link) {
        s->sp[s->n_sp - 1].len += n;
        return 0;
    }
    span *sp = k3_grow_z(s->sp, &s->cap_sp, s->n_sp + 1, sizeof *sp, 64);
    if (!sp)
        return -1;
    s->sp            = sp;
    s->sp[s->n_sp++] = (span){off, n, role, link};
    return 0;
}

static int st_add(styled *s, const char *p, size_t n, int role, int link) {
    size_t off = s->t.n;
    return txt_buf_add(&s->t, p, n) || st_span(s, off, role, link) ? -1 : 0;
}

/* Text s[0..n) added to t as it is drawn (txt_shown_runs): a tab as a space and a byte that is
 * not UTF-8 as U+FFFD, so that the bytes of two spans can never join into one character when
 * they are drawn as separate runs; a control character but the newline (a hard break) as its
 * escape's text (\x1B, \u202E), so that the wrap counts its columns and breaks inside it when it
 * is wider than the line, as md_code_rows does in code. 0, or -1 out of memory. */
static int st_text(styled *t, const char *s, size_t n, int role, int link) {
    size_t off = t->t.n;
    return txt_shown_runs(&t->t, s, n) || st_span(t, off, role, link) ? -1 : 0;
}

static void st_free(styled *s) {
    free(s->t.p);
    free(s->sp);
    memset(s, 0, sizeof *s);
}

/* Runs for bytes [off, off + len) of text, styled by spans sp[*k..n) (advanced past them). */
static void add_styled(R *r, const char *text, const span *sp, size_t n_sp, size_t *k, size_t off,
                       size_t len) {
    size_t end = off + len;
    while (*k < n_sp && sp[*k].off + sp[*k].len <= off)
        (*k)++;
    for (size_t j = *k; j < n_sp && sp[j].off < end; j++) {
        size_t a = sp[j].off > off ? sp[j].off : off;
        size_t b = sp[j].off + sp[j].len < end ? sp[j].off + sp[j].len : end;
        if (b > a) {
            /* a newline (a hard break) is not part of a drawn line; the text holds no other
             * control character (st_text) */
            size_t s0 = a;
            for (size_t q = a; q <= b; q++)
                if (q == b || text[q] == '\n') {
                    ln_add(r, text + s0, q - s0, sp[j].role, sp[j].link);
                    s0 = q + 1;
                }
        }
    }
}

/* Wrap styled text [t0, t1) at w columns: the lines, count returned (*out malloc'ed, NULL on
 * out of memory with -1). */
static int wrap(const char *text, size_t t0, size_t t1, int w, txt_line **out) {
    int n = txt_wrap(text + t0, t1 - t0, w, NULL, 0);
    *out  = malloc((size_t)(n > 0 ? n : 1) * sizeof **out);
    if (!*out)
        return -1;
    txt_wrap(text + t0, t1 - t0, w, *out, n);
    for (int k = 0; k < n; k++)
        (*out)[k].off += t0;
    return n;
}

/* Wrap text[0, n) at w columns into r->wl (grown as needed): the number of lines, -1 out of
 * memory. */
static int wrap_scratch(R *r, const char *text, size_t n, int w) {
    int k = txt_wrap(text, n, w, r->wl, r->cap_wl);
    if (k > r->cap_wl) {
        txt_line *l = k3_grow(r->wl, &r->cap_wl, (size_t)k, sizeof *l, 64);
        if (!l)
            return -1;
        r->wl = l;
        txt_wrap(text, n, w, r->wl, k);
    }
    return k;
}

/* The inline buffer as wrapped lines after the prefix. */
static void flush_inline(R *r) {
    styled *s          = &r->in;
    int     only_space = 1;
    for (size_t k = 0; k < s->t.n && only_space; k++)
        only_space = s->t.p[k] == ' ' || s->t.p[k] == '\n';
    if (only_space) {
        st_reset(s);
        return;
    }
    int n = wrap_scratch(r, s->t.p, s->t.n, avail(r));
    if (n < 0) {
        r->err = r->d->oom = 1;
        st_reset(s);
        return;
    }
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        ln_begin(r);
        add_styled(r, s->t.p, s->sp, s->n_sp, &k, r->wl[i].off, r->wl[i].len);
        ln_end(r);
    }
    st_reset(s);
}

/* ==== code blocks ========================================================== */

/* Where the row that starts at byte q of the expanded line (r->ex) starts in s: the byte of s
 * and its column, when a cluster of s starts there (not inside a tab's spaces); else none. */
static void code_row_start(md_code_last *last, R *r, const char *s, size_t ln, int col0, size_t q) {
    size_t e   = 0; /* bytes of r->ex made by s[0, p) */
    int    col = col0;
    for (size_t p = 0; p <= ln;) {
        if (e == q) {
            *last = (md_code_last){r->d->n_lines, p, col};
            return;
        }
        if (e > q || p == ln)
            return;
        int    w, f;
        size_t l = txt_cluster(s + p, ln - p, &w, &f);
        if (f & TXT_F_TAB) {
            w = TXT_TAB - col % TXT_TAB;
            e += (size_t)w;
        } else if (f & TXT_F_CTRL) {
            e += (size_t)w; /* its escape (md_code_rows), as many bytes as columns */
        } else if (!(f & TXT_F_NL)) {
            e += l;
        } else {
            w = 0;
        }
        col += w;
        p += l;
    }
}

/* The rows of one line of code s[0, ln): tabs expanded by column, control characters escaped,
 * wrapped by columns (code keeps its spaces) inside the box of inner width iw, or bare. */
void md_code_line(R *r, const char *s, size_t ln, int box, int iw) {
    md_code_rows(r, s, ln, box, iw, 0, NULL);
}

void md_code_rows(R *r, const char *s, size_t ln, int box, int iw, int col0, md_code_last *last) {
    txt_buf *ex = &r->ex;
    ex->n       = 0;
    int col     = col0;
    for (size_t q = 0; q < ln;) {
        int    w, f;
        size_t l = txt_cluster(s + q, ln - q, &w, &f);
        if (f & TXT_F_TAB) {
            int k = TXT_TAB - col % TXT_TAB;
            for (int j = 0; j < k; j++)
                txt_buf_add(ex, " ", 1);
            col += k;
        } else if (f & TXT_F_CTRL) {
            char e[8];
            txt_buf_add(ex, e, (size_t)txt_ctrl_shown(s + q, l, e));
            col += w;
        } else if (!(f & TXT_F_NL)) {
            txt_buf_add(ex, s + q, l);
            col += w;
        }
        q += l;
    }
    size_t q = 0;
    if (last)
        last->line = -1;
    do {
        size_t take = txt_col_to_off(ex->p ? ex->p + q : "", ex->n - q, iw);
        if (take == 0 && q < ex->n) { /* one cluster wider than the box */
            int w, f;
            take = txt_cluster(ex->p + q, ex->n - q, &w, &f);
        }
        if (last && q + take >= ex->n)
            code_row_start(last, r, s, ln, col0, q);
        ln_begin(r);
        int c0 = r->col;
        if (box)
            ln_add(r, "│ ", strlen("│ "), THM_MD_BORDER, -1);
        ln_add(r, ex->p ? ex->p + q : "", take, THM_CODE, -1);
        if (box) {
            int used = r->col - c0 - 2;
            ln_spaces(r, iw - used, THM_CODE);
            ln_add(r, " │", strlen(" │"), THM_MD_BORDER, -1);
        }
        ln_end(r);
        q += take;
    } while (q < ex->n && !r->err);
}

/* The box of a code block in a columns: whether there is one, and its inner width. */
int md_code_box(int a, int *iw) {
    *iw = a >= 8 ? a - 4 : a;
    return a >= 8;
}

void md_code_bottom(R *r, int a) {
    ln_begin(r);
    ln_add(r, "└", strlen("└"), THM_MD_BORDER, -1);
    ln_rep(r, "─", a - 2, THM_MD_BORDER);
    ln_add(r, "┘", strlen("┘"), THM_MD_BORDER, -1);
    ln_end(r);
}

static void code_block(R *r) {
    const char *s = r->code.p ? r->code.p : "";
    size_t      n = r->code.n;
    if (n && s[n - 1] == '\n')
        n--;
    int a = avail(r), iw, box = md_code_box(a, &iw);
    if (box) {
        ln_begin(r);
        ln_add(r, "┌─", strlen("┌─"), THM_MD_BORDER, -1);
        int used = 2;
        if (r->lang.n) {
            size_t ln = txt_col_to_off(r->lang.p, r->lang.n, a - 6);
            ln_add(r, " ", 1, THM_MD_BORDER, -1);
            ln_add(r, r->lang.p, ln, THM_MD_LANG, -1);
            ln_add(r, " ", 1, THM_MD_BORDER, -1);
            used += 2 + txt_width(r->lang.p, ln, 0);
        }
        ln_rep(r, "─", a - used - 1, THM_MD_BORDER);
        ln_add(r, "┐", strlen("┐"), THM_MD_BORDER, -1);
        ln_end(r);
    }
    for (size_t p = 0; p <= n && !r->err;) {
        const char *eol = memchr(s + p, '\n', n - p);
        size_t      ln  = eol ? (size_t)(eol - (s + p)) : n - p;
        md_code_line(r, s + p, ln, box, iw);
        if (!eol)
            break;
        p += ln + 1;
    }
    if (box)
        md_code_bottom(r, a);
}

/* ==== tables ================================================================ */

void md_table_release(table *t) {
    st_free(&t->st);
    free(t->cells);
    memset(t, 0, sizeof *t);
}

static void table_free(table *t) {
    if (!t)
        return;
    md_table_release(t);
    free(t);
}

int md_table_add_rows(table *dst, const table *src, int from, const md_doc *src_doc, md_doc *url) {
    size_t i0 = 0; /* the first cell copied: its bytes and spans come after those of earlier rows */
    while (i0 < src->n_cells && src->cells[i0].row < from)
        i0++;
    if (i0 == src->n_cells)
        return 0;
    size_t tb = src->cells[i0].t0, sb = src->cells[i0].s0;
    size_t t0 = dst->st.t.n, s0 = dst->st.n_sp;
    int    row0 = dst->n_rows - from;
    if (txt_buf_add(&dst->st.t, src->st.t.p + tb, src->st.t.n - tb))
        return -1;
    for (size_t k = sb; k < src->st.n_sp; k++) {
        span  sp = src->st.sp[k];
        span *p  = k3_grow_z(dst->st.sp, &dst->st.cap_sp, dst->st.n_sp + 1, sizeof *p, 64);
        if (!p)
            return -1;
        dst->st.sp = p;
        sp.off     = sp.off - tb + t0;
        if (sp.link >= 0) { /* its URL into url, where the layout's doc takes it from */
            const md_link *l = &src_doc->links[sp.link];
            if ((sp.link = md_doc_link(url, src_doc->text.p + l->off, l->len)) < 0)
                return -1;
        }
        dst->st.sp[dst->st.n_sp++] = sp;
    }
    dst->st.sp0 = dst->st.n_sp;
    for (size_t i = i0; i < src->n_cells; i++) {
        cell  c = src->cells[i];
        cell *p = k3_grow_z(dst->cells, &dst->cap_cells, dst->n_cells + 1, sizeof *p, 32);
        if (!p)
            return -1;
        dst->cells = p;
        c.row += row0;
        c.t0                       = c.t0 - tb + t0;
        c.t1                       = c.t1 - tb + t0;
        c.s0                       = c.s0 - sb + s0;
        c.s1                       = c.s1 - sb + s0;
        dst->cells[dst->n_cells++] = c;
        if (c.row + 1 > dst->n_rows)
            dst->n_rows = c.row + 1;
    }
    return 0;
}

static int cell_width(const table *t, const cell *c) {
    return txt_width(t->st.t.p + c->t0, c->t1 - c->t0, 0);
}

/* One border line: l, m, r joints and ─ over each column (width w[c] + 2). */
static void table_rule(R *r, const int *w, int nc, const char *l, const char *m, const char *rt) {
    ln_begin(r);
    ln_add(r, l, strlen(l), THM_MD_BORDER, -1);
    for (int c = 0; c < nc; c++) {
        ln_rep(r, "─", w[c] + 2, THM_MD_BORDER);
        ln_add(r, c + 1 < nc ? m : rt, strlen(c + 1 < nc ? m : rt), THM_MD_BORDER, -1);
    }
    ln_end(r);
}

/* Cells of one row, wrapped in their columns; rows may take several lines. */
static void table_row(R *r, const table *t, const cell *row, int n, const int *w, int nc) {
    txt_line *L[128]  = {0};
    int       nl[128] = {0}, h = 1;
    for (int k = 0; k < n && row[k].col < nc; k++) {
        nl[row[k].col] = wrap(t->st.t.p, row[k].t0, row[k].t1, w[row[k].col], &L[row[k].col]);
        if (nl[row[k].col] < 0) {
            r->err = r->d->oom = 1;
            nl[row[k].col]     = 0;
        }
        if (nl[row[k].col] > h)
            h = nl[row[k].col];
    }
    for (int y = 0; y < h && !r->err; y++) {
        ln_begin(r);
        ln_add(r, "│", strlen("│"), THM_MD_BORDER, -1);
        for (int c = 0; c < nc; c++) {
            const cell *ce = NULL;
            for (int k = 0; k < n; k++)
                if (row[k].col == c)
                    ce = &row[k];
            int lw  = ce && y < nl[c] ? L[c][y].width : 0;
            int pad = w[c] - lw, left = 0;
            if (pad < 0)
                pad = 0;
            if (t->align[c] == MD_ALIGN_RIGHT)
                left = pad;
            else if (t->align[c] == MD_ALIGN_CENTER)
                left = pad / 2;
            ln_spaces(r, 1 + left, THM_NORMAL);
            if (ce && y < nl[c]) {
                size_t k = ce->s0;
                add_styled(r, t->st.t.p, t->st.sp, ce->s1, &k, L[c][y].off, L[c][y].len);
            }
            ln_spaces(r, pad - left + 1, THM_NORMAL);
            ln_add(r, "│", strlen("│"), THM_MD_BORDER, -1);
        }
        ln_end(r);
    }
    for (int c = 0; c < nc; c++)
        free(L[c]);
}

/* Too narrow for columns: body rows whose cells are [c0, c1) as "header: value" paragraphs, a short
 * rule before each row but the first body row. */
static void table_records(R *r, const table *t, size_t c0, size_t c1) {
    size_t i = c0;
    while (i < c1) {
        int row = t->cells[i].row;
        if (row < t->n_head) {
            i++;
            continue;
        }
        if (row > t->n_head) {
            ln_begin(r);
            ln_rep(r, "─", avail(r) < 8 ? avail(r) : 8, THM_MD_BORDER);
            ln_end(r);
        }
        for (; i < c1 && t->cells[i].row == row && !r->err; i++) {
            const cell *c = &t->cells[i];
            /* the header of this column, if any */
            for (size_t h = 0; h < t->n_cells && t->cells[h].row < t->n_head; h++)
                if (t->cells[h].col == c->col && t->cells[h].t1 > t->cells[h].t0) {
                    size_t k = t->cells[h].s0;
                    for (; k < t->cells[h].s1; k++)
                        if (st_add(&r->in, t->st.t.p + t->st.sp[k].off, t->st.sp[k].len, THM_MD_TABLE_HEAD,
                                   -1))
                            r->err = 1;
                    st_add(&r->in, ": ", 2, THM_MD_BORDER, -1);
                    break;
                }
            for (size_t k = c->s0; k < c->s1; k++)
                if (st_add(&r->in, t->st.t.p + t->st.sp[k].off, t->st.sp[k].len, t->st.sp[k].role,
                           t->st.sp[k].link))
                    r->err = 1;
            flush_inline(r);
        }
    }
}

void md_table_nat(const table *t, size_t c0, size_t c1, int *nat) {
    int nc = t->n_cols < 128 ? t->n_cols : 128;
    for (size_t i = c0; i < c1; i++) {
        const cell *c = &t->cells[i];
        if (c->col < nc) {
            int cw = cell_width(t, c);
            if (cw > nat[c->col])
                nat[c->col] = cw;
        }
    }
}

int md_table_widths(const R *r, const table *t, const int *nat_in, int *w) {
    int nc = t->n_cols < 128 ? t->n_cols : 128;
    if (nc <= 0 || !t->n_cells)
        return MD_TB_NONE;
    int nat[128] = {0};
    int a = avail(r), over = 3 * nc + 1, total = 0;
    for (int c = 0; c < nc; c++) {
        nat[c] = nat_in[c] < 1 ? 1 : nat_in[c];
        total += nat[c];
    }
    memset(w, 0, 128 * sizeof *w);
    if (total + over <= a) {
        memcpy(w, nat, sizeof nat);
    } else if (a - over >= 4 * nc) {
        /* share the room: narrow columns keep their width, wide ones split the rest */
        int room = a - over, left = nc, done[128] = {0};
        for (int changed = 1; changed;) {
            changed = 0;
            for (int c = 0; c < nc; c++)
                if (!done[c] && nat[c] <= room / left) {
                    w[c] = nat[c];
                    room -= nat[c];
                    left--;
                    done[c] = changed = 1;
                }
            if (!left)
                break;
        }
        for (int c = 0, k = 0; c < nc; c++)
            if (!done[c]) {
                w[c] = room / left + (k < room % left);
                k++;
            }
    } else {
        return MD_TB_RECORDS;
    }
    return MD_TB_BOX;
}

void md_table_part(R *r, const table *t, size_t c0, size_t c1, const int *w, int mode, int top, int bottom) {
    int nc = t->n_cols < 128 ? t->n_cols : 128;
    if (top)
        block_start(r);
    if (mode == MD_TB_RECORDS) {
        table_records(r, t, c0, c1);
        return;
    }
    if (mode != MD_TB_BOX)
        return;
    if (top)
        table_rule(r, w, nc, "┌", "┬", "┐");
    size_t i = c0;
    while (i < c1 && !r->err) {
        size_t j = i;
        while (j < c1 && t->cells[j].row == t->cells[i].row)
            j++;
        if (t->cells[i].row == t->n_head && t->n_head > 0) /* the first body row: the header's rule */
            table_rule(r, w, nc, "├", "┼", "┤");
        table_row(r, t, &t->cells[i], (int)(j - i), w, nc);
        i = j;
    }
    if (bottom)
        table_rule(r, w, nc, "└", "┴", "┘");
}

static void table_draw(R *r, table *t) {
    int nat[128] = {0}, w[128];
    md_table_nat(t, 0, t->n_cells, nat);
    /* (block_start was called when the table was entered: a second call adds nothing) */
    md_table_part(r, t, 0, t->n_cells, w, md_table_widths(r, t, nat, w), 1, 1);
}

/* ==== md4c callbacks ======================================================= */

static int cur_role(const R *r) {
    if (r->n_roles)
        return r->roles[r->n_roles - 1];
    if (r->cell_open)
        return r->tb && r->tb->in_head ? THM_MD_TABLE_HEAD : r->base;
    return r->leaf == MD_BLOCK_H ? THM_MD_HEADING : r->base;
}

static styled *target(R *r) {
    return r->cell_open && r->tb ? &r->tb->st : &r->in;
}

static void add_text(R *r, const char *s, size_t n) {
    if (st_text(target(r), s, n, cur_role(r), r->link))
        r->err = r->d->oom = 1;
}

static void leave_leaf_heading(R *r) {
    int level = r->h_level;
    flush_inline(r);
    if (level <= 2) {
        ln_begin(r);
        ln_rep(r, level == 1 ? "━" : "─", avail(r), THM_MD_BORDER);
        ln_end(r);
    }
}

static void set_lang(R *r, const MD_ATTRIBUTE *a) {
    r->lang.n = 0;
    for (MD_SIZE k = 0; a && a->text && k < a->size; k++)
        if ((unsigned char)a->text[k] >= 0x20 && a->text[k] != 0x7f) /* no control bytes */
            txt_buf_add(&r->lang, a->text + k, 1);
}

/* No span outlives its block, but md4c can leave a block with one still entered (the emphasis of
 * "*x [l](u*)", whose closing '*' the link's destination took): every block starts and ends with
 * none, or that emphasis would style the blocks after it, which md-stream.c, laying a document
 * out block by block, does not. */
static void spans_end(R *r) {
    r->n_roles = r->span_depth = 0;
    r->link                    = -1;
}

static int enter_block(MD_BLOCKTYPE type, void *detail, void *ud) {
    R *r = ud;
    spans_end(r);
    if (r->md_depth == 1) {
        r->top_n++;
        r->top_type  = type == MD_BLOCK_UL ? MD_TOP_UL : type == MD_BLOCK_OL ? MD_TOP_OL : MD_TOP_OTHER;
        r->top_start = type == MD_BLOCK_OL ? ((MD_BLOCK_OL_DETAIL *)detail)->start : 0;
    } else if (r->md_depth == 2 && type == MD_BLOCK_LI) {
        r->top_li++;
    }
    r->md_depth++;
    if (r->flags & MD_COLLECT) { /* only one table: anything else and the caller renders with md4c */
        if (type == MD_BLOCK_TABLE)
            r->coll_tables++;
        else if (type != MD_BLOCK_DOC && type != MD_BLOCK_THEAD && type != MD_BLOCK_TBODY &&
                 type != MD_BLOCK_TR && type != MD_BLOCK_TH && type != MD_BLOCK_TD)
            r->coll_bad = 1;
    }
    if (r->in.t.n && !r->in_table)
        flush_inline(r); /* text of a tight list item before a nested block */
    switch (type) {
    case MD_BLOCK_DOC:
        break;
    case MD_BLOCK_QUOTE:
        block_start(r);
        push_piece(r, "│ ", NULL, THM_MD_QUOTE);
        break;
    case MD_BLOCK_UL:
    case MD_BLOCK_OL:
        if (!r->list_depth)
            block_start(r);
        if (r->list_depth < PFX_MAX)
            r->ol_next[r->list_depth] = type == MD_BLOCK_OL ? (int)((MD_BLOCK_OL_DETAIL *)detail)->start : -1;
        r->list_depth++;
        break;
    case MD_BLOCK_LI: {
        MD_BLOCK_LI_DETAIL *li = detail;
        char                mark[48];
        int                 lvl       = r->list_depth - 1;
        int                 num       = lvl >= 0 && lvl < PFX_MAX ? r->ol_next[lvl] : -1;
        static const char  *bullets[] = {"•", "◦", "▪"};
        if (num >= 0) {
            snprintf(mark, sizeof mark, "%d.%s", num,
                     li->is_task ? (li->task_mark == ' ' ? " [ ]" : " [x]") : "");
            r->ol_next[lvl]++;
        } else if (li->is_task) {
            snprintf(mark, sizeof mark, "%s", li->task_mark == ' ' ? "[ ]" : "[x]");
        } else {
            snprintf(mark, sizeof mark, "%s", bullets[(lvl < 0 ? 0 : lvl) % 3]);
        }
        int  mw = txt_width(mark, strlen(mark), 0) + 1;
        char sp[48];
        if (mw > 40)
            mw = 40;
        memset(sp, ' ', (size_t)mw);
        sp[mw] = 0;
        strncat(mark, " ", sizeof mark - strlen(mark) - 1);
        r->need_blank = 0;
        push_piece(r, sp, mark, THM_MD_LIST);
        break;
    }
    case MD_BLOCK_HR:
        block_start(r);
        ln_begin(r);
        ln_rep(r, "─", avail(r), THM_MD_BORDER);
        ln_end(r);
        r->need_blank = 1;
        break;
    case MD_BLOCK_H:
        block_start(r);
        r->leaf    = MD_BLOCK_H;
        r->h_level = (int)((MD_BLOCK_H_DETAIL *)detail)->level;
        break;
    case MD_BLOCK_CODE:
        block_start(r);
        r->leaf    = MD_BLOCK_CODE;
        r->in_code = 1;
        r->code.n  = 0;
        set_lang(r, &((MD_BLOCK_CODE_DETAIL *)detail)->lang);
        break;
    case MD_BLOCK_HTML:
    case MD_BLOCK_P:
        block_start(r);
        r->leaf = MD_BLOCK_P;
        break;
    case MD_BLOCK_TABLE:
        block_start(r);
        if (!r->tb_keep)
            r->tb_keep = calloc(1, sizeof *r->tb_keep);
        if ((r->tb = r->tb_keep) != NULL) { /* emptied, its memory kept */
            table *t = r->tb;
            st_reset(&t->st);
            t->n_cells = 0;
            t->n_cols = t->n_rows = t->n_head = t->in_head = 0;
            memset(t->align, 0, sizeof t->align);
        }
        if (!r->tb || txt_buf_add(&r->tb->st.t, "", 0)) /* text never NULL, even when all cells are empty */
            r->err = r->d->oom = 1;
        r->in_table = 1;
        break;
    case MD_BLOCK_THEAD:
        if (r->tb)
            r->tb->in_head = 1;
        break;
    case MD_BLOCK_TBODY:
        if (r->tb)
            r->tb->in_head = 0;
        break;
    case MD_BLOCK_TR:
        if (r->tb)
            r->tb->n_rows++;
        break;
    case MD_BLOCK_TH:
    case MD_BLOCK_TD: {
        table *t = r->tb;
        if (!t)
            break;
        cell *c = k3_grow_z(t->cells, &t->cap_cells, t->n_cells + 1, sizeof *c, 32);
        if (!c) {
            r->err = r->d->oom = 1;
            break;
        }
        t->cells = c;
        int col  = 0;
        if (t->n_cells && t->cells[t->n_cells - 1].row == t->n_rows - 1)
            col = t->cells[t->n_cells - 1].col + 1;
        t->st.sp0              = t->st.n_sp;
        t->cells[t->n_cells++] = (cell){t->n_rows - 1, col, t->st.t.n, 0, t->st.n_sp, 0};
        if (col + 1 > t->n_cols)
            t->n_cols = col + 1;
        if (col < 128 && t->in_head)
            t->align[col] = (int)((MD_BLOCK_TD_DETAIL *)detail)->align;
        if (t->in_head)
            t->n_head = t->n_rows;
        r->cell_open = 1;
        break;
    }
    }
    return r->err ? -1 : 0;
}

static int leave_block(MD_BLOCKTYPE type, void *detail, void *ud) {
    R *r = ud;
    (void)detail;
    spans_end(r);
    r->md_depth--;
    switch (type) {
    case MD_BLOCK_DOC:
        flush_inline(r);
        break;
    case MD_BLOCK_QUOTE:
        flush_inline(r);
        pop_piece(r);
        r->need_blank = 1;
        break;
    case MD_BLOCK_UL:
    case MD_BLOCK_OL:
        flush_inline(r);
        r->list_depth--;
        r->need_blank = 1;
        break;
    case MD_BLOCK_LI:
        flush_inline(r);
        if (r->depth - 1 < PFX_MAX && r->pushed[r->depth - 1] && r->pfx[r->n_pfx - 1].first[0]) {
            ln_begin(r); /* an empty item: its marker alone */
            ln_end(r);
        }
        pop_piece(r);
        r->need_blank = 0;
        break;
    case MD_BLOCK_HR:
        break;
    case MD_BLOCK_H:
        leave_leaf_heading(r);
        r->leaf       = -1;
        r->need_blank = 1;
        break;
    case MD_BLOCK_CODE:
        r->in_code = 0;
        code_block(r);
        r->leaf       = -1;
        r->need_blank = 1;
        break;
    case MD_BLOCK_HTML:
    case MD_BLOCK_P:
        flush_inline(r);
        r->leaf       = -1;
        r->need_blank = 1;
        break;
    case MD_BLOCK_TABLE:
        if (r->tb && !(r->flags & MD_COLLECT))
            table_draw(r, r->tb);
        r->tb         = NULL;
        r->in_table   = 0;
        r->need_blank = 1;
        break;
    case MD_BLOCK_TH:
    case MD_BLOCK_TD:
        if (r->tb && r->tb->n_cells) {
            cell *c = &r->tb->cells[r->tb->n_cells - 1];
            c->t1   = r->tb->st.t.n;
            c->s1   = r->tb->st.n_sp;
        }
        r->cell_open = 0;
        break;
    default:
        break;
    }
    return r->err ? -1 : 0;
}

static int enter_span(MD_SPANTYPE type, void *detail, void *ud) {
    R  *r    = ud;
    int role = -1;
    switch (type) {
    case MD_SPAN_EM:
        role = THM_MD_EM;
        break;
    case MD_SPAN_STRONG:
        role = THM_MD_STRONG;
        break;
    case MD_SPAN_U:
        role = THM_MD_EM;
        break;
    case MD_SPAN_CODE:
        role = THM_MD_CODE;
        break;
    case MD_SPAN_DEL:
        role = THM_MD_STRIKE;
        break;
    case MD_SPAN_LATEXMATH:
    case MD_SPAN_LATEXMATH_DISPLAY:
        role = THM_MD_MATH;
        break;
    case MD_SPAN_A:
    case MD_SPAN_IMG: {
        const MD_ATTRIBUTE *h =
            type == MD_SPAN_A ? &((MD_SPAN_A_DETAIL *)detail)->href : &((MD_SPAN_IMG_DETAIL *)detail)->src;
        role = THM_MD_LINK;
        if (r->span_depth == 0 || r->link < 0) {
            if ((r->link = md_doc_link(r->d, h->text ? h->text : "", h->size)) < 0) {
                r->err = r->d->oom = 1;
                return -1;
            }
        }
        if (type == MD_SPAN_IMG)
            add_text(r, "[image: ", 8);
        break;
    }
    default:
        break;
    }
    if (r->span_depth < SPAN_MAX)
        r->roles[r->n_roles++] = role >= 0 ? role : cur_role(r);
    r->span_depth++;
    return r->err ? -1 : 0;
}

/* The link text equals its URL (an autolink): nothing to add after it. A bare www.x or
 * name@x autolink's URL is the text with "http://" or "mailto:" before it: the same. The text
 * holds what is shown (st_text: a control character as its escape), so the URL is compared as
 * shown too: with a control in it, the raw URL never equalled its own text. 1 when equal, 0
 * when not, -1 out of memory. */
static int link_is_text(R *r, const md_link *l) {
    styled *t = target(r), sh = {0};
    size_t  n = 0;
    for (size_t k = t->n_sp; k-- > 0 && t->sp[k].link == r->link;)
        n += t->sp[k].len;
    if (st_text(&sh, r->d->text.p + l->off, l->len, 0, -1)) {
        st_free(&sh);
        return -1;
    }
    const char *u   = sh.t.p ? sh.t.p : "";
    size_t      len = sh.t.n;
    int         eq  = n >= len && !memcmp(t->t.p + t->t.n - len, u, len);
    if (len > 7 && (!memcmp(u, "http://", 7) || !memcmp(u, "mailto:", 7)) && n == len - 7 &&
        !memcmp(t->t.p + t->t.n - n, u + 7, n))
        eq = 1;
    st_free(&sh);
    return eq;
}

static int leave_span(MD_SPANTYPE type, void *detail, void *ud) {
    R *r = ud;
    (void)detail;
    /* md4c leaves a span it did not enter ("[](*)* *a*": an emphasis of the '*'s around ")"):
     * nothing to pop, or the next span's role would stay on to the end of the text */
    if (r->span_depth <= 0)
        return 0;
    if (r->span_depth <= SPAN_MAX)
        r->n_roles--;
    r->span_depth--;
    if ((type == MD_SPAN_A || type == MD_SPAN_IMG) && r->link >= 0) {
        if (type == MD_SPAN_IMG)
            add_text(r, "]", 1);
        const md_link *l    = &r->d->links[r->link];
        int            same = r->flags & MD_OSC8 || !l->len ? 1 : link_is_text(r, l);
        if (same < 0)
            r->err = r->d->oom = 1;
        else if (!same) {
            /* no hyperlinks: the URL after the text */
            int     keep = r->link;
            styled *t    = target(r);
            r->link      = -1;
            if (st_add(t, " <", 2, THM_MD_URL, -1) ||
                st_text(t, r->d->text.p + r->d->links[keep].off, r->d->links[keep].len, THM_MD_URL, -1) ||
                st_add(t, ">", 1, THM_MD_URL, -1))
                r->err = r->d->oom = 1;
        }
        r->link = -1;
    }
    return r->err ? -1 : 0;
}

static void add_entity(R *r, const char *s, size_t n) {
    static const struct {
        const char *name, *utf8;
    } ents[] = {{"&amp;", "&"},  {"&lt;", "<"},   {"&gt;", ">"},    {"&quot;", "\""}, {"&apos;", "'"},
                {"&nbsp;", " "}, {"&copy;", "©"}, {"&mdash;", "—"}, {"&ndash;", "–"}, {"&hellip;", "…"}};
    for (size_t k = 0; k < sizeof ents / sizeof ents[0]; k++)
        if (strlen(ents[k].name) == n && !memcmp(s, ents[k].name, n)) {
            add_text(r, ents[k].utf8, strlen(ents[k].utf8));
            return;
        }
    if (n > 3 && s[1] == '#') {
        char   num[16];
        int    hex = s[2] == 'x' || s[2] == 'X';
        size_t m   = n - 3 - (size_t)hex;
        if (m > 0 && m < sizeof num) {
            memcpy(num, s + 2 + hex, m);
            num[m]              = 0;
            long             cp = strtol(num, NULL, hex ? 16 : 10);
            utf8proc_uint8_t u[4];
            if (utf8proc_codepoint_valid((utf8proc_int32_t)cp) && cp > 0 && cp < 0x110000) {
                utf8proc_ssize_t l = utf8proc_encode_char((utf8proc_int32_t)cp, u);
                add_text(r, (const char *)u, (size_t)l);
                return;
            }
        }
    }
    add_text(r, s, n);
}

static int on_text(MD_TEXTTYPE type, const MD_CHAR *s, MD_SIZE n, void *ud) {
    R *r = ud;
    if (r->in_code) {
        if (txt_buf_add(&r->code, s, n))
            r->err = r->d->oom = 1;
        return r->err ? -1 : 0;
    }
    switch (type) {
    case MD_TEXT_NULLCHAR:
        add_text(r, "\xEF\xBF\xBD", 3);
        break;
    case MD_TEXT_BR: {
        styled *t = target(r);
        if (st_add(t, "\n", 1, cur_role(r), r->link))
            r->err = 1;
        break;
    }
    case MD_TEXT_SOFTBR:
        add_text(r, " ", 1);
        break;
    case MD_TEXT_ENTITY:
        add_entity(r, s, n);
        break;
    default:
        add_text(r, s, n);
        break;
    }
    return r->err ? -1 : 0;
}

/* The rows of a block quote's plain paragraph t[0, n) (md-stream.c's quote layout): each the
 * quote's bar, then a row of t wrapped at the width left, in the base role, as flush_inline lays out
 * a paragraph of one style without control characters; with t NULL, the bar alone (the blank line
 * between two blocks of a quote). start: the quote begins here (the blank line before a block, as
 * entering the quote makes it). *last: the byte of t where the last row starts (n: no row). */
void md_quote_rows(R *r, int start, const char *t, size_t n, size_t *last) {
    if (start)
        block_start(r);
    push_piece(r, "│ ", NULL, THM_MD_QUOTE);
    *last = n;
    if (!t) {
        ln_begin(r);
        ln_end(r);
    } else {
        int k = wrap_scratch(r, t, n, avail(r));
        if (k < 0)
            r->err = r->d->oom = 1;
        for (int i = 0; i < k; i++) {
            ln_begin(r);
            ln_add(r, t + r->wl[i].off, r->wl[i].len, r->base, -1);
            ln_end(r);
        }
        if (k > 0)
            *last = r->wl[k - 1].off;
    }
    pop_piece(r);
}

/* ==== public ================================================================ */

/* Render s[0..n) into d with the context r (its buffers kept for the next render). */
/* r made ready to render into d (its buffers emptied, kept). */
void md_render_begin(R *r, md_doc *d, int width, int base, unsigned flags) {
    memset(r, 0, offsetof(R, in));
    st_reset(&r->in);
    r->code.n = r->lang.n = 0;
    r->d                  = d;
    r->width              = width < 2 ? 2 : width;
    r->base               = base;
    r->flags              = flags;
    r->leaf               = -1;
    r->link               = -1;
    r->need_blank         = 1;
}

int md_render_with(R *r, md_doc *d, const char *s, size_t n, int width, int base, unsigned flags) {
    md_render_begin(r, d, width, base, flags);
    MD_PARSER p;
    memset(&p, 0, sizeof p);
    p.flags = MD_FLAG_TABLES | MD_FLAG_STRIKETHROUGH | MD_FLAG_TASKLISTS | MD_FLAG_LATEXMATHSPANS |
              MD_FLAG_PERMISSIVEURLAUTOLINKS | MD_FLAG_PERMISSIVEWWWAUTOLINKS | MD_FLAG_NOHTML;
    p.enter_block = enter_block;
    p.leave_block = leave_block;
    p.enter_span  = enter_span;
    p.leave_span  = leave_span;
    p.text        = on_text;
    if (n > 0xFFFFFFF0u)
        n = 0xFFFFFFF0u; /* MD_SIZE is 32 bits */
    /* md4c 0.4.8 can read the byte after the text (fuzz-md under ASan: one past a buffer of
     * exactly n bytes): it parses a copy followed by a NUL, in a buffer kept between renders */
    r->src.n = 0;
    if (n && txt_buf_add(&r->src, s, n)) {
        r->err = d->oom = 1;
        return -1;
    }
    int rc = md_parse(n ? r->src.p : "", (MD_SIZE)n, &p, r);
    ln_end(r);
    return r->err || rc != 0 ? -1 : 0;
}

R *md_ctx_new(void) {
    R *r = malloc(sizeof *r);
    if (r)
        memset(r, 0, offsetof(R, pfx));
    return r;
}

void md_ctx_free(R *r) {
    if (!r)
        return;
    st_free(&r->in);
    free(r->code.p);
    free(r->lang.p);
    free(r->ex.p);
    free(r->src.p);
    free(r->wl);
    table_free(r->tb_keep);
    free(r);
}

int md_render(md_doc *d, const char *s, size_t n, int width, int base, unsigned flags) {
    R *r = md_ctx_new();
    if (!r) {
        d->oom = 1;
        return -1;
    }
    int rc = md_render_with(r, d, s, n, width, base, flags);
    md_ctx_free(r);
    return rc;
}

int md_doc_link(md_doc *d, const char *u, size_t n) {
    md_link *l = k3_grow(d->links, &d->cap_links, (size_t)d->n_links + 1, sizeof *l, 16);
    if (!l)
        return -1;
    d->links   = l;
    size_t off = d->text.n;
    if (txt_buf_add(&d->text, u, n))
        return -1;
    d->links[d->n_links] = (md_link){off, n};
    return d->n_links++;
}

void md_doc_reset(md_doc *d) {
    d->text.n = 0;
    if (d->text.p)
        d->text.p[0] = 0;
    d->n_runs  = 0;
    d->n_lines = 0;
    d->n_links = 0;
    d->oom     = 0;
}

void md_doc_free(md_doc *d) {
    free(d->text.p);
    free(d->runs);
    free(d->lines);
    free(d->links);
    memset(d, 0, sizeof *d);
}

int md_line_text(const md_doc *d, int i, txt_buf *out) {
    out->n = 0;
    if (txt_buf_add(out, "", 0))
        return -1;
    if (i < 0 || i >= d->n_lines)
        return 0;
    const md_line *l = &d->lines[i];
    for (int k = 0; k < l->n_runs; k++) {
        const md_run *r = &d->runs[l->run0 + (size_t)k];
        if (txt_buf_add(out, d->text.p + r->off, r->len))
            return -1;
    }
    return 0;
}

/* ---- code blocks for /copy ---- */

typedef struct CB {
    int      k, count, in;
    txt_buf *out;
    int      err;
} CB;

static int cb_enter(MD_BLOCKTYPE t, void *d, void *ud) {
    CB *c = ud;
    (void)d;
    if (t == MD_BLOCK_CODE) {
        c->count++;
        c->in = c->count == c->k;
    }
    return 0;
}
static int cb_leave(MD_BLOCKTYPE t, void *d, void *ud) {
    CB *c = ud;
    (void)d;
    if (t == MD_BLOCK_CODE)
        c->in = 0;
    return 0;
}
static int cb_span(MD_SPANTYPE t, void *d, void *ud) {
    (void)t;
    (void)d;
    (void)ud;
    return 0;
}
static int cb_text(MD_TEXTTYPE t, const MD_CHAR *s, MD_SIZE n, void *ud) {
    CB *c = ud;
    (void)t;
    if (c->in && txt_buf_add(c->out, s, n))
        c->err = 1;
    return 0;
}

int md_code_block(const char *s, size_t n, int k, txt_buf *out) {
    CB c   = {k, 0, 0, out, 0};
    out->n = 0;
    txt_buf_add(out, "", 0);
    MD_PARSER p;
    memset(&p, 0, sizeof p);
    p.flags =
        MD_FLAG_TABLES | MD_FLAG_STRIKETHROUGH | MD_FLAG_TASKLISTS | MD_FLAG_LATEXMATHSPANS | MD_FLAG_NOHTML;
    p.enter_block = cb_enter;
    p.leave_block = cb_leave;
    p.enter_span  = cb_span;
    p.leave_span  = cb_span;
    p.text        = cb_text;
    if (n > 0xFFFFFFF0u)
        n = 0xFFFFFFF0u;
    md_parse(s ? s : "", (MD_SIZE)n, &p, &c);
    return c.err ? -1 : c.count;
}

/* ==== terminal escapes ====================================================== */

int md_base64(txt_buf *out, const char *s, size_t n) {
    static const char    tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *u     = (const unsigned char *)s;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v =
            (unsigned)u[i] << 16 | (i + 1 < n ? (unsigned)u[i + 1] << 8 : 0) | (i + 2 < n ? u[i + 2] : 0);
        char q[4] = {tab[v >> 18 & 63], tab[v >> 12 & 63], i + 1 < n ? tab[v >> 6 & 63] : '=',
                     i + 2 < n ? tab[v & 63] : '='};
        if (txt_buf_add(out, q, 4))
            return -1;
    }
    return txt_buf_add(out, "", 0);
}

int md_osc52(txt_buf *out, const char *s, size_t n, int mux) {
    txt_buf b  = {0};
    int     rc = 0;
    if (txt_buf_add(&b, "\033]52;c;", 7) || md_base64(&b, s, n) || txt_buf_add(&b, "\a", 1)) {
        free(b.p);
        return -1;
    }
    if (mux == MD_TERM_TMUX) {
        /* DCS passthrough: every ESC inside is doubled */
        rc |= txt_buf_add(out, "\033Ptmux;", 7);
        for (size_t k = 0; k < b.n; k++)
            rc |= b.p[k] == '\033' ? txt_buf_add(out, "\033\033", 2) : txt_buf_add(out, b.p + k, 1);
        rc |= txt_buf_add(out, "\033\\", 2);
    } else if (mux == MD_TERM_SCREEN) {
        /* screen passes a DCS string on; it limits their length, so several */
        for (size_t k = 0; k < b.n; k += 76) {
            rc |= txt_buf_add(out, "\033P", 2);
            rc |= txt_buf_add(out, b.p + k, b.n - k < 76 ? b.n - k : 76);
            rc |= txt_buf_add(out, "\033\\", 2);
        }
    } else {
        rc |= txt_buf_add(out, b.p, b.n);
    }
    free(b.p);
    return rc ? -1 : 0;
}

int md_term_mux(void) {
    const char *tmux = getenv("TMUX"), *sty = getenv("STY"), *term = getenv("TERM");
    if (tmux && *tmux)
        return MD_TERM_TMUX;
    if ((sty && *sty) || (term && !strncmp(term, "screen", 6)))
        return MD_TERM_SCREEN;
    return MD_TERM_PLAIN;
}

int md_term_osc8(void) {
    const char *e = k3_setting_env_str(K3_SETTING_HYPERLINKS);
    double      on;
    if (e && !k3_setting_parse(K3_SETTING_HYPERLINKS, K3_SRC_ENV, e, &on, NULL, 0))
        return on == 1; /* 0 or 1 (main refuses anything else at start) */
    if (md_term_mux() != MD_TERM_PLAIN)
        return 0;
    const char *vte = getenv("VTE_VERSION"), *tp = getenv("TERM_PROGRAM"), *term = getenv("TERM");
    if (vte && atoi(vte) >= 5000)
        return 1;
    if (tp && (!strcmp(tp, "WezTerm") || !strcmp(tp, "iTerm.app") || !strcmp(tp, "vscode")))
        return 1;
    if (term && (!strcmp(term, "xterm-kitty") || !strncmp(term, "foot", 4)))
        return 1;
    return 0;
}
