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
 */
#include "md.h"
#include "k3.h"

#include <md4c.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define SPAN_MAX 64 /* nested inline styles tracked */
#define PFX_MAX 512 /* prefix pieces tracked (deeper containers add nothing) */

typedef struct span {
    size_t off, len;
    int    role, link;
} span;

/* Styled text: bytes and the spans that cover them, in order. */
typedef struct styled {
    txt_buf t;
    span   *sp;
    size_t  n_sp, cap_sp;
    size_t  sp0; /* spans before sp0 are closed (a finished table cell): no merging into them */
} styled;

typedef struct piece {
    char text[48];  /* continuation text (spaces or a quote bar)          */
    char first[48]; /* marker for the next line ("" = use text)           */
    int  role, width;
} piece;

typedef struct cell {
    int    row, col;
    size_t t0, t1, s0, s1; /* bytes and spans of table.st */
} cell;

typedef struct table {
    styled st;
    cell  *cells;
    size_t n_cells, cap_cells;
    int    n_cols, n_rows, n_head, in_head;
    int    align[128];
} table;

typedef struct md_rctx {
    md_doc  *d;
    int      width, base;
    unsigned flags;
    int      err;

    int n_pfx, pfx_w;
    int depth; /* containers entered (may exceed n_pfx)          */
    int list_depth;

    /* line being built */
    int    in_line, col;
    size_t line_run0;
    int    emitted; /* lines emitted by this render                   */
    int    need_blank;

    /* leaf block */
    int    roles[SPAN_MAX];
    int    n_roles, span_depth;
    int    link;
    int    leaf; /* MD_BLOCK_* of the open leaf, -1 none           */
    int    h_level;
    int    in_code;
    table *tb; /* the open table (tb_keep), NULL outside one     */
    int    in_table, cell_open;

    /* not cleared: buffers kept between the renders of a stream (emptied by render_begin), so a
     * streaming frame allocates nothing once they have grown */
    styled    in;
    txt_buf   code, lang, ex; /* ex: a code line with its tabs expanded */
    table    *tb_keep;
    txt_line *wl; /* lines of a wrapped paragraph (wrap) */
    int       cap_wl;

    /* last, and not cleared (57 KB): each entry is written before it is read */
    piece pfx[PFX_MAX];     /* [0, n_pfx): written by push_piece                  */
    int   pushed[PFX_MAX];  /* per container level: it added a piece (push_piece) */
    int   ol_next[PFX_MAX]; /* per list level: next number, -1 bullets (list entry) */
} R;

/* ==== output lines ========================================================== */

/* A run of the line whose runs start at run0 (merged with the previous one of that line when
 * the style is the same). */
