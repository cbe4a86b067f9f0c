/* loadprog.h: the loading progress line of the line modes (--prompt, --ids, --plain, --serve,
 * --replay) on stderr (implementation: loadprog.c).
 *
 * On a terminal one live line (rewritten at most five times a second, cleared at the end);
 * otherwise a line when loading starts, one every ~10 s and one at the end, so logs get a
 * bounded number of lines. Each line: what is loading, percent, bytes done of total, MB/s
 * over the whole load so far and the time left at that rate:
 *   k3chat: loading  42%  1.71 of 4.07 GB  312 MB/s  8 s left  (model.layers.1.mlp.up_proj.weight)
 *   k3chat: loaded 4.07 GB in 13.1 s (311 MB/s)
 */
#pragma once
#include <stdint.h>
#include <stdio.h>

typedef struct load_prog {
    FILE    *f;
    int      tty;
    int      started;
    double   t0, last; /* start; last line printed              */
    double   every;    /* seconds between lines                 */
    uint64_t done, total;
} load_prog;

void load_prog_init(load_prog *p, FILE *f);
/* A k3_progress_cb: ud is the load_prog. */
void load_prog_cb(const char *what, uint64_t done, uint64_t total, void *ud);
/* The final line (only when something was reported); clears the live line on a terminal. */
void load_prog_finish(load_prog *p, int ok);

/* k3_model_open with the speed estimate's line (once the files are checked, when there is one)
 * and the progress line on stderr, then the memory fit's line ("k3chat: memory fit: ...") on
 * stderr; par->progress and par->estimate are set here. The line modes' one way to open a model. */
typedef struct k3_params k3_params;
typedef struct k3_model  k3_model;
int                      load_model_verbose(const char *dir, k3_params *par, k3_model **out);
