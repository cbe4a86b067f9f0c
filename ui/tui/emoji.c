/* emoji.c: multi-emoji clusters, the rules and the bookkeeping without curses (see emoji.h). */
#include "emoji.h"
#include "k3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static int is_ri(utf8proc_int32_t c) {
    return c >= 0x1F1E6 && c <= 0x1F1FF;
}
static int is_mod(utf8proc_int32_t c) {
    return c >= 0x1F3FB && c <= 0x1F3FF;
}
static int is_tag(utf8proc_int32_t c) {
    return c >= 0xE0020 && c <= 0xE007F;
}

/* Code points of s[0..n), at most max; invalid bytes end the list. */
static int code_points(const char *s, size_t n, utf8proc_int32_t *cp, int max) {
    int k = 0;
    for (size_t off = 0; off < n && k < max;) {
        utf8proc_ssize_t l =
            utf8proc_iterate((const utf8proc_uint8_t *)s + off, (utf8proc_ssize_t)(n - off), &cp[k]);
        if (l <= 0)
            break;
        off += (size_t)l;
        k++;
    }
    return k;
}

/* A character curses keeps in the cell of the one before it: zero width, and not one that
 * joins a further emoji (ZWJ, tags: those are left out with what they join). */
static int keeps(utf8proc_int32_t c) {
    return c != 0x200D && !is_tag(c) && !is_mod(c) && utf8proc_charwidth(c) == 0;
}

#define CELL_MAX 5 /* characters of one curses cell (ncurses' CCHARW_MAX) */

int emj_joins(const char *s, size_t n) {
    utf8proc_int32_t cp[64];
    int              k = code_points(s, n, cp, 64), bits = 0, lost = 0;
    if (k < 2)
        return 0;
    if (is_ri(cp[0]) && is_ri(cp[1]))
        bits |= EMJ_FLAG;
    for (int i = 1; i < k; i++) {
        if (is_mod(cp[i]))
            bits |= EMJ_MOD;
        else if (cp[i] == 0x200D && i + 1 < k)
            bits |= EMJ_ZWJ;
        else if (is_tag(cp[i]))
            bits |= EMJ_ZWJ;
        if (!keeps(cp[i]) && cp[i] != 0x200D)
            lost = 1; /* a character the cell cannot hold */
    }
    if (k > CELL_MAX)
        lost = 1;
    return lost ? bits : 0;
}

int emj_fallback(const char *s, size_t n, wchar_t *out, int max, int *cells) {
    utf8proc_int32_t cp[64];
    int              k = code_points(s, n, cp, 64), m = 0;
    *cells = 1;
    if (max < 3) {
        if (max > 0)
            out[0] = 0;
        return 0;
    }
    if (k >= 2 && is_ri(cp[0]) && is_ri(cp[1])) { /* a flag: its region code */
        out[0] = (wchar_t)('A' + (cp[0] - 0x1F1E6));
        out[1] = (wchar_t)('A' + (cp[1] - 0x1F1E6));
        out[2] = 0;
        *cells = 2;
        return 2;
    }
    if (k == 0) {
        out[m++] = 0xFFFD;
    } else {
        out[m++] = (wchar_t)cp[0];
        for (int i = 1; i < k && m < max - 1 && m < CELL_MAX && keeps(cp[i]); i++)
            out[m++] = (wchar_t)cp[i];
    }
    out[m] = 0;
    return m;
}

int emj_mode(const char *setting, const char *term) {
    if (setting && *setting && strcmp(setting, "auto") != 0) {
        if (!strcmp(setting, "whole"))
            return EMJ_MODE_WHOLE;
        if (!strcmp(setting, "fallback"))
            return EMJ_MODE_FALLBACK;
        return -1;
    }
    /* the Linux console has no emoji glyphs at all */
    if (term && !strncmp(term, "linux", 5))
        return EMJ_MODE_FALLBACK;
    return EMJ_MODE_PROBE;
}

/* ==== the probe ============================================================== */

static const char *const samples[EMJ_PROBE_N] = {
    "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7", /* woman ZWJ woman ZWJ girl */
    "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7",                                         /* F R: the flag of France */
    "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",                                         /* thumbs up, medium skin   */
    "\xE2\x9D\xA4\xEF\xB8\x8F", /* heart + VS16 (EMJ_PROBE_VS16) */
    "\xE2\x8C\x9A\xEF\xB8\x8E", /* watch + VS15 (EMJ_PROBE_VS15), an emoji-variation-sequences.txt pair */
};
static const int sample_kind[EMJ_PROBE_N] = {EMJ_ZWJ, EMJ_FLAG, EMJ_MOD, 0, 0};

