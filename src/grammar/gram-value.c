/* gram-value.c: enum and const for the JSON Schema compiler (gram-impl.h): each value checked
 * against the schema's other keywords by a validator of one value (vcheck), the kept ones written
 * as a trie; and uniqueItems over items of a few values (a node per set of the values used). */
#include "gram-impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A JSON value written compactly, members in their order, appended to b (const, enum: the value
 * as the schema spells it, value_ok having checked it); raw: a string's bytes themselves (a tool
 * call's string argument). */
static k3_status value_text(const jv *v, const char *path, int raw, jbuf *b) {
    size_t    at = b->n;
    k3_status st = raw ? jbuf_add(b, v->s, v->n) : jv_dump(v, JV_COMPACT, b);
    if (!st && !raw && v->kind != JV_STRING && b->p &&
        (memmem(b->p + at, b->n - at, "NaN", 3) || memmem(b->p + at, b->n - at, "Infinity", 8)))
        st = sc_bad(path, "enum/const", "finite numbers");
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
        return g_nomem();
    qsort(l, n, sizeof *l, lit_cmp);
    at[0] = from;
    for (size_t i = 0; i < n && !st; i++) {
        size_t lcp = i ? lit_lcp(&l[i], &l[i - 1]) : 0, next = i + 1 < n ? lit_lcp(&l[i], &l[i + 1]) : 0;
        if (i && lcp == l[i].n && l[i - 1].n == l[i].n)
            continue; /* the same value twice */
        for (size_t k = lcp; k < l[i].n && !st;
             k++) { /* the last byte goes to `to` unless a longer one goes on */
            int nx    = k + 1 == l[i].n && next < l[i].n ? to : sc_node(c);
            st        = g_byte(c->g, at[k], (uint8_t)l[i].p[k], (uint8_t)l[i].p[k], nx);
            at[k + 1] = nx;
        }
        if (!st && (next >= l[i].n || !l[i].n))
            st = g_eps(c->g, at[l[i].n], to);
    }
    free(at);
    return st;
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
    double x = sc_number(a), y = sc_number(b);
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
            const jv *o = sc_member(b, &a->keys[i]);
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
        double q = sc_number(x) / d;
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
static k3_status vcheck(vc *v, const jv *s, const jv *x, const char *path, int depth, int *ok);

/* *ok: x is valid against every schema of list (all 1), at least one (all 0: anyOf), exactly one
 * (all -1: oneOf). Every branch is checked, so a refusal does not depend on the value. */
static k3_status vcheck_list(vc *v, const jv *s, const char *key, int all, const jv *x, const char *path,
                             int depth, int *ok) {
    const jv *l = jv_get(s, key);
    char      p2[512];
    int       n = 0;
    if (l->kind != JV_ARRAY || l->n == 0)
        return sc_bad(path, key, "a non-empty array of schemas");
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
    if ((st = sc_count(s, "minLength", path, 0, &mn)) || (st = sc_count(s, "maxLength", path, -1, &mx)))
        return st;
    size_t len = code_points(x);
    *ok        = len >= (size_t)mn && (mx < 0 || len <= (size_t)mx);
    if (pat && pat->kind != JV_STRING)
        return sc_bad(path, "pattern", "a string");
    if (pat && *ok && (st = sc_pattern_ok(v->c, pat, x, path, ok)))
        return st;
    const g_format *f;
    if (fmt && (st = sc_format_of(fmt, path, &f)))
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
        return sc_unsupported(path, "items", "the array form (use prefixItems)");
    if (pre && pre->kind != JV_ARRAY)
        return sc_bad(path, "prefixItems", "an array of schemas");
    if (uq && uq->kind != JV_TRUE && uq->kind != JV_FALSE)
        return sc_bad(path, "uniqueItems", "a boolean");
    if ((st = sc_count(s, "minItems", path, 0, &mn)) || (st = sc_count(s, "maxItems", path, -1, &mx)))
        return st;
    *ok = x->n >= (size_t)mn && (mx < 0 || x->n <= (size_t)mx);
    for (size_t i = 0; i < x->n && *ok; i++) {
        const jv *el = pre && i < pre->n ? &pre->items[i] : items;
        if (pre && i < pre->n)
            snprintf(p2, sizeof p2, "%s/prefixItems/%zu", path, i);
        else
            sc_sub(p2, sizeof p2, path, "items", NULL);
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
    if ((st = sc_object_keywords(s, path, &props, &req, &addl)))
        return st;
    if (req && req->kind != JV_ARRAY)
        return sc_bad(path, "required", "an array of strings");
    *ok = 1;
    for (size_t i = 0; req && i < req->n && *ok; i++) {
        if (req->items[i].kind != JV_STRING)
            return sc_bad(path, "required", "an array of strings");
        *ok = sc_member(x, &req->items[i]) != NULL;
    }
    for (size_t i = 0; i < x->n && *ok; i++) {
        const jv *k = &x->keys[i], *ps = props ? sc_member(props, k) : NULL;
        if (ps)
            snprintf(p2, sizeof p2, "%s/properties/%.*s", path, (int)(k->n > 200 ? 200 : k->n), k->s);
        else
            sc_sub(p2, sizeof p2, path, "additionalProperties", NULL);
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
        if (!sc_annotation(s->keys[i].s) && !sc_keyword(s->keys[i].s))
            return sc_unsupported(path, s->keys[i].s, NULL);
    if (s != v->c->root && jv_get(s, "$id"))
        return sc_unsupported(path, "$id", "below the root (a $ref under it would name its own $defs)");
    if ((st = sc_types_of(s, path, &types)))
        return st;
    if (types && !(sc_kind_type(x) & types))
        return *ok = 0, K3_OK;
    for (int b = 0; b < 4 && is_num(x); b++) {
        if (!(k = jv_get(s, sc_bound_key[b])))
            continue;
        double d;
        if ((st = sc_bound_value(k, path, sc_bound_key[b], &d)))
            return st;
        int r = num_cmp(x, k, v->py);
        if (b == 0 ? r < 0 : b == 1 ? r <= 0 : b == 2 ? r > 0 : r >= 0)
            return *ok = 0, K3_OK;
    }
    if ((k = jv_get(s, "multipleOf")) && is_num(x)) {
        double d;
        if ((st = sc_bound_value(k, path, "multipleOf", &d)))
            return st;
        if (!(d > 0))
            return sc_bad(path, "multipleOf", "a number above 0");
        if (!multiple_ok(x, k, d, v->py))
            return *ok = 0, K3_OK;
    }
    if ((k = jv_get(s, "const")) && (!skip || strcmp(skip, "const")) && !value_eq(x, k, v->py))
        return *ok = 0, K3_OK;
    if ((k = jv_get(s, "enum")) && (!skip || strcmp(skip, "enum"))) {
        if (k->kind != JV_ARRAY)
            return sc_bad(path, "enum", "an array");
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
        if (!(st = sc_resolve(v->c, k, path, &t)))
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
        return sc_bad(path, "enum", "an array");
    size_t *end = k3_malloc((n + 1) * sizeof *end);
    *l          = k3_malloc((n + 1) * sizeof **l);
    *xs         = k3_malloc((n + 1) * sizeof **xs);
    if (!end || !*l || !*xs)
        st = g_nomem();
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

k3_status sc_emit_enum(sc *c, const jv *s, const char *path, int raw, int from, int to) {
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
    return sc_unsupported(path, "uniqueItems", why);
}

/* The values of items it (through $refs; p2 its path): an enum's or const's that its other
 * keywords allow (kept_values: texts *l into all->p, values *xs), or null, true and false as its
 * type allows (into fixed, *xs NULL); *m of them, none for items false. Anything else is refused.
 * The caller frees all->p, *l and *xs. */
static k3_status unique_values(sc *c, const jv *it, const char *path, const char *p2, jbuf *all, lit_t **l,
                               const jv ***xs, lit_t fixed[3], size_t *m) {
    static const lit_t lits[3] = {{"null", 4}, {"true", 4}, {"false", 5}};
    k3_status          st;
    int                types = 0;
    for (int hop = 0; it && it->kind == JV_OBJECT && jv_get(it, "$ref") && hop < 64; hop++) {
        if ((st = sc_alone(it, "$ref", p2, "with sibling keywords")) ||
            (st = sc_resolve(c, jv_get(it, "$ref"), p2, &it)))
            return st;
    }
    int only_type = it && it->kind == JV_OBJECT;
    for (size_t k = 0; only_type && k < it->n; k++)
        only_type = !strcmp(it->keys[k].s, "type") || sc_annotation(it->keys[k].s);
    if (only_type && (st = sc_types_of(it, p2, &types)))
        return st;
    *m = 0;
    if (it && it->kind == JV_FALSE)
        return K3_OK; /* no item: [] alone */
    if (it && it->kind == JV_OBJECT && (jv_get(it, "enum") || jv_get(it, "const")))
        return kept_values(c, it, p2, 0, all, l, xs, m);
    if (!(only_type && types && !(types & ~(T_NULL | T_BOOL))))
        return unique_refused(path, "over items that are not a few values (an enum or const, booleans, "
                                    "null): the grammar tracks which were used");
    for (int k = 0; k < 3; k++)
        if (types & (k ? T_BOOL : T_NULL))
            fixed[(*m)++] = lits[k];
    return K3_OK;
}

/* The nodes the sets of at most mx of the nc value classes take (3 each, and each value's text
 * a set without its class leads on with). */
static long long unique_nodes(const lit_t *lv, const int *cls, size_t m, int nc, long mx) {
    long long nodes = 0;
    for (uint32_t S = 0; S < 1u << nc; S++) {
        int k = __builtin_popcount(S);
        if (k > mx)
            continue;
        nodes += 3;
        for (size_t i = 0; k < mx && i < m; i++)
            nodes += !(S >> cls[i] & 1) ? (long long)lv[i].n : 0;
    }
    return nodes;
}

/* '[', then from each set S of the classes used (a node each) ']' once S has mn of them, and while
 * it has fewer than mx, each value lv[i] of a class not in S (after a ',' but first) to the set
 * with its class added. */
static k3_status unique_write(sc *c, const lit_t *lv, const int *cls, size_t m, int nc, long mn, long mx,
                              int from, int to) {
    int      *at = k3_malloc(((size_t)1 << nc) * sizeof *at);
    k3_status st = K3_OK;
    if (!at)
        return g_nomem();
    for (uint32_t S = 0; S < 1u << nc; S++)
        at[S] = -1;
    if ((at[0] = sc_node(c)) < 0)
        st = g_nomem();
    if (!st)
        st = g_byte(c->g, from, '[', '[', at[0]);
    for (uint32_t S = 0; S < 1u << nc && !st; S++) { /* a set's successors are greater: reached first */
        int k = __builtin_popcount(S);
        if (at[S] < 0 || k > mx)
            continue;
        if (k >= mn && (st = g_byte(c->g, at[S], ']', ']', to)))
            break;
        if (k == mx)
            continue;
        int start = k ? sc_sep(c, at[S], ',') : at[S];
        for (size_t i = 0; i < m && !st; i++) {
            uint32_t T = S | 1u << cls[i];
            if (T == S)
                continue;
            if (start < 0 || (at[T] < 0 && (at[T] = sc_node(c)) < 0))
                st = g_nomem();
            else
                st = g_lit(c->g, start, lv[i].p, lv[i].n, at[T]);
        }
    }
    free(at);
    return st;
}

k3_status sc_unique_array(sc *c, const jv *s, const char *path, int from, int to) {
    char       p2[512];
    long       mn, mx;
    k3_status  st;
    jbuf       all = {0};
    lit_t     *l   = NULL, fixed[3];
    const jv **xs  = NULL;
    size_t     m   = 0;
    int       *cls = NULL, nc = 0;
    if ((st = sc_count(s, "minItems", path, 0, &mn)) || (st = sc_count(s, "maxItems", path, -1, &mx)))
        return st;
    if (jv_get(s, "prefixItems"))
        return unique_refused(path, "beside prefixItems (only over items of a few values)");
    sc_sub(p2, sizeof p2, path, "items", NULL);
    if ((st = unique_values(c, jv_get(s, "items"), path, p2, &all, &l, &xs, fixed, &m)))
        goto done;
    if (!(cls = k3_malloc((m + 1) * sizeof *cls))) {
        st = g_nomem();
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
    long long    nodes = unique_nodes(lv, cls, m, nc, mx);
    if (nodes > G_UQ_NODES)
        st = k3_err(K3_ERR_UNSUPPORTED,
                    "json schema: unsupported keyword \"uniqueItems\" at %s: its %d values' sets need %lld "
                    "grammar nodes, more than %d (fewer values or a smaller maxItems fit)",
                    path, nc, nodes, G_UQ_NODES);
    else
        st = unique_write(c, lv, cls, m, nc, mn, mx, from, to);
done:
    free(all.p), free(l), free(xs), free(cls);
    return st;
}
