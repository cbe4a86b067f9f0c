/* test-ui-emoji.c: multi-emoji clusters (ui/tui/emoji.c): which clusters curses cannot hold, their
 * stand-ins, the K3_EMOJI setting, the terminal probe's replies, SGR, and the list of clusters
 * drawn whole over a frame (what survives, which rows are repainted, the bytes written). */
#include "emoji.h"
#include "test.h"

#include <locale.h>
#include <stdlib.h>
#include <string.h>

#define FAM "\U0001F469\u200D\U0001F469\u200D\U0001F467" /* woman ZWJ woman ZWJ girl */
#define FLAG "\U0001F1EB\U0001F1F7"                      /* FR */
#define SKIN "\U0001F44D\U0001F3FD"                      /* thumbs up, medium skin tone */
#define CODER "\U0001F469\U0001F3FD\u200D\U0001F4BB"     /* woman, skin tone, ZWJ laptop */
#define KEYC "1\uFE0F\u20E3"                             /* keycap 1 */
#define HEART "\u2764\uFE0F"                             /* heart + VS16 */
#define ENG "\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F" /* England */

static int J(const char *s) {
    return emj_joins(s, strlen(s));
}

static void test_joins(void) {
    T_CHECK(J(FAM) == EMJ_ZWJ, "a ZWJ family needs ZWJ joining (got %d)", J(FAM));
    T_CHECK(J(FLAG) == EMJ_FLAG, "a flag needs regional-indicator pairs (got %d)", J(FLAG));
    T_CHECK(J(SKIN) == EMJ_MOD, "a skin-toned emoji needs modifiers (got %d)", J(SKIN));
    T_CHECK(J(CODER) == (EMJ_ZWJ | EMJ_MOD), "a skin-toned ZWJ sequence needs both (got %d)", J(CODER));
    T_CHECK(J(ENG) == EMJ_ZWJ, "a tag sequence (England) is a joined sequence (got %d)", J(ENG));
    T_CHECK(J(KEYC) == 0, "a keycap fits one curses cell (base + non-spacing) (got %d)", J(KEYC));
    T_CHECK(J(HEART) == 0, "an emoji with VS16 fits one cell (got %d)", J(HEART));
    T_CHECK(J("e\u0301") == 0 && J("a") == 0 && J("\U0001F600") == 0,
            "letters, accents and lone emoji fit one cell");
    T_CHECK(J("\U0001F469\u200D") == 0, "a trailing ZWJ joins nothing (got %d)", J("\U0001F469\u200D"));
}

static void test_fallback(void) {
    wchar_t w[8];
    int     cells, n = emj_fallback(FLAG, strlen(FLAG), w, 8, &cells);
    T_CHECK(n == 2 && cells == 2 && w[0] == L'F' && w[1] == L'R' && w[2] == 0,
            "a flag stands in as its letters FR");
    n = emj_fallback(FAM, strlen(FAM), w, 8, &cells);
    T_CHECK(n == 1 && cells == 1 && w[0] == 0x1F469, "a family stands in as its first emoji (n %d)", n);
    n = emj_fallback(SKIN, strlen(SKIN), w, 8, &cells);
    T_CHECK(n == 1 && w[0] == 0x1F44D, "a skin-toned emoji stands in without its modifier (n %d)", n);
    const char *rb = "\U0001F3F3\uFE0F\u200D\U0001F308"; /* rainbow flag */
    n              = emj_fallback(rb, strlen(rb), w, 8, &cells);
    T_CHECK(n == 2 && w[0] == 0x1F3F3 && w[1] == 0xFE0F && cells == 1,
            "the rainbow flag keeps its VS16, not the ZWJ (n %d)", n);
    n = emj_fallback(ENG, strlen(ENG), w, 8, &cells);
    T_CHECK(n == 1 && w[0] == 0x1F3F4, "a tag sequence stands in as its black flag (n %d)", n);
    n = emj_fallback(FAM, strlen(FAM), w, 2, &cells);
    T_CHECK(n == 0 && w[0] == 0, "no room: an empty stand-in, no overflow");
}

static void test_mode(void) {
    T_CHECK(emj_mode(NULL, "xterm-256color") == EMJ_MODE_PROBE, "unset: measured");
    T_CHECK(emj_mode("auto", "xterm") == EMJ_MODE_PROBE && emj_mode("", "xterm") == EMJ_MODE_PROBE,
            "auto or empty: measured");
    T_CHECK(emj_mode(NULL, "linux") == EMJ_MODE_FALLBACK, "the Linux console: stand-ins");
    T_CHECK(emj_mode("whole", "linux") == EMJ_MODE_WHOLE, "whole overrides TERM");
    T_CHECK(emj_mode("fallback", "xterm-kitty") == EMJ_MODE_FALLBACK, "fallback overrides TERM");
    T_CHECK(emj_mode("yes", "xterm") == -1 && emj_mode("WHOLE", "xterm") == -1, "other settings are refused");
}

