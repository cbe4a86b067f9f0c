/* gram.c: the grammar automaton, its matcher and token masks (design: gram-impl.h).
 *
 * A matcher's state is a set of configurations (node, frame), closed: only nodes that read
 * something are kept; eps and call edges are followed, a ret node pops its frame (frame 0 is
 * the empty stack: popping it means the document is complete, `accept`). Frames are interned
 * per matcher as (return node, parent), so two equal stacks have one id and the set stays
 * small. Calls more than G_MAX_DEPTH deeper than a step began are not followed (a bound on
 * calls that read nothing: $ref recursion at a rule's start).
 */
#include "gram-impl.h"

#include <math.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#define G_MAX_DEPTH 128
#define OOM_RET                                                                                              \
    do {                                                                                                     \
        w->oom = 1;                                                                                          \
        return;                                                                                              \
    } while (0)
#define G_UNK (-1) /* the unknown stack below a node, when its cache entry is computed */
/* A mask budget's price of one DFA transition computed (a step() over a small configuration set,
 * about a microsecond; as much again per 2 configurations, so a step over 100 costs what 6,500
 * reads do) against one read of a known one (the unit: a few nanoseconds). */
#define G_STEP_COST 128

static void    fill_free(g_pass *f);
static int     follow_sets(k3_grammar *g);
static g_pass *pass_new(const k3_grammar *g);
static size_t  pass_fixed(const k3_grammar *g);
static size_t  pass_dfa_bytes(const g_pass *f);

/* ==== building ======================================================================== */

k3_status g_nomem(void) {
    return k3_err(K3_ERR_NOMEM, "grammar: out of memory");
}

int g_charge(k3_grammar *g, size_t bytes) {
    k3_gmeter *m = g->meter;
    if (!m)
        return 0;
    if (m->refused)
        return -1;
    m->used += bytes;
    while (m->used > m->granted) {
        if (m->charge(m->ud, K3_GMETER_STEP))
            return m->refused = 1, -1;
        m->granted += K3_GMETER_STEP;
    }
    return 0;
}

void *g_grow(k3_grammar *g, void *p, int *cap, size_t need, size_t elem, int first) {
    size_t c = *cap > 0 ? (size_t)*cap : (size_t)first;
    while (c < need)
        c *= 2; /* k3_grow's doubling (its bound, INT_MAX, is past G_MAX_NODES and G_MAX_EDGES) */
    if (c > (size_t)(*cap > 0 ? *cap : 0) && g_charge(g, (c - (size_t)(*cap > 0 ? *cap : 0)) * elem))
        return NULL;
    return k3_grow(p, cap, need, elem, first);
}

int g_node_new(k3_grammar *g) {
    if (g->n_node >= G_MAX_NODES)
        return g->full = 1, -1;
    g_node *n = g_grow(g, g->node, &g->cap_node, (size_t)g->n_node + 1, sizeof *n, 256);
    if (!n)
        return -1;
    g->node            = n;
    g->node[g->n_node] = (g_node){0};
    return g->n_node++;
}

