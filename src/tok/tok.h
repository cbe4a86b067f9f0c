/* tok.h: tokenizer internals shared by tok.c, tok-pre.c, chat-format.c and the tests/bench.
 *
 * The public face is the "tokenizer and chat format" section of k3.h; this header
 * exposes the pieces below it so tests can check each stage on its own:
 *   tok_pre_*   pre-tokenizer (the kimi / o200k split patterns, hand-written matchers)
 *   tok_bpe*    rank BPE of one piece (heap version and the quadratic reference)
 *   tok_utf8_*  UTF-8 decoding helpers used by the decoders
 */
#pragma once
#include "k3-impl.h"

#define TOK_N_RESERVED 256 /* reserved special ids after the base vocabulary */
#define TOK_RANK_NONE INT32_MAX
#define TOK_FILTER_LOG2 21 /* 256 KB: stays in cache; ~9% false positives at 200K tokens */
#define TOK_FILTER_BITS (1u << TOK_FILTER_LOG2)

enum tok_family { TOK_KIMI = 0, TOK_O200K = 1 };

struct k3_tok {
    enum tok_family family;
    int32_t         n_base;         /* N: base vocabulary size (ranks 0..N-1)               */
    uint8_t        *blob;           /* (total bytes) all token byte strings back to back     */
    uint32_t       *off;            /* (n_base + 1) offset of rank r's bytes in blob         */
    int32_t         max_len;        /* longest base token in bytes                           */
    int32_t         byte_rank[256]; /* rank of each single byte                              */
    /* open-addressing hash: byte string -> rank. A slot holds the first 8 bytes of its
     * token, so a lookup of a token of <= 8 bytes touches one cache line. */
    struct tok_slot {
        uint64_t head; /* key8 of the bytes: determines them when len <= 8      */
        uint32_t tag;  /* hash & ~0xFF | min(len, 255)                          */
        int32_t  rank; /* -1 = empty                                            */
    } * ht;            /* (ht_mask + 1)                                         */
    uint32_t  ht_mask;
    int32_t  *pair_rank; /* (65536) rank of each 2-byte string, or TOK_RANK_NONE   */
    uint64_t *filter;    /* (TOK_FILTER_BITS / 64) bit per hash of every token: a
                          * cache-resident "surely not a token" test before the slots */
    /* specials: ids n_base .. n_base + 255 */
    char    **sp_name;       /* (TOK_N_RESERVED) NUL-terminated names                 */
    uint32_t *sp_len;        /* (TOK_N_RESERVED) strlen of each name                  */
    uint8_t   sp_first[256]; /* 1 when some special name starts with this byte        */
    int32_t   max_sp_len;
};

/* Rank of bytes s[0..n), or TOK_RANK_NONE. */
int32_t tok_rank(const k3_tok *t, const uint8_t *s, size_t n);

/* ---- pre-tokenizer (tok-pre.c) ---- */
/* Build the per-code-point class table (once per process; k3_tok_load calls it, so the
 * first encode does not pay for it). */
void tok_pre_init(void);
/* End (byte offset, > i) of the piece that starts at byte i of s[0..n). */
size_t tok_pre_next(enum tok_family f, const uint8_t *s, size_t n, size_t i);
/* Kimi input cutting (the release's wrapper): chunks of 400,000 chars from the start of
 * the text (tok_kimi_chunk_end: byte end of the chunk starting at i), each cut further
 * so that no piece holds more than 25,000 consecutive chars of one str.isspace() class
 * (tok_kimi_cut_next: end of the piece starting at i, n = the chunk end). Chars are
 * code points; an invalid byte counts as one non-space char. */
size_t tok_kimi_chunk_end(const uint8_t *s, size_t n, size_t i);
size_t tok_kimi_cut_next(const uint8_t *s, size_t n, size_t i);
/* Decode the code point at s[i] (n = end): returns it and sets *len; an invalid byte
 * returns TOK_CP_INVALID with *len = 1. Strict: no overlongs, surrogates, > 10FFFF. */
#define TOK_CP_INVALID 0xFFFFFFFFu
uint32_t tok_utf8_next(const uint8_t *s, size_t n, size_t i, int *len);
int      tok_is_han(uint32_t cp);
int      tok_is_py_space(uint32_t cp); /* Python str.isspace() */

/* ---- BPE (tok.c) ---- */
/* Scratch for tok_bpe (reused across pieces; zero-init, free with tok_scratch_free). */
typedef struct tok_scratch {
    uint32_t *next, *prev; /* (cap + 1) linked list of part starts                  */
    uint64_t *heap;        /* (heap_cap) (rank << 32 | start) min-heap              */
    uint32_t *heap_end;    /* parallel to heap: pair end at push time               */
    size_t    cap, heap_cap;
} tok_scratch;
void tok_scratch_free(tok_scratch *sc);
/* BPE one piece (tiktoken's byte_pair_merge incl. the whole-piece fast path), append. */
k3_status tok_bpe(const k3_tok *t, const uint8_t *s, size_t n, tok_scratch *sc, k3_ids *out);
/* The quadratic reference (tiktoken's loop as written), for tests. */
k3_status tok_bpe_ref(const k3_tok *t, const uint8_t *s, size_t n, k3_ids *out);
/* Encode without the kimi cutting or specials (one pre-tokenized segment). */
k3_status tok_encode_segment(const k3_tok *t, const uint8_t *s, size_t n, tok_scratch *sc, k3_ids *out);

/* Build a tokenizer from memory (tests): tiktoken.model text and optional config JSON
 * text; names are used in error messages. */
k3_status tok_load_mem(const char *model_txt, size_t model_len, const char *model_name,
                       const char *config_json, const char *config_name, enum tok_family f, k3_tok **out);

/* Append the U+FFFD-sanitized form of b[0..n) (maximal-subpart rule) to a malloc'ed
 * buffer; whole-string reference used by k3_tok_decode_text. */
/* k3_detok fed one id at a time (the tests; the chat parser feeds bytes): as k3_detok_feed_bytes
 * with the id's piece. */
k3_status k3_detok_feed(k3_detok *d, int32_t id, const char **text, size_t *len);
k3_status tok_utf8_sanitize(const uint8_t *b, size_t n, char **out, size_t *len);

/* chat-format.c's open_tag on its own (tests: attribute escaping and segment boundaries). */
k3_status chat_test_open_tag(const k3_tok *t, const char *tag, const char *const *attrs, k3_ids *out);
