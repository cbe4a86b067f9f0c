/* worker.c: the real engine backend of the UI seam (engine.h) over src/k3.h.
 * Placeholder until the engine, tokenizer and conversation modules are on main. */
#include "engine.h"

#include <stdio.h>

static int real_open(ue *u, void **self, char *err, size_t errn) {
    (void)u;
    *self = NULL;
    snprintf(err, errn, "the inference engine is not built into this k3chat yet "
                        "(K3_MOCK=FILE runs the scripted mock engine)");
    return -1;
}
static void real_cmd(ue *u, void *self, const ui_ev *c) { (void)u; (void)self; (void)c; }
static void real_close(void *self) { (void)self; }

const ue_backend ue_backend_real = {"k3", real_open, real_cmd, NULL, real_close};
