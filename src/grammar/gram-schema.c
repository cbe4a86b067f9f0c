/* gram-schema.c: JSON Schema (and "any JSON object") to a grammar (gram-impl.h): the walk over
 * the schema document. This file reads each schema's keywords and dispatches on its type
 * (emit_schema), resolves $ref/$defs into rules (one per schema, written after the schema that
 * called them: rule_of, sc_rules_emit), writes anyOf/oneOf/allOf, the any-value rule, the refusals'
 * messages, and holds the compile's state (sc) and entry points. The kinds of value are written
 * by gram-num.c (integers, numbers, multipleOf), gram-str.c (strings, formats, patterns),
 * gram-obj.c (objects, arrays) and gram-value.c (enum, const, uniqueItems); gram-tools.c compiles
 * the tool-call format on the same pieces.
 *
 * The documents are compact JSON: no white space except one optional space after ':' and ',',
 * object members in the order the schema declares them (additional members after them), numbers
 * of at most 16 integer digits, 16 fraction digits and a 2-digit exponent. Every document the
 * grammar accepts validates against the schema; that is the contract the tests check with an
 * independent validator. Keywords (see the man page, k3chat(1), STRUCTURED OUTPUT):
 *   type (one or a list), enum, const (a value is kept only when the schema's other keywords
 *   allow it: vcheck, a validator of one value), properties, required, additionalProperties,
 *   items, prefixItems, minItems, maxItems, uniqueItems (over items of a few values:
 *   sc_unique_array), minLength, maxLength (beside a pattern or format too: g_pattern_len),
 *   pattern (gram-re.c; beside a format, both hold: g_pattern_len), format (OpenAI's strict
 *   list: date-time, time, date, duration, email, hostname, ipv4, ipv6, uuid; the table
 *   formats), multipleOf (integers and fractions over a power of 2: sc_emit_integer; other
 *   fractions between bounds: emit_listed), minimum, maximum, exclusiveMinimum, exclusiveMaximum
 *   (integers: exactly and as doubles, int_bound; numbers without an exponent:
 *   sc_emit_number_range), anyOf, oneOf (branches of distinct types, or tagged objects:
 *   tagged_apart), allOf (of objects, or of one schema), $ref to #, #/$defs/NAME or
 *   #/definitions/NAME (recursion through calls), the annotations ($id at the root only).
 *   Anything else is refused with K3_ERR_UNSUPPORTED naming the keyword and its JSON path.
 */
#include "gram-impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static k3_status rule_of(sc *c, const jv *s, const char *path, int *start);

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

int sc_annotation(const char *k) {
    return in_list(k, annotations, sizeof annotations / sizeof *annotations);
}

int sc_keyword(const char *k) {
    return in_list(k, keywords, sizeof keywords / sizeof *keywords);
}

/* K3_OK when s holds no keyword but key and annotations, else key refused at path (why). */
k3_status sc_alone(const jv *s, const char *key, const char *path, const char *why) {
    for (size_t k = 0; k < s->n; k++)
        if (strcmp(s->keys[k].s, key) && !sc_annotation(s->keys[k].s))
            return sc_unsupported(path, key, why);
    return K3_OK;
}

k3_status sc_bad(const char *path, const char *key, const char *want) {
    return k3_err(K3_ERR_ARG, "json schema: \"%s\" at %s: expected %s", key, path, want);
}

k3_status sc_unsupported(const char *path, const char *key, const char *why) {
    return k3_err(K3_ERR_UNSUPPORTED, "json schema: unsupported keyword \"%s\" at %s%s%s", key, path,
                  why ? ": " : "", why ? why : "");
}

