/* gram-impl.h: the grammar engine's internals (gram.c: automaton, matcher, token masks;
 * gram-re.c: the pattern subset; gram-schema.c and the files it lists at the end of this header:
 * the JSON Schema, JSON object and tool-call compilers).
 *
 * DESIGN
 * A grammar is a recursive transition network over bytes: nodes with edges that read one byte
 * in a range, read one special token (a terminal of its own: the bytes "<|open|>" typed in
 * ordinary text never match it), move without reading (eps), or call a rule (push the return
 * node, jump to the rule's start node). A rule ends at a node marked ret, which pops. The
 * matcher holds a set of configurations (node, frame): the nodes that read something, each
 * with its stack (frames interned, so equal stacks are equal ids). Ambiguity (anyOf branches
 * with a common prefix) is the set having several members.
 *
 * Token masks follow xgrammar's split: for a node n the tokens that are accepted without
 * leaving n's rule do not depend on the stack; they are computed once per node (walking the
 * sorted vocabulary, sharing prefixes) and cached in the smallest of three forms (accepted
 * ids, rejected ids, bitset), with the list of tokens that left the rule (uncertain). A mask
 * is the union of the cached parts of the set's nodes plus the uncertain tokens checked
 * against the whole set.
 *
 * A token that leaves the rule with its last byte is accepted in any context (the caller's
 * return node is live); one that leaves it earlier is uncertain only when its next byte may
 * follow the rule somewhere (g->follow, an over-approximation computed at compile time), so the
 * run-time lists hold tens to hundreds of tokens, not thousands.
 *
 * Both walks step through a lazily built DFA whose states are closed configuration sets
 * (interned; 256 transitions per state, computed on first use): a byte of a vocabulary piece
 * costs one table read once its transition is known. The cache passes share one DFA per
 * grammar (stacks relative to the unknown one below the node), so a node's pass mostly reads
 * transitions earlier passes computed; a matcher keeps its own for the uncertain tokens.
 *
 * A node's first pass is a walk of the vocabulary (inside a string, most of it: ~2 ms on 163,840
 * ids), and a set may hold a hundred new nodes (an anyOf of strings of different maxLength).
 * k3_gmatch_mask_bounded, which the engine's turns use, charges one call at most one walk of the
 * whole vocabulary: a pass begins only while its bound (the trie edges under the first bytes the
 * node's DFA state keeps alive) fits, and a pass or the uncertain tokens' check stops once the
 * DFA transitions it computes (G_STEP_COST each, more over large sets) pass the budget; the DFAs
 * keep them, so the next call goes further. The mask is then not done: the engine's step feeds
 * that turn nothing and the other streams go on.
 */
#pragma once
#include "k3-impl.h"
#include "json.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum g_edge_kind { GE_BYTE = 0, GE_EPS, GE_CALL, GE_SPECIAL };

typedef struct g_edge {
    uint8_t kind;   /* GE_*                                                     */
    uint8_t lo, hi; /* GE_BYTE: the byte range                                  */
    int32_t arg;    /* GE_CALL: the rule's start node; GE_SPECIAL: the token id */
    int32_t to;     /* the next node (GE_CALL: the return node)                 */
} g_edge;

typedef struct g_node {
    g_edge *e; /* (n) edges */
    int     n, cap;
    uint8_t ret;   /* 1: the end of a rule (pops)           */
    uint8_t reads; /* 1: has a GE_BYTE or GE_SPECIAL edge  */
    uint8_t live;  /* productive: an end is reachable        */
} g_node;

/* A per-node mask cache entry (computed under the grammar's lock, at compile time or on first
 * use), stored in whichever form is smallest: the accepted ids, the rejected ids (the mask is
 * their complement), or a bitset. */
enum g_cache_kind { GC_NONE = 0, GC_BITS, GC_ACC, GC_REJ };
typedef struct g_cache {
    uint64_t *bits; /* GC_BITS: (words) the tokens accepted within the node's rule        */
    int32_t  *ids;  /* GC_ACC / GC_REJ: (n_ids) accepted / rejected ids, ascending          */
    int32_t   n_ids;
    int32_t  *unc; /* (n_unc) tokens that leave the rule, in sorted piece order: check them */
    int       n_unc;
    int       kind; /* GC_*; set last (release): readers check it without the lock */
} g_cache;

typedef struct g_pass g_pass; /* gram.c: the cache passes' shared DFA and scratch */

