/* loadprog.c: the loading progress line of the line modes (format and rules: loadprog.h). */
#include "loadprog.h"
#include "ev.h"
#include "settings.h"
#include "text.h"
#include "k3.h"

#include <string.h>
#include <unistd.h>

void load_prog_init(load_prog *p, FILE *f) {
    *p       = (load_prog){.f = f};
    p->tty   = isatty(fileno(f));
    p->every = p->tty ? 0.2 : 10.0;
}

void load_prog_cb(const char *what, uint64_t done, uint64_t total, void *ud) {
    load_prog *p   = ud;
    double     now = ev_now();
    if (!p->started) {
        p->started = 1;
        p->t0      = now;
        p->last    = now - p->every; /* the first call prints */
    }
    p->done  = done;
    p->total = total;
    if (now - p->last < p->every)
        return;
    p->last   = now;
    double el = now - p->t0, rate = el > 0 ? (double)done / el : 0;
    double pct      = total ? 100.0 * (double)done / (double)total : 0;
    char   left[32] = "";
    if (rate > 0 && total > done)
        snprintf(left, sizeof left, "  %.0f s left", (double)(total - done) / rate);
    double unit = total >= 1e9 ? 1e9 : 1e6;
    fprintf(p->f, "%sk3chat: loading %3.0f%%  %.2f of %.2f %s  %.0f MB/s%s  (", p->tty ? "\r\033[K" : "", pct,
            (double)done / unit, (double)total / unit, unit == 1e9 ? "GB" : "MB", rate / 1e6, left);
    txt_term_printf(p->f, "%.*s", what ? (int)strnlen(what, 80) : 0,
                    what ? what : ""); /* a name from a shard's header: escaped, a message */
    fprintf(p->f, ")%s", p->tty ? "" : "\n");
    fflush(p->f);
}

void load_prog_finish(load_prog *p, int ok) {
    if (!p->started)
        return;
    double el = ev_now() - p->t0;
    if (p->tty)
        fprintf(p->f, "\r\033[K");
    if (ok)
        fprintf(p->f, "k3chat: loaded %.2f %s in %.1f s (%.0f MB/s)\n",
                (double)p->done / (p->done >= 1e9 ? 1e9 : 1e6), p->done >= 1e9 ? "GB" : "MB", el,
                el > 0 ? (double)p->done / el / 1e6 : 0.0);
    fflush(p->f);
}

/* The speed estimate (k3_params.estimate): before the first progress line. */
static void load_prog_estimate(const char *line, void *ud) {
    load_prog *p = ud;
    txt_term_printf(p->f, "k3chat: %s\n", line);
}

int load_model_verbose(const char *dir, k3_params *par, k3_model **out) {
    load_prog lp;
    load_prog_init(&lp, stderr);
    par->progress    = load_prog_cb;
    par->estimate    = load_prog_estimate;
    par->progress_ud = &lp;
    k3_status st     = k3_model_open(dir, par, out);
    load_prog_finish(&lp, st == K3_OK);
    par->progress = NULL; /* lp lives on this stack frame only */
    par->estimate = NULL;
    if (st)
        return st;
    k3_model_info mi;
    k3_model_get_info(*out, &mi);
    if (!chat_verbose()) /* K3_VERBOSE: the engine's log has told it */
        txt_term_printf(stderr, "k3chat: %s\n", mi.fit);
    return K3_OK;
}
