/* test-grammar.c: the grammar engine alone (src/grammar), on k3-nano's vocabulary.
 *
 * Property test: random schemas (objects nested up to 4 deep, arrays, enums, integer ranges,
 * strings with lengths, formats and patterns, anyOf, additionalProperties both ways) and random
 * valid documents written by this file's own generator (not the compiler): every document is
 * accepted byte by byte, in random chunks, as the tokenizer encodes it and under a random
 * tokenisation, with every id in the mask before it is taken and the end of message only at the
 * end. Mutations are rejected: a control byte inserted anywhere at exactly its byte, a deleted
 * closing bracket never completes, a missing required key never completes. Plus: unsupported
 * keywords named with their path, schemas that compile to nothing, recursive $ref, special
 * tokens as terminals, and the masked sampler.
 *
 *   test-grammar --release-vocab          exact masks on the release-size vocabulary (t-grammar.sh)
 *   test-grammar --walk SCHEMAS OUT N     uniform random walks for ajv (t-grammar.sh; walk_out)
 *   test-grammar --walk-tools SCHEMAS OUT N   the same through a tool call's raw string argument
 *   test-grammar --keep CASES OUT         enum values kept or left out, for ajv (t-grammar.sh; keep_out)
 */
#include "test.h"
#include "gram-impl.h" /* g_match_budget, g_match_stats: the mask's work */
#include "k3.h"

#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return n ? (uint32_t)(rng % n) : 0;
}

/* Text is built in a k3_buf (util.c): k3_buf_add and k3_buf_printf, plus this for C strings. */
static void puts_(k3_buf *b, const char *s) {
    k3_buf_add(b, s, strlen(s));
}

/* ---- random schemas and their documents ---- */
enum { S_NULL, S_BOOL, S_INT, S_STR, S_NUM, S_ARR, S_OBJ, S_ANY, S_ENUM, S_FMT, S_PAT, S_N };
typedef struct sn {
    int        t;
    long long  lo, hi;       /* S_INT range; S_STR/S_ARR min/max (hi -1: none) */
    int        n;            /* S_OBJ members; S_ANY branches                    */
    struct sn *kid[4];       /* S_ARR: kid[0]; S_OBJ, S_ANY: n kids             */
    int        req[4], addl; /* S_OBJ */
} sn;

static sn *gen_schema(int depth) {
    sn *s = calloc(1, sizeof *s);
    s->t  = (int)rnd(depth >= 4 ? S_ARR : S_N);
    if (depth >= 4 && s->t == S_ARR)
        s->t = S_INT;
    switch (s->t) {
    case S_INT:
        if (rnd(3)) {
            s->lo = (long long)rnd(2000) - 1000;
            s->hi = s->lo + (long long)rnd(5000);
        } else { /* bounds at and around 0 ([0, 0], [-5, 0], [-1, 1], ...) */
            s->lo = -(long long)rnd(6);
            s->hi = s->lo + (long long)rnd(8);
        }
        break;
    case S_STR:
        s->lo = rnd(3);
        s->hi = rnd(2) ? -1 : s->lo + rnd(6);
        break;
    case S_ARR:
        s->kid[0] = gen_schema(depth + 1);
        s->lo     = rnd(3);
        s->hi     = rnd(2) ? -1 : s->lo + rnd(3);
        break;
    case S_OBJ:
        s->n    = 1 + (int)rnd(4);
        s->addl = (int)rnd(2);
        for (int i = 0; i < s->n; i++)
            s->kid[i] = gen_schema(depth + 1), s->req[i] = (int)rnd(2);
        break;
    case S_ANY: /* anyOf of an integer and a string (distinct first bytes) or an object */
        s->n         = 2;
        s->kid[0]    = calloc(1, sizeof(sn));
        s->kid[0]->t = S_INT, s->kid[0]->lo = 0, s->kid[0]->hi = 99;
        s->kid[1] = depth < 3 ? gen_schema(depth + 1) : calloc(1, sizeof(sn));
        if (depth >= 3)
            s->kid[1]->t = S_NULL;
        break;
    }
    return s;
}

static void free_schema(sn *s) {
    for (int i = 0; i < 4; i++)
        if (s->kid[i])
            free_schema(s->kid[i]);
    free(s);
}

static const char *const names[]  = {"alpha", "b", "c_d", "mu\\u00e9", "x"};  /* as the schema writes them */
static const char *const dnames[] = {"alpha", "b", "c_d", "mu\xc3\xa9", "x"}; /* as documents do */
static const char *const enums[]  = {"\"red\"", "\"green\"", "3", "null", "\"re\""};

static void schema_text(const sn *s, k3_buf *b) {
    switch (s->t) {
    case S_NULL:
        puts_(b, "{\"type\":\"null\"}");
        break;
    case S_BOOL:
        puts_(b, "{\"type\":\"boolean\",\"description\":\"a flag\"}");
        break;
    case S_INT:
        k3_buf_printf(b, "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}", s->lo, s->hi);
        break;
    case S_NUM:
        puts_(b, "{\"type\":\"number\"}");
        break;
    case S_STR:
        k3_buf_printf(b, "{\"type\":\"string\",\"minLength\":%lld", s->lo);
        if (s->hi >= 0)
            k3_buf_printf(b, ",\"maxLength\":%lld", s->hi);
        puts_(b, "}");
        break;
    case S_ENUM:
        puts_(b, "{\"enum\":[");
        for (int i = 0; i < 5; i++)
            k3_buf_printf(b, "%s%s", i ? "," : "", enums[i]);
        puts_(b, "]}");
        break;
    case S_FMT:
        puts_(b, "{\"type\":\"string\",\"format\":\"date\"}");
        break;
    case S_PAT:
        puts_(b, "{\"type\":\"string\",\"pattern\":\"^[a-z]{2,4}-[0-9]+(\\\\.x)?$\"}");
        break;
    case S_ARR:
        puts_(b, "{\"type\":\"array\",\"items\":");
        schema_text(s->kid[0], b);
        k3_buf_printf(b, ",\"minItems\":%lld", s->lo);
        if (s->hi >= 0)
            k3_buf_printf(b, ",\"maxItems\":%lld", s->hi);
        puts_(b, "}");
        break;
    case S_OBJ: {
        puts_(b, "{\"type\":\"object\",\"properties\":{");
        for (int i = 0; i < s->n; i++) {
            k3_buf_printf(b, "%s\"%s\":", i ? "," : "", names[i]);
            schema_text(s->kid[i], b);
        }
        puts_(b, "},\"required\":[");
        for (int i = 0, k = 0; i < s->n; i++)
            if (s->req[i])
                k3_buf_printf(b, "%s\"%s\"", k++ ? "," : "", names[i]);
        k3_buf_printf(b, "],\"additionalProperties\":%s}", s->addl ? "true" : "false");
        break;
    }
    case S_ANY:
        puts_(b, "{\"anyOf\":[");
        schema_text(s->kid[0], b);
        puts_(b, ",");
        schema_text(s->kid[1], b);
        puts_(b, "]}");
        break;
    }
}

static void sepr(k3_buf *b, char c) {
    char t[2] = {c, ' '};
    k3_buf_add(b, t, rnd(2) ? 2 : 1);
}

static const char *const chars[] = {"a",
                                    "Z",
                                    "0",
                                    " ",
                                    "\\n",
                                    "\\\"",
                                    "\\\\",
                                    "\\u00e9",
                                    "\xc3\xa9",
                                    "\xe2\x82\xac",
                                    "\xf0\x9f\x98\x80",
                                    "<|open|>",
                                    "/",
                                    "\\/"};

static void doc_text(const sn *s, k3_buf *b) {
    switch (s->t) {
    case S_NULL:
        puts_(b, "null");
        break;
    case S_BOOL:
        puts_(b, rnd(2) ? "true" : "false");
        break;
    case S_INT:
        k3_buf_printf(b, "%lld",
                      rnd(3)   ? s->lo + (long long)rnd((uint32_t)(s->hi - s->lo + 1)) /* or a bound */
                      : rnd(2) ? s->lo
                               : s->hi);
        break;
    case S_NUM: {
        static const char *const nums[] = {"0", "-0.5", "12.25e3", "7E-2", "-310", "1.0"};
        puts_(b, nums[rnd(6)]);
        break;
    }
    case S_STR: {
        long long n = s->lo + rnd(s->hi >= 0 ? (uint32_t)(s->hi - s->lo + 1) : 8);
        puts_(b, "\"");
        for (long long i = 0; i < n; i++) {
            const char *c = chars[rnd(sizeof chars / sizeof *chars)];
            if (!strcmp(c, "<|open|>"))
                c = "<";
            puts_(b, c);
        }
        puts_(b, "\"");
        break;
    }
    case S_ENUM:
        puts_(b, enums[rnd(5)]);
        break;
    case S_FMT:
        k3_buf_printf(b, "\"%04u-%02u-%02u\"", 1900 + rnd(200), 1 + rnd(12), 1 + rnd(28));
        break;
    case S_PAT: {
        puts_(b, "\"");
        for (uint32_t i = 0, n = 2 + rnd(3); i < n; i++)
            k3_buf_printf(b, "%c", 'a' + rnd(26));
        k3_buf_printf(b, "-%u%s\"", rnd(1000), rnd(2) ? "" : ".x");
        break;
    }
    case S_ARR: {
        long long n = s->lo + rnd(s->hi >= 0 ? (uint32_t)(s->hi - s->lo + 1) : 3);
        puts_(b, "[");
        for (long long i = 0; i < n; i++) {
            if (i)
                sepr(b, ',');
            doc_text(s->kid[0], b);
        }
        puts_(b, "]");
        break;
    }
    case S_OBJ: {
        int k = 0;
        puts_(b, "{");
        for (int i = 0; i < s->n; i++) {
            if (!s->req[i] && rnd(2))
                continue;
            if (k++)
                sepr(b, ',');
            k3_buf_printf(b, "\"%s\"", dnames[i]);
            sepr(b, ':');
            doc_text(s->kid[i], b);
        }
        if (s->addl && rnd(2)) {
            if (k++)
                sepr(b, ',');
            puts_(b, "\"extra_1\":");
            puts_(b, rnd(2) ? "{\"q\":[1,\"\xc3\xa9\",null]}" : "-4.5");
        }
        puts_(b, "}");
        break;
    }
    case S_ANY:
        doc_text(s->kid[rnd(2)], b);
        break;
    }
}

/* ---- driving a matcher ---- */

/* Feeds bytes one at a time: the index of the first rejected byte, or -1 (all taken). */
static long feed_bytes(const k3_grammar *g, const char *d, size_t n, int *complete) {
    k3_gmatch *m;
    if (k3_gmatch_new(g, &m))
        return -2;
    long bad = -1;
    for (size_t i = 0; i < n && bad < 0; i++)
        if (k3_gmatch_accept_bytes(m, d + i, 1))
            bad = (long)i;
    *complete = k3_gmatch_complete(m);
    k3_gmatch_free(m);
    return bad;
}

static int bit(const uint64_t *mask, int32_t id) {
    return (int)(mask[id >> 6] >> (id & 63) & 1);
}

/* Takes ids one by one, each checked in the mask first; 0 when all were in the mask and
 * taken and the document is then complete with the end of message allowed. */
static int feed_ids(const k3_grammar *g, const k3_gvocab *v, const int32_t *ids, size_t n, int32_t eom) {
    k3_gmatch *m;
    uint64_t  *mask = malloc((size_t)k3_gvocab_words(v) * sizeof *mask);
    int        rc   = 0;
    if (k3_gmatch_new(g, &m))
        return free(mask), -1;
    for (size_t i = 0; i < n && !rc; i++) {
        if (k3_gmatch_mask(m, mask) || !bit(mask, ids[i]) || bit(mask, eom) != k3_gmatch_complete(m))
            rc = 1 + (int)i;
        else if (k3_gmatch_accept(m, ids[i]))
            rc = -2;
    }
    if (!rc && (k3_gmatch_mask(m, mask) || !bit(mask, eom) || !k3_gmatch_complete(m)))
        rc = -3;
    k3_gmatch_free(m);
    free(mask);
    return rc;
}

static int64_t walk_budget; /* nonzero: exact_walk's masks by k3_gmatch_mask_bounded with this budget */
static int     walk_more;   /* masks of exact_walk that took more than one call */
static int64_t walk_over;   /* the most a bounded call of exact_walk charged past its allowance */

/* A walk of up to `steps` ids drawn from the mask; at each step every id's bit (or the bits of
 * cand[0..nc) when cand is not NULL) must equal k3_gmatch_allows (the mask is exact: no valid id
 * left out, no invalid one let in). Returns the number of steps where they differ, *nsteps the
 * steps taken. */
static int exact_walk(const k3_grammar *g, int32_t nv, const int32_t *cand, int32_t nc, int steps,
                      int *nsteps) {
    k3_gmatch *m;
    uint64_t  *mask = malloc((size_t)(nv + 63) / 64 * sizeof *mask);
    int        bad  = 0;
    if (!mask || k3_gmatch_new(g, &m))
        return free(mask), 1;
    g_match_budget(m, walk_budget);
    for (int s = 0; s < steps && !k3_gmatch_ended(m); s++) {
        int done = 0, calls = 0;
        while (!done && ++calls < 1000000) {
            if (walk_budget ? k3_gmatch_mask_bounded(m, mask, &done) : (done = 1, k3_gmatch_mask(m, mask)))
                return k3_gmatch_free(m), free(mask), bad + 1;
            int64_t fill, pre, allow = walk_budget + walk_budget / 4;
            int     n_calls;
            g_match_stats(m, &fill, &pre, &n_calls);
            if (walk_budget && fill - allow > walk_over)
                walk_over = fill - allow;
        }
        walk_more += calls > 1;
        int32_t n = 0, pick = -1, diff = 0;
        for (int32_t id = 0; id < nv; id++)
            n += bit(mask, id);
        for (int32_t k = 0; k < (cand ? nc : nv); k++) {
            int32_t id = cand ? cand[k] : k;
            diff += bit(mask, id) != k3_gmatch_allows(m, id);
        }
        bad += diff > 0;
        (*nsteps)++;
        if (!n)
            break;
        for (int32_t id = 0, want = (int32_t)rnd((uint32_t)n); id < nv && pick < 0; id++)
            if (bit(mask, id) && want-- == 0)
                pick = id;
        if (k3_gmatch_accept(m, pick))
            return k3_gmatch_free(m), free(mask), bad + 1;
    }
    k3_gmatch_free(m);
    free(mask);
    return bad;
}

/* exact_walk over each corpus schema (`steps` each), json_object (3 walks of `steps` * 2) and
 * three schemas of long strings (2 walks of `steps` * 3 each);
 * the steps that differ, *nsch the grammars walked, *nsteps the steps. */
static int exact_corpus(const k3_gvocab *v, int32_t nv, const int32_t *cand, int32_t nc, int steps, int *nsch,
                        int *nsteps) {
    /* the corpus, and the uniform walks' schemas (Unicode classes, number ranges, enum tries) */
    static const char *const files[] = {"tests/fixtures/grammar-corpus.jsonl",
                                        "tests/fixtures/grammar-walk.jsonl"};
    char                     line[16384];
    int                      bad = 0;
    k3_grammar              *eg;
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        FILE *cf = fopen(files[f], "rb");
        while (cf && fgets(line, sizeof line, cf))
            if (k3_grammar_json_schema(v, line, strlen(line), NULL, &eg) == K3_OK) {
                bad += exact_walk(eg, nv, cand, nc, steps, nsteps);
                (*nsch)++;
                k3_grammar_free(eg);
            }
        if (cf)
            fclose(cf);
    }
    if (k3_grammar_json_object(v, &eg) == K3_OK) {
        for (int r = 0; r < 3; r++)
            bad += exact_walk(eg, nv, cand, nc, 2 * steps, nsteps);
        (*nsch)++;
        k3_grammar_free(eg);
    }
    /* long strings: positions far from both bounds share one mask cache (g_share), the others
     * have their own; the walks cross from one kind to the other */
    static const char *const longs[] = {
        "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":150,\"maxLength\":"
        "400},\"t\":{\"type\":\"string\",\"maxLength\":300}},\"required\":[\"s\",\"t\"],"
        "\"additionalProperties\":false}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":130},\"maxItems\":3}",
        "{\"type\":\"string\",\"minLength\":120}",
        /* the same beside patterns (g_pattern_len: counts far from both bounds share) */
        "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"^[^x]*$\","
        "\"minLength\":"
        "150,\"maxLength\":400},\"t\":{\"type\":\"string\",\"pattern\":\"b\",\"maxLength\":300}},"
        "\"required\":"
        "[\"s\",\"t\"],\"additionalProperties\":false}",
        "{\"type\":\"string\",\"pattern\":\"^\\\\w\",\"minLength\":120}",
        /* pieces of digits are short: counts a few digits from both bounds share */
        "{\"type\":\"string\",\"pattern\":\"^[0-9]+$\",\"minLength\":40,\"maxLength\":120}",
        /* far from maxLength, yet a 16-character literal fits after 34 characters, not 35: counts
         * whose liveness differs share no cache (they did: the mask took pieces that strand it) */
        "{\"type\":\"string\",\"pattern\":\"abcdefghijklmnop\",\"maxLength\":50}",
        "{\"type\":\"string\",\"format\":\"email\",\"pattern\":\"defi@example\\\\.co\",\"maxLength\":50}"};
    for (size_t i = 0; i < sizeof longs / sizeof *longs; i++)
        if (k3_grammar_json_schema(v, longs[i], strlen(longs[i]), NULL, &eg) == K3_OK) {
            for (int r = 0; r < 2; r++)
                bad += exact_walk(eg, nv, cand, nc, 3 * steps, nsteps);
            (*nsch)++;
            k3_grammar_free(eg);
        }
    return bad;
}

/* A random tokenisation of d: at each position, any vocabulary piece that is a prefix. */
static size_t random_ids(const k3_tok *t, const char *d, size_t n, int32_t *out) {
    size_t  k  = 0;
    int32_t nv = k3_tok_n_vocab(t), cand[64];
    for (size_t i = 0; i < n;) {
        int nc = 0;
        for (int32_t id = 0; id < nv && nc < 64; id++) {
            size_t      len;
            const char *p = k3_tok_piece(t, id, &len);
            if (p && !k3_tok_is_special(t, id) && len && len <= n - i && !memcmp(p, d + i, len))
                cand[nc++] = id;
        }
        if (!nc)
            return 0;
        int32_t id = cand[rnd((uint32_t)nc)];
        size_t  len;
        k3_tok_piece(t, id, &len);
        out[k++] = id;
        i += len;
    }
    return k;
}

static k3_status compile(const k3_gvocab *v, const char *s, k3_grammar **g) {
    return k3_grammar_json_schema(v, s, strlen(s), NULL, g);
}

/* --walk SCHEMAS OUT N (t-grammar.sh, which validates OUT with ajv): for each schema (a line of
 * SCHEMAS), N walks over k3-nano's masks, each token drawn uniformly from the mask with a fixed
 * seed (the end of message with probability 1/4 once allowed, always in the last 64 of 400
 * steps), each one accepted. Uniform draws reach what a model's distribution seldom does (a no-break space, a
 * digit of another script, a quote in a raw pattern). OUT gets "LINE<TAB>WALK<TAB>end<TAB>TEXT" for each walk
 * that ended. Checks: every schema compiles, no mask is empty before the end, and at least 90 % of the walks
 * end within 400 tokens, the at least `least` schemas.
 * tools 1 (--walk-tools): each schema is a string argument's (a tool f of one required argument
 * s), walked through the tool-call grammar; TEXT is the raw value the call holds (between the
 * argument's <|sep|> and its <|close|>), written as a JSON string for the validator. */
