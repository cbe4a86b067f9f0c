/* cli-inspect.c: placeholder until its module lands (see ui/cli.h). */
#include "cli.h"
#include <stdio.h>

int cli_inspect(const cli_opts *o) {
    (void)o;
    fprintf(stderr, "k3chat: this mode is not built yet\n");
    return 1;
}
