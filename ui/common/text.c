/* text.c: UTF-8 display width and word wrapping (see text.h). */
#include "text.h"

#include <getopt.h>
#include <langinfo.h>
#include <locale.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

/* Decode one code point; invalid or truncated sequences give -1 and a length of 1. */
static utf8proc_int32_t decode(const char *s, size_t n, size_t *len) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k =
        utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)(n > 4 ? 4 : n), &cp);
    if (k <= 0) {
        *len = 1;
        return -1;
    }
    *len = (size_t)k;
    return cp;
}

static int is_emoji_pres(utf8proc_int32_t cp) {
    /* What joins a cluster into an emoji sequence that terminals draw two columns wide (a ZWJ,
     * a flag's second letter, a skin tone); U+FE0F (VS16) makes one of a one-column pictograph
     * only in some terminals (txt_vs16), and txt_cluster counts it apart. */
    return cp == 0x200D || (cp >= 0x1F1E6 && cp <= 0x1F1FF) || (cp >= 0x1F3FB && cp <= 0x1F3FF);
}

/* Columns of one code point as a terminal (and curses' wcwidth) gives it a cell: utf8proc's
 * width, but a spacing mark (Mc: the Devanagari vowel sign in "\u0915\u093E") and a prepended
 * mark (U+0600 ARABIC NUMBER SIGN, U+0D4E) take a column of their own, and the medial vowels and
 * final consonants of conjoining Hangul (V, T) none: they join the syllable's first jamo. */
static int cp_width(utf8proc_int32_t cp) {
    const utf8proc_property_t *p = utf8proc_get_property(cp);
    if (p->category == UTF8PROC_CATEGORY_MC || p->boundclass == UTF8PROC_BOUNDCLASS_PREPEND)
        return 1;
    if (p->boundclass == UTF8PROC_BOUNDCLASS_V || p->boundclass == UTF8PROC_BOUNDCLASS_T)
        return 0;
    int w = utf8proc_charwidth(cp);
    return w < 0 ? 1 : w;
}

static int vs16_cols = 2;

void txt_vs16_set(int cols) {
    if (cols == 1 || cols == 2)
        vs16_cols = cols;
}

int txt_vs16(void) {
    return vs16_cols;
}

static int vs15_cols = 2;

void txt_vs15_set(int cols) {
    if (cols == 1 || cols == 2)
        vs15_cols = cols;
}

int txt_vs15(void) {
    return vs15_cols;
}

size_t txt_cluster(const char *s, size_t n, int *width, int *flags) {
    /* printable ASCII not followed by a combining character (which would not be ASCII): a
     * cluster of one byte and one column, without a table lookup */
    unsigned char c0 = (unsigned char)s[0];
    if (c0 >= 0x20 && c0 < 0x7f && (n == 1 || (unsigned char)s[1] < 0x80)) {
        *width = 1;
        *flags = c0 == ' ' ? TXT_F_SPACE : 0;
        return 1;
    }
    size_t           len;
    utf8proc_int32_t cp = decode(s, n, &len), prev = cp;
    int              w = 0, f = 0, emoji = 0, vs16 = 0, vs15 = 0;
    utf8proc_int32_t state = 0;
    if (cp < 0) {
        *width = 1;
        *flags = TXT_F_INVALID;
        return 1;
    }
    if (cp == '\t') {
        *width = 0;
        *flags = TXT_F_TAB;
        return len;
    }
    if (cp == '\n') {
        *width = 0;
        *flags = TXT_F_NL;
        return len;
    }
    if (txt_ctrl_cp(cp)) { /* drawn as its escape (txt_ctrl_shown): \xHH below U+0080, \uHHHH */
        *width = cp < 0x80 ? 4 : 6;
        *flags = TXT_F_CTRL;
        return len;
    }
    if (cp == ' ')
        f |= TXT_F_SPACE;
    w = cp_width(cp);
    if (cp >= 0x1F1E6 && cp <= 0x1F1FF)
        emoji = 1; /* regional indicators: a pair is a flag */
    size_t off = len;
    int    ncp = 1;
    while (off < n) {
        size_t           l2;
        utf8proc_int32_t c2 = decode(s + off, n - off, &l2);
        if (c2 < 0 || c2 == '\n' || c2 == '\t')
            break;
        if (!utf8proc_grapheme_break_stateful(prev, c2, &state)) {
            /* a terminal gives a spacing character a cell of its own (a cell holds one and the
             * zero-width ones after it), whatever Unicode's clusters say; an emoji sequence is
             * drawn whole: what follows a ZWJ, a flag's second letter, a wide emoji's skin tone */
            int ri = c2 >= 0x1F1E6 && c2 <= 0x1F1FF, tone = c2 >= 0x1F3FB && c2 <= 0x1F3FF;
            if (cp_width(c2) > 0 && prev != 0x200D && !(ri && emoji && ncp == 1) && !(tone && w == 2))
                break;
            if (c2 == 0xFE0F)
                vs16 = 1;
            else if (c2 == 0xFE0E)
                vs15 = 1;
            else if (is_emoji_pres(c2))
                emoji = 1;
            off += l2;
            prev = c2;
            ncp++;
            continue;
        }
        break;
    }
    /* U+FE0F alone makes a one-column character an emoji only where the terminal widens it */
    if (vs16 && (emoji || w != 1 || vs16_cols == 2))
        emoji = 1;
    if (emoji && (ncp > 1 || w == 2)) {
        w = 2;
        f |= TXT_F_EMOJI;
    } else if (w == 2 && utf8proc_get_property(cp)->category == UTF8PROC_CATEGORY_SO) {
        f |= TXT_F_EMOJI;
    }
    if (emoji && ncp == 1)
        w = 1; /* a lone regional indicator */
    if (vs15 && ncp == 2 && w == 2 && !emoji && vs15_cols == 1) {
        w = 1; /* a wide emoji in text presentation, where the terminal draws it so (txt_vs15) */
        f = (f & ~TXT_F_EMOJI) | TXT_F_NARROW;
    }
    *width = w;
    *flags = f;
    return off;
}

