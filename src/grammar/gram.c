/* gram.c: the grammar automaton, its matcher and token masks (design: gram-impl.h).
 *
 * A matcher's state is a set of configurations (node, frame), closed: only nodes that read
 * something are kept; eps and call edges are followed, a ret node pops its frame (frame 0 is
 * the empty stack: popping it means the document is complete, `accept`). Frames are interned
 * per matcher as (return node, parent), so two equal stacks have one id and the set stays
 * small. Calls deeper than G_MAX_DEPTH are not followed (a bound on $ref recursion).
 */
#include "gram-impl.h"

#include <stdlib.h>
#include <string.h>

#define G_MAX_DEPTH 128
#define OOM_RET                                                                                              \
    do {                                                                                                     \
        w->oom = 1;                                                                                          \
        return;                                                                                              \
    } while (0)
#define G_UNK (-1) /* the unknown stack below a node, when its cache entry is computed */

/* ==== building ======================================================================== */

int g_node_new(k3_grammar *g) {
    if (g->n_node == g->cap_node) {
        int     cap = g->cap_node ? g->cap_node * 2 : 256;
        g_node *n   = realloc(g->node, (size_t)cap * sizeof *n);
        if (!n)
            return -1;
        g->node     = n;
        g->cap_node = cap;
    }
    g->node[g->n_node] = (g_node){0};
    return g->n_node++;
}

k3_status g_edge_add(k3_grammar *g, int from, g_edge e) {
    if (from < 0 || e.to < 0)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    g_node *n = &g->node[from];
    if (n->n == n->cap) {
        int     cap = n->cap ? n->cap * 2 : 2;
        g_edge *v   = realloc(n->e, (size_t)cap * sizeof *v);
        if (!v)
            return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
        n->e   = v;
        n->cap = cap;
    }
    n->e[n->n++] = e;
    if (e.kind == GE_BYTE || e.kind == GE_SPECIAL)
        n->reads = 1;
    return K3_OK;
}

k3_status g_byte(k3_grammar *g, int from, int lo, int hi, int to) {
    return g_edge_add(g, from, (g_edge){.kind = GE_BYTE, .lo = (uint8_t)lo, .hi = (uint8_t)hi, .to = to});
}
k3_status g_eps(k3_grammar *g, int from, int to) {
    return g_edge_add(g, from, (g_edge){.kind = GE_EPS, .to = to});
}
k3_status g_call(k3_grammar *g, int from, int start, int to) {
    return g_edge_add(g, from, (g_edge){.kind = GE_CALL, .arg = start, .to = to});
}
k3_status g_special(k3_grammar *g, int from, int32_t id, int to) {
    return g_edge_add(g, from, (g_edge){.kind = GE_SPECIAL, .arg = id, .to = to});
}

k3_status g_lit(k3_grammar *g, int from, const char *s, size_t n, int to) {
    if (n == 0)
        return g_eps(g, from, to);
    for (size_t i = 0; i < n; i++) {
        int       nx = i + 1 == n ? to : g_node_new(g);
        k3_status st = g_byte(g, from, (uint8_t)s[i], (uint8_t)s[i], nx);
        if (st)
            return st;
        from = nx;
    }
    return K3_OK;
}

k3_status g_new(const k3_gvocab *v, const char *what, k3_grammar **out) {
    k3_grammar *g = k3_calloc(1, sizeof *g);
    *out          = NULL;
    if (!g)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    g->voc = v;
    if (!(g->lock = k3_malloc(sizeof *g->lock))) {
        free(g);
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    }
    pthread_mutex_init(g->lock, NULL);
    snprintf(g->what, sizeof g->what, "%s", what);
    *out = g;
    return K3_OK;
}