int emj_probe_request(txt_buf *out) {
    int rc = 0;
    for (int i = 0; i < EMJ_PROBE_N; i++) {
        rc |= txt_buf_add(out, "\033[1;1H", 6);
        rc |= txt_buf_add(out, samples[i], strlen(samples[i]));
        rc |= txt_buf_add(out, "\033[6n", 4);
    }
    rc |= txt_buf_add(out, "\033[c\033[1;1H\033[2K", 13);
    return rc ? -1 : 0;
}

size_t emj_probe_scan(const char *r, size_t n, int *widths, int *n_w, int *done, char *other, size_t *n_other,
                      size_t max_other) {
    size_t i = 0;
#define OTHER(p, l)                                                                                          \
    do {                                                                                                     \
        for (size_t q_ = 0; q_ < (l); q_++)                                                                  \
            if (*n_other < max_other)                                                                        \
                other[(*n_other)++] = (p)[q_];                                                               \
    } while (0)
    while (i < n) {
        if (r[i] != '\033') {
            OTHER(r + i, 1);
            i++;
            continue;
        }
        if (i + 1 >= n)
            break; /* wait for the rest */
        if (r[i + 1] != '[') {
            OTHER(r + i, 1);
            i++;
            continue;
        }
        size_t j = i + 2;
        while (j < n && ((r[j] >= '0' && r[j] <= '9') || r[j] == ';' || r[j] == '?'))
            j++;
        if (j >= n)
            break; /* incomplete */
        /* ROW ; COL (parsed by hand: the bytes are not a C string) */
        int    row = 0, col = 0, semi = 0;
        size_t k = i + 2;
        for (; k < j && r[k] >= '0' && r[k] <= '9' && row < 100000; k++)
            row = row * 10 + (r[k] - '0');
        if (k < j && r[k] == ';')
            semi = 1, k++;
        for (; k < j && r[k] >= '0' && r[k] <= '9' && col < 100000; k++)
            col = col * 10 + (r[k] - '0');
        if (r[j] == 'R' && semi && k == j && row > 0 && col > 0) {
            if (*n_w < EMJ_PROBE_N)
                widths[(*n_w)++] = col - 1;
        } else if (r[j] == 'c' && r[i + 2] == '?') {
            *done = 1;
        } else {
            OTHER(r + i, j + 1 - i); /* a key's escape sequence */
        }
        i = j + 1;
    }
#undef OTHER
    return i;
}

int emj_probe_result(const int *widths, int n_w) {
    int ok = 0;
    for (int i = 0; i < n_w && i < EMJ_PROBE_N; i++)
        if (widths[i] >= 1 && widths[i] <= 2)
            ok |= sample_kind[i];
    return ok;
}

static int probe_cols(const int *widths, int n_w, int k) {
    if (n_w <= k)
        return 0;
    int w = widths[k];
    return w == 1 || w == 2 ? w : 0;
}

int emj_probe_vs16(const int *widths, int n_w) {
    return probe_cols(widths, n_w, EMJ_PROBE_VS16);
}

int emj_probe_vs15(const int *widths, int n_w) {
    return probe_cols(widths, n_w, EMJ_PROBE_VS15);
}

void emj_sgr(char *out, size_t n, int fg, int bg, int attrs) {
    static const struct {
        int         bit;
        const char *code;
    } at[]   = {{EMJ_A_BOLD, ";1"},      {EMJ_A_DIM, ";2"},   {EMJ_A_ITALIC, ";3"},
                {EMJ_A_UNDERLINE, ";4"}, {EMJ_A_BLINK, ";5"}, {EMJ_A_REVERSE, ";7"}};
    size_t k = (size_t)snprintf(out, n, "\033[0");
    for (size_t i = 0; i < sizeof at / sizeof at[0] && k < n; i++)
        if (attrs & at[i].bit)
            k += (size_t)snprintf(out + k, n - k, "%s", at[i].code);
    for (int layer = 0; layer < 2 && k < n; layer++) {
        int c = layer ? bg : fg, base = layer ? 40 : 30;
        if (c < 0 || c > 255)
            continue; /* default, or a direct color curses could not give us: the default */
        if (c < 8)
            k += (size_t)snprintf(out + k, n - k, ";%d", base + c);
        else if (c < 16)
            k += (size_t)snprintf(out + k, n - k, ";%d", base + 60 + c - 8);
        else
            k += (size_t)snprintf(out + k, n - k, ";%d;5;%d", base + 8, c);
    }
    if (k < n)
        snprintf(out + k, n - k, "m");
}

/* ==== the clusters on the screen ============================================ */