struct k3_gvocab {
    int32_t      n_vocab;    /* mask width (the model's vocab_size)                  */
    int32_t      words;      /* (n_vocab + 63) / 64                                   */
    int32_t      n_sorted;   /* ordinary tokens with a non-empty piece                */
    int32_t     *sorted;     /* (n_sorted) ids in byte order of their pieces          */
    uint16_t    *lcp;        /* (n_sorted) common prefix with the previous sorted one  */
    const char **spiece;     /* (n_sorted) the pieces in sorted order (into sbytes)        */
    char        *sbytes;     /* the pieces' bytes in sorted order (sequential reads)      */
    uint32_t    *splen;      /* (n_sorted)                                              */
    int32_t      first[257]; /* sorted[first[b] .. first[b+1]) start with byte b   */
    const char **piece;      /* (n_vocab) bytes of each id (NULL: none)              */
    uint32_t    *plen;       /* (n_vocab)                                            */
    uint8_t     *special;    /* (n_vocab) 1: a special id                            */
    int32_t      end_id[2];  /* <|end_of_msg|> and the eos id (-1 when absent)       */
    int32_t      id_open, id_sep, id_close;
    int          max_len;    /* the longest piece                                       */
    int64_t      edges[256]; /* the sorted pieces' trie edges under each first byte: the most
                              * byte steps a walk of the vocabulary takes there             */
    int64_t n_edges;         /* their sum: one whole walk (1.07 million for 163,840 ids)  */
};

/* What one grammar may hold: a schema that would need more is refused (compile names where),
 * so a request of a few KB cannot take gigabytes and minutes (nested pattern repetitions,
 * long maxLength strings, many of them: each is written out). ~100 MB at most. */
#define G_MAX_NODES (1 << 19)
#define G_MAX_EDGES (1 << 21)

struct k3_grammar {
    g_node          *node; /* (n_node) */
    int              n_node, cap_node;
    int              n_edge; /* edges added (G_MAX_EDGES at most)                            */
    int              full;   /* 1: G_MAX_NODES or G_MAX_EDGES was reached (the build failed) */
    int              root;   /* start node of the top rule */
    const k3_gvocab *voc;
    g_cache         *cache; /* (n_node) */
    int32_t         *share; /* (n_node) the node whose cache entry a node uses (itself, or an
                             * equivalent one: g_share) */
    int32_t *sh;            /* (2 * n_sh) node, representative pairs recorded while building */
    int      n_sh, cap_sh;
    int32_t *rule_of;           /* (n_node) the rule a node belongs to (-1: none, or several) */
    uint64_t (*first)[4];       /* (rules) the bytes a rule may start with                     */
    uint64_t (*follow)[4];      /* (rules) the bytes that may come right after a rule returns  */
    g_pass          *pass;      /* the cache passes' DFA, kept between passes (under lock) */
    pthread_mutex_t *lock;      /* guards cache and fill (a pointer: matchers see the grammar const) */
    char             what[64];  /* "json schema", "json object", "tool calls" */
    int              free_fill; /* 1: g_fill's text is unbounded (a grammar that only checks strings) */
    size_t           built;     /* bytes the compiled automaton holds (g_finish) */
    k3_gmeter       *meter;     /* the compile's meter (NULL: none); a pattern's check grammar shares it */
};

/* The grammar's hash indexes (matcher frames, DFA state sets, schema rules, $defs names) are one
 * kind of table: slot k holds entry + 1 (0: empty), linear probing, cap a power of two, at most
 * half full. g_index_build makes a table of cap slots for entries 0..n-1, hash(ctx, i) giving
 * entry i's hash (masked here); NULL on out of memory. It runs only when a table grows; each
 * site keeps its look-up inline (the mask walk's hot path). */
int32_t *g_index_build(int cap, int n, uint32_t (*hash)(const void *ctx, int i), const void *ctx);

/* ---- building (gram.c) ---- */
k3_status g_nomem(void); /* K3_ERR_NOMEM, "grammar: out of memory" */
/* Counts bytes the compile of g is about to take against its meter (none: 0); -1 when the meter
 * refuses (g->meter->refused set: the compile stops, sc_finish says why). The arrays that grow as
 * it builds (nodes, edges, shares) charge the capacity each doubling adds, before it is taken;
 * g_finish its arrays and the scratch of its walks; a pattern's length counter its table. */
int g_charge(k3_grammar *g, size_t bytes);
/* k3_grow of an array the compile of g builds (its own or a scratch one), the capacity it adds
 * charged to g's meter first (NULL when the meter refuses or out of memory). */
