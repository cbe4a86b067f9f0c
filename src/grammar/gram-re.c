/* gram-re.c: JSON string characters and the `pattern` subset that maps to a finite automaton.
 *
 * The automaton reads the JSON text of a string (between the quotes), so a character that JSON
 * must escape is emitted in its escaped form (" as \", \ as \\, controls as \n or \u00XX).
 * Supported: literals (UTF-8 too), ., [classes] with ranges of any characters and negation, \d \w
 * \s \D \W \S (ECMAScript's sets with the u flag, as ajv compiles patterns: \d and \w ASCII, \s
 * with the Unicode spaces and line terminators), escaped punctuation, \t \n \r \f \v \0 \xHH
 * \uHHHH (a surrogate pair of them: one character), [\b], groups ( ) and (?: ), |, the
 * quantifiers * + ? {n} {n,} {n,m} (lazy forms too: same language), ^ at the start and $ at the
 * end. A class is a set of ASCII characters plus code point ranges, written as UTF-8 byte ranges.
 * Without ^ (or $) the match may start (or end) anywhere, as ECMAScript's RegExp.test; the
 * text before (after) it is at most G_FILL_MAX characters, so a model cannot ramble there
 * (with minLength or maxLength beside the pattern, any text the bounds allow: g_pattern_len).
 * Refused with the construct named: lookaround, backreferences, \b, \p, \u{...}, named groups,
 * anchors elsewhere, classes of more than RE_MAX_RANGES ranges, more than G_RE_MAX_REP
 * repetitions, groups nested more than G_RE_MAX_DEPTH deep, and {n,m} (n or m above 1) of a
 * group that may be empty.
 * The parser runs twice over a quantified atom: once to find its end (emit 0), then once per
 * copy (emit 1), so no syntax tree is kept.
 */
#include "gram-impl.h"
#include "json.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define G_RE_MAX_REP 1000
#define G_RE_MAX_DEPTH 64 /* groups inside groups */
#define G_STR_(x) #x
#define G_STR(x) G_STR_(x)

/* One JSON string character: plain ASCII, a valid UTF-8 sequence, or an escape (no lone
 * surrogates, so a code point counts once as JSON Schema's lengths do). */
static k3_status utf8_multi(k3_grammar *g, int from, int to) {
    int       c1 = g_node_new(g), c2 = g_node_new(g), c3 = g_node_new(g);
    k3_status st = K3_OK;
    if (c1 < 0 || c2 < 0 || c3 < 0)
        return g_nomem();
    int e0 = g_node_new(g), ed = g_node_new(g), f0 = g_node_new(g), f4 = g_node_new(g);
    if ((st = g_byte(g, c1, 0x80, 0xbf, to)) || (st = g_byte(g, c2, 0x80, 0xbf, c1)) ||
        (st = g_byte(g, c3, 0x80, 0xbf, c2)) || (st = g_byte(g, from, 0xc2, 0xdf, c1)) ||
        (st = g_byte(g, from, 0xe0, 0xe0, e0)) || (st = g_byte(g, e0, 0xa0, 0xbf, c1)) ||
        (st = g_byte(g, from, 0xe1, 0xec, c2)) || (st = g_byte(g, from, 0xee, 0xef, c2)) ||
        (st = g_byte(g, from, 0xed, 0xed, ed)) || (st = g_byte(g, ed, 0x80, 0x9f, c1)) ||
        (st = g_byte(g, from, 0xf0, 0xf0, f0)) || (st = g_byte(g, f0, 0x90, 0xbf, c2)) ||
        (st = g_byte(g, from, 0xf1, 0xf3, c3)) || (st = g_byte(g, from, 0xf4, 0xf4, f4)) ||
        (st = g_byte(g, f4, 0x80, 0x8f, c2)))
        return st;
    return K3_OK;
}

k3_status g_raw_multi(k3_grammar *g, int from, int to) {
    return utf8_multi(g, from, to);
}

k3_status g_str_char(k3_grammar *g, int from, int to) {
    k3_status st;
    int e = g_node_new(g), u1 = g_node_new(g), u2 = g_node_new(g), u3 = g_node_new(g), u4 = g_node_new(g),
        d2 = g_node_new(g);
    if (d2 < 0)
        return g_nomem();
    if ((st = g_byte(g, from, 0x20, 0x21, to)) || (st = g_byte(g, from, 0x23, 0x5b, to)) ||
        (st = g_byte(g, from, 0x5d, 0x7f, to)) || (st = utf8_multi(g, from, to)) ||
        (st = g_byte(g, from, '\\', '\\', e)) || (st = g_byte(g, e, '"', '"', to)) ||
        (st = g_byte(g, e, '\\', '\\', to)) || (st = g_byte(g, e, '/', '/', to)) ||
        (st = g_byte(g, e, 'b', 'b', to)) || (st = g_byte(g, e, 'f', 'f', to)) ||
        (st = g_byte(g, e, 'n', 'n', to)) || (st = g_byte(g, e, 'r', 'r', to)) ||
        (st = g_byte(g, e, 't', 't', to)) || (st = g_byte(g, e, 'u', 'u', u1)))
        return st;
    /* \uXXXX without D800-DFFF: [0-9a-cA-Ce-fE-F]XXX or [dD][0-7]XX */
    const char *hex[3] = {"09", "af", "AF"};
    for (int k = 0; k < 3; k++)
        if ((st = g_byte(g, u3, hex[k][0], hex[k][1], u4)) ||
            (st = g_byte(g, u2, hex[k][0], hex[k][1], u3)) || (st = g_byte(g, u4, hex[k][0], hex[k][1], to)))
            return st;
    if ((st = g_byte(g, u1, '0', '9', u2)) || (st = g_byte(g, u1, 'a', 'c', u2)) ||
        (st = g_byte(g, u1, 'A', 'C', u2)) || (st = g_byte(g, u1, 'e', 'f', u2)) ||
        (st = g_byte(g, u1, 'E', 'F', u2)) || (st = g_byte(g, u1, 'd', 'd', d2)) ||
        (st = g_byte(g, u1, 'D', 'D', d2)) || (st = g_byte(g, d2, '0', '7', u3)))
        return st;
    return K3_OK;
}