k3_status g_edge_add(k3_grammar *g, int from, g_edge e) {
    if (from < 0 || e.to < 0)
        return g_nomem();
    if (g->n_edge >= G_MAX_EDGES)
        return g->full = 1, g_nomem();
    g_node *n = &g->node[from];
    g_edge *v = g_grow(g, n->e, &n->cap, (size_t)n->n + 1, sizeof *v, 2);
    if (!v)
        return g_nomem();
    n->e         = v;
    n->e[n->n++] = e;
    g->n_edge++;
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

k3_status g_share(k3_grammar *g, int node, int rep) {
    int32_t *s = g_grow(g, g->sh, &g->cap_sh, (size_t)g->n_sh + 1, 2 * sizeof *s, 64); /* pairs */
    if (!s)
        return g_nomem();
    g->sh                  = s;
    g->sh[2 * g->n_sh]     = node;
    g->sh[2 * g->n_sh + 1] = rep;
    g->n_sh++;
    return K3_OK;
}

k3_status g_new(const k3_gvocab *v, const char *what, k3_grammar **out) {
    k3_grammar *g = k3_calloc(1, sizeof *g);
    *out          = NULL;
    if (!g)
        return g_nomem();
    g->voc = v;
    if (!(g->lock = k3_malloc(sizeof *g->lock))) {
        free(g);
        return g_nomem();
    }
    pthread_mutex_init(g->lock, NULL);
    snprintf(g->what, sizeof g->what, "%s", what);
    *out = g;
    return K3_OK;
}

/* ---- what may follow a rule ----------------------------------------------------------------
 * A cache pass sees a rule's return as the unknown stack popping; the tokens that go on after
 * it are checked at run time against the real stack. Only those whose next byte can follow
 * the rule somewhere need be: follow[rule_of[n]] over-approximates that set for node n's rule
 * (every call is treated as possibly empty; a node of two rules, or of none, gets all bytes). */

typedef struct g_fol {
    k3_grammar *g;
    int32_t    *stamp, *stack; /* (n_node) visit marks, DFS stack */
    int32_t     mark;
    long        budget; /* nodes the walks may still visit; below 0: give up (all bytes) */
} g_fol;

static void bits_or(uint64_t *to, const uint64_t *from, int *changed) {
    for (int k = 0; k < 4; k++)
        if (from[k] & ~to[k]) {
            to[k] |= from[k];
            *changed = 1;
        }
}

static const uint64_t g_all[4] = {~0ull, ~0ull, ~0ull, ~0ull};

/* out |= the bytes read first from node `at`: eps and calls followed (a callee adds its first
 * bytes, and the call may be empty); a return adds at_ret (NULL: nothing). */
static void first_from(g_fol *f, int at, const uint64_t *at_ret, uint64_t *out, int *changed) {
    k3_grammar *g  = f->g;
    int         sp = 0;
    f->mark++;
    f->stack[sp++] = at;
    f->stamp[at]   = f->mark;
    while (sp && --f->budget >= 0) {
        const g_node *n = &g->node[f->stack[--sp]];
        if (n->ret && at_ret)
            bits_or(out, at_ret, changed);
        for (int k = 0; k < n->n; k++) {
            const g_edge *e = &n->e[k];
            if (e->kind == GE_BYTE) {
                for (int b = e->lo; b <= e->hi; b++)
                    if (!(out[b >> 6] >> (b & 63) & 1)) {
                        out[b >> 6] |= 1ull << (b & 63);
                        *changed = 1;
                    }
            } else if (e->kind == GE_CALL)
                bits_or(out, g->rule_of[e->arg] >= 0 ? g->first[g->rule_of[e->arg]] : g_all, changed);
            if ((e->kind == GE_EPS || e->kind == GE_CALL) && f->stamp[e->to] != f->mark) {
                f->stamp[e->to] = f->mark;
                f->stack[sp++]  = e->to;
            }
        }
    }
}

/* g->rule_of, g->first, g->follow (0 on success). */
static int follow_sets(k3_grammar *g) {
    int      nr    = 0;
    g_fol    f     = {.g = g};
    int32_t *start = k3_malloc((size_t)g->n_node * sizeof *start);
    uint8_t *is_st = k3_calloc((size_t)g->n_node, 1);
    g->rule_of     = k3_malloc((size_t)g->n_node * sizeof *g->rule_of);
    f.stamp        = k3_calloc((size_t)g->n_node, sizeof *f.stamp);
    f.stack        = k3_malloc((size_t)g->n_node * sizeof *f.stack);
    if (!start || !is_st || !g->rule_of || !f.stamp || !f.stack)
        goto oom;
    start[nr++]    = g->root;
    is_st[g->root] = 1;
    for (int i = 0; i < g->n_node; i++)
        for (int k = 0; k < g->node[i].n; k++) {
            int32_t a = g->node[i].e[k].arg;
            if (g->node[i].e[k].kind == GE_CALL && !is_st[a]) {
                is_st[a]    = 1;
                start[nr++] = a;
            }
        }
    /* members: what a start reaches without entering a call (-1: none, or several rules) */
    for (int i = 0; i < g->n_node; i++)
        g->rule_of[i] = -2; /* -2: not reached yet */
    for (int r = 0; r < nr; r++) {
        int sp               = 0;
        g->rule_of[start[r]] = g->rule_of[start[r]] == -2 ? r : -1;
        f.stack[sp++]        = start[r];
        while (sp) {
            const g_node *n = &g->node[f.stack[--sp]];
            for (int k = 0; k < n->n; k++) {
                int32_t to = n->e[k].to;
                if (g->rule_of[to] == r || g->rule_of[to] == -1)
                    continue;
                g->rule_of[to] = g->rule_of[to] == -2 ? r : -1;
                f.stack[sp++]  = to;
            }
        }
    }
    for (int i = 0; i < g->n_node; i++)
        if (g->rule_of[i] == -2)
            g->rule_of[i] = -1;
    if (g_charge(g, (size_t)nr * (sizeof *g->first + sizeof *g->follow)))
        goto oom;
    g->first  = k3_calloc((size_t)nr, sizeof *g->first);
    g->follow = k3_calloc((size_t)nr, sizeof *g->follow);
    if (!g->first || !g->follow)
        goto oom;
    g->built = (size_t)nr * (sizeof *g->first + sizeof *g->follow); /* g_finish adds the rest */
    for (int r = 0; r < nr; r++)
        if (g->rule_of[start[r]] != r) { /* a start inside another rule: all bytes both ways */
            memcpy(g->first[r], g_all, sizeof g_all);
            memcpy(g->follow[r], g_all, sizeof g_all);
        }
    /* Fixed points, bounded: a chain of 50,000 $refs took a pass per rule (most of a minute).
     * Past the budget every rule is taken to be followed by any byte: a sound over-approximation
     * (more tokens are checked against the stack at run time, none is wrongly allowed). */
    f.budget = 64L * (g->n_node + g->n_edge) + (1L << 20);
    for (int changed = 1; changed && f.budget >= 0;) { /* the first bytes of each rule */
        changed = 0;
        for (int r = 0; r < nr; r++)
            if (g->rule_of[start[r]] == r)
                first_from(&f, start[r], NULL, g->first[r], &changed);
    }
    for (int changed = 1; changed && f.budget >= 0;) { /* what follows each rule: the bytes after its calls */
        changed = 0;
        for (int i = 0; i < g->n_node; i++)
            for (int k = 0; k < g->node[i].n; k++) {
                const g_edge *e = &g->node[i].e[k];
                int           r = g->rule_of[i];
                if (e->kind == GE_CALL && g->rule_of[e->arg] >= 0)
                    first_from(&f, e->to, r >= 0 ? g->follow[r] : g_all, g->follow[g->rule_of[e->arg]],
                               &changed);
            }
    }
    if (f.budget < 0)
        for (int r = 0; r < nr; r++)
            memcpy(g->follow[r], g_all, sizeof g_all);
    free(start);
    free(is_st);
    free(f.stamp);
    free(f.stack);
    return 0;
oom:
    free(start);
    free(is_st);
    free(f.stamp);
    free(f.stack);
    return -1;
}

/* live: a ret node, or a node with an edge to a live node (a call: start and return live).
 * Backwards from the ret nodes over the reversed edges, so each edge is looked at once or twice
 * (a fixed point over the node list took a pass per node of a long chain: 500,000 nodes, most
 * of a minute). 0, or -1 on out of memory. */
static int live_marks(k3_grammar *g) {
    int      n = g->n_node, sp = 0;
    int32_t *off = k3_calloc((size_t)n + 1, sizeof *off), *pos = k3_malloc((size_t)n * sizeof *pos);
    int32_t *stack = k3_malloc((size_t)n * sizeof *stack), *rf = NULL, *rk = NULL;
    if (!off || !pos || !stack)
        goto oom;
    for (int i = 0; i < n; i++) /* reversed edges, (from node, edge index), grouped by target */
        for (int k = 0; k < g->node[i].n; k++) {
            const g_edge *e = &g->node[i].e[k];
            off[e->to + 1]++;
            if (e->kind == GE_CALL && e->arg != e->to)
                off[e->arg + 1]++;
        }
    for (int i = 0; i < n; i++)
        off[i + 1] += off[i];
    for (int i = 0; i < n; i++) /* pos[t]: where t's next reversed edge goes */
        pos[i] = off[i];
    if (!(rf = k3_malloc(((size_t)off[n] + 1) * sizeof *rf)) ||
        !(rk = k3_malloc(((size_t)off[n] + 1) * sizeof *rk)))
        goto oom;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->node[i].n; k++) {
            const g_edge *e = &g->node[i].e[k];
            int32_t       j = pos[e->to]++;
            rf[j] = i, rk[j] = k;
            if (e->kind == GE_CALL && e->arg != e->to) {
                j     = pos[e->arg]++;
                rf[j] = i, rk[j] = k;
            }
        }
    for (int i = 0; i < n; i++)
        if ((g->node[i].live = g->node[i].ret))
            stack[sp++] = i;
    while (sp) { /* a node turned live: the edges into it may make their sources live */
        int t = stack[--sp];
        for (int32_t j = off[t]; j < off[t + 1]; j++) {
            g_node       *f = &g->node[rf[j]];
            const g_edge *e = &f->e[rk[j]];
            if (!f->live && g->node[e->to].live && (e->kind != GE_CALL || g->node[e->arg].live)) {
                f->live     = 1;
                stack[sp++] = rf[j];
            }
        }
    }
    free(off), free(pos), free(stack), free(rf), free(rk);
    return 0;
oom:
    free(off), free(pos), free(stack), free(rf), free(rk);
    return -1;
}

k3_status g_finish(k3_grammar *g) {
    /* its peak beside the automaton, one step at a time: live_marks' scratch (offsets, positions
     * and a stack per node, 8 bytes a reversed edge), freed; then follow_sets' rule_of and scratch
     * (17 bytes a node; it charges its rules' first and follow sets), the scratch freed; then the
     * rest of what it keeps per node (a mask cache entry, share): 48 bytes a node in all, and the
     * cache passes' scratch (as k3_grammar_bytes counts it) */
    size_t nn   = (size_t)g->n_node,
           keep = nn * (sizeof *g->cache + sizeof *g->share + sizeof *g->rule_of) + pass_fixed(g);
    size_t live = (nn + 1) * 12 + ((size_t)g->n_edge + 1) * 8;
    if (g_charge(g, live > keep ? live : keep))
        return g_nomem();
    if (live_marks(g))
        return g_nomem();
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
    if (follow_sets(g) || !(g->cache = k3_calloc((size_t)g->n_node, sizeof *g->cache)) ||
        !(g->pass = pass_new(g)) || !(g->share = k3_malloc((size_t)g->n_node * sizeof *g->share)) ||
        g_charge(g, pass_dfa_bytes(g->pass))) /* its first state's rows: mapped, not yet touched */
        return g_nomem();
    for (int i = 0; i < g->n_node; i++)
        g->share[i] = i;
    for (int k = 0; k < g->n_sh; k++) /* representatives are their own (the first of a group) */
        g->share[g->sh[2 * k]] = g->share[g->sh[2 * k + 1]];
    size_t b = sizeof *g + (size_t)g->cap_node * sizeof *g->node + (size_t)g->cap_sh * 2 * sizeof *g->sh +
               (size_t)g->n_node * (sizeof *g->cache + sizeof *g->share + sizeof *g->rule_of);
    for (int i = 0; i < g->n_node; i++)
        b += (size_t)g->node[i].cap * sizeof *g->node[i].e;
    g->built += b;
    return K3_OK;
}

