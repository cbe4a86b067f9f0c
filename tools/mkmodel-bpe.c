/* mkmodel-bpe.c: k3-mkmodel's tokenizer: a byte-level BPE vocabulary learned from a built-in
 * text (mk_vocab_build), written by k3-mkmodel.c as tiktoken.model.
 */
#include "k3-impl.h"
#include "mkmodel.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- tokenizer: byte-level BPE learned from a built-in text ----------------------------------- */

/* A few KB of varied text: prose, code, numbers, punctuation and other scripts (in parts: C
 * compilers need only support 4095-character literals). */
static const char *const corpus[] = {
    "The river had been rising for three days before anyone in the village thought to move the "
    "boats. By the time the mayor called a meeting, the water was lapping at the steps of the old "
    "mill, and the children were sailing paper ships across the square. \"We should have listened "
    "to Marta,\" said the baker, who had laughed at her warnings on Monday. Nobody answered him.\n"
    "In the morning the sky cleared. The water stopped two inches below the bakery door, and the "
    "baker's bread was, for once, the best in the valley: warm, dark, and a little salty.\n\n"
    "How do computers add numbers? At the lowest level, an adder combines two bits and a carry. "
    "Chain 64 of them together and you can add 18446744073709551615 + 1, which wraps around to 0. "
    "Floating-point numbers are different: 0.1 + 0.2 gives 0.30000000000000004, because neither "
    "0.1 nor 0.2 has an exact binary representation. Engineers learn to compare with a tolerance, "
    "e.g. |a - b| <= 1e-9 * max(|a|, |b|), instead of testing equality.\n\n"
    "Recipe for a simple tomato soup (serves 4):\n"
    "  - 1 kg ripe tomatoes, chopped\n"
    "  - 2 onions, 3 cloves of garlic\n"
    "  - 750 ml vegetable stock; salt & pepper to taste\n"
    "Cook the onions slowly for 10-12 minutes, add the rest, simmer 25 min, then blend. Serve hot "
    "with a spoon of cream (or yoghurt!) and fresh basil.\n\n"
    "int main(int argc, char **argv) {\n"
    "    for (int i = 1; i < argc; i++)\n"
    "        printf(\"%d: %s\\n\", i, argv[i]);\n"
    "    return argc > 1 ? 0 : 1;\n"
    "}\n"
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n",
    "She asked whether the meeting was on Tuesday or Wednesday; he wasn't sure, and he'd already "
    "lost the e-mail. \"It's the 14th,\" she said. \"At 09:30, room B-207.\" They're always late "
    "anyway, he thought, but he'll go. We've all been there, haven't we? I'm certain you'd agree.\n"
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG. The quick brown fox jumps over the lazy dog!\n"
    "Prices rose 3.7% in March, after 2.9% in February; analysts had expected 3.1%. The central "
    "bank said it would \"act as needed\" -- markets fell 1.2% ($45 billion) in an hour.\n\n"
    "Le matin, nous avons pris un café au lait près de la gare. Où êtes-vous allés ensuite ? "
    "Die Straße war voller Menschen, und die Bäckerei öffnete um sieben Uhr. ¿Dónde está la "
    "biblioteca? Está cerca del río, señora. Ça va très bien, merci beaucoup.\n"
    "Москва — столица России. Сегодня хорошая погода, и мы пойдём гулять в парк.\n"
    "Η γλώσσα είναι το σπίτι του ανθρώπου. Καλημέρα σας!\n"
    "今天天气很好，我们去公园散步吧。机器学习是人工智能的一个分支。你好，世界！\n"
    "東京は日本の首都です。ありがとうございます。カタカナとひらがな。\n"
    "서울은 한국의 수도입니다. 감사합니다.\n"
    "مرحبا بالعالم. שלום עולם. नमस्ते दुनिया।\n"
    "Symbols: ← → ↑ ↓ ≤ ≥ ≠ ∞ ∑ √ π ≈ ± × ÷ "
    "€ £ ¥ © ® ™ … • ° 🙂 🚀 ✓ ★\n\n",
    "A language model reads text as a sequence of tokens. Frequent words become single tokens, "
    "rare words are split into pieces, and any byte sequence can still be written, because the "
    "first 256 tokens are the single bytes. Training the merges is simple: count every adjacent "
    "pair, merge the most frequent one, and repeat until the vocabulary is large enough. The "
    "same procedure, run on a larger text, gives the tokenizers used by the largest models.\n"
    "Weather report: cloudy in the north with light rain, sunny spells in the south, highs of "
    "18 to 23 degrees. Tomorrow: windy, 40 km/h gusts along the coast; snow above 1500 m.\n"
    "<html><body><p class=\"note\">Hello &amp; welcome</p></body></html>\n"
    "{\"name\": \"k3\", \"layers\": [1, 2, 3], \"ok\": true, \"ratio\": 0.75}\n"
    "git commit -m \"Fix the off-by-one error in the parser\" && make -j8 check\n"
    "The committee reviewed the proposal carefully, considering the costs, the risks and the "
    "expected benefits for the community. After a long discussion, the members voted 7 to 2 in "
    "favour, with one abstention. The construction will begin next spring and should be "
    "finished before the winter of the following year, if the weather allows it.\n"
    "Mathematics: e^(i*pi) + 1 = 0; the integral of x^2 from 0 to 3 is 9; sqrt(2) ~ 1.41421356.\n"
    "Questions, answers, thoughts, and reasons: people are curious, and curiosity is useful.\n",
};