static void walk_out(const char *schemas, const char *outp, int n, int tools, int least) {
    k3_tok    *tok;
    k3_gvocab *v;
    size_t     len;
    char      *text = t_read_file(schemas, &len);
    FILE      *out  = fopen(outp, "w");
    if (!text || !out || k3_tok_load("models/k3-nano", NULL, &tok)) {
        T_CHECK(0, "--walk: %s and %s, k3-nano's tokenizer: %s", schemas, outp, k3_errmsg());
        return;
    }
    int32_t   nv = k3_tok_n_vocab(tok), eom = k3_tok_special(tok, "<|end_of_msg|>");
    uint64_t *mask  = NULL;
    int32_t  *al    = malloc((size_t)nv * sizeof *al);
    int       lines = 0, bad = 0, dead = 0, walks = 0, ended = 0, refused = 0;
    if (k3_gvocab_new(tok, nv, -1, &v) || !al ||
        !(mask = malloc((size_t)k3_gvocab_words(v) * sizeof *mask))) {
        T_CHECK(0, "--walk: the vocabulary: %s", k3_errmsg());
        return;
    }
    rng = 0x2545f4914f6cdd1dULL;
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        if ((nl = strchr(line, '\n')))
            *nl = 0;
        if (!*line)
            continue;
        lines++;
        k3_grammar *g;
        k3_buf      tl = {0};
        if (tools)
            k3_buf_printf(&tl,
                          "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
                          "\"object\",\"properties\":{\"s\":%s},\"required\":[\"s\"]}}}]",
                          line);
        k3_status cst = tools ? k3_grammar_tool_calls(v, tl.p, NULL, 1, 0, NULL, &g) : compile(v, line, &g);
        free(tl.p);
        if (cst) {
            printf("# line %d does not compile: %s\n", lines, k3_errmsg());
            bad++;
            continue;
        }
        for (int w = 0; w < n; w++, walks++) {
            k3_gmatch *m;
            k3_ids     ids = {0};
            int        end = 0, special = 0, n_spec = 0;
            if (k3_gmatch_new(g, &m))
                break;
            for (int i = 0; i < 400 && !end; i++) {
                int na = 0, can_end = 0;
                k3_gmatch_mask(m, mask);
                for (int32_t t = 0; t < nv; t++)
                    if (bit(mask, t))
                        al[na++] = t, can_end |= t == eom;
                if (!na) {
                    printf("# line %d walk %d: an empty mask after %d tokens\n", lines, w, i);
                    dead++;
                    break;
                }
                int32_t t = can_end && (!rnd(4) || i >= 336) ? eom : al[rnd((uint32_t)na)];
                if (k3_gmatch_accept(m, t)) {
                    printf("# line %d walk %d: id %d was in the mask but not accepted\n", lines, w, (int)t);
                    refused++;
                    break;
                }
                end = k3_gmatch_ended(m);
                special |= k3_tok_is_special(tok, t); /* the closes after the document are not its text */
                n_spec += k3_tok_is_special(tok, t);
                if (tools ? n_spec == 8 && !k3_tok_is_special(tok, t)
                          : !special) /* a call's value: after CSOSOSOS */
                    k3_ids_push(&ids, t);
            }
            char  *doc = NULL;
            size_t dl;
            if (end && !k3_tok_decode(tok, ids.v, ids.n, &doc, &dl)) {
                fprintf(out, "%d\t%d\tend\t%s", lines, w, tools ? "\"" : doc);
                for (size_t k = 0; tools && k < dl; k++) { /* the raw value as a JSON string */
                    unsigned char ch = (unsigned char)doc[k];
                    if (ch == '"' || ch == '\\')
                        fprintf(out, "\\%c", ch);
                    else if (ch < 0x20)
                        fprintf(out, "\\u%04x", ch);
                    else
                        fputc(ch, out);
                }
                fputs(tools ? "\"\n" : "\n", out);
                ended++;
            }
            free(doc);
            k3_ids_free(&ids);
            k3_gmatch_free(m);
        }
        k3_grammar_free(g);
    }
    fclose(out);
    T_CHECK(lines >= least && bad == 0, "--walk: %d of %d schemas compile (at least %d asked)", lines - bad,
            lines, least);
    T_CHECK(dead == 0, "--walk: no mask is empty before the end (%d were, %d walks)", dead, walks);
    T_CHECK(refused == 0, "--walk: every id drawn from a mask is accepted (%d were not)", refused);
    T_CHECK(walks > 0 && ended * 10 >= walks * 9, "--walk: %d of %d walks end within 400 tokens", ended,
            walks);
    free(mask);
    free(al);
    free(text);
    k3_gvocab_free(v);
    k3_tok_free(tok);
}

/* --keep CASES OUT (t-grammar.sh, which compares OUT with ajv's verdicts, grammar-keep.cjs): each
 * line of CASES (but empty ones and # comments) is "SCHEMA<TAB>VALUE" (SCHEMA a JSON object, VALUE compact
 * JSON); the grammar of
 * {"anyOf":[SCHEMA + "enum":[VALUE], {"type":"null"}]} keeps VALUE exactly when SCHEMA's other
 * keywords allow it (value_ok, as ajv-formats reads a format), so OUT gets "LINE<TAB>1" when the
 * grammar takes VALUE, "LINE<TAB>0" when not; a schema that does not compile is a failure. */
static void keep_out(const char *cases, const char *outp) {
    k3_tok    *tok;
    k3_gvocab *v;
    size_t     len;
    char      *text  = t_read_file(cases, &len);
    FILE      *out   = fopen(outp, "w");
    int        lines = 0, bad = 0, kept = 0, left = 0;
    if (!text || !out || k3_tok_load("models/k3-nano", NULL, &tok) ||
        k3_gvocab_new(tok, k3_tok_n_vocab(tok), -1, &v)) {
        T_CHECK(0, "--keep: %s and %s, k3-nano's tokenizer: %s", cases, outp, k3_errmsg());
        return;
    }
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        if ((nl = strchr(line, '\n')))
            *nl = 0;
        char *tab = strchr(line, '\t'), *close = tab ? memrchr(line, '}', (size_t)(tab - line)) : NULL;
        lines++;
        if (!*line || *line == '#')
            continue;
        if (!close) {
            printf("# line %d: not SCHEMA<TAB>VALUE\n", lines);
            bad++;
            continue;
        }
        k3_buf      sch = {0};
        k3_grammar *g;
        int         complete = 0;
        k3_buf_printf(&sch, "{\"anyOf\":[%.*s%s\"enum\":[%s]},{\"type\":\"null\"}]}", (int)(close - line),
                      line, close > line + 1 ? "," : "", tab + 1);
        if (compile(v, sch.p, &g)) {
            printf("# line %d does not compile: %s\n", lines, k3_errmsg());
            bad++;
        } else {
            int in = feed_bytes(g, tab + 1, strlen(tab + 1), &complete) == -1 && complete;
            fprintf(out, "%d\t%d\n", lines, in);
            kept += in, left += !in;
            k3_grammar_free(g);
        }
        free(sch.p);
    }
    fclose(out);
    T_CHECK(kept + left > 0 && bad == 0, "--keep: %d of %d cases compile (%d values kept, %d left out)",
            kept + left, kept + left + bad, kept, left);
    free(text);
    k3_gvocab_free(v);
    k3_tok_free(tok);
}

/* The same on the release-size vocabulary (163,840 ids, the slice preset's tokenizer), whose long
 * pieces cross rule ends ("},", "\":\"", "]]"): at each step the ids whose piece holds a JSON
 * structural byte, and 500 others. */
/* The most one k3_gmatch_mask_bounded call charged (default budget) over an anyOf of n_str
 * strings (maxLength 1..n_str): the tokens of `bytes` one byte each, else up to n tokens drawn
 * from the masks; *fed: the tokens taken, *n_calls: the calls. */
static int64_t bounded_most(const k3_gvocab *v, int n_str, const char *bytes, int n, int *fed, int *n_calls,
                            int64_t *over) {
    k3_buf any = {0};
    puts_(&any, "{\"anyOf\":[");
    for (int k = 1; k <= n_str; k++)
        k3_buf_printf(&any, "%s{\"type\":\"string\",\"maxLength\":%d}", k > 1 ? "," : "", k);
    puts_(&any, "]}");
    int32_t     nv   = k3_gvocab_words(v) * 64;
    k3_grammar *g    = NULL;
    k3_gmatch  *m    = NULL;
    uint64_t   *mask = calloc((size_t)k3_gvocab_words(v), sizeof *mask);
    int64_t     most = 0, fill, pre;
    int         calls, done;
    if (mask && !compile(v, any.p, &g) && !k3_gmatch_new(g, &m))
        for (int t = 0; t < n && !k3_gmatch_ended(m); t++, ++*fed) {
            if (bytes && k3_gmatch_accept_bytes(m, bytes + t, 1))
                break;
            do {
                done = 0;
                if (k3_gmatch_mask_bounded(m, mask, &done))
                    break;
                g_match_stats(m, &fill, &pre, &calls);
                most          = fill > most ? fill : most;
                int64_t allow = v->n_edges + (pre ? 0 : v->n_edges / 4); /* after the first fill: one walk */
                *over         = fill - allow > *over ? fill - allow : *over;
                ++*n_calls;
            } while (!done);
            if (bytes)
                continue;
            int32_t cnt = 0, pick = -1;
            for (int32_t id = 0; id < nv; id++)
                cnt += bit(mask, id);
            for (int32_t id = 0, w = cnt ? (int32_t)rnd((uint32_t)cnt) : -1; id < nv && pick < 0; id++)
                if (bit(mask, id) && w-- == 0)
                    pick = id;
            if (pick < 0 || k3_gmatch_accept(m, pick))
                break;
        }
    k3_gmatch_free(m);
    k3_grammar_free(g);
    free(mask);
    free(any.p);
    return most;
}

static void exact_release(void) {
    char       dir[1024];
    k3_tok    *tok = NULL;
    k3_gvocab *v   = NULL;
    snprintf(dir, sizeof dir, "%s/grammar-release-vocab", t_tmp());
    if (t_sh("'%s/k3-mkmodel' --preset tiny --merges 163328 --seed 1 --quiet --force '%s' >/dev/null",
             t_build(), dir) ||
        k3_tok_load(dir, NULL, &tok)) {
        T_CHECK(0, "the release-size vocabulary (k3-mkmodel --merges 163328 in %s): %s", dir, k3_errmsg());
        return;
    }
    int32_t  nv = k3_tok_n_vocab(tok), nc = 0;
    int32_t *cand = malloc((size_t)nv * sizeof *cand);
    if (!cand || k3_gvocab_new(tok, nv, -1, &v)) {
        T_CHECK(0, "the release-size vocabulary: %s", k3_errmsg());
        free(cand);
        k3_tok_free(tok);
        return;
    }
    for (int32_t id = 0; id < nv; id++) {
        size_t      n;
        const char *p = k3_tok_piece(tok, id, &n);
        if (p && (memchr(p, '"', n) || memchr(p, ',', n) || memchr(p, '}', n) || memchr(p, ']', n) ||
                  memchr(p, ':', n) || rnd(300) == 0))
            cand[nc++] = id;
    }
    int nsch = 0, steps = 0, bad = exact_corpus(v, nv, cand, nc, 16, &nsch, &steps);
    T_CHECK(nsch >= 49 && steps > 500 && bad == 0,
            "masks are exact on %d ids: over %d steps of %d grammars, each of %d ids' bits equals "
            "k3_gmatch_allows (%d steps differ)",
            (int)nv, steps, nsch, (int)nc, bad);
    /* one bounded call's charge: a fill stops once its bound and the transitions it computes pass
     * what is left of one walk (the first fill of a call may take a quarter more); it went a whole
     * walk past its bound (1.5 walks charged, 3-8 ms a call). Past that a call may go by one
     * transition at most (a step over one configuration set, up to about one per string alive:
     * G_STEP_COST * (1 + set / 2)); it went by a piece's transitions, and a fill tried with
     * nothing left computed its bound's (up to 256). With 250 strings and tokens drawn from the
     * masks, the fills' DFA passes half its bound, where a fill was let run whatever its
     * transitions (10 ms in one call). */
    for (int x = 0; x < 2; x++) {
        int     n_str = x ? 250 : 100, want = x ? 10 : 6, fed = 0, n_calls = 0;
        int64_t over = INT64_MIN, step = 128 * (1 + (n_str + 16) / 2),
                cap  = v->n_edges + v->n_edges / 4 + step;
        int64_t most = bounded_most(v, n_str, x ? NULL : "\"abcde", x ? 30 : 6, &fed, &n_calls, &over);
        T_CHECK(
            fed >= want && n_calls > 6 && most <= cap && over <= step,
            "an anyOf of %d strings, %d tokens in %d bounded calls: the most one charged is %.2f walks of "
            "the vocabulary (at most %.2f), at most %lld units past its allowance (one walk, a quarter "
            "more for a call's first fill; one transition over %d configurations: %lld)",
            n_str, fed, n_calls, (double)most / (double)v->n_edges, (double)cap / (double)v->n_edges,
            (long long)over, n_str + 16, (long long)step);
    }
    /* the uncertain tokens' lists (those that leave a rule before their last byte and go on with
     * a byte that may follow it: 533 in one list of this schema's on this vocabulary) under a
     * bounded mask: a call stops inside a list at its budget, after one transition at most; a
     * begun list was checked whole with its transitions (21,801 units past a budget of 1, 19,243
     * past 4,096) */
    k3_grammar *ug;
    int64_t     uover[2] = {0, 0};
    int         usteps = 0, ubad = 0, umore = 0;
    if (!compile(v,
                 "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"array\",\"items\":{\"type\":"
                 "\"string\"}}}",
                 &ug) &&
        !k3_grammar_warm(ug)) { /* every entry filled: the calls merge and check lists only */
        for (int k = 0; k < 2; k++) {
            walk_budget = k ? 4096 : 1, walk_over = 0, walk_more = 0;
            for (int r = 0; r < 2; r++)
                ubad += exact_walk(ug, nv, cand, nc, 24, &usteps);
            uover[k] = walk_over, umore += walk_more;
        }
        walk_budget = 0;
        k3_grammar_free(ug);
    }
    T_CHECK(
        usteps > 50 && umore > 10 && ubad == 0 && uover[0] <= 128 * (1 + 64 / 2) &&
            uover[1] <= 128 * (1 + 64 / 2),
        "bounded masks over long uncertain-token lists: %d steps (%d of several calls) exact (%d differ); a "
        "call charges at most its allowance and one transition: %lld and %lld units past it at budgets of 1 "
        "and 4,096 (at most %d)",
        usteps, umore, ubad, (long long)uover[0], (long long)uover[1], 128 * (1 + 64 / 2));
    free(cand);
    k3_gvocab_free(v);
    k3_tok_free(tok);
}

/* Documents at the edges of what a schema allows, each taken byte by byte: want 1 = accepted and
 * complete (a valid document the grammar must allow), 0 = rejected or incomplete (an invalid one,
 * as ECMAScript's RegExp with the u flag and JSON Schema 2020-12 judge it; ajv agrees). */