int txt_width(const char *s, size_t n, int col0) {
    int col = col0;
    for (size_t off = 0; off < n;) {
        int w, f;
        off += txt_cluster(s + off, n - off, &w, &f);
        if (f & TXT_F_TAB)
            w = TXT_TAB - col % TXT_TAB;
        else if (f & TXT_F_NL)
            w = 0;
        col += w;
    }
    return col - col0;
}

/* txt_hang: see text.h (the full-screen chat's /help and /stats, line mode's /help) */
int txt_hang(const char *s, size_t n, int w) {
    size_t i = 0;
    while (i < n && s[i] == ' ')
        i++;
    if (i == 0 || i >= n)
        return 0;
    const char *gap = NULL;
    for (size_t k = i; k + 2 < n; k++)
        if (s[k] == ' ' && s[k + 1] == ' ') {
            gap = s + k;
            break;
        }
    if (!gap)
        return 0;
    while (gap < s + n && *gap == ' ')
        gap++;
    int col = txt_width(s, (size_t)(gap - s), 0);
    return col <= w / 2 ? col : (int)i + 2 < w / 2 ? (int)i + 2 : 0;
}

size_t txt_complete(const char *s, size_t n) {
    /* look back at most 3 bytes for the lead byte of the last sequence */
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* continuation byte: keep looking */
        size_t need = c < 0x80             ? 1
                      : (c & 0xE0) == 0xC0 ? 2
                      : (c & 0xF0) == 0xE0 ? 3
                      : (c & 0xF8) == 0xF0 ? 4
                                           : 1;
        return back < need ? n - back : n;
    }
    return n;
}

const char *txt_clip(char *buf, size_t n, const char *s) {
    size_t len = strlen(s);
    if (len < n) {
        memcpy(buf, s, len + 1);
        return buf;
    }
    size_t k = txt_complete(s, n - 4); /* room for the ellipsis (3 bytes) and the NUL */
    memcpy(buf, s, k);
    memcpy(buf + k, "\xE2\x80\xA6", 4);
    return buf;
}