void     *g_grow(k3_grammar *g, void *p, int *cap, size_t need, size_t elem, int first);
int       g_node_new(k3_grammar *g); /* -1 on out of memory or past G_MAX_NODES (g->full) */
k3_status g_edge_add(k3_grammar *g, int from, g_edge e);
k3_status g_byte(k3_grammar *g, int from, int lo, int hi, int to);
k3_status g_eps(k3_grammar *g, int from, int to);
k3_status g_call(k3_grammar *g, int from, int start, int to);
k3_status g_special(k3_grammar *g, int from, int32_t id, int to);
k3_status g_lit(k3_grammar *g, int from, const char *s, size_t n, int to); /* the bytes of s */
k3_status g_new(const k3_gvocab *v, const char *what, k3_grammar **out);
/* Node uses rep's mask cache: the caller guarantees that both accept the same tokens and leave
 * their rule with the same ones, for every piece of the vocabulary (at most voc->max_len bytes),
 * e.g. two positions of an unrolled string more than max_len characters from its bounds. */
k3_status g_share(k3_grammar *g, int node, int rep);
/* After building: marks live nodes, drops edges into dead ones; K3_ERR_ARG when the root can
 * never complete ("compiles to nothing"). */
k3_status g_finish(k3_grammar *g);

/* ---- mask budget (gram.c, k3_gmatch_mask_bounded) ---- */
/* The cache-fill steps (trie edges of the vocabulary walks) one k3_gmatch_mask_bounded call of m
 * may spend: 0 (the default) one whole walk of the vocabulary, -1 no bound (for k3-bench and the
 * tests: the path before the bound). */
void g_match_budget(k3_gmatch *m, int64_t budget);
/* The last call's charge (its fills' bounds and G_STEP_COST per DFA transition computed), the
 * part of it before its last fill that charged anything (begun, stopped, or not begun: a fill
 * begins only while the charge fits the budget, or as the call's first), and the calls the mask
 * under way (or the one the last call set) has taken, the last one counted. A call charges at
 * most the budget (a quarter more for its first fill) and one transition (gram.c cache_fill). */
void g_match_stats(const k3_gmatch *m, int64_t *fill, int64_t *pre, int *calls);

/* ---- pattern subset (gram-re.c) ---- */
/* Emits the JSON-string content (escaped form; raw 1: the characters themselves, as a tool
 * call's string argument is written) of the strings that pattern matches (ECMAScript semantics:
 * unanchored unless ^/$) from node from to node to. On an unsupported construct:
 * K3_ERR_UNSUPPORTED naming it and path. */
k3_status g_pattern(k3_grammar *g, const char *re, size_t n, const char *path, int raw, int from, int to);
/* The strings that all n_re (1 or 2: a pattern and a format's) patterns re[k] (n[k] bytes) match,
 * within minLength mn and maxLength mx (-1: none), in code points: the patterns' automata times
 * each other and a counter (gram-re.c), the reachable part, at most G_LEN_MAX_NODES nodes; past
 * that K3_ERR_UNSUPPORTED naming the bound (or format) and path. mn and mx at most 4096. */
#define G_LEN_MAX_NODES (1 << 17)
k3_status g_pattern_len(k3_grammar *g, const char *const *re, const size_t *n, int n_re, const char *path,
                        int raw, long mn, long mx, int from, int to);
/* Up to G_FILL_MAX JSON string characters (raw 1: raw characters) from -> to: what the grammar
 * writes where the schema leaves free text around a match (an unanchored pattern), bounded so
 * generation ends; any number of them in a grammar with free_fill set (one that only checks a
 * string against a pattern: gram-schema.c pattern_ok). */
#define G_FILL_MAX 32
k3_status g_fill(k3_grammar *g, int raw, int from, int to);
/* One raw UTF-8 character of 2 to 4 bytes (tool-call string values are not escaped). */
k3_status g_raw_multi(k3_grammar *g, int from, int to);
/* One JSON string character (any valid UTF-8 or an escape) from -> to. */
k3_status g_str_char(k3_grammar *g, int from, int to);

/* ---- the JSON Schema compiler's parts ----
 * gram-schema.c: the walk over the schema document: keywords, $ref/$defs rules, anyOf/oneOf/
 *   allOf, the any-value rule, errors, the compile's state (sc) and the public entry points;
 * gram-num.c: integers, numbers within bounds and multipleOf automata;
 * gram-str.c: strings, formats and patterns (and the format checks of enum/const values);
 * gram-obj.c: objects and arrays;
 * gram-value.c: enum and const (a validator of one value, literal tries) and uniqueItems;
 * gram-tools.c: the K3 tool-call format (k3-tools.md 1.3).
 * Each writes the documents it accepts from node `from` to node `to` of c->g; path is the
 * schema's JSON path for messages (K3_ERR_ARG: a malformed keyword, K3_ERR_UNSUPPORTED: one the
 * grammar cannot write). */