static const struct {
    const char *schema, *doc;
    int         want;
} edge_docs[] = {
    /* integer ranges whose top is 0: "0" was left out (nonneg's loop stopped before 1 digit) */
    {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":0}", "0", 1},
    {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":0}", "-5", 1},
    {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":0}", "1", 0},
    {"{\"type\":\"integer\",\"maximum\":0}", "0", 1},
    {"{\"type\":\"integer\",\"minimum\":0,\"maximum\":0}", "0", 1},
    {"{\"type\":\"integer\",\"minimum\":0,\"maximum\":0}", "-0", 0},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":-1,\"exclusiveMaximum\":1}", "0", 1},
    /* ECMAScript's \s holds U+00A0, U+1680, U+2000-200A, U+2028/9, U+202F, U+205F, U+3000, U+FEFF:
     * \S and negated classes took any non-ASCII character */
    {"{\"type\":\"string\",\"pattern\":\"^\\\\S$\"}", "\"\xc2\xa0\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^\\\\S$\"}", "\"\xe3\x80\x80\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^\\\\S$\"}", "\"\xef\xbb\xbf\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^\\\\S$\"}", "\"\xe2\x80\x8a\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^\\\\S$\"}", "\"\xc3\xa9\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^\\\\S$\"}", "\"\xe2\x80\x8b\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^[^\\\\s]+$\"}", "\"a\xe2\x80\xa8\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^[^\\\\S]$\"}", "\"\xc3\xa9\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^[^\\\\S]$\"}", "\"\xc2\xa0\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^[^\\\\D]$\"}", "\"\xd9\xa3\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^[^\\\\D]$\"}", "\"5\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^[^\\\\W]$\"}", "\"\xc3\xa9\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^\\\\s$\"}", "\"\xc2\xa0\"", 1},
    /* . is any character but \n \r U+2028 U+2029 (it left out all of U+2000-2FFF) */
    {"{\"type\":\"string\",\"pattern\":\"^.$\"}", "\"\xe2\x80\xa8\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^.$\"}", "\"\xe2\x80\x94\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^.$\"}", "\"\xe2\x82\xac\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^.$\"}", "\"\xf0\x9f\x98\x80\"", 1},
    /* classes with non-ASCII members, \uHHHH, [\b], [^], and an escaped backslash before $ */
    {"{\"type\":\"string\",\"pattern\":\"^[\xc3\xa9-\xc3\xab]$\"}", "\"\xc3\xaa\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^[\xc3\xa9-\xc3\xab]$\"}", "\"e\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^[^\xc3\xa9]$\"}", "\"\xc3\xa9\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^[^\xc3\xa9]$\"}", "\"\xc3\xa8\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^\\\\u0041\\\\ud83d\\\\ude00$\"}", "\"A\xf0\x9f\x98\x80\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^[\\\\b]$\"}", "\"\\b\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^[^]$\"}", "\"]\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^\\\\\\\\$\"}", "\"\\\\\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^a\\\\$\"}", "\"a$\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^a\\\\$\"}", "\"a\"", 0},
    /* enum and const next to other keywords: each value must satisfy them too (they were
     * ignored: only type was checked) */
    {"{\"enum\":[\"abc\",\"a\",null],\"maxLength\":2}", "\"abc\"", 0},
    {"{\"enum\":[\"abc\",\"a\",null],\"maxLength\":2}", "\"a\"", 1},
    {"{\"enum\":[\"abc\",\"a\",null],\"maxLength\":2}", "null", 1},
    {"{\"type\":\"string\",\"enum\":[\"x\",\"yy\"],\"minLength\":2}", "\"x\"", 0},
    {"{\"enum\":[1,5,10],\"maximum\":5}", "10", 0},
    {"{\"enum\":[1,5,10],\"maximum\":5}", "5", 1},
    {"{\"enum\":[[1,2,3],[1]],\"maxItems\":2}", "[1,2,3]", 0},
    {"{\"enum\":[[1,2,3],[1]],\"maxItems\":2}", "[1]", 1},
    {"{\"enum\":[{\"a\":1},{\"a\":\"x\"}],\"properties\":{\"a\":{\"type\":\"integer\"}}}", "{\"a\":\"x\"}",
     0},
    {"{\"enum\":[{\"a\":1},{\"a\":\"x\"}],\"properties\":{\"a\":{\"type\":\"integer\"}}}", "{\"a\":1}", 1},
    {"{\"anyOf\":[{\"const\":\"abc\",\"pattern\":\"^b\"},{\"type\":\"null\"}]}", "\"abc\"", 0},
    {"{\"anyOf\":[{\"const\":\"abc\",\"pattern\":\"^a\"},{\"type\":\"null\"}]}", "\"abc\"", 1},
    {"{\"anyOf\":[{\"const\":\"a\",\"enum\":[\"b\"]},{\"type\":\"null\"}]}", "\"a\"", 0},
    {"{\"enum\":[{\"a\":{\"a\":1}}],\"properties\":{\"a\":{\"enum\":[{\"a\":1}],\"properties\":{\"a\":"
     "{\"enum\":[1],\"maximum\":3}}}}}",
     "{\"a\":{\"a\":1}}", 1},
    {"{\"$defs\":{\"s\":{\"type\":\"string\",\"maxLength\":1}},\"enum\":[[\"ab\"],[\"a\"]],"
     "\"items\":{\"$ref\":\"#/$defs/s\"}}",
     "[\"ab\"]", 0},
    {"{\"$defs\":{\"s\":{\"type\":\"string\",\"maxLength\":1}},\"enum\":[[\"ab\"],[\"a\"]],"
     "\"items\":{\"$ref\":\"#/$defs/s\"}}",
     "[\"a\"]", 1},
    /* enum values share their prefixes (a trie): values that are prefixes of others, repeats */
    {"{\"enum\":[123,1,12,1,\"ab\",\"a\",[1],[1,2]]}", "1", 1},
    {"{\"enum\":[123,1,12,1,\"ab\",\"a\",[1],[1,2]]}", "12", 1},
    {"{\"enum\":[123,1,12,1,\"ab\",\"a\",[1],[1,2]]}", "123", 1},
    {"{\"enum\":[123,1,12,1,\"ab\",\"a\",[1],[1,2]]}", "1234", 0},
    {"{\"enum\":[123,1,12,1,\"ab\",\"a\",[1],[1,2]]}", "13", 0},
    {"{\"enum\":[123,1,12,1,\"ab\",\"a\",[1],[1,2]]}", "\"a\"", 1},
    {"{\"enum\":[123,1,12,1,\"ab\",\"a\",[1],[1,2]]}", "\"ab\"", 1},
    {"{\"enum\":[123,1,12,1,\"ab\",\"a\",[1],[1,2]]}", "\"b\"", 0},
    {"{\"enum\":[123,1,12,1,\"ab\",\"a\",[1],[1,2]]}", "[1,2]", 1},
    {"{\"enum\":[123,1,12,1,\"ab\",\"a\",[1],[1,2]]}", "[1]", 1},
    {"{\"enum\":[\"\",\"x\"]}", "\"\"", 1},
    /* a count written as 2.0 is the integer 2 (it was refused: "expected a non-negative integer") */
    {"{\"type\":\"string\",\"maxLength\":2.0}", "\"ab\"", 1},
    {"{\"type\":\"string\",\"maxLength\":2.0}", "\"abc\"", 0},
    {"{\"type\":\"array\",\"minItems\":1.0}", "[true]", 1},
    /* an allOf of one branch is that branch (Pydantic v1 wraps a $ref with a default so; it was
     * refused unless the branch was an object schema) */
    {"{\"definitions\":{\"Color\":{\"enum\":[\"red\",\"blue\"]}},\"type\":\"object\",\"properties\":{\"c\":"
     "{\"allOf\":[{\"$ref\":\"#/definitions/Color\"}],\"default\":\"red\"}},\"required\":[\"c\"]}",
     "{\"c\":\"red\"}", 1},
    {"{\"definitions\":{\"Color\":{\"enum\":[\"red\",\"blue\"]}},\"type\":\"object\",\"properties\":{\"c\":"
     "{\"allOf\":[{\"$ref\":\"#/definitions/Color\"}],\"default\":\"red\"}},\"required\":[\"c\"]}",
     "{\"c\":\"green\"}", 0},
    {"{\"allOf\":[{\"type\":\"integer\",\"maximum\":3}],\"description\":\"x\"}", "3", 1},
    {"{\"allOf\":[{\"type\":\"integer\",\"maximum\":3}],\"description\":\"x\"}", "4", 0},
    /* bounds on numbers (they were refused): no exponent, fractional bounds rounded inwards */
    {"{\"type\":\"number\",\"minimum\":0}", "2.5", 1},
    {"{\"type\":\"number\",\"minimum\":0}", "-0.5", 0},
    {"{\"type\":\"number\",\"minimum\":0}", "-0.0", 1},
    {"{\"type\":\"number\",\"minimum\":0}", "1e5", 0}, /* valid, but no exponent is written */
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "1.0", 1},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "1.01", 0},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "0.999", 1},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}", "0", 0},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}", "0.000", 0},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}", "0.001", 1},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}", "1", 0},
    {"{\"type\":\"number\",\"exclusiveMinimum\":-2,\"maximum\":-1}", "-1.5", 1},
    {"{\"type\":\"number\",\"exclusiveMinimum\":-2,\"maximum\":-1}", "-2.0", 0},
    {"{\"type\":\"number\",\"exclusiveMinimum\":-2,\"maximum\":-1}", "-1.0", 1},
    {"{\"type\":\"number\",\"exclusiveMinimum\":-2,\"maximum\":-1}", "-0.9", 0},
    /* fractional bounds are exact as a validator reads them (they were rounded inwards to
     * integers: minimum 0.5 wrote numbers from 1, exclusiveMaximum 2.25 up to 1.999...) */
    {"{\"type\":\"number\",\"minimum\":0.5}", "0.5", 1},
    {"{\"type\":\"number\",\"minimum\":0.5}", "0.50", 1},
    {"{\"type\":\"number\",\"minimum\":0.5}", "0.4999999999999999", 0},
    {"{\"type\":\"number\",\"minimum\":0.5}", "0.7", 1},
    {"{\"type\":\"number\",\"exclusiveMaximum\":2.25}", "2.2", 1},
    {"{\"type\":\"number\",\"exclusiveMaximum\":2.25}", "2.25", 0},
    {"{\"type\":\"number\",\"exclusiveMaximum\":2.25}", "2.2499999999999996", 1},
    {"{\"type\":\"number\",\"exclusiveMaximum\":2.25}", "2.2499999999999999", 0}, /* the double 2.25 */
    {"{\"type\":\"number\",\"exclusiveMinimum\":0.1}", "0.1000000000000001", 1},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0.1}", "0.1", 0},
    {"{\"type\":\"number\",\"minimum\":0.5,\"maximum\":0.75}", "0.6", 1},
    {"{\"type\":\"number\",\"minimum\":0.5,\"maximum\":0.75}", "0.75", 1},
    {"{\"type\":\"number\",\"minimum\":0.5,\"maximum\":0.75}", "0.7500000000000001", 0},
    {"{\"type\":\"number\",\"minimum\":-1.75,\"maximum\":-1.5}", "-1.75", 1},
    {"{\"type\":\"number\",\"minimum\":-1.75,\"maximum\":-1.5}", "-1.6", 1},
    {"{\"type\":\"number\",\"minimum\":-1.75,\"maximum\":-1.5}", "-1.4", 0},
    {"{\"type\":\"number\",\"minimum\":-0.5,\"maximum\":0.5}", "-0", 1},
    {"{\"type\":\"number\",\"minimum\":-0.5,\"maximum\":0.5}", "-0.5", 1},
    {"{\"type\":\"number\",\"maximum\":4503599627370496.5}", "4503599627370496.5", 1}, /* a tie */
    {"{\"type\":\"number\",\"exclusiveMaximum\":4503599627370497}", "4503599627370496.5", 1},
    {"{\"type\":\"number\",\"exclusiveMaximum\":4503599627370497}", "4503599627370496.6", 0},
    {"{\"enum\":[0.25,0.5,2.5],\"exclusiveMinimum\":0.25,\"maximum\":2.25}", "0.5", 1},
    {"{\"enum\":[0.25,0.5,2.5],\"exclusiveMinimum\":0.25,\"maximum\":2.25}", "0.25", 0},
    {"{\"type\":\"number\",\"maximum\":-3}", "-3.000", 1},
    {"{\"type\":\"number\",\"maximum\":-3}", "-2.999", 0},
    {"{\"enum\":[2.5,7,-1.5],\"minimum\":0,\"maximum\":5}", "2.5", 1},
    {"{\"enum\":[2.5,7,-1.5],\"minimum\":0,\"maximum\":5}", "7", 0},
    {"{\"anyOf\":[{\"type\":\"number\",\"minimum\":0,\"maximum\":-0.5},{\"type\":\"null\"}]}", "null", 1},
    /* integers above 2^53 pass a bound exactly and as ajv's doubles (JSON.parse reads
     * 9007199254740993 as 9007199254740992: the grammar wrote it under exclusiveMinimum 2^53) */
    {"{\"type\":\"integer\",\"exclusiveMinimum\":9007199254740992,\"maximum\":9007199254740996}",
     "9007199254740993", 0},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":9007199254740992,\"maximum\":9007199254740996}",
     "9007199254740994", 1},
    {"{\"type\":\"integer\",\"minimum\":-9007199254740996,\"exclusiveMaximum\":-9007199254740992}",
     "-9007199254740993", 0},
    {"{\"type\":\"integer\",\"maximum\":9007199254740993}", "9007199254740993", 1},
    {"{\"type\":\"integer\",\"maximum\":9007199254740993}", "9007199254740994", 0},
    /* enum/const values next to other keywords are checked by value, as ajv reads them: a number
     * needing 17 digits, an exponent of 3, an integral 2.0 or 1e+20 for "integer" (the check wrote
     * them with the grammar's 16 digits: the schema compiled to nothing, or lost the value) */
    {"{\"enum\":[0.30000000000000004],\"minimum\":0}", "0.30000000000000004", 1},
    {"{\"const\":1.7976931348623157e308,\"minimum\":0}", "1.7976931348623157e+308", 1},
    {"{\"enum\":[5e-324,-5e-324],\"exclusiveMinimum\":0}", "5e-324", 1},
    {"{\"enum\":[5e-324,-5e-324],\"exclusiveMinimum\":0}", "-5e-324", 0},
    {"{\"enum\":[0.30000000000000004,0.3],\"maximum\":0.3}", "0.30000000000000004", 0},
    {"{\"enum\":[0.30000000000000004,0.3],\"maximum\":0.3}", "0.3", 1},
    {"{\"type\":\"integer\",\"enum\":[2.0,2.5,1e20]}", "2.0", 1},
    {"{\"type\":\"integer\",\"enum\":[2.0,2.5,1e20]}", "1e+20", 1},
    {"{\"type\":\"integer\",\"enum\":[2.0,2.5,1e20]}", "2.5", 0},
    {"{\"enum\":[2.0,1e20,3],\"type\":\"integer\",\"minimum\":2.5}", "1e+20", 1},
    {"{\"enum\":[2.0,1e20,3],\"type\":\"integer\",\"minimum\":2.5}", "2.0", 0},
    {"{\"enum\":[[0.30000000000000004],[0.2,\"ab\"],[0.2,\"abc\"]],\"items\":{\"maximum\":0.3,"
     "\"maxLength\":2}}",
     "[0.2,\"ab\"]", 1},
    {"{\"enum\":[[0.30000000000000004],[0.2,\"ab\"],[0.2,\"abc\"]],\"items\":{\"maximum\":0.3,"
     "\"maxLength\":2}}",
     "[0.30000000000000004]", 0},
    {"{\"enum\":[[0.30000000000000004],[0.2,\"ab\"],[0.2,\"abc\"]],\"items\":{\"maximum\":0.3,"
     "\"maxLength\":2}}",
     "[0.2,\"abc\"]", 0},
    /* a nested enum in the other keywords compares numbers by value: 1.0 is 1 */
    {"{\"enum\":[{\"a\":[1.0]},{\"a\":[2]}],\"properties\":{\"a\":{\"enum\":[[1]]}}}", "{\"a\":[1.0]}", 1},
    {"{\"enum\":[{\"a\":[1.0]},{\"a\":[2]}],\"properties\":{\"a\":{\"enum\":[[1]]}}}", "{\"a\":[2]}", 0},
    /* enum/const values next to other keywords are checked as a validator checks a value (they
     * were checked with a grammar of those keywords, which writes members in the order of
     * properties, at most 4 additional ones with plain keys, and 32 characters around an
     * unanchored pattern: values outside that were dropped without a word) */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},"
     "\"enum\":[{\"b\":1,\"a\":2}]}",
     "{\"b\":1,\"a\":2}", 1},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"enum\":[{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,"
     "\"f\":6}]}",
     "{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"f\":6}", 1},
    {"{\"properties\":{\"x\":{}},\"enum\":[{\"a b\":1},{\"x\":[]}]}", "{\"a b\":1}", 1},
    {"{\"enum\":[\"0123456789012345678901234567890123456789abc\",\"ab\"],\"pattern\":\"abc\"}",
     "\"0123456789012345678901234567890123456789abc\"", 1},
    {"{\"enum\":[\"0123456789012345678901234567890123456789abc\",\"ab\"],\"pattern\":\"abc\"}", "\"ab\"", 0},
    {"{\"type\":\"string\",\"enum\":[\"ab\",\"xab\"],\"pattern\":\"^a\"}", "\"xab\"", 0},
    {"{\"type\":\"string\",\"enum\":[\"ab\",\"xab\"],\"pattern\":\"^a\"}", "\"ab\"", 1},
    /* formats as ajv-formats reads them: leap days, any case, a urn: uuid */
    {"{\"format\":\"date\",\"enum\":[\"2024-02-29\",\"2023-02-29\"]}", "\"2024-02-29\"", 1},
    {"{\"format\":\"date\",\"enum\":[\"2024-02-29\",\"2023-02-29\"]}", "\"2023-02-29\"", 0},
    {"{\"format\":\"date-time\",\"enum\":[\"2024-01-01t23:59:60.5Z\",\"2024-01-01 10:00:00+0530\","
     "\"2024-01-01T10:00:00\"]}",
     "\"2024-01-01t23:59:60.5Z\"", 1},
    {"{\"format\":\"date-time\",\"enum\":[\"2024-01-01t23:59:60.5Z\",\"2024-01-01 10:00:00+0530\","
     "\"2024-01-01T10:00:00\"]}",
     "\"2024-01-01 10:00:00+0530\"", 1},
    {"{\"format\":\"date-time\",\"enum\":[\"2024-01-01t23:59:60.5Z\",\"2024-01-01 10:00:00+0530\","
     "\"2024-01-01T10:00:00\"]}",
     "\"2024-01-01T10:00:00\"", 0},
    {"{\"format\":\"uuid\",\"enum\":[\"urn:uuid:123E4567-E89B-12D3-A456-426614174000\",\"123e4567\"]}",
     "\"urn:uuid:123E4567-E89B-12D3-A456-426614174000\"", 1},
    {"{\"format\":\"uuid\",\"enum\":[\"urn:uuid:123E4567-E89B-12D3-A456-426614174000\",\"123e4567\"]}",
     "\"123e4567\"", 0},
    {"{\"format\":\"email\",\"enum\":[\"J.O'Neil+x@Mail.Example.COM\",\"a..b@c.d\",\"a@b\"]}",
     "\"J.O'Neil+x@Mail.Example.COM\"", 1},
    {"{\"format\":\"email\",\"enum\":[\"J.O'Neil+x@Mail.Example.COM\",\"a..b@c.d\",\"a@b\"]}", "\"a..b@c.d\"",
     0},
    {"{\"format\":\"email\",\"enum\":[\"J.O'Neil+x@Mail.Example.COM\",\"a..b@c.d\",\"a@b\"]}", "\"a@b\"", 0},
    /* keywords the grammar cannot write but a check can read: a length past 4096, a length with
     * a pattern, uniqueItems, a oneOf whose branches overlap, a required name not in properties */
    {"{\"enum\":[\"a\"],\"maxLength\":5000}", "\"a\"", 1},
    {"{\"enum\":[\"ab\",\"abc\"],\"pattern\":\"^a\",\"maxLength\":2}", "\"abc\"", 0},
    {"{\"enum\":[\"ab\",\"abc\"],\"pattern\":\"^a\",\"maxLength\":2}", "\"ab\"", 1},
    {"{\"enum\":[[1,1.0],[1,2]],\"uniqueItems\":true}", "[1,1.0]", 0},
    {"{\"enum\":[[1,1.0],[1,2]],\"uniqueItems\":true}", "[1,2]", 1},
    {"{\"enum\":[{\"a\":1},{\"a\":1.5}],\"properties\":{\"a\":{\"oneOf\":[{\"type\":\"integer\"},"
     "{\"type\":\"number\"}]}}}",
     "{\"a\":1}", 0},
    {"{\"enum\":[{\"a\":1},{\"a\":1.5}],\"properties\":{\"a\":{\"oneOf\":[{\"type\":\"integer\"},"
     "{\"type\":\"number\"}]}}}",
     "{\"a\":1.5}", 1},
    {"{\"enum\":[{\"x\":1},{}],\"required\":[\"x\"]}", "{\"x\":1}", 1},
    {"{\"enum\":[{\"x\":1},{}],\"required\":[\"x\"]}", "{}", 0},
    /* lengths count code points: an emoji is one */
    {"{\"enum\":[\"\xf0\x9f\x98\x80\xf0\x9f\x98\x80\",\"abc\"],\"maxLength\":2}",
     "\"\xf0\x9f\x98\x80\xf0\x9f\x98\x80\"", 1},
    /* integers past 2^53 pass a bound when they pass it exactly (Python's json) and as doubles
     * (ajv): 9007199254740993 reads as 9007199254740992 in JSON.parse */
    {"{\"enum\":[9007199254740993,9007199254740992],\"maximum\":9007199254740992}", "9007199254740993", 0},
    {"{\"enum\":[9007199254740993,9007199254740992],\"maximum\":9007199254740992}", "9007199254740992", 1},
    {"{\"enum\":[9007199254740993],\"minimum\":9007199254740993.0}", "9007199254740993", 1},
    /* an enum whose other keywords reach it again through $ref "#": checked as far as the value
     * goes (it was refused: a grammar of the schema compiled again at each level) */
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"enum\":[[],[1]],\"items\":{\"$ref\":\"#\"}}}}",
     "{\"p\":[]}", 1},
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"enum\":[[],[1]],\"items\":{\"$ref\":\"#\"}}}}",
     "{\"p\":[1]}", 0},
    /* $ref is a URI fragment: percent-decoded, then a JSON pointer whose ~1 is '/' (both were
     * "names no definition") */
    {"{\"$defs\":{\"a b\":{\"const\":1}},\"$ref\":\"#/$defs/a%20b\"}", "1", 1},
    {"{\"$defs\":{\"a/b\":{\"const\":2}},\"$ref\":\"#/$defs/a~1b\"}", "2", 1},
    {"{\"$defs\":{\"a/b\":{\"const\":2}},\"$ref\":\"#/$defs/a~1b\"}", "1", 0},
    /* a required name that properties does not declare: a member every document holds, of any
     * value additionalProperties allows (it was refused) */
    {"{\"type\":\"object\",\"required\":[\"x\"]}", "{\"x\":[1]}", 1},
    {"{\"type\":\"object\",\"required\":[\"x\"]}", "{}", 0},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"x\",\"x\"],\"additionalProperties\":"
     "{\"type\":\"integer\"}}",
     "{\"a\":null,\"x\":5}", 1},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"x\",\"x\"],\"additionalProperties\":"
     "{\"type\":\"integer\"}}",
     "{\"x\":\"s\"}", 0},
    {"{\"anyOf\":[{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":false},{\"type\":"
     "\"null\"}]}",
     "null", 1},
    /* minLength / maxLength beside a pattern or format, in code points: an escape (\n, \u0001) is
     * one, a UTF-8 sequence is one (they were refused) */
    {"{\"type\":\"string\",\"pattern\":\"^a+$\",\"maxLength\":3}", "\"aaa\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^a+$\",\"maxLength\":3}", "\"aaaa\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^a*$\",\"maxLength\":3}", "\"\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^[^x]*$\",\"minLength\":2,\"maxLength\":3}", "\"\\n\\\"\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^[^x]*$\",\"minLength\":2,\"maxLength\":3}", "\"\\u0001\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^[^x]*$\",\"minLength\":2,\"maxLength\":3}",
     "\"\\u0001\\u0002\\u0003\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^[^x]*$\",\"minLength\":2,\"maxLength\":3}",
     "\"\\u0001\\u0002\\u0003\\u0004\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^[^x]*$\",\"minLength\":2,\"maxLength\":3}",
     "\"\xc3\xa9\xc3\xa9\xc3\xa9\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^[^x]*$\",\"minLength\":2,\"maxLength\":3}",
     "\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^[^x]*$\",\"minLength\":2,\"maxLength\":3}",
     "\"\xf0\x9f\x98\x80\xf0\x9f\x98\x80\"", 1},
    /* an unanchored pattern: the text around it counts, and may pass G_FILL_MAX to reach minLength */
    {"{\"type\":\"string\",\"pattern\":\"b\",\"maxLength\":3}", "\"abc\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"b\",\"maxLength\":3}", "\"abcd\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"b\",\"maxLength\":3}", "\"aac\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^a\",\"minLength\":40}",
     "\"axxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^a\",\"minLength\":40}",
     "\"axxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"", 0},
    {"{\"type\":\"string\",\"format\":\"date\",\"maxLength\":10}", "\"2024-01-31\"", 1},
    {"{\"type\":\"string\",\"format\":\"email\",\"maxLength\":5}", "\"a@b.c\"", 1},
    {"{\"type\":\"string\",\"format\":\"email\",\"maxLength\":5}", "\"ab@c.d\"", 0},
    /* format beside pattern: both hold (the product of their automata; it was refused) */
    {"{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"^2024-\"}", "\"2024-12-31\"", 1},
    {"{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"^2024-\"}", "\"2023-02-28\"", 0},
    {"{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"^2024-\"}", "\"2024-13-01\"", 0},
    {"{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"^2024-\"}", "\"2024-x\"", 0},
    {"{\"type\":\"string\",\"format\":\"email\",\"pattern\":\"@example\\\\.com$\"}", "\"a.b@example.com\"",
     1},
    {"{\"type\":\"string\",\"format\":\"email\",\"pattern\":\"@example\\\\.com$\"}", "\"a@example.org\"", 0},
    {"{\"type\":\"string\",\"format\":\"email\",\"pattern\":\"@example\\\\.com$\"}", "\"a@@example.com\"", 0},
    {"{\"type\":\"string\",\"format\":\"email\",\"pattern\":\"@example\\\\.com$\"}", "\"@example.com\"", 0},
    {"{\"type\":\"string\",\"format\":\"uuid\",\"pattern\":\"^[0-9A-F-]+$\"}",
     "\"01234567-0000-4000-8000-000000000009\"", 1}, /* the format writes a-f, the pattern A-F: digits */
    {"{\"type\":\"string\",\"format\":\"uuid\",\"pattern\":\"^[0-9A-F-]+$\"}",
     "\"0a234567-0000-4000-8000-000000000009\"", 0},
    {"{\"type\":\"string\",\"format\":\"ipv4\",\"pattern\":\"^10\\\\.\",\"maxLength\":9}", "\"10.0.0.1\"", 1},
    {"{\"type\":\"string\",\"format\":\"ipv4\",\"pattern\":\"^10\\\\.\",\"maxLength\":9}", "\"10.0.0.100\"",
     0},
    {"{\"type\":\"string\",\"format\":\"ipv4\",\"pattern\":\"^10\\\\.\",\"maxLength\":9}", "\"11.0.0.1\"", 0},
/* multipleOf beside an enum: both readings (ajv divides doubles; Python's json, integers exact) */
#define MOD3 "{\"enum\":[9007199254740993,9007199254740995,9007199254740996],\"multipleOf\":3}"
    {MOD3, "9007199254740993", 0}, /* a multiple, but JSON.parse reads 9007199254740992 */
    {MOD3, "9007199254740995", 0}, /* no multiple, but JSON.parse reads 9007199254740996 */
    {MOD3, "9007199254740996", 1},
#undef MOD3
    {"{\"enum\":[0.3,0.5],\"multipleOf\":0.1}", "0.3", 0},
    {"{\"enum\":[0.3,0.5],\"multipleOf\":0.1}", "0.5", 1},
    /* OpenAI's strict-mode formats beyond those four (they were refused): what the grammar writes */
    {"{\"type\":\"string\",\"format\":\"time\"}", "\"23:59:59.5+05:30\"", 1},
    /* ajv-formats: a zone is required */
    {"{\"type\":\"string\",\"format\":\"time\"}", "\"23:59:59\"", 0},
    {"{\"type\":\"string\",\"format\":\"duration\"}", "\"P1Y2M3DT4H5M6S\"", 1},
    {"{\"type\":\"string\",\"format\":\"duration\"}", "\"P1W\"", 1},
    {"{\"type\":\"string\",\"format\":\"duration\"}", "\"PT\"", 0},
    {"{\"type\":\"string\",\"format\":\"duration\"}", "\"P\"", 0},
    {"{\"type\":\"string\",\"format\":\"hostname\"}", "\"api.example.com\"", 1},
    {"{\"type\":\"string\",\"format\":\"hostname\"}", "\"-a.com\"", 0},
    {"{\"type\":\"string\",\"format\":\"ipv4\"}", "\"255.0.10.9\"", 1},
    {"{\"type\":\"string\",\"format\":\"ipv4\"}", "\"256.0.10.9\"", 0},
    {"{\"type\":\"string\",\"format\":\"ipv4\"}", "\"01.0.10.9\"", 0},
    {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"::1\"", 1},
    {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"fe80::1:2:3:4:5:6\"", 1},
    {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"1:2:3:4:5:6:7::8\"", 0}, /* 8 and :: */
    {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"1::2::3\"", 0},
    /* and what the enum check keeps, as ajv-formats reads it */
    {"{\"format\":\"ipv6\",\"enum\":[\"::FFFF:1.2.3.4\",\"1:2:3:4:5:6:7:1.2.3.4\"]}", "\"::FFFF:1.2.3.4\"",
     1},
    {"{\"format\":\"ipv6\",\"enum\":[\"::FFFF:1.2.3.4\",\"1:2:3:4:5:6:7:1.2.3.4\"]}",
     "\"1:2:3:4:5:6:7:1.2.3.4\"", 0},
    {"{\"format\":\"duration\",\"enum\":[\"P1M1Y\",\"PT1H\"]}", "\"P1M1Y\"", 0},
    {"{\"format\":\"hostname\",\"enum\":[\"A.b-c.d.\",\"a..b\"]}", "\"A.b-c.d.\"", 1},
};