k3_status g_finish(k3_grammar *g) {
    /* live: a ret node, or a node with an edge to a live node (a call: start and return live) */
    for (int i = 0; i < g->n_node; i++)
        g->node[i].live = g->node[i].ret;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < g->n_node; i++) {
            g_node *n = &g->node[i];
            if (n->live)
                continue;
            for (int k = 0; k < n->n && !n->live; k++) {
                const g_edge *e = &n->e[k];
                n->live         = g->node[e->to].live && (e->kind != GE_CALL || g->node[e->arg].live);
            }
            changed |= n->live;
        }
    }
    for (int i = 0; i < g->n_node; i++) { /* drop edges into dead ends: a mask never strands */
        g_node *n = &g->node[i];
        int     k = 0;
        n->reads  = 0;
        for (int j = 0; j < n->n; j++) {
            const g_edge *e = &n->e[j];
            if (g->node[e->to].live && (e->kind != GE_CALL || g->node[e->arg].live)) {
                n->e[k++] = *e;
                n->reads |= e->kind == GE_BYTE || e->kind == GE_SPECIAL;
            }
        }
        n->n = k;
    }
    if (!g->node[g->root].live)
        return k3_err(K3_ERR_ARG, "%s: no document satisfies it (it compiles to nothing)", g->what);
    if (!(g->cache = k3_calloc((size_t)g->n_node, sizeof *g->cache)))
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    return K3_OK;
}

void k3_grammar_free(k3_grammar *g) {
    if (!g)
        return;
    for (int i = 0; i < g->n_node; i++) {
        free(g->node[i].e);
        if (g->cache) {
            free(g->cache[i].acc);
            free(g->cache[i].unc);
        }
    }
    free(g->cache);
    free(g->node);
    pthread_mutex_destroy(g->lock);
    free(g->lock);
    free(g);
}

int32_t k3_grammar_words(const k3_grammar *g) {
    return g->voc->words;
}

int k3_grammar_nodes(const k3_grammar *g) {
    return g ? g->n_node : 0;
}

/* ==== vocabulary ======================================================================== */

static const k3_gvocab *sort_voc; /* qsort has no context argument; guarded by sort_lock */
static pthread_mutex_t  sort_lock = PTHREAD_MUTEX_INITIALIZER;