static uint64_t bytes_hash(const unsigned char *b, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static int vocab_find(const mk_vocab *v, const unsigned char *b, int n) {
    for (size_t h = bytes_hash(b, n) & (v->hcap - 1);; h = (h + 1) & (v->hcap - 1)) {
        int id = v->hash[h];
        if (id < 0)
            return -1;
        if (v->tok[id].n == n && !memcmp(v->tok[id].b, b, (size_t)n))
            return id;
    }
}

/* adds a copy of b; returns its id (vocab has room by construction) */
static int vocab_add(mk_vocab *v, const unsigned char *b, int n) {
    K3_ASSERT(v->n < v->cap);
    unsigned char *c = malloc((size_t)n);
    if (!c) {
        fprintf(stderr, "k3-mkmodel: out of memory\n");
        exit(1);
    }
    memcpy(c, b, (size_t)n);
    v->tok[v->n] = (mk_tok){c, n};
    size_t h     = bytes_hash(b, n) & (v->hcap - 1);
    while (v->hash[h] >= 0)
        h = (h + 1) & (v->hcap - 1);
    v->hash[h] = v->n;
    return v->n++;
}

enum { CL_LETTER, CL_DIGIT, CL_SPACE, CL_NL, CL_PUNCT };

static int byte_class(unsigned char c) {
    if (c >= 0x80 || (unsigned)((c | 0x20) - 'a') < 26u || c == '\'')
        return CL_LETTER;
    if ((unsigned)(c - '0') < 10u)
        return CL_DIGIT;
    if (c == '\n' || c == '\r')
        return CL_NL;
    if (c == ' ' || c == '\t')
        return CL_SPACE;
    return CL_PUNCT;
}

/* Length of the piece at s (roughly the Kimi pre-tokenizer, on bytes; good enough to learn). */
static int piece_len(const unsigned char *s, int n) {
    int c0 = byte_class(s[0]), i = 1;
    if ((c0 == CL_SPACE || c0 == CL_PUNCT) && n > 1 && byte_class(s[1]) == CL_LETTER)
        c0 = CL_LETTER;
    else if (c0 == CL_LETTER)
        i = 0;
    switch (c0) {
    case CL_LETTER:
        while (i < n && byte_class(s[i]) == CL_LETTER)
            i++;
        return i;
    case CL_DIGIT:
        while (i < n && i < 3 && byte_class(s[i]) == CL_DIGIT)
            i++;
        return i;
    case CL_NL:
        while (i < n && byte_class(s[i]) == CL_NL)
            i++;
        return i;
    case CL_SPACE:
        while (i < n && byte_class(s[i]) == CL_SPACE)
            i++;
        /* " ?punct" : the last space goes with the following punctuation */
        if (i < n && byte_class(s[i]) == CL_PUNCT && i > 1)
            return i - 1;
        if (i == 1 && i < n && byte_class(s[i]) == CL_PUNCT) {
            while (i < n && byte_class(s[i]) == CL_PUNCT)
                i++;
        }
        return i;
    default:
        while (i < n && byte_class(s[i]) == CL_PUNCT)
            i++;
        while (i < n && byte_class(s[i]) == CL_NL)
            i++;
        return i;
    }
}

typedef struct mk_piece {
    int *ids; /* [n] token ids */
    int  n;
    int  count;
} mk_piece;

static int piece_cmp(const void *a, const void *b) {
    const mk_piece *x = a, *y = b;
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return memcmp(x->ids, y->ids, (size_t)x->n * sizeof(int));
}

/* The base vocabulary: 256 single bytes in the GPT-2/cl100k order (printable bytes first, so
 * rank != byte value), then `merges` tokens learned by BPE over the built-in text, then (if the
 * text runs out of pairs) filler tokens made by joining two random tokens. */
void mk_vocab_build(mk_vocab *v, int merges, uint64_t seed) {
    v->cap  = 256 + merges;
    v->tok  = calloc((size_t)v->cap, sizeof *v->tok);
    v->hcap = 1;
    while (v->hcap < (size_t)v->cap * 2)
        v->hcap <<= 1;
    v->hash = malloc(v->hcap * sizeof *v->hash);
    if (!v->tok || !v->hash) {
        fprintf(stderr, "k3-mkmodel: out of memory\n");
        exit(1);
    }
    memset(v->hash, 0xff, v->hcap * sizeof *v->hash);
    for (int b = 0; b < 256; b++)
        if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) {
            unsigned char c = (unsigned char)b;
            vocab_add(v, &c, 1);
        }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        if (vocab_find(v, &c, 1) < 0)
            vocab_add(v, &c, 1);
    }

    /* distinct pieces with counts */
    size_t cl = 0;
    for (size_t k = 0; k < sizeof corpus / sizeof corpus[0]; k++)
        cl += strlen(corpus[k]);
    char *text = malloc(cl + 1);
    if (!text) {
        fprintf(stderr, "k3-mkmodel: out of memory\n");
        exit(1);
    }
    text[0] = 0;
    for (size_t k = 0; k < sizeof corpus / sizeof corpus[0]; k++)
        strcat(text, corpus[k]);
    const unsigned char *s  = (const unsigned char *)text;
    int                  sn = (int)cl, np = 0;
    mk_piece            *pc  = calloc((size_t)sn, sizeof *pc);
    int                 *ids = malloc((size_t)sn * sizeof *ids);
    if (!pc || !ids) {
        fprintf(stderr, "k3-mkmodel: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < sn;) {
        int l      = piece_len(s + i, sn - i);
        pc[np].ids = ids + i, pc[np].n = l, pc[np].count = 1;
        for (int j = 0; j < l; j++)
            ids[i + j] = vocab_find(v, s + i + j, 1);
        np++, i += l;
    }
    qsort(pc, (size_t)np, sizeof *pc, piece_cmp);
    int nu = 0;
    for (int i = 0; i < np; i++) {
        if (nu && !piece_cmp(&pc[nu - 1], &pc[i]))
            pc[nu - 1].count++;
        else
            pc[nu++] = pc[i];
    }

    /* merges: the most frequent adjacent pair (ties: lowest ids), until done or out of pairs */
    size_t    pcap = 1 << 16;
    uint64_t *pkey = malloc(pcap * sizeof *pkey);
    int      *pcnt = malloc(pcap * sizeof *pcnt);
    if (!pkey || !pcnt) {
        fprintf(stderr, "k3-mkmodel: out of memory\n");
        exit(1);
    }
    while (v->n < v->cap) {
        memset(pkey, 0xff, pcap * sizeof *pkey);
        uint64_t best = UINT64_MAX;
        int      bc   = 0;
        for (int i = 0; i < nu; i++)
            for (int j = 0; j + 1 < pc[i].n; j++) {
                uint64_t k = (uint64_t)pc[i].ids[j] << 32 | (uint32_t)pc[i].ids[j + 1];
                size_t   h = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 48) & (pcap - 1);
                while (pkey[h] != UINT64_MAX && pkey[h] != k)
                    h = (h + 1) & (pcap - 1);
                if (pkey[h] == UINT64_MAX)
                    pkey[h] = k, pcnt[h] = 0;
                pcnt[h] += pc[i].count;
                if (pcnt[h] > bc || (pcnt[h] == bc && k < best))
                    bc = pcnt[h], best = k;
            }
        if (!bc)
            break;
        int           a = (int)(best >> 32), b = (int)(best & 0xffffffffu);
        int           la = v->tok[a].n, lb = v->tok[b].n;
        unsigned char cat[512];
        if (la + lb > (int)sizeof cat)
            break;
        memcpy(cat, v->tok[a].b, (size_t)la);
        memcpy(cat + la, v->tok[b].b, (size_t)lb);
        int id = vocab_find(v, cat, la + lb);
        if (id < 0)
            id = vocab_add(v, cat, la + lb);
        for (int i = 0; i < nu; i++) { /* replace the pair in every piece */
            int w = 0;
            for (int j = 0; j < pc[i].n; j++) {
                if (j + 1 < pc[i].n && pc[i].ids[j] == a && pc[i].ids[j + 1] == b)
                    pc[i].ids[w++] = id, j++;
                else
                    pc[i].ids[w++] = pc[i].ids[j];
            }
            pc[i].n = w;
        }
    }
    free(pkey);
    free(pcnt);
    free(pc);
    free(ids);
    free(text);

    /* filler: join two random tokens (at most 16 bytes), skipping duplicates */
    uint64_t r = stream(seed, "filler tokens");
    while (v->n < v->cap) {
        int a = (int)(sm64(&r) % (uint64_t)v->n), b = (int)(sm64(&r) % (uint64_t)v->n);
        int la = v->tok[a].n, lb = v->tok[b].n;
        if (la + lb > 16)
            continue;
        unsigned char cat[32];
        memcpy(cat, v->tok[a].b, (size_t)la);
        memcpy(cat + la, v->tok[b].b, (size_t)lb);
        if (vocab_find(v, cat, la + lb) < 0)
            vocab_add(v, cat, la + lb);
    }
}

void mk_vocab_free(mk_vocab *v) {
    for (int i = 0; i < v->n; i++)
        free(v->tok[i].b);
    free(v->tok);
    free(v->hash);
}