/* Each edge_docs row: the number that went as wanted (a failure is printed). */
static int edge_run(const k3_gvocab *v) {
    int ok = 0;
    for (size_t k = 0; k < sizeof edge_docs / sizeof *edge_docs; k++) {
        k3_grammar *g;
        int         complete = 0, got = 0;
        k3_status   st = compile(v, edge_docs[k].schema, &g);
        if (!st) {
            got = feed_bytes(g, edge_docs[k].doc, strlen(edge_docs[k].doc), &complete) == -1 && complete;
            k3_grammar_free(g);
        }
        if (!st && got == edge_docs[k].want)
            ok++;
        else
            printf("# %s under %s: %s, wanted %s\n", edge_docs[k].doc, edge_docs[k].schema,
                   st    ? k3_errmsg()
                   : got ? "accepted"
                         : "rejected",
                   edge_docs[k].want ? "accepted" : "rejected");
    }
    return ok;
}

/* Integers under multipleOf and bounds, every candidate text checked: each integer from 40 below
 * the range to 40 above it is taken exactly when it is within the bounds and a multiple (and,
 * under multipleOf, at most 2^53 in magnitude, where ajv's x / k is exact), and no other spelling
 * of a number is (a leading zero, "-0", "+", a fraction, an exponent). Fails on the old code, which
 * refused multipleOf, and on a remainder carried wrong across a digit. */
static void int_mod_exact(const k3_gvocab *v) {
    static const struct {
        const char *sch;
        long long   lo, hi, k; /* the integers the schema takes: [lo, hi], multiples of k */
    } cs[] = {
        {"{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":-100,\"maximum\":250}", -100, 250, 7},
        {"{\"type\":\"integer\",\"multipleOf\":12,\"exclusiveMinimum\":-37,\"exclusiveMaximum\":1201}", -36,
         1200, 12},
        {"{\"type\":\"number\",\"multipleOf\":25,\"minimum\":-0.5,\"maximum\":999.5}", 0, 999, 25},
        {"{\"type\":\"integer\",\"multipleOf\":1000,\"minimum\":-99999,\"maximum\":99999}", -99999, 99999,
         1000},
        {"{\"type\":\"integer\",\"multipleOf\":997,\"minimum\":9007199254740000}", 9007199254740000,
         9007199254740992, 997},
        {"{\"type\":\"integer\",\"multipleOf\":3,\"maximum\":-9007199254740900}", -9007199254740992,
         -9007199254740900, 3},
        {"{\"type\":\"integer\",\"minimum\":-60,\"maximum\":60}", -60, 60, 1},
        /* past the old 1000: a power of 2, of 10 (given as 1e6), a product, 3999 (3 x 31 x 43) */
        {"{\"type\":\"integer\",\"multipleOf\":1024,\"minimum\":-5000,\"maximum\":70000}", -5000, 70000,
         1024},
        {"{\"type\":\"integer\",\"multipleOf\":1e6,\"minimum\":-3000000,\"maximum\":12000000}", -3000000,
         12000000, 1000000},
        {"{\"type\":\"integer\",\"multipleOf\":86400,\"minimum\":0,\"maximum\":900000}", 0, 900000, 86400},
        {"{\"type\":\"integer\",\"multipleOf\":3999,\"minimum\":-20000,\"maximum\":40000}", -20000, 40000,
         3999},
        /* the integers among the multiples of a fraction: of 0.5 all, of 2.5 those of 5 */
        {"{\"type\":\"integer\",\"multipleOf\":0.5,\"minimum\":-9,\"maximum\":9}", -9, 9, 1},
        {"{\"type\":\"integer\",\"multipleOf\":2.5,\"minimum\":-30,\"maximum\":30}", -30, 30, 5},
    };
    int bad = 0, n_doc = 0;
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        k3_grammar *g = NULL;
        if (compile(v, cs[i].sch, &g)) {
            printf("# %s: %s\n", cs[i].sch, k3_errmsg());
            bad++;
            continue;
        }
        long long from = cs[i].lo - 40, to = cs[i].hi + 40, step = to - from > 4000 ? (to - from) / 2000 : 1;
        for (long long x = from; x <= to; x += x < cs[i].lo + 40 || x > cs[i].hi - 80 ? 1 : step) {
            char t[6][40];
            int  complete, want = x >= cs[i].lo && x <= cs[i].hi && x % cs[i].k == 0;
            snprintf(t[0], sizeof t[0], "%lld", x);
            snprintf(t[1], sizeof t[1], "%s0%lld", x < 0 ? "-" : "", x < 0 ? -x : x);
            snprintf(t[2], sizeof t[2], "+%lld", x);
            snprintf(t[3], sizeof t[3], "%lld.0", x);
            snprintf(t[4], sizeof t[4], "%llde0", x);
            snprintf(t[5], sizeof t[5], "-%lld", x);
            for (int f = 0; f < 6; f++) {
                if (f == 5 && x != 0)
                    continue; /* "-0" */
                int got = feed_bytes(g, t[f], strlen(t[f]), &complete) == -1 && complete;
                n_doc++;
                if (got != (f == 0 && want)) {
                    if (bad++ < 5)
                        printf("# %s: %s %s\n", cs[i].sch, t[f], got ? "taken" : "refused");
                }
            }
        }
        k3_grammar_free(g);
    }
    T_CHECK(!bad,
            "integers under multipleOf and bounds: %d texts taken exactly when in range, a multiple and "
            "canonical (%d wrong)",
            n_doc, bad);
    k3_grammar *g  = NULL;
    k3_status   st = compile(v, "{\"type\":\"number\",\"multipleOf\":0.1}", &g);
    T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "\"multipleOf\" at #: 0.1 is no exact double") &&
                strstr(k3_errmsg(), "0.3 / 0.1 is 2.9999999999999996"),
            "a fraction that is no exact double is refused naming a multiple validators reject: %.200s",
            st ? k3_errmsg() : "it compiled");
    k3_grammar_free(g);
    g  = NULL;
    st = compile(v, "{\"properties\":{\"p\":{\"type\":\"number\",\"multipleOf\":0.01}}}", &g);
    T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "\"multipleOf\" at #/properties/p: 0.01 is") &&
                strstr(k3_errmsg(), "0.07 / 0.01 is 7.000000000000001"),
            "multipleOf 0.01 is refused with the multiple ajv rejects: %.200s",
            st ? k3_errmsg() : "it compiled");
    k3_grammar_free(g);
    g  = NULL; /* a prime past the node bound: refused with the count */
    st = compile(v, "{\"type\":\"integer\",\"multipleOf\":99991}", &g);
    T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "\"multipleOf\" at #: its multiples need") &&
                strstr(k3_errmsg(), "more than 65536"),
            "multipleOf 99991 is refused naming the node count: %.200s", st ? k3_errmsg() : "it compiled");
    k3_grammar_free(g);
    g  = NULL; /* 2^-20: an exact double, but of 20 fraction digits */
    st = compile(v, "{\"type\":\"number\",\"multipleOf\":9.5367431640625e-7}", &g);
    T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "more than 16 fraction digits"),
            "multipleOf 2^-20 is refused naming its digits: %.200s", st ? k3_errmsg() : "it compiled");
    k3_grammar_free(g);
    g  = NULL;
    st = compile(v, "{\"type\":\"number\",\"multipleOf\":0.5,\"minimum\":4503599627370497}", &g);
    T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "\"multipleOf\" at #: bounds beyond 2^53 units"),
            "a fractional multipleOf with bounds past 2^53 units is refused naming it: %.200s",
            st ? k3_errmsg() : "it compiled");
    k3_grammar_free(g);
    g  = NULL; /* multiples exist, but none within 2^53: refused, not "no document satisfies it" */
    st = compile(v, "{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":9007199254740993}", &g);
    T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "\"multipleOf\" at #: bounds beyond 2^53"),
            "multipleOf with bounds past 2^53 is refused naming it: %.120s",
            st ? k3_errmsg() : "it compiled");
    k3_grammar_free(g);
}

/* Numbers under a fractional multipleOf, with bounds: an exact double (0.25, 0.5, 0.375, 2.5), or
 * not (0.01, 0.1, 0.3, 1e-3: then the multiples validators take too, each listed): every X = x * 10^k
 * from 40 below the range to 40 above it is taken exactly when in range, a multiple (and, for the
 * second kind, one whose double over m's double is an integer, as ajv divides), written with the multipleOf's
 * k fraction digits ("0.50", "-2.75"); no other spelling is (trailing zeros trimmed or added, an exponent, a
 * leading zero, "-0.00"). Every text taken is a multiple in both readings: exactly (X a multiple of a) and as
 * ajv divides, in doubles (strtod(x) / m an integer). Fails on the old code, which refused every fraction. */
static void num_mod_exact(const k3_gvocab *v) {
    static const struct {
        const char *sch;
        long long   lo, hi, a; /* the X taken: [lo, hi], multiples of a */
        int         k;         /* fraction digits */
        double      m;
    } cs[] = {
        {"{\"type\":\"number\",\"multipleOf\":0.25,\"minimum\":-3,\"maximum\":10.1}", -300, 1010, 25, 2,
         0.25},
        {"{\"type\":\"number\",\"multipleOf\":0.5,\"exclusiveMinimum\":-0.5,\"exclusiveMaximum\":99.5}", -4,
         994, 5, 1, 0.5},
        {"{\"type\":\"number\",\"multipleOf\":0.375,\"minimum\":0.1,\"maximum\":5}", 100, 5000, 375, 3,
         0.375},
        {"{\"type\":\"number\",\"multipleOf\":2.5,\"minimum\":-1000,\"maximum\":1000}", -10000, 10000, 25, 1,
         2.5},
        {"{\"multipleOf\":1.25e-1,\"maximum\":3}", -99999999999, 3000, 125, 3, 0.125}, /* no type: numbers */
        /* no exact double: between bounds, the multiples validators take too */
        {"{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0,\"maximum\":100}", 0, 10000, 1, 2, 0.01},
        {"{\"type\":\"number\",\"multipleOf\":0.1,\"minimum\":-5,\"maximum\":5}", -50, 50, 1, 1, 0.1},
        {"{\"type\":\"number\",\"multipleOf\":0.3,\"exclusiveMinimum\":0,\"maximum\":30}", 1, 300, 3, 1, 0.3},
        {"{\"type\":\"number\",\"multipleOf\":1e-3,\"minimum\":-2,\"maximum\":2}", -2000, 2000, 1, 3, 0.001},
    };
    int bad = 0, n_doc = 0, taken = 0, both = 0, left = 0;
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        k3_grammar *g = NULL;
        if (compile(v, cs[i].sch, &g)) {
            printf("# %s: %s\n", cs[i].sch, k3_errmsg());
            bad++;
            continue;
        }
        long long p = 1, from = cs[i].lo - 40, to = cs[i].hi + 40;
        for (int j = 0; j < cs[i].k; j++)
            p *= 10;
        if (from < -20000)
            from = -20000; /* below the range only: enough of it */
        for (long long x = from; x <= to; x++) {
            char        t[7][48];
            long long   ax = x < 0 ? -x : x;
            int         complete, want = x >= cs[i].lo && x <= cs[i].hi && x % cs[i].a == 0;
            const char *sg = x < 0 ? "-" : "";
            snprintf(t[0], sizeof t[0], "%s%lld.%0*lld", sg, ax / p, cs[i].k, ax % p);
            snprintf(t[1], sizeof t[1], "%s%lld.%0*lld0", sg, ax / p, cs[i].k, ax % p);
            snprintf(t[2], sizeof t[2], "%s%lld.%0*lld", sg, ax / p, cs[i].k - 1, ax % p / 10);
            snprintf(t[3], sizeof t[3], "%s%lld%0*llde-%d", sg, ax / p, cs[i].k, ax % p, cs[i].k);
            snprintf(t[4], sizeof t[4], "%s0%lld.%0*lld", sg, ax / p, cs[i].k, ax % p);
            snprintf(t[5], sizeof t[5], "-%lld.%0*lld", ax / p, cs[i].k, ax % p); /* "-0.00" for 0 */
            snprintf(t[6], sizeof t[6], "%lld", ax / p);
            double qa = strtod(t[0], NULL) / cs[i].m; /* as ajv divides */
            if (want && !(qa == floor(qa) && fabs(qa) < 1e21))
                want = 0, left++; /* an exact multiple validators reject: left out */
            for (int f = 0; f < 7; f++) {
                if ((f == 2 && cs[i].k == 1) || (f == 5 && x != 0) || (f == 6 && ax % p))
                    continue; /* no shorter form; -0 only; an integer only where x is one */
                int got = feed_bytes(g, t[f], strlen(t[f]), &complete) == -1 && complete;
                n_doc++;
                if (got != (f == 0 && want) && bad++ < 5)
                    printf("# %s: %s %s\n", cs[i].sch, t[f], got ? "taken" : "refused");
                if (got) { /* ajv's reading too: the double quotient is an integer */
                    double q = strtod(t[f], NULL) / cs[i].m;
                    taken++, both += q == floor(q) && fabs(q) < 1e21;
                }
            }
        }
        k3_grammar_free(g);
    }
    T_CHECK(!bad && n_doc > 40000,
            "numbers under a fractional multipleOf and bounds: %d texts taken exactly when in range, a "
            "multiple and written with its fraction digits (%d wrong)",
            n_doc, bad);
    T_CHECK(taken > 1000 && both == taken,
            "every one of the %d taken is a multiple as ajv divides too (%d are)", taken, both);
    T_CHECK(left > 100, "under 0.01, 0.1, 0.3 and 1e-3, %d exact multiples validators reject are left out",
            left);
}

