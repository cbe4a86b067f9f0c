/* text.h: display width and word wrapping of UTF-8 text by terminal columns (utf8proc).
 *
 * Text is measured in grapheme clusters (utf8proc's extended grapheme rules): a base character
 * with its combining marks, an emoji ZWJ sequence, a flag (regional indicator pair) or an emoji
 * with a variation selector or skin-tone modifier is one cluster; outside emoji, a cluster ends
 * before a character that takes a column (a spacing mark, the letter after a prepended mark such as
 * U+0600), as a terminal cell holds one such character. Widths: East Asian wide and
 * fullwidth characters 2, emoji clusters 2, combining marks 0 (they join their base), spacing marks
 * and prepended marks 1, a control character the width of its escape (drawn as txt_escape
 * shows it, \x1B or \u009B, as line mode and the export show it), invalid bytes 1 (drawn as
 * U+FFFD), a tab advances to the next
 * multiple of TXT_TAB columns. Wrapping breaks at spaces, after wide (CJK) characters, and inside
 * a word only when the word alone is wider than the line; never inside a cluster.
 */
#pragma once
#include "k3.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TXT_TAB 8

/* Flags of one cluster. */
enum {
    TXT_F_TAB     = 1,
    TXT_F_NL      = 2,
    TXT_F_SPACE   = 4,
    TXT_F_INVALID = 8,
    TXT_F_CTRL    = 16,
    TXT_F_EMOJI   = 32,
    TXT_F_NARROW  = 64 /* a wide emoji in text presentation counted 1 column (txt_vs15) */
};

/* Measure the cluster at s (n > 0 bytes available): returns its byte length (>= 1), stores its
 * width (tabs: 0, the caller expands them by column) and TXT_F_* flags. */
size_t txt_cluster(const char *s, size_t n, int *width, int *flags);

/* Columns of a text-default character made an emoji by U+FE0F (VARIATION SELECTOR-16, as in
 * "\u2764\uFE0F"): 2 (the default; kitty, wezterm, foot, iTerm2) or 1 (tmux 3.3, xterm, VTE:
 * the terminal keeps the base character's cell). Process-wide: the terminal UI sets it from its
 * width probe (tui-emoji.c), so layout, cursor and drawing count such clusters as the terminal
 * draws them. txt_vs16_set takes 1 or 2 (others are ignored). */
void txt_vs16_set(int cols);
int  txt_vs16(void);
/* Columns of an emoji that is wide by default in text presentation, U+FE0E (VARIATION
 * SELECTOR-15) after it, as in "\u231A\uFE0E": 2 (the default) or 1. Unicode's text presentation
 * is a one-column glyph, but xterm, VTE, Konsole, Alacritty, st, mintty, Windows Terminal,
 * iTerm2, Terminal.app and tmux keep the base character's two columns (a selector changes no
 * width there); kitty, and WezTerm with unicode_version 14 or later, draw it in one. So 2
 * unless the width probe (tui-emoji.c) saw the terminal take one column: then such a cluster
 * counts 1 (TXT_F_NARROW) and the full-screen chat writes it over a one-column stand-in, as
 * curses' wcwidth gives the base 2. txt_vs15_set takes 1 or 2 (others are ignored). */
void txt_vs15_set(int cols);
int  txt_vs15(void);

/* Display width of s[0..n) starting at column col0 (tabs depend on the column). */
int txt_width(const char *s, size_t n, int col0);

/* Bytes of s[0..n) that end on a complete UTF-8 sequence: an incomplete sequence at the very end
 * (a stream cut inside a character) is held back; invalid bytes elsewhere count as complete. */
size_t txt_complete(const char *s, size_t n);

/* One wrapped display line: bytes [off, off + len) of the source, width columns. */
typedef struct txt_line {
    size_t off, len;
    int    width;
} txt_line;

/* s (a word the user typed, quoted in a message) into buf (n >= 4 bytes): whole when it fits,
 * else its first bytes cut back to a character boundary and "…" (no half of a UTF-8 character
 * reaches the message as U+FFFD). Returns buf. */
