/* emoji.h: multi-emoji grapheme clusters on a curses screen, the parts without curses.
 *
 * A curses cell holds one spacing character plus non-spacing ones, so a cluster of several
 * emoji (a ZWJ sequence such as a family, a flag = two regional indicators, an emoji with a
 * skin-tone modifier) cannot be given to curses whole. tui-emoji.c gives curses a stand-in of
 * the cluster's width (text.c: 2 columns) and, where the terminal draws such clusters as one
 * glyph, writes the whole cluster over the stand-in after each doupdate(). This file has the
 * rules: which clusters need it (emj_joins), the stand-in (emj_fallback), what the terminal can
 * do (setting K3_EMOJI, and the width probe's replies), and the list of clusters on the screen
 * (emj_set): which survive a frame, which rows must be repainted, the bytes to write.
 */
#pragma once
#include "text.h"

#include <stddef.h>
#include <wchar.h>

/* What a cluster needs from the terminal to be drawn whole (bits). */
enum {
    EMJ_ZWJ  = 1, /* a sequence joined by U+200D (or an emoji tag sequence)  */
    EMJ_FLAG = 2, /* a pair of regional indicators                            */
    EMJ_MOD  = 4, /* an emoji with a skin-tone modifier (U+1F3FB..U+1F3FF)    */
    EMJ_ALL  = 7
};

/* The EMJ_* bits of the cluster s[0..n) (one cluster, as txt_cluster cuts it): 0 when curses
 * can hold it in one cell (one spacing character, the rest non-spacing). */
int emj_joins(const char *s, size_t n);

/* The stand-in given to curses for a joining cluster, as the characters of one cell (first
 * wide) or two narrow cells: a flag becomes its two region letters ("FR"), every other
 * cluster its first emoji with the non-spacing characters that follow it (a skin tone and
 * later emoji are left out). Writes up to max - 1 characters and a 0 to out; returns the
 * count, and in *cells 1 when out is one cell, 2 when it is two narrow cells. */
int emj_fallback(const char *s, size_t n, wchar_t *out, int max, int *cells);

/* How the terminal draws joining clusters, from the setting K3_EMOJI (NULL or "" or "auto":
 * decided by TERM and the probe) and TERM: EMJ_MODE_WHOLE (setting "whole": trust the
 * terminal with every kind), EMJ_MODE_FALLBACK (setting "fallback", or a terminal known to
 * have no emoji glyphs: the linux console) or EMJ_MODE_PROBE (measure it). -1 for any other
 * setting (the caller reports it). */
enum { EMJ_MODE_FALLBACK = 0, EMJ_MODE_WHOLE = 1, EMJ_MODE_PROBE = 2 };
int emj_mode(const char *setting, const char *term);

/* The probe: for each kind (EMJ_ZWJ, EMJ_FLAG, EMJ_MOD, in that order) a sample cluster is
 * written at the top-left cell and the cursor position asked for (ESC [ 6 n), then the same for
 * a text-default character with VS16 (U+2764 U+FE0F, sample EMJ_PROBE_VS16: how wide the
 * terminal draws it, txt_vs16) and for a wide emoji with VS15 (U+231A U+FE0E, sample
 * EMJ_PROBE_VS15: 1 column in kitty, 2 in most terminals, txt_vs15); a device attributes request
 * (ESC [ c) ends the list, since almost every terminal answers it. */
#define EMJ_PROBE_N 5
#define EMJ_PROBE_VS16 3
#define EMJ_PROBE_VS15 4
/* Request bytes for the whole probe (into out, 0 or -1 on memory). */
int emj_probe_request(txt_buf *out);
/* Scan terminal input r[0..n): cursor position replies ESC [ ROW ; COL R are stored in order
 * as column widths (COL - 1) into widths[*n_w] (up to EMJ_PROBE_N); the device attributes
 * reply ESC [ ? ... c sets *done. Bytes that are neither (keys typed meanwhile) are copied to
 * other (*n_other, up to max_other). An incomplete reply at the end is left: returns the bytes
 * consumed. */