k3_status g_fill(k3_grammar *g, int raw, int from, int to) {
    k3_status st = g_eps(g, from, to);
    if (g->free_fill) { /* any text: a loop of characters on a node of its own */
        int n = g_node_new(g);
        if (!st && n < 0)
            st = g_nomem();
        if (st || (st = g_eps(g, from, n)) || (st = g_eps(g, n, to)))
            return st;
        return raw ? ((st = g_byte(g, n, 0x00, 0x7f, n)) ? st : g_raw_multi(g, n, n)) : g_str_char(g, n, n);
    }
    for (int k = 0; k < G_FILL_MAX && !st; k++) {
        int nx = g_node_new(g);
        if (!(st = raw ? g_byte(g, from, 0x00, 0x7f, nx) : g_str_char(g, from, nx)) &&
            !(st = raw ? g_raw_multi(g, from, nx) : K3_OK))
            st = g_eps(g, nx, to);
        from = nx;
    }
    return st;
}

/* ---- the pattern parser -------------------------------------------------------------- */

typedef struct re_p {
    k3_grammar *g;
    const char *s, *path;
    size_t      n, i;
    size_t      whole; /* the pattern's length with a final $ (n stops before it), for messages */
    int         depth; /* groups open at p->i */
    int         nul;   /* 1: what was just read (an atom, a sequence, alternatives) may be empty */
    int         raw;   /* 1: characters as themselves (a tool call's string), 0: JSON-escaped */
    k3_status   st;
} re_p;

static int re_fail(re_p *p, const char *what) {
    if (!p->st)
        p->st = k3_err(K3_ERR_UNSUPPORTED,
                       "json schema: unsupported keyword \"pattern\" at %s: %s (at offset %zu of %.*s)",
                       p->path, what, p->i, (int)p->whole, p->s);
    return -1;
}

/* A set of characters: the ASCII ones, and the others as code point ranges (at most
 * RE_MAX_RANGES; kept sorted and merged by set_norm). */
#define RE_MAX_RANGES 1024
#define RE_MAX_CP 0x10ffff
typedef struct re_set {
    uint8_t  ascii[128];
    int      n; /* ranges in lo/hi */
    uint32_t lo[RE_MAX_RANGES], hi[RE_MAX_RANGES];
} re_set;

/* ECMAScript's \s beyond ASCII: WhiteSpace (NBSP, ZWNBSP, the Zs category) and the line
 * terminators U+2028/9 (ECMA-262, 22.2.2.9; ajv compiles patterns with the u flag). */
static const uint32_t re_space[][2] = {{0xa0, 0xa0},     {0x1680, 0x1680}, {0x2000, 0x200a},
                                       {0x2028, 0x2029}, {0x202f, 0x202f}, {0x205f, 0x205f},
                                       {0x3000, 0x3000}, {0xfeff, 0xfeff}};

static int cp_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts and merges the ranges (adjacent ones too). */
static void set_norm(re_set *c) {
    uint32_t r[RE_MAX_RANGES][2];
    int      n = 0;
    for (int k = 0; k < c->n; k++)
        r[k][0] = c->lo[k], r[k][1] = c->hi[k];
    qsort(r, (size_t)c->n, sizeof *r, cp_cmp);
    for (int k = 0; k < c->n; k++) {
        if (n && r[k][0] <= c->hi[n - 1] + 1) {
            if (r[k][1] > c->hi[n - 1])
                c->hi[n - 1] = r[k][1];
            continue;
        }
        c->lo[n] = r[k][0], c->hi[n] = r[k][1], n++;
    }
    c->n = n;
}

/* Adds the code points lo..hi: 0, or -1 when the set has too many ranges. */
static int set_add(re_set *c, uint32_t lo, uint32_t hi) {
    for (; lo <= hi && lo < 128; lo++)
        c->ascii[lo] = 1;
    if (lo > hi)
        return 0;
    if (c->n == RE_MAX_RANGES)
        set_norm(c);
    if (c->n == RE_MAX_RANGES)
        return -1;
    c->lo[c->n] = lo, c->hi[c->n] = hi, c->n++;
    return 0;
}

static void set_range(re_set *c, int lo, int hi) {
    set_add(c, (uint32_t)lo, (uint32_t)hi); /* ASCII only: no range is added */
}

/* Every character the set does not hold. */
static void set_negate(re_set *c) {
    re_set t = {0};
    set_norm(c);
    for (int k = 0; k < 128; k++)
        t.ascii[k] = !c->ascii[k];
    uint32_t at = 0x80;
    for (int k = 0; k < c->n; k++) {
        if (c->lo[k] > at)
            t.lo[t.n] = at, t.hi[t.n] = c->lo[k] - 1, t.n++;
        at = c->hi[k] + 1;
    }
    if (at <= RE_MAX_CP)
        t.lo[t.n] = at, t.hi[t.n] = RE_MAX_CP, t.n++;
    *c = t;
}

/* Adds the class \e names (d w s D W S); *ok 0 when e names none. */
static void set_class(re_set *c, char e, int *ok) {
    re_set t = {0};
    *ok      = 1;
    switch (e | 32) {
    case 'd':
        set_range(&t, '0', '9');
        break;
    case 'w':
        set_range(&t, '0', '9'), set_range(&t, 'a', 'z'), set_range(&t, 'A', 'Z'), set_range(&t, '_', '_');
        break;
    case 's':
        set_range(&t, 9, 13), set_range(&t, ' ', ' ');
        for (size_t k = 0; k < sizeof re_space / sizeof *re_space; k++)
            set_add(&t, re_space[k][0], re_space[k][1]);
        break;
    default:
        *ok = 0;
        return;
    }
    if (e >= 'A' && e <= 'Z')
        set_negate(&t);
    for (int k = 0; k < 128; k++)
        c->ascii[k] |= t.ascii[k];
    for (int k = 0; k < t.n; k++)
        set_add(c, t.lo[k], t.hi[k]); /* at most 9 ranges each: a class of 14 such escapes fits */
}

