/* cli-tok.c: placeholder until the tokenizer module lands (see ui/cli.h). */
#include "cli.h"
#include <stdio.h>

static int todo(void) {
    fprintf(stderr, "k3chat: this mode is not built yet\n");
    return 1;
}
int cli_tokenize(const cli_opts *o) { (void)o; return todo(); }
int cli_detokenize(const cli_opts *o) { (void)o; return todo(); }