static int piece_cmp(const void *a, const void *b) {
    int32_t  x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = sort_voc->plen[x], ly = sort_voc->plen[y];
    int      c = memcmp(sort_voc->piece[x], sort_voc->piece[y], lx < ly ? lx : ly);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

k3_status k3_gvocab_new(const k3_tok *t, int32_t n_vocab, int32_t eos_id, k3_gvocab **out) {
    *out = NULL;
    if (!t || n_vocab <= 0)
        return k3_err(K3_ERR_ARG, "grammar vocabulary: no tokenizer or vocab_size %d", (int)n_vocab);
    k3_gvocab *v = k3_calloc(1, sizeof *v);
    if (!v)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    v->n_vocab = n_vocab;
    v->words   = (n_vocab + 63) / 64;
    v->piece   = k3_calloc((size_t)n_vocab, sizeof *v->piece);
    v->plen    = k3_calloc((size_t)n_vocab, sizeof *v->plen);
    v->special = k3_calloc((size_t)n_vocab, 1);
    v->sorted  = k3_calloc((size_t)n_vocab, sizeof *v->sorted);
    v->lcp     = k3_calloc((size_t)n_vocab, sizeof *v->lcp);
    if (!v->piece || !v->plen || !v->special || !v->sorted || !v->lcp) {
        k3_gvocab_free(v);
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    }
    int32_t nt = k3_tok_n_vocab(t);
    for (int32_t id = 0; id < n_vocab && id < nt; id++) {
        size_t      len;
        const char *p = k3_tok_piece(t, id, &len);
        if (!p)
            continue;
        if (k3_tok_is_special(t, id)) {
            v->special[id] = 1;
            continue;
        }
        if (len == 0 || len > 65535)
            continue;
        v->piece[id] = p;
        v->plen[id]  = (uint32_t)len;
        if ((int)len > v->max_len)
            v->max_len = (int)len;
        v->sorted[v->n_sorted++] = id;
    }
    pthread_mutex_lock(&sort_lock);
    sort_voc = v;
    qsort(v->sorted, (size_t)v->n_sorted, sizeof *v->sorted, piece_cmp);
    pthread_mutex_unlock(&sort_lock);
    if (!(v->spiece = k3_calloc((size_t)v->n_sorted + 1, sizeof *v->spiece)) ||
        !(v->splen = k3_calloc((size_t)v->n_sorted + 1, sizeof *v->splen))) {
        k3_gvocab_free(v);
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    }
    for (int32_t i = 0, b = 0; i <= v->n_sorted; i++) {
        int fb = i < v->n_sorted ? (uint8_t)v->piece[v->sorted[i]][0] : 256;
        while (b <= fb)
            v->first[b++] = i;
        if (i < v->n_sorted) {
            v->spiece[i] = v->piece[v->sorted[i]];
            v->splen[i]  = v->plen[v->sorted[i]];
        }
    }
    for (int32_t i = 1; i < v->n_sorted; i++) {
        int32_t  a = v->sorted[i - 1], b = v->sorted[i];
        uint32_t k = 0, m = v->plen[a] < v->plen[b] ? v->plen[a] : v->plen[b];
        while (k < m && v->piece[a][k] == v->piece[b][k])
            k++;
        v->lcp[i] = (uint16_t)k;
    }
    int32_t eom  = k3_tok_special(t, "<|end_of_msg|>");
    v->end_id[0] = eom < n_vocab ? eom : -1;
    v->end_id[1] = eos_id >= 0 && eos_id < n_vocab && eos_id != eom ? eos_id : -1;
    v->id_open   = k3_tok_special(t, "<|open|>");
    v->id_sep    = k3_tok_special(t, "<|sep|>");
    v->id_close  = k3_tok_special(t, "<|close|>");
    *out         = v;
    return K3_OK;
}

void k3_gvocab_free(k3_gvocab *v) {
    if (!v)
        return;
    free(v->piece);
    free(v->plen);
    free(v->special);
    free(v->sorted);
    free(v->lcp);
    free(v->spiece);
    free(v->splen);
    free(v);
}

int32_t k3_gvocab_words(const k3_gvocab *v) {
    return v->words;
}

/* ==== configuration sets ================================================================= */

typedef struct g_cfg {
    int32_t node, frame;
} g_cfg;

typedef struct g_frame {
    int32_t ret, parent, depth;
} g_frame;

typedef struct g_set {
    g_cfg *v;
    int    n, cap;
} g_set;

/* The frames and scratch of one walker (a matcher, or a cache computation). */
typedef struct g_walk {
    const k3_grammar *g;
    g_frame          *fr; /* (n_fr) */
    int               n_fr, cap_fr;
    int32_t          *hash; /* (hcap) frame ids + 1, 0 empty */
    int               hcap;
    g_set             seen; /* closure scratch: every config visited this step */
    g_set             work;
    int               oom;
} g_walk;

static int set_push(g_set *s, int32_t node, int32_t frame) {
    if (s->n == s->cap) {
        int    cap = s->cap ? s->cap * 2 : 16;
        g_cfg *v   = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        s->v   = v;
        s->cap = cap;
    }
    s->v[s->n++] = (g_cfg){node, frame};
    return 0;
}

static uint32_t frame_hash(int32_t ret, int32_t parent) {
    return ((uint32_t)ret * 2654435761u) ^ ((uint32_t)(parent + 2) * 40503u);
}

/* The frame (ret, parent), interned; -2 on out of memory or past G_MAX_DEPTH. */
static int32_t frame_get(g_walk *w, int32_t ret, int32_t parent) {
    int depth = parent >= 0 ? w->fr[parent].depth + 1 : 1;
    if (depth > G_MAX_DEPTH)
        return -2;
    if (2 * (w->n_fr + 1) > w->hcap) {
        int      cap = w->hcap ? w->hcap * 2 : 256;
        int32_t *h   = k3_calloc((size_t)cap, sizeof *h);
        if (!h)
            return w->oom = 1, -2;
        for (int i = 0; i < w->n_fr; i++) {
            uint32_t k = frame_hash(w->fr[i].ret, w->fr[i].parent) & (uint32_t)(cap - 1);
            while (h[k])
                k = (k + 1) & (uint32_t)(cap - 1);
            h[k] = i + 1;
        }
        free(w->hash);
        w->hash = h;
        w->hcap = cap;
    }
    uint32_t k = frame_hash(ret, parent) & (uint32_t)(w->hcap - 1);
    for (; w->hash[k]; k = (k + 1) & (uint32_t)(w->hcap - 1)) {
        const g_frame *f = &w->fr[w->hash[k] - 1];
        if (f->ret == ret && f->parent == parent)
            return w->hash[k] - 1;
    }
    if (w->n_fr == w->cap_fr) {
        int      cap = w->cap_fr ? w->cap_fr * 2 : 64;
        g_frame *f   = realloc(w->fr, (size_t)cap * sizeof *f);
        if (!f)
            return w->oom = 1, -2;
        w->fr     = f;
        w->cap_fr = cap;
    }
    w->fr[w->n_fr] = (g_frame){ret, parent, depth};
    w->hash[k]     = w->n_fr + 1;
    return w->n_fr++;
}

static void walk_free(g_walk *w) {
    free(w->fr);
    free(w->hash);
    free(w->seen.v);
    free(w->work.v);
}

static int seen_has(const g_set *s, int32_t node, int32_t frame) {
    for (int i = 0; i < s->n; i++)
        if (s->v[i].node == node && s->v[i].frame == frame)
            return 1;
    return 0;
}

/* Closes w->work (the configurations just reached) into out: reading nodes are added, eps and
 * calls followed, ret nodes popped. *acc: the empty stack (frame root) was popped; *esc: the
 * unknown stack (G_UNK) was. w->seen must be cleared by the caller once per step. */
static void closure(g_walk *w, g_set *out, int root, int *acc, int *esc) {
    const k3_grammar *g = w->g;
    while (w->work.n) {
        g_cfg c = w->work.v[--w->work.n];
        if (seen_has(&w->seen, c.node, c.frame))
            continue;
        if (set_push(&w->seen, c.node, c.frame))
            OOM_RET;
        const g_node *n = &g->node[c.node];
        if (n->reads && set_push(out, c.node, c.frame))
            OOM_RET;
        if (n->ret) {
            if (c.frame == root)
                *acc = 1;
            else if (c.frame == G_UNK)
                *esc = 1;
            else if (set_push(&w->work, w->fr[c.frame].ret, w->fr[c.frame].parent))
                OOM_RET;
        }
        for (int k = 0; k < n->n; k++) {
            const g_edge *e = &n->e[k];
            if (e->kind == GE_EPS) {
                if (set_push(&w->work, e->to, c.frame))
                    OOM_RET;
            } else if (e->kind == GE_CALL) {
                int32_t f = frame_get(w, e->to, c.frame);
                if (f >= 0 && set_push(&w->work, e->arg, f))
                    OOM_RET;
            }
        }
    }
}

/* out = the closed set after reading byte b (kind GE_BYTE) or special id b (GE_SPECIAL). */
static void step(g_walk *w, const g_cfg *in, int nin, int kind, int32_t b, g_set *out, int root, int *acc,
                 int *esc) {
    out->n    = 0;
    w->seen.n = 0;
    w->work.n = 0;
    *acc = *esc = 0;
    for (int i = 0; i < nin; i++) {
        const g_node *n = &w->g->node[in[i].node];
        for (int k = 0; k < n->n; k++) {
            const g_edge *e = &n->e[k];
            if (e->kind != kind)
                continue;
            if (kind == GE_BYTE ? (b >= e->lo && b <= e->hi) : e->arg == b)
                if (set_push(&w->work, e->to, in[i].frame))
                    OOM_RET;
        }
    }
    closure(w, out, root, acc, esc);
}

/* ==== matcher ============================================================================ */

struct k3_gmatch {
    const k3_grammar *g;
    g_walk            w;
    g_set             cur, nxt, tmp;
    int               accept; /* the document is complete (an end token may follow)  */
    int               ended;  /* an end token was accepted                             */
    g_set            *lv;     /* (max_len + 1) check_sorted's sets per prefix length  */
    uint8_t          *lacc;   /* (max_len + 1) and whether the document was complete  */
};

k3_status k3_gmatch_new(const k3_grammar *g, k3_gmatch **out) {
    *out         = NULL;
    k3_gmatch *m = k3_calloc(1, sizeof *m);
    if (!m)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    m->g         = g;
    m->w.g       = g;
    int32_t root = frame_get(&m->w, -1, G_UNK); /* frame 0: the empty stack */
    int     esc;
    if (root != 0 || set_push(&m->w.work, g->root, 0)) {
        k3_gmatch_free(m);
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    }
    closure(&m->w, &m->cur, 0, &m->accept, &esc);
    if (m->w.oom) {
        k3_gmatch_free(m);
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
    }
    *out = m;
    return K3_OK;
}

void k3_gmatch_free(k3_gmatch *m) {
    if (!m)
        return;
    walk_free(&m->w);
    for (int i = 0; m->lv && i <= m->g->voc->max_len; i++)
        free(m->lv[i].v);
    free(m->lv);
    free(m->lacc);
    free(m->cur.v);
    free(m->nxt.v);
    free(m->tmp.v);
    free(m);
}

int k3_gmatch_complete(const k3_gmatch *m) {
    return m->accept;
}
int k3_gmatch_ended(const k3_gmatch *m) {
    return m->ended;
}

static int is_end(const k3_gvocab *v, int32_t id) {
    return id >= 0 && (id == v->end_id[0] || id == v->end_id[1]);
}

/* Reads bytes b[0..n) from m->cur into m->nxt (swapping through tmp); 1 when the bytes are a
 * valid continuation (*acc: complete after them), 0 otherwise. m->cur is left unchanged. */
static int sim_bytes(k3_gmatch *m, const char *b, size_t n, int *acc) {
    const g_set *from = &m->cur;
    int          a    = m->accept, esc;
    if (n == 0) {
        *acc = a;
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        g_set *to = from == &m->nxt ? &m->tmp : &m->nxt;
        if (from->n == 0)
            return 0;
        step(&m->w, from->v, from->n, GE_BYTE, (uint8_t)b[i], to, 0, &a, &esc);
        if (m->w.oom)
            return 0;
        from = to;
        if (to->n == 0 && !(a && i + 1 == n))
            return 0;
    }
    if (from != &m->nxt) { /* the result lives in tmp: make it nxt */
        g_set t = m->nxt;
        m->nxt  = m->tmp;
        m->tmp  = t;
    }
    *acc = a;
    return 1;
}

static void commit(k3_gmatch *m, int acc) {
    g_set t   = m->cur;
    m->cur    = m->nxt;
    m->nxt    = t;
    m->accept = acc;
}

k3_status k3_gmatch_accept_bytes(k3_gmatch *m, const char *b, size_t n) {
    int acc;
    if (m->ended || !sim_bytes(m, b, n, &acc))
        return k3_err(K3_ERR_ARG, "%s: the output does not continue a valid document here", m->g->what);
    if (n)
        commit(m, acc);
    return K3_OK;
}

/* 1 when id may come next (state unchanged). Fills m->nxt and *acc for commit. */
static int sim_token(k3_gmatch *m, int32_t id, int *acc) {
    const k3_gvocab *v = m->g->voc;
    if (m->ended || id < 0 || id >= v->n_vocab)
        return 0;
    if (is_end(v, id))
        return m->accept;
    if (v->special[id]) {
        int esc;
        *acc = 0;
        step(&m->w, m->cur.v, m->cur.n, GE_SPECIAL, id, &m->nxt, 0, acc, &esc);
        return !m->w.oom && (m->nxt.n > 0 || *acc);
    }
    if (!v->piece[id])
        return 0;
    return sim_bytes(m, v->piece[id], v->plen[id], acc);
}

k3_status k3_gmatch_accept(k3_gmatch *m, int32_t id) {
    int acc = 0;
    if (!sim_token(m, id, &acc))
        return k3_err(K3_ERR_ARG, "%s: token %d does not continue a valid document here", m->g->what,
                      (int)id);
    if (is_end(m->g->voc, id)) {
        m->ended = 1;
        return K3_OK;
    }
    commit(m, acc);
    return K3_OK;
}

int k3_gmatch_allows(k3_gmatch *m, int32_t id) {
    int acc;
    return sim_token(m, id, &acc);
}

/* ==== token masks ======================================================================== */

/* The cache entry of reading node `node`: walk the sorted vocabulary from {(node, G_UNK)},
 * sharing the steps of common prefixes; a token is accepted when a configuration survives its
 * last byte, uncertain when some branch left the rule (popped G_UNK) on the way. */
static k3_status cache_fill(const k3_grammar *g, int node, g_cache *c) {
    const k3_gvocab *v  = g->voc;
    k3_status        st = K3_OK;
    int              D = v->max_len + 1, nunc = 0, capunc = 0, have = 0;
    g_set           *lv  = k3_calloc((size_t)D, sizeof *lv);
    uint8_t         *esc = k3_calloc((size_t)D, 1);
    uint64_t        *acc = k3_calloc((size_t)v->words, sizeof *acc);
    int32_t         *unc = NULL;
    g_walk           w   = {.g = g};
    if (!lv || !esc || !acc || set_push(&lv[0], node, G_UNK))
        goto oom;
    for (int b = 0; b < 256; b++) { /* by first byte: a byte that kills every branch skips its range */
        int32_t lo = v->first[b], hi = v->first[b + 1];
        if (lo == hi)
            continue;
        int a0, e0;
        step(&w, lv[0].v, lv[0].n, GE_BYTE, (uint8_t)b, &lv[1], G_UNK - 1, &a0, &e0);
        if (w.oom)
            goto oom;
        if (lv[1].n == 0 && !e0)
            continue;
        esc[1] = (uint8_t)e0;
        have   = 1;
        for (int32_t i = lo; i < hi; i++) {
            int32_t     id = v->sorted[i];
            const char *p  = v->spiece[i];
            int         L = (int)v->splen[i], d = i == lo ? 1 : v->lcp[i] < have ? v->lcp[i] : have;
            while (d < L && lv[d].n > 0) {
                int a, e;
                step(&w, lv[d].v, lv[d].n, GE_BYTE, (uint8_t)p[d], &lv[d + 1], G_UNK - 1, &a, &e);
                if (w.oom)
                    goto oom;
                esc[d + 1] = esc[d] | (uint8_t)e;
                d++;
            }
            have = d;
            if (d == L && lv[L].n > 0)
                acc[id >> 6] |= 1ull << (id & 63);
            else if (esc[d]) {
                if (nunc == capunc) {
                    capunc      = capunc ? capunc * 2 : 64;
                    int32_t *nu = realloc(unc, (size_t)capunc * sizeof *nu);
                    if (!nu)
                        goto oom;
                    unc = nu;
                }
                unc[nunc++] = id;
            }
        }
    }
    c->unc   = unc;
    c->n_unc = nunc;
    __atomic_store_n(&c->acc, acc, __ATOMIC_RELEASE); /* last: readers check acc without the lock */
    acc = NULL;
    unc = NULL;
    goto done;
oom:
    st = k3_err(K3_ERR_NOMEM, "grammar: out of memory computing a token mask");
done:
    for (int i = 0; lv && i < D; i++)
        free(lv[i].v);
    free(lv);
    free(esc);
    free(acc);
    free(unc);
    walk_free(&w);
    return st;
}

/* Sets the bits of ids[0..n) (ordinary tokens in sorted piece order) that continue m->cur,
 * sharing the steps of common prefixes as cache_fill does; ids already set are skipped. */
static void check_sorted(k3_gmatch *m, const int32_t *ids, int n, uint64_t *bits) {
    const k3_gvocab *v    = m->g->voc;
    const char      *prev = NULL;
    int              have = 0, plen = 0;
    if (!n)
        return;
    if (!m->lv) {
        if (!(m->lv = k3_calloc((size_t)v->max_len + 1, sizeof *m->lv)) ||
            !(m->lacc = k3_calloc((size_t)v->max_len + 1, 1))) {
            m->w.oom = 1;
            return;
        }
    }
    for (int k = 0; k < n; k++) {
        int32_t id = ids[k];
        if (bits[id >> 6] >> (id & 63) & 1)
            continue;
        const char *p = v->piece[id];
        int         L = (int)v->plen[id], d = 0;
        while (prev && d < have && d < L && d < plen && prev[d] == p[d])
            d++;
        /* level d holds the set after p[0..d); level 0 is m->cur itself */
        while (d < L) {
            const g_set *from = d ? &m->lv[d] : &m->cur;
            int          acc, esc;
            if (from->n == 0)
                break;
            step(&m->w, from->v, from->n, GE_BYTE, (uint8_t)p[d], &m->lv[d + 1], 0, &acc, &esc);
            m->lacc[d + 1] = (uint8_t)acc;
            if (m->w.oom)
                return;
            d++;
        }
        have = d;
        prev = p;
        plen = L;
        if (d == L && (m->lv[L].n > 0 || m->lacc[L]))
            bits[id >> 6] |= 1ull << (id & 63);
    }
}

k3_status k3_gmatch_mask(k3_gmatch *m, uint64_t *bits) {
    const k3_grammar *g = m->g;
    const k3_gvocab  *v = g->voc;
    memset(bits, 0, (size_t)v->words * sizeof *bits);
    if (m->ended)
        return K3_OK;
    for (int i = 0; i < m->cur.n; i++) { /* stack-independent part, cached per node */
        int      node = m->cur.v[i].node;
        g_cache *c    = &g->cache[node];
        if (!__atomic_load_n(&c->acc, __ATOMIC_ACQUIRE)) {
            pthread_mutex_lock(g->lock);
            k3_status st = c->acc ? K3_OK : cache_fill(g, node, c);
            pthread_mutex_unlock(g->lock);
            if (st)
                return st;
        }
        const uint64_t *a = c->acc;
        for (int k = 0; k < v->words; k++)
            bits[k] |= a[k];
    }
    for (int i = 0; i < m->cur.n; i++) { /* uncertain tokens: against the whole set */
        const g_cache *c = &g->cache[m->cur.v[i].node];
        check_sorted(m, c->unc, c->n_unc, bits);
        const g_node *n = &g->node[m->cur.v[i].node];
        for (int k = 0; k < n->n; k++)
            if (n->e[k].kind == GE_SPECIAL && n->e[k].arg < v->n_vocab)
                bits[n->e[k].arg >> 6] |= 1ull << (n->e[k].arg & 63);
    }
    if (m->accept)
        for (int k = 0; k < 2; k++)
            if (v->end_id[k] >= 0)
                bits[v->end_id[k] >> 6] |= 1ull << (v->end_id[k] & 63);
    if (m->w.oom)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory computing a token mask");
    return K3_OK;
}
