/* serve.h: the OpenAI-compatible HTTP server (k3chat MODEL_DIR --serve [ADDR:]PORT). */
#pragma once
#include "opts.h"

#include <stddef.h>

/* Run the server until SIGINT/SIGTERM: the process exit status (0 ok, 1 error, 2 usage). */
int cli_serve(const ui_opts *o);
/* Parse an OpenAI chat request body as the server would; 0 ok, -1 with err set. */
int serve_check_body(const char *body, size_t n, char *err, size_t errn);
