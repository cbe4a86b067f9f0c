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

/* One fast path of md_stream (md-stream.c) and the open chunk: the chunk it last looked at, whether
 * that chunk was ruled out, whether its state was set up for it, and whether open is its layout. */
typedef struct md_fast {
    size_t done;  /* where that chunk starts ((size_t)-1: none yet)                     */
    int    no;    /* it is not one for this path (for good: the chunk only grows)     */
    int    ready; /* the path's state (md-stream.c md_paths) was set up for it        */
    int    on;    /* open is the path's layout of it                                  */
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
    size_t          fence_at;  /* where the open fence's line starts                             */
    int             blank;     /* the line before scan was blank                                 */
    md_doc          fin, open; /* lines of the finished chunks; of the open chunk               */
    txt_buf         tmp;
    txt_buf         seen; /* a copy of the text's bytes [0, scan): a moved buffer is compared */
    struct md_rctx *ctx;  /* md.c's render context, its buffers kept from frame to frame */
    /* The fast paths (md-stream.c DESIGN), tried in this order on the open chunk while it streams:
     * a plain paragraph, a fenced code block still open, a table, a tight list, a block quote.
     * Each lays out open without md4c's render of the whole chunk; their states are in paths. */
    md_fast          pl, fc, tb, li, qt;
    struct md_paths *paths;
    /* What the fast paths did (tests) */
    int  fc_part;                     /* open ends with a partial code line, laid out from its last row */
    long tb_rows, tb_laid, tb_relaid; /* rows collected by md4c, rows laid out, layouts of all rows    */
    long li_bytes;                    /* bytes md4c rendered for a list, the last item's each update  */
    long li_laid;                     /* bytes of a long open item wrapped without md4c               */
    long qt_bytes;                    /* bytes md4c rendered for a quote                              */
    long qt_laid;                     /* bytes of its paragraphs wrapped without md4c                 */
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
