/* cli-inspect.c: k3chat --inspect MODEL_DIR: the checkpoint report on stdout, or the first error
 * as one line on stderr and exit status 1 (the engine side is k3_inspect in src/model/inspect.c). */
#include "cli.h"
#include "text.h"
#include "k3.h"

#include <stdio.h>

int cli_inspect(const ui_opts *o) {
    if (!o->dir) {
        fprintf(stderr, "k3chat: --inspect needs MODEL_DIR\n");
        return 2;
    }
    k3_status st = o->measure ? k3_inspect_measure(o->dir, stdout) : k3_inspect(o->dir, stdout);
    if (st != K3_OK) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        return 1;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
