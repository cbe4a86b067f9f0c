/* gram-tools.c: the K3 tool-call format's grammar (k3-tools.md 1.3; gram-impl.h): the response
 * channel, the tools block, each tool's arguments, string arguments written raw. */
#include "gram-impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
        if (!sc_annotation(s->keys[i].s) && !sc_keyword(s->keys[i].s))
            return sc_unsupported(path, s->keys[i].s, NULL);
    static const char *const comb[] = {"anyOf", "oneOf", "allOf", "$ref"};
    for (size_t i = 0; i < sizeof comb / sizeof *comb; i++)
        if (jv_get(s, comb[i]))
            return sc_unsupported(path, comb[i], "in a string argument of a tool (written raw)");
    if (jv_get(s, "const") || jv_get(s, "enum"))
        return sc_emit_enum(c, s, path, 1, from, to);
    long mn, mx;
    if ((st = sc_count(s, "minLength", path, 0, &mn)) || (st = sc_count(s, "maxLength", path, -1, &mx)))
        return st;
    int none;
    if (jv_get(s, "pattern") || jv_get(s, "format"))
        return sc_pattern_string(c, jv_get(s, "pattern"), jv_get(s, "format"), path, 1, mn, mx, from, to);
    if ((st = sc_str_lengths(path, mn, mx, &none)) || none)
        return st;
    int cur = from;
    for (long k = 0; k < mn; k++) { /* one raw character: ASCII or a UTF-8 sequence */
        int nx = sc_node(c);
        if ((st = g_byte(c->g, cur, 0x00, 0x7f, nx)) || (st = g_raw_multi(c->g, cur, nx)))
            return st;
        cur = nx;
    }
    if (mx < 0)
        return (st = g_byte(c->g, cur, 0x00, 0x7f, cur)) || (st = g_raw_multi(c->g, cur, cur))
                   ? st
                   : g_eps(c->g, cur, to);
    for (long k = mn; k < mx; k++) {
        int nx = sc_node(c);
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
    int              s = sc_node(c), end = sc_node(c);
    if (end < 0)
        return g_nomem();
    c->g->node[end].ret = 1;
    *start              = s;
    snprintf(path, sizeof path, "tools[%s].parameters", name);
    if (!params || params->kind != JV_OBJECT)
        return g_eps(c->g, s, end);
    c->root         = params;
    const jv *props = jv_get(params, "properties"), *req = jv_get(params, "required");
    int       cur = s;
    if ((st = sc_check_required(path, props && props->kind == JV_OBJECT ? props : NULL, req)))
        return st; /* it was ignored: a call could never hold the undeclared name */
    for (size_t i = 0; props && props->kind == JV_OBJECT && i < props->n; i++) {
        const jv *k = &props->keys[i], *ps = &props->items[i];
        char      p2[400];
        snprintf(p2, sizeof p2, "%s/properties/%.*s", path, (int)(k->n > 100 ? 100 : k->n), k->s);
        int types = 0;
        if (ps->kind == JV_OBJECT && jv_get(ps, "$ref")) {
            const jv *t;
            if ((st = sc_resolve(c, jv_get(ps, "$ref"), p2, &t)))
                return st;
            ps = t;
        }
        if (ps->kind == JV_OBJECT && (jv_get(ps, "const") || jv_get(ps, "enum")))
            types = sc_schema_types(c, ps, 0);
        else if (ps->kind == JV_OBJECT && (st = sc_types_of(ps, p2, &types)))
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
            return sc_unsupported(p2, "type",
                                  "a tool argument needs exactly one type (its XTML type attribute)");
        int nx = sc_node(c), a = sc_node(c), b = sc_node(c), d = sc_node(c), e = sc_node(c), f = sc_node(c);
        if (f < 0)
            return g_nomem();
        if (!sc_has_name(req, k) && (st = g_eps(c->g, cur, nx)))
            return st;
        char tail[64];
        snprintf(tail, sizeof tail, "\" type=\"%s\"", tn);
        if ((st = g_special(c->g, cur, v->id_open, a)) || (st = sc_lit(c, a, "argument key=\"", b)) ||
            (st = attr_lit(c, b, k->s, k->n, d)) || (st = sc_lit(c, d, tail, e)) ||
            (st = g_special(c->g, e, v->id_sep, f)))
            return st;
        int val = sc_node(c), g1 = sc_node(c), g2 = sc_node(c);
        if (types == T_STR ? (st = raw_string(c, ps, p2, f, val)) : (st = sc_emit(c, ps, p2, f, val)))
            return st;
        if ((st = g_special(c->g, val, v->id_close, g1)) || (st = sc_lit(c, g1, "argument", g2)) ||
            (st = g_special(c->g, g2, v->id_sep, nx)))
            return st;
        cur = nx;
    }
    return g_eps(c->g, cur, end);
}

/* The tools a call may name: their names (into the request's JSON) and the rules of their ARGS. */
typedef struct tool_set {
    int          n;
    const char **name;
    size_t      *len;
    int         *args;
} tool_set;

/* The request's tools (only: the one named so, else all) into t, each one's ARGS rule made; none
 * is K3_ERR_ARG. */
