/* wmap.c: the index's weight_map and a shard header's tensors, by one one-pass scanner with
 * jansson behind it (see wmap.h).
 *
 * DESIGN
 * The scanner accepts a subset of what jansson (2.14, flags JSON_REJECT_DUPLICATES) accepts and
 * gives the same entries for it; everything else goes to jansson. So it must never accept what
 * jansson refuses, and it stops instead where it would have to guess:
 * - strings: bytes 0x20.. except '"' and '\\', UTF-8 checked as jansson does (no overlong form,
 *   no surrogate, nothing above U+10FFFF), the eight one-letter escapes and \uXXXX (a high
 *   surrogate must be followed by \u and a low one; a lone one, or \u0000, stops the scan);
 * - numbers (outside weight_map only): JSON's grammar; an integer of more than 18 digits stops
 *   (jansson refuses one beyond long long), a fraction or exponent must read as a finite double
 *   (jansson refuses an overflow, accepts an underflow);
 * - true, false, null; arrays; objects: up to 16 members outside weight_map (their keys are
 *   compared for duplicates), nesting up to 32;
 * - weight_map's keys, and a header's top-level keys, are checked for duplicates with a hash table
 *   (k3_names) once the scan is done;
 * - a header's tensor: an object with dtype (a string), shape (at most ST_MAX_DIMS integers) and
 *   data_offsets (two), each non-negative with at most 18 digits, other members skipped.
 * Strings are decoded in place (a string never decodes to more bytes than its quoted form holds;
 * the NUL goes at or before the closing quote): no copy, no second 60 MB buffer to fault in. So
 * the text is spent either way, and the full parse needs it read again.
 */
#include "wmap.h"

#include "json.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WM_MAX_DEPTH 32
#define WM_MAX_MEMBERS 16 /* members of an object outside weight_map */

typedef struct scan {
    char  *s;
    size_t n, i;
    size_t o;     /* where the current string's next decoded byte goes (o <= i) */
    int    found; /* the top-level object had a weight_map */
} scan;

void wm_free(wm_map *m) {
    if (!m)
        return;
    free(m->e);
    free(m->arena);
    k3_names_free(&m->names);
    memset(m, 0, sizeof *m);
}

/* ==== scanner ===================================================================================== */