static int grow(emj_set *s) {
    emj_rec *r = k3_grow(s->r, &s->cap, (size_t)s->n + 1, sizeof *r, 64);
    if (!r)
        return -1;
    s->r = r;
    return 0;
}

int emj_set_add(emj_set *s, int y, int x, int w, int stand, const char *sgr, const char *c, size_t n) {
    size_t ls = strlen(sgr);
    if (ls + n > sizeof s->r[0].bytes || grow(s))
        return -1;
    emj_rec *r = &s->r[s->n++];
    r->y = y, r->x = x, r->w = w, r->gen = s->gen, r->stand = stand;
    r->seq = ++s->seq;
    memcpy(r->bytes, sgr, ls);
    memcpy(r->bytes + ls, c, n);
    r->len = ls + n;
    return 0;
}

int emj_set_scroll(emj_set *s, int y0, int h, int k) {
    int n = s->n;
    for (int i = 0; i < n; i++) {
        emj_rec r  = s->r[i];
        int     ny = r.y - k, inside = ny >= y0 && ny < y0 + h;
        if (r.y < y0 || r.y >= y0 + h || r.w == 0)
            continue;
        if (r.gen == s->gen) { /* drawn in this frame: it moves */
            if (inside)
                s->r[i].y = ny;
            else
                s->r[i].w = 0;
            continue;
        }
        if (!inside)
            continue;
        if (grow(s))
            return -1;
        r.y          = ny;
        r.gen        = s->gen;
        r.seq        = ++s->seq;
        s->r[s->n++] = r;
    }
    return 0;
}

void emj_set_drop(emj_set *s, int k) {
    if (k >= 0 && k < s->n)
        s->r[k].w = 0;
}

/* by place, then oldest first */
static int rec_cmp(const void *a, const void *b) {
    const emj_rec *p = a, *q = b;
    if (p->y != q->y)
        return p->y < q->y ? -1 : 1;
    if (p->x != q->x)
        return p->x < q->x ? -1 : 1;
    return p->seq < q->seq ? -1 : p->seq > q->seq;
}

int emj_set_frame(emj_set *s, const unsigned char *touched, int rows, int cols, unsigned char *repaint) {
    int nrep = 0, out = 0;
    memset(repaint, 0, (size_t)(rows > 0 ? rows : 0));
    if (s->n > 1)
        qsort(s->r, (size_t)s->n, sizeof *s->r, rec_cmp);
    for (int a = 0; a < s->n;) {
        int b = a;
        while (b < s->n && s->r[b].y == s->r[a].y && s->r[b].x == s->r[a].x)
            b++;
        /* [a, b): the records of one place; the newest of this frame wins */
        int fresh = -1;
        for (int k = a; k < b; k++)
            if (s->r[k].gen == s->gen && s->r[k].w > 0)
                fresh = k;
        int y = s->r[a].y, inside = y >= 0 && y < rows;
        for (int k = a; k < b; k++) {
            emj_rec *r = &s->r[k];
            if (r->gen == s->gen)
                continue;
            /* an earlier frame's record: gone when its row was drawn again or it left the screen,
             * or when this frame put a record in its place */
            int gone = !inside || r->x + r->w > cols || touched[y] || fresh >= 0;
            if (!gone) {
                s->r[out++] = *r;
                continue;
            }
            if (inside && r->x + r->w <= cols && !(fresh >= 0 && s->r[fresh].w == r->w) && !repaint[y]) {
                repaint[y] = 1;
                nrep++;
            }
        }
        if (fresh >= 0) {
            emj_rec *f = &s->r[fresh];
            if (f->y >= 0 && f->y < rows && f->x >= 0 && f->x + f->w <= cols)
                s->r[out++] = *f;
        }
        a = b;
    }
    s->n = out;
    return nrep;
}

int emj_set_output(emj_set *s, const unsigned char *touched, int rows, txt_buf *out) {
    int rc = 0, any = 0;
    for (int k = 0; k < s->n; k++) {
        const emj_rec *r = &s->r[k];
        if (touched && (r->y < 0 || r->y >= rows || !touched[r->y]))
            continue;
        char pos[32];
        int  l = snprintf(pos, sizeof pos, "%s\033[%d;%dH", any ? "" : "\0337", r->y + 1, r->x + 1);
        rc |= txt_buf_add(out, pos, (size_t)l);
        rc |= txt_buf_add(out, r->bytes, r->len);
        any = 1;
    }
    if (any)
        rc |= txt_buf_add(out, "\033[0m\0338", 6);
    s->gen++;
    return rc ? -1 : 0;
}

void emj_set_clear(emj_set *s) {
    s->n = 0;
}

void emj_set_free(emj_set *s) {
    free(s->r);
    memset(s, 0, sizeof *s);
}