const char *txt_clip(char *buf, size_t n, const char *s);

/* Wrap s[0..n) at cols columns (cols >= 1). '\n' ends a line. Returns the number of lines
 * (>= 1 for any input, an empty text is one empty line) and, when out != NULL, stores up to
 * max lines. */
int txt_wrap(const char *s, size_t n, int cols, txt_line *out, int max);

/* The hanging indent of a line s[0..n) laid out in two columns ("  /cmd ARG   what it does", the
 * /help and /stats tables): the column where its second column starts (after the first run of
 * two spaces past its indent), or, when that is more than half of w columns, its own indent
 * plus 2 (0 when that is too). 0 for other lines (no indent, no two-space gap). The full-screen
 * chat and line mode wrap such a line's further rows under that column. */
int txt_hang(const char *s, size_t n, int w);

/* s (lines) onto f at cols columns (cols >= 1), each line wrapped, a two-column line's further
 * rows under its second column (txt_hang), through txt_term_printf. */
void txt_print_wrapped(FILE *f, const char *s, int cols);

/* Byte offset in s[0..n) of the cluster that covers display column col (or n). */
size_t txt_col_to_off(const char *s, size_t n, int col);

/* Cluster boundaries in a code point array (libedit's wchar_t line), by the same rules:
 * txt_wcluster_next gives the index after the cluster starting at i (i < n), and
 * txt_wcluster_prev the start of the cluster ending at i (0 < i <= n; 0 for i = 0). */
size_t txt_wcluster_next(const wchar_t *w, size_t n, size_t i);
size_t txt_wcluster_prev(const wchar_t *w, size_t n, size_t i);

/* The growable byte buffer of the engine's public header (k3_buf, k3.h): zero-initialise it,
 * free(b.p) when done; txt_buf_add appends n bytes of s, -1 when memory runs out. */
typedef k3_buf txt_buf;
#define txt_buf_add k3_buf_add

/* Append s[0..n) (one line: a model's name, a path, a URL) to out in at most cols columns: as
 * it is when it fits, else its first and last characters around a "\u2026" (…), cut at
 * cluster boundaries by display width (never inside a UTF-8 character or a cluster), the end
 * given the larger half (where two long ids or paths differ). Returns the width appended, -1
 * out of memory. */
int txt_fit(txt_buf *out, const char *s, size_t n, int cols);

/* ==== outside text on a terminal ==============================================================
 * Text that comes from the model, a server or a file may hold terminal commands (OSC 52 writes
 * the clipboard, OSC 0 the title, CSI the colours and the cursor). Every front end that prints
 * such text to a stream goes through txt_term_put (the answer and reasoning of line mode and
 * --prompt: on a terminal, every control character but \n and \t is shown as an escape; the
 * answer into a pipe or a file goes out as it is, the data a script asked for, the reasoning on
 * stderr is escaped wherever it goes) or txt_term_printf
 * (a message that quotes such text, an error naming a file's line, a log line: escaped wherever
 * it goes, as a log file or a pipe into cat reaches a terminal too). The full-screen interface
 * draws a control character as its escape too (tui-draw.c, txt_ctrl_shown; the Markdown lines
 * carry the escape's text, md.c), in the columns txt_cluster gives it; its notices (errors,
 * information) and the names and ids of tool calls and results are escaped before. */

/* The control characters of outside text and their escapes are the engine's (k3.h, esc.c), so
 * that the Markdown export shows them as the terminal front ends do: txt_ctrl_cp is
 * k3_ctrl_cp (C0, DEL, C1, the bidi controls and line separators; txt_cluster flags them
 * TXT_F_CTRL, the full-screen chat shows their escapes, the server's log escapes them), txt_escape
 * is k3_escape (\xHH, \u00HH, \uHHHH; with a txt_esc, a character cut between two pieces is
 * held and completed by the next call). */
#define txt_ctrl_cp k3_ctrl_cp
typedef k3_esc txt_esc;
#define txt_escape k3_escape

