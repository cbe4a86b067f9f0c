/* md-impl.h: internals of the Markdown renderer shared by md.c (the md4c walk and the layout)
 * and md-stream.c (streaming: chunks, the plain-paragraph and open-code-block fast paths).
 * Never included outside ui/common/md*.c; the public interface is md.h.
 */
#pragma once
#include "md.h"

#include <stddef.h>

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
    int    coll_tables, coll_bad; /* MD_COLLECT: tables entered; another block was */
    /* the shape of the document at its top: blocks (top_n, the last one's type), items of a list
     * there (top_li) and an ordered one's start number (md-stream.c checks a list item with them) */
    int      md_depth, top_n, top_type, top_li; /* top_type: MD_TOP_* */
    unsigned top_start;

    /* not cleared: buffers kept between the renders of a stream (emptied by md_render_begin), so a
     * streaming frame allocates nothing once they have grown */
    styled    in;
    txt_buf   code, lang, ex; /* ex: a code line with its tabs expanded */
    txt_buf   src;            /* the text md4c parses: a copy that ends in a NUL            */
    table    *tb_keep;
    txt_line *wl; /* lines of a wrapped paragraph (wrap) */
    int       cap_wl;

    /* last, and not cleared (57 KB): each entry is written before it is read */
    piece pfx[PFX_MAX];     /* [0, n_pfx): written by push_piece                  */
    int   pushed[PFX_MAX];  /* per container level: it added a piece (push_piece) */
    int   ol_next[PFX_MAX]; /* per list level: next number, -1 bullets (list entry) */
} R;

/* ---- md.c, used by md-stream.c ---- */

/* md_render_with flag (beside md.h's): collect the cells of a table into tb_keep and draw nothing;
 * coll_tables and coll_bad say whether the text was one table and nothing else. */
#define MD_COLLECT 0x100

/* A link to URL u[0, n) in d (its text, then the link): its index, -1 out of memory. */
int md_doc_link(md_doc *d, const char *u, size_t n);
/* Append the rows from row `from` on of src (collected from src_doc, whose links its spans name)
 * to dst as its next rows; the URLs of their links go into url (links renumbered). 0, or -1 out
 * of memory. */
int md_table_add_rows(table *dst, const table *src, int from, const md_doc *src_doc, md_doc *url);
/* Free what t holds (t itself is not freed; it is left empty). */
void md_table_release(table *t);
/* The kind of a top-level block (R.top_type). */
enum { MD_TOP_UL = 1, MD_TOP_OL, MD_TOP_OTHER };
/* How a table is drawn at a width (md_table_widths). */
enum { MD_TB_NONE, MD_TB_BOX, MD_TB_RECORDS };
/* nat[c] raised to the display width of each cell [c0, c1) of column c (nat holds 128 ints). */
void md_table_nat(const table *t, size_t c0, size_t c1, int *nat);
/* The column widths w[128] for natural widths nat at r's width, and how the table is drawn. */
int md_table_widths(const R *r, const table *t, const int *nat, int *w);
/* Draw the rows whose cells are [c0, c1) of t with widths w (mode from md_table_widths): with
 * top, the blank line before a block and the top border first; with bottom, the bottom border
 * after. The rule under the header comes before the first body row. md_table_part of all cells
 * with top and bottom is what md_render draws for the table. */
void md_table_part(R *r, const table *t, size_t c0, size_t c1, const int *w, int mode, int top, int bottom);

/* A run of the line whose runs start at run0 (merged with the previous one when the style is
 * the same). 0, or -1 out of memory. */
int md_doc_run(md_doc *d, size_t run0, size_t off, size_t len, int role, int link);
/* Line l appended to d's lines. 0, or -1 out of memory. */
int md_doc_line(md_doc *d, md_line l);
/* The rows of one line of code s[0, ln) inside a box of inner width iw, or bare. */
void md_code_line(R *r, const char *s, size_t ln, int box, int iw);
/* The last row md_code_rows laid out: open's line it is (-1: none that can be resumed), the byte
 * of s it starts at and that byte's column in the line. */
typedef struct md_code_last {
    int    line;
    size_t off;
    int    col;
} md_code_last;
/* md_code_line for the rest s[0, ln) of a line whose first col0 columns were laid out already
 * (rows of earlier calls); with last != NULL, where its last row starts, so that a stream can lay
 * out only that row and what follows when more of the line comes. */
void md_code_rows(R *r, const char *s, size_t ln, int box, int iw, int col0, md_code_last *last);
/* The box of a code block in a columns: whether there is one, and its inner width. */
int  md_code_box(int a, int *iw);
void md_code_bottom(R *r, int a);
/* Rows of a plain paragraph t[0, n) inside a top-level block quote, or with t NULL the quote's
 * blank line between blocks (see md.c); *last: where the last row starts in t. */
void md_quote_rows(R *r, int start, const char *t, size_t n, size_t *last);
/* r made ready to render into d (its buffers emptied, kept). */
void md_render_begin(R *r, md_doc *d, int width, int base, unsigned flags);
/* Render s[0..n) into d with the context r (its buffers kept for the next render). */
int md_render_with(R *r, md_doc *d, const char *s, size_t n, int width, int base, unsigned flags);
/* A render context (NULL out of memory), freed with md_ctx_free (NULL is fine). */
R   *md_ctx_new(void);
void md_ctx_free(R *r);
