/* clip.c: /copy (see clip.h).
 *
 * OSC 52 (ESC ] 52 ; c ; BASE64 BEL) asks the terminal to set its clipboard; it works over SSH
 * because the terminal, not the remote machine, owns the clipboard. Inside tmux the sequence is
 * sent twice: plain (taken by tmux when its set-clipboard option is on) and wrapped in a DCS
 * passthrough (forwarded when allow-passthrough is on); inside screen, in DCS pieces. Whether
 * the terminal honoured it cannot be read back, so the message says what was sent; terminals
 * known to ignore OSC 52 (the Linux console, dumb) get an error and the /export hint instead.
 */
#include "clip.h"
#include "md.h"
#include "text.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse_num(const char *w, int *out) {
    char *end;
    long  v = strtol(w, &end, 10);
    if (end == w || *end || v < 1 || v > 1000000)
        return -1;
    *out = (int)v;
    return 0;
}

int clip_parse(const char *arg, clip_req *q, char *err, size_t errn) {
    char buf[256], *w[4], qw[44]; /* qw: a word quoted in a message, cut (txt_clip) */
    int  nw   = 0;
    q->answer = q->code = 0;
    snprintf(buf, sizeof buf, "%s", arg ? arg : "");
    for (char *s = strtok(buf, " \t"); s; s = strtok(NULL, " \t")) {
        if (nw == 3) {
            snprintf(err, errn, "/copy: too many words (usage: /copy [N] [code [K]], e.g. /copy 2 code 1)");
            return -1;
        }
        w[nw++] = s;
    }
    int i = 0;
    if (i < nw && strcmp(w[i], "code")) {
        if (parse_num(w[i], &q->answer)) {
            snprintf(err, errn, "/copy: '%s' is not an answer number (1, 2, ...) or 'code'",
                     txt_clip(qw, sizeof qw, w[i]));
            return -1;
        }
        i++;
    }
    if (i < nw) {
        if (strcmp(w[i], "code")) {
            snprintf(err, errn, "/copy: expected 'code' after the answer number, got '%s'",
                     txt_clip(qw, sizeof qw, w[i]));
            return -1;
        }
        q->code = 1;
        i++;
        if (i < nw && parse_num(w[i], &q->code)) {
            snprintf(err, errn, "/copy code: '%s' is not a code block number (1, 2, ...)",
                     txt_clip(qw, sizeof qw, w[i]));
            return -1;
        }
        i += i < nw;
    }
    if (i < nw) {
        snprintf(err, errn, "/copy: unexpected '%s' (usage: /copy [N] [code [K]])",
                 txt_clip(qw, sizeof qw, w[i]));
        return -1;
    }
    return 0;
}

int clip_select(const clip_req *q, const char *const *answers, const size_t *lens, int n, txt_buf *out,
                char *err, size_t errn) {
    out->n = 0;
    txt_buf_add(out, "", 0);
    if (n <= 0) {
        snprintf(err, errn, "/copy: there is no answer yet");
        return -1;
    }
    int a = q->answer ? q->answer : n;
    if (a > n) {
        snprintf(err, errn, "/copy %d: there %s only %d answer%s", a, n == 1 ? "is" : "are", n,
                 n == 1 ? "" : "s");
        return -1;
    }
    const char *s = answers[a - 1];
    size_t      l = lens[a - 1];
    if (!q->code)
        return txt_buf_add(out, s, l) ? (snprintf(err, errn, "/copy: out of memory"), -1) : 0;
    int count = md_code_block(s, l, q->code, out);
    if (count < 0) {
        snprintf(err, errn, "/copy: out of memory");
        return -1;
    }
    if (q->code > count) {
        if (count == 0)
            snprintf(err, errn, "/copy code: answer %d has no code block", a);
        else
            snprintf(err, errn, "/copy code %d: answer %d has only %d code block%s", q->code, a, count,
                     count == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

static long utf8_chars(const char *s, size_t n) {
    long c = 0;
    for (size_t k = 0; k < n; k++)
        c += ((unsigned char)s[k] & 0xC0) != 0x80;
    return c;
}

int clip_send(int fd, const char *s, size_t n, char *msg, size_t msgn) {
    const char *term = getenv("TERM");
    if (term && (!strcmp(term, "linux") || !strcmp(term, "dumb"))) {
        snprintf(msg, msgn,
                 "/copy: this terminal (TERM=%s) ignores OSC 52, so nothing was copied; "
                 "/export FILE.md writes the conversation to a file",
                 term);
        return -1;
    }
    txt_buf b   = {0};
    int     mux = md_term_mux();
    int     rc  = 0;
    if (mux == MD_TERM_TMUX)
        rc |= md_osc52(&b, s, n, MD_TERM_PLAIN); /* for tmux's own clipboard (set-clipboard on) */
    rc |= md_osc52(&b, s, n, mux);
    if (rc) {
        free(b.p);
        snprintf(msg, msgn, "/copy: out of memory");
        return -1;
    }
    for (size_t off = 0; off < b.n;) {
        ssize_t w = write(fd, b.p + off, b.n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            snprintf(msg, msgn, "/copy: cannot write to the terminal: %s", strerror(errno));
            free(b.p);
            return -1;
        }
        off += (size_t)w;
    }
    free(b.p);
    snprintf(msg, msgn,
             "copied %ld characters to the clipboard (OSC 52%s; a terminal that ignores OSC 52 leaves the "
             "clipboard unchanged: /export FILE.md writes the conversation to a file instead)",
             utf8_chars(s, n),
             mux == MD_TERM_TMUX     ? " through tmux"
             : mux == MD_TERM_SCREEN ? " through screen"
                                     : "");
    return 0;
}
