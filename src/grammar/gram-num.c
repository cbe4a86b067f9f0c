/* gram-num.c: integers and numbers for the JSON Schema compiler (gram-impl.h): integer ranges
 * digit by digit, numbers within bounds exactly as a validator reads them, and multipleOf
 * (remainder automata for exact multiples, a minimal automaton of the listed multiples of
 * fractions that are no exact double). */
#include "gram-impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    int t = sc_node(c), in = t;
    if (m == c->point && t >= 0) /* the fraction's digits begin: its point first */
        in = sc_node(c), *st = in < 0 ? K3_OK : g_byte(c->g, t, '.', '.', in);
    if (in < 0)
        return *st = g_nomem(), -1;
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
        int       p  = sc_node(c);
        k3_status st = p < 0 ? g_nomem() : g_byte(c->g, from, '.', '.', p);
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
                int p = sc_node(c);
                if ((st = p < 0 ? g_nomem() : g_byte(c->g, cur, '.', '.', p)))
                    return st;
                cur = p;
            }
            int nx = k + 1 == n ? to : sc_node(c);
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
        int m = sc_node(c);
        if ((st = g_byte(c->g, from, lo[0], lo[0], m)))
            return st;
        return digits(c, lo + 1, hi + 1, n - 1, NEXT(lo[0]), m, to);
    }
    int m1 = sc_node(c), m2 = sc_node(c);
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
        int m = sc_node(c);
        if ((st = g_byte(c->g, from, '-', '-', m)) || (st = nonneg(c, hi < 0 ? -hi : 1, -lo, m, to)))
            return st;
    }
    if (hi >= 0)
        st = nonneg(c, lo > 0 ? lo : 0, hi, from, to);
    return st;
}

/* The four bound keywords, lower ones first (sc_emit_integer, sc_emit_number_range, num_cond). */
const char *const sc_bound_key[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};

/* The double a validator reads for bound keyword v (JSON.parse, ajv: the nearest double). */
k3_status sc_bound_value(const jv *v, const char *path, const char *key, double *d) {
    if (v->kind == JV_TRUE || v->kind == JV_FALSE)
        return sc_unsupported(path, key, "the boolean form (draft 4); give the bound as a number");
    if (v->kind != JV_INT && v->kind != JV_FLOAT)
        return sc_bad(path, key, "a number");
    *d = v->kind == JV_FLOAT ? v->d : strtod(v->s, NULL);
    return K3_OK;
}

static k3_status beyond(const char *path, const char *key) {
    return sc_unsupported(path, key,
                          "a bound beyond 16 digits (the numbers written have at most 16 integer digits)");
}

/* Integers under bound keyword k (sc_bound_key) from x: those that pass it both exactly (as a
 * validator with exact integers reads them: Python's json) and as doubles (JSON.parse reads
 * 9007199254740993 as 9007199254740992, which ajv does not take as above 9007199254740992); the
 * range [*lo, *hi] narrowed to them. Writable integers have at most 16 digits: a bound past
 * them all is refused (a bound beyond, on the other side, bounds nothing). */
