/* json.c: JSON with Python's json semantics (see json.h for why).
 *
 * DESIGN
 * A recursive-descent reader builds a jv tree: integers keep their literal text (Python
 * ints have no size limit), other numbers become doubles, strings are UTF-8 with every
 * escape resolved (a lone surrogate is an error: it cannot be UTF-8). Objects keep keys in
 * order of first appearance; a repeated key replaces the value in place (a Python dict).
 * Depth is bounded (JV_MAX_DEPTH) so hostile input cannot overflow the stack.
 * The writer prints floats as Python's repr: the shortest digits that read back to the
 * same double, fixed notation for exponents -4..15, else d.ddde+XX.
 */
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define JV_MAX_DEPTH 512

k3_status jbuf_add(jbuf *b, const char *s, size_t n) {
    return k3_buf_add(b, s, n) ? k3_err(K3_ERR_NOMEM, "json: out of memory") : K3_OK;
}

/* ==== reader ===================================================================== */

typedef struct jrd {
    const char *s;
    size_t      n, i;
} jrd;

static k3_status fail_at(const jrd *r, const char *what) {
    return k3_err(K3_ERR_FORMAT, "invalid JSON: %s at byte %zu", what, r->i);
}

static void ws(jrd *r) {
    while (r->i < r->n &&
           (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r'))
        r->i++;
}

static void jv_clear(jv *v) {
    if (v->kind == JV_ARRAY || v->kind == JV_OBJECT) {
        for (size_t k = 0; k < v->n; k++) {
            jv_clear(&v->items[k]);
            if (v->keys)
                jv_clear(&v->keys[k]);
        }
        free(v->items);
        free(v->keys);
    }
    free(v->s);
    memset(v, 0, sizeof *v);
}

void jv_free(jv *v) {
    if (!v)
        return;
    jv_clear(v);
    free(v);
}

int jv_hex4(const char *s, uint32_t *out) {
    uint32_t x = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        x <<= 4;
        if (c >= '0' && c <= '9')
            x |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            x |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            x |= (uint32_t)(c - 'A' + 10);
        else
            return -1;
    }
    *out = x;
    return 0;
}

size_t jv_utf8(uint32_t cp, char *u) {
    if (cp < 0x80) {
        u[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12);
        u[1] = (char)(0x80 | (cp >> 6 & 63));
        u[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    u[0] = (char)(0xF0 | cp >> 18);
    u[1] = (char)(0x80 | (cp >> 12 & 63));
    u[2] = (char)(0x80 | (cp >> 6 & 63));
    u[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* r->s[r->i] is the opening quote. */
static k3_status read_string(jrd *r, jv *v) {
    jbuf      b  = {0};
    k3_status st = jbuf_add(&b, "", 0);
    r->i++;
    while (!st) {
        if (r->i >= r->n) {
            st = fail_at(r, "unterminated string");
            break;
        }
        unsigned char c = (unsigned char)r->s[r->i];
        if (c == '"') {
            r->i++;
            break;
        }
        if (c < 0x20) {
            st = fail_at(r, "control character in a string");
            break;
        }
        if (c != '\\') {
            size_t j = r->i;
            while (j < r->n && r->s[j] != '"' && r->s[j] != '\\' && (unsigned char)r->s[j] >= 0x20)
                j++;
            st   = jbuf_add(&b, r->s + r->i, j - r->i);
            r->i = j;
            continue;
        }
        if (r->i + 1 >= r->n) {
            st = fail_at(r, "unterminated escape");
            break;
        }
        char        e   = r->s[r->i + 1];
        const char *rep = e == '"'    ? "\""
                          : e == '\\' ? "\\"
                          : e == '/'  ? "/"
                          : e == 'b'  ? "\b"
                          : e == 'f'  ? "\f"
                          : e == 'n'  ? "\n"
                          : e == 'r'  ? "\r"
                          : e == 't'  ? "\t"
                                      : NULL;
        if (rep) {
            st = jbuf_add(&b, rep, 1);
            r->i += 2;
            continue;
        }
        uint32_t cp, lo;
        if (e != 'u' || r->i + 6 > r->n || jv_hex4(r->s + r->i + 2, &cp)) {
            st = fail_at(r, "bad escape");
            break;
        }
        r->i += 6;
        if (cp >= 0xD800 && cp < 0xDC00) {
            if (r->i + 6 > r->n || r->s[r->i] != '\\' || r->s[r->i + 1] != 'u' ||
                jv_hex4(r->s + r->i + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                st = fail_at(r, "lone surrogate in \\u escape");
                break;
            }
            r->i += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
            st = fail_at(r, "lone surrogate in \\u escape");
            break;
        }
        char u[4];
        st = jbuf_add(&b, u, jv_utf8(cp, u));
    }
    if (st) {
        free(b.p);
        return st;
    }
    v->kind = JV_STRING;
    v->s    = b.p;
    v->n    = b.n;
    return K3_OK;
}

static k3_status read_number(jrd *r, jv *v) {
    size_t j        = r->i, digits0;
    int    is_float = 0;
    if (j < r->n && r->s[j] == '-')
        j++;
    digits0 = j;
    if (j < r->n && r->s[j] == '0')
        j++;
    else if (j < r->n && r->s[j] >= '1' && r->s[j] <= '9')
        while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9')
            j++;
    else
        return fail_at(r, "bad number");
    if (j < r->n && r->s[j] == '.') {
        is_float = 1;
        size_t k = ++j;
        while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9')
            j++;
        if (j == k)
            return fail_at(r, "bad number");
    }
    if (j < r->n && (r->s[j] == 'e' || r->s[j] == 'E')) {
        is_float = 1;
        j++;
        if (j < r->n && (r->s[j] == '+' || r->s[j] == '-'))
            j++;
        size_t k = j;
        while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9')
            j++;
        if (j == k)
            return fail_at(r, "bad number");
    }
    size_t len = j - r->i;
    char  *lit = k3_malloc(len + 1);
    if (!lit)
        return k3_err(K3_ERR_NOMEM, "json: out of memory");
    memcpy(lit, r->s + r->i, len);
    lit[len] = 0;
    r->i     = j;
    if (is_float) {
        v->kind = JV_FLOAT;
        v->d    = strtod(lit, NULL); /* out of range gives +-inf / 0, as Python's float() */
        free(lit);
        return K3_OK;
    }
    if (len == 2 && lit[0] == '-' && lit[1] == '0') { /* Python: int("-0") == 0 */
        lit[0] = '0';
        lit[1] = 0;
        len    = 1;
    }
    (void)digits0;
    v->kind = JV_INT;
    v->s    = lit;
    v->n    = len;
    return K3_OK;
}

static k3_status read_value(jrd *r, jv *v, int depth);

static k3_status push_item(jv *c, jv *val, jv *key) {
    if (c->n == c->cap) { /* items and keys share cap: each grows from the old one */
        size_t cap = c->cap, kcap = c->cap;
        jv    *it = k3_grow_z(c->items, &cap, c->n + 1, sizeof *it, 4);
        if (!it)
            return k3_err(K3_ERR_NOMEM, "json: out of memory");
        c->items = it;
        if (c->kind == JV_OBJECT) {
            jv *ks = k3_grow_z(c->keys, &kcap, c->n + 1, sizeof *ks, 4);
            if (!ks)
                return k3_err(K3_ERR_NOMEM, "json: out of memory");
            c->keys = ks;
        }
        c->cap = cap;
    }
    c->items[c->n] = *val;
    if (key)
        c->keys[c->n] = *key;
    c->n++;
    return K3_OK;
}

static int key_cmp(const jv *a, const jv *b) {
    size_t n = a->n < b->n ? a->n : b->n;
    int    c = memcmp(a->s, b->s, n);
    return c ? c : (a->n > b->n) - (a->n < b->n);
}

/* qsort has no context argument: the keys being sorted, per thread */
static _Thread_local const jv *tl_keys;

static int idx_cmp(const void *a, const void *b) {
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int    c = key_cmp(&tl_keys[i], &tl_keys[j]);
    return c ? c : (i > j) - (i < j);
}

/* Key order of v: indices sorted by key (ties by position). Caller frees. */
static size_t *sorted_idx(const jv *v) {
    size_t *ord = k3_malloc((v->n ? v->n : 1) * sizeof *ord);
    if (!ord)
        return NULL;
    for (size_t k = 0; k < v->n; k++)
        ord[k] = k;
    tl_keys = v->keys;
    qsort(ord, v->n, sizeof *ord, idx_cmp);
    return ord;
}

/* A repeated key keeps its first place and takes the last value (a Python dict). */
static k3_status dedup_keys(jv *v) {
    if (v->n < 2)
        return K3_OK;
    size_t *ord = sorted_idx(v);
    if (!ord)
        return k3_err(K3_ERR_NOMEM, "json: out of memory");
    int any = 0;
    for (size_t k = 0; k + 1 < v->n; k++) {
        size_t e = k;
        while (e + 1 < v->n && !key_cmp(&v->keys[ord[k]], &v->keys[ord[e + 1]]))
            e++;
        if (e == k)
            continue;
        any = 1; /* run ord[k..e], ascending positions: keep ord[k]'s place, ord[e]'s value */
        jv_clear(&v->items[ord[k]]);
        v->items[ord[k]] = v->items[ord[e]];
        memset(&v->items[ord[e]], 0, sizeof v->items[ord[e]]);
        for (size_t z = k + 1; z <= e; z++) {
            jv_clear(&v->items[ord[z]]);
            jv_clear(&v->keys[ord[z]]);
            v->keys[ord[z]].kind = JV_ARRAY; /* removed marker (a key is always a string) */
        }
        k = e;
    }
    free(ord);
    if (any) {
        size_t w = 0;
        for (size_t k = 0; k < v->n; k++)
            if (v->keys[k].kind == JV_STRING) {
                v->items[w]  = v->items[k];
                v->keys[w++] = v->keys[k];
            }
        v->n = w;
    }
    return K3_OK;
}

static k3_status read_container(jrd *r, jv *v, int depth) {
    int obj = r->s[r->i] == '{';
    v->kind = obj ? JV_OBJECT : JV_ARRAY;
    r->i++;
    ws(r);
    if (r->i < r->n && r->s[r->i] == (obj ? '}' : ']')) {
        r->i++;
        return K3_OK;
    }
    for (;;) {
        jv        key = {0}, val = {0};
        k3_status st;
        if (obj) {
            ws(r);
            if (r->i >= r->n || r->s[r->i] != '"')
                return fail_at(r, "expected a string key");
            if ((st = read_string(r, &key)))
                return st;
            ws(r);
            if (r->i >= r->n || r->s[r->i] != ':') {
                jv_clear(&key);
                return fail_at(r, "expected ':'");
            }
            r->i++;
        }
        if ((st = read_value(r, &val, depth + 1))) {
            jv_clear(&key);
            return st;
        }
        if ((st = push_item(v, &val, obj ? &key : NULL))) {
            jv_clear(&key);
            jv_clear(&val);
            return st;
        }
        ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == (obj ? '}' : ']')) {
            r->i++;
            return obj ? dedup_keys(v) : K3_OK;
        }
        return fail_at(r, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int word(jrd *r, const char *w) {
    size_t n = strlen(w);
    if (r->n - r->i < n || memcmp(r->s + r->i, w, n))
        return 0;
    r->i += n;
    return 1;
}

static k3_status read_value(jrd *r, jv *v, int depth) {
    if (depth > JV_MAX_DEPTH)
        return fail_at(r, "nested too deeply");
    ws(r);
    if (r->i >= r->n)
        return fail_at(r, "unexpected end");
    char      c = r->s[r->i];
    k3_status st;
    if (c == '"')
        st = read_string(r, v);
    else if (c == '{' || c == '[')
        st = read_container(r, v, depth);
    else if (word(r, "null")) {
        v->kind = JV_NULL;
        st      = K3_OK;
    } else if (word(r, "true")) {
        v->kind = JV_TRUE;
        st      = K3_OK;
    } else if (word(r, "false")) {
        v->kind = JV_FALSE;
        st      = K3_OK;
    } else if (word(r, "NaN")) {
        v->kind = JV_FLOAT;
        v->d    = NAN;
        st      = K3_OK;
    } else if (word(r, "Infinity")) {
        v->kind = JV_FLOAT;
        v->d    = INFINITY;
        st      = K3_OK;
    } else if (word(r, "-Infinity")) {
        v->kind = JV_FLOAT;
        v->d    = -INFINITY;
        st      = K3_OK;
    } else
        st = read_number(r, v);
    if (st)
        jv_clear(v);
    return st;
}

k3_status jv_parse(const char *text, size_t len, jv **out) {
    *out  = NULL;
    jv *v = k3_calloc(1, sizeof *v);
    if (!v)
        return k3_err(K3_ERR_NOMEM, "json: out of memory");
    jrd       r  = {text ? text : "", text ? len : 0, 0};
    k3_status st = read_value(&r, v, 0);
    if (!st) {
        ws(&r);
        if (r.i < r.n)
            st = fail_at(&r, "extra data after the value");
    }
    if (st) {
        jv_free(v);
        return st;
    }
    *out = v;
    return K3_OK;
}

const jv *jv_get(const jv *v, const char *key) {
    if (!v || v->kind != JV_OBJECT)
        return NULL;
    size_t n = strlen(key);
    for (size_t k = 0; k < v->n; k++)
        if (v->keys[k].n == n && !memcmp(v->keys[k].s, key, n))
            return &v->items[k];
    return NULL;
}

/* ==== writer ===================================================================== */

k3_status jv_escape(const char *s, size_t n, jbuf *out) {
    k3_status st = K3_OK;
    size_t    i  = 0;
    while (!st && i < n) {
        size_t j = i;
        while (j < n && (unsigned char)s[j] >= 0x20 && s[j] != '"' && s[j] != '\\')
            j++;
        if (j > i && (st = jbuf_add(out, s + i, j - i)))
            break;
        if (j == n)
            break;
        unsigned char c = (unsigned char)s[j];
        char          e[8];
        const char   *rep = c == '"'    ? "\\\""
                            : c == '\\' ? "\\\\"
                            : c == '\n' ? "\\n"
                            : c == '\r' ? "\\r"
                            : c == '\t' ? "\\t"
                            : c == '\b' ? "\\b"
                            : c == '\f' ? "\\f"
                                        : NULL;
        if (!rep) {
            snprintf(e, sizeof e, "\\u%04x", c);
            rep = e;
        }
        st = jbuf_add(out, rep, strlen(rep));
        i  = j + 1;
    }
    return st;
}

k3_status jv_dump_str(const char *s, size_t n, jbuf *out) {
    k3_status st = jbuf_add(out, "\"", 1);
    if (!st)
        st = jv_escape(s, n, out);
    return st ? st : jbuf_add(out, "\"", 1);
}

/* Python's repr(float). */
static k3_status dump_float(double d, jbuf *out) {
    if (isnan(d))
        return jbuf_add(out, "NaN", 3);
    if (isinf(d))
        return d > 0 ? jbuf_add(out, "Infinity", 8) : jbuf_add(out, "-Infinity", 9);
    char e[40];
    int  prec;
    for (prec = 0; prec < 17; prec++) { /* shortest digits that round-trip */
        snprintf(e, sizeof e, "%.*e", prec, d);
        if (strtod(e, NULL) == d)
            break;
    }
    /* e = [-]D[.DDD]e[+-]XX: collect the digits and the exponent */
    const char *p   = e;
    int         neg = *p == '-';
    if (neg)
        p++;
    char dig[24];
    int  nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            dig[nd++] = *p;
    int x = atoi(p + 1);
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    char o[64];
    int  k = 0;
    if (neg)
        o[k++] = '-';
    if (x >= -4 && x < 16) {
        if (x < 0) {
            o[k++] = '0';
            o[k++] = '.';
            for (int z = 0; z < -x - 1; z++)
                o[k++] = '0';
            for (int z = 0; z < nd; z++)
                o[k++] = dig[z];
        } else {
            for (int z = 0; z <= x; z++)
                o[k++] = z < nd ? dig[z] : '0';
            o[k++] = '.';
            if (nd > x + 1)
                for (int z = x + 1; z < nd; z++)
                    o[k++] = dig[z];
            else
                o[k++] = '0';
        }
    } else {
        o[k++] = dig[0];
        if (nd > 1) {
            o[k++] = '.';
            for (int z = 1; z < nd; z++)
                o[k++] = dig[z];
        }
        k += snprintf(o + k, sizeof o - (size_t)k, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    }
    return jbuf_add(out, o, (size_t)k);
}

k3_status jv_dump(const jv *v, enum jv_style style, jbuf *out) {
    const char *comma = style == JV_PY_DEFAULT ? ", " : ",", *colon = style == JV_PY_DEFAULT ? ": " : ":";
    k3_status   st = K3_OK;
    switch (v->kind) {
    case JV_NULL:
        return jbuf_add(out, "null", 4);
    case JV_TRUE:
        return jbuf_add(out, "true", 4);
    case JV_FALSE:
        return jbuf_add(out, "false", 5);
    case JV_INT:
        return jbuf_add(out, v->s, v->n);
    case JV_FLOAT:
        return dump_float(v->d, out);
    case JV_STRING:
        return jv_dump_str(v->s, v->n, out);
    case JV_ARRAY:
        st = jbuf_add(out, "[", 1);
        for (size_t k = 0; !st && k < v->n; k++)
            if (!(k && (st = jbuf_add(out, comma, strlen(comma)))))
                st = jv_dump(&v->items[k], style, out);
        return st ? st : jbuf_add(out, "]", 1);
    case JV_OBJECT: {
        size_t *ord = style == JV_SORTED_COMPACT ? sorted_idx(v) : k3_malloc((v->n ? v->n : 1) * sizeof *ord);
        if (!ord)
            return k3_err(K3_ERR_NOMEM, "json: out of memory");
        for (size_t k = 0; style != JV_SORTED_COMPACT && k < v->n; k++)
            ord[k] = k;
        st = jbuf_add(out, "{", 1);
        for (size_t k = 0; !st && k < v->n; k++) {
            if (k && (st = jbuf_add(out, comma, strlen(comma))))
                break;
            if ((st = jv_dump_str(v->keys[ord[k]].s, v->keys[ord[k]].n, out)) ||
                (st = jbuf_add(out, colon, strlen(colon))))
                break;
            st = jv_dump(&v->items[ord[k]], style, out);
        }
        free(ord);
        return st ? st : jbuf_add(out, "}", 1);
    }
    }
    return st;
}