static void ws(scan *c) {
    while (c->i < c->n &&
           (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
}

/* Length of the UTF-8 sequence at p (at most n bytes there), 0 when jansson would refuse it. */
static size_t utf8_len(const unsigned char *p, size_t n) {
    unsigned char b = p[0];
    size_t        k;
    uint32_t      v;
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        k = 2, v = b & 0x1F;
    else if (b >= 0xE0 && b <= 0xEF)
        k = 3, v = b & 0x0F;
    else if (b >= 0xF0 && b <= 0xF4)
        k = 4, v = b & 0x07;
    else
        return 0;
    if (k > n)
        return 0;
    for (size_t j = 1; j < k; j++) {
        if ((p[j] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (p[j] & 0x3F);
    }
    if ((k == 3 && v < 0x800) || (k == 4 && v < 0x10000) || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    return k;
}

/* 1 for the bytes a string holds as they are: 0x20..0x7f but '"' (0x22) and '\\' (0x5c) */
static const unsigned char plain[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x00 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x10 */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x20 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x30 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x40 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* 0x50 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x60 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x70 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x80 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x90 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0xa0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0xb0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0xc0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0xd0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0xe0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0xf0 */
};

/* The string whose opening quote is at c->i, decoded in place; its start, or NULL where the
 * scanner stops (c->i then at the offending byte). */
static const char *str(scan *c) {
    if (c->i >= c->n || c->s[c->i] != '"')
        return NULL;
    char *start = c->s + ++c->i;
    c->o        = c->i;
    for (;;) {
        size_t j = c->i; /* the run of plain bytes: moved only once an escape came before it */
        while (j < c->n && plain[(unsigned char)c->s[j]])
            j++;
        if (c->o != c->i)
            memmove(c->s + c->o, c->s + c->i, j - c->i);
        c->o += j - c->i;
        c->i = j;
        if (j >= c->n)
            return NULL;
        unsigned char b = (unsigned char)c->s[j];
        if (b == '"') {
            c->i++;
            c->s[c->o] = 0;
            return start;
        }
        if (b < 0x20)
            return NULL;
        if (b >= 0x80) {
            size_t k = utf8_len((const unsigned char *)c->s + j, c->n - j);
            if (!k)
                return NULL;
            memmove(c->s + c->o, c->s + j, k);
            c->o += k;
            c->i += k;
            continue;
        }
        if (j + 1 >= c->n) /* a backslash */
            return NULL;
        char        e   = c->s[j + 1];
        const char *one = strchr("\"\\/bfnrt", e);
        if (e && one) {
            c->s[c->o++] = "\"\\/\b\f\n\r\t"[one - "\"\\/bfnrt"];
            c->i += 2;
            continue;
        }
        uint32_t cp, lo;
        if (e != 'u' || j + 6 > c->n || jv_hex4(c->s + j + 2, &cp) || cp == 0 ||
            (cp >= 0xDC00 && cp <= 0xDFFF))
            return NULL;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (j + 12 > c->n || c->s[j + 6] != '\\' || c->s[j + 7] != 'u' || jv_hex4(c->s + j + 8, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF)
                return NULL;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            c->i += 6;
        }
        c->i += 6;
        c->o += jv_utf8(cp, c->s + c->o); /* at most 4 bytes for the 6 (or 12) of the escape */
    }
}

static int digits(scan *c) {
    size_t j = c->i;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9')
        c->i++;
    return (int)(c->i - j);
}

static int number(scan *c) {
    size_t j = c->i;
    int    real;
    if (c->i < c->n && c->s[c->i] == '-')
        c->i++;
    if (c->i < c->n && c->s[c->i] == '0') {
        c->i++;
        if (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9')
            return -1;
    } else if (!digits(c)) {
        return -1;
    }
    if ((real = c->i < c->n && c->s[c->i] == '.')) {
        c->i++;
        if (!digits(c))
            return -1;
    }
    if (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
        real = 1;
        c->i++;
        if (c->i < c->n && (c->s[c->i] == '+' || c->s[c->i] == '-'))
            c->i++;
        if (!digits(c))
            return -1;
    }
    size_t len = c->i - j;
    char   lit[64];
    if (!real)
        return len - (c->s[j] == '-') > 18 ? -1 : 0;
    if (len >= sizeof lit)
        return -1;
    memcpy(lit, c->s + j, len);
    lit[len] = 0;
    return isfinite(strtod(lit, NULL)) ? 0 : -1;
}

static int literal(scan *c, const char *w) {
    size_t k = strlen(w);
    if (c->n - c->i < k || memcmp(c->s + c->i, w, k))
        return -1;
    c->i += k;
    return 0;
}

/* c->i at ch: past it and the whitespace after, 0; -1 when ch is not there */
static int eat(scan *c, char ch) {
    if (c->i >= c->n || c->s[c->i] != ch)
        return -1;
    c->i++;
    ws(c);
    return 0;
}

/* After a member or an element: 1 past the closing `close`, 0 past a ',', -1 at anything else. */
static int more(scan *c, char close) {
    ws(c);
    if (!eat(c, close))
        return 1;
    return eat(c, ',') ? -1 : 0;
}

/* A member's key and its ':' (the key decoded, or NULL) */
static const char *key(scan *c) {
    const char *k = str(c);
    ws(c);
    return k && !eat(c, ':') ? k : NULL;
}

static int push(wm_map *m, size_t *cap, const char *name, const char *file) {
    wm_entry *ne = k3_grow_z(m->e, cap, m->n + 1, sizeof *ne, 1024);
    if (!ne)
        return -1;
    m->e         = ne;
    m->e[m->n++] = (wm_entry){.name = name, .file = file};
    return 0;
}

/* weight_map's object (c->i at '{'): string values only. */
static int weight_map(scan *c, wm_map *m) {
    size_t cap = 0;
    if (eat(c, '{'))
        return -1;
    if (!eat(c, '}'))
        return 0;
    for (;;) {
        const char *name = key(c), *file = name ? str(c) : NULL;
        int         r;
        if (!file || push(m, &cap, name, file))
            return -1;
        if ((r = more(c, '}')))
            return r < 0 ? -1 : 0;
    }
}

static int value(scan *c, int depth);

/* The next member's key of an object of at most WM_MAX_MEMBERS (keys[0..*nk): those before it),
 * added to keys; NULL at a key given twice or one too many. */
static const char *member_key(scan *c, const char **keys, int *nk) {
    const char *k = key(c);
    if (!k || *nk == WM_MAX_MEMBERS)
        return NULL;
    for (int j = 0; j < *nk; j++)
        if (!strcmp(keys[j], k))
            return NULL;
    return keys[(*nk)++] = k;
}

/* An object (c->i at '{'): up to WM_MAX_MEMBERS members, no key twice. top: the index's own
 * object, whose member "weight_map" goes there. */
static int object(scan *c, int depth, wm_map *top) {
    const char *keys[WM_MAX_MEMBERS];
    int         nk = 0, r;
    if (eat(c, '{'))
        return -1;
    if (!eat(c, '}'))
        return 0;
    for (;;) {
        const char *k = member_key(c, keys, &nk);
        if (!k)
            return -1;
        if (top && !strcmp(k, "weight_map") ? (c->found = 1, weight_map(c, top)) : value(c, depth + 1))
            return -1;
        if ((r = more(c, '}')))
            return r < 0 ? -1 : 0;
    }
}

static int array(scan *c, int depth) {
    int r;
    c->i++;
    ws(c);
    if (!eat(c, ']'))
        return 0;
    for (;;) {
        if (value(c, depth + 1))
            return -1;
        if ((r = more(c, ']')))
            return r < 0 ? -1 : 0;
    }
}

/* Any value outside weight_map, skipped (its strings decoded all the same). */
static int value(scan *c, int depth) {
    if (c->i >= c->n || depth > WM_MAX_DEPTH)
        return -1;
    switch (c->s[c->i]) {
    case '{':
        return object(c, depth, NULL);
    case '[':
        return array(c, depth);
    case '"':
        return str(c) ? 0 : -1;
    case 't':
        return literal(c, "true");
    case 'f':
        return literal(c, "false");
    case 'n':
        return literal(c, "null");
    default:
        return number(c);
    }
}

static const char *entry_name(const void *e, size_t i) {
    return ((const wm_entry *)e)[i].name;
}

static const char *entry_key(const void *e, size_t i) {
    return ((const wm_entry *)e)[i].key;
}

static const char *key_name(const void *k, size_t i) {
    return ((const char *const *)k)[i];
}

/* 1 when two of the n names (read through name_of) are the same, or out of memory (the full
 * parse decides then). */
static int has_duplicate(const char *(*name_of)(const void *, size_t), const void *ctx, size_t n) {
    k3_names t   = {.name_of = name_of, .ctx = ctx};
    int      dup = k3_names_reserve(&t, n) != 0;
    for (size_t i = 0; i < n && !dup; i++)
        dup = k3_names_add(&t, i, NULL) != 0;
    k3_names_free(&t);
    return dup;
}

/* m->names, m's entries by key, in one pass that is also the check for a duplicate name (JSON's
 * duplicate key): two entries with one key are the same name when their full names are equal.
 * Only an index that gives a name both with and without ST_PREFIX needs a second pass, over the
 * full names (X, ST_PREFIX X, ST_PREFIX X is a duplicate the keys' table alone does not see).
 * 0; 1 a duplicate name; -1 out of memory. */
static int index_names(wm_map *m) {
    int mixed = 0;
    m->names  = (k3_names){.name_of = entry_key, .ctx = m->e};
    if (k3_names_reserve(&m->names, m->n))
        return -1;
    for (size_t i = 0; i < m->n; i++) {
        const char *nm = m->e[i].name;
        size_t      first;
        m->e[i].key = strncmp(nm, ST_PREFIX, ST_PREFIX_LEN) ? nm : nm + ST_PREFIX_LEN;
        int r       = k3_names_add(&m->names, i, &first);
        if (r < 0)
            return -1;
        if (r && !strcmp(m->e[first].name, nm))
            return 1;
        mixed |= r;
    }
    return mixed ? has_duplicate(entry_name, m->e, m->n) : 0;
}

int wm_scan(char *text, size_t len, wm_map *out, size_t *at) {
    memset(out, 0, sizeof *out);
    scan c = {.s = text, .n = len};
    if (len > UINT32_MAX - 1)
        goto stop;
    ws(&c);
    if (object(&c, 0, out) || c.i != c.n || !c.found || index_names(out))
        goto stop;
    return 0;
stop:
    *at = c.i;
    wm_free(out);
    return -1;
}

/* ==== a shard header ============================================================================= */

/* A non-negative integer of at most 18 digits (what jansson reads as one, exactly). */
static int integer(scan *c, int64_t *v) {
    size_t j = c->i;
    if (j >= c->n || c->s[j] == '-' || number(c))
        return -1;
    for (size_t k = j; k < c->i; k++)
        if (c->s[k] < '0' || c->s[k] > '9')
            return -1; /* a fraction or an exponent: a real (of any length) */
    int64_t x = 0;     /* all digits: number() allowed at most 18 */
    for (; j < c->i; j++)
        x = x * 10 + (c->s[j] - '0');
    *v = x;
    return 0;
}

/* An array (c->i at '[') of at most max such integers into v; their count into *n. */
static int integers(scan *c, int64_t *v, int max, int *n) {
    int r;
    *n = 0;
    if (eat(c, '['))
        return -1;
    if (!eat(c, ']'))
        return 0;
    for (;;) {
        if (*n == max || integer(c, &v[*n]))
            return -1;
        ++*n;
        if ((r = more(c, ']')))
            return r < 0 ? -1 : 0;
    }
}

/* A tensor's object (c->i at '{'): dtype a string, shape and data_offsets arrays of integers,
 * each once; other members skipped (their values checked as anywhere). */
static int tensor(scan *c, int depth, wm_tensor *t) {
    const char *keys[WM_MAX_MEMBERS];
    int         nk = 0, r, have = 0, no;
    int64_t     off[2] = {0, 0};
    if (eat(c, '{') || !eat(c, '}'))
        return -1;
    for (;;) {
        const char *k = member_key(c, keys, &nk);
        if (!k)
            return -1;
        if (!strcmp(k, "dtype"))
            have |= 1, r = !(t->dtype = str(c));
        else if (!strcmp(k, "shape"))
            have |= 2, r = integers(c, t->shape, ST_MAX_DIMS, &t->ndim);
        else if (!strcmp(k, "data_offsets"))
            have |= 4, r = integers(c, off, 2, &no) || no != 2;
        else
            r = value(c, depth + 1);
        if (r)
            return -1;
        if ((r = more(c, '}'))) {
            t->begin = (uint64_t)off[0], t->end = (uint64_t)off[1];
            return r < 0 || have != 7 ? -1 : 0;
        }
    }
}

int wm_scan_header(char *text, size_t len, wm_tensor_cb cb, void *ud, size_t *at) {
    scan         c    = {.s = text, .n = len};
    const char **keys = NULL; /* the top level's keys, for the duplicate check */
    size_t       nk = 0, cap = 0;
    int          r, ret      = -1;
    if (len > UINT32_MAX - 1)
        goto stop;
    ws(&c);
    if (eat(&c, '{'))
        goto stop;
    for (r = !eat(&c, '}'); !r;) {
        const char *k = key(&c);
        if (!k)
            goto stop;
        const char **nkk = k3_grow_z(keys, &cap, nk + 1, sizeof *nkk, 1024);
        if (!nkk)
            goto stop;
        keys       = nkk;
        keys[nk++] = k;
        if (!strcmp(k, "__metadata__")) {
            if (value(&c, 1))
                goto stop;
        } else {
            wm_tensor t = {.name = k};
            if (tensor(&c, 1, &t))
                goto stop;
            if (cb(ud, &t)) {
                ret = -2;
                goto stop;
            }
        }
        if ((r = more(&c, '}')) < 0)
            goto stop;
    }
    if (c.i == c.n && !has_duplicate(key_name, keys, nk))
        ret = 0;
stop:
    free(keys);
    *at = c.i;
    return ret;
}

/* ==== full parse (jansson) ======================================================================== */

k3_status wm_parse_full(const char *file, const char *text, size_t len, wm_map *out) {
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t      *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    k3_status    st   = K3_OK;
    if (!root)
        return k3_err(K3_ERR_FORMAT, "%s: line %d column %d (byte %d): %s", file, jerr.line, jerr.column,
                      jerr.position, jerr.text);
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        json_decref(root);
        return k3_err(K3_ERR_FORMAT, "%s: weight_map missing or not an object", file);
    }
    const char *key;
    json_t     *val;
    size_t      bytes = 1, k = 0;
    json_object_foreach(wm, key, val) {
        if (!json_is_string(val)) {
            st = k3_err(K3_ERR_FORMAT, "%s: weight_map.%s is not a plain shard file name", file, key);
            goto done;
        }
        bytes += strlen(key) + json_string_length(val) + 2;
    }
    out->n     = json_object_size(wm);
    out->e     = malloc((out->n ? out->n : 1) * sizeof *out->e);
    out->arena = malloc(bytes);
    if (!out->e || !out->arena) {
        st = k3_err(K3_ERR_NOMEM, "%s: out of memory", file);
        goto done;
    }
    char *p = out->arena;
    json_object_foreach(wm, key, val) {
        size_t nk = strlen(key) + 1, nv = strlen(json_string_value(val)) + 1;
        out->e[k].name = memcpy(p, key, nk);
        out->e[k].file = memcpy(p + nk, json_string_value(val), nv);
        p += nk + nv;
        k++;
    }
    if (index_names(out)) /* jansson refused duplicate keys: only memory can fail here */
        st = k3_err(K3_ERR_NOMEM, "%s: out of memory", file);
done:
    json_decref(root);
    if (st)
        wm_free(out);
    return st;
}