/* The character an escape \e stands for (t n r f v and punctuation), or -1. */
static int esc_char(char e) {
    switch (e) {
    case 't':
        return '\t';
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 'f':
        return '\f';
    case 'v':
        return '\v';
    case '0':
        return 0;
    }
    if (strchr("\\/^$.*+?()[]{}|-\"'", e) && e)
        return (unsigned char)e;
    return -1;
}

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Code points lo..hi of one UTF-8 length, as chains of byte ranges from -> to (RE2's split: a
 * range is cut where a lower byte would not cover its whole 80-BF span). */
static void emit_utf8(re_p *p, uint32_t lo, uint32_t hi, int from, int to) {
    int len = lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
    for (int i = 1; i < len; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m))
            continue;
        if (lo & m) {
            emit_utf8(p, lo, lo | m, from, to);
            emit_utf8(p, (lo | m) + 1, hi, from, to);
            return;
        }
        if ((hi & m) != m) {
            emit_utf8(p, lo, (hi & ~m) - 1, from, to);
            emit_utf8(p, hi & ~m, hi, from, to);
            return;
        }
    }
    char a[4], b[4];
    jv_utf8(lo, a), jv_utf8(hi, b);
    for (int k = 0, cur = from; k < len && !p->st; k++) {
        int nx = k + 1 == len ? to : g_node_new(p->g);
        p->st  = nx < 0 ? g_nomem() : g_byte(p->g, cur, (uint8_t)a[k], (uint8_t)b[k], nx);
        cur    = nx;
    }
}

/* Code points lo..hi (0x80 and up) from -> to, split at the UTF-8 lengths, surrogates left out. */
static void emit_cps(re_p *p, uint32_t lo, uint32_t hi, int from, int to) {
    static const uint32_t cut[][2] = {{0x80, 0x7ff}, {0x800, 0xd7ff}, {0xe000, 0xffff}, {0x10000, RE_MAX_CP}};
    for (size_t k = 0; k < sizeof cut / sizeof *cut && !p->st; k++) {
        uint32_t a = lo > cut[k][0] ? lo : cut[k][0], b = hi < cut[k][1] ? hi : cut[k][1];
        if (a <= b)
            emit_utf8(p, a, b, from, to);
    }
}