int txt_wrap(const char *s, size_t n, int cols, txt_line *out, int max) {
    int    nl = 0, col = 0;
    size_t start = 0;
    /* the last break opportunity on the current line: the line would end at brk_end and the
     * next one start at brk_next */
    size_t brk_end = 0, brk_next = 0;
    int    have_brk = 0;
    if (cols < 1)
        cols = 1;
#define EMIT(o, l)                                                                                           \
    do {                                                                                                     \
        if (out && nl < max)                                                                                 \
            out[nl] = (txt_line){(o), (l), txt_width(s + (o), (l), 0)};                                      \
        nl++;                                                                                                \
    } while (0)
    for (size_t off = 0; off < n;) {
        int    w, f;
        size_t len = txt_cluster(s + off, n - off, &w, &f);
        /* a newline, or a space past the margin: the line ends before it, the next after it */
        int hard = (f & TXT_F_NL) || ((f & TXT_F_SPACE) && col + w > cols);
        if (hard) {
            EMIT(start, off - start);
            start    = off + len;
            col      = 0;
            have_brk = 0;
            off += len;
            continue;
        }
        if (f & TXT_F_TAB)
            w = TXT_TAB - col % TXT_TAB;
        if (col + w > cols && col > 0 && !(f & TXT_F_SPACE)) {
            if (have_brk) {
                EMIT(start, brk_end - start);
                start = brk_next;
            } else {
                EMIT(start, off - start);
                start = off;
            }
            have_brk = 0;
            col      = txt_width(s + start, off - start, 0);
            if (col + w > cols && col > 0) { /* what followed the break still leaves no room */
                EMIT(start, off - start);
                start = off;
                col   = 0;
            }
            if (f & TXT_F_TAB)
                w = TXT_TAB - col % TXT_TAB;
        }
        if (f & TXT_F_SPACE) {
            /* a space never starts a wrapped line */
            brk_end  = off;
            brk_next = off + len;
            have_brk = 1;

        } else if (w == 2) {
            brk_end = brk_next = off + len;
            have_brk           = 1;
        }
        col += w;
        off += len;
    }
    if (start < n || nl == 0 || (n > 0 && s[n - 1] == '\n'))
        EMIT(start, n - start);
#undef EMIT
    return nl;
}

size_t txt_col_to_off(const char *s, size_t n, int col) {
    int c = 0;
    for (size_t off = 0; off < n;) {
        int    w, f;
        size_t len = txt_cluster(s + off, n - off, &w, &f);
        if (f & TXT_F_TAB)
            w = TXT_TAB - c % TXT_TAB;
        if (c + w > col)
            return off;
        c += w;
        off += len;
    }
    return n;
}

int txt_fit(txt_buf *out, const char *s, size_t n, int cols) {
    int w = txt_width(s, n, 0);
    if (w <= cols)
        return txt_buf_add(out, s, n) ? -1 : w;
    if (cols < 1)
        return 0;
    /* the head gets half of what the ellipsis leaves, the tail the rest: of two long ids or paths
     * that share a prefix, the end is what tells them apart */
    size_t h  = txt_col_to_off(s, n, (cols - 1) / 2);
    int    hw = txt_width(s, h, 0), room = cols - 1 - hw, rest = txt_width(s + h, n - h, hw + 1);
    size_t t = h;
    while (t < n && rest > room) { /* the first cluster boundary after which the rest fits */
        int    cw, f;
        size_t len = txt_cluster(s + t, n - t, &cw, &f);
        t += len;
        /* a tab's width depends on its column: with one still to come, the rest is measured again */
        rest = (f & TXT_F_TAB) || memchr(s + t, '\t', n - t) ? txt_width(s + t, n - t, hw + 1) : rest - cw;
    }
    if (txt_buf_add(out, s, h) || txt_buf_add(out, "\xE2\x80\xA6", 3) || txt_buf_add(out, s + t, n - t))
        return -1;
    return hw + 1 + rest;
}

/* ==== clusters of a code point array (the line editor's wide-character buffer) ============== */

/* The cluster starting at w[i] (i < n), measured by txt_cluster on its UTF-8 form so editing
 * and drawing agree: returns the index after it. A cluster longer than 64 code points is cut. */
size_t txt_wcluster_next(const wchar_t *w, size_t n, size_t i) {
    char   buf[64 * 4];
    size_t nb = 0, ncp = 0;
    for (size_t k = i; k < n && ncp < 64; k++, ncp++) {
        utf8proc_int32_t cp =
            utf8proc_codepoint_valid((utf8proc_int32_t)w[k]) ? (utf8proc_int32_t)w[k] : 0xFFFD;
        nb += (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)buf + nb);
    }
    if (nb == 0)
        return n;
    int    cw, f;
    size_t len = txt_cluster(buf, nb, &cw, &f), k = i;
    for (size_t off = 0; off < len && k < n; k++) {
        size_t l;
        decode(buf + off, nb - off, &l);
        off += l;
    }
    return k > i ? k : i + 1;
}

/* The start of the cluster that ends at i (0 < i <= n): clusters are walked from the last
 * newline or tab before it (those always stand alone). */