/* uniqueItems: true over items of a few values: every array of up to 4 elements drawn from the
 * listed texts (some outside the items' values), separated by "," or ", ", is taken exactly when
 * its elements are items' values, pairwise distinct as a validator compares them (1 and 1.0 are
 * one value), and their count is within minItems and maxItems. Fails on the old code, which refused
 * uniqueItems: true; plus the refusals of items that are not a few values, naming the path. */
static void unique_exact(const k3_gvocab *v) {
    static const struct {
        const char *sch;
        const char *el[4]; /* candidate element texts */
        int         cl[4]; /* their value classes (-1: not an items value) */
        int         mn, mx;
    } cs[] = {
        {"{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"uniqueItems\":true,\"minItems\":1,"
         "\"maxItems\":2}",
         {"\"a\"", "\"b\"", "\"c\"", "\"d\""},
         {0, 1, 2, -1},
         1,
         2},
        {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"uniqueItems\":true}",
         {"true", "false", "null", "0"},
         {0, 1, -1, -1},
         0,
         9},
        {"{\"type\":\"array\",\"items\":{\"enum\":[1,1.0,2,[1]]},\"uniqueItems\":true}",
         {"1", "1.0", "2", "[1]"},
         {0, 0, 1, 2},
         0,
         9},
        {"{\"$defs\":{\"e\":{\"enum\":[\"x\",\"y\",null]}},\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/"
         "e\"},"
         "\"uniqueItems\":true,\"minItems\":2}",
         {"\"x\"", "\"y\"", "null", "\"z\""},
         {0, 1, 2, -1},
         2,
         9},
    };
    int bad = 0, n_doc = 0, n_taken = 0;
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        k3_grammar *g = NULL;
        if (compile(v, cs[i].sch, &g)) {
            printf("# %s: %s\n", cs[i].sch, k3_errmsg());
            bad++;
            continue;
        }
        for (int len = 0; len <= 4; len++) {
            int pick[4] = {0}, total = 1;
            for (int k = 0; k < len; k++)
                total *= 4;
            for (int code = 0; code < total; code++) {
                char doc[128];
                int  at = 0, want = len >= cs[i].mn && len <= cs[i].mx, used = 0, complete;
                for (int k = 0, x = code; k < len; k++, x /= 4)
                    pick[k] = x % 4;
                doc[at++] = '[';
                for (int k = 0; k < len; k++) {
                    int c = cs[i].cl[pick[k]];
                    want &= c >= 0 && !(used >> c & 1);
                    used |= c >= 0 ? 1 << c : 0;
                    at += snprintf(doc + at, sizeof doc - (size_t)at, "%s%s",
                                   k ? (code & 1 ? ", " : ",") : "", cs[i].el[pick[k]]);
                }
                doc[at++] = ']';
                int got   = feed_bytes(g, doc, (size_t)at, &complete) == -1 && complete;
                n_doc++, n_taken += got;
                if (got != want && bad++ < 5)
                    printf("# %.*s under %s: %s\n", at, doc, cs[i].sch, got ? "taken" : "refused");
            }
        }
        k3_grammar_free(g);
    }
    T_CHECK(!bad && n_taken > 30,
            "uniqueItems: %d arrays taken exactly when distinct items' values within the "
            "counts (%d taken, %d wrong)",
            n_doc, n_taken, bad);
    static const char *const refused[][2] = {
        {"{\"properties\":{\"t\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}}}",
         "\"uniqueItems\" at #/properties/t: over items that are not a few values"},
        {"{\"type\":\"array\",\"prefixItems\":[{\"const\":1}],\"items\":{\"enum\":[1,2]},\"uniqueItems\":"
         "true}",
         "\"uniqueItems\" at #: beside prefixItems"},
        {"{\"type\":\"array\",\"items\":{\"enum\":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},"
         "\"uniqueItems\":"
         "true}",
         "\"uniqueItems\" at #: over more than 16 distinct values"},
        {"{\"type\":\"array\",\"uniqueItems\":1}", "\"uniqueItems\" at #: expected a boolean"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        k3_grammar *g  = NULL;
        k3_status   st = compile(v, refused[i][0], &g);
        T_CHECK(st && strstr(k3_errmsg(), refused[i][1]), "uniqueItems refused: %s -> %.160s", refused[i][0],
                st ? k3_errmsg() : "it compiled");
        k3_grammar_free(g);
    }
}

/* Number bounds drawn at random (1 to 20 fraction digits, up to 16 integer digits, near powers
 * of two where doubles are sparse), each keyword with its own bound: every candidate near a
 * bound (its digits, one unit of the 16th fraction digit either side, of coarser digits, trailing
 * zeros trimmed or kept) is taken by the grammar exactly when strtod's double of it (JSON.parse's,
 * ajv's) passes the bound's double. Fails on a bound rounded to an integer (minimum 0.5 refused
 * 0.5), a decimal comparison (exclusiveMaximum 2.25 took 2.2499999999999999, the double 2.25),
 * and a tie rounded the wrong way. */
__extension__ typedef __int128 num128; /* a number in units of 10^-16 */
#define E16 10000000000000000LL