void k3_grammar_free(k3_grammar *g) {
    if (!g)
        return;
    for (int i = 0; i < g->n_node; i++) {
        free(g->node[i].e);
        if (g->cache) {
            free(g->cache[i].bits);
            free(g->cache[i].ids);
            free(g->cache[i].unc);
        }
    }
    fill_free(g->pass);
    free(g->rule_of);
    free(g->share);
    free(g->sh);
    free(g->first);
    free(g->follow);
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
        return g_nomem();
    v->n_vocab = n_vocab;
    v->words   = (n_vocab + 63) / 64;
    v->piece   = k3_calloc((size_t)n_vocab, sizeof *v->piece);
    v->plen    = k3_calloc((size_t)n_vocab, sizeof *v->plen);
    v->special = k3_calloc((size_t)n_vocab, 1);
    v->sorted  = k3_calloc((size_t)n_vocab, sizeof *v->sorted);
    v->lcp     = k3_calloc((size_t)n_vocab, sizeof *v->lcp);
    if (!v->piece || !v->plen || !v->special || !v->sorted || !v->lcp) {
        k3_gvocab_free(v);
        return g_nomem();
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
        return g_nomem();
    }
    size_t total = 0;
    for (int32_t i = 0; i < v->n_sorted; i++)
        total += v->plen[v->sorted[i]];
    if (!(v->sbytes = k3_malloc(total + 1))) {
        k3_gvocab_free(v);
        return g_nomem();
    }
    total = 0;
    for (int32_t i = 0, b = 0; i <= v->n_sorted; i++) {
        int fb = i < v->n_sorted ? (uint8_t)v->piece[v->sorted[i]][0] : 256;
        while (b <= fb)
            v->first[b++] = i;
        if (i < v->n_sorted) { /* the bytes in sorted order, one after the other */
            v->splen[i] = v->plen[v->sorted[i]];
            memcpy(v->sbytes + total, v->piece[v->sorted[i]], v->splen[i]);
            v->spiece[i] = v->sbytes + total;
            total += v->splen[i];
        }
    }
    for (int32_t i = 1; i < v->n_sorted; i++) {
        int32_t  a = v->sorted[i - 1], b = v->sorted[i];
        uint32_t k = 0, m = v->plen[a] < v->plen[b] ? v->plen[a] : v->plen[b];
        while (k < m && v->piece[a][k] == v->piece[b][k])
            k++;
        v->lcp[i] = (uint16_t)k;
    }
    for (int b = 0; b < 256; b++) { /* the trie's edges below each first byte (a walk's steps) */
        for (int32_t i = v->first[b]; i < v->first[b + 1]; i++)
            v->edges[b] += v->splen[i] - (i == v->first[b] ? 0 : v->lcp[i]);
        v->n_edges += v->edges[b];
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
    free(v->sbytes);
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
    g_cfg            *stab; /* (scap) seen as a hash set: slot k holds stab[k] when sgen[k] == gen */
    uint32_t         *sgen;
    int               scap, hashed; /* hashed: this step's seen is in stab (past G_SEEN_SCAN) */
    uint32_t          gen;
    g_set             work;
    int               base; /* the shallowest depth this step started from: calls go at most
                             * G_MAX_DEPTH deeper within the step */
    int     oom;
    int64_t steps; /* step()s so far, a unit more per 2 configurations stepped (a DFA transition
                    * computed: what a mask budget counts) */
} g_walk;

static int set_push(g_set *s, int32_t node, int32_t frame) {
    g_cfg *v = k3_grow(s->v, &s->cap, (size_t)s->n + 1, sizeof *v, 16);
    if (!v)
        return -1;
    s->v         = v;
    s->v[s->n++] = (g_cfg){node, frame};
    return 0;
}

static int set_reserve(g_set *s, int n) {
    g_cfg *v = realloc(s->v, (size_t)n * sizeof *v);
    if (!v)
        return -1;
    s->v   = v;
    s->cap = n;
    return 0;
}

int32_t *g_index_build(int cap, int n, uint32_t (*hash)(const void *ctx, int i), const void *ctx) {
    int32_t *h = k3_calloc((size_t)cap, sizeof *h);
    if (!h)
        return NULL;
    for (int i = 0; i < n; i++) {
        uint32_t k = hash(ctx, i) & (uint32_t)(cap - 1);
        while (h[k])
            k = (k + 1) & (uint32_t)(cap - 1);
        h[k] = i + 1;
    }
    return h;
}

static uint32_t frame_hash(int32_t ret, int32_t parent) {
    return ((uint32_t)ret * 2654435761u) ^ ((uint32_t)(parent + 2) * 40503u);
}
static uint32_t frame_hash_at(const void *ctx, int i) {
    const g_frame *f = &((const g_walk *)ctx)->fr[i];
    return frame_hash(f->ret, f->parent);
}

/* The frame (ret, parent), interned; -2 on out of memory or more than G_MAX_DEPTH calls deeper
 * than the step began (a bound on calls that read nothing, e.g. a $ref to # at its start; a
 * document may nest as deep as it likes: a bound on the whole stack cut it at 128, where the
 * mask, computed against an unknown stack, still allowed the next '[': a 500 for a schema
 * forcing 140 levels, and any recursive one the model nested that deep). */
static int32_t frame_get(g_walk *w, int32_t ret, int32_t parent) {
    int depth = parent >= 0 ? w->fr[parent].depth + 1 : 1;
    if (depth > w->base + G_MAX_DEPTH)
        return -2;
    if (2 * (w->n_fr + 1) > w->hcap) {
        int      cap = w->hcap ? w->hcap * 2 : 256;
        int32_t *h   = g_index_build(cap, w->n_fr, frame_hash_at, w);
        if (!h)
            return w->oom = 1, -2;
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
    g_frame *f = k3_grow(w->fr, &w->cap_fr, (size_t)w->n_fr + 1, sizeof *f, 64);
    if (!f)
        return w->oom = 1, -2;
    w->fr          = f;
    w->fr[w->n_fr] = (g_frame){ret, parent, depth};
    w->hash[k]     = w->n_fr + 1;
    return w->n_fr++;
}

static void walk_free(g_walk *w) {
    free(w->fr);
    free(w->hash);
    free(w->seen.v);
    free(w->stab);
    free(w->sgen);
    free(w->work.v);
}

/* Adds (node, frame) to this step's seen set: 1 when it was there already, 0 when added, -1 on
 * out of memory. A scan while the set is small (most steps: a few configurations), a hash set
 * past G_SEEN_SCAN (a closure can reach hundreds of thousands of configurations, e.g. an
 * object of thousands of optional members: a scan per visit was quadratic). */
#define G_SEEN_SCAN 32
static int seen_add(g_walk *w, int32_t node, int32_t frame) {
    if (!w->hashed) {
        for (int i = 0; i < w->seen.n; i++)
            if (w->seen.v[i].node == node && w->seen.v[i].frame == frame)
                return 1;
        if (w->seen.n < G_SEEN_SCAN)
            return set_push(&w->seen, node, frame);
    }
    if (!w->hashed || 2 * (w->seen.n + 1) > w->scap) { /* (re)build from the list */
        int cap = w->scap ? w->scap : 256;
        while (2 * (w->seen.n + 1) > cap)
            cap *= 2;
        if (cap != w->scap) {
            g_cfg    *t  = k3_malloc((size_t)cap * sizeof *t);
            uint32_t *gn = k3_calloc((size_t)cap, sizeof *gn);
            if (!t || !gn) {
                free(t);
                free(gn);
                return -1;
            }
            free(w->stab);
            free(w->sgen);
            w->stab = t, w->sgen = gn, w->scap = cap, w->gen = 0;
        }
        if (++w->gen == 0) {
            memset(w->sgen, 0, (size_t)w->scap * sizeof *w->sgen);
            w->gen = 1;
        }
        for (int i = 0; i < w->seen.n; i++) { /* distinct already */
            uint32_t k = frame_hash(w->seen.v[i].node, w->seen.v[i].frame) & (uint32_t)(w->scap - 1);
            while (w->sgen[k] == w->gen)
                k = (k + 1) & (uint32_t)(w->scap - 1);
            w->sgen[k] = w->gen, w->stab[k] = w->seen.v[i];
        }
        w->hashed = 1;
    }
    uint32_t k = frame_hash(node, frame) & (uint32_t)(w->scap - 1);
    for (; w->sgen[k] == w->gen; k = (k + 1) & (uint32_t)(w->scap - 1))
        if (w->stab[k].node == node && w->stab[k].frame == frame)
            return 1;
    w->sgen[k] = w->gen, w->stab[k] = (g_cfg){node, frame};
    return set_push(&w->seen, node, frame);
}

/* Empties the seen set (the hash set's slots are dropped by a new generation when it is next
 * built). */
static void seen_clear(g_walk *w) {
    w->seen.n = 0;
    w->hashed = 0;
}

/* Closes w->work (the configurations just reached) into out: reading nodes are added, eps and
 * calls followed, ret nodes popped. *acc: the empty stack (frame root) was popped; *esc: the
 * unknown stack (G_UNK) was. w->seen must be cleared (seen_clear) once per step. */
static void closure(g_walk *w, g_set *out, int root, int *acc, int *esc) {
    const k3_grammar *g = w->g;
    while (w->work.n) {
        g_cfg c    = w->work.v[--w->work.n];
        int   seen = seen_add(w, c.node, c.frame);
        if (seen < 0)
            OOM_RET;
        if (seen)
            continue;
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
            } else if (e->kind == GE_CALL) { /* a call in tail position (it returns to a bare ret
                                              * node: a $ref alias, an anyOf branch) pushes nothing:
                                              * chains of them cost no depth */
                const g_node *r = &g->node[e->to];
                int32_t       f = r->ret && !r->n ? c.frame : frame_get(w, e->to, c.frame);
                if (f >= -1 && set_push(&w->work, e->arg, f))
                    OOM_RET;
            }
        }
    }
}

