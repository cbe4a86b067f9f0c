/* cli-tok.c: --tokenize / --detokenize, tooling entries for the tokenizer.
 *
 *   k3chat --tokenize VOCAB_DIR FILE     ids of FILE's bytes (ordinary text, specials not
 *                                        allowed), decimal, single spaces, one line
 *   k3chat --detokenize VOCAB_DIR FILE   FILE holds such ids (white space or commas
 *                                        between them); writes the raw bytes to stdout
 *                                        (on a terminal through txt_term_put: escaped)
 * --pattern kimi|o200k overrides the pre-tokenizer family chosen from VOCAB_DIR.
 */
#include "cli.h"
#include "text.h"
#include "k3.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        txt_term_printf(stderr, "k3chat: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    k3_buf b   = {0};
    int    err = k3_buf_read(&b, f);
    if (f != stdin)
        fclose(f);
    if (err) {
        txt_term_printf(stderr, "k3chat: %s: %s%s\n", path,
                        err == ENOMEM ? "" : "read error: ", strerror(err));
        free(b.p);
        return NULL;
    }
    *len = b.n;
    return b.p;
}

static k3_tok *load(const ui_opts *o) {
    k3_tok *t;
    if (k3_tok_load(o->dir, o->pattern, &t)) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        return NULL;
    }
    return t;
}

/* FILE, then the vocabulary; --tokenize encodes FILE and prints the ids, --detokenize reads
 * FILE's ids (k3_ids_parse) and writes their bytes. */
static int run(const ui_opts *o, int detok) {
    size_t len;
    char  *text = slurp(o->file, &len);
    if (!text)
        return 1;
    k3_tok   *t     = load(o);
    k3_ids    ids   = {0};
    char     *bytes = NULL;
    size_t    nb    = 0;
    int       rc    = 1;
    k3_status st;
    if (!t)
        goto done;
    if (detok) {
        st = k3_ids_parse(text, k3_tok_n_vocab(t) - 1, &ids);
        if (!st)
            st = k3_tok_decode(t, ids.v, ids.n, &bytes, &nb);
    } else
        st = k3_tok_encode(t, text, len, 0, &ids);
    if (st) {
        txt_term_printf(stderr, "k3chat: %s: %s\n", o->file, k3_errmsg());
        goto done;
    }
    if (detok) /* the vocabulary's bytes: escaped on a terminal, as they are into a pipe or file */
        txt_term_put(stdout, NULL, bytes, nb);
    else {
        for (size_t i = 0; i < ids.n; i++)
            printf(i ? " %d" : "%d", ids.v[i]);
        printf("\n");
    }
    rc = 0; /* a write that failed is main's to report (stdout_done: the reason, status 1) */
done:
    free(bytes);
    k3_ids_free(&ids);
    k3_tok_free(t);
    free(text);
    return rc;
}

int cli_tokenize(const ui_opts *o) {
    return run(o, 0);
}

int cli_detokenize(const ui_opts *o) {
    return run(o, 1);
}
