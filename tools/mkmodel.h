/* mkmodel.h: what the parts of k3-mkmodel share (k3-mkmodel.c writes the checkpoint,
 * mkmodel-bpe.c learns the tokenizer's vocabulary): the deterministic random numbers and the
 * vocabulary. The Makefile links tools/mkmodel-*.c into k3-mkmodel.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* ---- deterministic random numbers ---------------------------------------------------------- */

static inline uint64_t sm64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z          = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z          = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* the stream of one tensor: (seed, name without prefix) */
static inline uint64_t stream(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    uint64_t s = seed * 0xD1B54A32D192ED03ull ^ h;
    sm64(&s);
    return s;
}

/* ---- tokenizer vocabulary (mkmodel-bpe.c) ---------------------------------------------------- */

typedef struct mk_tok {
    unsigned char *b; /* [n] bytes */
    int            n;
} mk_tok;

typedef struct mk_vocab {
    mk_tok *tok; /* [n], rank order */
    int     n, cap;
    int    *hash; /* open addressing over tok ids, -1 = empty; [hcap] */
    size_t  hcap;
} mk_vocab;

/* The base vocabulary of 256 + merges tokens learned by byte-level BPE from a built-in text (see
 * mkmodel-bpe.c); filler tokens from seed if the text runs out of pairs. Freed by mk_vocab_free. */
void mk_vocab_build(mk_vocab *v, int merges, uint64_t seed);
void mk_vocab_free(mk_vocab *v);
