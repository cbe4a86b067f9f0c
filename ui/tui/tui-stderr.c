/* tui-stderr.c: stderr, and the terminal after a fatal signal, while the full-screen chat owns
 * the terminal.
 *
 * Anything written to fd 2 while curses draws (a library's probe: the Vulkan loader with
 * VK_LOADER_DEBUG, a Mesa driver's warning; a stray fprintf) would land wherever the cursor is
 * and paint over the chat's rows until they are drawn again. So while the screen is ours, fd 2 is
 * the write end of a pipe when it was a terminal (a file or a pipe is left alone: nothing paints
 * there, and a log keeps all); a thread reads it and sends what comes, line by line, to the
 * display as notices, each line after "stderr: " (EV_INFO through the event queue: drawn through
 * the one text path, where control characters are not drawn). A partial line waits 0.1 s for its end.
 *
 * A notice lives on the chat's screen, which goes when the chat ends (the alternate screen), and
 * a line that comes in the chat's last moments may never be drawn (read, queued, and the display
 * gone before it took it). So the reader also keeps what it reads (the first KEPT_MAX bytes),
 * escaped as it keeps it (txt_escape: control characters shown, as everywhere outside text
 * reaches a terminal), and at the end, once fd 2 is the terminal again (after endwin, before the
 * engine thread is joined) and the reader has drained the pipe into that store, all of it is
 * written there in the order it came: nothing written to stderr while the chat ran is lost, the
 * notices only showed it as it came. The pipe's write end does not block: a writer that outruns
 * the reader (1 MiB of pipe) loses text rather than hangs the engine. An abort (K3_ASSERT) puts
 * fd 2 back and passes on what was kept and what the pipe still holds (its control bytes as '?':
 * a signal handler cannot allocate to escape) before the process dies, so its message is not
 * lost and runs no command on the terminal.
 */
#include "tui-int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <term.h>
#include <termios.h>
#include <unistd.h>

enum { KEPT_MAX = 1 << 20 }; /* bytes of stderr kept for the end (pages are touched as used) */

static struct {
    int           saved; /* the terminal's fd 2 (a dup), -1 when not redirected       */
    int           rd;    /* the pipe's read end                                      */
    pthread_t     th;
    ev_queue     *q;
    atomic_int    gone;   /* the display has ended: no more notices                   */
    char         *kept;   /* (KEPT_MAX) what came, for the terminal at the end          */
    atomic_size_t n_kept; /* bytes of kept written (the reader publishes, on_abort reads) */
    size_t        lost;   /* bytes that came after kept was full                       */
    txt_esc       esc;    /* a character cut between two reads, held for kept          */
} ec = {.saved = -1, .rd = -1};

static void write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* Append s[0..n) to kept, escaped (txt_escape) as it is stored: an abort's handler writes kept
 * as it is, with no escaping of its own (it may not allocate); it wrote a library's line
 * quoting a file's name with OSC 0 raw, and the title changed as k3chat died. */
static void keep(const char *s, size_t n, txt_esc *st) {
    txt_buf e = {0};
    if (txt_escape(&e, st, s, n) || !e.p) {
        ec.lost += n;
        free(e.p);
        return;
    }
    size_t k = atomic_load_explicit(&ec.n_kept, memory_order_relaxed),
           c = e.n < KEPT_MAX - k ? e.n : KEPT_MAX - k;
    memcpy(ec.kept + k, e.p, c);
    atomic_store_explicit(&ec.n_kept, k + c, memory_order_release);
    if (c < e.n)
        ec.lost += n;
    free(e.p);
}

/* Pass on p[0..n) (whole lines, or a partial one that timed out): kept for the end, and a
 * notice while the display runs. Only the reader thread calls this. */
static void emit(const char *p, size_t n) {
    keep(p, n, &ec.esc);
    if (atomic_load(&ec.gone))
        return;
    char   msg[2 * 4096];
    size_t o = 0;
    while (n && (p[n - 1] == '\n' || p[n - 1] == '\r'))
        n--;
    for (size_t i = 0; i < n && o + 16 < sizeof msg;) { /* "stderr: " before each line */
        const char *eol = memchr(p + i, '\n', n - i);
        size_t      len = eol ? (size_t)(eol - (p + i)) : n - i;
        o += (size_t)snprintf(msg + o, sizeof msg - o, "%sstderr: %.*s", o ? "\n" : "", (int)len, p + i);
        i += len + 1;
    }
    if (o)
        ev_push_text(ec.q, EV_INFO, msg);
}

