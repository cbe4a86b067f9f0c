/* fuzz-transcript.c: a transcript file (JSON Lines): k3_conv_load accepts it or names the line,
 * never crashes, and a failed load leaves the conversation untouched. */
#include "fuzz.h"
#include "k3.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_write("t.jsonl", data, size);
    k3_conv    *c    = k3_conv_new();
    FZ_CHECK(c != NULL);
    FZ_CHECK(k3_conv_add(c, K3_ROLE_USER, "keep me", NULL) == K3_OK);
    if (k3_conv_load(c, path, NULL) != K3_OK) {
        FZ_CHECK(k3_errmsg()[0] != 0);
        FZ_CHECK(k3_conv_count(c) == 1 && !strcmp(k3_conv_msg(c, 0)->content, "keep me"));
    }
    k3_conv_free(c);
    return 0;
}
