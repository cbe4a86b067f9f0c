/* test-ui-text.c: display widths and wrapping of ui/common/text.c (CJK, emoji incl. ZWJ sequences and
 * flags, combining marks, tabs, invalid bytes), streaming UTF-8 cuts, word wrap by columns. */
#include "test.h"
#include "text.h"

#include <string.h>
#include <wchar.h>

static int W(const char *s) {
    return txt_width(s, strlen(s), 0);
}

/* every wrapped line fits and the lines cover the text without losing a non-space byte */
static int wrap_ok(const char *s, int cols, int *nlines) {
    txt_line l[256];
    int      n       = txt_wrap(s, strlen(s), cols, l, 256);
    size_t   covered = 0;
    *nlines          = n;
    for (int k = 0; k < n && k < 256; k++) {
        if (l[k].width > cols && l[k].len > 1 && strchr(" ", s[l[k].off + l[k].len - 1]) == NULL)
            return 0;
        if (l[k].width != txt_width(s + l[k].off, l[k].len, 0))
            return 0;
        for (size_t j = covered; j < l[k].off; j++)
            if (s[j] != ' ' && s[j] != '\n')
                return 0; /* a skipped byte that is not a break */
        covered = l[k].off + l[k].len;
    }
    return covered == strlen(s);
}

/* txt_escape of s fed in pieces cut at each byte in cuts (sorted, < n), then the held rest. */
static int esc_ok(const char *s, const size_t *cuts, int ncut, const char *want) {
    txt_buf b  = {0};
    txt_esc st = {0};
    size_t  n = strlen(s), at = 0;
    for (int k = 0; k <= ncut; k++) {
        size_t to = k < ncut ? cuts[k] : n;
        txt_escape(&b, &st, s + at, to - at);
        at = to;
    }
    if (st.n)
        txt_escape(&b, NULL, st.hold, (size_t)st.n);
    int ok = b.n == strlen(want) && !memcmp(b.p, want, b.n);
    if (!ok)
        fprintf(stderr, "  got '%.*s', want '%s'\n", (int)b.n, b.p ? b.p : "", want);
    free(b.p);
    return ok;
}

/* txt_fit of s at cols: the text into out (a C string, at most 255 bytes), its width returned. */
static int fit_str(const char *s, int cols, char *out) {
    txt_buf b = {0};
    int     w = txt_fit(&b, s, strlen(s), cols);
    snprintf(out, 256, "%s", b.p ? b.p : "");
    free(b.p);
    return w;
}

/* Every cut of s by txt_fit at 1..width columns: as wide as it says, no wider than asked, valid
 * UTF-8 (no part of a character), and made of a prefix and a suffix of s around the ellipsis. */
static int fit_all_ok(const char *s) {
    char   out[256];
    size_t n = strlen(s);
    for (int c = 1; c <= W(s); c++) {
        int         w  = fit_str(s, c, out);
        const char *el = strstr(out, "\xE2\x80\xA6");
        if (w != W(out) || w > c || k3_utf8_repair(out, strlen(out), NULL, NULL) != 0)
            return 0;
        if (c < W(s) && (!el || strncmp(out, s, (size_t)(el - out)) || strlen(el + 3) > n ||
                         strcmp(el + 3, s + n - strlen(el + 3))))
            return 0;
    }
    return 1;
}