static void *reader(void *ud) {
    (void)ud;
    char   buf[4096];
    size_t n = 0;
    for (;;) {
        struct pollfd p  = {ec.rd, POLLIN, 0};
        int           pr = poll(&p, 1, n ? 100 : -1);
        if (pr < 0 && errno == EINTR)
            continue;
        ssize_t r = 0;
        if (pr > 0) {
            r = read(ec.rd, buf + n, sizeof buf - n);
            if (r < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
        }
        int end = pr < 0 || (pr > 0 && r <= 0); /* every write end closed (or an error) */
        if (r > 0)
            n += (size_t)r;
        size_t cut = n; /* all of it on a timeout, at the end or with the buffer full */
        if (pr > 0 && !end && n < sizeof buf) {
            const char *nl = memrchr(buf, '\n', n);
            cut            = nl ? (size_t)(nl - buf) + 1 : 0;
        }
        if (cut) {
            emit(buf, cut);
            memmove(buf, buf + cut, n - cut);
            n -= cut;
        }
        if (end)
            return NULL;
    }
}

/* ==== fatal signals ===========================================================
 * An abort (K3_ASSERT), a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL) or SIGQUIT from outside ended
 * the process with the terminal as curses had it: the alternate screen, raw mode without echo,
 * the keypad's application mode, mouse reports and bracketed paste all stayed on, and the shell
 * read its keys as escape sequences. Once armed (after initscr: terminfo is loaded), the handler
 * writes the prepared bytes that undo them (rmcup, cnorm, sgr0, rmkx, mouse and paste off) and
 * puts back the settings found before curses (tcsetattr is async-signal-safe), then passes fd 2's
 * text on (below) and ends as the signal would: by its default action, or, for a fault, by the
 * handler that was there before (AddressSanitizer's report) when the instruction runs again. */
static const int fatal_sigs[] = {SIGABRT, SIGQUIT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
enum { N_FATAL = sizeof fatal_sigs / sizeof fatal_sigs[0] };
static struct {
    int              armed, installed, fd;
    struct termios   found;
    char             undo[512]; /* the bytes that put the terminal back */
    size_t           n_undo;
    struct sigaction prev[N_FATAL];
} fx;

static void undo_add(const char *s) {
    if (!s || s == (const char *)-1)
        return; /* not in this terminal's entry */
    size_t n = strlen(s);
    if (fx.n_undo + n < sizeof fx.undo) {
        memcpy(fx.undo + fx.n_undo, s, n);
        fx.n_undo += n;
    }
}

static void on_fatal(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    if (fx.armed) {
        fx.armed = 0;
        write_all(fx.fd, fx.undo, fx.n_undo);
        tcsetattr(fx.fd, TCSANOW, &fx.found);
    }
    if (ec.saved >= 0) {
        char    b[4096];
        ssize_t r;
        dup2(ec.saved, 2);
        write_all(2, ec.kept, atomic_load_explicit(&ec.n_kept, memory_order_acquire));
        while ((r = read(ec.rd, b, sizeof b)) > 0) { /* not read yet: its controls as '?' */
            for (ssize_t i = 0; i < r; i++) {
                unsigned char c = (unsigned char)b[i], d = i + 1 < r ? (unsigned char)b[i + 1] : 0;
                if (c == 0xc2 && d >= 0x80 && d < 0xa0) /* a C1 control, U+0080..U+009F */
                    b[i] = b[i + 1] = '?', i++;
                else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
                    b[i] = '?';
            }
            write_all(2, b, (size_t)r);
        }
        ec.saved = -1;
    }
    int k = 0;
    while (k < N_FATAL && fatal_sigs[k] != sig)
        k++;
    if (sig == SIGABRT || sig == SIGQUIT || k == N_FATAL || fx.prev[k].sa_handler == SIG_IGN) {
        signal(sig, SIG_DFL);
    } else {
        sigaction(sig, &fx.prev[k], NULL);
        if (si && si->si_code > 0)
            return; /* a fault: the instruction faults again, into that handler */
    }
    raise(sig);
}

void tui_fatal_arm(int fd, const struct termios *found) {
    fx.fd     = fd;
    fx.found  = *found;
    fx.n_undo = 0;
    undo_add("\033[?2004l"); /* bracketed paste: ours (tui.c) */
    if (tigetstr("kmous") && tigetstr("kmous") != (char *)-1)
        undo_add("\033[?1006l\033[?1003l\033[?1002l\033[?1000l"); /* curses' xterm mouse modes */
    undo_add(tigetstr("sgr0"));
    undo_add(tigetstr("cnorm"));
    undo_add(tigetstr("rmkx"));
    undo_add(tigetstr("rmcup"));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal;
    sa.sa_flags     = SA_SIGINFO;
    for (int k = 0; k < N_FATAL; k++)
        sigaction(fatal_sigs[k], &sa, fatal_sigs[k] == SIGABRT ? NULL : &fx.prev[k]);
    fx.armed = fx.installed = 1;
}

void tui_fatal_disarm(void) {
    fx.armed = 0;
    if (!fx.installed)
        return;
    fx.installed = 0;
    for (int k = 0; k < N_FATAL; k++)
        if (fatal_sigs[k] != SIGABRT) /* tui_stderr_end's while fd 2 is the pipe */
            sigaction(fatal_sigs[k], &fx.prev[k], NULL);
}

int tui_stderr_begin(ev_queue *q) {
    int p[2];
    if (!isatty(2) || !(ec.kept = malloc(KEPT_MAX)))
        return -1;
    if (pipe2(p, O_CLOEXEC) != 0) {
        free(ec.kept);
        ec.kept = NULL;
        return -1;
    }
    ec.q = q;
    atomic_store(&ec.gone, 0);
    atomic_store(&ec.n_kept, 0);
    ec.esc.n = 0;
    ec.lost  = 0;
    fcntl(p[0], F_SETPIPE_SZ, 1 << 20); /* room for a burst (a loader's debug output) */
    fcntl(p[0], F_SETFL, O_NONBLOCK);   /* the reader polls; on_abort must not block   */
    fcntl(p[1], F_SETFL, O_NONBLOCK);   /* a full pipe loses text, never hangs a writer */
    ec.saved = fcntl(2, F_DUPFD_CLOEXEC, 3);
    ec.rd    = p[0];
    if (ec.saved < 0 || ue_thread_start(&ec.th, reader, NULL) != 0) {
        if (ec.saved >= 0)
            close(ec.saved);
        close(p[0]);
        close(p[1]);
        free(ec.kept);
        ec.kept  = NULL;
        ec.saved = ec.rd = -1;
        return -1;
    }
    fflush(stderr);
    dup2(p[1], 2); /* fd 2 has no close-on-exec: a child would still write to the pipe */
    close(p[1]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal;
    sa.sa_flags     = SA_SIGINFO;
    sigaction(SIGABRT, &sa, NULL);
    return 0;
}

void tui_stderr_end(void) {
    if (ec.saved < 0)
        return;
    fflush(stderr);
    atomic_store(&ec.gone, 1); /* no more notices: the display takes no more events */
    dup2(ec.saved, 2);         /* the last write end closes: the reader drains and ends */
    pthread_join(ec.th, NULL);
    signal(SIGABRT, SIG_DFL);
    /* all that came, in order, escaped as it was kept (keep: what a library wrote may quote a
     * file's or a server's text), with a character cut at the very end */
    if (ec.esc.n) {
        txt_esc held = ec.esc;
        ec.esc.n     = 0;
        keep(held.hold, (size_t)held.n, NULL);
    }
    fwrite(ec.kept, 1, atomic_load(&ec.n_kept), stderr);
    fflush(stderr);
    if (ec.lost)
        fprintf(stderr,
                "k3chat: %zu more bytes came on stderr while the chat ran (the first %d MiB are above)\n",
                ec.lost, KEPT_MAX >> 20);
    close(ec.rd);
    close(ec.saved);
    free(ec.kept);
    ec.kept  = NULL;
    ec.saved = ec.rd = -1;
}
