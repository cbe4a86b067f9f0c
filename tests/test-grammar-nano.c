/* test-grammar-nano.c: constrained generation on k3-nano over the schema corpus
 * (tests/fixtures/grammar-corpus.jsonl, one schema a line).
 *
 *   test-grammar-nano                      each schema x 1 seed at temperature 1: the output
 *                                          ends with <|end_of_msg|> (never max tokens), parses as
 *                                          JSON, and greedy decoding under the mask is the same
 *                                          twice
 *   test-grammar-nano --emit FILE SEEDS    each schema x SEEDS seeds, one line per output:
 *                                          "LINE<TAB>SEED<TAB>STATUS<TAB>OUTPUT" (STATUS end or
 *                                          max_tokens); t-grammar.sh validates them with ajv
 *
 * The loop is k3chat --prompt --json-schema's (cli-gen.c) with thinking off: mask, masked draw,
 * accept, feed; the prompt's state is saved once and restored for every run. The output is the
 * text of the ordinary ids (the grammar lets <|close|>response<|sep|> follow the document).
 */
#include "json.h"
#include "test.h"
#include "k3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 256

typedef struct gen {
    k3_model     *m;
    k3_session   *s;
    k3_tok       *tok;
    k3_gvocab    *voc;
    k3_snapshot  *snap;
    k3_model_info info;
} gen;

/* One output of grammar g at (temp, seed): *out malloc'ed text; 1 ended, 0 max tokens, -1 error. */
static int generate(gen *G, const k3_grammar *g, float temp, uint64_t seed, char **out) {
    k3_sampler_params sp   = {.temp = temp, .top_p = 1.0f, .seed = seed};
    k3_sampler       *smp  = k3_sampler_new(&sp);
    k3_gmatch        *gm   = NULL;
    uint64_t         *mask = malloc((size_t)k3_gvocab_words(G->voc) * sizeof *mask);
    k3_ids            ids  = {0};
    int               rc = -1, closing = 0;
    *out = NULL;
    if (!smp || !mask || k3_gmatch_new(g, &gm) || k3_session_restore(G->s, G->snap))
        goto done;
    for (int i = 0; i < MAX_TOKENS; i++) {
        if (k3_gmatch_mask(gm, mask))
            goto done;
        int32_t t = k3_sampler_sample_masked(smp, k3_session_logits(G->s), G->info.vocab, mask);
        if (t < 0 || k3_gmatch_accept(gm, t))
            goto done;
        if (k3_gmatch_ended(gm)) {
            rc = 1;
            break;
        }
        closing |= k3_tok_is_special(G->tok, t); /* the closes after the document are not its text */
        if (!closing)
            k3_ids_push(&ids, t);
        if (k3_session_feed(G->s, &t, 1))
            goto done;
    }
    if (rc < 0)
        rc = 0;
    size_t len;
    if (k3_tok_decode(G->tok, ids.v, ids.n, out, &len))
        rc = -1;
done:
    k3_ids_free(&ids);
    k3_gmatch_free(gm);
    free(mask);
    k3_sampler_free(smp);
    return rc;
}

static int setup(gen *G) {
    k3_params    p;
    k3_ids       ids = {0};
    k3_chat_msg  msg = {.role = "user", .content = "Reply with a JSON document."};
    k3_chat_opts o   = {.think = 0, .gen_prompt = 1};
    if (k3_params_default(&p) || k3_model_open("models/k3-nano", &p, &G->m) || k3_session_new(G->m, &G->s) ||
        k3_tok_load("models/k3-nano", NULL, &G->tok))
        return -1;
    k3_model_get_info(G->m, &G->info);
    int rc = k3_gvocab_new(G->tok, G->info.vocab, G->info.eos_id, &G->voc) ||
             k3_chat_encode(G->tok, &msg, 1, &o, &ids) || k3_session_feed(G->s, ids.v, (int)ids.n) ||
             k3_session_save(G->s, &G->snap);
    k3_ids_free(&ids);
    return rc ? -1 : 0;
}

int main(int argc, char **argv) {
    gen    G = {0};
    size_t n;
    char  *corpus = t_read_file("tests/fixtures/grammar-corpus.jsonl", &n);
    int    emit   = argc == 4 && !strcmp(argv[1], "--emit");
    if (!corpus) {
        T_CHECK(0, "tests/fixtures/grammar-corpus.jsonl is readable");
        return t_done();
    }
    if (setup(&G)) {
        T_SKIP("k3-nano does not load: %s", k3_errmsg());
        free(corpus);
        return t_done();
    }
    FILE *f     = emit ? fopen(argv[2], "w") : NULL;
    int   seeds = emit ? atoi(argv[3]) : 1, lines = 0, compiled = 0, ended = 0, parsed = 0, runs = 0,
        greedy = 0;
    if (emit && !f) {
        T_CHECK(0, "cannot write %s", argv[2]);
        return t_done();
    }
    for (char *line = corpus, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        if (!*line)
            continue;
        lines++;
        k3_grammar *g;
        if (k3_grammar_json_schema(G.voc, line, strlen(line), NULL, &g)) {
            printf("# line %d does not compile: %s\n", lines, k3_errmsg());
            continue;
        }
        compiled++;
        for (int sd = 0; sd < seeds; sd++) {
            char *out;
            int   r = generate(&G, g, 1.0f, (uint64_t)(1000 * lines + sd), &out);
            runs++;
            if (r > 0)
                ended++;
            else
                printf("# line %d seed %d: %s: %s\n", lines, sd, r ? "error" : "max tokens", out ? out : "");
            jv *v = NULL;
            if (out && !jv_parse(out, strlen(out), &v))
                parsed++;
            else
                printf("# line %d seed %d: not JSON: %s\n", lines, sd, out ? out : "");
            jv_free(v);
            if (f)
                fprintf(f, "%d\t%d\t%s\t%s\n", lines, sd, r > 0 ? "end" : "max_tokens", out ? out : "");
            free(out);
        }
        if (!emit) { /* greedy twice: the same bytes */
            char *a, *b;
            int   ra = generate(&G, g, 0.0f, 1, &a), rb = generate(&G, g, 0.0f, 2, &b);
            greedy += ra == rb && a && b && !strcmp(a, b);
            free(a);
            free(b);
        }
        k3_grammar_free(g);
    }
    T_CHECK(lines >= 40 && compiled == lines, "%d of the corpus's %d schemas compile (at least 40 asked)",
            compiled, lines);
    T_CHECK(ended == runs, "%d of %d outputs at temperature 1 end with <|end_of_msg|> before %d tokens",
            ended, runs, MAX_TOKENS);
    T_CHECK(parsed == runs, "%d of %d outputs parse as JSON", parsed, runs);
    if (!emit)
        T_CHECK(greedy == compiled,
                "greedy decoding under the mask gives the same output twice (%d of %d schemas)", greedy,
                compiled);
    if (f)
        fclose(f);
    free(corpus);
    k3_snapshot_free(G.snap);
    k3_gvocab_free(G.voc);
    k3_tok_free(G.tok);
    k3_session_free(G.s);
    k3_model_free(G.m);
    return t_done();
}