/* The code point of the UTF-8 sequence at s (n bytes left): its length, or 0 when invalid. */
static size_t utf8_cp(const char *s, size_t n, uint32_t *cp) {
    const uint8_t *u   = (const uint8_t *)s;
    size_t         len = u[0] < 0x80                   ? 1
                         : u[0] >= 0xc2 && u[0] < 0xe0 ? 2
                         : u[0] >= 0xe0 && u[0] < 0xf0 ? 3
                         : u[0] >= 0xf0 && u[0] < 0xf5 ? 4
                                                       : 0;
    if (!len || len > n)
        return 0;
    uint32_t c = len == 1 ? u[0] : u[0] & (0x7f >> len);
    for (size_t k = 1; k < len; k++) {
        if ((u[k] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (u[k] & 0x3f);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < least[len] || c > RE_MAX_CP || (c >= 0xd800 && c < 0xe000))
        return 0;
    *cp = c;
    return len;
}

static int esc_cmp(const void *a, const void *b) {
    return strcmp(a, b);
}

/* The JSON escapes esc[0..n) (\" \\ \n \u0001 ...; no one a prefix of another) from -> to as a
 * trie: one node per common prefix, and the last bytes of escapes that differ only there in runs
 * (\u0000-\u0008 is one edge), so the 30 controls of a negated class take 7 nodes, not 140 (a
 * length bound multiplies them: g_pattern_len). Sorts esc. */
static void emit_escapes(re_p *p, char (*esc)[8], int n, int from, int to) {
    int at[8] = {from}; /* at[j]: the node after the first j bytes of the escape being written */
    qsort(esc, (size_t)n, sizeof *esc, esc_cmp);
    for (int i = 0, k; i < n && !p->st; i = k) {
        size_t len = strlen(esc[i]), l = 0;
        while (i && esc[i - 1][l] == esc[i][l])
            l++;
        for (size_t j = l + 1; j < len && !p->st; j++)
            if ((at[j] = g_node_new(p->g)) < 0)
                p->st = g_nomem();
            else
                p->st = g_byte(p->g, at[j - 1], (uint8_t)esc[i][j - 1], (uint8_t)esc[i][j - 1], at[j]);
        for (k = i + 1; k < n && strlen(esc[k]) == len && !memcmp(esc[k], esc[i], len - 1) &&
                        esc[k][len - 1] == esc[k - 1][len - 1] + 1;)
            k++;
        if (!p->st)
            p->st = g_byte(p->g, at[len - 1], (uint8_t)esc[i][len - 1], (uint8_t)esc[k - 1][len - 1], to);
    }
}

/* Emits the set's characters (escaped as JSON needs) from -> to. */
static void emit_set(re_p *p, const re_set *c, int from, int to) {
    k3_grammar *g = p->g;
    char        esc[34][8]; /* the members JSON escapes: " \ and the 32 controls */
    int         n_esc = 0;
    for (int k = 0; k < 128 && !p->st; k++) {
        if (!c->ascii[k])
            continue;
        if (p->raw) { /* a run of members as one byte range */
            int hi = k;
            while (hi + 1 < 128 && c->ascii[hi + 1])
                hi++;
            p->st = g_byte(g, from, k, hi, to);
            k     = hi;
        } else if (k == '"' || k == '\\')
            snprintf(esc[n_esc++], sizeof *esc, "\\%c", k);
        else if (k < 0x20) {
            const char *sh = k == '\n'   ? "\\n"
                             : k == '\t' ? "\\t"
                             : k == '\r' ? "\\r"
                             : k == '\f' ? "\\f"
                             : k == '\b' ? "\\b"
                                         : NULL;
            if (sh)
                snprintf(esc[n_esc++], sizeof *esc, "%s", sh);
            else
                snprintf(esc[n_esc++], sizeof *esc, "\\u%04x", k);
        } else {
            int hi = k;
            while (hi + 1 < 128 && c->ascii[hi + 1] && hi + 1 != '"' && hi + 1 != '\\')
                hi++;
            p->st = g_byte(g, from, k, hi, to);
            k     = hi;
        }
    }
    if (n_esc && !p->st)
        emit_escapes(p, esc, n_esc, from, to);
    if (c->n == 1 && c->lo[0] == 0x80 && c->hi[0] == RE_MAX_CP && !p->st) /* any: the shared form */
        p->st = utf8_multi(g, from, to);
    else
        for (int k = 0; k < c->n && !p->st; k++)
            emit_cps(p, c->lo[k], c->hi[k], from, to);
}

static int re_alt(re_p *p, int emit, int from, int to);

/* \uHHHH at s (n bytes left): 0 and its value, or -1. */
static int hex4(const char *s, size_t n, uint32_t *v) {
    if (n < 6 || s[0] != '\\' || s[1] != 'u')
        return -1;
    *v = 0;
    for (int j = 2; j < 6; j++) {
        int h = hexval(s[j]);
        if (h < 0)
            return -1;
        *v = *v << 4 | (uint32_t)h;
    }
    return 0;
}

/* One character at p->i that stands for itself (a literal, UTF-8 too, or an escape: \t \n \r \f \v
 * \0, punctuation, \xHH, \uHHHH and a surrogate pair of them; in_class: \b, the backspace):
 * its code point, p->i past it; -1 when it is none of these (p->i unchanged, nothing reported). */
static long re_char(re_p *p, int in_class) {
    const char *s = p->s + p->i;
    size_t      n = p->n - p->i;
    uint32_t    cp;
    int         v;
    if (s[0] != '\\') {
        size_t len = utf8_cp(s, n, &cp);
        return len ? (p->i += len, (long)cp) : -1;
    }
    if (n < 2)
        return -1;
    if (in_class && s[1] == 'b')
        return p->i += 2, '\b';
    if ((v = esc_char(s[1])) >= 0)
        return p->i += 2, v;
    if (s[1] == 'x' && n >= 4 && hexval(s[2]) >= 0 && hexval(s[3]) >= 0)
        return p->i += 4, hexval(s[2]) * 16 + hexval(s[3]);
    uint32_t hi, lo;
    if (hex4(s, n, &hi))
        return -1;
    if (hi < 0xd800 || hi >= 0xe000)
        return p->i += 6, (long)hi;
    if (hi >= 0xdc00 || hex4(s + 6, n - 6, &lo) || lo < 0xdc00 || lo >= 0xe000)
        return -1; /* a lone surrogate */
    p->i += 12;
    return 0x10000 + ((long)(hi - 0xd800) << 10) + (long)(lo - 0xdc00);
}

/* [class]: the set it names. ECMAScript's: [] is empty, [^] is any character. */
static int re_class(re_p *p, re_set *c) {
    int neg = 0;
    p->i++;
    if (p->i < p->n && p->s[p->i] == '^')
        neg = 1, p->i++;
    memset(c, 0, sizeof *c);
    while (p->i < p->n && p->s[p->i] != ']') {
        if (p->s[p->i] == '\\' && p->i + 1 < p->n) {
            int ok;
            set_class(c, p->s[p->i + 1], &ok);
            if (ok) {
                p->i += 2;
                continue;
            }
        }
        long lo = re_char(p, 1), hi = lo;
        if (lo < 0)
            return re_fail(p, p->s[p->i] == '\\' ? "an escape in a class it cannot read"
                                                 : "invalid UTF-8 in a class");
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if ((hi = re_char(p, 1)) < 0)
                return re_fail(p, "a class range it cannot read");
            if (hi < lo)
                return re_fail(p, "a class range out of order");
        }
        if (set_add(c, (uint32_t)lo, (uint32_t)hi))
            return re_fail(p, "a class of more than " G_STR(RE_MAX_RANGES) " ranges");
    }
    if (p->i >= p->n)
        return re_fail(p, "an unterminated class");
    p->i++;
    if (neg)
        set_negate(c);
    else
        set_norm(c);
    return 0;
}

/* A one-character atom: a class, ., a class escape or a character. Its own function, so that
 * the set stays off the frames of the group recursion. */
static __attribute__((noinline)) int re_char_atom(re_p *p, int emit, int from, int to) {
    re_set c  = {0};
    char   ch = p->s[p->i];
    int    ok = 0;
    long   v;
    if (ch == '[') {
        if (re_class(p, &c))
            return -1;
    } else if (ch == '.') { /* any character but the line terminators \n \r U+2028 U+2029 */
        set_range(&c, 0, 127);
        c.ascii['\n'] = c.ascii['\r'] = 0;
        set_add(&c, 0x80, 0x2027), set_add(&c, 0x202a, RE_MAX_CP);
        p->i++;
    } else if (ch == '\\' && p->i + 1 < p->n && (set_class(&c, p->s[p->i + 1], &ok), ok))
        p->i += 2;
    else if ((v = re_char(p, 0)) >= 0)
        set_add(&c, (uint32_t)v, (uint32_t)v);
    else
        return re_fail(p, ch != '\\'         ? "invalid UTF-8"
                          : p->i + 1 >= p->n ? "a trailing backslash"
                                             : "an escape outside the supported subset (\\b, \\p, \\u{...}, "
                                               "backreferences, ...)");
    if (emit)
        emit_set(p, &c, from, to);
    return p->st ? -1 : 0;
}

static int re_atom(re_p *p, int emit, int from, int to) {
    char ch = p->s[p->i];
    p->nul  = 0; /* a group's is its alternatives' (re_alt) */
    if (ch == '(') {
        if (p->depth == G_RE_MAX_DEPTH) /* the parser recurses per group: bound the stack */
            return re_fail(p, "groups nested more than " G_STR(G_RE_MAX_DEPTH) " deep");
        p->i++;
        if (p->i < p->n && p->s[p->i] == '?') {
            if (p->i + 1 < p->n && p->s[p->i + 1] == ':')
                p->i += 2;
            else
                return re_fail(p, "lookaround or a named group");
        }
        p->depth++;
        if (re_alt(p, emit, from, to))
            return -1;
        p->depth--;
        if (p->i >= p->n || p->s[p->i] != ')')
            return re_fail(p, "an unclosed group");
        p->i++;
        return 0;
    }
    if (ch == '^' || ch == '$')
        return re_fail(p, "an anchor that is not at the start (^) or the end ($)");
    if (ch && strchr("*+?{", ch))
        return re_fail(p, "a quantifier with nothing to repeat");
    return re_char_atom(p, emit, from, to);
}

/* Reads a quantifier at p->i: *lo, *hi (-1: unbounded); 0 when there is none. */
static int re_quant(re_p *p, int *lo, int *hi) {
    if (p->i >= p->n)
        return 0;
    char ch = p->s[p->i];
    if (ch == '*' || ch == '+' || ch == '?') {
        *lo = ch == '+';
        *hi = ch == '?' ? 1 : -1;
        p->i++;
    } else if (ch == '{') {
        size_t k = p->i + 1;
        long   a = 0, b;
        if (k >= p->n || p->s[k] < '0' || p->s[k] > '9')
            return re_fail(p, "a { that is not a quantifier");
        while (k < p->n && p->s[k] >= '0' && p->s[k] <= '9' && a <= G_RE_MAX_REP)
            a = a * 10 + (p->s[k++] - '0');
        b = a;
        if (k < p->n && p->s[k] == ',') {
            k++;
            if (k < p->n && p->s[k] == '}')
                b = -1;
            else
                for (b = 0; k < p->n && p->s[k] >= '0' && p->s[k] <= '9' && b <= G_RE_MAX_REP;)
                    b = b * 10 + (p->s[k++] - '0');
        }
        if (k >= p->n || p->s[k] != '}')
            return re_fail(p, "a { that is not a quantifier");
        if (a > G_RE_MAX_REP || b > G_RE_MAX_REP)
            return re_fail(p, "a repetition count above 1000");
        if (b >= 0 && b < a)
            return re_fail(p, "a repetition {n,m} with m < n");
        p->i = k + 1;
        *lo  = (int)a;
        *hi  = (int)b;
    } else
        return 0;
    if (p->i < p->n && p->s[p->i] == '?') /* lazy: the same strings */
        p->i++;
    return 1;
}

static int re_seq(re_p *p, int emit, int from, int to) {
    int cur = from, all = 1;
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        size_t a = p->i;
        if (re_atom(p, 0, 0, 0))
            return -1;
        size_t b   = p->i;
        int    nul = p->nul, lo = 1, hi = 1, q = re_quant(p, &lo, &hi);
        if (q < 0)
            return -1;
        /* Copies of something that may be empty chain their empty paths: from one position the
         * automaton reaches every later copy without reading (((a|){300}){300}: 90,000 at once,
         * minutes per token). The same strings have a form without it: (a|){3} is a{0,3}. */
        if (nul && (lo > 1 || hi > 1))
            return re_fail(p, "a counted repetition of a group that can match the empty string "
                              "(write it so the group cannot be empty: (a|){3} is a{0,3})");
        all &= nul || lo == 0;
        size_t after = p->i;
        if (!emit)
            continue;
        int reps = 0;
        for (int k = 0; k < lo; k++, reps++) { /* mandatory copies */
            int nx = g_node_new(p->g);
            p->i   = a;
            if (re_atom(p, 1, cur, nx))
                return -1;
            cur = nx;
        }
        if (hi < 0) { /* a loop: cur -atom-> back to cur */
            int l = g_node_new(p->g), r = g_node_new(p->g);
            p->i = a;
            if ((p->st = g_eps(p->g, cur, l)) || re_atom(p, 1, l, r) || (p->st = g_eps(p->g, r, l)))
                return re_fail(p, "out of memory");
            cur = l;
        } else if (hi > lo) {
            int end = g_node_new(p->g);
            for (int k = lo; k < hi; k++) {
                int nx = g_node_new(p->g);
                p->i   = a;
                if ((p->st = g_eps(p->g, cur, end)) || re_atom(p, 1, cur, nx))
                    return re_fail(p, "out of memory");
                cur = nx;
            }
            if ((p->st = g_eps(p->g, cur, end)))
                return -1;
            cur = end;
        }
        (void)b;
        p->i = after;
    }
    if (emit && (p->st = g_eps(p->g, cur, to)))
        return -1;
    p->nul = all;
    return 0;
}

