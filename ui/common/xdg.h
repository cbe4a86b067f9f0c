/* xdg.h: the XDG base directories k3chat uses (state: history; data: transcripts; config: themes). */
#pragma once
#include <stddef.h>

/* "$VAR/k3chat/SUB", or "$HOME/FALLBACK/k3chat/SUB" when VAR is unset, created (mkdir -p) when
 * create is set. 0 ok; -1 when neither variable is set or the directory cannot be made (errno:
 * why the first folder that could not be made failed). */
int xdg_dir(const char *var, const char *fallback, const char *sub, int create, char *out, size_t n);
/* The first folder of the path dir that is not a directory (dir itself when all are), in buf. */
const char *xdg_first_missing(const char *dir, char *buf, size_t n);