static k3_status int_bound(const jv *v, const char *path, int k, long long *lo, long long *hi) {
    const char *key   = sc_bound_key[k];
    int         lower = k < 2, excl = k & 1;
    double      d;
    k3_status   st = sc_bound_value(v, path, key, &d);
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
         : (nd[k][(t) & ~(zero[k] ? 1 : 0) & ~(nine[k] ? 2 : 0)] = sc_node(c)))
    if (zero[0] && (st = g_eps(c->g, from, to))) /* no fraction: the value 0 */
        return st;
    int first = AT(0, 3);
    if (first < 0 || (st = g_byte(c->g, from, '.', '.', first)))
        return first < 0 ? g_nomem() : st;
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
                st = nx < 0 ? g_nomem() : g_byte(c->g, n, d, d1, nx);
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
        int m = sc_node(c);
        if (m < 0)
            return g_nomem();
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
        const jv *v     = jv_get(s, sc_bound_key[k]);
        int       lower = k < 2;
        double    d;
        if (!v)
            continue;
        if ((st = sc_bound_value(v, path, sc_bound_key[k], &d)))
            return st;
        g_num n = lower ? g_num_lo(d, k & 1) : g_num_hi(d, k & 1);
        if (lower ? n > G_NUM_MAX : n < -G_NUM_MAX) /* past every writable number */
            return beyond(path, sc_bound_key[k]);
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
k3_status sc_emit_number_range(sc *c, const jv *s, const char *path, int from, int to) {
    g_num     lo, hi;
    int       holds;
    k3_status st;
    if ((st = num_bounds(s, path, &lo, &hi, &holds)))
        return st;
    if (lo > hi && holds) /* numbers, but none written without an exponent (1e-20) */
        return sc_unsupported(
            path, jv_get(s, "exclusiveMinimum") ? "exclusiveMinimum" : "minimum",
            "bounds that hold numbers, none of them of at most 16 fraction digits (the numbers "
            "written have no exponent)");
    if (lo > hi)
        return K3_OK; /* no number: nothing (g_finish reports a schema left with nothing) */
    if (hi >= 0 && (st = dec_range(c, lo > 0 ? lo : 0, hi, from, to)))
        return st;
    if (lo <= 0) {
        int minus = sc_node(c);
        if (minus < 0)
            return g_nomem();
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
    if ((st = sc_bound_value(v, path, "multipleOf", &d)))
        return st;
    if (!(d > 0) || !isfinite(d))
        return sc_bad(path, "multipleOf", "a finite number above 0");
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
        return sc_unsupported(path, "multipleOf",
                              "above 2^53 (9007199254740992): no multiple but 0 is an exact double");
    if (-e > 16)
        return sc_unsupported(path, "multipleOf",
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
    return sc_unsupported(path, "multipleOf", why);
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
    dm_state   *st; /* (n) states, freed ones in freel */
    int         n, cap;
    int32_t    *reg; /* (rcap) registered state + 1 by content, 0 empty */
    int         rcap, nreg;
    int32_t    *freel; /* (nfree) states replaced by a registered one, for reuse */
    int         nfree, capfree;
    k3_grammar *g; /* the grammar being built: its meter is charged for D's arrays */
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
        dm_state *ns = g_grow(D->g, D->st, &D->cap, (size_t)D->n + 1, sizeof *ns, 256);
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
        int32_t *l = g_grow(D->g, D->freel, &D->capfree, (size_t)D->nfree + (size_t)D->nreg, sizeof *l, 64);
        if (!l)
            return -1;
        D->freel = l;
        for (int i = 0, j = 0; i < D->rcap; i++)
            if (D->reg[i])
                l[D->nfree + j++] = D->reg[i] - 1;
        int      cap = D->rcap ? 2 * D->rcap : 1024;
        int32_t *h =
            g_charge(D->g, (size_t)cap * sizeof *h) ? NULL : g_index_build(cap, D->nreg, dm_hash_at, D);
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
        int32_t *l = g_grow(D->g, D->freel, &D->capfree, (size_t)D->nfree + 1, sizeof *l, 64);
        if (!l)
            return -1;
        D->freel = l, l[D->nfree++] = q;
    }
    return 0;
}

static int text_cmp(const void *a, const void *b) {
    return strcmp(a, b);
}

typedef char g_text[20]; /* a multiple's text: '-', 16 digits, '.', NUL */

/* The texts (k fraction digits, at least one integer digit: "0.07") of the multiples j * a *
 * 10^-k, j in [x0, x1], that validators take too: the double of the text (X / 10^k rounded once)
 * over d (the multipleOf's double) an integer below 10^21. Into t (x1 - x0 + 1 of them at most),
 * sorted; their count. */
static size_t listed_texts(g_text *t, long long x0, long long x1, long long a, int k, double d) {
    double pw = 1;
    size_t n  = 0;
    for (int i = 0; i < k; i++)
        pw *= 10;
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
    return n;
}

/* The minimal acyclic automaton of the n sorted texts t into D (its root *root): each text's
 * path after the common prefix with the one before, that one's states past it folded
 * (registered) first. Refused past G_LIST_NODES registered states (path: the schema's). */
static k3_status dm_build(dm *D, g_text *t, size_t n, const char *path, int *root) {
    int32_t     path_st[24];
    const char *prev = "";
    int         plen = 0;
    if ((*root = path_st[0] = dm_new(D)) < 0)
        return g_nomem();
    for (size_t i = 0; i < n; i++) {
        int len = (int)strlen(t[i]), cp = 0;
        while (cp < plen && cp < len && prev[cp] == t[i][cp])
            cp++;
        if (dm_fold(D, path_st, prev, plen, cp))
            return g_nomem();
        for (int j = cp; j < len; j++) {
            int q = dm_new(D);
            if (q < 0)
                return g_nomem();
            D->st[path_st[j]].next[dm_sym(t[i][j])] = q, path_st[j + 1] = q;
        }
        D->st[path_st[len]].final = 1;
        prev = t[i], plen = len;
        if (D->nreg > G_LIST_NODES)
            return k3_err(K3_ERR_UNSUPPORTED,
                          "json schema: unsupported keyword \"multipleOf\" at %s: the multiples validators "
                          "take need more than %d grammar nodes (narrower bounds fit)",
                          path, G_LIST_NODES);
    }
    return dm_fold(D, path_st, prev, plen, 0) ? g_nomem() : K3_OK;
}

/* D's states reachable from root as grammar nodes, root being from: a final state moves to `to`,
 * digits into one state are one byte range. */
static k3_status dm_write(sc *c, const dm *D, int root, int from, int to) {
    int      charged = !g_charge(c->g, (size_t)D->n * 2 * sizeof(int32_t));
    int32_t *gid     = charged ? k3_malloc((size_t)D->n * sizeof *gid) : NULL,
            *stack   = charged ? k3_malloc((size_t)D->n * sizeof *stack) : NULL;
    int       top    = 0;
    k3_status st     = gid && stack ? K3_OK : g_nomem();
    for (int i = 0; !st && i < D->n; i++)
        gid[i] = -1;
    if (!st)
        gid[root] = from, stack[top++] = root;
    while (top && !st) {
        const dm_state *q = &D->st[stack[--top]];
        int             g = gid[q - D->st];
        if (q->final && (st = g_eps(c->g, g, to)))
            break;
        for (int y = 0; y < 12 && !st; y++) {
            int r = q->next[y], y1 = y;
            if (r < 0)
                continue;
            while (y < 10 && y1 < 9 && q->next[y1 + 1] == r) /* digits to one state: one range */
                y1++;
            if (gid[r] < 0) {
                if ((gid[r] = sc_node(c)) < 0) {
                    st = g_nomem();
                    break;
                }
                stack[top++] = r;
            }
            int lo_ch = y < 10 ? '0' + y : y == 10 ? '.' : '-', hi_ch = y1 < 10 ? '0' + y1 : lo_ch;
            st = g_byte(c->g, g, lo_ch, hi_ch, gid[r]);
            y  = y1;
        }
    }
    free(gid), free(stack);
    return st;
}

/* The multiples X * 10^-k of a * 10^-k (X in [lo, hi], |X| <= 2^53) that validators take too, as
 * texts with k fraction digits, from -> to. Refused past G_LIST_MAX multiples or G_LIST_NODES
 * states. */
static k3_status emit_listed(sc *c, const jv *s, const char *path, long long lo, long long hi, long long a,
                             int k, int from, int to) {
    double    d  = sc_number(jv_get(s, "multipleOf"));
    long long x0 = lo >= 0 ? (lo + a - 1) / a : -(-lo / a), x1 = hi >= 0 ? hi / a : -((-hi + a - 1) / a);
    if (x0 > x1)
        return K3_OK;          /* no multiple: nothing (g_finish reports a schema left with nothing) */
    if (x1 - x0 >= G_LIST_MAX) /* without a bound: 2^53 units */
        return odd_refused(path, a, k, d,
                           "the ones both readings take are written only between a minimum and a maximum "
                           "holding at most 1,048,576 multiples, each checked; an integer or a fraction over "
                           "a power of 2 (0.5, 0.25, 0.125) is written without them");
    size_t    nt = (size_t)(x1 - x0 + 1);
    g_text   *t  = g_charge(c->g, nt * sizeof *t) ? NULL : k3_malloc(nt * sizeof *t);
    dm        D  = {.g = c->g};
    int       root;
    k3_status st;
    if (!t)
        return g_nomem();
    size_t n = listed_texts(t, x0, x1, a, k, d);
    if (!(st = dm_build(&D, t, n, path, &root)))
        st = dm_write(c, &D, root, from, to);
    free(t), free(D.st), free(D.reg), free(D.freel);
    return st;
}

/* An integer (num 0), or a number under multipleOf (num 1: the multiples, written with the
 * multipleOf's fraction digits, integers under an integer one), within the bounds; under
 * multipleOf a multiple of at most 2^53 units of its last digit in magnitude (where x / m is
 * exact in doubles, as validators divide): the digits carry their remainder (digits, mod_tail). */
k3_status sc_emit_integer(sc *c, const jv *s, const char *path, int num, int from, int to) {
    long long lo = -G_INT_MAX, hi = G_INT_MAX, a;
    int       k, odd;
    k3_status st;
    if ((st = multiple_of(s, path, &a, &k, &odd)))
        return st;
    if (odd && !num)
        return odd_refused(path, a, k, sc_number(jv_get(s, "multipleOf")),
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
            const jv *v = jv_get(s, sc_bound_key[b]);
            if (v && (st = int_bound(v, path, b, &lo, &hi)))
                return st;
        }
    if (a <= 1 && !k)
        return int_range(c, lo, hi, from, to);
    if (lo <= hi && (lo > G_EXACT || hi < -G_EXACT)) /* multiples, none of them written */
        return sc_unsupported(
            path, "multipleOf",
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
        st = g_nomem();
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
k3_status sc_emit_number(sc *c, int from, int to) {
    static const char re[] = "^-?(0|[1-9][0-9]{0,15})(\\.[0-9]{1,16})?([eE][+-]?[0-9]{1,2})?$";
    return g_pattern(c->g, re, sizeof re - 1, "(number)", 0, from, to);
}
/* A number's value as a validator reads it (JSON.parse: the nearest double). */
double sc_number(const jv *x) {
    return x->kind == JV_FLOAT ? x->d : strtod(x->s, NULL);
}