#define G_MAX_UNROLL 4096            /* maxLength / maxItems / minItems written out at most this far */
#define G_EXTRA_MAX 4                /* additional members of one object at most */
#define G_INT_MAX 9999999999999999LL /* 16 digits: the bound of an integer without maximum */

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };

/* A rule: schema s, written between start and end (a ret node) once the schema that called it
 * is done (sc_rules_emit), with the root its $refs resolve against and its path. */
typedef struct sc_rule {
    const jv *s, *root;
    int       start, end;
    char     *path;
} sc_rule;

/* A pattern keyword's automaton for the enum/const value checks (sc_pattern_ok). */
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

/* A format keyword's entry (gram-str.c's table): the grammar writes re (a subset of what the
 * format takes, bounded so a model cannot ramble: labels of at most 16 characters, 4-digit
 * duration fields), ok reads a value as ajv-formats 3 (full mode) does (the enum/const checks). */
typedef struct g_format {
    const char *name, *re;
    int (*ok)(const char *s, size_t n);
} g_format;

/* gram-schema.c: the walk and its small pieces */
int       sc_annotation(const char *k); /* a keyword that constrains nothing */
int       sc_keyword(const char *k);    /* a keyword the compiler writes */
k3_status sc_alone(const jv *s, const char *key, const char *path, const char *why);   /* only key */
k3_status sc_bad(const char *path, const char *key, const char *want);                 /* K3_ERR_ARG */
k3_status sc_unsupported(const char *path, const char *key, const char *why);          /* why may be NULL */
void      sc_sub(char *out, size_t n, const char *path, const char *a, const char *b); /* path/a[/b] */
k3_status sc_count(const jv *s, const char *key, const char *path, long def, long *out);
int       sc_node(sc *c);                   /* a new node; -1 on out of memory */
int       sc_sep(sc *c, int from, char ch); /* ch, an optional space: the node after (or -1) */
k3_status sc_lit(sc *c, int from, const char *s, int to);
int       sc_hex_val(char ch); /* a hex digit's value, -1 for another byte */
k3_status sc_emit(sc *c, const jv *s, const char *path, int from, int to);
k3_status sc_call(sc *c, const jv *s, const char *path, int from, int to);
k3_status sc_rules_emit(sc *c);
k3_status sc_finish(sc *c, jv *js, k3_status st, k3_grammar **out);
int       sc_kind_type(const jv *v);
k3_status sc_types_of(const jv *s, const char *path, int *mask);
int       sc_schema_types(sc *c, const jv *s, int depth);
k3_status sc_resolve(sc *c, const jv *ref, const char *path, const jv **out);

/* gram-num.c */
extern const char *const sc_bound_key[4];
k3_status                sc_bound_value(const jv *v, const char *path, const char *key, double *d);
double                   sc_number(const jv *x);
k3_status                sc_emit_integer(sc *c, const jv *s, const char *path, int num, int from, int to);
k3_status                sc_emit_number_range(sc *c, const jv *s, const char *path, int from, int to);
k3_status                sc_emit_number(sc *c, int from, int to);

/* gram-str.c */
k3_status sc_str_lengths(const char *path, long mn, long mx, int *none);
k3_status sc_pattern_string(sc *c, const jv *pat, const jv *fmt, const char *path, int raw, long mn, long mx,
                            int from, int to);
k3_status sc_emit_string(sc *c, const jv *s, const char *path, int from, int to);
k3_status sc_format_of(const jv *fmt, const char *path, const g_format **out);
k3_status sc_pattern_ok(sc *c, const jv *re, const jv *x, const char *path, int *ok);

/* gram-obj.c */
const jv *sc_member(const jv *x, const jv *k);
int       sc_has_name(const jv *list, const jv *name);
k3_status sc_check_required(const char *path, const jv *props, const jv *req);
k3_status sc_owned(sc *c, jbuf *b, k3_status st, const jv **out);
k3_status sc_object_keywords(const jv *s, const char *path, const jv **props, const jv **req,
                             const jv **addl);
k3_status sc_emit_object(sc *c, const jv *s, const char *path, int from, int to);
k3_status sc_emit_array(sc *c, const jv *s, const char *path, int from, int to);

/* gram-value.c */
k3_status sc_emit_enum(sc *c, const jv *s, const char *path, int raw, int from, int to);
k3_status sc_unique_array(sc *c, const jv *s, const char *path, int from, int to);