static void num_bounds_exact(const k3_gvocab *v) {
    static const char *const key[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    int                      n_sch = 0, n_doc = 0, bad = 0, n_in = 0;
    for (int r = 0; r < 300; r++) {
        char bt[2][64], sch[256];
        int  kk[2] = {(int)rnd(2), 2 + (int)rnd(2)}, lone = (int)rnd(4); /* lone 0/1: that bound only */
        for (int j = 0; j < 2; j++) { /* the bound's text: sign, integer digits, fraction digits */
            int  ni = rnd(3) == 0 ? 16 : (int)rnd(4), nf = 1 + (int)rnd(20);
            char ip[24] = "0", *p = bt[j];
            if (ni == 16)
                snprintf(ip, sizeof ip, "%lld", (1LL << (52 + rnd(2))) + (long long)rnd(5) - 2);
            else
                for (int k = 0; k < ni; k++)
                    ip[k] = (char)((k ? '0' : '1') + rnd(k ? 10 : 9)), ip[k + 1] = 0;
            p += sprintf(p, "%s%s.", rnd(3) == 0 ? "-" : "", ip);
            for (int k = 0; k < nf; k++)
                *p++ = (char)(rnd(4) == 0 ? '0' + rnd(10) : k + 1 == nf ? '5' : '0' + rnd(2) * 9);
            *p = 0;
        }
        if (strtod(bt[0], NULL) > strtod(bt[1], NULL) && lone > 1) { /* lower first */
            char t[64];
            memcpy(t, bt[0], sizeof t), memcpy(bt[0], bt[1], sizeof t), memcpy(bt[1], t, sizeof t);
        }
        if (lone == 0)
            snprintf(sch, sizeof sch, "{\"type\":\"number\",\"%s\":%s}", key[kk[0]], bt[0]);
        else if (lone == 1)
            snprintf(sch, sizeof sch, "{\"type\":\"number\",\"%s\":%s}", key[kk[1]], bt[1]);
        else
            snprintf(sch, sizeof sch, "{\"type\":\"number\",\"%s\":%s,\"%s\":%s}", key[kk[0]], bt[0],
                     key[kk[1]], bt[1]);
        double      lo = strtod(bt[0], NULL), hi = strtod(bt[1], NULL);
        k3_grammar *g  = NULL;
        k3_status   st = compile(v, sch, &g);
        if (st && (st != K3_ERR_ARG || !strstr(k3_errmsg(), "compiles to nothing"))) {
            printf("# %s: %s\n", sch, k3_errmsg());
            bad++;
            continue;
        } /* compiled to nothing: then no candidate may be valid */
        n_sch++;
        for (int j = 0; j < 2; j++) { /* candidates around each bound's text */
            const char *b   = bt[j];
            const char *dot = strchr(b, '.');
            char        ipart[40];
            int         neg = b[0] == '-';
            snprintf(ipart, sizeof ipart, "%.*s", (int)(dot - b - neg), b + neg);
            char frac[17];
            snprintf(frac, sizeof frac, "%.16s", dot + 1);
            for (size_t k = strlen(frac); k < 16; k++)
                frac[k] = '0';
            frac[16] = 0;
            /* the 16-digit magnitude as an integer of 10^-16 units, moved by delta */
            static const long long step[] = {0,   1,    -1,    2,         -2,         3,   -3,  10,
                                             -10, 1000, -1000, 100000000, -100000000, E16, -E16};
            for (size_t d = 0; d < sizeof step / sizeof *step; d++) {
                num128 m = (num128)atoll(ipart) * E16 + atoll(frac);
                m        = (neg ? -m : m) + step[d];
                num128 a = m < 0 ? -m : m;
                char   doc[64];
                int    l = snprintf(doc, sizeof doc, "%s%lld.%016lld", m < 0 ? "-" : "", (long long)(a / E16),
                                    (long long)(a % E16));
                if (atoll(doc + (m < 0)) >= E16)
                    continue;
                int trim = (int)rnd(3); /* keep the zeros, trim them, or trim and drop ".": all one number */
                while (trim && doc[l - 1] == '0' && doc[l - 2] != '.')
                    doc[--l] = 0;
                if (trim == 2 && doc[l - 1] == '0' && doc[l - 2] == '.')
                    doc[l -= 2] = 0;
                double x    = strtod(doc, NULL);
                int    want = 1, complete = 0;
                for (int q = 0; q < 2; q++) {
                    if ((lone == 0 && q == 1) || (lone == 1 && q == 0))
                        continue;
                    double y = q ? hi : lo;
                    int    k = kk[q];
                    want &= k == 0 ? x >= y : k == 1 ? x > y : k == 2 ? x <= y : x < y;
                }
                int got = g && feed_bytes(g, doc, (size_t)l, &complete) == -1 && complete;
                n_doc++;
                n_in += want;
                if (got != want && bad++ < 8)
                    printf("# %s under %s: %s, wanted %s\n", doc, sch, got ? "taken" : "refused",
                           want ? "taken" : "refused");
            }
        }
        k3_grammar_free(g);
    }
    T_CHECK(bad == 0 && n_sch > 200 && n_in > 1000 && n_doc - n_in > 1000,
            "number bounds are exact as strtod (ajv's JSON.parse) reads them: %d schemas, %d numbers near "
            "their bounds (%d valid), %d taken or refused wrongly",
            n_sch, n_doc, n_in, bad);
}

/* A call of tool f whose one argument s (required) has schema arg and the raw value val: 1 when
 * the tool-call grammar takes the whole block and then allows the end of message, 0 when not,
 * -1 when it does not compile (k3_errmsg says why). */
static int tool_value(const k3_gvocab *v, const k3_tok *tok, const char *arg, const char *val) {
    int32_t O = k3_tok_special(tok, "<|open|>"), S = k3_tok_special(tok, "<|sep|>"),
            C = k3_tok_special(tok, "<|close|>"), E = k3_tok_special(tok, "<|end_of_msg|>");
    k3_buf      tools = {0};
    k3_grammar *g;
    k3_gmatch  *m;
    k3_buf_printf(&tools,
                  "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                  "\"properties\":{\"s\":%s},\"required\":[\"s\"]}}}]",
                  arg);
    k3_status st = k3_grammar_tool_calls(v, tools.p, NULL, 1, 0, NULL, &g);
    free(tools.p);
    if (st)
        return -1;
    const char *const text[] = {"response",
                                "tools",
                                "call tool=\"f\" index=\"1\"",
                                "argument key=\"s\" type=\"string\"",
                                val,
                                "argument",
                                "call",
                                "tools"};
    /* the script: specials (O S C) and the texts in order (t: the next text) */
    static const char script[] = "CtSOtSOtSOtStCtSCtSCtS";
    int               ok       = !k3_gmatch_new(g, &m);
    for (size_t i = 0, t = 0; ok && i < sizeof script - 1; i++)
        if (script[i] == 't') {
            const char *x = text[t++];
            ok            = !*x || !k3_gmatch_accept_bytes(m, x, strlen(x));
        } else
            ok = !k3_gmatch_accept(m, script[i] == 'O' ? O : script[i] == 'S' ? S : C);
    ok = ok && k3_gmatch_allows(m, E);
    k3_gmatch_free(m);
    k3_grammar_free(g);
    return ok;
}

/* A meter's charge that grants up to cap bytes in all. */
typedef struct meter_cap {
    k3_gmeter m;
    size_t    cap, taken;
} meter_cap;

static int meter_take(void *ud, size_t n) {
    meter_cap *c = ud;
    if (c->taken + n > c->cap)
        return 1;
    c->taken += n;
    return 0;
}

/* Schema s compiled twice: under a meter that grants all it asks (*all; *s1 its status, *bytes
 * the grammar's size, 0 when refused) and under one that grants cap bytes in all (*lim). Returns
 * the second compile's status (its message in k3_errmsg). */
static k3_status metered(const k3_gvocab *v, const char *s, size_t cap, meter_cap *all, meter_cap *lim,
                         k3_status *s1, size_t *bytes) {
    k3_grammar *g1 = NULL, *g2 = NULL;
    *all   = (meter_cap){.cap = SIZE_MAX};
    *lim   = (meter_cap){.cap = cap};
    all->m = (k3_gmeter){.charge = meter_take, .ud = all};
    lim->m = (k3_gmeter){.charge = meter_take, .ud = lim};
    *s1    = k3_grammar_json_schema(v, s, strlen(s), &all->m, &g1);
    *bytes = *s1 ? 0 : k3_grammar_bytes(g1);
    k3_grammar_free(g1);
    k3_status s2 = k3_grammar_json_schema(v, s, strlen(s), &lim->m, &g2);
    if (g2) /* a grammar the capped meter let through: the caller's check fails on s2 == K3_OK */
        k3_grammar_free(g2);
    return s2;
}

int main(int argc, char **argv) {
    if (argc == 5 && (!strcmp(argv[1], "--walk") || !strcmp(argv[1], "--walk-tools"))) { /* t-grammar.sh */
        int tools = !strcmp(argv[1], "--walk-tools");
        walk_out(argv[2], argv[3], atoi(argv[4]), tools, tools ? 10 : 40);
        return t_done();
    }
    if (argc == 4 && !strcmp(argv[1], "--keep")) { /* t-grammar.sh */
        keep_out(argv[2], argv[3]);
        return t_done();
    }
    if (argc == 2 && !strcmp(argv[1], "--release-vocab")) { /* t-grammar.sh */
        exact_release();
        return t_done();
    }
    k3_tok    *tok;
    k3_gvocab *v;
    if (k3_tok_load("models/k3-nano", NULL, &tok)) {
        T_SKIP("models/k3-nano: %s", k3_errmsg());
        return t_done();
    }
    int32_t nv = k3_tok_n_vocab(tok), eom = k3_tok_special(tok, "<|end_of_msg|>");
    T_CHECK(!k3_gvocab_new(tok, nv, -1, &v), "vocabulary of k3-nano (%d ids)", (int)nv);

    int n_edge = (int)(sizeof edge_docs / sizeof *edge_docs), ok_edge = edge_run(v);
    T_CHECK(ok_edge == n_edge, "%d of %d edge documents accepted or rejected as JSON Schema says", ok_edge,
            n_edge);

    { /* bounds that hold numbers, none of them writable without an exponent: refused naming the
       * bound (it was "no document satisfies it", which is not so: 1e-21 does) */
        k3_grammar *g = NULL;
        k3_status   st =
            compile(v, "{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1e-20}", &g);
        T_CHECK(st == K3_ERR_UNSUPPORTED &&
                    strstr(k3_errmsg(), "\"exclusiveMinimum\" at #: bounds that hold numbers"),
                "bounds that hold only numbers of more than 16 fraction digits are refused: %.200s",
                st ? k3_errmsg() : "");
        k3_grammar_free(g);
    }

    { /* an $id below the root is a new base: "#/$defs/t" under it names its own $defs (ajv: b
       * an integer), but the grammar read the root's (b a string); refused, at the root kept */
        k3_grammar *g  = NULL;
        k3_status   st = compile(
              v,
              "{\"$id\":\"http://x/root\",\"$defs\":{\"t\":{\"type\":\"string\"}},\"type\":\"object\","
                "\"properties\":{\"a\":{\"$id\":\"http://x/sub\",\"$defs\":{\"t\":{\"type\":\"integer\"}},"
                "\"type\":\"object\",\"properties\":{\"b\":{\"$ref\":\"#/$defs/t\"}},\"required\":[\"b\"]}},"
                "\"required\":[\"a\"]}",
              &g);
        T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "\"$id\" at #/properties/a: below the root"),
                "an $id below the root is refused naming it: %.160s", st ? k3_errmsg() : "it compiled");
        k3_grammar_free(g);
        g            = NULL;
        st           = compile(v, "{\"$id\":\"http://x/root\",\"enum\":[1,5],\"maximum\":3}", &g);
        int complete = 0;
        T_CHECK(st == K3_OK && feed_bytes(g, "1", 1, &complete) == -1 && complete &&
                    feed_bytes(g, "5", 1, &complete) == 0,
                "an $id at the root is kept (with an enum checked against maximum): %s",
                st ? k3_errmsg() : "");
        k3_grammar_free(g);
    }

    { /* oneOf of objects told apart by a required property of distinct string constants (a
       * Pydantic discriminated union, with OpenAPI's discriminator beside it): it was refused as
       * "branches that may match the same document"; enum values in common still are */
        static const char uni[] =
            "{\"$defs\":{\"Cat\":{\"type\":\"object\",\"properties\":{\"pet_type\":{\"const\":\"ca"
            "t\",\"title\":\"Pet Type\"},\"meows\":{\"type\":\"integer\",\"minimum\":0,\"maximum\""
            ":9}},\"required\":[\"pet_type\",\"meows\"],\"title\":\"Cat\"},\"Dog\":{\"type\":\"obj"
            "ect\",\"properties\":{\"pet_type\":{\"enum\":[\"dog\",\"wolf\"]},\"barks\":{\"type\":"
            "\"number\",\"minimum\":0}},\"required\":[\"pet_type\",\"barks\"],\"title\":\"Dog\"}}"
            ",\"type\":\"object\",\"properties\":{\"pet\":{\"oneOf\":[{\"$ref\":\"#/$defs/Cat\"},"
            "{\"$ref\":\"#/$defs/Dog\"}],\"discriminator\":{\"propertyName\":\"pet_type\",\"ma"
            "pping\":{\"cat\":\"#/$defs/Cat\",\"dog\":\"#/$defs/Dog\"}},\"title\":\"Pet\"}},\"req"
            "uired\":[\"pet\"],\"title\":\"Model\"}";
        k3_grammar *g        = NULL;
        int         complete = 0;
        k3_status   st       = compile(v, uni, &g);
        T_CHECK(st == K3_OK &&
                    feed_bytes(g, "{\"pet\":{\"pet_type\":\"cat\",\"meows\":3}}", 36, &complete) == -1 &&
                    complete &&
                    feed_bytes(g, "{\"pet\":{\"pet_type\":\"wolf\",\"barks\":1.5}}", 39, &complete) == -1 &&
                    complete &&
                    feed_bytes(g, "{\"pet\":{\"pet_type\":\"cat\",\"barks\":1}}", 35, &complete) != -1,
                "a discriminated oneOf compiles, takes a cat and a wolf, refuses a cat that barks: %s",
                st ? k3_errmsg() : "");
        k3_grammar_free(g);
        g  = NULL;
        st = compile(
            v,
            "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]}},\"required\":["
            "\"k\"]},"
            "{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"b\",\"c\"]}},\"required\":[\"k\"]}]}",
            &g);
        T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "\"oneOf\" at #"),
                "a oneOf whose tags share a value is still refused: %.100s",
                st ? k3_errmsg() : "it compiled");
        k3_grammar_free(g);
    }

    /* ---- the property test ---- */
    int n_schema = 0, n_doc = 0, f_byte = 0, f_chunk = 0, f_enc = 0, f_rand = 0, f_ctl = 0, f_del = 0,
        f_req = 0;
    int n_req = 0, n_del = 0;
    for (int si = 0; si < 150; si++) {
        sn    *s  = gen_schema(0);
        k3_buf st = {0};
        schema_text(s, &st);
        k3_grammar *g;
        if (compile(v, st.p, &g)) {
            T_CHECK(0, "random schema %d compiles: %s (%s)", si, k3_errmsg(), st.p);
            free(st.p), free_schema(s);
            continue;
        }
        n_schema++;
        for (int di = 0; di < 8; di++) {
            k3_buf d = {0};
            doc_text(s, &d);
            n_doc++;
            int  complete;
            long bad = feed_bytes(g, d.p, d.n, &complete);
            if (bad != -1 || !complete) {
                if (!f_byte++)
                    printf("# byte by byte: rejected at %ld (complete %d): %s\n  schema %s\n", bad, complete,
                           d.p, st.p);
            }
            /* random chunks */
            k3_gmatch *m;
            k3_gmatch_new(g, &m);
            int ok = 1;
            for (size_t i = 0; i < d.n && ok;) {
                size_t c = 1 + rnd(7);
                if (c > d.n - i)
                    c = d.n - i;
                ok = k3_gmatch_accept_bytes(m, d.p + i, c) == K3_OK;
                i += c;
            }
            if (!ok || !k3_gmatch_complete(m))
                f_chunk++;
            k3_gmatch_free(m);
            /* the tokenizer's ids and a random tokenisation, each id in the mask */
            k3_ids ids = {0};
            k3_tok_encode(tok, d.p, d.n, 0, &ids);
            int r = feed_ids(g, v, ids.v, ids.n, eom);
            if (r && !f_enc++)
                printf("# encoded ids: failed at %d: %s\n", r, d.p);
            k3_ids_free(&ids);
            int32_t *rid = malloc(d.n * sizeof *rid);
            size_t   nr  = random_ids(tok, d.p, d.n, rid);
            if (!nr || feed_ids(g, v, rid, nr, eom))
                f_rand++;
            free(rid);
            /* a control byte inserted at p: rejected at exactly p */
            size_t p  = rnd((uint32_t)d.n + 1);
            k3_buf mu = {0};
            k3_buf_add(&mu, d.p, p);
            k3_buf_add(&mu, "\x01", 1);
            k3_buf_add(&mu, d.p + p, d.n - p);
            if (feed_bytes(g, mu.p, mu.n, &complete) != (long)p && !f_ctl++)
                printf("# control byte at %zu not rejected there: %s\n", p, d.p);
            /* the last closing bracket deleted: never complete */
            if (d.p[d.n - 1] == '}' || d.p[d.n - 1] == ']') {
                n_del++;
                if (feed_bytes(g, d.p, d.n - 1, &complete) == -1 && complete)
                    f_del++;
            }
            free(mu.p);
            free(d.p);
        }
        /* a required key missing: an object whose first member is required, written without it */
        if (s->t == S_OBJ && s->req[0]) {
            k3_buf d     = {0};
            int    saved = s->req[0];
            s->req[0]    = 0;
            for (int tries = 0; tries < 4; tries++) {
                d.n = 0;
                doc_text(s, &d);
                char key[16];
                snprintf(key, sizeof key, "\"%s\"", names[0]);
                if (strstr(d.p, key) == d.p + 1)
                    continue; /* this draw kept it */
                int  complete;
                long bad = feed_bytes(g, d.p, d.n, &complete);
                n_req++;
                if (bad == -1 && complete)
                    f_req++;
                break;
            }
            s->req[0] = saved;
            free(d.p);
        }
        k3_grammar_free(g);
        free(st.p);
        free_schema(s);
    }
    T_CHECK(n_schema == 150, "150 random schemas compile (%d did)", n_schema);
    T_CHECK(f_byte == 0, "%d valid documents accepted byte by byte and complete (%d failed)", n_doc, f_byte);
    T_CHECK(f_chunk == 0, "the same documents accepted in random chunks (%d failed)", f_chunk);
    T_CHECK(f_enc == 0,
            "as the tokenizer encodes them, every id in the mask, the end only when complete (%d failed)",
            f_enc);
    T_CHECK(f_rand == 0, "under a random tokenisation, every id in the mask (%d failed)", f_rand);
    T_CHECK(f_ctl == 0, "a control byte inserted anywhere is rejected at exactly its byte (%d missed)",
            f_ctl);
    T_CHECK(n_del > 0 && f_del == 0, "a deleted closing bracket never completes (%d of %d did)", f_del,
            n_del);
    T_CHECK(n_req > 0 && f_req == 0, "a missing required key never completes (%d of %d did)", f_req, n_req);

    /* ---- fixed cases ---- */
    k3_grammar *g = NULL;
    k3_status   st;
    st = compile(
        v,
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"contentEncoding\":\"base64\"}}}",
        &g);
    T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "\"contentEncoding\"") &&
                strstr(k3_errmsg(), "#/properties/a"),
            "an unsupported keyword is refused naming it and its path: %s", k3_errmsg());
    st = compile(v, "{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", &g);
    T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "lookaround"),
            "a lookahead pattern is refused: %s", k3_errmsg());
    st = compile(v, "{\"enum\":[]}", &g);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "nothing"), "\"enum\": [] compiles to nothing: %s",
            k3_errmsg());
    st = compile(
        v,
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":5,\"maximum\":1}},"
        "\"required\":[\"a\"]}",
        &g);
    T_CHECK(st == K3_ERR_ARG, "a required integer with an empty range compiles to nothing: %s", k3_errmsg());
    st =
        compile(v,
                "{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"enum\":[]},{\"type\":\"null\"}]}},"
                "\"required\":[\"a\"],\"additionalProperties\":false}",
                &g);
    T_CHECK(st == K3_OK, "an anyOf with an empty branch compiles (the branch is pruned)");
    if (!st) {
        int complete;
        T_CHECK(feed_bytes(g, "{\"a\":null}", 10, &complete) == -1 && complete,
                "... and accepts the other one");
        k3_grammar_free(g);
    }
    st = compile(v, "{\"type\":\"number\",\"minimum\":0.75,\"exclusiveMaximum\":0.75}", &g);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "compiles to nothing"),
            "number bounds [0.75, 0.75) admit nothing: %s", st ? k3_errmsg() : "it compiled");
    if (!st)
        k3_grammar_free(g);
    st = compile(v, "{\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"^x\"}}}",
                 &g);
    T_CHECK(st == K3_ERR_UNSUPPORTED &&
                strstr(k3_errmsg(), "\"format\" at #/properties/d: no string of the part of the format"),
            "a format no string of which matches the pattern beside it is refused naming both: %s",
            st ? k3_errmsg() : "it compiled");
    if (!st)
        k3_grammar_free(g);
    num_bounds_exact(v);
    int_mod_exact(v);
    num_mod_exact(v);
    unique_exact(v);
    st = compile(v, "{\"type\":\"strin\"}", &g);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "\"type\" at #"), "a misspelt type is named: %s",
            k3_errmsg());
    st = compile(v, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":[]}}}", &g);
    T_CHECK(st == K3_ERR_ARG &&
                strstr(k3_errmsg(), "\"type\" at #/properties/a: expected a type or a non-empty list"),
            "an empty type list is refused (it was any value; ajv refuses the schema): %s",
            st ? k3_errmsg() : "it compiled");
    if (!st)
        k3_grammar_free(g);
    st = compile(v, "{\"type\":", &g);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "not JSON"), "a schema that is not JSON: %s",
            k3_errmsg());
    { /* nested past the parser's depth: the message is the parser's, once (it was written over
       * itself: "json schema: not JSON: json schema: not JSON: o deeply at byte 2569") */
        k3_buf d = {0};
        for (int k = 0; k < 600; k++)
            puts_(&d, "{\"anyOf\":[");
        puts_(&d, "{}");
        for (int k = 0; k < 600; k++)
            puts_(&d, "]}");
        st                = compile(v, d.p, &g);
        const char *m     = k3_errmsg();
        const char *again = strstr(m, "not JSON") ? strstr(strstr(m, "not JSON") + 1, "not JSON") : NULL;
        T_CHECK(st == K3_ERR_ARG &&
                    !strncmp(m, "json schema: not JSON: invalid JSON: nested too deeply at byte ", 63) &&
                    !again,
                "a schema nested 1,200 deep: %s", m);
        free(d.p);
    }
    for (int deep = 100000; deep >= 64; deep = deep == 64 ? 0 : 64) {
        /* a pattern's groups nested 100,000 deep: the parser recursed per group (a crash: the
         * stack); 64 deep compiles */
        k3_buf d = {0};
        puts_(&d, "{\"type\":\"string\",\"pattern\":\"^");
        for (int k = 0; k < deep; k++)
            puts_(&d, "(");
        puts_(&d, "a");
        for (int k = 0; k < deep; k++)
            puts_(&d, ")");
        puts_(&d, "$\"}");
        int complete = 0;
        st           = compile(v, d.p, &g);
        if (deep > 64)
            T_CHECK(st == K3_ERR_UNSUPPORTED &&
                        strstr(k3_errmsg(), "\"pattern\" at #: groups nested more than 64 deep"),
                    "a pattern nested 100,000 deep is refused: %.120s", k3_errmsg());
        else
            T_CHECK(st == K3_OK && feed_bytes(g, "\"a\"", 3, &complete) == -1 && complete,
                    "... 64 deep compiles and takes \"a\": %s", st ? k3_errmsg() : "");
        k3_grammar_free(g);
        free(d.p);
    }
    { /* bounds that admit nothing: it wrote exactly maxLength (maxItems) items, fewer than the
       * minimum, documents that do not validate; now nothing, and an anyOf keeps its other branch */
        static const char *const none[] = {
            "{\"type\":\"string\",\"minLength\":5,\"maxLength\":3}",
            "{\"type\":\"array\",\"minItems\":5,\"maxItems\":3}",
            "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"null\"}],\"items\":false,\"minItems\":3}"};
        for (size_t k = 0; k < sizeof none / sizeof *none; k++) {
            st = compile(v, none[k], &g);
            T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "compiles to nothing"),
                    "%s compiles to nothing: %s", none[k], st ? k3_errmsg() : "it compiled");
            k3_grammar_free(g);
        }
        static const char either[] =
            "{\"anyOf\":[{\"type\":\"string\",\"minLength\":5,\"maxLength\":3},{\"type\":\"null\"}]}";
        int complete = 0;
        st           = compile(v, either, &g);
        T_CHECK(st == K3_OK && feed_bytes(g, "\"abcde\"", 7, &complete) == 0 &&
                    feed_bytes(g, "null", 4, &complete) == -1 && complete,
                "... in an anyOf, the other branch only: %s", st ? k3_errmsg() : "");
        k3_grammar_free(g);
        /* integer bounds at 16 digits are exact (through a double, 9999999999999999 was 1e16:
         * minimum = maximum = it compiled to nothing) */
        static const char *const edge[][2] = {
            {"{\"type\":\"integer\",\"minimum\":9999999999999999,\"maximum\":9999999999999999}",
             "9999999999999999"},
            {"{\"type\":\"integer\",\"minimum\":-9999999999999999,\"maximum\":-9999999999999999}",
             "-9999999999999999"},
            /* a 17-digit maximum bounds nothing the grammar writes (it was refused) */
            {"{\"type\":\"integer\",\"maximum\":10000000000000000}", "9999999999999999"},
            {"{\"type\":\"integer\",\"maximum\":100000000000000000000}", "-9999999999999999"},
            {"{\"type\":\"number\",\"maximum\":1e300,\"minimum\":-1e300}", "-9999999999999999.5"}};
        for (size_t k = 0; k < sizeof edge / sizeof *edge; k++) {
            complete = 0;
            st       = compile(v, edge[k][0], &g);
            T_CHECK(st == K3_OK && feed_bytes(g, edge[k][1], strlen(edge[k][1]), &complete) == -1 && complete,
                    "%s takes %s: %s", edge[k][0], edge[k][1], st ? k3_errmsg() : "");
            k3_grammar_free(g);
        }
        /* above 2^53 ajv compares doubles: 9007199254740993 is JSON.parse's 9007199254740992, not
         * above 9007199254740992 (the grammar wrote it: ajv refused the document) */
        st = compile(v,
                     "{\"type\":\"integer\",\"exclusiveMinimum\":9007199254740992,\"exclusiveMaximum\":"
                     "9007199254740994}",
                     &g);
        T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "compiles to nothing"),
                "the one integer between exclusive bounds 2^53 and 2^53 + 2 is 2^53 to ajv: %s",
                st ? k3_errmsg() : "it compiled");
        k3_grammar_free(g);
        static const char *const past[] = {"{\"type\":\"integer\",\"minimum\":10000000000000000}",
                                           "{\"type\":\"integer\",\"maximum\":-1e17}",
                                           "{\"type\":\"number\",\"exclusiveMinimum\":1e300}"};
        for (size_t k = 0; k < sizeof past / sizeof *past; k++) {
            st = compile(v, past[k], &g);
            T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "beyond 16 digits"),
                    "%s (past every number written) is refused: %s", past[k],
                    st ? k3_errmsg() : "it compiled");
            k3_grammar_free(g);
        }
    }
    { /* a recursive schema nested past 128: the whole stack was bounded at 128, where the mask
       * (computed against an unknown stack) still allowed '[' and the matcher refused it (a 500
       * from the server for a schema that forces 140 levels) */
        st = compile(v,
                     "{\"$defs\":{\"a\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/"
                     "a\"}}},\"$ref\":\"#/$defs/a\"}",
                     &g);
        char doc[600];
        memset(doc, '[', 300);
        memset(doc + 300, ']', 300);
        int complete = 0;
        T_CHECK(st == K3_OK && feed_bytes(g, doc, 600, &complete) == -1 && complete,
                "arrays nested 300 deep in a recursive schema are taken: %s", st ? k3_errmsg() : "");
        k3_gmatch *m    = NULL;
        uint64_t  *mask = calloc((size_t)k3_gvocab_words(v), sizeof *mask);
        int        n_in = 0, n_bad = 0;
        if (!st && !k3_gmatch_new(g, &m) && !k3_gmatch_accept_bytes(m, doc, 200) && !k3_gmatch_mask(m, mask))
            for (int32_t id = 0; id < k3_gvocab_words(v) * 64; id++)
                if (bit(mask, id))
                    n_in++, n_bad += !k3_gmatch_allows(m, id);
        T_CHECK(n_in > 0 && n_bad == 0,
                "... and 200 deep every id in the mask is taken (%d in the mask, %d refused)", n_in, n_bad);
        k3_gmatch_free(m);
        free(mask);
        k3_grammar_free(g);
    }
    for (int n = 100; n <= 50000; n += 49900) {
        /* a chain of $refs: rules were written as they were met, a recursion per $ref (50,000:
         * a crash, the stack); now a loop. Each is an alias (a call in tail position): they push
         * no frame, so past 128 of them the document is still taken (it was refused) */
        k3_buf d = {0};
        puts_(&d, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
        for (int k = 0; k < n; k++)
            k3_buf_printf(&d, "\"d%d\":{\"$ref\":\"#/$defs/d%d\"},", k, k + 1);
        k3_buf_printf(&d, "\"d%d\":{\"type\":\"boolean\"}}}", n);
        int complete = 0;
        st           = compile(v, d.p, &g);
        T_CHECK(st == K3_OK && feed_bytes(g, "true", 4, &complete) == -1 && complete,
                "a chain of %d $refs compiles and takes true: %s", n, st ? k3_errmsg() : "");
        k3_grammar_free(g);
        free(d.p);
    }
    { /* repeating what may be empty: from one position every later copy is reachable without
       * reading (((a|){300}){300}: 90,000 at once; over 100 s for 8 tokens); refused, naming the
       * form that has no such path. *, + and ? of it stay (a loop, or one copy). */
        static const char *const nul[] = {"^(a|){1000}$", "^(a?b?){2}$", "^((a|){300}){300}$",
                                          "^(x(a|)){3}(()*){2}$"};
        for (size_t k = 0; k < sizeof nul / sizeof *nul; k++) {
            char sch[160];
            snprintf(sch, sizeof sch, "{\"type\":\"string\",\"pattern\":\"%s\"}", nul[k]);
            st = compile(v, sch, &g);
            T_CHECK(st == K3_ERR_UNSUPPORTED &&
                        strstr(k3_errmsg(), "a counted repetition of a group that can match "
                                            "the empty string"),
                    "pattern %s is refused: %s", nul[k], k3_errmsg());
            char whole[80]; /* the message quotes the pattern as written, its final $ too */
            snprintf(whole, sizeof whole, " of %s)", nul[k]);
            T_CHECK(strstr(k3_errmsg(), whole) != NULL, "... and quotes all of it (%s)", whole);
        }
        int c1 = 0, c2 = 0;
        st = compile(v, "{\"type\":\"string\",\"pattern\":\"^(a|)*(b?)+(c|)?(xd?){2}$\"}", &g);
        T_CHECK(st == K3_OK && feed_bytes(g, "\"aab\"", 5, &c1) == 4 &&
                    feed_bytes(g, "\"aabcxxd\"", 9, &c2) == -1 && c2,
                "... * + ? of a group that may be empty, and {2} of one that may not, compile and match: %s",
                st ? k3_errmsg() : "");
        k3_grammar_free(g);
    }
    { /* a few bytes that write out millions of nodes: refused at once, naming where (it took
       * 4 GB and 10 s, then "out of memory", or the machine's memory) */
        static const char *const big[][2] = {
            {"{\"type\":\"string\",\"pattern\":\"^([^x]{1000}){1000}$\"}", "too large at #:"},
            {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"^((a{1000}){1000}"
             "){1000}$\"}}}",
             "too large at #/properties/a:"},
            {"{\"type\":\"array\",\"prefixItems\":[{\"maxLength\":4096},{\"maxLength\":4096},{\"maxLength\":"
             "4096},"
             "{\"maxLength\":4096},{\"maxLength\":4096},{\"maxLength\":4096},{\"maxLength\":4096},{"
             "\"maxLength\":4096},"
             "{\"maxLength\":4096},{\"maxLength\":4096},{\"maxLength\":4096},{\"maxLength\":4096}]}",
             "too large at #/prefixItems/"},
        };
        for (size_t k = 0; k < sizeof big / sizeof *big; k++) {
            st = compile(v, big[k][0], &g);
            T_CHECK(st == K3_ERR_UNSUPPORTED && !g && strstr(k3_errmsg(), big[k][1]) &&
                        strstr(k3_errmsg(), "grammar nodes"),
                    "schema %zu of %zu that writes out millions of nodes is refused naming where: %s", k + 1,
                    sizeof big / sizeof *big, k3_errmsg());
        }
        /* a oneOf branch whose "required" is a string: the tagged-union check read the string as
         * an array (a NULL items pointer: the server crashed on the request) */
        st = compile(
            v,
            "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"t\":{\"const\":\"a\"}},\"required\":"
            "\"tt\"},{\"type\":\"object\",\"properties\":{\"t\":{\"const\":\"b\"}},\"required\":[\"t\"]}]}",
            &g);
        T_CHECK(st == K3_ERR_UNSUPPORTED && !g &&
                    strstr(k3_errmsg(), "\"oneOf\" at #: branches that may match"),
                "a oneOf branch whose required is a string is refused (as branches that may overlap), no "
                "crash: %s",
                st ? k3_errmsg() : "compiled");
        k3_grammar_free(g);
        st = compile(v, "{\"type\":\"string\",\"maxLength\":4096}", &g);
        T_CHECK(st == K3_OK, "one string of maxLength 4096 still compiles: %s", st ? k3_errmsg() : "");
        k3_grammar_free(g);
        /* a length bound beside a pattern multiplies the pattern's automaton (the reachable part):
         * past G_LEN_MAX_NODES the bound is refused naming the path; [^x] and \\w within 4096 fit */
        st = compile(v,
                     "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"^.*$\","
                     "\"maxLength\":4096}}}",
                     &g);
        T_CHECK(st == K3_ERR_UNSUPPORTED && !g && strstr(k3_errmsg(), "\"maxLength\" at #/properties/s") &&
                    strstr(k3_errmsg(), "131072 grammar nodes"),
                "a pattern of 36 nodes a character under maxLength 4096 is refused naming it: %s",
                st ? k3_errmsg() : "it compiled");
        k3_grammar_free(g);
        static const char *const fit[] = {
            "{\"type\":\"string\",\"pattern\":\"^[^x]*$\",\"maxLength\":4096}",
            "{\"type\":\"string\",\"pattern\":\"^\\\\w+@\\\\w+$\",\"minLength\":4096}",
            "{\"type\":\"string\",\"pattern\":\"^.*$\",\"maxLength\":800}"};
        for (size_t k = 0; k < sizeof fit / sizeof *fit; k++) {
            st = compile(v, fit[k], &g);
            T_CHECK(st == K3_OK, "%s compiles (%d nodes): %s", fit[k], k3_grammar_nodes(g),
                    st ? k3_errmsg() : "");
            k3_grammar_free(g);
        }
    }

    /* recursive $ref, 4 deep */
    static const char tree[] =
        "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
        "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"maxItems\":2}},"
        "\"required\":[\"v\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}";
    st = compile(v, tree, &g);
    T_CHECK(st == K3_OK, "a recursive $ref compiles");
    if (!st) {
        const char *ok = "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3,\"kids\":[{\"v\":4}]},{\"v\":5}]}]}";
        const char *bad = "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3,\"kids\":[{\"w\":4}]}]}]}";
        int         complete;
        T_CHECK(feed_bytes(g, ok, strlen(ok), &complete) == -1 && complete, "a tree 4 deep is accepted");
        T_CHECK(feed_bytes(g, bad, strlen(bad), &complete) == (long)(strstr(bad, "\"w\"") - bad + 1),
                "a wrong key 4 deep is rejected at its first byte");
        k3_grammar_free(g);
    }
    /* allOf of objects (a closed branch allows only its names), oneOf of distinct types, formats */
    st = compile(v,
                 "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                 "\"required\":[\"a\"]},"
                 "{\"properties\":{\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"],"
                 "\"additionalProperties\":false}]}",
                 &g);
    T_CHECK(st == K3_ERR_ARG && strstr(k3_errmsg(), "required \"a\" is excluded"),
            "allOf: a required name a closed branch excludes compiles to nothing: %s", k3_errmsg());
    st = compile(
        v,
        "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"z\":{\"type\":"
        "\"null\"}},"
        "\"required\":[\"a\"]},{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"}},"
        "\"required\":[\"b\"],\"additionalProperties\":false}]}",
        &g);
    T_CHECK(st == K3_OK, "allOf of two object schemas compiles");
    if (!st) {
        int complete;
        T_CHECK(feed_bytes(g, "{\"a\":1,\"b\":true}", 16, &complete) == -1 && complete,
                "... and takes both members");
        T_CHECK(feed_bytes(g, "{\"a\":1}", 7, &complete) == 6, "... and refuses to close without b");
        T_CHECK(feed_bytes(g, "{\"a\":1,\"z\"", 10, &complete) == 8,
                "... and refuses z, which the closed branch excludes");
        k3_grammar_free(g);
    }
    st = compile(v, "{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":2}]}", &g);
    T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "oneOf"), "an ambiguous oneOf is refused: %s",
            k3_errmsg());
    st = compile(v, "{\"type\":\"string\",\"format\":\"date-time\"}", &g);
    if (!st) {
        int c1, c2;
        T_CHECK(feed_bytes(g, "\"2024-02-28T23:59:59.5+01:00\"", 29, &c1) == -1 && c1 &&
                    feed_bytes(g, "\"2024-02-30T00:00:00Z\"", 22, &c2) == 9,
                "format date-time: a valid one taken, February 30 refused at its day");
        k3_grammar_free(g);
    } else
        T_CHECK(0, "format date-time compiles: %s", k3_errmsg());

    /* special tokens are terminals of their own: inside a string the bytes "<|open|>" are text,
     * the <|open|> id is not allowed */
    int32_t open = k3_tok_special(tok, "<|open|>");
    if (!compile(v, "{\"type\":\"string\"}", &g)) {
        k3_gmatch *m;
        uint64_t  *mask = calloc((size_t)k3_gvocab_words(v), sizeof *mask);
        k3_gmatch_new(g, &m);
        k3_gmatch_accept_bytes(m, "\"", 1);
        k3_gmatch_mask(m, mask);
        T_CHECK(open >= 0 && !bit(mask, open) && !k3_gmatch_allows(m, open),
                "the <|open|> id is not a string character");
        T_CHECK(k3_gmatch_accept_bytes(m, "<|open|>", 8) == K3_OK, "the bytes <|open|> are");
        T_CHECK(!bit(mask, eom), "no end of message inside a string");
        k3_gmatch_accept_bytes(m, "\"", 1);
        k3_gmatch_mask(m, mask);
        T_CHECK(bit(mask, eom) && k3_gmatch_complete(m), "the end of message after it");
        T_CHECK(k3_gmatch_accept(m, eom) == K3_OK && k3_gmatch_ended(m), "... is taken and ends the output");
        k3_gmatch_mask(m, mask);
        int any = 0;
        for (int k = 0; k < k3_gvocab_words(v); k++)
            any |= mask[k] != 0;
        T_CHECK(!any, "nothing is allowed after the end");
        k3_gmatch_free(m);
        k3_grammar_free(g);
        free(mask);
    }

    /* the tool-call grammar (k3-tools.md 1.3) */
    {
        static const char tools[] =
            "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
            "\"object\","
            "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\",\"minimum\":1,"
            "\"maximum\":7}},"
            "\"required\":[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]";
        int32_t O = k3_tok_special(tok, "<|open|>"), S = k3_tok_special(tok, "<|sep|>"),
                C = k3_tok_special(tok, "<|close|>");
        /* a script of specials (O S C) and text; 1 when every piece is accepted and the end is allowed */
        struct piece {
            int32_t     id;
            const char *t;
        };
#define P(x)                                                                                                 \
    { x, NULL }
#define X(s)                                                                                                 \
    { -1, s }
        const struct piece one[] = {P(C),
                                    X("response"),
                                    P(S),
                                    P(O),
                                    X("tools"),
                                    P(S),
                                    P(O),
                                    X("call tool=\"get_weather\" index=\"1\""),
                                    P(S),
                                    P(O),
                                    X("argument key=\"city\" type=\"string\""),
                                    P(S),
                                    X("Par\"is <x>"),
                                    P(C),
                                    X("argument"),
                                    P(S),
                                    P(O),
                                    X("argument key=\"days\" type=\"number\""),
                                    P(S),
                                    X("3"),
                                    P(C),
                                    X("argument"),
                                    P(S),
                                    P(C),
                                    X("call"),
                                    P(S),
                                    P(C),
                                    X("tools"),
                                    P(S)};
        const struct piece two[] = {P(O), X("call tool=\"get_time\" index=\"2\""), P(S), P(C), X("call"),
                                    P(S)};
#undef P
#undef X
        for (int mode = 0; mode < 4;
             mode++) { /* 0: any, 1 call max; 1: 8 calls; 2: named get_time; 3: text */
            k3_grammar *tg;
            st = k3_grammar_tool_calls(v, tools, mode == 2 ? "get_time" : NULL,
                                       mode == 1 || mode == 3 ? 8 : 1, mode == 3, NULL, &tg);
            if (st) {
                T_CHECK(0, "the tool-call grammar compiles: %s", k3_errmsg());
                continue;
            }
            k3_gmatch *m;
            k3_gmatch_new(tg, &m);
            int good = 1, at = -1,
                n1 = (int)(sizeof one / sizeof *one) - 3; /* before <|close|>tools<|sep|> */
            for (int i = 0; i < n1 && good; i++)
                if (one[i].t ? k3_gmatch_accept_bytes(m, one[i].t, strlen(one[i].t))
                             : k3_gmatch_accept(m, one[i].id))
                    good = 0, at = i;
            int second = 1;
            for (size_t i = 0; i < sizeof two / sizeof *two && second; i++)
                second = !(two[i].t ? k3_gmatch_accept_bytes(m, two[i].t, strlen(two[i].t))
                                    : k3_gmatch_accept(m, two[i].id));
            if (mode == 0)
                T_CHECK(good && !second,
                        "tool calls, at most 1: a call with a raw string and a number is taken, a "
                        "second call refused (%d)",
                        at);
            if (mode == 1 || mode == 3)
                T_CHECK(good && second && k3_gmatch_accept(m, C) == K3_OK &&
                            k3_gmatch_accept_bytes(m, "tools", 5) == K3_OK &&
                            k3_gmatch_accept(m, S) == K3_OK && k3_gmatch_allows(m, eom),
                        "tool calls, up to 8: two calls indexed 1 and 2, then the end");
            if (mode == 2)
                T_CHECK(!good && at == 7, "a named choice refuses another tool at its name (piece %d)", at);
            k3_gmatch_free(m);
            k3_gmatch_new(tg, &m);
            int text = k3_gmatch_accept_bytes(m, "Hello", 5) == K3_OK;
            T_CHECK(text == (mode == 3), "text before the calls: %s (mode %d)",
                    mode == 3 ? "allowed (auto)" : "refused", mode);
            k3_gmatch_free(m);
            k3_grammar_free(tg);
        }
        st = k3_grammar_tool_calls(
            v,
            "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
            "\"object\",\"properties\":{\"x\":{\"type\":[\"string\",\"integer\"]}}}}}]",
            NULL, 1, 0, NULL, &g);
        T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "tools[f].parameters/properties/x"),
                "an argument with two types is refused naming it: %s", k3_errmsg());
        /* a string argument is written raw (k3-tools.md 1.3): its pattern's automaton wrote the JSON
         * escapes (\" for ", \n for a newline), which the value then held as a backslash; enum
         * and const ignored the other keywords, a pattern ignored maxLength, unknown keywords
         * were not refused */
        static const struct {
            const char *arg, *val;
            int         want;
        } raw[] = {
            {"{\"type\":\"string\",\"pattern\":\"^[^\\\\\\\\]$\"}", "\\\"", 0},
            {"{\"type\":\"string\",\"pattern\":\"^[^\\\\\\\\]$\"}", "\"", 1},
            {"{\"type\":\"string\",\"pattern\":\"^\\\\s$\"}", "\\n", 0},
            {"{\"type\":\"string\",\"pattern\":\"^\\\\s$\"}", "\n", 1},
            {"{\"type\":\"string\",\"pattern\":\"^a\\\\\\\\b$\"}", "a\\b", 1},
            {"{\"type\":\"string\",\"pattern\":\"^a\\\\\\\\b$\"}", "a\\\\b", 0},
            {"{\"type\":\"string\",\"pattern\":\"^x\"}", "x\"\\\t", 1},
            {"{\"type\":\"string\",\"enum\":[\"abc\",\"a\"],\"maxLength\":2}", "abc", 0},
            {"{\"type\":\"string\",\"enum\":[\"abc\",\"a\"],\"maxLength\":2}", "a", 1},
            {"{\"type\":\"string\",\"const\":\"a\\\"b\"}", "a\"b", 1},
            {"{\"type\":\"string\",\"format\":\"date\"}", "2024-01-31", 1},
            /* with minLength / maxLength, in code points of the raw text (they were refused) */
            {"{\"type\":\"string\",\"pattern\":\"^a+$\",\"maxLength\":2}", "aa", 1},
            {"{\"type\":\"string\",\"pattern\":\"^a+$\",\"maxLength\":2}", "aaa", 0},
            {"{\"type\":\"string\",\"pattern\":\"^[^x]+$\",\"maxLength\":2}", "\"\\", 1},
            {"{\"type\":\"string\",\"pattern\":\"^[^x]+$\",\"maxLength\":2}", "\xc3\xa9\n", 1},
            {"{\"type\":\"string\",\"pattern\":\"^[^x]+$\",\"maxLength\":2}", "\\u0041", 0},
            {"{\"type\":\"string\",\"pattern\":\"^[^x]+$\",\"maxLength\":2}", "\xc3\xa9\xc3\xa9\xc3\xa9", 0},
            {"{\"type\":\"string\",\"pattern\":\"^[^x]+$\",\"minLength\":3}", "\xc3\xa9\xc3\xa9", 0},
            {"{\"type\":\"string\",\"pattern\":\"^[^x]+$\",\"minLength\":3}", "\\\\\\", 1},
            {"{\"type\":\"string\",\"format\":\"uuid\",\"minLength\":36,\"maxLength\":36}",
             "0123abcd-0000-1111-2222-333344445555", 1},
        };
        int n_raw = (int)(sizeof raw / sizeof *raw), ok_raw = 0;
        for (int k = 0; k < n_raw; k++) {
            int got = tool_value(v, tok, raw[k].arg, raw[k].val);
            ok_raw += got == raw[k].want;
            if (got != raw[k].want)
                printf("# tool argument %s, raw value %s: %s, wanted %s\n", raw[k].arg, raw[k].val,
                       got < 0 ? k3_errmsg()
                       : got   ? "taken"
                               : "refused",
                       raw[k].want ? "taken" : "refused");
        }
        T_CHECK(ok_raw == n_raw,
                "%d of %d raw string arguments of a tool call taken or refused as the schema says", ok_raw,
                n_raw);
        static const char *const refused[][2] = {
            {"{\"type\":\"string\",\"pattern\":\"^[a-z]*[^x]{0,40}$\",\"maxLength\":4096}",
             "\"maxLength\" at tools[f].parameters/properties/s: with this pattern the length bound needs "
             "more "
             "than 131072 grammar nodes"},
            {"{\"type\":\"string\",\"contentEncoding\":\"base64\"}",
             "\"contentEncoding\" at tools[f].parameters/properties/s"},
            {"{\"type\":\"string\",\"anyOf\":[{\"maxLength\":1},{\"pattern\":\"^a\"}]}",
             "\"anyOf\" at tools[f].parameters/properties/s"},
        };
        for (size_t k = 0; k < sizeof refused / sizeof *refused; k++) {
            int got = tool_value(v, tok, refused[k][0], "a");
            T_CHECK(got < 0 && strstr(k3_errmsg(), refused[k][1]),
                    "a tool argument %s is refused naming it: %s", refused[k][0],
                    got < 0 ? k3_errmsg() : "it compiled");
        }
        /* a required name the parameters do not declare: ignored (a forced call could never
         * hold it), while response_format refused the same schema */
        st = k3_grammar_tool_calls(
            v,
            "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
            "\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\",\"b\"]}}}]",
            NULL, 1, 0, NULL, &g);
        T_CHECK(st == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "\"required\" at tools[f].parameters") &&
                    strstr(k3_errmsg(), "does not declare"),
                "a tool's required name that its properties do not declare is refused: %s",
                st ? k3_errmsg() : "it compiled");
        if (!st)
            k3_grammar_free(g);
    }

    /* exact masks: the cached parts (accepted, rejected or bitset), the tokens that leave a rule
     * and go on with a byte that may follow it, and a rule left with a token's last byte */
    {
        int         nsch = 0, steps = 0, bad = exact_corpus(v, nv, NULL, 0, 40, &nsch, &steps);
        k3_grammar *eg;
        if (k3_grammar_tool_calls(v,
                                  "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{"
                                  "\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"},\"n\":{"
                                  "\"type\":\"integer\"},\"o\":{\"type\":\"object\"}}}}}]",
                                  NULL, 3, 1, NULL, &eg) == K3_OK) {
            for (int r = 0; r < 4; r++)
                bad += exact_walk(eg, nv, NULL, 0, 60, &steps);
            nsch++;
            k3_grammar_free(eg);
        }
        T_CHECK(nsch >= 50 && steps > 1000 && bad == 0,
                "masks are exact: over %d steps of %d grammars (corpus, json_object, tool calls) every id's "
                "bit equals k3_gmatch_allows (%d steps differ)",
                steps, nsch, bad);
    }

    /* a pattern within lengths: a count's cache entry is shared once no piece that the pattern
     * reads can reach a bound from it. Pieces of digits are a few characters long, so the distinct
     * entries of a digits pattern stop growing with maxLength a few counts up: the same at
     * maxLength one below the longest piece and three times it. They were shared only more than
     * the longest piece + 1 from a bound: none at the first, so it had fewer. */
    {
        int distinct[2] = {-1, -1}, len[2] = {v->max_len - 1, 3 * v->max_len};
        for (int k = 0; k < 2; k++) {
            char        sch[128];
            k3_grammar *pg = NULL;
            snprintf(sch, sizeof sch, "{\"type\":\"string\",\"pattern\":\"^[0-9]+$\",\"maxLength\":%d}",
                     len[k]);
            if (compile(v, sch, &pg) == K3_OK)
                distinct[k] = pg->n_node - pg->n_sh;
            k3_grammar_free(pg);
        }
        T_CHECK(distinct[0] > 0 && distinct[0] == distinct[1],
                "a digits pattern has as many distinct mask cache entries within maxLength %d as within %d "
                "(the longest piece is %d bytes; digits are shorter): %d and %d",
                len[0], len[1], v->max_len, distinct[0], distinct[1]);
    }

    /* bounded masks over several calls: with a budget of 1 step each call fills one node's entry
     * (the first it needs, whatever its bound) and returns without a mask while others are left;
     * the mask it finally sets must be as exact as k3_gmatch_mask's. A call charges at most its
     * allowance (the budget, a quarter more for its first fill) and one transition (a step over
     * one configuration set, G_STEP_COST 128 a unit per 2 configurations; these grammars' sets are
     * below 64): it went a vocabulary piece's transitions past (20,338 units at a budget of 1,
     * 17,523 at 4,096) */
    {
        int     nsch = 0, steps = 0, bad = 0;
        int64_t over[2];
        walk_more = 0;
        for (int k = 0; k < 2; k++) {
            walk_budget = k ? 4096 : 1, walk_over = 0;
            bad += exact_corpus(v, nv, NULL, 0, 24, &nsch, &steps);
            over[k] = walk_over;
        }
        T_CHECK(nsch >= 100 && steps > 2000 && walk_more > 100 && bad == 0,
                "bounded masks set over several calls are exact: %d of %d steps of %d grammars took more "
                "than one call, %d differ from k3_gmatch_allows",
                walk_more, steps, nsch, bad);
        T_CHECK(
            over[0] <= 128 * (1 + 64 / 2) && over[1] <= 128 * (1 + 64 / 2),
            "a bounded call charges at most its allowance and one transition: %lld and %lld units past it "
            "at budgets of 1 and 4,096 (at most %d)",
            (long long)over[0], (long long)over[1], 128 * (1 + 64 / 2));
        walk_budget = 0;
    }

    /* many branches alive at once: an anyOf of 60 strings of maxLength 1..60 keeps up to 60 string
     * positions in the set, each a fill (a walk over the vocabulary inside a string) on its first
     * visit: a first mask took 60 walks (214 ms a token on the release vocabulary). Each call of
     * k3_gmatch_mask_bounded now fills at most one walk's worth (the bound of its walks: the trie
     * edges under the first bytes still alive) and says when it needs another; the masks it sets
     * are exact. */
    {
        k3_buf any = {0};
        puts_(&any, "{\"type\":\"object\",\"properties\":{\"s\":{\"anyOf\":[");
        for (int k = 1; k <= 60; k++)
            k3_buf_printf(&any, "%s{\"type\":\"string\",\"maxLength\":%d}", k > 1 ? "," : "", k);
        puts_(&any, "]}},\"required\":[\"s\"]}");
        k3_grammar *ag  = NULL;
        k3_status   ast = compile(v, any.p, &ag);
        T_CHECK(ast == K3_OK, "an anyOf of 60 strings compiles: %s", ast ? k3_errmsg() : "");
        k3_grammar_free(ag);
        for (int old = 1; old >= 0 && !ast; old--) { /* the unbounded path first, on its own grammar */
            k3_grammar *gg   = NULL;
            k3_gmatch  *m    = NULL;
            uint64_t   *mask = malloc((size_t)k3_gvocab_words(v) * sizeof *mask);
            int64_t     most = 0, fill, pre, most_pre = 0;
            int         steps = 0, calls, n_more = 0, bad = 0, done;
            if (!mask || compile(v, any.p, &gg) || k3_gmatch_new(gg, &m))
                break;
            g_match_budget(m, old ? -1 : 0);
            if (k3_gmatch_accept_bytes(m, "{\"s\":\"", 6))
                bad++;
            for (; steps < 40 && !k3_gmatch_ended(m) && !bad; steps++) {
                int32_t n = 0, pick = -1;
                do {
                    if (k3_gmatch_mask_bounded(m, mask, &done))
                        bad++;
                    g_match_stats(m, &fill, &pre, &calls);
                    most     = fill > most ? fill : most;
                    most_pre = pre > most_pre ? pre : most_pre;
                } while (!done && !bad);
                n_more += calls > 1;
                for (int32_t id = 0; id < nv; id++) {
                    n += bit(mask, id);
                    bad += bit(mask, id) != k3_gmatch_allows(m, id);
                }
                for (int32_t id = 0, want = n ? (int32_t)rnd((uint32_t)n) : -1; id < nv && pick < 0; id++)
                    if (bit(mask, id) && want-- == 0)
                        pick = id;
                if (pick < 0 || k3_gmatch_accept(m, pick))
                    bad++;
            }
            if (old)
                T_CHECK(most_pre > 4 * v->n_edges && !bad,
                        "... unbounded (the old path), one mask charges %.1f walks' worth of the vocabulary "
                        "before its last fill (the schema is one the budget is for)",
                        (double)most_pre / (double)v->n_edges);
            else
                T_CHECK(most_pre <= v->n_edges && n_more > 0 && !bad,
                        "... bounded, a call begins a fill only within one walk of the vocabulary (at most "
                        "%lld of %lld charged before its last fill; %lld with it; %d of %d masks took more "
                        "than one call) and every mask is exact (%d ids' bits differ from k3_gmatch_allows "
                        "or a step failed)",
                        (long long)most_pre, (long long)v->n_edges, (long long)most, n_more, steps, bad);
            k3_gmatch_free(m);
            k3_grammar_free(gg);
            free(mask);
        }
        free(any.p);
    }

    { /* 5,000 prefixItems are refused naming prefixItems (it named minItems, which the schema
       * does not have) */
        k3_buf pre = {0};
        puts_(&pre, "{\"type\":\"array\",\"prefixItems\":[");
        for (int k = 0; k < 5000; k++)
            puts_(&pre, k ? ",{}" : "{}");
        puts_(&pre, "]}");
        k3_grammar *pg = NULL;
        k3_status   ps = compile(v, pre.p, &pg);
        T_CHECK(ps == K3_ERR_UNSUPPORTED && strstr(k3_errmsg(), "\"prefixItems\" at #: a count above 4096"),
                "5,000 prefixItems are refused naming prefixItems: %s", ps ? k3_errmsg() : "it compiled");
        k3_grammar_free(pg);
        free(pre.p);
    }

    /* the merge of the set's cached entries counts against the budget too: with every entry
     * filled (k3_grammar_warm) and a budget of 1, a call merges one entry, so a mask over the
     * 60 strings' positions takes a call per distinct entry; it was merged whole in the first
     * call, uncounted (5-12 ms on the release vocabulary for hundreds of entries). The mask
     * set at last equals k3_gmatch_mask's. */
    {
        k3_buf any = {0};
        puts_(&any, "{\"anyOf\":[");
        for (int k = 1; k <= 60; k++)
            k3_buf_printf(&any, "%s{\"type\":\"string\",\"maxLength\":%d}", k > 1 ? "," : "", k);
        puts_(&any, "]}");
        k3_grammar *gg = NULL;
        k3_gmatch  *m = NULL, *ref = NULL;
        size_t      words = (size_t)k3_gvocab_words(v);
        uint64_t   *mask = calloc(words, sizeof *mask), *want = calloc(words, sizeof *want);
        int         calls = 0, done = 0, first = 0, same = 1, fed = 0, guard = 0;
        int64_t     fill, pre;
        if (mask && want && !compile(v, any.p, &gg) && !k3_grammar_warm(gg) && !k3_gmatch_new(gg, &m) &&
            !k3_gmatch_new(gg, &ref)) {
            g_match_budget(m, 1);
            static const char *const doc[] = {"\"", "a", "b", "c"};
            for (int t = 0; t < 4 && same; t++, fed++) {
                if (k3_gmatch_accept_bytes(m, doc[t], 1) || k3_gmatch_accept_bytes(ref, doc[t], 1))
                    break;
                do
                    done = !k3_gmatch_mask_bounded(m, mask, &done) && done;
                while (!done && ++guard < 100000);
                g_match_stats(m, &fill, &pre, &calls);
                if (t == 0)
                    first = calls;
                same &= done && !k3_gmatch_mask(ref, want) && !memcmp(mask, want, words * sizeof *mask);
            }
        }
        T_CHECK(fed == 4 && same && first >= 20,
                "with a budget of 1 and every entry filled, a call merges one entry: the first mask inside "
                "an anyOf of 60 strings took %d calls, and the 4 masks equal k3_gmatch_mask's (%s)",
                first, same ? "they do" : "they differ");
        k3_gmatch_free(m);
        k3_gmatch_free(ref);
        k3_grammar_free(gg);
        free(mask);
        free(want);
        free(any.p);
    }

    /* k3_grammar_bytes (the server's budget, K3_SERVE_GRAMMAR_MB) counts the automaton (at least its
     * nodes and edges) and then the mask cache entries as they are filled (k3_grammar_warm) */
    {
        static const char big[] = "{\"type\":\"string\",\"maxLength\":4000}";
        k3_grammar       *gg    = NULL;
        size_t            b0 = 0, b1 = 0, floor_ = 0;
        if (!compile(v, big, &gg)) {
            floor_ = (size_t)gg->n_node * sizeof(g_node);
            for (int i = 0; i < gg->n_node; i++)
                floor_ += (size_t)gg->node[i].n * sizeof(g_edge);
            b0 = k3_grammar_bytes(gg);
            b1 = k3_grammar_warm(gg) ? 0 : k3_grammar_bytes(gg);
        }
        T_CHECK(gg && b0 >= floor_ && floor_ > 1000000 && b1 > b0,
                "k3_grammar_bytes of a string of maxLength 4000: %zu bytes compiled (nodes and edges %zu), "
                "%zu with its mask caches filled",
                b0, floor_, b1);
        k3_grammar_free(gg);
    }

    /* A compile's meter (the server's grammar budget while compiles run): the bytes it charges bound
     * what the grammar holds once built, within twice that; a meter that grants 1 MB stops the
     * compile of a 1.8 MB grammar once 1 MB is charged, naming it */
    {
        meter_cap all, two;
        k3_status s1;
        size_t    b;
        k3_status s2 = metered(v, "{\"type\":\"string\",\"maxLength\":4000,\"pattern\":\"^[a-z ]*$\"}",
                               1u << 20, &all, &two, &s1, &b);
        T_CHECK(s2 == K3_ERR_NOMEM && two.m.refused && two.m.granted == (1u << 20) &&
                    two.taken == two.m.granted &&
                    strstr(k3_errmsg(), "passed the 1 MB of memory it was given"),
                "a meter that grants 1 MB stops the compile there (%d: %s)", (int)s2, k3_errmsg());
        T_CHECK(!s1 && all.m.used >= b && all.m.used <= 2 * b && all.m.granted >= all.m.used &&
                    all.m.granted - all.m.used < K3_GMETER_STEP && all.taken == all.m.granted &&
                    b > (1u << 20),
                "a meter counts %zu bytes (%zu granted) for a grammar of %zu bytes", all.m.used,
                all.m.granted, b);
    }

    /* the scratch of a listed multipleOf (the texts of up to 2^20 multiples, 20 bytes each, and
     * their automaton's states) is charged too: 0.01 in [0, 10000] lists 1,000,001 texts (20 MB)
     * for a grammar of well under 8 MB, so an 8 MB meter stops it (it compiled, uncharged, before) */
    {
        meter_cap all, eight;
        k3_status s1;
        size_t    b;
        k3_status s2 = metered(v, "{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0,\"maximum\":10000}",
                               8u << 20, &all, &eight, &s1, &b);
        T_CHECK(s2 == K3_ERR_NOMEM && eight.m.refused &&
                    strstr(k3_errmsg(), "passed the 8 MB of memory it was given"),
                "an 8 MB meter stops the listing of 1,000,001 multiples (%d: %s)", (int)s2, k3_errmsg());
        T_CHECK(!s1 && b < (8u << 20) && all.m.used >= (size_t)1000001 * 20,
                "a listed multipleOf's scratch is charged: %zu bytes for a grammar of %zu", all.m.used, b);
    }

    /* k3_gmatch_bytes (a running answer's share of K3_SERVE_GRAMMAR_MB) counts the matcher's
     * scratch at its start and what its masks and steps add (sets, frames, its token DFA) */
    {
        k3_grammar *gg = NULL;
        k3_gmatch  *gm = NULL;
        size_t      b0 = 0, b1 = 0;
        uint64_t   *mask = NULL;
        if (!k3_grammar_json_object(v, &gg) && !k3_gmatch_new(gg, &gm) &&
            (mask = calloc((size_t)k3_grammar_words(gg), sizeof *mask))) {
            b0                      = k3_gmatch_bytes(gm);
            static const char doc[] = "{\"key\": [1, \"two\", {\"x\": null}], \"k2\": 3.5}";
            for (size_t i = 0; i < sizeof doc - 1 && !k3_gmatch_mask(gm, mask); i++)
                k3_gmatch_accept_bytes(gm, doc + i, 1);
            b1 = k3_gmatch_bytes(gm);
        }
        T_CHECK(gm && b0 >= (size_t)(v->max_len + 1) * 5 && b1 > b0,
                "k3_gmatch_bytes: %zu bytes at the start (at least the %d-byte piece scratch), %zu after the "
                "masks "
                "of a document",
                b0, (v->max_len + 1) * 5, b1);
        free(mask);
        k3_gmatch_free(gm);
        k3_grammar_free(gg);
    }

    /* k3-tools.md 1.7: the response-format message, after the tool-choice one, before the prompt */
    {
        k3_chat_msg  um = {.role = "user", .content = "hi"};
        k3_chat_opts o  = {
             .think           = 0,
             .gen_prompt      = 1,
             .tool_choice     = "required",
             .response_format = "json_schema",
             .response_schema =
                 "{\"type\": \"object\", \"properties\": {\"z\": {}, \"\xc3\xa9\": {}, \"a\": 1}}"};
        k3_ids ids = {0};
        char  *txt = NULL;
        size_t len;
        st = k3_chat_encode(tok, &um, 1, &o, &ids);
        if (!st)
            st = k3_tok_decode(tok, ids.v, ids.n, &txt, &len);
        const char *want =
            "<|open|>message role=\"system\" type=\"response-format\"<|sep|>The system is invoked with "
            "`response_format=json_schema`.\nYour response must be raw JSON data without markdown code "
            "blocks (```json) "
            "or any additional formatting.\nThe JSON data must match the following schema:\n```json\n"
            "{\"properties\":{\"a\":1,\"z\":{},\"\xc3\xa9\":{}},\"type\":\"object\"}\n```<|close|>message<|"
            "sep|>"
            "<|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>";
        const char *tc = txt ? strstr(txt, "type=\"tool-choice\"") : NULL;
        const char *rf = txt ? strstr(txt, want) : NULL;
        T_CHECK(!st && rf && tc && tc < rf && strlen(rf) == strlen(want),
                "the response-format message: exact text, schema sorted and compact, after tool-choice, last "
                "before "
                "the prompt");
        o.response_format = "json_object";
        k3_ids_free(&ids);
        free(txt);
        txt = NULL;
        st  = k3_chat_encode(tok, &um, 1, &o, &ids);
        if (!st)
            st = k3_tok_decode(tok, ids.v, ids.n, &txt, &len);
        T_CHECK(!st &&
                    strstr(txt,
                           "type=\"response-format\"<|sep|>The system is invoked with `response_format="
                           "json_object`.\nYour response must be raw JSON data without markdown code blocks "
                           "(```json) or any additional formatting.<|close|>message<|sep|>"),
                "the json_object message");
        o.response_format = "text";
        k3_ids_free(&ids);
        free(txt);
        txt = NULL;
        st  = k3_chat_encode(tok, &um, 1, &o, &ids);
        if (!st)
            st = k3_tok_decode(tok, ids.v, ids.n, &txt, &len);
        T_CHECK(!st && !strstr(txt, "response-format"), "text adds nothing");
        k3_ids_free(&ids);
        free(txt);
    }

    /* the masked sampler: never a masked id; greedy deterministic */
    {
        k3_sampler_params sp = {.temp = 1.0f, .top_p = 0.9f, .seed = 7};
        k3_sampler       *s  = k3_sampler_new(&sp);
        float             lg[200];
        uint64_t          mask[4] = {0};
        int               bad     = 0;
        for (int r = 0; r < 300; r++) {
            for (int i = 0; i < 200; i++)
                lg[i] = (float)rnd(1000) / 100.0f;
            memset(mask, 0, sizeof mask);
            for (int k = 0; k < 3; k++) {
                int id = (int)rnd(200);
                mask[id >> 6] |= 1ull << (id & 63);
            }
            int32_t id = k3_sampler_sample_masked(s, lg, 200, mask);
            bad += id < 0 || !bit(mask, id);
        }
        T_CHECK(bad == 0, "300 masked draws at temperature 1, top-p 0.9: every id in the mask (%d not)", bad);
        memset(mask, 0, sizeof mask);
        T_CHECK(k3_sampler_sample_masked(s, lg, 200, mask) == -1, "an empty mask gives -1");
        k3_sampler_free(s);
        sp.temp      = 0;
        s            = k3_sampler_new(&sp);
        mask[1]      = 0xf0;
        int32_t a    = k3_sampler_sample_masked(s, lg, 200, mask),
                b    = k3_sampler_sample_masked(s, lg, 200, mask);
        int32_t best = 68;
        for (int i = 68; i < 72; i++)
            if (lg[i] > lg[best])
                best = i;
        T_CHECK(a == best && b == best,
                "greedy under a mask takes the best allowed id, the same twice (%d %d, %d)", a, b, best);
        /* against the plain rule, with ties, NaN and widths that end inside a mask word */
        int wrong = 0;
        for (int r = 0; r < 400; r++) {
            int n = 1 + (int)rnd(200);
            memset(mask, 0, sizeof mask);
            for (int i = 0; i < 200; i++) {
                lg[i] = rnd(5) == 0 ? NAN : (float)rnd(8);
                if (rnd(4) == 0 || i >= n) /* bits past n must be ignored */
                    mask[i >> 6] |= 1ull << (i & 63);
            }
            int32_t want = -1, first = -1;
            for (int i = 0; i < n; i++)
                if (bit(mask, i)) {
                    first = first < 0 ? i : first;
                    if (!isnan(lg[i]) && (want < 0 || lg[i] > lg[want]))
                        want = i;
                }
            wrong += k3_sampler_sample_masked(s, lg, n, mask) != (want >= 0 ? want : first);
        }
        T_CHECK(
            wrong == 0,
            "400 random masked greedy draws: the first maximum among the allowed ids below n, NaN skipped "
            "(%d differ)",
            wrong);
        k3_sampler_free(s);
    }
    k3_gvocab_free(v);
    k3_tok_free(tok);
    return t_done();
}
