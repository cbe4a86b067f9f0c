/* fuzz-encode.c: the encoder on arbitrary bytes, both pre-tokenizer families: never crashes,
 * decode(encode(s)) == s, and no control id comes out of ordinary text. */
#include "fuzz.h"
#include "k3.h"

static k3_tok *tk[2];

static void b64(const uint8_t *s, size_t n, char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t            o   = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v =
            (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        out[o++] = A[v >> 18];
        out[o++] = A[(v >> 12) & 63];
        out[o++] = i + 1 < n ? A[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? A[v & 63] : '=';
    }
    out[o] = 0;
}

/* 256 single bytes, then merges that make multi-byte tokens (ASCII words, UTF-8 pieces). */
static void setup(void) {
    static const char *merges[] = {"th",       "he", "the",  " t", " the", "in",       "ing",
                                   "er",       "  ", "\n\n", "12", "123",  "\xe4\xb8", "\xe4\xb8\xad",
                                   "\xf0\x9f", "'s", " a",   "an", "and"};
    char               path[512], line[64];
    snprintf(path, sizeof path, "%s/vocab", fz_scratch());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    if (system(cmd))
        abort();
    snprintf(path, sizeof path, "%s/vocab/tiktoken.model", fz_scratch());
    FILE *f = fopen(path, "w");
    int   r = 0;
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        b64(&c, 1, line);
        fprintf(f, "%s %d\n", line, r++);
    }
    for (size_t i = 0; i < sizeof merges / sizeof *merges; i++) {
        b64((const uint8_t *)merges[i], strlen(merges[i]), line);
        fprintf(f, "%s %d\n", line, r++);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/vocab", fz_scratch());
    if (k3_tok_load(path, "kimi", &tk[0]) || k3_tok_load(path, "o200k", &tk[1])) {
        fprintf(stderr, "fuzz-encode: vocabulary: %s\n", k3_errmsg());
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tk[0])
        setup();
    for (int p = 0; p < 2; p++) {
        k3_ids ids = {0};
        FZ_CHECK(k3_tok_encode(tk[p], (const char *)data, size, 0, &ids) == K3_OK);
        for (size_t i = 0; i < ids.n; i++)
            FZ_CHECK(!k3_tok_is_special(tk[p], ids.v[i]));
        char  *out;
        size_t n;
        FZ_CHECK(k3_tok_decode(tk[p], ids.v, ids.n, &out, &n) == K3_OK);
        FZ_CHECK(n == size && (size == 0 || !memcmp(out, data, size)));
        free(out);
        k3_ids_free(&ids);
    }
    return 0;
}