static int re_alt(re_p *p, int emit, int from, int to) {
    for (int nul = 0;;) {
        if (re_seq(p, emit, from, to))
            return -1;
        nul |= p->nul;
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        p->nul = nul;
        return 0;
    }
}

k3_status g_pattern(k3_grammar *g, const char *re, size_t n, const char *path, int raw, int from, int to) {
    re_p   p  = {.g = g, .s = re, .n = n, .whole = n, .path = path, .raw = raw};
    size_t bs = 0; /* backslashes before a final $: an odd count escapes it */
    while (n && bs + 1 < n && re[n - 2 - bs] == '\\')
        bs++;
    int anch_s = n && re[0] == '^', anch_e = n && re[n - 1] == '$' && bs % 2 == 0;
    int a = g_node_new(g), b = g_node_new(g);
    if (a < 0 || b < 0)
        return g_nomem();
    p.i = (size_t)anch_s;
    p.n = n - (size_t)anch_e;
    if (re_alt(&p, 1, a, b))
        return p.st;
    if (p.i < p.n)
        return re_fail(&p, "an unbalanced )"), p.st;
    k3_status st;
    if ((st = anch_s ? g_eps(g, from, a) : g_fill(g, raw, from, a)))
        return st;
    return anch_e ? g_eps(g, b, to) : g_fill(g, raw, b, to);
}

