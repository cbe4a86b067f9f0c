/* cli-inspect.c: k3chat --inspect MODEL_DIR: the checkpoint report on stdout, or the first error
 * as one line on stderr and exit status 1 (the engine side is k3_inspect in src/model/inspect.c).
 * The report quotes MODEL_DIR as given: on a terminal it goes out through txt_term_put (a stream
 * of fopencookie's, so --measure's lines still come as they are written), escaped as the answers
 * of line mode are; into a pipe or a file it goes as it is. */
#include "cli.h"
#include "text.h"
#include "k3.h"

#include <stdio.h>
#include <unistd.h>

static ssize_t term_write(void *cookie, const char *buf, size_t n) {
    txt_term_put(stdout, cookie, buf, n);
    return (ssize_t)n;
}

int cli_inspect(const ui_opts *o) {
    if (!o->dir) {
        fprintf(stderr, "k3chat: --inspect needs MODEL_DIR\n");
        return 2;
    }
    txt_esc esc = {0};
    FILE   *out =
        isatty(fileno(stdout)) ? fopencookie(&esc, "w", (cookie_io_functions_t){.write = term_write}) : NULL;
    if (out)
        setvbuf(out, NULL, _IOLBF, 0);
    k3_status st =
        o->measure ? k3_inspect_measure(o->dir, out ? out : stdout) : k3_inspect(o->dir, out ? out : stdout);
    if (out) {
        fclose(out);
        txt_term_end(stdout, &esc);
    }
    if (st != K3_OK) {
        txt_term_printf(stderr, "k3chat: %s\n", k3_errmsg());
        return 1;
    }
    return 0; /* a write that failed is main's to report (stdout_done: the reason, status 1) */
}
