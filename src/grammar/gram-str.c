/* gram-str.c: strings for the JSON Schema compiler (gram-impl.h): minLength/maxLength
 * unrolled, pattern and format (their automata, gram-re.c, within lengths), the format table
 * with ajv-formats' checks of a value, and a pattern's check of an enum/const value. */
#include "gram-impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* minLength mn and maxLength mx (-1: none) of a string: *none 1 when no length is both (the
 * string writes nothing: g_finish reports a schema left with nothing); one past G_MAX_UNROLL
 * is refused. */
k3_status sc_str_lengths(const char *path, long mn, long mx, int *none) {
    *none = mx >= 0 && mn > mx;
    if (!*none && (mn > G_MAX_UNROLL || mx > G_MAX_UNROLL))
        return sc_unsupported(path, mn > G_MAX_UNROLL ? "minLength" : "maxLength", "a length above 4096");
    return K3_OK;
}

/* A string of pattern pat and format fmt (one of them or both: both must hold, the product of
 * their automata) within minLength mn and maxLength mx (-1: none), JSON-escaped or raw, from -> to
 * (between the quotes). */
k3_status sc_pattern_string(sc *c, const jv *pat, const jv *fmt, const char *path, int raw, long mn, long mx,
                            int from, int to) {
    const char     *re[2];
    size_t          n[2];
    int             n_re = 0, none;
    k3_status       st;
    const g_format *f;
    if (pat && pat->kind != JV_STRING)
        return sc_bad(path, "pattern", "a string");
    if (pat)
        re[n_re] = pat->s, n[n_re++] = pat->n;
    if (fmt && (st = sc_format_of(fmt, path, &f)))
        return st;
    if (fmt)
        re[n_re] = f->re, n[n_re++] = strlen(f->re);
    if ((st = sc_str_lengths(path, mn, mx, &none)) || none)
        return st;
    if (mn == 0 && mx < 0 && n_re == 1)
        return g_pattern(c->g, re[0], n[0], path, raw, from, to);
    return g_pattern_len(c->g, re, n, n_re, path, raw, mn, mx, from, to);
}

k3_status sc_emit_string(sc *c, const jv *s, const char *path, int from, int to) {
    long      mn, mx;
    k3_status st;
    int       a = sc_node(c), b = sc_node(c);
    if ((st = sc_count(s, "minLength", path, 0, &mn)) || (st = sc_count(s, "maxLength", path, -1, &mx)))
        return st;
    const jv *pat = jv_get(s, "pattern"), *fmt = jv_get(s, "format");
    if ((st = g_byte(c->g, from, '"', '"', a)) || (st = g_byte(c->g, b, '"', '"', to)))
        return st;
    int none;
    if (pat || fmt)
        return sc_pattern_string(c, pat, fmt, path, 0, mn, mx, a, b);
    if ((st = sc_str_lengths(path, mn, mx, &none)) || none)
        return st;
    /* A position more than max_len + 1 characters from both bounds cannot see them within one
     * vocabulary piece: it shares the mask cache of the first such position (its reading node
     * and the nodes inside its character, created in the same order each time). */
    long far = (long)c->g->voc->max_len + 1;
    int  cur = a, rep = -1, rep_in = -1, rep_n = 0;
    for (long k = 0, end = mx > mn ? mx : mn; k < end; k++) { /* mn head positions, then the tail's */
        int in = c->g->n_node, tail = k >= mn;
        if (k == mn)
            rep = -1; /* the tail's positions are not the head's */
        int nx = sc_node(c);
        if ((tail && (st = g_eps(c->g, cur, b))) || (st = g_str_char(c->g, cur, nx)))
            return st;
        int n_in = c->g->n_node - in - 1; /* the nodes inside this character, after nx */
        if ((tail ? mx - k : mn - k) > far) {
            if (rep < 0)
                rep = cur, rep_in = in + 1, rep_n = n_in;
            else if (n_in == rep_n) {
                if ((st = g_share(c->g, cur, rep)))
                    return st;
                for (int j = 0; j < n_in; j++)
                    if ((st = g_share(c->g, in + 1 + j, rep_in + j)))
                        return st;
            }
        }
        cur = nx;
    }
    if (mx < 0 && (st = g_str_char(c->g, cur, cur)))
        return st;
    return g_eps(c->g, cur, b);
}
/* ---- formats as ajv-formats 3.0 (full mode) reads them ---- */