/* out = the closed set after reading byte b (kind GE_BYTE) or special id b (GE_SPECIAL). */
static void step(g_walk *w, const g_cfg *in, int nin, int kind, int32_t b, g_set *out, int root, int *acc,
                 int *esc) {
    w->steps += 1 + nin / 2; /* its work grows with the set it steps */
    out->n = 0;
    seen_clear(w);
    w->work.n = 0;
    *acc = *esc = 0;
    w->base     = INT32_MAX;
    for (int i = 0; i < nin; i++) {
        int d = in[i].frame >= 0 ? w->fr[in[i].frame].depth : 0;
        if (d < w->base)
            w->base = d;
    }
    if (!nin)
        w->base = 0;
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

/* ==== a lazy DFA over closed configuration sets ========================================== */

/* State 0 is the empty set. A transition is -1 (not computed yet) or target << 2 | acc << 1 |
 * esc, with acc and esc those of step() for that byte. */
#define G_DFA_MAX 4096       /* states before a matcher's DFA starts again (1 KB of transitions each) */
#define G_PASS_DFA_MAX 65536 /* the same for a grammar's cache-pass DFA (64 MB)                      */

typedef struct g_dfa {
    g_cfg   *cfg;  /* state s: cfg[off[s] .. off[s + 1]), sorted */
    int32_t *off;  /* (n + 1) */
    int32_t *row;  /* (cap * 256) mapped memory, grown by mremap: a realloc of a heap block
                    * copied it (32 MB: 4-5 ms in one step of a bounded mask) */
    int32_t *hash; /* (hcap) state ids + 1, 0 empty */
    int      n, cap, ncfg, capcfg, hcap;
    int      root;  /* the frame whose pop completes the document */
    int      canon; /* 1: nodes replaced by their g->share representative (a cache
                     * pass only: one piece never tells them apart) */
    const k3_grammar *g;
    g_set             tmp; /* step() output */
} g_dfa;

static void dfa_free(g_dfa *d) {
    free(d->cfg);
    free(d->off);
    if (d->row)
        munmap(d->row, (size_t)d->cap * 256 * sizeof *d->row);
    free(d->hash);
    free(d->tmp.v);
    *d = (g_dfa){.root = d->root, .canon = d->canon, .g = d->g};
}

static int32_t dfa_intern(g_dfa *d, g_cfg *v, int n);

/* Starts d again from the empty set (state 0), keeping its memory (mapped, touched). */
static int dfa_reset(g_dfa *d) {
    d->n = d->ncfg = 0;
    if (d->hash)
        memset(d->hash, 0, (size_t)d->hcap * sizeof *d->hash);
    return dfa_intern(d, NULL, 0) == 0 ? 0 : -1;
}

static int cfg_cmp(const void *a, const void *b) {
    const g_cfg *x = a, *y = b;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    return (x->frame > y->frame) - (x->frame < y->frame);
}

static uint32_t set_hash(const g_cfg *v, int n) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++)
        h = (h ^ ((uint32_t)v[i].node * 2654435761u) ^ ((uint32_t)v[i].frame * 40503u)) * 16777619u;
    return h;
}

static uint32_t set_hash_at(const void *ctx, int s) {
    const g_dfa *d = ctx;
    return set_hash(d->cfg + d->off[s], d->off[s + 1] - d->off[s]);
}

static inline int32_t *dfa_row(const g_dfa *d, int32_t s) {
    return d->row + (size_t)s * 256;
}

/* The id of the set v[0..n) (sorted in place), a new state if unseen; -1 on out of memory. */
static int32_t dfa_intern(g_dfa *d, g_cfg *v, int n) {
    if (d->canon)
        for (int i = 0; i < n; i++)
            v[i].node = d->g->share[v[i].node];
    if (n > 1) {
        qsort(v, (size_t)n, sizeof *v, cfg_cmp);
        int k = 1; /* canonical nodes may repeat */
        for (int i = 1; i < n; i++)
            if (v[i].node != v[k - 1].node || v[i].frame != v[k - 1].frame)
                v[k++] = v[i];
        n = k;
    }
    if (!d->off && !(d->off = k3_calloc(1, sizeof *d->off))) /* off[0] = 0 */
        return -1;
    if (2 * (d->n + 1) >= d->hcap) {
        int      cap = d->hcap ? d->hcap * 2 : 256;
        int32_t *h   = g_index_build(cap, d->n, set_hash_at, d);
        if (!h)
            return -1;
        free(d->hash);
        d->hash = h;
        d->hcap = cap;
    }
    uint32_t k = set_hash(v, n) & (uint32_t)(d->hcap - 1);
    for (; d->hash[k]; k = (k + 1) & (uint32_t)(d->hcap - 1)) {
        int32_t s = d->hash[k] - 1;
        if (d->off[s + 1] - d->off[s] == n && (!n || !memcmp(d->cfg + d->off[s], v, (size_t)n * sizeof *v)))
            return s;
    }
    if (d->n == d->cap) {
        int      cap = d->cap ? d->cap * 2 : 64;
        int32_t *o   = realloc(d->off, (size_t)(cap + 1) * sizeof *o);
        if (!o)
            return -1;
        d->off    = o;
        size_t sz = (size_t)cap * 256 * sizeof *d->row, was = (size_t)d->cap * 256 * sizeof *d->row;
        void  *r = d->row ? mremap(d->row, was, sz, MREMAP_MAYMOVE)
                          : mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (r == MAP_FAILED)
            return -1;
        d->row = r;
        d->cap = cap;
    }
    g_cfg *c = k3_grow(d->cfg, &d->capcfg, (size_t)d->ncfg + (size_t)n, sizeof *c, 256);
    if (!c)
        return -1;
    d->cfg = c;
    if (n)
        memcpy(d->cfg + d->ncfg, v, (size_t)n * sizeof *v);
    d->ncfg += n;
    d->off[d->n + 1] = d->ncfg;
    int32_t *row     = dfa_row(d, d->n); /* bytes no edge reads lead to state 0 */
    memset(row, 0, 256 * sizeof *row);
    for (int i = 0; i < n; i++) {
        const g_node *nd = &d->g->node[v[i].node];
        for (int j = 0; j < nd->n; j++)
            if (nd->e[j].kind == GE_BYTE)
                for (int b = nd->e[j].lo; b <= nd->e[j].hi; b++)
                    row[b] = -1;
    }
    d->hash[k] = d->n + 1;
    return d->n++;
}

