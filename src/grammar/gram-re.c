/* gram-re.c: JSON string characters and the `pattern` subset that maps to a finite automaton.
 *
 * The automaton reads the JSON text of a string (between the quotes), so a character that JSON
 * must escape is emitted in its escaped form (" as \", \ as \\, controls as \n or \u00XX).
 * Supported: literals (UTF-8 too), ., [classes] with ASCII ranges and negation, \d \w \s \D \W
 * \S, escaped punctuation, \t \n \r \f \v \xHH, groups ( ) and (?: ), |, the quantifiers
 * * + ? {n} {n,} {n,m} (lazy forms too: same language), ^ at the start and $ at the end.
 * Without ^ (or $) the match may start (or end) anywhere, as ECMAScript's RegExp.test; the
 * text before (after) it is at most G_FILL_MAX characters, so a model cannot ramble there.
 * Refused with the construct named: lookaround, backreferences, \b, \p, named groups, anchors
 * elsewhere, classes with non-ASCII members, more than G_RE_MAX_REP repetitions, groups
 * nested more than G_RE_MAX_DEPTH deep, and {n,m} (n or m above 1) of a group that may be empty.
 * The parser runs twice over a quantified atom: once to find its end (emit 0), then once per
 * copy (emit 1), so no syntax tree is kept.
 */
#include "gram-impl.h"

#include <string.h>

#define G_RE_MAX_REP 1000
#define G_RE_MAX_DEPTH 64 /* groups inside groups */
#define G_STR_(x) #x
#define G_STR(x) G_STR_(x)

/* One JSON string character: plain ASCII, a valid UTF-8 sequence, or an escape (no lone
 * surrogates, so a code point counts once as JSON Schema's lengths do). */
static k3_status utf8_multi(k3_grammar *g, int from, int to, int no_e2) {
    int       c1 = g_node_new(g), c2 = g_node_new(g), c3 = g_node_new(g);
    k3_status st = K3_OK;
    if (c1 < 0 || c2 < 0 || c3 < 0)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    int e0 = g_node_new(g), ed = g_node_new(g), f0 = g_node_new(g), f4 = g_node_new(g);
    if ((st = g_byte(g, c1, 0x80, 0xbf, to)) || (st = g_byte(g, c2, 0x80, 0xbf, c1)) ||
        (st = g_byte(g, c3, 0x80, 0xbf, c2)) || (st = g_byte(g, from, 0xc2, 0xdf, c1)) ||
        (st = g_byte(g, from, 0xe0, 0xe0, e0)) || (st = g_byte(g, e0, 0xa0, 0xbf, c1)) ||
        (st = g_byte(g, from, 0xe1, no_e2 ? 0xe1 : 0xec, c2)) ||
        (no_e2 && (st = g_byte(g, from, 0xe3, 0xec, c2))) || (st = g_byte(g, from, 0xee, 0xef, c2)) ||
        (st = g_byte(g, from, 0xed, 0xed, ed)) || (st = g_byte(g, ed, 0x80, 0x9f, c1)) ||
        (st = g_byte(g, from, 0xf0, 0xf0, f0)) || (st = g_byte(g, f0, 0x90, 0xbf, c2)) ||
        (st = g_byte(g, from, 0xf1, 0xf3, c3)) || (st = g_byte(g, from, 0xf4, 0xf4, f4)) ||
        (st = g_byte(g, f4, 0x80, 0x8f, c2)))
        return st;
    return K3_OK;
}

k3_status g_raw_multi(k3_grammar *g, int from, int to) {
    return utf8_multi(g, from, to, 0);
}

