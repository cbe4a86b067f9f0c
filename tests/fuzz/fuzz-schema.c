/* fuzz-schema.c: the JSON Schema compiler (src/grammar) on any bytes ("T" + bytes: the
 * tool-call grammar of those bytes as a tools array). It compiles or refuses
 * with a message, never crashes; a grammar it makes is walked for up to 48 tokens: every id in
 * the mask is accepted (k3_gmatch_allows and k3_gmatch_accept agree with the mask), and a mask
 * is never empty before the end (edges into dead ends are pruned at compile time). */
#include "fuzz.h"
#include "k3.h"

static k3_tok    *tok;
static k3_gvocab *voc;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!voc) {
        if (k3_tok_load("models/k3-nano", NULL, &tok) || k3_gvocab_new(tok, k3_tok_n_vocab(tok), -1, &voc))
            abort(); /* run from the repository root (tests/fuzz/run.sh does) */
    }
    k3_grammar *g;
    k3_status   st;
    if (size && data[0] == 'T') { /* "T" + a tools array: the tool-call grammar */
        char *t = malloc(size);
        if (!t)
            return 0;
        memcpy(t, data + 1, size - 1);
        t[size - 1] = 0;
        st = k3_grammar_tool_calls(voc, t, size > 2 && data[1] == '[' ? NULL : "f", 1 + (int)(size % 4),
                                   (int)(size & 1), NULL, &g);
        free(t);
    } else
        st = k3_grammar_json_schema(voc, (const char *)data, size, NULL, &g);
    if (st != K3_OK) {
        FZ_CHECK(k3_errmsg()[0] != 0);
        return 0;
    }
    k3_gmatch *m;
    int32_t    words = k3_gvocab_words(voc);
    uint64_t  *mask  = malloc((size_t)words * sizeof *mask);
    FZ_CHECK(mask && k3_gmatch_new(g, &m) == K3_OK);
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 16777619u;
    for (int step = 0; step < 48 && !k3_gmatch_ended(m); step++) {
        FZ_CHECK(k3_gmatch_mask(m, mask) == K3_OK);
        int32_t n = 0, pick = -1, want;
        for (int32_t k = 0; k < words; k++)
            n += __builtin_popcountll(mask[k]);
        FZ_CHECK(n > 0); /* never stranded before the end */
        h    = h * 1103515245u + 12345u;
        want = (int32_t)(h % (uint32_t)n);
        for (int32_t id = 0; id < words * 64 && pick < 0; id++)
            if (mask[id >> 6] >> (id & 63) & 1 && want-- == 0)
                pick = id;
        FZ_CHECK(pick >= 0 && k3_gmatch_allows(m, pick) && k3_gmatch_accept(m, pick) == K3_OK);
    }
    free(mask);
    k3_gmatch_free(m);
    k3_grammar_free(g);
    return 0;
}