static k3_status tools_collect(sc *c, const jv *js, const char *only, tool_set *t) {
    size_t    cap = js->kind == JV_ARRAY ? js->n + 1 : 1;
    k3_status st  = K3_OK;
    t->args       = k3_calloc(cap, sizeof *t->args);
    t->name       = k3_calloc(cap, sizeof *t->name);
    t->len        = k3_calloc(cap, sizeof *t->len);
    if (!t->args || !t->name || !t->len)
        return g_nomem();
    for (size_t i = 0; js->kind == JV_ARRAY && i < js->n && !st; i++) {
        const jv *fn = jv_get(&js->items[i], "function"), *nm = fn ? jv_get(fn, "name") : NULL;
        if (!nm || nm->kind != JV_STRING)
            continue;
        if (only && strcmp(only, nm->s))
            continue;
        t->name[t->n] = nm->s;
        t->len[t->n]  = nm->n;
        st            = tool_args(c, jv_get(fn, "parameters"), nm->s, &t->args[t->n]);
        t->n++;
    }
    if (!st && !t->n)
        st = k3_err(K3_ERR_ARG, "tool calls: %s%s%s names no tool of the request",
                    only ? "tool_choice \"" : "tools", only ? only : "", only ? "\"" : "");
    return st;
}

/* The grammar's root and end around the calls: [text] <|close|>response<|sep|>, then the end
 * (text allowed) or <|open|>tools<|sep|> to *calls; from *after (the tools block closed, or no
 * block) [<|close|>message<|sep|>] and the end. */
static k3_status tools_frame(sc *c, int text, int *calls, int *after) {
    const k3_gvocab *v = c->g->voc;
    k3_status        st;
    int top = sc_node(c), end = sc_node(c), r = sc_node(c), r1 = sc_node(c), r2 = sc_node(c), k0 = sc_node(c);
    if (end < 0)
        return g_nomem();
    c->g->node[end].ret = 1;
    c->g->root          = top;
    /* [text] <|close|>response<|sep|> */
    if ((text && ((st = g_byte(c->g, top, 0x00, 0x7f, top)) || (st = g_raw_multi(c->g, top, top)))) ||
        (st = g_special(c->g, top, v->id_close, r1)) || (st = sc_lit(c, r1, "response", r2)) ||
        (st = g_special(c->g, r2, v->id_sep, r)))
        return st;
    /* after it: the end (text allowed), or the tools block */
    int m1 = sc_node(c), m2 = sc_node(c), z = sc_node(c), t1 = sc_node(c), t2 = sc_node(c);
    if ((text && ((st = g_eps(c->g, r, z)))) || (st = g_special(c->g, r, v->id_open, t1)) ||
        (st = sc_lit(c, t1, "tools", t2)) || (st = g_special(c->g, t2, v->id_sep, k0)) ||
        (st = g_eps(c->g, z, end)) || (st = g_special(c->g, z, v->id_close, m1)) ||
        (st = sc_lit(c, m1, "message", m2)) || (st = g_special(c->g, m2, v->id_sep, end)))
        return st;
    *calls = k0, *after = z;
    return K3_OK;
}

/* Calls 1 to max_calls from cur: <|open|>call tool="NAME" index="K"<|sep|> ARGS <|close|>call<|sep|>,
 * each followed by the next call or <|close|>tools<|sep|> to node z. */
static k3_status tools_calls(sc *c, const tool_set *t, int max_calls, int cur, int z) {
    const k3_gvocab *v  = c->g->voc;
    k3_status        st = K3_OK;
    for (int k = 1; k <= max_calls && !st; k++) {
        int nx = sc_node(c), a = sc_node(c), b = sc_node(c), call_end = sc_node(c), e1 = sc_node(c),
            e2 = sc_node(c);
        char idx[32];
        snprintf(idx, sizeof idx, "\" index=\"%d\"", k);
        if ((st = g_special(c->g, cur, v->id_open, a)) || (st = sc_lit(c, a, "call tool=\"", b)))
            break;
        for (int i = 0; i < t->n && !st; i++) {
            int n1 = sc_node(c), n2 = sc_node(c), n3 = sc_node(c);
            if ((st = attr_lit(c, b, t->name[i], t->len[i], n1)) || (st = sc_lit(c, n1, idx, n2)) ||
                (st = g_special(c->g, n2, v->id_sep, n3)))
                break;
            st = g_call(c->g, n3, t->args[i], call_end);
        }
        if (st || (st = g_special(c->g, call_end, v->id_close, e1)) || (st = sc_lit(c, e1, "call", e2)) ||
            (st = g_special(c->g, e2, v->id_sep, nx)))
            break;
        int c1 = sc_node(c), c2 = sc_node(c); /* after call k: close the block */
        if ((st = g_special(c->g, nx, v->id_close, c1)) || (st = sc_lit(c, c1, "tools", c2)) ||
            (st = g_special(c->g, c2, v->id_sep, z)))
            break;
        cur = nx;
    }
    return st;
}

k3_status k3_grammar_tool_calls(const k3_gvocab *v, const char *tools, const char *only, int max_calls,
                                int text, k3_gmeter *m, k3_grammar **out) {
    sc        c     = {.any = -1};
    jv       *js    = NULL;
    tool_set  t     = {0};
    int       calls = 0, after = 0;
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
    if (!(st = g_new(v, "tool calls", &c.g))) {
        c.g->meter = m;
        if (!(st = tools_collect(&c, js, only, &t)) && !(st = tools_frame(&c, text, &calls, &after)) &&
            !(st = tools_calls(&c, &t, max_calls, calls, after)) && !(st = sc_rules_emit(&c)))
            st = g_finish(c.g);
    }
    free(t.args);
    free(t.name);
    free(t.len);
    return sc_finish(&c, js, st, out);
}