static void test_probe(void) {
    txt_buf req = {0};
    T_CHECK(emj_probe_request(&req) == 0 && req.n > 0, "the probe request is built");
    int asks = 0;
    for (size_t k = 0; k + 3 < req.n; k++)
        asks += !memcmp(req.p + k, "\033[6n", 4);
    T_CHECK(asks == EMJ_PROBE_N && strstr(req.p, FAM) && strstr(req.p, FLAG) && strstr(req.p, SKIN) &&
                strstr(req.p, HEART) && strstr(req.p, "\u231A\uFE0E"),
            "it writes each sample and asks the cursor position after each (%d)", asks);
    T_CHECK(req.n >= 13 && !memcmp(req.p + req.n - 13, "\033[c\033[1;1H\033[2K", 13),
            "... then device attributes, and erases");
    free(req.p);

    /* tmux 3.3a: the family and the flag advance 2 columns, the skin tone 4 */
    const char *rep = "\033[1;3R\033[1;3Rx\033[1;5R\033[?1;2c";
    int         wd[EMJ_PROBE_N], nw = 0, done = 0;
    char        other[16];
    size_t      no = 0, used = emj_probe_scan(rep, strlen(rep), wd, &nw, &done, other, &no, sizeof other);
    T_CHECK(used == strlen(rep) && nw == 3 && wd[0] == 2 && wd[1] == 2 && wd[2] == 4 && done,
            "replies give widths 2 2 4 and the end (used %zu, n %d)", used, nw);
    T_CHECK(no == 1 && other[0] == 'x', "a key typed among the replies is kept for the program");
    T_CHECK(emj_probe_result(wd, nw) == (EMJ_ZWJ | EMJ_FLAG),
            "ZWJ and flags drawn whole, skin tones not (%d)", emj_probe_result(wd, nw));
    int w1[3] = {6, 2, 2}, w2[3] = {1, 1, 1};
    T_CHECK(emj_probe_result(w1, 3) == (EMJ_FLAG | EMJ_MOD),
            "a family 6 columns wide (xterm) is not drawn whole");
    T_CHECK(emj_probe_result(w2, 3) == EMJ_ALL, "1 column fits the 2 reserved");
    T_CHECK(emj_probe_result(w1, 0) == 0, "no reply: nothing drawn whole");
    /* the VS16 sample (a heart): tmux 3.3a keeps it in 1 column, kitty gives it 2 */
    int w3[4] = {2, 2, 4, 1}, w4[4] = {2, 2, 2, 2}, w5[4] = {2, 2, 2, 3};
    T_CHECK(emj_probe_vs16(w3, 4) == 1 && emj_probe_vs16(w4, 4) == 2, "VS16 measured 1 and 2 columns");
    T_CHECK(emj_probe_vs16(w5, 4) == 0 && emj_probe_vs16(w3, 3) == 0, "another width, or no reply: unknown");
    T_CHECK(emj_probe_result(w3, 4) == (EMJ_ZWJ | EMJ_FLAG), "the VS16 sample is no kind drawn whole");
    /* the VS15 sample (a watch, wide by default): most terminals keep 2 columns, kitty draws 1 */
    int w6[5] = {2, 2, 2, 1, 1}, w7[5] = {2, 2, 4, 1, 2};
    T_CHECK(emj_probe_vs15(w6, 5) == 1 && emj_probe_vs15(w7, 5) == 2 && emj_probe_vs15(w7, 4) == 0,
            "VS15 measured 1 and 2 columns, unknown without its reply");
    T_CHECK(emj_probe_result(w6, 5) == EMJ_ALL && emj_probe_vs16(w6, 5) == 1,
            "the VS15 sample is no kind drawn whole, and leaves the VS16 one alone");

    /* replies are bytes, not C strings: nothing is read past n */
    const char raw[8] = {'\033', '[', '5', ';', '1', '2', 'R', 'X'};
    nw = 0, done = 0, no = 0;
    used = emj_probe_scan(raw, 7, wd, &nw, &done, other, &no, sizeof other);
    T_CHECK(used == 7 && nw == 1 && wd[0] == 11 && no == 0,
            "a reply at the very end of the bytes read (width %d)", nw ? wd[0] : -1);
    nw = 0, no = 0;
    used = emj_probe_scan("\033[1;R", 6, wd, &nw, &done, other, &no, sizeof other);
    T_CHECK(nw == 0 && no == 6, "a reply without a column is not a width (kept as a key)");
    /* a reply cut in the middle waits for its rest */
    nw = 0, done = 0, no = 0;
    used = emj_probe_scan("\033[12;", 5, wd, &nw, &done, other, &no, sizeof other);
    T_CHECK(used == 0 && nw == 0 && no == 0, "an incomplete reply is left for the next read (used %zu)",
            used);
    used = emj_probe_scan("\033[A\033", 4, wd, &nw, &done, other, &no, sizeof other);
    T_CHECK(used == 3 && no == 3 && !memcmp(other, "\033[A", 3),
            "an arrow key is kept whole, a lone ESC at the end waits");
}