static int doc_run(md_doc *d, size_t run0, size_t off, size_t len, int role, int link) {
    if (d->n_runs > run0) {
        md_run *p = &d->runs[d->n_runs - 1];
        if (p->role == role && p->link == link && p->off + p->len == off && p->len + len < UINT32_MAX) {
            p->len += (uint32_t)len;
            return 0;
        }
    }
    if (d->n_runs == d->cap_runs) {
        size_t  cap = d->cap_runs ? d->cap_runs * 2 : 256;
        md_run *r   = realloc(d->runs, cap * sizeof *r);
        if (!r)
            return -1;
        d->runs     = r;
        d->cap_runs = cap;
    }
    d->runs[d->n_runs++] = (md_run){off, (uint32_t)len, (int16_t)role, link};
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
    if (doc_run(d, r->line_run0, off, n * (size_t)rep, role, link)) {
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
    if (d->n_lines == d->cap_lines) {
        int      cap = d->cap_lines ? d->cap_lines * 2 : 64;
        md_line *l   = realloc(d->lines, (size_t)cap * sizeof *l);
        if (!l) {
            r->err = d->oom = 1;
            return;
        }
        d->lines     = l;
        d->cap_lines = cap;
    }
    d->lines[d->n_lines++] = (md_line){r->line_run0, (int)(d->n_runs - r->line_run0), r->col};
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

static int st_add(styled *s, const char *p, size_t n, int role, int link) {
    if (!n)
        return 0;
    size_t off = s->t.n;
    if (txt_buf_add(&s->t, p, n))
        return -1;
    if (s->n_sp > s->sp0 && s->sp[s->n_sp - 1].role == role && s->sp[s->n_sp - 1].link == link) {
        s->sp[s->n_sp - 1].len += n;
        return 0;
    }
    if (s->n_sp == s->cap_sp) {
        size_t cap = s->cap_sp ? s->cap_sp * 2 : 64;
        span  *sp  = realloc(s->sp, cap * sizeof *sp);
        if (!sp)
            return -1;
        s->sp     = sp;
        s->cap_sp = cap;
    }
    s->sp[s->n_sp++] = (span){off, n, role, link};
    return 0;
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
            /* newlines (hard breaks) and other controls are not part of a drawn line */
            size_t s0 = a;
            for (size_t q = a; q <= b; q++)
                if (q == b || (unsigned char)text[q] < 0x20 || text[q] == 0x7f) {
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
        int       cap = k < 64 ? 64 : k;
        txt_line *l   = realloc(r->wl, (size_t)cap * sizeof *l);
        if (!l)
            return -1;
        r->wl     = l;
        r->cap_wl = cap;
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

/* The rows of one line of code s[0, ln): tabs expanded by column, control characters left out,
 * wrapped by columns (code keeps its spaces) inside the box of inner width iw, or bare. */
static void code_line(R *r, const char *s, size_t ln, int box, int iw) {
    txt_buf *ex = &r->ex;
    ex->n       = 0;
    int col     = 0;
    for (size_t q = 0; q < ln;) {
        int    w, f;
        size_t l = txt_cluster(s + q, ln - q, &w, &f);
        if (f & TXT_F_TAB) {
            int k = TXT_TAB - col % TXT_TAB;
            for (int j = 0; j < k; j++)
                txt_buf_add(ex, " ", 1);
            col += k;
        } else if (!(f & (TXT_F_CTRL | TXT_F_NL))) {
            txt_buf_add(ex, s + q, l);
            col += w;
        }
        q += l;
    }
    size_t q = 0;
    do {
        size_t take = txt_col_to_off(ex->p ? ex->p + q : "", ex->n - q, iw);
        if (take == 0 && q < ex->n) { /* one cluster wider than the box */
            int w, f;
            take = txt_cluster(ex->p + q, ex->n - q, &w, &f);
        }
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
static int code_box(int a, int *iw) {
    *iw = a >= 8 ? a - 4 : a;
    return a >= 8;
}

static void code_bottom(R *r, int a) {
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
    int a = avail(r), iw, box = code_box(a, &iw);
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
        code_line(r, s + p, ln, box, iw);
        if (!eol)
            break;
        p += ln + 1;
    }
    if (box)
        code_bottom(r, a);
}

/* ==== tables ================================================================ */

static void table_free(table *t) {
    if (!t)
        return;
    st_free(&t->st);
    free(t->cells);
    free(t);
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

/* Too narrow for columns: each row as "header: value" paragraphs. */
static void table_records(R *r, const table *t) {
    size_t i     = 0;
    int    first = 1;
    while (i < t->n_cells) {
        int row = t->cells[i].row;
        if (row < t->n_head) {
            i++;
            continue;
        }
        if (!first) {
            ln_begin(r);
            ln_rep(r, "─", avail(r) < 8 ? avail(r) : 8, THM_MD_BORDER);
            ln_end(r);
        }
        first = 0;
        for (; i < t->n_cells && t->cells[i].row == row && !r->err; i++) {
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

static void table_draw(R *r, table *t) {
    int nc = t->n_cols < 128 ? t->n_cols : 128;
    if (nc <= 0 || !t->n_cells)
        return;
    int nat[128] = {0}, w[128] = {0};
    for (size_t i = 0; i < t->n_cells; i++) {
        const cell *c = &t->cells[i];
        if (c->col < nc) {
            int cw = cell_width(t, c);
            if (cw > nat[c->col])
                nat[c->col] = cw;
        }
    }
    int a = avail(r), over = 3 * nc + 1, total = 0;
    for (int c = 0; c < nc; c++) {
        if (nat[c] < 1)
            nat[c] = 1;
        total += nat[c];
    }
    if (total + over <= a) {
        memcpy(w, nat, sizeof w);
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
        table_records(r, t);
        return;
    }
    table_rule(r, w, nc, "┌", "┬", "┐");
    size_t i = 0;
    while (i < t->n_cells && !r->err) {
        size_t j = i;
        while (j < t->n_cells && t->cells[j].row == t->cells[i].row)
            j++;
        table_row(r, t, &t->cells[i], (int)(j - i), w, nc);
        if (t->cells[i].row + 1 == t->n_head && j < t->n_cells)
            table_rule(r, w, nc, "├", "┼", "┤");
        i = j;
    }
    table_rule(r, w, nc, "└", "┴", "┘");
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
    styled *t = target(r);
    /* tabs become spaces and invalid UTF-8 becomes U+FFFD here, so that the bytes of two spans
     * can never join into one character when they are drawn as separate runs */
    size_t s0 = 0;
    for (size_t k = 0; k <= n && !r->err;) {
        utf8proc_int32_t cp = 0;
        utf8proc_ssize_t l =
            k < n ? utf8proc_iterate((const utf8proc_uint8_t *)s + k, (utf8proc_ssize_t)(n - k), &cp) : 0;
        if (k == n || l <= 0 || cp == '\t') {
            const char *rep = k == n ? "" : l <= 0 ? "\xEF\xBF\xBD" : " ";
            if (st_add(t, s + s0, k - s0, cur_role(r), r->link) ||
                st_add(t, rep, strlen(rep), cur_role(r), r->link))
                r->err = r->d->oom = 1;
            if (k == n)
                break;
            k += l <= 0 ? 1 : (size_t)l;
            s0 = k;
            continue;
        }
        k += (size_t)l;
    }
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

static int enter_block(MD_BLOCKTYPE type, void *detail, void *ud) {
    R *r = ud;
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
        if (t->n_cells == t->cap_cells) {
            size_t cap = t->cap_cells ? t->cap_cells * 2 : 32;
            cell  *c   = realloc(t->cells, cap * sizeof *c);
            if (!c) {
                r->err = r->d->oom = 1;
                break;
            }
            t->cells     = c;
            t->cap_cells = cap;
        }
        int col = 0;
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
        if (r->tb)
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
        md_doc *d = r->d;
        role      = THM_MD_LINK;
        if (r->span_depth == 0 || r->link < 0) {
            if (d->n_links == d->cap_links) {
                int      cap = d->cap_links ? d->cap_links * 2 : 16;
                md_link *l   = realloc(d->links, (size_t)cap * sizeof *l);
                if (!l) {
                    r->err = d->oom = 1;
                    return -1;
                }
                d->links     = l;
                d->cap_links = cap;
            }
            size_t off = d->text.n;
            if (txt_buf_add(&d->text, h->text ? h->text : "", h->size)) {
                r->err = d->oom = 1;
                return -1;
            }
            d->links[d->n_links] = (md_link){off, h->size};
            r->link              = d->n_links++;
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

/* The link text equals its URL (an autolink): nothing to add after it. */
static int link_is_text(R *r, const md_link *l) {
    styled *t = target(r);
    size_t  n = 0;
    for (size_t k = t->n_sp; k-- > 0 && t->sp[k].link == r->link;)
        n += t->sp[k].len;
    const char *u = r->d->text.p + l->off;
    return n >= l->len && !memcmp(t->t.p + t->t.n - l->len, u, l->len);
}

static int leave_span(MD_SPANTYPE type, void *detail, void *ud) {
    R *r = ud;
    (void)detail;
    if (r->span_depth > 0 && r->span_depth <= SPAN_MAX)
        r->n_roles--;
    r->span_depth--;
    if ((type == MD_SPAN_A || type == MD_SPAN_IMG) && r->link >= 0) {
        if (type == MD_SPAN_IMG)
            add_text(r, "]", 1);
        const md_link *l = &r->d->links[r->link];
        if (!(r->flags & MD_OSC8) && l->len && !link_is_text(r, l)) {
            /* no hyperlinks: the URL after the text */
            int     keep = r->link;
            styled *t    = target(r);
            r->link      = -1;
            if (st_add(t, " <", 2, THM_MD_URL, -1) ||
                st_add(t, r->d->text.p + r->d->links[keep].off, r->d->links[keep].len, THM_MD_URL, -1) ||
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

/* ==== public ================================================================ */

/* Render s[0..n) into d with the context r (its buffers kept for the next render). */
/* r made ready to render into d (its buffers emptied, kept). */
static void render_begin(R *r, md_doc *d, int width, int base, unsigned flags) {
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

static int render_with(R *r, md_doc *d, const char *s, size_t n, int width, int base, unsigned flags) {
    render_begin(r, d, width, base, flags);
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
    int rc = md_parse(s ? s : "", (MD_SIZE)n, &p, r);
    ln_end(r);
    return r->err || rc != 0 ? -1 : 0;
}

static R *ctx_new(void) {
    R *r = malloc(sizeof *r);
    if (r)
        memset(r, 0, offsetof(R, pfx));
    return r;
}

static void ctx_free(R *r) {
    if (!r)
        return;
    st_free(&r->in);
    free(r->code.p);
    free(r->lang.p);
    free(r->ex.p);
    free(r->wl);
    table_free(r->tb_keep);
    free(r);
}

int md_render(md_doc *d, const char *s, size_t n, int width, int base, unsigned flags) {
    R *r = ctx_new();
    if (!r) {
        d->oom = 1;
        return -1;
    }
    int rc = render_with(r, d, s, n, width, base, flags);
    ctx_free(r);
    return rc;
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
    if (n && (txt_buf_add(&d->text, s, n) || doc_run(d, run0, off, n, role, -1)))
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
    if (!st->ctx && !(st->ctx = ctx_new()))
        return d->oom = 1, -1;
    return render_with(st->ctx, d, s, n, st->width, st->role, flags);
}

/* ==== streaming an open code block ========================================== */

/* Whether s[0, n) holds a NUL or a CR (md4c's line ends and its U+FFFD differ from ours). */
static int has_cr_nul(const char *s, size_t n) {
    return memchr(s, '\r', n) || memchr(s, 0, n);
}

/* A line of a fenced code block as md4c gives it: its indentation as spaces (tab stops every 4
 * columns), then the rest as it is; its rows laid out. */
static void fc_code_line(R *r, const char *s, size_t ln, int box, int iw) {
    size_t k   = 0;
    int    col = 0;
    for (; k < ln && (s[k] == ' ' || s[k] == '\t'); k++)
        col = s[k] == ' ' ? col + 1 : (col + 4) / 4 * 4;
    r->code.n = 0;
    for (int i = 0; i < col; i++)
        txt_buf_add(&r->code, " ", 1);
    if (txt_buf_add(&r->code, s + k, ln - k))
        r->err = r->d->oom = 1;
    code_line(r, r->code.p, r->code.n, box, iw);
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
 * line and the bottom, which the next update takes back. Code lines are laid out one by one in
 * md_render too (code_line), so this is exact. 0 done, 1 not such a chunk (md4c renders it), -1
 * out of memory. */
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
        doc_cut(d, d->n_lines - 1 - code_box(st->width < 2 ? 2 : st->width, &iw)); /* the empty row, bottom */
        st->fc       = 1;
        st->fc_line  = body;
        st->fc_any   = 0;
        st->fc_lines = d->n_lines;
    }
    doc_cut(d, st->fc_lines); /* the partial line and the bottom of the last update */
    size_t v = st->done + view_end(c, n - st->done);
    R     *r = st->ctx;
    render_begin(r, d, st->width, st->role, f);
    int a = r->width, iw, box = code_box(a, &iw);
    for (const char *e; st->fc_line < v && (e = memchr(s + st->fc_line, '\n', v - st->fc_line));) {
        size_t ln = (size_t)(e - (s + st->fc_line));
        if (has_cr_nul(s + st->fc_line, ln))
            return st->fc = 0, st->fc_no = 1;
        fc_code_line(r, s + st->fc_line, ln, box, iw);
        st->fc_line += ln + 1;
        st->fc_any = 1;
    }
    st->fc_lines = d->n_lines;
    char ch;
    int  rest, fl = 0;
    if (v > st->fc_line) {
        if (has_cr_nul(s + st->fc_line, v - st->fc_line))
            return st->fc = 0, st->fc_no = 1;
        fl = fence_line(s + st->fc_line, v - st->fc_line, &ch, &rest);
        if (fl >= st->fence_n && ch == st->fence_ch && rest)
            v = st->fc_line; /* a closing fence, still without its newline */
    }
    if (v > st->fc_line || !st->fc_any)
        fc_code_line(r, s + st->fc_line, v - st->fc_line, box, iw);
    if (box)
        code_bottom(r, a);
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
    ctx_free(st->ctx);
    memset(st, 0, sizeof *st);
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
        return on == 1; /* 0 or 1; anything else: detected, as unset */
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
