/* fuzz-transcript.c: a transcript file (JSON Lines): k3_conv_load accepts it or names the line,
 * never crashes, and a failed load leaves the conversation untouched. A file it accepts is kept
 * by a save: the saved file loads, and its save writes the same bytes again (but the header's
 * "created", the time of writing): what a load keeps (k3chat(5)) is stable. */
#include "fuzz.h"
#include "k3.h"

/* The text of path with the value of "created" blanked; NULL when unreadable. */
static char *read_blanked(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long  n = ftell(f);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    rewind(f);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    if (!s)
        return NULL;
    s[n]    = 0;
    char *c = strstr(s, "\"created\":\"");
    for (c = c ? c + 11 : NULL; c && *c && *c != '"'; c++)
        *c = '-';
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_write("t.jsonl", data, size);
    k3_conv    *c    = k3_conv_new();
    FZ_CHECK(c != NULL);
    FZ_CHECK(k3_conv_add(c, K3_ROLE_USER, "keep me", NULL) == K3_OK);
    if (k3_conv_load(c, path, NULL) != K3_OK) {
        FZ_CHECK(k3_errmsg()[0] != 0);
        FZ_CHECK(k3_conv_count(c) == 1 && !strcmp(k3_conv_msg(c, 0)->content, "keep me"));
        k3_conv_free(c);
        return 0;
    }
    char p2[512], p3[512];
    snprintf(p2, sizeof p2, "%s/saved.jsonl", fz_scratch());
    snprintf(p3, sizeof p3, "%s/again.jsonl", fz_scratch());
    k3_conv *d = k3_conv_new();
    FZ_CHECK(d != NULL);
    FZ_CHECK(k3_conv_save(c, p2) == K3_OK);
    FZ_CHECK(k3_conv_load(d, p2, NULL) == K3_OK);
    FZ_CHECK(k3_conv_count(d) == k3_conv_count(c) &&
             k3_conv_abandoned_count(d) == k3_conv_abandoned_count(c));
    FZ_CHECK(k3_conv_save(d, p3) == K3_OK);
    char *a = read_blanked(p2), *b = read_blanked(p3);
    FZ_CHECK(a && b && !strcmp(a, b));
    free(a);
    free(b);
    k3_conv_free(d);
    k3_conv_free(c);
    return 0;
}