void sc_sub(char *out, size_t n, const char *path, const char *a, const char *b) {
    snprintf(out, n, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

/* A non-negative integer keyword (absent: def); 2.0 is the integer 2 (JSON Schema counts a
 * number by its value), a count past LONG_MAX reads as LONG_MAX (the callers refuse it). */
k3_status sc_count(const jv *s, const char *key, const char *path, long def, long *out) {
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
        return sc_bad(path, key, "a non-negative integer");
    *out = x;
    return K3_OK;
}

/* ---- small pieces (every part writes with them) ------------------------------------------ */

int sc_node(sc *c) {
    return g_node_new(c->g);
}

/* ch, then an optional space: returns the node after them (or -1) */
int sc_sep(sc *c, int from, char ch) {
    int a = sc_node(c), b = sc_node(c);
    if (b < 0 || g_byte(c->g, from, ch, ch, a) || g_eps(c->g, a, b) || g_byte(c->g, a, ' ', ' ', b))
        return -1;
    return b;
}

k3_status sc_lit(sc *c, int from, const char *s, int to) {
    return g_lit(c->g, from, s, strlen(s), to);
}
/* The any-value rule: object, array, string, number, true, false, null. */
static k3_status any_rule(sc *c, int *start) {
    if (c->any >= 0)
        return *start = c->any, K3_OK;
    int       st0 = sc_node(c), end = sc_node(c);
    k3_status st;
    if (end < 0)
        return g_nomem();
    c->g->node[end].ret = 1;
    c->any              = st0;
    *start              = st0;
    /* object: { ("k":V (,"k":V)*)? } */
    int o = sc_node(c), k1 = sc_node(c), k2 = sc_node(c), v1 = sc_node(c), oc = sc_node(c);
    if ((st = g_byte(c->g, st0, '{', '{', o)) || (st = g_byte(c->g, o, '}', '}', end)) ||
        (st = g_byte(c->g, o, '"', '"', k1)) || (st = g_str_char(c->g, k1, k1)) ||
        (st = g_byte(c->g, k1, '"', '"', k2)))
        return st;
    int col = sc_sep(c, k2, ':'), com;
    if (col < 0 || (st = g_call(c->g, col, st0, v1)) || (st = g_eps(c->g, v1, oc)) ||
        (st = g_byte(c->g, oc, '}', '}', end)) || (com = sc_sep(c, oc, ',')) < 0 ||
        (st = g_byte(c->g, com, '"', '"', k1)))
        return st ? st : g_nomem();
    /* array: [ (V (,V)*)? ] */
    int a = sc_node(c), a1 = sc_node(c);
    if ((st = g_byte(c->g, st0, '[', '[', a)) || (st = g_byte(c->g, a, ']', ']', end)) ||
        (st = g_call(c->g, a, st0, a1)) || (st = g_byte(c->g, a1, ']', ']', end)))
        return st;
    int ac = sc_sep(c, a1, ',');
    if (ac < 0 || (st = g_call(c->g, ac, st0, a1)))
        return st ? st : g_nomem();
    static const jv str = {.kind = JV_OBJECT};
    if ((st = sc_emit_string(c, &str, "#", st0, end)) || (st = sc_emit_number(c, st0, end)) ||
        (st = sc_lit(c, st0, "true", end)) || (st = sc_lit(c, st0, "false", end)) ||
        (st = sc_lit(c, st0, "null", end)))
        return st;
    return K3_OK;
}

static int is_any(const jv *s) {
    if (!s || s->kind == JV_TRUE)
        return 1;
    if (s->kind != JV_OBJECT)
        return 0;
    for (size_t i = 0; i < s->n; i++)
        if (!sc_annotation(s->keys[i].s))
            return 0;
    return 1;
}

/* A call of schema s (any value: the shared rule) from -> to. */
k3_status sc_call(sc *c, const jv *s, const char *path, int from, int to) {
    int       start;
    k3_status st = is_any(s) ? any_rule(c, &start) : rule_of(c, s, path, &start);
    return st ? st : g_call(c->g, from, start, to);
}
/* ---- types, $ref and the combinators ------------------------------------------------------ */

int sc_kind_type(const jv *v) {
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

k3_status sc_types_of(const jv *s, const char *path, int *mask) {
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
        return sc_bad(path, "type", "a type or a non-empty list of types");
    for (size_t i = 0; i < n; i++) {
        const jv *e = t->kind == JV_ARRAY ? &t->items[i] : t;
        int       k = 0;
        for (size_t j = 0; e->kind == JV_STRING && j < sizeof tn / sizeof *tn; j++)
            if (!strcmp(e->s, tn[j].n))
                k = tn[j].t;
        if (!k)
            return sc_bad(path, "type",
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

int sc_hex_val(char ch) {
    return ch >= '0' && ch <= '9'                     ? ch - '0'
           : (ch | 0x20) >= 'a' && (ch | 0x20) <= 'f' ? (ch | 0x20) - 'a' + 10
                                                      : -1;
}

k3_status sc_resolve(sc *c, const jv *ref, const char *path, const jv **out) {
    if (ref->kind != JV_STRING)
        return sc_bad(path, "$ref", "a string");
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
            return g_nomem();
        for (const char *p = ref->s + l; *p; p++) {
            int hi = p[0] == '%' ? sc_hex_val(p[1]) : -1, lo = hi >= 0 ? sc_hex_val(p[2]) : -1;
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
            return sc_unsupported(path, "$ref", "a pointer below a definition (only #/$defs/NAME)");
        return k3_err(K3_ERR_ARG, "json schema: \"$ref\" at %s: \"%s\" names no definition", path, ref->s);
    }
    return sc_unsupported(path, "$ref", "only #, #/$defs/NAME and #/definitions/NAME");
}

/* The types a schema may produce, for oneOf's disjointness check (T_ALL when unknown). */
int sc_schema_types(sc *c, const jv *s, int depth) {
    int m = 0;
    if (!s || s->kind != JV_OBJECT || depth > 16)
        return T_ALL;
    const jv *e, *r;
    if ((r = jv_get(s, "$ref"))) {
        const jv *t;
        if (sc_resolve(c, r, "#", &t))
            return T_ALL;
        return sc_schema_types(c, t, depth + 1);
    }
    if ((e = jv_get(s, "const")))
        return sc_kind_type(e);
    if ((e = jv_get(s, "enum")) && e->kind == JV_ARRAY) {
        for (size_t i = 0; i < e->n; i++)
            m |= sc_kind_type(&e->items[i]);
        return m;
    }
    if (sc_types_of(s, "#", &m) || !m)
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

/* allOf's branches (s's, at most 64) into br (*nb of them, $refs resolved): object schemas of
 * properties, required and additionalProperties (not a schema) only; *closed 1 when one has
 * additionalProperties false. */
static k3_status allof_branches(sc *c, const jv *s, const char *path, const jv **br, size_t *nb,
                                int *closed) {
    const jv *all = jv_get(s, "allOf");
    k3_status st;
    if (all->kind != JV_ARRAY || all->n == 0)
        return sc_bad(path, "allOf", "a non-empty array of schemas");
    if (all->n > 64)
        return sc_unsupported(path, "allOf", "more than 64 branches");
    if ((st = sc_alone(s, "allOf", path, "with sibling keywords")))
        return st;
    for (*nb = 0; *nb < all->n; ++*nb) {
        const jv *x = &all->items[*nb], *ref;
        int       t = 0;
        if (x->kind == JV_OBJECT && (ref = jv_get(x, "$ref")) && (st = sc_resolve(c, ref, path, &x)))
            return st;
        if (x->kind != JV_OBJECT || sc_types_of(x, path, &t) || (t && t != T_OBJ))
            return sc_unsupported(path, "allOf", "a branch that is not an object schema");
        if (jv_get(x, "$id"))
            return sc_unsupported(path, "$id", "below the root (a $ref under it would name its own $defs)");
        for (size_t k = 0; k < x->n; k++)
            if (!sc_annotation(x->keys[k].s) && strcmp(x->keys[k].s, "type") &&
                strcmp(x->keys[k].s, "properties") && strcmp(x->keys[k].s, "required") &&
                strcmp(x->keys[k].s, "additionalProperties"))
                return sc_unsupported(path, "allOf",
                                      "a branch keyword other than properties/required/additionalProperties");
        const jv *ap = jv_get(x, "additionalProperties");
        if (ap && ap->kind == JV_OBJECT)
            return sc_unsupported(path, "allOf", "a branch with an additionalProperties schema");
        *closed |= ap && ap->kind == JV_FALSE;
        br[*nb] = x;
    }
    return K3_OK;
}

/* 1 when schemas x and y are the same JSON (members in any order), else -1. */
static int same_schema(const jv *x, const jv *y) {
    jbuf a = {0}, b = {0};
    jv_dump(x, JV_SORTED_COMPACT, &a);
    jv_dump(y, JV_SORTED_COMPACT, &b);
    int same = a.n == b.n && (!a.n || !memcmp(a.p, b.p, a.n)) ? 1 : -1;
    free(a.p);
    free(b.p);
    return same;
}

/* The merged properties' members, appended to b: each name every closed branch allows, once (a
 * name two branches declare with different schemas is refused). */
static k3_status allof_props(const jv *const *br, size_t nb, const char *path, jbuf *b) {
    k3_status st    = K3_OK;
    int       nprop = 0;
    for (size_t i = 0; i < nb && !st; i++) {
        const jv *l = jv_get(br[i], "properties");
        for (size_t k = 0; l && l->kind == JV_OBJECT && k < l->n && !st; k++) {
            const char *nm   = l->keys[k].s;
            int         dupe = 0;
            for (size_t j = 0; j < i && !dupe; j++) { /* declared before: the same schema, or refused */
                const jv *pj = jv_get(br[j], "properties"), *o = pj ? jv_get(pj, nm) : NULL;
                if (o)
                    dupe = same_schema(o, &l->items[k]);
            }
            if (dupe < 0)
                return sc_unsupported(path, "allOf",
                                      "a property two branches declare with different schemas");
            if (dupe || !allowed(br, nb, nm))
                continue;
            if ((nprop++ && (st = jbuf_add(b, ",", 1))) || (st = jv_dump_str(nm, l->keys[k].n, b)) ||
                (st = jbuf_add(b, ":", 1)))
                break;
            st = jv_dump(&l->items[k], JV_SORTED_COMPACT, b);
        }
    }
    return st;
}

/* The union of the branches' required names, appended to b (one a closed branch excludes:
 * K3_ERR_ARG, no document satisfies it). */
static k3_status allof_required(const jv *const *br, size_t nb, const char *path, jbuf *b) {
    k3_status st   = K3_OK;
    int       nreq = 0;
    for (size_t i = 0; i < nb && !st; i++) {
        const jv *l = jv_get(br[i], "required");
        for (size_t k = 0; l && l->kind == JV_ARRAY && k < l->n && !st; k++) {
            if (l->items[k].kind != JV_STRING)
                continue;
            if (!allowed(br, nb, l->items[k].s))
                return k3_err(K3_ERR_ARG,
                              "json schema: \"allOf\" at %s: required \"%s\" is excluded by a branch's "
                              "additionalProperties false (no document satisfies it)",
                              path, l->items[k].s);
            if (!(nreq++ && (st = jbuf_add(b, ",", 1))))
                st = jv_dump(&l->items[k], JV_SORTED_COMPACT, b);
        }
    }
    return st;
}

/* allOf of object schemas: one object schema, built as JSON text and parsed. A branch with
 * additionalProperties false allows only the names it declares, so a name is kept when every
 * closed branch declares it; a name two branches declare must have the same schema in both;
 * required names are the union (one a closed branch excludes: no document satisfies it). */
static k3_status merge_allof(sc *c, const jv *s, const char *path, const jv **out) {
    const jv   *br[64];
    jbuf        b      = {0};
    int         closed = 0;
    size_t      nb     = 0;
    k3_status   st     = allof_branches(c, s, path, br, &nb, &closed);
    const char *head = "{\"type\":\"object\",\"properties\":{", *mid = "},\"required\":[";
    const char *tail = closed ? "],\"additionalProperties\":false}" : "]}";
    if (st)
        return st;
    if (!(st = jbuf_add(&b, head, strlen(head))) && !(st = allof_props(br, nb, path, &b)) &&
        !(st = jbuf_add(&b, mid, strlen(mid))) && !(st = allof_required(br, nb, path, &b)))
        st = jbuf_add(&b, tail, strlen(tail));
    return sc_owned(c, &b, st, out);
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
    if (a->kind == JV_OBJECT && (r = jv_get(a, "$ref")) && sc_resolve(c, r, "#", &a))
        return 0;
    if (b->kind == JV_OBJECT && (r = jv_get(b, "$ref")) && sc_resolve(c, r, "#", &b))
        return 0;
    const jv *pa = jv_get(a, "properties"), *pb = jv_get(b, "properties");
    for (size_t k = 0; pa && pb && pa->kind == JV_OBJECT && k < pa->n; k++) {
        const jv *name = &pa->keys[k], *va, *vb;
        size_t    na, nb;
        if (!sc_has_name(jv_get(a, "required"), name) || !sc_has_name(jv_get(b, "required"), name) ||
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
        return sc_bad(path, key, "a non-empty array of schemas");
    if ((st = sc_alone(s, key, path, "with sibling keywords (put them in each branch)")))
        return st;
    for (size_t i = 0; !strcmp(key, "oneOf") && i < l->n; i++) /* pairwise disjoint */
        for (size_t j = 0; j < i; j++) {
            int t = sc_schema_types(c, &l->items[i], 0) & sc_schema_types(c, &l->items[j], 0);
            if (t && !(t == T_OBJ && tagged_apart(c, &l->items[i], &l->items[j])))
                return sc_unsupported(path, "oneOf",
                                      "branches that may match the same document (supported: branches of "
                                      "distinct types, or objects told apart by a required property of "
                                      "distinct string constants; anyOf has no such limit)");
        }
    for (size_t i = 0; i < l->n; i++) {
        snprintf(p2, sizeof p2, "%s/%s/%zu", path, key, i);
        if ((st = sc_emit(c, &l->items[i], p2, from, to)))
            return st;
    }
    return K3_OK;
}
/* ---- a schema, its rules, the compile ----------------------------------------------------- */

static k3_status emit_schema(sc *c, const jv *s, const char *path, int from, int to);

/* Schema s from -> to; when that fills the grammar (G_MAX_NODES) or passes its meter, the
 * innermost path is kept for the refusal (sc_finish). */
k3_status sc_emit(sc *c, const jv *s, const char *path, int from, int to) {
    k3_status st = emit_schema(c, s, path, from, to);
    if (st && (c->g->full || (c->g->meter && c->g->meter->refused)) && !c->full_at[0])
        snprintf(c->full_at, sizeof c->full_at, "%s", path);
    return st;
}

/* A call of the any-value rule from -> to. */
static k3_status any_call(sc *c, int from, int to) {
    int       start;
    k3_status st = any_rule(c, &start);
    return st ? st : g_call(c->g, from, start, to);
}

/* A schema of $ref (a call of its target's rule), anyOf, oneOf or allOf (of one schema: it; of
 * objects: merged), which take no sibling keywords but annotations. */
static k3_status emit_combined(sc *c, const jv *s, const char *path, int from, int to) {
    const jv *v;
    k3_status st;
    char      p2[512];
    if ((v = jv_get(s, "$ref"))) {
        const jv *t;
        int       start;
        if ((st = sc_alone(s, "$ref", path, "with sibling keywords")) || (st = sc_resolve(c, v, path, &t)) ||
            (st = rule_of(c, t, path, &start)))
            return st;
        return g_call(c->g, from, start, to);
    }
    if (jv_get(s, "anyOf"))
        return emit_alts(c, s, "anyOf", path, from, to);
    if (jv_get(s, "oneOf"))
        return emit_alts(c, s, "oneOf", path, from, to);
    if ((v = jv_get(s, "allOf")) && v->kind == JV_ARRAY && v->n == 1) { /* the branch itself */
        if ((st = sc_alone(s, "allOf", path, "with sibling keywords")))
            return st;
        snprintf(p2, sizeof p2, "%s/allOf/0", path);
        return sc_emit(c, &v->items[0], p2, from, to);
    }
    const jv *m = NULL;
    sc_sub(p2, sizeof p2, path, "allOf", NULL);
    return (st = merge_allof(c, s, path, &m)) ? st : sc_emit(c, m, p2, from, to);
}

/* The types a schema without "type" is written as: what its keywords imply (0: none, any value). */
static int implied_types(const jv *s) {
    int types = 0;
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
    return types;
}

/* The values of each of the types (T_*) that schema s allows, from -> to. */
static k3_status emit_types(sc *c, const jv *s, const char *path, int types, int from, int to) {
    k3_status st = K3_OK;
    int       nb = (types & T_NUM) && (jv_get(s, "minimum") || jv_get(s, "maximum") ||
                                 jv_get(s, "exclusiveMinimum") || jv_get(s, "exclusiveMaximum"));
    if ((types & T_NULL) && (st = sc_lit(c, from, "null", to)))
        return st;
    if ((types & T_BOOL) && ((st = sc_lit(c, from, "true", to)) || (st = sc_lit(c, from, "false", to))))
        return st;
    if ((types & T_NUM) && jv_get(s, "multipleOf")) /* the multiples, within the bounds */
        st = sc_emit_integer(c, s, path, 1, from, to);
    else if (types & T_NUM)
        st = nb ? sc_emit_number_range(c, s, path, from, to) : sc_emit_number(c, from, to);
    else if (types & T_INT)
        st = sc_emit_integer(c, s, path, 0, from, to);
    if (st || ((types & T_STR) && (st = sc_emit_string(c, s, path, from, to))) ||
        ((types & T_ARR) && (st = sc_emit_array(c, s, path, from, to))) ||
        ((types & T_OBJ) && (st = sc_emit_object(c, s, path, from, to))))
        return st;
    return K3_OK;
}

static k3_status emit_schema(sc *c, const jv *s, const char *path, int from, int to) {
    k3_status st;
    int       types;
    if (s->kind == JV_TRUE)
        return any_call(c, from, to);
    if (s->kind == JV_FALSE)
        return K3_OK;
    if (s->kind != JV_OBJECT)
        return k3_err(K3_ERR_ARG, "json schema: at %s: expected a schema (an object or a boolean)", path);
    for (size_t i = 0; i < s->n; i++)
        if (!sc_annotation(s->keys[i].s) && !sc_keyword(s->keys[i].s))
            return sc_unsupported(path, s->keys[i].s, NULL);
    if (s != c->root && jv_get(s, "$id")) /* a new base: "#/$defs/t" below it means its own $defs */
        return sc_unsupported(path, "$id", "below the root (a $ref under it would name its own $defs)");
    if (jv_get(s, "$ref") || jv_get(s, "anyOf") || jv_get(s, "oneOf") || jv_get(s, "allOf"))
        return emit_combined(c, s, path, from, to);
    if ((st = sc_types_of(s, path, &types)))
        return st;
    if (jv_get(s, "const") || jv_get(s, "enum"))
        return sc_emit_enum(c, s, path, 0, from, to);
    if (!types && !(types = implied_types(s))) /* no type: what the keywords imply, else any value */
        return any_call(c, from, to);
    return emit_types(c, s, path, types, from, to);
}

static uint32_t rule_hash(const jv *s) {
    return (uint32_t)(((uintptr_t)s >> 3) * 2654435761u);
}
static uint32_t rule_hash_at(const void *ctx, int i) {
    return rule_hash(((const sc *)ctx)->rule[i].s);
}

/* The rule of schema s (one per schema: $ref recursion ends there): its start node. It is only
 * registered here; sc_rules_emit writes it, so a chain of 50,000 $refs is a loop, not a recursion
 * 50,000 deep (which overflowed the stack), and finding it is a hash look-up (a scan per call
 * was quadratic in the rules). */
static k3_status rule_of(sc *c, const jv *s, const char *path, int *start) {
    const uint32_t mask = (uint32_t)(c->rhcap - 1); /* no table yet (rhcap 0): no look-up */
    for (uint32_t k = rule_hash(s) & mask; c->rhcap && c->rh[k]; k = (k + 1) & mask)
        if (c->rule[c->rh[k] - 1].s == s)
            return *start = c->rule[c->rh[k] - 1].start, K3_OK;
    sc_rule *r = k3_grow(c->rule, &c->cap_rule, (size_t)c->n_rule + 1, sizeof *r, 16);
    if (!r)
        return g_nomem();
    c->rule = r;
    if (2 * (c->n_rule + 1) > c->rhcap) {
        int      cap = c->rhcap ? c->rhcap * 2 : 64;
        int32_t *h   = g_index_build(cap, c->n_rule, rule_hash_at, c);
        if (!h)
            return g_nomem();
        free(c->rh);
        c->rh    = h;
        c->rhcap = cap;
    }
    int   b = sc_node(c), e = sc_node(c);
    char *p = strdup(path);
    if (e < 0 || !p) {
        free(p);
        return g_nomem();
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
k3_status sc_rules_emit(sc *c) {
    const jv *root = c->root;
    k3_status st   = K3_OK;
    while (!st && c->n_done < c->n_rule) {
        sc_rule r = c->rule[c->n_done++]; /* a copy: emit may grow c->rule */
        c->root   = r.root;
        st        = sc_emit(c, r.s, r.path, r.start, r.end);
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
    int s = sc_node(c), d = sc_node(c), e = sc_node(c), a = sc_node(c), b = sc_node(c), x = sc_node(c),
        y = sc_node(c);
    k3_status st;
    if (y < 0)
        return g_nomem();
    c->g->node[e].ret = 1;
    if ((st = g_call(c->g, s, c->g->root, d)) || (st = g_eps(c->g, d, e)) ||
        (st = g_special(c->g, d, v->id_close, a)) || (st = sc_lit(c, a, "response", b)) ||
        (st = g_special(c->g, b, v->id_sep, x)) || (st = g_eps(c->g, x, e)) ||
        (st = g_special(c->g, x, v->id_close, y)) || (st = sc_lit(c, y, "message", (a = sc_node(c)))) ||
        (st = g_special(c->g, a, v->id_sep, e)))
        return st;
    c->g->root = s;
    return K3_OK;
}

/* The end of a compile: on success *out gets the grammar, on failure it is freed and *out NULL;
 * the compiler's own state and the parsed schema are freed either way. */
k3_status sc_finish(sc *c, jv *js, k3_status st, k3_grammar **out) {
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
        int             start, b = sc_node(&c), e = sc_node(&c);
        static const jv obj = {.kind = JV_OBJECT};
        if (e < 0) {
            st = g_nomem();
            goto done;
        }
        c.g->node[e].ret = 1;
        c.g->root        = b;
        st               = sc_emit_object(&c, &obj, "#", b, e);
        (void)start;
    } else
        st = rule_of(&c, js, "#", &c.g->root);
    if (!st)
        st = sc_rules_emit(&c);
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
