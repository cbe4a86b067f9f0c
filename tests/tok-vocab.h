/* tok-vocab.h: small tiktoken vocabularies built in memory for the tokenizer and chat-format tests
 * (test-tok.c, test-chat.c, test-chat-tools.c): one "BASE64 RANK" line per token.
 *
 *     t_vocab v = {0};
 *     t_vocab_line(&v, "ab", 2, 256);               // any number of tokens, any ranks
 *     k3_tok *t = t_vocab_chat(&v, 257, "chat");    // + the format's specials from id 257; frees v
 */
#pragma once
#include "k3.h"
#include "tok.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct t_vocab {
    char  *p; /* (cap) the tiktoken.model text so far, NUL-terminated */
    size_t n, cap;
} t_vocab;

/* Append the token s (n bytes) with its rank. */
static inline void t_vocab_line(t_vocab *v, const void *s, size_t n, long rank) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const uint8_t    *b   = s;
    if (v->n + 4 * n + 32 > v->cap) {
        size_t cap = 2 * v->cap + 4 * n + 4096;
        char  *p   = realloc(v->p, cap);
        if (!p)
            abort();
        v->p = p, v->cap = cap;
    }
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w =
            (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        v->p[v->n++] = A[w >> 18 & 63];
        v->p[v->n++] = A[w >> 12 & 63];
        v->p[v->n++] = i + 1 < n ? A[w >> 6 & 63] : '=';
        v->p[v->n++] = i + 2 < n ? A[w & 63] : '=';
    }
    v->n += (size_t)snprintf(v->p + v->n, v->cap - v->n, " %ld\n", rank);
}

/* The 256 single bytes (rank = byte), then words[0..n) from rank 256. */
static inline void t_vocab_bytes_words(t_vocab *v, const char *const *words, size_t n) {
    for (int r = 0; r < 256; r++) {
        uint8_t b = (uint8_t)r;
        t_vocab_line(v, &b, 1, r);
    }
    for (size_t i = 0; i < n; i++)
        t_vocab_line(v, words[i], strlen(words[i]), (long)(256 + i));
}

/* Load v (freed) as a Kimi vocabulary with the chat format's specials at the release's offsets
 * from n_base: [BOS], [EOS], end_of_msg, open, close, sep. name: "NAME.model" and
 * "NAME_config.json" in error messages. NULL (and the reason printed) when it does not load. */
static inline k3_tok *t_vocab_chat(t_vocab *v, int n_base, const char *name) {
    char cfg[512], model[64], config[64];
    snprintf(cfg, sizeof cfg,
             "{\"added_tokens_decoder\": {\"%d\": {\"content\": \"[BOS]\"}, \"%d\": {\"content\": \"[EOS]\"},"
             " \"%d\": {\"content\": \"<|end_of_msg|>\"}, \"%d\": {\"content\": \"<|open|>\"},"
             " \"%d\": {\"content\": \"<|close|>\"}, \"%d\": {\"content\": \"<|sep|>\"}}}",
             n_base, n_base + 1, n_base + 2, n_base + 3, n_base + 4, n_base + 5);
    snprintf(model, sizeof model, "%s.model", name);
    snprintf(config, sizeof config, "%s_config.json", name);
    k3_tok *t = NULL;
    if (tok_load_mem(v->p ? v->p : "", v->n, model, cfg, config, TOK_KIMI, &t))
        printf("vocab: %s\n", k3_errmsg());
    free(v->p);
    *v = (t_vocab){0};
    return t;
}