/* The transition of state s on byte b (computing it on first use); -1 on out of memory. */
static inline int32_t dfa_next(g_dfa *d, g_walk *w, int32_t s, uint8_t b) {
    int32_t t = dfa_row(d, s)[b];
    if (t >= 0)
        return t;
    int acc, esc;
    step(w, d->cfg + d->off[s], d->off[s + 1] - d->off[s], GE_BYTE, b, &d->tmp, d->root, &acc, &esc);
    int32_t to = w->oom ? -1 : dfa_intern(d, d->tmp.v, d->tmp.n);
    if (to < 0)
        return w->oom = 1, -1;
    t                = to << 2 | acc << 1 | esc;
    dfa_row(d, s)[b] = t;
    return t;
}

/* ==== matcher ============================================================================ */

struct k3_gmatch {
    const k3_grammar *g;
    g_walk            w;
    g_set             cur, nxt, tmp;
    int               accept; /* the document is complete (an end token may follow)  */
    int               ended;  /* an end token was accepted                             */
    g_dfa             dfa;    /* root frame 0: uncertain tokens against the whole set */
    int32_t          *lvs;    /* (max_len + 1) check_sorted's states per prefix length */
    uint8_t          *lacc;   /* (max_len + 1) and whether the document was complete  */
    int64_t           budget; /* k3_gmatch_mask_bounded's fill steps a call (0: one vocabulary
                               * walk; -1: no bound) */
    int64_t st_fill;          /* the last call's charge: fill walks' bounds and transitions  */
    int64_t st_pre;           /* of which before its last fill began                        */
    int     st_calls;         /* the calls of the mask under way (or last set), that one's too */
    int     st_done;          /* the last call set the mask                               */
    /* the mask under way over several calls (mask_some): once the set's entries are filled, its
     * distinct entries (mk_rep) are OR-ed into the mask, then their uncertain tokens checked;
     * mk_merged and mk_checked say how far each got (mk_at: the token of mk_checked's list),
     * mk_bits holds the part done when a call stops */
    uint64_t *mk_bits; /* (words) */
    int32_t  *mk_rep;  /* (mk_n) */
    int       mk_n, mk_cap, mk_merged, mk_checked, mk_at;
    int32_t  *mk_hash; /* (mk_hcap) reps_of's set of entries seen: entry + 1, 0 empty */
    int       mk_hcap;
    int       mk_ready; /* 1: mk_rep is this set's, the merge under way */
};

k3_status k3_gmatch_new(const k3_grammar *g, k3_gmatch **out) {
    *out         = NULL;
    k3_gmatch *m = k3_calloc(1, sizeof *m);
    if (!m)
        return g_nomem();
    m->g     = g;
    m->w.g   = g;
    m->dfa.g = g;
    if (!(m->lvs = k3_calloc((size_t)g->voc->max_len + 1, sizeof *m->lvs)) ||
        !(m->lacc = k3_calloc((size_t)g->voc->max_len + 1, 1))) {
        k3_gmatch_free(m);
        return g_nomem();
    }
    int32_t root = frame_get(&m->w, -1, G_UNK); /* frame 0: the empty stack */
    int     esc;
    if (root != 0 || set_push(&m->w.work, g->root, 0)) {
        k3_gmatch_free(m);
        return g_nomem();
    }
    closure(&m->w, &m->cur, 0, &m->accept, &esc);
    if (m->w.oom) {
        k3_gmatch_free(m);
        return g_nomem();
    }
    *out = m;
    return K3_OK;
}

