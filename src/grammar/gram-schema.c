/* gram-schema.c: JSON Schema (and "any JSON object") to a grammar (gram-impl.h).
 *
 * The documents are compact JSON: no white space except one optional space after ':' and ',',
 * object members in the order the schema declares them (additional members after them), numbers
 * of at most 16 integer digits, 16 fraction digits and a 2-digit exponent. Every document the
 * grammar accepts validates against the schema; that is the contract the tests check with an
 * independent validator. Keywords (see the man page, k3chat(1), STRUCTURED OUTPUT):
 *   type (one or a list), enum, const (a value is kept only when the schema's other keywords
 *   allow it: vcheck, a validator of one value), properties, required, additionalProperties,
 *   items, prefixItems, minItems, maxItems, uniqueItems (over items of a few values:
 *   unique_array), minLength, maxLength (beside a pattern or format too: g_pattern_len),
 *   pattern (gram-re.c; beside a format, both hold: g_pattern_len), format (OpenAI's strict
 *   list: date-time, time, date, duration, email, hostname, ipv4, ipv6, uuid; the table
 *   formats), multipleOf (integers and fractions over a power of 2: emit_integer), minimum,
 *   maximum, exclusiveMinimum, exclusiveMaximum (integers: exactly and as doubles, int_bound;
 *   numbers without an exponent: emit_number_range), anyOf, oneOf (branches of distinct types,
 *   or tagged objects: tagged_apart), allOf (of objects, or of one schema), $ref to #,
 *   #/$defs/NAME or #/definitions/NAME (recursion through calls), the annotations ($id at the
 *   root only). Anything else is refused with K3_ERR_UNSUPPORTED naming the keyword and its
 *   JSON path.
 */
#include "gram-impl.h"
#include "json.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define G_MAX_UNROLL 4096            /* maxLength / maxItems / minItems written out at most this far */
#define G_EXTRA_MAX 4                /* additional members of one object at most */
#define G_INT_MAX 9999999999999999LL /* 16 digits: the bound of an integer without maximum */

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };

/* A rule: schema s, written between start and end (a ret node) once the schema that called it
 * is done (rules_emit), with the root its $refs resolve against and its path. */
typedef struct sc_rule {
    const jv *s, *root;
    int       start, end;
    char     *path;
} sc_rule;

/* A pattern keyword's automaton for the enum/const value checks (pattern_ok). */
typedef struct sc_pat {
    const jv   *re;
    k3_grammar *g; /* NULL: the pattern matches no string */
} sc_pat;

typedef struct sc {
    k3_grammar *g;
    const jv   *root;
    sc_rule    *rule;
    int         n_rule, cap_rule, n_done; /* rule[n_done ..]: not written yet */
    int32_t    *rh;                       /* (rhcap) rule ids + 1 by schema pointer, 0 empty */
    int         rhcap;
    const jv   *dobj; /* the $defs object dh indexes (names -> member index + 1, 0 empty) */
    int32_t    *dh;
    int         dhcap;
    int         any;   /* start of the any-value rule, -1 until made */
    jv        **owned; /* merged allOf schemas */
    int         n_owned, cap_owned;
    char        full_at[512]; /* the innermost schema being written when the grammar got full */
    long        checked;      /* the enum/const value checks' work so far (vcheck, G_CHECK_MAX) */
    sc_pat     *pat;          /* (n_pat) the patterns those checks matched, each compiled once */
    int         n_pat, cap_pat;
    long long   mod;     /* the digits' integer is a multiple of it (0: none; digits, mod_tail) */
    int         point;   /* digits after the point (a fractional multipleOf's), 0: an integer */
    long long   pw[17];  /* 10^m */
    long long   red[17]; /* mod / gcd(mod, 10^m): the remainders m digits from the end tell apart */
    int64_t    *tkey;    /* (tcap) mod_tail's states: m << 57 | remainder class, -1 empty */
    int32_t    *tval;    /* (tcap) their nodes */
    int         tcap, tail_to;
} sc;

static k3_status emit(sc *c, const jv *s, const char *path, int from, int to);
static double    jv_number(const jv *x);
static k3_status rule_of(sc *c, const jv *s, const char *path, int *start);
static k3_status rules_emit(sc *c);
static k3_status sc_finish(sc *c, jv *js, k3_status st, k3_grammar **out);

/* Keywords that constrain nothing (discriminator: OpenAPI's hint beside a oneOf). */
static const char *const annotations[] = {"$schema", "$id",         "$comment",     "title",    "description",
                                          "default", "examples",    "deprecated",   "readOnly", "writeOnly",
                                          "$defs",   "definitions", "discriminator"};
static const char *const keywords[]    = {
       "type",    "enum",        "const",    "properties", "required",         "additionalProperties",
       "items",   "prefixItems", "minItems", "maxItems",   "minLength",        "maxLength",
       "pattern", "format",      "minimum",  "maximum",    "exclusiveMinimum", "exclusiveMaximum",
       "anyOf",   "oneOf",       "allOf",    "$ref",       "uniqueItems",      "multipleOf"};

static int in_list(const char *k, const char *const *l, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, l[i]))
            return 1;
    return 0;
}
#define IN(k, l) in_list(k, l, sizeof l / sizeof *l)

static k3_status bad(const char *path, const char *key, const char *want) {
    return k3_err(K3_ERR_ARG, "json schema: \"%s\" at %s: expected %s", key, path, want);
}

static k3_status unsupported(const char *path, const char *key, const char *why) {
    return k3_err(K3_ERR_UNSUPPORTED, "json schema: unsupported keyword \"%s\" at %s%s%s", key, path,
                  why ? ": " : "", why ? why : "");
}