size_t txt_wcluster_prev(const wchar_t *w, size_t n, size_t i) {
    if (i == 0)
        return 0;
    size_t j = i - 1;
    while (j > 0 && w[j - 1] != L'\n' && w[j - 1] != L'\t')
        j--;
    for (size_t nx; (nx = txt_wcluster_next(w, n, j)) < i;)
        j = nx;
    return j;
}

/* ==== outside text on a terminal ============================================================= */

void txt_term_put(FILE *f, txt_esc *st, const char *s, size_t n) {
    /* standard output into a pipe or a file is the data a script asked for; standard error is
     * not (the reasoning goes there among notices, into a log that reaches a terminal later) */
    if (f != stderr && !isatty(fileno(f))) {
        fwrite(s, 1, n, f);
        return;
    }
    txt_buf b = {0};
    if (txt_escape(&b, st, s, n) == 0 && b.n)
        fwrite(b.p, 1, b.n, f);
    free(b.p);
}

void txt_term_end(FILE *f, txt_esc *st) {
    if (!st->n)
        return;
    int n = st->n;
    st->n = 0;
    txt_term_put(f, NULL, st->hold, (size_t)n);
}

int txt_ctrl_shown(const char *s, size_t n, char *out) {
    txt_buf b = {0};
    int     k = 0;
    if (txt_escape(&b, NULL, s, n) == 0 && b.n < 8) { /* the one escaping (esc.c) */
        memcpy(out, b.p, b.n);
        k = (int)b.n;
    }
    out[k] = 0;
    free(b.p);
    return k;
}

enum { SHOW_WRAP, SHOW_DRAWN, SHOW_RUNS };

/* s[0..n) onto out with every control character as its escape; SHOW_DRAWN (txt_term_drawn): \n
 * and \t left out and each byte that is not UTF-8 as U+FFFD; SHOW_RUNS (txt_shown_runs): \t as a
 * space, a byte that is not UTF-8 as U+FFFD, \n kept; SHOW_WRAP (txt_shown): those as they are. */
static int add_shown(txt_buf *out, const char *s, size_t n, int how) {
    size_t run  = 0; /* s[run..off) goes out as it is */
    int    mask = TXT_F_CTRL | (how == SHOW_DRAWN  ? TXT_F_NL | TXT_F_TAB | TXT_F_INVALID
                                : how == SHOW_RUNS ? TXT_F_TAB | TXT_F_INVALID
                                                   : 0);
    for (size_t off = 0; off < n;) {
        int    w, f;
        size_t len = txt_cluster(s + off, n - off, &w, &f);
        if (f & mask) {
            char e[8];
            if (txt_buf_add(out, s + run, off - run) ||
                ((f & TXT_F_INVALID) && txt_buf_add(out, "\xEF\xBF\xBD", 3)) ||
                ((f & TXT_F_TAB) && how == SHOW_RUNS && txt_buf_add(out, " ", 1)) ||
                ((f & TXT_F_CTRL) && txt_buf_add(out, e, (size_t)txt_ctrl_shown(s + off, len, e))))
                return -1;
            run = off + len;
        }
        off += len;
    }
    return txt_buf_add(out, s + run, n - run);
}

int txt_term_drawn(txt_buf *out, const char *s, size_t n) {
    return add_shown(out, s, n, SHOW_DRAWN);
}

int txt_shown(txt_buf *out, const char *s, size_t n) {
    return add_shown(out, s, n, SHOW_WRAP);
}

int txt_shown_runs(txt_buf *out, const char *s, size_t n) {
    return add_shown(out, s, n, SHOW_RUNS);
}

int txt_term_uri(txt_buf *out, const char *s, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    size_t            run   = 0;
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        if (c > 0x20 && c < 0x7f)
            continue;
        char pct[3] = {'%', hex[c >> 4], hex[c & 15]};
        if (txt_buf_add(out, s + run, k - run) || txt_buf_add(out, pct, 3))
            return -1;
        run = k + 1;
    }
    return txt_buf_add(out, s + run, n - run);
}

int txt_term_printf(FILE *f, const char *fmt, ...) {
    char    small[512], *big = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    const char *s = small;
    if ((size_t)n >= sizeof small) {
        if (!(big = malloc((size_t)n + 1)))
            return -1;
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        s = big;
    }
    /* a message, not a stream: escaped wherever it goes (a log file or a pipe into cat reaches
     * a terminal as well, and \e, \xHH, \uHHHH read as well in a file) */
    txt_buf b = {0};
    if (txt_escape(&b, NULL, s, (size_t)n) == 0 && b.n)
        fwrite(b.p, 1, b.n, f);
    free(b.p);
    free(big);
    return n;
}