static void test_sgr(void) {
    char b[64];
    emj_sgr(b, sizeof b, -1, -1, 0);
    T_CHECK(!strcmp(b, "\033[0m"), "default look is a reset (%s)", b + 1);
    emj_sgr(b, sizeof b, 2, 236, EMJ_A_BOLD | EMJ_A_REVERSE);
    T_CHECK(!strcmp(b, "\033[0;1;7;32;48;5;236m"), "bold reverse green on 236 (%s)", b + 1);
    emj_sgr(b, sizeof b, 12, 0, EMJ_A_DIM);
    T_CHECK(!strcmp(b, "\033[0;2;94;40m"), "bright blue on black, dim (%s)", b + 1);
    emj_sgr(b, sizeof b, 70000, 300, EMJ_A_UNDERLINE);
    T_CHECK(!strcmp(b, "\033[0;4m"), "colors past 255 are left at the default (%s)", b + 1);
}

static int find(const emj_set *s, int y, int x) {
    for (int k = 0; k < s->n; k++)
        if (s->r[k].y == y && s->r[k].x == x)
            return k;
    return -1;
}

static void test_set(void) {
    emj_set       s = {0};
    unsigned char touched[10], repaint[10];
    txt_buf       out = {0};
    memset(touched, 1, sizeof touched);
    T_CHECK(emj_set_frame(&s, touched, 10, 40, repaint) == 0 && s.n == 0,
            "a frame with nothing noted (no list yet)");
    T_CHECK(emj_set_output(&s, touched, 10, &out) == 0 && out.n == 0, "... writes nothing");
    /* frame 0: two clusters on rows 2 and 5 */
    emj_set_add(&s, 2, 4, 2, 0x1F469, "\033[0m", FAM, strlen(FAM));
    emj_set_add(&s, 5, 0, 2, 'F', "\033[0m", FLAG, strlen(FLAG));
    memset(touched, 0, sizeof touched);
    touched[2] = touched[5] = 1;
    T_CHECK(emj_set_frame(&s, touched, 10, 40, repaint) == 0 && s.n == 2,
            "first frame: both kept, nothing to repaint");
    T_CHECK(emj_set_output(&s, touched, 10, &out) == 0 && out.n > 0, "output for the frame");
    T_CHECK(!memcmp(out.p, "\0337", 2) && strstr(out.p, "\033[3;5H\033[0m" FAM) &&
                strstr(out.p, "\033[6;1H\033[0m" FLAG) && !memcmp(out.p + out.n - 6, "\033[0m\0338", 6),
            "each cluster written at its place between cursor save and restore");
    free(out.p), out = (txt_buf){0};

    /* frame 1: row 5 is drawn again without its flag; row 2 is not drawn (the family stays) */
    memset(touched, 0, sizeof touched);
    touched[5] = 1;
    int nrep   = emj_set_frame(&s, touched, 10, 40, repaint);
    T_CHECK(nrep == 1 && repaint[5] && !repaint[2], "a cluster gone from a drawn row: that row is repainted");
    T_CHECK(s.n == 1 && find(&s, 2, 4) >= 0, "the untouched row keeps its cluster");
    emj_set_output(&s, touched, 10, &out);
    T_CHECK(out.n == 0, "nothing written when no row with a cluster was drawn (got %zu bytes)", out.n);
    free(out.p), out = (txt_buf){0};

    /* frame 2: row 2 drawn again with the same cluster: no repaint, written again */
    memset(touched, 0, sizeof touched);
    touched[2] = 1;
    emj_set_add(&s, 2, 4, 2, 0x1F469, "\033[0m", FAM, strlen(FAM));
    T_CHECK(emj_set_frame(&s, touched, 10, 40, repaint) == 0 && s.n == 1,
            "the same cluster again: one record, no repaint");
    emj_set_output(&s, touched, 10, &out);
    T_CHECK(out.n > 0 && strstr(out.p, FAM), "... written over curses' stand-in again");
    free(out.p), out = (txt_buf){0};

    /* frame 3: the cluster moves one column right (an edit): the old place is repainted */
    emj_set_add(&s, 2, 5, 2, 0x1F469, "\033[0m", FAM, strlen(FAM));
    T_CHECK(emj_set_frame(&s, touched, 10, 40, repaint) == 1 && repaint[2] && s.n == 1 && find(&s, 2, 5) >= 0,
            "a cluster that moved: its row is repainted, the new place kept");
    emj_set_output(&s, touched, 10, &out);
    free(out.p), out = (txt_buf){0};

    /* frame 4: drawn twice at one place in a frame, the later wins; a dropped one is not written */
    emj_set_add(&s, 2, 5, 2, 0x1F469, "\033[0m", FAM, strlen(FAM));
    emj_set_add(&s, 2, 5, 2, 'F', "\033[0m", FLAG, strlen(FLAG));
    emj_set_add(&s, 3, 0, 2, 'F', "\033[0m", FLAG, strlen(FLAG));
    emj_set_drop(&s, s.n - 1); /* the one at (3, 0) */
    touched[3] = 1;
    emj_set_frame(&s, touched, 10, 40, repaint);
    int k = find(&s, 2, 5);
    T_CHECK(s.n == 1 && k >= 0 && strstr(s.r[k].bytes, FLAG),
            "the later note at a place wins, a dropped one is gone");

    /* a pane (rows 4..7) scrolled up one row by curses (wscrl), its rows not drawn again: the
     * records move with them; the place a record left is repainted unless another moved in */
    emj_set_output(&s, touched, 10, &out);
    free(out.p), out = (txt_buf){0};
    emj_set_clear(&s);
    memset(touched, 0, sizeof touched);
    emj_set_add(&s, 5, 0, 2, 0x1F469, "\033[0m", FAM, strlen(FAM));
    emj_set_add(&s, 6, 3, 2, 0x1F469, "\033[0m", FAM, strlen(FAM));
    emj_set_add(&s, 9, 0, 2, 0x1F469, "\033[0m", FAM, strlen(FAM)); /* outside the pane */
    emj_set_frame(&s, touched, 10, 40, repaint);
    emj_set_output(&s, touched, 10, &out);
    free(out.p), out = (txt_buf){0};
    T_CHECK(emj_set_scroll(&s, 4, 4, 1) == 0, "scroll rows 4..7 up by one");
    memset(touched + 4, 1, 4); /* wscrl touches the region */
    emj_set_frame(&s, touched, 10, 40, repaint);
    T_CHECK(s.n == 3 && find(&s, 4, 0) >= 0 && find(&s, 5, 3) >= 0 && find(&s, 9, 0) >= 0,
            "the two records moved up a row, the one outside stayed (n %d)", s.n);
    T_CHECK(repaint[5] && repaint[6] && !repaint[4] && !repaint[9],
            "rows whose cluster left (5: column 0, 6: column 3) are repainted, row 4 is not");
    emj_set_output(&s, touched, 10, &out);
    T_CHECK(out.n && strstr(out.p, "\033[5;1H") && strstr(out.p, "\033[6;4H") && !strstr(out.p, "\033[10;1H"),
            "the moved clusters are written at their new rows, the untouched one is not");
    free(out.p), out = (txt_buf){0};
    /* a record drawn earlier in the same frame moves; scrolled out of the region, it is gone */
    emj_set_add(&s, 4, 6, 2, 'F', "\033[0m", FLAG, strlen(FLAG));
    emj_set_scroll(&s, 4, 4, 1);
    memset(touched, 0, sizeof touched);
    touched[4] = touched[5] = touched[6] = touched[7] = 1;
    emj_set_frame(&s, touched, 10, 40, repaint);
    T_CHECK(find(&s, 4, 6) < 0 && find(&s, 3, 6) < 0 && find(&s, 4, 3) >= 0 && find(&s, 4, 0) < 0,
            "this frame's record scrolled out is dropped, the others moved again");
    emj_set_output(&s, touched, 10, &out);
    free(out.p), out = (txt_buf){0};

    /* frame 5: the terminal shrinks to 2 rows (resize): records outside are dropped, not repainted */
    emj_set_output(&s, touched, 10, &out);
    free(out.p), out = (txt_buf){0};
    memset(touched, 0, sizeof touched);
    T_CHECK(emj_set_frame(&s, touched, 2, 40, repaint) == 0 && s.n == 0,
            "a resize drops what is off the screen");
    /* a cluster past the right edge is never kept */
    emj_set_add(&s, 0, 39, 2, 'F', "\033[0m", FLAG, strlen(FLAG));
    touched[0] = 1;
    emj_set_frame(&s, touched, 2, 40, repaint);
    T_CHECK(s.n == 0, "a cluster that would cross the right edge is not drawn whole");
    char big[200];
    memset(big, 'x', sizeof big);
    T_CHECK(emj_set_add(&s, 0, 0, 2, 'x', "", big, sizeof big) == -1,
            "a cluster too long for a record is refused");
    emj_set_free(&s);
}

int main(void) {
    setlocale(LC_ALL, "C.UTF-8"); /* wcwidth of the non-spacing characters */
    test_joins();
    test_fallback();
    test_mode();
    test_probe();
    test_sgr();
    test_set();
    return t_done();
}