/* ---- patterns within length bounds, and two patterns at once ------------------------------
 * minLength / maxLength beside a pattern (or format): the strings both allow are the product of
 * the pattern's automaton, built in a scratch grammar, with a counter of code points: 0..mx, or
 * 0..mn saturating (mx < 0: no maxLength). A pattern beside a format (both must hold) is the same
 * product with the second automaton as one more factor: a byte is read where both automata read
 * it (their ranges intersected), a move without reading is either one's. Both automata write a
 * character one way (emit_set: " as \", a control as \n or \u00XX, UTF-8 as itself; only the free
 * text around an unanchored pattern takes every escape), so their intersection over bytes is
 * their intersection over strings, less some spellings of the free text. Only the reachable
 * tuples (nodes, reading state, count) are written. A byte begins a character unless it is a
 * UTF-8 continuation byte or, in the escaped form, part of an escape after its backslash (the
 * letter, \u's four hex digits): the reading state (LC_*) tells which. With a length bound the
 * text around an unanchored pattern is a loop there (free_fill): the counter bounds it, and a
 * minLength past G_FILL_MAX characters stays reachable; without one, G_FILL_MAX characters. The
 * product has at most G_LEN_MAX_NODES nodes; past that the schema is refused naming the path and
 * the keyword (the length bound, or format beside the pattern). */

enum { LC_CHAR, LC_ESC, LC_HEX4, LC_HEX3, LC_HEX2, LC_HEX1, LC_N };

/* Reading byte b in state d: the next state; *inc 1 when b begins a character. */
static int lc_step(int raw, int d, int b, int *inc) {
    *inc = 0;
    if (d == LC_CHAR) {
        if (b >= 0x80 && b <= 0xbf) /* a UTF-8 continuation byte */
            return LC_CHAR;
        *inc = 1;
        return !raw && b == '\\' ? LC_ESC : LC_CHAR;
    }
    if (d == LC_ESC)
        return b == 'u' ? LC_HEX4 : LC_CHAR;
    return d == LC_HEX1 ? LC_CHAR : d + 1;
}

/* The first byte above b where lc_step's result may change in state d (256: none). */
static int lc_cut(int raw, int d, int b) {
    static const int cuts[][5] = {{'\\', '\\' + 1, 0x80, 0xc0, 256}, {'u', 'u' + 1, 256}, {256}};
    const int       *c         = d == LC_CHAR ? cuts[0] : d == LC_ESC ? cuts[1] : cuts[2];
    if (raw && d == LC_CHAR)
        c += 2; /* no escapes: only the continuation bytes differ */
    while (*c <= b)
        c++;
    return *c;
}

typedef struct lc_prod {
    k3_grammar *g;
    int64_t     n1; /* the second factor's nodes (1 for one pattern: its node 0 reads any byte) */
    struct lc_ent {
        int64_t key;  /* (((node * n1 + node1) * LC_N + state) * (top + 1) + count) of a product node */
        int32_t id;   /* its node in g */
    } * e;            /* (n), in the order made: the breadth-first queue */
    int32_t *hash;    /* (hcap) entry + 1 by key (g_index_build), 0 empty */
    int32_t *rep;     /* (n_pairs * LC_N * 2) node + 1 of each zone's first (lc_share), or NULL */
    int64_t  n_pairs; /* node pairs: the first factor's nodes times n1 */
    int      n, cap, hcap, top, over;
    long     mn, mx, far;
} lc_prod;

static uint32_t lc_hash(int64_t k) {
    return (uint32_t)(((uint64_t)k * 0x9e3779b97f4a7c15ull) >> 32);
}
static uint32_t lc_hash_at(const void *ctx, int i) {
    return lc_hash(((const lc_prod *)ctx)->e[i].key);
}

/* The product node of (node pair, state d, count c), the pair node * P->n1 + the second's node:
 * its index in P (created if new), -1 on out of memory or past G_LEN_MAX_NODES (P->over). */
static int lc_get(lc_prod *P, int64_t node, int d, long c) {
    int64_t key = (node * LC_N + d) * (P->top + 1) + c;
    if (P->hash) {
        uint32_t k = lc_hash(key) & (uint32_t)(P->hcap - 1);
        for (; P->hash[k]; k = (k + 1) & (uint32_t)(P->hcap - 1))
            if (P->e[P->hash[k] - 1].key == key)
                return P->hash[k] - 1;
    }
    if (P->n == G_LEN_MAX_NODES)
        return P->over = 1, -1;
    struct lc_ent *ne = k3_grow(P->e, &P->cap, P->n + 1, sizeof *ne, 256);
    if (!ne)
        return -1;
    P->e = ne;
    if (2 * (P->n + 1) > P->hcap) {
        int      cap = P->hcap ? 2 * P->hcap : 1024;
        int32_t *h   = g_index_build(cap, P->n, lc_hash_at, P);
        if (!h)
            return -1;
        free(P->hash);
        P->hash = h, P->hcap = cap;
    }
    int gid = g_node_new(P->g);
    if (gid < 0)
        return -1;
    int i      = P->n++;
    P->e[i]    = (struct lc_ent){key, gid};
    uint32_t k = lc_hash(key) & (uint32_t)(P->hcap - 1);
    while (P->hash[k])
        k = (k + 1) & (uint32_t)(P->hcap - 1);
    P->hash[k] = i + 1;
    return i;
}

/* After the product is written, the counts far from the bounds share mask caches: a node takes
 * the cache of the first node of its (node pair, reading state) group in its zone (g_share). A
 * cache pass from that node stands for the others, its DFA reading each shared group as one
 * state, so the counts a pass walks are not the real ones: what a piece reaches from any count
 * of a zone must behave alike, the same edges (no bound within far characters: a piece adds at
 * most far - 1) and the same liveness, which the count changes even far from the bounds: an
 * unanchored 16-character literal within maxLength 50 still fits after 34 characters of free
 * text, not after 35 (sharing by distance alone let the masks take pieces that strand the string
 * there). Zone 2 (at or above minLength, where a group is live up to some count and dead above it)
 * ends far characters before the first count where a group that is live below it is dead; zone
 * 1 (below minLength, where liveness may depend on the count in any way) shares only when every
 * group is all live or all dead over the counts its passes can reach. 0, or -1 on out of memory. */
