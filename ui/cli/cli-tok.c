/* cli-tok.c: --tokenize / --detokenize, tooling entries for the tokenizer.
 *
 *   k3chat --tokenize VOCAB_DIR FILE     ids of FILE's bytes (ordinary text, specials not
 *                                        allowed), decimal, single spaces, one line
 *   k3chat --detokenize VOCAB_DIR FILE   FILE holds such ids (any whitespace); writes
 *                                        the raw bytes to stdout
 * --pattern kimi|o200k overrides the pre-tokenizer family chosen from VOCAB_DIR.
 */
#include "cli.h"
#include "k3.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "k3chat: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char  *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *nb = realloc(b, cap *= 2);
        if (!nb)
            free(b);
        b = nb;
    }
    int err = ferror(f);
    if (f != stdin)
        fclose(f);
    if (!b || err) {
        fprintf(stderr, "k3chat: %s: %s\n", path, b ? "read error" : "out of memory");
        free(b);
        return NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}

static k3_tok *load(const cli_opts *o) {
    k3_tok *t;
    if (k3_tok_load(o->dir, o->pattern, &t)) {
        fprintf(stderr, "k3chat: %s\n", k3_errmsg());
        return NULL;
    }
    return t;
}

int cli_tokenize(const cli_opts *o) {
    size_t len;
    char  *text = slurp(o->file, &len);
    if (!text)
        return 1;
    k3_tok *t   = load(o);
    k3_ids  ids = {0};
    int     rc  = 1;
    if (!t)
        goto done;
    if (k3_tok_encode(t, text, len, 0, &ids)) {
        fprintf(stderr, "k3chat: %s: %s\n", o->file, k3_errmsg());
        goto done;
    }
    for (size_t i = 0; i < ids.n; i++)
        printf(i ? " %d" : "%d", ids.v[i]);
    printf("\n");
    rc = fflush(stdout) ? 1 : 0;
done:
    k3_ids_free(&ids);
    k3_tok_free(t);
    free(text);
    return rc;
}

int cli_detokenize(const cli_opts *o) {
    size_t len;
    char  *text = slurp(o->file, &len);
    if (!text)
        return 1;
    k3_tok *t     = load(o);
    k3_ids  ids   = {0};
    char   *bytes = NULL;
    size_t  nb;
    int     rc = 1;
    if (!t)
        goto done;
    for (char *p = text;;) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
            p++;
        if (!*p)
            break;
        char *end;
        errno  = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= k3_tok_n_vocab(t) ||
            (*end && *end != ' ' && *end != '\n' && *end != '\t' && *end != '\r')) {
            int w = 0;
            while (p[w] && p[w] != ' ' && p[w] != '\n' && w < 40)
                w++;
            fprintf(stderr, "k3chat: %s: token %zu: '%.*s' is not an id in 0..%d\n", o->file, ids.n + 1, w, p,
                    k3_tok_n_vocab(t) - 1);
            goto done;
        }
        if (k3_ids_push(&ids, (int32_t)v)) {
            fprintf(stderr, "k3chat: %s\n", k3_errmsg());
            goto done;
        }
        p = end;
    }
    if (k3_tok_decode(t, ids.v, ids.n, &bytes, &nb)) {
        fprintf(stderr, "k3chat: %s: %s\n", o->file, k3_errmsg());
        goto done;
    }
    rc = (fwrite(bytes, 1, nb, stdout) != nb || fflush(stdout)) ? 1 : 0;
done:
    free(bytes);
    k3_ids_free(&ids);
    k3_tok_free(t);
    free(text);
    return rc;
}