k3_status g_str_char(k3_grammar *g, int from, int to) {
    k3_status st;
    int e = g_node_new(g), u1 = g_node_new(g), u2 = g_node_new(g), u3 = g_node_new(g), u4 = g_node_new(g),
        d2 = g_node_new(g);
    if (d2 < 0)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    if ((st = g_byte(g, from, 0x20, 0x21, to)) || (st = g_byte(g, from, 0x23, 0x5b, to)) ||
        (st = g_byte(g, from, 0x5d, 0x7f, to)) || (st = utf8_multi(g, from, to, 0)) ||
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

k3_status g_fill(k3_grammar *g, int from, int to) {
    k3_status st = g_eps(g, from, to);
    for (int k = 0; k < G_FILL_MAX && !st; k++) {
        int nx = g_node_new(g);
        if (!(st = g_str_char(g, from, nx)))
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
    int         depth; /* groups open at p->i */
    int         nul;   /* 1: what was just read (an atom, a sequence, alternatives) may be empty */
    k3_status   st;
} re_p;

static int re_fail(re_p *p, const char *what) {
    if (!p->st)
        p->st = k3_err(K3_ERR_UNSUPPORTED,
                       "json schema: unsupported keyword \"pattern\" at %s: %s (at offset %zu of %.*s)",
                       p->path, what, p->i, (int)p->n, p->s);
    return -1;
}

/* A set of ASCII characters plus "any non-ASCII character". */
typedef struct re_set {
    uint8_t ascii[128];
    int     nonascii; /* 1: any; 2: any but U+2028/9 (the '.' of ECMAScript, E2 lead dropped) */
} re_set;

static void set_range(re_set *c, int lo, int hi) {
    for (int k = lo; k <= hi; k++)
        c->ascii[k] = 1;
}

static void set_class(re_set *c, char e, int *ok) {
    *ok = 1;
    switch (e) {
    case 'd':
        set_range(c, '0', '9');
        break;
    case 'w':
        set_range(c, '0', '9'), set_range(c, 'a', 'z'), set_range(c, 'A', 'Z'), set_range(c, '_', '_');
        break;
    case 's':
        set_range(c, 9, 13), set_range(c, ' ', ' ');
        break;
    case 'D':
    case 'W':
    case 'S': {
        re_set t = {0};
        set_class(&t, (char)(e + 32), ok);
        for (int k = 0; k < 128; k++)
            c->ascii[k] |= !t.ascii[k];
        c->nonascii = 1;
        break;
    }
    default:
        *ok = 0;
    }
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

/* Emits the set's characters (escaped as JSON needs) from -> to. */
static void emit_set(re_p *p, const re_set *c, int from, int to) {
    k3_grammar *g = p->g;
    for (int k = 0; k < 128 && !p->st; k++) {
        if (!c->ascii[k])
            continue;
        char buf[8];
        if (k == '"' || k == '\\')
            p->st = g_lit(g, from, (snprintf(buf, sizeof buf, "\\%c", k), buf), 2, to);
        else if (k < 0x20) {
            const char *sh = k == '\n'   ? "\\n"
                             : k == '\t' ? "\\t"
                             : k == '\r' ? "\\r"
                             : k == '\f' ? "\\f"
                             : k == '\b' ? "\\b"
                                         : NULL;
            if (!sh)
                snprintf(buf, sizeof buf, "\\u%04x", k), sh = buf;
            p->st = g_lit(g, from, sh, strlen(sh), to);
        } else {
            int hi = k;
            while (hi + 1 < 128 && c->ascii[hi + 1] && hi + 1 != '"' && hi + 1 != '\\')
                hi++;
            p->st = g_byte(g, from, k, hi, to);
            k     = hi;
        }
    }
    if (c->nonascii && !p->st)
        p->st = utf8_multi(g, from, to, c->nonascii == 2);
}

static int re_alt(re_p *p, int emit, int from, int to);

/* [class]: the set it names (ASCII members only). */
static int re_class(re_p *p, re_set *c) {
    int neg = 0;
    p->i++;
    if (p->i < p->n && p->s[p->i] == '^')
        neg = 1, p->i++;
    re_set t = {0};
    for (int first = 1; p->i < p->n && (p->s[p->i] != ']' || first); first = 0) {
        int lo;
        if (p->s[p->i] == '\\' && p->i + 1 < p->n) {
            int ok;
            set_class(&t, p->s[p->i + 1], &ok);
            if (ok) {
                p->i += 2;
                continue;
            }
            if ((lo = esc_char(p->s[p->i + 1])) < 0)
                return re_fail(p, "an escape in a class it cannot read");
            p->i += 2;
        } else if ((unsigned char)p->s[p->i] >= 0x80)
            return re_fail(p, "a non-ASCII character in a class");
        else
            lo = (unsigned char)p->s[p->i++];
        int hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if (p->s[p->i] == '\\' && p->i + 1 < p->n) {
                if ((hi = esc_char(p->s[p->i + 1])) < 0)
                    return re_fail(p, "a class range it cannot read");
                p->i += 2;
            } else if ((unsigned char)p->s[p->i] >= 0x80)
                return re_fail(p, "a non-ASCII character in a class");
            else
                hi = (unsigned char)p->s[p->i++];
            if (hi < lo)
                return re_fail(p, "a class range out of order");
        }
        set_range(&t, lo, hi);
    }
    if (p->i >= p->n)
        return re_fail(p, "an unterminated class");
    p->i++;
    if (neg) {
        for (int k = 0; k < 128; k++)
            c->ascii[k] = !t.ascii[k];
        c->nonascii = 1;
    } else
        *c = t;
    return 0;
}

static int re_atom(re_p *p, int emit, int from, int to) {
    char   ch = p->s[p->i];
    re_set c  = {0};
    p->nul    = 0; /* a group's is its alternatives' (re_alt) */
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
    if (ch == '[') {
        if (re_class(p, &c))
            return -1;
    } else if (ch == '.') {
        set_range(&c, 0, 127);
        c.ascii['\n'] = c.ascii['\r'] = 0;
        c.nonascii                    = 2;
        p->i++;
    } else if (ch == '\\') {
        if (p->i + 1 >= p->n)
            return re_fail(p, "a trailing backslash");
        char e = p->s[p->i + 1];
        int  ok, v;
        set_class(&c, e, &ok);
        if (ok)
            p->i += 2;
        else if (e == 'x' && p->i + 3 < p->n && hexval(p->s[p->i + 2]) >= 0 && hexval(p->s[p->i + 3]) >= 0) {
            v = hexval(p->s[p->i + 2]) * 16 + hexval(p->s[p->i + 3]);
            if (v >= 128)
                return re_fail(p, "a \\x escape above 7F");
            c.ascii[v] = 1;
            p->i += 4;
        } else if ((v = esc_char(e)) >= 0) {
            c.ascii[v] = 1;
            p->i += 2;
        } else
            return re_fail(p, "an escape outside the supported subset (\\b, \\p, backreferences, ...)");
    } else if (ch == '^' || ch == '$')
        return re_fail(p, "an anchor that is not at the start (^) or the end ($)");
    else if (strchr("*+?{", ch))
        return re_fail(p, "a quantifier with nothing to repeat");
    else if ((unsigned char)ch >= 0x80) { /* a literal UTF-8 character: its bytes */
        size_t k = p->i + 1;
        while (k < p->n && ((unsigned char)p->s[k] & 0xc0) == 0x80)
            k++;
        if (emit)
            p->st = g_lit(p->g, from, p->s + p->i, k - p->i, to);
        p->i = k;
        return p->st ? -1 : 0;
    } else {
        c.ascii[(unsigned char)ch] = 1;
        p->i++;
    }
    if (emit)
        emit_set(p, &c, from, to);
    return p->st ? -1 : 0;
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

k3_status g_pattern(k3_grammar *g, const char *re, size_t n, const char *path, int from, int to) {
    re_p p      = {.g = g, .s = re, .n = n, .path = path};
    int  anch_s = n && re[0] == '^', anch_e = n && re[n - 1] == '$' && (n < 2 || re[n - 2] != '\\');
    int  a = g_node_new(g), b = g_node_new(g);
    if (a < 0 || b < 0)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    p.i = (size_t)anch_s;
    p.n = n - (size_t)anch_e;
    if (re_alt(&p, 1, a, b))
        return p.st;
    if (p.i < p.n)
        return re_fail(&p, "an unbalanced )"), p.st;
    k3_status st;
    if ((st = anch_s ? g_eps(g, from, a) : g_fill(g, from, a)))
        return st;
    return anch_e ? g_eps(g, b, to) : g_fill(g, b, to);
}