static void sub(char *out, size_t n, const char *path, const char *a, const char *b) {
    snprintf(out, n, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

/* A non-negative integer keyword (absent: def); 2.0 is the integer 2 (JSON Schema counts a
 * number by its value), a count past LONG_MAX reads as LONG_MAX (the callers refuse it). */
static k3_status get_count(const jv *s, const char *key, const char *path, long def, long *out) {
    const jv *v = jv_get(s, key);
    *out        = def;
    if (!v)
        return K3_OK;
    char *end = "";
    long  x   = -1;
    if (v->kind == JV_INT)
        x = strtol(v->s, &end, 10);
    else if (v->kind == JV_FLOAT && v->d >= 0 && v->d == floor(v->d))
        x = v->d < 1e18 ? (long)v->d : LONG_MAX;
    if ((v->kind != JV_INT && v->kind != JV_FLOAT) || *end || x < 0)
        return bad(path, key, "a non-negative integer");
    *out = x;
    return K3_OK;
}

/* ---- small pieces ----------------------------------------------------------------------- */

static int node(sc *c) {
    return g_node_new(c->g);
}

/* ch, then an optional space: returns the node after them (or -1) */
static int sep(sc *c, int from, char ch) {
    int a = node(c), b = node(c);
    if (b < 0 || g_byte(c->g, from, ch, ch, a) || g_eps(c->g, a, b) || g_byte(c->g, a, ' ', ' ', b))
        return -1;
    return b;
}

static k3_status lit(sc *c, int from, const char *s, int to) {
    return g_lit(c->g, from, s, strlen(s), to);
}

/* A JSON value written compactly, members in their order, appended to b (const, enum: the value
 * as the schema spells it, value_ok having checked it); raw: a string's bytes themselves (a tool
 * call's string argument). */
static k3_status value_text(const jv *v, const char *path, int raw, jbuf *b) {
    size_t    at = b->n;
    k3_status st = raw ? jbuf_add(b, v->s, v->n) : jv_dump(v, JV_COMPACT, b);
    if (!st && !raw && v->kind != JV_STRING && b->p &&
        (memmem(b->p + at, b->n - at, "NaN", 3) || memmem(b->p + at, b->n - at, "Infinity", 8)))
        st = bad(path, "enum/const", "finite numbers");
    return st;
}

typedef struct lit_t {
    const char *p;
    size_t      n;
} lit_t;

static int lit_cmp(const void *a, const void *b) {
    const lit_t *x = a, *y = b;
    int          r = memcmp(x->p, y->p, x->n < y->n ? x->n : y->n);
    return r ? r : (x->n > y->n) - (x->n < y->n);
}

static size_t lit_lcp(const lit_t *x, const lit_t *y) {
    size_t k = 0;
    while (k < x->n && k < y->n && x->p[k] == y->p[k])
        k++;
    return k;
}

/* The n literals l (sorted here) from -> to as a trie: values with a common prefix share its
 * nodes, so after "item0 of 5,000 enum strings the matcher is at one node, not 5,000 (each a
 * mask cache pass on its first visit: 20 ms a token on a 163,840-id vocabulary). */
static k3_status emit_trie(sc *c, lit_t *l, size_t n, int from, int to) {
    k3_status st  = K3_OK;
    size_t    max = 0;
    for (size_t i = 0; i < n; i++)
        max = l[i].n > max ? l[i].n : max;
    int *at = k3_malloc((max + 1) * sizeof *at); /* at[k]: the node after k bytes of the last one */
    if (!at)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    qsort(l, n, sizeof *l, lit_cmp);
    at[0] = from;
    for (size_t i = 0; i < n && !st; i++) {
        size_t lcp = i ? lit_lcp(&l[i], &l[i - 1]) : 0, next = i + 1 < n ? lit_lcp(&l[i], &l[i + 1]) : 0;
        if (i && lcp == l[i].n && l[i - 1].n == l[i].n)
            continue; /* the same value twice */
        for (size_t k = lcp; k < l[i].n && !st;
             k++) { /* the last byte goes to `to` unless a longer one goes on */
            int nx    = k + 1 == l[i].n && next < l[i].n ? to : node(c);
            st        = g_byte(c->g, at[k], (uint8_t)l[i].p[k], (uint8_t)l[i].p[k], nx);
            at[k + 1] = nx;
        }
        if (!st && (next >= l[i].n || !l[i].n))
            st = g_eps(c->g, at[l[i].n], to);
    }
    free(at);
    return st;
}

/* Under multipleOf c->mod (the digits' integer a multiple of it): m more digits, read after
 * digits of remainder r, matter only through r * 10^m mod c->mod, so r is kept modulo
 * c->red[m] (mod / gcd(mod, 10^m)), and a remainder that no m digits can complete (the least
 * completion mod - r * 10^m mod mod is not below 10^m) is dead: no node. mod_states bounds the
 * classes left; a power of 2 (1024: 288 nodes) or of 10 (10^6: 16) costs far less than a prime (13 per
 * remainder). */
static int mod_live(const sc *c, int m, long long r) {
    __extension__ typedef unsigned __int128 u128;
    long long                               rho = (long long)((u128)r * (u128)c->pw[m] % (u128)c->mod);
    return (rho ? c->mod - rho : 0) < c->pw[m];
}

static uint32_t tail_hash(int64_t k) {
    return (uint32_t)(((uint64_t)k * 0x9e3779b97f4a7c15ull) >> 32);
}

/* The node from which m more digits, any of them, end at c->tail_to with the whole a multiple of
 * c->mod (a '.' before the last c->point of them), after digits of remainder r; -1 when none
 * does (g_finish drops edges into dead ends). Shared by every prefix of that class. */
static int mod_tail(sc *c, int m, long long r, k3_status *st) {
    if (*st || !mod_live(c, m, r))
        return -1;
    if (m == 0)
        return c->tail_to;
    long long cls = r % c->red[m];
    int64_t   key = (int64_t)m << 57 | cls; /* cls < mod <= 10^17 < 2^57 */
    uint32_t  h   = tail_hash(key) & (uint32_t)(c->tcap - 1);
    for (; c->tkey[h] != -1; h = (h + 1) & (uint32_t)(c->tcap - 1))
        if (c->tkey[h] == key)
            return c->tval[h];
    int t = node(c), in = t;
    if (m == c->point && t >= 0) /* the fraction's digits begin: its point first */
        in = node(c), *st = in < 0 ? K3_OK : g_byte(c->g, t, '.', '.', in);
    if (in < 0)
        return *st = k3_err(K3_ERR_NOMEM, "grammar: out of memory"), -1;
    c->tkey[h] = key, c->tval[h] = t; /* claimed before the recursion fills more slots */
    for (int d = 0; d < 10 && !*st; d++) {
        int nx = mod_tail(c, m - 1, (10 * cls + d) % c->mod, st);
        if (nx >= 0 && !*st)
            *st = g_byte(c->g, in, (uint8_t)('0' + d), (uint8_t)('0' + d), nx);
    }
    return t;
}

static k3_status digits_from(sc *c, const char *lo, const char *hi, int n, long long r, int from, int to);

/* Digits of a fixed length n between lo and hi (strings of n digits), after digits of
 * remainder r modulo c->mod (0 without multipleOf); under a fractional multipleOf, a '.'
 * before the last c->point of them. */
static k3_status digits(sc *c, const char *lo, const char *hi, int n, long long r, int from, int to) {
    if (n == 0)
        return r ? K3_OK : g_eps(c->g, from, to);
    if (n == c->point) {
        int       p = node(c);
        k3_status st =
            p < 0 ? k3_err(K3_ERR_NOMEM, "grammar: out of memory") : g_byte(c->g, from, '.', '.', p);
        if (st)
            return st;
        from = p;
    }
    return digits_from(c, lo, hi, n, r, from, to);
}

/* digits, from reading the first of the n (its point, if any, read). */
static k3_status digits_from(sc *c, const char *lo, const char *hi, int n, long long r, int from, int to) {
    int all = 1;
    for (int k = 1; k < n; k++)
        all &= lo[k] == '0' && hi[k] == '9';
    if (all && c->mod) { /* [lo0-hi0] then n - 1 free digits that end at a multiple */
        k3_status st = K3_OK;
        for (int d = lo[0]; d <= hi[0] && !st; d++) {
            int nx = mod_tail(c, n - 1, (10 * r + d - '0') % c->mod, &st);
            if (nx >= 0 && !st)
                st = g_byte(c->g, from, (uint8_t)d, (uint8_t)d, nx);
        }
        return st;
    }
    if (all) { /* [lo0-hi0][0-9]{n-1}, the point where it goes */
        int cur = from;
        for (int k = 0; k < n; k++) {
            k3_status st = K3_OK;
            if (k && n - k == c->point) {
                int p = node(c);
                if ((st = p < 0 ? k3_err(K3_ERR_NOMEM, "grammar: out of memory")
                                : g_byte(c->g, cur, '.', '.', p)))
                    return st;
                cur = p;
            }
            int nx = k + 1 == n ? to : node(c);
            if ((st = g_byte(c->g, cur, k ? '0' : lo[0], k ? '9' : hi[0], nx)))
                return st;
            cur = nx;
        }
        return K3_OK;
    }
    char      zeros[24], nines[24];
    k3_status st;
    memset(zeros, '0', sizeof zeros);
    memset(nines, '9', sizeof nines);
#define NEXT(d) (c->mod ? (10 * r + (d) - '0') % c->mod : 0)
    if (lo[0] == hi[0]) {
        int m = node(c);
        if ((st = g_byte(c->g, from, lo[0], lo[0], m)))
            return st;
        return digits(c, lo + 1, hi + 1, n - 1, NEXT(lo[0]), m, to);
    }
    int m1 = node(c), m2 = node(c);
    if ((st = g_byte(c->g, from, lo[0], lo[0], m1)) ||
        (st = digits(c, lo + 1, nines, n - 1, NEXT(lo[0]), m1, to)) ||
        (st = g_byte(c->g, from, hi[0], hi[0], m2)) ||
        (st = digits(c, zeros, hi + 1, n - 1, NEXT(hi[0]), m2, to)))
        return st;
    if (lo[0] + 1 <= hi[0] - 1) { /* the digits between: free after them (the all case) */
        char lo2[24], hi2[24];
        lo2[0] = (char)(lo[0] + 1), hi2[0] = (char)(hi[0] - 1);
        memcpy(lo2 + 1, zeros, (size_t)n - 1), memcpy(hi2 + 1, nines, (size_t)n - 1);
        return digits_from(c, lo2, hi2, n, r, from, to);
    }
#undef NEXT
    return K3_OK;
}

/* Decimal integers in [a, b], 0 <= a <= b; under a fractional multipleOf (c->point digits after
 * the point) at least c->point + 1 digits, so 5 is "0.05" under 0.01's point. */
static k3_status nonneg(sc *c, long long a, long long b, int from, int to) {
    int       L0 = c->point + 1; /* the fewest digits: those of 0 */
    long long p  = 1;            /* L digits: [p, 10p - 1], and from 0 for L0 */
    for (int L = 1; L < L0; L++)
        p *= 10;
    for (int L = L0; L <= 17 && (L == L0 || p <= b); L++, p *= 10) {
        long long lo = a > (L == L0 ? 0 : p) ? a : (L == L0 ? 0 : p), hi = b < p * 10 - 1 ? b : p * 10 - 1;
        if (lo > hi)
            continue;
        char      sl[24], sh[24];
        k3_status st;
        snprintf(sl, sizeof sl, "%017lld", lo); /* the last L of them: lo < 10^L */
        snprintf(sh, sizeof sh, "%017lld", hi);
        if ((st = digits(c, sl + 17 - L, sh + 17 - L, L, 0, from, to)))
            return st;
    }
    return K3_OK;
}

static k3_status int_range(sc *c, long long lo, long long hi, int from, int to) {
    k3_status st = K3_OK;
    if (lo > hi)
        return K3_OK; /* nothing: g_finish reports a schema that compiles to nothing */
    if (lo < 0) {
        int m = node(c);
        if ((st = g_byte(c->g, from, '-', '-', m)) || (st = nonneg(c, hi < 0 ? -hi : 1, -lo, m, to)))
            return st;
    }
    if (hi >= 0)
        st = nonneg(c, lo > 0 ? lo : 0, hi, from, to);
    return st;
}

/* The four bound keywords, lower ones first (emit_integer, emit_number_range, num_cond). */
static const char *const bound_key[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};

/* The double a validator reads for bound keyword v (JSON.parse, ajv: the nearest double). */
static k3_status bound_value(const jv *v, const char *path, const char *key, double *d) {
    if (v->kind == JV_TRUE || v->kind == JV_FALSE)
        return unsupported(path, key, "the boolean form (draft 4); give the bound as a number");
    if (v->kind != JV_INT && v->kind != JV_FLOAT)
        return bad(path, key, "a number");
    *d = v->kind == JV_FLOAT ? v->d : strtod(v->s, NULL);
    return K3_OK;
}

static k3_status beyond(const char *path, const char *key) {
    return unsupported(path, key,
                       "a bound beyond 16 digits (the numbers written have at most 16 integer digits)");
}

/* Integers under bound keyword k (bound_key) from x: those that pass it both exactly (as a
 * validator with exact integers reads them: Python's json) and as doubles (JSON.parse reads
 * 9007199254740993 as 9007199254740992, which ajv does not take as above 9007199254740992); the
 * range [*lo, *hi] narrowed to them. Writable integers have at most 16 digits: a bound past
 * them all is refused (a bound beyond, on the other side, bounds nothing). */
static k3_status int_bound(const jv *v, const char *path, int k, long long *lo, long long *hi) {
    const char *key   = bound_key[k];
    int         lower = k < 2, excl = k & 1;
    double      d;
    k3_status   st = bound_value(v, path, key, &d);
    long long   t; /* the exact threshold, clamped to one past the writable ones */
    if (st)
        return st;
    if (v->kind == JV_INT) {
        char     *end;
        long long x = strtoll(v->s, &end, 10);
        if (*end || x > G_INT_MAX || x < -G_INT_MAX) /* 17 digits or more */
            x = v->s[0] == '-' ? -G_INT_MAX - 2 : G_INT_MAX + 2;
        t = lower ? x + excl : x - excl;
    } else {
        double r = lower ? (excl ? floor(d) + 1 : ceil(d)) : (excl ? ceil(d) - 1 : floor(d));
        t = r > (double)G_INT_MAX ? G_INT_MAX + 1 : r < -(double)G_INT_MAX ? -G_INT_MAX - 1 : (long long)r;
    }
    if (lower ? t > G_INT_MAX : t < -G_INT_MAX)
        return beyond(path, key);
    if (lower && t > *lo)
        *lo = t;
    if (!lower && t < *hi)
        *hi = t;
        /* the double of an integer is within 1 of it here (spacing 2 at most below 10^16): the exact
         * threshold passes the double test too, or its next integers do */
#define PASS(x)                                                                                              \
    (lower ? (excl ? (double)(x) > d : (double)(x) >= d) : (excl ? (double)(x) < d : (double)(x) <= d))
    while (*lo <= *hi && !PASS(lower ? *lo : *hi)) {
        if (lower)
            ++*lo;
        else
            --*hi;
    }
#undef PASS
    return K3_OK;
}

/* ---- numbers within bounds ---------------------------------------------------------------
 * A number the grammar writes has at most 16 integer and 16 fraction digits, no exponent: it is
 * a multiple of 10^-16, held here as the integer N = value * 10^16 (|N| < 10^32, 107 bits). A
 * validator reads the document's number as the double nearest to it (ajv: JSON.parse, correctly
 * rounded, ties to even, as strtod) and compares that with the bound's double. Rounding is
 * monotone, so the numbers that pass a lower bound are those from some N up: g_num_lo finds the
 * least by bisection with strtod itself as the test (about 107 conversions), g_num_hi the
 * greatest under an upper bound. The grammar then writes exactly the multiples of 10^-16 in
 * [lo, hi] (any number of trailing zeros): minimum 0.5 starts at 0.5, exclusiveMinimum 0.1 at
 * 0.1000000000000001 (0.10000000000000001 is the double 0.1, which ajv does not take as above
 * 0.1), maximum 4503599627370496.5 takes that number (its double is 4503599627370496). */

__extension__ typedef __int128 g_num;
#define G_E16 10000000000000000LL            /* 10^16 */
#define G_NUM_MAX ((g_num)G_E16 * G_E16 - 1) /* 9999999999999999.9999999999999999 */

static double num_value(g_num n) {
    char  t[48];
    g_num a = n < 0 ? -n : n;
    snprintf(t, sizeof t, "%s%llu.%016llu", n < 0 ? "-" : "", (unsigned long long)(a / G_E16),
             (unsigned long long)(a % G_E16));
    return strtod(t, NULL);
}

/* The least N whose number passes x >= d (excl: x > d); G_NUM_MAX + 1 when none does. */
static g_num g_num_lo(double d, int excl) {
    g_num lo = -G_NUM_MAX, hi = G_NUM_MAX;
#define PASS(n) (excl ? num_value(n) > d : num_value(n) >= d)
    if (!PASS(hi))
        return G_NUM_MAX + 1;
    while (lo < hi) {
        g_num mid = lo + (hi - lo) / 2;
        if (PASS(mid))
            hi = mid;
        else
            lo = mid + 1;
    }
#undef PASS
    return lo;
}

/* The greatest N whose number passes x <= d (excl: x < d); -G_NUM_MAX - 1 when none does. */
static g_num g_num_hi(double d, int excl) {
    g_num lo = -G_NUM_MAX, hi = G_NUM_MAX;
#define PASS(n) (excl ? num_value(n) < d : num_value(n) <= d)
    if (!PASS(lo))
        return -G_NUM_MAX - 1;
    while (lo < hi) {
        g_num mid = hi - (hi - lo) / 2;
        if (PASS(mid))
            lo = mid;
        else
            hi = mid - 1;
    }
#undef PASS
    return lo;
}

/* A fraction from -> to: nothing (the value 0) or '.' and 1 to 16 digits, whose digits padded
 * with zeros to 16 lie in [a, b] (16-digit strings, a <= b). A digit-by-digit comparison: node
 * (k, t) has read k digits, t bit 1: equal to a's so far, bit 2: equal to b's (a bit is dropped
 * where the rest of a is zeros, of b nines: no longer a constraint). */
static k3_status frac_range(sc *c, const char *a, const char *b, int from, int to) {
    int       nd[17][4], zero[17], nine[17]; /* zero[k]: a[k..16) all '0'; nine[k]: b[k..16) all '9' */
    k3_status st = K3_OK;
    zero[16] = nine[16] = 1;
    for (int k = 15; k >= 0; k--)
        zero[k] = zero[k + 1] && a[k] == '0', nine[k] = nine[k + 1] && b[k] == '9';
    for (int k = 0; k <= 16; k++)
        for (int t = 0; t < 4; t++)
            nd[k][t] = -1;
#define AT(k, t)                                                                                             \
    (nd[k][(t) & ~(zero[k] ? 1 : 0) & ~(nine[k] ? 2 : 0)] >= 0                                               \
         ? nd[k][(t) & ~(zero[k] ? 1 : 0) & ~(nine[k] ? 2 : 0)]                                              \
         : (nd[k][(t) & ~(zero[k] ? 1 : 0) & ~(nine[k] ? 2 : 0)] = node(c)))
    if (zero[0] && (st = g_eps(c->g, from, to))) /* no fraction: the value 0 */
        return st;
    int first = AT(0, 3);
    if (first < 0 || (st = g_byte(c->g, from, '.', '.', first)))
        return first < 0 ? k3_err(K3_ERR_NOMEM, "grammar: out of memory") : st;
    for (int k = 0; k <= 16 && !st; k++)
        for (int t = 0; t < 4 && !st; t++) {
            int n = nd[k][t];
            if (n < 0)
                continue;
            if (k && !(t & 1) && (st = g_eps(c->g, n, to))) /* digits so far >= a's (or a's rest zeros) */
                break;
            if (k == 16)
                continue;
            int lo = t & 1 ? a[k] : '0', hi = t & 2 ? b[k] : '9';
            for (int d = lo; d <= hi && !st; d++) { /* the digits that keep t's equalities: one each */
                int tt = (t & 1 && d == a[k] ? 1 : 0) | (t & 2 && d == b[k] ? 2 : 0), nx;
                int d1 = d;
                if (!tt) /* the free digits between them: one range */
                    while (d1 + 1 <= hi && !((t & 1 && d1 + 1 == a[k]) || (t & 2 && d1 + 1 == b[k])))
                        d1++;
                nx = AT(k + 1, tt);
                st = nx < 0 ? k3_err(K3_ERR_NOMEM, "grammar: out of memory") : g_byte(c->g, n, d, d1, nx);
                d  = d1;
            }
        }
#undef AT
    return st;
}

/* The numbers N * 10^-16 for N in [lo, hi], 0 <= lo <= hi, unsigned, from -> to: the integer
 * parts strictly inside with any fraction, the end ones with the fractions their bound allows. */
static k3_status dec_range(sc *c, g_num lo, g_num hi, int from, int to) {
    long long i0 = (long long)(lo / G_E16), i1 = (long long)(hi / G_E16);
    char      f0[24], f1[24];
    k3_status st = K3_OK;
    snprintf(f0, sizeof f0, "%016lld", (long long)(lo % G_E16));
    snprintf(f1, sizeof f1, "%016lld", (long long)(hi % G_E16));
    for (int k = 0; k < 3 && !st; k++) { /* i0 alone, or i0 / i1 / those between */
        long long x = k == 0 ? i0 : k == 1 ? i1 : i0 + 1, y = k == 2 ? i1 - 1 : x;
        if ((k == 1 && i0 == i1) || x > y)
            continue;
        int m = node(c);
        if (m < 0)
            return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        const char *a = k == 0 ? f0 : "0000000000000000", *b = k == 1 || i0 == i1 ? f1 : "9999999999999999";
        if (!(st = int_range(c, x, y, from, m)))
            st = frac_range(c, a, b, m, to);
    }
    return st;
}

/* The numbers N * 10^-16 that pass s's bounds as a validator reads them (above): [*lo, *hi];
 * *holds 0 when no number at all does (the bounds cross), so that bounds holding only numbers of
 * more than 16 fraction digits are told apart (refused) from none. */
static k3_status num_bounds(const jv *s, const char *path, g_num *lo, g_num *hi, int *holds) {
    double    dlo = -INFINITY, dhi = INFINITY; /* the least and greatest doubles the bounds pass */
    k3_status st;
    *lo = -G_NUM_MAX, *hi = G_NUM_MAX;
    for (int k = 0; k < 4; k++) {
        const jv *v     = jv_get(s, bound_key[k]);
        int       lower = k < 2;
        double    d;
        if (!v)
            continue;
        if ((st = bound_value(v, path, bound_key[k], &d)))
            return st;
        g_num n = lower ? g_num_lo(d, k & 1) : g_num_hi(d, k & 1);
        if (lower ? n > G_NUM_MAX : n < -G_NUM_MAX) /* past every writable number */
            return beyond(path, bound_key[k]);
        if (lower ? n > *lo : n < *hi)
            *lo = lower ? n : *lo, *hi = lower ? *hi : n;
        d   = k & 1 ? nextafter(d, lower ? INFINITY : -INFINITY) : d;
        dlo = lower && d > dlo ? d : dlo, dhi = !lower && d < dhi ? d : dhi;
    }
    *holds = dlo <= dhi;
    return K3_OK;
}

/* A number within minimum/maximum/exclusiveMinimum/exclusiveMaximum, exactly as a validator
 * reads it (above): no exponent, at most 16 integer and 16 fraction digits; x >= 0 unsigned,
 * x <= 0 as "-" and its magnitude (so 0 may be written "-0", which every bound treats as 0). */
static k3_status emit_number_range(sc *c, const jv *s, const char *path, int from, int to) {
    g_num     lo, hi;
    int       holds;
    k3_status st;
    if ((st = num_bounds(s, path, &lo, &hi, &holds)))
        return st;
    if (lo > hi && holds) /* numbers, but none written without an exponent (1e-20) */
        return unsupported(
            path, jv_get(s, "exclusiveMinimum") ? "exclusiveMinimum" : "minimum",
            "bounds that hold numbers, none of them of at most 16 fraction digits (the numbers "
            "written have no exponent)");
    if (lo > hi)
        return K3_OK; /* no number: nothing (g_finish reports a schema left with nothing) */
    if (hi >= 0 && (st = dec_range(c, lo > 0 ? lo : 0, hi, from, to)))
        return st;
    if (lo <= 0) {
        int minus = node(c);
        if (minus < 0)
            return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        if ((st = g_byte(c->g, from, '-', '-', minus)) ||
            (st = dec_range(c, hi < 0 ? -hi : 0, -lo, minus, to)))
            return st;
    }
    return K3_OK;
}

/* ---- multipleOf ------------------------------------------------------------------------------
 * JSON numbers are decimal text, so the exact reading of multipleOf m is decimal: m's shortest
 * text a * 10^-k (0.25: a = 25, k = 2; the double's shortest digits, as JSON.parse prints it), and
 * x is a multiple when x * 10^k is an integer multiple of a (1.5e2, 150.00 and 150 alike).
 * Validators divide in doubles instead (ajv: x / m === parseInt(x / m); Python's jsonschema:
 * int(q) == q): 0.3 / 0.1 is 2.9999999999999996 and 0.07 / 0.01 is 7.000000000000001, so they
 * reject exact multiples of a fraction that is no exact double (16% of 0.01's up to 10^4, 32% of
 * 0.1's), and which ones follows no digit pattern a grammar could write. The two readings agree
 * on every multiple when m is an exact double (an integer, or a fraction over a power of 2: 0.5,
 * 0.25, 0.125, 2.5) and |x * 10^k| <= 2^53: x and m are exact doubles, so x / m is exact. k3chat
 * writes only values both readings take: under an exact m its multiples, the integers X = x *
 * 10^k, a multiple of a, written with a point before their last k digits (digits, mod_tail);
 * under another fraction, between bounds, each multiple checked (emit_listed), else refused
 * naming a multiple a validator rejects. */

#define G_MOD_NODES 65536          /* mod_tail's nodes at most (mod_states) */
#define G_EXACT 9007199254740992LL /* 2^53: integers up to it are exact doubles */

/* The shortest of printf's %.*g texts of d (1 to 17 digits) that strtod reads back as d, in t
 * (JSON.parse's digits: 0.07 / 0.01 prints 7.000000000000001). */
static void short_text(double d, char *t, size_t n) {
    for (int p = 1; p <= 17; p++) {
        snprintf(t, n, "%.*g", p, d);
        if (strtod(t, NULL) == d)
            return;
    }
}

static long long gcd_ll(long long a, long long b) {
    while (b) {
        long long t = a % b;
        a = b, b = t;
    }
    return a;
}

/* The most nodes mod_tail makes under modulus a: per count m of digits left, the remainder
 * classes (a / gcd(a, 10^m)) that some m digits complete (those within 10^m of a multiple). */
static long long mod_states(long long a) {
    long long n = 0, pw = 1;
    for (int m = 1; m <= 16; m++) {
        pw *= 10;
        long long g = gcd_ll(a, pw), cls = a / g, live = (pw - 1) / g + 1;
        n += cls < live ? cls : live;
    }
    return n;
}

/* multipleOf of schema s as *a * 10^-*k (k 0: an integer; *a 0: no multipleOf); *odd 1 when it is
 * no exact double, so that the readings differ on its multiples (above). */
static k3_status multiple_of(const jv *s, const char *path, long long *a, int *k, int *odd) {
    const jv *v = jv_get(s, "multipleOf");
    double    d;
    k3_status st;
    char      t[40];
    *a = 0, *k = 0, *odd = 0;
    if (!v)
        return K3_OK;
    if ((st = bound_value(v, path, "multipleOf", &d)))
        return st;
    if (!(d > 0) || !isfinite(d))
        return bad(path, "multipleOf", "a finite number above 0");
    short_text(d, t, sizeof t);
    long long m = 0, p5 = 1;
    int       e = strchr(t, 'e') ? atoi(strchr(t, 'e') + 1) : 0, frac = 0; /* d = m * 10^e */
    for (const char *q = t; *q && *q != 'e'; q++)
        if (*q == '.')
            frac = 1;
        else
            m = m * 10 + (*q - '0'), e -= frac;
    for (; m % 10 == 0; m /= 10)
        e++;
    for (; e > 0 && m <= G_EXACT; e--)
        m *= 10;
    if (m > G_EXACT || e > 0)
        return unsupported(path, "multipleOf",
                           "above 2^53 (9007199254740992): no multiple but 0 is an exact double");
    if (-e > 16)
        return unsupported(path, "multipleOf",
                           "more than 16 fraction digits (the numbers written have at most 16)");
    for (int i = 0; i < -e; i++)
        p5 *= 5;
    *a = m, *k = -e, *odd = m % p5 != 0;
    return K3_OK;
}

/* The refusal of multipleOf a * 10^-k (d, no exact double) at path, naming a multiple validators
 * reject and why (why: what would have let it be written). */
static k3_status odd_refused(const char *path, long long a, int k, double d, const char *why) {
    char   ts[2][40];
    double pw = 1;
    for (int i = 0; i < k; i++)
        pw *= 10;
    for (long long j = 1; j <= 1000; j++) {
        double x = (double)(j * a) / pw, q = x / d; /* exact / exact: rounded once, as strtod */
        if (q == floor(q))
            continue;
        snprintf(ts[0], sizeof ts[0], "%.*f", k, x);
        short_text(q, ts[1], sizeof ts[1]);
        return k3_err(
            K3_ERR_UNSUPPORTED,
            "json schema: unsupported keyword \"multipleOf\" at %s: %.*f is no exact double, and "
            "validators (ajv, Python's jsonschema) divide in doubles: %s / %.*f is %s, not an "
            "integer, so they reject some exact multiples, and which ones follows no digit pattern: "
            "%s",
            path, k, d, ts[0], k, d, ts[1], why);
    }
    return unsupported(path, "multipleOf", why);
}

/* ---- multiples of a fraction that is no exact double -------------------------------------------
 * Between a minimum and a maximum holding at most G_LIST_MAX of them, each multiple of m = a *
 * 10^-k is checked as validators read it (its text's double over m's double an integer, below
 * 10^21) and the texts both readings take are written as a minimal acyclic automaton, built by
 * Daciuk, Mihov, Watson and Watson's incremental construction over the sorted texts: a state is
 * registered (or replaced by an equal registered one) once no later text passes through it, so
 * only the path of the last text is ever unregistered. 0.01 between 0 and 1,000 keeps 84% of its
 * 100,001 multiples. */

#define G_LIST_MAX (1 << 20) /* multiples checked at most */
#define G_LIST_NODES 131072  /* the automaton's states at most */

typedef struct dm_state {
    int32_t next[12]; /* by symbol: '0'..'9', '.', '-'; -1 none */
    int32_t final;
} dm_state;

typedef struct dm {
    dm_state *st; /* (n) states, freed ones in freel */
    int       n, cap;
    int32_t  *reg; /* (rcap) registered state + 1 by content, 0 empty */
    int       rcap, nreg;
    int32_t  *freel; /* (nfree) states replaced by a registered one, for reuse */
    int       nfree, capfree;
} dm;

static int dm_sym(char ch) {
    return ch == '.' ? 10 : ch == '-' ? 11 : ch - '0';
}

static uint32_t dm_hash(const dm_state *q) {
    uint32_t h = (uint32_t)q->final * 0x9e3779b9u;
    for (int i = 0; i < 12; i++)
        h = (h ^ (uint32_t)q->next[i]) * 0x01000193u;
    return h;
}

static uint32_t dm_hash_at(const void *ctx, int i) {
    const dm *D = ctx;
    return dm_hash(&D->st[D->freel[D->nfree + i]]); /* the registered ids, listed past the free ones */
}

/* A new state without transitions; -1 on out of memory. */
static int dm_new(dm *D) {
    int id = D->nfree ? D->freel[--D->nfree] : D->n;
    if (id == D->n) {
        dm_state *ns = k3_grow(D->st, &D->cap, D->n + 1, sizeof *ns, 256);
        if (!ns)
            return -1;
        D->st = ns, D->n++;
    }
    memset(D->st[id].next, 0xff, sizeof D->st[id].next);
    D->st[id].final = 0;
    return id;
}

/* The registered state equal to q (q itself, registered, when none is); -1 on out of memory. */
static int dm_register(dm *D, int q) {
    if (2 * (D->nreg + 1) > D->rcap) { /* rebuild: list the registered ids after the free ones */
        int32_t *l = k3_grow(D->freel, &D->capfree, D->nfree + D->nreg, sizeof *l, 64);
        if (!l)
            return -1;
        D->freel = l;
        for (int i = 0, j = 0; i < D->rcap; i++)
            if (D->reg[i])
                l[D->nfree + j++] = D->reg[i] - 1;
        int      cap = D->rcap ? 2 * D->rcap : 1024;
        int32_t *h   = g_index_build(cap, D->nreg, dm_hash_at, D);
        if (!h)
            return -1;
        free(D->reg);
        D->reg = h, D->rcap = cap;
    }
    uint32_t h = dm_hash(&D->st[q]) & (uint32_t)(D->rcap - 1);
    for (; D->reg[h]; h = (h + 1) & (uint32_t)(D->rcap - 1))
        if (!memcmp(&D->st[D->reg[h] - 1], &D->st[q], sizeof *D->st))
            return D->reg[h] - 1;
    D->reg[h] = q + 1, D->nreg++;
    return q;
}

/* Registers the states of text w's path (path[i]: after i bytes) from depth len up to keep + 1,
 * deepest first, each replaced in its parent by an equal registered one. 0, or -1 on out of memory. */
static int dm_fold(dm *D, int32_t *path, const char *w, int len, int keep) {
    for (int i = len; i > keep; i--) {
        int q = path[i], r = dm_register(D, q);
        if (r < 0)
            return -1;
        if (r == q)
            continue;
        D->st[path[i - 1]].next[dm_sym(w[i - 1])] = r;
        int32_t *l = k3_grow(D->freel, &D->capfree, D->nfree + 1, sizeof *l, 64);
        if (!l)
            return -1;
        D->freel = l, l[D->nfree++] = q;
    }
    return 0;
}

static int text_cmp(const void *a, const void *b) {
    return strcmp(a, b);
}

/* The multiples X * 10^-k of a * 10^-k (X in [lo, hi], |X| <= 2^53) that validators take too, as
 * texts with k fraction digits, from -> to. Refused past G_LIST_MAX multiples or G_LIST_NODES
 * states. */
static k3_status emit_listed(sc *c, const jv *s, const char *path, long long lo, long long hi, long long a,
                             int k, int from, int to) {
    typedef char text[20]; /* '-', 16 digits, '.', NUL */
    double       d = jv_number(jv_get(s, "multipleOf")), pw = 1;
    long long    x0 = lo >= 0 ? (lo + a - 1) / a : -(-lo / a), x1 = hi >= 0 ? hi / a : -((-hi + a - 1) / a);
    k3_status    st = K3_OK;
    for (int i = 0; i < k; i++)
        pw *= 10;
    if (x0 > x1)
        return K3_OK;          /* no multiple: nothing (g_finish reports a schema left with nothing) */
    if (x1 - x0 >= G_LIST_MAX) /* without a bound: 2^53 units */
        return odd_refused(path, a, k, d,
                           "the ones both readings take are written only between a minimum and a maximum "
                           "holding at most 1,048,576 multiples, each checked; an integer or a fraction over "
                           "a power of 2 (0.5, 0.25, 0.125) is written without them");
    text   *t = k3_malloc((size_t)(x1 - x0 + 1) * sizeof *t);
    size_t  n = 0;
    dm      D = {0};
    int32_t path_st[24], *gid = NULL, *stack = NULL;
    if (!t)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    for (long long j = x0; j <= x1; j++) { /* X = j * a; its double is X / 10^k rounded once */
        long long X = j * a, ax = X < 0 ? -X : X;
        double    q = ((double)X / pw) / d;
        char      dg[24], *o = t[n];
        int       nd = 0;
        if (q != floor(q) || fabs(q) >= 1e21)
            continue;
        for (long long u = ax; u || nd < k + 1; u /= 10) /* its digits, at least k + 1 ("0.07") */
            dg[nd++] = (char)('0' + u % 10);
        if (X < 0)
            *o++ = '-';
        while (nd--)
            *o++ = dg[nd], nd == k ? (void)(*o++ = '.') : (void)0;
        *o = 0, n++;
    }
    qsort(t, n, sizeof *t, text_cmp);
    const char *prev = "";
    int         plen = 0;
    if ((path_st[0] = dm_new(&D)) < 0)
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        int len = (int)strlen(t[i]), cp = 0;
        while (cp < plen && cp < len && prev[cp] == t[i][cp])
            cp++;
        if (dm_fold(&D, path_st, prev, plen, cp))
            goto nomem;
        for (int j = cp; j < len; j++) {
            int q = dm_new(&D);
            if (q < 0)
                goto nomem;
            D.st[path_st[j]].next[dm_sym(t[i][j])] = q, path_st[j + 1] = q;
        }
        D.st[path_st[len]].final = 1;
        prev = t[i], plen = len;
        if (D.nreg > G_LIST_NODES) {
            st = k3_err(K3_ERR_UNSUPPORTED,
                        "json schema: unsupported keyword \"multipleOf\" at %s: the multiples validators "
                        "take need more than %d grammar nodes (narrower bounds fit)",
                        path, G_LIST_NODES);
            goto done;
        }
    }
    if (dm_fold(&D, path_st, prev, plen, 0))
        goto nomem;
    /* write the reachable states: the root is from; a final state moves to `to` */
    int top = 0;
    if (!(gid = k3_malloc((size_t)D.n * sizeof *gid)) || !(stack = k3_malloc((size_t)D.n * sizeof *stack)))
        goto nomem;
    for (int i = 0; i < D.n; i++)
        gid[i] = -1;
    gid[path_st[0]] = from, stack[top++] = path_st[0];
    while (top && !st) {
        const dm_state *q = &D.st[stack[--top]];
        int             g = gid[q - D.st];
        if (q->final && (st = g_eps(c->g, g, to)))
            break;
        for (int y = 0; y < 12 && !st; y++) {
            int r = q->next[y], y1 = y;
            if (r < 0)
                continue;
            while (y < 10 && y1 < 9 && q->next[y1 + 1] == r) /* digits to one state: one range */
                y1++;
            if (gid[r] < 0) {
                if ((gid[r] = node(c)) < 0)
                    goto nomem;
                stack[top++] = r;
            }
            int lo_ch = y < 10 ? '0' + y : y == 10 ? '.' : '-', hi_ch = y1 < 10 ? '0' + y1 : lo_ch;
            st = g_byte(c->g, g, lo_ch, hi_ch, gid[r]);
            y  = y1;
        }
    }
    goto done;
nomem:
    st = k3_err(K3_ERR_NOMEM, "grammar: out of memory");
done:
    free(t), free(D.st), free(D.reg), free(D.freel), free(gid), free(stack);
    return st;
}

/* An integer (num 0), or a number under multipleOf (num 1: the multiples, written with the
 * multipleOf's fraction digits, integers under an integer one), within the bounds; under
 * multipleOf a multiple of at most 2^53 units of its last digit in magnitude (where x / m is
 * exact in doubles, as validators divide): the digits carry their remainder (digits, mod_tail). */
static k3_status emit_integer(sc *c, const jv *s, const char *path, int num, int from, int to) {
    long long lo = -G_INT_MAX, hi = G_INT_MAX, a;
    int       k, odd;
    k3_status st;
    if ((st = multiple_of(s, path, &a, &k, &odd)))
        return st;
    if (odd && !num)
        return odd_refused(path, a, k, jv_number(jv_get(s, "multipleOf")),
                           "an integer or a fraction over a power of 2 (0.5, 0.25, 0.125) is written");
    if (!num && k) { /* the integers among the multiples of a * 10^-k */
        long long pw = 1;
        for (int i = 0; i < k; i++)
            pw *= 10;
        a /= gcd_ll(a, pw), k = 0;
    }
    if (k) { /* X = x * 10^k within the bounds: the multiples are exact doubles, compared as such */
        g_num nlo, nhi, unit = 1, cap = G_EXACT + 1;
        int   holds;
        if ((st = num_bounds(s, path, &nlo, &nhi, &holds)))
            return st;
        for (int i = k; i < 16; i++)
            unit *= 10;                                            /* 10^-k in 10^-16 units */
        nlo = nlo >= 0 ? (nlo + unit - 1) / unit : nlo / unit;     /* ceil */
        nhi = nhi >= 0 ? nhi / unit : -((-nhi + unit - 1) / unit); /* floor */
        lo  = (long long)(nlo > cap ? cap : nlo < -cap ? -cap : nlo);
        hi  = (long long)(nhi > cap ? cap : nhi < -cap ? -cap : nhi);
    } else
        for (int b = 0; b < 4; b++) {
            const jv *v = jv_get(s, bound_key[b]);
            if (v && (st = int_bound(v, path, b, &lo, &hi)))
                return st;
        }
    if (a <= 1 && !k)
        return int_range(c, lo, hi, from, to);
    if (lo <= hi && (lo > G_EXACT || hi < -G_EXACT)) /* multiples, none of them written */
        return unsupported(path, "multipleOf",
                           k ? "bounds beyond 2^53 units of its last digit: above them a validator's "
                               "division in doubles is not exact, so only multiples within them are written"
                             : "bounds beyond 2^53 (9007199254740992): above it a validator's division in "
                               "doubles is not exact, so only multiples within it are written");
    lo = lo < -G_EXACT ? -G_EXACT : lo, hi = hi > G_EXACT ? G_EXACT : hi;
    if (odd)
        return emit_listed(c, s, path, lo, hi, a, k, from, to);
    long long n = mod_states(a);
    if (n > G_MOD_NODES)
        return k3_err(
            K3_ERR_UNSUPPORTED,
            "json schema: unsupported keyword \"multipleOf\" at %s: its multiples need %lld grammar "
            "nodes (up to %lld remainders per digit), more than %d",
            path, n, a, G_MOD_NODES);
    for (c->tcap = 64; c->tcap < 2 * n + 64;)
        c->tcap *= 2;
    c->tkey = k3_malloc((size_t)c->tcap * sizeof *c->tkey);
    c->tval = k3_malloc((size_t)c->tcap * sizeof *c->tval);
    if (!c->tkey || !c->tval)
        st = k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    for (int i = 0; !st && i < c->tcap; i++)
        c->tkey[i] = -1;
    c->pw[0] = 1;
    for (int m = 1; m < 17; m++)
        c->pw[m] = c->pw[m - 1] * 10;
    for (int m = 0; m < 17; m++)
        c->red[m] = a / gcd_ll(a, c->pw[m]);
    c->mod = a, c->point = k, c->tail_to = to;
    if (!st)
        st = int_range(c, lo, hi, from, to);
    c->mod = 0, c->point = 0;
    free(c->tkey), free(c->tval);
    c->tkey = NULL, c->tval = NULL;
    return st;
}

/* -?(0|[1-9][0-9]{0,15})(\.[0-9]{1,16})?([eE][+-]?[0-9]{1,2})? */
static k3_status emit_number(sc *c, int from, int to) {
    static const char re[] = "^-?(0|[1-9][0-9]{0,15})(\\.[0-9]{1,16})?([eE][+-]?[0-9]{1,2})?$";
    return g_pattern(c->g, re, sizeof re - 1, "(number)", 0, from, to);
}

/* A format keyword's entry: the grammar writes re (a subset of what the format takes, bounded so
 * a model cannot ramble: labels of at most 16 characters, 4-digit duration fields), ok reads a
 * value as ajv-formats 3 (full mode) does (the enum/const checks). The table is below them. */
typedef struct g_format {
    const char *name, *re;
    int (*ok)(const char *s, size_t n);
} g_format;
static k3_status format_of(const jv *fmt, const char *path, const g_format **out);

/* minLength mn and maxLength mx (-1: none) of a string: *none 1 when no length is both (the
 * string writes nothing: g_finish reports a schema left with nothing); one past G_MAX_UNROLL
 * is refused. */
static k3_status str_lengths(const char *path, long mn, long mx, int *none) {
    *none = mx >= 0 && mn > mx;
    if (!*none && (mn > G_MAX_UNROLL || mx > G_MAX_UNROLL))
        return unsupported(path, mn > G_MAX_UNROLL ? "minLength" : "maxLength", "a length above 4096");
    return K3_OK;
}

/* A string of pattern pat and format fmt (one of them or both: both must hold, the product of
 * their automata) within minLength mn and maxLength mx (-1: none), JSON-escaped or raw, from -> to
 * (between the quotes). */
static k3_status pattern_string(sc *c, const jv *pat, const jv *fmt, const char *path, int raw, long mn,
                                long mx, int from, int to) {
    const char     *re[2];
    size_t          n[2];
    int             n_re = 0, none;
    k3_status       st;
    const g_format *f;
    if (pat && pat->kind != JV_STRING)
        return bad(path, "pattern", "a string");
    if (pat)
        re[n_re] = pat->s, n[n_re++] = pat->n;
    if (fmt && (st = format_of(fmt, path, &f)))
        return st;
    if (fmt)
        re[n_re] = f->re, n[n_re++] = strlen(f->re);
    if ((st = str_lengths(path, mn, mx, &none)) || none)
        return st;
    if (mn == 0 && mx < 0 && n_re == 1)
        return g_pattern(c->g, re[0], n[0], path, raw, from, to);
    return g_pattern_len(c->g, re, n, n_re, path, raw, mn, mx, from, to);
}

static k3_status emit_string(sc *c, const jv *s, const char *path, int from, int to) {
    long      mn, mx;
    k3_status st;
    int       a = node(c), b = node(c);
    if ((st = get_count(s, "minLength", path, 0, &mn)) || (st = get_count(s, "maxLength", path, -1, &mx)))
        return st;
    const jv *pat = jv_get(s, "pattern"), *fmt = jv_get(s, "format");
    if ((st = g_byte(c->g, from, '"', '"', a)) || (st = g_byte(c->g, b, '"', '"', to)))
        return st;
    int none;
    if (pat || fmt)
        return pattern_string(c, pat, fmt, path, 0, mn, mx, a, b);
    if ((st = str_lengths(path, mn, mx, &none)) || none)
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
        int nx = node(c);
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

/* The any-value rule: object, array, string, number, true, false, null. */
static k3_status any_rule(sc *c, int *start) {
    if (c->any >= 0)
        return *start = c->any, K3_OK;
    int       st0 = node(c), end = node(c);
    k3_status st;
    if (end < 0)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    c->g->node[end].ret = 1;
    c->any              = st0;
    *start              = st0;
    /* object: { ("k":V (,"k":V)*)? } */
    int o = node(c), k1 = node(c), k2 = node(c), v1 = node(c), oc = node(c);
    if ((st = g_byte(c->g, st0, '{', '{', o)) || (st = g_byte(c->g, o, '}', '}', end)) ||
        (st = g_byte(c->g, o, '"', '"', k1)) || (st = g_str_char(c->g, k1, k1)) ||
        (st = g_byte(c->g, k1, '"', '"', k2)))
        return st;
    int col = sep(c, k2, ':'), com;
    if (col < 0 || (st = g_call(c->g, col, st0, v1)) || (st = g_eps(c->g, v1, oc)) ||
        (st = g_byte(c->g, oc, '}', '}', end)) || (com = sep(c, oc, ',')) < 0 ||
        (st = g_byte(c->g, com, '"', '"', k1)))
        return st ? st : k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    /* array: [ (V (,V)*)? ] */
    int a = node(c), a1 = node(c);
    if ((st = g_byte(c->g, st0, '[', '[', a)) || (st = g_byte(c->g, a, ']', ']', end)) ||
        (st = g_call(c->g, a, st0, a1)) || (st = g_byte(c->g, a1, ']', ']', end)))
        return st;
    int ac = sep(c, a1, ',');
    if (ac < 0 || (st = g_call(c->g, ac, st0, a1)))
        return st ? st : k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    static const jv str = {.kind = JV_OBJECT};
    if ((st = emit_string(c, &str, "#", st0, end)) || (st = emit_number(c, st0, end)) ||
        (st = lit(c, st0, "true", end)) || (st = lit(c, st0, "false", end)) ||
        (st = lit(c, st0, "null", end)))
        return st;
    return K3_OK;
}

static int is_any(const jv *s) {
    if (!s || s->kind == JV_TRUE)
        return 1;
    if (s->kind != JV_OBJECT)
        return 0;
    for (size_t i = 0; i < s->n; i++)
        if (!IN(s->keys[i].s, annotations))
            return 0;
    return 1;
}

/* A call of schema s (any value: the shared rule) from -> to. */
static k3_status call_schema(sc *c, const jv *s, const char *path, int from, int to) {
    int       start;
    k3_status st = is_any(s) ? any_rule(c, &start) : rule_of(c, s, path, &start);
    return st ? st : g_call(c->g, from, start, to);
}

/* ---- objects ------------------------------------------------------------------------------ */

/* A key of an additional member: "[A-Za-z0-9_-]{1,G_FILL_MAX}" that is none of the declared
 * names (bounded, so a model cannot ramble in a key). */
static k3_status extra_key(sc *c, const jv *props, int from, int to) {
    /* a trie of the declared names that use only the key alphabet; leaving it goes to `free` */
    enum { MAXT = 2048 };
    static const char alpha[] = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz";
    int16_t(*kid)[128]        = k3_calloc(MAXT, sizeof *kid);
    int      *term = k3_calloc(MAXT, sizeof *term), *id = k3_calloc(MAXT, sizeof *id), nt = 1;
    int      *depth = k3_calloc(MAXT, sizeof *depth);
    k3_status st    = K3_OK;
    if (!kid || !term || !id || !depth) {
        st = k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    for (size_t i = 0; props && i < props->n; i++) {
        const jv *k  = &props->keys[i];
        int       ok = k->n > 0;
        for (size_t j = 0; j < k->n && ok; j++)
            ok = k->s[j] && strchr(alpha, k->s[j]) != NULL;
        if (!ok)
            continue;
        int t = 0;
        for (size_t j = 0; j < k->n; j++) {
            uint8_t ch = (uint8_t)k->s[j];
            if (!kid[t][ch]) {
                if (nt == MAXT) {
                    st = unsupported("#", "properties", "too many declared names for additional members");
                    goto done;
                }
                depth[nt]  = depth[t] + 1;
                kid[t][ch] = (int16_t)nt++;
            }
            t = kid[t][ch];
        }
        term[t] = 1;
    }
    int fr[G_FILL_MAX + 1], q = node(c); /* fr[d]: d characters read, off the trie */
    if ((st = g_byte(c->g, from, '"', '"', q)))
        goto done;
    for (int d = 1; d <= G_FILL_MAX; d++)
        fr[d] = node(c);
    for (int d = 1; d <= G_FILL_MAX && !st; d++) {
        for (const char *p = alpha; *p && !st && d < G_FILL_MAX; p++)
            st = g_byte(c->g, fr[d], (uint8_t)*p, (uint8_t)*p, fr[d + 1]);
        if (!st)
            st = g_byte(c->g, fr[d], '"', '"', to);
    }
    for (int t = 0; t < nt; t++)
        id[t] = t ? node(c) : q;
    for (int t = 0; t < nt && !st; t++) {
        if (depth[t] >= G_FILL_MAX)
            continue;
        for (const char *p = alpha; *p && !st; p++) {
            int k = kid[t][(uint8_t)*p];
            st    = g_byte(c->g, id[t], (uint8_t)*p, (uint8_t)*p, k ? id[k] : fr[depth[t] + 1]);
        }
        if (!st && t && !term[t])
            st = g_byte(c->g, id[t], '"', '"', to);
    }
done:
    free(kid);
    free(term);
    free(id);
    free(depth);
    return st;
}

/* Object x's member named by key k (a JSON string; may hold NUL). */
static const jv *member(const jv *x, const jv *k) {
    for (size_t i = 0; i < x->n; i++)
        if (x->keys[i].n == k->n && !memcmp(x->keys[i].s, k->s, k->n))
            return &x->items[i];
    return NULL;
}

/* 1 when list, a "required" array, holds name (anything else holds nothing: a oneOf's branches
 * are compared (tagged_apart) before each is checked, and a string's n is its length). */
static int has_name(const jv *list, const jv *name) {
    for (size_t i = 0; list && list->kind == JV_ARRAY && i < list->n; i++)
        if (list->items[i].kind == JV_STRING && list->items[i].n == name->n &&
            !memcmp(list->items[i].s, name->s, name->n))
            return 1;
    return 0;
}

/* "required": strings that "properties" declares (an object schema's, a tool's parameters'). */
static k3_status check_required(const char *path, const jv *props, const jv *req) {
    if (req && req->kind != JV_ARRAY)
        return bad(path, "required", "an array of strings");
    for (size_t i = 0; req && i < req->n; i++) {
        if (req->items[i].kind != JV_STRING)
            return bad(path, "required", "an array of strings");
        if (!props || !jv_get(props, req->items[i].s) || memchr(req->items[i].s, 0, req->items[i].n))
            return unsupported(path, "required", "a required name that \"properties\" does not declare");
    }
    return K3_OK;
}

/* A schema the compile made (a merged allOf, declared required names): b's text parsed into *out,
 * kept until sc_finish; b is freed. st: the status of writing b (not K3_OK: nothing parsed). */
static k3_status owned_schema(sc *c, jbuf *b, k3_status st, const jv **out) {
    jv *m = NULL;
    if (!st && !(st = jv_parse(b->p, b->n, &m))) {
        jv **o = k3_grow(c->owned, &c->cap_owned, (size_t)c->n_owned + 1, sizeof *o, 8);
        if (!o)
            st = k3_err(K3_ERR_NOMEM, "grammar: out of memory"), jv_free(m);
        else
            c->owned = o, o[c->n_owned++] = m, *out = m;
    }
    free(b->p);
    b->p = NULL;
    return st;
}

/* s's object keywords with each required name that properties does not declare declared, its
 * schema additionalProperties' (any value when absent), after the declared ones: a member every
 * document holds, written like the others. *out NULL when every required name is declared. */
static k3_status declare_required(sc *c, const jv *s, const jv **out) {
    const jv *props = jv_get(s, "properties"), *req = jv_get(s, "required"),
             *addl = jv_get(s, "additionalProperties");
    jbuf      b    = {0};
    k3_status st   = K3_OK;
    size_t    n    = 0;
    *out           = NULL;
    for (size_t i = 0; req && req->kind == JV_ARRAY && i < req->n; i++)
        n += req->items[i].kind == JV_STRING && !(props && member(props, &req->items[i]));
    if (!n)
        return K3_OK;
    st = jbuf_add(&b, "{\"properties\":{", 15);
    for (size_t i = 0; props && i < props->n && !st; i++)
        if (!(i && (st = jbuf_add(&b, ",", 1))) &&
            !(st = jv_dump_str(props->keys[i].s, props->keys[i].n, &b)) && !(st = jbuf_add(&b, ":", 1)))
            st = jv_dump(&props->items[i], JV_COMPACT, &b);
    for (size_t i = 0, k = props ? props->n : 0; i < req->n && !st; i++) {
        const jv *r = &req->items[i];
        if (r->kind != JV_STRING || (props && member(props, r)))
            continue;
        int dupe = 0; /* a name required twice is declared once */
        for (size_t j = 0; j < i && !dupe; j++)
            dupe = req->items[j].kind == JV_STRING && req->items[j].n == r->n &&
                   !memcmp(req->items[j].s, r->s, r->n);
        if (dupe || (k++ && (st = jbuf_add(&b, ",", 1))) || (st = jv_dump_str(r->s, r->n, &b)) ||
            (st = jbuf_add(&b, ":", 1)))
            continue;
        st = addl ? jv_dump(addl, JV_COMPACT, &b) : jbuf_add(&b, "true", 4);
    }
    if (!st && !(st = jbuf_add(&b, "},\"required\":", 13)) && !(st = jv_dump(req, JV_COMPACT, &b)) && addl &&
        !(st = jbuf_add(&b, ",\"additionalProperties\":", 24)))
        st = jv_dump(addl, JV_COMPACT, &b);
    if (!st)
        st = jbuf_add(&b, "}", 1);
    return owned_schema(c, &b, st, out);
}

/* An object schema's properties, required and additionalProperties, the first and last checked
 * for their kind (the writer and the value check read them alike). */
static k3_status object_keywords(const jv *s, const char *path, const jv **props, const jv **req,
                                 const jv **addl) {
    *props = jv_get(s, "properties");
    *req   = jv_get(s, "required");
    *addl  = jv_get(s, "additionalProperties");
    if (*props && (*props)->kind != JV_OBJECT)
        return bad(path, "properties", "an object");
    if (*addl && (*addl)->kind != JV_TRUE && (*addl)->kind != JV_FALSE && (*addl)->kind != JV_OBJECT)
        return bad(path, "additionalProperties", "a boolean or a schema");
    return K3_OK;
}

static k3_status emit_object(sc *c, const jv *s, const char *path, int from, int to) {
    const jv *props, *req, *addl, *full;
    k3_status st;
    char      p2[512];
    if ((st = object_keywords(s, path, &props, &req, &addl)))
        return st;
    if (req && req->kind == JV_ARRAY && (st = declare_required(c, s, &full)))
        return st;
    if (req && req->kind == JV_ARRAY && full) /* JSON Schema: the name must be there, any value addl allows */
        return emit_object(c, full, path, from, to);
    if ((st = check_required(path, props, req)))
        return st;
    int A = node(c), B = node(c); /* A: nothing written yet; B: a member written */
    if ((st = g_byte(c->g, from, '{', '{', A)))
        return st;
    for (size_t i = 0; props && i < props->n; i++) {
        const jv *k  = &props->keys[i];
        int       A2 = node(c), B2 = node(c), K = node(c), V = node(c);
        if (!has_name(req, k) && ((st = g_eps(c->g, A, A2)) || (st = g_eps(c->g, B, B2))))
            return st;
        jbuf kb = {0};
        if ((st = jv_dump_str(k->s, k->n, &kb)))
            return st;
        int com = sep(c, B, ',');
        st      = com < 0 ? k3_err(K3_ERR_NOMEM, "grammar: out of memory") : g_lit(c->g, A, kb.p, kb.n, K);
        if (!st)
            st = g_lit(c->g, com, kb.p, kb.n, K);
        free(kb.p);
        int col = st ? -1 : sep(c, K, ':');
        if (st || col < 0)
            return st ? st : k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        snprintf(p2, sizeof p2, "%s/properties/%.*s", path, (int)(k->n > 200 ? 200 : k->n), k->s);
        if ((st = emit(c, &props->items[i], p2, col, V)) || (st = g_eps(c->g, V, B2)))
            return st;
        A = A2, B = B2;
    }
    if ((st = g_byte(c->g, A, '}', '}', to)) || (st = g_byte(c->g, B, '}', '}', to)))
        return st;
    if (addl && addl->kind == JV_FALSE)
        return K3_OK;
    /* additional members, at most G_EXTRA_MAX: A -> key:V -> E1, B -> , key:V -> E1,
     * Ek -> , key:V -> Ek+1, Ek -> } (bounded so generation ends) */
    sub(p2, sizeof p2, path, "additionalProperties", NULL);
    const jv *vs  = addl && addl->kind == JV_OBJECT ? addl : NULL;
    int       cur = -1;
    for (int k = 0; k < G_EXTRA_MAX; k++) {
        int K = node(c), V = node(c), ca = sep(c, k ? cur : B, ','), col;
        if (ca < 0 || V < 0)
            return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        if ((!k && (st = extra_key(c, props, A, K))) || (st = extra_key(c, props, ca, K)))
            return st;
        if ((col = sep(c, K, ':')) < 0 || (st = call_schema(c, vs, p2, col, V)) ||
            (st = g_byte(c->g, V, '}', '}', to)))
            return st ? st : k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        cur = V;
    }
    return K3_OK;
}

/* ---- arrays --------------------------------------------------------------------------------- */

static k3_status unique_array(sc *c, const jv *s, const char *path, int from, int to);

static k3_status emit_array(sc *c, const jv *s, const char *path, int from, int to) {
    const jv *items = jv_get(s, "items"), *pre = jv_get(s, "prefixItems"), *uq = jv_get(s, "uniqueItems");
    long      mn, mx;
    k3_status st;
    char      p2[512];
    if (uq && uq->kind != JV_TRUE && uq->kind != JV_FALSE)
        return bad(path, "uniqueItems", "a boolean");
    if (uq && uq->kind == JV_TRUE)
        return unique_array(c, s, path, from, to);
    if (items && items->kind == JV_ARRAY)
        return unsupported(path, "items", "the array form (use prefixItems)");
    if (items && items->kind != JV_OBJECT && items->kind != JV_TRUE && items->kind != JV_FALSE)
        return bad(path, "items", "a schema");
    if (pre && pre->kind != JV_ARRAY)
        return bad(path, "prefixItems", "an array of schemas");
    if ((st = get_count(s, "minItems", path, 0, &mn)) || (st = get_count(s, "maxItems", path, -1, &mx)))
        return st;
    long np = pre ? (long)pre->n : 0;
    if (items && items->kind == JV_FALSE && (mx < 0 || mx > np))
        mx = np;
    if (mx >= 0 && mn > mx)
        return K3_OK; /* no array: nothing (it wrote exactly maxItems, fewer than minItems) */
    long lim = mx >= 0 ? mx : (mn > np ? mn : np);
    if (lim > G_MAX_UNROLL) /* named by what set it: a long prefixItems was blamed on minItems */
        return unsupported(path,
                           lim == np ? "prefixItems"
                           : mx >= 0 ? "maxItems"
                                     : "minItems",
                           "a count above 4096");
    int cur = node(c);
    if ((st = g_byte(c->g, from, '[', '[', cur)))
        return st;
    for (long k = 0; k < lim; k++) {
        if (k >= mn && (st = g_byte(c->g, cur, ']', ']', to)))
            return st;
        int       nx = node(c), at = k ? sep(c, cur, ',') : cur;
        const jv *el = k < np ? &pre->items[k] : items;
        if (k < np)
            snprintf(p2, sizeof p2, "%s/prefixItems/%ld", path, k);
        else
            sub(p2, sizeof p2, path, "items", NULL);
        if (at < 0 || (st = call_schema(c, el, p2, at, nx)))
            return st ? st : k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        cur = nx;
    }
    if ((st = g_byte(c->g, cur, ']', ']', to)) || mx >= 0)
        return st;
    sub(p2, sizeof p2, path, "items", NULL);
    if (lim == 0) {
        int one = node(c);
        if ((st = call_schema(c, items, p2, cur, one)) || (st = g_byte(c->g, one, ']', ']', to)))
            return st;
        cur = one;
    }
    int at = sep(c, cur, ',');
    if (at < 0)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    return call_schema(c, items, p2, at, cur);
}

/* ---- combinators ------------------------------------------------------------------------------ */

static int kind_type(const jv *v) {
    switch (v->kind) {
    case JV_NULL:
        return T_NULL;
    case JV_TRUE:
    case JV_FALSE:
        return T_BOOL;
    case JV_INT:
        return T_INT | T_NUM;
    case JV_FLOAT: /* JSON Schema's integer is a value: 2.0 and 1e+20 are integers (ajv agrees) */
        return isfinite(v->d) && v->d == floor(v->d) ? T_INT | T_NUM : T_NUM;
    case JV_STRING:
        return T_STR;
    case JV_ARRAY:
        return T_ARR;
    default:
        return T_OBJ;
    }
}

static k3_status types_of(const jv *s, const char *path, int *mask) {
    static const struct {
        const char *n;
        int         t;
    } tn[]      = {{"null", T_NULL},  {"boolean", T_BOOL}, {"integer", T_INT}, {"number", T_NUM},
                   {"string", T_STR}, {"array", T_ARR},    {"object", T_OBJ}};
    const jv *t = jv_get(s, "type");
    *mask       = 0;
    if (!t)
        return K3_OK;
    size_t n = t->kind == JV_ARRAY ? t->n : 1;
    if (!n) /* not "any type": the meta-schema asks for at least one (ajv refuses the schema) */
        return bad(path, "type", "a type or a non-empty list of types");
    for (size_t i = 0; i < n; i++) {
        const jv *e = t->kind == JV_ARRAY ? &t->items[i] : t;
        int       k = 0;
        for (size_t j = 0; e->kind == JV_STRING && j < sizeof tn / sizeof *tn; j++)
            if (!strcmp(e->s, tn[j].n))
                k = tn[j].t;
        if (!k)
            return bad(path, "type",
                       "null, boolean, integer, number, string, array or object (or a list of them)");
        *mask |= k;
    }
    return K3_OK;
}

static uint32_t name_hash(const char *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 16777619u;
    return h;
}

static uint32_t name_hash_at(const void *ctx, int i) {
    const jv *key = &((const jv *)ctx)->keys[i];
    return name_hash(key->s, key->n);
}

/* defs' member named name: a hash look-up (a scan per $ref was quadratic in the definitions). */
static const jv *defs_get(sc *c, const jv *defs, const char *name) {
    if (!defs || defs->kind != JV_OBJECT || defs->n < 16)
        return jv_get(defs, name);
    if (c->dobj != defs) {
        int cap = 32;
        while ((size_t)cap < 2 * defs->n)
            cap *= 2;
        int32_t *h = defs->n < INT32_MAX / 2 ? g_index_build(cap, (int)defs->n, name_hash_at, defs) : NULL;
        if (!h)
            return jv_get(defs, name);
        free(c->dh);
        c->dh = h, c->dhcap = cap, c->dobj = defs;
    }
    size_t         n    = strlen(name);
    const uint32_t mask = (uint32_t)(c->dhcap - 1);
    for (uint32_t k = name_hash(name, n) & mask; c->dh[k]; k = (k + 1) & mask) {
        const jv *key = &defs->keys[c->dh[k] - 1];
        if (key->n == n && !memcmp(key->s, name, n))
            return &defs->items[c->dh[k] - 1];
    }
    return NULL;
}

static int hex_val(char ch) {
    return ch >= '0' && ch <= '9'                     ? ch - '0'
           : (ch | 0x20) >= 'a' && (ch | 0x20) <= 'f' ? (ch | 0x20) - 'a' + 10
                                                      : -1;
}

static k3_status resolve(sc *c, const jv *ref, const char *path, const jv **out) {
    if (ref->kind != JV_STRING)
        return bad(path, "$ref", "a string");
    if (!strcmp(ref->s, "#"))
        return *out = c->root, K3_OK;
    const char *pre[] = {"#/$defs/", "#/definitions/"};
    for (int k = 0; k < 2; k++) {
        size_t l = strlen(pre[k]);
        if (strncmp(ref->s, pre[k], l))
            continue;
        const jv *defs = jv_get(c->root, k ? "definitions" : "$defs");
        /* a URI fragment: percent-decoded first (ajv: "#/$defs/a%20b" names "a b"), then a JSON
         * pointer of one step (a '/' goes deeper: unsupported), ~1 in it '/' and ~0 '~' */
        char  *name = k3_malloc(ref->n + 1);
        size_t n    = 0;
        int    deep = 0;
        if (!name)
            return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        for (const char *p = ref->s + l; *p; p++) {
            int hi = p[0] == '%' ? hex_val(p[1]) : -1, lo = hi >= 0 ? hex_val(p[2]) : -1;
            name[n++] = lo >= 0 ? (char)(hi << 4 | lo) : *p;
            p += lo >= 0 ? 2 : 0;
        }
        size_t m = 0, nul = 0;
        for (size_t i = 0; i < n; i++) {
            deep |= name[i] == '/';
            nul |= !name[i];
            name[m++] = name[i] == '~' && i + 1 < n && (name[i + 1] == '0' || name[i + 1] == '1')
                            ? name[++i] == '1' ? '/' : '~'
                            : name[i];
        }
        name[m]     = 0;
        const jv *d = defs && !deep && !nul ? defs_get(c, defs, name) : NULL;
        free(name);
        if (d)
            return *out = d, K3_OK;
        if (deep)
            return unsupported(path, "$ref", "a pointer below a definition (only #/$defs/NAME)");
        return k3_err(K3_ERR_ARG, "json schema: \"$ref\" at %s: \"%s\" names no definition", path, ref->s);
    }
    return unsupported(path, "$ref", "only #, #/$defs/NAME and #/definitions/NAME");
}

/* The types a schema may produce, for oneOf's disjointness check (T_ALL when unknown). */
static int schema_types(sc *c, const jv *s, int depth) {
    int m = 0;
    if (!s || s->kind != JV_OBJECT || depth > 16)
        return T_ALL;
    const jv *e, *r;
    if ((r = jv_get(s, "$ref"))) {
        const jv *t;
        if (resolve(c, r, "#", &t))
            return T_ALL;
        return schema_types(c, t, depth + 1);
    }
    if ((e = jv_get(s, "const")))
        return kind_type(e);
    if ((e = jv_get(s, "enum")) && e->kind == JV_ARRAY) {
        for (size_t i = 0; i < e->n; i++)
            m |= kind_type(&e->items[i]);
        return m;
    }
    if (types_of(s, "#", &m) || !m)
        return T_ALL;
    return m & T_NUM ? m | T_INT : m;
}

/* A name every closed branch (additionalProperties false) declares. */
static int allowed(const jv *const *br, size_t nb, const char *nm) {
    for (size_t j = 0; j < nb; j++) {
        const jv *ap = jv_get(br[j], "additionalProperties"), *pp = jv_get(br[j], "properties");
        if (ap && ap->kind == JV_FALSE && !(pp && jv_get(pp, nm)))
            return 0;
    }
    return 1;
}

/* allOf of object schemas: one object schema, built as JSON text and parsed. A branch with
 * additionalProperties false allows only the names it declares, so a name is kept when every
 * closed branch declares it; a name two branches declare must have the same schema in both;
 * required names are the union (one a closed branch excludes: no document satisfies it). */
static k3_status merge_allof(sc *c, const jv *s, const char *path, const jv **out) {
    const jv *all   = jv_get(s, "allOf"), *br[64];
    jbuf      b     = {0};
    k3_status st    = K3_OK;
    int       nprop = 0, nreq = 0, closed = 0;
    size_t    nb;
    if (all->kind != JV_ARRAY || all->n == 0)
        return bad(path, "allOf", "a non-empty array of schemas");
    if (all->n > 64)
        return unsupported(path, "allOf", "more than 64 branches");
    for (size_t k = 0; k < s->n; k++)
        if (strcmp(s->keys[k].s, "allOf") && !IN(s->keys[k].s, annotations))
            return unsupported(path, "allOf", "with sibling keywords");
    for (nb = 0; nb < all->n; nb++) {
        const jv *x = &all->items[nb], *ref;
        int       t = 0;
        if (x->kind == JV_OBJECT && (ref = jv_get(x, "$ref")) && (st = resolve(c, ref, path, &x)))
            return st;
        if (x->kind != JV_OBJECT || types_of(x, path, &t) || (t && t != T_OBJ))
            return unsupported(path, "allOf", "a branch that is not an object schema");
        if (jv_get(x, "$id"))
            return unsupported(path, "$id", "below the root (a $ref under it would name its own $defs)");
        for (size_t k = 0; k < x->n; k++)
            if (!IN(x->keys[k].s, annotations) && strcmp(x->keys[k].s, "type") &&
                strcmp(x->keys[k].s, "properties") && strcmp(x->keys[k].s, "required") &&
                strcmp(x->keys[k].s, "additionalProperties"))
                return unsupported(path, "allOf",
                                   "a branch keyword other than properties/required/additionalProperties");
        const jv *ap = jv_get(x, "additionalProperties");
        if (ap && ap->kind == JV_OBJECT)
            return unsupported(path, "allOf", "a branch with an additionalProperties schema");
        closed |= ap && ap->kind == JV_FALSE;
        br[nb] = x;
    }
    const char *head = "{\"type\":\"object\",\"properties\":{", *mid = "},\"required\":[";
    st = jbuf_add(&b, head, strlen(head));
    for (size_t i = 0; i < nb && !st; i++) {
        const jv *l = jv_get(br[i], "properties");
        for (size_t k = 0; l && l->kind == JV_OBJECT && k < l->n && !st; k++) {
            const char *nm   = l->keys[k].s;
            int         dupe = 0;
            for (size_t j = 0; j < i && !dupe; j++) { /* declared before: the same schema, or refused */
                const jv *pj = jv_get(br[j], "properties"), *o = pj ? jv_get(pj, nm) : NULL;
                if (o) {
                    jbuf x = {0}, y = {0};
                    jv_dump(o, JV_SORTED_COMPACT, &x);
                    jv_dump(&l->items[k], JV_SORTED_COMPACT, &y);
                    dupe = x.n == y.n && (!x.n || !memcmp(x.p, y.p, x.n)) ? 1 : -1;
                    free(x.p);
                    free(y.p);
                }
            }
            if (dupe < 0) {
                free(b.p);
                return unsupported(path, "allOf", "a property two branches declare with different schemas");
            }
            if (dupe || !allowed(br, nb, nm))
                continue;
            if ((nprop++ && (st = jbuf_add(&b, ",", 1))) || (st = jv_dump_str(nm, l->keys[k].n, &b)) ||
                (st = jbuf_add(&b, ":", 1)))
                break;
            st = jv_dump(&l->items[k], JV_SORTED_COMPACT, &b);
        }
    }
    if (!st)
        st = jbuf_add(&b, mid, strlen(mid));
    for (size_t i = 0; i < nb && !st; i++) {
        const jv *l = jv_get(br[i], "required");
        for (size_t k = 0; l && l->kind == JV_ARRAY && k < l->n && !st; k++) {
            if (l->items[k].kind != JV_STRING)
                continue;
            if (!allowed(br, nb, l->items[k].s)) {
                free(b.p);
                return k3_err(K3_ERR_ARG,
                              "json schema: \"allOf\" at %s: required \"%s\" is excluded by a branch's "
                              "additionalProperties false (no document satisfies it)",
                              path, l->items[k].s);
            }
            if (!(nreq++ && (st = jbuf_add(&b, ",", 1))))
                st = jv_dump(&l->items[k], JV_SORTED_COMPACT, &b);
        }
    }
    const char *tail = closed ? "],\"additionalProperties\":false}" : "]}";
    if (!st)
        st = jbuf_add(&b, tail, strlen(tail));
    return owned_schema(c, &b, st, out);
}

/* The string constants schema p allows (const or enum of strings): *n of them at *v (an array or
 * the const itself); 0 when p is not such a schema. */
static int str_consts(const jv *p, const jv **v, size_t *n) {
    const jv *e = p && p->kind == JV_OBJECT ? jv_get(p, "const") : NULL;
    if (e) {
        *v = e, *n = 1;
        return e->kind == JV_STRING;
    }
    e = p && p->kind == JV_OBJECT ? jv_get(p, "enum") : NULL;
    if (!e || e->kind != JV_ARRAY)
        return 0;
    for (size_t i = 0; i < e->n; i++)
        if (e->items[i].kind != JV_STRING)
            return 0;
    *v = e->items, *n = e->n;
    return 1;
}

/* 1 when no document matches both object schemas a and b: a property both require whose string
 * constants (const or enum) have none in common (a tagged union's discriminator). */
static int tagged_apart(sc *c, const jv *a, const jv *b) {
    const jv *r;
    if (a->kind == JV_OBJECT && (r = jv_get(a, "$ref")) && resolve(c, r, "#", &a))
        return 0;
    if (b->kind == JV_OBJECT && (r = jv_get(b, "$ref")) && resolve(c, r, "#", &b))
        return 0;
    const jv *pa = jv_get(a, "properties"), *pb = jv_get(b, "properties");
    for (size_t k = 0; pa && pb && pa->kind == JV_OBJECT && k < pa->n; k++) {
        const jv *name = &pa->keys[k], *va, *vb;
        size_t    na, nb;
        if (!has_name(jv_get(a, "required"), name) || !has_name(jv_get(b, "required"), name) ||
            !str_consts(&pa->items[k], &va, &na) || !str_consts(jv_get(pb, name->s), &vb, &nb))
            continue;
        int common = 0;
        for (size_t i = 0; i < na && !common; i++)
            for (size_t j = 0; j < nb && !common; j++)
                common = va[i].n == vb[j].n && !memcmp(va[i].s, vb[j].s, va[i].n);
        if (!common)
            return 1;
    }
    return 0;
}

static k3_status emit_alts(sc *c, const jv *s, const char *key, const char *path, int from, int to) {
    const jv *l = jv_get(s, key);
    char      p2[512];
    k3_status st;
    if (l->kind != JV_ARRAY || l->n == 0)
        return bad(path, key, "a non-empty array of schemas");
    for (size_t k = 0; k < s->n; k++)
        if (strcmp(s->keys[k].s, key) && !IN(s->keys[k].s, annotations))
            return unsupported(path, key, "with sibling keywords (put them in each branch)");
    for (size_t i = 0; !strcmp(key, "oneOf") && i < l->n; i++) /* pairwise disjoint */
        for (size_t j = 0; j < i; j++) {
            int t = schema_types(c, &l->items[i], 0) & schema_types(c, &l->items[j], 0);
            if (t && !(t == T_OBJ && tagged_apart(c, &l->items[i], &l->items[j])))
                return unsupported(path, "oneOf",
                                   "branches that may match the same document (supported: branches of "
                                   "distinct types, or objects told apart by a required property of "
                                   "distinct string constants; anyOf has no such limit)");
        }
    for (size_t i = 0; i < l->n; i++) {
        snprintf(p2, sizeof p2, "%s/%s/%zu", path, key, i);
        if ((st = emit(c, &l->items[i], p2, from, to)))
            return st;
    }
    return K3_OK;
}

/* ---- enum and const with other keywords: a value check -------------------------------------
 * An enum/const value is written as the schema spells it, and kept only when the schema's other
 * keywords allow it. That is a validator's question about one JSON value, so it is answered as
 * a validator answers it (vcheck), not with a grammar: object members in any order and any
 * number of them, strings of any length around an unanchored pattern, numbers by value. Both
 * readings of a number must pass (ajv's: JSON.parse's double; Python's json: integers exact),
 * as the bounds the grammar writes do (int_bound). A pattern is matched by its own automaton
 * (gram-re.c, with unbounded text around it); formats as ajv-formats 3 (full mode) reads them.
 * The checks of one compile share a budget of visits (G_CHECK_MAX), so a schema whose branches
 * multiply (an anyOf of $refs to anyOfs) is refused, not looped over. */

#define G_CHECK_MAX 4000000 /* schema visits (and 16-byte string pieces) of one compile's checks */
#define G_CHECK_DEPTH 256   /* schemas nested in one check ($refs included) */

typedef struct vc {
    sc         *c;
    int         py;   /* 0: numbers as doubles (ajv); 1: integers exactly (Python's json) */
    const char *skip; /* the top schema's keyword whose values are checked (enum/const) */
} vc;

/* A number's value as a validator reads it (JSON.parse: the nearest double). */
static double jv_number(const jv *x) {
    return x->kind == JV_FLOAT ? x->d : strtod(x->s, NULL);
}

/* a - b for two integer literals ("-0" is read as "0"): by sign, length, then digits. */
static int int_text_cmp(const char *a, const char *b) {
    int na = a[0] == '-', nb = b[0] == '-';
    if (na != nb)
        return na ? -1 : 1;
    size_t la = strlen(a += na), lb = strlen(b += nb);
    int    r = la != lb ? (la < lb ? -1 : 1) : strcmp(a, b);
    r        = (r > 0) - (r < 0);
    return na ? -r : r;
}

/* The sign of integer literal a - double d, exactly (Python compares an int with a float so). */
static int int_dbl_cmp(const char *a, double d) {
    if (isinf(d))
        return d > 0 ? -1 : 1;
    double f = floor(d);
    char   t[400];
    snprintf(t, sizeof t, "%.0f", f == 0 ? 0.0 : f); /* every digit of an integral double */
    int r = int_text_cmp(a, t);
    return r ? r : (d > f ? -1 : 0);
}

/* The sign of a - b for two JSON numbers in reading py (vc). */
static int num_cmp(const jv *a, const jv *b, int py) {
    if (py && a->kind == JV_INT && b->kind == JV_INT)
        return int_text_cmp(a->s, b->s);
    if (py && a->kind == JV_INT)
        return int_dbl_cmp(a->s, b->d);
    if (py && b->kind == JV_INT)
        return -int_dbl_cmp(b->s, a->d);
    double x = jv_number(a), y = jv_number(b);
    return (x > y) - (x < y);
}

static int is_num(const jv *x) {
    return x->kind == JV_INT || x->kind == JV_FLOAT;
}

/* JSON equality as enum, const and uniqueItems compare: numbers by value (1 and 1.0 are one),
 * object members in any order. */
static int value_eq(const jv *a, const jv *b, int py) {
    if (is_num(a) && is_num(b))
        return num_cmp(a, b, py) == 0;
    if (a->kind != b->kind)
        return 0;
    switch (a->kind) {
    case JV_STRING:
        return a->n == b->n && !memcmp(a->s, b->s, a->n);
    case JV_ARRAY:
        if (a->n != b->n)
            return 0;
        for (size_t i = 0; i < a->n; i++)
            if (!value_eq(&a->items[i], &b->items[i], py))
                return 0;
        return 1;
    case JV_OBJECT: /* the parser keeps one member per name */
        if (a->n != b->n)
            return 0;
        for (size_t i = 0; i < a->n; i++) {
            const jv *o = member(b, &a->keys[i]);
            if (!o || !value_eq(&a->items[i], o, py))
                return 0;
        }
        return 1;
    default:
        return 1;
    }
}

/* x is a multiple of k (its double d > 0) in reading py (vc): ajv's x / k !== parseInt(x / k) in
 * doubles (so an integral quotient of 1e21 or more, printed with an exponent, fails); Python's
 * jsonschema: an exact remainder for integers, x % k for a float x, the quotient for a float k
 * (one that overflows is taken as failing, as at worst a value is left out). */
static int multiple_ok(const jv *x, const jv *k, double d, int py) {
    if (!py || k->kind == JV_FLOAT) {
        double q = jv_number(x) / d;
        return isfinite(q) && q == floor(q) && (py || fabs(q) < 1e21);
    }
    if (x->kind == JV_FLOAT)
        return fmod(x->d, d) == 0;
    __extension__ typedef unsigned __int128 u128;
    u128                                    m = 0, r = 0; /* the remainder of |x|, digit by digit */
    int huge = k->n > 37; /* past 10^37 r * 10 may overflow: only 0 is taken (at worst left out) */
    for (const char *p = k->s; !huge && *p; p++)
        m = m * 10 + (unsigned)(*p - '0');
    for (const char *p = x->s + (x->s[0] == '-'); *p; p++)
        r = huge ? r || *p != '0' : (r * 10 + (unsigned)(*p - '0')) % m;
    return r == 0;
}

/* A string's length as JSON Schema counts it: code points (a character past U+FFFF is one). */
static size_t code_points(const jv *x) {
    size_t n = 0;
    for (size_t i = 0; i < x->n; i++)
        n += ((uint8_t)x->s[i] & 0xc0) != 0x80;
    return n;
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
        if (!strchr("0123456789abcdefABCDEF", s[i]) || !s[i])
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
        while (j < n && j - i < 5 && hex_val(s[j]) >= 0)
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
static k3_status format_of(const jv *fmt, const char *path, const g_format **out) {
    char why[256];
    int  at;
    if (fmt->kind != JV_STRING)
        return bad(path, "format", "a string");
    for (size_t k = 0; k < sizeof formats / sizeof *formats; k++)
        if (!strcmp(fmt->s, formats[k].name))
            return *out = &formats[k], K3_OK;
    at = snprintf(why, sizeof why, "format \"%.64s\" (supported:", fmt->s);
    for (size_t k = 0; k < sizeof formats / sizeof *formats && at > 0 && (size_t)at < sizeof why; k++)
        at += snprintf(why + at, sizeof why - (size_t)at, "%s %s", k ? "," : "", formats[k].name);
    if (at > 0 && (size_t)at < sizeof why)
        snprintf(why + at, sizeof why - (size_t)at, ")");
    return unsupported(path, "format", why);
}

/* *ok: string x matches pattern re (ECMAScript: anywhere in x unless anchored), matched by the
 * pattern's automaton with unbounded text around it (g_fill of a check grammar); compiled once
 * per pattern keyword of the compile. */
static k3_status pattern_ok(sc *c, const jv *re, const jv *x, const char *path, int *ok) {
    int i = 0;
    *ok   = 0;
    while (i < c->n_pat && c->pat[i].re != re)
        i++;
    if (i == c->n_pat) {
        k3_grammar *g = NULL;
        k3_status   st;
        sc_pat     *p = k3_grow(c->pat, &c->cap_pat, (size_t)c->n_pat + 1, sizeof *p, 4);
        if (!p)
            return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        c->pat = p;
        if ((st = g_new(c->g->voc, "json schema", &g)))
            return st;
        g->free_fill = 1;
        g->meter     = c->g->meter;
        int b = g_node_new(g), e = g_node_new(g);
        if (e < 0)
            st = k3_err(K3_ERR_NOMEM, "grammar: out of memory");
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

static k3_status vcheck(vc *v, const jv *s, const jv *x, const char *path, int depth, int *ok);

/* *ok: x is valid against every schema of list (all 1), at least one (all 0: anyOf), exactly one
 * (all -1: oneOf). Every branch is checked, so a refusal does not depend on the value. */
static k3_status vcheck_list(vc *v, const jv *s, const char *key, int all, const jv *x, const char *path,
                             int depth, int *ok) {
    const jv *l = jv_get(s, key);
    char      p2[512];
    int       n = 0;
    if (l->kind != JV_ARRAY || l->n == 0)
        return bad(path, key, "a non-empty array of schemas");
    for (size_t i = 0; i < l->n; i++) {
        int       one;
        k3_status st;
        snprintf(p2, sizeof p2, "%s/%s/%zu", path, key, i);
        if ((st = vcheck(v, &l->items[i], x, p2, depth + 1, &one)))
            return st;
        n += one;
    }
    *ok = all > 0 ? (size_t)n == l->n : all < 0 ? n == 1 : n > 0;
    return K3_OK;
}

static k3_status vcheck_string(vc *v, const jv *s, const jv *x, const char *path, int *ok) {
    long      mn, mx;
    k3_status st;
    const jv *pat = jv_get(s, "pattern"), *fmt = jv_get(s, "format");
    if ((st = get_count(s, "minLength", path, 0, &mn)) || (st = get_count(s, "maxLength", path, -1, &mx)))
        return st;
    size_t len = code_points(x);
    *ok        = len >= (size_t)mn && (mx < 0 || len <= (size_t)mx);
    if (pat && pat->kind != JV_STRING)
        return bad(path, "pattern", "a string");
    if (pat && *ok && (st = pattern_ok(v->c, pat, x, path, ok)))
        return st;
    const g_format *f;
    if (fmt && (st = format_of(fmt, path, &f)))
        return st;
    if (fmt)
        *ok = *ok && f->ok(x->s, x->n);
    return K3_OK;
}

static k3_status vcheck_array(vc *v, const jv *s, const jv *x, const char *path, int depth, int *ok) {
    const jv *items = jv_get(s, "items"), *pre = jv_get(s, "prefixItems"), *uq = jv_get(s, "uniqueItems");
    long      mn, mx;
    k3_status st;
    char      p2[512];
    if (items && items->kind == JV_ARRAY)
        return unsupported(path, "items", "the array form (use prefixItems)");
    if (pre && pre->kind != JV_ARRAY)
        return bad(path, "prefixItems", "an array of schemas");
    if (uq && uq->kind != JV_TRUE && uq->kind != JV_FALSE)
        return bad(path, "uniqueItems", "a boolean");
    if ((st = get_count(s, "minItems", path, 0, &mn)) || (st = get_count(s, "maxItems", path, -1, &mx)))
        return st;
    *ok = x->n >= (size_t)mn && (mx < 0 || x->n <= (size_t)mx);
    for (size_t i = 0; i < x->n && *ok; i++) {
        const jv *el = pre && i < pre->n ? &pre->items[i] : items;
        if (pre && i < pre->n)
            snprintf(p2, sizeof p2, "%s/prefixItems/%zu", path, i);
        else
            sub(p2, sizeof p2, path, "items", NULL);
        if (el && (st = vcheck(v, el, &x->items[i], p2, depth + 1, ok)))
            return st;
    }
    for (size_t i = 0; uq && uq->kind == JV_TRUE && i < x->n && *ok; i++)
        for (size_t j = 0; j < i && *ok; j++)
            *ok = !value_eq(&x->items[i], &x->items[j], v->py);
    return K3_OK;
}

static k3_status vcheck_object(vc *v, const jv *s, const jv *x, const char *path, int depth, int *ok) {
    const jv *props, *req, *addl;
    k3_status st;
    char      p2[512];
    if ((st = object_keywords(s, path, &props, &req, &addl)))
        return st;
    if (req && req->kind != JV_ARRAY)
        return bad(path, "required", "an array of strings");
    *ok = 1;
    for (size_t i = 0; req && i < req->n && *ok; i++) {
        if (req->items[i].kind != JV_STRING)
            return bad(path, "required", "an array of strings");
        *ok = member(x, &req->items[i]) != NULL;
    }
    for (size_t i = 0; i < x->n && *ok; i++) {
        const jv *k = &x->keys[i], *ps = props ? member(props, k) : NULL;
        if (ps)
            snprintf(p2, sizeof p2, "%s/properties/%.*s", path, (int)(k->n > 200 ? 200 : k->n), k->s);
        else
            sub(p2, sizeof p2, path, "additionalProperties", NULL);
        if ((ps || addl) && (st = vcheck(v, ps ? ps : addl, &x->items[i], p2, depth + 1, ok)))
            return st;
    }
    return K3_OK;
}

/* *ok: value x is valid against schema s (the top one without v->skip), as a validator reads it.
 * A keyword the compiler does not know is refused as emit_schema refuses it. */
static k3_status vcheck(vc *v, const jv *s, const jv *x, const char *path, int depth, int *ok) {
    const char *skip = depth ? NULL : v->skip;
    const jv   *k;
    k3_status   st;
    int         types;
    *ok = s->kind != JV_FALSE;
    if (s->kind == JV_TRUE || s->kind == JV_FALSE)
        return K3_OK;
    if (s->kind != JV_OBJECT)
        return k3_err(K3_ERR_ARG, "json schema: at %s: expected a schema (an object or a boolean)", path);
    if (depth > G_CHECK_DEPTH || ++v->c->checked > G_CHECK_MAX)
        return k3_err(K3_ERR_UNSUPPORTED,
                      "json schema: too large at %s: checking enum/const values against their other keywords "
                      "takes more than %s",
                      path, depth > G_CHECK_DEPTH ? "256 nested schemas" : "4,000,000 steps");
    for (size_t i = 0; i < s->n; i++)
        if (!IN(s->keys[i].s, annotations) && !IN(s->keys[i].s, keywords))
            return unsupported(path, s->keys[i].s, NULL);
    if (s != v->c->root && jv_get(s, "$id"))
        return unsupported(path, "$id", "below the root (a $ref under it would name its own $defs)");
    if ((st = types_of(s, path, &types)))
        return st;
    if (types && !(kind_type(x) & types))
        return *ok = 0, K3_OK;
    for (int b = 0; b < 4 && is_num(x); b++) {
        if (!(k = jv_get(s, bound_key[b])))
            continue;
        double d;
        if ((st = bound_value(k, path, bound_key[b], &d)))
            return st;
        int r = num_cmp(x, k, v->py);
        if (b == 0 ? r < 0 : b == 1 ? r <= 0 : b == 2 ? r > 0 : r >= 0)
            return *ok = 0, K3_OK;
    }
    if ((k = jv_get(s, "multipleOf")) && is_num(x)) {
        double d;
        if ((st = bound_value(k, path, "multipleOf", &d)))
            return st;
        if (!(d > 0))
            return bad(path, "multipleOf", "a number above 0");
        if (!multiple_ok(x, k, d, v->py))
            return *ok = 0, K3_OK;
    }
    if ((k = jv_get(s, "const")) && (!skip || strcmp(skip, "const")) && !value_eq(x, k, v->py))
        return *ok = 0, K3_OK;
    if ((k = jv_get(s, "enum")) && (!skip || strcmp(skip, "enum"))) {
        if (k->kind != JV_ARRAY)
            return bad(path, "enum", "an array");
        size_t i = 0;
        while (i < k->n && !value_eq(x, &k->items[i], v->py))
            i++;
        if (i == k->n)
            return *ok = 0, K3_OK;
    }
    st = x->kind == JV_STRING   ? vcheck_string(v, s, x, path, ok)
         : x->kind == JV_ARRAY  ? vcheck_array(v, s, x, path, depth, ok)
         : x->kind == JV_OBJECT ? vcheck_object(v, s, x, path, depth, ok)
                                : K3_OK;
    if (!st && *ok && (k = jv_get(s, "$ref"))) {
        const jv *t;
        if (!(st = resolve(v->c, k, path, &t)))
            st = vcheck(v, t, x, path, depth + 1, ok);
    }
    static const char *const comb[] = {"allOf", "anyOf", "oneOf"};
    for (int i = 0; i < 3 && !st && *ok; i++)
        if (jv_get(s, comb[i]))
            st = vcheck_list(v, s, comb[i], 1 - i, x, path, depth, ok);
    return st;
}

/* *ok: value x of s's key (enum or const) passes s's other keywords in both readings of its
 * numbers (vc.py). */
static k3_status value_ok(sc *c, const jv *s, const char *key, const char *path, const jv *x, int *ok) {
    k3_status st = K3_OK;
    *ok          = 1;
    for (int py = 0; py < 2 && *ok && !st; py++)
        st = vcheck(&(vc){.c = c, .py = py, .skip = key}, s, x, path, 0, ok);
    return st;
}

/* The values of s's const (else enum) that s's other keywords allow (value_ok), from -> to;
 * raw 1: strings only, written raw (a tool call's string argument). */
/* The values of s's enum or const that its other keywords allow (value_ok), each as the schema
 * spells it: (*l)[i] its text (into all->p), (*xs)[i] the value, *m of them. The caller frees
 * all->p, *l and *xs. */
static k3_status kept_values(sc *c, const jv *s, const char *path, int raw, jbuf *all, lit_t **l,
                             const jv ***xs, size_t *m) {
    const jv   *v   = jv_get(s, "const") ? jv_get(s, "const") : jv_get(s, "enum");
    const char *key = jv_get(s, "const") ? "const" : "enum";
    size_t      n   = key[0] == 'c' ? 1 : v->n;
    k3_status   st  = K3_OK;
    *m = 0, *l = NULL, *xs = NULL;
    if (key[0] == 'e' && v->kind != JV_ARRAY)
        return bad(path, "enum", "an array");
    size_t *end = k3_malloc((n + 1) * sizeof *end);
    *l          = k3_malloc((n + 1) * sizeof **l);
    *xs         = k3_malloc((n + 1) * sizeof **xs);
    if (!end || !*l || !*xs)
        st = k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    for (size_t i = 0; i < n && !st; i++) {
        const jv *x  = key[0] == 'c' ? v : &v->items[i];
        int       ok = !raw || x->kind == JV_STRING;
        if (ok && !(st = value_ok(c, s, key, path, x, &ok)) && ok && !(st = value_text(x, path, raw, all)))
            end[*m] = all->n, (*xs)[(*m)++] = x;
    }
    for (size_t i = 0; i < *m && !st; i++)
        (*l)[i] = (lit_t){.p = all->p + (i ? end[i - 1] : 0), .n = end[i] - (i ? end[i - 1] : 0)};
    free(end);
    return st;
}

static k3_status emit_enum(sc *c, const jv *s, const char *path, int raw, int from, int to) {
    jbuf       all = {0};
    lit_t     *l;
    const jv **xs;
    size_t     m;
    k3_status  st = kept_values(c, s, path, raw, &all, &l, &xs, &m);
    if (!st)
        st = emit_trie(c, l, m, from, to);
    free(all.p), free(l), free(xs);
    return st;
}

/* ---- uniqueItems -----------------------------------------------------------------------------
 * uniqueItems: true over items of a few values (an enum or const, through $refs too; booleans;
 * null): the grammar tracks which were used, a node per set of them (of at most maxItems), from
 * which each unused value's text leads to the set with it added. Values a validator takes as
 * equal (1 and 1.0, in either reading) are one. Items of any other kind are refused: their
 * values are not a set the grammar can count. */

#define G_UQ_MAX 16       /* distinct item values at most: 2^16 sets */
#define G_UQ_NODES 131072 /* the sets' nodes and their values' texts at most */

static k3_status unique_refused(const char *path, const char *why) {
    return unsupported(path, "uniqueItems", why);
}

static k3_status unique_array(sc *c, const jv *s, const char *path, int from, int to) {
    static const lit_t lits[3] = {{"null", 4}, {"true", 4}, {"false", 5}};
    const jv          *it      = jv_get(s, "items");
    char               p2[512];
    long               mn, mx;
    k3_status          st;
    jbuf               all = {0};
    lit_t             *l   = NULL, fixed[3];
    const jv         **xs  = NULL;
    size_t             m   = 0;
    int               *cls = NULL, *at = NULL, nc = 0, types = 0;
    if ((st = get_count(s, "minItems", path, 0, &mn)) || (st = get_count(s, "maxItems", path, -1, &mx)))
        return st;
    if (jv_get(s, "prefixItems"))
        return unique_refused(path, "beside prefixItems (only over items of a few values)");
    sub(p2, sizeof p2, path, "items", NULL);
    for (int hop = 0; it && it->kind == JV_OBJECT && jv_get(it, "$ref") && hop < 64; hop++) {
        for (size_t k = 0; k < it->n; k++)
            if (strcmp(it->keys[k].s, "$ref") && !IN(it->keys[k].s, annotations))
                return unsupported(p2, "$ref", "with sibling keywords");
        if ((st = resolve(c, jv_get(it, "$ref"), p2, &it)))
            return st;
    }
    int only_type = it && it->kind == JV_OBJECT;
    for (size_t k = 0; only_type && k < it->n; k++)
        only_type = !strcmp(it->keys[k].s, "type") || IN(it->keys[k].s, annotations);
    if (only_type && (st = types_of(it, p2, &types)))
        return st;
    if (it && it->kind == JV_FALSE)
        m = 0; /* no item: [] alone */
    else if (it && it->kind == JV_OBJECT && (jv_get(it, "enum") || jv_get(it, "const"))) {
        if ((st = kept_values(c, it, p2, 0, &all, &l, &xs, &m)))
            goto done;
    } else if (only_type && types && !(types & ~(T_NULL | T_BOOL))) {
        for (int k = 0; k < 3; k++)
            if (types & (k ? T_BOOL : T_NULL))
                fixed[m++] = lits[k];
    } else
        return unique_refused(path, "over items that are not a few values (an enum or const, booleans, "
                                    "null): the grammar tracks which were used");
    if (!(cls = k3_malloc((m + 1) * sizeof *cls))) {
        st = k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    for (size_t i = 0; i < m; i++) { /* a value equal to an earlier one shares its class */
        size_t j = 0;
        while (xs && j < i && !value_eq(xs[i], xs[j], 0) && !value_eq(xs[i], xs[j], 1))
            j++;
        cls[i] = xs && j < i ? cls[j] : nc++;
    }
    if (nc > G_UQ_MAX) {
        st = unique_refused(path, "over more than 16 distinct values (a grammar node per set of them)");
        goto done;
    }
    mx = mx < 0 || mx > nc ? nc : mx;
    if (mn > mx)
        goto done; /* no array: nothing (g_finish reports a schema left with nothing) */
    const lit_t *lv    = l ? l : fixed;
    long long    nodes = 0;
    for (uint32_t S = 0; S < 1u << nc; S++) {
        int k = __builtin_popcount(S);
        if (k > mx)
            continue;
        nodes += 3;
        for (size_t i = 0; k < mx && i < m; i++)
            nodes += !(S >> cls[i] & 1) ? (long long)lv[i].n : 0;
    }
    if (nodes > G_UQ_NODES) {
        st = k3_err(K3_ERR_UNSUPPORTED,
                    "json schema: unsupported keyword \"uniqueItems\" at %s: its %d values' sets need %lld "
                    "grammar nodes, more than %d (fewer values or a smaller maxItems fit)",
                    path, nc, nodes, G_UQ_NODES);
        goto done;
    }
    if (!(at = k3_malloc(((size_t)1 << nc) * sizeof *at))) {
        st = k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    for (uint32_t S = 0; S < 1u << nc; S++)
        at[S] = -1;
    if ((at[0] = node(c)) < 0)
        st = k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    if (st || (st = g_byte(c->g, from, '[', '[', at[0])))
        goto done;
    for (uint32_t S = 0; S < 1u << nc && !st; S++) { /* a set's successors are greater: reached first */
        int k = __builtin_popcount(S);
        if (at[S] < 0 || k > mx)
            continue;
        if (k >= mn && (st = g_byte(c->g, at[S], ']', ']', to)))
            break;
        if (k == mx)
            continue;
        int start = k ? sep(c, at[S], ',') : at[S];
        for (size_t i = 0; i < m && !st; i++) {
            uint32_t T = S | 1u << cls[i];
            if (T == S)
                continue;
            if (start < 0 || (at[T] < 0 && (at[T] = node(c)) < 0))
                st = k3_err(K3_ERR_NOMEM, "grammar: out of memory");
            else
                st = g_lit(c->g, start, lv[i].p, lv[i].n, at[T]);
        }
    }
done:
    free(all.p), free(l), free(xs), free(cls), free(at);
    return st;
}

/* ---- a schema ----------------------------------------------------------------------------- */

static k3_status emit_schema(sc *c, const jv *s, const char *path, int from, int to);

/* Schema s from -> to; when that fills the grammar (G_MAX_NODES) or passes its meter, the
 * innermost path is kept for the refusal (sc_finish). */
static k3_status emit(sc *c, const jv *s, const char *path, int from, int to) {
    k3_status st = emit_schema(c, s, path, from, to);
    if (st && (c->g->full || (c->g->meter && c->g->meter->refused)) && !c->full_at[0])
        snprintf(c->full_at, sizeof c->full_at, "%s", path);
    return st;
}

static k3_status emit_schema(sc *c, const jv *s, const char *path, int from, int to) {
    k3_status st;
    if (s->kind == JV_TRUE) {
        int start;
        return (st = any_rule(c, &start)) ? st : g_call(c->g, from, start, to);
    }
    if (s->kind == JV_FALSE)
        return K3_OK;
    if (s->kind != JV_OBJECT)
        return k3_err(K3_ERR_ARG, "json schema: at %s: expected a schema (an object or a boolean)", path);
    for (size_t i = 0; i < s->n; i++)
        if (!IN(s->keys[i].s, annotations) && !IN(s->keys[i].s, keywords))
            return unsupported(path, s->keys[i].s, NULL);
    if (s != c->root && jv_get(s, "$id")) /* a new base: "#/$defs/t" below it means its own $defs */
        return unsupported(path, "$id", "below the root (a $ref under it would name its own $defs)");
    const jv *v;
    if ((v = jv_get(s, "$ref"))) {
        const jv *t;
        for (size_t k = 0; k < s->n; k++)
            if (strcmp(s->keys[k].s, "$ref") && !IN(s->keys[k].s, annotations))
                return unsupported(path, "$ref", "with sibling keywords");
        int start;
        if ((st = resolve(c, v, path, &t)) || (st = rule_of(c, t, path, &start)))
            return st;
        return g_call(c->g, from, start, to);
    }
    if (jv_get(s, "anyOf"))
        return emit_alts(c, s, "anyOf", path, from, to);
    if (jv_get(s, "oneOf"))
        return emit_alts(c, s, "oneOf", path, from, to);
    if ((v = jv_get(s, "allOf")) && v->kind == JV_ARRAY && v->n == 1) { /* the branch itself */
        char p2[512];
        for (size_t k = 0; k < s->n; k++)
            if (strcmp(s->keys[k].s, "allOf") && !IN(s->keys[k].s, annotations))
                return unsupported(path, "allOf", "with sibling keywords");
        snprintf(p2, sizeof p2, "%s/allOf/0", path);
        return emit(c, &v->items[0], p2, from, to);
    }
    if (jv_get(s, "allOf")) {
        const jv *m = NULL;
        char      p2[512];
        sub(p2, sizeof p2, path, "allOf", NULL);
        return (st = merge_allof(c, s, path, &m)) ? st : emit(c, m, p2, from, to);
    }
    int types;
    if ((st = types_of(s, path, &types)))
        return st;
    if (jv_get(s, "const") || jv_get(s, "enum"))
        return emit_enum(c, s, path, 0, from, to);
    if (!types) { /* no type: what the keywords imply, else any value */
        for (size_t i = 0; i < s->n; i++) {
            const char *k = s->keys[i].s;
            if (!strcmp(k, "properties") || !strcmp(k, "required") || !strcmp(k, "additionalProperties"))
                types |= T_OBJ;
            else if (!strcmp(k, "items") || !strcmp(k, "prefixItems") || strstr(k, "Items"))
                types |= T_ARR;
            else if (strstr(k, "Length") || !strcmp(k, "pattern") || !strcmp(k, "format"))
                types |= T_STR;
            else if (strstr(k, "imum") || !strcmp(k, "multipleOf")) /* a fraction's multiples: numbers */
                types |= !strcmp(k, "multipleOf") && s->items[i].kind == JV_FLOAT &&
                                 s->items[i].d != floor(s->items[i].d)
                             ? T_NUM
                             : T_INT;
        }
        if (!types) {
            int start;
            return (st = any_rule(c, &start)) ? st : g_call(c->g, from, start, to);
        }
    }
    int nb = (types & T_NUM) && (jv_get(s, "minimum") || jv_get(s, "maximum") ||
                                 jv_get(s, "exclusiveMinimum") || jv_get(s, "exclusiveMaximum"));
    if ((types & T_NULL) && (st = lit(c, from, "null", to)))
        return st;
    if ((types & T_BOOL) && ((st = lit(c, from, "true", to)) || (st = lit(c, from, "false", to))))
        return st;
    if ((types & T_NUM) && jv_get(s, "multipleOf")) /* the multiples, within the bounds */
        st = emit_integer(c, s, path, 1, from, to);
    else if (types & T_NUM)
        st = nb ? emit_number_range(c, s, path, from, to) : emit_number(c, from, to);
    else if (types & T_INT)
        st = emit_integer(c, s, path, 0, from, to);
    if (st || ((types & T_STR) && (st = emit_string(c, s, path, from, to))) ||
        ((types & T_ARR) && (st = emit_array(c, s, path, from, to))) ||
        ((types & T_OBJ) && (st = emit_object(c, s, path, from, to))))
        return st;
    return K3_OK;
}

static uint32_t rule_hash(const jv *s) {
    return (uint32_t)(((uintptr_t)s >> 3) * 2654435761u);
}
static uint32_t rule_hash_at(const void *ctx, int i) {
    return rule_hash(((const sc *)ctx)->rule[i].s);
}

/* The rule of schema s (one per schema: $ref recursion ends there): its start node. It is only
 * registered here; rules_emit writes it, so a chain of 50,000 $refs is a loop, not a recursion
 * 50,000 deep (which overflowed the stack), and finding it is a hash look-up (a scan per call
 * was quadratic in the rules). */
static k3_status rule_of(sc *c, const jv *s, const char *path, int *start) {
    const uint32_t mask = (uint32_t)(c->rhcap - 1); /* no table yet (rhcap 0): no look-up */
    for (uint32_t k = rule_hash(s) & mask; c->rhcap && c->rh[k]; k = (k + 1) & mask)
        if (c->rule[c->rh[k] - 1].s == s)
            return *start = c->rule[c->rh[k] - 1].start, K3_OK;
    sc_rule *r = k3_grow(c->rule, &c->cap_rule, (size_t)c->n_rule + 1, sizeof *r, 16);
    if (!r)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    c->rule = r;
    if (2 * (c->n_rule + 1) > c->rhcap) {
        int      cap = c->rhcap ? c->rhcap * 2 : 64;
        int32_t *h   = g_index_build(cap, c->n_rule, rule_hash_at, c);
        if (!h)
            return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        free(c->rh);
        c->rh    = h;
        c->rhcap = cap;
    }
    int   b = node(c), e = node(c);
    char *p = strdup(path);
    if (e < 0 || !p) {
        free(p);
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    }
    uint32_t k = rule_hash(s) & (uint32_t)(c->rhcap - 1);
    while (c->rh[k])
        k = (k + 1) & (uint32_t)(c->rhcap - 1);
    c->rh[k]             = c->n_rule + 1;
    c->g->node[e].ret    = 1;
    c->rule[c->n_rule++] = (sc_rule){s, c->root, b, e, p};
    *start               = b;
    return K3_OK;
}

/* Writes the rules registered and not written yet (those they call on the way too). */
static k3_status rules_emit(sc *c) {
    const jv *root = c->root;
    k3_status st   = K3_OK;
    while (!st && c->n_done < c->n_rule) {
        sc_rule r = c->rule[c->n_done++]; /* a copy: emit may grow c->rule */
        c->root   = r.root;
        st        = emit(c, r.s, r.path, r.start, r.end);
    }
    c->root = root;
    return st;
}

/* The top rule: the document, then optionally the closes the model writes after an answer
 * (<|close|>response<|sep|>, then <|close|>message<|sep|>), so a mask does not force the end of
 * message where the model would close its blocks first (k3-tools.md 2.1). */
static k3_status chat_close(sc *c) {
    const k3_gvocab *v = c->g->voc;
    if (v->id_close < 0 || v->id_sep < 0)
        return K3_OK;
    int       s = node(c), d = node(c), e = node(c), a = node(c), b = node(c), x = node(c), y = node(c);
    k3_status st;
    if (y < 0)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    c->g->node[e].ret = 1;
    if ((st = g_call(c->g, s, c->g->root, d)) || (st = g_eps(c->g, d, e)) ||
        (st = g_special(c->g, d, v->id_close, a)) || (st = lit(c, a, "response", b)) ||
        (st = g_special(c->g, b, v->id_sep, x)) || (st = g_eps(c->g, x, e)) ||
        (st = g_special(c->g, x, v->id_close, y)) || (st = lit(c, y, "message", (a = node(c)))) ||
        (st = g_special(c->g, a, v->id_sep, e)))
        return st;
    c->g->root = s;
    return K3_OK;
}

/* The end of a compile: on success *out gets the grammar, on failure it is freed and *out NULL;
 * the compiler's own state and the parsed schema are freed either way. */
static k3_status sc_finish(sc *c, jv *js, k3_status st, k3_grammar **out) {
    if (st && c->g && c->g->meter && c->g->meter->refused)
        st = k3_err(K3_ERR_NOMEM, "%s: its compile passed the %zu MB of memory it was given%s%s", c->g->what,
                    c->g->meter->granted >> 20, c->full_at[0] ? " at " : "", c->full_at);
    else if (st && c->g && c->g->full)
        st = k3_err(K3_ERR_UNSUPPORTED,
                    "%s: too large%s%s: it needs more than %d grammar nodes or %d edges (each maxLength, "
                    "maxItems, enum value and pattern repetition is written out, nested ones multiply)",
                    c->g->what, c->full_at[0] ? " at " : "", c->full_at, G_MAX_NODES, G_MAX_EDGES);
    if (st) {
        k3_grammar_free(c->g);
        c->g = NULL;
    }
    for (int i = 0; i < c->n_owned; i++)
        jv_free(c->owned[i]);
    free(c->owned);
    for (int i = 0; i < c->n_rule; i++)
        free(c->rule[i].path);
    for (int i = 0; i < c->n_pat; i++)
        k3_grammar_free(c->pat[i].g);
    free(c->pat);
    free(c->rule);
    free(c->rh);
    free(c->dh);
    jv_free(js);
    *out = c->g;
    return st;
}

static k3_status compile(const k3_gvocab *v, const char *schema, size_t len, int object_only, k3_gmeter *m,
                         k3_grammar **out) {
    sc        c  = {.any = -1};
    jv       *js = NULL;
    k3_status st;
    *out = NULL;
    if (!object_only && (st = jv_parse(schema, len, &js))) {
        k3_err_prefix("json schema: not JSON"); /* the parser's message names what and where */
        return K3_ERR_ARG;
    }
    if ((st = g_new(v, object_only ? "json object" : "json schema", &c.g)))
        goto done;
    c.g->meter = m;
    c.root     = js;
    if (object_only) { /* { } or {"k":V,...}: the any-value rule without its other branches */
        int             start, b = node(&c), e = node(&c);
        static const jv obj = {.kind = JV_OBJECT};
        if (e < 0) {
            st = k3_err(K3_ERR_NOMEM, "grammar: out of memory");
            goto done;
        }
        c.g->node[e].ret = 1;
        c.g->root        = b;
        st               = emit_object(&c, &obj, "#", b, e);
        (void)start;
    } else
        st = rule_of(&c, js, "#", &c.g->root);
    if (!st)
        st = rules_emit(&c);
    if (!st)
        st = chat_close(&c);
    if (!st)
        st = g_finish(c.g);
done:
    return sc_finish(&c, js, st, out);
}

k3_status k3_grammar_json_schema(const k3_gvocab *v, const char *schema, size_t len, k3_gmeter *m,
                                 k3_grammar **out) {
    return compile(v, schema, len, 0, m, out);
}

k3_status k3_grammar_json_object(const k3_gvocab *v, k3_grammar **out) {
    return compile(v, NULL, 0, 1, NULL, out);
}

/* ==== the K3 tool-call format (k3-tools.md 1.3) ==================================================
 *
 * From the response channel on: [text] <|close|>response<|sep|>, then (when text is allowed) the
 * end, or <|open|>tools<|sep|> and 1..max_calls calls <|open|>call tool="NAME" index="N"<|sep|>
 * ARGS <|close|>call<|sep|> (N = 1, 2, ...), then <|close|>tools<|sep|>, [<|close|>message<|sep|>],
 * the end. ARGS are the tool's "parameters" properties in their order (required ones always):
 * <|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|> with T the schema's type
 * (integer and number: number) and VALUE raw text for a string, JSON for the other types. */

/* s with & -> &amp; and " -> &quot; (attribute values), literally from -> to. */
static k3_status attr_lit(sc *c, int from, const char *s, size_t n, int to) {
    jbuf      b  = {0};
    k3_status st = K3_OK;
    for (size_t i = 0; i < n && !st; i++)
        st = s[i] == '&'   ? jbuf_add(&b, "&amp;", 5)
             : s[i] == '"' ? jbuf_add(&b, "&quot;", 6)
                           : jbuf_add(&b, s + i, 1);
    if (!st)
        st = g_lit(c->g, from, b.p ? b.p : "", b.n, to);
    free(b.p);
    return st;
}

/* A raw string VALUE: any UTF-8 text (no escaping), enum/const literals, or a format/pattern
 * (their automata in raw form). The keywords are response_format's, with the same refusals. */
static k3_status raw_string(sc *c, const jv *s, const char *path, int from, int to) {
    k3_status st;
    for (size_t i = 0; i < s->n; i++)
        if (!IN(s->keys[i].s, annotations) && !IN(s->keys[i].s, keywords))
            return unsupported(path, s->keys[i].s, NULL);
    static const char *const comb[] = {"anyOf", "oneOf", "allOf", "$ref"};
    for (size_t i = 0; i < sizeof comb / sizeof *comb; i++)
        if (jv_get(s, comb[i]))
            return unsupported(path, comb[i], "in a string argument of a tool (written raw)");
    if (jv_get(s, "const") || jv_get(s, "enum"))
        return emit_enum(c, s, path, 1, from, to);
    long mn, mx;
    if ((st = get_count(s, "minLength", path, 0, &mn)) || (st = get_count(s, "maxLength", path, -1, &mx)))
        return st;
    int none;
    if (jv_get(s, "pattern") || jv_get(s, "format"))
        return pattern_string(c, jv_get(s, "pattern"), jv_get(s, "format"), path, 1, mn, mx, from, to);
    if ((st = str_lengths(path, mn, mx, &none)) || none)
        return st;
    int cur = from;
    for (long k = 0; k < mn; k++) { /* one raw character: ASCII or a UTF-8 sequence */
        int nx = node(c);
        if ((st = g_byte(c->g, cur, 0x00, 0x7f, nx)) || (st = g_raw_multi(c->g, cur, nx)))
            return st;
        cur = nx;
    }
    if (mx < 0)
        return (st = g_byte(c->g, cur, 0x00, 0x7f, cur)) || (st = g_raw_multi(c->g, cur, cur))
                   ? st
                   : g_eps(c->g, cur, to);
    for (long k = mn; k < mx; k++) {
        int nx = node(c);
        if ((st = g_eps(c->g, cur, to)) || (st = g_byte(c->g, cur, 0x00, 0x7f, nx)) ||
            (st = g_raw_multi(c->g, cur, nx)))
            return st;
        cur = nx;
    }
    return g_eps(c->g, cur, to);
}

/* The rule of one tool's ARGS; *start set. */
static k3_status tool_args(sc *c, const jv *params, const char *name, int *start) {
    const k3_gvocab *v = c->g->voc;
    char             path[300];
    k3_status        st;
    int              s = node(c), end = node(c);
    if (end < 0)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    c->g->node[end].ret = 1;
    *start              = s;
    snprintf(path, sizeof path, "tools[%s].parameters", name);
    if (!params || params->kind != JV_OBJECT)
        return g_eps(c->g, s, end);
    c->root         = params;
    const jv *props = jv_get(params, "properties"), *req = jv_get(params, "required");
    int       cur = s;
    if ((st = check_required(path, props && props->kind == JV_OBJECT ? props : NULL, req)))
        return st; /* it was ignored: a call could never hold the undeclared name */
    for (size_t i = 0; props && props->kind == JV_OBJECT && i < props->n; i++) {
        const jv *k = &props->keys[i], *ps = &props->items[i];
        char      p2[400];
        snprintf(p2, sizeof p2, "%s/properties/%.*s", path, (int)(k->n > 100 ? 100 : k->n), k->s);
        int types = 0;
        if (ps->kind == JV_OBJECT && jv_get(ps, "$ref")) {
            const jv *t;
            if ((st = resolve(c, jv_get(ps, "$ref"), p2, &t)))
                return st;
            ps = t;
        }
        if (ps->kind == JV_OBJECT && (jv_get(ps, "const") || jv_get(ps, "enum")))
            types = schema_types(c, ps, 0);
        else if (ps->kind == JV_OBJECT && (st = types_of(ps, p2, &types)))
            return st;
        if (types & T_NUM)
            types = (types & ~(T_NUM | T_INT)) | T_INT;
        const char *tn = types == T_STR    ? "string"
                         : types == T_INT  ? "number"
                         : types == T_BOOL ? "boolean"
                         : types == T_NULL ? "null"
                         : types == T_OBJ  ? "object"
                         : types == T_ARR  ? "array"
                                           : NULL;
        if (!tn)
            return unsupported(p2, "type",
                               "a tool argument needs exactly one type (its XTML type attribute)");
        int nx = node(c), a = node(c), b = node(c), d = node(c), e = node(c), f = node(c);
        if (f < 0)
            return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        if (!has_name(req, k) && (st = g_eps(c->g, cur, nx)))
            return st;
        char tail[64];
        snprintf(tail, sizeof tail, "\" type=\"%s\"", tn);
        if ((st = g_special(c->g, cur, v->id_open, a)) || (st = lit(c, a, "argument key=\"", b)) ||
            (st = attr_lit(c, b, k->s, k->n, d)) || (st = lit(c, d, tail, e)) ||
            (st = g_special(c->g, e, v->id_sep, f)))
            return st;
        int val = node(c), g1 = node(c), g2 = node(c);
        if (types == T_STR ? (st = raw_string(c, ps, p2, f, val)) : (st = emit(c, ps, p2, f, val)))
            return st;
        if ((st = g_special(c->g, val, v->id_close, g1)) || (st = lit(c, g1, "argument", g2)) ||
            (st = g_special(c->g, g2, v->id_sep, nx)))
            return st;
        cur = nx;
    }
    return g_eps(c->g, cur, end);
}

k3_status k3_grammar_tool_calls(const k3_gvocab *v, const char *tools, const char *only, int max_calls,
                                int text, k3_gmeter *m, k3_grammar **out) {
    sc        c  = {.any = -1};
    jv       *js = NULL;
    k3_status st;
    *out = NULL;
    if (v->id_open < 0 || v->id_sep < 0 || v->id_close < 0)
        return k3_err(K3_ERR_UNSUPPORTED, "tool calls: the tokenizer has no <|open|>, <|sep|> or <|close|>");
    if (max_calls < 1)
        max_calls = 1;
    if ((st = jv_parse(tools ? tools : "[]", strlen(tools ? tools : "[]"), &js))) {
        k3_err_prefix("tool calls: tools are not JSON");
        return K3_ERR_ARG;
    }
    if ((st = g_new(v, "tool calls", &c.g)))
        goto done;
    c.g->meter           = m;
    int          n_tools = 0, *args = k3_calloc(js->kind == JV_ARRAY ? js->n + 1 : 1, sizeof *args);
    const char **names = k3_calloc(js->kind == JV_ARRAY ? js->n + 1 : 1, sizeof *names);
    size_t      *nlen  = k3_calloc(js->kind == JV_ARRAY ? js->n + 1 : 1, sizeof *nlen);
    if (!args || !names || !nlen) {
        st = k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        goto tools_done;
    }
    for (size_t i = 0; js->kind == JV_ARRAY && i < js->n && !st; i++) {
        const jv *fn = jv_get(&js->items[i], "function"), *nm = fn ? jv_get(fn, "name") : NULL;
        if (!nm || nm->kind != JV_STRING)
            continue;
        if (only && strcmp(only, nm->s))
            continue;
        names[n_tools] = nm->s;
        nlen[n_tools]  = nm->n;
        st             = tool_args(&c, jv_get(fn, "parameters"), nm->s, &args[n_tools]);
        n_tools++;
    }
    if (!st && !n_tools)
        st = k3_err(K3_ERR_ARG, "tool calls: %s%s%s names no tool of the request",
                    only ? "tool_choice \"" : "tools", only ? only : "", only ? "\"" : "");
    int top = node(&c), end = node(&c), r = node(&c), r1 = node(&c), r2 = node(&c), k0 = node(&c);
    if (!st && end < 0)
        st = k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    if (st)
        goto tools_done;
    c.g->node[end].ret = 1;
    c.g->root          = top;
    /* [text] <|close|>response<|sep|> */
    if ((text && ((st = g_byte(c.g, top, 0x00, 0x7f, top)) || (st = g_raw_multi(c.g, top, top)))) ||
        (st = g_special(c.g, top, v->id_close, r1)) || (st = lit(&c, r1, "response", r2)) ||
        (st = g_special(c.g, r2, v->id_sep, r)))
        goto tools_done;
    /* after it: the end (text allowed), or the tools block */
    int m1 = node(&c), m2 = node(&c), z = node(&c), t1 = node(&c), t2 = node(&c);
    if ((text && ((st = g_eps(c.g, r, z)))) || (st = g_special(c.g, r, v->id_open, t1)) ||
        (st = lit(&c, t1, "tools", t2)) || (st = g_special(c.g, t2, v->id_sep, k0)) ||
        (st = g_eps(c.g, z, end)) || (st = g_special(c.g, z, v->id_close, m1)) ||
        (st = lit(&c, m1, "message", m2)) || (st = g_special(c.g, m2, v->id_sep, end)))
        goto tools_done;
    int cur = k0;
    for (int k = 1; k <= max_calls && !st; k++) {
        int  nx = node(&c), a = node(&c), b = node(&c), call_end = node(&c), e1 = node(&c), e2 = node(&c);
        char idx[32];
        snprintf(idx, sizeof idx, "\" index=\"%d\"", k);
        if ((st = g_special(c.g, cur, v->id_open, a)) || (st = lit(&c, a, "call tool=\"", b)))
            break;
        for (int t = 0; t < n_tools && !st; t++) {
            int n1 = node(&c), n2 = node(&c), n3 = node(&c);
            if ((st = attr_lit(&c, b, names[t], nlen[t], n1)) || (st = lit(&c, n1, idx, n2)) ||
                (st = g_special(c.g, n2, v->id_sep, n3)))
                break;
            st = g_call(c.g, n3, args[t], call_end);
        }
        if (st || (st = g_special(c.g, call_end, v->id_close, e1)) || (st = lit(&c, e1, "call", e2)) ||
            (st = g_special(c.g, e2, v->id_sep, nx)))
            break;
        int c1 = node(&c), c2 = node(&c); /* after call k: close the block */
        if ((st = g_special(c.g, nx, v->id_close, c1)) || (st = lit(&c, c1, "tools", c2)) ||
            (st = g_special(c.g, c2, v->id_sep, z)))
            break;
        cur = nx;
    }
    if (!st)
        st = rules_emit(&c);
    if (!st)
        st = g_finish(c.g);
tools_done:
    free(args);
    free(names);
    free(nlen);
done:
    return sc_finish(&c, js, st, out);
}
