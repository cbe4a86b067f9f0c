/* tui.h: the full-screen chat (k3chat MODEL_DIR on a terminal). */
#pragma once
#include "opts.h"

#include <stddef.h>

/* Whether this terminal can run the full-screen chat (TERM set and not dumb, a terminfo entry,
 * cursor addressing). 0: it cannot, and why says so ("" for an unset or dumb TERM, where line
 * mode is simply the expected thing); main then runs the line mode. */
int tui_usable(char *why, size_t n);
/* Run the full-screen chat: the process exit status (0 ok, 1 error, 2 usage). */
int ui_tui_run(const ui_opts *o);
