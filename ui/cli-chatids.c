/* cli-chatids.c: placeholder until the conversation module lands (see ui/cli.h). */
#include "cli.h"
#include <stdio.h>

int cli_chat_ids(const cli_opts *o) {
    (void)o;
    fprintf(stderr, "k3chat: this mode is not built yet\n");
    return 1;
}