/* The escape of the control cluster s[0..n) (txt_cluster flagged it TXT_F_CTRL) in out (at
 * least 8 bytes, NUL-terminated): "\x1B" or "\u202E", as txt_escape writes it; its length,
 * which is the cluster's width. */
int txt_ctrl_shown(const char *s, size_t n, char *out);

/* Write s[0..n) to f: through txt_escape when f is a terminal or stderr, as it is otherwise
 * (standard output into a pipe or a file: the data a script asked for). */
void txt_term_put(FILE *f, txt_esc *st, const char *s, size_t n);
/* The end of a streamed text: bytes st still holds go out (escaped on a terminal). */
void txt_term_end(FILE *f, txt_esc *st);
/* The full-screen chat writes a few things around curses, straight to the terminal (OSC 8
 * links, tui-md.c). Text it writes so is what curses would draw of it: txt_term_drawn appends
 * s[0..n) with every control character (txt_ctrl_cp) as its escape (txt_ctrl_shown), \n and \t
 * left out, and each byte that is not UTF-8 as U+FFFD. A URL goes as an OSC 8 target:
 * txt_term_uri appends s[0..n) with every byte outside 0x21..0x7E percent-encoded (%1B, %C2%9C),
 * so neither ESC, BEL nor a C1 string terminator can end the sequence early. Both -1 out of
 * memory. */
int txt_term_drawn(txt_buf *out, const char *s, size_t n);
/* Text as the full-screen chat shows it, for the wrap: s[0..n) appended to out with every
 * control character (txt_ctrl_cp) as its escape's text (txt_ctrl_shown), \n, \t and the other
 * bytes as they are. Plain text is expanded so before txt_wrap, as md.c does for Markdown: the
 * wrap then counts an escape as the characters it is and breaks inside it where the line is
 * narrower (a control wrapped raw is one cluster, its escape cut at the line's end when drawn).
 * -1 out of memory. */
int txt_shown(txt_buf *out, const char *s, size_t n);
/* As txt_shown, for text drawn in styled runs (md.c): \t as a space and each byte that is not
 * UTF-8 as U+FFFD, so the bytes of two runs can never join into one character when drawn apart;
 * \n kept (a hard break). -1 out of memory. */
int txt_shown_runs(txt_buf *out, const char *s, size_t n);
int txt_term_uri(txt_buf *out, const char *s, size_t n);
/* fprintf(f, fmt, ...) with the whole formatted text through txt_escape, on a terminal or not:
 * for messages that quote outside text (a server's error, a file's line). Returns what fprintf
 * would, or -1. */
int txt_term_printf(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The user's locale (LANG, LC_*) for characters, their widths and collation, with LC_NUMERIC
 * kept "C": numbers in commands, config.json, JSON and transcripts are read (strtod) and written
 * (printf) with a dot. Under de_DE.UTF-8, `/temp 0.5` read 0 and a config.json's 2.827 read 2.
 * Characters are UTF-8 whatever the locale: the model's text, transcripts and what is drawn are
 * UTF-8, so a locale whose characters are not (LANG=C, POSIX, a legacy charset; most often a
 * UTF-8 terminal reached without LANG set) gets LC_CTYPE C.UTF-8. Under LANG=C the line editor
 * dropped every character typed that was not ASCII and curses counted none of the UTF-8 it drew
 * (the status bar kept stale characters). Returns 0; 1 when LC_CTYPE was changed so, -1 when no
 * UTF-8 locale is installed; either way note[0..n) gets a line saying so for the user. */
int txt_locale(char *note, size_t n);
struct option;
/* What getopt_long (run with opterr = 0 and an optstring that starts with ':') refused, said
 * through txt_term_printf (glibc's own messages quote the argument raw): c is its return, ':'
 * for a missing value ("PROG: --bits needs a value"), '?' for an unknown option ("PROG: unknown
 * option '--frob'") or a value given to a switch of lo ("PROG: --quiet takes no value"); PROG
 * is argv[0]'s last component. */
void txt_getopt_error(FILE *f, int c, char *const argv[], const struct option *lo);