static int lc_share(lc_prod *P, int to) {
    size_t   n_grp = (size_t)P->n_pairs * LC_N;
    uint8_t *live = k3_calloc((size_t)P->n, 1), *seen = k3_calloc(n_grp, 1); /* seen: 1 live, 2 dead */
    int32_t *dead = k3_malloc(n_grp * sizeof *dead); /* a group's least dead count from minLength up */
    int      base = P->n ? P->e[0].id : 0, rc = -1, uniform1 = 1;
    long     cut = P->mx, w1 = (P->mx >= 0 && P->mx < P->mn ? P->mx : P->mn) - 1; /* zone 1's counts */
    if (!live || !seen || !dead)
        goto done;
    for (int changed = 1; changed;) { /* live: it ends the string, or an edge leads to a live node */
        changed = 0;
        for (int i = P->n - 1; i >= 0; i--) {
            const g_node *gn = &P->g->node[P->e[i].id];
            K3_ASSERT(P->e[i].id == base + i); /* the product's nodes were made in a row */
            for (int k = 0; k < gn->n && !live[i]; k++) {
                int j = gn->e[k].to - base;
                if (gn->e[k].to == to || (j >= 0 && j < P->n && live[j]))
                    live[i] = 1, changed = 1;
            }
        }
    }
    for (size_t g = 0; g < n_grp; g++)
        dead[g] = INT32_MAX;
    for (int i = 0; i < P->n; i++) {
        long   c   = (long)(P->e[i].key % (P->top + 1));
        size_t grp = (size_t)(P->e[i].key / (P->top + 1));
        if (c <= w1 && (seen[grp] |= live[i] ? 1 : 2) == 3)
            uniform1 = 0;
        if (c >= P->mn && !live[i] && c < dead[grp])
            dead[grp] = (int32_t)c;
    }
    for (int i = 0; i < P->n; i++) { /* groups live at some count from minLength up */
        long   c   = (long)(P->e[i].key % (P->top + 1));
        size_t grp = (size_t)(P->e[i].key / (P->top + 1));
        if (c >= P->mn && live[i] && dead[grp] < cut)
            cut = dead[grp];
    }
    for (int i = 0; i < P->n; i++) {
        long   c    = (long)(P->e[i].key % (P->top + 1));
        size_t grp  = (size_t)(P->e[i].key / (P->top + 1));
        int    zone = uniform1 && c + P->far < P->mn && (P->mx < 0 || c + P->far < P->mx) ? 1
                      : c >= P->mn && P->mx >= 0 && c + P->far < cut                      ? 2
                                                                                          : 0;
        if (!zone)
            continue;
        int32_t *r = &P->rep[grp * 2 + (size_t)zone - 1];
        if (!*r)
            *r = P->e[i].id + 1;
        else if (g_share(P->g, P->e[i].id, *r - 1))
            goto done;
    }
    rc = 0;
done:
    free(live), free(seen), free(dead);
    return rc;
}

/* The most characters one piece of the vocabulary can add inside pattern automaton s: the lead
 * bytes (all but UTF-8's continuation bytes, which lc_step does not count) of its longest prefix
 * of bytes that s reads somewhere. A piece reads no further inside the string: past that prefix
 * it has left it, or does not fit. For "^[a-z ]+$" that is the longest piece of letters and
 * spaces, far below the longest piece (max_len), so more counts are far from both bounds. */
static long lc_far(const k3_grammar *s) {
    const k3_gvocab *v     = s->voc;
    uint64_t         rd[4] = {0};
    long             most  = 0;
    for (int i = 0; i < s->n_node; i++)
        for (int k = 0; k < s->node[i].n; k++)
            if (s->node[i].e[k].kind == GE_BYTE)
                for (int b = s->node[i].e[k].lo; b <= s->node[i].e[k].hi; b++)
                    rd[b >> 6] |= 1ull << (b & 63);
    for (int32_t i = 0; i < v->n_sorted; i++) {
        const uint8_t *p = (const uint8_t *)v->spiece[i];
        long           k = 0;
        for (uint32_t j = 0; j < v->splen[i] && rd[p[j] >> 6] >> (p[j] & 63) & 1; j++)
            k += p[j] < 0x80 || p[j] > 0xbf;
        most = k > most ? k : most;
    }
    return most;
}

/* The factors' automata: pattern re[f] (n[f] bytes) of each of the n_re, from a[f] to b[f] of
 * s[f] (bounded 1: a length bound, which bounds the free text around a match); *far the least of
 * their lc_far. */
static k3_status lc_factors(k3_grammar *g, const char *const *re, const size_t *n, int n_re, const char *path,
                            int raw, int bounded, k3_grammar **s, int *a, int *b, long *far) {
    k3_status st = K3_OK;
    for (int f = 0; f < n_re && !st; f++) {
        if ((st = g_new(g->voc, g->what, &s[f])))
            break;
        s[f]->free_fill = bounded; /* a bound: the counter bounds the free text */
        s[f]->meter     = g->meter;
        if ((a[f] = g_node_new(s[f])) < 0 || (b[f] = g_node_new(s[f])) < 0)
            st = g_nomem();
        else if (!(st = g_pattern(s[f], re[f], n[f], path, raw, a[f], b[f]))) {
            long lf = lc_far(s[f]); /* a piece reads within both: the lesser bound holds */
            *far    = *far < 0 || lf < *far ? lf : *far;
        }
    }
    return st;
}

/* The product node here (factor nodes sn, pair n0 n1, UTF-8 state d, count c): its moves without
 * reading (either factor's) and its byte ranges both factors read, to the product nodes they reach
 * (made by lc_get). -1 when one cannot be made (P->over, out of memory) or *st is set. */
