/* md.h: Markdown to styled display lines (md4c parses, text.c measures), independent of curses.
 *
 * md_render() turns Markdown text into lines no wider than a given number of columns. A line
 * is a list of runs: bytes of UTF-8 text drawn in one theme role (theme.h), optionally part of a
 * link (the URL is kept for an OSC 8 hyperlink). The drawing code only places runs; everything
 * about Markdown lives here, so the tests check rendering without a terminal.
 *
 * What is drawn (md4c with tables, strikethrough, task lists and LaTeX math spans):
 *   headings          text in md-heading; a rule (━ level 1, ─ level 2) under levels 1-2
 *   emphasis, strong  md-em, md-strong; ~~strike~~ md-strike; `code` md-code; $math$ md-math
 *   code blocks       a box (┌─ lang ─┐ … └──┘) in md-border around code in the code role;
 *                     long lines wrap inside the box; tabs expand; narrow panes drop the box
 *   lists             •/◦/▪ bullets, "N." numbers, [ ]/[x] task boxes in md-list, hanging indents
 *   block quotes      "│ " in md-quote before every line
 *   tables            box characters, column widths by display width (CJK and emoji count 2);
 *                     too wide: columns shrink and cells wrap; too narrow even for that: each
 *                     row becomes "header: value" lines (never wider than the pane)
 *   links             text in md-link; URL as OSC 8 data (MD_OSC8) or shown after the text
 *   rules (---)       a line of ─ in md-border
 * Indentation is capped at half the width, so 10,000 nested lists still leave room for text.
 *
 * Streaming (md_stream): the text is cut into chunks at blank lines outside code fences that are
 * followed by a line starting at column 0. Finished chunks are rendered once and kept (also when
 * the text's buffer moves as it grows); only the open (last) chunk is rendered again as text
 * arrives. While streaming, an unclosed `code`, **strong** or ~~strike~~ in the open chunk is
 * closed for display, and a half-received table row and markers at the very end are held back,
 * so half-written constructs show styled rather than as raw markers.
 * (A link reference definition only applies within its chunk.)
 */
#pragma once
#include "text.h"
#include "theme.h"

#include <stddef.h>
#include <stdint.h>

typedef struct md_run {
    size_t   off; /* bytes [off, off + len) of md_doc.text */
    uint32_t len;
    int16_t  role; /* enum thm_role */
    int32_t  link; /* index into md_doc.links, -1 when none */
} md_run;

typedef struct md_line {
    size_t run0; /* runs [run0, run0 + n_runs) of md_doc.runs */
    int    n_runs;
    int    width; /* display columns (<= the width rendered at) */
} md_line;

typedef struct md_link {
    size_t off, len; /* the URL: bytes of md_doc.text */
} md_link;

/* Rendered lines. Zero-initialise; md_doc_free when done. */
typedef struct md_doc {
    txt_buf  text;
    md_run  *runs;
    size_t   n_runs, cap_runs;
    md_line *lines;
    int      n_lines, cap_lines;
    md_link *links;
    int      n_links, cap_links;
    int      oom; /* a line was lost for lack of memory */
} md_doc;

enum {
    MD_OSC8      = 1, /* links carry their URL for OSC 8 (else the URL is shown after the text) */
    MD_STREAMING = 2, /* the text is still arriving: close half-written inline constructs      */
    MD_CONT      = 4, /* the doc continues earlier lines: separate the first block from them    */
    MD_EXACT     = 8, /* md_stream_update: every open chunk through md4c, no shortcut (tests)  */
};

/* Render s[0..n) (any bytes; invalid UTF-8 is kept and drawn as U+FFFD) at `width` columns
 * (< 2 counts as 2), appending lines to d. base: role of body text. 0 ok; -1 out of memory
 * (d holds what was rendered). Time and memory are linear in n, whatever the nesting. */
int  md_render(md_doc *d, const char *s, size_t n, int width, int base, unsigned flags);
void md_doc_reset(md_doc *d); /* drop the lines, keep the memory */
void md_doc_free(md_doc *d);
/* The plain text of line i (runs concatenated) into out (replaced); for tests and copying. */
int md_line_text(const md_doc *d, int i, txt_buf *out);

/* Code blocks of s[0..n): returns how many there are; when 1 <= k <= that count, the text of
 * the k-th (1-based) is stored in out (replaced). -1 out of memory. */
int md_code_block(const char *s, size_t n, int k, txt_buf *out);

/* The open chunk a fast path of md_stream has looked at (md-stream.c fast_new): its state (the
 * path's int: open is its layout) and what it kept are for that chunk alone. */
typedef struct md_fast {
    size_t done; /* where that chunk starts ((size_t)-1: none yet)                */
    int    no;   /* it is not one for this path (for good: the chunk only grows)  */
} md_fast;

