/* gram-obj.c: objects and arrays for the JSON Schema compiler (gram-impl.h): members in the
 * order the schema declares them, required names, additional members (bounded keys), items,
 * prefixItems, minItems/maxItems (uniqueItems: gram-value.c). */
#include "gram-impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
        st = g_nomem();
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
                    st = sc_unsupported("#", "properties", "too many declared names for additional members");
                    goto done;
                }
                depth[nt]  = depth[t] + 1;
                kid[t][ch] = (int16_t)nt++;
            }
            t = kid[t][ch];
        }
        term[t] = 1;
    }
    int fr[G_FILL_MAX + 1], q = sc_node(c); /* fr[d]: d characters read, off the trie */
    if ((st = g_byte(c->g, from, '"', '"', q)))
        goto done;
    for (int d = 1; d <= G_FILL_MAX; d++)
        fr[d] = sc_node(c);
    for (int d = 1; d <= G_FILL_MAX && !st; d++) {
        for (const char *p = alpha; *p && !st && d < G_FILL_MAX; p++)
            st = g_byte(c->g, fr[d], (uint8_t)*p, (uint8_t)*p, fr[d + 1]);
        if (!st)
            st = g_byte(c->g, fr[d], '"', '"', to);
    }
    for (int t = 0; t < nt; t++)
        id[t] = t ? sc_node(c) : q;
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
const jv *sc_member(const jv *x, const jv *k) {
    for (size_t i = 0; i < x->n; i++)
        if (x->keys[i].n == k->n && !memcmp(x->keys[i].s, k->s, k->n))
            return &x->items[i];
    return NULL;
}

/* 1 when list, a "required" array, holds name (anything else holds nothing: a oneOf's branches
 * are compared (tagged_apart) before each is checked, and a string's n is its length). */
int sc_has_name(const jv *list, const jv *name) {
    for (size_t i = 0; list && list->kind == JV_ARRAY && i < list->n; i++)
        if (list->items[i].kind == JV_STRING && list->items[i].n == name->n &&
            !memcmp(list->items[i].s, name->s, name->n))
            return 1;
    return 0;
}

/* "required": strings that "properties" declares (an object schema's, a tool's parameters'). */
k3_status sc_check_required(const char *path, const jv *props, const jv *req) {
    if (req && req->kind != JV_ARRAY)
        return sc_bad(path, "required", "an array of strings");
    for (size_t i = 0; req && i < req->n; i++) {
        if (req->items[i].kind != JV_STRING)
            return sc_bad(path, "required", "an array of strings");
        if (!props || !jv_get(props, req->items[i].s) || memchr(req->items[i].s, 0, req->items[i].n))
            return sc_unsupported(path, "required", "a required name that \"properties\" does not declare");
    }
    return K3_OK;
}

/* A schema the compile made (a merged allOf, declared required names): b's text parsed into *out,
 * kept until sc_finish; b is freed. st: the status of writing b (not K3_OK: nothing parsed). */