int main(void) {
    T_CHECK(W("hello") == 5, "ASCII width 5 (got %d)", W("hello"));
    T_CHECK(W("日本語") == 6, "CJK: 3 characters, 6 columns (got %d)", W("日本語"));
    T_CHECK(W("ｈｉ") == 4, "fullwidth Latin is 2 columns each (got %d)", W("ｈｉ"));
    T_CHECK(W("😀") == 2, "emoji is 2 columns (got %d)", W("😀"));
    T_CHECK(W("👩\u200d👩\u200d👧") == 2, "ZWJ family sequence is one 2-column cluster (got %d)",
            W("👩\u200d👩\u200d👧"));
    T_CHECK(W("👍🏽") == 2, "emoji + skin-tone modifier is 2 columns (got %d)", W("👍🏽"));
    T_CHECK(W("🇯🇵") == 2, "flag (regional indicator pair) is 2 columns (got %d)", W("🇯🇵"));
    T_CHECK(W("❤\uFE0F") == 2, "text symbol + VS16 is 2 columns (got %d)", W("❤\uFE0F"));
    /* a terminal that keeps VS16 in the base character's cell (tmux 3.3, xterm: the probe) */
    txt_vs16_set(1);
    T_CHECK(W("❤\uFE0Fx") == 2, "VS16 1 column wide: heart + VS16 + x is 2 columns (got %d)", W("❤\uFE0Fx"));
    T_CHECK(W("1\uFE0F\u20E3") == 1, "... a keycap 1 (got %d)", W("1\uFE0F\u20E3"));
    T_CHECK(W("😀\uFE0F") == 2, "... a wide emoji with VS16 stays 2 (got %d)", W("😀\uFE0F"));
    T_CHECK(W("\U0001F3F3\uFE0F\u200D\U0001F308") == 2, "... a ZWJ sequence stays 2 (got %d)",
            W("\U0001F3F3\uFE0F\u200D\U0001F308"));
    txt_vs16_set(3);
    T_CHECK(txt_vs16() == 1, "a width other than 1 or 2 is ignored (got %d)", txt_vs16());
    txt_vs16_set(2);
    T_CHECK(W("❤\uFE0Fx") == 3, "VS16 2 columns wide again: 3 columns (got %d)", W("❤\uFE0Fx"));
    /* VS15 after an emoji wide by default: 2 columns (xterm, VTE, tmux keep them) unless the probe
     * saw the terminal draw the text presentation in 1 (kitty) */
    int vw = -1, vf = 0;
    txt_cluster("\u231A\uFE0Ex", 7, &vw, &vf);
    T_CHECK(vw == 2 && !(vf & TXT_F_NARROW) && W("\u231A\uFE0Ex") == 3,
            "watch + VS15 is 2 columns by default (got %d)", vw);
    txt_vs15_set(1);
    txt_cluster("\u231A\uFE0Ex", 7, &vw, &vf);
    T_CHECK(vw == 1 && (vf & TXT_F_NARROW) && !(vf & TXT_F_EMOJI) && W("\u231A\uFE0Ex") == 2,
            "VS15 1 column wide: watch + VS15 is 1 column, flagged narrow (got %d)", vw);
    T_CHECK(W("😀\uFE0E") == 1 && W("\u263A\uFE0E") == 1 && W("👍🏽\uFE0E") == 2 && W("😀") == 2,
            "... a smiley too; a text-default one stays 1, a skin-toned one and a bare emoji 2");
    txt_vs15_set(0);
    T_CHECK(txt_vs15() == 1, "a width other than 1 or 2 is ignored (got %d)", txt_vs15());
    txt_vs15_set(2);
    T_CHECK(W("\u231A\uFE0E") == 2, "VS15 2 columns again (got %d)", W("\u231A\uFE0E"));
    T_CHECK(W("e\u0301") == 1, "e + combining acute is 1 column (got %d)", W("e\u0301"));
    T_CHECK(W("a\u0308\u0323b") == 2, "two combining marks on one base (got %d)", W("a\u0308\u0323b"));
    T_CHECK(W("한국어") == 6, "Hangul syllables are 2 columns (got %d)", W("한국어"));
    /* what a terminal gives a cell of its own (curses' wcwidth, tmux, xterm): a prepended mark
     * (U+0600 ARABIC NUMBER SIGN) and the digit after it, a consonant and its spacing vowel sign */
    T_CHECK(W("\u060012") == 3, "U+0600 before digits is a column of its own (got %d)", W("\u060012"));
    T_CHECK(W("\u0915\u093E\u0915") == 3, "Devanagari ka + vowel sign aa (Mc) + ka is 3 columns (got %d)",
            W("\u0915\u093E\u0915"));
    T_CHECK(W("\u1100\u1161\u11A8") == 2, "conjoining jamo L+V+T are 2 columns (got %d)",
            W("\u1100\u1161\u11A8"));
    /* an emoji does not take in a spacing character that is not part of its sequence */
    T_CHECK(W("❤\uFE0F\u093E") == 3, "an emoji and a vowel sign after it are 3 columns (got %d)",
            W("❤\uFE0F\u093E"));
    T_CHECK(W("\u0600🇯🇵") == 3, "U+0600 before a flag is 3 columns (got %d)", W("\u0600🇯🇵"));
    T_CHECK(W("a🏽") == 3, "a letter and a skin tone after it are 3 columns (got %d)", W("a🏽"));
    T_CHECK(W("\t") == 8, "tab at column 0 is 8 columns (got %d)", W("\t"));
    T_CHECK(W("abc\t") == 8, "tab after 3 columns reaches column 8 (got %d)", W("abc\t"));
    T_CHECK(txt_width("\t", 1, 5) == 3, "tab from column 5 is 3 columns (got %d)", txt_width("\t", 1, 5));
    T_CHECK(W("a\x1b[31mb") == 10, "ESC is drawn as its escape \\x1B (4 columns), the rest is text (got %d)",
            W("a\x1b[31mb"));
    T_CHECK(W("a\xff"
              "b") == 3,
            "an invalid byte counts 1 column (U+FFFD) (got %d)",
            W("a\xff"
              "b"));

    int    w, f;
    size_t l = txt_cluster("e\u0301x", 4, &w, &f);
    T_CHECK(l == 3 && w == 1, "cluster e+acute is 3 bytes, 1 column (got %zu, %d)", l, w);
    l = txt_cluster("\u06001", 3, &w, &f);
    T_CHECK(l == 2 && w == 1,
            "U+0600 is a cluster of its own, 1 column: a digit after it is not drawn "
            "into its cell (got %zu bytes, %d)",
            l, w);
    l = txt_cluster("\u0915\u093E", 6, &w, &f);
    T_CHECK(l == 3 && w == 1, "a spacing vowel sign starts a cell of its own (got %zu bytes, %d)", l, w);
    l = txt_cluster("\u0915\u093F\u0301", 8, &w, &f);
    T_CHECK(l == 3, "... with the marks after it (got %zu bytes)", l);
    l = txt_cluster("\u093F\u0301x", 6, &w, &f);
    T_CHECK(l == 5 && w == 1, "... 1 column with its marks (got %zu bytes, %d)", l, w);
    l = txt_cluster("👩\u200d👩\u200d👧!", strlen("👩\u200d👩\u200d👧!"), &w, &f);
    T_CHECK(l == strlen("👩\u200d👩\u200d👧") && (f & TXT_F_EMOJI), "ZWJ sequence is one cluster (%zu bytes)",
            l);

    /* streaming: a cut inside a character is held back, complete text passes */
    const char *s = "a日";
    T_CHECK(txt_complete(s, 1) == 1, "complete ASCII");
    T_CHECK(txt_complete(s, 2) == 1, "1 of 3 bytes of 日 held back (got %zu)", txt_complete(s, 2));
    T_CHECK(txt_complete(s, 3) == 1, "2 of 3 bytes of 日 held back (got %zu)", txt_complete(s, 3));
    T_CHECK(txt_complete(s, 4) == 4, "all of 日 passes (got %zu)", txt_complete(s, 4));
    T_CHECK(txt_complete("😀", 3) == 0, "3 of 4 bytes of an emoji held back");
    T_CHECK(txt_complete("a\x80", 2) == 2, "a stray continuation byte is not held back");

    /* wrapping */
    txt_line ln[16];
    int      n = txt_wrap("hello world foo", strlen("hello world foo"), 11, ln, 16);
    T_CHECK(n == 2 && ln[0].len == 11 && ln[1].off == 12, "word wrap at a space (n=%d, len0=%zu)", n,
            ln[0].len);
    n = txt_wrap("abcdefghij", strlen("abcdefghij"), 4, ln, 16);
    T_CHECK(n == 3 && ln[0].len == 4 && ln[2].len == 2, "a word longer than the line is cut (n=%d)", n);
    n = txt_wrap("日本語日本語", strlen("日本語日本語"), 5, ln, 16);
    T_CHECK(n == 3 && ln[0].width == 4, "CJK wraps between characters, never past the margin (n=%d, w0=%d)",
            n, ln[0].width);
    n = txt_wrap("ab😀😀", strlen("ab😀😀"), 4, ln, 16);
    T_CHECK(n == 2 && ln[0].width == 4 && ln[1].width == 2, "an emoji never straddles the margin (n=%d)", n);
    n       = txt_wrap("| 漢  |😀 x", strlen("| 漢  |😀 x"), 2, ln, 16);
    int fit = 1;
    for (int k = 0; k < n && k < 16; k++)
        fit &= ln[k].width <= 2;
    T_CHECK(fit && n == 6,
            "a wide character that does not fit after the last break goes to the next line (n=%d)", n);
    n = txt_wrap("a\nb\n", strlen("a\nb\n"), 10, ln, 16);
    T_CHECK(n == 3 && ln[2].len == 0, "newlines end lines; a trailing newline gives an empty line (n=%d)", n);
    n = txt_wrap("", strlen(""), 10, ln, 16);
    T_CHECK(n == 1 && ln[0].len == 0, "empty text is one empty line");
    n = txt_wrap("e\u0301e\u0301e\u0301", strlen("e\u0301e\u0301e\u0301"), 2, ln, 16);
    T_CHECK(n == 2 && ln[0].len == 6, "combining marks stay with their base when wrapping (len0=%zu)",
            ln[0].len);
    n = txt_wrap("\tx\ty", strlen("\tx\ty"), 10, ln, 16);
    T_CHECK(n == 2, "tabs expand by column when wrapping (n=%d)", n);
    const char *para = "The quick brown fox 日本語のテキスト jumps over the lazy dog 😀 again and again, "
                       "with e\u0301 marks and a verylongwordthatdoesnotfitanywhere at all.";
    int         ok = 1, nl;
    for (int cols = 2; cols <= 40; cols++)
        ok &= wrap_ok(para, cols, &nl);
    T_CHECK(ok, "mixed paragraph: lines fit and cover the text at every width 2..40");
    T_CHECK(txt_col_to_off("a日b", 4, 2) == 1, "column 2 is inside 日 (offset 1)");
    T_CHECK(txt_col_to_off("a日b", 5, 3) == 4, "column 3 is b (offset 4)");

    /* clusters of the line editor's code points (issue 26 item 13): Backspace and the arrows
     * step over what the screen shows as one character */
    static const wchar_t fam[] = L"A\U0001F469\u200D\U0001F469\u200D\U0001F467B";
    size_t               nf    = wcslen(fam);
    T_CHECK(txt_wcluster_prev(fam, nf, nf) == 6, "Backspace after B takes B alone (start %zu)",
            txt_wcluster_prev(fam, nf, nf));
    T_CHECK(txt_wcluster_prev(fam, nf, 6) == 1, "the ZWJ family is one cluster back from its end (start %zu)",
            txt_wcluster_prev(fam, nf, 6));
    T_CHECK(txt_wcluster_next(fam, nf, 1) == 6, "... and forward from its start (end %zu)",
            txt_wcluster_next(fam, nf, 1));
    T_CHECK(txt_wcluster_prev(fam, nf, 1) == 0 && txt_wcluster_next(fam, nf, 0) == 1,
            "A is a cluster of its own");
    static const wchar_t flags[] = L"\U0001F1EB\U0001F1F7\U0001F1E9\U0001F1EA"; /* FR DE */
    T_CHECK(txt_wcluster_prev(flags, 4, 4) == 2 && txt_wcluster_next(flags, 4, 0) == 2,
            "two flags are two clusters of two regional indicators");
    static const wchar_t acc[] = L"e\u0301\u0323x";
    T_CHECK(txt_wcluster_next(acc, 4, 0) == 3 && txt_wcluster_prev(acc, 4, 3) == 0,
            "e with two combining marks is one cluster");
    static const wchar_t skin[] = L"\U0001F44D\U0001F3FD!";
    T_CHECK(txt_wcluster_next(skin, 3, 0) == 2, "thumbs up + skin tone is one cluster");
    static const wchar_t jamo[] = L"\u1100\u1161\u11A8a"; /* L V T: one Hangul syllable */
    T_CHECK(txt_wcluster_next(jamo, 4, 0) == 3, "conjoining jamo L+V+T are one cluster");
    static const wchar_t lf[] = L"a\n\u0301b";
    T_CHECK(txt_wcluster_next(lf, 4, 1) == 2 && txt_wcluster_prev(lf, 4, 2) == 1, "a newline stands alone");
    static const wchar_t bad[] = {L'a', (wchar_t)0xD800, L'b', 0};
    T_CHECK(txt_wcluster_next(bad, 3, 1) == 2, "a lone surrogate is one cluster (drawn as U+FFFD)");
    T_CHECK(txt_wcluster_prev(fam, nf, 0) == 0 && txt_wcluster_next(fam, nf, nf) == nf, "the ends stay put");
    /* outside text on a terminal: the one escaping function (text.h) */
    T_CHECK(esc_ok("a\x1b]52;c;ZXZp\x07"
                   "b\n\tc\r",
                   NULL, 0, "a\\x1B]52;c;ZXZp\\x07b\n\tc\\x0D"),
            "C0 controls but \\n and \\t are escaped, \\n and \\t kept");
    T_CHECK(esc_ok("x\x7f\xc2\x9b"
                   "31m\xc3\xa9\xe6\x97\xa5",
                   NULL, 0, "x\\x7F\\u009B31m\xc3\xa9\xe6\x97\xa5"),
            "DEL and a C1 CSI are escaped, other characters kept");
    size_t c1[] = {1, 2};
    T_CHECK(esc_ok("a\xc2\x9b"
                   "b",
                   c1, 2, "a\\u009Bb"),
            "a C1 control cut between two pieces is still escaped");
    size_t c2[] = {2, 3};
    T_CHECK(esc_ok("a\xe6\x97\xa5z", c2, 2, "a\xe6\x97\xa5z"),
            "a character cut in three pieces comes out whole");
    size_t c3[] = {2};
    T_CHECK(esc_ok("a\xe6\x97", c3, 1, "a\\xE6\\x97"), "bytes held at the end come out escaped");
    size_t c4[] = {2};
    T_CHECK(esc_ok("a\xe6"
                   "bc",
                   c4, 1, "a\\xE6bc"),
            "a lead byte whose sequence is broken is escaped");
    T_CHECK(esc_ok("\xff\x80q", NULL, 0, "\\xFF\\x80q"), "bytes that are not UTF-8 are escaped");
    /* bidi controls and line separators: escaped, cut between pieces or not; not drawn */
    size_t c5[] = {3, 5};
    T_CHECK(esc_ok("a \xe2\x80\xae"
                   "evil\xe2\x80\xac \xe2\x81\xa6x\xe2\x81\xa9\xe2\x80\x8f\xd8\x9c\xe2\x80\xa8.\xe2\x80\x8b",
                   c5, 2, "a \\u202Eevil\\u202C \\u2066x\\u2069\\u200F\\u061C\\u2028.\xe2\x80\x8b"),
            "bidi overrides, isolates and marks and U+2028 are escaped; a zero-width space is kept");
    int bw = -1, bf = 0;
    txt_cluster("\xe2\x80\xae"
                "x",
                4, &bw, &bf);
    char shown[8];
    int  ns = txt_ctrl_shown("\xe2\x80\xae", 3, shown);
    T_CHECK(bw == 6 && (bf & TXT_F_CTRL) && ns == 6 && !strcmp(shown, "\\u202E") &&
                W("a\xe2\x80\xae"
                  "bc") == 9,
            "U+202E is a control cluster as wide as its escape \\u202E, which the full-screen chat draws "
            "(%d, '%s')",
            bw, shown);
    ns = txt_ctrl_shown("\x7f", 1, shown);
    T_CHECK(ns == 4 && !strcmp(shown, "\\x7F") && W("\x7f") == 4, "DEL shows as \\x7F, 4 columns");

    /* what the full-screen chat writes around curses (an OSC 8 link's text and URL) */
    txt_buf     b   = {0};
    const char *vis = "a\x1b[31m\xc2\x9b"
                      "1m\x9b"
                      "2J\t\n\x7f\xc2\x9c\xe4\xb8\xad\xcc\x81\xf0\x9f\x98\x80z";
    txt_term_drawn(&b, vis, strlen(vis));
    const char *want = "a\\x1B[31m\\u009B1m\xef\xbf\xbd"
                       "2J\\x7F\\u009C\xe4\xb8\xad\xcc\x81\xf0\x9f\x98\x80z";
    T_CHECK(b.n == strlen(want) && !memcmp(b.p, want, b.n),
            "txt_term_drawn shows C0, DEL and C1 controls as their escapes (as curses is given them), "
            "leaves out tab and newline, shows a raw byte as U+FFFD, keeps the rest ('%.*s')",
            (int)b.n, b.p);
    /* plain text is wrapped as shown (txt_shown, as draw_wrapped does; md.c for Markdown): an
     * escape wider than the line breaks inside, so at widths 1 to 8 every row fits (a control
     * wrapped raw was one cluster of 4 or 6 columns, cut at the row's end when drawn), no control
     * byte is left and no character of the escapes is lost; tab, newline and a raw byte stay */
    b.n               = 0;
    const char *plain = "a\x1b"
                        "b \xe2\x80\xae c\x7f\xc2\x9b\xff\nz";
    T_CHECK(!txt_shown(&b, "\t\x01", 2) && b.n == 5 && !memcmp(b.p, "\t\\x01", 5),
            "txt_shown keeps a tab ('%.*s')", (int)b.n, b.p);
    b.n = 0;
    T_CHECK(!txt_shown(&b, plain, strlen(plain)) && b.n == strlen("a\\x1Bb \\u202E c\\x7F\\u009B\xff\nz") &&
                !memcmp(b.p, "a\\x1Bb \\u202E c\\x7F\\u009B\xff\nz", b.n),
            "txt_shown escapes the controls and keeps newline and a raw byte ('%.*s')", (int)b.n, b.p);
    for (int cols = 1; cols <= 8; cols++) {
        txt_line rw[64];
        int      nr = txt_wrap(b.p, b.n, cols, rw, 64), fits = nr <= 64;
        txt_buf  all = {0};
        for (int k = 0; k < nr && k < 64; k++) {
            fits &= rw[k].width <= cols;
            for (size_t q = rw[k].off; q < rw[k].off + rw[k].len; q++)
                if (b.p[q] != ' ' && b.p[q] != '\n' && b.p[q] != '\t')
                    fits &= !txt_buf_add(&all, b.p + q, 1);
        }
        txt_buf_add(&all, "", 1);
        T_CHECK(fits && all.p && !strcmp(all.p, "a\\x1Bb\\u202Ec\\x7F\\u009B\xffz"),
                "txt_wrap of the shown text at %d columns: %d rows that fit, the escapes whole ('%s')", cols,
                nr, all.p ? all.p : "");
        free(all.p);
    }
    b.n               = 0;
    const char *uri   = "http://x/a b\x1b]0;T\x07\xc2\x9c\xc2\x9d"
                        "52;c;eA==\xc2\x9c\x9b~";
    const char *uwant = "http://x/a%20b%1B]0;T%07%C2%9C%C2%9D52;c;eA==%C2%9C%9B~";
    int         nctl  = 0;
    txt_term_uri(&b, uri, strlen(uri));
    for (size_t k = 0; k < b.n; k++)
        nctl += (unsigned char)b.p[k] <= 0x20 || (unsigned char)b.p[k] >= 0x7f;
    T_CHECK(b.n == strlen(uwant) && !memcmp(b.p, uwant, b.n) && !nctl,
            "txt_term_uri percent-encodes every byte outside 0x21..0x7E ('%.*s')", (int)b.n, b.p);
    free(b.p);
    char fo[256];
    T_CHECK(fit_str("k3-nano", 20, fo) == 7 && !strcmp(fo, "k3-nano"),
            "txt_fit: a name that fits is kept (%s)", fo);
    T_CHECK(fit_str("moonshotai/Kimi-K3-Instruct-2026-12-v2", 21, fo) == 21 &&
                !strcmp(fo, "moonshotai…2026-12-v2"),
            "txt_fit: a long id keeps its start and its end, the end that tells two ids apart (%s)", fo);
    T_CHECK(fit_str("模型模型模型模型-v2", 9, fo) <= 9 && !strcmp(fo, "模型…-v2"),
            "txt_fit: CJK cut between characters by width, not bytes (%s)", fo);
    T_CHECK(fit_all_ok("moonshotai/Kimi-K3-Instruct-v2") &&
                fit_all_ok("模型/日本語の名前-e\u0301t\u00e9-👩\u200d👩\u200d👧-v3") &&
                fit_all_ok("a\tb\tc-long-name-with-tabs"),
            "txt_fit at every width: no wider than asked, whole characters and clusters, prefix … suffix");
    T_CHECK(fit_str("abc", 0, fo) == 0 && !fo[0], "txt_fit into 0 columns: nothing");
    return t_done();
}