static int lc_moves(lc_prod *P, const g_node *const *sn, int raw, int n0, int n1, int d, long c, int32_t here,
                    k3_status *st) {
    long mn = P->mn, mx = P->mx;
    for (int f = 0; f < 2; f++) /* a move without reading: either factor's */
        for (int k = 0; k < sn[f]->n; k++) {
            const g_edge *e = &sn[f]->e[k];
            K3_ASSERT(e->kind == GE_BYTE || e->kind == GE_EPS); /* a pattern reads bytes only */
            if (e->kind != GE_EPS)
                continue;
            int j = lc_get(P, f ? n0 * P->n1 + e->to : e->to * P->n1 + n1, d, c);
            if (j < 0 || (*st = g_eps(P->g, here, P->e[j].id)))
                return -1;
        }
    for (int k = 0; k < sn[0]->n; k++)
        for (int k1 = 0; k1 < sn[1]->n; k1++) { /* a byte both read */
            const g_edge *e = &sn[0]->e[k], *e1 = &sn[1]->e[k1];
            if (e->kind != GE_BYTE || e1->kind != GE_BYTE)
                continue;
            int top = e->hi < e1->hi ? e->hi : e1->hi;
            for (int lo = e->lo > e1->lo ? e->lo : e1->lo, hi; lo <= top;
                 lo     = hi + 1) { /* runs of one state */
                int inc, d2 = lc_step(raw, d, lo, &inc), cut = lc_cut(raw, d, lo);
                hi      = cut - 1 < top ? cut - 1 : top;
                long c2 = c + inc;
                if (mx >= 0 && c2 > mx)
                    continue;
                int j = lc_get(P, e->to * P->n1 + e1->to, d2, mx < 0 && c2 > mn ? mn : c2);
                if (j < 0 || (*st = g_byte(P->g, here, lo, hi, P->e[j].id)))
                    return -1;
            }
        }
    return 0;
}

k3_status g_pattern_len(k3_grammar *g, const char *const *re, const size_t *n, int n_re, const char *path,
                        int raw, long mn, long mx, int from, int to) {
    k3_grammar *s[2] = {NULL, NULL};
    lc_prod     P    = {.g = g, .mn = mn, .mx = mx, .top = (int)(mx >= 0 ? mx : mn), .n1 = 1};
    k3_status   st   = K3_OK;
    int         a[2] = {0, 0}, b[2] = {0, 0};
    long        far = -1, ends = 0; /* ends: product nodes that end the string */
    g_edge      any_e    = {.kind = GE_BYTE, .lo = 0, .hi = 255, .to = 0}; /* one pattern: the second */
    g_node      any_byte = {.e = &any_e, .n = 1, .reads = 1, .live = 1};   /* factor reads any byte */
    if ((st = lc_factors(g, re, n, n_re, path, raw, mn > 0 || mx >= 0, s, a, b, &far)))
        goto done;
    P.far = far + 1;
    if (n_re == 2)
        P.n1 = s[1]->n_node;
    P.n_pairs    = s[0]->n_node * P.n1;
    size_t n_rep = (size_t)P.n_pairs * LC_N * 2; /* the shares: only where they fit */
    if (n_rep <= ((size_t)1 << 22) &&
        (g_charge(g, n_rep * sizeof *P.rep) || !(P.rep = k3_calloc(n_rep, sizeof *P.rep))))
        goto fail;
    if (lc_get(&P, a[0] * P.n1 + a[1], LC_CHAR, 0) < 0 || (st = g_eps(g, from, P.e[0].id)))
        goto fail;
    for (int i = 0; i < P.n; i++) { /* breadth first: P.e[] is the queue */
        int64_t       key = P.e[i].key, pair = key / (P.top + 1) / LC_N;
        long          c = (long)(key % (P.top + 1));
        int           d = (int)(key / (P.top + 1) % LC_N), n0 = (int)(pair / P.n1), n1 = (int)(pair % P.n1);
        const g_node *sn[2] = {&s[0]->node[n0], n_re == 2 ? &s[1]->node[n1] : &any_byte};
        int32_t       here  = P.e[i].id;
        if (n0 == b[0] && n1 == b[1] && d == LC_CHAR && c >= mn && (st = (ends++, g_eps(g, here, to))))
            goto fail;
        if (lc_moves(&P, sn, raw, n0, n1, d, c, here, &st))
            goto fail;
    }
    if (P.rep && lc_share(&P, to))
        goto fail;
    if (!ends && n_re == 2) /* a schema with no document is the caller's to report; this one may have some */
        st = k3_err(
            K3_ERR_UNSUPPORTED,
            "json schema: unsupported keyword \"format\" at %s: no string of the part of the format "
            "the grammar writes (labels of at most 16 characters, duration fields of at most 4 digits) "
            "matches the pattern%s",
            path, mn > 0 || mx >= 0 ? " within the length bounds" : "");
    goto done;
fail:
    if (P.over && (mn > 0 || mx >= 0))
        st = k3_err(K3_ERR_UNSUPPORTED,
                    "json schema: unsupported keyword \"%s\" at %s: with this pattern%s the length bound "
                    "needs more than %d grammar nodes (the pattern's nodes times the bound; a smaller "
                    "bound or a simpler pattern fits)",
                    mx >= 0 ? "maxLength" : "minLength", path, n_re == 2 ? " and format" : "",
                    G_LEN_MAX_NODES);
    else if (P.over)
        st = k3_err(K3_ERR_UNSUPPORTED,
                    "json schema: unsupported keyword \"format\" at %s: together with pattern the two "
                    "automata's product needs more than %d grammar nodes (a simpler pattern fits)",
                    path, G_LEN_MAX_NODES);
    else if (!st)
        st = g_nomem();
done:
    free(P.e), free(P.hash), free(P.rep);
    k3_grammar_free(s[0]), k3_grammar_free(s[1]);
    return st;
}