/* Incremental rendering of a growing text (one per streaming pane). Zero-initialise. */
typedef struct md_stream {
    const char     *base; /* the text last seen (a shorter or different text resets)        */
    size_t          len;
    int             width, role;
    unsigned        flags;
    size_t          done;  /* bytes [0, done) are in finished chunks, rendered into fin      */
    size_t          scan;  /* complete lines before scan were looked at for a chunk end     */
    int             fence; /* scan is inside a code fence of fence_n fence_ch characters     */
    char            fence_ch;
    int             fence_n;
    int             blank;     /* the line before scan was blank                                 */
    md_doc          fin, open; /* lines of the finished chunks; of the open chunk               */
    txt_buf         tmp;
    txt_buf         seen; /* a copy of the text's bytes [0, scan): a moved buffer is compared */
    struct md_rctx *ctx;  /* md.c's render context, its buffers kept from frame to frame */
    /* The open chunk as a plain paragraph (one source line without Markdown syntax, the usual
     * case of a long streamed paragraph): open was laid out here without md4c, exactly as
     * md_render lays it out, and each update wraps only from the start of its last line. */
    int     pl;      /* open is such a layout of the chunk pl_for.done                 */
    md_fast pl_for;  /* the chunk it was made for (no: not a plain paragraph)          */
    size_t  pl_scan; /* bytes [pl_for.done, pl_scan) are known to be plain             */
    size_t  pl_line; /* where open's last line starts                                    */
    /* The open chunk as a fenced code block still open (its first line a fence at column 0, the
     * usual case of a long streamed code block): open holds md4c's head of it and the rows of its
     * complete lines, laid out once each (fc_layout in md.c). */
    size_t  fence_at;   /* where the open fence's line starts (scan)                        */
    int     fc, fc_any; /* open is such a layout / a line is in                              */
    md_fast fc_for;     /* the chunk it was made for                                         */
    size_t  fc_line;    /* the next line to lay out                                          */
    int     fc_lines;   /* open's lines that stay (head and complete lines' rows)          */
    /* The partial last line (a long line still coming): the row of open it last ended with, which
     * the next update lays out again from byte fc_pl_off (column fc_pl_col) on, while the line
     * starting at fc_pl_at is still the partial one; fc_pl_line -1: from the line's start. */
    int    fc_pl_line, fc_pl_col;
    size_t fc_pl_at, fc_pl_off;
    size_t fc_scan; /* bytes before it are known to hold no CR or NUL                        */
    /* The open chunk as a table (its first two lines a table's header and delimiter row, the usual
     * case of a long streamed table; md-stream.c tb_layout): md4c collects each complete row once,
     * behind a copy of those two lines, into the kept cells of tbs; open keeps the rows laid out and
     * an update lays out only the new rows, the partial last one and the bottom border, unless a
     * column's width changed (then every row again, without md4c). */
    struct md_tbs *tbs;
    md_fast        tb_for;            /* the chunk it was made for                                  */
    int            tb;                /* open is such a layout                                      */
    long tb_rows, tb_laid, tb_relaid; /* rows collected by md4c, rows laid out, layouts of all rows */
    /* The open chunk as a tight list (its first line an item at column 0, the usual case of a long
     * streamed list; md-stream.c li_layout): md4c renders each item alone, once the line of the next
     * item is complete, and open keeps its lines; an update renders only the last item again. */
    struct md_lis *lis;
    md_fast        li_for;   /* the chunk it was made for                                      */
    int            li;       /* open is such a layout                                          */
    long           li_bytes; /* bytes md4c rendered for it, the last item's each update (tests) */
    long           li_laid;  /* bytes of a long open item wrapped without md4c (tests)        */
    /* The open chunk as a block quote (its first line starts with '>' at column 0, the usual case of
     * a long quoted answer; md-stream.c qt_layout): cut into segments at blank quoted lines followed
     * by a paragraph, each rendered once when the next one starts; the open segment is a plain
     * paragraph laid out from its last row on, or rendered again by md4c each update. */
    struct md_qts *qts;
    md_fast        qt_for;   /* the chunk it was made for                                     */
    int            qt;       /* open is such a layout                                         */
    long           qt_bytes; /* bytes md4c rendered for it (tests)                             */
    long           qt_laid;  /* bytes of its paragraphs wrapped without md4c (tests)           */
    /* The text the open chunk was last rendered from by md4c (held-back bytes change nothing) */
    txt_buf  last;
    int      last_ok;
    size_t   last_done;
    unsigned last_f;
    long     n_fin; /* chunks rendered into fin (tests: each once, however the buffer moves) */
} md_stream;

/* Bring st up to date with s[0..n) at width columns. 0 ok, -1 out of memory. The lines to show
 * are st->fin's followed by st->open's. */
int  md_stream_update(md_stream *st, const char *s, size_t n, int width, int role, unsigned flags);
void md_stream_free(md_stream *st);

/* ==== terminal escapes (no curses) ========================================== */

/* The OSC 52 sequence that puts s[0..n) on the clipboard, base64-encoded, wrapped for the
 * multiplexer: MD_TERM_TMUX (DCS passthrough), MD_TERM_SCREEN (DCS, in 76-byte pieces) or plain.
 * Appended to out. -1 out of memory. */
enum { MD_TERM_PLAIN = 0, MD_TERM_TMUX, MD_TERM_SCREEN };
int md_osc52(txt_buf *out, const char *s, size_t n, int mux);
/* Which multiplexer the environment says we are in (TMUX, STY/TERM=screen*). */
int md_term_mux(void);
/* Whether to send OSC 8 hyperlinks: K3_HYPERLINKS=1/0 decides; else on for terminals known to
 * support them (VTE >= 0.50, kitty, WezTerm, iTerm2, foot, VS Code) outside a multiplexer. */
int md_term_osc8(void);
/* Base64 (RFC 4648, padded) of s[0..n) appended to out. */
int md_base64(txt_buf *out, const char *s, size_t n);