static int digits_at(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

static int num2(const char *s) {
    return (s[0] - '0') * 10 + s[1] - '0';
}

/* ^(\d\d\d\d)-(\d\d)-(\d\d)$, a month 1-12, a day of that month (February 29 in leap years). */
static int fmt_date(const char *s, size_t n) {
    static const int days[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (n != 10 || !digits_at(s, 4) || s[4] != '-' || !digits_at(s + 5, 2) || s[7] != '-' ||
        !digits_at(s + 8, 2))
        return 0;
    int y = num2(s) * 100 + num2(s + 2), m = num2(s + 5), d = num2(s + 8);
    int leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    return m >= 1 && m <= 12 && d >= 1 && d <= (m == 2 && leap ? 29 : days[m]);
}

/* ^(\d\d):(\d\d):(\d\d(?:\.\d+)?)(z|([+-])(\d\d)(?::?(\d\d))?)$ (case-insensitive; the zone is
 * required), hours 0-23, minutes 0-59, seconds below 60, or a leap second at 23:59 UTC. */
static int fmt_time(const char *s, size_t n) {
    size_t i = 8;
    if (n < 9 || !digits_at(s, 2) || s[2] != ':' || !digits_at(s + 3, 2) || s[5] != ':' ||
        !digits_at(s + 6, 2))
        return 0;
    if (s[i] == '.') {
        size_t j = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == j)
            return 0;
    }
    char sec[64];
    snprintf(sec, sizeof sec, "%.*s", (int)(i - 6 < 63 ? i - 6 : 63), s + 6);
    int    hr = num2(s), mn = num2(s + 3), sign = 1, th = 0, tm = 0;
    double sc_ = strtod(sec, NULL);
    if (i + 1 == n && (s[i] == 'z' || s[i] == 'Z'))
        ;
    else if (i + 3 <= n && (s[i] == '+' || s[i] == '-') && digits_at(s + i + 1, 2)) {
        sign = s[i] == '-' ? -1 : 1, th = num2(s + i + 1), i += 3;
        if (i + 1 < n && s[i] == ':')
            i++;
        if (i + 2 == n && digits_at(s + i, 2))
            tm = num2(s + i);
        else if (i != n)
            return 0;
    } else
        return 0;
    if (th > 23 || tm > 59)
        return 0;
    if (hr <= 23 && mn <= 59 && sc_ < 60)
        return 1;
    int umin = mn - tm * sign, uhr = hr - th * sign - (umin < 0);
    return (uhr == 23 || uhr == -1) && (umin == 59 || umin == -1) && sc_ < 61;
}

/* ECMAScript's \s (without the u flag the same set): the separator date-time splits on. */
static int js_space(const char *s, size_t n, size_t *len) {
    static const uint32_t ws[] = {0xa0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                  0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a, 0x2028,
                                  0x2029, 0x202f, 0x205f, 0x3000, 0xfeff};
    uint8_t               c    = (uint8_t)s[0];
    *len                       = 1;
    if (c == ' ' || (c >= '\t' && c <= '\r'))
        return 1;
    if (c < 0xc2 || c >= 0xf0)
        return 0;
    size_t   k  = c < 0xe0 ? 2 : 3;
    uint32_t cp = c & (k == 2 ? 0x1f : 0x0f);
    if (k > n)
        return 0;
    for (size_t i = 1; i < k; i++)
        cp = cp << 6 | ((uint8_t)s[i] & 0x3f);
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
        if (cp == ws[i])
            return *len = k, 1;
    return 0;
}

/* split(/t|\s/i) into exactly a date and a time. */
static int fmt_date_time(const char *s, size_t n) {
    size_t at = n, len = 0, l;
    for (size_t i = 0; i < n; i++)
        if (s[i] == 't' || s[i] == 'T' || js_space(s + i, n - i, &l)) {
            if (at < n)
                return 0;
            at = i, len = s[i] == 't' || s[i] == 'T' ? 1 : l;
        }
    return at < n && fmt_date(s, at) && fmt_time(s + at + len, n - at - len);
}

static int hex_at(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (sc_hex_val(s[i]) < 0)
            return 0;
    return 1;
}

/* ^(?:urn:uuid:)?[0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}$ (case-insensitive) */
static int fmt_uuid(const char *s, size_t n) {
    if (n == 45 && !strncasecmp(s, "urn:uuid:", 9))
        s += 9, n -= 9;
    return n == 36 && hex_at(s, 8) && s[8] == '-' && hex_at(s + 9, 4) && s[13] == '-' && hex_at(s + 14, 4) &&
           s[18] == '-' && hex_at(s + 19, 4) && s[23] == '-' && hex_at(s + 24, 12);
}

static int alnum(char ch) {
    return (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z');
}

/* Dot-separated labels [a-z0-9]([a-z0-9-]*[a-z0-9])? of at most max characters each (any case),
 * *dots the dots between them. */
static int labels(const char *s, size_t n, size_t max, size_t *dots) {
    *dots = 0;
    for (size_t i = 0, start = 0; i <= n; i++)
        if (i == n || s[i] == '.') {
            if (i == start || i - start > max || !alnum(s[start]) || !alnum(s[i - 1]))
                return 0;
            *dots += i < n, start = i + 1;
        } else if (!alnum(s[i]) && s[i] != '-')
            return 0;
    return 1;
}

/* ^[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*@
 *  (?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$ (case-insensitive) */
static int fmt_email(const char *s, size_t n) {
    size_t i = 0, dots;
    for (char prev = '.'; i < n && s[i] != '@'; prev = s[i++])
        if (s[i] == '.' ? prev == '.' : !(alnum(s[i]) || (s[i] && strchr("!#$%&'*+/=?^_`{|}~-", s[i]))))
            return 0;
    if (i == 0 || i == n || s[i - 1] == '.')
        return 0;
    return labels(s + i + 1, n - i - 1, SIZE_MAX, &dots) && dots >= 1;
}

/* ^(?=.{1,253}\.?$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-0-9a-z]{0,61}[0-9a-z])?)*\.?$
 * (case-insensitive): labels of 1 to 63 characters, 253 characters and an optional final dot. */
static int fmt_hostname(const char *s, size_t n) {
    size_t dots;
    if (n > 254 || (n == 254 && s[253] != '.'))
        return 0;
    n -= n && s[n - 1] == '.';
    return n && labels(s, n, 63, &dots);
}

/* ^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$ */
static int fmt_ipv4(const char *s, size_t n) {
    size_t i = 0;
    for (int part = 0; part < 4; part++) {
        size_t j = i;
        while (j < n && j - i < 4 && s[j] >= '0' && s[j] <= '9')
            j++;
        if (j == i || j - i > 3 || (j - i > 1 && s[i] == '0') || atoi(s + i) > 255 ||
            (part < 3 ? j == n || s[j] != '.' : j != n))
            return 0;
        i = j + 1;
    }
    return 1;
}

/* ajv-formats' ipv6 (case-insensitive): 8 groups of 1 to 4 hex digits, the last two of them
 * perhaps a dotted IPv4 address; or "::" once, standing for at least one group, with at most 7
 * beside it. */
static int fmt_ipv6(const char *s, size_t n) {
    size_t i      = 0;
    int    groups = 0, dbl = n >= 2 && s[0] == ':' && s[1] == ':';
    if (dbl && (i = 2) == n)
        return 1;
    while (i < n) {
        size_t j = i;
        if (memchr(s + i, '.', n - i) && !memchr(s + i, ':', n - i)) { /* an IPv4 address: two groups */
            if (!fmt_ipv4(s + i, n - i))
                return 0;
            groups += 2;
            break;
        }
        while (j < n && j - i < 5 && sc_hex_val(s[j]) >= 0)
            j++;
        if (j == i || j - i > 4)
            return 0;
        groups++;
        if (j == n)
            break;
        if (s[j] != ':' || j + 1 == n)
            return 0;
        i = j + 1;
        if (s[i] == ':') {
            if (dbl)
                return 0;
            dbl = 1, i++;
        }
    }
    return dbl ? groups <= 7 : groups == 8;
}

/* ^P(?!$)((\d+Y)?(\d+M)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+S)?)?|(\d+W)?)$ */
static int fmt_duration(const char *s, size_t n) {
    const char *unit = "YMD";
    size_t      i = 1, j = 1;
    int         time = 0;
    if (n < 2 || s[0] != 'P')
        return 0;
    while (j < n && s[j] >= '0' && s[j] <= '9')
        j++;
    if (j > 1 && j + 1 == n && s[j] == 'W')
        return 1;
    while (i < n) {
        if (s[i] == 'T') { /* once, and a field after it */
            if (time++ || ++i == n)
                return 0;
            unit = "HMS";
        }
        for (j = i; j < n && s[j] >= '0' && s[j] <= '9';)
            j++;
        const char *u = j > i && j < n && s[j] ? strchr(unit, s[j]) : NULL;
        if (!u)
            return 0;
        unit = u + 1, i = j + 1;
    }
    return 1;
}

#define G_TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define G_DATE                                                                                               \
    "[0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)"
#define G_OCTET "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#define G_HEX4 "[0-9a-f]{1,4}"
#define G_LABEL "[a-z0-9]([a-z0-9-]{0,14}[a-z0-9])?"
#define G_DIG "[0-9]{1,4}"
#define G_DAYS G_DIG "Y(" G_DIG "M)?(" G_DIG "D)?|" G_DIG "M(" G_DIG "D)?|" G_DIG "D"
#define G_HOURS "T(" G_DIG "H(" G_DIG "M)?(" G_DIG "S)?|" G_DIG "M(" G_DIG "S)?|" G_DIG "S)"

static const g_format formats[] = {
    {"date", "^" G_DATE "$", fmt_date},
    {"time", "^" G_TIME "$", fmt_time},
    {"date-time", "^" G_DATE "T" G_TIME "$", fmt_date_time},
    {"duration", "^P((" G_DAYS ")(" G_HOURS ")?|" G_HOURS "|" G_DIG "W)$", fmt_duration},
    {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", fmt_uuid},
    {"email", "^[a-z0-9]{1,16}(\\.[a-z0-9]{1,16}){0,2}@[a-z0-9]{1,16}(\\.[a-z0-9]{1,16}){1,3}$", fmt_email},
    {"hostname", "^" G_LABEL "(\\." G_LABEL "){0,3}$", fmt_hostname},
    {"ipv4", "^(" G_OCTET "\\.){3}" G_OCTET "$", fmt_ipv4},
    /* 8 groups, or "::" with p groups before it and at most 7 - p after */
    {"ipv6",
     "^(" G_HEX4 "(:" G_HEX4 "){7}|::(" G_HEX4 "(:" G_HEX4 "){0,6})?|" G_HEX4 "::(" G_HEX4 "(:" G_HEX4
     "){0,5})?|" G_HEX4 "(:" G_HEX4 "){1}::(" G_HEX4 "(:" G_HEX4 "){0,4})?|" G_HEX4 "(:" G_HEX4
     "){2}::(" G_HEX4 "(:" G_HEX4 "){0,3})?|" G_HEX4 "(:" G_HEX4 "){3}::(" G_HEX4 "(:" G_HEX4
     "){0,2})?|" G_HEX4 "(:" G_HEX4 "){4}::(" G_HEX4 "(:" G_HEX4 ")?)?|" G_HEX4 "(:" G_HEX4 "){5}::(" G_HEX4
     ")?|" G_HEX4 "(:" G_HEX4 "){6}::)$",
     fmt_ipv6},
};

/* The entry of format keyword fmt; one this table lacks is refused, naming those it has. */
k3_status sc_format_of(const jv *fmt, const char *path, const g_format **out) {
    char why[256];
    int  at;
    if (fmt->kind != JV_STRING)
        return sc_bad(path, "format", "a string");
    for (size_t k = 0; k < sizeof formats / sizeof *formats; k++)
        if (!strcmp(fmt->s, formats[k].name))
            return *out = &formats[k], K3_OK;
    at = snprintf(why, sizeof why, "format \"%.64s\" (supported:", fmt->s);
    for (size_t k = 0; k < sizeof formats / sizeof *formats && at > 0 && (size_t)at < sizeof why; k++)
        at += snprintf(why + at, sizeof why - (size_t)at, "%s %s", k ? "," : "", formats[k].name);
    if (at > 0 && (size_t)at < sizeof why)
        snprintf(why + at, sizeof why - (size_t)at, ")");
    return sc_unsupported(path, "format", why);
}

/* *ok: string x matches pattern re (ECMAScript: anywhere in x unless anchored), matched by the
 * pattern's automaton with unbounded text around it (g_fill of a check grammar); compiled once
 * per pattern keyword of the compile. */
k3_status sc_pattern_ok(sc *c, const jv *re, const jv *x, const char *path, int *ok) {
    int i = 0;
    *ok   = 0;
    while (i < c->n_pat && c->pat[i].re != re)
        i++;
    if (i == c->n_pat) {
        k3_grammar *g = NULL;
        k3_status   st;
        sc_pat     *p = k3_grow(c->pat, &c->cap_pat, (size_t)c->n_pat + 1, sizeof *p, 4);
        if (!p)
            return g_nomem();
        c->pat = p;
        if ((st = g_new(c->g->voc, "json schema", &g)))
            return st;
        g->free_fill = 1;
        g->meter     = c->g->meter;
        int b = g_node_new(g), e = g_node_new(g);
        if (e < 0)
            st = g_nomem();
        else {
            g->node[e].ret = 1, g->root = b;
            if (!(st = g_pattern(g, re->s, re->n, path, 1, b, e)) && g_finish(g) == K3_ERR_ARG)
                k3_grammar_free(g), g = NULL; /* matches no string */
        }
        if (st) {
            k3_grammar_free(g);
            return st;
        }
        c->checked += 16 + (g ? g->n_node : 0);
        c->pat[c->n_pat++] = (sc_pat){re, g};
    }
    k3_gmatch *m = NULL;
    k3_status  st;
    if (!c->pat[i].g)
        return K3_OK;
    c->checked += 1 + (long)(x->n / 16);
    if (!(st = k3_gmatch_new(c->pat[i].g, &m)))
        *ok = !k3_gmatch_accept_bytes(m, x->s, x->n) && k3_gmatch_complete(m);
    k3_gmatch_free(m);
    return st;
}