void k3_gmatch_free(k3_gmatch *m) {
    if (!m)
        return;
    walk_free(&m->w);
    dfa_free(&m->dfa);
    free(m->lvs);
    free(m->lacc);
    free(m->mk_bits);
    free(m->mk_rep);
    free(m->mk_hash);
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
    m->mk_ready = 0; /* a mask under way was of the set before */
    g_set t     = m->cur;
    m->cur      = m->nxt;
    m->nxt      = t;
    m->accept   = acc;
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

struct g_pass {
    g_walk    w;           /* frames relative to the unknown stack G_UNK */
    g_dfa     d;           /* root: none (G_UNK - 1) */
    int32_t  *lvs;         /* (max_len + 1) the state after each prefix length */
    uint8_t  *esc;         /* (max_len + 1) whether the step into a level left the rule */
    uint8_t  *unc;         /* (max_len + 1) whether the token depends on the stack so far */
    uint64_t *acc;         /* (words) scratch bitset */
    int       stopped;     /* the node whose last fill stopped past its budget (-1: none) */
    size_t    cache_bytes; /* the cache entries filled so far (k3_grammar_bytes) */
};

/* The bytes of a grammar's cache passes before any pass: the struct, the per-prefix states and
 * flags, the accepted-ids mask (k3_grammar_bytes; g_finish charges them to the meter). */
static size_t pass_fixed(const k3_grammar *g) {
    return sizeof(g_pass) + (size_t)(g->voc->max_len + 1) * (sizeof(int32_t) + 2) +
           (size_t)g->voc->words * sizeof(uint64_t);
}

/* The grammar's cache-pass state (g_finish). */
static g_pass *pass_new(const k3_grammar *g) {
    int     D = g->voc->max_len + 1;
    g_pass *f = k3_calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->w.g     = g;
    f->d.root  = G_UNK - 1;
    f->d.canon = 1;
    f->d.g     = g;
    f->stopped = -1;
    if (!(f->lvs = k3_calloc((size_t)D, sizeof *f->lvs)) || !(f->esc = k3_calloc((size_t)D, 1)) ||
        !(f->unc = k3_calloc((size_t)D, 1)) || !(f->acc = k3_calloc((size_t)g->voc->words, sizeof *f->acc)) ||
        dfa_intern(&f->d, NULL, 0) != 0) {
        fill_free(f);
        return NULL;
    }
    return f;
}

static void fill_free(g_pass *f) {
    if (!f)
        return;
    walk_free(&f->w);
    dfa_free(&f->d);
    free(f->lvs);
    free(f->esc);
    free(f->unc);
    free(f->acc);
    free(f);
}

static int push_id(int32_t **v, int *n, int *cap, int32_t id) {
    int32_t *nv = k3_grow(*v, cap, (size_t)*n + 1, sizeof *nv, 64);
    if (!nv)
        return -1;
    *v           = nv;
    (*v)[(*n)++] = id;
    return 0;
}

/* c's entry from a walk: acc, the bitset of the nacc ids accepted, in its smallest form (a list
 * of n ids takes 4n bytes, the bitset 8 * words: GC_ACC, GC_REJ or GC_BITS), and unc, the
 * uncertain ids (capacity capunc), which c owns from now on; the bytes are charged to f. The kind
 * is stored last: readers check it without the lock. -1 out of memory (c untouched, unc still
 * the caller's). */
static int cache_store(g_pass *f, const k3_gvocab *v, g_cache *c, const uint64_t *acc, int32_t nacc,
                       int32_t *unc, int nunc, int capunc) {
    int32_t nrej = v->n_vocab - nacc, *ids = NULL, n = 0;
    int     kind = nacc <= 2 * v->words ? GC_ACC : nrej <= 2 * v->words ? GC_REJ : GC_BITS;
    if (kind == GC_BITS) {
        if (!(c->bits = k3_malloc((size_t)v->words * sizeof *c->bits)))
            return -1;
        memcpy(c->bits, acc, (size_t)v->words * sizeof *acc);
    } else {
        if (!(ids = k3_malloc(((size_t)(kind == GC_ACC ? nacc : nrej) + 1) * sizeof *ids)))
            return -1;
        for (int k = 0; k < v->words; k++) { /* the set (or clear) bits, in id order */
            uint64_t x = kind == GC_ACC ? acc[k] : ~acc[k];
            for (; x; x &= x - 1) {
                int32_t id = k * 64 + __builtin_ctzll(x);
                if (id < v->n_vocab)
                    ids[n++] = id;
            }
        }
        c->ids   = ids;
        c->n_ids = n;
    }
    c->unc   = unc;
    c->n_unc = nunc;
    f->cache_bytes += (kind == GC_BITS ? (size_t)v->words * sizeof *c->bits : ((size_t)n + 1) * sizeof *ids) +
                      (size_t)capunc * sizeof *unc;
    __atomic_store_n(&c->kind, kind, __ATOMIC_RELEASE);
    return 0;
}

/* The cache entry of reading node `node`: walk the sorted vocabulary from {(node, G_UNK)}
 * through the grammar's fill DFA, sharing the steps of common prefixes and skipping every
 * first byte that kills all branches; a token is accepted when a configuration survives its
 * last byte, uncertain when some branch left the rule (popped G_UNK) on the way. budget (NULL:
 * none): the walk is made when its bound (the trie edges under the first bytes that stay alive)
 * fits in *budget, or when force is set; otherwise nothing is filled (c->kind stays GC_NONE).
 * *budget is charged the bound and G_STEP_COST for each DFA transition computed; a walk whose
 * transitions pass *budget stops there unfilled, even a forced one (the next try goes on from
 * the transitions it left in the DFA). */
static k3_status cache_fill(const k3_grammar *g, int node, g_cache *c, int64_t *budget, int force) {
    const k3_gvocab *v    = g->voc;
    int              nunc = 0, capunc = 0, have = 0;
    int32_t         *unc = NULL;
    g_pass          *f   = g->pass;
    g_cfg            c0  = {node, G_UNK};
    /* A memo: start again rather than grow without bound; past half its bound already, before
     * a fill that is not the retry of one stopped (whose transitions so far are its progress), so
     * that a stopped fill's retries never lose them and every fill may stop (one that was let
     * run once the DFA passed half its bound took 10 ms in one call) */
    int             restart = f->d.n > G_PASS_DFA_MAX || (f->d.n > G_PASS_DFA_MAX / 2 && node != f->stopped);
    int32_t         s0      = restart && dfa_reset(&f->d) ? -1 : dfa_intern(&f->d, &c0, 1);
    int32_t        *lvs     = f->lvs;
    uint8_t        *eb = f->esc, *u = f->unc;
    uint64_t       *acc  = f->acc;
    int32_t         nacc = 0;
    const uint64_t *fol  = g->rule_of[node] >= 0 ? g->follow[g->rule_of[node]] : g_all;
#define FOL(x) (fol[(uint8_t)(x) >> 6] >> ((uint8_t)(x)&63) & 1)
    if (s0 < 0)
        goto oom;
    /* The charge: the bound, and G_STEP_COST per DFA transition the fill computes (its bound's
     * too). A fill that is not the call's first begins only while its bound and its bound's
     * transitions fit in *budget; its transitions then stop at what is left beside the bound,
     * the first fill's at that or a quarter of *budget, whichever is more (progress whatever
     * its bound). A stopped fill fills nothing; its transitions stay in the DFA, so the next try
     * reads them back and goes further. The check follows each transition computed, so a fill
     * charges at most max(*budget, bound + *budget / 4) and one transition: a step() over one
     * configuration set (G_STEP_COST * (1 + set / 2)), which cannot be split. It was checked
     * after each piece: a piece's transitions (up to max_len) past it. */
    int64_t steps0 = f->w.steps, bound = 0, stop_at = INT64_MAX;
    if (budget && *budget <= 0 && !force)
        return K3_OK;           /* nothing left: not begun, nothing computed */
    if (budget && *budget >= 0) /* the bound's transitions: within *budget (the bound is >= 0) */
        stop_at = steps0 + *budget / G_STEP_COST;
#define PAST_STOP (f->w.steps > stop_at && f->d.n <= G_PASS_DFA_MAX)
    if (budget) { /* the walk's bound: one table read per first byte (the walk below reads them again) */
        for (int b = 0; b < 256; b++) {
            int32_t t = v->edges[b] ? dfa_next(&f->d, &f->w, s0, (uint8_t)b) : 0;
            if (t < 0)
                goto oom;
            bound += t >> 2 || t & 1 ? v->edges[b] : 0;
            if (PAST_STOP)
                break;
        }
        if (PAST_STOP || (bound + G_STEP_COST * (f->w.steps - steps0) > *budget && !force)) {
            f->stopped = PAST_STOP ? node : f->stopped;     /* its retry keeps them */
            *budget -= G_STEP_COST * (f->w.steps - steps0); /* the walk did not begin: its transitions */
            return K3_OK;
        }
        if (*budget >= 0) {
            int64_t room = *budget - bound;
            stop_at      = steps0 + (room > *budget / 4 || !force ? room : *budget / 4) / G_STEP_COST;
            if (PAST_STOP)
                goto stop;
        }
    }
    memset(acc, 0, (size_t)v->words * sizeof *acc);
    lvs[0] = s0;
    eb[0] = u[0] = 0;
    /* Level d: lvs[d] the state after p[0..d), eb[d] whether the step into it left the rule,
     * u[d] whether an earlier step left it with the next byte one that may follow the rule
     * (the token then depends on the stack). A token that leaves the rule with its last byte
     * is accepted in any context: the caller's return node is live. */
    for (int b = 0; b < 256; b++) { /* by first byte: a byte that kills every branch skips its range */
        int32_t lo = v->first[b], hi = v->first[b + 1];
        if (lo == hi)
            continue;
        int32_t t = dfa_next(&f->d, &f->w, s0, (uint8_t)b);
        if (t < 0)
            goto oom;
        if (t >> 2 == 0 && !(t & 1))
            continue;
        lvs[1] = t >> 2;
        eb[1]  = (uint8_t)(t & 1);
        u[1]   = 0;
        have   = 1;
        for (int32_t i = lo; i < hi; i++) {
            const char *p = v->spiece[i];
            int         L = (int)v->splen[i], d = i == lo ? 1 : v->lcp[i] < have ? v->lcp[i] : have;
            while (d < L && lvs[d]) {
                int32_t x = dfa_next(&f->d, &f->w, lvs[d], (uint8_t)p[d]);
                if (x < 0)
                    goto oom;
                /* past the stop (progress: a transition at least), unless the DFA is past its
                 * bound (the next fill starts it again: this one's transitions would be lost) */
                if (PAST_STOP)
                    goto stop;
                u[d + 1]   = u[d] | (eb[d] & (uint8_t)FOL(p[d]));
                lvs[d + 1] = x >> 2;
                eb[d + 1]  = (uint8_t)(x & 1);
                d++;
            }
            have = d;
            if (d == L && (lvs[L] || eb[L])) {
                int32_t id = v->sorted[i];
                acc[id >> 6] |= 1ull << (id & 63);
                nacc++;
            } else if ((u[d] || (d < L && eb[d] && FOL(p[d]))) && push_id(&unc, &nunc, &capunc, v->sorted[i]))
                goto oom;
        }
    }
#undef FOL
    if (cache_store(f, v, c, acc, nacc, unc, nunc, capunc))
        goto oom;
    f->stopped = -1;
    if (budget) /* the bound, and the transitions the walk had to compute (after the fact) */
        *budget -= bound + G_STEP_COST * (f->w.steps - steps0);
    return K3_OK;
stop: /* nothing filled; the transitions stay in the DFA for the next try */
    f->stopped = node;
    free(unc);
    *budget -= bound + G_STEP_COST * (f->w.steps - steps0);
    return K3_OK;
#undef PAST_STOP
oom:
    free(unc);
    return k3_err(K3_ERR_NOMEM, "grammar: out of memory computing a token mask");
}

/* Sets the bits of ids[k0..n) (ordinary tokens in sorted piece order) that continue m->cur,
 * sharing the steps of common prefixes as cache_fill does, through the matcher's DFA; ids
 * already set are skipped. s0: m->cur's state. The charge is mask_some's: *left less one a
 * token checked, against G_STEP_COST a transition m->w computed since steps0. It stops before
 * a token once the charge reaches the budget (unless the call has charged nothing yet), and
 * right after a transition that passes it (the token is checked again by the next call, which
 * reads that transition back): a list charges at most the budget and one transition, where it
 * was checked whole once begun (a list of 533 tokens past the budget on the release's
 * vocabulary, with their transitions). Returns the index it stopped at (n: the list is done,
 * or the DFA ran out of memory: m->w.oom). */
static int check_sorted(k3_gmatch *m, int32_t s0, const int32_t *ids, int k0, int n, uint64_t *bits,
                        int64_t *left, int64_t steps0, int64_t budget) {
    const k3_gvocab *v    = m->g->voc;
    const char      *prev = NULL;
    int              have = 0, plen = 0;
    int32_t         *lvs  = m->lvs;
    uint8_t         *lacc = m->lacc;
    lvs[0]                = s0;
    lacc[0]               = (uint8_t)m->accept;
#define SPENT (G_STEP_COST * (m->w.steps - steps0))
    for (int k = k0; k < n; k++) {
        int32_t id = ids[k];
        if (bits[id >> 6] >> (id & 63) & 1)
            continue;
        if (SPENT >= *left && (m->w.steps != steps0 || *left != budget))
            return k;
        const char *p = v->piece[id];
        int         L = (int)v->plen[id], d = 0;
        while (prev && d < have && d < L && d < plen && prev[d] == p[d])
            d++;
        /* level d holds the state after p[0..d); level 0 is m->cur's */
        while (d < L && lvs[d]) {
            int64_t before = m->w.steps;
            int32_t x      = dfa_next(&m->dfa, &m->w, lvs[d], (uint8_t)p[d]);
            if (x < 0)
                return n;
            if (m->w.steps != before && SPENT > *left)
                return k;
            lvs[d + 1]  = x >> 2;
            lacc[d + 1] = (uint8_t)(x >> 1 & 1);
            d++;
        }
        *left -= 1;
        have = d;
        prev = p;
        plen = L;
        if (d == L && (lvs[L] || lacc[L]))
            bits[id >> 6] |= 1ull << (id & 63);
    }
#undef SPENT
    return n;
}

/* bits |= the cached part of node's entry c. */
static void cache_or(const k3_gvocab *v, const g_cache *c, uint64_t *bits) {
    if (c->kind == GC_BITS)
        for (int k = 0; k < v->words; k++)
            bits[k] |= c->bits[k];
    else if (c->kind == GC_ACC)
        for (int32_t i = 0; i < c->n_ids; i++)
            bits[c->ids[i] >> 6] |= 1ull << (c->ids[i] & 63);
    else { /* the complement of the rejected ids, a word at a time */
        int32_t i = 0;
        for (int k = 0; k < v->words; k++) {
            uint64_t r = 0;
            for (; i < c->n_ids && c->ids[i] >> 6 == k; i++)
                r |= 1ull << (c->ids[i] & 63);
            bits[k] |= ~r;
        }
        if (v->n_vocab & 63)
            bits[v->words - 1] &= (1ull << (v->n_vocab & 63)) - 1;
    }
}

/* Fills node's cache entry if no one has (at compile time or on first use), within *budget
 * (NULL: none; see cache_fill, and force): *filled 1 when the entry is there. */
static k3_status cache_get(const k3_grammar *g, int node, int64_t *budget, int force, int *filled) {
    node       = g->share[node];
    g_cache *c = &g->cache[node];
    *filled    = 1;
    if (__atomic_load_n(&c->kind, __ATOMIC_ACQUIRE))
        return K3_OK;
    pthread_mutex_lock(g->lock);
    k3_status st = c->kind ? K3_OK : cache_fill(g, node, c, budget, force);
    *filled      = c->kind != GC_NONE;
    pthread_mutex_unlock(g->lock);
    return st;
}

k3_status k3_grammar_warm(const k3_grammar *g) {
    for (int i = 0; i < g->n_node; i++)
        if (g->node[i].reads) {
            int       filled;
            k3_status st = cache_get(g, i, NULL, 0, &filled);
            if (st)
                return st;
        }
    return K3_OK;
}

/* The matcher's DFA state of m->cur (starting the DFA again past G_DFA_MAX states, but not while
 * a mask is under way over several calls: its transitions so far are its progress); -1 on out
 * of memory. */
static int32_t cur_state(k3_gmatch *m) {
    if (m->dfa.n > G_DFA_MAX && m->st_done) /* a long output's many stacks: start the DFA again */
        dfa_free(&m->dfa);
    if (!m->dfa.n && dfa_intern(&m->dfa, NULL, 0) != 0)
        return -1;
    if (m->tmp.cap < m->cur.n && set_reserve(&m->tmp, m->cur.n))
        return -1;
    memcpy(m->tmp.v, m->cur.v, (size_t)m->cur.n * sizeof *m->tmp.v);
    return dfa_intern(&m->dfa, m->tmp.v, m->cur.n);
}

void g_match_budget(k3_gmatch *m, int64_t budget) {
    m->budget = budget;
}

void g_match_stats(const k3_gmatch *m, int64_t *fill, int64_t *pre, int *calls) {
    *fill  = m->st_fill;
    *pre   = m->st_pre;
    *calls = m->st_calls;
}

/* The work of OR-ing entry c into a mask, in budget units: a word or an id each (a trie edge of
 * a walk costs more, so one walk's budget merges a few hundred bitsets of 163,840 ids). */
static int64_t merge_cost(const k3_gvocab *v, const g_cache *c) {
    return c->kind == GC_ACC ? c->n_ids : c->kind == GC_REJ ? (int64_t)v->words + c->n_ids : v->words;
}

/* m->mk_rep: the distinct entries of m->cur's nodes, in the set's order (nodes that share one
 * merge it once); -1 on out of memory. */
static int reps_of(k3_gmatch *m) {
    const k3_grammar *g = m->g;
    if (m->mk_cap < m->cur.n) {
        int32_t *r = realloc(m->mk_rep, (size_t)m->cur.n * sizeof *r);
        if (!r)
            return -1;
        m->mk_rep = r, m->mk_cap = m->cur.n;
    }
    if (m->mk_hcap < 2 * m->cur.n) {
        int cap = 64;
        while (cap < 2 * m->cur.n)
            cap *= 2;
        free(m->mk_hash);
        if (!(m->mk_hash = k3_malloc((size_t)cap * sizeof *m->mk_hash)))
            return m->mk_hcap = 0, -1;
        m->mk_hcap = cap;
    }
    memset(m->mk_hash, 0, (size_t)m->mk_hcap * sizeof *m->mk_hash);
    const uint32_t mask = (uint32_t)m->mk_hcap - 1;
    m->mk_n             = 0;
    for (int i = 0; i < m->cur.n; i++) {
        int32_t  r = g->share[m->cur.v[i].node];
        uint32_t k = ((uint32_t)r * 2654435761u) & mask;
        while (m->mk_hash[k] && m->mk_hash[k] != r + 1)
            k = (k + 1) & mask;
        if (!m->mk_hash[k])
            m->mk_hash[k] = r + 1, m->mk_rep[m->mk_n++] = r;
    }
    m->mk_merged = m->mk_checked = m->mk_at = 0;
    m->mk_ready                             = 1;
    return 0;
}

/* A mask is the union of the set's nodes' cache entries and the uncertain tokens checked; an
 * entry is filled on its node's first visit: one walk of the vocabulary (up to the trie's edges;
 * inside a string most of them). A set of many nodes never seen (an anyOf of 100 strings keeps
 * 100 string positions alive) took one walk per node for one token: 214 ms, up to seconds under
 * load, on the engine thread every stream of the server shares. So one call's work is bounded by
 * `budget` (INT64_MAX: no bound), in three phases that each go on at the next call where this
 * one stopped:
 *   - fills: one begins only while the charge so far and its bound fit (cache_fill), or as the
 *     call's first work;
 *   - merges: the set's distinct entries (nodes that share one are merged once) OR-ed into the
 *     mask, each charged merge_cost, begun on the same terms (uncounted, hundreds of bitsets
 *     were a millisecond past the budget); a call that stops keeps its part in m->mk_bits;
 *   - the uncertain tokens' lists: each token charged one and G_STEP_COST per transition of
 *     the matcher's DFA (a step over the whole set); at the budget, before a token or after the
 *     transition that passed it, the call stops (check_sorted), and the next goes on from that
 *     token, reading those transitions back.
 * *done 0: the mask is not set (all zero; what was filled, merged or computed stays for the next
 * call); 1: it is set, the same mask whatever the budget. */
static k3_status mask_some(k3_gmatch *m, uint64_t *bits, int64_t budget, int *done) {
    const k3_grammar *g    = m->g;
    const k3_gvocab  *v    = g->voc;
    int64_t           left = budget, steps0 = m->w.steps;
    memset(bits, 0, (size_t)v->words * sizeof *bits);
    *done = 1;
    if (m->ended)
        return K3_OK;
    if (m->st_done) /* a new mask */
        m->mk_ready = 0;
    m->st_pre   = 0;
    m->st_calls = m->st_done ? 1 : m->st_calls + 1;
    if (!m->mk_ready) {
        for (int i = 0; i < m->cur.n && *done; i++) { /* stack-independent part, cached per node */
            int64_t   before = left;
            k3_status st     = cache_get(g, m->cur.v[i].node, &left, left == budget, done);
            if (st)
                return st;
            if (left != before) /* a fill that charged: begun, stopped or not begun */
                m->st_pre = budget - before;
        }
        if (!*done)
            goto later;
        if (reps_of(m))
            return k3_err(K3_ERR_NOMEM, "grammar: out of memory computing a token mask");
    } else /* merges under way: the last call's part of the mask */
        memcpy(bits, m->mk_bits, (size_t)v->words * sizeof *bits);
    for (; m->mk_merged < m->mk_n; m->mk_merged++) {
        const g_cache *c    = &g->cache[m->mk_rep[m->mk_merged]];
        int64_t        cost = merge_cost(v, c);
        if (cost > left && left != budget)
            goto later;
        cache_or(v, c, bits);
        left -= cost;
    }
    int32_t s0 = -1;
    for (; m->mk_checked < m->mk_n; m->mk_checked++, m->mk_at = 0) { /* uncertain tokens: against the set */
        const g_cache *c = &g->cache[m->mk_rep[m->mk_checked]];
        if (!c->n_unc)
            continue;
        if (s0 < 0 && (s0 = cur_state(m)) < 0)
            return k3_err(K3_ERR_NOMEM, "grammar: out of memory computing a token mask");
        if ((m->mk_at = check_sorted(m, s0, c->unc, m->mk_at, c->n_unc, bits, &left, steps0, budget)) <
            c->n_unc)
            goto later;
    }
    for (int i = 0; i < m->cur.n; i++) {
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
    m->st_fill  = budget - left + G_STEP_COST * (m->w.steps - steps0);
    m->st_done  = 1;
    m->mk_ready = 0;
    return K3_OK;
later: /* the mask stays all zero; the next call goes on from here (a mask of one call, the
        * usual one, never copies its bits) */
    if (m->mk_ready && !m->mk_bits && !(m->mk_bits = k3_malloc((size_t)v->words * sizeof *m->mk_bits)))
        m->w.oom = 1;
    if (m->w.oom)
        return k3_err(K3_ERR_NOMEM, "grammar: out of memory computing a token mask");
    if (m->mk_ready)
        memcpy(m->mk_bits, bits, (size_t)v->words * sizeof *bits);
    memset(bits, 0, (size_t)v->words * sizeof *bits);
    *done      = 0;
    m->st_fill = budget - left + G_STEP_COST * (m->w.steps - steps0);
    m->st_done = 0;
    return K3_OK;
}

k3_status k3_gmatch_mask(k3_gmatch *m, uint64_t *bits) {
    int done;
    return mask_some(m, bits, INT64_MAX, &done);
}

k3_status k3_gmatch_mask_bounded(k3_gmatch *m, uint64_t *bits, int *done) {
    int64_t budget = m->budget < 0 ? INT64_MAX : m->budget ? m->budget : m->g->voc->n_edges;
    return mask_some(m, bits, budget, done);
}

static size_t set_bytes(const g_set *s) {
    return (size_t)s->cap * sizeof *s->v;
}

static size_t dfa_bytes(const g_dfa *d) {
    return (size_t)d->cap * (256 * sizeof *d->row + sizeof *d->off) + (size_t)d->capcfg * sizeof *d->cfg +
           (size_t)d->hcap * sizeof *d->hash + set_bytes(&d->tmp);
}

static size_t pass_dfa_bytes(const g_pass *f) {
    return dfa_bytes(&f->d);
}

static size_t walk_bytes(const g_walk *w) {
    return (size_t)w->cap_fr * sizeof *w->fr + (size_t)w->hcap * sizeof *w->hash +
           (size_t)w->scap * (sizeof *w->stab + sizeof *w->sgen) + set_bytes(&w->seen) + set_bytes(&w->work);
}

size_t k3_grammar_bytes(const k3_grammar *g) {
    if (!g)
        return 0;
    pthread_mutex_lock(g->lock);
    size_t b = g->built;
    if (g->pass)
        b += pass_fixed(g) + g->pass->cache_bytes + dfa_bytes(&g->pass->d) + walk_bytes(&g->pass->w);
    pthread_mutex_unlock(g->lock);
    return b;
}

size_t k3_gmatch_bytes(const k3_gmatch *m) {
    if (!m)
        return 0;
    return sizeof *m + walk_bytes(&m->w) + set_bytes(&m->cur) + set_bytes(&m->nxt) + set_bytes(&m->tmp) +
           dfa_bytes(&m->dfa) + (size_t)(m->g->voc->max_len + 1) * (sizeof *m->lvs + sizeof *m->lacc) +
           (m->mk_bits ? (size_t)m->g->voc->words * sizeof *m->mk_bits : 0) +
           (size_t)m->mk_cap * sizeof *m->mk_rep + (size_t)m->mk_hcap * sizeof *m->mk_hash;
}