size_t emj_probe_scan(const char *r, size_t n, int *widths, int *n_w, int *done, char *other, size_t *n_other,
                      size_t max_other);
/* The EMJ_* kinds the terminal draws whole: those whose sample measured 2 columns or less
 * (it then fits the 2 columns reserved for it). */
int emj_probe_result(const int *widths, int n_w);
/* The columns the terminal gave the VS16 sample: 1 or 2, or 0 (no reply, or another width). */
int emj_probe_vs16(const int *widths, int n_w);
/* The same for the VS15 sample. */
int emj_probe_vs15(const int *widths, int n_w);

/* An SGR sequence for a cell's look: colors (-1 = the terminal's default; 0..7, 8..15, or a
 * 256-color index; others are left at the default) and EMJ_A_* attributes. Starts with a reset (ESC [ 0 m).
 */
enum {
    EMJ_A_BOLD      = 1,
    EMJ_A_DIM       = 2,
    EMJ_A_ITALIC    = 4,
    EMJ_A_UNDERLINE = 8,
    EMJ_A_REVERSE   = 16,
    EMJ_A_BLINK     = 32
};
void emj_sgr(char *out, size_t n, int fg, int bg, int attrs);

/* ==== the clusters on the screen ============================================ */

/* One cluster drawn whole over its stand-in: at (y, x), w columns, bytes = SGR + cluster. */
typedef struct emj_rec {
    int y, x, w;
    int gen;    /* the frame that drew it */
    int stand;  /* the stand-in's first character (the caller's check that curses' cell
                   still holds it) */
    int    seq; /* order of the notes (the later at one place wins) */
    size_t len;
    char   bytes[160];
} emj_rec;

typedef struct emj_set {
    emj_rec *r; /* (n) */
    int      n, cap;
    int      gen; /* the frame being drawn */
    int      seq;
} emj_set;

/* Note a cluster drawn at (y, x) in this frame over a stand-in starting with character stand
 * (a later note at the same place wins); 0, or -1 (memory, or sgr + cluster longer than a
 * record holds: then it is not drawn whole). */
int emj_set_add(emj_set *s, int y, int x, int w, int stand, const char *sgr, const char *c, size_t n);
/* Drop record k of this frame (its cell was drawn over after it): emj_set_frame then treats
 * its place as not drawn whole. */
void emj_set_drop(emj_set *s, int k);
/* Rows [y0, y0 + h) were scrolled up by k rows (down for k < 0) in curses' window, which moved
 * the stand-ins: every record there is noted again, k rows up, as drawn in this frame (records
 * of earlier frames also stay at their old place, where emj_set_frame judges them as usual;
 * one drawn earlier in this frame moves, or is dropped when it leaves the region). 0, or -1
 * (memory). */
int emj_set_scroll(emj_set *s, int y0, int h, int k);
/* End of a frame's drawing, before curses' update. touched[y] (rows entries) says which rows
 * this frame drew: every earlier record on such a row is dropped (its row was drawn again;
 * if the cluster is still there it was noted again), so is every record outside rows x cols.
 * A dropped record whose place did not get the same cluster back leaves the whole cluster on
 * the terminal while curses believes its stand-in is there: its row is set in repaint[y]
 * (rows entries; the caller makes curses repaint it). Returns the number of rows set. */
int emj_set_frame(emj_set *s, const unsigned char *touched, int rows, int cols, unsigned char *repaint);
/* After curses' update: the bytes that write every record on a row in touched[] (or every
 * record, touched == NULL) over its stand-in, between a cursor save and restore (ESC 7 ...
 * ESC 8, which also restore the attributes curses set). Starts the next frame. 0 or -1. */
int  emj_set_output(emj_set *s, const unsigned char *touched, int rows, txt_buf *out);
void emj_set_clear(emj_set *s); /* forget every record (the screen was cleared) */
void emj_set_free(emj_set *s);