void txt_print_wrapped(FILE *f, const char *s, int cols) {
    for (;;) {
        const char *eol = strchr(s, '\n');
        size_t      ln  = eol ? (size_t)(eol - s) : strlen(s);
        txt_line    lines[64];
        int         nl = txt_wrap(s, ln, cols, lines, 64), hang = nl > 1 ? txt_hang(s, ln, cols) : 0, ind = 0;
        size_t      at = 0;
        if (hang > 0) { /* the first row as it wraps, the rest in the second column */
            txt_term_printf(f, "%.*s\n", (int)lines[0].len, s);
            at  = lines[1].off;
            nl  = txt_wrap(s + at, ln - at, cols - hang, lines, 64);
            ind = hang;
        }
        for (int k = 0; k < nl && k < 64; k++)
            txt_term_printf(f, "%*s%.*s\n", ind, "", (int)lines[k].len, s + at + lines[k].off);
        if (!eol)
            break;
        s = eol + 1;
    }
}

/* The options of lo that name[0..n) names: 1 and *hit for a whole name or getopt's unique prefix;
 * more for an ambiguous prefix; 0 for none. */
static int opt_match(const struct option *lo, const char *name, size_t n, const struct option **hit) {
    int k = 0;
    for (; lo && lo->name; lo++)
        if (!strncmp(lo->name, name, n)) {
            if (strlen(lo->name) == n) {
                *hit = lo;
                return 1;
            }
            *hit = lo;
            k++;
        }
    return k;
}

void txt_getopt_error(FILE *f, int c, char *const argv[], const struct option *lo) {
    const char          *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    const char          *arg = argv[optind - 1], *eq = strchr(arg, '=');
    int                  lng = !strncmp(arg, "--", 2);
    size_t               n   = lng ? (eq ? (size_t)(eq - arg - 2) : strlen(arg + 2)) : 0;
    const struct option *hit = NULL;
    int                  k   = lng ? opt_match(lo, arg + 2, n, &hit) : 0;
    if (c == ':' && lng)
        txt_term_printf(f, "%s: %s needs a value\n", prog, arg);
    else if (c == ':')
        txt_term_printf(f, "%s: -%c needs a value\n", prog, optopt);
    else if (k == 1 && eq && hit->has_arg == no_argument)
        txt_term_printf(f, "%s: --%s takes no value\n", prog, hit->name);
    else if (k > 1) { /* a prefix of several: name them */
        txt_buf b = {0};
        for (const struct option *o = lo; o->name; o++)
            if (!strncmp(o->name, arg + 2, n) &&
                (txt_buf_add(&b, " --", 3) || txt_buf_add(&b, o->name, strlen(o->name))))
                break;
        txt_term_printf(f, "%s: '%.*s' is ambiguous:%.*s\n", prog, (int)n + 2, arg, (int)b.n, b.p ? b.p : "");
        free(b.p);
    } else if (lng)
        txt_term_printf(f, "%s: unknown option '%s'\n", prog, arg);
    else
        txt_term_printf(f, "%s: unknown option '-%c'\n", prog, optopt);
}

int txt_locale(char *note, size_t n) {
    note[0] = 0;
    setlocale(LC_ALL, "");
    setlocale(LC_NUMERIC, "C");
    char cs[64];
    snprintf(cs, sizeof cs, "%s", nl_langinfo(CODESET));
    if (!strcmp(cs, "UTF-8"))
        return 0;
    if (!strcmp(cs, "ANSI_X3.4-1968")) /* glibc's name for the C and POSIX locales' */
        snprintf(cs, sizeof cs, "ASCII");
    static const char *utf8[] = {"C.UTF-8", "C.utf8", "en_US.UTF-8"};
    for (size_t k = 0; k < sizeof utf8 / sizeof *utf8; k++)
        if (setlocale(LC_CTYPE, utf8[k]) && !strcmp(nl_langinfo(CODESET), "UTF-8")) {
            snprintf(
                note, n,
                "the locale's characters are %s, not UTF-8: k3chat reads and writes UTF-8 (LC_CTYPE=%s); "
                "set LANG=C.UTF-8 (or a language's .UTF-8 locale) to say so",
                cs, utf8[k]);
            return 1;
        }
    setlocale(LC_CTYPE, "");
    snprintf(note, n,
             "the locale's characters are %s, not UTF-8, and no UTF-8 locale is installed: characters that "
             "are not ASCII cannot be typed and may not show right",
             cs);
    return -1;
}