k3_status sc_owned(sc *c, jbuf *b, k3_status st, const jv **out) {
    jv *m = NULL;
    if (!st && !(st = jv_parse(b->p, b->n, &m))) {
        jv **o = k3_grow(c->owned, &c->cap_owned, (size_t)c->n_owned + 1, sizeof *o, 8);
        if (!o)
            st = g_nomem(), jv_free(m);
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
        n += req->items[i].kind == JV_STRING && !(props && sc_member(props, &req->items[i]));
    if (!n)
        return K3_OK;
    st = jbuf_add(&b, "{\"properties\":{", 15);
    for (size_t i = 0; props && i < props->n && !st; i++)
        if (!(i && (st = jbuf_add(&b, ",", 1))) &&
            !(st = jv_dump_str(props->keys[i].s, props->keys[i].n, &b)) && !(st = jbuf_add(&b, ":", 1)))
            st = jv_dump(&props->items[i], JV_COMPACT, &b);
    for (size_t i = 0, k = props ? props->n : 0; i < req->n && !st; i++) {
        const jv *r = &req->items[i];
        if (r->kind != JV_STRING || (props && sc_member(props, r)))
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
    return sc_owned(c, &b, st, out);
}

/* An object schema's properties, required and additionalProperties, the first and last checked
 * for their kind (the writer and the value check read them alike). */
k3_status sc_object_keywords(const jv *s, const char *path, const jv **props, const jv **req,
                             const jv **addl) {
    *props = jv_get(s, "properties");
    *req   = jv_get(s, "required");
    *addl  = jv_get(s, "additionalProperties");
    if (*props && (*props)->kind != JV_OBJECT)
        return sc_bad(path, "properties", "an object");
    if (*addl && (*addl)->kind != JV_TRUE && (*addl)->kind != JV_FALSE && (*addl)->kind != JV_OBJECT)
        return sc_bad(path, "additionalProperties", "a boolean or a schema");
    return K3_OK;
}

k3_status sc_emit_object(sc *c, const jv *s, const char *path, int from, int to) {
    const jv *props, *req, *addl, *full;
    k3_status st;
    char      p2[512];
    if ((st = sc_object_keywords(s, path, &props, &req, &addl)))
        return st;
    if (req && req->kind == JV_ARRAY && (st = declare_required(c, s, &full)))
        return st;
    if (req && req->kind == JV_ARRAY && full) /* JSON Schema: the name must be there, any value addl allows */
        return sc_emit_object(c, full, path, from, to);
    if ((st = sc_check_required(path, props, req)))
        return st;
    int A = sc_node(c), B = sc_node(c); /* A: nothing written yet; B: a member written */
    if ((st = g_byte(c->g, from, '{', '{', A)))
        return st;
    for (size_t i = 0; props && i < props->n; i++) {
        const jv *k  = &props->keys[i];
        int       A2 = sc_node(c), B2 = sc_node(c), K = sc_node(c), V = sc_node(c);
        if (!sc_has_name(req, k) && ((st = g_eps(c->g, A, A2)) || (st = g_eps(c->g, B, B2))))
            return st;
        jbuf kb = {0};
        if ((st = jv_dump_str(k->s, k->n, &kb)))
            return st;
        int com = sc_sep(c, B, ',');
        st      = com < 0 ? g_nomem() : g_lit(c->g, A, kb.p, kb.n, K);
        if (!st)
            st = g_lit(c->g, com, kb.p, kb.n, K);
        free(kb.p);
        int col = st ? -1 : sc_sep(c, K, ':');
        if (st || col < 0)
            return st ? st : g_nomem();
        snprintf(p2, sizeof p2, "%s/properties/%.*s", path, (int)(k->n > 200 ? 200 : k->n), k->s);
        if ((st = sc_emit(c, &props->items[i], p2, col, V)) || (st = g_eps(c->g, V, B2)))
            return st;
        A = A2, B = B2;
    }
    if ((st = g_byte(c->g, A, '}', '}', to)) || (st = g_byte(c->g, B, '}', '}', to)))
        return st;
    if (addl && addl->kind == JV_FALSE)
        return K3_OK;
    /* additional members, at most G_EXTRA_MAX: A -> key:V -> E1, B -> , key:V -> E1,
     * Ek -> , key:V -> Ek+1, Ek -> } (bounded so generation ends) */
    sc_sub(p2, sizeof p2, path, "additionalProperties", NULL);
    const jv *vs  = addl && addl->kind == JV_OBJECT ? addl : NULL;
    int       cur = -1;
    for (int k = 0; k < G_EXTRA_MAX; k++) {
        int K = sc_node(c), V = sc_node(c), ca = sc_sep(c, k ? cur : B, ','), col;
        if (ca < 0 || V < 0)
            return g_nomem();
        if ((!k && (st = extra_key(c, props, A, K))) || (st = extra_key(c, props, ca, K)))
            return st;
        if ((col = sc_sep(c, K, ':')) < 0 || (st = sc_call(c, vs, p2, col, V)) ||
            (st = g_byte(c->g, V, '}', '}', to)))
            return st ? st : g_nomem();
        cur = V;
    }
    return K3_OK;
}

/* ---- arrays --------------------------------------------------------------------------------- */

k3_status sc_emit_array(sc *c, const jv *s, const char *path, int from, int to) {
    const jv *items = jv_get(s, "items"), *pre = jv_get(s, "prefixItems"), *uq = jv_get(s, "uniqueItems");
    long      mn, mx;
    k3_status st;
    char      p2[512];
    if (uq && uq->kind != JV_TRUE && uq->kind != JV_FALSE)
        return sc_bad(path, "uniqueItems", "a boolean");
    if (uq && uq->kind == JV_TRUE)
        return sc_unique_array(c, s, path, from, to);
    if (items && items->kind == JV_ARRAY)
        return sc_unsupported(path, "items", "the array form (use prefixItems)");
    if (items && items->kind != JV_OBJECT && items->kind != JV_TRUE && items->kind != JV_FALSE)
        return sc_bad(path, "items", "a schema");
    if (pre && pre->kind != JV_ARRAY)
        return sc_bad(path, "prefixItems", "an array of schemas");
    if ((st = sc_count(s, "minItems", path, 0, &mn)) || (st = sc_count(s, "maxItems", path, -1, &mx)))
        return st;
    long np = pre ? (long)pre->n : 0;
    if (items && items->kind == JV_FALSE && (mx < 0 || mx > np))
        mx = np;
    if (mx >= 0 && mn > mx)
        return K3_OK; /* no array: nothing (it wrote exactly maxItems, fewer than minItems) */
    long lim = mx >= 0 ? mx : (mn > np ? mn : np);
    if (lim > G_MAX_UNROLL) /* named by what set it: a long prefixItems was blamed on minItems */
        return sc_unsupported(path,
                              lim == np ? "prefixItems"
                              : mx >= 0 ? "maxItems"
                                        : "minItems",
                              "a count above 4096");
    int cur = sc_node(c);
    if ((st = g_byte(c->g, from, '[', '[', cur)))
        return st;
    for (long k = 0; k < lim; k++) {
        if (k >= mn && (st = g_byte(c->g, cur, ']', ']', to)))
            return st;
        int       nx = sc_node(c), at = k ? sc_sep(c, cur, ',') : cur;
        const jv *el = k < np ? &pre->items[k] : items;
        if (k < np)
            snprintf(p2, sizeof p2, "%s/prefixItems/%ld", path, k);
        else
            sc_sub(p2, sizeof p2, path, "items", NULL);
        if (at < 0 || (st = sc_call(c, el, p2, at, nx)))
            return st ? st : g_nomem();
        cur = nx;
    }
    if ((st = g_byte(c->g, cur, ']', ']', to)) || mx >= 0)
        return st;
    sc_sub(p2, sizeof p2, path, "items", NULL);
    if (lim == 0) {
        int one = sc_node(c);
        if ((st = sc_call(c, items, p2, cur, one)) || (st = g_byte(c->g, one, ']', ']', to)))
            return st;
        cur = one;
    }
    int at = sc_sep(c, cur, ',');
    if (at < 0)
        return g_nomem();
    return sc_call(c, items, p2, at, cur);
}
