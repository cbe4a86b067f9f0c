/* fuzz-vocab.c: tiktoken.model and tokenizer_config.json (split at the first NUL byte):
 * k3_tok_load accepts or names the file and line, never crashes; an accepted vocabulary
 * round-trips a short text. */
#include "fuzz.h"
#include "k3.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_write_split("tiktoken.model", "tokenizer_config.json", data, size);
    k3_tok *t;
    if (k3_tok_load(fz_scratch(), NULL, &t) != K3_OK) {
        FZ_CHECK(k3_errmsg()[0] != 0);
        return 0;
    }
    k3_ids ids = {0};
    if (k3_tok_encode(t, "ab c", 4, 0, &ids) == K3_OK) {
        char  *out;
        size_t n;
        if (k3_tok_decode(t, ids.v, ids.n, &out, &n) == K3_OK) {
            FZ_CHECK(n == 4 && !memcmp(out, "ab c", 4));
            free(out);
        }
    }
    k3_ids_free(&ids);
    k3_tok_free(t);
    return 0;
}
