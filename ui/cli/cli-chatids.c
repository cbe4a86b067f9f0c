/* cli-chatids.c: `k3chat --chat-ids MODEL_DIR TRANSCRIPT`: the ids the chat encoder makes
 * for a transcript's messages, ending with the generation prompt, as decimal numbers
 * separated by single spaces on one line. The thinking mode and effort come from the
 * transcript's header, overridden by --think / --effort. Only the vocabulary of
 * MODEL_DIR is read (tiktoken.model, tokenizer_config.json), not the weights. */
#include "cli.h"
#include "engine.h"
#include "text.h"
#include "k3.h"

#include <stdio.h>
#include <string.h>

int cli_chat_ids(const ui_opts *o) {
    k3_tok          *tok = NULL;
    k3_conv         *c   = k3_conv_new();
    k3_ids           ids = {0};
    k3_load_info     info;
    k3_conv_settings set;
    int              rc = 1;
    if (!c) {
        fprintf(stderr, "k3chat: out of memory\n");
        return 1;
    }
    if (k3_tok_load(o->dir, o->pattern, &tok) || k3_conv_load(c, o->file, &info))
        goto fail;
    char notes[400]; /* the one rule for invalid UTF-8: U+FFFD, and say so; a torn line too */
    ue_load_notes(&info, NULL, notes, sizeof notes); /* no model: no fingerprint to compare */
    if (notes[0])
        txt_term_printf(stderr, "k3chat: %s: %s\n", o->file, notes);
    k3_conv_get_settings(c, &set);
    if (o->think >= 0)
        set.think = o->think;
    if (o->effort)
        snprintf(set.effort, sizeof set.effort, "%s", o->effort);
    if (k3_conv_set_settings(c, &set) || k3_conv_render(c, tok, 1, &ids))
        goto fail;
    for (size_t i = 0; i < ids.n; i++)
        printf(i ? " %d" : "%d", (int)ids.v[i]);
    printf("\n");
    rc = 0; /* a write that failed is main's to report (stdout_done: the reason, status 1) */
    goto done;
fail:
    txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
done:
    k3_ids_free(&ids);
    k3_conv_free(c);
    k3_tok_free(tok);
    return rc;
}
